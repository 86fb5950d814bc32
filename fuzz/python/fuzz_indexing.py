"""Fuzz target: random shapes, indices and values fed to hurray.Tensor's indexing, item
assignment and broadcasting, checked against NumPy on the same data.

Run it with atheris (libFuzzer for Python; ``scripts/test.sh`` does, for a few seconds)::

    .venv/bin/python fuzz/python/fuzz_indexing.py -max_total_time=15 WORKDIR fuzz/corpus/py_indexing

and every file of ``fuzz/corpus/py_indexing/`` is replayed by the ordinary pytest run
(``tests/python/test_fuzz_corpora.py``), which needs no atheris.

What one input must satisfy (``one_input``):

- whatever Hurray answers, it never crashes and only raises the standard's exceptions
  (IndexError, TypeError, ValueError), each with a message;
- where NumPy refuses an operation, Hurray refuses it too: nothing is answered that NumPy
  would call out of range or not broadcastable;
- where Hurray answers, the answer equals NumPy's, in shape and in values; an item assignment
  changes exactly the elements NumPy's changes;
- a key made only of integers, slices, ``...`` and ``None`` (the standard's basic indexing) is
  answered exactly when NumPy answers it, as a view: a write through it reaches the base;
- a read-only tensor (one loaded from a file) refuses every assignment and stays unchanged.

The tensors come from every place the bindings make them: ``from_numpy`` of contiguous,
reversed and strided arrays, ``from_dlpack`` of a strided view, ``from_hurray`` of another
tensor, and ``hurray.load`` of a file (mapped read-only).
"""
import os
import sys
import tempfile

import numpy as np

import hurray
import hurray.array_api as xp

ALLOWED = (IndexError, TypeError, ValueError)
MAX_SIDE = 5
MAX_NDIM = 4


class Input:
    """The fuzzer's bytes read as small choices; past the end every choice is 0."""

    def __init__(self, data):
        self.data = data
        self.pos = 0

    def byte(self):
        if self.pos >= len(self.data):
            return 0
        self.pos += 1
        return self.data[self.pos - 1]

    def pick(self, n):
        return self.byte() % n

    def small(self, lo, hi):
        return lo + self.byte() % (hi - lo + 1)

    def shape(self, max_ndim=MAX_NDIM):
        return tuple(self.small(0, MAX_SIDE) for _ in range(self.pick(max_ndim + 1)))


def _loaded(array):
    """``array`` saved to a Hurray file and loaded back (read-only, mapped)."""
    path = os.path.join(_scratch(), "t.hurray")
    hurray.save(path, {"t": hurray.from_numpy(array.copy(order="C"))})
    return hurray.load(path)["t"]


_SCRATCH = []


def _scratch():
    if not _SCRATCH:
        _SCRATCH.append(tempfile.TemporaryDirectory(prefix="hurray-fuzz-"))
    return _SCRATCH[0].name


def source(inp):
    """A (numpy array, hurray tensor over equal values, writable) triple from the input."""
    shape = inp.shape()
    n = int(np.prod(shape))
    how = inp.pick(6)
    base = np.arange(n, dtype=np.int32).reshape(shape)
    if how == 0:
        return base, hurray.from_numpy(base.copy()), True
    if how in (1, 2) and base.ndim:
        # A reversed (negative strides) or stepped view of a bigger array.
        big = np.arange(2 * n + 3, dtype=np.int32)[::-1] if how == 1 else \
            np.arange(2 * n + 3, dtype=np.int32)[3::2]
        view = big[:n].reshape(shape) if how == 2 else big[3:3 + n].reshape(shape)
        return view.copy(), hurray.from_numpy(view), True
    if how == 3 and base.ndim >= 2:
        view = np.arange(n, dtype=np.int32).reshape(shape).swapaxes(0, -1)
        return view.copy(), hurray.from_dlpack(view), True
    if how == 4:
        return base, hurray.from_hurray(hurray.from_numpy(base.copy())), True
    if how == 5:
        return base, _loaded(base), False
    return base, hurray.from_numpy(base.copy()), True


def component(inp, ndim):
    """One part of a key, and whether it belongs to the standard's basic indexing."""
    kind = inp.pick(12)
    if kind <= 2:
        return inp.small(-MAX_SIDE - 2, MAX_SIDE + 2), True
    if kind <= 5:
        parts = [None if inp.pick(3) == 0 else inp.small(-7, 7) for _ in range(3)]
        return slice(*parts), True
    if kind == 6:
        return Ellipsis, True
    if kind == 7:
        return None, True
    if kind == 8:
        values = [inp.small(-MAX_SIDE - 1, MAX_SIDE + 1) for _ in range(inp.pick(4))]
        return xp.asarray(np.array(values, dtype=np.int64)), False
    if kind == 9:
        mask_shape = tuple(inp.small(0, MAX_SIDE) for _ in range(inp.pick(min(ndim, 2) + 1)))
        bits = np.array([inp.pick(2) for _ in range(int(np.prod(mask_shape)))], dtype=bool)
        return xp.asarray(bits.reshape(mask_shape)), False
    if kind == 10:
        return (2 ** 63 if inp.pick(2) else -(2 ** 63) - 1), True
    return [1.5, "0", True, [0, 1]][inp.pick(4)], False


