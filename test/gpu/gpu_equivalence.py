#!/usr/bin/env python3
"""Plans on CUDA ranks against the same plans on CPU ranks (docs/gpu.md).

For every model -- the shipped examples (examples/models) and, with --zoo,
the model zoo of real exports (models/zoo, models/hf; inputs and dims as
test/zoo/zoo_check.py gives them) -- compile an inference plan for
2xA100-80G and run it with `hetplan run --device cpu` and `--device cuda`:

  fp32   plan --dtype fp32: max|gpu - cpu| <= 1e-3 * max|cpu| + 1e-6
  fp16   plan --dtype fp16 (tensor-core GEMMs and convolutions): 1e-2
  bf16   plan --dtype bf16: 3e-2

and for gpt2-tiny a 2-step training plan (fp32): each loss within 1e-3.

The onnx-light graphs (../shared/models/onnx-light, unless --no-onnx-light)
run too, with seeded random weights (test/runtime/onnx_light_random.py:
their stored weights are one constant, under which a wrong kernel goes
unseen) on seeded inputs, batch 1: besides CUDA against CPU, the fp32 CUDA
outputs (logits and final output) are compared with onnxruntime's, stored
in test/runtime/references/onnx-light (max-norm relative error <= 1e-3).
A model the CUDA executor cannot run (`hetplan run --device cuda` says "the
CUDA executor cannot run its stage") counts as unsupported, not failed.
One line per check; exit 1 if any failed.

  gpu_equivalence.py --hetplan BIN --work DIR [--zoo] [--no-onnx-light] [--only NAME...] [-j N]
                     [--timeout S]
"""
import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "test", "zoo"))
sys.path.insert(0, os.path.join(ROOT, "test", "runtime"))
ONNX_LIGHT = os.path.normpath(os.path.join(ROOT, "..", "shared", "models", "onnx-light"))

CLUSTER = "2xA100-80G"
TOLERANCE = {"fp32": 1e-3, "fp16": 1e-2, "bf16": 3e-2}


def run(cmd, timeout):
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
        return r.returncode, r.stdout
    except subprocess.TimeoutExpired:
        return -1, f"timed out after {timeout} s"


def worst_error(got_dir, want_dir, names):
    """max over outputs of max|got - want| / max|want| (floats), or a reason."""
    worst = 0.0
    for name in names:
        g = np.load(os.path.join(got_dir, name))
        w = np.load(os.path.join(want_dir, name))
        if g.shape != w.shape or g.dtype != w.dtype:
            return None, f"{name}: {g.dtype}{list(g.shape)} vs {w.dtype}{list(w.shape)}"
        if w.dtype.kind not in "fc":
            if not np.array_equal(g, w):
                return None, f"{name}: {int(np.sum(g != w))} elements differ"
            continue
        g64, w64 = g.astype(np.float64), w.astype(np.float64)
        ok = ~np.isnan(w64)
        if np.any(np.isnan(g64) != np.isnan(w64)):
            return None, f"{name}: NaN where the CPU has none"
        if not ok.any():
            continue
        scale = float(np.max(np.abs(w64[ok])))
        err = float(np.max(np.abs(g64[ok] - w64[ok])))
        worst = max(worst, (err - 1e-6) / scale if scale > 0 else err)
    return max(worst, 0.0), ""


def example_rows():
    rows = []
    for f in sorted(os.listdir(os.path.join(ROOT, "examples", "models"))):
        if f.endswith(".onnx"):
            rows.append({"name": os.path.splitext(f)[0], "path": os.path.join(ROOT, "examples", "models", f),
                         "compile": ["--batch", "4", "--seq", "16"], "feeds": None})
    return rows


def zoo_rows():
    import zoo_check  # test/zoo: the zoo's manifests and how to compile each model
    rows = []
    for z in [os.path.join(ROOT, "models", "zoo"), os.path.join(ROOT, "models", "hf")]:
        for r in json.load(open(os.path.join(z, "manifest.json")))["models"]:
            with np.load(os.path.join(z, r["ref"])) as npz:
                feeds = {k[3:]: npz[k] for k in npz.files if k.startswith("in:")}
            rows.append({"name": r["name"], "path": os.path.join(z, r["file"]),
                         "compile": zoo_check.compile_args(r), "feeds": feeds})
    return rows


