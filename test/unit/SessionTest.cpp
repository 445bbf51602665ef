//===- SessionTest.cpp - hetplan::Session and the C API --------------------===//
#include "hetplan/hetplan.h"
#include "hetplan/runtime/PlanFile.h"
#include "hetplan/runtime/Session.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

using hetplan::Session;
using hetplan::Status;
using hetplan::StatusCode;
using hetplan::runtime::DType;
using hetplan::runtime::Tensor;

namespace {

const std::string kGpt2 = std::string(HETPLAN_EXAMPLES) + "/gpt2-tiny.onnx";

Tensor ids(int64_t batch, int64_t seq, int64_t seed = 1) {
  Tensor t(DType::Int64, {batch, seq});
  for (int64_t i = 0; i < t.numel(); ++i) t.data<int64_t>()[i] = (i * 37 + seed * 11) % 512;
  return t;
}

std::unique_ptr<Session> gpt2() {
  std::unique_ptr<Session> s;
  Status st = Session::fromModel(kGpt2, &s);
  EXPECT_TRUE(st.ok()) << st.toString();
  return s;
}

} // namespace

TEST(Session, DescribesInputsAndOutputs) {
  auto s = gpt2();
  ASSERT_TRUE(s);
  ASSERT_EQ(s->inputs().size(), 1u);
  EXPECT_EQ(s->inputs()[0].name, "input_ids");
  EXPECT_EQ(s->inputs()[0].dtype, DType::Int64);
  EXPECT_EQ(s->inputs()[0].shape, (std::vector<int64_t>{-1, -1}));
  ASSERT_EQ(s->outputs().size(), 1u);
  EXPECT_EQ(s->outputs()[0].name, "logits");
  EXPECT_EQ(s->source(), kGpt2);
}

TEST(Session, RunsAndReturnsOutputsByName) {
  auto s = gpt2();
  std::map<std::string, Tensor> out;
  Status st = s->run({{"input_ids", ids(2, 5)}}, &out);
  ASSERT_TRUE(st.ok()) << st.toString();
  ASSERT_EQ(out.count("logits"), 1u);
  EXPECT_EQ(out["logits"].shape(), (std::vector<int64_t>{2, 5, 512}));
  EXPECT_EQ(out["logits"].dtype(), DType::Float32);
  // Same request, same answer; a selected output list works too.
  std::map<std::string, Tensor> again;
  ASSERT_TRUE(s->run({{"input_ids", ids(2, 5)}}, &again, {"logits"}).ok());
  EXPECT_EQ(0, std::memcmp(out["logits"].raw(), again["logits"].raw(), out["logits"].nbytes()));
}

