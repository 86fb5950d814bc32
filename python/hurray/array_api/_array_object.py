"""hurray.Tensor as the array API's array object: operators, indexing, conversions (ADR-052).

``to_device`` is the Tensor's own (python/src/device_memory.c), which copies between devices.

The Tensor type's protocol slots (python/src/array_object.c) forward to the functions here by
their dunder names. Every operator goes through `operands`, the one place the standard's type
promotion (``_promotion``) meets NumPy's kernels, and returns a new tensor; in-place operators
write into the tensor's own memory, so views and their bases see the same values.
"""

from . import _engine, _kernels
from ._engine import TIER2_NP, Tensor, np, to_np, wrap
from ._promotion import check_scalar, promote, scalar_result

_SCALARS = (bool, int, float, complex)


def operands(x1, x2):
    """The NumPy operands of a binary function or operator: one of them may be a Python
    scalar; raises TypeError where the standard's promotion has no answer."""
    if type(x1) is Tensor:
        a = to_np(x1)
        if type(x2) is Tensor:
            b = to_np(x2)
            if a.dtype is not b.dtype:
                dt = promote(a.dtype, b.dtype)
                if a.dtype in TIER2_NP or b.dtype in TIER2_NP:
                    a, b = a.astype(dt, copy=False), b.astype(dt, copy=False)
            return a, b
        if type(x2) in _SCALARS:
            return a, _scalar(a.dtype, x2)
    elif type(x2) is Tensor and type(x1) in _SCALARS:
        b = to_np(x2)
        return _scalar(b.dtype, x1), b
    raise TypeError(
        f"expected hurray.Tensors or a hurray.Tensor and a Python scalar, not "
        f"{type(x1).__name__} and {type(x2).__name__}"
    )


def _scalar(dtype, value):
    if dtype in TIER2_NP:
        return np.asarray(value, dtype=scalar_result(dtype, value))
    check_scalar(dtype, value)
    return value


def _binary(ufunc):
    def op(self, other):
        if type(other) is not Tensor and type(other) not in _SCALARS:
            return NotImplemented
        a, b = operands(self, other)
        return wrap(ufunc(a, b))

    def rop(self, other):
        if type(other) not in _SCALARS:
            return NotImplemented
        a, b = operands(other, self)
        return wrap(ufunc(a, b))

    def iop(self, other):
        if type(other) is not Tensor and type(other) not in _SCALARS:
            return NotImplemented
        out = to_np(self)
        a, b = operands(self, other)
        dt = (promote(out.dtype, to_np(other).dtype) if type(other) is Tensor
              else scalar_result(out.dtype, other))
        if dt != out.dtype:
            raise TypeError(f"in-place {ufunc.__name__} would change the dtype {out.dtype} of the "
                            f"left operand to {dt}")
        _writable(out)
        ufunc(a, b, out=out)
        return self

    return op, rop, iop


def _writable(a):
    if not a.flags.writeable:
        raise _engine._hurray.InvalidArgumentError(
            "this hurray.Tensor is read-only (its memory came from a read-only source, such as "
            "bytes or a loaded file): write to a copy, hurray.array_api.asarray(x, copy=True)"
        )


#: The operators that, on two tensors of one dtype of the standard, are exactly
#: ``wrap(ufunc(a, b))`` on their arrays: array_object.c calls these ufuncs itself for such
#: operands (the per-call dispatch in C); everything else comes here.
UFUNCS = {
    "__add__": np.add, "__sub__": np.subtract, "__mul__": np.multiply,
    "__truediv__": np.divide, "__mod__": np.remainder, "__pow__": np.power,
    "__and__": np.bitwise_and, "__or__": np.bitwise_or, "__xor__": np.bitwise_xor,
    "__lshift__": np.left_shift, "__rshift__": np.right_shift, "__lt__": np.less,
    "__le__": np.less_equal, "__gt__": np.greater, "__ge__": np.greater_equal,
    "__eq__": np.equal, "__ne__": np.not_equal, "__matmul__": np.matmul,
}

