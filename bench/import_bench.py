#!/usr/bin/python3
"""ONNX import benchmark: wall time and peak RSS of `hetplan-translate
--import-onnx` on generated GPT-like models, against `onnx.load` as a baseline.

    /usr/bin/python3 bench/import_bench.py [--sizes-mib 64,512]
        [--variants inline,external] [--repeat 5] [--onnx-repeat 3]
        [--hetplan-translate build/bin/hetplan-translate] [--workdir DIR]

For every size and variant (weights inline as raw_data, or as ONNX external
data in one .data file) the model is written by bench/gen_large_model.py,
then:

  * hetplan-translate --import-onnx MODEL -o OUT.mlir runs --repeat times;
  * a fresh Python process running `onnx.load(MODEL)` (Python protobuf; it
    reads every weight byte into memory, external data included) runs
    --onnx-repeat times.

Each measured command is its own child process, waited for with os.wait4, so
its peak RSS (ru_maxrss) is that child's alone. Wall time of hetplan is the
whole process (start to exit, writing the IR included); the onnx.load time is
taken inside the child around the onnx.load call only (its interpreter start
and `import onnx` are excluded from the time, but not from the RSS: the
RSS of a child that only runs `import onnx` is printed for reference). One
unmeasured warm-up run of each precedes the measured ones, so all numbers are
warm page cache. As a control, a Python child mmaps the model file(s) and
touches every page: its peak RSS shows that ru_maxrss does count the pages of
a file mapping that a process reads, so an importer reading the weights
through its mmap could not hide from this measurement. The generated files are deleted after each model.

Gate: for every model whose weights are at least --gate-min-mib (default 256),
the largest hetplan peak RSS must be at most 0.25 x weight bytes + 64 MiB;
otherwise (or if any import fails) the script exits with status 1.
"""

import argparse
import datetime
import hashlib
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

MIB = 1 << 20
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
GEN = os.path.join(HERE, "gen_large_model.py")

# Control: proves that ru_maxrss counts touched pages of a file mapping, i.e.
# that an importer reading the weights through its mmap would show up.
MMAP_TOUCH = r"""
import mmap, sys
for path in sys.argv[1:]:
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        sum(m[i] for i in range(0, len(m), mmap.PAGESIZE))
"""

ONNX_LOAD = r"""
import sys, time
import onnx
t = time.perf_counter()
m = onnx.load(sys.argv[1])
dt = time.perf_counter() - t
print(dt, m.ByteSize())
"""


