#!/usr/bin/env bash
# The GPU checks in one run (docs/gpu.md), for the first time a machine with
# an NVIDIA GPU is at hand; under 8 minutes on one GPU with 16 cores:
#
#   build      configure with CUDA (toolkit in /usr/local/cuda) and build the
#              tool, the CUDA gtests and the GEMM benchmark
#   gtests     hetplan-cuda-tests: the CUDA executor against the CPU, plans
#              on CUDA ranks (inference, training, --profile), precisions,
#              fused groups (CudaFusionRun: cuBLASLt epilogues, cuDNN SDPA)
#   nodes      the ONNX node conformance cases on the GPU
#   zoo        examples + model zoo: `hetplan run --device cuda` against
#              `--device cpu` (fp32 1e-3, fp16 1e-2, bf16 3e-2; training)
#   nccl       a 2-rank plan as two threads on GPU 0 (device-resident
#              activations between them) and as two processes sharing GPU 0
#              under mpirun, against the CPU run; NCCL itself (CudaNccl,
#              host and device tensors) when NCCL allows
#              the ranks' devices (it refuses two ranks on one GPU: the plan
#              then runs host-staged over MPI, HETPLAN_NCCL=0)
#   gemm       the executor's GEMMs against cuBLAS on the same shapes
#
# then prints one table. Exit 0 when every step passed, 1 otherwise; exit 0
# with "skipped: no GPU" where nvidia-smi finds none. Logs: $BUILD/gpu-check/.
# Environment: BUILD (default build), JOBS (default nproc), GPU_CHECK_ZOO=0
# to check the shipped examples only.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${BUILD:-build}
JOBS=${JOBS:-$(nproc)}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1 || [ -z "$(nvidia-smi -L 2>/dev/null)" ]; then
  echo "gpu-check: skipped: no GPU (nvidia-smi finds none)"
  exit 0
fi
GPUS=$(nvidia-smi -L | grep -c '^GPU')
echo "gpu-check: $(nvidia-smi -L | head -1) ($GPUS GPU(s)); logs in $BUILD/gpu-check/"
LOGS=$BUILD/gpu-check
mkdir -p "$LOGS"

ROWS=()
FAILED=0
# step NAME DETAIL-FUNCTION COMMAND...: runs COMMAND into $LOGS/NAME.log and
# records a row; DETAIL-FUNCTION prints the row's detail from the log.
step() {
  local name=$1 detail=$2
  shift 2
  local t0=$SECONDS rc
  "$@" >"$LOGS/$name.log" 2>&1
  rc=$?
  local status=ok
  [ $rc -eq 0 ] || { status=FAIL; FAILED=1; }
  ROWS+=("$(printf '%-8s %-5s %5ds  %s' "$name" "$status" $((SECONDS - t0)) "$($detail "$LOGS/$name.log" $rc)")")
  echo "  $name: $status"
}
last_line() { tail -n 1 "$1" | cut -c1-100; }
gtest_summary() {
  local passed skipped failed
  passed=$(grep -o '\[  PASSED  \] [0-9]*' "$1" | grep -o '[0-9]*$' | tail -1)
  skipped=$(grep -o '\[  SKIPPED \] [0-9]*' "$1" | grep -o '[0-9]*$' | tail -1)
  failed=$(grep -c '^\[  FAILED  \] [A-Za-z]' "$1")
  echo "${passed:-0} passed, ${skipped:-0} skipped, ${failed} failed"
}

# --- build -------------------------------------------------------------------
build() {
  cmake -G Ninja -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
    -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit \
    -DHETPLAN_ENABLE_CUDA=ON || return 1
  grep -q 'hetplan runtime: CUDA ON' "$LOGS/build.log" || { echo "CMake found no CUDA toolkit"; return 1; }
  ninja -C "$BUILD" -j "$JOBS" hetplan hetplan-cuda-tests hetplan-cuda-gemm-bench
}
build_detail() { [ "$2" -eq 0 ] && echo "CUDA build in $BUILD" || last_line "$1"; }
step build build_detail build
if [ $FAILED -ne 0 ]; then
  printf '%s\n' "${ROWS[@]}"
  echo "gpu-check: FAILED (build; see $LOGS/build.log)"
  exit 1
fi
BIN=$BUILD/bin/hetplan
TESTS=$BUILD/test/unit/hetplan-cuda-tests

# --- CUDA gtests ---------------------------------------------------------------
# With a device nothing may skip for want of one.
gtests() {
  "$TESTS" --gtest_filter='-CudaNccl.*:CudaRun.NodeCases*' || return 1
  ! grep -q 'no CUDA device' "$LOGS/gtests.log"
}
step gtests gtest_summary gtests

# --- node conformance on the GPU ------------------------------------------------
nodes() {
  "$TESTS" --gtest_filter='CudaRun.NodeCases*:CudaCheck.NodeCases*' || return 1
  if grep -q 'no libonnx-testdata' "$LOGS/nodes.log"; then
    echo "MISSING: libonnx-testdata (scripts/setup.sh installs it)"
    return 1
  fi
  ! grep -q 'no CUDA device' "$LOGS/nodes.log"
}
nodes_detail() { grep -m1 '^MISSING: ' "$1" || gtest_summary "$1"; }
step nodes nodes_detail nodes

