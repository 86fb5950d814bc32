/* server.c -- HurrayServer: one thread, one epoll loop, non-blocking sockets (ADR-050).
 *
 * Memory per connection is bounded: a frame header, the payload of one control frame (at most
 * WIRE_CONTROL_MAX bytes, SERVER_PUT_HEADER_MAX for an upload's header), the control frames
 * queued for it, and nothing for tensor data, which is written from the registered memory or a
 * served file's mapping straight to the socket -- but for a tensor in device memory, staged one
 * chunk (WIRE_STAGE_SIZE) at a time through the device backend (device.c), and for a served
 * file over TLS or in a range, read one check chunk at a time through its descriptor
 * (check.c). Nothing in user space reads a served file's mapping, which a file truncated in
 * place turns into SIGBUS; the kernel's copy of writev reports such a page as EFAULT (ADR-084).
 *
 * What reads a whole buffer or a whole ROWS slice -- verifying a served file's buffer against
 * its stored checksum, hashing a slice -- runs on one checking thread, never on the loop: the
 * connection waits (reading nothing more) while the loop serves the others (ADR-084).
 * A connection whose output is not drained is not read from (backpressure goes back to its
 * client through TCP), and one that makes no progress for idle_timeout_ms, or takes longer than
 * that over one frame, is closed.
 * Every refusal is an ERROR frame: with the request's id when the connection can go on, with
 * id 0 just before the server closes it.
 *
 * A TLS server (ADR-061) runs the same loop over TLS sessions (tls.c): a connection starts in
 * PHASE_TLS, under the handshake deadline; a session may hold decrypted bytes the socket no
 * longer signals, so such connections are served again without waiting for epoll. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "wire.h"

#define SERVER_PUT_HEADER_MAX ((uint64_t)1 << 20)
#define SERVER_TICK_MS 100
#define SERVER_LINGER_MS 1000 /* a closing connection gets this long to take its ERROR */
/* What a closing plaintext connection reads and discards after its last frame, waiting for the
 * client's end, so that unread bytes (a refused frame's payload) do not turn the close into a
 * reset that could discard the ERROR before the client reads it. */
#define SERVER_DRAIN_MAX ((uint64_t)1 << 20)
#define SERVER_MAX_ALIGNMENT ((uint32_t)1 << 21)
/* Connections at once from one client address beyond this host, by default (ADR-099). */
#define SERVER_PER_ADDRESS 64u
/* The largest CLIENT_HELLO: its fixed part and 256 devices, each a private tag with a 31-byte
 * name. Before AUTH_OK nothing larger than this, or than AUTH's MAC, is read (ADR-076). */
#define SERVER_HELLO_MAX ((uint64_t)WIRE_HELLO_FIXED + WIRE_MAX_DEVICES * (2u + 31u))
/* What an upload holds beyond its bytes and its PUT header: the served tensor's own structures
 * (its context, segments and record), counted against max_upload_total_bytes. */
#define SERVER_UPLOAD_OVERHEAD ((uint64_t)1 << 10)
/* The smallest whole tensor sent as descriptors on a session with fd passing (measured: see
 * respond). */
#define FD_PASSING_MIN_BYTES ((uint64_t)512 << 10)

static const uint8_t kZeros[HURRAY_MIN_ALIGNMENT];

typedef enum Phase { PHASE_TLS, PHASE_HELLO, PHASE_AUTH, PHASE_READY, PHASE_CLOSING } Phase;

/* An upload in progress (PUT, then DATA frames until END). `refused` uploads are read and
 * discarded: their ERROR has been sent. */
typedef struct Upload {
  uint64_t request_id;
  bool refused;
  FileArena arena;
  WireTensor tensor;
  HurrayBufferList *list;
  FileHasher *hasher;
  uint32_t buffer; /* the next byte goes to buffer `buffer` at `offset` */
  uint64_t offset;
  uint64_t bytes;   /* accounted memory */
  uint64_t charged; /* reserved of the server's upload_held, given back unless served */
} Upload;

struct Conn;

/* A request whose bytes must be verified or hashed whole before its answer can be planned
 * (ADR-084): a ROWS request of a tensor in CPU memory (the slice's checksum), and a ROWS or
 * BYTES request of a served file's buffers not verified for the file as it is now. The checking
 * thread runs it; the loop then answers it. */
typedef struct Job {
  struct Job *next;
  struct Conn *conn; /* the connection waiting for it; NULL once that closed (loop only) */
  WireServed *tensor;
  WireRequest request;
  uint64_t id;
  int status;
  HurrayError error;
  uint64_t rows_checksum;
} Job;

/* A client's IP address as the per-address bound counts it: 16 bytes, an IPv4 address as its
 * IPv4-mapped IPv6 form. `counted` is false for a Unix-socket client. */
typedef struct PeerKey {
  bool counted;
  bool loopback;
  uint8_t bytes[16];
} PeerKey;

typedef struct Conn {
  int fd;
  PeerKey peer;
  WireTlsConn *tls; /* NULL: plaintext */
  bool tls_pending; /* counted in HurrayServer.tls_pending */
  Phase phase;
  struct Conn *prev, *next;
  int64_t handshake_deadline;
  int64_t close_deadline;
  int64_t last_progress;
  int64_t frame_start; /* when the frame being read started, 0 between frames */
  uint64_t max_frame;
  bool fd_passing; /* negotiated: buffers may go as DATA_FD (spec §6.6) */
  uint16_t minor;  /* the negotiated minor version */
  uint8_t offered[32]; /* a bit per device tag the client's hello listed (spec §6.2) */
  uint8_t client_nonce[WIRE_NONCE_SIZE];
  uint8_t server_nonce[WIRE_NONCE_SIZE];
  /* input */
  uint8_t head[WIRE_HEADER_SIZE + WIRE_DATA_FIXED];
  size_t head_got;  /* header bytes, then (DATA) the fixed part */
  WireHeader h;
  bool have_header;
  uint8_t *payload; /* control payload being read */
  uint64_t got;     /* payload bytes read */
  Upload *upload;
  /* output */
  FileSink out;
  size_t out_sent;
  WirePlan plan;
  bool sending;
  bool frame_checks; /* a BYTES response in 1.1: each DATA frame carries its check (spec §6.4) */
  bool checked;      /* a range: each chunk of a served file is checked as it is read (ADR-084) */
  bool by_mapping;   /* the DATA frame being sent goes from a served file's mapping (writev) */
  bool shrank;       /* ... and the file ended before it did: zeros finish it, then ERROR */
  Job *job;          /* the request waiting for the checking thread: nothing else is read */
  uint64_t request_id;
  uint32_t segment;
  uint64_t segment_sent;
  uint8_t data_head[WIRE_HEADER_SIZE + WIRE_DATA_FD_SIZE]; /* DATA or DATA_FD, less the data */
  size_t data_head_len; /* 0 between frames */
  size_t data_head_sent;
  uint64_t chunk_left;
  uint64_t chunk_size;
  uint8_t *stage;  /* WIRE_STAGE_SIZE bytes while a response from device memory or a file is
                      sent; the frame's bytes start at stage_at */
  size_t stage_at;
  /* a LIST answer, made one LIST_RESULT frame at a time as the socket takes them: entries
     [list_next, list_end) of the registry are still to go; or (`meta` not NULL) a METADATA
     answer, bytes [list_next, list_end) of the metadata block at `meta` (immutable while the
     server lives: a served tensor's record, or the server's file metadata), made one
     METADATA_RESULT frame at a time the same way */
  bool listing;
  size_t list_next, list_end;
  const uint8_t *meta;
  uint64_t meta_check; /* its XXH3-64, made when it was (ADR-098) */
  uint32_t events; /* the epoll interest set now */
  bool draining;   /* closing, everything sent and the writing side shut: reading to the end */
  uint64_t drained;
  uint64_t mem;    /* accounted bytes */
} Conn;

struct HurrayServer {
  int listen_fd;
  int epoll_fd;
  int wake_fd;
  WireAddress address;
  uint32_t flags;
  uint32_t max_connections;
  uint32_t max_per_address; /* 0: SERVER_PER_ADDRESS beyond the host, none on loopback */
  uint64_t max_frame;
  uint64_t max_upload;
  uint64_t max_upload_total;
  uint64_t upload_held; /* bytes uploads hold, served or still arriving (under `lock`) */
  uint32_t handshake_ms;
  uint32_t idle_ms;
  uint8_t *secret;
  size_t secret_len;
  WireTls *tls;       /* NULL: plaintext */
  size_t tls_pending; /* connections whose session holds bytes to read */
  pthread_mutex_t lock; /* the tensors and the stats */
  WireServed **tensors; /* in the order served; never removed while the server lives */
  size_t ntensors, cap;
  size_t *index;        /* open addressing by name hash: a position in `tensors` + 1, 0 free */
  size_t index_cap;     /* a power of two, at least twice ntensors (0: no index yet) */
  uint32_t device_mask; /* bit t: a tensor in memory of device tag t (< 32) is served */
  int *files; /* descriptors of the served files, for DATA_FD */
  size_t nfiles;
  /* the server's metadata (spec §6.8): the encoded file metadata of the first file added, set
     once under `lock` and never changed after */
  FileSink file_metadata;
  uint64_t file_metadata_check;
  bool file_metadata_set;
  HurrayServerStats stats;
  Conn *conns;
  int spare_fd;       /* kept open to be closed when accept runs out of descriptors (EMFILE) */
  bool accept_paused; /* out of descriptors, even the spare: the listener waits for a tick */
  bool unix_bound;    /* the socket file this server bound, by device and inode */
  dev_t unix_dev;
  ino_t unix_ino;
  /* the checking thread (ADR-084): jobs in order, and those done, under jobs_lock; done_fd
     (an eventfd in the loop's epoll set) says there are done ones */
  pthread_t checker;
  bool checker_started;
  bool checker_closing;
  atomic_bool checks_stopping; /* a verification in progress gives up */
  pthread_mutex_t jobs_lock;
  pthread_cond_t jobs_more;
  Job *jobs, *jobs_tail, *done;
  int done_fd;
  uint8_t *check_stage; /* WIRE_STAGE_SIZE bytes, the checking thread's */
  uint8_t scratch[1 << 16]; /* discarded upload bytes land here */
};

/* ---- registry ----------------------------------------------------------------------------- */

/* The index slot of `name`: the one holding it, or the free one where it would go. */
static size_t name_slot(const HurrayServer *s, const char *name, size_t len) {
  size_t mask = s->index_cap - 1;
  size_t i = (size_t)hurray__xxh3(name, len) & mask;
  while (s->index[i] != 0) {
    const WireServed *t = s->tensors[s->index[i] - 1];
    if (t->name_len == len && memcmp(t->name, name, len) == 0) break;
    i = (i + 1) & mask;
  }
  return i;
}

static WireServed *find_locked(HurrayServer *s, const char *name, size_t len) {
  if (s->index_cap == 0) return NULL;
  size_t at = s->index[name_slot(s, name, len)];
  return at ? s->tensors[at - 1] : NULL;
}

/* Indexes tensors [0, n) afresh, in the index as it is (no allocation). */
static void index_fill(HurrayServer *s, size_t n) {
  memset(s->index, 0, s->index_cap * sizeof *s->index);
  for (size_t i = 0; i < n; i++) {
    s->index[name_slot(s, s->tensors[i]->name, s->tensors[i]->name_len)] = i + 1;
  }
}

/* Adds `n` tensors at once, or none if a name is taken. SINK for every entry, and for
 * `file_fds[0, nfds)`, the descriptors of the files they come from (a file's, or each shard's
 * of a sharded checkpoint). */
