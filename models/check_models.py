#!/usr/bin/python3
"""Run models written by gen_transformer.py with onnxruntime and compare them
with a numpy re-implementation of the same transformer.

    PYTHON models/check_models.py MODEL.onnx [MODEL.onnx ...] [--batch 2] [--seq 7]

PYTHON needs onnx and onnxruntime (Debian's python3 has onnx 1.12 but no
onnxruntime; a venv made with `/usr/bin/python3 -m venv --system-site-packages
/tmp/ortvenv && /tmp/ortvenv/bin/pip install onnxruntime` has both).

For each model (family and sizes read from its metadata_props) on random
input_ids [batch, seq] (BERT: also token_type_ids and an attention_mask whose
last two positions of row 0 are padding):
  * the output shapes must be [batch, seq, vocab] (BERT: [batch, seq, hidden]
    and [batch, hidden]);
  * the outputs must match the numpy reference (max abs diff <= 1e-4, scaled);
  * causality (gpt2/gpt3/llama): changing the last token leaves the logits of
    every earlier position unchanged; masking (bert): changing a padded token
    leaves the unpadded positions of that row unchanged.
Prints one line per model; exits 1 if any check fails.
"""

import argparse
import math
import sys

import numpy as np
import onnx
from onnx import numpy_helper

_erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu(x, style):
    x = x.astype(np.float64)
    if style == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


def layer_norm(x, w, b, eps):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * w + b


def rms_norm(x, w, eps):
    return w * (x / np.sqrt((x ** 2).mean(-1, keepdims=True) + eps))


