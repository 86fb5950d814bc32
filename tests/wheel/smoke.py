"""The smoke test of an installed wheel, run by scripts/wheel.sh (ADR-074).

scripts/wheel.sh runs it in a virtual environment made fresh for it, which holds only pip,
NumPy and the repaired wheel (installed with ``--no-index --no-deps --only-binary=:all:``, which
cannot compile anything), from an empty temporary directory, with ``python -I`` (no PYTHONPATH,
no user site, not the script's directory) and an environment that holds nothing but
``PATH=<venv>/bin``: no compiler, no CMake, no build tree. ::

    python -I smoke.py EXPECTED_VERSION SOURCE_TREE

It checks that ``hurray`` is imported from the environment's site-packages (never from the
source tree or a build directory), that its version is the one in include/hurray/version.h and
in the installed metadata, that the libraries auditwheel vendored are the ones loaded, and then
saves, loads, exchanges with NumPy (both ways, and through DLPack) and runs ``hurray --version``,
``hurray info --json`` and ``hurray verify``. It exits non-zero on the first failed check.
"""

import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path


def check(condition, message):
    """Stop with ``message`` when ``condition`` is false.

    Parameters
    ----------
    condition : bool
        What must hold.
    message : str
        What was wrong, printed with the test's name.
    """
    if not condition:
        raise SystemExit(f"wheel smoke test: {message}")


def main(expected_version, source_tree):
    """Run every check; see the module's docstring.

    Parameters
    ----------
    expected_version : str
        The version include/hurray/version.h names.
    source_tree : str
        The repository the wheel was built from, which nothing may be imported from.
    """
    source_tree = Path(source_tree).resolve()
    site = Path(sysconfig.get_path("platlib")).resolve()
    venv_bin = Path(sys.executable).parent
    check(Path(sys.prefix).resolve() != Path(sys.base_prefix).resolve(),
          f"{sys.executable} is not a virtual environment's interpreter")
    for tool in ("cc", "gcc", "clang", "cmake", "ninja"):
        check(shutil.which(tool) is None, f"{tool} is reachable ({shutil.which(tool)}): "
                                          "the test environment must not be able to build")
    for module in ("scikit_build_core", "cmake", "ninja"):
        check(importlib.util.find_spec(module) is None,
              f"the module {module} is installed: the environment must hold only the wheel")
    check(not any(Path(p).resolve() == source_tree for p in sys.path if p),
          f"the source tree {source_tree} is on sys.path")

    import hurray
    import numpy as np

    where = Path(hurray.__file__).resolve()
    check(where.parent.parent == site, f"hurray was imported from {where}, not from {site}")
    check(source_tree not in where.parents, f"hurray was imported from the source tree: {where}")
    ext = Path(hurray._hurray.__file__).resolve()
    check(ext.parent == where.parent, f"the extension was loaded from {ext}")

    check(hurray.__version__ == expected_version,
          f"hurray.__version__ is {hurray.__version__!r}, version.h says {expected_version!r}")
    check(importlib.metadata.version("hurray") == hurray.__version__,
          f"the installed metadata says {importlib.metadata.version('hurray')!r}, "
          f"hurray.__version__ {hurray.__version__!r}")
    meta = importlib.metadata.metadata("hurray")
    check(meta["License-Expression"] == "Apache-2.0",
          f"License-Expression is {meta['License-Expression']!r}")
    check(hurray.C_ABI_VERSION == 4, f"C_ABI_VERSION is {hurray.C_ABI_VERSION}")

    # What auditwheel vendored (none once the core needs nothing beyond libc at load time) is
    # what the process mapped: never the system's copy of the same library.
    vendored = site / "hurray.libs"
    libs = sorted(p.name for p in vendored.iterdir()) if vendored.is_dir() else []
    maps = Path("/proc/self/maps").read_text().splitlines()
    mapped = {line.split()[-1] for line in maps if line.split()[-1].startswith("/")}
    for lib in libs:
        check(str(vendored / lib) in mapped, f"the vendored {lib} is not loaded")
        stem = lib.split("-")[0]  # libssl-59d05945.so.3 -> libssl
        system = [m for m in mapped if Path(m).name.startswith(stem + ".so") and
                  not m.startswith(str(vendored))]
        check(not system, f"the system's {system} is loaded beside the vendored {lib}")

    # Save, load, NumPy both ways, DLPack.
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    b = np.array([[1, -2], [3, -4]], dtype=np.int64)
    t = hurray.from_numpy(a)
    check(t.shape == (4, 6) and t.dtype == hurray.float32, f"from_numpy gave {t!r}")
    hurray.save("smoke.hurray", {"a": t, "b": hurray.from_numpy(b)}, {"made_by": "wheel.sh"})
    loaded = hurray.load("smoke.hurray", verify=True)
    check(sorted(loaded) == ["a", "b"], f"load gave the names {sorted(loaded)}")
    check(np.array_equal(np.asarray(loaded["a"]), a), "a's values changed through the file")
    back = np.asarray(loaded["b"])
    check(back.dtype == np.int64 and np.array_equal(back, b), "b changed through the file")
    view = np.from_dlpack(t)
    check(np.shares_memory(view, a) and np.array_equal(view, a), "DLPack did not share memory")
    check(np.shares_memory(np.asarray(t), a), "np.asarray copied a CPU tensor")

    # The command, from the environment's bin/ (the launcher auditwheel writes, or the binary).
    cli = venv_bin / "hurray"
    check(cli.is_file(), f"{cli} is not installed")

    def run(*args):
        done = subprocess.run([str(cli), *args], capture_output=True, text=True, timeout=60)
        check(done.returncode == 0, f"hurray {' '.join(args)} exited {done.returncode}: "
                                    f"{done.stderr.strip()}")
        return done.stdout

    out = run("--version")
    check(out.startswith(f"hurray {expected_version} (C ABI 4"), f"hurray --version: {out!r}")
    info = json.loads(run("info", "--json", "smoke.hurray"))
    tensors = {entry["name"]: entry for entry in info["tensors"]}
    check(sorted(tensors) == ["a", "b"], f"hurray info lists {sorted(tensors)}")
    check(tensors["a"]["dtype"] == "float32" and tensors["a"]["shape"] == [4, 6],
          f"hurray info says a is {tensors['a']['dtype']} {tensors['a']['shape']}")
    check("b" in run("info", "smoke.hurray"), "hurray info (text) does not name b")
    run("verify", "smoke.hurray")

    print(f"wheel smoke test: hurray {hurray.__version__} from {where.parent}, "
          f"vendored libraries loaded: {', '.join(libs) or 'none'}; save, load, NumPy, DLPack, "
          f"hurray --version, info and verify passed")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: python -I smoke.py EXPECTED_VERSION SOURCE_TREE")
    main(sys.argv[1], sys.argv[2])
