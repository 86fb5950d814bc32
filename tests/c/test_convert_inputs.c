/* test_convert_inputs.c -- every class of malformed input the converters read is rejected
 * with its status and a message naming where and what: safetensors headers (the length, each
 * kind of JSON error, each schema violation, the tiling of the data), .npy preambles (magic,
 * version, length, each part of the dict literal, the data size) and .npz archives (the end
 * records, the central directory, local headers, bounds, overlaps, CRC-32, deflate streams and
 * declared sizes). Each failure also leaves no output behind (CONVERT_FAILS). Also the in-tree
 * CRC-32 of zip members (ADR-073), against zlib's. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <zlib.h>

#include <cmocka.h>

#include "convert.h"
#include "test_convert_helpers.h"

/* ---- safetensors -------------------------------------------------------------------------- */

/* A safetensors file: the 8-byte length of `json`, `json`, `data_len` zero bytes. */
static void write_safetensors(const char *path, const char *json, size_t data_len) {
  size_t n = strlen(json);
  uint8_t *file = calloc(1, 8 + n + data_len);
  assert_non_null(file);
  for (int i = 0; i < 8; i++) file[i] = (uint8_t)((uint64_t)n >> (8 * i));
  memcpy(file + 8, json, n);
  write_bytes(path, file, 8 + n + data_len);
  free(file);
}

#define T(name) "{\"" name "\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}"

