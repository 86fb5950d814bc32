/* record.c -- tensor records (spec §6): a name, the tensor's descriptor tree and its metadata.
 * The encoder checks only what the encoding needs (counts fit their fields, arrays present);
 * the meaning of a descriptor is checked once, by hurray_tensor_validate on the decoded record,
 * by the writer before it commits a tensor and by the reader when it opens a file. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "file.h"

/* ---- encoding ----------------------------------------------------------------------------- */

typedef struct Encoder {
  FileSink *out;
  FileRebaseFn rebase;
  void *rebase_context;
  HurrayError *error;
  uint32_t nodes; /* encoded so far: a tree whose children arrays are shared between parents
                     must not expand without bound */
} Encoder;

static int check_rank(int32_t ndim, const int64_t *shape, const char *what, HurrayError *error) {
  if (ndim < 0 || ndim > HURRAY_MAX_NDIM) {
    return hurray__fail(error, ndim < 0 ? HURRAY_EINVAL : HURRAY_ELIMIT,
                        "%s ndim %" PRId32 " is outside [0, %d]", what, ndim, HURRAY_MAX_NDIM);
  }
  if (ndim > 0 && shape == NULL) {
    return hurray__fail(error, HURRAY_EINVAL, "%s shape is NULL but ndim is %" PRId32, what, ndim);
  }
  return HURRAY_OK;
}

static void sink_dims(FileSink *out, const int64_t *dims, int32_t ndim) {
  for (int32_t k = 0; k < ndim; k++) hurray__sink_u64(out, (uint64_t)dims[k]);
}

static void sink_name(FileSink *out, const uint8_t *name, size_t len) {
  hurray__sink_bytes(out, name, len);
  hurray__sink_pad8(out);
}

static int encode_part(Encoder *e, const HurrayArray *part) {
  int status = check_rank(part->ndim, part->shape, "part", e->error);
  if (status != HURRAY_OK) return status;
  uint64_t offset = e->rebase ? e->rebase(e->rebase_context, part) : part->byte_offset;
  hurray__sink_u8(e->out, part->dtype);
  hurray__sink_u8(e->out, (uint8_t)part->ndim);
  bool has_strides = part->strides != NULL && part->ndim > 0; /* 0-d: nothing to store */
  hurray__sink_u8(e->out, has_strides ? PART_HAS_STRIDES : 0);
  hurray__sink_u8(e->out, 0);
  hurray__sink_u32(e->out, part->buffer);
  hurray__sink_u64(e->out, offset);
  sink_dims(e->out, part->shape, part->ndim);
  if (has_strides) sink_dims(e->out, part->strides, part->ndim);
  return HURRAY_OK;
}

