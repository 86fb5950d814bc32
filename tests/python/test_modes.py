"""Compliance modes (ADR-022): what they gate, and exactly nothing else."""

import asyncio
import os
import subprocess
import sys
import threading

import pytest

import hurray
from hurray import _hurray

np = pytest.importorskip("numpy")

TIER1 = [d for d in vars(hurray.dtype).values() if isinstance(d, hurray.dtype) and d.tier == 1]
TIER23 = [d for d in vars(hurray.dtype).values() if isinstance(d, hurray.dtype) and d.tier > 1]


def tensor_of(dtype, n=8):
    nbytes = (n * dtype.bits + 7) // 8
    return hurray.Tensor(bytearray(nbytes), dtype, [n])


# ---- switching -------------------------------------------------------------------------


def test_default_is_strict_and_set_mode_switches():
    assert hurray.get_mode() == "strict"
    hurray.set_mode("relaxed")
    assert hurray.get_mode() == "relaxed"
    hurray.set_mode("strict")
    assert hurray.get_mode() == "strict"


def test_unknown_modes_are_value_errors():
    with pytest.raises(ValueError, match="mode must be 'strict' or 'relaxed', not 'lenient'"):
        hurray.set_mode("lenient")
    with pytest.raises(ValueError):
        hurray.mode("STRICT")
    with pytest.raises(TypeError, match="mode must be a str, not int"):
        hurray.set_mode(1)


def test_mode_block_restores_on_exit_and_on_exception():
    with hurray.mode("relaxed") as block:
        assert hurray.get_mode() == "relaxed"
        assert block.name == "relaxed"
        with hurray.mode("strict"):
            assert hurray.get_mode() == "strict"
        assert hurray.get_mode() == "relaxed"
    assert hurray.get_mode() == "strict"
    with pytest.raises(KeyError):
        with hurray.mode("relaxed"):
            raise KeyError("boom")  # not swallowed
    assert hurray.get_mode() == "strict"
    assert repr(hurray.mode("relaxed")) == "hurray.mode('relaxed')"


def test_a_mode_block_is_not_reentrant():
    block = hurray.mode("relaxed")
    with block:
        with pytest.raises(hurray.StateError, match="already entered"):
            block.__enter__()
    with pytest.raises(hurray.StateError, match="was not entered"):
        block.__exit__(None, None, None)


def test_precedence_block_over_set_mode():
    with hurray.mode("strict"):
        hurray.set_mode("relaxed")
        assert hurray.get_mode() == "strict"
    assert hurray.get_mode() == "relaxed"


def test_a_block_is_local_to_its_thread():
    seen = []
    inside = threading.Event()
    done = threading.Event()

    def other():
        inside.wait()
        seen.append(hurray.get_mode())
        done.set()

    thread = threading.Thread(target=other)
    thread.start()
    with hurray.mode("relaxed"):
        inside.set()
        done.wait()
    thread.join()
    assert seen == ["strict"]


def test_a_block_is_local_to_its_asyncio_task():
    async def relaxed():
        with hurray.mode("relaxed"):
            await asyncio.sleep(0.01)
            return hurray.get_mode()

    async def observer():
        await asyncio.sleep(0.005)
        return hurray.get_mode()

    async def main():
        return await asyncio.gather(relaxed(), observer())

    assert asyncio.run(main()) == ["relaxed", "strict"]


def run_import(env_value):
    env = dict(os.environ)
    env.pop("HURRAY_MODE", None)
    if env_value is not None:
        env["HURRAY_MODE"] = env_value
    return subprocess.run([sys.executable, "-c", "import hurray; print(hurray.get_mode())"],
                          env=env, capture_output=True, text=True)


@pytest.mark.parametrize("value,mode", [(None, "strict"), ("", "strict"), ("strict", "strict"),
                                        ("relaxed", "relaxed")])
def test_hurray_mode_environment_variable(value, mode):
    result = run_import(value)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == mode


def test_an_invalid_hurray_mode_fails_the_import():
    result = run_import("Relaxed")
    assert result.returncode != 0
    assert "ValueError" in result.stderr or "InvalidArgumentError" in result.stderr
    assert "HURRAY_MODE=Relaxed is not a mode" in result.stderr


# ---- gate (b): __array_namespace__ visibility ------------------------------------------------


