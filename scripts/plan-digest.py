#!/usr/bin/env python3
"""Digest of every plan file under a build tree, for behaviour-identical
refactors (issue 20: "every plan the test suite writes is byte-identical
before and after").

  scripts/plan-digest.py BUILD_DIR [--root SRC_ROOT] > digest.txt
  scripts/plan-digest.py --compare BEFORE.txt AFTER.txt

Run the lit suite (and any ctest that writes plans) in BUILD_DIR first; then
each *.hpl / *.plan file found is decoded with protoc against
runtime/schema/plan.proto and hashed. The one thing allowed to differ between
two checkouts is where they live, so the source root and the build dir are
replaced by placeholders before hashing (a plan records its model's path).
Without protoc the raw bytes are hashed (then both digests must come from the
same folders). --compare prints the plans that differ or appear on one side
only and exits 1 if any do.
"""
import argparse
import hashlib
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def digest(build, root):
    protoc = shutil.which("protoc")
    proto_dir = os.path.join(ROOT, "runtime", "schema")
    out = []
    for dirpath, _, files in os.walk(build):
        for f in files:
            if not (f.endswith(".hpl") or f.endswith(".plan")):
                continue
            path = os.path.join(dirpath, f)
            with open(path, "rb") as fh:
                raw = fh.read()
            data = raw
            # A plan file is "HETPLAN\n", the payload's length (8 bytes) and
            # checksum (4 bytes), then the protobuf (runtime/src/plan/PlanFile.cpp).
            payload = raw[20:] if raw.startswith(b"HETPLAN\n") else raw
            if protoc:
                r = subprocess.run([protoc, "--decode=hetplan.plan.Plan", "-I", proto_dir, "plan.proto"],
                                   input=payload, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
                if r.returncode == 0:
                    data = r.stdout.replace(os.path.abspath(build).encode(), b"<build>")
                    data = data.replace(os.path.abspath(root).encode(), b"<root>")
                else:
                    data = b"undecodable:" + raw
            rel = os.path.relpath(path, build)
            out.append((rel, hashlib.sha256(data).hexdigest()))
    return sorted(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("build", nargs="?")
    ap.add_argument("--root", default=ROOT, help="source root to replace by <root> (default: this checkout)")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    a = ap.parse_args()
    if a.compare:
        def load(p):
            with open(p) as fh:
                return dict(line.split() for line in fh if line.strip())
        before, after = load(a.compare[0]), load(a.compare[1])
        bad = 0
        for k in sorted(set(before) | set(after)):
            if k not in after:
                print(f"only before: {k}")
            elif k not in before:
                print(f"only after:  {k}")
            elif before[k] != after[k]:
                print(f"differs:     {k}")
            else:
                continue
            bad += 1
        same = len(set(before) & set(after)) - sum(1 for k in set(before) & set(after) if before[k] != after[k])
        print(f"plan-digest: {same} identical, {bad} differ or missing")
        return 1 if bad else 0
    if not a.build:
        ap.error("BUILD_DIR or --compare")
    for rel, h in digest(a.build, a.root):
        print(rel, h)
    return 0


if __name__ == "__main__":
    sys.exit(main())
