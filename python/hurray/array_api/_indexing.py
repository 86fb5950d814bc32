"""hurray.Tensor's indexing as the array API's array object: ``__getitem__`` and
``__setitem__`` (integers, slices, ellipsis, None, integer arrays, boolean masks), ``len()``,
iteration, and the transposed views ``mT`` and ``T`` (ADR-052, ADR-067).

The Tensor type's mapping and iteration slots and its ``mT``/``T`` properties
(python/src/array_object.c) forward to the functions here by their names. Basic indexing
answers with a view of the tensor's memory (an integer index included); writes go into the
tensor's own memory, so views and their bases see the same values.
"""

from ._engine import Tensor, check_writable, from_numpy, np, to_np, wrap
from ._promotion import SCALARS, check_scalar


def _key(key):
    if type(key) is tuple:
        return tuple(to_np(k) if type(k) is Tensor else k for k in key)
    if type(key) is Tensor:
        return to_np(key)
    return key


def _basic(key):
    """The key with an Ellipsis added when it has no arrays and none, so that NumPy answers an
    integer index with a 0-d view rather than a scalar copy."""
    parts = key if type(key) is tuple else (key,)
    for k in parts:
        if k is Ellipsis or isinstance(k, np.ndarray):
            return key
        if not (k is None or type(k) in (int, slice) or isinstance(k, np.integer)):
            if hasattr(k, "__index__") and not isinstance(k, bool):
                continue
            return key
    return parts + (Ellipsis,)


def _too_big(key):
    """The IndexError for an integer index too big for NumPy's C long (NumPy raises
    OverflowError there, and IndexError just below the same bound), or None."""
    parts = key if type(key) is tuple else (key,)
    big = next((k for k in parts if type(k) is int and not -2 ** 63 <= k < 2 ** 63), None)
    if big is None:
        return None
    return IndexError(f"index {big} is out of bounds: no axis has that many elements")


def __getitem__(self, key):
    a = to_np(self)
    kind = type(key)
    try:
        # Fast paths for the commonest keys (ADR-095), each the very NumPy call the general
        # path below makes for that key, without its normalisation: an int (a 0-d view, as
        # _basic makes it), a slice, a tensor (an integer array or a mask), a tuple of ints
        # and slices. A bool is not an int here (type(True) is bool): it takes the general path.
        if kind is int:
            return from_numpy(a[key, ...])
        if kind is slice:
            return from_numpy(a[key])
        if kind is Tensor:
            return wrap(a[to_np(key)])
        if kind is tuple:
            for k in key:
                if type(k) is not int and type(k) is not slice:
                    break
            else:
                return from_numpy(a[key + (Ellipsis,)])
        return wrap(a[_basic(_key(key))])
    except OverflowError:
        error = _too_big(key)
        if error is None:
            raise
        raise error from None


def __setitem__(self, key, value):
    a = to_np(self)
    check_writable(a)
    if type(value) is Tensor:
        value = to_np(value)
    elif type(value) in SCALARS:
        check_scalar(a.dtype, value)
    else:
        raise TypeError(f"a hurray.Tensor's items take a tensor or a Python scalar, not "
                        f"{type(value).__name__}")
    try:
        a[_key(key)] = value
    except OverflowError:
        error = _too_big(key)
        if error is None:
            raise
        raise error from None


def __len__(self):
    shape = self.shape
    if not shape:
        raise TypeError("len() of a 0-d tensor")
    return shape[0]


def __iter__(self):
    """The sub-tensors along the first axis, as NumPy iterates arrays (views)."""
    n = __len__(self)
    return (__getitem__(self, i) for i in range(n))


# ---- transposed views ------------------------------------------------------------------------

def mT(self):
    a = to_np(self)
    if a.ndim < 2:
        raise ValueError(f"mT needs at least 2 dimensions, not {a.ndim}")
    return wrap(np.swapaxes(a, -1, -2))


def T(self):
    a = to_np(self)
    if a.ndim != 2:
        raise ValueError(f"T needs a 2-d tensor, not a {a.ndim}-d one; use mT or permute_dims")
    return wrap(a.T)
