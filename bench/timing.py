"""Timing shared by the benchmarks in bench/: the best of several rounds, each after a collection."""

import gc
import time


def best(fn, rounds):
    """The shortest wall time, in seconds, of `rounds` calls of `fn()`, each after gc.collect()."""
    times = []
    for _ in range(rounds):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)