static void safetensors_json_errors(void **state) {
  (void)state;
  static const struct {
    const char *json;
    size_t data;
    int status;
    const char *text;
  } kCases[] = {
      /* structure */
      {"[]", 0, HURRAY_EFORMAT, "byte 8: expected '{' starting the header, found '['"},
      {"", 0, HURRAY_EFORMAT, "expected '{' starting the header, found the end of the header"},
      {"{\"a\" {}}", 0, HURRAY_EFORMAT, "byte 13: expected ':' after a tensor name, found '{'"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]} x", 8, HURRAY_EFORMAT,
       "expected ',' or '}' after a header entry, found 'x'"},
      {T("a") " x", 8, HURRAY_EFORMAT,
       "expected only whitespace after the header's object, found 'x'"},
      {T("a") "{}", 8, HURRAY_EFORMAT, "only whitespace after"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},}", 8, HURRAY_EFORMAT,
       "expected a tensor name, found '}'"},
      /* strings */
      {"{\"a", 0, HURRAY_EFORMAT, "byte 9: unterminated string"},
      {"{\"a\\x\":{}}", 0, HURRAY_EFORMAT, "byte 11: invalid escape sequence"},
      {"{\"a\\u12\":{}}", 0, HURRAY_EFORMAT, "\\u escape needs 4 hex digits"},
      {"{\"\\udc00\":{}}", 0, HURRAY_EFORMAT, "\\uDC00 is a low surrogate without a high one"},
      {"{\"\\ud800x\":{}}", 0, HURRAY_EFORMAT, "is not followed by a \\u low surrogate"},
      {"{\"\\ud800\\u0041\":{}}", 0, HURRAY_EFORMAT, "is followed by \\u0041, not a low surrogate"},
      {"{\"a\tb\":{}}", 0, HURRAY_EFORMAT, "byte 11: control character 0x09 must be escaped"},
      {"{\"a\xff\":{}}", 0, HURRAY_EFORMAT, "byte 9: the string is not valid UTF-8"},
      {"{\"a\xc0\x80\":{}}", 0, HURRAY_EFORMAT, "not valid UTF-8"}, /* overlong NUL */
      {"{\"\\u0000\":{}}", 0, HURRAY_EUNSUPPORTED, "contains NUL"},
      {"{\"\":{}}", 0, HURRAY_EUNSUPPORTED, "the tensor name (a Hurray name) is empty"},
      /* numbers and types where they are not allowed */
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8, HURRAY_EFORMAT,
       "must be an integer"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2e1],\"data_offsets\":[0,8]}}", 8, HURRAY_EFORMAT,
       "must be an integer"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, HURRAY_EFORMAT,
       "expected an extent (a non-negative integer), found '-'"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[02],\"data_offsets\":[0,8]}}", 8, HURRAY_EFORMAT,
       "has a leading zero"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[true],\"data_offsets\":[0,8]}}", 8, HURRAY_EFORMAT,
       "expected an extent (a non-negative integer), found 't'"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[[2]],\"data_offsets\":[0,8]}}", 8, HURRAY_EFORMAT,
       "expected an extent (a non-negative integer), found '['"}, /* nesting */
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[18446744073709551616],\"data_offsets\":[0,8]}}", 8,
       HURRAY_EOVERFLOW, "does not fit in 64 bits"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387905],\"data_offsets\":[0,8]}}", 8,
       HURRAY_ELIMIT, "exceeds 2^62"},
      {"{\"a\":null}", 0, HURRAY_EFORMAT, "expected '{' starting a tensor entry, found 'n'"},
      {"{\"a\":{\"dtype\":null,\"shape\":[2],\"data_offsets\":[0,8]}}", 8, HURRAY_EFORMAT,
       "expected a dtype string, found 'n'"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,9]}}", 8, HURRAY_EFORMAT,
       "expected ']' ending data_offsets (two integers), found ','"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2] \"data_offsets\":[0,8]}}", 8, HURRAY_EFORMAT,
       "expected ',' or '}' in a tensor entry, found '\"'"},
      /* the schema */
      {"{\"a\":{\"dtype\":\"F128\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, HURRAY_EDTYPE,
       "unknown safetensors dtype 'F128'"},
      {"{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
       HURRAY_EFORMAT, "duplicate field 'dtype'"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8,
       HURRAY_EFORMAT, "unknown field 'x'"},
      {"{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, HURRAY_EFORMAT,
       "the tensor entry lacks shape"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
       "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
       16, HURRAY_EFORMAT, "duplicate tensor name 'a'"},
      {"{\"__metadata__\":{\"k\":1}}", 0, HURRAY_EFORMAT,
       "expected a string (metadata values are strings), found '1'"},
      {"{\"__metadata__\":{\"k\":\"v\",\"k\":\"w\"}}", 0, HURRAY_EFORMAT,
       "duplicate metadata key 'k'"},
      {"{\"__metadata__\":{},\"__metadata__\":{}}", 0, HURRAY_EFORMAT, "duplicate __metadata__"},
      {"{\"__metadata__\":[]}", 0, HURRAY_EFORMAT, "expected '{' starting __metadata__ (or null)"},
      {"{\"__metadata__\":{\"\":\"v\"}}", 0, HURRAY_EUNSUPPORTED,
       "the metadata key (a Hurray name) is empty"},
      /* the data region */
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, HURRAY_EFORMAT,
       "leave a gap: the data must be tiled without gap or overlap, so it should begin at 0"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
       "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
       12, HURRAY_EFORMAT, "overlap the previous tensor"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,12]}}", 12, HURRAY_EFORMAT,
       "do not span the 8 bytes of 2 float32 elements"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, HURRAY_EFORMAT,
       "should begin at 0"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, HURRAY_EFORMAT,
       "reach past the end of the data (4 bytes)"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 9, HURRAY_EFORMAT,
       "trailing bytes"},
      {"{\"a\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", 2, HURRAY_EFORMAT,
       "3 elements of 4 bits are not a whole number of bytes"},
      {"{\"a\":{\"dtype\":\"U64\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}", 8,
       HURRAY_EOVERFLOW, "overflows"},
  };
  for (size_t i = 0; i < sizeof kCases / sizeof kCases[0]; i++) {
    write_safetensors(path_of("bad.safetensors"), kCases[i].json, kCases[i].data);
    CONVERT_FAILS(path_of("bad.safetensors"), path_of("bad.hurray"), NULL, kCases[i].status,
                  kCases[i].text);
  }
  /* and what is accepted: null metadata, whitespace, any key order, zero tensors */
  write_safetensors(path_of("ok.safetensors"),
                    "\t{ \"__metadata__\" : null , \"a\" : { \"data_offsets\" : [ 0 , 8 ] , "
                    "\"shape\" : [ 2 ] , \"dtype\" : \"F32\" } }\r\n  ",
                    8);
  OK(hurray_convert(path_of("ok.safetensors"), path_of("ok.hurray"), NULL, E));
  write_safetensors(path_of("ok.safetensors"), "{}", 0);
  OK(hurray_convert(path_of("ok.safetensors"), path_of("ok.hurray"), NULL, E));
}

