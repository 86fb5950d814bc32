"""Everything a tensor is survives the native protocol: device tag, memory class, sync state,
dtype, shape, strides, byte offset, read-only, and every layout with all its buffers. Built
with Tensor.from_parts and read back with Tensor.parts / children / buffers."""

import gc
import struct
import weakref

import pytest

import hurray

f32 = hurray.float32


def pack(fmt, *values):
    return struct.pack(fmt, *values)


def same(a, b):
    """Two tensors that describe exactly the same memory the same way."""
    assert (a.layout, a.dtype, a.shape, a.axis, a.block_size, a.coalesced, a.readonly) == \
           (b.layout, b.dtype, b.shape, b.axis, b.block_size, b.coalesced, b.readonly)
    assert a.buffers == b.buffers  # every field of every buffer, addresses included
    assert len(a.parts) == len(b.parts)
    for p, q in zip(a.parts, b.parts):
        assert (p.dtype, p.shape, p.strides, p.byte_offset, p.buffer_address) == \
               (q.dtype, q.shape, q.strides, q.byte_offset, q.buffer_address)
    assert a.children.keys() == b.children.keys()
    for name in a.children:
        same(a.children[name], b.children[name])


def round_trip(t):
    """Data that is not ready crosses with its sync state only when the consumer says it
    synchronises (stream=-1); no device runtime here could wait for it (ADR-054)."""
    stream = None if all(b["sync_handle"] == 0 for b in t.buffers) else -1
    copy = hurray.from_hurray(t if stream is None else Wrap(t, stream))
    same(t, copy)
    through_capsule = hurray.from_hurray(Wrap(t, stream))  # the full protocol, capsule, checks
    same(t, through_capsule)
    return copy


class Wrap:
    """An object whose __hurray__ asks `t` for `stream` when the consumer passes none."""

    def __init__(self, t, stream=None):
        self.t, self.stream = t, stream

    def __hurray__(self, stream=None):
        return self.t.__hurray__(self.stream if stream is None else stream)


# ============================================================================================
# Every layout
# ============================================================================================


def per_channel(zero_points=True):
    values = hurray.Tensor(bytes(range(12)), hurray.int8, [4, 3])
    scales = hurray.Tensor(pack("4f", 0.5, 1, 1.5, 2), f32, [4])
    parts = [values, scales]
    if zero_points:
        parts.append(hurray.Tensor(bytes([0, 1, 2, 3]), hurray.int8, [4]))
    return hurray.Tensor.from_parts("per_channel", parts, axis=0)


def block():
    values = hurray.Tensor(bytes(range(16, 24)), hurray.dtype.uint4, [2, 8])
    scales = hurray.Tensor(pack("4e", 0.25, 0.5, 0.75, 1), hurray.dtype.float16, [2, 2])
    mins = hurray.Tensor(pack("4f", -1, -2, -3, -4), f32, [2, 2])
    return hurray.Tensor.from_parts("block", [values, scales, mins], axis=1, block_size=4)


def sparse_coo():
    indices = hurray.Tensor(pack("6q", 0, 1, 2, 1, 3, 0), hurray.int64, [2, 3])
    values = hurray.Tensor(pack("3f", 7, 8, 9), f32, [3])
    return hurray.Tensor.from_parts("sparse_coo", [indices, values], shape=[3, 4],
                                    coalesced=True)


def sparse_csr():
    indptr = hurray.Tensor(pack("4i", 0, 1, 1, 3), hurray.int32, [4])
    indices = hurray.Tensor(pack("3i", 2, 0, 3), hurray.int32, [3])
    values = hurray.Tensor(pack("3f", 7, 8, 9), f32, [3])
    return hurray.Tensor.from_parts("sparse_csr", [indptr, indices, values], shape=[3, 4])


def paged():
    pages = hurray.Tensor(bytes(4 * 2 * 4 * 2), hurray.dtype.bfloat16, [4, 2, 4])
    table = hurray.Tensor(pack("4i", 3, 1, 0, 2), hurray.int32, [2, 2])
    return hurray.Tensor.from_parts("paged", [pages, table], shape=[2, 3, 4], axis=1,
                                    block_size=2)


def composite():
    bias = hurray.Tensor(pack("4f", 0.125, 0.25, 0.375, 0.5), f32, [4])
    inner = hurray.Tensor.from_parts("composite", children={"csr": sparse_csr()})
    return hurray.Tensor.from_parts("composite", children={
        "weight": per_channel(), "bias": bias, "nested": inner})


