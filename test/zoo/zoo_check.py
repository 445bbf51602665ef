#!/usr/bin/env python3
"""hetplan over the model zoo (models/zoo, written by models/export_zoo.py).

For each model of the manifest.json of models/zoo, models/hf and
models/shipped (models/gen_shipped.py), six stages:

  import       hetplan-translate --import-onnx M -o M.mlir
  compile-gpu  hetplan compile M --cluster 2xA100-80G,2xT4 --mode infer
  compile-cpu  hetplan compile M on 3 CPU nodes (speeds 1, 0.5, 0.25; pinned
               pp=2,mb=1, or the planner's choice when the model has too few
               layers for 2 stages) and on one CPU, --dtype fp32
  run-1        hetplan run of the one-CPU plan on the .npz reference inputs
  run-3        hetplan run of the 3-CPU plan (3 ranks, threads)
  train        language models only: compile --mode train on the 3 CPUs,
               hetplan run --labels L.npy --steps TRAIN_STEPS on one batch;
               the loss must fall at every step and by TRAIN_MIN_FALL of
               the first step's loss over the run (see TRAIN_MIN_FALL)

The outputs of `hetplan run` are compared with onnxruntime's, stored in the
.npz at export time (no onnxruntime needed here): every output must have the
reference's shape and dtype and
    max|got - ref| <= rtol * max|ref| + atol
with rtol 1e-4, atol 1e-6 for float32 (fp16 models: rtol 1e-2; quantized
models: rtol 2e-2, one quantization step of slack); integer and bool
outputs must be equal.

Each stage prints `ok` or `FAIL(reason)` (`-`: does not apply; `skip`: an
earlier stage failed). test/zoo/expected.txt lists per model the stages
expected to pass: a failing expected stage is a regression (exit 1); a
passing stage not yet listed is printed as PROMOTE (exit 0).
--update-expected rewrites the file from this run, but refuses (exit 1,
naming them) to drop a listed stage that failed now, unless --allow-drop.

  zoo_check.py --hetplan BIN --translate BIN [--zoo DIR] [--work DIR]
               [--expected FILE] [--update-expected [--allow-drop]] [--only NAME...]
               [-j N] [-v]

Dims: dims named like a batch (else the first input's leading named dim)
take --batch; every other symbolic dim is bound by name with --dim, as a user
of a model with several sequence-like dims (past, decoder) must.
"""
import argparse
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import cpu_clusters  # noqa: E402

STAGES = ["import", "compile-gpu", "compile-cpu", "run-1", "run-3", "train"]
GPU_CLUSTER = "2xA100-80G,2xT4"
CLUSTER3 = cpu_clusters.CPU3
CLUSTER1 = cpu_clusters.CPU1
# The train stage: TRAIN_STEPS optimizer steps on one batch (the runtime's
# default Adam, lr 1e-3); the loss must fall at every step, and loss[-1]
# must be at most (1 - TRAIN_MIN_FALL) * loss[0]. Measured falls over the 3
# steps: 2.5% (gemma-dyn), 3.5-4.3% (the other zoo LMs), 10-15% (models/hf's
# GPT-2 and Llama); 1% leaves gemma 2.5x headroom, while a dropped or
# wrong-signed gradient leaves the loss flat or rising.
TRAIN_STEPS = 3
TRAIN_MIN_FALL = 0.01
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))


def looks_like_sequence(name):
    """tools/hetplan's rule (passes/planner/ModelPipeline.cpp)."""
    l = name.lower()
    return ("seq" in l or "len" in l or "token" in l or l in ("s", "t") or "time" in l)


def file_name_for(name):
    """tools/hetplan/Run.cpp's fileNameFor: the output's file name."""
    out = "".join(c if (c.isalnum() or c in "-_.") else "_" for c in name)
    return "_" + out if not out or out[0] == "." else out


LIMIT = [60]


def short(text, limit=None):
    """The most telling line of a tool's output, without paths, file names
    and MLIR locations: 'no CPU kernel for If', 'no shape rule: OneHot x2'."""
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    pick = next((l for l in lines if "error" in l.lower()), None)
    if pick is None:
        pick = next((l for l in lines if re.search(
            r"unsupported|not supported|no kernel|fail|cannot|unknown|expected|differ|"
            r"mismatch|missing|invalid", l, re.I)), lines[-1] if lines else "no output")
    pick = re.sub(r"^.*?error: ", "", pick)
    at = re.search(r'loc\("([^"]*)"', pick)
    at = at.group(1).split("/")[-1] if at else "?"
    pick = re.sub(r'loc\("[^"]*"(\("[^"]*":\d+:\d+\))?\): ', "", pick)  # MLIR locations
    pick = re.sub(r"/\S+/", "", pick)                                   # paths
    pick = re.sub(r"^(\S+\.(plan|onnx|mlir): )+", "", pick)            # file names
    pick = re.sub(r"node '[^']*' \(\w+\): ", "", pick)
    m = re.search(r"\(ops without a shape rule: ([^)]*)\)", pick)
    if m:
        pick = "no shape rule: " + m.group(1)
    elif pick.startswith("shape of this value is still not known"):
        pick = f"shape unknown at {at}: " + pick.split(": ", 1)[1]
    pick = re.sub(r"\(and (\d+) more problems\)", r"(+\1)", pick)
    limit = limit or LIMIT[0]
    return pick if len(pick) <= limit else pick[:limit - 2] + ".."