static void safetensors_length_errors(void **state) {
  (void)state;
  write_bytes(path_of("short.safetensors"), "\x02\0\0\0", 4);
  CONVERT_FAILS(path_of("short.safetensors"), path_of("x.hurray"), NULL, HURRAY_EFORMAT,
                "truncated: a safetensors file starts with an 8-byte header length");
  uint8_t big[16] = {0x01, 0xe1, 0xf5, 0x05, 0, 0, 0, 0, '{', '}'}; /* 100000001 */
  write_bytes(path_of("big.safetensors"), big, sizeof big);
  CONVERT_FAILS(path_of("big.safetensors"), path_of("x.hurray"), NULL, HURRAY_ELIMIT,
                "the header length 100000001 exceeds 100000000 bytes");
  uint8_t past[16] = {0x09, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
  write_bytes(path_of("past.safetensors"), past, sizeof past);
  CONVERT_FAILS(path_of("past.safetensors"), path_of("x.hurray"), NULL, HURRAY_EFORMAT,
                "reaches past the end of the file (16 bytes): truncated");
  write_bytes(path_of("empty.safetensors"), "", 0);
  CONVERT_FAILS(path_of("empty.safetensors"), path_of("x.hurray"), NULL, HURRAY_EFORMAT,
                "the input is empty");
  /* a name longer than a Hurray name */
  char json[600];
  char name[300];
  memset(name, 'n', 256);
  name[256] = '\0';
  snprintf(json, sizeof json, T("%s"), name);
  write_safetensors(path_of("long.safetensors"), json, 8);
  CONVERT_FAILS(path_of("long.safetensors"), path_of("x.hurray"), NULL, HURRAY_ELIMIT,
                "longer than 255 bytes");
}

/* ---- .npy --------------------------------------------------------------------------------- */

static void write_npy(const char *path, int version, const char *dict, size_t data_len) {
  size_t n = strlen(dict), at = 8;
  uint8_t *file = calloc(1, 12 + n + data_len);
  assert_non_null(file);
  memcpy(file, "\x93NUMPY", 6);
  file[6] = (uint8_t)version;
  for (size_t i = 0; i < (version == 1 ? 2u : 4u); i++) file[at++] = (uint8_t)(n >> (8 * i));
  memcpy(file + at, dict, n);
  write_bytes(path, file, at + n + data_len);
  free(file);
}

static void npy_errors(void **state) {
  (void)state;
  static const struct {
    const char *dict;
    size_t data;
    int status;
    const char *text;
  } kCases[] = {
      {"{'descr': '<f4', 'fortran_order': False}\n", 0, HURRAY_EFORMAT,
       "the .npy header lacks 'shape'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}\n", 8, HURRAY_EFORMAT,
       "byte 66: unknown key 'x'"},
      {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}\n", 8,
       HURRAY_EFORMAT, "duplicate key 'descr'"},
      {"{'descr': '<U5', 'fortran_order': False, 'shape': (2,)}\n", 40, HURRAY_EUNSUPPORTED,
       "descr '<U5' has no Hurray dtype"},
      {"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,)}\n", 8, HURRAY_EUNSUPPORTED,
       "structured dtypes"},
      {"{'descr': 'f4', 'fortran_order': False, 'shape': (2,)}\n", 8, HURRAY_EUNSUPPORTED,
       "descr 'f4' has no Hurray dtype"},
      {"{'descr': '|f4', 'fortran_order': False, 'shape': (2,)}\n", 8, HURRAY_EFORMAT,
       "needs a byte order: '<' or '>'"},
      {"{'descr': '<f4', 'fortran_order': yes, 'shape': (2,)}\n", 8, HURRAY_EFORMAT,
       "expected True or False for fortran_order, found 'y'"},
      {"{'descr': '<f4', 'fortran_order': Falsey, 'shape': (2,)}\n", 8, HURRAY_EFORMAT,
       "expected True or False for fortran_order"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2)}\n", 8, HURRAY_EFORMAT,
       "the shape (n) is a number, not a tuple"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}\n", 8, HURRAY_EFORMAT,
       "expected an extent (a non-negative integer), found '-'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3L)}\n", 24, HURRAY_EFORMAT,
       "expected ',' or ')' in the shape tuple, found 'L'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': [2]}\n", 8, HURRAY_EFORMAT,
       "expected '(' starting the shape tuple"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} x\n", 8, HURRAY_EFORMAT,
       "expected only spaces and a newline after the header dict, found 'x'"},
      {"{'descr': '<f4\\n', 'fortran_order': False, 'shape': (2,)}\n", 8, HURRAY_EFORMAT,
       "printable ASCII without escapes"},
      {"{'descr' '<f4', 'fortran_order': False, 'shape': (2,)}\n", 8, HURRAY_EFORMAT,
       "byte 19: expected ':' after a key, found '''"},
      {"['descr']\n", 0, HURRAY_EFORMAT, "byte 10: expected '{' starting the .npy header dict"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,)}\n", 7, HURRAY_EFORMAT,
       "promises 8 bytes of data (2 elements) but 7 follow it: truncated"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,)}\n", 9, HURRAY_EFORMAT,
       "trailing bytes"},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904, 4)}\n", 0,
       HURRAY_EOVERFLOW, "overflows"},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387905,)}\n", 0,
       HURRAY_ELIMIT, "exceeds 2^62"},
  };
  for (size_t i = 0; i < sizeof kCases / sizeof kCases[0]; i++) {
    write_npy(path_of("bad.npy"), 1, kCases[i].dict, kCases[i].data);
    CONVERT_FAILS(path_of("bad.npy"), path_of("bad.hurray"), NULL, kCases[i].status,
                  kCases[i].text);
  }
  /* the preamble */
  write_bytes(path_of("bad.npy"), "\x93NUMPX\x01\x00\x00\x00", 10);
  CONVERT_FAILS(path_of("bad.npy"), path_of("bad.hurray"), NULL, HURRAY_EFORMAT,
                "not a .npy file (bad magic)");
  write_bytes(path_of("bad.npy"), "\x93NUM", 4);
  CONVERT_FAILS(path_of("bad.npy"), path_of("bad.hurray"), NULL, HURRAY_EFORMAT, "truncated");
  write_npy(path_of("bad.npy"), 4, "{}", 0);
  CONVERT_FAILS(path_of("bad.npy"), path_of("bad.hurray"), NULL, HURRAY_EUNSUPPORTED,
                ".npy format version 4.0");
  write_bytes(path_of("bad.npy"), "\x93NUMPY\x01\x00\x40\x00{", 11);
  CONVERT_FAILS(path_of("bad.npy"), path_of("bad.hurray"), NULL, HURRAY_EFORMAT,
                "truncated: the .npy header of 64 bytes ends past the end");
  write_bytes(path_of("bad.npy"), "\x93NUMPY\x02\x00\x11\x27\x00\x00", 12);
  CONVERT_FAILS(path_of("bad.npy"), path_of("bad.hurray"), NULL, HURRAY_ELIMIT,
                "the .npy header is 10001 bytes, more than 10000");
  /* a rank over 64 */
  char dict[400] = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
  for (int i = 0; i < 65; i++) strcat(dict, "1,");
  strcat(dict, ")}\n");
  write_npy(path_of("bad.npy"), 1, dict, 4);
  CONVERT_FAILS(path_of("bad.npy"), path_of("bad.hurray"), NULL, HURRAY_ELIMIT,
                "the shape has more than 64 dimensions");
  /* a stem that is no name */
  write_npy(path_of("\xff.npy"), 1, "{'descr': '<f4', 'fortran_order': False, 'shape': ()}\n", 4);
  CONVERT_FAILS(path_of("\xff.npy"), path_of("bad.hurray"), NULL, HURRAY_EINVAL,
                "is no tensor name: give the .npy array a name");
}

