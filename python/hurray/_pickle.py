"""Unpickling of hurray.Tensor (ADR-043).

``Tensor.__reduce_ex__`` (python/src/pickle.c) reduces a tensor to ``_rebuild(state)``; the
state goes back through the public constructors, so an unpickled tensor is validated like any
other and keeps its whole descriptor. The bytes are used where they arrive, never copied: a
tensor is read-only when it was or when the memory handed back is (out-of-band buffers of Ray's
object store), as NumPy does (ADR-088).
"""

from hurray._hurray import Tensor


def _rebuild(state):
    if state[0] == "dense":
        _, dtype, shape, strides, byte_offset, data, readonly = state
        view = memoryview(data)
        if readonly and not view.readonly:
            data = view.toreadonly()
        return Tensor(data, dtype, shape, strides=strides, byte_offset=byte_offset)
    layout, kwargs, parts, children = state
    return Tensor.from_parts(layout, [_rebuild(part) for part in parts],
                             children={name: _rebuild(child) for name, child in children} or None,
                             **kwargs)
