//===- Cudnn.cpp - convolution and pooling with cuDNN ----------------------===//
//
// Calls follow the cuDNN 9 API reference (cudnn_cnn / cudnn_ops, "legacy"
// API): tensors are NCHW-packed float32 with 4 to 5 dims (a 1-D window gets
// a trailing unit dim); convolutions are CUDNN_CROSS_CORRELATION (ONNX's
// Conv), grouped with cudnnSetConvolutionGroupCount; the algorithm is the
// first successful one cudnnGetConvolutionForwardAlgorithm_v7 ranks for the
// shape (cached), with the workspace cudnnGetConvolutionForwardWorkspaceSize
// asks for, allocated stream-ordered.
//
//===----------------------------------------------------------------------===//
#include "Cudnn.h"

// The descriptor API is deprecated in cuDNN 9 (the graph API replaces it);
// cudnn.h warns about it only with CUDNN_WARN_DEPRECATED, left undefined.
#include <cudnn.h>

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace hetplan::runtime::cudnn {

namespace {

void check(cudnnStatus_t st, const char *what) {
  if (st != CUDNN_STATUS_SUCCESS) throw std::runtime_error(std::string(what) + ": " + cudnnGetErrorString(st));
}

/// Descriptors released on scope exit.
struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDesc() { check(cudnnCreateTensorDescriptor(&d), "cudnnCreateTensorDescriptor"); }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
  /// Packed NCHW(D) of `dims` (4 or 5 of them).
  void set(const std::vector<int> &dims) {
    std::vector<int> strides(dims.size(), 1);
    for (size_t i = dims.size() - 1; i-- > 0;) strides[i] = strides[i + 1] * dims[i + 1];
    check(cudnnSetTensorNdDescriptor(d, CUDNN_DATA_FLOAT, int(dims.size()), dims.data(), strides.data()),
          "cudnnSetTensorNdDescriptor");
  }
};
struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  FilterDesc() { check(cudnnCreateFilterDescriptor(&d), "cudnnCreateFilterDescriptor"); }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(d); }
};
struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  ConvDesc() { check(cudnnCreateConvolutionDescriptor(&d), "cudnnCreateConvolutionDescriptor"); }
  ~ConvDesc() { cudnnDestroyConvolutionDescriptor(d); }
};
struct PoolDesc {
  cudnnPoolingDescriptor_t d = nullptr;
  PoolDesc() { check(cudnnCreatePoolingDescriptor(&d), "cudnnCreatePoolingDescriptor"); }
  ~PoolDesc() { cudnnDestroyPoolingDescriptor(d); }
};

bool fitsInt(int64_t v) { return v >= 0 && v <= INT32_MAX; }

/// The spatial window as cuDNN sees it: at least 2 spatial dims (a 1-D
/// window gets a unit one), symmetric padding only. False when padding is
/// asymmetric or a size does not fit an int.
struct Spatial {
  std::vector<int> in, out, k, s, d, pad;
};
bool spatialOf(const cudak::Window &w, Spatial &sp) {
  for (int i = 0; i < w.r; ++i) {
    if (w.pb[i] != w.pe[i]) return false;
    for (int64_t v : {w.in[i], w.out[i], w.k[i], w.s[i], w.d[i], w.pb[i]})
      if (!fitsInt(v)) return false;
    sp.in.push_back(int(w.in[i]));
    sp.out.push_back(int(w.out[i]));
    sp.k.push_back(int(w.k[i]));
    sp.s.push_back(int(w.s[i]));
    sp.d.push_back(int(w.d[i]));
    sp.pad.push_back(int(w.pb[i]));
  }
  if (w.r == 1) {
    sp.in.push_back(1);
    sp.out.push_back(1);
    sp.k.push_back(1);
    sp.s.push_back(1);
    sp.d.push_back(1);
    sp.pad.push_back(0);
  }
  return true;
}

std::vector<int> withBatch(int64_t n, int64_t c, const std::vector<int> &spatial) {
  std::vector<int> dims = {int(n), int(c)};
  dims.insert(dims.end(), spatial.begin(), spatial.end());
  return dims;
}

} // namespace

struct Context::State {
  cudnnHandle_t handle = nullptr;
  struct Algo {
    cudnnConvolutionFwdAlgo_t algo;
    size_t workspace;
    cudnnMathType_t math; // the one the algorithm was ranked under
  };
  std::map<std::string, Algo> algos; // per convolution shape and math
};

Context::Context(cudaStream_t stream) : state_(std::make_unique<State>()) {
  check(cudnnCreate(&state_->handle), "cudnnCreate");
  cudnnStatus_t st = cudnnSetStream(state_->handle, stream);
  if (st != CUDNN_STATUS_SUCCESS) {
    cudnnDestroy(state_->handle);
    check(st, "cudnnSetStream");
  }
}

Context::~Context() { cudnnDestroy(state_->handle); }

