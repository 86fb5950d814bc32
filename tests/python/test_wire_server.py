"""Abuse of a running server (issue 20), each against a server in a child process whose memory,
CPU time and descriptor limit are its own: what it holds for clients that send before their
hello, that ask for LISTs and never read them, or that upload without end; how it refuses
clients it has no descriptor for; and where its idle-timeout ERROR goes in a stalled answer.
The child's resident set is read from /proc/PID/status, its CPU time from /proc/PID/stat."""

import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import hurray
from conftest import SANITIZED
from spec_wire import (DATA, ERROR, HEADER, LIST, MAGIC, TENSOR_HEADER, TENSOR_REQUEST, Client,
                       frame, tensor_request)

MIB = 1 << 20


class ServerProcess:
    """A server in another interpreter: `setup` (Python) makes `server`; its address is read
    from the child's first line, and the child lives until closed."""

    def __init__(self, setup):
        script = textwrap.dedent("""
            import resource, sys, numpy as np, hurray
            {setup}
            print(server.address, flush=True)
            sys.stdin.read()
        """).format(setup=textwrap.dedent(setup).strip())
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.dirname(__file__),
                                                          env.get("PYTHONPATH")]))
        self.process = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, env=env)
        self.address = self.process.stdout.readline().strip()
        assert self.address, "the server process did not start"

    def rss(self):
        """The child's resident set in bytes (VmRSS)."""
        with open(f"/proc/{self.process.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")

    def peak_rss_while(self, threads):
        """Starts `threads` and samples the child's RSS every 5 ms until they end: the peak."""
        for t in threads:
            t.start()
        peak = self.rss()
        while any(t.is_alive() for t in threads):
            peak = max(peak, self.rss())
            time.sleep(0.005)
        for t in threads:
            t.join()
        return max(peak, self.rss())

    def cpu_seconds(self):
        """User + system CPU time of every thread of the child so far."""
        with open(f"/proc/{self.process.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def close(self):
        """Ends the child, asserting it was not killed by a signal before that."""
        assert self.process.poll() is None, f"the server died ({self.process.returncode})"
        self.process.stdin.close()
        self.process.wait(timeout=30)
        assert self.process.returncode == 0, f"the server exited {self.process.returncode}"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.process.poll() is None and exc[0] is not None:
            self.process.kill()
            self.process.wait(timeout=30)
        elif exc[0] is None:
            self.close()


def connect_raw(address):
    host, port = address.rsplit(":", 1)
    s = socket.create_connection((host, int(port)))
    s.settimeout(10)
    return s


def read_frames(sock):
    """Every frame until the server closes: (type, request_id, payload)."""
    data = bytearray()
    while True:
        try:
            chunk = sock.recv(1 << 20)
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    frames, at = [], 0
    while at < len(data):
        magic, type_, _, _, rid, length = HEADER.unpack_from(data, at)
        assert magic == MAGIC, f"not a frame at byte {at}"
        assert at + 24 + length <= len(data), f"frame at byte {at} cut short"
        frames.append((type_, rid, bytes(data[at + 24:at + 24 + length])))
        at += 24 + length
    return frames


def error_code(payload):
    return struct.unpack_from("<I", payload)[0]


# ---- item 5: memory before authentication --------------------------------------------------

def test_pre_auth_payloads_are_not_buffered():
    """Eight clients each claim a 64 MiB TENSOR_HEADER before their hello and send it: the
    server refuses each from its header (before: it buffered every payload, 512 MiB)."""
    with ServerProcess("server = hurray.serve({'x': np.zeros(4, np.uint8)}, secret='s3cret')"
                       ) as server:
        before = server.rss()
        payload = bytes(64 * MIB)
        head = HEADER.pack(MAGIC, TENSOR_HEADER, 0, 0, 0, len(payload))
        socks = [connect_raw(server.address) for _ in range(8)]

        def flood(s):
            try:
                s.sendall(head + payload)
            except OSError:
                pass  # refused and closed: the rest is not read
        threads = [threading.Thread(target=flood, args=(s,)) for s in socks]
        peak = server.peak_rss_while(threads)
        for s in socks:
            frames = read_frames(s)
            s.close()
            assert frames and frames[0][0] == ERROR and error_code(frames[0][2]) == 18
        assert peak - before < 32 * MIB, f"RSS grew {(peak - before) / MIB:.0f} MiB"


# ---- item 6: LIST answers streamed, uploads bounded ----------------------------------------

def test_unread_lists_hold_no_answer():
    """40 clients each ask for the LIST of 20,000 tensors (4.6 MB of answer) and never read:
    the answers are built a frame at a time as the socket takes them (before: built whole,
    185 MB held)."""
    setup = """
        server = hurray.serve({f"{i:06d}" + "n" * 194: np.zeros(1, np.uint8)
                               for i in range(20000)})
    """
    with ServerProcess(setup) as server:
        before = server.rss()
        clients = []
        for _ in range(40):
            c = Client(server.address)
            c.send(frame(LIST, c.request_id()))
            clients.append(c)
        time.sleep(1.0)
        grown = server.rss() - before
        for c in clients:
            c.sock.close()
        if not SANITIZED:  # ASan's quarantine holds 256 MiB of freed memory on purpose
            assert grown < 24 * MIB, f"RSS grew {grown / MIB:.0f} MiB"
        with Client(server.address) as c:  # a client that reads gets every entry, in order
            entries = c.list()
        assert [e["name"][:6] for e in entries] == [f"{i:06d}" for i in range(20000)]


def test_uploads_are_bounded_server_wide():
    """Fifty clients upload 4 MiB each against a 64 MiB server-wide cap: the uploads that fit
    are served, the rest refused with LimitError naming the cap, and the server's RSS stays
    within the cap (before: no cap at all)."""
    setup = "server = hurray.serve(max_upload_total_bytes=64 << 20, uploads=True)"
    with ServerProcess(setup) as server:
        before = server.rss()
        outcome = []

        def upload(i):
            with hurray.connect(server.address) as c:
                try:
                    c.put(f"t{i}", np.full(4 * MIB, i, np.uint8))
                    outcome.append("ok")
                except hurray.LimitError as e:
                    assert "max_upload_total_bytes" in str(e)
                    outcome.append("refused")
        threads = [threading.Thread(target=upload, args=(i,)) for i in range(50)]
        grown = server.peak_rss_while(threads) - before
        print(f"50 concurrent 4 MiB uploads, 64 MiB cap: server RSS grew {grown / MIB:.1f} MiB")
        assert 1 <= outcome.count("ok") <= 16 and outcome.count("refused") >= 34, outcome
        assert grown < 64 * MIB + 24 * MIB, f"RSS grew {grown / MIB:.0f} MiB"
        with hurray.connect(server.address) as c:
            assert len(c.list()) == outcome.count("ok")


def test_serve_validates_the_upload_cap():
    with pytest.raises(hurray.InvalidArgumentError, match="max_upload_total_bytes"):
        hurray.serve(max_upload_total_bytes=-1)
    with pytest.raises(TypeError, match="max_upload_total_bytes"):
        hurray.serve(max_upload_total_bytes="64 MiB")


# ---- item 12: a descriptor limit below max_connections -------------------------------------

def test_out_of_descriptors_refuses_and_does_not_spin():
    """With 64 descriptors and max_connections 1024, 100 clients connect: those the server has
    no descriptor for are answered HURRAY_EDENIED and closed, and the loop does not spin
    (before: 100% CPU, and the waiting clients got nothing)."""
    setup = """
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        import os
        used = len(os.listdir("/proc/self/fd"))
        resource.setrlimit(resource.RLIMIT_NOFILE, (used + 40, hard))
        server = hurray.serve({"x": np.arange(8, dtype=np.uint8)}, handshake_timeout=60)
    """
    with ServerProcess(setup) as server:
        socks = [connect_raw(server.address) for _ in range(100)]
        time.sleep(0.5)
        cpu = server.cpu_seconds()
        time.sleep(1.5)
        spent = server.cpu_seconds() - cpu
        refused = 0
        for s in socks:
            s.settimeout(0.2)
            try:
                head = s.recv(24, socket.MSG_PEEK)
            except (socket.timeout, ConnectionResetError):
                continue
            if len(head) == 24 and head[4] == ERROR:
                s.settimeout(5)
                frames = read_frames(s)
                assert error_code(frames[0][2]) == 20  # HURRAY_EDENIED
                assert b"file descriptor" in frames[0][2]
                refused += 1
        for s in socks:
            s.close()
        assert spent < 0.5, f"the server spent {spent:.2f} s of CPU in 1.5 s while idle"
        assert refused >= 50, f"{refused} of 100 clients were refused"
        for _ in range(50):  # once descriptors are free again, clients are served
            try:
                with hurray.connect(server.address) as c:
                    assert c.get("x").tolist() == list(range(8))
                break
            except hurray.RequestDeniedError:
                time.sleep(0.1)
        else:
            raise AssertionError("the server never served again")


# ---- item 14: the idle-timeout ERROR and a half-sent DATA frame ----------------------------

def test_idle_timeout_error_never_inside_a_data_frame():
    """A client stops reading in the middle of a 4 MiB DATA frame: the idle timeout ends the
    connection with ERROR only after that frame's last byte (before: the ERROR's bytes went
    into the middle of the frame)."""
    setup = "server = hurray.serve({'x': np.zeros(64 << 20, np.uint8)}, idle_timeout=0.3)"
    with ServerProcess(setup) as server:
        c = Client(server.address)
        c.send(frame(TENSOR_REQUEST, 1, tensor_request("x")))
        assert c.recv_frame()[0] == TENSOR_HEADER
        magic, type_, _, _, rid, length = HEADER.unpack(c._exact(24))
        assert type_ == DATA and length == (4 << 20) + 16
        c._exact(256 << 10)  # then stalls: the server's writes block mid-frame
        time.sleep(0.8)  # the idle timeout fires (0.3 s, checked every 0.1 s)
        rest = bytearray()
        want = length - (256 << 10)
        while len(rest) < want:
            chunk = c.sock.recv(want - len(rest))
            assert chunk, "the connection closed inside the DATA frame"
            rest += chunk
        assert rest.count(0) == len(rest), "the frame's bytes are not the tensor's zeros"
        frames = read_frames(c.sock)
        c.sock.close()
        assert [t for t, _, _ in frames][-1] == ERROR, [t for t, _, _ in frames]
        assert all(t == DATA for t, _, _ in frames[:-1])
        _, rid, payload = frames[-1]
        assert rid == 0 and error_code(payload) == 21  # HURRAY_ETIMEOUT
        assert b"no progress" in payload


def test_cli_serve_takes_the_upload_cap(tmp_path):
    """`hurray serve --max-upload-total BYTES`: uploads over it are refused, naming the cap."""
    cli = shutil.which("hurray")
    if cli is None:
        pytest.skip("the hurray command is not on PATH")
    hurray.save(tmp_path / "w.hurray", {"w": np.ones(4, np.float32)})
    p = subprocess.Popen([cli, "serve", "-u", "-a", "127.0.0.1:0", "--max-upload-total",
                          "3000000", str(tmp_path / "w.hurray")], stdout=subprocess.PIPE,
                         text=True)
    try:
        address = p.stdout.readline().strip()  # the first line: the address alone
        with hurray.connect(address) as c:
            c.put("a", np.zeros(2 * MIB, np.uint8))
            with pytest.raises(hurray.LimitError, match="max_upload_total_bytes of 3000000"):
                c.put("b", np.zeros(2 * MIB, np.uint8))
            assert sorted(e["name"] for e in c.list()) == ["a", "w"]
    finally:
        p.terminate()
        p.wait(timeout=30)
    assert p.returncode == 0


# ---- items 2, 3 and 13: what a server reads of the files it serves -------------------------

ROW = 1 << 16  # bytes of a row of the served tensor 'a': shape (64, 65536) uint8


def served_file(path, seed=0):
    """Writes 'a' (4 MiB of random rows) to `path`: the tensor and where its bytes are."""
    a = np.random.default_rng(seed).integers(0, 256, (64, ROW), dtype=np.uint8)
    hurray.save(path, {"a": a})
    at = path.read_bytes().find(a[0, :64].tobytes())
    assert at > 0
    return a, at


def flip_bit(path, offset, keep_mtime=False):
    """Flips one bit of `path` in place; with `keep_mtime` the file's mtime is put back, so its
    size and times say nothing changed."""
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ 0x10]))
    if keep_mtime:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def serve_paths(*paths, tls=None):
    names = ", ".join(repr(str(p)) for p in paths)
    return ServerProcess(f"server = hurray.serve([{names}], tls={tls!r})")


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("certs")
    make = os.path.join(os.path.dirname(__file__), os.pardir, "tls", "make_certs.sh")
    subprocess.run(["sh", make, str(d)], check=True, capture_output=True)
    return d


