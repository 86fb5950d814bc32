"""The cost of one DLPack exchange through hurray, beside NumPy -> PyTorch, in one run.

An exchange is what a user pays for `consumer.from_dlpack(producer_array)`: the producer's
__dlpack__ (and __dlpack_device__ where the consumer asks), the capsule, the consumer's new
array, and its release. The exchanges are timed in interleaved rounds (bench/timing.py: the
order rotates each round, so machine noise hits them alike), and the minimum and the median of
the rounds are reported as nanoseconds per exchange and as ratios to
NumPy -> PyTorch and to NumPy -> NumPy measured in the same run: Hurray -> NumPy
(``np.from_dlpack(tensor)``) and NumPy -> Hurray (``hurray.from_dlpack(ndarray)``) each stand
beside their NumPy equivalent, ``np.from_dlpack(ndarray)`` (ADR-059).

PyTorch runs on one thread (``torch.set_num_threads(1)``), its best for an exchange.

    python bench/bench_dlpack.py [--rounds 15] [--number 20000] [--quick]

A benchmark, not a test: it asserts nothing about speed.
"""

import argparse
import os
import platform

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # idle BLAS threads spin on small machines

import numpy as np  # noqa: E402
import torch  # noqa: E402

import hurray  # noqa: E402
from timing import Table, interleaved, load_average  # noqa: E402

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
    parser.add_argument("--quick", action="store_true",
                        help="5 rounds of 2,000: to check the bench itself")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.number = 5, min(args.number, 2000)

    print(f"hurray {hurray.__version__}, numpy {np.__version__}, torch {torch.__version__}, "
          f"Python {platform.python_version()}, {platform.machine()}")
    load_average("start")
    table = Table(f"one DLPack exchange of a 64x64 float32 array, min and median of "
                  f"{args.rounds} interleaved rounds of {args.number}", unit="ns",
                  refs=["NumPy -> PyTorch (baseline)", "NumPy -> NumPy (reference)"])
    table.add_all(interleaved(pairs(), args.rounds, args.number))
    table.print()
    load_average("end")


if __name__ == "__main__":
    main()
