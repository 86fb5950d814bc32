"""NumPy interoperability: __array__ (NumPy 2 semantics) and hurray.from_numpy."""

import gc
import re
import subprocess
import sys
import weakref

import pytest

import hurray
from conftest import peer

np = peer("numpy")

TIER1 = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
         "float32", "float64", "complex64", "complex128"]


def sample(name, shape=(3, 4)):
    n = int(np.prod(shape))
    if name == "bool":
        return (np.arange(n) % 3 == 0).reshape(shape)
    return (np.arange(n) * 3 - 5).astype(name).reshape(shape)


def as_array(t, **kwargs):
    """NumPy's view of a tensor through __array__ (np.asarray itself takes the buffer
    protocol first, which is byte-level: see docs/impl/python-bindings.md)."""
    return t.__array__(**kwargs)


# ---- __array__ --------------------------------------------------------------------------


@pytest.mark.parametrize("name", TIER1 + ["float16"])
def test_array_is_zero_copy_for_every_numpy_dtype(name):
    src = sample(name)
    t = hurray.Tensor(bytearray(src.tobytes()), name, src.shape)
    arr = as_array(t)
    assert arr.dtype == np.dtype(name) and arr.shape == src.shape
    np.testing.assert_array_equal(arr, src)
    assert arr.ctypes.data == t.buffer_address + t.byte_offset
    assert arr.flags.writeable


def test_array_shares_memory_both_ways():
    data = bytearray(np.arange(6, dtype=np.float32).tobytes())
    t = hurray.Tensor(data, hurray.float32, [2, 3])
    arr = as_array(t)
    arr[1, 2] = 42
    assert t.tolist()[1][2] == 42.0
    np.frombuffer(data, np.float32)[0] = -1
    assert arr[0, 0] == -1


