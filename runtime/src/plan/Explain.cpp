//===- Explain.cpp - a readable report of a plan --------------------------===//
//
// Every index read from the plan is checked before use: explain must work on
// plans that validatePlan rejects, since that is when people look at them.
//
//===----------------------------------------------------------------------===//

#include "hetplan/runtime/Explain.h"
#include "Units.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace hetplan::runtime {
namespace {

std::string format(const char *fmt, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), fmt, value);
  return buffer;
}

std::string countText(double n) {
  if (n >= 1e12) return format("%.2fT", n / 1e12);
  if (n >= 1e9) return format("%.2fB", n / 1e9);
  if (n >= 1e6) return format("%.1fM", n / 1e6);
  if (n >= 1e3) return format("%.1fK", n / 1e3);
  return format("%.0f", n);
}

std::string flopsText(double flops) {
  const char *units[] = {"FLOP", "KFLOP", "MFLOP", "GFLOP", "TFLOP", "PFLOP", "EFLOP"};
  int unit = 0;
  while (flops >= 1000 && unit < 6) {
    flops /= 1000;
    ++unit;
  }
  return format("%.2f ", flops) + units[unit];
}

std::string msText(double seconds) {
  double ms = seconds * 1e3;
  if (ms != 0 && std::fabs(ms) < 0.01)
    return format("%.4f", ms);
  return format("%.2f", ms);
}

/// Bandwidths and rates: at least one decimal (as always), and as many as
/// three significant digits need (1.25 GB/s, not "1.2"), trailing zeros
/// past the first decimal dropped.
std::string rateText(double v) {
  double a = std::fabs(v);
  int decimals = a > 0 && a < 100 ? std::min(6, 2 - int(std::floor(std::log10(a)))) : 1;
  std::string s = format(("%." + std::to_string(std::max(1, decimals)) + "f").c_str(), v);
  size_t dot = s.find('.');
  while (dot != std::string::npos && s.size() > dot + 2 && s.back() == '0')
    s.pop_back();
  return s;
}

std::string percentText(double fraction) { return format("%.1f%%", fraction * 100); }

/// "0-3", "0,2,5-7".
std::string rangesText(std::vector<uint32_t> values) {
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  std::string out;
  for (size_t i = 0; i < values.size();) {
    size_t j = i;
    while (j + 1 < values.size() && values[j + 1] == values[j] + 1)
      ++j;
    if (!out.empty())
      out += ",";
    out += std::to_string(values[i]);
    if (j > i)
      out += (j == i + 1 ? "," : "-") + std::to_string(values[j]);
    i = j + 1;
  }
  return out.empty() ? "-" : out;
}

std::string deviceType(const plan::Plan &p, uint32_t rank) {
  if (rank < uint32_t(p.cluster().devices_size())) {
    const auto &type = p.cluster().devices(int(rank)).type();
    return type.empty() ? "?" : type;
  }
  return "?";
}

/// "2x A100-80GB + 1x V100-32GB", types in order of first appearance.
std::string typeCounts(const plan::Plan &p, const std::vector<uint32_t> &ranks) {
  std::vector<std::pair<std::string, int>> counts;
  for (uint32_t r : ranks) {
    std::string type = deviceType(p, r);
    auto it = std::find_if(counts.begin(), counts.end(),
                           [&](const auto &c) { return c.first == type; });
    if (it == counts.end())
      counts.emplace_back(type, 1);
    else
      ++it->second;
  }
  std::string out;
  for (const auto &[type, n] : counts)
    out += (out.empty() ? "" : " + ") + std::to_string(n) + "x " + type;
  return out.empty() ? "-" : out;
}

