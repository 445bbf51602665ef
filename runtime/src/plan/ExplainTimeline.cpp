//===- ExplainTimeline.cpp - an SVG picture of one predicted step ---------===//
//
// Rows are ranks (or stages, when many ranks work). Each row has a compute
// lane (forward, backward, optimizer; micro-batch numbers inside) and a thin
// communication lane under it (sends, receives, all-reduce), so overlapping
// transfers do not hide compute. Instruction boxes are the only <rect>
// elements; backgrounds and legend swatches are paths.
//
//===----------------------------------------------------------------------===//

#include "hetplan/runtime/Explain.h"
#include "hetplan/runtime/Files.h"
#include "Markup.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

#include <cerrno>
#include <cstring>

namespace hetplan::runtime {
namespace {

using Kind = plan::Instruction::Kind;

std::string num(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.2f", v);
  std::string s = buffer;
  while (s.size() > 1 && s.back() == '0')
    s.pop_back();
  if (s.back() == '.')
    s.pop_back();
  return s == "-0" ? "0" : s;
}

std::string escape(const std::string &text) { return escapeMarkup(text); }

struct Style {
  const char *name;   // legend text
  const char *fill;
  const char *text;   // colour of the micro-batch number
  bool comm;          // drawn in the communication lane
};

Style styleOf(Kind kind) {
  switch (kind) {
  case plan::Instruction::FORWARD: return {"forward", "#4e79a7", "#ffffff", false};
  case plan::Instruction::BACKWARD: return {"backward", "#f28e2b", "#ffffff", false};
  case plan::Instruction::OPTIMIZER_STEP: return {"optimizer", "#b07aa1", "#ffffff", false};
  case plan::Instruction::ALLREDUCE_GRADIENTS: return {"all-reduce", "#e15759", "#ffffff", true};
  case plan::Instruction::SEND_ACTIVATION:
  case plan::Instruction::RECV_ACTIVATION:
  case plan::Instruction::SEND_GRADIENT:
  case plan::Instruction::RECV_GRADIENT: return {"send / recv", "#59a14f", "#ffffff", true};
  default: return {"other", "#9d9d9d", "#000000", false};
  }
}

bool perMicroBatch(Kind kind) {
  return kind != plan::Instruction::ALLREDUCE_GRADIENTS &&
         kind != plan::Instruction::OPTIMIZER_STEP &&
         kind != plan::Instruction::KIND_UNSPECIFIED;
}

struct Row {
  int rank;
  std::string label, sublabel;
};

/// Rows to draw: every working rank by stage when at most 16 work, else one
/// per stage showing the rank that finishes last.
std::vector<Row> rowsOf(const plan::Plan &p, int &idle) {
  const int numRanks = p.ranks_size();
  std::vector<int> stageOf(size_t(numRanks), -1);
  for (int s = 0; s < p.stages_size(); ++s)
    for (const auto &worker : p.stages(s).workers())
      for (uint32_t r : worker.ranks())
        if (r < uint32_t(numRanks) && stageOf[r] < 0)
          stageOf[r] = s;
  auto type = [&](int r) {
    return r < p.cluster().devices_size() ? p.cluster().devices(r).type() : std::string();
  };
  std::vector<int> working;
  for (int r = 0; r < numRanks; ++r)
    if (stageOf[size_t(r)] >= 0)
      working.push_back(r);
  idle = numRanks - int(working.size());
  std::stable_sort(working.begin(), working.end(),
                   [&](int a, int b) { return stageOf[size_t(a)] < stageOf[size_t(b)]; });
  std::vector<Row> rows;
  if (working.size() <= 16) {
    for (int r : working)
      rows.push_back({r, "rank " + std::to_string(r) + " · stage " +
                             std::to_string(stageOf[size_t(r)]),
                      type(r)});
    return rows;
  }
  auto lastEnd = [&](int r) {
    double end = 0;
    for (const auto &ins : p.ranks(r).program())
      end = std::max(end, ins.predicted_end_s());
    return end;
  };
  for (int s = 0; s < p.stages_size(); ++s) {
    int best = -1, count = 0;
    for (int r : working)
      if (stageOf[size_t(r)] == s) {
        ++count;
        if (best < 0 || lastEnd(r) > lastEnd(best))
          best = r;
      }
    if (best >= 0)
      rows.push_back({best, "stage " + std::to_string(s),
                      "rank " + std::to_string(best) + " " + type(best) + ", slowest of " +
                          std::to_string(count)});
  }
  return rows;
}

/// The picture's layout (px) and its time scale.
struct Geometry {
  double end = 0; // seconds the plot spans
  double left = 0, right = 36, plotWidth = 1000, width = 0;
  double top = 70, computeH = 26, commGap = 3, commH = 9, rowGap = 12;
  double pitch = 0, rowsBottom = 0, axisY = 0, legendY = 0, height = 0;

