//===- CudaTest.cpp - the CUDA backend against the CPU executor -----------===//
//
// hetplan-cuda-tests (built only with a CUDA toolkit). Tests that need a GPU
// skip with "no CUDA device: ..." when cudaGetDeviceCount fails or finds
// none; the check() tests run everywhere (check() needs no device). With a
// device, CudaExecutor is compared with the CPU Executor on the example
// models and the onnx-light models (when ../shared/models/onnx-light is
// present), and with the expected outputs of ONNX node test cases. The
// fused groups are tested in CudaFusionTest.cpp.
//
//===----------------------------------------------------------------------===//

#include "hetplan/runtime/CudaBackend.h"
#include "hetplan/runtime/Devices.h"
#include "hetplan/runtime/Executor.h"
#include "hetplan/runtime/Gradients.h"
#include "hetplan/runtime/Model.h"
#include "PlanFixtures.h"
#include "CudaTestSupport.h"
#if defined(HETPLAN_HAVE_NCCL_COMMUNICATOR) && HETPLAN_HAVE_NCCL_COMMUNICATOR
#include "hetplan/runtime/NcclCommunicator.h"
#endif

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <sstream>

#include <unistd.h>

using namespace hetplan::runtime;
using namespace hetplan::test::cuda;
namespace fs = std::filesystem;

namespace {

const char *kNodeDir = "/usr/share/libonnx-testdata/data/node";

std::string joined(const std::vector<std::string> &lines) {
  std::string s;
  for (const auto &l : lines) s += l + "\n";
  return s;
}

void compareWithCpu(const std::string &path, int64_t batch, int64_t seq) {
  Model m = loadModel(path);
  CudaExecutor gpu(m);
  ASSERT_EQ(joined(gpu.check()), "") << path;
  Executor cpu(m);
  auto inputs = randomInputs(m, batch, seq, 42);
  auto want = cpu.run(inputs);
  auto got = gpu.run(inputs);
  expectSame(got, want, path);
  // a second run reuses the uploaded weights
  auto again = gpu.run(inputs);
  expectSame(again, want, path + " (second run)");
}

std::vector<std::string> onnxLightModels() {
  std::vector<std::string> out;
  fs::path dir = fs::path(HETPLAN_SHARED_MODELS_DIR) / "onnx-light";
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto &e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".onnx") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

/// ONNX node test cases per op family (those absent from the installed
/// libonnx-testdata are skipped).
const std::vector<std::string> kNodeCases = {
    // MatMul / Gemm (cuBLAS)
    "test_matmul_2d", "test_matmul_3d", "test_matmul_4d", "test_gemm_all_attributes", "test_gemm_alpha",
    "test_gemm_beta", "test_gemm_default_matrix_bias", "test_gemm_default_no_bias", "test_gemm_default_scalar_bias",
    "test_gemm_default_vector_bias", "test_gemm_transposeA", "test_gemm_transposeB",
    // Conv (im2col + cuBLAS)
    "test_basic_conv_with_padding", "test_basic_conv_without_padding", "test_conv_with_autopad_same",
    "test_conv_with_strides_and_asymmetric_padding", "test_conv_with_strides_no_padding",
    "test_conv_with_strides_padding",
    // elementwise
    "test_add", "test_add_bcast", "test_sub", "test_sub_bcast", "test_mul_bcast", "test_div_bcast", "test_pow",
    "test_pow_bcast_array", "test_pow_types_float32_int64", "test_neg", "test_sqrt", "test_exp", "test_log",
    "test_tanh", "test_sigmoid", "test_relu", "test_leakyrelu", "test_erf", "test_clip", "test_clip_default_min",
    "test_clip_splitbounds", "test_where_example", "test_where_long_example", "test_equal", "test_less",
    "test_greater_bcast", "test_not_2d", "test_sum_example", "test_max_example", "test_min_two_inputs",
    "test_mean_example",
    // softmax, normalizations, reductions
    "test_softmax_axis_0", "test_softmax_axis_1", "test_softmax_default_axis", "test_softmax_large_number",
    "test_logsoftmax_axis_2", "test_logsoftmax_example_1", "test_layer_normalization_2d_axis0",
    "test_layer_normalization_3d_axis1_epsilon", "test_layer_normalization_4d_axis_negative_2",
    "test_layer_normalization_default_axis", "test_batchnorm_epsilon", "test_batchnorm_example", "test_lrn",
    "test_reduce_mean_default_axes_keepdims_random", "test_reduce_mean_do_not_keepdims_random",
    "test_reduce_sum_keepdims_random", "test_reduce_sum_empty_axes_input_noop_random",
    "test_reduce_max_negative_axes_keepdims_random", "test_reduce_min_keepdims_random",
    // pooling
    "test_maxpool_1d_default", "test_maxpool_2d_default", "test_maxpool_2d_ceil", "test_maxpool_2d_dilations",
    "test_maxpool_2d_same_lower", "test_maxpool_2d_pads", "test_maxpool_3d_default", "test_averagepool_2d_default",
    "test_averagepool_2d_pads_count_include_pad", "test_averagepool_2d_same_upper", "test_averagepool_2d_ceil",
    "test_averagepool_3d_default", "test_globalaveragepool", "test_globalmaxpool",
    // data movement and metadata
    "test_transpose_default", "test_transpose_all_permutations_3", "test_gather_0", "test_gather_1",
    "test_gather_2d_indices", "test_gather_negative_indices", "test_concat_3d_axis_negative_2", "test_slice",
    "test_slice_neg_steps", "test_slice_negative_axes", "test_slice_default_steps", "test_split_equal_parts_1d",
    "test_split_variable_parts_2d", "test_reshape_negative_dim", "test_flatten_axis2", "test_squeeze",
    "test_unsqueeze_axis_1", "test_identity", "test_expand_dim_changed",
};

std::vector<std::string> presentNodeCases() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto &c : kNodeCases)
    if (fs::is_regular_file(fs::path(kNodeDir) / c / "model.onnx", ec)) out.push_back(c);
  return out;
}

