#!/usr/bin/env bash
# Sets everything up and runs Hurray's main job end to end: a quantised multi-buffer tensor
# produced by one side, handed over through the hurray-ffi C ABI, validated, read and released.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh build
build/examples/exchange
