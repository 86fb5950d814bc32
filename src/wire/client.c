/* client.c -- HurrayClient: blocking calls over a non-blocking socket (or a TLS session over
 * it, for "hurrays://"), every wait (poll) bounded by the idle timeout and by the deadline of
 * the call, when the client has one (ADR-078). Tensor bytes are
 * received straight into the buffers they end up in -- or, for a tensor served on a device,
 * into a 1 MiB host chunk copied to device memory as it fills (ADR-062) -- hashed as they
 * arrive (a large buffer's on a helper thread behind the receive, verify.c), and handed out
 * only once every buffer's checksum has matched. A byte range goes into the caller's memory or
 * a file, each DATA frame checked as it arrives (ADR-064). */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "wire.h"

#define CLIENT_MAX_ALIGNMENT ((uint32_t)1 << 21)

struct HurrayClient {
  int fd;
  WireTls *tls_config; /* "hurrays://": the trust, reused by every reconnection */
  WireTlsConn *tls;    /* the session over `fd` */
  WireAddress address;
  uint32_t timeout_ms;      /* the deadline of each whole call; 0: none */
  uint32_t idle_timeout_ms; /* the longest wait without progress */
  int64_t deadline;         /* of the call running now (hurray__wire_now_ms), 0 for none */
  uint64_t offered_frame;
  uint64_t max_frame; /* negotiated */
  uint64_t max_tensor_bytes;
  uint8_t devices[WIRE_MAX_DEVICES];
  uint32_t ndevices;
  uint8_t *secret;
  size_t secret_len;
  WireHello *server;
  uint64_t next_id;
  bool broken; /* after a connection error: only destroy (or a resuming get) */
  bool want_fd;    /* offer the same-host fast path (over a Unix socket) */
  bool fd_passing; /* negotiated: buffers may come as DATA_FD (spec §6.6) */
  int pending_fd;  /* a descriptor received with the frame being read, -1 for none */
  bool fd_extra;   /* a descriptor arrived where none may */
  bool peer_trusted; /* a Unix socket peer of this user (or root), which could signal this
                        process anyway: its unsealed files may be mapped (ADR-078) */
};

/* ---- blocking I/O with a deadline --------------------------------------------------------- */

static void disconnect(HurrayClient *c) {
  hurray__wire_tls_close(c->tls);
  c->tls = NULL;
  if (c->fd >= 0) close(c->fd);
  c->fd = -1;
  if (c->pending_fd >= 0) close(c->pending_fd);
  c->pending_fd = -1;
}

static int broken(HurrayClient *c, int status) {
  disconnect(c);
  c->broken = true;
  return status;
}

/* Starts the deadline of a call (connect, list, get, fetch, read, read_file, put): every wait
 * of the call, reconnections included, ends by it. */
static void begin_call(HurrayClient *c) {
  c->deadline = c->timeout_ms ? hurray__wire_now_ms() + c->timeout_ms : 0;
}

/* Waits until the socket is ready for `want` (WIRE_WANT_*): at most the idle timeout, and no
 * later than the call's deadline. */
static int wait_for(HurrayClient *c, int want, HurrayError *error) {
  struct pollfd p = {.fd = c->fd, .events = want == WIRE_WANT_READ ? POLLIN : POLLOUT};
  for (;;) {
    int64_t wait = c->idle_timeout_ms;
    bool deadline = false;
    if (c->deadline != 0) {
      int64_t left = c->deadline - hurray__wire_now_ms();
      if (left <= wait) {
        wait = left > 0 ? left : 0;
        deadline = true;
      }
    }
    int n = poll(&p, 1, (int)wait);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0 && deadline) {
      return broken(c, hurray__fail(error, HURRAY_ETIMEOUT,
                                    "the call took longer than its timeout of %" PRIu32 " ms",
                                    c->timeout_ms));
    }
    if (n == 0) {
      return broken(c, hurray__fail(error, HURRAY_ETIMEOUT, "no progress for %" PRIu32 " ms",
                                    c->idle_timeout_ms));
    }
    if (n < 0) return broken(c, hurray__fail(error, HURRAY_EIO, "poll: %s", strerror(errno)));
    return HURRAY_OK;
  }
}

static int send_iov(HurrayClient *c, struct iovec *iov, int n_iov, HurrayError *error) {
  while (n_iov > 0) {
    ssize_t n = hurray__wire_sendv(c->fd, c->tls, iov, n_iov);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        return broken(c, hurray__fail(error, HURRAY_ECONNECTION, "connection lost while sending: %s",
                                      hurray__wire_io_error(c->tls, errno)));
      }
      int status = wait_for(c, hurray__wire_io_want(c->tls, false), error);
      if (status != HURRAY_OK) return status;
      continue;
    }
    size_t w = (size_t)n;
    while (n_iov > 0 && w >= iov->iov_len) {
      w -= iov->iov_len;
      iov++;
      n_iov--;
    }
    if (n_iov > 0) {
      iov->iov_base = (uint8_t *)iov->iov_base + w;
      iov->iov_len -= w;
    }
  }
  return HURRAY_OK;
}

static int send_bytes(HurrayClient *c, const void *data, size_t len, HurrayError *error) {
  struct iovec iov = {(void *)data, len};
  return send_iov(c, &iov, 1, error);
}

/* `len` bytes of the stream. A descriptor comes only with the first byte of a DATA_FD frame,
 * which takes the place of a whole buffer of a WHOLE response (spec §6.6), so only the header
 * of a frame that may be one (`fd_may_come`) is received with a control buffer where fd passing
 * is on. Every other byte is received without one (recvmsg costs about 75 ns more than recv
 * here), and a descriptor a server attached to such a byte is closed by the kernel before it
 * could reach this process. */
static int recv_bytes(HurrayClient *c, void *out, size_t len, bool fd_may_come, HurrayError *error) {
  uint8_t *p = out;
  while (len > 0) {
    ssize_t n = c->fd_passing && fd_may_come
                    ? hurray__wire_recvmsg(c->fd, p, len, &c->pending_fd, &c->fd_extra)
                    : hurray__wire_recv(c->fd, c->tls, p, len);
    if (c->fd_extra) {
      return broken(c, hurray__fail(error, HURRAY_EPROTOCOL,
                                    "the server sent a file descriptor where none may come"));
    }
    if (n == 0) {
      return broken(c, hurray__fail(error, HURRAY_ECONNECTION, "the server closed the connection"));
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        return broken(c, hurray__fail(error, HURRAY_ECONNECTION, "connection lost: %s",
                                      hurray__wire_io_error(c->tls, errno)));
      }
      int status = wait_for(c, hurray__wire_io_want(c->tls, true), error);
      if (status != HURRAY_OK) return status;
      continue;
    }
    p += n;
    len -= (size_t)n;
  }
  return HURRAY_OK;
}

/* `len` bytes of a frame after its header. */
static int recv_exact(HurrayClient *c, void *out, size_t len, HurrayError *error) {
  return recv_bytes(c, out, len, false, error);
}

/* Reads a frame header, with a control buffer for a descriptor if `fd_may_come` (the frame
 * may be a DATA_FD). An ERROR frame is read whole and becomes the status (for request 0 the
 * connection is finished). */
static int read_frame_header(HurrayClient *c, WireHeader *h, bool fd_may_come, HurrayError *error) {
  uint8_t head[WIRE_HEADER_SIZE];
  int status = recv_bytes(c, head, sizeof head, fd_may_come, error);
  if (status != HURRAY_OK) return status;
  uint64_t max_data = c->max_frame ? c->max_frame + WIRE_DATA_FIXED : 0;
  status = hurray__wire_header_decode(head, max_data, h, error);
  if (status != HURRAY_OK) return broken(c, status);
  if (c->pending_fd >= 0 && h->type != WIRE_DATA_FD) {
    return broken(c, hurray__fail(error, HURRAY_EPROTOCOL,
                                  "a file descriptor came with a %s frame",
                                  hurray__wire_type_name(h->type)));
  }
  if (h->type != WIRE_ERROR) return HURRAY_OK;
  uint8_t payload[WIRE_ERROR_FIXED + WIRE_MAX_ERROR_MESSAGE];
  if (h->length > sizeof payload) {
    return broken(c, hurray__fail(error, HURRAY_EPROTOCOL, "ERROR frame too long"));
  }
  status = recv_exact(c, payload, (size_t)h->length, error);
  if (status != HURRAY_OK) return status;
  status = hurray__wire_error_decode(payload, (size_t)h->length, error);
  if (h->request_id == 0 || status == HURRAY_EPROTOCOL) broken(c, status);
  return status;
}

