"""hurray.array_api and hurray.Tensor as the array object: what the conformance suite does not
cover -- tensors from files, DLPack and the native protocol (read-only, strided, negative
strides, byte offsets), views and in-place writes, relaxed-mode Tier 2 arithmetic against
ml_dtypes, and bad input getting the standard's exception with a message naming the problem;
also that docs/impl/array-api.md's promotion tables are the implementation's, and that
`import hurray` works without NumPy.
"""
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import hurray
import hurray.array_api as xp
from conftest import run_isolated


def as_np(t):
    return np.asarray(t)


# ---- where tensors come from ----------------------------------------------------------------


def test_tensors_from_files_compute_and_refuse_writes(tmp_path):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    hurray.save(tmp_path / "a.hurray", {"a": hurray.from_numpy(a)})
    t = hurray.load(tmp_path / "a.hurray")["a"]
    np.testing.assert_array_equal(as_np(xp.sum(t, axis=0)), a.sum(axis=0))
    np.testing.assert_array_equal(as_np(t @ t.mT), a @ a.T)
    np.testing.assert_array_equal(as_np(t[1:, ::2] * 2), a[1:, ::2] * 2)
    if t.readonly:
        with pytest.raises(hurray.InvalidArgumentError, match="read-only"):
            t[0, 0] = 1.0
        with pytest.raises(hurray.InvalidArgumentError, match="read-only"):
            t += 1.0


def test_read_only_buffers_refuse_every_write():
    t = hurray.Tensor(np.arange(4, dtype=np.int32).tobytes(), hurray.int32, [4])
    assert t.readonly
    for write in (lambda: t.__setitem__(0, 5), lambda: t.__iadd__(1),
                  lambda: t[1:].__imul__(2)):
        with pytest.raises(hurray.InvalidArgumentError, match="read-only.*copy=True"):
            write()
    c = xp.asarray(t, copy=True)
    c[0] = 5
    assert c.tolist() == [5, 1, 2, 3] and t.tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("route", ["dlpack", "from_hurray", "from_numpy"])
