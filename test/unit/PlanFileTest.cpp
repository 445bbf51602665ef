//===- PlanFileTest.cpp - plan files: write, read, check ------------------===//
//
// Built against hetplan_runtime alone: the runtime must link without MLIR.
// makeSamplePlan is shared with ExplainTest.cpp.
//
//===----------------------------------------------------------------------===//

#include "hetplan/runtime/Explain.h"
#include "hetplan/runtime/PlanFile.h"

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <dirent.h>
#include <fstream>
#include <map>
#include <sstream>
#include <sys/stat.h>
#include <tuple>
#include <unistd.h>

using namespace hetplan;
using namespace hetplan::runtime;
using Instruction = plan::Instruction;

/// A valid plan of `numStages` stages of `workers` data-parallel workers
/// (one rank each), `microBatches` micro-batches of 8 samples, scheduled
/// 1F1B (or GPipe), with predicted times from a small event simulation.
plan::Plan makeSamplePlan(int numStages = 2, int workers = 2, int microBatches = 4,
                          bool gpipe = false) {
  plan::Plan p;
  p.set_schema_version(kPlanSchemaVersion);
  p.set_producer("hetplan test");

  // Model: stage 0 gets 3 layers, the others 2; 2 nodes per layer.
  auto *model = p.mutable_model();
  model->set_path("models/tiny-gpt.onnx");
  model->set_sha256("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
  model->set_size_bytes(uint64_t(498) << 20);
  model->set_graph("tiny-gpt");
  const int numLayers = 2 * numStages + 1;
  for (int l = 0; l < numLayers; ++l) {
    auto *layer = model->add_layers();
    layer->set_name(l == 0 ? "embed" : l == numLayers - 1 ? "head" : "block" + std::to_string(l - 1));
    layer->set_first_node(uint32_t(2 * l));
    layer->set_last_node(uint32_t(2 * l + 1));
    layer->set_forward_flops(1.5e9);
    layer->set_parameters(7000000);
    model->add_node_names(layer->name() + "/MatMul");
    model->add_node_names(layer->name() + "/Add");
  }
  model->set_parameters(int64_t(numLayers) * 7000000);

  // Cluster: one node per stage; even stages A100s, odd stages V100s.
  auto *cluster = p.mutable_cluster();
  cluster->set_spec("node0:2xA100-80GB,node1:2xV100-32GB");
  cluster->set_inter_node_bandwidth_gbs(25);
  cluster->set_inter_node_latency_us(5);
  for (int s = 0; s < numStages; ++s) {
    auto *node = cluster->add_nodes();
    node->set_name("node" + std::to_string(s));
    node->set_link_kind("nvlink");
    node->set_link_bandwidth_gbs(s % 2 ? 300 : 600);
    for (int w = 0; w < workers; ++w) {
      uint32_t rank = uint32_t(s * workers + w);
      node->add_ranks(rank);
      auto *d = cluster->add_devices();
      d->set_rank(rank);
      d->set_type(s % 2 ? "V100-32GB" : "A100-80GB");
      d->set_node(uint32_t(s));
      d->set_local_index(uint32_t(w));
      d->set_memory_bytes(uint64_t(s % 2 ? 32 : 80) << 30);
      d->set_peak_tflops(s % 2 ? 125 : 312);
      d->set_speed_factor(1);
    }
  }

  auto *settings = p.mutable_settings();
  settings->set_mode("train");
  settings->set_global_batch(8 * microBatches);
  settings->set_sequence(1024);
  settings->set_dtype("bf16");
  settings->set_micro_batches(uint32_t(microBatches));
  settings->set_schedule(gpipe ? "gpipe" : "1f1b");
  settings->set_strategy("hetplan");
  settings->set_optimizer("adam");
  (*settings->mutable_bound_dims())["sequence"] = 1024;
  (*settings->mutable_bound_dims())["batch"] = 8;

  const int perWorker = 8 / workers;
  std::vector<double> fwd(static_cast<size_t>(numStages)), bwd(static_cast<size_t>(numStages));
  const double send = 0.001, allreduce = 0.005, optimizer = 0.002;
  for (int s = 0; s < numStages; ++s) {
    auto *stage = p.add_stages();
    stage->set_index(uint32_t(s));
    stage->set_first_layer(s == 0 ? 0 : uint32_t(2 * s + 1));
    stage->set_last_layer(uint32_t(2 * s + 2));
    stage->set_first_node(model->layers(int(stage->first_layer())).first_node());
    stage->set_last_node(model->layers(int(stage->last_layer())).last_node());
    stage->set_tensor_parallel(1);
    for (int w = 0; w < workers; ++w) {
      auto *worker = stage->add_workers();
      worker->add_ranks(uint32_t(s * workers + w));
      worker->set_samples(perWorker);
      worker->set_sample_offset(w * perWorker);
    }
    fwd[size_t(s)] = s % 2 ? 0.012 : 0.010;
    bwd[size_t(s)] = 2 * fwd[size_t(s)];
    stage->set_forward_s(fwd[size_t(s)]);
    stage->set_backward_s(bwd[size_t(s)]);
    stage->set_gradient_allreduce_s(workers > 1 ? allreduce : 0);
    stage->set_send_activation_s(s + 1 < numStages ? send : 0);
  }

  // Programs.
  const uint32_t M = uint32_t(microBatches);
  for (int s = 0; s < numStages; ++s) {
    std::vector<std::pair<bool, uint32_t>> order;  // (backward?, micro-batch)
    if (gpipe) {
      for (uint32_t m = 0; m < M; ++m)
        order.push_back({false, m});
      for (uint32_t m = 0; m < M; ++m)
        order.push_back({true, m});
    } else {
      uint32_t warmup = std::min<uint32_t>(uint32_t(numStages - s - 1), M);
      for (uint32_t m = 0; m < warmup; ++m)
        order.push_back({false, m});
      for (uint32_t i = 0; i + warmup < M; ++i) {
        order.push_back({false, warmup + i});
        order.push_back({true, i});
      }
      for (uint32_t m = M - warmup; m < M; ++m)
        order.push_back({true, m});
    }
    for (int w = 0; w < workers; ++w) {
      auto *rank = p.add_ranks();
      const uint32_t r = uint32_t(s * workers + w);
      rank->set_rank(r);
      rank->set_stage(uint32_t(s));
      rank->set_worker(uint32_t(w));
      const auto &stage = p.stages(s);
      auto add = [&](Instruction::Kind kind, uint32_t m, int peerStage) {
        auto *ins = rank->add_program();
        ins->set_kind(kind);
        ins->set_micro_batch(m);
        if (peerStage >= 0)
          ins->add_peers(uint32_t(peerStage * workers + w));
        ins->set_samples(perWorker);
        if (kind == Instruction::FORWARD || kind == Instruction::BACKWARD) {
          ins->set_first_node(stage.first_node());
          ins->set_last_node(stage.last_node());
        } else {
          ins->set_bytes(int64_t(perWorker) * 1024 * 768 * 2);
        }
      };
      for (auto [backward, m] : order) {
        if (!backward) {
          if (s > 0)
            add(Instruction::RECV_ACTIVATION, m, s - 1);
          add(Instruction::FORWARD, m, -1);
          if (s + 1 < numStages)
            add(Instruction::SEND_ACTIVATION, m, s + 1);
        } else {
          if (s + 1 < numStages)
            add(Instruction::RECV_GRADIENT, m, s + 1);
          add(Instruction::BACKWARD, m, -1);
          if (s > 0)
            add(Instruction::SEND_GRADIENT, m, s - 1);
        }
      }
      if (workers > 1) {
        auto *ins = rank->add_program();
        ins->set_kind(Instruction::ALLREDUCE_GRADIENTS);
        for (int v = 0; v < workers; ++v)
          if (v != w)
            ins->add_peers(uint32_t(s * workers + v));
        ins->set_bytes(int64_t(5) * 7000000 * 2);
      }
      rank->add_program()->set_kind(Instruction::OPTIMIZER_STEP);
      auto *mem = rank->mutable_memory();
      mem->set_capacity(cluster->devices(int(r)).memory_bytes());
      mem->set_parameters(uint64_t(3) * 7000000 * 2);
      mem->set_gradients(uint64_t(3) * 7000000 * 2);
      mem->set_optimizer_state(uint64_t(3) * 7000000 * 12);
      mem->set_activations(uint64_t(numStages - s) * (uint64_t(3) << 30));
      mem->set_workspace(uint64_t(1) << 30);
      mem->set_peak(mem->parameters() + mem->gradients() + mem->optimizer_state() +
                    mem->activations() + mem->workspace());
    }
  }

  // Predicted times: compute runs in program order; a send takes `send`
  // after its forward/backward without holding up compute; a receive ends
  // when its send has arrived; the all-reduce starts when all its workers
  // reach it.
  const int numRanks = p.ranks_size();
  std::vector<int> next(size_t(numRanks), 0);
  std::vector<double> clock(size_t(numRanks), 0);
  std::map<std::tuple<uint32_t, uint32_t, int, uint32_t>, double> arrived;  // (from, to, kind, mb)
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < numRanks; ++r) {
      auto *program = p.mutable_ranks(r)->mutable_program();
      const int s = r / workers;
      while (next[size_t(r)] < program->size()) {
        auto &ins = program->at(next[size_t(r)]);
        double &c = clock[size_t(r)];
        double start = c, end = c;
        switch (ins.kind()) {
        case Instruction::FORWARD: end = start + fwd[size_t(s)]; break;
        case Instruction::BACKWARD: end = start + bwd[size_t(s)]; break;
        case Instruction::OPTIMIZER_STEP: end = start + optimizer; break;
        case Instruction::SEND_ACTIVATION:
        case Instruction::SEND_GRADIENT:
          end = start + send;
          arrived[{uint32_t(r), ins.peers(0), int(ins.kind()), ins.micro_batch()}] = end;
          break;
        case Instruction::RECV_ACTIVATION:
        case Instruction::RECV_GRADIENT: {
          int sendKind = ins.kind() == Instruction::RECV_ACTIVATION ? Instruction::SEND_ACTIVATION
                                                                    : Instruction::SEND_GRADIENT;
          auto it = arrived.find({ins.peers(0), uint32_t(r), sendKind, ins.micro_batch()});
          if (it == arrived.end())
            goto blocked;
          end = std::max(start, it->second);
          break;
        }
        case Instruction::ALLREDUCE_GRADIENTS: {
          // Once every worker has reached it, all of them run it together.
          for (uint32_t peer : ins.peers()) {
            const auto &other = p.ranks(int(peer)).program();
            if (next[peer] >= other.size() ||
                other[next[peer]].kind() != Instruction::ALLREDUCE_GRADIENTS)
              goto blocked;
            start = std::max(start, clock[peer]);
          }
          end = start + allreduce;
          for (uint32_t peer : ins.peers()) {
            auto *other = p.mutable_ranks(int(peer))->mutable_program(next[peer]++);
            other->set_predicted_start_s(start);
            other->set_predicted_end_s(end);
            clock[peer] = end;
          }
          break;
        }
        default: break;
        }
        ins.set_predicted_start_s(start);
        ins.set_predicted_end_s(end);
        if (ins.kind() != Instruction::SEND_ACTIVATION && ins.kind() != Instruction::SEND_GRADIENT)
          c = end;
        ++next[size_t(r)];
        progress = true;
      }
    blocked:;
    }
  }
  double step = 0;
  for (const auto &rank : p.ranks())
    for (const auto &ins : rank.program())
      step = std::max(step, ins.predicted_end_s());
  auto *prediction = p.mutable_prediction();
  prediction->set_step_time_s(step);
  prediction->set_samples_per_s(double(settings->global_batch()) / step);
  prediction->set_bubble_fraction(0.125);
  prediction->set_model_flops_utilization(0.41);
  prediction->set_total_flops_per_step(3 * 1.5e9 * numLayers * double(settings->global_batch()));
  prediction->set_search_time_s(1.25);
  prediction->set_plans_evaluated(4567);
  prediction->set_cost_model("roofline");
  return p;
}