@pytest.mark.parametrize("dtype", TIER1, ids=str)
def test_tier1_tensors_always_expose_the_namespace(dtype):
    t = tensor_of(dtype)
    for mode in ("strict", "relaxed"):
        with hurray.mode(mode):
            assert hasattr(t, "__array_namespace__")
            ns = t.__array_namespace__()
            assert ns is hurray.array_api
            assert ns.__array_api_version__ == "2025.12"
            assert "__array_namespace__" in dir(t)


@pytest.mark.parametrize("dtype", TIER23, ids=str)
def test_tier2_and_tier3_tensors_expose_it_in_relaxed_mode_only(dtype):
    t = tensor_of(dtype)
    assert not hasattr(t, "__array_namespace__")
    assert "__array_namespace__" not in dir(t)
    with pytest.raises(AttributeError, match=f"{dtype.name} is a Tier {dtype.tier} dtype"):
        t.__array_namespace__
    name = "".join(["__array_", "namespace__"])  # a str that is not the interned one
    assert not hasattr(t, name)
    with pytest.raises(AttributeError):
        type(t).__array_namespace__.__get__(t)  # the descriptor itself enforces it
    with hurray.mode("relaxed"):
        assert hasattr(t, "__array_namespace__")
        assert t.__array_namespace__() is hurray.array_api
        assert "__array_namespace__" in dir(t)
    hurray.set_mode("relaxed")
    assert hasattr(t, "__array_namespace__")


def test_api_version_is_validated():
    t = tensor_of(hurray.float32)
    assert t.__array_namespace__(api_version=None) is hurray.array_api
    assert t.__array_namespace__(api_version="2025.12") is hurray.array_api
    for version in ("2024.12", "2023.12", "2022.12", "2021.12"):
        ns = t.__array_namespace__(api_version=version)
        assert ns.__array_api_version__ == version and ns.add is hurray.array_api.add
        assert t.__array_namespace__(api_version=version) is ns
        assert type(ns.__array_namespace_info__().devices()) is list
        assert type(ns.meshgrid(t, t)) is list and type(hurray.array_api.meshgrid(t, t)) is tuple
    with pytest.raises(ValueError, match="api_version '2026.12' is not supported"):
        t.__array_namespace__(api_version="2026.12")
    with pytest.raises(TypeError):
        t.__array_namespace__("2024.12")  # keyword-only
    with pytest.raises(TypeError, match="api_version must be a str or None, not int"):
        t.__array_namespace__(api_version=2024)


def test_the_namespace_lists_the_standards_names():
    ns = hurray.array_api
    assert ns.__array_api_version__ == "2025.12"
    assert {"asarray", "add", "linalg", "fft", "__array_namespace_info__"} <= set(ns.__all__)
    assert all(hasattr(ns, n) for n in ns.__all__)


# ---- gate (a): array API admission ------------------------------------------------------


def test_admission_rule():
    for d in TIER1:
        assert _hurray._array_api_admits(d)
    for d in TIER23:
        assert not _hurray._array_api_admits(d)
        with hurray.mode("relaxed"):
            assert _hurray._array_api_admits(d)
    assert _hurray._array_api_admits("int4") is False


# ---- and nothing else -------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["strict", "relaxed"])
def test_modes_gate_nothing_else(mode):
    hurray.set_mode(mode)
    # construction of every tier
    q = hurray.Tensor(bytes(64), hurray.dtype.int4, [128])
    b = hurray.Tensor(bytearray(8), hurray.dtype.bfloat16, [4])
    # DLPack of Tier 2
    assert type(b.__dlpack__(max_version=(1, 0))).__name__ == "PyCapsule"
    assert b.__dlpack_device__() == (1, 0)
    # __array__ of Tier 2 (float16 is NumPy's own)
    h = hurray.Tensor(bytearray(8), hurray.dtype.float16, [4])
    assert h.__array__().dtype == np.float16
    # the buffer protocol
    assert q.bytes_view().nbytes == 64
    # the errors
    with pytest.raises(hurray.UnsupportedError, match="int4 has no DLPack dtype"):
        q.__dlpack__()
    with pytest.raises(hurray.LayoutError):
        hurray.Tensor(bytes(3), hurray.dtype.bfloat16, [2])
