"""Round trips with the real peers -- NumPy 2.x, PyTorch and JAX -- in both directions, for
every dtype each of them supports: the memory is shared, the values and the layout kept."""

import gc
import sys

import pytest

import hurray
from conftest import SANITIZED, peer, rss_bytes

np = peer("numpy")
torch = peer("torch")
jax = peer("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy

NUMPY_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                "uint64", "float16", "float32", "float64", "complex64", "complex128"]
TORCH_DTYPES = NUMPY_DTYPES + ["bfloat16", "complex32", "float8_e4m3fn", "float8_e5m2",
                               "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu"]
JAX_DTYPES = NUMPY_DTYPES + ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
                             "float8_e5m2fnuz", "float8_e8m0fnu", "float8_e3m4", "float8_e4m3",
                             "float8_e4m3b11fnuz"]


def aligned_bytes(nbytes):
    """A writable, 64-byte aligned NumPy byte buffer (XLA imports such memory zero-copy)."""
    raw = np.zeros(nbytes + 64, np.uint8)
    start = -raw.ctypes.data % 64
    return raw[start:start + nbytes]


def pattern(dtype, n):
    """n elements of `dtype` as bytes that are valid values (small integers' bit patterns)."""
    itemsize = dtype.itemsize
    if dtype.name == "bool":
        return bytes([i % 2 for i in range(n)])
    if dtype.name.startswith("float8") or dtype.name in ("bfloat16", "float16", "complex32"):
        values = np.arange(n, dtype=np.float32) % 4
        if dtype.name == "float8_e8m0fnu":
            return bytes([127 + i % 3 for i in range(n)])  # 1, 2, 4
        import ml_dtypes
        target = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16,
                  "complex32": ml_dtypes.complex32}.get(dtype.name) or \
            getattr(ml_dtypes, dtype.name)
        return values.astype(target).tobytes()
    kind = {"i": "int", "u": "uint", "f": "float", "c": "complex"}[dtype.kind]
    return (np.arange(n) % 7).astype(f"{kind}{itemsize * 8}").tobytes()


def hurray_tensor(name, shape=(3, 4)):
    dtype = hurray.dtype(name)
    n = int(np.prod(shape))
    buf = aligned_bytes(n * dtype.itemsize)
    buf[:] = np.frombuffer(pattern(dtype, n), np.uint8)
    return hurray.Tensor(buf, dtype, shape), buf


def element_address(t):
    return t.buffer_address + t.byte_offset


# ============================================================================================
# NumPy
# ============================================================================================


@pytest.mark.parametrize("name", NUMPY_DTYPES)
def test_numpy_both_directions(name):
    t, buf = hurray_tensor(name)
    arr = np.from_dlpack(t)
    assert arr.dtype == np.dtype(name) and arr.shape == (3, 4)
    assert arr.ctypes.data == element_address(t)
    assert arr.tobytes() == t.tobytes()
    back = hurray.from_dlpack(arr)
    assert back.dtype is t.dtype and element_address(back) == element_address(t)
    # a write through one side is seen by the other
    size = arr.itemsize
    buf[:size] = buf[size:2 * size]
    assert arr.tobytes() == back.tobytes() == buf.tobytes()
    assert arr.tobytes()[:size] == arr.tobytes()[size:2 * size]


def test_numpy_shapes_strides_and_flags():
    base = np.arange(60, dtype=np.float64).reshape(6, 10)
    for view in [base[::2, 1::3], base[::-1, ::-2], base[2:3, 4:5], base[0, 0, ...], base[:0],
                 base[:, :1], base.T]:
        t = hurray.from_dlpack(view)
        assert t.shape == view.shape and t.tolist() == view.tolist()
        out = np.from_dlpack(t)
        assert out.ctypes.data == view.ctypes.data
        np.testing.assert_array_equal(out, view)
    ro = base[1:]
    ro.flags.writeable = False
    t = hurray.from_dlpack(ro)
    assert t.readonly and element_address(t) == base.ctypes.data + 80
    assert not np.from_dlpack(t).flags.writeable
    b = hurray.from_dlpack(np.array([True, False, True]))
    assert b.dtype is hurray.bool and np.from_dlpack(b).tolist() == [True, False, True]


# ============================================================================================
# PyTorch
# ============================================================================================


def torch_dtype(name):
    return getattr(torch, name)


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
@pytest.mark.parametrize("name", TORCH_DTYPES)
def test_torch_both_directions(name):
    t, buf = hurray_tensor(name)
    x = torch.from_dlpack(t)
    assert x.dtype == torch_dtype(name) and tuple(x.shape) == (3, 4)
    assert x.data_ptr() == element_address(t)
    back = hurray.from_dlpack(x)
    assert back.dtype is t.dtype and element_address(back) == element_address(t)
    y = torch.zeros((2, 3), dtype=torch_dtype(name))
    h = hurray.from_dlpack(y)
    assert h.dtype is t.dtype and element_address(h) == y.data_ptr()
    assert torch.from_dlpack(h).data_ptr() == y.data_ptr()


def test_torch_writes_are_shared_both_ways():
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    t = hurray.from_dlpack(x)
    x[1, 1] = 100
    assert t.tolist()[1][1] == 100.0
    memoryview(t)[0, 0] = -5.0
    assert x[0, 0].item() == -5.0
    back = torch.from_dlpack(t)
    back[2, 3] = 7
    assert x[2, 3].item() == 7


