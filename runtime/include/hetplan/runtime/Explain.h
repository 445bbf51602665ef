//===- Explain.h - describe a plan to people --------------------*- C++ -*-===//
//
// `hetplan explain PLAN` prints explainPlan and, with --timeline, writes
// writeTimelineSvg; with --html, writeExplainHtml. All accept any plan, also
// one that validatePlan rejects: what they cannot place they leave out or
// mark with '?'.
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_RUNTIME_EXPLAIN_H
#define HETPLAN_RUNTIME_EXPLAIN_H

#include "hetplan/runtime/Plan.h"

#include <map>
#include <ostream>
#include <string>

namespace hetplan::runtime {

/// A readable report of `plan`: model, cluster, settings, a table of the
/// stages (devices, layers, tensor parallel, batch shares, times), memory per
/// rank against capacity with its breakdown, and the prediction.
void explainPlan(const plan::Plan &plan, std::ostream &os);

/// A serving plan's Plan.serving: targets, KV cache per token, the
/// replicas (devices, tensor parallel, stages, max batch, routing share,
/// capacity, $/h), memory per device, the simulated throughput and latency
/// percentiles, and the cost.
void explainServing(const plan::Plan &plan, std::ostream &os);

/// Plan.baselines, one line each after `indent` under a heading line
/// ("Baselines" without an indent, as explain's other sections): the
/// baseline's predicted step time (serving: its capacity and TPOT) and the
/// plan's gain over it ("x1.70"), or "does not fit: WHY". A plan without
/// baselines (written before they were recorded) gets one line saying so.
void explainBaselines(const plan::Plan &plan, std::ostream &os, const std::string &indent);
/// One baseline's line (no indent, no newline).
std::string baselineLine(const plan::Plan &plan, const plan::Baseline &baseline);
/// The plan's gain over `baseline`: its step time over the plan's (serving:
/// the plan's capacity over its); 0 when it does not fit or is unknown.
double baselineGain(const plan::Plan &plan, const plan::Baseline &baseline);

/// The memory savers a training plan uses, e.g. "recomputation on stage 0;
/// ZeRO-2; optimizer state in host memory"; "none" when it uses none.
std::string memorySaversText(const plan::Plan &plan);

/// Where a plan's sparse embedding tables are (Stage.sparse_parameters):
/// "26 table(s) on stage 0 (2x CPU-2S-AVX512), row-sharded 2 ways"; empty
/// when the plan has none.
std::string sparseEmbeddingsText(const plan::Plan &plan);

/// An SVG picture of one step as the plan predicts it: one row per rank (one
/// per stage, showing its slowest rank, when more than 16 ranks work), one
/// <rect> per instruction placed by predicted_start_s/predicted_end_s,
/// compute above and communication in a thin lane below, micro-batch numbers
/// in the boxes, a time axis in ms and a legend.
std::string timelineSvg(const plan::Plan &plan);

/// Writes timelineSvg(plan) to `path`; `error` is "PATH: cannot write: ...".
bool writeTimelineSvg(const plan::Plan &plan, const std::string &path,
                      std::string &error);

/// What the HTML report shows that the plan file does not record.
struct HtmlOptions {
  /// $ per hour by device type (Device.type, e.g. "A100-SXM-80GB"), from the
  /// device catalog; a type not listed shows no price.
  std::map<std::string, double> pricePerHour;
};

/// One self-contained HTML page about `plan` (ExplainHtml.cpp): the
/// cluster (nodes, devices, links, prices), which layers and samples run
/// where, memory per device against capacity and the memory savers, the
/// timeline of one predicted step (timelineSvg), the baselines, and for a
/// serving plan its replicas, routing shares and latency percentiles. No
/// scripts, no external resources: inline CSS and SVG, and a
/// Content-Security-Policy that forbids loading anything. Text from the
/// plan is escaped.
std::string explainHtml(const plan::Plan &plan, const HtmlOptions &options = {});

/// Writes explainHtml(plan, options) to `path` atomically; `error` is
/// "PATH: cannot write: ..." and no file is left behind.
bool writeExplainHtml(const plan::Plan &plan, const std::string &path, std::string &error,
                      const HtmlOptions &options = {});

} // namespace hetplan::runtime

#endif
