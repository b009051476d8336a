#!/usr/bin/env bash
# gpu.args: what can be checked of the GPU tests without a GPU. Usage: test_args.sh NCCL_E2E RUN_SH
# nccl_e2e's help, argument validation (its --check-args self-test and the real error paths),
# --dry-run, and run.sh's skip path when no GPU is visible.
# ok and bad always succeed, so "test && ok || bad" is a plain if/else here.
# shellcheck disable=SC2015
set -u
E2E=$1
RUN_SH=$2
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
failures=0
checks=0
ok() { checks=$((checks + 1)); }
bad() { checks=$((checks + 1)); failures=$((failures + 1)); echo "FAIL: $*"; }

# expect_run NAME WANT_RC GREP_PATTERN -- command...: exit status and one line of output
expect_run() {
  local name=$1 want=$2 pat=$3 out rc
  shift 4
  out=$("$@" 2>&1)
  rc=$?
  if [[ $rc != "$want" ]]; then
    bad "$name: exit $rc, expected $want; output: $(echo "$out" | head -n 3)"
  elif [[ -n $pat ]] && ! grep -q -E -- "$pat" <<<"$out"; then
    bad "$name: output lacks /$pat/: $(echo "$out" | head -n 3)"
  else
    ok
  fi
}

# The binary must not need a GPU for any of this: hide every device from CUDA.
export CUDA_VISIBLE_DEVICES=
unset NCCL_PROFILER_PLUGIN

expect_run self-test 0 'check-args: ([0-9]+) of \1 cases passed' -- "$E2E" --check-args
expect_run help 0 'usage: nccl_e2e' -- "$E2E" --help
for s in healthy skip signal graph twocomms bench probe; do
  expect_run "help lists $s" 0 "^  $s " -- "$E2E" --help
done
expect_run no-args 2 'no scenario given' -- "$E2E"
expect_run bad-scenario 2 "unknown scenario 'nope'" -- "$E2E" nope
expect_run bad-option 2 "unknown option '--nope'" -- "$E2E" --nope healthy
expect_run bad-ranks 2 '--ranks must be' -- "$E2E" --ranks 0 healthy
expect_run missing-value 2 'needs a value' -- "$E2E" healthy --timeout
expect_run poll-vs-timeout 2 'must be shorter' -- "$E2E" skip --timeout 1 --poll 2
expect_run skip-rank-range 2 'not a rank of a 2-rank job' -- "$E2E" skip --skip-rank 2
expect_run skip-needs-plugin 2 'pass --plugin PATH' -- "$E2E" skip
expect_run missing-plugin 1 'does not exist' -- "$E2E" skip --plugin "$HERE/no-such-plugin.so" \
  --work-dir "$(mktemp -d)/w"

# --dry-run: the plan and each rank's environment, no GPU touched.
plan=$("$E2E" --dry-run --ranks 3 --plugin /opt/p.so --timeout 2 --poll 0.25 --work-dir /x skip 2>&1)
rc=$?
if [[ $rc != 0 ]]; then
  bad "dry-run: exit $rc: $plan"
else
  ok
  hostids=$(grep -o 'NCCL_HOSTID=[^ ]*' <<<"$plan" | sort -u | wc -l)
  [[ $hostids == 3 ]] && ok || bad "dry-run: expected 3 distinct NCCL_HOSTID values, got $hostids"
  for kv in NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo NCCL_PROFILER_PLUGIN=/opt/p.so \
            NCCL_WATCHDOG_DUMP_DIR=/x/dumps NCCL_WATCHDOG_TIMEOUT=2000ms NCCL_WATCHDOG_POLL=250ms; do
    n=$(grep -c -F " $kv " <<<"$plan")
    [[ $n == 3 ]] && ok || bad "dry-run: $kv on $n of 3 ranks"
  done
  grep -q '^skip rank: 2$' <<<"$plan" && ok || bad "dry-run: the skip rank is not the last rank"
  # NCCL_MULTI_RANK_GPU_ENABLE follows the NCCL the binary runs with (2.30 and later).
  ver=$(sed -n 's/^nccl version: \([0-9]*\).*/\1/p' <<<"$plan")
  if [[ -n $ver && $ver -ge 23000 ]]; then
    grep -q 'NCCL_MULTI_RANK_GPU_ENABLE=1' <<<"$plan" && ok || bad "dry-run: NCCL $ver without NCCL_MULTI_RANK_GPU_ENABLE"
  else
    grep -q 'NCCL_MULTI_RANK_GPU_ENABLE' <<<"$plan" && bad "dry-run: NCCL $ver with NCCL_MULTI_RANK_GPU_ENABLE" || ok
  fi
fi

# A work dir that holds someone else's files is refused, not emptied.
foreign=$(mktemp -d)
touch "$foreign/precious"
expect_run foreign-work-dir 1 'refusing to use it' -- "$E2E" healthy --plugin none --work-dir "$foreign"
[[ -e $foreign/precious ]] && ok || bad "foreign-work-dir: a file was deleted"
rm -rf "$foreign"

# run.sh: exactly one SKIP line and success when no GPU is visible.
for env in "NCCL_E2E_NVIDIA_SMI=/nonexistent/nvidia-smi NCCL_E2E_DEV=/nonexistent/nvidia0|no nvidia-smi, no /nonexistent/nvidia0" \
           "CUDA_VISIBLE_DEVICES=-1|CUDA_VISIBLE_DEVICES='-1'"; do
  why=${env#*|}
  env=${env%|*}
  # shellcheck disable=SC2086 # $env is several VAR=value words on purpose
  out=$(env -u CUDA_VISIBLE_DEVICES $env bash "$RUN_SH" --no-build 2>&1)
  rc=$?
  lines=$(printf '%s\n' "$out" | wc -l)
  if [[ $rc == 0 && $lines == 1 && $out == "SKIP gpu tests: no GPU visible ($why)" ]]; then
    ok
  else
    bad "run.sh skip path ($env): exit $rc, $lines lines: $out"
  fi
done
expect_run run.sh-help 0 'usage: tests/gpu/run.sh' -- bash "$RUN_SH" --help
expect_run run.sh-bad-arg 2 "unknown argument" -- bash "$RUN_SH" --frob

# session.sh: the same skip through it, its log kept, nothing else made.
SESSION_SH=$(dirname "$RUN_SH")/session.sh
sess=$(mktemp -d)
out=$(env -u CUDA_VISIBLE_DEVICES NCCL_E2E_NVIDIA_SMI=/nonexistent/nvidia-smi NCCL_E2E_DEV=/nonexistent/nvidia0 \
  bash "$SESSION_SH" --bundle "$sess" "$sess/out" --overhead 0 2>&1)
rc=$?
if [[ $rc == 0 && $out == *"SKIP gpu tests: no GPU visible"* && -s $sess/out/session.log && ! -e $sess/out/work.tgz ]]; then
  ok
else
  bad "session.sh skip path: exit $rc: $out"
fi
rm -rf "$sess"
expect_run session.sh-usage 2 "usage: tests/gpu/session.sh" -- bash "$SESSION_SH"

echo "gpu.args: $((checks - failures)) of $checks checks passed"
((failures == 0))
