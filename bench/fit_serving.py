#!/usr/bin/env python3
"""Fits the serving stack's GEMM figures per GPU type on the fit set only:
vidur's measured per-operator times (bench/published/serving/vidur-ops-llama2.csv,
microsoft/vidur @ 7d47513, data/profiling/compute/{a100,h100}: the QKV, O,
gate+up and down projections of Llama-2-7B and -70B layers at 1-4096 tokens on
one tensor-parallel shard of 1, 2, 4 or 8, fp16, timed on the GPU).

Each GEMM is priced as hetplan's roofline prices a MatMul (cost::opTime):

    t = kernel + max(2TKN / (peak * matrix * W / (W + half)), 2 (TK + KN + TN) / (bandwidth * memory))

with W = 2TKN the product's FLOPs. Per GPU, `kernel` (kernel_us) is the
median time of the layer's elementwise kernels at 1-16 tokens (their floor),
then `matrix` and `memory` are fitted on the GEMMs by grid search minimising
the mean squared log error (`half` stays 0, see HALVES).

The tensor-parallel collectives are fitted on vidur's measured all-reduces
(bench/published/serving/vidur-allreduce-dgx.csv, data/profiling/network/
{a100,h100}_dgx: 2, 4 and 8 GPUs of one DGX node, 2 KiB to 64 MiB), priced
as the planner prices a ring all-reduce on n ranks (ServePlanner tpSeconds,
StageTiming forwardTime):

    t = collective + 2 (n - 1) latency + 2 (n - 1) / n * bytes / (link_peak * link)

with the catalog's 1 us per NVLink hop; `collective` (collective_us: the
per-call floor of PyTorch + NCCL) and `link` (the share of NVLink's peak
the rings reach) by grid search on the mean squared log error.

The check set (Splitwise's end-to-end runs, bench/serve_accuracy.py) is not
read here.

    python3 bench/fit_serving.py        # prints the fit and its error per GPU
"""
import csv
import math
import os

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "bench", "published", "serving", "vidur-ops-llama2.csv")
ALLREDUCE = os.path.join(ROOT, "bench", "published", "serving", "vidur-allreduce-dgx.csv")
# Catalog NVLink peaks, GB/s each way (A100 NVLink3, H100 NVLink4), and the
# default latency per hop of an intra-node link (passes/cluster/Cluster.h).
LINKS = {"a100": 300e9, "h100": 450e9}
HOP_LATENCY = 1e-6
# Catalog peaks (passes/cluster/device_catalog.yaml): fp16 dense TFLOP/s, GB/s.
# matrix_half_gflop stays 0: the cost model applies the size curve per
# product of a batched MatMul too, so a fitted half-size of ~1 GFLOP prices
# each of attention's tiny per-head products of a decode step at ~5 us (a
# 64-request step of Llama-2-70B at 1.5 s where 50-70 ms was measured).
HALVES = [0]
PEAKS = {"a100": (312e12, 2039e9, "A100-SXM-80GB"), "h100": (989.4e12, 3350e9, "H100-SXM")}


ELEMENTWISE = ["input_layernorm", "post_attention_layernorm", "attn_rope", "mlp_act", "add"]


