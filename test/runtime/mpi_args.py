"""The arguments the MPI fault scripts share (mpi_fault_check.py,
mpi_cross_host_check.py): --hetplan BIN --mpi MPIRUN --model MODEL --work DIR.
parse() returns them with MPIRUN resolved on PATH and DIR emptied, or None
after printing the SKIP line (ctest code 77) when MPIRUN is not found."""
import argparse, os, shutil


def parse():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hetplan", required=True)
    ap.add_argument("--mpi", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    if not shutil.which(a.mpi):
        print(f"SKIP: {a.mpi} not found (mpirun)")
        return None
    a.mpi = shutil.which(a.mpi)
    a.hetplan = os.path.abspath(a.hetplan)
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    return a
