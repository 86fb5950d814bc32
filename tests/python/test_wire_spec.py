"""docs/spec/interchange.md is precise enough for a second implementation.

spec_wire.py is a client written from the spec alone. Here it meets hurray's own server (on TCP
loopback and on a Unix socket): what it lists and fetches -- every dtype, 0-d, empty and strided
sources, every layout with all its buffers, rows, byte ranges, resumed requests and the
same-host descriptors of §6.6 -- equals what was served, byte for byte; its frames for the golden examples of §9 are the spec's bytes, read from the spec
itself; and the protocol violations the spec says a server must answer with ERROR get exactly
the code it names, with the connection left as §7.2 says. In the other direction, hurray's client
meets a server built from the spec's frames and refuses what the spec says a client refuses."""

import json
import re
import socket
import subprocess
import struct
import threading
import time
from pathlib import Path

import pytest

import hurray
from conftest import SANITIZED, peer
from test_native_layouts import LAYOUTS

np = peer("numpy")
peer("xxhash")
import spec_file  # noqa: E402  (needs xxhash)
import spec_wire as w  # noqa: E402

SPEC = Path(__file__).resolve().parents[2] / "docs" / "spec" / "interchange.md"

DENSE = {
    "f32": lambda: np.arange(6, dtype=np.float32).reshape(2, 3),
    "i64_0d": lambda: np.array(-7, dtype=np.int64),
    "empty": lambda: np.zeros((0, 4), dtype=np.float32),
    "u8": lambda: np.arange(200, dtype=np.uint8),
    "bool": lambda: np.array([True, False, True]),
    "f16": lambda: np.linspace(-1, 1, 10).astype(np.float16),
    "c128": lambda: (np.arange(4) + 1j).astype(np.complex128),
    "cols": lambda: np.arange(24, dtype=np.int32).reshape(4, 6)[:, ::2],
    "transposed": lambda: np.arange(12, dtype=np.float64).reshape(3, 4).T,
    "reversed": lambda: np.arange(5, dtype=np.int16)[::-1],
}


@pytest.fixture(scope="module", params=["tcp", "unix"])
def server(request, tmp_path_factory):
    tensors = {name: make() for name, make in DENSE.items()}
    tensors.update({f"layout_{name}": make() for name, make in LAYOUTS.items()})
    address = None
    if request.param == "unix":
        address = f"unix:{tmp_path_factory.mktemp('sock') / 's.sock'}"
    with hurray.serve(tensors, address=address) as s:
        yield s


def client(server, **kwargs):
    return w.Client(server.address, **kwargs)


# ============================================================================================
# Values
# ============================================================================================


def test_list_describes_what_is_served(server):
    with client(server) as c:
        entries = {e["name"]: e for e in c.list()}
        c.goodbye()
    assert set(entries) == set(DENSE) | {f"layout_{n}" for n in LAYOUTS}
    for name, make in DENSE.items():
        a = make()
        e = entries[name]
        assert (e["layout"], e["shape"], e["buffers"]) == ("dense", a.shape, 1)
        assert e["dtype"] == spec_file.DTYPE_CODES[a.dtype.name]
        assert e["data_bytes"] == span(a)  # the compact form (§6.3)
    for name, make in LAYOUTS.items():
        t, e = make(), entries[f"layout_{name}"]
        assert (e["layout"], e["shape"]) == (t.layout, t.shape)


def span(a):
    """The bytes an array addresses, from its lowest element to its highest (§6.3)."""
    if a.size == 0:
        return 0
    reach = [(n - 1) * s for n, s in zip(a.shape, a.strides)]
    return sum(r for r in reach if r > 0) - sum(r for r in reach if r < 0) + a.itemsize


@pytest.mark.parametrize("name", sorted(DENSE))
def test_dense_values_byte_for_byte(server, name):
    a = DENSE[name]()
    with client(server) as c:
        t = c.get(name)
    part = t.node.parts[0]
    assert (t.name, t.node.layout, t.node.shape) == (name, "dense", a.shape)
    assert part.to_numpy(t.buffers).tobytes() == np.ascontiguousarray(a).tobytes()
    # The descriptor is the served one but for byte offsets (§6.3).
    src = hurray.from_numpy(a).parts[0]
    assert part.strides in (None, src.strides)


def describe(node, buffers):
    return (node.layout, node.dtype, node.shape, node.axis, node.block_size, node.coalesced,
            [(p.dtype, p.shape, p.tobytes(buffers)) for p in node.parts],
            {n: describe(child, buffers) for n, child in node.children.items()})


def describe_served(t):
    return (t.layout, None if t.layout == "composite" else t.dtype.name, t.shape, t.axis,
            t.block_size, t.coalesced, [(p.dtype.name, p.shape, p.tobytes()) for p in t.parts],
            {n: describe_served(child) for n, child in t.children.items()})


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_every_layout_with_all_its_buffers(server, layout):
    with client(server) as c:
        got = c.get(f"layout_{layout}")
    assert describe(got.node, got.buffers) == describe_served(LAYOUTS[layout]())


def test_rows_and_bytes(server):
    a = np.arange(200, dtype=np.uint8)
    m = np.arange(6, dtype=np.float32).reshape(2, 3)
    with client(server) as c:
        rows = c.get("f32", w.ROWS, 1, 2)
        assert rows.node.shape == (1, 3)
        assert rows.node.parts[0].to_numpy(rows.buffers).tobytes() == m[1:2].tobytes()
        empty = c.get("f32", w.ROWS, 1, 1)
        assert empty.node.shape == (0, 3) and all(b.size == 0 for b in empty.buffers)
        assert c.get("u8", w.BYTES, 3, 150) == a.tobytes()[3:150]
        assert c.get("f32", w.BYTES, 0, 24) == m.tobytes()
        assert c.get("f32", w.BYTES, 5, 5) == b""
        c.goodbye()


def test_small_frames_split_the_stream():
    """max_frame at its floor (2^16): a 256 KiB tensor arrives in several DATA frames, each
    checked; a BYTES range across them carries one check per frame."""
    big = np.arange(1 << 16, dtype=np.float32)
    with hurray.serve({"big": big}) as s, client(s, max_frame=1 << 16) as c:
        assert c.max_frame == 1 << 16
        t = c.get("big")
        assert t.buffers[0].data == big.tobytes()
        assert c.get("big", w.BYTES, 100, 200_000) == big.tobytes()[100:200_000]


def test_a_1_0_session_has_no_frame_checks(server):
    with client(server, version=(1, 0)) as c:
        assert c.version == (1, 0)
        # spec_wire refuses a non-zero check outside a 1.1 BYTES response (§6.4).
        assert c.get("u8", w.BYTES, 0, 10) == bytes(range(10))


def test_a_1_1_session_has_no_header_check(server):
    """§8: the server speaks 1.1 to a 1.1 client -- tensor headers without header_check --
    and 1.2 to a 1.2 one, 1.3 to a 1.3 one (spec_wire's default), whose headers end with the
    header_check spec_wire checks (§6.3.1; 1.3's are 1.2's)."""
    want = DENSE["f32"]().tobytes()
    with client(server, version=(1, 1)) as c:
        assert c.version == (1, 1)
        assert c.get("f32").buffers[0].data == want
    for version in ((1, 2), None):
        with client(server, **({"version": version} if version else {})) as c:
            assert c.version == (version or w.VERSION) and c.version[1] >= w.HEADER_CHECK_MINOR
            assert c.get("f32").buffers[0].data == want
            assert c.get("f32", w.ROWS, 1, 2).buffers[0].data == want[12:]
    assert w.VERSION == (1, w.METADATA_MINOR)  # the spec's current version


def test_minor_versions_of_the_future_are_answered_with_the_servers(server):
    with client(server, version=(1, 9)) as c:
        assert c.version == (1, w.METADATA_MINOR)  # the reference server's, 1.3
        c.goodbye()


def test_the_device_rule(server):
    with client(server, devices=[(0, b""), (1, b"")]) as c:
        with pytest.raises(w.PeerError) as e:
            c.get("f32", device=1)
        assert e.value.code == w.CODES["EUNSUPPORTED"] and e.value.request_id == 1
        assert e.value.message == ("device cuda (0x01) is not served here; this server serves "
                                   "cpu (0x00)")
        t = c.get("f32", device=1, flags=w.FALLBACK)  # served on the CPU instead
        assert t.buffers[0].data == DENSE["f32"]().tobytes()
        c.goodbye()


