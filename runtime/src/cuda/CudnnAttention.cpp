//===- CudnnAttention.cpp - fused attention with cuDNN's graph API ---------===//
//
// Every call follows the cuDNN 9 backend API reference (cudnn_graph.h):
// descriptors are made with cudnnBackendCreateDescriptor, their attributes
// set with cudnnBackendSetAttribute (name, type, count, values) and
// cudnnBackendFinalize'd before use; the operation graph's engine configs
// come from CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR in CUDNN_HEUR_MODE_A, and
// the first whose execution plan finalizes is kept for the shape. The graph
// is the one cuDNN's flash attention forward is documented to fuse (the
// developer guide's "Fused Flash Attention fprop" pattern, which
// cudnn-frontend's SDPA node emits for inference):
//
//   S  = matmul(Q, Kᵀ)                  [b, h, s_q, s_kv]  float, virtual
//   S1 = S * scale                      scale: a by-value float [1, 1, 1, 1]
//   S2 = S1 + bias                      (optional) bias [b|1, h|1, s_q, s_kv]
//   M  = reduce_max(S2) over s_kv       [b, h, s_q, 1]
//   E  = exp(S2 - M);  Z = reduce_add(E)
//   L  = M + log(Z)                     softmax statistics (virtual)
//   P  = E / Z                          Q's type, virtual
//   O  = matmul(P, V)                   [b, h, s_q, d_v]
//
// Kᵀ is described as [b, h, d, s_kv] with strides (.., 1, d) over a packed
// K [b, h, s_kv, d]: the layout the engine reads. Intermediates compute in
// float (CUDNN_ATTR_*_COMP_TYPE / MATH_PREC). The graph and plan hold the
// handle (CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_ATTR_EXECUTION_PLAN_HANDLE:
// deprecated from cuDNN 9.x in favour of device properties, still what
// cudnn-frontend sets).
//
//===----------------------------------------------------------------------===//
#include "CudnnAttention.h"

#include <cudnn.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace hetplan::runtime::cudnn {

namespace {

struct Status : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void check(cudnnStatus_t st, const char *what) {
  if (st != CUDNN_STATUS_SUCCESS) throw Status(std::string(what) + ": " + cudnnGetErrorString(st));
}

/// A backend descriptor, destroyed with its holder.
struct Desc {
  cudnnBackendDescriptor_t d = nullptr;
  explicit Desc(cudnnBackendDescriptorType_t t) { check(cudnnBackendCreateDescriptor(t, &d), "cudnnBackendCreateDescriptor"); }
  ~Desc() { if (d) cudnnBackendDestroyDescriptor(d); }
  Desc(const Desc &) = delete;
  Desc &operator=(const Desc &) = delete;
  void set(cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, int64_t n, const void *v) {
    check(cudnnBackendSetAttribute(d, a, t, n, v), "cudnnBackendSetAttribute");
  }
  void set(cudnnBackendAttributeName_t a, const Desc &other) {
    set(a, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &other.d);
  }
  void finalize(const char *what) { check(cudnnBackendFinalize(d), what); }
};
using DescPtr = std::shared_ptr<Desc>;

DescPtr make(cudnnBackendDescriptorType_t t) { return std::make_shared<Desc>(t); }

// Unique ids of the variant pack's tensors; virtual ones from 100.
enum : int64_t { kQ = 1, kK, kV, kO, kScale, kBias };

std::vector<int64_t> packed(const std::vector<int64_t> &dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (size_t i = dims.size() - 1; i-- > 0;) s[i] = s[i + 1] * dims[i + 1];
  return s;
}

DescPtr tensor(int64_t uid, cudnnDataType_t type, const std::vector<int64_t> &dims,
               const std::vector<int64_t> &strides, bool isVirtual, bool byValue = false) {
  auto t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  t->set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
  t->set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, int64_t(dims.size()), dims.data());
  t->set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, int64_t(strides.size()), strides.data());
  t->set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  int64_t alignment = 16;
  t->set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
  bool v = isVirtual;
  t->set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v);
  if (byValue) {
    bool b = true;
    t->set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &b);
  }
  t->finalize("tensor descriptor");
  return t;
}

} // namespace

/// The descriptors of one shape's graph (kept alive with its plan) and the plan.
struct Attention::Plan {
  std::vector<DescPtr> keep;
  DescPtr plan;
  int64_t workspace = 0;
  std::vector<int64_t> uids;
};

