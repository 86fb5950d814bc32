"""The exception hierarchy and the Hurray status -> exception table."""

import builtins
import re
from pathlib import Path

import pytest

import hurray
from hurray import _hurray

# status -> (class, builtin it must also be); the documented table
# (docs/impl/python-bindings.md, "Error Handling").
EXPECTED = {
    "HURRAY_EINVAL": (hurray.InvalidArgumentError, ValueError),
    "HURRAY_ENOMEM": (hurray.OutOfMemoryError, MemoryError),
    "HURRAY_EOVERFLOW": (hurray.LimitError, ValueError),
    "HURRAY_ELIMIT": (hurray.LimitError, ValueError),
    "HURRAY_EDTYPE": (hurray.DTypeError, TypeError),
    "HURRAY_EDEVICE": (hurray.DescriptorError, ValueError),
    "HURRAY_EMEMCLASS": (hurray.DescriptorError, ValueError),
    "HURRAY_ESYNC": (hurray.DescriptorError, ValueError),
    "HURRAY_EALIGN": (hurray.DescriptorError, ValueError),
    "HURRAY_ELAYOUT": (hurray.LayoutError, ValueError),
    "HURRAY_EBOUNDS": (hurray.LayoutError, ValueError),
    "HURRAY_EABI": (hurray.ABIError, builtins.BufferError),
    "HURRAY_EUNSUPPORTED": (hurray.UnsupportedError, builtins.BufferError),
    "HURRAY_EFORMAT": (hurray.FormatError, ValueError),
    "HURRAY_EIO": (hurray.InputOutputError, OSError),
    "HURRAY_ESTATE": (hurray.StateError, RuntimeError),
    "HURRAY_ECHECKSUM": (hurray.ChecksumError, ValueError),
    "HURRAY_EPROTOCOL": (hurray.WireError, ConnectionError),
    "HURRAY_EAUTH": (hurray.AuthenticationError, PermissionError),
    "HURRAY_EDENIED": (hurray.RequestDeniedError, PermissionError),
    "HURRAY_ETIMEOUT": (hurray.TimedOutError, builtins.TimeoutError),
    "HURRAY_ECONNECTION": (hurray.ConnectionLostError, ConnectionError),
}


def header_statuses():
    header = Path(__file__).parents[2] / "include" / "hurray" / "hurray.h"
    if not header.exists():
        pytest.skip("the header is not beside the tests (installed package only)")
    return {f"HURRAY_{n}": int(v) for n, v in re.findall(r"X\((\w+), (\d+), \"", header.read_text())}


def test_the_extension_knows_the_status_list_of_the_header():
    assert _hurray._status_codes() == header_statuses()


def test_every_error_status_maps_to_exactly_one_class():
    codes = _hurray._status_codes()
    errors = {name: code for name, code in codes.items() if code != 0}
    assert set(errors) == set(EXPECTED), "a status was added: give it a class in errors.c"
    for name, code in errors.items():
        cls, builtin = EXPECTED[name]
        assert _hurray._exception_for_status(code) is cls, name
        assert issubclass(cls, hurray.HurrayError) and issubclass(cls, builtin)
        with pytest.raises(cls) as info:
            _hurray._raise_status(code, f"message of {name}")
        assert type(info.value) is cls
        assert info.value.code == code
        assert str(info.value) == f"message of {name}"


def test_the_generic_message_is_used_when_c_gives_none():
    with pytest.raises(hurray.LayoutError, match="^invalid tensor layout$"):
        _hurray._raise_status(_hurray._status_codes()["HURRAY_ELAYOUT"], "")


def test_success_and_unknown_codes_are_not_error_statuses():
    for code in (0, -1, 999):
        with pytest.raises(ValueError, match="not an error status"):
            _hurray._exception_for_status(code)


def test_hierarchy():
    assert issubclass(hurray.HurrayError, Exception)
    assert hurray.BufferError.__mro__[1:3] == (hurray.HurrayError, builtins.BufferError)
    assert issubclass(hurray.UnsupportedError, builtins.BufferError)
    assert not issubclass(hurray.UnsupportedError, hurray.BufferError)
    assert not issubclass(hurray.UnsupportedError, NotImplementedError)
    assert issubclass(hurray.ABIError, hurray.UnsupportedError)
    assert issubclass(hurray.ChecksumError, hurray.FormatError)
    for cls in (hurray.BufferError, hurray.UnsupportedError, hurray.LayoutError):
        assert cls.__module__ == "hurray"
        assert cls.__doc__
    assert hurray.HurrayError.code is None


def test_errors_raised_by_python_level_checks_carry_no_code():
    t = hurray.Tensor.from_address(0x1000, hurray.float32, [4], device="cuda")
    with pytest.raises(hurray.BufferError) as info:
        memoryview(t)
    assert info.value.code is None


def test_a_c_message_reaches_python_verbatim():
    with pytest.raises(hurray.InvalidArgumentError, match=r"only \[a-z0-9_\] are allowed"):
        hurray.register_device(0xF5, "Bad-Name")
    with pytest.raises(hurray.DescriptorError, match="reserved for a future version"):
        hurray.Device(0x20)
