#!/usr/bin/env python3
"""The README's example end to end: compile the plan scripts/demo.sh
compiles (gpt2-tiny for training on 2 A100s + 4 T4s, batch 1024 x 128),
then execute one training step of it with `hetplan run` on 6 CPU threads
(one per planned device) and check what a user relies on: the step runs,
the loss is the cross-entropy of an untrained model (about ln(vocab) for
random labels) and the trained model is written and differs from the
original where the parameters are.

  readme_train_check.py --hetplan BIN --work DIR --model gpt2-tiny.onnx
"""
import argparse, math, os, shutil, subprocess, sys

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hetplan", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--model", required=True)
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    plan = os.path.join(a.work, "gpt2-tiny.plan")
    compile_cmd = [a.hetplan, "compile", a.model, "--cluster", "2xA100-80G,4xT4", "--mode", "train",
                   "--batch", "1024", "--seq", "128", "--quiet", "-o", plan]
    r = subprocess.run(compile_cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        print("FAIL: compile\n" + r.stdout)
        return 1
    import onnx
    from onnx import numpy_helper
    vocab = [numpy_helper.to_array(i) for i in onnx.load(a.model).graph.initializer
             if i.name == "wte.weight"][0].shape[0]
    rng = np.random.default_rng(0)
    ids = os.path.join(a.work, "input_ids.npy")
    labels = os.path.join(a.work, "labels.npy")
    np.save(ids, rng.integers(0, vocab, (1024, 128), dtype=np.int64))
    np.save(labels, rng.integers(0, vocab, (1024, 128), dtype=np.int64))
    out = os.path.join(a.work, "out")
    trained = os.path.join(a.work, "trained.onnx")
    cmd = [a.hetplan, "run", plan, "--ranks", "6", "--input", f"input_ids={ids}", "--labels", labels,
           "--output", out, "--save-model", trained]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sys.stdout.write(r.stdout)
    if r.returncode != 0:
        print("FAIL: hetplan run")
        return 1
    loss = np.load(os.path.join(out, "loss.npy"))
    expect = math.log(vocab)
    if loss.shape != (1,) or not abs(float(loss[0]) - expect) < 0.1:
        print(f"FAIL: loss {loss}, expected about ln({vocab}) = {expect:.4f}")
        return 1
    before = {i.name: numpy_helper.to_array(i) for i in onnx.load(a.model).graph.initializer}
    after = {i.name: numpy_helper.to_array(i) for i in onnx.load(trained).graph.initializer}
    changed = [n for n in before if before[n].dtype == np.float32 and before[n].size >= 2
               and not np.array_equal(before[n], after[n])]
    same = [n for n in before if before[n].dtype != np.float32 and not np.array_equal(before[n], after[n])]
    if set(after) != set(before) or not changed or same:
        print(f"FAIL: trained model: {len(changed)} weights changed, non-float constants changed: {same}")
        return 1
    print(f"ok: README plan, one training step on 6 ranks: loss {loss[0]:.6f} (ln {vocab} = {expect:.6f}), "
          f"{len(changed)} weights updated in {trained}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
