"""What an attacker or a careless producer hands hurray-python: strides that reach outside the
exported memory, a foreign context that calls read-only memory writable, DLPack capsules whose
arithmetic overflows, addresses that wrap. Each crash that was once reproduced runs in a child
interpreter (conftest.run_isolated), so a regression shows as a failed test naming the signal
rather than a dead test run; what the child prints is the clean exception it got instead."""

import gc
import sys
import weakref

import pytest

import hurray
import dlpack_fake as fake
from conftest import peer, run_isolated

np = peer("numpy")


# ============================================================================================
# Strides against the exporter's buffer (Tensor(data, ...), from_numpy)
# ============================================================================================


def test_negative_strides_cannot_reach_before_a_bytes_object():
    out = run_isolated("""
import hurray
b = bytes(range(16))
try:
    print(hurray.Tensor(b, hurray.uint8, [16], strides=[-1]).tolist())
except hurray.LayoutError as e:
    print("LayoutError:", e)
""")
    assert out == "LayoutError: the array starts 15 bytes before its buffer's data\n"


def test_a_numpy_write_through_dlpack_stays_inside_a_bytearray():
    out = run_isolated("""
import gc
import numpy as np
import hurray
neighbours = [bytearray(range(40)) for _ in range(64)]
for start in range(0, 40, 3):
    a = neighbours[start]
    try:
        t = hurray.Tensor(memoryview(a)[start:], hurray.uint8, [8], strides=[-4])
        np.from_dlpack(t)[:] = 0xEE
    except hurray.LayoutError as e:
        last = e
gc.collect()
assert all(bytes(n) == bytes(range(40)) for n in neighbours)
print("LayoutError:", last)
""")
    assert out == "LayoutError: the array starts 28 bytes before its buffer's data\n"


def test_negative_strides_inside_the_buffer_still_work():
    b = bytes(range(16))
    t = hurray.Tensor(b, hurray.uint8, [16], strides=[-1], byte_offset=15)
    assert t.tolist() == list(range(15, -1, -1))
    a = bytearray(range(40))
    view = memoryview(a)[3:]  # not 64-byte aligned: the wrapper rounds the address down
    t = hurray.Tensor(view, hurray.uint8, [8], strides=[-4], byte_offset=28)
    np.from_dlpack(t)[:] = 0xEE
    assert bytes(a) == bytes(0xEE if 3 <= i <= 31 and (i - 3) % 4 == 0 else i for i in range(40))


@pytest.mark.parametrize("strides,offset,size,message", [
    ([1], 0, 15, "addresses bytes [0, 16) of buffer 0, whose byte_size is 15"),
    ([-1], 14, 16, "the array starts 1 bytes before its buffer's data"),
    ([2], 0, 16, "addresses bytes [0, 31) of buffer 0, whose byte_size is 16"),
])
def test_bounds_errors_name_the_exporters_buffer(strides, offset, size, message):
    data = memoryview(bytearray(80))[5:5 + size]  # unaligned, so the wrapper widens it
    with pytest.raises(hurray.LayoutError) as info:
        hurray.Tensor(data, hurray.uint8, [16], strides=strides, byte_offset=offset)
    assert str(info.value) == message


# ============================================================================================
# Read-only memory from a foreign producer (a second copy of the library)
# ============================================================================================


def test_a_writable_context_over_read_only_buffers_is_refused(peer_ext):
    out = run_isolated(f"""
import importlib.util
import numpy as np
import hurray
spec = importlib.util.spec_from_file_location("peer", {peer_ext.__file__!r})
peer = importlib.util.module_from_spec(spec)
spec.loader.exec_module(peer)
producer = peer.make(readonly=True, context_flags=0, protect=True)
try:
    np.from_dlpack(hurray.from_hurray(producer))[0, 0] = 1.0
except hurray.InvalidArgumentError as e:
    print("InvalidArgumentError:", e)
""")
    assert out == ("InvalidArgumentError: buffer 0 is read-only but the tensor context is not "
                   "(its flags lack HURRAY_BUFFER_READ_ONLY)\n")


