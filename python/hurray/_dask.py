"""Dask: tensors as Dask's own messages, and Dask arrays over Hurray files (ADR-088).

`register` is called when ``distributed`` is imported (hurray._hooks), in the client and in
every worker. It registers hurray.Tensor with the ``dask_serialize`` family: a tensor travels
as a small header (its descriptor, the state ``Tensor.__reduce_ex__`` gives, with each buffer's
bytes replaced by the number of a frame) and one frame per buffer, the tensor's own memory;
the receiver builds it over the frames it got (hurray._pickle._rebuild), copying only where a
writable tensor arrives in read-only frames (as Dask does for NumPy arrays). It also registers ``dask.sizeof``, so that Dask
counts a tensor's bytes.

`FileRows` is the array-like ``File.dask`` hands ``dask.array.from_array``: each chunk opens
the file, takes its rows through ``File.slice`` and closes it, so the chunk is a view of a
mapping of its own, unmapped when the chunk goes. One mapping shared by every chunk would keep
every page a computation touched resident as long as it lives: a sum over a file larger than
memory would end with all of it counted in the process's RSS. Reading the rows instead
(``mmap=False``) bounds memory too, but pays a copy and fresh pages per chunk: three times the
time of a mapping's page faults over the page cache. It pickles to the file's absolute path
and the tensor's name; workers open the file themselves.
"""

import operator
import os

from hurray._hurray import Tensor, UnsupportedError, dtype
from hurray._hurray import open as _open
from hurray._pickle import _rebuild


def _header(state, frames):
    """The state with each buffer moved to `frames`, its place there left, dtypes by name."""
    if state[0] == "dense":
        *fields, data, readonly = state
        frames.append(data.raw())
        return [*fields, len(frames) - 1, readonly]
    layout, kwargs, parts, children = state
    kwargs = {key: value.name if isinstance(value, dtype) else value
              for key, value in kwargs.items()}
    return [layout, kwargs, [_header(part, frames) for part in parts],
            [[name, _header(child, frames)] for name, child in children]]


def _state(header, frames):
    if header[0] == "dense":
        *fields, frame, readonly = header
        data = frames[frame]
        if not readonly and data.readonly:
            data = bytearray(data)  # Dask's rule for NumPy too: writable stays writable
        return (*fields, data, readonly)
    layout, kwargs, parts, children = header
    return (layout, kwargs, [_state(part, frames) for part in parts],
            [(name, _state(child, frames)) for name, child in children])


def serialize(tensor):
    """``(header, frames)`` of a CPU tensor, the frames over its own memory."""
    frames = []
    (state,) = tensor.__reduce_ex__(5)[1]
    return {"state": _header(state, frames)}, frames


def deserialize(header, frames):
    """The tensor `serialize` gave `header` and `frames` for, over the frames."""
    return _rebuild(_state(header["state"], [memoryview(frame) for frame in frames]))


def nbytes(tensor):
    """The bytes a tensor's arrays address: its own, or its parts' and children's."""
    if tensor.layout == "dense":
        return tensor.nbytes
    return (sum(map(nbytes, tensor.parts)) +
            sum(map(nbytes, tensor.children.values())))


def register(distributed):
    """Registers hurray.Tensor with Dask's serializer family and ``dask.sizeof`` (once)."""
    from dask.sizeof import sizeof
    from distributed.protocol import dask_deserialize, dask_serialize

    dask_serialize.register(Tensor)(serialize)
    dask_deserialize.register(Tensor)(deserialize)
    sizeof.register(Tensor)(nbytes)


class FileRows:
    """One tensor of a Hurray file as rows read on demand, for ``dask.array.from_array``.

    ``x[index]`` maps the rows `index` spans along the first axis through ``File.slice`` of
    the file opened for that call alone, and gives them as a read-only NumPy array over that
    mapping; the rest of `index` selects within them. Pickling keeps `path` and `name`.
    """

    def __init__(self, path, name):
        import numpy as np

        self.path, self.name = os.path.abspath(path), name
        with _open(self.path) as probe:
            tensor = probe[name]
            stat = os.stat(self.path)
        if tensor.layout != "dense" or tensor.ndim == 0:
            what = "0-d" if tensor.layout == "dense" else tensor.layout
            raise UnsupportedError(f"File.dask: {name!r} is {what}; a Dask array is chunked "
                                   "along the rows of a dense tensor (its parts are: f[name].parts)")
        try:
            self.dtype = np.dtype(tensor.dtype)
        except TypeError as error:
            raise UnsupportedError(f"File.dask: {name!r}: {error}") from None
        self.shape, self.ndim = tensor.shape, tensor.ndim
        self._version = (stat.st_size, stat.st_mtime_ns)

    def __reduce__(self):
        return FileRows, (self.path, self.name)

    def __dask_tokenize__(self):
        return (FileRows.__qualname__, self.path, self.name, self._version)

    def __getitem__(self, index):
        import numpy as np

        index = index if isinstance(index, tuple) else (index,)
        if not index or index[0] is Ellipsis:
            index = (slice(None), *index)
        first, rest = index[0], index[1:]
        if isinstance(first, slice):
            rows = range(self.shape[0])[first]
            start, stop = (rows.start, rows.stop) if rows.step > 0 else (rows.stop + 1,
                                                                      rows.start + 1)
            stop = max(start, stop)  # an empty range
            within = slice(None, None, rows.step)
        else:
            row = range(self.shape[0])[operator.index(first)]  # IndexError out of range
            start, stop, within = row, row + 1, 0
        with _open(self.path) as file:  # the rows keep their mapping; nothing else does
            rows = file.slice(self.name, start, stop)
        return np.asarray(rows)[(within, *rest)]


def from_file(file, name, chunks="auto"):
    """``File.dask``: a Dask array over `name` of the open File `file`."""
    import dask.array
    import numpy as np

    rows = FileRows(file.path, name)
    return dask.array.from_array(rows, chunks=chunks, meta=np.empty((0,) * rows.ndim, rows.dtype))
