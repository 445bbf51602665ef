#!/usr/bin/python3
"""Write a GPT-2 / GPT-3 / BERT / Llama transformer as an ONNX model.

    /usr/bin/python3 models/gen_transformer.py --family gpt2|gpt3|bert|llama
        --config NAME [--layers N --hidden H --heads A --vocab V --seq-max S
        --ffn F --kv-heads K] [--name NAME] [--weights inline|external|none]
        -o OUT.onnx [--seed 0]
        [--gelu erf|tanh] [--check-params N] [--no-check] [--list]

The graph is the real structure of the Hugging Face model, one block per layer,
written with ONNX opset 17 ops only (IR version 8) the way torch.onnx exports
look: node names are prefixed by the layer (`h.3.attn.qkv`,
`encoder.layer.3.attention.self.query`, `model.layers.3.self_attn.q_proj`),
initializers carry Hugging Face's state-dict names (`h.3.attn.c_attn.weight`).
Inputs have symbolic dims `batch` and `sequence`.

  gpt2/gpt3  input_ids[batch, sequence] -> logits[batch, sequence, vocab]
             wte + wpe (position ids: Shape/Gather/Range, Reshape to [1, seq])
             -> L x {LayerNorm,
             fused QKV MatMul+Add, Split, Reshape (shape from Shape/Gather/
             Concat), Transpose, MatMul, Div sqrt(head_dim), causal mask
             (Where on a Slice of the triangular bool constant
             attn.causal_mask[1,1,S,S], like HF's attn.bias buffer, Reshaped
             to [1,1,seq,seq] so that libonnx keeps the dims), Softmax,
             MatMul, Transpose/Reshape, c_proj, residual Add, LayerNorm, c_fc,
             GELU (Div/Erf/Add/Mul/Mul), c_proj, residual Add} -> ln_f ->
             MatMul with Transpose(wte.weight): the LM head is TIED to the
             token embedding (no lm_head weight).
  bert       input_ids, token_type_ids, attention_mask [batch, sequence] ->
             last_hidden_state[batch, sequence, hidden], pooler_output[batch,
             hidden]. Word + token-type (Gather) + position (Slice of the
             table by sequence length) embeddings, LayerNorm, post-LN encoder
             layers with separate Q/K/V and the additive mask
             (1 - mask) * float32.min, GELU MLP; pooler = Gather of token 0,
             Gemm(transB=1) with HF's [out, in] weight, Tanh.
  llama      input_ids -> logits. RMSNorm decomposed (Pow/ReduceMean/Add/Sqrt/
             Div/Mul), rotary embeddings (cos/sin tables [S, head_dim] as
             initializers, Slice by sequence length, rotate-half via
             Slice/Neg/Concat, Mul/Add), causal mask from Range/Unsqueeze/
             GreaterOrEqual + Where, SwiGLU MLP (Sigmoid, Mul), no biases,
             separate (untied) lm_head.weight.

Linear weights are stored [in, out] so they feed MatMul directly (GPT-2's
Conv1D weights are [in, out] in HF too; BERT/Llama Linear weights appear here
transposed, as an exporter folds them); the BERT pooler keeps HF's [out, in]
layout and uses Gemm(transB=1).

Weights (`--weights`):
  inline    random float32 weights in the .onnx (raw_data)
  external  the same bytes in OUT.onnx.data (ONNX external data, location
            relative to the model), 64-byte aligned, 4096 for tensors >= 1 MiB
  none      no weight bytes written at all: every weight initializer keeps its
            name, dims and data type and is marked data_location=EXTERNAL with
            the {location, offset, length} that `external` would write; the
            .data file is not created. Nothing big is ever allocated.
Random values: one numpy Generator seeded with --seed, drawn tensor by tensor
in initializer order, so inline and external hold identical bytes. Matrices,
embeddings and biases ~ N(0, 0.02); norm scales ~ 1 + N(0, 0.02).

Every weight initializer (what the parameter count sums) goes to the data file
in `external`/`none`. Non-weight constants (shapes, scalars, the causal mask,
rotary cos/sin tables) stay inline when at most 1 MiB; bigger ones (the
gpt3-175b/llama masks and tables) follow the weights to the data file. They are
not counted as parameters.

Unless --no-check, the result is checked with onnx.checker.check_model and
onnx.shape_inference.infer_shapes(strict_mode=True, data_prop=True), and the
inferred output shapes are compared with the declared ones. In `none` mode
the checker (which stat()s the data file) is run on a copy in a temporary
directory beside an empty placeholder data file.
"""

import argparse
import math
import os
import shutil
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8
INLINE_CONST_MAX = 1 << 20          # non-weight constants above this go external
ALIGN_SMALL, ALIGN_LARGE = 64, 4096
PROTOBUF_LIMIT = (2 << 30) - (64 << 20)
F32_MIN = float(np.finfo(np.float32).min)

