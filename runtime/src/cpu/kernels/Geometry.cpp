//===- Geometry.cpp - conv/pool windows (MatMul's shape: MatMul.cpp) ----===//
#include "Geometry.h"
#include "ops/OpTable.h"

#include <algorithm>
#include <stdexcept>

namespace hetplan::runtime::cpu {

void checkConvOperands(const char *op, const Tensor &x, const Tensor &w, int64_t group,
                       const std::vector<int64_t> &kernel, bool transpose, const Tensor *bias) {
  auto fail = [&](const std::string &why) { throw std::runtime_error(std::string(op) + ": " + why); };
  if (x.rank() < 3) fail("input " + x.describe() + " needs rank >= 3 (N, C, spatial...)");
  if (w.rank() != x.rank() || w.dtype() != x.dtype())
    fail("weight " + w.describe() + " does not have the rank and element type of input " + x.describe());
  if (group <= 0 || x.dim(1) % group) fail("group " + std::to_string(group) + " does not divide " + std::to_string(x.dim(1)) + " channels");
  int64_t M;
  if (transpose) {
    if (w.dim(0) != x.dim(1)) fail("weight " + w.describe() + " dim 0 must equal the " + std::to_string(x.dim(1)) + " input channels");
    M = checkedMul(w.dim(1), group, "the output channels");
  } else {
    if (w.dim(1) != x.dim(1) / group || w.dim(0) % group)
      fail("weight " + w.describe() + " does not match input " + x.describe() + " with group " + std::to_string(group));
    M = w.dim(0);
  }
  if (kernel.size() != size_t(x.rank() - 2)) fail("kernel_shape has " + std::to_string(kernel.size()) + " dims for " + x.describe());
  for (size_t i = 0; i < kernel.size(); ++i)
    if (kernel[i] != w.dim(int64_t(i) + 2)) fail("kernel_shape differs from the spatial dims of weight " + w.describe());
  if (bias && (bias->dtype() != x.dtype() || bias->numel() != M))
    fail("bias " + bias->describe() + " needs " + std::to_string(M) + " values (one per output channel)");
}

Window makeWindow(const Node &n, const std::vector<int64_t> &inSpatial, std::vector<int64_t> kernel, bool pool) {
  size_t r = inSpatial.size();
  Window w;
  w.in = inSpatial;
  w.kernel = std::move(kernel);
  w.stride = n.getInts("strides", std::vector<int64_t>(r, 1));
  w.dil = n.getInts("dilations", std::vector<int64_t>(r, 1));
  auto pads = n.getInts("pads", std::vector<int64_t>(2 * r, 0));
  if (w.kernel.size() != r || w.stride.size() != r || w.dil.size() != r || pads.size() != 2 * r)
    throw std::runtime_error("kernel_shape/strides/dilations/pads do not match the input rank");
  for (size_t i = 0; i < r; ++i) {
    if (w.kernel[i] <= 0 || w.stride[i] <= 0 || w.dil[i] <= 0)
      throw std::runtime_error("kernel_shape, strides and dilations must be positive");
    if (pads[i] < 0 || pads[i + r] < 0) throw std::runtime_error("pads must not be negative");
    if (w.in[i] < 0) throw std::runtime_error("negative spatial dim");
    // Every size below is computed from these: refuse what would overflow.
    checkedAdd(checkedMul(w.kernel[i] - 1, w.dil[i], "the dilated kernel size"),
               checkedAdd(checkedAdd(checkedAdd(w.in[i], pads[i], "the padded input"), pads[i + r], "the padded input"),
                          1, "the padded input"),
               "the padded window");
  }
  w.padBegin.assign(pads.begin(), pads.begin() + r);
  w.padEnd.assign(pads.begin() + r, pads.end());
  std::string autoPad = n.getString("auto_pad", "NOTSET");
  if (autoPad != "NOTSET" && autoPad != "SAME_UPPER" && autoPad != "SAME_LOWER" && autoPad != "VALID")
    throw std::runtime_error("auto_pad '" + autoPad + "' is not NOTSET, SAME_UPPER, SAME_LOWER or VALID");
  bool ceilMode = pool && n.getInt("ceil_mode", 0);
  w.out.resize(r);
  for (size_t i = 0; i < r; ++i) {
    // The sizes by the op table's formula (the compiler's too); an empty
    // window range makes an empty output.
    w.out[i] = std::max<int64_t>(0, ops::windowOutputSize(w.in[i], w.kernel[i], w.stride[i], w.dil[i], w.padBegin[i],
                                                          w.padEnd[i], autoPad, ceilMode));
    if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
      int64_t ek = (w.kernel[i] - 1) * w.dil[i] + 1;
      int64_t total = std::max<int64_t>(0, (w.out[i] - 1) * w.stride[i] + ek - w.in[i]);
      w.padBegin[i] = autoPad == "SAME_UPPER" ? total / 2 : total - total / 2;
      w.padEnd[i] = total - w.padBegin[i];
    } else if (autoPad == "VALID") {
      w.padBegin[i] = w.padEnd[i] = 0;
    }
  }
  return w;
}

} // namespace hetplan::runtime::cpu
