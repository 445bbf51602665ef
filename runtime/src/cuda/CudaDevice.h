//===- CudaDevice.h - one GPU's stream, cuBLAS handle and memory -*- C++ -*-===//
//
// Internal to runtime/src/cuda: what the CUDA executor (forward) and the
// training kernels of a CUDA rank (CudaTraining.cpp: backward, optimizer) share
// on one device: the device index, one non-blocking stream that every
// kernel, copy and cuBLAS call runs on (cublasSetStream), the cuBLAS handle
// and its GEMM math, and stream-ordered allocation (cudaMallocAsync /
// cudaFreeAsync on that stream). A device tensor (Tensor::isDevice) points
// into a StreamMemory: one allocation, the stream it was made on (its
// owner) and, once handed to other streams (NCCL's, another rank's), the
// events that order them (docs/gpu.md, "Device-resident values"):
//   - ready: recorded after its producer; another stream waits on it
//     (cudaStreamWaitEvent) before reading, a host copy synchronizes on it;
//   - uses: recorded on another stream after its last read there; the free
//     waits on them (cudaStreamWaitEvent) and then runs (cudaFreeAsync) on
//     the owner: stream-ordered allocation frees memory in the order of
//     the stream it is freed on, so an access on another stream must be
//     ordered before the free by an event (CUDA runtime API, "Stream
//     Ordered Memory Allocator": all accesses between the allocation and
//     the free in stream order). Memory whose owner is done with it once
//     ready (an NCCL receive's landing) is freed on the stream of its last
//     use instead, after the ready event: freeing it on the NCCL stream
//     would hold that stream's later transfers behind the consumer.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "hetplan/runtime/Tensor.h"

#include "CudaKernels.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace hetplan::runtime::cudart {

inline void cudaCheck(cudaError_t e, const char *what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

inline void blasCheck(cublasStatus_t st, const char *what) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + ": " + cublasGetStatusString(st));
}

inline int blasInt(int64_t v, const char *what) {
  if (v < 0 || v > INT_MAX)
    throw std::runtime_error(std::string(what) + ": dimension " + std::to_string(v) + " exceeds cuBLAS's int range");
  return static_cast<int>(v);
}

/// The operands `ins` (up to 3) broadcast to `out` for the kernels.
inline cudak::Bcast makeBcast(const std::vector<int64_t> &out, const std::vector<const std::vector<int64_t> *> &ins) {
  if (out.size() > size_t(cudak::kMaxRank))
    throw std::runtime_error("rank " + std::to_string(out.size()) + " exceeds the CUDA kernels' " + std::to_string(cudak::kMaxRank));
  cudak::Bcast b;
  b.rank = static_cast<int>(out.size());
  for (size_t d = 0; d < out.size(); ++d) b.shape[d] = out[d];
  for (size_t k = 0; k < ins.size(); ++k) {
    auto st = broadcastStrides(*ins[k], out);
    for (size_t d = 0; d < out.size(); ++d) b.stride[k][d] = st[d];
  }
  return b;
}
/// The strided view (shape, element strides, base offset) for the kernels.
inline cudak::Strided makeStrided(const std::vector<int64_t> &shape, const std::vector<int64_t> &strides, int64_t base) {
  if (shape.size() > size_t(cudak::kMaxRank))
    throw std::runtime_error("rank " + std::to_string(shape.size()) + " exceeds the CUDA kernels' " + std::to_string(cudak::kMaxRank));
  cudak::Strided v;
  v.rank = static_cast<int>(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) { v.shape[d] = shape[d]; v.stride[d] = strides[d]; }
  v.base = base;
  return v;
}

