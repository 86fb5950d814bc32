"""The native interchange protocol (Layer 8c): Tensor.__hurray__ and hurray.from_hurray.

First the code samples of the user page "Native Interchange Protocol", verbatim, run as
written; then one test per rule of ADR-023 as amended by ADR-030, ADR-033 and ADR-034, named
after the rule; then errors, lifetime and streams. Multi-buffer layouts are in
test_native_layouts.py, the exchange with a separately built extension in
test_native_peer.py, the soak and thread tests in test_native_stress.py.
"""

import ctypes
import gc
import re
import struct
import sys
import weakref
from pathlib import Path

import pytest

import hurray
import native_abi as abi
from conftest import MADE_UP_CUDA_HANDLES

ROOT = Path(__file__).resolve().parents[2]

# ============================================================================================
# The user page's samples, verbatim, in the order the page gives them (later samples use the
# names earlier ones made, as a reader running them one after the other would).
# ============================================================================================

QUICK_START = '''\
import struct, hurray

# Create a source tensor.
raw = struct.pack("6f", 1.0, 2.0, 3.0, 4.0, 5.0, 6.0)
source = hurray.Tensor(raw, hurray.float32, [2, 3])

# Zero-copy transfer via the native protocol.
target = hurray.from_hurray(source)

assert target.shape == source.shape   # (2, 3)
assert target.dtype == source.dtype   # hurray.float32
'''

DISCOVERY = '''\
obj = source   # whatever you were handed

if hasattr(obj, "__hurray__"):
    tensor = hurray.from_hurray(obj)
else:
    # Fall back to DLPack or another protocol.
    tensor = hurray.from_dlpack(obj)
'''

TIER_2 = '''\
import hurray

q_tensor = hurray.Tensor(bytes(64), hurray.dtype.int4, [128])
q_copy = hurray.from_hurray(q_tensor)

assert q_copy.dtype == hurray.dtype.int4   # works in strict mode
'''

CAPSULE_LIFECYCLE = '''\
t = hurray.Tensor(bytes(8), hurray.float32, [2])
cap = t.__hurray__()          # fresh capsule

t2 = hurray.from_hurray(t)    # OK: calls __hurray__() internally
cap2 = t.__hurray__()         # OK: each call produces a new capsule
'''

ERROR_HANDLING = '''\
import hurray

try:
    hurray.from_hurray(42)
    raise AssertionError("42 exposes no __hurray__")
except TypeError as exc:
    print(exc)
'''

PAGE = [("Quick start", QUICK_START), ("Discovery", DISCOVERY),
        ("Tier 2 and quantized tensors", TIER_2), ("Capsule lifecycle", CAPSULE_LIFECYCLE),
        ("Error handling", ERROR_HANDLING)]


def run_page(upto):
    """Runs the page's samples up to and including section `upto`, as written."""
    namespace = {"__name__": "__user_page__"}
    for section, code in PAGE:
        exec(compile(code, f"<user page: {section}>", "exec"), namespace)
        if section == upto:
            return namespace
    raise KeyError(upto)


def test_sample_quick_start():
    ns = run_page("Quick start")
    source, target = ns["source"], ns["target"]
    assert target.shape == (2, 3) and target.dtype is hurray.float32
    assert target.tolist() == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    # "No data is copied. target borrows source's buffer; source is kept alive for as long
    # as target exists."
    assert target.buffer_address + target.byte_offset == source.buffer_address + source.byte_offset
    alive = weakref.ref(source)
    del ns["source"], source
    gc.collect()
    assert alive() is not None
    del ns["target"], target
    gc.collect()
    assert alive() is None


def test_sample_discovery():
    ns = run_page("Discovery")
    assert ns["tensor"].tolist() == ns["source"].tolist()
    assert ns["tensor"].buffer_address == ns["source"].buffer_address