struct NodeCase {
  Model model;
  std::map<std::string, Tensor> inputs, outputs;
};

NodeCase loadNodeCase(const std::string &name) {
  fs::path dir = fs::path(kNodeDir) / name;
  NodeCase c{loadModel((dir / "model.onnx").string()), {}, {}};
  fs::path data = dir / "test_data_set_0";
  for (size_t i = 0; i < c.model.inputs.size(); ++i) {
    fs::path p = data / ("input_" + std::to_string(i) + ".pb");
    if (fs::exists(p)) c.inputs[c.model.inputs[i].name] = loadTensorFile(p.string());
  }
  for (size_t i = 0; i < c.model.outputs.size(); ++i) {
    fs::path p = data / ("output_" + std::to_string(i) + ".pb");
    if (fs::exists(p)) c.outputs[c.model.outputs[i].name] = loadTensorFile(p.string());
  }
  return c;
}

} // namespace

// --- without a device ------------------------------------------------------

TEST(CudaCheck, ExampleModelsAreSupported) {
  for (const char *name : {"gpt2-tiny.onnx", "bert-tiny.onnx"}) {
    Model m = loadModel(std::string(HETPLAN_EXAMPLES) + "/" + name);
    CudaExecutor gpu(m);
    EXPECT_EQ(joined(gpu.check()), "") << name;
  }
}

TEST(CudaCheck, OnnxLightModelsAreSupported) {
  auto models = onnxLightModels();
  if (models.empty()) GTEST_SKIP() << "no onnx-light models under " << HETPLAN_SHARED_MODELS_DIR;
  for (const auto &path : models) {
    Model m = loadModel(path);
    CudaExecutor gpu(m);
    EXPECT_EQ(joined(gpu.check()), "") << path;
  }
}

TEST(CudaCheck, NodeCasesAreSupported) {
  auto cases = presentNodeCases();
  if (cases.empty()) GTEST_SKIP() << "no libonnx-testdata under " << kNodeDir;
  EXPECT_GE(cases.size(), kNodeCases.size() / 2) << "most listed node cases are missing";
  for (const auto &name : cases) {
    Model m = loadModel((fs::path(kNodeDir) / name / "model.onnx").string());
    CudaExecutor gpu(m);
    EXPECT_EQ(joined(gpu.check()), "") << name;
  }
}

TEST(CudaCheck, ListsUnsupportedNodes) {
  struct Case {
    const char *dir, *op, *why;
  };
  int seen = 0;
  for (Case c : {Case{"test_cumsum_1d", "(CumSum)", "no CUDA kernel for CumSum"},
                 Case{"test_maxpool_with_argmax_2d_precomputed_pads", "(MaxPool)", "Indices"},
                 Case{"test_cast_FLOAT_to_DOUBLE", "(Cast)", "float64"}}) {
    fs::path p = fs::path(kNodeDir) / c.dir / "model.onnx";
    if (!fs::exists(p)) continue;
    ++seen;
    Model m = loadModel(p.string());
    CudaExecutor gpu(m);
    auto problems = gpu.check();
    ASSERT_EQ(problems.size(), 1u) << c.dir << ":\n" << joined(problems);
    EXPECT_NE(problems[0].find(c.op), std::string::npos) << problems[0];
    EXPECT_NE(problems[0].find(c.why), std::string::npos) << problems[0];
    EXPECT_EQ(problems[0].find('\n'), std::string::npos) << problems[0];
  }
  if (!seen) GTEST_SKIP() << "no libonnx-testdata under " << kNodeDir;
}

