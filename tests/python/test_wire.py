"""hurray.serve / hurray.connect over loopback with real peers (NumPy, ml_dtypes, PyTorch):
every dtype and layout round trips with its descriptor, faults surface as their exact
exception classes, and only loopback addresses and Unix sockets are ever used."""

import contextlib
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time

import ml_dtypes
import numpy as np
import pytest
import torch

import hurray
from test_native_layouts import LAYOUTS


@pytest.fixture
def server():
    with hurray.serve(uploads=True) as s:
        yield s


def describe(t):
    """Everything a tensor is but its byte offsets and addresses (the wire sends buffers in
    their compact form, as a file does)."""
    return (t.layout, t.dtype, t.shape, t.axis, t.block_size, t.coalesced,
            [(p.dtype, p.shape, p.strides, p.tobytes()) for p in t.parts],
            {name: describe(child) for name, child in t.children.items()})


# ============================================================================================
# Round trips
# ============================================================================================

NUMPY_DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
                np.uint64, np.float16, np.float32, np.float64, np.complex64, np.complex128,
                ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2]


@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=lambda d: np.dtype(d).name)
def test_numpy_dtypes_round_trip_byte_identical(server, dtype):
    a = (np.arange(24) % 7).astype(dtype).reshape(2, 3, 4)
    with hurray.connect(server.address) as c:
        c.put("a", a)
        t = c.get("a")
    back = np.asarray(t)
    assert back.dtype == a.dtype and back.shape == a.shape
    assert back.tobytes() == a.tobytes()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.uint8,
                                   torch.bool, torch.complex64])
def test_torch_tensors_round_trip(server, dtype):
    x = (torch.arange(12) % 5).to(dtype).reshape(3, 4)
    with hurray.connect(server.address) as c:
        c.put("x", x)
        y = torch.from_dlpack(c.get("x"))
    assert y.dtype == x.dtype and torch.equal(y, x)


def test_tier_3_dtypes_keep_their_descriptor(server):
    packed = bytes(range(0, 256, 16))  # 16 bytes: 32 int4 nibbles
    t = hurray.Tensor(packed, hurray.dtype.int4, [4, 8])
    with hurray.connect(server.address) as c:
        c.put("q", t)
        got = c.get("q")
    assert got.dtype is hurray.dtype.int4 and got.shape == (4, 8)
    assert got.tobytes() == packed


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_every_layout_round_trips(layout):
    t = LAYOUTS[layout]()
    with hurray.serve({"t": t}, uploads=True) as s, hurray.connect(s.address) as c:
        got = c.get("t")
        assert describe(got) == describe(t)
        # a received tensor is compact: it crosses again byte for byte
        c.put("again", got)
        again = c.get("again")
    assert describe(again) == describe(got)
    assert [b["byte_size"] for b in again.buffers] == [b["byte_size"] for b in got.buffers]


def test_a_strided_numpy_view_sends_only_its_bytes(server):
    base = np.arange(100, dtype=np.int32)
    view = base[10:50:2]
    with hurray.connect(server.address) as c:
        c.put("v", view)
        t = c.get("v")
    assert np.array_equal(np.asarray(t), view)
    assert t.buffers[0]["byte_size"] == (view.size - 1) * 8 + 4  # its span, not the base


def test_files_are_served_with_metadata_and_rows(tmp_path):
    path = tmp_path / "w.hurray"
    w = np.arange(40, dtype=np.float32).reshape(10, 4)
    hurray.save(path, {"w": w, "b": np.ones(3, np.int8)}, tensor_metadata={"w": {"unit": "m"}})
    with hurray.serve(str(path)) as s, hurray.connect(s.address) as c:
        listed = c.list()
        assert [(e["name"], e["layout"], e["dtype"], e["shape"], e["nbytes"])
                for e in listed] == \
            [("w", "dense", hurray.float32, (10, 4), 160), ("b", "dense", hurray.int8, (3,), 3)]
        assert np.array_equal(np.asarray(c.get("w")), w)
        rows = c.get("w", slice=slice(2, 5))
        assert np.array_equal(np.asarray(rows), w[2:5])
        assert np.array_equal(np.asarray(c.get("w", slice=(7, 10))), w[7:])
        with pytest.raises(hurray.InvalidArgumentError, match=r"rows \[8, 11\) are outside"):
            c.get("w", slice=slice(8, 11))
        with pytest.raises(hurray.InvalidArgumentError, match="the step must be 1"):
            c.get("w", slice=slice(0, 4, 2))
        with pytest.raises(hurray.InvalidArgumentError, match="no tensor named 'nope'"):
            c.get("nope")
        # The server's message for a missing name of 80 "\u20ac" outgrows its 256-byte error
        # and is cut on a character boundary: a KeyError, and the connection goes on.
        with pytest.raises(KeyError, match="no tensor named '\u20ac\u20ac"):
            c.get("\u20ac" * 80)
        assert np.array_equal(np.asarray(c.get("w")), w)
        with pytest.raises(hurray.RequestDeniedError, match="read-only"):
            c.put("x", w)
        assert c.info["read_only"] is True


