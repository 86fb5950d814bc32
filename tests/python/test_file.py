"""The file container from Python (Layer 8b): hurray.save, hurray.load, hurray.open.

Every layout and every metadata type round-trips through a real file; tensors outlive the
reader; the C reader's validation surfaces as the mapped hurray exception with its message;
and a writer killed mid-save leaves nothing under the final name and a previous file intact."""

import gc
import json
import os
import signal
import struct
import subprocess
import sysconfig
import sys
import textwrap
import time
from pathlib import Path

import pytest

import hurray
from conftest import SANITIZED, peer
from test_native_layouts import LAYOUTS, block, composite, per_channel

np = peer("numpy")

f32 = hurray.float32


# ============================================================================================
# Helpers
# ============================================================================================


def same_content(a, b):
    """Two tensors with the same descriptor and the same bytes in every part (their memory and
    byte offsets differ: the writer re-bases each buffer to the bytes its arrays address)."""
    assert (a.layout, a.dtype, a.shape, a.axis, a.block_size, a.coalesced) == \
           (b.layout, b.dtype, b.shape, b.axis, b.block_size, b.coalesced)
    assert [x["role"] for x in a.buffers] == [x["role"] for x in b.buffers]
    assert len(a.parts) == len(b.parts)
    for p, q in zip(a.parts, b.parts):
        assert (p.dtype, p.shape, p.strides) == (q.dtype, q.shape, q.strides)
        assert p.tobytes() == q.tobytes()
    assert a.children.keys() == b.children.keys()
    for name in a.children:
        same_content(a.children[name], b.children[name])


def all_parts(t):
    yield from t.parts
    for child in t.children.values():
        yield from all_parts(child)


def u8(data):
    return hurray.Tensor(bytes(data), hurray.uint8, [len(data)])


@pytest.fixture
def path(tmp_path):
    return tmp_path / "model.hurray"


# ============================================================================================
# Every layout round-trips
# ============================================================================================


def dense_cases():
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    return {
        "contiguous": hurray.from_numpy(base),
        "strided": hurray.from_numpy(base[::2, 1::2]),
        "negative_stride": hurray.from_numpy(base[::-1, ::-2]),
        "transposed": hurray.from_numpy(base.T),
        "zero_d": hurray.from_numpy(np.array(3.5, dtype=np.float64)),
        "zero_size": hurray.from_numpy(np.zeros((0, 5), np.int16)),
        "int4": hurray.Tensor(bytes([0x10, 0x32, 0x54, 0x76, 0x98, 0xBA]), hurray.dtype.int4,
                              [3, 4]),
        "bfloat16": hurray.Tensor(struct.pack("<6H", *range(0x3F80, 0x3F86)),
                                  hurray.dtype.bfloat16, [2, 3]),
        "bool": hurray.from_numpy(np.array([True, False, True])),
        "complex128": hurray.from_numpy(np.array([1 + 2j, -3j])),
    }


@pytest.mark.parametrize("mmap", [True, False], ids=["mmap", "pread"])
def test_every_dense_case_round_trips(path, mmap):
    tensors = dense_cases()
    hurray.save(path, tensors)
    loaded = hurray.load(path, mmap=mmap)
    assert list(loaded) == list(tensors)
    for name, t in tensors.items():
        same_content(t, loaded[name])
        if name not in ("int4", "bfloat16"):  # packed / ml_dtypes-only: compared as bytes
            assert np.array_equal(loaded[name].__array__(), t.__array__())
    assert loaded["negative_stride"].strides == tensors["negative_stride"].strides
    assert loaded["zero_d"].shape == () and loaded["zero_d"].tolist() == 3.5
    assert loaded["int4"].tobytes() == bytes([0x10, 0x32, 0x54, 0x76, 0x98, 0xBA])
    assert loaded["bfloat16"].tobytes() == tensors["bfloat16"].tobytes()


@pytest.mark.parametrize("make", LAYOUTS.values(), ids=LAYOUTS.keys())
@pytest.mark.parametrize("mmap", [True, False], ids=["mmap", "pread"])
def test_every_layout_round_trips(path, make, mmap):
    t = make()
    hurray.save(path, {"t": t, "after": u8(b"tail")})
    loaded = hurray.load(path, mmap=mmap)
    same_content(t, loaded["t"])
    assert loaded["after"].tobytes() == b"tail"
    with hurray.open(path, mmap=mmap) as f:
        same_content(t, f["t"])


def test_buffers_are_aligned_in_the_file_and_in_memory(path):
    hurray.save(path, {"pc": per_channel(), "d": u8(b"x" * 100)}, alignment=4096)
    with hurray.open(path) as f:
        assert f.info["alignment"] == 4096
        for name in f:
            for buffer in f[name].buffers:
                assert buffer["address"] % 4096 == 0 and buffer["readonly"]
    with pytest.raises(hurray.DescriptorError, match="alignment 100 is not a power of two"):
        hurray.save(path, {"d": u8(b"x")}, alignment=100)


def first_byte(t):
    """The address of the lowest byte a dense CPU tensor addresses."""
    return np.lib.array_utils.byte_bounds(t.__array__())[0]


