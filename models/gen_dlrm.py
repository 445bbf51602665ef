#!/usr/bin/python3
"""DLRM-style recommendation models as ONNX graphs (issue 24, item 2).

    /usr/bin/python3 models/gen_dlrm.py --config tiny -o dlrm-tiny.onnx
    /usr/bin/python3 models/gen_dlrm.py --config mlperf --weights none -o dlrm-mlperf.onnx

The graph is DLRM's (Naumov et al. 2019, arXiv:1906.00091) as TorchRec's
DLRM builds it: 13 dense features through the bottom MLP (Gemm + Relu); one
index per sample into each of the embedding tables (Criteo's categorical
features are single-valued: a Gather of one row per table and sample); the
dot interaction (the bottom MLP's output and the looked-up rows stacked to
[B, 1 + T, D], their pairwise dot products by one batched MatMul, the
strictly lower triangle gathered); that concatenated with the bottom output
through the top MLP to one logit per sample, and a Sigmoid.

Inputs: `dense` float32 [batch, 13], `sparse` int64 [batch, T] (row indices,
one column per table). Output: `click` float32 [batch, 1].

Configs (sizes from public DLRM configurations):
  mlperf  TorchRec's "MLPerf" row (github.com/pytorch/torchrec,
          examples/dlrm/README.MD @ 488c02b: 26 tables capped at 40,000,000
          rows, 97.36 GiB of fp32 tables, embedding_dim 128, dense arch
          512-256-128, over arch 1024-1024-512-256-1), measured there at
          5,497,159.68 records/s on 8 x A100-40GB at batch 8192 per GPU
  kaggle  FlexFlow's Criteo Kaggle day-1 run (github.com/flexflow/FlexFlow,
          examples/DLRM/run_kaggle_day1.sh: --arch-embedding-size, sparse
          feature size 16, bottom 13-512-256-64-16, top 512-256-1)
  tiny    4 small tables (8 to 1,000 rows, embedding dim 8) for CPU runs
          with real weights (every index below 8 is in range: the test
          drivers feed small indices)

--weights inline (default for tiny) writes random weights into the file;
--weights none writes the graph alone (tables and matrices as external
data in a file that is not written: `hetplan compile --allow-missing-weights`
plans from the shapes, as for GPT-3 175B).
"""
import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

CONFIGS = {
    "mlperf": dict(
        tables=[40000000, 39060, 17295, 7424, 20265, 3, 7122, 1543, 63, 40000000, 3067956, 405282, 10,
                2209, 11938, 155, 4, 976, 14, 40000000, 40000000, 40000000, 590152, 12973, 108, 36],
        dim=128, bottom=[512, 256, 128], top=[1024, 1024, 512, 256, 1]),
    "kaggle": dict(
        tables=[1396, 550, 1761917, 507795, 290, 21, 11948, 608, 3, 58176, 5237, 1497287, 3127, 26, 12153,
                1068715, 10, 4836, 2085, 4, 1312273, 17, 15, 110946, 91, 72655],
        dim=16, bottom=[512, 256, 64, 16], top=[512, 256, 1]),
    "tiny": dict(tables=[100, 37, 1000, 8], dim=8, bottom=[16, 8], top=[32, 16, 1]),
}
DENSE = 13  # Criteo's integer features


class Builder:
    def __init__(self, weights, seed):
        self.nodes, self.inits, self.weights = [], [], weights
        self.rng = np.random.default_rng(seed)
        self.external = 0

    def weight(self, name, shape, scale):
        if self.weights == "inline":
            a = (self.rng.standard_normal(shape) * scale).astype(np.float32)
            self.inits.append(numpy_helper.from_array(a, name))
        else:
            t = TensorProto()
            t.name, t.data_type = name, TensorProto.FLOAT
            t.dims.extend(shape)
            t.data_location = TensorProto.EXTERNAL
            n = int(np.prod(shape)) * 4
            for k, v in (("location", "dlrm-weights.bin"), ("offset", str(self.external)),
                         ("length", str(n))):
                e = t.external_data.add()
                e.key, e.value = k, v
            self.external += n
            self.inits.append(t)
        return name

    def const(self, name, array):
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def node(self, op, inputs, name, **attrs):
        self.nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def mlp(self, x, width, sizes, prefix, last_relu):
        for i, out in enumerate(sizes):
            w = self.weight(f"{prefix}.{i}.weight", [out, width], np.sqrt(2.0 / width))
            b = self.weight(f"{prefix}.{i}.bias", [out], 0.01)
            x = self.node("Gemm", [x, w, b], f"{prefix}.{i}", transB=1)
            if i + 1 < len(sizes) or last_relu:
                x = self.node("Relu", [x], f"{prefix}.{i}.relu")
            width = out
        return x


