/* array.c -- moving an array's bytes to an output in bounded memory: read from the file with
 * pread chunk by chunk and handed on as they are, byte-swapped through a scratch buffer, or
 * gathered element by element into C order (for outputs that cannot hold strides). Reading with
 * pread rather than from the mapping makes a file that shrinks under the conversion HURRAY_EIO,
 * not SIGBUS. */
#include <stdlib.h>
#include <string.h>

#include "convert.h"

enum { READ_STEP = 4u << 20, SCRATCH = 1u << 20 };

static bool strides_match(const ConvArray *a, bool fortran) {
  int64_t expected = 1;
  for (int32_t i = 0; i < a->ndim; i++) {
    int32_t k = fortran ? i : a->ndim - 1 - i;
    if (a->shape[k] != 1 && a->strides[k] != expected) return false;
    expected *= a->shape[k]; /* numel fits: validated */
  }
  return true;
}

bool hurray__array_is_c_order(const ConvArray *a) {
  return a->strides == NULL || a->numel == 0 || strides_match(a, false);
}

bool hurray__array_is_f_order(const ConvArray *a) {
  if (a->numel == 0) return true;
  if (a->strides == NULL) { /* C order is also Fortran order when at most one extent is > 1 */
    int big = 0;
    for (int32_t k = 0; k < a->ndim; k++) big += a->shape[k] != 1;
    return big <= 1;
  }
  return strides_match(a, true);
}

void hurray__array_dense_desc(const ConvArray *a, uint64_t byte_offset, HurrayArray *part,
                              HurrayTensorDesc *desc) {
  *part = (HurrayArray){.shape = a->shape,
                        .strides = a->strides,
                        .byte_offset = byte_offset,
                        .ndim = a->ndim,
                        .dtype = a->dtype};
  *desc = (HurrayTensorDesc){.layout = HURRAY_LAYOUT_DENSE,
                             .ndim = a->ndim,
                             .shape = a->shape,
                             .parts = part,
                             .nparts = 1,
                             .dtype = a->dtype};
}

void hurray__fortran_strides(int32_t ndim, const int64_t *shape, int64_t *strides) {
  int64_t stride = 1;
  for (int32_t k = 0; k < ndim; k++) {
    strides[k] = stride;
    if (shape[k] > 0 && stride <= INT64_MAX / shape[k]) stride *= shape[k];
  }
}

static void swap_units(uint8_t *p, size_t len, uint8_t unit) {
  for (size_t at = 0; at + unit <= len; at += unit) {
    for (uint8_t i = 0; i < unit / 2; i++) {
      uint8_t t = p[at + i];
      p[at + i] = p[at + unit - 1 - i];
      p[at + unit - 1 - i] = t;
    }
  }
}

int hurray__swap_init(SwapAdapter *s, uint8_t unit, ConvChunkFn fn, void *context,
                      HurrayError *error) {
  *s = (SwapAdapter){.unit = unit, .scratch = malloc(SCRATCH), .fn = fn, .context = context};
  return s->scratch != NULL ? HURRAY_OK : hurray__fail(error, HURRAY_ENOMEM, "out of memory");
}

int hurray__swap_chunk(void *adapter, const uint8_t *bytes, size_t len, HurrayError *error) {
  SwapAdapter *s = adapter;
  size_t room = SCRATCH - SCRATCH % s->unit; /* whole units per hand-over */
  while (len > 0) {
    size_t n = room - s->used < len ? room - s->used : len;
    memcpy(s->scratch + s->used, bytes, n);
    s->used += n;
    bytes += n;
    len -= n;
    if (s->used == room) {
      swap_units(s->scratch, s->used, s->unit);
      int status = s->fn(s->context, s->scratch, s->used, error);
      s->used = 0;
      if (status != HURRAY_OK) return status;
    }
  }
  return HURRAY_OK;
}

int hurray__swap_finish(SwapAdapter *s, HurrayError *error) {
  int status = HURRAY_OK;
  if (s->used % s->unit != 0) {
    status = hurray__fail(error, HURRAY_EFORMAT, "%zu bytes do not make whole %u-byte elements",
                          s->used, s->unit);
  } else if (s->used > 0) {
    swap_units(s->scratch, s->used, s->unit);
    status = s->fn(s->context, s->scratch, s->used, error);
  }
  hurray__swap_free(s);
  return status;
}

void hurray__swap_free(SwapAdapter *s) {
  free(s->scratch);
  s->scratch = NULL;
  s->used = 0;
}

