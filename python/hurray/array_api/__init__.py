"""hurray.array_api: the array API standard's namespace for hurray.Tensor (2025.12).

What ``Tensor.__array_namespace__()`` returns. Every function of the standard's main namespace,
its constants and dtypes, ``__array_namespace_info__``, and the ``linalg`` and ``fft``
extensions; ``hurray.Tensor`` is the array object. CPU tensors compute, with NumPy's kernels
over the tensors' own memory (ADR-052); the namespace needs NumPy and array-api-compat and says
so on import when either is missing (``import hurray`` itself needs neither).

Compliance modes (ADR-022): strict mode, the default, admits exactly the standard's dtypes;
relaxed mode also computes on float16, bfloat16 and the float8 formats, promoted on the lattice
of ADR-053. The guide is docs/impl/array-api.md.
"""

import builtins as _builtins
import math as _math
import sys as _sys
import types as _types

from . import _engine, _info, _kernels
from ._engine import H as _H
from ._engine import compat as _compat
from ._engine import forward as _forward
from ._engine import np as _np
from ._engine import wrap as _wrap
from ._info import __array_namespace_info__
from ._promotion import operands as _operands
from ._promotion import promote as _promote
from ._promotion import scalar_result as _scalar_result
from ._promotion import widened as _widened

__array_api_version__ = "2025.12"

# ---- constants and dtypes -------------------------------------------------------------------

e = _math.e
inf = _math.inf
nan = _math.nan
pi = _math.pi
newaxis = None

bool = _H["bool"]
int8, int16, int32, int64 = _H["int8"], _H["int16"], _H["int32"], _H["int64"]
uint8, uint16, uint32, uint64 = _H["uint8"], _H["uint16"], _H["uint32"], _H["uint64"]
float32, float64 = _H["float32"], _H["float64"]
complex64, complex128 = _H["complex64"], _H["complex128"]

# ---- element-wise ---------------------------------------------------------------------------

_UNARY = (
    "abs acos acosh asin asinh atan atanh bitwise_invert ceil conj cos cosh exp expm1 floor imag "
    "isfinite isinf isnan log log1p log2 log10 logical_not negative positive real reciprocal "
    "round sign signbit sin sinh square sqrt tan tanh trunc clip"
).split()
_BINARY = (
    "add atan2 bitwise_and bitwise_left_shift bitwise_or bitwise_right_shift bitwise_xor copysign "
    "divide equal floor_divide greater greater_equal hypot less less_equal logaddexp logical_and "
    "logical_or logical_xor maximum minimum multiply nextafter not_equal pow remainder subtract"
).split()


_OWN_KERNELS = {"floor_divide": _kernels.floor_divide, "expm1": _kernels.expm1,
                "tanh": _kernels.tanh, "matmul": _widened(_compat.matmul)}


def _binary(name):
    func = _OWN_KERNELS.get(name) or getattr(_compat, name)

    def call(x1, x2, /):
        return _wrap(func(*_operands(x1, x2)))

    call.__name__ = call.__qualname__ = name
    call.__doc__ = (f"The array API's ``{name}(x1, x2, /)``: the standard's type promotion, "
                    "Python scalars included, then NumPy's kernel (ADR-052).")
    return call


for _name in _UNARY:
    globals()[_name] = _forward(_OWN_KERNELS.get(_name) or getattr(_compat, _name), _name)
for _name in _BINARY:
    globals()[_name] = _binary(_name)
matmul = _binary("matmul")

# ---- everything else that runs on the engine as the standard specifies --------------------

_FORWARDED = (
    # creation
    "arange empty empty_like eye full full_like linspace meshgrid ones ones_like tril triu "
    "zeros zeros_like "
    # data types
    "astype "
    # indexing
    "take take_along_axis "
    # linear algebra
    "matrix_transpose tensordot vecdot "
    # manipulation
    "broadcast_arrays broadcast_to concat expand_dims flip moveaxis permute_dims repeat "
    "reshape roll squeeze stack tile unstack "
    # searching
    "argmax argmin count_nonzero nonzero searchsorted where "
    # sets
    "isin unique_all unique_counts unique_inverse unique_values "
    # sorting
    "argsort sort "
    # statistics
    "cumulative_sum cumulative_prod max mean min prod std sum var "
    # utility
    "all any diff"
).split()
#: Linear algebra: relaxed mode's Tier 2 floats computed in float32, rounded once (ADR-080).
_WIDENED = frozenset(("tensordot", "vecdot"))
for _name in _FORWARDED:
    _func = getattr(_compat, _name)
    globals()[_name] = _forward(_widened(_func) if _name in _WIDENED else _func, _name)