namespace {

/// A fresh folder under the test temp dir, removed with its files at the end.
class TempDir {
public:
  TempDir() {
    std::string pattern = ::testing::TempDir() + "hetplan-plan-XXXXXX";
    path = ::mkdtemp(pattern.data()) ? pattern : "";
  }
  ~TempDir() {
    for (const auto &name : files())
      ::unlink((path + "/" + name).c_str());
    ::rmdir(path.c_str());
  }
  std::string operator/(const std::string &name) const { return path + "/" + name; }
  std::vector<std::string> files() const {
    std::vector<std::string> names;
    if (DIR *dir = ::opendir(path.c_str())) {
      while (auto *entry = ::readdir(dir))
        if (std::string(entry->d_name) != "." && std::string(entry->d_name) != "..")
          names.push_back(entry->d_name);
      ::closedir(dir);
    }
    std::sort(names.begin(), names.end());
    return names;
  }
  std::string path;
};

std::string slurp(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void spit(const std::string &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

std::string readError(const std::string &path) {
  plan::Plan p;
  std::string error;
  EXPECT_FALSE(readPlan(path, p, error)) << path << " was read";
  return error;
}

std::string validationError(const plan::Plan &p) {
  std::string error;
  EXPECT_FALSE(validatePlan(p, error)) << "the plan passed validation";
  return error;
}

} // namespace

TEST(PlanFile, SamplePlanIsValid) {
  plan::Plan p = makeSamplePlan();
  std::string error;
  EXPECT_TRUE(validatePlan(p, error)) << error;
  EXPECT_EQ(p.ranks_size(), 4);
  EXPECT_EQ(p.ranks(0).program_size(), 4 * 2 + 4 * 2 + 1 + 1);  // F/SEND, RECV/B, all-reduce, optimizer
  EXPECT_GT(p.prediction().step_time_s(), 0.1);
  for (const auto &rank : p.ranks())
    for (const auto &ins : rank.program())
      EXPECT_GT(ins.predicted_end_s(), 0) << "rank " << rank.rank() << " " << ins.DebugString();
  // Stage 0 of 1F1B: one warm-up forward, then forward/backward pairs.
  EXPECT_EQ(p.ranks(0).program(0).kind(), Instruction::FORWARD);
  EXPECT_EQ(p.ranks(0).program(2).kind(), Instruction::FORWARD);
  EXPECT_EQ(p.ranks(0).program(4).kind(), Instruction::RECV_GRADIENT);
  for (auto [stages, workers, mb, gpipe] : {std::tuple{1, 4, 1, false}, std::tuple{4, 1, 8, true},
                                            std::tuple{3, 3, 6, false}}) {
    EXPECT_TRUE(validatePlan(makeSamplePlan(stages, workers, mb, gpipe), error)) << error;
  }
}

TEST(PlanFile, WriteThenReadGivesTheSamePlan) {
  TempDir dir;
  plan::Plan p = makeSamplePlan(), back;
  std::string error;
  ASSERT_TRUE(writePlan(dir / "tiny.plan", p, error)) << error;
  ASSERT_TRUE(readPlan(dir / "tiny.plan", back, error)) << error;
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(p, back));
  EXPECT_TRUE(validatePlan(back, error)) << error;
  // The file is the header and the body, nothing else; no temporary files remain.
  std::string bytes = slurp(dir / "tiny.plan");
  EXPECT_EQ(bytes.substr(0, 8), "HETPLAN\n");
  EXPECT_EQ(bytes.size(), kPlanHeaderBytes + p.ByteSizeLong());
  EXPECT_EQ(dir.files(), std::vector<std::string>{"tiny.plan"});
}

TEST(PlanFile, BaselinesRoundTripAndOlderPlansHaveNone) {
  TempDir dir;
  std::string error;
  plan::Plan old = makeSamplePlan(), p = old, back;
  const double step = p.prediction().step_time_s();
  auto add = [&](const char *strategy, bool fits, double seconds, const char *note) {
    plan::Baseline *b = p.add_baselines();
    b->set_strategy(strategy);
    b->set_fits(fits);
    b->set_step_time_s(seconds);
    b->set_samples_per_s(seconds > 0 ? 32 / seconds : 0);
    b->set_note(note);
  };
  add("homogeneous", true, 1.7 * step, "2 stage(s) on 2x A100-80GB");
  add("dp-even", false, 0, "the closest needs 3.1 GiB more on stage 0 of 1 on V100-32GB");
  add("pp-even", true, 2 * step, "4 stage(s) on 2x A100-80GB + 2x V100-32GB");
  ASSERT_TRUE(writePlan(dir / "b.plan", p, error)) << error;
  ASSERT_TRUE(readPlan(dir / "b.plan", back, error)) << error;
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(p, back));
  EXPECT_TRUE(validatePlan(back, error)) << error;
  ASSERT_EQ(back.baselines_size(), 3);
  EXPECT_EQ(back.baselines(1).note(), p.baselines(1).note());
  EXPECT_NEAR(baselineGain(back, back.baselines(0)), 1.7, 1e-9);
  EXPECT_EQ(baselineGain(back, back.baselines(1)), 0);
  std::ostringstream report;
  explainPlan(back, report);
  EXPECT_NE(report.str().find("x1.70  (2 stage(s) on 2x A100-80GB)"), std::string::npos)
      << report.str();
  EXPECT_NE(report.str().find("dp-even      does not fit: the closest needs 3.1 GiB"),
            std::string::npos) << report.str();
  // A plan written before baselines were recorded reads and explains; the
  // same plan with them differs only by them (the schema version is the same).
  ASSERT_TRUE(writePlan(dir / "old.plan", old, error)) << error;
  ASSERT_TRUE(readPlan(dir / "old.plan", back, error)) << error;
  EXPECT_EQ(back.baselines_size(), 0);
  EXPECT_EQ(back.schema_version(), p.schema_version());
  std::ostringstream oldReport;
  explainPlan(back, oldReport);
  EXPECT_NE(oldReport.str().find("Baselines: not recorded"), std::string::npos) << oldReport.str();
  EXPECT_NE(oldReport.str().find("step time"), std::string::npos);
}

