"""Prices the measured runs of bench/published/<source>.json (every file with
a "configs" list; the schema is in bench/published/README.md) at their exact
layouts and reports the error per source and per role (fit / check), the
out-of-memory outcomes, MFU against the published MFU, and how hetplan's own
search ranks the layouts of each measured group. Used by bench/accuracy.py
(docs/cost-model.md, "Fit and check sources")."""
import glob, json, os, statistics, subprocess, tempfile
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_sources(names=None, folder=None):
    """{name: data} of every FOLDER/*.json with configs (default
    bench/published); a file that does not parse or lacks a field is reported
    by its path and field."""
    out = {}
    folder = folder or os.path.join(ROOT, "bench/published")
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        name = os.path.basename(path)[:-5]
        try:
            data = json.load(open(path))
        except ValueError as e:
            raise SystemExit(f"error: {path}: not JSON: {e}")
        if "configs" not in data or (names and name not in names):
            continue
        if data.get("role") not in ("fit", "check"):
            raise SystemExit(f"error: {path}: \"role\" must be \"fit\" or \"check\"")
        for i, c in enumerate(data["configs"]):
            for key in ("id", "model", "cluster", "layout", "measured"):
                if key not in c:
                    raise SystemExit(f"error: {path}: configs[{i}] has no \"{key}\"")
            for key in ("layers", "hidden", "heads", "seq", "vocab"):
                if not isinstance(c["model"].get(key), int):
                    raise SystemExit(f"error: {path}: configs[{i}] ({c['id']}): model.{key} "
                                     f"must be an integer")
            # The catalog stack profile that prices this source's software
            # (docs/cost-model.md, "Software stacks"), chosen from what the
            # source ran, never from its errors.
            c["_stack"] = data.get("stack_profile")
            lay = c["layout"]
            for key in ("pp", "tp", "dp", "global_batch"):
                if not isinstance(lay.get(key), int) or lay[key] < 1:
                    raise SystemExit(f"error: {path}: configs[{i}] ({c['id']}): layout.{key} "
                                     f"must be a positive integer")
        out[name] = data
    return out


def model_file(work, m):
    """hetplan's GPT-2 graph of the config's shape (shapes only), made once."""
    drop = m.get("dropout", 0.0)
    key = (f"{m.get('name', 'gpt')}-L{m['layers']}-h{m['hidden']}-a{m['heads']}-v{m['vocab']}"
           f"-s{m['seq']}-f{m.get('ffn_ratio', 4)}-d{drop}")
    path = os.path.join(work, key + ".onnx")
    if not os.path.exists(path):
        cmd = ["/usr/bin/python3", os.path.join(ROOT, "models/gen_transformer.py"),
               "--family", "gpt2", "--config", "gpt2-medium", "--layers", str(m["layers"]),
               "--hidden", str(m["hidden"]), "--heads", str(m["heads"]),
               "--vocab", str(m["vocab"]), "--seq-max", str(m["seq"]),
               "--ffn", str(m.get("ffn_ratio", 4) * m["hidden"]), "--weights", "none",
               "--no-check", "-o", path + ".tmp"]
        if drop:
            cmd += ["--dropout", str(drop)]
        subprocess.run(cmd, check=True, capture_output=True)
        os.replace(path + ".tmp", path)
    return path


def gpus(c):
    lay = c["layout"]
    return lay["pp"] * lay["tp"] * lay["dp"]


def cluster_file(work, c):
    """Nodes of gpus_per_node devices of the catalog type, one inter-node link
    (the published per-GPU network figure, or hetplan's default)."""
    cl, n = c["cluster"], gpus(c)
    per = min(cl.get("gpus_per_node", 8), n)
    inter = cl.get("inter_node_gbs")
    key = f"{cl['gpu']}-{n // per}x{per}-net{inter}"
    path = os.path.join(work, key + ".yaml")
    if not os.path.exists(path):
        text = (f"name: {key}\nnodes:\n  - name: node\n    count: {n // per}\n"
                f"    devices: [{per}x{cl['gpu']}]\n")
        if inter:
            text += f"inter_node: {{bandwidth_gbs: {inter}}}\n"
        open(path, "w").write(text)
    return path


