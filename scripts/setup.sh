#!/usr/bin/env bash
# Installs everything Hurray needs to build and test, idempotently: Debian packages (compilers,
# cmocka, xxhash (and xxhsum, a peer in bench/bench_file.py), zlib, clang for the fuzzers,
# locales; PoCL, the OpenCL ICD loader, headers and clinfo, so that the device tests run on a
# real OpenCL device on the CPU), a decimal-comma locale (de_DE.UTF-8, for the tests that
# numbers are written the same in every locale), and a
# project-local virtual environment (.venv) with the Python build tools and the real peers the
# tests exchange tensors with.
set -euo pipefail
cd "$(dirname "$0")/.."

apt_packages=(build-essential pkg-config libcmocka-dev libxxhash-dev xxhash zlib1g-dev libssl-dev openssl clang libclang-rt-14-dev
              locales pocl-opencl-icd ocl-icd-opencl-dev opencl-headers clinfo)
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! locale -a 2>/dev/null | grep -qix 'de_DE\.utf-\?8'; then
  echo "setup: generating the de_DE.UTF-8 locale"
  $SUDO localedef -i de_DE -f UTF-8 de_DE.UTF-8
fi

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  python3 -m venv .venv
fi
stamp=.venv/.requirements-installed
if [ ! -f "$stamp" ] || [ requirements-dev.txt -nt "$stamp" ]; then
  echo "setup: installing Python packages (requirements-dev.txt)"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r requirements-dev.txt
  touch "$stamp"
fi