TEST(PlanFile, SamePlanSameBytes) {
  TempDir dir;
  std::string error;
  plan::Plan p = makeSamplePlan();
  ASSERT_TRUE(writePlan(dir / "a.plan", p, error)) << error;
  ASSERT_TRUE(writePlan(dir / "b.plan", p, error)) << error;
  EXPECT_EQ(slurp(dir / "a.plan"), slurp(dir / "b.plan"));
  // Map entries inserted in another order give the same bytes.
  plan::Plan q = p;
  auto *dims = q.mutable_settings()->mutable_bound_dims();
  dims->clear();
  for (const char *name : {"zeta", "alpha", "batch", "sequence", "mid"})
    (*dims)[name] = 1;
  plan::Plan r = p;
  r.mutable_settings()->mutable_bound_dims()->clear();
  for (const char *name : {"sequence", "mid", "alpha", "zeta", "batch"})
    (*r.mutable_settings()->mutable_bound_dims())[name] = 1;
  EXPECT_EQ(encodePlan(q), encodePlan(r));
  // Writing over an existing file replaces it.
  ASSERT_TRUE(writePlan(dir / "a.plan", q, error)) << error;
  EXPECT_EQ(slurp(dir / "a.plan"), encodePlan(q));
  EXPECT_EQ(dir.files(), (std::vector<std::string>{"a.plan", "b.plan"}));
}

