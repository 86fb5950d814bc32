"""JAX takes hurray.Tensor where it takes arrays (ADR-087).

JAX (0.10) has two doors for foreign arrays. Its ``jax.numpy`` functions call
``__jax_array__`` (``Tensor.__jax_array__`` calls `to_jax`); ``jax.jit``, ``jax.device_put``
and everything else that flattens its arguments as pytrees take a type registered as a pytree
node, and refuse ``__jax_array__`` there. A tensor is registered as a node with one child, the
JAX array `to_jax` makes of it, and unflattens to that child: inside ``jax.jit`` the function
sees a traced array, and ``jax.device_put(t)`` returns a ``jax.Array``.

The registration needs JAX imported, and ``import hurray`` does not import JAX: `register` is
called when JAX is (hurray._hooks).
"""

from hurray._hurray import Tensor

_registered = False


def to_jax(tensor):
    """``jax.numpy.from_dlpack(tensor)``: zero-copy where JAX takes the memory as it is. JAX
    takes by DLPack only compact strides (a transposition at most); a sliced or reversed
    tensor is copied through NumPy (``np.asarray`` keeps every dtype ml_dtypes has)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    try:
        return jnp.from_dlpack(tensor)
    except jax.errors.JaxRuntimeError as error:
        if "striding" not in str(error):
            raise
        return jnp.asarray(np.asarray(tensor))


def _flatten(tensor):
    return (to_jax(tensor),), None


def _unflatten(_, children):
    return children[0]


def register(jax):
    """Registers hurray.Tensor as a pytree node with `jax`, the imported module (once)."""
    global _registered
    if not _registered:
        jax.tree_util.register_pytree_node(Tensor, _flatten, _unflatten)
        _registered = True