TEST(Session, RejectsBadInputsWithMessages) {
  auto s = gpt2();
  std::map<std::string, Tensor> out;
  Status st = s->run({{"input_ids", ids(1, 4)}, {"bogus", ids(1, 4)}}, &out);
  EXPECT_EQ(st.code(), StatusCode::InvalidArgument);
  EXPECT_NE(st.message().find("unknown input 'bogus'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("'input_ids'"), std::string::npos) << st.message();

  st = s->run({}, &out);
  EXPECT_EQ(st.code(), StatusCode::InvalidArgument);
  EXPECT_NE(st.message().find("input 'input_ids' was not given"), std::string::npos) << st.message();

  st = s->run({{"input_ids", Tensor(DType::Float32, {1, 4})}}, &out);
  EXPECT_EQ(st.code(), StatusCode::InvalidArgument);
  EXPECT_NE(st.message().find("element type float32, the model wants int64"), std::string::npos) << st.message();

  st = s->run({{"input_ids", Tensor(DType::Int64, {4})}}, &out);
  EXPECT_EQ(st.code(), StatusCode::InvalidArgument);
  EXPECT_NE(st.message().find("has shape [4]"), std::string::npos) << st.message();

  st = s->run({{"input_ids", ids(1, 4)}}, &out, {"nope"});
  EXPECT_EQ(st.code(), StatusCode::InvalidArgument);
  EXPECT_TRUE(out.empty());
}

TEST(Session, CreateErrors) {
  std::unique_ptr<Session> s;
  Status st = Session::fromModel("/nonexistent/model.onnx", &s);
  EXPECT_EQ(st.code(), StatusCode::NotFound);
  EXPECT_FALSE(s);

  std::string garbage = ::testing::TempDir() + "/hetplan_session_garbage.onnx";
  { std::ofstream(garbage) << "this is not a protobuf \xff\xff\xff\xff"; }
  st = Session::fromModel(garbage, &s);
  EXPECT_EQ(st.code(), StatusCode::InvalidModel) << st.toString();
  std::remove(garbage.c_str());

  st = Session::fromPlan("/nonexistent/model.plan", &s);
  EXPECT_EQ(st.code(), StatusCode::NotFound) << st.toString();
  EXPECT_NE(st.message().find("/nonexistent/model.plan: cannot open the plan file"), std::string::npos);
}

namespace {
/// A plan file that readPlan accepts (header, schema version, settings)
/// without the rest: enough for the checks a session makes first.
std::string writeBarePlan(const std::string &name, const std::string &mode, const std::string &model) {
  hetplan::plan::Plan p;
  p.set_schema_version(hetplan::runtime::kPlanSchemaVersion);
  p.mutable_settings()->set_mode(mode);
  p.mutable_model()->set_path(model);
  std::string path = ::testing::TempDir() + "/" + name, error;
  EXPECT_TRUE(hetplan::runtime::writePlan(path, p, error)) << error;
  return path;
}
} // namespace

TEST(Session, PlanCreateErrorsNameTheProblem) {
  std::unique_ptr<Session> s;
  // Not a plan file at all, and a plan file cut short.
  std::string garbage = ::testing::TempDir() + "/hetplan_session_garbage.plan";
  { std::ofstream(garbage) << "this is not a plan"; }
  Status st = Session::fromPlan(garbage, &s);
  EXPECT_EQ(st.code(), StatusCode::InvalidModel) << st.toString();
  EXPECT_NE(st.message().find(garbage + ": not a hetplan plan"), std::string::npos) << st.message();
  std::string good = writeBarePlan("hetplan_session_bare.plan", "infer", kGpt2);
  std::string bytes;
  {
    std::ifstream f(good, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), {});
  }
  std::string cut = ::testing::TempDir() + "/hetplan_session_cut.plan";
  { std::ofstream(cut, std::ios::binary) << bytes.substr(0, bytes.size() - 3); }
  st = Session::fromPlan(cut, &s);
  EXPECT_EQ(st.code(), StatusCode::InvalidModel) << st.toString();
  EXPECT_NE(st.message().find(cut + ": "), std::string::npos);
  EXPECT_FALSE(s);
  // Session::create tells plans from models by the header: the cut plan is
  // reported as a plan, not as a broken ONNX model.
  st = Session::create(cut, &s);
  EXPECT_EQ(st.code(), StatusCode::InvalidModel);
  EXPECT_EQ(st.message().find("ONNX"), std::string::npos) << st.message();

  // The plan's model is missing: NotFound, saying how to point at it.
  std::string orphan = writeBarePlan("hetplan_session_orphan.plan", "infer", "gone/model.onnx");
  st = Session::fromPlan(orphan, &s);
  EXPECT_EQ(st.code(), StatusCode::NotFound) << st.toString();
  EXPECT_NE(st.message().find("gone/model.onnx"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("SessionOptions::modelPath"), std::string::npos) << st.message();
  hetplan::SessionOptions o;
  o.modelPath = "/nonexistent/other.onnx";
  st = Session::fromPlan(orphan, &s, o);
  EXPECT_EQ(st.code(), StatusCode::NotFound);
  EXPECT_NE(st.message().find("/nonexistent/other.onnx"), std::string::npos) << st.message();

  // A plan that does not match its model (no stages, ranks, node names).
  st = Session::fromPlan(good, &s);
  EXPECT_EQ(st.code(), StatusCode::InvalidModel) << st.toString();
  EXPECT_NE(st.message().find(good), std::string::npos) << st.message();

  // Training plans and CUDA plans are refused with the reason.
  std::string train = writeBarePlan("hetplan_session_train.plan", "train", kGpt2);
  st = Session::fromPlan(train, &s);
  EXPECT_EQ(st.code(), StatusCode::Unsupported) << st.toString();
  EXPECT_NE(st.message().find("training plan"), std::string::npos);
  hetplan::SessionOptions cuda;
  cuda.device = hetplan::Device::Cuda;
  st = Session::fromPlan(good, &s, cuda);
  // Without CUDA here, refused saying so; with it, this bare plan fails to load.
  if (st.message().find("device cuda") != std::string::npos)
    EXPECT_EQ(st.code(), StatusCode::Unsupported) << st.toString();
  else
    EXPECT_EQ(st.code(), StatusCode::InvalidModel) << st.toString();
  hetplan::SessionOptions negative;
  negative.threads = -2;
  EXPECT_EQ(Session::fromModel(kGpt2, &s, negative).code(), StatusCode::InvalidArgument);
  for (const std::string &f : {garbage, good, cut, orphan, train}) std::remove(f.c_str());
}

TEST(Session, OptionsThreadsAndProfiling) {
  hetplan::SessionOptions o;
  o.threads = 1;
  o.profiling = true;
  o.profilePrefix = ::testing::TempDir() + "/hetplan_session_profile";
  std::unique_ptr<Session> s;
  ASSERT_TRUE(Session::fromModel(kGpt2, &s, o).ok());
  EXPECT_FALSE(s->isPlan());
  EXPECT_EQ(s->ranks(), 1);
  EXPECT_EQ(s->processRank(), -1);
  std::map<std::string, Tensor> one, again;
  ASSERT_TRUE(s->run({{"input_ids", ids(2, 5)}}, &one).ok());
  ASSERT_TRUE(s->run({{"input_ids", ids(2, 5)}}, &again).ok());
  // One thread gives the default session's answer.
  auto plain = gpt2();
  std::map<std::string, Tensor> ref;
  ASSERT_TRUE(plain->run({{"input_ids", ids(2, 5)}}, &ref).ok());
  for (int64_t i = 0; i < ref["logits"].numel(); ++i)
    ASSERT_NEAR(one["logits"].data<float>()[i], ref["logits"].data<float>()[i], 1e-5);
  std::string path;
  Status st = s->endProfiling(&path);
  ASSERT_TRUE(st.ok()) << st.toString();
  EXPECT_EQ(path.rfind(o.profilePrefix + "_", 0), 0u) << path;
  std::ifstream f(path);
  std::string trace((std::istreambuf_iterator<char>(f)), {});
  EXPECT_NE(trace.find("\"traceEvents\":["), std::string::npos);
  EXPECT_NE(trace.find("\"runs\":2"), std::string::npos);
  EXPECT_NE(trace.find("\"op_type\":\"MatMul\""), std::string::npos);
  EXPECT_NE(trace.find("\"name\":\"run\""), std::string::npos);
  std::remove(path.c_str());
  // A new recording starts empty; a session without profiling says so.
  ASSERT_TRUE(s->endProfiling(&path).ok());
  std::ifstream f2(path);
  std::string empty((std::istreambuf_iterator<char>(f2)), {});
  EXPECT_NE(empty.find("\"runs\":0"), std::string::npos);
  std::remove(path.c_str());
  st = plain->endProfiling(&path);
  EXPECT_EQ(st.code(), StatusCode::InvalidArgument);
  EXPECT_NE(st.message().find("profiling is off"), std::string::npos);
}

TEST(Session, ConcurrentRunsMatchSequentialOnes) {
  auto s = gpt2();
  const int kThreads = 4, kRuns = 10;
  std::vector<Tensor> ref;
  for (int t = 0; t < kThreads; ++t) {
    std::map<std::string, Tensor> out;
    ASSERT_TRUE(s->run({{"input_ids", ids(1, 3 + t, t)}}, &out).ok());
    ref.push_back(out["logits"].clone());
  }
  std::vector<int> bad(kThreads, 0);
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t)
    pool.emplace_back([&, t] {
      for (int i = 0; i < kRuns; ++i) {
        std::map<std::string, Tensor> out;
        if (!s->run({{"input_ids", ids(1, 3 + t, t)}}, &out).ok()) { ++bad[t]; continue; }
        const float *a = ref[t].data<float>(), *b = out["logits"].data<float>();
        for (int64_t j = 0; j < ref[t].numel(); ++j)
          if (std::fabs(a[j] - b[j]) > 1e-5f + 1e-5f * std::fabs(a[j])) { ++bad[t]; break; }
      }
    });
  for (auto &th : pool) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(bad[t], 0) << "thread " << t;
}

TEST(SessionCApi, CreateRunDestroy) {
  hetplan_session *s = nullptr;
  hetplan_error *err = nullptr;
  ASSERT_EQ(hetplan_session_create_from_model(kGpt2.c_str(), &s, &err), HETPLAN_OK);
  EXPECT_EQ(err, nullptr);
  ASSERT_EQ(hetplan_session_input_count(s), 1u);
  hetplan_tensor info;
  ASSERT_EQ(hetplan_session_input_info(s, 0, &info), HETPLAN_OK);
  EXPECT_STREQ(info.name, "input_ids");
  EXPECT_EQ(info.dtype, HETPLAN_INT64);
  EXPECT_EQ(info.rank, 2u);
  EXPECT_EQ(hetplan_session_input_info(s, 1, &info), HETPLAN_INVALID_ARGUMENT);

  int64_t shape[2] = {1, 6};
  int64_t data[6] = {1, 2, 3, 4, 5, 6};
  hetplan_tensor in = {"input_ids", HETPLAN_INT64, 2, shape, data, sizeof data};
  hetplan_result *r = nullptr;
  ASSERT_EQ(hetplan_session_run(s, &in, 1, &r, &err), HETPLAN_OK) << hetplan_error_message(err);
  ASSERT_EQ(hetplan_result_count(r), 1u);
  hetplan_tensor out;
  ASSERT_EQ(hetplan_result_find(r, "logits", &out), HETPLAN_OK);
  EXPECT_EQ(out.dtype, HETPLAN_FLOAT32);
  ASSERT_EQ(out.rank, 3u);
  EXPECT_EQ(out.shape[0], 1);
  EXPECT_EQ(out.shape[1], 6);
  EXPECT_EQ(out.shape[2], 512);
  EXPECT_EQ(out.nbytes, 6u * 512u * 4u);
  EXPECT_EQ(hetplan_result_find(r, "nope", &out), HETPLAN_NOT_FOUND);

  // The C++ API gives the same numbers.
  std::unique_ptr<Session> cpp = gpt2();
  Tensor t(DType::Int64, {1, 6});
  std::memcpy(t.raw(), data, sizeof data);
  std::map<std::string, Tensor> cout;
  ASSERT_TRUE(cpp->run({{"input_ids", t}}, &cout).ok());
  hetplan_result_find(r, "logits", &out);
  EXPECT_EQ(0, std::memcmp(out.data, cout["logits"].raw(), out.nbytes));
  hetplan_result_free(r);
  hetplan_session_destroy(s);
}

TEST(SessionCApi, ErrorsAreCodesWithMessages) {
  hetplan_session *s = nullptr;
  hetplan_error *err = nullptr;
  EXPECT_EQ(hetplan_session_create_from_model("/nonexistent.onnx", &s, &err), HETPLAN_NOT_FOUND);
  EXPECT_EQ(s, nullptr);
  ASSERT_NE(err, nullptr);
  EXPECT_EQ(hetplan_error_code(err), HETPLAN_NOT_FOUND);
  EXPECT_NE(std::string(hetplan_error_message(err)).find("/nonexistent.onnx"), std::string::npos);
  hetplan_error_free(err);
  // The error out-parameter is optional.
  EXPECT_EQ(hetplan_session_create_from_plan("x.plan", &s, nullptr), HETPLAN_NOT_FOUND);
  // Options: bad values are refused; a model through hetplan_session_create.
  hetplan_session_options *o = nullptr;
  ASSERT_EQ(hetplan_session_options_create(&o), HETPLAN_OK);
  EXPECT_EQ(hetplan_session_options_set_threads(o, -1), HETPLAN_INVALID_ARGUMENT);
  EXPECT_EQ(hetplan_session_options_set_device(o, (hetplan_device)7), HETPLAN_INVALID_ARGUMENT);
  EXPECT_EQ(hetplan_session_options_set_plan_ranks(o, (hetplan_plan_ranks)9), HETPLAN_INVALID_ARGUMENT);
  EXPECT_EQ(hetplan_session_options_set_threads(nullptr, 1), HETPLAN_INVALID_ARGUMENT);
  EXPECT_EQ(hetplan_session_options_set_threads(o, 2), HETPLAN_OK);
  ASSERT_EQ(hetplan_session_create(kGpt2.c_str(), o, &s, nullptr), HETPLAN_OK);
  EXPECT_EQ(hetplan_session_is_plan(s), 0);
  EXPECT_EQ(hetplan_session_rank_count(s), 1);
  const char *trace = nullptr;
  EXPECT_EQ(hetplan_session_end_profiling(s, &trace, nullptr), HETPLAN_INVALID_ARGUMENT);
  EXPECT_EQ(trace, nullptr);
  hetplan_session_destroy(s);
  s = nullptr;
  hetplan_session_options_free(o);

  ASSERT_EQ(hetplan_session_create_from_model(kGpt2.c_str(), &s, nullptr), HETPLAN_OK);
  int64_t shape[2] = {1, 2};
  int64_t data[2] = {3, 4};
  float fdata[2] = {3, 4};
  // Sizes that overflow: 2^62 x 4 elements wrap to 0 in unchecked
  // arithmetic, which 0 bytes of data would then satisfy.
  int64_t wrap[2] = {int64_t(1) << 62, 4}, huge[2] = {1, int64_t(1) << 61};
  hetplan_result *r = nullptr;
  struct Case { hetplan_tensor t; const char *msg; } cases[] = {
      {{"input_ids", HETPLAN_INT64, 2, wrap, data, 0}, "is too large"},
      {{"input_ids", HETPLAN_INT64, 2, huge, data, 0}, "is too large"},
      {{"input_ids", HETPLAN_INT64, 2, shape, data, 8}, "nbytes is 8"},
      {{"input_ids", HETPLAN_FLOAT32, 2, shape, fdata, sizeof fdata}, "float32"},
      {{"tokens", HETPLAN_INT64, 2, shape, data, sizeof data}, "unknown input 'tokens'"},
      {{"input_ids", (hetplan_dtype)99, 2, shape, data, sizeof data}, "unknown dtype 99"},
      {{"input_ids", HETPLAN_INT64, 2, shape, nullptr, sizeof data}, "data is NULL"},
      {{nullptr, HETPLAN_INT64, 2, shape, data, sizeof data}, "name is NULL"},
  };
  for (const auto &c : cases) {
    EXPECT_EQ(hetplan_session_run(s, &c.t, 1, &r, &err), HETPLAN_INVALID_ARGUMENT) << c.msg;
    EXPECT_EQ(r, nullptr);
    ASSERT_NE(err, nullptr);
    EXPECT_NE(std::string(hetplan_error_message(err)).find(c.msg), std::string::npos)
        << hetplan_error_message(err);
    hetplan_error_free(err);
  }
  EXPECT_EQ(hetplan_session_run(s, nullptr, 0, &r, &err), HETPLAN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hetplan_error_message(err)).find("was not given"), std::string::npos);
  hetplan_error_free(err);
  EXPECT_EQ(hetplan_session_run(s, nullptr, 0, nullptr, nullptr), HETPLAN_INVALID_ARGUMENT);
  hetplan_session_destroy(s);
  hetplan_session_destroy(nullptr);
  hetplan_result_free(nullptr);
  EXPECT_STREQ(hetplan_status_name(HETPLAN_UNSUPPORTED), "HETPLAN_UNSUPPORTED");
  EXPECT_EQ(hetplan_dtype_size(HETPLAN_FLOAT16), 2u);
}

TEST(Session, CudaDeviceRunsOrSaysWhyNot) {
  hetplan::SessionOptions o;
  o.device = hetplan::Device::Cuda;
  std::unique_ptr<Session> s;
  Status st = Session::fromModel(kGpt2, &s, o);
  if (!st.ok()) {
    // No CUDA in this build, or no device: refused at create, saying so.
    EXPECT_EQ(st.code(), StatusCode::Unsupported) << st.toString();
    EXPECT_NE(st.message().find("device cuda"), std::string::npos) << st.message();
    EXPECT_FALSE(s);
    GTEST_SKIP() << st.message();
  }
  std::map<std::string, Tensor> gpu, cpu;
  ASSERT_TRUE(s->run({{"input_ids", ids(2, 7)}}, &gpu).ok());
  ASSERT_TRUE(gpt2()->run({{"input_ids", ids(2, 7)}}, &cpu).ok());
  ASSERT_EQ(gpu["logits"].shape(), cpu["logits"].shape());
  for (int64_t i = 0; i < cpu["logits"].numel(); ++i) {
    float want = cpu["logits"].data<float>()[i];
    ASSERT_NEAR(gpu["logits"].data<float>()[i], want, 1e-4 * (1 + std::fabs(want))) << i;
  }
}
