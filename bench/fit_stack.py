#!/usr/bin/python3
"""Fits a software stack's one GEMM figure, `matrix` (the share of a GPU's
dtype peak its large GEMMs reach, docs/cost-model.md "Software stacks"), on
the fit-set sources that stack prices, and prints the grid.

    /usr/bin/python3 bench/fit_stack.py [--hetplan build/bin/hetplan] [--stack megatron-lm]

For each candidate it prices every run of the fit-set sources whose
`stack_profile` is the stack (bench/published/SPLIT.md: never a check
source) at its exact layout, with the candidate as a cluster-file override
(`stack: {name: STACK, matrix: X}`), and scores it like bench/fit_overheads.py:
the larger of the median |error| and the worst |error| / 2.5. Check-set
sources are not read.
"""
import argparse, os, statistics, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import accuracy_sources as S  # noqa: E402


def errors(hetplan, work, sources, stack, share, timeout, jobs):
    plain = S.cluster_file

    def with_share(w, c):
        path = plain(w, c)
        out = f"{path[:-5]}-{stack}-m{share:.3f}.yaml"
        if not os.path.exists(out):
            open(out, "w").write(open(path).read() +
                                 f"stack: {{name: {stack}, matrix: {share:.3f}}}\n")
        return out

    S.cluster_file = with_share
    try:
        rows = S.price_all(hetplan, work, sources, timeout, jobs, uncalibrated=False)
    finally:
        S.cluster_file = plain
    errs = []
    for r in rows:
        pred = r["after"].get("step_time_s")
        if pred is not None and not r["config"]["measured"].get("oom"):
            errs.append(pred / r["config"]["measured"]["step_time_s"] - 1)
    return errs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hetplan", default="build/bin/hetplan")
    ap.add_argument("--stack", default="megatron-lm")
    ap.add_argument("--work", default=None)
    ap.add_argument("--grid", default="0.55,0.6,0.65,0.7,0.725,0.75,0.775,0.8,0.85,0.9")
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    sources = {n: d for n, d in S.load_sources().items()
               if d["role"] == "fit" and d.get("stack_profile") == args.stack}
    if not sources:
        raise SystemExit(f"error: no fit-set source is priced by stack '{args.stack}'")
    work = args.work or tempfile.mkdtemp(prefix="hetplan-fit-stack-")
    os.makedirs(work, exist_ok=True)
    print(f"fit set for stack {args.stack}: {', '.join(sorted(sources))} "
          f"({sum(len(d['configs']) for d in sources.values())} runs)")
    print("| matrix | timed | median signed error | median abs error | worst abs error | score |")
    print("|---|---|---|---|---|---|")
    best = None
    for share in [float(x) for x in args.grid.split(",")]:
        e = errors(args.hetplan, work, sources, args.stack, share, args.timeout, args.jobs)
        if not e:
            print(f"| {share:.3f} | 0 | - | - | - | - |")
            continue
        med, worst = statistics.median(abs(x) for x in e), max(abs(x) for x in e)
        score = max(med, worst / 2.5)
        print(f"| {share:.3f} | {len(e)} | {100 * statistics.median(e):+.1f}% | {100 * med:.1f}% | "
              f"{100 * worst:.1f}% | {100 * score:.1f}% |", flush=True)
        if best is None or score < best[1]:
            best = (share, score)
    print(f"best: matrix {best[0]:.3f} (score {100 * best[1]:.1f}%)")


if __name__ == "__main__":
    main()