def test_strided_negative_strides_and_offsets(route):
    base = np.arange(40, dtype=np.float64).reshape(5, 8)
    view = base[4:0:-2, 1::3]  # negative and non-unit strides, a byte offset into base
    t = {"dlpack": hurray.from_dlpack, "from_numpy": hurray.from_numpy,
         "from_hurray": lambda v: hurray.from_hurray(hurray.from_numpy(v))}[route](view)
    if t.strides is not None:
        assert t.strides == tuple(s // 8 for s in view.strides)
    np.testing.assert_array_equal(as_np(t + 1), view + 1)
    np.testing.assert_array_equal(as_np(xp.flip(t, axis=0)), view[::-1])
    np.testing.assert_array_equal(as_np(t[:, -1]), view[:, -1])
    np.testing.assert_array_equal(as_np(t[t > 20]), view[view > 20])
    np.testing.assert_array_equal(as_np(xp.matmul(t, t.mT)), view @ view.T)


# ---- views and in-place operations ----------------------------------------------------------


def test_writes_through_views_reach_the_base_and_back():
    x = xp.zeros((4, 4), dtype=xp.float32)
    row = x[1]
    row += 3
    assert x[1].tolist() == [3.0] * 4
    block = x[2:, ::2]
    block[...] = 7
    assert as_np(x)[2:, ::2].tolist() == [[7.0, 7.0]] * 2
    x[0, 0] = -1
    corner = x[0, 0]  # an integer index is a 0-d view, not a copy
    x[0, 0] = -2
    assert float(corner) == -2.0
    diag = x.mT[3]
    diag *= 0
    assert as_np(x)[:, 3].tolist() == [0.0] * 4


def test_in_place_keeps_identity_dtype_and_shape():
    x = xp.ones(3, dtype=xp.float32)
    y = x
    y += xp.asarray([1.0, 2.0, 3.0], dtype=xp.float32)
    assert y is x and x.tolist() == [2.0, 3.0, 4.0] and x.dtype == xp.float32
    with pytest.raises(TypeError, match="dtype float32 .* float64"):
        x += xp.ones(3, dtype=xp.float64)
    with pytest.raises(ValueError):
        x += xp.ones((2, 3), dtype=xp.float32)


# ---- relaxed mode: Tier 2 arithmetic ---------------------------------------------------------


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float16"])
def test_relaxed_tier2_arithmetic_matches_ml_dtypes(name):
    dt = np.dtype(getattr(ml_dtypes, name, None) or name)
    a = np.array([0.5, 1.5, -2.0, 3.0], dtype=dt)
    b = np.array([0.25, 2.0, 1.0, -1.5], dtype=dt)
    ta, tb = hurray.from_numpy(a), hurray.from_numpy(b)
    with pytest.raises(TypeError, match=f"{name} .*relaxed mode only.*set_mode"):
        ta + tb
    with hurray.mode("relaxed"):
        for got, want in ((ta + tb, a + b), (ta * tb, a * b), (ta - 1.0, a - dt.type(1.0)),
                          (xp.sqrt(xp.abs(ta)), np.sqrt(np.abs(a)))):
            assert got.dtype.name == name
            np.testing.assert_array_equal(as_np(got).astype(np.float32),
                                          want.astype(np.float32))
        mixed = ta + hurray.from_numpy(a.astype(np.float32))
        assert mixed.dtype == xp.float32
        with pytest.raises(TypeError, match="integer with floating"):
            ta + xp.ones(4, dtype=xp.int32)


def test_relaxed_lattice_joins_different_formats_at_float32():
    with hurray.mode("relaxed"):
        bf = hurray.from_numpy(np.ones(2, ml_dtypes.bfloat16))
        f8 = hurray.from_numpy(np.ones(2, ml_dtypes.float8_e4m3fn))
        f16 = hurray.from_numpy(np.ones(2, np.float16))
        assert (bf + f8).dtype == xp.float32 and (bf + f16).dtype == xp.float32
        assert (f16 + xp.ones(2, dtype=xp.float64)).dtype == xp.float64
        assert xp.result_type(bf, xp.complex64) == xp.complex64


# The linear-algebra rule of relaxed mode (ADR-080): a Tier 2 float in is that float out,
# computed in float32 and rounded once; complex results are complex64, integer ones stay.
_SPD = np.array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.25], [0.5, 0.25, 2.0]], np.float32)
_VEC = np.array([1.0, -2.0, 0.5], np.float32)
_LINALG_CALLS = {
    "matmul": lambda a, v: xp.matmul(a, a),
    "vecdot": lambda a, v: xp.vecdot(v, v),
    "tensordot": lambda a, v: xp.tensordot(a, a, axes=1),
    "@": lambda a, v: a @ a,
    "linalg.cholesky": lambda a, v: xp.linalg.cholesky(a),
    "linalg.cross": lambda a, v: xp.linalg.cross(v, xp.flip(v)),
    "linalg.det": lambda a, v: xp.linalg.det(a),
    "linalg.diagonal": lambda a, v: xp.linalg.diagonal(a),
    "linalg.eig": lambda a, v: xp.linalg.eig(a),
    "linalg.eigh": lambda a, v: xp.linalg.eigh(a),
    "linalg.eigvals": lambda a, v: xp.linalg.eigvals(a),
    "linalg.eigvalsh": lambda a, v: xp.linalg.eigvalsh(a),
    "linalg.inv": lambda a, v: xp.linalg.inv(a),
    "linalg.matmul": lambda a, v: xp.linalg.matmul(a, a),
    "linalg.matrix_norm": lambda a, v: xp.linalg.matrix_norm(a),
    "linalg.matrix_power": lambda a, v: xp.linalg.matrix_power(a, 3),
    "linalg.matrix_rank": lambda a, v: xp.linalg.matrix_rank(a),
    "linalg.matrix_transpose": lambda a, v: xp.linalg.matrix_transpose(a),
    "linalg.outer": lambda a, v: xp.linalg.outer(v, v),
    "linalg.pinv": lambda a, v: xp.linalg.pinv(a),
    "linalg.qr": lambda a, v: xp.linalg.qr(a),
    "linalg.slogdet": lambda a, v: xp.linalg.slogdet(a),
    "linalg.solve": lambda a, v: xp.linalg.solve(a, v),
    "linalg.svd": lambda a, v: xp.linalg.svd(a),
    "linalg.svdvals": lambda a, v: xp.linalg.svdvals(a),
    "linalg.tensordot": lambda a, v: xp.linalg.tensordot(a, a, axes=1),
    "linalg.trace": lambda a, v: xp.linalg.trace(a),
    "linalg.vecdot": lambda a, v: xp.linalg.vecdot(v, v),
    "linalg.vector_norm": lambda a, v: xp.linalg.vector_norm(v),
}


