//===- NcclCommunicator.cpp - ranks as GPUs of an MPI job over NCCL -------===//
//
// One NCCL communicator over MPI_COMM_WORLD, one stream for every NCCL call
// (so they run in issue order; compute runs on the executor's own stream,
// so transfers overlap it) and a second stream for host-to-device staging
// copies: a copy from pageable host memory synchronizes its stream first,
// and on the NCCL stream that would wait for pending sends. Point-to-point
// follows the NCCL user guide's "Point-to-point communication": ncclSend /
// ncclRecv need equal counts on both sides and block the GPU until the
// peer posts the other end, so operations that must progress together are
// fused in ncclGroupStart/ncclGroupEnd (Communicator::groupStart). Within a
// group, calls to the same peer run in order (the guide's one exception),
// as the sequence numbers below require; a send and a receive with the same
// peer progress together (the guide's Sendrecv). Stream work enqueued inside
// a group (staging copies' waits, stream-ordered allocations) precedes the
// group's kernels, which launch at ncclGroupEnd; nothing inside a group
// synchronizes the stream (the guide's caution on groups).
//
// Device tensors (device-resident values, docs/gpu.md) go without staging:
// the NCCL stream waits (cudaStreamWaitEvent) for the event their
// producer recorded, ncclSend reads them in place, and an event recorded
// after the send orders their free (CudaDevice.h, StreamMemory). A device
// receive (recvDeviceInGroup) lands in memory allocated on the NCCL stream,
// ready at an event recorded after the group, which its consumer's stream
// waits for (and frees it on, after its reads). A group without host
// landings returns without waiting for the stream (NCCL user guide, "CUDA
// stream semantics": calls return once enqueued; inside a group, once
// ncclGroupEnd returns), so the rank's next FORWARD overlaps the transfer;
// host landings (shapes, flags, gradients, collectives) wait as before.
//
//===----------------------------------------------------------------------===//

#include "hetplan/runtime/NcclCommunicator.h"
#include "hetplan/runtime/MpiCommunicator.h"

#include "../exec/Training.h"
#include "CudaDevice.h"

// The C API only: keep Open MPI's / MPICH's C++ bindings out.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <map>
#include <set>
#include <thread>
#include <vector>

namespace hetplan::runtime {

namespace {

constexpr int64_t kMagic = 0x4e43434c48504c4eLL; // "NCCLHPLN"

void cudaCheck(cudaError_t e, const char *what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("NCCL communicator: ") + what + ": " + cudaGetErrorName(e) + " (" +
                             cudaGetErrorString(e) + ")");
}

void ncclCheck(ncclResult_t r, const char *what) {
  if (r != ncclSuccess)
    throw std::runtime_error(std::string("NCCL communicator: ") + what + ": " + ncclGetErrorString(r));
}

void mpiCheck(int rc, const char *what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw std::runtime_error(std::string("NCCL communicator: ") + what + ": " + std::string(msg, size_t(len)));
}

} // namespace

struct NcclCommunicator::State {
  std::unique_ptr<MpiCommunicator> mpi; // MPI_Init/MPI_Finalize, rank and size
  int rank = 0, size = 1, device = 0;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr; // every NCCL call
  cudaStream_t copies = nullptr; // host-to-device staging

  void select() const { cudaCheck(cudaSetDevice(device), "cudaSetDevice"); }

  /// Communicators of groups of ranks (groupAllReduceSum), by member list.
  std::map<std::vector<int>, ncclComm_t> groupComms;

