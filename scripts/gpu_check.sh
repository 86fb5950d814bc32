#!/usr/bin/env bash
# The CUDA checks, for a machine with an NVIDIA GPU, its driver (libcuda.so.1) and a CUDA build
# of PyTorch: the C device tests (their CUDA round trip runs there) and tests/python/test_cuda.py
# (PyTorch CUDA tensors through DLPack and from_hurray both ways, to_device, stream and event
# waits), with a missing GPU a failure rather than a skip. Needs what scripts/setup.sh installs
# (cmake, ninja, cmocka, scikit-build-core, pytest) or equivalents; PYTHON picks the interpreter
# (default: .venv/bin/python, else python3).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
nvidia-smi -L
"$python" -c "import torch; assert torch.cuda.is_available(), 'PyTorch sees no GPU'; print('torch', torch.__version__, torch.cuda.get_device_name(0))"

echo "== C: the device backends (CUDA round trip included)"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHURRAY_WERROR=ON >/dev/null
cmake --build build-gpu --target test_device_runtime >/dev/null
build-gpu/tests/c/test_device_runtime | tee /tmp/hurray_gpu_c.log
grep -q "OK \] cuda_round_trip" /tmp/hurray_gpu_c.log || { echo "cuda_round_trip did not run"; exit 1; }

echo "== Python: PyTorch CUDA tensors"
"$python" -m pip install -q --no-build-isolation .
HURRAY_REQUIRE_CUDA=1 "$python" -m pytest -q -p no:cacheprovider tests/python/test_cuda.py
