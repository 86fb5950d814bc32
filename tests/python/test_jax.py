"""JAX takes hurray.Tensor (ADR-087): jax.numpy functions through __jax_array__, jax.jit and
jax.device_put through the pytree node Hurray registers when JAX is imported; the same memory
where JAX takes it."""

import subprocess
import sys

import pytest

import hurray
from conftest import peer

np = peer("numpy")
jax = peer("jax")
jnp = peer("jax.numpy")
ml_dtypes = peer("ml_dtypes")


def aligned(values):
    """A writable tensor over a copy of `values` starting on a 64-byte boundary, where JAX
    imports CPU memory without a copy."""
    raw = np.empty(values.nbytes + 64, np.uint8)
    start = -raw.ctypes.data % 64
    arr = raw[start:start + values.nbytes].view(values.dtype).reshape(values.shape)
    arr[...] = values
    return hurray.from_numpy(arr), arr.ctypes.data


def test_device_put_takes_the_same_memory():
    t, address = aligned(np.arange(12, dtype=np.float32).reshape(3, 4))
    put = jax.device_put(t)
    assert isinstance(put, jax.Array) and put.shape == (3, 4) and put.dtype == jnp.float32
    assert put.unsafe_buffer_pointer() == address
    assert jax.device_put(t, jax.devices("cpu")[0]).unsafe_buffer_pointer() == address


def test_jit_traces_tensors_as_arrays():
    t, _ = aligned(np.arange(6, dtype=np.float32))
    double = jax.jit(lambda x, y: x * 2 + y)
    assert double(t, t).tolist() == [0.0, 3.0, 6.0, 9.0, 12.0, 15.0]
    nested = jax.jit(lambda d: d["a"].sum() + d["b"][0][1])({"a": t, "b": [t]})
    assert float(nested) == 16.0
    assert jax.grad(lambda x: (x * x).sum())(t).tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]


@pytest.mark.parametrize("function", [
    lambda t: jnp.sum(t), lambda t: jnp.add(t, t), lambda t: jnp.concatenate([t, t]),
    lambda t: jnp.reshape(t, (2, 3)), lambda t: jnp.where(t > 2, t, 0),
    lambda t: jnp.ones(6, jnp.float32) + t, lambda t: jnp.dot(t, t), lambda t: jnp.asarray(t)],
    ids=["sum", "add", "concatenate", "reshape", "where", "radd", "dot", "asarray"])
def test_jax_numpy_functions_take_tensors(function):
    values = np.arange(6, dtype=np.float32)
    t, _ = aligned(values)
    np.testing.assert_array_equal(np.asarray(function(t)), np.asarray(function(values)))


def test_bfloat16_and_read_only_tensors():
    values = np.arange(8, dtype=np.float32).astype(ml_dtypes.bfloat16)
    t = hurray.from_numpy(values)
    assert jax.device_put(t).dtype == jnp.bfloat16
    assert jnp.sum(t) == 28
    frozen = hurray.Tensor(np.arange(4, dtype=np.int32).tobytes(), hurray.int32, [4])
    assert frozen.readonly
    assert jax.jit(lambda x: x + 1)(frozen).tolist() == [1, 2, 3, 4]  # a copy, JAX's choice


def test_a_layout_jax_has_no_form_for_is_refused_naming_it():
    values = hurray.Tensor(bytes(range(12)), hurray.int8, [4, 3])
    scales = hurray.Tensor(np.ones(4, np.float32).tobytes(), hurray.float32, [4])
    t = hurray.Tensor.from_parts("per_channel", [values, scales], axis=0)
    for use in (jax.device_put, jnp.sum):
        with pytest.raises(hurray.UnsupportedError, match="per_channel"):
            use(t)


@pytest.mark.parametrize("order", ["import hurray, jax", "import jax, hurray"])
def test_registered_whichever_is_imported_first(order):
    code = (f"{order}, sys\n"
            "assert jax.device_put(hurray.Tensor(bytes(8), hurray.float32, [2])).shape == (2,)\n"
            "assert not any(getattr(f, 'name', None) == 'jax' for f in sys.meta_path)\n")
    result = subprocess.run([sys.executable, "-c", "import sys\n" + code], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_import_hurray_does_not_import_jax():
    result = subprocess.run([sys.executable, "-c", "import sys, hurray; print('jax' in sys.modules)"],
                            capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "False", result.stderr
