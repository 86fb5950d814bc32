"""DLPack: the producer (__dlpack__, __dlpack_device__), the consumer (from_dlpack), the full
Hurray <-> DLPack mapping table, streams, and every pitfall of the brief."""

import ctypes
import gc
import subprocess
import sys
import threading
import weakref

import pytest

import hurray
import dlpack_fake as fake
from conftest import MADE_UP_CUDA_HANDLES, peer

np = peer("numpy")

NAMED = ["cpu", "cuda", "rocm", "metal", "vulkan", "webgpu", "hexagon", "level_zero", "opencl"]
CLASSES = ["device", "host", "unified", "peer"]
NONE, INVALID, ABSENT = "none", "invalid", "absent"

# buffer-protocol.md §2.7, Hurray -> DLPack, by tag and memory class; ABSENT where §2.6 says the
# device has no such memory (a well-formed descriptor no producer may create).
TO_DLPACK = {
    "cpu": [1, INVALID, INVALID, INVALID],
    "cuda": [2, 3, 13, NONE],
    "rocm": [10, 11, NONE, NONE],
    "metal": [8, 8, 8, NONE],
    "vulkan": [7, 7, ABSENT, NONE],
    "webgpu": [15, ABSENT, ABSENT, ABSENT],
    "hexagon": [16, ABSENT, ABSENT, ABSENT],
    "level_zero": [14, 14, 14, NONE],
    "opencl": [4, 4, 4, ABSENT],
}

# DLPack -> Hurray (tag name, memory class), or None where Hurray names no device.
FROM_DLPACK = {
    1: ("cpu", "device"), 2: ("cuda", "device"), 3: ("cuda", "host"), 4: ("opencl", "device"),
    7: ("vulkan", "device"), 8: ("metal", "device"), 9: None, 10: ("rocm", "device"),
    11: ("rocm", "host"), 12: None, 13: ("cuda", "unified"), 14: ("level_zero", "device"),
    15: ("webgpu", "device"), 16: ("hexagon", "device"), 17: None, 18: None, 5: None, 6: None,
    99: None,
}

# dtype -> DLPack (code, bits, lanes), or None (no DLPack form).
DTYPE_CODES = {
    "bool": (6, 8, 1), "int8": (0, 8, 1), "int16": (0, 16, 1), "int32": (0, 32, 1),
    "int64": (0, 64, 1), "uint8": (1, 8, 1), "uint16": (1, 16, 1), "uint32": (1, 32, 1),
    "uint64": (1, 64, 1), "float32": (2, 32, 1), "float64": (2, 64, 1),
    "complex64": (5, 64, 1), "complex128": (5, 128, 1), "float16": (2, 16, 1),
    "bfloat16": (4, 16, 1), "float8_e3m4": (7, 8, 1), "float8_e4m3": (8, 8, 1),
    "float8_e4m3b11fnuz": (9, 8, 1), "float8_e4m3fn": (10, 8, 1), "float8_e4m3fnuz": (11, 8, 1),
    "float8_e5m2": (12, 8, 1), "float8_e5m2fnuz": (13, 8, 1), "float8_e8m0fnu": (14, 8, 1),
    "float6_e2m3fn": (15, 6, 1), "float6_e3m2fn": (16, 6, 1), "float4_e2m1fn": (17, 4, 1),
    "complex32": (5, 32, 1), "int4": None, "uint4": None, "int2": None, "uint2": None,
    "uint1": None,
}


def managed(capsule):
    """The managed struct inside a capsule of either kind (without consuming it)."""
    name = fake.capsule_name(capsule)
    cls = fake.DLManagedTensorVersioned if name == fake.VERSIONED else fake.DLManagedTensor
    struct = cls.from_address(fake.capsule_pointer(capsule, name))
    struct.capsule = capsule  # the struct lives as long as the capsule is unconsumed
    return struct


def device_tensor(device, memory_class="device", dtype=hurray.float32, **kwargs):
    extra = {"peer_index": 1} if memory_class == "peer" else {}
    address = 0x10_0000  # never read: device memory is not the host's
    name = device[0] if isinstance(device, tuple) else device
    if name == "cpu":  # CPU memory must be mapped (ADR-035)
        extra["owner"] = memory = np.zeros(64, np.uint8)
        address = memory.ctypes.data
    return hurray.Tensor.from_address(address, dtype, [4], device=device,
                                      memory_class=memory_class, **extra, **kwargs)


