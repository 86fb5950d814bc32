/* array.c -- moving an array's bytes to an output in bounded memory: read from the file with
 * pread chunk by chunk and handed on as they are, byte-swapped through a scratch buffer, or
 * gathered element by element into C order (for outputs that cannot hold strides). Reading with
 * pread rather than from the mapping makes a file that shrinks under the conversion HURRAY_EIO,
 * not SIGBUS. */
#include <pthread.h>
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

/* ---- the read-ahead thread: the next chunk is read (and hashed) while `fn` takes this one --- */

typedef struct ReadAhead {
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t changed; /* a read was asked or finished, or stop was asked */
  const FileSource *file;
  FileHasher *hasher;
  uint8_t *into;
  uint64_t at;
  size_t n;
  bool pending, stop;
  int status; /* of the last read; `error` says why where it failed */
  HurrayError error;
} ReadAhead;

static int read_chunk(const FileSource *file, uint64_t at, uint8_t *into, size_t n,
                      FileHasher *hasher, HurrayError *error) {
  int status = hurray__source_read(file, at, into, n, error);
  if (status == HURRAY_OK && hasher != NULL) hurray__hasher_update(hasher, into, n);
  return status;
}

static void *read_ahead_main(void *arg) {
  ReadAhead *ra = arg;
  pthread_mutex_lock(&ra->lock);
  for (;;) {
    while (!ra->pending && !ra->stop) pthread_cond_wait(&ra->changed, &ra->lock);
    if (!ra->pending) break;
    pthread_mutex_unlock(&ra->lock);
    int status = read_chunk(ra->file, ra->at, ra->into, ra->n, ra->hasher, &ra->error);
    pthread_mutex_lock(&ra->lock);
    ra->status = status;
    ra->pending = false;
    pthread_cond_broadcast(&ra->changed);
  }
  pthread_mutex_unlock(&ra->lock);
  return NULL;
}

/* The read-ahead thread, or NULL where none can be started (the stream then reads inline). */
static ReadAhead *read_ahead_start(const FileSource *file, FileHasher *hasher) {
  ReadAhead *ra = malloc(sizeof *ra);
  if (ra == NULL) return NULL;
  *ra = (ReadAhead){.file = file, .hasher = hasher};
  pthread_mutex_init(&ra->lock, NULL);
  pthread_cond_init(&ra->changed, NULL);
  if (pthread_create(&ra->thread, NULL, read_ahead_main, ra) != 0) {
    pthread_cond_destroy(&ra->changed);
    pthread_mutex_destroy(&ra->lock);
    free(ra);
    return NULL;
  }
  return ra;
}

static void read_ahead_ask(ReadAhead *ra, uint64_t at, uint8_t *into, size_t n) {
  pthread_mutex_lock(&ra->lock);
  ra->at = at;
  ra->into = into;
  ra->n = n;
  ra->pending = true;
  pthread_cond_broadcast(&ra->changed);
  pthread_mutex_unlock(&ra->lock);
}

/* Waits for the read asked last; its status, its error copied into `error` where it failed. */
static int read_ahead_wait(ReadAhead *ra, HurrayError *error) {
  pthread_mutex_lock(&ra->lock);
  while (ra->pending) pthread_cond_wait(&ra->changed, &ra->lock);
  int status = ra->status;
  pthread_mutex_unlock(&ra->lock);
  if (status != HURRAY_OK && error != NULL) *error = ra->error;
  return status;
}

static void read_ahead_stop(ReadAhead *ra) {
  pthread_mutex_lock(&ra->lock);
  ra->stop = true;
  pthread_cond_broadcast(&ra->changed);
  pthread_mutex_unlock(&ra->lock);
  pthread_join(ra->thread, NULL);
  pthread_cond_destroy(&ra->changed);
  pthread_mutex_destroy(&ra->lock);
  free(ra);
}

/* A stream of more than one chunk reads into two buffers in turn: the read-ahead thread fills
 * (and hashes) one while `fn` takes the other, so the copy out of the page cache overlaps the
 * copy into the output. One chunk, or no thread, reads inline into one buffer. */
int hurray__stream_file(const FileSource *file, uint64_t offset, uint64_t len, uint8_t swap,
                        FileHasher *hasher, ConvChunkFn fn, void *context, HurrayError *error) {
  if (len == 0) return HURRAY_OK;
  bool ahead = fn != NULL && len > READ_STEP;
  size_t step = len < READ_STEP ? (size_t)len : READ_STEP;
  uint8_t *chunks = malloc(ahead ? 2 * (size_t)READ_STEP : step);
  ReadAhead *ra = chunks != NULL && ahead ? read_ahead_start(file, hasher) : NULL;
  if (chunks == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  SwapAdapter adapter;
  int status = HURRAY_OK;
  if (fn != NULL && swap > 1) {
    status = hurray__swap_init(&adapter, swap, fn, context, error);
    fn = hurray__swap_chunk;
    context = &adapter;
  }
  size_t n = step;
  if (status == HURRAY_OK) status = read_chunk(file, offset, chunks, n, hasher, error);
  for (uint64_t at = 0, turn = 0; at < len && status == HURRAY_OK; turn ^= ra != NULL) {
    uint8_t *chunk = chunks + turn * READ_STEP, *other = chunks + (turn ^ 1) * READ_STEP;
    uint64_t next = at + n;
    size_t next_n = len - next < READ_STEP ? (size_t)(len - next) : READ_STEP;
    bool asked = ra != NULL && next < len;
    if (asked) read_ahead_ask(ra, offset + next, other, next_n);
    if (fn != NULL) status = fn(context, chunk, n, error);
    if (asked) {
      int read = read_ahead_wait(ra, status == HURRAY_OK ? error : NULL);
      if (status == HURRAY_OK) status = read;
    } else if (status == HURRAY_OK && next < len) {
      status = read_chunk(file, offset + next, chunk, next_n, hasher, error);
    }
    at = next;
    n = next_n;
  }
  if (ra != NULL) read_ahead_stop(ra);
  if (fn == hurray__swap_chunk) {
    if (status == HURRAY_OK) {
      status = hurray__swap_finish(&adapter, error);
    } else {
      hurray__swap_free(&adapter);
    }
  }
  free(chunks);
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
