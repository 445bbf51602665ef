//===- NcclCommunicator.cpp - ranks as GPUs of an MPI job over NCCL -------===//
//
// One NCCL communicator over MPI_COMM_WORLD, one stream for every NCCL call
// (so they run in issue order) and a second stream for host-to-device
// staging copies: a copy from pageable host memory synchronizes its stream
// first, and on the NCCL stream that would wait for pending sends.
//
//===----------------------------------------------------------------------===//

#include "hetplan/runtime/NcclCommunicator.h"
#include "hetplan/runtime/MpiCommunicator.h"

// The C API only: keep Open MPI's / MPICH's C++ bindings out.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <thread>
#include <vector>

namespace hetplan::runtime {

namespace {

constexpr int64_t kMagic = 0x4e43434c48504c4eLL; // "NCCLHPLN"
constexpr int kMaxDims = 10;
constexpr int kHeader = 5 + kMaxDims; // magic, tag, dtype, rank, bytes, dims

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

  /// Waits for the NCCL stream, checking NCCL's asynchronous errors.
  void wait(const char *what) {
    for (int spins = 0;; ++spins) {
      cudaError_t q = cudaStreamQuery(stream);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) cudaCheck(q, what);
      ncclResult_t async = ncclSuccess;
      ncclCheck(ncclCommGetAsyncError(comm, &async), "ncclCommGetAsyncError");
      if (async != ncclSuccess && async != ncclInProgress) ncclCheck(async, what);
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
  void unstage(void *host, const void *d, size_t bytes, const char *what) {
    wait(what);
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
  s.mpi = std::make_unique<MpiCommunicator>();
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
  ncclCommDestroy(s.comm);
  cudaStreamDestroy(s.stream);
  cudaStreamDestroy(s.copies);
}

int NcclCommunicator::rank() const { return state_->rank; }
int NcclCommunicator::size() const { return state_->size; }
int NcclCommunicator::device() const { return state_->device; }

void NcclCommunicator::send(int peer, int64_t tag, const Tensor &tensor) {
  State &s = *state_;
  s.checkPeer(peer);
  s.select();
  if (tensor.defined() && tensor.rank() > kMaxDims)
    throw std::runtime_error("NCCL communicator: rank " + std::to_string(tensor.rank()) + " tensors are not supported (at most " +
                             std::to_string(kMaxDims) + ")");
  int64_t header[kHeader] = {kMagic, tag, int64_t(tensor.dtype()), tensor.defined() ? tensor.rank() : 0,
                             int64_t(tensor.defined() ? tensor.nbytes() : 0)};
  if (tensor.defined())
    for (int64_t d = 0; d < tensor.rank(); ++d) header[5 + d] = tensor.dim(d);
  void *dh = s.stage(header, sizeof header);
  ncclCheck(ncclSend(dh, kHeader, ncclInt64, peer, s.comm, s.stream), "ncclSend (header)");
  s.releaseAfterNccl(dh);
  size_t bytes = size_t(header[4]);
  if (bytes) {
    void *dd = s.stage(tensor.raw(), bytes);
    ncclCheck(ncclSend(dd, bytes, ncclUint8, peer, s.comm, s.stream), "ncclSend");
    s.releaseAfterNccl(dd);
  }
}

Tensor NcclCommunicator::recv(int peer, int64_t tag) {
  State &s = *state_;
  s.checkPeer(peer);
  s.select();
  int64_t header[kHeader] = {};
  void *dh = s.deviceAlloc(sizeof header, s.stream);
  ncclResult_t r = ncclRecv(dh, kHeader, ncclInt64, peer, s.comm, s.stream);
  if (r == ncclSuccess) s.unstage(header, dh, sizeof header, "ncclRecv (header)");
  s.releaseAfterNccl(dh);
  ncclCheck(r, "ncclRecv (header)");
  std::string from = "rank " + std::to_string(s.rank) + ": message from rank " + std::to_string(peer);
  if (header[0] != kMagic || header[3] < 0 || header[3] > kMaxDims || header[4] < 0)
    throw std::runtime_error(from + " has a bad header");
  if (header[1] != tag)
    throw std::runtime_error(from + " has tag " + std::to_string(header[1]) + ", expected " + std::to_string(tag) +
                             " (NCCL messages between a pair arrive in send order)");
  auto dtype = DType(header[2]);
  size_t bytes = size_t(header[4]);
  if (dtype == DType::Undefined) {
    if (bytes) throw std::runtime_error(from + " has a bad header");
    return Tensor();
  }
  Tensor out(dtype, std::vector<int64_t>(header + 5, header + 5 + header[3]));
  if (out.nbytes() != bytes)
    throw std::runtime_error(from + ": byte count " + std::to_string(bytes) + " for " + out.describe());
  if (bytes) {
    void *dd = s.deviceAlloc(bytes, s.stream);
    r = ncclRecv(dd, bytes, ncclUint8, peer, s.comm, s.stream);
    if (r == ncclSuccess) s.unstage(out.raw(), dd, bytes, "ncclRecv");
    s.releaseAfterNccl(dd);
    ncclCheck(r, "ncclRecv");
  }
  return out;
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
  if (s.comm) ncclCommAbort(s.comm);
  s.comm = nullptr;
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

} // namespace hetplan::runtime