LAYOUTS = {"dense": lambda: hurray.Tensor(pack("6f", 1, 2, 3, 4, 5, 6), f32, [2, 3]),
           "per_channel": per_channel, "per_channel_2": lambda: per_channel(False),
           "block": block, "sparse_coo": sparse_coo, "sparse_csr": sparse_csr, "paged": paged,
           "composite": composite}


@pytest.mark.parametrize("make", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_every_layout_round_trips_with_all_its_buffers(make):
    t = make()
    copy = round_trip(t)
    for p, q in zip(t.parts, copy.parts):
        assert p.tobytes() == q.tobytes()


def test_per_channel_parts_and_roles():
    t = per_channel()
    assert t.layout == "per_channel" and t.dtype is hurray.int8 and t.shape == (4, 3)
    assert [b["role"] for b in t.buffers] == ["values", "scales", "zero_points"]
    copy = hurray.from_hurray(t)
    assert copy.parts[1].tolist() == [0.5, 1.0, 1.5, 2.0]
    assert copy.parts[2].tolist() == [0, 1, 2, 3]
    assert copy.parts[0].tolist() == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]


def test_block_keeps_axis_and_block_size():
    copy = hurray.from_hurray(block())
    assert (copy.axis, copy.block_size, copy.dtype) == (1, 4, hurray.dtype.uint4)
    assert [b["role"] for b in copy.buffers] == ["values", "scales", "mins"]
    assert copy.parts[0].tobytes() == bytes(range(16, 24))


def test_sparse_coo_keeps_coalesced():
    copy = hurray.from_hurray(sparse_coo())
    assert copy.coalesced and copy.shape == (3, 4)
    assert copy.parts[0].tolist() == [[0, 1, 2], [1, 3, 0]] and copy.parts[1].tolist() == [7, 8, 9]
    assert not hurray.from_hurray(hurray.Tensor.from_parts("sparse_coo", sparse_coo().parts,
                                                           shape=[3, 4])).coalesced


def test_sparse_csr_and_paged_parts():
    csr = hurray.from_hurray(sparse_csr())
    assert [b["role"] for b in csr.buffers] == ["indptr", "indices", "values"]
    assert csr.parts[0].tolist() == [0, 1, 1, 3]
    kv = hurray.from_hurray(paged())
    assert [b["role"] for b in kv.buffers] == ["pages", "page_table"]
    assert (kv.axis, kv.block_size, kv.shape) == (1, 2, (2, 3, 4))
    assert kv.parts[1].tolist() == [[3, 1], [0, 2]]


def test_composite_children_round_trip_nested():
    t = composite()
    assert t.dtype is None and t.shape == () and t.parts == ()
    assert list(t.children) == ["weight", "bias", "nested"]
    assert len(t.buffers) == 3 + 1 + 3
    copy = round_trip(t)
    assert copy.children["bias"].tolist() == [0.125, 0.25, 0.375, 0.5]
    nested = copy.children["nested"].children["csr"]
    assert nested.layout == "sparse_csr" and nested.parts[2].tolist() == [7, 8, 9]
    assert copy.children["weight"].parts[1].tolist() == [0.5, 1.0, 1.5, 2.0]


def test_children_accept_pairs_in_order():
    a, b = per_channel(), hurray.Tensor(bytes(4), f32, [1])
    t = hurray.Tensor.from_parts("composite", children=[("z", a), ("a", b)])
    assert list(t.children) == ["z", "a"]


def test_parts_of_a_dense_tensor_is_itself_and_from_parts_inverts_parts():
    t = hurray.Tensor(bytearray(pack("6f", 1, 2, 3, 4, 5, 6)), f32, [3, 2], strides=[1, 3])
    (view,) = t.parts
    same(t, view)
    for make in LAYOUTS.values():
        u = make()
        if u.layout == "composite":
            rebuilt = hurray.Tensor.from_parts("composite", children=u.children)
        else:
            rebuilt = hurray.Tensor.from_parts(u.layout, u.parts, dtype=u.dtype, shape=u.shape,
                                               axis=u.axis, block_size=u.block_size,
                                               coalesced=u.coalesced)
        assert rebuilt.layout == u.layout
        for p, q in zip(rebuilt.parts, u.parts):
            assert p.tobytes() == q.tobytes() and p.buffer_address == q.buffer_address


def test_views_keep_their_tensor_alive():
    t = per_channel()
    alive = weakref.ref(t)
    scales = t.parts[1]
    del t
    gc.collect()
    assert alive() is not None and scales.tolist() == [0.5, 1.0, 1.5, 2.0]
    del scales
    gc.collect()
    assert alive() is None


# ============================================================================================
# from_parts: what hurray-core refuses
# ============================================================================================


