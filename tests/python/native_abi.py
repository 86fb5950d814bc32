"""The capsule of the native protocol seen from ctypes, for white-box tests.

The structs mirror include/hurray/hurray.h (C ABI version 4; tests/c/test_abi.c pins their
layout), so a test can read what a "hurray_tensor" capsule holds without consuming it, and do
to a capsule what only a broken or foreign producer would: another ABI version, a NULL pointer,
a context whose fields past the frozen head are garbage.
"""

import ctypes
from ctypes import POINTER, Structure, c_char_p, c_uint8, c_uint16, c_uint32, c_uint64
from ctypes import c_void_p

CAPSULE = b"hurray_tensor"
USED = b"used_hurray_tensor"


class HurrayBufferDesc(Structure):
    _fields_ = [("byte_size", c_uint64), ("alignment", c_uint32), ("device_id", c_uint16),
                ("peer_device_id", c_uint16), ("device_tag", c_uint8),
                ("memory_class", c_uint8), ("sync_mode", c_uint8), ("reserved", c_uint8 * 5)]


class HurrayBuffer(Structure):
    _fields_ = [("data", c_void_p), ("desc", HurrayBufferDesc), ("flags", c_uint32),
                ("reserved0", c_uint32), ("sync_handle", c_void_p), ("sync_value", c_uint64),
                ("release", c_void_p), ("release_ctx", c_void_p), ("reserved1", c_uint64 * 2)]


class HurrayBufferList(Structure):
    _fields_ = [("count", c_uint32), ("capacity", c_uint32),
                ("buffers", POINTER(POINTER(HurrayBuffer))), ("roles", POINTER(c_uint8)),
                ("reserved", c_void_p)]


class HurrayTensorContext(Structure):
    _fields_ = [("abi_version", c_uint32), ("flags", c_uint32), ("release", c_void_p),
                ("tensor", c_void_p), ("buffers", POINTER(HurrayBufferList)),
                ("owner", c_void_p), ("owner_release", c_void_p), ("reserved", c_uint64 * 4)]


assert ctypes.sizeof(HurrayBuffer) == 88 and ctypes.sizeof(HurrayBufferList) == 32
assert HurrayTensorContext.release.offset == 8 and HurrayTensorContext.tensor.offset == 16

# Prototypes of our own: the function objects of ctypes.pythonapi are shared with every other
# module (dlpack_fake.py sets argtypes of its own on them).
_api = ctypes.pythonapi
_new = ctypes.PYFUNCTYPE(ctypes.py_object, c_void_p, c_char_p, c_void_p)(("PyCapsule_New", _api))
_get_name = ctypes.PYFUNCTYPE(c_char_p, ctypes.py_object)(("PyCapsule_GetName", _api))
_get_pointer = ctypes.PYFUNCTYPE(c_void_p, ctypes.py_object, c_char_p)(
    ("PyCapsule_GetPointer", _api))
_set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, c_char_p)(
    ("PyCapsule_SetName", _api))


def name(capsule):
    """A capsule's name (bytes), or None for a capsule without one."""
    return _get_name(capsule)


def new_capsule(pointer, capsule_name):
    """A capsule without a destructor (PyCapsule_New refuses a NULL pointer)."""
    return _new(pointer, capsule_name, None)


def context(capsule):
    """The HurrayTensorContext of an unconsumed capsule, read in place (the struct keeps the
    capsule alive, and with it the context, until the capsule is consumed)."""
    struct = HurrayTensorContext.from_address(_get_pointer(capsule, CAPSULE))
    struct.capsule = capsule
    return struct


def take(capsule):
    """Takes a capsule's context as a C consumer does, renaming the capsule, and releases
    nothing: (the context's address, its release function's address), the context the
    caller's to release."""
    address = _get_pointer(capsule, CAPSULE)
    release = HurrayTensorContext.from_address(address).release
    if _set_name(capsule, USED) != 0:
        raise RuntimeError("PyCapsule_SetName failed")
    return address, release


def handles(capsule):
    """The addresses of the HurrayBuffer handles in a capsule's buffer list."""
    buffers = context(capsule).buffers.contents
    return [ctypes.addressof(buffers.buffers[i].contents) for i in range(buffers.count)]


class PointerSlot:
    """The `pointer` field of a PyCapsule object (right after PyObject_HEAD), to make the
    NULL-pointer capsule PyCapsule_New cannot: found by its value, never assumed."""

    def __init__(self, capsule):
        pointer = _get_pointer(capsule, name(capsule))
        header = ctypes.sizeof(c_void_p) * 2  # ob_refcnt, ob_type (release builds)
        self.slot = c_void_p.from_address(id(capsule) + header)
        if self.slot.value != pointer:
            raise RuntimeError("unexpected PyCapsule layout")
        self.saved = pointer

    def clear(self):
        self.slot.value = None

    def restore(self):
        self.slot.value = self.saved


class Returns:
    """An object whose __hurray__ hands out a capsule it was given: a producer of any
    capsule, consumed or not, of any name."""

    def __init__(self, capsule):
        self.capsule = capsule
        self.calls = 0

    def __hurray__(self, stream=None):
        self.calls += 1
        return self.capsule