/* Reads the header of a frame that cannot be a DATA_FD. */
static int read_header(HurrayClient *c, WireHeader *h, HurrayError *error) {
  return read_frame_header(c, h, false, error);
}

static int read_payload(HurrayClient *c, const WireHeader *h, uint8_t **out, HurrayError *error) {
  *out = malloc(h->length ? (size_t)h->length : 1);
  if (*out == NULL) return broken(c, hurray__fail(error, HURRAY_ENOMEM, "out of memory"));
  int status = recv_exact(c, *out, (size_t)h->length, error);
  if (status != HURRAY_OK) {
    free(*out);
    *out = NULL;
  }
  return status;
}

static int expect(HurrayClient *c, const WireHeader *h, uint8_t type, uint64_t id,
                  HurrayError *error) {
  if (h->type != type || h->request_id != id) {
    return broken(c, hurray__fail(error, HURRAY_EPROTOCOL,
                                  "expected %s for request %" PRIu64 ", got %s for %" PRIu64,
                                  hurray__wire_type_name(type), id,
                                  hurray__wire_type_name(h->type), h->request_id));
  }
  return HURRAY_OK;
}

/* ---- connect and handshake ---------------------------------------------------------------- */

/* The server answered the TLS hello in plaintext, with a Hurray frame: a plaintext server
 * refusing it, or a TLS server at its connection limit (refused before any handshake). Its
 * ERROR is read without TLS. */
static int plaintext_answer(HurrayClient *c, const char *text, HurrayError *error) {
  hurray__wire_tls_close(c->tls);
  c->tls = NULL;
  WireHeader h;
  int status = read_header(c, &h, error);
  if (status != HURRAY_EDENIED) {
    status = hurray__fail(error, HURRAY_EPROTOCOL,
                          "%s answered in plaintext: it does not speak TLS (use hurray://)", text);
  }
  return broken(c, status);
}

/* The TLS handshake over the connected socket. */
static int tls_handshake(HurrayClient *c, const char *text, HurrayError *error) {
  int status = hurray__wire_tls_open(c->tls_config, c->fd, c->address.host, &c->tls, error);
  for (bool done = false; status == HURRAY_OK && !done;) {
    status = hurray__wire_tls_handshake(c->tls, &done, error);
    if (status != HURRAY_OK && hurray__wire_tls_plaintext(c->tls)) {
      return plaintext_answer(c, text, error);
    }
    if (status == HURRAY_OK && !done) status = wait_for(c, hurray__wire_tls_want(c->tls), error);
  }
  if (status != HURRAY_OK && !c->broken) status = broken(c, status);
  return status == HURRAY_OK ? status : hurray__error_prefix(error, status, "%s: ", text);
}

/* Connects to one socket address of the server, within the call's deadline. */
static int connect_one(HurrayClient *c, const WireAddress *a, HurrayError *error) {
  char text[WIRE_MAX_HOST + 64];
  hurray__wire_address_format(a, text, sizeof text);
  c->fd = socket(a->family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (c->fd < 0) return hurray__fail(error, HURRAY_EIO, "socket: %s", strerror(errno));
  c->broken = false;
  if (connect(c->fd, (const struct sockaddr *)a->storage, a->length) != 0) {
    if (errno != EINPROGRESS && errno != EAGAIN) {
      int e = errno;
      return broken(c, hurray__fail_errno(error, HURRAY_ECONNECTION, e, "cannot connect to %s: %s",
                                          text, strerror(e)));
    }
    int status = wait_for(c, WIRE_WANT_WRITE, error);
    if (status != HURRAY_OK) return hurray__error_prefix(error, status, "connecting to %s: ", text);
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      return broken(c, hurray__fail_errno(error, HURRAY_ECONNECTION, err,
                                          "cannot connect to %s: %s", text, strerror(err)));
    }
  }
  return HURRAY_OK;
}

/* Connects to the server's address -- each address of its name in the resolver's order until
 * one accepts, all within the call's deadline -- then sets the socket up (and TLS). */
static int open_socket(HurrayClient *c, HurrayError *error) {
  char text[WIRE_MAX_HOST + 64];
  hurray__wire_address_format(&c->address, text, sizeof text);
  WireAddress found[WIRE_MAX_RESOLVED];
  size_t n = 0;
  /* a wait like any other: at most the idle timeout, and no later than the call's deadline */
  int64_t wait = c->idle_timeout_ms;
  uint32_t limit = c->idle_timeout_ms; /* the caller's limit, which the message names */
  if (c->deadline != 0 && c->deadline - hurray__wire_now_ms() < wait) {
    wait = c->deadline - hurray__wire_now_ms();
    if (wait < 0) wait = 0;
    limit = c->timeout_ms;
  }
  int status = hurray__wire_address_resolve(&c->address, false, wait, found, &n, error);
  if (status == HURRAY_ETIMEOUT && c->address.named) {
    return broken(c, hurray__fail(error, HURRAY_ETIMEOUT,
                                  "resolving the host name '%s' took longer than %" PRIu32 " ms",
                                  c->address.host, limit));
  }
  if (status != HURRAY_OK) return broken(c, status);
  size_t tried = 0;
  status = HURRAY_ECONNECTION;
  while (tried < n && status == HURRAY_ECONNECTION) status = connect_one(c, &found[tried++], error);
  if (status != HURRAY_OK && n > 1) {
    return hurray__error_prefix(error, status, "%s (tried %zu of its %zu addresses): ", text,
                                tried, n);
  }
  if (status != HURRAY_OK) return status;
  if (c->address.family != AF_UNIX) {
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  struct ucred peer = {0};
  socklen_t peer_len = sizeof peer;
  c->peer_trusted = c->address.family == AF_UNIX &&
                    getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &peer, &peer_len) == 0 &&
                    (peer.uid == geteuid() || peer.uid == 0);
  return c->tls_config ? tls_handshake(c, text, error) : HURRAY_OK;
}

static int authenticate(HurrayClient *c, const uint8_t client_nonce[WIRE_NONCE_SIZE],
                        HurrayError *error) {
  bool asked = (c->server->flags & WIRE_HELLO_AUTH) != 0;
  if (asked && c->secret == NULL) {
    return broken(c, hurray__fail(error, HURRAY_EAUTH,
                                  "the server requires a shared secret and none was given"));
  }
  if (!asked && c->secret != NULL) {
    return broken(c, hurray__fail(error, HURRAY_EAUTH,
                                  "the server does not authenticate, but a secret was given"));
  }
  if (!asked) return HURRAY_OK;
  uint8_t mac[WIRE_MAC_SIZE], proof[WIRE_MAC_SIZE];
  int status = hurray__wire_mac(c->secret, c->secret_len, false, client_nonce, c->server->nonce,
                                mac, error);
  FileSink frame = {0};
  if (status == HURRAY_OK) {
    hurray__wire_frame(&frame, WIRE_AUTH, 0, 0, mac, sizeof mac);
    status = frame.failed ? hurray__fail(error, HURRAY_ENOMEM, "out of memory")
                          : send_bytes(c, frame.data, frame.len, error);
  }
  hurray__sink_reset(&frame);
  WireHeader h;
  if (status == HURRAY_OK) status = read_header(c, &h, error);
  if (status == HURRAY_OK) status = expect(c, &h, WIRE_AUTH_OK, 0, error);
  if (status == HURRAY_OK && h.length != WIRE_MAC_SIZE) {
    status = broken(c, hurray__fail(error, HURRAY_EPROTOCOL, "AUTH_OK of %" PRIu64 " bytes", h.length));
  }
  if (status == HURRAY_OK) status = recv_exact(c, proof, sizeof proof, error);
  if (status == HURRAY_OK) {
    status = hurray__wire_mac(c->secret, c->secret_len, true, client_nonce, c->server->nonce, mac,
                              error);
  }
  if (status == HURRAY_OK && !hurray__wire_mac_equal(mac, proof)) {
    status = broken(c, hurray__fail(error, HURRAY_EAUTH,
                                    "the server's proof is wrong: it does not know the secret"));
  }
  return status;
}

