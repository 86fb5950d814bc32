"""Shared fixtures of the hurray-python tests."""

import contextlib
import gc
import importlib
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

# SciPy reads SCIPY_ARRAY_API once, when it is first imported, and scikit-learn's array API
# dispatch (tests/python/test_array_api_consumers.py) needs it on: set before any test module
# (or a peer such as scikit-learn or JAX) can import SciPy.
os.environ.setdefault("SCIPY_ARRAY_API", "1")

import pytest  # noqa: E402

import hurray  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))  # dlpack_fake

# scripts/test.sh sets HURRAY_REQUIRE_PEERS=1: there a missing peer (numpy, torch, jax,
# ml_dtypes) is a failure, not a skip.
REQUIRE_PEERS = os.environ.get("HURRAY_REQUIRE_PEERS") == "1"
# The sanitizer stage sets HURRAY_SANITIZED=1: memory-growth and timing tests measure the
# sanitizer there, not hurray, and are skipped.
SANITIZED = os.environ.get("HURRAY_SANITIZED") == "1"


def _has_libcuda():
    import ctypes
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


# Where libcuda loads, the producer waits on CUDA sync handles (ADR-054): tests that hand
# over CUDA tensors with made-up handles and expect a refusal cannot run there.
MADE_UP_CUDA_HANDLES = pytest.mark.skipif(
    _has_libcuda(), reason="libcuda would wait on made-up CUDA sync handles")


def peer(name):
    """Imports a test peer; a skip when it is absent, unless peers are required."""
    if REQUIRE_PEERS:
        return importlib.import_module(name)  # the submodule itself for "dask.array"
    return pytest.importorskip(name)


@pytest.fixture(autouse=True)
def _strict_mode_around_each_test():
    """Every test starts and ends in strict mode, the default."""
    hurray.set_mode("strict")
    yield
    hurray.set_mode("strict")


@pytest.fixture
def gc_collect():
    def collect():
        for _ in range(3):
            gc.collect()
    return collect


@contextlib.contextmanager
def ray_servers_started():
    """Around a call that starts Ray's servers (`ray.init` without an address, a
    `ray.cluster_utils.Cluster`): yields the `runtime_env` to give the job's `ray.init` (None
    outside the sanitizer stage).

    Under the sanitizer stage the ASan runtime is preloaded. Ray's own servers (GCS, raylet: C++
    and none of ours) start without it, or their start-up outlasts Ray's fixed 30 s on a slow
    machine; its Python workers, which import the instrumented extension, get it back through
    the job's runtime environment. Ray's vendored setproctitle scans the environment for argv at
    a worker's start and reads memory the interpreter freed (py-setproctitle issue 131); ASan's
    strcmp interceptor aborts that worker at random and Ray waits for it forever, so the
    workers' checking of their strcmp arguments is off; every instrumented access of the
    extension is still checked."""
    preload = os.environ.pop("LD_PRELOAD", None)
    try:
        yield None if preload is None else {"env_vars": {
            "LD_PRELOAD": preload,
            "ASAN_OPTIONS": ":".join(filter(None, [os.environ.get("ASAN_OPTIONS"),
                                                   "intercept_strcmp=0"]))}}
    finally:
        if preload is not None:
            os.environ["LD_PRELOAD"] = preload


def run_isolated(code, timeout=300):
    """Runs `code` in a fresh interpreter -- a crash reproduction, whose signal would otherwise
    kill the test run -- and returns what it printed. A child killed by a signal, or failing,
    fails the test. The child imports this directory's helpers (dlpack_fake) and the same
    hurray (PYTHONPATH, and under the sanitizers the same preloaded runtime, are inherited)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.dirname(__file__),
                                                      env.get("PYTHONPATH")]))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=env, timeout=timeout)
    assert result.returncode >= 0, (f"the child died of signal {-result.returncode}\n"
                                    f"{result.stdout}{result.stderr}")
    assert result.returncode == 0, f"the child failed\n{result.stdout}{result.stderr}"
    return result.stdout


def mappings_of(path):
    """The address ranges at which this process maps the file at `path`."""
    target = str(path.resolve())
    ranges = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].strip() == target:
                lo, hi = (int(x, 16) for x in fields[0].split("-"))
                ranges.append((lo, hi))
    return ranges


def peak_rss_kib():
    """Peak resident set size of this process in KiB: its own VmHWM. Not getrusage's ru_maxrss,
    which survives exec: a child started by a 1 GB pytest reports 1 GB before it allocates."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))


