#!/usr/bin/env bash
# Regenerates the ODS-generated references in docs/generated/ and the op
# table's docs/ops.md from a build.
set -euo pipefail
cd "$(dirname "$0")/.."
ninja -C build mlir-doc hetplan-op-docs
mkdir -p docs/generated
cp build/docs/Dialects/HetDialect.md build/docs/Passes/HetPasses.md docs/generated/
build/ops/hetplan-op-docs build/docs/ops.md.new
if grep -q '| ? |' build/docs/ops.md.new; then
  # docs/ops.md's CUDA columns need a build with the CUDA backend
  echo "updated docs/generated/; docs/ops.md left as it is (this build has no CUDA backend)"
  exit 0
fi
mv build/docs/ops.md.new docs/ops.md
echo "updated docs/generated/ and docs/ops.md"
