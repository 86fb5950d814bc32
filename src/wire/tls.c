/* tls.c -- the byte stream of a wire connection: the socket itself, or a TLS session over it
 * (OpenSSL's libssl, TLS 1.3 only; ADR-061), loaded at run time on the first TLS use
 * (ADR-073). The frames travel unchanged inside TLS.
 *
 * Sessions talk to their socket through a small BIO of ours rather than OpenSSL's socket BIO,
 * which writes with write(2) and so raises SIGPIPE on a closed connection: every byte here goes
 * through send(MSG_NOSIGNAL) / recv, non-blocking, as the plaintext path does. The BIO also
 * looks at the peer's first byte before OpenSSL takes it: a Hurray frame's 0x89, where a TLS
 * record starts with 0x14..0x18, is a peer speaking the protocol in plaintext, and its bytes
 * are left in the socket for the caller to answer or read.
 *
 * Writes go through a buffer BIO first (WIRE_TLS_BUFFER bytes): OpenSSL writes one 16 KiB
 * record at a time, and a send per record costs a system call and a wake-up of the receiver
 * each. What the buffer still holds after a write is flushed before the next write or read
 * (hurray__wire_tls_unflushed tells the event loop). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "dl.h"
#include "wire.h"

/* ---- OpenSSL, loaded at run time (ADR-073) ------------------------------------------------ */

/* OpenSSL's headers give the types and the macros (SSL_CTX_set_mode, BIO_flush, ...); every
 * function is called through these tables, filled by dlsym on the first TLS use, so that
 * libhurray.so needs no libssl or libcrypto at load time. The names are redirected to the
 * tables after them (below), macros' expansions included. A call left out of the tables would
 * be an undefined symbol: the shared library is linked with --no-undefined (CMakeLists.txt). */
typedef struct Ssl {
  __typeof__(TLS_server_method) *TLS_server_method;
  __typeof__(TLS_client_method) *TLS_client_method;
  __typeof__(SSL_CTX_new) *SSL_CTX_new;
  __typeof__(SSL_CTX_free) *SSL_CTX_free;
  __typeof__(SSL_CTX_ctrl) *SSL_CTX_ctrl;
  __typeof__(SSL_CTX_set_options) *SSL_CTX_set_options;
  __typeof__(SSL_CTX_set_default_read_buffer_len) *SSL_CTX_set_default_read_buffer_len;
  __typeof__(SSL_CTX_set_num_tickets) *SSL_CTX_set_num_tickets;
  __typeof__(SSL_CTX_use_certificate_chain_file) *SSL_CTX_use_certificate_chain_file;
  __typeof__(SSL_CTX_use_PrivateKey_file) *SSL_CTX_use_PrivateKey_file;
  __typeof__(SSL_CTX_set_verify) *SSL_CTX_set_verify;
  __typeof__(SSL_CTX_load_verify_locations) *SSL_CTX_load_verify_locations;
  __typeof__(SSL_CTX_set_default_verify_paths) *SSL_CTX_set_default_verify_paths;
  __typeof__(SSL_new) *SSL_new;
  __typeof__(SSL_free) *SSL_free;
  __typeof__(SSL_set_bio) *SSL_set_bio;
  __typeof__(SSL_set_accept_state) *SSL_set_accept_state;
  __typeof__(SSL_set_connect_state) *SSL_set_connect_state;
  __typeof__(SSL_get0_param) *SSL_get0_param;
  __typeof__(SSL_set_hostflags) *SSL_set_hostflags;
  __typeof__(SSL_set1_host) *SSL_set1_host;
  __typeof__(SSL_ctrl) *SSL_ctrl;
  __typeof__(SSL_is_init_finished) *SSL_is_init_finished;
  __typeof__(SSL_shutdown) *SSL_shutdown;
  __typeof__(SSL_get_error) *SSL_get_error;
  __typeof__(SSL_do_handshake) *SSL_do_handshake;
  __typeof__(SSL_get_verify_result) *SSL_get_verify_result;
  __typeof__(SSL_has_pending) *SSL_has_pending;
  __typeof__(SSL_read_ex) *SSL_read_ex;
  __typeof__(SSL_write_ex) *SSL_write_ex;
} Ssl;