class Stage(Exception):
    pass


def run(cmd, log, timeout):
    t0 = time.time()
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=timeout)
        rc, out = r.returncode, r.stdout
    except subprocess.TimeoutExpired as e:
        rc, out = -1, (e.stdout or b"").decode(errors="replace") if isinstance(
            e.stdout, bytes) else (e.stdout or "")
        out += f"\ntimed out after {timeout} s"
    with open(log, "a") as f:
        f.write(f"$ {' '.join(cmd)}\n{out}\n[rc {rc}, {time.time() - t0:.2f} s]\n")
    if rc < 0 and "timed out" in out:
        return rc, f"timeout {timeout}s"
    if rc < 0:
        return rc, f"signal {-rc} " + short(out)
    return rc, out


def looks_like_batch(name):
    l = name.lower()
    return "batch" in l or l in ("n", "b", "bs", "bsz")


def compile_args(row):
    """--batch and --dim for `hetplan compile`, as a user would give them:
    the batch dims (named like a batch, else the first input's leading named
    dim) take --batch; every other symbolic dim is named with --dim. A row's
    `compile_args` (models/shipped: dims without a name, bound by --shape)
    replace them."""
    if row.get("compile_args"):
        return list(row["compile_args"])
    args = ["--batch", str(row["batch"])]
    named = [d for spec in row["inputs"].values() for d in spec["dims"] if isinstance(d, str)]
    batch = {d for d in named if looks_like_batch(d)}
    if not batch:
        lead = next((spec["dims"][0] for spec in row["inputs"].values()
                     if spec["dims"] and isinstance(spec["dims"][0], str)), None)
        if lead and not looks_like_sequence(lead):
            batch = {lead}
    others = [f"{d}={row['dims'][d]}" for d in dict.fromkeys(named) if d not in batch]
    if others:
        args += ["--dim", ",".join(others)]
    return args


def tolerance(row):
    how = row["exporter"]
    if "fp16" in how:
        return 1e-2
    if "qdq" in how or "qoperator" in how or "dynamic-quant" in how:
        return 2e-2
    return 1e-4


def compare(row, ref, out_dir):
    rtol = tolerance(row)
    worst = 0.0
    for name, want in ref.items():
        path = os.path.join(out_dir, file_name_for(name) + ".npy")
        if not os.path.exists(path):
            raise Stage(f"no output {name}")
        got = np.load(path)
        if got.shape != want.shape:
            raise Stage(f"{name} shape {list(got.shape)} != {list(want.shape)}")
        if got.dtype != want.dtype:
            raise Stage(f"{name} dtype {got.dtype} != {want.dtype}")
        if want.dtype.kind in "fc":
            g64, w64 = got.astype(np.float64), want.astype(np.float64)
            if np.any(np.isnan(g64) != np.isnan(w64)):
                raise Stage(f"{name} NaN where reference has none")
            ok = ~np.isnan(w64)
            err = float(np.max(np.abs(g64[ok] - w64[ok]))) if ok.any() else 0.0
            scale = float(np.max(np.abs(w64[ok]))) if ok.any() else 0.0
            if err > rtol * scale + 1e-6:
                raise Stage(f"{name} max|diff| {err:.2g} (max|ref| {scale:.2g})")
            worst = max(worst, err / max(scale, 1e-30))
        elif not np.array_equal(got, want):
            raise Stage(f"{name} differs ({int(np.sum(got != want))} elements)")
    return worst


