"""`hetplan run` with each optimizer (docs/runtime.md, "Optimizers").

  optimizer_run_check.py HETPLAN MODEL WORK

For sgd, momentum, adam and adamw: compile gpt2-tiny's training plan for
one CPU and for three CPUs (a 2-stage pipeline, uneven shares), run 3 steps
of each with weight decay on (--save-model), and check that the 1- and
3-rank runs give the same losses (1e-4 relative) and trained weights (1e-4
max-norm relative), that the loss falls, and that the optimizers give
different weights from each other. Prints one line per optimizer.
"""
import os, subprocess, sys

import numpy as np
import onnx
from onnx import numpy_helper

HETPLAN, MODEL, WORK = sys.argv[1:4]
CPU3 = ("nodes:\n  - name: a\n    devices: [{type: CPU, count: 1}]\n"
        "  - name: b\n    devices: [{type: CPU, count: 1}]\n    speed_factors: {CPU: 0.5}\n"
        "  - name: c\n    devices: [{type: CPU, count: 1}]\n    speed_factors: {CPU: 0.25}\n")
CPU1 = "nodes:\n  - name: a\n    devices: [{type: CPU, count: 1}]\n"
# Adam's eps 1e-4 as the other plan-vs-one-rank checks (PlanEquivalence.cpp):
# with 1e-8 a near-zero gradient's update is +-lr whatever its rounding.
FLAGS = {"sgd": ["--lr", "0.05"], "momentum": ["--lr", "0.02", "--momentum", "0.8"],
         "adam": ["--lr", "0.003", "--adam-eps", "1e-4"], "adamw": ["--lr", "0.003", "--adam-eps", "1e-4"]}


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.exit("FAILED: " + " ".join(cmd) + "\n" + r.stdout)
    return r.stdout


def weights(path):
    """The model's float initializers (the trained ones among them)."""
    arrays = {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}
    return {k: a.astype(np.float64) for k, a in arrays.items() if a.dtype.kind == "f" and a.size > 1}


def rel(a, b):
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-12))


os.makedirs(WORK, exist_ok=True)
rng = np.random.default_rng(0)
ids = rng.integers(0, 512, size=(6, 8), dtype=np.int64)
np.save(os.path.join(WORK, "ids.npy"), ids)
np.save(os.path.join(WORK, "labels.npy"), np.roll(ids, -1, axis=1))
for name, text in (("cpu1.yaml", CPU1), ("cpu3.yaml", CPU3)):
    open(os.path.join(WORK, name), "w").write(text)

trained = {}
for opt in ("sgd", "momentum", "adam", "adamw"):
    result = {}
    for ranks, cluster, extra in ((1, "cpu1.yaml", []), (3, "cpu3.yaml", ["--pin", "pp=2,mb=2"])):
        plan = os.path.join(WORK, "%s-%d.plan" % (opt, ranks))
        run([HETPLAN, "compile", MODEL, "--mode", "train", "--cluster", os.path.join(WORK, cluster),
             "--batch", "6", "--seq", "8", "--dtype", "fp32", "--optimizer", opt, "--quiet", "-o", plan] + extra)
        out = os.path.join(WORK, "%s-%d" % (opt, ranks))
        saved = out + ".onnx"
        run([HETPLAN, "run", plan, "--input", "input_ids=" + os.path.join(WORK, "ids.npy"),
             "--labels", os.path.join(WORK, "labels.npy"), "--steps", "3", "--weight-decay", "0.01",
             "--output", out, "--save-model", saved, "--quiet"] + FLAGS[opt])
        result[ranks] = (np.load(os.path.join(out, "loss.npy")), weights(saved))
    (l1, w1), (l3, w3) = result[1], result[3]
    loss_err = float(np.max(np.abs(l3 - l1) / np.abs(l1)))
    weight_err = max(rel(w3[k], w1[k]) for k in w1)
    assert loss_err < 1e-4, (opt, l1, l3)
    assert weight_err < 1e-4, (opt, weight_err)
    assert l1[-1] < l1[0], (opt, "the loss does not fall", l1)
    trained[opt] = w1
    print("%s: losses %s; 1 vs 3 ranks: loss %.1e, weights %.1e" %
          (opt, " ".join("%.4f" % x for x in l1), loss_err, weight_err))

names = list(trained)
for i, a in enumerate(names):
    for b in names[i + 1:]:
        diff = max(rel(trained[a][k], trained[b][k]) for k in trained[a])
        assert diff > 1e-3, (a, b, "trained the same weights")
print("every optimizer trains differently; 1 and 3 ranks agree")
