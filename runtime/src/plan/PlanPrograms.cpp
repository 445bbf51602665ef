//===- PlanPrograms.cpp - prove a plan's rank programs run to the end ------===//
//
// A hand-made or corrupted plan can make ranks wait on each other forever
// (two ranks that both receive first, a gradient received before anyone
// sends it) or run in an order that gives a wrong answer with exit 0 (an
// all-reduce of gradients before the backward that produces them). Before
// anything runs, checkPlanPrograms checks each program's order and then
// executes every program symbolically:
//
//  * sends are not buffered (the strictest communicator: NCCL, and the thread
//    and MPI communicators with HETPLAN_COMM_RENDEZVOUS=1): a run of
//    consecutive SEND/RECV instructions is one group (the plan executor
//    calls Communicator::groupStart/groupEnd around it), which posts all of
//    its messages -- (sender, receiver, activation or gradient, micro-batch)
//    -- at once and completes when every send has met its receive and
//    every receive its send, in another rank's posted group;
//  * messages between a pair of ranks meet in the order they were sent
//    (NCCL has no tags);
//  * collectives complete when every member stands at the same one: the
//    gradient all-reduce over the stage's workers at one tensor-parallel
//    position, and, in a worker of tp > 1 ranks, each FORWARD/BACKWARD of a
//    micro-batch (its ranks exchange shards inside it; under ZeRO-3 the
//    whole stage meets there to gather parameters).
//
// This model waits at least as much as the real communicators do, so a plan
// it finishes cannot deadlock; a plan it cannot finish is refused with the
// ranks that are stuck and what each waits for.
//
//===----------------------------------------------------------------------===//

#include "hetplan/runtime/PlanFile.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace hetplan::runtime {
namespace {

using Kind = plan::Instruction::Kind;
using std::to_string;

std::string describe(const plan::Instruction &ins) {
  std::string s = plan::Instruction::Kind_Name(ins.kind());
  switch (ins.kind()) {
  case plan::Instruction::ALLREDUCE_GRADIENTS:
  case plan::Instruction::OPTIMIZER_STEP:
    return s;
  default:
    return s + " of micro-batch " + to_string(ins.micro_batch());
  }
}

struct RankInfo {
  int stage = -1;
  std::vector<uint32_t> worker;  // the ranks of its worker, tp order
  std::vector<uint32_t> stageGroup;  // its stage's ranks at its tp position
  std::vector<uint32_t> stageRanks;  // every rank of its stage
};

std::vector<RankInfo> rankInfoOf(const plan::Plan &p) {
  const uint32_t R = uint32_t(p.ranks_size());
  std::vector<RankInfo> info(R);
  for (int s = 0; s < p.stages_size(); ++s) {
    const auto &st = p.stages(s);
    for (const auto &w : st.workers())
      for (int k = 0; k < w.ranks_size(); ++k) {
        uint32_t r = w.ranks(k);
        if (r >= R) continue;  // validatePlan reports it
        info[r].stage = s;
        info[r].worker.assign(w.ranks().begin(), w.ranks().end());
        for (const auto &o : st.workers()) {
          if (k < o.ranks_size()) info[r].stageGroup.push_back(o.ranks(k));
          info[r].stageRanks.insert(info[r].stageRanks.end(), o.ranks().begin(), o.ranks().end());
        }
        std::sort(info[r].stageGroup.begin(), info[r].stageGroup.end());
        std::sort(info[r].stageRanks.begin(), info[r].stageRanks.end());
      }
  }
  return info;
}

/// Rank r's program in an order that computes the right thing.
bool checkProgramOrder(const plan::Plan &p, uint32_t r, std::string &error) {
  const auto &prog = p.ranks(int(r)).program();
  std::set<uint32_t> forwarded, backwarded;
  std::map<uint32_t, int> recvActs, recvGrads;  // mb -> receives seen
  // What each FORWARD / BACKWARD needs first: all of its micro-batch's receives.
  std::map<uint32_t, int> wantActs, wantGrads;
  for (const auto &ins : prog) {
    if (ins.kind() == plan::Instruction::RECV_ACTIVATION) wantActs[ins.micro_batch()]++;
    if (ins.kind() == plan::Instruction::RECV_GRADIENT) wantGrads[ins.micro_batch()]++;
  }
  size_t backwards = 0;
  for (const auto &ins : prog)
    if (ins.kind() == plan::Instruction::BACKWARD) ++backwards;
  for (int i = 0; i < prog.size(); ++i) {
    const auto &ins = prog[i];
    const uint32_t mb = ins.micro_batch();
    auto bad = [&](const std::string &why) {
      error = "rank " + to_string(r) + " instruction " + to_string(i) + " (" + describe(ins) +
              ") " + why;
      return false;
    };
    switch (ins.kind()) {
    case plan::Instruction::RECV_ACTIVATION:
      if (forwarded.count(mb)) return bad("comes after that micro-batch's FORWARD");
      recvActs[mb]++;
      break;
    case plan::Instruction::FORWARD:
      if (recvActs[mb] != wantActs[mb])
        return bad("comes before the micro-batch's RECV_ACTIVATION instructions");
      forwarded.insert(mb);
      break;
    case plan::Instruction::SEND_ACTIVATION:
      if (!forwarded.count(mb)) return bad("comes before that micro-batch's FORWARD");
      break;
    case plan::Instruction::RECV_GRADIENT:
      if (backwarded.count(mb)) return bad("comes after that micro-batch's BACKWARD");
      recvGrads[mb]++;
      break;
    case plan::Instruction::BACKWARD:
      if (!forwarded.count(mb)) return bad("comes before that micro-batch's FORWARD");
      if (recvGrads[mb] != wantGrads[mb])
        return bad("comes before the micro-batch's RECV_GRADIENT instructions");
      backwarded.insert(mb);
      break;
    case plan::Instruction::SEND_GRADIENT:
      if (!backwarded.count(mb)) return bad("comes before that micro-batch's BACKWARD");
      break;
    case plan::Instruction::ALLREDUCE_GRADIENTS:
      if (backwarded.size() != backwards)
        return bad("comes before the rank's last BACKWARD (it would sum partial gradients)");
      break;
    case plan::Instruction::OPTIMIZER_STEP:
      if (backwarded.size() != backwards)
        return bad("comes before the rank's last BACKWARD");
      break;
    default:
      break;
    }
  }
  return true;
}

bool isTransfer(const plan::Instruction &ins) {
  switch (ins.kind()) {
  case plan::Instruction::SEND_ACTIVATION:
  case plan::Instruction::RECV_ACTIVATION:
  case plan::Instruction::SEND_GRADIENT:
  case plan::Instruction::RECV_GRADIENT: return true;
  default: return false;
  }
}

/// Every program run symbolically (the model in the file comment): run()
/// advances each rank as far as it can; stuck() then says who waits on what.
class SymbolicRun {
public:
  SymbolicRun(const plan::Plan &p, const std::vector<RankInfo> &info)
      : p(p), info(info), R(uint32_t(p.ranks_size())),
        // Under ZeRO-3 every FORWARD/BACKWARD gathers the stage's parameters
        // from its workers: the whole stage meets there.
        zero3(p.settings().mode() == "train" && p.settings().zero_stage() == 3), pc(R, 0),
        groupEnd(R, -1), groupLeft(R, 0) {}