/// A text table: columns padded to their widest cell, numbers right-aligned.
class Table {
public:
  explicit Table(std::vector<std::string> header, std::string rightAligned = "")
      : right(std::move(rightAligned)) {
    rows.push_back(std::move(header));
  }
  void add(std::vector<std::string> row) { rows.push_back(std::move(row)); }
  void print(std::ostream &os, const std::string &indent) const {
    std::vector<size_t> width;
    for (const auto &row : rows)
      for (size_t c = 0; c < row.size(); ++c) {
        if (width.size() <= c)
          width.push_back(0);
        width[c] = std::max(width[c], row[c].size());
      }
    for (const auto &row : rows) {
      std::string line = indent;
      for (size_t c = 0; c < row.size(); ++c) {
        bool alignRight = c < right.size() && right[c] == 'r';
        std::string pad(width[c] - row[c].size(), ' ');
        line += alignRight ? pad + row[c] : row[c] + (c + 1 < row.size() ? pad : "");
        if (c + 1 < row.size())
          line += "  ";
      }
      while (!line.empty() && line.back() == ' ')
        line.pop_back();
      os << line << "\n";
    }
  }

private:
  std::vector<std::vector<std::string>> rows;
  std::string right;  // 'r' at the index of each right-aligned column
};

void field(std::ostream &os, const std::string &name, const std::string &value) {
  std::string label = "  " + name;
  label.resize(std::max<size_t>(label.size() + 1, 19), ' ');
  os << label << value << "\n";
}

void explainModel(const plan::Plan &p, std::ostream &os) {
  const auto &m = p.model();
  os << "Model\n";
  std::string file = m.path().empty() ? "?" : m.path();
  std::vector<std::string> facts;
  if (m.size_bytes() > 0)
    facts.push_back(bytesText(double(m.size_bytes())));
  if (!m.sha256().empty())
    facts.push_back("sha256 " + m.sha256().substr(0, 16) + (m.sha256().size() > 16 ? "..." : ""));
  if (!facts.empty()) {
    file += " (";
    for (size_t i = 0; i < facts.size(); ++i)
      file += (i ? ", " : "") + facts[i];
    file += ")";
  }
  field(os, "file", file);
  field(os, "graph", m.graph().empty() ? "?" : m.graph());
  field(os, "parameters", countText(double(m.parameters())) + " (" +
                              std::to_string(m.parameters()) + ")");
  field(os, "nodes", std::to_string(m.node_names_size()) + " top-level nodes in " +
                         std::to_string(m.layers_size()) + " layers");
}

void explainCluster(const plan::Plan &p, std::ostream &os) {
  const auto &c = p.cluster();
  os << "\nCluster" << (c.spec().empty() ? "" : "  " + c.spec()) << "\n";
  // Devices by type and speed factor (a measured straggler is its own
  // row), in order of first appearance.
  using Group = std::pair<std::string, double>;
  std::vector<Group> order;
  std::map<Group, std::vector<const plan::Device *>> byType;
  for (const auto &d : c.devices()) {
    Group type{d.type().empty() ? "?" : d.type(), d.speed_factor() == 0 ? 1.0 : d.speed_factor()};
    if (!byType.count(type))
      order.push_back(type);
    byType[type].push_back(&d);
  }
  field(os, "devices", std::to_string(c.devices_size()) + (c.devices_size() == 1 ? " device" : " devices"));
  Table types({"type", "count", "ranks", "memory", "peak TFLOPS", "speed"}, " rrrrr");
  for (const auto &type : order) {
    const auto &devices = byType[type];
    std::vector<uint32_t> ranks;
    for (const auto *d : devices)
      ranks.push_back(d->rank());
    const auto &d = *devices.front();
    types.add({type.first, std::to_string(devices.size()), rangesText(ranks),
               bytesText(double(d.memory_bytes())), format("%.1f", d.peak_tflops()),
               format("%.2f", type.second)});
  }
  if (!order.empty())
    types.print(os, "    ");
  if (c.nodes_size() > 0) {
    field(os, "nodes", std::to_string(c.nodes_size()));
    // A column for the nodes' own networks only when some node has one.
    bool ownNetwork = std::any_of(c.nodes().begin(), c.nodes().end(),
                                  [](const auto &n) { return n.network_bandwidth_gbs() > 0; });
    std::vector<std::string> head = {"node", "ranks", "devices", "link", "GB/s"};
    if (ownNetwork)
      head.push_back("network GB/s");
    Table nodes(head, ownNetwork ? "    rr" : "    r");
    for (int n = 0; n < c.nodes_size(); ++n) {
      const auto &node = c.nodes(n);
      std::vector<uint32_t> ranks(node.ranks().begin(), node.ranks().end());
      std::vector<std::string> row = {node.name().empty() ? std::to_string(n) : node.name(),
                                      rangesText(ranks), typeCounts(p, ranks),
                                      node.link_kind().empty() ? "-" : node.link_kind(),
                                      rateText(node.link_bandwidth_gbs())};
      if (ownNetwork)
        row.push_back(node.network_bandwidth_gbs() > 0 ? rateText(node.network_bandwidth_gbs())
                                                       : "inter-node");
      nodes.add(row);
    }
    nodes.print(os, "    ");
  }
  if (c.nodes_size() > 1 || c.inter_node_bandwidth_gbs() > 0)
    field(os, "inter-node", rateText(c.inter_node_bandwidth_gbs()) + " GB/s, " +
                                format("%.1f us latency", c.inter_node_latency_us()));
}

