#!/usr/bin/env python3
"""Write models/generate/: generation exports as packages ship them, with
onnxruntime's greedy tokens.

Two layouts that `hetplan serve` must run as onnxruntime's own loop runs them,
each from both PyTorch exporters (TorchScript, `dynamo=False`, opset 17:
`-ts`; dynamo, opset 18: `-dyn`):

* decode-step-only decoders (`qwen2-step-*.onnx`): a Qwen2 decoder whose
  `input_ids` is fixed at one token per run ([batch, 1]), with attention_mask,
  position_ids and past_key_values.N.key/value -> present.N.key/value. A
  prompt runs token by token. `qwen2-chunk4-ts.onnx`, the same weights fixed
  at [batch, 4]: its tokens are checked against the step decoder's.
* encoder-decoders in the three-file layout of Hugging Face optimum
  (`t5-kv-*/`, `whisper-kv-*/`): `encoder_model.onnx` (input_ids and
  attention_mask, or input_features -> last_hidden_state), `decoder_model.onnx`
  (the first step: input_ids, encoder_hidden_states[, encoder_attention_mask]
  -> logits and present.N.decoder.* / present.N.encoder.* caches) and
  `decoder_with_past_model.onnx` (input_ids [batch, 1] and the caches ->
  logits and present.N.decoder.*: the cross-attention cache is made once).

Tiny random models (torch seed 0, then N(0, 0.02) noise: models/hf/README.md
says why; the encoder-decoders N(0, 1) or N(0, 0.5) more, so that their tokens
depend on what the encoder reads); nothing is downloaded. `generate.json` holds the requests (numpy
seed 1) and, per model, onnxruntime's greedy tokens from the plain loop a user
writes against these files (batch 1, caches fed back; one CPU thread).

    python models/export_generate.py [-o models/generate]

Needs torch, transformers, onnx, onnxscript, onnxruntime (versions in
generate.json).
"""
import argparse
import json
import os
import sys
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import torch
import transformers
from transformers import DynamicCache, EncoderDecoderCache

warnings.filterwarnings("ignore")
HERE = os.path.dirname(os.path.abspath(__file__))
VOCAB = 256
sys.path.insert(0, HERE)
from export_zoo import noise, rename_dims, strip_metadata  # noqa: E402


def tf(cls_name, config_name, sharpen=0.0, **cfg):
    config = getattr(transformers, config_name)(**cfg)
    torch.manual_seed(0)
    model = noise(getattr(transformers, cls_name)(config))
    # N(0, sharpen) more on every weight: with the zoo's 0.02 alone these
    # tiny encoder-decoders answer one token whatever the encoder reads, and
    # a test of them could not tell a lost cross-attention cache.
    if sharpen:
        torch.manual_seed(3)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * sharpen)
    return model


class Fn(torch.nn.Module):
    def __init__(self, model, names, fn):
        super().__init__()
        self.model, self.names, self.fn = model, names, fn

    def forward(self, *args):
        return tuple(self.fn(self.model, **dict(zip(self.names, args))))


def layers_of(cache):
    if hasattr(cache, "layers"):
        return [(l.keys, l.values) for l in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache))


def export(fn_module, inputs, dynamic, outputs, output_dynamic, path, exporter):
    names = list(inputs)
    args = tuple(inputs.values())
    if exporter == "ts":
        axes = {n: dict(d) for n, d in dynamic.items()}
        for o in outputs:
            axes[o] = output_dynamic.get(o, {0: "batch"})
        with torch.no_grad():
            torch.onnx.export(fn_module, args, path, dynamo=False, opset_version=17, input_names=names,
                              output_names=outputs, dynamic_axes=axes, do_constant_folding=True)
    else:
        dyn = tuple({a: torch.export.Dim.DYNAMIC for a in dynamic.get(n, {})} or None for n in names)
        with torch.no_grad():
            program = torch.onnx.export(fn_module, args, dynamo=True, opset_version=18, input_names=names,
                                        output_names=outputs, dynamic_shapes={"args": dyn},
                                        external_data=False)
        m = program.model_proto
        rename_dims(m, {"dynamic": dynamic}, names)
        onnx.save(m, path)
    m = onnx.load(path)
    strip_metadata(m)
    onnx.checker.check_model(m)
    onnx.save(m, path)
    # The export computes what torch computes.
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    got = s.run(outputs, {n: t.numpy() for n, t in inputs.items()})
    with torch.no_grad():
        want = fn_module(*args)
    for o, g, w in zip(outputs, got, want):
        assert g.shape == tuple(w.shape), (path, o, g.shape, w.shape)
        err = float(np.max(np.abs(g - w.numpy()))) if g.size else 0.0
        assert err < 1e-3, (path, o, err)
    print(f"{path}: {os.path.getsize(path):,} B, {len(m.graph.node)} nodes", file=sys.stderr)


