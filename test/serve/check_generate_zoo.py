#!/usr/bin/env python3
"""`hetplan serve` on PyTorch's exports of a LLaMA with a KV cache
(models/zoo/llama-kv-ts: torchscript exporter, llama-kv-dyn: dynamo
exporter; standard ONNX ops, past.N.key -> present.N.key) against
onnxruntime's greedy loop (models/zoo/llama-kv-generate.json, written by
models/zoo/make_generate_refs.py): every request's tokens must be equal,
from the model, and from a serving plan whose replicas are two-stage
pipelines (--pin pp=2), with the stages overlapping (two request groups in
flight) and without (--pipeline-groups 1).

  check_generate_zoo.py HETPLAN ZOO_DIR WORK_DIR
"""
import json, os, subprocess, sys

import serve_tokens  # test/serve/serve_tokens.py

hetplan, zoo, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
refs = json.load(open(os.path.join(zoo, "llama-kv-generate.json")))
prompts = os.path.join(work, "prompts.jsonl")
with open(prompts, "w") as f:
    for r in refs["requests"]:
        f.write(json.dumps(r) + "\n")
failures = 0


def serve(label, target, ref, *extra):
    global failures
    ok, line = serve_tokens.serve(hetplan, label, [target, *extra], prompts, ref, work)
    failures += not ok
    print(line)


for name, ref in refs["tokens"].items():
    model = os.path.join(zoo, name + ".onnx")
    serve(f"{name} model", model, ref)
    plan = os.path.join(work, name + ".plan")
    c = subprocess.run([hetplan, "compile", model, "--mode", "serve", "--cluster", "4xT4", "--rate", "5",
                        "--prompt-len", "16", "--output-len", "16", "--pin", "pp=2", "-o", plan],
                       capture_output=True, text=True)
    if c.returncode != 0:
        failures += 1
        print(f"FAIL {name}: compile --mode serve --pin pp=2: {c.stderr.strip()}")
        continue
    serve(f"{name} serving plan, 2 replicas of 2 stages, overlapping", plan, ref, "--model", model)
    serve(f"{name} serving plan, 2 replicas of 2 stages, no overlap", plan, ref, "--model", model,
          "--pipeline-groups", "1")
sys.exit(1 if failures else 0)