void explainSettings(const plan::Plan &p, std::ostream &os) {
  const auto &s = p.settings();
  os << "\nSettings\n";
  std::string mode = s.mode().empty() ? "?" : s.mode();
  if (!s.optimizer().empty())
    mode += " (optimizer " + s.optimizer() + ")";
  field(os, "mode", mode);
  const bool serve = s.mode() == "serve";
  std::string batch = std::to_string(s.global_batch()) + " samples per step";
  if (s.micro_batches() > 0 && s.global_batch() % s.micro_batches() == 0)
    batch += ", " + std::to_string(s.micro_batches()) + " micro-batches of " +
             std::to_string(s.global_batch() / s.micro_batches()) + " samples";
  if (!serve)
    field(os, "batch", batch);
  if (s.whole_batch())
    field(os, "batch split", "none (" + s.whole_batch_reason() + ")");
  for (const auto &io : s.inputs()) {
    std::string dims;
    for (int64_t d : io.dims()) dims += (dims.empty() ? "" : "x") + (d < 0 ? std::string("?") : std::to_string(d));
    std::string values;
    for (int64_t v : io.values()) values += (values.empty() ? "" : ",") + std::to_string(v);
    field(os, "input", io.name() + " [" + dims + "]" +
                           (io.batch_axis() >= 0 ? ", batch on axis " + std::to_string(io.batch_axis()) : "") +
                           (values.empty() ? "" : ", value " + values + " (--value: run takes no other)"));
  }
  field(os, "sequence", s.sequence() > 0 ? std::to_string(s.sequence()) : "-");
  field(os, "dtype", s.dtype().empty() ? "?" : s.dtype());
  if (!s.stack().empty())  // plans written before hetplan recorded it have none
    field(os, "software stack", s.stack());
  if (!serve) {
    field(os, "micro-batches", std::to_string(s.micro_batches()));
    field(os, "schedule", s.schedule().empty() ? "?" : s.schedule());
  }
  field(os, "strategy", s.strategy().empty() ? "?" : s.strategy());
  if (s.mode() == "train")
    field(os, "memory savers", memorySaversText(p));
  if (std::string tables = sparseEmbeddingsText(p); !tables.empty())
    field(os, "embeddings", tables);
  if (!s.bound_dims().empty()) {
    std::map<std::string, int64_t> dims(s.bound_dims().begin(), s.bound_dims().end());
    std::string text;
    for (const auto &[name, value] : dims)
      text += (text.empty() ? "" : ", ") + name + "=" + std::to_string(value);
    field(os, "bound dims", text);
  }
}

} // namespace

