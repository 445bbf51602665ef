//===- ExplainHtml.cpp - a plan report as one self-contained HTML page ----===//
//
// `hetplan explain PLAN --html OUT.html`. The page stands alone: inline CSS
// and SVG, no scripts, no fonts or images to fetch, and a
// Content-Security-Policy meta tag that forbids loading anything. Every
// string from the plan (model, layer, node and device names) goes through
// html(); numbers are formatted here. Like explainPlan it accepts plans
// that validatePlan rejects: indices are checked before use.
//
// Sections (each a <section id=...>): summary, cluster, placement (stages,
// workers, layers, batch shares), memory (bars per rank against capacity,
// and the memory savers), timeline (timelineSvg, embedded),
// baselines (Plan.baselines), and for serving plans serving
// (replicas, routing shares, latency percentiles, memory).
//
//===----------------------------------------------------------------------===//

#include "hetplan/runtime/Explain.h"
#include "hetplan/runtime/Files.h"
#include "Markup.h"
#include "Units.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>
#include <vector>

namespace hetplan::runtime {
namespace {

/// Text and attribute values (Markup.h).
std::string html(const std::string &text) { return escapeMarkup(text); }

std::string fmt(const char *format, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), format, std::isfinite(value) ? value : 0.0);
  return buffer;
}

std::string sizeText(double bytes) { return bytesText(std::isfinite(bytes) ? bytes : 0.0); }

std::string msOf(double seconds) {
  double ms = seconds * 1e3;
  return fmt(ms != 0 && std::fabs(ms) < 0.01 ? "%.4f ms" : "%.2f ms", ms);
}

std::string pctOf(double fraction) { return fmt("%.1f%%", fraction * 100); }

std::string usdOf(double usd) { return fmt("$%.2f", usd); }

/// Colours of stages (and of serving replicas), cycled.
const char *stageColour(int index) {
  static const char *palette[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2",
                                  "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
  return index < 0 ? "#d0d4da" : palette[index % 10];
}

const std::string &typeOf(const plan::Plan &p, uint32_t rank) {
  static const std::string unknown = "?";
  if (rank < uint32_t(p.cluster().devices_size()) &&
      !p.cluster().devices(int(rank)).type().empty())
    return p.cluster().devices(int(rank)).type();
  return unknown;
}

/// The stage (training/inference) or replica (serving) each rank works for,
/// -1 when idle.
std::vector<int> groupOfRanks(const plan::Plan &p) {
  std::vector<int> group(size_t(std::max(p.cluster().devices_size(), p.ranks_size())), -1);
  auto mark = [&](uint32_t rank, int g) {
    if (rank < group.size() && group[rank] < 0)
      group[rank] = g;
  };
  for (int s = 0; s < p.stages_size(); ++s)
    for (const auto &worker : p.stages(s).workers())
      for (uint32_t r : worker.ranks())
        mark(r, s);
  for (int i = 0; i < p.serving().replicas_size(); ++i)
    for (const auto &stage : p.serving().replicas(i).stages())
      for (uint32_t r : stage.ranks())
        mark(r, i);
  return group;
}

/// Ranks as runs of consecutive numbers, in the given order: "0-7, 9, 12".
std::string runsText(const std::vector<uint32_t> &ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1)
      ++j;
    out += (out.empty() ? "" : ", ") + std::to_string(ranks[i]) +
           (j > i ? (j == i + 1 ? ", " : "-") + std::to_string(ranks[j]) : "");
    i = j + 1;
  }
  return out.empty() ? "-" : out;
}

/// Table rows of ranks, one per run of consecutive ranks whose other cells
/// are the same HTML: a 1,024-GPU cluster is a few rows, not 1,024. Each
/// row says how many ranks it stands for (data-ranks).
class RankRows {
public:
  explicit RankRows(const char *cssClass) : cssClass(cssClass) {}
  void add(uint32_t rank, std::string cellsHtml) {
    if (rows.empty() || rows.back().second != cellsHtml)
      rows.push_back({{}, std::move(cellsHtml)});
    rows.back().first.push_back(rank);
  }
  void write(std::ostream &os) const {
    for (const auto &[ranks, cells] : rows)
      os << "<tr class=\"" << cssClass << "\" data-ranks=\"" << ranks.size()
         << "\"><td class=\"n\">" << runsText(ranks) << "</td>" << cells << "</tr>\n";
  }

private:
  const char *cssClass;
  std::vector<std::pair<std::vector<uint32_t>, std::string>> rows;
};

/// A <dl> of name/value pairs; values are already HTML.
class Facts {
public:
  void add(const std::string &name, const std::string &valueHtml) {
    items.emplace_back(name, valueHtml);
  }
  void write(std::ostream &os) const {
    os << "<dl class=\"facts\">";
    for (const auto &[name, value] : items)
      os << "<dt>" << html(name) << "</dt><dd>" << value << "</dd>";
    os << "</dl>\n";
  }

private:
  std::vector<std::pair<std::string, std::string>> items;
};

/// A horizontal bar of coloured parts scaled to `scale` bytes (or units),
/// with a dashed mark at `mark` when positive; `title`s are tooltips.
struct BarPart {
  double value;
  const char *colour;
  std::string title;
};

