#!/usr/bin/env bash
# The trigger protocol at job scale on one machine: N processes (default 1000) of one
# communicator on N/8 simulated nodes stall together (tests/host/scenario_storm.c, which checks
# one dump per process and one trigger file). Prints its figures line: dumps, stall/peer split,
# time to the last dump, shared file system checks.
#   bench/storm.sh BUILD_DIR [NRANKS] [RING_SIZE]   (ring size default 64; 8192 is the plugin's)
set -euo pipefail
BUILD=$(cd "${1:-build}" && pwd)
SRC=$(cd "$(dirname "$0")/.." && pwd)
export WDH_STORM_RANKS=${2:-1000}
export WDH_STORM_RING=${3:-64}
export WDH_PLUGIN=$BUILD/lib/libnccl-profiler-watchdog.so
export WDH_ANALYZER=$BUILD/bin/nccl-watchdog-analyze
export WDH_SOURCE_DIR=$SRC
[ -x "$BUILD/tests/scenario_storm" ] || { echo "storm: build first (make build)" >&2; exit 1; }
/usr/bin/time -f "storm: wall %e s, peak RSS of the harness %M KiB" "$BUILD/tests/scenario_storm" 2>&1 |
  grep -E '^(storm|HANG|CHECK)'
