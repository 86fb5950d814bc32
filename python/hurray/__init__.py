"""Hurray: device-aware tensor interchange (hurray-python, over the hurray-ffi C ABI).

Everything public lives in the C extension ``hurray._hurray``; this file only re-exports it.
See docs/impl/python-bindings.md for the API, the DLPack mapping table, the native interchange
protocol (``__hurray__`` / ``from_hurray``), the file container (``save`` / ``load`` /
``open``), the error hierarchy and the compliance modes.
"""

from hurray import _hurray
from hurray._hurray import (  # noqa: F401  (re-exports)
    C_ABI_VERSION,
    ABIError,
    AuthenticationError,
    BufferError,
    ChecksumError,
    ConnectionLostError,
    DescriptorError,
    Device,
    DTypeError,
    File,
    FormatError,
    HurrayError,
    InputOutputError,
    InvalidArgumentError,
    LayoutError,
    LimitError,
    OutOfMemoryError,
    PermissionDeniedError,
    StateError,
    Tensor,
    TimedOutError,
    UnsupportedError,
    WireError,
    __version__,
    convert,
    dtype,
    from_dlpack,
    from_hurray,
    from_numpy,
    get_mode,
    load,
    mode,
    open,
    register_device,
    save,
    set_mode,
    unregister_device,
)

# The Tier 1 dtypes by name (hurray.float32, hurray.bool, ...): the extension adds exactly
# those to its module namespace, from the C dtype table.
_tier1 = {name: value for name, value in vars(_hurray).items() if isinstance(value, dtype)}
globals().update(_tier1)

__all__ = [
    "C_ABI_VERSION",
    "ABIError",
    "AuthenticationError",
    "BufferError",
    "ChecksumError",
    "ConnectionLostError",
    "DescriptorError",
    "Device",
    "DTypeError",
    "File",
    "FormatError",
    "HurrayError",
    "InputOutputError",
    "InvalidArgumentError",
    "LayoutError",
    "LimitError",
    "OutOfMemoryError",
    "PermissionDeniedError",
    "StateError",
    "Tensor",
    "TimedOutError",
    "UnsupportedError",
    "WireError",
    "__version__",
    "convert",
    "dtype",
    "from_dlpack",
    "from_hurray",
    "from_numpy",
    "get_mode",
    "load",
    "mode",
    "register_device",
    "save",
    "set_mode",
    "unregister_device",
    *sorted(_tier1),
]
# hurray.open is public but left out of __all__, so `from hurray import *` never shadows the
# builtin open().
del _tier1