@pytest.mark.parametrize("alignment", [64, 4096])
@pytest.mark.parametrize("mmap", [True, False], ids=["mmap", "pread"])
def test_every_tensor_starts_at_a_multiple_of_the_alignment(path, alignment, mmap):
    """Alignment is a promise about the tensor read back, not about the source's memory: a
    small array (malloc puts it at 16 mod 64) and slices whose first byte lies anywhere come
    back starting at a multiple of the file's alignment, holding only their own bytes."""
    big = np.arange(1000, dtype=np.float32)
    sources = {
        "arange3": np.arange(3, dtype=np.float32),
        "slice": big[5:17],
        "negative": big[17:5:-3],
        "window": big[:600].reshape(20, 30)[3:, 7:],
    }
    assert any(first_byte(hurray.from_numpy(a)) % 64 for a in sources.values())
    hurray.save(path, sources, alignment=alignment)
    with hurray.open(path, mmap=mmap) as f:
        for tensors in (hurray.load(path, mmap=mmap), f):
            for name, source in sources.items():
                t = tensors[name]
                assert first_byte(t) % alignment == 0, name
                assert np.array_equal(t.__array__(), source), name
    assert hurray.load(path)["arange3"].buffers[0]["byte_size"] == 12
    assert hurray.load(path)["slice"].buffers[0]["byte_size"] == 48


def test_a_multi_buffer_tensor_keeps_its_roles_and_values(path):
    hurray.save(path, {"w": block()})
    w = hurray.load(path)["w"]
    assert [b["role"] for b in w.buffers] == ["values", "scales", "mins"]
    assert (w.axis, w.block_size, w.dtype) == (1, 4, hurray.dtype.uint4)
    assert w.parts[2].tolist() == [[-1.0, -2.0], [-3.0, -4.0]]


def test_composite_children_round_trip(path):
    hurray.save(path, {"layer": composite()})
    layer = hurray.load(path)["layer"]
    assert list(layer.children) == ["weight", "bias", "nested"]
    assert layer.children["nested"].children["csr"].parts[0].tolist() == [0, 1, 1, 3]


# ============================================================================================
# Metadata
# ============================================================================================

METADATA = {
    "name": "tiny-llm", "unicode": "grüße ✓", "empty": "", "nul": "a\0b",
    "layers": 2, "negative": -(2 ** 63), "largest": 2 ** 63 - 1,
    "lr": 3e-4, "inf": float("inf"), "zero": -0.0,
    "tied": True, "frozen": False,
    "shape": [4, 8], "mixed": [1, "two", 3.0, False, [], {}],
    "config": {"hidden": 8, "act": "gelu", "rope": {"theta": 10000.0, "scaling": None is None}},
    "empty_map": {}, "empty_list": [],
}
# What format 2.1 adds (spec §7): null, and integers outside int64, exactly.
METADATA_2_1 = {
    "pad_token_id": None, "seed": 2 ** 64 + 1, "low": -(2 ** 63) - 1,
    "digits": int("9" * 1024), "negative_digits": -int("9" * 1023),
    "config": {"layers": [None, {"rope_scaling": None}], "vocab": 50257},
}


def version_of(path):
    """The (major, minor) version of a file's header (spec §3)."""
    with open(path, "rb") as f:
        header = f.read(12)
    return int.from_bytes(header[8:10], "little"), int.from_bytes(header[10:12], "little")


def test_metadata_of_every_type_round_trips(path):
    per_tensor = {"w": {"quant": {"bits": 4, "group": [1, 2]}}}
    hurray.save(path, {"w": u8(b"abc"), "b": u8(b"d")}, METADATA, tensor_metadata=per_tensor)
    with hurray.open(path) as f:
        assert f.metadata == METADATA
        assert f.tensor_metadata("w") == per_tensor["w"]
        assert f.tensor_metadata("b") == {}
        with pytest.raises(KeyError):
            f.tensor_metadata("nope")


def test_tuples_and_numpy_scalars_are_accepted(path):
    hurray.save(path, {"a": u8(b"a")}, {"t": (1, 2), "i": np.int32(7), "f": np.float32(0.5),
                                         "u": np.uint64(2 ** 64 - 1), "b": np.bool_(False),
                                         "s": np.str_("text")})
    with hurray.open(path) as f:
        assert f.metadata == {"t": [1, 2], "i": 7, "f": 0.5, "u": 2 ** 64 - 1, "b": False,
                              "s": "text"}
        assert type(f.metadata["b"]) is bool


def test_null_and_big_integers_round_trip_in_a_2_1_file(path):
    hurray.save(path, {"w": u8(b"abc")}, METADATA_2_1, tensor_metadata={"w": {"bias": None}})
    assert version_of(path) == (2, 1)
    with hurray.open(path) as f:
        assert f.metadata == METADATA_2_1
        assert f.tensor_metadata("w") == {"bias": None}


@pytest.mark.parametrize("metadata, tensor_metadata", [
    (METADATA, None), (None, {"w": {"x": 2 ** 63 - 1}}), ({"x": -(2 ** 63)}, None)])
def test_files_without_what_2_1_adds_stay_2_0(path, metadata, tensor_metadata):
    """A writer writes the lowest version whose features the file uses (spec §3), so readers
    of 2.0 keep reading every file that needs nothing newer."""
    hurray.save(path, {"w": u8(b"abc")}, metadata, tensor_metadata=tensor_metadata)
    assert version_of(path) == (2, 0)


def test_a_config_dict_round_trips_as_metadata(path):
    """What a transformers config.to_dict() holds: None, nested dicts and lists, floats."""
    config = {"architectures": ["GPT2LMHeadModel"], "n_embd": 8, "bos_token_id": 50256,
              "pad_token_id": None, "task_specific_params": {"text-generation": {
                  "do_sample": True, "max_length": 50}}, "layer_norm_epsilon": 1e-05,
              "torch_dtype": None, "id2label": {"0": "LABEL_0"}, "rope_scaling": None}
    hurray.save(path, {"w": u8(b"abc")}, {"config": config})
    assert hurray.open(path).metadata == {"config": config}


