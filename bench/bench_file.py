"""Saving and loading ~1 GiB of tensors: hurray vs safetensors vs NumPy, with every figure
also given as a ratio to references measured in the same run (a benchmark, not a test).

    .venv/bin/python bench/bench_file.py [--tensors 64] [--mib 16] [--rounds 3] [--dir DIR]

Loads are warm-cache (each file was just written or read, and the machine has memory for it)
and every loaded array is touched the same way -- np.add.reduce over all its elements -- so a
lazy loader pays for its page faults and an eager one for its copy. The references:
  memcpy   np.copyto of the same bytes between two in-memory arrays (the ceiling of any load
           that copies; a mapping can beat it because it copies nothing)
  touch    the same np.add.reduce over the in-memory arrays (the part of every load's time
           that is not loading)
Saves are durable for every contender: hurray.save fsyncs (and renames) by itself; the others
are followed by an fsync of each file they wrote, reported separately. The save reference:
  write    os.write of every array's bytes into one file, then fsync: the floor of any durable
           save. hurray.save's ratio to it is what checksumming costs: small writes are hashed
           in the staging buffer they are copied to, large ones as read back from the file, so
           the checksum is of exactly the bytes written even while another thread changes
           the array.

The last part times opening a file of 10,000 small tensors and getting one of them, the cost
of a lazy index: hurray.open + f[name] against safetensors.safe_open + get_tensor.
"""

import argparse
import gc
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

import hurray
from timing import best

try:
    import safetensors.numpy as st_numpy
    from safetensors import safe_open
except ImportError:
    st_numpy = None


def touch(arrays):
    """The same read of every byte for every contender."""
    total = 0.0
    for a in arrays:
        total += float(np.add.reduce(a, axis=None))
    return total