/* ---- .npz --------------------------------------------------------------------------------- */

/* A zip built by hand, member by member, recording where each part lies so tests can damage
 * exactly one field. */
typedef struct Zip {
  uint8_t bytes[8192];
  size_t len;
  size_t local[4];   /* local header offsets */
  size_t central[4]; /* central entry offsets */
  size_t eocd;
  int count;
  struct {
    const char *name;
    uint32_t crc;
    size_t compressed, size;
    uint16_t method;
  } m[4];
} Zip;

static void put16(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}
static void put32(uint8_t *p, uint32_t v) {
  put16(p, v & 0xFFFF);
  put16(p + 2, v >> 16);
}

static size_t raw_deflate(const uint8_t *in, size_t n, uint8_t *out, size_t cap) {
  z_stream z = {0};
  assert_int_equal(deflateInit2(&z, 9, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY), Z_OK);
  z.next_in = (Bytef *)(uintptr_t)in;
  z.avail_in = (uInt)n;
  z.next_out = out;
  z.avail_out = (uInt)cap;
  assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
  size_t got = cap - z.avail_out;
  deflateEnd(&z);
  return got;
}

static void zip_add(Zip *z, const char *name, const uint8_t *data, size_t size, uint16_t method) {
  int i = z->count++;
  uint8_t packed[4096];
  size_t compressed = method == 8 ? raw_deflate(data, size, packed, sizeof packed) : size;
  if (method == 0) memcpy(packed, data, size);
  z->m[i].name = name;
  z->m[i].crc = (uint32_t)crc32(0, data, (uInt)size);
  z->m[i].compressed = compressed;
  z->m[i].size = size;
  z->m[i].method = method;
  uint8_t *h = z->bytes + z->len;
  z->local[i] = z->len;
  memset(h, 0, 30);
  put32(h, 0x04034b50);
  put16(h + 4, 20);
  put16(h + 8, method);
  put32(h + 14, z->m[i].crc);
  put32(h + 18, (uint32_t)compressed);
  put32(h + 22, (uint32_t)size);
  put16(h + 26, (uint32_t)strlen(name));
  memcpy(h + 30, name, strlen(name));
  z->len += 30 + strlen(name);
  memcpy(z->bytes + z->len, packed, compressed);
  z->len += compressed;
}