TEST(PlanFile, ReadErrorsNameTheFileAndTheProblem) {
  TempDir dir;
  EXPECT_EQ(readError(dir / "missing.plan"),
            dir / "missing.plan" + ": cannot open: No such file or directory");
  EXPECT_EQ(readError(dir.path), dir.path + ": cannot open: Is a directory");

  spit(dir / "empty.plan", "");
  EXPECT_EQ(readError(dir / "empty.plan"),
            dir / "empty.plan" + ": not a hetplan plan (the file is empty)");

  // Protobuf would parse this as a message with unknown fields.
  spit(dir / "garbage.plan", std::string("\x08\x01\x12\x03" "abc", 7));
  EXPECT_EQ(readError(dir / "garbage.plan"),
            dir / "garbage.plan" +
                ": not a hetplan plan (it does not start with the HETPLAN header)");
  spit(dir / "text.plan", "hello, world\n");
  EXPECT_NE(readError(dir / "text.plan").find("not a hetplan plan"), std::string::npos);

  plan::Plan future = makeSamplePlan();
  future.set_schema_version(99);
  spit(dir / "future.plan", encodePlan(future));
  EXPECT_EQ(readError(dir / "future.plan"),
            dir / "future.plan" +
                ": plan schema version 99 is not supported by this runtime (it reads version "
                "1); recompile the plan with this hetplan");

  spit(dir / "noversion.plan", encodePlan(plan::Plan()));
  EXPECT_EQ(readError(dir / "noversion.plan"),
            dir / "noversion.plan" + ": not a hetplan plan (no schema_version)");

  std::string bytes = encodePlan(makeSamplePlan());
  spit(dir / "half.plan", bytes.substr(0, bytes.size() / 2));
  std::string body = std::to_string(bytes.size() - kPlanHeaderBytes);
  EXPECT_EQ(readError(dir / "half.plan"),
            dir / "half.plan" + ": truncated plan (the header announces " + body +
                " bytes of plan, the file holds " +
                std::to_string(bytes.size() / 2 - kPlanHeaderBytes) + ")");
  spit(dir / "header.plan", bytes.substr(0, 12));
  EXPECT_EQ(readError(dir / "header.plan"),
            dir / "header.plan" + ": truncated plan (12 bytes, less than the 20-byte header)");
  spit(dir / "magic.plan", bytes.substr(0, 5));
  EXPECT_NE(readError(dir / "magic.plan").find(": truncated plan (5 bytes"), std::string::npos);

  std::string flipped = bytes;
  flipped[flipped.size() / 2] ^= 0x20;
  spit(dir / "flipped.plan", flipped);
  EXPECT_EQ(readError(dir / "flipped.plan"),
            dir / "flipped.plan" + ": corrupt plan (the checksum of its " + body +
                " bytes does not match the header)");
  spit(dir / "long.plan", bytes + "xyz");
  EXPECT_EQ(readError(dir / "long.plan"),
            dir / "long.plan" + ": corrupt plan (3 unexpected bytes after the plan)");
}

