"""hurray.array_api beside NumPy and array-api-strict, in one run.

Times the operations of issue 10 on the three namespaces with the same data: an 8-element and a
4M-element float32 add, a sum over 8 and over 4M elements, indexing an 8-element vector (an
integer, a slice, a boolean mask, a tuple of integers into a 2x4 matrix), a 1024x1024 float32
matmul, boolean-mask indexing over 1M elements, sorting 1M elements, linalg.solve at 256x256 and
a complex fft of 1M elements. Each is timed in interleaved rounds (bench/timing.py: the order of
the contenders rotates from round to round, noise hits all alike); the minimum and the median of
the rounds are reported in microseconds per call and as ratios to NumPy. NumPy is timed twice,
as two contenders: "NumPy again" against NumPy is the run's noise floor, the spread two identical
calls show. The target (issue 25) is Hurray <= 1.5x NumPy on every 8-element operation.

Like is compared with like, each peer at its best: the standard's sort is stable by default
(``sort(x, stable=True)``), NumPy's is not (``kind="quicksort"``, an introsort), so NumPy's row
sorts with ``kind="stable"``, the algorithm both array API namespaces are bound to; NumPy's
integer index is ``x[3, ...]`` (a 0-d array, as the standard's ``x[3]`` is), not the scalar
``x[3]`` returns.

    python bench/bench_array_api.py [--rounds 9] [--small-number 20000] [--quick]

A benchmark, not a test: it asserts nothing about speed.
"""

import argparse
import os
import platform

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # idle BLAS threads spin on small machines

import array_api_strict  # noqa: E402
import numpy as np  # noqa: E402

import hurray.array_api as hxp  # noqa: E402
from timing import interleaved, load_average, print_grid  # noqa: E402


def cases():
    rng = np.random.default_rng(0)
    small = rng.standard_normal(8).astype(np.float32)
    big = rng.standard_normal(1 << 22).astype(np.float32)
    mat = rng.standard_normal((1024, 1024)).astype(np.float32)
    mask_src = rng.standard_normal(1 << 20)
    a256 = rng.standard_normal((256, 256)) + 256 * np.eye(256)
    b256 = rng.standard_normal(256)
    sig = rng.standard_normal(1 << 20) + 1j * rng.standard_normal(1 << 20)
    specs = [
        ("add, 8 x float32", True, lambda xp, d: lambda: d["s"] + d["s"]),
        ("sum, 8 x float32", True, lambda xp, d: lambda: xp.sum(d["s"])),
        ("x[3], 8 x float32", True, lambda xp, d: (lambda: d["s"][3, ...]) if xp is np
         else (lambda: d["s"][3])),
        ("x[-1], 8 x float32", True, lambda xp, d: (lambda: d["s"][-1, ...]) if xp is np
         else (lambda: d["s"][-1])),
        ("x[2:6], 8 x float32", True, lambda xp, d: lambda: d["s"][2:6]),
        ("x[::2], 8 x float32", True, lambda xp, d: lambda: d["s"][::2]),
        ("x[mask], 8 x float32", True, lambda xp, d: lambda: d["s"][d["sm"]]),
        ("x[1, 2], 2x4 float32", True, lambda xp, d: (lambda: d["s2"][1, 2, ...]) if xp is np
         else (lambda: d["s2"][1, 2])),
        ("x[1, 1:3], 2x4 float32", True, lambda xp, d: lambda: d["s2"][1, 1:3]),
        ("add, 4M x float32", False, lambda xp, d: lambda: d["b"] + d["b"]),
        ("sum, 4M x float32", False, lambda xp, d: lambda: xp.sum(d["b"])),
        ("matmul, 1024^2 float32", False, lambda xp, d: lambda: d["m"] @ d["m"]),
        ("mask index, 1M", False, lambda xp, d: lambda: d["k"][d["k"] > 0]),
        ("sort, 1M (stable)", False, lambda xp, d: (lambda: np.sort(d["k"], kind="stable"))
         if xp is np else (lambda: xp.sort(d["k"]))),
        ("linalg.solve, 256^2", False, lambda xp, d: lambda: xp.linalg.solve(d["A"], d["y"])),
        ("fft, 1M", False, lambda xp, d: lambda: xp.fft.fft(d["f"])),
    ]
    spaces = {"NumPy": np, "Hurray": hxp, "array-api-strict": array_api_strict}
    data = {}
    for name, xp in spaces.items():
        data[name] = {k: xp.asarray(v) for k, v in
                      {"s": small, "sm": small > 0, "s2": small.reshape(2, 4), "b": big,
                       "m": mat, "k": mask_src, "A": a256, "y": b256, "f": sig}.items()}
    for label, small_op, make in specs:
        funcs = {n: make(xp, data[n]) for n, xp in spaces.items()}
        funcs["NumPy again"] = make(np, data["NumPy"])  # the same call twice: the noise floor
        yield label, small_op, funcs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--small-number", type=int, default=20000,
                        help="calls per round of an 8-element operation")
    parser.add_argument("--quick", action="store_true",
                        help="5 rounds of 2,000 calls: to check the bench itself")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.small_number = 5, min(args.small_number, 2000)
    print(f"# {platform.python_implementation()} {platform.python_version()}, "
          f"NumPy {np.__version__}, array-api-strict {array_api_strict.__version__}; "
          f"min and median of {args.rounds} interleaved rounds")
    load_average("start")
    rows = {label: interleaved(funcs, args.rounds, args.small_number if small_op else 3)
            for label, small_op, funcs in cases()}
    print_grid("one call; target: Hurray <= 1.5x NumPy on every 8-element operation", rows,
               "NumPy")
    load_average("end")


if __name__ == "__main__":
    main()