static void zip_finish(Zip *z) {
  size_t cd = z->len;
  for (int i = 0; i < z->count; i++) {
    uint8_t *h = z->bytes + z->len;
    z->central[i] = z->len;
    memset(h, 0, 46);
    put32(h, 0x02014b50);
    put16(h + 4, 20);
    put16(h + 6, 20);
    put16(h + 10, z->m[i].method);
    put32(h + 16, z->m[i].crc);
    put32(h + 20, (uint32_t)z->m[i].compressed);
    put32(h + 24, (uint32_t)z->m[i].size);
    put16(h + 28, (uint32_t)strlen(z->m[i].name));
    put32(h + 42, (uint32_t)z->local[i]);
    memcpy(h + 46, z->m[i].name, strlen(z->m[i].name));
    z->len += 46 + strlen(z->m[i].name);
  }
  uint8_t *e = z->bytes + z->len;
  z->eocd = z->len;
  memset(e, 0, 22);
  put32(e, 0x06054b50);
  put16(e + 8, (uint32_t)z->count);
  put16(e + 10, (uint32_t)z->count);
  put32(e + 12, (uint32_t)(z->len - cd));
  put32(e + 16, (uint32_t)cd);
  z->len += 22;
}

/* An npy image of a float64 [n] array. */
static size_t npy_image(uint8_t *out, size_t n) {
  char dict[128];
  int len =
      snprintf(dict, sizeof dict, "{'descr': '<f8', 'fortran_order': False, 'shape': (%zu,), }", n);
  memcpy(out, "\x93NUMPY\x01\x00\x76\x00", 10);
  memset(out + 10, ' ', 117);
  memcpy(out + 10, dict, (size_t)len);
  out[127] = '\n';
  for (size_t i = 0; i < n; i++) {
    double v = (double)i;
    memcpy(out + 128 + 8 * i, &v, 8);
  }
  return 128 + 8 * n;
}

/* Two members, `a.npy` stored and `b.npy` deflated. */
static void good_zip(Zip *z) {
  memset(z, 0, sizeof *z);
  uint8_t npy[1024];
  size_t n = npy_image(npy, 16);
  zip_add(z, "a.npy", npy, n, 0);
  n = npy_image(npy, 100);
  zip_add(z, "b.npy", npy, n, 8);
  zip_finish(z);
}

static void check_zip(Zip *z, int status, const char *text) {
  write_bytes(path_of("bad.npz"), z->bytes, z->len);
  CONVERT_FAILS(path_of("bad.npz"), path_of("bad.hurray"), NULL, status, text);
}

