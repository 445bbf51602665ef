//===- ViewParams.h - Transpose's and Slice's arguments ---------*- C++ -*-===//
//
// Shared by the CPU kernels, their backward (train/TensorOpsGrad.cpp) and the
// CUDA executor's device ops: one reading of Transpose's perm and of Slice's
// starts/ends/axes/steps.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "KernelUtil.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <vector>

namespace hetplan::runtime::cpu {

/// Transpose's `perm` for a rank-`rank` input (default: the dims reversed);
/// throws unless it is a permutation of 0..rank-1 (the verifier checks this
/// at load when the rank is declared; here it is the rank met at run time).
inline std::vector<int64_t> transposePerm(const Node &n, int64_t rank) {
  std::vector<int64_t> perm(rank);
  std::iota(perm.rbegin(), perm.rend(), 0);
  perm = n.getInts("perm", perm);
  std::vector<char> seen(static_cast<size_t>(rank), 0);
  bool ok = static_cast<int64_t>(perm.size()) == rank;
  for (int64_t p : perm) {
    if (!ok || p < 0 || p >= rank || seen[static_cast<size_t>(p)]) { ok = false; break; }
    seen[static_cast<size_t>(p)] = 1;
  }
  if (!ok) {
    std::string s;
    for (int64_t p : perm) s += (s.empty() ? "" : ",") + std::to_string(p);
    throw std::runtime_error("perm [" + s + "] is not a permutation of the " + std::to_string(rank) +
                             " dims of the input");
  }
  return perm;
}

/// Slice's arguments, with absent axes defaulting to 0, 1, ... and absent
/// steps to 1 (one per start).
struct SliceArgs {
  std::vector<int64_t> starts, ends, axes, steps;
};

/// Reads Slice's arguments: attributes before opset 10, inputs 1 to 4 from
/// then on. `has(i)`: whether input i is given; `in(i)`: its (host) tensor.
template <typename Has, typename In>
SliceArgs sliceArgs(const Node &n, int64_t opset, Has &&has, In &&in) {
  SliceArgs a;
  if (opset < 10) {
    a.starts = n.getInts("starts"); a.ends = n.getInts("ends"); a.axes = n.getInts("axes");
  } else {
    a.starts = in(1).toInt64Vector(); a.ends = in(2).toInt64Vector();
    if (has(3)) a.axes = in(3).toInt64Vector();
    if (has(4)) a.steps = in(4).toInt64Vector();
  }
  if (a.axes.empty()) { a.axes.resize(a.starts.size()); std::iota(a.axes.begin(), a.axes.end(), 0); }
  if (a.steps.empty()) a.steps.assign(a.starts.size(), 1);
  return a;
}

/// What Slice selects of a dense tensor of shape `xShape`: the view's shape,
/// its element strides, and the offset of its first element (starts and ends
/// clamped as ONNX says, negative steps walking backwards).
struct SliceView {
  std::vector<int64_t> shape, strides;
  int64_t base = 0;
};

inline SliceView sliceView(const std::vector<int64_t> &xShape, const SliceArgs &a) {
  int64_t r = static_cast<int64_t>(xShape.size());
  std::vector<int64_t> st(xShape.size(), 1);
  for (size_t i = xShape.size(); i-- > 1;) st[i - 1] = st[i] * xShape[i];
  SliceView v{xShape, st, 0};
  if (a.starts.size() != a.axes.size() || a.ends.size() != a.axes.size() || a.steps.size() != a.axes.size())
    throw std::runtime_error("Slice has " + std::to_string(a.starts.size()) + " starts, " +
                             std::to_string(a.ends.size()) + " ends, " + std::to_string(a.axes.size()) + " axes and " +
                             std::to_string(a.steps.size()) + " steps: they must be as many");
  for (size_t i = 0; i < a.axes.size(); ++i) {
    int64_t ax = normAxis(a.axes[i], r), d = xShape[ax], step = a.steps[i];
    if (step == 0) throw std::runtime_error("Slice step 0");
    int64_t s = a.starts[i], e = a.ends[i], len;
    // |step| as unsigned: a step of INT64_MIN or near INT64_MAX must not overflow.
    uint64_t mag = step > 0 ? uint64_t(step) : uint64_t(0) - uint64_t(step);
    if (s < 0) s = s < -d ? -1 - d : s + d;  // far below: still below after the shift
    if (e < 0) e = e < -d ? -1 - d : e + d;
    if (step > 0) {
      s = std::clamp<int64_t>(s, 0, d); e = std::clamp<int64_t>(e, 0, d);
      len = e > s ? int64_t((uint64_t(e - s) - 1) / mag + 1) : 0;
    } else {
      s = std::clamp<int64_t>(s, 0, d - 1); e = std::clamp<int64_t>(e, -1, d - 1);
      len = s > e ? int64_t((uint64_t(s - e) - 1) / mag + 1) : 0;
    }
    v.shape[ax] = len; v.strides[ax] = st[ax] * step; v.base += s * st[ax];
  }
  return v;
}

} // namespace hetplan::runtime::cpu
