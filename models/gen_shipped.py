#!/usr/bin/env python3
"""Small models with the quirks of ONNX files that real packages ship
(issue 22), each with onnxruntime's outputs, for the zoo check
(test/zoo/zoo_check.py --zoo models/shipped).

    python3 models/gen_shipped.py [--out models/shipped] [--only NAME...]

Needs onnx and onnxruntime (and numpy); see models/shipped/README.md for the
versions used. Each model is built with onnx.helper (no exporter), checked
with onnx.checker, run by onnxruntime (CPU provider, one thread, graph
optimizations off) on seeded inputs, and written as NAME.onnx, NAME.npz
(`in:X` inputs, `out:Y` outputs; fixed zip date) and a manifest.json row in
the format of models/zoo/manifest.json, plus `compile_args` where the model
is bound the way a user would (`--shape` for dims without a name).
"""
import argparse
import json
import os
import sys
import zlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from zoo_io import bound_dims, op_counts, reference, write_refs  # models/zoo_io.py

BATCH = 3
HERE = os.path.dirname(os.path.abspath(__file__))


def f32(rng, *shape, scale=0.5):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def i64(*values):
    return np.array(values, dtype=np.int64)


def const(name, array):
    return helper.make_node("Constant", [], [name], name=name,
                            value=numpy_helper.from_array(np.asarray(array), name))


def model_of(graph, opset, ir=8, producer="hetplan models/gen_shipped.py"):
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                          producer_name=producer)
    m.ir_version = ir
    return m


# ---------------------------------------------------------------------------
# 1. Unnamed dims: the same placeholder name `?` for different unknown dims
# (batch, height and width here), as some converters write them.


def unnamed_dims(rng):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["?", 3, "?", "?"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["?", 4, "?", "?"])
    pooled = helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["?", 4])
    inits = [numpy_helper.from_array(f32(rng, 4, 3, 3, 3), "conv.w"),
             numpy_helper.from_array(f32(rng, 4, scale=0.1), "conv.b"),
             numpy_helper.from_array(f32(rng, 4, 4, 1, 1), "proj.w")]
    nodes = [
        helper.make_node("Conv", ["x", "conv.w", "conv.b"], ["c"], name="conv",
                         pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Conv", ["r", "proj.w"], ["y"], name="proj"),
        helper.make_node("ReduceMean", ["y"], ["pooled"], name="pool", axes=[2, 3],
                         keepdims=0),
    ]
    g = helper.make_graph(nodes, "unnamed_dims", [x], [y, pooled], inits)
    # value_info as the converter wrote it: `?` again, for yet other dims.
    g.value_info.extend([helper.make_tensor_value_info("r", TensorProto.FLOAT,
                                                       ["?", "?", "?", "?"])])
    m = model_of(g, 13, ir=7, producer="tf2onnx-style (hetplan models/gen_shipped.py)")
    feeds = {"x": f32(rng, BATCH, 3, 6, 10, scale=1.0)}
    meta = dict(kind="vision", source="Conv/Relu/Conv/ReduceMean, every unknown dim named '?'",
                compile_args=["--batch", str(BATCH), "--shape", f"x={BATCH}x3x6x10"])
    return m, feeds, meta


# ---------------------------------------------------------------------------
# 2. Wrong declared shapes: the output is declared 2-D but the graph computes
# a 3-D one; value_info declares a wrong size. onnxruntime warns and returns
# the computed shapes.


def declared_shapes(rng):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])     # really [batch, 2, 4]
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", 2, 2])  # really [batch, 2, 4]
    inits = [numpy_helper.from_array(f32(rng, 8, 8), "fc.w"),
             numpy_helper.from_array(f32(rng, 8, scale=0.1), "fc.b"),
             numpy_helper.from_array(i64(0, 2, 4), "split_shape")]
    nodes = [
        helper.make_node("MatMul", ["x", "fc.w"], ["h"], name="fc"),
        helper.make_node("Add", ["h", "fc.b"], ["hb"], name="fc_bias"),
        helper.make_node("Reshape", ["hb", "split_shape"], ["y"], name="split_heads"),
        helper.make_node("Softmax", ["y"], ["z"], name="softmax", axis=-1),
    ]
    g = helper.make_graph(nodes, "declared_shapes", [x], [y, z], inits)
    g.value_info.extend([
        helper.make_tensor_value_info("h", TensorProto.FLOAT, ["batch", 4]),        # really 8
        helper.make_tensor_value_info("hb", TensorProto.FLOAT, ["batch", 8, 1]),    # really 2-D
    ])
    m = model_of(g, 17)
    feeds = {"x": f32(rng, BATCH, 8, scale=1.0)}
    meta = dict(kind="encoder", source="MatMul/Add/Reshape/Softmax, outputs and value_info "
                "declared with wrong shapes")
    return m, feeds, meta