@pytest.mark.parametrize("kind", ["dense", "per_channel", "composite"])
def test_read_only_buffers_make_the_tensor_read_only(peer_ext, kind):
    t = hurray.from_hurray(peer_ext.make(kind, readonly=True, protect=True))
    assert t.readonly
    leaves = [t] if kind == "dense" else [p for p in t.parts] if kind != "composite" else [
        t.children["bias"]]
    for leaf in leaves:
        assert leaf.readonly
        assert not np.from_dlpack(leaf).flags.writeable
        with pytest.raises(TypeError, match="read-only"):
            memoryview(leaf)[0:1] = b"\0"
    # The context flag alone (buffers writable) is enough too.
    assert hurray.from_hurray(peer_ext.make(kind, context_flags=1)).readonly


# ============================================================================================
# Tensor.from_address
# ============================================================================================


@pytest.mark.parametrize("address,shape,device", [
    (2**64 - 1, [4], "cpu"),
    (2**64 - 64, [65], "cpu"),
    (2**64 - 8, [16], "cuda"),
])
def test_from_address_refuses_ranges_that_wrap(address, shape, device):
    out = run_isolated(f"""
import hurray
try:
    hurray.Tensor.from_address({address}, hurray.uint8, {shape}, device={device!r}).tobytes()
except hurray.InvalidArgumentError as e:
    print("InvalidArgumentError:", e)
""")
    assert out.startswith("InvalidArgumentError: ") and "wraps the address space" in out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mincore: Linux only")
@pytest.mark.parametrize("address,count", [(4096, 4), (2**47 - 4096, 8192)])
def test_from_address_refuses_cpu_ranges_that_are_not_mapped(address, count):
    out = run_isolated(f"""
import hurray
try:
    hurray.Tensor.from_address({address}, hurray.uint8, [{count}], device="cpu").tobytes()
except hurray.InvalidArgumentError as e:
    print("InvalidArgumentError:", e)
""")
    assert out == (f"InvalidArgumentError: {count} bytes at address {hex(address)}: not all of "
                   "them are mapped in this process\n")


def test_from_address_accepts_mapped_cpu_memory_and_keeps_its_owner():
    buf = np.arange(8192, dtype=np.uint8)  # pages of its own: the whole range is mapped
    t = hurray.Tensor.from_address(buf.ctypes.data, hurray.uint8, [8192], device="cpu",
                                   owner=buf)
    assert t.tobytes() == buf.tobytes()


    class Owner:
        pass

    owner = Owner()
    probe = weakref.ref(owner)
    with pytest.raises(hurray.InvalidArgumentError, match="not all of them are mapped"):
        hurray.Tensor.from_address(4096, hurray.uint8, [4], device="cpu", owner=owner)
    del owner
    gc.collect()
    assert probe() is None  # the refused tensor released its owner


def test_from_address_ranges_up_to_the_top_are_accepted():
    t = hurray.Tensor.from_address(2**64 - 64, hurray.uint8, [64], device="cuda")
    assert t.buffer_address == 2**64 - 64
    with pytest.raises(hurray.InvalidArgumentError, match="wraps"):
        hurray.Tensor.from_address(2**64 - 64, hurray.uint8, [4], device="cuda", byte_size=65)


def test_from_address_says_it_is_unsafe():
    doc = hurray.Tensor.from_address.__doc__
    assert "Unsafe" in doc and "crash" in doc


# ============================================================================================
# from_dlpack(device=...)
# ============================================================================================


@pytest.mark.parametrize("device", [(1, 0), (2, 0), 1, (hurray.Device("cpu").tag, 0)])
def test_from_dlpack_refuses_bare_device_numbers(device):
    producer = fake.Producer(fake.cpu_export(bytearray(16), [4]))
    with pytest.raises(TypeError, match=r"hurray.Device\('cpu'\) or 'cpu'"):
        hurray.from_dlpack(producer, device=device)
    assert producer.calls == []