TEST(PlanFile, WriteFailuresLeaveNoFile) {
  TempDir dir;
  std::string error;
  plan::Plan p = makeSamplePlan();
  EXPECT_FALSE(writePlan(dir / "no/such/folder/x.plan", p, error));
  EXPECT_EQ(error, dir / "no/such/folder/x.plan" + ": cannot write: No such file or directory");

  // A folder in the way: refused by name, nothing written.
  ASSERT_EQ(::mkdir((dir / "taken").c_str(), 0755), 0);
  EXPECT_FALSE(writePlan(dir / "taken", p, error));
  EXPECT_EQ(error, dir / "taken" + ": is a directory, not a regular file; refusing to replace it");
  EXPECT_EQ(dir.files(), std::vector<std::string>{"taken"});
  ::rmdir((dir / "taken").c_str());

  // An existing plan survives a failed write.
  ASSERT_TRUE(writePlan(dir / "keep.plan", p, error)) << error;
  plan::Plan unversioned = p;
  unversioned.clear_schema_version();
  EXPECT_FALSE(writePlan(dir / "keep.plan", unversioned, error));
  EXPECT_EQ(error, dir / "keep.plan" +
                       ": refusing to write a plan with schema_version 0 (this hetplan writes "
                       "version 1)");
  EXPECT_EQ(slurp(dir / "keep.plan"), encodePlan(p));
  EXPECT_EQ(dir.files(), std::vector<std::string>{"keep.plan"});
}