def test_int_metadata_keys_are_written_as_json_writes_them(path):
    """A transformers config's id2label has int keys: they become their decimal strings, as
    json.dumps makes them, so the config saves as it is (ADR-090)."""
    config = {"id2label": {0: "LABEL_0", -1: "none"}, "label2id": {"LABEL_0": 0}}
    hurray.save(path, {"w": u8(b"abc")}, {"config": config})
    assert hurray.open(path).metadata == {"config": json.loads(json.dumps(config))}


@pytest.mark.parametrize("bad, error, message", [
    ({"x": b"bytes"}, TypeError, "metadata at x: metadata values are None, bool, int, float, "
                                 "str, list, tuple or dict (and NumPy's scalars), not bytes"),
    ({(1, 2): "tuple key"}, TypeError, "metadata: metadata keys must be str or int, not tuple"),
    ({True: "bool key"}, TypeError, "metadata: metadata keys must be str or int, not bool"),
    ({1: "int key", "1": "its text"}, hurray.InvalidArgumentError, "duplicate metadata key '1'"),
    ({"config": {"layers": [1, 2, np.arange(3)]}}, TypeError,
     "metadata at config.layers[2]: a numpy.ndarray is not a metadata value"),
    ({"config": {"x y": {"z": object()}}}, TypeError, "metadata at config['x y'].z: "),
    ({"c": {"n": np.array(3)}}, TypeError, "metadata at c.n: a numpy.ndarray"),
    ({"x": int("9" * 1025)}, hurray.LimitError,
     "metadata at x: an integer of 1025 digits; metadata integers have at most 1024"),
    ({"": 1}, hurray.InvalidArgumentError, None),
    ({"k\0": 1}, hurray.InvalidArgumentError, None),
    ("not a dict", TypeError, "metadata: must be a dict or None, not str"),
])
def test_bad_metadata_is_refused_naming_where_and_nothing_is_written(path, bad, error, message):
    with pytest.raises(error) as raised:
        hurray.save(path, {"a": u8(b"a")}, bad)
    if message is not None:
        assert str(raised.value).startswith(message), str(raised.value)
    assert not path.exists() and os.listdir(path.parent) == []


def test_bad_tensor_metadata_names_the_tensor_and_the_path(path):
    with pytest.raises(TypeError, match=r"^tensor_metadata\['w'\] at q\[0\]: .*not object"):
        hurray.save(path, {"w": u8(b"a")}, tensor_metadata={"w": {"q": [object()]}})
    assert not path.exists()


def test_too_deep_metadata_is_a_limit_error(path):
    deep = {}
    node = deep
    for _ in range(40):
        node["d"] = {}
        node = node["d"]
    with pytest.raises(hurray.LimitError):
        hurray.save(path, {"a": u8(b"a")}, deep)
    assert not path.exists()


def test_tensor_metadata_must_name_a_tensor(path):
    with pytest.raises(hurray.InvalidArgumentError, match="'ghost'"):
        hurray.save(path, {"a": u8(b"a")}, tensor_metadata={"ghost": {}})
    assert not path.exists()


# ============================================================================================
# Lazy open
# ============================================================================================


def test_open_is_a_lazy_mapping(path):
    tensors = {f"t{i}": u8(bytes([i]) * (i + 1)) for i in range(5)}
    hurray.save(path, tensors, {"k": "v"})
    with hurray.open(path) as f:
        assert len(f) == 5 and list(f.keys()) == list(tensors) and list(f) == list(tensors)
        assert "t3" in f and "t9" not in f and 3 not in f
        assert f["t3"].tobytes() == b"\x03" * 4
        assert f.metadata == {"k": "v"}
        assert f.info["tensors"] == 5 and f.info["version"] == (2, 0)
        assert not f.closed and f.path == path
        with pytest.raises(KeyError):
            f["t9"]
        with pytest.raises(TypeError):
            f[0]
        assert "5 tensors" in repr(f)
    assert f.closed and "closed" in repr(f)


def test_a_corrupt_record_matters_only_when_its_tensor_is_used(path):
    """Open reads the header and the index's chunk table, nothing per tensor (file-format.md
    §9): a record whose bytes no longer match their chunk's checksum is refused when its tensor
    is first used, and every tensor outside that chunk reads as before. verify() checks every
    chunk."""
    tensors = {f"t{i}": np.full(2, i, np.float32) for i in range(3000)}
    hurray.save(path, tensors)
    raw = bytearray(path.read_bytes())
    at = raw.find(b"\x05t2021")  # the record's name length and name
    assert at > 0
    raw[at + 1] ^= 0x01  # "t2021" -> "u2021"
    path.write_bytes(raw)
    for mmap in (True, False):
        with hurray.open(path, mmap=mmap) as f:
            assert len(f) == 3000
            assert np.from_dlpack(f["t0"]).tolist() == [0.0, 0.0]
            assert np.from_dlpack(f["t2999"]).tolist() == [2999.0, 2999.0]
            with pytest.raises(hurray.ChecksumError, match="of the index is corrupt"):
                f["t2021"]
            with pytest.raises(hurray.ChecksumError, match="of the index is corrupt"):
                f.verify()
            assert np.from_dlpack(f["t1"]).tolist() == [1.0, 1.0]  # still served


