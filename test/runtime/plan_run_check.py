#!/usr/bin/env python3
"""Compile a 3-rank CPU pipeline plan with an uneven batch split for each
model, then check that executing it gives the outputs of the whole model on
one rank: with hetplan-plan-equivalence (PlanExecutor vs Executor, in
process) and with `hetplan run` on .npy files (compared here with numpy).

  plan_run_check.py --hetplan BIN --equivalence BIN --work DIR MODEL|DIR...
  --skip-if-absent: exit 77 (ctest SKIP) when a named folder is missing.
  --mpi MPIRUN: run `hetplan run` as one process per rank,
  `MPIRUN --allow-run-as-root --oversubscribe --mca btl self,vader -np 3 ...`
  (shared memory and loopback only); exit 77 when MPIRUN is not found.
  --mode train: compile training plans; the equivalence check compares two
  steps' losses, gradients and parameters with one rank, and `hetplan run
  --labels ... --steps 2 --save-model` must reproduce the losses and the
  trained weights (read back from the saved ONNX file).
  --generate gpt2-small: write models/gen_transformer.py's GPT-2 small
  (124M parameters, random weights, external data) into DIR and check it;
  --generate small-cnn: models/gen_cnn.py's residual convnet;
  --generate dlrm-tiny: models/gen_dlrm.py's tiny DLRM (embedding lookups).
  --memory "ARGS": training memory options set on the compiled plan by the
  equivalence check (e.g. "--zero 3 --recompute all --offload"), which
  writes the changed plan for `hetplan run` (docs/runtime.md, "Training
  memory: recomputation, ZeRO, offload").
  --ort-references DIR: the models are onnx-light graphs: each is first
  given seeded random weights (onnx_light_random.py; their stored weights
  are one constant, under which a wrong kernel goes unseen), and the
  pipelined plan's `hetplan run` and a one-CPU plan's run, on seeded
  inputs, are compared with onnxruntime's outputs stored in DIR (the
  logits and the final output; max-norm relative error, printed).
  --perturb-check MODEL: a test of the test: MODEL with one random weight
  tensor scaled by 1.001 must FAIL that comparison.
"""
import argparse, glob, os, shutil, subprocess, sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu_clusters  # noqa: E402
import onnx_light_random  # noqa: E402

CLUSTER = cpu_clusters.CPU3


# --tp [N]: two nodes of N CPUs (the second at half speed): one stage, two
# data-parallel workers of N tensor-parallel ranks each, uneven 4+2 shares.
# The plan must split Megatron-style (column/row pairs) and every rank's
# collectives must be the ones the plan priced (hetplan-plan-equivalence).
def cluster_tp(n):
    return ("nodes:\n  - name: a\n    devices: [{type: CPU, count: %d}]\n"
            "  - name: b\n    devices: [{type: CPU, count: %d}]\n    speed_factors: {CPU: 0.5}\n" % (n, n))


def run(cmd, timeout=None):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    return r.returncode, r.stdout


def run_bounded(cmd, under_mpi):
    """run(), bounded to 300 s under mpirun (where a stuck rank would hang)."""
    try:
        return run(cmd, timeout=300 if under_mpi else None)
    except subprocess.TimeoutExpired:
        return 1, "timed out after 300 s"


def check_training(name, work, trained, mpi_prefix):
    """`hetplan run`'s losses and saved weights against the one-rank reference."""
    import onnx
    from onnx import numpy_helper
    how = f"mpirun -np {mpi_prefix[-1]} " if mpi_prefix else ""
    loss = np.load(os.path.join(work, "out", "loss.npy"))
    ref = np.load(os.path.join(work, "ref_loss.npy"))
    if loss.shape != ref.shape or not np.allclose(loss, ref, rtol=1e-4, atol=0):
        print(f"FAIL {name}: {how}hetplan run losses {loss} differ from one rank's {ref}")
        return 1
    model = onnx.load(trained)
    weights = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    worst, count = 0.0, 0
    for f in sorted(glob.glob(os.path.join(work, "ref_param_*.npy"))):
        r = np.load(f)
        key = os.path.basename(f)[len("ref_param_"):-4]
        got = [w for n, w in weights.items() if "".join(c if c.isalnum() else "_" for c in n) == key]
        if len(got) != 1 or got[0].shape != r.shape:
            print(f"FAIL {name}: trained weight {key} missing from {trained}")
            return 1
        err = float(np.max(np.abs(got[0].astype(np.float64) - r)) / max(float(np.max(np.abs(r))), 1e-30))
        worst, count = max(worst, err), count + 1
    if count == 0 or worst > 1e-4:
        print(f"FAIL {name}: {how}hetplan run trained weights differ from one rank's (max-norm relative {worst:.3g})")
        return 1
    print(f"ok: {how}hetplan run {name} (train, 2 steps): losses {', '.join(f'{x:.6f}' for x in loss)} "
          f"match one rank; {count} trained weights in {os.path.basename(trained)} within {worst:.3g}")
    return 0


