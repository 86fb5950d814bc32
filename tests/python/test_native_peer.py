"""hurray-python and a second extension built separately against the public header only
(tests/native_peer/peer.c, with its own copy of hurray-core), exchanging tensors both ways
through the native protocol; and a build of that peer for C ABI version 5, which neither side
may read. The peer counts every call of its release callbacks, so "exactly once" is
measured, not assumed. The fixtures peer_ext and peer_v5 (conftest.py) build it."""

import gc
import itertools
import struct
import sys
import threading
import weakref

import pytest

import hurray
import native_abi as abi
import test_native_layouts as layouts

KINDS = ["dense", "strided", "int4", "per_channel", "block", "sparse_coo", "sparse_csr",
         "paged", "composite", "mixed"]
ROLES = ["values", "scales", "zero_points", "mins", "indices", "indptr", "pages",
         "page_table", "mixed"]
LAYOUTS = ["dense", "per_channel", "block", "sparse_coo", "sparse_csr", "paged", "composite"]
MEMORY = ["device", "host", "unified", "peer"]
SYNC = ["ready", "stream", "event", "timeline"]


class Counts:
    """Release counts of a peer, as differences from when this was made."""

    def __init__(self, peer):
        self.peer = peer
        self.start = peer.released()

    def __call__(self):
        now = self.peer.released()
        return {key: now[key] - self.start[key] for key in now}


# ============================================================================================
# peer -> hurray
# ============================================================================================


@pytest.mark.parametrize("kind", KINDS)
def test_hurray_consumes_every_layout_from_the_peer_and_releases_it_once(peer_ext, kind):
    counts = Counts(peer_ext)
    t = hurray.from_hurray(peer_ext.make(kind))
    made = counts()
    assert made["contexts_made"] == 1 and made["buffers_made"] == len(t.buffers)
    assert made["buffers_released"] == made["owners_released"] == 0  # hurray owns it now
    # what the peer itself reads from the same tensor, made again
    expected = peer_ext.consume(peer_ext.make(kind)).summary
    assert [b["role"] for b in t.buffers] == [ROLES[b["role"]] for b in expected["buffers"]]
    assert [b["byte_size"] for b in t.buffers] == [b["byte_size"] for b in expected["buffers"]]
    holds(t, expected["tensor"], expected["buffers"])
    del t
    gc.collect()
    after = counts()
    assert after["contexts_made"] == after["owners_released"] == 2
    assert after["buffers_released"] == after["buffers_made"]  # every buffer, exactly once
    assert after["capsules_released"] == 0  # both capsules were consumed


def holds(t, desc, buffers):
    """`t` is what the peer's summary describes: layout, dtype, shape, parameters, and in each
    part the very bytes the peer wrote."""
    assert (LAYOUTS[desc["layout"]], t.ndim, t.shape, t.axis, t.block_size) == \
           (t.layout, desc["ndim"], desc["shape"], desc["axis"], desc["block_size"])
    assert t.coalesced == bool(desc["flags"] & 1)
    assert (t.dtype.code if t.dtype is not None else 0) == desc["dtype"]
    assert len(t.parts) == len(desc["parts"])
    for view, part in zip(t.parts, desc["parts"]):
        assert (view.dtype.code, view.shape, view.byte_offset) == \
               (part["dtype"], part["shape"], part["byte_offset"])
        assert view.tobytes() == elements(buffers[part["buffer"]]["data"], part, view)
    assert list(t.children) == [name for name, _ in desc["children"]]
    for (name, child) in desc["children"]:
        holds(t.children[name], child, buffers)


def elements(data, part, view):
    """The bytes of a part's elements in C order, read from the peer's copy of its buffer."""
    start = part["byte_offset"]
    if part["strides"] is None:
        return data[start:start + view.nbytes]
    itemsize = view.dtype.itemsize
    out = bytearray()
    for index in itertools.product(*map(range, part["shape"])):
        at = start + sum(i * s for i, s in zip(index, part["strides"])) * itemsize
        out += data[at:at + itemsize]
    return bytes(out)


