/* npy.c -- the .npy preamble: "\x93NUMPY", a version byte pair (1.0, 2.0 or 3.0), a
 * little-endian header length (u16 for 1.0, u32 after), then a Python dict literal such as
 *
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
 *
 * padded with spaces and a newline (numpy pads the preamble to a multiple of 64 bytes). The
 * literal is parsed by a small grammar of exactly what numpy writes and reads back: strings
 * in single or double quotes (without escapes), True and False, tuples of decimal integers;
 * the three keys exactly once each. numpy evaluates the literal with ast.literal_eval; this
 * accepts a subset of what that accepts (no comments, string concatenation, escapes,
 * underscores in numbers, or Python 2 'L' suffixes), which is everything numpy writes. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "convert.h"

#define NPY_MAGIC "\x93NUMPY"
enum { NPY_MAGIC_SIZE = 6 };

typedef struct NpyType {
  const char *code; /* after the byte-order character */
  uint8_t dtype;
  uint8_t itemsize;
  uint8_t swap; /* bytes per byte-swapped unit: complex swaps its two halves separately */
} NpyType;

static const NpyType kNpyTypes[] = {
    {"b1", HURRAY_DTYPE_BOOL, 1, 1},      {"i1", HURRAY_DTYPE_INT8, 1, 1},
    {"u1", HURRAY_DTYPE_UINT8, 1, 1},     {"i2", HURRAY_DTYPE_INT16, 2, 2},
    {"i4", HURRAY_DTYPE_INT32, 4, 4},     {"i8", HURRAY_DTYPE_INT64, 8, 8},
    {"u2", HURRAY_DTYPE_UINT16, 2, 2},    {"u4", HURRAY_DTYPE_UINT32, 4, 4},
    {"u8", HURRAY_DTYPE_UINT64, 8, 8},    {"f2", HURRAY_DTYPE_FLOAT16, 2, 2},
    {"f4", HURRAY_DTYPE_FLOAT32, 4, 4},   {"f8", HURRAY_DTYPE_FLOAT64, 8, 8},
    {"c8", HURRAY_DTYPE_COMPLEX64, 8, 4}, {"c16", HURRAY_DTYPE_COMPLEX128, 16, 8},
};
enum { NPY_TYPE_COUNT = sizeof kNpyTypes / sizeof kNpyTypes[0] };

const char *hurray__npy_descr(int dtype) {
  static const char *const kDescr[] = {"|b1", "|i1", "|u1", "<i2", "<i4", "<i8", "<u2",
                                       "<u4", "<u8", "<f2", "<f4", "<f8", "<c8", "<c16"};
  for (int i = 0; i < NPY_TYPE_COUNT; i++) {
    if (kNpyTypes[i].dtype == dtype) return kDescr[i];
  }
  return NULL;
}

/* ---- the dict literal --------------------------------------------------------------------- */

/* A quoted string of printable ASCII without backslashes; [*out, *out + *len) in the text. */
static int string(TextCursor *l, const uint8_t **out, size_t *len, const char *what,
                  HurrayError *error) {
  hurray__cursor_skip_space(l);
  if (l->at >= l->len || (l->text[l->at] != '\'' && l->text[l->at] != '"')) {
    return hurray__cursor_unexpected(l, what, error);
  }
  uint8_t quote = l->text[l->at];
  size_t start = ++l->at;
  while (l->at < l->len && l->text[l->at] != quote) {
    uint8_t c = l->text[l->at];
    if (c < 0x20 || c >= 0x7F || c == '\\') {
      return hurray__fail(error, HURRAY_EFORMAT,
                          "byte %" PRIu64
                          ": a .npy header string holds only printable ASCII "
                          "without escapes",
                          l->base + l->at);
    }
    l->at++;
  }
  if (l->at >= l->len) {
    return hurray__fail(error, HURRAY_EFORMAT, "byte %" PRIu64 ": unterminated string",
                        l->base + start - 1);
  }
  *out = l->text + start;
  *len = l->at - start;
  l->at++;
  return HURRAY_OK;
}