std::string sparseEmbeddingsText(const plan::Plan &p) {
  std::string text;
  for (const auto &stage : p.stages()) {
    if (stage.sparse_parameters_size() == 0)
      continue;
    std::map<std::string, int> types;
    for (const auto &w : stage.workers())
      for (uint32_t r : w.ranks())
        if (int(r) < p.cluster().devices_size())
          ++types[p.cluster().devices(int(r)).type()];
    std::string devices;
    for (const auto &[t, n] : types)
      devices += (devices.empty() ? "" : " + ") + std::to_string(n) + "x " + t;
    int workers = stage.workers_size();
    text += (text.empty() ? "" : "; ") + std::to_string(stage.sparse_parameters_size()) + " table(s) on stage " +
            std::to_string(stage.index()) + " (" + devices + ")" +
            (workers > 1 ? ", row-sharded " + std::to_string(workers) + " ways" : "");
  }
  return text.empty() ? text : text + "; sparse row updates";
}

std::string memorySaversText(const plan::Plan &p) {
  // docs/planner.md, "Memory".
  std::string savers, recomputed;
  for (const auto &stage : p.stages())
    if (stage.recompute())
      recomputed += (recomputed.empty() ? "" : ", ") + std::to_string(stage.index());
  // The most a rank saved (Rank.memory; 0 in plans written before the
  // savings were recorded).
  double recomputeSaved = 0, offloadSaved = 0;
  for (const auto &rank : p.ranks()) {
    recomputeSaved = std::max(recomputeSaved, double(rank.memory().recompute_saved()));
    offloadSaved = std::max(offloadSaved, double(rank.memory().offload_saved()));
  }
  auto upTo = [](double bytes) {
    return bytes > 0 ? " (up to " + bytesText(bytes) + " per rank)" : std::string();
  };
  if (!recomputed.empty())
    savers = std::string("recomputation on stage") +
             (recomputed.find(',') == std::string::npos ? " " : "s ") + recomputed +
             upTo(recomputeSaved);
  const auto &s = p.settings();
  if (s.zero_stage() > 0)
    savers += (savers.empty() ? "" : "; ") + ("ZeRO-" + std::to_string(s.zero_stage()));
  if (s.offload_optimizer())
    savers += (savers.empty() ? "" : "; ") + std::string("optimizer state in host memory") +
              upTo(offloadSaved);
  return savers.empty() ? "none" : savers;
}