def rss_bytes():
    """Resident set size of this process (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# ---- the native peer: a second extension with its own copy of hurray-core ------------------

ROOT = Path(__file__).resolve().parents[2]
PEER_SOURCE = ROOT / "tests" / "native_peer" / "peer.c"


def _run(command):
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, command))}\n{result.stdout}{result.stderr}")


def _build_peers(directory, versions):
    """Compiles tests/native_peer/peer.c once per C ABI version in `versions` (module `peer`
    for the default, `peer_v<N>` otherwise) with the system C compiler, each linked with one
    shared compilation of src/core/*.c and src/device/*.c into a module that exports only its PyInit_ (so its
    hurray_* are its own). The same sanitizers as the extension when HURRAY_SANITIZED=1.
    Returns {version: module}."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        if REQUIRE_PEERS:
            pytest.fail("the native peer needs a C compiler ($CC or cc)")
        pytest.skip("the native peer needs a C compiler")
    paths = sysconfig.get_paths()
    common = ["-std=c11", "-fPIC", "-fvisibility=hidden", "-Wall", "-Wextra", "-Werror",
              "-I", str(ROOT / "include")]
    if SANITIZED:
        common += ["-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                   "-fno-omit-frame-pointer"]
    else:
        common += ["-O2"]
    jobs = []
    objects = []
    core = sorted((ROOT / "src" / "core").glob("*.c")) + sorted((ROOT / "src" / "device").glob("*.c"))
    for source in core:
        obj = directory / f"{source.parent.name}_{source.stem}.o"
        objects.append(obj)
        jobs.append(common + ["-D_POSIX_C_SOURCE=200809L", "-I", str(ROOT / "src" / "core"), "-c",
                              str(source), "-o", str(obj)])
    modules = {}
    for version in versions:
        name = "peer" if version is None else f"peer_v{version}"
        defines = [f"-DPEER_MODULE={name}"]
        if version is not None:
            defines.append(f"-DPEER_ABI_VERSION={version}")
        obj = directory / f"{name}.o"
        jobs.append(common + defines + ["-I", paths["include"], "-I", paths["platinclude"],
                                        "-c", str(PEER_SOURCE), "-o", str(obj)])
        modules[version] = (name, obj)
    processes = [(job, subprocess.Popen([cc] + job, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True)) for job in jobs]
    for job, process in processes:
        output, _ = process.communicate()
        if process.returncode != 0:
            raise RuntimeError(f"{cc} {' '.join(job)}\n{output}")
    script = directory / "exports.map"
    script.write_text("{ global: PyInit_*; local: *; };\n")
    link = ["-shared", f"-Wl,--version-script={script}"]
    if SANITIZED:
        link.append("-fsanitize=address,undefined")
    loaded = {}
    for version, (name, obj) in modules.items():
        library = directory / (name + sysconfig.get_config_var("EXT_SUFFIX"))
        _run([cc, *link, "-o", str(library), str(obj), *map(str, objects), "-lpthread", "-ldl"])
        spec = importlib.util.spec_from_file_location(name, library)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        loaded[version] = module
    return loaded


@pytest.fixture(scope="session")
def _peers(tmp_path_factory):
    return _build_peers(tmp_path_factory.mktemp("native_peer"), [None, 5])


@pytest.fixture(scope="session")
def peer_ext(_peers):
    """The native peer built for this C ABI version (4)."""
    return _peers[None]


@pytest.fixture(scope="session")
def peer_v5(_peers):
    """The native peer built with -DPEER_ABI_VERSION=5: a producer and consumer of a future
    hurray-ffi."""
    return _peers[5]
