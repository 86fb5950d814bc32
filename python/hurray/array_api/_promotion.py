"""Type promotion: the standard's table for Tier 1 and the relaxed-mode lattice (ADR-053).

Works on NumPy dtypes (the engine's currency). Between two arrays:

- the standard's rules among the Tier 1 dtypes; mixed kinds it leaves undefined (bool with a
  number, an integer with a floating dtype, uint64 with a signed integer) raise TypeError;
- relaxed mode's Tier 2 floats (float16, bfloat16, the float8 formats) each sit directly below
  float32: one of them with itself is itself, two different ones meet at float32, one with a
  Tier 1 floating or complex dtype gives that dtype, one with an integer or bool is TypeError.

With a Python scalar, the array's dtype wins where the scalar's kind fits it: bool with bool;
int with integer and floating arrays; float with floating ones; complex with floating ones
(giving the complex dtype of the same precision).

`operands` applies these rules to the two arguments of a binary function or operator: the one
place where promotion meets NumPy's kernels, for the namespace's functions and the array
object's operators alike. `widened` adds relaxed mode's rule for linear algebra (ADR-080): the
result dtype is the promoted dtype of the inputs, and a Tier 2 one is computed in float32 and
rounded to it once.
"""

from ._engine import FROM_NP, TIER2_NP, Tensor, np, to_np

#: The Python scalar types that combine with tensors.
SCALARS = (bool, int, float, complex)

_KIND = {}
for _d in FROM_NP:
    _KIND[_d] = "b" if _d.kind == "b" else "i" if _d.kind in "iu" else _d.kind
    if _d in TIER2_NP:
        _KIND[_d] = "f"
_F32, _C64, _C128 = np.dtype("float32"), np.dtype("complex64"), np.dtype("complex128")
_cache = {}


def _join(a, b):
    if a == b:
        return a
    ka, kb = _KIND.get(a), _KIND.get(b)
    if ka is None or kb is None:
        raise TypeError(f"no type promotion for {a} and {b}")
    if ka == "b" or kb == "b":
        raise TypeError(f"the array API does not promote {a} with {b} (bool with a number)")
    if ka == "i" and kb == "i":
        if {a.kind, b.kind} == {"i", "u"} and np.dtype("uint64") in (a, b):
            raise TypeError(f"the array API does not promote {a} with {b} (no integer holds both)")
        return np.promote_types(a, b)
    if ka == "i" or kb == "i":
        raise TypeError(f"the array API does not promote {a} with {b} (integer with floating)")
    if a in TIER2_NP or b in TIER2_NP:
        if a in TIER2_NP and b in TIER2_NP:
            return _F32
        return b if a in TIER2_NP else a
    return np.promote_types(a, b)


def promote(a, b):
    """The result dtype of two array dtypes (NumPy dtypes), or TypeError."""
    key = (a, b)
    r = _cache.get(key)
    if r is None:
        r = _cache[key] = _join(a, b)
    return r


def check_scalar(dtype, value):
    """Raise TypeError unless a Python scalar `value` may combine with an array of `dtype`."""
    kind = _KIND.get(dtype)
    t = type(value)
    if t is bool:
        ok = kind == "b"
    elif t is int:
        ok = kind in ("i", "f", "c")
    elif t is float:
        ok = kind in ("f", "c")
    elif t is complex:
        ok = kind in ("f", "c")
    else:
        raise TypeError(f"expected a hurray.Tensor or a Python scalar, not {t.__name__}")
    if not ok:
        raise TypeError(f"a Python {t.__name__} does not combine with a {dtype} array under the "
                        "array API's promotion rules")


def scalar_result(dtype, value):
    """The dtype of an array of `dtype` combined with the Python scalar `value`."""
    check_scalar(dtype, value)
    if type(value) is complex and dtype.kind != "c":
        return _C128 if dtype == np.dtype("float64") else _C64
    return dtype


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
        if type(x2) in SCALARS:
            return a, _scalar(a.dtype, x2)
    elif type(x2) is Tensor and type(x1) in SCALARS:
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


def _rounded(r, target):
    """Results of a kernel run in float32, each floating one rounded once to `target`."""
    if isinstance(r, (np.ndarray, np.generic)):
        return r.astype(target) if r.dtype.kind == "f" else r
    if isinstance(r, tuple):
        items = [_rounded(e, target) for e in r]
        return type(r)(*items) if hasattr(r, "_fields") else tuple(items)
    return r


def widened(func):
    """`func`, a NumPy linear-algebra kernel, under relaxed mode's rule for Tier 2 floats.

    The result dtype is the promotion of the array arguments' dtypes, as the standard has it for
    matmul, vecdot, tensordot and linalg. Where that is a Tier 2 float (float16, bfloat16, a
    float8 format), the kernel runs on float32 copies of the arrays and each floating result is
    rounded to it once: complex results stay complex64 (float32's), integer ones (matrix_rank)
    stay as they are. Where it is a dtype of the standard, Tier 2 arrays are widened to float32
    first, exactly, so that NumPy never picks its own dtype for them (float64 in LAPACK, or a
    TypeError for float16). Arrays of the standard's dtypes alone go straight to `func`.

    Parameters
    ----------
    func : callable
        The kernel; its array arguments are NumPy arrays, positional or keyword.

    Returns
    -------
    callable
        `func` with the rule applied; TypeError where the lattice has no common dtype.
    """

    def call(*args, **kwargs):
        arrays = [v for v in args if type(v) is np.ndarray]
        arrays += [v for v in kwargs.values() if type(v) is np.ndarray]
        if not any(a.dtype in TIER2_NP for a in arrays):
            return func(*args, **kwargs)
        target = arrays[0].dtype
        for a in arrays[1:]:
            target = promote(target, a.dtype)

        def f32(v):
            return v.astype(_F32) if type(v) is np.ndarray and v.dtype in TIER2_NP else v

        r = func(*[f32(v) for v in args], **{k: f32(v) for k, v in kwargs.items()})
        return _rounded(r, target) if target in TIER2_NP else r

    call.__name__ = call.__qualname__ = getattr(func, "__name__", "kernel")
    call.__doc__ = func.__doc__
    return call
