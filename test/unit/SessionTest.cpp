//===- SessionTest.cpp - hetplan::Session and the C API --------------------===//
#include "hetplan/hetplan.h"
#include "hetplan/runtime/Session.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
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

  st = Session::fromPlan("model.plan", &s);
  EXPECT_EQ(st.code(), StatusCode::NotImplemented);
  EXPECT_NE(st.message().find("not implemented yet"), std::string::npos);
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
  EXPECT_EQ(hetplan_session_create_from_plan("x.plan", &s, nullptr), HETPLAN_NOT_IMPLEMENTED);

  ASSERT_EQ(hetplan_session_create_from_model(kGpt2.c_str(), &s, nullptr), HETPLAN_OK);
  int64_t shape[2] = {1, 2};
  int64_t data[2] = {3, 4};
  float fdata[2] = {3, 4};
  hetplan_result *r = nullptr;
  struct Case { hetplan_tensor t; const char *msg; } cases[] = {
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
