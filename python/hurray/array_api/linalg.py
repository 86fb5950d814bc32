"""hurray.array_api.linalg: the array API's linear algebra extension (NumPy's LAPACK; ADR-052).

In relaxed mode a Tier 2 float (float16, bfloat16, float8) in is that float out, computed in
float32 and rounded once (ADR-080); diagonal and matrix_transpose are views and compute nothing.
"""

from ._engine import compat as _compat
from ._engine import forward as _forward
from ._engine import np as _np
from ._promotion import widened as _widened

__all__ = ("cholesky cross det diagonal eig eigh eigvals eigvalsh inv matmul matrix_norm "
           "matrix_power matrix_rank matrix_transpose outer pinv qr slogdet solve svd svdvals "
           "tensordot trace vecdot vector_norm").split()


def _complex(a):
    """The standard's eig/eigvals results are complex, of the input's precision."""
    single = a.dtype in (_np.dtype("float32"), _np.dtype("complex64"))
    return a.astype(_np.complex64 if single else _np.complex128, copy=False)


def _eig(x):
    r = _compat.linalg.eig(x)
    return type(r)(_complex(r[0]), _complex(r[1]))


def _eigvals(x):
    return _complex(_np.asarray(_compat.linalg.eigvals(x)))


_OWN = {"eig": _eig, "eigvals": _eigvals}
_VIEWS = ("diagonal", "matrix_transpose")
for _name in __all__:
    _func = _OWN.get(_name) or getattr(_compat.linalg, _name)
    globals()[_name] = _forward(_func if _name in _VIEWS else _widened(_func), "linalg." + _name)
