/* meta.c -- typed metadata (spec §7): a map of string, int64, float64, bool, list, map, null
 * and integer values. Encoding writes map keys sorted by bytes, so a decoder proves keys unique in one
 * linear pass; decoding checks every count against the bytes that remain before allocating. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "file.h"

enum { MIN_VALUE_SIZE = 2, MIN_ENTRY_SIZE = 2 + 1 + MIN_VALUE_SIZE };

const char *hurray_meta_type_name(int type) {
  switch (type) {
    case HURRAY_META_BOOL:
      return "bool";
    case HURRAY_META_INT64:
      return "int64";
    case HURRAY_META_FLOAT64:
      return "float64";
    case HURRAY_META_STRING:
      return "string";
    case HURRAY_META_LIST:
      return "list";
    case HURRAY_META_MAP:
      return "map";
    case HURRAY_META_NULL:
      return "null";
    case HURRAY_META_INTEGER:
      return "integer";
    default:
      return NULL;
  }
}

/* ---- float64 as text ---------------------------------------------------------------------- */

size_t hurray_format_float64(double value, char out[HURRAY_FLOAT64_TEXT_SIZE]) {
  if (isnan(value) || isinf(value)) {
    const char *text = isnan(value) ? "NaN" : value > 0 ? "Infinity" : "-Infinity";
    size_t n = strlen(text);
    memcpy(out, text, n + 1);
    return n;
  }
  char text[HURRAY_FLOAT64_TEXT_SIZE];
  for (int digits = 1; digits <= 17; digits++) { /* 17 digits always read back */
    snprintf(text, sizeof text, "%.*g", digits, value);
    if (strtod(text, NULL) == value) break;
  }
  /* %g and strtod agree on LC_NUMERIC's decimal point, which may be ',' or several bytes
   * (U+066B in some locales): whatever stands between the digits becomes '.'. */
  size_t n = 0;
  for (const char *p = text; *p != '\0';) {
    if ((*p >= '0' && *p <= '9') || *p == '-' || *p == '+' || *p == 'e') {
      out[n++] = *p++;
      continue;
    }
    out[n++] = '.';
    while (*p != '\0' && !(*p >= '0' && *p <= '9') && *p != 'e') p++;
  }
  out[n] = '\0';
  return n;
}

/* ---- integers outside int64 -------------------------------------------------------------- */

/* Whether `len` bytes at `text` are an INTEGER's canonical text: an optional '-', then 1 to
 * HURRAY_META_MAX_DIGITS digits in all without a leading zero, of a value outside int64 (whose
 * values are INT64's). */
static bool integer_text_valid(const char *text, size_t len) {
  bool negative = len > 0 && text[0] == '-';
  const char *digits = text + negative;
  size_t n = len - negative;
  if (len > HURRAY_META_MAX_DIGITS || n == 0 || digits[0] == '0') return false;
  for (size_t i = 0; i < n; i++) {
    if (digits[i] < '0' || digits[i] > '9') return false;
  }
  /* int64 spans -9223372036854775808 .. 9223372036854775807: 19 digits at most. */
  static const char kLimit[] = "9223372036854775807";
  size_t limit_len = sizeof kLimit - 1;
  if (n != limit_len) return n > limit_len;
  int order = memcmp(digits, kLimit, limit_len); /* the same length: compares as numbers */
  return negative ? order > 0 && memcmp(digits, "9223372036854775808", limit_len) != 0
                  : order > 0;
}

/* ---- encoding a caller's tree ------------------------------------------------------------- */

typedef struct SortedKey {
  const char *key;
  size_t len;
  uint32_t item;
} SortedKey;

static int compare_keys(const void *a, const void *b) {
  const SortedKey *x = a, *y = b;
  return hurray__compare_bytes(x->key, x->len, y->key, y->len);
}

/* What encoding a tree found: the file format minor version its values need. */
typedef struct Encoder {
  FileSink *out;
  uint32_t max; /* bytes */
  uint16_t minor;
  HurrayError *error;
} Encoder;

static int encode_value(const HurrayMetaValue *v, int depth, Encoder *e);