  /// Waits for the NCCL stream, checking NCCL's asynchronous errors (of
  /// `other` too, a group's communicator, when given).
  void wait(const char *what, ncclComm_t other = nullptr) {
    for (int spins = 0;; ++spins) {
      cudaError_t q = cudaStreamQuery(stream);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) cudaCheck(q, what);
      ncclResult_t async = ncclSuccess;
      for (ncclComm_t c : {comm, other}) {
        if (!c) continue;
        ncclCheck(ncclCommGetAsyncError(c, &async), "ncclCommGetAsyncError");
        if (async != ncclSuccess && async != ncclInProgress) ncclCheck(async, what);
      }
      if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
      else std::this_thread::yield();
    }
  }

  /// A device buffer freed (stream-ordered) after the NCCL stream's work so far.
  void *deviceAlloc(size_t bytes, cudaStream_t s) {
    void *p = nullptr;
    cudaCheck(cudaMallocAsync(&p, std::max<size_t>(bytes, 1), s), "cudaMallocAsync");
    return p;
  }
  void releaseAfterNccl(void *p) { cudaCheck(cudaFreeAsync(p, stream), "cudaFreeAsync"); }
  /// Inside an NCCL group the kernels launch at ncclGroupEnd: buffers of
  /// the group are released after it.
  std::vector<void *> groupBuffers;
  void release(void *p, bool grouped) {
    if (grouped) groupBuffers.push_back(p);
    else releaseAfterNccl(p);
  }
  /// Device memory that the open group's ncclSends read: an event after
  /// ncclGroupEnd orders its free.
  std::vector<std::shared_ptr<cudart::StreamMemory>> groupReads;
  /// The open group's device receives (recvDeviceInGroup).
  std::set<Tensor *> deviceOuts;
  /// Per peer: sequence numbers of the next message sent / expected.
  std::map<int, int64_t> sendSeq, recvSeq;

  /// Copies host bytes to a new device buffer; the NCCL stream waits for it.
  void *stage(const void *host, size_t bytes) {
    void *d = deviceAlloc(bytes, copies);
    if (bytes) cudaCheck(cudaMemcpyAsync(d, host, bytes, cudaMemcpyHostToDevice, copies), "cudaMemcpyAsync (to device)");
    cudaEvent_t done;
    cudaCheck(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
    cudaError_t e = cudaEventRecord(done, copies);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(stream, done, 0);
    cudaEventDestroy(done); // released once the wait has been satisfied
    cudaCheck(e, "cudaStreamWaitEvent");
    return d;
  }

  /// Copies a device buffer back after the NCCL stream's work (waited first).
  void unstage(void *host, const void *d, size_t bytes, const char *what, ncclComm_t other = nullptr) {
    wait(what, other);
    if (bytes) cudaCheck(cudaMemcpyAsync(host, d, bytes, cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync (to host)");
    cudaCheck(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  }

  void checkPeer(int peer) const {
    if (peer < 0 || peer >= size || peer == rank)
      throw std::runtime_error("rank " + std::to_string(rank) + ": bad peer " + std::to_string(peer));
  }
};

NcclCommunicator::NcclCommunicator() : state_(std::make_unique<State>()) {
  State &s = *state_;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    cudaGetLastError();
    throw std::runtime_error(std::string("no CUDA device: ") +
                             (err != cudaSuccess ? cudaGetErrorString(err) : "cudaGetDeviceCount found none"));
  }
  s.mpi = std::make_unique<MpiCommunicator>(/*rendezvous=*/false);
  s.rank = s.mpi->rank();
  s.size = s.mpi->size();
  MPI_Comm local;
  mpiCheck(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, s.rank, MPI_INFO_NULL, &local),
           "MPI_Comm_split_type");
  int localRank = 0;
  MPI_Comm_rank(local, &localRank);
  MPI_Comm_free(&local);
  s.device = localRank % count;
  s.select();
  ncclUniqueId id;
  if (s.rank == 0) ncclCheck(ncclGetUniqueId(&id), "ncclGetUniqueId");
  mpiCheck(MPI_Bcast(&id, int(sizeof id), MPI_BYTE, 0, MPI_COMM_WORLD), "MPI_Bcast (NCCL id)");
  cudaCheck(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking), "cudaStreamCreate");
  cudaCheck(cudaStreamCreateWithFlags(&s.copies, cudaStreamNonBlocking), "cudaStreamCreate");
  ncclResult_t r = ncclCommInitRank(&s.comm, s.size, id, s.rank);
  if (r != ncclSuccess) {
    cudaStreamDestroy(s.stream);
    cudaStreamDestroy(s.copies);
    s.comm = nullptr;
    ncclCheck(r, "ncclCommInitRank");
  }
}

NcclCommunicator::~NcclCommunicator() {
  State &s = *state_;
  if (!s.comm) return;
  try {
    s.select();
    s.wait("pending sends");
  } catch (const std::exception &e) {
    std::fprintf(stderr, "rank %d: %s\n", s.rank, e.what());
  }
  for (auto &[group, c] : s.groupComms) ncclCommDestroy(c);
  ncclCommDestroy(s.comm);
  cudaStreamDestroy(s.stream);
  cudaStreamDestroy(s.copies);
}

int NcclCommunicator::rank() const { return state_->rank; }
int NcclCommunicator::size() const { return state_->size; }
int NcclCommunicator::device() const { return state_->device; }

