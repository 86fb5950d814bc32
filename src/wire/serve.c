/* serve.c -- what a server sends for a tensor (docs/spec/interchange.md §6.3-§6.4): the
 * TENSOR_HEADER (buffer table with checksums, then the file format's tensor record) and the
 * segments of the byte stream that DATA frames carry, for a whole tensor, rows of a DENSE one,
 * or a byte range, from any resume offset. Only the bytes a tensor's arrays address are ever
 * read from its memory (buffer-protocol.md §1): each buffer is sent in the compact form the
 * file writer writes, zeros between its runs. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wire.h"

/* Appends a segment (skipping empty ones); `segments` has room. */
static void add_segment(WireSegment *segments, size_t *n, const WireSegment *g) {
  if (g->len > 0) segments[(*n)++] = *g;
}

/* The segment of `len` bytes at byte `begin` of source buffer `source`, placed at `offset` of
 * compact buffer `buffer`. */
static WireSegment source_segment(const WireServed *s, const HurrayBufferList *list,
                                  uint32_t source, uint64_t begin, uint64_t len, uint64_t offset,
                                  uint32_t buffer) {
  const HurrayBuffer *b = list->buffers[source];
  WireSegment g = {.len = len, .offset = offset, .buffer = buffer};
  if (s->queues != NULL && s->queues[source] != NULL) {
    g.device = b;
    g.queue = s->queues[source];
    g.at = begin;
  } else if (s->files != NULL) { /* read through the file; `data`: its mapping (wire.h) */
    g.file = &s->files[source];
    g.at = begin;
    g.data = (const uint8_t *)b->data + begin;
  } else {
    g.data = (const uint8_t *)b->data + begin;
  }
  return g;
}

/* The device the buffers of `list` are on, and a queue for each one in device memory: every
 * buffer CPU memory, or memory of one device (tag and id) whose runtime is loaded here. */
