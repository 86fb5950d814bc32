/* wire.h -- private interface of the wire protocol (docs/spec/interchange.md). Not installed,
 * not API. The sources of src/wire/ are layered, each using only those above it here:
 *
 *   codec.c    frames and messages: encode, and decode from untrusted bytes with every limit
 *   auth.c     the challenge-response MAC (HMAC-SHA-256, in-tree: ADR-073) and nonces
 *   net.c      addresses, the clock, and sendmsg/recvmsg that carry a file descriptor
 *   tls.c      the byte stream of a connection: the socket, or a TLS session over it (ADR-061)
 *   check.c    a served file's buffers: read with pread, checked against the stored checksums
 *   device.c   segments in device memory: staged to the host in bounded chunks
 *   fdpass.c   the same-host fast path: a served tensor's memfd, and mapping a received fd
 *   verify.c   a received buffer's XXH3-64, hashed on a helper thread behind the receive
 *   serve.c    what a server serves: a tensor as buffers + record, rows sliced, checksums
 *   server.c   HurrayServer: the epoll event loop
 *   client.c   HurrayClient: blocking calls with timeouts
 */
#ifndef HURRAY_WIRE_WIRE_H
#define HURRAY_WIRE_WIRE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "file.h"
#include "internal.h"

/* ---- framing (spec §2) -------------------------------------------------------------------- */

#define WIRE_MAGIC "\x89HRW"
enum {
  WIRE_MAGIC_SIZE = 4,
  WIRE_HEADER_SIZE = 24, /* magic[4] type[1] flags[1] reserved[2] request_id[8] length[8] */
  WIRE_VERSION_MAJOR = 1,
  WIRE_VERSION_MINOR = 3, /* 1.1: DATA frames of a BYTES response carry a check;
                             1.2: TENSOR_HEADER and PUT end with their header_check;
                             1.3: METADATA and METADATA_RESULT (ADR-098) */
  WIRE_HEADER_CHECK_MINOR = 2, /* the first minor whose tensor headers carry header_check */
  WIRE_HEADER_CHECK_SIZE = 8,  /* header_check: u64, the last bytes of the payload */
  WIRE_METADATA_MINOR = 3,     /* the first minor with METADATA requests */
  WIRE_FLAG_END = 1, /* the last frame of a response or an upload */
  WIRE_NONCE_SIZE = 32,
  WIRE_MAC_SIZE = 32,
  WIRE_HELLO_FIXED = 56,   /* a hello's fields before its device list */
  WIRE_REQUEST_FIXED = 32, /* TENSOR_REQUEST before the name */
  WIRE_TENSOR_FIXED = 32,  /* TENSOR_HEADER / PUT before the buffer table */
  WIRE_BUFFER_ENTRY = 32,  /* desc[16] checksum[8] role[1] reserved[7] */
  WIRE_DATA_FIXED = 16,    /* DATA before its bytes */
  WIRE_ERROR_FIXED = 8,    /* ERROR before its message */
  WIRE_LIST_FIXED = 8,     /* LIST_RESULT before its entries */
  WIRE_METADATA_FIXED = 8, /* METADATA: name_length[2] reserved[6], then the name */
  WIRE_METADATA_RESULT_FIXED = 16, /* METADATA_RESULT: metadata_length[4] reserved[4]
                                      metadata_check[8], then bytes of the block */
  WIRE_DATA_FD_SIZE = 24,  /* DATA_FD: buffer[4] kind[1] reserved[3] file_offset[8] length[8] */
  WIRE_LIST_ENTRY = 24,    /* name_length[2] layout[1] dtype[1] buffers[4] data_bytes[8]
                              ndim[1] reserved[7], then shape[ndim] and the padded name */
  WIRE_MAX_DEVICES = 256,
  WIRE_MAX_LIST = 1u << 18, /* tensors a client takes in one list: its HurrayRemoteTensor
                               array is then at most 198 MiB (ADR-078) */
  WIRE_MAX_ERROR_MESSAGE = 1024,
};

/* Frame sizes: every frame before the hellos have been exchanged, and every frame that is not
 * DATA, is at most WIRE_CONTROL_MAX bytes of payload; DATA frames are bounded by the max_frame
 * both hellos agree on, in [WIRE_MIN_FRAME, WIRE_MAX_FRAME]. */
#define WIRE_CONTROL_MAX ((uint64_t)1 << 16)
#define WIRE_MIN_FRAME ((uint64_t)1 << 16)
#define WIRE_MAX_FRAME ((uint64_t)1 << 30)
/* A TENSOR_HEADER or PUT header (buffer table + record) may be larger than other control
 * frames: a descriptor with many buffers, or large metadata. */
#define WIRE_TENSOR_HEADER_MAX ((uint64_t)1 << 26)
/* The LIST_RESULT payload bytes a client takes in one list (with WIRE_MAX_LIST entries). */
#define WIRE_MAX_LIST_BYTES ((uint64_t)64 << 20)

