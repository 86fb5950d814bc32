"""A second, independent reader and a minimal writer of the Hurray file format, written from
docs/spec/file-format.md (with dtypes.md and buffer-protocol.md §8, which it refers to) alone.

It exists to show that the normative spec is precise enough for a second implementation: the
tests in test_file_spec.py compare it with hurray's own reader and writer, byte for byte and
field for field, and check that both refuse the files the spec says a reader must refuse. It
uses only the standard library, NumPy (to build arrays from bytes) and the ``xxhash`` package
(XXH3-64, the hash the spec names); it shares no code with hurray.

The reader does everything a reader may defer (file-format.md §9, "Verifying the whole file")
at once: every chunk, every record, every bucket, the data's checksums and padding. Each
refusal is a :class:`SpecFileError` whose ``status`` is the ``HURRAY_*`` status the spec names.
"""

import math
import struct
from dataclasses import dataclass, field

import numpy as np
import xxhash

MAGIC = b"\x89HRY\r\n\x1a\n"
VERSION = (2, 2)
HEADER_SIZE = 64
INDEX_HEADER_SIZE = 64
INDEX_LIMIT = 1 << 28
MAX_TENSORS = 1 << 20
MAX_FILE_BUFFERS = 1 << 24
MAX_BUCKET_BITS = 20
MAX_METADATA = 1 << 24  # a tensor's metadata block (and the wire's)
MAX_FILE_METADATA = 1 << 26  # the file's own
MAX_METADATA_DEPTH = 16
MAX_BUFFERS = 65536
MAX_NDIM = 64
MAX_PARTS = 3
MAX_CHILDREN = 65536
MAX_DEPTH = 8
MAX_NODES = 1 << 20
MAX_DIM = 1 << 62
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
U64_MAX = (1 << 64) - 1

# dtypes.md §3: code -> (name, kind, bits).
DTYPES = {
    1: ("bool", "bool", 8), 2: ("int8", "signed", 8), 3: ("int16", "signed", 16),
    4: ("int32", "signed", 32), 5: ("int64", "signed", 64), 6: ("uint8", "unsigned", 8),
    7: ("uint16", "unsigned", 16), 8: ("uint32", "unsigned", 32), 9: ("uint64", "unsigned", 64),
    10: ("float32", "float", 32), 11: ("float64", "float", 64),
    12: ("complex64", "complex", 64), 13: ("complex128", "complex", 128),
    32: ("float16", "float", 16), 33: ("bfloat16", "float", 16),
    34: ("float8_e4m3fn", "float", 8), 35: ("float8_e5m2", "float", 8),
    36: ("float8_e4m3fnuz", "float", 8), 37: ("float8_e5m2fnuz", "float", 8),
    38: ("float8_e8m0fnu", "float", 8), 39: ("float8_e3m4", "float", 8),
    40: ("float8_e4m3", "float", 8), 41: ("float8_e4m3b11fnuz", "float", 8),
    42: ("float6_e2m3fn", "float", 6), 43: ("float6_e3m2fn", "float", 6),
    44: ("float4_e2m1fn", "float", 4), 45: ("complex32", "complex", 32),
    64: ("int4", "signed", 4), 65: ("uint4", "unsigned", 4), 66: ("int2", "signed", 2),
    67: ("uint2", "unsigned", 2), 68: ("uint1", "unsigned", 1),
}
DTYPE_CODES = {name: code for code, (name, _, _) in DTYPES.items()}

# buffer-protocol.md §8.3 and §8.5.
LAYOUTS = ["dense", "per_channel", "block", "sparse_coo", "sparse_csr", "paged", "composite"]
ROLES = ["values", "scales", "zero_points", "mins", "indices", "indptr", "pages", "page_table",
         "mixed"]
COALESCED = 1

# Metadata value types (file-format.md §7).
M_BOOL, M_INT64, M_FLOAT64, M_STRING, M_LIST, M_MAP, M_NULL, M_INTEGER = 1, 2, 3, 4, 5, 6, 7, 8
MAX_INTEGER_TEXT = 1024
INT64 = range(-(1 << 63), 1 << 63)


class SpecError(ValueError):
    """Something a spec under docs/spec/ says an implementation must refuse.

    Parameters
    ----------
    status : str
        The status the spec names, without its ``HURRAY_`` prefix (``"EFORMAT"``, ...).
    message : str
        What was wrong.
    """

    def __init__(self, status, message):
        super().__init__(f"HURRAY_{status}: {message}")
        self.status = status


class SpecFileError(SpecError):
    """A file that file-format.md says a reader must refuse (see :class:`SpecError`)."""


def xxh3(data):
    """XXH3-64 of `data` (seed 0, the default secret): file-format.md §1."""
    return xxhash.xxh3_64_intdigest(bytes(data))


def pad8(n):
    return (n + 7) & ~7