def test_the_client_hello_binds_the_devices_answered_on(server):
    """§6.2 (issue 24 item 5): a server answers on the CPU, listed or not, and on the devices
    the client's hello lists; a request on any other device is refused HURRAY_EPROTOCOL."""
    with client(server, devices=[(4, b"")]) as c:  # vulkan only: the CPU is implied
        assert c.get("f32").buffers[0].data == DENSE["f32"]().tobytes()
        with pytest.raises(w.PeerError) as e:
            c.get("f32", device=1, flags=w.FALLBACK)  # FALLBACK does not make it listed
        assert (e.value.status, e.value.request_id) == ("EPROTOCOL", 2)
        assert e.value.message == ("device cuda (0x01) was not in this client's hello: a server "
                                   "answers on the CPU and the devices a client lists")
        with pytest.raises(w.PeerError) as e:
            c.get("f32", device=4)  # listed: the device rule decides
        assert e.value.status == "EUNSUPPORTED"
        c.goodbye()
    with hurray.connect(server.address, devices=["cpu"]) as c:  # the reference client
        with pytest.raises(hurray.InvalidArgumentError, match="device rocm was not offered"):
            c.get("f32", device="rocm", fallback=True)
    with hurray.connect(server.address) as c:  # by default it offers every named device
        assert np.asarray(c.get("f32", device="rocm", fallback=True)).tobytes() == \
            DENSE["f32"]().tobytes()


def test_shared_secret():
    data = np.arange(3, dtype=np.int32)
    with hurray.serve({"s": data}, secret="s3cret") as s:
        with w.Client(s.address, secret=b"s3cret") as c:
            assert c.hello["flags"] & w.S_AUTH
            assert c.get("s").buffers[0].data == data.tobytes()
            c.goodbye()
        with pytest.raises(w.PeerError) as e:
            w.Client(s.address, secret=b"wrong")
        assert (e.value.status, e.value.request_id) == ("EAUTH", 0)
        with pytest.raises(w.SpecWireError) as e:
            w.Client(s.address)  # no secret: fails setup without sending AUTH (§4.3)
        assert e.value.status == "EAUTH"
        with raw(s) as sock:  # a request instead of AUTH
            assert recv(sock)[0] == w.SERVER_HELLO
            sock.sendall(w.frame(w.LIST, 1))
            assert_closing_error(sock, "EAUTH")


# ============================================================================================
# Golden examples (§9), read from the spec
# ============================================================================================


def golden():
    """{heading number: [frame bytes, ...]} from the hex dumps of §9."""
    text = SPEC.read_text(encoding="utf-8").split("## 9. Golden examples")[1]
    text = text.split("## 10.")[0]
    out = {}
    for section in re.split(r"^### ", text, flags=re.M)[1:]:
        number = section.split()[0]
        frames = []
        for block in re.findall(r"```\n(.*?)```", section, flags=re.S):
            for line in block.splitlines():
                m = re.match(r"([0-9a-f]{4})  (.*)", line)
                if not m:
                    continue
                if m.group(1) == "0000":
                    frames.append(bytearray())
                assert int(m.group(1), 16) == len(frames[-1]), (number, line)
                frames[-1] += hex_tokens(m.group(2))
        out[number] = [bytes(f) for f in frames]
    return out


def hex_tokens(text):
    """The bytes of a dump line: two-digit hex, `xx × n` repeats, `a b … z` counts up; the
    comment after them is ignored."""
    out = bytearray()
    tokens = text.split()
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok == "×":
            out += out[-1:] * (int(tokens[i + 1]) - 1)
            i += 2
        elif tok == "…":
            out += bytes(range(out[-1] + 1, int(tokens[i + 1], 16)))
            i += 1
        elif re.fullmatch(r"[0-9a-f]{2}", tok):
            out.append(int(tok, 16))
            i += 1
        else:
            break
    return bytes(out)


GOLDEN = golden()


def test_golden_frames_have_their_stated_lengths():
    assert set(GOLDEN) == {f"9.{i}" for i in range(1, 12)}
    for number, frames in GOLDEN.items():
        for f in frames:
            assert struct.unpack_from("<Q", f, 16)[0] == len(f) - 24, number


def test_golden_hellos():
    assert w.frame(w.CLIENT_HELLO, 0, w.hello((1, 0), 0, 4 << 20)) == GOLDEN["9.1"][0]
    sh = w.frame(w.SERVER_HELLO, 0, w.hello((1, 0), w.S_AUTH, 1 << 20, bytes(range(32)),
                                            [(0, b""), (0xF3, b"npu_x")]))
    assert sh == GOLDEN["9.2"][0]
    with pytest.raises(w.SpecWireError, match=r"private device tag 0xf3 \('npu_x'\) is not "
                       "registered here") as e:
        w.parse_hello(sh[24:])
    assert e.value.status == "EDEVICE"


def test_golden_auth():
    cn, sn = b"\xaa" * 32, bytes(range(32))
    assert w.frame(w.AUTH, 0, w.mac(b"s3cret", cn, sn, "client")) == GOLDEN["9.3"][0]
    ok = ("2f 23 f5 0d c3 96 f7 dd 08 84 6f ac e7 a1 fe 4a e5 8c 65 96 d7 ba f0 04 f9 a4 a7 b6 "
          "b4 19 fa 0e")
    assert f"`{ok}`" in SPEC.read_text(encoding="utf-8")
    assert w.mac(b"s3cret", cn, sn, "server") == bytes.fromhex(ok)


def test_golden_requests_errors_goodbye():
    assert w.frame(w.TENSOR_REQUEST, 7, w.tensor_request("x", 1, w.ROWS, 1, 2, 0, w.FALLBACK)) \
        == GOLDEN["9.4"][0]
    error, goodbye = GOLDEN["9.6"]
    assert w.frame(w.ERROR, 7, w.error(1, "no tensor 'y'")) == error
    assert w.frame(w.GOODBYE) == goodbye
    e = w.parse_error(error[24:], 7)
    assert (e.status, e.message) == ("EINVAL", "no tensor 'y'")


def test_golden_tensor_header_and_data_decode():
    header, data = GOLDEN["9.5"]
    device, total, resume, entries, record = w.parse_tensor_header(header[24:])
    assert (device, total, resume, len(entries)) == (0, 8, 0, 1)
    desc, checksum, role = entries[0]
    assert (desc["alignment"], desc["size"], role) == (64, 8, 0)
    assert checksum == spec_file.xxh3(data[40:])
    buffers = [spec_file.SpecBuffer("values", 0, 8, checksum, data[40:])]
    name, node, metadata = w.decode_record(record, buffers)
    assert (name, node.layout, node.dtype, node.shape, metadata) == ("x", "dense", "float32",
                                                                    (2,), {})
    assert node.parts[0].to_numpy(buffers).tolist() == [1.0, 2.0]
    assert data[:24] == w.frame(w.DATA, 7, bytes(24), flags=w.END)[:24]
    # 9.9: the same tensor's bytes [1, 5) in a 1.1 session, with the frame's check.
    (checked,) = GOLDEN["9.9"]
    chunk = data[40:][1:5]
    check = spec_file.xxh3(chunk) & 0xFFFFFFFF
    assert w.frame(w.DATA, 7, struct.pack("<IIQ", 0, check, 1) + chunk, w.END) == checked


def test_golden_header_check():
    """§9.10: 9.5's TENSOR_HEADER in a 1.2 session, its header_check last; the PUT of the same
    tensor as request 1; and every one-byte change of it refused as §9.10 says."""
    (checked,) = GOLDEN["9.10"]
    header, _ = GOLDEN["9.5"]
    payload = header[24:]
    assert w.tensor_frame(w.TENSOR_HEADER, 7, payload, minor=2) == checked
    assert w.tensor_frame(w.TENSOR_HEADER, 7, payload, minor=1) == header
    assert checked[-8:] == struct.pack("<Q", 0x50c0dbbf3671b552)
    put = w.tensor_frame(w.PUT, 1, payload, minor=2)
    assert put[-8:].hex(" ") in SPEC.read_text(encoding="utf-8").split("### 9.10")[1]
    assert w.strip_header_check(w.TENSOR_HEADER, 7, checked[24:], 0, 2) == payload
    for i in list(range(8, 16)) + list(range(24, len(checked))):
        bad = bytearray(checked)
        bad[i] ^= 0x10
        _, type_, flags, _, rid, _ = w.HEADER.unpack_from(bad)
        with pytest.raises(w.SpecWireError, match="TENSOR_HEADER header checksum mismatch") as e:
            w.strip_header_check(type_, rid, bytes(bad[24:]), flags, 2)
        assert e.value.status == "ECHECKSUM"


