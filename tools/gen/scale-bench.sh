#!/bin/sh
# Scale benchmark of the analyzer: generate synthetic dumps for N ranks (default 4096, ring 2000
# records per communicator), analyze them under /usr/bin/time -v, and print
#   analyze_<N>: <seconds> s, <MiB> MiB
# Usage: scale-bench.sh [BUILD_DIR or its bin/] [NRANKS] [SCENARIO] [TPxPPxDP]
#   with a layout, a 3-D parallel job (3 communicators per rank; NRANKS is ignored), e.g.
#   scale-bench.sh build 0 job-root 8x16x32
# Target (issue 5): 4096 ranks in under 30 s and under 2 GiB. The phases' times (--timings) show
# what the job verdict adds.
set -eu
bin=${1:-build}
[ -x "$bin/bin/nccl-watchdog-analyze" ] && bin=$bin/bin
n=${2:-4096}
scenario=${3:-not-entered}
work=$(mktemp -d "${TMPDIR:-/tmp}/wd-scale.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM

if [ $# -ge 4 ]; then
  "$bin/gen_dumps" "$work/dumps" --layout "$4" --scenario "$scenario" --ring 2000
  n=$(ls "$work/dumps" | grep -v '^trigger-' | grep -c '\.json$' || true)
else
  "$bin/gen_dumps" "$work/dumps" --ranks "$n" --scenario "$scenario" --ring 2000
fi
sync # measure the analyzer, not the write-back of the files just generated
/usr/bin/time -v "$bin/nccl-watchdog-analyze" --timings --json "$work/dumps" >"$work/report.json" \
  2>"$work/time.txt" || { cat "$work/time.txt" >&2; exit 1; }
secs=$(awk -F': ' '/Elapsed \(wall clock\)/ {
  n = split($2, p, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + p[i]; print s }' \
  "$work/time.txt")
kib=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$work/time.txt")
mib=$(awk -v k="$kib" 'BEGIN { printf "%.1f", k / 1024 }')
size=$(du -sm "$work/dumps" | cut -f1)
summary=$(grep -m1 '"summary"' "$work/report.json" | cut -c1-160)
echo "dumps: $n files, $size MiB; $summary" >&2
grep '^timings:' "$work/time.txt" >&2 || true
echo "analyze_$n: $secs s, $mib MiB"