def key_of(inp, ndim):
    count = inp.pick(ndim + 3)
    parts = [component(inp, ndim) for _ in range(count)]
    key = tuple(p for p, _ in parts)
    basic = all(b for _, b in parts)
    if count == 1 and inp.pick(2):
        key = key[0]
    return key, basic


def numpy_key(key):
    def one(k):
        return np.asarray(k) if type(k) is hurray.Tensor else k
    return tuple(one(k) for k in key) if type(key) is tuple else one(key)


def attempt(fn):
    try:
        return fn(), None
    except Exception as e:  # noqa: BLE001 -- classified by the caller
        return None, e


def check_error(error, what):
    if error is None:
        return
    if not isinstance(error, ALLOWED):
        raise AssertionError(f"{what}: {type(error).__name__} is not one of the standard's "
                             f"exceptions: {error}") from error
    if not str(error):
        raise AssertionError(f"{what}: {type(error).__name__} without a message")


def fuzz_getitem(inp):
    want_base, t, _ = source(inp)
    key, basic = key_of(inp, want_base.ndim)
    want, want_error = attempt(lambda: want_base[numpy_key(key)])
    got, got_error = attempt(lambda: t[key])
    check_error(got_error, f"t[{key!r}]")
    if want_error is not None:
        assert got_error is not None, f"t[{key!r}] answered where NumPy raised {want_error!r}"
        return
    if basic:
        assert got_error is None, f"t[{key!r}] refused a basic index NumPy takes: {got_error!r}"
    if got_error is None:
        got_np = np.asarray(got)
        assert got_np.shape == np.shape(want), f"t[{key!r}]: shape {got_np.shape} != {np.shape(want)}"
        np.testing.assert_array_equal(got_np, want)


def fuzz_setitem(inp):
    want_base, t, writable = source(inp)
    key, basic = key_of(inp, want_base.ndim)
    if inp.pick(2):
        value = inp.small(-100, 100)
        np_value = value
    else:
        vshape = inp.shape(max_ndim=2)
        np_value = np.full(vshape, -7, dtype=np.int32)
        value = hurray.from_numpy(np_value)
    before = np.asarray(t).copy()
    expect = want_base.copy()
    _, want_error = attempt(lambda: expect.__setitem__(numpy_key(key), np_value))
    _, got_error = attempt(lambda: t.__setitem__(key, value))
    check_error(got_error, f"t[{key!r}] = ...")
    after = np.asarray(t)
    if not writable:
        assert got_error is not None, f"a read-only tensor took t[{key!r}] = ..."
        np.testing.assert_array_equal(after, before)
        return
    if want_error is not None:
        assert got_error is not None, f"t[{key!r}] = ... took what NumPy refused: {want_error!r}"
    if got_error is not None:
        # Refused: nothing half-applied.
        np.testing.assert_array_equal(after, before)
        return
    np.testing.assert_array_equal(after, expect)


def fuzz_broadcast(inp):
    s1, s2 = inp.shape(), inp.shape()
    x = xp.reshape(xp.arange(int(np.prod(s1)), dtype=xp.float32), s1)
    y = xp.ones(s2, dtype=xp.float32)
    op = inp.pick(3)
    if op == 0:
        want, want_error = attempt(lambda: np.asarray(x) + np.asarray(y))
        got, got_error = attempt(lambda: x + y)
    elif op == 1:
        want, want_error = attempt(lambda: np.broadcast_to(np.asarray(x), s2))
        got, got_error = attempt(lambda: xp.broadcast_to(x, s2))
    else:
        want, want_error = attempt(lambda: np.broadcast_arrays(np.asarray(x), np.asarray(y))[0])
        got, got_error = attempt(lambda: xp.broadcast_arrays(x, y)[0])
    check_error(got_error, f"broadcast {s1} with {s2}")
    assert (want_error is None) == (got_error is None), \
        f"broadcast {s1} with {s2} (op {op}): NumPy {want_error!r}, Hurray {got_error!r}"
    if got_error is None:
        np.testing.assert_array_equal(np.asarray(got), want)


def one_input(data):
    inp = Input(data)
    [fuzz_getitem, fuzz_setitem, fuzz_broadcast][inp.pick(3)](inp)


def _instrument(atheris):
    """Python coverage for libFuzzer: the array object's functions and this file's. Done before
    the first operator call, which is when the extension looks those functions up."""
    import inspect

    from hurray.array_api import _engine, _indexing, _operators, _promotion
    for module in (_indexing, _operators, _engine, _promotion, sys.modules[__name__]):
        for name, func in list(vars(module).items()):
            if inspect.isfunction(func) and func.__module__ == module.__name__:
                setattr(module, name, atheris.instrument_func(func))


def main():
    import atheris
    _instrument(atheris)
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