def micro_batch(c):
    """(micro-batch size, count): the published ones, else 1 sample (assumed)."""
    lay = c["layout"]
    mbs = lay.get("micro_batch_size") or 1
    count = lay.get("micro_batches") or lay["global_batch"] // (lay["dp"] * mbs)
    return mbs, count


def layout(c):
    """Megatron's placement: tp ranks innermost, then dp, then pp (rank =
    stage * dp * tp + replica * tp + shard); the transformer layers split
    evenly over the stages, the embedding with the first, the head with the
    last (hetplan's layers: stem, h.0 .. h.{L-1}, head)."""
    lay, L = c["layout"], c["model"]["layers"]
    pp, tp, dp = lay["pp"], lay["tp"], lay["dp"]
    stages = []
    for j in range(pp):
        workers = [[j * dp * tp + d * tp + k for k in range(tp)] for d in range(dp)]
        last = L + 1 if j == pp - 1 else round((j + 1) * L / pp)
        stages.append({"workers": workers, "last_layer": last})
    return {"micro_batches": micro_batch(c)[1], "tensor_parallel": tp, "shares": "even",
            "stages": stages}


def flags(c):
    lay = c["layout"]
    rec = {True: "always", False: "never", None: "auto"}[lay.get("recompute")]
    stack = ["--stack", c["_stack"]] if c.get("_stack") else []
    return ["--dtype", lay.get("dtype", "fp16"), "--recompute", rec,
            "--zero", str(lay.get("zero", 0)), "--offload", "never"] + stack


def run(cmd, timeout):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout:.0f} s"
    if p.returncode != 0:
        return None, (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1][:160]
    return p.stdout, None


def price_group(hetplan, work, items, extra, timeout):
    """Prices configs that share model, cluster and flags in one call (one
    JSON line per layout; a lone layout is given twice, since one layout is
    planned instead of priced)."""
    c0 = items[0]
    lays = [layout(c) for c in items]
    with tempfile.NamedTemporaryFile("w", suffix=".json", dir=work, delete=False) as f:
        json.dump({"layouts": lays if len(lays) > 1 else lays * 2}, f)
        path = f.name
    try:
        cmd = [hetplan, "compile", model_file(work, c0["model"]),
               "--cluster", cluster_file(work, c0), "--batch", str(c0["layout"]["global_batch"]),
               "--seq", str(c0["model"]["seq"]), "--allow-missing-weights", "--quiet",
               "--layout", path] + flags(c0) + extra
        out, err = run(cmd, timeout * len(items))
    finally:
        os.unlink(path)
    if err:
        return [{"error": err, "unpriced": True}] * len(items)
    lines = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    return lines[:len(items)]


def price_all(hetplan, work, sources, timeout, jobs, uncalibrated=True):
    """[(source, config, calibrated result, uncalibrated result)]."""
    groups = {}
    for name, data in sources.items():
        for c in data["configs"]:
            key = (model_file(work, c["model"]), cluster_file(work, c),
                   c["layout"]["global_batch"], tuple(flags(c)))
            groups.setdefault(key, []).append((name, c))
    tasks = []
    for items in groups.values():
        tasks.append((items, []))
        if uncalibrated:
            tasks.append((items, ["--uncalibrated"]))
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(lambda t: price_group(hetplan, work, [c for _, c in t[0]],
                                                      t[1], timeout), tasks))
    by = {}
    for (items, extra), res in zip(tasks, results):
        for (name, c), r in zip(items, res):
            by.setdefault((name, c["id"]), {})["before" if extra else "after"] = r
    rows = []
    for name, data in sources.items():
        for c in data["configs"]:
            r = by[(name, c["id"])]
            rows.append({"source": name, "role": data["role"], "config": c,
                         "after": r["after"], "before": r.get("before", {})})
    return rows