typedef enum WireType {
  WIRE_CLIENT_HELLO = 0x01,
  WIRE_SERVER_HELLO = 0x02,
  WIRE_AUTH = 0x03,
  WIRE_AUTH_OK = 0x04,
  WIRE_LIST = 0x10,
  WIRE_LIST_RESULT = 0x11,
  WIRE_METADATA = 0x12,
  WIRE_METADATA_RESULT = 0x13,
  WIRE_TENSOR_REQUEST = 0x20,
  WIRE_TENSOR_HEADER = 0x21,
  WIRE_DATA = 0x22,
  WIRE_DATA_FD = 0x23,
  WIRE_PUT = 0x30,
  WIRE_PUT_OK = 0x31,
  WIRE_ERROR = 0x40,
  WIRE_GOODBYE = 0x50,
} WireType;

/* SERVER_HELLO flags */
enum { WIRE_HELLO_AUTH = 1, WIRE_HELLO_READ_ONLY = 2, WIRE_HELLO_FD_PASSING = 4 };
/* CLIENT_HELLO flags */
enum { WIRE_CLIENT_FD_PASSING = 1 };
/* DATA_FD kinds (spec §6.6) */
enum { WIRE_FD_FILE = 0, WIRE_FD_MEMFD = 1 };
/* TENSOR_REQUEST */
enum { WIRE_RANGE_WHOLE = 0, WIRE_RANGE_ROWS = 1, WIRE_RANGE_BYTES = 2 };
enum { WIRE_REQUEST_FALLBACK = 1 };

typedef struct WireHeader {
  uint8_t type;
  uint8_t flags;
  uint64_t request_id;
  uint64_t length;
} WireHeader;

HURRAY_INTERNAL const char *hurray__wire_type_name(int type);

HURRAY_INTERNAL void hurray__wire_header_encode(const WireHeader *h, uint8_t out[WIRE_HEADER_SIZE]);
/* Decodes a frame header: magic (HURRAY_EPROTOCOL "not a Hurray wire frame"), reserved bytes,
 * a known type, flags only on the types that take them, and the payload length against
 * `max_data` for DATA and the control limits for every other type (HURRAY_ELIMIT). */
HURRAY_INTERNAL int hurray__wire_header_decode(const uint8_t in[WIRE_HEADER_SIZE],
                                               uint64_t max_data, WireHeader *out,
                                               HurrayError *error);

/* Appends a whole frame: header, then the payload already in `payload` (may be NULL for 0). */
HURRAY_INTERNAL void hurray__wire_frame(FileSink *out, uint8_t type, uint8_t flags,
                                        uint64_t request_id, const void *payload, size_t len);

/* ---- hellos (spec §4) --------------------------------------------------------------------- */

typedef struct WireDevice {
  uint8_t tag;
  uint8_t name_len; /* 0 for named tags; 1..31 for private ones */
  char name[32];    /* NUL-terminated */
} WireDevice;

typedef struct WireHello {
  uint16_t version_major;
  uint16_t version_minor;
  uint32_t flags;
  uint64_t max_frame;
  uint8_t nonce[WIRE_NONCE_SIZE];
  uint32_t ndevices;
  WireDevice devices[WIRE_MAX_DEVICES];
} WireHello;

/* The devices a peer lists: every named tag it takes, then its registered private tags. */
HURRAY_INTERNAL int hurray__wire_devices_fill(WireHello *hello, const uint8_t *tags, size_t ntags,
                                              HurrayError *error);
HURRAY_INTERNAL int hurray__wire_hello_encode(uint8_t type, const WireHello *hello, FileSink *out,
                                              HurrayError *error);
/* Parses a hello payload. A major version other than 1 is HURRAY_EUNSUPPORTED naming both
 * versions, detected from the first four bytes before anything else is read. */
HURRAY_INTERNAL int hurray__wire_hello_decode(const uint8_t *p, size_t len, WireHello *out,
                                              HurrayError *error);
/* The setup-time device rule (spec §5): every tag the peer listed must be known here -- named,
 * or private and registered here under the same name. HURRAY_EDEVICE naming the tag. */
HURRAY_INTERNAL int hurray__wire_devices_check(const WireHello *peer, HurrayError *error);

/* ---- requests and responses (spec §6) ----------------------------------------------------- */

typedef struct WireRequest {
  uint8_t preferred_device;
  uint8_t range_kind;
  uint16_t flags;
  int64_t start;
  int64_t stop;
  uint64_t resume_offset;
  size_t name_len;
  char name[HURRAY_MAX_NAME + 1];
} WireRequest;

HURRAY_INTERNAL int hurray__wire_request_encode(const WireRequest *r, FileSink *out,
                                                HurrayError *error);
HURRAY_INTERNAL int hurray__wire_request_decode(const uint8_t *p, size_t len, WireRequest *out,
                                                HurrayError *error);

/* One buffer of a TENSOR_HEADER / PUT. */
typedef struct WireBuffer {
  HurrayBufferDesc desc;
  uint64_t checksum;
  uint8_t role;
} WireBuffer;

/* TENSOR_HEADER and PUT payloads: fixed part, buffer table, tensor record. */
typedef struct WireTensorHeader {
  uint8_t device;
  uint32_t nbuffers;
  uint64_t total_bytes;
  uint64_t resume_offset;
  const WireBuffer *buffers;
  const uint8_t *record; /* interchange.md Appendix A */
  uint32_t record_len;
} WireTensorHeader;

HURRAY_INTERNAL int hurray__wire_tensor_encode(const WireTensorHeader *t, FileSink *out,
                                               HurrayError *error);

