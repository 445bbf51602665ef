#!/usr/bin/python3
"""Fits the two host-side terms of the catalog's `achieved` block of
V100-SXM2-16GB and T4, `kernel_us` (per op) and `micro_batch_us` (per
micro-batch and pass), on the FIT SET only: AMP's measured step times on the
homogeneous T4 cluster (bench/published/amp_gpt2.json, cluster amp-t4) plus
AMP's per-layer batch-1 forward profiles (known_cost/gpt2_*_1.npy). For each
candidate kernel_us the `matrix` share of each device is refitted to its
batch-1 profile (bench/calibrate_amp.py), so the per-layer batch-1 times stay
what AMP measured; the step times then decide how much of that time is fixed
per op and per micro-batch (it does not grow with the micro-batch size).
The host terms are taken equal on both devices (the same PyTorch 1.7 /
DeepSpeed / Megatron-LM host code on Xeon hosts of the p3 and g4dn families).
The CHECK SET, amp-het (12 V100 + 4 T4), is never priced here.

    /usr/bin/python3 bench/fit_overheads.py ANNOTATED.mlir
(ANNOTATED.mlir as bench/calibrate_amp.py takes it.)"""
import json, os, statistics, subprocess, sys, tempfile
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import accuracy as A
import calibrate_amp as C

ROOT = A.ROOT


def fit_matrix(layers, L, prof, dev, kernel_s):
    meas_block = statistics.mean(prof[2:2 + L])
    meas_head = sum(prof[2 + L:])
    best = None
    for mi in range(10, 400):
        m = mi / 400
        tb = C.layer_time(layers[2], dev, m, kernel_s)
        th = C.layer_time(layers[L + 1], dev, m, kernel_s)
        # weighted by the model's time: L blocks, one head
        err = L * (tb / meas_block - 1) ** 2 + (th / meas_head - 1) ** 2
        if best is None or err < best[0]:
            best = (err, m)
    return best[1]


def main():
    layers = C.load_ops(sys.argv[1])
    L = max(layers) - 1
    data = json.load(open(os.path.join(ROOT, "bench/published/amp_gpt2.json")))
    m = data["model"]
    model = os.path.join(tempfile.gettempdir(), "hetplan-accuracy", "amp-gpt2.onnx")
    trials = [t for t in data["trials"] if t["cluster"] == "amp-t4" and t["measured_s"]]
    layouts = [A.amp_layout(t, m["layers"], data["global_batch"]) for t in trials]
    base = open(os.path.join(ROOT, "bench/clusters/amp-t4.yaml")).read()
    prof = data["layer_profiles"]["T4/mp1"]["forward_s_per_sample"]
    best = None
    for ku in range(10, 100, 6):
        mt4 = fit_matrix(layers, L, prof, C.DEV["T4"], ku * 1e-6)
        for mb in range(0, 40001, 2500):
            yaml = base + (f"devices:\n  - name: T4\n    achieved: {{matrix: {mt4}, "
                           f"kernel_us: {ku}, micro_batch_us: {mb}}}\n")
            with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
                f.write(yaml)
            try:
                out = A.price(os.path.join(ROOT, "build/bin/hetplan"), model, f.name, layouts,
                              ["--grad-dtype", "fp32"], data["global_batch"], m["seq"],
                              data["dtype"])
            finally:
                os.unlink(f.name)
            errs = [abs(o["step_time_s"] / t["measured_s"] - 1) for o, t in zip(out, trials)
                    if o.get("step_time_s")]
            score = statistics.median(errs)
            if best is None or score < best[0]:
                best = (score, ku, mb, mt4, max(errs))
    score, ku, mb, mt4, worst = best
    mv = fit_matrix(layers, L, data["layer_profiles"]["V100-SXM2-16GB/mp1"]["forward_s_per_sample"],
                    C.DEV["V100-SXM2-16GB"], ku * 1e-6)
    print(f"fit set amp-t4: kernel_us {ku}, micro_batch_us {mb}: median |err| "
          f"{100 * score:.1f}%, worst {100 * worst:.1f}%; matrix T4 {mt4:.3f}, V100 {mv:.3f}")


if __name__ == "__main__":
    main()