# ============================================================================================
# The mapping table, both directions
# ============================================================================================


@pytest.mark.parametrize("tag", NAMED)
@pytest.mark.parametrize("index", range(4), ids=CLASSES)
def test_hurray_to_dlpack_device_table(tag, index):
    expected = TO_DLPACK[tag][index]
    memory_class = CLASSES[index]
    if expected == INVALID:
        with pytest.raises(hurray.DescriptorError):
            device_tensor(tag, memory_class)
        return
    if expected == ABSENT:
        with pytest.raises(hurray.UnsupportedError, match=f"device {tag} has no {memory_class} "
                           r"memory \(docs/spec/buffer-protocol.md §2.6.\d\)"):
            device_tensor((tag, 3), memory_class)
        return
    t = device_tensor((tag, 3), memory_class)
    if expected == NONE:
        with pytest.raises(hurray.UnsupportedError) as info:
            t.__dlpack_device__()
        assert isinstance(info.value, BufferError)
        with pytest.raises(hurray.UnsupportedError):
            t.__dlpack__(max_version=(1, 0), stream=-1 if tag in ("cuda", "rocm") else None)
        return
    assert t.__dlpack_device__() == (expected, 3)
    stream = -1 if tag in ("cuda", "rocm") else None
    m = managed(t.__dlpack__(max_version=(1, 0), stream=stream))
    assert (m.dl_tensor.device.device_type, m.dl_tensor.device.device_id) == (expected, 3)


def test_private_tags_have_no_dlpack_form():
    hurray.register_device(0xF7, "acme_dsp")
    try:
        t = device_tensor("acme_dsp")
        with pytest.raises(hurray.UnsupportedError, match="implementation-private"):
            t.__dlpack_device__()
        with pytest.raises(hurray.UnsupportedError):
            t.__dlpack__()
    finally:
        hurray.unregister_device(0xF7)


NATIVE_ROUTE = r"; Hurray-aware consumers take it whole through the native protocol, " \
               r"hurray.from_hurray\(t\) \(t.__hurray__\(\)\)$"


def test_unsupported_rows_name_the_reason_and_the_native_route():
    hurray.register_device(0xF7, "acme_dsp")
    try:
        for t, reason in [(device_tensor("rocm", "unified"), "kDLROCMManaged does not exist"),
                          (device_tensor("cuda", "peer"), "peer-mapped memory"),
                          (device_tensor("acme_dsp"), "implementation-private")]:
            for export in (t.__dlpack_device__, lambda: t.__dlpack__(max_version=(1, 0))):
                with pytest.raises(hurray.UnsupportedError, match=reason + ".*" + NATIVE_ROUTE):
                    export()
            hurray.from_hurray(t)  # ... which does carry it
    finally:
        hurray.unregister_device(0xF7)


def test_what_dlpack_cannot_carry_names_the_native_route():
    packed = hurray.Tensor(bytes(2), hurray.dtype.int4, [4])
    values = hurray.Tensor(bytes(4), hurray.int8, [2, 2])
    scales = hurray.Tensor(bytes(8), hurray.float32, [2])
    layered = hurray.Tensor.from_parts("per_channel", [values, scales])
    with pytest.raises(hurray.UnsupportedError, match="int4 has no DLPack dtype.*" + NATIVE_ROUTE):
        packed.__dlpack__()
    with pytest.raises(hurray.UnsupportedError, match="dense tensors only.*" + NATIVE_ROUTE):
        layered.__dlpack__()


@pytest.mark.parametrize("dl_type", sorted(FROM_DLPACK))
def test_dlpack_to_hurray_device_table(dl_type):
    expected = FROM_DLPACK[dl_type]
    export = fake.Export(0x20_0000, [4], device=(dl_type, 2))
    producer = fake.Producer(export)
    if expected is None:
        with pytest.raises(hurray.UnsupportedError, match="has no Hurray device tag|is unknown"):
            hurray.from_dlpack(producer)
        gc.collect()
        assert export.deleted == 1  # the rejected capsule was released by its destructor
        return
    t = hurray.from_dlpack(producer)
    assert (t.device.name, t.device.index, t.memory_class) == (expected[0], 2, expected[1])
    streams = dl_type in (2, 3, 10, 11, 13)
    assert t.sync_mode == ("stream" if streams else "ready")
    assert export.deleted == 0
    del t
    gc.collect()
    assert export.deleted == 1