def _reduction(name, ufunc, dtype):
    """The array API's `name` (forwarded above) dispatched straight to ``ufunc.reduce`` for a
    tensor argument without a ``dtype``: NumPy's own ``np.sum`` (``np.prod``, ``np.max``,
    ``np.min``, ``np.all``, ``np.any``) is exactly that call on an ndarray, reached through a
    layer of Python, and ``out=...`` makes it return a 0-d array rather than a scalar that
    would then be converted (ADR-095). Everything else goes to the forwarded function."""
    general = globals()[name]

    def reduce(x, axis, keepdims):
        return _engine.from_numpy(ufunc.reduce(
            _engine.to_np(x), None if axis is None else _engine.arg(axis), dtype,
            out=..., keepdims=_engine.arg(keepdims)))

    if name in ("sum", "prod"):
        def call(x, /, *, axis=None, dtype=None, keepdims=False):
            if type(x) is not _engine.Tensor or dtype is not None:
                return general(x, axis=axis, dtype=dtype, keepdims=keepdims)
            return reduce(x, axis, keepdims)
    else:
        def call(x, /, *, axis=None, keepdims=False):
            if type(x) is not _engine.Tensor:
                return general(x, axis=axis, keepdims=keepdims)
            return reduce(x, axis, keepdims)

    call.__name__ = call.__qualname__ = name
    call.__module__ = general.__module__
    call.__doc__ = general.__doc__.replace("NumPy's kernel through array-api-compat",
                                           f"NumPy's np.{ufunc.__name__}.reduce")
    return call


for _name, _ufunc, _dtype in (("sum", _np.add, None), ("prod", _np.multiply, None),
                              ("max", _np.maximum, None), ("min", _np.minimum, None),
                              ("all", _np.logical_and, _builtins.bool),
                              ("any", _np.logical_or, _builtins.bool)):
    globals()[_name] = _reduction(_name, _ufunc, _dtype)


def broadcast_shapes(*shapes):
    """The shape that `shapes` broadcast to (array API); ValueError if they do not."""
    return tuple(_np.broadcast_shapes(*shapes))


def asarray(obj, /, *, dtype=None, device=None, copy=None):
    """Convert `obj` to a hurray.Tensor (array API).

    Tensors, NumPy arrays, DLPack and buffer-protocol objects, Python scalars and nested
    sequences of them. ``copy=None`` shares memory where it can, ``copy=False`` raises
    ValueError where it cannot, ``copy=True`` always copies.
    """
    _engine.check_device(device)
    return _wrap(_compat.asarray(_engine.arg(obj), dtype=_engine.np_dtype(dtype), copy=copy))


def from_dlpack(x, /, *, device=None, copy=None):
    """A hurray.Tensor over a DLPack exporter's memory (array API); a copy if ``copy=True``."""
    _engine.check_device(device)
    return _wrap(_np.from_dlpack(x, copy=copy))


# ---- data type functions --------------------------------------------------------------------

def _np_of(x):
    if type(x) is _engine.Tensor:
        return _engine.to_np(x).dtype
    if x is None:
        raise TypeError("expected a hurray.Tensor or a dtype, not None")
    return _engine.np_dtype(x)


def result_type(*arrays_and_dtypes):
    """The dtype the standard's promotion gives `arrays_and_dtypes` (tensors, dtypes, and
    Python scalars); TypeError where it is undefined."""
    dtypes = [_np_of(x) for x in arrays_and_dtypes if type(x) not in (_builtins.bool, int, float,
                                                                       complex)]
    scalars = [x for x in arrays_and_dtypes if type(x) in (_builtins.bool, int, float, complex)]
    if not dtypes:
        raise TypeError("result_type needs at least one tensor or dtype")
    r = dtypes[0]
    for d in dtypes[1:]:
        r = _promote(r, d)
    for s in scalars:
        r = _scalar_result(r, s)
    return _engine.FROM_NP[r]


def can_cast(from_, to, /):
    """Whether `from_` (a tensor or dtype) casts to `to` under the promotion rules."""
    a, b = _np_of(from_), _np_of(to)
    try:
        return _promote(a, b) == b
    except TypeError:
        return False


_KINDS = {
    "bool": ("b",),
    "signed integer": ("i",),
    "unsigned integer": ("u",),
    "integral": ("i", "u"),
    "real floating": ("f",),
    "complex floating": ("c",),
    "numeric": ("i", "u", "f", "c"),
}


