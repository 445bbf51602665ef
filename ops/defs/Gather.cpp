//===- Gather.cpp - Gather, GatherElements, GatherND, Scatter* ------------===//
#include "ops/defs/Defs.h"

namespace hetplan::ops {

namespace defs {
namespace {

// data[..., indices, ...] along `axis`: data's dims before the axis, the
// indices' dims, data's dims after it. Gathers from a known 1-D integer
// tensor (shape vectors) fold.
bool gatherShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  std::vector<int64_t> data, indices;
  if (!requireShape(in, 0, data, why) || !requireShape(in, 1, indices, why))
    return why.empty();
  int64_t axis = normAxis(in.attrs.intOr("axis", 0), int64_t(data.size()));
  if (axis < 0 || axis >= int64_t(data.size()))
    return (why = "axis out of range", false);
  std::vector<int64_t> result(data.begin(), data.begin() + axis);
  result.insert(result.end(), indices.begin(), indices.end());
  result.insert(result.end(), data.begin() + axis + 1, data.end());
  out[0] = like(result);
  const auto &values = in.inputs[0].ints, &at = in.inputs[1].ints;
  if (values && at && data.size() == 1) {
    std::vector<int64_t> picked;
    for (int64_t i : *at) {
      if (i < 0)
        i += data[0];
      if (i < 0 || i >= int64_t(values->size()))
        return (why = "index out of range", false);
      picked.push_back((*values)[size_t(i)]);
    }
    out[0].ints = picked;
  }
  return true;
}

// The output takes the indices' shape.
bool gatherElementsShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  std::vector<int64_t> data, indices;
  if (!requireShape(in, 0, data, why) || !requireShape(in, 1, indices, why))
    return why.empty();
  out[0] = like(indices);
  return true;
}

// indices.shape[:-1] + data.shape[batch_dims + indices.shape[-1]:]
bool gatherNDShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  std::vector<int64_t> data, indices;
  if (!requireShape(in, 0, data, why) || !requireShape(in, 1, indices, why))
    return why.empty();
  int64_t b = in.attrs.intOr("batch_dims", 0);
  if (indices.empty())
    return (why = "indices must have rank >= 1", false);
  int64_t last = indices.back();
  if (isUnknown(last))
    return true; // how many dims an index addresses: unknown, so is the rank
  if (b < 0 || b + last > int64_t(data.size()))
    return (why = "indices address " + std::to_string(b + last) + " dims (batch_dims included) of data of rank " +
                  std::to_string(data.size()),
            false);
  std::vector<int64_t> result(indices.begin(), indices.end() - 1);
  result.insert(result.end(), data.begin() + b + last, data.end());
  out[0] = like(result);
  return true;
}

// Scatter, ScatterElements, ScatterND: the output is the data, updated.
bool scatterShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  std::vector<int64_t> data;
  if (!requireShape(in, 0, data, why))
    return why.empty();
  out[0] = like(data);
  return true;
}
// No FLOPs; the bytes are the data, the updates and the output.
Cost scatterCost(const CostIn &) { return Cost{}; }

// Moves only the rows it outputs (bytes: output, not all of input 0).
Cost gatherCost(const CostIn &) {
  Cost r;
  r.readsOutput = true;
  return r;
}


} // namespace

void addGatherOps(std::vector<OpDef> &out) {
  OpDef g;
  g.type = "Gather";
  g.minInputs = g.maxInputs = 2;
  g.summary = "takes the slices of `data` at `indices` along `axis`";
  g.shape = gatherShape;
  g.cost = gatherCost;
  g.check = axisZeroCheck;
  // The backward scatters dY by the (integer) indices: no float activation.
  g.keeps = Keeps::Nothing;
  g.rowLookup = true;
  out.push_back(g);
  OpDef e = g;
  e.rowLookup = false;
  e.type = "GatherElements";
  e.summary = "takes the elements of `data` at `indices` along `axis`";
  e.shape = gatherElementsShape;
  out.push_back(e);
  OpDef nd = g;
  nd.type = "GatherND";
  nd.summary = "takes the slices of `data` that index tuples address";
  nd.shape = gatherNDShape;
  nd.check = nullptr;
  nd.rowLookup = false; // index tuples: not priced as row lookups yet
  out.push_back(nd);
  for (const char *type : {"Scatter", "ScatterElements", "ScatterND"}) {
    OpDef sc;
    sc.type = type;
    sc.minInputs = sc.maxInputs = 3;
    sc.summary = "`data` with `updates` written at `indices`";
    sc.shape = scatterShape;
    sc.cost = scatterCost;
    sc.keeps = Keeps::Inputs;
    if (sc.type == "ScatterElements")
      sc.check = axisZeroCheck;
    out.push_back(sc);
  }
}

} // namespace defs
} // namespace hetplan::ops
