/* test_wire_codec.c -- the frames of docs/spec/interchange.md, byte for byte: every golden
 * example of spec §9 is encoded here and compared with the spec's hex, and decoded back; then
 * the decoders' refusals, each with the status and message the spec names. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "test_file_helpers.h"
#include "test_tmpdir.h"
#include "wire.h"

/* Parses spec hex ("89 48 52 57 ..."; whitespace ignored) into bytes. */
static size_t unhex(const char *text, uint8_t *out, size_t cap) {
  size_t n = 0;
  while (*text) {
    if (*text == ' ' || *text == '\n') {
      text++;
      continue;
    }
    unsigned v = 0;
    assert_int_equal(sscanf(text, "%2x", &v), 1);
    assert_true(n < cap);
    out[n++] = (uint8_t)v;
    text += 2;
  }
  return n;
}

static void assert_bytes(const FileSink *sink, const char *hex) {
  uint8_t want[4096];
  size_t n = unhex(hex, want, sizeof want);
  if (sink->len != n || memcmp(sink->data, want, n) != 0) {
    for (size_t i = 0; i < sink->len; i++) fprintf(stderr, "%02x%s", sink->data[i], i % 16 == 15 ? "\n" : " ");
    fprintf(stderr, "\n");
    fail_msg("encoded %zu bytes differ from the spec's %zu", sink->len, n);
  }
}

/* §9.1 */
static const char kClientHello[] =
    "89 48 52 57 01 00 00 00 00 00 00 00 00 00 00 00 3a 00 00 00 00 00 00 00"
    "01 00 00 00 00 00 00 00 00 00 40 00 00 00 00 00"
    "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
    "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
    "01 00 00 00 00 00 00 00 00 00";

static void hello_golden(void **state) {
  (void)state;
  WireHello *h = calloc(1, sizeof *h);
  h->version_major = 1;
  h->max_frame = 4u << 20;
  uint8_t cpu = 0;
  OK(hurray__wire_devices_fill(h, &cpu, 1, E));
  FileSink out = {0};
  OK(hurray__wire_hello_encode(WIRE_CLIENT_HELLO, h, &out, E));
  assert_bytes(&out, kClientHello);
  WireHeader hd;
  OK(hurray__wire_header_decode(out.data, 0, &hd, E));
  assert_int_equal(hd.type, WIRE_CLIENT_HELLO);
  assert_int_equal(hd.length, 58);
  WireHello *back = calloc(1, sizeof *back);
  OK(hurray__wire_hello_decode(out.data + WIRE_HEADER_SIZE, 58, back, E));
  assert_int_equal(back->max_frame, 4u << 20);
  assert_int_equal(back->ndevices, 1);
  hurray__sink_reset(&out);
  free(back);
  free(h);
}

/* §9.2: the hello of a server that asks for a secret, with a private tag 0xf3 "npu_x". */
static const char kServerHello[] =
    "89 48 52 57 02 00 00 00 00 00 00 00 00 00 00 00 41 00 00 00 00 00 00 00"
    "01 00 00 00 01 00 00 00 00 00 10 00 00 00 00 00"
    "00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f"
    "10 11 12 13 14 15 16 17 18 19 1a 1b 1c 1d 1e 1f"
    "02 00 00 00 00 00 00 00 00 00 f3 05 6e 70 75 5f 78";

static void server_hello_golden(void **state) {
  (void)state;
  OK(hurray_device_register_private(0xf3, "npu_x", E));
  WireHello *h = calloc(1, sizeof *h);
  h->version_major = 1;
  h->flags = WIRE_HELLO_AUTH;
  h->max_frame = 1u << 20;
  for (int i = 0; i < WIRE_NONCE_SIZE; i++) h->nonce[i] = (uint8_t)i;
  const uint8_t tags[] = {0x00, 0xf3};
  OK(hurray__wire_devices_fill(h, tags, 2, E));
  FileSink out = {0};
  OK(hurray__wire_hello_encode(WIRE_SERVER_HELLO, h, &out, E));
  assert_bytes(&out, kServerHello);
  WireHello *back = calloc(1, sizeof *back);
  OK(hurray__wire_hello_decode(out.data + WIRE_HEADER_SIZE, out.len - WIRE_HEADER_SIZE, back, E));
  OK(hurray__wire_devices_check(back, E)); /* registered here under the same name */
  assert_string_equal(back->devices[1].name, "npu_x");
  OK(hurray_device_unregister_private(0xf3, E));
  HurrayError error = {0};
  assert_int_equal(hurray__wire_devices_check(back, &error), HURRAY_EDEVICE);
  assert_string_equal(error.message, "private device tag 0xf3 ('npu_x') is not registered here");
  hurray__sink_reset(&out);
  free(back);
  free(h);
}

