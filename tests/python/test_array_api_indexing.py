"""Random indices and shapes fed to hurray.Tensor's indexing and broadcasting (hypothesis),
against NumPy on the same data: the same values, the same result shapes, views where NumPy
gives views, and the same exception class where NumPy refuses."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import hurray
import hurray.array_api as xp

SETTINGS = settings(max_examples=80, deadline=None)
shapes = hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5)


def base(shape):
    return np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)


def outcome(fn):
    try:
        return fn(), None
    except Exception as e:  # noqa: BLE001 - compared by class below
        return None, type(e)


@SETTINGS
@given(st.data(), shapes)
def test_basic_indices_match_numpy_and_are_views(data, shape):
    idx = data.draw(hnp.basic_indices(shape, allow_newaxis=True, allow_ellipsis=True))
    a = base(shape)
    t = hurray.from_numpy(a.copy())
    got = t[idx]
    np.testing.assert_array_equal(np.asarray(got), a[idx])
    if got.size:
        got[...] = -1  # a basic index is a view: the write reaches the base
        expect = a.copy()
        expect[idx] = -1
        np.testing.assert_array_equal(np.asarray(t), expect)


@SETTINGS
@given(st.data(), hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=5))
def test_integer_array_and_mask_indices_match_numpy(data, shape):
    a = base(shape)
    t = hurray.from_numpy(a.copy())
    mask = data.draw(hnp.arrays(np.bool_, shape))
    np.testing.assert_array_equal(np.asarray(t[xp.asarray(mask)]), a[mask])
    ints = data.draw(hnp.arrays(np.int64, st.integers(0, 4),
                                elements=st.integers(-2 * shape[0], 2 * shape[0])))
    want, want_error = outcome(lambda: a[ints])
    got, got_error = outcome(lambda: np.asarray(t[xp.asarray(ints)]))
    assert got_error is want_error
    if want_error is None:
        np.testing.assert_array_equal(got, want)
    t[xp.asarray(mask)] = 7
    a[mask] = 7
    np.testing.assert_array_equal(np.asarray(t), a)


@SETTINGS
@given(st.data(), st.integers(-8, 8))
def test_integer_out_of_range_is_index_error(data, i):
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=2, min_side=0, max_side=4))
    t = hurray.from_numpy(base(shape))
    want, want_error = outcome(lambda: base(shape)[i])
    got, got_error = outcome(lambda: t[i])
    assert got_error is want_error
    if want_error is IndexError:
        assert got_error is IndexError


@SETTINGS
@given(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=4, max_side=4), shapes)
def test_broadcasting_matches_numpy(broadcastable, other):
    (s1, s2), result = broadcastable
    x, y = xp.ones(s1, dtype=xp.float32), xp.ones(s2, dtype=xp.float32)
    assert (x + y).shape == result
    want, want_error = outcome(lambda: np.broadcast_shapes(s1, other))
    got, got_error = outcome(lambda: (x * xp.ones(other, dtype=xp.float32)).shape)
    assert got_error is want_error and got == want


def test_an_integer_index_past_int64_is_index_error():
    t = xp.zeros((3, 3), dtype=xp.float32)
    for key in (2 ** 63, (2 ** 63, 0), -(2 ** 63) - 1, (0, 10 ** 30)):
        with pytest.raises(IndexError, match="out of bounds|valid indices"):
            t[key]
        with pytest.raises(IndexError, match="out of bounds|valid indices"):
            t[key] = 1.0
    assert not any(xp.reshape(t, (-1,)))  # nothing was written


# ---- the fast paths of __getitem__ and of the reductions (ADR-095) ---------------------------

def message(fn):
    """The class and message of what `fn()` raises."""
    with pytest.raises(Exception) as info:  # noqa: PT011 - compared below
        fn()
    return type(info.value), str(info.value)


@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 2)])
@pytest.mark.parametrize("key", [0, 2, -1, -3, slice(1, None, 2), slice(None, None, -1),
                                 slice(-2, 1, -1), slice(7, 9), (1,), (-1, 0),
                                 (0, slice(None, None, 2)), (slice(None), -1), (True,), True,
                                 False, ()])
def test_fast_path_keys_give_numpys_view(shape, key):
    a = base(shape)
    t = hurray.from_numpy(a.copy())
    want, want_error = outcome(lambda: a[key if type(key) is tuple else (key,)])
    got, got_error = outcome(lambda: t[key])
    assert got_error is want_error
    if want_error is None:
        assert type(got) is hurray.Tensor  # never a Python or NumPy scalar
        np.testing.assert_array_equal(np.asarray(got), want)
        assert got.shape == want.shape
        if got.size and True not in (key if type(key) is tuple else (key,)):
            got[...] = -1  # a view (a bool key is a mask, a copy, in NumPy too)
            assert (np.asarray(t) == -1).sum() == want.size


def test_an_integer_key_is_a_0d_view_and_a_bool_key_a_new_axis():
    a = np.arange(4, dtype=np.float32)
    t = hurray.from_numpy(a)
    x = t[-1]
    assert type(x) is hurray.Tensor and x.shape == () and float(x) == 3.0
    x[...] = 9
    assert a[3] == 9  # a view of the tensor's memory, not a copy
    assert t[True].shape == (1, 4) and t[False].shape == (0, 4)  # as NumPy: not t[1], t[0]
    assert t[(True,)].shape == (1, 4)


@pytest.mark.parametrize("key", [4, -5, 2 ** 40, (0, 4), (4, 0), (-5, slice(None))])
def test_an_out_of_range_integer_raises_numpys_index_error(key):
    a = np.zeros((4, 4), np.float32)
    t = hurray.from_numpy(a)
    parts = key if type(key) is tuple else (key,)
    assert message(lambda: t[key]) == message(lambda: a[parts + (Ellipsis,)])
    assert message(lambda: t[key])[0] is IndexError


def test_integer_and_slice_keys_on_a_0d_tensor_raise_as_numpy():
    a = np.array(1.5, np.float32)
    t = hurray.from_numpy(a)
    for key in (0, -1, slice(None), (0,), (slice(None), 0)):
        parts = key if type(key) is tuple else (key,)
        assert message(lambda: t[key]) == message(lambda: a[parts + (Ellipsis,)])
    assert t[()].shape == () and float(t[()]) == 1.5
    assert t[...].shape == ()


def test_keys_off_the_fast_paths_still_index():
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    t = hurray.from_numpy(a)
    np.testing.assert_array_equal(np.asarray(t[np.int64(1), 2]), a[1, 2])
    np.testing.assert_array_equal(np.asarray(t[None, 1]), a[None, 1])
    np.testing.assert_array_equal(np.asarray(t[..., -1]), a[..., -1])
    np.testing.assert_array_equal(np.asarray(t[xp.asarray(2)]), a[2])
    np.testing.assert_array_equal(np.asarray(t[1, xp.asarray([0, 3])]), a[1, [0, 3]])
    with pytest.raises(IndexError):
        t[1.0]


# ---- views made in C for int and plain-slice keys (ADR-095) ---------------------------------

def address(arr):
    return arr.__array_interface__["data"][0]


plain_parts = st.one_of(st.integers(-7, 7),
                        st.builds(slice, st.none() | st.integers(-7, 7),
                                  st.none() | st.integers(-7, 7),
                                  st.none() | st.integers(-3, 3).filter(bool)))


@SETTINGS
@given(shapes, st.lists(st.lists(plain_parts, max_size=4), min_size=1, max_size=3),
       st.booleans())
def test_views_of_views_are_numpys_views_of_the_same_memory(shape, keys, writeable):
    a = base(shape)
    a.flags.writeable = writeable
    t, want = hurray.from_numpy(a), a
    for parts in keys:
        key = tuple(parts) if len(parts) != 1 else parts[0]
        expect, expect_error = outcome(lambda: want[tuple(parts) + (Ellipsis,)])
        got, got_error = outcome(lambda: t[key])
        assert got_error is expect_error
        if expect_error is not None:
            return
        t, want = got, expect
        assert type(t) is hurray.Tensor and t.shape == want.shape
        if want.size:
            assert address(np.asarray(t)) == address(want)  # the very bytes NumPy's view reads
        np.testing.assert_array_equal(np.asarray(t), want)
        np.testing.assert_array_equal(np.asarray(t + t), want + want)  # the engine's array
        assert np.asarray(t).flags.writeable == writeable


@pytest.mark.parametrize("key", [slice(None, None, 0), (0, slice(1, None, 0))])
def test_a_zero_step_raises_numpys_value_error(key):
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    parts = key if type(key) is tuple else (key,)
    assert message(lambda: hurray.from_numpy(a)[key]) == message(lambda: a[parts + (Ellipsis,)])
    assert message(lambda: hurray.from_numpy(a)[key])[0] is ValueError


@pytest.mark.parametrize("key", [(slice(2 ** 70), 0), (slice(np.int64(1), None), 0)])
def test_slices_the_view_path_declines_give_numpys_view(key):
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    np.testing.assert_array_equal(np.asarray(hurray.from_numpy(a)[key]), a[key + (Ellipsis,)])


def test_a_view_keeps_its_memory_after_the_tensor_and_array_it_came_from_are_gone():
    t = xp.asarray(np.arange(10, dtype=np.float64))
    v = t[2:8:2]
    del t
    np.testing.assert_array_equal(np.asarray(v), [2.0, 4.0, 6.0])
    v = xp.asarray(np.arange(10_001, dtype=np.int64))
    for _ in range(10_000):  # each view made from the last: no chain to walk later
        v = v[1:]
    assert v.shape == (1,) and int(v[0]) == 10_000 and int((v + v)[0]) == 20_000


def test_a_view_of_an_array_whose_head_changed_since_reads_its_own_memory():
    a = np.arange(8, dtype=np.float32)
    v = hurray.from_numpy(a)[2:4]
    a.shape = (2, 4)  # the view's NumPy key no longer selects its bytes
    np.testing.assert_array_equal(np.asarray(v + v), [4.0, 6.0])
    np.testing.assert_array_equal(np.asarray(v[::-1]), [3.0, 2.0])


def test_a_view_of_a_read_only_array_is_read_only():
    a = np.arange(6, dtype=np.int16)
    a.flags.writeable = False
    t = hurray.from_numpy(a)
    v = t[1:4]
    assert v.readonly
    assert message(lambda: v.__setitem__(0, 5)) == message(lambda: t.__setitem__(1, 5))
    assert (a == np.arange(6)).all()


REDUCTIONS = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min, "all": np.all,
              "any": np.any}


@pytest.mark.parametrize("name,dtype", [
    (name, dtype) for name in sorted(REDUCTIONS)
    for dtype in ["int8", "uint16", "int64", "float32", "float64", "bool", "complex64"]
    if not (name in ("max", "min") and dtype == "complex64")])  # the standard orders no complex
@pytest.mark.parametrize("axis,keepdims", [(None, False), (None, True), (0, False), (-1, True),
                                           ((0, 1), False)])
def test_reductions_match_numpy(name, dtype, axis, keepdims):
    a = (np.arange(6).reshape(2, 3) % 4).astype(dtype)
    got = getattr(xp, name)(hurray.from_numpy(a), axis=axis, keepdims=keepdims)
    want = np.asarray(REDUCTIONS[name](a, axis=axis, keepdims=keepdims))
    assert type(got) is hurray.Tensor
    assert np.asarray(got).dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(np.asarray(got), want)


def test_reductions_of_0d_and_empty_tensors_and_other_arguments():
    x = hurray.from_numpy(np.array(2.5, np.float32))
    assert float(xp.sum(x)) == 2.5 and xp.sum(x).shape == ()
    empty = hurray.from_numpy(np.zeros(0, np.float32))
    assert float(xp.sum(empty)) == 0.0 and float(xp.prod(empty)) == 1.0
    assert bool(xp.all(empty)) and not bool(xp.any(empty))
    assert message(lambda: xp.max(empty)) == message(lambda: np.max(np.zeros(0, np.float32)))
    small = hurray.from_numpy(np.arange(4, dtype=np.int8))
    assert xp.sum(small).dtype == xp.int64  # the standard's default integer, as NumPy's
    assert xp.sum(small, dtype=xp.int8).dtype == xp.int8  # a dtype: the forwarded path
    assert xp.prod(small, dtype=xp.float64).dtype == xp.float64
    with pytest.raises(TypeError):
        xp.sum(small, 0)  # axis is keyword-only, as the standard has it
    assert xp.sum.__name__ == "sum" and "np.add.reduce" in xp.sum.__doc__