def test_file_is_a_mapping(path):
    """hurray.File is a collections.abc.Mapping: every method of the interface, in write order,
    and == against any Mapping with the same items."""
    import collections.abc

    hurray.save(path, {"b": u8(b"bb"), "a": u8(b"a")})
    with hurray.open(path) as f:
        assert isinstance(f, collections.abc.Mapping)
        assert not isinstance(f, collections.abc.MutableMapping)
        assert isinstance(f.keys(), collections.abc.KeysView) and list(f.keys()) == ["b", "a"]
        assert f.keys() == {"a", "b"}
        items = list(f.items())
        assert [k for k, _ in items] == ["b", "a"]
        assert [t.tobytes() for _, t in items] == [b"bb", b"a"]
        assert [t.tobytes() for t in f.values()] == [b"bb", b"a"]
        assert f.get("a").tobytes() == b"a"
        assert f.get("missing") is None and f.get("missing", 7) == 7
        assert len(f) == 2 and "a" in f and "c" not in f and 3 not in f
        assert list(iter(f)) == ["b", "a"]
        assert f == f and not (f != f)
        assert f != {} and f != {"a": 1}
        # The values are tensors, whose == is the array API's element-wise comparison: a
        # Mapping with the same keys and other values cannot be answered by one bool.
        with pytest.raises(TypeError, match="0-d tensor"):
            f == {"a": 1, "b": 2}
        assert f != [("b", 1)] and (f == 3) is False
        with pytest.raises(TypeError):
            hash(f)  # unhashable, as Mappings with __eq__ are


def test_using_a_closed_file_raises_state_error(path):
    hurray.save(path, {"a": u8(b"a")})
    f = hurray.open(path)
    f.close()
    f.close()  # idempotent
    for use in (lambda: f["a"], lambda: f.keys(), lambda: len(f), lambda: "a" in f,
                lambda: f.items(), lambda: f.values(), lambda: f.get("a"), lambda: f == {},
                lambda: f.metadata, lambda: f.verify(), lambda: f.slice("a", 0, 1),
                lambda: f.tensor_metadata("a"), lambda: list(f)):
        with pytest.raises(hurray.StateError, match="closed hurray.File"):
            use()
    with pytest.raises(hurray.StateError):
        with f:
            pass


def test_file_cannot_be_instantiated_directly():
    with pytest.raises(TypeError):
        hurray.File()


def test_tensors_outlive_the_reader_and_the_file_object(path, gc_collect):
    data = bytes(range(256)) * 64
    hurray.save(path, {"a": u8(data), "pc": per_channel()})
    with hurray.open(path) as f:
        a, pc = f["a"], f["pc"]
    del f
    loaded = hurray.load(path)
    gc_collect()
    assert a.tobytes() == data and pc.parts[1].tolist() == [0.5, 1.0, 1.5, 2.0]
    view = np.from_dlpack(loaded.pop("a"))
    del loaded
    gc_collect()
    assert view.tobytes() == data
    os.unlink(path)  # the mapping outlives the name too
    assert a.tobytes() == data and view.tobytes() == data


def test_mapped_tensors_are_read_only_and_pread_ones_writable(path):
    hurray.save(path, {"a": hurray.from_numpy(np.arange(4, dtype=np.int32))})
    mapped = hurray.load(path)["a"]
    assert mapped.readonly and memoryview(mapped).readonly
    with pytest.raises(ValueError, match="read-only"):
        np.from_dlpack(mapped)[0] = 1  # DLPack 1.x carries the read-only flag
    read = hurray.load(path, mmap=False)["a"]
    assert not read.readonly
    array = read.__array__()
    array[0] = 42
    assert read.tolist()[0] == 42
    assert hurray.load(path)["a"].tolist() == [0, 1, 2, 3]  # the file is unchanged


def mapping_address(path, data):
    """Where `data`'s bytes lie in this process's mapping of the file at `path` (from
    /proc/self/maps and the file's bytes, not from hurray)."""
    offset = Path(path).read_bytes().index(data)
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5] == str(Path(path).resolve()):
            start, end = (int(x, 16) for x in fields[0].split("-"))
            first = start - int(fields[2], 16)  # the address of the file's byte 0
            if start <= first + offset < end:
                return first + offset
    raise AssertionError(f"{path} is not mapped over byte {offset}")


@pytest.mark.parametrize("opener", ["load", "open"])
def test_writable_tensors_are_zero_copy_for_numpy_torch_and_jax(path, opener):
    torch, jax = peer("torch"), peer("jax")
    data = np.arange(4096, dtype=np.float32) * np.float32(1.5)
    hurray.save(path, {"w": data})
    f = hurray.load(path, writable=True) if opener == "load" else hurray.open(path, writable=True)
    t = f["w"]
    address = mapping_address(path, data.tobytes())
    assert not t.readonly and t.buffer_address == address
    as_numpy = np.from_dlpack(t)
    assert as_numpy.flags.writeable and as_numpy.__array_interface__["data"][0] == address
    as_torch = torch.from_dlpack(t)
    assert as_torch.data_ptr() == address
    as_jax = jax.dlpack.from_dlpack(t)  # asks for a legacy capsule, which has no read-only flag
    assert as_jax.unsafe_buffer_pointer() == address
    assert jax.dlpack.from_dlpack(t, copy=False).unsafe_buffer_pointer() == address
    assert jax.numpy.array_equal(as_jax, data)


def test_a_write_through_a_writable_tensor_stays_private(path):
    torch = peer("torch")
    data = np.arange(1024, dtype=np.int32)
    hurray.save(path, {"w": data})
    before = path.read_bytes()
    t = hurray.load(path, writable=True)["w"]
    np.from_dlpack(t)[0] = -7
    torch.from_dlpack(t)[1] = -8
    assert t.tolist()[:3] == [-7, -8, 2]
    assert path.read_bytes() == before  # the file is unchanged
    assert hurray.load(path)["w"].tolist()[:3] == [0, 1, 2]  # and so is another mapping of it
    with hurray.open(path, writable=True) as f:  # one File's tensors share one mapping
        a, b = f["w"], f["w"]
        np.from_dlpack(a)[5] = 99
        assert b.tolist()[5] == 99 and a.buffer_address == b.buffer_address
    assert path.read_bytes() == before