static int register_tensors(HurrayServer *s, WireServed **items, size_t n, const int *file_fds,
                            size_t nfds, HurrayError *error) {
  int status = HURRAY_OK;
  pthread_mutex_lock(&s->lock);
  if (s->ntensors + n > s->cap) {
    size_t cap = (s->ntensors + n) * 2;
    WireServed **grown = realloc(s->tensors, cap * sizeof *grown);
    if (grown == NULL) {
      status = hurray__fail(error, HURRAY_ENOMEM, "out of memory");
    } else {
      s->tensors = grown;
      s->cap = cap;
    }
  }
  if (status == HURRAY_OK && 2 * (s->ntensors + n) > s->index_cap) {
    size_t cap = 64;
    while (cap < 2 * (s->ntensors + n)) cap *= 2;
    size_t *index = calloc(cap, sizeof *index);
    if (index == NULL) {
      status = hurray__fail(error, HURRAY_ENOMEM, "out of memory");
    } else {
      free(s->index);
      s->index = index;
      s->index_cap = cap;
      index_fill(s, s->ntensors);
    }
  }
  if (status == HURRAY_OK && nfds > 0) { /* room for them, taken only on success */
    int *grown = realloc(s->files, (s->nfiles + nfds) * sizeof *grown);
    if (grown == NULL) status = hurray__fail(error, HURRAY_ENOMEM, "out of memory");
    else s->files = grown;
  }
  /* each name is looked up among those served and the batch's earlier ones, then indexed */
  for (size_t i = 0; i < n && status == HURRAY_OK; i++) {
    s->tensors[s->ntensors + i] = items[i];
    size_t slot = name_slot(s, items[i]->name, items[i]->name_len);
    if (s->index[slot] != 0) {
      status = hurray__fail(error, HURRAY_EINVAL, "tensor '%s' is already served", items[i]->name);
      index_fill(s, s->ntensors); /* forget the batch */
    } else {
      s->index[slot] = s->ntensors + i + 1;
    }
  }
  if (status == HURRAY_OK) {
    for (size_t k = 0; k < nfds; k++) s->files[s->nfiles++] = file_fds[k];
    s->ntensors += n;
    for (size_t i = 0; i < n; i++) s->device_mask |= 1u << items[i]->device; /* tags < 32 */
  }
  pthread_mutex_unlock(&s->lock);
  if (status != HURRAY_OK) {
    for (size_t i = 0; i < n; i++) hurray__wire_served_destroy(items[i]);
    for (size_t k = 0; k < nfds; k++) close(file_fds[k]);
  }
  return status;
}

int hurray_server_add_tensor(HurrayServer *server, const char *name, HurrayTensorContext *tensor,
                             HurrayError *error) {
  if (server == NULL || tensor == NULL) {
    hurray_tensor_context_release(tensor);
    return hurray__fail(error, HURRAY_EINVAL, "server or tensor is NULL");
  }
  WireServed *served = NULL;
  int status = hurray__wire_served_create(name, tensor, NULL, -1, NULL, NULL, 0, &served, error);
  if (status != HURRAY_OK) return status;
  return register_tensors(server, &served, 1, NULL, 0, error);
}

/* Whether every buffer of `context` is a view of the reader's mapping of its file at the
 * buffer's offset in it: then its bytes can be read through the file's descriptor instead. */
static bool views_of_file(const HurrayFileReader *reader, uint32_t index,
                          const HurrayTensorContext *context, const uint64_t *offsets) {
  bool checksummed = false;
  const FileSource *source = hurray__reader_source(reader, index, &checksummed);
  const uint8_t *base = source ? hurray__source_bytes(source) : NULL;
  for (uint32_t k = 0; base != NULL && k < context->buffers->count; k++) {
    if ((const uint8_t *)context->buffers->buffers[k]->data != base + offsets[k]) return false;
  }
  return base != NULL;
}

/* One tensor of an open file as a served tensor, with its metadata. A Hurray file's tensor
 * (`fd` >= 0, `stored`): its buffers as they lie in the file's descriptor `fd` (read through
 * it, never through the reader's mapping: ADR-084), with their stored checksums. A foreign
 * file's (`fd` >= 0, not `stored`: safetensors, .npy, .npz) the same way where its buffers are
 * views of the file's mapping, with checksums hashed now, so that a file truncated in place is
 * an ERROR, not SIGBUS; a buffer the reader copied (misaligned, byte-swapped, deflated) is
 * served from that copy. A sharded checkpoint's tensor is its shard's, `fd` that shard's
 * descriptor and `stored` whether it is a Hurray file. Otherwise (`fd` < 0: no descriptor)
 * from the memory the reader gives, with the stored checksums if `stored`, else hashed now. */
static int served_from_file(const HurrayFileReader *reader, uint32_t index, int fd, bool stored,
                            WireServed **out, HurrayError *error) {
  HurrayFileTensorInfo info;
  int status = hurray_file_reader_tensor_info(reader, index, &info, error);
  uint64_t *sums = status == HURRAY_OK ? calloc(info.buffer_count + 1u, sizeof *sums) : NULL;
  uint64_t *offsets = status == HURRAY_OK ? calloc(info.buffer_count + 1u, sizeof *sums) : NULL;
  if (status == HURRAY_OK && (sums == NULL || offsets == NULL)) {
    status = hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  }
  for (uint32_t k = 0; status == HURRAY_OK && k < info.buffer_count; k++) {
    HurrayFileBufferInfo b;
    status = hurray_file_reader_buffer_info(reader, index, k, &b, error);
    sums[k] = b.checksum;
    offsets[k] = b.offset;
  }
  HurrayMetaValue *meta = NULL;
  FileSink encoded = {0};
  if (status == HURRAY_OK) status = hurray_file_reader_metadata(reader, index, &meta, error);
  uint16_t minor = 0; /* the wire carries any value the file holds */
  if (status == HURRAY_OK) status = hurray__meta_encode(meta, &encoded, &minor, error);
  HurrayTensorContext *context = NULL;
  if (status == HURRAY_OK) status = hurray_file_reader_get(reader, index, 0, &context, error);
  bool by_fd = status == HURRAY_OK && fd >= 0 &&
               (stored || views_of_file(reader, index, context, offsets));
  if (by_fd && !stored) { /* what the file holds now, read as ranges of it will be (pread) */
    bool checksummed = false;
    const FileSource *source = hurray__reader_source(reader, index, &checksummed);
    for (uint32_t k = 0; status == HURRAY_OK && k < info.buffer_count; k++) {
      status = hurray__source_hash(source, offsets[k],
                                   context->buffers->buffers[k]->desc.byte_size, NULL, &sums[k],
                                   error);
    }
    if (status != HURRAY_OK) hurray_tensor_context_release(context);
  }
  if (status == HURRAY_OK) {
    status = hurray__wire_served_create(info.name, context, by_fd || stored ? sums : NULL,
                                        by_fd ? fd : -1, by_fd ? offsets : NULL, encoded.data,
                                        (uint32_t)encoded.len, out, error);
  }
  if (status == HURRAY_OK && by_fd) { /* the same descriptor for DATA_FD */
    WireServed *t = *out;
    for (uint32_t k = 0; k < info.buffer_count; k++) {
      /* a compact buffer as long as the stored one is the stored one (as its checksum) */
      bool whole = t->buffers[k].desc.byte_size == context->buffers->buffers[k]->desc.byte_size;
      if (!whole) offsets[k] = UINT64_MAX;
    }
    t->fd = fd;
    t->fd_kind = WIRE_FD_FILE;
    t->fd_offsets = offsets;
    offsets = NULL;
  }
  hurray_meta_destroy(meta);
  hurray__sink_reset(&encoded);
  free(sums);
  free(offsets);
  return status;
}

/* The descriptor that tensor `index` of a sharded checkpoint is read through: its shard's,
 * duplicated from the shard reader's the first time one of the shard's tensors asks for it
 * (`sources`, `fds`: the `*nfds` duplicated so far, room for one per shard), -1 if the shard has
 * none (the tensor is then served from the reader's memory). `*stored`: whether the shard's
 * checksums are stored ones (a Hurray shard). */
static int shard_fd(const HurrayFileReader *reader, uint32_t index, const FileSource **sources,
                    int *fds, size_t *nfds, int *fd, bool *stored, HurrayError *error) {
  *fd = -1;
  const FileSource *source = hurray__reader_source(reader, index, stored);
  if (source == NULL) return HURRAY_OK;
  for (size_t k = 0; k < *nfds; k++) {
    if (sources[k] == source) {
      *fd = fds[k];
      return HURRAY_OK;
    }
  }
  int status = hurray__source_dup_fd(source, fd, error);
  if (status == HURRAY_OK && *fd >= 0) {
    sources[*nfds] = source;
    fds[(*nfds)++] = *fd;
  }
  return status;
}

/* The file's metadata, encoded as the wire carries it (any value the file holds). */
static int file_metadata(const HurrayFileReader *reader, FileSink *out, HurrayError *error) {
  HurrayMetaValue *meta = NULL;
  int status = hurray_file_reader_metadata(reader, HURRAY_FILE_WHOLE, &meta, error);
  uint16_t minor = 0;
  if (status == HURRAY_OK) status = hurray__meta_encode(meta, out, &minor, error);
  hurray_meta_destroy(meta);
  if (status == HURRAY_OK && out->failed) status = hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  return status;
}

/* Opens what the loader reads at `path` (ADR-082): a Hurray file, else (its error kept if
 * neither reads it) a safetensors, .npy or .npz file; a directory or an .index.json, a
 * sharded checkpoint of either. */
static int open_any(const char *path, HurrayFileReader **reader, HurrayError *error) {
  int status = hurray_file_reader_open(path, 0, reader, error);
  if (status != HURRAY_EFORMAT) return status;
  HurrayError foreign = {0};
  status = hurray_file_reader_open(path, HURRAY_FILE_OPEN_FOREIGN, reader, &foreign);
  if (status != HURRAY_OK) *error = foreign; /* says what the file is, if it can tell */
  return status;
}

int hurray_server_add_file(HurrayServer *server, const char *path, HurrayError *error) {
  if (server == NULL || path == NULL) {
    return hurray__fail(error, HURRAY_EINVAL, "server or path is NULL");
  }
  /* The file's descriptor, which its tensors' bytes are read through (and DATA_FD
     passes): it must be the file the reader opened. */
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  int opened_errno = errno;
  HurrayFileReader *reader = NULL;
  int status = open_any(path, &reader, error);
  HurrayFileInfo info = {0};
  if (status == HURRAY_OK) status = hurray_file_reader_info(reader, &info, error);
  bool stored = info.format == HURRAY_FORMAT_HURRAY;
  bool sharded = status == HURRAY_OK && info.shard_count > 0;
  if (sharded) { /* each shard is read through its reader's descriptor, duplicated */
    if (fd >= 0) close(fd);
    fd = -1;
  } else if (status == HURRAY_OK && fd < 0) {
    status = hurray__fail_errno(error, HURRAY_EIO, opened_errno, "open: %s",
                                strerror(opened_errno));
  } else if (status == HURRAY_OK) {
    struct stat opened, now;
    if (fstat(fd, &opened) != 0 || stat(path, &now) != 0 || opened.st_dev != now.st_dev ||
        opened.st_ino != now.st_ino) {
      status = hurray__fail(error, HURRAY_EIO, "the file was replaced while it was opened");
    }
  }
  WireServed **items = status == HURRAY_OK ? calloc(info.tensor_count + 1u, sizeof *items) : NULL;
  size_t room = sharded ? info.shard_count : 1, nfds = 0; /* the descriptors kept */
  int *fds = status == HURRAY_OK ? calloc(room + 1, sizeof *fds) : NULL;
  const FileSource **sources = sharded ? calloc(room + 1, sizeof *sources) : NULL;
  if (status == HURRAY_OK && (items == NULL || fds == NULL || (sharded && sources == NULL))) {
    status = hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  }
  if (status == HURRAY_OK && fd >= 0) {
    fds[nfds++] = fd;
    fd = -1;
  }
  uint32_t made = 0;
  for (; status == HURRAY_OK && made < info.tensor_count; made++) {
    int tensor_fd = sharded ? -1 : fds[0];
    bool tensor_stored = stored;
    if (sharded) {
      status = shard_fd(reader, made, sources, fds, &nfds, &tensor_fd, &tensor_stored, error);
    }
    if (status == HURRAY_OK) {
      status = served_from_file(reader, made, tensor_fd, tensor_stored, &items[made], error);
    }
    if (status != HURRAY_OK) break;
  }
  FileSink file_meta = {0};
  if (status == HURRAY_OK) status = file_metadata(reader, &file_meta, error);
  hurray_file_reader_destroy(reader); /* the contexts keep the mapping */
  if (status == HURRAY_OK) {
    status = register_tensors(server, items, made, fds, nfds, error);
  } else {
    for (uint32_t i = 0; i < made; i++) hurray__wire_served_destroy(items[i]);
    for (size_t k = 0; k < nfds; k++) close(fds[k]);
    if (fd >= 0) close(fd);
  }
  free(fds);
  free(sources);
  if (status == HURRAY_OK) {
    pthread_mutex_lock(&server->lock);
    if (!server->file_metadata_set) { /* the first file's is the server's (spec §6.8) */
      server->file_metadata = file_meta;
      server->file_metadata_check =
          hurray__xxh3(file_meta.len ? (const void *)file_meta.data : "", file_meta.len);
      server->file_metadata_set = true;
      file_meta = (FileSink){0};
    }
    pthread_mutex_unlock(&server->lock);
  }
  hurray__sink_reset(&file_meta);
  free(items);
  return status == HURRAY_OK ? status : hurray__error_prefix(error, status, "%s: ", path);
}

