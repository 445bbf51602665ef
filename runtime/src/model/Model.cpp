//===- Model.cpp - reads an ONNX model without MLIR -----------------------===//
#include "hetplan/runtime/Model.h"
#include "hetplan/runtime/Npy.h"
#include "hetplan/runtime/Files.h"

#include "onnx/onnx_pb.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <fcntl.h>
#include <stdexcept>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace hetplan::runtime {
namespace {

[[noreturn]] void fail(const std::string &msg) { throw std::runtime_error(msg); }

/// A read-only memory map of a whole file; the shared_ptr unmaps it.
std::shared_ptr<const void> mapFile(const std::string &path, size_t &size) {
  // Regular files only (a FIFO would block open, a device read forever).
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) fail(path + ": not a regular file");
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK);
  if (fd < 0) fail(path + ": cannot open: " + std::strerror(errno));
  if (::fstat(fd, &st) != 0) { ::close(fd); fail(path + ": cannot stat"); }
  if (!S_ISREG(st.st_mode)) { ::close(fd); fail(path + ": not a regular file"); }
  size = static_cast<size_t>(st.st_size);
  if (size == 0) { ::close(fd); return std::shared_ptr<const void>(new char[1], std::default_delete<char[]>()); }
  void *p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) fail(path + ": cannot map: " + std::strerror(errno));
  size_t len = size;
  return std::shared_ptr<const void>(p, [len](const void *q) { ::munmap(const_cast<void *>(q), len); });
}

std::string dirOf(const std::string &path) {
  auto pos = path.find_last_of('/');
  return pos == std::string::npos ? std::string(".") : path.substr(0, pos);
}

struct Storage {
  std::shared_ptr<onnx::ModelProto> proto;
  std::map<std::string, std::shared_ptr<const void>> maps;
  std::map<std::string, size_t> mapSizes;
};

template <typename Src, typename Dst>
void copyTyped(const Src &src, Tensor &t) {
  Dst *d = t.data<Dst>();
  for (int64_t i = 0; i < t.numel(); ++i) d[i] = static_cast<Dst>(src.Get(i));
}

