#!/usr/bin/env python3
"""Which product source files name an op (issue 20: an op's name is in at most
three non-test source files: its definition in ops/defs/, its CPU kernel
file, its CUDA kernel file).

  scripts/op-name-files.py [OP...]           list the files naming each op
  scripts/op-name-files.py --check [OP...]   exit 1 when an op is in more than 3

A file names an op when the op type appears as a whole word outside //
comments (string literals and messages count: a message that names an op
belongs in its kernel file). Default ops: the ones issue 20 named, which
docs/adding-an-op.md walks. Tests, docs and generated files are not product
code. ALLOWED lists the uses that are not the op at all.
"""
import argparse
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OPS = ["LayerNormalization", "MatMul", "Softmax", "Conv", "Relu", "Gather"]
PRODUCT = ("ops", "passes", "runtime", "tools", "dialects", "python")
EXTS = (".cpp", ".h", ".cu", ".td", ".py")
# (op, file): why that file's mention is not the op.
_BENCH = "builds the micro-benchmark's models from the op (uses it, does not implement it)"
_PROFILE = "names a micro-benchmark in the cluster file it writes"
ALLOWED = {
    ("Relu", "runtime/src/cpu/kernels/Recurrent.cpp"):
        'a value of the RNN/LSTM/GRU `activations` attribute ("Relu"), not the op',
    ("MatMul", "runtime/src/exec/Microbench.cpp"): _BENCH,
    ("Softmax", "runtime/src/exec/Microbench.cpp"): _BENCH,
    ("Relu", "runtime/src/exec/Microbench.cpp"): _BENCH,
    ("MatMul", "tools/hetplan/Profile.cpp"): _PROFILE,
    ("Relu", "tools/hetplan/Profile.cpp"): _PROFILE,
}


def product_files():
    out = subprocess.check_output(["git", "-C", ROOT, "ls-files", *PRODUCT], text=True).split()
    return [f for f in out if f.endswith(EXTS) and "test" not in f.lower()]


def naming(op, files):
    word = re.compile(r"\b" + re.escape(op) + r"\b")
    hits = []
    for f in files:
        comment = "#" if f.endswith(".py") else "//"
        with open(os.path.join(ROOT, f), errors="replace") as fh:
            if any(word.search(line.split(comment, 1)[0]) for line in fh):
                hits.append(f)
    return hits


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    ap.add_argument("ops", nargs="*", default=DEFAULT_OPS)
    a = ap.parse_args()
    files = product_files()
    bad = False
    for op in a.ops:
        hits = naming(op, files)
        counted = [f for f in hits if (op, f) not in ALLOWED]
        print(f"{op}: {len(counted)} file(s)")
        for f in hits:
            why = ALLOWED.get((op, f))
            print(f"  {f}" + (f"  (not counted: {why})" if why else ""))
        if len(counted) > 3:
            bad = True
            print(f"  error: {op} is named in {len(counted)} files; at most 3 (definition, CPU kernel, CUDA kernel)")
    return 1 if a.check and bad else 0


if __name__ == "__main__":
    sys.exit(main())
