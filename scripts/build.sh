#!/usr/bin/env bash
# Configures and builds hetplan into ./build (Release, Ninja, ccache if any).
# Extra arguments go to cmake (e.g. -DHETPLAN_ENABLE_CUDA=OFF).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -G Ninja -S . -B build \
  -DCMAKE_BUILD_TYPE=Release \
  -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
  -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit \
  "$@" > build.log 2>&1 || { cat build.log; exit 1; }
ninja -C build
