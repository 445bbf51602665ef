#!/usr/bin/env python3
"""Models at the sizes and in the op mix of the ONNX files that real packages
ship for vision, audio and text recognition (issue 22's speed classes), for
bench/zoo_latency.py: a detector whose activations are hard-swish as
exporters decompose it, a CNN + bidirectional LSTM text recognizer, a Conv1D
audio classifier and a GELU feed-forward block. Each comes with
onnxruntime's outputs on seeded inputs, in the zoo's manifest format.

    python3 models/gen_speed.py [--out build/speed-models] [--only NAME...] [--small]

Needs onnx, onnxruntime and numpy (the pyenv python, not /usr/bin/python3).
The files are a few MB each and are not kept in the repository: the
benchmark writes them where it runs. --small writes the same graphs at a
fraction of the size (for a quick check of equal outputs).
"""
import argparse
import json
import os
import sys
import zlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from zoo_io import op_counts, reference, write_refs  # noqa: E402  models/zoo_io.py


class Graph:
    """A graph under construction: nodes, initializers, unique names."""

    def __init__(self, rng):
        self.rng, self.nodes, self.inits, self.n = rng, [], [], 0

    def name(self, base):
        self.n += 1
        return f"{base}_{self.n}"

    def weight(self, shape, fan_in, base="w"):
        n = self.name(base)
        self.inits.append(numpy_helper.from_array(
            (self.rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32), n))
        return n

    def const(self, value, base="c"):
        n = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(value), n))
        return n

    def op(self, op_type, inputs, n_out=1, **attrs):
        outs = [self.name(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=self.name(op_type), **attrs))
        return outs[0] if n_out == 1 else outs

    def conv(self, x, cin, cout, k, stride=1, group=1, bias=True, dims=2):
        pad = k // 2
        w = self.weight((cout, cin // group) + (k,) * dims, cin // group * k ** dims)
        ins = [x, w]
        if bias:
            ins.append(self.const((self.rng.standard_normal(cout) * 0.1).astype(np.float32), "b"))
        return self.op("Conv", ins, kernel_shape=[k] * dims, strides=[stride] * dims,
                       pads=[pad] * (2 * dims), group=group)

    def hardswish(self, x):
        # torch.onnx at opset < 14 (and several converters): x * relu6(x + 3) / 6
        t = self.op("Add", [x, self.const(np.float32(3.0))])
        t = self.op("Clip", [t, self.const(np.float32(0.0)), self.const(np.float32(6.0))])
        t = self.op("Mul", [x, t])
        return self.op("Div", [t, self.const(np.float32(6.0))])

    def gelu(self, x):
        # torch.onnx's GELU before opset 20: x * 0.5 * (1 + erf(x / sqrt 2))
        t = self.op("Div", [x, self.const(np.float32(1.4142135381698608))])
        t = self.op("Erf", [t])
        t = self.op("Add", [t, self.const(np.float32(1.0))])
        t = self.op("Mul", [x, t])
        return self.op("Mul", [t, self.const(np.float32(0.5))])

    def model(self, inputs, outputs, opset=13):
        g = helper.make_graph(self.nodes, "speed", inputs, outputs, self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="hetplan models/gen_speed.py")
        m.ir_version = 8
        return m


def detector(rng, small):
    """MobileNetV3/YOLO-style: strided Conv + hard-swish, depthwise-separable
    blocks with residual Adds, an FPN neck (ConvTranspose up, Resize up,
    Concat), a 1x1 head with Sigmoid. Batch 4 x 3 x 320 x 320."""
    n, hw = (2, 64) if small else (4, 320)
    g = Graph(rng)
    x = "image"
    c = 16
    t = g.hardswish(g.conv(x, 3, c, 3, stride=2))
    feats = []
    for cout, stride, reps in ((24, 2, 2), (40, 2, 2), (80, 2, 2)):
        t = g.hardswish(g.conv(t, c, c, 3, stride=stride, group=c))
        t = g.hardswish(g.conv(t, c, cout, 1))
        c = cout
        for _ in range(reps):
            r = g.hardswish(g.conv(t, c, c * 2, 1))
            r = g.hardswish(g.conv(r, c * 2, c * 2, 3, group=c * 2))
            r = g.conv(r, c * 2, c, 1)
            t = g.op("Add", [t, r])
        feats.append((t, c))
    (p3, c3), (p4, c4), (p5, c5) = feats
    u = g.op("ConvTranspose", [p5, g.weight((c5, c4, 2, 2), c5 * 4)], kernel_shape=[2, 2], strides=[2, 2])
    u = g.hardswish(g.op("Add", [u, p4]))
    u = g.hardswish(g.conv(u, c4, c3, 1))
    scales = g.const(np.array([1, 1, 2, 2], dtype=np.float32))
    u = g.op("Resize", [u, "", scales], mode="nearest")
    u = g.op("Concat", [u, p3], axis=1)
    u = g.hardswish(g.conv(u, 2 * c3, 64, 3))
    out = g.op("Sigmoid", [g.conv(u, 64, 3 * 6, 1)])
    g.nodes[-1].output[0] = "boxes"
    s = hw // 4
    return (g.model([helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, hw, hw])],
                    [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, ["batch", 18, s, s])]),
            {"image": rng.standard_normal((n, 3, hw, hw)).astype(np.float32)})


