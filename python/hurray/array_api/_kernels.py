"""The kernels where NumPy's special values differ from the standard's, corrected around NumPy's
own (ADR-052): floor division by or of infinities, complex expm1 and complex tanh."""

from ._engine import np


def floor_divide(x1, x2, out=None):
    """NumPy's floor_divide, except that where an operand is not finite the standard's
    floor(x1 / x2) applies (+inf // 2 is +inf and 1 // -inf is -0, where NumPy gives NaN
    and -1)."""
    r = np.floor_divide(x1, x2)
    if np.result_type(r).kind == "f":
        special = ~(np.isfinite(x1) & np.isfinite(x2))
        if np.any(special):
            with np.errstate(invalid="ignore", divide="ignore"):
                r = np.where(special, np.floor(np.divide(x1, x2)), r)
    if out is None:
        return r
    out[...] = r
    return out


floor_divide.__name__ = "floor_divide"


def expm1(x):
    """NumPy's expm1, except complex zeros and non-finite values, computed as exp(x) - 1 to
    get the standard's special cases (expm1(+inf + 0j) is +inf + 0j)."""
    r = np.expm1(x)
    if x.dtype.kind == "c":
        special = ~np.isfinite(x) | (x == 0)
        if np.any(special):
            with np.errstate(invalid="ignore", over="ignore"):
                r = np.where(special, np.exp(x) - 1, r)
    return r


def tanh(x):
    """NumPy's tanh, except that tanh(±inf + yj) for finite y is ±1 + 0j with the zero's sign
    the sign of y, as the standard says (NumPy signs it by sin(2y))."""
    r = np.tanh(x)
    if x.dtype.kind == "c":
        special = np.isinf(x.real) & np.isfinite(x.imag)
        if np.any(special):
            fixed = np.copysign(1, x.real) + 1j * np.copysign(0, x.imag)
            r = np.where(special, fixed.astype(x.dtype), r)
    return r