def test_golden_list_result_decodes():
    (frame,) = GOLDEN["9.7"]
    assert frame[:24] == w.frame(w.LIST_RESULT, 3, bytes(56), w.END)[:24]
    assert w.parse_list_result(frame[24:]) == [
        {"name": "w", "layout": "dense", "dtype": 10, "buffers": 1, "data_bytes": 24,
         "shape": (2, 3)}]


def test_the_server_sends_golden_bytes():
    """The real server's LIST_RESULT and TENSOR_HEADER + DATA for the tensors of §9.7 and §9.5
    are the spec's bytes (and its 9.9 DATA for bytes [1, 5) but for the request id): 9.5 to a
    1.1 client, 9.10 to a 1.2 one."""
    with hurray.serve({"w": np.zeros((2, 3), np.float32)}) as s, raw(s) as sock:
        recv(sock)
        sock.sendall(w.frame(w.LIST, 3))
        assert frame_of(recv(sock)) == GOLDEN["9.7"][0]
    x = hurray.Tensor(struct.pack("<2f", 1.0, 2.0), hurray.dtype.float32, [2])  # NULL strides
    with hurray.serve({"x": x}) as s, raw(s, w.frame(w.CLIENT_HELLO, 0, w.hello((1, 1)))) as sock:
        assert w.parse_hello(recv(sock)[3])["version"] == (1, 1)
        sock.sendall(w.frame(w.TENSOR_REQUEST, 7, w.tensor_request("x")))
        assert [frame_of(recv(sock)), frame_of(recv(sock))] == GOLDEN["9.5"]
    with hurray.serve({"x": x}) as s, raw(s, w.frame(w.CLIENT_HELLO, 0, w.hello((1, 2)))) as sock:
        assert w.parse_hello(recv(sock)[3])["version"] == (1, 2)  # 9.10 is of a 1.2 session
        sock.sendall(w.frame(w.TENSOR_REQUEST, 7, w.tensor_request("x")))
        assert [frame_of(recv(sock)), frame_of(recv(sock))] == GOLDEN["9.10"] + GOLDEN["9.5"][1:]
        sock.sendall(w.frame(w.TENSOR_REQUEST, 8, w.tensor_request("x", range_=w.BYTES,
                                                                   start=1, stop=5)))
        recv(sock)
        assert frame_of(recv(sock)) == GOLDEN["9.9"][0].replace(b"\x07", b"\x08", 1)


def frame_of(parts):
    type_, flags, rid, payload = parts
    return w.frame(type_, rid, payload, flags)


# ============================================================================================
# Violations (§2, §3, §4, §5, §6.2, §7.2)
# ============================================================================================


class raw:
    """A bare socket to `server`, its CLIENT_HELLO sent (or `hello` in its place)."""

    def __init__(self, server, hello=None):
        family, where = ((socket.AF_UNIX, server.address[5:])
                         if server.address.startswith("unix:")
                         else (socket.AF_INET, tuple(server.address.rsplit(":", 1))))
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(where if family == socket.AF_UNIX else (where[0], int(where[1])))
        self.sock.sendall(w.frame(w.CLIENT_HELLO, 0, w.hello()) if hello is None else hello)

    def __enter__(self):
        return self.sock

    def __exit__(self, *exc):
        self.sock.close()


def recv(sock):
    return w.Client.over(sock).recv_frame()


def assert_closing_error(sock, status, message=None):
    """§7.2: an ERROR with request id 0, and then the connection is closed."""
    type_, _, rid, payload = recv(sock)
    assert (type_, rid) == (w.ERROR, 0)
    e = w.parse_error(payload, rid)
    assert e.status == status, e.message
    if message is not None:  # the spec's message, which may go on to name more
        assert e.message.startswith(message), e.message
    assert sock.recv(1) == b""
    return e


@pytest.fixture
def one():
    with hurray.serve({"t": np.arange(4, dtype=np.float32)}) as s:
        yield s


def test_unknown_frame_type(one):
    with raw(one) as sock:
        recv(sock)
        sock.sendall(w.HEADER.pack(w.MAGIC, 0x60, 0, 0, 1, 0))
        e = assert_closing_error(sock, "EPROTOCOL")
        assert "0x60" in e.message


def test_major_version_of_the_future(one):
    hello = w.frame(w.CLIENT_HELLO, 0, w.hello((2, 0)))
    with raw(one, hello) as sock:
        assert_closing_error(sock, "EUNSUPPORTED", "protocol version 2.0 is not supported "
                             "(this peer speaks 1.3)")


def test_oversized_frame_is_refused_from_its_header(one):
    with raw(one) as sock:
        recv(sock)
        sock.sendall(w.HEADER.pack(w.MAGIC, w.LIST, 0, 0, 1, (1 << 16) + 1))  # no payload
        assert_closing_error(sock, "ELIMIT")


def test_unknown_tensor_name_answers_the_request_and_goes_on(one):
    with w.Client(one.address) as c:
        with pytest.raises(w.PeerError) as e:
            c.get("y")
        assert (e.value.status, e.value.request_id, e.value.message) == (
            "EINVAL", 1, "no tensor named 'y'")
        assert [x["name"] for x in c.list()] == ["t"]
        c.goodbye()


@pytest.mark.parametrize("bad", ["before_hello", "id_0", "end_on_list", "reserved",
                                 "magic"])
def test_malformed_frames_end_the_connection(one, bad):
    hello = w.frame(w.CLIENT_HELLO, 0, w.hello())
    if bad == "before_hello":
        with raw(one, w.frame(w.LIST, 1)) as sock:
            assert_closing_error(sock, "EPROTOCOL", "expected CLIENT_HELLO")
        return
    frame = {"id_0": w.frame(w.LIST, 0), "end_on_list": w.frame(w.LIST, 1, flags=w.END),
             "reserved": w.HEADER.pack(w.MAGIC, w.LIST, 0, 1, 1, 0),
             "magic": w.HEADER.pack(b"GET ", w.LIST, 0, 0, 1, 0)}[bad]
    with raw(one, hello) as sock:
        recv(sock)
        sock.sendall(frame)
        assert_closing_error(sock, "EPROTOCOL")


def test_a_reserved_device_tag_fails_setup(one):
    hello = w.frame(w.CLIENT_HELLO, 0, w.hello(devices=[(0, b""), (0x42, b"")]))
    with raw(one, hello) as sock:
        assert_closing_error(sock, "EDEVICE", "device tag 0x42 is reserved (0x09..0xef): not "
                             "in this protocol version")


def test_request_errors_keep_the_connection(one):
    with w.Client(one.address) as c:
        for kwargs, status, message in [
                ({"range_": w.ROWS, "start": 1, "stop": 9}, "EINVAL",
                 "rows [1, 9) are outside tensor 't' (4 rows)"),
                ({"range_": w.BYTES, "start": 0, "stop": 17}, "EINVAL",
                 "bytes [0, 17) are outside tensor 't' (16 bytes)")]:
            with pytest.raises(w.PeerError) as e:
                c.get("t", **kwargs)
            assert (e.value.status, e.value.message) == (status, message)
            assert e.value.request_id == c.next_id - 1
        assert c.get("t").buffers[0].data == np.arange(4, dtype=np.float32).tobytes()
        c.goodbye()


def test_a_hello_with_a_request_id_is_refused(one):
    """§2.3: id 0 belongs to the connection's own frames (once accepted with any id)."""
    with raw(one, w.frame(w.CLIENT_HELLO, 5, w.hello())) as sock:
        assert_closing_error(sock, "EPROTOCOL", "CLIENT_HELLO carries request id 5")


@pytest.mark.parametrize("frame", [w.frame(w.GOODBYE, 3), w.frame(w.GOODBYE, 0, b"x")],
                         ids=["id", "payload"])
def test_a_goodbye_with_a_request_id_or_payload_is_refused(one, frame):
    """§2.1, §2.3: GOODBYE carries id 0 and nothing (once answered with GOODBYE)."""
    with raw(one) as sock:
        recv(sock)
        sock.sendall(frame)
        assert_closing_error(sock, "EPROTOCOL")


