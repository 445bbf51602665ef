#!/usr/bin/env python3
"""Stragglers: step time with and without `hetplan run --rebalance` (docs/runtime.md).

  bench/rebalance_bench.py [--hetplan build/bin/hetplan] [--model examples/models/gpt2-tiny.onnx]
                           [--ranks 2] [--batch 64] [--seq 32] [--steps 12] [--slow 1:2]
                           [--work /tmp/rebalance-bench]

Compiles a one-stage training plan for RANKS equal CPU ranks (that many
data-parallel workers, 2 micro-batches) and runs it three ways in this one
invocation: balanced (no slowdown), with rank R slowed on purpose
(--test-slow-rank R:FRACTION: it sleeps FRACTION times what each FORWARD and
BACKWARD took), and slowed with --rebalance. Reports the median step time of
the steps after the first move of shares (all steps but the first for the
runs without moves) and each as a ratio to the balanced run,
plus the load average, since the ranks are threads on shared cores. Each
rank computes with one kernel thread (OMP_NUM_THREADS=1 unless set), so that
with no more ranks than cores a sleeping rank frees no core for the others.
"""
import argparse, json, os, statistics, subprocess, sys

import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("--hetplan", default="build/bin/hetplan")
ap.add_argument("--model", default="examples/models/gpt2-tiny.onnx")
ap.add_argument("--ranks", type=int, default=2)
ap.add_argument("--batch", type=int, default=64)
ap.add_argument("--seq", type=int, default=32)
ap.add_argument("--steps", type=int, default=12)
ap.add_argument("--slow", default="1:2")
ap.add_argument("--work", default="/tmp/rebalance-bench")
a = ap.parse_args()

os.makedirs(a.work, exist_ok=True)
rng = np.random.default_rng(0)
ids = rng.integers(0, 512, size=(a.batch, a.seq), dtype=np.int64)
np.save(os.path.join(a.work, "ids.npy"), ids)
np.save(os.path.join(a.work, "labels.npy"), np.roll(ids, -1, axis=1))
cluster = os.path.join(a.work, "cpu3.yaml")
open(cluster, "w").write("nodes:\n  - name: a\n    devices: [{type: CPU, count: %d}]\n" % a.ranks)
plan = os.path.join(a.work, "dp.plan")
subprocess.run([a.hetplan, "compile", a.model, "--mode", "train", "--cluster", cluster, "--batch", str(a.batch),
                "--seq", str(a.seq), "--dtype", "fp32", "--pin", "pp=1,dp=%d,mb=2" % a.ranks, "--quiet", "-o", plan],
               check=True, stdout=subprocess.DEVNULL)
env = dict(os.environ)
env.setdefault("OMP_NUM_THREADS", "1")


def run(extra):
    r = subprocess.run([a.hetplan, "run", plan, "--input", "input_ids=" + os.path.join(a.work, "ids.npy"),
                        "--labels", os.path.join(a.work, "labels.npy"), "--steps", str(a.steps),
                        "--output", os.path.join(a.work, "out"), "--json"] + extra,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=True, env=env)
    res = json.loads(r.stdout)
    moves = [e for e in res.get("rebalances", []) if e["moved"]]
    start = min([e["after_step"] for e in moves], default=1)  # steps after the first move
    steady = res["step_seconds"][start:]
    return statistics.median(steady), moves, res["losses"]


load0 = os.getloadavg()
balanced, _, _ = run([])
slowed, _, l_slow = run(["--test-slow-rank", a.slow])
rebalanced, moves, l_reb = run(["--test-slow-rank", a.slow, "--rebalance"])
load1 = os.getloadavg()
print("rebalance_bench: %s, batch %d x %d, %d CPU ranks (threads, OMP_NUM_THREADS=%s), one stage, "
      "2 micro-batches, %d steps, slowed rank %s" % (os.path.basename(a.model), a.batch, a.seq, a.ranks,
                                                     env["OMP_NUM_THREADS"], a.steps, a.slow))
print("load average (1/5/15 min) before %.2f %.2f %.2f, after %.2f %.2f %.2f; %d cores" %
      (load0 + load1 + (os.cpu_count(),)))
print("%-34s %12s %12s" % ("run", "step_s", "vs_balanced"))
for name, t in (("balanced (no slowdown)", balanced), ("slowed, shares fixed", slowed),
                ("slowed, --rebalance", rebalanced)):
    print("%-34s %12.4f %12.2f" % (name, t, t / balanced))
for e in moves:
    print("moved after step %d: stage %d shares %s -> %s" %
          (e["after_step"], e["stage"], ",".join(map(str, e["old_shares"])), ",".join(map(str, e["new_shares"]))))
print("max relative loss difference, slowed vs slowed+rebalance: %.1e" %
      max(abs(x - y) / abs(x) for x, y in zip(l_slow, l_reb)))
