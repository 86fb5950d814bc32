"""The bar that ``progress=True`` shows on stderr (save, load, convert, verify, Client.get)."""

import sys


class Bar:
    """Redraws one line of stderr: percentage and bytes; ends the line at the total."""

    def __init__(self, stream):
        self._stream = stream
        self._shown = -1

    def __call__(self, done, total):
        percent = 100 if total == 0 else done * 100 // total
        if percent != self._shown:
            self._shown = percent
            self._stream.write(f"\r{percent:3d}% {_size(done)} of {_size(total)}")
            if done >= total:
                self._stream.write("\n")
            self._stream.flush()


def _size(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def bar():
    """A Bar on sys.stderr when it is a terminal, else None (nothing to draw on)."""
    stream = sys.stderr
    try:
        tty = stream is not None and stream.isatty()
    except (AttributeError, ValueError):  # replaced or closed
        tty = False
    return Bar(stream) if tty else None
