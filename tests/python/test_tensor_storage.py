"""How a Tensor keeps what it was made from (ADR-059): the context in the object, owners by
reference, the garbage collector only where a cycle can form, and the NumPy array the array API
engine computes on."""

import gc
import sys
import weakref

import pytest

import hurray
from conftest import peer

np = peer("numpy")
_ndarray = hurray._hurray._ndarray


def test_from_numpy_holds_the_array_by_reference_and_drops_it_once():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    refs = sys.getrefcount(a)
    t = hurray.from_numpy(a)
    assert sys.getrefcount(a) == refs + 1
    del t
    assert sys.getrefcount(a) == refs


def test_tensor_over_bytes_holds_them_by_reference():
    data = bytes(range(8))
    refs = sys.getrefcount(data)
    t = hurray.Tensor(data, hurray.uint8, [2, 4])
    assert sys.getrefcount(data) == refs + 1 and t.readonly
    assert t.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    del t
    assert sys.getrefcount(data) == refs


def test_a_bytearray_stays_locked_while_a_tensor_holds_it():
    data = bytearray(8)
    t = hurray.Tensor(data, hurray.uint8, [8])
    with pytest.raises(BufferError):
        data.append(1)
    del t
    data.append(1)


@pytest.mark.parametrize("make, tracked", [
    (lambda: hurray.Tensor(bytes(8), hurray.uint8, [8]), False),
    (lambda: hurray.Tensor(bytearray(8), hurray.uint8, [8]), False),
    (lambda: hurray.from_numpy(np.zeros(8, np.uint8)), False),
    (lambda: hurray.from_dlpack(np.zeros(8, np.uint8)), False),
    # an exporter or owner of any other kind may refer back to the tensor
    (lambda: hurray.Tensor(memoryview(bytes(8)), hurray.uint8, [8]), True),
    (lambda: hurray.Tensor.from_address(0, hurray.uint8, [0], device="cpu", owner=[]), True),
], ids=["bytes", "bytearray", "numpy", "dlpack", "memoryview", "from_address-owner"])
def test_the_collector_tracks_only_tensors_whose_owner_can_form_a_cycle(make, tracked):
    assert gc.is_tracked(make()) is tracked


def test_a_cycle_through_an_owner_is_still_collected():
    owner = []
    t = hurray.Tensor.from_address(0, hurray.uint8, [0], device="cpu", owner=owner)
    owner.append(t)
    ref = weakref.ref(t)
    del t, owner
    gc.collect()
    assert ref() is None


@pytest.mark.parametrize("shape", [(), (5,), (2, 3), (2, 1, 3, 2), (2, 1, 3, 2, 2)],
                         ids=lambda s: f"{len(s)}d")
def test_the_engine_computes_on_the_array_a_tensor_was_made_from(shape):
    a = np.arange(int(np.prod(shape)), dtype=np.int16).reshape(shape)
    hurray.from_numpy(a)  # maps the dtype
    t = hurray.from_numpy(a)
    assert _ndarray(t) is a
    np.testing.assert_array_equal(t.__array__(), a)
    assert t.__array__() is not a  # the protocol still gives a view of its own


def test_a_view_with_negative_strides_is_its_own_array():
    a = np.arange(24, dtype=np.float64).reshape(4, 6)[::-1, 1::2]
    t = hurray.from_numpy(a)
    assert _ndarray(t) is a and t.strides == (-6, 2)
    assert t.tolist() == a.tolist()


def test_an_array_that_changed_under_the_tensor_is_not_used():
    a = np.zeros(4, np.float32)
    t = hurray.from_numpy(a)
    assert _ndarray(t) is a and not t.readonly
    a.flags.writeable = False  # the tensor stays writable, as made
    view = _ndarray(t)
    assert view is not a and view.flags.writeable
    view[0] = 3
    assert a[0] == 3
    b = np.zeros(4, np.float32)
    u = hurray.from_numpy(b)
    b.resize(8, refcheck=False)  # the array's memory moved: the tensor's did not
    assert _ndarray(u) is not b


def test_read_only_arrays_stay_read_only_through_the_engine():
    a = np.arange(4, dtype=np.int32)
    a.flags.writeable = False
    t = hurray.from_numpy(a)
    assert t.readonly and _ndarray(t) is a
    with pytest.raises(hurray.InvalidArgumentError, match="read-only"):
        t += t


def test_ndarray_of_a_non_tensor_is_a_type_error():
    with pytest.raises(TypeError, match="hurray.Tensor"):
        _ndarray(np.zeros(3))


def test_the_dispatch_in_c_gives_the_python_operators_results():
    xp = pytest.importorskip("hurray.array_api")
    rng = np.random.default_rng(1)
    for dtype in ("int32", "float32", "float64", "complex128", "bool"):
        a = rng.standard_normal(8).astype(dtype) if dtype != "bool" else rng.random(8) > 0.5
        b = rng.standard_normal(8).astype(dtype) if dtype != "bool" else rng.random(8) > 0.5
        x, y = xp.asarray(a), xp.asarray(b)
        assert _ndarray(x) is not None
        for op in ("__add__", "__mul__", "__eq__", "__lt__", "__ne__"):
            try:
                want = getattr(a, op)(b)
            except TypeError:
                with pytest.raises(TypeError):
                    getattr(x, op)(y)
                continue
            got = getattr(x, op)(y)
            assert type(got) is hurray.Tensor
            np.testing.assert_array_equal(got.__array__(), want)
    # a 0-d result (NumPy gives a scalar) is a 0-d tensor
    z = xp.asarray(np.float32(2)) + xp.asarray(np.float32(3))
    assert type(z) is hurray.Tensor and z.shape == () and float(z) == 5.0
    # mixed kinds still raise the standard's TypeError
    with pytest.raises(TypeError):
        xp.asarray(np.int8([1])) + xp.asarray(np.float32([1]))


@pytest.mark.parametrize("make", [
    lambda: hurray.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3)[:, ::-1]),
    lambda: hurray.Tensor(bytes(range(12)), hurray.int16, [2, 3]),
    # more dimensions than the object keeps inline
    lambda: hurray.from_numpy(np.zeros((1, 2, 1, 2, 3), np.int8)),
    lambda: hurray.from_numpy(np.zeros((0, 3), np.float64)),
], ids=["strided", "bytes", "5d", "empty"])
def test_from_hurray_of_a_cpu_tensor_shares_it_and_holds_it_once(make):
    t = make()
    refs = sys.getrefcount(t)
    u = hurray.from_hurray(t)
    assert sys.getrefcount(t) == refs + 1
    assert (u.shape, u.strides, u.dtype, u.readonly, u.byte_offset) == \
        (t.shape, t.strides, t.dtype, t.readonly, t.byte_offset)
    assert u.buffers == t.buffers
    assert u.tobytes() == t.tobytes()
    del u
    assert sys.getrefcount(t) == refs
