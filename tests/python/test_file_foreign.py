"""hurray.load and hurray.open read safetensors, .npy and .npz files too, recognised by their
bytes (ADR-046), against the peers that write them: safetensors (NumPy and PyTorch), np.save,
np.savez and np.savez_compressed. Values and dtypes match; a tensor whose bytes lie in the file
at a multiple of 64 is a view of the mapping, every other one a copy, and every one starts at a
multiple of 64 in memory."""

import io
import json
import zipfile

import pytest

import hurray
from conftest import mappings_of, peer

np = peer("numpy")


def address(t):
    return t.buffers[0]["address"]


def check_loaded(path, expected, views):
    """Every way of reading `path` gives `expected` (name -> NumPy array) in its order (the
    file's), each tensor at a multiple of 64; those named in `views` are views of the mapping,
    the others copies."""
    with hurray.open(path) as f:
        loaded = hurray.load(path)
        ranges = mappings_of(path)
        assert ranges, "the file is mapped while its tensors live"
        for tensors in (loaded, f, hurray.load(path, mmap=False)):
            assert list(tensors) == list(expected)
            for name, want in expected.items():
                t = tensors[name]
                got = np.asarray(t.__array__())
                assert got.dtype == want.dtype.newbyteorder("=") and got.shape == want.shape, name
                assert np.array_equal(got, want), name
                assert address(t) % 64 == 0 and t.byte_offset == 0, name
        for name in expected:
            inside = any(lo <= address(loaded[name]) < hi for lo, hi in ranges)
            assert inside == (name in views), name
            assert loaded[name].readonly  # views and copies alike: as the mapping
            pread = hurray.load(path, mmap=False)[name]
            assert not pread.readonly
            assert not any(lo <= address(pread) < hi for lo, hi in mappings_of(path))
    return loaded


def safetensors_order(path):
    """The tensor names of a safetensors file in data order (empty tensors, which share their
    offset with the next one, first)."""
    raw = path.read_bytes()
    header = json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])
    header.pop("__metadata__", None)
    return sorted(header, key=lambda k: tuple(header[k]["data_offsets"]))


def safetensors_views(path):
    """The names whose data starts at a multiple of 64 in a safetensors file."""
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    return {k for k, v in header.items() if k != "__metadata__"
            and (8 + n + v["data_offsets"][0]) % 64 == 0}


def npz_views(path):
    """The names whose .npy data starts at a multiple of 64 in a stored .npz."""
    raw = path.read_bytes()
    views = set()
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            if info.compress_type != zipfile.ZIP_STORED:
                continue
            member = z.read(info)
            at = raw.find(member)
            array = np.load(io.BytesIO(member))
            if (at + len(member) - array.nbytes) % 64 == 0:
                views.add(info.filename[:-4])
    return views


SOURCES = {
    "w": np.arange(12, dtype=np.float32).reshape(3, 4),
    "b": np.array([1, -2, 3], dtype=np.int8),
    "d": np.linspace(0, 1, 5),
    "h": np.arange(7, dtype=np.float16),
    "u": np.arange(9, dtype=np.uint64).reshape(3, 3),
    "flag": np.array([True, False, True]),
    "empty": np.zeros((0, 3), np.int32),
    "scalar": np.array(2.5, dtype=np.float32),
}


def test_safetensors_numpy_files_load(tmp_path):
    peer("safetensors")
    import safetensors.numpy as st

    path = tmp_path / "model.safetensors"
    st.save_file(SOURCES, path, metadata={"framework": "numpy"})
    order = safetensors_order(path)
    check_loaded(path, {name: SOURCES[name] for name in order}, safetensors_views(path))
    with hurray.open(path) as f:
        assert f.metadata == {"framework": "numpy"}
        assert f.info["format"] == "safetensors" and f.info["alignment"] == 64
        with pytest.raises(hurray.UnsupportedError, match="keeps no checksums"):
            f.verify()
    with pytest.raises(hurray.UnsupportedError):
        hurray.load(path, verify=True)
    # safetensors aligns its data to 8 bytes; a file whose data starts at a multiple of 64
    # (hurray.convert's alignment) has its first tensor mapped, the rest copied.
    hurray.save(tmp_path / "m.hurray", SOURCES)
    aligned = tmp_path / "aligned.safetensors"
    hurray.convert(tmp_path / "m.hurray", aligned, alignment=64)
    views = safetensors_views(aligned)
    assert views and views != set(SOURCES)
    check_loaded(aligned, {name: SOURCES[name] for name in safetensors_order(aligned)}, views)


