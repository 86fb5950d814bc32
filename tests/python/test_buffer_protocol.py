"""The Python buffer protocol (ADR-042, ADR-072): typed for consumers that ask for a format,
refused to those that ask for plain bytes (torch.asarray would read them as its default
dtype), bytes through t.bytes_view(); never a dtype read as another. Every dtype and
layout against the real consumers: memoryview, NumPy, PyTorch, JAX, hashlib, files and
sockets."""

import builtins
import ctypes
import gc
import hashlib
import socket
import sys

import pytest

import hurray
from conftest import peer

np = peer("numpy")
ml_dtypes = peer("ml_dtypes")
torch = peer("torch")
jax = peer("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy

PYBUF_SIMPLE = 0
PYBUF_WRITABLE = 0x1
PYBUF_FORMAT = 0x4
PYBUF_ND = 0x8
PYBUF_STRIDES = 0x10 | PYBUF_ND
PYBUF_C_CONTIGUOUS = 0x20 | PYBUF_STRIDES
PYBUF_F_CONTIGUOUS = 0x40 | PYBUF_STRIDES

ALL_DTYPES = sorted((d for d in vars(hurray.dtype).values() if isinstance(d, hurray.dtype)),
                    key=lambda d: d.code)
# The dtypes with a PEP 3118 (struct) format: Tier 1 and float16.
FORMATS = {"bool": "?", "int8": "b", "int16": "h", "int32": "i", "int64": "q", "uint8": "B",
           "uint16": "H", "uint32": "I", "uint64": "Q", "float16": "e", "float32": "f",
           "float64": "d", "complex64": "Zf", "complex128": "Zd"}


def get_buffer(obj, flags):
    """PyObject_GetBuffer with explicit flags, released at once; (format, ndim) of the view.
    The exception is raised by ctypes."""
    view = ctypes.create_string_buffer(256)  # larger than a Py_buffer
    get = ctypes.pythonapi.PyObject_GetBuffer
    get.argtypes = [ctypes.py_object, ctypes.c_void_p, ctypes.c_int]
    get.restype = ctypes.c_int
    get(obj, ctypes.addressof(view), flags)
    # Py_buffer: buf, obj, len, itemsize, readonly, ndim, format, ...
    fields = ctypes.cast(ctypes.addressof(view), ctypes.POINTER(ctypes.c_ssize_t))
    ndim = ctypes.c_int.from_address(ctypes.addressof(view) + 4 * 8 + 4).value
    fmt = ctypes.cast(fields[5], ctypes.c_char_p).value
    release = ctypes.pythonapi.PyBuffer_Release
    release.argtypes = [ctypes.c_void_p]
    release(ctypes.addressof(view))
    return fmt, ndim


def numpy_dtype(dtype):
    """The NumPy dtype of a whole-byte Hurray dtype (ml_dtypes for Tier 2), else None."""
    if dtype.itemsize is None:
        return None
    if dtype.name in FORMATS:
        return np.dtype(dtype.name)
    return np.dtype(getattr(ml_dtypes, dtype.name)) if hasattr(ml_dtypes, dtype.name) else None


def source_array(dtype, shape):
    """An array of `dtype` holding small valid values, as raw bytes when NumPy has no dtype."""
    n = int(np.prod(shape))
    if dtype.name == "bool":
        return (np.arange(n) % 2).astype(bool).reshape(shape)
    values = (np.arange(n) % 4 + 1).astype(np.float32)
    if dtype.name == "float8_e8m0fnu":
        values = 2.0 ** (np.arange(n) % 3)
    return values.astype(numpy_dtype(dtype)).reshape(shape)


# Each layout: a view of a (4, 6) source array (or the array itself).
LAYOUTS = {
    "contiguous": lambda a: a,
    "transposed": lambda a: a.T,
    "sliced": lambda a: a[1:4:2, ::3],
    "reversed": lambda a: a[::-1, 1:],
    "0-d": lambda a: a[2, 3],
    "empty": lambda a: a[:, :0],
}


def whole_byte_case(dtype, layout):
    base = source_array(dtype, (4, 6))
    view = np.asarray(LAYOUTS[layout](base))
    return hurray.from_numpy(view), view


WHOLE_BYTE = [d for d in ALL_DTYPES if numpy_dtype(d) is not None]
PACKED = [d for d in ALL_DTYPES if d.itemsize is None]


# ============================================================================================
# Typed consumers: memoryview, bytes(), NumPy
# ============================================================================================


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", WHOLE_BYTE, ids=str)
def test_numpy_reads_every_dtype_and_layout_typed(dtype, layout):
    t, view = whole_byte_case(dtype, layout)
    for result in (np.asarray(t), np.array(t)):
        assert result.dtype == view.dtype and result.shape == view.shape
        assert result.tobytes() == view.tobytes()
    shared = np.asarray(t)
    assert view.size == 0 or shared.__array_interface__["data"][0] == \
        view.__array_interface__["data"][0]
    assert np.array(t).__array_interface__["data"][0] != view.__array_interface__["data"][0] \
        or view.size == 0


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", WHOLE_BYTE, ids=str)
def test_memoryview_is_typed_or_refused(dtype, layout):
    t, view = whole_byte_case(dtype, layout)
    if dtype.name not in FORMATS:
        with pytest.raises(hurray.BufferError, match=f"{dtype.name} has no PEP 3118 format.*"
                           "from_dlpack.*bytes_view") as info:
            memoryview(t)
        assert isinstance(info.value, builtins.BufferError)
        with pytest.raises(hurray.BufferError, match="no PEP 3118 format"):
            bytes(t)
        return
    mv = memoryview(t)
    assert mv.format == FORMATS[dtype.name] and mv.itemsize == view.itemsize
    assert mv.shape == view.shape and mv.ndim == view.ndim
    assert mv.obj is t and mv.readonly == t.readonly
    assert view.size == 0 or all(s == v or n <= 1
                                 for s, v, n in zip(mv.strides, view.strides, view.shape))
    assert bytes(mv) == bytes(t) == view.tobytes() == t.tobytes()


@pytest.mark.parametrize("dtype", PACKED, ids=str)
def test_packed_dtypes_never_come_out_as_uint8(dtype):
    t = hurray.Tensor(bytes([0x21, 0x43, 0x05]), dtype, [int(24 // dtype.bits) - 1])
    with pytest.raises(hurray.BufferError, match=f"{dtype.name} has no PEP 3118 format"):
        memoryview(t)
    with pytest.raises(hurray.UnsupportedError, match=f"{dtype.name} has no NumPy form"):
        np.asarray(t)
    with pytest.raises(hurray.UnsupportedError):
        np.array(t)
    assert bytes(t.bytes_view()) == t.tobytes()


def test_ml_dtypes_types_come_out_typed_not_as_bytes():
    # NumPy takes the refusal of the typed buffer as "no buffer" and asks __array__.
    t = hurray.from_numpy(np.array([[1.5, -2.0]], ml_dtypes.bfloat16))
    out = np.asarray(t)
    assert out.dtype == ml_dtypes.bfloat16 and out.tolist() == [[1.5, -2.0]]
    assert out.__array_interface__["data"][0] == t.buffer_address + t.byte_offset


def test_strides_and_contiguity_requests_are_honoured():
    t = hurray.from_numpy(np.zeros((3, 4), np.float32).T)  # Fortran order
    assert get_buffer(t, PYBUF_STRIDES | PYBUF_FORMAT) == (b"f", 2)
    assert get_buffer(t, PYBUF_F_CONTIGUOUS | PYBUF_FORMAT) == (b"f", 2)
    with pytest.raises(hurray.BufferError, match="asks for C-contiguous memory"):
        get_buffer(t, PYBUF_C_CONTIGUOUS | PYBUF_FORMAT)
    with pytest.raises(hurray.BufferError, match="takes no strides"):
        get_buffer(t, PYBUF_ND | PYBUF_FORMAT)
    c = hurray.from_numpy(np.zeros((3, 4), np.float32))
    assert get_buffer(c, PYBUF_ND | PYBUF_FORMAT) == (b"f", 2)
    assert get_buffer(c, PYBUF_FORMAT) == (b"f", 1)  # no shape asked: one dimension


def test_writes_go_through_and_read_only_is_kept():
    data = bytearray(8)
    t = hurray.Tensor(data, hurray.uint16, [4])
    memoryview(t)[3] = 0x0102
    assert data[6:8] == b"\x02\x01"
    t.bytes_view()[0] = 7
    assert data[0] == 7
    np.asarray(t)[1] = 5
    assert data[2] == 5
    ro = hurray.Tensor(bytes(8), hurray.uint8, [8])
    assert memoryview(ro).readonly and ro.bytes_view().readonly
    assert not np.asarray(ro).flags.writeable
    with pytest.raises(hurray.BufferError, match="read-only") as info:
        get_buffer(ro, PYBUF_WRITABLE | PYBUF_FORMAT)
    assert isinstance(info.value, builtins.BufferError)


def test_device_memory_is_refused():
    t = hurray.Tensor.from_address(0x1000, hurray.float32, [4], device=("cuda", 0),
                                   memory_class="host")
    for consume in (memoryview, lambda t: t.bytes_view()):
        with pytest.raises(hurray.BufferError, match="needs CPU memory; the tensor is on cuda:0"):
            consume(t)


def test_an_export_keeps_the_tensor_alive():
    data = bytearray(b"abcd")
    t = hurray.Tensor(data, hurray.uint8, [4])
    refs = sys.getrefcount(t)
    mv, raw = memoryview(t), t.bytes_view()
    assert sys.getrefcount(t) == refs + 2
    del t
    gc.collect()
    assert bytes(mv) == bytes(raw) == b"abcd"
    mv.release()
    raw.release()


# ============================================================================================
# Byte consumers and the explicit byte view
# ============================================================================================


PLAIN_BYTES = "buffer is typed, and this consumer asked for plain bytes"


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_plain_byte_requests_are_refused_naming_bytes_view(dtype, tmp_path):
    # ADR-072: a consumer that asks for no format reads plain bytes; hashlib would hash them
    # right, but torch.asarray groups them by its default dtype. Each is refused with the
    # routes, and the same consumers given t.bytes_view() get the bytes.
    nbytes = 16
    data = bytearray(range(1, nbytes + 1))
    t = hurray.Tensor(data, dtype, [nbytes * 8 // dtype.bits])
    for flags in (PYBUF_SIMPLE, PYBUF_WRITABLE):
        with pytest.raises(hurray.BufferError, match=PLAIN_BYTES) as info:
            get_buffer(t, flags)
        assert isinstance(info.value, builtins.BufferError)
    with pytest.raises(hurray.BufferError, match=r"pass t\.bytes_view\(\) for the bytes"):
        hashlib.sha256(t)
    view = t.bytes_view()
    assert (view.format, view.itemsize, view.shape) == ("B", 1, (nbytes,))
    assert bytes(view) == t.tobytes() == data
    assert hashlib.sha256(view).digest() == hashlib.sha256(data).digest()
    with open(tmp_path / "t.bin", "wb") as f:
        with pytest.raises(hurray.BufferError, match=PLAIN_BYTES):
            f.write(t)
        assert f.write(view) == nbytes
    assert (tmp_path / "t.bin").read_bytes() == data
    with open(tmp_path / "t.bin", "rb") as f:
        target = hurray.Tensor(bytearray(nbytes), dtype, t.shape)
        assert f.readinto(target.bytes_view()) == nbytes
    assert target.tobytes() == data
    a, b = socket.socketpair()
    with a, b:
        assert a.send(view) == nbytes
        assert b.recv(64) == data


def test_only_the_addressed_bytes_are_exported():
    data = bytes(range(40))
    t = hurray.Tensor(data, hurray.uint8, [8], strides=[1], byte_offset=5)
    assert bytes(t.bytes_view()) == bytes(memoryview(t)) == data[5:13]
    assert hashlib.sha256(t.bytes_view()).digest() == hashlib.sha256(data[5:13]).digest()


@pytest.mark.parametrize("shape,strides", [([3], [2]), ([2, 2], [1, 2]), ([3], [-1])])
def test_the_byte_view_of_non_contiguous_tensors_is_refused(shape, strides):
    offset = 8 if strides[0] < 0 else 0
    t = hurray.Tensor(bytes(24), hurray.float32, shape, strides=strides, byte_offset=offset)
    with pytest.raises(hurray.BufferError, match="C-contiguous tensors only; tobytes()") as info:
        t.bytes_view()
    assert isinstance(info.value, builtins.BufferError)
    assert bytes(t) == t.tobytes()  # typed consumers take strides


@pytest.mark.parametrize("dtype", PACKED, ids=str)
def test_odd_packed_tensors_read_their_pad_bits_as_zero(dtype):
    # E.g. three 4-bit elements in two bytes: the memory's pad nibble is 0xF, readers see 0.
    count = 1 if dtype.bits == 6 else 16 // dtype.bits - 1
    tail = count * dtype.bits % 8
    raw = bytes([0x21] * (count * dtype.bits // 8) + [0xFF])
    t = hurray.Tensor(raw, dtype, [count])
    expected = t.tobytes()
    assert expected[:-1] == raw[:-1] and expected[-1] == 0xFF & ((1 << tail) - 1)
    assert bytes(t.bytes_view()) == expected
    assert t.bytes_view().readonly  # a zero-padded copy, even over writable memory
    assert hurray.Tensor(bytearray(raw), dtype, [count]).bytes_view().readonly
    clean = hurray.Tensor(bytearray(expected), dtype, [count])  # pad bits already zero
    assert not clean.bytes_view().readonly
    assert bytes(clean.bytes_view()) == expected


def test_zero_size_and_zero_d():
    empty = hurray.Tensor(b"", hurray.float64, [0, 4])
    assert memoryview(empty).shape == (0, 4) and empty.bytes_view().nbytes == 0
    scalar = hurray.Tensor(b"\x01\x00", hurray.int16, [])
    assert memoryview(scalar).shape == () and memoryview(scalar).tolist() == 1
    assert bytes(scalar.bytes_view()) == b"\x01\x00"


# ============================================================================================
# PyTorch and JAX
# ============================================================================================


def torch_dtype(dtype):
    return {"bool": torch.bool, "complex32": torch.complex32}.get(
        dtype.name, getattr(torch, dtype.name, None))


TORCH_DTYPES = [d for d in WHOLE_BYTE if torch_dtype(d) is not None]
JAX_DTYPES = [d for d in WHOLE_BYTE if d.name != "complex32"]  # JAX has no complex32


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced", "0-d", "empty"])
@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
def test_torch_reads_every_dtype_and_layout_typed(dtype, layout):
    # (PyTorch aborts the process on negative strides from any producer: no "reversed".)
    want = torch_dtype(dtype)
    t, view = whole_byte_case(dtype, layout)
    for result in (torch.from_dlpack(t), torch.as_tensor(t), torch.tensor(t)):
        assert result.dtype == want and tuple(result.shape) == view.shape
        raw = result.contiguous().reshape(-1)
        raw = raw if dtype.name == "bool" else raw.view(torch.uint8)
        assert raw.numpy().tobytes() == view.tobytes()


def test_torch_asarray_never_reads_another_dtype():
    # PyTorch 2.13's torch.asarray asks an object's buffer before its __dlpack__, without a
    # format, and groups the bytes by its default dtype: silently other numbers (ADR-042). The
    # plain-bytes request is now refused (ADR-072); PyTorch replaces the refusal with its own
    # error, and the routes keep the dtype.
    t = hurray.from_numpy(np.arange(4, dtype=np.int64))
    with pytest.raises(RuntimeError, match="could not retrieve buffer"):
        torch.asarray(t)
    assert torch.as_tensor(t).tolist() == torch.from_dlpack(t).tolist() == [0, 1, 2, 3]
    # np.frombuffer reinterprets whatever it is given, by design: here, explicitly, the bytes.
    assert np.frombuffer(t.bytes_view(), np.int64).tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", JAX_DTYPES, ids=str)
def test_jax_reads_every_dtype_and_layout_typed(dtype, layout):
    t, view = whole_byte_case(dtype, layout)
    expected = jnp.asarray(view)
    result = jnp.asarray(t)
    assert result.dtype == expected.dtype and result.shape == expected.shape
    assert np.asarray(result).tobytes() == np.asarray(expected).tobytes()
