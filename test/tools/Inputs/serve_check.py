"""Checks on `hetplan compile --mode serve --json` output (stdin) for lit.

    serve_check.py shares RATE   the replicas' shares sum to 1 and rates to RATE
    serve_check.py memory        every replica's stages fit in 90% of memory;
                                 one limited by memory could not take one more
                                 request (its KV cache at prompt + output tokens)
    serve_check.py types         prints the replicas' device types, sorted
    serve_check.py cost          prints $/h, rounded to cents
"""
import json
import sys

d = json.load(sys.stdin)
what = sys.argv[1]
reps = d["replicas"]
if what == "shares":
    rate = float(sys.argv[2])
    shares = sum(r["share"] for r in reps)
    rates = sum(r["rate_rps"] for r in reps)
    assert abs(shares - 1) < 1e-9, shares
    assert abs(rates - rate) < 1e-9 * rate, rates
    assert all(r["rate_rps"] <= r["capacity_rps"] for r in reps)
    print("shares ok", len(reps))
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