static bool word(TextCursor *l, const char *w) {
  size_t n = strlen(w);
  hurray__cursor_skip_space(l);
  if (l->len - l->at < n || memcmp(l->text + l->at, w, n) != 0) return false;
  /* not a prefix of a longer identifier */
  if (l->len - l->at > n) {
    uint8_t c = l->text[l->at + n];
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_') {
      return false;
    }
  }
  l->at += n;
  return true;
}

static int extent(TextCursor *l, int64_t *out, HurrayError *error) {
  hurray__cursor_skip_space(l);
  uint64_t at = l->base + l->at, v = 0;
  size_t first = l->at;
  while (l->at < l->len && l->text[l->at] >= '0' && l->text[l->at] <= '9') {
    if (hurray__mul_u64(v, 10, &v) || hurray__add_u64(v, (uint64_t)(l->text[l->at] - '0'), &v) ||
        v > (uint64_t)HURRAY_MAX_DIM) {
      return hurray__fail(error, HURRAY_ELIMIT, "byte %" PRIu64 ": an extent exceeds 2^62", at);
    }
    l->at++;
  }
  if (l->at == first) {
    return hurray__cursor_unexpected(l, "an extent (a non-negative integer)", error);
  }
  if (l->text[first] == '0' && l->at - first > 1) {
    return hurray__fail(error, HURRAY_EFORMAT, "byte %" PRIu64 ": an extent has a leading zero",
                        at);
  }
  *out = (int64_t)v;
  return HURRAY_OK;
}

/* A tuple: () | (n,) | (n, m, ...) with an optional trailing comma; (n) is no tuple. */
static int shape_tuple(TextCursor *l, NpyHeader *h, HurrayError *error) {
  uint64_t open = hurray__cursor_offset(l);
  int status = hurray__cursor_expect(l, '(', "'(' starting the shape tuple", error);
  if (status != HURRAY_OK || hurray__cursor_accept(l, ')')) return status;
  h->ndim = 0;
  bool comma = false;
  do {
    if (hurray__cursor_accept(l, ')')) return HURRAY_OK; /* after a trailing comma */
    if (h->ndim == HURRAY_MAX_NDIM) {
      return hurray__fail(error, HURRAY_ELIMIT,
                          "byte %" PRIu64 ": the shape has more than %d dimensions",
                          l->base + l->at, HURRAY_MAX_NDIM);
    }
    status = extent(l, &h->shape[h->ndim++], error);
    if (status != HURRAY_OK) return status;
    comma = hurray__cursor_accept(l, ',');
  } while (comma);
  status = hurray__cursor_expect(l, ')', "',' or ')' in the shape tuple", error);
  if (status == HURRAY_OK && h->ndim == 1) {
    return hurray__fail(error, HURRAY_EFORMAT,
                        "byte %" PRIu64 ": the shape (n) is a number, not a tuple: write (n,)",
                        open);
  }
  return status;
}

static int descr(TextCursor *l, NpyHeader *h, HurrayError *error) {
  uint64_t at = hurray__cursor_offset(l);
  if (l->at < l->len && l->text[l->at] == '[') {
    return hurray__fail(error, HURRAY_EUNSUPPORTED,
                        "byte %" PRIu64 ": structured dtypes (a descr list) have no Hurray dtype",
                        at);
  }
  const uint8_t *s = NULL;
  size_t n = 0;
  int status = string(l, &s, &n, "the descr string", error);
  if (status != HURRAY_OK) return status;
  for (int i = 0; n > 1 && i < NPY_TYPE_COUNT; i++) {
    const NpyType *t = &kNpyTypes[i];
    if (strlen(t->code) != n - 1 || memcmp(t->code, s + 1, n - 1) != 0) continue;
    bool little = s[0] == '<', big = s[0] == '>', none = s[0] == '|';
    if (little || big || (none && t->itemsize == 1)) {
      h->dtype = t->dtype;
      h->swap = big && t->swap > 1 ? t->swap : 0;
      return HURRAY_OK;
    }
    return hurray__fail(error, HURRAY_EFORMAT,
                        "byte %" PRIu64 ": descr '%.*s' needs a byte order: '<' or '>'%s", at,
                        (int)n, (const char *)s, t->itemsize == 1 ? " or '|'" : "");
  }
  return hurray__fail(error, HURRAY_EUNSUPPORTED,
                      "byte %" PRIu64
                      ": descr '%.*s' has no Hurray dtype (bool, integers, "
                      "float16/32/64 and complex64/128 convert)",
                      at, (int)(n < 32 ? n : 32), (const char *)s);
}