  double x(double seconds) const { return left + seconds / end * plotWidth; }
};

/// Time range: the predicted step, or the last instruction if later.
/// `timed` says whether any instruction has a predicted time.
double timelineEnd(const plan::Plan &p, const std::vector<Row> &rows, bool &timed) {
  double end = std::max(0.0, p.prediction().step_time_s());
  timed = false;
  for (const auto &row : rows)
    for (const auto &ins : p.ranks(row.rank).program()) {
      if (std::isfinite(ins.predicted_end_s()))
        end = std::max(end, ins.predicted_end_s());
      timed = timed || ins.predicted_end_s() > 0;
    }
  if (!(end > 0))
    end = 1e-3;
  return end;
}

Geometry geometryOf(const std::vector<Row> &rows, double end) {
  Geometry g;
  g.end = end;
  // The label column fits the longest label (about 0.62 em a character in
  // DejaVu Sans, wider than its average): labels stay inside the picture.
  double labelWidth = 0;
  for (const auto &row : rows)
    labelWidth = std::max({labelWidth, 13 * 0.62 * double(row.label.size()),
                           10 * 0.62 * double(row.sublabel.size())});
  g.left = std::max(200.0, std::ceil(labelWidth) + 24);
  g.width = g.left + g.plotWidth + g.right;
  g.pitch = g.computeH + g.commGap + g.commH + g.rowGap;
  g.rowsBottom = g.top + g.pitch * double(rows.size()) - g.rowGap;
  g.axisY = g.rowsBottom + 8;
  g.legendY = g.axisY + 50;
  g.height = g.legendY + 30;
  return g;
}

/// A tick step of 1, 2 or 5 times a power of ten, about 10 ticks, and the
/// decimals its labels need.
struct Ticks {
  double step = 0;
  int decimals = 0;
};

Ticks ticksOf(double endMs) {
  double raw = endMs / 10, mag = std::pow(10.0, std::floor(std::log10(raw)));
  double norm = raw / mag;
  double step = (norm <= 1 ? 1 : norm <= 2 ? 2 : norm <= 5 ? 5 : 10) * mag;
  int decimals = step >= 1 ? 0 : int(std::ceil(-std::log10(step) - 1e-9));
  return {step, decimals};
}

void writeTitle(std::ostringstream &o, const plan::Plan &p, int idle, bool timed) {
  const auto &s = p.settings();
  std::string title = "hetplan plan";
  if (!p.model().graph().empty())
    title += ": " + p.model().graph();
  else if (!p.model().path().empty())
    title += ": " + p.model().path();
  title += " · one " + (s.mode().empty() ? std::string("step") : s.mode() + " step");
  std::string subtitle = std::to_string(p.stages_size()) + " stages · " +
                         std::to_string(p.ranks_size() - idle) + " ranks";
  if (idle > 0)
    subtitle += " (+" + std::to_string(idle) + " idle)";
  if (!s.schedule().empty())
    subtitle += " · " + s.schedule();
  subtitle += " · " + std::to_string(s.micro_batches()) + " micro-batches of " +
              (s.micro_batches() ? std::to_string(s.global_batch() / s.micro_batches()) : "?");
  if (p.prediction().step_time_s() > 0) {
    char buffer[64];
    std::snprintf(buffer, sizeof(buffer), " · predicted step %.2f ms", p.prediction().step_time_s() * 1e3);
    subtitle += buffer;
  }
  if (!timed)
    subtitle += " · no predicted times in this plan";
  o << "<text x=\"16\" y=\"28\" font-size=\"17\" font-weight=\"bold\" fill=\"#222222\">"
    << escape(title) << "</text>\n";
  o << "<text x=\"16\" y=\"50\" font-size=\"12\" fill=\"#555555\">" << escape(subtitle)
    << "</text>\n";
}

/// Row backgrounds, labels, grid.
void writeRows(std::ostringstream &o, const std::vector<Row> &rows, const Geometry &g,
               double step, double endMs) {
  o << "<g id=\"rows\">\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    double y = g.top + g.pitch * double(i);
    if (i % 2 == 0)
      o << "<path d=\"M10 " << num(y - g.rowGap / 2) << " H" << num(g.width - 8)
        << " V" << num(y + g.pitch - g.rowGap / 2) << " H10 Z\" fill=\"#f3f4f6\"/>\n";
    o << "<text x=\"" << num(g.left - 10) << "\" y=\"" << num(y + 17)
      << "\" font-size=\"13\" text-anchor=\"end\" fill=\"#222222\">" << escape(rows[i].label)
      << "</text>\n";
    if (!rows[i].sublabel.empty())
      o << "<text x=\"" << num(g.left - 10) << "\" y=\""
        << num(y + g.computeH + g.commGap + g.commH)
        << "\" font-size=\"10\" text-anchor=\"end\" fill=\"#666666\">"
        << escape(rows[i].sublabel) << "</text>\n";
  }
  o << "</g>\n<g id=\"grid\" stroke=\"#d0d4da\" stroke-width=\"1\">\n";
  for (int k = 0; k * step <= endMs * (1 + 1e-9); ++k) {
    double px = g.x(k * step / 1e3);
    o << "<line x1=\"" << num(px) << "\" y1=\"" << num(g.top - 6) << "\" x2=\"" << num(px)
      << "\" y2=\"" << num(g.axisY) << "\"/>\n";
  }
  o << "</g>\n";
}

/// One instruction's box (compute or communication lane of the row at `y`),
/// its tooltip, and its micro-batch number where it fits.
void writeInstruction(std::ostringstream &o, const plan::Instruction &ins, int rank, int k,
                      double y, const Geometry &g) {
  const Style st = styleOf(ins.kind());
  double t0 = std::isfinite(ins.predicted_start_s()) ? std::max(0.0, ins.predicted_start_s()) : 0;
  double t1 = std::isfinite(ins.predicted_end_s()) ? std::max(t0, ins.predicted_end_s()) : t0;
  double bx = g.x(t0), bw = std::max(g.x(t1) - bx, 1.0);
  double by = st.comm ? y + g.computeH + g.commGap : y;
  double bh = st.comm ? g.commH : g.computeH;
  const std::string &kindName = plan::Instruction::Kind_IsValid(ins.kind())
                                    ? plan::Instruction::Kind_Name(ins.kind())
                                    : std::string("UNKNOWN");
  char times[96];
  std::snprintf(times, sizeof(times), "%.3f-%.3f ms", t0 * 1e3, t1 * 1e3);
  std::string tip = "rank " + std::to_string(rank) + " #" + std::to_string(k) + " " + kindName;
  if (perMicroBatch(ins.kind()))
    tip += " micro-batch " + std::to_string(ins.micro_batch());
  if (ins.peers_size() > 0) {
    tip += " peers";
    for (uint32_t peer : ins.peers())
      tip += " " + std::to_string(peer);
  }
  tip += std::string(": ") + times;
  o << "<rect x=\"" << num(bx) << "\" y=\"" << num(by) << "\" width=\"" << num(bw)
    << "\" height=\"" << num(bh) << "\" fill=\"" << st.fill << "\"><title>" << escape(tip)
    << "</title></rect>\n";
  if (!st.comm && perMicroBatch(ins.kind())) {
    std::string label = std::to_string(ins.micro_batch());
    if (bw >= 7.0 * double(label.size()) + 3)
      o << "<text x=\"" << num(bx + bw / 2) << "\" y=\"" << num(by + g.computeH / 2 + 4)
        << "\" font-size=\"11\" text-anchor=\"middle\" stroke=\"none\" fill=\"" << st.text
        << "\">" << label << "</text>\n";
  }
}

void writeInstructions(std::ostringstream &o, const plan::Plan &p, const std::vector<Row> &rows,
                       const Geometry &g) {
  o << "<g id=\"instructions\" stroke=\"#ffffff\" stroke-width=\"0.5\">\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const double y = g.top + g.pitch * double(i);
    const auto &program = p.ranks(rows[i].rank).program();
    for (int k = 0; k < program.size(); ++k)
      writeInstruction(o, program[k], rows[i].rank, k, y, g);
  }
  o << "</g>\n";
}

