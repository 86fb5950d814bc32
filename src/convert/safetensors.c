/* safetensors.c -- the safetensors header: an 8-byte little-endian length N (at most 100 MB,
 * as the safetensors package), then N bytes of JSON:
 *
 *   {"__metadata__": {"key": "value", ...},
 *    "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
 *
 * then the data, whose offsets are relative to its start (8 + N). The parser is driven by
 * that schema and validates as safetensors does: dtype known, offsets tiling the data
 * exactly (from 0, without gap or overlap, the last ending at the end of the file), each
 * tensor's byte count equal to numel * dtype bits / 8 (a whole number of bytes). It is
 * stricter where the format leaves room for ambiguity: duplicate keys, unknown fields in an
 * entry and values of the wrong type are errors, each naming its byte offset. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"

/* The dtypes of safetensors, in the order of its Dtype enum: its writer sorts tensors by this
 * rank, descending (so each starts aligned to its element size), then by name. */
typedef struct StDtype {
  const char *name;
  uint8_t code;
} StDtype;

static const StDtype kStDtypes[] = {
    {"BOOL", HURRAY_DTYPE_BOOL},
    {"F4", HURRAY_DTYPE_FLOAT4_E2M1FN},
    {"F6_E2M3", HURRAY_DTYPE_FLOAT6_E2M3FN},
    {"F6_E3M2", HURRAY_DTYPE_FLOAT6_E3M2FN},
    {"U8", HURRAY_DTYPE_UINT8},
    {"I8", HURRAY_DTYPE_INT8},
    {"F8_E5M2", HURRAY_DTYPE_FLOAT8_E5M2},
    {"F8_E4M3", HURRAY_DTYPE_FLOAT8_E4M3FN},
    {"F8_E8M0", HURRAY_DTYPE_FLOAT8_E8M0FNU},
    {"F8_E4M3FNUZ", HURRAY_DTYPE_FLOAT8_E4M3FNUZ},
    {"F8_E5M2FNUZ", HURRAY_DTYPE_FLOAT8_E5M2FNUZ},
    {"I16", HURRAY_DTYPE_INT16},
    {"U16", HURRAY_DTYPE_UINT16},
    {"F16", HURRAY_DTYPE_FLOAT16},
    {"BF16", HURRAY_DTYPE_BFLOAT16},
    {"I32", HURRAY_DTYPE_INT32},
    {"U32", HURRAY_DTYPE_UINT32},
    {"F32", HURRAY_DTYPE_FLOAT32},
    {"C64", HURRAY_DTYPE_COMPLEX64},
    {"F64", HURRAY_DTYPE_FLOAT64},
    {"I64", HURRAY_DTYPE_INT64},
    {"U64", HURRAY_DTYPE_UINT64},
};
enum { ST_DTYPE_COUNT = sizeof kStDtypes / sizeof kStDtypes[0] };

/* The rank of a Hurray dtype in kStDtypes, or -1. */
int hurray__safetensors_rank(int dtype) {
  for (int i = 0; i < ST_DTYPE_COUNT; i++) {
    if (kStDtypes[i].code == dtype) return i;
  }
  return -1;
}

const char *hurray__safetensors_dtype_name(int dtype) {
  int rank = hurray__safetensors_rank(dtype);
  return rank < 0 ? NULL : kStDtypes[rank].name;
}

/* ---- parsing ------------------------------------------------------------------------------ */

/* A parsed entry, before its offsets are checked. */
typedef struct Entry {
  ConvArray array;
  uint64_t begin, end;
  uint64_t at; /* file offset of its name, for messages */
} Entry;

typedef struct Parse {
  TextCursor j;
  FileArena *arena;
  Entry *entries;
  uint32_t count, capacity;
  bool has_metadata;
  HurrayMetaValue metadata;
} Parse;

/* Prints at most 64 bytes of a name into a message. */
#define NAME_FMT "'%.64s%s'"
#define NAME_ARG(s, n) (s), ((n) > 64 ? "..." : "")

