#!/usr/bin/env bash
# Installs every Debian package hetplan needs to build and test. Idempotent:
# packages already installed are skipped, and apt-get runs only when some are
# missing. Run as root (or with sudo) on Debian 12.
set -euo pipefail

packages=(
  # build
  cmake ninja-build ccache g++ git
  # MLIR/LLVM 22 (compiler side only; the runtime never links them)
  llvm-22-dev libmlir-22-dev mlir-22-tools llvm-22-tools
  # ONNX and protobuf (importer)
  libonnx-dev libprotobuf-dev protobuf-compiler
  # CPU runtime kernels: cblas_sgemm (multithreaded OpenBLAS); oneDNN JITs
  # MatMul/Gemm/Conv for the host ISA (AVX2/AVX-512)
  libopenblas-dev libdnnl-dev
  # SHA-256 of model files (OpenSSL's libcrypto, SHA-NI where the CPU has it)
  libssl-dev
  # optional: `mpirun -np N hetplan run` (MpiCommunicator) and its test
  libopenmpi-dev openmpi-bin
  # tests: GoogleTest, ONNX conformance data, Python ONNX for model generators
  libgtest-dev libonnx-testdata python3 python3-onnx python3-numpy
  # tests: `hetplan explain --html` reports opened in headless Chromium
  chromium
  # the Python package (python/: pybind11 module, pytest tests) and the
  # installed package's pkg-config file (ctest install-embed)
  python3-dev python3-pybind11 python3-pytest pkg-config
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages are installed"
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
