"""__array_namespace_info__: what hurray.array_api offers (array API inspection)."""

from . import _engine


class Info:
    """The namespace's capabilities, devices and dtypes (array API inspection object).

    `devices_type` is what `devices` returns: a tuple (2025.12) or a list (earlier versions).
    """

    def __init__(self, devices_type=tuple):
        self._devices_type = devices_type

    def capabilities(self):
        """Boolean-mask indexing and data-dependent shapes are supported; 2 dimensions max
        is no limit (None)."""
        return {"boolean indexing": True, "data-dependent shapes": True, "max dimensions": 64}

    def default_device(self):
        """The CPU, where hurray.array_api computes."""
        return _engine.CPU

    def devices(self):
        """The devices the namespace computes on: the CPU."""
        return self._devices_type((_engine.CPU,))

    def default_dtypes(self, *, device=None):
        """float64, complex128, int64 and (for indices) int64."""
        _engine.check_device(device)
        h = _engine.H
        return {"real floating": h["float64"], "complex floating": h["complex128"],
                "integral": h["int64"], "indexing": h["int64"]}

    def dtypes(self, *, device=None, kind=None):
        """The standard's dtypes by name, optionally of one `kind` (a kind name or a tuple)."""
        _engine.check_device(device)
        from . import isdtype

        h = _engine.H
        return {n: h[n] for n in _engine.TIER1_NAMES if kind is None or isdtype(h[n], kind)}


def __array_namespace_info__():
    """The namespace's inspection object (array API)."""
    return Info()
