#!/usr/bin/env python3
"""Predicted against measured step time after `hetplan profile` (issue 21 part 4).

    /usr/bin/python3 bench/profile_bench.py [--hetplan build/bin/hetplan] [--threads 1]
        [--runs 3] [--steps 4] [--quick-profile] [--models gpt2,bert,resnet,zoo]
        [--ranks 1,3] [--workdir DIR] [--out report.md]

1. Profiles this machine: `hetplan profile --ranks R --threads T` for each R
   (a cluster file per rank count: one node of R devices of the measured type).
2. For each model and R: `hetplan compile MODEL --cluster profiled-R.yaml`
   (the planner's own layout, fp32), then `hetplan run PLAN --steps S
   --profile` --runs times (each a fresh process; the last step of each is
   timed, the earlier ones warm up), all with OMP_NUM_THREADS=T as profiled.
   Measured = the median of the runs' wall step times; predicted = the plan's
   predicted step time (`Prediction.step_time_s`, the `step (wall)` row).
3. Prints a Markdown table: model, mode, ranks, layout, predicted, measured,
   |error| = |predicted - measured| / measured; and the median |error|.

Models (inputs made with numpy, seed 0):
  gpt2    examples/models/gpt2-tiny.onnx, training (labels: next tokens), batch 8 x seq 32
  bert    examples/models/bert-tiny.onnx, inference, batch 8 x seq 64
  resnet  /work/shared/models/onnx-light/light_resnet50.onnx, inference, batch 1 (its Reshape fixes the batch)
          (models/zoo/resnet-ts.onnx, batch 32, when the shared models are absent)
  zoo     models/zoo/deit-ts.onnx (a ViT from the zoo), inference, batch 16

The machine may be shared: the report gives the load average before and
after. Exit status 0 when every row ran (missing the 15% goal is a
measurement, not a failure), 1 otherwise.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(REPO), "shared", "models", "onnx-light")
GOAL = 0.15


def models():
    ex = os.path.join(REPO, "examples", "models")
    zoo = os.path.join(REPO, "models", "zoo")
    rng = np.random.default_rng(0)
    resnet = os.path.join(SHARED, "light_resnet50.onnx")
    out = {
        "gpt2": dict(path=os.path.join(ex, "gpt2-tiny.onnx"), mode="train", batch=8, seq=32,
                     inputs={"input_ids": rng.integers(0, 512, (8, 32), dtype=np.int64)},
                     labels=rng.integers(0, 512, (8, 32), dtype=np.int64)),
        "bert": dict(path=os.path.join(ex, "bert-tiny.onnx"), mode="infer", batch=8, seq=64,
                     inputs={"input_ids": rng.integers(0, 100, (8, 64), dtype=np.int64),
                             "token_type_ids": np.zeros((8, 64), np.int64),
                             "attention_mask": np.ones((8, 64), np.int64)}),
        "zoo": dict(path=os.path.join(zoo, "deit-ts.onnx"), mode="infer", batch=16, seq=None,
                    inputs={"pixel_values": rng.standard_normal((16, 3, 32, 32), dtype=np.float32)}),
    }
    if os.path.exists(resnet):
        out["resnet"] = dict(path=resnet, mode="infer", batch=1, seq=None,
                             inputs={"gpu_0/data_0": rng.standard_normal((1, 3, 224, 224), dtype=np.float32)})
    else:
        out["resnet"] = dict(path=os.path.join(zoo, "resnet-ts.onnx"), mode="infer", batch=32, seq=None,
                             inputs={"x": rng.standard_normal((32, 3, 32, 32), dtype=np.float32)})
    return out


def run(cmd, env=None, check=True):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if check and p.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (" ".join(cmd[:3]), p.returncode, p.stderr.strip()[-500:]))
    return p


def load():
    return " ".join("%.2f" % x for x in os.getloadavg())


def layout(compile_out):
    m = re.search(r"(\d+) stage\(s\), (\d+) micro-batch\(es\)", compile_out)
    dp = re.findall(r"^\s+\d+\s+(\d+)x ", compile_out, re.M)
    return "pp=%s,mb=%s,devices/stage=%s" % (m.group(1), m.group(2), "+".join(dp)) if m else "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hetplan", default=os.path.join(REPO, "build", "bin", "hetplan"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--quick-profile", action="store_true")
    ap.add_argument("--models", default="gpt2,bert,resnet,zoo")
    ap.add_argument("--ranks", default="1,3")
    ap.add_argument("--workdir")
    ap.add_argument("--out")
    a = ap.parse_args()
    work = a.workdir or tempfile.mkdtemp(prefix="profile-bench-")
    os.makedirs(work, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), OPENBLAS_NUM_THREADS=str(a.threads))
    H = a.hetplan
    load_start = load()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    ms = models()
    rows, failures = [], 0
    for R in [int(r) for r in a.ranks.split(",")]:
        cluster = os.path.join(work, "profiled-%d.yaml" % R)
        cmd = [H, "profile", "--ranks", str(R), "--threads", str(a.threads), "--name", "bench-cpu",
               "--out", cluster] + (["--quick"] if a.quick_profile else [])
        t0 = time.time()
        run(cmd, env)
        print("profiled %d rank(s) in %.1f s -> %s" % (R, time.time() - t0, cluster), file=sys.stderr)
        for name in a.models.split(","):
            m = ms[name]
            d = os.path.join(work, "%s-%d" % (name, R))
            os.makedirs(d, exist_ok=True)
            args = []
            for k, v in m["inputs"].items():
                f = os.path.join(d, re.sub(r"[^A-Za-z0-9_.-]", "_", k) + ".npy")
                np.save(f, v)
                args += ["--input", "%s=%s" % (k, f)]
            if "labels" in m:
                f = os.path.join(d, "labels.npy")
                np.save(f, m["labels"])
                args += ["--labels", f]
            plan = os.path.join(d, "p.plan")
            ccmd = [H, "compile", m["path"], "--mode", m["mode"], "--cluster", cluster, "--batch",
                    str(m["batch"]), "--dtype", "fp32", "-o", plan]
            if m["seq"]:
                ccmd += ["--seq", str(m["seq"])]
            try:
                c = run(ccmd, env)
                pred, meas = None, []
                for i in range(a.runs):
                    r = run([H, "run", plan, "--output", os.path.join(d, "out"), "--steps", str(a.steps),
                             "--profile", os.path.join(d, "prof.json"), "--quiet"] + args, env)
                    w = re.search(r"^step \(wall\)\s+(\S+)\s+(\S+)", r.stdout, re.M)
                    pred = float(w.group(1))
                    meas.append(float(w.group(2)))
                measured = statistics.median(meas)
                err = abs(pred - measured) / measured
                rows.append((name, m["mode"], R, layout(c.stdout), pred, measured, err,
                             min(meas), max(meas)))
                print("%-7s %-5s %d ranks: predicted %.4g s, measured %.4g s (runs %s), |error| %.1f%%" % (
                    name, m["mode"], R, pred, measured, ", ".join("%.4g" % x for x in meas), 100 * err),
                    file=sys.stderr)
            except (RuntimeError, AttributeError) as e:
                failures += 1
                print("%s %d ranks: FAILED: %s" % (name, R, e), file=sys.stderr)
    lines = ["Profiled and measured %s; load average (1, 5, 15 min) %s at start, %s at end; "
             "%d thread(s) per rank; median of %d runs of `hetplan run --steps %d` (last step timed)."
             % (started, load_start, load(), a.threads, a.runs, a.steps), "",
             "| model | mode | ranks | layout | predicted s | measured s (min-max) | abs error |",
             "|---|---|---:|---|---:|---:|---:|"]
    for name, mode, R, lay, pred, meas, err, lo, hi in rows:
        lines.append("| %s | %s | %d | %s | %.4g | %.4g (%.4g-%.4g) | %.1f%% |" % (
            name, mode, R, lay, pred, meas, lo, hi, 100 * err))
    if rows:
        med = statistics.median(r[6] for r in rows)
        within = sum(r[6] <= GOAL for r in rows)
        lines += ["", "median abs error %.1f%% (goal <= %d%%); %d of %d rows within %d%%; worst %.1f%%" % (
            100 * med, 100 * GOAL, within, len(rows), 100 * GOAL, 100 * max(r[6] for r in rows))]
    report = "\n".join(lines) + "\n"
    print(report)
    if a.out:
        with open(a.out, "w") as f:
            f.write(report)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