def recognizer(rng, small):
    """CRNN text recognizer: Conv + Relu + MaxPool stages over a 32 x W line
    image, columns as time steps through a bidirectional LSTM, a per-step
    classifier with LogSoftmax. Batch 8 x 1 x 32 x 256."""
    n, w_in, hidden = (2, 64, 32) if small else (8, 256, 128)
    g = Graph(rng)
    t, c = "line", 1
    for cout, pool in ((32, [2, 2]), (64, [2, 2]), (128, [2, 1]), (128, [2, 1])):
        t = g.op("Relu", [g.conv(t, c, cout, 3)])
        t = g.op("MaxPool", [t], kernel_shape=pool, strides=pool)
        c = cout
    # [N, 128, 2, W/4] -> [W/4, N, 256]
    t = g.op("Reshape", [t, g.const(np.array([0, c * 2, -1], dtype=np.int64))])
    t = g.op("Transpose", [t], perm=[2, 0, 1])
    d = c * 2
    wx = g.weight((2, 4 * hidden, d), d)
    wh = g.weight((2, 4 * hidden, hidden), hidden)
    b = g.const((rng.standard_normal((2, 8 * hidden)) * 0.1).astype(np.float32), "b")
    y = g.op("LSTM", [t, wx, wh, b], n_out=3, hidden_size=hidden, direction="bidirectional")[0]
    # [T, 2, N, H] -> [T, N, 2H]
    y = g.op("Transpose", [y], perm=[0, 2, 1, 3])
    y = g.op("Reshape", [y, g.const(np.array([0, 0, 2 * hidden], dtype=np.int64))])
    classes = 97
    y = g.op("Add", [g.op("MatMul", [y, g.weight((2 * hidden, classes), 2 * hidden)]),
                     g.const((rng.standard_normal(classes) * 0.1).astype(np.float32), "b")])
    g.op("LogSoftmax", [y], axis=2)
    g.nodes[-1].output[0] = "logprobs"
    T = w_in // 4
    return (g.model([helper.make_tensor_value_info("line", TensorProto.FLOAT, ["batch", 1, 32, w_in])],
                    [helper.make_tensor_value_info("logprobs", TensorProto.FLOAT, [T, "batch", classes])]),
            {"line": rng.standard_normal((n, 1, 32, w_in)).astype(np.float32)})