@pytest.mark.parametrize("name", DTYPE_CODES)
def test_dtype_codes_both_directions(name):
    dtype = hurray.dtype(name)
    code = DTYPE_CODES[name]
    t = hurray.Tensor(bytearray(dtype.bits), dtype, [8])  # 8 elements: a whole number of bytes
    if code is None:
        with pytest.raises(hurray.UnsupportedError, match=f"{name} has no DLPack dtype"):
            t.__dlpack__(max_version=(1, 0))
        return
    m = managed(t.__dlpack__(max_version=(1, 0)))
    dt = m.dl_tensor.dtype
    assert (dt.code, dt.bits, dt.lanes) == code
    back = hurray.from_dlpack(t)
    assert back.dtype is dtype
    assert back.buffer_address + back.byte_offset == t.buffer_address + t.byte_offset


@pytest.mark.parametrize("code,bits,lanes", [(2, 128, 1), (2, 32, 4), (3, 64, 1), (0, 4, 1),
                                             (99, 8, 1)])
def test_dlpack_dtypes_hurray_lacks(code, bits, lanes):
    buf = bytearray(64)
    export = fake.cpu_export(buf, [2], code=code, bits=bits, lanes=lanes)
    with pytest.raises(hurray.UnsupportedError, match="has no Hurray dtype|vector type"):
        hurray.from_dlpack(fake.Producer(export))
    gc.collect()
    assert export.deleted == 1


# ============================================================================================
# Producer
# ============================================================================================


def test_versioned_and_legacy_capsules():
    data = bytearray(np.arange(6, dtype=np.float32).tobytes())
    t = hurray.Tensor(data, hurray.float32, [2, 3])
    for max_version in [(1, 0), (1, 5), (2, 0)]:
        cap = t.__dlpack__(max_version=max_version)
        assert fake.capsule_name(cap) == b"dltensor_versioned"
        m = managed(cap)
        assert (m.version.major, m.version.minor) == (1, 1)
        assert m.flags == 0
    for max_version in [None, (0, 8)]:
        cap = t.__dlpack__(max_version=max_version)
        assert fake.capsule_name(cap) == b"dltensor"
    m = managed(t.__dlpack__())
    d = m.dl_tensor
    assert d.data == t.buffer_address + t.byte_offset and d.byte_offset == 0
    assert d.ndim == 2 and list(d.shape[:2]) == [2, 3] and list(d.strides[:2]) == [3, 1]


def test_max_version_read_anew_unless_it_cannot_change():
    """A max_version tuple of plain ints is remembered once read (consumers pass one constant);
    anything whose value may change between calls is read on every call."""
    t = hurray.Tensor(bytes(6), hurray.uint8, [2, 3])
    versioned, legacy = (1, 0), (0, 9)
    for _ in range(3):  # the same two tuple objects, alternately
        assert fake.capsule_name(t.__dlpack__(max_version=versioned)) == b"dltensor_versioned"
        assert fake.capsule_name(t.__dlpack__(max_version=legacy)) == b"dltensor"

    class Flipping:
        """An __index__ that answers 1, then 0, then 1, ..."""

        calls = 0

        def __index__(self):
            Flipping.calls += 1
            return Flipping.calls % 2

    flipping = (Flipping(), 0)
    names = [fake.capsule_name(t.__dlpack__(max_version=flipping)) for _ in range(4)]
    assert names == [b"dltensor_versioned", b"dltensor"] * 2
    with pytest.raises(hurray.InvalidArgumentError, match="max_version major"):
        t.__dlpack__(max_version=(-1, 0))
    assert fake.capsule_name(t.__dlpack__(max_version=versioned)) == b"dltensor_versioned"


def test_capsule_fields_for_strided_views():
    base = np.arange(20, dtype=np.int64)
    t = hurray.Tensor(base.tobytes(), hurray.int64, [2, 3], strides=[-7, 2], byte_offset=64)
    d = managed(t.__dlpack__(max_version=(1, 0))).dl_tensor
    assert list(d.strides[:2]) == [-7, 2]
    assert d.data == t.buffer_address + t.byte_offset
    assert np.from_dlpack(t).tolist() == [[8, 10, 12], [1, 3, 5]]