# name: family + structure. ffn defaults to 4 * hidden; norm eps per family.
CONFIGS = {
    "gpt2-tiny":   dict(family="gpt2", layers=2, hidden=64, heads=4, vocab=512, seq_max=128),
    "gpt2-small":  dict(family="gpt2", layers=12, hidden=768, heads=12, vocab=50257, seq_max=1024),
    "gpt2-medium": dict(family="gpt2", layers=24, hidden=1024, heads=16, vocab=50257, seq_max=1024),
    "gpt2-large":  dict(family="gpt2", layers=36, hidden=1280, heads=20, vocab=50257, seq_max=1024),
    "gpt2-xl":     dict(family="gpt2", layers=48, hidden=1600, heads=25, vocab=50257, seq_max=1024),
    "gpt3-175b":   dict(family="gpt3", layers=96, hidden=12288, heads=96, vocab=50257, seq_max=2048),
    "bert-tiny":   dict(family="bert", layers=2, hidden=64, heads=4, vocab=512, seq_max=128, type_vocab=2),
    "bert-base":   dict(family="bert", layers=12, hidden=768, heads=12, vocab=30522, seq_max=512, type_vocab=2),
    "bert-large":  dict(family="bert", layers=24, hidden=1024, heads=16, vocab=30522, seq_max=512, type_vocab=2),
    "llama-tiny":  dict(family="llama", layers=2, hidden=64, heads=4, ffn=176, vocab=512, seq_max=128),
    "llama2-7b":   dict(family="llama", layers=32, hidden=4096, heads=32, ffn=11008, vocab=32000, seq_max=4096),
    "llama2-13b":  dict(family="llama", layers=40, hidden=5120, heads=40, ffn=13824, vocab=32000, seq_max=4096),
    "llama-30b":   dict(family="llama", layers=60, hidden=6656, heads=52, ffn=17920, vocab=32000, seq_max=2048),
    # Grouped-query attention: 8 key/value heads for 64 query heads.
    "llama2-70b":  dict(family="llama", layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672, vocab=32000, seq_max=4096),
    "llama-tiny-gqa": dict(family="llama", layers=2, hidden=64, heads=4, kv_heads=2, ffn=176, vocab=512, seq_max=128),
}
NORM_EPS = {"gpt2": 1e-5, "gpt3": 1e-5, "bert": 1e-12, "llama": 1e-5}
ROPE_THETA = 10000.0


class Deferred:
    """An initializer whose bytes are made only when (and if) written."""

    def __init__(self, proto, shape, dtype, make, is_weight):
        self.proto, self.shape, self.dtype = proto, shape, np.dtype(dtype)
        self.make, self.is_weight = make, is_weight

    @property
    def numel(self):
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self):
        return self.numel * self.dtype.itemsize


