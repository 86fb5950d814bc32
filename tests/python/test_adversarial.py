"""Adversarial properties, explored with hypothesis: random shapes, strides and offsets against
random exporters (bytes, bytearray, memoryview slices, NumPy arrays and their negative-stride
views, PyTorch tensors), and random foreign contexts from a second copy of the library (the
native peer). Each property states its oracle independently of the code under test: which bytes
an array addresses is computed here, from the shape, strides and offset.

The number of examples is bounded for CI (HURRAY_HYPOTHESIS_EXAMPLES scales it, e.g. 10 for
10x as many); no example database is written."""

import itertools
import math
import os
import struct

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import hurray
from conftest import peer

np = peer("numpy")
torch = peer("torch")

SCALE = float(os.environ.get("HURRAY_HYPOTHESIS_EXAMPLES", "1"))


def bounded(examples):
    return settings(max_examples=max(1, int(examples * SCALE)), deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow])


# (hurray dtype, struct format, NumPy dtype): integers, so that values compare exactly.
DTYPES = [(hurray.uint8, "B", np.uint8), (hurray.dtype.int16, "h", np.int16),
          (hurray.int32, "i", np.int32), (hurray.int64, "q", np.int64)]


# ============================================================================================
# Tensor(data, dtype, shape, strides=..., byte_offset=...) against the buffer protocol
# ============================================================================================


@st.composite
def exporters(draw):
    """(exporter, the bytearray or bytes that holds its memory, where its bytes start there,
    its length, whether it is writable)."""
    kind = draw(st.sampled_from(["bytes", "bytearray", "memoryview", "numpy"]))
    n = draw(st.integers(0, 96))
    raw = draw(st.binary(min_size=n, max_size=n))
    if kind == "bytes":
        return raw, raw, 0, n, False
    if kind == "bytearray":
        b = bytearray(raw)
        return b, b, 0, n, True
    pad = draw(st.integers(0, 70))  # neighbours in the same allocation, before and after
    base = bytearray(draw(st.binary(min_size=pad + n + 8, max_size=pad + n + 8)))
    base[pad:pad + n] = raw
    if kind == "memoryview":
        return memoryview(base)[pad:pad + n], base, pad, n, True
    return np.frombuffer(base, np.uint8)[pad:pad + n], base, pad, n, True


def addressed(shape, strides, byte_offset, itemsize):
    """The byte offsets of every element, in C order, relative to the exporter's first byte."""
    return [byte_offset + sum(i * s * itemsize for i, s in zip(index, strides))
            for index in itertools.product(*(range(n) for n in shape))]


def nested(flat, shape):
    if not shape:
        return flat[0]
    step = len(flat) // shape[0] if shape[0] else 0
    return [nested(flat[k * step:(k + 1) * step], shape[1:]) for k in range(shape[0])]


@bounded(300)
@given(exporter=exporters(), dtype=st.sampled_from(DTYPES), data=st.data())
def test_random_geometry_over_random_exporters(exporter, dtype, data):
    source, holder, start, length, writable = exporter
    kind, fmt, np_dtype = dtype
    itemsize = struct.calcsize(fmt)
    ndim = data.draw(st.integers(0, 3))
    shape = data.draw(st.lists(st.integers(0, 5), min_size=ndim, max_size=ndim))
    strides = data.draw(st.lists(st.integers(-12, 12), min_size=ndim, max_size=ndim))
    byte_offset = data.draw(st.integers(0, length + 8))
    offsets = addressed(shape, strides, byte_offset, itemsize)
    if offsets:
        inside = min(offsets) >= 0 and max(offsets) + itemsize <= length
    else:
        inside = byte_offset <= length  # an empty array still sits at its offset
    before = bytes(holder)
    if not inside:
        with pytest.raises(hurray.LayoutError) as info:
            hurray.Tensor(source, kind, shape, strides=strides, byte_offset=byte_offset)
        assert type(info.value) is hurray.LayoutError
        # in the exporter's own terms, whatever rounding the wrapper does underneath
        if offsets and min(offsets) < 0:
            message = f"the array starts {-min(offsets)} bytes before its buffer's data"
        else:
            begin, end = (min(offsets), max(offsets) + itemsize) if offsets else (byte_offset,) * 2
            message = f"addresses bytes [{begin}, {end}) of buffer 0, whose byte_size is {length}"
        assert str(info.value) == message
        return
    t = hurray.Tensor(source, kind, shape, strides=strides, byte_offset=byte_offset)
    assert t.readonly is not writable
    values = [struct.unpack_from("<" + fmt, before, start + o)[0] for o in offsets]
    assert t.tolist() == nested(values, shape)
    if not writable or not offsets:
        return
    # A write through NumPy (DLPack) reaches exactly the addressed bytes of the exporter.
    np.from_dlpack(t)[...] = -1 if fmt != "B" else 0xFF
    del t
    touched = {start + o + j for o in offsets for j in range(itemsize)}
    after = bytes(holder)
    assert all(after[i] == (0xFF if i in touched else before[i]) for i in range(len(after)))