static int encode_map(const HurrayMetaValue *v, int depth, Encoder *e) {
  FileSink *out = e->out;
  HurrayError *error = e->error;
  if (v->count > 0 && (v->keys == NULL || v->as.items == NULL)) {
    return hurray__fail(error, HURRAY_EINVAL, "metadata map of %u entries has NULL %s", v->count,
                        v->keys == NULL ? "keys" : "items");
  }
  SortedKey *sorted = malloc((v->count ? v->count : 1) * sizeof *sorted);
  if (sorted == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  int status = HURRAY_OK;
  for (uint32_t i = 0; i < v->count && status == HURRAY_OK; i++) {
    sorted[i] = (SortedKey){.key = v->keys[i], .item = i};
    status = hurray__check_cname(v->keys[i], "metadata key", &sorted[i].len, error);
  }
  if (status == HURRAY_OK) {
    qsort(sorted, v->count, sizeof *sorted, compare_keys);
    hurray__sink_u8(out, HURRAY_META_MAP);
    hurray__sink_u32(out, v->count);
  }
  for (uint32_t i = 0; i < v->count && status == HURRAY_OK; i++) {
    if (i > 0 && compare_keys(&sorted[i - 1], &sorted[i]) == 0) {
      status = hurray__fail(error, HURRAY_EINVAL, "duplicate metadata key '%s'", sorted[i].key);
      break;
    }
    hurray__sink_u16(out, (uint16_t)sorted[i].len);
    hurray__sink_bytes(out, sorted[i].key, sorted[i].len);
    status = encode_value(&v->as.items[sorted[i].item], depth + 1, e);
    if (status != HURRAY_OK) {
      hurray__error_prefix(error, status, "metadata key '%s': ", sorted[i].key);
    }
  }
  free(sorted);
  return status;
}

static int encode_value(const HurrayMetaValue *v, int depth, Encoder *e) {
  FileSink *out = e->out;
  HurrayError *error = e->error;
  if (v->reserved[0] | v->reserved[1] | v->reserved[2]) {
    return hurray__fail(error, HURRAY_EINVAL, "metadata value has nonzero reserved bytes");
  }
  if (v->count > e->max) { /* could never fit: refuse before reading it */
    return hurray__fail(error, HURRAY_ELIMIT, "metadata value of %u items or bytes exceeds %u",
                        v->count, e->max);
  }
  int status = HURRAY_OK;
  switch (v->type) {
    case HURRAY_META_BOOL:
      if (v->as.boolean > 1) {
        return hurray__fail(error, HURRAY_EINVAL, "metadata bool is %u, not 0 or 1", v->as.boolean);
      }
      hurray__sink_u8(out, HURRAY_META_BOOL);
      hurray__sink_u8(out, v->as.boolean);
      break;
    case HURRAY_META_INT64:
      hurray__sink_u8(out, HURRAY_META_INT64);
      hurray__sink_u64(out, (uint64_t)v->as.int64);
      break;
    case HURRAY_META_FLOAT64: {
      uint64_t bits;
      memcpy(&bits, &v->as.float64, sizeof bits);
      hurray__sink_u8(out, HURRAY_META_FLOAT64);
      hurray__sink_u64(out, bits);
      break;
    }
    case HURRAY_META_STRING:
      if (v->count > 0 && v->as.string == NULL) {
        return hurray__fail(error, HURRAY_EINVAL, "metadata string of %u bytes is NULL", v->count);
      }
      if (v->count > 0 && !hurray__utf8_valid((const uint8_t *)v->as.string, v->count)) {
        return hurray__fail(error, HURRAY_EINVAL, "metadata string is not valid UTF-8");
      }
      hurray__sink_u8(out, HURRAY_META_STRING);
      hurray__sink_u32(out, v->count);
      hurray__sink_bytes(out, v->as.string, v->count);
      break;
    case HURRAY_META_NULL:
      hurray__sink_u8(out, HURRAY_META_NULL);
      hurray__sink_u8(out, 0); /* reserved: every value is at least two bytes (spec §7) */
      e->minor = 1;
      break;
    case HURRAY_META_INTEGER:
      if (v->as.string == NULL || !integer_text_valid(v->as.string, v->count)) {
        return hurray__fail(error, HURRAY_EINVAL,
                            "metadata integer '%.*s' is not the decimal text of an integer "
                            "outside int64 (of at most %d bytes; int64 values are INT64)",
                            v->as.string ? (int)(v->count < 64 ? v->count : 64) : 0,
                            v->as.string ? v->as.string : "", HURRAY_META_MAX_DIGITS);
      }
      hurray__sink_u8(out, HURRAY_META_INTEGER);
      hurray__sink_u32(out, v->count);
      hurray__sink_bytes(out, v->as.string, v->count);
      e->minor = 1;
      break;
    case HURRAY_META_LIST:
    case HURRAY_META_MAP:
      if (depth >= HURRAY_META_MAX_DEPTH) {
        return hurray__fail(error, HURRAY_ELIMIT, "metadata nests deeper than %d levels",
                            HURRAY_META_MAX_DEPTH);
      }
      if (v->type == HURRAY_META_MAP) {
        status = encode_map(v, depth, e);
        break;
      }
      if (v->count > 0 && v->as.items == NULL) {
        return hurray__fail(error, HURRAY_EINVAL, "metadata list of %u items is NULL", v->count);
      }
      hurray__sink_u8(out, HURRAY_META_LIST);
      hurray__sink_u32(out, v->count);
      for (uint32_t i = 0; i < v->count && status == HURRAY_OK; i++) {
        status = encode_value(&v->as.items[i], depth + 1, e);
      }
      break;
    default:
      return hurray__fail(error, HURRAY_EINVAL, "metadata type %u is unknown", v->type);
  }
  if (status == HURRAY_OK && out->len > e->max) {
    return hurray__fail(error, HURRAY_ELIMIT, "metadata encodes to more than %u bytes", e->max);
  }
  if (status == HURRAY_OK && out->failed) {
    return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  }
  return status;
}

int hurray__meta_encode(const HurrayMetaValue *root, FileSink *out, uint16_t *minor,
                        HurrayError *error) {
  return hurray__meta_encode_max(root, HURRAY_META_MAX_BYTES, out, minor, error);
}

int hurray__meta_encode_max(const HurrayMetaValue *root, uint32_t max, FileSink *out,
                            uint16_t *minor, HurrayError *error) {
  hurray__sink_reset(out);
  *minor = 0;
  if (root == NULL) return HURRAY_OK;
  if (root->type != HURRAY_META_MAP) {
    return hurray__fail(
        error, HURRAY_EINVAL, "metadata must be a map, not %s",
        hurray_meta_type_name(root->type) ? hurray_meta_type_name(root->type) : "an unknown type");
  }
  Encoder e = {.out = out, .max = max, .error = error};
  int status = encode_value(root, 0, &e);
  if (status != HURRAY_OK || root->count == 0) hurray__sink_reset(out); /* {} is no bytes */
  if (status == HURRAY_OK) *minor = e.minor;
  return status;
}

/* ---- decoding a file's bytes -------------------------------------------------------------- */

typedef struct Decoder {
  FileCursor cursor;
  FileArena *arena; /* NULL: validate only */
  HurrayError *error;
} Decoder;

static int take_u32(Decoder *d, uint32_t *v) {
  const uint8_t *p = NULL;
  int status = hurray__take(&d->cursor, 4, &p, d->error);
  if (status == HURRAY_OK) *v = hurray__load_le32(p);
  return status;
}

/* Checks that `count` items of at least `min_size` bytes each can fit in what is left. */
static int check_count(Decoder *d, uint32_t count, size_t min_size, const char *what) {
  if (count > d->cursor.left / min_size) {
    return hurray__fail(d->error, HURRAY_EFORMAT,
                        "metadata %s claims %u items but only %zu bytes are left", what, count,
                        d->cursor.left);
  }
  return HURRAY_OK;
}

static int decode_value(Decoder *d, int depth, HurrayMetaValue *out);

/* Items of a list or map: an array in the arena, or a scratch value when only validating. */
static HurrayMetaValue *alloc_items(Decoder *d, uint32_t count) {
  return d->arena ? hurray__arena_alloc(d->arena, (size_t)count * sizeof(HurrayMetaValue)) : NULL;
}

static int decode_map(Decoder *d, int depth, HurrayMetaValue *out) {
  uint32_t count = 0;
  int status = take_u32(d, &count);
  if (status == HURRAY_OK) status = check_count(d, count, MIN_ENTRY_SIZE, "map");
  if (status != HURRAY_OK) return status;
  HurrayMetaValue *items = alloc_items(d, count);
  const char **keys = d->arena ? hurray__arena_alloc(d->arena, (size_t)count * sizeof *keys) : NULL;
  if (d->arena && (items == NULL || keys == NULL)) {
    return hurray__fail(d->error, HURRAY_ENOMEM, "out of memory");
  }
  const uint8_t *previous = NULL;
  size_t previous_len = 0;
  for (uint32_t i = 0; i < count; i++) {
    const uint8_t *p = NULL, *key = NULL;
    status = hurray__take(&d->cursor, 2, &p, d->error);
    size_t len = status == HURRAY_OK ? hurray__load_le16(p) : 0;
    if (status == HURRAY_OK) status = hurray__take(&d->cursor, len, &key, d->error);
    if (status == HURRAY_OK) {
      status = hurray__check_name(key, len, HURRAY_EFORMAT, "metadata key", d->error);
    }
    if (status == HURRAY_OK && previous != NULL &&
        hurray__compare_bytes(previous, previous_len, key, len) >= 0) {
      status = hurray__fail(d->error, HURRAY_EFORMAT,
                            "metadata keys are not strictly increasing at '%.*s'", (int)len,
                            (const char *)key);
    }
    if (status != HURRAY_OK) return status;
    if (keys != NULL && (keys[i] = hurray__arena_strndup(d->arena, key, len)) == NULL) {
      return hurray__fail(d->error, HURRAY_ENOMEM, "out of memory");
    }
    HurrayMetaValue scratch;
    status = decode_value(d, depth + 1, items ? &items[i] : &scratch);
    if (status != HURRAY_OK) {
      return hurray__error_prefix(d->error, status, "metadata key '%.*s': ", (int)len,
                                  (const char *)key);
    }
    previous = key;
    previous_len = len;
  }
  *out = (HurrayMetaValue){.type = HURRAY_META_MAP, .count = count, .keys = keys};
  out->as.items = items;
  return HURRAY_OK;
}

static int decode_value(Decoder *d, int depth, HurrayMetaValue *out) {
  const uint8_t *p = NULL;
  int status = hurray__take(&d->cursor, 1, &p, d->error);
  if (status != HURRAY_OK) return status;
  uint8_t type = p[0];
  if ((type == HURRAY_META_LIST || type == HURRAY_META_MAP) && depth >= HURRAY_META_MAX_DEPTH) {
    return hurray__fail(d->error, HURRAY_ELIMIT, "metadata nests deeper than %d levels",
                        HURRAY_META_MAX_DEPTH);
  }
  *out = (HurrayMetaValue){.type = type};
  switch (type) {
    case HURRAY_META_BOOL:
      status = hurray__take(&d->cursor, 1, &p, d->error);
      if (status == HURRAY_OK && p[0] > 1) {
        status = hurray__fail(d->error, HURRAY_EFORMAT, "metadata bool is %u, not 0 or 1", p[0]);
      }
      if (status == HURRAY_OK) out->as.boolean = p[0];
      return status;
    case HURRAY_META_INT64:
    case HURRAY_META_FLOAT64:
      status = hurray__take(&d->cursor, 8, &p, d->error);
      if (status == HURRAY_OK) {
        uint64_t bits = hurray__load_le64(p);
        memcpy(type == HURRAY_META_INT64 ? (void *)&out->as.int64 : (void *)&out->as.float64, &bits,
               sizeof bits);
      }
      return status;
    case HURRAY_META_NULL:
      status = hurray__take(&d->cursor, 1, &p, d->error);
      if (status == HURRAY_OK && p[0] != 0) {
        status = hurray__fail(d->error, HURRAY_EFORMAT,
                              "metadata null has reserved byte %u, not 0", p[0]);
      }
      return status;
    case HURRAY_META_STRING:
    case HURRAY_META_INTEGER: {
      uint32_t len = 0;
      status = take_u32(d, &len);
      if (status == HURRAY_OK) status = hurray__take(&d->cursor, len, &p, d->error);
      if (status == HURRAY_OK && type == HURRAY_META_STRING && !hurray__utf8_valid(p, len)) {
        status = hurray__fail(d->error, HURRAY_EFORMAT, "metadata string is not valid UTF-8");
      }
      if (status == HURRAY_OK && type == HURRAY_META_INTEGER &&
          !integer_text_valid((const char *)p, len)) {
        status = hurray__fail(d->error, HURRAY_EFORMAT,
                              "metadata integer of %u bytes is not the canonical decimal text "
                              "of an integer outside int64 (at most %d bytes)",
                              len, HURRAY_META_MAX_DIGITS);
      }
      if (status != HURRAY_OK) return status;
      out->count = len;
      if (d->arena && (out->as.string = hurray__arena_strndup(d->arena, p, len)) == NULL) {
        return hurray__fail(d->error, HURRAY_ENOMEM, "out of memory");
      }
      return HURRAY_OK;
    }
    case HURRAY_META_LIST: {
      uint32_t count = 0;
      status = take_u32(d, &count);
      if (status == HURRAY_OK) status = check_count(d, count, MIN_VALUE_SIZE, "list");
      if (status != HURRAY_OK) return status;
      HurrayMetaValue *items = alloc_items(d, count);
      if (d->arena && items == NULL) return hurray__fail(d->error, HURRAY_ENOMEM, "out of memory");
      for (uint32_t i = 0; i < count && status == HURRAY_OK; i++) {
        HurrayMetaValue scratch;
        status = decode_value(d, depth + 1, items ? &items[i] : &scratch);
      }
      out->count = count;
      out->as.items = items;
      return status;
    }
    case HURRAY_META_MAP:
      return decode_map(d, depth, out);
    default:
      return hurray__fail(d->error, HURRAY_EFORMAT, "metadata type %u is unknown", type);
  }
}

int hurray__meta_decode(const uint8_t *bytes, size_t len, FileArena *arena, HurrayMetaValue *out,
                        HurrayError *error) {
  return hurray__meta_decode_max(bytes, len, HURRAY_META_MAX_BYTES, arena, out, error);
}

int hurray__meta_decode_max(const uint8_t *bytes, size_t len, uint32_t max, FileArena *arena,
                            HurrayMetaValue *out, HurrayError *error) {
  if (len > max) {
    return hurray__fail(error, HURRAY_ELIMIT, "metadata is %zu bytes, more than %u", len, max);
  }
  HurrayMetaValue scratch;
  if (out == NULL) out = &scratch;
  *out = (HurrayMetaValue){.type = HURRAY_META_MAP};
  if (len == 0) return HURRAY_OK;
  Decoder d = {.cursor = {.p = bytes, .left = len}, .arena = arena, .error = error};
  if (bytes[0] != HURRAY_META_MAP) {
    return hurray__fail(error, HURRAY_EFORMAT, "metadata is not a map (type %u)", bytes[0]);
  }
  int status = decode_value(&d, 0, out);
  if (status == HURRAY_OK && d.cursor.left != 0) {
    status = hurray__fail(error, HURRAY_EFORMAT, "%zu trailing bytes after the metadata map",
                          d.cursor.left);
  }
  return status;
}

/* ---- trees returned to callers ------------------------------------------------------------ */

/* A tree from hurray_file_reader_metadata is the `root` of a block whose arena holds the rest
 * (and the block itself). */
typedef struct MetaBlock {
  FileArena arena;
  HurrayMetaValue root;
} MetaBlock;

int hurray__meta_decode_tree(const uint8_t *bytes, size_t len, HurrayMetaValue **out,
                             HurrayError *error) {
  return hurray__meta_decode_tree_max(bytes, len, HURRAY_META_MAX_BYTES, out, error);
}

int hurray__meta_decode_tree_max(const uint8_t *bytes, size_t len, uint32_t max,
                                 HurrayMetaValue **out, HurrayError *error) {
  FileArena arena = {0};
  MetaBlock *block = hurray__arena_alloc(&arena, sizeof *block);
  if (block == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  int status = hurray__meta_decode_max(bytes, len, max, &arena, &block->root, error);
  if (status != HURRAY_OK) {
    hurray__arena_free(&arena);
    return status;
  }
  block->arena = arena; /* the block now owns the arena it lives in */
  *out = &block->root;
  return HURRAY_OK;
}

void hurray_meta_destroy(HurrayMetaValue *tree) {
  if (tree == NULL) return;
  MetaBlock *block = (MetaBlock *)(void *)((uint8_t *)tree - offsetof(MetaBlock, root));
  FileArena arena = block->arena;
  hurray__arena_free(&arena);
}
