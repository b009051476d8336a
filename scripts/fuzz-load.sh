#!/usr/bin/env bash
# The dump reader under libFuzzer for a bounded time (CI: 60 s): any bytes are loaded or skipped
# with a reason, never a crash, a leak or a read out of bounds (tools/fuzz/fuzz_load.c). The
# corpus starts from gen_dumps' synthetic dumps. WD_FUZZ_SECONDS sets the time.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang >/dev/null || { echo "fuzz: clang not found (apt-get install clang)"; exit 2; }
CC=clang cmake -S . -B build-fuzz -DWD_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz -j "$(nproc)" --target fuzz_load gen_dumps >/dev/null
corpus=build-fuzz/corpus
rm -rf "$corpus" "$corpus-gen" && mkdir -p "$corpus" "$corpus-gen"
for sc in healthy not-entered mismatch network-stall; do
  build-fuzz/bin/gen_dumps "$corpus-gen/$sc" --ranks=2 --scenario=$sc --ring=16 >/dev/null
done
find "$corpus-gen" -name '*.json' | head -20 | while read -r f; do cp "$f" "$corpus/"; done
build-fuzz/bin/fuzz_load -max_total_time="${WD_FUZZ_SECONDS:-60}" -rss_limit_mb=2048 \
  -max_len=1048576 -print_final_stats=1 "$corpus" 2>&1 | tail -12