def test_progress_is_reported_and_its_exception_raised(server):
    big = np.zeros(6 << 20, np.uint8)
    calls = []
    with hurray.connect(server.address) as c:
        c.put("big", big)
        c.get("big", progress=lambda done, total: calls.append((done, total)))
        assert calls[-1] == (big.nbytes, big.nbytes)
        assert [d for d, _ in calls] == sorted(d for d, _ in calls)

        def boom(done, total):
            raise KeyError("stop")
        with pytest.raises(KeyError, match="stop"):
            c.get("big", progress=boom)
        assert np.asarray(c.get("big")).nbytes == big.nbytes  # the client is still fine


def test_a_closed_client_and_names_taken(server):
    c = hurray.connect(server.address)
    c.put("a", np.ones(2))
    with pytest.raises(hurray.InvalidArgumentError, match="already served"):
        c.put("a", np.ones(2))
    c.close()
    c.close()
    assert c.closed
    with pytest.raises(hurray.StateError, match="closed"):
        c.list()


# ============================================================================================
# Devices and the handshake
# ============================================================================================

def test_a_device_without_a_runtime_here(server):
    """A device the client cannot receive on is refused before anything is sent, or, with
    fallback, the tensor is asked for on the CPU (tests/python/test_opencl.py has the server's
    side of the device rule)."""
    with hurray.connect(server.address) as c:
        c.put("x", np.ones(4, np.float32))
        with pytest.raises(hurray.UnsupportedError,
                           match=r"no runtime backend for rocm memory"):
            c.get("x", device="rocm")
        t = c.get("x", device="rocm", fallback=True)
        assert t.device.name == "cpu"
        assert c.list()[0]["name"] == "x"  # the connection went on


SERVER_SCRIPT = textwrap.dedent("""
    import sys, numpy as np, hurray
    with hurray.serve({"x": np.arange(SIZE, dtype=np.uint8)}, uploads=True) as s:
        print(s.address, flush=True)
        sys.stdin.read()
""")


@pytest.fixture
def server_process():
    """A server in another process (its own private-tag registry), serving 64 MiB."""
    script = SERVER_SCRIPT.replace("SIZE", str(64 << 20))
    p = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    try:
        yield p, p.stdout.readline().strip()
    finally:
        p.kill()
        p.wait(timeout=30)


def test_private_tags_at_setup(server_process, server):
    _, address = server_process
    hurray.register_device(0xF3, "npu_x")
    try:
        with pytest.raises(hurray.DescriptorError,
                           match=r"private device tag 0xf3 \('npu_x'\) is not registered here"):
            hurray.connect(address, devices=["cpu", 0xF3])
        # both peers registered it (this process's server shares the registry): set up
        with hurray.connect(server.address, devices=["cpu", 0xF3]) as c:
            assert c.info["devices"][0].name == "cpu"
    finally:
        hurray.unregister_device(0xF3)
    with pytest.raises(hurray.DescriptorError, match="0x42"):
        hurray.connect(server.address, devices=[0x42])


def test_killed_server_mid_transfer(server_process):
    process, address = server_process
    with hurray.connect(address) as c:
        def kill(done, total):
            if done > (8 << 20) and process.poll() is None:
                process.kill()
                process.wait()
        with pytest.raises(hurray.ConnectionLostError, match="closed the connection"):
            c.get("x", progress=kill)
        with pytest.raises(hurray.ConnectionLostError, match="lost by an earlier call"):
            c.list()


# ============================================================================================
# Faults through a proxy: a flipped byte, a cut connection
# ============================================================================================

class Proxy:
    """Forwards 127.0.0.1 connections to `target`; on the first, flips the server's byte at
    `flip_at` or cuts the connection after `cut_at` bytes from the server."""

    def __init__(self, target, flip_at=None, cut_at=None):
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.flip_at, self.cut_at = flip_at, cut_at
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = "127.0.0.1:%d" % self.listener.getsockname()[1]
        self.first = True
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while True:
            try:
                a, _ = self.listener.accept()
            except OSError:
                return
            b = socket.create_connection(self.target)
            first, self.first = self.first, False
            threading.Thread(target=self.pump, args=(a, b, False), daemon=True).start()
            self.pump(b, a, first)

    def pump(self, src, dst, faulty):
        seen = 0
        try:
            while data := src.recv(1 << 16):
                if faulty and self.flip_at is not None and seen <= self.flip_at < seen + len(data):
                    i = self.flip_at - seen
                    data = data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1:]
                if faulty and self.cut_at is not None and seen + len(data) >= self.cut_at:
                    dst.sendall(data[:self.cut_at - seen])
                    break
                seen += len(data)
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self):
        self.listener.close()


def test_a_flipped_byte_is_detected_never_delivered(server):
    data = np.arange(1 << 20, dtype=np.uint8)
    with hurray.connect(server.address) as c:
        c.put("x", data)
    proxy = Proxy(server.address, flip_at=300_000)
    try:
        with hurray.connect(proxy.address) as c:
            with pytest.raises(hurray.ChecksumError,
                               match="tensor 'x' buffer 0: checksum mismatch"):
                c.get("x")
    finally:
        proxy.close()


