#!/usr/bin/env bash
# Build the pip wheel: a Release build of the plugin, the analyzer and the status command, the
# shared libraries they need beyond glibc carried inside (found with ldd, their RUNPATH set to
# $ORIGIN with patchelf, as auditwheel does), the Python package of python/, and a platform tag
# told by the newest glibc symbol version any of the files needs (manylinux_2_X_<arch>, PEP 600).
# Offline: setuptools (Debian's python3-setuptools) through python3-build, no isolation.
#   scripts/build-wheel.sh [BUILD_DIR] [OUT_DIR]      (make wheel: build-wheel, dist)
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-build-wheel}
OUT=${2:-dist}
PY=/usr/bin/python3
for tool in "$PY" patchelf objdump ldd; do
  command -v "$tool" >/dev/null || { echo "build-wheel: $tool not found (scripts/install-deps.sh)" >&2; exit 1; }
done
"$PY" -c 'import build, setuptools, wheel' 2>/dev/null ||
  { echo "build-wheel: python3-build, python3-setuptools and python3-wheel are needed" >&2; exit 1; }

cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DWD_WERROR=OFF >/dev/null
cmake --build "$BUILD" -j "$(nproc 2>/dev/null || echo 2)" --target nccl-profiler-watchdog \
  nccl-watchdog-analyze nccl-watchdog-status >/dev/null
STAGE=$(cd "$BUILD" && pwd)/wheel-stage
rm -rf "$STAGE"
mkdir -p "$STAGE"

PKG=$STAGE/python
cp -r "$SRC/python" "$PKG"
rm -rf "$PKG/nccl_watchdog/__pycache__" "$PKG/build" "$PKG"/*.egg-info
mkdir -p "$PKG/nccl_watchdog/lib" "$PKG/nccl_watchdog/bin"
# The plugin looks in its own directory ($ORIGIN, set by CMake); the programs in ../lib.
cp "$BUILD/lib/libnccl-profiler-watchdog.so" "$PKG/nccl_watchdog/lib/"
cp "$BUILD/bin/nccl-watchdog-analyze" "$BUILD/bin/nccl-watchdog-status" "$PKG/nccl_watchdog/bin/"
for b in "$PKG"/nccl_watchdog/bin/*; do patchelf --set-rpath '$ORIGIN/../lib' "$b"; done

# Libraries every Linux has (the manylinux policy's own list, glibc's parts), left to the system.
system_lib() {
  case "$1" in
    linux-vdso.so.*|ld-linux*|libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|libgcc_s.so.*|libstdc++.so.*|libresolv.so.*|libutil.so.*|libnsl.so.*|libz.so.*) return 0 ;;
  esac
  return 1
}
# Carry every other library the files need, and what those need in turn.
queue=("$PKG"/nccl_watchdog/lib/*.so "$PKG"/nccl_watchdog/bin/*)
while [ ${#queue[@]} -gt 0 ]; do
  f=${queue[0]}
  queue=("${queue[@]:1}")
  while read -r name _ path _; do
    [ -n "$name" ] && [ "$path" != "" ] || continue
    system_lib "$name" && continue
    [ -e "$PKG/nccl_watchdog/lib/$name" ] && continue
    [ -e "$path" ] || { echo "build-wheel: $f needs $name, not found" >&2; exit 1; }
    cp -L "$path" "$PKG/nccl_watchdog/lib/$name"
    chmod u+w "$PKG/nccl_watchdog/lib/$name"
    patchelf --set-rpath '$ORIGIN' "$PKG/nccl_watchdog/lib/$name"
    queue+=("$PKG/nccl_watchdog/lib/$name")
  done < <(ldd "$f" | awk '/=>/ { print $1, $2, $3, $4 }')
done
strip --strip-unneeded "$PKG"/nccl_watchdog/lib/*.so* "$PKG"/nccl_watchdog/bin/* 2>/dev/null || true

# The newest glibc symbol version needed: the honest floor of the platform tag.
glibc=$(for f in "$PKG"/nccl_watchdog/lib/* "$PKG"/nccl_watchdog/bin/*; do objdump -T "$f"; done |
  grep -o 'GLIBC_2\.[0-9]*' | sort -t. -k2 -n -u | tail -1)
arch=$(uname -m)
plat="manylinux_2_${glibc#GLIBC_2.}_${arch}"
version=$(sed -n 's/^project(nccl-watchdog VERSION \([0-9.]*\).*/\1/p' "$SRC/CMakeLists.txt")
cat >"$PKG/nccl_watchdog/_version.py" <<EOF
# Written by scripts/build-wheel.sh.
__version__ = "$version"
__platform__ = "$plat"
EOF

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
(cd "$PKG" && WD_WHEEL_PLAT=$plat "$PY" -m build --wheel --no-isolation --outdir "$OUT" >"$STAGE/build.log" 2>&1) ||
  { cat "$STAGE/build.log" >&2; echo "build-wheel: the Python build failed" >&2; exit 1; }
whl=$(ls -t "$OUT"/nccl_watchdog-"$version"-py3-none-"$plat".whl | head -1)
echo "$whl"
