"""Hurray tensors in Ray and Dask beside NumPy arrays of the same bytes, ratios in one run.

- ``ray.get`` of a 256 MiB tensor from a local Ray's object store beside the same NumPy array
  (both come back as read-only views of the store; target <= 1.2x).
- Dask ``scatter`` + ``gather`` of 256 MiB to a worker process and back (Hurray's dask_serialize
  family beside NumPy's; target <= 1.1x).
- A Dask sum over a 256 MiB file: ``hurray.open(path).dask(name, chunks)`` beside
  ``dask.array.from_array(numpy.load(path, mmap_mode="r"), chunks)`` (target <= 1.1x).

Each pair runs in interleaved rounds (bench/timing.py: machine noise hits both alike); the
minimum and the median of the rounds are reported, with the ratio Hurray / NumPy of each, and
the load average at the start and the end.

    python bench/bench_engines.py [--rounds 5] [--mib 256] [--quick]

A benchmark, not a test: it asserts nothing about speed.
"""

import argparse
import os
import platform
import sys
import tempfile

import numpy as np

import hurray

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import Table, interleaved, load_average  # noqa: E402


def report(title, contenders, rounds, target):
    """Time `contenders` ("Hurray" and "NumPy") in interleaved rounds and print their table,
    the ratio against NumPy and the issue's target for it."""
    table = Table(title, refs=["NumPy"], unit="ms", cpu=True,
                  notes=[f"target: Hurray <= {target}x NumPy"])
    table.add_all(interleaved(contenders, rounds))
    table.print()


def bench_ray(values, rounds, gets):
    import ray

    ray.init(num_cpus=1, object_store_memory=3 * values.nbytes + (64 << 20),
             include_dashboard=False, log_to_driver=False)
    try:
        tensor_ref, array_ref = ray.put(hurray.from_numpy(values)), ray.put(values)

        def get(ref):
            return lambda: [ray.get(ref) for _ in range(gets)]

        report(f"ray.get x{gets} of {values.nbytes >> 20} MiB from the object store",
               {"Hurray": get(tensor_ref), "NumPy": get(array_ref)}, rounds, 1.2)
    finally:
        ray.shutdown()


def bench_dask_transport(values, rounds):
    import distributed

    with distributed.LocalCluster(n_workers=1, processes=True, threads_per_worker=1,
                                  dashboard_address=None, worker_dashboard_address=None) \
            as cluster, distributed.Client(cluster) as client:
        def round_trip(x):
            return lambda: client.gather(client.scatter(x, direct=True))

        report(f"Dask scatter + gather of {values.nbytes >> 20} MiB to a worker process",
               {"Hurray": round_trip(hurray.from_numpy(values)), "NumPy": round_trip(values)},
               rounds, 1.1)


def bench_dask_sum(values, rounds, directory):
    import dask
    import dask.array

    hurray_path, npy_path = os.path.join(directory, "w.hurray"), os.path.join(directory, "w.npy")
    hurray.save(hurray_path, {"w": values}, durable=False)
    np.save(npy_path, values)
    chunks = (max(1, values.shape[0] // 8), values.shape[1])  # 8 chunks
    with dask.config.set(scheduler="threads"), hurray.open(hurray_path) as f:
        mine = f.dask("w", chunks=chunks)
        theirs = dask.array.from_array(np.load(npy_path, mmap_mode="r"), chunks=chunks)
        assert float(mine.sum().compute()) == float(theirs.sum().compute())
        report(f"Dask sum over a {values.nbytes >> 20} MiB file, 8 chunks, threaded scheduler",
               {"Hurray": lambda: mine.sum().compute(),
                "NumPy": lambda: theirs.sum().compute()}, rounds, 1.1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--gets", type=int, default=20, help="ray.get calls per round")
    parser.add_argument("--quick", action="store_true", help="16 MiB: a check that it runs")
    args = parser.parse_args()
    if args.quick:
        args.mib = 16
    values = np.random.default_rng(0).random((args.mib << 18, 1), np.float32).reshape(-1, 1024)
    print(f"# {platform.python_implementation()} {platform.python_version()}, "
          f"{platform.machine()}; min and median of {args.rounds} interleaved rounds")
    load_average("start")
    bench_ray(values, args.rounds, args.gets)
    bench_dask_transport(values, args.rounds)
    with tempfile.TemporaryDirectory() as directory:
        bench_dask_sum(values, args.rounds, directory)
    load_average("end")


if __name__ == "__main__":
    main()
