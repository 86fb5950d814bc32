"""hurray.array_api.linalg: the array API's linear algebra extension (NumPy's LAPACK; ADR-052)."""

from ._engine import compat as _compat
from ._engine import forward as _forward

__all__ = ("cholesky cross det diagonal eigh eigvalsh inv matmul matrix_norm matrix_power "
           "matrix_rank matrix_transpose outer pinv qr slogdet solve svd svdvals tensordot trace "
           "vecdot vector_norm").split()
for _name in __all__:
    globals()[_name] = _forward(getattr(_compat.linalg, _name), _name)