def write_mapped_safetensors(path, name, t):
    """A safetensors file of the float32 `t` alone, its data at a multiple of 64, so that the
    reader maps it (and a truncation reaches the served bytes)."""
    header = json.dumps({name: {"dtype": "F32", "shape": list(t.shape),
                                "data_offsets": [0, t.nbytes]}}).encode()
    header += b" " * (-(8 + len(header)) % 64)
    path.write_bytes(struct.pack("<Q", len(header)) + header + t.tobytes())


def assert_truncation_is_an_error(server, path, a, b, request_kind):
    """`path`, serving `a` (64 rows, 16 KiB or more each), is cut to 8 KiB under a connected
    client: the request of `request_kind` for 'a' is an InputOutputError naming the tensor, and
    'b' is still served, to that connection and to another client."""
    with hurray.connect(server.address) as c:
        assert np.array_equal(np.asarray(c.get("a", slice=(1, 2))), a[1:2])
        os.truncate(path, 8192)
        row = a[0].nbytes
        ask = {"rows": lambda: c.get("a", slice=(60, 64)),
               "bytes": lambda: c.read("a", 60 * row, 61 * row),
               "whole": lambda: c.get("a")}[request_kind]
        with pytest.raises(hurray.InputOutputError, match="tensor 'a'.*shrank"):
            ask()
        assert np.array_equal(np.asarray(c.get("b")), b)  # the same connection goes on
    with hurray.connect(server.address) as other:
        assert np.array_equal(np.asarray(other.get("b")), b)


