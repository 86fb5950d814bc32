/* test_wire.c -- HurrayServer and HurrayClient over loopback (127.0.0.1 and Unix sockets only):
 * round trips of every layout and dtype, the handshake's refusals, the device rule, resume,
 * corruption, faults (slowloris, oversized frames, a client that stops reading, a server
 * killed mid-transfer), 1,000 concurrent clients, bounded server memory, auth and read-only,
 * and all of it that concerns the transport again over TLS, with certificates made at test
 * time by tests/tls/make_certs.sh (HURRAY_MAKE_CERTS).
 * Faults are injected by real peers: raw frames from the codec, and a forwarding proxy that
 * flips or cuts the byte stream. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_file_helpers.h"
#include "test_tmpdir.h"
#include "test_wire_helpers.h"
#include "wire.h"

static HurrayTensorContext *context_of(Sample s) {
  HurrayTensorContext *c = NULL;
  OK(hurray_tensor_context_create(&s.desc, s.list, 0, NULL, NULL, &c, E));
  return c;
}

/* The descriptors are equal exactly when their tensor records are the same bytes. */
static void assert_same_record(const HurrayTensorDesc *a, const HurrayTensorDesc *b) {
  FileSink x = {0}, y = {0};
  OK(hurray__record_encode((const uint8_t *)"t", 1, a, NULL, NULL, NULL, 0, &x, E));
  OK(hurray__record_encode((const uint8_t *)"t", 1, b, NULL, NULL, NULL, 0, &y, E));
  assert_int_equal(x.len, y.len);
  assert_memory_equal(x.data, y.data, x.len);
  hurray__sink_reset(&x);
  hurray__sink_reset(&y);
}

static void assert_same_buffers(const HurrayTensorContext *a, const HurrayTensorContext *b) {
  assert_int_equal(a->buffers->count, b->buffers->count);
  for (uint32_t i = 0; i < a->buffers->count; i++) {
    const HurrayBuffer *x = a->buffers->buffers[i], *y = b->buffers->buffers[i];
    assert_int_equal(x->desc.byte_size, y->desc.byte_size);
    assert_int_equal(x->desc.alignment, y->desc.alignment);
    assert_int_equal(a->buffers->roles[i], b->buffers->roles[i]);
    if (x->desc.byte_size) assert_memory_equal(x->data, y->data, x->desc.byte_size);
  }
}

/* The Hurray file at `path` (a fetch's) passes verify, and its one tensor holds `want`'s
 * buffers. */
static void assert_file_holds(const char *path, const HurrayTensorContext *want) {
  HurrayError error = {0};
  HurrayFileReader *reader = NULL;
  HurrayTensorContext *got = NULL;
  assert_int_equal(hurray_file_reader_open(path, 0, &reader, &error), HURRAY_OK);
  assert_int_equal(hurray_file_reader_verify(reader, HURRAY_FILE_WHOLE, NULL, NULL, &error),
                   HURRAY_OK);
  assert_int_equal(hurray_file_reader_get(reader, 0, 0, &got, &error), HURRAY_OK);
  assert_same_buffers(got, want);
  hurray_tensor_context_release(got);
  hurray_file_reader_destroy(reader);
}

/* The server's statistics once `n` tensor responses have been sent in full: the client may
 * have its tensor before the server's loop has counted the frame that carried it. */
static HurrayServerStats wait_transfers(HurrayServer *server, uint64_t n) {
  HurrayServerStats stats = {0};
  for (int i = 0; i < 500; i++) {
    OK(hurray_server_stats(server, &stats, E));
    if (stats.transfers >= n) break;
    usleep(10000);
  }
  assert_int_equal(stats.transfers, n);
  return stats;
}

/* ---- raw peers ---------------------------------------------------------------------------- */

