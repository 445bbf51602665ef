#!/usr/bin/python3
"""Extracts AMP's published measurements (github.com/DachengLi1/AMP) into
bench/published/amp_gpt2.json. Run once against a checkout of that repository:

    /usr/bin/python3 bench/published/extract_amp.py AMP_CHECKOUT

Reads src/results/{het_cluster,homogeneous}_results.txt (measured step times,
"r_cost", of DeepSpeed runs; inf = the run failed, out of memory) and
src/known_cost/gpt2_{P3,G4}_1.npy (measured forward time per layer of one
sample on a V100 of a p3.8xlarge and a T4 of a g4dn.12xlarge)."""
import ast, json, re, subprocess, sys, io

import numpy as np

COMMIT_URL = "https://github.com/DachengLi1/AMP/blob/{commit}/{path}"


def main():
    repo = sys.argv[1]
    git = lambda *a: subprocess.run(["git", "-C", repo, *a], check=True,
                                     capture_output=True).stdout
    commit = git("rev-parse", "HEAD").decode().strip()
    out = {"source": "AMP (D. Li et al., NeurIPS 2022), github.com/DachengLi1/AMP",
           "commit": commit, "model": {"family": "gpt2", "layers": 24, "hidden": 1024,
                                       "heads": 16, "vocab": 52256, "seq": 1024},
           "global_batch": 32, "dtype": "fp16", "trials": [], "layer_profiles": {}}
    pat = re.compile(r"Simulating result: None, (\[[0-9, ]+\]), (\d+), \{'mp_deg': tensor\(\[(\d+)\.\]\), "
                     r"'dp_deg': tensor\(\[(\d+)\.\]\), 'pp_deg': tensor\(\[(\d+)\.\]\)\}, "
                     r"with p_cost: tensor\(\[([0-9.]+)\]\), r_cost: ([0-9.]+|inf)")
    for cluster, path in [("amp-het", "src/results/het_cluster_results.txt"),
                          ("amp-t4", "src/results/homogeneous_results.txt")]:
        text = git("show", f"HEAD:{path}").decode()
        for n, m in enumerate(pat.finditer(text)):
            part, mbs, mp, dp, pp, pcost, rcost = m.groups()
            out["trials"].append({
                "cluster": cluster, "trial": n, "partition": ast.literal_eval(part),
                "micro_batch_size": int(mbs), "mp": int(mp), "dp": int(dp), "pp": int(pp),
                "amp_predicted_s": float(pcost),
                "measured_s": None if rcost == "inf" else float(rcost),
                "source": COMMIT_URL.format(commit=commit, path=path)})
    for dev, name in [("V100-SXM2-16GB", "P3"), ("T4", "G4")]:
        for mp in (1, 2, 4):
            path = f"src/known_cost/gpt2_{name}_{mp}.npy"
            a = np.load(io.BytesIO(git("show", f"HEAD:{path}")))
            out["layer_profiles"][f"{dev}/mp{mp}"] = {
                "forward_s_per_sample": [float(x) for x in a],
                "source": COMMIT_URL.format(commit=commit, path=path)}
    json.dump(out, open(sys.argv[2] if len(sys.argv) > 2 else
                        "bench/published/amp_gpt2.json", "w"), indent=1)
    print(len(out["trials"]), "trials")


if __name__ == "__main__":
    main()
