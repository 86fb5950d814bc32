/* gguf.c -- the header of a GGUF file (versions 2 and 3, little-endian):
 *
 *   "GGUF" u32 version, u64 tensor count, u64 key/value count,
 *   key/values: string key, u32 value type, value (arrays: u32 element type, u64 count, items),
 *   tensor infos: string name, u32 n_dims, n_dims u64 extents (innermost first), u32 ggml type,
 *   u64 offset into the data section,
 *   the data section, at the end of the infos rounded up to general.alignment (default 32).
 *
 * Strings are a u64 length and that many bytes. Every count and length is checked against the
 * bytes left before anything is allocated, against a limit (CONV_GGUF_*), and all arithmetic is
 * overflow-checked; each error names the byte offset and the field. Tensors become dense
 * arrays (ADR-094): plain types with their extents reversed (row-major), quantised types as
 * bytes of their block dtype, a row of ne[0] weights being ne[0] / elements * bytes bytes. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"

typedef struct Reader {
  const uint8_t *b;
  uint64_t size;
  uint64_t at;
  FileArena *arena;
} Reader;

static int truncated(const Reader *r, uint64_t need, const char *field, HurrayError *error) {
  return hurray__fail(error, HURRAY_EFORMAT,
                      "GGUF byte %" PRIu64 ": the file ends inside %s (%" PRIu64
                      " bytes needed, %" PRIu64 " left)",
                      r->at, field, need, r->size - r->at);
}

static int need(const Reader *r, uint64_t n, const char *field, HurrayError *error) {
  return n <= r->size - r->at ? HURRAY_OK : truncated(r, n, field, error);
}

static int read_u32(Reader *r, uint32_t *v, const char *field, HurrayError *error) {
  int status = need(r, 4, field, error);
  if (status == HURRAY_OK) {
    *v = hurray__load_le32(r->b + r->at);
    r->at += 4;
  }
  return status;
}

static int read_u64(Reader *r, uint64_t *v, const char *field, HurrayError *error) {
  int status = need(r, 8, field, error);
  if (status == HURRAY_OK) {
    *v = hurray__load_le64(r->b + r->at);
    r->at += 8;
  }
  return status;
}

/* A string: its length (at most `max`) and bytes, which stay in the file. */
static int read_string(Reader *r, const uint8_t **s, uint64_t *len, uint64_t max,
                       const char *field, HurrayError *error) {
  uint64_t at = r->at;
  int status = read_u64(r, len, field, error);
  if (status == HURRAY_OK) status = need(r, *len, field, error);
  if (status == HURRAY_OK && *len > max) {
    return hurray__fail(error, HURRAY_ELIMIT,
                        "GGUF byte %" PRIu64 ": %s is %" PRIu64 " bytes, over the limit of %" PRIu64,
                        at, field, *len, max);
  }
  if (status == HURRAY_OK) {
    *s = r->b + r->at;
    r->at += *len;
  }
  return status;
}

/* GGUF's value types. */
enum {
  GT_U8 = 0, GT_I8, GT_U16, GT_I16, GT_U32, GT_I32, GT_F32, GT_BOOL, GT_STRING, GT_ARRAY,
  GT_U64, GT_I64, GT_F64, GT_COUNT
};
static const uint8_t kSizes[GT_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 8, 12, 8, 8, 8}; /* at least */

static int read_value(Reader *r, uint32_t type, uint32_t depth, HurrayMetaValue *v,
                      const char *field, HurrayError *error);

