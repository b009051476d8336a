#!/usr/bin/env bash
# The install tree as a cluster admin and a build system see it: `cmake --install` with DESTDIR
# lays out the plugin, its generic-name link, the analyzer, pkg-config and CMake package files,
# man pages and the example configuration; pkg-config and find_package() find the plugin from
# there; the analyzer and the man pages work; `cpack -G DEB` builds a .deb holding the same.
# Usage: check-install.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

DESTDIR=$work/root cmake --install "$build" --prefix /usr >/dev/null
root=$work/root/usr
(cd "$root" && find . \( -type f -o -type l \) | sort) >"$work/tree"
echo "installed:"; sed 's/^/  /' "$work/tree"
for f in 'lib.*/libnccl-profiler-watchdog\.so$' 'lib.*/libnccl-profiler\.so$' \
         'bin/nccl-watchdog-analyze$' 'lib.*/pkgconfig/nccl-watchdog\.pc$' \
         'lib.*/cmake/nccl-watchdog/nccl-watchdogConfig\.cmake$' \
         'lib.*/cmake/nccl-watchdog/nccl-watchdogConfigVersion\.cmake$' \
         'share/man/man1/nccl-watchdog-analyze\.1$' 'share/man/man7/nccl-watchdog\.7$' \
         'share/nccl-watchdog/nccl-watchdog\.conf\.example$'; do
  grep -Eq "$f" "$work/tree" || fail "nothing matches $f in the install tree"
done
# Nothing of the tests, benchmarks or generators is installed.
if grep -Eq 'gen_dumps|wdhost|bench|scenario|fakecuda|pyhost' "$work/tree"; then fail "test files installed"; fi

"$root/bin/nccl-watchdog-analyze" --version | grep -Eq '^nccl-watchdog-analyze [0-9]+\.[0-9]+\.[0-9]+$' ||
  fail "--version of the installed analyzer"

pc=$(dirname "$(find "$root" -name nccl-watchdog.pc)")
plugin=$(PKG_CONFIG_PATH=$pc pkg-config --variable=plugin nccl-watchdog)
[ -f "$plugin" ] || fail "pkg-config plugin=$plugin does not exist"
[ "$(PKG_CONFIG_PATH=$pc pkg-config --modversion nccl-watchdog)" = "$("$root/bin/nccl-watchdog-analyze" --version | cut -d' ' -f2)" ] ||
  fail "pkg-config version differs from the analyzer's"

mkdir -p "$work/user"
cat >"$work/user/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.20)
project(user NONE)
find_package(nccl-watchdog 0.1 REQUIRED)
get_target_property(loc nccl-watchdog::plugin IMPORTED_LOCATION)
file(WRITE ${CMAKE_BINARY_DIR}/found.txt "${NCCL_WATCHDOG_PLUGIN}\n${loc}\n${NCCL_WATCHDOG_ANALYZER}\n")
CM
cmake -S "$work/user" -B "$work/user/b" -DCMAKE_PREFIX_PATH="$root" >/dev/null || fail "find_package"
while read -r f; do [ -f "$f" ] || fail "find_package gave $f, which does not exist"; done <"$work/user/b/found.txt"

if command -v man >/dev/null; then
  MANWIDTH=100 man -l "$root/share/man/man7/nccl-watchdog.7" 2>/dev/null | grep -q 'NCCL_WATCHDOG_TIMEOUT' ||
    fail "man nccl-watchdog(7) does not list NCCL_WATCHDOG_TIMEOUT"
  MANWIDTH=100 man -l "$root/share/man/man1/nccl-watchdog-analyze.1" 2>/dev/null | grep -q -- '--straggler-ms' ||
    fail "man nccl-watchdog-analyze(1) does not list --straggler-ms"
fi

if command -v cpack >/dev/null && command -v dpkg-deb >/dev/null; then
  (cd "$work" && cpack -G DEB --config "$build/CPackConfig.cmake" >/dev/null) || fail "cpack -G DEB"
  deb=$(ls "$work"/*.deb)
  dpkg-deb -c "$deb" >"$work/deb.txt"
  for f in './usr/lib/.*libnccl-profiler-watchdog\.so$' './usr/lib/.*libnccl-profiler\.so -> libnccl-profiler-watchdog\.so' \
           './usr/bin/nccl-watchdog-analyze$' './usr/share/man/man7/nccl-watchdog\.7$'; do
    grep -Eq "$f" "$work/deb.txt" || fail "the .deb has nothing matching $f"
  done
  dpkg-deb -f "$deb" Depends | grep -q libcjson1 || fail ".deb Depends lacks libcjson1"
  echo "deb: $(basename "$deb")"
fi
echo "1 passed, 0 failed"
