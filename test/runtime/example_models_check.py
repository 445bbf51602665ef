#!/usr/bin/env python3
"""examples/models (gpt2-tiny, bert-tiny) against onnxruntime.

The ~25 ctests that run these models compare plans with one rank of
hetplan; this one compares hetplan with an independent runtime. For fixed
seeded inputs (batch 6, sequence 8), onnxruntime's outputs, the softmax
cross-entropy of the first output against fixed labels (the loss `hetplan
run --labels --steps` reports: mean over the labels of
-log softmax(logits)[label], numpy, float64), and the loss after one Adam
step (numpy_train_step.py: an independent backward and Adam in numpy) are
stored in test/runtime/references/examples/ (NAME.npz: in:*, out:*,
labels, loss = [step 1, step 2]; manifest.json: the model files' sha256,
versions). Written OFFLINE where onnxruntime is installed (CI has none):

  python3 test/runtime/example_models_check.py --write-references

The check (ctest runtime-example-models-ort) compiles each model into a
one-CPU plan and a 3-CPU plan (2 stages, 2 micro-batches, uneven shares),
runs both with `hetplan run` on the stored inputs and compares every output
with onnxruntime's (max-norm relative error <= 1e-5); then compiles both as
training plans, runs 2 steps (--lr 1 --adam-eps 1, see STEP2_LR) and checks
both losses (relative error <= 1e-7 and 3e-7): step 1's is the forward and
the cross-entropy, step 2's also the gradients and the Adam update.

  example_models_check.py --hetplan BIN --work DIR [--only NAME] [--perturb]

--perturb: a test of the test: scale one weight matrix of each model by
1.001 (a copy), run the one-CPU plan, and require the comparison to FAIL.
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
REFS = os.path.join(HERE, "references", "examples")
sys.path.insert(0, os.path.join(HERE, ".."))
import cpu_clusters  # noqa: E402
sys.path.insert(0, HERE)
import numpy_train_step  # noqa: E402
from onnx_light_random import rel_error  # noqa: E402

MODELS = ["gpt2-tiny", "bert-tiny"]
BATCH, SEQ = 6, 8
# hetplan is within ~5e-7 (outputs) and ~5e-9 (losses) of the references.
OUTPUT_TOL = 1e-5
LOSS_TOL = {1: 1e-7, 2: 3e-7}
# Step 2 after one Adam step with lr 1, eps 1: p -= g / (|g| + 1), close to
# a gradient step, so that the loss moves with every gradient's value (with
# eps 1e-4 the first update is lr * sign(g) almost everywhere, and a 1%
# error in a gradient moves step 2's loss by ~1e-8).
STEP2_LR, STEP2_EPS = 1.0, 1.0


def model_path(name):
    return os.path.join(ROOT, "examples", "models", name + ".onnx")


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def make_inputs(name):
    """Seeded ids; BERT: token types 0/1, the last 2 positions of row 0
    masked (as models/zoo)."""
    rs = np.random.RandomState(26)
    ids = rs.randint(0, 512, size=(BATCH, SEQ)).astype(np.int64)
    labels_classes = 512 if name == "gpt2-tiny" else 64
    if name == "gpt2-tiny":
        inputs = {"input_ids": ids}
    else:
        mask = np.ones((BATCH, SEQ), dtype=np.int64)
        mask[0, -2:] = 0
        inputs = {"input_ids": ids, "token_type_ids": rs.randint(0, 2, size=(BATCH, SEQ)).astype(np.int64),
                  "attention_mask": mask}
    labels = rs.randint(0, labels_classes, size=(BATCH, SEQ)).astype(np.int64)
    return inputs, labels


def cross_entropy(logits, labels):
    """Mean over rows of -log softmax(logits)[label] (float64)."""
    return numpy_train_step.cross_entropy(logits.astype(np.float64), labels)[0]


def savez_fixed(path, arrays):
    """np.savez with a fixed zip date: the bytes do not depend on when."""
    import io
    import zipfile
    with zipfile.ZipFile(path, "w") as z:
        for k, a in arrays.items():
            buf = io.BytesIO()
            np.save(buf, a, allow_pickle=False)
            info = zipfile.ZipInfo(k + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, buf.getvalue())


def write_references():
    import onnx
    import onnxruntime as ort
    os.makedirs(REFS, exist_ok=True)
    manifest = {"generated_by": "test/runtime/example_models_check.py --write-references",
                "onnxruntime": ort.__version__, "onnx": onnx.__version__, "numpy": np.__version__,
                "batch": BATCH, "sequence": SEQ, "models": {}}
    for name in MODELS:
        inputs, labels = make_inputs(name)
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        sess = ort.InferenceSession(model_path(name), so, providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        outs = dict(zip(names, sess.run(names, inputs)))
        loss = cross_entropy(outs[names[0]], labels)
        numpy1, loss2 = numpy_train_step.two_losses(model_path(name), inputs, labels, STEP2_LR, STEP2_EPS)
        if abs(numpy1 - loss) > 1e-7 * loss:  # the numpy forward against onnxruntime's
            raise SystemExit(f"{name}: numpy's step-1 loss {numpy1} differs from onnxruntime's {loss}")
        arrays = {f"in:{k}": v for k, v in inputs.items()}
        arrays.update({f"out:{k}": v for k, v in outs.items()})
        arrays["labels"] = labels
        arrays["loss"] = np.array([loss, loss2])
        savez_fixed(os.path.join(REFS, name + ".npz"), arrays)
        manifest["models"][name] = {"model_sha256": sha256(model_path(name)), "outputs": names,
                                    "loss_output": names[0], "loss_step1": loss, "loss_step2": loss2,
                                    "step2_lr": STEP2_LR, "step2_adam_eps": STEP2_EPS}
        print(f"{name}: outputs {names}, step-1 loss {loss:.8f} (numpy {numpy1:.8f}), step-2 loss {loss2:.8f}")
    with open(os.path.join(REFS, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return r.returncode, r.stdout


def check_model(a, name, entry, model, tag, checks, perturbed=False):
    """Compile and run `model` (one and three CPUs, infer and train);
    returns a list of failure messages (`perturbed`: a model that must
    differ, the lines say so)."""

    def label(ok):
        return ("NOT CAUGHT" if ok else "caught") if perturbed else ("ok" if ok else "FAIL")
    ref = np.load(os.path.join(REFS, name + ".npz"))
    work = os.path.join(a.work, tag)
    os.makedirs(work, exist_ok=True)
    inputs = []
    for key in ref.files:
        if key.startswith("in:"):
            f = os.path.join(work, key[3:] + ".npy")
            np.save(f, ref[key])
            inputs += ["--input", f"{key[3:]}={f}"]
    labels = os.path.join(work, "labels.npy")
    np.save(labels, ref["labels"])
    failures = []
    for ranks, layout in checks:
        cluster = os.path.join(work, f"cpus{ranks}.yaml")
        with open(cluster, "w") as f:
            f.write(cpu_clusters.CPU1 if ranks == 1 else cpu_clusters.CPU3)
        for mode in ("infer", "train"):
            plan = os.path.join(work, f"{mode}{ranks}.hpl")
            rc, log = run([a.hetplan, "compile", model, "--mode", mode, "--cluster", cluster, "--batch",
                           str(BATCH), "--seq", str(SEQ), *layout, "--dtype", "fp32", "--quiet", "-o", plan])
            if rc != 0:
                failures.append(f"{tag}: compile --mode {mode} on {ranks} CPU(s)\n{log}")
                continue
            out = os.path.join(work, f"out-{mode}{ranks}")
            shutil.rmtree(out, ignore_errors=True)
            cmd = [a.hetplan, "run", plan, "--output", out, "--quiet", *inputs]
            if mode == "train":
                cmd += ["--labels", labels, "--steps", "2", "--lr", str(STEP2_LR), "--adam-eps", str(STEP2_EPS)]
            rc, log = run(cmd)
            if rc != 0:
                failures.append(f"{tag}: hetplan run ({mode}, {ranks} rank(s))\n{log}")
                continue
            if mode == "train":
                losses = np.load(os.path.join(out, "loss.npy"))
                for step, who in ((1, "onnxruntime + numpy cross-entropy"), (2, "numpy (backward, Adam)")):
                    loss, want = float(losses[step - 1]), float(ref["loss"][step - 1])
                    err = abs(loss - want) / abs(want)
                    ok = err <= LOSS_TOL[step]
                    print(f"{label(ok)}: {tag} step-{step} loss on {ranks} rank(s) {loss:.8f}, "
                          f"{who} {want:.8f}, relative error {err:.3g} (tolerance {LOSS_TOL[step]:g})")
                    if not ok:
                        failures.append(f"{tag}: step-{step} loss {loss:.8f} != {want:.8f} on {ranks} rank(s)")
                continue
            for o in entry["outputs"]:
                f = os.path.join(out, "".join(c if c.isalnum() else "_" for c in o) + ".npy")
                got = np.load(f) if os.path.exists(f) else None
                err = float("inf") if got is None else rel_error(got, ref["out:" + o])
                ok = err <= OUTPUT_TOL
                print(f"{label(ok)}: {tag} output '{o}' on {ranks} rank(s) against onnxruntime: "
                      f"max-norm relative error {err:.3g} (tolerance {OUTPUT_TOL:g})")
                if not ok:
                    failures.append(f"{tag}: output '{o}' on {ranks} rank(s) differs from onnxruntime "
                                    f"(max-norm relative error {err:.3g})")
    return failures


def perturbed_copy(src, dst):
    """The model with its largest matrix (not an embedding: a token the
    inputs lack would hide it) scaled by 1.001."""
    import onnx
    from onnx import numpy_helper
    m = onnx.load(src)
    big = max(m.graph.initializer, key=lambda t: np.prod(t.dims) if t.data_type == 1 and len(t.dims) == 2
              and not any(k in t.name for k in ("embed", "wte", "wpe")) else 0)
    w = numpy_helper.to_array(big).copy()
    w *= np.float32(1.001)
    big.CopyFrom(numpy_helper.from_array(w, big.name))
    onnx.save(m, dst)
    return big.name


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--write-references", action="store_true")
    ap.add_argument("--hetplan")
    ap.add_argument("--work")
    ap.add_argument("--only", action="append")
    ap.add_argument("--perturb", action="store_true")
    a = ap.parse_args()
    if a.write_references:
        write_references()
        return 0
    if not a.hetplan or not a.work:
        ap.error("--hetplan and --work are required")
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    with open(os.path.join(REFS, "manifest.json")) as f:
        manifest = json.load(f)
    failures = []
    for name in a.only or MODELS:
        entry = manifest["models"][name]
        digest = sha256(model_path(name))
        if digest != entry["model_sha256"]:
            failures.append(f"{name}: examples/models/{name}.onnx changed (sha256 {digest[:12]}, the "
                            f"reference's {entry['model_sha256'][:12]}): rewrite the references")
            continue
        if a.perturb:
            copy = os.path.join(a.work, name + "-perturbed.onnx")
            weight = perturbed_copy(model_path(name), copy)
            caught = check_model(a, name, entry, copy, name + "-perturbed", [(1, [])], perturbed=True)
            print(f"{'ok' if caught else 'FAIL'}: {name} with weight '{weight}' perturbed: "
                  f"{len(caught)} comparison(s) failed, as they must")
            if not caught:
                failures.append(f"{name}: a perturbed weight ('{weight}') passed the comparison")
            continue
        failures += check_model(a, name, entry, model_path(name), name,
                                [(1, []), (3, ["--pin", "pp=2,mb=2"])])
    for f in failures:
        print("FAIL " + f)
    print(f"{'FAILED' if failures else 'passed'}: examples/models against onnxruntime")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
