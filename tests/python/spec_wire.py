"""A second, independent client of the Hurray wire protocol, written from
docs/spec/interchange.md (with buffer-protocol.md §5 for the 16-byte buffer descriptor) alone.

It exists to show that the normative spec is precise enough for a second implementation: the
tests in test_wire_spec.py run it against hurray's own server and compare what it receives with
what was served, byte for byte, and its frames with the spec's golden examples (§9). It uses
only the standard library (sockets, struct, hmac), NumPy (through spec_file's arrays) and the
``xxhash`` package (XXH3-64); DATA_FD descriptors (§6.6) arrive by SCM_RIGHTS and are
checked and mapped as §6.6 says; the tensor records of Appendix A are decoded here, into
spec_file's nodes, and checked with spec_file's validator. It shares no code with hurray.

Every refusal is a :class:`SpecWireError` whose ``status`` is the ``HURRAY_*`` status the spec
names; an ERROR frame from the server is a :class:`PeerError` carrying its code and message.
"""

import fcntl
import hashlib
import hmac
import mmap
import os
import socket
import stat
import struct

from spec_file import (_Cursor, SpecArray, SpecBuffer, SpecError, SpecFileError, SpecNode,
                       SpecTensor, LAYOUTS, ROLES, _decode_metadata, _extent, _name, _validate,
                       pad8, xxh3)

MAGIC = b"\x89HRW"
HEADER = struct.Struct("<4sBBHQQ")  # §2: magic, type, flags, reserved, request_id, length
VERSION = (1, 3)  # the spec's current version, which this client speaks unless told another
HEADER_CHECK_MINOR = 2  # §6.3.1: the first minor whose tensor headers end with header_check
METADATA_MINOR = 3  # §6.8: the first minor with METADATA requests

# §2.1
CLIENT_HELLO, SERVER_HELLO, AUTH, AUTH_OK = 0x01, 0x02, 0x03, 0x04
LIST, LIST_RESULT = 0x10, 0x11
METADATA, METADATA_RESULT = 0x12, 0x13  # 1.3
TENSOR_REQUEST, TENSOR_HEADER, DATA, DATA_FD = 0x20, 0x21, 0x22, 0x23
PUT, PUT_OK, ERROR, GOODBYE = 0x30, 0x31, 0x40, 0x50
TYPES = {CLIENT_HELLO, SERVER_HELLO, AUTH, AUTH_OK, LIST, LIST_RESULT, METADATA,
         METADATA_RESULT, TENSOR_REQUEST, TENSOR_HEADER, DATA, DATA_FD, PUT, PUT_OK, ERROR,
         GOODBYE}
END = 0x01
END_TYPES = {LIST_RESULT, METADATA_RESULT, TENSOR_HEADER, PUT, DATA, DATA_FD}  # §2.2

# §4.1 hello flags
C_FD_PASSING = 0x1
S_AUTH, S_READ_ONLY, S_FD_PASSING = 0x1, 0x2, 0x4

# §6.2
WHOLE, ROWS, BYTES = 0, 1, 2
FALLBACK = 0x1

# §7.1: the codes a peer sends, and the validation statuses a refused PUT is sent as they are
# (their values are hurray.h's HurrayStatus, §1).
STATUS = {1: "EINVAL", 2: "ENOMEM", 4: "ELIMIT", 6: "EDEVICE", 13: "EUNSUPPORTED",
          17: "ECHECKSUM", 18: "EPROTOCOL", 19: "EAUTH", 20: "EDENIED", 21: "ETIMEOUT",
          3: "EOVERFLOW", 5: "EDTYPE", 7: "EMEMCLASS", 8: "ESYNC", 9: "EALIGN", 10: "ELAYOUT",
          11: "EBOUNDS", 14: "EFORMAT"}
CODES = {name: code for code, name in STATUS.items()}

SMALL_LIMIT = 1 << 16   # §2.4: every frame but DATA, TENSOR_HEADER and PUT
HEADER_LIMIT = 1 << 26  # TENSOR_HEADER and PUT
MAX_BUFFERS = 65536


class SpecWireError(SpecError):
    """Something interchange.md says a client must refuse (see :class:`spec_file.SpecError`)."""


class PeerError(SpecWireError):
    """An ERROR frame (§7.1) the server sent.

    Parameters
    ----------
    code : int
        Its HurrayStatus code.
    request_id : int
        Its request id: 0 when it ends the connection (§7.2).
    message : str
        Its message.
    """

    def __init__(self, code, request_id, message):
        super().__init__(STATUS.get(code, "EPROTOCOL"), message)
        self.code, self.request_id, self.message = code, request_id, message