void writeBar(std::ostream &os, const std::vector<BarPart> &parts, double scale, double mark,
              const char *cssClass) {
  const double width = 420, height = 18;
  if (!(scale > 0))
    scale = 1;
  os << "<svg class=\"" << cssClass << "\" width=\"" << width << "\" height=\"" << height
     << "\" viewBox=\"0 0 " << width << " " << height << "\" role=\"img\">"
     << "<rect class=\"track\" x=\"0\" y=\"0\" width=\"" << width << "\" height=\"" << height
     << "\" fill=\"#eef0f3\"/>";
  double x = 0;
  for (const auto &part : parts) {
    if (!(part.value > 0))
      continue;
    double w = std::min(width - x, part.value / scale * width);
    if (w <= 0)
      break;
    os << "<rect x=\"" << fmt("%.2f", x) << "\" y=\"2\" width=\"" << fmt("%.2f", w)
       << "\" height=\"" << (height - 4) << "\" fill=\"" << part.colour << "\"><title>"
       << html(part.title) << "</title></rect>";
    x += w;
  }
  if (mark > 0) {
    double mx = std::min(width - 1, mark / scale * width);
    os << "<line x1=\"" << fmt("%.2f", mx) << "\" y1=\"0\" x2=\"" << fmt("%.2f", mx)
       << "\" y2=\"" << height << "\" stroke=\"#222\" stroke-width=\"2\" "
       << "stroke-dasharray=\"3 2\"/>";
  }
  os << "</svg>";
}

