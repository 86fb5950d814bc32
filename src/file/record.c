/* record.c -- tensor records (spec §6): a name, the tensor's descriptor tree and its metadata.
 * The encoder checks only what the encoding needs (counts fit their fields, arrays present);
 * the meaning of a descriptor is checked once, by hurray_tensor_validate on the decoded record,
 * by the writer before it commits a tensor and by the reader when it opens a file. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "file.h"

/* Records come in two forms that share the tree walk: the file's compact form (spec §6:
 * varints, fields at their defaults left out, the tensor's buffer entries inside) and the
 * wire's fixed-width form (interchange.md §6.3: little-endian fields, names padded to 8). */

/* ---- encoding ----------------------------------------------------------------------------- */

typedef struct Encoder {
  FileSink *out;
  FileRebaseFn rebase;
  void *rebase_context;
  HurrayError *error;
  bool compact;
  uint32_t nodes; /* encoded so far: a tree whose children arrays are shared between parents
                     must not expand without bound */
} Encoder;

static uint64_t zigzag(int64_t v) {
  return ((uint64_t)v << 1) ^ (v < 0 ? UINT64_MAX : 0);
}

static int64_t unzigzag(uint64_t v) {
  return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

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

/* Extents and offsets: u64 or a varint; strides (`sign`): i64 or a zigzag varint. */
static void put_dims(const Encoder *e, const int64_t *dims, int32_t ndim, bool sign) {
  for (int32_t k = 0; k < ndim; k++) {
    if (!e->compact) {
      hurray__sink_u64(e->out, (uint64_t)dims[k]);
    } else {
      hurray__sink_varint(e->out, sign ? zigzag(dims[k]) : (uint64_t)dims[k]);
    }
  }
}

static void put_name(const Encoder *e, const char *name, size_t len) {
  if (e->compact) {
    hurray__sink_u8(e->out, (uint8_t)len);
    hurray__sink_bytes(e->out, name, len);
    return;
  }
  hurray__sink_u16(e->out, (uint16_t)len);
  hurray__sink_zeros(e->out, CHILD_HEADER_SIZE - 2);
  hurray__sink_bytes(e->out, name, len);
  hurray__sink_pad8(e->out);
}

static bool same_dims(const int64_t *a, const int64_t *b, int32_t ndim) {
  return ndim == 0 || memcmp(a, b, (size_t)ndim * sizeof *a) == 0;
}

/* Whether `strides` are the row-major contiguous ones of `shape`, which NULL strides mean. */
static bool row_major(const int64_t *shape, const int64_t *strides, int32_t ndim) {
  int64_t step = 1;
  for (int32_t k = ndim - 1; k >= 0; k--) {
    if (strides[k] != step) return false;
    if (k > 0 && hurray__mul_i64(step, shape[k], &step)) return false;
  }
  return true;
}

static int encode_part(Encoder *e, const HurrayTensorDesc *node, const HurrayArray *part) {
  int status = check_rank(part->ndim, part->shape, "part", e->error);
  if (status != HURRAY_OK) return status;
  uint64_t offset = e->rebase ? e->rebase(e->rebase_context, part) : part->byte_offset;
  /* 0-d: nothing to store. The compact form stores strides only when they differ from the
   * default (spec §6.3), so a contiguous array costs the same however its producer spelled it. */
  bool has_strides = part->strides != NULL && part->ndim > 0 &&
                     !(e->compact && row_major(part->shape, part->strides, part->ndim));
  if (!e->compact) {
    hurray__sink_u8(e->out, part->dtype);
    hurray__sink_u8(e->out, (uint8_t)part->ndim);
    hurray__sink_u8(e->out, has_strides ? PART_HAS_STRIDES : 0);
    hurray__sink_u8(e->out, 0);
    hurray__sink_u32(e->out, part->buffer);
    hurray__sink_u64(e->out, offset);
    put_dims(e, part->shape, part->ndim, false);
  } else {
    bool own_shape = part->ndim != node->ndim || !same_dims(part->shape, node->shape, part->ndim);
    uint8_t flags = (uint8_t)((has_strides ? PART_HAS_STRIDES : 0) |
                              (part->dtype != node->dtype ? PART_OWN_DTYPE : 0) |
                              (own_shape ? PART_OWN_SHAPE : 0) |
                              (part->buffer != 0 ? PART_HAS_BUFFER : 0) |
                              (offset != 0 ? PART_HAS_OFFSET : 0));
    hurray__sink_u8(e->out, flags);
    if (flags & PART_OWN_DTYPE) hurray__sink_u8(e->out, part->dtype);
    if (own_shape) {
      hurray__sink_u8(e->out, (uint8_t)part->ndim);
      put_dims(e, part->shape, part->ndim, false);
    }
    if (part->buffer != 0) hurray__sink_varint(e->out, part->buffer);
    if (offset != 0) hurray__sink_varint(e->out, offset);
  }
  if (has_strides) put_dims(e, part->strides, part->ndim, e->compact);
  return HURRAY_OK;
}

static void put_node_header(const Encoder *e, const HurrayTensorDesc *t) {
  hurray__sink_u8(e->out, (uint8_t)t->layout);
  hurray__sink_u8(e->out, t->dtype);
  hurray__sink_u8(e->out, (uint8_t)t->ndim);
  hurray__sink_u8(e->out, (uint8_t)t->nparts);
  if (!e->compact) {
    hurray__sink_u32(e->out, t->flags);
    hurray__sink_u32(e->out, (uint32_t)t->axis);
    hurray__sink_u32(e->out, t->nchildren);
    hurray__sink_u64(e->out, (uint64_t)t->block_size);
    return;
  }
  unsigned present = (t->flags ? NODE_HAS_FLAGS : 0) | (t->axis ? NODE_HAS_AXIS : 0) |
                     (t->block_size ? NODE_HAS_BLOCK_SIZE : 0) |
                     (t->nchildren ? NODE_HAS_CHILDREN : 0);
  hurray__sink_u8(e->out, (uint8_t)present);
  if (t->flags) hurray__sink_varint(e->out, t->flags);
  if (t->axis) hurray__sink_varint(e->out, zigzag(t->axis));
  if (t->block_size) hurray__sink_varint(e->out, zigzag(t->block_size));
  if (t->nchildren) hurray__sink_varint(e->out, t->nchildren);
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
  put_node_header(e, t);
  put_dims(e, t->shape, t->ndim, false);
  for (uint32_t i = 0; i < t->nparts && status == HURRAY_OK; i++) {
    status = encode_part(e, t, &t->parts[i]);
  }
  for (uint32_t i = 0; i < t->nchildren && status == HURRAY_OK; i++) {
    size_t len = 0;
    status = hurray__check_cname(t->child_names[i], "child name", &len, e->error);
    if (status != HURRAY_OK) break;
    put_name(e, t->child_names[i], len);
    status = encode_node(e, &t->children[i], depth + 1);
  }
  return status;
}

static int encode_record(Encoder *e, const uint8_t *name, size_t name_len,
                         const HurrayTensorDesc *tensor, const FileBufferEntry *buffers,
                         uint32_t count, unsigned offset_shift, const uint8_t *metadata,
                         uint32_t metadata_len) {
  FileSink *out = e->out;
  if (tensor == NULL) return hurray__fail(e->error, HURRAY_EINVAL, "tensor is NULL");
  hurray__sink_reset(out);
  if (e->compact) {
    hurray__sink_u8(out, (uint8_t)name_len);
    hurray__sink_bytes(out, name, name_len);
    hurray__sink_varint(out, metadata_len);
    hurray__sink_varint(out, count);
    for (uint32_t i = 0; i < count; i++) {
      uint8_t shared = buffers[i].shared ? FILE_BUFFER_SHARED : 0;
      hurray__sink_u8(out, (uint8_t)(buffers[i].role | shared));
      hurray__sink_varint(out, buffers[i].offset >> offset_shift);
      hurray__sink_varint(out, buffers[i].desc.byte_size);
      hurray__sink_u64(out, buffers[i].checksum);
    }
  } else {
    hurray__sink_u16(out, (uint16_t)name_len);
    hurray__sink_u16(out, 0);
    hurray__sink_u32(out, metadata_len);
    hurray__sink_bytes(out, name, name_len);
    hurray__sink_pad8(out);
  }
  int status = encode_node(e, tensor, 0);
  if (status == HURRAY_OK) hurray__sink_bytes(out, metadata, metadata_len);
  if (status == HURRAY_OK && out->failed)
    status = hurray__fail(e->error, HURRAY_ENOMEM, "out of memory");
  if (status == HURRAY_OK && out->len > UINT32_MAX) {
    status = hurray__fail(e->error, HURRAY_ELIMIT, "the tensor's record exceeds 4 GiB");
  }
  if (status != HURRAY_OK) hurray__sink_reset(out);
  return status;
}

int hurray__record_encode(const uint8_t *name, size_t name_len, const HurrayTensorDesc *tensor,
                          FileRebaseFn rebase, void *rebase_context, const uint8_t *metadata,
                          uint32_t metadata_len, FileSink *out, HurrayError *error) {
  Encoder e = {out, rebase, rebase_context, error, false, 0};
  return encode_record(&e, name, name_len, tensor, NULL, 0, 0, metadata, metadata_len);
}

int hurray__file_record_encode(const uint8_t *name, size_t name_len,
                               const HurrayTensorDesc *tensor, FileRebaseFn rebase,
                               void *rebase_context, const FileBufferEntry *buffers,
                               uint32_t count, unsigned offset_shift, const uint8_t *metadata,
                               uint32_t metadata_len, FileSink *out, HurrayError *error) {
  Encoder e = {out, rebase, rebase_context, error, true, 0};
  return encode_record(&e, name, name_len, tensor, buffers, count, offset_shift, metadata,
                       metadata_len);
}

/* ---- decoding ----------------------------------------------------------------------------- */

typedef struct Decoder {
  FileCursor cursor;
  FileArena *arena;
  HurrayError *error;
  bool compact;
} Decoder;

static int out_of_memory(Decoder *d) {
  return hurray__fail(d->error, HURRAY_ENOMEM, "out of memory");
}

/* A varint that must be at most `max` (HURRAY_EFORMAT naming `what` otherwise). */
static int take_uint(Decoder *d, uint64_t max, const char *what, uint64_t *out) {
  int status = hurray__take_varint(&d->cursor, out, d->error);
  if (status == HURRAY_OK && *out > max) {
    return hurray__fail(d->error, HURRAY_EFORMAT, "%s %" PRIu64 " is out of range", what, *out);
  }
  return status;
}

/* `ndim` extents (or, `sign`, strides). */
static int take_dims(Decoder *d, uint32_t ndim, bool sign, const int64_t **out) {
  *out = NULL;
  if (ndim == 0) return HURRAY_OK;
  const uint8_t *p = NULL;
  int status = d->compact ? HURRAY_OK : hurray__take(&d->cursor, (size_t)ndim * 8, &p, d->error);
  if (status != HURRAY_OK) return status;
  int64_t *dims = hurray__arena_alloc(d->arena, (size_t)ndim * sizeof *dims);
  if (dims == NULL) return out_of_memory(d);
  for (uint32_t k = 0; k < ndim && status == HURRAY_OK; k++) {
    uint64_t v = 0;
    if (d->compact) {
      status = hurray__take_varint(&d->cursor, &v, d->error);
    } else {
      v = hurray__load_le64(p + 8 * k);
    }
    dims[k] = sign && d->compact ? unzigzag(v) : (int64_t)v;
  }
  *out = dims;
  return status;
}

static int check_ndim(Decoder *d, uint8_t ndim, const char *what) {
  if (ndim <= HURRAY_MAX_NDIM) return HURRAY_OK;
  return hurray__fail(d->error, HURRAY_ELIMIT, "%s ndim %u exceeds %d", what, ndim,
                      HURRAY_MAX_NDIM);
}

/* A name of `len` bytes (zero-padded to a multiple of 8 in the fixed form), copied into the
 * arena. */
static int take_name(Decoder *d, size_t len, const char *what, const char **out) {
  const uint8_t *p = NULL;
  int status = hurray__take(&d->cursor, len, &p, d->error);
  if (status == HURRAY_OK) status = hurray__check_name(p, len, HURRAY_EFORMAT, what, d->error);
  if (status == HURRAY_OK && !d->compact) {
    status =
        hurray__take_zeros(&d->cursor, (size_t)(hurray__pad8(len) - len), "name padding", d->error);
  }
  if (status == HURRAY_OK && (*out = hurray__arena_strndup(d->arena, p, len)) == NULL) {
    status = out_of_memory(d);
  }
  return status;
}

/* A child's name: one byte of length in the compact form, an 8-byte header otherwise. */
static int take_child_name(Decoder *d, const char **out) {
  const uint8_t *p = NULL;
  int status = hurray__take(&d->cursor, d->compact ? 1 : 2, &p, d->error);
  if (status != HURRAY_OK) return status;
  size_t len = d->compact ? p[0] : hurray__load_le16(p);
  if (!d->compact) {
    status =
        hurray__take_zeros(&d->cursor, CHILD_HEADER_SIZE - 2, "child reserved bytes", d->error);
  }
  return status == HURRAY_OK ? take_name(d, len, "child name", out) : status;
}

static int decode_part(Decoder *d, const HurrayTensorDesc *node, HurrayArray *part) {
  const uint8_t *p = NULL;
  if (!d->compact) {
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
    status = take_dims(d, p[1], false, &part->shape);
    if (status == HURRAY_OK && (p[2] & PART_HAS_STRIDES)) {
      status = take_dims(d, p[1], true, &part->strides);
    }
    return status;
  }
  int status = hurray__take(&d->cursor, 1, &p, d->error);
  if (status != HURRAY_OK) return status;
  uint8_t flags = p[0];
  enum { KNOWN = PART_HAS_STRIDES | PART_OWN_DTYPE | PART_OWN_SHAPE | PART_HAS_BUFFER |
                 PART_HAS_OFFSET };
  if (flags & ~KNOWN) {
    return hurray__fail(d->error, HURRAY_EFORMAT, "part flags 0x%02X are not allowed", flags);
  }
  *part = (HurrayArray){.dtype = node->dtype, .ndim = node->ndim, .shape = node->shape};
  if (flags & PART_OWN_DTYPE) {
    status = hurray__take(&d->cursor, 1, &p, d->error);
    if (status == HURRAY_OK) part->dtype = p[0];
  }
  if (status == HURRAY_OK && (flags & PART_OWN_SHAPE)) {
    status = hurray__take(&d->cursor, 1, &p, d->error);
    if (status == HURRAY_OK) status = check_ndim(d, p[0], "part");
    if (status == HURRAY_OK) {
      part->ndim = p[0];
      status = take_dims(d, p[0], false, &part->shape);
    }
  }
  uint64_t v = 0;
  if (status == HURRAY_OK && (flags & PART_HAS_BUFFER)) {
    status = take_uint(d, UINT32_MAX, "part buffer", &v);
    part->buffer = (uint32_t)v;
  }
  if (status == HURRAY_OK && (flags & PART_HAS_OFFSET)) {
    status = hurray__take_varint(&d->cursor, &part->byte_offset, d->error);
  }
  if (status == HURRAY_OK && (flags & PART_HAS_STRIDES)) {
    if (part->ndim == 0) { /* strides of a 0-d array would be empty: never stored */
      return hurray__fail(d->error, HURRAY_EFORMAT, "part flags 0x%02X give a 0-d part strides",
                          flags);
    }
    status = take_dims(d, (uint32_t)part->ndim, true, &part->strides);
  }
  return status;
}

static int decode_node(Decoder *d, HurrayTensorDesc *t, int depth);

static int decode_children(Decoder *d, HurrayTensorDesc *t, int depth) {
  /* A child takes at least a name of one byte and a node header. */
  size_t min_child = d->compact ? 1 + 1 + 5 : CHILD_HEADER_SIZE + 8 + NODE_HEADER_SIZE;
  if (t->nchildren > d->cursor.left / min_child) {
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
    status = take_child_name(d, &names[i]);
    if (status == HURRAY_OK) status = decode_node(d, &children[i], depth + 1);
  }
  t->children = children;
  t->child_names = names;
  return status;
}

/* The node's header: the fixed 24 bytes, or 5 bytes and the fields they say are present. */
static int take_node_header(Decoder *d, HurrayTensorDesc *t) {
  const uint8_t *p = NULL;
  int status = hurray__take(&d->cursor, d->compact ? 5 : NODE_HEADER_SIZE, &p, d->error);
  if (status == HURRAY_OK) status = check_ndim(d, p[2], "tensor");
  if (status != HURRAY_OK) return status;
  *t = (HurrayTensorDesc){.layout = p[0], .dtype = p[1], .ndim = p[2], .nparts = p[3]};
  if (!d->compact) {
    t->flags = hurray__load_le32(p + 4);
    t->axis = (int32_t)hurray__load_le32(p + 8);
    t->nchildren = hurray__load_le32(p + 12);
    t->block_size = (int64_t)hurray__load_le64(p + 16);
    return HURRAY_OK;
  }
  uint8_t present = p[4];
  if (present & ~(NODE_HAS_FLAGS | NODE_HAS_AXIS | NODE_HAS_BLOCK_SIZE | NODE_HAS_CHILDREN)) {
    return hurray__fail(d->error, HURRAY_EFORMAT, "node fields 0x%02X are not allowed", present);
  }
  uint64_t v = 0;
  if (present & NODE_HAS_FLAGS) {
    status = take_uint(d, UINT32_MAX, "tensor flags", &v);
    t->flags = (uint32_t)v;
  }
  if (status == HURRAY_OK && (present & NODE_HAS_AXIS)) {
    status = hurray__take_varint(&d->cursor, &v, d->error);
    int64_t axis = unzigzag(v);
    if (status == HURRAY_OK && (axis < INT32_MIN || axis > INT32_MAX)) {
      status = hurray__fail(d->error, HURRAY_EFORMAT, "axis %" PRId64 " is out of range", axis);
    }
    t->axis = (int32_t)axis;
  }
  if (status == HURRAY_OK && (present & NODE_HAS_BLOCK_SIZE)) {
    status = hurray__take_varint(&d->cursor, &v, d->error);
    t->block_size = unzigzag(v);
  }
  if (status == HURRAY_OK && (present & NODE_HAS_CHILDREN)) {
    status = take_uint(d, UINT32_MAX, "child count", &v);
    t->nchildren = (uint32_t)v;
  }
  return status;
}

static int decode_node(Decoder *d, HurrayTensorDesc *t, int depth) {
  if (depth > HURRAY_MAX_DEPTH) {
    return hurray__fail(d->error, HURRAY_ELIMIT, "composite tensors nest deeper than %d",
                        HURRAY_MAX_DEPTH);
  }
  int status = take_node_header(d, t);
  if (status != HURRAY_OK) return status;
  if (t->nparts > HURRAY_MAX_PARTS || t->nchildren > HURRAY_MAX_CHILDREN) {
    return hurray__fail(d->error, HURRAY_ELIMIT,
                        "%" PRIu32 " parts or %" PRIu32 " children exceed the limits (%d, %u)",
                        t->nparts, t->nchildren, HURRAY_MAX_PARTS, HURRAY_MAX_CHILDREN);
  }
  status = take_dims(d, (uint32_t)t->ndim, false, &t->shape);
  if (status == HURRAY_OK && t->nparts > 0) {
    HurrayArray *parts = hurray__arena_alloc(d->arena, t->nparts * sizeof *parts);
    if (parts == NULL) return out_of_memory(d);
    for (uint32_t i = 0; i < t->nparts && status == HURRAY_OK; i++) {
      status = decode_part(d, t, &parts[i]);
    }
    t->parts = parts;
  }
  if (status == HURRAY_OK && t->nchildren > 0) status = decode_children(d, t, depth);
  return status;
}

/* The compact record's buffer entries (spec §6). */
static int take_buffers(Decoder *d, unsigned offset_shift, FileRecord *record) {
  uint64_t count = 0;
  int status = hurray__take_varint(&d->cursor, &count, d->error);
  if (status != HURRAY_OK) return status;
  if (count > HURRAY_MAX_BUFFERS) { /* a limit of spec §8, like a node's parts and children */
    return hurray__fail(d->error, HURRAY_ELIMIT, "%" PRIu64 " buffers exceed the limit (%u)",
                        count, HURRAY_MAX_BUFFERS);
  }
  enum { MIN_ENTRY = 1 + 1 + 1 + 8 }; /* role, offset, size, checksum */
  if (count > d->cursor.left / MIN_ENTRY) {
    return hurray__fail(d->error, HURRAY_EFORMAT,
                        "%" PRIu64 " buffers cannot fit in the %zu bytes left", count,
                        d->cursor.left);
  }
  FileBufferEntry *entries = hurray__arena_alloc(d->arena, (size_t)count * sizeof *entries);
  if (entries == NULL) return out_of_memory(d);
  for (uint64_t i = 0; i < count && status == HURRAY_OK; i++) {
    const uint8_t *p = NULL;
    uint64_t units = 0, size = 0;
    status = hurray__take(&d->cursor, 1, &p, d->error);
    uint8_t role = status == HURRAY_OK ? (uint8_t)(p[0] & ~FILE_BUFFER_SHARED) : 0;
    bool shared = status == HURRAY_OK && (p[0] & FILE_BUFFER_SHARED) != 0;
    if (status == HURRAY_OK && hurray_buffer_role_name(role) == NULL) {
      status = hurray__fail(d->error, HURRAY_EFORMAT, "buffer %" PRIu64 ": role %u is unknown", i,
                            role);
    }
    if (status == HURRAY_OK) status = hurray__take_varint(&d->cursor, &units, d->error);
    if (status == HURRAY_OK && units > UINT64_MAX >> offset_shift) {
      status = hurray__fail(d->error, HURRAY_EBOUNDS,
                            "buffer %" PRIu64 ": offset %" PRIu64 " x 2^%u overflows", i, units,
                            offset_shift);
    }
    if (status == HURRAY_OK) status = hurray__take_varint(&d->cursor, &size, d->error);
    if (status == HURRAY_OK) status = hurray__take(&d->cursor, 8, &p, d->error);
    if (status != HURRAY_OK) break;
    entries[i] = (FileBufferEntry){.desc = {.byte_size = size,
                                            .alignment = HURRAY_MIN_ALIGNMENT,
                                            .device_tag = HURRAY_DEVICE_CPU,
                                            .memory_class = HURRAY_MEM_DEVICE,
                                            .sync_mode = HURRAY_SYNC_READY},
                                   .offset = units << offset_shift,
                                   .checksum = hurray__load_le64(p),
                                   .role = role,
                                   .shared = shared};
  }
  record->buffers = entries;
  record->buffer_count = (uint32_t)count;
  return status;
}

static int decode_record(Decoder *d, unsigned offset_shift, FileRecord *out) {
  FileRecord record = {0};
  uint64_t metadata_len = 0;
  const uint8_t *p = NULL;
  int status = hurray__take(&d->cursor, d->compact ? 1 : RECORD_HEADER_SIZE, &p, d->error);
  if (status == HURRAY_OK && !d->compact && hurray__load_le16(p + 2) != 0) {
    status = hurray__fail(d->error, HURRAY_EFORMAT, "record reserved bytes are not zero");
  }
  if (status != HURRAY_OK) return status;
  record.name_len = d->compact ? p[0] : hurray__load_le16(p);
  if (!d->compact) metadata_len = hurray__load_le32(p + 4);
  status = take_name(d, record.name_len, "tensor name", &record.name);
  if (status == HURRAY_OK && d->compact) {
    status = take_uint(d, UINT32_MAX, "metadata length", &metadata_len);
    if (status == HURRAY_OK) status = take_buffers(d, offset_shift, &record);
  }
  HurrayTensorDesc *tensor = NULL;
  if (status == HURRAY_OK && (tensor = hurray__arena_alloc(d->arena, sizeof *tensor)) == NULL) {
    status = out_of_memory(d);
  }
  if (status == HURRAY_OK) status = decode_node(d, tensor, 0);
  if (status == HURRAY_OK) {
    record.metadata_len = (uint32_t)metadata_len;
    status = hurray__take(&d->cursor, record.metadata_len, &record.metadata, d->error);
  }
  if (status == HURRAY_OK && d->cursor.left != 0) {
    status = hurray__fail(d->error, HURRAY_EFORMAT, "%zu trailing bytes after the record",
                          d->cursor.left);
  }
  if (status == HURRAY_OK) {
    status = hurray__meta_decode(record.metadata, record.metadata_len, NULL, NULL, d->error);
  }
  if (status != HURRAY_OK) return status;
  record.tensor = tensor;
  *out = record;
  return HURRAY_OK;
}

int hurray__record_decode(const uint8_t *bytes, size_t len, FileArena *arena, FileRecord *out,
                          HurrayError *error) {
  Decoder d = {.cursor = {.p = bytes, .left = len}, .arena = arena, .error = error};
  return decode_record(&d, 0, out);
}

int hurray__file_record_decode(const uint8_t *bytes, size_t len, unsigned offset_shift,
                               FileArena *arena, FileRecord *out, HurrayError *error) {
  Decoder d = {
      .cursor = {.p = bytes, .left = len}, .arena = arena, .error = error, .compact = true};
  return decode_record(&d, offset_shift, out);
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

/* ---- the index (spec §5) ------------------------------------------------------------------ */

uint32_t hurray__bucket_bits(uint32_t tensors) {
  uint32_t bits = 0;
  while (((uint64_t)1 << bits) < tensors) bits++;
  return bits;
}

/* The index's tables: its header, then (count + 1) record offsets, count name-table entries
 * and 2^bits + 1 bucket entries. */
static uint64_t tables_length(uint32_t tensors) {
  uint64_t buckets = ((uint64_t)1 << hurray__bucket_bits(tensors)) + 1;
  return IDX_HEADER_SIZE + ((uint64_t)tensors * 2 + 1 + buckets) * TABLE_ENTRY_SIZE;
}

uint64_t hurray__index_length(uint32_t tensors, uint64_t records, uint64_t metadata) {
  return tables_length(tensors) + records + metadata;
}

unsigned hurray__chunk_log2(uint64_t length) {
  unsigned log2 = FILE_MIN_CHUNK_LOG2;
  while (log2 < FILE_MAX_CHUNK_LOG2 &&
         (length + ((uint64_t)1 << log2) - 1) >> log2 > FILE_MAX_CHUNKS) {
    log2++;
  }
  return log2;
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

int hurray__index_build(FileSink *out, const FileIndexTensor *tensors, uint32_t count,
                        uint32_t buffer_count, uint64_t data_bytes, const uint8_t *metadata,
                        uint32_t metadata_len, HurrayError *error) {
  uint32_t bits = hurray__bucket_bits(count);
  uint64_t records = 0;
  for (uint32_t i = 0; i < count; i++) records += tensors[i].record_len;
  uint64_t heap = tables_length(count);
  if (hurray__index_length(count, records, metadata_len) > HURRAY_FILE_MAX_INDEX) {
    return hurray__fail(error, HURRAY_ELIMIT, "the index would exceed %" PRIu64 " bytes",
                        HURRAY_FILE_MAX_INDEX);
  }
  uint8_t e[IDX_HEADER_SIZE] = {0};
  hurray__store_le32(e + IDX_TENSOR_COUNT, count);
  hurray__store_le32(e + IDX_BUFFER_COUNT, buffer_count);
  hurray__store_le32(e + IDX_BUCKET_BITS, bits);
  if (metadata_len > 0) hurray__store_le64(e + IDX_METADATA_OFFSET, heap + records);
  hurray__store_le32(e + IDX_METADATA_LENGTH, metadata_len);
  hurray__store_le64(e + IDX_DATA_BYTES, data_bytes);
  hurray__sink_bytes(out, e, IDX_HEADER_SIZE);
  uint64_t record = heap; /* < 2^28: the index's limit */
  for (uint32_t i = 0; i <= count; i++) {
    hurray__sink_u32(out, (uint32_t)record);
    if (i < count) record += tensors[i].record_len;
  }
  SortedName *sorted = malloc((count ? count : 1) * sizeof *sorted);
  if (sorted == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  for (uint32_t i = 0; i < count; i++) {
    sorted[i] = (SortedName){.hash = tensors[i].hash, .tensor = &tensors[i], .index = i};
  }
  qsort(sorted, count, sizeof *sorted, compare_names);
  for (uint32_t i = 0; i < count; i++) hurray__sink_u32(out, sorted[i].index);
  /* bucket[b]: the first name-table position whose bucket is >= b. */
  uint32_t at = 0;
  for (uint64_t b = 0; b <= ((uint64_t)1 << bits); b++) {
    while (at < count && hurray__bucket_of(sorted[at].hash, bits) < b) at++;
    hurray__sink_u32(out, at);
  }
  free(sorted);
  for (uint32_t i = 0; i < count; i++) {
    hurray__sink_bytes(out, tensors[i].record, tensors[i].record_len);
  }
  hurray__sink_bytes(out, metadata, metadata_len);
  return out->failed ? hurray__fail(error, HURRAY_ENOMEM, "out of memory") : HURRAY_OK;
}
