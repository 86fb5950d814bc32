"""The package as a whole: its namespace, exact signatures, exported symbols."""

import builtins
import importlib.metadata
import inspect
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import hurray
from hurray import _hurray


def test_all_is_complete_and_importable():
    for name in hurray.__all__:
        assert hasattr(hurray, name), name
    public = {n for n in vars(_hurray) if not n.startswith("_") and n != "C_ABI_VERSION"}
    shadowing = {n for n in public if hasattr(builtins, n)}
    assert {"open", "BufferError", "bool", "FileNotFoundError"} <= shadowing
    assert public - shadowing <= set(hurray.__all__)
    assert not shadowing & set(hurray.__all__)


def test_a_star_import_shadows_no_builtin():
    namespace = {}
    exec("from hurray import *", namespace)
    assert namespace["float32"] is hurray.float32 and namespace["Tensor"] is hurray.Tensor
    for name in ("open", "BufferError", "bool", "FileNotFoundError", "PermissionError"):
        assert name not in namespace
        assert getattr(hurray, name) is not getattr(builtins, name)
    # ... so code after the import still means the builtins
    exec("assert bool(1) is True and issubclass(BufferError, Exception) and open", namespace)
    assert hurray.__version__ == _hurray.__version__
    assert hurray.C_ABI_VERSION == 4


def test_the_version_has_one_source():
    # include/hurray/version.h: the C library's string, the extension's __version__ and (read
    # by pyproject.toml's regex) the distribution's metadata all come from this one line.
    header = (Path(__file__).resolve().parents[2] / "include/hurray/version.h").read_text()
    match = re.search(r'^#define HURRAY_VERSION_STRING "([^"]+)"$', header, re.M)
    assert match and hurray.__version__ == match[1]


def test_the_installed_metadata_names_the_same_version():
    try:
        dist = importlib.metadata.distribution("hurray")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("hurray is imported from a build tree, not an installed distribution")
    installed = Path(dist.locate_file("hurray/__init__.py")).resolve()
    if installed != Path(hurray.__file__).resolve():
        pytest.skip(f"the hurray imported ({hurray.__file__}) is not the installed one "
                    f"({installed})")
    assert importlib.metadata.version("hurray") == hurray.__version__
    assert dist.metadata["License-Expression"] == "Apache-2.0"


SIGNATURES = {
    hurray.Tensor: "(data, dtype, shape, strides=None, byte_offset=0)",
    hurray.Tensor.from_address: "(address, dtype, shape, *, device, memory_class='device', "
                                "sync_mode='ready', sync_handle=0, sync_value=0, byte_size=None, "
                                "strides=None, byte_offset=0, peer_index=0, owner=None, "
                                "readonly=False)",
    hurray.Tensor.from_parts: "(layout, parts=(), *, dtype=None, shape=None, axis=0, "
                              "block_size=0, coalesced=False, children=None)",
    hurray.Tensor.__hurray__: "(self, /, stream=None)",
    hurray.Tensor.to_device: "(self, device, /, *, stream=None)",
    hurray.Tensor.tobytes: "(self, /)",
    hurray.Tensor.tolist: "(self, /)",
    hurray.Tensor.__array__: "(self, /, dtype=None, copy=None)",
    hurray.Tensor.__dlpack__: "(self, /, *, stream=None, max_version=None, dl_device=None, "
                              "copy=None)",
    hurray.Tensor.__dlpack_device__: "(self, /)",
    hurray.Tensor.__jax_array__: "(self, /)",
    hurray.from_dlpack: "(x, /, *, device=None, copy=None)",
    hurray.from_hurray: "(obj, /)",
    hurray.from_numpy: "(arr, /)",
    hurray.dequantize: "(t, /, dtype=None, *, out=None)",
    hurray.quantize: "(x, dtype, /, *, layout='per_channel', axis=None, block_size=None, "
                     "scale_dtype=None)",
    hurray.set_mode: "(name, /)",
    hurray.get_mode: "()",
    hurray.mode: "(name, /)",
    hurray.register_device: "(tag, name, /)",
    hurray.unregister_device: "(tag, /)",
    hurray.dtype: "(name)",
    hurray.Device: "(tag, index=0)",
    hurray.save: "(path, tensors, metadata=None, *, alignment=64, tensor_metadata=None, "
                 "durable=True, max_shard_size=None, progress=None)",
    hurray.load: "(path, *, mmap=True, verify=False, writable=False, progress=None)",
    hurray.open: "(path, *, mmap=True, writable=False)",
    hurray.convert: "(input, output, *, alignment=None, name=None, metadata_as_json=False, "
                    "drop_metadata=False, durable=True, max_shard_size=None, progress=None)",
    hurray.File.keys: "(self, /)",
    hurray.File.items: "(self, /)",
    hurray.File.values: "(self, /)",
    hurray.File.get: "(self, name, default=None, /)",
    hurray.File.verify: "(self, /, name=None, *, progress=None)",
    hurray.File.slice: "(self, /, name, start, stop)",
    hurray.File.dask: "(self, /, name, chunks='auto')",
    hurray.File.tensor_metadata: "(self, name, /)",
    hurray.File.close: "(self, /)",
}


@pytest.mark.parametrize("obj", SIGNATURES, ids=lambda o: o.__qualname__)
def test_exact_text_signatures(obj):
    assert str(inspect.signature(obj)) == SIGNATURES[obj]


