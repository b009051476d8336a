#!/usr/bin/env bash
# The pip wheel, end to end: built from this source tree offline (scripts/build-wheel.sh), pip
# installed with --no-index into a new virtual environment, its commands run, the demo's hung
# job run with the installed plugin and diagnosed by the installed analyzer (by hand and by the
# plugin's automatic verdict) and through the Python API; then a broken install and a missing
# library each get a message naming what is missing.
#   test_wheel.sh SOURCE_DIR BUILD_DIR     (ctest package.wheel; exit 77: skipped)
set -uo pipefail
src=$1 build=$(cd "$2" && pwd)
PY=/usr/bin/python3
fail() { echo "test_wheel: $*"; exit 1; }
[ -x "$PY" ] || { echo "test_wheel: SKIP: no /usr/bin/python3"; exit 77; }
"$PY" -c 'import build, setuptools, wheel, venv, ensurepip' 2>/dev/null ||
  { echo "test_wheel: SKIP: python3-build, python3-setuptools, python3-wheel or python3-venv missing (scripts/install-deps.sh)"; exit 77; }
command -v patchelf >/dev/null || { echo "test_wheel: SKIP: patchelf missing (scripts/install-deps.sh)"; exit 77; }
[ -x "$build/tests/demo_rank" ] || fail "the demo's rank program is not built"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/wd-wheel-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
whl=$("$src/scripts/build-wheel.sh" "$build/wheel-build" "$tmp/dist") || fail "the wheel did not build"
echo "test_wheel: built $(basename "$whl")"
case $(basename "$whl") in
  nccl_watchdog-*-py3-none-manylinux_2_*_"$(uname -m)".whl) ;;
  *) fail "unexpected wheel name $(basename "$whl")" ;;
esac

"$PY" -m venv "$tmp/venv" || fail "no virtual environment"
V=$tmp/venv/bin
"$V/pip" install --no-index --quiet "$whl" || fail "pip install --no-index failed"
cd "$tmp" # nothing of the source tree on the import path

want=$(sed -n 's/^project(nccl-watchdog VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
[ "$("$V/python" -m nccl_watchdog --version)" = "nccl-watchdog $want" ] || fail "--version"
plugin=$("$V/python" -m nccl_watchdog plugin-path) || fail "plugin-path failed"
case $plugin in "$tmp/venv/"*/nccl_watchdog/lib/libnccl-profiler-watchdog.so) ;; *) fail "plugin-path: $plugin" ;; esac
[ -f "$plugin" ] || fail "plugin-path names no file"
envout=$("$V/python" -m nccl_watchdog env --dump-dir "$tmp/dumps" --timeout 5m) || fail "env failed"
grep -qx "export NCCL_PROFILER_PLUGIN=$plugin" <<<"$envout" || fail "env: no NCCL_PROFILER_PLUGIN line: $envout"
grep -qx "export NCCL_WATCHDOG_DUMP_DIR=$tmp/dumps" <<<"$envout" || fail "env: no dump directory line"
grep -qx "export NCCL_WATCHDOG_TIMEOUT=5m" <<<"$envout" || fail "env: no timeout line"
"$V/python" -m nccl_watchdog check || fail "check: this machine should run it"
"$V/python" -m nccl_watchdog analyze --version | grep -q "^nccl-watchdog-analyze $want" || fail "analyze --version"
"$V/nccl-watchdog-status" --version | grep -q "^nccl-watchdog-status $want" || fail "the nccl-watchdog-status script"
analyzer=$(dirname "$(dirname "$plugin")")/bin/nccl-watchdog-analyze

# The demo's job with the installed plugin; its report from the installed analyzer.
out=$(WD_DEMO_PLUGIN=$plugin WD_DEMO_ANALYZER=$analyzer WD_DEMO_OUT=$tmp \
      NCCL_WATCHDOG_VERDICT_MEMORY=${NCCL_WATCHDOG_VERDICT_MEMORY:-16384} \
      "$src/tests/demo/run-demo.sh" "$build" 2>&1) || { printf '%s\n' "$out"; fail "the demo failed"; }