/// The predicted step's end (a dashed line) and the time axis.
void writeAxis(std::ostringstream &o, const plan::Plan &p, const Geometry &g, const Ticks &t,
               double endMs) {
  if (p.prediction().step_time_s() > 0) {
    double px = g.x(p.prediction().step_time_s());
    o << "<line x1=\"" << num(px) << "\" y1=\"" << num(g.top - 10) << "\" x2=\"" << num(px)
      << "\" y2=\"" << num(g.axisY) << "\" stroke=\"#222222\" stroke-width=\"1.5\" "
      << "stroke-dasharray=\"5 3\"/>\n"
      << "<text x=\"" << num(px) << "\" y=\"" << num(g.top - 13)
      << "\" font-size=\"11\" text-anchor=\"end\" fill=\"#222222\">step end</text>\n";
  }

  o << "<g id=\"axis\" font-size=\"11\" fill=\"#333333\">\n";
  o << "<line x1=\"" << num(g.left) << "\" y1=\"" << num(g.axisY) << "\" x2=\""
    << num(g.left + g.plotWidth) << "\" y2=\"" << num(g.axisY)
    << "\" stroke=\"#333333\" stroke-width=\"1\"/>\n";
  for (int k = 0; k * t.step <= endMs * (1 + 1e-9); ++k) {
    double px = g.x(k * t.step / 1e3);
    char label[32];
    std::snprintf(label, sizeof(label), "%.*f", t.decimals, k * t.step);
    o << "<line x1=\"" << num(px) << "\" y1=\"" << num(g.axisY) << "\" x2=\"" << num(px)
      << "\" y2=\"" << num(g.axisY + 5) << "\" stroke=\"#333333\"/>\n"
      << "<text x=\"" << num(px) << "\" y=\"" << num(g.axisY + 18)
      << "\" text-anchor=\"middle\">" << label << "</text>\n";
  }
  o << "<text x=\"" << num(g.left + g.plotWidth / 2) << "\" y=\"" << num(g.axisY + 36)
    << "\" text-anchor=\"middle\" font-size=\"12\">time (ms)</text>\n</g>\n";
}

