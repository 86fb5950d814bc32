"""What NumPy, PyTorch and dict habits try first on the wire client and server, on Tier 2
tensors, on the array object and on device tensors: each either does the right thing or raises
an error that names the right route, and nothing silently reinterprets data (ADR-069)."""

import ast
import copy
import errno
import math
import os
import pickle
import re
import socket
import subprocess
import sys

import numpy as np
import pytest

import hurray
from conftest import peer

EINVAL = hurray._hurray._status_codes()["HURRAY_EINVAL"]


@pytest.fixture
def served():
    with hurray.serve({"w": np.arange(6, dtype=np.float32).reshape(2, 3)},
                      uploads=True) as server, \
            hurray.connect(server.address) as client:
        yield server, client


# ---- the wire client and server ---------------------------------------------------------------


@pytest.mark.parametrize("call", [lambda c: c.get("missing"), lambda c: c.read("missing", 0, 4)],
                         ids=["get", "read"])
def test_a_name_the_server_does_not_serve_is_a_key_error_as_in_a_file(served, call, tmp_path):
    _, client = served
    with pytest.raises(KeyError) as info:
        call(client)
    error = info.value
    assert type(error) is hurray.KeyError
    # what caught it before still does
    assert isinstance(error, hurray.InvalidArgumentError) and isinstance(error, ValueError)
    assert error.code == EINVAL
    assert str(error) == "peer: no tensor named 'missing'"  # the message, not KeyError's repr
    # as a hurray.File's missing name is
    hurray.save(tmp_path / "w.hurray", {"w": np.zeros(2)})
    with hurray.open(tmp_path / "w.hurray") as f, pytest.raises(KeyError):
        f["missing"]


def test_other_invalid_requests_stay_value_errors(served):
    _, client = served
    for call, match in [(lambda: client.get("w", slice=slice(1, 9)), "rows"),
                        (lambda: client.read("w", 0, 25), "bytes"),
                        (lambda: client.put("w", np.zeros(2)), "w")]:
        with pytest.raises(hurray.InvalidArgumentError, match=match) as info:
            call()
        assert not isinstance(info.value, KeyError)


def test_hurray_key_error_stays_out_of_star_imports():
    assert "KeyError" not in hurray.__all__
    assert hurray.KeyError.__mro__[1] is hurray.InvalidArgumentError
    assert issubclass(hurray.KeyError, KeyError)


def test_the_client_is_no_mapping_and_says_what_to_call(served):
    _, client = served
    with pytest.raises(TypeError, match=r"not a mapping: fetch a tensor with client.get\('w'\)"):
        client["w"]
    with pytest.raises(TypeError, match=r"client.list\(\) lists the tensors.*hurray.KeyError"):
        "w" in client  # noqa: B015
    assert [entry["name"] for entry in client.list()] == ["w"]  # the route works


def test_clients_and_servers_do_not_pickle_and_say_why(served):
    server, client = served
    for obj in (client, server):
        for attempt in (pickle.dumps, copy.copy, copy.deepcopy):
            with pytest.raises(TypeError, match=f"cannot pickle a hurray.{type(obj).__name__}: "
                                                f"it holds a live connection.*'{server.address}'"
                                                r".*hurray.connect\(address\)"):
                attempt(obj)


def test_closed_clients_and_stopped_servers_say_so():
    server = hurray.serve({"w": np.zeros(2)})
    client = hurray.connect(server.address)
    assert repr(client) == f"<hurray.Client '{server.address}'>"
    assert repr(server) == f"<hurray.Server '{server.address}'>"
    client.close()
    client.close()  # idempotent
    assert repr(client).endswith("(closed)>")
    for call in (lambda: client.get("w"), client.list, lambda: client.info):
        with pytest.raises(hurray.StateError, match="is closed"):
            call()
    assert server.stats()["accepted"] == 1  # stats is a method, as the docs show it
    server.stop()
    assert repr(server).endswith("(stopped)>")
    with pytest.raises(hurray.StateError, match="is stopped"):
        server.stats()


