"""hurray.convert against the real safetensors and NumPy: what hurray writes, they load; what
they write, hurray converts; and what a format cannot hold is refused, never dropped."""

import json
import os
import struct
import zipfile

import pytest

import hurray
from conftest import peer
from test_native_layouts import per_channel

np = peer("numpy")
safetensors = peer("safetensors")
from safetensors import safe_open  # noqa: E402
from safetensors.numpy import load_file, save_file  # noqa: E402

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64"]


def sample(dtype, shape=(3, 5), seed=0):
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -1000), min(info.max, 1000), shape, endpoint=True
                            ).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


@pytest.fixture
def arrays():
    return {f"t_{d}": sample(d, seed=i) for i, d in enumerate(DTYPES)}


def assert_same(loaded, expected):
    assert list(loaded) == list(expected) or sorted(loaded) == sorted(expected)
    for name, a in expected.items():
        b = loaded[name]
        b = b if isinstance(b, np.ndarray) else b.__array__()
        assert b.dtype == a.dtype and b.shape == a.shape and np.array_equal(b, a), name


def listing(directory):
    return sorted(os.listdir(directory))


# ============================================================================================
# safetensors
# ============================================================================================


def test_hurray_to_safetensors_loads_with_safetensors(tmp_path, arrays):
    src, dst = tmp_path / "m.hurray", tmp_path / "m.safetensors"
    hurray.save(src, arrays, {"format": "np", "author": "me"})
    hurray.convert(src, dst)
    assert_same(load_file(dst), arrays)
    with safe_open(dst, framework="np") as f:
        assert f.metadata() == {"format": "np", "author": "me"}


def test_safetensors_to_hurray(tmp_path, arrays):
    src, dst = tmp_path / "m.safetensors", tmp_path / "m.hurray"
    save_file(arrays, src, metadata={"k": "v"})
    hurray.convert(src, dst)
    assert_same(hurray.load(dst, verify=True), arrays)
    with hurray.open(dst) as f:
        assert f.metadata == {"k": "v"}
    back = tmp_path / "back.safetensors"
    hurray.convert(dst, back)
    assert_same(load_file(back), arrays)


def test_torch_bfloat16_through_safetensors(tmp_path):
    torch = peer("torch")
    from safetensors.torch import load_file as load_torch
    from safetensors.torch import save_file as save_torch
    tensors = {"w": torch.randn(4, 6).to(torch.bfloat16), "b": torch.arange(6, dtype=torch.int32)}
    src, mid, out = tmp_path / "a.safetensors", tmp_path / "a.hurray", tmp_path / "b.safetensors"
    save_torch(tensors, src)
    hurray.convert(src, mid)
    loaded = hurray.load(mid)
    assert loaded["w"].dtype == hurray.dtype.bfloat16
    for name, t in tensors.items():
        assert torch.equal(torch.from_dlpack(loaded[name]), t)
    hurray.convert(mid, out)
    for name, t in load_torch(out).items():
        assert torch.equal(t, tensors[name])


def metadata_source(tmp_path, per_tensor):
    src = tmp_path / "m.hurray"
    hurray.save(src, {"a": np.arange(3, dtype=np.float32)},
                {"s": "text", "n": 12, "l": [1, 2], "m": {"x": True}},
                tensor_metadata={"a": {"unit": "m"}} if per_tensor else None)
    return src


def safetensors_metadata(path):
    with safe_open(path, framework="np") as f:
        return f.metadata()


def test_safetensors_metadata_is_refused_or_written_as_json(tmp_path):
    src, out = metadata_source(tmp_path, per_tensor=False), tmp_path / "m.safetensors"
    with pytest.raises(hurray.UnsupportedError):  # non-string values, no flag
        hurray.convert(src, out)
    assert listing(tmp_path) == ["m.hurray"]  # nothing at the output, no temporary
    hurray.convert(src, out, metadata_as_json=True)
    meta = safetensors_metadata(out)
    assert meta["s"] == "text" and json.loads(meta["n"]) == 12
    assert json.loads(meta["l"]) == [1, 2] and json.loads(meta["m"]) == {"x": True}
    hurray.convert(src, out, drop_metadata=True)
    assert "n" not in (safetensors_metadata(out) or {})


def test_null_and_big_integers_become_exact_json_in_safetensors(tmp_path):
    """Format 2.1's values as JSON text: null, and an integer's exact digits (a float64 would
    round 2**64 + 1)."""
    src, out = tmp_path / "m.hurray", tmp_path / "m.safetensors"
    hurray.save(src, {"a": np.ones(2, np.float32)}, {"n": None, "big": 2 ** 64 + 1,
                                                     "l": [None, -(2 ** 70)]})
    hurray.convert(src, out, metadata_as_json=True)
    meta = safetensors_metadata(out)
    assert meta == {"n": "null", "big": "18446744073709551617",
                    "l": "[null,-1180591620717411303424]"}
    assert json.loads(meta["big"]) == 2 ** 64 + 1


