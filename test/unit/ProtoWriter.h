//===- ProtoWriter.h - hand-written protobuf bytes for tests ----*- C++ -*-===//
//
// Tests build ONNX files byte by byte so they can check offsets exactly and
// write broken files, without linking protobuf's generated types.
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_TEST_UNIT_PROTOWRITER_H
#define HETPLAN_TEST_UNIT_PROTOWRITER_H

#include <cstdint>
#include <string>

namespace hetplan::test {

struct Proto {
  std::string bytes;

  static void varint(std::string &out, uint64_t v) {
    while (v >= 0x80) {
      out += char(uint8_t(v) | 0x80);
      v >>= 7;
    }
    out += char(v);
  }
  Proto &num(uint32_t field, uint64_t v) {
    varint(bytes, uint64_t(field) << 3);
    varint(bytes, v);
    return *this;
  }
  Proto &str(uint32_t field, const std::string &s) {
    varint(bytes, (uint64_t(field) << 3) | 2);
    varint(bytes, s.size());
    bytes += s;
    return *this;
  }
  Proto &msg(uint32_t field, const Proto &m) { return str(field, m.bytes); }
};

/// A float tensor type proto with the given dims (a negative dim is "batch").
inline Proto tensorType(std::initializer_list<int64_t> dims) {
  Proto shape;
  for (int64_t d : dims) {
    Proto dim;
    if (d >= 0)
      dim.num(1, uint64_t(d));
    else
      dim.str(2, "batch");
    shape.msg(1, dim);
  }
  Proto tensor;
  tensor.num(1, 1 /*FLOAT*/).msg(2, shape);
  Proto type;
  type.msg(1, tensor);
  return type;
}

inline Proto valueInfo(const std::string &name, const Proto &type) {
  Proto v;
  v.str(1, name).msg(2, type);
  return v;
}

/// ModelProto: y = Add(x, w) with x: float[batch, n] and w an n-element
/// initializer whose raw_data is `weight` (n = weight.size() / 4).
inline std::string addModel(const std::string &weight, int64_t irVersion = 8,
                            const std::string &domain = "") {
  int64_t n = int64_t(weight.size() / 4);
  Proto init;
  init.num(1, uint64_t(n)).num(2, 1 /*FLOAT*/).str(8, "w").str(9, weight);
  Proto node;
  node.str(1, "x").str(1, "w").str(2, "y").str(3, "add0").str(4, "Add");
  if (!domain.empty())
    node.str(7, domain);
  Proto graph;
  graph.msg(1, node).str(2, "g").msg(5, init)
      .msg(11, valueInfo("x", tensorType({-1, n})))
      .msg(12, valueInfo("y", tensorType({-1, n})));
  Proto opset;
  opset.num(2, 17);
  Proto model;
  model.num(1, uint64_t(irVersion)).msg(8, opset).msg(7, graph);
  return model.bytes;
}

} // namespace hetplan::test

#endif