/* A whole TENSOR_HEADER or PUT frame of a session of negotiated minor `minor`: header, the
 * payload `hurray__wire_tensor_encode` made and, from 1.2 on, header_check (spec §6.3.1):
 * XXH3-64 of every byte of the frame before it. */
HURRAY_INTERNAL void hurray__wire_tensor_frame(FileSink *out, uint8_t type, uint8_t flags,
                                               uint64_t request_id, const uint8_t *payload,
                                               size_t len, uint16_t minor);
/* Before any field of a received TENSOR_HEADER / PUT payload is used: from 1.2 on, its last 8
 * bytes must be the XXH3-64 of the frame (header `h`, then the payload) before them --
 * HURRAY_ECHECKSUM naming the header checksum, HURRAY_EPROTOCOL for a payload too short to
 * hold one, HURRAY_ENOMEM. *body: the payload bytes to decode (all of them before 1.2). */
HURRAY_INTERNAL int hurray__wire_tensor_check(const WireHeader *h, const uint8_t *p, size_t len,
                                              uint16_t minor, size_t *body, HurrayError *error);

/* A decoded TENSOR_HEADER / PUT: its buffers and record (metadata included) live in `arena`,
 * not in the payload, which may be freed; the record's
 * descriptor is validated against the buffer sizes and roles (hurray_tensor_validate). */
typedef struct WireTensor {
  uint8_t device;
  uint32_t nbuffers;
  uint64_t total_bytes;
  uint64_t resume_offset;
  WireBuffer *buffers;
  FileRecord record;
} WireTensor;

HURRAY_INTERNAL int hurray__wire_tensor_decode(const uint8_t *p, size_t len, FileArena *arena,
                                               WireTensor *out, HurrayError *error);

/* LIST_RESULT (spec §6.1). An entry's encoded size, and the entry itself (`desc`: the tensor's
 * root, for its layout, dtype and shape). */
HURRAY_INTERNAL size_t hurray__wire_list_entry_size(size_t name_len, int32_t ndim);
HURRAY_INTERNAL void hurray__wire_list_entry_encode(FileSink *out, const char *name,
                                                    size_t name_len, const HurrayTensorDesc *desc,
                                                    uint32_t buffers, uint64_t data_bytes);
/* Decodes one LIST_RESULT payload, appending its entries to the growing array *items of *count
 * entries (realloc; the caller frees it on success and failure alike). */
HURRAY_INTERNAL int hurray__wire_list_decode(const uint8_t *p, size_t len,
                                             HurrayRemoteTensor **items, uint32_t *count,
                                             HurrayError *error);

/* METADATA (spec §6.8): the metadata of tensor `name` (`name_len` 1..255), or with
 * `name_len` 0 the server's. Decoding checks the reserved bytes and the name (HURRAY_EPROTOCOL
 * naming the field); `name` receives it NUL-terminated. */
HURRAY_INTERNAL void hurray__wire_metadata_request_encode(const char *name, size_t name_len,
                                                          FileSink *out);
HURRAY_INTERNAL int hurray__wire_metadata_request_decode(const uint8_t *p, size_t len,
                                                         char name[HURRAY_MAX_NAME + 1],
                                                         size_t *name_len, HurrayError *error);
/* One METADATA_RESULT payload: the block is `total` bytes (at most HURRAY_META_MAX_BYTES)
 * whose XXH3-64 is `check`, of which this frame carries the `n` at `bytes`. Decoding checks the
 * fixed part (HURRAY_EPROTOCOL naming the field) and points *bytes into `p`; the block itself
 * is checked once whole (its check, then hurray__meta_decode). */
HURRAY_INTERNAL void hurray__wire_metadata_result_encode(uint32_t total, uint64_t check,
                                                         const uint8_t *bytes, size_t n,
                                                         FileSink *out);
HURRAY_INTERNAL int hurray__wire_metadata_result_decode(const uint8_t *p, size_t len,
                                                        uint32_t *total, uint64_t *check,
                                                        const uint8_t **bytes, size_t *n,
                                                        HurrayError *error);

HURRAY_INTERNAL void hurray__wire_error_encode(int code, const char *message, FileSink *out);
/* Decodes an ERROR payload into `error` (the peer's code and message); returns the code, or
 * HURRAY_EPROTOCOL for a malformed ERROR. */
HURRAY_INTERNAL int hurray__wire_error_decode(const uint8_t *p, size_t len, HurrayError *error);

/* DATA_FD (spec §6.6): buffer `buffer`, all `length` of its bytes, are bytes
 * [file_offset, file_offset + length) of the descriptor sent with the frame. */
typedef struct WireFdRef {
  uint32_t buffer;
  uint8_t kind; /* WIRE_FD_FILE or WIRE_FD_MEMFD */
  uint64_t file_offset;
  uint64_t length;
} WireFdRef;

HURRAY_INTERNAL void hurray__wire_fd_ref_encode(const WireFdRef *r, uint8_t out[WIRE_DATA_FD_SIZE]);
HURRAY_INTERNAL int hurray__wire_fd_ref_decode(const uint8_t *p, size_t len, WireFdRef *out,
                                               HurrayError *error);

/* ---- auth.c (spec §4.3) ------------------------------------------------------------------- */