def test_per_tensor_metadata_has_no_place_in_safetensors(tmp_path):
    src, out = metadata_source(tmp_path, per_tensor=True), tmp_path / "m.safetensors"
    with pytest.raises(hurray.UnsupportedError, match="'a'"):
        hurray.convert(src, out, metadata_as_json=True)
    assert listing(tmp_path) == ["m.hurray"]


def test_drop_metadata_keeps_the_file_metadata_safetensors_can_hold(tmp_path):
    src, out = metadata_source(tmp_path, per_tensor=True), tmp_path / "m.safetensors"
    hurray.convert(src, out, metadata_as_json=True, drop_metadata=True)
    assert safetensors_metadata(out)["s"] == "text"
    assert json.loads(safetensors_metadata(out)["n"]) == 12


def test_drop_metadata_without_json_keeps_only_the_strings(tmp_path):
    src, out = metadata_source(tmp_path, per_tensor=True), tmp_path / "m.safetensors"
    hurray.convert(src, out, drop_metadata=True)
    assert safetensors_metadata(out) == {"s": "text"}


def test_drop_metadata_drops_nothing_in_a_hurray_output(tmp_path):
    src, out = metadata_source(tmp_path, per_tensor=True), tmp_path / "copy.hurray"
    hurray.convert(src, out, alignment=4096, drop_metadata=True)
    with hurray.open(out) as f:
        assert f.metadata == {"s": "text", "n": 12, "l": [1, 2], "m": {"x": True}}
        assert f.tensor_metadata("a") == {"unit": "m"}


@pytest.mark.parametrize("alignment", [8, 64, 4096])
def test_safetensors_alignment_pads_the_header(tmp_path, alignment):
    src, out = tmp_path / "m.hurray", tmp_path / "m.safetensors"
    hurray.save(src, {"a": np.arange(10, dtype=np.float64), "b": np.ones(3, np.int8)})
    hurray.convert(src, out, alignment=alignment)
    raw = out.read_bytes()
    (header_len,) = struct.unpack("<Q", raw[:8])
    assert (8 + header_len) % alignment == 0
    assert_same(load_file(out), {"a": np.arange(10, dtype=np.float64), "b": np.ones(3, np.int8)})


# ============================================================================================
# .npy and .npz
# ============================================================================================


@pytest.mark.parametrize("dtype", DTYPES + ["complex64", "complex128"])
def test_npy_round_trips_both_ways(tmp_path, dtype):
    a = sample(dtype, (4, 7)) if not dtype.startswith("complex") else \
        (sample("float64", (4, 7)) + 1j * sample("float64", (4, 7), 1)).astype(dtype)
    npy, h, back = tmp_path / "weights.npy", tmp_path / "w.hurray", tmp_path / "back.npy"
    np.save(npy, a)
    hurray.convert(npy, h)
    loaded = hurray.load(h)
    assert list(loaded) == ["weights"]  # named after the file's stem
    assert_same(loaded, {"weights": a})
    hurray.convert(h, back)
    assert_same({"weights": np.load(back)}, {"weights": a})


def test_npy_name_option(tmp_path):
    npy, h = tmp_path / "x.npy", tmp_path / "x.hurray"
    np.save(npy, np.arange(5))
    hurray.convert(npy, h, name="embed")
    assert list(hurray.load(h)) == ["embed"]
    two = tmp_path / "two.hurray"
    hurray.save(two, {"a": np.arange(3), "b": np.arange(4.0)})
    with pytest.raises(hurray.InvalidArgumentError, match="choose one by name"):
        hurray.convert(two, tmp_path / "out.npy")  # which one?
    hurray.convert(two, tmp_path / "out.npy", name="b")
    assert np.array_equal(np.load(tmp_path / "out.npy"), np.arange(4.0))


def test_strided_tensors_become_fortran_or_c_order_npy(tmp_path):
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    h = tmp_path / "s.hurray"
    hurray.save(h, {"t": base.T, "r": base[::-1, ::2]})
    hurray.convert(h, tmp_path / "t.npy", name="t")
    t = np.load(tmp_path / "t.npy")
    assert np.array_equal(t, base.T) and t.flags.f_contiguous
    hurray.convert(h, tmp_path / "r.npy", name="r")
    r = np.load(tmp_path / "r.npy")
    assert np.array_equal(r, base[::-1, ::2]) and r.flags.c_contiguous


