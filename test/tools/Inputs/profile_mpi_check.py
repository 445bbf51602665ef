#!/usr/bin/env python3
"""`mpirun -np 2 hetplan profile --quick`: one process per rank, the link
measured over MPI, rank 0 writes the file; its fields are checked with
check_profile.py. Exit 77 (ctest SKIP) when mpirun is not found.

    profile_mpi_check.py --hetplan BIN --mpi MPIRUN --work DIR
"""
import argparse
import os
import shutil
import subprocess
import sys

ap = argparse.ArgumentParser()
ap.add_argument("--hetplan", required=True)
ap.add_argument("--mpi", required=True)
ap.add_argument("--work", required=True)
a = ap.parse_args()
if not shutil.which(a.mpi):
    print("mpirun not found: skipped")
    sys.exit(77)
os.makedirs(a.work, exist_ok=True)
out = os.path.join(a.work, "mpi2.yaml")
if os.path.exists(out):
    os.remove(out)
cmd = [a.mpi, "--allow-run-as-root", "--oversubscribe", "--mca", "btl", "self,vader", "-np", "2",
       a.hetplan, "profile", "--quick", "--threads", "1", "--name", "mpi-cpu", "--out", out]
subprocess.run(cmd, check=True, timeout=300)
text = open(out).read()
for want in ("2 MPI processes", "(mpi)", "all-reduce", "kind: mpi"):
    if want not in text:
        sys.exit("missing %r in %s" % (want, out))
js = subprocess.run([a.hetplan, "cluster", out, "--json"], check=True, stdout=subprocess.PIPE).stdout
with open(os.path.join(a.work, "mpi2.json"), "wb") as f:
    f.write(js)
here = os.path.dirname(os.path.abspath(__file__))
sys.exit(subprocess.run([sys.executable, os.path.join(here, "check_profile.py"),
                         os.path.join(a.work, "mpi2.json"), "2", "mpi-cpu"]).returncode)
