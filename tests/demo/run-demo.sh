#!/usr/bin/env bash
# The nccl-watchdog demo: a simulated 4-rank job (2 pipeline stages x 2 data-parallel replicas,
# on two simulated hosts) where one rank stops in its data loader.
# Usage: tests/demo/run-demo.sh BUILD_DIR   (what `make demo` runs)
set -euo pipefail

BUILD=${1:-build}
BUILD=$(cd "$BUILD" && pwd)
# An installed plugin and analyzer (the pip wheel's test) may stand in for the build's, and the
# demo's files may go elsewhere than the build directory.
PLUGIN=${WD_DEMO_PLUGIN:-$BUILD/lib/libnccl-profiler-watchdog.so}
RANKBIN=$BUILD/tests/demo_rank
ANALYZER=${WD_DEMO_ANALYZER:-$BUILD/bin/nccl-watchdog-analyze}
OUTDIR=${WD_DEMO_OUT:-$BUILD}
DUMPS=$OUTDIR/demo-dumps
LOGS=$OUTDIR/demo-logs
NRANKS=4
HANG_RANK=2
HANG_SEQ=40

for f in "$PLUGIN" "$RANKBIN"; do
  [ -e "$f" ] || { echo "demo: $f is missing; build first (make build)" >&2; exit 1; }
done
rm -rf "$DUMPS" "$LOGS"
mkdir -p "$DUMPS" "$LOGS"

bold() { if [ -t 1 ]; then printf '\033[1m%s\033[0m\n' "$*"; else printf '%s\n' "$*"; fi; }

bold "== nccl-watchdog demo: a 4-rank job hangs, and the dumps say why =="
cat <<EOF
Four processes each play one rank of a training job with two pipeline stages and two
data-parallel replicas, on two hosts (node-a: ranks 0-1, node-b: ranks 2-3, simulated with
NCCL_WATCHDOG_HOSTNAME). Each rank is in two communicators: its replica's pipeline (pp_d0, pp_d1:
stage 0 sends its activations to stage 1) and its stage's data-parallel group (dp_p0, dp_p1:
gradient AllReduce). An application thread enqueues and a proxy thread moves the data, exactly as
NCCL drives its profiler plugin; the plugin ($PLUGIN) is loaded as NCCL would load it
(NCCL_PROFILER_PLUGIN=watchdog).
Watchdog settings for the demo: timeout 2 s without progress, checked every 200 ms
(production default: 300 s, every 1 s).

After step #$((HANG_SEQ - 1)), rank $HANG_RANK (stage 0 of replica 1) gets stuck in its data loader.
Its stage 1 (rank 3) waits for activations that never come, so rank 3 never reaches its gradient
AllReduce, in which rank 1 waits; rank 0 waits in its own gradient AllReduce for rank $HANG_RANK.
Three ranks wait in three communicators: one of them is the cause.

EOF

export NCCL_WATCHDOG_DUMP_DIR=$DUMPS
export NCCL_WATCHDOG_TIMEOUT=2s
export NCCL_WATCHDOG_POLL=200ms
export WORLD_SIZE=$NRANKS
export WDH_LOG_ECHO=warn # the plugin's WARN lines in each rank's log, as NCCL prints them
start=$(date +%s.%N)
# The rank that hangs the job is a Python program when Debian's python3 is there: its dumps
# then hold its Python stack, and the report names the line of the "training script".
PYHOST=$BUILD/lib/libwdpyhost.so
PYTHON=/usr/bin/python3
rank_cmd() { # rank dumpdir
  if [ "$1" = "$HANG_RANK" ] && [ -x "$PYTHON" ] && [ -e "$PYHOST" ]; then
    echo "$PYTHON $(dirname "$0")/demo_rank.py $PYHOST $PLUGIN $1 $NRANKS $2 $HANG_SEQ"
  else
    echo "$RANKBIN $PLUGIN $1 $NRANKS $2 $HANG_RANK $HANG_SEQ"
  fi
}
host_of() { if [ "$1" -lt 2 ]; then echo node-a; else echo node-b; fi; }
pids=()
for r in $(seq 0 $((NRANKS - 1))); do
  RANK=$r LOCAL_RANK=$((r % 2)) NCCL_WATCHDOG_HOSTNAME=$(host_of "$r") \
    $(rank_cmd "$r" "$DUMPS") >"$LOGS/rank$r.log" 2>&1 &
  pids+=($!)
done
sleep 1
bold "-- what the ranks are doing"
cat "$LOGS"/rank*.log
echo
echo "(waiting for the watchdogs: 2 s timeout, then dumps...)"
status=0
for i in "${!pids[@]}"; do
  if ! wait "${pids[$i]}"; then
    echo "demo: rank $i exited with an error; its log:" >&2
    cat "$LOGS/rank$i.log" >&2
    status=1
  fi
done
elapsed=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
echo