  void run() {
    for (uint32_t r = 0; r < R; ++r) work.push_back(r);
    while (!work.empty()) {
      uint32_t r = work.back();
      work.pop_back();
      advance(r);
    }
  }

  /// Up to four stuck ranks, each with what it waits for.
  std::vector<std::string> stuck() {
    std::vector<std::string> stuck;
    for (uint32_t r = 0; r < R && stuck.size() < 4; ++r) {
      const plan::Instruction *ins = at(r);
      if (!ins) continue;
      if (groupEnd[r] >= 0) {
        if (std::optional<std::string> s = stuckInGroup(r)) stuck.push_back(*s + ")");
        continue;
      }
      std::string s = "rank " + to_string(r) + " waits at instruction " + to_string(pc[r]) + " (" +
                      describe(*ins);
      switch (ins->kind()) {
      default: {
        std::string with;
        for (uint32_t q : members(r, *ins))
          if (q != r) with += (with.empty() ? "" : ", ") + to_string(q);
        s += " with rank " + with + ", which never reaches it";
        break;
      }
      }
      stuck.push_back(s + ")");
    }
    return stuck;
  }

private:
  // A posted message end: (gradient, micro-batch) and the instruction
  // index that posted it (for the report).
  struct Post {
    bool grad;
    uint32_t mb;
    int at;
  };
  using Pair = std::pair<uint32_t, uint32_t>;  // (from, to)

  const plan::Instruction *at(uint32_t r) const {
    const auto &prog = p.ranks(int(r)).program();
    return pc[r] < prog.size() ? &prog[pc[r]] : nullptr;
  }

  // Matches the heads of the (from, to) channel while they agree.
  void match(uint32_t from, uint32_t to) {
    auto &sq = sendQ[{from, to}], &rq = recvQ[{from, to}];
    size_t k = 0;
    while (k < sq.size() && k < rq.size() && sq[k].grad == rq[k].grad && sq[k].mb == rq[k].mb) ++k;
    if (!k) return;
    sq.erase(sq.begin(), sq.begin() + long(k));
    rq.erase(rq.begin(), rq.begin() + long(k));
    groupLeft[from] -= int(k);
    groupLeft[to] -= int(k);
    work.push_back(from);
    work.push_back(to);
  }

