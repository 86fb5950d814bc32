"""The Python buffer protocol: bytes "B", 1-D, CPU, C-contiguous dense tensors."""

import builtins
import ctypes
import gc
import hashlib
import sys

import pytest

import hurray

PYBUF_WRITABLE = 0x1


def get_buffer(obj, flags):
    """PyObject_GetBuffer with explicit flags (the exception is raised by ctypes)."""
    view = ctypes.create_string_buffer(256)  # larger than a Py_buffer
    get = ctypes.pythonapi.PyObject_GetBuffer
    get.argtypes = [ctypes.py_object, ctypes.c_void_p, ctypes.c_int]
    get.restype = ctypes.c_int
    get(obj, ctypes.addressof(view), flags)
    release = ctypes.pythonapi.PyBuffer_Release
    release.argtypes = [ctypes.c_void_p]
    release(ctypes.addressof(view))


def test_a_byte_level_one_dimensional_export():
    data = bytearray(range(24))
    t = hurray.Tensor(data, hurray.float32, [2, 3])
    mv = memoryview(t)
    assert (mv.format, mv.itemsize, mv.ndim, mv.shape, mv.strides) == ("B", 1, 1, (24,), (1,))
    assert mv.nbytes == t.nbytes == 24
    assert not mv.readonly
    assert mv.obj is t
    assert bytes(mv) == bytes(data) == t.tobytes()
    assert hashlib.sha256(t).digest() == hashlib.sha256(data).digest()


def test_only_the_addressed_bytes_are_exported():
    data = bytes(range(40))
    t = hurray.Tensor(data, hurray.uint8, [8], strides=[1], byte_offset=5)
    assert bytes(memoryview(t)) == data[5:13]


def test_writes_go_through_and_read_only_is_kept():
    data = bytearray(8)
    mv = memoryview(hurray.Tensor(data, hurray.uint8, [8]))
    mv[3] = 7
    assert data[3] == 7
    ro = hurray.Tensor(bytes(8), hurray.uint8, [8])
    assert memoryview(ro).readonly
    with pytest.raises(TypeError):
        memoryview(ro)[0] = 1
    with pytest.raises(hurray.BufferError, match="read-only") as info:
        get_buffer(ro, PYBUF_WRITABLE)
    assert isinstance(info.value, builtins.BufferError)


def test_sub_byte_tensors_export_their_packed_bytes():
    t = hurray.Tensor(b"\x21\x43\x05", hurray.dtype.int4, [5])
    assert bytes(memoryview(t)) == b"\x21\x43\x05"


def test_size_one_dimensions_with_odd_strides_are_contiguous():
    t = hurray.Tensor(bytes(12), hurray.float32, [3, 1], strides=[1, 1000])
    assert memoryview(t).nbytes == 12


@pytest.mark.parametrize("shape,strides", [([3], [2]), ([2, 2], [1, 2]), ([3], [-1])])
def test_non_contiguous_tensors_are_refused(shape, strides):
    offset = 8 if strides[0] < 0 else 0
    t = hurray.Tensor(bytes(24), hurray.float32, shape, strides=strides, byte_offset=offset)
    with pytest.raises(hurray.BufferError, match="C-contiguous tensors only") as info:
        memoryview(t)
    assert isinstance(info.value, builtins.BufferError)


def test_device_memory_is_refused():
    t = hurray.Tensor.from_address(0x1000, hurray.float32, [4], device=("cuda", 0),
                                   memory_class="host")
    with pytest.raises(hurray.BufferError, match="needs CPU memory; the tensor is on cuda:0"):
        memoryview(t)


def test_an_export_keeps_the_tensor_alive():
    data = bytearray(b"abcd")
    t = hurray.Tensor(data, hurray.uint8, [4])
    refs = sys.getrefcount(t)
    mv = memoryview(t)
    assert sys.getrefcount(t) == refs + 1
    del t
    gc.collect()
    assert bytes(mv) == b"abcd"
    mv.release()


def test_zero_size_and_zero_d():
    assert memoryview(hurray.Tensor(b"", hurray.float64, [0, 4])).nbytes == 0
    assert bytes(memoryview(hurray.Tensor(b"\x01\x00", hurray.int16, []))) == b"\x01\x00"