# ---------------------------------------------------------------------------
# 3. Shape subgraphs: Swin-style window padding whose amounts come from
# Shape -> Slice/Gather -> Sub -> Mod chains, then windows by Reshape with a
# computed shape, a Range of the window count, Where/Equal, Min/Max, Cast,
# Unsqueeze/Squeeze.


def shape_pad(rng):
    win = 4
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, "height", "width"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "windows", 64])
    nodes = [
        const("win", i64(win)),
        const("zero", i64(0)),
        const("three", i64(3)),
        const("one", i64(1)),
        const("zeros4", i64(0, 0, 0, 0, 0, 0)),
        const("s0", i64(0)), const("s2", i64(2)), const("s4", i64(4)),
        const("ax0", i64(0)),
        const("zero_s", np.array(0, np.int64)),
        const("one_s", np.array(1, np.int64)),
        const("win1", i64(win)),
        const("minus1", i64(-1)),
        const("axes02", i64(0, 2)),
        helper.make_node("Shape", ["x"], ["shape"], name="shape"),
        helper.make_node("Slice", ["shape", "s2", "s4"], ["hw"], name="hw"),          # [H, W]
        helper.make_node("Mod", ["hw", "win"], ["rem"], name="rem"),
        helper.make_node("Sub", ["win", "rem"], ["short"], name="short"),
        helper.make_node("Mod", ["short", "win"], ["pad0"], name="pad0"),
        helper.make_node("Equal", ["rem", "zero"], ["fits"], name="fits"),
        helper.make_node("Where", ["fits", "zero", "pad0"], ["pad1"], name="pad1"),
        helper.make_node("Max", ["pad1", "zero"], ["pad2"], name="pad_lo"),
        helper.make_node("Min", ["pad2", "three"], ["pad"], name="pad_hi"),
        helper.make_node("Concat", ["zeros4", "pad"], ["pads"], name="pads", axis=0),
        helper.make_node("Pad", ["x", "pads"], ["padded"], name="pad"),
        helper.make_node("Add", ["hw", "pad"], ["hwp"], name="hwp"),
        helper.make_node("Div", ["hwp", "win"], ["nwin"], name="nwin"),
        helper.make_node("Gather", ["nwin", "zero_s"], ["nh"], name="nh", axis=0),
        helper.make_node("Slice", ["nwin", "one", "s2"], ["nw1"], name="nw1"),
        helper.make_node("Squeeze", ["nw1", "ax0"], ["nw"], name="nw"),
        helper.make_node("Unsqueeze", ["nh", "ax0"], ["nh1"], name="nh1"),
        helper.make_node("Slice", ["shape", "s0", "s2"], ["nc"], name="nc"),
        helper.make_node("Concat", ["nc", "nh1", "win1", "nw1", "win1"], ["shape6"],
                         name="shape6", axis=0),
        helper.make_node("Reshape", ["padded", "shape6"], ["w6"], name="windows6"),
        helper.make_node("Transpose", ["w6"], ["wt"], name="to_windows", perm=[0, 2, 4, 1, 3, 5]),
        helper.make_node("Mul", ["nh", "nw"], ["count"], name="count"),
        helper.make_node("Unsqueeze", ["count", "ax0"], ["count1"], name="count1"),
        helper.make_node("Gather", ["shape", "zero_s"], ["n"], name="n", axis=0),
        helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"], name="n1"),
        helper.make_node("Concat", ["n1", "count1", "minus1"], ["shape3"], name="shape3", axis=0),
        helper.make_node("Reshape", ["wt", "shape3"], ["w3"], name="windows"),
        helper.make_node("Cast", ["count"], ["countf"], name="countf", to=TensorProto.FLOAT),
        helper.make_node("Sqrt", ["countf"], ["norm"], name="norm"),
        helper.make_node("Div", ["w3", "norm"], ["scaled"], name="scaled"),
        helper.make_node("Range", ["zero_s", "count", "one_s"], ["idx"], name="idx"),
        helper.make_node("Cast", ["idx"], ["idxf"], name="idxf", to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["idxf", "axes02"], ["pos"], name="pos"),
        helper.make_node("Add", ["scaled", "pos"], ["y"], name="y"),
    ]
    g = helper.make_graph(nodes, "shape_pad", [x], [y])
    m = model_of(g, 17)
    feeds = {"x": f32(rng, BATCH, 4, 6, 10, scale=1.0)}
    meta = dict(kind="vision", source="Swin-style window padding from Shape/Slice/Mod chains")
    return m, feeds, meta


