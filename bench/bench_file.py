"""Files: hurray against safetensors, NumPy and the system's own tools, every figure a ratio to a
peer or a reference measured in the same run (a benchmark, not a test).

    .venv/bin/python bench/bench_file.py [--size-mib 1024] [--tensors 64] [--rounds 3]
                                         [--counts 1,100,10000,100000] [--only save,open,...]
                                         [--quick] [--dir DIR]

--quick runs everything small (64 MiB, one round, up to 10,000 tensors) to check the bench
itself. Each section is a table: a row per contender, its time, its throughput where it moves
the data, and its time as a multiple of the reference rows named in the header (x REF: below 1
is faster than REF). Sections:

  save       durable saves (each contender then fsyncs the file and its directory; hurray.save
             does it itself) and saves left in the page cache, against safetensors
             save_file, np.save and the floor: os.write of the same bytes into one file.
  convert    a safetensors file to a hurray file, against cp of the same file.
  load       copying loads against copying the same bytes into fresh memory (np.empty,
             np.copyto, then the same touch) and safetensors load_file; mapped loads (read-only
             and writable=True) against touching the arrays in memory and
             np.load(mmap_mode='r'). Every loaded array is touched the same way,
             np.add.reduce over all its elements, so a lazy loader pays for its page faults
             and an eager one for its copy. Warm cache: each file was just written.
  consumers  NumPy, PyTorch and JAX taking every loaded tensor (from_dlpack), against the
             same call on safetensors' arrays; "copy" says whether the data moved (JAX asks
             for a legacy capsule, which cannot say read-only: a read-only tensor reaches it
             as a copy, a writable=True one does not).
  open       opening a file of N small tensors and getting one, against safetensors'
             safe_open + get_tensor, and the file bytes each tensor costs beyond its data.
  verify     `hurray verify` as a child process: time and peak RSS against xxhsum (XXH3, as
             hurray's checksums) when it is installed and a plain read of the file (cat).
"""

import argparse
import gc
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import hurray
from timing import best, best_wall_and_cpu

try:
    import safetensors
    import safetensors.numpy as st_numpy
    from safetensors import safe_open
except ImportError:
    safetensors = None

SECTIONS = ("save", "convert", "load", "consumers", "open", "verify")
GIB = 1 << 30


# ---- tables ----------------------------------------------------------------------------------

class Table:
    """Rows of (name, seconds, extra columns); prints each time with its throughput over
    `nbytes` (when given) and as a multiple of each reference row in `refs`."""

    def __init__(self, title, refs=(), nbytes=None, extra=(), unit="s"):
        self.title, self.refs, self.nbytes, self.extra, self.unit = title, refs, nbytes, extra, unit
        self.rows = []

    def add(self, name, seconds, *extra):
        self.rows.append((name, seconds, extra))

    def skip(self, name, why):
        self.rows.append((name, None, (why,)))

    def time_of(self, name):
        return next(t for n, t, _ in self.rows if n == name)

    def print(self):
        scale = 1e3 if self.unit == "ms" else 1.0
        cols = [f"x {r}" for r in self.refs] + list(self.extra)
        widths = [max(8, len(c)) for c in cols]
        width = max([40] + [len(n) for n, _, _ in self.rows])
        head = f"{self.unit:>8}" + ("    GiB/s" if self.nbytes else "")
        head += "".join(f"  {c:>{w}}" for c, w in zip(cols, widths))
        print(f"\n{self.title}")
        print(f"  {'':{width}} {head}")
        for name, t, extra in self.rows:
            if t is None:
                print(f"  {name:{width}}  ({extra[0]})")
                continue
            line = f"{t * scale:8.3f}"
            if self.nbytes:
                line += f"  {self.nbytes / GIB / t:7.2f}"
            values = [ratio(t / self.time_of(r)) for r in self.refs] + list(extra)
            line += "".join(f"  {v:>{w}}" for v, w in zip(values, widths))
            print(f"  {name:{width}} {line}")


# ---- helpers ---------------------------------------------------------------------------------