/* HMAC-SHA-256(secret, label || client_nonce || server_nonce), label "hurray-wire-1 client"
 * or "hurray-wire-1 server". */
HURRAY_INTERNAL int hurray__wire_mac(const uint8_t *secret, size_t secret_len, bool server,
                                     const uint8_t client_nonce[WIRE_NONCE_SIZE],
                                     const uint8_t server_nonce[WIRE_NONCE_SIZE],
                                     uint8_t out[WIRE_MAC_SIZE], HurrayError *error);
/* SHA-256 (FIPS 180-4) of `message`. */
HURRAY_INTERNAL void hurray__sha256(const uint8_t *message, size_t len, uint8_t out[32]);
/* HMAC-SHA-256 (RFC 2104) of `message` under `key`; any lengths. */
HURRAY_INTERNAL void hurray__hmac_sha256(const uint8_t *key, size_t key_len,
                                         const uint8_t *message, size_t message_len,
                                         uint8_t out[WIRE_MAC_SIZE]);
/* Compares two MACs in constant time. */
HURRAY_INTERNAL bool hurray__wire_mac_equal(const uint8_t a[WIRE_MAC_SIZE],
                                            const uint8_t b[WIRE_MAC_SIZE]);
HURRAY_INTERNAL int hurray__wire_nonce(uint8_t out[WIRE_NONCE_SIZE], HurrayError *error);


/* ---- check.c (ADR-084) -------------------------------------------------------------------- */

/* The most bytes of device memory or of a served file a server or client stages at once (per
 * connection, or per transfer): a DATA frame from device memory or a file carries at most this
 * many. */
#define WIRE_STAGE_SIZE ((uint64_t)1 << 20)
/* A served file's buffer is read and checked in chunks of this many bytes (the last one
 * shorter), chunk k being bytes [k * WIRE_CHECK_CHUNK, (k + 1) * WIRE_CHECK_CHUNK) of it. */
#define WIRE_CHECK_CHUNK WIRE_STAGE_SIZE
enum { WIRE_UNVERIFIED = -1 };

/* What a file is, as far as fstat tells: a verdict holds for this identity. */
typedef struct WireFileId {
  uint64_t dev, ino, size;
  int64_t mtime_ns;
} WireFileId;

/* A source buffer of a served file: bytes [offset, offset + size) of the server's descriptor
 * `fd` (borrowed), whose stored XXH3-64 is `checksum`. Under `lock`, what the last read of the
 * whole buffer found, for file identity `id`: `verdict` HURRAY_OK with `chunks` the XXH3-64 of
 * each check chunk of that read, HURRAY_ECHECKSUM (the read hashed to `actual`), or
 * WIRE_UNVERIFIED. */
typedef struct WireFile {
  int fd;
  uint64_t offset, size, checksum;
  uint32_t buffer;    /* its index in the tensor, and the tensor's name: for messages */
  const char *tensor;
  pthread_mutex_t lock;
  int verdict;
  WireFileId id;
  uint64_t actual;
  uint64_t *chunks;
} WireFile;

/* HURRAY_EOVERFLOW for a buffer past any file offset. */
HURRAY_INTERNAL int hurray__wire_file_init(WireFile *f, int fd, uint64_t offset, uint64_t size,
                                           uint64_t checksum, uint32_t buffer,
                                           HurrayError *error);
HURRAY_INTERNAL void hurray__wire_file_reset(WireFile *f);
/* Reads the check chunk holding byte `at` of the buffer whole into `stage` (WIRE_CHECK_CHUNK
 * bytes): it is bytes [*begin, *begin + *len) of the buffer. HURRAY_EIO naming the buffer and
 * the file's size now when the file has shrunk below it (or for a failed read). `checked`: the
 * chunk must hash as the same chunk did in the verified read (hurray__wire_file_verify first),
 * else HURRAY_ECHECKSUM naming its bytes. Thread-safe. */
HURRAY_INTERNAL int hurray__wire_file_chunk(WireFile *f, uint64_t at, bool checked,
                                            uint8_t *stage, uint64_t *begin, size_t *len,
                                            HurrayError *error);
/* HURRAY_OK if the file holds bytes [0, end) of the buffer now (one fstat), else HURRAY_EIO
 * naming the tensor, the buffer's end and the file's size ("its file shrank while served"). */
HURRAY_INTERNAL int hurray__wire_file_holds(const WireFile *f, uint64_t end, HurrayError *error);
/* The error of a read of the buffer that came short: as hurray__wire_file_holds says for the
 * whole buffer, or HURRAY_EIO saying so if the file has its size again. */
HURRAY_INTERNAL int hurray__wire_file_short(const WireFile *f, HurrayError *error);
/* Makes the verdict on the buffer hold for the file's identity now, reading the whole buffer
 * through `stage` (WIRE_CHECK_CHUNK bytes) unless a verdict for that identity is remembered:
 * HURRAY_OK when the bytes match the stored checksum; HURRAY_ECHECKSUM naming both checksums;
 * HURRAY_EIO (shrunk, a failed read); HURRAY_ESTATE once `cancel` is set. Thread-safe; reads the
 * whole buffer, so it runs on the server's checking thread, never its event loop. */
HURRAY_INTERNAL int hurray__wire_file_verify(WireFile *f, uint8_t *stage,
                                             const atomic_bool *cancel, HurrayError *error);
