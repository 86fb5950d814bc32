/* serve.c -- what a server sends for a tensor (docs/spec/interchange.md §6.2): the
 * TENSOR_HEADER (buffer table with checksums, then the file format's tensor record) and the
 * segments of the byte stream that DATA frames carry, for a whole tensor, rows of a DENSE one,
 * or a byte range, from any resume offset. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "wire.h"

int hurray__wire_served_create(const char *name, HurrayTensorContext *context,
                               const uint64_t *checksums, const uint8_t *metadata,
                               uint32_t metadata_len, WireServed **out, HurrayError *error) {
  *out = NULL;
  size_t name_len = 0;
  int status = hurray__check_cname(name, "tensor name", &name_len, error);
  if (status == HURRAY_OK) status = hurray_tensor_context_check(context, 0, error);
  const HurrayBufferList *list = status == HURRAY_OK ? context->buffers : NULL;
  for (uint32_t i = 0; status == HURRAY_OK && i < list->count; i++) {
    if (list->buffers[i]->desc.device_tag != HURRAY_DEVICE_CPU) {
      status = hurray__fail(error, HURRAY_EUNSUPPORTED,
                            "tensor '%s' buffer %" PRIu32 " is not in CPU memory", name, i);
    }
  }
  WireServed *s = status == HURRAY_OK ? calloc(1, sizeof *s) : NULL;
  if (status == HURRAY_OK && s == NULL) status = hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  if (status != HURRAY_OK) {
    hurray_tensor_context_release(context);
    return status;
  }
  s->context = context;
  s->name = malloc(name_len + 1);
  s->checksums = calloc(list->count + 1u, sizeof(uint64_t));
  s->metadata = metadata_len ? malloc(metadata_len) : NULL;
  if (s->name == NULL || s->checksums == NULL || (metadata_len && s->metadata == NULL)) {
    hurray__wire_served_destroy(s);
    return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  }
  memcpy(s->name, name, name_len + 1);
  s->name_len = name_len;
  if (metadata_len) memcpy(s->metadata, metadata, metadata_len);
  s->metadata_len = metadata_len;
  for (uint32_t i = 0; i < list->count; i++) {
    const HurrayBuffer *b = list->buffers[i];
    s->checksums[i] = checksums ? checksums[i] : hurray__xxh3(b->data, (size_t)b->desc.byte_size);
    s->total_bytes += b->desc.byte_size; /* the context check bounded every size */
  }
  *out = s;
  return HURRAY_OK;
}

void hurray__wire_served_destroy(WireServed *s) {
  if (s == NULL) return;
  hurray_tensor_context_release(s->context);
  free(s->name);
  free(s->checksums);
  free(s->metadata);
  free(s);
}

void hurray__wire_plan_reset(WirePlan *plan) {
  hurray__sink_reset(&plan->header);
  free(plan->segments);
  plan->segments = NULL;
  plan->nsegments = 0;
}

/* Rows [start, stop) of a DENSE tensor: its one array re-based on the 64-byte-aligned start of
 * the bytes those rows address, which become the one buffer sent. */
typedef struct RowSlice {
  HurrayTensorDesc desc;
  HurrayArray part;
  int64_t shape[HURRAY_MAX_NDIM];
  const uint8_t *data;
  uint64_t len;
} RowSlice;

