"""docs/spec/file-format.md is precise enough for a second implementation.

spec_file.py is a reader and a writer written from the spec alone. Here it meets hurray: every
file hurray writes (every dtype, every layout, strided and empty sources, metadata, `hurray
convert`'s output) reads the same in both readers, field for field and byte for byte; hurray's
writer and the spec's write the same bytes for the same tensors; and the files the spec says a
reader must refuse are refused by both, each with the status the spec names."""

import ctypes
import math
import re
import struct
from pathlib import Path

import pytest

import hurray
from conftest import peer
from test_file import METADATA, dense_cases, u8
from test_native_layouts import LAYOUTS

np = peer("numpy")
peer("xxhash")
import spec_file  # noqa: E402  (needs xxhash)
from spec_file import encode_varint as V, encode_zigzag as Z, xxh3  # noqa: E402

SPEC = Path(__file__).resolve().parents[2] / "docs" / "spec" / "file-format.md"

# The class hurray raises for each status (python-bindings.md, "Error Handling").
RAISES = {"EFORMAT": hurray.FormatError, "ECHECKSUM": hurray.ChecksumError,
          "ELIMIT": hurray.LimitError, "EOVERFLOW": hurray.LimitError,
          "EDTYPE": hurray.DTypeError, "EALIGN": hurray.DescriptorError,
          "ELAYOUT": hurray.LayoutError, "EBOUNDS": hurray.LayoutError,
          "EUNSUPPORTED": hurray.UnsupportedError}


@pytest.fixture
def path(tmp_path):
    return tmp_path / "m.hurray"


# ============================================================================================
# Comparing the two readers
# ============================================================================================


def same_value(a, b):
    """Metadata values equal in type and bits (True is not 1, -0.0 is not 0.0)."""
    assert type(a) is type(b), (a, b)
    if isinstance(a, float):
        assert struct.pack("<d", a) == struct.pack("<d", b)
    elif isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            same_value(x, y)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            same_value(a[k], b[k])
    else:
        assert a == b


def same_node(s, h, buffers):
    """A node of the spec reader equals hurray's tensor: descriptor, parts (dtype, shape,
    strides, buffer, byte offset, elements) and children."""
    assert h.layout == s.layout
    assert (h.axis, h.block_size, h.coalesced) == (s.axis, s.block_size, s.coalesced)
    if s.layout == "composite":
        assert list(h.children) == list(s.children)
        for name, child in s.children.items():
            same_node(child, h.children[name], buffers)
        return
    assert (h.dtype.name, h.shape) == (s.dtype, s.shape)
    assert len(h.parts) == len(s.parts)
    for p, q in zip(h.parts, s.parts):
        assert (p.dtype.name, p.shape) == (q.dtype, q.shape)
        assert p.strides == (q.strides or q.row_major_strides())
        assert p.buffer_address == h.buffers[q.buffer]["address"]
        assert p.byte_offset == q.byte_offset
        if q.bits % 8 == 0 or q.strides is None:  # hurray packs only contiguous sub-byte runs
            assert p.tobytes() == q.tobytes(buffers)


def both_read(path):
    """Reads `path` with both readers and asserts they agree on everything; returns the spec
    reader's result."""
    raw = path.read_bytes()
    spec = spec_file.read(raw)
    loaded = hurray.load(path, verify=True)
    assert list(loaded) == list(spec.tensors)
    for name, s in spec.tensors.items():
        h = loaded[name]
        assert [b["role"] for b in h.buffers] == [b.role for b in s.buffers]
        for b, sb in zip(h.buffers, s.buffers):
            assert b["byte_size"] == sb.size and b["address"] % spec.alignment == 0
            assert ctypes.string_at(b["address"], b["byte_size"]) == sb.data
        same_node(s.node, h, s.buffers)
    with hurray.open(path) as f:
        info = f.info
        assert (info["version"], info["alignment"], info["file_size"]) == \
               (spec.version, spec.alignment, len(raw))
        assert info["tensors"] == len(spec.tensors)
        assert info["buffers"] == sum(len(t.buffers) for t in spec.tensors.values())
        assert info["data_bytes"] == sum(b.size for t in spec.tensors.values()
                                         for b in t.buffers)
        same_value(f.metadata, spec.metadata)
        for name, s in spec.tensors.items():
            same_value(f.tensor_metadata(name), s.metadata)
    return spec