def test_torch_layouts():
    x = torch.arange(24, dtype=torch.int16).reshape(2, 3, 4)
    for view in [x.transpose(0, 2), x[:, ::2, 1:], x[1, 2], x[:, :0], x[:, 1:2, :],
                 x.unsqueeze(1), torch.tensor(3.5)]:
        t = hurray.from_dlpack(view)
        assert t.shape == tuple(view.shape) and t.tolist() == view.tolist()
        assert element_address(t) == view.data_ptr() or view.numel() == 0
        out = torch.from_dlpack(t)
        assert torch.equal(out, view)
    empty = torch.from_dlpack(hurray.Tensor(b"", hurray.float32, [0, 5]))
    assert tuple(empty.shape) == (0, 5)


def test_torch_read_only_and_negative_strides_are_documented_limits():
    # The READ_ONLY flag is set; PyTorch 2.13 imports the memory anyway (it has no read-only
    # tensors). Negative strides are not handed to PyTorch here: it aborts the process on
    # them whoever the producer is (NumPy included). See docs/impl/python-bindings.md.
    ro = hurray.Tensor(np.arange(4, dtype=np.float32).tobytes(), hurray.float32, [4])
    x = torch.from_dlpack(ro)
    assert x.tolist() == [0.0, 1.0, 2.0, 3.0] and x.data_ptr() == element_address(ro)


# ============================================================================================
# JAX
# ============================================================================================


@pytest.mark.parametrize("name", JAX_DTYPES)
def test_jax_both_directions(name):
    t, buf = hurray_tensor(name, (4, 16))
    x = jax.dlpack.from_dlpack(t)
    assert x.dtype == jnp.dtype(name) and x.shape == (4, 16)
    assert x.unsafe_buffer_pointer() == element_address(t)  # zero-copy: memory is aligned
    assert np.asarray(x).tobytes() == t.tobytes()
    y = jnp.arange(24).astype(name).reshape(2, 12)
    h = hurray.from_dlpack(y)
    assert h.dtype is hurray.dtype(name) and h.shape == (2, 12)
    assert element_address(h) == y.unsafe_buffer_pointer()
    assert h.tobytes() == np.asarray(y).tobytes()


def test_jax_sees_writes_to_shared_memory():
    t, buf = hurray_tensor("float32", (8, 8))
    x = jnp.from_dlpack(t)
    buf.view(np.float32)[5] = 123.0
    assert float(x.reshape(-1)[5]) == 123.0


def test_jax_packed_float4_and_special_shapes():
    # JAX exports float4 packed, low nibble first, as DLPack and Hurray both define it (its
    # CPU backend imports no float4, whoever the producer).
    x = jnp.array([0.5, 1.0, 1.5, 2.0], dtype=jnp.float4_e2m1fn)
    assert hurray.from_dlpack(x).tobytes() == b"\x21\x43"  # packed, low nibble first
    assert hurray.from_dlpack(jnp.float32(2.5)).tolist() == 2.5
    assert hurray.from_dlpack(jnp.zeros((0, 3))).shape == (0, 3)


# ============================================================================================
# Lifetime under load
# ============================================================================================


def exchanges():
    data = bytearray(np.arange(16, dtype=np.float32).tobytes())
    t = hurray.Tensor(data, hurray.float32, [4, 4])
    arr = np.arange(16, dtype=np.float32)
    x = torch.arange(16, dtype=torch.float32)
    return t, arr, x, {
        "hurray->numpy": lambda: np.from_dlpack(t),
        "numpy->hurray": lambda: hurray.from_dlpack(arr),
        "hurray->torch": lambda: torch.from_dlpack(t),
        "torch->hurray": lambda: hurray.from_dlpack(x),
        "from_numpy": lambda: hurray.from_numpy(arr),
        "__array__": lambda: t.__array__(),
        "unconsumed capsule": lambda: t.__dlpack__(max_version=(1, 0)),
        "legacy capsule": lambda: t.__dlpack__(),
    }


def test_refcounts_are_restored():
    t, arr, x, kinds = exchanges()
    before = (sys.getrefcount(t), sys.getrefcount(arr), sys.getrefcount(x))
    for make in kinds.values():
        for _ in range(1000):
            make()
    gc.collect()
    assert (sys.getrefcount(t), sys.getrefcount(arr), sys.getrefcount(x)) == before


@pytest.mark.skipif(SANITIZED, reason="measures the sanitizer's allocator, not hurray")
def test_rss_does_not_grow_over_100000_exchanges():
    t, arr, x, kinds = exchanges()
    for make in kinds.values():  # warm up caches and allocator pools
        for _ in range(2000):
            make()
    gc.collect()
    start = rss_bytes()
    for make in kinds.values():
        for _ in range(100_000):
            make()
    gc.collect()
    growth = rss_bytes() - start
    # 800,000 exchanges: a leak of even one 64-byte block each would be ~50 MiB.
    assert growth < 4 * 1024 * 1024, f"RSS grew by {growth} bytes"


@pytest.mark.parametrize("mode", ["strict", "relaxed"])
def test_modes_leave_peer_exchange_alone(mode):
    with hurray.mode(mode):
        t, _ = hurray_tensor("bfloat16")
        assert torch.from_dlpack(t).dtype == torch.bfloat16
        assert hurray.from_dlpack(torch.zeros(2, dtype=torch.bfloat16)).dtype is t.dtype
        assert hurray.from_dlpack(jnp.zeros(2, jnp.bfloat16)).dtype is t.dtype
