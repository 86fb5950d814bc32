"""hurray.Tensor's operators as the array API's array object: arithmetic, bitwise, comparison,
matmul, their reflected and in-place forms, the unary operators, and the conversions to Python
scalars (ADR-052, ADR-067).

The Tensor type's number and rich-comparison slots (python/src/array_object.c) forward to the
functions here by their dunder names. Every binary operator goes through
``_promotion.operands``, the standard's type promotion, and returns a new tensor; in-place
operators write into the tensor's own memory, so views and their bases see the same values.
Two tensors of one dtype of the standard skip all of this where `UFUNCS` has their operator:
python/src/array_dispatch.c calls the ufunc itself.
"""

from . import _kernels
from ._engine import Tensor, check_writable, np, to_np, wrap
from ._promotion import SCALARS, operands, promote, scalar_result, widened


def _binary(ufunc):
    def op(self, other):
        if type(other) is not Tensor and type(other) not in SCALARS:
            return NotImplemented
        a, b = operands(self, other)
        return wrap(ufunc(a, b))

    def rop(self, other):
        if type(other) not in SCALARS:
            return NotImplemented
        a, b = operands(other, self)
        return wrap(ufunc(a, b))

    def iop(self, other):
        if type(other) is not Tensor and type(other) not in SCALARS:
            return NotImplemented
        out = to_np(self)
        a, b = operands(self, other)
        dt = (promote(out.dtype, to_np(other).dtype) if type(other) is Tensor
              else scalar_result(out.dtype, other))
        if dt != out.dtype:
            raise TypeError(f"in-place {ufunc.__name__} would change the dtype {out.dtype} of the "
                            f"left operand to {dt}")
        check_writable(out)
        ufunc(a, b, out=out)
        return self

    return op, rop, iop


#: The operators that, on two tensors of one dtype of the standard, are exactly
#: ``wrap(ufunc(a, b))`` on their arrays: array_dispatch.c calls these ufuncs itself for such
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


#: matmul under relaxed mode's rule: a Tier 2 float computed in float32, rounded once (ADR-080).
_matmul = widened(np.matmul)


def __matmul__(self, other):
    if type(other) is not Tensor:
        return NotImplemented
    return wrap(_matmul(*operands(self, other)))


def __rmatmul__(self, other):
    return NotImplemented


def __imatmul__(self, other):
    if type(other) is not Tensor:
        return NotImplemented
    out = to_np(self)
    r = _matmul(*operands(self, other))
    if r.shape != out.shape or r.dtype != out.dtype:
        raise ValueError(f"in-place matmul would change the left operand's shape {out.shape} or "
                         f"dtype {out.dtype} to {r.shape} {r.dtype}")
    check_writable(out)
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
        if a.size == 1:
            route = "hurray.array_api.reshape(t, ()) makes this one-element tensor 0-d"
        elif what == "bool":
            route = "hurray.array_api.any(t) or hurray.array_api.all(t) reduces it to one"
        else:
            first = ", ".join("0" * a.ndim)
            route = f"index one element (t[{first}]), or t.tolist() gives every value"
        raise TypeError(f"{what}() needs a 0-d tensor, not one of shape {a.shape}: {route}")
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


def __contains__(self, value):
    """``value in t``: whether any element equals value, as NumPy and PyTorch answer it."""
    return bool(np.any(to_np(__eq__(self, value))))


def __format__(self, spec):
    """format(t, spec) formats a 0-d tensor's value, as NumPy and PyTorch do; '' is str(t)."""
    if not spec:
        return str(self)
    if self.ndim != 0:
        raise TypeError(f"format spec {spec!r} needs a 0-d tensor, not one of shape "
                        f"{self.shape}: format each value of t.tolist()")
    return format(self.tolist(), spec)


def __complex__(self):
    return complex(_item(self, "complex"))


def __index__(self):
    v = _item(self, "index")
    if v.dtype.kind not in "iu":
        raise TypeError(f"only integer tensors are indices, not {v.dtype} ones")
    return int(v)
