"""hurray.array_api: the array API namespace that ``Tensor.__array_namespace__()`` returns.

Layer 8a status: this is the namespace module itself, with its version, and nothing else yet.
The array API functions (``asarray``, creation, element-wise, linear algebra, ...) arrive in a
later release; until then the module deliberately defines none of them, so a caller probing
for a function finds it missing instead of finding a stub.

When they arrive, every function that accepts or creates a tensor of a given dtype admits
Tier 2 and Tier 3 dtypes only in relaxed mode (ADR-022): it asks
``hurray._hurray._array_api_admits(dtype)``, the same rule that hides ``__array_namespace__``
on Tier 2 / Tier 3 tensors in strict mode.
"""

__array_api_version__ = "2024.12"

__all__ = ["__array_api_version__"]