def test_from_parts_refusals():
    values = hurray.Tensor(bytes(12), hurray.int8, [4, 3])
    with pytest.raises(hurray.LayoutError, match="expected a floating-point dtype"):
        hurray.Tensor.from_parts("per_channel", [values, hurray.Tensor(bytes(4), hurray.int8, [4])])
    with pytest.raises(hurray.LayoutError, match="shape is"):
        hurray.Tensor.from_parts("per_channel", [values, hurray.Tensor(bytes(12), f32, [3])])
    with pytest.raises(hurray.LayoutError, match="parts are dense"):
        hurray.Tensor.from_parts("dense", [per_channel()])
    with pytest.raises(hurray.LayoutError, match="layout 'tiled' is unknown"):
        hurray.Tensor.from_parts("tiled", [values])
    with pytest.raises(TypeError, match="needs shape= for a sparse_csr tensor"):
        hurray.Tensor.from_parts("sparse_csr", sparse_csr().parts)
    with pytest.raises(TypeError, match="part 1 must be a hurray.Tensor, not bytes"):
        hurray.Tensor.from_parts("per_channel", [values, b"x"])
    with pytest.raises(hurray.LimitError, match="HURRAY_MAX_PARTS"):
        hurray.Tensor.from_parts("per_channel", [values] * 4)
    with pytest.raises(hurray.LayoutError, match="at least one child"):
        hurray.Tensor.from_parts("composite", children={})
    with pytest.raises(hurray.LayoutError, match="not unique"):
        hurray.Tensor.from_parts("composite", children=[("a", values), ("a", values)])
    with pytest.raises(TypeError, match=r"child 0 must be a \(str, hurray.Tensor\) pair"):
        hurray.Tensor.from_parts("composite", children=[values])
    with pytest.raises(hurray.InvalidArgumentError, match="contains a NUL"):
        hurray.Tensor.from_parts("composite", children={"a\0b": values})
    # the index parts are read (CPU memory): out-of-range indices are refused
    bad = hurray.Tensor(pack("4i", 0, 1, 1, 3), hurray.int32, [4])
    with pytest.raises(hurray.LayoutError, match="outside"):
        hurray.Tensor.from_parts("sparse_csr", [bad, hurray.Tensor(pack("3i", 2, 0, 9),
                                                                   hurray.int32, [3]),
                                                hurray.Tensor(bytes(12), f32, [3])],
                                 shape=[3, 4])


def test_from_parts_is_read_only_if_any_part_is():
    rw = hurray.Tensor(bytearray(12), hurray.int8, [4, 3])
    ro = hurray.Tensor(bytes(16), f32, [4])
    assert hurray.Tensor.from_parts("per_channel", [rw, ro]).readonly
    assert not hurray.Tensor.from_parts("per_channel", [
        rw, hurray.Tensor(bytearray(16), f32, [4])]).readonly


# ============================================================================================
# Devices, memory classes, sync state: DLPack's gaps included
# ============================================================================================

NAMED = ["cuda", "rocm", "metal", "vulkan", "webgpu", "hexagon", "level_zero", "opencl"]
CLASSES = ["device", "host", "unified", "peer"]


def device_tensor(device, memory_class="device", dtype=f32, shape=(4,), **kwargs):
    extra = {"peer_index": 3} if memory_class == "peer" else {}
    return hurray.Tensor.from_address(0x10_0000, dtype, shape, device=device,
                                      memory_class=memory_class, **extra, **kwargs)


# buffer-protocol.md §2.6: the memory classes and sync modes a device does not have.
ABSENT_CLASSES = {("vulkan", "unified"), ("webgpu", "host"), ("webgpu", "unified"),
                  ("webgpu", "peer"), ("hexagon", "host"), ("hexagon", "unified"),
                  ("hexagon", "peer"), ("opencl", "peer")}
ABSENT_SYNCS = {("rocm", "timeline"), ("level_zero", "timeline"), ("opencl", "timeline"),
                ("webgpu", "event"), ("webgpu", "timeline"), ("hexagon", "stream"),
                ("hexagon", "event"), ("hexagon", "timeline")}


@pytest.mark.parametrize("memory_class", CLASSES)
@pytest.mark.parametrize("device", NAMED)
def test_every_named_device_and_memory_class_survives(device, memory_class):
    if (device, memory_class) in ABSENT_CLASSES:
        with pytest.raises(hurray.UnsupportedError, match=f"device {device} has no "
                           f"{memory_class} memory"):
            device_tensor((device, 2), memory_class)
        return
    t = device_tensor((device, 2), memory_class)
    copy = round_trip(t)
    assert copy.device == hurray.Device(device, 2) and copy.memory_class == memory_class
    assert copy.buffers[0]["peer_index"] == (3 if memory_class == "peer" else 0)


