//===- CompileMutator.cpp - semantic mutations of ONNX models -------------===//
//
// CompileMutator.h says what each mutation does and why.
//
//===----------------------------------------------------------------------===//
#include "CompileMutator.h"

#include "ops/OpTable.h"

#include <onnx/onnx_pb.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <set>

// libFuzzer's byte mutator; absent (null) in the replay build.
extern "C" size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t maxSize) __attribute__((weak));

namespace hetplan::fuzz {
namespace {

using Rng = std::mt19937;

size_t pick(Rng &rng, size_t n) { return n ? size_t(rng() % n) : 0; }

/// Op types to swap in: the op table's, and a few it has no rule for.
const std::vector<std::string> &opTypes() {
  static const std::vector<std::string> types = [] {
    std::vector<std::string> t;
    for (const ops::OpDef *d : ops::allOps())
      if (d->domain.empty() || d->domain == "ai.onnx")
        t.push_back(d->type);
    for (const char *extra : {"If", "Scan", "NonMaxSuppression", "RoiAlign", "Unique", "NoSuchOp"})
      t.push_back(extra);
    return t;
  }();
  return types;
}

/// Every value name of the graph: inputs, initializers, node outputs.
std::vector<std::string> valueNames(const onnx::GraphProto &g) {
  std::vector<std::string> names;
  for (const auto &i : g.input()) names.push_back(i.name());
  for (const auto &i : g.initializer()) names.push_back(i.name());
  for (const auto &n : g.node())
    for (const auto &o : n.output())
      if (!o.empty()) names.push_back(o);
  return names;
}

const int64_t kInts[] = {0, -1, 1, 2, 3, 7, -7, 1 << 20, int64_t(1) << 40,
                         std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()};
const float kFloats[] = {0.0f, -1.0f, 1e30f, -1e30f, std::numeric_limits<float>::infinity(),
                         std::numeric_limits<float>::quiet_NaN(), 1e-30f};
const char *const kAttrNames[] = {"axis", "axes", "perm", "keepdims", "group", "kernel_shape", "pads",
                                  "strides", "dilations", "to", "mode", "transA", "transB", "num_outputs",
                                  "epsilon", "alpha", "k", "split", "starts", "ends", "blocksize"};
// TensorProto data types: every valid one, and two that are not.
const int kDTypes[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 16, 17, 19, 21, 22, 99};

bool mutateAttribute(onnx::NodeProto &n, Rng &rng) {
  if (n.attribute_size() == 0 || rng() % 4 == 0) {
    // A stray attribute, or a second one of the same name.
    onnx::AttributeProto *a = n.add_attribute();
    a->set_name(kAttrNames[pick(rng, std::size(kAttrNames))]);
    if (rng() % 2) {
      a->set_type(onnx::AttributeProto::INT);
      a->set_i(kInts[pick(rng, std::size(kInts))]);
    } else {
      a->set_type(onnx::AttributeProto::INTS);
      for (size_t k = 0, m = pick(rng, 5); k < m; ++k)
        a->add_ints(kInts[pick(rng, std::size(kInts))]);
    }
    return true;
  }
  onnx::AttributeProto &a = *n.mutable_attribute(int(pick(rng, size_t(n.attribute_size()))));
  switch (a.type()) {
  case onnx::AttributeProto::INT:
    // A step of -2..2 from the value (wrapping, as the fuzzer may), or a
    // value from the list.
    a.set_i(rng() % 3 == 0 ? int64_t(uint64_t(a.i()) + uint64_t(pick(rng, 5)) - 2u)
                           : kInts[pick(rng, std::size(kInts))]);
    return true;
  case onnx::AttributeProto::FLOAT:
    a.set_f(kFloats[pick(rng, std::size(kFloats))]);
    return true;
  case onnx::AttributeProto::INTS:
    if (a.ints_size() == 0 || rng() % 4 == 0) {
      a.add_ints(kInts[pick(rng, std::size(kInts))]);
    } else if (rng() % 3 == 0) {
      a.clear_ints();
    } else if (rng() % 2) {
      a.mutable_ints()->RemoveLast();
    } else {
      a.set_ints(int(pick(rng, size_t(a.ints_size()))), kInts[pick(rng, std::size(kInts))]);
    }
    return true;
  case onnx::AttributeProto::FLOATS:
    if (a.floats_size())
      a.set_floats(int(pick(rng, size_t(a.floats_size()))), kFloats[pick(rng, std::size(kFloats))]);
    else
      a.add_floats(kFloats[pick(rng, std::size(kFloats))]);
    return true;
  case onnx::AttributeProto::STRING:
    a.set_s(rng() % 2 ? "" : "no-such-mode");
    return true;
  case onnx::AttributeProto::TENSOR:
    if (a.t().dims_size())
      a.mutable_t()->set_dims(int(pick(rng, size_t(a.t().dims_size()))), kInts[pick(rng, 5)]);
    else
      a.mutable_t()->set_data_type(kDTypes[pick(rng, std::size(kDTypes))]);
    return true;
  default:
    // A graph (If/Loop/Scan body) attribute: retype it.
    a.set_type(onnx::AttributeProto::INT);
    a.set_i(1);
    return true;
  }
}

/// One mutation on `g`; its name, or "" when it found nothing to change.
std::string mutateOnce(onnx::ModelProto &model, Rng &rng) {
  onnx::GraphProto &g = *model.mutable_graph();
  const int nodes = g.node_size();
  switch (rng() % 10) {
  case 0: { // op-type
    if (!nodes) return "";
    onnx::NodeProto &n = *g.mutable_node(int(pick(rng, size_t(nodes))));
    n.set_op_type(opTypes()[pick(rng, opTypes().size())]);
    n.clear_domain();
    return "op-type";
  }
  case 1: { // drop
    if (!nodes) return "";
    onnx::NodeProto &n = *g.mutable_node(int(pick(rng, size_t(nodes))));
    if (!n.input_size()) return "";
    int i = int(pick(rng, size_t(n.input_size())));
    if (rng() % 2) {
      n.mutable_input()->erase(n.mutable_input()->begin() + i);
    } else {
      n.set_input(i, "");
    }
    return "drop";
  }
  case 2: { // add
    if (!nodes) return "";
    auto names = valueNames(g);
    if (names.empty()) return "";
    g.mutable_node(int(pick(rng, size_t(nodes))))->add_input(names[pick(rng, names.size())]);
    return "add";
  }
  case 3: { // cycle: read an output of this node or a later one
    if (!nodes) return "";
    int i = int(pick(rng, size_t(nodes)));
    int j = i + int(pick(rng, size_t(nodes - i)));
    onnx::NodeProto &n = *g.mutable_node(i);
    const onnx::NodeProto &later = g.node(j);
    if (!n.input_size() || !later.output_size()) return "";
    n.set_input(int(pick(rng, size_t(n.input_size()))), later.output(int(pick(rng, size_t(later.output_size())))));
    return "cycle";
  }
  case 4: { // swap
    if (!nodes) return "";
    onnx::NodeProto &n = *g.mutable_node(int(pick(rng, size_t(nodes))));
    if (n.input_size() < 2) return "";
    int a = int(pick(rng, size_t(n.input_size()))), b = int(pick(rng, size_t(n.input_size())));
    std::string t = n.input(a);
    n.set_input(a, n.input(b));
    n.set_input(b, t);
    return "swap";
  }
  case 5:
  case 6: { // attr (twice as likely: most rules read attributes)
    if (!nodes) return "";
    return mutateAttribute(*g.mutable_node(int(pick(rng, size_t(nodes)))), rng) ? "attr" : "";
  }
  case 7: { // init-dims
    if (!g.initializer_size()) return "";
    onnx::TensorProto &t = *g.mutable_initializer(int(pick(rng, size_t(g.initializer_size()))));
    switch (rng() % 4) {
    case 0: t.add_dims(int64_t(pick(rng, 4))); break;
    case 1: if (t.dims_size()) t.mutable_dims()->RemoveLast(); else t.add_dims(0); break;
    default:
      if (!t.dims_size()) { t.add_dims(2); break; }
      int d = int(pick(rng, size_t(t.dims_size())));
      t.set_dims(d, rng() % 2 ? int64_t(uint64_t(t.dims(d)) * 2u + 1u) : kInts[pick(rng, 5)]);
    }
    return "init-dims";
  }
  case 8: { // input-dims
    if (!g.input_size()) return "";
    onnx::ValueInfoProto &v = *g.mutable_input(int(pick(rng, size_t(g.input_size()))));
    if (!v.type().has_tensor_type()) return "";
    onnx::TensorShapeProto *shape = v.mutable_type()->mutable_tensor_type()->mutable_shape();
    if (rng() % 8 == 0) {
      v.mutable_type()->mutable_tensor_type()->clear_shape();
      return "input-dims";
    }
    if (!shape->dim_size() || rng() % 6 == 0) {
      shape->add_dim()->set_dim_value(int64_t(pick(rng, 4)));
      return "input-dims";
    }
    onnx::TensorShapeProto::Dimension &d = *shape->mutable_dim(int(pick(rng, size_t(shape->dim_size()))));
    switch (rng() % 5) {
    case 0: d.set_dim_value(0); break;
    case 1: d.set_dim_value(-1); break;
    case 2: d.set_dim_value(int64_t(1) << 40); break;
    case 3: d.set_dim_param(rng() % 2 ? "?" : "fuzz_dim"); break;
    default: d.clear_value(); break;
    }
    return "input-dims";
  }
  default: { // dtype
    const int dt = kDTypes[pick(rng, std::size(kDTypes))];
    switch (rng() % 3) {
    case 0: {
      if (!g.input_size()) return "";
      onnx::ValueInfoProto &v = *g.mutable_input(int(pick(rng, size_t(g.input_size()))));
      if (!v.type().has_tensor_type()) return "";
      v.mutable_type()->mutable_tensor_type()->set_elem_type(dt);
      return "dtype";
    }
    case 1:
      if (!g.initializer_size()) return "";
      g.mutable_initializer(int(pick(rng, size_t(g.initializer_size()))))->set_data_type(dt);
      return "dtype";
    default:
      for (auto &n : *g.mutable_node())
        if (n.op_type() == "Cast")
          for (auto &a : *n.mutable_attribute())
            if (a.name() == "to") {
              a.set_i(dt);
              return "dtype";
            }
      return "";
    }
  }
  }
}

size_t byteMutation(uint8_t *data, size_t size, size_t maxSize) {
  return LLVMFuzzerMutate ? LLVMFuzzerMutate(data, size, maxSize) : size;
}

} // namespace

bool mutateModel(const std::string &bytes, unsigned seed, std::string &mutated, std::vector<std::string> &applied) {
  onnx::ModelProto model;
  if (!model.ParseFromString(bytes))
    return false;
  Rng rng(seed);
  const size_t count = 1 + pick(rng, 3);
  for (size_t tries = 0; applied.size() < count && tries < 16; ++tries) {
    std::string what = mutateOnce(model, rng);
    if (!what.empty())
      applied.push_back(std::move(what));
  }
  return model.SerializeToString(&mutated);
}

void inputBindings(const std::string &bytes, std::vector<std::string> &dims, std::vector<std::string> &shapes) {
  onnx::ModelProto model;
  if (!model.ParseFromString(bytes))
    return;
  std::set<std::string> initializers, onAxis0, named;
  for (const auto &t : model.graph().initializer())
    initializers.insert(t.name());
  // As hetplan reads dims: an empty or '?' name, or a negative size, is an
  // unknown of its own.
  auto unnamed = [](const onnx::TensorShapeProto::Dimension &d) {
    return d.has_dim_value() ? d.dim_value() < 0 : d.dim_param().empty() || d.dim_param() == "?";
  };
  for (const auto &in : model.graph().input()) {
    if (initializers.count(in.name()) || !in.type().tensor_type().has_shape())
      continue;
    const auto &shape = in.type().tensor_type().shape();
    bool anyUnnamed = false;
    for (int i = 0; i < shape.dim_size(); ++i) {
      const auto &d = shape.dim(i);
      anyUnnamed |= unnamed(d);
      if (!d.has_dim_value() && !unnamed(d))
        (i == 0 ? onAxis0 : named).insert(d.dim_param());
    }
    if (!anyUnnamed)
      continue;
    std::string s = in.name() + "=";
    for (int i = 0; i < shape.dim_size(); ++i) {
      const auto &d = shape.dim(i);
      int64_t v = d.has_dim_value() && d.dim_value() >= 0 ? d.dim_value() : (i == 0 ? 2 : 4);
      s += (i ? "x" : "") + std::to_string(v);
    }
    shapes.push_back(s);
  }
  // Names on axis 0 are --batch's; so is a batch axis elsewhere (an RNN's
  // [seq, batch, ...]), which hetplan finds by its name.
  for (const std::string &n : named) {
    std::string lower;
    for (char c : n) lower += char(std::tolower(static_cast<unsigned char>(c)));
    if (!onAxis0.count(n) && lower.find("batch") == std::string::npos)
      dims.push_back(n + "=4");
  }
}

size_t mutateModelBytes(uint8_t *data, size_t size, size_t maxSize, unsigned seed) {
  // One input in eight still gets byte mutations: they reach the parser's
  // and importer's edges that no semantic mutation makes.
  if (seed % 8 == 0)
    return byteMutation(data, size, maxSize);
  std::string mutated;
  std::vector<std::string> applied;
  if (!mutateModel(std::string(reinterpret_cast<const char *>(data), size), seed, mutated, applied) ||
      mutated.size() > maxSize)
    return byteMutation(data, size, maxSize);
  std::memcpy(data, mutated.data(), mutated.size());
  return mutated.size();
}

} // namespace hetplan::fuzz