@pytest.mark.parametrize("mode", ["strict", "relaxed"])
def test_sample_tier_2_and_quantized(mode):
    with hurray.mode(mode):
        ns = run_page("Tier 2 and quantized tensors")
    assert ns["q_copy"].tobytes() == bytes(64) and ns["q_copy"].shape == (128,)


def test_sample_capsule_lifecycle():
    ns = run_page("Capsule lifecycle")
    cap, cap2 = ns["cap"], ns["cap2"]
    assert type(cap).__name__ == "PyCapsule" and cap is not cap2
    assert abi.name(cap) == abi.name(cap2) == b"hurray_tensor"
    assert abi.handles(cap) != abi.handles(cap2)
    # "Attempting to consume the same capsule twice raises hurray.BufferError."
    once = abi.Returns(cap)
    assert hurray.from_hurray(once).tolist() == [0.0, 0.0]
    assert abi.name(cap) == b"used_hurray_tensor"
    with pytest.raises(hurray.BufferError):
        hurray.from_hurray(once)


def test_sample_error_handling(capsys):
    run_page("Error handling")
    assert capsys.readouterr().out == "from_hurray() needs an object with __hurray__, not int\n"


# ============================================================================================
# ADR-023 as amended: one test per rule
# ============================================================================================


def tensor(data=None, dtype=hurray.float32, shape=(4,)):
    return hurray.Tensor(bytearray(16) if data is None else data, dtype, shape)


def test_tensor_must_expose_hurray_dunder_returning_a_capsule():
    cap = tensor().__hurray__()
    assert type(cap).__name__ == "PyCapsule" and abi.name(cap) == b"hurray_tensor"


def test_module_must_expose_from_hurray_accepting_any_object_whose_dunder_returns_a_capsule():
    t = tensor(bytearray(b"\x00\x00\x80?" * 4))

    class Wrapper:  # not a hurray.Tensor: only its __hurray__ matters
        def __hurray__(self, stream=None):
            return t.__hurray__(stream)

    assert hurray.from_hurray(Wrapper()).tolist() == [1.0] * 4


def test_from_hurray_calls_the_dunder_once_without_a_stream():
    t = tensor()
    calls = []

    class Recorder:
        def __hurray__(self, *args, **kwargs):
            calls.append((args, kwargs))
            return t.__hurray__()

    hurray.from_hurray(Recorder())
    assert calls == [((), {})]


def test_two_instances_of_the_module_exchange_through_the_capsule():
    import importlib.util
    spec = importlib.util.find_spec("hurray._hurray")
    other = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(other)
    theirs = other.Tensor(bytearray(b"\x00\x00\x80?" * 4), other.float32, [4])
    mine = hurray.from_hurray(theirs)  # not this module's type: the full protocol
    assert type(mine) is hurray.Tensor and mine.tolist() == [1.0] * 4
    back = other.from_hurray(mine)
    assert type(back) is other.Tensor and back.buffer_address == theirs.buffer_address


def test_old_names_are_never_used_nor_accepted():
    assert not hasattr(tensor(), "__hurray_buffer__")
    assert not hasattr(hurray, "from_hurray_buffer")
    cap = tensor().__hurray__()
    old = abi.new_capsule(ctypes.addressof(abi.context(cap)), b"hurray_buffer")
    with pytest.raises(hurray.BufferError, match="named 'hurray_buffer', not 'hurray_tensor'"):
        hurray.from_hurray(abi.Returns(old))
    assert abi.name(cap) == b"hurray_tensor"  # the real capsule still owns its context


ALL_DTYPES = [hurray.dtype(name) for name in (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32",
    "float64", "complex64", "complex128", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2",
    "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu", "float8_e3m4", "float8_e4m3",
    "float8_e4m3b11fnuz", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn", "complex32",
    "int4", "uint4", "int2", "uint2", "uint1")]