def test_handle_devices_keep_data_and_carry_byte_offset():
    t = hurray.Tensor.from_address(0x1234, hurray.float32, [4], device="opencl",
                                   byte_offset=32)
    d = managed(t.__dlpack__(max_version=(1, 0))).dl_tensor
    assert (d.data, d.byte_offset) == (0x1234, 32)
    back = hurray.from_dlpack(t)
    assert (back.buffer_address, back.byte_offset, back.device.name) == (0x1234, 32, "opencl")


def test_read_only_through_versioned_and_legacy_capsules():
    ro = hurray.Tensor(np.arange(4, dtype=np.int32).tobytes(), hurray.int32, [4])
    m = managed(ro.__dlpack__(max_version=(1, 0)))
    assert m.flags == fake.READ_ONLY
    assert m.dl_tensor.data == ro.buffer_address + ro.byte_offset
    # A legacy capsule cannot say read-only: only a copy may go that way.
    with pytest.raises(hurray.BufferError, match="legacy 'dltensor' capsule cannot say so"):
        ro.__dlpack__(copy=False)
    for copy in (None, True):
        d = managed(ro.__dlpack__(copy=copy)).dl_tensor
        assert d.data != ro.buffer_address + ro.byte_offset
        assert ctypes.string_at(d.data, 16) == ro.tobytes()
    arr = np.from_dlpack(ro)
    assert not arr.flags.writeable and arr.ctypes.data == ro.buffer_address + ro.byte_offset


def test_copy_true_makes_a_flagged_writable_copy():
    data = bytearray(np.arange(6, dtype=np.float64).tobytes())
    t = hurray.Tensor(data, hurray.float64, [3, 2], strides=[1, 3])  # Fortran order
    m = managed(t.__dlpack__(max_version=(1, 0), copy=True))
    assert m.flags == fake.IS_COPIED
    d = m.dl_tensor
    assert d.data % 64 == 0 and list(d.strides[:2]) == [2, 1]
    assert ctypes.string_at(d.data, 48) == t.tobytes()
    with pytest.raises(hurray.UnsupportedError, match="no runtime to copy cuda memory"):
        device_tensor("cuda").__dlpack__(copy=True, stream=1)


def test_dl_device():
    t = hurray.Tensor(bytearray(16), hurray.float32, [4])
    assert fake.capsule_name(t.__dlpack__(dl_device=(1, 0))) == b"dltensor"
    with pytest.raises(hurray.BufferError, match="differs from the tensor's .* copy=False"):
        t.__dlpack__(dl_device=(2, 0), copy=False)
    with pytest.raises(hurray.UnsupportedError, match="no runtime to copy across devices"):
        t.__dlpack__(dl_device=(2, 0))
    with pytest.raises(TypeError, match="dl_device must be a"):
        t.__dlpack__(dl_device=1)


def test_argument_checking():
    t = hurray.Tensor(bytearray(16), hurray.float32, [4])
    with pytest.raises(TypeError, match="at most 0 positional"):
        t.__dlpack__(None)
    with pytest.raises(TypeError, match="unexpected keyword argument 'strem'"):
        t.__dlpack__(strem=None)
    with pytest.raises(TypeError, match="max_version must be a"):
        t.__dlpack__(max_version=1)
    with pytest.raises(TypeError, match="copy must be True, False or None"):
        t.__dlpack__(copy=1)


def test_keywords_land_in_their_parameters_whatever_their_order_and_repetition():
    # __dlpack__ remembers the keyword tuple it parsed last (a caller's is usually the same
    # object every time): call sites that share names in different orders, taking turns, each
    # one's values still land where they belong; a bad tuple is never remembered.
    t = hurray.Tensor(bytearray(16), hurray.float32, [4])
    names = {"max_version": (1, 0), "copy": True, "stream": None}
    for _ in range(3):
        assert managed(t.__dlpack__(max_version=(1, 0), copy=True)).flags == fake.IS_COPIED
        assert managed(t.__dlpack__(copy=False, max_version=(1, 0))).flags == 0
        assert fake.capsule_name(t.__dlpack__(max_version=None, copy=True)) == fake.LEGACY
        assert managed(t.__dlpack__(**names)).flags == fake.IS_COPIED  # a new tuple each time
        with pytest.raises(TypeError, match="unexpected keyword argument 'strem'"):
            t.__dlpack__(max_version=(1, 0), strem=None)
        with pytest.raises(TypeError, match="at most 0 positional"):
            t.__dlpack__(None, copy=False, max_version=(1, 0))