class Graph:
    def __init__(self, rng):
        self.rng = rng
        self.nodes, self.inits, self.deferred = [], [], []
        self.names = set()          # every value name (initializers, outputs)
        self.node_names = set()
        self.consts = {}

    def _claim(self, name):
        if name in self.names:
            raise ValueError(f"duplicate value name {name}")
        self.names.add(name)
        return name

    # ---- initializers ------------------------------------------------------
    def weight(self, name, shape, kind="normal"):
        """A learned float32 parameter; counted; external in external/none."""
        self._claim(name)
        t = TensorProto()
        t.name, t.data_type = name, TensorProto.FLOAT
        t.dims.extend(shape)

        def make(shape=tuple(shape), kind=kind):
            a = self.rng.standard_normal(size=shape, dtype=np.float32)
            a *= np.float32(0.02)
            if kind == "scale":
                a += np.float32(1.0)
            return a
        self.inits.append(t)
        self.deferred.append(Deferred(t, tuple(shape), np.float32, make, True))
        return name

    def big_const(self, name, shape, dtype, make):
        """A non-weight constant made lazily; inline if small."""
        self._claim(name)
        t = TensorProto()
        t.name = name
        t.data_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype)) \
            if hasattr(helper, "np_dtype_to_tensor_dtype") else \
            onnx.mapping.NP_TYPE_TO_TENSOR_TYPE[np.dtype(dtype)]
        t.dims.extend(shape)
        d = Deferred(t, tuple(shape), dtype, make, False)
        if d.nbytes <= INLINE_CONST_MAX:
            t.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(make()), name))
        else:
            self.deferred.append(d)
        self.inits.append(t)
        return name

    def const(self, value, dtype=np.int64, name=None):
        """A small inline constant, shared by value."""
        a = np.array(value, dtype=dtype)
        key = (a.dtype.str, a.shape, a.tobytes())
        if key in self.consts:
            return self.consts[key]
        if name is None:
            flat = "_".join(str(v) for v in a.reshape(-1)[:4])
            name = f"const.{a.dtype.name}.{'x'.join(map(str, a.shape)) or 's'}.{flat}"
            name = name.replace("-", "m")
            while name in self.names:
                name += "_"
        self._claim(name)
        self.inits.append(numpy_helper.from_array(a, name))
        self.consts[key] = name
        return name

    # ---- nodes -------------------------------------------------------------
    def op(self, op_type, inputs, name, outputs=None, n_out=1, **attrs):
        if name in self.node_names:
            raise ValueError(f"duplicate node name {name}")
        self.node_names.add(name)
        if outputs is None:
            outputs = [name] if n_out == 1 else [f"{name}.{i}" for i in range(n_out)]
        for o in outputs:
            self._claim(o)
        self.nodes.append(helper.make_node(op_type, list(inputs), list(outputs),
                                           name=name, **attrs))
        return outputs[0] if len(outputs) == 1 else outputs

    # ---- building blocks ---------------------------------------------------
    def linear(self, x, w, b, name):
        y = self.op("MatMul", [x, w], name)
        if b is None:
            return y
        return self.op("Add", [y, b], name + "_bias")

    def layer_norm(self, x, prefix, name, eps, out=None):
        w = self.weight(prefix + ".weight", [self.hidden], "scale")
        b = self.weight(prefix + ".bias", [self.hidden])
        return self.op("LayerNormalization", [x, w, b], name,
                       outputs=[out] if out else None, axis=-1, epsilon=eps)

    def rms_norm(self, x, prefix, name, eps):
        w = self.weight(prefix + ".weight", [self.hidden], "scale")
        sq = self.op("Pow", [x, self.const(2.0, np.float32)], name + ".pow")
        var = self.op("ReduceMean", [sq], name + ".mean", axes=[-1], keepdims=1)
        var = self.op("Add", [var, self.const(eps, np.float32)], name + ".add_eps")
        rms = self.op("Sqrt", [var], name + ".sqrt")
        xn = self.op("Div", [x, rms], name + ".div")
        return self.op("Mul", [w, xn], name + ".mul_weight")

    def dropout(self, x, name):
        """Training graphs (--dropout P): an ONNX Dropout with ratio P where
        Megatron-LM applies one. At inference it is the identity; the planner
        counts its mask and output among what the backward pass keeps."""
        if not getattr(self, "dropout_ratio", 0):
            return x
        return self.op("Dropout", [x, self.const(self.dropout_ratio, np.float32)], name)

    def gelu(self, x, name, style):
        c = lambda v: self.const(v, np.float32)
        if style == "erf":   # x * 0.5 * (1 + erf(x / sqrt(2)))
            d = self.op("Div", [x, c(1.4142135381698608)], name + ".div")
            e = self.op("Erf", [d], name + ".erf")
            a = self.op("Add", [e, c(1.0)], name + ".add")
            m = self.op("Mul", [x, a], name + ".mul")
            return self.op("Mul", [m, c(0.5)], name + ".mul_half")
        # tanh ("gelu_new"): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        p = self.op("Pow", [x, c(3.0)], name + ".pow")
        p = self.op("Mul", [p, c(0.044715)], name + ".mul_coef")
        p = self.op("Add", [x, p], name + ".add_x")
        p = self.op("Mul", [p, c(math.sqrt(2.0 / math.pi))], name + ".mul_sqrt")
        t = self.op("Tanh", [p], name + ".tanh")
        t = self.op("Add", [t, c(1.0)], name + ".add_one")
        m = self.op("Mul", [x, t], name + ".mul")
        return self.op("Mul", [m, c(0.5)], name + ".mul_half")


# ---------------------------------------------------------------------------
# Model builders
# ---------------------------------------------------------------------------

def dims_from_ids(g, ids):
    """batch/seq as 1-D int64 tensors and the position ids [1, seq], the way
    exporters compute them: Shape -> Gather -> Unsqueeze; Range(0, seq) ->
    Reshape to [1, seq] (HF's `arange(seq).unsqueeze(0).view(-1, seq)`, with
    the -1 written as 1 so that shape inference keeps the dim `sequence`)."""
    shape = g.op("Shape", [ids], "input_shape")
    batch = g.op("Gather", [shape, g.const(0)], "batch_size", axis=0)
    seq = g.op("Gather", [shape, g.const(1)], "seq_len", axis=0)
    batch_1d = g.op("Unsqueeze", [batch, g.const([0])], "batch_size_1d")
    seq_1d = g.op("Unsqueeze", [seq, g.const([0])], "seq_len_1d")
    rng = g.op("Range", [g.const(0), seq, g.const(1)], "position_ids.range")
    shp = g.op("Concat", [g.const([1]), seq_1d], "position_ids.shape", axis=0)
    pos = g.op("Reshape", [rng, shp], "position_ids")
    return batch_1d, seq_1d, pos


def slice_rows(g, table, seq_1d, shape_parts, name):
    """table[:seq] by a Slice, then a Reshape to the shape it has anyway
    (`shape_parts` with seq_1d in it): libonnx 1.12 drops every dim after a
    Slice whose ends are computed, the Reshape (with data propagation)
    restores [.., sequence, ..]."""
    s = g.op("Slice", [table, g.const([0]), seq_1d, g.const([0])], name + "_slice")
    shp = g.op("Concat", shape_parts, name + "_shape", axis=0)
    return g.op("Reshape", [s, shp], name)