def fsync_paths(paths):
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    fd = os.open(os.path.dirname(paths[0]), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tensors", type=int, default=64)
    ap.add_argument("--mib", type=int, default=16, help="MiB per tensor")
    ap.add_argument("--rounds", type=int, default=3, help="best of this many loads")
    ap.add_argument("--small", type=int, default=10_000, help="tensors in the many-tensor file")
    ap.add_argument("--dir", default=None, help="where to write (default: a temp directory)")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="hurray-bench-", dir=args.dir))
    try:
        run(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(args, work):
    n, elems = args.tensors, args.mib * (1 << 20) // 4
    rng = np.random.default_rng(0)
    block = rng.standard_normal(elems, dtype=np.float32)
    arrays = {f"layer{i:03d}.weight": block + np.float32(i) for i in range(n)}
    total = n * elems * 4
    gib = total / (1 << 30)
    print(f"{n} tensors x {args.mib} MiB float32 = {gib:.2f} GiB; warm cache; best of "
          f"{args.rounds}; numpy {np.__version__}, hurray {hurray.__version__}"
          + ("" if st_numpy is None else f", safetensors {__import__('safetensors').__version__}"))

    # ---- references ------------------------------------------------------------------------
    dst = np.empty(elems, np.float32)
    values = list(arrays.values())
    t_memcpy = best(lambda: [np.copyto(dst, a) for a in values], args.rounds)
    t_touch = best(lambda: touch(values), args.rounds)
    expected = touch(values)
    del dst

    # ---- saves -----------------------------------------------------------------------------
    saves = []
    h_path = work / "model.hurray"
    t_save = best(lambda: hurray.save(h_path, arrays), args.rounds)
    saves.append(("hurray.save (fsync + rename included)", t_save, 0.0))

    if st_numpy is not None:
        s_path = work / "model.safetensors"
        t0 = time.perf_counter()
        st_numpy.save_file(arrays, s_path)
        t1 = time.perf_counter()
        fsync_paths([str(s_path)])
        saves.append(("safetensors.numpy.save_file", t1 - t0, time.perf_counter() - t1))

    npy_dir = work / "npy"
    npy_dir.mkdir()
    npy_paths = [str(npy_dir / f"{name}.npy") for name in arrays]
    t0 = time.perf_counter()
    for p, a in zip(npy_paths, values):
        np.save(p, a)
    t1 = time.perf_counter()
    fsync_paths(npy_paths)
    saves.append(("numpy.save (one .npy per tensor)", t1 - t0, time.perf_counter() - t1))

    def raw_write():
        fd = os.open(raw_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            t0 = time.perf_counter()
            for a in values:
                view = memoryview(a).cast("B")
                while view:
                    view = view[os.write(fd, view):]
            t1 = time.perf_counter()
            os.fsync(fd)
            return t1 - t0, time.perf_counter() - t1
        finally:
            os.close(fd)

    raw_path = work / "model.raw"  # best of rounds, as hurray.save: the floor
    t_raw = min((raw_write() for _ in range(args.rounds)), key=sum)
    raw_path.unlink()
    saves.insert(0, ("write (reference)", *t_raw))

    print("\nsave (durable)                          write s  fsync s  total s   GiB/s  x write")
    for name, w, s in saves:
        print(f"  {name:37} {w:7.3f}  {s:7.3f}  {w + s:7.3f}  {gib / (w + s):6.2f}  "
              f"{(w + s) / sum(t_raw):6.2f}")

    # ---- loads -----------------------------------------------------------------------------
    def hurray_load(mmap):
        def go():
            loaded = hurray.load(h_path, mmap=mmap)
            got = touch(np.from_dlpack(t) for t in loaded.values())
            assert got == expected
        return go

    def hurray_lazy():
        with hurray.open(h_path) as f:
            got = touch(np.from_dlpack(f[name]) for name in f)
        assert got == expected

    loads = [("hurray.load (mmap, zero-copy)", hurray_load(True)),
             ("hurray.open + f[name] (lazy, mmap)", hurray_lazy),
             ("hurray.load(mmap=False) (pread)", hurray_load(False))]
    if st_numpy is not None:
        def st_load():
            assert touch(st_numpy.load_file(s_path).values()) == expected

        def st_lazy():
            with safe_open(s_path, framework="np") as f:
                got = touch(f.get_tensor(k) for k in f.keys())
            assert got == expected
        loads += [("safetensors load_file", st_load), ("safetensors safe_open (lazy)", st_lazy)]

    def np_load(mmap_mode):
        def go():
            assert touch(np.load(p, mmap_mode=mmap_mode) for p in npy_paths) == expected
        return go
    loads += [("np.load", np_load(None)), ("np.load(mmap_mode='r')", np_load("r"))]

    print("\nload + touch every byte                   s   GiB/s  x memcpy  (load - touch) s")
    for name, fn in loads:
        fn()  # warm the cache and the code
        t = best(fn, args.rounds)
        print(f"  {name:37} {t:6.3f}  {gib / t:6.2f}  {t_memcpy / t:8.2f}  {t - t_touch:10.3f}")
    print(f"  {'reference: memcpy (np.copyto)':37} {t_memcpy:6.3f}  {gib / t_memcpy:6.2f}  "
          f"{1.0:8.2f}")
    print(f"  {'reference: touch in-memory arrays':37} {t_touch:6.3f}  {gib / t_touch:6.2f}  "
          f"{t_memcpy / t_touch:8.2f}")
    print("  (x memcpy: load throughput as a fraction of memcpy's; above 1 is faster)")

    del arrays, values, block
    for p in [h_path, *npy_paths] + ([] if st_numpy is None else [s_path]):
        os.unlink(p)
    gc.collect()

    # ---- many small tensors: open + get one ---------------------------------------------
    small = {f"model.layers.{i}.weight": np.full(16, i, np.float32) for i in range(args.small)}
    target = f"model.layers.{args.small // 2}.weight"
    h_small = work / "small.hurray"
    hurray.save(h_small, small)

    def h_open_one():
        with hurray.open(h_small) as f:
            assert np.from_dlpack(f[target])[0] == args.small // 2

    rows = [("hurray.open + f[name]", h_open_one)]
    if st_numpy is not None:
        s_small = work / "small.safetensors"
        st_numpy.save_file(small, s_small)

        def s_open_one():
            with safe_open(s_small, framework="np") as f:
                assert f.get_tensor(target)[0] == args.small // 2
        rows.append(("safetensors safe_open + get_tensor", s_open_one))

    print(f"\nopen a file of {args.small:,} tensors and get one      ms   x hurray")
    times = [(name, best(fn, 20)) for name, fn in rows if fn() is None]
    for name, t in times:
        print(f"  {name:44} {t * 1e3:7.3f}  {t / times[0][1]:7.2f}")


if __name__ == "__main__":
    main()
