#!/usr/bin/env bash
# Install the Debian packages nccl-watchdog needs to build and test, when they are missing.
set -euo pipefail
pkgs=(build-essential cmake pkg-config libcjson-dev libunwind-dev zlib1g-dev libcunit1-dev libcurl4-openssl-dev python3 python3-jsonschema
      python3-prometheus-client chromium
      python3-build python3-setuptools python3-wheel python3-venv patchelf binutils)
# gcc's sanitizer runtimes (ASan+UBSan, TSan); clang-tidy and cppcheck for `make lint`.
if [ "${WD_WITH_SANITIZERS:-0}" = 1 ]; then pkgs+=(libasan8 libubsan1 libtsan2); fi
if [ "${WD_WITH_LINT:-0}" = 1 ]; then pkgs+=(clang-tidy cppcheck); fi
# clang's libFuzzer for `make fuzz` (the dump reader).
if [ "${WD_WITH_FUZZ:-0}" = 1 ]; then pkgs+=(clang libclang-rt-14-dev); fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "nccl-watchdog: installing ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
    echo "nccl-watchdog: run as root or install: ${missing[*]}" >&2; exit 1
  fi
else SUDO=; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