@pytest.mark.parametrize("request_kind", ["rows", "bytes", "whole"])
def test_a_truncated_file_is_an_error_not_a_crash(tmp_path, request_kind):
    """Item 2: a served file truncated in place (cp, truncate, rsync --inplace over it) made any
    ROWS or BYTES request kill the server with SIGBUS, and dropped the connection of a WHOLE
    one. Now each is answered with an ERROR naming the tensor, the connection goes on, and the
    server answers another client."""
    a, _ = served_file(tmp_path / "a.hurray")
    b = np.arange(1000, dtype=np.float32)
    hurray.save(tmp_path / "b.hurray", {"b": b})
    with serve_paths(tmp_path / "a.hurray", tmp_path / "b.hurray") as server:
        assert_truncation_is_an_error(server, tmp_path / "a.hurray", a, b, request_kind)


def test_a_truncated_file_over_tls_is_an_error_not_a_crash(tmp_path, certs):
    """Item 2 over TLS: SSL_write read the truncated mapping (SIGBUS) for every request."""
    served_file(tmp_path / "a.hurray")
    b = np.arange(1000, dtype=np.float32)
    hurray.save(tmp_path / "b.hurray", {"b": b})
    tls = {"certfile": str(certs / "server.pem"), "keyfile": str(certs / "server.key")}
    trust = {"cafile": certs / "ca.pem"}
    with serve_paths(tmp_path / "a.hurray", tmp_path / "b.hurray", tls=tls) as server:
        os.truncate(tmp_path / "a.hurray", 8192)
        with hurray.connect(server.address, tls=trust) as c:
            for ask in (lambda: c.get("a"), lambda: c.get("a", slice=(0, 1)),
                        lambda: c.read("a", 0, 100)):
                with pytest.raises(hurray.InputOutputError, match="tensor 'a'.*shrank"):
                    ask()
            assert np.array_equal(np.asarray(c.get("b")), b)


