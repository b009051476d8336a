#!/usr/bin/env bash
# The plugin library as NCCL and an installer see it: it exports exactly ncclProfiler_v4/v5/v6/v7
# (ASan builds add their own bookkeeping symbols, ignored), the generic libnccl-profiler.so name
# points at it, and `cmake --install --prefix` puts both in the prefix.
# Usage: check-library.sh BUILD_DIR
set -euo pipefail
build=$1
lib=$build/lib/libnccl-profiler-watchdog.so
exports=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -v '^__odr_asan\.' | sort | tr '\n' ' ')
[ "$exports" = "ncclProfiler_v4 ncclProfiler_v5 ncclProfiler_v6 ncclProfiler_v7 " ] ||
  { echo "FAIL exports: got '$exports'"; exit 1; }
[ "$(readlink "$build/lib/libnccl-profiler.so")" = libnccl-profiler-watchdog.so ] ||
  { echo "FAIL build-tree libnccl-profiler.so link"; exit 1; }
if readelf -d "$lib" | grep -E 'RUNPATH|RPATH' | grep -q ':\]\|\[:'; then
  echo "FAIL: empty entry in the run path (the loader would search the current directory)"; exit 1
fi
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
libdir=$(dirname "$(find "$prefix" -name libnccl-profiler-watchdog.so | head -n 1)")
[ -f "$libdir/libnccl-profiler-watchdog.so" ] || { echo "FAIL install: no library"; exit 1; }
[ "$(readlink "$libdir/libnccl-profiler.so")" = libnccl-profiler-watchdog.so ] ||
  { echo "FAIL install: libnccl-profiler.so link missing in the prefix"; exit 1; }
echo "1 passed, 0 failed"