static int slice_rows(const WireServed *s, int64_t start, int64_t stop, RowSlice *out,
                      HurrayError *error) {
  const HurrayTensorDesc *t = s->context->tensor;
  if (t->layout != HURRAY_LAYOUT_DENSE) {
    return hurray__fail(error, HURRAY_EUNSUPPORTED, "tensor '%s' is %s: rows need a dense tensor",
                        s->name, hurray_layout_name((int)t->layout));
  }
  if (t->ndim == 0 || start < 0 || stop < start || stop > t->shape[0]) {
    return hurray__fail(error, HURRAY_EINVAL,
                        "rows [%" PRId64 ", %" PRId64 ") are outside tensor '%s' (%" PRId64
                        " rows)",
                        start, stop, s->name, t->ndim ? t->shape[0] : 0);
  }
  const HurrayArray *a = &t->parts[0];
  const HurrayDTypeInfo *info = hurray_dtype_info(a->dtype);
  int64_t stride0 = 1;
  if (a->strides != NULL) {
    stride0 = a->strides[0];
  } else {
    for (int32_t k = 1; k < a->ndim; k++) stride0 *= a->shape[k]; /* validated: no overflow */
  }
  /* Bit offset of row `start` from element 0: |start * stride0 * bits| fits, as the row lies
   * in the buffer (start < shape[0]) or is the end (start == shape[0], one row past). */
  int64_t bits = 0;
  if (hurray__mul_i64(start, stride0, &bits) || hurray__mul_i64(bits, info->bits, &bits)) {
    return hurray__fail(error, HURRAY_EOVERFLOW, "row offset overflows");
  }
  if (bits % 8 != 0) {
    return hurray__fail(error, HURRAY_EUNSUPPORTED,
                        "row %" PRId64 " of tensor '%s' does not start on a byte", start, s->name);
  }
  out->desc = *t;
  out->part = *a;
  memcpy(out->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
  out->shape[0] = stop - start;
  out->desc.shape = out->shape;
  out->part.shape = out->shape;
  out->part.byte_offset = (uint64_t)((int64_t)a->byte_offset + bits / 8);
  out->part.buffer = 0;
  out->desc.parts = &out->part;
  uint64_t begin = 0, end = 0;
  int status = hurray_array_span(&out->part, &begin, &end, error);
  if (status != HURRAY_OK) return status;
  uint64_t base = begin & ~(uint64_t)63;
  out->part.byte_offset -= base;
  out->data = (const uint8_t *)s->context->buffers->buffers[a->buffer]->data + base;
  out->len = end - base;
  return HURRAY_OK;
}

/* Appends the segments of stream bytes [from, to) over buffers of the given sizes. */
static int plan_segments(WirePlan *plan, const HurrayBufferList *list, const RowSlice *rows,
                         uint64_t from, uint64_t to, HurrayError *error) {
  uint32_t n = rows ? 1 : list->count;
  plan->segments = calloc(n + 1u, sizeof(WireSegment));
  if (plan->segments == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  uint64_t at = 0; /* stream position of buffer i's first byte */
  for (uint32_t i = 0; i < n; i++) {
    const uint8_t *data = rows ? rows->data : list->buffers[i]->data;
    uint64_t size = rows ? rows->len : list->buffers[i]->desc.byte_size;
    uint64_t lo = from > at ? from - at : 0, hi = to - at < size ? to - at : size;
    if (to > at && lo < hi) {
      plan->segments[plan->nsegments++] = (WireSegment){data + lo, hi - lo, lo, i};
    }
    at += size;
  }
  return HURRAY_OK;
}

int hurray__wire_plan(const WireServed *s, const WireRequest *r, WirePlan *plan,
                      HurrayError *error) {
  memset(plan, 0, sizeof *plan);
  int status = hurray_device_check(r->preferred_device, error);
  if (status != HURRAY_OK) return status;
  if (r->preferred_device != HURRAY_DEVICE_CPU && !(r->flags & WIRE_REQUEST_FALLBACK)) {
    const char *name = hurray_device_name(r->preferred_device);
    return hurray__fail(error, HURRAY_EUNSUPPORTED,
                        "device %s (0x%02x) is not served here; this server serves cpu (0x00)",
                        name, r->preferred_device);
  }
  const HurrayBufferList *list = s->context->buffers;
  RowSlice rows;
  const HurrayTensorDesc *desc = s->context->tensor;
  uint32_t nbuffers = list->count;
  uint64_t total = s->total_bytes, from = 0, to = 0;
  if (r->range_kind == WIRE_RANGE_ROWS) {
    status = slice_rows(s, r->start, r->stop, &rows, error);
    if (status != HURRAY_OK) return status;
    desc = &rows.desc;
    nbuffers = 1;
    total = rows.len;
  }
  if (r->range_kind == WIRE_RANGE_BYTES) {
    if (r->start < 0 || r->stop < r->start || (uint64_t)r->stop > total) {
      return hurray__fail(error, HURRAY_EINVAL,
                          "bytes [%" PRId64 ", %" PRId64 ") are outside tensor '%s' (%" PRIu64
                          " bytes)",
                          r->start, r->stop, s->name, total);
    }
    from = (uint64_t)r->start;
    to = (uint64_t)r->stop;
  } else {
    to = total;
  }
  if (r->resume_offset > to - from) {
    return hurray__fail(error, HURRAY_EINVAL,
                        "resume offset %" PRIu64 " is past the %" PRIu64 " bytes requested",
                        r->resume_offset, to - from);
  }
  WireBuffer *table = calloc(nbuffers + 1u, sizeof(WireBuffer));
  if (table == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  for (uint32_t i = 0; i < nbuffers; i++) {
    if (r->range_kind == WIRE_RANGE_ROWS) {
      table[i].desc = list->buffers[desc->parts[0].buffer]->desc;
      table[i].desc.byte_size = rows.len;
      table[i].desc.alignment = HURRAY_MIN_ALIGNMENT;
      table[i].checksum = hurray__xxh3(rows.data, (size_t)rows.len);
      table[i].role = HURRAY_ROLE_VALUES;
    } else {
      table[i].desc = list->buffers[i]->desc;
      table[i].checksum = s->checksums[i];
      table[i].role = list->roles[i];
    }
  }
  FileSink record = {0};
  status = hurray__record_encode((const uint8_t *)s->name, s->name_len, desc, NULL, NULL,
                                 s->metadata, s->metadata_len, &record, error);
  if (status == HURRAY_OK && record.len > UINT32_MAX) {
    status = hurray__fail(error, HURRAY_ELIMIT, "tensor record too large");
  }
  if (status == HURRAY_OK) {
    WireTensorHeader h = {HURRAY_DEVICE_CPU, nbuffers,          total,     r->resume_offset,
                          table,             record.data,       (uint32_t)record.len};
    status = hurray__wire_tensor_encode(&h, &plan->header, error);
  }
  hurray__sink_reset(&record);
  free(table);
  if (status == HURRAY_OK) {
    status = plan_segments(plan, list, r->range_kind == WIRE_RANGE_ROWS ? &rows : NULL,
                           from + r->resume_offset, to, error);
  }
  if (status != HURRAY_OK) hurray__wire_plan_reset(plan);
  return status;
}