/// TensorProto -> Tensor. `holder` keeps `tp` alive when its raw_data is viewed.
Tensor convertTensor(const onnx::TensorProto &tp, const std::string &where,
                     const std::shared_ptr<const void> &holder, const std::string &baseDir,
                     Storage *storage) {
  DType dt = static_cast<DType>(tp.data_type());
  std::vector<int64_t> shape(tp.dims().begin(), tp.dims().end());
  for (int64_t d : shape) if (d < 0) fail(where + ": negative dimension");
  if (dt == DType::String || dtypeSize(dt) == 0)
    fail(where + ": element type " + std::to_string(tp.data_type()) + " (" + dtypeName(dt) + ") is not supported");
  int64_t n = 0;
  size_t bytes = 0;
  try {
    n = checkedNumel(shape);
    bytes = checkedBytes(n, dtypeSize(dt), "shape " + shapeString(shape));
  } catch (const std::exception &e) { fail(where + ": " + e.what()); }
  if (tp.data_location() == onnx::TensorProto::EXTERNAL) {
    std::string location; int64_t offset = 0, length = -1;
    for (const auto &e : tp.external_data()) {
      if (e.key() == "location") location = e.value();
      else if (e.key() == "offset" || e.key() == "length") {
        const std::string &v = e.value();
        char *end = nullptr;
        errno = 0;
        long long x = v.empty() ? -1 : std::strtoll(v.c_str(), &end, 10);
        if (v.empty() || errno || *end || x < 0)
          fail(where + ": external data " + e.key() + " '" + v + "' is not a size in bytes");
        (e.key() == "offset" ? offset : length) = x;
      }
    }
    if (location.empty()) fail(where + ": external data without a location");
    // ONNX's rule: relative, inside the model's folder.
    bool up = location[0] == '/';
    for (size_t b = 0; !up && b <= location.size();) {
      size_t e = location.find('/', b);
      if (e == std::string::npos) e = location.size();
      up = location.compare(b, e - b, "..") == 0;
      b = e + 1;
    }
    if (up)
      fail(where + ": external data at '" + location +
           "' is outside the model's folder (locations must be relative and must not contain '..')");
    std::string file = baseDir + "/" + location;
    std::shared_ptr<const void> map; size_t size = 0;
    if (storage && storage->maps.count(file)) { map = storage->maps[file]; size = storage->mapSizes[file]; }
    else {
      try { map = mapFile(file, size); } catch (const std::exception &e) { fail(where + ": " + e.what()); }
      if (storage) { storage->maps[file] = map; storage->mapSizes[file] = size; }
    }
    if (length < 0) length = static_cast<int64_t>(size) - offset;
    if (offset < 0 || static_cast<size_t>(offset) > size || bytes > size - static_cast<size_t>(offset) ||
        static_cast<size_t>(length) < bytes)
      fail(where + ": external data " + file + " is too short (offset " + std::to_string(offset) +
           ", needs " + std::to_string(bytes) + " bytes, file has " + std::to_string(size) + ")");
    return Tensor::view(dt, shape, static_cast<const char *>(map.get()) + offset, map);
  }
  if (tp.has_raw_data()) {
    const std::string &raw = tp.raw_data();
    if (raw.size() != bytes)
      fail(where + ": raw_data has " + std::to_string(raw.size()) + " bytes, " + dtypeName(dt) +
           shapeString(shape) + " needs " + std::to_string(bytes));
    if (holder && bytes >= 4096 && reinterpret_cast<uintptr_t>(raw.data()) % 16 == 0)
      return Tensor::view(dt, shape, raw.data(), holder); // no second copy of large weights
    Tensor t(dt, shape);
    if (bytes) std::memcpy(t.raw(), raw.data(), bytes);
    return t;
  }
  // The value count of the typed field must match before anything is
  // allocated: a shape of 2^40 with no values must not cost 4 TB.
  int have = 0;
  switch (dt) {
  case DType::Float32: have = tp.float_data_size(); break;
  case DType::Float64: have = tp.double_data_size(); break;
  case DType::Int64: have = tp.int64_data_size(); break;
  case DType::UInt32: case DType::UInt64: have = tp.uint64_data_size(); break;
  default: have = tp.int32_data_size(); break;
  }
  if (have != n) fail(where + ": has " + std::to_string(have) + " values, shape " + shapeString(shape) + " needs " + std::to_string(n));
  Tensor t(dt, shape);
  switch (dt) {
  case DType::Float32: copyTyped<decltype(tp.float_data()), float>(tp.float_data(), t); break;
  case DType::Float64: copyTyped<decltype(tp.double_data()), double>(tp.double_data(), t); break;
  case DType::Int64: copyTyped<decltype(tp.int64_data()), int64_t>(tp.int64_data(), t); break;
  case DType::UInt32: case DType::UInt64:
    if (dt == DType::UInt32) copyTyped<decltype(tp.uint64_data()), uint32_t>(tp.uint64_data(), t);
    else copyTyped<decltype(tp.uint64_data()), uint64_t>(tp.uint64_data(), t);
    break;
  case DType::Int32: copyTyped<decltype(tp.int32_data()), int32_t>(tp.int32_data(), t); break;
  case DType::Int16: copyTyped<decltype(tp.int32_data()), int16_t>(tp.int32_data(), t); break;
  case DType::UInt16: case DType::Float16: case DType::BFloat16:
    copyTyped<decltype(tp.int32_data()), uint16_t>(tp.int32_data(), t); break;
  case DType::Int8: copyTyped<decltype(tp.int32_data()), int8_t>(tp.int32_data(), t); break;
  case DType::UInt8: case DType::Bool:
    copyTyped<decltype(tp.int32_data()), uint8_t>(tp.int32_data(), t); break;
  default: fail(where + std::string(": element type ") + dtypeName(dt) + " is not supported");
  }
  return t;
}

