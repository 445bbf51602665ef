#!/usr/bin/env python3
"""scripts/test-summary.py on made-up ctest results: skips are counted
apart from passes, each classified by what this machine has, and the exit
code is 1 on a failure or on a skip the machine does not explain.

  test_summary_check.py SOURCE_DIR WORK_DIR
"""
import os
import shutil
import subprocess
import sys
from xml.sax.saxutils import escape


def case(name, status, out, skipped=None, failure=False):
    inner = ""
    if skipped is not None:
        inner += f'<skipped message="{escape(skipped)}"/>'
    if failure:
        inner += '<failure message=""/>'
    return (f'<testcase name="{name}" classname="{name}" time="0" status="{status}">{inner}'
            f'<system-out>{escape(out)}</system-out></testcase>\n')


def summary(script, work, cases):
    xml = os.path.join(work, "junit.xml")
    with open(xml, "w") as f:
        f.write("<testsuite>\n" + "".join(cases) + "</testsuite>\n")
    r = subprocess.run([sys.executable, script, xml, "--build", work], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    return r.returncode, r.stdout


def main():
    src, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    script = os.path.join(src, "scripts", "test-summary.py")
    gpu = bool(shutil.which("nvidia-smi"))
    present = src  # a folder that exists
    absent = os.path.join(work, "no-such-models")
    gtest_gpu = ("Running main()\n../test/unit/CudaTest.cpp:316: Skipped\n"
                 "no CUDA device: CUDA driver version is insufficient\n[  SKIPPED ] CudaRun.X (0 ms)\n")
    passed = case("ok", "run", "fine")
    checks = []  # (what, cases, expected rc, lines the output must hold)
    checks.append(("all pass", [passed, passed], 0, ["2 passed, 0 failed, 0 skipped"]))
    checks.append(("a data folder truly absent", [passed, case(
        "data", "notrun", f"SKIP: {absent} is absent", "SKIP_RETURN_CODE=77")], 0,
        ["1 passed, 0 failed, 1 skipped", f"{absent} absent: 1", "unexpected: 0"]))
    checks.append(("a folder said absent that is there", [passed, case(
        "data", "notrun", f"SKIP: {present} is absent", "SKIP_RETURN_CODE=77")], 1,
        ["1 passed, 0 failed, 1 skipped", "UNEXPECTED SKIP data", "unexpected: 1"]))
    checks.append(("a skip nobody explains", [case(
        "odd", "notrun", "SKIP: felt like it", "SKIP_RETURN_CODE=77")], 1,
        ["0 passed, 0 failed, 1 skipped", "UNEXPECTED SKIP odd: SKIP: felt like it"]))
    checks.append(("a failure", [passed, case("bad", "fail", "boom", failure=True)], 1,
                   ["1 passed, 1 failed, 0 skipped", "FAILED bad"]))
    checks.append(("no executable is a failure, not a skip", [case(
        "gone", "notrun", "Unable to find executable: /x", "Unable to find executable")], 1,
        ["0 passed, 1 failed, 0 skipped"]))
    if not gpu:  # without nvidia-smi: a GPU test's skip is expected
        checks.append(("a GPU test without a GPU", [passed, case(
            "CudaRun.X", "notrun", gtest_gpu, "SKIP_REGULAR_EXPRESSION_MATCHED")], 0,
            ["1 passed, 0 failed, 1 skipped", "GPU tests without a GPU: 1", "unexpected: 0"]))
    else:  # with one: the same skip says the GPU is unusable
        checks.append(("a GPU test skipping on a GPU machine", [passed, case(
            "CudaRun.X", "notrun", gtest_gpu, "SKIP_REGULAR_EXPRESSION_MATCHED")], 1,
            ["1 passed, 0 failed, 1 skipped", "UNEXPECTED SKIP CudaRun.X"]))
    # Two ranks under mpirun: the second rank's banner lands between the
    # first rank's "Skipped" and its message (seen on CI).
    nccl_mpi = ("Running main() from gtest_main.cc\n[ RUN      ] CudaNccl.Communicator\n"
                "../test/unit/CudaTest.cpp:618: Skipped\nRunning main() from gtest_main.cc\n"
                "Note: Google Test filter = CudaNccl.*\n[==========] Running 1 test\n"
                "NCCL needs one GPU per rank: 2 ranks, 0 device(s)\n"
                "[  SKIPPED ] CudaNccl.Communicator (0 ms)\n")
    if not gpu:
        checks.append(("a two-rank GPU test with interleaved output", [passed, case(
            "cuda-nccl-mpi", "notrun", nccl_mpi, "SKIP_RETURN_CODE=77")], 0,
            ["1 passed, 0 failed, 1 skipped", "fewer than 2 GPUs: 1", "unexpected: 0"]))
    chromium = bool(shutil.which("chromium") or shutil.which("chromium-browser"))
    browser_skip = case("explain-html-chromium", "notrun",
                        "SKIP: no chromium on PATH (Debian's chromium package; scripts/setup.sh "
                        "installs it)", "SKIP_RETURN_CODE=77")
    if not chromium:
        checks.append(("the browser test without Chromium", [passed, browser_skip], 0,
                       ["1 passed, 0 failed, 1 skipped", "no Chromium: 1", "unexpected: 0"]))
    else:
        checks.append(("the browser test skipping with Chromium there", [passed, browser_skip], 1,
                       ["1 passed, 0 failed, 1 skipped", "UNEXPECTED SKIP explain-html-chromium"]))
    # The two-host MPI test's skip: expected only where namespaces cannot be made.
    sys.path.insert(0, os.path.join(src, "scripts"))
    import importlib.util
    spec = importlib.util.spec_from_file_location("test_summary", script)
    summary_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(summary_module)
    netns_skip = case("runtime-mpi-cross-host", "notrun",
                      "SKIP: cannot create network namespaces: ip netns add: Operation not permitted",
                      "SKIP_RETURN_CODE=77")
    if summary_module.can_make_netns():
        checks.append(("the two-host test skipping where namespaces work", [passed, netns_skip], 1,
                       ["1 passed, 0 failed, 1 skipped", "UNEXPECTED SKIP runtime-mpi-cross-host"]))
    else:
        checks.append(("the two-host test without namespaces", [passed, netns_skip], 0,
                       ["1 passed, 0 failed, 1 skipped", "no network namespaces: 1", "unexpected: 0"]))
    failures = 0
    for what, cases, want_rc, lines in checks:
        rc, out = summary(script, work, cases)
        missing = [l for l in lines if l not in out]
        if rc != want_rc or missing:
            failures += 1
            print(f"FAIL {what}: exit {rc} (want {want_rc}); missing {missing}\n{out}")
        else:
            print(f"ok {what}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
