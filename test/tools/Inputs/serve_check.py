"""Checks on `hetplan compile --mode serve --json` output (stdin) for lit.

    serve_check.py shares RATE   the replicas' shares sum to 1 and rates to RATE
    serve_check.py memory        every replica's stages fit in 90% of memory;
                                 one limited by memory could not take one more
                                 request (its KV cache at prompt + output tokens)
    serve_check.py types         prints the replicas' device types, sorted
    serve_check.py cost          prints $/h, rounded to cents
    serve_check.py mixed         the one replica's stage types, and which holds most layers
    serve_check.py tokens OUT.jsonl GREEDY.json  hetplan serve's tokens against a reference
    serve_check.py compare-ttft A.json B.json    p99 TTFT of B over A's
    serve_check.py write-trace JSONL CSV N RATE  a seeded trace of N requests
                                                 at about RATE req/s, both formats
"""
import json
import sys

what = sys.argv[1]
if what == "tokens":
    got = {json.loads(l)["id"]: json.loads(l)["tokens"] for l in open(sys.argv[2]) if l.strip()}
    ref = json.load(open(sys.argv[3]))["tokens"]
    same = sum(got.get(k) == v for k, v in ref.items())
    print(f"{same} of {len(ref)} requests equal onnxruntime's tokens")
    sys.exit(0)
if what == "compare-ttft":
    a, b = (json.load(open(f)) for f in sys.argv[2:4])
    ratio = b["ttft_s"]["p99"] / a["ttft_s"]["p99"]
    print(f"p99 TTFT second/first {'> 1.5' if ratio > 1.5 else '<= 1.5'} ({ratio:.2f})")
    sys.exit(0)
if what == "write-trace":
    import random
    jsonl, csv, n, rate = sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
    rng = random.Random(7)
    t, rows = 0.0, []
    for i in range(n):
        rows.append((t, rng.randint(8, 120), rng.randint(2, 40)))
        t += rng.expovariate(rate)
    # The trace's own rate is (n - 1) / span: scale the span to hit RATE.
    span = rows[-1][0]
    rows = [(a * (n - 1) / rate / span, p, o) for a, p, o in rows]
    with open(jsonl, "w") as f:
        for a, p, o in rows:
            f.write(json.dumps({"arrival_s": a, "prompt_tokens": p, "output_tokens": o}) + "\n")
    with open(csv, "w") as f:
        f.write("request,arrival_s,prompt_tokens,output_tokens\n")
        for i, (a, p, o) in enumerate(rows):
            f.write(f"{i},{a!r},{p},{o}\n")
    sys.exit(0)
d = json.load(sys.stdin)
reps = d["replicas"]
if what == "shares":
    rate = float(sys.argv[2])
    shares = sum(r["share"] for r in reps)
    rates = sum(r["rate_rps"] for r in reps)
    assert abs(shares - 1) < 1e-9, shares
    assert abs(rates - rate) < 1e-9 * rate, rates
    assert all(r["rate_rps"] <= r["capacity_rps"] for r in reps)
    print("shares ok", len(reps))
elif what == "mixed":
    (r,) = reps
    types = [st["device_type"] for st in r["stages"]]
    layers = [st["last_layer"] - st["first_layer"] + 1 for st in r["stages"]]
    most = types[layers.index(max(layers))]
    print(f"mixed {r['device_type']}: stages {' '.join(types)}, the {most.split('-')[0]} holds the most layers")
elif what == "memory":
    tokens = d["prompt_tokens"] + d["output_tokens"]
    limited = 0
    for r in reps:
        for st in r["stages"]:
            limit = 0.9 * st["capacity_bytes"]
            assert st["peak_bytes"] <= limit + 1, (st["peak_bytes"], limit)
            if r["limited_by"] == "memory":
                per_request = st["kv_cache_bytes"] / r["max_batch"]
                assert abs(per_request / tokens * r["max_batch"] * tokens - st["kv_cache_bytes"]) < 1e3
                assert st["peak_bytes"] + per_request > limit - 1, "one more request would fit"
                limited += 1
    print("memory ok", limited, "stage(s) bounded by memory")
elif what == "types":
    print(" ".join(sorted(f'{r["device_type"]}/tp{r["tensor_parallel"]}/pp{len(r["stages"])}'
                          for r in reps)))
elif what == "cost":
    print("cost %.2f" % d["usd_per_hour"])
else:
    sys.exit("unknown check " + what)