def test_array_keeps_strides_negative_ones_included():
    base = np.arange(30, dtype=np.int32).reshape(5, 6)
    view = base[::-2, 1::2]
    offset = view.ctypes.data - base.ctypes.data
    t = hurray.Tensor(base.tobytes(), hurray.int32, view.shape,
                      strides=[s // 4 for s in view.strides], byte_offset=offset)
    arr = as_array(t)
    assert arr.strides == view.strides
    np.testing.assert_array_equal(arr, view)


def test_array_keeps_read_only_and_the_tensor_alive():
    t = hurray.Tensor(np.arange(4.0).tobytes(), hurray.float64, [4])
    arr = as_array(t)
    assert not arr.flags.writeable
    with pytest.raises(ValueError):
        arr[0] = 1
    probe = weakref.ref(t)
    del t
    gc.collect()
    assert probe() is not None
    np.testing.assert_array_equal(arr, [0, 1, 2, 3])
    del arr
    gc.collect()
    assert probe() is None


def test_array_copy_semantics_of_numpy_2():
    t = hurray.Tensor(bytearray(np.arange(4, dtype=np.int16).tobytes()), hurray.int16, [4])
    same = as_array(t, copy=False)
    assert same.ctypes.data == t.buffer_address + t.byte_offset
    copied = as_array(t, copy=True)
    assert copied.ctypes.data != same.ctypes.data
    copied[0] = 9
    assert t.tolist()[0] == 0
    converted = as_array(t, dtype=np.float64)
    assert converted.dtype == np.float64 and converted.tolist() == [0, 1, 2, 3]
    assert as_array(t, dtype=np.int16, copy=False).ctypes.data == same.ctypes.data
    with pytest.raises(ValueError, match="copy=False.*needs a copy"):
        as_array(t, dtype=np.float64, copy=False)
    # NumPy's own entry points pass dtype positionally and copy by keyword.
    assert np.array(t.__array__(None, copy=None)).tolist() == [0, 1, 2, 3]


def test_array_of_special_shapes():
    scalar = as_array(hurray.Tensor(np.float32(1.5).tobytes(), hurray.float32, []))
    assert scalar.shape == () and scalar == 1.5
    empty = as_array(hurray.Tensor(b"", hurray.float32, [0, 3]))
    assert empty.shape == (0, 3)
    ones = as_array(hurray.Tensor(bytes(12), hurray.float32, [3, 1], strides=[1, 99]))
    assert ones.shape == (3, 1)
    null = as_array(hurray.Tensor.from_address(0, hurray.float32, [0], device="cpu"))
    assert null.shape == (0,)


def test_an_empty_read_only_tensor_gives_a_read_only_array(tmp_path):
    # NumPy backs a buffer of no bytes with an allocation of its own, writable by default.
    path = tmp_path / "empty.hurray"
    hurray.save(path, {"t": hurray.from_numpy(np.zeros((0, 3), np.int32))})
    for t in (hurray.load(path)["t"], hurray.Tensor(b"", hurray.float32, [0, 3])):
        assert t.readonly
        assert not np.asarray(t).flags.writeable
        assert not t.__array__().flags.writeable


def test_array_refuses_what_numpy_cannot_hold():
    with pytest.raises(hurray.BufferError, match="needs CPU memory"):
        as_array(hurray.Tensor.from_address(0x1000, hurray.float32, [4], device="cuda"))
    with pytest.raises(hurray.UnsupportedError, match="int4 has no NumPy form"):
        as_array(hurray.Tensor(bytes(4), hurray.dtype.int4, [8]))


@pytest.mark.parametrize("dtype,nbytes,route", [  # 32 elements in `nbytes`
    ("int4", 16, "hurray.dequantize(t, dtype=hurray.int8)"),
    ("uint1", 4, "hurray.dequantize(t, dtype=hurray.int8)"),
    ("float4_e2m1fn", 16, "hurray.dequantize(t) widens them to float32"),
    ("q8_0", 34, "hurray.dequantize(t) gives its float32 values"),  # one block of 32
])
def test_a_dtype_numpy_cannot_hold_names_the_route_and_the_route_works(dtype, nbytes, route):
    d = getattr(hurray.dtype, dtype)
    with pytest.raises(hurray.UnsupportedError, match=re.escape(route)):
        np.dtype(d)
    t = hurray.Tensor(bytes(nbytes), d, [34 if dtype == "q8_0" else 32])
    wide = hurray.dequantize(t, dtype=hurray.int8 if "int8" in route else hurray.float32)
    assert np.array_equal(np.asarray(wide), np.zeros(32, wide.dtype.name))


@pytest.mark.parametrize("setup,message", [
    ("sys.modules['ml_dtypes'] = None", "bfloat16 has no NumPy dtype without ml_dtypes"),
    ("sys.modules['ml_dtypes'] = types.ModuleType('ml_dtypes')", "NumPy has no dtype for bfloat16"),
])
def test_tier2_without_a_usable_ml_dtypes(setup, message):
    code = f"""
import sys, types
{setup}
import hurray
t = hurray.Tensor(bytes(4), hurray.dtype.bfloat16, [2])
try:
    t.__array__()
except hurray.UnsupportedError as e:
    print(e)
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert message in result.stdout, result.stderr


# ---- from_numpy -------------------------------------------------------------------------


@pytest.mark.parametrize("name", TIER1 + ["float16"])
def test_from_numpy_every_dtype(name):
    arr = sample(name)
    t = hurray.from_numpy(arr)
    assert t.dtype == hurray.dtype(name)
    assert t.shape == arr.shape and t.strides == (4, 1)
    assert t.buffer_address + t.byte_offset == arr.ctypes.data
    assert t.tobytes() == arr.tobytes()


def test_from_numpy_shares_memory_and_keeps_the_array_alive():
    arr = np.zeros((2, 3), np.float32)
    t = hurray.from_numpy(arr)
    arr[1, 1] = 5
    assert t.tolist()[1][1] == 5.0
    memoryview(t)[0, 0] = 7.0
    assert arr[0, 0] == 7
    refs = sys.getrefcount(arr)
    t2 = hurray.from_numpy(arr)
    assert sys.getrefcount(arr) == refs + 1
    del t2
    gc.collect()
    assert sys.getrefcount(arr) == refs
    assert arr.base is None  # arr owns its data: keeping arr alive keeps the data
    probe = weakref.ref(arr)
    del arr
    gc.collect()
    assert probe() is not None  # the tensor holds it
    assert t.tolist()[1][1] == 5.0
    del t
    gc.collect()
    assert probe() is None  # and lets it go with its memory


@pytest.mark.parametrize("index", [
    np.s_[::2, :], np.s_[:, ::-1], np.s_[::-1, ::-3], np.s_[1:, 2], np.s_[None, 3:, :],
])
def test_from_numpy_keeps_strides_in_elements(index):
    base = np.arange(42, dtype=np.float64).reshape(6, 7)
    view = base[index]
    t = hurray.from_numpy(view)
    assert t.shape == view.shape
    # strides of extent-1 dimensions are never stepped and may be anything
    assert [s for s, n in zip(t.strides, t.shape) if n > 1] == \
        [s // 8 for s, n in zip(view.strides, view.shape) if n > 1]
    assert t.tolist() == view.tolist()
    assert t.tobytes() == view.tobytes()
    np.testing.assert_array_equal(as_array(t), view)


def test_from_numpy_read_only_and_byte_offset():
    arr = np.arange(16, dtype=np.uint8)
    arr.flags.writeable = False
    t = hurray.from_numpy(arr[3:])
    assert t.readonly
    assert t.buffer_address + t.byte_offset == arr.ctypes.data + 3
    assert t.buffer_address % 64 == 0


def test_from_numpy_refuses_strides_that_are_not_whole_elements():
    raw = np.zeros(40, np.uint8)
    odd = np.lib.stride_tricks.as_strided(raw[1:].view(np.uint8), (4,), (9,))
    assert hurray.from_numpy(odd).strides == (9,)
    unaligned = np.ndarray((4,), np.int32, buffer=raw, offset=1, strides=(6,))
    with pytest.raises(hurray.LayoutError, match="stride 6 of axis 0 is not a multiple of the "
                                                 "itemsize 4"):
        hurray.from_numpy(unaligned)


def test_from_numpy_at_the_limits_of_the_descriptor():
    """NumPy arrays the descriptor cannot address (an extent past HURRAY_MAX_DIM, bit offsets
    past int64) get the core's own errors; those just inside its limits are taken."""
    one = np.zeros(1, np.uint8)
    assert hurray.from_numpy(np.broadcast_to(one, (2**62,))).shape == (2**62,)
    with pytest.raises(hurray.LimitError, match=r"shape\[0\] = 4611686018427387905 exceeds "
                                                r"HURRAY_MAX_DIM"):
        hurray.from_numpy(np.broadcast_to(one, (2**62 + 1,)))
    far = np.lib.stride_tricks.as_strided(np.zeros(2, np.uint8), (2,), (2**61,))
    with pytest.raises(hurray.LimitError, match="element offsets overflow int64"):
        hurray.from_numpy(far)
    near = np.lib.stride_tricks.as_strided(np.zeros(2, np.uint8), (2,), (2**59,))
    assert hurray.from_numpy(near).strides == (2**59,)


def test_from_numpy_refuses_byte_swapped_and_foreign_dtypes():
    with pytest.raises(hurray.UnsupportedError, match="byte order or layout differs"):
        hurray.from_numpy(np.zeros(2, ">f4"))
    with pytest.raises(hurray.UnsupportedError, match="has no Hurray dtype"):
        hurray.from_numpy(np.zeros(2, "datetime64[s]"))
    with pytest.raises(hurray.UnsupportedError, match="has no Hurray dtype"):
        hurray.from_numpy(np.zeros(2, [("a", "i4")]))
    with pytest.raises(TypeError, match="takes a numpy.ndarray, not list"):
        hurray.from_numpy([1, 2])


def test_from_numpy_special_shapes():
    assert hurray.from_numpy(np.array(3.0)).tolist() == 3.0
    assert hurray.from_numpy(np.zeros((0, 5))).shape == (0, 5)
    assert hurray.from_numpy(np.zeros((2, 1, 3), np.int8)).tolist() == [[[0] * 3]] * 2


def test_round_trip_through_both_directions():
    arr = np.arange(12, dtype=np.complex64).reshape(3, 4)[:, ::-1]
    back = as_array(hurray.from_numpy(arr))
    np.testing.assert_array_equal(back, arr)
    assert back.ctypes.data == arr.ctypes.data


# ---- Tier 2 through ml_dtypes -----------------------------------------------------------

ML_TIER2 = ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
            "float8_e8m0fnu", "float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz", "complex32"]


@pytest.mark.parametrize("name", ML_TIER2)
def test_ml_dtypes_round_trip_zero_copy(name):
    ml_dtypes = peer("ml_dtypes")
    dt = np.dtype(getattr(ml_dtypes, name))
    arr = np.array([0.5, 1.0, -2.0, 4.0], np.float32).astype(dt).reshape(2, 2)
    t = hurray.from_numpy(arr)
    assert t.dtype == hurray.dtype(name) and t.readonly is False
    assert t.buffer_address + t.byte_offset == arr.ctypes.data
    back = as_array(t)
    assert back.dtype == dt
    assert back.tobytes() == arr.tobytes()
    assert back.ctypes.data == arr.ctypes.data


@pytest.mark.parametrize("name", ["int4", "uint4", "int2", "uint2", "uint1", "float4_e2m1fn",
                                  "float6_e2m3fn", "float6_e3m2fn"])
def test_ml_dtypes_unpacked_sub_byte_types_are_refused(name):
    ml_dtypes = peer("ml_dtypes")
    arr = np.zeros(4, getattr(ml_dtypes, name))
    with pytest.raises(hurray.UnsupportedError, match="Hurray packs"):
        hurray.from_numpy(arr)


# ---- a hurray.dtype wherever NumPy takes a dtype (__numpy_dtype__, ADR-089) -------------


def numpy_twin(name):
    """NumPy's dtype of the same encoding: NumPy's own, else ml_dtypes'."""
    if name in TIER1 + ["float16"]:
        return np.dtype(name)
    return np.dtype(getattr(peer("ml_dtypes"), name))


@pytest.mark.parametrize("name", TIER1 + ["float16"] + ML_TIER2)
def test_numpy_takes_a_hurray_dtype_as_its_own(name):
    d, twin = hurray.dtype(name), numpy_twin(name)
    assert np.dtype(d) == twin and d.__numpy_dtype__ is np.dtype(d)  # one cached object
    assert np.empty((2, 3), d).dtype == twin
    assert np.zeros(4, np.float32).astype(d).dtype == twin
    assert np.frombuffer(bytes(2 * twin.itemsize), d).dtype == twin
    # == is NumPy's own rule, either way round: np.dtype(other) of the right operand
    assert twin == d and d == twin and not (d != twin)
    assert hurray.dtype(twin) is d  # and back to the singleton


def test_a_dtype_equals_what_hurray_dtype_turns_into_it():
    torch = peer("torch")
    f32 = hurray.float32
    # the NumPy and PyTorch habits: t.dtype == np.float32, == torch.float32, == "float32"
    for same in (np.dtype("float32"), np.float32, "float32", torch.float32):
        assert f32 == same and same == f32 and not (f32 != same), same
    for other in (np.dtype("float64"), np.float64, "float64", torch.float64, "f4", "nonsense",
                  np.dtype(">f4"), None, 32, float, object()):
        assert f32 != other and other != f32 and not (f32 == other), other
    assert hurray.dtype.bfloat16 == torch.bfloat16 == hurray.dtype.bfloat16
    assert hurray.dtype.bfloat16 == np.dtype(peer("ml_dtypes").bfloat16)
    # no encoding in common with NumPy's one-element-per-byte int4: unequal in both orders
    for ml_int4 in (peer("ml_dtypes").int4, np.dtype(peer("ml_dtypes").int4)):
        assert hurray.dtype.int4 != ml_int4 and ml_int4 != hurray.dtype.int4
    assert hurray.float64 == float and hurray.int64 == int  # NumPy's reading of Python's types
    assert np.dtype("int8") != hurray.dtype.int4
    # among Hurray dtypes: identity; hashable, one key per dtype
    assert f32 == hurray.dtype("float32") and f32 != hurray.float64
    assert {f32: 1}[hurray.dtype("float32")] == 1 and len({f32, hurray.float64, f32}) == 2
    with pytest.raises(TypeError):
        f32 < hurray.float64


@pytest.mark.parametrize("name", ["int4", "uint4", "int2", "uint2", "uint1", "float4_e2m1fn",
                                  "float6_e2m3fn", "float6_e3m2fn"])
def test_numpy_refuses_packed_dtypes_naming_the_route(name):
    # ml_dtypes' int4 stores one element per byte; Hurray packs two: mapping one onto the
    # other would reinterpret every byte.
    with pytest.raises(hurray.UnsupportedError, match=r"packs .* bytes_view\(\) and tobytes\(\)"):
        np.dtype(hurray.dtype(name))
    with pytest.raises(hurray.UnsupportedError, match="packs"):
        np.empty(3, hurray.dtype(name))


def test_numpy_reads_a_tensors_dtype_as_it_reads_an_arrays():
    # np.dtype(arr) and np.result_type(arr) take an array's dtype; NumPy takes `.dtype` only
    # when it is a numpy.dtype, so the tensor answers __numpy_dtype__ itself (JAX asks
    # np.result_type before it converts).
    t = hurray.from_numpy(np.zeros((2, 3), np.float16))
    assert np.dtype(t) == np.float16 and np.result_type(t) == np.float16
    assert np.result_type(t, np.float32) == np.float32
    q = hurray.Tensor(bytes(4), hurray.dtype.int4, [8])
    with pytest.raises(hurray.UnsupportedError, match="packs"):
        np.dtype(q)


def test_libraries_that_ask_numpy_for_the_dtype_take_a_tensor():
    da = peer("dask.array")
    src = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = hurray.from_numpy(src)
    x = da.from_array(t, chunks=(2, 2))
    assert x.dtype == np.float32 and x.shape == (3, 4)  # hurray.float32, which is
    np.testing.assert_array_equal(x.compute(), src)
    assert float(x.sum().compute()) == 66.0