def test_peer_dense_values_read_back(peer_ext):
    assert hurray.from_hurray(peer_ext.make("dense")).tolist() == [[1, 2, 3], [4, 5, 6]]
    strided = hurray.from_hurray(peer_ext.make("strided"))
    assert (strided.strides, strided.byte_offset) == ((1, 3), 8)
    assert strided.tolist() == [[1, 4], [2, 5], [3, 6]]
    pc = hurray.from_hurray(peer_ext.make("per_channel"))
    assert pc.parts[1].tolist() == [0.5, 1.0, 1.5, 2.0]
    coo = hurray.from_hurray(peer_ext.make("sparse_coo"))
    assert coo.coalesced and coo.parts[0].tolist() == [[0, 1, 2], [1, 3, 0]]


def test_a_capsule_dropped_unconsumed_is_released_once_by_the_peers_destructor(peer_ext):
    counts = Counts(peer_ext)
    producer = peer_ext.make("per_channel")
    capsules = [producer.__hurray__() for _ in range(50)]
    assert counts()["capsules_released"] == 0
    del capsules
    got = counts()
    assert got == {"contexts_made": 50, "buffers_made": 150, "buffers_released": 150,
                   "owners_released": 50, "capsules_released": 50}


def test_the_producer_is_kept_alive_by_the_consumer(peer_ext):
    producer = peer_ext.make("dense")
    base = sys.getrefcount(producer)
    t = hurray.from_hurray(producer)
    assert sys.getrefcount(producer) == base + 1  # the context's owner
    del producer
    gc.collect()
    assert t.tolist() == [[1, 2, 3], [4, 5, 6]]  # consumer outlives the producer object


def test_peer_contexts_released_on_another_thread(peer_ext):
    counts = Counts(peer_ext)
    tensors = [hurray.from_hurray(peer_ext.make("sparse_csr")) for _ in range(20)]

    def drop():
        tensors.clear()  # the owner release takes the GIL itself

    thread = threading.Thread(target=drop)
    thread.start()
    thread.join()
    gc.collect()
    got = counts()
    assert got["buffers_released"] == 60 and got["owners_released"] == 20


def test_a_context_released_on_a_thread_python_never_saw(peer_ext):
    t = hurray.Tensor(bytearray(16), hurray.float32, [4])
    probe = weakref.ref(t)
    address, release = abi.take(t.__hurray__())
    del t
    gc.collect()
    assert probe() is not None  # the context's owner holds it
    peer_ext.run_on_thread(release, address)  # the owner release must make a thread state
    gc.collect()
    assert probe() is None


class NoSync:
    """`t` as a consumer that synchronises itself sees it: __hurray__(stream=-1)."""

    def __init__(self, t):
        self.t = t

    def __hurray__(self, stream=None):
        return self.t.__hurray__(stream=-1)


@pytest.mark.parametrize("tag,memory_class,sync_mode,handle,value", [
    (2, 2, 2, 0x7000, 0),      # ROCm UNIFIED, an event
    (1, 3, 1, 0x5000, 0),      # CUDA PEER, a stream
    (4, 1, 3, 0x9000, 77),     # Vulkan HOST, a timeline
    (0xF4, 0, 0, 0, 0),        # a private tag both sides registered
])
def test_device_memory_class_and_sync_state_cross_both_ways(peer_ext, tag, memory_class,
                                                           sync_mode, handle, value):
    private = tag >= 0xF0
    if private:
        hurray.register_device(tag, "peer_npu")
        peer_ext.register_device(tag, "peer_npu")
    try:
        producer = peer_ext.make("per_channel", device_tag=tag, memory_class=memory_class,
                                 sync_mode=sync_mode, sync_handle=handle, sync_value=value,
                                 device_id=3, peer_device_id=5 if memory_class == 3 else 0)
        t = hurray.from_hurray(producer)
        for b in t.buffers:
            assert (b["device"].tag, b["device"].index) == (tag, 3)
            assert (b["memory_class"], b["sync_mode"]) == (MEMORY[memory_class], SYNC[sync_mode])
            assert (b["sync_handle"], b["sync_value"]) == (handle, value)
            assert b["peer_index"] == (5 if memory_class == 3 else 0)
        # and back: hurray -> peer, the very same descriptors; a consumer taking pending data
        # with its sync state asks for stream=-1 (ADR-054)
        back = peer_ext.consume(NoSync(t)).summary
        for mine, theirs in zip(t.buffers, back["buffers"]):
            assert (theirs["device_tag"], theirs["memory_class"], theirs["sync_mode"]) == \
                   (tag, memory_class, sync_mode)
            assert (theirs["sync_handle"], theirs["sync_value"]) == (handle, value)
            assert theirs["address"] == mine["address"]
    finally:
        if private:
            hurray.unregister_device(tag)