def test_data_before_the_hellos_is_over_its_limit_of_0(one):
    """§2.4: before the hellos, a DATA frame with a payload is refused from its header."""
    with raw(one, w.HEADER.pack(w.MAGIC, w.DATA, 0, 0, 1, 1 << 20)) as sock:
        assert_closing_error(sock, "ELIMIT")


@pytest.mark.parametrize("payload", [
    w.tensor_request("t", range_=3), w.tensor_request("t", flags=2),
    w.tensor_request("t", start=1), w.tensor_request("t") + b"\0",
    w.tensor_request("t")[:6] + b"\1\0" + w.tensor_request("t")[8:]],
    ids=["range", "flags", "whole_start", "trailing", "reserved"])
def test_a_malformed_request_payload_is_a_request_error(one, payload):
    """§6.2: its header kept the stream in step, so the connection goes on."""
    with w.Client(one.address) as c:
        c.send(w.frame(w.TENSOR_REQUEST, c.request_id(), payload))
        with pytest.raises(w.PeerError) as e:
            c._expect(1, w.TENSOR_HEADER)
        assert (e.value.status, e.value.request_id) == ("EPROTOCOL", 1)
        assert [x["name"] for x in c.list()] == ["t"]
        c.goodbye()


def test_resume_covers_both_attempts_with_the_checksums(server):
    """§6.4: a request with resume_offset n gets the same header and the stream from n."""
    with client(server) as c:
        whole = c.get("layout_per_channel")
        stream = b"".join(b.data for b in whole.buffers)
        assert len(whole.buffers) == 3
        for n in (0, 1, whole.buffers[0].size, whole.buffers[0].size + 1, len(stream)):
            again = c.get("layout_per_channel", received=stream[:n])
            assert [b.data for b in again.buffers] == [b.data for b in whole.buffers]
        with pytest.raises(w.SpecWireError) as e:  # an earlier attempt that received other bytes
            c.get("layout_per_channel", received=bytes(5))
        assert e.value.status == "ECHECKSUM"
        u8 = np.arange(200, dtype=np.uint8).tobytes()
        assert c.get("u8", w.BYTES, 10, 150, received=u8[10:60]) == u8[10:150]


def test_a_long_list_is_split_into_frames_of_at_most_64_kib():
    names = [f"{i:04d}" + "n" * 200 for i in range(600)]
    with hurray.serve({n: np.zeros(1, np.int8) for n in names}) as s, raw(s) as sock:
        recv(sock)
        sock.sendall(w.frame(w.LIST, 1))
        entries, frames = [], 0
        while True:
            type_, flags, rid, payload = recv(sock)
            assert (type_, rid) == (w.LIST_RESULT, 1) and len(payload) <= 1 << 16
            entries += w.parse_list_result(payload)
            frames += 1
            if flags & w.END:
                break
    assert frames > 1 and sorted(e["name"] for e in entries) == names


def test_authentication_refusals_name_the_reason():
    with hurray.serve({"s": np.zeros(1)}, secret="s3cret") as s:
        with pytest.raises(w.PeerError) as e:
            w.Client(s.address, secret=b"wrong")
        assert e.value.message.startswith("authentication failed: wrong secret")
        with raw(s) as sock:
            recv(sock)
            sock.sendall(w.frame(w.TENSOR_REQUEST, 1, w.tensor_request("s")))
            assert_closing_error(sock, "EAUTH",
                                 "authentication required: this server needs a shared secret")
    with hurray.serve({"s": np.zeros(1)}) as s:  # §4.3: a secret meets a server without one
        with pytest.raises(w.SpecWireError) as e:
            w.Client(s.address, secret=b"s3cret")
        assert e.value.status == "EAUTH"


def test_same_host_descriptors(tmp_path):
    """§6.6: on a Unix socket a client that asks gets DATA_FD frames (a sealed memfd for
    tensors in memory, the file for a served file), which carry the same bytes."""
    tensors = {name: make() for name, make in DENSE.items()}
    tensors["big"] = np.arange(1 << 17, dtype=np.float32)  # the reference server passes 512 KiB up
    path = tmp_path / "m.hurray"
    hurray.save(str(path), {"f": np.arange(1 << 16, dtype=np.float64)})
    for served in (tensors, str(path)):
        with hurray.serve(served, address=f"unix:{tmp_path / 's.sock'}") as s:
            with w.Client(s.address, fd_passing=True) as c:
                assert c.hello["flags"] & w.S_FD_PASSING
                for name in [e["name"] for e in c.list()]:
                    t = c.get(name)
                    want = (np.arange(1 << 16, dtype=np.float64) if name == "f"
                            else np.ascontiguousarray(tensors[name]))
                    assert t.node.parts[0].to_numpy(t.buffers).tobytes() == want.tobytes()
                assert c.fd_frames > 0
                c.goodbye()
        with hurray.serve(served) as s, w.Client(s.address, fd_passing=True) as c:
            assert not c.hello["flags"] & w.S_FD_PASSING  # never on TCP


def test_golden_tensor_header_encodes():
    header, data = GOLDEN["9.5"]
    assert w.frame(w.TENSOR_HEADER, 7, w.dense_header("x", 10, (2,), data[40:])) == header


def test_uploads_and_their_refusals():
    """§6.7: a PUT is served once PUT_OK; each refusal is an ERROR with the request's id after
    which the server discards the upload's DATA up to END, and the connection goes on."""
    a = np.arange(50_000, dtype=np.float32)
    data = a.tobytes()
    with hurray.serve({"t": np.zeros(1)}, max_upload_bytes=100_000, uploads=True) as s, \
            w.Client(s.address) as c:
        c.put(w.dense_header("up", 10, (20_000,), data[:80_000]), data[:80_000])
        assert c.get("up").buffers[0].data == data[:80_000]
        refusals = [
            (w.dense_header("up", 10, (2,), data[:8]), data[:8], "EINVAL"),
            (w.dense_header("big", 10, a.shape, data), data, "ELIMIT"),
            (w.dense_header("r", 10, (2,), data[:8], resume=4), data[:8], "EUNSUPPORTED"),
            (w.dense_header("c", 10, (2,), data[:8], checksum=1), data[:8], "ECHECKSUM"),
            (w.dense_header("b", 10, (3,), data[:8]), data[:8], "EBOUNDS"),  # sent as it is
            (w.dense_header("d", 99, (2,), data[:8]), data[:8], "EDTYPE")]
        for header, body, status in refusals:
            with pytest.raises(w.PeerError) as e:
                c.put(header, body)
            assert (e.value.status, e.value.request_id) == (status, c.next_id - 1)
            assert {x["name"] for x in c.list()} == {"t", "up"}  # nothing left behind
        c.goodbye()
    with hurray.serve({"t": np.zeros(1)}) as s, w.Client(s.address) as c:
        assert c.hello["flags"] & w.S_READ_ONLY
        with pytest.raises(w.PeerError) as e:
            c.put(w.dense_header("up", 10, (2,), data[:8]), data[:8])
        assert e.value.message == "this server is read-only: uploads are refused"
        assert [x["name"] for x in c.list()] == ["t"]


def test_rows_of_a_strided_source_keep_its_strides(server):
    """§6.3: ROWS is one buffer of exactly the bytes the rows address (alignment 64), strides
    kept and the byte offset re-based onto it."""
    cols = DENSE["cols"]()
    with client(server) as c:
        t = c.get("cols", w.ROWS, 1, 3)
        (desc, _, _), = c.header[3]
    (part,) = t.node.parts
    assert (part.shape, part.strides, part.byte_offset) == ((2, 3), (6, 2), 0)
    assert [b.size for b in t.buffers] == [(6 + 2 * 2 + 1) * 4]
    assert part.to_numpy(t.buffers).tobytes() == np.ascontiguousarray(cols[1:3]).tobytes()
    assert desc["alignment"] == 64


def test_an_oversized_request_is_refused_from_its_header(one):
    with raw(one) as sock:
        recv(sock)
        sock.sendall(w.HEADER.pack(w.MAGIC, w.TENSOR_REQUEST, 0, 0, 1, (1 << 16) + 1))
        e = assert_closing_error(sock, "ELIMIT")
        assert "65537" in e.message and "65536" in e.message  # §2.4: the length and the limit


# ============================================================================================
# hurray's client against a server written from the spec (§4.2, §5, §6.4, §6.6)
# ============================================================================================