@pytest.mark.parametrize("mode", ["strict", "relaxed"])
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
def test_present_on_every_dtype_in_both_modes_without_gating(mode, dtype):
    nbytes = (8 * 3 * dtype.bits + 7) // 8
    data = bytes(i * 37 % 251 for i in range(nbytes))
    with hurray.mode(mode):
        t = hurray.Tensor(data, dtype, [8, 3])
        assert hasattr(t, "__hurray__")
        copy = hurray.from_hurray(t)
        assert copy.dtype is dtype and copy.shape == (8, 3)
        assert copy.tobytes() == t.tobytes()
        # ADR-022's gate is the namespace, not this protocol
        assert hasattr(copy, "__array_namespace__") == (dtype.tier == 1 or mode == "relaxed")


def test_discovery_is_hasattr_and_there_is_no_capability_flag():
    assert hasattr(tensor(), "__hurray__") and not hasattr(object(), "__hurray__")
    flags = [name for name in dir(hurray)
             if re.search(r"native|protocol|hurray_buffer|capab", name, re.IGNORECASE)]
    assert flags == []


def test_documented_only_in_the_python_bindings_never_under_docs_spec():
    for path in (ROOT / "docs" / "spec").rglob("*"):
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            assert "__hurray__" not in text and "from_hurray" not in text, path
    bindings = (ROOT / "docs" / "impl" / "python-bindings.md").read_text(encoding="utf-8")
    assert "## Native Buffer Interchange Protocol" in bindings
    assert "Reserved — arrives with Layer 8c" not in bindings


def native_section():
    text = (ROOT / "docs" / "impl" / "python-bindings.md").read_text(encoding="utf-8")
    start = text.index("## Native Buffer Interchange Protocol")
    return text[start:text.index("\n## ", start + 1)]


def test_the_samples_of_the_bindings_documentation_run():
    blocks = re.findall(r"```python\n(.*?)```", native_section(), re.DOTALL)
    assert blocks
    for n, code in enumerate(blocks):
        exec(compile(code, f"<python-bindings.md: native sample {n}>", "exec"), {})


def test_capsule_is_named_hurray_tensor_and_the_consumer_renames_it_before_owning():
    producer = abi.Returns(tensor().__hurray__())
    assert abi.name(producer.capsule) == b"hurray_tensor"
    consumer = hurray.from_hurray(producer)
    assert abi.name(producer.capsule) == b"used_hurray_tensor"
    del producer  # the capsule goes; the consumer's context stays the consumer's
    gc.collect()
    assert consumer.tolist() == [0.0] * 4


def test_unconsumed_capsule_destructor_releases_the_context_once():
    t = tensor()
    base = sys.getrefcount(t)
    caps = [t.__hurray__() for _ in range(10)]
    assert sys.getrefcount(t) == base + 10  # each context's owner holds the source
    del caps
    assert sys.getrefcount(t) == base


def test_source_refcount_incremented_per_capsule_and_decremented_by_its_release():
    t = tensor()
    base = sys.getrefcount(t)
    cap = t.__hurray__()
    assert sys.getrefcount(t) == base + 1
    consumer = hurray.from_hurray(abi.Returns(cap))
    del cap
    assert sys.getrefcount(t) == base + 1  # now held by the consumer's context
    del consumer
    assert sys.getrefcount(t) == base


def test_consuming_tensor_releases_the_context_exactly_once_at_finalisation():
    t = tensor()
    base = sys.getrefcount(t)
    consumers = [hurray.from_hurray(t) for _ in range(5)]
    assert sys.getrefcount(t) == base + 5
    consumers.pop()
    assert sys.getrefcount(t) == base + 4
    del consumers
    gc.collect()
    assert sys.getrefcount(t) == base


