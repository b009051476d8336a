#!/usr/bin/env bash
# Real-NCCL end-to-end tests of nccl-watchdog on one GPU (see docs/gpu-testing.md).
#
# Prints one "PASS scenario" or "FAIL scenario: why" line per scenario (details indented below it)
# and a final "N passed, N failed" line; exits 1 when something failed. Without a visible GPU it
# prints one "SKIP gpu tests: no GPU visible (why)" line and exits 0.
set -u
set -o pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)

usage() {
  cat <<'EOF'
usage: tests/gpu/run.sh [options]

  --build-dir DIR   build tree to use, built first when something is missing (default: build)
  --bundle DIR      use the plugin and analyzer from a tests/gpu/bundle.sh output instead
  --plugin PATH     the profiler plugin (default: BUILD/lib/libnccl-profiler-watchdog.so)
  --analyzer PATH   the analyzer (default: BUILD/bin/nccl-watchdog-analyze, used when present)
  --e2e PATH        the nccl_e2e program (default: BUILD/bin/nccl_e2e)
  --nccl-home DIR   NCCL to build nccl_e2e against (default: PyTorch's NCCL wheel if present)
  --no-build        never build; fail if something is missing
  --only LIST       comma-separated scenarios (healthy,skip,skip3,signal,graph,twocomms,
                    torch_hang,lightning_fit)
  --timeout S       watchdog timeout given to the ranks (default 5)
  --poll S          watchdog poll interval (default 0.5)
  --work-dir DIR    where each scenario keeps its dumps and logs (default: a new temp dir)
  -h, --help        this text

Environment for tests of this script: NCCL_E2E_NVIDIA_SMI (command used instead of nvidia-smi),
NCCL_E2E_DEV (device node checked instead of /dev/nvidia0).
EOF
}

BUILD=$REPO/build
BUNDLE=
PLUGIN=
ANALYZER=
E2E=
NCCL_HOME_ARG=${NCCL_HOME:-}
NO_BUILD=0
ONLY=
TIMEOUT_S=5
POLL_S=0.5
WORK_ROOT=

while (($#)); do
  case $1 in
    --build-dir) BUILD=$2; shift 2 ;;
    --bundle) BUNDLE=$2; shift 2 ;;
    --plugin) PLUGIN=$2; shift 2 ;;
    --analyzer) ANALYZER=$2; shift 2 ;;
    --e2e) E2E=$2; shift 2 ;;
    --nccl-home) NCCL_HOME_ARG=$2; shift 2 ;;
    --no-build) NO_BUILD=1; shift ;;
    --only) ONLY=$2; shift 2 ;;
    --timeout) TIMEOUT_S=$2; shift 2 ;;
    --poll) POLL_S=$2; shift 2 ;;
    --work-dir) WORK_ROOT=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

# --- Is there a GPU at all? One line and success when not: this is not a failure of the code.
gpu_reason=
gpu_visible() {
  local smi=${NCCL_E2E_NVIDIA_SMI:-nvidia-smi} dev=${NCCL_E2E_DEV:-/dev/nvidia0} smi_state n
  if [[ -n ${CUDA_VISIBLE_DEVICES+set} && ( -z $CUDA_VISIBLE_DEVICES || $CUDA_VISIBLE_DEVICES == -1 ) ]]; then
    gpu_reason="CUDA_VISIBLE_DEVICES='$CUDA_VISIBLE_DEVICES'"
    return 1
  fi
  if command -v "$smi" >/dev/null 2>&1; then
    n=$(timeout 30 "$smi" -L 2>/dev/null | grep -c '^GPU ')
    [[ ${n:-0} -gt 0 ]] && return 0
    smi_state="nvidia-smi -L lists no GPU"
  else
    smi_state="no nvidia-smi"
  fi
  [[ -e $dev ]] && return 0
  gpu_reason="$smi_state, no $dev"
  return 1
}
if ! gpu_visible; then
  echo "SKIP gpu tests: no GPU visible ($gpu_reason)"
  exit 0
fi

ALL_SCENARIOS=(healthy skip skip3 signal graph twocomms torch_hang lightning_fit)
if [[ -n $ONLY ]]; then
  IFS=, read -r -a SCENARIOS <<<"$ONLY"
  for s in "${SCENARIOS[@]}"; do
    [[ " ${ALL_SCENARIOS[*]} " == *" $s "* ]] || { echo "run.sh: unknown scenario '$s'" >&2; exit 2; }
  done