/* Opens the connection and runs the hellos (and auth). */
static int handshake(HurrayClient *c, HurrayError *error) {
  int status = open_socket(c, error);
  if (status != HURRAY_OK) return status;
  c->max_frame = 0;
  WireHello *hello = calloc(1, sizeof *hello);
  if (hello == NULL) return broken(c, hurray__fail(error, HURRAY_ENOMEM, "out of memory"));
  hello->version_major = WIRE_VERSION_MAJOR;
  hello->version_minor = WIRE_VERSION_MINOR;
  hello->max_frame = c->offered_frame;
  bool offer_fd = c->want_fd && c->address.family == AF_UNIX && c->tls_config == NULL;
  hello->flags = offer_fd ? WIRE_CLIENT_FD_PASSING : 0;
  c->fd_passing = false;
  status = hurray__wire_devices_fill(hello, c->devices, c->ndevices, error);
  if (status == HURRAY_OK && c->secret) status = hurray__wire_nonce(hello->nonce, error);
  uint8_t client_nonce[WIRE_NONCE_SIZE];
  memcpy(client_nonce, hello->nonce, sizeof client_nonce);
  FileSink frame = {0};
  if (status == HURRAY_OK) status = hurray__wire_hello_encode(WIRE_CLIENT_HELLO, hello, &frame, error);
  if (status == HURRAY_OK) status = send_bytes(c, frame.data, frame.len, error);
  hurray__sink_reset(&frame);
  free(hello);
  WireHeader h;
  uint8_t *payload = NULL;
  if (status == HURRAY_OK) status = read_header(c, &h, error);
  if (status == HURRAY_OK) status = expect(c, &h, WIRE_SERVER_HELLO, 0, error);
  if (status == HURRAY_OK) status = read_payload(c, &h, &payload, error);
  if (status == HURRAY_OK) {
    status = hurray__wire_hello_decode(payload, (size_t)h.length, c->server, error);
    uint32_t known = WIRE_HELLO_AUTH | WIRE_HELLO_READ_ONLY | (offer_fd ? WIRE_HELLO_FD_PASSING : 0);
    if (status == HURRAY_OK && (c->server->version_minor > WIRE_VERSION_MINOR ||
                                (c->server->flags & ~known))) {
      status = hurray__fail(error, HURRAY_EPROTOCOL, "version %u.%u or flags 0x%08" PRIx32
                            " the client did not offer", c->server->version_major,
                            c->server->version_minor, c->server->flags);
    }
    if (status == HURRAY_OK) status = hurray__wire_devices_check(c->server, error);
    if (status != HURRAY_OK) status = broken(c, hurray__error_prefix(error, status, "server hello: "));
  }
  free(payload);
  if (status == HURRAY_OK && c->server->max_frame > c->offered_frame) {
    status = broken(c, hurray__fail(error, HURRAY_EPROTOCOL,
                                    "the server's max_frame %" PRIu64 " exceeds the offer",
                                    c->server->max_frame));
  }
  if (status == HURRAY_OK) status = authenticate(c, client_nonce, error);
  if (status == HURRAY_OK) {
    c->max_frame = c->server->max_frame;
    c->fd_passing = (c->server->flags & WIRE_HELLO_FD_PASSING) != 0;
  }
  return status;
}

/* The default max_tensor_bytes: this machine's physical memory, which no tensor received
 * into memory can exceed usefully (ADR-092); a server's header claiming more is refused before
 * anything is allocated. */
static uint64_t physical_memory(void) {
  long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || size <= 0) return UINT64_MAX;
  return (uint64_t)pages * (uint64_t)size;
}

