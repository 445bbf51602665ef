#!/usr/bin/env python3
"""Before/after latency of two libhetplan.so builds against onnxruntime on the
model zoo, all three in one process, interleaved (for changes to the runtime).

  python3 bench/zoo_ab.py --a BEFORE/libhetplan.so --b build/runtime/libhetplan.so
          [--iters 15] [--warmup 3] [--only NAME...] [--out FILE.md] [--json FILE]

Like zoo_latency.py (whose Hetplan ctypes wrapper it uses; same threads
settings, same .npz inputs), but each round times one call of build A, one of
build B and one onnxruntime call, the order rotating from round to round, so
the machine's load changes hit all three alike. Medians over --iters rounds.
The outputs of A and B are compared (max |A - B|). The two libraries are
loaded side by side (ctypes, RTLD_LOCAL), so copy the "before" one to a path
of its own first. Needs the pyenv python3 (numpy, onnxruntime).
"""
import argparse, json, os, statistics, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", required=True, help="libhetplan.so before")
    ap.add_argument("--b", required=True, help="libhetplan.so after")
    ap.add_argument("--zoo", default=os.path.join(os.path.dirname(HERE), "models/zoo"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--out", help="also write the table (markdown) here")
    ap.add_argument("--json", help="also write per-model results (JSON) here")
    args = ap.parse_args()
    t = str(args.threads)
    os.environ["OMP_NUM_THREADS"] = t
    os.environ["OPENBLAS_NUM_THREADS"] = t
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import numpy as np
    import onnxruntime as ort
    from zoo_latency import Hetplan
    A, B = Hetplan(args.a), Hetplan(args.b)
    ort.set_default_logger_severity(3)
    names = [m["name"] for m in json.load(open(os.path.join(args.zoo, "manifest.json")))["models"]]
    if args.only:
        names = [n for n in names if n in args.only]
    rows, skipped = [], []
    for name in names:
        path = os.path.join(args.zoo, name + ".onnx")
        ref = np.load(os.path.join(args.zoo, name + ".npz"))
        feeds = {k[3:]: ref[k] for k in ref.files if k.startswith("in:")}
        try:
            sa = A.load(path)
            sb = B.load(path)
        except RuntimeError as e:
            skipped.append((name, str(e).splitlines()[0][:120]))
            print(f"{name:14s} skipped: {str(e).splitlines()[0][:120]}", flush=True)
            continue
        so = ort.SessionOptions()
        so.intra_op_num_threads = args.threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        o = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        pa, pb = A.prepare(feeds, np), B.prepare(feeds, np)
        oa = dict(A.run(sa, pa, fetch=True, np=np))
        ob = dict(B.run(sb, pb, fetch=True, np=np))
        diff = 0.0
        for k, a in oa.items():
            b = ob.get(k)
            if b is None or b.shape != a.shape:
                diff = float("inf")
            elif a.dtype.kind in "fc" and a.size:
                diff = max(diff, float(np.max(np.abs(a.astype(np.float64) - b))))
            elif not np.array_equal(a, b):
                diff = float("inf")
        for _ in range(args.warmup):
            A.run(sa, pa); B.run(sb, pb); o.run(None, feeds)
        fns = [lambda: A.run(sa, pa), lambda: B.run(sb, pb), lambda: o.run(None, feeds)]
        ts = [[], [], []]
        for i in range(args.iters):
            order = [(i + j) % 3 for j in range(3)]
            if i % 2:
                order.reverse()
            for j in order:
                s = time.perf_counter()
                fns[j]()
                ts[j].append((time.perf_counter() - s) * 1e3)
        A.lib.hetplan_session_destroy(sa)
        B.lib.hetplan_session_destroy(sb)
        del o
        ma, mb, mo = (statistics.median(x) for x in ts)
        rows.append(dict(model=name, a_ms=ma, b_ms=mb, ort_ms=mo, a_ratio=ma / mo, b_ratio=mb / mo,
                         b_over_a=mb / ma, max_abs_diff=diff))
        print(f"{name:14s} A {ma:8.3f}  B {mb:8.3f}  ort {mo:8.3f} ms  A/ort {ma / mo:5.2f}  "
              f"B/ort {mb / mo:5.2f}  B/A {mb / ma:5.2f}  (max|A-B| {diff:.1e})", flush=True)
    lines = ["| model | A ms | B ms | ort ms | A / ort | B / ort | B / A |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['a_ms']:.3f} | {r['b_ms']:.3f} | {r['ort_ms']:.3f} | "
                     f"{r['a_ratio']:.2f} | {r['b_ratio']:.2f} | {r['b_over_a']:.2f} |")
    if rows:
        med = lambda k: statistics.median(r[k] for r in rows)
        lines.append(f"| **median** | | | | **{med('a_ratio'):.2f}** | **{med('b_ratio'):.2f}** | "
                     f"**{med('b_over_a'):.2f}** |")
    text = "\n".join(lines)
    print()
    print(text)
    if skipped:
        print("\nSkipped: " + "; ".join(f"{n} ({w})" for n, w in skipped))
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(rows=rows, skipped=skipped), f, indent=1)


if __name__ == "__main__":
    main()