def audio_classifier(rng, small):
    """Conv1D keyword/audio classifier over 40 mel bands x 400 frames:
    Conv1d + Relu + MaxPool1d stages, global average pool, Dense + Relu,
    Dense + Softmax. Batch 8."""
    n, frames = (2, 80) if small else (8, 400)
    g = Graph(rng)
    t, c = "mels", 40
    for cout in (64, 128, 128, 256):
        t = g.op("Relu", [g.conv(t, c, cout, 5, dims=1)])
        t = g.op("MaxPool", [t], kernel_shape=[2], strides=[2])
        c = cout
    t = g.op("Flatten", [g.op("GlobalAveragePool", [t])])
    t = g.op("Relu", [g.op("Gemm", [t, g.weight((256, c), c), g.const(np.zeros(256, np.float32), "b")], transB=1)])
    t = g.op("Gemm", [t, g.weight((35, 256), 256), g.const(np.zeros(35, np.float32), "b")], transB=1)
    g.op("Softmax", [t], axis=1)
    g.nodes[-1].output[0] = "probs"
    return (g.model([helper.make_tensor_value_info("mels", TensorProto.FLOAT, ["batch", 40, frames])],
                    [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", 35])]),
            {"mels": rng.standard_normal((n, 40, frames)).astype(np.float32)})


def gelu_ffn(rng, small):
    """Two transformer feed-forward blocks as torch exports them: MatMul + Add,
    GELU as Div/Erf/Add/Mul/Mul, MatMul + Add, residual Add. Batch 8 x 128
    tokens x 256."""
    n, s, d = (2, 16, 32) if small else (8, 128, 256)
    g = Graph(rng)
    t = "hidden"
    for _ in range(2):
        h = g.op("Add", [g.op("MatMul", [t, g.weight((d, 4 * d), d)]), g.const(np.zeros(4 * d, np.float32), "b")])
        h = g.gelu(h)
        h = g.op("Add", [g.op("MatMul", [h, g.weight((4 * d, d), 4 * d)]), g.const(np.zeros(d, np.float32), "b")])
        t = g.op("Add", [t, h])
    g.nodes[-1].output[0] = "out"
    return (g.model([helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["batch", s, d])],
                    [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", s, d])]),
            {"hidden": rng.standard_normal((n, s, d)).astype(np.float32)})


MODELS = {
    "detector-hswish": (detector, "Conv/ConvTranspose/Resize detector, hard-swish decomposed"),
    "crnn-recognizer": (recognizer, "CNN + bidirectional LSTM recognizer"),
    "conv1d-classifier": (audio_classifier, "Conv1D/Dense audio classifier"),
    "gelu-ffn": (gelu_ffn, "MatMul + decomposed GELU feed-forward"),
}


def make(name, out_dir, small):
    build, klass = MODELS[name]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    m, feeds = build(rng, small)
    onnx.checker.check_model(m)
    path = os.path.join(out_dir, name + ".onnx")
    onnx.save(m, path)
    ref = reference(path, feeds)
    write_refs(os.path.join(out_dir, name + ".npz"), feeds, ref)
    batch = next(iter(feeds.values())).shape[0]
    row = dict(name=name, file=name + ".onnx", ref=name + ".npz", exporter="onnx.helper",
               opset=m.opset_import[0].version, family=name, klass=klass,
               bytes=os.path.getsize(path), nodes=len(m.graph.node), batch=batch, dims={},
               inputs={k: dict(shape=list(v.shape), dtype=str(v.dtype)) for k, v in feeds.items()},
               outputs={k: dict(shape=list(v.shape), dtype=str(v.dtype)) for k, v in ref.items()},
               ops=op_counts(m))
    print(f"{name}: {row['bytes']:,} B, {row['nodes']} nodes, outputs "
          f"{ {k: v['shape'] for k, v in row['outputs'].items()} }", file=sys.stderr)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(HERE), "build", "speed-models"))
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--small", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    import onnxruntime
    rows = [make(name, a.out, a.small) for name in MODELS if not a.only or name in a.only]
    manifest = {"versions": {"python": sys.version.split()[0], "onnx": onnx.__version__,
                             "onnxruntime": onnxruntime.__version__, "numpy": np.__version__},
                "small": a.small, "models": rows}
    with open(os.path.join(a.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