static int encode_node(Encoder *e, const HurrayTensorDesc *t, int depth) {
  if (depth > HURRAY_MAX_DEPTH || ++e->nodes > HURRAY_MAX_NODES) {
    return hurray__fail(e->error, HURRAY_ELIMIT,
                        "composite tensors nest deeper than %d or count more than %u",
                        HURRAY_MAX_DEPTH, HURRAY_MAX_NODES);
  }
  int status = check_rank(t->ndim, t->shape, "tensor", e->error);
  if (status != HURRAY_OK) return status;
  if (t->layout > UINT8_MAX || t->nparts > HURRAY_MAX_PARTS || t->nchildren > HURRAY_MAX_CHILDREN) {
    return hurray__fail(e->error, t->layout > UINT8_MAX ? HURRAY_ELAYOUT : HURRAY_ELIMIT,
                        "layout %" PRIu32 ", %" PRIu32 " parts or %" PRIu32
                        " children is out of range",
                        t->layout, t->nparts, t->nchildren);
  }
  if ((t->nparts > 0 && t->parts == NULL) ||
      (t->nchildren > 0 && (t->children == NULL || t->child_names == NULL))) {
    return hurray__fail(e->error, HURRAY_EINVAL, "parts, children or child_names is NULL");
  }
  hurray__sink_u8(e->out, (uint8_t)t->layout);
  hurray__sink_u8(e->out, t->dtype);
  hurray__sink_u8(e->out, (uint8_t)t->ndim);
  hurray__sink_u8(e->out, (uint8_t)t->nparts);
  hurray__sink_u32(e->out, t->flags);
  hurray__sink_u32(e->out, (uint32_t)t->axis);
  hurray__sink_u32(e->out, t->nchildren);
  hurray__sink_u64(e->out, (uint64_t)t->block_size);
  sink_dims(e->out, t->shape, t->ndim);
  for (uint32_t i = 0; i < t->nparts && status == HURRAY_OK; i++) {
    status = encode_part(e, &t->parts[i]);
  }
  for (uint32_t i = 0; i < t->nchildren && status == HURRAY_OK; i++) {
    size_t len = 0;
    status = hurray__check_cname(t->child_names[i], "child name", &len, e->error);
    if (status != HURRAY_OK) break;
    hurray__sink_u16(e->out, (uint16_t)len);
    hurray__sink_zeros(e->out, CHILD_HEADER_SIZE - 2);
    sink_name(e->out, (const uint8_t *)t->child_names[i], len);
    status = encode_node(e, &t->children[i], depth + 1);
  }
  return status;
}

int hurray__record_encode(const uint8_t *name, size_t name_len, const HurrayTensorDesc *tensor,
                          FileRebaseFn rebase, void *rebase_context, const uint8_t *metadata,
                          uint32_t metadata_len, FileSink *out, HurrayError *error) {
  if (tensor == NULL) return hurray__fail(error, HURRAY_EINVAL, "tensor is NULL");
  hurray__sink_reset(out);
  hurray__sink_u16(out, (uint16_t)name_len);
  hurray__sink_u16(out, 0);
  hurray__sink_u32(out, metadata_len);
  sink_name(out, name, name_len);
  Encoder e = {out, rebase, rebase_context, error, 0};
  int status = encode_node(&e, tensor, 0);
  if (status == HURRAY_OK) hurray__sink_bytes(out, metadata, metadata_len);
  if (status == HURRAY_OK && out->failed)
    status = hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  if (status == HURRAY_OK && out->len > UINT32_MAX) {
    status = hurray__fail(error, HURRAY_ELIMIT, "the tensor's record exceeds 4 GiB");
  }
  if (status != HURRAY_OK) hurray__sink_reset(out);
  return status;
}

/* ---- decoding ----------------------------------------------------------------------------- */

typedef struct Decoder {
  FileCursor cursor;
  FileArena *arena;
  HurrayError *error;
} Decoder;

static int out_of_memory(Decoder *d) {
  return hurray__fail(d->error, HURRAY_ENOMEM, "out of memory");
}

/* `ndim` int64 values. */
static int take_dims(Decoder *d, uint32_t ndim, const int64_t **out) {
  const uint8_t *p = NULL;
  int status = hurray__take(&d->cursor, (size_t)ndim * 8, &p, d->error);
  if (status != HURRAY_OK || ndim == 0) {
    *out = NULL;
    return status;
  }
  int64_t *dims = hurray__arena_alloc(d->arena, (size_t)ndim * sizeof *dims);
  if (dims == NULL) return out_of_memory(d);
  for (uint32_t k = 0; k < ndim; k++) dims[k] = (int64_t)hurray__load_le64(p + 8 * k);
  *out = dims;
  return HURRAY_OK;
}

static int check_ndim(Decoder *d, uint8_t ndim, const char *what) {
  if (ndim <= HURRAY_MAX_NDIM) return HURRAY_OK;
  return hurray__fail(d->error, HURRAY_ELIMIT, "%s ndim %u exceeds %d", what, ndim,
                      HURRAY_MAX_NDIM);
}

