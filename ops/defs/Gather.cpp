//===- Gather.cpp - Gather, GatherElements --------------------------------===//
#include "ops/defs/Defs.h"

namespace hetplan::ops {
namespace names {
const char *const Gather = "Gather";
} // namespace names

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

// Moves only the rows it outputs (bytes: output, not all of input 0).
Cost gatherCost(const CostIn &) {
  Cost r;
  r.readsOutput = true;
  return r;
}

std::string gatherCheck(const CheckIn &in, const std::string &) { return axisAttr(in, "axis", 0, in.rank(0)); }

} // namespace

void addGatherOps(std::vector<OpDef> &out) {
  OpDef g;
  g.type = names::Gather;
  g.minInputs = g.maxInputs = 2;
  g.summary = "takes the slices of `data` at `indices` along `axis`";
  g.shape = gatherShape;
  g.cost = gatherCost;
  g.check = gatherCheck;
  // The backward scatters dY by the (integer) indices: no float activation.
  g.keeps = Keeps::Nothing;
  out.push_back(g);
  OpDef e = g;
  e.type = "GatherElements";
  e.summary = "takes the elements of `data` at `indices` along `axis`";
  e.shape = gatherElementsShape;
  out.push_back(e);
}

} // namespace defs
} // namespace hetplan::ops