bold "-- the dumps (in $DUMPS, written after ${elapsed} s)"
"$RANKBIN" --summary "$DUMPS"
echo
cat <<EOF
What happened:
  * Ranks 0, 1 and 3 each had an operation on the network with no progress for 2 s: rank 3 its
    Recv from stage 0 on pp_d1, ranks 0 and 1 their gradient AllReduce on dp_p0 and dp_p1. Their
    watchdogs each wrote a 'stall' dump and dropped a trigger file (trigger-*.trigger) in the
    shared dump directory.
  * Rank $HANG_RANK had nothing in flight, so its own watchdog saw nothing wrong. It noticed the
    trigger files and wrote a 'peer' dump: its main thread is in its data loader wait (with
    python3: the line of demo_rank.py, the "training script", from its Python stack).
  * Every dump has the per-communicator rings (last NCCL events), the open tree of each in-flight
    operation (Coll/P2p -> ProxyOp -> ProxyStep) and the backtraces of all threads.
  * Per communicator, three verdicts blame three ranks; the analyzer follows who waits on whom
    across communicators (rank 1 on rank 3 in dp_p1, rank 3 on rank $HANG_RANK in pp_d1) and its first
    line names the root: rank $HANG_RANK, its host, and the line of the script it is stuck in.
  The same dumps on demand from a live job: kill -USR1 <pid>, or under SLURM
  scancel --signal=USR1 --full <jobid>.

EOF

if [ -x "$ANALYZER" ]; then
  bold "-- the job's own logs: the verdict, with nobody running a command"
  echo "(the process that opened the episode ran the analyzer beside the plugin once every rank"
  echo " had dumped; every rank that dumped logged its first line at WARN, as NCCL's logger prints it)"
  nv=$({ grep -l "verdict of stall episode" "$LOGS"/rank*.log 2>/dev/null || true; } | wc -l)
  { grep -h "verdict of stall episode" "$LOGS"/rank*.log || echo "(no verdict line in the logs)"; } | head -1
  echo "(that line is in the logs of $nv of the $NRANKS ranks; its reports: $(cd "$DUMPS" && ls verdict-1.* 2>/dev/null | tr '\n' ' '))"
  echo
  bold "-- nccl-watchdog-analyze $DUMPS"
  "$ANALYZER" "$DUMPS" || status=1
  echo
  echo "(machine-readable: $ANALYZER --json $DUMPS; timeline: --trace out.json, open in ui.perfetto.dev)"
else
  echo "note: $ANALYZER is not built yet; once it is, it reads every rank's dumps and names the"
  echo "rank and the operation that hung the job (here: rank $HANG_RANK, in its data loader)."
fi

# ---- part 2: the rank that hangs the job is SIGKILLed (the OOM killer, a scheduler) -----------
[ -x "$ANALYZER" ] || exit $status
RINGS=$OUTDIR/demo-rings
DUMPS2=$OUTDIR/demo-dumps-killed
rm -rf "$RINGS" "$DUMPS2" "$LOGS"
mkdir -p "$RINGS" "$DUMPS2" "$LOGS"
echo
bold "== part 2: the same job, but rank $HANG_RANK is killed with SIGKILL =="
cat <<EOF
Now rank $HANG_RANK does not just stall: the OOM killer ends it with SIGKILL after step
#$((HANG_SEQ - 1)). No handler runs, no dump is written. But every process keeps its flight
recorder in a file mapped from node-local memory (NCCL_WATCHDOG_RING_DIR, here $RINGS):
the kernel keeps the pages when the process dies.

EOF
export NCCL_WATCHDOG_DUMP_DIR=$DUMPS2
export NCCL_WATCHDOG_RING_DIR=$RINGS
pids=()
for r in $(seq 0 $((NRANKS - 1))); do
  RANK=$r LOCAL_RANK=$((r % 2)) NCCL_WATCHDOG_HOSTNAME=$(host_of "$r") \
    $(rank_cmd "$r" "$DUMPS2") >"$LOGS/rank$r.log" 2>&1 &
  pids+=($!)
done
sleep 1
kill -KILL "${pids[$HANG_RANK]}"
echo "(kill -9 ${pids[$HANG_RANK]}: rank $HANG_RANK is gone; the others wait for it, then dump)"
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" 2>/dev/null || [ "$i" = "$HANG_RANK" ] || status=1
done
echo
bold "-- left behind: $(ls "$DUMPS2" | grep -c -- '-stall\.json$') stall dumps, and rank $HANG_RANK's ring files (one per communicator)"
ls "$RINGS"
echo
bold "-- nccl-watchdog-analyze $DUMPS2 $RINGS"
"$ANALYZER" "$DUMPS2" "$RINGS" || status=1
echo
echo "(the living ranks removed their ring files at exit; nccl-watchdog-analyze --salvage DIR"
echo " $RINGS turns a ring file into an ordinary 'postmortem' dump)"
exit $status