def head_shapes(g, batch_1d, seq_1d, heads, head_dim, hidden):
    split = g.op("Concat", [batch_1d, seq_1d, g.const([heads]), g.const([head_dim])],
                 "attn.split_heads_shape", axis=0)
    merge = g.op("Concat", [batch_1d, seq_1d, g.const([hidden])],
                 "attn.merge_heads_shape", axis=0)
    return split, merge


def attention_core(g, p, q, k, v, shapes, head_dim, mask, mask_kind, rope=None, kv=None):
    """q: [batch, seq, hidden], k, v: [batch, seq, kv_heads * head_dim] ->
    context [batch, seq, hidden]. `kv` = (split shape of k and v, repeat
    shape, merged shape, heads per kv head) for grouped-query attention."""
    split, merge = shapes
    heads = []
    for nm, t in (("q", q), ("k", k), ("v", v)):
        r = g.op("Reshape", [t, split if kv is None or nm == "q" else kv[0]], f"{p}.{nm}_reshape")
        heads.append(g.op("Transpose", [r], f"{p}.{nm}_transpose", perm=[0, 2, 1, 3]))
    qh, kh, vh = heads                       # [b, A, s, d]; k, v [b, KV, s, d]
    if rope is not None:
        qh, kh = rope(qh, p + ".q_rotary"), rope(kh, p + ".k_rotary")
    if kv is not None and kv[3] > 1:
        # transformers' repeat_kv: [b, KV, s, d] -> [b, KV, n, s, d] -> [b, A, s, d]
        rep = []
        for nm, t in (("k", kh), ("v", vh)):
            u = g.op("Unsqueeze", [t, g.const([2])], f"{p}.{nm}_repeat_unsqueeze")
            e = g.op("Expand", [u, kv[1]], f"{p}.{nm}_repeat_expand")
            rep.append(g.op("Reshape", [e, kv[2]], f"{p}.{nm}_repeat"))
        kh, vh = rep
    kt = g.op("Transpose", [kh], f"{p}.k_transpose_t", perm=[0, 1, 3, 2])
    s = g.op("MatMul", [qh, kt], f"{p}.scores")
    s = g.op("Div", [s, g.const(math.sqrt(head_dim), np.float32)], f"{p}.scale")
    if mask_kind == "where":
        s = g.op("Where", [mask, s, g.const(F32_MIN, np.float32)], f"{p}.causal_mask")
    else:
        s = g.op("Add", [s, mask], f"{p}.add_mask")
    pr = g.op("Softmax", [s], f"{p}.softmax", axis=-1)
    pr = g.dropout(pr, f"{p}.attn_dropout")
    ctx = g.op("MatMul", [pr, vh], f"{p}.context")
    ctx = g.op("Transpose", [ctx], f"{p}.context_transpose", perm=[0, 2, 1, 3])
    return g.op("Reshape", [ctx, merge], f"{p}.merge_heads")


def build_gpt(g, c, gelu):
    H, A, V, S, F = c["hidden"], c["heads"], c["vocab"], c["seq_max"], c["ffn"]
    eps, D = NORM_EPS[c["family"]], H // A
    ids = "input_ids"
    batch_1d, seq_1d, pos = dims_from_ids(g, ids)
    shapes = head_shapes(g, batch_1d, seq_1d, A, D, H)

    wte = g.weight("wte.weight", [V, H])
    wpe = g.weight("wpe.weight", [S, H])
    tok = g.op("Gather", [wte, ids], "wte", axis=0)
    posv = g.op("Gather", [wpe, pos], "wpe", axis=0)
    x = g.op("Add", [tok, posv], "embeddings")
    x = g.dropout(x, "embeddings_dropout")

    # HF's attn.bias buffer: lower-triangular bool [1, 1, S, S], one shared copy.
    tri = g.big_const("attn.causal_mask", [1, 1, S, S], np.bool_,
                      lambda: np.tril(np.ones((S, S), np.bool_))[None, None])
    ends = g.op("Concat", [seq_1d, seq_1d], "attn.mask_ends", axis=0)
    mask = g.op("Slice", [tri, g.const([0, 0]), ends, g.const([2, 3])], "attn.mask_slice")
    shp = g.op("Concat", [g.const([1, 1]), seq_1d, seq_1d], "attn.mask_shape", axis=0)
    mask = g.op("Reshape", [mask, shp], "attn.mask")   # restates [1,1,s,s], see slice_rows

    for i in range(c["layers"]):
        p = f"h.{i}"
        h = g.layer_norm(x, p + ".ln_1", p + ".ln_1", eps)
        qkv = g.linear(h, g.weight(p + ".attn.c_attn.weight", [H, 3 * H]),
                       g.weight(p + ".attn.c_attn.bias", [3 * H]), p + ".attn.qkv")
        q, k, v = g.op("Split", [qkv, g.const([H, H, H])], p + ".attn.split",
                       outputs=[p + ".attn.q", p + ".attn.k", p + ".attn.v"], axis=-1)
        ctx = attention_core(g, p + ".attn", q, k, v, shapes, D, mask, "where")
        o = g.linear(ctx, g.weight(p + ".attn.c_proj.weight", [H, H]),
                     g.weight(p + ".attn.c_proj.bias", [H]), p + ".attn.c_proj")
        o = g.dropout(o, p + ".attn.resid_dropout")
        x = g.op("Add", [x, o], p + ".attn.residual")
        h = g.layer_norm(x, p + ".ln_2", p + ".ln_2", eps)
        f = g.linear(h, g.weight(p + ".mlp.c_fc.weight", [H, F]),
                     g.weight(p + ".mlp.c_fc.bias", [F]), p + ".mlp.c_fc")
        f = g.gelu(f, p + ".mlp.gelu", gelu)
        f = g.linear(f, g.weight(p + ".mlp.c_proj.weight", [F, H]),
                     g.weight(p + ".mlp.c_proj.bias", [H]), p + ".mlp.c_proj")
        f = g.dropout(f, p + ".mlp.dropout")
        x = g.op("Add", [x, f], p + ".mlp.residual")

    x = g.layer_norm(x, "ln_f", "ln_f", eps)
    head = g.op("Transpose", [wte], "lm_head.tied_transpose", perm=[1, 0])
    g.op("MatMul", [x, head], "lm_head", outputs=["logits"])
    inputs = [helper.make_tensor_value_info(ids, TensorProto.INT64, ["batch", "sequence"])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                             ["batch", "sequence", V])]
    return inputs, outputs, "tied: MatMul with Transpose(wte.weight)"