class fake_server:
    """A one-connection server on loopback (or, given `unix`, a path, on a Unix socket) that
    reads the CLIENT_HELLO, answers `hello` and then answers each request with
    `answer(request_id)`, frame by frame from the spec. An answer (and a hello) is bytes, or a
    list of steps: bytes to send, a (bytes, [fd]) pair sent with the descriptors attached
    (SCM_RIGHTS), or a number of seconds to sleep. `requests` collects (type, payload)."""

    def __init__(self, hello, answer=None, unix=None):
        if unix is None:
            self.listener = socket.create_server(("127.0.0.1", 0))
            self.address = "127.0.0.1:%d" % self.listener.getsockname()[1]
        else:
            self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.listener.bind(str(unix))
            self.listener.listen(1)
            self.address = f"unix:{unix}"
        self.hello, self.answer, self.client_hello, self.requests = hello, answer, None, []
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    @staticmethod
    def send(sock, steps):
        for step in [steps] if isinstance(steps, bytes) else steps:
            if isinstance(step, bytes):
                sock.sendall(step)
            elif isinstance(step, tuple):
                socket.send_fds(sock, [step[0]], step[1])
            else:
                time.sleep(step)

    def run(self):
        sock, _ = self.listener.accept()
        with sock:
            try:
                peer = w.Client.over(sock)
                self.client_hello = w.parse_hello(peer.recv_frame()[3], "CLIENT_HELLO")
                self.send(sock, self.hello(self.client_hello))
                while True:
                    type_, _, rid, payload = peer.recv_frame()
                    self.requests.append((type_, payload))
                    if type_ == w.GOODBYE or self.answer is None:
                        return
                    self.send(sock, self.answer(rid))
            except (w.SpecWireError, OSError):
                return

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.listener.close()
        self.thread.join(10)


def server_hello(version=w.VERSION, flags=0, max_frame=None, devices=((0, b""),), rid=0):
    def make(client_hello):
        mf = client_hello["max_frame"] if max_frame is None else max_frame
        return w.frame(w.SERVER_HELLO, rid, w.hello(version, flags, mf, bytes(32), devices))
    return make


@pytest.mark.parametrize("hello, raises, code", [
    (server_hello(version=(1, 4)), hurray.WireError, 18),  # above the client's 1.3
    (server_hello(version=(2, 0)), hurray.UnsupportedError, 13),
    (server_hello(max_frame=1 << 30), hurray.WireError, 18),
    (server_hello(flags=w.S_FD_PASSING), hurray.WireError, 18),
    (server_hello(devices=[(0, b""), (0xF3, b"npu_x")]), hurray.DescriptorError, 6),
    (server_hello(devices=[(0, b""), (0x42, b"")]), hurray.DescriptorError, 6),
    (server_hello(rid=5), hurray.WireError, 18),
    (server_hello(flags=w.S_AUTH), hurray.AuthenticationError, 19),
], ids=["minor", "major", "max_frame", "fd_on_tcp", "private", "reserved", "id", "auth"])
def test_the_client_refuses_the_hellos_the_spec_refuses(hello, raises, code):
    with fake_server(hello) as s:
        with pytest.raises(raises) as e:
            hurray.connect(s.address)
        assert e.value.code == code


def answer_x(data=b"\x00\x00\x80?\x00\x00\x00@", check=0, start=0, minor=w.VERSION[1],
             flip=None):
    """9.5's TENSOR_HEADER for [1.0, 2.0] (9.10's in a session of `minor` 2; `flip`: the
    payload byte to change after the check is made) and one DATA frame of `data` from stream
    byte `start` (a BYTES response when `start` or `check` is given)."""
    good = b"\x00\x00\x80?\x00\x00\x00@"

    def answer(rid):
        header = bytearray(w.tensor_frame(w.TENSOR_HEADER, rid,
                                          w.dense_header("x", 10, (2,), good), minor=minor))
        if flip is not None:
            header[24 + flip] ^= 0x10
        return bytes(header) + w.frame(w.DATA, rid, struct.pack("<IIQ", 0, check, start) + data,
                                       w.END)
    return answer


def test_the_client_checks_what_the_spec_says_it_checks():
    with fake_server(server_hello(), answer_x()) as s, hurray.connect(s.address) as c:
        assert np.asarray(c.get("x")).tolist() == [1.0, 2.0]  # the golden tensor itself
    with fake_server(server_hello(), answer_x(b"\x00\x00\x80?\x00\x00\x01@")) as s, \
            hurray.connect(s.address) as c:
        with pytest.raises(hurray.ChecksumError):  # §6.4: a corrupted byte is not delivered
            c.get("x")
    with fake_server(server_hello(), answer_x(check=1)) as s, hurray.connect(s.address) as c:
        with pytest.raises(hurray.WireError):  # a check outside a 1.1 BYTES response
            c.get("x")
    chunk = b"\x00\x80?\x00"
    good = spec_file.xxh3(chunk) & 0xFFFFFFFF
    with fake_server(server_hello(), answer_x(chunk, good, 1)) as s, \
            hurray.connect(s.address) as c:
        assert bytes(c.read("x", 1, 5)) == chunk  # 9.9
    with fake_server(server_hello(), answer_x(chunk, good ^ 1, 1)) as s, \
            hurray.connect(s.address) as c:
        with pytest.raises(hurray.ChecksumError):
            c.read("x", 1, 5)


def test_the_client_checks_the_header_check_of_1_2():
    """§6.3.1 from the client's side: a 1.2 server's header with its check is taken; one byte
    of it changed in transit -- the name, which every other check passes, or the node's dtype --
    is a ChecksumError naming the header checksum, and the connection is closed. A 1.1 server
    sends no check and is served as before (§8)."""
    with fake_server(server_hello(version=(1, 2)), answer_x(minor=2)) as s, \
            hurray.connect(s.address) as c:
        assert c.info["version"] == (1, 2)
        assert np.asarray(c.get("x")).tolist() == [1.0, 2.0]
    for flip in (0x48, 0x51):  # 9.5's name "x", its node's dtype float32
        with fake_server(server_hello(version=(1, 2)), answer_x(flip=flip, minor=2)) as s, \
                hurray.connect(s.address) as c:
            with pytest.raises(hurray.ChecksumError,
                               match=r"TENSOR_HEADER header checksum mismatch .*corrupted"):
                c.get("x")
            with pytest.raises(hurray.ConnectionLostError):  # not trusted further: closed
                c.list()
    with fake_server(server_hello(version=(1, 1)), answer_x(minor=1)) as s, \
            hurray.connect(s.address) as c:
        assert c.info["version"] == (1, 1)
        assert np.asarray(c.get("x")).tolist() == [1.0, 2.0]


def test_a_put_whose_header_check_fails_ends_the_connection():
    """§6.3.1, §6.7: the server refuses a 1.2 PUT whose header_check does not match with ERROR
    (request id 0) HURRAY_ECHECKSUM, closes, and serves nothing of it; a 1.1 PUT has none."""
    data = np.arange(4, dtype=np.float32).tobytes()
    header = w.dense_header("up", 10, (4,), data)
    with hurray.serve({"t": np.zeros(1)}, uploads=True) as s:
        with w.Client(s.address) as c:
            with pytest.raises(w.PeerError) as e:
                c.put(header, data, check=bytes(8))
            assert (e.value.status, e.value.request_id) == ("ECHECKSUM", 0)
            assert e.value.message.startswith("PUT header checksum mismatch")
            assert c.closed()
        with w.Client(s.address, version=(1, 1)) as c:
            c.put(header, data)
            assert c.get("up").buffers[0].data == data
        with w.Client(s.address) as c:
            c.put(w.dense_header("up2", 10, (4,), data), data)
            assert {x["name"] for x in c.list()} == {"t", "up", "up2"}


def test_the_client_checks_the_header_answers_its_request():
    """§6.3: the (checked) header must answer the request -- the tensor asked for and, for ROWS,
    that many rows -- so a TENSOR_REQUEST changed in transit is caught too. The fake server
    answers every request with "x" = [1.0, 2.0]."""
    with fake_server(server_hello(), answer_x()) as s, hurray.connect(s.address) as c:
        with pytest.raises(hurray.WireError, match="answered with tensor 'x' of 2 rows, not what"):
            c.get("y")
    with fake_server(server_hello(), answer_x()) as s, hurray.connect(s.address) as c:
        with pytest.raises(hurray.WireError, match="answered with tensor 'x' of 2 rows, not what"):
            c.get("x", slice=(0, 1))


