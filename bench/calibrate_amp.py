#!/usr/bin/python3
"""Two-point fit of `matrix` and `kernel_us` of V100-SXM2-16GB and T4 to AMP's
measured per-layer forward times (batch 1). The catalog's figures now come
from bench/fit_overheads.py, which fixes kernel_us (and micro_batch_us) on the
amp-t4 step times (fit set) and refits `matrix` with layer_time() below; this
script shows the per-device two-point fit for comparison. The amp-het step
times in bench/published/amp_gpt2.json are the check set (bench/accuracy.py).

    /usr/bin/python3 bench/calibrate_amp.py ANNOTATED.mlir

ANNOTATED.mlir: the AMP GPT-2 (bench/accuracy.py generates it) after
`hetplan-opt --het-bind-shapes="dims=batch=1,sequence=1024" --het-group-layers
--het-annotate-costs="dtype=fp16"`. Per device two parameters are fitted,
the large-GEMM share of peak (`matrix`) and the per-kernel overhead
(`kernel_us`), to two measurements: the mean forward time of a transformer
layer (AMP slots 2-25) and of the head (slots 26-29: final LayerNorm, LM
head, loss), one sample, no tensor parallelism (known_cost/gpt2_*_1.npy).
Memory (0.8) and vector (0.3) shares stay at the documented defaults."""
import json, os, re, statistics, sys, collections

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEV = {"V100-SXM2-16GB": dict(fp16=125e12, fp32=15.7e12, bw=900e9),
       "T4": dict(fp16=65e12, fp32=8.1e12, bw=320e9)}


def load_ops(path):
    layers = collections.defaultdict(list)
    for line in open(path):
        if "het.node" not in line or "het.cost" not in line:
            continue
        c = re.search(r"het.cost = \{([^}]*)\}", line).group(1)
        d = {k: float(v) for k, v in re.findall(r"(\w+) = ([-0-9.e+]+) : f64", c)}
        d["matrix"] = bool(re.search(r"(^|, )matrix(,|$)", c.strip()))
        lay = re.search(r"het.layer = (\d+)", line)
        if lay and (d.get("flops", 0) > 0 or d.get("bytes", 0) > 0):
            layers[int(lay.group(1))].append(d)
    return layers


def layer_time(ops, dev, matrix, kernel_s, half_flops=0.0, memory=0.8, vector=0.3):
    t = 0.0
    for o in ops:
        f, b = o.get("flops", 0), o.get("bytes", 0)
        if o["matrix"]:
            eff = matrix * (f / (f + half_flops) if half_flops else 1.0)
            comp = f / (dev["fp16"] * eff)
        else:
            comp = f / (2 * dev["fp32"] * vector)
        t += kernel_s + max(comp, b / (dev["bw"] * memory))
    return t


def main():
    layers = load_ops(sys.argv[1])
    L = max(layers) - 1
    data = json.load(open(os.path.join(ROOT, "bench/published/amp_gpt2.json")))
    for name, dev in DEV.items():
        prof = data["layer_profiles"][f"{name}/mp1"]["forward_s_per_sample"]
        meas_block = statistics.mean(prof[2:2 + L])
        meas_head = sum(prof[2 + L:])
        block, head = layers[2], layers[L + 1]
        best = None
        for mi in range(5, 100):
            m = mi / 100
            for ku in range(0, 400):
                k = ku * 1e-6
                tb, th = layer_time(block, dev, m, k), layer_time(head, dev, m, k)
                err = (tb / meas_block - 1) ** 2 + (th / meas_head - 1) ** 2
                if best is None or err < best[0]:
                    best = (err, m, ku, tb, th)
        err, m, ku, tb, th = best
        plain_b = layer_time(block, dev, 0.6, 5e-6)
        print(f"{name}: matrix {m:.2f}, kernel_us {ku}: block {tb*1e3:.2f} ms "
              f"(measured {meas_block*1e3:.2f}, uncalibrated {plain_b*1e3:.2f}), "
              f"head {th*1e3:.2f} ms (measured {meas_head*1e3:.2f}); "
              f"kernels per block {len(block)}")


if __name__ == "__main__":
    main()
