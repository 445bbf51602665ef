#!/usr/bin/env bash
# The main job on a shipped example: set up, build, then plan the shipped
# GPT-2-shaped model for training on a mixed cluster (2 A100s beside 4 T4s)
# and print the plan's summary. Arguments go to `hetplan compile` instead.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh > /dev/null
if [ $# -gt 0 ]; then
  exec build/bin/hetplan compile "$@"
fi
build/bin/hetplan compile examples/models/gpt2-tiny.onnx \
  --cluster 2xA100-80G,4xT4 --mode train --batch 1024 --seq 128 \
  -o build/gpt2-tiny.plan
echo
echo "Explain it:  build/bin/hetplan explain build/gpt2-tiny.plan --timeline build/gpt2-tiny.svg"
