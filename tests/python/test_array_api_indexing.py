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
