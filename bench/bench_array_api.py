"""hurray.array_api beside NumPy and array-api-strict, in one run.

Times the operations of issue 10 on the three namespaces with the same data: an 8-element and a
4M-element float32 add, a sum over 4M elements, a 1024x1024 float32 matmul, boolean-mask
indexing over 1M elements, sorting 1M elements, linalg.solve at 256x256 and a complex fft of 1M
elements. Each is timed in interleaved rounds (noise hits all three alike), the order of the
three rotating from round to round (on this 2-core VM the one timed first after another's large
operation reads a few percent faster); the best round is reported in microseconds per call and
as a ratio to NumPy. NumPy is timed twice, as two contenders: the last column, the second
against the first, is the run's noise floor, the spread two identical calls show.

Like is compared with like: the standard's sort is stable by default (``sort(x, stable=True)``),
NumPy's is not (``kind="quicksort"``, an introsort), so NumPy's row sorts with
``kind="stable"``, the algorithm both array API namespaces are bound to.

    python bench/bench_array_api.py [--rounds 9] [--small-number 20000]

A benchmark, not a test: it asserts nothing about speed.
"""

import argparse
import os
import platform
import timeit

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # idle BLAS threads spin on small machines

import array_api_strict  # noqa: E402
import numpy as np  # noqa: E402

import hurray.array_api as hxp  # noqa: E402


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
                      {"s": small, "b": big, "m": mat, "k": mask_src, "A": a256, "y": b256,
                       "f": sig}.items()}
    for label, small_op, make in specs:
        funcs = {n: make(xp, data[n]) for n, xp in spaces.items()}
        funcs["NumPy again"] = make(np, data["NumPy"])  # the same call twice: the noise floor
        yield label, small_op, funcs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--small-number", type=int, default=20000)
    args = parser.parse_args()
    print(f"# {platform.python_implementation()} {platform.python_version()}, "
          f"NumPy {np.__version__}, array-api-strict {array_api_strict.__version__}")
    print(f"{'operation':<24} {'NumPy us':>10} {'Hurray us':>10} {'strict us':>10} "
          f"{'Hurray/NumPy':>13} {'strict/NumPy':>13} {'NumPy/NumPy':>12}")
    for label, small_op, funcs in cases():
        number = args.small_number if small_op else 3
        best = {n: float("inf") for n in funcs}
        names = list(funcs)
        for r in range(args.rounds):
            for n in names[r % len(names):] + names[:r % len(names)]:  # each goes first in turn
                best[n] = min(best[n], timeit.timeit(funcs[n], number=number) / number * 1e6)
        print(f"{label:<24} {best['NumPy']:>10.2f} {best['Hurray']:>10.2f} "
              f"{best['array-api-strict']:>10.2f} {best['Hurray'] / best['NumPy']:>13.2f} "
              f"{best['array-api-strict'] / best['NumPy']:>13.2f} "
              f"{best['NumPy again'] / best['NumPy']:>12.2f}")


if __name__ == "__main__":
    main()
