#!/usr/bin/env python3
"""`hetplan explain --html` pages opened in a real browser: headless
Chromium (Debian's `chromium`) loads the report of a training plan and of a
serving plan, dumps the DOM it built and takes a screenshot. The DOM must
hold the page's sections, the cluster's devices, the stages or replicas,
memory bars for every rank and the embedded timeline's boxes, and nothing that
loads from elsewhere (Inputs/html_check.py reads it); the screenshot must
be a non-blank PNG.

  explain_html_browser.py --hetplan BIN --model MODEL --work DIR

Exit 77 (ctest: skipped) when no Chromium is on PATH, saying so in a line
scripts/test-summary.py accepts ("no chromium on PATH").
"""
import argparse
import os
import shutil
import struct
import subprocess
import sys
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "Inputs"))
import html_check  # noqa: E402

BROWSERS = ("chromium", "chromium-browser")


def run(cmd, **kw):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=kw.pop("timeout", 300), **kw)
    if r.returncode != 0:
        raise SystemExit(f"FAIL: {' '.join(cmd)} exited {r.returncode}\n{r.stderr[-3000:]}")
    return r.stdout


def chromium(browser, work, url, *flags):
    """Headless Chromium on `url` with a profile of its own under `work`."""
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
           "--disable-background-networking", "--disable-component-update",
           "--disable-extensions", "--hide-scrollbars",
           f"--user-data-dir={os.path.join(work, 'profile')}", *flags, url]
    return run(cmd, timeout=180, env=dict(os.environ, HOME=work))


def png_ok(path):
    """A PNG of more than one colour (its first rows decoded; filter bytes
    aside, a blank page would be one repeated value)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        return False, "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    idat, at = b"", 8
    while at < len(data):
        n, kind = struct.unpack(">I4s", data[at:at + 8])
        if kind == b"IDAT":
            idat += data[at + 8:at + 8 + n]
        at += 12 + n
    raw = zlib.decompress(idat)
    distinct = len(set(raw[:min(len(raw), 4 * width * 400)]))
    return distinct > 8, f"{width}x{height}, {distinct} distinct byte values in the first rows"


def check_page(browser, work, name, page, want):
    url = "file://" + os.path.abspath(page)
    dom = chromium(browser, work, url, "--dump-dom")
    dom_path = os.path.join(work, name + ".dom.html")
    with open(dom_path, "w", encoding="utf-8") as f:
        f.write(dom)
    parsed = html_check.Page()
    parsed.feed(dom)
    problems = []
    if parsed.sections != want["sections"]:
        problems.append(f"sections {parsed.sections}, want {want['sections']}")
    devices = parsed.ranks.get("devices:device", 0)
    if devices != want["devices"]:
        problems.append(f"{devices} device rows, want {want['devices']}")
    for key, label in (("stages:stage", "stages"), ("replicas:replica", "replicas")):
        if parsed.rows.get(key, 0) != want[label]:
            problems.append(f"{parsed.rows.get(key, 0)} {label}, want {want[label]}")
    bars = parsed.svgs.get("membar", 0)
    memory_ranks = parsed.ranks.get("memory-table:rank", 0) + parsed.ranks.get("serving-memory:rank", 0)
    if (bars, memory_ranks) != want["membars"]:
        problems.append(f"{bars} memory bars for {memory_ranks} ranks, want {want['membars']}")
    if want["timeline"] and parsed.timeline_rects == 0:
        problems.append("no timeline boxes")
    ext = html_check.external(dom)
    if ext:
        problems.append(f"loads from elsewhere: {ext}")
    shot = os.path.join(work, name + ".png")
    chromium(browser, work, url, f"--screenshot={shot}", "--window-size=1400,2000")
    ok, why = png_ok(shot)
    if not ok:
        problems.append(f"screenshot {shot}: {why}")
    if problems:
        print(f"FAIL {name}: " + "; ".join(problems))
        return False
    print(f"ok {name}: sections {' '.join(parsed.sections)}, {devices} devices, "
          f"{parsed.rows.get('stages:stage', 0)} stages, "
          f"{parsed.rows.get('replicas:replica', 0)} replicas, "
          f"{bars} memory bars for {memory_ranks} ranks, {parsed.timeline_rects} timeline boxes; "
          f"screenshot {why}")
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hetplan", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    browser = next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
    if not browser:
        print("SKIP: no chromium on PATH (Debian's chromium package; scripts/setup.sh installs it)")
        return 77
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    train, serve = os.path.join(a.work, "t.plan"), os.path.join(a.work, "s.plan")
    run([a.hetplan, "compile", a.model, "--cluster", "2xA100-80G,2xT4", "--batch", "8", "--seq",
         "16", "--pin", "pp=2,mb=2", "--quiet", "-o", train])
    run([a.hetplan, "compile", a.model, "--mode", "serve", "--cluster", "2xA100-80G,4xL4",
         "--rate", "50", "--prompt-len", "64", "--output-len", "32", "-o", serve])
    ok = True
    for name, plan, want in (
            ("train", train, {"sections": ["summary", "cluster", "placement", "memory", "timeline", "baselines"],
                              "devices": 4, "stages": 2, "replicas": 0, "membars": (2, 4),
                              "timeline": True}),
            ("serve", serve, {"sections": ["summary", "cluster", "serving", "baselines"], "devices": 6,
                              "stages": 0, "replicas": 6, "membars": (6, 6), "timeline": False})):
        page = os.path.join(a.work, name + ".html")
        run([a.hetplan, "explain", plan, "--html", page])
        ok = check_page(browser, a.work, name, page, want) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
