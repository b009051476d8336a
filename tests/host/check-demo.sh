#!/usr/bin/env bash
# ctest wrapper for the demo: it must exit 0 within its budget, and the analyzer (when built)
# must name rank 2 as the rank that never entered the collective.
# Usage: check-demo.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
src=$1 build=$2
start=$(date +%s)
out=$("$src/tests/demo/run-demo.sh" "$build" 2>&1)
rc=$?
printf '%s\n' "$out"
took=$(( $(date +%s) - start ))
[ "$rc" -eq 0 ] || { echo "check-demo: run-demo.sh exited $rc"; exit 1; }
[ "$took" -le 30 ] || { echo "check-demo: the demo took ${took}s (budget 30s)"; exit 1; }
if [ -x "$build/bin/nccl-watchdog-analyze" ]; then
  printf '%s\n' "$out" | grep -Eq 'rank 2 +not_entered' ||
    { echo "check-demo: the analyzer did not name rank 2 (not_entered)"; exit 1; }
fi
n=$(ls "$build/demo-dumps" | grep -Ec -- '-(stall|peer)\.json$')
[ "$n" -ge 4 ] || { echo "check-demo: only $n dumps in $build/demo-dumps"; exit 1; }
echo "check-demo: ok (${took}s, $n dumps)"