# ============================================================================================
# hurray's client against hostile servers (issue 20: ADR-078)
# ============================================================================================

X = b"\x00\x00\x80?\x00\x00\x00@"  # float32 [1.0, 2.0]


def fd_answer(fd, kind, name="x"):
    """9.5's TENSOR_HEADER for tensor `name`, then its one buffer as a DATA_FD frame of `kind`
    (§6.6) with descriptor `fd` attached."""
    ref = struct.pack("<IB3xQQ", 0, kind, 0, len(X))
    return lambda rid: [w.tensor_frame(w.TENSOR_HEADER, rid, w.dense_header(name, 10, (2,), X)),
                        (w.frame(w.DATA_FD, rid, ref, w.END), [fd])]


# The child of the descriptor tests: a server hands over a memfd made with `flags`, labelled
# FILE (kind 0), then shrinks it under the client (a mapping of it would die of SIGBUS) and
# writes into what it held (a mapping would show the new bytes: NaN, unchecked).
FD_CHILD = """
import os, struct, tempfile
import numpy as np
import hurray
from test_wire_spec import X, fake_server, fd_answer, server_hello, w
fd = os.memfd_create("x", {flags})
os.write(fd, X)
{seal}
path = os.path.join(tempfile.mkdtemp(), "s.sock")
with fake_server(server_hello(flags=w.S_FD_PASSING), fd_answer(fd, 0), unix=path) as s, \\
        hurray.connect(s.address) as c:
    try:
        t = c.get("x")
    except hurray.WireError as e:
        print("refused:", e)
    else:
        try:
            os.pwrite(fd, struct.pack("<f", float("nan")) * 2, 0)
            os.ftruncate(fd, 0)
        except PermissionError:
            print("sealed")
        print("kept:", np.asarray(t).tolist())
"""


def fd_child(flags, seal=""):
    from conftest import run_isolated
    return run_isolated(FD_CHILD.format(flags=flags, seal=seal))


def test_an_unsealed_memfd_labelled_file_is_refused():
    """A memfd that takes seals but has none, sent as a FILE: the check is on the descriptor
    (F_GET_SEALS), not on the frame's kind."""
    out = fd_child("os.MFD_ALLOW_SEALING")
    assert "refused: buffer 0: the 'file' (a memfd that takes seals) sent is not sealed" in out


def test_unsealable_shared_memory_is_copied_not_mapped():
    """A memfd made without MFD_ALLOW_SEALING answers F_GET_SEALS with F_SEAL_SEAL alone, as a
    tmpfs file does: it cannot be refused as unsealed, so it is read into new memory, and
    shrinking or writing it afterwards changes nothing the client holds."""
    assert "kept: [1.0, 2.0]" in fd_child("0")


def test_a_sealed_memfd_labelled_file_is_mapped():
    seal = ("import fcntl; fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE | "
            "fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)")
    out = fd_child("os.MFD_ALLOW_SEALING", seal)
    assert "sealed" in out and "kept: [1.0, 2.0]" in out  # nobody could change it


def list_answer(entries, frames=1, pause=None):
    """LIST_RESULT frames (§6.1): `frames` copies of one frame of `entries` (bytes each), the
    last with END."""
    payload = struct.pack("<II", len(entries), 0) + b"".join(entries)
    return lambda rid: [w.frame(w.LIST_RESULT, rid, payload)] * (frames - 1) + \
        [w.frame(w.LIST_RESULT, rid, payload, w.END)]


def list_entry(name=b"a", layout=0, dtype=10, shape=(2,)):
    return (struct.pack("<HBBIQB7x", len(name), layout, dtype, 1, 8, len(shape)) +
            struct.pack(f"<{len(shape)}q", *shape) + name + bytes(spec_file.pad8(len(name)) -
                                                               len(name)))


@pytest.mark.parametrize("entry, field", [
    (list_entry(dtype=0xEE), "unknown dtype code 238"),
    (list_entry(layout=0x7F), "unknown layout code 127"),
], ids=["dtype", "layout"])
def test_unknown_codes_in_a_list_are_a_wire_error(entry, field):
    with fake_server(server_hello(), list_answer([entry])) as s, hurray.connect(s.address) as c:
        with pytest.raises(hurray.WireError, match=f"listed tensor 'a': {field}"):
            c.list()


LIST_CHILD = """
import hurray
from conftest import peak_rss_kib
from test_wire_spec import fake_server, list_answer, list_entry, server_hello
entry = list_entry(shape=())  # 32 bytes: the smallest entry
per = (65536 - 8) // len(entry)
with fake_server(server_hello(), list_answer([entry] * per, frames={frames})) as s, \\
        hurray.connect(s.address) as c:
    before = peak_rss_kib()
    try:
        print("listed", len(c.list()))
    except hurray.LimitError as e:
        print("refused:", e)
    grown = peak_rss_kib() - before
    print("grown MiB", grown // 1024)
"""


def test_a_hostile_list_is_bounded_in_entries_and_memory():
    """32 MiB of LIST_RESULT (2^20 entries of 32 bytes) drove the client to 1.5 GB: it stops at
    2^18 entries, its array then 198 MiB, and the connection is closed."""
    from conftest import run_isolated
    out = run_isolated(LIST_CHILD.format(frames=512))
    assert "refused: a list of more than 262144 tensors" in out, out
    grown = int(out.split("grown MiB")[1])
    print(f"RSS growth under a 32 MiB hostile LIST: {grown} MiB")
    if not SANITIZED:  # ASan's redzones and quarantine are no allocation of ours
        assert grown < 320, out


def test_a_list_of_more_bytes_than_the_client_takes_is_refused():
    long = list_entry(name=b"n" * 255, shape=(1,) * 64)  # 792 bytes: 82 per frame
    per = (65536 - 8) // len(long)
    with fake_server(server_hello(), list_answer([long] * per, frames=1100)) as s, \
            hurray.connect(s.address) as c:
        with pytest.raises(hurray.LimitError, match="a list of more than 64 MiB"):
            c.list()


def claimed_header(rid, nbytes, data=b"\0"):
    """A TENSOR_HEADER (§6.3) of a DENSE uint8 tensor whose header claims `nbytes` (total_bytes
    and its one buffer's byte_size) while the server means to send `data`."""
    h = bytearray(w.dense_header("x", 1, (nbytes,), data))
    struct.pack_into("<Q", h, 8, nbytes)       # total_bytes
    struct.pack_into("<Q", h, 32 + 8, nbytes)  # the buffer descriptor's byte_size
    return w.tensor_frame(w.TENSOR_HEADER, rid, bytes(h))


def test_a_header_claiming_a_huge_tensor_is_refused_before_any_allocation():
    """Issue 24 item 4: a TENSOR_HEADER of 2^40 bytes was asked straight from the allocator. A
    client takes at most max_tensor_bytes (default: the machine's physical memory) and refuses
    a larger claim with LimitError before allocating; the caller can raise or lower it."""
    answer = lambda rid: [claimed_header(rid, 1 << 40)]  # noqa: E731
    with fake_server(server_hello(), answer) as s, hurray.connect(s.address) as c:
        with pytest.raises(hurray.LimitError, match=r"tensor 'x' of 1099511627776 bytes exceeds "
                                                    r"this client's max_tensor_bytes of \d+"):
            c.get("x")
    with fake_server(server_hello(), answer_x()) as s, \
            hurray.connect(s.address, max_tensor_bytes=4) as c:
        with pytest.raises(hurray.LimitError, match="max_tensor_bytes of 4: raise it"):
            c.get("x")  # 8 bytes
    with fake_server(server_hello(), answer_x()) as s, \
            hurray.connect(s.address, max_tensor_bytes=8) as c:
        assert np.asarray(c.get("x")).tolist() == [1.0, 2.0]
    with pytest.raises(hurray.InvalidArgumentError, match="max_tensor_bytes"):
        hurray.connect("127.0.0.1:1", max_tensor_bytes=-1)


CLAIM_CHILD = """
import struct
import hurray
from conftest import peak_rss_kib
from test_wire_spec import claimed_header, fake_server, server_hello, w
MIB = 1 << 20
def answer(rid):  # claims 2 GiB, sends 2 MiB of it, then nothing more
    data = w.frame(w.DATA, rid, struct.pack("<IIQ", 0, 0, 0) + bytes(2 * MIB))
    return [claimed_header(rid, 2048 * MIB), data]
with fake_server(server_hello(), answer) as s, hurray.connect(s.address, timeout=2) as c:
    before = peak_rss_kib()
    try:
        c.get("x")
    except hurray.TimedOutError as e:
        print("stopped:", e)
    print("grown MiB", (peak_rss_kib() - before) // 1024)
"""