def build(c, weights, seed):
    b = Builder(weights, seed)
    T, D = len(c["tables"]), c["dim"]
    if c["bottom"][-1] != D:
        raise SystemExit(f"error: the bottom MLP must end at the embedding dim {D}")
    bottom = b.mlp("dense", DENSE, c["bottom"], "bottom_mlp", last_relu=True)
    stacked = [b.node("Unsqueeze", [bottom, b.const("axis1", np.array([1], np.int64))], "bottom_row")]
    for t, rows in enumerate(c["tables"]):
        table = b.weight(f"embedding.{t}.weight", [rows, D], 1.0 / np.sqrt(rows))
        col = b.node("Gather", ["sparse", b.const(f"col{t}", np.array(t, np.int64))], f"sparse_{t}", axis=1)
        row = b.node("Gather", [table, col], f"embedding_{t}")  # the lookup: one row per sample
        stacked.append(b.node("Unsqueeze", [row, "axis1"], f"embedding_{t}_row"))
    feats = b.node("Concat", stacked, "interaction_features", axis=1)  # [B, 1 + T, D]
    trans = b.node("Transpose", [feats], "interaction_transposed", perm=[0, 2, 1])
    dots = b.node("MatMul", [feats, trans], "interaction_dots")  # [B, 1 + T, 1 + T]
    n = T + 1
    flat = b.node("Reshape", [dots, b.const("dots_shape", np.array([0, n * n], np.int64))], "interaction_flat")
    lower = np.array([i * n + j for i in range(n) for j in range(i)], np.int64)
    pairs = b.node("Gather", [flat, b.const("lower_triangle", lower)], "interaction_pairs", axis=1)
    top_in = b.node("Concat", [bottom, pairs], "top_input", axis=1)
    logit = b.mlp(top_in, D + len(lower), c["top"], "top_mlp", last_relu=False)
    b.node("Sigmoid", [logit], "click")
    graph = helper.make_graph(
        b.nodes, "dlrm",
        [helper.make_tensor_value_info("dense", TensorProto.FLOAT, ["batch", DENSE]),
         helper.make_tensor_value_info("sparse", TensorProto.INT64, ["batch", T])],
        [helper.make_tensor_value_info("click", TensorProto.FLOAT, ["batch", 1])],
        b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="hetplan models/gen_dlrm.py")
    model.ir_version = 8
    return model


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", choices=sorted(CONFIGS), required=True)
    ap.add_argument("--weights", choices=["inline", "none"], default=None,
                    help="inline: random weights in the file (default for tiny); none: shapes only")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args(argv)
    c = CONFIGS[a.config]
    weights = a.weights or ("inline" if a.config == "tiny" else "none")
    table_bytes = 4 * c["dim"] * sum(c["tables"])
    if weights == "inline" and table_bytes > (1 << 30):
        raise SystemExit(f"error: --config {a.config} has {table_bytes / 2**30:.1f} GiB of tables: "
                         "use --weights none")
    model = build(c, weights, a.seed)
    onnx.save(model, a.output)
    if weights == "inline":
        onnx.checker.check_model(a.output)
    print(f"{a.output}: {len(c['tables'])} tables, {sum(c['tables']):,} rows x {c['dim']} "
          f"({table_bytes / 2**30:.2f} GiB fp32), weights {weights}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
