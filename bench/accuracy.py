#!/usr/bin/python3
"""Predicted vs published measured step times and fit/out-of-memory outcomes
(docs/cost-model.md, "Accuracy against published measurements").

    /usr/bin/python3 bench/accuracy.py [--hetplan build/bin/hetplan] [--fit-only]

For every measured configuration in bench/published/amp_gpt2.json it writes
the exact layout the published run used (stages, ranks, layer ranges, tensor
parallelism, micro-batches, even shares) into a --layout file, prices it with
`hetplan compile --layout` twice (the calibrated model with gradients
all-reduced in fp32 as the measured runs did, and --uncalibrated: the plain
roofline defaults with gradients in the run format, i.e. the cost model before the
calibration) and prints predicted vs measured, the error, the median and worst
|error| and the Spearman rank correlation over each cluster's layouts. Runs
that failed in the publication (out of memory) are listed with what hetplan
predicts for them, and a last table compares hetplan's memory prediction
(fits, or out of memory, with the peak and capacity of the fullest device)
with the published outcome of every run.

Then the other published sources (bench/published/<source>.json with
"configs", each marked "role": fit or check; bench/published/SPLIT.md):
every run priced at its exact layout the same two ways, the error per source
and per role (AMP's amp-t4 is fit, amp-het check), OOM right/wrong, MFU
against the published MFU, and, for every group of measured layouts (same
cluster, model and global batch), whether hetplan's own pick (`hetplan
compile` without --layout) is the measured best ("Fit and check sources").

    --sources a,b     only these source files (e.g. megatron_sc21)
    --published DIR   read the source files from DIR
    --quick           parse every source file, price its smallest config
                      (test/tools/published-sources.test)
    --details         also print every config's row
    --timeout S       seconds per config before it is reported as not priced
    --jobs N          hetplan calls at once
"""
import argparse, json, os, statistics, subprocess, sys, tempfile