def onnx_light_rows(a):
    """The onnx-light graphs with seeded random weights, written under
    WORK/onnx-light (weights in MODEL.onnx.data, up to 575 MB each)."""
    import onnx_light_random
    rows = []
    out = os.path.join(a.work, "onnx-light")
    os.makedirs(out, exist_ok=True)
    for src in sorted(os.listdir(ONNX_LIGHT)):
        name = os.path.splitext(src)[0]
        if not src.endswith(".onnx") or (a.only and name not in a.only):
            continue
        path = os.path.join(out, src)
        info = onnx_light_random.randomize(os.path.join(ONNX_LIGHT, src), path)
        feeds = onnx_light_random.make_inputs(path)
        info["inputs_digest"] = onnx_light_random.inputs_digest(feeds)
        rows.append({"name": name, "path": path, "compile": ["--batch", "1"], "feeds": feeds, "ort": info})
    return rows


def ort_check(row, cuda_dir):
    """The fp32 CUDA outputs of a randomized onnx-light graph against
    onnxruntime's: (ok, message)."""
    import onnx_light_random
    outputs = {}
    for o in row["ort"]["outputs"]:
        f = os.path.join(cuda_dir, onnx_light_random.safe(o) + ".npy")
        if os.path.exists(f):
            outputs[o] = np.load(f)
    return onnx_light_random.compare(row["name"], row["ort"], outputs, tolerance=TOLERANCE["fp32"])


def feeds_for(a, row, work):
    """--input arguments: the row's reference inputs, else random token ids
    (batch 4, sequence 16) for every graph input."""
    feeds = row["feeds"]
    if feeds is None:
        rc, out = run([a.hetplan, "summary", row["path"], "--json"], a.timeout)
        rng = np.random.default_rng(0)
        feeds = {}
        for i in json.loads(out)["inputs"]:
            v = rng.integers(0, 50, size=(4, 16), dtype=np.int64)
            if "mask" in i["name"]:
                v = np.ones((4, 16), np.int64)
            elif "type" in i["name"]:
                v = rng.integers(0, 2, size=(4, 16), dtype=np.int64)
            feeds[i["name"]] = v
    args = []
    for k, v in feeds.items():
        p = os.path.join(work, "in_" + "".join(c if c.isalnum() else "_" for c in k) + ".npy")
        np.save(p, v)
        args += ["--input", f"{k}={p}"]
    return args


def check(a, row, dtype, results):
    name = row["name"]
    work = os.path.join(a.work, name, dtype)
    os.makedirs(work, exist_ok=True)
    plan = os.path.join(work, "plan")
    t0 = time.time()
    rc, out = run([a.hetplan, "compile", row["path"], "--cluster", CLUSTER, "--mode", "infer", *row["compile"],
                   "--dtype", dtype, "--quiet", "-o", plan], a.timeout)
    if rc != 0:
        results.append((f"{name} {dtype}", "skip", "does not compile: " + out.strip().splitlines()[-1][:90], 0))
        return
    inputs = feeds_for(a, row, work)
    dirs = {}
    for device in ("cpu", "cuda"):
        dirs[device] = os.path.join(work, device)
        rc, out = run([a.hetplan, "run", plan, "--device", device, "--output", dirs[device], "--quiet", *inputs],
                      a.timeout)
        if rc != 0:
            status = "unsupported" if "cannot run its stage" in out else "FAIL"
            results.append((f"{name} {dtype}", status, f"--device {device}: " + out.strip()[-120:], time.time() - t0))
            return
    names = sorted(f for f in os.listdir(dirs["cpu"]) if f.endswith(".npy"))
    err, why = worst_error(dirs["cuda"], dirs["cpu"], names)
    if err is None:
        results.append((f"{name} {dtype}", "FAIL", why, time.time() - t0))
    else:
        ok = err <= TOLERANCE[dtype]
        detail = f"max rel err {err:.2e} (tolerance {TOLERANCE[dtype]:g})"
        if row.get("ort") and dtype == "fp32":
            ort_ok, msg = ort_check(row, dirs["cuda"])
            ok, detail = ok and ort_ok, detail + "; CUDA " + msg
        results.append((f"{name} {dtype}", "ok" if ok else "FAIL", detail, time.time() - t0))


