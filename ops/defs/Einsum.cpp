//===- Einsum.cpp - Einsum ------------------------------------------------===//
#include "ops/defs/Defs.h"

#include <algorithm>
#include <cctype>
#include <map>

namespace hetplan::ops::defs {
namespace {

using Dims = std::vector<int64_t>;

/// The equation without spaces; "" when the attribute is missing.
std::string equation(const Attrs &a) {
  std::string eq;
  for (char c : a.stringOr("equation", ""))
    if (c != ' ')
      eq += c;
  return eq;
}

/// The comma-separated operand terms left of "->".
std::vector<std::string> terms(const std::string &lhs) {
  std::vector<std::string> out(1);
  for (char c : lhs) {
    if (c == ',')
      out.emplace_back();
    else
      out.back() += c;
  }
  return out;
}

// The output's letters: explicit after "->", else the letters seen once, in
// alphabetical order, after any broadcast "..." dims.
bool einsumShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  std::string eq = equation(in.attrs);
  if (eq.empty())
    return (why = "Einsum needs an equation", false);
  std::string lhs = eq, rhs;
  bool explicitOut = false;
  if (size_t arrow = eq.find("->"); arrow != std::string::npos) {
    lhs = eq.substr(0, arrow);
    rhs = eq.substr(arrow + 2);
    explicitOut = true;
  }
  std::vector<std::string> ts = terms(lhs);
  if (ts.size() != in.inputs.size())
    return (why = "the equation names " + std::to_string(ts.size()) + " operands but " +
                  std::to_string(in.inputs.size()) + " are given",
            false);
  std::map<char, int64_t> sizes;
  std::map<char, int> seen;
  Dims ellipsis;
  bool anyEllipsis = false;
  for (size_t k = 0; k < ts.size(); ++k) {
    const std::string &term = ts[k];
    if (!in.inputs[k].ranked)
      return true;
    const Dims &shape = in.inputs[k].dims;
    size_t dots = term.find("...");
    size_t letters = term.size() - (dots == std::string::npos ? 0 : 3);
    if (dots == std::string::npos ? letters != shape.size() : letters > shape.size())
      return (why = "operand #" + std::to_string(k) + " has rank " + std::to_string(shape.size()) +
                    " but the equation term '" + term + "' names " + std::to_string(letters) + " dims",
              false);
    size_t ellRank = shape.size() - letters;
    size_t d = 0;
    for (size_t i = 0; i < term.size();) {
      if (dots != std::string::npos && i == dots) {
        auto b = broadcast(ellipsis, Dims(shape.begin() + long(d), shape.begin() + long(d + ellRank)));
        if (!b)
          return (why = "the '...' dims do not broadcast", false);
        ellipsis = *b;
        anyEllipsis = true;
        d += ellRank;
        i += 3;
        continue;
      }
      char c = term[i++];
      int64_t size = shape[d++];
      ++seen[c];
      auto [it, inserted] = sizes.insert({c, size});
      if (!inserted) {
        if (isUnknown(it->second) || it->second == 1)
          it->second = size;
        else if (!isUnknown(size) && size != 1 && size != it->second)
          return (why = std::string("dim '") + c + "' is " + std::to_string(it->second) + " in one operand and " +
                        std::to_string(size) + " in another",
                  false);
      }
    }
  }
  Dims result;
  if (explicitOut) {
    for (size_t i = 0; i < rhs.size();) {
      if (rhs.compare(i, 3, "...") == 0) {
        result.insert(result.end(), ellipsis.begin(), ellipsis.end());
        i += 3;
        continue;
      }
      char c = rhs[i++];
      auto it = sizes.find(c);
      if (it == sizes.end())
        return (why = std::string("output dim '") + c + "' is in no operand", false);
      result.push_back(it->second);
    }
  } else {
    if (anyEllipsis)
      result.insert(result.end(), ellipsis.begin(), ellipsis.end());
    for (auto &[c, count] : seen)
      if (count == 1)
        result.push_back(sizes[c]);
  }
  out[0] = like(result);
  return true;
}

// Every combination of the letters' sizes (and the broadcast '...' dims) is
// one multiply-add per extra operand; a matrix product when some letter is
// contracted (missing from the output, or shared by operands when implicit).
Cost einsumCost(const CostIn &in) {
  Cost r;
  if (!in.attrs.getString("equation")) {
    r.estimated = true;
    r.flops = in.totalOutputElems();
    return r;
  }
  std::string eq = equation(in.attrs);
  size_t arrow = eq.find("->");
  bool hasRhs = arrow != std::string::npos;
  std::string lhs = hasRhs ? eq.substr(0, arrow) : eq, rhs = hasRhs ? eq.substr(arrow + 2) : "";
  std::vector<std::string> ts = terms(lhs);
  if (ts.size() != in.inputs.size()) {
    r.estimated = true;
    r.flops = in.totalOutputElems();
    return r;
  }
  std::map<char, int64_t> sizes;
  std::map<char, int> operandsUsing;
  Dims ellipsis; // right-aligned broadcast of the '...' dims
  for (size_t k = 0; k < ts.size(); ++k) {
    const std::string &term = ts[k];
    const auto &shape = in.inputs[k];
    if (!shape) {
      r.estimated = true;
      return r;
    }
    size_t letters = 0;
    for (char c : term)
      letters += std::isalpha(static_cast<unsigned char>(c)) ? 1 : 0;
    size_t dots = term.find("...") != std::string::npos ? shape->size() - letters : 0;
    size_t dim = 0;
    for (size_t i = 0; i < term.size(); ++i) {
      if (term.compare(i, 3, "...") == 0) {
        Dims e(shape->begin() + long(dim), shape->begin() + long(dim + dots));
        if (e.size() > ellipsis.size())
          ellipsis.insert(ellipsis.begin(), e.size() - ellipsis.size(), 1);
        for (size_t j = 0; j < e.size(); ++j) {
          int64_t &slot = ellipsis[ellipsis.size() - e.size() + j];
          slot = std::max(slot, e[j]);
        }
        dim += dots;
        i += 2;
        continue;
      }
      if (dim < shape->size()) {
        int64_t &s = sizes[term[i]]; // 0 when new
        s = std::max(s, (*shape)[dim]);
        ++operandsUsing[term[i]];
      }
      ++dim;
    }
  }
  double all = 1;
  for (int64_t d : ellipsis)
    all *= double(d);
  for (auto &entry : sizes)
    all *= double(entry.second);
  size_t operands = ts.size();
  bool contracted = false;
  if (hasRhs) {
    for (auto &entry : sizes)
      contracted |= rhs.find(entry.first) == std::string::npos;
  } else {
    for (auto &entry : operandsUsing)
      contracted |= entry.second > 1;
  }
  r.engine = operands >= 2 && contracted ? Engine::Matrix : Engine::Vector;
  r.flops = operands >= 2 ? 2 * all * double(operands - 1) : all;
  return r;
}

} // namespace

void addEinsumOps(std::vector<OpDef> &out) {
  OpDef d;
  d.type = "Einsum";
  d.sinceVersion = 12;
  d.minInputs = 1;
  d.summary = "Einstein summation over the operands' lettered dims";
  d.shape = einsumShape;
  d.cost = einsumCost;
  d.keeps = Keeps::Inputs;
  d.weightProduct = true;
  out.push_back(d);
}

} // namespace hetplan::ops::defs
