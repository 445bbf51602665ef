//===- ServeWorkloadTest.cpp - request traces and length tables ------------===//
//
// What `hetplan compile --mode serve` reads for its workload: --prompt-len /
// --output-len tables (quantiles, means, errors) and --workload traces
// (JSON lines and CSV, errors naming the line).
//
//===----------------------------------------------------------------------===//

#include "passes/planner/ServeWorkload.h"

#include <gtest/gtest.h>

using namespace hetplan::planner::serve;

namespace {

std::string errorOf(llvm::Error e) { return llvm::toString(std::move(e)); }

TEST(ServeWorkload, ACountIsEveryRequestTheSame) {
  auto d = parseLength("760", "--prompt-len");
  ASSERT_TRUE(bool(d)) << errorOf(d.takeError());
  EXPECT_EQ(d->at(0), 760);
  EXPECT_EQ(d->at(0.99), 760);
  EXPECT_DOUBLE_EQ(d->mean(), 760);
  EXPECT_EQ(d->text(), "760");
}

TEST(ServeWorkload, PercentileTablesInterpolateAndHoldTheirEnds) {
  auto d = parseLength("p50=500,p90=1500,p99=3000", "--prompt-len");
  ASSERT_TRUE(bool(d)) << errorOf(d.takeError());
  EXPECT_EQ(d->at(0.1), 500);   // below the first point: its tokens
  EXPECT_EQ(d->at(0.5), 500);
  EXPECT_EQ(d->at(0.7), 1000);  // halfway from p50 to p90
  EXPECT_EQ(d->at(0.995), 3000);
  // 0.5 x 500 + 0.4 x 1000 + 0.09 x 2250 + 0.01 x 3000
  EXPECT_NEAR(d->mean(), 250 + 400 + 202.5 + 30, 1e-9);
  EXPECT_EQ(d->text(), "p50 500, p90 1500, p99 3000 (mean 882)");
  auto m = parseLength("min=10, max=30", "--output-len");
  ASSERT_TRUE(bool(m)) << errorOf(m.takeError());
  EXPECT_NEAR(m->mean(), 20, 1e-9);
}

TEST(ServeWorkload, BadTablesNameTheItem) {
  for (auto [text, want] : std::vector<std::pair<const char *, const char *>>{
           {"0", "give a token count"},
           {"abc", "give a token count"},
           {"p50=500,p40=600", "percentiles must increase ('p40=600' after p50)"},
           {"p50=500,p90=100", "'p90=100' is fewer tokens than p50's 500"},
           {"q50=5", "'q50=5' is not a percentile"},
           {"p101=5", "'p101=5' is not a percentile"},
           {"p50=-3", "'p50=-3' needs a token count"},
           {"p50=2000000", "'p50=2000000' needs a token count"}}) {
    auto d = parseLength(text, "--prompt-len");
    ASSERT_FALSE(bool(d)) << text;
    std::string e = errorOf(d.takeError());
    EXPECT_NE(e.find("--prompt-len"), std::string::npos) << e;
    EXPECT_NE(e.find(want), std::string::npos) << text << ": " << e;
  }
}

TEST(ServeWorkload, TracesInJsonLinesAndCsv) {
  auto j = parseTrace("{\"arrival_s\": 0, \"prompt_tokens\": 760, \"output_tokens\": 230}\n\n"
                      "{\"arrival_s\": 0.5, \"prompt_tokens\": 12, \"output_tokens\": 1, \"id\": 7}\n",
                      "t.jsonl");
  ASSERT_TRUE(bool(j)) << errorOf(j.takeError());
  ASSERT_EQ(j->size(), 2u);
  EXPECT_EQ((*j)[0].promptTokens, 760);
  EXPECT_EQ((*j)[1].outputTokens, 1);
  EXPECT_DOUBLE_EQ((*j)[1].arrival, 0.5);
  auto c = parseTrace("id,output_tokens,arrival_s,prompt_tokens\n1,5,0.0,100\n2,6,2.0,200\n3,7,4,300\n",
                      "t.csv");
  ASSERT_TRUE(bool(c)) << errorOf(c.takeError());
  ASSERT_EQ(c->size(), 3u);
  EXPECT_EQ((*c)[2].promptTokens, 300);
  EXPECT_EQ((*c)[2].outputTokens, 7);
  Workload w;
  w.trace = *c;
  EXPECT_DOUBLE_EQ(w.traceRate(), 0.5);  // 2 gaps in 4 s
}

TEST(ServeWorkload, BadTracesNameTheLine) {
  for (auto [text, want] : std::vector<std::pair<const char *, const char *>>{
           {"", "t: no requests"},
           {"{\"arrival_s\": 0, \"prompt_tokens\": 1}", "t:1: 'output_tokens' needs a token count"},
           {"{\"arrival_s\": 1, \"prompt_tokens\": 1, \"output_tokens\": 1}\n"
            "{\"arrival_s\": 0.5, \"prompt_tokens\": 1, \"output_tokens\": 1}",
            "t:2: arrival_s 0.5 is before the previous request's 1"},
           {"{\"arrival_s\": -1, \"prompt_tokens\": 1, \"output_tokens\": 1}", "t:1: arrival_s -1"},
           {"{\"prompt_tokens\": 1, \"output_tokens\": 1}", "t:1: 'arrival_s'"},
           {"{oops", "t:1: not JSON"},
           {"arrival_s,prompt_tokens\n0,1\n", "t:1: the CSV header has no column 'output_tokens'"},
           {"arrival_s,prompt_tokens,output_tokens\n0,1\n", "t:2: 2 column(s)"},
           {"arrival_s,prompt_tokens,output_tokens\nx,1,1\n", "t:2: arrival_s 'x' is not a number"},
           {"arrival_s,prompt_tokens,output_tokens\n0,0,1\n", "t:2: prompt_tokens '0' needs a token count"},
           {"arrival_s,prompt_tokens,output_tokens\n", "t: no requests"}}) {
    auto t = parseTrace(text, "t");
    ASSERT_FALSE(bool(t)) << text;
    std::string e = errorOf(t.takeError());
    EXPECT_NE(e.find(want), std::string::npos) << text << ": " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  auto many = parseTrace("{\"arrival_s\": 0, \"prompt_tokens\": 1, \"output_tokens\": 1}\n"
                         "{\"arrival_s\": 0, \"prompt_tokens\": 1, \"output_tokens\": 1}\n",
                         "t", 1);
  ASSERT_FALSE(bool(many));
  EXPECT_NE(errorOf(many.takeError()).find("t:2: more than 1 requests"), std::string::npos);
}

TEST(ServeWorkload, LayoutsParseAndBadOnesNameTheReplicaAndStage) {
  auto ok = parseServeLayout(R"({"replicas": [{"tensor_parallel": 2, "stages": [
      {"ranks": [0, 1], "last_layer": 3}, {"ranks": [2, 3], "last_layer": 9}]}]})",
                             "l.json");
  ASSERT_TRUE(bool(ok)) << errorOf(ok.takeError());
  ASSERT_EQ(ok->size(), 1u);
  EXPECT_EQ((*ok)[0].tensorParallel, 2);
  EXPECT_EQ((*ok)[0].stages[1].ranks, (std::vector<int>{2, 3}));
  EXPECT_EQ((*ok)[0].stages[1].lastLayer, 9);
  for (auto [text, want] : std::vector<std::pair<const char *, const char *>>{
           {"[]", "l.json: expected {\"replicas\": [...]}"},
           {R"({"replicas": [{"stages": []}]})", "replica 0: \"stages\" must be a non-empty list"},
           {R"({"replicas": [{"stages": [{"ranks": [0, 1], "last_layer": 1}]}]})",
            "replica 0, stage 0: \"ranks\" must list tensor_parallel = 1 rank(s)"},
           {R"({"replicas": [{"stages": [{"ranks": [0], "last_layer": 3}, {"ranks": [1], "last_layer": 3}]}]})",
            "replica 0, stage 1: last_layer 3 does not follow the previous stage's 3"},
           {R"({"replicas": [{"stages": [{"ranks": [-1], "last_layer": 3}]}]})",
            "ranks must be device ranks"},
           // A field name with a newline in it (a fuzzer's finding): the
           // error stays one line.
           {"{\"replicas\": [{\"t\\nsor\": 1}]}", "unknown field 't\\x0asor'"}}) {
    auto l = parseServeLayout(text, "l.json");
    ASSERT_FALSE(bool(l)) << text;
    std::string e = errorOf(l.takeError());
    EXPECT_NE(e.find(want), std::string::npos) << text << ": " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

} // namespace