def check_training(a, results):
    model = os.path.join(ROOT, "examples", "models", "gpt2-tiny.onnx")
    work = os.path.join(a.work, "gpt2-tiny", "train")
    os.makedirs(work, exist_ok=True)
    plan = os.path.join(work, "plan")
    t0 = time.time()
    rc, out = run([a.hetplan, "compile", model, "--cluster", CLUSTER, "--mode", "train", "--batch", "4", "--seq",
                   "16", "--dtype", "fp32", "--quiet", "-o", plan], a.timeout)
    if rc != 0:
        results.append(("gpt2-tiny train", "FAIL", "compile: " + out.strip()[-120:], time.time() - t0))
        return
    rng = np.random.default_rng(1)
    np.save(os.path.join(work, "ids.npy"), rng.integers(0, 50, size=(4, 16), dtype=np.int64))
    np.save(os.path.join(work, "labels.npy"), rng.integers(0, 50, size=(4, 16), dtype=np.int64))
    losses = {}
    for device in ("cpu", "cuda"):
        out_dir = os.path.join(work, device)
        rc, out = run([a.hetplan, "run", plan, "--device", device, "--input",
                       "input_ids=" + os.path.join(work, "ids.npy"), "--labels", os.path.join(work, "labels.npy"),
                       "--steps", "2", "--output", out_dir, "--quiet"], a.timeout)
        if rc != 0:
            results.append(("gpt2-tiny train", "FAIL", f"--device {device}: " + out.strip()[-120:], time.time() - t0))
            return
        losses[device] = np.load(os.path.join(out_dir, "loss.npy"))
    err = float(np.max(np.abs(losses["cuda"] - losses["cpu"]) / np.abs(losses["cpu"])))
    results.append(("gpt2-tiny train", "ok" if err <= 1e-3 else "FAIL",
                    f"losses {losses['cuda'].round(5).tolist()} vs {losses['cpu'].round(5).tolist()}", time.time() - t0))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hetplan", default=os.path.join(ROOT, "build", "bin", "hetplan"))
    ap.add_argument("--work", default=os.path.join(ROOT, "build", "test", "gpu"))
    ap.add_argument("--zoo", action="store_true", help="also every model of models/zoo and models/hf")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--timeout", type=int, default=120, help="seconds per command")
    ap.add_argument("-j", "--jobs", type=int, default=4, help="checks at once (they share the GPU)")
    ap.add_argument("--no-onnx-light", action="store_true", help="leave out the onnx-light graphs")
    a = ap.parse_args()
    rows = example_rows() + (zoo_rows() if a.zoo else [])
    if not a.no_onnx_light and os.path.isdir(ONNX_LIGHT):
        rows += onnx_light_rows(a)
    if a.only:
        rows = [r for r in rows if r["name"] in a.only]
    jobs = [(row, dtype) for row in rows
            for dtype in (("fp32", "fp16", "bf16") if row["feeds"] is None else ("fp32", "fp16"))]
    per_job = [[] for _ in jobs]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        for f in [pool.submit(check, a, row, dtype, per_job[i]) for i, (row, dtype) in enumerate(jobs)]:
            f.result()
    results = [r for rs in per_job for r in rs]
    if not a.only or "gpt2-tiny" in a.only:
        check_training(a, results)
    width = max(len(r[0]) for r in results)
    for name, status, detail, secs in results:
        print(f"{name:<{width}}  {status:<11}  {secs:6.1f}s  {detail}")
    failed = [r for r in results if r[1] == "FAIL"]
    counts = {s: sum(1 for r in results if r[1] == s) for s in ("ok", "unsupported", "skip", "FAIL")}
    print("gpu-equivalence: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