static void npz_errors(void **state) {
  (void)state;
  Zip z;
  good_zip(&z);
  write_bytes(path_of("good.npz"), z.bytes, z.len);
  OK(hurray_convert(path_of("good.npz"), path_of("good.hurray"), NULL, E));
  uint8_t values[800];
  assert_int_equal(c_order_bytes(path_of("good.hurray"), "b", values, sizeof values), 800);
  double v99;
  memcpy(&v99, values + 8 * 99, 8);
  assert_true(v99 == 99.0);

  /* truncated: the end record is gone */
  z.len -= 10;
  check_zip(&z, HURRAY_EFORMAT, "not a zip file: no end of central directory record");
  write_bytes(path_of("bad.npz"), "PK", 2);
  CONVERT_FAILS(path_of("bad.npz"), path_of("bad.hurray"), NULL, HURRAY_EFORMAT,
                "shorter than the 22-byte end record");
  /* CRC-32 of a stored member and of a deflated one */
  good_zip(&z);
  z.bytes[z.local[0] + 30 + 5 + 200] ^= 1;
  check_zip(&z, HURRAY_ECHECKSUM, "member 'a.npy': CRC-32 mismatch");
  good_zip(&z);
  put32(z.bytes + z.central[1] + 16, z.m[1].crc ^ 1);
  put32(z.bytes + z.local[1] + 14, z.m[1].crc ^ 1);
  check_zip(&z, HURRAY_ECHECKSUM, "member 'b.npy': CRC-32 mismatch");
  /* a member outside the file, or past the central directory */
  good_zip(&z);
  put32(z.bytes + z.central[1] + 42, 0x7FFFFFF0);
  check_zip(&z, HURRAY_EBOUNDS, "is not before the central directory");
  good_zip(&z);
  put32(z.bytes + z.central[0] + 20, 5000);
  put32(z.bytes + z.central[0] + 24, 5000);
  put32(z.bytes + z.local[0] + 18, 5000);
  put32(z.bytes + z.local[0] + 22, 5000);
  check_zip(&z, HURRAY_EBOUNDS, "run past the central directory");
  /* overlapping members: the second entry points into the first's data */
  good_zip(&z);
  put32(z.bytes + z.central[1] + 42, (uint32_t)z.local[0]);
  check_zip(&z, HURRAY_EFORMAT, "names another file");
  /* the same member listed twice */
  memset(&z, 0, sizeof z);
  uint8_t npy[1024];
  size_t n = npy_image(npy, 4);
  zip_add(&z, "a.npy", npy, n, 0);
  z.m[1] = z.m[0];
  z.local[1] = z.local[0];
  z.count = 2;
  zip_finish(&z);
  check_zip(&z, HURRAY_EFORMAT, "members 'a.npy' and 'a.npy' overlap");
  /* local and central headers disagree */
  good_zip(&z);
  put32(z.bytes + z.local[0] + 22, 17);
  check_zip(&z, HURRAY_EFORMAT, "disagrees with the central directory");
  /* the central directory outside the file; more entries announced than fit */
  good_zip(&z);
  put32(z.bytes + z.eocd + 16, 0x7FFFFFFF);
  check_zip(&z, HURRAY_EBOUNDS, "the central directory");
  good_zip(&z);
  put16(z.bytes + z.eocd + 8, 3);
  put16(z.bytes + z.eocd + 10, 3);
  check_zip(&z, HURRAY_EFORMAT, "3 members cannot fit in a central directory of 102 bytes");
  good_zip(&z);
  put32(z.bytes + z.central[1], 0x02014b51);
  check_zip(&z, HURRAY_EFORMAT, "expected a central directory entry");
  good_zip(&z);
  put16(z.bytes + z.eocd + 8, 1);
  put16(z.bytes + z.eocd + 10, 1);
  check_zip(&z, HURRAY_EFORMAT, "follow the 1 entries the end record announces");
  /* a name overrunning the central directory */
  good_zip(&z);
  put16(z.bytes + z.central[1] + 28, 60000);
  check_zip(&z, HURRAY_EFORMAT, "overrun the central directory");
  /* a zip bomb: a declared size deflate cannot produce from the compressed bytes */
  good_zip(&z);
  put32(z.bytes + z.central[1] + 24, 0x7FFFFFFF);
  check_zip(&z, HURRAY_EFORMAT, "more than deflate can produce (a zip bomb?)");
  /* a deflate stream longer than declared, and one shorter */
  good_zip(&z);
  put32(z.bytes + z.central[1] + 24, (uint32_t)z.m[1].size - 8);
  put32(z.bytes + z.local[1] + 22, (uint32_t)z.m[1].size - 8);
  check_zip(&z, HURRAY_EFORMAT, "member 'b.npy' inflates past its declared 920 bytes");
  good_zip(&z);
  put32(z.bytes + z.central[1] + 24, (uint32_t)z.m[1].size + 8);
  put32(z.bytes + z.local[1] + 22, (uint32_t)z.m[1].size + 8);
  check_zip(&z, HURRAY_EFORMAT,
            "member 'b.npy': the deflate stream gives 928 bytes of 936 declared");
  /* corrupt deflate data */
  good_zip(&z);
  memset(z.bytes + z.local[1] + 30 + 5, 0xFF, 8);
  check_zip(&z, HURRAY_EFORMAT, "member 'b.npy'");
  /* encrypted, another method, not .npy, duplicate names, multi-disk */
  good_zip(&z);
  put16(z.bytes + z.central[0] + 8, 1);
  check_zip(&z, HURRAY_EUNSUPPORTED, "member 'a.npy' is encrypted");
  good_zip(&z);
  put16(z.bytes + z.central[0] + 10, 12);
  check_zip(&z, HURRAY_EUNSUPPORTED, "uses compression method 12");
  memset(&z, 0, sizeof z);
  zip_add(&z, "a.txt", (const uint8_t *)"hello", 5, 0);
  zip_finish(&z);
  check_zip(&z, HURRAY_EUNSUPPORTED, "member 'a.txt' is not a .npy array");
  memset(&z, 0, sizeof z);
  zip_add(&z, "a.npy", npy, n, 0);
  zip_add(&z, "a.npy", npy, n, 0);
  zip_finish(&z);
  check_zip(&z, HURRAY_EFORMAT, "two members are named 'a.npy'");
  good_zip(&z);
  put16(z.bytes + z.eocd + 4, 1);
  check_zip(&z, HURRAY_EUNSUPPORTED, "multi-disk");
  /* a bad .npy inside a member names the member */
  memset(&z, 0, sizeof z);
  zip_add(&z, "c.npy", (const uint8_t *)"\x93NUMPY\x09\x00", 8, 0);
  zip_finish(&z);
  check_zip(&z, HURRAY_EUNSUPPORTED, "member 'c.npy': byte 41: .npy format version 9.0");
  /* the ZIP64 end record is named by a locator that points nowhere */
  good_zip(&z);
  memmove(z.bytes + z.eocd + 20, z.bytes + z.eocd, 22);
  memset(z.bytes + z.eocd, 0, 20);
  put32(z.bytes + z.eocd, 0x07064b50);
  put32(z.bytes + z.eocd + 8, 3);
  put32(z.bytes + z.eocd + 16, 1);
  z.len += 20;
  check_zip(&z, HURRAY_EFORMAT, "no ZIP64 end of central directory record there");
}