def test_fan_out_gets_distinct_handles_per_consumer():
    t = hurray.Tensor.from_parts("per_channel", [
        tensor(bytes(12), hurray.int8, [4, 3]), tensor(bytes(16), hurray.float32, [4])])
    caps = [t.__hurray__() for _ in range(3)]
    seen = [abi.handles(cap) for cap in caps]
    flat = [h for handles in seen for h in handles]
    assert len(set(flat)) == len(flat) == 6  # no handle shared between capsules
    own = [b["address"] for b in t.buffers]
    for cap in caps:  # and every handle over the same memory
        lst = abi.context(cap).buffers.contents
        assert [lst.buffers[i].contents.data for i in range(lst.count)] == own


def test_one_capsule_carries_every_buffer_as_one_list():
    t = hurray.Tensor.from_parts("sparse_csr", [
        hurray.Tensor(struct.pack("4i", 0, 1, 1, 2), hurray.int32, [4]),
        hurray.Tensor(struct.pack("2i", 4, 0), hurray.int32, [2]),
        hurray.Tensor(bytes(8), hurray.float32, [2])], shape=[3, 5])
    ctx = abi.context(t.__hurray__())
    assert ctx.buffers.contents.count == 3
    assert [ctx.buffers.contents.roles[i] for i in range(3)] == [5, 4, 0]  # indptr, indices, values


def test_context_carries_the_producer_abi_version_4_in_its_frozen_head():
    ctx = abi.context(tensor().__hurray__())
    assert ctx.abi_version == hurray.C_ABI_VERSION == 4
    assert ctx.release is not None and ctx.tensor is not None


def test_consumer_reads_the_version_before_anything_else_and_leaves_the_context():
    """A context of another ABI version is refused from its head alone: past the version, the
    fields may mean anything (here they are garbage), and nothing reads them."""
    t = tensor()
    base = sys.getrefcount(t)
    cap = t.__hurray__()
    ctx = abi.context(cap)
    saved = (ctx.tensor, ctx.buffers)
    ctx.abi_version = 5
    ctx.tensor = 0xDEAD0  # would crash or fail validation if dereferenced
    ctx.buffers = None
    with pytest.raises(hurray.UnsupportedError,
                       match="producer C ABI version 5, consumer C ABI version 4") as info:
        hurray.from_hurray(abi.Returns(cap))
    assert isinstance(info.value, hurray.ABIError) and info.value.code == 12  # HURRAY_EABI
    assert abi.name(cap) == b"hurray_tensor"  # not consumed: still the producer's
    ctx.abi_version = 4
    ctx.tensor, ctx.buffers = saved
    del cap, ctx, saved  # the producer's destructor releases it
    assert sys.getrefcount(t) == base


# ============================================================================================
# Errors
# ============================================================================================


@pytest.mark.parametrize("obj", [42, None, object(), b"bytes", [1, 2]])
def test_an_object_without_the_dunder_is_a_type_error(obj):
    with pytest.raises(TypeError, match=r"from_hurray\(\) needs an object with __hurray__"):
        hurray.from_hurray(obj)


def test_an_attribute_error_inside_the_dunder_propagates_as_itself():
    class Broken:
        def __hurray__(self, stream=None):
            raise AttributeError("inside")

    with pytest.raises(AttributeError, match="inside"):
        hurray.from_hurray(Broken())


def test_a_dunder_returning_something_else_is_a_type_error():
    with pytest.raises(TypeError, match="__hurray__ returned int, not a PyCapsule"):
        hurray.from_hurray(abi.Returns(7))


def test_double_consumption_is_a_buffer_error():
    producer = abi.Returns(tensor().__hurray__())
    first = hurray.from_hurray(producer)
    with pytest.raises(hurray.BufferError, match="already consumed") as info:
        hurray.from_hurray(producer)
    assert isinstance(info.value, BufferError)  # builtins.BufferError too
    assert first.tolist() == [0.0] * 4