else
  SCENARIOS=("${ALL_SCENARIOS[@]}")
fi

if [[ -z $WORK_ROOT ]]; then
  WORK_ROOT=$(mktemp -d "${TMPDIR:-/tmp}/nccl-watchdog-gpu.XXXXXX")
fi
mkdir -p "$WORK_ROOT" || exit 1
WORK_ROOT=$(cd "$WORK_ROOT" && pwd)

passed=0
failed=0
pass() { echo "PASS $1"; passed=$((passed + 1)); shift; for l in "$@"; do echo "  $l"; done; }
fail() { echo "FAIL $1: $2"; failed=$((failed + 1)); shift 2; for l in "$@"; do echo "  $l"; done; }
fail_all() { # why, details...
  local s
  for s in "${SCENARIOS[@]}"; do fail "$s" "$@"; done
  echo "$passed passed, $failed failed"
  exit 1
}

# --- Where things are.
LIBPATH=
if [[ -n $BUNDLE ]]; then
  BUNDLE=$(cd "$BUNDLE" && pwd) || exit 1
  : "${PLUGIN:=$BUNDLE/lib/libnccl-profiler-watchdog.so}"
  : "${ANALYZER:=$BUNDLE/bin/nccl-watchdog-analyze}"
  [[ -z $E2E && -x $BUNDLE/bin/nccl_e2e ]] && E2E=$BUNDLE/bin/nccl_e2e
  LIBPATH=$BUNDLE/lib
  # RUNPATH $ORIGIN covers the plugin's own libraries, not theirs (libunwind -> liblzma).
  export LD_LIBRARY_PATH=$LIBPATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
else
  : "${PLUGIN:=$BUILD/lib/libnccl-profiler-watchdog.so}"
  : "${ANALYZER:=$BUILD/bin/nccl-watchdog-analyze}"
  : "${E2E:=$BUILD/bin/nccl_e2e}"
fi

# PyTorch's NCCL wheel: the NCCL the torch check uses, so the C scenarios use it too by default.
if [[ -z $NCCL_HOME_ARG ]]; then
  NCCL_HOME_ARG=$(python3 - 2>/dev/null <<'EOF'
import os
try:
    import nvidia.nccl as m
    for p in m.__path__:
        if os.path.exists(os.path.join(p, "include", "nccl.h")):
            print(p)
            break
except Exception:
    pass
EOF
  )
fi

BUILD_LOG=$WORK_ROOT/build.log
build_full() {
  [[ -f $BUILD/CMakeCache.txt ]] ||
    cmake -S "$REPO" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      ${NCCL_HOME_ARG:+-DNCCL_HOME="$NCCL_HOME_ARG"} >>"$BUILD_LOG" 2>&1 || return 1
  cmake --build "$BUILD" -j "$(nproc)" --target nccl-profiler-watchdog nccl_e2e >>"$BUILD_LOG" 2>&1 || return 1
  cmake --build "$BUILD" -j "$(nproc)" --target nccl-watchdog-analyze >>"$BUILD_LOG" 2>&1 || true
}

# nccl_e2e alone, against this machine's CUDA and NCCL (for a bundle made on another machine).
LOCAL_E2E_BUILT=0
build_e2e_here() {
  local dir=$WORK_ROOT/e2e-build cuda=${CUDA_HOME:-/usr/local/cuda} nccl=${NCCL_HOME_ARG:-${CUDA_HOME:-/usr/local/cuda}}
  LOCAL_E2E_BUILT=1
  if command -v cmake >/dev/null 2>&1; then
    cmake -S "$HERE" -B "$dir" ${NCCL_HOME_ARG:+-DNCCL_HOME="$NCCL_HOME_ARG"} >>"$BUILD_LOG" 2>&1 &&
      cmake --build "$dir" --target nccl_e2e >>"$BUILD_LOG" 2>&1 && E2E=$dir/bin/nccl_e2e && return 0
  fi
  # No CMake: the program is one C file.
  local lib=$nccl/lib
  [[ -d $nccl/lib64 && ! -d $nccl/lib ]] && lib=$nccl/lib64
  local libnccl=$lib/libnccl.so
  [[ -e $libnccl ]] || libnccl=$lib/libnccl.so.2
  mkdir -p "$dir/bin"
  ${CC:-cc} -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -isystem "$cuda/include" -isystem "$nccl/include" \
    "$HERE/nccl_e2e.c" -o "$dir/bin/nccl_e2e" -L"$cuda/lib64" -lcudart "$libnccl" \
    -Wl,-rpath,"$cuda/lib64" -Wl,-rpath,"$lib" -ldl -lm >>"$BUILD_LOG" 2>&1 && E2E=$dir/bin/nccl_e2e
}

