"""Checks `hetplan compile --pick-devices` against brute force.

    pick_check.py HETPLAN MODEL WORK -- COMPILE_ARGS...

Runs the pick (COMPILE_ARGS hold --cluster with N? counts and one target),
reads its table, and checks: the pick meets the target; the rows are ranked
(by $/h with a target, by step time under --budget, by $/step without);
compiling the picked mix directly predicts the same step; and every mix of
counts (every count of every group) cheaper than the pick (with a
target), planned directly, misses the target or leaves a rented type idle.
"""
import itertools, re, subprocess, sys

hetplan, model, work = sys.argv[1:4]
args = sys.argv[sys.argv.index("--") + 1:]
PRICE = {"A100-80G": 3.4309, "L4": 0.8048, "T4": 0.526}  # the catalog's
SHOWN = {"A100-80G": "A100-SXM-80GB"}  # the name the summary's stage rows print


def flag(name, default=None):
    return args[args.index(name) + 1] if name in args else default


def compile_mix(spec):
    base = [a for a in args if a not in ("--pick-devices",)]
    for name in ("--cluster", "--target-step-s", "--target-samples-s", "--budget", "--pick-time-s"):
        if name in base:
            i = base.index(name)
            del base[i:i + 2]
    r = subprocess.run([hetplan, "compile", model, *base, "--cluster", spec, "--quiet", "-o",
                        work + "/direct.hpl"], capture_output=True, text=True)
    if r.returncode:
        return None, None
    step = float(re.search(r"predicted step time ([0-9.]+) s", r.stdout).group(1))
    return step, r.stdout


r = subprocess.run([hetplan, "compile", model, *args, "-o", work + "/pick.hpl", "--quiet"],
                   capture_output=True, text=True)
assert r.returncode == 0, r.stderr
report = r.stdout.split("mixes planned in")[0]
rows = [l.split() for l in report.splitlines() if re.match(r"\s+\d+\s+\d+x", l)]
assert rows, r.stdout
table = [(row[1], float(row[2]), float(row[3]), float(row[4]), float(row[5])) for row in rows]
spec, usd_h, step, samples, usd_step = table[0]
step_t, samples_t, budget = (float(flag(n, 0)) for n in ("--target-step-s", "--target-samples-s", "--budget"))
if step_t:
    assert step <= step_t * 1.001, (step, step_t)
if samples_t:
    assert samples >= samples_t * 0.999, (samples, samples_t)
if budget:
    assert all(t[1] <= budget + 1e-6 for t in table), table
key = (lambda t: t[1]) if step_t or samples_t else (lambda t: t[2]) if budget else (lambda t: t[4])
assert [key(t) for t in table] == sorted(key(t) for t in table), table

direct, _ = compile_mix(spec)
assert direct is not None and abs(direct - step) <= 0.0006 + 1e-3 * step, (direct, step)

checked = 0
if step_t or samples_t:
    groups = [(int(m.group(1)), m.group(2)) for m in
              re.finditer(r"(\d+)x([A-Za-z0-9-]+)\?", flag("--cluster"))]
    # Every count, not only the search's grid (all counts up to 8, then
    # about 1.5x steps, refined around the best): brute force.
    choices = [list(range(n + 1)) for n, _ in groups]
    for counts in itertools.product(*choices):
        price = sum(c * PRICE[t] for c, (_, t) in zip(counts, groups))
        if not any(counts) or price >= usd_h - 1e-6:
            continue
        mix = ",".join(f"{c}x{t}" for c, (_, t) in zip(counts, groups) if c)
        if mix == spec:  # the pick itself ($/h printed rounded to the cent)
            continue
        s, out = compile_mix(mix)
        checked += 1
        if s is None:
            continue
        batch = int(flag("--batch"))
        meets = (not step_t or s <= step_t * 1.001) and (not samples_t or batch / s >= samples_t * 0.999)
        idle_type = any(f"{c}x" in mix and f" {SHOWN.get(t, t)} " not in out.split("memory (fullest")[0]
                        for c, (_, t) in zip(counts, groups) if c)
        assert not meets or idle_type, f"{mix} at ${price:.2f}/h meets the target in {s} s: cheaper than {spec}"
print(f"ok: picked {spec} at ${usd_h:.2f}/h, step {step} s; {len(table)} rows ranked; "
      f"{checked} cheaper mixes miss the target")