/* §9.3: AUTH for secret "s3cret", client nonce 32 x 0xaa, server nonce 00..1f. */
static const char kAuth[] =
    "89 48 52 57 03 00 00 00 00 00 00 00 00 00 00 00 20 00 00 00 00 00 00 00"
    "cf c4 c3 0a 10 66 5e 4a 05 34 4f 6a 6b 9c 88 4f"
    "2c 28 32 06 be fb 92 33 f7 5d 05 00 7e 58 76 da";

static void auth_golden(void **state) {
  (void)state;
  uint8_t cn[WIRE_NONCE_SIZE], sn[WIRE_NONCE_SIZE], mac[WIRE_MAC_SIZE], proof[WIRE_MAC_SIZE];
  memset(cn, 0xaa, sizeof cn);
  for (int i = 0; i < WIRE_NONCE_SIZE; i++) sn[i] = (uint8_t)i;
  OK(hurray__wire_mac((const uint8_t *)"s3cret", 6, false, cn, sn, mac, E));
  FileSink out = {0};
  hurray__wire_frame(&out, WIRE_AUTH, 0, 0, mac, sizeof mac);
  assert_bytes(&out, kAuth);
  OK(hurray__wire_mac((const uint8_t *)"s3cret", 6, true, cn, sn, proof, E));
  assert_false(hurray__wire_mac_equal(mac, proof)); /* the two directions differ */
  hurray__sink_reset(&out);
}

/* §9.4: request 7 for rows [1, 2) of "x", preferring CUDA with fallback, resuming at 0. */
static const char kRequest[] =
    "89 48 52 57 20 00 00 00 07 00 00 00 00 00 00 00 21 00 00 00 00 00 00 00"
    "01 01 01 00 01 00 00 00 01 00 00 00 00 00 00 00"
    "02 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 78";

static void request_golden(void **state) {
  (void)state;
  WireRequest r = {.preferred_device = 1, .range_kind = WIRE_RANGE_ROWS,
                   .flags = WIRE_REQUEST_FALLBACK, .start = 1, .stop = 2, .name_len = 1,
                   .name = "x"};
  FileSink payload = {0}, out = {0};
  OK(hurray__wire_request_encode(&r, &payload, E));
  hurray__wire_frame(&out, WIRE_TENSOR_REQUEST, 0, 7, payload.data, payload.len);
  assert_bytes(&out, kRequest);
  WireRequest back;
  OK(hurray__wire_request_decode(payload.data, payload.len, &back, E));
  assert_string_equal(back.name, "x");
  assert_int_equal(back.stop, 2);
  hurray__sink_reset(&payload);
  hurray__sink_reset(&out);
}

/* §9.5: the TENSOR_HEADER and DATA frames answering request 7 for the whole of "x", DENSE
 * float32 [2] = {1.0, 2.0} (the tensor of file-format.md §11, its record in the
 * wire's fixed-width form). */
static const char kTensorHeader[] =
    "89 48 52 57 21 00 00 00 07 00 00 00 00 00 00 00 88 00 00 00 00 00 00 00"
    "00 00 00 00 01 00 00 00 08 00 00 00 00 00 00 00"
    "00 00 00 00 00 00 00 00 48 00 00 00 00 00 00 00"
    "00 00 00 06 00 00 00 00 08 00 00 00 00 00 00 00"
    "b7 f4 34 71 8f d7 e8 4d 00 00 00 00 00 00 00 00"
    "01 00 00 00 00 00 00 00 78 00 00 00 00 00 00 00"
    "00 0a 01 01 00 00 00 00 00 00 00 00 00 00 00 00"
    "00 00 00 00 00 00 00 00 02 00 00 00 00 00 00 00"
    "0a 01 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
    "02 00 00 00 00 00 00 00";
static const char kData[] =
    "89 48 52 57 22 01 00 00 07 00 00 00 00 00 00 00 18 00 00 00 00 00 00 00"
    "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
    "00 00 80 3f 00 00 00 40";