if ((!NO_BUILD)); then
  if [[ -z $BUNDLE && ( ! -f $PLUGIN || ! -x $E2E ) ]]; then
    build_full || true
  fi
  [[ -x $E2E ]] || build_e2e_here || true
fi
[[ -f $PLUGIN ]] || fail_all "no plugin at $PLUGIN" "build log: $BUILD_LOG"
[[ -x $E2E ]] || fail_all "no nccl_e2e program (CUDA runtime or NCCL headers/libraries not found?)" \
  "build log: $BUILD_LOG"

# --- Can the pieces load here? Say exactly what is missing.
missing_libs() { LD_LIBRARY_PATH=${LIBPATH:+$LIBPATH:}${LD_LIBRARY_PATH:-} ldd "$1" 2>/dev/null | awk '/not found/ {print $1}' | tr '\n' ' '; }
miss=$(missing_libs "$PLUGIN")
if [[ -n $miss ]]; then
  fail_all "the plugin cannot be loaded: missing shared libraries: ${miss% }" \
    "$PLUGIN" \
    "make a bundle on the build machine (tests/gpu/bundle.sh BUILD OUT) and pass --bundle OUT"
fi

probe_out=$("$E2E" probe 2>&1)
probe_rc=$?
if ((probe_rc != 0)) && ((!LOCAL_E2E_BUILT)) && ((!NO_BUILD)); then
  # Built elsewhere (another CUDA or NCCL): build it against this machine's and try again.
  if build_e2e_here; then
    probe_out=$("$E2E" probe 2>&1)
    probe_rc=$?
  fi
fi
E2E_BROKEN=
if ((probe_rc != 0)); then
  # The C scenarios cannot run; the torch check has its own way to the GPU and still runs.
  miss=$(missing_libs "$E2E")
  E2E_BROKEN="nccl_e2e cannot use the GPU: $(echo "$probe_out" | tail -n 1)${miss:+ (missing: ${miss% })}"
fi

HAVE_ANALYZER=0
if [[ -x $ANALYZER ]]; then
  miss=$(missing_libs "$ANALYZER")
  if [[ -n $miss ]]; then
    echo "note: analyzer $ANALYZER cannot run here (missing ${miss% }): dumps are checked without it"
  else
    HAVE_ANALYZER=1
  fi
fi
echo "gpu tests: $(printf '%s\n' "$probe_out" | paste -s -d ';' | sed 's/;/; /g'); work dir $WORK_ROOT"

CHECK_ARGS=()
((HAVE_ANALYZER)) && CHECK_ARGS+=(--analyzer "$ANALYZER")
[[ -n $LIBPATH ]] && CHECK_ARGS+=(--lib-path "$LIBPATH")