__add__, __radd__, __iadd__ = _binary(UFUNCS["__add__"])
__sub__, __rsub__, __isub__ = _binary(UFUNCS["__sub__"])
__mul__, __rmul__, __imul__ = _binary(UFUNCS["__mul__"])
__truediv__, __rtruediv__, __itruediv__ = _binary(UFUNCS["__truediv__"])
__floordiv__, __rfloordiv__, __ifloordiv__ = _binary(_kernels.floor_divide)
__mod__, __rmod__, __imod__ = _binary(UFUNCS["__mod__"])
__pow__, __rpow__, __ipow__ = _binary(UFUNCS["__pow__"])
__and__, __rand__, __iand__ = _binary(UFUNCS["__and__"])
__or__, __ror__, __ior__ = _binary(UFUNCS["__or__"])
__xor__, __rxor__, __ixor__ = _binary(UFUNCS["__xor__"])
__lshift__, __rlshift__, __ilshift__ = _binary(UFUNCS["__lshift__"])
__rshift__, __rrshift__, __irshift__ = _binary(UFUNCS["__rshift__"])
__lt__ = _binary(UFUNCS["__lt__"])[0]
__le__ = _binary(UFUNCS["__le__"])[0]
__gt__ = _binary(UFUNCS["__gt__"])[0]
__ge__ = _binary(UFUNCS["__ge__"])[0]
__eq__ = _binary(UFUNCS["__eq__"])[0]
__ne__ = _binary(UFUNCS["__ne__"])[0]


def __matmul__(self, other):
    if type(other) is not Tensor:
        return NotImplemented
    return wrap(UFUNCS["__matmul__"](*operands(self, other)))


def __rmatmul__(self, other):
    return NotImplemented


def __imatmul__(self, other):
    if type(other) is not Tensor:
        return NotImplemented
    out = to_np(self)
    r = np.matmul(*operands(self, other))
    if r.shape != out.shape or r.dtype != out.dtype:
        raise ValueError(f"in-place matmul would change the left operand's shape {out.shape} or "
                         f"dtype {out.dtype} to {r.shape} {r.dtype}")
    _writable(out)
    out[...] = r
    return self


def __neg__(self):
    a = to_np(self)
    if a.dtype.kind == "b":
        raise TypeError("negation is not defined for bool tensors; use logical_not")
    return wrap(np.negative(a))


def __pos__(self):
    a = to_np(self)
    if a.dtype.kind == "b":
        raise TypeError("unary + is not defined for bool tensors")
    return wrap(np.positive(a))


def __abs__(self):
    a = to_np(self)
    if a.dtype.kind == "b":
        raise TypeError("abs is not defined for bool tensors")
    return wrap(np.abs(a))


def __invert__(self):
    a = to_np(self)
    if a.dtype.kind not in "biu":
        raise TypeError(f"~ needs a bool or integer tensor, not {a.dtype}")
    return wrap(np.invert(a))


# ---- conversions to Python scalars -----------------------------------------------------------

def _item(self, what):
    a = to_np(self)
    if a.ndim != 0:
        raise TypeError(f"{what}() needs a 0-d tensor, not one of shape {a.shape}")
    return a[()]


def __bool__(self):
    return bool(_item(self, "bool"))


def __int__(self):
    v = _item(self, "int")
    if v.dtype.kind == "c":
        raise TypeError("int() of a complex tensor; take real() or imag() first")
    return int(v)


def __float__(self):
    v = _item(self, "float")
    if v.dtype.kind == "c":
        raise TypeError("float() of a complex tensor; take real() or imag() first")
    return float(v)


def __complex__(self):
    return complex(_item(self, "complex"))


def __index__(self):
    v = _item(self, "index")
    if v.dtype.kind not in "iu":
        raise TypeError(f"only integer tensors are indices, not {v.dtype} ones")
    return int(v)


# ---- indexing -------------------------------------------------------------------------------

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
    try:
        return wrap(a[_basic(_key(key))])
    except OverflowError:
        error = _too_big(key)
        if error is None:
            raise
        raise error from None


def __setitem__(self, key, value):
    a = to_np(self)
    _writable(a)
    if type(value) is Tensor:
        value = to_np(value)
    elif type(value) in _SCALARS:
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


# ---- properties and methods -----------------------------------------------------------------

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