def test_a_capsule_of_another_name_is_a_buffer_error_and_released_by_its_own_producer():
    t = tensor()
    base = sys.getrefcount(t)
    with pytest.raises(hurray.BufferError, match="named 'dltensor', not 'hurray_tensor'"):
        hurray.from_hurray(abi.Returns(t.__dlpack__()))
    gc.collect()
    assert sys.getrefcount(t) == base  # the DLPack capsule's own deleter ran
    nameless = abi.new_capsule(0x1000, None)
    with pytest.raises(hurray.BufferError, match="named NULL, not 'hurray_tensor'"):
        hurray.from_hurray(abi.Returns(nameless))


def test_a_null_pointer_capsule_is_a_buffer_error():
    """PyCapsule_New refuses NULL, so no well-behaved producer can make such a capsule: this
    one is made by clearing the pointer of a real capsule in place (and restoring it, so that
    its destructor still releases the context)."""
    t = tensor()
    base = sys.getrefcount(t)
    cap = t.__hurray__()
    slot = abi.PointerSlot(cap)
    slot.clear()
    with pytest.raises(hurray.BufferError, match="holds a NULL pointer"):
        hurray.from_hurray(abi.Returns(cap))
    slot.restore()
    assert abi.name(cap) == b"hurray_tensor"
    del cap
    assert sys.getrefcount(t) == base


def test_a_released_context_is_refused_without_consuming_the_capsule():
    t = tensor()
    cap = t.__hurray__()
    ctx = abi.context(cap)
    release = ctx.release
    ctx.release = None  # what a released context looks like
    with pytest.raises(hurray.StateError, match="released"):
        hurray.from_hurray(abi.Returns(cap))
    assert abi.name(cap) == b"hurray_tensor"
    ctx.release = release


def test_a_tensor_that_does_not_fit_its_buffers_is_refused_unconsumed():
    t = tensor()
    base = sys.getrefcount(t)
    cap = t.__hurray__()
    buffer = abi.context(cap).buffers.contents.buffers[0].contents
    buffer.desc.byte_size = 8  # the 16 bytes of float32[4] no longer fit
    with pytest.raises(hurray.LayoutError, match="byte_size is 8"):
        hurray.from_hurray(abi.Returns(cap))
    assert abi.name(cap) == b"hurray_tensor"
    del cap, buffer
    assert sys.getrefcount(t) == base


def test_errors_keep_their_place_in_the_hierarchy():
    assert issubclass(hurray.BufferError, BufferError)
    assert issubclass(hurray.ABIError, hurray.UnsupportedError)
    assert issubclass(hurray.UnsupportedError, BufferError)
    assert not issubclass(hurray.UnsupportedError, hurray.BufferError)


def test_a_capsule_dropped_while_an_exception_propagates_keeps_the_exception():
    t = tensor()
    base = sys.getrefcount(t)

    def fail_holding_a_capsule():
        cap = t.__hurray__()  # noqa: F841  (dies during the unwinding)
        raise KeyError("kept")

    with pytest.raises(KeyError, match="kept"):
        fail_holding_a_capsule()
    gc.collect()
    assert sys.getrefcount(t) == base


# ============================================================================================
# Lifetime
# ============================================================================================


def test_consumers_outlive_their_producers():
    data = bytearray(b"\x00\x00\x80?\x00\x00\x00@\x00\x00@@\x00\x00\x80@")
    source = hurray.Tensor(data, hurray.float32, [4])
    alive = weakref.ref(source)
    first = hurray.from_hurray(source)
    second = hurray.from_hurray(first)
    del source, first
    gc.collect()
    assert alive() is not None  # kept by the chain of owners
    assert second.tolist() == [1.0, 2.0, 3.0, 4.0]
    data[0:4] = b"\x00\x00\xa0@"  # zero-copy all the way down
    assert second.tolist()[0] == 5.0
    del second
    gc.collect()
    assert alive() is None


def test_a_long_chain_of_consumers_is_freed_without_recursing_per_link():
    t = tensor()
    alive = weakref.ref(t)
    for _ in range(100_000):
        t = hurray.from_hurray(t)
    del t
    gc.collect()
    assert alive() is None