// A message is a header over MPI (buffered: MPI_Isend of a copy, matched by
// tag) and its bytes over NCCL. The receiver learns the byte count from the
// header before it posts ncclRecv (NCCL needs equal counts on both sides),
// and the header never waits for the receiver, so only the bytes follow
// NCCL's rules: unbuffered, and matched by order between a pair -- hence
// the sequence number, checked on arrival.
namespace {
constexpr int kFixed = 6; // magic, tag, seq, dtype, rank, bytes; then dims
}

void NcclCommunicator::send(int peer, int64_t tag, const Tensor &tensor) {
  State &s = *state_;
  s.checkPeer(peer);
  s.select();
  int64_t dims = tensor.defined() ? tensor.rank() : 0;
  size_t bytes = tensor.defined() ? tensor.nbytes() : 0;
  Tensor header(DType::Int64, {kFixed + dims});
  int64_t *h = header.data<int64_t>();
  h[0] = kMagic;
  h[1] = tag;
  h[2] = s.sendSeq[peer]++;
  h[3] = int64_t(tensor.dtype());
  h[4] = dims;
  h[5] = int64_t(bytes);
  for (int64_t d = 0; d < dims; ++d) h[kFixed + d] = tensor.dim(d);
  s.mpi->send(peer, tag, header);
  if (!bytes) return;
  auto memory = std::dynamic_pointer_cast<cudart::StreamMemory>(tensor.deviceMemory());
  if (memory && memory->device() == s.device) {
    // In place, after its producer; the send precedes the memory's free.
    memory->waitReady(s.stream);
    ncclCheck(ncclSend(tensor.raw(), bytes, ncclUint8, peer, s.comm, s.stream), "ncclSend");
    if (inGroup_) s.groupReads.push_back(std::move(memory));
    else memory->usedUntil(cudart::recordEvent(s.stream), s.stream);
    return;
  }
  Tensor host = tensor.toHost(); // another device's memory: host-staged
  void *dd = s.stage(host.raw(), bytes);
  ncclCheck(ncclSend(dd, bytes, ncclUint8, peer, s.comm, s.stream), "ncclSend");
  s.release(dd, inGroup_);
}

/// Takes the next header from `peer` (MPI, blocking) and checks it: the
/// tensor to fill (without bytes yet) and its byte count.
static Tensor readHeader(MpiCommunicator &mpi, int me, int peer, int64_t tag, int64_t expectedSeq, size_t &bytes) {
  Tensor header = mpi.recv(peer, tag);
  std::string from = "rank " + std::to_string(me) + ": message from rank " + std::to_string(peer);
  const int64_t n = header.dtype() == DType::Int64 ? header.numel() : 0;
  const int64_t *h = n ? header.data<int64_t>() : nullptr;
  if (n < kFixed || h[0] != kMagic || h[4] < 0 || h[4] + kFixed != n || h[5] < 0)
    throw std::runtime_error(from + " has a bad header");
  if (h[1] != tag || h[2] != expectedSeq)
    throw std::runtime_error(from + " (tag " + std::to_string(h[1]) + ", message " + std::to_string(h[2]) +
                             ") arrives where tag " + std::to_string(tag) + ", message " + std::to_string(expectedSeq) +
                             " was expected: NCCL pairs sends and receives in order, so a rank must receive a peer's "
                             "messages in the order they were sent");
  auto dtype = DType(h[3]);
  bytes = size_t(h[5]);
  if (dtype == DType::Undefined) {
    if (bytes) throw std::runtime_error(from + " has a bad header");
    return Tensor();
  }
  Tensor out(dtype, std::vector<int64_t>(h + kFixed, h + n));
  if (out.nbytes() != bytes)
    throw std::runtime_error(from + ": byte count " + std::to_string(bytes) + " for " + out.describe());
  return out;
}

Tensor NcclCommunicator::recv(int peer, int64_t tag) {
  Tensor out;
  if (inGroup_) throw std::runtime_error("NCCL communicator: recv inside a group (use recvInGroup)");
  groupStart();
  try {
    recvInGroup(peer, tag, &out);
  } catch (...) {
    groupRecvs_.clear();
    inGroup_ = false;
    ncclGroupEnd();
    throw;
  }
  groupEnd();
  return out;
}

