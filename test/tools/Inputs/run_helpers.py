"""Helpers for the `hetplan run` lit tests.

  run_helpers.py npy FILE DTYPE D0xD1...   write an .npy of zeros (int64: 1s)
  run_helpers.py schema PLAN OUT VERSION   rewrite a plan's schema_version (and its CRC)
  run_helpers.py touch FILE                append one byte to a file
  run_helpers.py two-tower DIR             CLIP-like and recurrent-state models, inputs, references
  run_helpers.py close GOT REF             outputs agree with a reference (.npy)
  run_helpers.py npy-header FILE SHAPE     an int64 .npy whose header claims SHAPE over 16 bytes
"""
import struct, sys, zlib

import numpy as np

cmd = sys.argv[1]
if cmd == "npy":
    shape = [int(d) for d in sys.argv[4].split("x")] if sys.argv[4] else []
    np.save(sys.argv[2], np.ones(shape, dtype=sys.argv[3]))
elif cmd == "schema":
    data = open(sys.argv[2], "rb").read()
    body = bytearray(data[20:])
    # Deterministic serialization writes schema_version (field 1, varint)
    # first: bytes 08 01.
    assert body[0] == 0x08 and body[1] == 0x01, body[:2]
    body[1] = int(sys.argv[4])
    header = data[:8] + struct.pack("<QI", len(body), zlib.crc32(bytes(body)) & 0xFFFFFFFF)
    open(sys.argv[3], "wb").write(header + bytes(body))
elif cmd == "touch":
    with open(sys.argv[2], "ab") as f:
        f.write(b"\0")
elif cmd == "two-tower":
    # run_helpers.py two-tower DIR: a CLIP-like model (image x text logits,
    # the outputs pair samples) and a recurrent step with its state's batch
    # on axis 1, with inputs and numpy reference outputs.
    import os
    from onnx import TensorProto, helper, numpy_helper
    d = sys.argv[2]
    rng = np.random.default_rng(0)
    wi = rng.standard_normal((12, 8)).astype(np.float32)
    wt = rng.standard_normal((6, 8)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["image", "wi"], ["ie"]),
         helper.make_node("MatMul", ["text", "wt"], ["te"]),
         helper.make_node("Transpose", ["te"], ["tt"], perm=[1, 0]),
         helper.make_node("MatMul", ["ie", "tt"], ["logits"], name="logits")],
        "clip",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 12]),
         helper.make_tensor_value_info("text", TensorProto.FLOAT, ["batch", 6])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "batch"])],
        [numpy_helper.from_array(wi, "wi"), numpy_helper.from_array(wt, "wt")])
    import onnx
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), os.path.join(d, "clip.onnx"))
    image = rng.standard_normal((3, 12)).astype(np.float32)
    text = rng.standard_normal((3, 6)).astype(np.float32)
    np.save(os.path.join(d, "image.npy"), image)
    np.save(os.path.join(d, "text.npy"), text)
    np.save(os.path.join(d, "logits.ref.npy"), (image @ wi) @ (text @ wt).T)
    # h' = tanh(h W + x U): h is [layers=2, batch, 4], x is [batch, 5].
    w = rng.standard_normal((4, 4)).astype(np.float32)
    u = rng.standard_normal((5, 4)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["h", "w"], ["hw"]),
         helper.make_node("MatMul", ["x", "u"], ["xu"]),
         helper.make_node("Add", ["hw", "xu"], ["s"]),
         helper.make_node("Tanh", ["s"], ["h_next"])],
        "state",
        [helper.make_tensor_value_info("h", TensorProto.FLOAT, [2, "batch", 4]),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 5])],
        [helper.make_tensor_value_info("h_next", TensorProto.FLOAT, [2, "batch", 4])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(u, "u")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), os.path.join(d, "state.onnx"))
    h = rng.standard_normal((2, 3, 4)).astype(np.float32)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    np.save(os.path.join(d, "h.npy"), h)
    np.save(os.path.join(d, "x.npy"), x)
    np.save(os.path.join(d, "h_next.ref.npy"), np.tanh(h @ w + x @ u))
elif cmd == "close":
    # run_helpers.py close GOT REF: max |diff| <= 1e-5 * max |ref| + 1e-6
    got, ref = np.load(sys.argv[2]), np.load(sys.argv[3])
    assert got.shape == ref.shape, (got.shape, ref.shape)
    diff = float(np.abs(got.astype(np.float64) - ref).max())
    assert diff <= 1e-5 * float(np.abs(ref).max()) + 1e-6, diff
    print("close", got.shape, diff)
elif cmd == "npy-header":
    # A hostile header: the shape text as given, 16 bytes of data.
    d = "{'descr': '<i8', 'fortran_order': False, 'shape': " + sys.argv[3] + ", }"
    d += " " * (63 - (10 + len(d)) % 64) + "\n"
    with open(sys.argv[2], "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(d)) + d.encode() + b"\0" * 16)