/* ---- CRC-32 ------------------------------------------------------------------------------- */

/* hurray__crc32 equals zlib's crc32 for every length 0..300 at every alignment 0..7, when
 * continued across any split, and for the check value of the CRC catalogue ("123456789"). */
static void crc32_matches_zlib(void **state) {
  (void)state;
  assert_int_equal(hurray__crc32(0, (const uint8_t *)"123456789", 9), 0xCBF43926u);
  assert_int_equal(hurray__crc32(0, NULL, 0), 0);
  enum { N = 300 };
  uint8_t bytes[N + 8];
  for (size_t i = 0; i < sizeof bytes; i++) bytes[i] = (uint8_t)(i * 151 + 7);
  for (size_t at = 0; at < 8; at++) {
    for (size_t n = 0; n <= N; n++) {
      uint32_t want = (uint32_t)crc32(0, bytes + at, (uInt)n);
      if (hurray__crc32(0, bytes + at, n) != want) fail_msg("%zu bytes at %zu", n, at);
      size_t split = n / 3;
      uint32_t parts = hurray__crc32(hurray__crc32(0, bytes + at, split), bytes + at + split,
                                     n - split);
      if (parts != want) fail_msg("%zu bytes at %zu, split at %zu", n, at, split);
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(crc32_matches_zlib),
      cmocka_unit_test(safetensors_json_errors),
      cmocka_unit_test(safetensors_length_errors),
      cmocka_unit_test(npy_errors),
      cmocka_unit_test(npz_errors),
  };
  return cmocka_run_group_tests(tests, make_dir, remove_dir);
}