def every_dtype_bytes():
    """One tensor of each dtype of dtypes.md as the spec writer takes it: (dtype, shape [3, 5],
    bytes from a counter, the unused bits of a last sub-byte byte included)."""
    out = {}
    for code, (name, _, bits) in spec_file.DTYPES.items():
        raw = bytes((code * 7 + i * 13) % 256 for i in range(-(-15 * bits // 8)))
        out[name] = (name, (3, 5), bytes(b & 1 for b in raw) if name == "bool" else raw)
    return out


def as_tensor(dtype, shape, raw):
    return hurray.Tensor(raw, getattr(hurray.dtype, dtype), list(shape))


def every_dtype():
    return {name: as_tensor(*spec) for name, spec in every_dtype_bytes().items()}


def numpy_sources():
    big = np.arange(300_000, dtype=np.float32)
    grid = np.arange(2 * 3 * 4, dtype=np.int64).reshape(2, 3, 4)
    return {
        "large": big,  # 1.2 MB
        "slice": big[7:1007],
        "negative": big[1000:10:-7],
        "window": big[:600].reshape(20, 30)[3:, 7:],
        "fortran": np.asfortranarray(grid.astype(np.float64)),
        "transposed": grid.transpose(2, 0, 1),
        "broadcast": np.broadcast_to(np.arange(4, dtype=np.int16), (3, 4)),
        "zero_d": np.array(-2.5, dtype=np.float32),
        "empty": np.zeros((4, 0, 2), dtype=np.uint16),
        "complex": np.array([1 - 2j, 3.5j], dtype=np.complex64),
        "bool": np.array([[True, False], [False, True]]),
    }


def strided_subbyte():
    """Sub-byte parts whose strides put elements in the middle of bytes."""
    data = bytes(range(0x10, 0x30))
    return {
        "int4_strided": hurray.Tensor(data, hurray.dtype.int4, [4, 3], strides=[7, 2]),
        "uint1_reversed": hurray.Tensor(data, hurray.dtype.uint1, [9], strides=[-3],
                                        byte_offset=4),
        "float6": hurray.Tensor(data, hurray.dtype.float6_e3m2fn, [2, 5], strides=[9, 1],
                                byte_offset=1),
    }


SOURCES = {
    "every_dtype": every_dtype,
    "dense_cases": dense_cases,
    "numpy": numpy_sources,
    "strided_subbyte": strided_subbyte,
    "layouts": lambda: {name: make() for name, make in LAYOUTS.items()},
    "many": lambda: {f"t{i}": np.full(i % 5, i, np.int32) for i in range(3000)},
}


@pytest.mark.parametrize("alignment", [64, 4096])
@pytest.mark.parametrize("source", SOURCES.values(), ids=SOURCES.keys())
def test_both_readers_read_what_hurray_saves_alike(path, source, alignment):
    tensors = source()
    hurray.save(path, tensors, alignment=alignment)
    spec = both_read(path)
    assert spec.alignment == alignment and list(spec.tensors) == list(tensors)


def test_both_readers_read_the_same_metadata(path):
    tensor_metadata = {"w": {"quant": {"bits": 4, "group": [1, 2]}, "nan": float("nan")},
                       "b": {}}
    hurray.save(path, {"w": u8(b"abc"), "b": u8(b"d")}, METADATA,
                tensor_metadata=tensor_metadata)
    spec = both_read(path)
    assert spec.metadata == METADATA and list(spec.metadata) == sorted(METADATA)
    assert spec.tensors["w"].metadata["quant"] == {"bits": 4, "group": [1, 2]}


def test_both_readers_read_what_convert_writes(tmp_path):
    peer("safetensors")
    from safetensors.numpy import save_file
    arrays = {"w": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.array([1, -2]),
              "e": np.zeros((0, 3), np.float16), "s": np.array(True)}
    save_file(arrays, tmp_path / "m.safetensors", metadata={"format": "pt"})
    np.save(tmp_path / "m.npy", arrays["w"])
    np.savez(tmp_path / "m.npz", **arrays)
    for source in ("m.safetensors", "m.npy", "m.npz"):
        out = tmp_path / f"{source}.hurray"
        hurray.convert(tmp_path / source, out)
        spec = both_read(out)
        for name, t in spec.tensors.items():
            want = arrays["w" if source == "m.npy" else name]
            got = t.node.parts[0].to_numpy(t.buffers)
            assert got.dtype == want.dtype and np.array_equal(got, want), (source, name)


# ============================================================================================
# Comparing the two writers
# ============================================================================================


def both_forms(tensors):
    """NumPy arrays and spec writer triples (dtype, shape, bytes) as hurray.save takes them and
    as the spec writer takes them."""
    for_hurray, for_spec = {}, {}
    for name, t in tensors.items():
        if isinstance(t, tuple):
            for_hurray[name], for_spec[name] = as_tensor(*t), t
        else:
            for_hurray[name], for_spec[name] = t, (t.dtype.name, t.shape, t.tobytes())
    return for_hurray, for_spec


WRITES = {
    "nothing": ({}, {}),
    "every_dtype": (every_dtype_bytes(), {}),
    "empty_and_0d": ({"e": ("int16", (0, 5), b""), "x": np.array(7, np.uint8),
                      "e2": ("float64", (0,), b"")}, {}),
    "numpy_contiguous": ({"a": np.arange(12, dtype=np.float32).reshape(3, 4),
                          "b": np.ones((2, 2, 2), np.complex128)}, {}),
    "metadata": ({"w": np.arange(3, dtype=np.int8)}, {"metadata": METADATA,
                                                     "tensor_metadata": {"w": {"k": [1.5]}}}),
    "empty_metadata": ({"w": np.arange(3, dtype=np.int8)}, {"metadata": {},
                                                           "tensor_metadata": {"w": {}}}),
    # §3, §7: version 2.1 where, and only where, a null or an integer outside int64 is written
    "metadata_2_1": ({"w": np.arange(3, dtype=np.int8)}, {
        "metadata": {"n": None, "big": 2 ** 64, "small": -(2 ** 63) - 1, "edge": 2 ** 63 - 1,
                     "digits": -int("9" * 1023), "list": [None, {"x": None}]},
        "tensor_metadata": {"w": {"k": [1.5]}}}),
    "tensor_metadata_2_1": ({"w": np.arange(3, dtype=np.int8), "v": np.ones(2, np.uint8)},
                            {"tensor_metadata": {"v": {"pad": None}}}),
    "many": ({f"t{i}": np.full(2, i, np.float32) for i in range(1500)}, {}),
}


@pytest.mark.parametrize("alignment", [64, 128, 4096])
@pytest.mark.parametrize("tensors, options", WRITES.values(), ids=WRITES.keys())
def test_hurray_writes_the_bytes_the_spec_prescribes(path, tensors, options, alignment):
    """§4, §5 and §10 leave a writer of dense contiguous tensors no choice: hurray.save and the
    spec writer make the same file. NumPy arrays come with explicit row-major strides, which
    a writer leaves out like NULL ones (§6.3)."""
    for_hurray, for_spec = both_forms(tensors)
    hurray.save(path, for_hurray, options.get("metadata"), alignment=alignment,
                tensor_metadata=options.get("tensor_metadata"))
    assert path.read_bytes() == spec_file.write(for_spec, options.get("metadata"), alignment,
                                                options.get("tensor_metadata"))


def test_numpy_and_torch_sources_store_no_row_major_strides(path):
    """Regression: a contiguous array spelled with explicit strides (NumPy, DLPack) used to be
    written with them, one byte and a stride per axis more than §6.3 allows."""
    torch = peer("torch")
    sources = {"np": np.arange(6, dtype=np.float32).reshape(2, 3),
               "torch": torch.arange(6, dtype=torch.int16).reshape(3, 2)}
    hurray.save(path, sources)
    spec = spec_file.read(path.read_bytes())
    assert [t.node.parts[0].strides for t in spec.tensors.values()] == [None, None]
    hurray.save(path, {"t": np.arange(6, dtype=np.float32).reshape(2, 3).T})
    assert spec_file.read(path.read_bytes()).tensors["t"].node.parts[0].strides == (1, 3)


def spec_example():
    """The bytes of file-format.md §11, from its hex dump."""
    text = SPEC.read_text()
    dump = text[text.index("## 11. Example"):].split("```")[1]
    out = bytearray()
    for line in dump.splitlines():
        m = re.match(r"([0-9a-f]{4})    ((?:[0-9a-f]{2} )*[0-9a-f]{2})", line)
        if m:
            assert int(m.group(1), 16) == len(out), line
            out += bytes.fromhex(m.group(2))
    return bytes(out)


def test_the_spec_example_is_what_both_writers_write(path):
    example = spec_example()
    assert len(example) == 186
    assert spec_file.write({"x": ("float32", (2,), struct.pack("<2f", 1, 2))}) == example
    hurray.save(path, {"x": np.array([1, 2], np.float32)})
    assert path.read_bytes() == example
    assert spec_file.read(example).tensors["x"].node.parts[0].strides is None


def test_hurray_reads_what_the_spec_writer_writes(path):
    ml_dtypes = peer("ml_dtypes")
    values = {
        "f32": np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4),
        "u64": np.array([0, 2 ** 64 - 1, 12345], dtype=np.uint64),
        "c128": np.array([[1 + 2j], [-0.0 - 1j]]),
        "bool": np.array([True, False, True]),
        "bf16": np.array([1.5, -2, 3e38], dtype=ml_dtypes.bfloat16),
        "scalar": np.array(-7, dtype=np.int16),
        "empty": np.zeros((2, 0), np.float64),
    }
    tensors = {name: (a.dtype.name, a.shape, a.tobytes()) for name, a in values.items()}
    tensors["int4"] = ("int4", (5,), bytes([0xE1, 0x87, 0x03]))  # dtypes.md §5.1
    tensors["float6"] = ("float6_e2m3fn", (4,), bytes([0xC8, 0xC7, 0xC0]))  # §5.2
    metadata = {"name": "spec", "layers": [1, 2.5, True, {"deep": {}}]}
    path.write_bytes(spec_file.write(tensors, metadata, alignment=256,
                                     tensor_metadata={"f32": {"scale": 0.5}}))
    loaded = hurray.load(path, verify=True)
    assert list(loaded) == list(tensors)
    for name, a in values.items():
        t = loaded[name]
        assert (t.dtype.name, t.shape) == (a.dtype.name, a.shape)
        assert t.buffers[0]["address"] % 256 == 0
        assert t.tobytes() == a.tobytes()
    assert np.array_equal(np.from_dlpack(loaded["u64"]), values["u64"])
    assert loaded["int4"].tobytes() == bytes([0xE1, 0x87, 0x03])
    assert loaded["float6"].tobytes() == bytes([0xC8, 0xC7, 0xC0])
    with hurray.open(path, mmap=False) as f:
        assert f.metadata == metadata and f.tensor_metadata("f32") == {"scale": 0.5}
        assert f.info["alignment"] == 256
        assert np.array_equal(f["f32"].__array__(), values["f32"])
        assert f["int4"].tobytes() == bytes([0xE1, 0x87, 0x03])
        f.verify()


# ============================================================================================
# What a reader must refuse, both readers refuse
# ============================================================================================

FLOATS = struct.pack("<2f", 1, 2)
BASE = spec_file.write({"a": ("float32", (2,), FLOATS), "b": ("uint8", (3,), b"xyz")},
                       {"k": 1})
INDEX = struct.unpack_from("<Q", BASE, 24)[0]
DENSE = bytes([0, 10, 1, 1, 0]) + V(2) + b"\0"  # dense float32 [2], a one-byte part
ENTRY = b"\0" + V(1) + V(8) + struct.pack("<Q", xxh3(FLOATS))  # values at 64, 8 bytes


def record(name=b"a", buffers=(ENTRY,), node=DENSE, metadata=b"", metadata_length=None):
    """A compact record (§6) for tensor 0 of BASE."""
    length = len(metadata) if metadata_length is None else metadata_length
    return (bytes([len(name)]) + name + V(length) + V(len(buffers)) + b"".join(buffers) + node
            + metadata)


def with_record(**fields):
    return spec_file.replace_record(BASE, 0, record(**fields))


def with_node(node):
    return with_record(node=node)


def composite(*children):
    return bytes([6, 0, 0, 0, 8]) + V(len(children)) + b"".join(
        bytes([len(name)]) + name + node for name, node in children)


def patched(at, fmt, *values, data=BASE, sealed=True):
    """`data` with `values` packed at `at`, resealed (so that the checks behind the checksums
    see the change: the header's alone for a change to the header) unless `sealed` is false."""
    out = bytearray(data)
    struct.pack_into(fmt, out, at, *values)
    if not sealed:
        return bytes(out)
    return spec_file.seal_header(out) if 0 <= at < 64 else spec_file.seal(out)


def nested(depth):
    node = DENSE
    for _ in range(depth):
        node = composite((b"c", node))
    return node


def meta_map(*entries):
    return b"\x06" + struct.pack("<I", len(entries)) + b"".join(entries)


def meta_entry(key, value):
    return struct.pack("<H", len(key)) + key + value


def odd_index_offset():
    out = bytearray(BASE[:INDEX] + b"\0" + BASE[INDEX:])
    struct.pack_into("<QQ", out, 16, len(out), INDEX + 1)
    return spec_file.seal(out)


def duplicate_names():
    second = spec_file.record_span(BASE, 1)
    renamed = BASE[second[0]:second[1]].replace(b"\x01b", b"\x01a", 1)
    return spec_file.reindex(spec_file.replace_record(BASE, 1, renamed))


def swapped_names():
    """The name table's two entries swapped: each tensor listed in the other's bucket."""
    at = INDEX + 64 + 4 * 3
    first, second = struct.unpack_from("<II", BASE, at)
    return patched(at, "<II", second, first)


def overlapping_tensors():
    """Tensor b's buffer is tensor a's bytes: each tensor is valid, the file is not (§4)."""
    b = b"\x01b" + V(0) + V(1) + ENTRY + DENSE
    return patched(INDEX + 32, "<Q", 16, data=spec_file.replace_record(BASE, 1, b))


def corrupt_last_chunk():
    """A byte of the last of several index chunks flipped (the checksums left as they were)."""
    data = spec_file.write({f"t{i}": ("uint8", (1,), bytes([i % 256])) for i in range(600)})
    index_offset, index_length = struct.unpack_from("<QQ", data, 24)
    assert index_length > 4096
    at = index_offset + index_length - 2
    return patched(at, "<B", data[at] ^ 1, data=data, sealed=False)


REFUSED = {
    # §9 rows 1-9: open
    "bad magic": (lambda: b"\x89HRZ" + BASE[4:], "EFORMAT"),
    "another format": (lambda: b"PK\x03\x04", "EFORMAT"),
    "a prefix of the magic": (lambda: BASE[:5], "EFORMAT"),
    "truncated header": (lambda: BASE[:40], "EFORMAT"),
    "version 2.3": (lambda: patched(10, "<H", 3), "EUNSUPPORTED"),
    "version 1.0": (lambda: patched(8, "<H", 1), "EUNSUPPORTED"),
    "header checksum": (lambda: patched(56, "<B", BASE[56] ^ 1, sealed=False), "ECHECKSUM"),
    "reserved header bytes": (lambda: patched(14, "<H", 1), "EFORMAT"),
    "alignment 2^5": (lambda: patched(12, "<B", 5), "EALIGN"),
    "alignment 2^22": (lambda: patched(12, "<B", 22), "EALIGN"),
    # §9: a row's checks report in the order the row lists them
    "reserved header bytes before alignment": (lambda: patched(14, "<H", 1,
                                                               data=patched(12, "<B", 5)),
                                               "EFORMAT"),
    "alignment before chunk size": (lambda: patched(12, "<B", 5, data=patched(13, "<B", 11)),
                                    "EALIGN"),
    "chunk 2^11": (lambda: patched(13, "<B", 11), "EFORMAT"),
    "chunk 2^29": (lambda: patched(13, "<B", 29), "EFORMAT"),
    "truncated file": (lambda: BASE[:-1], "EFORMAT"),
    "trailing bytes": (lambda: BASE + b"\0", "EFORMAT"),
    "index_length over 2^28": (lambda: patched(32, "<Q", (1 << 28) + 8), "ELIMIT"),
    "index shorter than 64": (lambda: patched(32, "<Q", 8), "EFORMAT"),
    "index inside the header": (lambda: patched(24, "<Q", 60), "EFORMAT"),
    "index_offset not a multiple of 8": (odd_index_offset, "EALIGN"),
    "chunk table checksum": (lambda: patched(-1, "<B", BASE[-1] ^ 1, sealed=False),
                             "ECHECKSUM"),
    "index header chunk": (lambda: patched(INDEX + 40, "<B", 1, sealed=False), "ECHECKSUM"),
    "a later index chunk": (corrupt_last_chunk, "ECHECKSUM"),
    "tensor_count over 2^20": (lambda: patched(INDEX, "<I", (1 << 20) + 1), "ELIMIT"),
    "buffer_count over 2^24": (lambda: patched(INDEX + 4, "<I", (1 << 24) + 1), "ELIMIT"),
    "bucket_bits 21": (lambda: patched(INDEX + 8, "<I", 21), "ELIMIT"),
    "file metadata over 2^26": (lambda: patched(INDEX + 24, "<I", (1 << 26) + 1), "ELIMIT"),
    "reserved index bytes": (lambda: patched(INDEX + 40, "<Q", 1), "EFORMAT"),
    "tables longer than the index": (lambda: patched(INDEX, "<I", 1000), "EFORMAT"),
    "file metadata outside the heap": (lambda: patched(INDEX + 16, "<Q", 64), "EBOUNDS"),
    "metadata_offset without metadata": (lambda: patched(INDEX + 24, "<I", 0), "EBOUNDS"),
    # §5.2, §5.3: tables
    "record outside the heap": (lambda: patched(INDEX + 64, "<I", 4), "EBOUNDS"),
    "name table entry past the tensors": (lambda: patched(INDEX + 76, "<I", 7), "EFORMAT"),
    "tensor in another's bucket": (swapped_names, "EFORMAT"),
    "bucket table bounds": (lambda: patched(INDEX + 84, "<I", 9), "EFORMAT"),
    "tensor missing from its bucket": (lambda: patched(INDEX + 92, "<I", 1), "EFORMAT"),
    "duplicate tensor names": (duplicate_names, "EFORMAT"),
    # §6: records
    "empty name": (lambda: with_record(name=b""), "EFORMAT"),
    "name not UTF-8": (lambda: with_record(name=b"\xc0\xaf"), "EFORMAT"),
    "name with NUL": (lambda: with_record(name=b"a\0"), "EFORMAT"),
    "trailing record bytes": (lambda: spec_file.replace_record(BASE, 0, record() + b"\0"),
                              "EFORMAT"),
    "truncated record": (lambda: spec_file.replace_record(BASE, 0, record()[:-1]), "EFORMAT"),
    "metadata_length over 2^32 - 1": (lambda: with_record(metadata_length=1 << 32), "EFORMAT"),
    "65537 buffers": (lambda: with_record(buffers=[ENTRY] * 65537), "ELIMIT"),
    "role 9": (lambda: with_record(buffers=[b"\x09" + ENTRY[1:]]), "EFORMAT"),
    "varint of 11 bytes": (lambda: with_node(DENSE[:5] + b"\x80" * 10 + b"\0\0"), "EFORMAT"),
    "varint over 2^64 - 1": (lambda: with_node(DENSE[:5] + b"\xff" * 9 + b"\x02\0"),
                             "EFORMAT"),
    "ndim 65": (lambda: with_node(bytes([0, 10, 65, 1, 0]) + V(2) * 65 + b"\0"), "ELIMIT"),
    "4 parts": (lambda: with_node(bytes([0, 10, 1, 4, 0]) + V(2) + b"\0" * 4), "ELIMIT"),
    "65537 children": (lambda: with_node(bytes([6, 0, 0, 0, 8]) + V(65537)), "ELIMIT"),
    "reserved present bits": (lambda: with_node(bytes([0, 10, 1, 1, 0x10]) + V(2) + b"\0"),
                              "EFORMAT"),
    "flags over 2^32 - 1": (lambda: with_node(bytes([0, 10, 1, 1, 1]) + V(1 << 32) + V(2)
                                              + b"\0"), "EFORMAT"),
    "unknown tensor flags": (lambda: with_node(bytes([0, 10, 1, 1, 1]) + V(2) + V(2) + b"\0"),
                             "EFORMAT"),
    "axis beyond 32 bits": (lambda: with_node(bytes([0, 10, 1, 1, 2]) + Z(1 << 31) + V(2)
                                              + b"\0"), "EFORMAT"),
    "negative extent": (lambda: with_node(DENSE[:5] + V(1 << 63) + b"\0"), "EFORMAT"),
    "extent over 2^62": (lambda: with_node(DENSE[:5] + V((1 << 62) + 1) + b"\0"), "ELIMIT"),
    "reserved part flags": (lambda: with_node(DENSE[:-1] + b"\x20"), "EFORMAT"),
    "strides of a 0-d part": (lambda: with_node(bytes([0, 10, 0, 1, 0]) + b"\x01"), "EFORMAT"),
    "part buffer over 2^32 - 1": (lambda: with_node(DENSE[:-1] + b"\x08" + V(1 << 32)),
                                  "EFORMAT"),
    "part buffer past the list": (lambda: with_node(DENSE[:-1] + b"\x08\x01"), "EFORMAT"),
    "empty child name": (lambda: with_node(composite((b"", DENSE))), "EFORMAT"),
    "child name not UTF-8": (lambda: with_node(composite((b"\xed\xa0\x80", DENSE))), "EFORMAT"),
    "children nested 9 deep": (lambda: with_node(nested(9)), "ELIMIT"),
    # §4: buffers
    "buffer before the data region": (lambda: with_record(buffers=[b"\0\0" + ENTRY[2:]]),
                                      "EBOUNDS"),
    "buffer past the data region": (lambda: with_record(buffers=[b"\0" + V(9) + ENTRY[2:]]),
                                    "EBOUNDS"),
    "buffer offset overflows": (lambda: with_record(buffers=[b"\0" + V(1 << 60) + ENTRY[2:]]),
                                "EBOUNDS"),
    "buffers of a tensor overlap": (lambda: with_record(buffers=[ENTRY, ENTRY]), "EFORMAT"),
    "buffers of two tensors overlap": (overlapping_tensors, "EFORMAT"),
    # §6.5: the tensor validator
    "unknown layout": (lambda: with_node(b"\x07" + DENSE[1:]), "ELAYOUT"),
    "unknown dtype": (lambda: with_node(DENSE[:1] + b"\x0e" + DENSE[2:]), "EDTYPE"),
    "a dense tensor of two parts": (lambda: with_node(bytes([0, 10, 1, 2, 0]) + V(2) + b"\0\0"),
                                    "ELAYOUT"),
    "coalesced dense": (lambda: with_node(bytes([0, 10, 1, 1, 1]) + V(1) + V(2) + b"\0"),
                        "ELAYOUT"),
    "axis of a dense tensor": (lambda: with_node(bytes([0, 10, 1, 1, 2]) + Z(1) + V(2)
                                                 + b"\0"), "ELAYOUT"),
    "part past its buffer": (lambda: with_node(DENSE[:5] + V(3) + b"\0"), "EBOUNDS"),
    "part byte_offset overflows": (lambda: with_node(DENSE[:-1] + b"\x10" + V(1 << 61)),
                                   "EOVERFLOW"),
    "composite without children": (lambda: with_node(bytes([6, 0, 0, 0, 0])), "ELAYOUT"),
    "duplicate child names": (lambda: with_node(composite((b"w", DENSE), (b"w", DENSE))),
                              "ELAYOUT"),
    # §7: metadata
    "metadata not a map": (lambda: with_record(metadata=b"\x02" + bytes(8)), "EFORMAT"),
    "unknown metadata type": (lambda: with_record(metadata=meta_map(meta_entry(b"k", b"\x09"))),
                              "EFORMAT"),
    "null with a nonzero byte": (lambda: with_record(metadata=meta_map(meta_entry(b"k",
                                                                                 b"\x07\x01"))),
                                 "EFORMAT"),
    **{f"integer {text!r}": (lambda text=text: with_record(metadata=meta_map(meta_entry(
        b"k", b"\x08" + struct.pack("<I", len(text)) + text))), "EFORMAT")
       for text in (b"", b"-", b"-0", b"0", b"007" + b"9" * 20, b"12", b"9223372036854775807",
                    b"-9223372036854775808", b"+9223372036854775808", b"1e30",
                    b"9" * 1025, "\u0661".encode() * 20)},
    "bool 2": (lambda: with_record(metadata=meta_map(meta_entry(b"k", b"\x01\x02"))),
               "EFORMAT"),
    "keys out of order": (lambda: with_record(metadata=meta_map(
        meta_entry(b"b", b"\x01\x01"), meta_entry(b"a", b"\x01\x01"))), "EFORMAT"),
    "key longer than 255": (lambda: with_record(metadata=meta_map(
        meta_entry(b"k" * 256, b"\x01\x01"))), "ELIMIT"),
    "key with NUL": (lambda: with_record(metadata=meta_map(meta_entry(b"k\0", b"\x01\x01"))),
                     "EFORMAT"),
    "string not UTF-8": (lambda: with_record(metadata=meta_map(
        meta_entry(b"k", b"\x04\x01\0\0\0\xff"))), "EFORMAT"),
    "metadata nested 17 levels": (lambda: with_record(metadata=meta_map(meta_entry(
        b"k", b"\x05\x01\0\0\0" * 15 + b"\x05\0\0\0\0"))), "ELIMIT"),
    "trailing metadata bytes": (lambda: with_record(metadata=meta_map() + b"\0"), "EFORMAT"),
    "a count the block cannot hold": (lambda: with_record(metadata=meta_map()[:1]
                                                          + b"\xff\xff\xff\xff"), "EFORMAT"),
    "metadata block over 2^24": (lambda: with_record(metadata=meta_map(meta_entry(
        b"k", b"\x04" + struct.pack("<I", 1 << 24) + bytes(1 << 24)))), "ELIMIT"),
    # §5.1, §9: what verifying the whole file checks
    "buffer_count of the index header": (lambda: patched(INDEX + 4, "<I", 3), "EFORMAT"),
    "data_bytes of the index header": (lambda: patched(INDEX + 32, "<Q", 12), "EFORMAT"),
    "a flipped data byte": (lambda: patched(64, "<B", 0x01, sealed=False), "ECHECKSUM"),
    "padding between buffers": (lambda: patched(100, "<B", 1, sealed=False), "EFORMAT"),
    "padding before the index": (lambda: patched(INDEX - 1, "<B", 1, sealed=False), "EFORMAT"),
}


def hurray_uses_everything(path):
    """Opens `path` and uses every part of it, then verifies it."""
    with hurray.open(path) as f:
        f.metadata
        for name in f:
            f.tensor_metadata(name)
            f[name].children if f[name].layout == "composite" else f[name].parts
        f.verify()


@pytest.mark.parametrize("make, status", REFUSED.values(), ids=REFUSED.keys())
def test_both_readers_refuse_what_the_spec_refuses(path, make, status):
    data = make()
    with pytest.raises(spec_file.SpecFileError) as spec_refusal:
        spec_file.read(data)
    assert spec_refusal.value.status == status, spec_refusal.value
    path.write_bytes(data)
    with pytest.raises(hurray.HurrayError) as refusal:
        hurray_uses_everything(path)
    assert type(refusal.value) is RAISES[status], refusal.value


ACCEPTED = {
    # §5.5: a chunk larger than the writer's choice
    "chunks of 2^13": lambda: patched(13, "<B", 13),
    # §1: a varint's redundant zero groups, within 10 bytes
    "non-minimal varint": lambda: with_node(DENSE[:5] + b"\x82\x80\x80\x00" + b"\0"),
    # §6.2, §6.3: a bit set for a field at its default value
    "flags present at 0": lambda: with_node(bytes([0, 10, 1, 1, 1]) + V(0) + V(2) + b"\0"),
    "axis present at 0": lambda: with_node(bytes([0, 10, 1, 1, 2]) + Z(0) + V(2) + b"\0"),
    "the node's dtype again": lambda: with_node(DENSE[:-1] + b"\x02\x0a"),
    "the node's shape again": lambda: with_node(DENSE[:-1] + b"\x04\x01\x02"),
    "buffer 0 explicit": lambda: with_node(DENSE[:-1] + b"\x08\x00"),
    "byte_offset 0 explicit": lambda: with_node(DENSE[:-1] + b"\x10\x00"),
    "row-major strides": lambda: with_node(DENSE[:-1] + b"\x01\x02"),
    # §7: an empty map spelled out; NUL inside a string; 16 levels
    "an encoded empty map": lambda: with_record(metadata=meta_map()),
    "NUL in a string": lambda: with_record(metadata=meta_map(
        meta_entry(b"k", b"\x04\x01\0\0\0\0"))),
    "metadata nested 16 levels": lambda: with_record(metadata=meta_map(meta_entry(
        b"k", b"\x05\x01\0\0\0" * 14 + b"\x05\0\0\0\0"))),
    # §3, §7: null and integer in a file labelled 2.0 (2.1's types are accepted there too)
    "null in a 2.0 file": lambda: with_record(metadata=meta_map(meta_entry(b"k", b"\x07\0"))),
    **{f"integer {text[:24]!r} in a 2.0 file": (lambda text=text: with_record(
        metadata=meta_map(meta_entry(b"k", b"\x08" + struct.pack("<I", len(text)) + text))))
       for text in (b"9223372036854775808", b"-9223372036854775809", b"9" * 1024,
                    b"-" + b"9" * 1023)},
    # §6.4: children nested 8 deep
    "children nested 8 deep": lambda: with_node(nested(8)),
}


@pytest.mark.parametrize("make", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_both_readers_accept_what_the_spec_allows(path, make):
    data = make()
    spec = spec_file.read(data)
    path.write_bytes(data)
    hurray_uses_everything(path)
    loaded = hurray.load(path)
    node = spec.tensors["a"].node
    while node.layout == "composite":
        node = node.children["c"]
    assert node.parts[0].tobytes(spec.tensors["a"].buffers) == FLOATS
    assert loaded["b"].tobytes() == b"xyz"


@pytest.mark.parametrize("shape", [[0, 1 << 62, 1 << 62], [1, 0, 1 << 62, 1 << 62]])
def test_an_empty_array_has_no_row_major_strides_to_overflow(path, shape):
    """buffer-protocol.md §8.2: the row-major strides of an empty array are not computed,
    so a shape whose strides would not fit in 64 bits is still a valid empty tensor."""
    data = with_node(bytes([0, 10, len(shape), 1, 0]) + b"".join(map(V, shape)) + b"\0")
    spec = spec_file.read(data)
    assert spec.tensors["a"].node.parts[0].tobytes(spec.tensors["a"].buffers) == b""
    path.write_bytes(data)
    with hurray.open(path) as f:
        assert f["a"].shape == tuple(shape) and f["a"].tobytes() == b""
        f.verify()


def test_the_spec_writer_and_reader_agree_on_padding_and_empty_buffers():
    """An empty buffer still has an aligned offset (§4); the index starts at the first
    multiple of 8 after the last buffer; every buffer is at a multiple of A."""
    for alignment in (64, 4096):
        data = spec_file.write({"x": ("uint8", (3,), b"abc"), "e": ("int16", (0, 5), b""),
                                "y": ("uint4", (3,), b"\x21\x03")}, alignment=alignment)
        spec = spec_file.read(data)
        offsets = [t.buffers[0].offset for t in spec.tensors.values()]
        assert offsets == [alignment, 2 * alignment, 2 * alignment]
        assert spec.index_offset == 2 * alignment + 8
        assert math.ceil(spec.index_length / 4096) == (len(data) - spec.index_offset
                                                       - spec.index_length) // 8
