#!/usr/bin/env python3
"""onnxruntime's greedy tokens for the zoo's LLaMA exports with a KV cache
(llama-kv-ts: torchscript exporter, llama-kv-dyn: dynamo exporter), written
to llama-kv-generate.json for test/serve/check_generate_zoo.py.

The loop is the plain one a user writes against these exports: batch 1 (the
exports have no attention_mask, so a batch could not mask padding), empty
caches of [1, 2, 0, 8] for the prompt, then each present.N.* fed back as
past.N.* with the one new token. 12 requests of 1-19 prompt tokens (ids in
the vocabulary of 256) and 1-19 new tokens, numpy seed 1.

  python3 models/zoo/make_generate_refs.py   (onnxruntime and numpy needed)
"""
import json, os

import numpy as np
import onnxruntime as ort

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = ["llama-kv-ts", "llama-kv-dyn"]


def greedy(session, prompt, n):
    pasts = [i.name for i in session.get_inputs() if i.name.startswith("past.")]
    feeds = {name: np.zeros((1, 2, 0, 8), np.float32) for name in pasts}
    ids = np.array([prompt], np.int64)
    names = [o.name for o in session.get_outputs()]
    out = []
    for _ in range(n):
        r = dict(zip(names, session.run(None, {"input_ids": ids, **feeds})))
        token = int(np.argmax(r["logits"][0, -1]))
        out.append(token)
        feeds = {name: r[name.replace("past.", "present.", 1)] for name in pasts}
        ids = np.array([[token]], np.int64)
    return out


def main():
    rng = np.random.default_rng(1)
    requests = [{"id": f"r{i}", "prompt": rng.integers(0, 256, int(rng.integers(1, 20))).tolist(),
                 "max_new_tokens": int(rng.integers(1, 20))} for i in range(12)]
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    tokens = {}
    for m in MODELS:
        s = ort.InferenceSession(os.path.join(HERE, m + ".onnx"), so, providers=["CPUExecutionProvider"])
        tokens[m] = {r["id"]: greedy(s, r["prompt"], r["max_new_tokens"]) for r in requests}
    with open(os.path.join(HERE, "llama-kv-generate.json"), "w") as f:
        json.dump({"onnxruntime": ort.__version__, "requests": requests, "tokens": tokens}, f)
        f.write("\n")
    print(len(requests), "requests,", {m: sum(map(len, t.values())) for m, t in tokens.items()}, "tokens")


if __name__ == "__main__":
    main()
