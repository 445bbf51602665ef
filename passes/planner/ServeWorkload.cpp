//===- ServeWorkload.cpp - the requests a serving plan is sized for -------===//

#include "passes/planner/ServeWorkload.h"

#include "hetplan/runtime/JsonDepth.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace hetplan::planner::serve {

using llvm::formatv;

namespace {

llvm::Error error(const std::string &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// `v` as people write it: 0.5, 50, 1e-05.
std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

/// `text` fit for a one-line message: control and non-ASCII bytes as
/// \xNN, at most 40 characters (what a user typed, or a fuzzer).
std::string printable(llvm::StringRef text) {
  std::string out;
  for (char c : text.take_front(40)) {
    if (c >= 0x20 && c < 0x7f) {
      out += c;
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", unsigned(static_cast<unsigned char>(c)));
      out += buf;
    }
  }
  return text.size() > 40 ? out + "..." : out;
}

/// The first field of `o` not in `allowed`, as "unknown field 'x' (expected
/// a, b)"; empty when every field is known.
std::string unknownField(const llvm::json::Object &o, llvm::ArrayRef<llvm::StringRef> allowed) {
  for (const auto &kv : o)
    if (!llvm::is_contained(allowed, llvm::StringRef(kv.first)))
      return "unknown field '" + printable(kv.first) + "' (expected " + llvm::join(allowed, ", ") +
             ")";
  return "";
}

/// A token count 1..2^20 from `text`, or none.
std::optional<int64_t> tokens(llvm::StringRef text) {
  int64_t v = 0;
  if (text.trim().getAsInteger(10, v) || v < 1 || v > kMaxRequestTokens)
    return std::nullopt;
  return v;
}

} // namespace

int64_t LengthDistribution::at(double u) const {
  if (points.empty())
    return 1;
  u = std::clamp(u, 0.0, 1.0) * 100;
  double t = points.front().second;
  if (u >= points.back().first) {
    t = points.back().second;
  } else {
    for (size_t i = 0; i + 1 < points.size(); ++i) {
      auto [p0, t0] = points[i];
      auto [p1, t1] = points[i + 1];
      if (u >= p0 && u < p1) {
        t = t0 + (t1 - t0) * (u - p0) / (p1 - p0);
        break;
      }
    }
  }
  return std::max<int64_t>(1, int64_t(std::llround(t)));
}

double LengthDistribution::mean() const {
  if (points.empty())
    return 1;
  double m = points.front().second * points.front().first / 100;
  for (size_t i = 0; i + 1 < points.size(); ++i)
    m += (points[i + 1].first - points[i].first) / 100 * (points[i].second + points[i + 1].second) / 2;
  m += points.back().second * (100 - points.back().first) / 100;
  return m;
}

std::string LengthDistribution::text() const {
  if (points.size() == 1)
    return std::to_string(int64_t(points[0].second));
  std::string s;
  for (auto [p, t] : points)
    s += (s.empty() ? "" : ", ") + formatv("p{0} {1}", num(p), int64_t(t)).str();
  return s + formatv(" (mean {0:F0})", mean()).str();
}

llvm::Expected<LengthDistribution> parseLength(llvm::StringRef text, llvm::StringRef flag) {
  LengthDistribution d;
  text = text.trim();
  if (auto v = tokens(text)) {
    d.points.push_back({0, double(*v)});
    return d;
  }
  if (!text.contains('='))
    return error(formatv("{0} '{1}': give a token count 1..{2}, or percentiles like "
                         "p50=500,p90=1500,p99=3000",
                         flag, printable(text), kMaxRequestTokens).str());
  llvm::SmallVector<llvm::StringRef> items;
  text.split(items, ',');
  for (llvm::StringRef item : items) {
    auto [key, value] = item.trim().split('=');
    key = key.trim();
    double p = -1;
    if (key == "min")
      p = 0;
    else if (key == "max")
      p = 100;
    else if (key.consume_front("p") && !key.getAsDouble(p) && std::isfinite(p) && p >= 0 && p <= 100)
      ;
    else
      p = -1;
    if (p < 0)
      return error(formatv("{0}: '{1}' is not a percentile (p0..p100, min or max)", flag,
                           printable(item.trim())).str());
    auto v = tokens(value);
    if (!v)
      return error(formatv("{0}: '{1}' needs a token count 1..{2}", flag, printable(item.trim()),
                           kMaxRequestTokens).str());
    if (!d.points.empty() && p <= d.points.back().first)
      return error(formatv("{0}: percentiles must increase ('{1}' after p{2})", flag, printable(item.trim()),
                           num(d.points.back().first)).str());
    if (!d.points.empty() && double(*v) < d.points.back().second)
      return error(formatv("{0}: '{1}' is fewer tokens than p{2}'s {3}", flag, printable(item.trim()),
                           num(d.points.back().first), int64_t(d.points.back().second)).str());
    d.points.push_back({p, double(*v)});
  }
  return d;
}

llvm::Expected<std::vector<TraceRequest>> parseTrace(llvm::StringRef text, llvm::StringRef name,
                                                     size_t maxRequests) {
  std::vector<TraceRequest> out;
  llvm::SmallVector<llvm::StringRef> lines;
  text.split(lines, '\n');
  bool json = text.ltrim().starts_with("{");
  int column[3] = {-1, -1, -1};  // arrival_s, prompt_tokens, output_tokens
  static const char *names[3] = {"arrival_s", "prompt_tokens", "output_tokens"};
  bool header = !json;
  for (size_t n = 0; n < lines.size(); ++n) {
    llvm::StringRef line = lines[n].trim();
    std::string where = formatv("{0}:{1}", name, n + 1).str();
    if (line.empty())
      continue;
    TraceRequest r;
    if (json) {
      // A request nests one level; refuse deep nesting before the
      // recursive parser sees it.
      if (runtime::jsonNestsDeeperThan(std::string_view(line.data(), line.size()), 16))
        return error(where + ": nested more than 16 levels deep");
      auto value = llvm::json::parse(line);
      if (!value)
        return error(where + ": not JSON: " + llvm::toString(value.takeError()));
      const llvm::json::Object *o = value->getAsObject();
      if (!o)
        return error(where + ": not a JSON object");
      auto arrival = o->getNumber("arrival_s");
      if (!arrival)
        return error(where + ": 'arrival_s' (seconds, a number) is missing");
      r.arrival = *arrival;
      for (int k : {1, 2}) {
        auto v = o->getInteger(names[k]);
        if (!v || *v < 1 || *v > kMaxRequestTokens)
          return error(formatv("{0}: '{1}' needs a token count 1..{2}", where, names[k],
                               kMaxRequestTokens).str());
        (k == 1 ? r.promptTokens : r.outputTokens) = *v;
      }
    } else {
      llvm::SmallVector<llvm::StringRef> cells;
      line.split(cells, ',');
      if (header) {
        for (size_t c = 0; c < cells.size(); ++c)
          for (int k = 0; k < 3; ++k)
            if (cells[c].trim().trim('"') == names[k])
              column[k] = int(c);
        for (int k = 0; k < 3; ++k)
          if (column[k] < 0)
            return error(formatv("{0}: the CSV header has no column '{1}' (it needs arrival_s, "
                                 "prompt_tokens and output_tokens; or give JSON lines)",
                                 where, names[k]).str());
        header = false;
        continue;
      }
      for (int k = 0; k < 3; ++k)
        if (size_t(column[k]) >= cells.size())
          return error(formatv("{0}: {1} column(s), '{2}' is column {3}", where, cells.size(),
                               names[k], column[k] + 1).str());
      if (cells[size_t(column[0])].trim().getAsDouble(r.arrival))
        return error(formatv("{0}: arrival_s '{1}' is not a number", where,
                             printable(cells[size_t(column[0])].trim())).str());
      for (int k : {1, 2}) {
        auto v = tokens(cells[size_t(column[k])]);
        if (!v)
          return error(formatv("{0}: {1} '{2}' needs a token count 1..{3}", where, names[k],
                               printable(cells[size_t(column[k])].trim()), kMaxRequestTokens).str());
        (k == 1 ? r.promptTokens : r.outputTokens) = *v;
      }
    }
    if (!std::isfinite(r.arrival) || r.arrival < 0 || r.arrival > 1e9)
      return error(formatv("{0}: arrival_s {1} must be seconds from 0 to 1e9", where, num(r.arrival)).str());
    if (!out.empty() && r.arrival < out.back().arrival)
      return error(formatv("{0}: arrival_s {1} is before the previous request's {2} (sort the "
                           "trace by arrival)",
                           where, num(r.arrival), num(out.back().arrival)).str());
    if (out.size() >= maxRequests)
      return error(formatv("{0}: more than {1} requests", where, maxRequests).str());
    out.push_back(r);
  }
  if (out.empty())
    return error(formatv("{0}: no requests{1}", name, header ? " (not even a CSV header)" : "").str());
  return out;
}

llvm::Expected<std::vector<ServeLayoutReplica>> parseServeLayout(llvm::StringRef text,
                                                                 llvm::StringRef name) {
  auto fail = [&](const std::string &m) { return error(name.str() + ": " + m); };
  if (runtime::jsonNestsDeeperThan(std::string_view(text.data(), text.size()), 16))
    return fail("nested more than 16 levels deep");
  auto value = llvm::json::parse(text);
  if (!value)
    return fail("not JSON: " + llvm::toString(value.takeError()));
  const llvm::json::Object *root = value->getAsObject();
  const llvm::json::Array *replicas = root ? root->getArray("replicas") : nullptr;
  if (!replicas || replicas->empty())
    return fail("expected {\"replicas\": [...]}, a non-empty list of replicas");
  std::vector<ServeLayoutReplica> out;
  for (size_t i = 0; i < replicas->size(); ++i) {
    std::string at = formatv("replica {0}", i).str();
    const llvm::json::Object *r = (*replicas)[i].getAsObject();
    if (!r)
      return fail(at + " is not an object");
    if (std::string bad = unknownField(*r, {"tensor_parallel", "stages"}); !bad.empty())
      return fail(at + ": " + bad);
    ServeLayoutReplica rep;
    if (const llvm::json::Value *tp = r->get("tensor_parallel")) {
      auto v = tp->getAsInteger();
      if (!v || *v < 1 || *v > 64)
        return fail(at + ": tensor_parallel must be an integer from 1 to 64");
      rep.tensorParallel = int(*v);
    }
    const llvm::json::Array *stages = r->getArray("stages");
    if (!stages || stages->empty())
      return fail(at + ": \"stages\" must be a non-empty list");
    if (stages->size() > 4096)
      return fail(at + formatv(": {0} stages (at most 4096)", stages->size()).str());
    for (size_t k = 0; k < stages->size(); ++k) {
      std::string where = at + formatv(", stage {0}", k).str();
      const llvm::json::Object *st = (*stages)[k].getAsObject();
      if (!st)
        return fail(where + " is not an object");
      if (std::string bad = unknownField(*st, {"ranks", "last_layer"}); !bad.empty())
        return fail(where + ": " + bad);
      const llvm::json::Array *ranks = st->getArray("ranks");
      auto last = st->getInteger("last_layer");
      if (!ranks || ranks->size() != size_t(rep.tensorParallel))
        return fail(where + formatv(": \"ranks\" must list tensor_parallel = {0} rank(s)",
                                    rep.tensorParallel).str());
      if (!last || *last < 0 || *last > (1 << 20))
        return fail(where + ": \"last_layer\" must be a layer index");
      ServeLayoutStage s;
      for (const llvm::json::Value &v : *ranks) {
        auto rank = v.getAsInteger();
        if (!rank || *rank < 0 || *rank > (1 << 24))
          return fail(where + ": ranks must be device ranks (integers from 0)");
        s.ranks.push_back(int(*rank));
      }
      s.lastLayer = int(*last);
      if (!rep.stages.empty() && s.lastLayer <= rep.stages.back().lastLayer)
        return fail(where + formatv(": last_layer {0} does not follow the previous stage's {1}",
                                    s.lastLayer, rep.stages.back().lastLayer).str());
      rep.stages.push_back(std::move(s));
    }
    out.push_back(std::move(rep));
  }
  return out;
}

std::string Workload::arrivalsText() const {
  switch (arrivals) {
  case Arrivals::Poisson:
    return "Poisson";
  case Arrivals::Gamma:
    return formatv("gamma (CV {0:F2})", burstiness).str();
  case Arrivals::Trace:
    return formatv("trace {0} ({1} requests)", traceName, trace.size()).str();
  }
  return "?";
}

double Workload::traceRate() const {
  if (trace.size() < 2)
    return 0;
  double span = trace.back().arrival - trace.front().arrival;
  return span > 0 ? double(trace.size() - 1) / span : 0;
}

} // namespace hetplan::planner::serve
