"""Registration with other libraries when they are imported, without importing them.

JAX's pytree registry (ADR-087) and Dask's serializer and sizeof dispatch (ADR-088) live in
those libraries; ``import hurray`` imports neither. `after_import(name, register)` calls
``register(module)`` at once where the module is imported already, and otherwise the moment it
is, through a finder at the head of ``sys.meta_path`` that lets the other finders find the
module, wraps its loader's ``exec_module``, and steps aside after that one import.
"""

import importlib.abc
import importlib.util
import sys


class _AfterImport(importlib.abc.MetaPathFinder):
    def __init__(self, name, register):
        self.name = name
        self.register = register

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            execute = spec.loader.exec_module

            def exec_module(module):
                execute(module)
                self.register(module)

            spec.loader.exec_module = exec_module
        return spec


def after_import(name, register):
    """``register(module)`` once the top-level module `name` is imported."""
    module = sys.modules.get(name)
    if module is not None:
        register(module)
    else:
        sys.meta_path.insert(0, _AfterImport(name, register))