def _parts(r):
    return list(r) if isinstance(r, tuple) else [r]


def test_every_linalg_function_is_in_the_table():
    assert {"linalg." + n for n in xp.linalg.__all__} <= set(_LINALG_CALLS)


@pytest.mark.parametrize("name", ["bfloat16", "float16", "float8_e4m3fn"])
@pytest.mark.parametrize("call", sorted(_LINALG_CALLS))
def test_relaxed_linalg_keeps_the_tier2_dtype_computing_in_float32(name, call):
    dt = np.dtype(getattr(ml_dtypes, name, None) or name)
    a32, v32 = _SPD.astype(dt).astype(np.float32), _VEC.astype(dt).astype(np.float32)
    a, v = hurray.from_numpy(_SPD.astype(dt)), hurray.from_numpy(_VEC.astype(dt))
    f = _LINALG_CALLS[call]
    with hurray.mode("relaxed"):
        got = _parts(f(a, v))
        want = _parts(f(hurray.from_numpy(a32), hurray.from_numpy(v32)))  # float32's answer
    assert len(got) == len(want)
    for g, w in zip(got, want):
        w = as_np(w)
        if w.dtype.kind == "f":  # rounded once from float32's answer (exact back in float32)
            assert g.dtype.name == name, call
            w = w.astype(dt).astype(np.float32)
        else:  # eig's complex64, matrix_rank's integers: as float32 gives them
            assert g.dtype == hurray.dtype(w.dtype.name), call
        np.testing.assert_array_equal(as_np(g).astype(w.dtype), w, err_msg=call, strict=True)


def test_relaxed_linalg_of_two_formats_or_a_standard_dtype_follows_the_lattice():
    bf = hurray.from_numpy(_SPD.astype(ml_dtypes.bfloat16))
    f16 = hurray.from_numpy(_SPD.astype(np.float16))
    with hurray.mode("relaxed"):
        assert xp.matmul(bf, f16).dtype == xp.float32
        assert xp.linalg.solve(bf, f16).dtype == xp.float32
        assert xp.tensordot(bf, xp.asarray(_SPD.astype(np.float64)), axes=1).dtype == xp.float64
        with pytest.raises(TypeError, match="integer with floating"):
            xp.linalg.vecdot(f16, xp.ones((3, 3), dtype=xp.int32))
        x = xp.asarray(bf, copy=True)
        x @= bf
        assert x.dtype.name == "bfloat16"
    with pytest.raises(TypeError, match="bfloat16 .*relaxed mode only"):
        xp.linalg.inv(bf)


def test_storage_only_dtypes_are_refused_naming_them():
    f4 = hurray.Tensor(bytes(8), hurray.dtype.float4_e2m1fn, [16])
    with hurray.mode("relaxed"):
        with pytest.raises(TypeError, match="float4_e2m1fn"):
            f4 + f4
    q = hurray.Tensor(bytes(8), hurray.dtype.int4, [16])
    with pytest.raises(TypeError, match="int4 .*relaxed mode only"):
        xp.sum(q)
    with hurray.mode("relaxed"):  # packed integers are unpacked to int8 there (ADR-086)
        assert (q + q).dtype == xp.int8


# ---- bad input ------------------------------------------------------------------------------