def test_ranges_of_a_corrupted_file_are_refused(tmp_path):
    """Item 3: with one bit flipped in a served file, WHOLE requests raised ChecksumError but
    ROWS and BYTES delivered the wrong value, hashed on the fly. Now a range is vouched for by
    the file's own checksum: every range of the corrupted buffer is refused, even one that does
    not contain the flipped bit."""
    a, at = served_file(tmp_path / "a.hurray")
    flip_bit(tmp_path / "a.hurray", at + 10 * ROW + 5)
    with serve_paths(tmp_path / "a.hurray") as server, hurray.connect(server.address) as c:
        for ask in (lambda: c.get("a", slice=(10, 11)), lambda: c.get("a", slice=(0, 1)),
                    lambda: c.read("a", 10 * ROW, 10 * ROW + 100)):
            with pytest.raises(hurray.ChecksumError, match="tensor 'a' buffer 0 does not match"):
                ask()
        assert c.list()[0]["name"] == "a"  # refused ranges: the connection goes on
        with pytest.raises(hurray.ChecksumError, match="'a'"):
            c.get("a")  # as before: the client checks a whole buffer itself


def test_a_bit_flipped_after_verification_is_caught(tmp_path):
    """Item 3, after a range has been served: a bit flipped in place with the file's mtime put
    back (its identity unchanged, as media corruption leaves it) is caught by the server's
    check of the bytes it sends against what it verified; a change that moves the mtime makes
    the server verify the buffer again."""
    a, at = served_file(tmp_path / "a.hurray")
    with serve_paths(tmp_path / "a.hurray") as server, hurray.connect(server.address) as c:
        assert np.array_equal(np.asarray(c.get("a", slice=(10, 12))), a[10:12])
        assert c.read("a", 20 * ROW, 20 * ROW + 7) == a[20, :7].tobytes()
        flip_bit(tmp_path / "a.hurray", at + 10 * ROW + 5, keep_mtime=True)
        with pytest.raises(hurray.ChecksumError, match="'a'"):
            c.get("a", slice=(10, 12))
        with pytest.raises(hurray.ChecksumError, match="'a'"):
            c.read("a", 10 * ROW, 10 * ROW + 100)
        # bytes far from the flip were verified and are unchanged: still served
        assert c.read("a", 20 * ROW, 20 * ROW + 7) == a[20, :7].tobytes()
        flip_bit(tmp_path / "a.hurray", at + 10 * ROW + 5)  # flipped back; the mtime moves
        assert np.array_equal(np.asarray(c.get("a", slice=(10, 12))), a[10:12])


