#!/usr/bin/env python3
"""Import every ONNX model of some test suites and assert zero crashes.

Each model must either import (hetplan-translate exits 0 and its output
verifies) or fail with one clear error line. The script prints, per suite,
how many imported, how many were rejected as unsupported, how many failed
otherwise and how many crashed. It fails when anything crashed, when an
imported model's IR does not parse back in hetplan-opt, or when a suite's
import rate is under its bar (`--suite NAME=DIR:MIN_RATE`).

With `--expected FILE` (test/conformance/import-expected.txt) every model a
suite run does not import must be pinned there with its kind and reason
(`SUITE MODEL KIND REASON`, KIND unsupported or error), and each suite must
import at least its floor (`floor SUITE N`): the run fails on a model that
no longer imports, on a pinned model that now imports (its line is printed
for removal), on a changed kind, and on a pin whose model is gone. A crash is
never pinned. `--update-expected` rewrites the lines of the suites run from
this run (the other suites' lines stay) and refuses while anything crashes.

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


PIN_KINDS = ("unsupported", "error")
HEADER = """\
# Models the import suites do not import (written by import_conformance.py
# --update-expected; see docs/runtime.md, "Conformance"). Every model not listed
# must import. A line is SUITE MODEL KIND REASON (KIND: unsupported or error); a
# crash is never pinned. "floor SUITE N": at least N models of SUITE import.
"""


def read_expected(path):
    """Returns ({suite: floor}, {(suite, model): (kind, reason)})."""
    floors, pins = {}, {}
    if not os.path.exists(path):
        return floors, pins
    with open(path) as f:
        for no, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.startswith("#"):
                continue
            parts = line.split(None, 3)
            if parts[0] == "floor" and len(parts) == 3 and parts[2].isdigit():
                floors[parts[1]] = int(parts[2])
            elif len(parts) == 4 and parts[2] in PIN_KINDS:
                if (parts[0], parts[1]) in pins:
                    raise SystemExit("%s:%d: pinned twice: %s" % (path, no, line))
                pins[(parts[0], parts[1])] = (parts[2], parts[3])
            else:
                raise SystemExit("%s:%d: not 'floor SUITE N' nor 'SUITE MODEL KIND REASON' "
                                 "with KIND in %s: %s" % (path, no, PIN_KINDS, line))
    return floors, pins


def pin_reason(msg, root):
    """The reason as pinned: no machine-specific folder, one line, short."""
    msg = msg.replace(root.rstrip("/") + "/", "").replace("\n", " ")
    return msg if len(msg) <= 160 else msg[:157] + "..."


def check_expected(name, results, floor, pins, path):
    """results: {model: (kind, reason)} of one suite; returns problems."""
    bad = []
    for model, (kind, reason) in sorted(results.items()):
        pin = pins.get((name, model))
        if kind == "crash":
            continue  # reported and failed on its own
        if pin is None:
            if kind != "ok":
                bad.append("NOT PINNED %s %s: %s: %s\n    (fix it, or if it is expected add "
                           "to %s: %s %s %s %s)" % (name, model, kind, reason, path, name, model,
                                                    kind, reason))
        elif kind == "ok":
            bad.append("NOW IMPORTS %s %s: remove this line from %s: %s %s %s %s"
                       % (name, model, path, name, model, pin[0], pin[1]))
        elif kind != pin[0]:
            bad.append("CHANGED %s %s: pinned as %s, now %s: %s\n    (if expected, replace its "
                       "line in %s with: %s %s %s %s)" % (name, model, pin[0], kind, reason, path,
                                                           name, model, kind, reason))
    for (suite, model), _ in sorted(pins.items()):
        if suite == name and model not in results:
            bad.append("STALE PIN %s %s: no such model; remove its line from %s"
                       % (suite, model, path))
    imported = sum(1 for kind, _ in results.values() if kind == "ok")
    if floor is not None and imported < floor:
        bad.append("FLOOR suite %s: %d models import, the floor in %s is %d"
                   % (name, imported, path, floor))
    return bad


def write_expected(path, ran, floors, pins):
    """ran: {suite: {model: (kind, reason)}}; rewrites the suites run,
    keeps the others' lines. Refuses while anything crashed."""
    crashed = ["%s %s: %s" % (s, m, r) for s, res in sorted(ran.items())
               for m, (k, r) in sorted(res.items()) if k == "crash"]
    if crashed:
        print("REFUSED to write %s: %d crash(es), never an expectation; fix them:" % (path, len(crashed)))
        for c in crashed:
            print("  " + c)
        return False
    for suite, res in ran.items():
        floors[suite] = sum(1 for k, _ in res.values() if k == "ok")
        pins = {key: v for key, v in pins.items() if key[0] != suite}
        pins.update({(suite, m): (k, r) for m, (k, r) in res.items() if k != "ok"})
    with open(path, "w") as f:
        f.write(HEADER)
        for suite in sorted(floors):
            f.write("floor %s %d\n" % (suite, floors[suite]))
        for (suite, model), (kind, reason) in sorted(pins.items()):
            f.write("%s %s %s %s\n" % (suite, model, kind, reason))
    print("wrote %s: %s" % (path, ", ".join("%s floor %d, %d pinned" % (
        s, floors[s], sum(1 for k in pins if k[0] == s)) for s in sorted(ran))))
    return True


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
    ap.add_argument("--expected",
                    help="pinned non-imported models and floors per suite (see above)")
    ap.add_argument("--update-expected", action="store_true",
                    help="rewrite --expected's lines for the suites run from this run")
    args = ap.parse_args()
    if args.update_expected and not args.expected:
        ap.error("--update-expected needs --expected FILE")
    floors, pins = read_expected(args.expected) if args.expected else ({}, {})
    ran = {}

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
        results = ran[name] = {}
        with tempfile.TemporaryDirectory() as work, \
                concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            futures = [pool.submit(import_one, args.translate, m,
                                   os.path.join(work, "%05d.mlir" % i), args.timeout)
                       for i, m in enumerate(models)]
            outputs = []
            for i, fut in enumerate(futures):
                model, kind, msg = fut.result()
                counts[kind] += 1
                results[os.path.relpath(model, root)] = (kind, pin_reason(msg, root))
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
        if args.expected and not args.update_expected:
            bad = check_expected(name, results, floors.get(name), pins, args.expected)
            for b in bad:
                print(b)
            if bad:
                ok_all = False
                print("FAIL suite %s: %d difference(s) from %s (a model that now imports or is "
                      "newly refused for a good reason: rerun with --update-expected)"
                      % (name, len(bad), args.expected))
            elif name not in floors:
                ok_all = False
                print("FAIL suite %s: no floor in %s (add one with --update-expected)"
                      % (name, args.expected))
    if args.summary_file:
        with open(args.summary_file, "w") as f:
            f.write("".join(l + "\n" for l in summary) or "skipped: no suite folder found\n")
    if args.update_expected and ran and not write_expected(args.expected, ran, floors, pins):
        return 1
    if not ran_any:
        return SKIP
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