@pytest.mark.parametrize("device,memory_class", [("rocm", "unified"), ("cuda", "peer"),
                                                 ("rocm", "peer"), ("level_zero", "peer")])
def test_what_dlpack_cannot_carry_goes_through_the_native_protocol(device, memory_class):
    t = device_tensor(device, memory_class)
    with pytest.raises(hurray.UnsupportedError):
        t.__dlpack_device__()
    copy = hurray.from_hurray(t)
    assert (copy.device.name, copy.memory_class) == (device, memory_class)


def test_a_registered_private_tag_survives():
    hurray.register_device(0xF7, "native_npu")
    try:
        t = device_tensor((0xF7, 5), "unified", sync_mode="event", sync_handle=0xBEEF)
        with pytest.raises(hurray.UnsupportedError):
            t.__dlpack__()
        copy = round_trip(t)
        assert copy.device == hurray.Device(0xF7, 5) and copy.device.name == "native_npu"
        assert (copy.memory_class, copy.sync_mode) == ("unified", "event")
    finally:
        hurray.unregister_device(0xF7)


def test_a_private_tag_unregistered_since_cannot_be_shared():
    hurray.register_device(0xF8, "native_gone")
    t = device_tensor(0xF8)
    hurray.unregister_device(0xF8)
    with pytest.raises(hurray.DescriptorError, match="0xF8"):
        t.__hurray__()
    with pytest.raises(hurray.DescriptorError):
        hurray.from_hurray(t)


@pytest.mark.parametrize("sync", [
    dict(sync_mode="ready"),
    dict(sync_mode="stream", sync_handle=0x1),
    dict(sync_mode="stream", sync_handle=0x7F00_2000),
    dict(sync_mode="event", sync_handle=0x7F00_3000),
    dict(sync_mode="timeline", sync_handle=0x7F00_4000, sync_value=2**63 + 5),
])
@pytest.mark.parametrize("device", NAMED)
def test_sync_mode_handle_and_value_survive(device, sync):
    if (device, sync["sync_mode"]) in ABSENT_SYNCS:
        with pytest.raises(hurray.UnsupportedError, match=f"device {device} has no "
                           f"{sync['sync_mode']} synchronisation"):
            device_tensor(device, **sync)
        return
    t = device_tensor(device, **sync)
    copy = round_trip(t)
    assert copy.sync_mode == sync["sync_mode"]
    assert copy.buffers[0]["sync_handle"] == sync.get("sync_handle", 0)
    assert copy.buffers[0]["sync_value"] == sync.get("sync_value", 0)


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn", "float6_e2m3fn",
                                   "float4_e2m1fn", "complex32", "int4", "uint2", "uint1"])
def test_tier_2_and_3_on_devices_in_strict_mode(dtype):
    assert hurray.get_mode() == "strict"
    t = device_tensor("cuda", "unified", dtype=hurray.dtype(dtype), shape=(16, 8))
    copy = round_trip(t)
    assert copy.dtype is hurray.dtype(dtype) and not hasattr(copy, "__array_namespace__")


@pytest.mark.parametrize("shape,strides,byte_offset", [
    ([3, 2], None, 0), ([3, 2], None, 12), ([3, 2], [1, 3], 0), ([3, 2], [-2, 1], 16),
    ([3, 2], [0, 1], 4), ([2, 2], [5, 1], 0), ([0, 2], None, 0),
])
def test_shape_strides_and_byte_offset_survive(shape, strides, byte_offset):
    data = bytearray(pack("12f", *range(12)))
    if strides is None:  # contiguous: exactly the bytes the elements need
        data = data[:byte_offset + 4 * shape[0] * shape[1]]
    t = hurray.Tensor(data, f32, shape, strides=strides, byte_offset=byte_offset)
    copy = round_trip(t)
    assert (copy.shape, copy.strides, copy.byte_offset) == (t.shape, t.strides, t.byte_offset)
    assert copy.tolist() == t.tolist()


def test_handle_form_devices_keep_their_object_and_offset():
    # Metal, WebGPU, OpenCL: data is the buffer object, kept as given, moved only by offsets
    t = hurray.Tensor.from_address(0x1234_5679, f32, [4], device="metal", byte_offset=32,
                                   byte_size=64)
    copy = round_trip(t)
    assert copy.buffer_address == 0x1234_5679 and copy.byte_offset == 32
