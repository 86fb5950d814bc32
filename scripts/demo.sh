#!/usr/bin/env bash
# Sets everything up and runs Hurray's main job end to end:
#  1. the C library and build/examples/exchange: a quantised multi-buffer tensor produced by
#     one side, handed over through the hurray-ffi C ABI, validated, read and released;
#  2. `pip install .` into .venv (the extension and the `hurray` CLI), then examples/demo.py:
#     a small model's weights, one matrix quantised to per-channel int4, saved with metadata,
#     checked by `hurray info` / `hurray verify`, opened lazily and handed without copying to
#     PyTorch (DLPack) and to a native-protocol consumer that dequantises it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh build
echo "== C: build/examples/exchange"
build/examples/exchange
echo
echo "== Python: pip install . into .venv"
.venv/bin/python -m pip install -q --no-build-isolation .
echo "== Python: examples/demo.py"
.venv/bin/python examples/demo.py
