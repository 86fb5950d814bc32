#!/usr/bin/env bash
# The CUDA checks, for a machine with an NVIDIA GPU, its driver (libcuda.so.1) and a CUDA build
# of PyTorch: tests/python/test_cuda.py (PyTorch CUDA tensors through DLPack and from_hurray
# both ways, zero-copy pointers, to_device, stream and event waits, the wire into CUDA memory)
# with a missing GPU a failure rather than a skip, then, where cmocka is installed, the C
# device tests (their CUDA round trip). Every step has a time limit, so the whole script ends
# within ten minutes whatever happens (about three when all goes well).
#
# Needs a C compiler, CMake, ninja, the zlib and OpenSSL headers, and in the interpreter
# PyTorch, pytest and scikit-build-core; nothing is downloaded (pip runs with --no-index).
# PYTHON picks the interpreter (default: .venv/bin/python, else python3). The package is built
# into a temporary directory, so the interpreter's environment is left as it was.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# CUDA only: an OpenCL platform the GPU driver may bring is not what is checked here.
mkdir "$scratch/no-opencl"
export OCL_ICD_VENDORS="$scratch/no-opencl"

timeout 30 nvidia-smi -L
for header in zlib.h openssl/hmac.h; do
  echo "#include <$header>" | ${CC:-cc} -E -x c - >/dev/null 2>&1 ||
    { echo "missing C header <$header>: install the zlib / OpenSSL development files"; exit 1; }
done
timeout 60 "$python" -c "import torch; assert torch.cuda.is_available(), 'PyTorch sees no GPU'; print('torch', torch.__version__, torch.cuda.get_device_name(0))"

echo "== Python: PyTorch CUDA tensors (tests/python/test_cuda.py)"
timeout 180 "$python" -m pip install -q --no-index --no-build-isolation --no-deps \
  --target "$scratch/site" .
PYTHONPATH="$scratch/site" HURRAY_REQUIRE_CUDA=1 timeout 150 \
  "$python" -m pytest -q -p no:cacheprovider tests/python/test_cuda.py

echo "== C: the device backends (CUDA round trip included)"
if ! pkg-config --exists cmocka 2>/dev/null; then
  echo "skipped: cmocka is not installed (pkg-config cmocka)"
  exit 0
fi
timeout 60 cmake -S . -B "$scratch/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DHURRAY_WERROR=ON -DHURRAY_BUILD_EXAMPLES=OFF >/dev/null
timeout 90 cmake --build "$scratch/build" --target test_device_runtime >/dev/null
timeout 45 "$scratch/build/tests/c/test_device_runtime" | tee "$scratch/c.log"
grep -q "OK \] cuda_round_trip" "$scratch/c.log" || { echo "cuda_round_trip did not run"; exit 1; }
