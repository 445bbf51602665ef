#!/usr/bin/env bash
# Regenerates the ODS-generated references in docs/generated/ from a build.
set -euo pipefail
cd "$(dirname "$0")/.."
ninja -C build mlir-doc
mkdir -p docs/generated
cp build/docs/Dialects/HetDialect.md build/docs/Passes/HetPasses.md docs/generated/
echo "updated docs/generated/"