# --- GPU vs CPU over the examples and the model zoo -----------------------------
zoo_detail() { grep '^gpu-equivalence:' "$1" || last_line "$1"; }
ZOO=--zoo
[ "${GPU_CHECK_ZOO:-1}" = 0 ] && ZOO=
step zoo zoo_detail "$PY" test/gpu/gpu_equivalence.py --hetplan "$BIN" --work "$BUILD/test/gpu" $ZOO -j 8

# --- 2 ranks as 2 processes on GPU 0 (mpirun) -------------------------------------
nccl() {
  command -v mpirun >/dev/null || { echo "no mpirun (scripts/setup.sh installs openmpi-bin)"; return 1; }
  local w=$BUILD/test/gpu/nccl mpi="mpirun --allow-run-as-root --oversubscribe -np 2"
  mkdir -p "$w"
  "$BIN" compile examples/models/gpt2-tiny.onnx --cluster 2xA100-80G --mode infer --batch 4 --seq 16 \
    --dtype fp32 --pin pp=2,mb=2 --quiet -o "$w/plan" || return 1
  "$PY" -c "import numpy as np; np.save('$w/ids.npy', (np.arange(64) % 50).reshape(4, 16).astype(np.int64))"
  "$BIN" run "$w/plan" --device cpu --input input_ids="$w/ids.npy" --output "$w/cpu" --quiet || return 1
  # The same 2 CUDA ranks as threads of one process: activations pass
  # between them as device tensors (docs/gpu.md, "Device-resident values").
  CUDA_VISIBLE_DEVICES=0 "$BIN" run "$w/plan" --device cuda --input input_ids="$w/ids.npy" --output "$w/threads" \
    --quiet || return 1
  local comm=NCCL
  if [ "$GPUS" -ge 2 ]; then
    $mpi "$TESTS" --gtest_filter='CudaNccl.*' || return 1
    $mpi "$BIN" run "$w/plan" --device cuda --input input_ids="$w/ids.npy" --output "$w/gpu" || return 1
  else
    # NCCL refuses two ranks of one communicator on one GPU: try, then run
    # the same processes host-staged (CUDA compute, MPI transfers).
    if CUDA_VISIBLE_DEVICES=0 $mpi "$BIN" run "$w/plan" --device cuda --input input_ids="$w/ids.npy" \
         --output "$w/gpu" >"$w/nccl.log" 2>&1; then
      cat "$w/nccl.log"
    else
      cat "$w/nccl.log"
      grep -qi 'duplicate GPU\|invalid usage' "$w/nccl.log" || return 1
      comm="MPI (NCCL refuses 2 ranks on 1 GPU)"
      HETPLAN_NCCL=0 CUDA_VISIBLE_DEVICES=0 $mpi -x HETPLAN_NCCL "$BIN" run "$w/plan" --device cuda \
        --input input_ids="$w/ids.npy" --output "$w/gpu" || return 1
    fi
    "$TESTS" --gtest_filter='CudaNccl.*' || return 1 # one rank: all-reduce, barrier
  fi
  "$PY" - "$w" <<'EOF' || return 1
import sys, numpy as np
w = sys.argv[1]
c = np.load(w + "/cpu/logits.npy")
t = float(np.max(np.abs(np.load(w + "/threads/logits.npy") - c)) / np.max(np.abs(c)))
err = float(np.max(np.abs(np.load(w + "/gpu/logits.npy") - c)) / np.max(np.abs(c)))
print(f"2 CUDA ranks as threads vs CPU: max rel err {t:.2e}")
print(f"2 processes on CUDA vs CPU: max rel err {err:.2e}")
sys.exit(0 if max(err, t) <= 1e-3 else 1)
EOF
  echo "transfers: $comm"
}
nccl_detail() {
  local err comm
  err=$(grep -o 'max rel err [0-9.e+-]*' "$1" | tail -1)
  comm=$(grep -o '^transfers: .*' "$1" | tail -1)
  if [ -n "$err" ]; then echo "$err; $comm"
  else grep -m1 'error' "$1" | cut -c1-100 || last_line "$1"; fi
}
step nccl nccl_detail nccl

# --- GEMM-bound benchmark against cuBLAS ---------------------------------------------
gemm_detail() {
  if grep -qE '^(fp32|tf32|fp16|bf16) ' "$1"; then
    grep -E '^(fp32|tf32|fp16|bf16) ' "$1" | awk '{printf "%s %s of %s TF/s; ", $1, $2, $3}'
  else
    last_line "$1"
  fi
}
gemm() {
  "$BUILD/test/unit/hetplan-cuda-gemm-bench" --size 8192 --layers 8 --min-ratio 0.8 || return 1
  ! grep -q '^skipped' "$LOGS/gemm.log"
}
step gemm gemm_detail gemm

echo
printf '%-8s %-5s %6s  %s\n' step result time detail
printf '%s\n' "${ROWS[@]}"
if [ $FAILED -ne 0 ]; then
  echo "gpu-check: FAILED (logs in $LOGS)"
  exit 1
fi
echo "gpu-check: all passed"
