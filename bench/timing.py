"""Timing shared by the benchmarks in bench/: the best of several rounds, each after a collection."""

import gc
import time


def _timed(fn):
    gc.collect()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def best(fn, rounds):
    """The shortest wall time, in seconds, of `rounds` calls of `fn()`, each after gc.collect()."""
    return min(_timed(fn) for _ in range(rounds))


def best_pair(first, second, rounds):
    """The shortest wall times of `first()` and of `second()`, called in turn `rounds` times
    each (each call after gc.collect()), so that on a shared machine both meet the same load."""
    times = [(_timed(first), _timed(second)) for _ in range(rounds)]
    return min(t for t, _ in times), min(t for _, t in times)


def best_wall_and_cpu(fn, rounds):
    """The shortest wall time and the shortest CPU time of this process (every thread, user and
    system), in seconds, of `rounds` calls of `fn()`, each after gc.collect(). On a machine
    shared with other work the CPU time is the steadier of the two: waiting for a core adds
    to the wall time only."""
    walls, cpus = [], []
    for _ in range(rounds):
        gc.collect()
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return min(walls), min(cpus)
