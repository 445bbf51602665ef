#!/usr/bin/env python3
"""Measured tokens/s of hetplan's generation (hetplan.Session.generate: KV
cache, greedy, continuous batching) against onnxruntime's greedy loop on the
same model, prompts and thread count, in the same run (issue 12, item 4).

The model is models/ort-genai/gpt2-past.onnx, onnxruntime's own GPT-2 export
with a KV cache (5 layers, hidden 32, vocabulary 1000): tiny, so the numbers
measure per-step overhead (graph walk, cache copies, kernel calls) more than
arithmetic. Both sides run one thread; the onnxruntime baseline decodes one
request at a time (its loop as models/ort-genai/make_refs.py writes it), and
hetplan runs the same one-at-a-time schedule and continuous batches of 8.
Every request's tokens are checked equal before a time is reported.

  PYTHONPATH=build/python python3 bench/generate_bench.py [--requests 32]
      [--prompt 16] [--new 64] [--repeat 3]
"""
import argparse, os, sys, time

os.environ.setdefault("OMP_NUM_THREADS", "1")
import numpy as np
import onnxruntime as ort

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "models", "ort-genai"))
sys.path.insert(0, os.path.join(HERE, "..", "build", "python"))
import hetplan  # noqa: E402
from make_refs import MODEL, greedy  # noqa: E402


def best(f, repeat):
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = f()
        times.append(time.perf_counter() - t)
    return min(times), out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, 1000, a.prompt).tolist() for _ in range(a.requests)]
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    ref_session = ort.InferenceSession(MODEL, so, providers=["CPUExecutionProvider"])
    het = hetplan.Session(MODEL, threads=1)
    tokens = a.requests * a.new
    t_ort, ref = best(lambda: [greedy(ref_session, p, a.new) for p in prompts], a.repeat)
    rows = [("onnxruntime greedy loop, one request at a time", t_ort, True)]
    for batch in (1, 8):
        t, got = best(lambda: het.generate(prompts, max_new_tokens=a.new, max_batch=batch), a.repeat)
        rows.append((f"hetplan generate, max batch {batch}", t, got == ref))
    print(f"{a.requests} requests x {a.prompt} prompt + {a.new} new tokens, 1 thread, best of {a.repeat} "
          f"(onnxruntime {ort.__version__})\n")
    print("| runner | seconds | tokens/s | vs onnxruntime | tokens equal |")
    print("|---|---|---|---|---|")
    for name, t, same in rows:
        print(f"| {name} | {t:.3f} | {tokens / t:,.0f} | {t_ort / t:.2f}x | {'yes' if same else 'NO'} |")
    sys.exit(0 if all(r[2] for r in rows) else 1)


if __name__ == "__main__":
    main()