int hurray_client_connect(const char *address, const HurrayClientOptions *options,
                          HurrayClient **out, HurrayError *error) {
  if (out == NULL) return hurray__fail(error, HURRAY_EINVAL, "out is NULL");
  *out = NULL;
  HurrayClientOptions o = {0};
  if (options != NULL) o = *options;
  if (!hurray__all_zero(o.reserved, sizeof o.reserved) ||
      (o.flags & ~HURRAY_CLIENT_NO_FD_PASSING) || (o.secret == NULL) != (o.secret_len == 0) ||
      o.secret_len > 1024 || (o.devices == NULL) != (o.ndevices == 0) ||
      o.ndevices > WIRE_MAX_DEVICES ||
      (o.max_frame != 0 && (o.max_frame < WIRE_MIN_FRAME || o.max_frame > WIRE_MAX_FRAME))) {
    return hurray__fail(error, HURRAY_EINVAL,
                        "invalid client options (flags, reserved, secret of 1..1024 bytes, 1..256 "
                        "devices, max_frame in [64 KiB, 1 GiB])");
  }
  HurrayClient *c = calloc(1, sizeof *c);
  if (c == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  c->fd = -1;
  c->pending_fd = -1;
  c->want_fd = !(o.flags & HURRAY_CLIENT_NO_FD_PASSING);
  c->next_id = 1;
  c->timeout_ms = o.timeout_ms;
  c->idle_timeout_ms = o.idle_timeout_ms ? o.idle_timeout_ms : o.timeout_ms ? o.timeout_ms : 30000;
  begin_call(c);
  c->offered_frame = o.max_frame ? o.max_frame : (uint64_t)4 << 20;
  c->max_tensor_bytes = o.max_tensor_bytes ? o.max_tensor_bytes : physical_memory();
  /* by default every device this library names: it makes a queue on one when asked (spec
     §4.1); the CPU is implied, listed or not */
  c->ndevices = o.devices ? o.ndevices : HURRAY_DEVICE_LAST_NAMED + 1u;
  for (uint32_t i = 0; i < c->ndevices; i++) c->devices[i] = o.devices ? o.devices[i] : (uint8_t)i;
  c->server = calloc(1, sizeof *c->server);
  int status = c->server ? HURRAY_OK : hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  if (status == HURRAY_OK && o.secret_len) {
    c->secret = malloc(o.secret_len);
    if (c->secret == NULL) status = hurray__fail(error, HURRAY_ENOMEM, "out of memory");
    else memcpy(c->secret, o.secret, o.secret_len);
    c->secret_len = o.secret_len;
  }
  if (status == HURRAY_OK) status = hurray__wire_address_parse(address, &c->address, error);
  if (status == HURRAY_OK && o.tls != NULL && !c->address.tls) {
    status = hurray__fail(error, HURRAY_EINVAL,
                          "TLS options for the plaintext address '%s': use hurrays://", address);
  }
  if (status == HURRAY_OK && c->address.tls) {
    static const HurrayTlsOptions system_trust = {0};
    status = hurray__wire_tls_create(o.tls ? o.tls : &system_trust, false, &c->tls_config, error);
  }
  if (status == HURRAY_OK) status = handshake(c, error);
  if (status != HURRAY_OK) {
    c->broken = true; /* no GOODBYE */
    hurray_client_destroy(c);
    return status;
  }
  *out = c;
  return HURRAY_OK;
}

int hurray_client_info(const HurrayClient *c, HurrayClientInfo *out, HurrayError *error) {
  if (c == NULL || out == NULL) return hurray__fail(error, HURRAY_EINVAL, "NULL argument");
  memset(out, 0, sizeof *out);
  out->version_major = c->server->version_major;
  out->version_minor = c->server->version_minor;
  out->server_flags = c->server->flags;
  out->max_frame = c->server->max_frame;
  out->ndevices = c->server->ndevices;
  for (uint32_t i = 0; i < c->server->ndevices; i++) out->devices[i] = c->server->devices[i].tag;
  return HURRAY_OK;
}

void hurray_client_destroy(HurrayClient *c) {
  if (c == NULL) return;
  if (!c->broken && c->fd >= 0) {
    uint8_t head[WIRE_HEADER_SIZE];
    WireHeader h = {WIRE_GOODBYE, 0, 0, 0};
    hurray__wire_header_encode(&h, head);
    struct iovec iov = {head, sizeof head};
    (void)hurray__wire_sendv(c->fd, c->tls, &iov, 1);
  }
  disconnect(c);
  hurray__wire_tls_destroy(c->tls_config);
  if (c->secret) {
    memset(c->secret, 0, c->secret_len);
    free(c->secret);
  }
  free(c->server);
  free(c);
}

static int usable(HurrayClient *c, HurrayError *error) {
  if (c == NULL) return hurray__fail(error, HURRAY_EINVAL, "client is NULL");
  if (c->broken) {
    return hurray__fail(error, HURRAY_ECONNECTION, "the connection was lost by an earlier call");
  }
  return HURRAY_OK;
}

/* ---- list --------------------------------------------------------------------------------- */

int hurray_client_list(HurrayClient *c, HurrayRemoteTensor **out, uint32_t *count,
                       HurrayError *error) {
  int status = usable(c, error);
  if (status != HURRAY_OK) return status;
  if (out == NULL || count == NULL) return hurray__fail(error, HURRAY_EINVAL, "NULL argument");
  *out = NULL;
  *count = 0;
  begin_call(c);
  uint64_t id = c->next_id++;
  uint8_t head[WIRE_HEADER_SIZE];
  hurray__wire_header_encode(&(WireHeader){WIRE_LIST, 0, id, 0}, head);
  status = send_bytes(c, head, sizeof head, error);
  HurrayRemoteTensor *items = NULL;
  uint32_t n = 0;
  uint64_t bytes = 0; /* of LIST_RESULT payloads */
  bool end = false;
  while (status == HURRAY_OK && !end) {
    WireHeader h;
    uint8_t *p = NULL;
    status = read_header(c, &h, error);
    if (status == HURRAY_OK) status = expect(c, &h, WIRE_LIST_RESULT, id, error);
    bytes += status == HURRAY_OK ? h.length : 0;
    if (status == HURRAY_OK && bytes > WIRE_MAX_LIST_BYTES) {
      status = broken(c, hurray__fail(error, HURRAY_ELIMIT,
                                      "a list of more than %" PRIu64 " MiB (%" PRIu32
                                      " tensors so far)",
                                      WIRE_MAX_LIST_BYTES >> 20, n));
    }
    if (status == HURRAY_OK) status = read_payload(c, &h, &p, error);
    if (status != HURRAY_OK) break;
    end = (h.flags & WIRE_FLAG_END) != 0;
    status = hurray__wire_list_decode(p, (size_t)h.length, &items, &n, error);
    if (status != HURRAY_OK) {
      status = broken(c, status == HURRAY_ENOMEM || status == HURRAY_ELIMIT ? status
                                                                           : HURRAY_EPROTOCOL);
    }
    free(p);
  }
  if (status != HURRAY_OK) {
    free(items);
    return status;
  }
  *out = items ? items : calloc(1, sizeof *items);
  *count = n;
  return *out ? HURRAY_OK : hurray__fail(error, HURRAY_ENOMEM, "out of memory");
}

/* ---- metadata (1.3) ----------------------------------------------------------------------- */

int hurray_client_metadata(HurrayClient *c, const char *name, HurrayMetaValue **out,
                           HurrayError *error) {
  int status = usable(c, error);
  if (status != HURRAY_OK) return status;
  if (out == NULL) return hurray__fail(error, HURRAY_EINVAL, "NULL argument");
  *out = NULL;
  size_t name_len = name ? strnlen(name, HURRAY_MAX_NAME + 1) : 0;
  if (name_len > 0) {
    status = hurray__check_name((const uint8_t *)name, name_len, HURRAY_EINVAL, "tensor name",
                                error);
    if (status != HURRAY_OK) return status;
  }
  if (c->server->version_minor < WIRE_METADATA_MINOR) {
    return hurray__fail(error, HURRAY_EUNSUPPORTED,
                        "the server speaks wire protocol 1.%u, which carries no metadata "
                        "requests: they need 1.%d",
                        (unsigned)c->server->version_minor, WIRE_METADATA_MINOR);
  }
  begin_call(c);
  uint64_t id = c->next_id++;
  FileSink frame = {0}, block = {0};
  uint8_t head[WIRE_HEADER_SIZE];
  hurray__wire_header_encode(&(WireHeader){WIRE_METADATA, 0, id, WIRE_METADATA_FIXED + name_len},
                             head);
  hurray__sink_bytes(&frame, head, sizeof head);
  hurray__wire_metadata_request_encode(name, name_len, &frame);
  status = frame.failed ? hurray__fail(error, HURRAY_ENOMEM, "out of memory")
                        : send_bytes(c, frame.data, frame.len, error);
  hurray__sink_reset(&frame);
  /* the block grows only by the bytes that arrived: a claimed length allocates nothing */
  uint32_t total = 0;
  uint64_t check = 0;
  for (bool first = true, end = false; status == HURRAY_OK && !end; first = false) {
    WireHeader h;
    uint8_t *p = NULL;
    status = read_header(c, &h, error);
    if (status == HURRAY_OK) status = expect(c, &h, WIRE_METADATA_RESULT, id, error);
    if (status == HURRAY_OK) status = read_payload(c, &h, &p, error);
    if (status != HURRAY_OK) break;
    end = (h.flags & WIRE_FLAG_END) != 0;
    uint32_t claimed = 0;
    uint64_t claimed_check = 0;
    const uint8_t *bytes = NULL;
    size_t n = 0;
    status = hurray__wire_metadata_result_decode(p, (size_t)h.length, &claimed, &claimed_check,
                                                 &bytes, &n, error);
    if (status == HURRAY_OK && !first && (claimed != total || claimed_check != check)) {
      status = hurray__fail(error, HURRAY_EPROTOCOL,
                            "METADATA_RESULT metadata_length or metadata_check changed within "
                            "one answer (%" PRIu32 " then %" PRIu32 " bytes)",
                            total, claimed);
    }
    total = claimed;
    check = claimed_check;
    if (status == HURRAY_OK && n > total - block.len) {
      status = hurray__fail(error, HURRAY_EPROTOCOL,
                            "METADATA_RESULT frames carry more than the %" PRIu32
                            " bytes of the block",
                            total);
    }
    if (status == HURRAY_OK) hurray__sink_bytes(&block, bytes, n);
    if (status == HURRAY_OK && end != (block.len == total)) {
      status = hurray__fail(error, HURRAY_EPROTOCOL,
                            "METADATA_RESULT %s after %zu of the block's %" PRIu32 " bytes",
                            end ? "ends" : "goes on", block.len, total);
    }
    free(p);
    if (status == HURRAY_OK && block.failed) {
      status = hurray__fail(error, HURRAY_ENOMEM, "out of memory");
    }
    if (status != HURRAY_OK) status = broken(c, status);
  }
  uint64_t hashed = status == HURRAY_OK ? hurray__xxh3(block.data, block.len) : 0;
  if (status == HURRAY_OK && hashed != check) {
    status = broken(c, hurray__fail(error, HURRAY_ECHECKSUM,
                                    "METADATA_RESULT metadata checksum mismatch (metadata_check "
                                    "0x%016" PRIx64 ", the block hashes to 0x%016" PRIx64
                                    "): corrupted in transit",
                                    check, hashed));
  }
  if (status == HURRAY_OK) {
    status = hurray__meta_decode(block.data, block.len, NULL, NULL, error);
    if (status == HURRAY_OK) status = hurray__meta_decode_tree(block.data, block.len, out, error);
    if (status == HURRAY_EFORMAT || status == HURRAY_ELIMIT) {
      status = broken(c, hurray__error_prefix(error, HURRAY_EPROTOCOL,
                                              "METADATA_RESULT metadata: "));
    }
  }
  hurray__sink_reset(&block);
  return status;
}

/* ---- get and fetch ------------------------------------------------------------------------ */

#define CLIENT_CHUNK ((size_t)WIRE_STAGE_SIZE) /* bytes received per write or device copy */

/* A transfer in progress, kept across reconnections so that it resumes. The bytes go into
 * new buffers (`list`, get: host memory, or device memory through `queue`, a chunk at a time)
 * or, streaming, into a file (`writer`, fetch) or a sink (stream). */
typedef struct Transfer {
  FileArena arena;
  WireTensor tensor;
  bool have_tensor;
  const char *path;  /* fetch: the file to write; NULL for get */
  bool not_durable;  /* fetch: HURRAY_GET_NOT_DURABLE */
  HurrayFileWriter *writer;
  uint32_t begun;    /* fetch: buffers begun in the writer */
  WireSinkFn sink;   /* stream */
  void *sink_context;
  uint8_t *chunk;    /* fetch, stream and get on a device: CLIENT_CHUNK bytes */
  bool range;        /* read: stream bytes [range_start, range_start + range_len) to range_dst
                        or, through `chunk`, to range_out; each DATA frame checked on its own
                        (spec §6.4) */
  uint8_t *range_dst;
  FileOutput *range_out;
  uint64_t range_start, range_len;
  HurrayBufferList *list;
  uint8_t device;            /* the device asked for */
  HurrayDeviceQueue *queue;  /* get on a device: the caller's or `own_queue` */
  HurrayDeviceQueue *own_queue;
  FileHasher *hasher;
  WireVerifier verifier; /* get into host memory: the current buffer's hashing */
  uint32_t buffer;
  uint64_t offset;   /* in `buffer` */
  uint64_t received; /* stream bytes */
} Transfer;

static void transfer_reset(Transfer *t) {
  hurray__wire_verifier_finish(&t->verifier);
  hurray_file_writer_destroy(t->writer); /* unfinished: nothing appears at the path */
  free(t->chunk);
  hurray_buffer_list_destroy(t->list); /* device memory too: never handed out half-written */
  hurray_device_queue_destroy(t->own_queue);
  hurray__hasher_destroy(t->hasher);
  hurray__arena_free(&t->arena);
}

static int send_request(HurrayClient *c, uint64_t id, const WireRequest *r, HurrayError *error) {
  FileSink payload = {0}, frame = {0};
  int status = hurray__wire_request_encode(r, &payload, error);
  if (status == HURRAY_OK) {
    hurray__wire_frame(&frame, WIRE_TENSOR_REQUEST, 0, id, payload.data, payload.len);
    status = frame.failed ? hurray__fail(error, HURRAY_ENOMEM, "out of memory")
                          : send_bytes(c, frame.data, frame.len, error);
  }
  hurray__sink_reset(&payload);
  hurray__sink_reset(&frame);
  return status;
}

static bool same_buffers(const WireTensor *a, const WireTensor *b) {
  if (a->nbuffers != b->nbuffers || a->total_bytes != b->total_bytes) return false;
  for (uint32_t i = 0; i < a->nbuffers; i++) {
    if (memcmp(&a->buffers[i].desc, &b->buffers[i].desc, sizeof a->buffers[i].desc) != 0 ||
        a->buffers[i].checksum != b->buffers[i].checksum) {
      return false;
    }
  }
  return true;
}

/* Where the bytes go, once the first TENSOR_HEADER is known: new buffers of the descriptor's
 * sizes and alignments, or a file writer (its alignment: the largest the buffers ask for). */
static int prepare(Transfer *t, HurrayError *error) {
  const WireTensor *w = &t->tensor;
  int status = HURRAY_OK;
  if (t->range) { /* into the caller's memory, from the buffer and offset of range_start (a
                     range past the stream's end is caught by the checks of every frame) */
    uint64_t at = t->range_start;
    while (t->buffer < w->nbuffers && at >= w->buffers[t->buffer].desc.byte_size) {
      at -= w->buffers[t->buffer++].desc.byte_size;
    }
    t->offset = t->buffer < w->nbuffers ? at : 0;
    if (t->range_out == NULL) return HURRAY_OK;
    t->chunk = malloc(CLIENT_CHUNK);
    t->hasher = hurray__hasher_create();
    return t->chunk && t->hasher ? HURRAY_OK : hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  }
  uint32_t alignment = HURRAY_FILE_DEFAULT_ALIGNMENT;
  for (uint32_t i = 0; i < w->nbuffers; i++) {
    const HurrayBufferDesc *d = &w->buffers[i].desc;
    if (d->alignment > CLIENT_MAX_ALIGNMENT) {
      return hurray__fail(error, HURRAY_ELIMIT, "buffer %" PRIu32 " asks for alignment %" PRIu32,
                          i, d->alignment);
    }
    if (d->alignment > alignment) alignment = d->alignment;
  }
  t->hasher = hurray__hasher_create();
  if (t->hasher == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  if (w->device != HURRAY_DEVICE_CPU) { /* device memory, filled through a host chunk */
    t->chunk = malloc(CLIENT_CHUNK);
    status = t->chunk ? hurray_buffer_list_create(w->nbuffers, &t->list, error)
                      : hurray__fail(error, HURRAY_ENOMEM, "out of memory");
    for (uint32_t i = 0; status == HURRAY_OK && i < w->nbuffers; i++) {
      HurrayBuffer *b = NULL;
      status = hurray_device_alloc(t->queue, w->buffers[i].desc.byte_size, 0, &b, error);
      if (status == HURRAY_OK) {
        status = hurray_buffer_list_append(t->list, b, w->buffers[i].role, NULL, error);
      }
    }
    return status;
  }
  if (t->path != NULL || t->sink != NULL) {
    HurrayFileWriterOptions options = {
        .alignment = alignment, .flags = t->not_durable ? HURRAY_FILE_WRITE_NOT_DURABLE : 0u};
    t->chunk = malloc(CLIENT_CHUNK);
    if (t->chunk == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
    if (t->sink != NULL) return HURRAY_OK;
    status = hurray_file_writer_create(t->path, &options, &t->writer, error);
    if (status == HURRAY_OK) status = hurray_file_writer_begin_tensor(t->writer, w->record.name, error);
    return status;
  }
  status = hurray_buffer_list_create(w->nbuffers, &t->list, error);
  for (uint32_t i = 0; status == HURRAY_OK && i < w->nbuffers; i++) {
    HurrayBuffer *b = NULL;
    const HurrayBufferDesc *d = &w->buffers[i].desc;
    status = hurray_buffer_alloc(d->byte_size, d->alignment, 0, &b, error);
    if (status == HURRAY_OK) status = hurray_buffer_list_append(t->list, b, w->buffers[i].role, NULL, error);
  }
  return status;
}

/* Reads the TENSOR_HEADER of request `id` (`r`); on the first attempt prepares where the bytes
 * go, on a resumed one checks the tensor is the same. */
static int receive_header(HurrayClient *c, uint64_t id, const WireRequest *r, Transfer *t,
                          bool *end, HurrayError *error) {
  WireHeader h;
  uint8_t *p = NULL;
  int status = read_header(c, &h, error);
  if (status == HURRAY_OK) status = expect(c, &h, WIRE_TENSOR_HEADER, id, error);
  if (status == HURRAY_OK) status = read_payload(c, &h, &p, error);
  if (status != HURRAY_OK) return status;
  *end = (h.flags & WIRE_FLAG_END) != 0;
  FileArena arena = {0};
  WireTensor tensor;
  size_t body = 0;
  status = hurray__wire_tensor_check(&h, p, (size_t)h.length, c->server->version_minor, &body,
                                     error);
  if (status == HURRAY_OK) {
    status = hurray__wire_tensor_decode(p, body, &arena, &tensor, error);
    /* what the server sent is wrong, whatever field it is (an unknown dtype, layout or device
       code, a shape its buffers cannot hold): the peer broke the protocol (ADR-078) */
    if (status != HURRAY_OK && status != HURRAY_ENOMEM && status != HURRAY_EPROTOCOL) {
      status = hurray__error_prefix(error, HURRAY_EPROTOCOL, "the server's TENSOR_HEADER: ");
    }
  }
  free(p);
  /* the answer is to this request (spec §6.3): a request changed in transit is caught here */
  if (status == HURRAY_OK && (strcmp(tensor.record.name, r->name) != 0 ||
                              (r->range_kind == WIRE_RANGE_ROWS &&
                               (tensor.record.tensor->ndim < 1 ||
                                tensor.record.tensor->shape[0] != r->stop - r->start)))) {
    status = hurray__fail(error, HURRAY_EPROTOCOL,
                          "the server answered with tensor '%s' of %" PRId64
                          " rows, not what was asked",
                          tensor.record.name,
                          tensor.record.tensor->ndim ? tensor.record.tensor->shape[0] : 0);
  }
  if (status == HURRAY_OK && tensor.resume_offset != t->received) {
    status = hurray__fail(error, HURRAY_EPROTOCOL, "the server resumed at %" PRIu64 ", not %" PRIu64,
                          tensor.resume_offset, t->received);
  }
  if (status == HURRAY_OK && tensor.device != HURRAY_DEVICE_CPU && tensor.device != t->device) {
    status = hurray__fail(error, HURRAY_EPROTOCOL,
                          "the server answered on device 0x%02x, which was not asked for",
                          tensor.device);
  }
  if (status == HURRAY_OK && t->have_tensor && !same_buffers(&t->tensor, &tensor)) {
    status = hurray__fail(error, HURRAY_ESTATE, "the tensor changed on the server while resuming");
  }
  if (status != HURRAY_OK) {
    hurray__arena_free(&arena);
    return broken(c, status);
  }
  if (t->have_tensor) {
    hurray__arena_free(&arena);
    return HURRAY_OK;
  }
  t->arena = arena;
  t->tensor = tensor;
  t->have_tensor = true;
  if (tensor.total_bytes > c->max_tensor_bytes && t->path == NULL && t->sink == NULL &&
      !t->range) {
    return hurray__fail(error, HURRAY_ELIMIT,
                        "tensor '%s' of %" PRIu64 " bytes exceeds this client's "
                        "max_tensor_bytes of %" PRIu64 ": raise it, or fetch into a file",
                        tensor.record.name, tensor.total_bytes, c->max_tensor_bytes);
  }
  return prepare(t, error);
}

/* fetch: begins every buffer before `upto` not yet begun (empty ones included). */
static int begin_buffers(Transfer *t, uint32_t upto, HurrayError *error) {
  int status = HURRAY_OK;
  for (; status == HURRAY_OK && t->begun < upto; t->begun++) {
    status = hurray_file_writer_begin_buffer(t->writer, t->tensor.buffers[t->begun].role, error);
  }
  return status;
}

static void skip_empty(Transfer *t) {
  while (t->buffer < t->tensor.nbuffers && t->offset == t->tensor.buffers[t->buffer].desc.byte_size) {
    t->buffer++;
    t->offset = 0;
  }
}

/* Receives `n` bytes of the current buffer where they go, hashing them and counting them
 * received as soon as they are where they go (so a resumed transfer neither skips nor repeats
 * a byte). */
static int receive_bytes(HurrayClient *c, Transfer *t, uint64_t n, HurrayError *error) {
  if (t->chunk == NULL) { /* hashed behind, a step at a time */
    uint8_t *base = t->list->buffers[t->buffer]->data;
    if (!t->verifier.running) {
      hurray__wire_verifier_start(&t->verifier, t->hasher, base, t->offset,
                                  t->tensor.buffers[t->buffer].desc.byte_size, true);
    }
    while (n > 0) {
      size_t k = n < WIRE_VERIFY_STEP ? (size_t)n : WIRE_VERIFY_STEP;
      int status = recv_exact(c, base + t->offset, k, error);
      if (status != HURRAY_OK) return status;
      t->offset += k;
      t->received += k;
      n -= k;
      hurray__wire_verifier_publish(&t->verifier, t->offset);
    }
    return HURRAY_OK;
  }
  int status = t->writer ? begin_buffers(t, t->buffer + 1, error) : HURRAY_OK;
  while (status == HURRAY_OK && n > 0) {
    size_t k = n < CLIENT_CHUNK ? (size_t)n : CLIENT_CHUNK;
    status = recv_exact(c, t->chunk, k, error);
    if (status != HURRAY_OK) return status;
    hurray__hasher_update(t->hasher, t->chunk, k);
    if (t->writer != NULL) {
      status = hurray_file_writer_write(t->writer, t->chunk, k, error);
    } else if (t->sink != NULL) {
      status = t->sink(t->sink_context, t->buffer, t->offset, t->chunk, k, error);
    } else { /* get on a device */
      status = hurray_device_copy_from_host(t->queue, t->list->buffers[t->buffer], t->offset,
                                            t->chunk, k, error);
    }
    if (status != HURRAY_OK) return broken(c, status); /* the file, sink or device cannot go on */
    t->offset += k;
    t->received += k;
    n -= k;
  }
  return status;
}

/* read: the `n` bytes of a DATA frame of a BYTES response, into the caller's memory or the
 * file, counted received only once they match the frame's `check` (spec §6.4); a frame cut
 * short is taken back out of the file, so that a resumed transfer writes it again. */
static int receive_range(HurrayClient *c, Transfer *t, uint64_t n, uint32_t check,
                         HurrayError *error) {
  uint64_t digest = 0;
  if (t->range_out == NULL) {
    uint8_t *dest = t->range_dst + t->received;
    int status = recv_exact(c, dest, (size_t)n, error);
    if (status != HURRAY_OK) return status;
    digest = hurray__xxh3(dest, (size_t)n);
  } else {
    hurray__hasher_reset(t->hasher);
    for (uint64_t left = n; left > 0;) {
      size_t k = left < CLIENT_CHUNK ? (size_t)left : CLIENT_CHUNK;
      int status = recv_exact(c, t->chunk, k, error);
      if (status == HURRAY_OK) {
        hurray__hasher_update(t->hasher, t->chunk, k);
        status = hurray__output_write(t->range_out, t->chunk, k, error);
        if (status != HURRAY_OK) status = broken(c, status); /* the file cannot go on */
      }
      if (status != HURRAY_OK) {
        hurray__output_rewind(t->range_out, t->received);
        return status;
      }
      left -= k;
    }
    digest = hurray__hasher_digest(t->hasher);
  }
  if ((uint32_t)digest != check) {
    uint64_t at = t->range_start + t->received;
    return broken(c, hurray__fail(error, HURRAY_ECHECKSUM,
                                  "tensor '%s' bytes [%" PRIu64 ", %" PRIu64
                                  "): checksum mismatch (corrupted in transit)",
                                  t->tensor.record.name, at, at + n));
  }
  t->offset += n;
  t->received += n;
  return HURRAY_OK;
}

/* A DATA_FD frame (spec §6.6): the whole of the next buffer as a descriptor, mapped (or, for
 * fetch and stream, handed on from the mapping) and hashed like received bytes. */
static int receive_fd(HurrayClient *c, const WireHeader *h, Transfer *t, HurrayError *error) {
  uint8_t p[WIRE_DATA_FD_SIZE];
  int status = h->length == WIRE_DATA_FD_SIZE
                   ? recv_exact(c, p, sizeof p, error)
                   : broken(c, hurray__fail(error, HURRAY_EPROTOCOL,
                                            "DATA_FD of %" PRIu64 " bytes", h->length));
  if (status != HURRAY_OK) return status;
  int fd = c->pending_fd;
  c->pending_fd = -1;
  WireFdRef ref;
  status = hurray__wire_fd_ref_decode(p, sizeof p, &ref, error);
  skip_empty(t);
  if (status == HURRAY_OK && fd < 0) {
    status = hurray__fail(error, HURRAY_EPROTOCOL, "a DATA_FD frame came without a descriptor");
  }
  if (status == HURRAY_OK && t->tensor.device != HURRAY_DEVICE_CPU) {
    status = hurray__fail(error, HURRAY_EPROTOCOL, "a DATA_FD frame for device memory");
  }
  if (status == HURRAY_OK && t->range) {
    status = hurray__fail(error, HURRAY_EPROTOCOL, "a DATA_FD frame in a byte range");
  }
  if (status == HURRAY_OK &&
      (ref.buffer != t->buffer || t->buffer >= t->tensor.nbuffers || t->offset != 0 ||
       ref.length != t->tensor.buffers[t->buffer].desc.byte_size)) {
    status = hurray__fail(error, HURRAY_EPROTOCOL,
                          "DATA_FD for buffer %" PRIu32 " of %" PRIu64
                          " bytes is not the whole next buffer",
                          ref.buffer, ref.length);
  }
  HurrayBuffer *b = NULL;
  if (status == HURRAY_OK) {
    status = hurray__wire_map(fd, &ref, &t->tensor.buffers[t->buffer].desc, c->peer_trusted, &b,
                              error);
  }
  if (fd >= 0) close(fd); /* the mapping stays */
  if (status == HURRAY_OK) {
    hurray__wire_verify_mapped(t->hasher, b->data, ref.length);
    if (t->writer != NULL) {
      status = begin_buffers(t, t->buffer + 1, error);
      if (status == HURRAY_OK) status = hurray_file_writer_write(t->writer, b->data, (size_t)ref.length, error);
      hurray_buffer_destroy(b);
    } else if (t->sink != NULL) {
      status = t->sink(t->sink_context, t->buffer, 0, b->data, (size_t)ref.length, error);
      hurray_buffer_destroy(b);
    } else { /* get: the mapping takes the place of the buffer allocated for the bytes */
      hurray_buffer_destroy(t->list->buffers[t->buffer]);
      t->list->buffers[t->buffer] = b;
    }
  }
  if (status != HURRAY_OK) return c->broken ? status : broken(c, status);
  t->offset = ref.length;
  t->received += ref.length;
  return HURRAY_OK;
}

/* Receives DATA (and, negotiated, DATA_FD) frames of request `id` until END. */
static int receive_frames(HurrayClient *c, uint64_t id, Transfer *t, const HurrayGetOptions *o,
                          HurrayError *error) {
  for (;;) {
    WireHeader h;
    uint8_t fixed[WIRE_DATA_FIXED];
    /* a DATA_FD takes the place of a whole buffer, so it comes only where one starts */
    bool boundary = t->offset == 0 || (t->buffer < t->tensor.nbuffers &&
                                       t->offset == t->tensor.buffers[t->buffer].desc.byte_size);
    int status = read_frame_header(c, &h, !t->range && boundary, error);
    if (status != HURRAY_OK) return status;
    if (h.type == WIRE_DATA_FD && c->fd_passing) {
      status = expect(c, &h, WIRE_DATA_FD, id, error);
      if (status == HURRAY_OK) status = receive_fd(c, &h, t, error);
      if (status != HURRAY_OK) return status;
    } else {
      status = expect(c, &h, WIRE_DATA, id, error);
      if (status == HURRAY_OK && h.length < WIRE_DATA_FIXED) {
        status = broken(c, hurray__fail(error, HURRAY_EPROTOCOL, "short DATA frame"));
      }
      if (status == HURRAY_OK) status = recv_exact(c, fixed, sizeof fixed, error);
      if (status != HURRAY_OK) return status;
      skip_empty(t);
      uint32_t buffer = hurray__load_le32(fixed);
      uint64_t offset = hurray__load_le64(fixed + 8), n = h.length - WIRE_DATA_FIXED;
      uint32_t check = hurray__load_le32(fixed + 4); /* zero but in a range (spec §6.4) */
      if (buffer != t->buffer || offset != t->offset || t->buffer >= t->tensor.nbuffers || n == 0 ||
          n > t->tensor.buffers[t->buffer].desc.byte_size - t->offset ||
          (t->range ? n > t->range_len - t->received : check != 0)) {
        return broken(c, hurray__fail(error, HURRAY_EPROTOCOL,
                                      "DATA for buffer %" PRIu32 " offset %" PRIu64
                                      " is not the next %" PRIu64 " bytes",
                                      buffer, offset, n));
      }
      status = t->range ? receive_range(c, t, n, check, error) : receive_bytes(c, t, n, error);
      if (status != HURRAY_OK) return status;
    }
    const WireBuffer *b = &t->tensor.buffers[t->buffer];
    if (!t->range && t->offset == b->desc.byte_size) {
      hurray__wire_verifier_finish(&t->verifier);
      if (hurray__hasher_digest(t->hasher) != b->checksum) {
        return broken(c, hurray__fail(error, HURRAY_ECHECKSUM,
                                      "tensor '%s' buffer %" PRIu32
                                      ": checksum mismatch (corrupted in transit)",
                                      t->tensor.record.name, t->buffer));
      }
      hurray__hasher_reset(t->hasher);
    }
    if (o->progress) {
      o->progress(o->progress_context, t->received, t->range ? t->range_len : t->tensor.total_bytes);
    }
    if (h.flags & WIRE_FLAG_END) return HURRAY_OK;
  }
}

/* receive_frames, and then the hasher holds every byte counted received (a resumed transfer
 * goes on from there). */
static int receive_data(HurrayClient *c, uint64_t id, Transfer *t, const HurrayGetOptions *o,
                        HurrayError *error) {
  int status = receive_frames(c, id, t, o, error);
  hurray__wire_verifier_finish(&t->verifier);
  return status;
}

/* Whether a failed transfer may resume on a new connection. */
static bool resumable(int status, const Transfer *t) {
  return (status == HURRAY_ECONNECTION || status == HURRAY_ETIMEOUT) && t->have_tensor &&
         (t->list != NULL || t->chunk != NULL || t->range);
}

/* The queue a transfer receives on when it asks for a device other than the CPU: the caller's,
 * or one made on the default context of the device; without the device's runtime, the CPU is
 * asked for instead when the caller accepts it (FALLBACK). */
static int device_queue(const HurrayClient *c, const HurrayGetOptions *o, Transfer *t,
                        WireRequest *r, HurrayError *error) {
  t->device = o->preferred_device;
  if (o->preferred_device != HURRAY_DEVICE_CPU &&
      memchr(c->devices, o->preferred_device, c->ndevices) == NULL) {
    return hurray__fail(error, HURRAY_EINVAL,
                        "device %s was not offered when connecting: a server answers on the CPU "
                        "and the devices listed in HurrayClientOptions.devices",
                        hurray_device_name(o->preferred_device));
  }
  if (o->queue != NULL && hurray_device_queue_tag(o->queue) != o->preferred_device) {
    return hurray__fail(error, HURRAY_EINVAL, "the queue is on %s, not the preferred device %s",
                        hurray_device_name(hurray_device_queue_tag(o->queue)),
                        hurray_device_name(o->preferred_device));
  }
  if (o->preferred_device == HURRAY_DEVICE_CPU) return HURRAY_OK;
  if (t->path != NULL || t->sink != NULL || t->range) {
    return hurray__fail(error, HURRAY_EINVAL, "a file, a stream or a byte range takes host "
                                              "bytes: ask for cpu, not %s",
                        hurray_device_name(o->preferred_device));
  }
  t->queue = o->queue;
  if (t->queue != NULL) return HURRAY_OK;
  int status = hurray_device_check(o->preferred_device, error);
  if (status != HURRAY_OK) return status;
  HurrayError why = {0};
  status = hurray_device_queue_create(o->preferred_device, o->device_id, &t->own_queue, &why);
  if (status == HURRAY_OK) {
    t->queue = t->own_queue;
  } else if (r->flags & WIRE_REQUEST_FALLBACK) {
    t->device = r->preferred_device = HURRAY_DEVICE_CPU; /* the fallback the caller accepted */
    return HURRAY_OK;
  } else if (error != NULL) {
    *error = why;
  }
  return status;
}

/* get and fetch: the request, its answer, and resumption on new connections. */
static int transfer(HurrayClient *c, const char *name, const HurrayGetOptions *options,
                    Transfer *t, HurrayError *error) {
  int status = usable(c, error);
  if (status != HURRAY_OK) return status;
  begin_call(c);
  HurrayGetOptions o = {0};
  if (options != NULL) o = *options;
  WireRequest r = {.preferred_device = o.preferred_device,
                   .flags = (o.flags & HURRAY_GET_FALLBACK) ? WIRE_REQUEST_FALLBACK : 0};
  uint32_t flags = HURRAY_GET_FALLBACK | (t->path || t->range_out ? HURRAY_GET_NOT_DURABLE : 0u);
  if ((o.flags & ~flags) || !hurray__all_zero(o.reserved, sizeof o.reserved) ||
      o.reserved0 != 0 || o.row_stop < o.row_start || name == NULL ||
      (t->range && (o.row_start != 0 || o.row_stop != 0))) {
    return hurray__fail(error, HURRAY_EINVAL, "invalid get options or name");
  }
  if (t->range && c->server->version_minor < 1) {
    return hurray__fail(error, HURRAY_EUNSUPPORTED,
                        "the server speaks wire protocol 1.%u, whose byte ranges carry no "
                        "checksum: reading one needs 1.1",
                        (unsigned)c->server->version_minor);
  }
  if (!t->have_tensor) {
    status = device_queue(c, &o, t, &r, error);
    if (status != HURRAY_OK) return status;
  }
  if (o.row_start != 0 || o.row_stop != 0) {
    r.range_kind = WIRE_RANGE_ROWS;
    r.start = o.row_start;
    r.stop = o.row_stop;
  } else if (t->range) {
    r.range_kind = WIRE_RANGE_BYTES;
    r.start = (int64_t)t->range_start;
    r.stop = (int64_t)(t->range_start + t->range_len);
  }
  r.name_len = strlen(name);
  if (r.name_len > HURRAY_MAX_NAME) {
    return hurray__fail(error, HURRAY_ELIMIT, "tensor name of %zu bytes", r.name_len);
  }
  memcpy(r.name, name, r.name_len + 1);
  uint32_t retries = o.retries;
  for (;;) {
    uint64_t id = c->next_id++;
    bool end = false;
    r.resume_offset = t->received;
    status = send_request(c, id, &r, error);
    if (status == HURRAY_OK) status = receive_header(c, id, &r, t, &end, error);
    if (status == HURRAY_OK && !end) status = receive_data(c, id, t, &o, error);
    if (status == HURRAY_OK) {
      skip_empty(t);
      if (t->range ? t->received != t->range_len : t->buffer != t->tensor.nbuffers) {
        status = broken(c, hurray__fail(error, HURRAY_EPROTOCOL,
                                        "the response ended before its last byte"));
      }
    }
    if (status == HURRAY_OK || !resumable(status, t) || retries == 0) return status;
    retries--;
    disconnect(c);
    status = handshake(c, error);
    if (status != HURRAY_OK) return status;
  }
}

int hurray_client_get(HurrayClient *c, const char *name, const HurrayGetOptions *options,
                      HurrayTensorContext **out, HurrayError *error) {
  if (out == NULL) return hurray__fail(error, HURRAY_EINVAL, "out is NULL");
  *out = NULL;
  Transfer t = {0};
  int status = transfer(c, name, options, &t, error);
  if (status == HURRAY_OK) {
    status = hurray_tensor_context_create(t.tensor.record.tensor, t.list, 0, NULL, NULL, out, error);
    t.list = NULL;
  }
  transfer_reset(&t);
  return status;
}

int hurray_client_fetch(HurrayClient *c, const char *name, const HurrayGetOptions *options,
                        const char *path, HurrayError *error) {
  if (path == NULL) return hurray__fail(error, HURRAY_EINVAL, "path is NULL");
  Transfer t = {.path = path,
                .not_durable = options != NULL && (options->flags & HURRAY_GET_NOT_DURABLE)};
  int status = transfer(c, name, options, &t, error);
  HurrayMetaValue *metadata = NULL;
  if (status == HURRAY_OK) status = begin_buffers(&t, t.tensor.nbuffers, error);
  if (status == HURRAY_OK) {
    status = hurray__meta_decode_tree(t.tensor.record.metadata, t.tensor.record.metadata_len,
                                      &metadata, error);
  }
  if (status == HURRAY_OK) {
    status = hurray_file_writer_end_tensor(t.writer, t.tensor.record.tensor, metadata, error);
  }
  if (status == HURRAY_OK) status = hurray_file_writer_finish(t.writer, error);
  hurray_meta_destroy(metadata);
  transfer_reset(&t);
  return status;
}

/* read and read_file: bytes [start, stop) a request can name, and somewhere for them. */
static int check_range(uint64_t start, uint64_t stop, bool placed, HurrayError *error) {
  if (start <= stop && stop <= INT64_MAX && placed) return HURRAY_OK;
  return hurray__fail(error, HURRAY_EINVAL,
                      "bytes [%" PRIu64 ", %" PRIu64 "): give 0 <= start <= stop < 2^63, and "
                      "memory or a path for them",
                      start, stop);
}

int hurray_client_read(HurrayClient *c, const char *name, uint64_t start, uint64_t stop,
                       void *dst, const HurrayGetOptions *options, HurrayError *error) {
  int status = check_range(start, stop, dst != NULL || stop == start, error);
  if (status != HURRAY_OK) return status;
  Transfer t = {.range = true, .range_dst = dst, .range_start = start, .range_len = stop - start};
  status = transfer(c, name, options, &t, error);
  transfer_reset(&t);
  return status;
}

int hurray_client_read_file(HurrayClient *c, const char *name, uint64_t start, uint64_t stop,
                            const char *path, const HurrayGetOptions *options,
                            HurrayError *error) {
  int status = check_range(start, stop, path != NULL, error);
  if (status == HURRAY_OK) status = usable(c, error);
  FileOutput out;
  bool durable = options == NULL || !(options->flags & HURRAY_GET_NOT_DURABLE);
  if (status == HURRAY_OK) status = hurray__output_open(&out, path, durable, error);
  if (status != HURRAY_OK) return status;
  Transfer t = {.range = true, .range_out = &out, .range_start = start, .range_len = stop - start};
  status = transfer(c, name, options, &t, error);
  transfer_reset(&t);
  if (status == HURRAY_OK) status = hurray__output_commit(&out, error);
  hurray__output_close(&out);
  return status;
}

int hurray__client_stream(HurrayClient *c, const char *name, const HurrayGetOptions *options,
                          WireSinkFn sink, void *context, HurrayError *error) {
  if (sink == NULL) return hurray__fail(error, HURRAY_EINVAL, "sink is NULL");
  Transfer t = {.sink = sink, .sink_context = context};
  int status = transfer(c, name, options, &t, error);
  transfer_reset(&t);
  return status;
}

/* ---- put ---------------------------------------------------------------------------------- */

int hurray_client_put(HurrayClient *c, const char *name, const HurrayTensorContext *tensor,
                      HurrayError *error) {
  int status = usable(c, error);
  if (status != HURRAY_OK) return status;
  begin_call(c);
  WireServed up; /* the bytes the tensor's arrays address, compact, with their checksums */
  status = hurray__wire_served_init(&up, name, tensor, NULL, NULL, 0, error);
  if (status != HURRAY_OK) return status;
  uint64_t id = c->next_id++;
  FileSink payload = {0}, frame = {0};
  WireTensorHeader h = {HURRAY_DEVICE_CPU, up.nbuffers,     up.total_bytes,
                        0,                 up.buffers,      up.record.data,
                        (uint32_t)up.record.len};
  status = hurray__wire_tensor_encode(&h, &payload, error);
  if (status == HURRAY_OK) {
    hurray__wire_tensor_frame(&frame, WIRE_PUT, up.total_bytes == 0 ? WIRE_FLAG_END : 0, id,
                              payload.data, payload.len, c->server->version_minor);
    status = frame.failed ? hurray__fail(error, HURRAY_ENOMEM, "out of memory")
                          : send_bytes(c, frame.data, frame.len, error);
  }
  hurray__sink_reset(&payload);
  hurray__sink_reset(&frame);
  static const uint8_t zeros[HURRAY_MIN_ALIGNMENT];
  uint64_t sent = 0;
  for (size_t i = 0; status == HURRAY_OK && i < up.nsegments; i++) {
    const WireSegment *g = &up.segments[i];
    for (uint64_t off = 0; status == HURRAY_OK && off < g->len;) {
      uint64_t n = g->len - off < c->max_frame ? g->len - off : c->max_frame;
      sent += n;
      uint8_t head[WIRE_HEADER_SIZE + WIRE_DATA_FIXED];
      WireHeader dh = {WIRE_DATA, sent == up.total_bytes ? WIRE_FLAG_END : 0, id,
                       n + WIRE_DATA_FIXED};
      hurray__wire_header_encode(&dh, head);
      hurray__store_le32(head + WIRE_HEADER_SIZE, g->buffer);
      hurray__store_le32(head + WIRE_HEADER_SIZE + 4, 0);
      hurray__store_le64(head + WIRE_HEADER_SIZE + 8, g->offset + off);
      const uint8_t *data = g->data ? g->data + off : zeros; /* gaps: < 64 bytes */
      struct iovec iov[2] = {{head, sizeof head}, {(void *)data, (size_t)n}};
      status = send_iov(c, iov, 2, error);
      off += n;
    }
  }
  hurray__wire_served_reset(&up);
  WireHeader r;
  if (status == HURRAY_OK) status = read_header(c, &r, error);
  if (status == HURRAY_OK) status = expect(c, &r, WIRE_PUT_OK, id, error);
  if (status == HURRAY_OK && r.length != 0) {
    status = broken(c, hurray__fail(error, HURRAY_EPROTOCOL, "PUT_OK with a payload"));
  }
  return status;
}