namespace {

void explainStages(const plan::Plan &p, std::ostream &os) {
  const bool train = p.settings().mode() != "infer";
  const auto &layers = p.model().layers();
  os << "\nStages (" << p.stages_size() << ", in pipeline order)\n";
  std::vector<std::string> header = {"stage", "ranks", "devices", "layers", "TP",
                                     "batch share", "fwd ms"};
  std::string right = "r   r r";  // stage, TP and the times right-aligned
  right.resize(header.size() + (train ? 3 : 1), 'r');
  if (train)
    header.insert(header.end(), {"bwd ms", "all-reduce ms"});
  header.push_back("send ms");
  Table stages(header, right);
  for (const auto &stage : p.stages()) {
    std::vector<uint32_t> ranks;
    std::string share;
    for (const auto &worker : stage.workers()) {
      ranks.insert(ranks.end(), worker.ranks().begin(), worker.ranks().end());
      share += (share.empty() ? "" : "+") + std::to_string(worker.samples());
    }
    auto layerText = [&](uint32_t i) {
      return i < uint32_t(layers.size()) && !layers[int(i)].name().empty()
                 ? layers[int(i)].name()
                 : std::string("?");
    };
    std::string layerRange;
    if (stage.first_layer() == stage.last_layer())
      layerRange = std::to_string(stage.first_layer()) + " (" + layerText(stage.first_layer()) + ")";
    else
      layerRange = std::to_string(stage.first_layer()) + "-" + std::to_string(stage.last_layer()) +
                   " (" + layerText(stage.first_layer()) + " .. " +
                   layerText(stage.last_layer()) + ")";
    std::vector<std::string> row = {std::to_string(stage.index()), rangesText(ranks),
                                    typeCounts(p, ranks), layerRange,
                                    std::to_string(stage.tensor_parallel()),
                                    share.empty() ? "-" : share, msText(stage.forward_s())};
    if (train) {
      row.push_back(msText(stage.backward_s()));
      row.push_back(msText(stage.gradient_allreduce_s()));
    }
    row.push_back(msText(stage.send_activation_s()));
    stages.add(row);
  }
  stages.print(os, "  ");
  // What each tensor-parallel stage splits, and the collectives priced.
  for (const auto &stage : p.stages()) {
    if (stage.tensor_parallel() <= 1)
      continue;
    int counts[8] = {};
    for (const auto &n : stage.tensor_parallel_nodes())
      if (n.role() >= 0 && n.role() < 8) counts[n.role()]++;
    const auto &t = stage.tensor_parallel_traffic();
    os << "  stage " << stage.index() << " tensor parallel " << stage.tensor_parallel() << ": "
       << counts[plan::TensorParallelNode::COLUMN] << " column / "
       << counts[plan::TensorParallelNode::ROW] << " row MatMuls (Megatron pairs), "
       << counts[plan::TensorParallelNode::GATHER] << " column MatMuls gathered, "
       << (counts[plan::TensorParallelNode::VOCAB] ? "a vocab-parallel head and loss, " : "")
       << stage.tensor_parallel_nodes_size() << " split nodes; per micro-batch forward "
       << t.forward_all_reduces() << " all-reduces, " << t.forward_all_gathers() << " all-gathers"
       << (train ? ", backward " + std::to_string(t.backward_all_reduces()) + " all-reduces" : "")
       << "\n";
  }
}

void explainMemory(const plan::Plan &p, std::ostream &os) {
  const bool train = p.settings().mode() != "infer";
  os << "\nMemory per rank (peak over the schedule, against capacity)\n";
  std::vector<std::string> header = {"rank", "device", "stage", "peak", "capacity", "used",
                                     "params"};
  if (train)
    header.insert(header.end(), {"grads", "optimizer"});
  header.insert(header.end(), {"activations", "kv cache", "workspace"});
  std::string right = "r " + std::string(header.size() - 2, 'r');
  Table table(header, right);
  for (const auto &rank : p.ranks()) {
    const auto &m = rank.memory();
    bool idle = true;
    for (const auto &stage : p.stages())
      for (const auto &worker : stage.workers())
        for (uint32_t r : worker.ranks())
          idle = idle && r != rank.rank();
    uint64_t capacity = m.capacity();
    if (capacity == 0 && rank.rank() < uint32_t(p.cluster().devices_size()))
      capacity = p.cluster().devices(int(rank.rank())).memory_bytes();
    double sum = double(m.parameters()) + double(m.gradients()) + double(m.optimizer_state()) +
                 double(m.activations()) + double(m.kv_cache()) + double(m.workspace());
    double peak = m.peak() > 0 ? double(m.peak()) : sum;
    std::string used = "-";
    if (!idle && capacity > 0) {
      used = format("%.0f%%", 100 * peak / double(capacity));
      if (peak > double(capacity))
        used += " OVER";
    }
    std::vector<std::string> row = {std::to_string(rank.rank()), deviceType(p, rank.rank()),
                                    idle ? "idle" : std::to_string(rank.stage()),
                                    idle ? "-" : bytesText(peak),
                                    capacity ? bytesText(double(capacity)) : "?", used};
    auto part = [&](uint64_t bytes) {
      row.push_back(idle && bytes == 0 ? "-" : bytesText(double(bytes)));
    };
    part(m.parameters());
    if (train) {
      part(m.gradients());
      part(m.optimizer_state());
    }
    part(m.activations());
    part(m.kv_cache());
    part(m.workspace());
    table.add(row);
  }
  table.print(os, "  ");
}

void explainPrediction(const plan::Plan &p, std::ostream &os) {
  const auto &pr = p.prediction();
  os << "\nPrediction" << (pr.cost_model().empty() ? "" : " (cost model " + pr.cost_model() + ")")
     << "\n";
  field(os, "step time", msText(pr.step_time_s()) + " ms");
  field(os, "throughput", rateText(pr.samples_per_s()) + " samples/s");
  field(os, "bubble", percentText(pr.bubble_fraction()));
  field(os, "MFU", percentText(pr.model_flops_utilization()));
  field(os, "FLOPs per step", flopsText(pr.total_flops_per_step()));
  field(os, "search", format("%.2f s, ", pr.search_time_s()) +
                          std::to_string(pr.plans_evaluated()) + " plans evaluated");
}

} // namespace

