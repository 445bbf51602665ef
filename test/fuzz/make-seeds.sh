#!/usr/bin/env bash
# Builds the seed corpora of the fuzz targets (docs/reliability.md) into OUT
# (one folder per target) from small files of the repository, Debian's ONNX
# node test models (libonnx-testdata, when installed), plans compiled with
# the normal build's `hetplan`, and .npy files written by numpy.
#   test/fuzz/make-seeds.sh BUILD OUT      e.g. build build-fuzz/seeds
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
build="$(cd "$1" && pwd)"
out="$2"
mkdir -p "$out"/{npy,plan,model-load,model-run,cluster,onnx-import,prompts,workload,profile,compile}
cp "$src"/models/ort-genai/prompts.jsonl "$out/prompts/requests.jsonl"
cp "$src"/test/fuzz/corpus/workload/* "$out/workload/"
cp "$src"/test/fuzz/corpus/profile/* "$out/profile/"
small() { find "$@" -type f -size -64k 2>/dev/null; }

# Models: the repository's small ONNX files, then one model per ONNX node
# test (each exercises one op: attributes, shapes, types).
for f in $(small "$src/test" "$src/examples" "$src/models" -name '*.onnx'); do
  n="$(echo "${f#$src/}" | tr / _)"
  for t in model-load model-run onnx-import compile; do cp "$f" "$out/$t/$n"; done
done
# compile: whole real models are its best seeds (the mutations are
# semantic); the node tests add one op each.
for f in $(small "$src/models/zoo" "$src/models/shipped" -name '*.onnx'); do
  cp "$f" "$out/compile/$(echo "${f#$src/}" | tr / _)"
done
for f in $(small "$src/test" -name '*.onnxtext'); do
  cp "$f" "$out/onnx-import/$(echo "${f#$src/}" | tr / _)"
done
node=/usr/share/libonnx-testdata/data/node
if [ -d "$node" ]; then
  for d in "$node"/*/; do
    f="$d/model.onnx"
    [ -f "$f" ] && [ "$(stat -c %s "$f")" -lt 65536 ] || continue
    n="node_$(basename "$d").onnx"
    for t in model-load model-run onnx-import compile; do cp "$f" "$out/$t/$n"; done
  done
fi

# Clusters: YAML and JSON files, and inline specs.
for f in $(small "$src/test/cluster" "$src/examples" -name '*.yaml' -o -name '*.yml' -o -name '*.json'); do
  cp "$f" "$out/cluster/$(echo "${f#$src/}" | tr / _)"
done
cp "$src/passes/cluster/device_catalog.yaml" "$out/cluster/catalog.yaml"
printf '4xA100-80G,12xT4' > "$out/cluster/spec1"
printf '2x8xH100;net=400gbps' > "$out/cluster/spec2"

# Plans: whole files and bare bodies (the target reads both).
hp="$build/bin/hetplan"
m="$src/examples/models/gpt2-tiny.onnx"
i=0
for args in "--cluster 2xA100-80G,4xT4 --batch 32 --seq 128" \
            "--cluster 4xL4 --mode infer --batch 16 --seq 64" \
            "--cluster 2xA100-80G,4xT4 --batch 32 --seq 128 --strategy dp-even" \
            "--cluster 1xT4 --batch 4 --seq 16"; do
  i=$((i + 1))
  # shellcheck disable=SC2086
  if "$hp" compile "$m" $args -o "$out/plan/plan$i.hpl" --quiet > /dev/null 2>&1; then
    tail -c +21 "$out/plan/plan$i.hpl" > "$out/plan/plan$i.body"
  fi
done

# .npy: every element type, versions 1.0 and 2.0, a scalar and an empty array.
/usr/bin/python3 - "$out/npy" <<'PY'
import io, sys, numpy as np
out = sys.argv[1]
for t in ['f2', 'f4', 'f8', 'i1', 'i2', 'i4', 'i8', 'u1', 'u2', 'u4', 'u8', '?']:
    np.save(f'{out}/{t.replace("?", "b1")}.npy', np.arange(6).reshape(2, 3).astype(t))
np.save(f'{out}/scalar.npy', np.float32(1.5))
np.save(f'{out}/empty.npy', np.zeros((0, 3), np.float32))
b = io.BytesIO(); np.lib.format.write_array(b, np.ones((2, 2), np.float32), version=(2, 0))
open(f'{out}/v2.npy', 'wb').write(b.getvalue())
PY
for t in npy plan model-load model-run cluster onnx-import compile; do
  echo "$t: $(ls "$out/$t" | wc -l) seeds"
done
