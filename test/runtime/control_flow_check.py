#!/usr/bin/env python3
"""If / Loop / Scan on the CPU runtime (docs/runtime.md, "Control flow"):

1. gen_control_flow_cases.py's node-test cases (expected outputs from
   numpy) must all pass hetplan-run-node-tests, and a model with an op
   without a kernel inside an If branch must be refused at load with the
   node's path in the message.
2. models/gen_vad.py's streaming model (If on a scalar flag input around a
   GRU, a Loop over frames, a Scan) compiled for 3 CPU ranks (2 stages,
   uneven batch split, 2 micro-batches) and for 1 rank: PlanExecutor
   against the one-rank Executor (hetplan-plan-equivalence), then
   `hetplan run --ranks N` on the same .npy inputs, with the flag false
   (seed 1: GRU branch) and true (seed 3: reset branch).

  control_flow_check.py --hetplan BIN --equivalence BIN --node-tests BIN --work DIR
"""
import argparse, glob, os, shutil, subprocess, sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
CLUSTERS = {
    3: """nodes:
  - name: a
    devices: [{type: CPU, count: 1}]
  - name: b
    devices: [{type: CPU, count: 1}]
    speed_factors: {CPU: 0.5}
  - name: c
    devices: [{type: CPU, count: 1}]
    speed_factors: {CPU: 0.25}
""",
    1: """nodes:
  - name: a
    devices: [{type: CPU, count: 1}]
""",
}
SEEDS = {1: "reset false", 3: "reset true"}


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return r.returncode, r.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hetplan", required=True)
    ap.add_argument("--equivalence", required=True)
    ap.add_argument("--node-tests", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--python", default=sys.executable)
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    cases = os.path.join(a.work, "cases")
    rc, out = run([a.python, os.path.join(HERE, "gen_control_flow_cases.py"), cases])
    if rc != 0:
        print("FAIL: generating the cases\n" + out)
        return 1
    n = len(glob.glob(os.path.join(cases, "test_*", "model.onnx")))
    rc, out = run([a.node_tests, "-v", cases])
    summary = [l for l in out.splitlines() if l.startswith("all:")]
    # test_if_unsupported_inner is refused at load; every other case passes.
    want = f"all: {n} cases: {n - 1} pass, 1 unsupported, 0 fail, 0 crash"
    if rc != 0 or not summary or not summary[0].startswith(want):
        print(f"FAIL: node cases (want '{want}')\n{out}")
        return 1
    path = "node 'outer' (If) 'else_branch' > node 'inner' (Loop) 'body' > node 'bad' (NoSuchOp): no CPU kernel for NoSuchOp"
    if path not in out:
        print(f"FAIL: the refusal of a subgraph node does not name its path ({path})\n{out}")
        return 1
    print(f"ok: {n - 1} control-flow node cases pass; a kernel missing inside a subgraph is refused: ...{path}")

    model = os.path.join(cases, "vad.onnx")
    failures = 0
    for ranks, cluster in CLUSTERS.items():
        work = os.path.join(a.work, f"vad-{ranks}")
        os.makedirs(work, exist_ok=True)
        yaml = os.path.join(work, "cluster.yaml")
        with open(yaml, "w") as f:
            f.write(cluster)
        plan = os.path.join(work, "plan")
        pin = "pp=2,mb=2" if ranks == 3 else "pp=1,mb=2"
        rc, out = run([a.hetplan, "compile", model, "--mode", "infer", "--cluster", yaml, "--batch", "14",
                       "--seq", "5", "--pin", pin, "--dtype", "fp32", "--quiet", "-o", plan])
        if rc != 0:
            print(f"FAIL: compile for {ranks} rank(s)\n{out}")
            return 1
        for seed, what in SEEDS.items():
            d = os.path.join(work, f"seed{seed}")
            os.makedirs(d, exist_ok=True)
            rc, out = run([a.equivalence, plan, "--seed", str(seed), "--write", d])
            sys.stdout.write(out)
            reset = bool(np.load(os.path.join(d, "in_reset.npy")))
            if rc != 0 or reset != (what == "reset true"):
                print(f"FAIL: {ranks} rank(s), {what}: PlanExecutor differs from one rank (reset={reset})")
                failures += 1
                continue
            names = open(os.path.join(d, "input_names.txt")).read().split("\n")
            args = [a.hetplan, "run", plan, "--output", os.path.join(d, "out"), "--ranks", str(ranks), "--quiet"]
            for name in names:
                args += ["--input", f"{name}={os.path.join(d, 'in_' + name + '.npy')}"]
            rc, out = run(args)
            if rc != 0:
                print(f"FAIL: hetplan run, {ranks} rank(s), {what}\n{out}")
                failures += 1
                continue
            worst = 0.0
            for ref in sorted(glob.glob(os.path.join(d, "ref_*.npy"))):
                r = np.load(ref)
                g = np.load(os.path.join(d, "out", os.path.basename(ref)[4:]))
                if g.shape != r.shape or not np.allclose(g, r, rtol=1e-4, atol=1e-5):
                    print(f"FAIL: hetplan run, {ranks} rank(s), {what}: {os.path.basename(ref)[4:]} differs")
                    failures += 1
                worst = max(worst, float(np.max(np.abs(g.astype(np.float64) - r) / np.maximum(np.abs(r), 1e-30))))
            print(f"ok: hetplan run vad ({ranks} rank(s), {what}): max relative error {worst:.3g} against one rank")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