const char *kStyle = R"css(
body{font-family:"DejaVu Sans",Helvetica,Arial,sans-serif;margin:0;background:#f6f7f9;color:#222}
header{background:#23395d;color:#fff;padding:18px 28px}
header h1{margin:0 0 4px;font-size:22px}
header p{margin:0;color:#cfd8e6}
nav{margin-top:10px}nav a{color:#fff;margin-right:16px;font-size:14px;text-decoration:none;border-bottom:1px dotted #cfd8e6}
main{padding:8px 28px 40px;max-width:1500px}
section{background:#fff;border:1px solid #dde1e7;border-radius:6px;margin:18px 0;padding:14px 20px}
h2{font-size:18px;margin:4px 0 12px;color:#23395d}
h3{font-size:15px;margin:14px 0 8px}
table{border-collapse:collapse;font-size:13px;margin:6px 0}
th,td{border-bottom:1px solid #e4e7ec;padding:4px 10px;text-align:left;vertical-align:middle}
th{background:#f0f2f5;font-weight:600}
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
dl.facts{display:grid;grid-template-columns:max-content auto;gap:3px 16px;font-size:14px;margin:0}
dl.facts dt{color:#555}dl.facts dd{margin:0}
.swatch{display:inline-block;width:12px;height:12px;border-radius:2px;vertical-align:-1px;margin-right:5px}
.legend{font-size:12px;color:#444;margin:6px 0}.legend span{margin-right:14px}
.note{font-size:13px;color:#555}
.over{color:#b00020;font-weight:600}
.scroll{overflow-x:auto}
svg text{font-family:"DejaVu Sans",Helvetica,Arial,sans-serif}
)css";

void writeHead(std::ostream &os, const plan::Plan &p) {
  std::string name = !p.model().graph().empty() ? p.model().graph()
                     : !p.model().path().empty() ? p.model().path()
                                                 : std::string("plan");
  os << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
     << "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
     << "style-src 'unsafe-inline'\">\n"
     << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
     << "<meta name=\"generator\" content=\"" << html(p.producer().empty() ? "hetplan" : p.producer())
     << "\">\n<title>hetplan plan: " << html(name) << "</title>\n<style>" << kStyle
     << "</style>\n</head>\n<body>\n";
  const auto &s = p.settings();
  std::string mode = s.mode().empty() ? "?" : s.mode();
  os << "<header><h1>hetplan plan: " << html(name) << "</h1><p>" << html(mode) << " on "
     << html(p.cluster().spec().empty() ? "?" : p.cluster().spec()) << " &middot; "
     << p.cluster().devices_size() << " devices &middot; strategy "
     << html(s.strategy().empty() ? "?" : s.strategy()) << " &middot; plan schema "
     << p.schema_version() << "</p>\n<nav>";
  // Links within the page only (#id): the sections explainHtml writes.
  const bool serve = s.mode() == "serve" || p.has_serving();
  std::vector<std::pair<const char *, const char *>> links = {{"summary", "Summary"},
                                                               {"cluster", "Cluster"}};
  if (serve)
    links.push_back({"serving", "Serving"});
  else
    links.insert(links.end(),
                 {{"placement", "Stages"}, {"memory", "Memory"}, {"timeline", "Timeline"}});
  links.push_back({"baselines", "Baselines"});
  for (const auto &[id, title] : links)
    os << "<a href=\"#" << id << "\">" << title << "</a>";
  os << "</nav></header>\n<main>\n";
}

void writeSummary(std::ostream &os, const plan::Plan &p, double clusterUsd, bool serve) {
  const auto &m = p.model();
  const auto &s = p.settings();
  os << "<section id=\"summary\"><h2>Summary</h2>\n";
  Facts f;
  f.add("model", html(m.path().empty() ? "?" : m.path()) +
                     (m.size_bytes() ? " (" + sizeText(double(m.size_bytes())) + ")" : ""));
  f.add("graph", html(m.graph().empty() ? "?" : m.graph()) + ", " +
                     std::to_string(m.parameters()) + " parameters in " +
                     std::to_string(m.layers_size()) + " layers");
  f.add("mode", html(s.mode().empty() ? "?" : s.mode()) +
                    (s.optimizer().empty() ? "" : " (optimizer " + html(s.optimizer()) + ")"));
  f.add("dtype", html(s.dtype().empty() ? "?" : s.dtype()));
  if (s.sequence() > 0)
    f.add("sequence", std::to_string(s.sequence()));
  if (serve) {
    const auto &sv = p.serving();
    f.add("predicted", "<b>" + fmt("%.2f req/s", sv.prediction().requests_per_s()) + "</b> of " +
                           fmt("%.2f", sv.rate_rps()) + " asked, TTFT p90 " +
                           msOf(sv.prediction().ttft_p90_s()) + ", TPOT p90 " +
                           msOf(sv.prediction().tpot_p90_s()) + ", " +
                           std::to_string(sv.replicas_size()) + " replica(s), " +
                           usdOf(sv.usd_per_hour()) + "/h");
  } else {
    std::string batch = std::to_string(s.global_batch()) + " samples per step";
    if (s.micro_batches() > 0)
      batch += " in " + std::to_string(s.micro_batches()) + " micro-batches";
    f.add("batch", batch);
    f.add("schedule", html(s.schedule().empty() ? "?" : s.schedule()));
    const auto &pr = p.prediction();
    f.add("predicted step", "<b>" + msOf(pr.step_time_s()) + "</b>, " +
                                fmt("%.1f samples/s", pr.samples_per_s()) + ", bubble " +
                                pctOf(pr.bubble_fraction()) + ", MFU " +
                                pctOf(pr.model_flops_utilization()));
    if (!pr.cost_model().empty())
      f.add("cost model", html(pr.cost_model()));
    if (clusterUsd > 0 && pr.step_time_s() > 0)
      f.add("cost", usdOf(clusterUsd) + "/h for the cluster, " +
                        fmt("$%.6f per step", clusterUsd * pr.step_time_s() / 3600));
  }
  f.write(os);
  os << "</section>\n";
}

/// Nodes as boxes of device boxes, each device coloured by the stage (or
/// replica) it works for.
void writeClusterPicture(std::ostream &os, const plan::Plan &p, const std::vector<int> &group,
                         bool serve) {
  const auto &c = p.cluster();
  struct Box {
    std::string label, link;
    std::vector<uint32_t> ranks;
  };
  std::vector<Box> boxes;
  std::set<uint32_t> placed;
  for (int n = 0; n < c.nodes_size(); ++n) {
    const auto &node = c.nodes(n);
    Box b{node.name().empty() ? "node " + std::to_string(n) : node.name(),
          (node.link_kind().empty() ? std::string("link") : node.link_kind()) +
              fmt(" %.1f GB/s", node.link_bandwidth_gbs()),
          {}};
    for (uint32_t r : node.ranks())
      if (placed.insert(r).second)
        b.ranks.push_back(r);
    boxes.push_back(std::move(b));
  }
  Box rest{"devices without a node", "", {}};
  for (int r = 0; r < c.devices_size(); ++r)
    if (!placed.count(uint32_t(r)))
      rest.ranks.push_back(uint32_t(r));
  if (!rest.ranks.empty())
    boxes.push_back(std::move(rest));
  // Named boxes up to 64 devices; beyond, small squares (names in tooltips).
  const bool compact = c.devices_size() > 64;
  const int perRow = compact ? 40 : 8;
  const double devW = compact ? 22 : 124, devH = compact ? 22 : 46, gap = compact ? 6 : 8;
  const double labelW = 170;
  double y = 8, width = labelW + perRow * (devW + gap) + 16;
  std::ostringstream body;
  for (const auto &b : boxes) {
    int rows = std::max(1, int((b.ranks.size() + perRow - 1) / perRow));
    double h = std::max(rows * (devH + gap) + gap, 56.0);
    body << "<g class=\"node\"><rect x=\"4\" y=\"" << y << "\" width=\"" << width - 8
         << "\" height=\"" << h << "\" rx=\"6\" fill=\"#f3f5f8\" stroke=\"#b8c0cc\"/>"
         << "<text x=\"14\" y=\"" << y + 22 << "\" font-size=\"14\" font-weight=\"bold\">"
         << html(b.label) << "</text><text x=\"14\" y=\"" << y + 40
         << "\" font-size=\"11\" fill=\"#555\">" << html(b.link) << "</text>";
    for (size_t i = 0; i < b.ranks.size(); ++i) {
      uint32_t r = b.ranks[i];
      double x = labelW + double(i % perRow) * (devW + gap);
      double dy = y + gap + double(i / perRow) * (devH + gap);
      int g = r < group.size() ? group[r] : -1;
      uint64_t memory = r < uint32_t(c.devices_size()) ? c.devices(int(r)).memory_bytes() : 0;
      std::string role = g < 0 ? "idle" : (serve ? "replica " : "stage ") + std::to_string(g);
      body << "<g class=\"device\"><title>rank " << r << ": " << html(typeOf(p, r)) << ", "
           << sizeText(double(memory)) << ", " << role << "</title><rect x=\"" << x
           << "\" y=\"" << dy << "\" width=\"" << devW << "\" height=\"" << devH
           << "\" rx=\"4\" fill=\"" << stageColour(g) << "\"/>";
      if (!compact)
        body << "<text x=\"" << x + 6 << "\" y=\"" << dy + 17 << "\" font-size=\"12\" fill=\"" << (g < 0 ? "#333" : "#fff")
           << "\">" << html(typeOf(p, r).substr(0, 17)) << "</text><text x=\"" << x + 6
           << "\" y=\"" << dy + 35 << "\" font-size=\"11\" fill=\"" << (g < 0 ? "#333" : "#fff")
           << "\">rank " << r << " &middot; " << html(role) << "</text>";
      body << "</g>";
    }
    body << "</g>\n";
    y += h + gap;
  }
  os << "<div class=\"scroll\"><svg id=\"cluster-picture\" width=\"" << width << "\" height=\""
     << y << "\" viewBox=\"0 0 " << width << " " << y << "\" role=\"img\">\n"
     << body.str() << "</svg></div>\n";
}

void writeCluster(std::ostream &os, const plan::Plan &p, const HtmlOptions &options,
                  const std::vector<int> &group, bool serve) {
  const auto &c = p.cluster();
  os << "<section id=\"cluster\"><h2>Cluster</h2>\n";
  Facts f;
  f.add("spec", html(c.spec().empty() ? "?" : c.spec()));
  f.add("devices", std::to_string(c.devices_size()) + " in " + std::to_string(c.nodes_size()) +
                       " node(s)");
  if (c.nodes_size() > 1 || c.inter_node_bandwidth_gbs() > 0)
    f.add("between nodes", fmt("%.1f GB/s, ", c.inter_node_bandwidth_gbs()) +
                               fmt("%.1f &micro;s latency", c.inter_node_latency_us()));
  f.write(os);
  writeClusterPicture(os, p, group, serve);
  os << "<table id=\"devices\"><tr><th>ranks</th><th>device</th><th>node</th><th>memory</th>"
     << "<th>peak TFLOPS</th><th>speed</th><th>$/h</th><th>works for</th></tr>\n";
  RankRows rows("device");
  for (const auto &d : c.devices()) {
    auto price = options.pricePerHour.find(d.type());
    std::string node = d.node() < uint32_t(c.nodes_size()) && !c.nodes(int(d.node())).name().empty()
                           ? c.nodes(int(d.node())).name()
                           : std::to_string(d.node());
    int g = d.rank() < group.size() ? group[d.rank()] : -1;
    std::ostringstream cells;
    cells << "<td>" << html(d.type().empty() ? "?" : d.type()) << "</td><td>" << html(node)
          << "</td><td class=\"n\">" << sizeText(double(d.memory_bytes()))
          << "</td><td class=\"n\">" << fmt("%.1f", d.peak_tflops()) << "</td><td class=\"n\">"
          << fmt("%.2f", d.speed_factor() == 0 ? 1.0 : d.speed_factor()) << "</td><td class=\"n\">"
          << (price == options.pricePerHour.end() ? "-" : usdOf(price->second))
          << "</td><td><span class=\"swatch\" style=\"background:" << stageColour(g)
          << "\"></span>"
          << (g < 0 ? std::string("idle") : (serve ? "replica " : "stage ") + std::to_string(g))
          << "</td>";
    rows.add(d.rank(), cells.str());
  }
  rows.write(os);
  os << "</table>\n";
  if (c.nodes_size() > 0) {
    os << "<h3>Links</h3><table id=\"links\"><tr><th>node</th><th>ranks</th><th>link</th>"
       << "<th>GB/s</th></tr>\n";
    for (int n = 0; n < c.nodes_size(); ++n) {
      const auto &node = c.nodes(n);
      std::vector<uint32_t> ranks(node.ranks().begin(), node.ranks().end());
      os << "<tr><td>" << html(node.name().empty() ? std::to_string(n) : node.name())
         << "</td><td>" << runsText(ranks) << "</td><td>"
         << html(node.link_kind().empty() ? "-" : node.link_kind()) << "</td><td class=\"n\">"
         << fmt("%.1f", node.link_bandwidth_gbs()) << "</td></tr>\n";
    }
    os << "</table>\n";
  }
  os << "</section>\n";
}

std::string layerName(const plan::Plan &p, uint32_t index) {
  const auto &layers = p.model().layers();
  return index < uint32_t(layers.size()) && !layers[int(index)].name().empty()
             ? layers[int(index)].name()
             : std::string("?");
}

/// The model's layers as one strip, coloured by the stage that runs them.
void writeLayerStrip(std::ostream &os, const plan::Plan &p) {
  const int numLayers = p.model().layers_size();
  if (numLayers == 0)
    return;
  const double width = 1000, height = 34;
  os << "<div class=\"scroll\"><svg id=\"layer-strip\" width=\"" << width << "\" height=\""
     << height + 18 << "\" viewBox=\"0 0 " << width << " " << height + 18 << "\" role=\"img\">";
  for (const auto &stage : p.stages()) {
    uint32_t first = std::min<uint32_t>(stage.first_layer(), uint32_t(numLayers));
    uint32_t last = std::min<uint32_t>(std::max(stage.last_layer(), first), uint32_t(numLayers - 1));
    double x0 = double(first) / numLayers * width, x1 = double(last + 1) / numLayers * width;
    os << "<g><title>stage " << stage.index() << ": layers " << first << "-" << last << " ("
       << html(layerName(p, first)) << " .. " << html(layerName(p, last)) << ")</title><rect x=\""
       << fmt("%.2f", x0) << "\" y=\"0\" width=\"" << fmt("%.2f", std::max(1.0, x1 - x0 - 1))
       << "\" height=\"" << height << "\" fill=\"" << stageColour(int(stage.index())) << "\"/>";
    if (x1 - x0 >= 64)  // a label that fits; else the tooltip says it
      os << "<text x=\"" << fmt("%.2f", x0 + 6) << "\" y=\"21\" font-size=\"12\" fill=\"#fff\">"
         << "stage " << stage.index() << "</text>";
    os << "</g>";
  }
  os << "<text x=\"0\" y=\"" << height + 14 << "\" font-size=\"11\" fill=\"#555\">layer 0 ("
     << html(layerName(p, 0)) << ")</text><text x=\"" << width << "\" y=\"" << height + 14
     << "\" font-size=\"11\" fill=\"#555\" text-anchor=\"end\">layer " << numLayers - 1 << " ("
     << html(layerName(p, uint32_t(numLayers - 1))) << ")</text></svg></div>\n";
}

/// "0-1 (stem .. h.0)", "3 (head)".
std::string layersHtml(const plan::Plan &p, uint32_t first, uint32_t last) {
  if (first == last)
    return std::to_string(first) + " (" + html(layerName(p, first)) + ")";
  return std::to_string(first) + "-" + std::to_string(last) + " (" + html(layerName(p, first)) +
         " .. " + html(layerName(p, last)) + ")";
}

/// A worker's devices: "T4", "T4 x2" (tensor parallel), "A100-80GB+T4".
std::string workerTypes(const plan::Plan &p, const plan::Worker &w) {
  std::string types;
  bool alike = true;
  for (uint32_t r : w.ranks()) {
    alike = alike && (types.empty() || typeOf(p, r) == typeOf(p, w.ranks(0)));
    types += (types.empty() ? "" : "+") + typeOf(p, r);
  }
  if (alike && w.ranks_size() > 1)
    return typeOf(p, w.ranks(0)) + " x" + std::to_string(w.ranks_size());
  return types.empty() ? "?" : types;
}

/// A stage's workers, one line per run of workers alike (device types and
/// samples): "8x A100-SXM-80GB (ranks 0-7): 32 each".
std::string workersHtml(const plan::Plan &p, const plan::Stage &stage) {
  std::string out;
  for (int k = 0; k < stage.workers_size();) {
    const std::string types = workerTypes(p, stage.workers(k));
    const int64_t samples = stage.workers(k).samples();
    std::vector<uint32_t> ranks;
    int n = 0;
    for (; k < stage.workers_size() && workerTypes(p, stage.workers(k)) == types &&
           stage.workers(k).samples() == samples;
         ++k, ++n)
      ranks.insert(ranks.end(), stage.workers(k).ranks().begin(), stage.workers(k).ranks().end());
    out += (out.empty() ? "" : "<br>") + (n > 1 ? std::to_string(n) + "x " : "") + html(types) +
           (ranks.size() > 1 ? " (ranks " : " (rank ") + runsText(ranks) + "): " +
           std::to_string(samples) + (n > 1 ? " each" : "");
  }
  return out.empty() ? "-" : out;
}

void writePlacement(std::ostream &os, const plan::Plan &p) {
  const bool train = p.settings().mode() != "infer";
  os << "<section id=\"placement\"><h2>Stages: which layers and samples run where</h2>\n";
  writeLayerStrip(os, p);
  os << "<table id=\"stages\"><tr><th>stage</th><th>layers</th><th>TP</th>"
     << "<th>workers (ranks: samples per micro-batch)</th><th>batch share</th>"
     << "<th>fwd</th>" << (train ? "<th>bwd</th><th>all-reduce</th>" : "")
     << "<th>send</th><th>recompute</th></tr>\n";
  for (const auto &stage : p.stages()) {
    int64_t total = 0;
    for (const auto &w : stage.workers())
      total += std::max<int64_t>(0, w.samples());
    std::vector<BarPart> shares;
    for (int k = 0; k < stage.workers_size(); ++k) {
      const auto &w = stage.workers(k);
      shares.push_back({double(std::max<int64_t>(0, w.samples())), k % 2 ? "#9fb6d1" : "#4e79a7",
                        "worker " + std::to_string(k) + " (" + workerTypes(p, w) + "): " +
                            std::to_string(w.samples()) + " of " + std::to_string(total)});
    }
    std::string workers = workersHtml(p, stage);
    os << "<tr class=\"stage\"><td><span class=\"swatch\" style=\"background:"
       << stageColour(int(stage.index())) << "\"></span>" << stage.index() << "</td><td>"
       << layersHtml(p, stage.first_layer(), stage.last_layer()) << "</td><td class=\"n\">"
       << stage.tensor_parallel() << "</td><td>" << workers << "</td><td>";
    writeBar(os, shares, double(total), 0, "sharebar");
    os << "</td><td class=\"n\">" << msOf(stage.forward_s()) << "</td>";
    if (train)
      os << "<td class=\"n\">" << msOf(stage.backward_s()) << "</td><td class=\"n\">"
         << msOf(stage.gradient_allreduce_s()) << "</td>";
    os << "<td class=\"n\">" << msOf(stage.send_activation_s()) << "</td><td>"
       << (stage.recompute() ? "yes" : "no") << "</td></tr>\n";
  }
  os << "</table>\n<p class=\"note\">Times are per micro-batch on the stage's slowest worker. "
     << "Batch share: each worker's samples of every micro-batch.</p>\n</section>\n";
}

struct MemoryKind {
  const char *name, *colour;
};
const MemoryKind kMemoryKinds[] = {{"parameters", "#4e79a7"},  {"gradients", "#f28e2b"},
                                   {"optimizer state", "#b07aa1"}, {"activations", "#59a14f"},
                                   {"KV cache", "#76b7b2"},     {"workspace", "#bab0ac"}};

void writeMemoryLegend(std::ostream &os, size_t kinds) {
  os << "<div class=\"legend\">";
  for (size_t i = 0; i < kinds; ++i)
    os << "<span><span class=\"swatch\" style=\"background:" << kMemoryKinds[i].colour
       << "\"></span>" << kMemoryKinds[i].name << "</span>";
  os << "<span>bar: device capacity; dashed line: predicted peak</span></div>\n";
}

/// "ranks 0-7 1.2 GiB, rank 9 0.8 GiB": runs of consecutive ranks that
/// saved the same, from `saved` per rank (0: left out).
template <typename SavedFn> std::string savedPerRankText(const plan::Plan &p, SavedFn saved) {
  std::vector<std::pair<std::vector<uint32_t>, std::string>> runs;
  for (const auto &rank : p.ranks()) {
    if (rank.stage() >= uint32_t(p.stages_size()))
      continue;
    double bytes = saved(rank);
    if (!(bytes > 0))
      continue;
    std::string text = sizeText(bytes);
    if (runs.empty() || runs.back().second != text || runs.back().first.back() + 1 != rank.rank())
      runs.push_back({{}, text});
    runs.back().first.push_back(rank.rank());
  }
  std::string out;
  for (const auto &[ranks, text] : runs)
    out += (out.empty() ? "" : ", ") + std::string(ranks.size() > 1 ? "ranks " : "rank ") +
           runsText(ranks) + " " + text;
  return out;
}

/// What each memory saver does to the plan's own figures: recomputation's
/// and offload's savings as the planner priced them (the same stage and
/// schedule without the saver; Rank.memory), ZeRO's derived from the
/// sharded state and the stage's workers.
void writeSavers(std::ostream &os, const plan::Plan &p) {
  const auto &s = p.settings();
  os << "<h3>Memory savers</h3><ul id=\"savers\">";
  std::vector<uint32_t> recomputed;
  for (const auto &stage : p.stages())
    if (stage.recompute())
      recomputed.push_back(stage.index());
  bool any = !recomputed.empty();
  if (any) {
    std::string saved = savedPerRankText(
        p, [](const plan::Rank &r) { return double(r.memory().recompute_saved()); });
    os << "<li>recomputation on stage" << (recomputed.size() > 1 ? "s " : " ")
       << runsText(recomputed) << ": keeps each layer's input and recomputes the rest in the "
       << "backward pass"
       << (saved.empty() ? " (its saving is not recorded in this plan)"
                         : "; saved per rank: " + saved)
       << "</li>";
  }
  if (s.zero_stage() > 0) {
    any = true;
    const char *what = s.zero_stage() == 1   ? "optimizer state"
                       : s.zero_stage() == 2 ? "optimizer state and gradients"
                                             : "optimizer state, gradients and weights";
    os << "<li>ZeRO-" << s.zero_stage() << ": " << what
       << " sharded over each stage's data-parallel workers";
    std::string saved = savedPerRankText(p, [&](const plan::Rank &rank) {
      int workers = p.stages(int(rank.stage())).workers_size();
      const auto &m = rank.memory();
      double sharded = double(m.optimizer_state()) +
                       (s.zero_stage() >= 2 ? double(m.gradients()) : 0) +
                       (s.zero_stage() >= 3 ? double(m.parameters()) : 0);
      return workers > 1 ? sharded * (workers - 1) : 0.0;
    });
    os << (saved.empty() ? "" : "; saved per rank: " + saved) << "</li>";
  }
  if (s.offload_optimizer()) {
    any = true;
    std::string saved = savedPerRankText(
        p, [](const plan::Rank &r) { return double(r.memory().offload_saved()); });
    os << "<li>optimizer offload: optimizer state and step in host memory (not counted on the "
       << "devices above)" << (saved.empty() ? "" : "; saved per rank: " + saved) << "</li>";
  }
  if (!any)
    os << "<li>none</li>";
  os << "</ul>\n";
}

void writeMemory(std::ostream &os, const plan::Plan &p, const std::vector<int> &group) {
  const bool train = p.settings().mode() != "infer";
  os << "<section id=\"memory\"><h2>Memory per device against capacity</h2>\n";
  writeMemoryLegend(os, 6);
  os << "<table id=\"memory-table\"><tr><th>ranks</th><th>device</th><th>stage</th><th>peak / "
     << "capacity</th><th></th><th>used</th></tr>\n";
  RankRows rows("rank");
  for (const auto &rank : p.ranks()) {
    const auto &m = rank.memory();
    int g = rank.rank() < group.size() ? group[rank.rank()] : -1;
    uint64_t capacity = m.capacity();
    if (capacity == 0 && rank.rank() < uint32_t(p.cluster().devices_size()))
      capacity = p.cluster().devices(int(rank.rank())).memory_bytes();
    const double parts[] = {double(m.parameters()), double(m.gradients()),
                            double(m.optimizer_state()), double(m.activations()),
                            double(m.kv_cache()), double(m.workspace())};
    double sum = 0;
    std::vector<BarPart> bar;
    for (size_t i = 0; i < 6; ++i) {
      sum += parts[i];
      bar.push_back({parts[i], kMemoryKinds[i].colour,
                     std::string(kMemoryKinds[i].name) + ": " + sizeText(parts[i])});
    }
    double peak = m.peak() > 0 ? double(m.peak()) : sum;
    bool over = capacity > 0 && peak > double(capacity);
    std::ostringstream cells;
    cells << "<td>" << html(typeOf(p, rank.rank())) << "</td><td>"
       << (g < 0 ? std::string("idle") : std::to_string(rank.stage())) << "</td><td class=\"n\">"
       << (g < 0 ? "-" : sizeText(peak)) << " / " << (capacity ? sizeText(double(capacity)) : "?")
       << "</td><td>";
    writeBar(cells, bar, std::max({double(capacity), peak, sum}), g < 0 ? 0 : peak, "membar");
    cells << "</td><td class=\"n" << (over ? " over" : "") << "\">"
          << (g < 0 || !capacity ? "-" : pctOf(peak / double(capacity)) + (over ? " OVER" : ""))
          << "</td>";
    rows.add(rank.rank(), cells.str());
  }
  rows.write(os);
  os << "</table>\n";
  if (train)
    writeSavers(os, p);
  os << "</section>\n";
}

void writeTimeline(std::ostream &os, const plan::Plan &p) {
  os << "<section id=\"timeline\"><h2>Pipeline timeline of one predicted step</h2>\n";
  bool programs = false;
  for (const auto &rank : p.ranks())
    programs = programs || rank.program_size() > 0;
  if (!programs) {
    os << "<p class=\"note\">This plan has no per-rank programs to draw.</p>\n</section>\n";
    return;
  }
  std::string svg = timelineSvg(p);
  // Inline SVG in HTML needs neither the XML declaration nor the namespace.
  if (svg.compare(0, 5, "<?xml") == 0)
    svg.erase(0, svg.find('\n') + 1);
  const std::string ns = " xmlns=\"http://www.w3.org/2000/svg\"";
  if (auto at = svg.find(ns); at != std::string::npos)
    svg.erase(at, ns.size());
  os << "<div class=\"scroll\">" << svg << "</div>\n</section>\n";
}

// The baselines the plan file records (Plan.baselines): each one's predicted
// step time (serving: capacity and TPOT p90), the plan's gain over it, and
// what it uses or why it does not fit.
void writeBaselines(std::ostream &os, const plan::Plan &p) {
  const bool serve = p.settings().mode() == "serve" || p.has_serving();
  os << "<section id=\"baselines\"><h2>Baselines: the same model and cluster planned the simple ways</h2>\n";
  if (p.baselines().empty()) {
    os << "<p class=\"note\">Not recorded: this plan was written before plans recorded their baselines.</p>\n"
       << "</section>\n";
    return;
  }
  os << "<p class=\"note\">Predicted by the same cost model as the plan; the gain is the baseline's "
     << (serve ? "capacity under the plan's" : "step time over the plan's") << ".</p>\n<table><tr><th>baseline</th>"
     << (serve ? "<th>capacity</th><th>TPOT p90</th>" : "<th>step time</th><th>samples/s</th>")
     << "<th>plan's gain</th><th>uses</th></tr>\n";
  for (const auto &b : p.baselines()) {
    os << "<tr><td>" << html(b.strategy()) << "</td>";
    if (!b.fits()) {
      os << "<td colspan=\"3\">does not fit</td><td>" << html(b.note()) << "</td></tr>\n";
      continue;
    }
    if (serve)
      os << "<td>" << fmt("%.3g req/s", b.capacity_rps()) << "</td><td>" << msOf(b.tpot_p90_s()) << "</td>";
    else
      os << "<td>" << fmt("%.3f s", b.step_time_s()) << "</td><td>" << fmt("%.3g", b.samples_per_s()) << "</td>";
    double gain = baselineGain(p, b);
    os << "<td>" << (gain > 0 ? fmt("x%.2f", gain) : std::string("?")) << "</td><td>" << html(b.note())
       << "</td></tr>\n";
  }
  os << "</table>\n</section>\n";
}

void writeServingReplicas(std::ostream &os, const plan::Plan &p) {
  const auto &s = p.serving();
  os << "<h3>Replicas and routing</h3>\n<p class=\"note\">Routing: "
     << html(s.routing().empty() ? "?" : s.routing())
     << ", shares of the request rate in proportion to capacity.</p>\n";
  std::vector<BarPart> shares;
  for (const auto &r : s.replicas())
    shares.push_back({r.share(), stageColour(int(r.index())),
                      "replica " + std::to_string(r.index()) + ": " + pctOf(r.share())});
  writeBar(os, shares, 1.0, 0, "routebar");
  os << "<table id=\"replicas\"><tr><th>replica</th><th>devices (ranks)</th><th>TP</th>"
     << "<th>stages: layers</th><th>max batch</th><th>share</th><th>req/s</th>"
     << "<th>capacity req/s</th><th>prefill</th><th>decode step</th><th>$/h</th></tr>\n";
  for (const auto &r : s.replicas()) {
    std::string devices, stages;
    for (const auto &st : r.stages()) {
      for (uint32_t rank : st.ranks())
        devices += (devices.empty() ? "" : ", ") + html(typeOf(p, rank)) + " (" +
                   std::to_string(rank) + ")";
      stages += (stages.empty() ? "" : " | ") + std::to_string(st.first_layer()) + "-" +
                std::to_string(st.last_layer());
    }
    os << "<tr class=\"replica\"><td><span class=\"swatch\" style=\"background:"
       << stageColour(int(r.index())) << "\"></span>" << r.index() << "</td><td>" << devices
       << "</td><td class=\"n\">" << r.tensor_parallel() << "</td><td>" << stages
       << "</td><td class=\"n\">" << r.max_batch()
       << (r.limited_by().empty() ? "" : " (" + html(r.limited_by()) + ")")
       << "</td><td class=\"n\">" << pctOf(r.share()) << "</td><td class=\"n\">"
       << fmt("%.2f", r.rate_rps()) << "</td><td class=\"n\">" << fmt("%.2f", r.capacity_rps())
       << "</td><td class=\"n\">" << msOf(r.prefill_s()) << "</td><td class=\"n\">"
       << msOf(r.decode_step_s()) << "</td><td class=\"n\">" << usdOf(r.usd_per_hour())
       << "</td></tr>\n";
  }
  os << "</table>\n";
}

void writeServingLatency(std::ostream &os, const plan::Plan &p) {
  const auto &s = p.serving();
  const auto &pr = s.prediction();
  os << "<h3>Latency (simulated: " << pr.simulated_requests() << " Poisson arrivals, seed "
     << pr.seed() << ")</h3>\n<table id=\"latency\"><tr><th></th><th>p50</th><th>p90</th>"
     << "<th>p99</th><th>target (p" << s.target_percentile() << ")</th></tr>\n";
  auto row = [&](const char *name, double p50, double p90, double p99, double target) {
    os << "<tr><td>" << name << "</td><td class=\"n\">" << msOf(p50) << "</td><td class=\"n\">"
       << msOf(p90) << "</td><td class=\"n\">" << msOf(p99) << "</td><td class=\"n\">"
       << (target > 0 ? msOf(target) : std::string("none")) << "</td></tr>\n";
  };
  row("time to first token", pr.ttft_p50_s(), pr.ttft_p90_s(), pr.ttft_p99_s(),
      s.ttft_target_s());
  row("time per output token", pr.tpot_p50_s(), pr.tpot_p90_s(), pr.tpot_p99_s(),
      s.tpot_target_s());
  os << "</table>\n";
  Facts f;
  f.add("throughput", fmt("%.2f req/s, ", pr.requests_per_s()) +
                          fmt("%.1f output tokens/s (capacity ", pr.output_tokens_per_s()) +
                          fmt("%.2f req/s)", pr.capacity_rps()));
  f.add("cost", usdOf(s.usd_per_hour()) + "/h, " +
                    fmt("$%.3f per million output tokens", s.usd_per_million_tokens()) +
                    (s.unpriced_devices() ? " (" + std::to_string(s.unpriced_devices()) +
                                                " device(s) without a price counted as $0)"
                                          : ""));
  if (s.idle_devices() > 0)
    f.add("idle devices", std::to_string(s.idle_devices()));
  f.write(os);
}

void writeServingMemory(std::ostream &os, const plan::Plan &p) {
  os << "<h3>Memory per device against capacity</h3>\n";
  os << "<div class=\"legend\"><span><span class=\"swatch\" style=\"background:#4e79a7\"></span>"
     << "weights</span><span><span class=\"swatch\" style=\"background:#76b7b2\"></span>"
     << "KV cache</span><span><span class=\"swatch\" style=\"background:#bab0ac\"></span>"
     << "context and workspace</span><span>bar: device capacity</span></div>\n"
     << "<table id=\"serving-memory\"><tr><th>replica</th><th>stage</th><th>ranks</th>"
     << "<th>peak / capacity</th><th></th><th>used</th></tr>\n";
  for (const auto &r : p.serving().replicas())
    for (int i = 0; i < r.stages_size(); ++i) {
      const auto &st = r.stages(i);
      double weights = double(st.weight_bytes()), kv = double(st.kv_cache_bytes());
      double peak = double(st.peak_bytes()), capacity = double(st.capacity_bytes());
      std::string ranks;
      for (uint32_t rank : st.ranks())
        ranks += (ranks.empty() ? "" : ",") + std::to_string(rank);
      std::vector<BarPart> bar = {{weights, "#4e79a7", "weights: " + sizeText(weights)},
                                  {kv, "#76b7b2", "KV cache: " + sizeText(kv)},
                                  {std::max(0.0, peak - weights - kv), "#bab0ac",
                                   "context and workspace: " +
                                       sizeText(std::max(0.0, peak - weights - kv))}};
      bool over = capacity > 0 && peak > capacity;
      os << "<tr class=\"rank\"><td class=\"n\">" << r.index() << "</td><td class=\"n\">" << i
         << "</td><td>" << ranks << "</td><td class=\"n\">" << sizeText(peak) << " / "
         << sizeText(capacity) << "</td><td>";
      writeBar(os, bar, std::max(capacity, peak), peak, "membar");
      os << "</td><td class=\"n" << (over ? " over" : "") << "\">"
         << (capacity > 0 ? pctOf(peak / capacity) : "-") << "</td></tr>\n";
    }
  os << "</table>\n";
}

void writeServing(std::ostream &os, const plan::Plan &p) {
  const auto &s = p.serving();
  os << "<section id=\"serving\"><h2>Serving</h2>\n";
  Facts f;
  f.add("workload", fmt("%.2f req/s, ", s.rate_rps()) + std::to_string(s.prompt_tokens()) +
                        " prompt + " + std::to_string(s.output_tokens()) +
                        " output tokens per request");
  std::string targets;
  if (s.ttft_target_s() > 0)
    targets += "TTFT " + msOf(s.ttft_target_s());
  if (s.tpot_target_s() > 0)
    targets += (targets.empty() ? "" : ", ") + std::string("TPOT ") + msOf(s.tpot_target_s());
  if (!targets.empty())
    targets += " at p" + std::to_string(s.target_percentile());
  if (s.budget_usd_per_hour() > 0)
    targets += (targets.empty() ? "" : ", ") + fmt("budget $%.2f/h", s.budget_usd_per_hour());
  f.add("targets", targets.empty() ? "none" : targets);
  f.add("KV cache", sizeText(s.kv_cache_bytes_per_token()) + " per token (whole model)");
  if (s.picked_devices())
    f.add("devices", "picked: the cheapest part of the cluster that meets the targets");
  f.write(os);
  writeServingReplicas(os, p);
  writeServingLatency(os, p);
  writeServingMemory(os, p);
  os << "</section>\n";
}

/// The whole cluster's price per hour from options.pricePerHour, 0 when a
/// device has no price.
double clusterPricePerHour(const plan::Plan &p, const HtmlOptions &options) {
  double usd = 0;
  for (const auto &d : p.cluster().devices()) {
    auto it = options.pricePerHour.find(d.type());
    if (it == options.pricePerHour.end())
      return 0;
    usd += it->second;
  }
  return usd;
}

} // namespace

std::string explainHtml(const plan::Plan &p, const HtmlOptions &options) {
  const bool serve = p.settings().mode() == "serve" || p.has_serving();
  const std::vector<int> group = groupOfRanks(p);
  std::ostringstream os;
  writeHead(os, p);
  writeSummary(os, p, clusterPricePerHour(p, options), serve);
  writeCluster(os, p, options, group, serve);
  if (serve) {
    writeServing(os, p);
  } else {
    writePlacement(os, p);
    writeMemory(os, p, group);
    writeTimeline(os, p);
  }
  writeBaselines(os, p);
  os << "</main>\n</body>\n</html>\n";
  return os.str();
}

bool writeExplainHtml(const plan::Plan &plan, const std::string &path, std::string &error,
                      const HtmlOptions &options) {
  return writeFileAtomically(path, explainHtml(plan, options), error);
}

} // namespace hetplan::runtime