@pytest.mark.parametrize("retries", [0, 1])
def test_an_interrupted_transfer_resumes(server, retries):
    data = np.random.default_rng(1).integers(0, 255, 5 << 20, dtype=np.uint8)
    with hurray.connect(server.address) as c:
        c.put("x", data)
    proxy = Proxy(server.address, cut_at=2_000_000)
    try:
        with hurray.connect(proxy.address) as c:
            if retries == 0:
                with pytest.raises(hurray.ConnectionLostError):
                    c.get("x")
            else:
                assert np.array_equal(np.asarray(c.get("x", retries=1)), data)
    finally:
        proxy.close()


# ============================================================================================
# Byte ranges: Client.read (spec §6.2, §6.4)
# ============================================================================================

def test_read_byte_ranges_into_bytes_and_caller_memory(server):
    data = np.random.default_rng(2).integers(0, 255, 3 << 20, dtype=np.uint8)
    odd = np.arange(40, dtype=np.int32)[::3]  # its stream: the span its elements address
    coo = LAYOUTS["sparse_coo"]()
    with hurray.connect(server.address) as c:
        c.put("x", data)
        c.put("odd", odd)
        c.put("coo", coo)
        sizes = {e["name"]: e["nbytes"] for e in c.list()}
        assert c.read("x", 1000, 2_000_000) == data[1000:2_000_000].tobytes()
        assert c.read("x", 5, 5) == b""
        assert c.read("odd", 0, sizes["odd"]) == np.arange(40, dtype=np.int32).tobytes()
        # across buffers: the stream is the buffers as served, concatenated
        t = c.get("coo")
        stream = b"".join(p.tobytes() for p in t.parts)
        assert sizes["coo"] == len(stream) and len(t.parts) == 2
        for a in range(0, len(stream) + 1, 5):
            assert c.read("coo", a, len(stream)) == stream[a:]
        buf = bytearray(100)
        assert c.read("x", 7, 107, out=buf) is buf and bytes(buf) == data[7:107].tobytes()
        whole = np.zeros(3 << 20, np.uint8)
        c.read("x", 1 << 20, 2 << 20, out=memoryview(whole)[1 << 20:2 << 20])
        c.read("x", 0, 1 << 20, out=whole[:1 << 20])
        assert np.array_equal(whole[:2 << 20], data[:2 << 20]) and not whole[2 << 20:].any()
        with pytest.raises(hurray.InvalidArgumentError,
                           match=r"bytes \[0, 3145729\) are outside tensor 'x' \(3145728 bytes\)"):
            c.read("x", 0, (3 << 20) + 1)
        with pytest.raises(hurray.InvalidArgumentError, match="need start <= stop"):
            c.read("x", 9, 8)
        with pytest.raises(hurray.InvalidArgumentError, match="out holds 100 bytes, not the 99"):
            c.read("x", 0, 99, out=buf)
        with pytest.raises(hurray.InvalidArgumentError, match="no tensor named 'y'"):
            c.read("y", 0, 1)
        with pytest.raises(BufferError):
            c.read("x", 0, 3, out=b"abc")  # not writable
        with pytest.raises(hurray.InvalidArgumentError, match="start"):
            c.read("x", -1, 3)
        assert c.read("x", 0, 4) == data[:4].tobytes()  # the connection went on