ValueInfo convertValueInfo(const onnx::ValueInfoProto &vi) {
  ValueInfo v;
  v.name = vi.name();
  v.isTensor = !vi.has_type() || vi.type().has_tensor_type();
  if (vi.type().has_tensor_type()) {
    const auto &tt = vi.type().tensor_type();
    v.dtype = static_cast<DType>(tt.elem_type());
    if (tt.has_shape()) {
      v.hasShape = true;
      for (const auto &d : tt.shape().dim()) v.shape.push_back(d.has_dim_value() ? d.dim_value() : -1);
    }
  }
  return v;
}

/// The value of a Constant node (value, value_float(s), value_int(s)).
Tensor constantValue(const onnx::NodeProto &np, const std::string &where,
                     const std::shared_ptr<const void> &holder, const std::string &baseDir, Storage *storage) {
  if (np.attribute_size() != 1) fail(where + ": needs exactly one value attribute");
  const auto &a = np.attribute(0);
  const std::string &k = a.name();
  if (k == "value") {
    if (a.type() != onnx::AttributeProto::TENSOR) fail(where + ": 'value' is not a tensor");
    return convertTensor(a.t(), where + " value", holder, baseDir, storage);
  }
  if (k == "value_float") { Tensor t(DType::Float32, {}); *t.data<float>() = a.f(); return t; }
  if (k == "value_int") { Tensor t(DType::Int64, {}); *t.data<int64_t>() = a.i(); return t; }
  if (k == "value_floats") {
    Tensor t(DType::Float32, {int64_t(a.floats_size())});
    std::copy(a.floats().begin(), a.floats().end(), t.data<float>());
    return t;
  }
  if (k == "value_ints") {
    Tensor t(DType::Int64, {int64_t(a.ints_size())});
    std::copy(a.ints().begin(), a.ints().end(), t.data<int64_t>());
    return t;
  }
  fail(where + ": value attribute '" + k + "' is not supported (string and sparse constants)");
}


/// What converting tensors, nodes and subgraphs needs.
struct LoadContext {
  const std::string &path, &base;
  const std::shared_ptr<const void> &holder;
  Storage *storage;
};

std::shared_ptr<const Graph> convertGraph(const onnx::GraphProto &gp, const LoadContext &lc,
                                          const std::string &where);