# ============================================================================================
# Encoding (§2, §4, §6, §7)
# ============================================================================================


def frame(type_, request_id=0, payload=b"", flags=0):
    """A whole frame: the 24-byte header of §2 and its payload."""
    return HEADER.pack(MAGIC, type_, flags, 0, request_id, len(payload)) + bytes(payload)


def header_check(type_, request_id, payload, flags=0):
    """header_check of §6.3.1: XXH3-64 of the frame before it -- the 24-byte header whose
    length counts the check's 8 bytes, then `payload` (the fields of §6.3)."""
    return struct.pack("<Q", xxh3(HEADER.pack(MAGIC, type_, flags, 0, request_id,
                                              len(payload) + 8) + bytes(payload)))


def tensor_frame(type_, request_id, payload, flags=0, minor=VERSION[1]):
    """A TENSOR_HEADER or PUT frame of a session of minor `minor`: from 1.2 on its payload ends
    with header_check (§6.3.1)."""
    if minor >= HEADER_CHECK_MINOR:
        payload = bytes(payload) + header_check(type_, request_id, payload, flags)
    return frame(type_, request_id, payload, flags)


def strip_header_check(type_, request_id, payload, flags, minor):
    """The fields of a received TENSOR_HEADER or PUT (§6.3.1): in a session of minor >= 2, its
    header_check verified before anything else and removed."""
    if minor < HEADER_CHECK_MINOR:
        return payload
    name = {TENSOR_HEADER: "TENSOR_HEADER", PUT: "PUT"}[type_]
    if len(payload) < 8:
        _refuse("EPROTOCOL", f"{name} of {len(payload)} bytes has no room for its header "
                "checksum")
    fields, check = payload[:-8], payload[-8:]
    if check != header_check(type_, request_id, fields, flags):
        _refuse("ECHECKSUM", f"{name} header checksum mismatch: corrupted in transit")
    return fields


def hello(version=VERSION, flags=0, max_frame=4 << 20, nonce=bytes(32), devices=((0, b""),)):
    """A CLIENT_HELLO or SERVER_HELLO payload (§4.1); `devices` are (tag, name) pairs."""
    out = struct.pack("<HHIQ", version[0], version[1], flags, max_frame) + bytes(nonce)
    out += struct.pack("<H6x", len(devices))
    for tag, name in devices:
        out += bytes([tag, len(name)]) + name
    return out


def metadata_request(name=""):
    """A METADATA payload (§6.8, 1.3): tensor `name`'s metadata, or with "" the server's."""
    raw = name.encode("utf-8")
    return struct.pack("<H6x", len(raw)) + raw


def metadata_results(block, limit=SMALL_LIMIT):
    """The METADATA_RESULT payloads of a metadata block (§6.8): each frame's share of it after
    the block's length and XXH3-64, at most `limit` bytes of payload each."""
    step = limit - 16
    head = struct.pack("<IIQ", len(block), 0, xxh3(block))
    return [head + block[i:i + step] for i in range(0, max(len(block), 1), step)]


def parse_metadata_results(payloads):
    """The map of a METADATA answer's payloads, in order (§6.8): every frame names the same
    length, and together they carry exactly that many bytes."""
    block = b""
    for p in payloads:
        if len(p) < 16:
            _refuse("EPROTOCOL", "METADATA_RESULT is truncated")
        total, reserved, check = struct.unpack_from("<IIQ", p)
        if reserved or total > 1 << 24 or p[:16] != payloads[0][:16]:
            _refuse("EPROTOCOL", "METADATA_RESULT metadata_length, reserved or metadata_check")
        block += p[16:]
        if len(block) > total:
            _refuse("EPROTOCOL", "METADATA_RESULT carries more than its block")
    if len(block) != total:
        _refuse("EPROTOCOL", "METADATA_RESULT ends before its block does")
    if xxh3(block) != check:
        _refuse("ECHECKSUM", "METADATA_RESULT metadata checksum mismatch")
    try:
        return _decode_metadata(block, "METADATA_RESULT metadata")
    except SpecError as e:
        _refuse("EPROTOCOL", str(e))


