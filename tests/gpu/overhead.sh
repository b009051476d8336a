#!/usr/bin/env bash
# Overhead of nccl-watchdog on a real NCCL: small-message allreduce latency (8 B to 1 MiB) with no
# plugin, with the empty plugin (bench/empty_plugin.c, target wd-bench-empty) and with ours, in
# the same run, rounds interleaved so drift hits every configuration alike. Prints a Markdown
# table for docs/performance.md. Without a visible GPU it prints one SKIP line and exits 0.
#
# usage: tests/gpu/overhead.sh [--build-dir DIR | --bundle DIR] [--e2e PATH] [--plugin PATH]
#          [--empty PATH] [--rounds N] [--iters N] [--ranks N] [--min-bytes B] [--max-bytes B]
set -u
set -o pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)

BUILD=$REPO/build
BUNDLE=
E2E=
PLUGIN=
EMPTY=
ROUNDS=5
ITERS=200
RANKS=2
MIN_BYTES=8
MAX_BYTES=1048576
while (($#)); do
  case $1 in
    --build-dir) BUILD=$2; shift 2 ;;
    --bundle) BUNDLE=$2; shift 2 ;;
    --e2e) E2E=$2; shift 2 ;;
    --plugin) PLUGIN=$2; shift 2 ;;
    --empty) EMPTY=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --iters) ITERS=$2; shift 2 ;;
    --ranks) RANKS=$2; shift 2 ;;
    --min-bytes) MIN_BYTES=$2; shift 2 ;;
    --max-bytes) MAX_BYTES=$2; shift 2 ;;
    -h | --help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "overhead.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done

smi=${NCCL_E2E_NVIDIA_SMI:-nvidia-smi}
if ! { command -v "$smi" >/dev/null 2>&1 && timeout 30 "$smi" -L 2>/dev/null | grep -q '^GPU '; } &&
   [[ ! -e ${NCCL_E2E_DEV:-/dev/nvidia0} ]]; then
  echo "SKIP gpu overhead: no GPU visible"
  exit 0
fi

LIBPATH=
if [[ -n $BUNDLE ]]; then
  : "${PLUGIN:=$BUNDLE/lib/libnccl-profiler-watchdog.so}"
  : "${EMPTY:=$BUNDLE/lib/libwd-bench-empty.so}"
  : "${E2E:=$BUNDLE/bin/nccl_e2e}"
  LIBPATH=$(cd "$BUNDLE/lib" && pwd)
else
  : "${PLUGIN:=$BUILD/lib/libnccl-profiler-watchdog.so}"
  : "${EMPTY:=$BUILD/lib/libwd-bench-empty.so}"
  : "${E2E:=$BUILD/bin/nccl_e2e}"
fi
for f in "$PLUGIN" "$E2E"; do
  [[ -e $f ]] || { echo "overhead.sh: missing $f (build it, or pass --bundle/--e2e/--plugin)" >&2; exit 1; }
done
CONFIGS=(none ours)
if [[ -e $EMPTY ]]; then
  CONFIGS=(none empty ours)
else
  echo "overhead.sh: no empty plugin at $EMPTY: the table has no 'empty' column" >&2
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/nccl-watchdog-overhead.XXXXXX")
plugin_of() {
  case $1 in none) echo none ;; empty) echo "$EMPTY" ;; ours) echo "$PLUGIN" ;; esac
}

# Rotate the order each round: no configuration always runs first (warm GPU clocks, caches).
for ((round = 0; round < ROUNDS; round++)); do
  n=${#CONFIGS[@]}
  for ((k = 0; k < n; k++)); do
    cfg=${CONFIGS[$(((k + round) % n))]}
    # Production watchdog settings for ours: the default 300 s timeout and 1 s poll.
    if ! LD_LIBRARY_PATH=${LIBPATH:+$LIBPATH:}${LD_LIBRARY_PATH:-} WD_EMPTY_MASK=0x65f \
      timeout 900 "$E2E" bench --plugin "$(plugin_of "$cfg")" --ranks "$RANKS" --iters "$ITERS" \
      --min-bytes "$MIN_BYTES" --max-bytes "$MAX_BYTES" --timeout 300 --poll 1 \
      --work-dir "$WORK/$cfg-$round" >"$WORK/$cfg-$round.out" 2>"$WORK/$cfg-$round.err"; then
      echo "overhead.sh: the $cfg run failed (round $round):" >&2
      tail -n 5 "$WORK/$cfg-$round.out" "$WORK/$cfg-$round.err" >&2
      exit 1
    fi
    echo "overhead.sh: round $((round + 1))/$ROUNDS, $cfg done (${SECONDS} s)" >&2
  done
done

empty_mask=unknown
[[ -e $EMPTY ]] && { grep -q -a WD_EMPTY_MASK "$EMPTY" && empty_mask=same || empty_mask=none; }

python3 - "$WORK" "$ROUNDS" "$empty_mask" "${CONFIGS[@]}" <<'EOF'
import re, statistics, sys
work, rounds, empty_mask, configs = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
lat = {c: {} for c in configs}
info = ""
for c in configs:
    for r in range(rounds):
        for line in open(f"{work}/{c}-{r}.out"):
            if line.startswith("BENCH ") and not info:
                info = re.sub(r" plugin=\S+", "", line.split(" ", 1)[1].strip())
            m = re.match(r"LAT (\d+) ([\d.]+)", line)
            if m:
                lat[c].setdefault(int(m[1]), []).append(float(m[2]))
med = {c: {b: statistics.median(v) for b, v in lat[c].items()} for c in configs}

def size(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB" if b >= 1 << 10 else f"{b} B"

names = {"none": "no plugin", "empty": "empty plugin", "ours": "nccl-watchdog"}
print(f"Allreduce latency on a real NCCL ({info}).")
print(f"{rounds} interleaved rounds; each value is the median over rounds of the median of 7 timed")
print("blocks. Socket transport over loopback, all ranks on one GPU (one NCCL_HOSTID per rank).")
print("nccl-watchdog runs with its defaults (timeout 300 s, poll 1 s).")
if "empty" in configs and empty_mask != "same":
    print("Note: the empty plugin leaves NCCL's event mask at 0, so with it NCCL emits no events;")
    print("the 'empty' column measures loading a plugin, not the callbacks.")
print()
head = "| message | " + " | ".join(f"{names[c]} (µs)" for c in configs) + " | ours / none |"
if "empty" in configs:
    head += " ours / empty |"
print(head)
print("|" + "---:|" * (head.count("|") - 1))
for b in sorted(med["none"]):
    row = f"| {size(b)} | " + " | ".join(f"{med[c].get(b, float('nan')):.2f}" for c in configs)
    row += f" | {med['ours'][b] / med['none'][b]:.3f} |"
    if "empty" in configs:
        row += f" {med['ours'][b] / med['empty'][b]:.3f} |"
    print(row)
EOF
echo
echo "raw results: $WORK"
