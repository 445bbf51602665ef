#!/usr/bin/python3
"""Which GPUs to rent for training: PREDICTED picks against one-type picks.

    /usr/bin/python3 bench/pick_bench.py [--hetplan build/bin/hetplan] [--out DIR]
        [--pick-time-s S]

For a few public models (GPT-2 medium and XL, Llama-2 7B; generated with
models/gen_transformer.py, weights absent) and a throughput target each,
`hetplan compile --mode train --pick-devices` picks the cheapest mix of up to
4 A100-80G, 8 L4 and 8 T4 meeting it (docs/planner.md, "Which GPUs to rent
for training"); the same pick restricted to one type at a time is the
homogeneous baseline. Everything is predicted (roofline costs, catalog
prices); nothing runs on a GPU. Prints a markdown table.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GROUPS = ["4xA100-80G?", "8xL4?", "8xT4?"]
# model -> (generator arguments, batch, sequence, target samples/s)
CASES = {
    "gpt2-medium": (["--family", "gpt2", "--config", "gpt2-medium"], 32, 1024, [20, 40]),
    "gpt2-xl": (["--family", "gpt2", "--config", "gpt2-xl"], 32, 1024, [4, 8]),
    "llama2-7b": (["--family", "llama", "--config", "llama2-7b"], 16, 2048, [0.5, 1]),
}


def pick(hetplan, model, batch, seq, target, groups, limit):
    cmd = [hetplan, "compile", model, "--allow-missing-weights", "--mode", "train", "--batch",
           str(batch), "--seq", str(seq), "--cluster", ",".join(groups), "--pick-devices",
           "--target-samples-s", str(target), "--pick-time-s", str(limit), "--quiet",
           "-o", model[:-len(".onnx")] + ".hpl"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        return None, r.stderr.strip().split("--pick-devices: ")[-1]
    head = re.search(r"picked devices for .*: (\S+) at \$([0-9.]+)/h", r.stdout)
    row = re.search(r"^\s+1\s+\S+\s+[0-9.]+\s+([0-9.]+)\s+([0-9.]+)\s+(\S+)", r.stdout, re.M)
    planned = re.search(r"(\d+) of (\d+) mixes planned in ([0-9.]+) s", r.stdout)
    return (head.group(1), float(head.group(2)), float(row.group(1)), float(row.group(2)),
            float(row.group(3)), planned.group(0)), None


def row(a, name, model, batch, seq, target):
    """One table row: the mixed pick and the cheapest one-type pick."""
    mixed, why = pick(a.hetplan, model, batch, seq, target, GROUPS, a.pick_time_s)
    single = []
    for g in GROUPS:
        s, _ = pick(a.hetplan, model, batch, seq, target, [g], a.pick_time_s)
        if s:
            single.append(s)
    best = min(single, key=lambda s: s[1]) if single else None
    if not mixed:
        print(f"| {name} | {batch} x {seq} | {target} | none: {why} | | | | | | | |")
        return
    saving = f"{100 * (1 - mixed[1] / best[1]):.0f}%" if best else "-"
    print(f"| {name} | {batch} x {seq} | {target} | {mixed[0]} | {mixed[1]:.2f} | {mixed[2]:.3f} | "
          f"{mixed[4]:.3g} | {best[0] if best else 'none'} | {best[1] if best else 0:.2f} | {saving} | "
          f"{mixed[5]} |")
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hetplan", default=os.path.join(ROOT, "build", "bin", "hetplan"))
    ap.add_argument("--out", default=None)
    ap.add_argument("--pick-time-s", type=float, default=120)
    a = ap.parse_args()
    out = a.out or tempfile.mkdtemp(prefix="pick-bench-")
    os.makedirs(out, exist_ok=True)
    print("| model | batch x seq | target samples/s | mixed pick | $/h | step s | $/step | "
          "best one-type pick | $/h | saving | search |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, (gen, batch, seq, targets) in CASES.items():
        model = os.path.join(out, name + ".onnx")
        if not os.path.exists(model):
            subprocess.run([sys.executable, os.path.join(ROOT, "models", "gen_transformer.py"), *gen,
                            "--weights", "none", "-o", model], check=True, capture_output=True)
        for target in targets:
            row(a, name, model, batch, seq, target)


if __name__ == "__main__":
    main()