/* A zero-padded name of `len` bytes, copied into the arena. */
static int take_name(Decoder *d, size_t len, const char *what, const char **out) {
  const uint8_t *p = NULL;
  int status = hurray__take(&d->cursor, len, &p, d->error);
  if (status == HURRAY_OK) status = hurray__check_name(p, len, HURRAY_EFORMAT, what, d->error);
  if (status == HURRAY_OK) {
    status =
        hurray__take_zeros(&d->cursor, (size_t)(hurray__pad8(len) - len), "name padding", d->error);
  }
  if (status == HURRAY_OK && (*out = hurray__arena_strndup(d->arena, p, len)) == NULL) {
    status = out_of_memory(d);
  }
  return status;
}

static int decode_part(Decoder *d, HurrayArray *part) {
  const uint8_t *p = NULL;
  int status = hurray__take(&d->cursor, PART_HEADER_SIZE, &p, d->error);
  if (status == HURRAY_OK) status = check_ndim(d, p[1], "part");
  /* Strides of a 0-d array would be empty: they are never stored. */
  if (status == HURRAY_OK &&
      ((p[2] & ~PART_HAS_STRIDES) != 0 || (p[2] != 0 && p[1] == 0) || p[3] != 0)) {
    status = hurray__fail(d->error, HURRAY_EFORMAT,
                          "part flags 0x%02X or reserved byte 0x%02X is not allowed", p[2], p[3]);
  }
  if (status != HURRAY_OK) return status;
  *part = (HurrayArray){.dtype = p[0],
                        .ndim = p[1],
                        .buffer = hurray__load_le32(p + 4),
                        .byte_offset = hurray__load_le64(p + 8)};
  status = take_dims(d, p[1], &part->shape);
  if (status == HURRAY_OK && (p[2] & PART_HAS_STRIDES)) {
    status = take_dims(d, p[1], &part->strides);
  }
  return status;
}

static int decode_node(Decoder *d, HurrayTensorDesc *t, int depth);

static int decode_children(Decoder *d, HurrayTensorDesc *t, int depth) {
  /* A child takes at least its header, 8 name bytes and a node header. */
  enum { MIN_CHILD = CHILD_HEADER_SIZE + 8 + NODE_HEADER_SIZE };
  if (t->nchildren > d->cursor.left / MIN_CHILD) {
    return hurray__fail(d->error, HURRAY_EFORMAT,
                        "%" PRIu32 " children cannot fit in the %zu bytes left", t->nchildren,
                        d->cursor.left);
  }
  HurrayTensorDesc *children =
      hurray__arena_alloc(d->arena, (size_t)t->nchildren * sizeof *children);
  const char **names = hurray__arena_alloc(d->arena, (size_t)t->nchildren * sizeof *names);
  if (children == NULL || names == NULL) return out_of_memory(d);
  int status = HURRAY_OK;
  for (uint32_t i = 0; i < t->nchildren && status == HURRAY_OK; i++) {
    const uint8_t *p = NULL;
    status = hurray__take(&d->cursor, 2, &p, d->error);
    if (status != HURRAY_OK) break;
    size_t len = hurray__load_le16(p);
    status =
        hurray__take_zeros(&d->cursor, CHILD_HEADER_SIZE - 2, "child reserved bytes", d->error);
    if (status == HURRAY_OK) status = take_name(d, len, "child name", &names[i]);
    if (status == HURRAY_OK) status = decode_node(d, &children[i], depth + 1);
  }
  t->children = children;
  t->child_names = names;
  return status;
}