def build_bert(g, c, gelu):
    H, A, V, S, F = c["hidden"], c["heads"], c["vocab"], c["seq_max"], c["ffn"]
    T, eps, D = c.get("type_vocab", 2), NORM_EPS["bert"], H // A
    ids, types, am = "input_ids", "token_type_ids", "attention_mask"
    shape = g.op("Shape", [ids], "input_shape")
    batch = g.op("Gather", [shape, g.const(0)], "batch_size", axis=0)
    seq = g.op("Gather", [shape, g.const(1)], "seq_len", axis=0)
    batch_1d = g.op("Unsqueeze", [batch, g.const([0])], "batch_size_1d")
    seq_1d = g.op("Unsqueeze", [seq, g.const([0])], "seq_len_1d")
    shapes = head_shapes(g, batch_1d, seq_1d, A, D, H)

    pre = "embeddings"
    we = g.op("Gather", [g.weight(pre + ".word_embeddings.weight", [V, H]), ids],
              pre + ".word_embeddings", axis=0)
    pe = slice_rows(g, g.weight(pre + ".position_embeddings.weight", [S, H]), seq_1d,
                    [seq_1d, g.const([H])], pre + ".position_embeddings")
    te = g.op("Gather", [g.weight(pre + ".token_type_embeddings.weight", [T, H]), types],
              pre + ".token_type_embeddings", axis=0)
    x = g.op("Add", [we, te], pre + ".add_token_type")
    x = g.op("Add", [x, pe], pre + ".add_position")
    x = g.layer_norm(x, pre + ".LayerNorm", pre + ".LayerNorm", eps)

    # extended mask [b, 1, 1, s]: (1 - mask) * float32.min
    m = g.op("Unsqueeze", [am, g.const([1, 2])], "extended_attention_mask.unsqueeze")
    m = g.op("Cast", [m], "extended_attention_mask.cast", to=TensorProto.FLOAT)
    m = g.op("Sub", [g.const(1.0, np.float32), m], "extended_attention_mask.invert")
    mask = g.op("Mul", [m, g.const(F32_MIN, np.float32)], "extended_attention_mask")

    for i in range(c["layers"]):
        p = f"encoder.layer.{i}"
        a = p + ".attention"
        qkv = [g.linear(x, g.weight(f"{a}.self.{n}.weight", [H, H]),
                        g.weight(f"{a}.self.{n}.bias", [H]), f"{a}.self.{n}")
               for n in ("query", "key", "value")]
        ctx = attention_core(g, a + ".self", *qkv, shapes, D, mask, "add")
        o = g.linear(ctx, g.weight(a + ".output.dense.weight", [H, H]),
                     g.weight(a + ".output.dense.bias", [H]), a + ".output.dense")
        o = g.op("Add", [o, x], a + ".output.residual")
        x = g.layer_norm(o, a + ".output.LayerNorm", a + ".output.LayerNorm", eps)
        f = g.linear(x, g.weight(p + ".intermediate.dense.weight", [H, F]),
                     g.weight(p + ".intermediate.dense.bias", [F]), p + ".intermediate.dense")
        f = g.gelu(f, p + ".intermediate.gelu", gelu)
        f = g.linear(f, g.weight(p + ".output.dense.weight", [F, H]),
                     g.weight(p + ".output.dense.bias", [H]), p + ".output.dense")
        f = g.op("Add", [f, x], p + ".output.residual")
        last = i == c["layers"] - 1
        x = g.layer_norm(f, p + ".output.LayerNorm", p + ".output.LayerNorm", eps,
                         out="last_hidden_state" if last else None)
    if c["layers"] == 0:
        x = g.op("Identity", [x], "last_hidden_state")

    first = g.op("Gather", [x, g.const(0)], "pooler.first_token", axis=1)
    pw = g.weight("pooler.dense.weight", [H, H])      # HF layout [out, in]
    pb = g.weight("pooler.dense.bias", [H])
    d = g.op("Gemm", [first, pw, pb], "pooler.dense", transB=1)
    g.op("Tanh", [d], "pooler.activation", outputs=["pooler_output"])

    sym = ["batch", "sequence"]
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, sym) for n in (ids, types, am)]
    outputs = [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT,
                                             ["batch", "sequence", H]),
               helper.make_tensor_value_info("pooler_output", TensorProto.FLOAT, ["batch", H])]
    return inputs, outputs, "none (encoder)"


