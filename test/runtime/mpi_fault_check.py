#!/usr/bin/env python3
"""A stopped, killed or orphaned MPI rank ends the whole job in bounded time.

Compiles a 3-rank training plan of gpt2-tiny, starts it under mpirun for
many steps, then in turn:
  * stops one rank (SIGSTOP): the others time out (HETPLAN_COMM_TIMEOUT=3),
    name the rank and peer they waited for, and the job ends non-zero;
  * kills one rank (SIGKILL): the job ends non-zero;
  * kills mpirun itself: every rank dies with it (no orphans).

  mpi_fault_check.py --hetplan BIN --mpi MPIRUN --model MODEL --work DIR
Exit 77 (ctest SKIP) without mpirun or without MPI support in hetplan.
"""
import os, signal, subprocess, sys, time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import cpu_clusters  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mpi_args  # noqa: E402

BOUND_S = 60  # the job must be over this long after the fault


def children(pid):
    try:
        out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    except FileNotFoundError:
        return []
    return [int(x) for x in out.split()]


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


def start(a, plan, inputs, env):
    cmd = [a.mpi, "--allow-run-as-root", "--oversubscribe", "--mca", "btl", "self,vader", "-np", "3",
           a.hetplan, "run", plan, "--input", f"input_ids={inputs}", "--labels", inputs,
           "--steps", "100000", "--quiet", "--output", os.path.join(os.path.dirname(plan), "out")]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                         start_new_session=True)
    # Wait for the three ranks to be running.
    deadline = time.time() + 60
    ranks = []
    while time.time() < deadline and p.poll() is None:
        ranks = [c for c in children(p.pid) if alive(c)]
        if len(ranks) >= 3:
            break
        time.sleep(0.2)
    time.sleep(3)  # into the steps
    return p, ranks


def finish(p, what):
    try:
        out, _ = p.communicate(timeout=BOUND_S)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        print(f"FAIL {what}: the job still ran {BOUND_S} s after the fault\n{out[-3000:]}")
        return None
    return out


def main():
    a = mpi_args.parse()
    if a is None:
        return 77
    cluster = os.path.join(a.work, "cpus.yaml")
    with open(cluster, "w") as f:
        f.write(cpu_clusters.CPU3)
    plan = os.path.join(a.work, "plan")
    r = subprocess.run([a.hetplan, "compile", a.model, "--mode", "train", "--cluster", cluster,
                        "--batch", "6", "--seq", "8", "--pin", "pp=3,mb=2", "--dtype", "fp32",
                        "--quiet", "-o", plan], capture_output=True, text=True)
    if r.returncode != 0:
        print("FAIL: compile\n" + r.stdout + r.stderr)
        return 1
    inputs = os.path.join(a.work, "ids.npy")
    np.save(inputs, np.random.default_rng(0).integers(0, 50, size=(6, 8), dtype=np.int64))
    env = dict(os.environ, HETPLAN_COMM_TIMEOUT="3", OMP_NUM_THREADS="1")

    failures = 0
    # 1. A stopped rank: its peers time out and name it.
    p, ranks = start(a, plan, inputs, env)
    if p.poll() is not None or len(ranks) < 3:
        out = p.communicate()[0]
        if "MPI" in out and "not built" in out:
            print("SKIP: hetplan has no MPI support\n" + out)
            return 77
        print(f"FAIL: the job did not start 3 ranks (found {ranks})\n{out[-3000:]}")
        return 1
    stopped = ranks[-1]
    os.kill(stopped, signal.SIGSTOP)
    t0 = time.time()
    out = finish(p, "stopped rank")
    if out is None:
        failures += 1
    else:
        took = time.time() - t0
        if p.returncode == 0 or "waited 3 s for" not in out:
            print(f"FAIL stopped rank: exit {p.returncode}, expected a timeout naming the peer\n{out[-3000:]}")
            failures += 1
        else:
            line = next(l for l in out.splitlines() if "waited 3 s for" in l)
            print(f"ok stopped rank: job ended in {took:.1f} s: {line.strip()}")

    # 2. A killed rank.
    p, ranks = start(a, plan, inputs, env)
    os.kill(ranks[0], signal.SIGKILL)
    t0 = time.time()
    out = finish(p, "killed rank")
    if out is None:
        failures += 1
    elif p.returncode == 0:
        print(f"FAIL killed rank: the job exited 0\n{out[-3000:]}")
        failures += 1
    else:
        print(f"ok killed rank: job ended in {time.time() - t0:.1f} s with exit {p.returncode}")

    # 3. A killed launcher: no rank outlives it.
    p, ranks = start(a, plan, inputs, env)
    os.kill(p.pid, signal.SIGKILL)
    p.communicate()
    deadline = time.time() + BOUND_S
    while time.time() < deadline and any(alive(r) for r in ranks):
        time.sleep(0.2)
    left = [r for r in ranks if alive(r)]
    if left:
        print(f"FAIL killed mpirun: ranks {left} still run {BOUND_S} s later")
        for r in left:
            os.kill(r, signal.SIGKILL)
        failures += 1
    else:
        print("ok killed mpirun: every rank ended")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