/* The golden tensor "x" served, and `plan` for the whole of it (request 7 of §9.5). */
static WireServed *golden_plan(WirePlan *plan) {
  WireServed *served = NULL;
  OK(hurray__wire_served_create("x", sample_golden_pair(), NULL, -1, NULL, NULL, 0, &served, E));
  WireRequest r = {.name_len = 1, .name = "x"};
  OK(hurray__wire_plan(served, &r, 0, plan, E));
  return served;
}

static void tensor_golden(void **state) {
  (void)state;
  WirePlan plan;
  WireServed *served = golden_plan(&plan);
  FileSink out = {0};
  hurray__wire_frame(&out, WIRE_TENSOR_HEADER, 0, 7, plan.header.data, plan.header.len);
  assert_bytes(&out, kTensorHeader);
  assert_int_equal(plan.nsegments, 1);
  out.len = 0;
  uint8_t fixed[WIRE_DATA_FIXED] = {0};
  FileSink data = {0};
  hurray__sink_bytes(&data, fixed, sizeof fixed);
  hurray__sink_bytes(&data, plan.segments[0].data, (size_t)plan.segments[0].len);
  hurray__wire_frame(&out, WIRE_DATA, WIRE_FLAG_END, 7, data.data, data.len);
  assert_bytes(&out, kData);
  FileArena arena = {0};
  WireTensor t;
  OK(hurray__wire_tensor_decode(plan.header.data, plan.header.len, &arena, &t, E));
  assert_string_equal(t.record.name, "x");
  assert_int_equal(t.total_bytes, 8);
  hurray__arena_free(&arena);
  hurray__sink_reset(&data);
  hurray__sink_reset(&out);
  hurray__wire_plan_reset(&plan);
  hurray__wire_served_destroy(served);
}

/* §9.10: the same TENSOR_HEADER in a 1.2 session (its header_check last), and the PUT of the
 * same tensor as request 1. */
static const char kTensorHeaderCheck[] = "52 b5 71 36 bf db c0 50";
static const char kPutCheck[] = "65 9b c9 69 91 e2 67 0b";

/* spec hex of a 1.2 frame: 9.5's header with length 144, then its payload, then `check` */
static size_t checked_frame(uint8_t type, uint8_t id, const char *check, uint8_t *out) {
  size_t n = unhex(kTensorHeader, out, 4096);
  out[4] = type;
  out[8] = id;
  out[16] = 0x90;
  return n + unhex(check, out + n, 8);
}

static void tensor_header_check_golden(void **state) {
  (void)state;
  WirePlan plan;
  WireServed *served = golden_plan(&plan);
  static uint8_t want[4096], got[4096];
  FileSink out = {0};
  for (int put = 0; put < 2; put++) {
    size_t n = checked_frame(put ? WIRE_PUT : WIRE_TENSOR_HEADER, put ? 1 : 7,
                             put ? kPutCheck : kTensorHeaderCheck, want);
    out.len = 0;
    hurray__wire_tensor_frame(&out, put ? WIRE_PUT : WIRE_TENSOR_HEADER, 0, put ? 1 : 7,
                              plan.header.data, plan.header.len, 2);
    assert_int_equal(out.len, n);
    assert_memory_equal(out.data, want, n);
    /* in 1.1 and 1.0 the same frame is 9.5's, without the check */
    out.len = 0;
    hurray__wire_tensor_frame(&out, put ? WIRE_PUT : WIRE_TENSOR_HEADER, 0, put ? 1 : 7,
                              plan.header.data, plan.header.len, 1);
    assert_int_equal(out.len, n - WIRE_HEADER_CHECK_SIZE);
    WireHeader h;
    size_t body = 0;
    OK(hurray__wire_header_decode(want, 1 << 16, &h, E));
    OK(hurray__wire_tensor_check(&h, want + WIRE_HEADER_SIZE, n - WIRE_HEADER_SIZE, 2, &body, E));
    assert_int_equal(body, 136);
    FileArena arena = {0};
    WireTensor t;
    OK(hurray__wire_tensor_decode(want + WIRE_HEADER_SIZE, body, &arena, &t, E));
    assert_string_equal(t.record.name, "x");
    hurray__arena_free(&arena);
    /* a 1.2 header without its check is too short (trailing-bytes rules aside) */
    HurrayError error = {0};
    assert_int_equal(hurray__wire_tensor_check(&h, want + WIRE_HEADER_SIZE, 7, 2, &body, &error),
                     HURRAY_EPROTOCOL);
    assert_string_equal(error.message, put ? "PUT of 7 bytes has no room for its header checksum"
                                           : "TENSOR_HEADER of 7 bytes has no room for its "
                                             "header checksum");
    /* every one-byte change -- request id, dtype, shape, checksums, name, the check itself --
     * is refused by the check; changes of the other header fields by the header's own rules */
    for (size_t i = 0; i < n; i++) {
      memcpy(got, want, n);
      got[i] ^= 0x10;
      if (hurray__wire_header_decode(got, 1 << 16, &h, &error) != HURRAY_OK) continue;
      if (i < 8) { /* magic, flags, reserved: refused by decode; a type: another message */
        assert_true(i == 4 && h.type != want[4]);
        continue;
      }
      if (i >= 16 && i < 24) continue; /* a length: the frame is no longer this one */
      assert_int_equal(hurray__wire_tensor_check(&h, got + WIRE_HEADER_SIZE,
                                                 n - WIRE_HEADER_SIZE, 2, &body, &error),
                       HURRAY_ECHECKSUM);
      assert_non_null(strstr(error.message, put ? "PUT header checksum mismatch (header_check 0x"
                                                : "TENSOR_HEADER header checksum mismatch "
                                                  "(header_check 0x"));
      assert_non_null(strstr(error.message, "): corrupted in transit"));
    }
  }
  hurray__sink_reset(&out);
  hurray__wire_plan_reset(&plan);
  hurray__wire_served_destroy(served);
}