# ---- streams ---------------------------------------------------------------------------


@pytest.mark.parametrize("device,ok,bad", [
    ("cpu", [None], [-1, 0, 1, 2, 3]),
    ("vulkan", [None, -1], [0, 1, 7]),  # queues without DLPack stream values (ADR-054)
    ("cuda", [None, -1, 1, 2, 0x7F00_1000], [0, -2]),
    ("rocm", [None, -1, 0, 0x7F00_1000], [1, 2, -2]),
])
def test_stream_values_per_device(device, ok, bad):
    t = hurray.Tensor(bytearray(16), hurray.float32, [4]) if device == "cpu" else \
        device_tensor(device)
    for stream in ok:
        t.__dlpack__(stream=stream, max_version=(1, 0))
    for stream in bad:
        with pytest.raises(ValueError, match="stream"):
            t.__dlpack__(stream=stream, max_version=(1, 0))


@MADE_UP_CUDA_HANDLES
def test_data_not_ready_is_exported_only_when_the_consumer_syncs():
    t = device_tensor("cuda", sync_mode="stream", sync_handle=0x5000)
    for stream in (None, 1, 2, 0x6000):
        with pytest.raises(hurray.BufferError, match="not ready on the consumer's stream"):
            t.__dlpack__(stream=stream)
    t.__dlpack__(stream=-1)          # the consumer synchronises itself
    t.__dlpack__(stream=0x5000)      # the very stream the work is on
    e = device_tensor("cuda", sync_mode="event", sync_handle=0x7000)
    with pytest.raises(hurray.BufferError):
        e.__dlpack__(stream=0x7000)  # an event is not a stream
    e.__dlpack__(stream=-1)
    # What from_dlpack records for a CUDA import is exactly that: ordered on the legacy
    # default stream, so it goes on to a consumer on that stream without a runtime.
    imported = hurray.from_dlpack(device_tensor("cuda"))
    assert imported.sync_mode == "stream"
    imported.__dlpack__(stream=1)
    imported.__dlpack__()
    with pytest.raises(hurray.BufferError):
        imported.__dlpack__(stream=2)


# ---- lifetime --------------------------------------------------------------------------


def test_an_unconsumed_capsule_releases_exactly_once():
    t = hurray.Tensor(bytearray(16), hurray.float32, [4])
    refs = sys.getrefcount(t)
    caps = [t.__dlpack__(max_version=v) for v in (None, (1, 0))]
    assert sys.getrefcount(t) == refs + 2
    del caps
    gc.collect()
    assert sys.getrefcount(t) == refs


def test_a_consumed_capsule_belongs_to_its_consumer():
    t = hurray.Tensor(bytearray(16), hurray.float32, [4])
    refs = sys.getrefcount(t)
    arr = np.from_dlpack(t)
    assert sys.getrefcount(t) == refs + 1
    del arr
    gc.collect()
    assert sys.getrefcount(t) == refs


@pytest.mark.parametrize("max_version", [None, (1, 0)], ids=["legacy", "versioned"])
def test_a_deleter_called_without_renaming_the_capsule_releases_once(max_version):
    # PyTorch does this when it cannot place a device (OpenCL): it calls the deleter as its
    # import fails and leaves the capsule under its original name, whose destructor then runs.
    t = hurray.Tensor(bytearray(16), hurray.float32, [4])
    refs = sys.getrefcount(t)
    cap = t.__dlpack__(max_version=max_version)
    m = managed(cap)
    deleter = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)(ctypes.cast(m.deleter, ctypes.c_void_p).value)
    deleter(ctypes.addressof(m))  # the import failed; the capsule keeps its name
    assert sys.getrefcount(t) == refs
    del cap, m
    gc.collect()
    assert sys.getrefcount(t) == refs
    assert np.asarray(t).tolist() == [0.0] * 4


def consumed_export():
    """A fresh tensor's DLPack export, taken over as a consumer takes it (the capsule renamed
    and dropped), so that only its deleter keeps the tensor alive: a weak reference to the
    tensor, the deleter's address and the managed struct's."""
    t = hurray.Tensor(bytearray(16), hurray.float32, [4])
    probe = weakref.ref(t)
    cap = t.__dlpack__(max_version=(1, 0))
    m = managed(cap)
    address = fake.capsule_pointer(cap, fake.VERSIONED)
    fake.rename_capsule(cap, b"used_dltensor_versioned")  # we are the consumer now
    del t, cap
    gc.collect()
    assert probe() is not None
    return probe, ctypes.cast(m.deleter, ctypes.c_void_p).value, address


