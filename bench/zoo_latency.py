#!/usr/bin/env python3
"""Single-request latency of hetplan's CPU runtime against onnxruntime on the
model zoo (models/zoo), both in this one process, interleaved.

  python3 bench/zoo_latency.py [--lib build/runtime/libhetplan.so] [--zoo models/zoo]
          [--threads 2] [--warmup 3] [--iters 15] [--only NAME...] [--out FILE.md]

Needs a Python with numpy and onnxruntime (the pyenv `python3`, not
/usr/bin/python3). hetplan runs through its C API (libhetplan.so, loaded with
ctypes): each model is loaded once with hetplan_session_create_from_model, and
every timed call is one hetplan_session_run on the .npz reference inputs, so
no process start-up, model load or input reading is timed (the copy of the
outputs into the result is). onnxruntime: CPU provider, intra_op_num_threads
= --threads, inter_op 1, sequential execution, default graph optimizations,
outputs as numpy arrays.

Threads: OMP_NUM_THREADS = OPENBLAS_NUM_THREADS = --threads are put in the
environment before libhetplan.so (and with it libgomp) is loaded, and
OMP_WAIT_POLICY only when --omp-wait-policy says so (default: unset, so
libgomp's threads spin briefly before sleeping, as onnxruntime's default
thread pool does; PASSIVE, which runs before 2026-12-07 used, makes every
parallel region of a small model pay a futex wake-up: resnet-ts 0.42 ms
against 0.29 ms). See docs/runtime.md ("Threads") for PASSIVE on a shared
machine.

Per model: --warmup untimed calls of each, then rounds of blocks: a block is
one untimed call and --block timed calls of one engine back to back; the two
engines' blocks alternate, the order swapping between rounds (A B, B A, ...),
until each has --iters timed calls, so load changes on the shared machine hit
both alike. Between blocks the process waits until it is idle (its CPU time
stops growing): onnxruntime's worker threads spin for tens of milliseconds
after each run (about 85 ms of CPU after one call, measured here), and on a
2-core machine a hetplan call that starts while they spin loses a core. Per
call interleaving (--interleave call, the protocol before 2026-12-07) timed
hetplan in exactly that state: on gelu-ffn 16.6 ms against 8.7 ms alone, while
onnxruntime's own times did not change. The table gives the medians and their
ratio, plus the median of the per-round ratios (block medians). Models that
hetplan cannot load (the session refuses them) or run are listed as skipped
with the reason. The outputs of the last hetplan call are compared with the .npz's onnxruntime
outputs (max abs error relative to max |ref|); they are reported, not gated.
"""
import argparse
import ctypes
import json
import os
import platform
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

DTYPES = {  # ONNX numbering <-> numpy
    1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32",
    7: "int64", 9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64",
}


class HTensor(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int), ("rank", ctypes.c_size_t),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("data", ctypes.c_void_p),
                ("nbytes", ctypes.c_size_t)]


class Hetplan:
    def __init__(self, path):
        lib = ctypes.CDLL(path)
        P = ctypes.c_void_p
        lib.hetplan_error_message.restype = ctypes.c_char_p
        lib.hetplan_error_message.argtypes = [P]
        lib.hetplan_error_free.argtypes = [P]
        lib.hetplan_session_create_from_model.argtypes = [ctypes.c_char_p, ctypes.POINTER(P),
                                                          ctypes.POINTER(P)]
        lib.hetplan_session_destroy.argtypes = [P]
        lib.hetplan_session_run.argtypes = [P, ctypes.POINTER(HTensor), ctypes.c_size_t,
                                            ctypes.POINTER(P), ctypes.POINTER(P)]
        lib.hetplan_result_count.restype = ctypes.c_size_t
        lib.hetplan_result_count.argtypes = [P]
        lib.hetplan_result_get.argtypes = [P, ctypes.c_size_t, ctypes.POINTER(HTensor)]
        lib.hetplan_result_free.argtypes = [P]
        lib.hetplan_version.restype = ctypes.c_char_p
        self.lib = lib

    def _err(self, err):
        msg = self.lib.hetplan_error_message(err).decode(errors="replace")
        self.lib.hetplan_error_free(err)
        return msg

    def load(self, path):
        s, e = ctypes.c_void_p(), ctypes.c_void_p()
        if self.lib.hetplan_session_create_from_model(path.encode(), ctypes.byref(s),
                                                      ctypes.byref(e)) != 0:
            raise RuntimeError(self._err(e))
        return s

    def prepare(self, feeds, np):
        """ctypes array of hetplan_tensor for feeds {name: ndarray}; keeps refs."""
        # (np.ascontiguousarray would make a 0-d input, e.g. a scalar rate, 1-d)
        arrs = [(n.encode(), np.require(a, requirements="C")) for n, a in feeds.items()]
        code = {v: k for k, v in DTYPES.items()}
        tens = (HTensor * len(arrs))()
        keep = []
        for i, (n, a) in enumerate(arrs):
            shape = (ctypes.c_int64 * max(1, a.ndim))(*a.shape)
            keep += [n, a, shape]
            tens[i] = HTensor(n, code[str(a.dtype)], a.ndim, shape, a.ctypes.data, a.nbytes)
        return tens, len(arrs), keep

    def run(self, session, prepared, fetch=False, np=None):
        tens, n, _ = prepared
        r, e = ctypes.c_void_p(), ctypes.c_void_p()
        if self.lib.hetplan_session_run(session, tens, n, ctypes.byref(r), ctypes.byref(e)) != 0:
            raise RuntimeError(self._err(e))
        outs = []
        if fetch:
            for i in range(self.lib.hetplan_result_count(r)):
                t = HTensor()
                self.lib.hetplan_result_get(r, i, ctypes.byref(t))
                shape = [t.shape[k] for k in range(t.rank)]
                buf = (ctypes.c_char * t.nbytes).from_address(t.data) if t.nbytes else b""
                a = np.frombuffer(bytes(buf), dtype=DTYPES[t.dtype]).reshape(shape)
                outs.append((t.name.decode(), a))
        self.lib.hetplan_result_free(r)
        return outs