/* §9.6: ERROR for request 7, and GOODBYE. */
static const char kError[] =
    "89 48 52 57 40 00 00 00 07 00 00 00 00 00 00 00 15 00 00 00 00 00 00 00"
    "01 00 00 00 0d 00 00 00 6e 6f 20 74 65 6e 73 6f 72 20 27 79 27";
static const char kGoodbye[] =
    "89 48 52 57 50 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00";

static void error_goodbye_golden(void **state) {
  (void)state;
  FileSink payload = {0}, out = {0};
  hurray__wire_error_encode(HURRAY_EINVAL, "no tensor 'y'", &payload);
  hurray__wire_frame(&out, WIRE_ERROR, 0, 7, payload.data, payload.len);
  assert_bytes(&out, kError);
  HurrayError error = {0};
  assert_int_equal(hurray__wire_error_decode(payload.data, payload.len, &error), HURRAY_EINVAL);
  assert_string_equal(error.message, "peer: no tensor 'y'");
  out.len = 0;
  hurray__wire_frame(&out, WIRE_GOODBYE, 0, 0, NULL, 0);
  assert_bytes(&out, kGoodbye);
  hurray__sink_reset(&payload);
  hurray__sink_reset(&out);
}

/* §7.1: a message longer than 1024 bytes is cut on a character boundary, so the ERROR stays
 * UTF-8; and a receiver keeps the code of an ERROR whose message an older sender cut inside a
 * character, dropping the incomplete tail (issue 20, item 9). */
static void error_messages_cut_on_characters(void **state) {
  (void)state;
  char message[3 * 400 + 1]; /* 400 "\u20ac", 1200 bytes */
  for (int i = 0; i < 400; i++) memcpy(message + 3 * i, "\xe2\x82\xac", 3);
  message[sizeof message - 1] = '\0';
  FileSink payload = {0};
  hurray__wire_error_encode(HURRAY_EINVAL, message, &payload);
  assert_int_equal(hurray__load_le16(payload.data + 4), 1023); /* 341 characters, not 1024 */
  assert_int_equal(payload.len, WIRE_ERROR_FIXED + 1023);
  HurrayError error = {0};
  assert_int_equal(hurray__wire_error_decode(payload.data, payload.len, &error), HURRAY_EINVAL);
  assert_true(hurray__utf8_valid((const uint8_t *)error.message, strlen(error.message)));
  /* the recorder itself cuts on a character: "peer: " + 249 bytes of "\u20ac" fits 255 bytes
   * only as 83 whole characters (255 - 6 = 249 = 3 * 83), and 250 bytes as the same */
  assert_int_equal(strlen(error.message), 6 + 3 * 83);
  /* an older sender's cut: "no \xe2\x82" (the last character incomplete) */
  static const uint8_t cut[] = {1, 0, 0, 0, 5, 0, 0, 0, 'n', 'o', ' ', 0xe2, 0x82};
  assert_int_equal(hurray__wire_error_decode(cut, sizeof cut, &error), HURRAY_EINVAL);
  assert_string_equal(error.message, "peer: no ");
  /* an ill-formed byte anywhere else still makes the frame malformed */
  static const uint8_t bad[] = {1, 0, 0, 0, 4, 0, 0, 0, 'n', 0xff, 'o', ' '};
  assert_int_equal(hurray__wire_error_decode(bad, sizeof bad, &error), HURRAY_EPROTOCOL);
  assert_string_equal(error.message, "malformed ERROR frame");
  /* a sender's own ill-formed bytes (a message naming something that is not UTF-8) are
   * replaced, one '?' each, so what it sends is always UTF-8 */
  FileSink odd = {0};
  hurray__wire_error_encode(HURRAY_EIO, "file 'a\xff\xfe" "b' \xe2\x82", &odd);
  assert_int_equal(hurray__wire_error_decode(odd.data, odd.len, &error), HURRAY_EIO);
  assert_string_equal(error.message, "peer: file 'a??b' ??");
  hurray__sink_reset(&odd);
  hurray__sink_reset(&payload);
}

