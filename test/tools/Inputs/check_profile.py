#!/usr/bin/env python3
"""Checks `hetplan cluster FILE --json` of a file `hetplan profile` wrote:
the fields are there and sane (not exact numbers: they are measurements).

    check_profile.py CLUSTER.json RANKS NAME
"""
import json
import sys

c = json.load(open(sys.argv[1]))
ranks, name = int(sys.argv[2]), sys.argv[3]
problems = []


def want(cond, what):
    if not cond:
        problems.append(what)


types = c["device_types"]
want(name in types, "device type %s missing (have %s)" % (name, list(types)))
t = types.get(name, {})
want(t.get("kind") == "cpu", "kind is %r, not cpu" % t.get("kind"))
want(0 < t.get("peak_tflops", {}).get("fp32", 0) < 1000, "fp32 peak %r" % t.get("peak_tflops"))
want(0 < t.get("memory_bandwidth_gbs", 0) < 10000, "memory bandwidth %r" % t.get("memory_bandwidth_gbs"))
want(t.get("memory_gib", 0) > 0, "memory %r" % t.get("memory_gib"))
a = t.get("achieved", {})
for k, lo, hi in (("matrix", 0, 1), ("memory", 0, 1), ("kernel_us", 0, 1e4),
                  ("micro_batch_us", 0, 1e6), ("matrix_half_gflop", 0, 1e3)):
    v = a.get(k)
    want(v is not None and lo <= v <= hi and (k not in ("matrix", "memory") or v > 0),
         "achieved.%s = %r, not in [%g, %g]" % (k, v, lo, hi))
want("hetplan profile" in a.get("source", ""), "achieved.source %r" % a.get("source"))
devs = [d for n in c["nodes"] for d in n["devices"]]
want(len(devs) == ranks, "%d devices, not %d" % (len(devs), ranks))
want(all(d["type"] == name for d in devs), "device types %r" % [d["type"] for d in devs])
link = c["nodes"][0]["intra_node_link"]
want(link["bandwidth_gbs"] > 0 and link["latency_us"] >= 0, "link %r" % link)
if problems:
    print("\n".join(problems))
    sys.exit(1)
print("profile ok: %d x %s, fp32 %.3g TFLOP/s, matrix %.3g, memory %.3g, kernel %.3g us, link %.3g GB/s" % (
    ranks, name, t["peak_tflops"]["fp32"], a["matrix"], a["memory"], a["kernel_us"], link["bandwidth_gbs"]))