typedef struct Crypto {
  __typeof__(OpenSSL_version_num) *OpenSSL_version_num;
  __typeof__(ERR_peek_error) *ERR_peek_error;
  __typeof__(ERR_peek_last_error) *ERR_peek_last_error;
  __typeof__(ERR_reason_error_string) *ERR_reason_error_string;
  __typeof__(ERR_clear_error) *ERR_clear_error;
  __typeof__(BIO_meth_new) *BIO_meth_new;
  __typeof__(BIO_meth_free) *BIO_meth_free;
  __typeof__(BIO_get_new_index) *BIO_get_new_index;
  __typeof__(BIO_meth_set_write) *BIO_meth_set_write;
  __typeof__(BIO_meth_set_read) *BIO_meth_set_read;
  __typeof__(BIO_meth_set_ctrl) *BIO_meth_set_ctrl;
  __typeof__(BIO_meth_set_create) *BIO_meth_set_create;
  __typeof__(BIO_clear_flags) *BIO_clear_flags;
  __typeof__(BIO_set_flags) *BIO_set_flags;
  __typeof__(BIO_test_flags) *BIO_test_flags;
  __typeof__(BIO_get_data) *BIO_get_data;
  __typeof__(BIO_set_data) *BIO_set_data;
  __typeof__(BIO_set_init) *BIO_set_init;
  __typeof__(BIO_new) *BIO_new;
  __typeof__(BIO_free) *BIO_free;
  __typeof__(BIO_up_ref) *BIO_up_ref;
  __typeof__(BIO_push) *BIO_push;
  __typeof__(BIO_f_buffer) *BIO_f_buffer;
  __typeof__(BIO_ctrl) *BIO_ctrl;
  __typeof__(BIO_int_ctrl) *BIO_int_ctrl;
  __typeof__(X509_VERIFY_PARAM_set1_ip_asc) *X509_VERIFY_PARAM_set1_ip_asc;
  __typeof__(X509_verify_cert_error_string) *X509_verify_cert_error_string;
} Crypto;

