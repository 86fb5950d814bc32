"""The cost of one DLPack exchange through hurray, beside NumPy -> PyTorch, in one run.

An exchange is what a user pays for `consumer.from_dlpack(producer_array)`: the producer's
__dlpack__ (and __dlpack_device__ where the consumer asks), the capsule, the consumer's new
array, and its release. Each pair is timed in interleaved rounds (so machine noise hits them
alike), and the best round per pair is reported as nanoseconds per exchange and as ratios to
NumPy -> PyTorch and to NumPy -> NumPy measured in the same run: Hurray -> NumPy
(``np.from_dlpack(tensor)``) and NumPy -> Hurray (``hurray.from_dlpack(ndarray)``) each stand
beside their NumPy equivalent, ``np.from_dlpack(ndarray)`` (ADR-059).

    python bench/bench_dlpack.py [--rounds 15] [--number 20000]

A benchmark, not a test: it asserts nothing about speed.
"""

import argparse
import os
import platform
import timeit

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # idle BLAS threads spin on small machines

import numpy as np  # noqa: E402
import torch  # noqa: E402

import hurray  # noqa: E402

torch.set_num_threads(1)  # nor may PyTorch's pool spin between the cases


def pairs():
    shape = (64, 64)
    arr = np.zeros(shape, np.float32)
    x = torch.zeros(shape, dtype=torch.float32)
    t = hurray.from_numpy(np.zeros(shape, np.float32))
    return {
        "NumPy -> PyTorch (baseline)": lambda: torch.from_dlpack(arr),
        "Hurray -> NumPy": lambda: np.from_dlpack(t),
        "Hurray -> PyTorch": lambda: torch.from_dlpack(t),
        "NumPy -> Hurray": lambda: hurray.from_dlpack(arr),
        "PyTorch -> Hurray": lambda: hurray.from_dlpack(x),
        "PyTorch -> NumPy (reference)": lambda: np.from_dlpack(x),
        "NumPy -> NumPy (reference)": lambda: np.from_dlpack(arr),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--number", type=int, default=20000, help="exchanges per round")
    args = parser.parse_args()

    cases = pairs()
    for run in cases.values():  # warm up: imports, caches, allocator pools
        for _ in range(2000):
            run()
    best = {name: float("inf") for name in cases}
    for _ in range(args.rounds):
        for name, run in cases.items():
            seconds = timeit.timeit(run, number=args.number)
            best[name] = min(best[name], seconds / args.number * 1e9)

    baseline = best["NumPy -> PyTorch (baseline)"]
    numpy_ns = best["NumPy -> NumPy (reference)"]
    print(f"hurray {hurray.__version__}, numpy {np.__version__}, torch {torch.__version__}, "
          f"Python {platform.python_version()}, {platform.machine()}")
    print(f"one DLPack exchange of a 64x64 float32 array, best of {args.rounds} rounds of "
          f"{args.number}")
    print(f"{'exchange':32} {'ns':>8} {'x NumPy->PyTorch':>18} {'x NumPy->NumPy':>15}")
    for name, ns in best.items():
        print(f"{name:32} {ns:8.0f} {ns / baseline:18.2f} {ns / numpy_ns:15.2f}")


if __name__ == "__main__":
    main()