# Indented tail of the NCCL warnings of a failed scenario: usually the real reason.
nccl_warnings() {
  local logs=$1/logs
  [[ -d $logs ]] || return 0
  grep -h -E 'WARN|PROFILER|[Pp]rofiler' "$logs"/* 2>/dev/null | tail -n 8
}

run_c_scenario() { # label scenario [nccl_e2e args...]
  local label=$1 sc=$2 work=$WORK_ROOT/$1 out rc line
  shift 2
  if [[ -n $E2E_BROKEN ]]; then
    fail "$label" "$E2E_BROKEN" "$E2E" "build log: $BUILD_LOG"
    return
  fi
  out=$(timeout --kill-after=10 900 "$E2E" --plugin "$PLUGIN" --work-dir "$work" \
    --timeout "$TIMEOUT_S" --poll "$POLL_S" "$@" "$sc" 2>"$WORK_ROOT/$label.stderr")
  rc=$?
  printf '%s\n' "$out" >"$WORK_ROOT/$label.stdout"
  if ((rc != 0)); then
    line=$(printf '%s\n' "$out" | grep -m1 -o 'FAIL: .*' | sed 's/^FAIL: //')
    [[ -z $line ]] && line="nccl_e2e exited with status $rc$( ((rc == 124 || rc == 137)) && echo ' (timed out)')"
    local details=()
    while IFS= read -r l; do details+=("$l"); done < <(
      tail -n 5 "$WORK_ROOT/$label.stderr"
      nccl_warnings "$work"
    )
    fail "$label" "$line" "${details[@]}" "work dir: $work"
    return
  fi
  local summary check_out
  summary=$(printf '%s\n' "$out" | grep -m1 -o 'PASS (.*)' | sed 's/^PASS (//; s/)$//')
  check_out=$(python3 "$HERE/check_dumps.py" "${CHECK_ARGS[@]}" "$work" 2>&1)
  rc=$?
  if ((rc == 0)); then
    local notes=()
    [[ -n $summary ]] && notes+=("$summary")
    while IFS= read -r l; do [[ -n $l ]] && notes+=("$l"); done <<<"$check_out"
    pass "$label" "${notes[@]}"
  else
    line=$(printf '%s\n' "$check_out" | grep -m1 '^FAIL' | sed 's/^FAIL: //')
    local details=()
    while IFS= read -r l; do details+=("$l"); done < <(printf '%s\n' "$check_out" | grep -v -F -x "FAIL: $line" | tail -n 12)
    fail "$label" "${line:-dump check failed (status $rc)}" "${details[@]}" "work dir: $work"
  fi
}

run_torch() {
  local work=$WORK_ROOT/torch out rc line
  local args=(--plugin "$PLUGIN" --work-dir "$work" --timeout "$TIMEOUT_S" --poll "$POLL_S")
  ((HAVE_ANALYZER)) && args+=(--analyzer "$ANALYZER")
  [[ -n $LIBPATH ]] && args+=(--lib-path "$LIBPATH")
  out=$(timeout --kill-after=10 600 python3 "$HERE/torch_hang.py" "${args[@]}" 2>"$WORK_ROOT/torch.stderr")
  rc=$?
  printf '%s\n' "$out" >"$WORK_ROOT/torch.stdout"
  line=$(printf '%s\n' "$out" | grep -m1 -E '^(PASS|FAIL|SKIP) ')
  local notes=()
  while IFS= read -r l; do [[ -n $l && $l != "$line" ]] && notes+=("$l"); done <<<"$out"
  case $line in
    PASS*) pass torch_hang "${notes[@]}" ;;
    SKIP*) echo "$line" ;;
    FAIL*) fail torch_hang "${line#FAIL torch_hang: }" "${notes[@]}" "work dir: $work" ;;
    *) fail torch_hang "torch_hang.py exited with status $rc and no verdict" \
         "$(tail -n 5 "$WORK_ROOT/torch.stderr")" ;;
  esac
}

# PyTorch Lightning's fit() puts back the handlers it read through CPython: the process lives.
run_lightning() {
  local work=$WORK_ROOT/lightning out line
  out=$(timeout --kill-after=10 500 python3 "$HERE/lightning_fit.py" --plugin "$PLUGIN" --work-dir "$work" \
        --poll "$POLL_S" 2>"$WORK_ROOT/lightning.stderr")
  line=$(printf '%s\n' "$out" | grep -m1 -E '^(PASS|FAIL|SKIP) ')
  local notes=()
  while IFS= read -r l; do [[ -n $l && $l != "$line" ]] && notes+=("$l"); done <<<"$out"
  case $line in
    PASS*) pass lightning_fit "${notes[@]}" ;;
    SKIP*) echo "$line" ;;
    FAIL*) fail lightning_fit "${line#FAIL lightning_fit: }" "${notes[@]}" "work dir: $work" ;;
    *) fail lightning_fit "lightning_fit.py gave no verdict" "$(tail -n 5 "$WORK_ROOT/lightning.stderr")" ;;
  esac
}

for s in "${SCENARIOS[@]}"; do
  case $s in
    healthy | skip | signal | graph | twocomms) run_c_scenario "$s" "$s" ;;
    skip3) run_c_scenario skip3 skip --ranks 3 --skip-rank 1 ;;
    torch_hang) run_torch ;;
    lightning_fit) run_lightning ;;
  esac
done

echo "$passed passed, $failed failed"
((failed == 0))