static int device_queues(WireServed *s, const char *name, const HurrayBufferList *list,
                         bool device_ok, HurrayError *error) {
  s->device = HURRAY_DEVICE_CPU;
  const HurrayBufferDesc *first = NULL;
  for (uint32_t i = 0; i < list->count; i++) {
    const HurrayBufferDesc *d = &list->buffers[i]->desc;
    if (d->device_tag == HURRAY_DEVICE_CPU) continue;
    if (!device_ok) {
      return hurray__fail(error, HURRAY_EUNSUPPORTED,
                          "tensor '%s' buffer %" PRIu32 " is not in CPU memory", name, i);
    }
    if (first != NULL && (d->device_tag != first->device_tag || d->device_id != first->device_id)) {
      return hurray__fail(error, HURRAY_EUNSUPPORTED,
                          "tensor '%s' has buffers on two devices (%s:%u and %s:%u)", name,
                          hurray_device_name(first->device_tag), (unsigned)first->device_id,
                          hurray_device_name(d->device_tag), (unsigned)d->device_id);
    }
    first = d;
  }
  if (first == NULL) return HURRAY_OK;
  s->device = first->device_tag;
  s->queues = calloc(list->count, sizeof *s->queues);
  if (s->queues == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  s->nbuffers = list->count; /* what reset destroys the queues of */
  for (uint32_t i = 0; i < list->count; i++) {
    const HurrayBuffer *b = list->buffers[i];
    if (b->desc.device_tag == HURRAY_DEVICE_CPU || b->data == NULL) continue;
    int status = hurray_device_queue_for_buffer(b, &s->queues[i], error);
    if (status != HURRAY_OK) {
      return hurray__error_prefix(error, status, "tensor '%s' buffer %" PRIu32 ": ", name, i);
    }
  }
  return HURRAY_OK;
}

/* The served file's buffers of `s` (ADR-084): source buffer i at file_offsets[i] of `fd`. */
static int served_files(WireServed *s, const HurrayBufferList *list, const uint64_t *checksums,
                        int fd, const uint64_t *file_offsets, HurrayError *error) {
  s->files = calloc(list->count + 1u, sizeof *s->files);
  if (s->files == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  s->nbuffers = list->count; /* what reset resets the files of */
  for (uint32_t i = 0; i < list->count; i++) {
    int status = hurray__wire_file_init(&s->files[i], fd, file_offsets[i],
                                        list->buffers[i]->desc.byte_size, checksums[i], i, error);
    if (status != HURRAY_OK) {
      for (uint32_t k = i; k < list->count; k++) s->files[k].fd = -1; /* not initialised */
      return status;
    }
  }
  return HURRAY_OK;
}

static int served_init(WireServed *s, const char *name, const HurrayTensorContext *context,
                       const uint64_t *checksums, int file_fd, const uint64_t *file_offsets,
                       const uint8_t *metadata, uint32_t metadata_len, bool device_ok,
                       HurrayError *error) {
  memset(s, 0, sizeof *s);
  s->fd = -1;
  size_t name_len = 0;
  int status = hurray__check_cname(name, "tensor name", &name_len, error);
  if (status == HURRAY_OK) status = hurray_tensor_context_check(context, 0, error);
  if (status != HURRAY_OK) return status;
  const HurrayBufferList *list = context->buffers;
  status = device_queues(s, name, list, device_ok, error);
  if (status == HURRAY_OK && file_fd >= 0) {
    status = served_files(s, list, checksums, file_fd, file_offsets, error);
  }
  FileRuns runs = {0};
  uint8_t *stage = NULL;
  if (status == HURRAY_OK) {
    s->name = malloc(name_len + 1);
    s->buffers = calloc(list->count + 1u, sizeof *s->buffers);
    bool staged = s->device != HURRAY_DEVICE_CPU || s->files != NULL;
    if (staged) stage = malloc(WIRE_STAGE_SIZE);
    status = s->name && s->buffers && (stage || !staged)
                 ? hurray__runs_make(&runs, context->tensor, error)
                 : hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  }
  if (status == HURRAY_OK) {
    s->segments = calloc(2 * runs.count + 1, sizeof *s->segments); /* a gap and a run each */
    if (s->segments == NULL) status = hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  }
  if (status == HURRAY_OK) {
    memcpy(s->name, name, name_len + 1);
    s->name_len = name_len;
    for (uint32_t i = 0; s->files != NULL && i < list->count; i++) s->files[i].tensor = s->name;
    s->nbuffers = list->count;
    uint64_t end = 0;
    for (size_t i = 0; i < runs.count; i++) {
      const FileRun *r = &runs.runs[i];
      if (i == 0 || runs.runs[i - 1].buffer != r->buffer) end = 0;
      WireSegment gap = {.len = r->placed - end, .offset = end, .buffer = r->buffer};
      add_segment(s->segments, &s->nsegments, &gap);
      WireSegment run = source_segment(s, list, r->buffer, r->begin, r->end - r->begin,
                                       r->placed, r->buffer);
      add_segment(s->segments, &s->nsegments, &run);
      end = r->placed + (r->end - r->begin);
      s->buffers[r->buffer].desc.byte_size = end;
    }
    for (uint32_t i = 0; status == HURRAY_OK && i < list->count; i++) {
      const HurrayBuffer *b = list->buffers[i];
      WireBuffer *w = &s->buffers[i];
      uint64_t size = w->desc.byte_size;
      w->desc = b->desc;
      if (b->desc.device_tag != HURRAY_DEVICE_CPU) { /* as on the wire: READY, no device state */
        w->desc = (HurrayBufferDesc){.alignment = b->desc.alignment,
                                     .device_tag = HURRAY_DEVICE_CPU,
                                     .memory_class = HURRAY_MEM_DEVICE,
                                     .sync_mode = HURRAY_SYNC_READY};
      }
      w->desc.byte_size = size;
      w->role = list->roles[i];
      /* the whole source buffer, as it is: its stored checksum covers exactly these bytes */
      bool whole = size == b->desc.byte_size;
      if (checksums && whole) {
        w->checksum = checksums[i];
      } else {
        status = hurray__wire_hash_buffer(s->segments, s->nsegments, i, stage, false,
                                          &w->checksum, error);
      }
      s->total_bytes += size;
    }
  }
  if (status == HURRAY_OK) {
    status = hurray__record_encode((const uint8_t *)name, name_len, context->tensor,
                                   hurray__runs_rebase, &runs, metadata, metadata_len, &s->record,
                                   error);
  }
  s->metadata_check = hurray__xxh3(metadata_len ? (const void *)metadata : "", metadata_len);
  if (status == HURRAY_OK && s->record.len > UINT32_MAX) {
    status = hurray__fail(error, HURRAY_ELIMIT, "tensor '%s': record too large", name);
  }
  hurray__runs_free(&runs);
  free(stage);
  if (status != HURRAY_OK) hurray__wire_served_reset(s);
  return status;
}

int hurray__wire_served_init(WireServed *s, const char *name, const HurrayTensorContext *context,
                             const uint64_t *checksums, const uint8_t *metadata,
                             uint32_t metadata_len, HurrayError *error) {
  return served_init(s, name, context, checksums, -1, NULL, metadata, metadata_len, false,
                     error);
}

void hurray__wire_served_reset(WireServed *s) {
  for (uint32_t i = 0; s->queues != NULL && i < s->nbuffers; i++) {
    hurray_device_queue_destroy(s->queues[i]);
  }
  free(s->queues);
  for (uint32_t i = 0; s->files != NULL && i < s->nbuffers; i++) {
    if (s->files[i].fd >= 0) hurray__wire_file_reset(&s->files[i]);
  }
  free(s->files);
  hurray__sink_reset(&s->record);
  free(s->name);
  free(s->buffers);
  free(s->segments);
  free(s->fd_offsets);
  if (s->fd_owned) close(s->fd);
  memset(s, 0, sizeof *s);
  s->fd = -1;
}

int hurray__wire_served_create(const char *name, HurrayTensorContext *context,
                               const uint64_t *checksums, int file_fd,
                               const uint64_t *file_offsets, const uint8_t *metadata,
                               uint32_t metadata_len, WireServed **out, HurrayError *error) {
  *out = NULL;
  WireServed *s = malloc(sizeof *s);
  int status = s ? served_init(s, name, context, checksums, file_fd, file_offsets, metadata,
                               metadata_len, true, error)
                 : hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  if (status != HURRAY_OK) {
    free(s);
    hurray_tensor_context_release(context);
    return status;
  }
  s->context = context;
  *out = s;
  return HURRAY_OK;
}

void hurray__wire_served_destroy(WireServed *s) {
  if (s == NULL) return;
  hurray_tensor_context_release(s->context);
  hurray__wire_served_reset(s);
  free(s);
}

void hurray__wire_plan_reset(WirePlan *plan) {
  hurray__sink_reset(&plan->header);
  free(plan->segments);
  plan->segments = NULL;
  plan->nsegments = 0;
}

void hurray__wire_plan_fds(WireServed *s, WirePlan *plan) {
  if (s->fd < 0 && hurray__wire_memfd(s, NULL) != HURRAY_OK) return; /* DATA frames, then */
  long page = sysconf(_SC_PAGESIZE);
  uint32_t n = 0;
  for (uint32_t k = 0; k < plan->nsegments; k++) {
    const WireSegment *g = &plan->segments[k];
    const HurrayBufferDesc *d = &s->buffers[g->buffer].desc;
    uint64_t at = s->fd_offsets[g->buffer];
    bool by_fd = at != UINT64_MAX && (page <= 0 || d->alignment <= (uint64_t)page) &&
                 at % d->alignment == 0;
    if (!by_fd) {
      plan->segments[n++] = *g;
    } else if (n == 0 || !plan->segments[n - 1].by_fd ||
               plan->segments[n - 1].buffer != g->buffer) {
      plan->segments[n++] = (WireSegment){.len = d->byte_size, .buffer = g->buffer, .by_fd = true,
                                          .fd_kind = s->fd_kind, .fd = s->fd, .fd_offset = at};
    } /* else: a later run of a buffer that goes whole */
  }
  plan->nsegments = n;
}

/* Rows [start, stop) of a DENSE tensor: the bytes those rows address become the one buffer
 * sent, the array re-based onto its start (as the file writer lays a tensor out). */
typedef struct RowSlice {
  HurrayTensorDesc desc;
  HurrayArray part;
  int64_t shape[HURRAY_MAX_NDIM];
  WireSegment segments[1];
  size_t nsegments;
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
  uint64_t begin = 0, end = 0, numel = 0;
  int status = hurray_array_span(&out->part, &begin, &end, error);
  if (status == HURRAY_OK) status = hurray_array_numel(&out->part, &numel, error);
  if (status != HURRAY_OK) return status;
  out->nsegments = 0;
  if (numel == 0) { /* no rows: an empty buffer */
    out->part.byte_offset = 0;
    out->len = 0;
    return HURRAY_OK;
  }
  out->part.byte_offset -= begin;
  WireSegment run = source_segment(s, s->context->buffers, a->buffer, begin, end - begin, 0, 0);
  add_segment(out->segments, &out->nsegments, &run);
  out->len = end - begin;
  return HURRAY_OK;
}

/* The segments of stream bytes [from, to). */
static int plan_segments(WirePlan *plan, const WireSegment *segments, size_t n, uint64_t from,
                         uint64_t to, HurrayError *error) {
  plan->segments = calloc(n + 1, sizeof *plan->segments);
  if (plan->segments == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  uint64_t at = 0; /* stream position of segment i's first byte */
  for (size_t i = 0; i < n && at < to; i++) {
    const WireSegment *g = &segments[i];
    uint64_t lo = from > at ? from - at : 0, hi = to - at < g->len ? to - at : g->len;
    if (lo < hi) {
      WireSegment *part = &plan->segments[plan->nsegments++];
      *part = *g;
      if (g->data != NULL) part->data = g->data + lo;
      part->at = g->at + lo;
      part->len = hi - lo;
      part->offset = g->offset + lo;
    }
    at += g->len;
  }
  return HURRAY_OK;
}

/* The device a response is served on (spec §6.2): the CPU, or the device the tensor is in. */
static int served_device(const WireServed *s, const WireRequest *r, uint8_t *device,
                         HurrayError *error) {
  int status = hurray_device_check(r->preferred_device, error);
  if (status != HURRAY_OK) return status;
  *device = HURRAY_DEVICE_CPU;
  if (r->preferred_device == HURRAY_DEVICE_CPU || r->preferred_device == s->device) {
    *device = r->preferred_device;
    return HURRAY_OK;
  }
  if (r->flags & WIRE_REQUEST_FALLBACK) return HURRAY_OK;
  if (s->device == HURRAY_DEVICE_CPU) {
    return hurray__fail(error, HURRAY_EUNSUPPORTED,
                        "device %s (0x%02x) is not served here; this server serves cpu (0x00)",
                        hurray_device_name(r->preferred_device), r->preferred_device);
  }
  return hurray__fail(error, HURRAY_EUNSUPPORTED,
                      "device %s (0x%02x) is not served here; tensor '%s' is served on cpu "
                      "(0x00) and %s (0x%02x)",
                      hurray_device_name(r->preferred_device), r->preferred_device, s->name,
                      hurray_device_name(s->device), s->device);
}

int hurray__wire_rows_checksum(const WireServed *s, const WireRequest *r, uint8_t *stage,
                               uint64_t *out, HurrayError *error) {
  RowSlice rows;
  int status = slice_rows(s, r->start, r->stop, &rows, error);
  if (status != HURRAY_OK) return status;
  return hurray__wire_hash_buffer(rows.segments, rows.nsegments, 0, stage, true, out, error);
}

void hurray__wire_range_buffers(const WireServed *s, const WireRequest *r, uint32_t *first,
                                uint32_t *end) {
  *first = *end = 0;
  if (r->range_kind == WIRE_RANGE_ROWS) {
    const HurrayTensorDesc *t = s->context->tensor;
    if (t->layout == HURRAY_LAYOUT_DENSE) {
      *first = t->parts[0].buffer;
      *end = *first + 1;
    }
    return;
  }
  if (r->range_kind != WIRE_RANGE_BYTES || r->start < 0 || r->stop <= r->start) return;
  uint64_t at = 0; /* stream position of compact buffer i (= source buffer i) */
  for (uint32_t i = 0; i < s->nbuffers; i++) {
    uint64_t size = s->buffers[i].desc.byte_size;
    if (size > 0 && at < (uint64_t)r->stop && (uint64_t)r->start < at + size) {
      if (*end == 0) *first = i;
      *end = i + 1;
    }
    at += size;
  }
}

int hurray__wire_plan(const WireServed *s, const WireRequest *r, uint64_t rows_checksum,
                      WirePlan *plan, HurrayError *error) {
  memset(plan, 0, sizeof *plan);
  uint8_t device = HURRAY_DEVICE_CPU;
  int status = served_device(s, r, &device, error);
  if (status != HURRAY_OK) return status;
  RowSlice rows;
  WireBuffer row_buffer;
  FileSink row_record = {0};
  WireBuffer *table = NULL; /* the buffer table, when it names a device */
  WireTensorHeader h = {device, s->nbuffers, s->total_bytes,
                        r->resume_offset, s->buffers, s->record.data, (uint32_t)s->record.len};
  const WireSegment *segments = s->segments;
  size_t nsegments = s->nsegments;
  if (r->range_kind == WIRE_RANGE_ROWS) {
    status = slice_rows(s, r->start, r->stop, &rows, error);
    if (status != HURRAY_OK) return status;
    row_buffer.desc = s->buffers[s->context->tensor->parts[0].buffer].desc;
    row_buffer.desc.byte_size = rows.len;
    row_buffer.desc.alignment = HURRAY_MIN_ALIGNMENT;
    row_buffer.role = HURRAY_ROLE_VALUES;
    row_buffer.checksum = rows_checksum;
    status = hurray__record_encode((const uint8_t *)s->name, s->name_len, &rows.desc, NULL, NULL,
                                   NULL, 0, &row_record, error);
    if (status != HURRAY_OK) {
      hurray__sink_reset(&row_record);
      return status;
    }
    h = (WireTensorHeader){device,      1,           rows.len, r->resume_offset,
                           &row_buffer, row_record.data, (uint32_t)row_record.len};
    segments = rows.segments;
    nsegments = rows.nsegments;
  }
  if (device != HURRAY_DEVICE_CPU) { /* every descriptor names the device the response is on */
    table = calloc(h.nbuffers + 1u, sizeof *table);
    if (table == NULL) status = hurray__fail(error, HURRAY_ENOMEM, "out of memory");
    for (uint32_t i = 0; table != NULL && i < h.nbuffers; i++) {
      table[i] = h.buffers[i];
      table[i].desc.device_tag = device;
    }
    h.buffers = table;
  }
  uint64_t from = 0, to = h.total_bytes;
  if (status == HURRAY_OK && r->range_kind == WIRE_RANGE_BYTES) {
    if (r->start < 0 || r->stop < r->start || (uint64_t)r->stop > h.total_bytes) {
      status = hurray__fail(error, HURRAY_EINVAL,
                            "bytes [%" PRId64 ", %" PRId64 ") are outside tensor '%s' (%" PRIu64
                            " bytes)",
                            r->start, r->stop, s->name, h.total_bytes);
    } else {
      from = (uint64_t)r->start;
      to = (uint64_t)r->stop;
    }
  }
  if (status == HURRAY_OK && r->resume_offset > to - from) {
    status = hurray__fail(error, HURRAY_EINVAL,
                          "resume offset %" PRIu64 " is past the %" PRIu64 " bytes requested",
                          r->resume_offset, to - from);
  }
  if (status == HURRAY_OK) status = hurray__wire_tensor_encode(&h, &plan->header, error);
  if (status == HURRAY_OK) {
    status = plan_segments(plan, segments, nsegments, from + r->resume_offset, to, error);
  }
  hurray__sink_reset(&row_record);
  free(table);
  if (status != HURRAY_OK) hurray__wire_plan_reset(plan);
  return status;
}
