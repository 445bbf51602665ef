#!/usr/bin/env bash
# The main job: set up, build, then
#  1. plan GPT-2 XL (1.56 B parameters, shapes only: generated without
#     weights) for training on a mixed cluster, 2 H100 + 4 A100-40G + 8 L4,
#     batch 512 x 1024, and print the plan beside its baselines (the best
#     single GPU type, an even data-parallel split, an even pipeline) with
#     the plan's predicted gain over each;
#  2. run one training step of a small GPT-2 of the same family (6 blocks,
#     random weights, tokens and labels) as a plan with that plan's
#     structure (its stages, the same devices' workers in each, the same
#     micro-batches, layers cut in the same proportions) on 14 CPU threads,
#     one per planned device;
#  3. write the XL plan's report (explain --html): one page to open in a
#     browser with the cluster, the stages, memory, timeline and baselines.
# Arguments go to `hetplan compile` instead. HETPLAN_BUILD_DIR=DIR: use the
# hetplan already built there (no setup, no build; the `demo` test).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${HETPLAN_BUILD_DIR:-build}
if [ -z "${HETPLAN_BUILD_DIR:-}" ]; then
  scripts/setup.sh
  scripts/build.sh > /dev/null
fi
if [ $# -gt 0 ]; then
  exec $B/bin/hetplan compile "$@"
fi
PY=/usr/bin/python3
CLUSTER=2xH100,4xA100-40G,8xL4
D=$B/demo
mkdir -p $D
[ -f $D/gpt2-xl.onnx ] ||
  $PY models/gen_transformer.py --family gpt2 --config gpt2-xl --weights none -o $D/gpt2-xl.onnx > /dev/null
[ -f $D/gpt2-small6.onnx ] ||
  $PY models/gen_transformer.py --family gpt2 --config gpt2-tiny --layers 6 -o $D/gpt2-small6.onnx > /dev/null

echo "== 1. GPT-2 XL, training, on $CLUSTER: the plan and its baselines"
$B/bin/hetplan compile $D/gpt2-xl.onnx --allow-missing-weights --cluster $CLUSTER \
  --mode train --batch 512 --seq 1024 -o $D/gpt2-xl.plan --quiet

# The XL plan's structure for the small model: the same stages, workers
# (cluster ranks) and micro-batches; layer cuts at the same fractions.
$B/bin/hetplan explain $D/gpt2-xl.plan --json > $D/gpt2-xl.json
$B/bin/hetplan compile $D/gpt2-small6.onnx --cluster $CLUSTER --batch 512 --seq 128 \
  --json --quiet > $D/small-free.json
D=$D $PY - <<'PY'
import json, os
d = os.environ["D"]
xl = json.load(open(d + "/gpt2-xl.json"))
small = json.load(open(d + "/small-free.json"))
lx, ls = xl["layers"], small["layers"]
stages, last = [], -1
for i, st in enumerate(xl["stages"]):
    left = len(xl["stages"]) - 1 - i          # stages after this one
    cut = round((st["last_layer"] + 1) * ls / lx) - 1
    cut = max(last + 1, min(cut, ls - 1 - left))
    stages.append({"workers": [w["ranks"] for w in st["workers"]], "last_layer": cut})
    last = cut
json.dump({"micro_batches": xl["micro_batches"], "tensor_parallel": 1, "shares": "speed",
           "stages": stages}, open(d + "/layout.json", "w"))
import numpy as np
rng = np.random.default_rng(0)
np.save(d + "/input_ids.npy", rng.integers(0, 512, (512, 128), dtype=np.int64))
np.save(d + "/labels.npy", rng.integers(0, 512, (512, 128), dtype=np.int64))
PY
echo
echo "== 2. The same structure on a small GPT-2 (6 blocks), run for one training step"
$B/bin/hetplan compile $D/gpt2-small6.onnx --cluster $CLUSTER --batch 512 --seq 128 \
  --layout $D/layout.json -o $D/gpt2-small6.plan --quiet | sed -n '1,/^  stage  devices/p;/^  [0-9] /p'
RANKS=$($PY -c "import json, sys; print(json.load(open(sys.argv[1]))['devices'])" $D/gpt2-xl.json)
echo
echo "Running one training step of it on $RANKS CPU threads, one per planned device (batch 512 x 128):"
$B/bin/hetplan run $D/gpt2-small6.plan --ranks "$RANKS" --input input_ids=$D/input_ids.npy \
  --labels $D/labels.npy --output $D/gpt2-small6-step
echo
echo "== 3. The plan report"
$B/bin/hetplan explain $D/gpt2-xl.plan --html $D/gpt2-xl.html | tail -1
echo "Explain them:  $B/bin/hetplan explain $D/gpt2-xl.plan [--timeline $D/gpt2-xl.svg]"