import accuracy_sources as sources

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Which step times were used for fitting (bench/fit_overheads.py fits the
# host terms kernel_us and micro_batch_us of the catalog's deepspeed-2021
# stack on amp-t4) and which are
# only checked against.
ROLE = {"amp-t4": "fit set (host terms)", "amp-het": "check set"}


def amp_layer(k, L):
    """AMP/DeepSpeed's 30 layer slots of a GPT-2 (embedding, noop, L
    transformer layers, noop, noop, LM head, noop) -> hetplan's layers
    (stem, h.0 .. h.{L-1}, head)."""
    if k < 2:
        return 0
    if k < 2 + L:
        return k - 1
    return L + 1


def amp_layout(t, L, gbs):
    mp, dp, pp, mbs = t["mp"], t["dp"], t["pp"], t["micro_batch_size"]
    part = t["partition"]
    stages = []
    for j in range(pp):
        # DeepSpeed's rank order: rank = pp_index*dp*mp + dp_index*mp + mp_index
        workers = [[j * dp * mp + d * mp + k for k in range(mp)] for d in range(dp)]
        stages.append({"workers": workers, "last_layer": amp_layer(part[j + 1] - 1, L)})
    return {"micro_batches": gbs // (dp * mbs), "tensor_parallel": mp, "shares": "even",
            "stages": stages}


def price(hetplan, model, cluster, layouts, extra, batch, seq, dtype):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"layouts": layouts}, f)
        path = f.name
    try:
        # Exactly what the runs did: no recomputation, no ZeRO, no offload.
        cmd = [hetplan, "compile", model, "--cluster", cluster, "--batch", str(batch),
               "--seq", str(seq), "--dtype", dtype, "--allow-missing-weights", "--quiet",
               "--recompute", "never", "--zero", "0", "--offload", "never",
               "--layout", path] + extra
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    finally:
        os.unlink(path)
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def amp_model(work, m):
    """AMP's GPT-2 (bench/published/amp_gpt2.json "model") with Megatron-LM's
    dropout, shapes only; generated once into `work`."""
    os.makedirs(work, exist_ok=True)
    model = os.path.join(work, "amp-gpt2-dropout.onnx")
    if not os.path.exists(model):
        subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "models/gen_transformer.py"),
                        "--family", m["family"], "--config", "gpt2-medium",
                        "--layers", str(m["layers"]), "--hidden", str(m["hidden"]),
                        "--heads", str(m["heads"]), "--vocab", str(m["vocab"]),
                        "--seq-max", str(m["seq"]), "--dropout", "0.1", "--weights", "none",
                        "--no-check", "-o", model], check=True, capture_output=True)
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hetplan", default=os.path.join(ROOT, "build/bin/hetplan"))
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "hetplan-accuracy"))
    ap.add_argument("--fit-only", action="store_true",
                    help="print only the fit/OOM tables (test/tools/fit-oom.test)")
    ap.add_argument("--sources", help="comma-separated source names (bench/published/NAME.json)")
    ap.add_argument("--published", help="folder of source files (default bench/published)")
    ap.add_argument("--quick", action="store_true",
                    help="check that every source parses and its smallest config prices")
    ap.add_argument("--details", action="store_true", help="print every config's row")
    ap.add_argument("--no-search", action="store_true", help="skip hetplan's own picks")
    ap.add_argument("--no-amp", action="store_true", help="leave AMP's runs out")
    ap.add_argument("--timeout", type=float, default=120,
                    help="seconds per config (default 120)")
    ap.add_argument("--jobs", type=int, default=1, help="hetplan calls at once")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    if args.quick:
        return quick(args)
    if args.no_amp:
        return published(args, [])

    data = json.load(open(os.path.join(ROOT, "bench/published/amp_gpt2.json")))
    m = data["model"]
    # The runs trained with Megatron-LM's default dropout (hidden and
    # attention 0.1): the graph carries the Dropout nodes whose masks and
    # outputs the backward pass keeps.
    model = amp_model(args.work, m)
    rows = []
    for cluster in sorted({t["cluster"] for t in data["trials"]}):
        trials = [t for t in data["trials"] if t["cluster"] == cluster]
        layouts = [amp_layout(t, m["layers"], data["global_batch"]) for t in trials]
        cfile = os.path.join(ROOT, "bench/clusters", cluster + ".yaml")
        common = (data["global_batch"], m["seq"], data["dtype"])
        # The measured runs' software stack: PyTorch 1.7 + DeepSpeed + Megatron-LM
        # 1.1.5 (the catalog's deepspeed-2021: the fitted host figures, attention
        # unfused), also for the uncalibrated baseline (its host figures dropped).
        stack = ["--stack", "deepspeed-2021"]
        after = price(args.hetplan, model, cfile, layouts, ["--grad-dtype", "fp32"] + stack,
                      *common)
        before = ([{}] * len(layouts) if args.fit_only else
                  price(args.hetplan, model, cfile, layouts, ["--uncalibrated"] + stack, *common))
        for t, lay, a, b in zip(trials, layouts, after, before):
            rows.append(dict(t, layout=lay, after=a, before=b))

    if args.fit_only:
        print("\n".join(fit_table(rows)))
        return
    summary, lines = {}, []
    lines.append("| cluster | run | pp | dp | tp | mb size | micro-batches | measured s | "
                 "before s | before err | predicted s | error | source |")
    lines.append("|" + "---|" * 13)
    for r in rows:
        meas, a, b = r["measured_s"], r["after"], r["before"]
        pa, pb = a.get("step_time_s"), b.get("step_time_s")
        src = f"[AMP](https://github.com/DachengLi1/AMP) `{r['source'].split('/blob/')[1]}`"
        head = (f"| {r['cluster']} | {r['trial']} | {r['pp']} | {r['dp']} | {r['mp']} | "
                f"{r['micro_batch_size']} | {r['layout']['micro_batches']} |")
        if meas is None:
            note = ("predicted OOM" if pa is None else
                    f"fits ({100 * a['peak_memory_fraction']:.0f}% of the fullest device)")
            lines.append(f"{head} OOM | {'-' if pb is None else f'{pb:.2f}'} | | "
                         f"{'-' if pa is None else f'{pa:.2f}'} | {note} | {src} |")
            continue
        if pa is None or pb is None:
            why = (a.get("error") or b.get("error") or "")[:80]
            lines.append(f"{head} {meas:.2f} | {'-' if pb is None else f'{pb:.2f}'} | | "
                         f"{'-' if pa is None else f'{pa:.2f}'} | not priced: {why} | {src} |")
            continue
        ea = 100 * (pa - meas) / meas
        eb = 100 * (pb - meas) / meas
        summary.setdefault(r["cluster"], []).append((meas, pa, pb, ea, eb))
        lines.append(f"{head} {meas:.2f} | {pb:.2f} | {eb:+.0f}% | {pa:.2f} | {ea:+.1f}% | {src} |")
    stats = ["| cluster | role | runs | median abs err before | after | worst before | after | "
             "Spearman before | after |", "|---|---|---|---|---|---|---|---|---|"]
    allA, allB = [], []
    for c, v in summary.items():
        ea = [abs(x[3]) for x in v]
        eb = [abs(x[4]) for x in v]
        allA += ea
        allB += eb
        meas = [x[0] for x in v]
        stats.append(f"| {c} | {ROLE.get(c, '')} | {len(v)} | {statistics.median(eb):.1f}% | "
                     f"{statistics.median(ea):.1f}% | {max(eb):.0f}% | {max(ea):.1f}% | "
                     f"{sources.spearman(meas, [x[2] for x in v]):.2f} | "
                     f"{sources.spearman(meas, [x[1] for x in v]):.2f} |")
    stats.append(f"| all | | {len(allA)} | {statistics.median(allB):.1f}% | "
                 f"{statistics.median(allA):.1f}% | {max(allB):.0f}% | {max(allA):.1f}% | | |")
    print("\n".join(stats))
    print()
    print("\n".join(lines))
    print()
    print("\n".join(fit_table(rows)))
    print()
    published(args, amp_generic(rows, args, model))


