"""The cost of one native exchange (hurray.from_hurray) beside DLPack exchanges, in one run.

An exchange is what a user pays for `consumer.from_x(producer)`: the producer's export, the
consumer's new tensor, and its release. Rows:

- Hurray -> Hurray, native: `hurray.from_hurray(t)` for a hurray.Tensor `t` (the producer is
  this very module, so the context goes across without the capsule: see
  docs/impl/python-bindings.md, "hurray.from_hurray");
- Hurray -> Hurray, native, through the capsule: the same tensor behind a producer that is
  not a hurray.Tensor (its `__hurray__` is the tensor's bound method, so no Python code runs),
  so the whole consumer protocol runs: attribute lookup, capsule, version, check, rename;
- NumPy -> PyTorch and NumPy -> NumPy through DLPack, the references the target is set
  against; Hurray -> Hurray through DLPack for comparison;
- the creations and exchanges every array API operation leans on, each beside NumPy's own
  equivalent (ADR-059): ``hurray.Tensor(bytes, ...)`` and ``np.frombuffer``,
  ``hurray.from_numpy(ndarray)``, ``hurray.from_dlpack(ndarray)`` and
  ``np.from_dlpack(tensor)`` beside ``np.from_dlpack(ndarray)``.

Each case is timed in interleaved rounds (so machine noise hits them alike) and the best round
is reported, in nanoseconds per exchange and as a ratio to each reference; a case with a NumPy
equivalent also as a ratio to it (the last column).

    python bench/bench_native.py [--rounds 40] [--number 5000]

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


class Foreign:
    """A producer that is not a hurray.Tensor: from_hurray takes the capsule path."""

    __slots__ = ("__hurray__",)

    def __init__(self, tensor):
        self.__hurray__ = tensor.__hurray__


#: case -> the case that is its NumPy equivalent
NUMPY_EQUIVALENT = {
    "bytes -> Hurray, Tensor()": "bytes -> NumPy, frombuffer",
    "NumPy -> Hurray, from_numpy": "NumPy -> NumPy, DLPack",
    "NumPy -> Hurray, DLPack": "NumPy -> NumPy, DLPack",
    "Hurray -> NumPy, DLPack": "NumPy -> NumPy, DLPack",
}


def cases():
    shape = (64, 64)
    arr = np.zeros(shape, np.float32)
    data = arr.tobytes()
    t = hurray.from_numpy(np.zeros(shape, np.float32))
    foreign = Foreign(t)
    from_hurray, from_dlpack, from_numpy = hurray.from_hurray, hurray.from_dlpack, \
        hurray.from_numpy
    torch_from, numpy_from, frombuffer = torch.from_dlpack, np.from_dlpack, np.frombuffer
    Tensor, float32 = hurray.Tensor, hurray.float32
    return {
        "Hurray -> Hurray, native": lambda: from_hurray(t),
        "Hurray -> Hurray, native, capsule": lambda: from_hurray(foreign),
        "NumPy -> PyTorch, DLPack": lambda: torch_from(arr),
        "NumPy -> NumPy, DLPack": lambda: numpy_from(arr),
        "Hurray -> Hurray, DLPack": lambda: from_dlpack(t),
        "bytes -> Hurray, Tensor()": lambda: Tensor(data, float32, shape),
        "bytes -> NumPy, frombuffer": lambda: frombuffer(data, np.float32),
        "NumPy -> Hurray, from_numpy": lambda: from_numpy(arr),
        "NumPy -> Hurray, DLPack": lambda: from_dlpack(arr),
        "Hurray -> NumPy, DLPack": lambda: numpy_from(t),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--number", type=int, default=5000, help="exchanges per round")
    args = parser.parse_args()

    runs = cases()
    for run in runs.values():  # warm up: imports, caches, allocator pools
        for _ in range(5000):
            run()
    best = {name: float("inf") for name in runs}
    for _ in range(args.rounds):
        for name, run in runs.items():
            seconds = timeit.timeit(run, number=args.number)
            best[name] = min(best[name], seconds / args.number * 1e9)

    torch_ns = best["NumPy -> PyTorch, DLPack"]
    numpy_ns = best["NumPy -> NumPy, DLPack"]
    print(f"hurray {hurray.__version__}, numpy {np.__version__}, torch {torch.__version__}, "
          f"Python {platform.python_version()}, {platform.machine()}")
    print(f"one exchange of a 64x64 float32 tensor, best of {args.rounds} rounds of "
          f"{args.number}")
    print(f"{'exchange':36} {'ns':>7} {'x NumPy->PyTorch':>17} {'x NumPy->NumPy':>15} "
          f"{'x NumPy equivalent':>19}")
    for name, ns in best.items():
        equivalent = NUMPY_EQUIVALENT.get(name)
        versus = f"{ns / best[equivalent]:19.2f}" if equivalent else f"{'':19}"
        print(f"{name:36} {ns:7.0f} {ns / torch_ns:17.2f} {ns / numpy_ns:15.2f} {versus}")


if __name__ == "__main__":
    main()
