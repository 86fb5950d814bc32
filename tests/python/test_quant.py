"""hurray.dequantize and hurray.quantize (ADR-085) against NumPy references, ml_dtypes' float16
and bfloat16 rounding, gguf's dequantisation of Q8_0 and Q4_0 blocks described in place over
one buffer (from_parts, ADR-086), PyTorch as the consumer, and relaxed mode's arithmetic on
quantised tensors."""

import struct

import numpy as np
import pytest

import hurray
import hurray.array_api as xp
from conftest import peer

ml_dtypes = peer("ml_dtypes")
RNG = np.random.default_rng(21)
D = hurray.dtype


def packed(q, bits):
    """The packed bytes of the integers `q` (row-major), `bits` per element, low bits first."""
    flat = (np.asarray(q).reshape(-1).astype(np.int64) & ((1 << bits) - 1)).astype(np.uint8)
    per = 8 // bits
    flat = np.concatenate([flat, np.zeros((-len(flat)) % per, np.uint8)])
    out = np.zeros(len(flat) // per, np.uint8)
    for k in range(per):
        out |= flat[k::per] << (k * bits)
    return out.tobytes()


def int_tensor(q, dtype):
    info = D(dtype)
    if info.bits < 8:
        return hurray.Tensor(packed(q, info.bits), info, list(np.shape(q)))
    return hurray.from_numpy(np.ascontiguousarray(q))


def bits_of(a):
    a = np.asarray(a)
    return a.view({2: np.uint16, 4: np.uint32}[a.dtype.itemsize])


def same(got, want):
    """Bitwise equality, any NaN equal to any NaN."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype
    nan = np.isnan(want.astype(np.float32))
    assert np.array_equal(np.isnan(got.astype(np.float32)), nan)
    assert np.array_equal(bits_of(got)[~nan], bits_of(want)[~nan])


RANGES = {"int4": (-8, 8), "uint4": (0, 16), "int2": (-2, 2), "uint2": (0, 4), "uint1": (0, 2),
          "int8": (-128, 128), "uint8": (0, 256)}


# ---- dequantize ----------------------------------------------------------------------------

@pytest.mark.parametrize("vdtype", ["int4", "uint4", "int8", "uint2"])
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("zero_points", [None, "int8", "float32"])
def test_per_channel_matches_numpy(vdtype, axis, zero_points):
    lo, hi = RANGES[vdtype]
    q = RNG.integers(lo, hi, size=(5, 37), dtype=np.int64)
    n = q.shape[axis]
    scales = RNG.uniform(0.01, 2, n).astype(np.float32)
    parts = [int_tensor(q.astype(np.int8 if lo < 0 else np.uint8), vdtype),
             hurray.from_numpy(scales)]
    z = None
    if zero_points:
        z = RNG.integers(-3, 4, n).astype(zero_points)
        parts.append(hurray.from_numpy(z))
    t = hurray.Tensor.from_parts("per_channel", parts, axis=axis)
    shape = [1, 1]
    shape[axis] = n
    s = scales.reshape(shape)
    v = q.astype(np.float32)
    want = (v - z.astype(np.float32).reshape(shape)) * s if z is not None else v * s
    same(np.asarray(hurray.dequantize(t)), want.astype(np.float32))
    same(np.asarray(hurray.dequantize(t, D.float16)), want.astype(np.float16))
    same(np.asarray(hurray.dequantize(t, D.bfloat16)), want.astype(ml_dtypes.bfloat16))


@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("scale_dtype", ["float32", "float16", "bfloat16"])
def test_block_with_mins_matches_numpy(axis, scale_dtype):
    shape = (4, 6, 50)
    bs = (3, 4, 32)[axis]
    q = RNG.integers(0, 16, size=shape, dtype=np.int64)
    sshape = list(shape)
    sshape[axis] = -(-shape[axis] // bs)
    npscale = np.dtype(ml_dtypes.bfloat16) if scale_dtype == "bfloat16" else np.dtype(scale_dtype)
    scales = RNG.uniform(0.01, 2, sshape).astype(npscale)
    mins = RNG.uniform(-3, 0, sshape).astype(np.float16)
    t = hurray.Tensor.from_parts(
        "block", [int_tensor(q.astype(np.uint8), "uint4"), hurray.from_numpy(scales),
                  hurray.from_numpy(mins)], axis=axis, block_size=bs)
    rep = np.repeat
    s = rep(scales.astype(np.float32), bs, axis=axis).take(range(shape[axis]), axis=axis)
    m = rep(mins.astype(np.float32), bs, axis=axis).take(range(shape[axis]), axis=axis)
    want = q.astype(np.float32) * s + m
    same(np.asarray(hurray.dequantize(t)), want)


def test_strided_and_reversed_values():
    q = RNG.integers(-128, 128, size=(6, 9), dtype=np.int8)
    scales = RNG.uniform(0.5, 1, 9).astype(np.float32)
    view = q[::-2, ::-1]  # negative, non-unit strides
    t = hurray.Tensor.from_parts(
        "per_channel", [hurray.from_numpy(view), hurray.from_numpy(scales[::-1])], axis=1)
    same(np.asarray(hurray.dequantize(t)), view.astype(np.float32) * scales[::-1])


@pytest.mark.parametrize("dtype", ["int4", "uint4", "int2", "uint2", "uint1"])
def test_unpack_matches_numpy(dtype):
    lo, hi = RANGES[dtype]
    q = RNG.integers(lo, hi, size=(7, 13), dtype=np.int64)
    t = int_tensor(q, dtype)
    out = D.int8 if lo < 0 else D.uint8
    got = hurray.dequantize(t, out)
    assert got.dtype == out
    assert np.array_equal(np.asarray(got), q.astype(np.int8 if lo < 0 else np.uint8))
    if lo == 0:
        assert np.array_equal(np.asarray(hurray.dequantize(t, D.int8)), q.astype(np.int8))
    assert np.array_equal(np.asarray(hurray.dequantize(t)), q.astype(np.float32))


def test_unpack_agrees_with_ml_dtypes_int4():
    q = RNG.integers(-8, 8, size=64, dtype=np.int8)
    got = np.asarray(hurray.dequantize(int_tensor(q, "int4"), D.int8))
    assert np.array_equal(got, q.astype(ml_dtypes.int4).astype(np.int8))


@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
                                  "float8_e5m2fnuz", "float8_e8m0fnu", "float8_e3m4",
                                  "float8_e4m3", "float8_e4m3b11fnuz"])
def test_every_float8_code_matches_ml_dtypes(name):
    codes = np.arange(256, dtype=np.uint8)
    t = hurray.Tensor(codes.tobytes(), D(name), [256])
    same(np.asarray(hurray.dequantize(t)), codes.view(getattr(ml_dtypes, name)).astype(np.float32))


@pytest.mark.parametrize("name", ["float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn"])
def test_every_sub_byte_float_code_matches_ml_dtypes(name):
    bits = D(name).bits
    codes = np.arange(1 << bits, dtype=np.uint8)
    t = hurray.Tensor(packed(codes, bits) if bits == 4 else _pack6(codes), D(name), [len(codes)])
    want = codes.view(getattr(ml_dtypes, name)).astype(np.float32)
    same(np.asarray(hurray.dequantize(t)), want)


def _pack6(codes):
    value = 0
    for i, c in enumerate(codes.tolist()):
        value |= c << (6 * i)
    return value.to_bytes((6 * len(codes) + 7) // 8, "little")


def test_float_outputs_round_like_numpy_and_ml_dtypes():
    x = RNG.standard_normal(1 << 16).astype(np.float32) * np.float32(2.0) ** RNG.integers(
        -30, 20, 1 << 16).astype(np.float32)
    x[:6] = [65504, 65520, 65519.996, 2.0**-25, 1.5 * 2**-25, np.inf]
    t = hurray.from_numpy(x)
    with np.errstate(over="ignore"):
        same(np.asarray(hurray.dequantize(t, D.float16)), x.astype(np.float16))
    same(np.asarray(hurray.dequantize(t, D.bfloat16)), x.astype(ml_dtypes.bfloat16))


# ---- GGUF-shaped blocks over one buffer ---------------------------------------------------

def q8_0_tensor(raw, rows, cols):
    """A Q8_0 tensor over GGUF's bytes: 34-byte blocks, a float16 scale then 32 int8."""
    nb = cols // 32
    data = raw.tobytes()
    values = hurray.Tensor(data, D.int8, [rows, nb, 32], strides=[34 * nb, 34, 1], byte_offset=2)
    scales = hurray.Tensor(data, D.float16, [rows, nb, 1], strides=[17 * nb, 17, 1])
    return hurray.Tensor.from_parts("block", [values, scales], axis=2, block_size=32)


def test_q8_0_blocks_in_one_buffer_match_gguf():
    gguf = peer("gguf")
    T = gguf.GGMLQuantizationType
    x = RNG.standard_normal((8, 128)).astype(np.float32)
    raw = gguf.quants.quantize(x, T.Q8_0)
    t = q8_0_tensor(raw, 8, 128)
    assert len(t.buffers) == 1 and t.buffers[0]["role"] == "mixed"
    assert raw.nbytes <= t.buffers[0]["byte_size"] < raw.nbytes + 64  # ADR-008's slack only
    got = np.asarray(hurray.dequantize(t)).reshape(8, 128)
    same(got, gguf.quants.dequantize(raw, T.Q8_0))


def test_q4_0_blocks_match_gguf():
    """Q4_0: element j of a block in the low nibble of byte j, element j + 16 in its high
    nibble, x = (q - 8) * d: values [rows, blocks, 2, 16] over the file's bytes (nibble
    strides 1 for the half, 2 within it), the scale broadcast over both halves by a zero
    stride, mins -8 * d beside them."""
    gguf = peer("gguf")
    T = gguf.GGMLQuantizationType
    rows, cols = 4, 256
    nb = cols // 32
    x = RNG.standard_normal((rows, cols)).astype(np.float32)
    raw = gguf.quants.quantize(x, T.Q4_0)
    data = raw.tobytes()
    values = hurray.Tensor(data, D.uint4, [rows, nb, 2, 16], strides=[36 * nb, 36, 1, 2],
                           byte_offset=2)
    scales = hurray.Tensor(data, D.float16, [rows, nb, 2, 1], strides=[9 * nb, 9, 0, 1])
    d = np.frombuffer(data, np.uint8).reshape(rows, nb, 18)[:, :, :2].copy().view(np.float16)
    mins = hurray.from_numpy(np.broadcast_to((d * np.float16(-8)).reshape(rows, nb, 1, 1),
                                             (rows, nb, 2, 1)))
    t = hurray.Tensor.from_parts("block", [values, scales, mins], axis=3, block_size=16)
    got = np.asarray(hurray.dequantize(t)).reshape(rows, cols)
    want = gguf.quants.dequantize(raw, T.Q4_0)
    # Equal values; only zeros may differ in sign: llama.cpp's (8 - 8) * d is -0.0 for a
    # negative d, the block layout's 8 * d + (-8 * d) is +0.0.
    assert np.array_equal(got, want)
    assert np.array_equal(bits_of(got)[want != 0], bits_of(want)[want != 0])


def test_one_buffer_block_tensor_saves_as_one_buffer(tmp_path):
    gguf = peer("gguf")
    raw = gguf.quants.quantize(RNG.standard_normal((16, 32)).astype(np.float32),
                               gguf.GGMLQuantizationType.Q8_0)
    t = q8_0_tensor(raw, 16, 32)
    hurray.save(tmp_path / "q.hurray", {"w": t})
    back = hurray.load(tmp_path / "q.hurray")["w"]
    assert [b["role"] for b in back.buffers] == ["mixed"]
    assert back.buffers[0]["byte_size"] < 544 + 64
    same(np.asarray(hurray.dequantize(back)), np.asarray(hurray.dequantize(t)))


# ---- quantize ------------------------------------------------------------------------------

def reference_quantize(x, qbits, axis, block, scale_dtype):
    """NumPy's version of buffer-protocol.md §8.9: values int8 (unpacked) and float32 scales."""
    qmax = np.float32(7 if qbits == 4 else 127)
    x32 = np.asarray(x).astype(np.float32)
    if block is None:
        others = tuple(k for k in range(x32.ndim) if k != axis)
        amax = np.max(np.abs(x32), axis=others)
        shape = [1] * x32.ndim
        shape[axis] = -1
        spread = amax.reshape(shape)
    else:
        n = x32.shape[axis]
        pad = -n % block
        moved = np.moveaxis(x32, axis, -1)
        padded = np.concatenate([moved, np.zeros(moved.shape[:-1] + (pad,), np.float32)], -1)
        amax = np.max(np.abs(padded.reshape(padded.shape[:-1] + (-1, block))), axis=-1)
        amax = np.moveaxis(amax, -1, axis)
        spread = np.repeat(amax, block, axis=axis).take(range(n), axis=axis)
    s = (amax / qmax).astype(np.float32)
    stored = s.astype(scale_dtype)
    s_used = stored.astype(np.float32)
    s_spread = (spread / qmax).astype(np.float32).astype(scale_dtype).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(s_spread == 0, 0, np.clip(np.rint(x32 / s_spread), -qmax, qmax))
    return q.astype(np.int8), stored, s_used


@pytest.mark.parametrize("dtype", ["int4", "int8"])
@pytest.mark.parametrize("layout,axis,block", [("per_channel", 0, None), ("per_channel", 1, None),
                                               ("block", 1, 32), ("block", 0, 3)])
@pytest.mark.parametrize("scale_dtype", ["float32", "float16", "bfloat16"])
def test_quantize_matches_numpy(dtype, layout, axis, block, scale_dtype):
    x = RNG.standard_normal((9, 70)).astype(np.float32)
    x[3] = 0  # a row of zeros: scale 0
    npscale = np.dtype(ml_dtypes.bfloat16) if scale_dtype == "bfloat16" else np.dtype(scale_dtype)
    kw = {"block_size": block} if block else {}
    t = hurray.quantize(x, dtype, layout=layout, axis=axis, scale_dtype=scale_dtype, **kw)
    assert t.layout == layout and t.dtype.name == dtype and t.shape == x.shape
    q, stored, s_used = reference_quantize(x, D(dtype).bits, axis, block, npscale)
    assert np.array_equal(np.asarray(hurray.dequantize(t.parts[0], D.int8)), q)
    same(np.asarray(t.parts[1]), stored)
    err = np.abs(np.asarray(hurray.dequantize(t)) - x)
    assert np.all(err <= np.max(s_used) / 2 * 1.01)


@pytest.mark.parametrize("source", ["float64", "float16", "bfloat16", "strided"])
def test_quantize_takes_any_float_input(source):
    x = RNG.standard_normal((6, 40))
    if source == "bfloat16":
        x = x.astype(ml_dtypes.bfloat16)
        arg = hurray.from_numpy(x)
    elif source == "strided":
        x = x.astype(np.float32)[:, ::-3]
        arg = hurray.from_numpy(x)
    else:
        x = x.astype(source)
        arg = x  # an ndarray, through numpy.asarray
    t = hurray.quantize(arg, "int8", layout="block", block_size=8)
    q, stored, _ = reference_quantize(x, 8, 1, 8, np.float32)
    assert np.array_equal(np.asarray(hurray.dequantize(t.parts[0], D.int8)), q)
    same(np.asarray(t.parts[1]), stored)


def test_quantize_round_trip_through_a_file(tmp_path):
    x = RNG.standard_normal((32, 64)).astype(np.float32)
    t = hurray.quantize(x, "int4", scale_dtype="float16")
    hurray.save(tmp_path / "w.hurray", {"w": t})
    back = hurray.load(tmp_path / "w.hurray")["w"]
    assert back.layout == "per_channel" and back.dtype == D.int4
    same(np.asarray(hurray.dequantize(back)), np.asarray(hurray.dequantize(t)))


def test_dequantized_tensor_goes_to_pytorch():
    torch = peer("torch")
    x = RNG.standard_normal((4, 64)).astype(np.float32)
    t = hurray.quantize(x, "int8", layout="block", block_size=32)
    w = torch.from_dlpack(hurray.dequantize(t, D.bfloat16))
    assert w.dtype == torch.bfloat16 and tuple(w.shape) == (4, 64)
    want = np.asarray(hurray.dequantize(t)).astype(ml_dtypes.bfloat16).astype(np.float32)
    assert np.array_equal(w.float().numpy(), want)


# ---- refusals ------------------------------------------------------------------------------

def test_refusals_name_what_is_wrong():
    x = np.ones((2, 4), np.float32)
    with pytest.raises(TypeError, match="block_size="):
        hurray.quantize(x, "int4", layout="block")
    with pytest.raises(hurray.DTypeError, match="uint4"):
        hurray.quantize(x, "uint4")
    with pytest.raises(hurray.DTypeError, match="int32"):
        hurray.quantize(np.ones((2, 2), np.int32), "int8")
    with pytest.raises(hurray.LayoutError, match="axis 2"):
        hurray.quantize(x, "int8", axis=2)
    x[1, 2] = np.nan
    with pytest.raises(hurray.InvalidArgumentError, match="element 6 is NaN"):
        hurray.quantize(x, "int8")
    with pytest.raises(hurray.InvalidArgumentError, match="float16"):
        hurray.quantize(np.full((2, 2), 1e30, np.float32), "int8", scale_dtype="float16")
    t = hurray.quantize(np.ones((2, 4), np.float32), "int4")
    with pytest.raises(hurray.DTypeError, match="float64"):
        hurray.dequantize(t, "float64")
    with pytest.raises(hurray.DTypeError, match="int4"):
        hurray.dequantize(t.parts[0], "uint8")
    with pytest.raises(TypeError, match="hurray.Tensor"):
        hurray.dequantize(np.ones(3))
    indices = hurray.from_numpy(np.array([[0, 1]], np.int64))
    coo = hurray.Tensor.from_parts("sparse_coo", [indices, hurray.from_numpy(np.ones(2))],
                                   shape=[2])
    with pytest.raises(hurray.UnsupportedError, match="sparse_coo"):
        hurray.dequantize(coo)


def test_parts_over_different_memory_keep_their_buffers():
    raw = struct.pack("<4f", 1, 2, 3, 4)
    v = hurray.Tensor(bytes(4), D.int8, [4])
    s1 = hurray.Tensor(raw, D.float32, [4])
    t = hurray.Tensor.from_parts("per_channel", [v, s1], axis=0)
    assert [b["role"] for b in t.buffers] == ["values", "scales"]


# ---- relaxed mode ------------------------------------------------------------------------

def test_relaxed_mode_computes_on_quantised_tensors():
    x = np.array([[7.0, -3.5], [1.75, 0.5]], np.float32)
    q = hurray.quantize(x, "int4")
    numbers = np.asarray(hurray.dequantize(q))
    packed4 = hurray.Tensor(bytes([0x21, 0xF8]), D.int4, [4])
    with hurray.mode("relaxed"):
        assert xp.astype(q, xp.float32).tolist() == numbers.tolist()
        assert xp.astype(q, xp.float64).dtype == xp.float64
        assert (q * 2).tolist() == (numbers * 2).tolist()
        assert xp.matmul(q, q).tolist() == (numbers @ numbers).tolist()
        assert xp.astype(packed4, xp.int16).tolist() == [1, 2, -8, -1]
        assert (packed4 + 1).tolist() == [2, 3, -7, 0]
        with pytest.raises(hurray.InvalidArgumentError, match="quantised"):
            q += 1
    with pytest.raises(TypeError, match="relaxed mode"):
        xp.astype(q, xp.float32)
    with pytest.raises(TypeError, match="relaxed mode"):
        q * 2


def test_dequantize_into_out():
    t = hurray.quantize(RNG.standard_normal((3, 40)).astype(np.float32), "int8")
    out = np.full((3, 40), np.nan, np.float32)
    assert hurray.dequantize(t, out=hurray.from_numpy(out)).shape == (3, 40)
    same(out, np.asarray(hurray.dequantize(t)))
    half = np.empty((3, 40), np.float16)
    hurray.dequantize(t, D.float16, out=hurray.from_numpy(half))
    same(half, np.asarray(hurray.dequantize(t, D.float16)))
    for bad in (np.empty((3, 40), np.float64), np.empty((40, 3), np.float32),
                np.empty((3, 80), np.float32)[:, ::2]):
        with pytest.raises(hurray.InvalidArgumentError, match="row-major float32"):
            hurray.dequantize(t, out=hurray.from_numpy(bad))
    readonly = np.empty((3, 40), np.float32)
    readonly.flags.writeable = False
    with pytest.raises(hurray.InvalidArgumentError, match="read-only"):
        hurray.dequantize(t, out=hurray.from_numpy(readonly))


def test_kernels_release_the_gil():
    """While one thread dequantises 64M elements, another runs Python: with the GIL held
    through the call, no bytecode of the other thread would run in its middle half."""
    import threading
    import time

    t = hurray.quantize(np.ones((4096, 1 << 14), np.float32), "int4")
    span, done = [], threading.Event()

    def work():
        t0 = time.perf_counter()
        hurray.dequantize(t)
        span.extend((t0, time.perf_counter()))
        done.set()

    seen = []
    worker = threading.Thread(target=work)
    worker.start()
    while not done.is_set():
        seen.append(time.perf_counter())
    worker.join()
    t0, t1 = span
    quarter = (t1 - t0) / 4
    assert any(t0 + quarter < s < t1 - quarter for s in seen)