def tensor_request(name, device=0, range_=WHOLE, start=0, stop=0, resume=0, flags=0):
    """A TENSOR_REQUEST payload (§6.2)."""
    raw = name.encode("utf-8")
    return struct.pack("<BBHHHqqQ", device, range_, flags, len(raw), 0, start, stop,
                       resume) + raw


def error(code, message):
    """An ERROR payload (§7.1)."""
    raw = message.encode("utf-8")
    return struct.pack("<IHH", code, len(raw), 0) + raw


def dense_header(name, dtype, shape, data, device=0, resume=0, checksum=None):
    """A TENSOR_HEADER or PUT payload (§6.3) for a DENSE row-major tensor of one CPU buffer of
    `data` (its Appendix A record without strides or metadata); `checksum` overrides the
    buffer's XXH3-64."""
    raw = name.encode("utf-8")
    ndim = len(shape)
    extents = struct.pack(f"<{ndim}q", *shape)
    record = (struct.pack("<HHI", len(raw), 0, 0) + raw + bytes(pad8(len(raw)) - len(raw))
              + struct.pack("<BBBBIiIq", 0, dtype, ndim, 1, 0, 0, 0, 0) + extents
              + struct.pack("<BBBBIQ", dtype, ndim, 0, 0, 0, 0) + extents)
    descriptor = struct.pack("<BBBBHHQ", device, 0, 0, 6, 0, 0, len(data))
    entry = descriptor + struct.pack("<QB7x", xxh3(data) if checksum is None else checksum, 0)
    return struct.pack("<B3xIQQII", device, 1, len(data), resume, len(record), 0) + entry + \
        record


def mac(secret, client_nonce, server_nonce, side):
    """MAC_C (`side` "client") or MAC_S ("server") of §4.3."""
    label = b"hurray-wire-1 " + side.encode("ascii")
    return hmac.new(secret, label + client_nonce + server_nonce, hashlib.sha256).digest()


# ============================================================================================
# Decoding
# ============================================================================================


def _refuse(status, message):
    raise SpecWireError(status, message)


def _zero(raw, what):
    if any(raw):
        _refuse("EPROTOCOL", f"{what}: reserved bytes are not zero")


def parse_hello(payload, what="SERVER_HELLO"):
    """The fields of a hello (§4.1) and its device entries, checked as §4.1 and §5 say."""
    if len(payload) < 56:
        _refuse("EPROTOCOL", f"{what} is truncated")
    major, minor, flags, max_frame = struct.unpack_from("<HHIQ", payload)
    nonce = payload[16:48]
    (count,) = struct.unpack_from("<H", payload, 48)
    _zero(payload[50:56], what)
    if not 1 <= count <= 256:
        _refuse("EPROTOCOL", f"{what}: device_count {count}")
    if not 1 << 16 <= max_frame <= 1 << 30:
        _refuse("EPROTOCOL", f"{what}: max_frame {max_frame}")
    devices, at = [], 56
    for _ in range(count):
        if at + 2 > len(payload):
            _refuse("EPROTOCOL", f"{what}: device entries are truncated")
        tag, n = payload[at], payload[at + 1]
        name = payload[at + 2:at + 2 + n]
        if len(name) != n:
            _refuse("EPROTOCOL", f"{what}: device entries are truncated")
        at += 2 + n
        if tag in (t for t, _ in devices):
            _refuse("EPROTOCOL", f"{what}: device tag {tag:#04x} appears twice")
        devices.append((tag, name))
    if at != len(payload):
        _refuse("EPROTOCOL", f"{what} has trailing bytes")
    for tag, name in devices:  # §5, the rule at setup; this client registers no private tag
        if tag <= 0x08:
            if name:
                _refuse("EPROTOCOL", f"{what}: named tag {tag:#04x} with a name")
        elif tag == 0xFF:
            _refuse("EDEVICE", "device tag 0xff is invalid")
        elif tag >= 0xF0:
            _refuse("EDEVICE", f"private device tag {tag:#04x} ('{name.decode()}') is not "
                    "registered here")
        else:
            _refuse("EDEVICE", f"device tag {tag:#04x} is reserved (0x09..0xef)")
    return {"version": (major, minor), "flags": flags, "max_frame": max_frame, "nonce": nonce,
            "devices": devices}