# ---------------------------------------------------------------------------
# decode-step-only decoder


def qwen2():
    return tf("Qwen2ForCausalLM", "Qwen2Config", hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, intermediate_size=64, vocab_size=VOCAB, max_position_embeddings=128,
              use_cache=True, attn_implementation="eager")


def export_step(path, exporter, chunk=1):
    """input_ids fixed at [batch, chunk]."""
    model = qwen2()
    L, H, D = 2, 2, 8
    g = torch.Generator().manual_seed(1)
    past = 5
    inputs = {"input_ids": torch.randint(2, VOCAB, (2, chunk), generator=g),
              "attention_mask": torch.ones(2, past + chunk, dtype=torch.int64),
              "position_ids": torch.arange(past, past + chunk).repeat(2, 1)}
    dynamic = {"input_ids": {0: "batch"}, "attention_mask": {0: "batch", 1: "total_sequence"},
               "position_ids": {0: "batch"}}
    for i in range(L):
        for kv in ("key", "value"):
            n = f"past_key_values.{i}.{kv}"
            inputs[n] = torch.randn(2, H, past, D, generator=g)
            dynamic[n] = {0: "batch", 2: "past_sequence"}

    def fn(model, input_ids, attention_mask, position_ids, **kv):
        cache = DynamicCache()
        for i in range(L):
            cache.update(kv[f"past_key_values.{i}.key"], kv[f"past_key_values.{i}.value"], i)
        out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                    past_key_values=cache, use_cache=True, return_dict=True)
        res = [out.logits]
        for k, v in layers_of(out.past_key_values):
            res += [k, v]
        return res
    outs = ["logits"] + [f"present.{i}.{kv}" for i in range(L) for kv in ("key", "value")]
    od = {o: {0: "batch", 2: "total_sequence"} for o in outs[1:]}
    export(Fn(model, list(inputs), fn).eval(), inputs, dynamic, outs, od, path, exporter)


def greedy_step(session, prompt, n):
    """The loop a user writes against a decode-step-only export."""
    pasts = [i for i in session.get_inputs() if i.name.startswith("past_key_values.")]
    feeds = {i.name: np.zeros((1, 2, 0, 8), np.float32) for i in pasts}
    names = [o.name for o in session.get_outputs()]
    out, tokens, pos = [], list(prompt), 0
    while len(out) < n:
        todo = tokens if pos == 0 else [out[-1]]
        for t in todo:
            r = dict(zip(names, session.run(None, {
                "input_ids": np.array([[t]], np.int64),
                "attention_mask": np.ones((1, pos + 1), np.int64),
                "position_ids": np.array([[pos]], np.int64), **feeds})))
            feeds = {i.name: r[i.name.replace("past_key_values.", "present.", 1)] for i in pasts}
            pos += 1
        out.append(int(np.argmax(r["logits"][0, -1])))
    return out


# ---------------------------------------------------------------------------
# encoder-decoders, optimum's three files


def t5():
    return tf("T5ForConditionalGeneration", "T5Config", d_model=32, d_kv=8, d_ff=64, num_layers=2,
              num_decoder_layers=2, num_heads=4, vocab_size=VOCAB, decoder_start_token_id=0, sharpen=1.0)


def whisper():
    return tf("WhisperForConditionalGeneration", "WhisperConfig", num_mel_bins=16, d_model=32,
              encoder_layers=1, decoder_layers=2, encoder_attention_heads=2, decoder_attention_heads=2,
              encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=VOCAB, max_source_positions=16,
              max_target_positions=64, pad_token_id=0, bos_token_id=1, eos_token_id=1,
              decoder_start_token_id=1, sharpen=0.5)


SEQ2SEQ = {"t5": (t5, 2, 4, 8, True), "whisper": (whisper, 2, 2, 16, False)}