def test_the_bound_namespace_method_has_its_signature():
    t = hurray.Tensor(bytes(4), hurray.float32, [1])
    assert str(inspect.signature(t.__array_namespace__)) == "(*, api_version=None)"


def test_signatures_match_the_parsers():
    """Each keyword a signature names is accepted, and positional-only really is."""
    t = hurray.Tensor(data=bytes(8), dtype="float32", shape=[2], strides=None, byte_offset=0)
    t.__dlpack__(stream=None, max_version=None, dl_device=None, copy=None)
    t.__hurray__(stream=None)
    t.__hurray__(None)
    hurray.Tensor.from_parts(layout="dense", parts=[t], dtype=None, shape=None, axis=0,
                             block_size=0, coalesced=False, children=None)
    with pytest.raises(TypeError):
        hurray.Tensor.from_parts("dense", [t], None)  # dtype is keyword-only
    with pytest.raises(TypeError):
        hurray.from_hurray(obj=t)
    t.__array__(dtype=None, copy=None)
    hurray.from_dlpack(t, device=None, copy=None)
    with pytest.raises(TypeError):
        hurray.from_dlpack(x=t)
    with pytest.raises(TypeError):
        hurray.from_numpy(arr=None)
    hurray.Tensor.from_address(address=0x1000, dtype="int8", shape=[64], device="cuda")


def test_the_native_protocol_is_present_under_its_final_names_only():
    """Layer 8c shipped: __hurray__ / from_hurray exist (ADR-033); the names ADR-023 first
    gave them never do."""
    t = hurray.Tensor(bytes(8), hurray.float32, [2])
    for mode in ("strict", "relaxed"):
        with hurray.mode(mode):
            assert hasattr(t, "__hurray__")
            assert not hasattr(t, "__hurray_buffer__")
    assert callable(hurray.from_hurray) and "from_hurray" in hurray.__all__
    assert not hasattr(hurray, "from_hurray_buffer")


@pytest.mark.skipif(shutil.which("nm") is None, reason="needs nm")
def test_only_the_module_init_function_is_exported():
    out = subprocess.run(["nm", "-D", "--defined-only", _hurray.__file__], capture_output=True,
                         text=True, check=True).stdout
    symbols = {line.split()[-1] for line in out.splitlines() if line.split()[1:2] != ["A"]}
    assert symbols == {"PyInit__hurray"}


def test_the_module_has_no_state_in_globals():
    """A second, independent copy of the module (multi-phase init, state per module) works
    beside the first: its own types, its own singletons."""
    import importlib.util
    spec = importlib.util.find_spec("hurray._hurray")
    other = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(other)
    assert other is not _hurray
    assert other.Tensor is not hurray.Tensor and other.float32 is not hurray.float32
    t = other.Tensor(bytes(8), other.float32, [2])
    assert t.dtype is other.float32 and t.shape == (2,)
    with pytest.raises(other.LayoutError):
        other.Tensor(bytes(7), other.float32, [2])
    assert not issubclass(other.LayoutError, hurray.LayoutError)


def test_importing_twice_in_subprocesses_is_clean():
    code = "import hurray, gc; t = hurray.Tensor(bytes(4), 'float32', [1]); del t; gc.collect()"
    result = subprocess.run([sys.executable, "-X", "dev", "-W", "error", "-c", code],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_the_demo_runs_end_to_end():
    """examples/demo.py, the README's main job, runs as `scripts/demo.sh` runs it."""
    demo = Path(__file__).resolve().parents[2] / "examples" / "demo.py"
    run = subprocess.run([sys.executable, str(demo)], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    assert "max |dequantised - original|" in run.stdout and "\ndone in " in run.stdout


def test_the_stubs_name_what_each_class_has():
    """_hurray.pyi lists every method and property of each extension class: nothing missing for
    type checkers and IDEs, nothing stale."""
    import ast
    import pathlib

    stubs = ast.parse((pathlib.Path(hurray.__file__).parent / "_hurray.pyi").read_text())
    # Slot artefacts and the interpreter's own: a mapping's __delitem__ (which raises
    # TypeError here) and __buffer__, which Python 3.12 gives buffer exporters.
    ignored = set(dir(object)) | {"__module__", "__delitem__", "__buffer__"}
    # What exists only to raise an error naming the right call (a Client is no mapping; NumPy's
    # methods on a Tensor, which dir() of a tensor leaves out) stays out of the stubs, so that
    # type checkers flag it too.
    raising = {"Client": {"__getitem__", "__contains__"},
               "Tensor": set(dir(hurray.Tensor)) - set(dir(hurray.Tensor(b"", "uint8", [0])))}
    checked = 0
    for node in stubs.body:
        cls = getattr(hurray, getattr(node, "name", ""), None)
        if not isinstance(node, ast.ClassDef) or not isinstance(cls, type) \
                or issubclass(cls, BaseException):
            continue
        stubbed = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
        stubbed |= {n.target.id for n in node.body if isinstance(n, ast.AnnAssign)}
        present = {n for n in dir(cls) if n.startswith("__") or not n.startswith("_")}
        present -= raising.get(cls.__name__, set())
        assert present - stubbed - ignored == set(), f"{cls.__name__}: not in the stubs"
        assert stubbed - present - ignored == set(), f"{cls.__name__}: stale stubs"
        checked += 1
    assert checked >= 6
