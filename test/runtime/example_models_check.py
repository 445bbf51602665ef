#!/usr/bin/env python3
"""examples/models (gpt2-tiny, bert-tiny) against onnxruntime.

The ~25 ctests that run these models compare plans with one rank of
hetplan; this one compares hetplan with an independent runtime. For fixed
seeded inputs (batch 6, sequence 8), onnxruntime's outputs and the
softmax cross-entropy of the first output against fixed labels (the loss
`hetplan run --labels --steps` reports: mean over the labels of
-log softmax(logits)[label], numpy, float64) are stored in
test/runtime/references/examples/ (NAME.npz: in:*, out:*, labels, loss;
manifest.json: the model files' sha256, versions). Written OFFLINE where
onnxruntime is installed (CI has none):

  python3 test/runtime/example_models_check.py --write-references

The check (ctest runtime-example-models-ort) compiles each model into a
one-CPU plan and a 3-CPU plan (2 stages, 2 micro-batches, uneven shares),
runs both with `hetplan run` on the stored inputs and compares every output
with onnxruntime's (max-norm relative error <= 1e-5); then compiles both as
training plans and checks step 1's loss (relative error <= 1e-7: the loss
of the untouched weights, so only the forward and the cross-entropy enter).
Step 2's loss would need the gradients of an independent runtime (no
onnxruntime-training or torch here): the ranks-vs-one-rank training tests
(runtime-train-plan*) cover steps after the first.

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

MODELS = ["gpt2-tiny", "bert-tiny"]
BATCH, SEQ = 6, 8
# hetplan is within ~5e-7 (outputs) and ~5e-9 (loss) of onnxruntime here.
OUTPUT_TOL = 1e-5
LOSS_TOL = 1e-7


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
    x = logits.astype(np.float64).reshape(-1, logits.shape[-1])
    y = labels.reshape(-1)
    m = x.max(axis=1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(x - m).sum(axis=1))
    return float(np.mean(lse - x[np.arange(len(y)), y]))


def rel_error(got, ref):
    got, ref = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape or not np.all(np.isfinite(got)):
        return float("inf")
    return float(np.max(np.abs(got - ref))) / max(float(np.max(np.abs(ref))), 1e-30)


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
        arrays = {f"in:{k}": v for k, v in inputs.items()}
        arrays.update({f"out:{k}": v for k, v in outs.items()})
        arrays["labels"] = labels
        arrays["loss"] = np.array([loss])
        path = os.path.join(REFS, name + ".npz")
        np.savez(path, **arrays)
        manifest["models"][name] = {"model_sha256": sha256(model_path(name)), "outputs": names,
                                    "loss_output": names[0], "loss_step1": loss}
        print(f"{name}: outputs {names}, step-1 loss {loss:.8f}")
    with open(os.path.join(REFS, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return r.returncode, r.stdout


def check_model(a, name, entry, model, tag, checks):
    """Compile and run `model` (one and three CPUs, infer and train);
    returns a list of failure messages."""
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
                cmd += ["--labels", labels, "--steps", "1"]
            rc, log = run(cmd)
            if rc != 0:
                failures.append(f"{tag}: hetplan run ({mode}, {ranks} rank(s))\n{log}")
                continue
            if mode == "train":
                loss = float(np.load(os.path.join(out, "loss.npy"))[0])
                want = float(ref["loss"][0])
                err = abs(loss - want) / abs(want)
                ok = err <= LOSS_TOL
                print(f"{'ok' if ok else 'FAIL'}: {tag} step-1 loss on {ranks} rank(s) {loss:.8f}, "
                      f"onnxruntime + numpy {want:.8f}, relative error {err:.3g} (tolerance {LOSS_TOL:g})")
                if not ok:
                    failures.append(f"{tag}: step-1 loss {loss:.8f} != {want:.8f} on {ranks} rank(s)")
                continue
            for o in entry["outputs"]:
                f = os.path.join(out, "".join(c if c.isalnum() else "_" for c in o) + ".npy")
                got = np.load(f) if os.path.exists(f) else None
                err = float("inf") if got is None else rel_error(got, ref["out:" + o])
                ok = err <= OUTPUT_TOL
                print(f"{'ok' if ok else 'FAIL'}: {tag} output '{o}' on {ranks} rank(s) against onnxruntime: "
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
            caught = check_model(a, name, entry, copy, name + "-perturbed", [(1, [])])
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
