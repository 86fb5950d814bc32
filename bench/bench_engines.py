"""Hurray tensors in Ray and Dask beside NumPy arrays of the same bytes, ratios in one run.

- ``ray.get`` of a 256 MiB tensor from a local Ray's object store beside the same NumPy array
  (both come back as read-only views of the store; target <= 1.2x).
- Dask ``scatter`` + ``gather`` of 256 MiB to a worker process and back (Hurray's dask_serialize
  family beside NumPy's; target <= 1.1x).
- A Dask sum over a 256 MiB file: ``hurray.open(path).dask(name, chunks)`` beside
  ``dask.array.from_array(numpy.load(path, mmap_mode="r"), chunks)`` (target <= 1.1x).

Each pair runs in interleaved rounds (machine noise hits both alike); the best round of each is
reported, with the ratio Hurray / NumPy.

    python bench/bench_engines.py [--rounds 5] [--mib 256]

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
from timing import best_pair_wall_and_cpu  # noqa: E402


def report(name, pair, target):
    (hurray_wall, _), (numpy_wall, _) = pair
    ratio = hurray_wall / numpy_wall
    print(f"{name:44s} Hurray {hurray_wall * 1e3:9.2f} ms   NumPy {numpy_wall * 1e3:9.2f} ms   "
          f"ratio {ratio:5.2f}x (target <= {target}x)", flush=True)


def bench_ray(values, rounds, gets):
    import ray

    ray.init(num_cpus=1, object_store_memory=3 * values.nbytes + (64 << 20),
             include_dashboard=False, log_to_driver=False)
    try:
        tensor_ref, array_ref = ray.put(hurray.from_numpy(values)), ray.put(values)

        def get(ref):
            return lambda: [ray.get(ref) for _ in range(gets)]

        report(f"ray.get x{gets}, {values.nbytes >> 20} MiB",
               best_pair_wall_and_cpu(get(tensor_ref), get(array_ref), rounds), 1.2)
    finally:
        ray.shutdown()


def bench_dask_transport(values, rounds):
    import distributed

    with distributed.LocalCluster(n_workers=1, processes=True, threads_per_worker=1,
                                  dashboard_address=None, worker_dashboard_address=None) \
            as cluster, distributed.Client(cluster) as client:
        def round_trip(x):
            return lambda: client.gather(client.scatter(x, direct=True))

        report(f"Dask scatter + gather, {values.nbytes >> 20} MiB",
               best_pair_wall_and_cpu(round_trip(hurray.from_numpy(values)), round_trip(values),
                                      rounds), 1.1)


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
        report(f"Dask sum over a {values.nbytes >> 20} MiB file",
               best_pair_wall_and_cpu(lambda: mine.sum().compute(),
                                      lambda: theirs.sum().compute(), rounds), 1.1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--gets", type=int, default=20, help="ray.get calls per round")
    args = parser.parse_args()
    values = np.random.default_rng(0).random((args.mib << 18, 1), np.float32).reshape(-1, 1024)
    print(f"# {platform.python_implementation()} {platform.python_version()}, "
          f"{platform.machine()}, {os.cpu_count()} CPUs; best of {args.rounds} rounds")
    bench_ray(values, args.rounds, args.gets)
    bench_dask_transport(values, args.rounds)
    with tempfile.TemporaryDirectory() as directory:
        bench_dask_sum(values, args.rounds, directory)


if __name__ == "__main__":
    main()