  // Posts the group of transfers starting at pc[r].
  void post(uint32_t r) {
    const auto &prog = p.ranks(int(r)).program();
    int i = pc[r];
    std::vector<Pair> touched;
    for (; i < prog.size() && isTransfer(prog[i]); ++i) {
      const auto &ins = prog[i];
      bool grad = ins.kind() == plan::Instruction::SEND_GRADIENT || ins.kind() == plan::Instruction::RECV_GRADIENT;
      bool sending = ins.kind() == plan::Instruction::SEND_ACTIVATION || ins.kind() == plan::Instruction::SEND_GRADIENT;
      for (uint32_t peer : ins.peers()) {
        if (peer >= R) continue;
        Pair key = sending ? Pair{r, peer} : Pair{peer, r};
        (sending ? sendQ : recvQ)[key].push_back({grad, ins.micro_batch(), i});
        groupLeft[r]++;
        touched.push_back(key);
      }
    }
    groupEnd[r] = i;
    for (const auto &[from, to] : touched) match(from, to);
  }

  // The members of the collective `ins` on rank r (empty: not a collective).
  std::vector<uint32_t> members(uint32_t r, const plan::Instruction &ins) const {
    if (info[r].stage < 0) return {};
    if (ins.kind() == plan::Instruction::ALLREDUCE_GRADIENTS) return info[r].stageGroup;
    bool compute = ins.kind() == plan::Instruction::FORWARD || ins.kind() == plan::Instruction::BACKWARD;
    if (compute && zero3 && info[r].stageRanks.size() > 1) return info[r].stageRanks;
    if (compute && info[r].worker.size() > 1) return info[r].worker;
    return {};
  }

  bool same(uint32_t q, const plan::Instruction &b) const {
    const plan::Instruction *a = at(q);
    return a && groupEnd[q] < 0 && a->kind() == b.kind() &&
           (b.kind() == plan::Instruction::ALLREDUCE_GRADIENTS || a->micro_batch() == b.micro_batch());
  }

  // Runs rank r until it waits (or ends).
  void advance(uint32_t r) {
    for (;;) {
      if (groupEnd[r] >= 0) {  // in a posted group
        if (groupLeft[r] > 0) break;
        pc[r] = groupEnd[r];
        groupEnd[r] = -1;
        continue;
      }
      const plan::Instruction *ins = at(r);
      if (!ins) break;
      if (isTransfer(*ins)) {
        post(r);
        continue;
      }
      std::vector<uint32_t> group = members(r, *ins);
      if (group.empty()) { ++pc[r]; continue; }
      bool ready = true;
      for (uint32_t q : group)
        if (q >= R || (q != r && !same(q, *ins))) ready = false;
      if (!ready) break;
      // Everyone is here: all pass together.
      for (uint32_t q : group)
        if (q != r) {
          ++pc[q];
          work.push_back(q);
        }
      ++pc[r];
    }
  }

  // For rank r stuck in a posted group: the first transfer of its group
  // still unmatched (without the closing parenthesis), if any.
  std::optional<std::string> stuckInGroup(uint32_t r) {
    const Post *first = nullptr;
    Pair pair;
    bool sending = false;
    for (const auto *q : {&sendQ, &recvQ})
      for (const auto &[key, posts] : *q)
        if ((q == &sendQ ? key.first : key.second) == r)
          for (const Post &x : posts)
            if (!first || x.at < first->at) {
              first = &x;
              pair = key;
              sending = q == &sendQ;
            }
    if (!first) return std::nullopt;
    const auto &ins2 = p.ranks(int(r)).program(first->at);
    std::string s = "rank " + to_string(r) + " waits at instruction " + to_string(first->at) + " (" +
                    describe(ins2) + (sending ? " to rank " + to_string(pair.second) + ", never received"
                                              : " from rank " + to_string(pair.first));
    if (!sending) {
      const auto &sq = sendQ[pair];
      s += sq.empty() ? ", never sent"
                      : ", which sends " + std::string(sq.front().grad ? "the gradient" : "the activation") +
                            " of micro-batch " + to_string(sq.front().mb) + " first";
    }
    return s;
  }

  const plan::Plan &p;
  const std::vector<RankInfo> &info;
  const uint32_t R;
  const bool zero3;
  std::map<Pair, std::vector<Post>> sendQ, recvQ;  // posted, unmatched, in order
  std::vector<int> pc, groupEnd, groupLeft;
  std::vector<uint32_t> work;
};

} // namespace

bool checkPlanPrograms(const plan::Plan &p, std::string &error) {
  const uint32_t R = uint32_t(p.ranks_size());
  const std::vector<RankInfo> info = rankInfoOf(p);

  // 1. Each program in an order that computes the right thing.
  for (uint32_t r = 0; r < R; ++r)
    if (!checkProgramOrder(p, r, error)) return false;

  // 2. Run every program symbolically.
  SymbolicRun run(p, info);
  run.run();
  std::vector<std::string> stuck = run.stuck();
  if (!stuck.empty()) {
    error = "the rank programs deadlock: ";
    for (size_t i = 0; i < stuck.size(); ++i) error += (i ? "; " : "") + stuck[i];
    return false;
  }
  return true;
}

} // namespace hetplan::runtime