def test_npz_round_trips_both_ways(tmp_path, arrays):
    npz, h, back = tmp_path / "m.npz", tmp_path / "m.hurray", tmp_path / "back.npz"
    np.savez(npz, **arrays)
    hurray.convert(npz, h)
    assert_same(hurray.load(h), arrays)
    hurray.convert(h, back)
    with np.load(back) as z:
        assert_same({k: z[k] for k in z.files}, arrays)


def test_compressed_npz_input(tmp_path, arrays):
    npz, h = tmp_path / "c.npz", tmp_path / "c.hurray"
    np.savez_compressed(npz, **arrays)
    with zipfile.ZipFile(npz) as z:  # the members really are deflated
        assert {i.compress_type for i in z.infolist()} == {zipfile.ZIP_DEFLATED}
    hurray.convert(npz, h)
    assert_same(hurray.load(h), arrays)


# ============================================================================================
# Refusals and atomicity
# ============================================================================================


def test_what_the_output_cannot_hold_is_refused_naming_the_tensor(tmp_path):
    h = tmp_path / "q.hurray"
    hurray.save(h, {"dense": np.arange(3, dtype=np.float32), "quant": per_channel()})
    for out in ("q.safetensors", "q.npz"):
        with pytest.raises(hurray.UnsupportedError, match="quant"):
            hurray.convert(h, tmp_path / out, drop_metadata=True)
    int4 = tmp_path / "i4.hurray"
    hurray.save(int4, {"packed": hurray.Tensor(b"\x12\x34", hurray.dtype.int4, [4])})
    with pytest.raises(hurray.UnsupportedError, match="packed"):
        hurray.convert(int4, tmp_path / "i4.safetensors")
    assert listing(tmp_path) == ["i4.hurray", "q.hurray"]


def test_bad_inputs_raise_the_mapped_error_and_write_nothing(tmp_path):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\xff" * 8 + b"{}")
    with pytest.raises(hurray.LimitError, match="the header length 18446744073709551615"):
        hurray.convert(bad, tmp_path / "out.hurray")
    npy = tmp_path / "bad.npy"
    npy.write_bytes(b"\x93NUMPY\x01\x00garbage")
    with pytest.raises(hurray.LimitError, match="the .npy header is 24935 bytes"):  # the parser's
        hurray.convert(npy, tmp_path / "out.hurray")
    with pytest.raises(hurray.InvalidArgumentError):
        hurray.convert(npy, tmp_path / "out.unknown")
    with pytest.raises(hurray.FileNotFoundError):
        hurray.convert(tmp_path / "absent.npy", tmp_path / "out.hurray")
    assert listing(tmp_path) == ["bad.npy", "bad.safetensors"]


@pytest.mark.parametrize("durable", [True, False])
def test_convert_in_place_replaces_the_file_atomically(tmp_path, arrays, durable):
    h = tmp_path / "m.hurray"
    hurray.save(h, arrays)
    hurray.convert(h, h, alignment=4096, durable=durable)
    with hurray.open(h) as f:
        assert f.info["alignment"] == 4096
    assert_same(hurray.load(h, verify=True), arrays)
    assert listing(tmp_path) == ["m.hurray"]


def test_a_flipped_byte_fails_the_conversion(tmp_path):
    h = tmp_path / "m.hurray"
    mark = bytes([0xA5, 0x5A]) * 2048
    hurray.save(h, {"victim": np.frombuffer(mark, np.uint8)})
    raw = bytearray(h.read_bytes())
    raw[raw.find(mark) + 7] ^= 1
    h.write_bytes(raw)
    with pytest.raises(hurray.ChecksumError, match="victim"):
        hurray.convert(h, tmp_path / "m.safetensors")
    assert listing(tmp_path) == ["m.hurray"]
    # Not durable: the same; a previous output stays as it was, and no temporary.
    previous = tmp_path / "p.safetensors"
    save_file({"kept": np.arange(4, dtype=np.int32)}, previous)
    before = previous.read_bytes()
    for out in (previous, tmp_path / "new.npz"):
        with pytest.raises(hurray.ChecksumError, match="victim"):
            hurray.convert(h, out, durable=False)
    assert previous.read_bytes() == before
    assert listing(tmp_path) == ["m.hurray", "p.safetensors"]


@pytest.mark.parametrize("out", ["n.hurray", "n.safetensors", "n.npz"])
def test_a_non_durable_conversion_writes_the_same_bytes(tmp_path, arrays, out):
    h = tmp_path / "m.hurray"
    hurray.save(h, arrays)
    hurray.convert(h, tmp_path / ("d" + out[1:]))
    hurray.convert(h, tmp_path / out, durable=False)
    assert (tmp_path / out).read_bytes() == (tmp_path / ("d" + out[1:])).read_bytes()
