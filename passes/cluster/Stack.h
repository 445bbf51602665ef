//===- Stack.h - the software stack that runs a plan ------------*- C++ -*-===//
//
// Host overheads and kernel fusion belong to the software that runs a plan,
// not to the GPU: the same A100 pays 61 us per op under 2021's PyTorch +
// DeepSpeed and a few us under a C++ runtime that launches cuBLASLt and
// cuDNN kernels directly. A Stack holds those figures; the catalog's
// `stacks:` list names the known ones (hetplan, deepspeed-2021,
// megatron-lm), a cluster file selects or defines one with `stack:`, and
// `hetplan compile --stack NAME` picks one. Figures and their sources:
// docs/cost-model.md, "Software stacks".
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_PASSES_CLUSTER_STACK_H
#define HETPLAN_PASSES_CLUSTER_STACK_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/JSON.h"

#include <map>
#include <optional>
#include <string>

namespace hetplan::cluster {

/// What kernels reach on a device type, measured (the catalog's optional
/// `achieved` block; docs/cost-model.md, "Calibration"). Absent fields keep
/// the cost model's defaults. The host figures (kernel_us, micro_batch_us)
/// belong to the software stack (Stack); a device's own figure, when a
/// cluster file gives one, overrides the stack's for that device.
struct Achieved {
  std::optional<double> matrix;          // share of the dtype peak large GEMMs reach
  std::optional<double> matrixHalfGflop; // GEMM size (GFLOP per call) reaching half of it
  std::optional<double> memory;          // share of peak bandwidth streaming kernels reach
  std::optional<double> kernelUs;        // per kernel: launch + framework dispatch
  std::optional<double> microBatchUs;    // per micro-batch and pass: the training engine
  std::optional<double> collectiveUs;    // per collective call (all-reduce, all-gather): host + NCCL floor
  std::optional<double> link;            // share of the peak link bandwidth collectives reach
  std::string source;
  bool empty() const {
    return !matrix && !matrixHalfGflop && !memory && !kernelUs && !microBatchUs && !collectiveUs &&
           !link;
  }
};

/// The stack a plan is priced for when nothing selects one.
constexpr llvm::StringLiteral kDefaultStack = "hetplan";

struct Stack {
  std::string name;
  /// Host time per launched kernel on a GPU (launch + framework dispatch),
  /// microseconds. CPU devices keep their own per-op figure.
  double kernelUs = 5;
  /// Host time per micro-batch and pass of a stage (the training engine's
  /// schedule instructions, loss scaling, buffers), microseconds.
  double microBatchUs = 0;
  /// Fixed time per collective call of a tensor-parallel group on GPUs
  /// (framework dispatch, NCCL launch and synchronisation), beyond the
  /// link's per-hop latency, microseconds: small all-reduces cost tens of
  /// microseconds whatever their size (measured: docs/cost-model.md,
  /// "Software stacks"). Optional in files (default 0).
  double collectiveUs = 0;
  /// fp32 matrix products run as TF32 on GPUs with a tf32 peak.
  bool tf32 = false;
  /// Attention runs as one fused kernel (FlashAttention / cuDNN SDPA):
  /// reads Q, K, V, writes O and the softmax statistics; no S x S scores
  /// are written to memory or kept for the backward pass.
  bool fusedAttention = false;
  /// A tensor-parallel worker sends its activation to the next stage as
  /// 1/tp slices from every rank, all-gathered by the receivers (Megatron-LM's
  /// scatter/gather, Narayanan et al. SC'21 section 4.1); false: its first
  /// rank sends the whole activation to each receiving rank (hetplan's
  /// runtime). Optional in files (default false).
  bool scatterGatherSends = false;
  /// The loss runs as one kernel over the logits that writes the loss and
  /// the logits' gradient (flash-attn's Triton CrossEntropyLoss, which
  /// llm-foundry uses by default; Megatron-Core's --cross-entropy-loss-fusion):
  /// the backward keeps the logits in the run format and one log-sum-exp
  /// per row, never an fp32 softmax, and the gradient it writes is the LM
  /// head's output gradient. false: the loss keeps its softmax in fp32
  /// (Megatron-LM's cross entropy, PyTorch's under autocast) and the
  /// model output's gradient is one more buffer. Optional in files
  /// (default false).
  bool fusedCrossEntropy = false;
  /// Chains of elementwise ops (each feeding only the next) run as one
  /// kernel: one launch, the values inside never in memory (torch.compile,
  /// a serving engine's fused RMSNorm and SiLU-and-mul). Optional in files
  /// (default false: hetplan's runtime fuses only its GEMM epilogues).
  bool fusedElementwise = false;
  /// The share of a GPU's dtype peak this stack's large GEMMs reach, for GPU
  /// types without their own measured `achieved.matrix` (a fitted figure;
  /// unset: the roofline default). Optional in files.
  std::optional<double> matrix;
  /// What this stack's kernels measured on given device types (canonical
  /// type names): its GEMMs' share of peak and size curve, its streaming
  /// kernels' bandwidth, its per-kernel time. They win over the device's
  /// own `achieved` (fitted under another stack). Optional in files.
  std::map<std::string, Achieved> achieved;
  std::string source;  // where every figure comes from
};

llvm::json::Value toJSON(const Stack &stack);

} // namespace hetplan::cluster

#endif