#define SYMBOL(type, name) {#name, offsetof(type, name)}
static const HurrayDlSymbol kSslSymbols[] = {
    SYMBOL(Ssl, TLS_server_method),
    SYMBOL(Ssl, TLS_client_method),
    SYMBOL(Ssl, SSL_CTX_new),
    SYMBOL(Ssl, SSL_CTX_free),
    SYMBOL(Ssl, SSL_CTX_ctrl),
    SYMBOL(Ssl, SSL_CTX_set_options),
    SYMBOL(Ssl, SSL_CTX_set_default_read_buffer_len),
    SYMBOL(Ssl, SSL_CTX_set_num_tickets),
    SYMBOL(Ssl, SSL_CTX_use_certificate_chain_file),
    SYMBOL(Ssl, SSL_CTX_use_PrivateKey_file),
    SYMBOL(Ssl, SSL_CTX_set_verify),
    SYMBOL(Ssl, SSL_CTX_load_verify_locations),
    SYMBOL(Ssl, SSL_CTX_set_default_verify_paths),
    SYMBOL(Ssl, SSL_new),
    SYMBOL(Ssl, SSL_free),
    SYMBOL(Ssl, SSL_set_bio),
    SYMBOL(Ssl, SSL_set_accept_state),
    SYMBOL(Ssl, SSL_set_connect_state),
    SYMBOL(Ssl, SSL_get0_param),
    SYMBOL(Ssl, SSL_set_hostflags),
    SYMBOL(Ssl, SSL_set1_host),
    SYMBOL(Ssl, SSL_ctrl),
    SYMBOL(Ssl, SSL_is_init_finished),
    SYMBOL(Ssl, SSL_shutdown),
    SYMBOL(Ssl, SSL_get_error),
    SYMBOL(Ssl, SSL_do_handshake),
    SYMBOL(Ssl, SSL_get_verify_result),
    SYMBOL(Ssl, SSL_has_pending),
    SYMBOL(Ssl, SSL_read_ex),
    SYMBOL(Ssl, SSL_write_ex),
};
static const HurrayDlSymbol kCryptoSymbols[] = {
    SYMBOL(Crypto, OpenSSL_version_num),
    SYMBOL(Crypto, ERR_peek_error),
    SYMBOL(Crypto, ERR_peek_last_error),
    SYMBOL(Crypto, ERR_reason_error_string),
    SYMBOL(Crypto, ERR_clear_error),
    SYMBOL(Crypto, BIO_meth_new),
    SYMBOL(Crypto, BIO_meth_free),
    SYMBOL(Crypto, BIO_get_new_index),
    SYMBOL(Crypto, BIO_meth_set_write),
    SYMBOL(Crypto, BIO_meth_set_read),
    SYMBOL(Crypto, BIO_meth_set_ctrl),
    SYMBOL(Crypto, BIO_meth_set_create),
    SYMBOL(Crypto, BIO_clear_flags),
    SYMBOL(Crypto, BIO_set_flags),
    SYMBOL(Crypto, BIO_test_flags),
    SYMBOL(Crypto, BIO_get_data),
    SYMBOL(Crypto, BIO_set_data),
    SYMBOL(Crypto, BIO_set_init),
    SYMBOL(Crypto, BIO_new),
    SYMBOL(Crypto, BIO_free),
    SYMBOL(Crypto, BIO_up_ref),
    SYMBOL(Crypto, BIO_push),
    SYMBOL(Crypto, BIO_f_buffer),
    SYMBOL(Crypto, BIO_ctrl),
    SYMBOL(Crypto, BIO_int_ctrl),
    SYMBOL(Crypto, X509_VERIFY_PARAM_set1_ip_asc),
    SYMBOL(Crypto, X509_verify_cert_error_string),
};
#undef SYMBOL

static Ssl ssl;
static Crypto crypto;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static HurrayLoadResult g_load;

