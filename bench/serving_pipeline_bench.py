#!/usr/bin/env python3
"""Measured tokens/s of a serving plan whose replica is a pipeline of
stages, with its stages overlapping (one group of requests in flight per
stage, each stage on its own thread: hetplan serve's default) against the
same plan without overlap (--pipeline-groups 1: every stage waits for the one
before), in the same run (issue 12: "pipelined across stages").

The model is models/ort-genai/gpt2-past.onnx (onnxruntime's GPT-2 export
with a KV cache, 5 blocks); the plan is `hetplan compile --mode serve
--pin pp=N` on N T4s: one replica of N stages, run by the CPU runtime. Each
stage's kernels run on one thread (OMP_NUM_THREADS=1), so the overlap can
use up to N cores; the baseline without overlap is also run with N kernel
threads, the cores the overlap uses; the ratio is against the faster of
the two. Every request's tokens are checked
equal to the one-rank run before a time is reported.

  python3 bench/serving_pipeline_bench.py [--hetplan build/bin/hetplan]
      [--stages 2] [--requests 128] [--prompt 16] [--new 64] [--batch 8]
      [--repeat 5]
"""
import argparse, json, os, random, re, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.join(HERE, "..", "models", "ort-genai", "gpt2-past.onnx")


def serve(hetplan, target, prompts, out, threads, extra):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_WAIT_POLICY="PASSIVE")
    r = subprocess.run([hetplan, "serve", target, "--prompts", prompts, "-o", out] + extra,
                       check=True, env=env, stderr=subprocess.PIPE, text=True)
    # "served N requests, T tokens in S s: ..." (generation only, not loading)
    m = re.search(r"tokens in ([0-9.]+) s", r.stderr)
    seconds = float(m.group(1))
    with open(out) as f:
        return seconds, [json.loads(line)["tokens"] for line in f]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hetplan", default=os.path.join(HERE, "..", "build", "bin", "hetplan"))
    ap.add_argument("--stages", type=int, default=2)
    ap.add_argument("--requests", type=int, default=128)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="hetplan-serving-pipeline-")
    rng = random.Random(0)
    prompts = os.path.join(work, "prompts.jsonl")
    with open(prompts, "w") as f:
        for _ in range(a.requests):
            f.write(json.dumps({"prompt": [rng.randrange(1000) for _ in range(a.prompt)],
                                "max_new_tokens": a.new}) + "\n")
    plan = os.path.join(work, "serve.plan")
    subprocess.run([a.hetplan, "compile", MODEL, "--mode", "serve", "--cluster", f"{a.stages}xT4",
                    "--rate", "5", "--prompt-len", str(a.prompt), "--output-len", str(a.new),
                    "--pin", f"pp={a.stages}", "-o", plan], check=True, stdout=subprocess.DEVNULL)
    out = os.path.join(work, "out.jsonl")
    batch = ["--max-batch", str(a.batch)]
    _, ref = serve(a.hetplan, MODEL, prompts, out, 1, batch)  # one rank
    runs = [
        (f"{a.stages} stages, no overlap (--pipeline-groups 1), 1 kernel thread", 1, ["--pipeline-groups", "1"]),
        (f"{a.stages} stages, no overlap (--pipeline-groups 1), {a.stages} kernel threads", a.stages,
         ["--pipeline-groups", "1"]),
        (f"{a.stages} stages overlapping ({a.stages} groups in flight), 1 kernel thread per stage", 1, []),
    ]
    rows = []
    for name, threads, extra in runs:
        best, equal = float("inf"), True
        for _ in range(a.repeat):
            t, got = serve(a.hetplan, plan, prompts, out, threads, batch + extra)
            best, equal = min(best, t), equal and got == ref
        rows.append((name, best, equal))
    tokens = a.requests * a.new
    print(f"{a.requests} requests x {a.prompt} prompt + {a.new} new tokens, max batch {a.batch} per replica, "
          f"best of {a.repeat}, {os.cpu_count()} cores\n")
    print("| runner | seconds | tokens/s | vs the faster no-overlap run | tokens equal one rank |")
    print("|---|---:|---:|---:|---|")
    base = min(rows[0][1], rows[1][1])
    for name, t, equal in rows:
        print(f"| {name} | {t:.3f} | {tokens / t:,.0f} | {base / t:.2f}x | {'yes' if equal else 'NO'} |")
    return 0 if all(r[2] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
