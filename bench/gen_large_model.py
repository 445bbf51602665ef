#!/usr/bin/python3
"""Write a GPT-like ONNX model with a chosen total weight size.

    /usr/bin/python3 bench/gen_large_model.py OUT.onnx [--size-mib 512]
        [--weights inline|external] [--hidden 1024] [--vocab 4096] [--seed 0]

The graph (opset 17, IR version 8) is a decoder-shaped stack built only from
ops every ONNX runtime knows:

    input_ids[1, seq] (int64)
      -> Gather(tok_embedding[vocab, hidden])                   # embedding
      -> L x { MatMul(W_up[hidden, 4*hidden]) + b_up -> Relu    # MLP block
               -> MatMul(W_down[4*hidden, hidden]) + b_down
               -> Add(residual) }
      -> MatMul(lm_head[hidden, vocab])                         # logits

L is chosen so that the float32 weights add up to about --size-mib (the
embedding and the head are fixed at 2 * vocab * hidden floats, each block adds
8 * hidden^2 + 5 * hidden floats; at least one block is always written).

--weights inline stores every payload as TensorProto.raw_data inside the
.onnx file; --weights external stores them, 4 KiB-aligned, in one file
OUT.onnx.data beside the model (ONNX external data: data_location = EXTERNAL,
external_data = {location, offset, length}).

Memory: the weights are never all in memory. Each tensor is generated (numpy,
fixed seed), written and dropped before the next one. For the inline variant
the protobuf framing is written by hand: the small parts (node list, tensor
headers) are serialized by protobuf, the length prefixes are computed, and the
raw payloads are streamed into the file after each tensor header. The result
parses as the same ModelProto that ModelProto.SerializeToString would give
(protobuf accepts fields in any order); `--self-check` verifies that.
"""

import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

MIB = 1 << 20
PROTOBUF_LIMIT = 2 * 1024 * MIB  # protobuf refuses messages of 2 GiB or more
ALIGN = 4096

# Protobuf field numbers (onnx.proto).
MODEL_GRAPH = 7
GRAPH_INITIALIZER = 5
TENSOR_RAW_DATA = 9


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def len_field(field, length):
    """Tag and length prefix of a length-delimited field."""
    return varint((field << 3) | 2) + varint(length)


class Spec:
    """The weights (name, shape) in file order, plus the graph nodes."""

    def __init__(self, size_mib, hidden, vocab, seq):
        self.hidden, self.vocab, self.seq = hidden, vocab, seq
        fixed = 2 * vocab * hidden * 4
        per_block = (8 * hidden * hidden + 5 * hidden) * 4
        target = int(size_mib * MIB)
        self.layers = max(1, round((target - fixed) / per_block))
        h, f = hidden, 4 * hidden
        self.weights = [("tok_embedding", (vocab, h))]
        nodes = [helper.make_node("Gather", ["tok_embedding", "input_ids"],
                                  ["h0"], name="embed", axis=0)]
        for i in range(self.layers):
            p = f"block{i}."
            self.weights += [(p + "W_up", (h, f)), (p + "b_up", (f,)),
                             (p + "W_down", (f, h)), (p + "b_down", (h,))]
            x = f"h{i}"
            nodes += [
                helper.make_node("MatMul", [x, p + "W_up"], [p + "up"],
                                 name=p + "up"),
                helper.make_node("Add", [p + "up", p + "b_up"], [p + "up_b"],
                                 name=p + "up_bias"),
                helper.make_node("Relu", [p + "up_b"], [p + "act"],
                                 name=p + "relu"),
                helper.make_node("MatMul", [p + "act", p + "W_down"],
                                 [p + "down"], name=p + "down"),
                helper.make_node("Add", [p + "down", p + "b_down"],
                                 [p + "down_b"], name=p + "down_bias"),
                helper.make_node("Add", [x, p + "down_b"], [f"h{i + 1}"],
                                 name=p + "residual"),
            ]
        self.weights.append(("lm_head", (h, vocab)))
        nodes.append(helper.make_node("MatMul", [f"h{self.layers}", "lm_head"],
                                      ["logits"], name="lm_head"))
        self.nodes = nodes

    @property
    def weight_bytes(self):
        return sum(int(np.prod(s)) * 4 for _, s in self.weights)


def make_model(spec, initializers):
    graph = helper.make_graph(
        spec.nodes, "gpt_like",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64,
                                       [1, spec.seq])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                       [1, spec.seq, spec.vocab])],
        initializer=initializers)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)],
        producer_name="hetplan-bench-gen", producer_version="1")
    model.ir_version = 8
    return model


def tensor_header(name, shape):
    """TensorProto without a payload (name, dims, data_type)."""
    t = TensorProto()
    t.name = name
    t.data_type = TensorProto.FLOAT
    t.dims.extend(shape)
    return t