def softmax(x):
    x = x - x.max(-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(-1, keepdims=True)


def attend(q, k, v, A, add_mask=None, causal=False, rope=None):
    b, s, H = q.shape
    D = H // A
    sh = lambda t: t.reshape(b, s, A, D).transpose(0, 2, 1, 3)
    q, k, v = sh(q), sh(k), sh(v)
    if rope is not None:
        q, k = rope(q), rope(k)
    sc = q @ k.transpose(0, 1, 3, 2) / math.sqrt(D)
    if causal:
        sc = np.where(np.tril(np.ones((s, s), bool)), sc, np.finfo(np.float32).min)
    if add_mask is not None:
        sc = sc + add_mask
    return (softmax(sc) @ v).transpose(0, 2, 1, 3).reshape(b, s, H)


def reference(W, meta, feeds):
    fam, L, A = meta["family"], int(meta["layers"]), int(meta["heads"])
    ids = feeds["input_ids"]
    s = ids.shape[1]
    style = meta.get("gelu", "erf")
    if fam in ("gpt2", "gpt3"):
        x = W["wte.weight"][ids] + W["wpe.weight"][np.arange(s)][None]
        for i in range(L):
            p = f"h.{i}."
            h = layer_norm(x, W[p + "ln_1.weight"], W[p + "ln_1.bias"], 1e-5)
            qkv = h @ W[p + "attn.c_attn.weight"] + W[p + "attn.c_attn.bias"]
            q, k, v = np.split(qkv, 3, axis=-1)
            a = attend(q, k, v, A, causal=True)
            x = x + a @ W[p + "attn.c_proj.weight"] + W[p + "attn.c_proj.bias"]
            h = layer_norm(x, W[p + "ln_2.weight"], W[p + "ln_2.bias"], 1e-5)
            f = gelu(h @ W[p + "mlp.c_fc.weight"] + W[p + "mlp.c_fc.bias"], style)
            x = x + f @ W[p + "mlp.c_proj.weight"] + W[p + "mlp.c_proj.bias"]
        x = layer_norm(x, W["ln_f.weight"], W["ln_f.bias"], 1e-5)
        return {"logits": x @ W["wte.weight"].T}
    if fam == "bert":
        e = "embeddings."
        x = (W[e + "word_embeddings.weight"][ids]
             + W[e + "token_type_embeddings.weight"][feeds["token_type_ids"]]
             + W[e + "position_embeddings.weight"][:s][None])
        x = layer_norm(x, W[e + "LayerNorm.weight"], W[e + "LayerNorm.bias"], 1e-12)
        am = (1.0 - feeds["attention_mask"][:, None, None, :]) * np.finfo(np.float32).min
        for i in range(L):
            p = f"encoder.layer.{i}."
            a = p + "attention."
            lin = lambda t, n: t @ W[n + ".weight"] + W[n + ".bias"]
            q, k, v = (lin(x, a + "self." + n) for n in ("query", "key", "value"))
            o = lin(attend(q, k, v, A, add_mask=am), a + "output.dense")
            x = layer_norm(o + x, W[a + "output.LayerNorm.weight"],
                           W[a + "output.LayerNorm.bias"], 1e-12)
            f = lin(gelu(lin(x, p + "intermediate.dense"), style), p + "output.dense")
            x = layer_norm(f + x, W[p + "output.LayerNorm.weight"],
                           W[p + "output.LayerNorm.bias"], 1e-12)
        pooled = np.tanh(x[:, 0] @ W["pooler.dense.weight"].T + W["pooler.dense.bias"])
        return {"last_hidden_state": x, "pooler_output": pooled}
    if fam == "llama":
        H = int(meta["hidden"])
        D = H // A
        inv = 1.0 / (10000.0 ** (np.arange(0, D, 2) / D))
        fr = np.outer(np.arange(s), inv)
        emb = np.concatenate([fr, fr], -1)
        cos, sin = np.cos(emb), np.sin(emb)

        def rope(t):
            rh = np.concatenate([-t[..., D // 2:], t[..., :D // 2]], -1)
            return t * cos + rh * sin
        x = W["model.embed_tokens.weight"][ids]
        for i in range(L):
            p = f"model.layers.{i}."
            a = p + "self_attn."
            h = rms_norm(x, W[p + "input_layernorm.weight"], 1e-5)
            q, k, v = (h @ W[a + n + "_proj.weight"] for n in "qkv")
            x = x + attend(q, k, v, A, causal=True, rope=rope) @ W[a + "o_proj.weight"]
            h = rms_norm(x, W[p + "post_attention_layernorm.weight"], 1e-5)
            g = h @ W[p + "mlp.gate_proj.weight"]
            g = g / (1 + np.exp(-g))
            x = x + (g * (h @ W[p + "mlp.up_proj.weight"])) @ W[p + "mlp.down_proj.weight"]
        x = rms_norm(x, W["model.norm.weight"], 1e-5)
        return {"logits": x @ W["lm_head.weight"]}
    raise ValueError(fam)


def check(path, batch, seq, rng):
    import onnxruntime as ort
    model = onnx.load(path)          # loads external data too
    meta = {p.key: p.value for p in model.metadata_props}
    fam = meta["family"]
    W = {t.name: numpy_helper.to_array(t).astype(np.float64)
         if t.data_type == onnx.TensorProto.FLOAT else numpy_helper.to_array(t)
         for t in model.graph.initializer}
    V, H = int(meta["vocab"]), int(meta["hidden"])
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    feeds = {"input_ids": rng.integers(0, V, (batch, seq), dtype=np.int64)}
    if fam == "bert":
        feeds["token_type_ids"] = rng.integers(0, 2, (batch, seq), dtype=np.int64)
        am = np.ones((batch, seq), np.int64)
        am[0, -2:] = 0
        feeds["attention_mask"] = am
    names = [o.name for o in sess.get_outputs()]
    got = dict(zip(names, sess.run(None, feeds)))
    want_shapes = ({"last_hidden_state": (batch, seq, H), "pooler_output": (batch, H)}
                   if fam == "bert" else {"logits": (batch, seq, V)})
    problems = []
    for n, shp in want_shapes.items():
        if got[n].shape != shp:
            problems.append(f"{n} shape {got[n].shape} != {shp}")
    ref = reference(W, meta, feeds)
    diffs = {}
    for n, r in ref.items():
        d = float(np.abs(got[n] - r).max())
        diffs[n] = d
        if not d <= 1e-4 * max(1.0, float(np.abs(r).max())):
            problems.append(f"{n} differs from numpy by {d:.3g}")
    f2 = {k: v.copy() for k, v in feeds.items()}
    if fam == "bert":
        f2["input_ids"][0, -1] = (f2["input_ids"][0, -1] + 1) % V
        o2 = dict(zip(names, sess.run(None, f2)))["last_hidden_state"]
        d = float(np.abs(o2[0, :-2] - got["last_hidden_state"][0, :-2]).max())
        what = "padding mask"
    else:
        f2["input_ids"][:, -1] = (f2["input_ids"][:, -1] + 1) % V
        o2 = dict(zip(names, sess.run(None, f2)))["logits"]
        d = float(np.abs(o2[:, :-1] - got["logits"][:, :-1]).max())
        what = "causality"
    if d > 1e-5:
        problems.append(f"{what} broken: diff {d:.3g}")
    shapes = ", ".join(f"{n}{list(got[n].shape)}" for n in names)
    diff = ", ".join(f"{n} {v:.2e}" for n, v in diffs.items())
    status = "FAIL: " + "; ".join(problems) if problems else "ok"
    print(f"{path}: {meta['config']}: {shapes}; max |ort - numpy|: {diff}; "
          f"{what} diff {d:.1e}: {status}")
    return not problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=7)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    ok = all([check(m, args.batch, args.seq, rng) for m in args.models])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