def check_ort(a, name, model, info, work, mpi_prefix, refs, check_digest=True, pipelined=True, perturbed=False):
    """`hetplan run` of the pipelined plan (work/plan) and of a one-CPU
    plan on the seeded inputs against onnxruntime. Returns failures
    (`perturbed`: a model that must differ, the lines say so)."""
    inputs = []
    seeded = onnx_light_random.make_inputs(model)
    info = dict(info, inputs_digest=onnx_light_random.inputs_digest(seeded))
    for n, arr in seeded.items():
        f = os.path.join(work, "seeded_" + onnx_light_random.safe(n) + ".npy")
        np.save(f, arr)
        inputs += ["--input", f"{n}={f}"]
    cluster1 = os.path.join(work, "cpu1.yaml")
    with open(cluster1, "w") as f:
        f.write(cpu_clusters.CPU1)
    plan1 = os.path.join(work, "plan1")
    rc, out = run([a.hetplan, "compile", model, "--mode", "infer", "--cluster", cluster1, "--batch", "1",
                   "--dtype", "fp32", "--quiet", "-o", plan1])
    if rc != 0:
        print(f"FAIL {name}: compile on one CPU\n{out}")
        return 1
    runs = [("one CPU", [], plan1, 1)]
    if pipelined:
        runs.append(("pipelined plan" + (f" (mpirun -np {mpi_prefix[-1]})" if mpi_prefix else ""),
                     mpi_prefix, os.path.join(work, "plan"), 3))
    failures = 0
    for what, prefix, plan, ranks in runs:
        out_dir = os.path.join(work, "ort_out_%d" % ranks)
        shutil.rmtree(out_dir, ignore_errors=True)
        rc, out = run_bounded(prefix + [a.hetplan, "run", plan, "--output", out_dir, "--ranks", str(ranks),
                                        "--quiet"] + inputs, bool(prefix))
        if rc != 0:
            print(f"FAIL {name}: hetplan run ({what}, seeded inputs)\n{out}")
            failures += 1
            continue
        outputs = {}
        for o in info["outputs"]:
            f = os.path.join(out_dir, onnx_light_random.safe(o) + ".npy")
            if os.path.exists(f):
                outputs[o] = np.load(f)
        ok, msg = onnx_light_random.compare(name, info, outputs, refs, check_digest=check_digest)
        label = ("NOT CAUGHT" if ok else "caught") if perturbed else ("ok" if ok else "FAIL")
        print(f"{label}: hetplan run, {what}: {msg}")
        failures += 0 if ok else 1
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hetplan", required=True)
    ap.add_argument("--equivalence", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--skip-if-absent", action="store_true")
    ap.add_argument("--mpi", metavar="MPIRUN", help="run `hetplan run` under this mpirun")
    ap.add_argument("--mode", choices=["infer", "train"], default="infer")
    ap.add_argument("--generate", action="append", default=[], metavar="CONFIG",
                    help="gpt2 config of models/gen_transformer.py to generate and check")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--tp", type=int, nargs="?", const=2, default=0,
                    help="tensor-parallel layout of this degree (2 x N ranks, see cluster_tp)")
    ap.add_argument("--mixed-tp", action="store_true",
                    help="two stages of different tensor parallelism (2 workers of 2 ranks, then 1 of 4; "
                         "a --layout on cluster_tp(4)); gpt2's tied embedding is read by both")
    ap.add_argument("--memory", default="", metavar="ARGS",
                    help="hetplan-plan-equivalence options that set training memory options on the plan")
    ap.add_argument("--ort-references", metavar="DIR",
                    help="onnx-light graphs: randomize their weights, compare with these onnxruntime outputs")
    ap.add_argument("--perturb-check", metavar="MODEL",
                    help="with --ort-references: MODEL (a base name) with one weight perturbed must fail")
    ap.add_argument("models", nargs="*")
    a = ap.parse_args()
    if a.mixed_tp:
        a.tp = 4
    mpi_prefix = []
    if a.mpi is not None:
        mpirun = shutil.which(a.mpi)
        if not mpirun:
            print(f"SKIP: {a.mpi} is absent")
            return 77
        # self,vader: in-process and shared memory; never a network interface.
        mpi_prefix = [mpirun, "--allow-run-as-root", "--oversubscribe", "--mca", "btl", "self,vader",
                      "-np", str(2 * a.tp) if a.tp else "3"]

    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work, exist_ok=True)
    models = []
    gen = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models", "gen_transformer.py")
    for config in a.generate:
        family = config.split("-")[0]
        out = os.path.join(a.work, config + ".onnx")
        if config == "small-cnn":  # models/gen_cnn.py: a residual convnet
            rc, log = run([a.python, os.path.join(os.path.dirname(gen), "gen_cnn.py"), "-o", out])
        elif config == "dlrm-tiny":  # models/gen_dlrm.py: embedding tables, MLPs, dot interaction
            rc, log = run([a.python, os.path.join(os.path.dirname(gen), "gen_dlrm.py"), "--config", "tiny",
                           "-o", out])
        else:
            rc, log = run([a.python, gen, "--family", family, "--config", config,
                           "--weights", "external", "--no-check", "-o", out])
        if rc != 0:
            print(f"FAIL: generating {config}\n{log}")
            return 1
        models.append(out)
    generated = set(models)  # not onnx-light graphs: never randomized
    for m in a.models:
        if os.path.isdir(m):
            models += sorted(glob.glob(os.path.join(m, "*.onnx")))
        elif os.path.exists(m):
            models.append(m)
        elif a.skip_if_absent:
            print(f"SKIP: {m} is absent")
            return 77
        else:
            print(f"FAIL: {m} is absent")
            return 1
    if not models:
        print("SKIP: no models")
        return 77

    cluster = os.path.join(a.work, "cpus.yaml")
    with open(cluster, "w") as f:
        f.write(cluster_tp(a.tp) if a.tp else CLUSTER)

    failures = 0
    if a.ort_references and a.perturb_check:
        # A test of the test, first (it is cheap): one weight tensor scaled
        # by 1.001 must show against onnxruntime, or the comparison is too
        # loose to catch a slightly wrong kernel.
        src = [m for m in models if os.path.splitext(os.path.basename(m))[0] == a.perturb_check]
        if len(src) != 1:
            print(f"FAIL: --perturb-check {a.perturb_check} is not among the models")
            return 1
        work = os.path.join(a.work, a.perturb_check + "-perturbed")
        os.makedirs(os.path.join(work, "model"), exist_ok=True)
        model = os.path.join(work, "model", a.perturb_check + ".onnx")
        info = onnx_light_random.randomize(src[0], model, perturb=(10, 1.001))
        caught = check_ort(a, a.perturb_check, model, info, work, [], a.ort_references,
                           check_digest=False, pipelined=False, perturbed=True)
        shutil.rmtree(work, ignore_errors=True)
        print(f"{'ok' if caught else 'FAIL'}: {a.perturb_check} with random weight 10 scaled by 1.001: "
              f"{'the comparison with onnxruntime fails, as it must' if caught else 'NOT caught'}")
        if not caught:
            return 1
    for model in models:
        name = os.path.splitext(os.path.basename(model))[0]
        work = os.path.join(a.work, name)
        os.makedirs(work, exist_ok=True)
        info = None
        if a.ort_references and model not in generated:
            # The graph with seeded random weights (MODEL.onnx.data: up to
            # 575 MB, removed after the model's checks).
            os.makedirs(os.path.join(work, "model"), exist_ok=True)
            src, model = model, os.path.join(work, "model", name + ".onnx")
            info = onnx_light_random.randomize(src, model)
        plan = os.path.join(work, "plan")
        # Graphs that hard-code a batch of 1 (the onnx-light models reshape to
        # [1, N]) can only run one sample per worker: a 3-stage pipeline of
        # one sample (these are big convnets on 2 shared cores; gpt2-tiny
        # covers micro-batches and uneven splits). The reference runs one
        # sample at a time.
        rc, summary = run([a.hetplan, "summary", model])
        fixed1 = any(l.strip().split(":")[-1].strip().startswith("1 x")
                     for l in summary.split("outputs:")[0].split("inputs:")[-1].splitlines()[1:])
        layout = ["--batch", "1", "--pin", "pp=3,mb=1"] if fixed1 else ["--batch", "14", "--pin", "pp=2,mb=2"]
        if a.tp:
            layout = ["--batch", "12", "--pin", "pp=1,mb=2,tp=%d" % a.tp]
        if a.mixed_tp:
            mixed = os.path.join(work, "layout.json")
            with open(mixed, "w") as f:
                f.write('{"micro_batches": 2, "stages": ['
                        '{"workers": [[0, 1], [2, 3]], "last_layer": 1, "tensor_parallel": 2}, '
                        '{"workers": [[4, 5, 6, 7]], "last_layer": 3, "tensor_parallel": 4}]}')
            layout = ["--batch", "12", "--layout", mixed]
        cmd = [a.hetplan, "compile", model, "--mode", a.mode, "--cluster", cluster,
               *layout, "--dtype", "fp32", "--quiet", "-o", plan]
        if "gpt2" in name or "bert" in name or "llama" in name:
            cmd += ["--seq", "8"]
        rc, out = run(cmd)
        if rc != 0:
            print(f"FAIL {name}: compile\n{out}")
            failures += 1
            continue
        rc, explain = run([a.hetplan, "explain", plan])
        if a.tp and not a.mixed_tp and not any(l.split()[:1] == ["0"] and " %d  " % a.tp in l for l in explain.split("Stages (")[1].splitlines()[1:3]):
            print(f"FAIL {name}: expected a stage with tensor parallelism {a.tp}\n{explain}")
            failures += 1
            continue
        if a.tp and " 0 row MatMuls" in explain:
            print(f"FAIL {name}: expected Megatron column/row pairs\n{explain}")
            failures += 1
            continue
        if not fixed1 and not a.tp and "Stages (2" not in explain:
            print(f"FAIL {name}: expected 2 stages\n{explain}")
            failures += 1
            continue
        shares = [l.split() for l in explain.splitlines()]
        uneven = any("+" in tok and len(set(tok.split("+"))) > 1 for l in shares for tok in l)
        if a.mixed_tp and ("stage 0 tensor parallel 2:" not in explain or "stage 1 tensor parallel 4:" not in explain):
            print(f"FAIL {name}: expected stages of tensor parallelism 2 and 4\n{explain}")
            failures += 1
            continue
        if not fixed1 and not uneven and not a.mixed_tp:
            print(f"FAIL {name}: expected unequal batch shares\n{explain}")
            failures += 1
            continue

        rc, out = run([a.equivalence, plan, "--write", work] + (["--per-sample"] if fixed1 else []) +
                      a.memory.split())
        if a.memory:
            plan = os.path.join(work, "plan.hpl")  # the plan with the options set
        sys.stdout.write(out)
        if rc != 0:
            print(f"FAIL {name}: PlanExecutor differs from one rank")
            failures += 1
            if info is not None:  # which of them is wrong: both against onnxruntime
                check_ort(a, name, model, info, work, mpi_prefix, a.ort_references)
                shutil.rmtree(os.path.join(work, "model"), ignore_errors=True)
            continue

        if info is not None:
            # hetplan run of the plan (and of a one-CPU plan) on seeded
            # inputs against onnxruntime: that the plan's outputs equal one
            # rank's was checked in process just above.
            failures += 1 if check_ort(a, name, model, info, work, mpi_prefix, a.ort_references) else 0
            shutil.rmtree(os.path.join(work, "model"), ignore_errors=True)
            continue

        # input_names.txt: the real input names, in the order of in_*.npy
        inputs = sorted(glob.glob(os.path.join(work, "in_*.npy")))
        args = mpi_prefix + [a.hetplan, "run", plan, "--output", os.path.join(work, "out"), "--ranks", str(2 * a.tp) if a.tp else "3", "--quiet"]
        trained = os.path.join(work, "trained.onnx")
        if a.mode == "train":
            # The equivalence check's settings: 2 steps, Adam eps 1e-4.
            args += ["--labels", os.path.join(work, "labels.npy"), "--steps", "2", "--adam-eps", "1e-4",
                     "--save-model", trained]
        names = open(os.path.join(work, "input_names.txt")).read().split("\n") if os.path.exists(
            os.path.join(work, "input_names.txt")) else None
        for f, n in zip(inputs, names or []):
            args += ["--input", f"{n}={f}"]
        rc, out = run_bounded(args, bool(mpi_prefix))
        if rc != 0:
            print(f"FAIL {name}: hetplan run\n{out}")
            failures += 1
            continue
        if a.mode == "train":
            failures += check_training(name, work, trained, mpi_prefix)
            continue
        worst = 0.0
        for ref in sorted(glob.glob(os.path.join(work, "ref_*.npy"))):
            r = np.load(ref)
            outs = sorted(glob.glob(os.path.join(work, "out", "*.npy")))
            got = None
            for o in outs:
                base = os.path.basename(o)[:-4]
                if "".join(c if c.isalnum() else "_" for c in base) == os.path.basename(ref)[4:-4]:
                    got = np.load(o)
            if got is None or got.shape != r.shape or got.dtype != r.dtype:
                print(f"FAIL {name}: hetplan run output for {ref} missing or of the wrong shape/type")
                failures += 1
                continue
            if not np.allclose(got, r, rtol=1e-4, atol=1e-5, equal_nan=True):
                print(f"FAIL {name}: hetplan run output {ref} differs")
                failures += 1
            rel = np.abs(got.astype(np.float64) - r) / np.maximum(np.abs(r), 1e-30)
            worst = max(worst, float(np.max(rel)) if rel.size else 0.0)
        how = f"mpirun -np {mpi_prefix[-1]} " if mpi_prefix else ""
        print(f"ok: {how}hetplan run {name}: max relative error {worst:.3g}")
    print(f"{len(models) - failures}/{len(models)} models pass")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
