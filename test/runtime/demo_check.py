#!/usr/bin/env python3
"""scripts/demo.sh (the README's main job) on an existing build: the GPT-2 XL
plan is printed beside its three baselines, each slower than the plan (the
point of the demo: mixed GPUs pay off), and the small GPT-2 of the plan's
structure runs one training step on one CPU thread per planned device with
the loss of an untrained model (about ln 512), and the plan report (an
HTML page) holds the cluster, stages, memory, timeline and baselines.

  demo_check.py --build DIR
"""
import argparse, json, math, os, re, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    a = ap.parse_args()
    env = dict(os.environ, HETPLAN_BUILD_DIR=os.path.abspath(a.build))
    r = subprocess.run([os.path.join(ROOT, "scripts", "demo.sh")], env=env, text=True,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = r.stdout
    print(out)
    if r.returncode != 0:
        print("FAIL: demo.sh exited %d" % r.returncode)
        return 1
    ok = True
    gains = dict(re.findall(r"^    (homogeneous|dp-even|pp-even) .* x([0-9.]+)  \(", out, re.M))
    for name in ("homogeneous", "dp-even", "pp-even"):
        if name not in gains:
            print("FAIL: no %s baseline line with a gain" % name)
            ok = False
        elif float(gains[name]) <= 1.2:
            print("FAIL: the plan gains only x%s over %s" % (gains[name], name))
            ok = False
    if "on 2xH100,4xA100-40G,8xL4 (14 devices)" not in out:
        print("FAIL: the XL plan's line is missing")
        ok = False
    loss = re.search(r"step 1/1: loss ([0-9.]+)", out)
    if not loss or abs(float(loss.group(1)) - math.log(512)) > 0.5:
        print("FAIL: no training step, or its loss is far from ln 512: %s" %
              (loss.group(1) if loss else "none"))
        ok = False
    # The XL plan's stages and micro-batches (what the planner picks moves
    # with the cost model; the small model must follow whatever it is).
    xl_json = os.path.join(os.path.abspath(a.build), "demo", "gpt2-xl.json")
    xl = json.load(open(xl_json)) if os.path.exists(xl_json) else {}
    want = "on 14 ranks (%d stage(s), %d micro-batch(es))" % (len(xl.get("stages", [])),
                                                             xl.get("micro_batches", 0))
    if not xl or want not in out:
        print("FAIL: the small model did not run with the XL plan's structure (%s)" % want)
        ok = False
    report = os.path.join(os.path.abspath(a.build), "demo", "gpt2-xl.html")
    page = open(report).read() if os.path.exists(report) else ""
    for section in ("cluster", "placement", "memory", "timeline", "baselines"):
        if '<section id="%s">' % section not in page:
            print("FAIL: the report %s has no %s section" % (report, section))
            ok = False
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