def export_seq2seq(family, out_dir, exporter):
    build, L, H, D, text = SEQ2SEQ[family]
    model = build()
    os.makedirs(out_dir, exist_ok=True)
    g = torch.Generator().manual_seed(1)
    enc_len = 7
    if text:
        enc_in = {"input_ids": torch.randint(2, VOCAB, (2, enc_len), generator=g),
                  "attention_mask": torch.ones(2, enc_len, dtype=torch.int64)}
        enc_dyn = {"input_ids": {0: "batch", 1: "encoder_sequence"},
                   "attention_mask": {0: "batch", 1: "encoder_sequence"}}
    else:
        enc_in = {"input_features": torch.randn(2, 16, 32, generator=g)}
        enc_dyn = {"input_features": {0: "batch"}}
        enc_len = 16

    def encode(model, **kw):
        return [model.get_encoder()(**kw, return_dict=True).last_hidden_state]
    export(Fn(model, list(enc_in), encode).eval(), enc_in, enc_dyn, ["last_hidden_state"],
           {"last_hidden_state": {0: "batch", 1: "encoder_sequence"}},
           os.path.join(out_dir, "encoder_model.onnx"), exporter)

    with torch.no_grad():
        hidden = model.get_encoder()(**enc_in, return_dict=True).last_hidden_state
    self_names = [f"{i}.decoder.{kv}" for i in range(L) for kv in ("key", "value")]
    cross_names = [f"{i}.encoder.{kv}" for i in range(L) for kv in ("key", "value")]

    def run_decoder(model, input_ids, encoder_hidden_states=None, encoder_attention_mask=None, cache=None):
        kw = dict(decoder_input_ids=input_ids, use_cache=True, return_dict=True,
                  past_key_values=cache if cache is not None else EncoderDecoderCache(DynamicCache(), DynamicCache()))
        if encoder_hidden_states is not None:
            kw["encoder_outputs"] = (encoder_hidden_states,)
        else:
            # Only the cross caches are read; the encoder output's shape must still be given.
            kw["encoder_outputs"] = (torch.zeros(input_ids.shape[0], 1, model.config.d_model),)
        if encoder_attention_mask is not None:
            kw["attention_mask"] = encoder_attention_mask
        return model(**kw)

    # decoder_model: the first step.
    first_in = {"input_ids": torch.randint(2, VOCAB, (2, 3), generator=g)}
    first_dyn = {"input_ids": {0: "batch", 1: "decoder_sequence"}}
    if text:
        first_in["encoder_attention_mask"] = enc_in["attention_mask"]
        first_dyn["encoder_attention_mask"] = {0: "batch", 1: "encoder_sequence"}
    first_in["encoder_hidden_states"] = hidden
    first_dyn["encoder_hidden_states"] = {0: "batch", 1: "encoder_sequence"}

    def first(model, input_ids, encoder_hidden_states, encoder_attention_mask=None):
        out = run_decoder(model, input_ids, encoder_hidden_states, encoder_attention_mask)
        res = [out.logits]
        for k, v in layers_of(out.past_key_values.self_attention_cache):
            res += [k, v]
        for k, v in layers_of(out.past_key_values.cross_attention_cache):
            res += [k, v]
        return res
    first_out = ["logits"] + ["present." + n for n in self_names + cross_names]
    od = {"present." + n: {0: "batch", 2: "decoder_sequence"} for n in self_names}
    od.update({"present." + n: {0: "batch", 2: "encoder_sequence"} for n in cross_names})
    od["logits"] = {0: "batch", 1: "decoder_sequence"}
    export(Fn(model, list(first_in), first).eval(), first_in, first_dyn, first_out, od,
           os.path.join(out_dir, "decoder_model.onnx"), exporter)

    # decoder_with_past_model: one token after the caches.
    with torch.no_grad():
        made = first(model, **first_in)
    past_in = {"input_ids": torch.randint(2, VOCAB, (2, 1), generator=g)}
    past_dyn = {"input_ids": {0: "batch"}}
    if text:
        past_in["encoder_attention_mask"] = enc_in["attention_mask"]
        past_dyn["encoder_attention_mask"] = {0: "batch", 1: "encoder_sequence"}
    for n, t in zip(self_names + cross_names, made[1:]):
        past_in["past_key_values." + n] = t
        past_dyn["past_key_values." + n] = {0: "batch", 2: "past_decoder_sequence" if ".decoder." in n
                                            else "encoder_sequence"}

    def step(model, input_ids, encoder_attention_mask=None, **kv):
        sa, ca = DynamicCache(), DynamicCache()
        for i in range(L):
            sa.update(kv[f"past_key_values.{i}.decoder.key"], kv[f"past_key_values.{i}.decoder.value"], i)
            ca.update(kv[f"past_key_values.{i}.encoder.key"], kv[f"past_key_values.{i}.encoder.value"], i)
        cache = EncoderDecoderCache(sa, ca)
        for i in range(L):
            cache.is_updated[i] = True  # the cross caches are given: not recomputed
        out = run_decoder(model, input_ids, None, encoder_attention_mask, cache)
        res = [out.logits]
        for k, v in layers_of(out.past_key_values.self_attention_cache):
            res += [k, v]
        return res
    past_out = ["logits"] + ["present." + n for n in self_names]
    od = {"present." + n: {0: "batch", 2: "decoder_sequence"} for n in self_names}
    export(Fn(model, list(past_in), step).eval(), past_in, past_dyn, past_out, od,
           os.path.join(out_dir, "decoder_with_past_model.onnx"), exporter)

    # The three files together decode as the torch model does.
    with torch.no_grad():
        full = model(**enc_in, decoder_input_ids=torch.cat([first_in["input_ids"], past_in["input_ids"]], 1),
                     return_dict=True).logits[:, -1]
        mine = step(model, **past_in)[0][:, -1]
    assert float((full - mine).abs().max()) < 1e-4, (out_dir, float((full - mine).abs().max()))