TEST(PlanFile, ValidateCatchesRanksOutOfRange) {
  plan::Plan p = makeSamplePlan();
  p.mutable_stages(1)->mutable_workers(1)->set_ranks(0, 7);
  EXPECT_EQ(validationError(p), "stage 1 worker 1: rank 7 does not exist (the cluster has 4 devices)");

  p = makeSamplePlan();
  p.mutable_ranks(0)->mutable_program(1)->set_peers(0, 9);  // SEND_ACTIVATION
  EXPECT_EQ(validationError(p), "rank 0 instruction 1 (SEND_ACTIVATION): peer 9 does not exist "
                                "(the cluster has 4 devices)");

  p = makeSamplePlan();
  p.mutable_ranks(0)->mutable_program(1)->set_peers(0, 1);  // a rank of its own stage
  EXPECT_EQ(validationError(p), "rank 0 instruction 1 (SEND_ACTIVATION): peer 1 is in stage 0, "
                                "not in the next stage");

  p = makeSamplePlan();
  p.mutable_stages(0)->mutable_workers(1)->set_ranks(0, 2);  // also in stage 1
  EXPECT_EQ(validationError(p), "rank 2 says stage 1 worker 0, but stage 0 worker 1 lists it");

  p = makeSamplePlan();
  p.mutable_cluster()->mutable_devices(3)->set_rank(5);
  EXPECT_EQ(validationError(p), "device 3 has rank 5 (devices must be listed by rank 0..3)");

  p = makeSamplePlan();
  p.mutable_ranks()->RemoveLast();
  EXPECT_EQ(validationError(p), "the plan has 3 ranks for 4 devices (one rank per device)");

  p = makeSamplePlan();
  p.mutable_ranks(2)->mutable_program(1)->set_micro_batch(4);
  EXPECT_EQ(validationError(p),
            "rank 2 instruction 1 (FORWARD) is for micro-batch 4, but the plan has 4");
}

TEST(PlanFile, ValidateCatchesGapsInCoverage) {
  plan::Plan p = makeSamplePlan();
  p.mutable_stages(1)->set_first_layer(4);  // layer 3 belongs to no stage
  EXPECT_EQ(validationError(p), "stage 1 starts at layer 4, expected 3 (stages must cover the "
                                "layers in order, without gaps or overlap)");

  p = makeSamplePlan();
  p.mutable_stages(1)->set_last_layer(3);  // layer 4 belongs to no stage
  p.mutable_stages(1)->set_last_node(7);
  EXPECT_EQ(validationError(p), "the stages end at layer 3, but the model has 5 layers (stages "
                                "must cover every layer)");

  p = makeSamplePlan();
  p.mutable_model()->mutable_layers(2)->set_first_node(5);
  EXPECT_EQ(validationError(p), "layer 2 ('block1') starts at node 5, expected 4 (layers must be "
                                "contiguous and cover every node)");

  p = makeSamplePlan();
  p.mutable_model()->mutable_layers(4)->set_last_node(12);
  EXPECT_EQ(validationError(p), "layer 4 ('head') ends at node 12, but the model has 10 nodes");

  p = makeSamplePlan();
  p.mutable_stages(1)->mutable_workers(1)->set_sample_offset(5);
  EXPECT_EQ(validationError(p), "stage 1: the workers' shares of a micro-batch leave a gap at sample 4");

  p = makeSamplePlan();
  p.mutable_ranks(3)->mutable_program(1)->set_first_node(2);  // FORWARD outside stage 1
  EXPECT_EQ(validationError(p), "rank 3 instruction 1 (FORWARD) runs nodes 2..9, outside its "
                                "stage's nodes 6..9");
}

TEST(PlanFile, IdleRanksAreAllowedWithoutPrograms) {
  // A third device in stage 0's node that the plan leaves unused.
  plan::Plan p = makeSamplePlan();
  auto *device = p.mutable_cluster()->add_devices();
  *device = p.cluster().devices(0);
  device->set_rank(4);
  p.mutable_cluster()->mutable_nodes(0)->add_ranks(4);
  auto *rank = p.add_ranks();
  rank->set_rank(4);
  rank->mutable_memory()->set_capacity(device->memory_bytes());
  std::string error;
  EXPECT_TRUE(validatePlan(p, error)) << error;
  EXPECT_TRUE(isIdleRank(p, 4));
  EXPECT_FALSE(isIdleRank(p, 3));
  rank->add_program()->set_kind(Instruction::OPTIMIZER_STEP);
  EXPECT_EQ(validationError(p), "rank 4 is in no stage (idle) but has 1 instructions");
}