/// NodeProto -> Node; GRAPH/GRAPHS attributes are parsed into Graphs and
/// the values they read from enclosing scopes become implicitInputs.
/// `scope` prefixes error messages for nodes inside subgraphs.
Node convertNode(const onnx::NodeProto &np, int index, const LoadContext &lc, const std::string &scope) {
  Node n;
  n.name = np.name().empty() ? np.op_type() + "_" + std::to_string(index) : np.name();
  n.opType = np.op_type();
  n.domain = np.domain() == "ai.onnx" ? "" : np.domain();
  n.inputs.assign(np.input().begin(), np.input().end());
  n.outputs.assign(np.output().begin(), np.output().end());
  for (const auto &ap : np.attribute()) {
    Attribute a;
    std::string where = lc.path + ": " + scope + n.describe() + " attribute '" + ap.name() + "'";
    switch (ap.type()) {
    case onnx::AttributeProto::FLOAT: a.kind = Attribute::Float; a.f = ap.f(); break;
    case onnx::AttributeProto::INT: a.kind = Attribute::Int; a.i = ap.i(); break;
    case onnx::AttributeProto::STRING: a.kind = Attribute::String; a.s = ap.s(); break;
    case onnx::AttributeProto::TENSOR:
      a.kind = Attribute::TensorKind;
      a.t = convertTensor(ap.t(), where, lc.holder, lc.base, lc.storage);
      break;
    case onnx::AttributeProto::GRAPH:
      a.kind = Attribute::Graph;
      a.g = convertGraph(ap.g(), lc, scope + n.describe() + " '" + ap.name() + "' > ");
      break;
    case onnx::AttributeProto::GRAPHS:
      a.kind = Attribute::Graphs;
      for (int k = 0; k < ap.graphs_size(); ++k)
        a.graphs.push_back(convertGraph(ap.graphs(k), lc,
                                        scope + n.describe() + " '" + ap.name() + "'[" + std::to_string(k) + "] > "));
      break;
    case onnx::AttributeProto::FLOATS: a.kind = Attribute::Floats; a.floats.assign(ap.floats().begin(), ap.floats().end()); break;
    case onnx::AttributeProto::INTS: a.kind = Attribute::Ints; a.ints.assign(ap.ints().begin(), ap.ints().end()); break;
    case onnx::AttributeProto::STRINGS: a.kind = Attribute::Strings; a.strings.assign(ap.strings().begin(), ap.strings().end()); break;
    case onnx::AttributeProto::TENSORS: a.kind = Attribute::Tensors; break;
    default:
      if (!ap.ref_attr_name().empty()) fail(where + ": attribute references are not supported");
      a.kind = Attribute::Other;
      break;
    }
    n.attrs[ap.name()] = std::move(a);
  }
  // Outer-scope reads of the subgraphs: what each reads (its nodes' inputs
  // and implicit inputs, its outputs) that it neither declares nor produces.
  std::set<std::string> outer;
  for (const auto &[an, a] : n.attrs) {
    std::vector<const Graph *> gs;
    if (a.g) gs.push_back(a.g.get());
    for (const auto &g : a.graphs) gs.push_back(g.get());
    for (const Graph *g : gs) {
      std::set<std::string> local;
      for (const auto &v : g->inputs) local.insert(v.name);
      for (const auto &[name, t] : g->initializers) local.insert(name);
      for (const auto &sn : g->nodes)
        for (const auto &o : sn.outputs) if (!o.empty()) local.insert(o);
      for (const auto &sn : g->nodes)
        sn.forEachRead([&](const std::string &v) { if (!local.count(v)) outer.insert(v); });
      for (const auto &v : g->outputs)
        if (!v.name.empty() && !local.count(v.name)) outer.insert(v.name);
    }
  }
  n.implicitInputs.assign(outer.begin(), outer.end());
  return n;
}

/// GraphProto -> Graph (recursively); its nodes sorted topologically by the
/// values produced inside it (anything else comes from outer scopes).
std::shared_ptr<const Graph> convertGraph(const onnx::GraphProto &gp, const LoadContext &lc,
                                          const std::string &where) {
  auto g = std::make_shared<Graph>();
  g->name = gp.name();
  for (const auto &init : gp.initializer()) {
    std::string w = lc.path + ": " + where + "initializer '" + init.name() + "'";
    g->initializers[init.name()] = convertTensor(init, w, lc.holder, lc.base, lc.storage);
  }
  if (gp.sparse_initializer_size())
    fail(lc.path + ": " + where + "sparse initializers are not supported");
  for (const auto &vi : gp.input()) {
    ValueInfo v = convertValueInfo(vi);
    g->valueTypes[v.name] = v.dtype;
    g->inputs.push_back(v);
  }
  for (const auto &vi : gp.output()) {
    ValueInfo v = convertValueInfo(vi);
    g->valueTypes[v.name] = v.dtype;
    g->outputs.push_back(v);
  }
  for (const auto &vi : gp.value_info()) g->valueTypes[vi.name()] = convertValueInfo(vi).dtype;
  for (const auto &[name, t] : g->initializers) g->valueTypes[name] = t.dtype();
  std::vector<Node> nodes;
  int index = 0;
  for (const auto &np : gp.node()) nodes.push_back(convertNode(np, index++, lc, where));
  // Topological order over the values produced inside the graph.
  std::map<std::string, size_t> producer;
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const auto &o : nodes[i].outputs) if (!o.empty()) producer[o] = i;
  std::set<std::string> ready;
  for (const auto &v : g->inputs) ready.insert(v.name);
  for (const auto &[name, t] : g->initializers) ready.insert(name);
  std::vector<bool> done(nodes.size(), false);
  size_t remaining = nodes.size();
  while (remaining) {
    bool progress = false;
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (done[i]) continue;
      bool ok = true;
      nodes[i].forEachRead([&](const std::string &v) {
        if (producer.count(v) && !ready.count(v)) ok = false;
      });
      if (!ok) continue;
      done[i] = true; --remaining; progress = true;
      for (const auto &o : nodes[i].outputs) if (!o.empty()) ready.insert(o);
      g->nodes.push_back(std::move(nodes[i]));
    }
    if (!progress) fail(lc.path + ": " + where + "the subgraph has a cycle");
  }
  return g;
}
} // namespace