/* ---- refusals ----------------------------------------------------------------------------- */

/* §9.7: LIST_RESULT for request 3: "w", a dense float32 [2, 3] in one 24-byte buffer. */
static const char kListResult[] =
    "89 48 52 57 11 01 00 00 03 00 00 00 00 00 00 00 38 00 00 00 00 00 00 00"
    "01 00 00 00 00 00 00 00"
    "01 00 00 0a 01 00 00 00 18 00 00 00 00 00 00 00"
    "02 00 00 00 00 00 00 00 02 00 00 00 00 00 00 00"
    "03 00 00 00 00 00 00 00 77 00 00 00 00 00 00 00";

static void expect_list(const uint8_t *payload, size_t len, int status, const char *message) {
  HurrayRemoteTensor *items = NULL;
  uint32_t count = 0;
  HurrayError error = {0};
  assert_int_equal(hurray__wire_list_decode(payload, len, &items, &count, &error), status);
  assert_string_equal(error.message, message);
  free(items);
}

static void list_golden(void **state) {
  (void)state;
  static const int64_t shape[] = {2, 3};
  HurrayArray part = {.shape = shape, .ndim = 2, .dtype = HURRAY_DTYPE_FLOAT32};
  HurrayTensorDesc desc = {.layout = HURRAY_LAYOUT_DENSE, .ndim = 2, .shape = shape,
                           .parts = &part, .nparts = 1, .dtype = HURRAY_DTYPE_FLOAT32};
  FileSink payload = {0}, out = {0};
  hurray__sink_u32(&payload, 1);
  hurray__sink_u32(&payload, 0);
  hurray__wire_list_entry_encode(&payload, "w", 1, &desc, 1, 24);
  assert_int_equal(payload.len, WIRE_LIST_FIXED + hurray__wire_list_entry_size(1, 2));
  hurray__wire_frame(&out, WIRE_LIST_RESULT, WIRE_FLAG_END, 3, payload.data, payload.len);
  assert_bytes(&out, kListResult);
  HurrayRemoteTensor *items = NULL;
  uint32_t count = 0;
  OK(hurray__wire_list_decode(payload.data, payload.len, &items, &count, E));
  assert_int_equal(count, 1);
  assert_string_equal(items[0].name, "w");
  assert_int_equal(items[0].layout, HURRAY_LAYOUT_DENSE);
  assert_int_equal(items[0].dtype, HURRAY_DTYPE_FLOAT32);
  assert_int_equal(items[0].buffer_count, 1);
  assert_int_equal(items[0].data_bytes, 24);
  assert_int_equal(items[0].ndim, 2);
  assert_int_equal(items[0].shape[0], 2);
  assert_int_equal(items[0].shape[1], 3);
  free(items);
  uint8_t *p = payload.data;
  p[WIRE_LIST_FIXED + 16] = 65;
  expect_list(p, payload.len, HURRAY_EPROTOCOL,
              "LIST_RESULT entry 0: ndim 65 above 64 or reserved bytes not zero");
  p[WIRE_LIST_FIXED + 16] = 2;
  p[WIRE_LIST_FIXED + 24 + 7] = 0x80; /* shape[0] negative */
  expect_list(p, payload.len, HURRAY_EPROTOCOL, "listed tensor 'w' has a negative extent");
  p[WIRE_LIST_FIXED + 24 + 7] = 0;
  p[payload.len - 1] = 1;
  expect_list(p, payload.len, HURRAY_EPROTOCOL, "listed name 'w' is not zero-padded");
  p[payload.len - 1] = 0;
  p[0] = 2;
  expect_list(p, payload.len, HURRAY_EPROTOCOL,
              "LIST_RESULT of 56 bytes cannot hold 2 entries, or its reserved bytes are not zero");
  p[0] = 1;
  expect_list(p, payload.len - 8, HURRAY_EPROTOCOL, "LIST_RESULT truncated in entry 0");
  hurray__sink_reset(&payload);
  hurray__sink_reset(&out);
}

