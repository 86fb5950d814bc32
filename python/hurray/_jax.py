"""JAX takes hurray.Tensor where it takes arrays (ADR-087).

JAX (0.10) has two doors for foreign arrays. Its ``jax.numpy`` functions call
``__jax_array__`` (``Tensor.__jax_array__`` calls `to_jax`); ``jax.jit``, ``jax.device_put``
and everything else that flattens its arguments as pytrees take a type registered as a pytree
node, and refuse ``__jax_array__`` there. A tensor is registered as a node with one child, the
JAX array `to_jax` makes of it, and unflattens to that child: inside ``jax.jit`` the function
sees a traced array, and ``jax.device_put(t)`` returns a ``jax.Array``.

The registration needs JAX imported, and ``import hurray`` does not import JAX: `watch`
registers at once where JAX is already imported, and otherwise the moment it is, through a
finder on ``sys.meta_path`` that steps aside after that one import.
"""

import importlib.abc
import importlib.util
import sys

from hurray._hurray import Tensor

_registered = False


def to_jax(tensor):
    """``jax.numpy.from_dlpack(tensor)``: zero-copy where JAX takes the memory as it is."""
    import jax.numpy as jnp

    return jnp.from_dlpack(tensor)


def _flatten(tensor):
    return (to_jax(tensor),), None


def _unflatten(_, children):
    return children[0]


def _register(jax):
    global _registered
    if not _registered:
        jax.tree_util.register_pytree_node(Tensor, _flatten, _unflatten)
        _registered = True


class _WhenJAXIsImported(importlib.abc.MetaPathFinder):
    """Registers the pytree node once ``jax`` has been executed, then leaves sys.meta_path."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "jax":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            execute = spec.loader.exec_module

            def exec_module(module):
                execute(module)
                _register(module)

            spec.loader.exec_module = exec_module
        return spec


def watch():
    """Register with JAX now if it is imported, else when it is."""
    jax = sys.modules.get("jax")
    if jax is not None:
        _register(jax)
    else:
        sys.meta_path.insert(0, _WhenJAXIsImported())
