#!/usr/bin/env bash
# Static analysis of the plugin sources: the layer check (scripts/check-layers.py), clang-tidy
# (checks in .clang-tidy) and cppcheck.
#
#   scripts/lint.sh BUILD_DIR [FILE...]
#
# BUILD_DIR must have been configured with -DCMAKE_EXPORT_COMPILE_COMMANDS=ON so that clang-tidy
# sees the real compile flags. Without FILEs every src/**/*.c in the compilation database is
# checked; with FILEs only those. Exits non-zero when either tool reports a finding.
# Needs the Debian packages clang-tidy and cppcheck. GCC-only flags of the build (the LTO ones)
# are not clang's business: clang-tidy is told to ignore them.
set -uo pipefail

if [ $# -lt 1 ]; then
  echo "usage: $0 BUILD_DIR [FILE...]" >&2
  exit 2
fi
build=$1
shift
root=$(cd "$(dirname "$0")/.." && pwd)
db="$build/compile_commands.json"
if [ ! -f "$db" ]; then
  echo "lint: $db not found; configure with -DCMAKE_EXPORT_COMPILE_COMMANDS=ON" >&2
  exit 2
fi
for tool in clang-tidy cppcheck python3; do
  command -v "$tool" >/dev/null 2>&1 || { echo "lint: $tool not found (apt-get install $tool)" >&2; exit 2; }
done

# Sources to check: the given files, else every src/ file the build compiles (a file missing from
# the database, such as the optional ABI check, would be parsed with guessed flags).
if [ $# -gt 0 ]; then
  files=()
  for f in "$@"; do files+=("$(cd "$(dirname "$f")" && pwd)/$(basename "$f")"); done
else
  mapfile -t files < <(python3 - "$db" "$root/src/" <<'PY'
import json, os, sys
db, prefix = sys.argv[1], sys.argv[2]
seen = set()
for e in json.load(open(db)):
    f = os.path.normpath(os.path.join(e.get("directory", ""), e["file"]))
    if f.startswith(prefix) and f.endswith(".c") and f not in seen:
        seen.add(f)
        print(f)
PY
  )
fi
if [ ${#files[@]} -eq 0 ]; then
  echo "lint: no source files to check" >&2
  exit 2
fi

jobs=$(nproc 2>/dev/null || echo 2)
status=0

echo "== layers"
if ! python3 "$root/scripts/check-layers.py" "$root/src"; then
  echo "== layers: findings above"
  status=1
fi

echo "== clang-tidy (${#files[@]} files)"
# One process per file, in parallel; the output of each file stays together.
if ! printf '%s\0' "${files[@]}" |
    xargs -0 -n 1 -P "$jobs" sh -c 'out=$(clang-tidy --quiet --extra-arg=-Wno-ignored-optimization-argument -p "$0" "$1" 2>&1); rc=$?;
      [ $rc -ne 0 ] && printf "%s\n" "$out" | grep -v "warnings generated"; exit $rc' "$build"; then
  echo "== clang-tidy: findings above"
  status=1
else
  echo "== clang-tidy: clean"
fi

echo "== cppcheck"
# Inline suppressions (// cppcheck-suppress id ; reason) are honoured; each must say why.
if ! cppcheck --quiet --enable=warning,performance,portability --error-exitcode=1 --inline-suppr \
    --std=c11 -D_GNU_SOURCE -DWD_VERSION='"lint"' -I "$root/src" -j "$jobs" \
    --suppress=missingIncludeSystem \
    --template='{file}:{line}: {severity}: {id}: {message}' "${files[@]}"; then
  echo "== cppcheck: findings above"
  status=1
else
  echo "== cppcheck: clean"
fi
exit $status