/// Makes `device` current until the end of the scope (then the caller's again).
class DeviceScope {
public:
  explicit DeviceScope(int device) {
    cudaCheck(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) cudaCheck(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceScope() {
    int now = -1;
    if (cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope &) = delete;
  DeviceScope &operator=(const DeviceScope &) = delete;

private:
  int previous_ = 0;
};

/// A CUDA event (no timing) that destroys itself; shared by the tensors
/// whose producer or reader it marks.
struct Event {
  cudaEvent_t event = nullptr;
  Event() { cudaCheck(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreateWithFlags"); }
  ~Event() { cudaEventDestroy(event); } // released once its waits are done (cudaEventDestroy)
  Event(const Event &) = delete;
  Event &operator=(const Event &) = delete;
};
/// An event recorded on `stream` now (the current device must be the stream's).
inline std::shared_ptr<Event> recordEvent(cudaStream_t stream) {
  auto e = std::make_shared<Event>();
  cudaCheck(cudaEventRecord(e->event, stream), "cudaEventRecord");
  return e;
}

/// Bytes of forward values moved between host and device (RankCompute::ValueTransfers).
struct TransferCounts {
  std::atomic<uint64_t> toDevice{0}, toHost{0};
};

/// The device memory of device tensors (see the top of this file).
class StreamMemory final : public DeviceMemory {
public:
  StreamMemory(int device, void *ptr, cudaStream_t owner, std::shared_ptr<TransferCounts> counts)
      : device_(device), ptr_(ptr), owner_(owner), counts_(std::move(counts)) {}
  ~StreamMemory() override {
    int current = -1;
    cudaGetDevice(&current);
    if (current != device_) cudaSetDevice(device_);
    cudaStream_t at = owner_;
    if (ownerDone_ && !uses_.empty()) {
      at = uses_.back().second;
      if (ready_) cudaStreamWaitEvent(at, ready_->event, 0);
    }
    for (const auto &[e, stream] : uses_)
      if (stream != at) cudaStreamWaitEvent(at, e->event, 0);
    cudaFreeAsync(ptr_, at);
    if (current >= 0 && current != device_) cudaSetDevice(current);
  }
  int device() const override { return device_; }
  cudaStream_t owner() const { return owner_; }
  /// The producer is done at `e`; `ownerDone`: the owner stream does not
  /// touch the memory after that (see the top of this file).
  void setReady(std::shared_ptr<Event> e, bool ownerDone = false) {
    std::lock_guard<std::mutex> lock(mutex_);
    ready_ = std::move(e);
    ownerDone_ = ownerDone;
  }
  /// Orders `stream` after the producer. Without a ready event the memory
  /// is only known ready in its owner's order: another stream waits for
  /// everything on the owner so far.
  void waitReady(cudaStream_t stream) {
    std::shared_ptr<Event> e;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      e = ready_;
    }
    if (!e && stream == owner_) return;
    if (!e) {
      DeviceScope scope(device_);
      e = recordEvent(owner_);
    }
    cudaCheck(cudaStreamWaitEvent(stream, e->event, 0), "cudaStreamWaitEvent");
  }
  /// Stream `stream` read the memory until `e` (recorded there): the free waits for it.
  void usedUntil(std::shared_ptr<Event> e, cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    uses_.emplace_back(std::move(e), stream);
  }
  void copyToHost(void *dst, const void *src, size_t bytes) const override {
    std::shared_ptr<Event> e;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      e = ready_;
    }
    DeviceScope scope(device_);
    if (e) cudaCheck(cudaEventSynchronize(e->event), "cudaEventSynchronize");
    else cudaCheck(cudaStreamSynchronize(owner_), "cudaStreamSynchronize");
    // Synchronous: returns once the bytes are in (pageable) host memory.
    cudaCheck(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy (device value to host)");
    if (counts_) counts_->toHost += bytes;
  }

private:
  int device_;
  void *ptr_;
  cudaStream_t owner_;
  std::shared_ptr<TransferCounts> counts_;
  mutable std::mutex mutex_;
  std::shared_ptr<Event> ready_;
  bool ownerDone_ = false;
  std::vector<std::pair<std::shared_ptr<Event>, cudaStream_t>> uses_;
};

/// The StreamMemory of a device tensor, null for host tensors and device
/// memory made elsewhere.
inline StreamMemory *streamMemory(const Tensor &t) {
  return t.isDevice() ? dynamic_cast<StreamMemory *>(t.deviceMemory().get()) : nullptr;
}

/// A device tensor over new stream-ordered memory on `stream` of `device`.
inline Tensor allocOn(int device, cudaStream_t stream, DType dt, const std::vector<int64_t> &shape,
                      std::shared_ptr<TransferCounts> counts = nullptr) {
  for (int64_t d : shape)
    if (d < 0) throw std::runtime_error("negative dimension in shape " + shapeString(shape));
  size_t bytes = std::max<size_t>(size_t(shapeNumel(shape)) * dtypeSize(dt), 1);
  void *p = nullptr;
  cudaCheck(cudaMallocAsync(&p, bytes, stream), "cudaMallocAsync");
  return Tensor::onDevice(dt, shape, p, std::make_shared<StreamMemory>(device, p, stream, std::move(counts)));
}

struct Device {
  int device = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  /// GEMM math (CudaExecutor::setPrecision): CUBLAS_COMPUTE_32F is plain
  /// FP32 (no TF32 while the handle's math mode is CUBLAS_DEFAULT_MATH);
  /// the FAST_* types round the float32 operands to TF32 / FP16 / BF16 for
  /// tensor cores and accumulate in FP32 (cuBLAS guide, cublasGemmEx,
  /// cublasComputeType_t).
  cublasComputeType_t gemmCompute = CUBLAS_COMPUTE_32F;

  /// Forward values moved between host and device (valueUpload, valueDownload, host copies of device tensors).
  std::shared_ptr<TransferCounts> counts = std::make_shared<TransferCounts>();

  /// A device tensor of new memory on this stream.
  Tensor alloc(DType dt, const std::vector<int64_t> &shape) { return allocOn(device, stream, dt, shape, counts); }
  /// alloc, then zeros (cudaMemsetAsync).
  Tensor zeros(DType dt, const std::vector<int64_t> &shape) {
    Tensor d = alloc(dt, shape);
    if (d.nbytes()) cudaCheck(cudaMemsetAsync(d.raw(), 0, d.nbytes(), stream), "cudaMemsetAsync");
    return d;
  }
  Tensor upload(const Tensor &h) {
    Tensor d = alloc(h.dtype(), h.shape());
    if (h.nbytes())
      cudaCheck(cudaMemcpyAsync(d.raw(), h.raw(), h.nbytes(), cudaMemcpyHostToDevice, stream), "upload (cudaMemcpyAsync)");
    return d;
  }
  /// A host copy; waits for the stream.
  Tensor download(const Tensor &d) {
    Tensor h(d.dtype(), d.shape());
    if (d.nbytes())
      cudaCheck(cudaMemcpyAsync(h.raw(), d.raw(), d.nbytes(), cudaMemcpyDeviceToHost, stream), "download (cudaMemcpyAsync)");
    cudaCheck(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    return h;
  }
  /// upload / download of a forward value (counted).
  Tensor valueUpload(const Tensor &h) {
    counts->toDevice += h.nbytes();
    return upload(h);
  }
  Tensor valueDownload(const Tensor &d) {
    counts->toHost += d.nbytes();
    return download(d);
  }
  /// A device value for this stream: `t` itself when it is in this
  /// device's memory (ordered after its producer; a read of another
  /// stream's memory is listed in `foreign`, for markRead, which keeps it
  /// alive until then), an upload (counted) of a host tensor or of a host
  /// copy of another device's memory (pool memory is not made accessible
  /// to peers here: cudaMemPoolSetAccess).
  Tensor deviceValue(const Tensor &t, std::vector<std::shared_ptr<StreamMemory>> &foreign) {
    if (!t.isDevice()) return valueUpload(t);
    auto m = std::dynamic_pointer_cast<StreamMemory>(t.deviceMemory());
    if (!m) throw std::runtime_error("device tensor of unknown memory");
    if (m->device() != device) return valueUpload(t.toHost());
    m->waitReady(stream);
    if (m->owner() != stream) foreign.push_back(std::move(m));
    return t;
  }
  /// The reads of `foreign` memory enqueued so far on this stream precede its free.
  void markRead(std::vector<std::shared_ptr<StreamMemory>> &foreign) {
    if (foreign.empty()) return;
    std::shared_ptr<Event> e = recordEvent(stream);
    for (const auto &m : foreign) m->usedUntil(e, stream);
    foreign.clear();
  }
  Tensor copyDevice(const Tensor &src) {
    Tensor d = alloc(src.dtype(), src.shape());
    if (src.nbytes())
      cudaCheck(cudaMemcpyAsync(d.raw(), src.raw(), src.nbytes(), cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync");
    return d;
  }

  /// Column-major C = op(A) op(B) on float32 with this device's math:
  /// cublasSgemm(StridedBatched)'s arguments through cublasGemm(StridedBatched)Ex.
  void sgemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float *alpha, const float *A,
             int lda, const float *B, int ldb, const float *beta, float *C, int ldc) {
    blasCheck(cublasGemmEx(blas, ta, tb, m, n, k, alpha, A, CUDA_R_32F, lda, B, CUDA_R_32F, ldb, beta, C, CUDA_R_32F,
                           ldc, gemmCompute, CUBLAS_GEMM_DEFAULT),
              "cublasGemmEx");
  }
  void sgemmBatched(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float *alpha,
                    const float *A, int lda, long long sa, const float *B, int ldb, long long sb, const float *beta,
                    float *C, int ldc, long long sc, int batch) {
    blasCheck(cublasGemmStridedBatchedEx(blas, ta, tb, m, n, k, alpha, A, CUDA_R_32F, lda, sa, B, CUDA_R_32F, ldb, sb,
                                         beta, C, CUDA_R_32F, ldc, sc, batch, gemmCompute, CUBLAS_GEMM_DEFAULT),
              "cublasGemmStridedBatchedEx");
  }
  /// Row-major C[M, N] = alpha op(A) op(B) + beta C (cpu::gemm's
  /// arguments: op(A) is M x K, lda/ldb/ldc row strides): the column-major
  /// C^T = op(B)^T op(A)^T, so cuBLAS gets B first with m = N, n = M.
  void rowGemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
               const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    sgemm(tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, blasInt(N, "GEMM"), blasInt(M, "GEMM"),
          blasInt(K, "GEMM"), &alpha, B, blasInt(ldb, "GEMM ldb"), A, blasInt(lda, "GEMM lda"), &beta, C,
          blasInt(ldc, "GEMM ldc"));
  }
  /// rowGemm over `batch` matrices strided by sA, sB, sC elements.
  void rowGemmBatched(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                      int64_t sA, const float *B, int64_t ldb, int64_t sB, float beta, float *C, int64_t ldc,
                      int64_t sC, int64_t batch) {
    sgemmBatched(tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, blasInt(N, "GEMM"),
                 blasInt(M, "GEMM"), blasInt(K, "GEMM"), &alpha, B, blasInt(ldb, "GEMM ldb"), sB, A,
                 blasInt(lda, "GEMM lda"), sA, &beta, C, blasInt(ldc, "GEMM ldc"), sC, blasInt(batch, "GEMM batch"));
  }
};

} // namespace hetplan::runtime::cudart
