#!/usr/bin/env python3
"""Writes vidur-ops-llama2.csv from microsoft/vidur's measured per-operator
profiles: the four GEMMs of a Llama-2 layer (attn_pre_proj = QKV,
attn_post_proj = O, mlp_up_proj = gate+up, mlp_down_proj = down) and its
elementwise kernels (the two RMSNorms, rotary embedding, SiLU-and-mul, the
residual add), median ms,
per GPU (a100, h100), model (Llama-2-7b, Llama-2-70b), tensor-parallel degree
and token count, as vidur's profiler measured them on one shard (fp16).

  python3 extract_vidur.py VIDUR_GIT_DIR [COMMIT] > vidur-ops-llama2.csv
"""
import csv, io, subprocess, sys

git, commit = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "7d47513363ec447a741ac5e47241580b47724fbf"
OPS = ["attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj",
       "input_layernorm", "post_attention_layernorm", "attn_rope", "mlp_act", "add"]
w = csv.writer(sys.stdout, lineterminator="\n")
w.writerow(["gpu", "model", "n_head", "n_kv_head", "n_embd", "n_expanded_embd", "tp", "num_tokens"] +
           [o + "_median_ms" for o in OPS])
for gpu in ("a100", "h100"):
    for model in ("Llama-2-7b-hf", "Llama-2-70b-hf"):
        text = subprocess.run(["git", "--git-dir", git, "show",
                               f"{commit}:data/profiling/compute/{gpu}/meta-llama/{model}/mlp.csv"],
                              check=True, capture_output=True, text=True).stdout
        rows = sorted(csv.DictReader(io.StringIO(text)),
                      key=lambda r: (int(r["num_tensor_parallel_workers"]), int(r["num_tokens"])))
        for r in rows:
            w.writerow([gpu, model, r["n_head"], r["n_kv_head"], r["n_embd"], r["n_expanded_embd"],
                        r["num_tensor_parallel_workers"], r["num_tokens"]] +
                       [r[f"time_stats.{o}.median"] for o in OPS])