def settle(quiet_ms=2.0, step_s=0.01, limit_s=1.0):
    """Wait until this process has stopped burning CPU (another engine's
    spinning worker threads), at most limit_s."""
    end = time.perf_counter() + limit_s
    while time.perf_counter() < end:
        c = time.process_time()
        time.sleep(step_s)
        if (time.process_time() - c) * 1e3 < quiet_ms:
            return


def machine():
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "?"
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 2**20:.1f} GiB"
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} logical CPUs, {mem}, Linux {platform.release()}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", default=os.path.join(ROOT, "build/runtime/libhetplan.so"))
    ap.add_argument("--zoo", default=os.path.join(ROOT, "models/zoo"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=15, help="timed calls per engine and model")
    ap.add_argument("--block", type=int, default=5, help="timed calls per block (--interleave block)")
    ap.add_argument("--interleave", choices=["block", "call"], default="block",
                    help="block: alternate blocks of calls, idle between (default); call: alternate "
                         "single calls (biased against hetplan by onnxruntime's spinning threads)")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--omp-wait-policy", type=str.upper, choices=["DEFAULT", "PASSIVE", "ACTIVE"],
                    default=os.environ.get("OMP_WAIT_POLICY", "DEFAULT"),
                    help="hetplan's OpenMP threads: libgomp's default (spin briefly, then sleep: "
                         "as onnxruntime's default spinning pool), or PASSIVE (sleep at once)")
    ap.add_argument("--out", help="also write the table (markdown) here")
    ap.add_argument("--json", help="also write per-model results (JSON) here")
    args = ap.parse_args()
    if args.iters < 10:
        ap.error("--iters must be >= 10")
    if args.block < 1:
        ap.error("--block must be >= 1")
    load_start = os.getloadavg()[0]

    t = str(args.threads)
    os.environ["OMP_NUM_THREADS"] = t
    os.environ["OPENBLAS_NUM_THREADS"] = t
    if args.omp_wait_policy != "DEFAULT":
        os.environ["OMP_WAIT_POLICY"] = args.omp_wait_policy
    import numpy as np
    import onnxruntime as ort

    lib = args.lib
    if not os.path.exists(lib):
        sys.exit(f"zoo_latency: no {lib} (build it: ninja -C build libhetplan.so)")
    het = Hetplan(lib)
    ort.set_default_logger_severity(3)

    manifest = json.load(open(os.path.join(args.zoo, "manifest.json")))
    names = [m["name"] for m in manifest["models"]]
    if args.only:
        names = [n for n in names if n in args.only]

    rows, skipped = [], []
    for name in names:
        path = os.path.join(args.zoo, name + ".onnx")
        ref = np.load(os.path.join(args.zoo, name + ".npz"))
        feeds = {k[3:]: ref[k] for k in ref.files if k.startswith("in:")}
        refs = {k[4:]: ref[k] for k in ref.files if k.startswith("out:")}
        try:
            hs = het.load(path)
        except RuntimeError as e:
            skipped.append((name, "load: " + str(e).splitlines()[0][:160]))
            print(f"{name:14s} skipped (hetplan load): {str(e).splitlines()[0][:160]}", flush=True)
            continue
        so = ort.SessionOptions()
        so.intra_op_num_threads = args.threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        osess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        prep = het.prepare(feeds, np)
        try:
            outs = het.run(hs, prep, fetch=True, np=np)
        except RuntimeError as e:
            het.lib.hetplan_session_destroy(hs)
            skipped.append((name, "run: " + str(e).splitlines()[0][:160]))
            print(f"{name:14s} skipped (hetplan run): {str(e).splitlines()[0][:160]}", flush=True)
            continue
        err = 0.0
        for oname, a in outs:
            r = refs.get(oname)
            if r is None or r.shape != a.shape or a.dtype.kind not in "fc":
                continue
            den = float(np.max(np.abs(r.astype(np.float64)))) or 1.0
            err = max(err, float(np.max(np.abs(a.astype(np.float64) - r))) / den if a.size else 0.0)
        for _ in range(args.warmup):
            het.run(hs, prep)
            osess.run(None, feeds)
        def h():
            s = time.perf_counter()
            het.run(hs, prep)
            return (time.perf_counter() - s) * 1e3

        def o():
            s = time.perf_counter()
            osess.run(None, feeds)
            return (time.perf_counter() - s) * 1e3
        th, to, ratios = [], [], []
        if args.interleave == "call":
            for i in range(args.iters):
                if i % 2 == 0:
                    a = h(); b = o()
                else:
                    b = o(); a = h()
                th.append(a); to.append(b); ratios.append(a / b)
        else:
            r = 0
            while len(th) < args.iters:
                n = min(args.block, args.iters - len(th))
                blocks = {}
                for eng in (("h", "o") if r % 2 == 0 else ("o", "h")):
                    settle()
                    f = h if eng == "h" else o
                    f()  # untimed: the first call after the other engine
                    blocks[eng] = [f() for _ in range(n)]
                th += blocks["h"]; to += blocks["o"]
                ratios.append(statistics.median(blocks["h"]) / statistics.median(blocks["o"]))
                r += 1
        het.lib.hetplan_session_destroy(hs)
        del osess
        mh, mo = statistics.median(th), statistics.median(to)
        row = dict(model=name, hetplan_ms=mh, ort_ms=mo, ratio=mh / mo,
                   round_ratio=statistics.median(ratios), rel_err=err,
                   hetplan_min=min(th), ort_min=min(to))
        rows.append(row)
        print(f"{name:14s} hetplan {mh:8.3f} ms  ort {mo:8.3f} ms  ratio {mh / mo:6.2f}"
              f"  (median per-round {row['round_ratio']:.2f}; rel err {err:.1e})", flush=True)

    ratios = sorted(r["ratio"] for r in rows)
    med = statistics.median(ratios) if ratios else float("nan")
    lines = [
        f"Machine: {machine()}; {args.threads} thread(s) each (OMP_NUM_THREADS = "
        f"intra_op_num_threads = {args.threads}; OMP_WAIT_POLICY = "
        f"{os.environ.get('OMP_WAIT_POLICY', 'unset (libgomp default)')}); "
        f"hetplan {het.lib.hetplan_version().decode()}, onnxruntime {ort.__version__} "
        f"(CPUExecutionProvider), numpy {np.__version__}, Python {platform.python_version()}.",
        (f"Warm-up {args.warmup}; {args.iters} timed calls per engine in alternating blocks of "
         f"{args.block} (idle between blocks); medians." if args.interleave == "block" else
         f"Warm-up {args.warmup}, {args.iters} interleaved single calls per engine; medians.") +
        f" Load average (1 min): {load_start:.2f} at the start, {os.getloadavg()[0]:.2f} at the end.",
        "",
        "| model | hetplan ms | onnxruntime ms | hetplan / ort | median per-round ratio | max rel err vs .npz |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['model']} | {r['hetplan_ms']:.3f} | {r['ort_ms']:.3f} | "
                     f"{r['ratio']:.2f} | {r['round_ratio']:.2f} | {r['rel_err']:.1e} |")
    lines.append("")
    lines.append(f"Median ratio over {len(rows)} models: {med:.2f} (goal <= 1.0); "
                 f"models over 1.5x: {sum(1 for r in ratios if r > 1.5)}"
                 f" ({', '.join(r['model'] for r in rows if r['ratio'] > 1.5) or 'none'}).")
    if skipped:
        lines.append("")
        lines.append("Skipped (hetplan cannot load or run them): " +
                     "; ".join(f"{n} ({why})" for n, why in skipped) + ".")
    text = "\n".join(lines)
    print()
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(rows=rows, skipped=skipped, median_ratio=med), f, indent=1)


if __name__ == "__main__":
    main()