/* Whether the verdict remembered is HURRAY_OK for the file's identity now (one fstat). */
HURRAY_INTERNAL bool hurray__wire_file_verified(WireFile *f);

/* ---- serve.c ------------------------------------------------------------------------------ */

/* A run of stream bytes of one buffer: `len` bytes at `offset` of compact buffer `buffer`, from
 * host memory `data`; or from byte `at` of the device buffer `device`, read through `queue`
 * (device.c); or from byte `at` of the served file's buffer `file` (check.c), whose `data` is
 * then where they are in the file's mapping, which nothing in user space reads (a page the file
 * no longer has is SIGBUS) but the kernel may (writev: EFAULT there); or zeros (always fewer
 * than 64) when all three are NULL. With `by_fd` the run is the whole buffer, sent as a
 * DATA_FD frame: bytes [fd_offset, fd_offset + len) of descriptor `fd`. */
typedef struct WireSegment {
  const uint8_t *data;
  const HurrayBuffer *device;
  HurrayDeviceQueue *queue;
  WireFile *file;
  uint64_t at;
  uint64_t len;
  uint64_t offset;
  uint32_t buffer;
  bool by_fd;
  uint8_t fd_kind;
  int fd;
  uint64_t fd_offset;
} WireSegment;

/* ---- device.c ----------------------------------------------------------------------------- */

/* Copies `n` bytes of segment `g`, from its byte `from` on, to `dst`: host bytes, zeros, or
 * device memory through the segment's queue (blocking; it waits on the buffer's sync state).
 * Not for file segments, which are read a check chunk at a time (hurray__wire_file_chunk). */
HURRAY_INTERNAL int hurray__wire_segment_read(const WireSegment *g, uint64_t from, void *dst,
                                              size_t n, HurrayError *error);
/* XXH3-64 of compact buffer `buffer`: its segments in order, device and file ones staged
 * through `stage` (WIRE_STAGE_SIZE bytes, may be NULL when no segment is in device memory or a
 * file); `checked`: every chunk of a file read is checked (hurray__wire_file_chunk). */
HURRAY_INTERNAL int hurray__wire_hash_buffer(const WireSegment *segments, size_t n,
                                             uint32_t buffer, uint8_t *stage, bool checked,
                                             uint64_t *out, HurrayError *error);

/* A tensor a server serves, as it goes on the wire: each buffer reduced to the bytes its arrays
 * address (hurray__runs_make), the tensor record re-based onto those compact buffers, each
 * compact buffer's XXH3-64, and the segments that make up the stream. Immutable once made.
 * A tensor in device memory (`device` not CPU) has a queue per device buffer, in the context
 * its memory belongs to (hurray_device_queue_for_buffer); its bytes are read through them. */
typedef struct WireServed {
  char *name;
  size_t name_len;
  HurrayTensorContext *context; /* the source, owned (NULL for one made by init) */
  uint8_t device;               /* the device its memory is on: CPU, or one device tag */
  uint32_t nbuffers;
  FileSink record;              /* name, re-based descriptor, metadata (interchange.md
                                   Appendix A) */
  uint64_t metadata_check;      /* XXH3-64 of the record's metadata block (spec §6.8) */
  WireBuffer *buffers;          /* the compact buffers' table entries, as for the CPU */
  HurrayDeviceQueue **queues;   /* per source buffer: NULL for CPU memory */
  WireFile *files;              /* per source buffer of a served file; NULL for memory */
  WireSegment *segments;        /* the whole stream, in order */
  size_t nsegments;
  uint64_t total_bytes;
  /* The same-host fast path (spec §6.6): a descriptor holding the compact buffers, -1 for none
   * yet. A file's tensors borrow the server's descriptor of the file; an in-memory tensor gets
   * a sealed memfd, owned, made at its first DATA_FD request (only the server's loop thread
   * touches these). fd_offsets[i]: where compact buffer i starts in it, UINT64_MAX if it is
   * not there. */
  int fd;
  bool fd_owned;
  uint8_t fd_kind;
  uint64_t *fd_offsets;
} WireServed;

/* SINK for `context`, whose buffers must be CPU memory, or memory of one device with a backend
 * (ADR-062), that does not change while served. `checksums` (may be NULL): the XXH3-64 of each
 * source buffer as it is, used where a compact buffer is the whole source buffer (a file's
 * tensors), instead of hashing it. `file_fd` (-1: none): the buffers are those of a served file,
 * source buffer i being bytes [file_offsets[i], + its size) of descriptor `file_fd` (borrowed,
 * open while served), with `checksums` its stored ones: they are read from the descriptor,
 * never from `context`'s memory (ADR-084). `metadata`: encoded, copied. */
HURRAY_INTERNAL int hurray__wire_served_create(const char *name, HurrayTensorContext *context,
                                               const uint64_t *checksums, int file_fd,
                                               const uint64_t *file_offsets,
                                               const uint8_t *metadata, uint32_t metadata_len,
                                               WireServed **out, HurrayError *error);
HURRAY_INTERNAL void hurray__wire_served_destroy(WireServed *served);
/* The same over a context the caller keeps (a client's upload, CPU memory only): `*served`
 * borrows its memory; reset frees what init made. */