TEST(CudaCheck, RunWithoutDeviceSaysSo) {
  std::string why;
  if (cudaDeviceAvailable(&why)) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_NE(why.find("no CUDA device"), std::string::npos) << why;
  Model m = loadModel(std::string(HETPLAN_EXAMPLES) + "/gpt2-tiny.onnx");
  CudaExecutor gpu(m);
  try {
    gpu.run(randomInputs(m, 1, 4, 1));
    FAIL() << "run() without a device did not throw";
  } catch (const std::runtime_error &e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA device"), std::string::npos) << e.what();
  }
}

// A rank's stage is checked before it runs on CUDA (no device needed): a
// node the executor has no kernel for keeps the rank off the GPU.
TEST(CudaCheck, RankComputeRefusesAStageItCannotRun) {
  fs::path p = fs::path(kNodeDir) / "test_cumsum_1d" / "model.onnx";
  if (!fs::exists(p)) GTEST_SKIP() << "no libonnx-testdata under " << kNodeDir;
  Model m = loadModel(p.string());
  std::vector<size_t> stage = {0};
  std::vector<std::string> problems;
  EXPECT_EQ(makeCudaRankCompute(m, 0, /*prepare=*/false, "fp32", &stage, &problems), nullptr);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("no CUDA kernel for CumSum"), std::string::npos) << problems[0];
  CudaExecutor gpu(m);
  EXPECT_EQ(gpu.check(std::vector<size_t>{}), std::vector<std::string>{}); // nothing to run, nothing wrong
  EXPECT_THROW(gpu.setPrecision("fp8"), std::runtime_error);
}

// --- on a device -------------------------------------------------------------

TEST(CudaRun, Gpt2TinyMatchesCpu) {
  REQUIRE_CUDA_DEVICE();
  compareWithCpu(std::string(HETPLAN_EXAMPLES) + "/gpt2-tiny.onnx", 2, 16);
}

TEST(CudaRun, BertTinyMatchesCpu) {
  REQUIRE_CUDA_DEVICE();
  compareWithCpu(std::string(HETPLAN_EXAMPLES) + "/bert-tiny.onnx", 2, 16);
}

// The shipped onnx-light weights are one constant, which makes every class's
// logit equal: compared as shipped, a wrong kernel could still match. Each
// graph gets test/runtime/onnx_light_random.py's seeded random weights first.
TEST(CudaRun, OnnxLightModelsMatchCpu) {
  REQUIRE_CUDA_DEVICE();
  auto models = onnxLightModels();
  if (models.empty()) GTEST_SKIP() << "no onnx-light models under " << HETPLAN_SHARED_MODELS_DIR;
  fs::path work = fs::temp_directory_path() / ("hetplan-cuda-onnx-light-" + std::to_string(::getpid()));
  fs::create_directories(work);
  for (const auto &path : models) {
    fs::path out = work / fs::path(path).filename();
    std::string cmd = std::string(HETPLAN_PYTHON) + " " + HETPLAN_SOURCE_DIR +
                      "/test/runtime/onnx_light_random.py --randomize '" + path + "' '" + out.string() + "' > /dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << "randomizing " << path << " failed: " << cmd;
    compareWithCpu(out.string(), 1, 1);
  }
  fs::remove_all(work);
}

TEST(CudaRun, NodeCasesMatchExpectedOutputs) {
  REQUIRE_CUDA_DEVICE();
  auto cases = presentNodeCases();
  if (cases.empty()) GTEST_SKIP() << "no libonnx-testdata under " << kNodeDir;
  for (const auto &name : cases) {
    NodeCase c = loadNodeCase(name);
    CudaExecutor gpu(c.model);
    std::map<std::string, Tensor> got;
    try {
      got = gpu.run(c.inputs);
    } catch (const std::exception &e) {
      ADD_FAILURE() << name << ": " << e.what();
      continue;
    }
    expectSame(got, c.outputs, name);
  }
}

