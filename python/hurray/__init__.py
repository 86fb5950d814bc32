"""Hurray: device-aware tensor interchange.

Hurray describes a tensor completely -- dtype of any tier (float32 as
much as bfloat16, float8 or packed int4), shape and strides, the device
and kind of memory it lives in, whether it is ready to be read, and its
layout (dense, quantised, sparse, paged, composite) -- and moves it
between libraries, processes and files without copying it.

Tensors
    `Tensor` (over any buffer-protocol object), `Tensor.from_address`
    (memory on any device), `Tensor.from_parts` (multi-buffer layouts),
    `dtype`, `Device`.
Exchange
    `from_numpy`, `from_dlpack` and ``Tensor.__dlpack__`` for NumPy,
    PyTorch and JAX; `from_hurray` and ``Tensor.__hurray__``, the native
    protocol that loses nothing, between Hurray-aware extensions.
Files
    `save`, `load`, `open` (a lazy `File`) and `convert` (safetensors,
    .npy and .npz).
Modes and errors
    `set_mode`, `get_mode`, `mode`; every error is a `HurrayError`.

Everything lives in the C extension ``hurray._hurray``, over the
hurray-ffi C ABI (`C_ABI_VERSION`); this package re-exports it. The user
guide is docs/guide/, the reference docs/impl/python-bindings.md.

Examples
--------
>>> import numpy as np
>>> t = hurray.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3))
>>> t.shape, t.dtype
((2, 3), hurray.float32)
>>> hurray.save("example.hurray", {"t": t})
>>> np.asarray(hurray.load("example.hurray")["t"])
array([[0., 1., 2.],
       [3., 4., 5.]], dtype=float32)
"""

import builtins as _builtins
import importlib as _importlib

from hurray import _hurray
from hurray._hurray import (  # noqa: F401  (re-exports)
    C_ABI_VERSION,
    ABIError,
    AuthenticationError,
    BufferError,
    ChecksumError,
    Client,
    ConnectionLostError,
    ConnectionRefusedError,
    DescriptorError,
    Device,
    DTypeError,
    File,
    FileNotFoundError,
    FormatError,
    HurrayError,
    InputOutputError,
    InvalidArgumentError,
    IsADirectoryError,
    KeyError,
    LayoutError,
    LimitError,
    NotADirectoryError,
    OutOfMemoryError,
    RequestDeniedError,
    PermissionError,
    Server,
    StateError,
    Tensor,
    TimedOutError,
    UnsupportedError,
    WireError,
    __version__,
    connect,
    convert,
    dequantize,
    dtype,
    empty_cache,
    from_dlpack,
    from_hurray,
    from_numpy,
    get_mode,
    load,
    mode,
    open,
    quantize,
    register_device,
    save,
    serve,
    set_mode,
    unregister_device,
)

# The Tier 1 dtypes by name (hurray.float32, hurray.bool, ...): the extension adds exactly
# those to its module namespace, from the C dtype table.
_tier1 = {name: value for name, value in vars(_hurray).items() if isinstance(value, dtype)}
globals().update(_tier1)

# A star import brings every public name except those that would shadow a builtin
# (hurray.open, hurray.BufferError, hurray.bool, hurray.FileNotFoundError, ...): those are
# reached as hurray.<name>.
__all__ = [name for name in [
    "C_ABI_VERSION",
    "ABIError",
    "AuthenticationError",
    "BufferError",
    "ChecksumError",
    "Client",
    "ConnectionLostError",
    "ConnectionRefusedError",
    "DescriptorError",
    "Device",
    "DTypeError",
    "File",
    "FileNotFoundError",
    "FormatError",
    "HurrayError",
    "InputOutputError",
    "InvalidArgumentError",
    "IsADirectoryError",
    "KeyError",
    "LayoutError",
    "LimitError",
    "NotADirectoryError",
    "OutOfMemoryError",
    "RequestDeniedError",
    "PermissionError",
    "Server",
    "StateError",
    "Tensor",
    "TimedOutError",
    "UnsupportedError",
    "WireError",
    "__version__",
    "connect",
    "convert",
    "dequantize",
    "dtype",
    "empty_cache",
    "from_dlpack",
    "from_hurray",
    "from_numpy",
    "get_mode",
    "load",
    "mode",
    "quantize",
    "register_device",
    "save",
    "serve",
    "set_mode",
    "unregister_device",
    "open",
    *sorted(_tier1),
] if not hasattr(_builtins, name)]
del _tier1
del _builtins

# What NumPy, PyTorch and safetensors users reach for at the top level (ADR-071). A name the
# array API namespace has is named there; these are the others.
_MAKE = ("hurray.array_api.asarray(data) copies a list or a scalar into a tensor; "
         "hurray.from_numpy(a) and hurray.from_dlpack(x) wrap an array without copying")
_ROUTES = {
    "tensor": _MAKE, "array": _MAKE, "asarray": _MAKE, "as_tensor": _MAKE,
    "from_torch": "hurray.from_dlpack(x) takes a PyTorch tensor without copying",
    "from_jax": "hurray.from_dlpack(x) takes a JAX array without copying",
    "save_file": "hurray.save(path, tensors) writes them (the path first, where safetensors' "
                 "save_file takes the tensors first)",
    "load_file": "hurray.load(path) reads a Hurray, safetensors, .npy or .npz file",
    "safe_open": "hurray.open(path) opens a file lazily, as a read-only mapping",
}


def __getattr__(name):
    """AttributeError naming the route for what NumPy, PyTorch and safetensors users try."""
    route = _ROUTES.get(name)
    if route is None and not name.startswith("_") and name != "array_api":  # not imported yet
        try:
            array_api = _importlib.import_module("hurray.array_api")
        except ImportError:  # NumPy absent: the namespace is not there to name
            array_api = None
        if name in getattr(array_api, "__all__", ()):
            route = f"the array API namespace has it: hurray.array_api.{name}"
    if route is None:
        raise AttributeError(f"module 'hurray' has no attribute {name!r}")
    raise AttributeError(f"module 'hurray' has no attribute {name!r}: {route}")

# jax.jit and jax.device_put take tensors as pytree nodes (ADR-087), Dask moves them with its own
# serializer family (ADR-088): registered when JAX and distributed are imported, neither imported
# here.
_hooks = _importlib.import_module("hurray._hooks")
_hooks.after_import("jax", _importlib.import_module("hurray._jax").register)
_hooks.after_import("distributed", _importlib.import_module("hurray._dask").register)
del _hooks
