/* fuzz_wire_frame.c -- the wire protocol's frame codec on arbitrary bytes: a sequence of frames,
 * each header decoded with the negotiated DATA limit and each payload handed to the decoder of
 * its type (hellos and the device rule, LIST_RESULT, TENSOR_REQUEST, TENSOR_HEADER / PUT with
 * their records -- in the 1.0 / 1.1 form and with the header_check of 1.2 --, DATA_FD, ERROR,
 * and 1.3's METADATA and METADATA_RESULT, whose block is then decoded as a client does).
 * Whatever decodes is encoded again and must decode to the same thing. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire.h"

static void hello(const uint8_t *p, size_t n) {
  WireHello *h = malloc(sizeof *h);
  if (h == NULL) return;
  if (hurray__wire_hello_decode(p, n, h, NULL) == HURRAY_OK) {
    (void)hurray__wire_devices_check(h, NULL);
    FileSink out = {0};
    if (hurray__wire_hello_encode(WIRE_CLIENT_HELLO, h, &out, NULL) != HURRAY_OK ||
        out.len != n + WIRE_HEADER_SIZE || memcmp(out.data + WIRE_HEADER_SIZE, p, n) != 0) {
      abort(); /* a hello that decodes re-encodes to the same bytes */
    }
    hurray__sink_reset(&out);
  }
  free(h);
}

static void request(const uint8_t *p, size_t n) {
  WireRequest r;
  if (hurray__wire_request_decode(p, n, &r, NULL) != HURRAY_OK) return;
  FileSink out = {0};
  if (hurray__wire_request_encode(&r, &out, NULL) != HURRAY_OK || out.len != n ||
      memcmp(out.data, p, n) != 0) {
    abort();
  }
  hurray__sink_reset(&out);
}

static void list(const uint8_t *p, size_t n) {
  HurrayRemoteTensor *items = NULL;
  uint32_t count = 0;
  if (hurray__wire_list_decode(p, n, &items, &count, NULL) == HURRAY_OK) {
    for (uint32_t i = 0; i < count; i++) {
      if (items[i].ndim > HURRAY_MAX_NDIM || items[i].name[0] == '\0') abort();
    }
  }
  free(items);
}

static void fd_ref(const uint8_t *p, size_t n) {
  WireFdRef r;
  if (hurray__wire_fd_ref_decode(p, n, &r, NULL) != HURRAY_OK) return;
  uint8_t out[WIRE_DATA_FD_SIZE];
  hurray__wire_fd_ref_encode(&r, out);
  if (memcmp(out, p, n) != 0 || r.length == 0 || r.file_offset + r.length < r.file_offset) abort();
}

static void metadata_request(const uint8_t *p, size_t n) {
  char name[HURRAY_MAX_NAME + 1];
  size_t len = 0;
  if (hurray__wire_metadata_request_decode(p, n, name, &len, NULL) != HURRAY_OK) return;
  FileSink out = {0};
  hurray__wire_metadata_request_encode(name, len, &out);
  if (!out.failed && (out.len != n || memcmp(out.data, p, n) != 0)) abort();
  hurray__sink_reset(&out);
}

/* One METADATA_RESULT that carries its whole block: the block decoded as a client decodes it,
 * and one that decodes encodes again to the same bytes (file-format.md §7: one encoding). */