static int decode_node(Decoder *d, HurrayTensorDesc *t, int depth) {
  if (depth > HURRAY_MAX_DEPTH) {
    return hurray__fail(d->error, HURRAY_ELIMIT, "composite tensors nest deeper than %d",
                        HURRAY_MAX_DEPTH);
  }
  const uint8_t *p = NULL;
  int status = hurray__take(&d->cursor, NODE_HEADER_SIZE, &p, d->error);
  if (status == HURRAY_OK) status = check_ndim(d, p[2], "tensor");
  if (status != HURRAY_OK) return status;
  *t = (HurrayTensorDesc){.layout = p[0],
                          .dtype = p[1],
                          .ndim = p[2],
                          .nparts = p[3],
                          .flags = hurray__load_le32(p + 4),
                          .axis = (int32_t)hurray__load_le32(p + 8),
                          .nchildren = hurray__load_le32(p + 12),
                          .block_size = (int64_t)hurray__load_le64(p + 16)};
  if (t->nparts > HURRAY_MAX_PARTS || t->nchildren > HURRAY_MAX_CHILDREN) {
    return hurray__fail(d->error, HURRAY_ELIMIT,
                        "%" PRIu32 " parts or %" PRIu32 " children exceed the limits (%d, %u)",
                        t->nparts, t->nchildren, HURRAY_MAX_PARTS, HURRAY_MAX_CHILDREN);
  }
  status = take_dims(d, p[2], &t->shape);
  if (status == HURRAY_OK && t->nparts > 0) {
    HurrayArray *parts = hurray__arena_alloc(d->arena, t->nparts * sizeof *parts);
    if (parts == NULL) return out_of_memory(d);
    for (uint32_t i = 0; i < t->nparts && status == HURRAY_OK; i++) {
      status = decode_part(d, &parts[i]);
    }
    t->parts = parts;
  }
  if (status == HURRAY_OK && t->nchildren > 0) status = decode_children(d, t, depth);
  return status;
}

int hurray__record_decode(const uint8_t *bytes, size_t len, FileArena *arena, FileRecord *out,
                          HurrayError *error) {
  Decoder d = {.cursor = {.p = bytes, .left = len}, .arena = arena, .error = error};
  const uint8_t *p = NULL;
  int status = hurray__take(&d.cursor, RECORD_HEADER_SIZE, &p, error);
  if (status == HURRAY_OK && hurray__load_le16(p + 2) != 0) {
    status = hurray__fail(error, HURRAY_EFORMAT, "record reserved bytes are not zero");
  }
  if (status != HURRAY_OK) return status;
  FileRecord record = {.name_len = hurray__load_le16(p), .metadata_len = hurray__load_le32(p + 4)};
  HurrayTensorDesc *tensor = hurray__arena_alloc(arena, sizeof *tensor);
  if (tensor == NULL) return out_of_memory(&d);
  status = take_name(&d, record.name_len, "tensor name", &record.name);
  if (status == HURRAY_OK) status = decode_node(&d, tensor, 0);
  if (status == HURRAY_OK) {
    status = hurray__take(&d.cursor, record.metadata_len, &record.metadata, error);
  }
  if (status == HURRAY_OK && d.cursor.left != 0) {
    status =
        hurray__fail(error, HURRAY_EFORMAT, "%zu trailing bytes after the record", d.cursor.left);
  }
  if (status == HURRAY_OK) {
    status = hurray__meta_decode(record.metadata, record.metadata_len, NULL, NULL, error);
  }
  if (status != HURRAY_OK) return status;
  record.tensor = tensor;
  *out = record;
  return HURRAY_OK;
}

/* ---- validation against stored buffers ---------------------------------------------------- */

int hurray__validate_against_entries(const HurrayTensorDesc *tensor, const FileBufferEntry *entries,
                                     uint32_t count, HurrayError *error) {
  /* Descriptor-only buffers: hurray_tensor_validate reads sizes, and data only for contents,
   * which NULL data opts out of. */
  HurrayBuffer *buffers = calloc(count ? count : 1, sizeof *buffers);
  HurrayBuffer **handles = calloc(count ? count : 1, sizeof *handles);
  uint8_t *roles = calloc(count ? count : 1, 1);
  int status = HURRAY_OK;
  if (buffers == NULL || handles == NULL || roles == NULL) {
    status = hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  } else {
    for (uint32_t i = 0; i < count; i++) {
      buffers[i].desc = entries[i].desc;
      handles[i] = &buffers[i];
      roles[i] = entries[i].role;
    }
    const HurrayBufferList list = {
        .count = count, .capacity = count, .buffers = handles, .roles = roles};
    status = hurray_tensor_validate(tensor, &list, 0, error);
  }
  free(buffers);
  free(handles);
  free(roles);
  return status;
}