def run_measured(cmd, stdout_path=None):
    """Runs cmd as a child; returns (exit code, wall s, peak RSS bytes,
    stdout text, stderr text). Peak RSS comes from os.wait4's rusage, which
    covers this child only."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=out, stderr=err,
                             stdin=subprocess.DEVNULL)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return (p.returncode, wall, ru.ru_maxrss * 1024,  # Linux: KiB
                out.read().decode(errors="replace"),
                err.read().decode(errors="replace"))


def fmt_mib(n):
    return f"{n / MIB:.1f} MiB"


def fmt_s(s):
    return f"{s:.3f} s" if s < 10 else f"{s:.1f} s"


def machine_info():
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = "unknown"
    try:
        with open("/proc/meminfo") as f:
            kib = int(f.readline().split()[1])
            mem = f"{kib / (1 << 20):.1f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return {"nproc": os.cpu_count(), "cpu": cpu, "mem": mem,
            "kernel": platform.release()}


def generate(python, path, size_mib, variant, extra):
    cmd = [python, GEN, path, "--size-mib", str(size_mib),
           "--weights", variant] + extra
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"generator failed: {shlex.join(cmd)}\n{r.stdout}{r.stderr}")
    m = re.search(r"(\d+) blocks, (\d+) initializers, weights (\d+) B", r.stdout)
    files = [path] + ([path + ".data"] if variant == "external" else [])
    return {"blocks": int(m.group(1)), "initializers": int(m.group(2)),
            "weight_bytes": int(m.group(3)),
            "file_bytes": sum(os.path.getsize(f) for f in files),
            "files": files}


def main():
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hetplan-translate",
                    default=os.path.join("build", "bin", "hetplan-translate"),
                    help="path of hetplan-translate (relative paths are "
                         "taken from the repository root)")
    ap.add_argument("--sizes-mib", default="64,512",
                    help="comma-separated weight sizes in MiB")
    ap.add_argument("--variants", default="inline,external",
                    help="comma-separated: inline, external")
    ap.add_argument("--repeat", type=int, default=5,
                    help="measured hetplan runs per model")
    ap.add_argument("--onnx-repeat", type=int, default=3,
                    help="measured onnx.load runs per model (0: skip)")
    ap.add_argument("--python", default=sys.executable,
                    help="interpreter with onnx and numpy, for the generator "
                         "and the onnx.load baseline")
    ap.add_argument("--workdir",
                    help="where to write the models (default: a temporary "
                         "directory, removed at the end)")
    ap.add_argument("--keep", action="store_true",
                    help="keep the generated models and IR")
    ap.add_argument("--gate-min-mib", type=float, default=256,
                    help="models with at least this many MiB of weights must "
                         "keep hetplan's peak RSS <= 0.25 x weights + 64 MiB")
    ap.add_argument("--gen-args", default="",
                    help="extra arguments for gen_large_model.py, e.g. "
                         "'--hidden 2048'")
    args = ap.parse_args()

    tool = args.hetplan_translate
    if not os.path.isabs(tool):
        tool = os.path.join(REPO, tool)
    if not os.access(tool, os.X_OK):
        sys.exit(f"error: {tool} is not an executable; build it first or "
                 f"pass --hetplan-translate")
    sizes = [float(s) for s in args.sizes_mib.split(",") if s]
    variants = [v for v in args.variants.split(",") if v]
    for v in variants:
        if v not in ("inline", "external"):
            sys.exit(f"error: unknown variant {v!r}")

    info = machine_info()
    print("Reproduce with:")
    print(f"    cd {shlex.quote(REPO)} && "
          f"{shlex.join([args.python, os.path.relpath(__file__, REPO)] + sys.argv[1:])}")
    print()
    print(f"date: {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}")
    print(f"machine: nproc={info['nproc']}, CPU: {info['cpu']}, "
          f"memory {info['mem']}, Linux {info['kernel']}")
    st = os.stat(tool)
    with open(tool, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    print(f"hetplan-translate: {tool} ({st.st_size} B, sha256 {digest}..., "
          f"modified {datetime.datetime.fromtimestamp(st.st_mtime):%Y-%m-%d %H:%M:%S})")
    r = subprocess.run([args.python, "-c",
                        "import onnx, google.protobuf as p, numpy, sys; "
                        "print(sys.version.split()[0], onnx.__version__, "
                        "p.__version__, numpy.__version__)"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"error: {args.python} cannot import onnx/numpy:\n{r.stderr}")
    py, onnx_v, pb_v, np_v = r.stdout.split()
    print(f"baseline: {args.python} (Python {py}), onnx {onnx_v}, "
          f"protobuf {pb_v}, numpy {np_v}")

    _, _, import_rss, _, _ = run_measured([args.python, "-c", "import onnx"])
    print(f"peak RSS of a Python child that only runs `import onnx`: "
          f"{fmt_mib(import_rss)}")

    own_workdir = args.workdir is None
    workdir = tempfile.mkdtemp(prefix="hetplan-import-bench-") \
        if own_workdir else os.path.abspath(args.workdir)
    os.makedirs(workdir, exist_ok=True)
    gen_extra = shlex.split(args.gen_args)

    # Fixed cost: hetplan on a tiny model (shared libraries, MLIR context).
    tiny = os.path.join(workdir, "tiny.onnx")
    tg = generate(args.python, tiny, 0, "inline",
                  ["--hidden", "64", "--vocab", "256", "--seq", "8"])
    tcmd = [tool, "--import-onnx", tiny, "-o", os.devnull]
    tiny_rss = []
    for _ in range(3):
        rc, _, rss, _, err = run_measured(tcmd)
        if rc != 0:
            sys.exit(f"error: hetplan-translate fails on a tiny model: "
                     f"{err.strip()} (command: {shlex.join(tcmd)})")
        tiny_rss.append(rss)
    os.remove(tiny)
    print(f"peak RSS of hetplan-translate importing a tiny model "
          f"({tg['weight_bytes'] / 1024:.0f} KiB of weights): "
          f"{fmt_mib(max(tiny_rss))}")
    print(flush=True)

    rows, failures = [], []
    try:
        for size in sizes:
            for variant in variants:
                name = f"gpt_{size:g}mib_{variant}"
                model = os.path.join(workdir, name + ".onnx")
                mlir = os.path.join(workdir, name + ".mlir")
                t0 = time.perf_counter()
                g = generate(args.python, model, size, variant, gen_extra)
                print(f"[{name}] generated in {time.perf_counter() - t0:.1f} s:"
                      f" {g['blocks']} blocks, {g['initializers']} "
                      f"initializers, weights {fmt_mib(g['weight_bytes'])}, "
                      f"files {fmt_mib(g['file_bytes'])}", flush=True)

                _, _, ctl_rss, _, _ = run_measured(
                    [args.python, "-c", MMAP_TOUCH] + g["files"])
                print(f"[{name}] control: a Python child that mmaps the model "
                      f"file(s) and touches every page peaks at "
                      f"{fmt_mib(ctl_rss)} RSS", flush=True)

                cmd = [tool, "--import-onnx", model, "-o", mlir]
                runs, error = [], None
                for i in range(args.repeat + 1):  # run 0: warm-up
                    rc, wall, rss, _, err = run_measured(cmd)
                    if rc != 0:
                        error = (f"exit {rc}: {err.strip()}"
                                 f" (command: {shlex.join(cmd)})")
                        break
                    if i:
                        runs.append((wall, rss))
                if error:
                    print(f"[{name}] hetplan-translate FAILED: {error}")
                    failures.append(f"{name}: hetplan-translate {error}")
                    row = {"name": name, "variant": variant, **g,
                           "error": error}
                else:
                    ir_bytes = os.path.getsize(mlir)
                    times = [w for w, _ in runs]
                    rsss = [r for _, r in runs]
                    print(f"[{name}] hetplan: times "
                          + ", ".join(f"{t:.3f}" for t in times)
                          + " s; peak RSS "
                          + ", ".join(f"{r / MIB:.1f}" for r in rsss)
                          + f" MiB; IR {ir_bytes / 1024:.1f} KiB", flush=True)
                    row = {"name": name, "variant": variant, **g,
                           "error": None, "het_time": statistics.median(times),
                           "het_time_min": min(times),
                           "het_time_max": max(times),
                           "het_rss": max(rsss), "het_rss_min": min(rsss),
                           "ir_bytes": ir_bytes}

                lcmd = [args.python, "-c", ONNX_LOAD, model]
                lruns = []
                for i in range(args.onnx_repeat + (1 if args.onnx_repeat else 0)):
                    rc, wall, rss, out, err = run_measured(lcmd)
                    if rc != 0:
                        msg = err.strip().splitlines()[-1] if err.strip() else ""
                        print(f"[{name}] onnx.load FAILED: exit {rc}: {msg}")
                        failures.append(f"{name}: onnx.load exit {rc}: {msg}")
                        lruns = []
                        break
                    if i:
                        lruns.append((float(out.split()[0]), rss))
                if lruns:
                    lt = [t for t, _ in lruns]
                    lr = [r for _, r in lruns]
                    print(f"[{name}] onnx.load: times "
                          + ", ".join(f"{t:.3f}" for t in lt)
                          + " s; peak RSS "
                          + ", ".join(f"{r / MIB:.1f}" for r in lr) + " MiB",
                          flush=True)
                    row.update(onnx_time=statistics.median(lt),
                               onnx_rss=max(lr))
                rows.append(row)
                if not args.keep:
                    for f in g["files"] + [mlir]:
                        if os.path.exists(f):
                            os.remove(f)
    finally:
        if own_workdir and not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)

    print()
    print(f"hetplan: median wall time and largest peak RSS of {args.repeat} "
          f"runs; onnx.load: median time and largest peak RSS of "
          f"{args.onnx_repeat} runs (each after one warm-up run).")
    print()
    print("| model | weights | file size (incl. external data) "
          "| hetplan import time (median) | hetplan peak RSS "
          "| RSS / file size | onnx.load time (median) | onnx.load peak RSS "
          "| hetplan RSS / onnx.load RSS | gate: RSS <= 0.25 x weights "
          "+ 64 MiB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        gated = r["weight_bytes"] >= args.gate_min_mib * MIB
        budget = 0.25 * r["weight_bytes"] + 64 * MIB
        if r["error"]:
            het = ["FAILED", "FAILED", "-"]
            gate = "FAIL (import failed)"
        else:
            het = [fmt_s(r["het_time"]), fmt_mib(r["het_rss"]),
                   f"{r['het_rss'] / r['file_bytes']:.3f}"]
            ok = r["het_rss"] <= budget
            gate = (("pass" if ok else "FAIL") + f" ({fmt_mib(budget)})") \
                if gated else f"n/a (< {args.gate_min_mib:g} MiB)"
            if gated and not ok:
                failures.append(f"{r['name']}: hetplan peak RSS "
                                f"{fmt_mib(r['het_rss'])} > budget "
                                f"{fmt_mib(budget)}")
        if "onnx_rss" in r:
            base = [fmt_s(r["onnx_time"]), fmt_mib(r["onnx_rss"])]
            ratio = (f"{r['het_rss'] / r['onnx_rss']:.3f}"
                     if not r["error"] else "-")
        else:
            base, ratio = ["-", "-"], "-"
        print(f"| {r['name']} | {fmt_mib(r['weight_bytes'])} "
              f"| {fmt_mib(r['file_bytes'])} | {het[0]} | {het[1]} | {het[2]} "
              f"| {base[0]} | {base[1]} | {ratio} | {gate} |")
    print()
    if failures:
        print("FAILED:")
        for f in failures:
            print(f"  {f}")
        return 1
    print("all imports succeeded; gate passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