def round_up(n, multiple):
    return -(-n // multiple) * multiple


def _i64(value, what):
    if not INT64_MIN <= value <= INT64_MAX:
        raise SpecFileError("EOVERFLOW", f"{what} does not fit in 64 bits")
    return value


def _name(raw, what):
    """A name (§1): 1..255 bytes of well-formed UTF-8 without U+0000."""
    if not raw:
        raise SpecFileError("EFORMAT", f"{what} is empty")
    if len(raw) > 255:
        raise SpecFileError("ELIMIT", f"{what} is longer than 255 bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecFileError("EFORMAT", f"{what} is not valid UTF-8") from None
    if "\0" in text:
        raise SpecFileError("EFORMAT", f"{what} contains U+0000")
    return text


# ============================================================================================
# Bytes
# ============================================================================================


class _Cursor:
    """Reads the fields of [start, end) of `data` in order (little-endian, §1)."""

    def __init__(self, data, start, end, what):
        self.data, self.at, self.end, self.what = data, start, end, what

    def take(self, n):
        if n > self.end - self.at:
            raise SpecFileError("EFORMAT", f"{self.what} is truncated")
        out = self.data[self.at:self.at + n]
        self.at += n
        return out

    def u8(self):
        return self.take(1)[0]

    def u16(self):
        return int.from_bytes(self.take(2), "little")

    def u32(self):
        return int.from_bytes(self.take(4), "little")

    def u64(self):
        return int.from_bytes(self.take(8), "little")

    def i64(self):
        return int.from_bytes(self.take(8), "little", signed=True)

    def varint(self, limit=U64_MAX, field="a varint"):
        """An unsigned LEB128 of at most 10 bytes and 2^64 - 1; above `limit` it is out of
        range (EFORMAT)."""
        value = 0
        for i in range(10):
            byte = self.u8()
            value |= (byte & 0x7F) << (7 * i)
            if not byte & 0x80:
                break
        else:
            raise SpecFileError("EFORMAT", f"{field} in {self.what} is longer than 10 bytes")
        if value > U64_MAX:
            raise SpecFileError("EFORMAT", f"{field} in {self.what} exceeds 2^64 - 1")
        if value > limit:
            raise SpecFileError("EFORMAT", f"{field} in {self.what} is out of range")
        return value

    def zigzag(self, field="a zigzag varint"):
        u = self.varint(field=field)
        return (u >> 1) ^ -(u & 1)


def encode_varint(value):
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_zigzag(value):
    return encode_varint(((value << 1) ^ (value >> 63)) & U64_MAX)


# ============================================================================================
# Metadata (§7)
# ============================================================================================


def _decode_metadata(raw, what, limit=MAX_METADATA):
    """The map that a metadata block of at most `limit` bytes holds; {} for an empty block."""
    if not raw:
        return {}
    if len(raw) > limit:
        raise SpecFileError("ELIMIT", f"{what} is longer than {limit} bytes")
    c = _Cursor(raw, 0, len(raw), what)
    if raw[0] != M_MAP:
        raise SpecFileError("EFORMAT", f"{what} is not a map")
    value = _decode_value(c, 1)
    if c.at != c.end:
        raise SpecFileError("EFORMAT", f"{what} has trailing bytes")
    return value


def _decode_value(c, level):
    kind = c.u8()
    if kind == M_BOOL:
        b = c.u8()
        if b > 1:
            raise SpecFileError("EFORMAT", f"a bool of {c.what} is {b}")
        return bool(b)
    if kind == M_INT64:
        return c.i64()
    if kind == M_FLOAT64:
        return struct.unpack("<d", c.take(8))[0]
    if kind == M_STRING:
        raw = c.take(c.u32())
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise SpecFileError("EFORMAT", f"a string of {c.what} is not UTF-8") from None
    if kind == M_NULL:
        if c.u8() != 0:
            raise SpecFileError("EFORMAT", f"a null of {c.what} has a nonzero byte")
        return None
    if kind == M_INTEGER:
        raw = c.take(c.u32())
        digits = raw[1:] if raw[:1] == b"-" else raw
        if (not 1 <= len(raw) <= MAX_INTEGER_TEXT or not digits or not digits.isdigit()
                or not digits.isascii() or digits[:1] == b"0" or int(raw) in INT64):
            raise SpecFileError("EFORMAT", f"an integer of {c.what} is not canonical text of "
                                "one outside int64")
        return int(raw)
    if kind in (M_LIST, M_MAP):
        if level > MAX_METADATA_DEPTH:
            raise SpecFileError("ELIMIT", f"{c.what} nests deeper than 16 levels")
        count = c.u32()
        # Every value takes at least 2 bytes, every map entry 5: a count that cannot fit is
        # refused before anything is allocated for it.
        if count * (2 if kind == M_LIST else 5) > c.end - c.at:
            raise SpecFileError("EFORMAT", f"a count of {c.what} exceeds its bytes (truncated)")
        if kind == M_LIST:
            return [_decode_value(c, level + 1) for _ in range(count)]
        out, previous = {}, None
        for _ in range(count):
            key = c.take(c.u16())
            text = _name(key, f"a key of {c.what}")
            if previous is not None and key <= previous:
                raise SpecFileError("EFORMAT", f"the keys of {c.what} are not strictly "
                                    "increasing")
            previous = key
            out[text] = _decode_value(c, level + 1)
        return out
    raise SpecFileError("EFORMAT", f"unknown metadata type {kind} in {c.what}")


def metadata_minor(value):
    """The version_minor that metadata needs (§3): 1 when it holds a null or an integer outside
    int64, else 0."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool)
                         and value not in INT64):
        return 1
    if isinstance(value, (list, tuple, dict)):
        items = value.values() if isinstance(value, dict) else value
        return max((metadata_minor(item) for item in items), default=0)
    return 0


def encode_metadata(value):
    """The metadata block (§7) of a dict: b"" for an empty one."""
    if not value:
        return b""
    out = bytearray()
    _encode_value(out, value)
    return bytes(out)


def _encode_value(out, value):
    if value is None:
        out += bytes([M_NULL, 0])
    elif isinstance(value, bool):
        out += bytes([M_BOOL, int(value)])
    elif isinstance(value, int) and value not in INT64:
        raw = str(value).encode("ascii")
        out.append(M_INTEGER)
        out += struct.pack("<I", len(raw)) + raw
    elif isinstance(value, int):
        out.append(M_INT64)
        out += struct.pack("<q", value)
    elif isinstance(value, float):
        out.append(M_FLOAT64)
        out += struct.pack("<d", value)
    elif isinstance(value, str):
        raw = value.encode("utf-8")
        out.append(M_STRING)
        out += struct.pack("<I", len(raw)) + raw
    elif isinstance(value, (list, tuple)):
        out.append(M_LIST)
        out += struct.pack("<I", len(value))
        for item in value:
            _encode_value(out, item)
    elif isinstance(value, dict):
        out.append(M_MAP)
        out += struct.pack("<I", len(value))
        for key in sorted(value, key=lambda k: k.encode("utf-8")):
            raw = key.encode("utf-8")
            out += struct.pack("<H", len(raw)) + raw
            _encode_value(out, value[key])
    else:
        raise TypeError(f"no metadata type holds {type(value).__name__}")


# ============================================================================================
# What the reader returns
# ============================================================================================


@dataclass
class SpecBuffer:
    """One buffer of a tensor's record (§6.1) and its bytes."""

    role: str
    offset: int
    size: int
    checksum: int
    data: bytes
    shared: bool = False  # the bytes of an earlier tensor's buffer (§4, 2.2)


@dataclass
class SpecArray:
    """A part (§6.3): a typed strided view of one of the tensor's buffers."""

    buffer: int
    dtype: str
    shape: tuple
    strides: tuple | None  # in elements; None: row-major contiguous
    byte_offset: int

    @property
    def bits(self):
        return DTYPES[DTYPE_CODES[self.dtype]][2]

    def row_major_strides(self):
        """The strides that absent ones mean: s[n-1] = 1, s[k] = s[k+1] * shape[k+1]."""
        strides = [1] * len(self.shape)
        for k in range(len(self.shape) - 2, -1, -1):
            strides[k] = _i64(strides[k + 1] * self.shape[k + 1], "a row-major stride")
        return tuple(strides)

    def element_bits(self):
        """The bit position of every element in row-major order (buffer-protocol.md §8.1)."""
        strides = self.strides if self.strides is not None else self.row_major_strides()
        index = np.zeros(self.shape, dtype=np.int64)
        for axis, (extent, stride) in enumerate(zip(self.shape, strides)):
            steps = np.arange(extent, dtype=np.int64) * stride
            index += steps.reshape([-1 if k == axis else 1 for k in range(len(self.shape))])
        return 8 * self.byte_offset + index.ravel() * self.bits

    def tobytes(self, buffers):
        """The elements in row-major order, packed as a contiguous run (dtypes.md §5).

        Parameters
        ----------
        buffers : list of SpecBuffer
            The tensor's buffers.

        Returns
        -------
        bytes
            ``ceil(size * bits / 8)`` bytes.
        """
        if 0 in self.shape:
            return b""
        data = np.frombuffer(buffers[self.buffer].data, dtype=np.uint8)
        bits = self.bits
        where = self.element_bits()
        if bits % 8 == 0:
            width = bits // 8
            first = where // 8
            return data[first[:, None] + np.arange(width)].tobytes()
        # A sub-byte element lies in at most two bytes: take 16 bits from its first byte.
        first = where // 8
        padded = np.concatenate([data, np.zeros(1, np.uint8)]).astype(np.uint32)
        window = padded[first] | (padded[first + 1] << 8)
        values = (window >> (where % 8).astype(np.uint32)) & ((1 << bits) - 1)
        stream = ((values[:, None] >> np.arange(bits, dtype=np.uint32)) & 1).astype(np.uint8)
        return np.packbits(stream.ravel(), bitorder="little").tobytes()

    def to_numpy(self, buffers):
        """The part as a NumPy array of its own dtype (Tier 1 dtypes and float16 only).

        Parameters
        ----------
        buffers : list of SpecBuffer
            The tensor's buffers.

        Returns
        -------
        numpy.ndarray
        """
        dtype = np.dtype(self.dtype).newbyteorder("<")
        return np.frombuffer(self.tobytes(buffers), dtype=dtype).reshape(self.shape)


@dataclass
class SpecNode:
    """A tensor descriptor (§6.2): layout, dtype, shape, parts and children."""

    layout: str
    dtype: str | None  # None for COMPOSITE
    shape: tuple
    flags: int = 0
    axis: int = 0
    block_size: int = 0
    parts: list = field(default_factory=list)
    children: dict = field(default_factory=dict)

    @property
    def coalesced(self):
        return bool(self.flags & COALESCED)


@dataclass
class SpecTensor:
    """One tensor: its name, buffers, root node and metadata."""

    name: str
    buffers: list
    node: SpecNode
    metadata: dict


@dataclass
class SpecFile:
    """Everything a file holds, as the spec defines it."""

    version: tuple
    alignment: int
    chunk_log2: int
    index_offset: int
    index_length: int
    metadata: dict
    tensors: dict  # name -> SpecTensor, in tensor order


# ============================================================================================
# The reader
# ============================================================================================


def read(data):
    """Reads and verifies a whole file as file-format.md prescribes.

    Parameters
    ----------
    data : bytes
        The file's bytes.

    Returns
    -------
    SpecFile

    Raises
    ------
    SpecFileError
        For every file the spec says a reader must refuse, with the status it names.
    """
    return _Reader(bytes(data)).read()


class _Reader:
    def __init__(self, data):
        self.data = data

    # ---- §3, §9 rows 1-9: open ---------------------------------------------------------------

    def read(self):
        d = self.data
        if d[:8] != MAGIC[:len(d[:8])]:
            raise SpecFileError("EFORMAT", "not a Hurray file (bad magic)")
        if len(d) < HEADER_SIZE:
            raise SpecFileError("EFORMAT", f"truncated: {len(d)} bytes")
        h = _Cursor(d, 8, HEADER_SIZE, "the header")
        version = (h.u16(), h.u16())
        if version[0] != VERSION[0] or version[1] > VERSION[1]:
            raise SpecFileError("EUNSUPPORTED", f"version {version[0]}.{version[1]}, this "
                                f"reader reads {VERSION[0]}.{VERSION[1]}")
        if xxh3(d[:56]) != int.from_bytes(d[56:64], "little"):
            raise SpecFileError("ECHECKSUM", "header checksum")
        alignment_log2, chunk_log2 = h.u8(), h.u8()
        reserved14 = h.u16()
        file_size, index_offset, index_length, table_checksum = h.u64(), h.u64(), h.u64(), h.u64()
        reserved48 = h.u64()
        if reserved14 or reserved48:
            raise SpecFileError("EFORMAT", "reserved header bytes are not zero")
        if not 6 <= alignment_log2 <= 21:
            raise SpecFileError("EALIGN", f"alignment_log2 {alignment_log2}")
        if not 12 <= chunk_log2 <= 28:
            raise SpecFileError("EFORMAT", f"chunk_log2 {chunk_log2}")
        if file_size != len(d):
            raise SpecFileError("EFORMAT", ("truncated" if len(d) < file_size else
                                            "trailing bytes") + f": {len(d)} != {file_size}")
        if index_length > INDEX_LIMIT:
            raise SpecFileError("ELIMIT", f"index_length {index_length}")
        chunk = 1 << chunk_log2
        chunks = -(-index_length // chunk)
        if (index_length < INDEX_HEADER_SIZE or index_offset < HEADER_SIZE
                or index_offset + index_length + 8 * chunks != file_size):
            raise SpecFileError("EFORMAT", f"index [{index_offset}, +{index_length}) does not "
                                f"end the file of {file_size} bytes")
        if index_offset % 8:
            raise SpecFileError("EALIGN", f"index_offset {index_offset}")
        table_at = index_offset + index_length
        table = d[table_at:table_at + 8 * chunks]
        if xxh3(table) != table_checksum:
            raise SpecFileError("ECHECKSUM", "index checksum: the chunk table")
        self.alignment = 1 << alignment_log2
        self.index_offset, self.index_length = index_offset, index_length
        self.index = d[index_offset:table_at]
        self.chunk, self.table = chunk, table
        self.checked_chunks = set()
        self._check_chunks(0, INDEX_HEADER_SIZE)
        self._index_header()
        # §9, "Verifying the whole file": everything a reader may defer.
        self._check_chunks(0, index_length)
        self.records = {}
        for t in range(self.tensor_count):
            self._tensor(t)
        if self.bucket(0) != 0 or self.bucket(1 << self.bucket_bits) != self.tensor_count:
            raise SpecFileError("EFORMAT", "the bucket table does not span the name table")
        for b in range(1 << self.bucket_bits):
            self._bucket(b)
        records = [self.records[t] for t in range(self.tensor_count)]
        buffers = [buf for r in records for buf in r.buffers]
        if len(buffers) != self.buffer_count:
            raise SpecFileError("EFORMAT", f"buffer_count {self.buffer_count}, the records "
                                f"hold {len(buffers)}")
        if sum(buf.size for buf in buffers) != self.data_bytes:
            raise SpecFileError("EFORMAT", f"data_bytes {self.data_bytes}")
        self._data(records)
        metadata = _decode_metadata(self.index[self.metadata_offset:self.metadata_offset
                                               + self.metadata_length], "the file metadata",
                                    MAX_FILE_METADATA)
        return SpecFile(version, self.alignment, chunk_log2, index_offset, index_length,
                        metadata, {r.name: r for r in records})

    def _check_chunks(self, start, end):
        """§5.5: each chunk of [start, end) of the index against its entry."""
        for k in range(start // self.chunk, -(-end // self.chunk)):
            if k in self.checked_chunks:
                continue
            piece = self.index[k * self.chunk:(k + 1) * self.chunk]
            if xxh3(piece) != int.from_bytes(self.table[8 * k:8 * k + 8], "little"):
                raise SpecFileError("ECHECKSUM", f"chunk {k} of the index is corrupt")
            self.checked_chunks.add(k)

    def _index_header(self):
        """§5.1: limits, reserved bytes, the tables' fit and the metadata block."""
        c = _Cursor(self.index, 0, INDEX_HEADER_SIZE, "the index header")
        tc, bc, bb, r12 = c.u32(), c.u32(), c.u32(), c.u32()
        m_offset, m_length, r28, data_bytes = c.u64(), c.u32(), c.u32(), c.u64()
        r40 = c.take(24)
        if tc > MAX_TENSORS:
            raise SpecFileError("ELIMIT", f"tensor_count {tc}")
        if bc > MAX_FILE_BUFFERS:
            raise SpecFileError("ELIMIT", f"buffer_count {bc}")
        if bb > MAX_BUCKET_BITS:
            raise SpecFileError("ELIMIT", f"bucket_bits {bb}")
        if m_length > MAX_FILE_METADATA:
            raise SpecFileError("ELIMIT", f"metadata_length {m_length}")
        if r12 or r28 or any(r40):
            raise SpecFileError("EFORMAT", "reserved bytes of the index header are not zero")
        self.t_end = INDEX_HEADER_SIZE + 4 * (tc + 1)
        self.n_end = self.t_end + 4 * tc
        self.k_end = self.n_end + 4 * ((1 << bb) + 1)
        if self.k_end > self.index_length:
            raise SpecFileError("EFORMAT", "the index is too short for its tables")
        if (m_offset != 0 if m_length == 0 else
                m_offset < self.k_end or m_offset + m_length > self.index_length):
            raise SpecFileError("EBOUNDS", "the file metadata lies outside the index heap")
        self.tensor_count, self.buffer_count, self.bucket_bits = tc, bc, bb
        self.metadata_offset, self.metadata_length, self.data_bytes = m_offset, m_length, \
            data_bytes

    def _u32_at(self, at):
        return int.from_bytes(self.index[at:at + 4], "little")

    def bucket(self, b):
        return self._u32_at(self.n_end + 4 * b)

    # ---- §5.2, §6, §4: one tensor --------------------------------------------------------------

    def _tensor(self, t):
        """Tensor t validated (§9 row 11): its record, then its bucket, which lists it."""
        tensor = self._record(t)
        b = self._bucket_of(tensor.name)
        self._bucket(b)
        if t not in (self._u32_at(self.t_end + 4 * i)
                     for i in range(self.bucket(b), self.bucket(b + 1))):
            raise SpecFileError("EFORMAT", f"tensor {t} '{tensor.name}' is missing from the "
                                "name table")
        return tensor

    def _record(self, t):
        """Tensor t's table entries (§5.2), record (§6), buffers (§4) and validity (§6.5)."""
        if t in self.records:
            return self.records[t]
        start, end = self._u32_at(INDEX_HEADER_SIZE + 4 * t), self._u32_at(
            INDEX_HEADER_SIZE + 4 * t + 4)
        if not self.k_end <= start <= end <= self.index_length:
            raise SpecFileError("EBOUNDS", f"tensor {t}: record [{start}, {end}) lies outside "
                                "the index heap")
        c = _Cursor(self.index, start, end, f"the record of tensor {t}")
        name = _name(c.take(c.u8()), f"the name of tensor {t}")
        c.what = f"the record of tensor {t} '{name}'"
        metadata_length = c.varint(0xFFFFFFFF, "metadata_length")
        buffer_count = c.varint(field="buffer_count")
        if buffer_count > MAX_BUFFERS:
            raise SpecFileError("ELIMIT", f"{c.what}: {buffer_count} buffers")
        entries = []
        for _ in range(buffer_count):
            role = c.u8()
            shared, role = bool(role & 0x80), role & 0x7F
            if role >= len(ROLES):
                raise SpecFileError("EFORMAT", f"{c.what}: unknown buffer role {role}")
            offset = c.varint(field="a buffer offset") * self.alignment
            if offset > U64_MAX:
                raise SpecFileError("EBOUNDS", f"{c.what}: a buffer offset overflows")
            size, checksum = c.varint(field="a buffer size"), c.u64()
            entries.append((ROLES[role], offset, size, checksum, shared))
        node = self._node(c, 0)
        raw_metadata = c.take(metadata_length)
        if c.at != end:
            raise SpecFileError("EFORMAT", f"{c.what} has trailing bytes")
        metadata = _decode_metadata(raw_metadata, f"the metadata of tensor {t}")
        previous_end = None
        for k, (_, offset, size, _, shared) in enumerate(entries):
            if offset < HEADER_SIZE or offset + size > self.index_offset:
                raise SpecFileError("EBOUNDS", f"{c.what}: buffer {k} lies outside the data "
                                    "region")
            if shared:
                continue
            if previous_end is not None and offset < previous_end:
                raise SpecFileError("EFORMAT", f"{c.what}: buffer {k} overlaps the buffer "
                                    "before it or is out of file order")
            previous_end = offset + size
        buffers = [SpecBuffer(role, offset, size, checksum, self.data[offset:offset + size],
                              shared)
                   for role, offset, size, checksum, shared in entries]
        _validate(node, buffers, 0, [0])
        self.records[t] = SpecTensor(name, buffers, node, metadata)
        return self.records[t]

    def _node(self, c, depth):
        """A node (§6.2) and its parts and children."""
        layout, dtype, ndim, nparts, present = c.u8(), c.u8(), c.u8(), c.u8(), c.u8()
        if ndim > MAX_NDIM:
            raise SpecFileError("ELIMIT", f"{c.what}: ndim {ndim}")
        if nparts > MAX_PARTS:
            raise SpecFileError("ELIMIT", f"{c.what}: {nparts} parts")
        if present & ~0x0F:
            raise SpecFileError("EFORMAT", f"{c.what}: reserved bits of present")
        flags = c.varint(0xFFFFFFFF, "flags") if present & 1 else 0
        axis = c.zigzag("axis") if present & 2 else 0
        if not -(1 << 31) <= axis < (1 << 31):
            raise SpecFileError("EFORMAT", f"{c.what}: axis out of range")
        block_size = c.zigzag("block_size") if present & 4 else 0
        nchildren = c.varint(field="nchildren") if present & 8 else 0
        if nchildren > MAX_CHILDREN:
            raise SpecFileError("ELIMIT", f"{c.what}: {nchildren} children")
        shape = tuple(_extent(c.varint(field="an extent")) for _ in range(ndim))
        parts = [self._part(c, dtype, shape) for _ in range(nparts)]
        children = []
        for _ in range(nchildren):
            name = _name(c.take(c.u8()), f"a child name in {c.what}")
            if depth + 1 > MAX_DEPTH:
                raise SpecFileError("ELIMIT", f"{c.what}: children nested deeper than 8")
            children.append((name, self._node(c, depth + 1)))
        if layout >= len(LAYOUTS):
            raise SpecFileError("ELAYOUT", f"{c.what}: unknown layout {layout}")
        return SpecNode(LAYOUTS[layout], dtype, shape, flags, axis, block_size, parts,
                        children)

    def _part(self, c, node_dtype, node_shape):
        """A part (§6.3); its dtype stays a code until the validator checks it."""
        flags = c.u8()
        if flags & ~0x1F:
            raise SpecFileError("EFORMAT", f"{c.what}: reserved bits of part_flags")
        dtype = c.u8() if flags & 2 else node_dtype
        shape = node_shape
        if flags & 4:
            ndim = c.u8()
            if ndim > MAX_NDIM:
                raise SpecFileError("ELIMIT", f"{c.what}: a part's ndim {ndim}")
            shape = tuple(_extent(c.varint(field="an extent")) for _ in range(ndim))
        buffer = c.varint(0xFFFFFFFF, "a part's buffer") if flags & 8 else 0
        byte_offset = c.varint(field="byte_offset") if flags & 16 else 0
        strides = None
        if flags & 1:
            if not shape:
                raise SpecFileError("EFORMAT", f"{c.what}: strides for a 0-d part")
            strides = tuple(c.zigzag("a stride") for _ in shape)
        return SpecArray(buffer, dtype, shape, strides, byte_offset)

    # ---- §5.3: buckets -----------------------------------------------------------------------

    def _bucket_of(self, name):
        h = xxh3(name.encode("utf-8"))
        return h >> (64 - self.bucket_bits) if self.bucket_bits else 0

    def _bucket(self, b):
        """Validates bucket b: its bounds, every entry's tensor, hash and order."""
        first, last = self.bucket(b), self.bucket(b + 1)
        if not first <= last <= self.tensor_count:
            raise SpecFileError("EFORMAT", f"bucket {b} is [{first}, {last})")
        previous = None
        for i in range(first, last):
            u = self._u32_at(self.t_end + 4 * i)
            if u >= self.tensor_count:
                raise SpecFileError("EFORMAT", f"name table entry {i} names tensor {u}")
            name = self._record(u).name
            raw = name.encode("utf-8")
            if self._bucket_of(name) != b:
                raise SpecFileError("EFORMAT", f"tensor {u} is listed in bucket {b}, not its own")
            key = (xxh3(raw), raw)
            if previous is not None and key <= previous:
                raise SpecFileError("EFORMAT", f"bucket {b}: duplicate tensor name or entries "
                                    "out of order")
            previous = key

    # ---- §4, §9: the data region ---------------------------------------------------------------

    def _data(self, records):
        """Buffers in file order across tensors, their checksums and zero padding."""
        at = HEADER_SIZE
        written = {}  # offset -> (size, checksum) of the unshared buffers so far
        for r in records:
            for k, buf in enumerate(r.buffers):
                if buf.shared:
                    if written.get(buf.offset) != (buf.size, buf.checksum):
                        raise SpecFileError("EFORMAT", f"buffer {k} of '{r.name}' is shared, but "
                                            "no buffer before it has its offset, size and "
                                            "checksum")
                    if xxh3(buf.data) != buf.checksum:
                        raise SpecFileError("ECHECKSUM", f"tensor '{r.name}' buffer {k}")
                    continue
                written[buf.offset] = (buf.size, buf.checksum)
                if buf.offset < at:
                    raise SpecFileError("EFORMAT", f"buffer {k} of '{r.name}' overlaps or is "
                                        "out of file order")
                if any(self.data[at:buf.offset]):
                    raise SpecFileError("EFORMAT", "padding in the data region is not zero")
                if xxh3(buf.data) != buf.checksum:
                    raise SpecFileError("ECHECKSUM", f"tensor '{r.name}' buffer {k}")
                at = buf.offset + buf.size
        if any(self.data[at:self.index_offset]):
            raise SpecFileError("EFORMAT", "padding in the data region is not zero")


def _extent(value):
    """An extent read as a u64 (§6.2): above 2^63 - 1 it is negative, which the validator
    calls an invalid argument and a file a malformed file (§9)."""
    if value > INT64_MAX:
        raise SpecFileError("EFORMAT", "a negative extent")
    if value > MAX_DIM:
        raise SpecFileError("ELIMIT", f"extent {value} exceeds 2^62")
    return value


# ============================================================================================
# §6.5: the tensor validator (buffer-protocol.md §8)
# ============================================================================================


def _known_dtype(code):
    if code not in DTYPES:
        raise SpecFileError("EDTYPE", f"unknown dtype code {code}")
    return DTYPES[code]


def _validate(node, buffers, depth, count):
    """Checks `node` against buffers of the stored sizes; turns its dtype codes into names and
    its children into a dict."""
    count[0] += 1
    if count[0] > MAX_NODES:
        raise SpecFileError("ELIMIT", "more than 2^20 nodes")
    layout = node.layout
    if node.flags & ~COALESCED:
        raise SpecFileError("EFORMAT", f"unknown tensor flags {node.flags:#x}")
    if node.flags & COALESCED and layout != "sparse_coo":
        raise SpecFileError("ELAYOUT", "COALESCED on a layout other than sparse_coo")
    ndim_range = {"dense": (0, 64), "sparse_csr": (2, 2), "composite": (0, 0)}.get(layout,
                                                                                    (1, 64))
    parts_range = {"dense": (1, 1), "per_channel": (2, 3), "block": (2, 3),
                   "sparse_coo": (2, 2), "sparse_csr": (3, 3), "paged": (2, 2),
                   "composite": (0, 0)}[layout]
    if not ndim_range[0] <= len(node.shape) <= ndim_range[1]:
        raise SpecFileError("ELAYOUT", f"{layout} of rank {len(node.shape)}")
    if not parts_range[0] <= len(node.parts) <= parts_range[1]:
        raise SpecFileError("ELAYOUT", f"{layout} with {len(node.parts)} parts")
    if layout == "composite":
        if node.dtype != 0:
            raise SpecFileError("ELAYOUT", "a composite tensor with a dtype")
        node.dtype = None
    else:
        node.dtype = _known_dtype(node.dtype)[0]
    if layout in ("per_channel", "block", "paged"):
        if not 0 <= node.axis < len(node.shape):
            raise SpecFileError("ELAYOUT", f"axis {node.axis}")
    elif node.axis:
        raise SpecFileError("ELAYOUT", f"axis {node.axis} on {layout}")
    if layout in ("block", "paged"):
        if not 1 <= node.block_size <= MAX_DIM:
            raise SpecFileError("ELAYOUT", f"block_size {node.block_size}")
    elif node.block_size:
        raise SpecFileError("ELAYOUT", f"block_size {node.block_size} on {layout}")
    for part in node.parts:
        _validate_array(part, buffers)
    _validate_parts(node)
    children = {}
    if layout == "composite":
        if not node.children:
            raise SpecFileError("ELAYOUT", "a composite tensor without children")
    elif node.children:
        raise SpecFileError("ELAYOUT", f"{layout} with children")
    for name, child in node.children:
        if name in children:
            raise SpecFileError("ELAYOUT", f"duplicate child name '{name}'")
        _validate(child, buffers, depth + 1, count)
        children[name] = child
    node.children = children


def _validate_array(part, buffers):
    """buffer-protocol.md §8.1-8.2: the buffer exists and holds every element."""
    if part.buffer >= len(buffers):
        raise SpecFileError("EFORMAT", f"a part's buffer {part.buffer} of {len(buffers)}")
    name, _, bits = _known_dtype(part.dtype)
    part.dtype = name
    if part.byte_offset > INT64_MAX // 8:
        raise SpecFileError("EOVERFLOW", f"byte_offset {part.byte_offset}")
    if 0 in part.shape:  # addresses nothing; its row-major strides are not computed
        return
    strides = part.strides if part.strides is not None else part.row_major_strides()
    low = high = 0
    for extent, stride in zip(part.shape, strides):
        reach = _i64((extent - 1) * stride, "an array's reach")
        low, high = _i64(low + min(0, reach), "L"), _i64(high + max(0, reach), "H")
    first = _i64(8 * part.byte_offset + _i64(low * bits, "L x bits"), "first")
    end = _i64(8 * part.byte_offset + _i64((high + 1) * bits, "(H + 1) x bits"), "end")
    if first < 0 or -(-end // 8) > buffers[part.buffer].size:
        raise SpecFileError("EBOUNDS", f"a part addresses bits [{first}, {end}) of a buffer "
                            f"of {buffers[part.buffer].size} bytes")


def _validate_parts(node):
    """buffer-protocol.md §8.3: each part's dtype and shape for its layout."""
    layout, shape, parts = node.layout, node.shape, node.parts

    def require(ok, what):
        if not ok:
            raise SpecFileError("ELAYOUT", f"{layout}: {what}")

    def kind(part):
        return DTYPES[DTYPE_CODES[part.dtype]][1]

    if layout == "dense":
        require(parts[0].dtype == node.dtype and parts[0].shape == shape, "values")
    elif layout in ("per_channel", "block"):
        if layout == "per_channel":
            side = (shape[node.axis],)
        else:
            side = tuple(-(-e // node.block_size) if k == node.axis else e
                         for k, e in enumerate(shape))
        require(parts[0].dtype == node.dtype and parts[0].shape == shape, "values")
        require(kind(parts[1]) == "float" and parts[1].shape == side, "scales")
        if len(parts) == 3:
            require(kind(parts[2]) in ("float", "signed", "unsigned")
                    and parts[2].shape == side, "zero points / mins")
    elif layout == "sparse_coo":
        indices, values = parts
        require(indices.dtype in ("int32", "int64") and len(indices.shape) == 2
                and indices.shape[0] == len(shape), "indices")
        require(values.dtype == node.dtype and values.shape == (indices.shape[1],), "values")
    elif layout == "sparse_csr":
        indptr, indices, values = parts
        require(indptr.dtype in ("int32", "int64") and indptr.shape == (shape[0] + 1,),
                "indptr")
        require(indices.dtype == indptr.dtype and len(indices.shape) == 1, "indices")
        require(values.dtype == node.dtype and values.shape == indices.shape, "values")
    elif layout == "paged":
        pages, table = parts
        a, rows = node.axis, node.block_size
        require(pages.dtype == node.dtype and len(pages.shape) == len(shape) - a + 1
                and pages.shape[1:] == (rows,) + shape[a + 1:], "pages")
        require(table.dtype in ("int32", "int64")
                and table.shape == shape[:a] + (-(-shape[a] // rows),), "page_table")


# ============================================================================================
# The writer
# ============================================================================================


def _name_tables(names, bucket_bits):
    """The name table and the bucket table (§5.3) of tensors named `names` (bytes)."""
    hashes = [xxh3(n) for n in names]
    order = sorted(range(len(names)), key=lambda t: (hashes[t], names[t]))
    in_bucket = [hashes[t] >> (64 - bucket_bits) if bucket_bits else 0 for t in order]
    buckets = [sum(1 for b_t in in_bucket if b_t < b) for b in range((1 << bucket_bits) + 1)]
    return order, buckets


def write(tensors, metadata=None, alignment=64, tensor_metadata=None):
    """The file a conforming writer makes of dense, contiguous tensors (file-format.md §4, §5,
    §10).

    Parameters
    ----------
    tensors : dict
        Name -> ``(dtype_name, shape, data)``: `data` holds the row-major elements, packed as
        dtypes.md §5 says for sub-byte dtypes.
    metadata : dict, optional
        The file's metadata.
    alignment : int, optional
        A, a power of two from 64 to 2 MiB.
    tensor_metadata : dict, optional
        Name -> that tensor's metadata.

    Returns
    -------
    bytes
        The whole file.
    """
    tensor_metadata = tensor_metadata or {}
    out = bytearray(HEADER_SIZE)
    records = []
    for name, (dtype, shape, raw) in tensors.items():
        code = DTYPE_CODES[dtype]
        shape = tuple(shape)
        size = -(-math.prod(shape) * DTYPES[code][2] // 8)
        if len(raw) != size:
            raise ValueError(f"{name}: {len(raw)} bytes for {size}")
        offset = round_up(len(out), alignment)
        out += bytes(offset - len(out)) + raw
        node = bytes([0, code, len(shape), 1, 0]) + b"".join(map(encode_varint, shape)) + b"\0"
        raw_name = name.encode("utf-8")
        meta = encode_metadata(tensor_metadata.get(name, {}))
        records.append(bytes([len(raw_name)]) + raw_name + encode_varint(len(meta)) + encode_varint(1)
                       + b"\0" + encode_varint(offset // alignment) + encode_varint(len(raw))
                       + struct.pack("<Q", xxh3(raw)) + node + meta)
    out += bytes(pad8(len(out)) - len(out))
    index_offset = len(out)
    count = len(tensors)
    bucket_bits = (count - 1).bit_length() if count > 1 else 0
    order, buckets = _name_tables([n.encode("utf-8") for n in tensors], bucket_bits)
    k_end = INDEX_HEADER_SIZE + 4 * (count + 1) + 4 * count + 4 * len(buckets)
    table, at = [], k_end
    for record in records:
        table.append(at)
        at += len(record)
    table.append(at)
    file_meta = encode_metadata(metadata or {})
    index = struct.pack("<IIIIQIIQ24x", count, count, bucket_bits, 0,
                        at if file_meta else 0, len(file_meta), 0,
                        sum(len(raw) for _, _, raw in tensors.values()))
    index += struct.pack(f"<{count + 1}I{count}I{len(buckets)}I", *table, *order, *buckets)
    index += b"".join(records) + file_meta
    out += index
    chunk_log2 = 12
    while -(-len(index) // (1 << chunk_log2)) > 1024:
        chunk_log2 += 1
    chunk = 1 << chunk_log2
    chunks = b"".join(struct.pack("<Q", xxh3(index[i:i + chunk]))
                      for i in range(0, len(index), chunk))
    out += chunks
    minor = max([metadata_minor(metadata or {})]
                + [metadata_minor(m) for m in (tensor_metadata or {}).values()])
    header = MAGIC + struct.pack("<HHBBHQQQQQ", VERSION[0], minor, alignment.bit_length() - 1,
                                 chunk_log2, 0, len(out), index_offset, len(index),
                                 xxh3(chunks), 0)
    out[:HEADER_SIZE] = header + struct.pack("<Q", xxh3(header))
    return bytes(out)


def seal(data):
    """`data` with the index's chunk table, the chunk table checksum and the header checksum
    recomputed, so that a change to the index or the header meets the checks behind them.

    Parameters
    ----------
    data : bytes
        A file whose header still says where its index lies.

    Returns
    -------
    bytes
    """
    out = bytearray(data)
    chunk_log2 = out[13]
    index_offset, index_length = struct.unpack_from("<QQ", out, 24)
    index = out[index_offset:index_offset + index_length]
    chunk = 1 << chunk_log2
    chunks = b"".join(struct.pack("<Q", xxh3(index[i:i + chunk]))
                      for i in range(0, len(index), chunk))
    at = index_offset + index_length
    out[at:at + len(chunks)] = chunks
    struct.pack_into("<Q", out, 40, xxh3(chunks))
    return seal_header(out)


def seal_header(data):
    """`data` with its header checksum recomputed, and nothing else.

    Parameters
    ----------
    data : bytes
        At least a header's 64 bytes.

    Returns
    -------
    bytes
    """
    out = bytearray(data)
    struct.pack_into("<Q", out, 56, xxh3(out[:56]))
    return bytes(out)


def record_span(data, t):
    """Where tensor t's record lies in the file: ``(start, end)`` file offsets.

    Parameters
    ----------
    data : bytes
        A file whose header and tensor table are intact.
    t : int
        The tensor's number.

    Returns
    -------
    tuple of int
    """
    index_offset = struct.unpack_from("<Q", data, 24)[0]
    start, end = struct.unpack_from("<II", data, index_offset + INDEX_HEADER_SIZE + 4 * t)
    return index_offset + start, index_offset + end


def replace_record(data, t, record):
    """`data` with tensor t's record replaced by `record` and the file made consistent again:
    the heap after it moved, the tensor table and metadata_offset following it, the lengths,
    the chunk table and the checksums recomputed (:func:`seal`).

    Parameters
    ----------
    data : bytes
        A file whose records and metadata lie in its heap as a writer places them (§5.4).
    t : int
        The tensor's number.
    record : bytes
        Its new record.

    Returns
    -------
    bytes
    """
    out = bytearray(data)
    index_offset, index_length = struct.unpack_from("<QQ", out, 24)
    index = out[index_offset:index_offset + index_length]
    tensor_count = struct.unpack_from("<I", index, 0)[0]
    start, end = struct.unpack_from("<II", index, INDEX_HEADER_SIZE + 4 * t)
    delta = len(record) - (end - start)
    for k in range(t + 1, tensor_count + 1):
        at = INDEX_HEADER_SIZE + 4 * k
        struct.pack_into("<I", index, at, struct.unpack_from("<I", index, at)[0] + delta)
    m_offset, m_length = struct.unpack_from("<QI", index, 16)
    if m_length and m_offset >= end:
        struct.pack_into("<Q", index, 16, m_offset + delta)
    index[start:end] = record
    chunks = -(-len(index) // (1 << out[13]))
    out[index_offset:] = index + bytes(8 * chunks)
    struct.pack_into("<QQQ", out, 16, len(out), index_offset, len(index))
    return seal(out)


def reindex(data):
    """`data` with its name table and bucket table rebuilt from its records' names as a writer
    builds them (§5.3), then sealed: renaming a record makes a file whose tables are right for
    the new names (two equal names share a bucket, in no strict order).

    Parameters
    ----------
    data : bytes
        A file whose header, index header and tensor table are intact.

    Returns
    -------
    bytes
    """
    out = bytearray(data)
    index_offset = struct.unpack_from("<Q", out, 24)[0]
    count, _, bucket_bits = struct.unpack_from("<III", out, index_offset)
    names = []
    for t in range(count):
        start = record_span(out, t)[0]
        names.append(bytes(out[start + 1:start + 1 + out[start]]))
    order, buckets = _name_tables(names, bucket_bits)
    at = index_offset + INDEX_HEADER_SIZE + 4 * (count + 1)
    struct.pack_into(f"<{count}I{len(buckets)}I", out, at, *order, *buckets)
    return seal(out)