int64_t Node::getInt(const std::string &a, int64_t def) const {
  auto it = attrs.find(a);
  return it == attrs.end() ? def : it->second.i;
}
float Node::getFloat(const std::string &a, float def) const {
  auto it = attrs.find(a);
  return it == attrs.end() ? def : it->second.f;
}
std::string Node::getString(const std::string &a, const std::string &def) const {
  auto it = attrs.find(a);
  return it == attrs.end() ? def : it->second.s;
}
std::vector<int64_t> Node::getInts(const std::string &a, std::vector<int64_t> def) const {
  auto it = attrs.find(a);
  return it == attrs.end() ? def : it->second.ints;
}
std::vector<float> Node::getFloats(const std::string &a, std::vector<float> def) const {
  auto it = attrs.find(a);
  return it == attrs.end() ? def : it->second.floats;
}
std::string Node::describe() const { return "node '" + name + "' (" + opType + ")"; }

int64_t Model::opset(const std::string &domain) const {
  auto it = opsets.find(domain);
  if (it == opsets.end() && domain == "ai.onnx") it = opsets.find("");
  return it == opsets.end() ? 0 : it->second;
}

Model loadModel(const std::string &path, const std::function<void(const std::string &)> &checkSha256) {
  size_t size = 0;
  auto map = mapFile(path, size);
  if (checkSha256) checkSha256(sha256Hex(map.get(), size));
  return parseModel(map.get(), size, path);
}

Model parseModel(const void *data, size_t size, const std::string &path) {
  auto proto = std::make_shared<onnx::ModelProto>();
  if (size > static_cast<size_t>(INT32_MAX) || !proto->ParseFromArray(data, static_cast<int>(size)))
    fail(path + ": not a readable ONNX model (protobuf parse failed)");
  auto storage = std::make_shared<Storage>();
  storage->proto = proto;
  std::shared_ptr<const void> holder(storage, storage.get());
  std::string base = dirOf(path);

  Model m;
  m.path = path;
  m.storage = holder;
  for (const auto &os : proto->opset_import()) m.opsets[os.domain() == "ai.onnx" ? "" : os.domain()] = os.version();
  if (!proto->has_graph()) fail(path + ": the model has no graph");
  const auto &g = proto->graph();
  for (const auto &init : g.initializer()) {
    std::string where = path + ": initializer '" + init.name() + "'";
    m.initializers[init.name()] = convertTensor(init, where, holder, base, storage.get());
  }
  for (const auto &sp : g.sparse_initializer())
    fail(path + ": sparse initializer '" + sp.values().name() + "' is not supported");
  for (const auto &vi : g.input()) {
    ValueInfo v = convertValueInfo(vi);
    m.valueTypes[v.name] = v.dtype;
    if (!m.initializers.count(v.name)) m.inputs.push_back(v);
  }
  for (const auto &vi : g.output()) {
    ValueInfo v = convertValueInfo(vi);
    m.valueTypes[v.name] = v.dtype;
    m.outputs.push_back(v);
  }
  for (const auto &vi : g.value_info()) m.valueTypes[vi.name()] = convertValueInfo(vi).dtype;
  for (const auto &[name, t] : m.initializers) m.valueTypes[name] = t.dtype();
  int index = 0;
  LoadContext lc{path, base, holder, storage.get()};
  for (const auto &np : g.node()) {
    // One rule with the compiler (the importer makes top-level Constant
    // nodes het.constant values, not nodes): a Constant is a value of the
    // model like an initializer, so node indices in plans agree.
    if (np.op_type() == "Constant" && (np.domain().empty() || np.domain() == "ai.onnx")) {
      ++index;
      std::string where = path + ": node '" + np.name() + "' (Constant)";
      if (np.output_size() != 1 || np.output(0).empty()) fail(where + ": needs exactly one output");
      const std::string &out = np.output(0);
      if (m.initializers.count(out)) fail(where + ": its output '" + out + "' is already defined");
      m.initializers[out] = constantValue(np, where, holder, base, storage.get());
      m.constants.insert(out);
      m.valueTypes[out] = m.initializers[out].dtype();
      continue;
    }
    m.nodes.push_back(convertNode(np, index++, lc, ""));
  }
  return m;
}

