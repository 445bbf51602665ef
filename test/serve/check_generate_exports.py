#!/usr/bin/env python3
"""`hetplan serve` on the generation layouts packages ship (models/generate,
written by models/export_generate.py from both PyTorch exporters) against
onnxruntime's greedy loop on the same files (models/generate/generate.json):

* decode-step-only Qwen2 decoders (input_ids fixed at [batch, 1]): the model
  itself with continuous batching, and a serving plan of two-stage pipelines
  (--pin pp=2) whose prefill is priced token by token; the same weights fixed
  at [batch, 4] give the same tokens, prefill priced in runs of four;
* T5 and Whisper encoder-decoders in optimum's three-file layout: the folder,
  and the same files named with --encoder / --first-decoder.

Every request's tokens must equal onnxruntime's. Then the errors a user meets
on these files: one line, naming the file once, exit 1, no output file.

  check_generate_exports.py HETPLAN MODELS_DIR WORK_DIR
"""
import json, os, subprocess, sys

import serve_tokens  # test/serve/serve_tokens.py

hetplan, models, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
refs = json.load(open(os.path.join(models, "generate.json")))
failures = 0


def prompts(family):
    path = os.path.join(work, family + ".jsonl")
    with open(path, "w") as f:
        for r in refs["requests"][family]:
            f.write(json.dumps(r) + "\n")
    return path


def serve(label, args, ref, family):
    global failures
    ok, line = serve_tokens.serve(hetplan, label, args, prompts(family), ref, work)
    failures += not ok
    print(line)


def refused(label, args, want, family="qwen2-step"):
    """hetplan serve fails with one line holding `want`, naming the model once."""
    global failures
    out = os.path.join(work, "refused.jsonl")
    r = subprocess.run([hetplan, "serve", *args, "--prompts", prompts(family), "-o", out],
                       capture_output=True, text=True)
    err = r.stderr.strip()
    model = args[0]
    if r.returncode != 1 or want not in err or "\n" in err or os.path.exists(out) or err.count(model) > 1:
        failures += 1
        print(f"FAIL {label}: exit {r.returncode}, output file {os.path.exists(out)}: {err!r}")
    else:
        print(f"ok {label}: {err}")


for ex in ("ts", "dyn"):
    model = os.path.join(models, f"qwen2-step-{ex}.onnx")
    ref = refs["tokens"][f"qwen2-step-{ex}.onnx"]
    serve(f"qwen2-step-{ex} (input_ids [batch, 1]), up to 8 at once", [model], ref, "qwen2-step")
    serve(f"qwen2-step-{ex}, one at a time", [model, "--max-batch", "1"], ref, "qwen2-step")
    plan = os.path.join(work, f"qwen2-step-{ex}.plan")
    c = subprocess.run([hetplan, "compile", model, "--mode", "serve", "--cluster", "4xT4", "--rate", "5",
                        "--prompt-len", "16", "--output-len", "16", "--pin", "pp=2", "-o", plan],
                       capture_output=True, text=True)
    if c.returncode != 0 or "prefilled token by token" not in c.stderr:
        failures += 1
        print(f"FAIL qwen2-step-{ex}: compile --mode serve: {c.returncode}: {c.stderr.strip()}")
    else:
        serve(f"qwen2-step-{ex} serving plan, 2 replicas of 2 stages", [plan, "--model", model], ref,
              "qwen2-step")
    for fam in ("t5", "whisper"):
        d = os.path.join(models, f"{fam}-kv-{ex}")
        ref = refs["tokens"][f"{fam}-kv-{ex}"]
        serve(f"{fam}-kv-{ex} (optimum's folder)", [d], ref, f"{fam}-kv")
        serve(f"{fam}-kv-{ex} (--encoder, --first-decoder)",
              [os.path.join(d, "decoder_with_past_model.onnx"), "--encoder", os.path.join(d, "encoder_model.onnx"),
               "--first-decoder", os.path.join(d, "decoder_model.onnx")], ref, f"{fam}-kv")

# The same weights fixed at four tokens per run: prompts in runs of four
# (padded at the front, masked), decode steps padded to four; the tokens are
# the step decoder's, and its prefill is priced as a quarter of the runs.
chunk4 = os.path.join(models, "qwen2-chunk4-ts.onnx")
ref = refs["tokens"]["qwen2-step-ts.onnx"]
serve("qwen2-chunk4-ts (input_ids [batch, 4]), up to 8 at once", [chunk4], ref, "qwen2-step")
serve("qwen2-chunk4-ts, one at a time", [chunk4, "--max-batch", "1"], ref, "qwen2-step")


def ttft(model):
    plan = os.path.join(work, os.path.basename(model) + ".plan")
    c = subprocess.run([hetplan, "compile", model, "--mode", "serve", "--cluster", "4xT4", "--rate", "5",
                        "--prompt-len", "16", "--output-len", "16", "--pin", "pp=2", "-o", plan],
                       capture_output=True, text=True)
    line = [l for l in c.stdout.splitlines() + c.stderr.splitlines() if "TTFT p50" in l]
    return plan, c, float(line[0].split()[2]) if line else None


plan, c, t4 = ttft(chunk4)
_, _, t1 = ttft(os.path.join(models, "qwen2-step-ts.onnx"))
if c.returncode != 0 or "in runs of 4 tokens" not in c.stderr or not (t4 and t1 and 3 < t1 / t4 < 5):
    failures += 1
    print(f"FAIL qwen2-chunk4-ts: compile --mode serve: {c.returncode}, TTFT {t4} vs step {t1}: {c.stderr.strip()}")
else:
    print(f"ok qwen2-chunk4-ts: prefill priced in runs of 4 (TTFT {t4} ms, token by token {t1} ms)")
    serve("qwen2-chunk4-ts serving plan, 2 replicas of 2 stages", [plan, "--model", chunk4], ref, "qwen2-step")

t5 = os.path.join(models, "t5-kv-ts")
refused("a decoder alone", [os.path.join(t5, "decoder_with_past_model.onnx")], "hetplan serve --encoder", "t5-kv")
refused("cross caches without the first decoder",
        [os.path.join(t5, "decoder_with_past_model.onnx"), "--encoder", os.path.join(t5, "encoder_model.onnx")],
        "needs the first-step decoder", "t5-kv")
refused("encoder inputs to a decoder-only model", [os.path.join(models, "qwen2-step-ts.onnx")],
        "given to a decoder-only model", "t5-kv")
refused("an encoder-decoder without encoder inputs", [t5], "needs \"encoder\"", "qwen2-step")
refused("an encoder input the encoder lacks", [os.path.join(models, "whisper-kv-ts")],
        "the encoder has no input 'input_ids'", "t5-kv")
empty = os.path.join(work, "empty-folder")
os.makedirs(empty, exist_ok=True)
refused("a folder without optimum's files", [empty], "encoder_model.onnx is missing")
sys.exit(1 if failures else 0)
