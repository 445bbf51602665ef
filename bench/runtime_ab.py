#!/usr/bin/env python3
"""Before/after CPU runtime latency of two `hetplan-bench-runtime` builds,
interleaved in separate processes (for refactors of the runtime).

  /usr/bin/python3 bench/runtime_ab.py --a BEFORE/bin/hetplan-bench-runtime \
          --b build/bin/hetplan-bench-runtime [--rounds 5] [--iters 10] [--threads 2] [--out FILE.md]

zoo_ab.py loads two libhetplan.so side by side in one process, which
protobuf refuses (both register plan.proto); here each measurement is its own
process. Each round runs build A and build B once per model (W warm-up + N
timed Session::run calls each, `hetplan-bench-runtime`'s median), the order
alternating from round to round so load changes hit both alike; the table
gives the median over rounds of those medians and the ratio B / A. The
outputs of A and B must be equal (max |A - B| printed; exit 1 when > 1e-6
relative). Models: examples/models/gpt2-tiny and bert-tiny (8 x 128), and the
onnx-light ResNet-50 (batch 1) when ../shared/models is present. Needs numpy
and onnx (Debian's /usr/bin/python3 has both).
"""
import argparse
import os
import statistics
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from planner_ab import report  # noqa: E402
from runtime_bench import run_hetplan, write_inputs  # noqa: E402

REPO = os.path.dirname(HERE)
RESNET = os.path.join(REPO, "..", "shared", "models", "onnx-light", "light_resnet50.onnx")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", required=True, help="hetplan-bench-runtime before")
    ap.add_argument("--b", required=True, help="hetplan-bench-runtime after")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out")
    a = ap.parse_args()
    models = [("gpt2-tiny", os.path.join(REPO, "examples", "models", "gpt2-tiny.onnx"), 8, 128),
              ("bert-tiny", os.path.join(REPO, "examples", "models", "bert-tiny.onnx"), 8, 128)]
    if os.path.exists(RESNET):
        models.append(("ResNet-50 (onnx-light)", RESNET, 1, 0))
    rows, bad = [], 0
    with tempfile.TemporaryDirectory() as work:
        rng = np.random.default_rng(0)
        for label, path, batch, seq in models:
            d = os.path.join(work, label.split()[0])
            os.makedirs(d)
            inputs = write_inputs(path, batch, seq, d, rng)
            for name, f in inputs.items():  # ids drawn below the vocabulary; masks and segments are 0/1
                if "mask" in name or "token_type" in name:
                    x = np.load(f)
                    np.save(f, (np.ones_like(x) if "mask" in name else np.zeros_like(x)))
            med = {"a": [], "b": []}
            outs = {}
            for r in range(a.rounds):
                for side in (("a", "b") if r % 2 == 0 else ("b", "a")):
                    od = os.path.join(d, side)
                    os.makedirs(od, exist_ok=True)
                    res = run_hetplan(getattr(a, side), path, inputs, a.warmup, a.iters, od, a.threads)
                    med[side].append(res["median_ms"])
                    outs[side] = {k: np.load(f) for k, f in res["outputs"].items()}
            worst = 0.0
            for k, x in outs["a"].items():
                y = outs["b"][k]
                worst = max(worst, float(np.max(np.abs(x.astype(np.float64) - y))) /
                            max(float(np.max(np.abs(x))), 1e-30))
            bad += worst > 1e-6
            ma, mb = statistics.median(med["a"]), statistics.median(med["b"])
            rows.append((label, f"{batch} x {seq}" if seq else str(batch), ma, mb, worst))
    lines = [f"Medians over {a.rounds} interleaved rounds of each build's median of {a.iters} runs "
             f"({a.threads} threads); ratio = B / A.", "",
             "| model | batch | A ms | B ms | B / A | max rel. difference A vs B |", "|---|---|---|---|---|---|"]
    for label, b, ma, mb, worst in rows:
        lines.append(f"| {label} | {b} | {ma:.2f} | {mb:.2f} | {mb / ma:.2f} | {worst:.1e} |")
    return report(lines, a.out, bad)


if __name__ == "__main__":
    sys.exit(main())