#define TLS_server_method (ssl.TLS_server_method)
#define TLS_client_method (ssl.TLS_client_method)
#define SSL_CTX_new (ssl.SSL_CTX_new)
#define SSL_CTX_free (ssl.SSL_CTX_free)
#define SSL_CTX_ctrl (ssl.SSL_CTX_ctrl)
#define SSL_CTX_set_options (ssl.SSL_CTX_set_options)
#define SSL_CTX_set_default_read_buffer_len (ssl.SSL_CTX_set_default_read_buffer_len)
#define SSL_CTX_set_num_tickets (ssl.SSL_CTX_set_num_tickets)
#define SSL_CTX_use_certificate_chain_file (ssl.SSL_CTX_use_certificate_chain_file)
#define SSL_CTX_use_PrivateKey_file (ssl.SSL_CTX_use_PrivateKey_file)
#define SSL_CTX_set_verify (ssl.SSL_CTX_set_verify)
#define SSL_CTX_load_verify_locations (ssl.SSL_CTX_load_verify_locations)
#define SSL_CTX_set_default_verify_paths (ssl.SSL_CTX_set_default_verify_paths)
#define SSL_new (ssl.SSL_new)
#define SSL_free (ssl.SSL_free)
#define SSL_set_bio (ssl.SSL_set_bio)
#define SSL_set_accept_state (ssl.SSL_set_accept_state)
#define SSL_set_connect_state (ssl.SSL_set_connect_state)
#define SSL_get0_param (ssl.SSL_get0_param)
#define SSL_set_hostflags (ssl.SSL_set_hostflags)
#define SSL_set1_host (ssl.SSL_set1_host)
#define SSL_ctrl (ssl.SSL_ctrl)
#define SSL_is_init_finished (ssl.SSL_is_init_finished)
#define SSL_shutdown (ssl.SSL_shutdown)
#define SSL_get_error (ssl.SSL_get_error)
#define SSL_do_handshake (ssl.SSL_do_handshake)
#define SSL_get_verify_result (ssl.SSL_get_verify_result)
#define SSL_has_pending (ssl.SSL_has_pending)
#define SSL_read_ex (ssl.SSL_read_ex)
#define SSL_write_ex (ssl.SSL_write_ex)
#define OpenSSL_version_num (crypto.OpenSSL_version_num)
#define ERR_peek_error (crypto.ERR_peek_error)
#define ERR_peek_last_error (crypto.ERR_peek_last_error)
#define ERR_reason_error_string (crypto.ERR_reason_error_string)
#define ERR_clear_error (crypto.ERR_clear_error)
#define BIO_meth_new (crypto.BIO_meth_new)
#define BIO_meth_free (crypto.BIO_meth_free)
#define BIO_get_new_index (crypto.BIO_get_new_index)
#define BIO_meth_set_write (crypto.BIO_meth_set_write)
#define BIO_meth_set_read (crypto.BIO_meth_set_read)
#define BIO_meth_set_ctrl (crypto.BIO_meth_set_ctrl)
#define BIO_meth_set_create (crypto.BIO_meth_set_create)
#define BIO_clear_flags (crypto.BIO_clear_flags)
#define BIO_set_flags (crypto.BIO_set_flags)
#define BIO_test_flags (crypto.BIO_test_flags)
#define BIO_get_data (crypto.BIO_get_data)
#define BIO_set_data (crypto.BIO_set_data)
#define BIO_set_init (crypto.BIO_set_init)
#define BIO_new (crypto.BIO_new)
#define BIO_free (crypto.BIO_free)
#define BIO_up_ref (crypto.BIO_up_ref)
#define BIO_push (crypto.BIO_push)
#define BIO_f_buffer (crypto.BIO_f_buffer)
#define BIO_ctrl (crypto.BIO_ctrl)
#define BIO_int_ctrl (crypto.BIO_int_ctrl)
#define X509_VERIFY_PARAM_set1_ip_asc (crypto.X509_VERIFY_PARAM_set1_ip_asc)
#define X509_verify_cert_error_string (crypto.X509_verify_cert_error_string)

/* libcrypto first (libssl needs it), each by its OpenSSL 3 soname: the 3.x series keeps its
 * ABI, and these are the names its packages install (the unversioned libssl.so is a
 * development link, absent on a machine that only runs programs). */
static void load_once(void) {
  HurrayError *error = &g_load.error;
  g_load.status = hurray__dl_load_for(WIRE_TLS_NEEDED_BY, WIRE_TLS_CRYPTO, kCryptoSymbols,
                                      sizeof kCryptoSymbols / sizeof *kCryptoSymbols, &crypto,
                                      error);
  if (g_load.status == HURRAY_OK && OpenSSL_version_num() < 0x30000000UL) {
    g_load.status = hurray__fail(error, HURRAY_EUNSUPPORTED,
                                 "%s is OpenSSL %lx; hurrays:// needs OpenSSL 3", WIRE_TLS_CRYPTO,
                                 OpenSSL_version_num());
  }
  if (g_load.status == HURRAY_OK) {
    g_load.status = hurray__dl_load_for(WIRE_TLS_NEEDED_BY, WIRE_TLS_SSL, kSslSymbols,
                                        sizeof kSslSymbols / sizeof *kSslSymbols, &ssl, error);
  }
}

int hurray__wire_tls_load(HurrayError *error) {
  pthread_once(&g_once, load_once);
  return hurray__load_result(&g_load, error);
}