def test_cli_fetch_rows_of_a_corrupted_file_fails(tmp_path):
    """Item 3 through the CLI: `hurray fetch --rows` wrote the wrong rows into a file that
    `hurray verify` then passed."""
    cli = shutil.which("hurray")
    if cli is None:
        pytest.skip("the hurray command is not on PATH")
    a, at = served_file(tmp_path / "a.hurray")
    flip_bit(tmp_path / "a.hurray", at + 3 * ROW)
    with serve_paths(tmp_path / "a.hurray") as server:
        out = tmp_path / "rows.hurray"
        r = subprocess.run([cli, "fetch", server.address, "a", "--rows", "3:4", "-o", str(out)],
                           capture_output=True, text=True)
        assert r.returncode != 0 and "checksum" in r.stderr, r.stderr
        assert not out.exists()


def test_large_rows_do_not_stall_other_clients(tmp_path):
    """Item 13: ROWS slices were hashed on the event loop, so 50 ROWS requests of a row each
    (128 MiB of a 256 MiB tensor in a file) kept every other client waiting while the loop
    hashed 6.25 GiB. Now the slices are checked on a helper thread: another client's small request is
    answered meanwhile. The 50 clients never read their answers (so sending costs the loop
    only what their sockets take)."""
    big = np.zeros((2, 128 << 20), np.uint8)
    big[:, ::4096] = 7
    hurray.save(tmp_path / "big.hurray", {"big": big, "small": np.arange(10, dtype=np.int32)})
    del big
    with serve_paths(tmp_path / "big.hurray") as server, \
            hurray.connect(server.address) as probe:
        clients = [Client(server.address) for _ in range(50)]
        probe.get("small")
        for i, c in enumerate(clients):
            c.send(frame(TENSOR_REQUEST, 1, tensor_request("big", range_=1, start=i % 2,
                                                           stop=i % 2 + 1)))
        worst, start = 0.0, time.monotonic()
        while time.monotonic() - start < 2.0:
            t0 = time.monotonic()
            probe.get("small")
            worst = max(worst, time.monotonic() - t0)
        for c in clients:
            c.sock.close()
        print(f"worst latency of a small request: {worst * 1e3:.1f} ms")
        assert worst < 0.25, f"a small request waited {worst * 1e3:.0f} ms"


