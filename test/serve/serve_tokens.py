"""What the generation checks share: run `hetplan serve`, read its JSON lines,
and compare each request's tokens with onnxruntime's."""
import json, os, subprocess


def compare(label, got, ref):
    """(ok, the line to print): every request in `ref` has its tokens in `got`."""
    bad = [k for k in ref if got.get(k) != ref[k]]
    if bad:
        return False, (f"FAIL {label}: {len(bad)} of {len(ref)} requests differ from onnxruntime, first "
                       f"{bad[0]}: {got.get(bad[0])} vs {ref[bad[0]]}")
    return True, f"ok {label}: {len(ref)} requests, {sum(map(len, ref.values()))} tokens equal onnxruntime's"


def serve(hetplan, label, args, prompts, ref, work):
    """`hetplan serve ARGS --prompts PROMPTS -o FILE` against `ref`: (ok, line)."""
    out = os.path.join(work, "out.jsonl")
    if os.path.exists(out):
        os.remove(out)
    r = subprocess.run([hetplan, "serve", *args, "--prompts", prompts, "-o", out], capture_output=True, text=True)
    if r.returncode != 0:
        return False, f"FAIL {label}: exit {r.returncode}: {r.stderr.strip()}"
    with open(out) as f:
        got = {o["id"]: o["tokens"] for o in map(json.loads, f)}
    return compare(label, got, ref)