// Rank programs: an order that computes the right thing, and no deadlock
// (src/plan/PlanPrograms.cpp). In the sample plan rank 0 runs stage 0 (FORWARD 0,
// SEND_ACTIVATION 0, FORWARD 1, SEND_ACTIVATION 1, RECV_GRADIENT 0, ...) and
// rank 2 stage 1 (RECV_ACTIVATION 0, FORWARD 0, BACKWARD 0, SEND_GRADIENT 0, ...).
TEST(PlanFile, ValidateRefusesProgramsThatDeadlock) {
  plan::Plan p = makeSamplePlan();
  auto *prog = p.mutable_ranks(0)->mutable_program();
  ASSERT_EQ(prog->Get(4).kind(), Instruction::RECV_GRADIENT);
  // Rank 0 waits for micro-batch 0's gradient before sending its activation.
  for (int i = 4; i > 0; --i) prog->SwapElements(i, i - 1);
  EXPECT_EQ(validationError(p),
            "the rank programs deadlock: rank 0 waits at instruction 0 (RECV_GRADIENT of "
            "micro-batch 0 from rank 2, never sent); rank 1 waits at instruction 16 "
            "(ALLREDUCE_GRADIENTS with rank 0, which never reaches it); rank 2 waits at "
            "instruction 0 (RECV_ACTIVATION of micro-batch 0 from rank 0, never sent); rank 3 "
            "waits at instruction 16 (ALLREDUCE_GRADIENTS with rank 2, which never reaches it)");

  // Two workers of a stage that all-reduce with different peers' timing is
  // fine; one that skips its all-reduce leaves the other waiting.
  p = makeSamplePlan();
  p.mutable_ranks(1)->mutable_program()->DeleteSubrange(16, 1);
  EXPECT_EQ(validationError(p),
            "the rank programs deadlock: rank 0 waits at instruction 16 (ALLREDUCE_GRADIENTS with "
            "rank 1, which never reaches it)");
}

// Programs are proved against the strictest communicator (NCCL: sends do
// not wait in a buffer, a pair's messages meet in the order they were sent);
// a run of SEND/RECV instructions is one group (Communicator::groupStart).
TEST(PlanFile, ValidateProvesProgramsUnderUnbufferedSends) {
  // 1F1B: rank 0 runs F0 S0 F1 [S1 RG0] B0 ..., rank 1 RA0 F0 B0 [SG0 RA1]
  // ...: the two send to each other first, each inside one group: accepted.
  plan::Plan p = makeSamplePlan(2, 1, 2);
  const auto &r0 = p.ranks(0).program(), &r1 = p.ranks(1).program();
  ASSERT_EQ(r0.Get(3).kind(), Instruction::SEND_ACTIVATION);
  ASSERT_EQ(r0.Get(4).kind(), Instruction::RECV_GRADIENT);
  ASSERT_EQ(r1.Get(3).kind(), Instruction::SEND_GRADIENT);
  ASSERT_EQ(r1.Get(4).kind(), Instruction::RECV_ACTIVATION);
  std::string error;
  EXPECT_TRUE(validatePlan(p, error)) << error;

  // Rank 1 receives micro-batch 1 before 0: fine where messages match by
  // tag (threads, MPI), a hang or garbage on NCCL: refused everywhere.
  auto *prog = p.mutable_ranks(1)->mutable_program();
  for (int i = 4; i > 0; --i) prog->SwapElements(i, i - 1);
  EXPECT_EQ(validationError(p),
            "the rank programs deadlock: rank 0 waits at instruction 1 (SEND_ACTIVATION of "
            "micro-batch 0 to rank 1, never received); rank 1 waits at instruction 0 "
            "(RECV_ACTIVATION of micro-batch 1 from rank 0, which sends the activation of "
            "micro-batch 0 first)");
}