static int read_array(Reader *r, uint32_t depth, HurrayMetaValue *v, const char *field,
                      HurrayError *error) {
  uint64_t at = r->at;
  uint32_t type = 0;
  uint64_t count = 0;
  int status = read_u32(r, &type, field, error);
  if (status == HURRAY_OK) status = read_u64(r, &count, field, error);
  if (status != HURRAY_OK) return status;
  if (type >= GT_COUNT) {
    return hurray__fail(error, HURRAY_EFORMAT,
                        "GGUF byte %" PRIu64 ": %s: array element type %" PRIu32 " is unknown",
                        at, field, type);
  }
  if (depth + 1 > CONV_GGUF_MAX_DEPTH) {
    return hurray__fail(error, HURRAY_ELIMIT,
                        "GGUF byte %" PRIu64 ": %s: arrays nest deeper than %u levels", at, field,
                        CONV_GGUF_MAX_DEPTH);
  }
  if (count > CONV_GGUF_MAX_ARRAY || count > (r->size - r->at) / kSizes[type]) {
    bool fits = count <= (r->size - r->at) / kSizes[type];
    return hurray__fail(error, fits ? HURRAY_ELIMIT : HURRAY_EFORMAT,
                        "GGUF byte %" PRIu64 ": %s: an array of %" PRIu64
                        " items exceeds the limit of %u or the %" PRIu64 " bytes left",
                        at, field, count, CONV_GGUF_MAX_ARRAY, r->size - r->at);
  }
  HurrayMetaValue *items = hurray__arena_alloc(r->arena, (count ? count : 1) * sizeof *items);
  if (items == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  for (uint64_t i = 0; i < count && status == HURRAY_OK; i++) {
    status = read_value(r, type, depth + 1, &items[i], field, error);
  }
  *v = (HurrayMetaValue){.type = HURRAY_META_LIST, .count = (uint32_t)count};
  v->as.items = items;
  return status;
}

static int read_value(Reader *r, uint32_t type, uint32_t depth, HurrayMetaValue *v,
                      const char *field, HurrayError *error) {
  uint64_t at = r->at;
  int status = type < GT_COUNT && type != GT_ARRAY && type != GT_STRING
                   ? need(r, kSizes[type], field, error)
                   : HURRAY_OK;
  if (status != HURRAY_OK) return status;
  const uint8_t *p = r->b + r->at;
  *v = (HurrayMetaValue){.type = HURRAY_META_INT64};
  switch (type) {
    case GT_U8: v->as.int64 = p[0]; break;
    case GT_I8: v->as.int64 = (int8_t)p[0]; break;
    case GT_U16: v->as.int64 = hurray__load_le16(p); break;
    case GT_I16: v->as.int64 = (int16_t)hurray__load_le16(p); break;
    case GT_U32: v->as.int64 = hurray__load_le32(p); break;
    case GT_I32: v->as.int64 = (int32_t)hurray__load_le32(p); break;
    case GT_I64: v->as.int64 = (int64_t)hurray__load_le64(p); break;
    case GT_U64: {
      uint64_t u = hurray__load_le64(p);
      if (u <= INT64_MAX) {
        v->as.int64 = (int64_t)u;
        break;
      }
      char text[24];
      int n = snprintf(text, sizeof text, "%" PRIu64, u);
      v->type = HURRAY_META_INTEGER;
      v->count = (uint32_t)n;
      v->as.string = hurray__arena_strndup(r->arena, (const uint8_t *)text, (size_t)n);
      if (v->as.string == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
      break;
    }
    case GT_F32: {
      float f;
      memcpy(&f, &(uint32_t){hurray__load_le32(p)}, sizeof f);
      *v = (HurrayMetaValue){.type = HURRAY_META_FLOAT64, .as.float64 = f};
      break;
    }
    case GT_F64: {
      double f;
      memcpy(&f, &(uint64_t){hurray__load_le64(p)}, sizeof f);
      *v = (HurrayMetaValue){.type = HURRAY_META_FLOAT64, .as.float64 = f};
      break;
    }
    case GT_BOOL:
      if (p[0] > 1) {
        return hurray__fail(error, HURRAY_EFORMAT,
                            "GGUF byte %" PRIu64 ": %s: a bool is 0 or 1, not %u", at, field,
                            p[0]);
      }
      *v = (HurrayMetaValue){.type = HURRAY_META_BOOL, .as.boolean = p[0]};
      break;
    case GT_STRING: {
      const uint8_t *s = NULL;
      uint64_t len = 0;
      status = read_string(r, &s, &len, CONV_GGUF_MAX_STRING, field, error);
      if (status != HURRAY_OK) return status;
      if (!hurray__utf8_valid(s, (size_t)len)) {
        return hurray__fail(error, HURRAY_EFORMAT, "GGUF byte %" PRIu64 ": %s: a string is not UTF-8",
                            at, field);
      }
      *v = (HurrayMetaValue){.type = HURRAY_META_STRING, .count = (uint32_t)len};
      v->as.string = hurray__arena_strndup(r->arena, s, (size_t)len);
      return v->as.string == NULL ? hurray__fail(error, HURRAY_ENOMEM, "out of memory") : HURRAY_OK;
    }
    case GT_ARRAY:
      return read_array(r, depth, v, field, error);
    default:
      return hurray__fail(error, HURRAY_EFORMAT,
                          "GGUF byte %" PRIu64 ": %s: value type %" PRIu32 " is unknown", at,
                          field, type);
  }
  r->at += kSizes[type];
  return HURRAY_OK;
}

/* ggml's tensor types that Hurray reads: (ggml type, dtype). */
static const struct {
  uint32_t ggml;
  uint8_t dtype;
} kTypes[] = {
    {0, HURRAY_DTYPE_FLOAT32},  {1, HURRAY_DTYPE_FLOAT16},  {2, HURRAY_DTYPE_Q4_0},
    {3, HURRAY_DTYPE_Q4_1},     {6, HURRAY_DTYPE_Q5_0},     {7, HURRAY_DTYPE_Q5_1},
    {8, HURRAY_DTYPE_Q8_0},     {10, HURRAY_DTYPE_Q2_K},    {11, HURRAY_DTYPE_Q3_K},
    {12, HURRAY_DTYPE_Q4_K},    {13, HURRAY_DTYPE_Q5_K},    {14, HURRAY_DTYPE_Q6_K},
    {15, HURRAY_DTYPE_Q8_K},    {24, HURRAY_DTYPE_INT8},    {25, HURRAY_DTYPE_INT16},
    {26, HURRAY_DTYPE_INT32},   {27, HURRAY_DTYPE_INT64},   {28, HURRAY_DTYPE_FLOAT64},
    {30, HURRAY_DTYPE_BFLOAT16},
};

int hurray__gguf_dtype(uint32_t ggml) {
  for (size_t i = 0; i < sizeof kTypes / sizeof *kTypes; i++) {
    if (kTypes[i].ggml == ggml) return kTypes[i].dtype;
  }
  return HURRAY_DTYPE_INVALID;
}

int hurray__gguf_type(int dtype) {
  for (size_t i = 0; i < sizeof kTypes / sizeof *kTypes; i++) {
    if (kTypes[i].dtype == dtype) return (int)kTypes[i].ggml;
  }
  return -1;
}

typedef struct Named {
  const char *name;
  size_t len;
} Named;

static int compare_named(const void *a, const void *b) {
  const Named *x = a, *y = b;
  return hurray__compare_bytes(x->name, x->len, y->name, y->len);
}

/* Names (keys, tensor names) must be unique: checked on a sorted copy. */
static int check_unique(const Named *names, uint32_t count, const char *what, HurrayError *error) {
  if (count < 2) return HURRAY_OK;
  Named *sorted = malloc(count * sizeof *sorted);
  if (sorted == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  memcpy(sorted, names, count * sizeof *sorted);
  qsort(sorted, count, sizeof *sorted, compare_named);
  int status = HURRAY_OK;
  for (uint32_t i = 1; i < count && status == HURRAY_OK; i++) {
    if (compare_named(&sorted[i - 1], &sorted[i]) == 0) {
      status = hurray__fail(error, HURRAY_EFORMAT, "GGUF: duplicate %s '%.64s'", what,
                            sorted[i].name);
    }
  }
  free(sorted);
  return status;
}

static int parse_kvs(Reader *r, uint64_t count, GgufHeader *out, HurrayError *error) {
  const char **keys = hurray__arena_alloc(r->arena, (count ? count : 1) * sizeof *keys);
  HurrayMetaValue *values = hurray__arena_alloc(r->arena, (count ? count : 1) * sizeof *values);
  Named *named = malloc((count ? count : 1) * sizeof *named);
  int status = keys != NULL && values != NULL && named != NULL
                   ? HURRAY_OK
                   : hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  for (uint64_t i = 0; i < count && status == HURRAY_OK; i++) {
    const uint8_t *key = NULL;
    uint64_t len = 0, at = r->at;
    uint32_t type = 0;
    status = read_string(r, &key, &len, HURRAY_MAX_NAME, "a key", error);
    if (status == HURRAY_OK) {
      status = hurray__check_name(key, (size_t)len, HURRAY_EFORMAT, "a GGUF key", error);
      if (status != HURRAY_OK) hurray__error_prefix(error, status, "GGUF byte %" PRIu64 ": ", at);
    }
    if (status == HURRAY_OK) keys[i] = hurray__arena_strndup(r->arena, key, (size_t)len);
    if (status == HURRAY_OK && keys[i] == NULL) status = hurray__fail(error, HURRAY_ENOMEM, "out of memory");
    char field[HURRAY_MAX_NAME + 16];
    if (status == HURRAY_OK) {
      named[i] = (Named){keys[i], (size_t)len};
      snprintf(field, sizeof field, "key '%.64s'", keys[i]);
      status = read_u32(r, &type, field, error);
    }
    if (status == HURRAY_OK) status = read_value(r, type, 0, &values[i], field, error);
    if (status == HURRAY_OK && strcmp(keys[i], "general.alignment") == 0) {
      const HurrayMetaValue *v = &values[i];
      if (type != GT_U32 || v->as.int64 == 0 || (v->as.int64 & (v->as.int64 - 1)) != 0 ||
          v->as.int64 > CONV_GGUF_MAX_ALIGNMENT) {
        status = hurray__fail(error, HURRAY_EFORMAT,
                              "GGUF byte %" PRIu64 ": general.alignment is a u32 power of two "
                              "up to %u%s",
                              at, CONV_GGUF_MAX_ALIGNMENT, type != GT_U32 ? " (wrong type)" : "");
      } else {
        out->alignment = (uint32_t)v->as.int64;
      }
    }
  }
  if (status == HURRAY_OK) status = check_unique(named, (uint32_t)count, "key", error);
  free(named);
  out->metadata = (HurrayMetaValue){.type = HURRAY_META_MAP, .count = (uint32_t)count, .keys = keys};
  out->metadata.as.items = values;
  return status;
}

static int parse_tensor(Reader *r, uint32_t index, ConvArray *a, uint64_t *offset,
                        HurrayError *error) {
  const uint8_t *name = NULL;
  uint64_t len = 0, at = r->at;
  int status = read_string(r, &name, &len, HURRAY_MAX_NAME, "a tensor name", error);
  if (status == HURRAY_OK) {
    status = hurray__check_name(name, (size_t)len, HURRAY_EFORMAT, "a GGUF tensor name", error);
    if (status != HURRAY_OK) hurray__error_prefix(error, status, "GGUF byte %" PRIu64 ": ", at);
  }
  if (status != HURRAY_OK) return status;
  *a = (ConvArray){.index = index, .name_len = (size_t)len};
  a->name = hurray__arena_strndup(r->arena, name, (size_t)len);
  int64_t *shape = hurray__arena_alloc(r->arena, CONV_GGUF_MAX_DIMS * sizeof *shape);
  if (a->name == NULL || shape == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  char field[HURRAY_MAX_NAME + 16];
  snprintf(field, sizeof field, "tensor '%.64s'", a->name);
  uint32_t ndim = 0, type = 0;
  status = read_u32(r, &ndim, field, error);
  if (status == HURRAY_OK && (ndim < 1 || ndim > CONV_GGUF_MAX_DIMS)) {
    return hurray__fail(error, HURRAY_EFORMAT,
                        "GGUF byte %" PRIu64 ": %s: n_dims %" PRIu32 " is not in 1..%u",
                        r->at - 4, field, ndim, CONV_GGUF_MAX_DIMS);
  }
  uint64_t ne[CONV_GGUF_MAX_DIMS] = {0};
  for (uint32_t k = 0; k < ndim && status == HURRAY_OK; k++) {
    status = read_u64(r, &ne[k], field, error);
    if (status == HURRAY_OK && ne[k] > (uint64_t)HURRAY_MAX_DIM) {
      return hurray__fail(error, HURRAY_EFORMAT,
                          "GGUF byte %" PRIu64 ": %s: ne[%" PRIu32 "] = %" PRIu64 " is too large",
                          r->at - 8, field, k, ne[k]);
    }
  }
  if (status == HURRAY_OK) status = read_u32(r, &type, field, error);
  if (status == HURRAY_OK) status = read_u64(r, offset, field, error);
  if (status != HURRAY_OK) return status;
  a->dtype = (uint8_t)hurray__gguf_dtype(type);
  if (a->dtype == HURRAY_DTYPE_INVALID) {
    /* ggml's other types (Q8_1, the IQ and TQ types, MXFP4, ...) are valid but not read here;
     * an id ggml does not assign is a malformed file */
    const bool known = type == 9 || (type >= 16 && type <= 23) || type == 29 ||
                       (type >= 34 && type <= 41 && type != 36 && type != 37 && type != 38);
    return hurray__fail(error, known ? HURRAY_EUNSUPPORTED : HURRAY_EFORMAT,
                        "GGUF byte %" PRIu64 ": %s: ggml type %" PRIu32
                        " is not one Hurray reads (F32, F16, BF16, F64, I8..I64, Q4_0, Q4_1, "
                        "Q5_0, Q5_1, Q8_0, Q2_K..Q6_K, Q8_K)",
                        r->at - 12, field, type);
  }
  uint32_t elements = 1, bytes = 0;
  if (hurray_dtype_block(a->dtype, &elements, &bytes, NULL) == HURRAY_OK) {
    if (ne[0] % elements != 0) {
      return hurray__fail(error, HURRAY_EFORMAT,
                          "GGUF: %s: ne[0] = %" PRIu64 " is not a multiple of %s's %" PRIu32
                          "-weight blocks",
                          field, ne[0], hurray_dtype_info(a->dtype)->name, elements);
    }
    ne[0] = ne[0] / elements * bytes; /* no wrap: bytes / elements < 2 */
    if (ne[0] > (uint64_t)HURRAY_MAX_DIM) {
      return hurray__fail(error, HURRAY_EFORMAT,
                          "GGUF: %s: a row of %" PRIu64 " bytes is too large", field, ne[0]);
    }
  }
  for (uint32_t k = 0; k < ndim; k++) shape[ndim - 1 - k] = (int64_t)ne[k];
  a->ndim = (int32_t)ndim;
  a->shape = shape;
  uint64_t numel = 1, total = 0;
  for (uint32_t k = 0; k < ndim; k++) {
    if (hurray__mul_u64(numel, ne[k], &numel)) {
      return hurray__fail(error, HURRAY_EFORMAT, "GGUF: %s: the element count overflows", field);
    }
  }
  if (hurray_dtype_storage_bytes(a->dtype, numel, &total, error) != HURRAY_OK) {
    return hurray__fail(error, HURRAY_EFORMAT, "GGUF: %s: the size overflows", field);
  }
  a->numel = numel;
  a->data_bytes = total;
  a->region_size = total;
  return HURRAY_OK;
}

int hurray__gguf_parse(const uint8_t *bytes, uint64_t size, FileArena *arena, GgufHeader *out,
                       HurrayError *error) {
  Reader r = {.b = bytes, .size = size, .arena = arena};
  *out = (GgufHeader){.alignment = CONV_GGUF_DEFAULT_ALIGNMENT};
  uint32_t magic = 0;
  uint64_t tensors = 0, kvs = 0;
  int status = read_u32(&r, &magic, "the magic", error);
  if (status == HURRAY_OK && memcmp(bytes, "GGUF", 4) != 0) {
    return hurray__fail(error, HURRAY_EFORMAT, "GGUF byte 0: the magic is not \"GGUF\"");
  }
  if (status == HURRAY_OK) status = read_u32(&r, &out->version, "the version", error);
  if (status == HURRAY_OK && out->version != 2 && out->version != 3) {
    return hurray__fail(error, out->version == 1 ? HURRAY_EUNSUPPORTED : HURRAY_EFORMAT,
                        "GGUF byte 4: version %" PRIu32 " is not 2 or 3%s", out->version,
                        out->version > 0xFFFF ? " (a big-endian file?)" : "");
  }
  if (status == HURRAY_OK) status = read_u64(&r, &tensors, "the tensor count", error);
  if (status == HURRAY_OK) status = read_u64(&r, &kvs, "the key/value count", error);
  if (status != HURRAY_OK) return status;
  /* A key/value takes at least 13 bytes, a tensor info 33. */
  if (tensors > CONV_GGUF_MAX_TENSORS || tensors > (size - r.at) / 33) {
    return hurray__fail(error, tensors <= (size - r.at) / 33 ? HURRAY_ELIMIT : HURRAY_EFORMAT,
                        "GGUF byte 8: the tensor count %" PRIu64
                        " exceeds the limit of %u or what the %" PRIu64 " bytes left can hold",
                        tensors, CONV_GGUF_MAX_TENSORS, size - r.at);
  }
  if (kvs > CONV_GGUF_MAX_KVS || kvs > (size - r.at) / 13) {
    return hurray__fail(error, kvs <= (size - r.at) / 13 ? HURRAY_ELIMIT : HURRAY_EFORMAT,
                        "GGUF byte 16: the key/value count %" PRIu64
                        " exceeds the limit of %u or what the %" PRIu64 " bytes left can hold",
                        kvs, CONV_GGUF_MAX_KVS, size - r.at);
  }
  status = parse_kvs(&r, kvs, out, error);
  if (status != HURRAY_OK) return status;
  out->count = (uint32_t)tensors;
  out->arrays = hurray__arena_alloc(arena, (tensors ? tensors : 1) * sizeof *out->arrays);
  uint64_t *offsets = malloc((tensors ? tensors : 1) * sizeof *offsets);
  Named *named = malloc((tensors ? tensors : 1) * sizeof *named);
  if (out->arrays == NULL || offsets == NULL || named == NULL) {
    status = hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  }
  for (uint32_t i = 0; i < out->count && status == HURRAY_OK; i++) {
    status = parse_tensor(&r, i, &out->arrays[i], &offsets[i], error);
    if (status == HURRAY_OK) named[i] = (Named){out->arrays[i].name, out->arrays[i].name_len};
  }
  if (status == HURRAY_OK) status = check_unique(named, out->count, "tensor name", error);
  uint64_t data = r.at;
  if (status == HURRAY_OK && hurray__add_u64(r.at, out->alignment - 1, &data)) {
    status = hurray__fail(error, HURRAY_EFORMAT, "GGUF: the data section's offset overflows");
  }
  data -= data % out->alignment;
  out->data_offset = data;
  for (uint32_t i = 0; i < out->count && status == HURRAY_OK; i++) {
    ConvArray *a = &out->arrays[i];
    uint64_t begin = 0, end = 0;
    if (offsets[i] % out->alignment != 0) {
      status = hurray__fail(error, HURRAY_EFORMAT,
                            "GGUF: tensor '%.64s': offset %" PRIu64
                            " is not a multiple of the alignment %" PRIu32,
                            a->name, offsets[i], out->alignment);
    } else if (hurray__add_u64(data, offsets[i], &begin) ||
               hurray__add_u64(begin, a->region_size, &end) || end > size) {
      status = hurray__fail(error, HURRAY_EFORMAT,
                            "GGUF: tensor '%.64s': offset %" PRIu64 " (%" PRIu64
                            " bytes) ends past the %" PRIu64 " bytes of data (truncated?)",
                            a->name, offsets[i], a->region_size, size > data ? size - data : 0);
    }
    a->region_offset = begin;
  }
  free(offsets);
  free(named);
  return status;
}

/* ---- writing ------------------------------------------------------------------------------ */

static void sink_string(FileSink *out, const char *s, size_t len) {
  hurray__sink_u64(out, len);
  hurray__sink_bytes(out, s, len);
}

/* The GGUF type an integer takes: u32 where it fits (as llama.cpp's counts and sizes), else
 * i32, else i64. */
static uint32_t int_type(int64_t v) {
  if (v >= 0 && v <= (int64_t)UINT32_MAX) return GT_U32;
  return v >= INT32_MIN ? GT_I32 : GT_I64;
}

/* The GGUF type of a metadata value, or GT_COUNT where GGUF has none (maps, null). A list takes
 * its first item's type, every item must have it (integers: one type that holds all). */
static uint32_t value_type(const HurrayMetaValue *v, uint32_t depth) {
  switch (v->type) {
    case HURRAY_META_BOOL: return GT_BOOL;
    case HURRAY_META_INT64: return int_type(v->as.int64);
    case HURRAY_META_INTEGER: return v->count > 0 && v->as.string[0] != '-' ? GT_U64 : GT_COUNT;
    case HURRAY_META_FLOAT64: return (double)(float)v->as.float64 == v->as.float64 ? GT_F32 : GT_F64;
    case HURRAY_META_STRING: return GT_STRING;
    case HURRAY_META_LIST: return depth < CONV_GGUF_MAX_DEPTH ? GT_ARRAY : GT_COUNT;
    default: return GT_COUNT;
  }
}

/* The element type of a list: the same for every item; integers widen to one that holds all. */
static uint32_t list_type(const HurrayMetaValue *v, uint32_t depth) {
  if (v->count == 0) return GT_U8;
  uint32_t t = value_type(&v->as.items[0], depth + 1);
  for (uint32_t i = 1; i < v->count && t != GT_COUNT; i++) {
    uint32_t u = value_type(&v->as.items[i], depth + 1);
    const bool ints = (t == GT_U32 || t == GT_I32 || t == GT_I64) &&
                      (u == GT_U32 || u == GT_I32 || u == GT_I64);
    if (ints && t != u) {
      t = GT_I64; /* holds u32, i32 and i64 alike */
    } else if (u == GT_F64 && t == GT_F32) {
      t = GT_F64;
    } else if (!(u == GT_F32 && t == GT_F64) && u != t) {
      t = GT_COUNT;
    }
  }
  return t;
}

static int write_value(FileSink *out, const HurrayMetaValue *v, uint32_t type, uint32_t depth,
                       const char *key, HurrayError *error) {
  switch (type) {
    case GT_BOOL: hurray__sink_u8(out, v->as.boolean); return HURRAY_OK;
    case GT_U32:
    case GT_I32: hurray__sink_u32(out, (uint32_t)v->as.int64); return HURRAY_OK;
    case GT_I64: hurray__sink_u64(out, (uint64_t)v->as.int64); return HURRAY_OK;
    case GT_U64: {
      uint64_t u = 0;
      if (v->type == HURRAY_META_INT64) {
        u = (uint64_t)v->as.int64;
      } else {
        for (uint32_t i = 0; i < v->count; i++) {
          if (hurray__mul_u64(u, 10, &u) ||
              hurray__add_u64(u, (uint64_t)(v->as.string[i] - '0'), &u)) {
            return hurray__fail(error, HURRAY_EUNSUPPORTED,
                                "metadata '%.64s': an integer past 2^64 - 1 has no GGUF type",
                                key);
          }
        }
      }
      hurray__sink_u64(out, u);
      return HURRAY_OK;
    }
    case GT_F32: {
      float f = (float)v->as.float64;
      uint32_t bits;
      memcpy(&bits, &f, sizeof bits);
      hurray__sink_u32(out, bits);
      return HURRAY_OK;
    }
    case GT_F64: {
      uint64_t bits;
      memcpy(&bits, &v->as.float64, sizeof bits);
      hurray__sink_u64(out, bits);
      return HURRAY_OK;
    }
    case GT_STRING: sink_string(out, v->as.string, v->count); return HURRAY_OK;
    case GT_ARRAY: {
      uint32_t item = list_type(v, depth);
      if (item == GT_COUNT) {
        return hurray__fail(error, HURRAY_EUNSUPPORTED,
                            "metadata '%.64s': a list GGUF cannot hold (its items differ in "
                            "type, or are maps or null, or nest deeper than %u)",
                            key, CONV_GGUF_MAX_DEPTH);
      }
      hurray__sink_u32(out, item);
      hurray__sink_u64(out, v->count);
      int status = HURRAY_OK;
      for (uint32_t i = 0; i < v->count && status == HURRAY_OK; i++) {
        status = write_value(out, &v->as.items[i], item, depth + 1, key, error);
      }
      return status;
    }
    default:
      return hurray__fail(error, HURRAY_EUNSUPPORTED,
                          "metadata '%.64s' is %s, which GGUF has no type for", key,
                          hurray_meta_type_name(v->type));
  }
}

int hurray__gguf_check(const ConvArray *a, HurrayError *error) {
  if (a->refusal != NULL) {
    return hurray__fail(error, HURRAY_EUNSUPPORTED,
                        "tensor '%.64s' is a %s tensor: GGUF holds dense arrays only", a->name,
                        a->refusal);
  }
  if (hurray__gguf_type(a->dtype) < 0) {
    return hurray__fail(error, HURRAY_EUNSUPPORTED, "tensor '%.64s' is %s, which GGUF has no type for",
                        a->name, hurray_dtype_info(a->dtype)->name);
  }
  if (a->ndim < 1 || a->ndim > (int32_t)CONV_GGUF_MAX_DIMS) {
    return hurray__fail(error, HURRAY_EUNSUPPORTED,
                        "tensor '%.64s' has rank %" PRId32 "; GGUF holds ranks 1 to %u", a->name,
                        a->ndim, CONV_GGUF_MAX_DIMS);
  }
  if (a->name_len > CONV_GGUF_MAX_NAME) {
    return hurray__fail(error, HURRAY_EUNSUPPORTED,
                        "tensor '%.64s': its name is %zu bytes; ggml's are at most %u", a->name,
                        a->name_len, CONV_GGUF_MAX_NAME);
  }
  return HURRAY_OK;
}

int hurray__gguf_header(FileSink *out, const ConvArray *arrays, uint32_t count,
                        const HurrayMetaValue *metadata, uint32_t *alignment, HurrayError *error) {
  *alignment = CONV_GGUF_DEFAULT_ALIGNMENT;
  uint32_t kvs = metadata != NULL ? metadata->count : 0;
  for (uint32_t i = 0; i < kvs; i++) {
    const HurrayMetaValue *v = &metadata->as.items[i];
    if (strcmp(metadata->keys[i], "general.alignment") == 0) {
      if (v->type != HURRAY_META_INT64 || v->as.int64 <= 0 ||
          v->as.int64 > CONV_GGUF_MAX_ALIGNMENT || (v->as.int64 & (v->as.int64 - 1)) != 0) {
        return hurray__fail(error, HURRAY_EINVAL,
                            "metadata general.alignment is a power of two up to %u",
                            CONV_GGUF_MAX_ALIGNMENT);
      }
      *alignment = (uint32_t)v->as.int64;
    }
  }
  hurray__sink_bytes(out, "GGUF", 4);
  hurray__sink_u32(out, 3);
  hurray__sink_u64(out, count);
  hurray__sink_u64(out, kvs);
  int status = HURRAY_OK;
  for (uint32_t i = 0; i < kvs && status == HURRAY_OK; i++) {
    const char *key = metadata->keys[i];
    const HurrayMetaValue *v = &metadata->as.items[i];
    uint32_t type = value_type(v, 0);
    if (type == GT_COUNT) {
      return hurray__fail(error, HURRAY_EUNSUPPORTED,
                          "metadata '%.64s' is %s, which GGUF has no type for", key,
                          hurray_meta_type_name(v->type));
    }
    sink_string(out, key, strlen(key));
    hurray__sink_u32(out, type);
    status = write_value(out, v, type, 0, key, error);
  }
  uint64_t offset = 0;
  for (uint32_t i = 0; i < count && status == HURRAY_OK; i++) {
    const ConvArray *a = &arrays[i];
    status = hurray__gguf_check(a, error);
    if (status != HURRAY_OK) break;
    sink_string(out, a->name, a->name_len);
    hurray__sink_u32(out, (uint32_t)a->ndim);
    uint32_t elements = 1, bytes = 1;
    bool block = hurray_dtype_block(a->dtype, &elements, &bytes, NULL) == HURRAY_OK;
    for (int32_t k = a->ndim - 1; k >= 0; k--) {
      uint64_t ne = (uint64_t)a->shape[k];
      if (block && k == a->ndim - 1) ne = ne / bytes * elements; /* whole blocks: validated */
      hurray__sink_u64(out, ne);
    }
    hurray__sink_u32(out, (uint32_t)hurray__gguf_type(a->dtype));
    hurray__sink_u64(out, offset);
    uint64_t padded = a->data_bytes + (*alignment - a->data_bytes % *alignment) % *alignment;
    if (hurray__add_u64(offset, padded, &offset)) {
      status = hurray__fail(error, HURRAY_EOVERFLOW, "the GGUF data section overflows");
    }
  }
  if (status == HURRAY_OK) hurray__sink_zeros(out, (*alignment - out->len % *alignment) % *alignment);
  if (status == HURRAY_OK && out->failed) status = hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  return status;
}
