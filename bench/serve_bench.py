#!/usr/bin/python3
"""Serving plans against homogeneous baselines: SIMULATED throughput and cost.

    /usr/bin/python3 bench/serve_bench.py [--hetplan build/bin/hetplan] [--out DIR]
        [--markdown]

Everything here is predicted by `hetplan compile --mode serve` (roofline costs
and a discrete-event simulation of Poisson arrivals, docs/serving.md); nothing
runs on a GPU. Two questions, on the cluster mixes two papers published:

1. Mélange (Griggs et al., arXiv 2404.14527: Llama-2 models on L4, A10G,
   A100 80GB and H100): the cheapest devices meeting a request rate within a
   TPOT target, picked from up to 8 of each type (`--pick-devices`), against
   the cheapest plan restricted to one type (the homogeneous baselines).
2. Helix (Mei et al., ASPLOS'25, arXiv 2406.01566, artifact
   `artifact_evaluation/ae_readme.md` section 6.3: 24 single-GPU machines,
   4 A100, 8 L4, 12 T4, serving LLaMA-1 30B and LLaMA-2 70B): the capacity
   (requests/s within the TPOT target) of the whole mixed cluster against a
   homogeneous cluster of each type costing about the same per hour.

Models are generated with models/gen_transformer.py (weights absent: planning
needs shapes only). Prices are the catalog's (passes/cluster/device_catalog.yaml).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRICES = {"H100": 6.88, "A100-80G": 3.4309, "A10G": 1.006, "L4": 0.8048, "T4": 0.526}

# LLaMA-1 30B (Touvron et al. 2023, table 2) and Llama-2 70B (grouped-query
# attention, 8 KV heads): models/gen_transformer.py's configs.
MODELS = {
    "llama2-7b": ["--family", "llama", "--config", "llama2-7b"],
    "llama-30b": ["--family", "llama", "--config", "llama-30b"],
    "llama2-70b": ["--family", "llama", "--config", "llama2-70b"],
}


def gen(name, folder):
    path = os.path.join(folder, name + ".onnx")
    if not os.path.exists(path):
        subprocess.run([sys.executable, os.path.join(ROOT, "models", "gen_transformer.py")] +
                       MODELS[name] + ["--weights", "none", "--no-check", "-o", path],
                       check=True, stdout=subprocess.DEVNULL)
    return path


def compile_serve(hetplan, model, cluster, rate, prompt, output, tpot_ms, pick):
    cmd = [hetplan, "compile", model, "--allow-missing-weights", "--mode", "serve",
           "--cluster", cluster, "--rate", str(rate), "--prompt-len", str(prompt),
           "--output-len", str(output), "--tpot-ms", str(tpot_ms), "--json"]
    if pick:
        cmd.append("--pick-devices")
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return {"error": r.stderr.strip().split("error: ")[-1]}
    d = json.loads(r.stdout)
    # Above capacity hetplan plans at capacity (with a warning): that plan
    # does not serve the rate asked.
    if d.get("requested_rate_rps", 0) > 0:
        return {"error": "rate above capacity (%.2f req/s)" % d["capacity_rps"]}
    return d


def mix(d):
    counts = {}
    for r in d["replicas"]:
        key = "%s tp%d pp%d" % (r["device_type"], r["tensor_parallel"], len(r["stages"]))
        counts[key] = counts.get(key, 0) + 1
    return ", ".join("%dx(%s)" % (n, k) for k, n in sorted(counts.items()))


def melange(hetplan, folder, rows):
    model = gen("llama2-7b", folder)
    types = ["L4", "A10G", "A100-80G", "H100"]
    for prompt, output in [(512, 128), (2048, 256)]:
        for tpot in [40, 120]:
            for rate in [1, 4, 16]:
                het = compile_serve(hetplan, model, ",".join("8x%s?" % t for t in types),
                                    rate, prompt, output, tpot, True)
                base = {}
                for t in types:
                    base[t] = compile_serve(hetplan, model, "8x%s?" % t, rate, prompt, output,
                                            tpot, True)
                rows.append(("melange", prompt, output, tpot, rate, het, base))


def helix(hetplan, folder, rows):
    # Homogeneous clusters of about the Helix cluster's price per hour.
    mixed = "4x1xA100-80G,8x1xL4,12x1xT4"
    price = 4 * PRICES["A100-80G"] + 8 * PRICES["L4"] + 12 * PRICES["T4"]
    same = {t: max(1, int(round(price / PRICES[t]))) for t in ["A100-80G", "L4", "T4"]}
    for name in ["llama-30b", "llama2-70b"]:
        model = gen(name, folder)
        for tpot in [300, 600]:
            prompt, output = 512, 128
            het = compile_serve(hetplan, model, mixed, 0.01, prompt, output, tpot, False)
            base = {}
            for t, n in same.items():
                base["%dx%s" % (n, t)] = compile_serve(hetplan, model, "%dx1x%s" % (n, t), 0.01,
                                                       prompt, output, tpot, False)
            rows.append(("helix", name, prompt, output, tpot, het, base, price))


def fmt_cost(d):
    if "error" in d:
        return "infeasible"
    return "$%.2f/h ($%.3f/Mtok)" % (d["usd_per_hour"], d["usd_per_million_tokens"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hetplan", default=os.path.join(ROOT, "build", "bin", "hetplan"))
    ap.add_argument("--out", help="folder for the generated models (default: a temporary one)")
    args = ap.parse_args()
    folder = args.out or tempfile.mkdtemp(prefix="serve_bench.")
    os.makedirs(folder, exist_ok=True)
    rows = []
    melange(args.hetplan, folder, rows)
    helix(args.hetplan, folder, rows)

    print("### Mélange's GPU set: cheapest devices for a rate within a TPOT target "
          "(simulated)\n")
    print("Llama-2 7B, fp16; up to 8 of each type; TPOT target at p90. hetplan picks from "
          "all four types; each baseline from one type only.\n")
    print("| prompt+output | TPOT target | rate (req/s) | hetplan: devices | hetplan $/h "
          "| TTFT / TPOT p90 (ms) | L4 only | A10G only | A100 only | H100 only | saving vs "
          "best single type |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        if row[0] != "melange":
            continue
        _, prompt, output, tpot, rate, het, base = row
        feasible = [b["usd_per_hour"] for b in base.values() if "error" not in b]
        best = min(feasible) if feasible else None
        if "error" in het:
            print("| %d+%d | %d ms | %g | infeasible: %s | | | %s |" %
                  (prompt, output, tpot, rate, het["error"][:80],
                   " | ".join(fmt_cost(base[t]) for t in base)))
            continue
        saving = "%.0f%%" % (100 * (1 - het["usd_per_hour"] / best)) if best else "n/a"
        print("| %d+%d | %d ms | %g | %s | $%.2f | %.0f / %.1f | %s | %s |" %
              (prompt, output, tpot, rate, mix(het), het["usd_per_hour"],
               1e3 * het["ttft_s"]["p90"], 1e3 * het["tpot_s"]["p90"],
               " | ".join(("$%.2f" % base[t]["usd_per_hour"]) if "error" not in base[t]
                          else "infeasible" for t in base), saving))

    print("\n### Helix's cluster: capacity of the mixed cluster against homogeneous "
          "clusters of the same price (simulated)\n")
    print("24 single-GPU machines (4 A100 80GB, 8 L4, 12 T4) as in Helix's section 6.3; "
          "prompt 512, output 128 tokens; capacity = requests/s the replicas sustain within "
          "the TPOT target.\n")
    print("| model | TPOT target | cluster | $/h | replicas | capacity (req/s) | req/s per $/h |")
    print("|---|---:|---|---:|---|---:|---:|")
    for row in rows:
        if row[0] != "helix":
            continue
        _, name, prompt, output, tpot, het, base, price = row
        for label, d in [("4 A100 + 8 L4 + 12 T4 (Helix)", het)] + list(base.items()):
            if "error" in d:
                print("| %s | %d ms | %s | | infeasible: %s | | |" %
                      (name, tpot, label, d["error"][:100]))
                continue
            print("| %s | %d ms | %s | $%.2f | %s | %.2f | %.3f |" %
                  (name, tpot, label, d["usd_per_hour"], mix(d), d["capacity_rps"],
                   d["capacity_rps"] / d["usd_per_hour"]))


if __name__ == "__main__":
    main()