struct WireTls {
  SSL_CTX *ctx;
  BIO_METHOD *method;
  bool server;
  char *server_name; /* client: NULL, or the name the certificate must carry */
};

struct WireTlsConn {
  SSL *ssl;
  BIO *wbio;      /* the write buffer, in front of the socket */
  int fd;
  bool peeked;    /* the peer's first byte has been looked at */
  bool plaintext; /* ... and it began a Hurray frame */
  bool eof;       /* the peer closed its side */
  int read_want;  /* what the last blocked read / write waits for */
  int write_want;
  char reason[160]; /* the last TLS failure */
};

/* ---- the BIO: the socket, without SIGPIPE ------------------------------------------------- */

static int bio_write(BIO *bio, const char *data, int len) {
  BIO_clear_retry_flags(bio);
  const WireTlsConn *c = BIO_get_data(bio);
  ssize_t n = send(c->fd, data, (size_t)len, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
    BIO_set_retry_write(bio);
  }
  return (int)n;
}

static int bio_read(BIO *bio, char *data, int len) {
  BIO_clear_retry_flags(bio);
  WireTlsConn *c = BIO_get_data(bio);
  ssize_t n = 1;
  if (!c->peeked) {
    uint8_t first = 0;
    n = recv(c->fd, &first, 1, MSG_PEEK | MSG_DONTWAIT);
    c->peeked = n == 1;
    c->plaintext = n == 1 && first == (uint8_t)WIRE_MAGIC[0];
    if (c->plaintext) {
      errno = EPROTO;
      return -1;
    }
  }
  if (n > 0) n = recv(c->fd, data, (size_t)len, MSG_DONTWAIT);
  c->eof = n == 0;
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
    BIO_set_retry_read(bio);
  }
  return (int)n;
}