def test_a_reference_cycle_through_the_owner_is_collected():
    class Holder:
        pass

    holder = Holder()
    t = hurray.Tensor.from_address(0x1000, hurray.uint8, [64], device="cuda", owner=holder)
    holder.consumer = hurray.from_hurray(t)  # holder -> consumer -> t -> holder
    alive = weakref.ref(holder)
    del holder, t
    gc.collect()
    assert alive() is None


def test_readonly_and_writable_survive():
    ro = hurray.from_hurray(hurray.Tensor(bytes(16), hurray.float32, [4]))
    rw = hurray.from_hurray(hurray.Tensor(bytearray(16), hurray.float32, [4]))
    assert ro.readonly and not rw.readonly
    assert abi.context(hurray.Tensor(bytes(4), hurray.float32, [1]).__hurray__()).flags == 1
    memoryview(rw)[0] = 1.0
    assert rw.tolist()[0] == 1.0
    assert memoryview(ro).readonly and not memoryview(rw).readonly


# ============================================================================================
# Streams: DLPack's rules, through the same code as __dlpack__
# ============================================================================================


def device_tensor(device, memory_class="device", **kwargs):
    extra = {"peer_index": 1} if memory_class == "peer" else {}
    return hurray.Tensor.from_address(0x10_0000, hurray.float32, [4], device=device,
                                      memory_class=memory_class, **extra, **kwargs)


READY = {}
ON_DEFAULT = dict(sync_mode="stream", sync_handle=0x1)  # CUDA's legacy / HIP's null stream
ON_OTHER = dict(sync_mode="stream", sync_handle=0x5000)
EVENT = dict(sync_mode="event", sync_handle=0x7000)
TIMELINE = dict(sync_mode="timeline", sync_handle=0x9000, sync_value=42)
OK, BAD_STREAM, NOT_READY = None, hurray.InvalidArgumentError, hurray.BufferError

# (device, memory class, sync state, stream) -> what __dlpack__ and __hurray__ both do, None
# included (ADR-054). Data that is not ready on the stream is waited for where a device runtime
# can wait; Vulkan and Metal have none, and the CUDA rows assume no libcuda (the handles are
# made up), so those are refused.
STREAM_RULES = [
    # the CPU has no streams: None only, and the data must be ready
    ("cpu", "device", READY, None, OK),
    ("cpu", "device", READY, -1, BAD_STREAM),
    ("cpu", "device", READY, 0, BAD_STREAM),
    # devices with queues but no DLPack stream values: None or -1 (do not synchronise)
    ("vulkan", "device", READY, None, OK),
    ("vulkan", "device", READY, -1, OK),
    ("vulkan", "device", READY, 1, BAD_STREAM),
    ("vulkan", "device", TIMELINE, None, NOT_READY),
    ("vulkan", "device", TIMELINE, -1, OK),
    ("vulkan", "device", TIMELINE, 0, BAD_STREAM),
    ("metal", "unified", READY, None, OK),
    ("metal", "unified", READY, 2, BAD_STREAM),
    ("metal", "unified", EVENT, None, NOT_READY),
    ("metal", "unified", EVENT, -1, OK),
    # CUDA: None/1 legacy default, 2 per-thread default, > 2 a stream, -1 no sync; never 0
    ("cuda", "device", READY, None, OK),
    ("cuda", "device", READY, 2, OK),
    ("cuda", "device", READY, 0x7F00_1000, OK),
    ("cuda", "device", READY, 0, BAD_STREAM),
    ("cuda", "device", READY, -2, BAD_STREAM),
    ("cuda", "host", ON_DEFAULT, None, OK),
    ("cuda", "host", ON_DEFAULT, 1, OK),
    ("cuda", "host", ON_DEFAULT, 2, NOT_READY),
    ("cuda", "unified", ON_OTHER, None, NOT_READY),
    ("cuda", "unified", ON_OTHER, 0x5000, OK),
    ("cuda", "unified", ON_OTHER, -1, OK),
    ("cuda", "device", EVENT, None, NOT_READY),
    ("cuda", "device", EVENT, 0x7000, NOT_READY),  # an event is not a stream
    ("cuda", "device", EVENT, -1, OK),
    # ROCm: None/0 the null stream, > 2 a stream, -1 no sync; never 1 or 2
    ("rocm", "device", READY, 0, OK),
    ("rocm", "device", READY, 1, BAD_STREAM),
    ("rocm", "host", ON_DEFAULT, None, OK),
    ("rocm", "host", ON_DEFAULT, 0, OK),
    ("rocm", "host", ON_DEFAULT, 0x6000, NOT_READY),
    ("rocm", "host", EVENT, None, NOT_READY),
    ("rocm", "host", EVENT, -1, OK),
]