void NcclCommunicator::recvDeviceInGroup(int peer, int64_t tag, Tensor *out) {
  if (!inGroup_) {
    groupStart();
    try {
      recvDeviceInGroup(peer, tag, out);
    } catch (...) {
      groupRecvs_.clear();
      state_->deviceOuts.clear();
      inGroup_ = false;
      ncclGroupEnd();
      throw;
    }
    groupEnd();
    return;
  }
  state_->deviceOuts.insert(out);
  recvInGroup(peer, tag, out);
}

void NcclCommunicator::groupStart() {
  Communicator::groupStart();
  state_->select();
  ncclCheck(ncclGroupStart(), "ncclGroupStart");
}

void NcclCommunicator::groupEnd() {
  State &s = *state_;
  if (!inGroup_) throw std::runtime_error("rank " + std::to_string(s.rank) + ": groupEnd without groupStart");
  inGroup_ = false;
  auto recvs = std::move(groupRecvs_);
  groupRecvs_.clear();
  std::set<Tensor *> deviceOuts = std::move(s.deviceOuts);
  s.deviceOuts.clear();
  auto reads = std::move(s.groupReads);
  s.groupReads.clear();
  s.select();
  // The group's sends are posted (headers sent, ncclSend recorded); now the
  // receives: each header first (every peer sends its headers when it
  // reaches its group, never waiting), then ncclRecv into a device buffer:
  // a staging one for a host receive, the tensor's own for a device one.
  struct Landing {
    Tensor *out;
    void *device;
    size_t bytes;
  };
  std::vector<Landing> landings;
  std::vector<cudart::StreamMemory *> landed; // device receives
  ncclResult_t r = ncclSuccess;
  std::string error;
  try {
    for (auto &[peer, tag, out] : recvs) {
      size_t bytes = 0;
      *out = readHeader(*s.mpi, s.rank, peer, tag, s.recvSeq[peer]++, bytes);
      if (!bytes) continue;
      void *d = nullptr;
      if (deviceOuts.count(out)) {
        *out = cudart::allocOn(s.device, s.stream, out->dtype(), out->shape());
        landed.push_back(cudart::streamMemory(*out));
        d = out->raw();
      } else {
        d = s.deviceAlloc(bytes, s.stream);
        landings.push_back({out, d, bytes});
      }
      r = ncclRecv(d, bytes, ncclUint8, peer, s.comm, s.stream);
      if (r != ncclSuccess) break;
    }
  } catch (const std::exception &e) {
    error = e.what();
  }
  ncclResult_t end = ncclGroupEnd();
  if (r == ncclSuccess) r = end;
  if (error.empty() && r == ncclSuccess) {
    try {
      // After the group's kernels: device receives are ready, and the
      // memory its sends read may be freed.
      if (!landed.empty() || !reads.empty()) {
        std::shared_ptr<cudart::Event> done = cudart::recordEvent(s.stream);
        for (cudart::StreamMemory *m : landed) m->setReady(done, /*ownerDone=*/true);
        for (const auto &m : reads) m->usedUntil(done, s.stream);
      }
      if (!landings.empty()) { // host receives: wait for the group
        s.wait("ncclSend/ncclRecv group");
        for (const Landing &l : landings)
          cudaCheck(cudaMemcpyAsync(l.out->raw(), l.device, l.bytes, cudaMemcpyDeviceToHost, s.stream),
                    "cudaMemcpyAsync (to host)");
        cudaCheck(cudaStreamSynchronize(s.stream), "cudaStreamSynchronize");
      }
    } catch (const std::exception &e) {
      error = e.what();
    }
  }
  // Buffers go back after the group's kernels (stream order): freeing one
  // before ncclGroupEnd would free it before the transfer that uses it.
  for (const Landing &l : landings) s.releaseAfterNccl(l.device);
  for (void *p : s.groupBuffers) s.releaseAfterNccl(p);
  s.groupBuffers.clear();
  if (!error.empty()) throw std::runtime_error(error);
  ncclCheck(r, "ncclSend/ncclRecv group");
}

void NcclCommunicator::barrier() {
  State &s = *state_;
  s.select();
  // NCCL has no barrier: a one-element all-reduce, then wait for it (and
  // every send before it).
  float one = 1.f;
  void *d = s.stage(&one, sizeof one);
  ncclResult_t r = ncclAllReduce(d, d, 1, ncclFloat, ncclSum, s.comm, s.stream);
  if (r == ncclSuccess) s.wait("barrier (ncclAllReduce)");
  s.releaseAfterNccl(d);
  ncclCheck(r, "barrier (ncclAllReduce)");
}