def check_model(row, a):
    name = row["name"]
    model = os.path.join(row["dir"], row["file"])
    work = os.path.join(a.work, name)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    log = os.path.join(work, "log.txt")
    res = {s: "-" for s in STAGES}
    detail = {}

    def stage(s, cmd, timeout=a.timeout):
        rc, out = run(cmd, log, timeout)
        if rc != 0:
            detail[s] = out if rc >= 0 else out
            raise Stage(short(out) if rc >= 0 else out)
        return out

    with np.load(os.path.join(row["dir"], row["ref"])) as z:
        feeds = {k[3:]: z[k] for k in z.files if k.startswith("in:")}
        ref = {k[4:]: z[k] for k in z.files if k.startswith("out:")}
    inputs = []
    for k, v in feeds.items():
        p = os.path.join(work, "in_" + file_name_for(k) + ".npy")
        np.save(p, v)
        inputs += ["--input", f"{k}={p}"]
    cargs = compile_args(row)
    plans = {}

    def attempt(s, fn):
        try:
            res[s] = fn() or "ok"
            return True
        except Stage as e:
            res[s] = f"FAIL({e})"
            return False

    def do_import():
        stage("import", [a.translate, "--import-onnx", model, "-o", os.path.join(work, "m.mlir")])

    def do_gpu():
        stage("compile-gpu", [a.hetplan, "compile", model, "--cluster", GPU_CLUSTER, "--mode",
                              "infer", *cargs, "--quiet", "-o", os.path.join(work, "gpu.plan")])

    def compile_cpu3(mode, plan):
        base = [a.hetplan, "compile", model, "--cluster", a.cluster3, "--mode", mode, *cargs,
                "--dtype", "fp32", "--quiet", "-o", plan]
        rc, out = run(base + ["--pin", "pp=2,mb=1"], log, a.timeout)
        if rc != 0 and "more stages than" in out:
            rc, out = run(base, log, a.timeout)
        if rc != 0:
            raise Stage(short(out) if rc >= 0 else out)

    def do_cpu():
        plans[3] = os.path.join(work, "cpu3.plan")
        plans[1] = os.path.join(work, "cpu1.plan")
        try:
            compile_cpu3("infer", plans[3])
        except Stage as e:
            plans.pop(3)
            plans.pop(1)
            raise Stage("3 CPUs: " + str(e))
        rc, out = run([a.hetplan, "compile", model, "--cluster", a.cluster1, "--mode", "infer",
                       *cargs, "--dtype", "fp32", "--quiet", "-o", plans[1]], log, a.timeout)
        if rc != 0:
            plans.pop(1)
            raise Stage("1 CPU: " + (short(out) if rc >= 0 else out))

    def do_run(n):
        out_dir = os.path.join(work, f"out{n}")
        stage(f"run-{n}", [a.hetplan, "run", plans[n], "--output", out_dir, "--ranks", str(n),
                           "--quiet", *inputs])
        worst = compare(row, ref, out_dir)
        return "ok"

    def do_train():
        plan = os.path.join(work, "train.plan")
        compile_cpu3("train", plan)
        lab = row["labels"]
        labels = np.random.default_rng(0).integers(0, lab["classes"], lab["shape"]).astype(
            lab["dtype"])
        lp = os.path.join(work, "labels.npy")
        np.save(lp, labels)
        out_dir = os.path.join(work, "train-out")
        stage("train", [a.hetplan, "run", plan, "--output", out_dir, "--ranks", "3", "--quiet",
                        "--labels", lp, "--steps", str(TRAIN_STEPS), *inputs])
        loss = np.load(os.path.join(out_dir, "loss.npy")).astype(np.float64)
        shown = np.round(loss, 5).tolist()
        if loss.shape != (TRAIN_STEPS,) or not np.all(np.isfinite(loss)):
            raise Stage(f"loss {shown}: expected {TRAIN_STEPS} finite values")
        if not np.all(np.diff(loss) < 0):
            raise Stage(f"loss {shown} does not fall at every step")
        fall = (loss[0] - loss[-1]) / loss[0]
        if not fall >= TRAIN_MIN_FALL:
            raise Stage(f"loss {shown} falls {fall:.1%} < {TRAIN_MIN_FALL:.0%}")
        return "ok"

    ok_import = attempt("import", do_import)
    attempt("compile-gpu", do_gpu)
    if attempt("compile-cpu", do_cpu):
        attempt("run-1", lambda: do_run(1))
        attempt("run-3", lambda: do_run(3))
    else:
        res["run-1"] = res["run-3"] = "skip"
    if row.get("labels"):
        attempt("train", do_train)
    if not ok_import:
        pass  # the later stages go through hetplan's own importer anyway
    return name, res


