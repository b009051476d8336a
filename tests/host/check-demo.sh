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
# Here-strings, not `printf | grep -q`: under pipefail, grep -q leaving early makes printf's write
# of a long report fail (SIGPIPE), and the check with it.
if [ -x "$build/bin/nccl-watchdog-analyze" ]; then
  jobs=$(grep '^JOB:' <<<"$out")
  # The first line of the report names the root across communicators: global rank 2, its host.
  grep -q '^JOB: root cause rank 0 of pp_d1 (global rank 2 on host node-b' <<<"$out" ||
    { echo "check-demo: the report's first line does not name global rank 2 on node-b as the root"; exit 1; }
  grep -q 'Chain: rank 0 of dp_p1 waits in AllReduce' <<<"$jobs" ||
    { echo "check-demo: the job verdict does not start from dp_p1"; exit 1; }
  # With Debian's python3, rank 2 is a Python program: the report names its line.
  if [ -x /usr/bin/python3 ] && [ -e "$build/lib/libwdpyhost.so" ]; then
    grep -q 'now in Python demo_rank.py:[0-9]* in wait_for_data_loader' <<<"$jobs" ||
      { echo "check-demo: the first line does not name rank 2's Python frame"; exit 1; }
  fi
  # The job's own logs carry the automatic verdict (no command run), naming the same root.
  grep -q '^NCCL WARN verdict of stall episode 1: JOB: root cause rank 0 of pp_d1 (global rank 2 on host node-b' <<<"$out" ||
    { echo "check-demo: no rank logged the automatic verdict naming global rank 2"; exit 1; }
  # Part 2: rank 2 SIGKILLed, named from its ring file.
  part2=$(sed -n '/== part 2/,$p' <<<"$out")
  grep -q '^JOB: root cause rank 0 of pp_d1 (global rank 2 on host node-b.*: died: only its post-mortem ring file is left' <<<"$part2" ||
    { echo "check-demo: part 2: the analyzer did not name the SIGKILLed rank 2 (died) from its ring file"; exit 1; }
  # Its ring file still holds its last operation (records written before the watchdog allocated
  # the file's rings whole are found where they wrapped).
  grep -q '^rank 0 of "pp_d1" (global rank 2 on host node-b, pid [0-9]*) was last in: Send' <<<"$part2" ||
    { echo "check-demo: part 2: the dead rank's ring file does not show its last Send"; exit 1; }
  # The hung Recv is named without a sequence number (point-to-point operations have none).
  grep -q '^  stuck in Recv: in flight on 1 (1)' <<<"$part2" ||
    { echo "check-demo: part 2: pp_d1's stuck Recv is not reported as 'stuck in Recv: in flight on 1'"; exit 1; }
  [ "$(ls "$build/demo-rings" | grep -c '\.ring$')" -eq 2 ] ||
    { echo "check-demo: part 2: expected exactly rank 2's two ring files in demo-rings"; exit 1; }
fi
# Dumps are in one subdirectory per host (demo-dumps/node-a, demo-dumps/node-b).
names=$(find "$build/demo-dumps" -name '*.json' -printf '%f\n' -o -name '*.json.gz' -printf '%f\n' | sed 's/\.gz$//')
n=$(printf '%s\n' "$names" | grep -Ec -- '-(stall|peer)\.json$')
[ "$n" -ge 4 ] || { echo "check-demo: only $n dumps in $build/demo-dumps"; exit 1; }
# Three ranks stall at about the same time and each posts a trigger: a process answers a burst
# once, so no rank writes more than its own stall dump plus one peer dump.
for pid in $(printf '%s\n' "$names" | sed -n 's/^.*-\([0-9][0-9]*\)-[0-9]\{4\}-\(stall\|peer\)\.json$/\1/p' | sort -u); do
  k=$(printf '%s\n' "$names" | grep -Ec -- "-$pid-[0-9]{4}-(stall|peer)\.json$")
  [ "$k" -le 2 ] || { echo "check-demo: pid $pid wrote $k dumps for one hang"; exit 1; }
  p=$(printf '%s\n' "$names" | grep -Ec -- "-$pid-[0-9]{4}-peer\.json$")
  [ "$p" -le 1 ] || { echo "check-demo: pid $pid answered $p triggers of one burst"; exit 1; }
done
echo "check-demo: ok (${took}s, $n dumps)"
