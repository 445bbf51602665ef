#!/usr/bin/env python3
"""Writes models/ort-genai/prompts.jsonl (seeded requests of different
lengths) and greedy.json: for each request, the token ids onnxruntime's own
greedy loop generates with gpt2-past.onnx's KV cache, one request at a time
(past_N fed from present_N, position ids and attention mask as onnxruntime-
genai builds them for GPT-2). test/serve/check_generate.py compares
`hetplan serve` (batched, continuous) against them token for token. Needs
onnxruntime and numpy (pip); CI reads the files.

  python3 models/ort-genai/make_refs.py
"""
import json, os

import numpy as np
import onnxruntime as ort

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.join(HERE, "gpt2-past.onnx")
LAYERS, HEADS, HEAD_SIZE = 5, 4, 8


def greedy(session, prompt, n):
    ids = np.array([prompt], np.int32)
    past = {f"past_{i}": np.zeros((2, 1, HEADS, 0, HEAD_SIZE), np.float32) for i in range(LAYERS)}
    positions = np.arange(len(prompt), dtype=np.int32)[None]
    mask = np.ones((1, len(prompt)), np.int32)
    out = []
    for _ in range(n):
        r = session.run(None, {"input_ids": ids, "position_ids": positions, "attention_mask": mask, **past})
        token = int(np.argmax(r[0][0, -1]))
        out.append(token)
        past = {f"past_{i}": r[1 + i] for i in range(LAYERS)}
        ids = np.array([[token]], np.int32)
        positions = np.array([[mask.shape[1]]], np.int32)
        mask = np.ones((1, mask.shape[1] + 1), np.int32)
    return out


def main():
    session = ort.InferenceSession(MODEL, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    requests = [{"id": f"r{i}", "prompt": rng.integers(0, 1000, int(rng.integers(1, 24))).tolist(),
                 "max_new_tokens": int(rng.integers(1, 24))} for i in range(24)]
    with open(os.path.join(HERE, "prompts.jsonl"), "w") as f:
        for r in requests:
            f.write(json.dumps(r) + "\n")
    ref = {r["id"]: greedy(session, r["prompt"], r["max_new_tokens"]) for r in requests}
    with open(os.path.join(HERE, "greedy.json"), "w") as f:
        json.dump({"onnxruntime": ort.__version__, "tokens": ref}, f)
        f.write("\n")
    print(len(requests), "requests,", sum(map(len, ref.values())), "tokens")
    # One decode step of 4 rows over a 16-token cache (one row's first two
    # positions masked), with onnxruntime's outputs: test/serve/
    # check_generate.py runs a 2-stage inference plan of the model on it.
    B, P = 4, 16
    feeds = {"input_ids": rng.integers(0, 1000, (B, 1)).astype(np.int32),
             "position_ids": np.full((B, 1), P, np.int32),
             "attention_mask": np.ones((B, P + 1), np.int32)}
    feeds["attention_mask"][2, :2] = 0
    for i in range(LAYERS):
        feeds[f"past_{i}"] = rng.standard_normal((2, B, HEADS, P, HEAD_SIZE)).astype(np.float32)
    outs = session.run(None, feeds)
    arrays = {"in:" + k: v for k, v in feeds.items()}
    arrays.update({"out:" + o.name: v for o, v in zip(session.get_outputs(), outs)})
    np.savez_compressed(os.path.join(HERE, "decode-step.npz"), **arrays)


if __name__ == "__main__":
    main()
