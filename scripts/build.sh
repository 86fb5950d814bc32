#!/usr/bin/env bash
# Configures and builds one CMake build directory: scripts/build.sh DIR [cmake options...]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$1; shift
PATH="$PWD/.venv/bin:$PATH"
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHURRAY_WERROR=ON "$@" >/dev/null
cmake --build "$dir" -- -j2