def test_writable_changes_nothing_for_pread_and_takes_a_bool(path):
    hurray.save(path, {"w": np.arange(4, dtype=np.int32)})
    assert not hurray.load(path, mmap=False, writable=False)["w"].readonly
    assert hurray.load(path, writable=0)["w"].readonly
    with pytest.raises(TypeError, match="positional"):
        hurray.load(path, True, False, True)


# ============================================================================================
# Slices
# ============================================================================================


@pytest.mark.parametrize("mmap", [True, False], ids=["mmap", "pread"])
def test_slice_gets_rows_of_a_dense_tensor(path, mmap):
    base = np.arange(1000 * 8, dtype=np.float32).reshape(1000, 8)
    hurray.save(path, {"w": base, "rev": base[::-1], "pc": per_channel(),
                       "scalar": np.array(1.0, np.float32)})
    with hurray.open(path, mmap=mmap) as f:
        rows = f.slice("w", 100, 103)
        assert rows.shape == (3, 8)
        assert np.array_equal(rows.__array__(), base[100:103])
        assert np.array_equal(f.slice("rev", 10, 20).__array__(), base[::-1][10:20])
        assert f.slice("w", 5, 5).shape == (0, 8)
        assert np.array_equal(f.slice(name="w", start=0, stop=1000).__array__(), base)
        with pytest.raises(hurray.InvalidArgumentError):
            f.slice("w", 0, 1001)
        with pytest.raises(hurray.InvalidArgumentError):
            f.slice("scalar", 0, 1)
        with pytest.raises(hurray.UnsupportedError):
            f.slice("pc", 0, 1)
        with pytest.raises(KeyError):
            f.slice("nope", 0, 1)


# ============================================================================================
# Verification and bad files
# ============================================================================================


MARK = bytes([0xA5, 0x5A, 0xC3, 0x3C]) * 1024


def flip_marked_byte(path):
    raw = bytearray(path.read_bytes())
    at = raw.find(MARK)
    assert at > 0
    raw[at + 100] ^= 0x01
    path.write_bytes(raw)


def test_verify_finds_a_flipped_data_byte_and_names_the_tensor(path):
    hurray.save(path, {"good": u8(b"g" * 1000), "victim": u8(MARK)})
    flip_marked_byte(path)
    with hurray.open(path) as f:
        f.verify("good")
        with pytest.raises(hurray.ChecksumError, match="victim") as info:
            f.verify("victim")
        assert info.value.code == 17
        with pytest.raises(hurray.ChecksumError, match="victim"):
            f.verify()
        assert f["victim"].tobytes() != MARK  # get does not verify: the bytes are mapped
    with pytest.raises(hurray.ChecksumError, match="victim"):
        hurray.load(path, verify=True)
    with pytest.raises(hurray.ChecksumError, match="victim"):
        hurray.load(path, mmap=False, verify=True)
    assert hurray.load(path)["good"].tobytes() == b"g" * 1000  # verify=False by default


