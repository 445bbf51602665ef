//===- PlanExport.cpp - a planner result as a plan file -------------------===//

#include "runtime/include/hetplan/runtime/Checked.h"
#include "passes/planner/PlanExport.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>

// The plan's roles are the cost model's, in the same order.
static_assert(int(hetplan::cost::TensorParallelRole::AllGather) == hetplan::plan::TensorParallelNode::GATHER &&
              int(hetplan::cost::TensorParallelRole::Row) == hetplan::plan::TensorParallelNode::ROW &&
              int(hetplan::cost::TensorParallelRole::Reshape) == hetplan::plan::TensorParallelNode::RESHAPE);

namespace hetplan::planner {

namespace {

/// Workers of `to` whose samples overlap [offset, offset + count).
std::vector<std::pair<const Worker *, int64_t>>
overlapping(const Stage &to, int64_t offset, int64_t count) {
  std::vector<std::pair<const Worker *, int64_t>> result;
  for (const Worker &w : to.workers) {
    int64_t lo = std::max(offset, w.sampleOffset);
    int64_t hi = std::min(offset + count, w.sampleOffset + w.samples);
    if (hi > lo)
      result.push_back({&w, hi - lo});
  }
  return result;
}

} // namespace

plan::Plan exportPlanHeader(const cost::ModelCost &model, const cluster::Cluster &cluster,
                            cost::DType dtype, const ExportInfo &info) {
  plan::Plan out;
  out.set_schema_version(runtime::kPlanSchemaVersion);
  out.set_producer("hetplan 0.1.0");
  out.mutable_settings()->set_stack(cluster.stack().name);

  auto *ref = out.mutable_model();
  ref->set_path(info.modelPath);
  ref->set_sha256(info.modelSha256);
  ref->set_size_bytes(info.modelBytes);
  ref->set_graph(model.graphName);
  ref->set_parameters(model.parameters);
  for (const auto &n : model.nodeNames)
    ref->add_node_names(n);
  for (const auto &l : model.layers) {
    auto *layer = ref->add_layers();
    layer->set_name(l.name);
    layer->set_first_node(l.firstNode);
    layer->set_last_node(l.lastNode);
    layer->set_forward_flops(l.flopsPerSample());
    layer->set_parameters(l.parameters);
  }

  auto *cl = out.mutable_cluster();
  cl->set_spec(info.clusterSpec);
  cl->set_inter_node_bandwidth_gbs(cluster.interNode.bandwidthGBs);
  cl->set_inter_node_latency_us(cluster.interNode.latencyUs);
  for (const auto &n : cluster.nodes) {
    auto *node = cl->add_nodes();
    node->set_name(n.name);
    for (int r : n.devices)
      node->add_ranks(r);
    node->set_link_kind(n.intraLink.kind);
    node->set_link_bandwidth_gbs(n.intraLink.bandwidthGBs);
    if (n.network) {
      node->set_network_bandwidth_gbs(n.network->bandwidthGBs);
      node->set_network_latency_us(n.network->latencyUs);
    }
  }
  for (const auto &d : cluster.devices) {
    auto *dev = cl->add_devices();
    dev->set_rank(d.rank);
    dev->set_type(d.type->name);
    dev->set_node(d.node);
    dev->set_local_index(d.localIndex);
    dev->set_memory_bytes(d.type->memoryBytes());
    dev->set_peak_tflops(d.type->peakFlops(dtype) / 1e12);
    dev->set_speed_factor(d.speedFactor);
  }
  return out;
}

namespace {

/// The run's settings: mode, batch, dtype, schedule, inputs and outputs,
/// bound dims, memory savers.
void exportSettings(plan::Settings *settings, const Plan &result, const Options &options,
                    const ExportInfo &info) {
  bool training = options.mode == cost::Mode::Train;
  settings->set_mode(training ? "train" : "infer");
  settings->set_global_batch(options.globalBatch);
  settings->set_sequence(info.sequence);
  settings->set_dtype(cluster::dtypeName(options.dtype).str());
  settings->set_micro_batches(result.microBatches);
  settings->set_schedule(scheduleName(result.schedule));
  settings->set_whole_batch(!info.wholeBatchReason.empty());
  settings->set_whole_batch_reason(info.wholeBatchReason);
  for (auto [list, ios] : {std::pair{&info.inputs, settings->mutable_inputs()},
                           std::pair{&info.outputs, settings->mutable_outputs()}})
    for (const IoShape &io : *list) {
      auto *o = ios->Add();
      o->set_name(io.name);
      for (auto [d, size] : llvm::enumerate(io.dims))
        o->add_dims(int64_t(d) == io.batchAxis ? options.globalBatch
                                               : size < 0 ? -1 : size);
      o->set_batch_axis(int32_t(io.batchAxis));
      for (int64_t v : io.values)
        o->add_values(v);
    }
  settings->set_strategy(strategyName(result.strategy));
  for (const auto &[k, v] : info.boundDims)
    (*settings->mutable_bound_dims())[k] = v;
  settings->set_optimizer(training ? runtime::optimizerName(options.optimizer) : "");
  settings->set_zero_stage(training ? uint32_t(result.zeroStage) : 0);
  settings->set_offload_optimizer(training && result.offloadOptimizer);
}

/// The nodes a tensor-parallel stage splits and the collectives they run.
void exportTensorParallel(plan::Stage *stage, const Stage &st, const cost::ModelCost &model,
                          bool training) {
  auto *traffic = stage->mutable_tensor_parallel_traffic();
  for (int l = st.firstLayer; l <= st.lastLayer; ++l)
    for (const cost::TensorParallelUnit &u : model.layers[l].tensorParallelUnits) {
      if (!u.fits(st.tensorParallel))
        continue;
      for (const cost::TensorParallelNode &n : u.nodes) {
        auto *node = stage->add_tensor_parallel_nodes();
        node->set_node(uint32_t(n.node));
        node->set_role(plan::TensorParallelNode::Role(int(n.role)));
        node->set_axis(n.axis);
        node->set_segments(uint32_t(n.segments));
      }
      if (u.pair) {
        traffic->set_forward_all_reduces(traffic->forward_all_reduces() +
                                         uint32_t(u.forwardCollectives));
        traffic->set_forward_all_reduce_elements(traffic->forward_all_reduce_elements() +
                                                 u.forwardElementsPerSample);
      } else {
        traffic->set_forward_all_gathers(traffic->forward_all_gathers() +
                                         uint32_t(u.forwardCollectives));
        traffic->set_forward_all_gather_elements(traffic->forward_all_gather_elements() +
                                                 u.forwardElementsPerSample);
      }
      if (training) {
        traffic->set_backward_all_reduces(traffic->backward_all_reduces() +
                                          uint32_t(u.backwardCollectives));
        traffic->set_backward_all_reduce_elements(traffic->backward_all_reduce_elements() +
                                                  u.backwardElementsPerSample);
      }
    }
}

void exportStage(plan::Stage *stage, const Stage &st, int j, const cost::ModelCost &model,
                 bool training) {
  stage->set_index(j);
  stage->set_first_layer(st.firstLayer);
  stage->set_last_layer(st.lastLayer);
  stage->set_first_node(model.layers[st.firstLayer].firstNode);
  stage->set_last_node(model.layers[st.lastLayer].lastNode);
  stage->set_tensor_parallel(st.tensorParallel);
  stage->set_recompute(training && st.recompute);
  if (st.tensorParallel > 1)
    exportTensorParallel(stage, st, model, training);
  for (const Worker &w : st.workers) {
    auto *worker = stage->add_workers();
    for (int r : w.ranks)
      worker->add_ranks(r);
    worker->set_samples(w.samples);
    worker->set_sample_offset(w.sampleOffset);
  }
  stage->set_forward_s(st.forwardSeconds);
  stage->set_backward_s(st.backwardSeconds);
  stage->set_gradient_allreduce_s(st.allReduceSeconds);
  stage->set_send_activation_s(st.sendSeconds);
}

void exportMemory(plan::MemoryUse *mem, const RankMemory &m) {
  mem->set_capacity(runtime::saturatedCount(m.capacity));
  mem->set_parameters(runtime::saturatedCount(m.parameters));
  mem->set_gradients(runtime::saturatedCount(m.gradients));
  mem->set_optimizer_state(runtime::saturatedCount(m.optimizerState));
  mem->set_activations(runtime::saturatedCount(m.activations));
  mem->set_kv_cache(runtime::saturatedCount(m.kvCache));
  // The plan's workspace: the CUDA context and the transient buffers.
  mem->set_workspace(runtime::saturatedCount(m.workspace + m.framework));
  mem->set_peak(runtime::saturatedCount(m.peak()));
  mem->set_recompute_saved(runtime::saturatedCount(m.recomputeSaved));
  mem->set_offload_saved(runtime::saturatedCount(m.offloadSaved));
}

/// The program of rank `self` (a worker of stage `j`, `tpIndex` within its
/// tensor-parallel group): the stage's simulated events in order, with the
/// receives, sends and all-reduce peers they imply.
void exportProgram(plan::Rank *rank, const Plan &result, const cost::ModelCost &model, int j,
                   const Worker *self, int tpIndex, const std::vector<const Event *> &events) {
  int P = int(result.stages.size());
  const Stage &st = result.stages[j];
  uint32_t firstNode = model.layers[st.firstLayer].firstNode;
  uint32_t lastNode = model.layers[st.lastLayer].lastNode;
  auto add = [&](plan::Instruction::Kind kind, const Event *e) {
    auto *ins = rank->add_program();
    ins->set_kind(kind);
    ins->set_micro_batch(e && e->microBatch >= 0 ? e->microBatch : 0);
    if (e) {
      ins->set_predicted_start_s(e->start);
      ins->set_predicted_end_s(e->end);
    }
    return ins;
  };
  double outBytes = model.layers[st.lastLayer].outputBytesPerSample;
  double inBytes = st.firstLayer > 0
                       ? model.layers[st.firstLayer - 1].outputBytesPerSample
                       : 0;
  for (const Event *e : events) {
    switch (e->kind) {
    case Event::Forward: {
      if (j > 0)
        for (auto [from, n] : overlapping(result.stages[j - 1], self->sampleOffset,
                                          self->samples)) {
          auto *ins = add(plan::Instruction::RECV_ACTIVATION, e);
          ins->add_peers(from->ranks[0]);
          ins->set_bytes(runtime::saturatedCount(inBytes * double(n)));
          ins->set_predicted_end_s(e->start);
        }
      auto *ins = add(plan::Instruction::FORWARD, e);
      ins->set_first_node(firstNode);
      ins->set_last_node(lastNode);
      ins->set_samples(self->samples);
      break;
    }
    case Event::Backward: {
      if (j + 1 < P)
        for (auto [from, n] : overlapping(result.stages[j + 1], self->sampleOffset,
                                          self->samples)) {
          auto *ins = add(plan::Instruction::RECV_GRADIENT, e);
          ins->add_peers(from->ranks[0]);
          ins->set_bytes(runtime::saturatedCount(outBytes * double(n)));
          ins->set_predicted_end_s(e->start);
        }
      auto *ins = add(plan::Instruction::BACKWARD, e);
      ins->set_first_node(firstNode);
      ins->set_last_node(lastNode);
      ins->set_samples(self->samples);
      break;
    }
    case Event::SendActivation:
    case Event::SendGradient: {
      if (tpIndex != 0)
        break;  // the first rank of a tensor-parallel worker sends for it
      bool act = e->kind == Event::SendActivation;
      const Stage &to = result.stages[act ? j + 1 : j - 1];
      double perSample = act ? outBytes : inBytes;
      for (auto [peer, n] : overlapping(to, self->sampleOffset, self->samples)) {
        auto *ins = add(act ? plan::Instruction::SEND_ACTIVATION
                            : plan::Instruction::SEND_GRADIENT,
                        e);
        for (int r : peer->ranks)
          ins->add_peers(r);
        ins->set_bytes(runtime::saturatedCount(perSample * double(n)));
      }
      break;
    }
    case Event::AllReduce: {
      auto *ins = add(plan::Instruction::ALLREDUCE_GRADIENTS, e);
      for (const Worker &w : st.workers)
        if (&w != self)
          ins->add_peers(w.ranks[std::min<size_t>(tpIndex, w.ranks.size() - 1)]);
      break;
    }
    case Event::Optimizer:
      add(plan::Instruction::OPTIMIZER_STEP, e);
      break;
    }
  }
}

} // namespace

plan::Plan exportPlan(const Plan &result, const cost::ModelCost &model,
                      const cluster::Cluster &cluster, const Options &options,
                      const ExportInfo &info) {
  plan::Plan out = exportPlanHeader(model, cluster, options.dtype, info);

  bool training = options.mode == cost::Mode::Train;
  exportSettings(out.mutable_settings(), result, options, info);

  int P = int(result.stages.size());
  for (int j = 0; j < P; ++j) {
    plan::Stage *stage = out.add_stages();
    exportStage(stage, result.stages[j], j, model, training);
    if (training && options.sparseEmbeddings)
      for (int l = result.stages[j].firstLayer; l <= result.stages[j].lastLayer; ++l)
        for (const auto &e : model.layers[size_t(l)].embeddings)
          stage->add_sparse_parameters(e.name);
  }

  // Programs: every rank of a stage follows the stage's simulated order.
  std::vector<std::vector<const Event *>> byStage(P);
  for (const Event &e : result.timeline)
    byStage[e.stage].push_back(&e);
  for (auto &events : byStage)
    std::stable_sort(events.begin(), events.end(), [](const Event *a, const Event *b) {
      return a->start < b->start;
    });

  for (const auto &d : cluster.devices) {
    auto *rank = out.add_ranks();
    rank->set_rank(d.rank);
    exportMemory(rank->mutable_memory(), result.memory[d.rank]);

    int j = result.stageOfRank[d.rank];
    if (j < 0)
      continue;  // idle: no stage, empty program
    const Stage &st = result.stages[j];
    rank->set_stage(j);
    const Worker *self = nullptr;
    int tpIndex = 0;
    for (size_t w = 0; w < st.workers.size(); ++w) {
      auto it = std::find(st.workers[w].ranks.begin(), st.workers[w].ranks.end(), d.rank);
      if (it != st.workers[w].ranks.end()) {
        self = &st.workers[w];
        rank->set_worker(uint32_t(w));
        tpIndex = int(it - st.workers[w].ranks.begin());
      }
    }
    exportProgram(rank, result, model, j, self, tpIndex, byStage[j]);
  }

  auto *pred = out.mutable_prediction();
  pred->set_step_time_s(result.stepSeconds);
  pred->set_samples_per_s(result.samplesPerSecond);
  pred->set_bubble_fraction(result.bubbleFraction);
  pred->set_model_flops_utilization(result.modelFlopsUtilization);
  pred->set_total_flops_per_step(result.modelFlopsPerStep);
  pred->set_search_time_s(result.searchSeconds);
  pred->set_plans_evaluated(result.plansEvaluated);
  pred->set_cost_model(info.costModel);
  return out;
}

} // namespace hetplan::planner