def test_from_dlpack_takes_a_device_or_its_string_form():
    for device in (hurray.Device("cpu"), "cpu", "cpu:0"):
        producer = fake.Producer(fake.cpu_export(bytearray(16), [4]))
        assert hurray.from_dlpack(producer, device=device).device == hurray.Device("cpu", 0)
    producer = fake.Producer(fake.cpu_export(bytearray(16), [4]))
    with pytest.raises(hurray.BufferError, match=r"exported device \(1, 0\), not the \(2, 1\)"):
        hurray.from_dlpack(producer, device="cuda:1")


# ============================================================================================
# The DLPack consumer against hostile producers (dlpack_fake)
# ============================================================================================


def test_the_int64_min_stride_span_is_refused_not_negated():
    out = run_isolated("""
import hurray, dlpack_fake as fake
buf = bytearray(64)
export = fake.cpu_export(buf, [2], strides=[-2**62], code=2, bits=16)
try:
    hurray.from_dlpack(fake.Producer(export))
except hurray.LimitError as e:
    print("LimitError:", e)
import gc; gc.collect()
print("deleted", export.deleted)
""")
    assert out == "LimitError: DLPack strides reach 2^63 bytes or more\ndeleted 1\n"


def _refused(export, error, match):
    with pytest.raises(error, match=match) as info:
        hurray.from_dlpack(fake.Producer(export))
    assert type(info.value) is error
    gc.collect()
    assert export.deleted == 1  # the producer's deleter ran once, through its capsule


def test_null_shape_is_refused():
    export = fake.cpu_export(bytearray(16), [4])
    export.managed.dl_tensor.shape = None
    _refused(export, hurray.BufferError, "NULL shape")


@pytest.mark.parametrize("shape", [[2**62, 4], [2**32, 2**32], [3, 2**62, 2],
                                   [2**62, 3]])  # past INT64_MAX, below 2**64
def test_element_counts_that_overflow_are_refused(shape):
    export = fake.cpu_export(bytearray(16), shape)
    _refused(export, hurray.LimitError, "too many elements")


@pytest.mark.parametrize("shape,strides", [
    ([2], [2**62]),  # (2 - 1) * 2**62 * 4 bytes
    ([3, 3], [1, 2**61]),
    ([2, 2], [-(2**61), -(2**61)]),
    ([2**62], [2]),
])
def test_strides_that_overflow_are_refused(shape, strides):
    export = fake.cpu_export(bytearray(16), shape, strides=strides)
    _refused(export, hurray.LimitError, "DLPack strides")


@pytest.mark.parametrize("byte_offset,data_shift", [(2**64 - 1, 0), (2**63, 2**63)])
def test_offsets_that_wrap_the_address_space_are_refused(byte_offset, data_shift):
    export = fake.cpu_export(bytearray(16), [4], byte_offset=byte_offset)
    export.managed.dl_tensor.data = (export.managed.dl_tensor.data + data_shift) % 2**64
    _refused(export, hurray.LimitError, "wraps the address space")


def test_negative_strides_before_the_first_address_are_refused():
    export = fake.Export(0x40, [4], strides=[-64], code=1, bits=8)
    _refused(export, hurray.LimitError, "wraps the address space")


@pytest.mark.parametrize("strides", [[2], [-1]])
def test_strided_sub_byte_data_is_refused(strides):
    export = fake.cpu_export(bytearray(16), [4], strides=strides, code=17, bits=4)
    _refused(export, hurray.UnsupportedError, "strided; Hurray reads sub-byte elements packed")