bool Context::conv(const Tensor &x, const Tensor &w, int64_t groups, const cudak::Window &win, Math math, Tensor &y,
                   const std::function<Tensor(size_t)> &scratch) {
  Spatial sp;
  if (!spatialOf(win, sp)) return false;
  for (int64_t v : {x.dim(0), x.dim(1), w.dim(0), w.dim(1), y.dim(0), y.dim(1), groups})
    if (!fitsInt(v)) return false;
  TensorDesc xd, yd;
  FilterDesc wd;
  ConvDesc cd;
  xd.set(withBatch(x.dim(0), x.dim(1), sp.in));
  std::vector<int> filter = withBatch(w.dim(0), w.dim(1), sp.k);
  check(cudnnSetFilterNdDescriptor(wd.d, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, int(filter.size()), filter.data()),
        "cudnnSetFilterNdDescriptor");
  check(cudnnSetConvolutionNdDescriptor(cd.d, int(sp.k.size()), sp.pad.data(), sp.s.data(), sp.d.data(),
                                        CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
        "cudnnSetConvolutionNdDescriptor");
  check(cudnnSetConvolutionGroupCount(cd.d, int(groups)), "cudnnSetConvolutionGroupCount");
  // FMA math: no TF32 on Ampere and later, so float32 plans match the CPU.
  cudnnMathType_t mt = math == Math::Fp32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
  check(cudnnSetConvolutionMathType(cd.d, mt), "cudnnSetConvolutionMathType");
  // cuDNN's output size must be ONNX's (it is, for symmetric padding).
  std::vector<int> outDims(sp.in.size() + 2);
  check(cudnnGetConvolutionNdForwardOutputDim(cd.d, xd.d, wd.d, int(outDims.size()), outDims.data()),
        "cudnnGetConvolutionNdForwardOutputDim");
  if (outDims != withBatch(y.dim(0), y.dim(1), sp.out)) return false;
  yd.set(outDims);

  std::string key;
  for (const auto *v : {&sp.in, &sp.k, &sp.s, &sp.d, &sp.pad})
    for (int i : *v) key += std::to_string(i) + ",";
  key += std::to_string(x.dim(0)) + "," + std::to_string(x.dim(1)) + "," + std::to_string(w.dim(0)) + "," +
         std::to_string(groups) + "," + std::to_string(int(mt));
  auto it = state_->algos.find(key);
  if (it == state_->algos.end()) {
    int count = 0;
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    check(cudnnGetConvolutionForwardAlgorithm_v7(state_->handle, xd.d, wd.d, cd.d, yd.d,
                                                 CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, perf),
          "cudnnGetConvolutionForwardAlgorithm_v7");
    // The heuristics may rank an algorithm under another math type than
    // the descriptor's (it reports which); exact FP32 takes only FMA ones.
    int pick = -1;
    for (int i = 0; i < count && pick < 0; ++i)
      if (perf[i].status == CUDNN_STATUS_SUCCESS && (mt != CUDNN_FMA_MATH || perf[i].mathType == CUDNN_FMA_MATH))
        pick = i;
    if (pick < 0) return false; // no engine for this shape: the executor's own path
    State::Algo a{perf[pick].algo, 0, perf[pick].mathType};
    check(cudnnSetConvolutionMathType(cd.d, a.math), "cudnnSetConvolutionMathType");
    check(cudnnGetConvolutionForwardWorkspaceSize(state_->handle, xd.d, wd.d, cd.d, yd.d, a.algo, &a.workspace),
          "cudnnGetConvolutionForwardWorkspaceSize");
    it = state_->algos.emplace(key, a).first;
  }
  check(cudnnSetConvolutionMathType(cd.d, it->second.math), "cudnnSetConvolutionMathType");
  Tensor ws;
  if (it->second.workspace) ws = scratch(it->second.workspace);
  const float one = 1.f, zero = 0.f;
  check(cudnnConvolutionForward(state_->handle, &one, xd.d, x.raw(), wd.d, w.raw(), cd.d, it->second.algo,
                                ws.defined() ? ws.raw() : nullptr, it->second.workspace, &zero, yd.d, y.raw()),
        "cudnnConvolutionForward");
  return true;
}

bool Context::pool(bool max, bool countIncludePad, const Tensor &x, const cudak::Window &win, Tensor &y) {
  Spatial sp;
  if (!spatialOf(win, sp)) return false;
  for (int dil : sp.d)
    if (dil != 1) return false;
  for (int64_t v : {x.dim(0), x.dim(1)})
    if (!fitsInt(v)) return false;
  PoolDesc pd;
  // Max pooling ignores NaNs here as the CPU kernel's comparisons do.
  cudnnPoolingMode_t mode = max ? CUDNN_POOLING_MAX_DETERMINISTIC
                                : countIncludePad ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                                  : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
  check(cudnnSetPoolingNdDescriptor(pd.d, mode, CUDNN_NOT_PROPAGATE_NAN, int(sp.k.size()), sp.k.data(), sp.pad.data(),
                                    sp.s.data()),
        "cudnnSetPoolingNdDescriptor");
  TensorDesc xd, yd;
  xd.set(withBatch(x.dim(0), x.dim(1), sp.in));
  std::vector<int> outDims(sp.in.size() + 2);
  check(cudnnGetPoolingNdForwardOutputDim(pd.d, xd.d, int(outDims.size()), outDims.data()),
        "cudnnGetPoolingNdForwardOutputDim");
  // cuDNN rounds the output size down: ceil_mode windows differ.
  if (outDims != withBatch(y.dim(0), y.dim(1), sp.out)) return false;
  yd.set(outDims);
  const float one = 1.f, zero = 0.f;
  check(cudnnPoolingForward(state_->handle, pd.d, &one, xd.d, x.raw(), &zero, yd.d, y.raw()), "cudnnPoolingForward");
  return true;
}

} // namespace hetplan::runtime::cudnn
