#!/usr/bin/env bash
# Sets up, builds and runs every test (lit, GoogleTest, import conformance).
# The last line counts passed, failed and skipped tests (scripts/test-summary.py):
# a skipped test is never a pass, and a skip this machine does not explain
# (e.g. ../shared/models present yet a test says it is absent) fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
cd build
rm -f conformance-*.txt
# ctest runs tests side by side on few cores: OpenMP threads (oneDNN's, the
# CPU kernels') that spin while they wait would steal the cores the other
# tests need (docs/runtime.md, "Kernels"). libgomp reads this at start-up.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
# The CPU suite runs every rank on the CPU, GPU host or not (the CUDA tests
# pick their device themselves; scripts/gpu-check.sh runs the GPU checks).
export HETPLAN_DEVICE="${HETPLAN_DEVICE:-cpu}"
set +e
rm -f ctest-junit.xml
ctest --output-on-failure -j "$(nproc)" --output-junit ctest-junit.xml 2>&1 | tee ctest.log
rc=${PIPESTATUS[0]}
set -e
echo
echo "== ONNX import conformance counts"
cat conformance-*.txt 2>/dev/null || echo "(no conformance summary written)"
echo
echo "== ctest summary"
sed -n '/tests passed/,$p' ctest.log
echo
echo "== passed / failed / skipped"
if [ -f ctest-junit.xml ]; then
  python3 ../scripts/test-summary.py ctest-junit.xml || rc=1
else
  echo "no ctest-junit.xml: ctest did not finish"
  rc=1
fi
exit "$rc"