def parse_error(payload, request_id):
    """A PeerError from an ERROR payload (§7.1)."""
    if len(payload) < 8:
        _refuse("EPROTOCOL", "ERROR is truncated")
    code, n, reserved = struct.unpack_from("<IHH", payload)
    if reserved or code == 0 or n > 1024 or len(payload) != 8 + n:
        _refuse("EPROTOCOL", "malformed ERROR")
    try:
        message = payload[8:].decode("utf-8")
    except UnicodeDecodeError as e:  # §7.1: an incomplete last character is dropped
        if e.reason != "unexpected end of data":
            _refuse("EPROTOCOL", "malformed ERROR: its message is not UTF-8")
        message = payload[8:8 + e.start].decode("utf-8")
    return PeerError(code, request_id, message)


def parse_list_result(payload):
    """The entries of one LIST_RESULT frame (§6.1), as dicts."""
    if len(payload) < 8:
        _refuse("EPROTOCOL", "LIST_RESULT is truncated")
    count, reserved = struct.unpack_from("<II", payload)
    if reserved:
        _refuse("EPROTOCOL", "LIST_RESULT: reserved is not zero")
    if count > (len(payload) - 8) // 24:
        _refuse("EPROTOCOL", f"LIST_RESULT: {count} entries cannot fit")
    entries, at = [], 8
    for _ in range(count):
        if at + 24 > len(payload):
            _refuse("EPROTOCOL", "LIST_RESULT is truncated")
        n, layout, dtype, buffers, data_bytes, ndim = struct.unpack_from("<HBBIQB", payload, at)
        _zero(payload[at + 17:at + 24], "LIST_RESULT entry")
        if ndim > 64:
            _refuse("EPROTOCOL", f"LIST_RESULT: ndim {ndim}")
        at += 24
        if at + 8 * ndim + pad8(n) > len(payload):
            _refuse("EPROTOCOL", "LIST_RESULT is truncated")
        shape = struct.unpack_from(f"<{ndim}q", payload, at)
        if any(e < 0 for e in shape):
            _refuse("EPROTOCOL", "LIST_RESULT: a negative extent")
        at += 8 * ndim
        try:
            name = _name(payload[at:at + n], "a listed name")
        except SpecFileError as e:
            _refuse("EPROTOCOL", str(e))
        _zero(payload[at + n:at + pad8(n)], "LIST_RESULT name padding")
        at += pad8(n)
        entries.append({"name": name, "layout": LAYOUTS[layout] if layout < len(LAYOUTS)
                        else layout, "dtype": dtype, "buffers": buffers,
                        "data_bytes": data_bytes, "shape": tuple(shape)})
    if at != len(payload):
        _refuse("EPROTOCOL", "LIST_RESULT has trailing bytes")
    return entries


def parse_descriptor(raw):
    """A 16-byte buffer descriptor (buffer-protocol.md §5.3, and READY for a wire reader)."""
    tag, mclass, sync, exponent, device_id, peer, size = struct.unpack("<BBBBHHQ", raw)
    if not 6 <= exponent <= 30:
        _refuse("EALIGN", f"alignment exponent {exponent}")
    if tag > 0x08:
        _refuse("EDEVICE", f"device tag {tag:#04x}")
    if mclass > 3 or (tag == 0 and mclass != 0):
        _refuse("EMEMCLASS", f"memory class {mclass}")
    if sync > 3 or (tag == 0 and sync != 0):
        _refuse("ESYNC", f"sync mode {sync}")
    if peer and mclass != 3:
        _refuse("EINVAL", "peer_device_id without PEER")
    if sync != 0:
        _refuse("ESYNC", "a wire descriptor that is not READY")
    return {"tag": tag, "class": mclass, "alignment": 1 << exponent, "device_id": device_id,
            "size": size}


def decode_record(raw, buffers):
    """A tensor record of Appendix A: (name, root node, metadata), validated (A.4) against
    `buffers` (SpecBuffer with their sizes and roles)."""
    c = _Cursor(raw, 0, len(raw), "the record")
    n, reserved, meta_len = c.u16(), c.u16(), c.u32()
    if reserved:
        _refuse("EFORMAT", "the record: reserved is not zero")
    if meta_len > 1 << 24:
        _refuse("ELIMIT", f"metadata of {meta_len} bytes")
    name = _padded_name(c, n, "the record's name")
    node = _node(c, 0)
    metadata = _decode_metadata(c.take(meta_len), "the record's metadata")
    if c.at != c.end:
        _refuse("EFORMAT", "the record has trailing bytes")
    _validate(node, buffers, 0, [0])
    return name, node, metadata


def _padded_name(c, n, what):
    raw = c.take(pad8(n))
    _zero(raw[n:], what)
    return _name(raw[:n], what)


