#!/bin/sh
# Builds the runtime and the embedding stress test with AddressSanitizer +
# LeakSanitizer in a separate runtime-only build folder (no MLIR, no CUDA)
# and runs it. With a `hetplan` compiler binary as third argument, also
# compiles a pipelined training plan and a tensor-parallel one for gpt2-tiny
# and runs two training steps of each against one rank under the
# sanitizers, also with recomputation, ZeRO-3 and optimizer offload set. ctest runtime-asan calls this; by hand:
#   test/runtime-asan.sh . build/asan [build/bin/hetplan]
set -eu
SRC=$(cd "${1:-.}" && pwd)
BUILD=${2:-$SRC/build/asan}
GEN=
if command -v ninja >/dev/null 2>&1; then GEN="-G Ninja"; fi
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  mkdir -p "$BUILD"
  # shellcheck disable=SC2086
  cmake -S "$SRC" -B "$BUILD" $GEN -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DHETPLAN_BUILD_COMPILER=OFF -DHETPLAN_ENABLE_CUDA=OFF -DHETPLAN_BUILD_EXAMPLES=OFF \
    -DHETPLAN_SANITIZE=ON >"$BUILD/configure.log" 2>&1 || { cat "$BUILD/configure.log"; exit 1; }
fi
HETPLAN=${3:-}
TARGETS=hetplan-session-stress
if [ -n "$HETPLAN" ]; then TARGETS="$TARGETS hetplan-plan-equivalence"; fi
# shellcheck disable=SC2086
cmake --build "$BUILD" --target $TARGETS -j "${HETPLAN_ASAN_JOBS:-2}"
BIN="$BUILD/test/embed/hetplan-session-stress"
if ! nm "$BIN" 2>/dev/null | grep -q __asan_report; then
  echo "runtime-asan: $BIN is not instrumented (HETPLAN_SANITIZE off?)" >&2
  exit 1
fi
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:abort_on_error=0:detect_stack_use_after_return=1} \
  "$BIN" --threads 8 --requests 25 \
  "$SRC/examples/models/gpt2-tiny.onnx" "$SRC/examples/models/bert-tiny.onnx"
if [ -n "$HETPLAN" ]; then
  WORK="$BUILD/plans"
  mkdir -p "$WORK"
  printf 'nodes:\n  - name: a\n    devices: [{type: CPU, count: 2}]\n  - name: b\n    devices: [{type: CPU, count: 2}]\n    speed_factors: {CPU: 0.5}\n' > "$WORK/cpus.yaml"
  for PIN in pp=2,mb=2 pp=1,mb=2,tp=2; do
    "$HETPLAN" compile "$SRC/examples/models/gpt2-tiny.onnx" --mode train --cluster "$WORK/cpus.yaml" \
      --batch 12 --seq 8 --pin "$PIN" --dtype fp32 --quiet -o "$WORK/train.plan" > /dev/null
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:abort_on_error=0:detect_stack_use_after_return=1} \
      "$BUILD/test/embed/hetplan-plan-equivalence" "$WORK/train.plan" --steps 2
    # The training memory options (recomputation, ZeRO-3, offload) on the same plan.
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:abort_on_error=0:detect_stack_use_after_return=1} \
      "$BUILD/test/embed/hetplan-plan-equivalence" "$WORK/train.plan" --steps 2 --zero 3 --recompute all --offload
  done
fi
echo "runtime-asan: no AddressSanitizer/LeakSanitizer reports"