void NcclCommunicator::allReduceSum(Tensor &tensor) {
  State &s = *state_;
  ncclDataType_t type;
  if (tensor.dtype() == DType::Float32) type = ncclFloat;
  else if (tensor.dtype() == DType::Float64) type = ncclDouble;
  else throw std::runtime_error("allReduceSum: " + tensor.describe() + " is not float32 or float64");
  s.select();
  if (tensor.isView()) tensor = tensor.clone(); // in place: never write into someone else's bytes
  size_t bytes = tensor.nbytes();
  void *d = s.stage(tensor.raw(), bytes);
  ncclResult_t r = ncclAllReduce(d, d, size_t(tensor.numel()), type, ncclSum, s.comm, s.stream);
  if (r == ncclSuccess) s.unstage(tensor.raw(), d, bytes, "ncclAllReduce");
  s.releaseAfterNccl(d);
  ncclCheck(r, "ncclAllReduce");
}

// Gradient sums: NCCL's own all-reduce over a communicator of the group's
// ranks (NCCL user guide, "Collective operations", "Creating a
// communicator"): ncclGetUniqueId on the group's lowest rank, the id to the
// other members (over MPI, as the world's id), ncclCommInitRank by each
// member with its index in the group; the communicator is kept for the
// group's later sums. Members call a group's sums in the same order (the
// plan executor's sum groups are in one order on every rank), as NCCL
// requires of collectives on one communicator.
void NcclCommunicator::groupAllReduceSum(const std::vector<int> &group, const std::vector<Tensor *> &tensors,
                                         int64_t tag) {
  State &s = *state_;
  if (group.size() <= 1 || tensors.empty()) return;
  if (!std::is_sorted(group.begin(), group.end()) || std::adjacent_find(group.begin(), group.end()) != group.end() ||
      group.front() < 0 || group.back() >= s.size)
    throw std::runtime_error("groupAllReduceSum: the group must list distinct ranks in order");
  auto mine = std::find(group.begin(), group.end(), s.rank);
  if (mine == group.end())
    throw std::runtime_error("groupAllReduceSum: rank " + std::to_string(s.rank) + " is not in the group");
  if (inGroup_) throw std::runtime_error("groupAllReduceSum inside a communicator group");
  Tensor flat = train::flattenForSum(tensors);
  s.select();
  ncclComm_t comm = s.comm;
  if (int(group.size()) != s.size) {
    auto it = s.groupComms.find(group);
    if (it == s.groupComms.end()) {
      Tensor id(DType::UInt8, {int64_t(sizeof(ncclUniqueId))});
      if (s.rank == group.front()) {
        ncclUniqueId uid;
        ncclCheck(ncclGetUniqueId(&uid), "ncclGetUniqueId (group)");
        std::memcpy(id.raw(), &uid, sizeof uid);
        for (size_t k = 1; k < group.size(); ++k) s.mpi->send(group[k], tag, id);
      } else {
        id = s.mpi->recv(group.front(), tag);
        if (id.nbytes() != sizeof(ncclUniqueId)) throw std::runtime_error("groupAllReduceSum: bad NCCL id message");
      }
      ncclUniqueId uid;
      std::memcpy(&uid, id.raw(), sizeof uid);
      ncclComm_t made = nullptr;
      ncclCheck(ncclCommInitRank(&made, int(group.size()), uid, int(mine - group.begin())),
                "ncclCommInitRank (group)");
      it = s.groupComms.emplace(group, made).first;
    }
    comm = it->second;
  }
  size_t bytes = flat.nbytes();
  void *d = s.stage(flat.raw(), bytes);
  ncclResult_t r = ncclAllReduce(d, d, size_t(flat.numel()), flat.dtype() == DType::Float32 ? ncclFloat : ncclDouble,
                                 ncclSum, comm, s.stream);
  if (r == ncclSuccess) s.unstage(flat.raw(), d, bytes, "ncclAllReduce (gradient sum)", comm);
  s.releaseAfterNccl(d);
  ncclCheck(r, "ncclAllReduce (gradient sum)");
  train::unflattenSum(flat, tensors);
}

