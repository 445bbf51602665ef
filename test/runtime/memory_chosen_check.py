#!/usr/bin/env python3
"""The planner's memory savers, chosen by the search, run on CPU ranks.

A cluster of 4 CPU ranks whose memory is overridden to 2 MiB each: gpt2-tiny
(batch 8, sequence 64, fp32 training, 2 stages x 2 workers) fits only with
savers. `hetplan compile` with the defaults (--recompute auto --zero auto
--offload auto) must choose some, with them all off it must refuse, and the
plan it wrote must train on 4 threads exactly as one rank does
(hetplan-plan-equivalence: losses, gradients, weights after 2 steps).

  memory_chosen_check.py --hetplan BIN --equivalence BIN --model MODEL --work DIR
"""
import argparse, os, shutil, subprocess, sys

CLUSTER = """devices:
  - name: CPU-2S-AVX512
    memory_gib: 0.002
nodes:
  - name: a
    devices: [{type: CPU, count: 2}]
  - name: b
    devices: [{type: CPU, count: 2}]
"""


def main():
    ap = argparse.ArgumentParser()
    for f in ("--hetplan", "--equivalence", "--model", "--work"):
        ap.add_argument(f, required=True)
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    cluster = os.path.join(a.work, "small.yaml")
    with open(cluster, "w") as f:
        f.write(CLUSTER)
    plan = os.path.join(a.work, "t.plan")
    base = [a.hetplan, "compile", a.model, "--mode", "train", "--cluster", cluster, "--batch", "8",
            "--seq", "64", "--dtype", "fp32", "--pin", "pp=2,mb=2", "--quiet"]
    off = subprocess.run(base + ["--recompute", "never", "--zero", "0", "--offload", "never", "-o", plan],
                         capture_output=True, text=True)
    if off.returncode == 0 or "no layout fits in memory" not in off.stderr or os.path.exists(plan):
        print(f"FAIL: without savers the layout should not fit\n{off.stdout}{off.stderr}")
        return 1
    chosen = subprocess.run(base + ["-o", plan], capture_output=True, text=True)
    if chosen.returncode != 0:
        print(f"FAIL: compile with the savers on auto\n{chosen.stdout}{chosen.stderr}")
        return 1
    explain = subprocess.run([a.hetplan, "explain", plan], capture_output=True, text=True).stdout
    savers = [l.strip() for l in explain.splitlines() if "memory savers" in l]
    if not savers or "none" in savers[0]:
        print(f"FAIL: the search chose no memory saver\n{explain}")
        return 1
    print(savers[0])
    eq = subprocess.run([a.equivalence, plan], capture_output=True, text=True)
    sys.stdout.write(eq.stdout + eq.stderr)
    if eq.returncode != 0:
        print("FAIL: the plan with the chosen savers differs from one rank")
        return 1
    print("ok: chosen savers run on 4 ranks as one rank")
    return 0


if __name__ == "__main__":
    sys.exit(main())
