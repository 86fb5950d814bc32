"""Files: hurray against safetensors, NumPy and the system's own tools, every figure a ratio to a
peer or a reference measured in the same run (a benchmark, not a test).

    .venv/bin/python bench/bench_file.py [--size-mib 512] [--tensors 64] [--rounds 5]
                                         [--counts 1,100,10000,100000] [--only save,open,...]
                                         [--quick] [--dir DIR]

--quick runs everything small (64 MiB, 5 rounds, up to 10,000 tensors) to check the bench
itself. Each section is a table whose contenders are timed in interleaved rounds
(bench/timing.py: the order rotates each round, so the load of a shared machine falls on all
alike; every contender runs once untimed first, no round follows a gc.collect()): a row per
contender, the minimum and the median of its rounds, its throughput where it moves the data,
and its time as a multiple of the reference rows named in the header (x REF min/med: below 1 is
faster than REF). Each peer is at its best: safetensors' mapped path for PyTorch
(safetensors.torch.load_file, safe_open(framework="pt"), which map the file), np.load with
mmap_mode where the load is mapped, cp for a copy. Where a peer beats hurray the output says so
in a line of its own. The default 512 MiB keeps what a run holds at once under 2 GiB (the data,
a loaded copy; on disk the hurray, safetensors and .npy files). Sections:

  save       durable saves (each contender then fsyncs the file and its directory; hurray.save
             does it itself) and saves left in the page cache, against safetensors
             save_file, np.save and the floor: os.write of the same bytes into one file;
             then 10,000 tensors of 64 bytes against safetensors save_file (the per-tensor
             cost).
  convert    a safetensors file to a hurray file, against cp of the same file (+ fsync for
             the durable one) and, not durable, against the floor of any converter: the
             kernel's copy of the data bytes to the offsets a Hurray file gives them
             (copy_file_range; cp moves whole pages, a new layout splits each across two).
  load       copying loads against copying the same bytes into fresh memory (np.empty,
             np.copyto, then the same touch), safetensors load_file and safe_open (NumPy) and
             np.load; hurray.load(mmap=False) both as it runs again (in memory the previous
             round's tensors released, which hurray keeps: ADR-108) and, "nothing kept", after
             hurray.empty_cache(), as a process's first load; mapped loads (read-only and writable=True) against touching the arrays in
             memory, np.load(mmap_mode='r') and safetensors' mapped PyTorch loads
             (safetensors.torch.load_file, safe_open(framework="pt") + get_tensor, touched
             through Tensor.numpy(), a view). Every loaded array is touched the same way,
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
from timing import Table, interleaved, load_average, nothing_kept

try:
    import safetensors
    import safetensors.numpy as st_numpy
    from safetensors import safe_open
except ImportError:
    safetensors = None
try:
    import safetensors.torch as st_torch
    import torch
except ImportError:
    st_torch = None

SECTIONS = ("save", "convert", "load", "consumers", "open", "verify")
GIB = 1 << 30


# ---- helpers ---------------------------------------------------------------------------------

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


def fresh(paths):
    """A `before` for timing.interleaved: removes the file the contender named writes (a key of
    `paths`) and flushes every dirty page, so that no call is charged the previous one's
    writeback."""
    def before(name):
        if os.path.exists(paths[name]):
            os.unlink(paths[name])
        os.sync()
    return before


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
    """A function running `argv` to completion (its output discarded)."""
    def run():
        done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if done.returncode != 0:
            raise RuntimeError(f"{argv} failed ({done.returncode}): {done.stderr.decode().strip()}")
    return run


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

    def np_save(path):
        def go():
            with open(path, "wb") as f:  # all arrays in one file: np.save appends
                for a in values:
                    np.save(f, a)
        return go

    raw, s, npy, h = (work / f"save.{ext}" for ext in ("raw", "safetensors", "npy", "hurray"))
    plain = {"write": (lambda: write_raw(raw, values), raw),
             "np.save": (np_save(npy), npy),
             "hurray": (lambda: hurray.save(h, arrays, durable=False), h)}
    if safetensors is not None:
        plain[st] = (lambda: st_numpy.save_file(arrays, s), s)
    else:
        durable.skip(f"{st} + fsync", "safetensors is not installed")
        cached.skip(st, "safetensors is not installed")
    runs = {f"{n} + fsync": (synced(fn, path), path) for n, (fn, path) in plain.items()
            if n != "hurray"}
    runs["hurray.save"] = (lambda: hurray.save(h, arrays), h)
    for table, contenders in ((durable, runs), (cached, plain)):
        paths = {n: path for n, (_, path) in contenders.items()}
        samples = interleaved({n: fn for n, (fn, _) in contenders.items()}, rounds,
                              before=fresh(paths))
        table.add_all({("hurray.save(durable=False)" if n == "hurray" else n): v
                       for n, v in samples.items()})
    for path in (raw, s, npy, h):
        if path.exists():
            path.unlink()
    return [durable, cached, save_small(ctx)]


def save_small(ctx):
    """10,000 tensors of 64 bytes, not durable: the per-tensor cost of a save."""
    n = 10_000
    small = {f"model.layers.{i}.weight": np.full(16, i, np.float32) for i in range(n)}
    st = "safetensors save_file"
    table = Table(f"save {n:,} tensors of 64 bytes, not durable", refs=[st], unit="ms")
    h, s = ctx.work / "small.hurray", ctx.work / "small.safetensors"
    runs = {"hurray.save(durable=False)": lambda: hurray.save(h, small, durable=False)}
    if safetensors is not None:
        runs = {st: lambda: st_numpy.save_file(small, s), **runs}
    else:
        table.skip(st, "safetensors is not installed")
    paths = {st: s, "hurray.save(durable=False)": h}
    table.add_all(interleaved(runs, ctx.args.rounds, before=fresh(paths)))
    for path in (h, s):
        if path.exists():
            path.unlink()
    return table


def bench_convert(ctx):
    rounds = ctx.args.rounds
    if safetensors is None:
        t = Table("convert safetensors -> hurray")
        t.skip("hurray.convert", "safetensors is not installed")
        return [t]
    src = ctx.safetensors_file()
    size = src.stat().st_size
    relaid_name = "copy_file_range to a Hurray file's offsets"
    durable = Table("convert safetensors -> hurray, durable", refs=["cp + fsync"], nbytes=size)
    cached = Table("convert safetensors -> hurray, not durable", refs=["cp", relaid_name],
                   nbytes=size)
    cp, out = ctx.work / "copy.safetensors", ctx.work / "converted.hurray"
    relaid = ctx.work / "relaid.bin"
    with open(src, "rb") as f:
        data_start = 8 + int.from_bytes(f.read(8), "little")

    def copy():
        shutil.copyfile(src, cp)

    def relaid_copy():
        # The floor of any converter: the data bytes copied by the kernel (no hash, no pass
        # through user memory) to where a Hurray file puts them, after its 64-byte header. cp
        # keeps every byte at its offset, so the kernel moves whole pages; a new layout puts
        # each source page across two destination pages.
        with open(src, "rb") as fi, open(relaid, "wb") as fo:
            n, length = 0, size - data_start
            os.posix_fallocate(fo.fileno(), 0, 64 + length)
            while n < length:
                n += os.copy_file_range(fi.fileno(), fo.fileno(), length - n,
                                        data_start + n, 64 + n)

    def copy_synced():
        copy()
        fsync_file_and_directory(str(cp))

    for table, contenders in (
            (durable, {"cp + fsync": copy_synced,
                       "hurray.convert": lambda: hurray.convert(src, out)}),
            (cached, {"cp": copy, relaid_name: relaid_copy,
                      "hurray.convert(durable=False)":
                          lambda: hurray.convert(src, out, durable=False)})):
        paths = {n: out if n.startswith("hurray") else relaid if n == relaid_name else cp
                 for n in contenders}
        table.add_all(interleaved(contenders, rounds, before=fresh(paths)))
    for path in (cp, out, relaid):
        path.unlink()
    return [durable, cached]


def bench_load(ctx):
    rounds, values, expected = ctx.args.rounds, ctx.values, ctx.expected
    h = ctx.hurray_file()
    st_ref = ["safetensors load_file"] if safetensors is not None else []
    st_pt = "safetensors.torch load_file"
    copying = Table("load + touch every byte, copying", refs=["copy to fresh memory"] + st_ref,
                    nbytes=ctx.nbytes, cpu=True)
    mapped = Table("load + touch every byte, mapped (zero-copy)",
                   refs=["touch in memory", "np.load(mmap_mode='r')"]
                   + ([st_pt] if st_torch is not None else []),
                   nbytes=ctx.nbytes, cpu=True)

    def fresh_copy():
        copies = [np.empty_like(a) for a in values]
        for dst, a in zip(copies, values):
            np.copyto(dst, a)
        assert touch(copies) == expected

    def hurray_load(mmap, writable=False):
        def go():
            loaded = hurray.load(h, mmap=mmap, writable=writable)
            assert touch(np.from_dlpack(t) for t in loaded.values()) == expected
        return go

    def hurray_lazy(mmap=True):
        def go():
            with hurray.open(h, mmap=mmap) as f:
                assert touch(np.from_dlpack(f[name]) for name in f) == expected
        return go

    npy = ctx.npy_files()

    def np_load(mmap_mode, held=False):
        def go():
            arrays = (np.load(p, mmap_mode=mmap_mode) for p in npy)
            assert touch(list(arrays) if held else arrays) == expected
        return go

    copies = {"copy to fresh memory": fresh_copy,
              "hurray.load(mmap=False)": hurray_load(False),
              "hurray.load(mmap=False), nothing kept": hurray_load(False)}
    maps = {"touch in memory": lambda: touch(values),
            "np.load(mmap_mode='r')": np_load("r"),
            "hurray.load (mmap)": hurray_load(True),
            "hurray.load(writable=True) (mmap)": hurray_load(True, writable=True),
            "hurray.open + f[name]": hurray_lazy()}
    if safetensors is not None:
        s = ctx.safetensors_file()

        def st_load():
            assert touch(st_numpy.load_file(s).values()) == expected

        def st_lazy(framework, view):
            def go():
                with safe_open(s, framework=framework) as f:
                    assert touch(view(f.get_tensor(k)) for k in f.keys()) == expected
            return go

        copies["safetensors load_file"] = st_load
        copies["safetensors safe_open + get_tensor, one at a time"] = st_lazy("np", lambda a: a)
        if st_torch is not None:
            maps[st_pt] = lambda: touch(t.numpy() for t in st_torch.load_file(s).values())
            maps['safetensors safe_open(framework="pt") + get_tensor'] = \
                st_lazy("pt", lambda t: t.numpy())
    # Two ways to read a file of tensors, each against the peers that read the same way:
    # every tensor at once and all held (hurray.load, safetensors load_file, a list of
    # np.load), or one at a time, each dropped before the next is read (hurray.open + f[name],
    # safe_open + get_tensor, np.load in a generator), which lets an allocator reuse the
    # memory the previous one had. hurray also keeps the memory of tensors released, up to
    # 1 GiB, for the next of their size (ADR-108), so a load that runs again takes the pages
    # the previous round's tensors had, where the peers' all-held loads get fresh ones from
    # glibc; ", nothing kept" is the same load after hurray.empty_cache(): a process's first.
    copies["hurray.open(mmap=False) + f[name], one at a time"] = hurray_lazy(mmap=False)
    copies["np.load (one .npy per tensor), all held"] = np_load(None, held=True)
    copies["np.load (one .npy per tensor), one at a time"] = np_load(None)
    copying.add_all(interleaved(copies, rounds, before=nothing_kept))
    mapped.add_all(interleaved(maps, rounds))
    copying.beaten("hurray.load(mmap=False)",
                   ["safetensors load_file", "np.load (one .npy per tensor), all held"])
    copying.beaten("hurray.open(mmap=False) + f[name], one at a time",
                   ["safetensors safe_open + get_tensor, one at a time",
                    "np.load (one .npy per tensor), one at a time"])
    mapped.beaten("hurray.load (mmap)",
                  [n for n in maps if not n.startswith(("hurray", "touch"))])
    return [copying, mapped]


def consumers():
    """(name, function taking a DLPack producer, its result's data address) for each
    framework that is installed."""
    found = [("NumPy np.from_dlpack", np.from_dlpack, lambda a: a.ctypes.data)]
    if st_torch is not None:
        found.append(("PyTorch torch.from_dlpack", torch.from_dlpack, lambda t: t.data_ptr()))
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
    peer = "safetensors load_file"
    sources = {"hurray.load (mmap)": lambda: hurray.load(h),
               "hurray.load(writable=True) (mmap)": lambda: hurray.load(h, writable=True),
               "hurray.load(mmap=False)": lambda: hurray.load(h, mmap=False)}
    if safetensors is not None:
        s = ctx.safetensors_file()
        sources[peer] = lambda: st_numpy.load_file(s)
    loaded = {source: list(load().values()) for source, load in sources.items()}
    tables = []
    for consumer, take, address in consumers():
        table = Table(f"{consumer} taking every loaded tensor", unit="ms",
                      refs=[peer] if safetensors is not None else [], extra=["copy"])
        runs, copied = {}, {}
        for source, tensors in loaded.items():
            try:
                taken = [take(t) for t in tensors]
            except (TypeError, ValueError, RuntimeError, BufferError) as e:
                table.skip(source, f"{type(e).__name__}: {e}")
                continue
            copied[source] = any(address(x) != np.from_dlpack(t).ctypes.data
                                 for x, t in zip(taken, tensors))
            del taken
            runs[source] = lambda tensors=tensors: [take(t) for t in tensors]
        for source, sample in interleaved(runs, rounds).items():
            table.add(source, sample, "yes" if copied[source] else "no")
        tables.append(table)
    return tables


def bench_open(ctx):
    st = "safetensors safe_open + get_tensor"
    tables = []
    for n in ctx.counts:
        small = {f"model.layers.{i}.weight": np.full(16, i, np.float32) for i in range(n)}
        target, want = f"model.layers.{n // 2}.weight", n // 2
        h, s = ctx.work / f"open{n}.hurray", ctx.work / f"open{n}.safetensors"
        hurray.save(h, small)
        sizes = {"hurray.open + f[name]": h}

        def h_open():
            with hurray.open(h) as f:
                assert np.from_dlpack(f[target])[0] == want

        def s_open():
            with safe_open(s, framework="np") as f:
                assert f.get_tensor(target)[0] == want

        runs = {"hurray.open + f[name]": h_open}
        if safetensors is not None:
            st_numpy.save_file(small, s)
            runs, sizes[st] = {st: s_open, **runs}, s
        t0 = time.perf_counter()
        s_open() if safetensors is not None else h_open()
        number = max(1, min(100, int(0.05 / max(time.perf_counter() - t0, 1e-6))))
        table = Table(f"open a file of {n:,} tensors of 64 bytes and get one ({number} a round)",
                      refs=[st] if safetensors is not None else [], extra=["B/tensor"],
                      unit="ms")
        for name, sample in interleaved(runs, ctx.args.rounds, number).items():
            table.add(name, sample, f"{(sizes[name].stat().st_size - 64 * n) / n:.0f}")
        for path in sizes.values():
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
    runs = {}
    if xxhsum:
        runs["xxhsum -H3"] = [xxhsum, "-H3", str(h)]
    else:
        table.skip("xxhsum -H3", "xxhsum is not installed (Debian package xxhash)")
    runs["cat"] = ["sh", "-c", 'cat "$0" > /dev/null', str(h)]
    if cli is None:
        table.skip("hurray verify", "the hurray CLI was not found (--cli PATH)")
    else:
        runs["hurray verify"] = [cli, "verify", "-q", str(h)]
        runs["hurray verify --pread"] = [cli, "verify", "-q", "--pread", str(h)]
    samples = interleaved({name: child(argv) for name, argv in runs.items()}, ctx.args.rounds)
    for name, sample in samples.items():
        table.add(name, sample, f"{child_peak_rss(runs[name]):.1f}")
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
    ap.add_argument("--size-mib", type=int, default=512, help="data in the large file")
    ap.add_argument("--tensors", type=int, default=64, help="tensors in the large file")
    ap.add_argument("--rounds", type=int, default=5,
                    help="interleaved rounds, at least 5 (min and median)")
    ap.add_argument("--counts", default=None,
                    help="tensor counts of the open section (default 1,100,10000,100000)")
    ap.add_argument("--only", default=",".join(SECTIONS), help="sections to run, of: "
                    + ",".join(SECTIONS))
    ap.add_argument("--quick", action="store_true",
                    help="64 MiB, 5 rounds, counts up to 10,000: to check the bench itself")
    ap.add_argument("--cli", default=None, help="the hurray CLI (default: beside python)")
    ap.add_argument("--dir", default=None, help="where to write (default: a temp directory)")
    args = ap.parse_args()
    if args.quick:
        args.size_mib, args.rounds = min(args.size_mib, 64), 5
    counts = args.counts or ("1,100,10000" if args.quick else "1,100,10000,100000")
    args.counts = [int(c) for c in counts.split(",")]
    only = args.only.split(",")
    unknown = set(only) - set(SECTIONS)
    if unknown:
        ap.error(f"unknown sections: {', '.join(sorted(unknown))}")

    work = Path(tempfile.mkdtemp(prefix="hurray-bench-", dir=args.dir))
    try:
        ctx = Context(args, work)
        print(f"{args.tensors} float32 tensors, {ctx.nbytes / GIB:.2f} GiB; min and median of "
              f"{args.rounds} interleaved rounds; {machine()}")
        print(f"numpy {np.__version__}, hurray {hurray.__version__}"
              + ("" if safetensors is None else f", safetensors {safetensors.__version__}")
              + ("" if st_torch is None else f", torch {torch.__version__}")
              + "; x REF: time / REF's time, below 1 is faster")
        load_average("start")
        for name in SECTIONS:
            if name in only:
                for table in globals()[f"bench_{name}"](ctx):
                    table.print()
                sys.stdout.flush()
        load_average("end")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
