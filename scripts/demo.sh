#!/usr/bin/env bash
# The main job on a shipped example: set up, build, import the example model
# and print a summary of its het IR.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh > /dev/null
model=${1:-examples/models/gpt2-tiny.onnx}
build/bin/hetplan summary "$model"