def isdtype(dtype, kind):
    """Whether `dtype` is of `kind`: a dtype, a kind name, or a tuple of them (array API)."""
    dtype = _engine._hurray.dtype(dtype)
    if type(kind) is tuple:
        return _builtins.any(isdtype(dtype, k) for k in kind)
    if isinstance(kind, _engine._hurray.dtype):
        return dtype == kind
    if isinstance(kind, str):
        try:
            kinds = _KINDS[kind]
        except KeyError:
            raise ValueError(f"isdtype: unknown kind {kind!r}") from None
        n = _engine.TO_NP.get(dtype)
        if n is None:
            return False
        k = "f" if n in _engine.TIER2_NP else n.kind
        return k in kinds
    raise TypeError(f"isdtype: kind must be a dtype, a str or a tuple, not {kind!r}")


class finfo_object:
    """Machine limits of a floating dtype (what `finfo` returns)."""

    def __init__(self, dtype):
        n = _np_of(dtype)
        if n.kind == "c":
            n = _np.dtype(f"f{n.itemsize // 2}")
        if n.kind != "f" and n not in _engine.TIER2_NP:
            raise TypeError(f"finfo needs a floating dtype, not {n}")
        try:
            import ml_dtypes

            f = ml_dtypes.finfo(n)
        except ImportError:
            f = _np.finfo(n)
        self.bits = int(f.bits)
        self.eps = float(f.eps)
        self.max = float(f.max)
        self.min = float(f.min)
        self.smallest_normal = float(f.smallest_normal)
        self.dtype = _engine.FROM_NP[n]

    def __repr__(self):
        return f"finfo(dtype={self.dtype.name}, bits={self.bits}, eps={self.eps}, max={self.max})"


class iinfo_object:
    """Limits of an integer dtype (what `iinfo` returns)."""

    def __init__(self, dtype):
        n = _np_of(dtype)
        if n.kind not in "iu":
            raise TypeError(f"iinfo needs an integer dtype, not {n}")
        i = _np.iinfo(n)
        self.bits, self.max, self.min = int(i.bits), int(i.max), int(i.min)
        self.dtype = _engine.FROM_NP[n]

    def __repr__(self):
        return f"iinfo(dtype={self.dtype.name}, bits={self.bits}, min={self.min}, max={self.max})"


def finfo(type, /):
    """Machine limits of a floating dtype or tensor (array API)."""
    return finfo_object(type)


def iinfo(type, /):
    """Limits of an integer dtype or tensor (array API)."""
    return iinfo_object(type)


from . import fft, linalg  # noqa: E402  (the extensions use the names above)

# ---- earlier versions of the standard -------------------------------------------------------

_EARLIER = ("2024.12", "2023.12", "2022.12", "2021.12")
_namespaces = {}


def _namespace(api_version):
    """The namespace ``Tensor.__array_namespace__(api_version=...)`` returns: this module for
    None and "2025.12"; for an earlier version, a module with the same functions except where
    that version specified other results (lists, not tuples, from ``meshgrid``,
    ``broadcast_arrays`` and ``devices()``)."""
    if api_version is None or api_version == __array_api_version__:
        return _sys.modules[__name__]
    if api_version not in _EARLIER:
        raise ValueError(f"api_version {api_version!r} is not supported")
    ns = _namespaces.get(api_version)
    if ns is None:
        ns = _types.ModuleType(__name__, __doc__)
        ns.__dict__.update({n: globals()[n] for n in __all__})
        ns.__all__ = __all__
        ns.__array_api_version__ = api_version

        def meshgrid(*arrays, indexing="xy"):
            return list(_meshgrid(*arrays, indexing=indexing))

        def broadcast_arrays(*arrays):
            return list(_broadcast_arrays(*arrays))

        def __array_namespace_info__():
            return _info.Info(devices_type=list)

        for f in (meshgrid, broadcast_arrays, __array_namespace_info__):
            f.__doc__ = (f"The array API {api_version}'s ``{f.__name__}`` (a list where 2025.12 "
                         "has a tuple).")
            setattr(ns, f.__name__, f)
        ns.__array_namespace_info__.__doc__ = "The namespace's inspection object (array API)."
        _namespaces[api_version] = ns
    return ns


_meshgrid, _broadcast_arrays = meshgrid, broadcast_arrays

__all__ = sorted(
    n for n in globals() if not n.startswith("_") or n in ("__array_namespace_info__",
                                                           "__array_api_version__")
) 
__all__ = [n for n in __all__ if n not in ("finfo_object", "iinfo_object")]