def test_memory_follows_the_data_not_the_header():
    """A header claiming 2 GiB followed by 2 MiB of DATA and silence: the client's memory grows
    with what arrived, not with what was claimed (the buffer's pages are touched as DATA
    fills them)."""
    from conftest import run_isolated
    out = run_isolated(CLAIM_CHILD)
    assert "stopped: the call took longer than its timeout" in out, out
    grown = int(out.split("grown MiB")[1])
    print(f"RSS growth under a 2 GiB claim with 2 MiB sent: {grown} MiB")
    if not SANITIZED:
        assert grown < 64, out


def patched_header(rid, field):
    """9.5's TENSOR_HEADER of "x" with one code the spec does not define."""
    h = bytearray(w.dense_header("x", 10, (2,), X))
    node = h.find(struct.pack("<BBBBIiIq", 0, 10, 1, 1, 0, 0, 0, 0))
    if field == "dtype":
        h[node + 1] = 250
    elif field == "layout":
        h[node] = 0x7F
    else:
        h[0] = 0x42  # the header's device
    return [w.tensor_frame(w.TENSOR_HEADER, rid, bytes(h))]


@pytest.mark.parametrize("field, message", [
    ("dtype", "the server's TENSOR_HEADER: tensor 'x': dtype code 250 is not a dtype"),
    ("layout", "the server's TENSOR_HEADER: tensor 'x': layout 127 is unknown"),
    ("device", "the header says 0x42"),
])
def test_unknown_codes_in_a_header_are_a_wire_error(field, message):
    """Issue 24 item 4: every code the client does not know is a hurray.WireError naming the
    field, never SystemError; the connection is not trusted further."""
    with fake_server(server_hello(), lambda rid: patched_header(rid, field)) as s, \
            hurray.connect(s.address) as c:
        with pytest.raises(hurray.WireError, match=re.escape(message)):
            c.get("x")


def test_an_error_of_an_unknown_status_is_a_wire_error():
    answer = lambda rid: w.frame(w.ERROR, rid, w.error(250, "weird"))  # noqa: E731
    with fake_server(server_hello(), answer) as s, hurray.connect(s.address) as c:
        with pytest.raises(hurray.WireError, match="ERROR of unknown status 250: weird"):
            c.get("x")


def test_names_and_urls_with_a_nul_are_refused():
    """The C API takes them NUL-terminated: "x\\0y" would be "x". Nothing is sent."""
    with fake_server(server_hello(), answer_x()) as s, hurray.connect(s.address) as c:
        with pytest.raises(hurray.InvalidArgumentError, match=r"get\(\): name .* a NUL"):
            c.get("x\0y")
        with pytest.raises(hurray.InvalidArgumentError, match=r"read\(\): name .* a NUL"):
            c.read("x\0y", 0, 4)
        assert np.asarray(c.get("x")).tolist() == [1.0, 2.0]  # the session goes on
        with pytest.raises(hurray.InvalidArgumentError, match=r"connect\(\): url .* a NUL"):
            hurray.connect(s.address + "\0junk")
    assert [t for t, _ in s.requests] == [w.TENSOR_REQUEST, w.GOODBYE]
    with pytest.raises(hurray.InvalidArgumentError, match=r"tls\['server_name'\] .* a NUL"):
        hurray.connect("hurrays://127.0.0.1:1", tls={"server_name": "good\0evil"})
    with pytest.raises(hurray.InvalidArgumentError, match=r"serve\(\): tensor name .* a NUL"):
        hurray.serve({"x\0y": np.float32([1])})
    with pytest.raises(hurray.InvalidArgumentError, match=r"serve\(\): address .* a NUL"):
        hurray.serve(address="127.0.0.1:0\0junk")
    with hurray.serve(uploads=True) as server, hurray.connect(server.address) as c:
        with pytest.raises(hurray.InvalidArgumentError, match=r"put\(\): name .* a NUL"):
            c.put("x\0y", np.float32([1]))
        assert c.list() == []


def dribble(data, pause):
    """`data` one byte at a time, `pause` seconds apart: progress, but never enough."""
    steps = []
    for i in range(len(data)):
        steps += [data[i:i + 1], pause]
    return steps


def test_the_timeout_is_a_deadline_for_the_whole_call():
    """One byte every 0.25 s kept get(timeout=2) blocked for as long as the server liked: the
    timeout now bounds each call as a whole (connect, list, get)."""
    def slow_data(rid):
        head = w.tensor_frame(w.TENSOR_HEADER, rid, w.dense_header("x", 10, (2,), X))
        return [head] + dribble(w.frame(w.DATA, rid, struct.pack("<IIQ", 0, 0, 0) + X, w.END),
                                0.25)
    with fake_server(server_hello(), slow_data) as s, hurray.connect(s.address, timeout=1) as c:
        start = time.monotonic()
        with pytest.raises(hurray.TimedOutError, match="took longer than its timeout of 1000 ms"):
            c.get("x")
        assert time.monotonic() - start < 1.8
    hello = server_hello()
    with fake_server(lambda h: dribble(hello(h), 0.25)) as s:
        start = time.monotonic()
        with pytest.raises(hurray.TimedOutError, match="took longer than its timeout"):
            hurray.connect(s.address, timeout=1)
        assert time.monotonic() - start < 1.8
    slow_list = list_answer([list_entry()])
    with fake_server(server_hello(), lambda rid: dribble(slow_list(rid)[0], 0.25)) as s, \
            hurray.connect(s.address, timeout=1) as c:
        start = time.monotonic()
        with pytest.raises(hurray.TimedOutError):
            c.list()
        assert time.monotonic() - start < 1.8


def test_idle_timeout_bounds_a_wait_without_progress():
    stalled = answer_x()
    with fake_server(server_hello(), lambda rid: [1.5] + [stalled(rid)]) as s, \
            hurray.connect(s.address, idle_timeout=0.3) as c:
        with pytest.raises(hurray.TimedOutError, match="no progress for 300 ms"):
            c.get("x")
    with fake_server(server_hello(), lambda rid: [0.5] + [stalled(rid)]) as s, \
            hurray.connect(s.address) as c:  # no deadline by default: a slow answer arrives
        assert np.asarray(c.get("x")).tolist() == [1.0, 2.0]


# ============================================================================================
# 1.3: METADATA (§6.8, ADR-098), against older peers both ways
# ============================================================================================

UNIT_M = bytes.fromhex("0601000000040075 6e69740401000000 6d".replace(" ", ""))


def test_golden_metadata_frames():
    """§9.11 encoded and decoded by the client written from the spec."""
    request, result, server = GOLDEN["9.11"]
    assert w.frame(w.METADATA, 5, w.metadata_request("w")) == request
    assert [w.frame(w.METADATA_RESULT, 5, p, w.END) for p in w.metadata_results(UNIT_M)] == \
        [result]
    assert w.parse_metadata_results([result[24:]]) == {"unit": "m"}
    assert w.frame(w.METADATA, 6, w.metadata_request()) == server


def served_file(tmp_path, blob=0):
    path = str(tmp_path / "m.hurray")
    meta = {"model": "tiny"} if not blob else {"model": "tiny", "blob": "x" * blob}
    hurray.save(path, {"w": np.zeros(4, np.float32), "b": np.ones(2)}, metadata=meta,
                tensor_metadata={"w": {"unit": "m"}})
    return path


