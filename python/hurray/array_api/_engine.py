"""The engine behind hurray.array_api: NumPy's kernels over the tensors' own memory (ADR-052).

A CPU tensor becomes a NumPy view of its memory (``Tensor.__array__``, zero-copy, strides and
read-only kept) and a NumPy result becomes a tensor over the result's memory
(``hurray.from_numpy``, zero-copy). Everything here is the glue: the dtype maps, the admission
rule of the compliance modes (ADR-022), devices, and the conversion of arguments and results.
"""

try:
    import numpy as np
except ImportError as error:  # pragma: no cover - exercised in a NumPy-free interpreter
    raise ImportError(
        "hurray.array_api computes with NumPy (>= 2.0), which is not installed: "
        "`pip install numpy`; the rest of hurray works without it"
    ) from error
try:
    import array_api_compat.numpy as compat
except ImportError as error:  # pragma: no cover
    raise ImportError(
        "hurray.array_api needs array-api-compat (the standard's NumPy semantics), which is not "
        "installed: `pip install array-api-compat`"
    ) from error

from hurray import _hurray

Tensor = _hurray.Tensor
from_numpy = _hurray.from_numpy
CPU = _hurray.Device("cpu")
_get_mode = _hurray.get_mode

# ---- dtypes ---------------------------------------------------------------------------------

#: The standard's dtypes (Tier 1), in the standard's order.
TIER1_NAMES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
               "float32", "float64", "complex64", "complex128")
#: The Tier 2 dtypes relaxed mode computes on: the whole-byte floats NumPy (with ml_dtypes) has.
TIER2_COMPUTE_NAMES = ("float16", "bfloat16", "float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz",
                       "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
                       "float8_e8m0fnu")

H = {}  #: name -> hurray.dtype
TO_NP = {}  #: hurray.dtype -> numpy.dtype
FROM_NP = {}  #: numpy.dtype -> hurray.dtype (the dtypes the engine computes on)
for _name in TIER1_NAMES + TIER2_COMPUTE_NAMES:
    _h = _hurray.dtype(_name)
    H[_name] = _h
    if _name in TIER1_NAMES or _name == "float16":
        _n = np.dtype(_name)
    else:
        try:
            import ml_dtypes
        except ImportError:
            continue
        _n = np.dtype(getattr(ml_dtypes, _name, None) or object)
        if _n == np.dtype(object):
            continue
    TO_NP[_h] = _n
    FROM_NP[_n] = _h
TIER1_NP = frozenset(TO_NP[H[n]] for n in TIER1_NAMES)
TIER2_NP = frozenset(d for d in FROM_NP if d not in TIER1_NP)


def mode_error(name):
    """The TypeError strict mode raises for a dtype outside the standard."""
    return TypeError(
        f"{name} is not an array API dtype: hurray.array_api admits it in relaxed mode only "
        "(hurray.set_mode('relaxed') or `with hurray.mode('relaxed'):`)"
    )


def admit(npdtype):
    """Raise unless the engine may compute on `npdtype` in the mode in force."""
    if npdtype in TIER1_NP:
        return
    if npdtype in TIER2_NP:
        if _get_mode() == "relaxed":
            return
        raise mode_error(FROM_NP[npdtype].name)
    raise TypeError(f"hurray.array_api does not compute on {npdtype}")


def np_dtype(dtype):
    """The NumPy dtype for a dtype given to a namespace function (None stays None): a
    hurray.dtype, or any form hurray.dtype() takes (a name, a NumPy or PyTorch dtype)."""
    if dtype is None:
        return None
    if not isinstance(dtype, _hurray.dtype):
        dtype = _hurray.dtype(dtype)
    try:
        n = TO_NP[dtype]
    except KeyError:
        if dtype.tier == 1 or _get_mode() == "relaxed":
            raise TypeError(
                f"{dtype.name} has no arithmetic in hurray.array_api: it is a storage "
                "format only (ADR-053)"
            ) from None
        raise mode_error(dtype.name) from None
    if n not in TIER1_NP and _get_mode() != "relaxed":
        raise mode_error(dtype.name)
    return n


# ---- devices --------------------------------------------------------------------------------

def check_device(device):
    """Validate a `device` argument: None, 'cpu' or the CPU hurray.Device."""
    if device is None or device == "cpu":
        return
    if isinstance(device, _hurray.Device):
        if device == CPU:
            return
        raise _hurray.UnsupportedError(
            f"hurray.array_api computes on the CPU only, not on {device}"
        )
    raise ValueError(f"device must be 'cpu' or a hurray.Device, not {device!r}")


# ---- tensors <-> ndarrays -------------------------------------------------------------------

_ndarray = _hurray._ndarray


