#!/usr/bin/env bash
# Runs fuzz targets of a -DHETPLAN_FUZZ=ON build for a number of executions
# each (libFuzzer's -runs) and prints one Markdown row per target: the
# executions libFuzzer counted, the wall time, and the result (no finding,
# or the file a finding was written to). docs/reliability.md, "Runs".
#
#   test/fuzz/run-campaign.sh BUILD-FUZZ RUNS TARGET... (npy plan cluster prompts
#   workload profile model-load model-run onnx-import compile); seeds from test/fuzz/make-seeds.sh
#   in BUILD-FUZZ/seeds, new inputs kept in BUILD-FUZZ/work/<target>.
#   FUZZ_FLAGS adds libFuzzer flags, e.g. FUZZ_FLAGS=-max_len=4096 (the
#   cluster target: a 100 KB YAML file costs a thousand small ones).
set -uo pipefail
build=$1 runs=$2
shift 2
root="$(cd "$(dirname "$0")/../.." && pwd)"
for t in "$@"; do
  bin="$build/test/fuzz/hetplan-fuzz-$t"
  [ -x "$bin" ] || { echo "| \`$t\` | - | - | not built: $bin |"; continue; }
  mkdir -p "$build/work/$t"
  log="$build/work/$t.log"
  start=$(date +%s)
  OMP_NUM_THREADS=1 "$bin" -runs="$runs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 ${FUZZ_FLAGS:-} \
    -artifact_prefix="$build/work/$t-" "$build/work/$t" "$build/seeds/$t" "$root/test/fuzz/corpus/$t" \
    > "$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  if [ "$rc" -eq 0 ]; then
    result="no finding"
  else
    result="finding: $(grep -o "Test unit written to [^ ]*" "$log" | tail -1 | sed 's/Test unit written to //') ($(grep -m1 -o 'ERROR: [A-Za-z]*Sanitizer: [a-z-]*\|runtime error: .*\|ERROR: libFuzzer: [a-z-]*' "$log" | head -1))"
  fi
  printf '| `%s` | %s | %s s | %s |\n' "$t" "${execs:-?}" "$secs" "$result"
done