# ---------------------------------------------------------------------------
# 5. If with branch-dependent shapes: an audio front end that branches on its
# sample rate (a scalar input). At 16 kHz (320 samples) it frames the audio
# into 2 x 160 and averages the frames; at 8 kHz (160 samples) it takes its
# one frame by Squeeze. The else branch cannot bind for 320 samples
# (Squeeze of a dim of 2) and the branches' `frames` differ in shape.


def if_rate(rng):
    audio = helper.make_tensor_value_info("audio", TensorProto.FLOAT, ["batch", "samples"])
    rate = helper.make_tensor_value_info("rate", TensorProto.INT64, [])
    feat = helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", 8])
    frames = helper.make_tensor_value_info("frames", TensorProto.FLOAT, ["batch", "n", 160])

    def branch(name, nodes, outs):
        return helper.make_graph(nodes, name, [], [
            helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs])

    then_g = branch("wideband", [
        const("shape_wb", i64(0, 2, 160)),
        helper.make_node("Reshape", ["audio", "shape_wb"], ["frames_wb"], name="frame_wb"),
        helper.make_node("ReduceMean", ["frames_wb"], ["mean_wb"], name="mean_wb", axes=[1],
                         keepdims=0),
    ], ["mean_wb", "frames_wb"])
    else_g = branch("narrowband", [
        const("shape_nb", i64(0, -1, 160)),
        const("axis_nb", i64(1)),
        helper.make_node("Reshape", ["audio", "shape_nb"], ["frames_nb"], name="frame_nb"),
        helper.make_node("Squeeze", ["frames_nb", "axis_nb"], ["one_nb"], name="squeeze_nb"),
    ], ["one_nb", "frames_nb"])
    inits = [numpy_helper.from_array(f32(rng, 160, 8, scale=0.1), "proj.w"),
             numpy_helper.from_array(np.array(16000, np.int64), "wideband_rate")]
    nodes = [
        helper.make_node("Equal", ["rate", "wideband_rate"], ["is_wide"], name="is_wide"),
        helper.make_node("If", ["is_wide"], ["signal", "frames"], name="by_rate",
                         then_branch=then_g, else_branch=else_g),
        helper.make_node("MatMul", ["signal", "proj.w"], ["features"], name="proj"),
    ]
    g = helper.make_graph(nodes, "if_rate", [audio, rate], [feat, frames], inits)
    m = model_of(g, 17)
    feeds = {"audio": f32(rng, BATCH, 320, scale=1.0), "rate": np.array(16000, np.int64)}
    meta = dict(kind="control-flow", source="If on a sample-rate input whose branches differ "
                "in shape", compile_args=["--batch", str(BATCH), "--dim", "samples=320",
                                          "--value", "rate=16000"])
    return m, feeds, meta


# ---------------------------------------------------------------------------
# 6. Fixed-batch model with state outputs: every dim fixed at 1, a
# bidirectional GRU whose state output [2, 1, 8] has no batch axis first
# (a streaming recognizer's carried state).