/* §9.11 (1.3): METADATA, request 5, for tensor "w"; its METADATA_RESULT with the metadata
 * {"unit": "m"}; and METADATA for the server's metadata (no name). */
static const char kMetadata[] =
    "89 48 52 57 12 00 00 00 05 00 00 00 00 00 00 00 09 00 00 00 00 00 00 00"
    "01 00 00 00 00 00 00 00 77";
static const char kMetadataResult[] =
    "89 48 52 57 13 01 00 00 05 00 00 00 00 00 00 00 21 00 00 00 00 00 00 00"
    "11 00 00 00 00 00 00 00 e7 31 6b df d8 b2 08 b9"
    "06 01 00 00 00 04 00 75 6e 69 74 04 01 00 00 00 6d";
static const char kServerMetadata[] =
    "89 48 52 57 12 00 00 00 06 00 00 00 00 00 00 00 08 00 00 00 00 00 00 00"
    "00 00 00 00 00 00 00 00";

static void expect_metadata_request(const uint8_t *p, size_t len, int status,
                                    const char *message) {
  char name[HURRAY_MAX_NAME + 1];
  size_t n = 0;
  HurrayError error = {0};
  assert_int_equal(hurray__wire_metadata_request_decode(p, len, name, &n, &error), status);
  assert_string_equal(error.message, message);
}

static void expect_metadata_result(const uint8_t *p, size_t len, int status,
                                   const char *message) {
  uint32_t total = 0;
  uint64_t check = 0;
  const uint8_t *bytes = NULL;
  size_t n = 0;
  HurrayError error = {0};
  assert_int_equal(hurray__wire_metadata_result_decode(p, len, &total, &check, &bytes, &n, &error),
                   status);
  assert_string_equal(error.message, message);
}