def to_np(x):
    """The NumPy array of a CPU tensor (mode-checked): the array it was made from while that
    still is exactly the tensor, else a view of its memory."""
    try:
        a = _ndarray(x)
    except _hurray.HurrayError as error:
        if x.device != CPU:
            raise _hurray.UnsupportedError(
                f"hurray.array_api computes on CPU tensors only; this one is on {x.device}: "
                "copy it there first with to_device('cpu')"
            ) from None
        dtype = x.dtype
        if dtype is None:
            raise TypeError("hurray.array_api computes on dense tensors, not composite ones") \
                from error
        if dtype.tier != 1 and _get_mode() != "relaxed":
            raise mode_error(dtype.name) from None
        numbers = dequantized(x)
        if numbers is not None:
            return numbers
        raise TypeError(
            f"hurray.array_api cannot compute on {dtype.name} tensors: a storage format only "
            f"(ADR-053): {error}"
        ) from error
    if a.dtype not in TIER1_NP:
        admit(a.dtype)
    return a


def dequantized(x):
    """Relaxed mode's numbers of a quantised tensor (ADR-086), or None for any other: a
    per_channel or block tensor dequantised to float32, a dense one of packed integers (int4,
    uint4, int2, uint2, uint1) unpacked to int8 or uint8, by hurray-core's kernels. The array is
    new memory, read-only, since a write to it would not reach the tensor."""
    if x.layout in ("per_channel", "block"):
        a = to_np(_hurray.dequantize(x))
    elif x.layout == "dense" and x.dtype.tier == 3:
        a = to_np(_hurray.dequantize(x, H["int8"] if x.dtype.kind == "i" else H["uint8"]))
    else:
        return None
    a.flags.writeable = False
    return a


def check_writable(a):
    """Raise unless the NumPy view `a` of a tensor may be written (before any write)."""
    if not a.flags.writeable:
        raise _hurray.InvalidArgumentError(
            "this hurray.Tensor is read-only (its memory came from a read-only source, such as "
            "bytes or a loaded file, or it is quantised, its numbers computed from its parts): "
            "write to a copy, hurray.array_api.asarray(x, copy=True)"
        )


def wrap(a):
    """A tensor over a NumPy result (a 0-d array for a NumPy scalar)."""
    if type(a) is not np.ndarray:
        a = np.asarray(a)
    return from_numpy(a)


def arg(v):
    """A namespace function's argument for the engine: tensors become ndarrays, dtypes NumPy
    dtypes, devices 'cpu', and sequences of tensors lists of ndarrays."""
    if type(v) is Tensor:
        return to_np(v)
    if isinstance(v, _hurray.dtype):
        return np_dtype(v)
    if isinstance(v, _hurray.Device):
        check_device(v)
        return "cpu"
    if type(v) in (list, tuple) and v and any(type(e) is Tensor for e in v):
        return [arg(e) for e in v]
    return v


def result(r):
    """Results of the engine as tensors: arrays, NumPy scalars, tuples and named tuples."""
    if isinstance(r, (np.ndarray, np.generic)):
        return wrap(r)
    if isinstance(r, tuple):
        items = [result(e) for e in r]
        return type(r)(*items) if hasattr(r, "_fields") else tuple(items)
    if isinstance(r, list):
        return [result(e) for e in r]
    return r


def _convert_dtype(dtype):
    return np_dtype(dtype)


def forward(func, name):
    """The namespace function `name` (a key of ``_signatures.SIGNATURES``, "linalg.x" for an
    extension's): generated with the standard's signature, it runs `func` (array-api-compat's
    NumPy function) on the engine's view of its arguments and returns tensors."""
    from ._signatures import SIGNATURES

    params = SIGNATURES[name]
    short = name.rpartition(".")[2]
    scope = {}
    exec(f"def {short}({params}): pass", scope)  # noqa: S102 - the standard's own parameter list
    import inspect

    calls, checks, optional = [], [], []
    for p in inspect.signature(scope[short]).parameters.values():
        value = "_dtype(dtype)" if p.name == "dtype" else f"_arg({p.name})"
        if p.name == "device":
            checks.append("_check_device(device)")
            value = "None"
        if p.kind is p.POSITIONAL_ONLY:
            calls.append(value)
        elif p.kind is p.VAR_POSITIONAL:
            calls.append(f"*[_arg(e) for e in {p.name}]")
        elif p.default is None and p.name != "device":
            # None is the standard's "not given": leave it to the engine's own default
            # (np.diff(prepend=None) would prepend None).
            optional.append(f"    if {p.name} is not None: _kw[{p.name!r}] = {value}\n")
        else:
            calls.append(f"{p.name}={value}")
    body = "".join(f"    {c}\n" for c in checks)
    if optional:
        body += "    _kw = {}\n" + "".join(optional)
        calls.append("**_kw")
    source = f"def {short}({params}):\n{body}    return _result(_func({', '.join(calls)}))\n"
    scope = {"_func": func, "_arg": arg, "_dtype": _convert_dtype, "_check_device": check_device,
             "_result": result}
    exec(source, scope)  # noqa: S102 - generated from the table above, no outside input
    call = scope[short]
    call.__qualname__ = short
    call.__module__ = "hurray.array_api" + ("." + name.rpartition(".")[0] if "." in name else "")
    call.__doc__ = (f"The array API's ``{name}({params})``: NumPy's kernel through "
                    "array-api-compat, on the tensors' memory (ADR-052).")
    return call