def test_serve_takes_what_numpy_pytorch_and_jax_users_hold(tmp_path):
    torch = peer("torch")
    jnp = peer("jax").numpy
    strided = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]
    transposed = np.arange(12, dtype=np.int16).reshape(3, 4).T
    tensors = {"torch": torch.arange(4.0), "jax": jnp.arange(3, dtype=jnp.int32),
               "strided": strided, "transposed": transposed}
    hurray.save(tmp_path / "a.hurray", {"a": np.ones(2)})
    hurray.save(tmp_path / "b.hurray", {"b": np.zeros(3, np.uint8)})
    with hurray.serve([tensors, tmp_path / "a.hurray", str(tmp_path / "b.hurray")]) as server, \
            hurray.connect(server.address) as client:
        assert [e["name"] for e in client.list()] == \
            ["torch", "jax", "strided", "transposed", "a", "b"]
        assert client.get("torch").tolist() == [0.0, 1.0, 2.0, 3.0]
        assert client.get("jax").tolist() == [0, 1, 2]
        assert client.get("strided").tolist() == strided.tolist()  # values, not the base's
        assert client.get("transposed").tolist() == transposed.tolist()
        assert client.get("b").dtype == hurray.uint8


def test_serve_names_what_it_takes():
    for wrong in (np.ones(3), [np.ones(3)], hurray.from_numpy(np.ones(3))):
        with pytest.raises(TypeError, match="mapping of name -> tensor"):
            hurray.serve(wrong)
    with pytest.raises(TypeError, match="tensor 'x' is a list; expected a hurray.Tensor"):
        hurray.serve({"x": [1.0, 2.0]})


@pytest.mark.parametrize("tensors", ["/nonexistent/w.hurray", ["/nonexistent/w.hurray"]])
def test_serving_a_missing_file_is_file_not_found(tensors):
    with pytest.raises(FileNotFoundError) as info:
        hurray.serve(tensors)
    assert isinstance(info.value, hurray.InputOutputError)


def test_connecting_where_nothing_listens_or_nothing_answers(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ConnectionRefusedError, match=f"cannot connect to 127.0.0.1:{port}: "
                                                     "Connection refused") as info:
        hurray.connect(f"127.0.0.1:{port}")
    assert type(info.value) is hurray.ConnectionRefusedError
    assert isinstance(info.value, hurray.ConnectionLostError)  # what it was before
    assert info.value.errno == errno.ECONNREFUSED
    with pytest.raises(hurray.InvalidArgumentError, match="expected HOST:PORT"):
        hurray.connect(f"http://127.0.0.1:{port}")
    with pytest.raises(TypeError, match="url must be str, not tuple"):
        hurray.connect(("127.0.0.1", port))
    with pytest.raises(hurray.InvalidArgumentError, match="positive number of seconds"):
        hurray.connect(f"127.0.0.1:{port}", timeout=0)
    with socket.socket() as silent:  # accepts, never answers the hello
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        # the whole call is bounded by `timeout`, so that is what a silent server runs into
        with pytest.raises(TimeoutError, match="took longer than its timeout of 300 ms"):
            hurray.connect("127.0.0.1:%d" % silent.getsockname()[1], timeout=0.3)


# ---- Tier 2 values ----------------------------------------------------------------------------

TIER2 = ["float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
         "float8_e5m2fnuz", "float8_e8m0fnu", "float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz"]


@pytest.mark.parametrize("name", TIER2)
def test_tolist_widens_every_value_of_whole_byte_tier2_floats_exactly(name):
    ml_dtypes = peer("ml_dtypes")
    np_dtype = np.dtype(np.float16 if name == "float16" else getattr(ml_dtypes, name))
    patterns = np.arange(256 ** np_dtype.itemsize, dtype=f"u{np_dtype.itemsize}")
    got = hurray.Tensor(patterns.tobytes(), name, [patterns.size]).tolist()
    with np.errstate(invalid="ignore"):
        want = patterns.view(np_dtype).astype(np.float64).tolist()
    assert all(type(v) is float for v in got)
    differ = [(hex(int(p)), g, w) for p, g, w in zip(patterns, got, want)
              if not (math.isnan(g) and math.isnan(w) or
                      g == w and math.copysign(1, g) == math.copysign(1, w))]
    assert differ == []