static void metadata_golden(void **state) {
  (void)state;
  FileSink payload = {0}, out = {0};
  hurray__wire_metadata_request_encode("w", 1, &payload);
  hurray__wire_frame(&out, WIRE_METADATA, 0, 5, payload.data, payload.len);
  assert_bytes(&out, kMetadata);
  char name[HURRAY_MAX_NAME + 1];
  size_t name_len = 0;
  OK(hurray__wire_metadata_request_decode(payload.data, payload.len, name, &name_len, E));
  assert_int_equal(name_len, 1);
  assert_string_equal(name, "w");
  uint8_t *p = payload.data;
  p[3] = 1;
  expect_metadata_request(p, payload.len, HURRAY_EPROTOCOL, "METADATA reserved bytes are not zero");
  p[3] = 0;
  expect_metadata_request(p, payload.len - 1, HURRAY_EPROTOCOL,
                          "METADATA name_length is 1 but the payload holds 0 bytes of name");
  expect_metadata_request(p, 7, HURRAY_EPROTOCOL, "METADATA truncated: 7 bytes");
  p[8] = 0;
  expect_metadata_request(p, payload.len, HURRAY_EPROTOCOL,
                          "METADATA name contains NUL");
  payload.len = out.len = 0;
  hurray__wire_metadata_request_encode(NULL, 0, &payload);
  hurray__wire_frame(&out, WIRE_METADATA, 0, 6, payload.data, payload.len);
  assert_bytes(&out, kServerMetadata);
  OK(hurray__wire_metadata_request_decode(payload.data, payload.len, name, &name_len, E));
  assert_int_equal(name_len, 0);
  /* the answer: the block {"unit": "m"} as file-format.md §7 encodes it */
  static const uint8_t block[] = {0x06, 0x01, 0x00, 0x00, 0x00, 0x04, 0x00, 0x75, 0x6e,
                                  0x69, 0x74, 0x04, 0x01, 0x00, 0x00, 0x00, 0x6d};
  HurrayMetaValue *tree = NULL;
  OK(hurray__meta_decode_tree(block, sizeof block, &tree, E));
  FileSink encoded = {0};
  uint16_t minor = 0;
  OK(hurray__meta_encode(tree, &encoded, &minor, E));
  assert_int_equal(encoded.len, sizeof block);
  assert_memory_equal(encoded.data, block, sizeof block);
  hurray_meta_destroy(tree);
  hurray__sink_reset(&encoded);
  payload.len = out.len = 0;
  assert_int_equal(hurray__xxh3(block, sizeof block), 0xb908b2d8df6b31e7ull);
  hurray__wire_metadata_result_encode(sizeof block, hurray__xxh3(block, sizeof block), block,
                                      sizeof block, &payload);
  hurray__wire_frame(&out, WIRE_METADATA_RESULT, WIRE_FLAG_END, 5, payload.data, payload.len);
  assert_bytes(&out, kMetadataResult);
  WireHeader h;
  OK(hurray__wire_header_decode(out.data, 0, &h, E));
  assert_int_equal(h.flags, WIRE_FLAG_END);
  uint32_t total = 0;
  uint64_t check = 0;
  const uint8_t *bytes = NULL;
  size_t n = 0;
  OK(hurray__wire_metadata_result_decode(payload.data, payload.len, &total, &check, &bytes, &n,
                                         E));
  assert_int_equal(total, sizeof block);
  assert_int_equal(check, 0xb908b2d8df6b31e7ull);
  assert_int_equal(n, sizeof block);
  assert_memory_equal(bytes, block, n);
  p = payload.data;
  p[4] = 1;
  expect_metadata_result(p, payload.len, HURRAY_EPROTOCOL,
                         "METADATA_RESULT reserved bytes are not zero");
  p[4] = 0;
  hurray__store_le32(p, 3);
  expect_metadata_result(p, payload.len, HURRAY_EPROTOCOL,
                         "METADATA_RESULT carries 17 bytes of a 3-byte block");
  hurray__store_le32(p, HURRAY_META_MAX_BYTES + 1);
  expect_metadata_result(p, payload.len, HURRAY_EPROTOCOL,
                         "METADATA_RESULT metadata_length 16777217 exceeds 16777216 bytes");
  expect_metadata_result(p, 15, HURRAY_EPROTOCOL, "METADATA_RESULT truncated: 15 bytes");
  /* a 1.2 peer knows neither type: "unknown frame type" from the header */
  hurray__sink_reset(&payload);
  hurray__sink_reset(&out);
}

/* §9.8: DATA_FD for buffer 0 of request 7, bytes [4096, 4104) of a sealed memfd. */
static const char kDataFd[] =
    "89 48 52 57 23 01 00 00 07 00 00 00 00 00 00 00 18 00 00 00 00 00 00 00"
    "00 00 00 00 01 00 00 00 00 10 00 00 00 00 00 00 08 00 00 00 00 00 00 00";

static void data_fd_golden(void **state) {
  (void)state;
  WireFdRef ref = {.buffer = 0, .kind = WIRE_FD_MEMFD, .file_offset = 4096, .length = 8};
  uint8_t payload[WIRE_DATA_FD_SIZE];
  hurray__wire_fd_ref_encode(&ref, payload);
  FileSink out = {0};
  hurray__wire_frame(&out, WIRE_DATA_FD, WIRE_FLAG_END, 7, payload, sizeof payload);
  assert_bytes(&out, kDataFd);
  WireHeader h;
  OK(hurray__wire_header_decode(out.data, 0, &h, E));
  assert_int_equal(h.type, WIRE_DATA_FD);
  WireFdRef back;
  OK(hurray__wire_fd_ref_decode(payload, sizeof payload, &back, E));
  assert_int_equal(back.kind, WIRE_FD_MEMFD);
  assert_int_equal(back.file_offset, 4096);
  assert_int_equal(back.length, 8);
  HurrayError error = {0};
  payload[4] = 2;
  assert_int_equal(hurray__wire_fd_ref_decode(payload, sizeof payload, &back, &error),
                   HURRAY_EPROTOCOL);
  assert_string_equal(error.message, "DATA_FD kind 2 unknown or reserved bytes not zero");
  payload[4] = 1;
  memset(payload + 16, 0, 8); /* length 0 */
  assert_int_equal(hurray__wire_fd_ref_decode(payload, sizeof payload, &back, &error),
                   HURRAY_EPROTOCOL);
  assert_string_equal(error.message, "DATA_FD bytes [4096, +0) are empty or past 2^63");
  assert_int_equal(hurray__wire_fd_ref_decode(payload, 16, &back, &error), HURRAY_EPROTOCOL);
  assert_string_equal(error.message, "DATA_FD of 16 bytes, not 24");
  hurray__sink_reset(&out);
}