int hurray__stream_file(const FileSource *file, uint64_t offset, uint64_t len, uint8_t swap,
                        FileHasher *hasher, ConvChunkFn fn, void *context, HurrayError *error) {
  if (len == 0) return HURRAY_OK;
  uint8_t *chunk = malloc(len < READ_STEP ? (size_t)len : READ_STEP);
  if (chunk == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  SwapAdapter adapter;
  int status = HURRAY_OK;
  if (fn != NULL && swap > 1) {
    status = hurray__swap_init(&adapter, swap, fn, context, error);
    fn = hurray__swap_chunk;
    context = &adapter;
  }
  for (uint64_t at = 0; at < len && status == HURRAY_OK; at += READ_STEP) {
    size_t n = len - at < READ_STEP ? (size_t)(len - at) : READ_STEP;
    status = hurray__source_read(file, offset + at, chunk, n, error);
    if (status == HURRAY_OK && hasher != NULL) hurray__hasher_update(hasher, chunk, n);
    if (status == HURRAY_OK && fn != NULL) status = fn(context, chunk, n, error);
  }
  if (fn == hurray__swap_chunk) {
    if (status == HURRAY_OK) {
      status = hurray__swap_finish(&adapter, error);
    } else {
      hurray__swap_free(&adapter);
    }
  }
  free(chunk);
  return status;
}

int hurray__read_region(const FileSource *file, uint64_t offset, uint64_t len, uint8_t **out,
                        HurrayError *error) {
  *out = len < SIZE_MAX ? malloc(len > 0 ? (size_t)len : 1) : NULL;
  if (*out == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  int status = hurray__source_read(file, offset, *out, (size_t)len, error);
  if (status != HURRAY_OK) {
    free(*out);
    *out = NULL;
  }
  return status;
}

/* Collects output into a scratch buffer, handing it on when full. */
typedef struct Gather {
  uint8_t *buffer;
  size_t used;
  uint64_t bits; /* sub-byte: bits placed in the current byte run */
  ConvChunkFn fn;
  void *context;
} Gather;

static int gather_flush(Gather *g, HurrayError *error) {
  int status = g->used > 0 ? g->fn(g->context, g->buffer, g->used, error) : HURRAY_OK;
  g->used = 0;
  return status;
}

int hurray__stream_gather(const ConvArray *a, const uint8_t *region, ConvChunkFn fn, void *context,
                          HurrayError *error) {
  if (a->numel == 0) return HURRAY_OK;
  const HurrayDTypeInfo *info = hurray_dtype_info(a->dtype);
  uint32_t bits = info->bits;
  int64_t strides[HURRAY_MAX_NDIM], index[HURRAY_MAX_NDIM] = {0};
  if (a->strides != NULL) {
    memcpy(strides, a->strides, (size_t)a->ndim * sizeof *strides);
  } else {
    int64_t s = 1;
    for (int32_t k = a->ndim - 1; k >= 0; k--) {
      strides[k] = s;
      s *= a->shape[k];
    }
  }
  Gather g = {.buffer = malloc(SCRATCH), .fn = fn, .context = context};
  if (g.buffer == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  int status = HURRAY_OK;
  size_t bytes = bits / 8;
  /* The element at `index`, as a signed element offset from element 0 (in range: the array
   * was validated against its region). */
  int64_t element = 0;
  for (uint64_t n = 0; n < a->numel && status == HURRAY_OK; n++) {
    if (bits % 8 == 0) {
      if (SCRATCH - g.used < bytes) status = gather_flush(&g, error);
      const uint8_t *src = region + a->byte_offset + element * (int64_t)bytes;
      memcpy(g.buffer + g.used, src, bytes);
      if (a->swap > 1) swap_units(g.buffer + g.used, bytes, a->swap);
      g.used += bytes;
    } else {
      /* Sub-byte: read `bits` bits at bit 8*byte_offset + element*bits, append them to the
       * little-endian bit stream of the output. */
      uint64_t at = 8 * a->byte_offset + (uint64_t)(element * (int64_t)bits);
      uint32_t v = 0;
      for (uint32_t b = 0; b < bits; b++) {
        uint64_t bit = at + b;
        v |= (uint32_t)((region[bit / 8] >> (bit % 8)) & 1u) << b;
      }
      for (uint32_t b = 0; b < bits; b++) {
        if (g.bits % 8 == 0) {
          if (g.used == SCRATCH) status = gather_flush(&g, error);
          g.buffer[g.used++] = 0;
        }
        g.buffer[g.used - 1] |= (uint8_t)(((v >> b) & 1u) << (g.bits % 8));
        g.bits++;
      }
    }
    /* the odometer: next index in C order */
    for (int32_t k = a->ndim - 1; k >= 0; k--) {
      element += strides[k];
      if (++index[k] < a->shape[k]) break;
      element -= strides[k] * a->shape[k];
      index[k] = 0;
    }
  }
  if (status == HURRAY_OK) status = gather_flush(&g, error);
  free(g.buffer);
  return status;
}