HURRAY_INTERNAL int hurray__wire_served_init(WireServed *served, const char *name,
                                             const HurrayTensorContext *context,
                                             const uint64_t *checksums, const uint8_t *metadata,
                                             uint32_t metadata_len, HurrayError *error);
HURRAY_INTERNAL void hurray__wire_served_reset(WireServed *served);
/* The answer to a TENSOR_REQUEST: the TENSOR_HEADER payload and the segments of the stream
 * from the request's resume offset on. */
typedef struct WirePlan {
  FileSink header;
  WireSegment *segments;
  uint32_t nsegments;
} WirePlan;

/* Plans the response to `request` for `served`: the device rule (spec §6.2), rows or bytes,
 * the resume offset; `rows_checksum`: for ROWS, the slice's XXH3-64 (hurray__wire_rows_checksum).
 * Fails with the status an ERROR frame then carries. Reads none of the tensor's bytes. */
HURRAY_INTERNAL int hurray__wire_plan(const WireServed *served, const WireRequest *request,
                                      uint64_t rows_checksum, WirePlan *plan,
                                      HurrayError *error);
/* The XXH3-64 of the bytes ROWS `request` sends, staged through `stage` (WIRE_STAGE_SIZE bytes,
 * may be NULL for a tensor in CPU memory): for a served file, from reads whose every chunk is
 * checked (hurray__wire_file_chunk), so that the buffer must be verified first. Reads the whole
 * slice: off the event loop, but for a tensor in device memory. The errors of plan for rows. */
HURRAY_INTERNAL int hurray__wire_rows_checksum(const WireServed *served,
                                               const WireRequest *request, uint8_t *stage,
                                               uint64_t *out, HurrayError *error);
/* The source buffers [*first, *end) whose bytes `request` (ROWS or BYTES) sends, for the
 * checks of ADR-084; empty for a range outside the tensor (which plan refuses). */
HURRAY_INTERNAL void hurray__wire_range_buffers(const WireServed *served,
                                                const WireRequest *request, uint32_t *first,
                                                uint32_t *end);
HURRAY_INTERNAL void hurray__wire_plan_reset(WirePlan *plan);
/* Rewrites a WHOLE plan from offset 0 so that every buffer that can go by descriptor does
 * (DATA_FD), making `served`'s memfd first if it has no descriptor. A buffer goes by descriptor
 * when it is non-empty, its alignment is at most a page and it lies in the descriptor at a
 * multiple of its alignment; the others stay DATA. Leaves the plan as it was if no descriptor
 * can be made. */
HURRAY_INTERNAL void hurray__wire_plan_fds(WireServed *served, WirePlan *plan);

/* ---- fdpass.c ----------------------------------------------------------------------------- */

/* Makes `served`'s sealed memfd (F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL):
 * its compact buffers, each at a multiple of the page size. */
HURRAY_INTERNAL int hurray__wire_memfd(WireServed *served, HurrayError *error);
/* The bytes a DATA_FD frame names from `fd` (borrowed) as a buffer described by `desc`, after
 * the checks of spec §6.6 made on the descriptor itself, whatever the frame's kind says
 * (ADR-078): a regular file, long enough, at an offset the alignment allows; shared memory
 * (F_GET_SEALS answers) that could still be sealed but is not sealed with F_SEAL_WRITE |
 * F_SEAL_SHRINK | F_SEAL_GROW is refused, and so is a MEMFD that is not so sealed. Sealed shared
 * memory is mapped; so is a file of a disk file system when `map_disk_files` (the peer could
 * signal this process anyway). Any other file -- unsealable shared memory (a tmpfs file), a
 * disk file of another user's server -- is copied with pread, so that nothing the peer does to
 * it later (shrinking it: SIGBUS; writing it) reaches the buffer. A mapping is private
 * (copy-on-write) and unmapped when the buffer is destroyed; its pages are made present by
 * hurray__wire_verify_mapped. */
HURRAY_INTERNAL int hurray__wire_map(int fd, const WireFdRef *ref, const HurrayBufferDesc *desc,
                                     bool map_disk_files, HurrayBuffer **out, HurrayError *error);

/* ---- verify.c ----------------------------------------------------------------------------- */

/* The most bytes a client receives (or makes present, for a mapping) before it publishes them
 * to the verifier. */
#define WIRE_VERIFY_STEP ((size_t)4 << 20)

/* Hashing one buffer's bytes as they become final, in order: on a helper thread behind the
 * receiving one, or (a small buffer, one CPU, no thread to be had) on the receiving thread
 * itself at each publish. Between start and finish only the helper touches `hasher`, and the
 * bytes published stay untouched. */
typedef struct WireVerifier {
  FileHasher *hasher;
  const uint8_t *base; /* the buffer's first byte */
  uint64_t size;
  bool prefault;       /* the helper faults pages in ahead of the mark (new memory) */
  uint64_t published;  /* bytes [0, published) are final */
  uint64_t hashed;     /* the helper's mark, under `lock` */
  bool running;        /* between start and finish */
  bool threaded;
  bool closing;
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t more;
} WireVerifier;

/* Begins a buffer of `size` bytes at `base` whose bytes [0, from) `hasher` holds already;
 * `prefault`: the bytes past the mark are new memory still to be written, whose pages the
 * helper may fault in ahead of the writer. */