def group_key(row):
    """Runs of one source on the same cluster, model and global batch: a
    measured group whose layouts compete."""
    c = row["config"]
    return (row["source"], c["cluster"]["gpu"], gpus(c), c["model"].get("name"),
            c["model"]["seq"], c["layout"]["global_batch"])


def spearman(xs, ys):
    def ranks(v):
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2 + 1
            i = j + 1
        return r
    rx, ry = ranks(xs), ranks(ys)
    mx, my = statistics.mean(rx), statistics.mean(ry)
    num = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    den = (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5
    return num / den if den else float("nan")


def generic_rows(rows):
    """The rows of price_all in the form every report below reads."""
    out = []
    for r in rows:
        c = r["config"]
        lay = c["layout"]
        out.append({"source": r["source"], "role": r["role"], "id": c["id"],
                    "group": group_key(r), "sig": (lay["pp"], lay["tp"], lay["dp"],
                                                   micro_batch(c)[0], lay.get("recompute")),
                    "measured_s": None if c["measured"].get("oom") else
                    c["measured"]["step_time_s"], "mfu": c["measured"].get("mfu"),
                    "after": r["after"], "before": r["before"], "config": c})
    return out


def outcome(res):
    """fits / OOM / not priced (with why)."""
    if res.get("step_time_s") is not None:
        return "fits"
    if res.get("unpriced") or res.get("peak_memory_fraction") is None:
        return "not priced"
    return "OOM"


def stats(rows):
    """n, priced, median/worst |error| after and before, OOM right/wrong."""
    errs_a, errs_b = [], []
    refused = accepted = unpriced = ran = ooms = 0
    mfu, mem = [], []
    for r in rows:
        a, b, meas = r["after"], r["before"], r["measured_s"]
        oa = outcome(a)
        pub = r.get("config", {}).get("measured", {}).get("peak_memory_gib")
        if pub and a.get("peak_memory_bytes"):
            mem.append((pub, a["peak_memory_bytes"] / 2**30))
        if oa == "not priced":
            unpriced += 1
            continue
        if meas is None:
            ooms += 1
            accepted += oa == "fits"
            continue
        ran += 1
        if oa == "OOM":
            refused += 1
            continue
        errs_a.append(abs(a["step_time_s"] - meas) / meas)
        if b.get("step_time_s") is not None:
            errs_b.append(abs(b["step_time_s"] - meas) / meas)
        if r["mfu"]:
            mfu.append((r["mfu"], r["mfu"] * meas / a["step_time_s"]))
    med = lambda v: f"{100 * statistics.median(v):.1f}%" if v else "-"
    worst = lambda v: f"{100 * max(v):.0f}%" if v else "-"
    return {"n": len(rows), "timed": len(errs_a), "med_a": med(errs_a), "worst_a": worst(errs_a),
            "med_b": med(errs_b), "worst_b": worst(errs_b), "refused": f"{refused} of {ran}",
            "accepted": f"{accepted} of {ooms}", "unpriced": unpriced, "mfu": mfu, "mem": mem}


def group_spearman(rows):
    """Spearman of predicted vs measured step time within each measured group
    of 3 or more timed runs: (count, median, worst)."""
    groups = {}
    for r in rows:
        if r["measured_s"] is not None and r["after"].get("step_time_s") is not None:
            groups.setdefault(r["group"], []).append(r)
    rho = [spearman([r["measured_s"] for r in g], [r["after"]["step_time_s"] for r in g])
           for g in groups.values() if len(g) >= 3]
    if not rho:
        return "-"
    return f"{len(rho)}: {statistics.median(rho):.2f} / {min(rho):.2f}"


def pair_cell(v, fmt):
    """Medians of published and predicted values and of their relative
    difference: "published / predicted (median rel. diff)"."""
    if not v:
        return "-"
    pub = statistics.median(p for p, _ in v)
    pred = statistics.median(q for _, q in v)
    off = statistics.median(abs(q - p) / p for p, q in v)
    return f"{fmt(pub)} / {fmt(pred)} ({100 * off:.0f}%)"


def mfu_cell(v):
    return pair_cell(v, lambda x: f"{100 * x:.0f}%")


def mem_cell(v):
    return pair_cell(v, lambda x: f"{x:.0f} GiB") + (f", {len(v)} runs" if v else "")


def source_tables(rows):
    head = ("| source | role | configs | timed | median abs err before | after | worst before | "
            "after | Spearman within groups (groups: median / worst) | ran, refused | "
            "OOM, accepted | not priced | MFU published / predicted (median rel. diff) | peak memory "
            "published / predicted (median rel. diff) |")
    out = [head, "|" + "---|" * 14]
    for name in sorted({r["source"] for r in rows}):
        rs = [r for r in rows if r["source"] == name]
        s = stats(rs)
        out.append(f"| {name} | {rs[0]['role']} | {s['n']} | {s['timed']} | {s['med_b']} | "
                   f"{s['med_a']} | {s['worst_b']} | {s['worst_a']} | {group_spearman(rs)} | "
                   f"{s['refused']} | {s['accepted']} | {s['unpriced']} | {mfu_cell(s['mfu'])} | "
                   f"{mem_cell(s['mem'])} |")
    out += ["", "| role | sources | configs | timed | median abs err before | after | "
            "worst before | after | Spearman within groups | ran, refused | OOM, accepted | "
            "not priced |", "|" + "---|" * 12]
    for role in ("fit", "check"):
        rs = [r for r in rows if r["role"] == role]
        if not rs:
            continue
        s = stats(rs)
        out.append(f"| {role} | {len({r['source'] for r in rs})} | {s['n']} | {s['timed']} | "
                   f"{s['med_b']} | {s['med_a']} | {s['worst_b']} | {s['worst_a']} | "
                   f"{group_spearman(rs)} | {s['refused']} | {s['accepted']} | "
                   f"{s['unpriced']} |")
    return out


def config_table(rows):
    out = ["| source | config | pp | tp | dp | mb size | micro-batches | measured s | before s | "
           "predicted s | error | MFU published / predicted | predicted peak memory | published "
           "peak, GiB |",
           "|" + "---|" * 14]
    for r in rows:
        c = r["config"]
        a, b, meas = r["after"], r["before"], r["measured_s"]
        pa, pb = a.get("step_time_s"), b.get("step_time_s")
        mbs, count = micro_batch(c)
        assumed = "" if c["layout"].get("micro_batch_size") else " (assumed)"
        err = f"{100 * (pa - meas) / meas:+.0f}%" if pa and meas else "-"
        mfu = (f"{100 * r['mfu']:.0f}% / {100 * r['mfu'] * meas / pa:.0f}%"
               if r["mfu"] and pa and meas else "-")
        frac = a.get("peak_memory_fraction")
        mem = (f"{a['peak_memory_bytes'] / 2**30:.0f} GiB ({100 * frac:.0f}% of "
               f"{a['fullest_capacity_bytes'] / 2**30:.0f})"
               if frac is not None and a.get("fullest_capacity_bytes") else
               "not priced: " + a.get("error", "")[:60])
        out.append(f"| {r['source']} | {r['id']} | {c['layout']['pp']} | {c['layout']['tp']} | "
                   f"{c['layout']['dp']} | {mbs}{assumed} | {count} | "
                   f"{'OOM' if meas is None else f'{meas:.2f}'} | "
                   f"{'-' if pb is None else f'{pb:.2f}'} | {'-' if pa is None else f'{pa:.2f}'} | "
                   f"{err} | {mfu} | {mem} | "
                   f"{c['measured'].get('peak_memory_gib', '-')} |")
    return out


def failures(rows):
    bad = [r for r in rows if outcome(r["after"]) == "not priced"]
    out = ["| source | config | why not priced |", "|---|---|---|"]
    out += [f"| {r['source']} | {r['id']} | {r['after'].get('error', '')} |" for r in bad]
    return out if bad else ["every config was priced"]


def own_pick(hetplan, work, model, cluster, batch, seq, extra, timeout):
    """hetplan's own plan (no --layout): (pp, tp, dp, mb size, recompute on
    any stage), predicted s."""
    plan = os.path.join(work, f"own-{os.getpid()}-{abs(hash((model, cluster, batch)))}.hpl")
    cmd = [hetplan, "compile", model, "--cluster", cluster, "--batch", str(batch), "--seq",
           str(seq), "--allow-missing-weights", "--quiet", "--json", "-o", plan] + extra
    out, err = run(cmd, timeout)
    if os.path.exists(plan):
        os.unlink(plan)
    if err:
        return None, err
    d = json.loads(out)
    st = d["stages"]
    w = st[0]["workers"]
    return ((len(st), st[0]["tensor_parallel"], len(w), w[0]["samples"],
             any(s["recompute"] for s in st)), d["step_time_s"])


def search_table(groups):
    """groups: [(name, [rows], own pick, own predicted s or error)]."""
    out = ["| group | measured layouts | measured best (pp, tp, dp, mb size, recompute) | hetplan's "
           "top-ranked measured layout | its measured s / best | hetplan's own pick | own pick "
           "= measured best |", "|" + "---|" * 7]
    hits = n = 0
    ratios = []
    for name, rs, pick, pred in groups:
        ran = [r for r in rs if r["measured_s"] is not None]
        best = min(ran, key=lambda r: r["measured_s"])
        fit = [r for r in ran if r["after"].get("step_time_s") is not None]
        top = min(fit, key=lambda r: r["after"]["step_time_s"]) if fit else None
        ratio = f"{top['measured_s'] / best['measured_s']:.2f}" if top else "-"
        if top:
            ratios.append(top["measured_s"] / best["measured_s"])
        same = pick is not None and pick == best["sig"]
        n += 1
        hits += same
        own = f"{pick} ({pred:.2f} s predicted)" if pick else f"failed: {pred}"
        out.append(f"| {name} | {len(ran)} | {best['id']} {best['sig']} "
                   f"{best['measured_s']:.2f} s | {top['id'] + ' ' + str(top['sig']) if top else '-'}"
                   f" | {ratio} | {own} | {'yes' if same else 'no'} |")
    out.append(f"\nhetplan's own pick is the measured best in {hits} of {n} groups; its "
               f"top-ranked measured layout is the measured best in "
               f"{sum(x == 1 for x in ratios)} of {len(ratios)} ranked groups (measured time / "
               f"best: median {statistics.median(ratios) if ratios else float('nan'):.2f}, "
               f"worst {max(ratios) if ratios else float('nan'):.2f}).")
    return out


def search_groups(hetplan, work, rows, timeout):
    """The measured groups of the published sources with their own picks."""
    groups = {}
    for r in rows:
        if r["measured_s"] is not None:
            groups.setdefault(r["group"], []).append(r)
    out = []
    for key, rs in sorted(groups.items()):
        if len({r["sig"] for r in rs}) < 2:
            continue
        c = rs[0]["config"]
        extra = ["--dtype", c["layout"].get("dtype", "fp16"), "--offload", "never"]
        if c.get("_stack"):
            extra += ["--stack", c["_stack"]]
        pick, pred = own_pick(hetplan, work, model_file(work, c["model"]), cluster_file(work, c),
                              c["layout"]["global_batch"], c["model"]["seq"], extra, timeout)
        name = f"{key[0]}: {key[3]} on {key[2]} x {key[1]}, batch {key[5]}"
        out.append((name, rs, pick, pred))
    return out