def weight_arrays(spec, seed):
    """Yields (name, shape, float32 array), one at a time."""
    rng = np.random.default_rng(seed)
    for name, shape in spec.weights:
        a = rng.standard_normal(size=shape, dtype=np.float32)
        a *= np.float32(0.02)
        yield name, shape, a


def write_external(path, spec, seed):
    data_name = os.path.basename(path) + ".data"
    data_path = os.path.join(os.path.dirname(os.path.abspath(path)), data_name)
    initializers = []
    with open(data_path, "wb") as data:
        for name, shape, a in weight_arrays(spec, seed):
            pad = (-data.tell()) % ALIGN
            if pad:
                data.write(b"\0" * pad)
            offset = data.tell()
            data.write(a.tobytes(order="C"))  # little-endian float32
            t = tensor_header(name, shape)
            t.data_location = TensorProto.EXTERNAL
            for k, v in (("location", data_name), ("offset", str(offset)),
                         ("length", str(a.nbytes))):
                e = t.external_data.add()
                e.key, e.value = k, v
            initializers.append(t)
            del a
    model = make_model(spec, initializers)
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    return [path, data_path]


def write_inline(path, spec, seed):
    headers = [tensor_header(n, s) for n, s in spec.weights]
    payload_sizes = [int(np.prod(s)) * 4 for _, s in spec.weights]
    # Model and graph without initializers: serialized by protobuf.
    model = make_model(spec, [])
    graph_rest = model.graph.SerializeToString()
    model.ClearField("graph")
    model_rest = model.SerializeToString()

    init_chunks = []  # (prefix bytes, payload size) per initializer
    graph_len = len(graph_rest)
    for t, n in zip(headers, payload_sizes):
        head = t.SerializeToString() + len_field(TENSOR_RAW_DATA, n)
        tensor_len = len(head) + n
        prefix = len_field(GRAPH_INITIALIZER, tensor_len) + head
        init_chunks.append(prefix)
        graph_len += len(prefix) + n
    total = len(model_rest) + len(len_field(MODEL_GRAPH, graph_len)) + graph_len
    if total >= PROTOBUF_LIMIT:
        sys.exit(f"error: an inline model of {total} bytes exceeds protobuf's "
                 f"2 GiB message limit; use --weights external")

    with open(path, "wb") as f:
        f.write(model_rest)
        f.write(len_field(MODEL_GRAPH, graph_len))
        f.write(graph_rest)
        arrays = weight_arrays(spec, seed)
        for prefix, n, (_, _, a) in zip(init_chunks, payload_sizes, arrays):
            assert a.nbytes == n
            f.write(prefix)
            f.write(a.tobytes(order="C"))
            del a
        assert f.tell() == total, (f.tell(), total)
    return [path]


def self_check(path, spec, seed, weights):
    """Compares the written model with the one protobuf itself would write
    (small models only: this holds everything in memory)."""
    loaded = onnx.load(path)  # loads external data too
    inits = [helper.make_tensor(n, TensorProto.FLOAT, s, a.tobytes(), raw=True)
             for n, s, a in weight_arrays(spec, seed)]
    ref = make_model(spec, inits)
    if weights == "external":
        for t in loaded.graph.initializer:  # external data was loaded inline
            t.ClearField("external_data")
            t.ClearField("data_location")  # proto2: explicit DEFAULT != unset
    assert loaded == ref, "written model differs from the reference"
    onnx.checker.check_model(path)
    print("self-check: OK (equal to the protobuf-serialized reference; "
          "onnx.checker passes)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("output", help="the .onnx file to write")
    ap.add_argument("--size-mib", type=float, default=512,
                    help="target total float32 weight size in MiB "
                         "(default 512)")
    ap.add_argument("--weights", choices=["inline", "external"],
                    default="inline",
                    help="inline: raw_data inside the .onnx (protobuf caps "
                         "the file below 2 GiB); external: one OUTPUT.data "
                         "file beside it")
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--seq", type=int, default=128,
                    help="sequence length of the input_ids input")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--self-check", action="store_true",
                    help="reload and compare with a protobuf-serialized "
                         "reference (holds the model in memory; small sizes)")
    args = ap.parse_args(argv)

    spec = Spec(args.size_mib, args.hidden, args.vocab, args.seq)
    if args.weights == "inline":
        files = write_inline(args.output, spec, args.seed)
    else:
        files = write_external(args.output, spec, args.seed)
    sizes = sum(os.path.getsize(p) for p in files)
    print(f"wrote {' + '.join(files)}: {spec.layers} blocks, "
          f"{len(spec.weights)} initializers, weights {spec.weight_bytes} B "
          f"({spec.weight_bytes / MIB:.1f} MiB), files {sizes} B "
          f"({sizes / MIB:.1f} MiB)")
    if args.self_check:
        self_check(args.output, spec, args.seed, args.weights)


if __name__ == "__main__":
    main()
