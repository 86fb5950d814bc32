"""A DLPack producer written with ctypes, for the consumer-side tests.

It builds DLManagedTensor / DLManagedTensorVersioned structs by hand, so a test can hand
hurray.from_dlpack exactly the capsule a real (or a broken, or an old) producer would: any
device type, dtype code, NULL strides, NULL data, an unknown major version, a legacy
signature. Every export records how many times its deleter ran.
"""

import ctypes
from ctypes import CFUNCTYPE, POINTER, Structure, c_char_p, c_int, c_int32, c_int64
from ctypes import c_uint8, c_uint16, c_uint32, c_uint64, c_void_p

VERSIONED = b"dltensor_versioned"
LEGACY = b"dltensor"
READ_ONLY, IS_COPIED, IS_SUBBYTE_TYPE_PADDED = 1, 2, 4

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_OPENCL = 1, 2, 3, 4
KDL_VULKAN, KDL_METAL, KDL_VPI, KDL_ROCM, KDL_ROCM_HOST = 7, 8, 9, 10, 11
KDL_EXT_DEV, KDL_CUDA_MANAGED, KDL_ONEAPI, KDL_WEBGPU = 12, 13, 14, 15
KDL_HEXAGON, KDL_MAIA, KDL_TRN = 16, 17, 18


class DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(Structure):
    _fields_ = [
        ("data", c_void_p),
        ("device", DLDevice),
        ("ndim", c_int32),
        ("dtype", DLDataType),
        ("shape", POINTER(c_int64)),
        ("strides", POINTER(c_int64)),
        ("byte_offset", c_uint64),
    ]


DELETER = CFUNCTYPE(None, c_void_p)


class DLPackVersion(Structure):
    _fields_ = [("major", c_uint32), ("minor", c_uint32)]


class DLManagedTensorVersioned(Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", c_void_p),
        ("deleter", DELETER),
        ("flags", c_uint64),
        ("dl_tensor", DLTensor),
    ]


class DLManagedTensor(Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p), ("deleter", DELETER)]


_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [c_void_p, c_char_p, c_void_p]
_api.PyCapsule_IsValid.restype = c_int
_api.PyCapsule_IsValid.argtypes = [c_void_p, c_char_p]
_api.PyCapsule_GetPointer.restype = c_void_p
_api.PyCapsule_GetPointer.argtypes = [c_void_p, c_char_p]
_api.PyCapsule_GetName.restype = c_char_p
_api.PyCapsule_GetName.argtypes = [ctypes.py_object]
_api.PyCapsule_SetName.restype = c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, c_char_p]

capsule_name = _api.PyCapsule_GetName


def capsule_pointer(capsule, name):
    """The pointer a capsule holds (by object, not address)."""
    return ctypes.PYFUNCTYPE(c_void_p, ctypes.py_object, c_char_p)(
        ("PyCapsule_GetPointer", _api))(capsule, name)


def rename_capsule(capsule, name):
    """Renames a capsule, as a consumer does before taking ownership."""
    if _api.PyCapsule_SetName(capsule, name) != 0:
        raise RuntimeError("PyCapsule_SetName failed")

# Exports whose deleter has not run yet, by the address of their managed struct: the
# deleter (called from C, maybe without the GIL: ctypes takes it) finds them here.
_live = {}


def _managed_address(export):
    return ctypes.addressof(export.managed)


@DELETER
def _deleter(address):
    export = _live.pop(address)
    export.deleted += 1


@CFUNCTYPE(None, c_void_p)
def _capsule_destructor(capsule):
    # As a careful producer does: only a capsule nobody consumed still owns its tensor.
    for name, cls in ((VERSIONED, DLManagedTensorVersioned), (LEGACY, DLManagedTensor)):
        if _api.PyCapsule_IsValid(capsule, name):
            address = _api.PyCapsule_GetPointer(capsule, name)
            cls.from_address(address).deleter(address)
            return


class Export:
    """One DLPack export: the structs, the memory they describe, the deleter count."""

    def __init__(self, data, shape, *, strides=None, code=2, bits=32, lanes=1,
                 device=(KDL_CPU, 0), byte_offset=0, versioned=True, flags=0,
                 version=(1, 0), keep=None):
        self.deleted = 0
        self.keep = keep  # whatever owns the memory at `data`
        ndim = len(shape)
        self.shape = (c_int64 * max(ndim, 1))(*shape)
        self.strides = None if strides is None else (c_int64 * max(ndim, 1))(*strides)
        self.versioned = versioned
        self.managed = DLManagedTensorVersioned() if versioned else DLManagedTensor()
        t = self.managed.dl_tensor
        t.data = data
        t.device = DLDevice(*device)
        t.ndim = ndim
        t.dtype = DLDataType(code, bits, lanes)
        t.shape = ctypes.cast(self.shape, POINTER(c_int64))
        if strides is not None:
            t.strides = ctypes.cast(self.strides, POINTER(c_int64))
        t.byte_offset = byte_offset
        self.managed.deleter = _deleter
        if versioned:
            self.managed.version = DLPackVersion(*version)
            self.managed.flags = flags
        _live[_managed_address(self)] = self

    def capsule(self):
        name = VERSIONED if self.versioned else LEGACY
        destructor = ctypes.cast(_capsule_destructor, c_void_p)
        return _api.PyCapsule_New(_managed_address(self), name, destructor)


class Producer:
    """An object with __dlpack__ / __dlpack_device__ handing out one prepared export.

    legacy_signature=True gives the pre-1.0 signature __dlpack__(stream=None), which raises
    TypeError for max_version, as old producers do.
    """

    def __init__(self, export, *, legacy_signature=False):
        self.export = export
        self.calls = []
        self.legacy_signature = legacy_signature

    def __dlpack_device__(self):
        d = self.export.managed.dl_tensor.device
        return (d.device_type, d.device_id)

    def __dlpack__(self, **kwargs):
        if self.legacy_signature and set(kwargs) - {"stream"}:
            raise TypeError("__dlpack__() got an unexpected keyword argument")
        self.calls.append(kwargs)
        return self.export.capsule()


def cpu_export(buffer, shape, **kwargs):
    """An export over a ctypes/bytearray buffer on the CPU (data = its address)."""
    address = ctypes.addressof((ctypes.c_char * len(buffer)).from_buffer(buffer))
    return Export(address, shape, keep=buffer, **kwargs)
