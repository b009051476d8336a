#!/usr/bin/env bash
# Instructions per callback in the conformance bench's mix (../shared/conformance, fakenccl.c
# `bench`: a collective's whole life, 90 callbacks with its proxy steps' states), counted by
# callgrind on the thread that plays NCCL, for the empty plugin that returns handles (run.py
# bench's baseline: every driver path runs), the ring floor and this plugin.
#   bench/conformance-count.sh BUILD_DIR     (after scripts/conformance.sh BUILD_DIR bench)
# Prints one line; "added" is this plugin's count less the empty plugin's (the measure).
set -euo pipefail
BUILD=${1:-build}
C=$BUILD/conformance
OURS=$BUILD/lib/libnccl-profiler-watchdog.so
N=${WD_CG_LIFECYCLES:-20000}
if ! command -v valgrind >/dev/null; then echo "conformance mix (callgrind): n/a (valgrind missing)"; exit 0; fi
for f in "$C/fakenccl" "$C/libempty_handles.so" "$C/libfloor_ring.so" "$OURS"; do
  [ -e "$f" ] || { echo "conformance-count: $f missing (run scripts/conformance.sh $BUILD bench first)" >&2; exit 1; }
done
TMP=$(mktemp -d "${TMPDIR:-/tmp}/wd-cgmix-XXXXXX")
trap 'rm -rf "$TMP"' EXIT
declare -A IR CBS
for p in empty floor ours; do
  case $p in empty) so=$C/libempty_handles.so ;; floor) so=$C/libfloor_ring.so ;; ours) so=$OURS ;; esac
  # The bench's warm-up (N/10) runs too: every lifecycle counts, as the totals are divided by all.
  NCCL_WATCHDOG_TIMEOUT=300 NCCL_WATCHDOG_POLL=1 NCCL_WATCHDOG_DIR="$TMP/d" \
    valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$TMP/cg.$p" \
    "$C/fakenccl" "$so" bench "$N" >"$TMP/out.$p" 2>"$TMP/log.$p"
  cb=$(sed -n 's/.*lifecycle, \([0-9.]*\) callbacks.*/\1/p' "$TMP/out.$p")
  CBS[$p]=$cb
  # Thread 1 plays NCCL's application and proxy threads (the bench drives the proxy inline).
  ir=$(callgrind_annotate "$TMP/cg.$p-01" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }')
  IR[$p]=$ir
done
# Per callback of the plugin's own mix (the floor asks for more event types than ours: 96).
awk -v e="${IR[empty]}" -v f="${IR[floor]}" -v o="${IR[ours]}" -v n="$N" -v cb="${CBS[ours]}" -v fcb="${CBS[floor]}" 'BEGIN {
  l = n + n / 10; d = l * cb; fd = l * fcb
  printf "conformance mix (callgrind, %d lifecycles, NCCL'"'"'s thread): ours %.1f instructions per callback (%.0f callbacks), floor %.1f (%.0f), empty %.1f; added: ours %.1f, floor %.1f (goal: ours <= 120)\n", n, o / d, cb, f / fd, fcb, e / d, (o - e) / d, (f - e) / fd }'
