#!/usr/bin/env python3
"""`hetplan serve` on models/ort-genai/gpt2-past.onnx (onnxruntime's GPT-2
export with a KV cache) against onnxruntime's own greedy loop
(models/ort-genai/greedy.json): every request's tokens must be equal, one
request at a time and continuously batched (requests of 1-23 prompt tokens
joining and leaving a batch of 3 or 16), to a file (input order) and to
stdout (finishing order). Also: a malformed line is refused with its line
number and no output file. A serving plan of the model (four replicas)
gives the same tokens, and a 2-stage inference plan of it matches
onnxruntime's outputs on one decode step (decode-step.npz).

  check_generate.py HETPLAN MODEL_DIR WORK_DIR
"""
import json, os, subprocess, sys

import numpy as np

import serve_tokens  # test/serve/serve_tokens.py

hetplan, models, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
model = os.path.join(models, "gpt2-past.onnx")
prompts = os.path.join(models, "prompts.jsonl")
ref = json.load(open(os.path.join(models, "greedy.json")))["tokens"]
failures = 0


def check(label, lines):
    global failures
    ok, line = serve_tokens.compare(label, {l["id"]: l["tokens"] for l in lines}, ref)
    failures += not ok
    print(line)


for batch in (1, 3, 16):
    out = os.path.join(work, f"out-{batch}.jsonl")
    subprocess.run([hetplan, "serve", model, "--prompts", prompts, "-o", out, "--max-batch", str(batch)],
                   check=True)
    lines = [json.loads(l) for l in open(out)]
    if [l["index"] for l in lines] != list(range(len(ref))):
        failures += 1
        print(f"FAIL max-batch {batch}: the file is not in input order")
    check(f"max-batch {batch} to a file", lines)

# A serving plan: its four replicas (one per device) on CPU threads.
splan = os.path.join(work, "serve.plan")
subprocess.run([hetplan, "compile", model, "--mode", "serve", "--cluster", "2xT4,2xL4", "--rate", "5",
                "--prompt-len", "16", "--output-len", "16", "-o", splan], check=True, capture_output=True)
out = os.path.join(work, "out-plan.jsonl")
r = subprocess.run([hetplan, "serve", splan, "--prompts", prompts, "-o", out], capture_output=True, text=True,
                   check=True)
if r.stderr.count("hetplan serve: replica") != 4:
    failures += 1
    print("FAIL: the serving plan's four replicas are not listed:", r.stderr)
check("serving plan, 4 replicas", [json.loads(l) for l in open(out)])

# A pipeline across device types: a T4 and an L4 (cluster-file types) so
# small that neither holds the model alone (context 512 MiB + ~200 KiB of
# 570 MiB, one prompt per prefill): the planner puts the layers over both,
# and the plan's two stages, on two threads, give onnxruntime's tokens.
tiny = os.path.join(work, "tiny-mixed.yaml")
with open(tiny, "w") as f:
    f.write("devices:\n  - {name: T4, memory_gib: 0.5559}\n  - {name: L4, memory_gib: 0.5559}\n"
            "nodes:\n  - devices: [1xT4]\n  - devices: [1xL4]\n")
mplan = os.path.join(work, "mixed.plan")
r = subprocess.run([hetplan, "compile", model, "--mode", "serve", "--cluster", tiny, "--rate", "1",
                    "--prompt-len", "16", "--output-len", "16", "--max-batched-tokens", "16", "-o", mplan],
                   capture_output=True, text=True)
if r.returncode != 0 or "one pipeline across the types (T4+L4)" not in r.stderr:
    failures += 1
    print("FAIL: the tiny T4 + L4 cluster did not get a pipeline across types:", r.stdout, r.stderr)
else:
    out = os.path.join(work, "out-mixed.jsonl")
    r = subprocess.run([hetplan, "serve", mplan, "--prompts", prompts, "-o", out], capture_output=True,
                       text=True, check=True)
    if "T4+L4" not in r.stderr:
        failures += 1
        print("FAIL: the mixed replica is not listed:", r.stderr)
    check("serving plan, one replica pipelined over a T4 and an L4", [json.loads(l) for l in open(out)])

r = subprocess.run([hetplan, "serve", model, "--max-batch", "4"], input=open(prompts).read(),
                   capture_output=True, text=True, check=True)
check("stdin to stdout, max-batch 4", [json.loads(l) for l in r.stdout.splitlines()])
if "tokens/s" not in r.stderr:
    failures += 1
    print("FAIL: no summary line on stderr:", r.stderr)

# The same export as a 2-stage inference plan: one decode step (a cache of
# 16, a masked position) against onnxruntime's outputs (decode-step.npz).
import numpy as np

import serve_tokens  # test/serve/serve_tokens.py
step = np.load(os.path.join(models, "decode-step.npz"))
iplan = os.path.join(work, "decode.plan")
subprocess.run([hetplan, "compile", model, "--cluster", "2xT4", "--mode", "infer", "--batch", "4",
                "--dim", "seq_len=1,past_seq_len=16,total_seq_len=17", "--pin", "pp=2,dp=1,mb=1",
                "-o", iplan], check=True, capture_output=True)
args = [hetplan, "run", iplan, "--quiet", "--output", os.path.join(work, "decode-out")]
for k in step.files:
    if k.startswith("in:"):
        path = os.path.join(work, k[3:] + ".npy")
        np.save(path, step[k])
        args += ["--input", f"{k[3:]}={path}"]
subprocess.run(args, check=True)
worst = max(float(np.abs(np.load(os.path.join(work, "decode-out", k[4:] + ".npy")) - step[k]).max())
            for k in step.files if k.startswith("out:"))
if worst > 1e-4:
    failures += 1
    print(f"FAIL 2-stage plan: max |hetplan - onnxruntime| = {worst}")
else:
    print(f"ok 2-stage inference plan, one decode step: max |hetplan - onnxruntime| = {worst:.2e}")

bad = os.path.join(work, "bad.jsonl")
with open(bad, "w") as f:
    f.write('{"prompt": [1, 2]}\n{"prompt": []}\n')
out = os.path.join(work, "bad-out.jsonl")
r = subprocess.run([hetplan, "serve", model, "--prompts", bad, "-o", out], capture_output=True, text=True)
if r.returncode == 0 or "bad.jsonl:2:" not in r.stderr or os.path.exists(out):
    failures += 1
    print("FAIL: a malformed line must fail naming it, with no output:", r.returncode, r.stderr)
else:
    print("ok malformed line:", r.stderr.strip())
sys.exit(1 if failures else 0)
