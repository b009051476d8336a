#!/usr/bin/env bash
# Copy the plugin, the analyzer and nccl_e2e out of a build tree together with the shared libraries
# they need that a bare machine may lack (libcjson, libunwind, ...), so they run on a GPU machine
# that has none of our build dependencies.
#
# usage: tests/gpu/bundle.sh BUILD_DIR OUTDIR
#
# OUTDIR/lib holds libnccl-profiler-watchdog.so (RPATH $ORIGIN: it finds its libraries next to
# itself) and those libraries; OUTDIR/bin holds the programs (run them with
# LD_LIBRARY_PATH=OUTDIR/lib; tests/gpu/run.sh --bundle OUTDIR does that). CUDA, NCCL and the C
# library are never copied: they must be the GPU machine's own.
set -euo pipefail

if [[ $# != 2 || $1 == -h || $1 == --help ]]; then
  echo "usage: $0 BUILD_DIR OUTDIR" >&2
  exit 2
fi
BUILD=$1
OUT=$2
PLUGIN=$BUILD/lib/libnccl-profiler-watchdog.so
[[ -f $PLUGIN ]] || { echo "bundle.sh: no plugin at $PLUGIN (build nccl-profiler-watchdog first)" >&2; exit 1; }

mkdir -p "$OUT/lib" "$OUT/bin"

# Take the plugin and the analyzer as `cmake --install` makes them: the build-tree plugin's
# RUNPATH may carry an empty entry (the current directory) that the install step removes.
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
ANALYZER=$BUILD/bin/nccl-watchdog-analyze
if cmake --install "$BUILD" --prefix "$STAGE" >/dev/null 2>&1; then
  staged=$(find "$STAGE" -name libnccl-profiler-watchdog.so -type f | head -n 1)
  [[ -n $staged ]] && PLUGIN=$staged
  [[ -x $STAGE/bin/nccl-watchdog-analyze ]] && ANALYZER=$STAGE/bin/nccl-watchdog-analyze
else
  echo "bundle.sh: cmake --install failed; bundling the build-tree files" >&2
fi

# Libraries every Linux machine has, and the GPU stack that must come from the GPU machine.
is_system() {
  case $1 in
    linux-vdso.so* | ld-linux*.so* | libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | \
      librt.so.* | libresolv.so.* | libutil.so.* | libgcc_s.so.* | libstdc++.so.* | \
      libcuda.so* | libcudart.so* | libnccl.so* | libnvidia-*.so*) return 0 ;;
  esac
  return 1
}

# copy_deps FILE: each non-system library ldd resolves for FILE goes to OUT/lib under its soname.
copy_deps() {
  local name arrow path rest
  while read -r name arrow path rest; do
    [[ $arrow == "=>" ]] || continue
    is_system "$name" && continue
    if [[ $path == "not" ]]; then
      echo "bundle.sh: $1 needs $name, which is not found on this machine either" >&2
      exit 1
    fi
    if [[ ! -e $OUT/lib/$name ]]; then
      cp -L "$path" "$OUT/lib/$name"
      echo "  $name  (from $path)"
    fi
  done < <(ldd "$1")
}

echo "bundle: $OUT"
cp -L "$PLUGIN" "$OUT/lib/libnccl-profiler-watchdog.so"
ln -sf libnccl-profiler-watchdog.so "$OUT/lib/libnccl-profiler.so"
echo "  libnccl-profiler-watchdog.so"
copy_deps "$PLUGIN"

for prog in "$ANALYZER" "$BUILD/bin/nccl_e2e"; do
  if [[ -x $prog ]]; then
    cp -L "$prog" "$OUT/bin/"
    echo "  bin/$(basename "$prog")"
    copy_deps "$prog"
  fi
done
if [[ -f $BUILD/lib/libwd-bench-empty.so ]]; then
  cp -L "$BUILD/lib/libwd-bench-empty.so" "$OUT/lib/"
  echo "  libwd-bench-empty.so  (overhead baseline)"
fi

# The copied libraries may need more of their own (libunwind needs liblzma, ...).
for lib in "$OUT"/lib/*.so*; do
  [[ -L $lib ]] || copy_deps "$lib"
done

# Check: with nothing but the bundle and system libraries, everything the plugin needs resolves
# inside OUT (ldd of a library honours its RPATH $ORIGIN).
missing=$(env -u LD_LIBRARY_PATH ldd "$OUT/lib/libnccl-profiler-watchdog.so" | awk '/not found/ {print $1}')
if [[ -n $missing ]]; then
  echo "bundle.sh: the bundled plugin still misses: $missing" >&2
  exit 1
fi
runpath=$(readelf -d "$OUT/lib/libnccl-profiler-watchdog.so" | sed -n 's/.*(R.*PATH).*\[\(.*\)\]/\1/p')
if [[ :$runpath: == *::* ]]; then
  echo "bundle.sh: warning: the plugin's RUNPATH '$runpath' has an empty entry: it searches the" \
    "current directory for its libraries" >&2
fi

# The plugin's own NEEDED libraries must come from the bundle (its RUNPATH $ORIGIN). RUNPATH does
# not apply to the dependencies of those libraries (libunwind -> liblzma): they resolve through
# the system, or through OUT/lib when LD_LIBRARY_PATH names it (run.sh --bundle does).
outlib=$(cd "$OUT/lib" && pwd)
direct=$(readelf -d "$OUT/lib/libnccl-profiler-watchdog.so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
resolved=$(env -u LD_LIBRARY_PATH ldd "$OUT/lib/libnccl-profiler-watchdog.so")
for name in $direct; do
  is_system "$name" && continue
  path=$(awk -v n="$name" '$1 == n && $2 == "=>" {print $3}' <<<"$resolved")
  if [[ $path != "$outlib"/* ]]; then
    echo "bundle.sh: the plugin loads $name from ${path:-nowhere}, not from the bundle (RPATH \$ORIGIN missing?)" >&2
    exit 1
  fi
done
while read -r name arrow path rest; do
  [[ $arrow == "=>" ]] || continue
  is_system "$name" && continue
  [[ $path == "$outlib"/* ]] ||
    echo "  note: $name resolves to $path without LD_LIBRARY_PATH=$outlib (a copy is in the bundle)"
done <<<"$resolved"

{
  echo "nccl-watchdog GPU test bundle"
  echo "made: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m)"
  echo "source: $(git -C "$(dirname "$0")" describe --always --dirty 2>/dev/null || echo unknown)"
  echo "glibc: $(ldd --version | head -n 1)"
  echo "glibc needed: $(for f in "$OUT"/lib/*.so* "$OUT"/bin/*; do objdump -T "$f" 2>/dev/null; done |
    grep -o 'GLIBC_[0-9.]*' | sort -u -V | tail -n 1) or newer"
  echo "run on the GPU machine: tests/gpu/run.sh --bundle THIS_DIR"
} >"$OUT/BUNDLE-INFO"
echo "bundle.sh: done ($(du -sh "$OUT" | cut -f1)); on the GPU machine: tests/gpu/run.sh --bundle $OUT"