def test_bad_input_gets_the_standards_exceptions():
    x = xp.arange(6, dtype=xp.float32)
    with pytest.raises(TypeError, match="int8 with float32"):
        xp.ones(3, dtype=xp.int8) + xp.ones(3, dtype=xp.float32)
    with pytest.raises(TypeError, match="not .*str"):
        xp.add(x, "1")
    with pytest.raises(TypeError, match="float does not combine with a int32"):
        xp.ones(2, dtype=xp.int32) * 1.5
    with pytest.raises(ValueError, match="broadcast"):
        x + xp.ones(4, dtype=xp.float32)
    with pytest.raises(IndexError, match="out of bounds"):
        x[6]
    with pytest.raises(ValueError, match="NaN"):
        int(xp.asarray(float("nan")))
    with pytest.raises(TypeError, match="0-d tensor, not one of shape \\(6,\\)"):
        bool(x)
    with pytest.raises(TypeError, match="only integer tensors are indices"):
        [0, 1][xp.asarray(1.0)]
    with pytest.raises(TypeError, match="dtype must be a hurray.dtype, a dtype name, a NumPy "
                                        "dtype .* not int"):
        xp.zeros(3, dtype=4)


def test_non_cpu_tensors_raise_unsupported_naming_the_device():
    t = hurray.Tensor.from_address(0x10000, "float32", [4], device="cuda")
    with pytest.raises(hurray.UnsupportedError, match="cuda:0"):
        t + 1.0
    with pytest.raises(hurray.UnsupportedError, match="cuda:0"):
        xp.sum(t)
    with pytest.raises(hurray.UnsupportedError):  # Tensor.to_device: no CUDA runtime here
        t.to_device("cpu")
    x = xp.ones(2)
    assert x.to_device("cpu") is x and x.device == xp.__array_namespace_info__().default_device()


def test_python_scalar_conversions():
    assert int(xp.asarray(7, dtype=xp.int16)) == 7
    assert float(xp.asarray(2.5)) == 2.5
    assert complex(xp.asarray(1 + 2j)) == 1 + 2j
    assert [10, 20, 30][xp.asarray(2)] == 30
    assert bool(xp.asarray(True)) is True
    assert bytes(xp.asarray(3, dtype=xp.uint8)) == b"\x03"


# ---- docs/impl/array-api.md's promotion tables ------------------------------------------------


def promotion_tables():
    """{(row dtype, column dtype): cell} of each table of the page's "Type promotion" section
    whose rows are named in bold."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "impl" / "array-api.md").read_text()
    section = page.split("## Type promotion", 1)[1].split("\n## ", 1)[0]
    cells, columns = {}, None
    for line in section.splitlines():
        row = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| |"):
            columns = row[1:]
        elif line.startswith("| **"):
            cells.update({(row[0].strip("*"), c): v for c, v in zip(columns, row[1:])})
    return cells


def test_the_pages_promotion_tables_are_what_result_type_answers():
    tables = promotion_tables()
    assert len(tables) == 8 * 8 + 4 * 4
    for mode in ("strict", "relaxed"):
        with hurray.mode(mode):
            for (a, b), want in tables.items():
                if want == "TypeError":
                    with pytest.raises(TypeError):
                        xp.result_type(getattr(xp, a), getattr(xp, b))
                else:
                    assert xp.result_type(getattr(xp, a), getattr(xp, b)) == getattr(xp, want)


# ---- without NumPy --------------------------------------------------------------------------


def test_hurray_imports_without_numpy_and_the_array_object_names_what_it_needs():
    # NumPy blocked in a fresh interpreter: the Tensor still stores and reads bytes, and each
    # of the array object's files (operators, indexing) says on first use that it needs NumPy.
    out = run_isolated("""
import sys
sys.modules["numpy"] = None
import hurray
t = hurray.Tensor(bytes(range(8)), hurray.uint8, [2, 4])
print(t.tolist())
for name, use in [("operator", lambda: t + t), ("conversion", lambda: bool(t)),
                  ("indexing", lambda: t[0]), ("mT", lambda: t.mT), ("len", lambda: len(t))]:
    try:
        use()
    except ImportError as error:
        assert "pip install numpy" in str(error), error
        print(name, "ImportError")
""")
    assert out.splitlines() == ["[[0, 1, 2, 3], [4, 5, 6, 7]]", "operator ImportError",
                                "conversion ImportError", "indexing ImportError",
                                "mT ImportError", "len ImportError"]