def read_expected(path):
    exp = {}
    if not os.path.exists(path):
        return exp
    for line in open(path):
        line = line.split("#")[0].split()
        if line:
            exp[line[0]] = set(line[1:])
    return exp


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hetplan", default=os.path.join(ROOT, "build", "bin", "hetplan"))
    ap.add_argument("--translate", default=os.path.join(ROOT, "build", "bin", "hetplan-translate"))
    ap.add_argument("--zoo", action="append",
                    help="a folder with manifest.json (repeatable; default models/zoo, models/hf "
                         "and models/shipped)")
    ap.add_argument("--work", default=os.path.join(ROOT, "build", "test", "zoo"))
    ap.add_argument("--expected", default=os.path.join(HERE, "expected.txt"))
    ap.add_argument("--update-expected", action="store_true")
    ap.add_argument("--allow-drop", action="store_true",
                    help="with --update-expected: also drop listed stages that fail now")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=60, help="seconds per command")
    ap.add_argument("-v", "--verbose", action="store_true", help="full reasons")
    a = ap.parse_args()
    if a.verbose:
        LIMIT[0] = 400
    manifest = {"models": []}
    for z in a.zoo or [os.path.join(ROOT, "models", d) for d in ("zoo", "hf", "shipped")]:
        for r in json.load(open(os.path.join(z, "manifest.json")))["models"]:
            r["dir"] = z
            manifest["models"].append(r)
    rows = [r for r in manifest["models"] if not a.only or r["name"] in a.only]
    os.makedirs(a.work, exist_ok=True)
    a.cluster3 = os.path.join(a.work, "cpu3.yaml")
    a.cluster1 = os.path.join(a.work, "cpu1.yaml")
    open(a.cluster3, "w").write(CLUSTER3)
    open(a.cluster1, "w").write(CLUSTER1)

    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        results = dict(pool.map(lambda r: check_model(r, a), rows))

    width = max(len(r["name"]) for r in rows)
    limit = None if a.verbose else 48
    print(f"{'model':<{width}}  " + "  ".join(STAGES))
    for r in rows:
        cells = []
        for s in STAGES:
            c = results[r["name"]][s]
            cells.append(c if limit is None or len(c) <= limit else c[:limit - 2] + "..")
        print(f"{r['name']:<{width}}  " + " | ".join(cells))
    with open(os.path.join(a.work, "results.json"), "w") as f:
        json.dump(results, f, indent=1)

    expected = read_expected(a.expected)
    regressions, promote = [], []
    for r in rows:
        n = r["name"]
        passed = {s for s, c in results[n].items() if c == "ok"}
        for s in sorted(expected.get(n, set()) - passed, key=STAGES.index):
            regressions.append(f"{n}: {s}: {results[n][s]}")
        for s in sorted(passed - expected.get(n, set()), key=STAGES.index):
            promote.append(f"{n}: {s}")
    if a.only is None:  # a model gone from the manifests takes its expected stages with it
        names = {r["name"] for r in rows}
        for n in expected:
            if n not in names:
                regressions.append(f"{n}: {' '.join(sorted(expected[n], key=STAGES.index))}: "
                                   f"listed in {os.path.basename(a.expected)}, in no manifest")
    total = sum(1 for r in rows for s in STAGES if results[r["name"]][s] != "-")
    passed = sum(1 for r in rows for s in STAGES if results[r["name"]][s] == "ok")
    print(f"{len(rows)} models, {passed}/{total} stages pass ({time.time() - t0:.0f} s)")
    if a.update_expected:
        # A listed stage that fails now is a regression to fix, not a line
        # to delete: say what would be lost and write nothing.
        if regressions and not a.allow_drop:
            for g in regressions:
                print(f"WOULD DROP {g}")
            print(f"refusing to drop {len(regressions)} expected stage(s) that fail now from "
                  f"{a.expected} (fix them, or pass --allow-drop to drop them)")
            return 1
        for g in regressions:
            print(f"DROPPED {g} (--allow-drop)")
        keep = {} if a.only is None else expected
        for r in rows:
            keep[r["name"]] = {s for s, c in results[r["name"]].items() if c == "ok"}
        with open(a.expected, "w") as f:
            f.write("# Stages of each zoo model expected to pass (test/zoo/zoo_check.py).\n"
                    "# Written by zoo_check.py --update-expected; a listed stage that fails is a\n"
                    "# regression. Stages: " + " ".join(STAGES) + "\n")
            for r in manifest["models"]:
                if r["name"] in keep:
                    f.write(" ".join([r["name"]] + [s for s in STAGES if s in keep[r["name"]]])
                            + "\n")
        print(f"wrote {a.expected}")
        return 0
    by_model = {}
    for p in promote:
        n, st = p.split(": ")
        by_model.setdefault(n, []).append(st)
    for n, sts in by_model.items():
        print(f"PROMOTE {n}: {' '.join(sts)} (pass now, not in {os.path.basename(a.expected)})")
    for g in regressions:
        print(f"REGRESSION {g}")
    print(f"zoo: {len(regressions)} regressions, {len(promote)} stages to promote")
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())