# ============================================================================================
# Views of NumPy arrays and PyTorch tensors, through from_numpy and from_dlpack
# ============================================================================================


@st.composite
def slices(draw, extent, negative):
    step = draw(st.sampled_from([1, 2, 3] + ([-1, -2, -3] if negative else [])))
    start = draw(st.one_of(st.none(), st.integers(0, extent)))
    stop = draw(st.one_of(st.none(), st.integers(0, extent)))
    return slice(start, stop, step)


def elements_inside(t, low, high, itemsize):
    """Whether every element of t lies in [low, high) (addresses)."""
    first = t.buffer_address + t.byte_offset
    reach = [(n - 1) * s * itemsize for n, s in zip(t.shape, t.strides) if n > 1]
    if t.size == 0:
        return True
    return (first + sum(r for r in reach if r < 0) >= low and
            first + sum(r for r in reach if r > 0) + itemsize <= high)


@bounded(150)
@given(rows=st.integers(1, 7), cols=st.integers(1, 7), transpose=st.booleans(), data=st.data())
def test_numpy_views_including_negative_strides(rows, cols, transpose, data):
    base = np.arange(rows * cols, dtype=np.int32).reshape(rows, cols)
    index = (data.draw(slices(rows, True)), data.draw(slices(cols, True)))
    view = base[index].T if transpose else base[index]
    for entry in (hurray.from_numpy, hurray.from_dlpack):
        t = entry(view)
        assert t.shape == view.shape and t.tolist() == view.tolist()
        assert elements_inside(t, base.ctypes.data, base.ctypes.data + base.nbytes, 4)
    expected = base.copy()
    (expected[index].T if transpose else expected[index])[...] = -7
    np.from_dlpack(hurray.from_dlpack(view))[...] = -7
    np.testing.assert_array_equal(base, expected)


@bounded(100)
@given(rows=st.integers(1, 7), cols=st.integers(1, 7), transpose=st.booleans(), data=st.data())
def test_torch_views(rows, cols, transpose, data):
    base = torch.arange(rows * cols, dtype=torch.int32).reshape(rows, cols)
    index = (data.draw(slices(rows, False)), data.draw(slices(cols, False)))
    view = base[index].t() if transpose else base[index]
    t = hurray.from_dlpack(view)
    assert t.shape == tuple(view.shape) and t.tolist() == view.tolist()
    start = base.data_ptr()
    assert elements_inside(t, start, start + base.numel() * 4, 4)
    expected = base.clone()
    (expected[index].t() if transpose else expected[index]).fill_(-7)
    np.from_dlpack(t)[...] = -7
    assert torch.equal(base, expected)


# ============================================================================================
# Foreign contexts from a second copy of the library
# ============================================================================================

KINDS = ["dense", "strided", "int4", "per_channel", "block", "sparse_coo", "sparse_csr",
         "paged", "composite"]
DEVICES = [("cpu", "device"), ("cuda", "device"), ("cuda", "host"), ("rocm", "device"),
           ("opencl", "unified"), ("metal", "device")]
LAYOUT_OF = {"strided": "dense", "int4": "dense"}
CLASSES = {"device": 0, "host": 1, "unified": 2}


@bounded(120)
@given(kind=st.sampled_from(KINDS), device=st.sampled_from(DEVICES), readonly=st.booleans(),
       context_flags=st.sampled_from([None, 0, 1, 2, 0x8000_0001]), protect=st.booleans())
def test_random_foreign_contexts(peer_ext, kind, device, readonly, context_flags, protect):
    name, memory_class = device
    producer = peer_ext.make(kind, device_tag=hurray.Device(name).tag, memory_class=CLASSES[memory_class],
                             readonly=readonly, context_flags=context_flags,
                             protect=protect and name == "cpu")
    flags = (1 if readonly else 0) if context_flags is None else context_flags
    if flags & ~1:
        with pytest.raises(hurray.InvalidArgumentError, match="unknown bits"):
            hurray.from_hurray(producer)
        return
    if readonly and not flags & 1:
        with pytest.raises(hurray.InvalidArgumentError, match="is read-only but the tensor"):
            hurray.from_hurray(producer)
        return
    t = hurray.from_hurray(producer)
    assert t.readonly is bool(readonly or flags & 1)
    assert t.layout == LAYOUT_OF.get(kind, kind)
    for b in t.buffers:
        assert (b["device"], b["memory_class"]) == (hurray.Device(name, 0), memory_class)
    if name == "cpu" and kind == "dense":
        assert t.tolist() == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
        assert np.from_dlpack(t).flags.writeable is not t.readonly
    # Handed on, the tensor keeps its read-only state on the peer's side too.
    assert bool(peer_ext.consume(t).summary["flags"] & 1) is t.readonly
