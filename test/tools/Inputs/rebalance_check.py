"""`hetplan run --rebalance` with a straggler (docs/runtime.md, "Stragglers").

  rebalance_check.py HETPLAN MODEL WORK [MPIRUN]

Compiles gpt2-tiny's training plan for three equal CPU ranks (one stage,
three data-parallel workers of 4 samples per micro-batch, 2 micro-batches),
then runs 6 steps with rank 2 slowed on purpose (--test-slow-rank 2:4: it
sleeps four times what each FORWARD/BACKWARD took, 5x slower) without and
with --rebalance. Checks that with it the slow worker's share shrinks within
the first 5 step boundaries (the default needs 2 consecutive slow steps; on
a loaded 2-core machine a peer thread descheduled for a step can hide the
straggler for that step, so the bound leaves room for two such steps), that the move is
printed on stderr and listed in --json, and that the losses (1e-5 relative)
and trained weights (1e-4 max-norm relative) equal the run without it.
Then the same for a 2-stage pipeline (--pin pp=2: stage 0 one worker,
stage 1 two workers of 6 samples), rank 2 (a stage-1 worker) slowed: stage
1's shares move, the losses equal the run without --rebalance.
With MPIRUN, the --rebalance runs is `MPIRUN -np 3 hetplan run ...` (the
ranks all-reduce their times); exit 77 (skipped) when it is not found.
"""
import json, os, shutil, subprocess, sys

import numpy as np
import onnx
from onnx import numpy_helper

HETPLAN, MODEL, WORK = sys.argv[1:4]
MPI = []
if len(sys.argv) > 4:
    mpirun = shutil.which(sys.argv[4])
    if not mpirun:
        print("skipped: no %s" % sys.argv[4])
        sys.exit(77)
    MPI = [mpirun, "--allow-run-as-root", "--oversubscribe", "--mca", "btl", "self,vader", "-np", "3"]
CPU3 = "nodes:\n  - name: a\n    devices: [{type: CPU, count: 3}]\n"


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit("FAILED: " + " ".join(cmd) + "\n" + r.stdout + r.stderr)
    return r.stdout, r.stderr


def weights(path):
    arrays = {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}
    return {k: a.astype(np.float64) for k, a in arrays.items() if a.dtype.kind == "f" and a.size > 1}


os.makedirs(WORK, exist_ok=True)
rng = np.random.default_rng(0)
ids = rng.integers(0, 512, size=(24, 8), dtype=np.int64)
np.save(os.path.join(WORK, "ids.npy"), ids)
np.save(os.path.join(WORK, "labels.npy"), np.roll(ids, -1, axis=1))
open(os.path.join(WORK, "cpu3.yaml"), "w").write(CPU3)
plan = os.path.join(WORK, "dp3.plan")
run([HETPLAN, "compile", MODEL, "--mode", "train", "--cluster", os.path.join(WORK, "cpu3.yaml"),
     "--batch", "24", "--seq", "8", "--dtype", "fp32", "--pin", "pp=1,dp=3,mb=2", "--quiet", "-o", plan])

results = {}
for mode, extra in (("plain", []), ("rebalance", ["--rebalance"])):
    out = os.path.join(WORK, mode)
    stdout, stderr = run((MPI if extra else []) + [HETPLAN, "run", plan, "--input", "input_ids=" + os.path.join(WORK, "ids.npy"),
                          "--labels", os.path.join(WORK, "labels.npy"), "--steps", "6", "--lr", "0.003",
                          "--adam-eps", "1e-4", "--test-slow-rank", "2:4", "--output", out,
                          "--save-model", out + ".onnx", "--json"] + extra)
    results[mode] = (json.loads(stdout), stderr, weights(out + ".onnx"))

plain, _, w0 = results["plain"]
reb, stderr, w1 = results["rebalance"]
assert "rebalances" not in plain, plain
moves = [e for e in reb["rebalances"] if e["moved"]]
assert moves, ("no share moved", reb, stderr)
first = moves[0]
slow = min(range(len(first["samples_per_s"])), key=lambda w: first["samples_per_s"][w])
assert first["after_step"] <= 5, first
assert first["new_shares"][slow] < first["old_shares"][slow], first
assert sum(first["new_shares"]) == sum(first["old_shares"]), first
lines = [l for l in stderr.splitlines() if l.startswith("rebalance: after step")]
assert len(lines) == len(reb["rebalances"]), stderr
l0, l1 = np.array(plain["losses"]), np.array(reb["losses"])
loss_err = float(np.max(np.abs(l1 - l0) / np.abs(l0)))
weight_err = max(float(np.max(np.abs(w1[k] - w0[k])) / max(np.max(np.abs(w0[k])), 1e-12)) for k in w0)
assert loss_err < 1e-5, (l0, l1)
assert weight_err < 1e-4, weight_err

# A pipeline: stage 1's two workers rebalance (stage 0 has one worker, so
# no program gains a peer).
pp2 = os.path.join(WORK, "pp2.plan")
run([HETPLAN, "compile", MODEL, "--mode", "train", "--cluster", os.path.join(WORK, "cpu3.yaml"),
     "--batch", "24", "--seq", "8", "--dtype", "fp32", "--pin", "pp=2,mb=2", "--quiet", "-o", pp2])
pp = {}
for mode, extra in (("pp-plain", []), ("pp-rebalance", ["--rebalance"])):
    stdout, _ = run((MPI if extra else []) + [HETPLAN, "run", pp2, "--input", "input_ids=" + os.path.join(WORK, "ids.npy"),
                    "--labels", os.path.join(WORK, "labels.npy"), "--steps", "6", "--lr", "0.003",
                    "--adam-eps", "1e-4", "--test-slow-rank", "2:4", "--output", os.path.join(WORK, mode),
                    "--json"] + extra)
    pp[mode] = json.loads(stdout)
pmoves = [e for e in pp["pp-rebalance"]["rebalances"] if e["moved"]]
assert pmoves and pmoves[0]["stage"] == 1, pp["pp-rebalance"]
pslow = min(range(2), key=lambda w: pmoves[0]["samples_per_s"][w])
assert pmoves[0]["new_shares"][pslow] < pmoves[0]["old_shares"][pslow], pmoves[0]
p0, p1 = np.array(pp["pp-plain"]["losses"]), np.array(pp["pp-rebalance"]["losses"])
pp_err = float(np.max(np.abs(p1 - p0) / np.abs(p0)))
assert pp_err < 1e-5, (p0, p1)

print(lines[0])
print("pipeline: stage 1 shares %s -> %s after step %d; losses vs no rebalance %.1e" %
      (",".join(map(str, pmoves[0]["old_shares"])), ",".join(map(str, pmoves[0]["new_shares"])),
       pmoves[0]["after_step"], pp_err))
print("slow worker %d: share %d -> %d after step %d; losses %s; vs no rebalance: loss %.1e, weights %.1e" %
      (slow, first["old_shares"][slow], first["new_shares"][slow], first["after_step"],
       " ".join("%.4f" % x for x in l1), loss_err, weight_err))