static int raw_connect(const char *address) {
  WireAddress a;
  OK(hurray__wire_address_parse(address, &a, E));
  int fd = socket(a.family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  assert_int_equal(connect(fd, (struct sockaddr *)a.storage, a.length), 0);
  struct timeval tv = {10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

static void raw_send(int fd, const FileSink *s) {
  assert_int_equal(send(fd, s->data, s->len, MSG_NOSIGNAL), (ssize_t)s->len);
}

/* Reads one frame; returns its type and puts the payload (NUL-terminated) in `payload`. */
static int raw_frame(int fd, WireHeader *h, uint8_t *payload, size_t cap) {
  uint8_t head[WIRE_HEADER_SIZE];
  if (recv(fd, head, sizeof head, MSG_WAITALL) != (ssize_t)sizeof head) return -1;
  OK(hurray__wire_header_decode(head, UINT32_MAX, h, E));
  assert_true(h->length < cap);
  if (h->length && recv(fd, payload, (size_t)h->length, MSG_WAITALL) != (ssize_t)h->length) return -1;
  payload[h->length] = 0;
  return h->type;
}

/* Appends a CLIENT_HELLO of protocol 1 offering only the CPU, with `max_frame`. */
/* Appends a CLIENT_HELLO of version 1.0 listing the `n` named device `tags`. */
static void devices_hello(FileSink *frame, uint32_t max_frame, const uint8_t *tags, size_t n) {
  WireHello *hello = calloc(1, sizeof *hello);
  hello->version_major = 1;
  hello->max_frame = max_frame;
  OK(hurray__wire_devices_fill(hello, tags, n, E));
  OK(hurray__wire_hello_encode(WIRE_CLIENT_HELLO, hello, frame, E));
  free(hello);
}

static void cpu_hello(FileSink *frame, uint32_t max_frame) {
  const uint8_t cpu = HURRAY_DEVICE_CPU;
  devices_hello(frame, max_frame, &cpu, 1);
}

/* Appends `req` as a TENSOR_REQUEST frame of request id 1. */
static void request_frame(FileSink *frame, const WireRequest *req) {
  FileSink payload = {0};
  OK(hurray__wire_request_encode(req, &payload, E));
  hurray__wire_frame(frame, WIRE_TENSOR_REQUEST, 0, 1, payload.data, payload.len);
  hurray__sink_reset(&payload);
}

/* Sends a CLIENT_HELLO listing `tags` (private ones named `names[i]`) and returns the answer's
 * type; an ERROR's code and message go into `error`. */
static int raw_hello(const char *address, uint16_t major, const uint8_t *tags, const char **names,
                     uint32_t n, HurrayError *error) {
  WireHello *h = calloc(1, sizeof *h);
  h->version_major = major;
  h->max_frame = 1u << 20;
  h->ndevices = n;
  for (uint32_t i = 0; i < n; i++) {
    h->devices[i].tag = tags[i];
    if (names && names[i]) {
      h->devices[i].name_len = (uint8_t)strlen(names[i]);
      strcpy(h->devices[i].name, names[i]);
    }
  }
  FileSink out = {0};
  OK(hurray__wire_hello_encode(WIRE_CLIENT_HELLO, h, &out, E));
  free(h);
  int fd = raw_connect(address);
  raw_send(fd, &out);
  hurray__sink_reset(&out);
  WireHeader hd;
  uint8_t payload[4096];
  int type = raw_frame(fd, &hd, payload, sizeof payload);
  if (type == WIRE_ERROR) hurray__wire_error_decode(payload, (size_t)hd.length, error);
  close(fd);
  return type;
}

/* ---- round trips -------------------------------------------------------------------------- */

static const HurrayServerOptions kUploads = {.flags = HURRAY_SERVER_UPLOADS};

static void every_layout_round_trips(void **state) {
  (void)state;
  Running r;
  start(&r, &kUploads);
  char name[32];
  for (size_t i = 0; i < SAMPLE_COUNT; i++) {
    snprintf(name, sizeof name, "sample%zu", i);
    OK(hurray_server_add_tensor(r.server, name, context_of(kSamples[i]()), E));
  }
  go(&r);
  HurrayClient *c = NULL;
  OK(hurray_client_connect(r.address, NULL, &c, E));
  HurrayRemoteTensor *items = NULL;
  uint32_t count = 0;
  OK(hurray_client_list(c, &items, &count, E));
  assert_int_equal(count, SAMPLE_COUNT);
  for (size_t i = 0; i < SAMPLE_COUNT; i++) {
    Sample s = kSamples[i]();
    snprintf(name, sizeof name, "sample%zu", i);
    assert_string_equal(items[i].name, name);
    assert_int_equal(items[i].layout, s.desc.layout);
    HurrayTensorContext *got = NULL, *want = context_of(s);
    OK(hurray_client_get(c, name, NULL, &got, E));
    OK(hurray_tensor_context_check(got, HURRAY_VALIDATE_CONTENTS, E));
    /* the same tensor, element for element, its buffers reduced to the bytes it addresses
       (byte offsets re-based, as in a file) */
    assert_true(same_tensor(got->tensor, got->buffers, want->tensor, want->buffers));
    /* and back up: the received form is what the server serves again, byte for byte */
    snprintf(name, sizeof name, "up%zu", i);
    OK(hurray_client_put(c, name, got, E));
    HurrayTensorContext *again = NULL;
    OK(hurray_client_get(c, name, NULL, &again, E));
    assert_same_record(again->tensor, got->tensor);
    assert_same_buffers(again, got);
    hurray_tensor_context_release(again);
    hurray_tensor_context_release(got);
    hurray_tensor_context_release(want);
  }
  free(items);
  hurray_client_destroy(c);
  finish(&r);
}

/* Bytes of a buffer that no array addresses are never read, so never sent (buffer-protocol.md
 * §1): a view of 40 bytes at offset 100 of a 256-byte buffer arrives as a buffer of those 40
 * bytes, the view at its start (as the file writer lays it out). */
static void unaddressed_bytes_are_never_sent(void **state) {
  (void)state;
  static const int64_t shape[] = {40};
  HurrayArray part = {.byte_offset = 100, .shape = shape, .ndim = 1, .dtype = HURRAY_DTYPE_UINT8};
  HurrayTensorDesc desc = {.layout = HURRAY_LAYOUT_DENSE, .ndim = 1, .shape = shape,
                           .parts = &part, .nparts = 1, .dtype = HURRAY_DTYPE_UINT8};
  HurrayBufferList *list = NULL;
  HurrayBuffer *b = NULL;
  OK(hurray_buffer_list_create(1, &list, E));
  OK(hurray_buffer_alloc(256, 64, 0, &b, E));
  memset(b->data, 0xee, 256); /* a secret of whoever owns the rest of the buffer */
  for (int i = 0; i < 40; i++) ((uint8_t *)b->data)[100 + i] = (uint8_t)i;
  OK(hurray_buffer_list_append(list, b, HURRAY_ROLE_VALUES, NULL, E));
  HurrayTensorContext *ctx = NULL;
  OK(hurray_tensor_context_create(&desc, list, 0, NULL, NULL, &ctx, E));
  Running r;
  start(&r, NULL);
  OK(hurray_server_add_tensor(r.server, "view", ctx, E));
  go(&r);
  HurrayClient *c = NULL;
  OK(hurray_client_connect(r.address, NULL, &c, E));
  HurrayTensorContext *got = NULL;
  OK(hurray_client_get(c, "view", NULL, &got, E));
  const HurrayBuffer *g = got->buffers->buffers[0];
  assert_int_equal(g->desc.byte_size, 40);
  assert_int_equal(got->tensor->parts[0].byte_offset, 0);
  for (int i = 0; i < 40; i++) assert_int_equal(((const uint8_t *)g->data)[i], i);
  hurray_tensor_context_release(got);
  hurray_client_destroy(c);
  finish(&r);
}

static void every_dtype_round_trips(void **state) {
  (void)state;
  Running r;
  start(&r, &kUploads);
  go(&r);
  HurrayClient *c = NULL;
  OK(hurray_client_connect(r.address, NULL, &c, E));
  for (size_t i = 0; i < hurray_dtype_count(); i++) {
    const HurrayDTypeInfo *info = hurray_dtype_at(i);
    uint32_t elements = 0, block = 0; /* a block dtype's rows are whole blocks */
    const bool blocks = hurray_dtype_block(info->code, &elements, &block, NULL) == HURRAY_OK;
    const int64_t shape[] = {3, blocks ? (int64_t)block : 5};
    uint64_t bytes = 0;
    OK(hurray_dtype_storage_bytes(info->code, (uint64_t)(3 * shape[1]), &bytes, E));
    HurrayArray part = {.shape = shape, .ndim = 2, .dtype = info->code};
    HurrayTensorDesc desc = {.layout = HURRAY_LAYOUT_DENSE, .ndim = 2, .shape = shape,
                             .parts = &part, .nparts = 1, .dtype = info->code};
    HurrayBufferList *list = NULL;
    HurrayBuffer *b = NULL;
    OK(hurray_buffer_list_create(1, &list, E));
    OK(hurray_buffer_alloc(bytes, 64, 0, &b, E));
    for (uint64_t k = 0; k < bytes; k++) ((uint8_t *)b->data)[k] = (uint8_t)(k * 37 + i);
    OK(hurray_buffer_list_append(list, b, HURRAY_ROLE_VALUES, NULL, E));
    HurrayTensorContext *want = NULL, *got = NULL;
    OK(hurray_tensor_context_create(&desc, list, 0, NULL, NULL, &want, E));
    OK(hurray_client_put(c, info->name, want, E));
    OK(hurray_client_get(c, info->name, NULL, &got, E));
    assert_int_equal(got->tensor->dtype, info->code);
    assert_same_record(got->tensor, want->tensor);
    assert_same_buffers(got, want);
    hurray_tensor_context_release(got);
    hurray_tensor_context_release(want);
  }
  hurray_client_destroy(c);
  finish(&r);
}

static void files_and_rows(void **state) {
  (void)state;
  /* a file of every layout, served from its mapping with its stored checksums and metadata */
  HurrayFileWriter *w = NULL;
  OK(hurray_file_writer_create(path_of("all.hurray"), NULL, &w, E));
  char name[32];
  for (size_t i = 0; i < SAMPLE_COUNT; i++) {
    Sample s = kSamples[i]();
    snprintf(name, sizeof name, "t%zu", i);
    static const char *const keys[] = {"unit"};
    const HurrayMetaValue unit = {.type = HURRAY_META_STRING, .count = 1, .as.string = "m"};
    const HurrayMetaValue meta = {.type = HURRAY_META_MAP, .count = 1, .as.items = &unit,
                                  .keys = keys};
    OK(hurray_file_writer_add(w, name, &s.desc, s.list, i == 0 ? &meta : NULL, E));
    sample_free(&s);
  }
  OK(hurray_file_writer_finish(w, E));
  hurray_file_writer_destroy(w);
  Running r;
  start(&r, NULL);
  OK(hurray_server_add_file(r.server, path_of("all.hurray"), E));
  HurrayError error = {0};
  assert_int_equal(hurray_server_add_file(r.server, path_of("all.hurray"), &error), HURRAY_EINVAL);
  assert_non_null(strstr(error.message, "tensor 't0' is already served"));
  go(&r);
  HurrayFileReader *reader = NULL;
  OK(hurray_file_reader_open(path_of("all.hurray"), 0, &reader, E));
  HurrayClient *c = NULL;
  OK(hurray_client_connect(r.address, NULL, &c, E));
  for (uint32_t i = 0; i < SAMPLE_COUNT; i++) {
    snprintf(name, sizeof name, "t%u", i);
    HurrayTensorContext *got = NULL, *want = NULL;
    OK(hurray_client_get(c, name, NULL, &got, E));
    OK(hurray_file_reader_get(reader, i, 0, &want, E));
    assert_same_record(got->tensor, want->tensor);
    assert_same_buffers(got, want);
    hurray_tensor_context_release(got);
    hurray_tensor_context_release(want);
  }
  /* rows of the dense 2x3 float32 sample: row 1 only, the same as the reader's rows */
  HurrayGetOptions o = {.row_start = 1, .row_stop = 2};
  HurrayTensorContext *got = NULL, *want = NULL;
  OK(hurray_client_get(c, "t0", &o, &got, E));
  OK(hurray_file_reader_get_rows(reader, 0, 1, 2, &want, E));
  assert_int_equal(got->tensor->shape[0], 1);
  assert_true(same_tensor(got->tensor, got->buffers, want->tensor, want->buffers));
  hurray_tensor_context_release(got);
  hurray_tensor_context_release(want);
  o.row_stop = 9;
  assert_int_equal(hurray_client_get(c, "t0", &o, &got, &error), HURRAY_EINVAL);
  assert_string_equal(error.message, "peer: rows [1, 9) are outside tensor 't0' (2 rows)");
  assert_int_equal(hurray_client_get(c, "nope", NULL, &got, &error), HURRAY_EINVAL);
  assert_string_equal(error.message, "peer: no tensor named 'nope'");
  /* a missing name of 80 "\u20ac" (240 bytes): the server's message outgrows its 256-byte error
   * and is cut -- on a character boundary, so the ERROR frame stays valid UTF-8, the answer is
   * the request's EINVAL and the connection goes on (issue 20, item 9) */
  char euros[3 * 80 + 1];
  for (int i = 0; i < 80; i++) memcpy(euros + 3 * i, "\xe2\x82\xac", 3);
  euros[3 * 80] = '\0';
  assert_int_equal(hurray_client_get(c, euros, NULL, &got, &error), HURRAY_EINVAL);
  assert_true(strncmp(error.message, "peer: no tensor named '\xe2\x82\xac", 26) == 0);
  assert_true(hurray__utf8_valid((const uint8_t *)error.message, strlen(error.message)));
  OK(hurray_client_get(c, "t0", NULL, &got, E));
  hurray_tensor_context_release(got);
  /* fetch: streamed into a file, every tensor of every layout with its metadata, the same */
  for (uint32_t i = 0; i < SAMPLE_COUNT; i++) {
    snprintf(name, sizeof name, "t%u", i);
    OK(hurray_client_fetch(c, name, NULL, path_of("fetched.hurray"), E));
    HurrayFileReader *f = NULL;
    OK(hurray_file_reader_open(path_of("fetched.hurray"), 0, &f, E));
    HurrayMetaValue *m = NULL;
    OK(hurray_file_reader_metadata(f, 0, &m, E));
    assert_int_equal(m->count, i == 0 ? 1 : 0);
    if (i == 0) assert_string_equal(m->as.items[0].as.string, "m");
    hurray_meta_destroy(m);
    OK(hurray_file_reader_verify(f, HURRAY_FILE_WHOLE, NULL, NULL, E));
    HurrayTensorContext *a = NULL, *b = NULL;
    OK(hurray_file_reader_get(f, 0, 0, &a, E));
    OK(hurray_file_reader_get(reader, i, 0, &b, E));
    assert_same_record(a->tensor, b->tensor);
    assert_same_buffers(a, b);
    hurray_tensor_context_release(a);
    hurray_tensor_context_release(b);
    hurray_file_reader_destroy(f);
  }
  OK(hurray_client_get(c, "t1", NULL, &got, E)); /* the connection went on after both */
  hurray_tensor_context_release(got);
  hurray_file_reader_destroy(reader);
  hurray_client_destroy(c);
  finish(&r);
}

/* ---- handshake ---------------------------------------------------------------------------- */

/* A connect nothing answers is HURRAY_ECONNECTION with its errno, which the Python binding
 * turns into a ConnectionRefusedError (ADR-069). */
static void refused_connect_keeps_its_errno(void **state) {
  (void)state;
  int s = socket(AF_INET, SOCK_STREAM, 0); /* bound, never listening: connects are refused */
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  assert_int_equal(bind(s, (struct sockaddr *)&a, len), 0);
  assert_int_equal(getsockname(s, (struct sockaddr *)&a, &len), 0);
  char address[64];
  snprintf(address, sizeof address, "127.0.0.1:%u", (unsigned)ntohs(a.sin_port));
  HurrayError error = {0};
  HurrayClient *c = NULL;
  assert_int_equal(hurray_client_connect(address, NULL, &c, &error), HURRAY_ECONNECTION);
  assert_null(c);
  assert_int_equal(error.system_errno, ECONNREFUSED);
  assert_non_null(strstr(error.message, "cannot connect to 127.0.0.1:"));
  close(s);
}

static void handshake_refusals(void **state) {
  (void)state;
  Running r;
  start(&r, NULL);
  go(&r);
  HurrayError error = {0};
  const uint8_t reserved[] = {0x00, 0x42};
  assert_int_equal(raw_hello(r.address, 1, reserved, NULL, 2, &error), WIRE_ERROR);
  assert_int_equal(error.code, HURRAY_EDEVICE);
  assert_string_equal(error.message,
                      "peer: device tag 0x42 is reserved (0x09..0xef): not in this protocol "
                      "version");
  const uint8_t invalid[] = {0xff};
  assert_int_equal(raw_hello(r.address, 1, invalid, NULL, 1, &error), WIRE_ERROR);
  assert_string_equal(error.message, "peer: device tag 0xff is invalid");
  const uint8_t priv[] = {0x00, 0xf3};
  const char *names[] = {NULL, "npu_x"};
  assert_int_equal(raw_hello(r.address, 1, priv, names, 2, &error), WIRE_ERROR);
  assert_int_equal(error.code, HURRAY_EDEVICE);
  assert_string_equal(error.message, "peer: private device tag 0xf3 ('npu_x') is not registered here");
  /* both peers registered 0xf3 as npu_x: the session is set up */
  OK(hurray_device_register_private(0xf3, "npu_x", E));
  assert_int_equal(raw_hello(r.address, 1, priv, names, 2, &error), WIRE_SERVER_HELLO);
  HurrayClient *c = NULL;
  HurrayClientOptions co = {.devices = priv, .ndevices = 2};
  OK(hurray_client_connect(r.address, &co, &c, E));
  hurray_client_destroy(c);
  const char *other[] = {NULL, "npu_y"};
  assert_int_equal(raw_hello(r.address, 1, priv, other, 2, &error), WIRE_ERROR);
  assert_string_equal(error.message, "peer: private device tag 0xf3 is 'npu_y' to the peer but "
                                     "'npu_x' here");
  OK(hurray_device_unregister_private(0xf3, E));
  /* the client refuses to offer what it does not know */
  co.devices = reserved;
  assert_int_equal(hurray_client_connect(r.address, &co, &c, &error), HURRAY_EDEVICE);
  assert_non_null(strstr(error.message, "0x42"));
  /* a protocol version from the future */
  const uint8_t cpu[] = {0};
  assert_int_equal(raw_hello(r.address, 2, cpu, NULL, 1, &error), WIRE_ERROR);
  assert_int_equal(error.code, HURRAY_EUNSUPPORTED);
  assert_string_equal(error.message,
                      "peer: protocol version 2.0 is not supported (this peer speaks 1.3)");
  /* something that is not a Hurray peer at all */
  int fd = raw_connect(r.address);
  const char http[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  assert_int_equal(send(fd, http, sizeof http - 1, MSG_NOSIGNAL), (ssize_t)sizeof http - 1);
  WireHeader h;
  uint8_t payload[512];
  assert_int_equal(raw_frame(fd, &h, payload, sizeof payload), WIRE_ERROR);
  assert_int_equal(hurray__wire_error_decode(payload, (size_t)h.length, &error), HURRAY_EPROTOCOL);
  assert_string_equal(error.message, "peer: not a Hurray wire frame (bad magic 47 45 54 20)");
  close(fd);
  finish(&r);
}

static HurrayDeviceQueue *opencl_queue(void);

static void preferred_device(void **state) {
  (void)state;
  Running r;
  start(&r, NULL);
  OK(hurray_server_add_tensor(r.server, "x", bytes_tensor(100, 1), E));
  go(&r);
  HurrayClient *c = NULL;
  OK(hurray_client_connect(r.address, NULL, &c, E));
  HurrayClientInfo info;
  OK(hurray_client_info(c, &info, E));
  assert_int_equal(info.ndevices, 1);
  assert_int_equal(info.devices[0], HURRAY_DEVICE_CPU);
  /* a device the client cannot receive on is refused before anything is sent */
  HurrayGetOptions o = {.preferred_device = HURRAY_DEVICE_ROCM};
  HurrayTensorContext *got = NULL;
  HurrayError error = {0};
  assert_int_equal(hurray_client_get(c, "x", &o, &got, &error), HURRAY_EUNSUPPORTED);
  assert_string_equal(error.message,
                      "hurray-core has no runtime backend for rocm memory (only opencl and cuda)");
  o.flags = HURRAY_GET_FALLBACK; /* ... or asked for on the CPU, as the caller accepts */
  OK(hurray_client_get(c, "x", &o, &got, E));
  assert_int_equal(got->buffers->buffers[0]->desc.device_tag, HURRAY_DEVICE_CPU);
  hurray_tensor_context_release(got);
  /* a device the client can receive on but the server does not serve the tensor on */
  HurrayDeviceQueue *q = opencl_queue();
  if (q != NULL) {
    o = (HurrayGetOptions){.preferred_device = HURRAY_DEVICE_OPENCL, .queue = q};
    assert_int_equal(hurray_client_get(c, "x", &o, &got, &error), HURRAY_EUNSUPPORTED);
    assert_string_equal(error.message, "peer: device opencl (0x08) is not served here; this "
                                       "server serves cpu (0x00)");
    o.flags = HURRAY_GET_FALLBACK;
    OK(hurray_client_get(c, "x", &o, &got, E));
    assert_int_equal(got->buffers->buffers[0]->desc.device_tag, HURRAY_DEVICE_CPU);
    hurray_tensor_context_release(got);
    o = (HurrayGetOptions){.preferred_device = HURRAY_DEVICE_CPU, .queue = q};
    assert_int_equal(hurray_client_get(c, "x", &o, &got, &error), HURRAY_EINVAL);
    assert_string_equal(error.message, "the queue is on opencl, not the preferred device cpu");
    hurray_device_queue_destroy(q);
  }
  hurray_client_destroy(c);
  finish(&r);
}

/* ---- a proxy that flips or cuts the server's bytes ---------------------------------------- */

typedef struct Proxy {
  int listen_fd;
  char target[128];
  char address[64];
  uint64_t flip_at; /* flip this byte of the first connection's server stream (0: none) */
  uint64_t cut_at;  /* close the first connection after this many server bytes (0: never) */
  int connections;  /* to serve, one after the other */
  pthread_t thread;
} Proxy;

static void *proxy_main(void *arg) {
  Proxy *p = arg;
  for (int k = 0; k < p->connections; k++) {
    int a = accept(p->listen_fd, NULL, NULL);
    if (a < 0) return NULL;
    int b = raw_connect(p->target);
    uint64_t down = 0;
    struct pollfd fds[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
    uint8_t buf[1 << 16];
    for (bool open = true; open;) {
      if (poll(fds, 2, 10000) <= 0) break;
      for (int i = 0; i < 2 && open; i++) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        ssize_t n = recv(fds[i].fd, buf, sizeof buf, 0);
        if (n <= 0) {
          open = false;
          break;
        }
        if (i == 1 && k == 0) { /* server to client, first connection */
          if (p->flip_at && down <= p->flip_at && p->flip_at < down + (uint64_t)n) {
            buf[p->flip_at - down] ^= 0x10;
          }
          if (p->cut_at && down + (uint64_t)n >= p->cut_at) {
            send(a, buf, (size_t)(p->cut_at - down), MSG_NOSIGNAL);
            open = false;
            break;
          }
          down += (uint64_t)n;
        }
        send(fds[1 - i].fd, buf, (size_t)n, MSG_NOSIGNAL);
      }
    }
    close(a);
    close(b);
  }
  return NULL;
}

/* A socket listening on a free loopback port, whose "127.0.0.1:PORT" goes to `address`. */
static int loopback_listen(char address[64]) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in in = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(fd, (struct sockaddr *)&in, sizeof in), 0);
  assert_int_equal(listen(fd, 8), 0);
  socklen_t len = sizeof in;
  getsockname(fd, (struct sockaddr *)&in, &len);
  snprintf(address, 64, "127.0.0.1:%u", ntohs(in.sin_port));
  return fd;
}

static void proxy_start(Proxy *p, const char *target) {
  p->listen_fd = loopback_listen(p->address);
  snprintf(p->target, sizeof p->target, "%s", target);
  assert_int_equal(pthread_create(&p->thread, NULL, proxy_main, p), 0);
}

static void proxy_stop(Proxy *p) {
  shutdown(p->listen_fd, SHUT_RDWR);
  pthread_join(p->thread, NULL);
  close(p->listen_fd);
}

/* A peer speaking protocol 1.0: answers a CLIENT_HELLO with a 1.0 SERVER_HELLO, then reads
 * until the client closes, counting the frames after the hello; with `trickle_ms` it answers
 * a LIST with an empty LIST_RESULT sent one byte every trickle_ms, for `connections`
 * connections one after the other (0: one). */
typedef struct OldServer {
  int listen_fd;
  char address[64];
  int frames;
  int trickle_ms;
  int connections;
  pthread_t thread;
} OldServer;

static void old_server_one(OldServer *o);

static void *old_server_main(void *arg) {
  OldServer *o = arg;
  for (int k = 0; k < (o->connections ? o->connections : 1); k++) old_server_one(o);
  return NULL;
}

static void old_server_one(OldServer *o) {
  int fd = accept(o->listen_fd, NULL, NULL);
  WireHeader h;
  static uint8_t buf[1 << 12];
  if (fd < 0 || raw_frame(fd, &h, buf, sizeof buf) != WIRE_CLIENT_HELLO) return;
  WireHello *hello = calloc(1, sizeof *hello);
  hello->version_major = 1;
  hello->max_frame = 1 << 16;
  const uint8_t cpu = 0;
  FileSink frame = {0};
  OK(hurray__wire_devices_fill(hello, &cpu, 1, E));
  OK(hurray__wire_hello_encode(WIRE_SERVER_HELLO, hello, &frame, E));
  raw_send(fd, &frame);
  hurray__sink_reset(&frame);
  free(hello);
  while (raw_frame(fd, &h, buf, sizeof buf) >= 0 && h.type != WIRE_GOODBYE) {
    o->frames++;
    if (o->trickle_ms == 0 || h.type != WIRE_LIST) continue;
    static const uint8_t empty[WIRE_LIST_FIXED];
    hurray__wire_frame(&frame, WIRE_LIST_RESULT, WIRE_FLAG_END, h.request_id, empty, sizeof empty);
    for (size_t i = 0; i < frame.len; i++) {
      if (send(fd, frame.data + i, 1, MSG_NOSIGNAL) != 1) break;
      usleep((useconds_t)o->trickle_ms * 1000);
    }
    hurray__sink_reset(&frame);
  }
  close(fd);
}

/* Listens on a free loopback port and serves on a thread of its own. */
static void old_server_start(OldServer *o) {
  o->listen_fd = loopback_listen(o->address);
  assert_int_equal(pthread_create(&o->thread, NULL, old_server_main, o), 0);
}

/* timeout_ms is the deadline of a whole call, however the server paces its bytes;
 * idle_timeout_ms bounds each wait only (ADR-078). */
static void timeout_is_a_deadline(void **state) {
  (void)state;
  OldServer old = {.trickle_ms = 25, .connections = 2};
  old_server_start(&old);
  HurrayRemoteTensor *items = NULL;
  uint32_t count = 0;
  HurrayError error = {0};
  HurrayClient *c = NULL;
  HurrayClientOptions deadline = {.timeout_ms = 300};
  OK(hurray_client_connect(old.address, &deadline, &c, E));
  int64_t t0 = hurray__wire_now_ms();
  assert_int_equal(hurray_client_list(c, &items, &count, &error), HURRAY_ETIMEOUT);
  int64_t took = hurray__wire_now_ms() - t0;
  assert_true(took >= 290 && took < 700); /* 32 bytes at 25 ms would take 800 */
  assert_string_equal(error.message, "the call took longer than its timeout of 300 ms");
  hurray_client_destroy(c);
  usleep(200 * 1000); /* the server, finding the first connection closed, accepts the next */
  HurrayClientOptions idle = {.idle_timeout_ms = 300}; /* each byte is progress: no deadline */
  OK(hurray_client_connect(old.address, &idle, &c, E));
  OK(hurray_client_list(c, &items, &count, E));
  assert_int_equal(count, 0);
  free(items);
  hurray_client_destroy(c);
  pthread_join(old.thread, NULL);
  close(old.listen_fd);
}

/* Byte ranges (spec §6.2, §6.4): only the range crosses the wire, in DATA frames that each
 * carry a check; across buffers, into memory and into a file; corrupted, cut and resumed; the
 * frames' check on the wire, and its absence on a 1.0 session; a 1.0 server refused. */
static void byte_ranges(void **state) {
  (void)state;
  Running r;
  HurrayServerOptions so = {.max_frame = 1 << 16}; /* many frames */
  start(&r, &so);
  HurrayTensorContext *want = bytes_tensor(3 << 20, 5);
  const uint8_t *x = want->buffers->buffers[0]->data;
  OK(hurray_server_add_tensor(r.server, "x", bytes_tensor(3 << 20, 5), E));
  Sample csr = sample_csr();
  OK(hurray_server_add_tensor(r.server, "csr", context_of(csr), E));
  go(&r);
  HurrayClient *c = NULL;
  OK(hurray_client_connect(r.address, NULL, &c, E));
  uint8_t *got = malloc(3 << 20);
  OK(hurray_client_read(c, "x", 1000, 2000000, got, NULL, E));
  assert_memory_equal(got, x + 1000, 2000000 - 1000);
  OK(hurray_client_read(c, "x", 5, 5, NULL, NULL, E)); /* empty */
  OK(hurray_client_read(c, "x", 0, 3 << 20, got, NULL, E));
  assert_memory_equal(got, x, 3 << 20);
  /* across buffers: the stream is the compact buffers, concatenated */
  HurrayTensorContext *whole = NULL;
  OK(hurray_client_get(c, "csr", NULL, &whole, E));
  uint8_t stream[4096];
  size_t total = 0;
  for (uint32_t i = 0; i < whole->buffers->count; i++) {
    const HurrayBuffer *b = whole->buffers->buffers[i];
    memcpy(stream + total, b->data, (size_t)b->desc.byte_size);
    total += (size_t)b->desc.byte_size;
  }
  assert_true(whole->buffers->count >= 3);
  hurray_tensor_context_release(whole);
  HurrayRemoteTensor *items = NULL;
  uint32_t count = 0;
  OK(hurray_client_list(c, &items, &count, E));
  assert_int_equal(items[1].data_bytes, total);
  free(items);
  for (size_t a = 0; a <= total; a += 7) {
    for (size_t b = a; b <= total; b += 13) {
      memset(got, 0xee, total);
      OK(hurray_client_read(c, "csr", a, b, b > a ? got : NULL, NULL, E));
      if (b > a) assert_memory_equal(got, stream + a, b - a);
    }
  }
  /* refusals */
  HurrayError error = {0};
  assert_int_equal(hurray_client_read(c, "x", 10, (3 << 20) + 1, got, NULL, &error),
                   HURRAY_EINVAL);
  assert_string_equal(error.message,
                      "peer: bytes [10, 3145729) are outside tensor 'x' (3145728 bytes)");
  assert_int_equal(hurray_client_read(c, "x", 10, 9, got, NULL, &error), HURRAY_EINVAL);
  assert_int_equal(hurray_client_read(c, "x", 0, 9, NULL, NULL, &error), HURRAY_EINVAL);
  HurrayGetOptions rows = {.row_start = 0, .row_stop = 1};
  assert_int_equal(hurray_client_read(c, "x", 0, 9, got, &rows, &error), HURRAY_EINVAL);
  HurrayGetOptions cuda = {.preferred_device = HURRAY_DEVICE_CUDA};
  assert_int_equal(hurray_client_read(c, "x", 0, 9, got, &cuda, &error), HURRAY_EINVAL);
  assert_int_equal(hurray_client_read(c, "nope", 0, 9, got, NULL, &error), HURRAY_EINVAL);
  assert_string_equal(error.message, "peer: no tensor named 'nope'");
  /* into a file: exactly the range; durable or not, the same bytes */
  HurrayGetOptions no_sync = {.flags = HURRAY_GET_NOT_DURABLE};
  for (int k = 0; k < 2; k++) {
    OK(hurray_client_read_file(c, "x", 10, 3 << 20, path_of("range.bin"), k ? &no_sync : NULL,
                               E));
    size_t len = 0;
    uint8_t *data = file_contents(path_of("range.bin"), &len);
    assert_int_equal(len, (3 << 20) - 10);
    assert_memory_equal(data, x + 10, len);
    free(data);
  }
  assert_int_equal(hurray_client_read_file(c, "x", 10, 9, path_of("bad.bin"), NULL, &error),
                   HURRAY_EINVAL);
  assert_int_equal(hurray_client_get(c, "x", &no_sync, &whole, &error), HURRAY_EINVAL);
  hurray_client_destroy(c);
  /* a flipped byte fails the frame that carried it; nothing appears at the file's path */
  for (int k = 0; k < 2; k++) {
    Proxy p = {.flip_at = 200000, .connections = 1};
    proxy_start(&p, r.address);
    OK(hurray_client_connect(p.address, NULL, &c, E));
    int status = k ? hurray_client_read_file(c, "x", 100, 1 << 20, path_of("flipped.bin"), NULL,
                                             &error)
                   : hurray_client_read(c, "x", 100, 1 << 20, got, NULL, &error);
    assert_int_equal(status, HURRAY_ECHECKSUM);
    assert_non_null(strstr(error.message, "tensor 'x' bytes ["));
    assert_non_null(strstr(error.message, "checksum mismatch (corrupted in transit)"));
    assert_int_equal(access(path_of("flipped.bin"), F_OK), -1);
    hurray_client_destroy(c);
    proxy_stop(&p);
  }
  /* a cut connection resumes after the last checked frame, into memory and into a file */
  for (int k = 0; k < 2; k++) {
    Proxy p = {.cut_at = 1500000, .connections = 2};
    proxy_start(&p, r.address);
    OK(hurray_client_connect(p.address, NULL, &c, E));
    HurrayGetOptions o = {.retries = 1};
    memset(got, 0, 3 << 20);
    if (k == 0) {
      OK(hurray_client_read(c, "x", 7, 3 << 20, got, &o, E));
      assert_memory_equal(got, x + 7, (3 << 20) - 7);
    } else {
      OK(hurray_client_read_file(c, "x", 7, 3 << 20, path_of("resumed.bin"), &o, E));
      size_t len = 0;
      uint8_t *data = file_contents(path_of("resumed.bin"), &len);
      assert_int_equal(len, (3 << 20) - 7);
      assert_memory_equal(data, x + 7, len);
      free(data);
    }
    hurray_client_destroy(c);
    proxy_stop(&p);
  }
  /* on the wire: in 1.1 each DATA frame of a range carries the low 32 bits of its XXH3-64; a
     1.0 session leaves the field zero. From 1.2 on the TENSOR_HEADER ends with its
     header_check; a 1.0 or 1.1 peer gets the header it knows. Last, a client of a future minor
     (answered 1.2) gets the golden frame of spec §9.9 */
  HurrayTensorContext *golden = sample_golden_pair();
  OK(hurray_server_add_tensor(r.server, "g", golden, E));
  for (uint16_t minor = 0; minor < 4; minor++) {
    WireHello *hello = calloc(1, sizeof *hello);
    hello->version_major = 1;
    hello->version_minor = minor;
    hello->max_frame = 1 << 16;
    const uint8_t cpu = 0;
    FileSink frame = {0};
    OK(hurray__wire_devices_fill(hello, &cpu, 1, E));
    OK(hurray__wire_hello_encode(WIRE_CLIENT_HELLO, hello, &frame, E));
    free(hello);
    WireRequest req = {.name_len = 1, .name = "x", .range_kind = WIRE_RANGE_BYTES, .start = 3,
                       .stop = 3 + 100000};
    if (minor == 3) req = (WireRequest){.name_len = 1, .name = "g", .range_kind = WIRE_RANGE_BYTES,
                                        .start = 1, .stop = 5};
    request_frame(&frame, &req);
    int fd = raw_connect(r.address);
    raw_send(fd, &frame);
    hurray__sink_reset(&frame);
    WireHeader h;
    static uint8_t buf[(1 << 16) + 64];
    assert_int_equal(raw_frame(fd, &h, buf, sizeof buf), WIRE_SERVER_HELLO);
    uint16_t session = minor < WIRE_VERSION_MINOR ? minor : WIRE_VERSION_MINOR;
    assert_int_equal(hurray__load_le16(buf + 2), session); /* the smaller minor */
    assert_int_equal(raw_frame(fd, &h, buf, sizeof buf), WIRE_TENSOR_HEADER);
    size_t body = 0;
    OK(hurray__wire_tensor_check(&h, buf, (size_t)h.length, session, &body, E));
    assert_int_equal(h.length - body, session >= 2 ? WIRE_HEADER_CHECK_SIZE : 0);
    FileArena arena = {0};
    WireTensor t;
    OK(hurray__wire_tensor_decode(buf, body, &arena, &t, E));
    hurray__arena_free(&arena);
    if (minor == 3) { /* spec §9.9, byte for byte */
      static const uint8_t want_frame[] = {
          0x89, 0x48, 0x52, 0x57, 0x22, 0x01, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00,
          0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
          0x00, 0x00, 0x00, 0x00, 0x89, 0xf5, 0x71, 0x15, 0x01, 0x00, 0x00, 0x00,
          0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x3f, 0x00};
      uint8_t got_frame[sizeof want_frame];
      assert_int_equal(recv(fd, got_frame, sizeof got_frame, MSG_WAITALL), sizeof got_frame);
      got_frame[8] = 7; /* the raw peer's request id is 1; the spec's example is 7 */
      assert_memory_equal(got_frame, want_frame, sizeof want_frame);
      close(fd);
      continue;
    }
    uint64_t at = 3;
    for (int frames = 0; at < 3 + 100000; frames++) {
      assert_int_equal(raw_frame(fd, &h, buf, sizeof buf), WIRE_DATA);
      uint64_t n = h.length - WIRE_DATA_FIXED;
      assert_int_equal(hurray__load_le64(buf + 8), at);
      assert_int_equal(hurray__load_le32(buf + 4),
                       minor ? (uint32_t)hurray__xxh3(buf + WIRE_DATA_FIXED, (size_t)n) : 0);
      assert_memory_equal(buf + WIRE_DATA_FIXED, x + at, n);
      at += n;
      assert_int_equal(h.flags, at == 3 + 100000 ? WIRE_FLAG_END : 0);
      assert_true(frames < 3);
    }
    close(fd);
  }
  /* a server speaking 1.0 cannot check a range: refused before anything is sent */
  OldServer old = {0};
  old_server_start(&old);
  OK(hurray_client_connect(old.address, NULL, &c, E));
  assert_int_equal(hurray_client_read(c, "x", 0, 9, got, NULL, &error), HURRAY_EUNSUPPORTED);
  assert_string_equal(error.message, "the server speaks wire protocol 1.0, whose byte ranges "
                                     "carry no checksum: reading one needs 1.1");
  hurray_client_destroy(c);
  pthread_join(old.thread, NULL);
  close(old.listen_fd);
  assert_int_equal(old.frames, 0);
  free(got);
  hurray_tensor_context_release(want);
  finish(&r);
}

/* A minor-`minor` CLIENT_HELLO (CPU only) then METADATA request 1 for `name` ("": the server's),
 * sent raw; the SERVER_HELLO read. */
static int raw_metadata(const char *address, uint16_t minor, const char *name) {
  WireHello *hello = calloc(1, sizeof *hello);
  hello->version_major = 1;
  hello->version_minor = minor;
  hello->max_frame = 1 << 16;
  const uint8_t cpu = 0;
  FileSink frame = {0}, payload = {0};
  OK(hurray__wire_devices_fill(hello, &cpu, 1, E));
  OK(hurray__wire_hello_encode(WIRE_CLIENT_HELLO, hello, &frame, E));
  free(hello);
  hurray__wire_metadata_request_encode(name, strlen(name), &payload);
  hurray__wire_frame(&frame, WIRE_METADATA, 0, 1, payload.data, payload.len);
  int fd = raw_connect(address);
  raw_send(fd, &frame);
  hurray__sink_reset(&frame);
  hurray__sink_reset(&payload);
  WireHeader h;
  static uint8_t buf[1 << 12];
  assert_int_equal(raw_frame(fd, &h, buf, sizeof buf), WIRE_SERVER_HELLO);
  assert_int_equal(hurray__load_le16(buf + 2), minor < WIRE_VERSION_MINOR ? minor : WIRE_VERSION_MINOR);
  return fd;
}

/* Protocol 1.3 (ADR-098, spec §6.8): the server's metadata (its first file's) and each
 * tensor's, by METADATA request, checked against what the file holds; a block larger than one
 * frame arrives in several; older peers on either side keep working. */
static void metadata_over_the_wire(void **state) {
  (void)state;
  /* file metadata {"model": "tiny", "blob": 200000 bytes of text}: more than three frames */
  static const char *const file_keys[] = {"blob", "model"};
  char *blob = malloc(200001);
  memset(blob, 'x', 200000);
  blob[200000] = '\0';
  const HurrayMetaValue file_items[] = {
      {.type = HURRAY_META_STRING, .count = 200000, .as.string = blob},
      {.type = HURRAY_META_STRING, .count = 4, .as.string = "tiny"}};
  const HurrayMetaValue file_meta = {.type = HURRAY_META_MAP, .count = 2, .as.items = file_items,
                                     .keys = file_keys};
  static const char *const keys[] = {"unit"};
  const HurrayMetaValue unit = {.type = HURRAY_META_STRING, .count = 1, .as.string = "m"};
  const HurrayMetaValue meta = {.type = HURRAY_META_MAP, .count = 1, .as.items = &unit,
                                .keys = keys};
  HurrayFileWriter *w = NULL;
  OK(hurray_file_writer_create(path_of("meta.hurray"), NULL, &w, E));
  OK(hurray_file_writer_set_metadata(w, &file_meta, E));
  for (int i = 0; i < 2; i++) {
    Sample s = kSamples[0]();
    OK(hurray_file_writer_add(w, i ? "plain" : "w", &s.desc, s.list, i ? NULL : &meta, E));
    sample_free(&s);
  }
  OK(hurray_file_writer_finish(w, E));
  hurray_file_writer_destroy(w);
  Running r;
  start(&r, NULL);
  OK(hurray_server_add_file(r.server, path_of("meta.hurray"), E));
  OK(hurray_server_add_tensor(r.server, "mem", bytes_tensor(64, 1), E));
  go(&r);
  HurrayClient *c = NULL;
  OK(hurray_client_connect(r.address, NULL, &c, E));
  HurrayClientInfo info;
  OK(hurray_client_info(c, &info, E));
  assert_int_equal(info.version_minor, 3);
  HurrayMetaValue *got = NULL;
  OK(hurray_client_metadata(c, NULL, &got, E));
  assert_int_equal(got->type, HURRAY_META_MAP);
  assert_int_equal(got->count, 2);
  assert_string_equal(got->keys[0], "blob");
  assert_int_equal(got->as.items[0].count, 200000);
  assert_memory_equal(got->as.items[0].as.string, blob, 200000);
  assert_string_equal(got->keys[1], "model");
  assert_string_equal(got->as.items[1].as.string, "tiny");
  hurray_meta_destroy(got);
  OK(hurray_client_metadata(c, "w", &got, E));
  assert_int_equal(got->count, 1);
  assert_string_equal(got->keys[0], "unit");
  assert_string_equal(got->as.items[0].as.string, "m");
  hurray_meta_destroy(got);
  for (int i = 0; i < 2; i++) { /* none: an empty map, from a file and from memory */
    OK(hurray_client_metadata(c, i ? "mem" : "plain", &got, E));
    assert_int_equal(got->type, HURRAY_META_MAP);
    assert_int_equal(got->count, 0);
    hurray_meta_destroy(got);
  }
  HurrayError error = {0};
  assert_int_equal(hurray_client_metadata(c, "nope", &got, &error), HURRAY_EINVAL);
  assert_string_equal(error.message, "peer: no tensor named 'nope'");
  assert_null(got);
  assert_int_equal(hurray_client_metadata(c, "a\xff", &got, &error), HURRAY_EINVAL);
  OK(hurray_client_metadata(c, "w", &got, E)); /* the connection went on */
  hurray_meta_destroy(got);
  hurray_client_destroy(c);
  /* on the wire: the server's block in frames of at most 64 KiB, the last with END, each
     carrying the block's length; the bytes are the file's block exactly */
  HurrayFileReader *reader = NULL;
  OK(hurray_file_reader_open(path_of("meta.hurray"), 0, &reader, E));
  HurrayMetaValue *stored = NULL;
  OK(hurray_file_reader_metadata(reader, HURRAY_FILE_WHOLE, &stored, E));
  FileSink block = {0}, received = {0};
  uint16_t fminor = 0;
  OK(hurray__meta_encode(stored, &block, &fminor, E));
  hurray_meta_destroy(stored);
  hurray_file_reader_destroy(reader);
  int fd = raw_metadata(r.address, 3, "");
  static uint8_t buf[(1 << 16) + 64];
  WireHeader h;
  int frames = 0;
  do {
    assert_int_equal(raw_frame(fd, &h, buf, sizeof buf), WIRE_METADATA_RESULT);
    assert_int_equal(h.request_id, 1);
    assert_true(h.length <= WIRE_CONTROL_MAX);
    assert_int_equal(hurray__load_le32(buf), block.len);
    assert_int_equal(hurray__load_le64(buf + 8), hurray__xxh3(block.data, block.len));
    hurray__sink_bytes(&received, buf + WIRE_METADATA_RESULT_FIXED,
                       (size_t)h.length - WIRE_METADATA_RESULT_FIXED);
    frames++;
  } while (!(h.flags & WIRE_FLAG_END));
  assert_int_equal(frames, 4);
  assert_int_equal(received.len, block.len);
  assert_memory_equal(received.data, block.data, block.len);
  close(fd);
  hurray__sink_reset(&block);
  hurray__sink_reset(&received);
  /* an older client (1.2, 1.0): METADATA is not in its session -- refused as a 1.2 server
     refuses a type it does not know, ending the connection; everything else as before */
  for (uint16_t minor = 0; minor < 3; minor += 2) {
    fd = raw_metadata(r.address, minor, "w");
    assert_int_equal(raw_frame(fd, &h, buf, sizeof buf), WIRE_ERROR);
    assert_int_equal(h.request_id, 0);
    assert_int_equal(hurray__load_le32(buf), HURRAY_EPROTOCOL);
    assert_non_null(strstr((const char *)buf + WIRE_ERROR_FIXED,
                           minor ? "METADATA needs protocol 1.3; this session speaks 1.2"
                                 : "METADATA needs protocol 1.3; this session speaks 1.0"));
    close(fd);
  }
  finish(&r);
  /* a new client against an older server (1.0): nothing sent, EUNSUPPORTED; the rest works */
  OldServer old = {0};
  old_server_start(&old);
  OK(hurray_client_connect(old.address, NULL, &c, E));
  assert_int_equal(hurray_client_metadata(c, "w", &got, &error), HURRAY_EUNSUPPORTED);
  assert_string_equal(error.message, "the server speaks wire protocol 1.0, which carries no "
                                     "metadata requests: they need 1.3");
  assert_int_equal(hurray_client_metadata(c, NULL, &got, &error), HURRAY_EUNSUPPORTED);
  hurray_client_destroy(c);
  pthread_join(old.thread, NULL);
  close(old.listen_fd);
  assert_int_equal(old.frames, 0);
  free(blob);
}

static void flipped_byte_detected(void **state) {
  (void)state;
  Running r;
  start(&r, NULL);
  OK(hurray_server_add_tensor(r.server, "x", bytes_tensor(1 << 20, 3), E));
  go(&r);
  Proxy p = {.flip_at = 200000, .connections = 1};
  proxy_start(&p, r.address);
  HurrayClient *c = NULL;
  OK(hurray_client_connect(p.address, NULL, &c, E));
  HurrayTensorContext *got = NULL;
  HurrayError error = {0};
  assert_int_equal(hurray_client_get(c, "x", NULL, &got, &error), HURRAY_ECHECKSUM);
  assert_null(got);
  assert_string_equal(error.message, "tensor 'x' buffer 0: checksum mismatch (corrupted in transit)");
  hurray_client_destroy(c);
  proxy_stop(&p);
  Proxy q = {.flip_at = 900000, .connections = 1};
  proxy_start(&q, r.address);
  OK(hurray_client_connect(q.address, NULL, &c, E));
  assert_int_equal(hurray_client_fetch(c, "x", NULL, path_of("flipped.hurray"), &error),
                   HURRAY_ECHECKSUM);
  assert_int_equal(access(path_of("flipped.hurray"), F_OK), -1); /* nothing delivered */
  hurray_client_destroy(c);
  proxy_stop(&q);
  /* a buffer of 8 MiB and more is hashed on a helper thread behind the receive: the same */
  OK(hurray_server_add_tensor(r.server, "big", bytes_tensor(12 << 20, 4), E));
  Proxy b = {.flip_at = 10000000, .connections = 1};
  proxy_start(&b, r.address);
  OK(hurray_client_connect(b.address, NULL, &c, E));
  assert_int_equal(hurray_client_get(c, "big", NULL, &got, &error), HURRAY_ECHECKSUM);
  assert_null(got);
  assert_string_equal(error.message,
                      "tensor 'big' buffer 0: checksum mismatch (corrupted in transit)");
  hurray_client_destroy(c);
  proxy_stop(&b);
  /* 1.2: a byte of the TENSOR_HEADER changed in transit is refused by its header_check (spec
   * §6.3.1) -- here the record's name, "g" made "w" (0x67 ^ 0x10), which every other check
   * passes: the 82 bytes of the SERVER_HELLO, then the name at byte 0x60 of spec §9.5's frame */
  OK(hurray_server_add_tensor(r.server, "g", sample_golden_pair(), E));
  Proxy n = {.flip_at = 82 + 0x60, .connections = 1};
  proxy_start(&n, r.address);
  OK(hurray_client_connect(n.address, NULL, &c, E));
  assert_int_equal(hurray_client_get(c, "g", NULL, &got, &error), HURRAY_ECHECKSUM);
  assert_null(got);
  assert_non_null(strstr(error.message, "TENSOR_HEADER header checksum mismatch (header_check 0x"));
  assert_non_null(strstr(error.message, "): corrupted in transit"));
  assert_int_equal(hurray_client_list(c, &(HurrayRemoteTensor *){NULL}, &(uint32_t){0}, &error),
                   HURRAY_ECONNECTION); /* the connection is closed, not trusted further */
  hurray_client_destroy(c);
  proxy_stop(&n);
  /* ... and a PUT: the server answers ERROR (id 0) HURRAY_ECHECKSUM, closes, keeps nothing */
  WireServed up;
  HurrayTensorContext *pair = sample_golden_pair();
  OK(hurray__wire_served_init(&up, "up", pair, NULL, NULL, 0, E));
  WireTensorHeader th = {HURRAY_DEVICE_CPU, up.nbuffers, up.total_bytes, 0, up.buffers,
                         up.record.data, (uint32_t)up.record.len};
  FileSink payload = {0}, frame = {0};
  OK(hurray__wire_tensor_encode(&th, &payload, E));
  cpu_hello(&frame, 1 << 16);
  ((uint8_t *)frame.data)[WIRE_HEADER_SIZE + 2] = WIRE_VERSION_MINOR;
  size_t put_at = frame.len;
  hurray__wire_tensor_frame(&frame, WIRE_PUT, 0, 1, payload.data, payload.len, WIRE_VERSION_MINOR);
  frame.data[put_at + WIRE_HEADER_SIZE + 32 + 32 + 8] ^= 0x10; /* the record's name */
  int fd = raw_connect(r.address);
  raw_send(fd, &frame);
  WireHeader h;
  static uint8_t buf[4096];
  assert_int_equal(raw_frame(fd, &h, buf, sizeof buf), WIRE_SERVER_HELLO);
  assert_int_equal(hurray__load_le16(buf + 2), WIRE_VERSION_MINOR);
  assert_int_equal(raw_frame(fd, &h, buf, sizeof buf), WIRE_ERROR);
  assert_int_equal(h.request_id, 0);
  assert_int_equal(hurray__wire_error_decode(buf, (size_t)h.length, &error), HURRAY_ECHECKSUM);
  assert_non_null(strstr(error.message, "peer: PUT header checksum mismatch"));
  assert_int_equal(recv(fd, buf, 1, 0), 0);
  close(fd);
  HurrayRemoteTensor *items = NULL;
  uint32_t count = 0;
  OK(hurray_client_connect(r.address, NULL, &c, E));
  OK(hurray_client_list(c, &items, &count, E));
  for (uint32_t i = 0; i < count; i++) assert_string_not_equal(items[i].name, "up");
  free(items);
  hurray_client_destroy(c);
  hurray__sink_reset(&payload);
  hurray__sink_reset(&frame);
  hurray__wire_served_reset(&up);
  hurray_tensor_context_release(pair);
  finish(&r);
}

static void interrupted_transfer_resumes(void **state) {
  (void)state;
  Running r;
  start(&r, NULL);
  HurrayTensorContext *want = bytes_tensor(3 << 20, 5);
  OK(hurray_server_add_tensor(r.server, "x", bytes_tensor(3 << 20, 5), E));
  go(&r);
  /* on the wire: a request with a resume offset gets the stream from there */
  WireRequest req = {.name_len = 1, .name = "x", .resume_offset = (3 << 20) - 10};
  FileSink frame = {0};
  cpu_hello(&frame, 1 << 20);
  request_frame(&frame, &req);
  int fd = raw_connect(r.address);
  raw_send(fd, &frame);
  WireHeader h;
  static uint8_t buf[1 << 12];
  assert_int_equal(raw_frame(fd, &h, buf, sizeof buf), WIRE_SERVER_HELLO);
  assert_int_equal(raw_frame(fd, &h, buf, sizeof buf), WIRE_TENSOR_HEADER);
  assert_int_equal(hurray__load_le64(buf + 16), (3 << 20) - 10);
  assert_int_equal(raw_frame(fd, &h, buf, sizeof buf), WIRE_DATA);
  assert_int_equal(h.length, WIRE_DATA_FIXED + 10);
  assert_int_equal(h.flags, WIRE_FLAG_END);
  assert_int_equal(hurray__load_le64(buf + 8), (3 << 20) - 10);
  assert_memory_equal(buf + WIRE_DATA_FIXED,
                      (uint8_t *)want->buffers->buffers[0]->data + (3 << 20) - 10, 10);
  close(fd);
  hurray__sink_reset(&frame);
  /* through the client: the connection is cut mid-stream; it reconnects and resumes */
  Proxy p = {.cut_at = 1500000, .connections = 2};
  proxy_start(&p, r.address);
  HurrayClient *c = NULL;
  OK(hurray_client_connect(p.address, NULL, &c, E));
  HurrayTensorContext *got = NULL;
  HurrayError error = {0};
  HurrayGetOptions o = {.retries = 0};
  assert_int_equal(hurray_client_get(c, "x", &o, &got, &error), HURRAY_ECONNECTION);
  assert_null(got);
  hurray_client_destroy(c);
  proxy_stop(&p);
  Proxy q = {.cut_at = 1500000, .connections = 2};
  proxy_start(&q, r.address);
  OK(hurray_client_connect(q.address, NULL, &c, E));
  o.retries = 1;
  OK(hurray_client_get(c, "x", &o, &got, E));
  assert_same_buffers(got, want);
  hurray_tensor_context_release(got);
  hurray_client_destroy(c);
  proxy_stop(&q);
  /* fetch resumes the same way, into its file */
  Proxy f = {.cut_at = 1500000, .connections = 2};
  proxy_start(&f, r.address);
  OK(hurray_client_connect(f.address, NULL, &c, E));
  OK(hurray_client_fetch(c, "x", &o, path_of("resumed.hurray"), E));
  assert_file_holds(path_of("resumed.hurray"), want);
  hurray_client_destroy(c);
  proxy_stop(&f);
  hurray_tensor_context_release(want);
  /* a buffer hashed on a helper thread (8 MiB and more) resumes from what it had hashed */
  want = bytes_tensor(12 << 20, 6);
  OK(hurray_server_add_tensor(r.server, "big", bytes_tensor(12 << 20, 6), E));
  Proxy b = {.cut_at = 10000000, .connections = 2};
  proxy_start(&b, r.address);
  OK(hurray_client_connect(b.address, NULL, &c, E));
  OK(hurray_client_get(c, "big", &o, &got, E));
  assert_same_buffers(got, want);
  hurray_tensor_context_release(got);
  hurray_client_destroy(c);
  proxy_stop(&b);
  hurray_tensor_context_release(want);
  finish(&r);
}

/* ---- faults and load ---------------------------------------------------------------------- */

static int64_t now_ms(void) {
  return hurray__wire_now_ms();
}

/* The server's connection count, once it has seen the closes of the last second. */
static uint64_t connections_after_closes(HurrayServer *server) {
  HurrayServerStats stats;
  OK(hurray_server_stats(server, &stats, E));
  for (int i = 0; i < 100 && stats.connections != 0; i++) {
    usleep(10 * 1000);
    OK(hurray_server_stats(server, &stats, E));
  }
  return stats.connections;
}

/* A slowloris past the handshake: a frame header, one byte every 150 ms (never all of it). */
static void *trickle(void *arg) {
  int fd = *(int *)arg;
  uint8_t head[WIRE_HEADER_SIZE];
  hurray__wire_header_encode(&(WireHeader){WIRE_LIST, 0, 1, 0}, head);
  for (int i = 0; i < WIRE_HEADER_SIZE - 1; i++) {
    if (send(fd, head + i, 1, MSG_NOSIGNAL) != 1) break;
    usleep(150 * 1000);
  }
  return NULL;
}

static void faults_do_not_stall_others(void **state) {
  (void)state;
  HurrayServerOptions so = {.handshake_timeout_ms = 400, .idle_timeout_ms = 800,
                            .max_frame = 1 << 16};
  Running r;
  start(&r, &so);
  OK(hurray_server_add_tensor(r.server, "big", bytes_tensor(64 << 20, 9), E));
  OK(hurray_server_add_tensor(r.server, "small", bytes_tensor(1000, 2), E));
  go(&r);
  /* slowloris: three bytes of a frame header, then nothing */
  int slow = raw_connect(r.address);
  assert_int_equal(send(slow, "\x89HR", 3, MSG_NOSIGNAL), 3);
  /* an oversized frame after a good hello */
  HurrayClient *c = NULL;
  OK(hurray_client_connect(r.address, NULL, &c, E));
  int big = raw_connect(r.address);
  FileSink frame = {0};
  cpu_hello(&frame, 1 << 16);
  uint8_t head[WIRE_HEADER_SIZE];
  hurray__wire_header_encode(&(WireHeader){WIRE_LIST, 0, 1, (uint64_t)1 << 40}, head);
  hurray__sink_bytes(&frame, head, sizeof head);
  raw_send(big, &frame);
  /* a client that asks for 64 MiB and never reads */
  int stuck = raw_connect(r.address);
  frame.len = 0;
  cpu_hello(&frame, 1 << 16);
  request_frame(&frame, &(WireRequest){.name_len = 3, .name = "big"});
  raw_send(stuck, &frame);
  /* a slowloris that said hello, then trickles a frame */
  int dribble = raw_connect(r.address);
  frame.len = 0;
  cpu_hello(&frame, 1 << 16);
  raw_send(dribble, &frame);
  WireHeader h;
  uint8_t buf[1024];
  assert_int_equal(raw_frame(dribble, &h, buf, sizeof buf), WIRE_SERVER_HELLO);
  pthread_t trickler;
  assert_int_equal(pthread_create(&trickler, NULL, trickle, &dribble), 0);
  hurray__sink_reset(&frame);
  /* meanwhile a well-behaved client is served at once, again and again */
  int64_t t0 = now_ms();
  for (int i = 0; i < 50; i++) {
    HurrayTensorContext *got = NULL;
    OK(hurray_client_get(c, "small", NULL, &got, E));
    hurray_tensor_context_release(got);
  }
  assert_true(now_ms() - t0 < 2000);
  /* the oversized frame got an ERROR naming the limit, then the connection closed */
  HurrayError error = {0};
  assert_int_equal(raw_frame(big, &h, buf, sizeof buf), WIRE_SERVER_HELLO);
  assert_int_equal(raw_frame(big, &h, buf, sizeof buf), WIRE_ERROR);
  assert_int_equal(hurray__wire_error_decode(buf, (size_t)h.length, &error), HURRAY_ELIMIT);
  assert_string_equal(error.message,
                      "peer: LIST frame of 1099511627776 bytes exceeds the limit of 65536");
  assert_int_equal(recv(big, buf, 1, 0), 0);
  close(big);
  /* the slowloris is timed out with an ERROR */
  assert_int_equal(raw_frame(slow, &h, buf, sizeof buf), WIRE_ERROR);
  assert_int_equal(hurray__wire_error_decode(buf, (size_t)h.length, &error), HURRAY_ETIMEOUT);
  assert_string_equal(error.message, "peer: handshake not completed within 400 ms");
  close(slow);
  /* the trickled frame is timed out too */
  assert_int_equal(raw_frame(dribble, &h, buf, sizeof buf), WIRE_ERROR);
  assert_int_equal(hurray__wire_error_decode(buf, (size_t)h.length, &error), HURRAY_ETIMEOUT);
  assert_string_equal(error.message, "peer: a frame took longer than 800 ms");
  pthread_join(trickler, NULL);
  close(dribble);
  /* the reader that stopped is dropped after the idle timeout (as is the good client, idle
     now); the server never held more than a frame or two for any of them */
  usleep(1200 * 1000);
  HurrayServerStats stats;
  OK(hurray_server_stats(r.server, &stats, E));
  assert_int_equal(stats.connections, 0);
  assert_true(stats.peak_buffered_bytes < (1u << 20));
  close(stuck);
  hurray_client_destroy(c);
  finish(&r);
}

static void thousand_clients(void **state) {
  (void)state;
  struct rlimit lim;
  getrlimit(RLIMIT_NOFILE, &lim);
  if (lim.rlim_cur < 2200 && lim.rlim_max >= 2200) {
    lim.rlim_cur = 2200;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
  getrlimit(RLIMIT_NOFILE, &lim);
  assert_true(lim.rlim_cur >= 2100); /* both ends of 1,000 connections in this process */
  Running r;
  start(&r, NULL);
  HurrayTensorContext *want = bytes_tensor(4096, 4);
  OK(hurray_server_add_tensor(r.server, "x", bytes_tensor(4096, 4), E));
  go(&r);
  enum { N = 1000 };
  /* 1,000 connections each with its hello and a request in flight before any answer is read:
     the server interleaves all of them on its one loop */
  FileSink frame = {0};
  cpu_hello(&frame, 1 << 16);
  request_frame(&frame, &(WireRequest){.name_len = 1, .name = "x"});
  int *fds = calloc(N, sizeof *fds);
  for (int i = 0; i < N; i++) {
    fds[i] = raw_connect(r.address);
    raw_send(fds[i], &frame);
  }
  hurray__sink_reset(&frame);
  const uint8_t *expected = want->buffers->buffers[0]->data;
  uint8_t *buf = malloc(8192);
  for (int i = 0; i < N; i++) {
    WireHeader h;
    assert_int_equal(raw_frame(fds[i], &h, buf, 8192), WIRE_SERVER_HELLO);
    assert_int_equal(raw_frame(fds[i], &h, buf, 8192), WIRE_TENSOR_HEADER);
    assert_int_equal(raw_frame(fds[i], &h, buf, 8192), WIRE_DATA);
    assert_int_equal(h.flags, WIRE_FLAG_END);
    assert_int_equal(h.length, WIRE_DATA_FIXED + 4096);
    assert_memory_equal(buf + WIRE_DATA_FIXED, expected, 4096);
  }
  HurrayServerStats stats;
  OK(hurray_server_stats(r.server, &stats, E));
  assert_int_equal(stats.connections, N);
  assert_true(stats.peak_buffered_bytes < (uint64_t)N * 4096); /* a few KiB per connection */
  for (int i = 0; i < N; i++) close(fds[i]);
  free(fds);
  free(buf);
  assert_int_equal(connections_after_closes(r.server), 0);
  /* and 1,000 clients of the library, connected at once */
  HurrayClient **clients = calloc(N, sizeof *clients);
  for (int i = 0; i < N; i++) OK(hurray_client_connect(r.address, NULL, &clients[i], E));
  OK(hurray_server_stats(r.server, &stats, E));
  assert_int_equal(stats.connections, N);
  for (int i = 0; i < N; i++) {
    HurrayTensorContext *got = NULL;
    OK(hurray_client_get(clients[i], "x", NULL, &got, E));
    assert_same_buffers(got, want);
    hurray_tensor_context_release(got);
  }
  OK(hurray_server_stats(r.server, &stats, E));
  assert_true(stats.peak_buffered_bytes < (uint64_t)N * 4096); /* a few KiB per connection */
  for (int i = 0; i < N; i++) hurray_client_destroy(clients[i]);
  free(clients);
  hurray_tensor_context_release(want);
  /* over the limit: refused with an ERROR, never silently */
  finish(&r);
  HurrayServerOptions so = {.max_connections = 2};
  start(&r, &so);
  go(&r);
  HurrayClient *a = NULL, *b = NULL, *c = NULL;
  OK(hurray_client_connect(r.address, NULL, &a, E));
  OK(hurray_client_connect(r.address, NULL, &b, E));
  HurrayError error = {0};
  assert_int_equal(hurray_client_connect(r.address, NULL, &c, &error), HURRAY_EDENIED);
  assert_string_equal(error.message, "peer: this server is at its connection limit");
  hurray_client_destroy(a);
  hurray_client_destroy(b);
  finish(&r);
}

/* Connects `n` clients to `address`, all of which must be accepted, then one more, which must
 * be refused HURRAY_EDENIED with `refusal` (NULL: accepted too); destroys them all. */
static void connect_up_to(const char *address, int n, const char *refusal) {
  HurrayClient **clients = calloc((size_t)n + 1, sizeof *clients);
  for (int i = 0; i < n; i++) OK(hurray_client_connect(address, NULL, &clients[i], E));
  HurrayError error = {0};
  int status = hurray_client_connect(address, NULL, &clients[n], &error);
  if (refusal == NULL) {
    assert_int_equal(status, HURRAY_OK);
  } else {
    assert_int_equal(status, HURRAY_EDENIED);
    assert_string_equal(error.message, refusal);
  }
  for (int i = 0; i <= n; i++) hurray_client_destroy(clients[i]);
  free(clients);
}

/* A non-loopback IPv4 address of this host, or false. */
static bool outside_address(char *out, size_t size) {
  struct ifaddrs *list = NULL;
  if (getifaddrs(&list) != 0) return false;
  bool found = false;
  for (struct ifaddrs *i = list; i != NULL && !found; i = i->ifa_next) {
    if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET) continue;
    const struct sockaddr_in *in = (const struct sockaddr_in *)i->ifa_addr;
    if ((ntohl(in->sin_addr.s_addr) >> 24) == 127) continue;
    found = inet_ntop(AF_INET, &in->sin_addr, out, (socklen_t)size) != NULL;
  }
  freeifaddrs(list);
  return found;
}

/* The bound on connections from one client address (ADR-099): given, it holds on loopback too
 * and a closed connection makes room again; by default 64 from an address beyond this host
 * (this host's own non-loopback address is one), none on loopback; Unix-socket clients are not
 * counted. */
static void per_address_limit(void **state) {
  (void)state;
  HurrayServerOptions so = {.max_connections_per_address = 2};
  Running r;
  start(&r, &so);
  go(&r);
  connect_up_to(r.address, 2, "peer: this server is at its limit of 2 connections from one "
                              "address");
  HurrayClient *c = NULL;
  HurrayError error = {0};
  int status = HURRAY_EDENIED; /* the server notices the closed ones on its next turn */
  for (int k = 0; k < 200 && status == HURRAY_EDENIED; k++) {
    status = hurray_client_connect(r.address, NULL, &c, &error);
    if (status == HURRAY_EDENIED) usleep(10000);
  }
  assert_int_equal(status, HURRAY_OK);
  hurray_client_destroy(c);
  finish(&r);
  /* the default: loopback clients are bounded by max_connections alone */
  start(&r, NULL);
  go(&r);
  connect_up_to(r.address, 80, NULL);
  finish(&r);
  /* ... and 64 from an address beyond the host */
  char host[64], address[96];
  if (outside_address(host, sizeof host)) {
    snprintf(address, sizeof address, "%s:0", host);
    so = (HurrayServerOptions){.address = address, .flags = HURRAY_SERVER_INSECURE};
    start(&r, &so);
    go(&r);
    connect_up_to(r.address, 64, "peer: this server is at its limit of 64 connections from one "
                                 "address");
    finish(&r);
  } else {
    fprintf(stderr, "per_address_limit: no non-loopback IPv4 address here; default beyond the "
                    "host not exercised\n");
  }
  /* a Unix socket's clients have no address to count */
  char unix_address[512];
  snprintf(unix_address, sizeof unix_address, "unix:%s", path_of("limit.sock"));
  so = (HurrayServerOptions){.address = unix_address, .max_connections_per_address = 1};
  start(&r, &so);
  go(&r);
  connect_up_to(r.address, 3, NULL);
  finish(&r);
}

/* Kills the server process once some of the tensor has arrived. */
typedef struct KillAt {
  pid_t pid;
  bool done;
} KillAt;

static void kill_midway(void *context, uint64_t done, uint64_t total) {
  KillAt *k = context;
  (void)total;
  if (!k->done && done > (8u << 20)) {
    kill(k->pid, SIGKILL);
    k->done = true;
  }
}

/* A server (made with `so`) in a child process is killed while the client (`co`) fetches
 * 256 MiB from it: the client gets a clear error and no tensor. */
static void fetch_from_killed_server(const HurrayServerOptions *so,
                                     const HurrayClientOptions *co) {
  HurrayServer *server = NULL;
  OK(hurray_server_create(so, &server, E));
  char address[128];
  OK(hurray_server_address(server, address, sizeof address, E));
  OK(hurray_server_add_tensor(server, "x", bytes_tensor(256 << 20, 7), E));
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    hurray_server_run(server, NULL);
    _exit(0);
  }
  hurray_server_destroy(server); /* the child has its own copy */
  HurrayClient *c = NULL;
  OK(hurray_client_connect(address, co, &c, E));
  HurrayTensorContext *got = NULL;
  HurrayError error = {0};
  KillAt k = {child, false};
  HurrayGetOptions o = {.progress = kill_midway, .progress_context = &k};
  assert_int_equal(hurray_client_get(c, "x", &o, &got, &error), HURRAY_ECONNECTION);
  assert_true(k.done);
  assert_null(got);
  assert_string_equal(error.message, "the server closed the connection");
  hurray_client_destroy(c);
  waitpid(child, NULL, 0);
}

static void killed_server(void **state) {
  (void)state;
  fetch_from_killed_server(NULL, NULL);
}

/* ---- who gets in -------------------------------------------------------------------------- */

static void secrets_and_read_only(void **state) {
  (void)state;
  HurrayServerOptions so = {.secret = (const uint8_t *)"s3cret", .secret_len = 6,
                            .flags = HURRAY_SERVER_READ_ONLY};
  Running r;
  start(&r, &so);
  OK(hurray_server_add_tensor(r.server, "x", bytes_tensor(100, 1), E));
  go(&r);
  HurrayClientOptions co = {.secret = (const uint8_t *)"s3cret", .secret_len = 6};
  HurrayClient *c = NULL;
  OK(hurray_client_connect(r.address, &co, &c, E));
  HurrayClientInfo info;
  OK(hurray_client_info(c, &info, E));
  assert_int_equal(info.server_flags, WIRE_HELLO_AUTH | WIRE_HELLO_READ_ONLY);
  HurrayTensorContext *got = NULL, *up = bytes_tensor(1 << 20, 2);
  OK(hurray_client_get(c, "x", NULL, &got, E));
  HurrayError error = {0};
  assert_int_equal(hurray_client_put(c, "y", up, &error), HURRAY_EDENIED);
  assert_string_equal(error.message, "peer: this server is read-only: uploads are refused");
  hurray_tensor_context_release(got);
  OK(hurray_client_get(c, "x", NULL, &got, E)); /* still connected */
  hurray_tensor_context_release(got);
  hurray_client_destroy(c);
  co.secret = (const uint8_t *)"wrong!";
  assert_int_equal(hurray_client_connect(r.address, &co, &c, &error), HURRAY_EAUTH);
  assert_string_equal(error.message, "peer: authentication failed: wrong secret");
  assert_int_equal(hurray_client_connect(r.address, NULL, &c, &error), HURRAY_EAUTH);
  assert_string_equal(error.message, "the server requires a shared secret and none was given");
  /* a raw client that skips AUTH is refused by the server */
  FileSink frame = {0};
  cpu_hello(&frame, 1 << 16);
  hurray__wire_frame(&frame, WIRE_LIST, 0, 1, NULL, 0);
  int fd = raw_connect(r.address);
  raw_send(fd, &frame);
  hurray__sink_reset(&frame);
  WireHeader h;
  uint8_t buf[1024];
  assert_int_equal(raw_frame(fd, &h, buf, sizeof buf), WIRE_SERVER_HELLO);
  assert_int_equal(raw_frame(fd, &h, buf, sizeof buf), WIRE_ERROR);
  assert_int_equal(hurray__wire_error_decode(buf, (size_t)h.length, &error), HURRAY_EAUTH);
  assert_string_equal(error.message,
                      "peer: authentication required: this server needs a shared secret");
  close(fd);
  hurray_tensor_context_release(up);
  finish(&r);
  /* a client with a secret refuses a server that does not ask for it */
  start(&r, NULL);
  go(&r);
  co.secret = (const uint8_t *)"s3cret";
  assert_int_equal(hurray_client_connect(r.address, &co, &c, &error), HURRAY_EAUTH);
  assert_string_equal(error.message, "the server does not authenticate, but a secret was given");
  finish(&r);
}

/* The answer of a raw session whose hello lists `tags` to a WHOLE request of tensor "x" on
 * `device`: its frame type, an ERROR's status and message in `error`. */
static int raw_request_on(const char *address, const uint8_t *tags, size_t n, uint8_t device,
                          HurrayError *error) {
  WireRequest req = {.preferred_device = device, .name_len = 1, .name = "x"};
  FileSink frame = {0};
  devices_hello(&frame, 1 << 20, tags, n);
  request_frame(&frame, &req);
  int fd = raw_connect(address);
  raw_send(fd, &frame);
  hurray__sink_reset(&frame);
  WireHeader h;
  static uint8_t buf[1 << 12];
  assert_int_equal(raw_frame(fd, &h, buf, sizeof buf), WIRE_SERVER_HELLO);
  int type = raw_frame(fd, &h, buf, sizeof buf);
  if (type == WIRE_ERROR) hurray__wire_error_decode(buf, (size_t)h.length, error);
  close(fd);
  return type;
}

/* Spec §4.1, §6.2 (issue 24 item 5): a client's device list binds the server, the CPU implied. */
static void device_list_binds(void **state) {
  (void)state;
  Running r;
  start(&r, NULL);
  OK(hurray_server_add_tensor(r.server, "x", bytes_tensor(100, 1), E));
  go(&r);
  HurrayError error = {0};
  static const uint8_t vulkan[] = {HURRAY_DEVICE_VULKAN}, cpu[] = {HURRAY_DEVICE_CPU};
  /* the CPU needs no listing: a client that lists only vulkan gets CPU answers */
  assert_int_equal(raw_request_on(r.address, vulkan, 1, HURRAY_DEVICE_CPU, &error),
                   WIRE_TENSOR_HEADER);
  /* a device the hello did not list is refused, before the device rule (cuda is not served
     here either: that would be HURRAY_EUNSUPPORTED) */
  assert_int_equal(raw_request_on(r.address, cpu, 1, HURRAY_DEVICE_ROCM, &error), WIRE_ERROR);
  assert_int_equal(error.code, HURRAY_EPROTOCOL);
  assert_string_equal(error.message, "peer: device rocm (0x02) was not in this client's hello: a "
                                     "server answers on the CPU and the devices a client lists");
  assert_int_equal(raw_request_on(r.address, vulkan, 1, HURRAY_DEVICE_VULKAN, &error), WIRE_ERROR);
  assert_int_equal(error.code, HURRAY_EUNSUPPORTED); /* listed: the device rule decides */
  /* the reference client refuses a get on a device it did not offer, before sending */
  HurrayClientOptions co = {.devices = cpu, .ndevices = 1};
  HurrayClient *c = NULL;
  OK(hurray_client_connect(r.address, &co, &c, E));
  HurrayGetOptions o = {.preferred_device = HURRAY_DEVICE_ROCM, .flags = HURRAY_GET_FALLBACK};
  HurrayTensorContext *got = NULL;
  assert_int_equal(hurray_client_get(c, "x", &o, &got, &error), HURRAY_EINVAL);
  assert_string_equal(error.message, "device rocm was not offered when connecting: a server "
                                     "answers on the CPU and the devices listed in "
                                     "HurrayClientOptions.devices");
  OK(hurray_client_get(c, "x", NULL, &got, E)); /* and goes on */
  hurray_tensor_context_release(got);
  hurray_client_destroy(c);
  /* by default it offers every named device: FALLBACK then brings rocm's request to the CPU */
  OK(hurray_client_connect(r.address, NULL, &c, E));
  OK(hurray_client_get(c, "x", &o, &got, E));
  assert_int_equal(got->buffers->buffers[0]->desc.device_tag, HURRAY_DEVICE_CPU);
  hurray_tensor_context_release(got);
  hurray_client_destroy(c);
  finish(&r);
}

/* ADR-092: a server beyond loopback needs a secret or HURRAY_SERVER_INSECURE, and takes
 * uploads only when asked to. */
static void safe_defaults(void **state) {
  (void)state;
  HurrayError error = {0};
  HurrayServer *server = NULL;
  static const char *const wide[] = {"0.0.0.0:0", "[::]:0"};
  for (size_t i = 0; i < 2; i++) {
    HurrayServerOptions so = {.address = wide[i]};
    assert_int_equal(hurray_server_create(&so, &server, &error), HURRAY_EINVAL);
    assert_null(server);
    assert_non_null(strstr(error.message, "is reachable beyond this host and the server has no "
                                          "secret: give a secret (and TLS), or "
                                          "HURRAY_SERVER_INSECURE"));
    so.flags = HURRAY_SERVER_INSECURE;
    OK(hurray_server_create(&so, &server, E));
    hurray_server_destroy(server);
    so = (HurrayServerOptions){.address = wide[i], .secret = (const uint8_t *)"k",
                               .secret_len = 1};
    OK(hurray_server_create(&so, &server, E));
    hurray_server_destroy(server);
  }
  HurrayServerOptions so = {.address = "0.0.0.0:0"};
  assert_int_equal(hurray_server_create(&so, &server, &error), HURRAY_EINVAL);
  assert_non_null(strstr(error.message, "0.0.0.0:")); /* names the address refused */
  so = (HurrayServerOptions){.flags = HURRAY_SERVER_READ_ONLY | HURRAY_SERVER_UPLOADS};
  assert_int_equal(hurray_server_create(&so, &server, &error), HURRAY_EINVAL);
  assert_non_null(strstr(error.message, "READ_ONLY with UPLOADS"));
  /* loopback by number or by name needs neither; and without UPLOADS it is read-only */
  static const char *const local[] = {"127.0.0.1:0", "[::1]:0", "localhost:0"};
  for (size_t i = 0; i < 3; i++) {
    so = (HurrayServerOptions){.address = local[i]};
    Running r;
    start(&r, &so);
    go(&r);
    HurrayClient *c = NULL;
    OK(hurray_client_connect(r.address, NULL, &c, E));
    HurrayClientInfo info;
    OK(hurray_client_info(c, &info, E));
    assert_int_equal(info.server_flags, WIRE_HELLO_READ_ONLY);
    HurrayTensorContext *up = bytes_tensor(100, 2);
    assert_int_equal(hurray_client_put(c, "y", up, &error), HURRAY_EDENIED);
    assert_string_equal(error.message, "peer: this server is read-only: uploads are refused");
    hurray_tensor_context_release(up);
    hurray_client_destroy(c);
    finish(&r);
  }
}

static void unix_socket(void **state) {
  (void)state;
  char address[300];
  snprintf(address, sizeof address, "unix:%s", path_of("wire.sock"));
  HurrayServerOptions so = {.address = address};
  Running r;
  start(&r, &so);
  assert_string_equal(r.address, address);
  /* 12 MiB: the mapped pages are made present while a helper thread hashes behind */
  HurrayTensorContext *want = bytes_tensor(12 << 20, 8);
  OK(hurray_server_add_tensor(r.server, "x", bytes_tensor(12 << 20, 8), E));
  go(&r);
  HurrayClient *c = NULL;
  OK(hurray_client_connect(address, NULL, &c, E));
  HurrayClientInfo info;
  OK(hurray_client_info(c, &info, E));
  assert_int_equal(info.server_flags & 4u, 4u); /* the tensor comes as a descriptor */
  HurrayTensorContext *got = NULL;
  OK(hurray_client_get(c, "x", NULL, &got, E));
  assert_same_buffers(got, want);
  hurray_tensor_context_release(got);
  /* the statistics count a buffer passed as a descriptor by its size */
  HurrayServerStats stats = wait_transfers(r.server, 1);
  assert_int_equal(stats.passed_bytes, 12 << 20);
  assert_int_equal(stats.sent_bytes, 0);
  /* fetch writes the mapped buffer to the file */
  OK(hurray_client_fetch(c, "x", NULL, path_of("fd.hurray"), E));
  assert_file_holds(path_of("fd.hurray"), want);
  hurray_client_destroy(c);
  /* a client that does not ask gets bytes */
  HurrayClientOptions co = {.flags = HURRAY_CLIENT_NO_FD_PASSING};
  OK(hurray_client_connect(address, &co, &c, E));
  OK(hurray_client_info(c, &info, E));
  assert_int_equal(info.server_flags & 4u, 0);
  OK(hurray_client_get(c, "x", NULL, &got, E));
  assert_same_buffers(got, want);
  hurray_tensor_context_release(got);
  hurray_client_destroy(c);
  stats = wait_transfers(r.server, 3);
  assert_int_equal(stats.passed_bytes, 2 * (12 << 20));
  assert_int_equal(stats.sent_bytes, 12 << 20);
  hurray_tensor_context_release(want);
  finish(&r);
}

/* ---- TLS ---------------------------------------------------------------------------------- */

/* `name` among the certificates of tests/tls/make_certs.sh, made once per run. */
static const char *cert(const char *name) {
  static char dir[300];
  static char paths[4][400];
  static int next;
  if (dir[0] == '\0') {
    snprintf(dir, sizeof dir, "%s", path_of("certs"));
    char command[800];
    snprintf(command, sizeof command, "mkdir -p '%s' && sh '%s' '%s'", dir, HURRAY_MAKE_CERTS, dir);
    assert_int_equal(system(command), 0);
  }
  char *path = paths[next++ % 4];
  snprintf(path, sizeof paths[0], "%s/%s", dir, name);
  return path;
}

/* "hurrays://127.0.0.1:P" -> "127.0.0.1:P" */
static const char *plain(const char *address) {
  return strncmp(address, "hurrays://", 10) == 0 ? address + 10 : address;
}

static void tls_round_trip(void **state) {
  (void)state;
  HurrayTlsOptions st = {.certificate_file = cert("server.pem"), .key_file = cert("server.key")};
  HurrayServerOptions so = {.tls = &st, .secret = (const uint8_t *)"s3cret", .secret_len = 6,
                            .flags = HURRAY_SERVER_UPLOADS};
  Running r;
  start(&r, &so);
  /* loopback unless told otherwise, and the address says TLS */
  assert_int_equal(strncmp(r.address, "hurrays://127.0.0.1:", 20), 0);
  HurrayTensorContext *want = bytes_tensor(5 << 20, 3), *up = bytes_tensor(3 << 20, 5);
  OK(hurray_server_add_tensor(r.server, "x", bytes_tensor(5 << 20, 3), E));
  go(&r);
  HurrayTlsOptions ct = {.ca_file = cert("ca.pem")};
  HurrayClientOptions co = {.tls = &ct, .secret = (const uint8_t *)"s3cret", .secret_len = 6};
  HurrayClient *c = NULL;
  OK(hurray_client_connect(r.address, &co, &c, E));
  HurrayClientInfo info;
  OK(hurray_client_info(c, &info, E));
  assert_int_equal(info.server_flags, WIRE_HELLO_AUTH); /* the secret works inside TLS */
  HurrayTensorContext *got = NULL;
  OK(hurray_client_get(c, "x", NULL, &got, E));
  assert_same_buffers(got, want);
  hurray_tensor_context_release(got);
  OK(hurray_client_put(c, "up", up, E));
  OK(hurray_client_get(c, "up", NULL, &got, E));
  assert_same_buffers(got, up);
  hurray_tensor_context_release(got);
  HurrayRemoteTensor *items = NULL;
  uint32_t count = 0;
  OK(hurray_client_list(c, &items, &count, E));
  assert_int_equal(count, 2);
  free(items);
  hurray_client_destroy(c);
  /* the certificate's DNS name, and IPv4 checked against its IP address */
  char by_name[160];
  snprintf(by_name, sizeof by_name, "hurrays://localhost:%s", strrchr(r.address, ':') + 1);
  OK(hurray_client_connect(by_name, &co, &c, E));
  OK(hurray_client_get(c, "x", NULL, &got, E));
  assert_same_buffers(got, want);
  hurray_tensor_context_release(got);
  hurray_client_destroy(c);
  /* a wrong secret is still refused, over TLS */
  HurrayError error = {0};
  co.secret = (const uint8_t *)"wrong!";
  assert_int_equal(hurray_client_connect(r.address, &co, &c, &error), HURRAY_EAUTH);
  assert_string_equal(error.message, "peer: authentication failed: wrong secret");
  /* an interrupted transfer resumes over a new TLS session */
  Proxy f = {.cut_at = 2 << 20, .connections = 2};
  proxy_start(&f, plain(r.address));
  char through[160];
  snprintf(through, sizeof through, "hurrays://%s", f.address);
  co.secret = (const uint8_t *)"s3cret";
  OK(hurray_client_connect(through, &co, &c, E));
  HurrayGetOptions o = {.retries = 1};
  OK(hurray_client_get(c, "x", &o, &got, E));
  assert_same_buffers(got, want);
  hurray_tensor_context_release(got);
  hurray_client_destroy(c);
  proxy_stop(&f);
  hurray_tensor_context_release(want);
  hurray_tensor_context_release(up);
  finish(&r);
}

static void tls_refusals(void **state) {
  (void)state;
  HurrayTlsOptions st = {.certificate_file = cert("server.pem"), .key_file = cert("server.key")};
  HurrayServerOptions so = {.tls = &st, .handshake_timeout_ms = 300};
  Running r;
  start(&r, &so);
  OK(hurray_server_add_tensor(r.server, "x", bytes_tensor(1000, 1), E));
  go(&r);
  HurrayClient *c = NULL;
  HurrayError error = {0};
  char expected[400];
  /* a server certificate from a CA the client does not trust */
  HurrayTlsOptions ct = {.ca_file = cert("other-ca.pem")};
  HurrayClientOptions co = {.tls = &ct};
  assert_int_equal(hurray_client_connect(r.address, &co, &c, &error), HURRAY_EAUTH);
  snprintf(expected, sizeof expected,
           "%s: TLS: the server's certificate is refused: unable to get local issuer certificate",
           r.address);
  assert_string_equal(error.message, expected);
  assert_null(c);
  /* nor the system's trust store, which the test CA is not in */
  assert_int_equal(hurray_client_connect(r.address, NULL, &c, &error), HURRAY_EAUTH);
  assert_string_equal(error.message, expected);
  /* a trusted certificate for another name */
  ct = (HurrayTlsOptions){.ca_file = cert("ca.pem"), .server_name = "tensors.example.com"};
  assert_int_equal(hurray_client_connect(r.address, &co, &c, &error), HURRAY_EAUTH);
  snprintf(expected, sizeof expected, "%s: TLS: the server's certificate is refused: %s",
           r.address, "hostname mismatch");
  assert_string_equal(error.message, expected);
  /* a plaintext client is told, in plaintext */
  assert_int_equal(hurray_client_connect(plain(r.address), NULL, &c, &error), HURRAY_EPROTOCOL);
  assert_string_equal(error.message, "peer: this server speaks TLS only: connect with hurrays://");
  /* TLS options for a plaintext address are a mistake, not a downgrade */
  ct.server_name = NULL;
  assert_int_equal(hurray_client_connect(plain(r.address), &co, &c, &error), HURRAY_EINVAL);
  snprintf(expected, sizeof expected,
           "TLS options for the plaintext address '%s': use hurrays://", plain(r.address));
  assert_string_equal(error.message, expected);
  /* a TLS slowloris (a handshake record begun, never finished) is closed at the handshake
     deadline, and a client is served meanwhile */
  int slow = raw_connect(r.address);
  assert_int_equal(send(slow, "\x16\x03\x01", 3, MSG_NOSIGNAL), 3);
  OK(hurray_client_connect(r.address, &co, &c, E));
  HurrayTensorContext *got = NULL;
  OK(hurray_client_get(c, "x", NULL, &got, E));
  hurray_tensor_context_release(got);
  hurray_client_destroy(c);
  uint8_t byte;
  assert_int_equal(recv(slow, &byte, 1, 0), 0);
  close(slow);
  assert_int_equal(connections_after_closes(r.server), 0);
  finish(&r);
  /* a TLS server at its connection limit refuses before any TLS, and the client says so */
  so = (HurrayServerOptions){.tls = &st, .max_connections = 1};
  start(&r, &so);
  go(&r);
  HurrayClient *first = NULL;
  OK(hurray_client_connect(r.address, &co, &first, E));
  assert_int_equal(hurray_client_connect(r.address, &co, &c, &error), HURRAY_EDENIED);
  assert_string_equal(error.message, "peer: this server is at its connection limit");
  hurray_client_destroy(first);
  finish(&r);
  /* a TLS client meets a plaintext server */
  start(&r, NULL);
  go(&r);
  char tls_address[160];
  snprintf(tls_address, sizeof tls_address, "hurrays://%s", r.address);
  assert_int_equal(hurray_client_connect(tls_address, &co, &c, &error), HURRAY_EPROTOCOL);
  snprintf(expected, sizeof expected,
           "%s answered in plaintext: it does not speak TLS (use hurray://)", tls_address);
  assert_string_equal(error.message, expected);
  finish(&r);
  /* the server's own options */
  HurrayServer *server = NULL;
  HurrayTlsOptions bad = {.certificate_file = path_of("missing.pem"), .key_file = cert("server.key")};
  so = (HurrayServerOptions){.tls = &bad};
  assert_int_equal(hurray_server_create(&so, &server, &error), HURRAY_EIO);
  assert_non_null(strstr(error.message, "missing.pem"));
  bad = (HurrayTlsOptions){.certificate_file = cert("server.pem"), .key_file = cert("other-ca.key")};
  assert_int_equal(hurray_server_create(&so, &server, &error), HURRAY_EINVAL);
  assert_non_null(strstr(error.message, "does not match"));
  bad = (HurrayTlsOptions){.certificate_file = cert("server.pem"), .key_file = cert("server.key"),
                           .ca_file = cert("ca.pem")};
  assert_int_equal(hurray_server_create(&so, &server, &error), HURRAY_EINVAL);
  so = (HurrayServerOptions){.address = "hurrays://127.0.0.1:0"};
  assert_int_equal(hurray_server_create(&so, &server, &error), HURRAY_EINVAL);
  assert_string_equal(error.message,
                      "address 'hurrays://127.0.0.1:0' asks for TLS: give the certificate and key");
  char unix_address[300];
  snprintf(unix_address, sizeof unix_address, "unix:%s", path_of("tls.sock"));
  so = (HurrayServerOptions){.address = unix_address, .tls = &st};
  assert_int_equal(hurray_server_create(&so, &server, &error), HURRAY_EINVAL);
  assert_null(server);
}

/* A TLS session of our own over a blocking socket (tls.c's API): `fd` and `*session`. */
static int tls_peer(const char *address, WireTls **config, WireTlsConn **session) {
  HurrayTlsOptions ct = {.ca_file = cert("ca.pem")};
  OK(hurray__wire_tls_create(&ct, false, config, E));
  int fd = raw_connect(address);
  OK(hurray__wire_tls_open(*config, fd, "127.0.0.1", session, E));
  for (bool done = false; !done;) {
    OK(hurray__wire_tls_handshake(*session, &done, E));
    struct pollfd p = {fd, hurray__wire_tls_want(*session) == WIRE_WANT_READ ? POLLIN : POLLOUT, 0};
    if (!done) assert_int_equal(poll(&p, 1, 5000), 1);
  }
  return fd;
}

/* Reads one frame through a TLS session; returns its type. */
static int tls_frame(int fd, WireTlsConn *session, WireHeader *h, uint8_t *payload, size_t cap) {
  uint8_t head[WIRE_HEADER_SIZE];
  for (int part = 0; part < 2; part++) {
    uint8_t *to = part == 0 ? head : payload;
    size_t want = part == 0 ? sizeof head : (size_t)h->length, got = 0;
    while (got < want) {
      ssize_t n = hurray__wire_recv(fd, session, to + got, want - got);
      if (n == 0) return -1;
      if (n < 0) {
        assert_int_equal(errno, EAGAIN);
        struct pollfd p = {fd, POLLIN, 0};
        assert_int_equal(poll(&p, 1, 5000), 1);
        continue;
      }
      got += (size_t)n;
    }
    if (part == 0) {
      OK(hurray__wire_header_decode(head, UINT32_MAX, h, E));
      assert_true(h->length <= cap);
    }
  }
  return h->type;
}

/* A client may pipeline: a hello and three LISTs in one TLS record. The server decrypts the
 * whole record at once and answers the hello; the LISTs wait inside the TLS session, which the
 * socket no longer signals, and must still be answered. */
static void tls_pipelined_requests(void **state) {
  (void)state;
  HurrayTlsOptions st = {.certificate_file = cert("server.pem"), .key_file = cert("server.key")};
  HurrayServerOptions so = {.tls = &st};
  Running r;
  start(&r, &so);
  OK(hurray_server_add_tensor(r.server, "x", bytes_tensor(10, 1), E));
  go(&r);
  WireTls *config = NULL;
  WireTlsConn *session = NULL;
  int fd = tls_peer(r.address, &config, &session);
  FileSink frame = {0};
  cpu_hello(&frame, 1 << 16);
  for (uint64_t id = 1; id <= 3; id++) hurray__wire_frame(&frame, WIRE_LIST, 0, id, NULL, 0);
  struct iovec iov = {frame.data, frame.len};
  assert_int_equal(hurray__wire_sendv(fd, session, &iov, 1), (ssize_t)frame.len);
  hurray__sink_reset(&frame);
  WireHeader h;
  uint8_t buf[4096];
  assert_int_equal(tls_frame(fd, session, &h, buf, sizeof buf), WIRE_SERVER_HELLO);
  for (uint64_t id = 1; id <= 3; id++) {
    assert_int_equal(tls_frame(fd, session, &h, buf, sizeof buf), WIRE_LIST_RESULT);
    assert_int_equal(h.request_id, id);
    assert_int_equal(h.flags, WIRE_FLAG_END);
  }
  hurray__wire_tls_close(session);
  hurray__wire_tls_destroy(config);
  close(fd);
  finish(&r);
}

static double cpu_seconds(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

/* Over TLS, a peer that sends half a TLS record and one that stops reading a 64 MiB answer
 * neither stall a good client nor cost the server CPU while they wait, and both are closed at
 * the idle timeout, the server's memory bounded throughout. */
static void tls_stalled_peers(void **state) {
  (void)state;
  HurrayTlsOptions st = {.certificate_file = cert("server.pem"), .key_file = cert("server.key")};
  HurrayServerOptions so = {.tls = &st, .idle_timeout_ms = 1500, .max_frame = 1 << 16};
  Running r;
  start(&r, &so);
  OK(hurray_server_add_tensor(r.server, "big", bytes_tensor(64 << 20, 9), E));
  OK(hurray_server_add_tensor(r.server, "small", bytes_tensor(1000, 2), E));
  go(&r);
  WireTls *config_a = NULL, *config_b = NULL;
  WireTlsConn *half = NULL, *stuck = NULL;
  int a = tls_peer(r.address, &config_a, &half);
  assert_int_equal(send(a, "\x17\x03\x03\x40\x00" "0123456789", 15, MSG_NOSIGNAL), 15);
  int b = tls_peer(r.address, &config_b, &stuck);
  FileSink frame = {0};
  cpu_hello(&frame, 1 << 16);
  request_frame(&frame, &(WireRequest){.name_len = 3, .name = "big"});
  struct iovec iov = {frame.data, frame.len};
  assert_int_equal(hurray__wire_sendv(b, stuck, &iov, 1), (ssize_t)frame.len);
  hurray__sink_reset(&frame);
  /* a good client is served at once, again and again */
  HurrayTlsOptions ct = {.ca_file = cert("ca.pem")};
  HurrayClientOptions co = {.tls = &ct};
  HurrayClient *c = NULL;
  OK(hurray_client_connect(r.address, &co, &c, E));
  int64_t t0 = now_ms();
  for (int i = 0; i < 50; i++) {
    HurrayTensorContext *got = NULL;
    OK(hurray_client_get(c, "small", NULL, &got, E));
    hurray_tensor_context_release(got);
  }
  assert_true(now_ms() - t0 < 2000);
  hurray_client_destroy(c);
  /* while the two wait, the server's loop sleeps */
  double cpu0 = cpu_seconds();
  usleep(500 * 1000);
  assert_true(cpu_seconds() - cpu0 < 0.2);
  HurrayServerStats stats;
  OK(hurray_server_stats(r.server, &stats, E));
  assert_int_equal(stats.connections, 2);
  assert_true(stats.peak_buffered_bytes < (1u << 20));
  /* and both are closed at the idle timeout */
  usleep(1500 * 1000);
  assert_int_equal(connections_after_closes(r.server), 0);
  hurray__wire_tls_close(half);
  hurray__wire_tls_close(stuck);
  hurray__wire_tls_destroy(config_a);
  hurray__wire_tls_destroy(config_b);
  close(a);
  close(b);
  finish(&r);
}

/* A server killed mid-transfer over TLS: a clear error, never a truncated tensor. A flipped
 * byte is caught by TLS itself, and never delivered either. */
static void tls_faults(void **state) {
  (void)state;
  HurrayTlsOptions st = {.certificate_file = cert("server.pem"), .key_file = cert("server.key")};
  HurrayServerOptions so = {.tls = &st};
  HurrayTlsOptions ct = {.ca_file = cert("ca.pem")};
  HurrayClientOptions co = {.tls = &ct};
  fetch_from_killed_server(&so, &co);
  Running r;
  start(&r, &so);
  OK(hurray_server_add_tensor(r.server, "x", bytes_tensor(1 << 20, 2), E));
  go(&r);
  Proxy p = {.flip_at = 600000, .connections = 1};
  proxy_start(&p, plain(r.address));
  char through[160];
  snprintf(through, sizeof through, "hurrays://%s", p.address);
  HurrayClient *c = NULL;
  OK(hurray_client_connect(through, &co, &c, E));
  HurrayTensorContext *got = NULL;
  HurrayError error = {0};
  assert_int_equal(hurray_client_get(c, "x", NULL, &got, &error), HURRAY_ECONNECTION);
  assert_null(got);
  assert_string_equal(error.message, "connection lost: decryption failed or bad record mac");
  hurray_client_destroy(c);
  proxy_stop(&p);
  finish(&r);
}

/* ---- tensors in device memory (OpenCL: PoCL in CI) ---------------------------------------- */

/* A queue on OpenCL device 0, or NULL where there is no OpenCL runtime (a failure under
 * HURRAY_REQUIRE_OPENCL=1, as scripts/test.sh sets). */
static HurrayDeviceQueue *opencl_queue(void) {
  HurrayDeviceQueue *q = NULL;
  HurrayError error = {0};
  if (hurray_device_queue_create(HURRAY_DEVICE_OPENCL, 0, &q, &error) == HURRAY_OK) return q;
  const char *require = getenv("HURRAY_REQUIRE_OPENCL");
  if (require != NULL && strcmp(require, "1") == 0) {
    fail_msg("OpenCL is required: %s", error.message);
  }
  return NULL;
}

/* bytes_tensor's tensor, in OpenCL memory allocated through `q`. */
static HurrayTensorContext *device_tensor(HurrayDeviceQueue *q, uint64_t n, uint8_t seed) {
  HurrayTensorContext *host = bytes_tensor(n, seed);
  HurrayBufferList *list = NULL;
  HurrayBuffer *b = NULL;
  OK(hurray_buffer_list_create(1, &list, E));
  OK(hurray_device_alloc(q, n, 0, &b, E));
  OK(hurray_device_copy_from_host(q, b, 0, host->buffers->buffers[0]->data, n, E));
  OK(hurray_buffer_list_append(list, b, HURRAY_ROLE_VALUES, NULL, E));
  HurrayTensorContext *c = NULL;
  OK(hurray_tensor_context_create(host->tensor, list, 0, NULL, NULL, &c, E));
  hurray_tensor_context_release(host);
  return c;
}

/* `got` is in OpenCL memory and holds bytes [from, from + n) of bytes_tensor(_, seed). */
static void assert_device_bytes(HurrayDeviceQueue *q, const HurrayTensorContext *got,
                                uint64_t from, uint64_t n, uint8_t seed) {
  const HurrayBuffer *b = got->buffers->buffers[0];
  assert_int_equal(b->desc.device_tag, HURRAY_DEVICE_OPENCL);
  assert_int_equal(b->desc.sync_mode, HURRAY_SYNC_READY);
  assert_int_equal(b->desc.byte_size, n);
  uint8_t *back = malloc(n);
  OK(hurray_device_copy_to_host(q, b, 0, back, n, E));
  for (uint64_t i = 0; i < n; i++) {
    if (back[i] != (uint8_t)(((from + i) * 7 + seed) % 251)) {
      fail_msg("byte %llu", (unsigned long long)i);
    }
  }
  free(back);
}

/* A DENSE uint8 tensor of 64 bytes over made-up device addresses (never dereferenced), one
 * buffer per (tag, device_id) given, the array over the first. */
static HurrayTensorContext *made_up_device_tensor(const uint8_t *tags, const uint16_t *ids,
                                                   uint32_t count) {
  static int64_t shape[1] = {64};
  HurrayArray part = {.shape = shape, .ndim = 1, .dtype = HURRAY_DTYPE_UINT8};
  HurrayTensorDesc desc = {.layout = HURRAY_LAYOUT_DENSE, .ndim = 1, .shape = shape,
                           .parts = &part, .nparts = 1, .dtype = HURRAY_DTYPE_UINT8};
  HurrayBufferList *list = NULL;
  OK(hurray_buffer_list_create(count, &list, E));
  for (uint32_t i = 0; i < count; i++) {
    HurrayBufferDesc d = {.byte_size = 64, .alignment = 64, .device_id = ids[i],
                          .device_tag = tags[i]};
    HurrayBuffer *b = NULL;
    OK(hurray_buffer_wrap((void *)(uintptr_t)(0x1000 * (i + 1)), &d, 0, NULL, 0, NULL, NULL, &b,
                          E));
    OK(hurray_buffer_list_append(list, b, HURRAY_ROLE_VALUES, NULL, E));
  }
  HurrayTensorContext *c = NULL;
  OK(hurray_tensor_context_create(&desc, list, 0, NULL, NULL, &c, E));
  return c;
}

static void device_tensors_refused(void **state) {
  (void)state;
  Running r;
  start(&r, NULL);
  HurrayError error = {0};
  const uint8_t rocm[2] = {HURRAY_DEVICE_ROCM, HURRAY_DEVICE_ROCM};
  const uint16_t ids[2] = {0, 0};
  assert_int_equal(hurray_server_add_tensor(r.server, "r", made_up_device_tensor(rocm, ids, 2),
                                            &error),
                   HURRAY_EUNSUPPORTED);
  assert_string_equal(error.message, "tensor 'r' buffer 0: hurray-core has no runtime backend "
                                     "for rocm memory (only opencl and cuda)");
  const uint8_t two[2] = {HURRAY_DEVICE_OPENCL, HURRAY_DEVICE_CUDA};
  assert_int_equal(hurray_server_add_tensor(r.server, "t", made_up_device_tensor(two, ids, 2),
                                            &error),
                   HURRAY_EUNSUPPORTED);
  assert_string_equal(error.message, "tensor 't' has buffers on two devices (opencl:0 and cuda:0)");
  finish(&r);
}

static void device_tensors_cross(void **state) {
  (void)state;
  HurrayDeviceQueue *q = opencl_queue();
  if (q == NULL) skip();
  uint64_t n = (3u << 20) + 13; /* several staged chunks and DATA frames, and a short one */
  Running r;
  HurrayServerOptions so = {.max_frame = 1 << 16};
  start(&r, &so);
  OK(hurray_server_add_tensor(r.server, "x", device_tensor(q, n, 9), E));
  go(&r);
  HurrayClient *c = NULL;
  OK(hurray_client_connect(r.address, NULL, &c, E));
  HurrayClientInfo info;
  OK(hurray_client_info(c, &info, E)); /* the hello says the server serves from OpenCL */
  assert_int_equal(info.ndevices, 2);
  assert_int_equal(info.devices[1], HURRAY_DEVICE_OPENCL);
  /* into OpenCL memory, on the caller's queue and on one the client makes */
  HurrayGetOptions o = {.preferred_device = HURRAY_DEVICE_OPENCL, .queue = q};
  HurrayTensorContext *got = NULL;
  OK(hurray_client_get(c, "x", &o, &got, E));
  assert_device_bytes(q, got, 0, n, 9);
  hurray_tensor_context_release(got);
  o.queue = NULL;
  OK(hurray_client_get(c, "x", &o, &got, E));
  assert_device_bytes(q, got, 0, n, 9);
  hurray_tensor_context_release(got);
  /* rows, on the device */
  o = (HurrayGetOptions){.preferred_device = HURRAY_DEVICE_OPENCL, .queue = q,
                         .row_start = 1000, .row_stop = 2000000};
  OK(hurray_client_get(c, "x", &o, &got, E));
  assert_device_bytes(q, got, 1000, 2000000 - 1000, 9);
  hurray_tensor_context_release(got);
  /* to a CPU client: staged through the host, in memory aligned as the device's */
  HurrayTensorContext *want = bytes_tensor(n, 9);
  const void *bytes = want->buffers->buffers[0]->data;
  OK(hurray_client_get(c, "x", NULL, &got, E));
  assert_int_equal(got->buffers->buffers[0]->desc.device_tag, HURRAY_DEVICE_CPU);
  HurrayBuffer *probe = NULL;
  OK(hurray_device_alloc(q, 64, 0, &probe, E));
  assert_int_equal(got->buffers->buffers[0]->desc.alignment, probe->desc.alignment);
  hurray_buffer_destroy(probe);
  assert_memory_equal(got->buffers->buffers[0]->data, bytes, n);
  hurray_tensor_context_release(got);
  /* a device the tensor is not on: the CPU with FALLBACK */
  o = (HurrayGetOptions){.preferred_device = HURRAY_DEVICE_ROCM, .flags = HURRAY_GET_FALLBACK};
  OK(hurray_client_get(c, "x", &o, &got, E));
  assert_memory_equal(got->buffers->buffers[0]->data, bytes, n);
  hurray_tensor_context_release(got);
  hurray_tensor_context_release(want);
  hurray_client_destroy(c);
  /* on the wire: a device the tensor is not on, without FALLBACK, names those it is served on
     (a raw request: the reference client refuses cuda itself where libcuda is missing) */
  WireRequest req = {.preferred_device = HURRAY_DEVICE_CUDA, .name_len = 1, .name = "x"};
  FileSink frame = {0};
  static const uint8_t cpu_cuda[] = {HURRAY_DEVICE_CPU, HURRAY_DEVICE_CUDA};
  devices_hello(&frame, 1 << 20, cpu_cuda, 2);
  request_frame(&frame, &req);
  int fd = raw_connect(r.address);
  raw_send(fd, &frame);
  WireHeader h;
  static uint8_t buf[1 << 12];
  assert_int_equal(raw_frame(fd, &h, buf, sizeof buf), WIRE_SERVER_HELLO);
  assert_int_equal(raw_frame(fd, &h, buf, sizeof buf), WIRE_ERROR);
  HurrayError refused = {0};
  assert_int_equal(hurray__wire_error_decode(buf, (size_t)h.length, &refused), HURRAY_EUNSUPPORTED);
  assert_string_equal(refused.message, "peer: device cuda (0x01) is not served here; tensor 'x' is "
                                       "served on cpu (0x00) and opencl (0x08)");
  close(fd);
  hurray__sink_reset(&frame);
  finish(&r);
  hurray_device_queue_destroy(q);
}

static void device_transfer_corrupted_or_cut(void **state) {
  (void)state;
  HurrayDeviceQueue *q = opencl_queue();
  if (q == NULL) skip();
  uint64_t n = 3u << 20;
  Running r;
  start(&r, NULL);
  OK(hurray_server_add_tensor(r.server, "x", device_tensor(q, n, 4), E));
  go(&r);
  HurrayGetOptions o = {.preferred_device = HURRAY_DEVICE_OPENCL, .queue = q};
  /* a flipped byte: ECHECKSUM, and no device tensor handed out */
  Proxy p = {.flip_at = 2500000, .connections = 1};
  proxy_start(&p, r.address);
  HurrayClient *c = NULL;
  OK(hurray_client_connect(p.address, NULL, &c, E));
  HurrayTensorContext *got = NULL;
  HurrayError error = {0};
  assert_int_equal(hurray_client_get(c, "x", &o, &got, &error), HURRAY_ECHECKSUM);
  assert_null(got);
  assert_string_equal(error.message,
                      "tensor 'x' buffer 0: checksum mismatch (corrupted in transit)");
  hurray_client_destroy(c);
  proxy_stop(&p);
  /* a cut connection: resumed into the same device memory */
  Proxy cut = {.cut_at = 1500000, .connections = 2};
  proxy_start(&cut, r.address);
  OK(hurray_client_connect(cut.address, NULL, &c, E));
  o.retries = 1;
  OK(hurray_client_get(c, "x", &o, &got, E));
  assert_device_bytes(q, got, 0, n, 4);
  hurray_tensor_context_release(got);
  hurray_client_destroy(c);
  proxy_stop(&cut);
  finish(&r);
  hurray_device_queue_destroy(q);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_layout_round_trips),
      cmocka_unit_test(unaddressed_bytes_are_never_sent),
      cmocka_unit_test(every_dtype_round_trips),
      cmocka_unit_test(files_and_rows),
      cmocka_unit_test(metadata_over_the_wire),
      cmocka_unit_test(refused_connect_keeps_its_errno),
      cmocka_unit_test(handshake_refusals),
      cmocka_unit_test(preferred_device),
      cmocka_unit_test(byte_ranges),
      cmocka_unit_test(flipped_byte_detected),
      cmocka_unit_test(interrupted_transfer_resumes),
      cmocka_unit_test(device_tensors_refused),
      cmocka_unit_test(device_tensors_cross),
      cmocka_unit_test(device_transfer_corrupted_or_cut),
      cmocka_unit_test(faults_do_not_stall_others),
      cmocka_unit_test(thousand_clients),
      cmocka_unit_test(per_address_limit),
      cmocka_unit_test(killed_server),
      cmocka_unit_test(secrets_and_read_only),
      cmocka_unit_test(safe_defaults),
      cmocka_unit_test(device_list_binds),
      cmocka_unit_test(unix_socket),
      cmocka_unit_test(tls_round_trip),
      cmocka_unit_test(tls_refusals),
      cmocka_unit_test(tls_faults),
      cmocka_unit_test(tls_stalled_peers),
      cmocka_unit_test(tls_pipelined_requests),
      cmocka_unit_test(timeout_is_a_deadline),
  };
  return cmocka_run_group_tests(tests, make_dir, remove_dir);
}
