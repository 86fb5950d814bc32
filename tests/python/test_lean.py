"""The extension needs nothing beyond libc at load time (ADR-073).

hurray-python links hurray-core statically; zlib (deflated .npz members) and OpenSSL 3
(hurrays://) are loaded at run time on first use, so the extension module names neither among
its NEEDED libraries, and a process that only exchanges tensors never maps them. Where one
cannot be loaded, the call that needs it raises UnsupportedError naming the library.
"""
import os
import shutil
import subprocess
import sys

import pytest

import hurray
from conftest import run_isolated

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ELF and ld.so")

OPTIONAL = ("libssl", "libcrypto", "libz.so")


def _needed(path):
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True)
    return [line.split("[", 1)[1].rstrip("]") for line in out.stdout.splitlines()
            if "(NEEDED)" in line]


@pytest.mark.skipif(shutil.which("readelf") is None, reason="needs readelf")
def test_the_extension_needs_no_zlib_or_openssl():
    needed = _needed(hurray._hurray.__file__)
    assert not [so for so in needed if so.startswith(OPTIONAL)], needed


def test_exchanging_tensors_maps_neither():
    out = run_isolated("""
import numpy as np, hurray, tempfile, os
t = hurray.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3))
with tempfile.TemporaryDirectory() as d:
    hurray.save(os.path.join(d, "t.hurray"), {"t": t})
    back = hurray.load(os.path.join(d, "t.hurray"))
    assert np.array_equal(np.asarray(back["t"]), np.asarray(t))
    with hurray.serve({"t": t}) as s, hurray.connect(s.address) as c:
        assert np.array_equal(np.asarray(c.get("t")), np.asarray(t))
with open("/proc/self/maps") as f:
    print(sorted({line.split()[-1] for line in f if "libssl" in line or "libcrypto" in line}))
""")
    assert out.strip() == "[]", out


def _broken(directory, *names):
    for name in names:
        (directory / name).write_bytes(b"not a library\n")
    env = dict(os.environ, LD_LIBRARY_PATH=str(directory))
    return env


def test_tls_without_libssl_names_it(tmp_path):
    env = _broken(tmp_path, "libssl.so.3")
    code = """
import hurray
try:
    hurray.connect("hurrays://127.0.0.1:9")
except hurray.UnsupportedError as e:
    print(e)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert (f"hurrays:// needs libssl.so.3, which could not be loaded: {tmp_path}/libssl.so.3"
            in out.stdout), out.stdout
