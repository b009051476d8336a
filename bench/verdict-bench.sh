#!/bin/sh
# Time from a hang to the automatic verdict's line, at scale, with synthetic dumps.
#   bench/verdict-bench.sh BUILD_DIR NRANKS [RING]
# Generates NRANKS dumps of a job whose rank 3 never entered an AllReduce (gen_dumps, RING
# records per ring, default 64: what a peer dump of the episode keeps, NCCL_WATCHDOG_PEER_RECORDS),
# then runs the analyzer as the plugin's automatic verdict runs it (nice 19, -j 2, --out) and
# prints
#   verdict_<N>: analyzer <s> s, <MiB> MiB; line after the timeout: <dumps in> + 1 s settle + <s> s
# The time from the hang to the line is the timeout, then the dumps' arrival (measured at 1,000
# processes by bench/storm.sh), the opener's settle check (once a second) and this analyzer run.
set -eu
build=${1:-build}
n=${2:-10000}
ring=${3:-64}
bin=$build/bin
[ -x "$bin/nccl-watchdog-analyze" ] && [ -x "$bin/gen_dumps" ] || { echo "verdict-bench: build first" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/wd-verdict.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
"$bin/gen_dumps" "$work/dumps" --ranks "$n" --scenario not-entered --ring "$ring"
sync
/usr/bin/time -v nice -n 19 "$bin/nccl-watchdog-analyze" -q -j 2 --out="$work/dumps/verdict-1" \
  "$work/dumps" >"$work/line.txt" 2>"$work/time.txt" || { cat "$work/time.txt" >&2; exit 1; }
secs=$(awk -F': ' '/Elapsed \(wall clock\)/ {
  n = split($2, p, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + p[i]; print s }' "$work/time.txt")
kib=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$work/time.txt")
mib=$(awk -v k="$kib" 'BEGIN { printf "%.1f", k / 1024 }')
size=$(du -sm "$work/dumps" | cut -f1)
echo "verdict-bench: $n dumps, $size MiB; line: $(cut -c1-120 "$work/line.txt")" >&2
echo "verdict_$n: analyzer $secs s, $mib MiB (nice 19, -j 2, $n dumps of $ring records per ring)"