void explainServing(const plan::Plan &p, std::ostream &os) {
  const auto &s = p.serving();
  os << "Serving " << (p.model().graph().empty() ? "?" : p.model().graph()) << " on "
     << (p.cluster().spec().empty() ? "?" : p.cluster().spec())
     << (s.picked_devices() ? " (devices picked: the cheapest that meet the targets)" : "")
     << "\n";
  bool lengthTables = s.prompt_lengths().find(' ') != std::string::npos ||
                      s.output_lengths().find(' ') != std::string::npos;
  std::string targets = format("%.2f req/s, ", s.rate_rps()) +
                        std::to_string(s.prompt_tokens()) + " prompt + " +
                        std::to_string(s.output_tokens()) + " output tokens per request" +
                        (lengthTables || s.arrivals().rfind("trace", 0) == 0 ? " (means)" : "");
  field(os, "workload", targets);
  if (s.requested_rate_rps() > 0)
    field(os, "", format("planned at capacity: %.2f req/s were asked", s.requested_rate_rps()));
  if (!s.arrivals().empty())
    field(os, "arrivals", s.arrivals());
  if (lengthTables) {
    field(os, "prompt tokens", s.prompt_lengths());
    field(os, "output tokens", s.output_lengths());
  }
  std::string bounds;
  if (s.ttft_target_s() > 0)
    bounds += "TTFT " + msText(s.ttft_target_s()) + " ms";
  if (s.tpot_target_s() > 0)
    bounds += (bounds.empty() ? "" : ", ") + std::string("TPOT ") + msText(s.tpot_target_s()) + " ms";
  if (!bounds.empty())
    bounds += " at p" + std::to_string(s.target_percentile());
  if (s.budget_usd_per_hour() > 0)
    bounds += (bounds.empty() ? "" : ", ") + format("budget $%.2f/h", s.budget_usd_per_hour());
  field(os, "targets", bounds.empty() ? "none" : bounds);
  field(os, "KV cache", bytesText(s.kv_cache_bytes_per_token()) + " per token, " +
                            bytesText(s.kv_cache_bytes_per_token() *
                                      double(s.prompt_tokens() + s.output_tokens())) +
                            " per request (whole model)");
  field(os, "routing", (s.routing().empty() ? std::string("?") : s.routing()) +
                           ", shares in proportion to capacity");
  os << "  replicas (" << s.replicas_size() << ")\n";
  Table table({"replica", "devices", "ranks", "TP", "stages (layers)", "max batch", "share",
               "req/s", "capacity", "prefill ms", "decode ms", "$/h"},
              "r    rrrrrrr");
  for (const auto &r : s.replicas()) {
    std::vector<uint32_t> ranks;
    std::string stages;
    for (const auto &st : r.stages()) {
      ranks.insert(ranks.end(), st.ranks().begin(), st.ranks().end());
      stages += (stages.empty() ? "" : " | ") + std::to_string(st.first_layer()) + "-" +
                std::to_string(st.last_layer());
    }
    table.add({std::to_string(r.index()), typeCounts(p, ranks), rangesText(ranks),
               std::to_string(r.tensor_parallel()), stages,
               std::to_string(r.max_batch()) + (r.limited_by().empty() ? "" : " (" + r.limited_by() + ")"),
               percentText(r.share()), format("%.2f", r.rate_rps()),
               format("%.2f", r.capacity_rps()), msText(r.prefill_s()),
               msText(r.decode_step_s()), format("%.2f", r.usd_per_hour())});
  }
  table.print(os, "    ");
  os << "  memory per device (fullest stage of each replica)\n";
  Table memory({"replica", "stage", "weights", "KV/token", "KV cache", "peak", "capacity", "used",
                "budget"},
               "rrrrrrrrr");
  for (const auto &r : s.replicas()) {
    int fullest = -1;
    double most = -1;
    for (int i = 0; i < r.stages_size(); ++i) {
      const auto &st = r.stages(i);
      double used = st.capacity_bytes() ? double(st.peak_bytes()) / double(st.capacity_bytes()) : 0;
      if (used > most) {
        most = used;
        fullest = i;
      }
    }
    if (fullest < 0)
      continue;
    const auto &st = r.stages(fullest);
    memory.add({std::to_string(r.index()), std::to_string(fullest),
                bytesText(double(st.weight_bytes())), bytesText(st.kv_cache_bytes_per_token()),
                bytesText(double(st.kv_cache_bytes())), bytesText(double(st.peak_bytes())),
                bytesText(double(st.capacity_bytes())), percentText(most),
                percentText(s.memory_utilization() > 0 ? s.memory_utilization() : 0.9)});
  }
  memory.print(os, "    ");
  if (s.idle_devices() > 0)
    os << "  " << s.idle_devices()
       << " device(s) idle: no replica on them fits or meets the targets, or none is needed"
       << (s.picked_devices() ? " (not rented)" : " (paid for: the cluster is fixed)") << "\n";
  const auto &pr = s.prediction();
  if (s.arrivals().rfind("trace", 0) == 0)
    os << "  simulated (" << s.arrivals() << " replayed, seed " << pr.seed() << ")\n";
  else
    os << "  simulated (" << pr.simulated_requests() << " "
       << (s.arrivals().empty() ? std::string("Poisson") : s.arrivals()) << " arrivals, seed "
       << pr.seed() << ")\n";
  field(os, "throughput", format("%.2f req/s, ", pr.requests_per_s()) +
                              rateText(pr.output_tokens_per_s()) + " output tokens/s (capacity " +
                              format("%.2f req/s)", pr.capacity_rps()));
  field(os, "TTFT p50/p90/p99", msText(pr.ttft_p50_s()) + " / " + msText(pr.ttft_p90_s()) +
                                    " / " + msText(pr.ttft_p99_s()) + " ms");
  field(os, "TPOT p50/p90/p99", msText(pr.tpot_p50_s()) + " / " + msText(pr.tpot_p90_s()) +
                                    " / " + msText(pr.tpot_p99_s()) + " ms");
  if (pr.e2e_p50_s() > 0)
    field(os, "e2e p50/p90/p99", msText(pr.e2e_p50_s()) + " / " + msText(pr.e2e_p90_s()) +
                                     " / " + msText(pr.e2e_p99_s()) + " ms");
  field(os, "cost", format("$%.2f/h, ", s.usd_per_hour()) +
                        format("$%.3f per million output tokens", s.usd_per_million_tokens()) +
                        (s.unpriced_devices() ? " (" + std::to_string(s.unpriced_devices()) +
                                                    " device(s) without a price counted as $0)"
                                              : ""));
}

void explainPlan(const plan::Plan &p, std::ostream &os) {
  os << "hetplan plan (schema " << p.schema_version();
  if (!p.producer().empty())
    os << ", written by " << p.producer();
  os << ")\n\n";
  explainModel(p, os);
  explainCluster(p, os);
  explainSettings(p, os);
  if (p.settings().mode() == "serve" || p.has_serving()) {
    os << "\n";
    explainServing(p, os);
    os << "\n";
    explainBaselines(p, os, "");
    return;
  }
  explainStages(p, os);
  explainMemory(p, os);
  explainPrediction(p, os);
  os << "\n";
  explainBaselines(p, os, "");
}

} // namespace hetplan::runtime
