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
  ``np.from_dlpack(tensor)`` beside ``np.from_dlpack(ndarray)``;
- ``np.asarray(t)`` through the buffer protocol beside other exporters of the same shape
  (ADR-104): the 64x64 tensor beside a ctypes 64x64 float array (the standard library's
  exporter of more than one dimension), and a 1-D tensor of the same 4096 elements beside an
  ``array.array``, with a ``memoryview`` of that array as the floor no exporter reaches.

The cases are timed in interleaved rounds (bench/timing.py: the order rotates each round, so
machine noise hits them alike) and the minimum and the median of the rounds are reported, in
nanoseconds per exchange and as ratios to each reference; a case with a NumPy equivalent also as
a ratio to it (the last column). PyTorch runs on one thread (``torch.set_num_threads(1)``), its
best for an exchange: its idle pool otherwise spins between the calls and inflated the NumPy ->
PyTorch reference 1.8x (issue 25).

    python bench/bench_native.py [--rounds 40] [--number 5000] [--quick]

A benchmark, not a test: it asserts nothing about speed.
"""

import argparse
import array
import ctypes
import os
import platform

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # idle BLAS threads spin on small machines

import numpy as np  # noqa: E402
import torch  # noqa: E402

import hurray  # noqa: E402
from timing import Table, interleaved, load_average, versus  # noqa: E402

torch.set_num_threads(1)  # PyTorch at its best: no pool spinning between the calls


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
    "Hurray -> NumPy, np.asarray (buffer)": "ctypes 64x64 -> NumPy, np.asarray (buffer)",
    "Hurray 1-D -> NumPy, np.asarray (buffer)": "array.array -> NumPy, np.asarray (buffer)",
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
    asarray = np.asarray
    # NumPy's np.asarray of other buffer exporters of the same shapes: ctypes and array.array
    # build a fresh Py_buffer per call, as every exporter does; a memoryview hands over one it
    # already holds (CPython's managed buffer), a shortcut no exporter can take (ADR-104).
    flat = hurray.from_numpy(np.zeros(arr.size, np.float32))
    grid = (ctypes.c_float * shape[1] * shape[0])()
    words = array.array("f", data)
    view = memoryview(words)
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
        "Hurray -> NumPy, np.asarray (buffer)": lambda: asarray(t),
        "ctypes 64x64 -> NumPy, np.asarray (buffer)": lambda: asarray(grid),
        "Hurray 1-D -> NumPy, np.asarray (buffer)": lambda: asarray(flat),
        "array.array -> NumPy, np.asarray (buffer)": lambda: asarray(words),
        "memoryview -> NumPy, np.asarray (buffer)": lambda: asarray(view),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--number", type=int, default=5000, help="exchanges per round")
    parser.add_argument("--quick", action="store_true",
                        help="5 rounds of 1,000: to check the bench itself")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.number = 5, min(args.number, 1000)

    print(f"hurray {hurray.__version__}, numpy {np.__version__}, torch {torch.__version__} "
          f"({torch.get_num_threads()} thread), Python {platform.python_version()}, "
          f"{platform.machine()}")
    load_average("start")
    samples = interleaved(cases(), args.rounds, args.number)
    rounds = f"min and median of {args.rounds} interleaved rounds of {args.number}"
    table = Table(f"one exchange of a 64x64 float32 tensor, {rounds}", unit="ns",
                  refs=["NumPy -> PyTorch, DLPack", "NumPy -> NumPy, DLPack"],
                  extra=["x NumPy equivalent min/med"])
    for name, sample in samples.items():
        equivalent = NUMPY_EQUIVALENT.get(name)
        table.add(name, sample, versus(sample, samples[equivalent]) if equivalent else "")
    table.print()
    load_average("end")


if __name__ == "__main__":
    main()