HURRAY_INTERNAL void hurray__wire_verifier_start(WireVerifier *v, FileHasher *hasher,
                                                 const uint8_t *base, uint64_t from,
                                                 uint64_t size, bool prefault);
/* Bytes [0, upto) are final: they may be hashed. */
HURRAY_INTERNAL void hurray__wire_verifier_publish(WireVerifier *v, uint64_t upto);
/* Waits until every published byte is in the hasher and ends the helper; nothing if not
 * running. */
HURRAY_INTERNAL void hurray__wire_verifier_finish(WireVerifier *v);
/* Adds the `len` mapped bytes at `data` to `hasher`, their pages made present a step at a time
 * while the helper hashes behind. */
HURRAY_INTERNAL void hurray__wire_verify_mapped(FileHasher *hasher, const uint8_t *data,
                                                uint64_t len);

/* ---- client.c ----------------------------------------------------------------------------- */

/* Receives `len` stream bytes of compact buffer `buffer` at `offset`, in order; a status other
 * than HURRAY_OK ends the transfer with it. */
typedef int (*WireSinkFn)(void *context, uint32_t buffer, uint64_t offset, const uint8_t *data,
                          size_t len, HurrayError *error);

/* Receives tensor `name` as hurray_client_fetch does (1 MiB at a time, resuming, every buffer's
 * checksum checked), handing the bytes to `sink` instead of a file: nothing of the tensor is
 * kept. The sink sees a buffer's bytes before its checksum is checked at its end: only a
 * HURRAY_OK result says they were right. For tests that stream more than memory holds. */
HURRAY_INTERNAL int hurray__client_stream(HurrayClient *client, const char *name,
                                          const HurrayGetOptions *options, WireSinkFn sink,
                                          void *context, HurrayError *error);

/* ---- net.c -------------------------------------------------------------------------------- */

#define WIRE_MAX_HOST 253   /* a DNS name's longest text */
#define WIRE_MAX_RESOLVED 16 /* addresses of one name tried, in order */

typedef struct WireAddress {
  int family; /* AF_INET, AF_INET6, AF_UNIX */
  uint8_t storage[128];
  uint32_t length; /* socklen_t */
  bool tls;        /* "hurrays://" */
  bool named;      /* HOST is a name: family is AF_UNSPEC until hurray__wire_address_resolve */
  uint16_t port;   /* the port as written (host order) */
  char host[WIRE_MAX_HOST + 1]; /* as written ("localhost", "10.0.0.1", "::1"); "" for unix */
} WireAddress;

/* Parses "HOST:PORT", "[V6]:PORT", "hurray://HOST:PORT", "hurrays://HOST:PORT" (TLS),
 * "unix:PATH" or "hurray+unix://PATH". HOST is a numeric address (the address is complete) or
 * a host name of 1..253 letters, digits, '-' and '.' (`named`: no lookup happens here, so
 * parsing never blocks). HURRAY_EINVAL naming the text. */
HURRAY_INTERNAL int hurray__wire_address_parse(const char *text, WireAddress *out,
                                               HurrayError *error);
/* The socket addresses `a` stands for, in the resolver's order: `a` itself unless it is named,
 * else getaddrinfo's IPv4 and IPv6 stream addresses for its host and port (at most
 * WIRE_MAX_RESOLVED, each a numeric copy of `a` keeping `host` and `tls`). HURRAY_ECONNECTION
 * naming the host and the resolver's reason where the name does not resolve. With `wait_ms`
 * >= 0 the lookup runs on a thread of its own and is given up after that long (HURRAY_ETIMEOUT;
 * the thread finishes and frees it later): the system resolver's own timeouts (seconds per
 * server and attempt) then no longer decide how long a call waits. */
HURRAY_INTERNAL int hurray__wire_address_resolve(const WireAddress *a, bool passive,
                                                 int64_t wait_ms, WireAddress out[], size_t *n,
                                                 HurrayError *error);
/* Whether a resolved address is reachable only from this host: a Unix-domain socket,
 * 127.0.0.0/8, ::1 or ::ffff:127.0.0.0/104 (ADR-092). */
HURRAY_INTERNAL bool hurray__wire_address_local(const WireAddress *a);
HURRAY_INTERNAL void hurray__wire_address_format(const WireAddress *a, char *out, size_t size);

/* sendmsg(MSG_NOSIGNAL | MSG_DONTWAIT) of `iov`, with descriptor `fd` attached (SCM_RIGHTS)
 * when it is not -1: the receiver gets it with the first of these bytes. */
HURRAY_INTERNAL ssize_t hurray__wire_sendmsg(int sock, const struct iovec *iov, size_t n_iov,
                                             int fd);
/* recv(MSG_DONTWAIT) that also takes descriptors sent with the bytes (close-on-exec). With
 * `slot` NULL every descriptor received is closed; else the first goes to *slot if it is -1,
 * and any other (or descriptors the kernel had to drop) is closed and sets *extra. */
HURRAY_INTERNAL ssize_t hurray__wire_recvmsg(int sock, void *buf, size_t len, int *slot,
                                             bool *extra);

/* The monotonic clock in milliseconds. */
HURRAY_INTERNAL int64_t hurray__wire_now_ms(void);

/* ---- tls.c -------------------------------------------------------------------------------- */