def test_the_server_sends_golden_metadata(tmp_path):
    """A 1.3 peer's METADATA gets 9.11's METADATA_RESULT byte for byte; a block of 200 kB comes
    in frames of at most 64 KiB, each with the block's length, END on the last; an unknown name
    is the request's ERROR and the session goes on."""
    with hurray.serve(served_file(tmp_path, blob=200000)) as s, \
            raw(s, w.frame(w.CLIENT_HELLO, 0, w.hello((1, 3)))) as sock:
        assert w.parse_hello(recv(sock)[3])["version"] == (1, 3)
        sock.sendall(w.frame(w.METADATA, 5, w.metadata_request("w")))
        assert frame_of(recv(sock)) == GOLDEN["9.11"][1]
        sock.sendall(w.frame(w.METADATA, 6, w.metadata_request()))
        payloads = []
        while True:
            type_, flags, rid, payload = recv(sock)
            assert (type_, rid) == (w.METADATA_RESULT, 6) and len(payload) <= 1 << 16
            payloads.append(payload)
            if flags & w.END:
                break
        assert len(payloads) == 4
        assert w.parse_metadata_results(payloads) == {"blob": "x" * 200000, "model": "tiny"}
        sock.sendall(w.frame(w.METADATA, 7, w.metadata_request("nope")))
        type_, _, rid, payload = recv(sock)
        e = w.parse_error(payload, rid)
        assert (type_, rid, e.status, e.message) == (w.ERROR, 7, "EINVAL", "no tensor named 'nope'")
        sock.sendall(w.frame(w.METADATA, 8, struct.pack("<H6x", 2) + b"b"))
        e = w.parse_error(recv(sock)[3], 8)
        assert e.status == "EPROTOCOL" and "METADATA name_length is 2" in e.message
        sock.sendall(w.frame(w.METADATA, 9, w.metadata_request("b")))
        # no metadata: the empty block, and the XXH3-64 of no bytes
        assert recv(sock)[3] == struct.pack("<IIQ", 0, 0, 0x2d06800538d394c2)


@pytest.mark.parametrize("version", [(1, 2), (1, 0)])
def test_an_older_client_is_served_as_before(tmp_path, version):
    """A 1.2 (or 1.0) client -- the spec's, speaking that minor -- is answered in its minor,
    lists and fetches as before, and a METADATA it should not send ends its session as its
    minor's server would end it."""
    with hurray.serve(served_file(tmp_path)) as s:
        with w.Client(s.address, version=version) as c:
            assert c.version == version
            assert [t["name"] for t in c.list()] == ["w", "b"]
        with raw(s, w.frame(w.CLIENT_HELLO, 0, w.hello(version))) as sock:
            assert w.parse_hello(recv(sock)[3])["version"] == version
            sock.sendall(w.frame(w.METADATA, 1, w.metadata_request("w")))
            assert_closing_error(sock, "EPROTOCOL", "METADATA needs protocol 1.3; this session "
                                 "speaks 1.%d" % version[1])


def test_metadata_from_the_client(tmp_path):
    """Client.metadata is the first served file's, Client.tensor_metadata(name) a tensor's (the
    map get() delivers in its record); none is {}; a missing name is a KeyError and the client
    goes on; a server of tensors in memory has {}."""
    other = str(tmp_path / "other.hurray")
    hurray.save(other, {"o": np.ones(1)}, metadata={"second": True})
    with hurray.serve([served_file(tmp_path), other]) as s, hurray.connect(s.address) as c:
        assert c.info["version"] == (1, 3)
        assert c.metadata == {"model": "tiny"}
        assert c.tensor_metadata("w") == {"unit": "m"}
        assert c.tensor_metadata("b") == {} and c.tensor_metadata("o") == {}
        with pytest.raises(hurray.KeyError, match="no tensor named 'nope'"):
            c.tensor_metadata("nope")
        with pytest.raises(hurray.InvalidArgumentError):
            c.tensor_metadata("a\0b")
        with pytest.raises(TypeError):
            c.tensor_metadata(3)
        assert np.asarray(c.get("w")).tolist() == [0.0] * 4
    with hurray.serve({"m": np.zeros(2)}) as s, hurray.connect(s.address) as c:
        assert c.metadata == {} and c.tensor_metadata("m") == {}


def test_metadata_of_a_safetensors_file(tmp_path):
    """A served safetensors file's __metadata__ is the server's metadata."""
    st = pytest.importorskip("safetensors.numpy")
    path = str(tmp_path / "w.safetensors")
    st.save_file({"w": np.ones(3, np.float32)}, path, metadata={"format": "np"})
    with hurray.serve(path) as s, hurray.connect(s.address) as c:
        assert c.metadata == {"format": "np"}
        assert c.tensor_metadata("w") == {}


def test_a_new_client_against_an_older_server():
    """A 1.2 server (a scripted one, from the spec): the client sends no METADATA and says why;
    everything else is as before."""
    with fake_server(server_hello(version=(1, 2)), answer_x(minor=2)) as s, \
            hurray.connect(s.address) as c:
        assert c.info["version"] == (1, 2)
        with pytest.raises(hurray.UnsupportedError, match="speaks wire protocol 1.2, which "
                           "carries no metadata requests: they need 1.3"):
            c.metadata
        with pytest.raises(hurray.UnsupportedError):
            c.tensor_metadata("x")
        assert np.asarray(c.get("x")).tolist() == [1.0, 2.0]
    assert [t for t, _ in s.requests] == [w.TENSOR_REQUEST, w.GOODBYE]


def hostile_metadata(*payloads, rid=None, flags=None):
    def answer(request_id):
        last = len(payloads) - 1
        return b"".join(w.frame(w.METADATA_RESULT, request_id if rid is None else rid, p,
                                (w.END if i == last else 0) if flags is None else flags)
                        for i, p in enumerate(payloads))
    return answer


def mr(total, data, reserved=0, check=None):
    """A METADATA_RESULT payload: `data` of a block of `total` bytes whose check is UNIT_M's."""
    return struct.pack("<IIQ", total, reserved, spec_file.xxh3(UNIT_M) if check is None
                       else check) + data


@pytest.mark.parametrize("answer, error, message", [
    (hostile_metadata(mr(0xFFFFFFFF, b"")), hurray.WireError, "exceeds 16777216 bytes"),
    (hostile_metadata(mr(17, UNIT_M[:9])), hurray.WireError, "ends after 9 of the block's 17"),
    (hostile_metadata(mr(17, UNIT_M), flags=0), hurray.WireError, "goes on after 17"),
    (hostile_metadata(mr(17, UNIT_M[:9]), mr(18, UNIT_M[9:])), hurray.WireError,
     "metadata_length or metadata_check changed within one answer (17 then 18 bytes)"),
    (hostile_metadata(mr(3, UNIT_M)), hurray.WireError, "carries 17 bytes of a 3-byte block"),
    (hostile_metadata(mr(17, UNIT_M, reserved=1)), hurray.WireError,
     "reserved bytes are not zero"),
    (hostile_metadata(mr(17, UNIT_M, check=1)), hurray.ChecksumError,
     "METADATA_RESULT metadata checksum mismatch (metadata_check 0x0000000000000001"),
    (hostile_metadata(mr(5, b"\x06\xff\xff\xff\x7f",
                         check=spec_file.xxh3(b"\x06\xff\xff\xff\x7f"))),
     hurray.WireError, "METADATA_RESULT metadata: "),
    (hostile_metadata(mr(17, UNIT_M), rid=99), hurray.WireError, "expected METADATA_RESULT"),
])
def test_a_hostile_metadata_answer_is_refused(answer, error, message):
    """A 1.3 server's malformed or corrupted METADATA_RESULT is refused naming the field (never
    a SystemError, nor an allocation of what a length claims), and the connection is closed."""
    with fake_server(server_hello(version=(1, 3)), answer) as s, hurray.connect(s.address) as c:
        with pytest.raises(error, match=re.escape(message)):
            c.tensor_metadata("w")
        with pytest.raises(hurray.ConnectionLostError):
            c.list()


def test_ls_json_shows_metadata(tmp_path):
    """`hurray ls --json`: the server's metadata and each tensor's; null against a 1.2
    server."""
    with hurray.serve(served_file(tmp_path)) as s:
        out = subprocess.run(["hurray", "ls", "--json", s.address], capture_output=True,
                             text=True, check=True).stdout
    assert json.loads(out) == {"metadata": {"model": "tiny"}, "tensors": [
        {"name": "w", "layout": "dense", "dtype": "float32", "shape": [4], "buffers": 1,
         "data_bytes": 16, "metadata": {"unit": "m"}},
        {"name": "b", "layout": "dense", "dtype": "float64", "shape": [2], "buffers": 1,
         "data_bytes": 16, "metadata": {}}]}
    empty_list = lambda rid: w.frame(w.LIST_RESULT, rid, struct.pack("<II", 0, 0), w.END)  # noqa
    with fake_server(server_hello(version=(1, 2)), empty_list) as f:
        out = subprocess.run(["hurray", "ls", "--json", f.address], capture_output=True,
                             text=True, check=True).stdout
    assert json.loads(out) == {"metadata": None, "tensors": []}