def ratio(x):
    """Two decimals, or two significant digits below 0.1 (0.00025, not 0.00)."""
    return f"{x:.2f}" if x >= 0.1 else f"{x:.2g}"


def touch(arrays):
    """The same read of every byte for every contender."""
    total = 0.0
    for a in arrays:
        total += float(np.add.reduce(a, axis=None))
    return total


def fsync_file_and_directory(path):
    for p, flags in ((path, os.O_RDONLY), (os.path.dirname(path) or ".", os.O_RDONLY)):
        fd = os.open(p, flags)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def best_save(fn, path, rounds):
    """The best time of `fn()` writing `path`, each round starting from no file and no dirty
    pages (the previous round's writeback would otherwise be charged to the next)."""
    times = []
    for _ in range(rounds):
        if os.path.exists(path):
            os.unlink(path)
        os.sync()
        gc.collect()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def write_raw(path, arrays):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for a in arrays:
            view = memoryview(a).cast("B")
            while view:
                view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def child(argv):
    """Wall seconds of running `argv` to completion."""
    t0 = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"{argv} failed ({done.returncode}): {done.stderr.decode().strip()}")
    return elapsed


def child_peak_rss(argv):
    """The peak RSS of `argv`'s own process, in MiB: its VmHWM, read every millisecond until it
    exits (the rusage of a child of this process would start from this process's peak, as
    the child's memory was this process's until it called exec)."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL,  # returns once it called exec
                            stderr=subprocess.DEVNULL)
    peak = 0
    while proc.poll() is None:
        try:
            with open(f"/proc/{proc.pid}/status") as f:
                peak = max([peak] + [int(line.split()[1]) for line in f
                                     if line.startswith("VmHWM:")])
        except OSError:
            pass
        time.sleep(0.001)
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, argv)
    return peak / 1024


def machine():
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f
                          if line.startswith("model name")), "")
        with open("/proc/meminfo") as f:
            mem = int(next(line.split()[1] for line in f if line.startswith("MemTotal"))) / (1 << 20)
    except (OSError, StopIteration):
        mem = 0.0
    return (f"{os.cpu_count()} CPUs ({model or platform.machine()}), {mem:.0f} GiB memory, "
            f"Linux {platform.release()}")


# ---- sections --------------------------------------------------------------------------------

def bench_save(ctx):
    arrays, values, work, rounds = ctx.arrays, ctx.values, ctx.work, ctx.args.rounds
    st = "safetensors save_file"
    durable = Table("save, durable: file and directory fsynced before it returns",
                    refs=[f"{st} + fsync", "write + fsync"], nbytes=ctx.nbytes)
    cached = Table("save, not durable: left in the page cache",
                   refs=[st, "write"], nbytes=ctx.nbytes)

    def synced(fn, path):
        def go():
            fn()
            fsync_file_and_directory(str(path))
        return go

    raw = work / "model.raw"
    durable.add("write + fsync", best_save(synced(lambda: write_raw(raw, values), raw), raw, rounds))
    cached.add("write", best_save(lambda: write_raw(raw, values), raw, rounds))
    raw.unlink()

    if safetensors is not None:
        s = work / "save.safetensors"
        durable.add(f"{st} + fsync",
                    best_save(synced(lambda: st_numpy.save_file(arrays, s), s), s, rounds))
        cached.add(st, best_save(lambda: st_numpy.save_file(arrays, s), s, rounds))
        s.unlink()
    else:
        durable.skip(f"{st} + fsync", "safetensors is not installed")
        cached.skip(st, "safetensors is not installed")

    npy = work / "save.npy"  # all arrays in one file: np.save appends
    def np_save():
        with open(npy, "wb") as f:
            for a in values:
                np.save(f, a)
    durable.add("np.save + fsync", best_save(synced(np_save, npy), npy, rounds))
    cached.add("np.save", best_save(np_save, npy, rounds))
    npy.unlink()

    h = work / "save.hurray"
    durable.add("hurray.save", best_save(lambda: hurray.save(h, arrays), h, rounds))
    cached.add("hurray.save(durable=False)",
               best_save(lambda: hurray.save(h, arrays, durable=False), h, rounds))
    h.unlink()
    return [durable, cached]


def bench_convert(ctx):
    rounds = ctx.args.rounds
    if safetensors is None:
        t = Table("convert safetensors -> hurray")
        t.skip("hurray.convert", "safetensors is not installed")
        return [t]
    src = ctx.safetensors_file()
    size = src.stat().st_size
    durable = Table("convert safetensors -> hurray, durable", refs=["cp + fsync"], nbytes=size)
    cached = Table("convert safetensors -> hurray, not durable", refs=["cp"], nbytes=size)
    cp = ctx.work / "copy.safetensors"

    def copy():
        shutil.copyfile(src, cp)
    def copy_synced():
        copy()
        fsync_file_and_directory(str(cp))
    durable.add("cp + fsync", best_save(copy_synced, cp, rounds))
    cached.add("cp", best_save(copy, cp, rounds))
    cp.unlink()

    out = ctx.work / "converted.hurray"
    durable.add("hurray.convert", best_save(lambda: hurray.convert(src, out), out, rounds))
    cached.add("hurray.convert(durable=False)",
               best_save(lambda: hurray.convert(src, out, durable=False), out, rounds))
    out.unlink()
    return [durable, cached]


def bench_load(ctx):
    rounds, values, expected = ctx.args.rounds, ctx.values, ctx.expected
    h = ctx.hurray_file()
    st_ref = ["safetensors load_file"] if safetensors is not None else []
    copying = Table("load + touch every byte, copying", refs=["copy to fresh memory"] + st_ref,
                    nbytes=ctx.nbytes, extra=["CPU s", "x copy CPU"])
    mapped = Table("load + touch every byte, mapped (zero-copy)",
                   refs=["touch in memory", "np.load(mmap_mode='r')"], nbytes=ctx.nbytes,
                   extra=["CPU s", "x touch CPU"])
    cpu_refs = {}

    def timed(fn, ref):
        """Wall seconds, then CPU seconds and their multiple of the CPU seconds of the first
        row timed with the same `ref` (the table's reference row)."""
        fn()  # warm the cache and the code
        wall, cpu = best_wall_and_cpu(fn, rounds)
        cpu_refs.setdefault(ref, cpu)
        return wall, f"{cpu:.3f}", f"{cpu / cpu_refs[ref]:.2f}"

    def fresh_copy():
        copies = [np.empty_like(a) for a in values]
        for dst, a in zip(copies, values):
            np.copyto(dst, a)
        assert touch(copies) == expected
    copying.add("copy to fresh memory", *timed(fresh_copy, "copy"))

    def hurray_load(mmap, writable=False):
        def go():
            loaded = hurray.load(h, mmap=mmap, writable=writable)
            assert touch(np.from_dlpack(t) for t in loaded.values()) == expected
        return go

    def hurray_lazy():
        with hurray.open(h) as f:
            assert touch(np.from_dlpack(f[name]) for name in f) == expected

    npy = ctx.npy_files()
    def np_load(mmap_mode):
        def go():
            assert touch(np.load(p, mmap_mode=mmap_mode) for p in npy) == expected
        return go

    copying.add("hurray.load(mmap=False)", *timed(hurray_load(False), "copy"))
    if safetensors is not None:
        s = ctx.safetensors_file()
        def st_load():
            assert touch(st_numpy.load_file(s).values()) == expected
        def st_lazy():
            with safe_open(s, framework="np") as f:
                assert touch(f.get_tensor(k) for k in f.keys()) == expected
        copying.add("safetensors load_file", *timed(st_load, "copy"))
        copying.add("safetensors safe_open + get_tensor", *timed(st_lazy, "copy"))
    copying.add("np.load (one .npy per tensor)", *timed(np_load(None), "copy"))

    mapped.add("touch in memory", *timed(lambda: touch(values), "touch"))
    mapped.add("np.load(mmap_mode='r')", *timed(np_load("r"), "touch"))
    mapped.add("hurray.load (mmap)", *timed(hurray_load(True), "touch"))
    mapped.add("hurray.load(writable=True) (mmap)",
               *timed(hurray_load(True, writable=True), "touch"))
    mapped.add("hurray.open + f[name]", *timed(hurray_lazy, "touch"))
    return [copying, mapped]


def consumers():
    """(name, function taking a DLPack producer, its result's data address) for each
    framework that is installed."""
    found = [("NumPy np.from_dlpack", np.from_dlpack, lambda a: a.ctypes.data)]
    try:
        import torch
        found.append(("PyTorch torch.from_dlpack", torch.from_dlpack, lambda t: t.data_ptr()))
    except ImportError:
        pass
    try:
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        import jax.numpy as jnp
        found.append(("JAX jnp.from_dlpack", lambda t: jnp.from_dlpack(t).block_until_ready(),
                      lambda x: x.unsafe_buffer_pointer()))  # waited for: JAX copies async
    except ImportError:
        pass
    return found


def bench_consumers(ctx):
    rounds, h = ctx.args.rounds, ctx.hurray_file()
    sources = [("hurray.load (mmap)", lambda: hurray.load(h)),
               ("hurray.load(writable=True) (mmap)", lambda: hurray.load(h, writable=True)),
               ("hurray.load(mmap=False)", lambda: hurray.load(h, mmap=False))]
    if safetensors is not None:
        s = ctx.safetensors_file()
        sources.append(("safetensors load_file", lambda: st_numpy.load_file(s)))
    tables = []
    for consumer, take, address in consumers():
        peer = "safetensors load_file"
        table = Table(f"{consumer} taking every loaded tensor", unit="ms",
                      refs=[peer] if safetensors is not None else [], extra=["copy"])
        for source, load in reversed(sources):  # the peer first: the others refer to it
            loaded = list(load().values())
            try:
                taken = [take(t) for t in loaded]
            except (TypeError, ValueError, RuntimeError, BufferError) as e:
                table.skip(source, f"{type(e).__name__}: {e}")
                continue
            copied = any(address(x) != np.from_dlpack(t).ctypes.data
                         for x, t in zip(taken, loaded))
            del taken
            seconds = best(lambda: [take(t) for t in loaded], rounds)
            table.add(source, seconds, "yes" if copied else "no")
            del loaded
        tables.append(table)
    return tables


def bench_open(ctx):
    st = "safetensors safe_open + get_tensor"
    tables = []
    for n in ctx.counts:
        table = Table(f"open a file of {n:,} tensors of 64 bytes and get one",
                      refs=[st] if safetensors is not None else [], extra=["B/tensor"],
                      unit="ms")
        small = {f"model.layers.{i}.weight": np.full(16, i, np.float32) for i in range(n)}
        target, want = f"model.layers.{n // 2}.weight", n // 2
        h, s = ctx.work / f"open{n}.hurray", ctx.work / f"open{n}.safetensors"

        def h_open():
            with hurray.open(h) as f:
                assert np.from_dlpack(f[target])[0] == want

        def s_open():
            with safe_open(s, framework="np") as f:
                assert f.get_tensor(target)[0] == want

        rows = [("hurray.open + f[name]", h_open, h, lambda: hurray.save(h, small))]
        if safetensors is not None:
            rows.insert(0, (st, s_open, s, lambda: st_numpy.save_file(small, s)))
        for name, fn, path, make in rows:
            make()
            fn()  # warm
            rounds = max(3, min(100, int(0.5 / max(best(fn, 1), 1e-6))))
            table.add(name, best(fn, rounds), f"{(path.stat().st_size - 64 * n) / n:.0f}")
            path.unlink()
        tables.append(table)
    return tables


def bench_verify(ctx):
    h = ctx.hurray_file()
    cli = ctx.args.cli or shutil.which("hurray", path=os.path.dirname(sys.executable)) \
        or shutil.which("hurray")
    size = h.stat().st_size
    xxhsum = shutil.which("xxhsum")
    refs = (["xxhsum -H3"] if xxhsum else []) + ["cat"]
    table = Table(f"verify checksums of a {size / GIB:.2f} GiB file, warm cache", refs=refs,
                  nbytes=size, extra=["peak RSS MiB"])

    def run(name, argv):
        child(argv)  # warm
        seconds = min(child(argv) for _ in range(ctx.args.rounds))
        table.add(name, seconds, f"{child_peak_rss(argv):.1f}")

    if xxhsum:
        run("xxhsum -H3", [xxhsum, "-H3", str(h)])
    else:
        table.skip("xxhsum -H3", "xxhsum is not installed (Debian package xxhash)")
    run("cat", ["sh", "-c", f'cat "$0" > /dev/null', str(h)])
    if cli is None:
        table.skip("hurray verify", "the hurray CLI was not found (--cli PATH)")
    else:
        run("hurray verify", [cli, "verify", "-q", str(h)])
        run("hurray verify --pread", [cli, "verify", "-q", "--pread", str(h)])
    return [table]


# ---- the run ---------------------------------------------------------------------------------

class Context:
    """What the sections share: the arrays, and the files made from them once, on demand."""

    def __init__(self, args, work):
        self.args, self.work = args, work
        elems = args.size_mib * (1 << 20) // 4 // args.tensors
        rng = np.random.default_rng(0)
        block = rng.standard_normal(elems, dtype=np.float32)
        self.arrays = {f"layer{i:03d}.weight": block + np.float32(i) for i in range(args.tensors)}
        self.values = list(self.arrays.values())
        self.nbytes = sum(a.nbytes for a in self.values)
        self.expected = touch(self.values)
        self.counts = args.counts
        self._files = {}

    def _file(self, key, make):
        if key not in self._files:
            self._files[key] = make()
        return self._files[key]

    def hurray_file(self):
        def make():
            p = self.work / "model.hurray"
            hurray.save(p, self.arrays)
            return p
        return self._file("hurray", make)

    def safetensors_file(self):
        def make():
            p = self.work / "model.safetensors"
            st_numpy.save_file(self.arrays, p)
            return p
        return self._file("safetensors", make)

    def npy_files(self):
        def make():
            (self.work / "npy").mkdir()
            paths = [self.work / "npy" / f"{name}.npy" for name in self.arrays]
            for p, a in zip(paths, self.values):
                np.save(p, a)
            return paths
        return self._file("npy", make)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mib", type=int, default=1024, help="data in the large file")
    ap.add_argument("--tensors", type=int, default=64, help="tensors in the large file")
    ap.add_argument("--rounds", type=int, default=3, help="best of this many")
    ap.add_argument("--counts", default=None,
                    help="tensor counts of the open section (default 1,100,10000,100000)")
    ap.add_argument("--only", default=",".join(SECTIONS), help="sections to run, of: "
                    + ",".join(SECTIONS))
    ap.add_argument("--quick", action="store_true",
                    help="64 MiB, one round, counts up to 10,000: to check the bench itself")
    ap.add_argument("--cli", default=None, help="the hurray CLI (default: beside python)")
    ap.add_argument("--dir", default=None, help="where to write (default: a temp directory)")
    args = ap.parse_args()
    if args.quick:
        args.size_mib, args.rounds = min(args.size_mib, 64), 1
    counts = args.counts or ("1,100,10000" if args.quick else "1,100,10000,100000")
    args.counts = [int(c) for c in counts.split(",")]
    only = args.only.split(",")
    unknown = set(only) - set(SECTIONS)
    if unknown:
        ap.error(f"unknown sections: {', '.join(sorted(unknown))}")

    work = Path(tempfile.mkdtemp(prefix="hurray-bench-", dir=args.dir))
    try:
        ctx = Context(args, work)
        print(f"{args.tensors} float32 tensors, {ctx.nbytes / GIB:.2f} GiB; best of {args.rounds};"
              f" {machine()}")
        print(f"numpy {np.__version__}, hurray {hurray.__version__}"
              + ("" if safetensors is None else f", safetensors {safetensors.__version__}")
              + f"; x REF: time / REF's time, below 1 is faster")
        for name in SECTIONS:
            if name in only:
                for table in globals()[f"bench_{name}"](ctx):
                    table.print()
                sys.stdout.flush()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