/* A TLS configuration (an SSL_CTX, TLS 1.3 only): a server's certificate and key, or a
 * client's trust (verification of the peer's chain and name is always on). */
typedef struct WireTls WireTls;
/* A TLS session over one non-blocking socket. */
typedef struct WireTlsConn WireTlsConn;

enum { WIRE_WANT_READ = 1, WIRE_WANT_WRITE = 2 };
/* A TLS session's write buffer and read buffer, each (counted in the server's memory). */
#define WIRE_TLS_BUFFER ((size_t)1 << 16)

/* OpenSSL 3 is loaded on the first TLS use (ADR-073), by these sonames. */
#define WIRE_TLS_SSL "libssl.so.3"
#define WIRE_TLS_CRYPTO "libcrypto.so.3"
#define WIRE_TLS_NEEDED_BY "hurrays://"

/* Loads libcrypto.so.3 and libssl.so.3 once (thread-safe; the first result is kept).
 * HURRAY_EUNSUPPORTED "hurrays:// needs libssl.so.3, which could not be loaded: <why>" where
 * either is missing, lacks a function or is older than OpenSSL 3. */
HURRAY_INTERNAL int hurray__wire_tls_load(HurrayError *error);

/* Reads the files `options` names (checked for the side: a server needs certificate_file and
 * key_file, a client takes ca_file and server_name), after hurray__wire_tls_load. HURRAY_EIO
 * naming a file that cannot be used, HURRAY_EINVAL for fields of the other side or a key that
 * does not match, HURRAY_EUNSUPPORTED where OpenSSL cannot be loaded. */
HURRAY_INTERNAL int hurray__wire_tls_create(const HurrayTlsOptions *options, bool server,
                                            WireTls **out, HurrayError *error);
HURRAY_INTERNAL void hurray__wire_tls_destroy(WireTls *tls);
/* A session over `fd` (which stays the caller's). A client's session checks the server's
 * certificate for `host` (the configured server_name instead if there is one): a DNS name, or
 * an IP address when `host` is numeric. */
HURRAY_INTERNAL int hurray__wire_tls_open(const WireTls *tls, int fd, const char *host,
                                          WireTlsConn **out, HurrayError *error);
/* Sends close_notify if the session was set up (without waiting) and frees it. NULL: no-op. */
HURRAY_INTERNAL void hurray__wire_tls_close(WireTlsConn *conn);
/* One step of the handshake. HURRAY_OK with *done false: call again once the socket is ready
 * for hurray__wire_tls_want; HURRAY_EAUTH for a peer certificate that failed verification
 * (naming why), HURRAY_EPROTOCOL for any other failure (OpenSSL's reason; see also
 * hurray__wire_tls_plaintext). */
HURRAY_INTERNAL int hurray__wire_tls_handshake(WireTlsConn *conn, bool *done, HurrayError *error);
/* After a failed handshake: whether the peer's first byte began a Hurray frame (0x89, never the
 * start of a TLS record), a peer speaking the protocol in plaintext. Its bytes are still in the
 * socket, unread. */
HURRAY_INTERNAL bool hurray__wire_tls_plaintext(const WireTlsConn *conn);
/* Whether written bytes wait in the session's write buffer: a write of nothing (sendv with n 0)
 * or any read sends them when the socket takes them. */
HURRAY_INTERNAL bool hurray__wire_tls_unflushed(const WireTlsConn *conn);
/* What the last call that could not go on waits for: WIRE_WANT_READ or WIRE_WANT_WRITE. */
HURRAY_INTERNAL int hurray__wire_tls_want(const WireTlsConn *conn);
/* Whether bytes wait inside the session that a read would use without the socket (which may
 * not be readable then): false once a read has waited for the socket. */
HURRAY_INTERNAL bool hurray__wire_tls_pending(const WireTlsConn *conn);

/* The byte stream of a connection, `tls` NULL for plaintext, never blocking, never raising
 * SIGPIPE. Like recv / sendmsg: the bytes moved, 0 when the peer has closed (recv), or -1 with
 * errno (EAGAIN: call again once the socket is ready for what hurray__wire_io_want says; EPROTO
 * for a TLS failure, described by hurray__wire_io_error). sendv writes the vector in order and
 * may stop early; with TLS a retry after EAGAIN must pass the same bytes again, and bytes it
 * counts may still wait in the session's write buffer (hurray__wire_tls_unflushed). */
HURRAY_INTERNAL ssize_t hurray__wire_recv(int fd, WireTlsConn *tls, void *buf, size_t len);
HURRAY_INTERNAL ssize_t hurray__wire_sendv(int fd, WireTlsConn *tls, const struct iovec *iov,
                                           int n);
/* After EAGAIN from hurray__wire_recv (`reading`) or _sendv: WIRE_WANT_READ or WIRE_WANT_WRITE
 * (with TLS, a read may wait to write and a write to read). */
HURRAY_INTERNAL int hurray__wire_io_want(const WireTlsConn *tls, bool reading);
/* The reason of a failed hurray__wire_recv / _sendv with errno `err`: the TLS failure, or
 * strerror. */
HURRAY_INTERNAL const char *hurray__wire_io_error(const WireTlsConn *tls, int err);

#endif /* HURRAY_WIRE_WIRE_H */