void writeLegend(std::ostringstream &o, const Geometry &g) {
  o << "<g id=\"legend\" font-size=\"12\" fill=\"#333333\">\n";
  const Kind legend[] = {plan::Instruction::FORWARD, plan::Instruction::BACKWARD,
                         plan::Instruction::SEND_ACTIVATION,
                         plan::Instruction::ALLREDUCE_GRADIENTS,
                         plan::Instruction::OPTIMIZER_STEP};
  double lx = g.left;
  for (Kind kind : legend) {
    Style st = styleOf(kind);
    double h = st.comm ? g.commH : 14;
    double sy = g.legendY - 11 + (14 - h) / 2;
    o << "<path d=\"M" << num(lx) << " " << num(sy) << " h18 v" << num(h) << " h-18 Z\" fill=\""
      << st.fill << "\"/>\n"
      << "<text x=\"" << num(lx + 24) << "\" y=\"" << num(g.legendY) << "\">" << st.name
      << (st.comm ? " (lower lane)" : "") << "</text>\n";
    lx += 24 + 6.6 * double(std::strlen(st.name) + (st.comm ? 13 : 0)) + 26;
  }
  o << "<text x=\"" << num(lx + 10) << "\" y=\"" << num(g.legendY)
    << "\" fill=\"#666666\">numbers: micro-batch</text>\n";
  o << "</g>\n";
}

} // namespace

std::string timelineSvg(const plan::Plan &p) {
  int idle = 0;
  const std::vector<Row> rows = rowsOf(p, idle);
  bool timed = false;
  const double end = timelineEnd(p, rows, timed);
  const double endMs = end * 1e3;
  const Geometry g = geometryOf(rows, end);
  const Ticks ticks = ticksOf(endMs);

  std::ostringstream o;
  const char *font = "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\"";
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(g.width) << "\" height=\""
    << num(g.height) << "\" viewBox=\"0 0 " << num(g.width) << " " << num(g.height) << "\" "
    << font << ">\n";
  o << "<path d=\"M0 0 H" << num(g.width) << " V" << num(g.height)
    << " H0 Z\" fill=\"#ffffff\"/>\n";
  writeTitle(o, p, idle, timed);
  writeRows(o, rows, g, ticks.step, endMs);
  writeInstructions(o, p, rows, g);
  writeAxis(o, p, g, ticks, endMs);
  writeLegend(o, g);
  o << "</svg>\n";
  return o.str();
}

bool writeTimelineSvg(const plan::Plan &plan, const std::string &path, std::string &error) {
  return writeFileAtomically(path, timelineSvg(plan), error);
}

} // namespace hetplan::runtime
