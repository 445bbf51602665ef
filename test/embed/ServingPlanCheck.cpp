//===- ServingPlanCheck.cpp - a serving plan's replicas against one rank --===//
//
//   hetplan-serving-plan-check PLAN MODEL PROMPTS.jsonl WORK_DIR [CUT_LAYOUT]
//
// Runs a serving plan (hetplan compile --mode serve) with ServingPlan, and
// the same plan with its first replica cut into a pipeline of one stage per
// layer (the tiny test model gives the planner no reason to split it), with
// one request group per stage in flight and with none overlapping, and
// compares every request's greedy tokens with a model session's Generator
// (one rank). Prints one line per check; exit 1 on a difference, on an
// empty prompt file, or when the cut replica's description lacks
// CUT_LAYOUT (e.g. "nodes 0-2 | 3-9 | 10-16": the stages it must have).
//
//===----------------------------------------------------------------------===//
#include "hetplan/runtime/Generate.h"
#include "hetplan/runtime/PlanFile.h"
#include "hetplan/runtime/ServingPlan.h"

#include <fstream>
#include <iostream>
#include <sstream>

using namespace hetplan;

namespace {
/// The "prompt" arrays of a JSON-lines file (the format hetplan serve reads;
/// here only lists of integers after "prompt").
std::vector<GenerateRequest> readPrompts(const std::string &path) {
  std::vector<GenerateRequest> out;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    auto at = line.find("\"prompt\"");
    if (at == std::string::npos) continue;
    at = line.find('[', at);
    auto end = line.find(']', at);
    std::stringstream ids(line.substr(at + 1, end - at - 1));
    GenerateRequest r;
    std::string id;
    while (std::getline(ids, id, ',')) r.prompt.push_back(std::stoll(id));
    r.maxNewTokens = 6;
    out.push_back(r);
  }
  return out;
}
} // namespace

int main(int argc, char **argv) {
  if (argc != 5 && argc != 6) {
    std::cerr << "usage: hetplan-serving-plan-check PLAN MODEL PROMPTS.jsonl WORK_DIR [CUT_LAYOUT]\n";
    return 2;
  }
  std::string planPath = argv[1], model = argv[2], work = argv[4], cutLayout = argc == 6 ? argv[5] : "";
  std::vector<GenerateRequest> requests = readPrompts(argv[3]);
  if (requests.empty()) { // 0 of 0 requests would compare equal
    std::cout << "FAIL: no prompts in " << argv[3] << "\n";
    return 1;
  }
  GenerateOptions options;
  options.maxBatch = 4;

  std::unique_ptr<Session> session;
  std::unique_ptr<Generator> one;
  Status st = Session::fromModel(model, &session);
  if (st.ok()) st = Generator::create(*session, &one);
  std::vector<GenerateResult> ref;
  if (st.ok()) st = one->generate(requests, options, &ref);
  if (!st.ok()) {
    std::cerr << "one rank: " << st.toString() << "\n";
    return 1;
  }

  // The plan with replica 0 cut into one stage per layer, stage k on the
  // devices of replica k (which goes), and every request sent to it.
  plan::Plan p;
  std::string error;
  if (!runtime::readPlan(planPath, p, error)) {
    std::cerr << error << "\n";
    return 1;
  }
  auto *serving = p.mutable_serving();
  int layers = p.model().layers_size();
  if (layers < 3 || serving->replicas_size() < layers) {
    std::cerr << "the plan needs >= 3 layers and as many replicas\n";
    return 1;
  }
  plan::ServingReplica cutReplica = serving->replicas(0);
  cutReplica.clear_stages();
  for (int k = 0; k < layers; ++k) {
    plan::ServingStage *s = cutReplica.add_stages();
    *s = serving->replicas(k).stages(0);
    s->set_first_layer(uint32_t(k));
    s->set_last_layer(uint32_t(k));
    s->set_first_node(p.model().layers(k).first_node());
    s->set_last_node(p.model().layers(k).last_node());
  }
  cutReplica.set_share(1);
  std::vector<plan::ServingReplica> rest{cutReplica};
  for (int k = layers; k < serving->replicas_size(); ++k) {
    rest.push_back(serving->replicas(k));
    rest.back().set_share(0);
  }
  serving->clear_replicas();
  for (size_t k = 0; k < rest.size(); ++k) {
    rest[k].set_index(uint32_t(k));
    *serving->add_replicas() = rest[k];
  }
  // The plan names its model relative to its own folder: point at it.
  p.mutable_model()->set_path(model);
  std::string cut = work + "/serving-layer-stages.plan";
  if (!runtime::writePlan(cut, p, error)) {
    std::cerr << error << "\n";
    return 1;
  }

  int failures = 0;
  struct Check {
    std::string path;
    int groups;
  };
  for (const Check &c : {Check{planPath, 0}, Check{cut, 0}, Check{cut, 1}, Check{cut, 2}}) {
    std::unique_ptr<ServingPlan> plan;
    st = ServingPlan::load(c.path, c.path == cut ? "" : model, &plan);
    std::vector<GenerateResult> got;
    std::vector<int> replicaOf;
    GenerateOptions o = options;
    o.pipelineGroups = c.groups;
    if (c.path == cut) o.maxBatch = 8;
    if (st.ok()) st = plan->generate(requests, o, &got, &replicaOf);
    if (!st.ok()) {
      std::cout << "FAIL " << c.path << ": " << st.toString() << "\n";
      ++failures;
      continue;
    }
    size_t same = 0;
    std::vector<int> perReplica(size_t(plan->replicas()), 0);
    for (size_t i = 0; i < ref.size(); ++i) {
      same += got[i].tokens == ref[i].tokens;
      if (replicaOf[i] >= 0) ++perReplica[size_t(replicaOf[i])];
    }
    std::cout << (same == ref.size() ? "ok " : "FAIL ") << plan->describeReplica(0) << ", pipeline groups "
              << (c.groups ? std::to_string(c.groups) : std::string("per stage")) << ": " << same << " of "
              << ref.size() << " requests equal one rank's tokens; requests per replica:";
    for (int n : perReplica) std::cout << " " << n;
    std::cout << "\n";
    failures += same != ref.size();
    if (c.path == cut && plan->describeReplica(0).find(cutLayout) == std::string::npos) {
      std::cout << "FAIL: the cut replica is not " << cutLayout << "\n";
      ++failures;
    }
  }
  return failures ? 1 : 0;
}