static int parse_dict(TextCursor *l, NpyHeader *h, HurrayError *error) {
  enum { DESCR = 1, FORTRAN = 2, SHAPE = 4 };
  unsigned seen = 0;
  int status = hurray__cursor_expect(l, '{', "'{' starting the .npy header dict", error);
  if (status != HURRAY_OK) return status;
  while (!hurray__cursor_accept(l, '}')) {
    uint64_t at = hurray__cursor_offset(l);
    const uint8_t *key = NULL;
    size_t n = 0;
    status = string(l, &key, &n, "a key ('descr', 'fortran_order' or 'shape') or '}'", error);
    if (status == HURRAY_OK) status = hurray__cursor_expect(l, ':', "':' after a key", error);
    if (status != HURRAY_OK) return status;
    unsigned field = n == 5 && memcmp(key, "descr", 5) == 0             ? DESCR
                     : n == 13 && memcmp(key, "fortran_order", 13) == 0 ? FORTRAN
                     : n == 5 && memcmp(key, "shape", 5) == 0           ? SHAPE
                                                                        : 0;
    if (field == 0) {
      return hurray__fail(error, HURRAY_EFORMAT,
                          "byte %" PRIu64
                          ": unknown key '%.*s' (a .npy header has descr, "
                          "fortran_order and shape)",
                          at, (int)(n < 32 ? n : 32), (const char *)key);
    }
    if (seen & field) {
      return hurray__fail(error, HURRAY_EFORMAT, "byte %" PRIu64 ": duplicate key '%.*s'", at,
                          (int)n, (const char *)key);
    }
    seen |= field;
    if (field == DESCR) {
      status = descr(l, h, error);
    } else if (field == SHAPE) {
      status = shape_tuple(l, h, error);
    } else if (word(l, "True")) {
      h->fortran_order = true;
    } else if (!word(l, "False")) {
      status = hurray__cursor_unexpected(l, "True or False for fortran_order", error);
    }
    if (status != HURRAY_OK) return status;
    if (!hurray__cursor_accept(l, ',')) {
      status = hurray__cursor_expect(l, '}', "',' or '}' after a value", error);
      if (status != HURRAY_OK) return status;
      break;
    }
  }
  if (seen != (DESCR | FORTRAN | SHAPE)) {
    return hurray__fail(error, HURRAY_EFORMAT, "byte %" PRIu64 ": the .npy header lacks '%s'",
                        l->base,
                        !(seen & DESCR)     ? "descr"
                        : !(seen & FORTRAN) ? "fortran_order"
                                            : "shape");
  }
  return hurray__cursor_end(l, "only spaces and a newline after the header dict", error);
}