/* ---- the index's tensor, name and bucket tables and its heap (spec §5.3 - §5.5) ------------- */

uint32_t hurray__bucket_bits(uint32_t tensors) {
  uint32_t bits = 0;
  while (((uint64_t)1 << bits) < tensors) bits++;
  return bits;
}

typedef struct SortedName {
  uint64_t hash;
  const FileIndexTensor *tensor;
  uint32_t index;
} SortedName;

static int compare_names(const void *a, const void *b) {
  const SortedName *x = a, *y = b;
  if (x->hash != y->hash) return x->hash < y->hash ? -1 : 1;
  return hurray__compare_bytes(x->tensor->name, x->tensor->name_len, y->tensor->name,
                               y->tensor->name_len);
}

int hurray__index_tables(FileSink *out, uint64_t start, const FileIndexTensor *tensors,
                         uint32_t count, const uint8_t *metadata, uint32_t metadata_len,
                         HurrayError *error) {
  uint32_t bits = hurray__bucket_bits(count);
  uint64_t heap = hurray__pad8(start + (uint64_t)count * (TENSOR_ENTRY_SIZE + NAME_ENTRY_SIZE) +
                               (((uint64_t)1 << bits) + 1) * BUCKET_ENTRY_SIZE);
  uint8_t e[TENSOR_ENTRY_SIZE];
  uint64_t record = heap;
  for (uint32_t i = 0; i < count; i++) {
    memset(e, 0, sizeof e);
    hurray__store_le64(e, record);
    hurray__store_le32(e + 8, tensors[i].record_len);
    hurray__store_le32(e + 12, tensors[i].first_buffer);
    hurray__store_le32(e + 16, tensors[i].buffer_count);
    hurray__sink_bytes(out, e, TENSOR_ENTRY_SIZE);
    record += hurray__pad8(tensors[i].record_len);
  }
  SortedName *sorted = malloc((count ? count : 1) * sizeof *sorted);
  if (sorted == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  for (uint32_t i = 0; i < count; i++) {
    sorted[i] = (SortedName){.hash = tensors[i].hash, .tensor = &tensors[i], .index = i};
  }
  qsort(sorted, count, sizeof *sorted, compare_names);
  for (uint32_t i = 0; i < count; i++) {
    memset(e, 0, NAME_ENTRY_SIZE);
    hurray__store_le64(e, sorted[i].hash);
    hurray__store_le32(e + 8, sorted[i].index);
    hurray__sink_bytes(out, e, NAME_ENTRY_SIZE);
  }
  /* bucket[b]: the first name-table position whose bucket is >= b. */
  uint32_t at = 0;
  for (uint64_t b = 0; b <= ((uint64_t)1 << bits); b++) {
    while (at < count && hurray__bucket_of(sorted[at].hash, bits) < b) at++;
    hurray__store_le32(e, at);
    hurray__sink_bytes(out, e, BUCKET_ENTRY_SIZE);
  }
  free(sorted);
  hurray__sink_pad8(out); /* the heap */
  for (uint32_t i = 0; i < count; i++) {
    hurray__sink_bytes(out, tensors[i].record, tensors[i].record_len);
    hurray__sink_pad8(out);
  }
  hurray__sink_bytes(out, metadata, metadata_len);
  hurray__sink_pad8(out);
  return out->failed ? hurray__fail(error, HURRAY_ENOMEM, "out of memory") : HURRAY_OK;
}