static int parse_dtype(Parse *p, ConvArray *a, HurrayError *error) {
  uint64_t at = hurray__cursor_offset(&p->j);
  const char *name = NULL;
  size_t len = 0;
  int status = hurray__json_string(&p->j, p->arena, &name, &len, "a dtype string", error);
  if (status != HURRAY_OK) return status;
  for (int i = 0; i < ST_DTYPE_COUNT; i++) {
    if (strlen(kStDtypes[i].name) == len && memcmp(kStDtypes[i].name, name, len) == 0) {
      a->dtype = kStDtypes[i].code;
      return HURRAY_OK;
    }
  }
  return hurray__fail(error, HURRAY_EDTYPE, "byte %" PRIu64 ": unknown safetensors dtype " NAME_FMT,
                      at, NAME_ARG(name, len));
}

static int parse_shape(Parse *p, ConvArray *a, HurrayError *error) {
  int64_t shape[HURRAY_MAX_NDIM];
  int32_t ndim = 0;
  int status = hurray__cursor_expect(&p->j, '[', "'[' starting the shape", error);
  if (status != HURRAY_OK) return status;
  if (!hurray__cursor_accept(&p->j, ']')) {
    do {
      uint64_t at = hurray__cursor_offset(&p->j), extent = 0;
      if (ndim == HURRAY_MAX_NDIM) {
        return hurray__fail(error, HURRAY_ELIMIT,
                            "byte %" PRIu64 ": the shape has more than %d dimensions", at,
                            HURRAY_MAX_NDIM);
      }
      status = hurray__json_uint(&p->j, &extent, "an extent (a non-negative integer)", error);
      if (status != HURRAY_OK) return status;
      if (extent > (uint64_t)HURRAY_MAX_DIM) {
        return hurray__fail(error, HURRAY_ELIMIT,
                            "byte %" PRIu64 ": extent %" PRIu64 " exceeds 2^62", at, extent);
      }
      shape[ndim++] = (int64_t)extent;
    } while (hurray__cursor_accept(&p->j, ','));
    status = hurray__cursor_expect(&p->j, ']', "',' or ']' in the shape", error);
    if (status != HURRAY_OK) return status;
  }
  int64_t *copy = hurray__arena_alloc(p->arena, (size_t)ndim * sizeof *copy);
  if (copy == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  if (ndim > 0) memcpy(copy, shape, (size_t)ndim * sizeof *copy);
  a->ndim = ndim;
  a->shape = copy;
  return HURRAY_OK;
}

static int parse_offsets(Parse *p, Entry *e, HurrayError *error) {
  int status = hurray__cursor_expect(&p->j, '[', "'[' starting data_offsets", error);
  if (status == HURRAY_OK) status = hurray__json_uint(&p->j, &e->begin, "a begin offset", error);
  if (status == HURRAY_OK) status = hurray__cursor_expect(&p->j, ',', "',' in data_offsets", error);
  if (status == HURRAY_OK) status = hurray__json_uint(&p->j, &e->end, "an end offset", error);
  if (status == HURRAY_OK) {
    status = hurray__cursor_expect(&p->j, ']', "']' ending data_offsets (two integers)", error);
  }
  return status;
}

/* {"dtype": ..., "shape": [...], "data_offsets": [b, e]}, each exactly once, any order. */
static int parse_entry(Parse *p, Entry *e, HurrayError *error) {
  enum { DTYPE = 1, SHAPE = 2, OFFSETS = 4 };
  unsigned seen = 0;
  uint64_t open = hurray__cursor_offset(&p->j);
  int status = hurray__cursor_expect(&p->j, '{', "'{' starting a tensor entry", error);
  if (status != HURRAY_OK) return status;
  if (!hurray__cursor_accept(&p->j, '}')) {
    do {
      uint64_t at = hurray__cursor_offset(&p->j);
      const char *key = NULL;
      size_t len = 0;
      status = hurray__json_string(&p->j, p->arena, &key, &len, "a field name", error);
      if (status == HURRAY_OK)
        status = hurray__cursor_expect(&p->j, ':', "':' after a field name", error);
      if (status != HURRAY_OK) return status;
      unsigned field = len == 5 && memcmp(key, "dtype", 5) == 0            ? DTYPE
                       : len == 5 && memcmp(key, "shape", 5) == 0          ? SHAPE
                       : len == 12 && memcmp(key, "data_offsets", 12) == 0 ? OFFSETS
                                                                           : 0;
      if (field == 0) {
        return hurray__fail(error, HURRAY_EFORMAT,
                            "byte %" PRIu64 ": unknown field " NAME_FMT
                            " (a tensor entry has dtype, shape and data_offsets)",
                            at, NAME_ARG(key, len));
      }
      if (seen & field) {
        return hurray__fail(error, HURRAY_EFORMAT, "byte %" PRIu64 ": duplicate field '%s'", at,
                            key);
      }
      seen |= field;
      status = field == DTYPE   ? parse_dtype(p, &e->array, error)
               : field == SHAPE ? parse_shape(p, &e->array, error)
                                : parse_offsets(p, e, error);
      if (status != HURRAY_OK) return status;
    } while (hurray__cursor_accept(&p->j, ','));
    status = hurray__cursor_expect(&p->j, '}', "',' or '}' in a tensor entry", error);
    if (status != HURRAY_OK) return status;
  }
  if (seen != (DTYPE | SHAPE | OFFSETS)) {
    return hurray__fail(error, HURRAY_EFORMAT, "byte %" PRIu64 ": the tensor entry lacks %s", open,
                        !(seen & DTYPE)   ? "dtype"
                        : !(seen & SHAPE) ? "shape"
                                          : "data_offsets");
  }
  return HURRAY_OK;
}

/* A metadata entry while __metadata__ is parsed. */
typedef struct MetaEntry {
  const char *key;
  size_t key_len;
  HurrayMetaValue value;
  uint64_t at; /* file offset of the key, for messages */
} MetaEntry;

static int compare_meta(const void *a, const void *b) {
  const MetaEntry *x = a, *y = b;
  int c = hurray__compare_bytes(x->key, x->key_len, y->key, y->key_len);
  return c != 0 ? c : (x->at > y->at) - (x->at < y->at);
}

/* Unique keys, found in O(n log n): sorted by key, then by position. */
static int check_meta_keys(MetaEntry *entries, uint32_t count, HurrayError *error) {
  if (count > 1) qsort(entries, count, sizeof *entries, compare_meta);
  for (uint32_t i = 1; i < count; i++) {
    if (hurray__compare_bytes(entries[i - 1].key, entries[i - 1].key_len, entries[i].key,
                              entries[i].key_len) == 0) {
      return hurray__fail(error, HURRAY_EFORMAT,
                          "byte %" PRIu64 ": duplicate metadata key " NAME_FMT, entries[i].at,
                          NAME_ARG(entries[i].key, entries[i].key_len));
    }
  }
  return HURRAY_OK;
}

static int parse_meta_entry(Parse *p, MetaEntry *e, HurrayError *error) {
  e->at = hurray__cursor_offset(&p->j);
  const char *value = NULL;
  size_t value_len = 0;
  int status = hurray__json_string(&p->j, p->arena, &e->key, &e->key_len, "a metadata key", error);
  if (status == HURRAY_OK) {
    status = hurray__check_name((const uint8_t *)e->key, e->key_len, HURRAY_EUNSUPPORTED,
                                "the metadata key (a Hurray name)", error);
    if (status != HURRAY_OK) hurray__error_prefix(error, status, "byte %" PRIu64 ": ", e->at);
  }
  if (status == HURRAY_OK) {
    status = hurray__cursor_expect(&p->j, ':', "':' after a metadata key", error);
  }
  if (status == HURRAY_OK) {
    status = hurray__json_string(&p->j, p->arena, &value, &value_len,
                                 "a string (metadata values are strings)", error);
  }
  if (status == HURRAY_OK && value_len > HURRAY_META_MAX_BYTES) {
    status = hurray__fail(error, HURRAY_ELIMIT, "byte %" PRIu64 ": metadata value over %u bytes",
                          e->at, HURRAY_META_MAX_BYTES);
  }
  e->value = (HurrayMetaValue){.type = HURRAY_META_STRING, .count = (uint32_t)value_len};
  e->value.as.string = value;
  return status;
}

/* "__metadata__": null or an object of string values, keys valid Hurray names, unique. */
static int parse_metadata(Parse *p, HurrayError *error) {
  if (hurray__json_accept_null(&p->j)) return HURRAY_OK;
  int status = hurray__cursor_expect(&p->j, '{', "'{' starting __metadata__ (or null)", error);
  if (status != HURRAY_OK || hurray__cursor_accept(&p->j, '}')) return status;
  MetaEntry *entries = NULL;
  uint32_t count = 0, capacity = 0;
  do {
    if (count == capacity) {
      capacity = capacity ? capacity * 2 : 8;
      MetaEntry *grown = realloc(entries, capacity * sizeof *grown);
      if (grown == NULL) {
        status = hurray__fail(error, HURRAY_ENOMEM, "out of memory");
        break;
      }
      entries = grown;
    }
    status = parse_meta_entry(p, &entries[count++], error);
  } while (status == HURRAY_OK && hurray__cursor_accept(&p->j, ','));
  if (status == HURRAY_OK) {
    status = hurray__cursor_expect(&p->j, '}', "',' or '}' in __metadata__", error);
  }
  if (status == HURRAY_OK) status = check_meta_keys(entries, count, error);
  const char **keys = NULL;
  HurrayMetaValue *values = NULL;
  if (status == HURRAY_OK) { /* into the arena, sorted by key */
    keys = hurray__arena_alloc(p->arena, count * sizeof *keys);
    values = hurray__arena_alloc(p->arena, count * sizeof *values);
    if (keys == NULL || values == NULL)
      status = hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  }
  if (status == HURRAY_OK) {
    for (uint32_t i = 0; i < count; i++) {
      keys[i] = entries[i].key;
      values[i] = entries[i].value;
    }
    p->metadata = (HurrayMetaValue){.type = HURRAY_META_MAP, .count = count, .keys = keys};
    p->metadata.as.items = values;
  }
  free(entries);
  return status;
}

static int compare_entries(const void *a, const void *b) {
  const Entry *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return (x->end > y->end) - (x->end < y->end);
}

/* The names of tensors must be unique: checked on a copy sorted by name. */
static int compare_names(const void *a, const void *b) {
  const Entry *const *x = a, *const *y = b;
  return hurray__compare_bytes((*x)->array.name, (*x)->array.name_len, (*y)->array.name,
                               (*y)->array.name_len);
}

static int check_unique(Parse *p, HurrayError *error) {
  if (p->count < 2) return HURRAY_OK;
  Entry **sorted = malloc(p->count * sizeof *sorted);
  if (sorted == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  for (uint32_t i = 0; i < p->count; i++) sorted[i] = &p->entries[i];
  qsort(sorted, p->count, sizeof *sorted, compare_names);
  int status = HURRAY_OK;
  for (uint32_t i = 1; i < p->count && status == HURRAY_OK; i++) {
    if (compare_names(&sorted[i - 1], &sorted[i]) == 0) {
      const Entry *e = sorted[i - 1]->at > sorted[i]->at ? sorted[i - 1] : sorted[i];
      status =
          hurray__fail(error, HURRAY_EFORMAT, "byte %" PRIu64 ": duplicate tensor name " NAME_FMT,
                       e->at, NAME_ARG(e->array.name, e->array.name_len));
    }
  }
  free(sorted);
  return status;
}

static int parse_object(Parse *p, HurrayError *error) {
  int status = hurray__cursor_expect(&p->j, '{', "'{' starting the header", error);
  if (status != HURRAY_OK || hurray__cursor_accept(&p->j, '}')) return status;
  do {
    uint64_t at = hurray__cursor_offset(&p->j);
    const char *name = NULL;
    size_t len = 0;
    status = hurray__json_string(&p->j, p->arena, &name, &len, "a tensor name", error);
    if (status == HURRAY_OK)
      status = hurray__cursor_expect(&p->j, ':', "':' after a tensor name", error);
    if (status != HURRAY_OK) return status;
    if (len == 12 && memcmp(name, "__metadata__", 12) == 0) {
      if (p->has_metadata) {
        return hurray__fail(error, HURRAY_EFORMAT, "byte %" PRIu64 ": duplicate __metadata__", at);
      }
      p->has_metadata = true;
      status = parse_metadata(p, error);
      if (status != HURRAY_OK) return status;
      continue;
    }
    status = hurray__check_name((const uint8_t *)name, len, HURRAY_EUNSUPPORTED,
                                "the tensor name (a Hurray name)", error);
    if (status != HURRAY_OK) return hurray__error_prefix(error, status, "byte %" PRIu64 ": ", at);
    if (p->count == HURRAY_FILE_MAX_TENSORS) {
      return hurray__fail(error, HURRAY_ELIMIT, "byte %" PRIu64 ": more than %u tensors", at,
                          HURRAY_FILE_MAX_TENSORS);
    }
    if (p->count == p->capacity) {
      uint32_t capacity = p->capacity ? p->capacity * 2 : 16;
      Entry *grown = realloc(p->entries, capacity * sizeof *grown);
      if (grown == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
      p->entries = grown;
      p->capacity = capacity;
    }
    Entry *e = &p->entries[p->count];
    *e = (Entry){.array = {.name = name, .name_len = len}, .at = at};
    status = parse_entry(p, e, error);
    if (status != HURRAY_OK) {
      return hurray__error_prefix(error, status, "tensor " NAME_FMT ": ", NAME_ARG(name, len));
    }
    p->count++;
  } while (hurray__cursor_accept(&p->j, ','));
  status = hurray__cursor_expect(&p->j, '}', "',' or '}' after a header entry", error);
  if (status == HURRAY_OK) {
    status = hurray__cursor_end(&p->j, "only whitespace after the header's object", error);
  }
  return status;
}

/* Sizes and the tiling of the data region, as safetensors' Metadata::validate. */
static int check_offsets(Parse *p, uint64_t data_start, uint64_t data_size, HurrayError *error) {
  if (p->count > 0) qsort(p->entries, p->count, sizeof *p->entries, compare_entries);
  uint64_t expected = 0;
  for (uint32_t i = 0; i < p->count; i++) {
    Entry *e = &p->entries[i];
    ConvArray *a = &e->array;
    const HurrayDTypeInfo *info = hurray_dtype_info(a->dtype);
    uint64_t numel = 1, bits = 0;
    for (int32_t k = 0; k < a->ndim; k++) {
      if (hurray__mul_u64(numel, (uint64_t)a->shape[k], &numel)) {
        return hurray__fail(error, HURRAY_EOVERFLOW,
                            "tensor " NAME_FMT ": the element count overflows",
                            NAME_ARG(a->name, a->name_len));
      }
    }
    if (hurray__mul_u64(numel, info->bits, &bits)) {
      return hurray__fail(error, HURRAY_EOVERFLOW, "tensor " NAME_FMT ": the byte size overflows",
                          NAME_ARG(a->name, a->name_len));
    }
    if (bits % 8 != 0) {
      return hurray__fail(error, HURRAY_EFORMAT,
                          "tensor " NAME_FMT ": %" PRIu64
                          " elements of %u bits are not a whole number of bytes",
                          NAME_ARG(a->name, a->name_len), numel, info->bits);
    }
    if (e->begin != expected) {
      return hurray__fail(error, HURRAY_EFORMAT,
                          "tensor " NAME_FMT ": data_offsets [%" PRIu64 ", %" PRIu64
                          "] %s: the data must be "
                          "tiled without gap or overlap, so it should begin at %" PRIu64,
                          NAME_ARG(a->name, a->name_len), e->begin, e->end,
                          e->begin > expected ? "leave a gap" : "overlap the previous tensor",
                          expected);
    }
    if (e->end < e->begin || e->end - e->begin != bits / 8) {
      return hurray__fail(error, HURRAY_EFORMAT,
                          "tensor " NAME_FMT ": data_offsets [%" PRIu64 ", %" PRIu64
                          "] do not span the %" PRIu64 " bytes of %" PRIu64 " %s elements",
                          NAME_ARG(a->name, a->name_len), e->begin, e->end, bits / 8, numel,
                          info->name);
    }
    if (e->end > data_size) {
      return hurray__fail(error, HURRAY_EFORMAT,
                          "tensor " NAME_FMT ": data_offsets [%" PRIu64 ", %" PRIu64
                          "] reach past the end of the data (%" PRIu64 " bytes)",
                          NAME_ARG(a->name, a->name_len), e->begin, e->end, data_size);
    }
    a->numel = numel;
    a->data_bytes = a->region_size = bits / 8;
    a->region_offset = data_start + e->begin;
    a->index = i;
    expected = e->end;
  }
  if (expected != data_size) {
    return hurray__fail(error, HURRAY_EFORMAT,
                        "the tensors cover %" PRIu64 " bytes of data but the file holds %" PRIu64
                        " after the header: %s",
                        expected, data_size, expected < data_size ? "trailing bytes" : "truncated");
  }
  return HURRAY_OK;
}

int hurray__safetensors_parse(const uint8_t *bytes, uint64_t size, FileArena *arena,
                              SafetensorsHeader *out, HurrayError *error) {
  if (size < 8) {
    return hurray__fail(
        error, HURRAY_EFORMAT,
        "truncated: a safetensors file starts with an 8-byte header length, the file has %" PRIu64
        " bytes",
        size);
  }
  uint64_t n = hurray__load_le64(bytes);
  if (n > CONV_SAFETENSORS_MAX_HEADER) {
    return hurray__fail(error, HURRAY_ELIMIT,
                        "byte 0: the header length %" PRIu64 " exceeds %u bytes", n,
                        CONV_SAFETENSORS_MAX_HEADER);
  }
  if (n > size - 8) {
    return hurray__fail(error, HURRAY_EFORMAT,
                        "byte 0: the header length %" PRIu64
                        " reaches past the end of the file (%" PRIu64 " bytes): truncated",
                        n, size);
  }
  Parse p = {.j = {.text = bytes + 8, .len = (size_t)n, .base = 8, .name = "the header"},
             .arena = arena};
  p.metadata = (HurrayMetaValue){.type = HURRAY_META_MAP};
  int status = parse_object(&p, error);
  if (status == HURRAY_OK) status = check_unique(&p, error);
  if (status == HURRAY_OK) status = check_offsets(&p, 8 + n, size - 8 - n, error);
  ConvArray *arrays = NULL;
  if (status == HURRAY_OK) {
    arrays = hurray__arena_alloc(arena, p.count * sizeof *arrays);
    if (arrays == NULL) status = hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  }
  if (status == HURRAY_OK) {
    for (uint32_t i = 0; i < p.count; i++) arrays[i] = p.entries[i].array;
    *out = (SafetensorsHeader){.header_len = n,
                               .data_start = 8 + n,
                               .count = p.count,
                               .arrays = arrays,
                               .metadata = p.metadata};
  }
  free(p.entries);
  return status;
}

/* ---- writing ------------------------------------------------------------------------------ */

static int compare_order(const void *a, const void *b) {
  const ConvArray *x = *(const ConvArray *const *)a, *y = *(const ConvArray *const *)b;
  int rx = hurray__safetensors_rank(x->dtype), ry = hurray__safetensors_rank(y->dtype);
  if (rx != ry) return rx > ry ? -1 : 1;
  return hurray__compare_bytes(x->name, x->name_len, y->name, y->name_len);
}

void hurray__safetensors_sort(const ConvArray **order, uint32_t count) {
  if (count > 1) qsort(order, count, sizeof *order, compare_order);
}

static void sink_text(FileSink *out, const char *text) {
  hurray__sink_bytes(out, text, strlen(text));
}

static void sink_uint(FileSink *out, uint64_t v) {
  char digits[24];
  int n = snprintf(digits, sizeof digits, "%" PRIu64, v);
  hurray__sink_bytes(out, digits, (size_t)n);
}

static void sink_string(FileSink *out, const char *s, size_t len) {
  hurray__sink_u8(out, '"');
  hurray__json_escape(out, s, len);
  hurray__sink_u8(out, '"');
}

/* A metadata value as JSON text (into `out`, unescaped). */
static void sink_meta_json(FileSink *out, const HurrayMetaValue *v) {
  switch (v->type) {
    case HURRAY_META_BOOL:
      sink_text(out, v->as.boolean ? "true" : "false");
      break;
    case HURRAY_META_INT64: {
      char digits[24];
      int n = snprintf(digits, sizeof digits, "%" PRId64, v->as.int64);
      hurray__sink_bytes(out, digits, (size_t)n);
      break;
    }
    case HURRAY_META_FLOAT64: {
      char text[HURRAY_FLOAT64_TEXT_SIZE];
      hurray__sink_bytes(out, text, hurray_format_float64(v->as.float64, text));
      break;
    }
    case HURRAY_META_STRING:
      sink_string(out, v->as.string, v->count);
      break;
    case HURRAY_META_NULL:
      sink_text(out, "null");
      break;
    case HURRAY_META_INTEGER: /* canonical decimal text: a JSON number as it stands */
      hurray__sink_bytes(out, v->as.string, v->count);
      break;
    default: { /* LIST, MAP */
      bool map = v->type == HURRAY_META_MAP;
      hurray__sink_u8(out, map ? '{' : '[');
      for (uint32_t i = 0; i < v->count; i++) {
        if (i > 0) hurray__sink_u8(out, ',');
        if (map) {
          sink_string(out, v->keys[i], strlen(v->keys[i]));
          hurray__sink_u8(out, ':');
        }
        sink_meta_json(out, &v->as.items[i]);
      }
      hurray__sink_u8(out, map ? '}' : ']');
    }
  }
}

static int sink_metadata(FileSink *out, const HurrayMetaValue *metadata,
                         SafetensorsNonString non_string, HurrayError *error) {
  sink_text(out, "\"__metadata__\":{");
  FileSink text = {0};
  bool first = true;
  for (uint32_t i = 0; i < metadata->count; i++) {
    const HurrayMetaValue *v = &metadata->as.items[i];
    if (v->type != HURRAY_META_STRING && non_string == NON_STRING_DROP) continue;
    if (v->type != HURRAY_META_STRING && non_string == NON_STRING_REFUSE) {
      hurray__sink_reset(&text);
      return hurray__fail(
          error, HURRAY_EUNSUPPORTED,
          "file metadata key '%.64s' holds a %s, but safetensors metadata values are "
          "strings (write it as JSON text with HURRAY_CONVERT_METADATA_JSON or "
          "--metadata-json)",
          metadata->keys[i], hurray_meta_type_name(v->type));
    }
    if (!first) hurray__sink_u8(out, ',');
    first = false;
    sink_string(out, metadata->keys[i], strlen(metadata->keys[i]));
    hurray__sink_u8(out, ':');
    if (v->type == HURRAY_META_STRING) {
      sink_string(out, v->as.string, v->count);
    } else {
      text.len = 0;
      sink_meta_json(&text, v);
      sink_string(out, text.failed ? "" : (const char *)text.data, text.failed ? 0 : text.len);
      if (text.failed) out->failed = true;
    }
  }
  hurray__sink_reset(&text);
  hurray__sink_u8(out, '}');
  return HURRAY_OK;
}

int hurray__safetensors_header(FileSink *out, const ConvArray *const *order, uint32_t count,
                               const HurrayMetaValue *metadata, SafetensorsNonString non_string,
                               uint32_t alignment, HurrayError *error) {
  hurray__sink_u64(out, 0); /* the length, patched below */
  hurray__sink_u8(out, '{');
  bool first = true;
  if (metadata != NULL && metadata->count > 0) {
    int status = sink_metadata(out, metadata, non_string, error);
    if (status != HURRAY_OK) return status;
    first = false;
  }
  uint64_t offset = 0;
  for (uint32_t i = 0; i < count; i++) {
    const ConvArray *a = order[i];
    if (!first) hurray__sink_u8(out, ',');
    first = false;
    sink_string(out, a->name, a->name_len);
    sink_text(out, ":{\"dtype\":\"");
    sink_text(out, hurray__safetensors_dtype_name(a->dtype));
    sink_text(out, "\",\"shape\":[");
    for (int32_t k = 0; k < a->ndim; k++) {
      if (k > 0) hurray__sink_u8(out, ',');
      sink_uint(out, (uint64_t)a->shape[k]);
    }
    sink_text(out, "],\"data_offsets\":[");
    sink_uint(out, offset);
    hurray__sink_u8(out, ',');
    if (hurray__add_u64(offset, a->data_bytes, &offset)) {
      return hurray__fail(error, HURRAY_EOVERFLOW, "the data size overflows");
    }
    sink_uint(out, offset);
    sink_text(out, "]}");
  }
  hurray__sink_u8(out, '}');
  if (out->failed) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  size_t pad = (alignment - out->len % alignment) % alignment;
  for (size_t i = 0; i < pad; i++) hurray__sink_u8(out, ' ');
  if (out->failed) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  uint64_t n = out->len - 8;
  if (n > CONV_SAFETENSORS_MAX_HEADER) {
    return hurray__fail(error, HURRAY_ELIMIT,
                        "the safetensors header would be %" PRIu64
                        " bytes, more than its limit of %u",
                        n, CONV_SAFETENSORS_MAX_HEADER);
  }
  hurray__store_le64(out->data, n);
  return HURRAY_OK;
}