STREAMS = [None, -2, -1, 0, 1, 2, 3, 0x7F00_1000]

# DLPack's "Stream parameter semantics", by device family: the Hurray tag decides, whatever
# the memory class (CUDA pinned host and managed memory are CUDA's; ROCm host memory ROCm's).
CUDA_STREAMS = {None, -1, 1, 2, 3, 0x7F00_1000}  # 0 is ambiguous, -2 means nothing
ROCM_STREAMS = {None, -1, 0, 3, 0x7F00_1000}  # 1 and 2 are CUDA's names
NO_STREAMS = {None}  # the CPU
QUEUES = {None, -1}  # devices whose queues DLPack gives no stream values


@pytest.mark.parametrize("device,memory_class,accepted", [
    ("cpu", "device", NO_STREAMS), ("vulkan", "device", QUEUES),
    ("metal", "unified", QUEUES), ("cuda", "device", CUDA_STREAMS),
    ("cuda", "host", CUDA_STREAMS), ("cuda", "unified", CUDA_STREAMS),
    ("rocm", "device", ROCM_STREAMS), ("rocm", "host", ROCM_STREAMS),
])
@pytest.mark.parametrize("stream", STREAMS)
def test_stream_values_are_judged_exactly_as_by_dlpack(device, memory_class, accepted, stream):
    t = hurray.Tensor(bytearray(16), hurray.float32, [4]) if device == "cpu" else \
        device_tensor(device, memory_class)
    calls = [lambda: t.__hurray__(stream=stream),
             lambda: t.__dlpack__(stream=stream, max_version=(1, 0))]
    for call in calls:
        if stream in accepted:
            assert type(call()).__name__ == "PyCapsule"
        else:
            with pytest.raises(hurray.InvalidArgumentError, match="stream") as info:
                call()
            assert type(info.value) is hurray.InvalidArgumentError


class NoSync:
    """A consumer's view of `t` that takes its data unsynchronised: __hurray__(stream=-1)."""

    def __init__(self, t):
        self.t = t

    def __hurray__(self, stream=None):
        return self.t.__hurray__(stream=-1)


def outcome(call):
    try:
        call()
        return OK
    except hurray.HurrayError as exc:
        return type(exc)


@MADE_UP_CUDA_HANDLES
@pytest.mark.parametrize("device,memory_class,sync,stream,expected", STREAM_RULES)
def test_stream_rules_are_dlpacks_in_both_protocols(device, memory_class, sync, stream, expected):
    t = hurray.Tensor(bytearray(16), hurray.float32, [4]) if device == "cpu" else \
        device_tensor(device, memory_class, **sync)
    assert outcome(lambda: t.__dlpack__(stream=stream, max_version=(1, 0))) is expected
    assert outcome(lambda: t.__hurray__(stream=stream)) is expected
    if stream is None:  # passing nothing is passing None
        assert outcome(t.__dlpack__) is outcome(t.__hurray__) is expected
        assert outcome(lambda: hurray.from_hurray(t)) is expected
    if expected is OK and stream == -1:  # not synchronised: the sync state travels as it is
        copy = hurray.from_hurray(NoSync(t))
        assert copy.sync_mode == sync.get("sync_mode", "ready")
        assert copy.buffers[0]["sync_handle"] == sync.get("sync_handle", 0)


