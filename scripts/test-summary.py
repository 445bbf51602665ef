#!/usr/bin/env python3
"""scripts/test.sh's closing line: passed, failed and skipped ctest tests,
each skip with its reason and whether this machine explains it.

  test-summary.py JUNIT_XML [--build DIR]

JUNIT_XML is what `ctest --output-junit` wrote. A test is skipped when ctest
says so (SKIP_RETURN_CODE, SKIP_REGULAR_EXPRESSION: gtest's GTEST_SKIP) or
when it is DISABLED at configure time. A skip is *expected* only when its
reason names something this machine truly lacks:

  no GPU            "no CUDA device" while nvidia-smi lists no GPU (and
                    "a CUDA device is present" while it lists one)
  GPUs < 2          NCCL's 2-rank test on a machine with fewer than 2 GPUs
  no MPI            mpirun/mpiexec not on PATH, or hetplan built without MPI
  data absent       "<path> is absent" / "no ... under <path>" where <path>
                    really does not exist (../shared/models, libonnx-testdata)
  no python onnx    a generator needs /usr/bin/python3 with onnx and numpy,
                    and that python3 lacks them
  no Chromium       "no chromium on PATH" (the HTML report's browser test)
                    while neither chromium nor chromium-browser is on PATH
  no netns          "cannot create network namespaces" (the two-host MPI
                    test) where `ip netns add` really fails here (not root,
                    no CAP_SYS_ADMIN/CAP_NET_ADMIN, iproute2 missing)

Any other skip (a reason this machine does not explain, or one it
contradicts: ../shared/models present yet a test says it is absent) is
*unexpected*. Exit 1 when a test failed or a skip is unexpected, else 0.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET


def gpu_count():
    smi = shutil.which("nvidia-smi")
    if not smi:
        return 0
    try:
        out = subprocess.run([smi, "-L"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def can_make_netns():
    """Whether this machine lets us create (and delete) a network namespace."""
    if not (shutil.which("ip") and shutil.which("unshare")):
        return False
    name = f"hetplan-probe-{os.getpid()}"
    try:
        ok = subprocess.run(["ip", "netns", "add", name], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, timeout=60).returncode == 0
        if ok:
            subprocess.run(["ip", "netns", "delete", name], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=60)
        return ok
    except (OSError, subprocess.TimeoutExpired):
        return False


def python_has_onnx():
    try:
        return subprocess.run(["/usr/bin/python3", "-c", "import onnx, numpy"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def have_mpi(build):
    """mpirun on PATH, and this build's hetplan linked with MPI (the
    runtime's MPI is optional: runtime/CMakeLists.txt)."""
    if not (shutil.which("mpirun") or shutil.which("mpiexec")):
        return False
    tool = os.path.join(build, "bin", "hetplan")
    try:
        out = subprocess.run(["ldd", tool], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return True  # cannot tell: count MPI skips as unexpected
    return "libmpi" in out or not os.path.exists(tool)


# The path a skip reason names as missing: "SKIP: /a/b is absent",
# "no onnx-light models under /a/b", "suite x: /a/b is absent".
ABSENT = [re.compile(r"(/\S+?)[:,]? is absent"), re.compile(r"\bunder (/\S+)")]


def classify(name, reason, machine):
    """(expected?, label) for one skipped test."""
    gpus = machine["gpus"]
    if re.search(r"NCCL needs one GPU per rank", reason):
        return gpus < 2, "fewer than 2 GPUs"
    if re.search(r"a CUDA device is present", reason):
        return gpus > 0, "a GPU is present (CPU-only variant)"
    if re.search(r"no CUDA device|device cuda|CUDA support", reason):
        return gpus == 0, "GPU tests without a GPU"
    if re.search(r"mpirun|mpiexec|no MPI support|hetplan-no-mpirun", reason) or (
            reason == "disabled" and "mpi" in name):
        return not machine["mpi"], "no MPI"
    if re.search(r"no chromium on PATH", reason):
        return not machine["chromium"], "no Chromium"
    if re.search(r"cannot create network namespaces", reason):
        return not machine["netns"], "no network namespaces"
    if re.search(r"python3 with onnx|python3-onnx is missing", reason):
        return not machine["python_onnx"], "no onnx for /usr/bin/python3"
    for rx in ABSENT:
        m = rx.search(reason)
        if m:
            path = m.group(1).rstrip(".:,")
            if os.path.exists(path):
                return False, f"says {path} is absent, but it is there"
            if "shared/models" in path:
                return True, "../shared/models absent"
            return True, f"{path} absent"
    return False, "no reason this machine explains"


GTEST_NOISE = re.compile(r"Running main\(\) from |Note: Google Test filter|\[[ =A-Z-]+\]")


def skip_reason(out):
    """The line that says why: gtest's message after `Skipped`, or a
    script's `SKIP...` line."""
    lines = [l.strip() for l in out.splitlines()]
    for i, l in enumerate(lines):
        if l.endswith(": Skipped") or l == "Skipped":
            # Under mpirun the ranks' output interleaves: another rank's
            # gtest banner can come between "Skipped" and its message.
            nxt = next((x for x in lines[i + 1:] if x and not GTEST_NOISE.match(x)), "")
            if nxt:
                return nxt
    for l in lines:
        if l.startswith("SKIP"):
            return l
    return next((l for l in reversed(lines) if l), "(no output)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("junit")
    ap.add_argument("--build", help="the build folder (default: the junit file's)")
    a = ap.parse_args()
    root = ET.parse(a.junit).getroot()
    build = a.build or os.path.dirname(os.path.abspath(a.junit))
    machine = {"gpus": gpu_count(), "mpi": have_mpi(build), "python_onnx": None,
               "chromium": bool(shutil.which("chromium") or shutil.which("chromium-browser")),
               "netns": None}
    passed, failed, skipped = [], [], []
    for tc in root.iter("testcase"):
        name, status = tc.get("name"), tc.get("status")
        out = tc.findtext("system-out") or ""
        sk = tc.find("skipped")
        if status == "run":
            passed.append(name)
        elif status == "disabled":
            skipped.append((name, "disabled"))
        elif status == "notrun" and sk is not None and sk.get("message", "").startswith("SKIP_"):
            skipped.append((name, skip_reason(out)))
        else:  # failed, timed out, or not run for another reason (no executable)
            why = sk.get("message") if sk is not None else "failed"
            failed.append(f"{name} ({why or 'failed'})")
    expected, unexpected = {}, []
    for name, reason in skipped:
        if machine["netns"] is None and "network namespaces" in reason:
            machine["netns"] = can_make_netns()
        if machine["python_onnx"] is None and "python3" in reason:
            machine["python_onnx"] = python_has_onnx()
        ok, label = classify(name, reason, machine)
        if ok:
            expected.setdefault(label, []).append(name)
        else:
            unexpected.append(f"{name}: {reason} [{label}]")
    print(f"machine: {machine['gpus']} GPU(s), MPI {'yes' if machine['mpi'] else 'no'}")
    for label, names in sorted(expected.items()):
        print(f"expected skips, {label}: {len(names)}")
        for n in names:
            print(f"  {n}")
    for u in unexpected:
        print(f"UNEXPECTED SKIP {u}")
    for f in failed:
        print(f"FAILED {f}")
    why = "; ".join(f"{label}: {len(n)}" for label, n in sorted(expected.items())) or "none"
    print(f"{len(passed)} passed, {len(failed)} failed, {len(skipped)} skipped "
          f"(expected: {why}; unexpected: {len(unexpected)})")
    return 1 if failed or unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
