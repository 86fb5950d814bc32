"""hurray.array_api.fft: the array API's FFT extension (NumPy's pocketfft; ADR-052)."""

from ._engine import compat as _compat
from ._engine import forward as _forward

__all__ = ("fft ifft fftn ifftn rfft irfft rfftn irfftn hfft ihfft fftfreq rfftfreq fftshift "
           "ifftshift").split()
for _name in __all__:
    globals()[_name] = _forward(getattr(_compat.fft, _name), "fft." + _name)