def test_truncated_file_raises_format_error_with_the_c_message(path):
    hurray.save(path, {"a": u8(b"a" * 5000)})
    raw = path.read_bytes()
    for cut in (0, 10, 64, len(raw) // 2, len(raw) - 1):
        path.write_bytes(raw[:cut])
        with pytest.raises(hurray.FormatError) as info:
            hurray.load(path)
        assert str(info.value) and info.value.code == 14
        with pytest.raises(hurray.FormatError):
            hurray.open(path, mmap=False)


def test_corrupt_magic_and_trailing_bytes_raise_format_error(path):
    hurray.save(path, {"a": u8(b"a")})
    raw = bytearray(path.read_bytes())
    path.write_bytes(b"NOPE" + raw[4:])
    with pytest.raises(hurray.FormatError):
        hurray.open(path)
    path.write_bytes(raw + b"\0")
    with pytest.raises(hurray.FormatError, match="trailing bytes"):
        hurray.open(path)


def test_random_garbage_never_crashes(path):
    """Three random bytes of a valid file overwritten. Every byte is covered (the header and
    index checksums, each buffer's checksum, and verify's check of the padding between them),
    so every file whose bytes changed is refused, as a malformed file, by open or verify; an
    unchanged one is accepted."""
    rng = np.random.default_rng(0)
    hurray.save(path, {"pc": per_channel(), "b": block()}, {"k": [1, {"x": "y"}]})
    raw = path.read_bytes()
    malformed = (hurray.FormatError, hurray.LimitError, hurray.LayoutError,
                 hurray.DescriptorError, hurray.DTypeError, hurray.UnsupportedError)
    refused = 0
    for _ in range(300):
        damaged = bytearray(raw)
        for at in rng.integers(0, len(raw), size=3):
            damaged[at] = int(rng.integers(0, 256))
        path.write_bytes(damaged)
        try:
            with hurray.open(path) as f:
                f.metadata
                for name in f:
                    f.tensor_metadata(name)
                    f[name].parts
                f.verify()
        except malformed as e:
            assert damaged != raw, e
            refused += 1
        else:
            assert damaged == raw
    assert refused >= 290


def test_a_missing_file_is_an_os_error(tmp_path):
    with pytest.raises(OSError):
        hurray.load(tmp_path / "absent.hurray")
    with pytest.raises(hurray.InputOutputError):
        hurray.open(tmp_path / "absent.hurray")


# ============================================================================================
# Saving: inputs, atomicity
# ============================================================================================


def test_saving_numpy_arrays_and_torch_tensors_directly(path):
    torch = peer("torch")
    arrays = {
        "np": np.arange(12, dtype=np.float32).reshape(3, 4),
        "np_readonly": np.frombuffer(b"\x01\x02\x03\x04", np.uint8),
        "np_view": np.arange(10, dtype=np.int64)[::3],
        "torch": torch.arange(6, dtype=torch.float32).reshape(2, 3),
        "torch_bf16": torch.tensor([1.0, 2.0, -3.5], dtype=torch.bfloat16),
        "torch_t": torch.arange(6, dtype=torch.int16).reshape(2, 3).t(),
    }
    hurray.save(path, arrays)
    loaded = hurray.load(path)
    for name in ("np", "np_readonly", "np_view"):
        assert np.array_equal(loaded[name].__array__(), arrays[name])
    for name in ("torch", "torch_bf16", "torch_t"):
        assert torch.equal(torch.from_dlpack(loaded[name]), arrays[name])


def test_a_models_parameters_are_saved_as_they_are(path):
    """dict(model.named_parameters()) holds tensors that require grad, which PyTorch will not
    export through DLPack: save detaches them (the same storage, no copy) and leaves the model
    as it was; load_state_dict takes them back."""
    torch = peer("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    hurray.save(path, dict(model.named_parameters()))
    assert all(p.requires_grad for p in model.parameters())
    twin = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    loaded = hurray.load(path)
    twin.load_state_dict({k: torch.from_dlpack(v) for k, v in loaded.items()})
    x = torch.randn(2, 4)
    assert torch.equal(twin(x), model(x))


def test_save_refuses_what_it_cannot_take(path):
    with pytest.raises(TypeError):
        hurray.save(path, [u8(b"a")])
    with pytest.raises(TypeError):
        hurray.save(path, {"a": "not a tensor"})
    with pytest.raises(TypeError):
        hurray.save(path, {1: u8(b"a")})
    with pytest.raises(hurray.InvalidArgumentError, match="tensor name is empty"):
        hurray.save(path, {"": u8(b"a")})
    with pytest.raises(hurray.InvalidArgumentError):
        hurray.save(path, {"a\0b": u8(b"a")})
    assert not path.exists() and os.listdir(path.parent) == []


@pytest.mark.parametrize("name", ["m.safetensors", "m.npy", "m.npz", "M.NPY"])
def test_save_refuses_another_formats_extension_and_names_convert(tmp_path, name):
    """Hurray bytes never appear under a .safetensors, .npy or .npz name; the message names the
    route that writes those formats."""
    target = tmp_path / name
    target.write_bytes(b"previous")
    with pytest.raises(hurray.InvalidArgumentError, match=r"hurray\.convert\(\)"):
        hurray.save(target, {"a": np.zeros(2, np.float32)})
    assert target.read_bytes() == b"previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]
    hurray.save(tmp_path / "m.hurray", {"a": np.zeros(2, np.float32)})
    hurray.convert(tmp_path / "m.hurray", target)  # the route the message names
    assert target.read_bytes()[:8] != b"\x89HRY\r\n\x1a\n"


@pytest.mark.parametrize("durable", [True, False])
def test_a_failed_save_leaves_the_previous_file_intact(path, durable):
    hurray.save(path, {"old": u8(b"old")})
    before = path.read_bytes()
    device = hurray.Tensor.from_address(64, hurray.uint8, [4], device="cuda")
    with pytest.raises(hurray.UnsupportedError):
        hurray.save(path, {"new": u8(b"new"), "gpu": device}, durable=durable)
    assert path.read_bytes() == before
    assert os.listdir(path.parent) == [path.name]  # the temporary was removed


@pytest.mark.parametrize("durable", [True, False])
def test_save_replaces_a_previous_file_atomically(path, durable):
    hurray.save(path, {"a": u8(b"a")})
    hurray.save(path, {"b": u8(b"b")}, durable=durable)
    with hurray.open(path) as f:
        assert list(f.keys()) == ["b"]
        f.verify()
    assert os.listdir(path.parent) == [path.name]


def test_durable_is_a_keyword_and_the_same_bytes_either_way(tmp_path):
    tensors = {"w": np.arange(100_000, dtype=np.float32), "b": u8(b"bias")}
    hurray.save(tmp_path / "d.hurray", tensors, {"k": 1})
    hurray.save(tmp_path / "n.hurray", tensors, {"k": 1}, durable=False)
    assert (tmp_path / "d.hurray").read_bytes() == (tmp_path / "n.hurray").read_bytes()
    with pytest.raises(TypeError):
        hurray.save(tmp_path / "p.hurray", tensors, None, 64, None, False)  # keyword-only


def test_paths_may_be_str_bytes_or_pathlike(path):
    for p in (str(path), os.fsencode(path), path):
        hurray.save(p, {"a": u8(b"a")})
        assert hurray.load(p)["a"].tobytes() == b"a"
        with hurray.open(p) as f:
            assert list(f.keys()) == ["a"]


KILL_WRITER = textwrap.dedent("""
    import sys, hurray
    path, mib = sys.argv[1], int(sys.argv[2])
    big = memoryview(bytearray((64 << 20) + 64))  # a view at another address for each tensor,
    chunks = [hurray.Tensor(big[i:i + (64 << 20)], hurray.uint8, [64 << 20])  # so none is shared
              for i in range(mib // 64)]
    hurray.save(path, {f"t{i}": chunk for i, chunk in enumerate(chunks)})
""")


def _written(pid):
    """Bytes the process `pid` has handed to write(2)/pwrite(2) so far (/proc/<pid>/io)."""
    try:
        with open(f"/proc/{pid}/io") as f:
            return int(next(line for line in f if line.startswith("wchar:")).split()[1])
    except (OSError, StopIteration):
        return 0


@pytest.mark.skipif(SANITIZED, reason="writes 2 GiB; timing-dependent under a sanitizer")
@pytest.mark.parametrize("named", [False, True], ids=["o_tmpfile", "named_temporary"])
def test_killing_the_writer_mid_save_leaves_nothing_and_the_old_file_intact(path, named):
    hurray.save(path, {"old": u8(b"previous contents")})
    before = path.read_bytes()
    env = dict(os.environ)
    env.pop("_HURRAY_TEST_NAMED_TEMPORARY", None)
    if named:  # the private hook of src/file/output.c: as on a file system without O_TMPFILE
        env["_HURRAY_TEST_NAMED_TEMPORARY"] = "1"
    writer = subprocess.Popen([sys.executable, "-c", KILL_WRITER, str(path), "2048"], env=env)
    killed = False
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and writer.poll() is None:
            if _written(writer.pid) > (192 << 20):  # well into the save
                writer.send_signal(signal.SIGKILL)
                killed = True
                break
            time.sleep(0.002)
        assert killed, "the writer finished before it could be killed"
    finally:
        writer.kill()
        writer.wait()
    assert writer.returncode == -signal.SIGKILL
    assert path.read_bytes() == before  # byte-identical
    with hurray.open(path) as f:
        assert list(f.keys()) == ["old"]
    leftovers = sorted(p.name for p in path.parent.iterdir() if p.name != path.name)
    if named:
        # SIGKILL leaves the dead writer's own `<path>.tmp-<pid>-<n>`, which no reader opens...
        assert len(leftovers) == 1 and leftovers[0].startswith(f"{path.name}.tmp-{writer.pid}-")
    else:
        assert leftovers == []  # the temporary had no name: the kernel freed it
    hurray.save(path, {"new": u8(b"new")}, durable=False)
    assert hurray.load(path)["new"].tobytes() == b"new"
    # ...and the next save of that path removes it: its writer's pid is gone and its lock free
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


def test_a_saved_file_holds_no_blocks_past_its_bytes(path):
    # the writer allocates blocks ahead of its writes (fallocate, output.c); commit cuts off
    # what was not written, so neither the size nor the disk usage keeps the reserve
    data = np.arange(3 << 20, dtype=np.uint8)
    hurray.save(path, {"x": data})
    st = path.stat()
    assert st.st_size < data.nbytes + 4096
    assert st.st_blocks * 512 < st.st_size + (256 << 10)
    assert np.array_equal(np.asarray(hurray.load(path, verify=True)["x"]), data)


def test_save_releases_the_gil(path):
    import threading
    chunk = hurray.Tensor(bytearray(32 << 20), hurray.uint8, [32 << 20])
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.0005)

    thread = threading.Thread(target=ticker)
    thread.start()
    try:
        hurray.save(path, {f"t{i}": chunk for i in range(8)})
    finally:
        stop.set()
        thread.join()
    assert len(ticks) > 5


def test_concurrent_reads_from_threads(path):
    import threading
    tensors = {f"t{i}": u8(bytes([i]) * 4096) for i in range(32)}
    hurray.save(path, tensors)
    errors = []
    for mmap in (True, False):
        f = hurray.open(path, mmap=mmap)

        def read():
            try:
                for _ in range(20):
                    for name in f:
                        assert f[name].tobytes() == tensors[name].tobytes()
                    f.verify()
            except hurray.StateError:
                pass  # closed by the main thread meanwhile
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=read) for _ in range(4)]
        for t in threads:
            t.start()
        time.sleep(0.01)
        f.close()
        for t in threads:
            t.join()
    assert errors == []