/* ---- the checking thread (ADR-084) -------------------------------------------------------- */

static void run_job(HurrayServer *s, Job *j) {
  uint32_t first = 0, end = 0;
  hurray__wire_range_buffers(j->tensor, &j->request, &first, &end);
  int status = HURRAY_OK;
  for (uint32_t i = first; status == HURRAY_OK && j->tensor->files != NULL && i < end; i++) {
    status = hurray__wire_file_verify(&j->tensor->files[i], s->check_stage, &s->checks_stopping,
                                      &j->error);
  }
  if (status == HURRAY_OK && j->request.range_kind == WIRE_RANGE_ROWS) {
    status = hurray__wire_rows_checksum(j->tensor, &j->request, s->check_stage,
                                        &j->rows_checksum, &j->error);
  }
  j->status = status;
}

static void *checker_main(void *arg) {
  HurrayServer *s = arg;
  pthread_mutex_lock(&s->jobs_lock);
  for (;;) {
    while (s->jobs == NULL && !s->checker_closing) pthread_cond_wait(&s->jobs_more, &s->jobs_lock);
    if (s->checker_closing) break;
    Job *j = s->jobs;
    s->jobs = j->next;
    if (s->jobs == NULL) s->jobs_tail = NULL;
    pthread_mutex_unlock(&s->jobs_lock);
    run_job(s, j);
    pthread_mutex_lock(&s->jobs_lock);
    j->next = s->done;
    s->done = j;
    uint64_t one = 1;
    ssize_t n = write(s->done_fd, &one, sizeof one);
    (void)n;
  }
  pthread_mutex_unlock(&s->jobs_lock);
  return NULL;
}