def test_parallel_ranged_reads_into_one_array(server):
    data = np.random.default_rng(3).integers(0, 255, 8 << 20, dtype=np.uint8)
    with hurray.connect(server.address) as c:
        c.put("x", data)
    whole = np.zeros_like(data)
    edges = [0, 1_000_003, 3 << 20, 5_555_555, 8 << 20]

    def part(a, b):
        with hurray.connect(server.address) as c:
            c.read("x", a, b, out=whole[a:b])

    threads = [threading.Thread(target=part, args=(a, b)) for a, b in zip(edges, edges[1:])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert np.array_equal(whole, data)


def test_a_flipped_byte_in_a_range_is_detected(server):
    data = np.arange(1 << 20, dtype=np.uint8)
    with hurray.connect(server.address) as c:
        c.put("x", data)
    proxy = Proxy(server.address, flip_at=300_000)
    try:
        with hurray.connect(proxy.address) as c:
            with pytest.raises(hurray.ChecksumError,
                               match=r"tensor 'x' bytes \[\d+, \d+\): checksum mismatch"):
                c.read("x", 10, 1 << 20)
    finally:
        proxy.close()


@pytest.mark.parametrize("retries", [0, 1])
def test_an_interrupted_range_resumes(server, retries):
    data = np.random.default_rng(4).integers(0, 255, 5 << 20, dtype=np.uint8)
    with hurray.connect(server.address) as c:
        c.put("x", data)
    proxy = Proxy(server.address, cut_at=2_000_000)
    seen = []
    try:
        with hurray.connect(proxy.address) as c:
            if retries == 0:
                with pytest.raises(hurray.ConnectionLostError):
                    c.read("x", 3, 5 << 20)
            else:
                got = c.read("x", 3, 5 << 20, retries=1, progress=lambda d, t: seen.append(t))
                assert got == data[3:].tobytes() and set(seen) == {(5 << 20) - 3}
    finally:
        proxy.close()


# ============================================================================================
# Who gets in
# ============================================================================================

def test_secrets():
    with hurray.serve({"x": np.ones(3)}, secret=b"s3cret") as s:
        with hurray.connect(s.address, secret="s3cret") as c:
            assert c.info["authenticated"] is True
            assert np.asarray(c.get("x")).tolist() == [1.0, 1.0, 1.0]
        with pytest.raises(hurray.AuthenticationError, match="wrong secret"):
            hurray.connect(s.address, secret="guess")
        with pytest.raises(hurray.AuthenticationError, match="none was given"):
            hurray.connect(s.address)
    with hurray.serve() as s:
        with pytest.raises(hurray.AuthenticationError, match="does not authenticate"):
            hurray.connect(s.address, secret="s3cret")


def test_safe_defaults_beyond_loopback_and_uploads():
    """ADR-092: an address beyond loopback needs a secret or insecure=True; uploads need
    uploads=True."""
    for address in ("0.0.0.0:0", "[::]:0"):
        with pytest.raises(hurray.InvalidArgumentError,
                           match="is reachable beyond this host and the server has no secret"):
            hurray.serve(address=address)
        with hurray.serve({"x": np.ones(2)}, address=address, insecure=True) as s:
            port = s.address.rsplit(":", 1)[1]
            with hurray.connect(f"localhost:{port}") as c:
                assert np.asarray(c.get("x")).tolist() == [1.0, 1.0]
        with hurray.serve(address=address, secret="s3cret"):
            pass
    with hurray.serve({"x": np.ones(2)}) as s, hurray.connect(s.address) as c:
        assert c.info["read_only"] is True
        with pytest.raises(hurray.RequestDeniedError, match="this server is read-only"):
            c.put("y", np.ones(2))
        assert [e["name"] for e in c.list()] == ["x"]
    with hurray.serve(uploads=True) as s, hurray.connect(s.address) as c:
        assert c.info["read_only"] is False
        c.put("y", np.ones(2))
        assert np.asarray(c.get("y")).tolist() == [1.0, 1.0]


def test_every_format_the_loader_reads_is_served(tmp_path):
    """ADR-092: a sharded checkpoint (directory or index), safetensors, .npy and .npz files are
    served as the loader reads them."""
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    rng = np.random.default_rng(5)
    tensors = {f"layer{i}": rng.standard_normal((64, 32)).astype(np.float32) for i in range(6)}
    hurray.save(tmp_path / "ckpt", tensors, max_shard_size=20000)
    index = next((tmp_path / "ckpt").glob("*.index.json"))
    safetensors_numpy.save_file({"w": tensors["layer1"]}, str(tmp_path / "w.safetensors"))
    np.save(tmp_path / "v.npy", tensors["layer2"])
    np.savez(tmp_path / "z.npz", z=tensors["layer3"])
    for path in (tmp_path / "ckpt", index):
        with hurray.serve(str(path)) as s, hurray.connect(s.address) as c:
            assert sorted(e["name"] for e in c.list()) == sorted(tensors)
            for name, want in tensors.items():
                assert np.array_equal(np.asarray(c.get(name)), want)
            assert np.array_equal(np.asarray(c.get("layer5", slice=slice(3, 9))),
                                  tensors["layer5"][3:9])
    paths = [str(tmp_path / n) for n in ("w.safetensors", "v.npy", "z.npz")]
    with hurray.serve(paths) as s, hurray.connect(s.address) as c:
        assert sorted(e["name"] for e in c.list()) == ["v", "w", "z"]
        assert np.array_equal(np.asarray(c.get("w")), tensors["layer1"])
        assert np.array_equal(np.asarray(c.get("v")), tensors["layer2"])
        assert np.array_equal(np.asarray(c.get("z")), tensors["layer3"])
        assert c.read("z", 8, 16) == tensors["layer3"].tobytes()[8:16]
    (tmp_path / "junk.bin").write_bytes(b"neither")
    with pytest.raises(hurray.FormatError, match="nor safetensors, .npy, .npz or GGUF"):
        hurray.serve(str(tmp_path / "junk.bin"))


def test_loopback_by_default_unix_sockets_and_bad_addresses(tmp_path):
    with hurray.serve() as s:
        assert s.address.startswith("127.0.0.1:")
    path = tmp_path / "h.sock"
    with hurray.serve({"x": np.arange(5)}, address=f"unix:{path}") as s:
        assert s.address == f"unix:{path}"
        with hurray.connect(s.address) as c:
            assert np.asarray(c.get("x")).tolist() == [0, 1, 2, 3, 4]
    assert not os.path.exists(path)
    with pytest.raises(hurray.InvalidArgumentError,
                       match="neither a numeric IPv4/IPv6 address nor a host name"):
        hurray.serve(address="bad_name:80")
    with pytest.raises(hurray.ConnectionLostError, match="cannot resolve the host name"):
        hurray.connect("nonexistent-host.invalid:7700")
    with pytest.raises(hurray.ConnectionLostError, match="cannot connect"):
        hurray.connect(f"unix:{tmp_path / 'nobody'}")


def test_host_names_go_through_the_resolver():
    # a server bound by name gets the numeric address it bound; a client by name reaches it
    with hurray.serve({"x": np.arange(3)}, address="localhost:0") as s:
        host, port = s.address.rsplit(":", 1)
        assert host in ("127.0.0.1", "[::1]")
        with hurray.connect(f"localhost:{port}", timeout=5) as c:
            assert np.asarray(c.get("x")).tolist() == [0, 1, 2]


SILENT_DNS = """
import socket, time, hurray
dns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
dns.bind(("127.0.0.1", 53))  # the only nameserver: it takes every query and answers none
start = time.monotonic()
try:
    hurray.connect("nosuch.hurray-test:7700", timeout={timeout})
except hurray.HurrayError as e:
    print(type(e).__name__, e)
print("elapsed", time.monotonic() - start)
"""


def test_the_resolver_is_bounded_by_the_timeout(tmp_path):
    """Issue 24 item 1 (ADR-092): a name whose nameserver never answers kept connect waiting
    for the system resolver's own timeouts (10 s here, whatever timeout= said); the lookup is
    now given up at the call's deadline. Run in a user, mount and network namespace whose
    resolv.conf names a nameserver on loopback that reads every query and answers none."""
    probe = subprocess.run(["unshare", "-rmn", "sh", "-c", "ip link set lo up"],
                           capture_output=True)
    if probe.returncode != 0:
        pytest.skip("no user, mount and network namespaces here")
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 127.0.0.1\n")
    script = ('ip link set lo up && mount --bind "$1" /etc/resolv.conf && '
              'exec "$2" -c "$3"')
    done = subprocess.run(["unshare", "-rmn", "sh", "-c", script, "sh", str(resolv),
                           sys.executable, SILENT_DNS.format(timeout=1)],
                          capture_output=True, text=True, timeout=60)
    out = done.stdout + done.stderr
    assert "TimedOutError resolving the host name 'nosuch.hurray-test' took longer than " \
           "1000 ms" in out, out
    assert float(out.split("elapsed")[1]) < 2.5, out


def wait_transfers(server, n):
    """The server's stats once it has counted `n` answers sent (the client may hold its tensor
    before the server's loop has counted the frame that carried it)."""
    for _ in range(500):
        stats = server.stats()
        if stats["transfers"] >= n:
            return stats
        time.sleep(0.01)
    raise AssertionError(f"{stats['transfers']} transfers, not {n}")


def test_server_stats_and_stop(server):
    with hurray.connect(server.address) as c:
        c.put("x", np.arange(1000, dtype=np.uint8))
        c.get("x")
        c.read("x", 10, 20)
    stats = wait_transfers(server, 2)
    assert (stats["transfers"], stats["sent_bytes"], stats["passed_bytes"]) == (2, 1010, 0)
    clients = [hurray.connect(server.address) for _ in range(20)]
    assert server.stats()["connections"] == 20
    for c in clients:
        c.close()
    server.stop()
    assert not server.running
    with pytest.raises(hurray.StateError, match="stopped"):
        server.stats()


# ============================================================================================
# TLS (hurrays://): certificates made at test time by tests/tls/make_certs.sh
# ============================================================================================

MAKE_CERTS = os.path.join(os.path.dirname(__file__), os.pardir, "tls", "make_certs.sh")


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("certs")
    subprocess.run(["sh", MAKE_CERTS, str(d)], check=True)
    return d


@pytest.fixture
def tls_server(certs):
    tls = {"certfile": certs / "server.pem", "keyfile": str(certs / "server.key")}
    data = {"x": np.arange(3 << 20, dtype=np.uint8), "w": torch.randn(64, 32)}
    with hurray.serve(data, secret="s3cret", tls=tls, uploads=True) as s:
        yield s, data


def test_tls_round_trip_and_the_secret_inside_it(tls_server, certs):
    server, data = tls_server
    assert server.address.startswith("hurrays://127.0.0.1:")  # loopback unless told otherwise
    trust = {"cafile": certs / "ca.pem"}
    with hurray.connect(server.address, tls=trust, secret="s3cret") as c:
        assert c.info["authenticated"] is True
        assert np.array_equal(np.asarray(c.get("x")), data["x"])
        assert torch.equal(torch.from_dlpack(c.get("w")), data["w"])
        up = ml_dtypes.bfloat16(np.linspace(-1, 1, 1000)).astype(ml_dtypes.bfloat16)
        c.put("up", up)
        got = np.asarray(c.get("up"))
        assert got.dtype == up.dtype and got.tobytes() == up.tobytes()
    port = server.address.rsplit(":", 1)[1]
    with hurray.connect(f"hurrays://localhost:{port}", tls=trust, secret="s3cret") as c:
        assert sorted(t["name"] for t in c.list()) == ["up", "w", "x"]
    with pytest.raises(hurray.AuthenticationError, match="wrong secret"):
        hurray.connect(server.address, tls=trust, secret="guess")


def test_tls_peer_python_ssl_speaks_to_the_server(tls_server, certs):
    """Python's ssl module, verifying the server as any TLS client would, sends the spec's
    golden CLIENT_HELLO (§9.1) and gets a SERVER_HELLO back."""
    import ssl
    server, _ = tls_server
    host, port = server.address[len("hurrays://"):].rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    assert context.verify_mode == ssl.CERT_REQUIRED
    hello = bytes.fromhex("89485257010000000000000000000000" "3a00000000000000"
                          "01000000000000000000400000000000") + bytes(32) + \
        bytes.fromhex("0100000000000000" "0000")
    with socket.create_connection((host, int(port))) as raw, \
            context.wrap_socket(raw, server_hostname="localhost") as s:
        assert s.version() == "TLSv1.3"
        s.sendall(hello)
        head = s.recv(24)
        assert head[:5] == b"\x89HRW\x02"


def test_tls_refuses_an_untrusted_certificate(tls_server, certs):
    server, _ = tls_server
    with pytest.raises(hurray.AuthenticationError,
                       match="certificate is refused: unable to get local issuer certificate"):
        hurray.connect(server.address, tls={"cafile": certs / "other-ca.pem"}, secret="s3cret")
    with pytest.raises(hurray.AuthenticationError, match="unable to get local issuer"):
        hurray.connect(server.address, secret="s3cret")  # the system's store
    with pytest.raises(hurray.AuthenticationError, match="certificate is refused: hostname mismatch"):
        hurray.connect(server.address, tls={"cafile": certs / "ca.pem",
                                            "server_name": "tensors.example.com"})


def test_tls_and_plaintext_do_not_mix(tls_server, certs):
    server, _ = tls_server
    plain = server.address[len("hurrays://"):]
    with pytest.raises(hurray.WireError, match="this server speaks TLS only: connect with hurrays://"):
        hurray.connect(plain, secret="s3cret")
    with pytest.raises(hurray.InvalidArgumentError, match="use hurrays://"):
        hurray.connect(plain, tls={"cafile": certs / "ca.pem"})
    with hurray.serve() as s:
        with pytest.raises(hurray.WireError, match="does not speak TLS"):
            hurray.connect("hurrays://" + s.address, tls={"cafile": certs / "ca.pem"})


def test_tls_arguments(certs):
    with pytest.raises(hurray.InvalidArgumentError, match="needs both 'certfile' and 'keyfile'"):
        hurray.serve(tls={"certfile": certs / "server.pem"})
    with pytest.raises(hurray.InvalidArgumentError, match="takes 'cafile' and 'server_name'"):
        hurray.connect("hurrays://127.0.0.1:1", tls={"certfile": "x"})
    with pytest.raises(TypeError, match="tls must be a dict"):
        hurray.serve(tls=str(certs / "server.pem"))
    with pytest.raises(hurray.InputOutputError, match="nonesuch.pem"):
        hurray.serve(tls={"certfile": certs / "nonesuch.pem", "keyfile": certs / "server.key"})
    with pytest.raises(hurray.InvalidArgumentError, match="does not match"):
        hurray.serve(tls={"certfile": certs / "server.pem", "keyfile": certs / "other-ca.key"})


# ============================================================================================
# The same-host fast path: tensors handed over as file descriptors (spec §6.6, ADR-060)
# ============================================================================================

def mapped(name):
    """The lines of /proc/self/maps whose file is `name` (this process's mappings)."""
    with open("/proc/self/maps") as f:
        return [line for line in f if line.rstrip().endswith(name)]


def test_unix_socket_tensors_come_as_mapped_descriptors(tmp_path):
    a = np.arange(1 << 18, dtype=np.float32).reshape(512, 512)
    odd = np.arange(30, dtype=np.int16)[::3]  # not compact: sent in its compact form
    with hurray.serve({"a": a, "odd": odd, "empty": np.zeros((0, 3))},
                      address=f"unix:{tmp_path / 's'}") as s, hurray.connect(s.address) as c:
        assert c.info["fd_passing"] is True
        t = c.get("a")
        assert len(mapped("/memfd:hurray:a (deleted)")) == 1  # the memfd, mapped: no copy
        got = np.asarray(t)
        assert np.array_equal(got, a) and describe(t) == describe(hurray.from_numpy(a))
        got[0, 0] = -1  # copy-on-write: the client's page, never the server's bytes
        assert np.asarray(c.get("a"))[0, 0] == 0
        assert np.asarray(c.get("odd")).tolist() == odd.tolist()
        assert np.asarray(c.get("empty")).shape == (0, 3)
        assert np.array_equal(np.asarray(c.get("a", slice=(3, 5))), a[3:5])  # rows: DATA
        # the statistics count what went as a descriptor by its buffer's size; a tensor under
        # 512 KiB goes as DATA, which costs it fewer system calls than a descriptor
        stats = wait_transfers(s, 5)
        assert stats["passed_bytes"] == 2 * a.nbytes
        assert stats["sent_bytes"] == 2 * 512 * 4 + 28 * 2  # rows, and the span of odd's elements
    assert np.asarray(t)[1, 0] == 512  # the mapping outlives the client and the server
    del t, got
    assert mapped("/memfd:hurray:a (deleted)") == []


def test_a_served_file_is_mapped_and_survives_its_replacement(tmp_path):
    path = tmp_path / "w.hurray"
    w = np.arange(1 << 16, dtype=np.float64).reshape(256, 256)  # 512 KiB: passed as the file
    hurray.save(path, {"w": w})
    with hurray.serve(str(path), address=f"unix:{tmp_path / 's'}") as s, \
            hurray.connect(s.address) as c:
        before = len(mapped(str(path)))
        t = c.get("w")
        assert len(mapped(str(path))) == before + 1
        hurray.save(path, {"w": -w})  # a new inode by rename: the old one stays mapped
        assert np.array_equal(np.asarray(t), w)


def test_small_tensors_come_as_data_even_with_fd_passing(tmp_path):
    small, large = np.arange(1000, dtype=np.float32), np.zeros(1 << 17, np.float32)
    with hurray.serve({"small": small, "large": large}, address=f"unix:{tmp_path / 's'}") as s, \
            hurray.connect(s.address) as c:
        assert c.info["fd_passing"] is True
        assert np.array_equal(np.asarray(c.get("small")), small)
        assert mapped("/memfd:hurray:small (deleted)") == []
        assert np.array_equal(np.asarray(c.get("large")), large)  # 512 KiB: a descriptor
        stats = wait_transfers(s, 2)
        assert (stats["sent_bytes"], stats["passed_bytes"]) == (small.nbytes, large.nbytes)


def test_fd_passing_is_negotiated(tmp_path):
    x = np.arange(10, dtype=np.uint8)
    with hurray.serve({"x": x}) as s, hurray.connect(s.address) as c:
        assert c.info["fd_passing"] is False  # TCP: never
    with hurray.serve({"x": x}, address=f"unix:{tmp_path / 'a'}") as s:
        with hurray.connect(s.address, fd_passing=False) as c:
            assert c.info["fd_passing"] is False
            assert np.asarray(c.get("x")).tolist() == x.tolist()
    with hurray.serve({"x": x}, address=f"unix:{tmp_path / 'b'}", fd_passing=False) as s:
        with hurray.connect(s.address) as c:
            assert c.info["fd_passing"] is False
            assert np.asarray(c.get("x")).tolist() == x.tolist()


@pytest.mark.parametrize("size", [1 << 16, 12 << 20])  # 12 MiB: hashed on a helper thread
def test_a_changed_file_is_caught_by_its_checksum(tmp_path, size):
    path = tmp_path / "w.hurray"
    hurray.save(path, {"w": np.full(size, 7, np.uint8)})
    offset = path.read_bytes().index(bytes([7]) * size)
    with hurray.serve(str(path), address=f"unix:{tmp_path / 's'}") as s, \
            hurray.connect(s.address) as c:
        with open(path, "r+b") as f:  # written in place, behind the server's back
            f.seek(offset + size - 1000)
            f.write(b"\x01")
        with pytest.raises(hurray.ChecksumError, match="tensor 'w' buffer 0: checksum mismatch"):
            c.get("w")


# A server of our own that answers a request for "x" with the TENSOR_HEADER of spec §9.5 and a
# DATA_FD frame, to show what a client checks of the descriptor it is handed.
GOLDEN_HEADER = bytes.fromhex(
    "00000000010000000800000000000000 00000000000000004800000000000000"
    "00000006000000000800000000000000 b7f434718fd7e84d0000000000000000"
    "01000000000000007800000000000000 000a010100000000000000000000000"
    "0 00000000000000000200000000000000 0a010000000000000000000000000000"
    "0200000000000000".replace(" ", ""))
X = np.float32([1.0, 2.0]).tobytes()


def frame(kind, flags, request_id, payload):
    return (b"\x89HRW" + bytes([kind, flags, 0, 0]) + request_id.to_bytes(8, "little") +
            len(payload).to_bytes(8, "little") + payload)


def read_frame(conn):
    head = b""
    while len(head) < 24:
        head += conn.recv(24 - len(head))
    payload, n = b"", int.from_bytes(head[16:], "little")
    while len(payload) < n:
        payload += conn.recv(n - len(payload))
    return head, payload


def hand_over(tmp_path, fd, kind, offset, length=8, fds=True, stray=None):
    """Serves one DATA_FD frame naming bytes [offset, offset + length) of `fd`; returns what
    a client's get("x") gives or raises. `stray` sends one more descriptor (of /dev/null) with
    the first byte of the TENSOR_HEADER frame ("header"), with a byte of its payload
    ("payload"), with the DATA_FD frame beside its own ("second"), or with a DATA frame that
    carries the buffer's bytes (X) in the DATA_FD frame's place ("data")."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(tmp_path / "fake.sock"))
    listener.listen(1)

    def serve():
        conn, _ = listener.accept()
        with conn:
            read_frame(conn)  # CLIENT_HELLO
            hello = (b"\x01\x00\x00\x00" + (4).to_bytes(4, "little") +
                     (4 << 20).to_bytes(8, "little") + bytes(32) + b"\x01" + bytes(7) + b"\x00\x00")
            conn.sendall(frame(0x02, 0, 0, hello))
            head, _ = read_frame(conn)  # TENSOR_REQUEST
            rid = int.from_bytes(head[8:16], "little")
            header = frame(0x21, 0, rid, GOLDEN_HEADER)
            null = os.open(os.devnull, os.O_RDONLY)
            try:
                if stray == "header":
                    socket.send_fds(conn, [header], [null])
                elif stray == "payload":
                    conn.sendall(header[:30])
                    socket.send_fds(conn, [header[30:]], [null])
                else:
                    conn.sendall(header)
                ref = (bytes(4) + bytes([kind]) + bytes(3) + offset.to_bytes(8, "little") +
                       length.to_bytes(8, "little"))
                data = frame(0x23, 1, rid, ref)
                if stray == "data":
                    socket.send_fds(conn, [frame(0x22, 1, rid, bytes(16) + X)], [null])
                elif fds:
                    socket.send_fds(conn, [data], [fd, null] if stray == "second" else [fd])
            finally:
                os.close(null)
            if not fds:
                conn.sendall(data)
            with contextlib.suppress(ConnectionResetError):  # a client that failed the session
                conn.recv(1)

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with hurray.connect(f"unix:{tmp_path / 'fake.sock'}", timeout=5) as c:
            return np.asarray(c.get("x")).tolist()
    finally:
        thread.join()
        listener.close()
        os.unlink(tmp_path / "fake.sock")
        os.close(fd)


def memfd(data, seals=True):
    import fcntl
    fd = os.memfd_create("x", os.MFD_ALLOW_SEALING)
    os.write(fd, data)
    if seals:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS,
                    fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
    return fd


def test_a_client_checks_the_descriptor_it_is_handed(tmp_path):
    assert hand_over(tmp_path, memfd(X), 1, 0) == [1.0, 2.0]
    path = tmp_path / "bytes"
    path.write_bytes(bytes(64) + X)
    assert hand_over(tmp_path, os.open(path, os.O_RDONLY), 0, 64) == [1.0, 2.0]
    with pytest.raises(hurray.WireError, match="not sealed against writing, shrinking and growing"):
        hand_over(tmp_path, memfd(X, seals=False), 1, 0)
    with pytest.raises(hurray.WireError, match=r"bytes \[64, 72\) are past the end of the 8"):
        hand_over(tmp_path, memfd(X), 1, 64)
    with pytest.raises(hurray.WireError, match="does not give its 64-byte alignment"):
        hand_over(tmp_path, os.open(path, os.O_RDONLY), 0, 8)
    r, w = os.pipe()
    os.close(w)
    with pytest.raises(hurray.WireError, match="is not a regular file"):
        hand_over(tmp_path, r, 1, 0)
    with pytest.raises(hurray.WireError, match="is not the whole next buffer"):
        hand_over(tmp_path, memfd(X), 1, 0, length=4)
    with pytest.raises(hurray.WireError, match="came without a descriptor"):
        hand_over(tmp_path, memfd(X), 1, 0, fds=False)
    with pytest.raises(hurray.ChecksumError, match="buffer 0: checksum mismatch"):
        hand_over(tmp_path, memfd(np.float32([1.0, 3.0]).tobytes()), 1, 0)


def test_a_descriptor_comes_only_with_a_data_fd_frame_and_never_stays(tmp_path):
    """§6.6: one descriptor, with a DATA_FD frame's first byte. One with the first byte of a
    frame that could have been a DATA_FD (where a buffer starts), or a second one, fails the
    session; one with any other byte (received without a control buffer: a later byte of a
    frame, the header of a frame no DATA_FD can take the place of) is closed by the kernel.
    None of them stays open here."""
    def open_fds():
        return len(os.listdir("/proc/self/fd"))

    before = open_fds()
    with pytest.raises(hurray.WireError, match="a file descriptor came with a DATA frame"):
        hand_over(tmp_path, memfd(X), 1, 0, stray="data")
    with pytest.raises(hurray.WireError, match="sent a file descriptor where none may come"):
        hand_over(tmp_path, memfd(X), 1, 0, stray="second")
    assert hand_over(tmp_path, memfd(X), 1, 0, stray="header") == [1.0, 2.0]
    assert hand_over(tmp_path, memfd(X), 1, 0, stray="payload") == [1.0, 2.0]
    assert open_fds() == before


def test_the_cli_escapes_what_a_server_sends(tmp_path):
    """`hurray ls` prints server-chosen names and `hurray fetch` the server's error messages:
    terminal escapes in them arrive as \\u001b, as `hurray info` prints a file's names."""
    import shutil
    cli = shutil.which("hurray")
    if cli is None:
        pytest.skip("the hurray command is not on PATH")
    with hurray.serve({"red\x1b[31mtext\x9b": np.float32([1])}) as server:
        ls = subprocess.run([cli, "ls", server.address], capture_output=True, text=True)
        fetch = subprocess.run([cli, "fetch", server.address, "\x1b[2Jgone"], capture_output=True,
                               text=True, cwd=tmp_path)
    assert ls.returncode == 0, ls.stderr
    assert "red\\u001b[31mtext\\u009b  dense float32 [1]" in ls.stdout
    assert fetch.returncode == 2
    assert "\\u001b[2Jgone" in fetch.stderr and "\x1b" not in fetch.stderr
    assert "\x1b" not in ls.stdout and "\x9b" not in ls.stdout
