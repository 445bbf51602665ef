#!/usr/bin/env python3
"""Before/after planner time of two `hetplan` builds, interleaved (for
refactors and planner changes).

  /usr/bin/python3 bench/planner_ab.py --a BEFORE/bin/hetplan --b build/bin/hetplan
          [--rounds 5] [--out FILE.md]

Each round compiles every case once with build A and once with build B, the
order alternating from round to round, so the machine's load changes hit both
alike; medians over the rounds of the search time the plan reports
(`search_time_s`) and of the whole command's wall time (import, passes,
search, export). The JSON plans of A and B must be equal apart from their
timing fields (exit 1 otherwise): a refactor must not change a plan. Cases:
GPT-3 175B (shapes only, models/gen_transformer.py) on 1,024 GPUs of four
types (the planner_bench.py search-time case) and GPT-2 XL on 2 x H100 + 4 x
A100-40G + 8 x L4, training.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from planner_bench import compile_json, gen  # noqa: E402

TIMING_KEYS = {"search_time_s", "wall_time_s", "compile_time_s"}


def untimed(x):
    if isinstance(x, dict):
        return {k: untimed(v) for k, v in x.items() if k not in TIMING_KEYS}
    if isinstance(x, list):
        return [untimed(v) for v in x]
    return x


def report(lines, out, bad):
    """Prints the table (and writes it to `out`); the exit code: 1 if `bad`."""
    text = "\n".join(lines)
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", required=True, help="hetplan before")
    ap.add_argument("--b", required=True, help="hetplan after")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as work:
        cases = [("GPT-3 175B", gen(work, "gpt3", "gpt3-175b"),
                  "256xA100-80G,256xH100,256xV100-32G,256xT4", 1536, 2048),
                 ("GPT-2 XL", gen(work, "gpt2", "gpt2-xl"), "2xH100,4xA100-40G,8xL4", 512, 1024)]
        rows, bad = [], 0
        for name, model, cluster, batch, seq in cases:
            times = {"a": [], "b": []}
            plans = {}
            for r in range(a.rounds):
                for side in (("a", "b") if r % 2 == 0 else ("b", "a")):
                    plan, wall, err = compile_json(getattr(a, side), model, cluster, batch, seq)
                    if not plan:
                        raise SystemExit(f"{name}: build {side.upper()} failed: {err}")
                    times[side].append((plan["search_time_s"], wall))
                    plans[side] = untimed(plan)
            same = plans["a"] == plans["b"]
            bad += not same
            med = {s: (statistics.median(t[0] for t in v), statistics.median(t[1] for t in v))
                   for s, v in times.items()}
            rows.append((name, cluster, f"{batch} x {seq}", med["a"], med["b"], same))
    lines = [f"Medians of {a.rounds} interleaved rounds; ratio = B / A (1.00: no change).", "",
             "| model | cluster | batch x seq | search A | search B | ratio | wall A | wall B | ratio | plans equal |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, cluster, bs, ma, mb, same in rows:
        lines.append(f"| {name} | {cluster} | {bs} | {ma[0]:.3f} s | {mb[0]:.3f} s | {mb[0] / ma[0]:.2f} | "
                     f"{ma[1]:.2f} s | {mb[1]:.2f} s | {mb[1] / ma[1]:.2f} | {'yes' if same else 'NO'} |")
    return report(lines, a.out, bad)


if __name__ == "__main__":
    sys.exit(main())