def _node(c, depth):
    """A node (A.1), its parts (A.2) and children (A.3)."""
    layout, dtype, ndim, nparts, flags, axis, nchildren, block_size = (
        c.u8(), c.u8(), c.u8(), c.u8(), c.u32(), struct.unpack("<i", c.take(4))[0], c.u32(),
        c.i64())
    if ndim > 64 or nparts > 3 or nchildren > 65536:
        _refuse("ELIMIT", f"a node of ndim {ndim}, {nparts} parts, {nchildren} children")
    if layout >= len(LAYOUTS):
        _refuse("ELAYOUT", f"unknown layout {layout}")
    shape = tuple(_extent(c.u64()) for _ in range(ndim))
    parts = []
    for _ in range(nparts):
        pdtype, pndim, pflags, preserved, buffer, offset = (c.u8(), c.u8(), c.u8(), c.u8(),
                                                            c.u32(), c.u64())
        if pndim > 64:
            _refuse("ELIMIT", f"a part of ndim {pndim}")
        if pflags & ~1 or preserved or (pflags and pndim == 0):
            _refuse("EFORMAT", "a part's flags or reserved byte")
        pshape = tuple(_extent(c.u64()) for _ in range(pndim))
        strides = tuple(c.i64() for _ in range(pndim)) if pflags & 1 else None
        parts.append(SpecArray(buffer, pdtype, pshape, strides, offset))
    children = []
    for _ in range(nchildren):
        n = c.u16()
        _zero(c.take(6), "a child's reserved bytes")
        name = _padded_name(c, n, "a child's name")
        if depth + 1 > 8:
            _refuse("ELIMIT", "children nested deeper than 8")
        children.append((name, _node(c, depth + 1)))
    return SpecNode(LAYOUTS[layout], dtype, shape, flags, axis, block_size, parts, children)


def parse_tensor_header(payload):
    """A TENSOR_HEADER (§6.3): (device, total_bytes, resume_offset, buffer entries, record)."""
    if len(payload) < 32:
        _refuse("EPROTOCOL", "TENSOR_HEADER is truncated")
    device, count, total, resume, record_length = struct.unpack_from("<B3xIQQI", payload)
    _zero(payload[1:4] + payload[28:32], "TENSOR_HEADER")
    if count > MAX_BUFFERS:
        _refuse("ELIMIT", f"{count} buffers")
    if len(payload) != 32 + 32 * count + record_length:
        _refuse("EPROTOCOL", "TENSOR_HEADER: the payload does not end after the record")
    entries = []
    for i in range(count):
        at = 32 + 32 * i
        try:
            desc = parse_descriptor(payload[at:at + 16])
        except SpecWireError as e:
            _refuse(e.status, f"buffer {i}: {e}")
        checksum, role = struct.unpack_from("<QB", payload, at + 16)
        _zero(payload[at + 25:at + 32], f"buffer {i}")
        if desc["tag"] != device:
            _refuse("EPROTOCOL", f"buffer {i} is not on device {device:#04x}")
        if role >= len(ROLES):
            _refuse("EFORMAT", f"buffer {i}: role {role}")
        entries.append((desc, checksum, role))
    if sum(d["size"] for d, _, _ in entries) != total:
        _refuse("EPROTOCOL", "total_bytes is not the sum of the buffers")
    if resume > total:
        _refuse("EPROTOCOL", "resume_offset past total_bytes")
    record = payload[32 + 32 * count:]
    return device, total, resume, entries, record


# ============================================================================================
# The client
# ============================================================================================