def build_llama(g, c, gelu):
    H, A, V, S, F = c["hidden"], c["heads"], c["vocab"], c["seq_max"], c["ffn"]
    eps, D = NORM_EPS["llama"], H // A
    if D % 2:
        raise SystemExit("error: llama needs an even head_dim for rotary embeddings")
    KV = c.get("kv_heads") or A
    ids = "input_ids"
    batch_1d, seq_1d, pos = dims_from_ids(g, ids)
    shapes = head_shapes(g, batch_1d, seq_1d, A, D, H)
    kv = None
    if KV != A:
        kv = (g.op("Concat", [batch_1d, seq_1d, g.const([KV]), g.const([D])],
                   "attn.split_kv_heads_shape", axis=0),
              g.op("Concat", [batch_1d, g.const([KV]), g.const([A // KV]), seq_1d, g.const([D])],
                   "attn.repeat_kv_shape", axis=0),
              g.op("Concat", [batch_1d, g.const([A]), seq_1d, g.const([D])],
                   "attn.repeated_kv_shape", axis=0),
              A // KV)

    x = g.op("Gather", [g.weight("model.embed_tokens.weight", [V, H]), ids],
             "model.embed_tokens", axis=0)

    def table(fn):
        inv = 1.0 / (ROPE_THETA ** (np.arange(0, D, 2, dtype=np.float64) / D))
        fr = np.outer(np.arange(S, dtype=np.float64), inv)
        return fn(np.concatenate([fr, fr], axis=-1)).astype(np.float32)
    rot = {}
    for nm, fn in (("cos", np.cos), ("sin", np.sin)):
        t = g.big_const(f"model.rotary_emb.{nm}_cached", [S, D], np.float32,
                        lambda fn=fn: table(fn))
        rot[nm] = slice_rows(g, t, seq_1d, [g.const([1, 1]), seq_1d, g.const([D])],
                             f"model.rotary_emb.{nm}")           # [1, 1, s, D]

    def rope(t, name):       # t * cos + rotate_half(t) * sin
        x1 = g.op("Slice", [t, g.const([0]), g.const([D // 2]), g.const([3])], name + ".x1")
        x2 = g.op("Slice", [t, g.const([D // 2]), g.const([D]), g.const([3])], name + ".x2")
        n2 = g.op("Neg", [x2], name + ".neg_x2")
        rh = g.op("Concat", [n2, x1], name + ".rotate_half", axis=-1)
        a = g.op("Mul", [t, rot["cos"]], name + ".mul_cos")
        b = g.op("Mul", [rh, rot["sin"]], name + ".mul_sin")
        return g.op("Add", [a, b], name)

    # causal mask [1, 1, s, s]: key position <= query position
    rows = g.op("Unsqueeze", [pos, g.const([2])], "causal_mask.rows")     # [1, s, 1]
    cols = g.op("Unsqueeze", [pos, g.const([1])], "causal_mask.cols")     # [1, 1, s]
    mask = g.op("GreaterOrEqual", [rows, cols], "causal_mask.cmp")        # [1, s, s]
    mask = g.op("Unsqueeze", [mask, g.const([1])], "causal_mask")

    for i in range(c["layers"]):
        p = f"model.layers.{i}"
        a = p + ".self_attn"
        h = g.rms_norm(x, p + ".input_layernorm", p + ".input_layernorm", eps)
        qkv = [g.linear(h, g.weight(f"{a}.{n}_proj.weight", [H, H if n == "q" else KV * D]),
                        None, f"{a}.{n}_proj")
               for n in ("q", "k", "v")]
        ctx = attention_core(g, a, *qkv, shapes, D, mask, "where", rope=rope, kv=kv)
        o = g.linear(ctx, g.weight(a + ".o_proj.weight", [H, H]), None, a + ".o_proj")
        x = g.op("Add", [x, o], a + ".residual")
        h = g.rms_norm(x, p + ".post_attention_layernorm", p + ".post_attention_layernorm", eps)
        m = p + ".mlp"
        gt = g.linear(h, g.weight(m + ".gate_proj.weight", [H, F]), None, m + ".gate_proj")
        sg = g.op("Sigmoid", [gt], m + ".act_fn.sigmoid")
        gt = g.op("Mul", [gt, sg], m + ".act_fn")
        up = g.linear(h, g.weight(m + ".up_proj.weight", [H, F]), None, m + ".up_proj")
        gu = g.op("Mul", [gt, up], m + ".gate_mul_up")
        dn = g.linear(gu, g.weight(m + ".down_proj.weight", [F, H]), None, m + ".down_proj")
        x = g.op("Add", [x, dn], m + ".residual")

    x = g.rms_norm(x, "model.norm", "model.norm", eps)
    g.op("MatMul", [x, g.weight("lm_head.weight", [H, V])], "lm_head", outputs=["logits"])
    inputs = [helper.make_tensor_value_info(ids, TensorProto.INT64, ["batch", "sequence"])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                             ["batch", "sequence", V])]
    return inputs, outputs, "separate lm_head.weight [hidden, vocab]"


BUILDERS = {"gpt2": build_gpt, "gpt3": build_gpt, "bert": build_bert, "llama": build_llama}


# ---------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------

def set_external(t, location, offset, length):
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    del t.external_data[:]
    for k, v in (("location", location), ("offset", str(offset)), ("length", str(length))):
        e = t.external_data.add()
        e.key, e.value = k, v


def place(deferred, location, sink=None):
    """Lay the deferred tensors out in the data file; write them if `sink`."""
    pos = 0
    for d in deferred:
        align = ALIGN_LARGE if d.nbytes >= (1 << 20) else ALIGN_SMALL
        pad = (-pos) % align
        if sink is not None and pad:
            sink.write(b"\0" * pad)
        pos += pad
        if sink is not None:
            a = np.ascontiguousarray(d.make(), dtype=d.dtype.newbyteorder("<"))
            assert a.nbytes == d.nbytes
            sink.write(a.tobytes(order="C"))
            del a
        set_external(d.proto, location, pos, d.nbytes)
        pos += d.nbytes
    return pos


def infer(skeleton, declared):
    """Strict shape inference (with data propagation) on the weight-less
    skeleton, its graph outputs' shapes cleared so that the shapes compared
    with the declared ones are derived, not copied."""
    m = onnx.ModelProto()
    m.CopyFrom(skeleton)
    for o in m.graph.output:
        o.type.tensor_type.ClearField("shape")
    inferred = onnx.shape_inference.infer_shapes(m, strict_mode=True, data_prop=True)
    shapes = {o.name: [d.dim_param or d.dim_value or "?" for d in o.type.tensor_type.shape.dim]
              for o in inferred.graph.output}
    for name, want in declared.items():
        if shapes.get(name) != want:
            raise SystemExit(f"error: output {name}: inferred {shapes.get(name)}, declared {want}")
    return shapes


def run_checker(model_bytes, out, mode):
    """onnx.checker on the written file. It stat()s external data files, so
    in `none` mode a copy is checked beside an empty placeholder .data."""
    if mode != "none":
        onnx.checker.check_model(out)
        return
    tmp = tempfile.mkdtemp(prefix="gen_transformer_check.")
    try:
        p = os.path.join(tmp, os.path.basename(out))
        with open(p, "wb") as f:
            f.write(model_bytes)
        open(p + ".data", "wb").close()
        onnx.checker.check_model(p)
    finally:
        shutil.rmtree(tmp)


def human(n):
    for unit, div in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= div:
            return f"{n / div:.2f}{unit}"
    return str(n)


def parse_int(s):
    return int(s.replace(",", "").replace("_", ""))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", choices=sorted(BUILDERS))
    ap.add_argument("--config", choices=sorted(CONFIGS))
    for k in ("layers", "hidden", "heads", "vocab", "seq-max", "ffn"):
        ap.add_argument("--" + k, type=int)
    ap.add_argument("--kv-heads", type=int,
                    help="llama: key/value heads (grouped-query attention; default: --heads)")
    ap.add_argument("--name", help="the graph's name (default: the config, with what "
                                   "the size options changed: llama2-13b-layers80-hidden8192)")
    ap.add_argument("--weights", choices=["inline", "external", "none"], default="inline")
    ap.add_argument("-o", "--output")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gelu", choices=["erf", "tanh"], default="erf",
                    help="GELU decomposition (GPT-2 itself uses tanh, 'gelu_new')")
    ap.add_argument("--dropout", type=float, default=0.0, metavar="P",
                    help="GPT only: Dropout(P) nodes where Megatron-LM trains with them "
                         "(embeddings, attention probabilities, after the attention and "
                         "MLP projections); default none (an inference export)")
    ap.add_argument("--check-params", type=parse_int, metavar="N",
                    help="fail unless the parameter count is exactly N")
    ap.add_argument("--no-check", action="store_true",
                    help="skip onnx.checker and strict shape inference")
    ap.add_argument("--list", action="store_true", help="list the configs and exit")
    args = ap.parse_args(argv)

    if args.list:
        for n, c in CONFIGS.items():
            print(n, c)
        return 0
    if not (args.family and args.config and args.output):
        ap.error("--family, --config and -o are required")
    c = dict(CONFIGS[args.config])
    if c["family"] != args.family:
        ap.error(f"config {args.config} is of family {c['family']}, not {args.family}")
    changed = []
    for k in ("layers", "hidden", "heads", "kv_heads", "vocab", "seq_max", "ffn"):
        v = getattr(args, k)
        if v is not None:
            if v < (0 if k == "layers" else 1):
                ap.error(f"--{k.replace('_', '-')} must be positive")
            if v != c.get(k):
                changed.append(f"{k.replace('_', '')}{v}")
            c[k] = v
    c.setdefault("ffn", 4 * c["hidden"])
    if c["hidden"] % c["heads"]:
        ap.error(f"hidden {c['hidden']} is not a multiple of heads {c['heads']}")
    if args.kv_heads is not None and c["family"] != "llama":
        ap.error("--kv-heads is for the llama family (grouped-query attention)")
    c.setdefault("kv_heads", c["heads"])
    if c["heads"] % c["kv_heads"]:
        ap.error(f"heads {c['heads']} is not a multiple of kv-heads {c['kv_heads']}")
    # A model made bigger or smaller than its config is not that config:
    # the graph (and every plan's summary) says what it is.
    name = args.name or "-".join([args.config] + changed)

    t0 = time.perf_counter()
    g = Graph(np.random.default_rng(args.seed))
    g.hidden = c["hidden"]
    g.dropout_ratio = args.dropout
    inputs, outputs, head = BUILDERS[args.family](g, c, args.gelu)
    params = sum(d.numel for d in g.deferred if d.is_weight)
    weight_bytes = sum(d.nbytes for d in g.deferred if d.is_weight)

    out = args.output
    location = os.path.basename(out) + ".data"
    data_path = out + ".data"
    total = sum(d.nbytes for d in g.deferred)
    if args.weights == "inline" and total > PROTOBUF_LIMIT:
        sys.exit(f"error: {total} bytes of weights cannot be inline (protobuf's 2 GiB "
                 "limit); use --weights external or none")
    # Lay out the data file without writing it: this is the `none` model, and
    # the weight-less skeleton the shape inference runs on in every mode.
    data_size = place(g.deferred, location, None)

    graph = helper.make_graph(g.nodes, name, inputs, outputs, g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="hetplan models/gen_transformer.py",
                              producer_version="1")
    model.ir_version = IR_VERSION
    cfg = ", ".join(f"{k}={c[k]}" for k in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab",
                                            "seq_max"))
    model.doc_string = (f"{args.config} ({args.family}): {cfg}; {params} parameters; "
                        f"weights {args.weights}, seed {args.seed}; LM head {head}")
    helper.set_model_props(model, {
        "family": args.family, "config": args.config, "parameters": str(params),
        "weights": args.weights, "seed": str(args.seed), "lm_head": head,
        "gelu": args.gelu if args.family != "llama" else "none (SwiGLU)",
        **{k: str(c[k]) for k in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab",
                                  "seq_max")}})
    shapes = None
    if not args.no_check:
        declared = {o.name: [d.dim_param or d.dim_value for d in o.type.tensor_type.shape.dim]
                    for o in outputs}
        shapes = infer(model, declared)

    # make_graph copied the initializers: fill the copies in the model.
    protos = {t.name: t for t in model.graph.initializer}
    for d in g.deferred:
        d.proto = protos[d.proto.name]
    if args.weights == "inline":
        for d in g.deferred:
            d.proto.ClearField("data_location")
            del d.proto.external_data[:]
            d.proto.raw_data = np.ascontiguousarray(
                d.make(), dtype=d.dtype.newbyteorder("<")).tobytes()
    elif args.weights == "external":
        with open(data_path, "wb") as f:
            assert place(g.deferred, location, f) == data_size
    elif os.path.exists(data_path) and os.path.getsize(data_path) != data_size:
        print(f"warning: {data_path} exists from an earlier run and does not match "
              f"this layout ({os.path.getsize(data_path)} != {data_size} bytes)",
              file=sys.stderr)
    blob = model.SerializeToString()
    with open(out, "wb") as f:
        f.write(blob)
    del model
    t_write = time.perf_counter() - t0

    status = 0
    if not args.no_check:
        run_checker(blob, out, args.weights)
        print("check: onnx.checker ok, strict shape inference ok; inferred outputs "
              + ", ".join(f"{n}{s}" for n, s in shapes.items()))
    del blob
    t_all = time.perf_counter() - t0

    size = os.path.getsize(out)
    files = f"{out} ({size:,} bytes)"
    if args.weights == "external":
        files += f" + {data_path} ({os.path.getsize(data_path):,} bytes)"
    elif args.weights == "none":
        files += f"; {data_path} not written (would be {data_size:,} bytes)"
    print(f"{name}: {cfg}; {len(g.nodes)} nodes, {len(g.inits)} initializers")
    print(f"wrote {files} in {t_write:.2f} s ({t_all:.2f} s with checks)")
    print(f"LM head: {head}")
    print(f"parameters: {params:,} ({human(params)}), {weight_bytes:,} bytes float32")
    if args.check_params is not None and params != args.check_params:
        print(f"error: parameter count {params:,} != expected {args.check_params:,}",
              file=sys.stderr)
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