def fixed_state(rng):
    hidden = 8
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 5, 8])
    h0 = helper.make_tensor_value_info("h0", TensorProto.FLOAT, [2, 1, hidden])
    logits = helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 4])
    state = helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, 1, hidden])
    inits = [numpy_helper.from_array(f32(rng, 2, 3 * hidden, 8, scale=0.3), "gru.W"),
             numpy_helper.from_array(f32(rng, 2, 3 * hidden, hidden, scale=0.3), "gru.R"),
             numpy_helper.from_array(f32(rng, 2, 6 * hidden, scale=0.1), "gru.B"),
             numpy_helper.from_array(f32(rng, 2 * hidden, 4, scale=0.3), "head.w"),
             numpy_helper.from_array(i64(1, 2 * hidden), "flat")]
    nodes = [
        helper.make_node("Transpose", ["x"], ["xt"], name="time_major", perm=[1, 0, 2]),
        helper.make_node("GRU", ["xt", "gru.W", "gru.R", "gru.B", "", "h0"], ["y", "state"],
                         name="gru", hidden_size=hidden, direction="bidirectional"),
        helper.make_node("Reshape", ["state", "flat"], ["sflat"], name="flatten"),
        helper.make_node("MatMul", ["sflat", "head.w"], ["logits"], name="head"),
    ]
    g = helper.make_graph(nodes, "fixed_state", [x, h0], [logits, state], inits)
    m = model_of(g, 14)
    feeds = {"x": f32(rng, 1, 5, 8, scale=1.0), "h0": f32(rng, 2, 1, hidden, scale=0.5)}
    meta = dict(kind="recurrent", source="bidirectional GRU, every dim fixed at 1, state "
                "output [2, 1, 8]", batch=1, compile_args=["--batch", "1"])
    return m, feeds, meta


MODELS = {
    "unnamed-dims": (unnamed_dims, "unnamed dims"),
    "declared-shapes": (declared_shapes, "wrong declared shapes"),
    "shape-pad": (shape_pad, "shape subgraph"),
    "if-rate": (if_rate, "If with branch-dependent shapes"),
    "fixed-state": (fixed_state, "fixed-batch model with state outputs"),
}


def declared_dims(m):
    return {vi.name: [d.dim_param if d.dim_param else
                      (int(d.dim_value) if d.HasField("dim_value") else None)
                      for d in vi.type.tensor_type.shape.dim] for vi in m.graph.input}


def make(name, out_dir):
    build, klass = MODELS[name]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    m, feeds, meta = build(rng)
    onnx.checker.check_model(m)
    path = os.path.join(out_dir, name + ".onnx")
    onnx.save(m, path)
    ref = reference(path, feeds)
    declared = declared_dims(m)
    dims = bound_dims(name, declared, feeds, unnamed=("?",))
    write_refs(os.path.join(out_dir, name + ".npz"), feeds, ref)
    row = dict(name=name, file=name + ".onnx", ref=name + ".npz", exporter="onnx.helper",
               opset=m.opset_import[0].version, family=name, klass=klass,
               bytes=os.path.getsize(path), nodes=len(m.graph.node), batch=BATCH, dims=dims,
               inputs={k: dict(shape=list(v.shape), dtype=str(v.dtype), dims=declared[k])
                       for k, v in feeds.items()},
               outputs={k: dict(shape=list(v.shape), dtype=str(v.dtype)) for k, v in ref.items()},
               ops=op_counts(m))
    row.update(meta)
    print(f"{name}: {row['bytes']:,} B, {row['nodes']} nodes, outputs "
          f"{ {k: v['shape'] for k, v in row['outputs'].items()} }", file=sys.stderr)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(HERE, "shipped"))
    ap.add_argument("--only", nargs="*")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    manifest_path = os.path.join(a.out, "manifest.json")
    old = {}
    if a.only and os.path.exists(manifest_path):
        old = {r["name"]: r for r in json.load(open(manifest_path))["models"]}
    import onnxruntime
    rows = []
    for name in MODELS:
        if a.only and name not in a.only:
            if name in old:
                rows.append(old[name])
            continue
        rows.append(make(name, a.out))
    manifest = {"versions": {"python": sys.version.split()[0], "onnx": onnx.__version__,
                             "onnxruntime": onnxruntime.__version__, "numpy": np.__version__},
                "batch": BATCH, "models": rows}
    with open(manifest_path, "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