Tensor loadTensorFile(const std::string &path, std::string *name) {
  size_t size = 0;
  auto map = mapFile(path, size);
  onnx::TensorProto tp;
  if (size > static_cast<size_t>(INT32_MAX) || !tp.ParseFromArray(map.get(), static_cast<int>(size)))
    fail(path + ": not a readable TensorProto");
  if (name) *name = tp.name();
  return convertTensor(tp, path + ": tensor '" + tp.name() + "'", nullptr, dirOf(path), nullptr);
}

} // namespace hetplan::runtime

namespace hetplan::runtime {
void saveModel(const Model &model, const std::map<std::string, Tensor> &replace, const std::string &path) {
  const auto *storage = static_cast<const Storage *>(model.storage.get());
  if (!storage || !storage->proto) fail(path + ": the model was not read from a file");
  onnx::ModelProto proto = *storage->proto;
  size_t total = 0;
  auto *g = proto.mutable_graph();
  for (auto &init : *g->mutable_initializer()) {
    auto it = replace.find(init.name());
    const Tensor *t = it != replace.end() ? &it->second : nullptr;
    if (!t) {
      auto jt = model.initializers.find(init.name());
      if (jt == model.initializers.end()) fail(path + ": initializer '" + init.name() + "' is unknown");
      t = &jt->second;
    }
    std::vector<int64_t> dims(init.dims().begin(), init.dims().end());
    if (t->shape() != dims || int32_t(t->dtype()) != init.data_type())
      fail(path + ": initializer '" + init.name() + "' would change from its shape or type to " + t->describe());
    // Every weight inline (raw_data): the file stands alone.
    init.clear_float_data(); init.clear_int32_data(); init.clear_int64_data();
    init.clear_double_data(); init.clear_uint64_data(); init.clear_string_data();
    init.clear_external_data();
    init.set_data_location(onnx::TensorProto::DEFAULT);
    init.set_raw_data(t->raw(), t->nbytes());
    total += t->nbytes();
  }
  for (const auto &[name, t] : replace) {
    bool found = false;
    for (const auto &init : g->initializer()) found |= init.name() == name;
    if (!found) fail(path + ": the model has no initializer '" + name + "'");
  }
  if (total > (size_t(1) << 31) - (size_t(64) << 20))
    fail(path + ": " + std::to_string(total >> 20) + " MiB of weights do not fit one protobuf file (2 GiB)");
  std::string bytes, error;
  if (!proto.SerializeToString(&bytes)) fail(path + ": cannot serialize the model");
  if (!writeFileAtomically(path, bytes, error)) fail(error);
}
} // namespace hetplan::runtime