def test_the_installed_cli_spells_metadata_floats_shortest(tmp_path):
    """`pip install .` ships the `hurray` command beside the interpreter; `hurray info` prints
    each float metadata value in the shortest spelling that reads back exactly."""
    cli = Path(sysconfig.get_path("scripts")) / "hurray"
    if not cli.exists():
        pytest.skip("the hurray command is not installed beside this interpreter")
    path = tmp_path / "m.hurray"
    values = {"lr": 3e-4, "x": 0.1, "big": 1e300, "neg": -2.5, "third": 1 / 3}
    hurray.save(path, {"a": np.zeros(2, np.float32)}, values)
    out = subprocess.run([cli, "info", path], capture_output=True, text=True, check=True).stdout
    assert '"lr": 0.0003' in out and '"x": 0.1' in out and '"big": 1e+300' in out, out
    assert '"neg": -2.5' in out and '"third": 0.3333333333333333' in out, out
    assert " of data in 1 buffer," in out, out  # singular


def test_the_installed_cli_reports_each_tensors_own_size(tmp_path):
    """A 12-byte tensor is 12 B in `hurray info`, wherever its source lay in memory."""
    cli = Path(sysconfig.get_path("scripts")) / "hurray"
    if not cli.exists():
        pytest.skip("the hurray command is not installed beside this interpreter")
    path = tmp_path / "m.hurray"
    hurray.save(path, {"a": np.arange(3, dtype=np.float32), "b": np.arange(40, dtype=np.int8)[1:]})
    out = subprocess.run([cli, "info", path], capture_output=True, text=True, check=True).stdout
    assert "12 B in 1 buffer" in out and "39 B in 1 buffer" in out, out