def test_the_producer_deleter_takes_the_gil_itself():
    probe, deleter, address = consumed_export()
    # ctypes releases the GIL around a foreign call: the deleter runs without it, on
    # another thread, as a C consumer's would.
    thread = threading.Thread(target=ctypes.CFUNCTYPE(None, ctypes.c_void_p)(deleter),
                              args=(address,))
    thread.start()
    thread.join()
    gc.collect()
    assert probe() is None


def test_the_producer_deleter_on_a_thread_python_never_saw(peer_ext):
    probe, deleter, address = consumed_export()
    peer_ext.run_on_thread(deleter, address)  # no thread state there: it must make one
    gc.collect()
    assert probe() is None


def test_the_producer_deleter_called_with_the_gil_held():
    probe, deleter, address = consumed_export()
    ctypes.PYFUNCTYPE(None, ctypes.c_void_p)(deleter)(address)  # keeps the GIL
    assert probe() is None


def test_capsules_and_imports_alive_at_interpreter_shutdown():
    code = """
import numpy as np, hurray
t = hurray.Tensor(bytearray(64), hurray.float32, [16])
KEEP = [t.__dlpack__(), t.__dlpack__(max_version=(1, 0)), np.from_dlpack(t),
        hurray.from_dlpack(np.arange(3.0)), hurray.from_numpy(np.zeros(3))]
KEEP.append(KEEP)  # a cycle, so that finalisation itself frees them
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


# ============================================================================================
# Consumer
# ============================================================================================


def test_from_dlpack_consumes_a_versioned_capsule_and_releases_once():
    buf = bytearray(np.arange(6, dtype=np.float32).tobytes())
    export = fake.cpu_export(buf, [2, 3])
    producer = fake.Producer(export)
    t = hurray.from_dlpack(producer)
    assert producer.calls == [{"max_version": (1, 1)}]
    assert t.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert not t.readonly
    t.bytes_view()[0:4] = np.float32(9).tobytes()
    assert np.frombuffer(buf, np.float32)[0] == 9  # shared
    assert export.deleted == 0
    del t
    gc.collect()
    assert export.deleted == 1


def test_from_dlpack_retries_old_producers_and_consumes_legacy_capsules():
    buf = bytearray(np.arange(4, dtype=np.int16).tobytes())
    export = fake.cpu_export(buf, [4], code=0, bits=16, versioned=False)
    producer = fake.Producer(export, legacy_signature=True)
    t = hurray.from_dlpack(producer)
    assert producer.calls == [{}]
    assert t.tolist() == [0, 1, 2, 3] and t.dtype == hurray.int16
    del t
    gc.collect()
    assert export.deleted == 1


def test_double_consumption_is_refused():
    buf = bytearray(16)
    export = fake.cpu_export(buf, [4])
    cap = export.capsule()

    class Same:
        def __dlpack__(self, **kwargs):
            return cap

    t = hurray.from_dlpack(Same())
    assert fake.capsule_name(cap) == b"used_dltensor_versioned"
    with pytest.raises(hurray.BufferError, match="already consumed"):
        hurray.from_dlpack(Same())
    del t, cap
    gc.collect()
    assert export.deleted == 1
    # The same with hurray as the producer: the consumer owns it, once.
    source = hurray.Tensor(bytearray(16), hurray.float32, [4])
    refs = sys.getrefcount(source)
    cap = source.__dlpack__(max_version=(1, 0))
    first = hurray.from_dlpack(Same())
    with pytest.raises(hurray.BufferError, match="already consumed"):
        hurray.from_dlpack(Same())
    del cap, first
    gc.collect()
    assert sys.getrefcount(source) == refs


def test_an_unknown_major_version_is_rejected_and_its_deleter_still_runs():
    export = fake.Export(0x1000, [4], version=(2, 0))
    with pytest.raises(hurray.ABIError, match=r"DLPack 2\.0 is not supported") as info:
        hurray.from_dlpack(fake.Producer(export))
    assert isinstance(info.value, hurray.UnsupportedError)
    assert export.deleted == 1
    gc.collect()
    assert export.deleted == 1


def test_a_newer_minor_version_is_accepted():
    buf = bytearray(16)
    export = fake.cpu_export(buf, [4], version=(1, 9))
    assert hurray.from_dlpack(fake.Producer(export)).shape == (4,)


def test_bool_is_accepted():
    buf = bytearray(b"\x01\x00\x01")
    t = hurray.from_dlpack(fake.Producer(fake.cpu_export(buf, [3], code=6, bits=8)))
    assert t.dtype is hurray.bool and t.tolist() == [True, False, True]
    arr = np.array([True, False])
    assert hurray.from_dlpack(arr).tolist() == [True, False]
    assert np.from_dlpack(hurray.from_numpy(arr)).dtype == np.bool_


def test_bfloat16_and_float8_codes_are_imported():
    for name in ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "float4_e2m1fn",
                 "float6_e2m3fn"]:
        code, bits, lanes = DTYPE_CODES[name]
        buf = bytearray(8)
        n = 64 // bits
        t = hurray.from_dlpack(fake.Producer(fake.cpu_export(buf, [n], code=code, bits=bits)))
        assert t.dtype is hurray.dtype(name) and t.nbytes == 8


def test_padded_sub_byte_dlpack_is_refused():
    export = fake.cpu_export(bytearray(4), [4], code=17, bits=4, flags=fake.IS_SUBBYTE_TYPE_PADDED)
    with pytest.raises(hurray.UnsupportedError, match="padded"):
        hurray.from_dlpack(fake.Producer(export))


def test_zero_size_with_null_data():
    export = fake.Export(None, [0, 3])
    t = hurray.from_dlpack(fake.Producer(export))
    assert (t.shape, t.size, t.buffer_address, t.tobytes()) == ((0, 3), 0, 0, b"")
    assert np.from_dlpack(t).shape == (0, 3)
    with pytest.raises(hurray.BufferError, match="NULL data"):
        hurray.from_dlpack(fake.Producer(fake.Export(None, [2])))


def test_size_one_dimensions_with_odd_strides():
    buf = bytearray(np.arange(3, dtype=np.float32).tobytes())
    for odd in (0, 1, 12345, -(2**62), 2**62):
        export = fake.cpu_export(buf, [3, 1], strides=[1, odd])
        t = hurray.from_dlpack(fake.Producer(export))
        assert t.tolist() == [[0.0], [1.0], [2.0]]
        assert bytes(t.bytes_view()) == bytes(memoryview(t)) == bytes(buf)
        assert np.from_dlpack(t).tolist() == [[0.0], [1.0], [2.0]]


def test_negative_strides_and_byte_offset():
    base = np.arange(12, dtype=np.int32)
    buf = bytearray(base.tobytes())
    # elements 11, 9, 7, 5: data + byte_offset points at element 11
    export = fake.cpu_export(buf, [4], strides=[-2], byte_offset=44, code=0)
    t = hurray.from_dlpack(fake.Producer(export))
    assert t.tolist() == [11, 9, 7, 5]
    assert t.strides == (-2,)
    view = np.arange(12, dtype=np.int32)[::-3]
    t2 = hurray.from_dlpack(view)
    assert t2.tolist() == view.tolist()
    assert t2.buffer_address + t2.byte_offset == view.ctypes.data


def test_null_strides_from_old_producers_mean_row_major():
    buf = bytearray(np.arange(6, dtype=np.uint8).tobytes())
    t = hurray.from_dlpack(fake.Producer(fake.cpu_export(buf, [2, 3], code=1, bits=8)))
    assert t.strides == (3, 1) and t.tolist() == [[0, 1, 2], [3, 4, 5]]


def test_read_only_flag_is_kept():
    buf = bytearray(8)
    t = hurray.from_dlpack(fake.Producer(fake.cpu_export(buf, [2], flags=fake.READ_ONLY)))
    assert t.readonly
    with pytest.raises(hurray.BufferError, match="read-only"):
        t.__dlpack__(copy=False)  # legacy capsule: refused rather than losing read-only
    assert not np.from_dlpack(t).flags.writeable
    ro = np.arange(3.0)
    ro.flags.writeable = False
    assert hurray.from_dlpack(ro).readonly


def test_copy_requests():
    buf = bytearray(np.arange(4, dtype=np.float32).tobytes())
    address = fake.cpu_export(buf, [4]).managed.dl_tensor.data
    # A producer that understood copy=True copies (numpy); hurray trusts IS_COPIED.
    arr = np.arange(4.0)
    c = hurray.from_dlpack(arr, copy=True)
    assert c.buffer_address + c.byte_offset != arr.ctypes.data and c.tolist() == arr.tolist()
    # An old producer cannot be asked: the consumer copies and releases at once.
    export = fake.cpu_export(buf, [4], versioned=False)
    t = hurray.from_dlpack(fake.Producer(export, legacy_signature=True), copy=True)
    assert export.deleted == 1
    assert t.tolist() == [0, 1, 2, 3] and t.buffer_address != address
    # copy=False is passed on as asked.
    export = fake.cpu_export(buf, [4])
    producer = fake.Producer(export)
    hurray.from_dlpack(producer, copy=False)
    assert producer.calls == [{"max_version": (1, 1), "copy": False}]


def test_device_argument():
    buf = bytearray(16)
    producer = fake.Producer(fake.cpu_export(buf, [4]))
    hurray.from_dlpack(producer, device="cpu")
    assert producer.calls == [{"max_version": (1, 1)}]  # same device: not asked
    producer = fake.Producer(fake.cpu_export(buf, [4]))
    with pytest.raises(hurray.BufferError, match=r"exported device \(1, 0\), not the \(2, 1\)"):
        hurray.from_dlpack(producer, device="cuda:1")
    assert producer.calls == [{"max_version": (1, 1), "dl_device": (2, 1)}]
    old = fake.Producer(fake.cpu_export(buf, [4], versioned=False), legacy_signature=True)
    with pytest.raises(hurray.BufferError, match="takes no dl_device"):
        hurray.from_dlpack(old, device=hurray.Device("cuda", 0))


def test_malformed_capsules_and_producers():
    with pytest.raises(TypeError, match="needs an object with __dlpack__, not int"):
        hurray.from_dlpack(42)

    class NotACapsule:
        def __dlpack__(self, **kwargs):
            return 42

    with pytest.raises(TypeError, match="returned int, not a PyCapsule"):
        hurray.from_dlpack(NotACapsule())

    new = ctypes.pythonapi.PyCapsule_New
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    cap = new(0x1000, b"something_else", None)

    class Wrong:
        def __dlpack__(self, **kwargs):
            return cap

    with pytest.raises(hurray.BufferError, match="not a DLPack capsule"):
        hurray.from_dlpack(Wrong())


@pytest.mark.parametrize("kwargs,error,match", [
    ({"device": (1, 70000)}, hurray.UnsupportedError, "device id 70000"),
    ({"shape": [-1]}, hurray.LayoutError, "shape"),
    ({"ndim": 65}, hurray.LimitError, "65 dimensions"),
    # What hurray-core would refuse, refused by the import check itself (the tensor is built
    # without running the core's check again): an extent past HURRAY_MAX_DIM, and memory past
    # the 2^60 - 1 bytes whose bit offsets fit int64.
    ({"shape": [2**62 + 1], "code": 1, "bits": 8}, hurray.LimitError, "HURRAY_MAX_DIM"),
    ({"shape": [2**61], "code": 1, "bits": 8}, hurray.LimitError, r"at most 2\^60 - 1"),
])
def test_malformed_tensors(kwargs, error, match):
    shape = kwargs.pop("shape", [4])
    ndim = kwargs.pop("ndim", None)
    buf = bytearray(64)
    export = fake.cpu_export(buf, shape, **kwargs)
    if ndim is not None:
        export.shape = (ctypes.c_int64 * ndim)(*([1] * ndim))
        export.managed.dl_tensor.shape = ctypes.cast(export.shape, ctypes.POINTER(ctypes.c_int64))
        export.managed.dl_tensor.ndim = ndim
    with pytest.raises(error, match=match):
        hurray.from_dlpack(fake.Producer(export))
    gc.collect()
    assert export.deleted == 1


def test_modes_do_not_touch_dlpack():
    t = hurray.Tensor(bytearray(4), hurray.dtype.bfloat16, [2])
    for mode in ("strict", "relaxed"):
        with hurray.mode(mode):
            assert hurray.from_dlpack(t).dtype is hurray.dtype.bfloat16