def greedy_seq2seq(encoder, first, step, enc_feeds, prompt, n):
    """The loop a user writes against optimum's three files."""
    hidden = encoder.run(None, enc_feeds)[0]
    mask = enc_feeds.get("attention_mask")
    first_names = [o.name for o in first.get_outputs()]
    feeds = {"input_ids": np.array([prompt], np.int64), "encoder_hidden_states": hidden}
    if mask is not None:
        feeds["encoder_attention_mask"] = mask
    r = dict(zip(first_names, first.run(None, feeds)))
    out = [int(np.argmax(r["logits"][0, -1]))]
    caches = {k.replace("present.", "past_key_values.", 1): v for k, v in r.items() if k.startswith("present.")}
    step_names = [o.name for o in step.get_outputs()]
    while len(out) < n:
        feeds = {"input_ids": np.array([[out[-1]]], np.int64), **caches}
        if mask is not None:
            feeds["encoder_attention_mask"] = mask
        r = dict(zip(step_names, step.run(None, feeds)))
        out.append(int(np.argmax(r["logits"][0, -1])))
        caches.update({k.replace("present.", "past_key_values.", 1): v for k, v in r.items()
                       if k.startswith("present.")})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-o", default=os.path.join(HERE, "generate"))
    a = ap.parse_args()
    os.makedirs(a.o, exist_ok=True)
    for ex in ("ts", "dyn"):
        export_step(os.path.join(a.o, f"qwen2-step-{ex}.onnx"), ex)
        for fam in SEQ2SEQ:
            export_seq2seq(fam, os.path.join(a.o, f"{fam}-kv-{ex}"), ex)
    # A decoder fixed at four tokens per run (the same weights): its greedy
    # tokens are the step decoder's whatever the padding in its runs.
    export_step(os.path.join(a.o, "qwen2-chunk4-ts.onnx"), "ts", chunk=4)

    rng = np.random.default_rng(1)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = lambda p: ort.InferenceSession(p, so, providers=["CPUExecutionProvider"])
    step_requests = [{"id": f"s{i}", "prompt": rng.integers(2, VOCAB, int(rng.integers(1, 12))).tolist(),
                      "max_new_tokens": int(rng.integers(1, 12))} for i in range(8)]
    t5_requests = [{"id": f"t{i}", "prompt": [0],
                    "encoder": {"input_ids": rng.integers(2, VOCAB, int(rng.integers(1, 12))).tolist()},
                    "max_new_tokens": int(rng.integers(1, 12))} for i in range(8)]
    whisper_requests = [{"id": f"w{i}", "prompt": [1],
                         "encoder": {"input_features": [[float(np.float32(v)) for v in row] for row in
                                                        rng.standard_normal((16, 32)).astype(np.float32)]},
                         "max_new_tokens": int(rng.integers(1, 12))} for i in range(4)]
    tokens = {}
    for ex in ("ts", "dyn"):
        s = sess(os.path.join(a.o, f"qwen2-step-{ex}.onnx"))
        tokens[f"qwen2-step-{ex}.onnx"] = {r["id"]: greedy_step(s, r["prompt"], r["max_new_tokens"])
                                           for r in step_requests}
        for fam, reqs in (("t5", t5_requests), ("whisper", whisper_requests)):
            d = os.path.join(a.o, f"{fam}-kv-{ex}")
            e, f1, f2 = (sess(os.path.join(d, n)) for n in
                         ("encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx"))
            got = {}
            for r in reqs:
                if fam == "t5":
                    ids = np.array([r["encoder"]["input_ids"]], np.int64)
                    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
                else:
                    feeds = {"input_features": np.array([r["encoder"]["input_features"]], np.float32)}
                got[r["id"]] = greedy_seq2seq(e, f1, f2, feeds, r["prompt"], r["max_new_tokens"])
            tokens[f"{fam}-kv-{ex}"] = got
    versions = {m.__name__: m.__version__ for m in (torch, transformers, onnx, ort, np)}
    with open(os.path.join(a.o, "generate.json"), "w") as f:
        json.dump({"versions": versions, "requests": {"qwen2-step": step_requests, "t5-kv": t5_requests,
                                                      "whisper-kv": whisper_requests},
                   "tokens": tokens}, f)
        f.write("\n")
    print({k: sum(map(len, v.values())) for k, v in tokens.items()}, file=sys.stderr)


if __name__ == "__main__":
    main()
