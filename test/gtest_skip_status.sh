#!/bin/sh
# Runs a command whose output is one or more GoogleTest runs (a gtest binary
# on every rank of mpirun) and exits 77, ctest's SKIP_RETURN_CODE, when it
# succeeded and every test it ran was skipped (gtest itself exits 0 then);
# its own exit code otherwise. Unlike SKIP_REGULAR_EXPRESSION, which ctest
# honours whatever the exit code, a rank that fails still fails the test.
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ "$rc" -eq 0 ] && printf '%s\n' "$out" | grep -q '\[  SKIPPED \]' &&
  ! printf '%s\n' "$out" | grep -q '\[       OK \]'; then
  exit 77
fi
exit "$rc"
