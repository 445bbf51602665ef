#!/usr/bin/env python3
"""Sparse embedding updates and hybrid placement on CPU ranks (docs/runtime.md,
"Embedding tables"): models/gen_dlrm.py's tiny DLRM trained 3 steps with
binary cross-entropy on click labels and AdamW with weight decay,

  - on one rank, and on three CPU ranks whose plan puts the embedding tables
    on one rank (stage 0, a "host") and the top MLP on the other two
    (`--pin pp=2 --sparse-embeddings`): the same losses (1e-9 relative) and
    trained weights (1e-6);
  - with --sparse-embeddings only the rows the batch looked up change (weight
    decay leaves the others alone), without it every row decays;
  - on four ranks whose layout puts the tables on two of them (their
    gradients summed by looked-up rows only), the same;
  - the plan says where the tables are (explain's "embeddings" line).

    sparse_embeddings_check.py --hetplan BIN --python PY --work DIR
"""
import argparse
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import numpy_helper

ap = argparse.ArgumentParser()
ap.add_argument("--hetplan", required=True)
ap.add_argument("--python", default=sys.executable)
ap.add_argument("--work", required=True)
a = ap.parse_args()
os.makedirs(a.work, exist_ok=True)
root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
model = os.path.join(a.work, "dlrm-tiny.onnx")


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.exit("FAIL: %s\n%s" % (" ".join(cmd), r.stdout))
    return r.stdout


def weights(path):
    return {i.name: numpy_helper.to_array(i) for i in onnx.load(path).graph.initializer}


run([a.python, os.path.join(root, "models", "gen_dlrm.py"), "--config", "tiny", "-o", model])
rng = np.random.default_rng(7)
batch = 16
files = {"dense": rng.standard_normal((batch, 13)).astype(np.float32),
         "sparse": rng.integers(0, 6, (batch, 4)).astype(np.int64),  # tables have 8 to 1,000 rows
         "click": rng.integers(0, 2, (batch, 1)).astype(np.float32)}
for name, value in files.items():
    np.save(os.path.join(a.work, name + ".npy"), value)
cluster = os.path.join(a.work, "host-and-two.yaml")
with open(cluster, "w") as f:
    f.write("nodes:\n  - name: host\n    devices: [{type: CPU, count: 1}]\n"
            "  - name: workers\n    devices: [{type: CPU, count: 2}]\n")


def train(tag, cluster_spec, flags):
    plan = os.path.join(a.work, tag + ".plan")
    run([a.hetplan, "compile", model, "--mode", "train", "--cluster", cluster_spec, "--batch", str(batch),
         "--optimizer", "adamw", "--quiet", "-o", plan] + flags)
    out = os.path.join(a.work, "out-" + tag)
    trained = os.path.join(a.work, tag + ".onnx")
    run([a.hetplan, "run", plan, "--input", "dense=" + os.path.join(a.work, "dense.npy"),
         "--input", "sparse=" + os.path.join(a.work, "sparse.npy"),
         "--labels", os.path.join(a.work, "click.npy"), "--steps", "3", "--weight-decay", "0.1",
         "--quiet", "--output", out, "--save-model", trained])
    return plan, np.load(os.path.join(out, "loss.npy")), weights(trained)


failures = []
_, loss_one, w_one = train("one-sparse", "1xCPU", ["--sparse-embeddings"])
plan3, loss_three, w_three = train("three-sparse", cluster, ["--sparse-embeddings", "--pin", "pp=2"])
_, _, w_dense = train("one-dense", "1xCPU", [])
# Two workers hold the tables (row-sharded in the plan; the CPU runtime sums
# only their nonzero rows): stage 0 = ranks 0 and 1 (the bottom MLP and the
# tables, layers 0-2), stage 1 = ranks 2 and 3.
layout = os.path.join(a.work, "two-and-two.json")
with open(layout, "w") as f:
    f.write('{"micro_batches": 2, "shares": "even", "stages": [{"workers": [[0], [1]], "last_layer": 2}, '
            '{"workers": [[2], [3]], "last_layer": 5}]}\n')
plan4, loss_four, w_four = train("four-sparse", "4xCPU", ["--sparse-embeddings", "--layout", layout])
explain = run([a.hetplan, "explain", plan3])
line = next((l for l in explain.splitlines() if l.strip().startswith("embeddings")), "")
if "4 table(s) on stage 0 (1x CPU" not in line:
    failures.append("explain does not put the 4 tables on stage 0's one rank: %r" % line)
loss_rel = float(np.max(np.abs(loss_one - loss_three) / np.abs(loss_one)))
weight_abs = max(float(np.abs(w_one[k] - w_three[k]).max()) for k in w_one if w_one[k].dtype.kind == "f")
if not (loss_rel <= 1e-9 and weight_abs <= 1e-6):
    failures.append("3 ranks vs 1: losses %.3g relative, weights %.3g" % (loss_rel, weight_abs))
if not loss_one[-1] < loss_one[0]:
    failures.append("the loss does not fall: %s" % loss_one)
explain4 = run([a.hetplan, "explain", plan4])
line4 = next((l for l in explain4.splitlines() if l.strip().startswith("embeddings")), "")
if "4 table(s) on stage 0 (2x CPU" not in line4 or "row-sharded 2 ways" not in line4:
    failures.append("the layout plan's tables are not on stage 0's two workers: %r" % line4)
loss_rel4 = float(np.max(np.abs(loss_one - loss_four) / np.abs(loss_one)))
weight_abs4 = max(float(np.abs(w_one[k] - w_four[k]).max()) for k in w_one if w_one[k].dtype.kind == "f")
if not (loss_rel4 <= 1e-9 and weight_abs4 <= 1e-6):
    failures.append("4 ranks (tables on two) vs 1: losses %.3g relative, weights %.3g" % (loss_rel4, weight_abs4))
initial = weights(model)
idx = files["sparse"]
for t in range(4):
    k = "embedding.%d.weight" % t
    used = sorted(set(idx[:, t].tolist()))
    untouched = [r for r in range(initial[k].shape[0]) if r not in used]
    if np.any(w_one[k][untouched] != initial[k][untouched]):
        failures.append("%s: rows not looked up changed under --sparse-embeddings" % k)
    if not np.all(np.any(w_one[k][used] != initial[k][used], axis=1)):
        failures.append("%s: a looked-up row did not change" % k)
    if not np.any(w_dense[k][untouched] != initial[k][untouched]):
        failures.append("%s: without --sparse-embeddings weight decay should reach every row" % k)
print("1 vs 3 ranks (tables on one): losses %.2g relative, weights %.2g; %s" % (loss_rel, weight_abs, line.strip()))
print("1 vs 4 ranks (tables on two): losses %.2g relative, weights %.2g; %s" % (loss_rel4, weight_abs4, line4.strip()))
for f in failures:
    print("FAIL: " + f)
sys.exit(1 if failures else 0)