@pytest.mark.parametrize("device,memory_class,ok,bad", [
    ("cuda", "peer", [None, -1, 1, 2, 0x7F00_1000], [0, -2]),
    ("rocm", "unified", [None, -1, 0, 0x7F00_1000], [1, 2, -2]),
    ("rocm", "peer", [None, -1, 0, 0x7F00_1000], [1, 2]),
    (0xF3, "device", [None, -1], [0, 1, 0x7F00_1000]),
])
def test_stream_rules_cover_memory_dlpack_cannot_carry(device, memory_class, ok, bad):
    if isinstance(device, int):
        hurray.register_device(device, "native_streams")
    try:
        t = device_tensor(device, memory_class)
        with pytest.raises(hurray.UnsupportedError):
            t.__dlpack__(max_version=(1, 0))  # DLPack has no form for it
        for stream in ok:
            t.__hurray__(stream=stream)
        for stream in bad:
            with pytest.raises(ValueError, match="stream"):
                t.__hurray__(stream=stream)
    finally:
        if isinstance(device, int):
            hurray.unregister_device(device)


@MADE_UP_CUDA_HANDLES
def test_a_named_stream_must_see_the_data_ready_else_buffer_error():
    t = device_tensor("cuda", sync_mode="stream", sync_handle=0x5000)
    for stream in (1, 2, 0x6000):
        with pytest.raises(hurray.BufferError, match="not ready on the consumer's stream"):
            t.__hurray__(stream=stream)
    t.__hurray__(stream=-1)  # the consumer synchronises itself
    t.__hurray__(stream=0x5000)  # the very stream the work is on
    e = device_tensor("cuda", sync_mode="event", sync_handle=0x7000)
    with pytest.raises(hurray.BufferError):
        e.__hurray__(stream=0x7000)  # an event is not a stream
    e.__hurray__(stream=-1)


@pytest.mark.parametrize("device,sync", [
    ("cuda", dict(sync_mode="stream", sync_handle=0x5000)),
    ("cuda", dict(sync_mode="event", sync_handle=0x7000)),
    ("vulkan", dict(sync_mode="timeline", sync_handle=0x9000, sync_value=42)),
    ("rocm", dict(sync_mode="event", sync_handle=0xA000)),
])
@MADE_UP_CUDA_HANDLES
def test_with_stream_minus_one_the_sync_state_travels_for_the_consumer_to_honour(device, sync):
    """DLPack can only hand over data that is ready (and cannot carry a timeline at all); with
    stream=-1 the native capsule says what to wait for. Without it the producer would have to
    wait, and no runtime here can: the error names stream=-1."""
    t = device_tensor(device, **sync)
    copy = hurray.from_hurray(NoSync(t))
    assert copy.sync_mode == sync["sync_mode"]
    assert copy.buffers[0]["sync_handle"] == sync["sync_handle"]
    assert copy.buffers[0]["sync_value"] == sync.get("sync_value", 0)
    with pytest.raises(hurray.BufferError, match="stream=-1"):
        hurray.from_hurray(t)


def test_stream_argument_is_positional_or_keyword():
    t = device_tensor("cuda")
    t.__hurray__(1)
    t.__hurray__(stream=1)
    with pytest.raises(TypeError, match="at most 1 positional"):
        t.__hurray__(1, 2)
    with pytest.raises(TypeError, match="unexpected keyword argument 'strem'"):
        t.__hurray__(strem=1)
    with pytest.raises(TypeError, match="stream must be an integer"):
        t.__hurray__(stream="1")