grep -q "loaded as NCCL would load it" <<<"$out" || fail "the demo did not run"
grep -q "^JOB: root cause rank 0 of pp_d1 (global rank 2 on host node-b" <<<"$out" ||
  { printf '%s\n' "$out"; fail "the installed analyzer did not name global rank 2"; }
# The automatic verdict: the installed plugin ran the analyzer installed beside it.
grep -q "^NCCL WARN verdict of stall episode 1: JOB: root cause rank 0 of pp_d1 (global rank 2" <<<"$out" ||
  { printf '%s\n' "$out"; fail "no automatic verdict from the installed plugin's own analyzer"; }
# By hand through the module, and through the Python API.
# The whole report first: `| head -1` could close the pipe while the analyzer still writes, and
# its SIGPIPE would fail the pipeline (pipefail) whatever the first line said.
report=$("$V/python" -m nccl_watchdog analyze "$tmp/demo-dumps") || fail "python -m nccl_watchdog analyze failed"
grep -q "global rank 2 on host node-b" <<<"${report%%$'\n'*}" ||
  fail "python -m nccl_watchdog analyze did not name global rank 2: ${report%%$'\n'*}"
"$V/python" - "$tmp/demo-dumps" <<'EOF' || fail "the Python API"
import glob, os, sys
import nccl_watchdog as nw
v = nw.verdict(sys.argv[1])
root = v["job"]["root"]
assert root["globalRank"] == 2 and root["host"] == "node-b", root
assert v["job"]["line"].startswith("JOB: root cause rank 0 of pp_d1 (global rank 2"), v["job"]["line"]
dumps = sorted(glob.glob(os.path.join(sys.argv[1], "node-b", "*.json*")))
d = nw.read_dump(dumps[0])
assert d["reason"] in ("stall", "peer"), d.get("reason")
assert nw.env(dump_dir="/d", metrics="30s")["NCCL_WATCHDOG_METRICS"] == "30s"
print("test_wheel: Python API: root", root["where"])
EOF

# A machine without NCCL (no nvidia-nccl wheel in the venv, the loader's search answering
# nothing): check says so and still passes (the plugin waits for a process that loads NCCL).
"$V/python" - <<'EOF' || fail "check without NCCL"
import contextlib, ctypes.util, io
ctypes.util.find_library = lambda name: None
from nccl_watchdog.__main__ import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    rc = main(["check"])
assert rc == 0, rc
assert "NCCL: not found in this environment" in out.getvalue(), out.getvalue()
print("test_wheel: check without NCCL: says so")
EOF

# A missing library: the plugin needs one this machine lacks; the message names it.
cp "$plugin" "$tmp/plugin.so"
patchelf --add-needed libwd-not-on-this-machine.so.7 "$plugin"
msg=$("$V/python" -m nccl_watchdog plugin-path 2>&1) && fail "plugin-path succeeded with a library missing"
grep -q "libwd-not-on-this-machine.so.7" <<<"$msg" || fail "the message does not name the missing library: $msg"
grep -q "glibc" <<<"$msg" || fail "the message does not say which glibc: $msg"
cp "$tmp/plugin.so" "$plugin"
# A broken install: the plugin is gone.
rm -f "$plugin"
msg=$("$V/python" -m nccl_watchdog plugin-path 2>&1) && fail "plugin-path succeeded without the plugin"
grep -q "missing from this installation" <<<"$msg" || fail "broken install message: $msg"
grep -q "libnccl-profiler-watchdog.so" <<<"$msg" || fail "the message does not name the plugin: $msg"
"$V/python" -m nccl_watchdog check >/dev/null 2>&1 && fail "check passed a broken install"
echo "test_wheel: ok"