TEST(PlanFile, ValidateRefusesProgramsOutOfOrder) {
  plan::Plan p = makeSamplePlan();
  auto *prog = p.mutable_ranks(0)->mutable_program();
  ASSERT_EQ(prog->Get(16).kind(), Instruction::ALLREDUCE_GRADIENTS);
  for (int i = 16; i > 2; --i) prog->SwapElements(i, i - 1);
  EXPECT_EQ(validationError(p), "rank 0 instruction 2 (ALLREDUCE_GRADIENTS) comes before the "
                                "rank's last BACKWARD (it would sum partial gradients)");

  p = makeSamplePlan();
  p.mutable_ranks(2)->mutable_program()->SwapElements(2, 3);
  EXPECT_EQ(validationError(p), "rank 2 instruction 2 (SEND_GRADIENT of micro-batch 0) comes "
                                "before that micro-batch's BACKWARD");

  p = makeSamplePlan();
  p.mutable_ranks(2)->mutable_program()->SwapElements(0, 1);
  EXPECT_EQ(validationError(p), "rank 2 instruction 0 (FORWARD of micro-batch 0) comes before "
                                "the micro-batch's RECV_ACTIVATION instructions");

  p = makeSamplePlan();
  p.mutable_ranks(0)->mutable_program()->SwapElements(0, 1);
  EXPECT_EQ(validationError(p), "rank 0 instruction 0 (SEND_ACTIVATION of micro-batch 0) comes "
                                "before that micro-batch's FORWARD");

  // Every schedule the sample makes is accepted.
  for (bool gpipe : {false, true})
    for (int stages : {1, 2, 4})
      for (int mbs : {1, 3, 8}) {
        std::string error;
        EXPECT_TRUE(validatePlan(makeSamplePlan(stages, 2, mbs, gpipe), error)) << error;
      }
}

namespace {

/// The sample plan's model and cluster as a serving plan (docs/plan-format.md,
/// "Serving plans"): one replica on the A100s (ranks 0-1, tensor parallel 2),
/// one on the V100s, each the whole model in one stage, shares 0.75 / 0.25.
plan::Plan makeServingPlan() {
  plan::Plan p = makeSamplePlan();
  p.clear_stages();
  for (auto &rank : *p.mutable_ranks())
    rank.clear_program();
  p.mutable_settings()->set_mode("serve");
  p.mutable_settings()->set_micro_batches(1);
  auto *s = p.mutable_serving();
  s->set_rate_rps(4);
  s->set_prompt_tokens(128);
  s->set_output_tokens(32);
  const int layers = p.model().layers_size();
  for (int r = 0; r < 2; ++r) {
    auto *rep = s->add_replicas();
    rep->set_index(uint32_t(r));
    rep->set_device_type(r == 0 ? "A100-80GB" : "V100-32GB");
    rep->set_tensor_parallel(2);
    rep->set_max_batch(8);
    rep->set_micro_batches(1);
    rep->set_share(r == 0 ? 0.75 : 0.25);
    auto *st = rep->add_stages();
    st->set_first_layer(0);
    st->set_last_layer(uint32_t(layers - 1));
    st->set_first_node(0);
    st->set_last_node(p.model().layers(layers - 1).last_node());
    st->add_ranks(uint32_t(2 * r));
    st->add_ranks(uint32_t(2 * r + 1));
  }
  return p;
}

} // namespace

TEST(PlanFile, ServingPlansValidate) {
  plan::Plan p = makeServingPlan();
  std::string error;
  EXPECT_TRUE(validatePlan(p, error)) << error;

  p = makeServingPlan();
  p.mutable_serving()->mutable_replicas(1)->set_share(0.5);
  EXPECT_EQ(validationError(p),
            "the replicas' shares of the request rate sum to 1.250000, not 1");

  p = makeServingPlan();
  p.mutable_serving()->mutable_replicas(1)->mutable_stages(0)->set_ranks(0, 1);
  EXPECT_EQ(validationError(p), "replica 1 stage 0: rank 1 already serves replica 0");

  p = makeServingPlan();
  p.mutable_serving()->mutable_replicas(0)->set_device_type("V100-32GB");
  EXPECT_EQ(validationError(p), "replica 0 stage 0: rank 0 is a A100-80GB, not a V100-32GB");

  p = makeServingPlan();
  p.mutable_serving()->mutable_replicas(0)->mutable_stages(0)->set_last_layer(1);
  p.mutable_serving()->mutable_replicas(0)->mutable_stages(0)->set_last_node(3);
  EXPECT_EQ(validationError(p), "replica 0's stages end at layer 1, but the model has 5 layers");

  p = makeServingPlan();
  p.mutable_serving()->mutable_replicas(0)->set_max_batch(0);
  EXPECT_EQ(validationError(p), "replica 0 serves no request at once (max_batch 0)");

  p = makeServingPlan();
  p.mutable_serving()->clear_replicas();
  EXPECT_EQ(validationError(p), "the serving plan has no replicas");

  // A training plan with serving settings is refused.
  p = makeSamplePlan();
  p.mutable_serving()->set_rate_rps(1);
  EXPECT_EQ(validationError(p), "serving settings in a train plan (only mode serve has them)");

  // explain prints the replicas and their shares.
  std::ostringstream os;
  explainPlan(makeServingPlan(), os);
  EXPECT_NE(os.str().find("replicas (2)"), std::string::npos) << os.str();
  EXPECT_NE(os.str().find("75.0%"), std::string::npos) << os.str();
}