namespace {

/// d, kept alive with plan p.
DescPtr keepIn(Attention::Plan &p, DescPtr d) {
  p.keep.push_back(d);
  return d;
}

/// The attention graph of `a` as cuDNN operations (appended to `ops`), its
/// descriptors kept in p and its I/O tensors' uids in p.uids.
void describeGraph(const Sdpa &a, Attention::Plan &p, std::vector<DescPtr> &ops) {
  const cudnnDataType_t io = a.bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF, f32 = CUDNN_DATA_FLOAT;
  const int64_t B = a.B, H = a.H, Sq = a.Sq, Skv = a.Skv, D = a.D, Dv = a.Dv;
  int64_t nextVirtual = 100;
  auto keep = [&](DescPtr d) { return keepIn(p, d); };
  auto virt = [&](cudnnDataType_t t, const std::vector<int64_t> &dims) {
    return keep(tensor(nextVirtual++, t, dims, packed(dims), true));
  };
  // A descriptor computing in float (`prec`), with `mode` when given.
  auto math = [&](cudnnBackendDescriptorType_t type, cudnnBackendAttributeName_t prec,
                  cudnnBackendAttributeName_t modeName = CUDNN_ATTR_POINTWISE_MODE,
                  cudnnBackendAttributeType_t modeType = CUDNN_TYPE_POINTWISE_MODE, const void *mode = nullptr) {
    auto d = keep(make(type));
    if (mode) d->set(modeName, modeType, 1, mode);
    d->set(prec, CUDNN_TYPE_DATA_TYPE, 1, &f32);
    d->finalize("operation descriptor");
    return d;
  };
  // An operation node of the graph: its descriptors by attribute (null: left unset).
  auto operation = [&](cudnnBackendDescriptorType_t type,
                       const std::vector<std::pair<cudnnBackendAttributeName_t, DescPtr>> &attrs) {
    auto op = keep(make(type));
    for (const auto &[name, d] : attrs)
      if (d) op->set(name, *d);
    op->finalize("graph operation");
    ops.push_back(op);
  };
  auto matmul = [&](const DescPtr &x, const DescPtr &y, const DescPtr &out) {
    operation(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR,
              {{CUDNN_ATTR_OPERATION_MATMUL_ADESC, x},
               {CUDNN_ATTR_OPERATION_MATMUL_BDESC, y},
               {CUDNN_ATTR_OPERATION_MATMUL_CDESC, out},
               {CUDNN_ATTR_OPERATION_MATMUL_DESC, math(CUDNN_BACKEND_MATMUL_DESCRIPTOR, CUDNN_ATTR_MATMUL_COMP_TYPE)}});
  };
  // pointwise and reduction return their output: a new virtual tensor of `dims`.
  auto pointwise = [&](cudnnPointwiseMode_t mode, const DescPtr &x, const DescPtr &b,
                       const std::vector<int64_t> &dims, cudnnDataType_t type = CUDNN_DATA_FLOAT) {
    auto y = virt(type, dims);
    auto pw = math(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_ATTR_POINTWISE_MODE,
                   CUDNN_TYPE_POINTWISE_MODE, &mode);
    operation(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR,
              {{CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw},
               {CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x},
               {CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b},
               {CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y}});
    return y;
  };
  auto reduction = [&](cudnnReduceTensorOp_t mode, const DescPtr &x, const std::vector<int64_t> &dims) {
    auto y = virt(CUDNN_DATA_FLOAT, dims);
    auto rd = math(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_ATTR_REDUCTION_OPERATOR,
                   CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, &mode);
    operation(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR,
              {{CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x},
               {CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y},
               {CUDNN_ATTR_OPERATION_REDUCTION_DESC, rd}});
    return y;
  };

  auto q = keep(tensor(kQ, io, {B, H, Sq, D}, packed({B, H, Sq, D}), false));
  auto kT = keep(tensor(kK, io, {B, H, D, Skv}, {H * Skv * D, Skv * D, 1, D}, false));
  auto v = keep(tensor(kV, io, {B, H, Skv, Dv}, packed({B, H, Skv, Dv}), false));
  auto o = keep(tensor(kO, io, {B, H, Sq, Dv}, packed({B, H, Sq, Dv}), false));
  auto scale = keep(tensor(kScale, f32, {1, 1, 1, 1}, {1, 1, 1, 1}, false, /*byValue=*/true));
  p.uids = {kQ, kK, kV, kO, kScale};
  const std::vector<int64_t> scores = {B, H, Sq, Skv}, rows = {B, H, Sq, 1};
  auto s = virt(f32, scores);
  matmul(q, kT, s);
  auto last = pointwise(CUDNN_POINTWISE_MUL, s, scale, scores);
  if (a.bias) {
    std::vector<int64_t> bd = {a.biasB ? B : 1, a.biasH ? H : 1, Sq, Skv};
    auto bias = keep(tensor(kBias, io, bd, packed(bd), false));
    p.uids.push_back(kBias);
    last = pointwise(CUDNN_POINTWISE_ADD, last, bias, scores);
  }
  auto mx = reduction(CUDNN_REDUCE_TENSOR_MAX, last, rows);
  auto ex = pointwise(CUDNN_POINTWISE_EXP, pointwise(CUDNN_POINTWISE_SUB, last, mx, scores), nullptr, scores);
  auto sum = reduction(CUDNN_REDUCE_TENSOR_ADD, ex, rows);
  pointwise(CUDNN_POINTWISE_ADD, mx, pointwise(CUDNN_POINTWISE_LOG, sum, nullptr, rows), rows); // statistics
  auto prob = pointwise(CUDNN_POINTWISE_DIV, ex, sum, scores, io); // bmm2's A in the I/O type (cuDNN's requirement)
  matmul(prob, v, o);
}

/// The operation graph of `ops` on handle h, and the first engine config
/// the heuristics offer that finalizes as p's execution plan; throws Status
/// when none does.
void finalizePlan(cudnnHandle_t h, const std::vector<DescPtr> &ops, Attention::Plan &p) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  auto graph = keepIn(p, make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR));
  std::vector<cudnnBackendDescriptor_t> raw;
  for (const auto &op : ops) raw.push_back(op->d);
  graph->set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(raw.size()), raw.data());
  graph->set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
  graph->finalize("operation graph");

  auto heur = keepIn(p, make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR));
  heur->set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, *graph);
  cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  heur->set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  heur->finalize("engine heuristics");
  int64_t count = 0;
  check(cudnnBackendGetAttribute(heur->d, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                 nullptr),
        "engine heuristics results (count)");
  if (count <= 0) throw Status("the heuristics offer no engine for this graph");
  std::vector<DescPtr> cfgs;
  std::vector<cudnnBackendDescriptor_t> rawCfgs;
  for (int64_t i = 0; i < count; ++i) {
    cfgs.push_back(make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    rawCfgs.push_back(cfgs.back()->d);
  }
  int64_t got = 0;
  check(cudnnBackendGetAttribute(heur->d, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                 &got, rawCfgs.data()),
        "engine heuristics results");
  std::string lastError;
  for (int64_t i = 0; i < got && !p.plan; ++i) {
    auto plan = make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    plan->set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    plan->set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, *cfgs[size_t(i)]);
    cudnnStatus_t st = cudnnBackendFinalize(plan->d);
    if (st != CUDNN_STATUS_SUCCESS) { lastError = cudnnGetErrorString(st); continue; }
    int64_t n = 0;
    check(cudnnBackendGetAttribute(plan->d, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                                   &p.workspace),
          "execution plan workspace size");
    p.keep.push_back(cfgs[size_t(i)]);
    p.plan = plan;
  }