static void expect_header(const char *hex, uint64_t max_data, int status, const char *message) {
  uint8_t b[WIRE_HEADER_SIZE];
  assert_int_equal(unhex(hex, b, sizeof b), WIRE_HEADER_SIZE);
  WireHeader h;
  HurrayError error = {0};
  assert_int_equal(hurray__wire_header_decode(b, max_data, &h, &error), status);
  assert_string_equal(error.message, message);
}

static void header_refusals(void **state) {
  (void)state;
  expect_header("47 45 54 20 2f 20 48 54 54 50 2f 31 2e 31 0d 0a 00 00 00 00 00 00 00 00", 0,
                HURRAY_EPROTOCOL, "not a Hurray wire frame (bad magic 47 45 54 20)");
  expect_header("89 48 52 57 99 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00", 0,
                HURRAY_EPROTOCOL, "unknown frame type 0x99");
  expect_header("89 48 52 57 10 01 00 00 01 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00", 0,
                HURRAY_EPROTOCOL, "LIST frame has unknown flags 0x01");
  expect_header("89 48 52 57 10 00 01 00 01 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00", 0,
                HURRAY_EPROTOCOL, "LIST frame header reserved bytes are not zero");
  expect_header("89 48 52 57 01 00 00 00 00 00 00 00 00 00 00 00 01 00 01 00 00 00 00 00", 0,
                HURRAY_ELIMIT, "CLIENT_HELLO frame of 65537 bytes exceeds the limit of 65536");
  expect_header("89 48 52 57 22 00 00 00 01 00 00 00 00 00 00 00 11 00 10 00 00 00 00 00",
                (1u << 20) + 16, HURRAY_ELIMIT,
                "DATA frame of 1048593 bytes exceeds the limit of 1048592");
}

static void expect_hello(const uint8_t *payload, size_t len, int status, const char *message) {
  WireHello *h = calloc(1, sizeof *h);
  HurrayError error = {0};
  int got = hurray__wire_hello_decode(payload, len, h, &error);
  if (got == HURRAY_OK) got = hurray__wire_devices_check(h, &error);
  assert_int_equal(got, status);
  assert_string_equal(error.message, message);
  free(h);
}

static void hello_refusals(void **state) {
  (void)state;
  uint8_t p[80];
  size_t len = unhex("01 00 00 00 00 00 00 00 00 00 40 00 00 00 00 00"
                     "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
                     "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
                     "01 00 00 00 00 00 00 00 00 00",
                     p, sizeof p);
  p[0] = 2; /* a version from the future: refused from its first four bytes */
  expect_hello(p, 4, HURRAY_EUNSUPPORTED,
               "protocol version 2.0 is not supported (this peer speaks 1.3)");
  p[0] = 1;
  p[56] = 0x42;
  expect_hello(p, len, HURRAY_EDEVICE,
               "device tag 0x42 is reserved (0x09..0xef): not in this protocol version");
  p[56] = 0xff;
  expect_hello(p, len, HURRAY_EDEVICE, "device tag 0xff is invalid");
  p[56] = 0xf5;
  expect_hello(p, len, HURRAY_EPROTOCOL, "private device tag 0xf5 has an invalid name");
  p[56] = 0x01;
  p[57] = 1;
  expect_hello(p, len, HURRAY_EPROTOCOL, "hello truncated in device 0");
  p[57] = 0;
  p[10] = 0;
  p[9] = 1; /* max_frame 256 */
  expect_hello(p, len, HURRAY_EPROTOCOL, "hello max_frame 256 is outside [65536, 1073741824]");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(hello_golden),        cmocka_unit_test(server_hello_golden),
      cmocka_unit_test(auth_golden),         cmocka_unit_test(request_golden),
      cmocka_unit_test(tensor_golden),       cmocka_unit_test(error_goodbye_golden),
      cmocka_unit_test(list_golden),         cmocka_unit_test(data_fd_golden),
      cmocka_unit_test(tensor_header_check_golden),
      cmocka_unit_test(metadata_golden),
      cmocka_unit_test(error_messages_cut_on_characters),
      cmocka_unit_test(header_refusals),
      cmocka_unit_test(hello_refusals),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
