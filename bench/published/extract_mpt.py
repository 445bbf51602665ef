#!/usr/bin/python3
"""Extracts MosaicML's measured MPT training throughput
(github.com/mosaicml/llm-foundry, scripts/train/benchmarking/README.md) into
bench/published/mpt_llmfoundry.json. Run once against a checkout of that
repository:

    /usr/bin/python3 bench/published/extract_mpt.py LLM_FOUNDRY_CHECKOUT [COMMIT]

Reads the README's result tables (bf16 rows on h100_80gb, a100_80gb and
a100_40gb; the FP8 table is left out: hetplan has no fp8) and the model
shapes from scripts/train/yamls/pretrain/mpt-<size>.yaml at the same commit.
Each row is one measured run of Composer + PyTorch FSDP (data parallel only:
pp = tp = 1) with FlashAttention. The step time is the row's own
`GlobalBatchSize (T)` / `Throughput (T/s)` (tokens per step over measured
tokens per second). MFU is the row's published figure (collect_results.py:
(6 * n_params + 12 * n_layers * d_model * seq) FLOPs per token over the GPU's
dense bf16 peak, 312 TFLOP/s on A100 and 989 on H100).
"""
import json, re, subprocess, sys

URL = "https://github.com/mosaicml/llm-foundry/blob/{commit}/{path}"
README = "scripts/train/benchmarking/README.md"
GPU = {"h100_80gb": "H100-SXM", "a100_80gb": "A100-SXM-80GB", "a100_40gb": "A100-SXM-40GB"}
ZERO = {"FULL_SHARD": 3, "SHARD_GRAD_OP": 2}


def yaml_field(text, key):
    m = re.search(rf"^\s*{key}:\s*([0-9]+)", text, re.M)
    return int(m.group(1))


def main():
    repo = sys.argv[1]
    git = lambda *a: subprocess.run(["git", "-C", repo, *a], check=True,
                                     capture_output=True, text=True).stdout
    commit = sys.argv[2] if len(sys.argv) > 2 else git("log", "-1", "--format=%H", "--",
                                                         README).strip()
    text = git("show", f"{commit}:{README}")
    shapes = {}
    configs = []
    section = None
    for line in text.splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 20 or not cells[0][:1].isdigit() or "FP8" in (section or ""):
            continue
        (size, seq, gpus, gpu, mfu, hfu, _tflop, mbs, accum, gbs, _sps, tps, _tpsg, gbs_t,
         prec, _mp, shard, ckpt, offload, nparams) = cells[:20]
        if gpu not in GPU or "fp8" in prec or offload != "False" or shard not in ZERO:
            continue
        if size not in shapes:
            y = git("show", f"{commit}:scripts/train/yamls/pretrain/mpt-{size}.yaml")
            shapes[size] = {"layers": yaml_field(y, "n_layers"), "hidden": yaml_field(y, "d_model"),
                            "heads": yaml_field(y, "n_heads"),
                            "vocab": yaml_field(y, "vocab_size"),
                            "ffn_ratio": yaml_field(y, "expansion_ratio")}
        gpus, mbs, accum, gbs = int(gpus), int(mbs), int(accum), int(gbs)
        assert gbs == gpus * mbs * accum, line
        cfg = {
            "id": f"{gpu}-{size}-s{seq}-n{gpus}-mbs{mbs}",
            "group": None,
            "cite": f"{section}: row {size}, seq {seq}, {gpus} GPUs",
            "model": dict(shapes[size], seq=int(seq), name=f"mpt-{size}", dropout=0.0),
            "cluster": {"gpu": GPU[gpu], "gpus_per_node": 8, "nodes": max(1, gpus // 8),
                        "inter_node_gbs": 25.0 if "1600 Gbps" in section else None},
            "layout": {"pp": 1, "tp": 1, "dp": gpus, "micro_batch_size": mbs,
                       "micro_batches": accum, "global_batch": gbs,
                       "recompute": ckpt == "True", "dtype": "bf16", "zero": ZERO[shard],
                       "virtual_stages": 1},
            "measured": {"step_time_s": int(gbs_t) / int(tps), "tokens_per_s": int(tps),
                         "mfu": float(mfu) / 100, "hfu": float(hfu) / 100, "oom": False,
                         "n_params": int(nparams)},
        }
        configs.append(cfg)
    out = {
        "role": "check",
        "role_reason": "an independent stack (Composer + FSDP + FlashAttention, no tensor or "
                       "pipeline parallelism), three GPU types and sequences from 512 to 65536: "
                       "never used for fitting; chosen before any fitting (SPLIT.md)",
        "source": "MosaicML llm-foundry MPT training benchmarks",
        "citation": URL.format(commit=commit, path=README),
        "commit": commit,
        "stack": "Composer + PyTorch FSDP (FULL_SHARD = ZeRO-3, SHARD_GRAD_OP = ZeRO-2), "
                 "FlashAttention (attn_impl: flash), bf16 autocast",
        "stack_profile": "llm-foundry",
        "stack_profile_reason": "the catalog's llm-foundry profile (since 2026-12-07; megatron-lm "
                                "before): megatron-lm's host figures and GEMM share, plus the loss "
                                "kernel llm-foundry runs by default (flash-attn's fused cross entropy, "
                                "which keeps no fp32 softmax); changed after this source's errors under "
                                "megatron-lm had been seen, from what llm-foundry's code says it runs "
                                "(docs/cost-model.md, 'Fit and check sources')",
        "step_time_formula": "GlobalBatchSize (T) / Throughput (T/s), both columns of the row",
        "mfu_formula": "collect_results.py: (3 * 2 * n_params * seq + 3 * 4 * n_layers * d_model"
                       " * seq^2) * sequences/s / (gpus * peak), peak 312e12 (A100), 989e12 (H100)",
        "model_note": "MPT: no biases, ALiBi (no position embedding), tied embeddings, GELU MLP "
                      "with expansion 4, no dropout (MPTConfig defaults resid_pdrop = emb_pdrop = 0, "
                      "llmfoundry/models/mpt/configuration_mpt.py; the yamls set none); priced "
                      "as hetplan's GPT-2 graph of the same shape",
        "configs": configs,
    }
    path = "bench/published/mpt_llmfoundry.json"
    json.dump(out, open(path, "w"), indent=1)
    print(len(configs), "configs")


if __name__ == "__main__":
    main()