int hurray__npy_parse(const uint8_t *bytes, size_t len, uint64_t base, NpyHeader *out,
                      HurrayError *error) {
  NpyHeader h = {0};
  size_t magic = len < NPY_MAGIC_SIZE ? len : NPY_MAGIC_SIZE;
  if (memcmp(bytes, NPY_MAGIC, magic) != 0) {
    return hurray__fail(error, HURRAY_EFORMAT, "byte %" PRIu64 ": not a .npy file (bad magic)",
                        base);
  }
  if (len < 8) {
    return hurray__fail(error, HURRAY_EFORMAT,
                        "byte %" PRIu64 ": truncated .npy preamble (%zu bytes)", base, len);
  }
  uint8_t major = bytes[6], minor = bytes[7];
  if (major < 1 || major > 3 || minor != 0) {
    return hurray__fail(error, HURRAY_EUNSUPPORTED,
                        "byte %" PRIu64 ": .npy format version %u.%u (this reads 1.0, 2.0 and 3.0)",
                        base + 6, major, minor);
  }
  size_t length_size = major == 1 ? 2 : 4;
  if (len < 8 + length_size) {
    return hurray__fail(error, HURRAY_EFORMAT,
                        "byte %" PRIu64 ": truncated .npy preamble (%zu bytes)", base, len);
  }
  uint32_t header_len = major == 1 ? hurray__load_le16(bytes + 8) : hurray__load_le32(bytes + 8);
  if (header_len > CONV_NPY_MAX_HEADER) {
    return hurray__fail(error, HURRAY_ELIMIT,
                        "byte %" PRIu64 ": the .npy header is %" PRIu32 " bytes, more than %u",
                        base + 8, header_len, CONV_NPY_MAX_HEADER);
  }
  size_t start = 8 + length_size;
  if (len - start < header_len) {
    return hurray__fail(error, HURRAY_EFORMAT,
                        "byte %" PRIu64 ": truncated: the .npy header of %" PRIu32
                        " bytes ends past the end (%zu bytes)",
                        base + 8, header_len, len);
  }
  TextCursor l = {.text = bytes + start, .len = header_len, .base = base + start,
                  .name = "the .npy header"};
  int status = parse_dict(&l, &h, error);
  if (status != HURRAY_OK) return status;
  uint64_t numel = 1;
  for (int32_t k = 0; k < h.ndim; k++) {
    if (hurray__mul_u64(numel, (uint64_t)h.shape[k], &numel)) {
      return hurray__fail(error, HURRAY_EOVERFLOW, "the .npy shape's element count overflows");
    }
  }
  const HurrayDTypeInfo *info = hurray_dtype_info(h.dtype);
  if (hurray__mul_u64(numel, info->bits / 8, &h.data_bytes)) {
    return hurray__fail(error, HURRAY_EOVERFLOW, "the .npy data size overflows");
  }
  h.version_major = major;
  h.numel = numel;
  h.data_offset = start + header_len;
  *out = h;
  return HURRAY_OK;
}

/* ---- writing ------------------------------------------------------------------------------ */

int hurray__npy_write_header(FileSink *out, int dtype, bool fortran_order, int32_t ndim,
                             const int64_t *shape, HurrayError *error) {
  enum { GROWTH_AXIS_MAX_DIGITS = 21, ARRAY_ALIGN = 64, PREFIX = NPY_MAGIC_SIZE + 2 + 2 };
  char text[64 * 24 + 128];
  int n = snprintf(text, sizeof text, "{'descr': '%s', 'fortran_order': %s, 'shape': (",
                   hurray__npy_descr(dtype), fortran_order ? "True" : "False");
  for (int32_t k = 0; k < ndim; k++) {
    n += snprintf(text + n, sizeof text - (size_t)n, "%s%" PRId64, k > 0 ? ", " : "", shape[k]);
  }
  n += snprintf(text + n, sizeof text - (size_t)n, "%s), }", ndim == 1 ? "," : "");
  if (ndim > 0) { /* numpy's room for growing the shape in place */
    char digits[24];
    int d = snprintf(digits, sizeof digits, "%" PRId64, shape[fortran_order ? ndim - 1 : 0]);
    for (int i = d; i < GROWTH_AXIS_MAX_DIGITS; i++) text[n++] = ' ';
  }
  size_t hlen = (size_t)n + 1; /* with the final newline */
  size_t pad = ARRAY_ALIGN - (PREFIX + hlen) % ARRAY_ALIGN;
  if (hlen + pad > UINT16_MAX) {
    return hurray__fail(error, HURRAY_ELIMIT, "the .npy header would exceed 65535 bytes");
  }
  hurray__sink_bytes(out, NPY_MAGIC, NPY_MAGIC_SIZE);
  hurray__sink_u8(out, 1);
  hurray__sink_u8(out, 0);
  hurray__sink_u16(out, (uint16_t)(hlen + pad));
  hurray__sink_bytes(out, text, (size_t)n);
  for (size_t i = 0; i < pad; i++) hurray__sink_u8(out, ' ');
  hurray__sink_u8(out, '\n');
  return out->failed ? hurray__fail(error, HURRAY_ENOMEM, "out of memory") : HURRAY_OK;
}