def test_safetensors_torch_files_load_and_views_are_zero_copy(tmp_path):
    torch = peer("torch")
    peer("safetensors")
    import safetensors.torch as st

    path = tmp_path / "model.safetensors"
    tensors = {"big": torch.arange(64 * 4, dtype=torch.float32).reshape(64, 4),
               "bf": torch.arange(5, dtype=torch.bfloat16),
               "i64": torch.tensor([1, 2, 3], dtype=torch.int64)}
    st.save_file(tensors, path)
    views = safetensors_views(path)
    loaded = hurray.load(path)
    ranges = mappings_of(path)
    for name, want in tensors.items():
        t = loaded[name]
        assert address(t) % 64 == 0
        assert any(lo <= address(t) < hi for lo, hi in ranges) == (name in views)
        got = torch.from_dlpack(t)
        assert got.dtype == want.dtype and torch.equal(got, want)


@pytest.mark.parametrize("array", [
    np.arange(24, dtype=np.float64).reshape(2, 3, 4),
    np.asfortranarray(np.arange(12, dtype=np.int32).reshape(3, 4)),
    np.array(7, dtype=np.int16),
    np.arange(6, dtype=">i4"),
    np.array([1 + 2j, 3 - 4j], dtype=np.complex64),
], ids=["c_order", "fortran", "zero_d", "big_endian", "complex"])
def test_npy_files_load_named_after_their_stem(tmp_path, array):
    path = tmp_path / "weights.npy"
    np.save(path, array)
    views = set() if array.dtype.byteorder == ">" else {"weights"}  # big-endian: swapped copy
    loaded = check_loaded(path, {"weights": array}, views)
    assert loaded["weights"].strides == tuple(s // array.itemsize for s in array.strides)
    with hurray.open(path) as f:
        assert f.info["format"] == "npy"


def test_npz_files_load_stored_and_compressed(tmp_path):
    stored, compressed = tmp_path / "s.npz", tmp_path / "c.npz"
    np.savez(stored, **SOURCES)
    np.savez_compressed(compressed, **SOURCES)
    check_loaded(stored, SOURCES, npz_views(stored))
    check_loaded(compressed, SOURCES, set())  # inflated: always a copy
    for path in (stored, compressed):
        hurray.load(path, verify=True)  # the members' CRC-32s
        with hurray.open(path) as f:
            assert f.info["format"] == "npz"
            f.verify()


def test_a_damaged_npz_member_is_found_by_verify_and_by_reading(tmp_path):
    path = tmp_path / "d.npz"
    np.savez(path, a=np.arange(100, dtype=np.int64))
    raw = bytearray(path.read_bytes())
    at = raw.find(np.arange(100, dtype=np.int64).tobytes())
    raw[at + 3] ^= 0xFF
    path.write_bytes(bytes(raw))
    with hurray.open(path) as f:
        with pytest.raises(hurray.ChecksumError, match="'a'"):
            f.verify()
    with pytest.raises(hurray.ChecksumError):
        hurray.load(path, verify=True)


def test_formats_are_recognised_by_their_bytes_not_their_names(tmp_path):
    peer("safetensors")
    import safetensors.numpy as st

    disguised = tmp_path / "model.hurray"
    st.save_file({"x": np.ones(3, np.float32)}, disguised)
    assert np.array_equal(hurray.load(disguised)["x"].__array__(), np.ones(3, np.float32))
    npy_named_npz = tmp_path / "arr.npz"
    np.save(tmp_path / "arr.npy", np.arange(3))
    (tmp_path / "arr.npy").rename(npy_named_npz)
    assert list(hurray.load(npy_named_npz)) == ["arr"]
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not a tensor file at all")
    with pytest.raises(hurray.FormatError, match="safetensors, .npy, .npz or GGUF"):
        hurray.load(junk)


def test_slices_of_foreign_tensors(tmp_path):
    path = tmp_path / "rows.npy"
    array = np.arange(40, dtype=np.float32).reshape(10, 4)
    np.save(path, array)
    with hurray.open(path) as f:
        rows = f.slice("rows", 2, 5)
        assert np.array_equal(rows.__array__(), array[2:5])