TEST(CudaRun, RuntimeErrorsNameTheNode) {
  REQUIRE_CUDA_DEVICE();
  fs::path p = fs::path(kNodeDir) / "test_gather_0" / "model.onnx";
  if (!fs::exists(p)) GTEST_SKIP() << "no libonnx-testdata under " << kNodeDir;
  NodeCase c = loadNodeCase("test_gather_0");
  for (auto &[name, t] : c.inputs)
    if (t.dtype() == DType::Int64) t.data<int64_t>()[0] = 1000; // out of range
  CudaExecutor gpu(c.model);
  try {
    gpu.run(c.inputs);
    FAIL() << "no error";
  } catch (const std::runtime_error &e) {
    EXPECT_NE(std::string(e.what()).find("(Gather)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
  }
}

// A plan whose rank computes on the CUDA executor (what `hetplan run` sets
// up for a GPU rank) gives the CPU plan's outputs; a training step its loss
// and updated weights (backward and Adam run on the host).
TEST(CudaPlan, InferenceRankOnCudaMatchesCpu) {
  REQUIRE_CUDA_DEVICE();
  for (const char *name : {"gpt2-tiny.onnx", "bert-tiny.onnx"}) {
    std::string path = std::string(HETPLAN_EXAMPLES) + "/" + name;
    PlanExecutor exec(hetplan::test::oneRankPlan(path, "infer", 2));
    auto inputs = randomInputs(exec.model(), 2, 16, 7);
    auto want = exec.run(inputs);
    exec.setCompute(0, makeCudaRankCompute(exec.model(), 0));
    PlanExecutor::StepTiming timing;
    auto got = exec.run(inputs, &timing);
    expectSame(got, want, name);
    // --profile on a GPU rank: CUDA-event times for the stage's nodes
    double total = 0;
    for (double t : timing.ranks[0].nodeSeconds) total += t;
    EXPECT_GT(total, 0) << name;
  }
}

TEST(CudaPlan, TrainingRankOnCudaMatchesCpu) {
  REQUIRE_CUDA_DEVICE();
  std::string path = std::string(HETPLAN_EXAMPLES) + "/gpt2-tiny.onnx";
  PlanExecutor exec(hetplan::test::oneRankPlan(path, "train", 2));
  auto inputs = randomInputs(exec.model(), 2, 8, 3);
  Tensor labels = hetplan::test::cyclicLabels(exec.model(), inputs);
  PlanExecutor::TrainOptions options;
  std::vector<PlanExecutor::RankTrainState> cpu, gpu;
  double cpuLoss[2], gpuLoss[2];
  for (int step = 0; step < 2; ++step) cpuLoss[step] = exec.train(inputs, labels, cpu, options);
  exec.setCompute(0, makeCudaRankCompute(exec.model(), 0));
  for (int step = 0; step < 2; ++step) gpuLoss[step] = exec.train(inputs, labels, gpu, options);
  for (int step = 0; step < 2; ++step) EXPECT_NEAR(gpuLoss[step], cpuLoss[step], 1e-4 * std::fabs(cpuLoss[step]));
  EXPECT_LT(relativeError(exec.collectParameters(gpu), exec.collectParameters(cpu)), 1e-3);
  // BACKWARD and Adam ran on the GPU: the last step's summed gradients and
  // Adam's moments agree with the CPU plan's too.
  EXPECT_LT(relativeError(gpu[0].grads, cpu[0].grads), 1e-3);
  EXPECT_LT(relativeError(gpu[0].adamM, cpu[0].adamM), 1e-3);
  EXPECT_LT(relativeError(gpu[0].adamV, cpu[0].adamV), 1e-3);
}

// --- device-resident values (docs/gpu.md): two CUDA ranks as threads -----

namespace {
/// Bytes of the values stage 1 receives, over the whole batch.
uint64_t crossingBytes(const PlanExecutor &exec, const std::map<std::string, Tensor> &inputs) {
  std::vector<size_t> all(exec.model().nodes.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  const auto &names = exec.stageIO(1).received;
  auto got = Executor(exec.model()).runNodes(all, inputs, std::set<std::string>(names.begin(), names.end()));
  uint64_t bytes = 0;
  for (const auto &[name, t] : got) bytes += t.nbytes();
  return bytes;
}

hetplan::test::TwoStageLayout twoCudaRanks(const char *cut, const char *schedule) {
  hetplan::test::TwoStageLayout l;
  l.firstNodeOfStage1 = cut;
  l.shares = {{2}, {2}};
  l.micro = 3;
  l.schedule = schedule;
  return l;
}
} // namespace

// Stage 0's activations go to stage 1 as device tensors (ThreadComm hands
// them over; both ranks share GPU 0, so no copy at all): stage 0 copies no
// forward value to the host, stage 1 uploads none of its activations.
TEST(CudaPlan, DeviceValuesInferenceMatchesCpu) {
  REQUIRE_CUDA_DEVICE();
  std::string path = std::string(HETPLAN_EXAMPLES) + "/gpt2-tiny.onnx";
  PlanExecutor exec(hetplan::test::twoStagePlan(path, twoCudaRanks("h.1.ln_1", "gpipe"), "infer"));
  auto inputs = randomInputs(exec.model(), 6, 16, 7);
  auto want = exec.run(inputs);
  auto first = makeCudaRankCompute(exec.model(), 0), second = makeCudaRankCompute(exec.model(), 0);
  exec.setCompute(0, first);
  exec.setCompute(1, second);
  auto before0 = first->valueTransfers(), before1 = second->valueTransfers();
  auto got = exec.run(inputs);
  expectSame(got, want, "gpt2-tiny, two CUDA ranks");
  EXPECT_EQ(first->valueTransfers().toHost - before0.toHost, 0u) << "stage 0 copied activations to the host";
  EXPECT_LT(second->valueTransfers().toDevice - before1.toDevice, crossingBytes(exec, inputs))
      << "stage 1 uploaded its activations";
}

// 1F1B on two CUDA ranks: losses and weights as the CPU plan's. Stage 0 is
// the embeddings (every gradient on the device): it keeps its activations
// on the GPU for the send, the stash and BACKWARD, copying no forward
// value to the host, with and without recomputation.
TEST(CudaPlan, DeviceValuesTrainingMatchesCpu) {
  REQUIRE_CUDA_DEVICE();
  std::string path = std::string(HETPLAN_EXAMPLES) + "/gpt2-tiny.onnx";
  for (bool recompute : {false, true}) {
    hetplan::test::TwoStageLayout l = twoCudaRanks("h.0.ln_1", "1f1b");
    l.recompute = {recompute, recompute};
    PlanExecutor exec(hetplan::test::twoStagePlan(path, l));
    auto inputs = randomInputs(exec.model(), 6, 8, 3);
    Tensor labels = hetplan::test::cyclicLabels(exec.model(), inputs);
    PlanExecutor::TrainOptions options;
    std::vector<PlanExecutor::RankTrainState> cpu, gpu;
    double cpuLoss[2], gpuLoss[2];
    for (int step = 0; step < 2; ++step) cpuLoss[step] = exec.train(inputs, labels, cpu, options);
    auto first = makeCudaRankCompute(exec.model(), 0), second = makeCudaRankCompute(exec.model(), 0);
    exec.setCompute(0, first);
    exec.setCompute(1, second);
    auto before = first->valueTransfers();
    for (int step = 0; step < 2; ++step) gpuLoss[step] = exec.train(inputs, labels, gpu, options);
    for (int step = 0; step < 2; ++step)
      EXPECT_NEAR(gpuLoss[step], cpuLoss[step], 1e-4 * std::fabs(cpuLoss[step])) << "recompute " << recompute;
    EXPECT_LT(relativeError(exec.collectParameters(gpu), exec.collectParameters(cpu)), 1e-3)
        << "recompute " << recompute;
    EXPECT_EQ(first->valueTransfers().toHost - before.toHost, 0u)
        << "stage 0 copied forward values to the host, recompute " << recompute;
  }
}

// --- training kernels: each device gradient and optimizer against the CPU --

namespace {

using HostCompute = hetplan::test::HostCompute;

Tensor int64Tensor(const std::vector<int64_t> &shape, const std::vector<int64_t> &v) {
  Tensor t(DType::Int64, shape);
  std::copy(v.begin(), v.end(), t.data<int64_t>());
  return t;
}

/// Runs BACKWARD over every node of `m` from random output gradients on the
/// CPU (RankCompute's default) and on the GPU (the CUDA rank's), and
/// compares the gradients of the float32 inputs (1e-4 relative).
void expectGradientsMatch(const Model &m, const std::map<std::string, Tensor> &inputs, const std::string &what,
                          unsigned seed = 1) {
  SCOPED_TRACE(what);
  std::map<std::string, Tensor> values = inputs;
  Executor exec(m);
  std::vector<size_t> all;
  for (size_t i = 0; i < m.nodes.size(); ++i) all.push_back(i);
  std::set<std::string> keepAll;
  for (const auto &n : m.nodes)
    for (const auto &o : n.outputs) keepAll.insert(o);
  for (auto &[name, t] : exec.runNodes(all, inputs, keepAll)) values[name] = t;
  std::mt19937 rng(seed);
  std::map<std::string, Tensor> seeds;
  for (const auto &o : m.outputs) seeds[o.name] = randomTensor(DType::Float32, values.at(o.name).shape(), rng);
  std::set<std::string> requires;
  for (const auto &[name, t] : inputs)
    if (t.dtype() == DType::Float32) requires.insert(name);
  for (const auto &n : m.nodes)
    for (const auto &o : n.outputs) requires.insert(o);
  auto value = [&](const std::string &v) -> const Tensor * {
    auto it = values.find(v);
    return it == values.end() ? nullptr : &it->second;
  };
  std::map<std::string, Tensor> cpu = seeds, gpu = seeds;
  HostCompute().backward(m, all, value, requires, cpu, nullptr, nullptr);
  auto device = makeCudaRankCompute(m, 0);
  ASSERT_TRUE(device);
  device->backward(m, all, value, requires, gpu, nullptr, nullptr);
  for (const auto &[name, t] : inputs) {
    if (t.dtype() != DType::Float32) continue;
    ASSERT_EQ(gpu.count(name), cpu.count(name)) << name;
    if (!cpu.count(name)) continue;
    EXPECT_EQ(compareTensors(gpu.at(name), cpu.at(name)), "") << "gradient of " << name;
  }
}

/// One node `op` over inputs x0, x1, ... (in order) with outputs y0, y1, ...
void expectNodeGradientsMatch(const std::string &op, const std::vector<Tensor> &ins,
                              std::map<std::string, Attribute> attrs = {}, size_t outputs = 1) {
  Node n;
  n.name = op;
  n.opType = op;
  n.attrs = std::move(attrs);
  std::map<std::string, Tensor> inputs;
  for (size_t i = 0; i < ins.size(); ++i) {
    n.inputs.push_back("x" + std::to_string(i));
    inputs[n.inputs.back()] = ins[i];
  }
  std::vector<std::string> outs;
  for (size_t i = 0; i < outputs; ++i) outs.push_back("y" + std::to_string(i));
  n.outputs = outs;
  std::string what = op;
  for (const auto &t : ins) what += " " + t.describe();
  expectGradientsMatch(graphOf({n}, inputs, outs), inputs, what);
}

} // namespace

TEST(CudaTrain, GradientsMatchCpu) {
  REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(11);
  auto R = [&](std::vector<int64_t> shape) { return randomTensor(DType::Float32, shape, rng); };
  auto P = [&](std::vector<int64_t> shape) { return randomTensor(DType::Float32, shape, rng, 0.5f, 2.f); };
  // MatMul: B shared (folded), one B per batch (batched), partial broadcast, 1-D
  expectNodeGradientsMatch("MatMul", {R({2, 3, 4, 5}), R({5, 6})});
  expectNodeGradientsMatch("MatMul", {R({2, 3, 4, 5}), R({2, 3, 5, 6})});
  expectNodeGradientsMatch("MatMul", {R({2, 1, 4, 5}), R({3, 5, 6})});
  expectNodeGradientsMatch("MatMul", {R({5}), R({5, 6})});
  expectNodeGradientsMatch("MatMul", {R({3, 4, 5}), R({5})});
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      expectNodeGradientsMatch("Gemm", {ta ? R({5, 4}) : R({4, 5}), tb ? R({6, 5}) : R({5, 6}), R({6})},
                               {{"transA", intAttr(ta)}, {"transB", intAttr(tb)}, {"alpha", floatAttr(0.5f)},
                                {"beta", floatAttr(2.f)}});
  // broadcasting elementwise ops, reduced back to each input's shape
  expectNodeGradientsMatch("Add", {R({2, 3, 4}), R({4})});
  expectNodeGradientsMatch("Add", {R({2, 3, 4}), R({2, 3, 4})});
  expectNodeGradientsMatch("Sub", {R({2, 3, 4}), R({3, 1})});
  expectNodeGradientsMatch("Mul", {R({2, 3, 4}), R({1, 3, 4})});
  expectNodeGradientsMatch("Div", {R({2, 3, 4}), P({4})});
  expectNodeGradientsMatch("Div", {R({2, 300}), P({300})}); // block-per-output sums
  // unary ops
  for (const char *op : {"Gelu", "Relu", "Tanh", "Erf", "Sigmoid", "Exp", "Neg", "Abs", "LeakyRelu", "Softplus"})
    expectNodeGradientsMatch(op, {R({3, 7})});
  for (const char *op : {"Sqrt", "Log", "Reciprocal"}) expectNodeGradientsMatch(op, {P({3, 7})});
  Attribute tanhApprox;
  tanhApprox.kind = Attribute::String;
  tanhApprox.s = "tanh";
  expectNodeGradientsMatch("Gelu", {R({3, 7})}, {{"approximate", tanhApprox}});
  // normalizations
  expectNodeGradientsMatch("Softmax", {R({2, 3, 7})});
  expectNodeGradientsMatch("Softmax", {R({2, 3, 7})}, {{"axis", intAttr(1)}});
  expectNodeGradientsMatch("LogSoftmax", {R({4, 9})});
  expectNodeGradientsMatch("LayerNormalization", {R({2, 3, 8}), R({8}), R({8})}, {{"epsilon", floatAttr(1e-5f)}});
  expectNodeGradientsMatch("LayerNormalization", {R({2, 3, 300}), R({300}), R({300})});
  // data movement
  expectNodeGradientsMatch("Transpose", {R({2, 3, 4, 5})}, {{"perm", intsAttr({0, 2, 1, 3})}});
  expectNodeGradientsMatch("Reshape", {R({2, 3, 4}), int64Tensor({2}, {6, 4})});
  expectNodeGradientsMatch("Gather", {R({10, 4}), int64Tensor({2, 3}, {1, 3, 1, -1, 0, 3})});
  expectNodeGradientsMatch("Gather", {R({3, 5, 2}), int64Tensor({4}, {4, 0, 4, 2})}, {{"axis", intAttr(1)}});
  expectNodeGradientsMatch("Split", {R({2, 6, 3}), int64Tensor({3}, {1, 2, 3})}, {{"axis", intAttr(1)}}, 3);
  expectNodeGradientsMatch("Concat", {R({2, 3, 4}), R({2, 1, 4}), R({2, 2, 4})}, {{"axis", intAttr(1)}});
  expectNodeGradientsMatch("Expand", {R({3, 1}), int64Tensor({3}, {2, 3, 4})});
  Tensor cond(DType::Bool, {3, 1});
  for (int i = 0; i < 3; ++i) cond.data<bool>()[i] = i % 2 == 0;
  expectNodeGradientsMatch("Where", {cond, R({3, 4}), R({4})});
  // an op without a device gradient: the CPU kernel on host copies
  expectNodeGradientsMatch("Pow", {P({3, 4}), P({4})});
}

// A chain crossing between device and host gradients (Pow has no device
// gradient), with a value used twice (gradients summed on the device).
TEST(CudaTrain, MixedChainMatchesCpu) {
  REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(5);
  std::map<std::string, Tensor> inputs = {{"x", randomTensor(DType::Float32, {4, 6}, rng, 0.5f, 2.f)},
                                          {"w", randomTensor(DType::Float32, {6, 5}, rng)},
                                          {"e", randomTensor(DType::Float32, {5}, rng, 0.5f, 2.f)}};
  auto node = [](const char *op, std::vector<std::string> in, std::string out) {
    Node n;
    n.name = out;
    n.opType = op;
    n.inputs = std::move(in);
    n.outputs = {std::move(out)};
    return n;
  };
  Model m = graphOf({node("MatMul", {"x", "w"}, "h"), node("Tanh", {"h"}, "t"), node("Pow", {"t", "e"}, "p"),
                     node("Mul", {"p", "h"}, "q"), node("Add", {"q", "t"}, "y")},
                    inputs, {"y"});
  expectGradientsMatch(m, inputs, "MatMul-Tanh-Pow-Mul-Add");
}

TEST(CudaTrain, OptimizersMatchCpu) {
  REQUIRE_CUDA_DEVICE();
  Model empty; // outlives the compute
  auto device = makeCudaRankCompute(empty, 0);
  ASSERT_TRUE(device);
  HostCompute host;
  using Pieces = std::vector<std::pair<int64_t, int64_t>>;
  for (Optimizer kind : {Optimizer::SGD, Optimizer::Momentum, Optimizer::Adam, Optimizer::AdamW}) {
    std::mt19937 rng(3);
    OptimizerSettings s{kind, 1e-2, 0.9, 0.999, 1e-8, 0.01, 0.9};
    for (const Pieces &pieces : {Pieces{}, Pieces{{3, 10}, {20, 5}}}) {
      Tensor param = randomTensor(DType::Float32, {7, 5}, rng);
      Tensor p1 = param.clone(), p2 = param.clone(), m1, v1, m2, v2;
      for (int64_t step = 1; step <= 3; ++step) {
        std::string what = std::string(optimizerName(kind)) + " step " + std::to_string(step) + ", " +
                           std::to_string(pieces.size()) + " pieces";
        Tensor grad = randomTensor(DType::Float32, {7, 5}, rng);
        host.optimizerUpdate(p1, grad, m1, v1, step, s, pieces);
        device->optimizerUpdate(p2, grad, m2, v2, step, s, pieces);
        EXPECT_EQ(compareTensors(p2, p1), "") << what;
        ASSERT_EQ(m2.defined(), m1.defined()) << what;
        ASSERT_EQ(v2.defined(), v1.defined()) << what;
        EXPECT_EQ(m1.defined(), optimizerStateBuffers(kind) >= 1) << what;
        EXPECT_EQ(v1.defined(), optimizerStateBuffers(kind) >= 2) << what;
        if (m1.defined()) {
          EXPECT_EQ(compareTensors(m2, m1), "") << what;
        }
        if (v1.defined()) {
          EXPECT_EQ(compareTensors(v2, v1), "") << what;
        }
      }
    }
  }
}

// Tensor-core math at the plan's dtype stays within the tolerance
// docs/gpu.md documents: max|diff| / max|ref| below 1e-2 (tf32, fp16) and
// 3e-2 (bf16).
TEST(CudaRun, ReducedPrecisionStaysWithinItsTolerance) {
  REQUIRE_CUDA_DEVICE();
  std::string path = std::string(HETPLAN_EXAMPLES) + "/gpt2-tiny.onnx";
  Model m = loadModel(path);
  auto inputs = randomInputs(m, 2, 16, 5);
  auto want = Executor(m).run(inputs);
  for (auto [dtype, tol] : {std::pair<const char *, double>{"tf32", 1e-2}, {"fp16", 1e-2}, {"bf16", 3e-2}}) {
    CudaExecutor gpu(m);
    gpu.setPrecision(dtype);
    EXPECT_LT(relativeError(gpu.run(inputs), want), tol) << dtype;
  }
}

#if defined(HETPLAN_HAVE_NCCL_COMMUNICATOR) && HETPLAN_HAVE_NCCL_COMMUNICATOR
// One test: MPI is initialized once per process (the first communicator)
// and finalized with the last. Alone (size 1) it checks the all-reduce and
// barrier; under `mpirun -np 2` also send/recv in both directions.
TEST(CudaNccl, Communicator) {
  REQUIRE_CUDA_DEVICE();
  const char *ws = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (!ws) ws = std::getenv("PMI_SIZE");
  int ranks = ws ? std::atoi(ws) : 1;
  size_t devices = cudaDevices().size();
  if (size_t(ranks) > devices) // NCCL refuses two ranks on one GPU
    GTEST_SKIP() << "NCCL needs one GPU per rank: " << ranks << " ranks, " << devices << " device(s)";
  NcclCommunicator comm;
  int rank = comm.rank(), size = comm.size();
  Tensor t(DType::Float32, {3});
  for (int i = 0; i < 3; ++i) t.data<float>()[i] = float(rank + i);
  comm.allReduceSum(t);
  for (int i = 0; i < 3; ++i) EXPECT_FLOAT_EQ(t.data<float>()[i], float(size * (size - 1) / 2 + size * i));
  comm.barrier();
  EXPECT_THROW(comm.send(rank, 0, t), std::runtime_error);
  if (size >= 2 && rank < 2) {
    int peer = 1 - rank;
    Tensor msg(DType::Int64, {2, 2});
    for (int i = 0; i < 4; ++i) msg.data<int64_t>()[i] = rank * 10 + i;
    // rank 0 sends first, rank 1 receives first (NCCL sends are not buffered)
    if (rank == 0) comm.send(peer, 7, msg);
    Tensor got = comm.recv(peer, 7);
    if (rank == 1) comm.send(peer, 7, msg);
    ASSERT_EQ(got.shape(), (std::vector<int64_t>{2, 2}));
    for (int i = 0; i < 4; ++i) EXPECT_EQ(got.data<int64_t>()[i], peer * 10 + i);
    // Both send to each other first, inside a group (ncclGroupStart/End):
    // completes, as the plan executor's SEND/RECV runs rely on; an empty
    // tensor travels as a header only.
    Tensor back, none;
    comm.groupStart();
    comm.send(peer, 8, msg);
    comm.send(peer, 9, Tensor(DType::Float32, {0}));
    comm.recvInGroup(peer, 8, &back);
    comm.recvInGroup(peer, 9, &none);
    comm.groupEnd();
    for (int i = 0; i < 4; ++i) EXPECT_EQ(back.data<int64_t>()[i], peer * 10 + i);
    EXPECT_EQ(none.numel(), 0);
    // Device-resident values: rank 1 receives into device memory (no
    // staging), reads it back, and sends the device tensor on in place;
    // rank 0 gets its own bytes back.
    if (rank == 0) {
      comm.send(peer, 10, msg);
      Tensor echo = comm.recv(peer, 11);
      ASSERT_FALSE(echo.isDevice());
      for (int i = 0; i < 4; ++i) EXPECT_EQ(echo.data<int64_t>()[i], i);
    } else {
      Tensor dev;
      comm.recvDeviceInGroup(peer, 10, &dev);
      ASSERT_TRUE(dev.isDevice());
      EXPECT_EQ(dev.shape(), (std::vector<int64_t>{2, 2}));
      Tensor host = dev.toHost();
      for (int i = 0; i < 4; ++i) EXPECT_EQ(host.data<int64_t>()[i], i);
      comm.send(peer, 11, dev);
    }
  }
  // Gradient sums (ncclAllReduce): over every rank (the world's
  // communicator), then, with a third rank, twice over ranks 0 and 1 (a
  // communicator made for the group, then kept).
  std::vector<int> all;
  for (int r = 0; r < size; ++r) all.push_back(r);
  Tensor a(DType::Float32, {5}), b(DType::Float32, {2, 2});
  for (int i = 0; i < 5; ++i) a.data<float>()[i] = float(rank + i);
  for (int i = 0; i < 4; ++i) b.data<float>()[i] = float(rank * i);
  comm.groupAllReduceSum(all, {&a, &b}, 100);
  for (int i = 0; i < 5; ++i) EXPECT_FLOAT_EQ(a.data<float>()[i], float(size * (size - 1) / 2 + size * i));
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(b.data<float>()[i], float(size * (size - 1) / 2 * i));
  if (size >= 3 && rank < 2)
    for (int round = 0; round < 2; ++round) {
      Tensor c(DType::Float64, {3});
      for (int i = 0; i < 3; ++i) c.data<double>()[i] = rank + 0.5 * i;
      comm.groupAllReduceSum({0, 1}, {&c}, 101);
      for (int i = 0; i < 3; ++i) EXPECT_DOUBLE_EQ(c.data<double>()[i], 1.0 + i) << "round " << round;
    }
  comm.barrier();
}
#endif