class Client:
    """One connection to a server: setup (§3, §4), LIST, TENSOR_REQUEST and GOODBYE.

    Parameters
    ----------
    address : str
        ``unix:PATH`` or ``HOST:PORT``.
    secret : bytes, optional
        The shared secret of §4.3.
    version : tuple of int
        The (major, minor) version to offer.
    max_frame : int
        The largest DATA payload (less its 16-byte fixed part) to accept.
    fd_passing : bool
        On a Unix socket, ask for DATA_FD (§6.6).
    devices : sequence of (int, bytes)
        The (tag, name) device entries of the hello (§4.1): the devices answers may come on,
        besides the CPU, which is implied (§6.2).
    """

    def __init__(self, address, secret=None, version=VERSION, max_frame=4 << 20,
                 fd_passing=False, devices=((0, b""),)):
        if address.startswith("unix:"):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect(address[5:])
        else:
            host, port = address.removeprefix("hurray://").rsplit(":", 1)
            self.sock = socket.create_connection((host, int(port)))
        self.sock.settimeout(10)
        self.next_id, self.fds, self.fd_frames = 1, [], 0
        self.fd_passing = fd_passing and address.startswith("unix:")
        try:
            self._setup(secret, version, max_frame, devices)
        except BaseException:
            self.sock.close()
            raise

    @classmethod
    def over(cls, sock, max_frame=1 << 20):
        """A client on `sock` whose setup its caller does by hand (frame by frame)."""
        c = cls.__new__(cls)
        c.sock, c.max_frame, c.fds, c.fd_frames, c.next_id = sock, max_frame, [], 0, 1
        return c

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._close_fds()
        self.sock.close()

    def _close_fds(self):
        for fd in self.fds:
            os.close(fd)
        self.fds = []

    def send(self, data):
        self.sock.sendall(data)

    def _exact(self, n):
        out = bytearray()
        space = socket.CMSG_SPACE(struct.calcsize("i"))
        while len(out) < n:
            chunk, ancillary, _, _ = self.sock.recvmsg(min(n - len(out), 1 << 20), space)
            for level, kind, raw in ancillary:  # SCM_RIGHTS: kept for the frame to claim
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    usable = len(raw) - len(raw) % 4
                    self.fds += struct.unpack(f"{usable // 4}i", raw[:usable])
            if not chunk:
                raise SpecWireError("ECONNECTION", "the connection closed")
            out += chunk
        return bytes(out)

    def closed(self):
        """True when the server has closed the connection (§7.2: after an ERROR with id 0)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def recv_frame(self):
        """The next frame as (type, flags, request_id, payload), its header checked (§2)."""
        magic, type_, flags, reserved, request_id, length = HEADER.unpack(self._exact(24))
        if self.fds and type_ != DATA_FD or len(self.fds) > 1:
            self._close_fds()  # §6.6 check 1: one descriptor, with a DATA_FD frame only
            _refuse("EPROTOCOL", f"a file descriptor with frame type {type_:#04x}")
        if magic != MAGIC:
            _refuse("EPROTOCOL", "bad magic")
        if type_ not in TYPES:
            _refuse("EPROTOCOL", f"unknown frame type {type_:#04x}")
        if reserved or flags & ~END or (flags & END and type_ not in END_TYPES):
            _refuse("EPROTOCOL", "reserved flags or bytes")
        limit = {DATA: getattr(self, "max_frame", 0) + 16, TENSOR_HEADER: HEADER_LIMIT,
                 DATA_FD: 24 if getattr(self, "fd_granted", False) else 0,
                 PUT: HEADER_LIMIT}.get(type_, SMALL_LIMIT)
        if length > limit:
            _refuse("ELIMIT", f"frame type {type_:#04x} of {length} bytes (limit {limit})")
        return type_, flags, request_id, self._exact(length)

    def _expect(self, request_id, *types):
        type_, flags, rid, payload = self.recv_frame()
        if type_ == ERROR and rid in (0, request_id):
            raise parse_error(payload, rid)
        if type_ not in types or rid != request_id:
            _refuse("EPROTOCOL", f"frame type {type_:#04x} for request {rid}")
        return type_, flags, payload

    def _setup(self, secret, version, max_frame, devices):
        client_nonce = os.urandom(32) if secret is not None else bytes(32)
        flags = C_FD_PASSING if self.fd_passing else 0
        self.send(frame(CLIENT_HELLO, 0, hello(version, flags, max_frame, client_nonce,
                                               devices)))
        _, _, payload = self._expect(0, SERVER_HELLO)
        h = parse_hello(payload)
        if h["version"][0] != version[0]:
            _refuse("EUNSUPPORTED", f"server speaks {h['version'][0]}.{h['version'][1]}")
        if h["version"][1] > version[1]:
            _refuse("EPROTOCOL", "the server answered a greater minor version")
        if h["max_frame"] > max_frame:
            _refuse("EPROTOCOL", "the server's max_frame exceeds the offer")
        if h["flags"] & ~(S_AUTH | S_READ_ONLY | S_FD_PASSING):
            _refuse("EPROTOCOL", "reserved SERVER_HELLO flags")
        if h["flags"] & S_FD_PASSING and not self.fd_passing:
            _refuse("EPROTOCOL", "FD_PASSING granted but not asked for")
        self.fd_granted = bool(h["flags"] & S_FD_PASSING)
        self.hello, self.version, self.max_frame = h, h["version"], h["max_frame"]
        if h["flags"] & S_AUTH:
            if secret is None:
                _refuse("EAUTH", "the server needs a shared secret")
            self.send(frame(AUTH, 0, mac(secret, client_nonce, h["nonce"], "client")))
            _, _, payload = self._expect(0, AUTH_OK)
            if not hmac.compare_digest(payload,
                                       mac(secret, client_nonce, h["nonce"], "server")):
                _refuse("EAUTH", "the server does not know the secret")
        elif secret is not None:
            _refuse("EAUTH", "the server did not ask for the secret")

    def request_id(self):
        rid, self.next_id = self.next_id, self.next_id + 1
        return rid

    def list(self):
        """LIST (§6.1): every entry of every LIST_RESULT frame up to END."""
        rid = self.request_id()
        self.send(frame(LIST, rid))
        entries = []
        while True:
            _, flags, payload = self._expect(rid, LIST_RESULT)
            entries += parse_list_result(payload)
            if flags & END:
                return entries

    def get(self, name, range_=WHOLE, start=0, stop=0, device=0, flags=0, received=b""):
        """TENSOR_REQUEST (§6.2) and its answer (§6.3, §6.4).

        Parameters
        ----------
        received : bytes
            Resume (§6.4): the stream bytes an earlier attempt received (from `start` for
            BYTES); the request asks for the rest and the checksums cover both.

        Returns
        -------
        SpecTensor or bytes
            WHOLE and ROWS: the tensor, every buffer's checksum verified. BYTES: stream bytes
            [start, stop), every frame's check verified (1.1; a 1.0 session has none, §6.4).
        """
        rid = self.request_id()
        self.send(frame(TENSOR_REQUEST, rid, tensor_request(name, device, range_, start, stop,
                                                            len(received), flags)))
        type_, hflags, payload = self._expect(rid, TENSOR_HEADER)
        payload = strip_header_check(type_, rid, payload, hflags, self.version[1])
        dev, total, resume, entries, record = parse_tensor_header(payload)
        self.header = (dev, total, resume, entries)  # the last response's, for its caller
        if resume != len(received):
            _refuse("EPROTOCOL", "resume_offset is not the request's")
        buffers = [SpecBuffer(ROLES[role], 0, d["size"], checksum, b"")
                   for d, checksum, role in entries]
        try:
            tname, node, metadata = decode_record(record, buffers)
        except SpecFileError as e:
            raise SpecWireError(e.status, str(e)) from None
        if tname != name or (range_ == ROWS and node.shape[:1] != (stop - start,)):
            _refuse("EPROTOCOL", f"the header answers tensor '{tname}' {node.shape}, not the "
                    "request")  # §6.3
        first, last = (start, stop) if range_ == BYTES else (0, total)
        # The stream (§6.4): (buffer, offset within it) of every stream byte still expected,
        # and the bytes each buffer already holds from an earlier attempt.
        runs, data, at = [], [], 0
        for i, b in enumerate(buffers):
            lo, hi = max(first, at), min(last, at + b.size)
            earlier = max(0, min(hi, first + len(received)) - lo)
            data.append(bytearray(received[lo - first:lo - first + earlier]) if lo < hi
                        else bytearray())
            if lo + earlier < hi:
                runs.append((i, lo - at, hi - lo))
            at += b.size
        done = bool(hflags & END)
        if done != (not runs):
            _refuse("EPROTOCOL", "END on the TENSOR_HEADER does not match the stream")
        expect = 0
        while not done:
            type_, fflags, payload = self._expect(rid, DATA, DATA_FD)
            if type_ == DATA_FD:
                if range_ != WHOLE or received or dev != 0 or expect >= len(runs):
                    self._close_fds()
                    _refuse("EPROTOCOL", "DATA_FD where §6.6 allows none")
                i = runs[expect][0]
                data[i] = bytearray(self._mapped(payload, i, buffers[i], entries[i][0]))
                expect += 1
                done = bool(fflags & END)
                if done != (expect == len(runs)):
                    _refuse("EPROTOCOL", "END does not end the stream")
                continue
            if len(payload) < 17:
                _refuse("EPROTOCOL", "DATA is truncated")
            buffer, check, offset = struct.unpack_from("<IIQ", payload)
            chunk = payload[16:]
            if expect >= len(runs):
                _refuse("EPROTOCOL", "DATA past the end of the stream")
            i, base, size = runs[expect]
            if buffer != i or offset != base + len(data[i]) or len(chunk) > size - len(data[i]):
                _refuse("EPROTOCOL", f"DATA for buffer {buffer} offset {offset} is not the "
                        "next run")
            if range_ == BYTES and self.version[1] >= 1:
                if check != xxh3(chunk) & 0xFFFFFFFF:
                    _refuse("ECHECKSUM", f"tensor '{tname}': a frame's check does not match")
            elif check:
                _refuse("EPROTOCOL", "check is not zero")
            data[i] += chunk
            if len(data[i]) == size:
                expect += 1
            done = bool(fflags & END)
            if done != (expect == len(runs)):
                _refuse("EPROTOCOL", "END does not end the stream")
        if range_ == BYTES:
            return b"".join(bytes(d) for d in data)
        for i, b in enumerate(buffers):
            b.data = bytes(data[i])
            if xxh3(b.data) != b.checksum:
                _refuse("ECHECKSUM", f"tensor '{tname}' buffer {i}: checksum mismatch")
        return SpecTensor(tname, buffers, node, metadata)

    def _mapped(self, payload, i, buffer, desc):
        """The bytes of a DATA_FD frame for buffer `i`, after the checks of §6.6."""
        if not self.fds:
            _refuse("EPROTOCOL", f"buffer {i}: DATA_FD without its descriptor")
        (fd,) = self.fds
        self.fds = []
        try:
            if len(payload) != 24:
                _refuse("EPROTOCOL", f"buffer {i}: DATA_FD of {len(payload)} bytes")
            number, kind, offset, length = struct.unpack("<IB3xQQ", payload)
            _zero(payload[5:8], f"buffer {i}: DATA_FD")
            if number != i or length != buffer.size or kind > 1:
                _refuse("EPROTOCOL", f"buffer {i}: DATA_FD names buffer {number}, kind {kind}, "
                        f"{length} bytes")
            if offset + length >= 1 << 63:
                _refuse("EPROTOCOL", f"buffer {i}: file_offset + length overflows")
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size < offset + length:
                _refuse("EPROTOCOL", f"buffer {i}: not a regular file of the bytes it names")
            if kind == 1:
                seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
                if ~seals & (fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK):
                    _refuse("EPROTOCOL", f"buffer {i}: the memfd is not sealed")
            if desc["alignment"] > mmap.PAGESIZE or offset % desc["alignment"]:
                _refuse("EPROTOCOL", f"buffer {i}: file_offset {offset} breaks the alignment")
            page = offset - offset % mmap.PAGESIZE
            with mmap.mmap(fd, offset + length - page, mmap.MAP_PRIVATE,
                           mmap.PROT_READ | mmap.PROT_WRITE, offset=page) as m:
                self.fd_frames += 1
                return m[offset - page:]
        finally:
            os.close(fd)

    def put(self, header, data, frame_size=1 << 16, check=None):
        """PUT (§6.7): the header (with its header_check in a 1.2 session, §6.3.1; `check`
        overrides it), then `data` in DATA frames; returns the answer (PUT_OK's request id, or
        raises the PeerError)."""
        rid = self.request_id()
        flags = END if not data else 0
        if check is not None:
            self.send(frame(PUT, rid, bytes(header) + check, flags))
        else:
            self.send(tensor_frame(PUT, rid, header, flags, self.version[1]))
        for at in range(0, len(data), frame_size):
            chunk = data[at:at + frame_size]
            last = at + frame_size >= len(data)
            self.send(frame(DATA, rid, struct.pack("<IIQ", 0, 0, at) + chunk, END if last else 0))
        self._expect(rid, PUT_OK)
        return rid

    def goodbye(self):
        """GOODBYE (§7.3): the server answers GOODBYE and closes."""
        self.send(frame(GOODBYE))
        type_, _, _, payload = self.recv_frame()
        if type_ != GOODBYE or payload:
            _refuse("EPROTOCOL", f"frame type {type_:#04x} in answer to GOODBYE")
        if not self.closed():
            _refuse("EPROTOCOL", "the server did not close after GOODBYE")


__all__ = ["Client", "SpecWireError", "PeerError", "frame", "hello", "tensor_request", "error",
           "dense_header", "header_check", "tensor_frame", "strip_header_check",
           "mac", "parse_hello", "parse_list_result", "parse_tensor_header", "decode_record"]
