#!/usr/bin/env python3
"""Writes the binary ONNX inputs of the import tests (run once; outputs are
committed). Use Debian's /usr/bin/python3, which has python3-onnx."""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def add_model(weight_tensor, extra_inits=(), sparse=()):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 128])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 128])
    node = helper.make_node("Add", ["x", "w"], ["y"], name="add0")
    graph = helper.make_graph([node], "add", [x], [y], [weight_tensor, *extra_inits],
                              sparse_initializer=list(sparse))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


w = numpy_helper.from_array(np.arange(128, dtype=np.float32), "w")  # 512 bytes
onnx.save(add_model(w), "add.onnx")

# The same weight as ONNX external data in add_external.bin.
ext = numpy_helper.from_array(np.arange(128, dtype=np.float32), "w")
ext.ClearField("raw_data")
ext.data_location = TensorProto.EXTERNAL
for k, v in (("location", "add_external.bin"), ("offset", "64"), ("length", "512")):
    e = ext.external_data.add()
    e.key, e.value = k, v
with open("add_external.bin", "wb") as f:
    f.write(b"\0" * 64 + np.arange(128, dtype=np.float32).tobytes())
onnx.save(add_model(ext), "add_external.onnx")

# External data that claims more bytes than its file has.
bad = onnx.load("add_external.onnx", load_external_data=False)
for e in bad.graph.initializer[0].external_data:
    if e.key == "offset":
        e.value = "4096"
onnx.save(bad, "add_external_past_end.onnx")

# External data outside the model's folder (ONNX: a relative path that stays
# inside it), and an offset that would overflow a size check.
for name, location in (("add_external_abs.onnx", "/etc/passwd"),
                       ("add_external_up.onnx", "../Inputs/add_external.bin")):
    bad = onnx.load("add_external.onnx", load_external_data=False)
    for e in bad.graph.initializer[0].external_data:
        if e.key == "location":
            e.value = location
    onnx.save(bad, name)
bad = onnx.load("add_external.onnx", load_external_data=False)
for e in bad.graph.initializer[0].external_data:
    if e.key == "offset":
        e.value = "9223372036854775000"
onnx.save(bad, "add_external_huge_offset.onnx")

# A sparse initializer.
values = numpy_helper.from_array(np.ones(2, dtype=np.float32), "s")
indices = numpy_helper.from_array(np.array([0, 5], dtype=np.int64), "s_idx")
sp = helper.make_sparse_tensor(values, indices, [128])
onnx.save(add_model(w, sparse=[sp]), "sparse.onnx")

# Unknown dims without a name of their own (issue 22): the placeholder `?`
# (converters write it for every unknown dim), an empty name and a negative
# size, next to a real name.
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["?", 3, "?", "?"])
m = helper.make_tensor_value_info("m", TensorProto.FLOAT, ["batch", -1, ""])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["?", 4, "?", "?"])
r = helper.make_tensor_value_info("r", TensorProto.FLOAT, ["batch", "?", -1])
conv = numpy_helper.from_array(np.full((4, 3, 3, 3), 0.1, dtype=np.float32), "w")
graph = helper.make_graph(
    [helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1]),
     helper.make_node("Relu", ["m"], ["r"], name="relu")],
    "unnamed", [x, m], [y, r], [conv])
unnamed = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
unnamed.ir_version = 7
onnx.save(unnamed, "unnamed_dims.onnx")