def test_a_file_truncated_during_a_whole_answer_ends_it_with_an_error(tmp_path):
    """Item 2, the file truncated while a WHOLE answer is on its way (the client has read part of
    its first DATA frame): every frame that went out is whole -- the one under way is finished,
    with zeros where the file no longer has bytes -- and the answer ends with ERROR
    HURRAY_EIO for the request; the connection goes on (before: the server dropped it)."""
    a = np.full(64 << 20, 7, np.uint8)
    hurray.save(tmp_path / "a.hurray", {"a": a})
    with serve_paths(tmp_path / "a.hurray") as server:
        c = Client(server.address)
        c.send(frame(TENSOR_REQUEST, 1, tensor_request("a")))
        assert c.recv_frame()[0] == TENSOR_HEADER
        head = c._exact(24)
        assert HEADER.unpack(head)[1] == DATA
        c._exact(256 << 10)
        os.truncate(tmp_path / "a.hurray", 8192)
        rest = HEADER.unpack(head)[5] - (256 << 10)
        got = bytearray()
        while len(got) < rest:
            got += c._exact(min(rest - len(got), 1 << 20))
        types = []
        while True:
            type_, _, rid, payload = c.recv_frame()
            types.append(type_)
            if type_ == ERROR:
                break
            assert type_ == DATA
            got += payload[16:]
        sent = got.rstrip(b"\0")  # the file's bytes, then zeros where it no longer had them
        assert sent.count(7) == len(sent)
        print(f"{len(sent)} bytes of the file after the truncation, then {len(got) - len(sent)} zeros")
        assert rid == 1 and error_code(payload) == 15, types  # HURRAY_EIO
        assert b"tensor 'a': its file shrank while served" in payload
        c.send(frame(LIST, 2))
        type_, _, rid, _ = c.recv_frame()
        assert (type_, rid) == (0x11, 2)  # LIST_RESULT: the connection goes on
        c.sock.close()


# ---- issue 24 item 3: connections from one client address (ADR-099) ---------------------------

