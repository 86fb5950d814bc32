"""GGUF in the one loader (ADR-094), against the real gguf package: files written by
gguf.GGUFWriter load through hurray.load and hurray.open with every tensor kept as it is (block
types as their block dtype, bytes untouched), hurray.dequantize equals gguf.quants.dequantize
bit for bit, the key/values are the file metadata, and malformed files are refused with
FormatError naming the field."""

import json
import os
import struct
import subprocess
import time
from pathlib import Path

import pytest

import hurray
from conftest import mappings_of, peer

np = peer("numpy")
gguf = peer("gguf")
from gguf import GGMLQuantizationType as T  # noqa: E402
from gguf.constants import GGML_QUANT_SIZES  # noqa: E402

# The hurray command built with the hurray imported (an in-tree build puts it beside the
# package's directory), else the one on PATH (pip install . puts it beside the interpreter).
_BESIDE = Path(hurray.__file__).resolve().parents[2] / "hurray"
CLI = str(_BESIDE) if _BESIDE.is_file() and os.access(_BESIDE, os.X_OK) else "hurray"

# Each block type: (type, hurray dtype name, byte offsets of its float16 scale fields).
BLOCKS = [
    (T.Q4_0, "q4_0", (0,)), (T.Q4_1, "q4_1", (0, 2)), (T.Q5_0, "q5_0", (0,)),
    (T.Q5_1, "q5_1", (0, 2)), (T.Q8_0, "q8_0", (0,)), (T.Q2_K, "q2_k", (80, 82)),
    (T.Q3_K, "q3_k", (108,)), (T.Q4_K, "q4_k", (0, 2)), (T.Q5_K, "q5_k", (0, 2)),
    (T.Q6_K, "q6_k", (208,)),
]
PLAIN = [(np.float32, "float32"), (np.float16, "float16"), (np.float64, "float64"),
         (np.int8, "int8"), (np.int16, "int16"), (np.int32, "int32"), (np.int64, "int64")]