#pragma GCC diagnostic pop
  if (!p.plan) throw Status("no engine config finalizes (" + std::to_string(got) + " tried, last: " + lastError + ")");
}

} // namespace

Attention::Attention(cudaStream_t stream) {
  cudnnHandle_t h = nullptr;
  check(cudnnCreate(&h), "cudnnCreate");
  if (cudnnStatus_t st = cudnnSetStream(h, stream); st != CUDNN_STATUS_SUCCESS) {
    cudnnDestroy(h);
    check(st, "cudnnSetStream");
  }
  handle_ = h;
}

Attention::~Attention() {
  plans_.clear(); // descriptors before the handle
  cudnnDestroy(handle_);
}

bool Attention::run(const Sdpa &a, const std::function<Tensor(size_t bytes)> &scratch, std::string *why) {
  int biasCode = a.bias ? 1 + (a.biasB ? 1 : 0) + (a.biasH ? 2 : 0) : 0;
  Key key{a.B, a.H, a.Sq, a.Skv, a.D, a.Dv, a.bf16, biasCode};
  if (auto r = refused_.find(key); r != refused_.end()) {
    if (why) *why = r->second;
    return false;
  }
  auto it = plans_.find(key);
  if (it == plans_.end()) {
    auto p = std::make_shared<Plan>();
    try {
      std::vector<DescPtr> ops;
      describeGraph(a, *p, ops);
      finalizePlan(handle_, ops, *p);
    } catch (const Status &e) {
      refused_[key] = e.what();
      if (why) *why = e.what();
      return false;
    }
    it = plans_.emplace(key, p).first;
  }
  const Plan &p = *it->second;
  Tensor work;
  if (p.workspace > 0) work = scratch(size_t(p.workspace));
  float scale = a.scale; // by value: read from host memory at execution
  std::vector<void *> ptrs = {const_cast<void *>(a.q), const_cast<void *>(a.k), const_cast<void *>(a.v), a.o, &scale};
  if (a.bias) ptrs.push_back(const_cast<void *>(a.bias));
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, int64_t(p.uids.size()), p.uids.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, int64_t(ptrs.size()), ptrs.data());
  void *ws = work.defined() ? work.raw() : nullptr;
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
  pack.finalize("variant pack");
  check(cudnnBackendExecute(handle_, p.plan->d, pack.d), "cudnnBackendExecute (attention)");
  return true;
}

} // namespace hetplan::runtime::cudnn