static long bio_ctrl(BIO *bio, int cmd, long num, void *ptr) {
  (void)num;
  (void)ptr;
  if (cmd == BIO_CTRL_EOF) return ((const WireTlsConn *)BIO_get_data(bio))->eof;
  return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

static int bio_create(BIO *bio) {
  BIO_set_init(bio, 1);
  return 1;
}

/* ---- configuration ------------------------------------------------------------------------ */

/* OpenSSL's reason for the oldest error queued, and empties the queue. */
static const char *ssl_reason(char *out, size_t size) {
  unsigned long code = ERR_peek_error();
  const char *reason = code ? ERR_reason_error_string(code) : NULL;
  if (reason == NULL && code != 0 && ERR_GET_LIB(code) == ERR_LIB_SYS) {
    reason = strerror(ERR_GET_REASON(code));
  }
  snprintf(out, size, "%s", reason ? reason : "unknown TLS error");
  ERR_clear_error();
  return out;
}

int hurray__wire_tls_create(const HurrayTlsOptions *o, bool server, WireTls **out,
                            HurrayError *error) {
  *out = NULL;
  if (!hurray__all_zero(o->reserved, sizeof o->reserved)) {
    return hurray__fail(error, HURRAY_EINVAL, "TLS options: reserved fields must be zero");
  }
  if (server && (o->certificate_file == NULL || o->key_file == NULL || o->ca_file != NULL ||
                 o->server_name != NULL)) {
    return hurray__fail(error, HURRAY_EINVAL,
                        "TLS options of a server: certificate_file and key_file, and no "
                        "ca_file or server_name");
  }
  if (!server && (o->certificate_file != NULL || o->key_file != NULL)) {
    return hurray__fail(error, HURRAY_EINVAL,
                        "TLS options of a client: ca_file and server_name only (no client "
                        "certificates)");
  }
  if (!server && o->server_name != NULL &&
      (o->server_name[0] == '\0' || strlen(o->server_name) > 253)) {
    return hurray__fail(error, HURRAY_EINVAL, "TLS server_name of 1..253 bytes");
  }
  int loaded = hurray__wire_tls_load(error);
  if (loaded != HURRAY_OK) return loaded;
  WireTls *t = calloc(1, sizeof *t);
  if (t == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  t->server = server;
  char reason[160];
  int status = HURRAY_OK;
  ERR_clear_error();
  t->ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
  t->method = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "hurray socket");
  if (t->ctx == NULL || t->method == NULL || !BIO_meth_set_write(t->method, bio_write) ||
      !BIO_meth_set_read(t->method, bio_read) || !BIO_meth_set_ctrl(t->method, bio_ctrl) ||
      !BIO_meth_set_create(t->method, bio_create) ||
      !SSL_CTX_set_min_proto_version(t->ctx, TLS1_3_VERSION)) {
    status = hurray__fail(error, HURRAY_ENOMEM, "TLS: %s", ssl_reason(reason, sizeof reason));
  }
  if (status == HURRAY_OK) {
    /* A frame may be written in parts and from a buffer that moved (a control queue that
       grew); the wire's own framing and checksums detect a stream cut short, so an EOF without
       close_notify reads as the peer closing, as over plaintext. */
    SSL_CTX_set_mode(t->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_options(t->ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
    /* Read records several at a time (one recv for a header and another for its body each is
       twice the system calls). */
    SSL_CTX_set_read_ahead(t->ctx, 1);
    SSL_CTX_set_default_read_buffer_len(t->ctx, WIRE_TLS_BUFFER);
  }
  if (status == HURRAY_OK && server) {
    SSL_CTX_set_num_tickets(t->ctx, 0); /* no resumption: nothing is written after the handshake */
    if (SSL_CTX_use_certificate_chain_file(t->ctx, o->certificate_file) != 1) {
      status = hurray__fail(error, HURRAY_EIO, "TLS certificate '%s': %s", o->certificate_file,
                            ssl_reason(reason, sizeof reason));
    } else if (SSL_CTX_use_PrivateKey_file(t->ctx, o->key_file, SSL_FILETYPE_PEM) != 1) {
      if (ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH) {
        status = hurray__fail(error, HURRAY_EINVAL, "TLS key '%s' does not match certificate '%s'",
                              o->key_file, o->certificate_file);
        ERR_clear_error();
      } else {
        status = hurray__fail(error, HURRAY_EIO, "TLS key '%s': %s", o->key_file,
                              ssl_reason(reason, sizeof reason));
      }
    }
  } else if (status == HURRAY_OK) {
    SSL_CTX_set_verify(t->ctx, SSL_VERIFY_PEER, NULL);
    if (o->ca_file != NULL ? SSL_CTX_load_verify_locations(t->ctx, o->ca_file, NULL) != 1
                           : SSL_CTX_set_default_verify_paths(t->ctx) != 1) {
      status = hurray__fail(error, HURRAY_EIO, "TLS CA file '%s': %s",
                            o->ca_file ? o->ca_file : "(system default)",
                            ssl_reason(reason, sizeof reason));
    }
    if (status == HURRAY_OK && o->server_name != NULL) {
      t->server_name = strdup(o->server_name);
      if (t->server_name == NULL) status = hurray__fail(error, HURRAY_ENOMEM, "out of memory");
    }
  }
  if (status != HURRAY_OK) {
    hurray__wire_tls_destroy(t);
    return status;
  }
  *out = t;
  return HURRAY_OK;
}

void hurray__wire_tls_destroy(WireTls *t) {
  if (t == NULL) return;
  SSL_CTX_free(t->ctx);
  BIO_meth_free(t->method);
  free(t->server_name);
  free(t);
}

/* ---- sessions ----------------------------------------------------------------------------- */

int hurray__wire_tls_open(const WireTls *t, int fd, const char *host, WireTlsConn **out,
                          HurrayError *error) {
  *out = NULL;
  WireTlsConn *c = calloc(1, sizeof *c);
  if (c == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  ERR_clear_error();
  c->ssl = SSL_new(t->ctx);
  BIO *bio = BIO_new(t->method), *buffer = BIO_new(BIO_f_buffer());
  bool ok = c->ssl != NULL && bio != NULL && buffer != NULL &&
            BIO_set_write_buffer_size(buffer, WIRE_TLS_BUFFER) == 1 && BIO_up_ref(bio) == 1;
  if (ok) {
    c->fd = fd;
    BIO_set_data(bio, c);
    c->wbio = BIO_push(buffer, bio);
    SSL_set_bio(c->ssl, bio, buffer); /* the session owns both now (`bio` twice) */
    bio = buffer = NULL;
  }
  BIO_free(buffer);
  if (ok && t->server) {
    SSL_set_accept_state(c->ssl);
  } else if (ok) {
    SSL_set_connect_state(c->ssl);
    const char *name = t->server_name ? t->server_name : host;
    unsigned char ip[16];
    if (t->server_name == NULL &&
        (inet_pton(AF_INET, name, ip) == 1 || inet_pton(AF_INET6, name, ip) == 1)) {
      ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(c->ssl), name) == 1;
    } else {
      SSL_set_hostflags(c->ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
      ok = SSL_set1_host(c->ssl, name) == 1 && SSL_set_tlsext_host_name(c->ssl, name) == 1;
    }
  }
  BIO_free(bio);
  if (!ok) {
    char reason[160];
    int status = hurray__fail(error, HURRAY_ENOMEM, "TLS session: %s",
                              ssl_reason(reason, sizeof reason));
    hurray__wire_tls_close(c);
    return status;
  }
  *out = c;
  return HURRAY_OK;
}

void hurray__wire_tls_close(WireTlsConn *c) {
  if (c == NULL) return;
  if (c->ssl != NULL && SSL_is_init_finished(c->ssl)) (void)SSL_shutdown(c->ssl);
  ERR_clear_error();
  SSL_free(c->ssl);
  free(c);
}

/* Records why a call on the session failed: its SSL_get_error `code`. Returns the want
 * (WIRE_WANT_*) for a call that should be repeated, else 0 with errno set. */
static int failed(WireTlsConn *c, int code) {
  switch (code) {
    case SSL_ERROR_WANT_READ: errno = EAGAIN; return WIRE_WANT_READ;
    case SSL_ERROR_WANT_WRITE: errno = EAGAIN; return WIRE_WANT_WRITE;
    case SSL_ERROR_SYSCALL:
      if (errno == 0) errno = ECONNRESET;
      snprintf(c->reason, sizeof c->reason, "%s", strerror(errno));
      ERR_clear_error();
      return 0;
    default:
      ssl_reason(c->reason, sizeof c->reason);
      errno = EPROTO;
      return 0;
  }
}

int hurray__wire_tls_handshake(WireTlsConn *c, bool *done, HurrayError *error) {
  *done = false;
  ERR_clear_error();
  int r = SSL_do_handshake(c->ssl);
  if (r == 1) {
    *done = true;
    return HURRAY_OK;
  }
  int code = SSL_get_error(c->ssl, r);
  long verify = SSL_get_verify_result(c->ssl);
  int want = failed(c, code);
  c->read_want = want;
  if (want != 0) return HURRAY_OK;
  if (c->plaintext) {
    return hurray__fail(error, HURRAY_EPROTOCOL, "the peer speaks the protocol without TLS");
  }
  if (verify != X509_V_OK) {
    return hurray__fail(error, HURRAY_EAUTH, "TLS: the server's certificate is refused: %s",
                        X509_verify_cert_error_string(verify));
  }
  return hurray__fail(error, HURRAY_EPROTOCOL, "TLS handshake failed: %s", c->reason);
}

bool hurray__wire_tls_plaintext(const WireTlsConn *c) {
  return c->plaintext;
}

bool hurray__wire_tls_unflushed(const WireTlsConn *c) {
  return c != NULL && c->wbio != NULL && BIO_wpending(c->wbio) > 0;
}

/* Sends what the write buffer holds: 0 once it is empty, else -1 with errno (EAGAIN: the
 * socket is full). */
static int flush(WireTlsConn *c) {
  if (!hurray__wire_tls_unflushed(c)) return 0;
  errno = 0;
  ERR_clear_error();
  if (BIO_flush(c->wbio) == 1 && !hurray__wire_tls_unflushed(c)) return 0;
  if (BIO_should_retry(c->wbio)) {
    errno = EAGAIN;
    return -1;
  }
  if (errno == 0 || errno == EAGAIN) errno = ECONNRESET;
  snprintf(c->reason, sizeof c->reason, "%s", strerror(errno));
  ERR_clear_error();
  return -1;
}

int hurray__wire_tls_want(const WireTlsConn *c) {
  return c->read_want;
}

bool hurray__wire_tls_pending(const WireTlsConn *c) {
  /* After a read that waited for the socket, what is left (a partial record) needs the socket:
     epoll will say when. */
  return c != NULL && c->read_want != WIRE_WANT_READ && SSL_has_pending(c->ssl) == 1;
}

/* ---- the byte stream ---------------------------------------------------------------------- */

ssize_t hurray__wire_recv(int fd, WireTlsConn *tls, void *buf, size_t len) {
  if (tls == NULL) return recv(fd, buf, len, MSG_DONTWAIT);
  int flushed = flush(tls); /* what the peer may be waiting for before it answers */
  if (flushed != 0 && errno != EAGAIN) return -1;
  size_t n = 0;
  ERR_clear_error();
  errno = 0;
  if (SSL_read_ex(tls->ssl, buf, len, &n) == 1) {
    tls->read_want = 0;
    return (ssize_t)n;
  }
  int code = SSL_get_error(tls->ssl, 0);
  if (code == SSL_ERROR_ZERO_RETURN) return 0; /* close_notify, or EOF (see create) */
  tls->read_want = failed(tls, code);
  /* nothing to read yet: first the rest of the write buffer must go */
  if (tls->read_want == WIRE_WANT_READ && flushed != 0) tls->read_want = WIRE_WANT_WRITE;
  return -1;
}

ssize_t hurray__wire_sendv(int fd, WireTlsConn *tls, const struct iovec *iov, int n) {
  if (tls == NULL) {
    struct msghdr msg = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)n};
    return sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  if (flush(tls) != 0) { /* the buffer is full, or the connection failed */
    if (errno == EAGAIN) tls->write_want = WIRE_WANT_WRITE;
    return -1;
  }
  size_t total = 0;
  for (int i = 0; i < n; i++) {
    if (iov[i].iov_len == 0) continue;
    size_t w = 0;
    ERR_clear_error();
    errno = 0;
    if (SSL_write_ex(tls->ssl, iov[i].iov_base, iov[i].iov_len, &w) == 1) {
      tls->write_want = 0;
      total += w;
      if (w < iov[i].iov_len) break;
      continue;
    }
    int want = failed(tls, SSL_get_error(tls->ssl, 0));
    tls->write_want = want;
    if (total > 0 && want != 0) break; /* what was written counts; the rest comes again */
    return -1;
  }
  (void)flush(tls); /* what does not go now is flushed by the next call (see unflushed) */
  return (ssize_t)total;
}

int hurray__wire_io_want(const WireTlsConn *tls, bool reading) {
  if (tls == NULL) return reading ? WIRE_WANT_READ : WIRE_WANT_WRITE;
  int want = reading ? tls->read_want : tls->write_want;
  return want ? want : (reading ? WIRE_WANT_READ : WIRE_WANT_WRITE);
}

const char *hurray__wire_io_error(const WireTlsConn *tls, int err) {
  return tls != NULL && err == EPROTO ? tls->reason : strerror(err);
}