def test_a_private_tag_only_the_producer_registered_is_refused(peer_ext):
    peer_ext.register_device(0xF5, "peer_only")
    counts = Counts(peer_ext)
    with pytest.raises(hurray.DescriptorError, match="0xF5"):
        hurray.from_hurray(peer_ext.make("dense", device_tag=0xF5))
    gc.collect()
    assert counts()["capsules_released"] == 1  # refused unconsumed: the peer released it


# ============================================================================================
# hurray -> peer
# ============================================================================================


def test_the_peer_consumes_hurray_tensors_of_every_layout(peer_ext):
    for name, make in layouts.LAYOUTS.items():
        t = make()
        base = sys.getrefcount(t)
        received = peer_ext.consume(t)
        summary = received.summary
        assert summary["abi_version"] == 4
        assert LAYOUTS[summary["tensor"]["layout"]] == t.layout, name
        assert [ROLES[b["role"]] for b in summary["buffers"]] == [b["role"] for b in t.buffers]
        assert [b["address"] for b in summary["buffers"]] == [b["address"] for b in t.buffers]
        assert sys.getrefcount(t) == base + 1  # the peer holds hurray's owner reference
        assert received.release() and not received.release()  # released exactly once
        assert sys.getrefcount(t) == base


def test_the_peer_reads_hurray_bytes_and_descriptor(peer_ext):
    raw = struct.pack("6f", 1, 2, 3, 4, 5, 6)
    t = hurray.Tensor(memoryview(bytearray(b"\0" * 8 + raw))[8:], hurray.float32, [3, 2],
                      strides=[1, 3])
    summary = peer_ext.consume(t).summary
    (part,) = summary["tensor"]["parts"]
    assert part["shape"] == (3, 2) and part["strides"] == (1, 3)
    assert part["byte_offset"] == t.byte_offset
    data = summary["buffers"][0]["data"]
    assert data[part["byte_offset"]:part["byte_offset"] + 24] == raw


def test_hurray_tensors_outlive_nothing_they_lent(peer_ext):
    """The peer's Received keeps hurray's source alive after every Python name is gone."""
    t = hurray.Tensor(bytearray(16), hurray.float32, [4])
    alive = weakref.ref(t)
    received = peer_ext.consume(t)
    del t
    gc.collect()
    assert alive() is not None
    del received
    gc.collect()
    assert alive() is None


# ============================================================================================
# C ABI version 5: refused both ways, the capsule left to its producer
# ============================================================================================


def test_hurray_refuses_a_v5_capsule_naming_both_versions_and_the_peer_releases_it_once(peer_v5):
    counts = Counts(peer_v5)
    producer = peer_v5.make("per_channel")
    base = sys.getrefcount(producer)
    with pytest.raises(hurray.UnsupportedError,
                       match="producer C ABI version 5, consumer C ABI version 4") as info:
        hurray.from_hurray(producer)
    assert isinstance(info.value, hurray.ABIError)
    del info
    gc.collect()
    assert counts() == {"contexts_made": 1, "buffers_made": 3, "buffers_released": 3,
                        "owners_released": 1, "capsules_released": 1}
    assert sys.getrefcount(producer) == base


def test_the_v5_peer_refuses_hurrays_v4_capsules_with_its_own_error(peer_v5):
    t = hurray.Tensor(bytearray(16), hurray.float32, [4])
    base = sys.getrefcount(t)
    with pytest.raises(peer_v5.ABIMismatch,
                       match="producer C ABI version 4, consumer C ABI version 5"):
        peer_v5.consume(t)
    gc.collect()
    assert sys.getrefcount(t) == base  # hurray's destructor released the unconsumed capsule


def test_peers_of_one_version_exchange_and_of_two_do_not(peer_ext, peer_v5):
    assert peer_v5.consume(peer_v5.make("paged")).summary["abi_version"] == 5
    assert peer_ext.consume(peer_ext.make("paged")).summary["abi_version"] == 4
    with pytest.raises(peer_ext.ABIMismatch):
        peer_ext.consume(peer_v5.make())
    with pytest.raises(peer_v5.ABIMismatch):
        peer_v5.consume(peer_ext.make())