def random_blocks(qtype, rows, cols, scales, seed):
    """Blocks of random bytes whose float16 scales are finite (any bit pattern of the rest is a
    valid block), in the byte shape gguf uses."""
    rng = np.random.default_rng(seed)
    block, size = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, (rows, cols // block, size), dtype=np.uint8)
    for at in scales:
        d = (rng.standard_normal((rows, cols // block)) * 0.05).astype(np.float16)
        raw[:, :, at:at + 2] = d.view(np.uint8).reshape(rows, cols // block, 2)
    return raw.reshape(rows, cols // block * size)


def write(path, tensors, kv=None):
    """A GGUF file of `tensors` {name: (array, raw_dtype or None)} and key/values."""
    w = gguf.GGUFWriter(str(path), "test")
    for key, (kind, value) in (kv or {}).items():
        getattr(w, f"add_{kind}")(key, value)
    for name, (array, raw) in tensors.items():
        if raw is None:
            w.add_tensor(name, array)
        else:
            w.add_tensor(name, array, raw_shape=array.shape, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(
        a.view(np.uint32), b.view(np.uint32))


@pytest.mark.parametrize("qtype,name,scales", BLOCKS, ids=[b[1] for b in BLOCKS])
def test_block_types_dequantise_as_gguf_does(tmp_path, monkeypatch, qtype, name, scales):
    blocks = random_blocks(qtype, 3, 512, scales, seed=int(qtype))
    path = write(tmp_path / "m.gguf", {"w": (blocks, qtype)})
    t = hurray.load(path)["w"]
    assert t.dtype.name == name and t.dtype.kind == "q" and t.shape == blocks.shape
    assert np.array_equal(np.frombuffer(t.tobytes(), np.uint8).reshape(t.shape), blocks)
    ref = gguf.quants.dequantize(blocks, qtype)
    got = hurray.dequantize(t)
    assert same_bits(got, ref)
    half = np.asarray(hurray.dequantize(t, hurray.dtype.float16))
    assert np.array_equal(half.view(np.uint16), ref.astype(np.float16).view(np.uint16))
    # into memory written before, by the non-temporal stores of outputs larger than the cache
    # (a private test hook makes every output one)
    monkeypatch.setenv("_HURRAY_TEST_STREAM_BYTES", "0")
    into = np.full(ref.shape, np.nan, np.float32)
    hurray.dequantize(t, out=hurray.from_numpy(into))
    assert same_bits(into, ref)


@pytest.mark.parametrize("qtype", [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0])
def test_quantised_by_gguf_round_trips_through_hurray(tmp_path, qtype):
    """gguf.quants.quantize's blocks load as they are and dequantise as gguf's do, the sign of
    zero included (Q4_0 with a negative scale gives -0 where 8 - 8 meets it)."""
    x = np.random.default_rng(1).standard_normal((4, 256)).astype(np.float32)
    q = gguf.quants.quantize(x, qtype)
    path = write(tmp_path / "m.gguf", {"q": (q, qtype)})
    with hurray.open(path) as f:
        t = f["q"]
        assert same_bits(hurray.dequantize(t), gguf.quants.dequantize(q, qtype))


def test_q8_k_is_d_times_q(tmp_path):
    """gguf has no Q8_K dequantiser; ggml's is d (float32) times each int8."""
    rng = np.random.default_rng(2)
    blocks = rng.integers(0, 256, (2, 292), dtype=np.uint8)
    d = rng.standard_normal(2).astype(np.float32)
    blocks[:, :4] = d.view(np.uint8).reshape(2, 4)
    path = write(tmp_path / "m.gguf", {"k": (blocks, T.Q8_K)})
    t = hurray.load(path)["k"]
    want = blocks[:, 4:260].view(np.int8).astype(np.float32) * d[:, None]
    assert same_bits(hurray.dequantize(t), want)


@pytest.mark.parametrize("dtype,name", PLAIN, ids=[p[1] for p in PLAIN])
def test_plain_types_load_as_they_are(tmp_path, dtype, name):
    x = (np.arange(24).reshape(2, 3, 4) - 7).astype(dtype)
    path = write(tmp_path / "m.gguf", {"x": (x, None)})
    t = hurray.load(path)["x"]
    assert t.dtype.name == name
    assert np.array_equal(np.asarray(t), x) and np.asarray(t).shape == (2, 3, 4)


def test_bfloat16(tmp_path):
    raw = np.arange(32, dtype=np.uint16).reshape(2, 16) + 0x3F80
    path = write(tmp_path / "m.gguf", {"b": (raw.view(np.uint8).reshape(2, 32), T.BF16)})
    t = hurray.load(path)["b"]
    assert t.dtype.name == "bfloat16" and t.shape == (2, 16)
    assert same_bits(hurray.dequantize(t), gguf.quants.dequantize(raw.view(np.uint8), T.BF16))


def test_tensors_at_gguf_default_alignment_are_views_of_the_mapping(tmp_path):
    """GGUFWriter (as llama.cpp) puts each tensor at a multiple of 32: every one is mapped, not
    copied; its buffer starts at the multiple of 64 below it and its values `byte_offset` bytes
    in (buffer-protocol.md §6.2). A mmap=False load copies them, values first."""
    x = np.random.default_rng(4).standard_normal((4, 64)).astype(np.float32)
    q = gguf.quants.quantize(x, T.Q8_0)
    tensors = {"a": (np.arange(7, dtype=np.float32), None), "q": (q, T.Q8_0),
               "h": (np.arange(5, dtype=np.float16), None),
               "k": (random_blocks(T.Q4_K, 1, 256, (0, 2), 5), T.Q4_K)}
    path = write(tmp_path / "m.gguf", tensors)
    offsets = {t.name: int(t.data_offset) for t in gguf.GGUFReader(str(path)).tensors}
    assert {at % 64 for at in offsets.values()} == {0, 32}  # both cases occur
    loaded = hurray.load(path)
    ranges = mappings_of(path)
    for name, (array, raw) in tensors.items():
        t = loaded[name]
        buffer = t.buffers[0]
        first = buffer["address"] + t.byte_offset
        assert buffer["address"] % 64 == 0 and t.byte_offset == offsets[name] % 64, name
        assert any(lo <= first < hi for lo, hi in ranges), f"{name} is a copy"
        assert buffer["byte_size"] == t.byte_offset + array.nbytes and t.readonly
        assert bytes(t.bytes_view()) == array.tobytes(), name
        copy = hurray.load(path, mmap=False)[name]
        assert copy.byte_offset == 0 and bytes(copy.bytes_view()) == array.tobytes()
    assert same_bits(hurray.dequantize(loaded["q"]), gguf.quants.dequantize(q, T.Q8_0))
    assert np.array_equal(np.asarray(loaded["h"]), tensors["h"][0])
    again = tmp_path / "m.hurray"
    hurray.save(again, loaded)  # the bytes before the values are not written
    with hurray.open(again) as f:
        assert f["q"].byte_offset == 0 and f["q"].buffers[0]["byte_size"] == q.nbytes


def test_key_values_are_the_file_metadata(tmp_path):
    kv = {"test.u32": ("uint32", 7), "test.i64": ("int64", -3), "test.f32": ("float32", 0.5),
          "test.b": ("bool", True), "test.s": ("string", "héllo"),
          "test.a": ("array", [1, 2, 3]), "test.big": ("uint64", 2 ** 64 - 1)}
    path = write(tmp_path / "m.gguf", {"x": (np.zeros(4, np.float32), None)}, kv)
    with hurray.open(path) as f:
        m = f.metadata
    assert m["test.u32"] == 7 and m["test.i64"] == -3 and m["test.f32"] == 0.5
    assert m["test.b"] is True and m["test.s"] == "héllo" and list(m["test.a"]) == [1, 2, 3]
    assert m["test.big"] == 2 ** 64 - 1 and m["general.architecture"] == "test"


def tokenizer(n_tokens, n_merges, seed=0):
    """A byte-level BPE vocabulary as llama.cpp stores one: unique token strings of 1 to 24
    characters (ASCII, GPT-2's Ġ and Ċ, some UTF-8), merges as pairs of them, a float32 score
    and a token type for each token."""
    rng = np.random.default_rng(seed)
    alphabet = np.array([chr(c) for c in range(0x21, 0x7F)] + list("ĠĊéäß中文ĉ"))
    lengths = np.clip(rng.geometric(0.18, n_tokens), 1, 24)
    chars = alphabet[rng.integers(0, len(alphabet), int(lengths.sum()))]
    ends = np.cumsum(lengths)
    tokens = [f"{''.join(chars[e - n:e])}{i}" for i, (e, n) in enumerate(zip(ends, lengths))]
    pairs = rng.integers(0, n_tokens, (n_merges, 2))
    merges = [f"{tokens[a]} {tokens[b]}" for a, b in pairs]
    scores = rng.standard_normal(n_tokens).astype(np.float32)
    types = rng.integers(1, 7, n_tokens).astype(np.int32)
    return tokens, merges, scores, types


# llama-3's counts; a 262,144-token vocabulary (Gemma 3's size) with 514,906 merges, whose
# metadata encodes past the 16 MiB that bounded a file's metadata before ADR-103.
@pytest.mark.parametrize("n_tokens,n_merges", [(128256, 280147), (262144, 514906)],
                         ids=["llama3", "past_16_mib"])
def test_tokenizers_at_real_scale_load_with_every_key_value(tmp_path, n_tokens, n_merges):
    tokens, merges, scores, types = tokenizer(n_tokens, n_merges)
    w = gguf.GGUFWriter(str(tmp_path / "tok.gguf"), "llama")
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_merges(merges)
    w.add_token_scores(scores.tolist())
    w.add_token_types(types.tolist())
    w.add_tensor("w", np.arange(8, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    path = tmp_path / "tok.gguf"
    want = {"general.architecture": "llama", "tokenizer.ggml.model": "gpt2",
            "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.merges": merges,
            "tokenizer.ggml.scores": scores.astype(np.float64).tolist(),
            "tokenizer.ggml.token_type": types.tolist()}
    start = time.perf_counter()
    with hurray.open(path) as f:
        assert f.metadata == want
    opened = time.perf_counter() - start  # about 0.2 s for llama-3's (gguf.GGUFReader: 15 s)
    assert opened < 10, opened
    assert np.array_equal(np.asarray(hurray.load(path)["w"]), np.arange(8, dtype=np.float32))
    info = subprocess.run([CLI, "info", str(path)], capture_output=True, text=True)
    assert info.returncode == 0 and "gguf" in info.stdout, info.stderr
    assert f"{n_tokens - 8} more]" in info.stdout and len(info.stdout) < 4096  # lists cut short
    info = subprocess.run([CLI, "info", "--json", str(path)], capture_output=True, text=True)
    assert info.returncode == 0 and json.loads(info.stdout)["metadata"] == want  # all of it
    hurray.convert(path, tmp_path / "tok.hurray")  # the file metadata as a Hurray file's
    hurray.convert(tmp_path / "tok.hurray", tmp_path / "back.gguf")
    for again in (tmp_path / "tok.hurray", tmp_path / "back.gguf"):
        with hurray.open(again) as f:
            assert f.metadata == want, again


def test_info_verify_convert(tmp_path):
    blocks = random_blocks(T.Q4_K, 2, 256, (0, 2), seed=3)
    src = write(tmp_path / "m.gguf", {"w": (blocks, T.Q4_K), "b": (np.ones(8, np.float32), None)})
    info = subprocess.run([CLI, "info", str(src)], capture_output=True, text=True)
    assert info.returncode == 0 and "q4_k" in info.stdout and "gguf" in info.stdout
    assert subprocess.run([CLI, "verify", str(src)], capture_output=True).returncode == 0
    out = tmp_path / "m.hurray"
    hurray.convert(src, out)
    with hurray.open(out) as f:
        assert np.frombuffer(f["w"].tobytes(), np.uint8).tobytes() == blocks.tobytes()
        assert same_bits(hurray.dequantize(f["w"]), gguf.quants.dequantize(blocks, T.Q4_K))
        assert f.metadata["general.architecture"] == "test"
    with pytest.raises(hurray.HurrayError, match="w"):
        hurray.convert(src, tmp_path / "m.safetensors", drop_metadata=True)


def header(tensors=0, kvs=0, version=3):
    return b"GGUF" + struct.pack("<IQQ", version, tensors, kvs)


def gguf_string(s):
    return struct.pack("<Q", len(s)) + s


MALFORMED = {
    "truncated": (header(1, 0)[:-3], "key/value count"),
    "huge tensor count": (header(2 ** 40, 0), "tensor count"),
    "huge key/value count": (header(0, 2 ** 40), "key/value count"),
    "version": (header(version=9), "version"),
    "value type": (header(0, 1) + gguf_string(b"k") + struct.pack("<I", 99) + b"\0" * 8,
                   "value type 99"),
    "string length": (header(0, 1) + gguf_string(b"k") + struct.pack("<IQ", 8, 2 ** 62),
                      "key 'k'"),
    "ggml type": (header(1, 0) + gguf_string(b"t") + struct.pack("<IQIQ", 1, 4, 99, 0),
                  "ggml type 99"),
    "bad offset": (header(1, 0) + gguf_string(b"t") + struct.pack("<IQIQ", 1, 4, 0, 2 ** 63),
                   "offset"),
    "n_dims": (header(1, 0) + gguf_string(b"t") + struct.pack("<I", 9) + b"\0" * 40, "n_dims"),
    "truncated value": (header(0, 1) + gguf_string(b"k") + struct.pack("<I", 4) + b"\0\0",
                        "the file ends inside key 'k'"),
    "huge array count": (header(0, 1) + gguf_string(b"k") + struct.pack("<IIQ", 9, 4, 2 ** 40),
                         "key 'k': an array of 1099511627776 items"),
    "bool": (header(0, 1) + gguf_string(b"k") + struct.pack("<IB", 7, 2), "key 'k': a bool"),
    "alignment": (header(0, 1) + gguf_string(b"general.alignment") + struct.pack("<II", 4, 48),
                  "general.alignment is a u32 power of two"),
    "duplicate key": (header(0, 2) + (gguf_string(b"k") + struct.pack("<IB", 0, 1)) * 2,
                      "duplicate key 'k'"),
    "data past the end": (header(1, 0) + gguf_string(b"t") + struct.pack("<IQIQ", 1, 4, 0, 0),
                          "tensor 't': offset 0 \\(16 bytes\\) ends past the 0 bytes"),
    "misaligned offset": (header(1, 0) + gguf_string(b"t") + struct.pack("<IQIQ", 1, 4, 0, 8)
                          + b"\0" * 64, "tensor 't': offset 8 is not a multiple of the alignment"),
    "partial block": (header(1, 0) + gguf_string(b"t") + struct.pack("<IQIQ", 1, 48, 8, 0),
                      "tensor 't': ne\\[0\\] = 48 is not a multiple of q8_0's 32-weight blocks"),
}


def test_version_2_reads_as_version_3(tmp_path):
    """GGUF v2 has v3's layout (v3 only adds big-endian files, which say so in the version)."""
    blocks = random_blocks(T.Q5_1, 2, 64, (0, 2), seed=6)
    raw = bytearray(write(tmp_path / "m.gguf", {"w": (blocks, T.Q5_1)}).read_bytes())
    raw[4:8] = struct.pack("<I", 2)
    path = tmp_path / "v2.gguf"
    path.write_bytes(bytes(raw))
    t = hurray.load(path)["w"]
    assert same_bits(hurray.dequantize(t), gguf.quants.dequantize(blocks, T.Q5_1))


def test_nesting_past_the_limit_is_refused(tmp_path):
    path = tmp_path / "deep.gguf"
    path.write_bytes(header(0, 1) + gguf_string(b"k") + struct.pack("<I", 9)
                     + struct.pack("<IQ", 9, 1) * 12 + b"\0" * 64)
    with pytest.raises(hurray.LimitError, match="key 'k': arrays nest deeper than 8"):
        hurray.load(path)


def test_a_ggml_type_hurray_does_not_read_is_named(tmp_path):
    path = tmp_path / "iq.gguf"
    path.write_bytes(header(1, 0) + gguf_string(b"t") + struct.pack("<IQIQ", 1, 256, 16, 0))
    with pytest.raises(hurray.UnsupportedError, match="tensor 't': ggml type 16"):
        hurray.load(path)


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_files_are_refused_naming_the_field(tmp_path, case):
    data, field = MALFORMED[case]
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    with pytest.raises(hurray.FormatError, match=field):
        hurray.load(path)


def tensor_bytes(path):
    r = gguf.GGUFReader(str(path))
    return {t.name: (int(t.tensor_type), [int(n) for n in t.shape], bytes(np.asarray(t.data)))
            for t in r.tensors}


def test_gguf_to_hurray_to_gguf_keeps_every_tensor_byte(tmp_path):
    tensors = {name: (random_blocks(q, 2, 256, scales, seed=i), q)
               for i, (q, name, scales) in enumerate(BLOCKS)}
    tensors["f"] = (np.arange(12, dtype=np.float32).reshape(3, 4), None)
    tensors["h"] = (np.arange(7, dtype=np.float16), None)
    tensors["i"] = (np.arange(6, dtype=np.int32).reshape(1, 2, 3), None)
    tensors["d"] = (np.linspace(0, 1, 5), None)
    for dtype in (np.int8, np.int16, np.int64):
        tensors[np.dtype(dtype).name] = (np.arange(-3, 5, dtype=dtype), None)
    bf16 = (np.arange(32, dtype=np.uint16) + 0x3F80).view(np.uint8).reshape(2, 32)
    tensors["bf16"] = (bf16, T.BF16)
    q8_k = np.random.default_rng(9).integers(0, 256, (2, 292), dtype=np.uint8)
    q8_k[:, :4] = np.float32([0.5, -0.25]).view(np.uint8).reshape(2, 4)
    tensors["q8_k"] = (q8_k, T.Q8_K)
    kv = {"test.u32": ("uint32", 7), "test.s": ("string", "x"),
          "test.a": ("array", ["a", "b"]), "test.f": ("float32", 0.25)}
    src = write(tmp_path / "a.gguf", tensors, kv)
    mid = tmp_path / "a.hurray"
    hurray.convert(src, mid)
    back = tmp_path / "b.gguf"
    hurray.convert(mid, back)
    assert tensor_bytes(back) == tensor_bytes(src)
    r = gguf.GGUFReader(str(back))
    f = r.fields
    assert f["test.u32"].types == [gguf.GGUFValueType.UINT32] and f["test.u32"].contents() == 7
    assert f["test.s"].contents() == "x" and f["test.a"].contents() == ["a", "b"]
    assert f["test.f"].contents() == 0.25
    assert f["general.architecture"].contents() == "test"
    with hurray.open(back) as g:  # and it reads back as what it was
        assert same_bits(hurray.dequantize(g["q6_k"]),
                         gguf.quants.dequantize(tensors["q6_k"][0], T.Q6_K))


def test_what_gguf_cannot_hold_is_refused_by_name(tmp_path):
    path = tmp_path / "x.hurray"
    hurray.save(path, {"ok": np.zeros(4, np.float32), "flags": np.zeros(3, bool)})
    with pytest.raises(hurray.UnsupportedError, match="tensor 'flags' is bool, which GGUF"):
        hurray.convert(path, tmp_path / "x.gguf")
    hurray.save(path, {"s": np.float32(1.0)})
    with pytest.raises(hurray.UnsupportedError, match="tensor 's' has rank 0"):
        hurray.convert(path, tmp_path / "x.gguf")
    hurray.save(path, {"t": np.zeros(2, np.float32)}, metadata={"m": {"nested": 1}})
    with pytest.raises(hurray.UnsupportedError, match="metadata 'm' is map"):
        hurray.convert(path, tmp_path / "x.gguf")
    assert not (tmp_path / "x.gguf").exists()
