"""Timing shared by the benchmarks in bench/: the best of several rounds, each after a collection."""

import gc
import time


def _timed(fn):
    """The wall time and the CPU time of this process (every thread, user and system), in
    seconds, of one call of `fn()` after gc.collect()."""
    gc.collect()
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def best(fn, rounds):
    """The shortest wall time, in seconds, of `rounds` calls of `fn()`, each after gc.collect()."""
    return min(_timed(fn)[0] for _ in range(rounds))


def best_pair_wall_and_cpu(first, second, rounds):
    """The shortest wall times and the shortest CPU times of `first()` and of `second()`,
    called in turn `rounds` times each (each call after gc.collect()), so that on a shared
    machine both meet the same load: ((wall, cpu) of first, (wall, cpu) of second)."""
    times = [(_timed(first), _timed(second)) for _ in range(rounds)]
    return tuple(tuple(min(t[side][i] for t in times) for i in (0, 1)) for side in (0, 1))


def best_wall_and_cpu(fn, rounds):
    """The shortest wall time and the shortest CPU time of this process (every thread, user and
    system), in seconds, of `rounds` calls of `fn()`, each after gc.collect(). On a machine
    shared with other work the CPU time is the steadier of the two: waiting for a core adds
    to the wall time only."""
    times = [_timed(fn) for _ in range(rounds)]
    return min(t[0] for t in times), min(t[1] for t in times)