def test_connections_per_client_address_are_bounded():
    """serve(max_connections_per_address=2): a third client from 127.0.0.1 is refused with
    RequestDeniedError naming the limit, and one that closes makes room again."""
    with hurray.serve({"a": np.zeros(2)}, max_connections_per_address=2) as s:
        first, second = hurray.connect(s.address), hurray.connect(s.address)
        with pytest.raises(hurray.RequestDeniedError,
                           match="at its limit of 2 connections from one address"):
            hurray.connect(s.address)
        first.close()
        for _ in range(200):  # the server notices the close on its next turn
            try:
                third = hurray.connect(s.address)
                break
            except hurray.RequestDeniedError:
                time.sleep(0.01)
        assert np.asarray(third.get("a")).tolist() == [0.0, 0.0]
        third.close()
        second.close()
    with pytest.raises(hurray.InvalidArgumentError):
        hurray.serve({"a": np.zeros(2)}, max_connections_per_address=0)


@pytest.mark.parametrize("kind", ["safetensors", "npy"])
@pytest.mark.parametrize("request_kind", ["rows", "bytes", "whole"])
def test_a_truncated_foreign_file_is_an_error_not_a_crash(tmp_path, kind, request_kind):
    """A served safetensors or .npy file truncated in place killed the server with SIGBUS (its
    tensors were served from the reader's mapping): now, as for a Hurray file (ADR-084), each
    request gets an ERROR naming the tensor, the connection goes on and the server answers
    another client. (A tensor whose bytes the reader copies -- misaligned in the file,
    byte-swapped, deflated -- is served from that copy, which no truncation reaches.)"""
    a = np.arange(64 * 4096, dtype=np.float32).reshape(64, 4096)  # 1 MiB, rows of 16 KiB
    if kind == "safetensors":
        path = tmp_path / "a.safetensors"
        write_mapped_safetensors(path, "a", a)
    else:
        path = tmp_path / "a.npy"
        np.save(path, a)
    b = np.arange(1000, dtype=np.float32)
    hurray.save(tmp_path / "b.hurray", {"b": b})
    with serve_paths(path, tmp_path / "b.hurray") as server:
        assert_truncation_is_an_error(server, path, a, b, request_kind)


def sharded_checkpoint(directory, a, b, kind):
    """A sharded checkpoint in `directory`: 'a' alone in one shard, 'b' in another, the shards
    Hurray or safetensors files (the latter's data at a multiple of 64, so that the reader maps
    it); the path of the shard holding 'a'."""
    if kind == "hurray":
        hurray.save(directory, {"a": a, "b": b}, max_shard_size=a.nbytes // 2)
        index = json.loads(next(directory.glob("*.index.json")).read_text())
        return directory / index["weight_map"]["a"]
    directory.mkdir()
    names = {}
    for i, (name, t) in enumerate((("a", a), ("b", b))):
        names[name] = f"model-{i + 1:05d}-of-00002.safetensors"
        write_mapped_safetensors(directory / names[name], name, t)
    (directory / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": names}))
    return directory / names["a"]


@pytest.mark.parametrize("kind", ["hurray", "safetensors"])
@pytest.mark.parametrize("request_kind", ["rows", "bytes", "whole"])
def test_a_truncated_shard_is_an_error_not_a_crash(tmp_path, kind, request_kind):
    """A shard of a served sharded checkpoint truncated in place killed the server with SIGBUS
    (its tensors were served from the shard readers' mappings): now each shard is read through
    its own descriptor, as a single file is (ADR-084), so the request gets an ERROR naming the
    tensor, the connection goes on and the server answers another client."""
    a = np.arange(64 * 4096, dtype=np.float32).reshape(64, 4096)  # 1 MiB, rows of 16 KiB
    b = np.arange(1000, dtype=np.float32)
    shard = sharded_checkpoint(tmp_path / "ckpt", a, b, kind)
    with serve_paths(tmp_path / "ckpt") as server:
        assert_truncation_is_an_error(server, shard, a, b, request_kind)