# ============================================================================================
# Sources: the bytes of a file, file objects
# ============================================================================================


def _a_file(path):
    hurray.save(path, {"w": np.arange(6, dtype=np.float32), "b": u8(b"xyz")}, {"arch": "tiny"})
    return path.read_bytes()


@pytest.mark.parametrize("kind", ["bytes", "bytearray", "memoryview"])
def test_load_and_open_read_the_bytes_of_a_file(path, kind):
    data = {"bytes": bytes, "bytearray": bytearray, "memoryview": memoryview}[kind](_a_file(path))
    assert hurray.load(data)["w"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    with hurray.open(data) as f:
        assert f.metadata == {"arch": "tiny"} and f["b"].tobytes() == b"xyz"
        assert f.path == f"<{len(data) if kind != 'memoryview' else data.nbytes} bytes>"


def test_an_aligned_image_is_read_in_place_and_kept_exported(path):
    """A mapping of a Hurray file (page-aligned) is read zero-copy: the tensor lies in the
    mapping, which cannot be closed while the tensor lives."""
    import mmap
    _a_file(path)
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    start = np.frombuffer(m, np.uint8).ctypes.data
    w = hurray.load(m)["w"]
    assert start <= w.buffers[0]["address"] < start + len(m)
    assert w.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0] and w.readonly
    with pytest.raises(BufferError):
        m.close()
    del w
    gc.collect()
    m.close()


def test_unaligned_bytes_and_mmap_false_are_copied_once(path):
    data = b"\0" + _a_file(path)
    w = hurray.load(memoryview(data)[1:])["w"]  # misaligned: read from a copy
    assert w.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    writable = hurray.load(data[1:], mmap=False)["w"]
    assert not writable.readonly
    np.asarray(writable)[0] = 7  # its own memory
    assert hurray.load(data[1:])["w"].tolist()[0] == 0.0


def test_file_objects_are_read_through_their_descriptor_or_read(path):
    import io
    data = _a_file(path)
    with open(path, "rb") as f:
        assert hurray.load(f)["b"].tobytes() == b"xyz"
        with hurray.open(f) as opened:
            assert opened.path == str(path) and "w" in opened
    assert hurray.load(io.BytesIO(data))["w"].tolist()[5] == 5.0
    with open(path, "rb") as f:  # not at its start: read from where it stands, like torch.load
        f.read(0)
        assert hurray.load(io.BufferedReader(io.BytesIO(data)))["b"].tobytes() == b"xyz"


def test_every_format_the_loader_reads_comes_from_bytes_too(path):
    import io
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    blob = safetensors_numpy.save({"x": np.ones(3, np.float32)})
    assert hurray.load(blob)["x"].tolist() == [1.0, 1.0, 1.0]
    npy = io.BytesIO()
    np.save(npy, np.arange(4, dtype=np.int16))
    npy.seek(0)
    assert list(hurray.load(npy).values())[0].tolist() == [0, 1, 2, 3]


def test_what_is_no_source_is_refused_naming_what_is(path):
    import io
    with pytest.raises(hurray.FormatError, match="not a Hurray file"):
        hurray.load(b"\0 not a file")
    with pytest.raises(TypeError, match=r"read\(\) returned no bytes: a binary file object"):
        hurray.load(io.StringIO("text"))
    with pytest.raises(TypeError, match="expected a path .*, not int"):
        hurray.load(12)
    with pytest.raises(FileNotFoundError):  # bytes without a NUL stay a path, as for os.open
        hurray.open(bytes(path) + b".missing")


def _huge_mapped_kib(path):
    """The KiB of `path`'s mappings in this process that 2 MiB page-table entries map (Linux's
    /proc/self/smaps FilePmdMapped), or None off Linux."""
    if not os.path.exists("/proc/self/smaps"):
        return None
    total, ours = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 5:  # a mapping's header line
                ours = fields[-1] == str(path)
            elif ours and fields[0] == "FilePmdMapped:":
                total += int(fields[1])
    return total


@pytest.mark.parametrize("written_by", ["save", "convert"])
def test_a_written_file_maps_with_huge_pages_where_the_page_cache_has_them(tmp_path, written_by):
    """hurray.save and hurray.convert write large tensors in calls that cover whole 2 MiB blocks
    of the file, so the page cache holds 2 MiB folios and a mapped load faults and misses the
    TLB once per 2 MiB (what a single large write, as safetensors makes, gets). Before: save's
    1 MiB pieces at offset 64 got no huge mapping, and mapped loads were 1.3x slower than
    safetensors.torch's; convert's 4 MiB chunks got half."""
    import mmap
    size = 16 << 20
    reference = tmp_path / "one-write.bin"
    reference.write_bytes(os.urandom(size))
    with open(reference, "rb") as f, mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ) as m:
        np.frombuffer(m, np.uint8)[::4096].sum()
        if not _huge_mapped_kib(reference):
            pytest.skip("this kernel and file system give buffered writes no mappable 2 MiB "
                        "page-cache folios (or THP is off)")
    path = tmp_path / "written.hurray"
    values = np.arange(size // 4 + 123, dtype=np.float32)  # data starts at a small offset
    if written_by == "save":
        hurray.save(path, {"w": hurray.from_numpy(values)})
    else:
        np.save(tmp_path / "w.npy", values)
        hurray.convert(tmp_path / "w.npy", path)
    w = next(iter(hurray.load(path).values()))
    assert float(np.asarray(w)[::1024].sum()) == float(values[::1024].sum())  # every page
    # Every 2 MiB block inside the data but the first, which the header shares.
    assert _huge_mapped_kib(path) >= (size - (2 << 20)) >> 10
