#!/usr/bin/env bash
# The main job on a shipped example: set up, build, then plan the shipped
# GPT-2-shaped model for training on a mixed cluster (2 A100s beside 4 T4s),
# print the plan's summary, and execute one training step of that plan on
# CPU threads (one per planned device; random tokens and labels).
# Arguments go to `hetplan compile` instead.
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
echo "Running one training step of the plan on 6 CPU threads (batch 1024 x 128):"
/usr/bin/python3 - <<'PY'
import numpy as np
rng = np.random.default_rng(0)
np.save("build/demo_input_ids.npy", rng.integers(0, 512, (1024, 128), dtype=np.int64))
np.save("build/demo_labels.npy", rng.integers(0, 512, (1024, 128), dtype=np.int64))
PY
build/bin/hetplan run build/gpt2-tiny.plan --ranks 6 --input input_ids=build/demo_input_ids.npy \
  --labels build/demo_labels.npy --output build/gpt2-tiny-step
echo
echo "Explain it:  build/bin/hetplan explain build/gpt2-tiny.plan --timeline build/gpt2-tiny.svg"