def amp_generic(rows, args, model):
    """AMP's runs in accuracy_sources' row form (amp-t4: fit, amp-het: check),
    with each cluster's own pick for the search table."""
    out = []
    for r in rows:
        out.append({"source": f"amp_gpt2 ({r['cluster']})",
                    "role": "fit" if r["cluster"] == "amp-t4" else "check",
                    "id": f"{r['cluster']}-{r['trial']}", "group": ("amp_gpt2", r["cluster"]),
                    "sig": (r["pp"], r["mp"], r["dp"], r["micro_batch_size"], False),
                    "measured_s": r["measured_s"], "mfu": None, "after": r["after"],
                    "before": r["before"], "amp_model": model})
    return out


def published(args, amp_rows):
    names = set(args.sources.split(",")) if args.sources else None
    data = sources.load_sources(names, args.published)
    priced = sources.price_all(args.hetplan, args.work, data, args.timeout, args.jobs)
    rows = amp_rows + sources.generic_rows(priced)
    print("\n".join(sources.source_tables(rows)))
    print()
    print("\n".join(sources.failures(rows)))
    if not args.no_search:
        groups = sources.search_groups(args.hetplan, args.work,
                                       [r for r in rows if "config" in r], args.timeout)
        groups = amp_search_groups(args, amp_rows) + groups
        print()
        print("\n".join(sources.search_table(groups)))
    if args.details:
        print()
        print("\n".join(sources.config_table([r for r in rows if "config" in r])))


