#!/usr/bin/env bash
# The conformance families (cases written from NCCL's and PyTorch's source, kept outside the
# project in ../shared/conformance) against a build: every family, every case; a FAIL not listed
# in tests/conformance/known-failures.txt (each entry says why it is left failing) fails the run.
# usage: scripts/conformance.sh [BUILD] [FAMILY...]
#   FAMILY: run drift topo teardown slowlink restart hostile longrun nodes graphs bench
# hostile's junk_asan runs an ASan+UBSan analyzer: build-asan's (configured as `make test-asan`
# does, so that suite reuses it) is built here when missing.
# WD_CONFORMANCE_SRC overrides where the cases are read from.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
shift || true
case "$build" in /*) ;; *) build="$root/$build" ;; esac
src=${WD_CONFORMANCE_SRC:-$root/../shared/conformance}
if [ ! -f "$src/run.py" ]; then
  echo "conformance: SKIP: no conformance cases at $src (set WD_CONFORMANCE_SRC)"
  exit 0
fi
lib="$build/lib/libnccl-profiler-watchdog.so"
ana="$build/bin/nccl-watchdog-analyze"
[ -f "$lib" ] && [ -x "$ana" ] || { echo "conformance: build $build first (make build)"; exit 2; }
# The cases find the project's docs from the plugin's path (the part before /build/).
case "$lib" in */build/*) ;; *) echo "conformance: the build directory must be named build"; exit 2 ;; esac

# shared/ is read-only in CI: build a copy. A lane (below) re-enters with WD_CONFORMANCE_LANE
# set: the copy and the results folder are its parent's.
work="$build/conformance"
results="$build/conformance-results"
if [ -z "${WD_CONFORMANCE_LANE:-}" ]; then
  rm -rf "$work" && cp -r "$src" "$work" && chmod -R u+w "$work"
  make -s -C "$work" >"$work/make.log" 2>&1 || { cat "$work/make.log"; echo "conformance: cases failed to build"; exit 2; }
  rm -rf "$results" && mkdir -p "$results"
fi

families=("$@")
[ ${#families[@]} -gt 0 ] || families=(run drift topo teardown slowlink restart hostile longrun nodes graphs)
runpy_lists=("exports healthy hang signal pxn badinput reload fork multirank slow notreached graph graphhang mismatch"
  real multi postmortem scale "adversarial autoverdict v7tag pystack")

run_family() { # name, command...: output to $results/name.txt, summary to $results/name.log
  local name=$1
  shift
  local t0=$SECONDS
  {
    echo "== conformance $name"
    "$@" 2>&1 | tee "$results/$name.txt" | grep -E '^(PASS|FAIL|probe|t3|kept)' | cut -c1-400
    echo "   ($((SECONDS - t0)) s)"
  } >"$results/$name.log"
  cat "$results/$name.log"
}

# One unit of work: a family, or one of run.py's lists (run0..run4).
run_unit() {
  local u=$1
  case "$u" in
  run[0-9])
    # shellcheck disable=SC2086
    run_family "$u" python3 "$work/run.py" --lib "$lib" --ana "$ana" ${runpy_lists[${u#run}]} ;;
  bench) run_family bench python3 "$work/run.py" --lib "$lib" --ana "$ana" bench ;;
  drift | topo | teardown | slowlink | restart | longrun | nodes | graphs)
    run_family "$u" python3 "$work/$u.py" --lib "$lib" --ana "$ana" ;;
  hostile)
    run_family hostile python3 "$work/hostile.py" --lib "$lib" --ana "$ana" \
      --asan-ana "$root/build-asan/bin/nccl-watchdog-analyze" ;;
  esac
}

# A lane re-entered in its own mount namespace: its units, one after the other, and no more.
if [ -n "${WD_CONFORMANCE_LANE:-}" ]; then
  for u in "${families[@]}"; do run_unit "$u" >/dev/null; done
  exit 0
fi

units=()
for f in "${families[@]}"; do
  case "$f" in
  run) for i in "${!runpy_lists[@]}"; do units+=("run$i"); done ;;
  bench | drift | topo | teardown | slowlink | restart | hostile | longrun | nodes | graphs) units+=("$f") ;;
  *) echo "conformance: unknown family $f"; exit 2 ;;
  esac
done

# hostile's junk_asan runs an ASan+UBSan analyzer: built first (not beside timed cases), in
# build-asan as `make test-asan` configures it, so that suite reuses it.
if printf '%s\n' "${units[@]}" | grep -qx hostile && [ ! -x "$root/build-asan/bin/nccl-watchdog-analyze" ]; then
  WD_WITH_SANITIZERS=1 "$root/scripts/install-deps.sh"
  cmake -S "$root" -B "$root/build-asan" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWD_WERROR=ON \
    -DWD_SANITIZE=address,undefined >/dev/null &&
    cmake --build "$root/build-asan" -j "$(nproc)" --target nccl-watchdog-analyze >/dev/null ||
    { echo "conformance: the ASan analyzer failed to build"; exit 2; }
fi

# Three lanes side by side: the families mostly wait (timeouts of 1-2 s, processes asleep in a
# hang; a whole serial run used 2.4 min of CPU in 24 min), so three share the two cores; each
# lane's cases run in order. Alone, after them: what loads the machine (run4: 200 processes at
# once) and the benchmark. WD_CONFORMANCE_LANES=1 runs everything one after the other.
lanes=${WD_CONFORMANCE_LANES:-3}
lane_of() {
  case "$1" in
  run4 | bench) echo tail ;;
  run[0-9] | drift | topo | teardown) echo a ;;
  restart | hostile | nodes) echo b ;;
  *) echo c ;;
  esac
}
lane_a=() lane_b=() lane_c=() tail_units=()
for u in "${units[@]}"; do
  l=$(lane_of "$u")
  if [ "$lanes" -lt 2 ] || [ "$l" = tail ]; then tail_units+=("$u")
  elif [ "$l" = a ] || { [ "$lanes" -lt 3 ] && [ "$l" = c ]; }; then lane_a+=("$u")
  elif [ "$l" = b ]; then lane_b+=("$u")
  else lane_c+=("$u"); fi
done
# Each lane with a /dev/shm of its own where this runs as root (CI): the cases list, count and
# clean what they left under /dev/shm, walking it, and a directory another lane's case removed
# in the middle of that walk failed a case that had nothing to do with it (FileNotFoundError).
# A private tmpfs in a mount namespace of the lane's own; else the machine's /dev/shm, shared.
private_shm=0
if [ "$(id -u)" = 0 ] && [ "${WD_CONFORMANCE_SHARED_SHM:-0}" = 0 ] &&
  unshare --mount --propagation private sh -c 'mount -t tmpfs -o mode=1777 tmpfs /dev/shm' 2>/dev/null; then
  private_shm=1
fi
run_lane() { # name, units...
  local name=$1
  shift
  [ $# -gt 0 ] || return 0
  if [ "$private_shm" = 1 ]; then
    WD_CONFORMANCE_LANE=$name unshare --mount --propagation private sh -c \
      'mount -t tmpfs -o mode=1777 tmpfs /dev/shm && exec "$@"' lane "$root/scripts/conformance.sh" "$build" "$@"
  else
    for u in "$@"; do run_unit "$u" >/dev/null; done
  fi
}
echo "== conformance: lanes' /dev/shm $([ "$private_shm" = 1 ] && echo "one each (mount namespaces)" || echo "shared")"

t_all=$SECONDS
if [ $((${#lane_a[@]} + ${#lane_b[@]} + ${#lane_c[@]})) -gt 0 ]; then
  echo "== conformance lanes: [${lane_a[*]}] beside [${lane_b[*]}] beside [${lane_c[*]}]"
  run_lane a "${lane_a[@]}" &
  pa=$!
  run_lane b "${lane_b[@]}" &
  pb=$!
  run_lane c "${lane_c[@]}" &
  pc=$!
  wait "$pa" "$pb" "$pc"
  for u in "${lane_a[@]}" "${lane_b[@]}" "${lane_c[@]}"; do cat "$results/$u.log"; done
fi
for u in "${tail_units[@]}"; do run_unit "$u"; done
echo "== conformance: $((SECONDS - t_all)) s in all"

# Judge: every FAIL must be a known one; a known one that passed is reported (the list shrinks).
known="$root/tests/conformance/known-failures.txt"
python3 - "$results" "$known" <<'PY'
import glob, os, re, sys
results, known_path = sys.argv[1], sys.argv[2]
known = {}
if os.path.exists(known_path):
    for line in open(known_path):
        line = line.split("#", 1)[0].strip()
        if line:
            fam, case = line.split()[:2]
            known[(fam, case)] = True
fails, passes, unexpected = [], 0, []
for f in sorted(glob.glob(os.path.join(results, "*.txt"))):
    fam = os.path.basename(f)[:-4]
    fam = "run" if fam.startswith("run") else fam
    seen = 0
    for line in open(f, errors="replace"):
        m = re.match(r"(PASS|FAIL) (\S+?):", line)
        if not m:
            continue
        seen += 1
        if m.group(1) == "PASS":
            passes += 1
            if (fam, m.group(2)) in known:
                print(f"conformance: {fam} {m.group(2)} passed and may leave known-failures.txt")
        else:
            fails.append((fam, m.group(2)))
            if (fam, m.group(2)) not in known:
                unexpected.append(line.strip()[:600])
    if seen == 0:
        unexpected.append(f"{fam}: no case ran ({f})")
print(f"conformance: {passes} passed, {len(fails)} failed ({sum(1 for x in fails if x in known)} known)")
for u in unexpected:
    print("conformance: UNEXPECTED " + u)
sys.exit(1 if unexpected else 0)
PY
