#!/usr/bin/env python3
"""Embedding-heavy training, predicted: hybrid CPU+GPU placement against
GPU-only (tables row-sharded over the GPUs) and all-CPU plans, with sparse
embedding updates, and dense tables for reference (docs/planner.md,
"Embedding tables").

  /usr/bin/python3 bench/embedding_bench.py [--hetplan build/bin/hetplan] [--out FILE.md]

Models from models/gen_dlrm.py (--weights none: shapes only): the MLPerf
(TorchRec) and Criteo Kaggle (FlexFlow) configurations. Every number is
hetplan's prediction (roofline + schedule simulation), compared in the same
run; none is measured.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
CASES = [  # (row, cluster, sparse)
    ("hybrid: 2 CPU hosts + 4 A100-40GB", "2xCPU,4xA100-40G", True),
    ("GPU only: 4 A100-40GB (row-sharded)", "4xA100-40G", True),
    ("GPU only: 8 A100-40GB (row-sharded)", "8xA100-40G", True),
    ("all CPU: 2 hosts", "2xCPU", True),
    ("dense tables: 2 CPU hosts + 4 A100-40GB", "2xCPU,4xA100-40G", False),
    ("dense tables: 8 A100-40GB", "8xA100-40G", False),
]


def plan(hetplan, model, cluster, batch, optimizer, sparse, work):
    out = os.path.join(work, "p.plan")
    cmd = [hetplan, "compile", model, "--allow-missing-weights", "--mode", "train", "--cluster", cluster,
           "--batch", str(batch), "--optimizer", optimizer, "--json", "-o", out]
    if sparse:
        cmd.append("--sparse-embeddings")
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stderr.strip().split("error: ")[-1][:90]
    d = json.loads(r.stdout)
    ex = subprocess.run([hetplan, "explain", out], capture_output=True, text=True).stdout
    where = next((l.split(None, 1)[1] for l in ex.splitlines() if l.strip().startswith("embeddings")), "-")
    return d, where


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hetplan", default=os.path.join(ROOT, "build", "bin", "hetplan"))
    ap.add_argument("--out")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="embedding-bench-")
    lines = []
    emit = lambda s="": (print(s), lines.append(s))
    for config, batch in (("mlperf", 65536), ("kaggle", 16384)):
        model = os.path.join(work, "dlrm-%s.onnx" % config)
        subprocess.run([PY, os.path.join(ROOT, "models", "gen_dlrm.py"), "--config", config, "--weights", "none",
                        "-o", model], check=True, stdout=subprocess.DEVNULL)
        for optimizer in ("sgd", "adam"):
            emit("DLRM %s, batch %d, %s:" % (config, batch, optimizer))
            emit()
            emit("| plan | samples/s | step | where the tables are |")
            emit("|---|---|---|---|")
            for name, cluster, sparse in CASES:
                d, where = plan(a.hetplan, model, cluster, batch, optimizer, sparse, work)
                if d is None:
                    emit("| %s | does not fit | | %s |" % (name, where))
                else:
                    emit("| %s | %.0f | %.1f ms | %s |" % (name, d["samples_per_s"], 1e3 * d["step_time_s"],
                                                         where if sparse else "dense, replicated"))
            emit()
    if a.out:
        with open(a.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
