#!/usr/bin/env bash
# Configures and builds one CMake build directory: scripts/build.sh DIR [cmake options...]
# Quiet when it works; the whole log when it does not.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$1; shift
PATH="$PWD/.venv/bin:$PATH"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! { cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHURRAY_WERROR=ON "$@" &&
       cmake --build "$dir" -- -j2; } >"$log" 2>&1; then
  cat "$log"
  echo "build of $dir failed" >&2
  exit 1
fi
echo "built $dir"