def amp_search_groups(args, amp_rows):
    out = []
    data = json.load(open(os.path.join(ROOT, "bench/published/amp_gpt2.json")))
    for cluster in sorted({r["group"][1] for r in amp_rows}):
        rs = [r for r in amp_rows if r["group"][1] == cluster]
        extra = ["--dtype", data["dtype"], "--grad-dtype", "fp32", "--offload", "never"]
        pick, pred = sources.own_pick(args.hetplan, args.work, rs[0]["amp_model"],
                                      os.path.join(ROOT, "bench/clusters", cluster + ".yaml"),
                                      data["global_batch"], data["model"]["seq"], extra,
                                      args.timeout)
        out.append((f"amp_gpt2: GPT-2 24 x 1024 on {cluster}, batch {data['global_batch']}",
                    rs, pick, pred))
    return out


def quick(args):
    """Every source file parses (a bad one exits with its path and field) and
    its smallest config prices (fits or is predicted out of memory)."""
    data = sources.load_sources(set(args.sources.split(",")) if args.sources else None,
                                args.published)
    print("| source | role | configs | smallest config | GPUs | outcome |")
    print("|---|---|---|---|---|---|")
    bad = 0
    for name, d in data.items():
        c = min(d["configs"], key=lambda c: (sources.gpus(c), c["model"]["layers"]))
        res = sources.price_group(args.hetplan, args.work, [c], [], args.timeout)[0]
        out = sources.outcome(res)
        bad += out == "not priced"
        print(f"| {name} | {d['role']} | {len(d['configs'])} | {c['id']} | {sources.gpus(c)} | "
              f"{out if out != 'not priced' else 'not priced: ' + res.get('error', '')} |")
    if bad:
        sys.exit(f"error: {bad} source(s) did not price their smallest config")


def fit_table(rows):
    """Fit/OOM: hetplan's memory prediction for every published run (the
    calibrated model; memory does not depend on the calibration) against
    whether the run ran or ran out of memory."""
    out = ["| cluster | run | pp | dp | tp | mb size | micro-batches | fullest device | "
           "predicted peak / capacity | predicted | published | |",
           "|" + "---|" * 12]
    counts = {}
    for r in rows:
        a = r["after"]
        frac = a.get("peak_memory_fraction")
        pred = "OOM" if a.get("step_time_s") is None else "fits"
        if frac is None:
            # Not priced at all: a layout hetplan cannot express (a stage
            # that holds only one of AMP's no-op layer slots has no layer).
            pred = "not priced"
        real = "OOM" if r["measured_s"] is None else "ran"
        right = pred != "not priced" and (pred == "OOM") == (real == "OOM")
        key = (r["cluster"], real, pred)
        counts[key] = counts.get(key, 0) + 1
        peak = a.get("peak_memory_bytes")
        cap = a.get("fullest_capacity_bytes")
        dev = "-"
        if peak is not None and cap:
            dev = f"rank {a['fullest_rank']}"
        where = (f"{peak / 2**30:.1f} / {cap / 2**30:.1f} GiB ({100 * frac:.0f}%)"
                 if peak is not None and cap else a.get("error", "-")[:70])
        out.append(f"| {r['cluster']} | {r['trial']} | {r['pp']} | {r['dp']} | {r['mp']} | "
                   f"{r['micro_batch_size']} | {r['layout']['micro_batches']} | {dev} | "
                   f"{where} | {pred} | {real} | "
                   f"{'right' if right else '-' if pred == 'not priced' else '**wrong**'} |")
    summary = ["| cluster | ran, predicted fits | ran, predicted OOM | OOM, predicted OOM | "
               "OOM, predicted fits | not priced | right |", "|---|---|---|---|---|---|---|"]
    for c in sorted({k[0] for k in counts}):
        n = lambda real, pred: counts.get((c, real, pred), 0)
        total = sum(v for k, v in counts.items() if k[0] == c)
        ok = n("ran", "fits") + n("OOM", "OOM")
        unpriced = n("ran", "not priced") + n("OOM", "not priced")
        summary.append(f"| {c} | {n('ran', 'fits')} | {n('ran', 'OOM')} | {n('OOM', 'OOM')} | "
                       f"{n('OOM', 'fits')} | {unpriced} | {ok} of {total} |")
    return summary + [""] + out


if __name__ == "__main__":
    main()