/* Starts the checking thread, every signal blocked in it. */
static int checker_start(HurrayServer *s, HurrayError *error) {
  s->check_stage = malloc(WIRE_STAGE_SIZE);
  if (s->check_stage == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int err = pthread_create(&s->checker, NULL, checker_main, s);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (err != 0) {
    return hurray__fail_errno(error, HURRAY_ENOMEM, err, "cannot start the checking thread: %s",
                              strerror(err));
  }
  s->checker_started = true;
  return HURRAY_OK;
}

static void free_jobs(Job *j) {
  while (j != NULL) {
    Job *next = j->next;
    free(j);
    j = next;
  }
}

/* Ends the checking thread (a verification in progress gives up) and frees every job: their
 * connections have closed. */
static void checker_stop(HurrayServer *s) {
  if (s->checker_started) {
    atomic_store(&s->checks_stopping, true);
    pthread_mutex_lock(&s->jobs_lock);
    s->checker_closing = true;
    pthread_cond_broadcast(&s->jobs_more);
    pthread_mutex_unlock(&s->jobs_lock);
    pthread_join(s->checker, NULL);
    s->checker_started = false;
  }
  free_jobs(s->jobs);
  free_jobs(s->done);
  s->jobs = s->jobs_tail = s->done = NULL;
  free(s->check_stage);
  s->check_stage = NULL;
}

/* ---- create / destroy --------------------------------------------------------------------- */

/* Binds and listens on one socket address; s->address becomes the address bound (its port
 * chosen by the kernel where 0 was asked). */
static int listen_on(HurrayServer *s, const WireAddress *address, HurrayError *error) {
  if (s->listen_fd >= 0) close(s->listen_fd);
  s->address = *address;
  s->listen_fd = socket(address->family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  if (s->listen_fd >= 0 && address->family != AF_UNIX) {
    setsockopt(s->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  }
  socklen_t len = address->length;
  if (s->listen_fd < 0 ||
      bind(s->listen_fd, (const struct sockaddr *)address->storage, address->length) != 0 ||
      listen(s->listen_fd, 4096) != 0 ||
      (address->family != AF_UNIX &&
       getsockname(s->listen_fd, (struct sockaddr *)s->address.storage, &len) != 0)) {
    int e = errno;
    char text[WIRE_MAX_HOST + 64];
    hurray__wire_address_format(address, text, sizeof text);
    if (s->listen_fd >= 0) close(s->listen_fd);
    s->listen_fd = -1;
    return hurray__fail(error, HURRAY_EIO, "cannot listen on %s: %s", text, strerror(e));
  }
  return HURRAY_OK;
}

int hurray_server_create(const HurrayServerOptions *options, HurrayServer **out,
                         HurrayError *error) {
  if (out == NULL) return hurray__fail(error, HURRAY_EINVAL, "out is NULL");
  *out = NULL;
  HurrayServerOptions o = {0};
  if (options != NULL) o = *options;
  if (o.reserved0 != 0 || o.reserved1 != 0 ||
      (o.flags & ~(HURRAY_SERVER_READ_ONLY | HURRAY_SERVER_NO_FD_PASSING |
                   HURRAY_SERVER_UPLOADS | HURRAY_SERVER_INSECURE)) ||
      (o.flags & HURRAY_SERVER_READ_ONLY && o.flags & HURRAY_SERVER_UPLOADS) ||
      (o.secret == NULL) != (o.secret_len == 0) || o.secret_len > 1024 ||
      (o.max_frame != 0 && (o.max_frame < WIRE_MIN_FRAME || o.max_frame > WIRE_MAX_FRAME))) {
    return hurray__fail(error, HURRAY_EINVAL,
                        "invalid server options (flags, READ_ONLY with UPLOADS, reserved, "
                        "secret of 1..1024 bytes, max_frame in [64 KiB, 1 GiB])");
  }
  WireAddress address;
  int status = hurray__wire_address_parse(o.address ? o.address : "127.0.0.1:0", &address, error);
  if (status != HURRAY_OK) return status;
  if (address.tls && o.tls == NULL) {
    return hurray__fail(error, HURRAY_EINVAL,
                        "address '%s' asks for TLS: give the certificate and key", o.address);
  }
  if (o.tls != NULL && address.family == AF_UNIX) {
    return hurray__fail(error, HURRAY_EINVAL, "TLS is for TCP addresses, not '%s'", o.address);
  }
  address.tls = o.tls != NULL;
  WireTls *tls = NULL;
  if (o.tls != NULL) status = hurray__wire_tls_create(o.tls, true, &tls, error);
  if (status != HURRAY_OK) return status;
  HurrayServer *s = calloc(1, sizeof *s);
  if (s != NULL) s->tls = tls;
  else hurray__wire_tls_destroy(tls);
  if (s == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  s->listen_fd = s->epoll_fd = s->wake_fd = s->done_fd = -1;
  s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  pthread_mutex_init(&s->lock, NULL);
  pthread_mutex_init(&s->jobs_lock, NULL);
  pthread_cond_init(&s->jobs_more, NULL);
  s->flags = o.flags & HURRAY_SERVER_UPLOADS ? o.flags : o.flags | HURRAY_SERVER_READ_ONLY;
  s->max_connections = o.max_connections ? o.max_connections : 1024;
  s->max_per_address = o.max_connections_per_address;
  s->max_frame = o.max_frame ? o.max_frame : (uint64_t)4 << 20;
  s->max_upload = o.max_upload_bytes ? o.max_upload_bytes : (uint64_t)1 << 30;
  s->max_upload_total = o.max_upload_total_bytes ? o.max_upload_total_bytes : (uint64_t)4 << 30;
  s->handshake_ms = o.handshake_timeout_ms ? o.handshake_timeout_ms : 5000;
  s->idle_ms = o.idle_timeout_ms ? o.idle_timeout_ms : 60000;
  if (o.secret_len) {
    s->secret = malloc(o.secret_len);
    if (s->secret == NULL) {
      hurray_server_destroy(s);
      return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
    }
    memcpy(s->secret, o.secret, o.secret_len);
    s->secret_len = o.secret_len;
  }
  WireAddress found[WIRE_MAX_RESOLVED];
  size_t n = 0;
  status = hurray__wire_address_resolve(&address, true, -1, found, &n, error);
  for (size_t i = 0; status == HURRAY_OK && !o.secret_len && !(o.flags & HURRAY_SERVER_INSECURE) &&
                     i < n; i++) {
    if (!hurray__wire_address_local(&found[i])) {
      char text[WIRE_MAX_HOST + 64];
      hurray__wire_address_format(&found[i], text, sizeof text);
      status = hurray__fail(error, HURRAY_EINVAL,
                            "%s is reachable beyond this host and the server has no secret: "
                            "give a secret (and TLS), or HURRAY_SERVER_INSECURE to serve "
                            "anyone who reaches it",
                            text);
    }
  }
  for (size_t i = 0; status == HURRAY_OK && i < n; i++) { /* the first that binds; else the
                                                              last one's error */
    status = listen_on(s, &found[i], error);
    if (status != HURRAY_OK && i + 1 < n) status = HURRAY_OK;
    else break;
  }
  if (status != HURRAY_OK) {
    hurray_server_destroy(s);
    return status;
  }
  address = s->address;
  if (address.family == AF_UNIX) { /* the socket file it made: the one destroy may unlink */
    struct sockaddr_un un;
    struct stat st;
    memcpy(&un, address.storage, sizeof un);
    if (stat(un.sun_path, &st) == 0 && S_ISSOCK(st.st_mode)) {
      s->unix_bound = true;
      s->unix_dev = st.st_dev;
      s->unix_ino = st.st_ino;
    }
  }
  s->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  s->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  s->done_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
  struct epoll_event wake = {.events = EPOLLIN, .data.ptr = &s->wake_fd};
  struct epoll_event done = {.events = EPOLLIN, .data.ptr = &s->done_fd};
  if (s->epoll_fd < 0 || s->wake_fd < 0 || s->done_fd < 0 ||
      epoll_ctl(s->epoll_fd, EPOLL_CTL_ADD, s->listen_fd, &ev) != 0 ||
      epoll_ctl(s->epoll_fd, EPOLL_CTL_ADD, s->wake_fd, &wake) != 0 ||
      epoll_ctl(s->epoll_fd, EPOLL_CTL_ADD, s->done_fd, &done) != 0) {
    status = hurray__fail(error, HURRAY_EIO, "epoll: %s", strerror(errno));
    hurray_server_destroy(s);
    return status;
  }
  status = checker_start(s, error);
  if (status != HURRAY_OK) {
    hurray_server_destroy(s);
    return status;
  }
  *out = s;
  return HURRAY_OK;
}

int hurray_server_address(const HurrayServer *server, char *out, size_t size,
                          HurrayError *error) {
  if (server == NULL || out == NULL || size == 0) {
    return hurray__fail(error, HURRAY_EINVAL, "server or out is NULL");
  }
  hurray__wire_address_format(&server->address, out, size);
  return HURRAY_OK;
}

int hurray_server_stats(const HurrayServer *server, HurrayServerStats *out, HurrayError *error) {
  if (server == NULL || out == NULL) return hurray__fail(error, HURRAY_EINVAL, "NULL argument");
  pthread_mutex_lock((pthread_mutex_t *)&server->lock);
  *out = server->stats;
  pthread_mutex_unlock((pthread_mutex_t *)&server->lock);
  return HURRAY_OK;
}

void hurray_server_stop(HurrayServer *server) {
  if (server == NULL) return;
  uint64_t one = 1;
  ssize_t n = write(server->wake_fd, &one, sizeof one); /* async-signal-safe */
  (void)n;
}

/* ---- connections -------------------------------------------------------------------------- */

static void account(HurrayServer *s, Conn *c) {
  uint64_t mem = sizeof *c + c->out.cap + c->plan.header.cap + (c->stage ? WIRE_STAGE_SIZE : 0) +
                 (c->tls ? 2 * WIRE_TLS_BUFFER : 0) +
                 (c->payload ? c->h.length : 0) + (c->upload ? c->upload->bytes : 0) +
                 (c->job ? sizeof *c->job : 0);
  pthread_mutex_lock(&s->lock);
  s->stats.buffered_bytes = s->stats.buffered_bytes - c->mem + mem;
  if (s->stats.buffered_bytes > s->stats.peak_buffered_bytes) {
    s->stats.peak_buffered_bytes = s->stats.buffered_bytes;
  }
  pthread_mutex_unlock(&s->lock);
  c->mem = mem;
}

/* Gives back what an upload reserved of the server's max_upload_total. */
static void upload_uncharge(HurrayServer *s, Upload *u) {
  if (u->charged == 0) return;
  pthread_mutex_lock(&s->lock);
  s->upload_held -= u->charged;
  pthread_mutex_unlock(&s->lock);
  u->charged = 0;
}

static void upload_free(HurrayServer *s, Upload *u) {
  if (u == NULL) return;
  upload_uncharge(s, u);
  hurray__arena_free(&u->arena);
  hurray_buffer_list_destroy(u->list);
  hurray__hasher_destroy(u->hasher);
  free(u);
}

static void conn_close(HurrayServer *s, Conn *c) {
  if (c->job) c->job->conn = NULL; /* answered by nobody: freed when done */
  epoll_ctl(s->epoll_fd, EPOLL_CTL_DEL, c->fd, NULL);
  hurray__wire_tls_close(c->tls);
  if (c->tls_pending) s->tls_pending--;
  close(c->fd);
  if (c->prev) c->prev->next = c->next;
  else s->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  hurray__sink_reset(&c->out);
  hurray__wire_plan_reset(&c->plan);
  free(c->stage);
  free(c->payload);
  c->payload = NULL;
  upload_free(s, c->upload);
  c->upload = NULL;
  pthread_mutex_lock(&s->lock);
  s->stats.buffered_bytes -= c->mem;
  s->stats.connections--;
  pthread_mutex_unlock(&s->lock);
  free(c);
}

static void send_error(Conn *c, uint64_t request_id, int code, const char *message) {
  FileSink payload = {0};
  hurray__wire_error_encode(code, message, &payload);
  hurray__wire_frame(&c->out, WIRE_ERROR, 0, request_id, payload.data, payload.len);
  hurray__sink_reset(&payload);
}

/* A connection-level error: ERROR with id 0, then the connection closes once it is sent (or
 * after SERVER_LINGER_MS). A DATA frame partly written is finished first: the ERROR goes
 * after its last byte, never inside it (conn_write), and no frame of the answer follows. */
static void conn_fail(Conn *c, int code, const char *message) {
  if (c->phase == PHASE_CLOSING) return;
  send_error(c, 0, code, message);
  c->phase = PHASE_CLOSING;
  if (c->data_head_len == 0) c->sending = false;
  c->listing = false;
  c->meta = NULL;
  c->close_deadline = hurray__wire_now_ms() + SERVER_LINGER_MS;
}

/* Whether a DATA frame is to be written: the next of an answer, or the rest of one begun. */
static bool data_pending(const Conn *c) {
  return c->sending && (c->phase != PHASE_CLOSING || c->data_head_len != 0);
}

static int64_t upload_expected(Upload *u) {
  while (u->buffer < u->tensor.nbuffers &&
         u->offset == u->tensor.buffers[u->buffer].desc.byte_size) {
    u->buffer++;
    u->offset = 0;
  }
  return u->buffer;
}

/* ---- requests ----------------------------------------------------------------------------- */

static void on_hello(HurrayServer *s, Conn *c, const uint8_t *p, size_t len) {
  WireHello *hello = malloc(sizeof *hello);
  HurrayError e = {0};
  if (hello == NULL) {
    conn_fail(c, HURRAY_ENOMEM, "out of memory");
    return;
  }
  int status = hurray__wire_hello_decode(p, len, hello, &e);
  if (status == HURRAY_OK && (hello->flags & ~(uint32_t)WIRE_CLIENT_FD_PASSING) != 0) {
    status = hurray__fail(&e, HURRAY_EPROTOCOL, "CLIENT_HELLO has unknown flags 0x%08" PRIx32,
                          hello->flags);
  }
  if (status == HURRAY_OK) status = hurray__wire_devices_check(hello, &e);
  if (status == HURRAY_OK) {
    memcpy(c->client_nonce, hello->nonce, WIRE_NONCE_SIZE);
    for (uint32_t i = 0; i < hello->ndevices; i++) {
      c->offered[hello->devices[i].tag / 8] |= (uint8_t)(1u << (hello->devices[i].tag % 8));
    }
    c->max_frame = hello->max_frame < s->max_frame ? hello->max_frame : s->max_frame;
    uint8_t served[32]; /* the CPU, and the devices of the tensors served (spec §4.1) */
    size_t nserved = 0;
    pthread_mutex_lock(&s->lock);
    for (uint8_t tag = 0; tag < 32; tag++) {
      if (tag == HURRAY_DEVICE_CPU || (s->device_mask & (1u << tag))) served[nserved++] = tag;
    }
    pthread_mutex_unlock(&s->lock);
    c->fd_passing = (hello->flags & WIRE_CLIENT_FD_PASSING) && s->address.family == AF_UNIX &&
                    c->tls == NULL && !(s->flags & HURRAY_SERVER_NO_FD_PASSING);
    c->minor = hello->version_minor < WIRE_VERSION_MINOR ? hello->version_minor
                                                         : WIRE_VERSION_MINOR;
    WireHello *mine = hello; /* reused for the answer */
    memset(mine, 0, sizeof *mine);
    mine->version_major = WIRE_VERSION_MAJOR;
    mine->version_minor = c->minor;
    mine->flags = (s->secret ? WIRE_HELLO_AUTH : 0u) |
                  (s->flags & HURRAY_SERVER_READ_ONLY ? WIRE_HELLO_READ_ONLY : 0u) |
                  (c->fd_passing ? WIRE_HELLO_FD_PASSING : 0u);
    mine->max_frame = c->max_frame;
    if (s->secret) status = hurray__wire_nonce(c->server_nonce, &e);
    memcpy(mine->nonce, c->server_nonce, WIRE_NONCE_SIZE);
    if (status == HURRAY_OK) status = hurray__wire_devices_fill(mine, served, nserved, &e);
    if (status == HURRAY_OK) status = hurray__wire_hello_encode(WIRE_SERVER_HELLO, mine, &c->out, &e);
  }
  free(hello);
  if (status != HURRAY_OK) {
    conn_fail(c, status == HURRAY_ELIMIT ? HURRAY_EPROTOCOL : status, e.message);
    return;
  }
  c->phase = s->secret ? PHASE_AUTH : PHASE_READY;
}

static void on_auth(HurrayServer *s, Conn *c, const uint8_t *p, size_t len) {
  uint8_t expect[WIRE_MAC_SIZE], proof[WIRE_MAC_SIZE];
  HurrayError e = {0};
  if (len != WIRE_MAC_SIZE ||
      hurray__wire_mac(s->secret, s->secret_len, false, c->client_nonce, c->server_nonce, expect,
                       &e) != HURRAY_OK ||
      !hurray__wire_mac_equal(expect, p) ||
      hurray__wire_mac(s->secret, s->secret_len, true, c->client_nonce, c->server_nonce, proof,
                       &e) != HURRAY_OK) {
    conn_fail(c, HURRAY_EAUTH, "authentication failed: wrong secret");
    return;
  }
  hurray__wire_frame(&c->out, WIRE_AUTH_OK, 0, 0, proof, sizeof proof);
  c->phase = PHASE_READY;
}

/* LIST: answered a LIST_RESULT frame at a time (list_frame), each made when the previous has
 * gone, so a client that does not read costs one frame, not the whole list. The tensors are
 * those served when the LIST came (the registry only grows). */
static void on_list(HurrayServer *s, Conn *c, uint64_t id) {
  pthread_mutex_lock(&s->lock);
  c->list_end = s->ntensors;
  pthread_mutex_unlock(&s->lock);
  c->listing = true;
  c->list_next = 0;
  c->request_id = id;
}

/* Appends the next LIST_RESULT frame (at most WIRE_CONTROL_MAX of payload) to `c->out`. */
static void list_frame(HurrayServer *s, Conn *c) {
  FileSink frame = {0};
  uint32_t count = 0;
  hurray__sink_zeros(&frame, WIRE_LIST_FIXED);
  pthread_mutex_lock(&s->lock);
  for (; c->list_next < c->list_end; c->list_next++, count++) {
    const WireServed *t = s->tensors[c->list_next];
    const HurrayTensorDesc *d = t->context->tensor;
    if (frame.len + hurray__wire_list_entry_size(t->name_len, d->ndim) > WIRE_CONTROL_MAX) break;
    hurray__wire_list_entry_encode(&frame, t->name, t->name_len, d, t->context->buffers->count,
                                   t->total_bytes);
  }
  pthread_mutex_unlock(&s->lock);
  bool end = c->list_next == c->list_end, failed = frame.failed;
  if (!failed) {
    hurray__store_le32(frame.data, count);
    hurray__wire_frame(&c->out, WIRE_LIST_RESULT, end ? WIRE_FLAG_END : 0, c->request_id,
                       frame.data, frame.len);
  }
  hurray__sink_reset(&frame);
  if (failed) conn_fail(c, HURRAY_ENOMEM, "out of memory");
  else if (end) c->listing = false;
}

/* METADATA (1.3, spec §6.8): the metadata block of the tensor named, or with no name the
 * server's, answered a METADATA_RESULT frame at a time (metadata_frame) from where it lies:
 * a connection holds one frame of it, however large the block. */
static void on_metadata(HurrayServer *s, Conn *c, uint64_t id, const uint8_t *p, size_t len) {
  char name[HURRAY_MAX_NAME + 1];
  size_t name_len = 0;
  HurrayError e = {0};
  if (hurray__wire_metadata_request_decode(p, len, name, &name_len, &e) != HURRAY_OK) {
    send_error(c, id, HURRAY_EPROTOCOL, e.message);
    return;
  }
  static const uint8_t kEmpty[1];
  const uint8_t *meta = kEmpty;
  size_t meta_len = 0;
  uint64_t check = hurray__xxh3(kEmpty, 0);
  pthread_mutex_lock(&s->lock);
  const WireServed *t = name_len ? find_locked(s, name, name_len) : NULL;
  if (t != NULL) { /* the record's metadata, its last metadata_length bytes (Appendix A) */
    meta_len = hurray__load_le32(t->record.data + 4);
    meta = t->record.data + t->record.len - meta_len;
    check = t->metadata_check;
  } else if (name_len == 0 && s->file_metadata_set && s->file_metadata.len > 0) {
    meta = s->file_metadata.data;
    meta_len = s->file_metadata.len;
    check = s->file_metadata_check;
  }
  pthread_mutex_unlock(&s->lock);
  if (name_len > 0 && t == NULL) {
    hurray__fail(&e, HURRAY_EINVAL, "no tensor named '%s'", name);
    send_error(c, id, HURRAY_EINVAL, e.message);
    return;
  }
  c->listing = true;
  c->meta = meta;
  c->meta_check = check;
  c->list_next = 0;
  c->list_end = meta_len;
  c->request_id = id;
}

/* Appends the next METADATA_RESULT frame (at most WIRE_CONTROL_MAX of payload) to `c->out`. */
static void metadata_frame(Conn *c) {
  size_t n = c->list_end - c->list_next;
  if (n > WIRE_CONTROL_MAX - WIRE_METADATA_RESULT_FIXED) {
    n = WIRE_CONTROL_MAX - WIRE_METADATA_RESULT_FIXED;
  }
  FileSink payload = {0};
  hurray__wire_metadata_result_encode((uint32_t)c->list_end, c->meta_check,
                                      c->meta + c->list_next, n, &payload);
  c->list_next += n;
  bool end = c->list_next == c->list_end, failed = payload.failed;
  if (!failed) {
    hurray__wire_frame(&c->out, WIRE_METADATA_RESULT, end ? WIRE_FLAG_END : 0, c->request_id,
                       payload.data, payload.len);
  }
  hurray__sink_reset(&payload);
  if (failed) {
    conn_fail(c, HURRAY_ENOMEM, "out of memory");
  } else if (end) {
    c->listing = false;
    c->meta = NULL;
  }
}

/* Answers request `r` (id `id`) for tensor `t`: its TENSOR_HEADER queued and its DATA frames
 * to follow, or an ERROR. `rows_checksum`: for ROWS, the slice's XXH3-64. */
static void respond(HurrayServer *s, Conn *c, WireServed *t, const WireRequest *r, uint64_t id,
                    uint64_t rows_checksum) {
  HurrayError e = {0};
  int status = hurray__wire_plan(t, r, rows_checksum, &c->plan, &e);
  if (status != HURRAY_OK) {
    send_error(c, id, status, e.message);
    return;
  }
  /* Host memory of FD_PASSING_MIN_BYTES or more goes as descriptors (device memory is staged
   * as DATA): below that, DATA frames cost fewer system calls than a descriptor the client
   * must receive, map, check and unmap (docs/impl/wire.md, "Same-host transfers"). */
  if (c->fd_passing && r->range_kind == WIRE_RANGE_WHOLE && r->resume_offset == 0 &&
      t->device == HURRAY_DEVICE_CPU && t->total_bytes >= FD_PASSING_MIN_BYTES) {
    hurray__wire_plan_fds(t, &c->plan);
  }
  hurray__wire_tensor_frame(&c->out, WIRE_TENSOR_HEADER, c->plan.nsegments ? 0 : WIRE_FLAG_END,
                            id, c->plan.header.data, c->plan.header.len, c->minor);
  hurray__sink_reset(&c->plan.header);
  c->sending = c->plan.nsegments > 0;
  c->frame_checks = c->minor >= 1 && r->range_kind == WIRE_RANGE_BYTES;
  c->checked = r->range_kind != WIRE_RANGE_WHOLE;
  c->request_id = id;
  c->segment = 0;
  c->segment_sent = 0;
  c->chunk_left = 0;
  c->data_head_len = 0;
  if (!c->sending) {
    hurray__wire_plan_reset(&c->plan);
    pthread_mutex_lock(&s->lock);
    s->stats.transfers++; /* a response without data: its header is all of it */
    pthread_mutex_unlock(&s->lock);
  }
}

/* Whether a range request must wait for the checking thread (ADR-084): ROWS of a tensor in CPU
 * memory (its slice is hashed whole), a range of a served file's buffer not verified for the
 * file as it is now. */
static bool needs_checks(WireServed *t, const WireRequest *r) {
  if (r->range_kind == WIRE_RANGE_WHOLE || t->device != HURRAY_DEVICE_CPU) return false;
  if (r->range_kind == WIRE_RANGE_ROWS) return true;
  uint32_t first = 0, end = 0;
  hurray__wire_range_buffers(t, r, &first, &end);
  for (uint32_t i = first; t->files != NULL && i < end; i++) {
    if (!hurray__wire_file_verified(&t->files[i])) return true;
  }
  return false;
}

/* Hands request `r` to the checking thread; the connection reads nothing more until it is
 * answered (on_checked). */
static void check_later(HurrayServer *s, Conn *c, WireServed *t, const WireRequest *r,
                        uint64_t id) {
  Job *j = calloc(1, sizeof *j);
  if (j == NULL) {
    send_error(c, id, HURRAY_ENOMEM, "out of memory");
    return;
  }
  j->conn = c;
  j->tensor = t;
  j->request = *r;
  j->id = id;
  c->job = j;
  pthread_mutex_lock(&s->jobs_lock);
  if (s->jobs_tail) s->jobs_tail->next = j;
  else s->jobs = j;
  s->jobs_tail = j;
  pthread_cond_signal(&s->jobs_more);
  pthread_mutex_unlock(&s->jobs_lock);
}

static void on_request(HurrayServer *s, Conn *c, uint64_t id, const uint8_t *p, size_t len) {
  WireRequest r;
  HurrayError e = {0};
  int status = hurray__wire_request_decode(p, len, &r, &e);
  if (status == HURRAY_OK && r.preferred_device != HURRAY_DEVICE_CPU &&
      !(c->offered[r.preferred_device / 8] & (1u << (r.preferred_device % 8)))) {
    /* the hello binds: answers come on the CPU (implied) or a device the client listed */
    status = hurray__fail(&e, HURRAY_EPROTOCOL,
                          "device %s (0x%02x) was not in this client's hello: a server answers "
                          "on the CPU and the devices a client lists",
                          hurray_device_name(r.preferred_device), r.preferred_device);
  }
  if (status != HURRAY_OK) {
    send_error(c, id, status, e.message);
    return;
  }
  pthread_mutex_lock(&s->lock);
  WireServed *t = find_locked(s, r.name, r.name_len); /* never removed while running */
  pthread_mutex_unlock(&s->lock);
  if (t == NULL) {
    hurray__fail(&e, HURRAY_EINVAL, "no tensor named '%s'", r.name);
    send_error(c, id, HURRAY_EINVAL, e.message);
    return;
  }
  if (needs_checks(t, &r)) {
    check_later(s, c, t, &r, id);
    return;
  }
  uint64_t rows_checksum = 0;
  if (r.range_kind == WIRE_RANGE_ROWS) { /* device memory: its queues are the loop's */
    uint8_t *stage = malloc(WIRE_STAGE_SIZE);
    status = stage ? hurray__wire_rows_checksum(t, &r, stage, &rows_checksum, &e)
                   : hurray__fail(&e, HURRAY_ENOMEM, "out of memory");
    free(stage);
    if (status != HURRAY_OK) {
      send_error(c, id, status, e.message);
      return;
    }
  }
  respond(s, c, t, &r, id, rows_checksum);
}

static void refuse_upload(HurrayServer *s, Conn *c, Upload *u, int code, const char *message) {
  send_error(c, u->request_id, code, message);
  upload_uncharge(s, u);
  u->refused = true;
  hurray_buffer_list_destroy(u->list);
  u->list = NULL;
  u->bytes = 0;
}

static void upload_finish(HurrayServer *s, Conn *c) {
  Upload *u = c->upload;
  c->upload = NULL;
  if (!u->refused) {
    HurrayError e = {0};
    HurrayTensorContext *context = NULL;
    int status = upload_expected(u) == u->tensor.nbuffers
                     ? HURRAY_OK
                     : hurray__fail(&e, HURRAY_EPROTOCOL, "upload ended before its last byte");
    if (status == HURRAY_OK) {
      status = hurray_tensor_context_create(u->tensor.record.tensor, u->list, 0, NULL, NULL,
                                            &context, &e);
      u->list = NULL; /* taken by create, whatever it returned */
    }
    WireServed *t = NULL;
    if (status == HURRAY_OK) {
      uint64_t *checksums = calloc(u->tensor.nbuffers + 1u, sizeof *checksums);
      if (checksums == NULL) {
        hurray_tensor_context_release(context);
        status = hurray__fail(&e, HURRAY_ENOMEM, "out of memory");
      } else {
        for (uint32_t i = 0; i < u->tensor.nbuffers; i++) checksums[i] = u->tensor.buffers[i].checksum;
        status = hurray__wire_served_create(u->tensor.record.name, context, checksums, -1, NULL,
                                            u->tensor.record.metadata,
                                            u->tensor.record.metadata_len, &t, &e);
        free(checksums);
      }
    }
    if (status == HURRAY_OK) status = register_tensors(s, &t, 1, NULL, 0, &e);
    if (status == HURRAY_OK) {
      u->charged = 0; /* held for as long as the server serves it */
      hurray__wire_frame(&c->out, WIRE_PUT_OK, 0, u->request_id, NULL, 0);
    } else {
      send_error(c, u->request_id, status, e.message);
    }
  }
  upload_free(s, u);
}

static void on_put(HurrayServer *s, Conn *c, const WireHeader *h, const uint8_t *p, size_t len) {
  HurrayError checked = {0}; /* 1.2: a PUT whose header_check fails ends the connection */
  if (hurray__wire_tensor_check(h, p, len, c->minor, &len, &checked) != HURRAY_OK) {
    conn_fail(c, checked.code, checked.message);
    return;
  }
  Upload *u = calloc(1, sizeof *u);
  if (u == NULL) {
    conn_fail(c, HURRAY_ENOMEM, "out of memory");
    return;
  }
  u->request_id = h->request_id;
  c->upload = u;
  HurrayError e = {0};
  char message[HURRAY_ERROR_MESSAGE_SIZE + 64];
  int status = hurray__wire_tensor_decode(p, len, &u->arena, &u->tensor, &e);
  if (status != HURRAY_OK) {
    refuse_upload(s, c, u, status, e.message);
  } else if (s->flags & HURRAY_SERVER_READ_ONLY) {
    refuse_upload(s, c, u, HURRAY_EDENIED, "this server is read-only: uploads are refused");
  } else if (u->tensor.device != HURRAY_DEVICE_CPU || u->tensor.resume_offset != 0) {
    refuse_upload(s, c, u, HURRAY_EUNSUPPORTED, "uploads are CPU buffers from offset 0");
  } else if (u->tensor.total_bytes > s->max_upload) {
    snprintf(message, sizeof message,
             "upload of %" PRIu64 " bytes exceeds this server's limit of %" PRIu64,
             u->tensor.total_bytes, s->max_upload);
    refuse_upload(s, c, u, HURRAY_ELIMIT, message);
  } else {
    /* reserved now, for the bytes to come, against every upload held or arriving */
    uint64_t charge = u->tensor.total_bytes + len + SERVER_UPLOAD_OVERHEAD, held;
    pthread_mutex_lock(&s->lock);
    bool taken = find_locked(s, u->tensor.record.name, u->tensor.record.name_len) != NULL;
    held = s->upload_held;
    bool room = !taken && charge <= s->max_upload_total - held;
    if (room) s->upload_held += charge;
    pthread_mutex_unlock(&s->lock);
    if (room) u->charged = charge;
    u->hasher = hurray__hasher_create();
    status = taken ? hurray__fail(&e, HURRAY_EINVAL, "tensor '%s' is already served",
                                  u->tensor.record.name)
             : !room ? hurray__fail(&e, HURRAY_ELIMIT,
                                    "upload of %" PRIu64 " bytes would bring what uploads hold "
                                    "to %" PRIu64 " bytes, over this server's "
                                    "max_upload_total_bytes of %" PRIu64,
                                    charge, held + charge, s->max_upload_total)
             : u->hasher == NULL ? hurray__fail(&e, HURRAY_ENOMEM, "out of memory")
                                 : hurray_buffer_list_create(u->tensor.nbuffers, &u->list, &e);
    for (uint32_t i = 0; status == HURRAY_OK && i < u->tensor.nbuffers; i++) {
      const WireBuffer *b = &u->tensor.buffers[i];
      HurrayBuffer *buffer = NULL;
      status = b->desc.alignment > SERVER_MAX_ALIGNMENT
                   ? hurray__fail(&e, HURRAY_ELIMIT, "buffer %" PRIu32 " alignment over 2 MiB", i)
                   : hurray_buffer_alloc(b->desc.byte_size, b->desc.alignment, 0, &buffer, &e);
      if (status == HURRAY_OK) status = hurray_buffer_list_append(u->list, buffer, b->role, NULL, &e);
    }
    if (status != HURRAY_OK) {
      refuse_upload(s, c, u, status, e.message);
    } else {
      u->bytes = u->tensor.total_bytes;
    }
  }
  if (h->flags & WIRE_FLAG_END) upload_finish(s, c);
}

/* A complete non-DATA frame. */
static void dispatch(HurrayServer *s, Conn *c, const WireHeader *h, const uint8_t *p) {
  size_t len = (size_t)h->length;
  char message[128];
  /* Id 0 belongs to the connection's own frames, and GOODBYE is empty (interchange.md §2.3). */
  if ((h->type == WIRE_CLIENT_HELLO || h->type == WIRE_AUTH || h->type == WIRE_GOODBYE) &&
      h->request_id != 0) {
    snprintf(message, sizeof message, "%s carries request id %" PRIu64 ", not 0",
             hurray__wire_type_name(h->type), h->request_id);
    conn_fail(c, HURRAY_EPROTOCOL, message);
    return;
  }
  if (h->type == WIRE_GOODBYE && len != 0) {
    conn_fail(c, HURRAY_EPROTOCOL, "GOODBYE has a payload");
    return;
  }
  if (h->type == WIRE_GOODBYE) {
    hurray__wire_frame(&c->out, WIRE_GOODBYE, 0, 0, NULL, 0);
    c->phase = PHASE_CLOSING;
    c->close_deadline = hurray__wire_now_ms() + SERVER_LINGER_MS;
    return;
  }
  if (c->phase == PHASE_HELLO) { /* the only frames frame_admitted lets in before READY */
    on_hello(s, c, p, len);
    return;
  }
  if (c->phase == PHASE_AUTH) {
    on_auth(s, c, p, len);
    return;
  }
  pthread_mutex_lock(&s->lock);
  s->stats.requests++;
  pthread_mutex_unlock(&s->lock);
  if (h->request_id == 0 && (h->type == WIRE_LIST || h->type == WIRE_TENSOR_REQUEST ||
                             h->type == WIRE_PUT || h->type == WIRE_METADATA)) {
    conn_fail(c, HURRAY_EPROTOCOL, "request id 0 is reserved");
    return;
  }
  switch (h->type) {
    case WIRE_LIST:
      if (len != 0) {
        send_error(c, h->request_id, HURRAY_EPROTOCOL, "LIST has a payload");
      } else {
        on_list(s, c, h->request_id);
      }
      return;
    case WIRE_TENSOR_REQUEST: on_request(s, c, h->request_id, p, len); return;
    case WIRE_METADATA: on_metadata(s, c, h->request_id, p, len); return;
    default: on_put(s, c, h, p, len); return; /* the last type frame_admitted lets in */
  }
}

/* ---- reading ------------------------------------------------------------------------------ */

/* Whether a client may send frame `h` now, decided from its header before any of its payload is
 * read: before the hello only CLIENT_HELLO (at most SERVER_HELLO_MAX), before AUTH_OK only AUTH
 * (at most its MAC), GOODBYE at any time, and after setup only the frames a client sends
 * (a PUT header at most SERVER_PUT_HEADER_MAX). So a connection that has not authenticated
 * costs a few KiB, whatever its frames claim. */
static int frame_admitted(const Conn *c, const WireHeader *h, HurrayError *error) {
  const char *name = hurray__wire_type_name(h->type);
  uint64_t limit = WIRE_CONTROL_MAX;
  if (h->type == WIRE_GOODBYE) {
    return HURRAY_OK; /* empty, or refused by dispatch (<= WIRE_CONTROL_MAX, from decode) */
  } else if (c->phase == PHASE_HELLO) {
    if (h->type != WIRE_CLIENT_HELLO) {
      return hurray__fail(error, HURRAY_EPROTOCOL, "expected CLIENT_HELLO, got %s", name);
    }
    limit = SERVER_HELLO_MAX;
  } else if (c->phase == PHASE_AUTH) {
    if (h->type != WIRE_AUTH) {
      return hurray__fail(error, HURRAY_EAUTH,
                          "authentication required: this server needs a shared secret");
    }
    limit = WIRE_MAC_SIZE;
  } else if (h->type == WIRE_PUT) {
    if (h->length > SERVER_PUT_HEADER_MAX) {
      return hurray__fail(error, HURRAY_ELIMIT, "PUT header of %" PRIu64 " bytes exceeds %" PRIu64,
                          h->length, SERVER_PUT_HEADER_MAX);
    }
    return HURRAY_OK;
  } else if (h->type == WIRE_DATA) {
    return HURRAY_OK; /* bounded by max_frame (decode), checked against the upload by the caller */
  } else if (h->type == WIRE_METADATA && c->minor < WIRE_METADATA_MINOR) {
    /* a frame this session's minor does not have, refused as that minor's server would */
    return hurray__fail(error, HURRAY_EPROTOCOL,
                        "METADATA needs protocol 1.%d; this session speaks 1.%u",
                        WIRE_METADATA_MINOR, (unsigned)c->minor);
  } else if (h->type != WIRE_LIST && h->type != WIRE_TENSOR_REQUEST && h->type != WIRE_METADATA) {
    return hurray__fail(error, HURRAY_EPROTOCOL, "unexpected %s frame from a client", name);
  }
  if (h->length > limit) {
    return hurray__fail(error, HURRAY_ELIMIT,
                        "%s frame of %" PRIu64 " bytes exceeds the limit of %" PRIu64, name,
                        h->length, limit);
  }
  return HURRAY_OK;
}

/* Reads what is there; returns false once the connection has been closed. */
/* A draining connection's bytes, discarded; returns false once it has been closed: at the
 * client's end, an error, or SERVER_DRAIN_MAX bytes. */
static bool conn_drain(HurrayServer *s, Conn *c) {
  for (;;) {
    ssize_t n = recv(c->fd, s->scratch, sizeof s->scratch, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return true;
    if (n <= 0 || (c->drained += (uint64_t)n) > SERVER_DRAIN_MAX) {
      conn_close(s, c);
      return false;
    }
  }
}

static bool conn_read(HurrayServer *s, Conn *c) {
  if (c->draining) return conn_drain(s, c);
  for (int rounds = 0; rounds < 64; rounds++) {
    if (c->phase == PHASE_CLOSING || c->sending || c->listing || c->job) return true;
    if (c->out.len > c->out_sent && c->upload == NULL) return true; /* backpressure */
    uint8_t *dest;
    size_t want;
    bool data = c->have_header && c->h.type == WIRE_DATA;
    Upload *u = c->upload;
    if (!c->have_header) {
      dest = c->head + c->head_got;
      want = WIRE_HEADER_SIZE - c->head_got;
    } else if (data && c->head_got < WIRE_HEADER_SIZE + WIRE_DATA_FIXED) {
      dest = c->head + c->head_got;
      want = WIRE_HEADER_SIZE + WIRE_DATA_FIXED - c->head_got;
    } else if (data) {
      uint64_t left = c->h.length - c->got;
      if (u->refused) {
        dest = s->scratch;
        want = left < sizeof s->scratch ? (size_t)left : sizeof s->scratch;
      } else {
        dest = (uint8_t *)u->list->buffers[u->buffer]->data + u->offset;
        want = left > SIZE_MAX ? SIZE_MAX : (size_t)left;
      }
    } else {
      dest = c->payload + c->got;
      want = (size_t)(c->h.length - c->got);
    }
    ssize_t n = want ? hurray__wire_recv(c->fd, c->tls, dest, want) : 0;
    if (want && n == 0) {
      conn_close(s, c); /* the peer closed */
      return false;
    }
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return true;
      conn_close(s, c);
      return false;
    }
    int64_t now = hurray__wire_now_ms();
    c->last_progress = now;
    if (c->frame_start == 0) c->frame_start = now;
    HurrayError e = {0};
    if (!c->have_header) {
      c->head_got += (size_t)n;
      if (c->head_got < WIRE_HEADER_SIZE) continue;
      uint64_t max_data = c->phase == PHASE_READY ? c->max_frame + WIRE_DATA_FIXED : 0;
      int status = hurray__wire_header_decode(c->head, max_data, &c->h, &e);
      if (status == HURRAY_OK) status = frame_admitted(c, &c->h, &e);
      if (status == HURRAY_OK && (c->h.type == WIRE_DATA) != (c->upload != NULL)) {
        status = hurray__fail(&e, HURRAY_EPROTOCOL, c->upload ? "expected DATA of the upload"
                                                              : "DATA outside an upload");
      }
      if (status == HURRAY_OK && c->h.type == WIRE_DATA &&
          (c->h.request_id != c->upload->request_id || c->h.length < WIRE_DATA_FIXED)) {
        status = hurray__fail(&e, HURRAY_EPROTOCOL, "DATA frame of another request or short");
      }
      if (status != HURRAY_OK) {
        conn_fail(c, status, e.message);
        return true;
      }
      c->have_header = true;
      c->got = 0;
      if (c->h.type != WIRE_DATA) {
        c->payload = malloc(c->h.length ? (size_t)c->h.length : 1);
        if (c->payload == NULL) {
          conn_fail(c, HURRAY_ENOMEM, "out of memory");
          return true;
        }
        account(s, c);
      }
    } else if (data && c->head_got < WIRE_HEADER_SIZE + WIRE_DATA_FIXED) {
      c->head_got += (size_t)n;
      if (c->head_got < WIRE_HEADER_SIZE + WIRE_DATA_FIXED) continue;
      c->got = WIRE_DATA_FIXED;
      const uint8_t *f = c->head + WIRE_HEADER_SIZE;
      uint32_t buffer = hurray__load_le32(f);
      uint64_t offset = hurray__load_le64(f + 8);
      uint64_t bytes = c->h.length - WIRE_DATA_FIXED;
      if (!u->refused) {
        upload_expected(u);
        bool ok = hurray__load_le32(f + 4) == 0 && buffer == u->buffer && offset == u->offset &&
                  u->buffer < u->tensor.nbuffers && bytes > 0 &&
                  bytes <= u->tensor.buffers[u->buffer].desc.byte_size - u->offset;
        if (!ok) {
          snprintf((char *)s->scratch, 256,
                   "DATA for buffer %" PRIu32 " offset %" PRIu64 " is not the next %" PRIu64
                   " bytes of the upload",
                   buffer, offset, bytes);
          refuse_upload(s, c, u, HURRAY_EPROTOCOL, (const char *)s->scratch);
          account(s, c);
        }
      }
    } else {
      c->got += (uint64_t)n;
      if (data && !u->refused) {
        hurray__hasher_update(u->hasher, dest, (size_t)n);
        u->offset += (uint64_t)n;
        const WireBuffer *b = &u->tensor.buffers[u->buffer];
        if (u->offset == b->desc.byte_size) {
          if (hurray__hasher_digest(u->hasher) != b->checksum) {
            snprintf((char *)s->scratch, 256, "upload of '%s': buffer %" PRIu32 " checksum mismatch",
                     u->tensor.record.name, u->buffer);
            refuse_upload(s, c, u, HURRAY_ECHECKSUM, (const char *)s->scratch);
            account(s, c);
          }
          if (u->hasher) hurray__hasher_reset(u->hasher);
        }
      }
    }
    if (c->have_header && c->got == c->h.length && (!data || c->head_got == sizeof c->head)) {
      WireHeader h = c->h;
      uint8_t *payload = c->payload;
      c->payload = NULL;
      c->have_header = false;
      c->head_got = 0;
      c->got = 0;
      c->frame_start = 0;
      if (data) {
        if (h.flags & WIRE_FLAG_END) upload_finish(s, c);
      } else {
        dispatch(s, c, &h, payload);
      }
      free(payload);
      account(s, c);
    }
  }
  return true;
}

/* ---- writing ------------------------------------------------------------------------------ */

/* Ends the response being sent with ERROR for its request, between two of its frames: the
 * connection goes on. */
static void response_fail(HurrayServer *s, Conn *c, int code, const char *message) {
  send_error(c, c->request_id, code, message);
  c->sending = false;
  hurray__wire_plan_reset(&c->plan);
  free(c->stage);
  c->stage = NULL;
  account(s, c);
}

/* Whether the DATA frame of segment `g` being sent is staged: device memory, a served file read
 * with pread (all but a plaintext WHOLE answer: by_mapping). */
static bool staged(const Conn *c, const WireSegment *g) {
  return g->device != NULL || (g->file != NULL && !c->by_mapping);
}

/* The zeros that finish a DATA frame from a served file's mapping once the file has turned out to
 * end before the frame does (writev: EFAULT): the stage, zeroed; false if it cannot be had. */
static bool shrank_under_frame(HurrayServer *s, Conn *c) {
  if (c->stage == NULL) {
    c->stage = malloc(WIRE_STAGE_SIZE);
    account(s, c);
  }
  if (c->stage != NULL) memset(c->stage, 0, WIRE_STAGE_SIZE);
  c->shrank = true;
  return c->stage != NULL;
}

/* Reads the next DATA frame's bytes of staged segment `g` into the connection's stage,
 * shortening `*chunk` to what the stage holds; blocking (the event loop waits for the device,
 * or for one pread of a check chunk: ADR-084). For a range, a file's chunk is checked against
 * its verified read. A failure (a device that fails, a file that shrank or changed) ends the
 * response with ERROR: it cannot go on without its bytes. */
static bool stage_chunk(HurrayServer *s, Conn *c, const WireSegment *g, uint64_t *chunk) {
  HurrayError e = {0};
  if (*chunk > WIRE_STAGE_SIZE) *chunk = WIRE_STAGE_SIZE;
  if (c->stage == NULL) {
    c->stage = malloc(WIRE_STAGE_SIZE);
    account(s, c);
  }
  c->stage_at = 0;
  int status = HURRAY_OK;
  if (c->stage == NULL) {
    status = hurray__fail(&e, HURRAY_ENOMEM, "out of memory");
  } else if (g->file != NULL) { /* the check chunk holding the next byte, up to its end */
    uint64_t at = g->at + c->segment_sent, begin = 0;
    size_t len = 0;
    status = hurray__wire_file_chunk(g->file, at, c->checked, c->stage, &begin, &len, &e);
    c->stage_at = (size_t)(at - begin);
    if (*chunk > begin + len - at) *chunk = begin + len - at;
  } else {
    status = hurray__wire_segment_read(g, c->segment_sent, c->stage, (size_t)*chunk, &e);
  }
  if (status == HURRAY_OK) return true;
  response_fail(s, c, status, e.message);
  return false;
}

/* The bytes of the next DATA frame of segment `g`: staged, from memory, or zeros. */
static const uint8_t *frame_bytes(const Conn *c, const WireSegment *g) {
  return c->shrank    ? c->stage
         : staged(c, g) ? c->stage + c->stage_at + (c->chunk_size - c->chunk_left)
         : g->data ? g->data + c->segment_sent
                   : kZeros; /* gaps: < 64 bytes */
}

/* A DATA frame's check (spec §6.4): the low 32 bits of the XXH3-64 of its `n` bytes, which
 * are staged already when they come from device memory or a file. */
static uint32_t frame_check(const Conn *c, const WireSegment *g, uint64_t n) {
  const uint8_t *from = staged(c, g) ? c->stage + c->stage_at : frame_bytes(c, g);
  return (uint32_t)hurray__xxh3(from, (size_t)n);
}

/* Counts a frame that is out: its stream bytes, and the response if it was the last. */
static void count_sent(HurrayServer *s, const WireSegment *g, uint64_t n, bool last) {
  pthread_mutex_lock(&s->lock);
  if (g->by_fd) s->stats.passed_bytes += n;
  else s->stats.sent_bytes += n;
  if (last) s->stats.transfers++;
  pthread_mutex_unlock(&s->lock);
}

/* Writes what the socket takes; returns false once the connection has been closed. */
static bool conn_write(HurrayServer *s, Conn *c) {
  for (;;) {
    struct iovec iov[2];
    int n_iov = 0;
    int attach = -1;
    /* control frames go between DATA frames, never inside one */
    bool control = c->out.len > c->out_sent && c->data_head_len == 0;
    if (control) {
      iov[n_iov++] = (struct iovec){c->out.data + c->out_sent, c->out.len - c->out_sent};
    } else if (c->listing && c->out.len == 0) {
      if (c->meta) metadata_frame(c);
      else list_frame(s, c);
      continue;
    } else if (data_pending(c)) {
      const WireSegment *g = &c->plan.segments[c->segment];
      bool last_segment = c->segment + 1 == c->plan.nsegments;
      uint8_t *f = c->data_head + WIRE_HEADER_SIZE;
      if (c->data_head_len == 0 && g->by_fd) { /* the buffer as a descriptor (spec §6.6) */
        WireHeader h = {WIRE_DATA_FD, last_segment ? WIRE_FLAG_END : 0, c->request_id,
                        WIRE_DATA_FD_SIZE};
        hurray__wire_header_encode(&h, c->data_head);
        WireFdRef ref = {g->buffer, g->fd_kind, g->fd_offset, g->len};
        hurray__wire_fd_ref_encode(&ref, f);
        c->data_head_len = WIRE_HEADER_SIZE + WIRE_DATA_FD_SIZE;
        c->data_head_sent = 0;
        c->chunk_left = 0;
      } else if (c->data_head_len == 0) { /* the next DATA frame */
        uint64_t left = g->len - c->segment_sent;
        uint64_t chunk = left < c->max_frame ? left : c->max_frame;
        /* A WHOLE answer of a file over a plain socket goes from the file's mapping, which only
           the kernel reads (writev): a page the file no longer has is EFAULT there, never
           SIGBUS. Each frame begins only if the file holds it now. */
        c->by_mapping = g->file != NULL && !c->checked && c->tls == NULL;
        HurrayError e = {0};
        if (c->by_mapping &&
            hurray__wire_file_holds(g->file, g->at + c->segment_sent + chunk, &e) != HURRAY_OK) {
          response_fail(s, c, e.code, e.message);
          continue;
        }
        if (staged(c, g) && !stage_chunk(s, c, g, &chunk)) {
          continue; /* failed: the ERROR goes */
        }
        bool last = last_segment && chunk == left;
        WireHeader h = {WIRE_DATA, last ? WIRE_FLAG_END : 0, c->request_id, chunk + WIRE_DATA_FIXED};
        hurray__wire_header_encode(&h, c->data_head);
        hurray__store_le32(f, g->buffer);
        hurray__store_le32(f + 4, c->frame_checks ? frame_check(c, g, chunk) : 0);
        hurray__store_le64(f + 8, g->offset + c->segment_sent);
        c->data_head_len = WIRE_HEADER_SIZE + WIRE_DATA_FIXED;
        c->data_head_sent = 0;
        c->chunk_left = chunk;
        c->chunk_size = chunk;
      }
      if (c->data_head_sent < c->data_head_len) {
        iov[n_iov++] = (struct iovec){c->data_head + c->data_head_sent,
                                      c->data_head_len - c->data_head_sent};
      }
      if (c->chunk_left > 0) {
        size_t len = (size_t)(c->shrank && c->chunk_left > WIRE_STAGE_SIZE ? WIRE_STAGE_SIZE
                                                                           : c->chunk_left);
        iov[n_iov++] = (struct iovec){(void *)frame_bytes(c, g), len};
      }
      if (g->by_fd && c->data_head_sent == 0) attach = g->fd; /* with the frame's first byte */
    } else {
      break;
    }
    ssize_t n = attach >= 0 ? hurray__wire_sendmsg(c->fd, iov, (size_t)n_iov, attach)
                            : hurray__wire_sendv(c->fd, c->tls, iov, n_iov);
    if (n < 0 && errno == EFAULT && !control && c->by_mapping && !c->shrank) {
      if (shrank_under_frame(s, c)) continue; /* the frame is finished with zeros */
    }
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return true;
      conn_close(s, c);
      return false;
    }
    c->last_progress = hurray__wire_now_ms();
    size_t w = (size_t)n;
    if (control) {
      c->out_sent += w;
      if (c->out_sent == c->out.len) {
        c->out.len = 0;
        c->out_sent = 0;
        if (c->out.cap > 2 * WIRE_CONTROL_MAX) { /* give back what a big frame grew */
          hurray__sink_reset(&c->out);
          account(s, c);
        }
      }
      continue;
    }
    const WireSegment *g = &c->plan.segments[c->segment];
    size_t head_left = c->data_head_len - c->data_head_sent;
    size_t from_head = w < head_left ? w : head_left;
    c->data_head_sent += from_head;
    w -= from_head;
    c->chunk_left -= w;
    c->segment_sent += g->by_fd && c->data_head_sent == c->data_head_len ? g->len : w;
    if (c->chunk_left == 0 && c->data_head_sent == c->data_head_len) {
      c->data_head_len = 0; /* the frame is out */
      count_sent(s, g, g->by_fd ? g->len : c->chunk_size,
                 c->segment_sent == g->len && c->segment + 1 == c->plan.nsegments && !c->shrank);
      if (c->shrank) { /* it went out padded with zeros: the answer ends with its ERROR */
        HurrayError e = {0};
        c->shrank = false;
        response_fail(s, c, hurray__wire_file_short(g->file, &e), e.message);
        continue;
      }
      if (c->segment_sent == g->len) {
        c->segment++;
        c->segment_sent = 0;
      }
      if (c->segment == c->plan.nsegments || c->phase == PHASE_CLOSING) { /* answered, or cut */
        c->sending = false;
        hurray__wire_plan_reset(&c->plan);
        free(c->stage);
        c->stage = NULL;
        account(s, c);
      }
    }
  }
  if (hurray__wire_tls_unflushed(c->tls) && hurray__wire_sendv(c->fd, c->tls, NULL, 0) < 0 &&
      errno != EAGAIN) {
    conn_close(s, c);
    return false;
  }
  if (c->phase == PHASE_CLOSING && c->out.len == 0 && !c->sending && !c->draining &&
      !hurray__wire_tls_unflushed(c->tls)) {
    if (c->tls != NULL || shutdown(c->fd, SHUT_WR) != 0) {
      conn_close(s, c);
      return false;
    }
    c->draining = true; /* conn_read waits for the client's end, until close_deadline */
  }
  return true;
}


static void conn_interest(HurrayServer *s, Conn *c) {
  bool pending = c->out.len > c->out_sent || data_pending(c) || c->listing ||
                 hurray__wire_tls_unflushed(c->tls);
  bool reading = c->draining || (c->phase != PHASE_CLOSING && !c->sending && !c->listing &&
                                  !c->job && (!pending || c->upload != NULL));
  int read_want = hurray__wire_io_want(c->tls, true), write_want = hurray__wire_io_want(c->tls, false);
  if (c->phase == PHASE_TLS) { /* the handshake waits for one direction */
    reading = hurray__wire_tls_want(c->tls) == WIRE_WANT_READ;
    pending = !reading;
  } else { /* a TLS read may wait to write, and a write to read */
    bool r = (reading && read_want == WIRE_WANT_READ) || (pending && write_want == WIRE_WANT_READ);
    pending = (pending && write_want == WIRE_WANT_WRITE) || (reading && read_want == WIRE_WANT_WRITE);
    reading = r;
  }
  /* a connection waiting for the checking thread reads nothing: a half-close it would not act
     on must not wake the loop until then (a hang-up still does) */
  uint32_t events = (pending ? EPOLLOUT : 0u) | (reading ? EPOLLIN : 0u) |
                    (c->job ? 0u : (uint32_t)EPOLLRDHUP);
  if (events != c->events) {
    struct epoll_event ev = {.events = events, .data.ptr = c};
    epoll_ctl(s->epoll_fd, EPOLL_CTL_MOD, c->fd, &ev);
    c->events = events;
  }
}

/* Answers a connection the server will not serve with ERROR HURRAY_EDENIED (id 0), without
 * waiting, and closes it. */
static void refuse_connection(HurrayServer *s, int fd, const char *message) {
  pthread_mutex_lock(&s->lock);
  s->stats.refused++;
  pthread_mutex_unlock(&s->lock);
  FileSink frame = {0}, payload = {0};
  hurray__wire_error_encode(HURRAY_EDENIED, message, &payload);
  hurray__wire_frame(&frame, WIRE_ERROR, 0, 0, payload.data, payload.len);
  if (!frame.failed) (void)send(fd, frame.data, frame.len, MSG_NOSIGNAL | MSG_DONTWAIT);
  hurray__sink_reset(&frame);
  hurray__sink_reset(&payload);
  close(fd);
}

/* Stops or resumes watching the listening socket (out of descriptors: see on_accept). */
static void accept_pause(HurrayServer *s, bool pause) {
  struct epoll_event ev = {.events = pause ? 0u : EPOLLIN, .data.ptr = NULL};
  if (epoll_ctl(s->epoll_fd, EPOLL_CTL_MOD, s->listen_fd, &ev) == 0) s->accept_paused = pause;
}

/* Out of descriptors (EMFILE, ENFILE), a waiting connection cannot be accepted, and the listening
 * socket stays readable: watching it would spin the loop. The spare descriptor is given up to
 * accept the connection and refuse it, then taken again; without a spare the listener is not
 * watched until the next tick (sweep). */
static bool accept_without_descriptors(HurrayServer *s) {
  if (s->spare_fd >= 0) {
    close(s->spare_fd);
    s->spare_fd = -1;
    int fd = accept4(s->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    bool starved = fd < 0 && (errno == EMFILE || errno == ENFILE); /* taken by another thread */
    if (fd >= 0) {
      refuse_connection(s, fd, "this server has no file descriptor left for a connection");
    }
    s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (s->spare_fd >= 0 && !starved) return fd >= 0; /* the next waiting one, likewise */
  }
  accept_pause(s, true);
  return false;
}

/* The address an accepted TCP client is counted under. */
static PeerKey peer_key(const struct sockaddr_storage *ss) {
  PeerKey k = {0};
  if (ss->ss_family == AF_INET) {
    const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
    k.bytes[10] = k.bytes[11] = 0xff;
    memcpy(k.bytes + 12, &in->sin_addr, 4);
    k.counted = true;
  } else if (ss->ss_family == AF_INET6) {
    memcpy(k.bytes, &((const struct sockaddr_in6 *)ss)->sin6_addr, 16);
    k.counted = true;
  }
  static const uint8_t v4_mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  static const uint8_t v6_loopback[16] = {[15] = 1};
  k.loopback = k.counted && ((memcmp(k.bytes, v4_mapped, 12) == 0 && k.bytes[12] == 127) ||
                             memcmp(k.bytes, v6_loopback, 16) == 0);
  return k;
}

/* Whether a connection from `k` would exceed the per-address bound (ADR-099): the open
 * connections from that address counted (at most max_connections of them, on the loop). */
static bool over_address_limit(const HurrayServer *s, const PeerKey *k, uint32_t *limit) {
  *limit = s->max_per_address ? s->max_per_address : SERVER_PER_ADDRESS;
  if (!k->counted || (s->max_per_address == 0 && k->loopback)) return false;
  uint32_t n = 0;
  for (const Conn *c = s->conns; c != NULL; c = c->next) {
    if (c->peer.counted && memcmp(c->peer.bytes, k->bytes, 16) == 0 && ++n >= *limit) return true;
  }
  return false;
}

static void on_accept(HurrayServer *s) {
  for (;;) {
    struct sockaddr_storage from;
    socklen_t from_len = sizeof from;
    memset(&from, 0, sizeof from);
    int fd = accept4(s->listen_fd, (struct sockaddr *)&from, &from_len,
                     SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
      if (accept_without_descriptors(s)) continue;
      return;
    }
    if (fd < 0) return; /* EAGAIN, or a failed connection: the next one may work */
    pthread_mutex_lock(&s->lock);
    bool full = s->stats.connections >= s->max_connections;
    pthread_mutex_unlock(&s->lock);
    if (full) {
      refuse_connection(s, fd, "this server is at its connection limit");
      continue;
    }
    PeerKey peer = peer_key(&from);
    uint32_t limit = 0;
    if (over_address_limit(s, &peer, &limit)) {
      char message[128];
      snprintf(message, sizeof message,
               "this server is at its limit of %" PRIu32 " connections from one address", limit);
      refuse_connection(s, fd, message);
      continue;
    }
    if (s->address.family != AF_UNIX) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    Conn *c = calloc(1, sizeof *c);
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
    if (c == NULL || (s->tls && hurray__wire_tls_open(s->tls, fd, NULL, &c->tls, NULL) != HURRAY_OK) ||
        epoll_ctl(s->epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
      if (c) hurray__wire_tls_close(c->tls);
      free(c);
      close(fd);
      continue;
    }
    int64_t now = hurray__wire_now_ms();
    c->fd = fd;
    c->peer = peer;
    c->events = ev.events;
    c->phase = s->tls ? PHASE_TLS : PHASE_HELLO;
    c->handshake_deadline = now + s->handshake_ms;
    c->last_progress = now;
    c->next = s->conns;
    if (s->conns) s->conns->prev = c;
    s->conns = c;
    pthread_mutex_lock(&s->lock);
    s->stats.connections++;
    s->stats.accepted++;
    pthread_mutex_unlock(&s->lock);
    account(s, c);
  }
}

static void sweep(HurrayServer *s) {
  int64_t now = hurray__wire_now_ms();
  if (s->accept_paused) { /* descriptors may have been freed since */
    if (s->spare_fd < 0) s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    accept_pause(s, false);
  }
  Conn *next = NULL;
  for (Conn *c = s->conns; c != NULL; c = next) {
    next = c->next;
    char message[96];
    if (c->phase == PHASE_CLOSING || c->phase == PHASE_TLS) { /* no frame can go out */
      if (now > (c->phase == PHASE_TLS ? c->handshake_deadline : c->close_deadline)) {
        conn_close(s, c);
      }
      continue;
    }
    if (c->job != NULL) continue; /* the server is the one working: no timeout */
    if (c->phase != PHASE_READY && now > c->handshake_deadline) {
      snprintf(message, sizeof message, "handshake not completed within %" PRIu32 " ms",
               s->handshake_ms);
    } else if (now - c->last_progress > (int64_t)s->idle_ms) {
      snprintf(message, sizeof message, "no progress for %" PRIu32 " ms", s->idle_ms);
    } else if (c->frame_start != 0 && now - c->frame_start > (int64_t)s->idle_ms) {
      snprintf(message, sizeof message, "a frame took longer than %" PRIu32 " ms", s->idle_ms);
    } else {
      continue;
    }
    conn_fail(c, HURRAY_ETIMEOUT, message);
    if (conn_write(s, c)) conn_interest(s, c);
  }
}

/* The TLS handshake of a new connection. A plaintext Hurray client is answered in plaintext,
 * with an ERROR frame. */
static bool conn_handshake(HurrayServer *s, Conn *c) {
  bool done = false;
  if (hurray__wire_tls_handshake(c->tls, &done, NULL) != HURRAY_OK) {
    if (!hurray__wire_tls_plaintext(c->tls)) {
      conn_close(s, c); /* OpenSSL has sent the peer its alert */
      return false;
    }
    hurray__wire_tls_close(c->tls);
    c->tls = NULL;
    c->phase = PHASE_HELLO;
    conn_fail(c, HURRAY_EPROTOCOL, "this server speaks TLS only: connect with hurrays://");
    return conn_write(s, c);
  }
  c->last_progress = hurray__wire_now_ms();
  if (done) c->phase = PHASE_HELLO;
  return true;
}

/* Serves what `ev` (epoll events) says a connection is ready for. */
static void conn_serve(HurrayServer *s, Conn *c, uint32_t ev) {
  bool alive = true;
  if (c->phase == PHASE_TLS) {
    alive = conn_handshake(s, c);
    if (!alive || c->phase == PHASE_TLS) {
      if (alive) conn_interest(s, c);
      return;
    }
    ev |= EPOLLIN; /* the hello may have come with the handshake */
  }
  if (c->tls) ev |= EPOLLIN | EPOLLOUT; /* either may be what a blocked session waits for */
  if (ev & (EPOLLOUT | EPOLLERR | EPOLLHUP)) alive = conn_write(s, c);
  if (alive && (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))) alive = conn_read(s, c);
  if (alive && (ev & (EPOLLHUP | EPOLLERR)) && !(c->events & EPOLLIN)) {
    conn_close(s, c);
    alive = false;
  }
  if (alive) alive = conn_write(s, c);
  if (!alive) return;
  conn_interest(s, c);
  bool pending = (c->events & EPOLLIN) && hurray__wire_tls_pending(c->tls);
  if (pending != c->tls_pending) {
    c->tls_pending = pending;
    if (pending) s->tls_pending++;
    else s->tls_pending--;
  }
}

/* The jobs the checking thread has done: each request answered, its connection served again. */
static void on_checked(HurrayServer *s) {
  uint64_t v;
  ssize_t n = read(s->done_fd, &v, sizeof v);
  (void)n;
  pthread_mutex_lock(&s->jobs_lock);
  Job *j = s->done;
  s->done = NULL;
  pthread_mutex_unlock(&s->jobs_lock);
  while (j != NULL) {
    Job *next = j->next;
    Conn *c = j->conn;
    if (c != NULL) {
      c->job = NULL;
      c->last_progress = hurray__wire_now_ms();
      if (j->status == HURRAY_OK) {
        respond(s, c, j->tensor, &j->request, j->id, j->rows_checksum);
      } else {
        send_error(c, j->id, j->status, j->error.message);
      }
      account(s, c);
      conn_serve(s, c, EPOLLOUT);
    }
    free(j);
    j = next;
  }
}

int hurray_server_run(HurrayServer *s, HurrayError *error) {
  if (s == NULL) return hurray__fail(error, HURRAY_EINVAL, "server is NULL");
  struct epoll_event events[256];
  int64_t next_sweep = hurray__wire_now_ms() + SERVER_TICK_MS;
  bool stopping = false;
  while (!stopping) {
    int n = epoll_wait(s->epoll_fd, events, 256, s->tls_pending ? 0 : SERVER_TICK_MS);
    if (n < 0 && errno != EINTR) {
      return hurray__fail(error, HURRAY_EIO, "epoll_wait: %s", strerror(errno));
    }
    for (int i = 0; i < n; i++) {
      void *tag = events[i].data.ptr;
      if (tag == NULL) {
        on_accept(s);
        continue;
      }
      if (tag == &s->done_fd) {
        on_checked(s);
        continue;
      }
      if (tag == &s->wake_fd) {
        uint64_t v;
        ssize_t r = read(s->wake_fd, &v, sizeof v);
        (void)r;
        stopping = true;
        continue;
      }
      /* A connection closed earlier in this batch was freed: epoll does not report a removed fd,
         and `c` is only reached through its own event. */
      conn_serve(s, tag, events[i].events);
    }
    if (s->tls_pending) { /* sessions holding bytes the socket no longer signals */
      Conn *next = NULL;
      for (Conn *c = s->conns; c != NULL; c = next) {
        next = c->next;
        if (c->tls_pending) conn_serve(s, c, EPOLLIN);
      }
    }
    int64_t now = hurray__wire_now_ms();
    if (now >= next_sweep) {
      sweep(s);
      next_sweep = now + SERVER_TICK_MS;
    }
  }
  while (s->conns) conn_close(s, s->conns);
  return HURRAY_OK;
}

void hurray_server_destroy(HurrayServer *s) {
  if (s == NULL) return;
  while (s->conns) conn_close(s, s->conns);
  checker_stop(s);
  if (s->listen_fd >= 0) close(s->listen_fd);
  if (s->epoll_fd >= 0) close(s->epoll_fd);
  if (s->wake_fd >= 0) close(s->wake_fd);
  if (s->done_fd >= 0) close(s->done_fd);
  if (s->spare_fd >= 0) close(s->spare_fd);
  if (s->unix_bound) { /* only the socket it bound: never a file that failed bind or took its
                          place, nor another server's socket */
    struct sockaddr_un un;
    struct stat st;
    memcpy(&un, s->address.storage, sizeof un);
    if (lstat(un.sun_path, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_dev == s->unix_dev &&
        st.st_ino == s->unix_ino) {
      unlink(un.sun_path);
    }
  }
  for (size_t i = 0; i < s->ntensors; i++) hurray__wire_served_destroy(s->tensors[i]);
  free(s->tensors);
  free(s->index);
  for (size_t i = 0; i < s->nfiles; i++) close(s->files[i]);
  free(s->files);
  hurray__sink_reset(&s->file_metadata);
  free(s->secret);
  hurray__wire_tls_destroy(s->tls);
  pthread_mutex_destroy(&s->lock);
  pthread_mutex_destroy(&s->jobs_lock);
  pthread_cond_destroy(&s->jobs_more);
  free(s);
}
