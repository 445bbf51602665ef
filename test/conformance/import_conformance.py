#!/usr/bin/env python3
"""Import every ONNX model of some test suites and assert zero crashes.

Each model must either import (hetplan-translate exits 0 and its output
verifies) or fail with one clear error line. The script prints, per suite,
how many imported, how many were rejected as unsupported, how many failed
otherwise and how many crashed. It fails when anything crashed, when an
imported model's IR does not parse back in hetplan-opt, or when a suite's
import rate is under its bar (`--suite NAME=DIR:MIN_RATE`).

  import_conformance.py --translate BIN --opt BIN --suite node=DIR:0.98 ...
"""
import argparse
import concurrent.futures
import os
import subprocess
import sys
import tempfile

SKIP = 77  # ctest's SKIP_RETURN_CODE


def find_models(root):
    models = []
    for dirpath, _, files in os.walk(root):
        for f in files:
            if f.endswith(".onnx"):
                models.append(os.path.join(dirpath, f))
    return sorted(models)


def import_one(translate, model, out_path, timeout):
    try:
        p = subprocess.run([translate, "--import-onnx", model, "-o", out_path],
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return model, "crash", "timed out after %d s (a hang)" % timeout
    err = p.stderr.strip()
    if p.returncode == 0:
        return model, "ok", ""
    if p.returncode < 0 or p.returncode > 1:
        return model, "crash", "exit %d: %s" % (p.returncode, err[-400:])
    lines = err.splitlines()
    if len(lines) != 1 or "error:" not in lines[0]:
        return model, "crash", "unclear error (%d lines): %s" % (len(lines), err[-400:])
    if os.path.exists(out_path):
        return model, "crash", "failed but left a partial output file"
    kind = "unsupported" if "unsupported" in lines[0] else "error"
    return model, kind, lines[0]


def roundtrip(opt, outputs, workdir, passes=()):
    """Parses and verifies every imported module in one hetplan-opt run
    (and runs `passes` on each)."""
    if not outputs:
        return True, ""
    joined = os.path.join(workdir, "all.mlir")
    with open(joined, "w") as f:
        for i, path in enumerate(outputs):
            if i:
                f.write("\n// -----\n")
            with open(path) as g:
                f.write(g.read())
    p = subprocess.run([opt, "--split-input-file", *passes, joined, "-o", os.devnull],
                       capture_output=True, text=True)
    return p.returncode == 0, p.stderr[-2000:]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--translate", required=True)
    ap.add_argument("--opt", required=True)
    ap.add_argument("--suite", action="append", required=True,
                    help="NAME=DIR[:MIN_IMPORT_RATE]")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--timeout", type=int, default=120)
    ap.add_argument("--skip-missing", action="store_true",
                    help="exit 77 (skipped) when a suite's folder is absent")
    ap.add_argument("--summary-file",
                    help="also write the per-suite count lines to this file")
    ap.add_argument("--show", type=int, default=15,
                    help="how many non-imported models to list per suite")
    args = ap.parse_args()

    ok_all = True
    ran_any = False
    summary = []
    for spec in args.suite:
        name, rest = spec.split("=", 1)
        root, _, rate = rest.partition(":")
        if not os.path.isdir(root):
            msg = "suite %s: %s is absent" % (name, root)
            if args.skip_missing:
                print("SKIP " + msg)
                continue
            print("FAIL " + msg)
            ok_all = False
            continue
        ran_any = True
        models = find_models(root)
        counts = {"ok": 0, "unsupported": 0, "error": 0, "crash": 0}
        notes = []
        with tempfile.TemporaryDirectory() as work, \
                concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            futures = [pool.submit(import_one, args.translate, m,
                                   os.path.join(work, "%05d.mlir" % i), args.timeout)
                       for i, m in enumerate(models)]
            outputs = []
            for i, fut in enumerate(futures):
                model, kind, msg = fut.result()
                counts[kind] += 1
                if kind == "ok":
                    outputs.append(os.path.join(work, "%05d.mlir" % i))
                else:
                    notes.append("  %-11s %s: %s" % (kind, os.path.relpath(model, root), msg))
            parsed, parse_err = roundtrip(args.opt, outputs, work)
            # het's own shape rules must agree with every type the model
            # (value_info, libonnx inference) declares.
            shaped, shape_err = roundtrip(args.opt, outputs, work, ["--het-bind-shapes"])
        total = len(models)
        imported = counts["ok"] / total if total else 0.0
        line = ("suite %s: %d models: %d imported and verified (%.1f%%), %d unsupported, "
                "%d other errors, %d crashes; round trip through hetplan-opt: %s; "
                "het shape rules agree with the model: %s"
                % (name, total, counts["ok"], 100 * imported, counts["unsupported"],
                   counts["error"], counts["crash"], "ok" if parsed else "FAILED",
                   "ok" if shaped else "NO"))
        print(line)
        summary.append(line)
        for line in notes[:args.show]:
            print(line)
        if len(notes) > args.show:
            print("  ... and %d more" % (len(notes) - args.show))
        if counts["crash"]:
            ok_all = False
            print("FAIL suite %s: %d crashes" % (name, counts["crash"]))
        if not parsed:
            ok_all = False
            print("FAIL suite %s: imported IR does not parse back:\n%s" % (name, parse_err))
        if not shaped:
            ok_all = False
            print("FAIL suite %s: het-bind-shapes disagrees with declared types:\n%s"
                  % (name, shape_err))
        if total == 0:
            ok_all = False
            print("FAIL suite %s: no models found under %s" % (name, root))
        if rate and imported < float(rate):
            ok_all = False
            print("FAIL suite %s: import rate %.1f%% is under the bar of %.1f%%"
                  % (name, 100 * imported, 100 * float(rate)))
    if args.summary_file:
        with open(args.summary_file, "w") as f:
            f.write("".join(l + "\n" for l in summary) or "skipped: no suite folder found\n")
    if not ran_any:
        return SKIP
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