static void metadata_result(const uint8_t *p, size_t n) {
  uint32_t total = 0;
  uint64_t check = 0;
  const uint8_t *bytes = NULL;
  size_t len = 0;
  if (hurray__wire_metadata_result_decode(p, n, &total, &check, &bytes, &len, NULL) != HURRAY_OK) {
    return;
  }
  if (len > total || bytes != p + WIRE_METADATA_RESULT_FIXED) abort();
  FileSink again = {0};
  hurray__wire_metadata_result_encode(total, check, bytes, len, &again);
  if (!again.failed && (again.len != n || memcmp(again.data, p, n) != 0)) abort();
  hurray__sink_reset(&again);
  if (len != total || hurray__meta_decode(bytes, len, NULL, NULL, NULL) != HURRAY_OK) return;
  HurrayMetaValue *tree = NULL;
  if (hurray__meta_decode_tree(bytes, len, &tree, NULL) != HURRAY_OK) abort();
  FileSink out = {0};
  uint16_t minor = 0;
  if (hurray__meta_encode(tree, &out, &minor, NULL) == HURRAY_OK && !out.failed && len > 0 &&
      (out.len != len || memcmp(out.data, bytes, len) != 0)) {
    /* an encoded empty map re-encodes as no bytes; any other block as itself */
    if (!(tree->count == 0 && out.len == 0)) abort();
  }
  hurray__sink_reset(&out);
  hurray_meta_destroy(tree);
}

static void tensor(const uint8_t *p, size_t n);

/* A 1.2 TENSOR_HEADER / PUT: the check, then the payload before it; one that passes frames
 * again to the same bytes. */
static void checked_tensor(const uint8_t *head, const WireHeader *h, const uint8_t *p,
                           size_t n) {
  size_t body = 0;
  if (hurray__wire_tensor_check(h, p, n, WIRE_HEADER_CHECK_MINOR, &body, NULL) != HURRAY_OK) {
    return;
  }
  if (body + WIRE_HEADER_CHECK_SIZE != n) abort();
  tensor(p, body);
  FileSink out = {0};
  hurray__wire_tensor_frame(&out, h->type, h->flags, h->request_id, p, body,
                            WIRE_HEADER_CHECK_MINOR);
  if (!out.failed && (out.len != WIRE_HEADER_SIZE + n || memcmp(out.data, head, WIRE_HEADER_SIZE) ||
                      memcmp(out.data + WIRE_HEADER_SIZE, p, n))) {
    abort();
  }
  hurray__sink_reset(&out);
}

static void tensor(const uint8_t *p, size_t n) {
  FileArena arena = {0};
  WireTensor t;
  if (hurray__wire_tensor_decode(p, n, &arena, &t, NULL) == HURRAY_OK) {
    HurrayTensorDesc *copy = NULL;
    if (hurray_tensor_desc_clone(t.record.tensor, &copy, NULL) != HURRAY_OK) abort();
    hurray_tensor_desc_destroy(copy);
  }
  hurray__arena_free(&arena);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  FileCursor c = {data, size};
  const uint8_t *head = NULL, *payload = NULL;
  while (hurray__take(&c, WIRE_HEADER_SIZE, &head, NULL) == HURRAY_OK) {
    WireHeader h;
    if (hurray__wire_header_decode(head, (1u << 16) + WIRE_DATA_FIXED, &h, NULL) != HURRAY_OK) {
      return 0;
    }
    if (hurray__take(&c, (size_t)h.length, &payload, NULL) != HURRAY_OK) return 0;
    size_t n = (size_t)h.length;
    HurrayError error = {0};
    switch (h.type) {
      case WIRE_CLIENT_HELLO:
      case WIRE_SERVER_HELLO: hello(payload, n); break;
      case WIRE_LIST_RESULT: list(payload, n); break;
      case WIRE_TENSOR_REQUEST: request(payload, n); break;
      case WIRE_TENSOR_HEADER:
      case WIRE_PUT: /* as a 1.0 / 1.1 session and as a 1.2 one reads it */
        tensor(payload, n);
        checked_tensor(head, &h, payload, n);
        break;
      case WIRE_ERROR: (void)hurray__wire_error_decode(payload, n, &error); break;
      case WIRE_DATA_FD: fd_ref(payload, n); break;
      case WIRE_METADATA: metadata_request(payload, n); break;
      case WIRE_METADATA_RESULT: metadata_result(payload, n); break;
      default: break;
    }
  }
  return 0;
}
