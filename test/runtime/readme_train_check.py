#!/usr/bin/env python3
"""The README's earlier example end to end (scripts/demo.sh's plan before it
planned GPT-2 XL; that one is the `demo` test, demo_check.py): compile
gpt2-tiny for training on 2 A100s + 4 T4s, batch 1024 x 128,
then execute one training step of it with `hetplan run` on 6 CPU threads
(one per planned device) and check what a user relies on: the step runs,
the loss is the cross-entropy of an untrained model (about ln(vocab) for
random labels) and the trained model is written with every element of
every trained parameter moved by Adam's first step (but the attention key
biases, whose gradient is 0: see below) and every constant as it was.

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
    if set(after) != set(before):
        print(f"FAIL: trained model's initializers differ: {sorted(set(before) ^ set(after))}")
        return 1
    # The trained parameters: every float32 initializer of 2+ elements
    # (runtime/src/exec/Training.cpp, trainableParameters: on gpt2-tiny each
    # one feeds a differentiable input; float scalars are constants such as
    # sqrt(d) and -FLT_MAX, int64/bool ones shapes and the causal mask, and
    # must not change). One Adam step (lr 1e-3, no --freeze) moves every
    # element by lr * g / (|g| + eps), eps 1e-8: so every element whose
    # gradient is not zero moves (the embedding is tied to the output
    # projection and all 128 positions are used), and none by more than lr.
    # A parameter whose gradient was dropped (all or part) keeps elements
    # unmoved. One exception, exact: the key third of each c_attn.bias (the
    # fused q|k|v bias). A key bias adds q.b_k to every score of a query, which
    # softmax cancels: its true gradient is 0, so it moves by rounding noise
    # only (its computed gradient ~1e-13 gives lr * g / eps ~ 1e-8), or not
    # at all; it must stay within 1e-6, which a real gradient would not.
    lr = 1e-3
    params = sorted(n for n, v in before.items() if v.dtype == np.float32 and v.size >= 2)
    problems = []
    for n in params:
        delta = np.abs(after[n].astype(np.float64) - before[n].astype(np.float64))
        moves = np.ones(delta.shape, bool)
        if n.endswith("attn.c_attn.bias"):
            k = delta.size // 3
            moves[k:2 * k] = False
            if delta[k:2 * k].max() > 1e-6:
                problems.append(f"{n}: the key bias moved {delta[k:2 * k].max():.3g} (its gradient is 0)")
        still = int(np.sum(delta[moves] == 0))
        if still:
            problems.append(f"{n}: {still} of {int(moves.sum())} elements did not move")
        if delta.max() > lr * (1 + 1e-3):
            problems.append(f"{n}: moved {delta.max():.3g} > lr {lr}")
    same = [n for n in before if n not in params and not np.array_equal(before[n], after[n])]
    if same:
        problems.append(f"constants changed: {same}")
    if not params or problems:
        print("FAIL: trained model:\n  " + "\n  ".join(problems or ["no parameters"]))
        return 1
    print(f"ok: README plan, one training step on 6 ranks: loss {loss[0]:.6f} (ln {vocab} = {expect:.6f}), "
          f"every element of all {len(params)} parameters moved by at most lr (the key biases, whose "
          f"gradient is 0, by < 1e-6) in {trained}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
