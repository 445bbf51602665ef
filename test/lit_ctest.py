#!/usr/bin/env python3
"""Runs part of the lit suite as one ctest test, so that a lit UNSUPPORTED
is a ctest skip, never a pass hidden inside the whole suite's exit code 0.

  lit_ctest.py LIT SOURCE_DIR EXEC_DIR --feature NAME --path PATH  # the tests that REQUIRE NAME
  lit_ctest.py LIT SOURCE_DIR EXEC_DIR --rest FEATURE...           # every other test

The tests that say `REQUIRES: NAME` (NAME: a lit feature of lit.cfg.py that
depends on the machine, e.g. shared-models) run in their own ctest test:
exit 77 (SKIP_RETURN_CODE) when every one of them is UNSUPPORTED, saying
that PATH (what the feature needs) is absent; exit 1 when only some are. In
the --rest run no test may be UNSUPPORTED (exit 1 naming them): a test
that needs something the machine may lack belongs in a --feature run.
"""
import argparse
import os
import re
import subprocess
import sys

SUFFIXES = (".mlir", ".onnxtext", ".test")  # lit.cfg.py's config.suffixes


def tests_requiring(source, features):
    """Paths (relative to source) of the tests whose REQUIRES names a feature."""
    found = []
    for dirpath, dirnames, files in os.walk(source):
        dirnames[:] = sorted(d for d in dirnames if d not in ("Inputs", "unit", "conformance"))
        for f in sorted(files):
            if not f.endswith(SUFFIXES):
                continue
            p = os.path.join(dirpath, f)
            with open(p, errors="replace") as fh:
                for line in fh:
                    m = re.search(r"\bREQUIRES:(.*)", line)
                    if m and set(re.findall(r"[\w.-]+", m.group(1))) & set(features):
                        found.append(os.path.relpath(p, source).replace(os.sep, "/"))
                        break
    return found


def unsupported_tests(out):
    """The UNSUPPORTED tests of lit's output: `-s --show-unsupported` lists
    them under "Unsupported Tests (N):", without -s one line each; the
    summary's "Unsupported: N" must agree."""
    names = re.findall(r"^UNSUPPORTED: \S+ :: (\S+)", out, re.M)
    m = re.search(r"^Unsupported Tests \(\d+\):\n((?:\s+\S+ :: \S+\n)*)", out, re.M)
    if m:
        names += re.findall(r":: (\S+)", m.group(1))
    counted = re.search(r"^\s*Unsupported\s*:\s*(\d+)", out, re.M)
    if counted and int(counted.group(1)) != len(set(names)):
        names.append(f"({counted.group(1)} counted, {len(set(names))} named)")
    return sorted(set(names))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("lit")
    ap.add_argument("source")
    ap.add_argument("exec_dir")
    ap.add_argument("--feature")
    ap.add_argument("--path", help="what --feature needs (named when its tests skip)")
    ap.add_argument("--rest", nargs="+", metavar="FEATURE")
    a = ap.parse_args()
    if bool(a.feature) == bool(a.rest):
        ap.error("give --feature or --rest")
    split = tests_requiring(a.source, [a.feature] if a.feature else a.rest)
    rx = "|".join(re.escape(t) + "$" for t in split)
    cmd = [a.lit, "-sv", "--show-unsupported"]
    if a.feature:
        if not split:
            print(f"FAIL: no lit test under {a.source} says REQUIRES: {a.feature}")
            return 1
        cmd += ["--filter", rx]
    elif split:
        cmd += ["--filter-out", rx]
    cmd.append(a.exec_dir)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sys.stdout.write(r.stdout)
    unsupported = unsupported_tests(r.stdout)
    if r.returncode != 0:
        return r.returncode
    if a.rest:
        if unsupported:
            print(f"FAIL: {len(unsupported)} lit test(s) UNSUPPORTED outside a --feature run "
                  f"(they would pass silently): {' '.join(unsupported)}")
            return 1
        return 0
    if len(unsupported) == len(split):
        print(f"SKIP: {a.path or a.feature} is absent ({len(split)} lit test(s) need it: "
              f"{' '.join(split)})")
        return 77
    if unsupported:
        print(f"FAIL: only some of the {a.feature} tests are UNSUPPORTED: {' '.join(unsupported)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