def gemms():
    """(gpu, T, K, N, measured seconds) of every GEMM in the fit set."""
    out = []
    with open(DATA) as f:
        for r in csv.DictReader(f):
            h, heads, kv, ffn, tp, T = (int(r[k]) for k in ("n_embd", "n_head", "n_kv_head", "n_expanded_embd",
                                                             "tp", "num_tokens"))
            d = h // heads
            shapes = {"attn_pre_proj": (h, (heads + 2 * kv) * d // tp), "attn_post_proj": (heads * d // tp, h),
                      "mlp_up_proj": (h, 2 * ffn // tp), "mlp_down_proj": (ffn // tp, h)}
            for op, (K, N) in shapes.items():
                out.append((r["gpu"], T, K, N, float(r[op + "_median_ms"]) / 1e3))
    return out


def kernel_floor(gpu):
    """Seconds per kernel: the median time of the elementwise kernels (norms,
    rotary, activation, residual add) at 1-16 tokens, where they move a few
    KB and their time is the kernel's floor."""
    times = []
    with open(DATA) as f:
        for r in csv.DictReader(f):
            if r["gpu"] == gpu and int(r["num_tokens"]) <= 16:
                times += [float(r[op + "_median_ms"]) / 1e3 for op in ELEMENTWISE]
    return float(np.median(times)), len(times)


def predict(T, K, N, peak, bw, matrix, half, memory, kernel):
    W = 2.0 * T * K * N
    eff = matrix * W / (W + half) if half > 0 else matrix
    compute = W / (peak * eff)
    mem = 2.0 * (T * K + K * N + T * N) / (bw * memory)
    return kernel + np.maximum(compute, mem)


def fit(rows, peak, bw, kernel):
    T, K, N, t = (np.array([r[i] for r in rows], dtype=float) for i in (1, 2, 3, 4))
    best = None
    for matrix in np.arange(0.40, 1.001, 0.01):
        for half in HALVES:
            for memory in np.arange(0.50, 1.001, 0.01):
                err = np.log(predict(T, K, N, peak, bw, matrix, half, memory, kernel) / t)
                score = float(np.mean(err ** 2))
                if best is None or score < best[0]:
                    best = (score, matrix, half, memory, err)
    return best


def fit_collectives(gpu):
    """(collective seconds, link share, median and worst relative error,
    the roofline's median error, points) of the all-reduce fit on one GPU."""
    n, size, t = [], [], []
    with open(ALLREDUCE) as f:
        for r in csv.DictReader(f):
            if r["gpu"] == gpu:
                n.append(int(r["num_workers"]))
                size.append(int(r["size_bytes"]))
                t.append(float(r["median_ms"]) / 1e3)
    n, size, t = (np.array(v, dtype=float) for v in (n, size, t))

    def pred(call, link):
        return call + 2 * (n - 1) * HOP_LATENCY + 2 * (n - 1) / n * size / (LINKS[gpu] * link)

    best = None
    for call in np.arange(0, 80.5, 1) * 1e-6:
        for link in np.arange(0.20, 1.001, 0.02):
            score = float(np.mean(np.log(pred(call, link) / t) ** 2))
            if best is None or score < best[0]:
                best = (score, call, link)
    _, call, link = best
    rel = np.abs(pred(call, link) / t - 1)
    base = np.abs(pred(0, 1.0) / t - 1)
    return call, link, float(np.median(rel)), float(rel.max()), float(np.median(base)), len(t)


def main():
    for gpu, (_, _, name) in PEAKS.items():
        call, link, med, worst, base, count = fit_collectives(gpu)
        print(f"{name}: collective_us {call * 1e6:.0f}, link {link:.2f}: {count} all-reduces, median error "
              f"{100 * med:.1f}%, worst {100 * worst:.0f}% (1 us per hop at the peak: median {100 * base:.1f}%)")
    rows = gemms()
    for gpu, (peak, bw, name) in PEAKS.items():
        mine = [r for r in rows if r[0] == gpu]
        kernel, n_floor = kernel_floor(gpu)
        score, matrix, half, memory, err = fit(mine, peak, bw, kernel)
        rel = np.exp(np.abs(err)) - 1
        T, K, N, t = (np.array([r[i] for r in mine], dtype=float) for i in (1, 2, 3, 4))
        base = np.exp(np.abs(np.log(predict(T, K, N, peak, bw, 0.6, 0, 0.8, 5e-6) / t))) - 1
        print(f"{name}: kernel_us {kernel * 1e6:.0f} (median of {n_floor} elementwise kernels at 1-16 tokens); "
              f"matrix {matrix:.2f}, memory {memory:.2f}: {len(mine)} GEMMs, median error {100 * np.median(rel):.1f}%, "
              f"p90 {100 * np.percentile(rel, 90):.1f}%, worst {100 * rel.max():.1f}% "
              f"(roofline defaults 0.6 / 0 / 0.8 / 5 us: median {100 * np.median(base):.1f}%, "
              f"worst {100 * base.max():.1f}%)")


if __name__ == "__main__":
    main()
