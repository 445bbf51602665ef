//===- OpTable.h - one definition per op ------------------------*- C++ -*-===//
//
// The op table: for each ONNX op (domain, type, opset range) one definition
// holding what the compiler and the runtime both need to know about it:
// arity, attribute checks, the shape rule over plain dims, the cost rule,
// what its backward keeps, its tensor-parallel role. Plain C++17 (no LLVM,
// no MLIR, no runtime types), so the runtime and the compiler both link it;
// each side adapts its own IR to the plain forms here in one place
// (passes/ShapeRules.cpp, passes/cost/OpCosts.cpp, runtime/src/model/
// ModelVerifier.cpp). Kernels register into per-backend registries keyed by
// these definitions (runtime/src/model/OpRegistry.h). docs/ops.md is
// generated from this table (ops/OpDocs.cpp); docs/adding-an-op.md walks an
// op through it.
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_OPS_OPTABLE_H
#define HETPLAN_OPS_OPTABLE_H

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace hetplan::ops {

/// An unknown dim: the same value as MLIR's ShapedType::kDynamic, so the
/// compiler's shapes pass through the plain rules unchanged.
constexpr int64_t kUnknownDim = std::numeric_limits<int64_t>::min();
inline bool isUnknown(int64_t d) { return d == kUnknownDim; }

/// A product/sum of dims; unknown when an operand is or when it overflows.
int64_t mulDims(int64_t a, int64_t b);
int64_t addDims(int64_t a, int64_t b);
int64_t subDims(int64_t a, int64_t b);
/// axis + rank for a negative axis.
inline int64_t normAxis(int64_t axis, int64_t rank) { return axis < 0 ? axis + rank : axis; }
/// numpy broadcast of two shapes (unknown dims broadcast against anything);
/// nullopt when they do not broadcast.
std::optional<std::vector<int64_t>> broadcast(const std::vector<int64_t> &a, const std::vector<int64_t> &b);

/// A node's attributes as each side stores them.
class Attrs {
public:
  virtual ~Attrs() = default;
  virtual std::optional<int64_t> getInt(const std::string &name) const = 0;
  virtual std::optional<std::vector<int64_t>> getInts(const std::string &name) const = 0;
  virtual std::optional<std::string> getString(const std::string &name) const = 0;
  /// Whether the attribute is given (of any kind).
  virtual bool has(const std::string &name) const = 0;
  int64_t intOr(const std::string &name, int64_t dflt) const { return getInt(name).value_or(dflt); }
  std::string stringOr(const std::string &name, const std::string &dflt) const {
    return getString(name).value_or(dflt);
  }
};

//===----------------------------------------------------------------------===//
// Shape rules
//===----------------------------------------------------------------------===//

/// What is known about one input of a node.
struct ValueShape {
  bool present = false;                     // given (not an omitted optional input)
  bool ranked = false;                      // `dims` is known
  bool typed = false;                       // its element type is known
  std::vector<int64_t> dims;                // kUnknownDim where a dim is not known
  std::optional<std::vector<int64_t>> ints; // a small integer tensor's values
};

/// Integer tensors up to this many elements carry their values through the
/// shape rules (ValueShape::ints); larger ones do not fold.
constexpr size_t kMaxFoldedElements = 64;

/// An output's element type: that of an input, or a fixed one (UInt8:
/// unsigned 8-bit, as quantized tensors default to).
enum class Element { OfInput, Bool, Int64, Float32, Int32, UInt8 };

/// What the rule says about one output; `set` false leaves it unknown.
struct OutShape {
  bool set = false;
  std::vector<int64_t> dims;
  Element element = Element::OfInput;
  int elementOf = 0; // the input whose element type it takes (Element::OfInput)
  std::optional<std::vector<int64_t>> ints;
  /// Set when `dims` hold an upper bound of a size known only at run time:
  /// why (upperBoundNote).
  std::string upperBound;
};

/// "<what> is known only at run time; planned with its upper bound <bound>
/// (<because>)": the note of an output sized by an upper bound.
std::string upperBoundNote(const std::string &what, int64_t bound, const std::string &because);

struct ShapeIn {
  const Attrs &attrs;
  const std::vector<ValueShape> &inputs;
  int64_t opset;
};
/// Fills `out` (sized to the node's outputs); returns false with `why` set
/// when the inputs are inconsistent. An input whose shape the rule needs but
/// that is not known yet leaves the outputs unset (and returns true).
using ShapeFn = bool (*)(const ShapeIn &in, std::vector<OutShape> &out, std::string &why);

//===----------------------------------------------------------------------===//
// Cost rules (docs/cost-model.md, "Per-op rules")
//===----------------------------------------------------------------------===//

struct CostIn {
  const Attrs &attrs;
  /// Each input's static shape (nullopt when not static or omitted).
  std::vector<std::optional<std::vector<int64_t>>> inputs;
  std::vector<bool> present;
  std::vector<double> inputElems, outputElems; // 0 where not static
  double totalOutputElems() const {
    double t = 0;
    for (double e : outputElems) t += e;
    return t;
  }
};
/// Where an op's time goes.
enum class Engine { Vector, Matrix };
struct Cost {
  double flops = 0;
  Engine engine = Engine::Vector;
  bool view = false;        // aliases its input: no kernel, no traffic (launches 0)
  bool readsOutput = false; // reads only what it outputs from input 0 (Gather, Slice)
  bool estimated = false;
  /// Separate products per call when both operands carry batch dims
  /// (attention's batched MatMuls: the CPU runtime runs one GEMM per batch
  /// element; the cost model prices the size curve per product when both
  /// operands are activations). 0: one product per call.
  double batchedProducts = 0;
};
using CostFn = Cost (*)(const CostIn &in);

/// Cost of a transcendental function per element (exp, log, erf, tanh...):
/// a range reduction and a short polynomial, as GPU math libraries do.
constexpr double kTranscendental = 4;

//===----------------------------------------------------------------------===//
// Training, parallelism, checks
//===----------------------------------------------------------------------===//

/// What an op's backward reads from its forward pass: the memory model
/// (passes/cost/ExtractModelCost.cpp) keeps exactly this per op, and
/// test/unit/OpTableTest.cpp runs each CPU backward kernel with everything
/// else poisoned to check that it reads nothing more.
enum class Keeps {
  Nothing, // linear in its inputs, or data-independent
  Inputs,  // its activation inputs
  Output,  // its output
  Mask,    // a one-byte mask per output element
};

/// The op's role in tensor-parallel splitting and attention detection
/// (passes/cost/ExtractModelCost.cpp).
enum class TpRole {
  None,
  Product,             // a matrix product tensor parallelism splits by columns/rows
  AxisNormalizer,      // normalizes along `axis`: a split along another axis passes
  AttentionNormalizer, // AxisNormalizer, and what a MatMul feeds marks attention scores
  Elementwise,         // unary elementwise: a split passes through unchanged
};

/// Load-time checks over what is known of a node (ModelVerifier).
struct CheckIn {
  const Attrs &attrs;
  int64_t opset;
  /// The declared rank of input i and dim d of it, or -1 when not known.
  std::vector<std::optional<std::vector<int64_t>>> shapes;
  int64_t rank(size_t i) const { return i < shapes.size() && shapes[i] ? int64_t(shapes[i]->size()) : -1; }
  int64_t dim(size_t i, int64_t d) const {
    return i < shapes.size() && shapes[i] && d >= 0 && d < int64_t(shapes[i]->size()) ? (*shapes[i])[size_t(d)] : -1;
  }
};
/// "" when the node keeps ONNX's rules, else the first broken one.
using CheckFn = std::string (*)(const CheckIn &in, const std::string &opType);

/// Whether an op computes across the samples of a batch (passes/
/// CheckSamples.cpp): `carries[a]` says whether axis a of input 0 carries the
/// batch. Returns "" or why the op mixes samples.
using MixFn = std::string (*)(const Attrs &attrs, int64_t opset, const std::vector<int> &carries,
                              const std::string &opType);

//===----------------------------------------------------------------------===//
// The definition
//===----------------------------------------------------------------------===//

struct OpDef {
  std::string domain; // "" for ONNX's default domain
  std::string type;
  int sinceVersion = 1;
  int untilVersion = std::numeric_limits<int>::max();
  int minInputs = 0, maxInputs = std::numeric_limits<int>::max();
  std::string summary; // one line for docs/ops.md
  ShapeFn shape = nullptr;
  CostFn cost = nullptr;
  CheckFn check = nullptr;
  MixFn mixesSamples = nullptr;
  /// What backward reads; meaningful when the op has a backward kernel.
  Keeps keeps = Keeps::Inputs;
  TpRole tp = TpRole::None;
  /// Elementwise: a training framework fuses a chain of such ops into one
  /// kernel that keeps only the chain's inputs (the memory model).
  bool fusible = false;
  /// A product of its first two inputs, one of them usually a weight:
  /// tensor parallelism weighs that weight's bytes (MatMul, Gemm, Einsum,
  /// the integer MatMul; passes/cost/OpCosts.cpp matmulWeightBytes).
  bool weightProduct = false;
  /// Reads rows of input 0 picked by the integer indices of input 1 along
  /// its `axis` attribute (default 0): over a weight along axis 0 it is an
  /// embedding lookup (passes/cost: embedding tables, sparse updates).
  bool rowLookup = false;
};

/// The definition of (domain, type) at `opset` (any opset when < 0); null
/// when the table has none. "ai.onnx" is the default domain.
const OpDef *findOp(const std::string &domain, const std::string &type, int64_t opset = -1);
/// Every definition, sorted by domain then type.
const std::vector<const OpDef *> &allOps();

/// The Conv/pool attribute checks (kernel_shape, strides, dilations, pads,
/// group, auto_pad) against the ranks and dims known; "" when they hold.
/// Shared by the Conv family's definitions (ops/defs/Conv.cpp).
std::string checkWindowed(const CheckIn &in, size_t xIndex, int wIndex, bool transpose, bool needKernel);

/// Output size of a sliding window along one spatial dim, ONNX's formulas
/// (auto_pad SAME_*/VALID/NOTSET, ceil_mode for pools). Unknown when `in`
/// or `kernel` is.
int64_t windowOutputSize(int64_t in, int64_t kernel, int64_t stride, int64_t dilation, int64_t padBegin,
                         int64_t padEnd, const std::string &autoPad, bool ceilMode);

/// A convolution's cost with its weight at input `weightAt` and its bias at
/// `biasAt` (Conv; ConvInteger, QLinearConv, DeformConv price the same way).
Cost convolutionCost(const CostIn &in, size_t weightAt, size_t biasAt);

/// numpy matmul of shapes a and b (1-D operands promoted and their dim
/// dropped from the result, batch dims broadcast): the output dims, or
/// nullopt with `why` set.
std::optional<std::vector<int64_t>> matMulShape(const std::vector<int64_t> &a, const std::vector<int64_t> &b,
                                                std::string &why);

} // namespace hetplan::ops

#endif