def test_complex32_and_repr_show_tier2_values_but_never_decode_packed_ones():
    halves = np.array([1, 2, -0.5, np.inf], np.float16).tobytes()
    assert hurray.Tensor(halves, hurray.dtype.complex32, [2]).tolist() == \
        [1 + 2j, complex(-0.5, math.inf)]
    bf16 = hurray.Tensor(b"\xc0\x3f\x80\xbf", hurray.dtype.bfloat16, [2])
    assert repr(bf16).endswith(" values=[1.5, -1.0]>") and str(bf16) == repr(bf16)
    assert hurray.Tensor(b"\x38", hurray.dtype.float8_e4m3fn, []).tolist() == 1.0
    for packed in ("int4", "uint2", "float4_e2m1fn", "float6_e2m3fn"):
        t = hurray.Tensor(bytes(hurray.dtype(packed).bits // 2), packed, [4])
        assert "values" not in repr(t)
        with pytest.raises(hurray.UnsupportedError,
                           match=fr"{packed} packs \d-bit elements \(tobytes\(\)"):
            t.tolist()


def test_computing_on_bfloat16_still_names_relaxed_mode():
    zero_d = hurray.Tensor(b"\xc0\x3f", hurray.dtype.bfloat16, [])
    assert zero_d.tolist() == 1.5
    with pytest.raises(TypeError, match=r"relaxed mode only \(hurray.set_mode\('relaxed'\)"):
        float(zero_d)
    with hurray.mode("relaxed"):
        assert float(zero_d) == 1.5


def test_numpy_without_ml_dtypes_names_it():
    code = ("import sys; sys.modules['ml_dtypes'] = None\n"
            "import numpy as np, hurray\n"
            "t = hurray.Tensor(b'\\xc0\\x3f', 'bfloat16', [1])\n"
            "assert t.tolist() == [1.5]\n"
            "try:\n    np.asarray(t)\n"
            "except hurray.UnsupportedError as e:\n    print(e)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=os.environ)
    assert run.stdout.strip() == \
        "bfloat16 has no NumPy dtype without ml_dtypes (pip install ml_dtypes)", run.stderr


# ---- NumPy's and PyTorch's methods on the array object -----------------------------------------

ABSENT = set(dir(hurray.Tensor)) - set(dir(hurray.Tensor(b"", "uint8", [0])))


def test_numpys_and_pytorchs_methods_name_the_array_api_route():
    import hurray.array_api as xp
    assert {"sum", "mean", "reshape", "astype", "transpose", "copy", "item", "numpy", "cpu",
            "to"} <= ABSENT
    t = hurray.from_numpy(np.arange(4, dtype=np.float32))
    for name in ABSENT:
        assert not hasattr(t, name) and getattr(t, name, None) is None
        with pytest.raises(AttributeError, match=f"no attribute '{name}': the array API spells "
                                                 "it ") as info:
            getattr(t, name)
        route = str(info.value).split("spells it ", 1)[1]
        for function in (part.split("(")[0] for part in route.split("hurray.array_api.")[1:]):
            assert callable(getattr(xp, function)), route  # every route named exists
    with pytest.raises(AttributeError, match=r"hurray.array_api.sum\(t\)"):
        t.sum()
    assert float(xp.sum(t)) == 6.0
    with pytest.raises(AttributeError, match=r"t.to_device\('cpu'\)"):
        t.cpu()


def test_the_array_objects_own_attributes_are_untouched():
    t = hurray.from_numpy(np.arange(6, dtype=np.int32).reshape(2, 3))
    assert (t.shape, t.size, t.ndim, t.T.shape, t.mT.shape) == ((2, 3), 6, 2, (3, 2), (3, 2))
    assert t.to_device("cpu") is t and "to_device" in dir(t) and "tolist" in dir(t)


# ---- device tensors ---------------------------------------------------------------------------


@pytest.fixture
def on_opencl():
    try:
        return hurray.from_numpy(np.arange(4, dtype=np.float32)).to_device("opencl")
    except hurray.UnsupportedError as error:
        if os.environ.get("HURRAY_REQUIRE_OPENCL") == "1":
            pytest.fail(f"OpenCL is required here: {error}")
        pytest.skip(f"no OpenCL runtime: {error}")


def test_host_reads_of_device_memory_name_the_device_and_to_device(on_opencl):
    assert repr(on_opencl) == "<hurray.Tensor shape=(4,) dtype=float32 device=opencl:0>"
    route = r"on opencl:0 \(to_device\('cpu'\) copies it there\)"
    for read in (np.asarray, lambda t: t.tolist(), lambda t: t.tobytes(), memoryview,
                 pickle.dumps):
        with pytest.raises(hurray.BufferError, match=route):
            read(on_opencl)
    assert on_opencl.to_device("cpu").tolist() == [0.0, 1.0, 2.0, 3.0]


def test_array_api_calls_on_device_memory_name_to_device(on_opencl):
    import hurray.array_api as xp
    for op in (lambda t: t + 1, lambda t: -t, lambda t: t[0], xp.sum, xp.asarray, list):
        with pytest.raises(hurray.UnsupportedError,
                           match=r"on opencl:0: copy it there first with to_device\('cpu'\)"):
            op(on_opencl)


def test_listing_keeps_the_dtype_singletons_alive():
    """Regression: list() gave each entry's dtype away without a reference of its own, so every
    listing took one reference of a dtype singleton until it was freed while still in use."""
    with hurray.serve({"w": np.zeros(2, np.float32)}) as server, \
            hurray.connect(server.address) as client:
        listed = [client.list()[0]["dtype"] for _ in range(100)]
        before = sys.getrefcount(hurray.float32)
        del listed
        after = sys.getrefcount(hurray.float32)
        assert after == before - 100  # the list held one each, and gave exactly those back


# ---- Python's own protocols on the array object (ADR-071) -------------------------------------


def test_in_asks_whether_any_element_equals_the_value_as_numpy_and_pytorch_do():
    torch = peer("torch")
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = hurray.from_numpy(values)
    for value in (1.0, 5, 7, -0.0, float("nan")):
        assert (value in t) == (value in values) == (value in torch.from_numpy(values))
    assert 2 in hurray.from_numpy(np.array(2)) and 3 not in hurray.from_numpy(np.zeros((0, 3)))
    assert hurray.from_numpy(np.array([0, 1, 9], np.float32)) in t  # broadcasts, as NumPy's does


def test_format_specs_format_a_0d_tensors_value_and_name_tolist_otherwise():
    assert format(hurray.from_numpy(np.array(1.5, np.float32)), ".2f") == "1.50"
    assert f"{hurray.from_numpy(np.array(3)):>4}" == "   3"
    bf16 = hurray.Tensor(b"\xc0\x3f", hurray.dtype.bfloat16, [])
    assert f"{bf16:.3f}" == "1.500" == f"{np.asarray(bf16)[()]:.3f}"
    t = hurray.from_numpy(np.arange(4.0))
    assert f"{t}" == format(t, "") == str(t)
    with pytest.raises(TypeError, match=r"format spec '\.2f' needs a 0-d tensor, not one of shape "
                                        r"\(4,\): format each value of t.tolist\(\)"):
        format(t, ".2f")


@pytest.mark.parametrize("convert", [bool, float, int, complex])
def test_scalar_conversions_of_bigger_tensors_name_the_way_to_one_value(convert):
    many = hurray.from_numpy(np.arange(6).reshape(2, 3))
    route = r"hurray.array_api.any\(t\) or hurray.array_api.all\(t\)" if convert is bool else \
        r"index one element \(t\[0, 0\]\), or t.tolist\(\)"
    with pytest.raises(TypeError, match=fr"needs a 0-d tensor, not one of shape \(2, 3\): {route}"):
        convert(many)
    with pytest.raises(TypeError, match=r"hurray.array_api.reshape\(t, \(\)\) makes this "
                                        "one-element tensor 0-d"):
        convert(hurray.from_numpy(np.ones((1, 1), np.int64)))
    import hurray.array_api as xp
    assert convert(xp.reshape(hurray.from_numpy(np.ones((1, 1), np.int64)), ())) == convert(1)


def test_numpys_itemsize_and_pytorchs_size_methods_name_the_attribute_that_answers():
    t = hurray.from_numpy(np.zeros((2, 3), np.float32))
    for name, route in [("itemsize", "t.dtype.itemsize"), ("element_size", "t.dtype.itemsize"),
                        ("numel", "t.size"), ("dim", "t.ndim")]:
        with pytest.raises(AttributeError, match=f"no attribute '{name}': .* {route}"):
            getattr(t, name)
    assert (t.dtype.itemsize, t.size, t.ndim) == (4, 6, 2)


# ---- an open file (ADR-071) -------------------------------------------------------------------


def test_an_open_file_does_not_pickle_and_names_its_path_and_hurray_open(tmp_path):
    path = tmp_path / "w.hurray"
    hurray.save(path, {"w": np.arange(3, dtype=np.float32)})
    with hurray.open(path) as f:
        route = (r"cannot pickle a hurray.File: it holds an open file mapping; pass its path "
                 fr"\({re.escape(repr(path))}\) and call hurray.open\(path\).*dict\(f\)")
        for attempt in (pickle.dumps, copy.copy, copy.deepcopy):
            with pytest.raises(TypeError, match=route):
                attempt(f)
        # the routes named work
        assert pickle.loads(pickle.dumps(dict(f)))["w"].tolist() == [0.0, 1.0, 2.0]
        assert list(hurray.open(pickle.loads(pickle.dumps(f.path)))) == ["w"]


def test_an_open_file_is_read_only_and_says_how_to_write_one(tmp_path):
    path = tmp_path / "w.hurray"
    hurray.save(path, {"w": np.zeros(2), "b": np.ones(2)})
    with hurray.open(path) as f:
        with pytest.raises(TypeError, match=r"a hurray.File is read-only: to set 'x', write a new "
                                            r"file with hurray.save\(path, \{...\}\)"):
            f["x"] = np.ones(2)
        with pytest.raises(TypeError, match="read-only: to remove 'b'"):
            del f["b"]
        hurray.save(path, {**f, "x": np.ones(2)})  # the route: the old mapping stays valid
        assert f["w"].tolist() == [0.0, 0.0]
    assert list(hurray.load(path)) == ["w", "b", "x"]


# ---- dtypes in every form (ADR-071) -----------------------------------------------------------


@pytest.mark.parametrize("spelling", ["float32", np.float32, np.dtype("float32"), "torch"])
def test_the_array_api_namespace_takes_every_form_hurray_dtype_takes(spelling):
    import hurray.array_api as xp
    spelling = peer("torch").float32 if spelling == "torch" else spelling
    assert xp.zeros(2, dtype=spelling).dtype is hurray.float32
    assert xp.asarray([1, 2], dtype=spelling).tolist() == [1.0, 2.0]
    assert xp.astype(xp.arange(3), spelling).dtype is hurray.float32
    assert xp.finfo(spelling).bits == 32 and xp.isdtype(spelling, "real floating")
    assert xp.result_type(spelling, xp.float64) is xp.float64


@pytest.mark.parametrize("numpy_name, hurray_name", [("f4", "float32"), ("<i8", "int64"),
                                                     ("double", "float64"), ("half", "float16"),
                                                     ("float", "float64"), ("B", "uint8")])
def test_numpys_spellings_are_refused_naming_the_hurray_name(numpy_name, hurray_name):
    assert np.dtype(numpy_name) == np.dtype(hurray_name)  # what NumPy means by it
    route = fr'no dtype is named "{numpy_name}" \(NumPy\'s "{numpy_name}" is {hurray_name}: ' \
        fr'pass "{hurray_name}"\)'
    for call in (hurray.dtype, lambda d: hurray.Tensor(bytes(8), d, [1])):
        with pytest.raises(hurray.DTypeError, match=route):
            call(numpy_name)
    assert hurray.dtype(np.dtype(numpy_name)) is hurray.dtype(hurray_name)  # NumPy's dtype: taken
    with pytest.raises(hurray.UnsupportedError, match="byte-swapped"):
        hurray.dtype(">f4")
    with pytest.raises(hurray.DTypeError, match='^no dtype is named "flaot32"$'):
        hurray.dtype("flaot32")


# ---- files of other formats, loaded by mistake (ADR-071) --------------------------------------


def test_a_pytorch_checkpoint_names_torch_load_and_hurray_save(tmp_path):
    torch = peer("torch")
    state = {"w": torch.ones(2)}
    torch.save(state, tmp_path / "zip.pt")
    torch.save(state, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    with open(tmp_path / "model.pkl", "wb") as f:
        pickle.dump({"w": np.ones(2)}, f)
    route = "load it with torch.load and save its tensors with hurray.save"
    with pytest.raises(hurray.UnsupportedError,
                       match=r"not a .npz but a PyTorch checkpoint \(torch.save's zip, member "
                             fr"'zip/data.pkl'\): {route}"):
        hurray.load(tmp_path / "zip.pt")
    for pickled in ("legacy.pt", "model.pkl"):
        with pytest.raises(hurray.FormatError, match="not a Hurray file: its first bytes are those "
                                                     r"of a Python pickle \(pickle.dump, or "
                                                     "torch.save's legacy format\\): load it with "
                                                     "pickle.load or torch.load"):
            hurray.open(tmp_path / pickled)
    # the route named works
    hurray.save(tmp_path / "w.hurray", torch.load(tmp_path / "zip.pt"))
    assert hurray.load(tmp_path / "w.hurray")["w"].tolist() == [1.0, 1.0]


@pytest.mark.parametrize("signature, route", [
    (b"\x89HDF\r\n\x1a\n", "an HDF5 file: read it with h5py")])  # HDF5's format signature
def test_hdf5_files_are_named_by_their_signature(tmp_path, signature, route):
    path = tmp_path / "weights"
    path.write_bytes(signature + bytes(120))
    with pytest.raises(hurray.FormatError, match=f"its first bytes are those of {route}"):
        hurray.load(path)
    (tmp_path / "notes.txt").write_text("not tensors")
    with pytest.raises(hurray.FormatError, match=r"^not a Hurray file \(bad magic\), nor "
                                                 "safetensors, .npy, .npz or GGUF by its first bytes$"):
        hurray.load(tmp_path / "notes.txt")


# ---- the constructors other libraries have (ADR-071) ------------------------------------------


@pytest.mark.parametrize("name, route", [
    ("tensor", r"hurray.array_api.asarray\(data\) copies a list or a scalar into a tensor; "
               r"hurray.from_numpy\(a\) and hurray.from_dlpack\(x\) wrap an array"),
    ("asarray", r"hurray.array_api.asarray\(data\)"),
    ("from_torch", r"hurray.from_dlpack\(x\) takes a PyTorch tensor without copying"),
    ("save_file", r"hurray.save\(path, tensors\) writes them \(the path first"),
    ("load_file", r"hurray.load\(path\)"), ("safe_open", r"hurray.open\(path\)"),
    ("zeros", "the array API namespace has it: hurray.array_api.zeros"),
    ("linspace", "the array API namespace has it: hurray.array_api.linspace")])
def test_top_level_names_of_numpy_pytorch_and_safetensors_name_hurrays(name, route):
    with pytest.raises(AttributeError, match=f"^module 'hurray' has no attribute '{name}': {route}"):
        getattr(hurray, name)
    assert not hasattr(hurray, name) and name not in dir(hurray)


def test_other_missing_top_level_names_stay_plain_attribute_errors():
    for name in ("nonexistent", "_private", "__wrapped__"):
        with pytest.raises(AttributeError, match=f"^module 'hurray' has no attribute '{name}'$"):
            getattr(hurray, name)
    import hurray.array_api as xp  # the submodule imports as before
    assert hurray.array_api is xp


@pytest.mark.parametrize("data", [np.ones(3), [1.0, 2.0], "torch"])
def test_tensor_of_data_alone_names_from_numpy_from_dlpack_and_asarray(data):
    data = peer("torch").ones(3) if isinstance(data, str) else data
    with pytest.raises(TypeError, match=r"Tensor\(data, dtype, shape\) wraps raw memory and needs "
                                        fr"its dtype and shape; for a \S*{type(data).__name__},"
                                        r".*hurray.from_numpy\(a\) and hurray.from_dlpack\(x\).*"
                                        r"hurray.array_api.asarray\(data\)"):
        hurray.Tensor(data)
    import hurray.array_api as xp
    assert xp.asarray(data).tolist() == list(map(float, data))


def test_save_with_safetensors_argument_order_names_the_order(tmp_path):
    tensors = {"w": np.ones(2)}
    with pytest.raises(TypeError, match=r"save\(path, tensors\) takes the path first, not a dict "
                                        r"\(safetensors' save_file takes the tensors first\)"):
        hurray.save(tensors, tmp_path / "w.hurray")
    assert list(tmp_path.iterdir()) == []
    hurray.save(tmp_path / "w.hurray", tensors)


@pytest.mark.parametrize("call, keyword", [(hurray.load, "device"), (hurray.load, "map_location"),
                                           (hurray.open, "framework"), (hurray.open, "device")])
def test_placement_keywords_of_safetensors_and_torch_load_name_to_device(tmp_path, call, keyword):
    path = tmp_path / "w.hurray"
    hurray.save(path, {"w": np.ones(2)})
    with pytest.raises(TypeError, match=fr"{call.__name__}\(\) takes no {keyword}: its tensors are "
                                        r"in CPU memory, for every library .*"
                                        r"t.to_device\(device\) copies one to a device"):
        call(path, **{keyword: "cpu"})
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        call(path, bogus=1)


# ---- float32 values as NumPy shows them (ADR-071) ---------------------------------------------


def _shown(t):
    return ast.literal_eval(repr(t).split(" values=", 1)[1][:-1])


def test_repr_shows_float32_values_in_their_fewest_digits_as_numpy_does():
    values = np.array([0.1, 1 / 3, 1e-30, -0.0, 3.4028235e38, 1.4e-45, 16777217, 2.5], np.float32)
    shown = _shown(hurray.from_numpy(values))
    assert shown == [float(str(v)) for v in values]  # NumPy's shortest digits
    assert repr(hurray.from_numpy(np.array([0.1 + 0.2j], np.complex64))).endswith("[(0.1+0.2j)]>")
    assert repr(hurray.from_numpy(np.array([0.1]))).endswith("values=[0.1]>")  # float64 as ever
    # every float32 reads back exactly from what is shown, and tolist() still gives exact values
    bits = np.random.default_rng(0).integers(0, 2 ** 32, 64, dtype=np.uint64).astype(np.uint32)
    finite = bits.view(np.float32)[np.isfinite(bits.view(np.float32))]
    t = hurray.from_numpy(finite)
    assert np.array_equal(np.array(_shown(t), np.float32).view(np.uint32), finite.view(np.uint32))
    assert t.tolist() == finite.astype(np.float64).tolist()
    assert "nan, inf, -inf" in repr(hurray.from_numpy(np.array([np.nan, np.inf, -np.inf], "f4")))


def test_numpy_scalars_save_as_0d_tensors_python_numbers_are_refused(tmp_path):
    path = tmp_path / "state.hurray"
    state = {"step": np.int64(5), "lr": np.float32(0.1), "flag": np.bool_(True)}
    hurray.save(path, state)
    loaded = hurray.load(path)
    for name, value in state.items():
        assert loaded[name].shape == () and loaded[name].dtype == hurray.dtype(value.dtype)
        assert np.asarray(loaded[name])[()] == value
    with pytest.raises(TypeError, match="tensor 'lr' is a float; expected a hurray.Tensor, a NumPy "
                                        "array or scalar, or a DLPack producer"):
        hurray.save(path, {"lr": 0.1})  # float32 or float64? Python does not say
    with pytest.raises(hurray.UnsupportedError, match="has no Hurray dtype"):
        hurray.save(path, {"name": np.str_("w")})
    assert list(hurray.load(path)) == list(state)  # the refused saves left the file as it was


@pytest.mark.parametrize("name, value, route", [
    ("shape", (2, 3), r"hurray.array_api.reshape\(t, shape\)"),
    ("dtype", hurray.int64, r"hurray.array_api.astype\(t, dtype\) converts the values; "
                            r"hurray.Tensor\(t.bytes_view\(\), dtype, shape\) reads the same bytes")])
def test_assigning_shape_or_dtype_names_the_view_that_has_it(name, value, route):
    t = hurray.from_numpy(np.arange(6.0))
    with pytest.raises(AttributeError, match=f"a hurray.Tensor's {name} is fixed: {route}"):
        setattr(t, name, value)
    assert (t.shape, t.dtype) == ((6,), hurray.float64)