// Group collectives: one NCCL group of point-to-point calls (ncclSend /
// ncclRecv between every pair of members, raw bytes, no headers: the
// counts are known to all), so the exchanges cannot wait on each other.
// Summing is on the host, in group order (as the default implementation).
Tensor NcclCommunicator::reduceScatterSum(const std::vector<int> &group, const Tensor &in,
                                          const std::vector<int64_t> &counts, int64_t /*tag*/) {
  State &s = *state_;
  size_t me = 0;
  std::vector<int64_t> off = collectiveOffsets(*this, group, counts, me, "reduceScatterSum");
  if (in.dtype() != DType::Float32 || in.numel() != off.back())
    throw std::runtime_error("reduceScatterSum: " + in.describe() + " is not " + std::to_string(off.back()) +
                             " float32 elements");
  s.select();
  size_t n = size_t(counts[me]), G = group.size();
  char *din = static_cast<char *>(s.stage(in.raw(), in.nbytes()));
  char *dparts = static_cast<char *>(s.deviceAlloc(n * G * sizeof(float), s.stream));
  ncclResult_t r = ncclGroupStart();
  for (size_t k = 0; k < G && r == ncclSuccess; ++k) {
    if (k == me) continue;
    if (counts[k]) r = ncclSend(din + size_t(off[k]) * sizeof(float), size_t(counts[k]), ncclFloat, group[k], s.comm, s.stream);
    if (r == ncclSuccess && n) r = ncclRecv(dparts + k * n * sizeof(float), n, ncclFloat, group[k], s.comm, s.stream);
  }
  ncclResult_t end = ncclGroupEnd();
  if (r == ncclSuccess) r = end;
  std::vector<float> parts(n * G);
  if (r == ncclSuccess) s.unstage(parts.data(), dparts, parts.size() * sizeof(float), "reduce-scatter (ncclSend/ncclRecv)");
  s.releaseAfterNccl(din);
  s.releaseAfterNccl(dparts);
  ncclCheck(r, "reduce-scatter (ncclSend/ncclRecv)");
  Tensor out(DType::Float32, {int64_t(n)});
  float *o = out.data<float>();
  for (size_t k = 0; k < G; ++k) {
    const float *src = k == me ? in.data<float>() + off[me] : parts.data() + k * n;
    for (size_t i = 0; i < n; ++i) o[i] += src[i];
  }
  return out;
}

Tensor NcclCommunicator::allGather(const std::vector<int> &group, const Tensor &mine,
                                   const std::vector<int64_t> &counts, int64_t /*tag*/) {
  State &s = *state_;
  size_t me = 0;
  std::vector<int64_t> off = collectiveOffsets(*this, group, counts, me, "allGather");
  if (mine.numel() != counts[me])
    throw std::runtime_error("allGather: rank " + std::to_string(s.rank) + " passed " + mine.describe() +
                             ", expected " + std::to_string(counts[me]) + " elements");
  s.select();
  size_t e = dtypeSize(mine.dtype());
  Tensor out(mine.dtype(), {off.back()});
  char *dmine = static_cast<char *>(s.stage(mine.raw(), mine.nbytes()));
  char *dout = static_cast<char *>(s.deviceAlloc(out.nbytes(), s.stream));
  ncclResult_t r = ncclGroupStart();
  for (size_t k = 0; k < group.size() && r == ncclSuccess; ++k) {
    if (k == me) continue;
    if (mine.nbytes()) r = ncclSend(dmine, mine.nbytes(), ncclUint8, group[k], s.comm, s.stream);
    if (r == ncclSuccess && counts[k])
      r = ncclRecv(dout + size_t(off[k]) * e, size_t(counts[k]) * e, ncclUint8, group[k], s.comm, s.stream);
  }
  ncclResult_t end = ncclGroupEnd();
  if (r == ncclSuccess) r = end;
  if (r == ncclSuccess) s.unstage(out.raw(), dout, out.nbytes(), "all-gather (ncclSend/ncclRecv)");
  s.releaseAfterNccl(dmine);
  s.releaseAfterNccl(dout);
  ncclCheck(r, "all-gather (ncclSend/ncclRecv)");
  if (mine.nbytes()) std::memcpy(static_cast<char *>(out.raw()) + size_t(off[me]) * e, mine.raw(), mine.nbytes());
  return out;
}

void NcclCommunicator::abort(const std::string &why) {
  State &s = *state_;
  std::fprintf(stderr, "rank %d: aborting the NCCL/MPI job: %s\n", s.rank, why.c_str());
  std::fflush(stderr);
  for (auto &[group, c] : s.groupComms) ncclCommAbort(c);
  s.groupComms.clear();
  if (s.comm) ncclCommAbort(s.comm);
  s.comm = nullptr;
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

} // namespace hetplan::runtime