def test_negative_strides_before_an_opaque_handle_are_refused():
    export = fake.Export(0x1234, [4], strides=[-1], byte_offset=8, device=(fake.KDL_METAL, 0))
    _refused(export, hurray.UnsupportedError, "before the start of an opaque DLPack buffer")
    ok = fake.Export(0x1234, [4], strides=[-1], byte_offset=12, device=(fake.KDL_METAL, 0))
    t = hurray.from_dlpack(fake.Producer(ok))
    assert (t.buffer_address, t.byte_offset, t.strides) == (0x1234, 12, (-1,))


def test_a_byte_offset_past_the_end_of_an_opaque_handle_is_refused():
    export = fake.Export(0x1234, [4], byte_offset=2**64 - 8, device=(fake.KDL_METAL, 0))
    _refused(export, hurray.LimitError, "byte_offset")


# ============================================================================================
# Mappings whose items() lie (hurray.save, hurray.serve)
# ============================================================================================


@pytest.mark.parametrize("call", ["hurray.save(os.path.join(tempfile.mkdtemp(), 'x.hurray'), m)",
                                  "hurray.serve(m)"])
@pytest.mark.parametrize("items", ["[42]", "[('t',)]", "[('t', t, 1)]", "iter([[('t', t)]])"])
def test_mappings_whose_items_are_not_pairs_are_refused(call, items):
    # A dict subclass may override items(): save() and serve() read each pair as a 2-tuple.
    out = run_isolated(f"""
import os, tempfile
import hurray
t = hurray.Tensor(bytes(4), hurray.float32, [1])
class Lying(dict):
    def items(self):
        return {items}
m = Lying(t=t)
try:
    {call}
except TypeError as e:
    print("TypeError:", e)
""")
    name = call.split("(")[0].split(".")[1]
    kind = {"[42]": "int", "iter([[('t', t)]])": "list"}.get(items, "tuple")
    assert out == f"TypeError: {name}(): items() of the Lying gave a {kind}, not a (key, value) pair\n"


def test_serve_reads_the_items_it_was_given_while_converting_them():
    # items() may hand out a list it keeps; converting a value runs Python code (a DLPack
    # producer's __dlpack__) that may empty that list: the names and tensors read from it must
    # stay alive and in place.
    out = run_isolated("""
import hurray
import numpy as np
kept = []
class Shrinking:
    def __init__(self):
        self.array = np.ones(2)
    def __dlpack_device__(self):
        return self.array.__dlpack_device__()
    def __dlpack__(self, **kwargs):
        kept.clear()
        global filler
        filler = ["z" * 12 for _ in range(100)]  # reuses the freed names' memory
        return self.array.__dlpack__(**kwargs)
class Mapping(dict):
    def items(self):
        kept[:] = [("".join(["a"] * 12), Shrinking()), ("".join(["b"] * 12), np.zeros(2))]
        return kept
with hurray.serve(Mapping(x=1)) as s, hurray.connect(s.address) as c:
    print(sorted(e["name"] for e in c.list()))
""")
    assert out == "['aaaaaaaaaaaa', 'bbbbbbbbbbbb']\n"


def test_save_names_a_tensor_metadata_key_that_the_tensors_lack_even_if_it_is_removed():
    # `key in tensors` runs the mapping's __contains__, which may drop the key from the
    # tensor_metadata dict it was read from: the error still names it, from a live object.
    out = run_isolated("""
import os, tempfile
import hurray
meta = {}
class Tensors(dict):
    def __contains__(self, key):
        meta.clear()
        global filler
        filler = ["y" * 12 for _ in range(100)]  # reuses the freed string's memory
        return False
meta["".join(["x"] * 12)] = {}
try:
    hurray.save(os.path.join(tempfile.mkdtemp(), "x.hurray"),
                Tensors(t=hurray.Tensor(bytes(4), hurray.float32, [1])), tensor_metadata=meta)
except hurray.InvalidArgumentError as e:
    print(e)
""")
    assert out == "tensor_metadata names 'xxxxxxxxxxxx', which is not one of the tensors\n"
