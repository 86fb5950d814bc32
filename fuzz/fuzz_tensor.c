/* fuzz_tensor.c -- hurray_tensor_validate, hurray_tensor_desc_clone, hurray_array_span/numel and
 * the tensor context, on a tensor and buffer list described by the input.
 *
 * Invariants checked (abort on violation): a clone validates to the same status and message as
 * its original; a tensor that validates can be cloned; context create succeeds exactly when
 * structural validation does, and its check agrees with validation; span begin <= end.
 *
 * Input (a read past the end gives 0, so every prefix is a description):
 *   buffers := count:u8 (1 + count % 4) buffer*
 *   buffer  := kind:u8 (role = kind % 16 % 9; bit 7: claims CUDA memory, never read)
 *              size:u16le (% 4097) fill:u8 byte[fill] (copied to the start of the buffer)
 *   tensor  := layout:u8 dtype:u8 ndim:NDIM axis:i8 block_size:DIM bits:u8 shape:DIM[ndim]
 *              nparts:u8 (% 5) part[nparts] nchildren:u8 (% 5) (name tensor)[nchildren]
 *              bits: 0 COALESCED, 1 an unknown flag, 2 a reserved field set
 *   part    := dtype:u8 ndim:NDIM buffer:u8 byte_offset:OFFSET bits:u8 shape:DIM[ndim]
 *              strides:STRIDE[ndim] (only if bits & 1); bits & 2 sets a reserved byte,
 *              bits & 4 drops the shape (NULL)
 *   name    := length:u8 (0xFF: a NULL name) byte[length]
 *   NDIM    := u8: 0xFF -> -1, 0xFE -> HURRAY_MAX_NDIM + 1, else % 5
 *   DIM     := u8 below 0xF8 as is; STRIDE := u8 below 0xF8 minus 0x7C; OFFSET := u8 below 0xF8;
 *              0xF8..0xFF pick an edge value (kDimEdges, kOffsetEdges), 0xFF reading 8 raw bytes.
 * Allocation stays small: 4 buffers of at most 4 KiB and a fixed pool of descriptors. Content
 * checks run only when the index elements to read (dimensions of stride 0 counted once) are few,
 * since overlapping strides can address many elements in a small buffer. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hurray/hurray.h"

#define MAX_BUFFERS 4
#define MAX_BUFFER_SIZE 4096
#define MAX_TENSORS 64
#define MAX_CHILDREN 4
#define MAX_NEST (HURRAY_MAX_DEPTH + 2) /* deep enough to cross the limit */
#define MAX_ROWS (MAX_TENSORS * (1 + 2 * 4))
#define WORK_LIMIT (1u << 16)

typedef struct Reader {
  const uint8_t *data;
  size_t size, at;
} Reader;

static uint8_t read_u8(Reader *r) {
  return r->at < r->size ? r->data[r->at++] : 0;
}

static uint64_t read_u64(Reader *r) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)read_u8(r) << (8 * i);
  return v;
}

static const int64_t kDimEdges[7] = {-1,
                                     INT64_MIN,
                                     INT64_MAX,
                                     HURRAY_MAX_DIM,
                                     HURRAY_MAX_DIM + 1,
                                     INT64_C(1) << 31,
                                     INT64_C(1) << 32};
static const uint64_t kOffsetEdges[7] = {
    UINT64_MAX, INT64_MAX / 8, INT64_MAX / 8 + 1, UINT64_C(1) << 32, 4096, 4097, UINT64_C(1) << 62};

static int64_t read_dim(Reader *r, int64_t bias) {
  uint8_t b = read_u8(r);
  if (b < 0xF8) return (int64_t)b - bias;
  return b == 0xFF ? (int64_t)read_u64(r) : kDimEdges[b - 0xF8];
}

static uint64_t read_offset(Reader *r) {
  uint8_t b = read_u8(r);
  if (b < 0xF8) return b;
  return b == 0xFF ? read_u64(r) : kOffsetEdges[b - 0xF8];
}

static int32_t read_ndim(Reader *r) {
  uint8_t b = read_u8(r);
  return b == 0xFF ? -1 : b == 0xFE ? HURRAY_MAX_NDIM + 1 : b % 5;
}

/* Storage for one input's descriptors; reset per input. */
typedef struct Pool {
  HurrayTensorDesc tensors[MAX_TENSORS];
  HurrayArray arrays[MAX_TENSORS * 4];
  int64_t rows[MAX_ROWS][HURRAY_MAX_NDIM + 1];
  const char *names[MAX_TENSORS];
  char text[MAX_TENSORS][256];
  uint32_t ntensors, narrays, nrows, nnames;
  uint64_t work; /* index elements content checks may read, saturating */
} Pool;

static Pool pool;

static const int64_t *read_dims(Reader *r, int32_t ndim, int64_t bias) {
  if (ndim <= 0 || pool.nrows == MAX_ROWS) return NULL;
  int64_t *row = pool.rows[pool.nrows++];
  for (int32_t k = 0; k < ndim; k++) row[k] = read_dim(r, bias);
  return row;
}

/* Elements a content check may read from `a`: extents with stride 0 count once. */
static uint64_t array_work(const HurrayArray *a) {
  uint64_t n = 1;
  for (int32_t k = 0; k < a->ndim && a->shape != NULL && k <= HURRAY_MAX_NDIM; k++) {
    int64_t extent = a->strides != NULL && a->strides[k] == 0 ? 1 : a->shape[k];
    if (extent <= 0) return 0;
    n = __builtin_mul_overflow(n, (uint64_t)extent, &n) ? UINT64_MAX : n;
  }
  return n;
}

static void read_part(Reader *r, HurrayArray *a) {
  memset(a, 0, sizeof *a);
  a->dtype = read_u8(r);
  a->ndim = read_ndim(r);
  a->buffer = read_u8(r) % (MAX_BUFFERS + 1);
  a->byte_offset = read_offset(r);
  uint8_t bits = read_u8(r);
  a->shape = read_dims(r, a->ndim, 0);
  if (bits & 1) a->strides = read_dims(r, a->ndim, 0x7C);
  if (bits & 2) a->reserved[3] = 1;
  if (bits & 4) a->shape = NULL;
  uint64_t work = array_work(a);
  pool.work = __builtin_add_overflow(pool.work, work, &pool.work) ? UINT64_MAX : pool.work;
}

static void read_tensor(Reader *r, HurrayTensorDesc *t, int nest) {
  memset(t, 0, sizeof *t);
  t->layout = read_u8(r);
  t->dtype = read_u8(r);
  t->ndim = read_ndim(r);
  t->axis = (int8_t)read_u8(r);
  t->block_size = read_dim(r, 0);
  uint8_t bits = read_u8(r);
  t->flags = bits & 3u;
  t->reserved1 = (bits >> 2) & 1u;
  t->shape = read_dims(r, t->ndim, 0);

  uint32_t nparts = read_u8(r) % 5;
  if (pool.narrays + nparts <= sizeof pool.arrays / sizeof pool.arrays[0]) {
    HurrayArray *parts = &pool.arrays[pool.narrays];
    pool.narrays += nparts;
    for (uint32_t i = 0; i < nparts; i++) read_part(r, &parts[i]);
    t->parts = parts;
    t->nparts = nparts;
  }

  uint32_t nchildren = read_u8(r) % (MAX_CHILDREN + 1);
  if (nest >= MAX_NEST || pool.ntensors + nchildren > MAX_TENSORS) return;
  HurrayTensorDesc *children = &pool.tensors[pool.ntensors];
  const char **names = &pool.names[pool.nnames];
  pool.ntensors += nchildren;
  pool.nnames += nchildren;
  for (uint32_t i = 0; i < nchildren; i++) {
    uint8_t length = read_u8(r);
    char *text = pool.text[names - pool.names + i];
    for (uint8_t k = 0; k < length && length != 0xFF; k++) text[k] = (char)read_u8(r);
    text[length == 0xFF ? 0 : length] = '\0';
    names[i] = length == 0xFF ? NULL : text;
    read_tensor(r, &children[i], nest + 1);
  }
  t->children = children;
  t->child_names = names;
  t->nchildren = nchildren;
}

static void release_free(HurrayBuffer *self) {
  free(self->data);
}

/* A CPU buffer from hurray_buffer_alloc, or memory wrapped as if it were on a CUDA device. */
static HurrayBuffer *make_buffer(uint64_t size, bool device) {
  HurrayBuffer *buffer = NULL;
  if (!device) {
    return hurray_buffer_alloc(size, 0, HURRAY_ALLOC_ZERO, &buffer, NULL) == HURRAY_OK ? buffer
                                                                                       : NULL;
  }
  const HurrayBufferDesc desc = {.byte_size = size,
                                 .alignment = 64,
                                 .device_tag = HURRAY_DEVICE_CUDA,
                                 .memory_class = HURRAY_MEM_DEVICE,
                                 .sync_mode = HURRAY_SYNC_READY};
  void *data = size == 0 ? NULL : aligned_alloc(64, (size + 63) / 64 * 64);
  if (data != NULL) memset(data, 0, size);
  if (hurray_buffer_wrap(data, &desc, 0, NULL, 0, release_free, NULL, &buffer, NULL) != HURRAY_OK) {
    free(data);
    return NULL;
  }
  return buffer;
}

static HurrayBufferList *read_buffers(Reader *r) {
  HurrayBufferList *list = NULL;
  if (hurray_buffer_list_create(MAX_BUFFERS, &list, NULL) != HURRAY_OK) return NULL;
  uint32_t count = 1 + read_u8(r) % MAX_BUFFERS;
  for (uint32_t i = 0; i < count; i++) {
    uint8_t kind = read_u8(r);
    uint64_t size = (read_u8(r) | (uint64_t)read_u8(r) << 8) % (MAX_BUFFER_SIZE + 1);
    HurrayBuffer *buffer = make_buffer(size, kind & 0x80);
    if (buffer == NULL ||
        hurray_buffer_list_append(list, buffer, kind % 16 % 9, NULL, NULL) != HURRAY_OK) {
      hurray_buffer_list_destroy(list);
      return NULL;
    }
    uint8_t fill = read_u8(r);
    for (uint8_t k = 0; k < fill; k++) {
      uint8_t byte = read_u8(r);
      if (k < size) ((uint8_t *)buffer->data)[k] = byte;
    }
  }
  return list;
}

/* Validates `tensor` and its clone with `flags`; they must agree. Returns the status. */
static int validate_both(const HurrayTensorDesc *tensor, const HurrayBufferList *list,
                         uint32_t flags) {
  HurrayError error = {0}, copy_error = {0};
  int status = hurray_tensor_validate(tensor, list, flags, &error);
  HurrayTensorDesc *copy = NULL;
  int cloned = hurray_tensor_desc_clone(tensor, &copy, NULL);
  if (cloned == HURRAY_OK) {
    if (hurray_tensor_validate(copy, list, flags, &copy_error) != status ||
        strcmp(error.message, copy_error.message) != 0) {
      abort();
    }
    hurray_tensor_desc_destroy(copy);
  } else if (status == HURRAY_OK && cloned != HURRAY_ENOMEM) {
    abort(); /* whatever validates can be copied */
  }
  return status;
}

static void exercise_parts(const HurrayTensorDesc *t) {
  for (uint32_t i = 0; i < t->nparts; i++) {
    uint64_t begin = 0, end = 0, numel = 0;
    if (hurray_array_span(&t->parts[i], &begin, &end, NULL) == HURRAY_OK && begin > end) abort();
    (void)hurray_array_numel(&t->parts[i], &numel, NULL);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Reader r = {data, size, 0};
  HurrayBufferList *list = read_buffers(&r);
  if (list == NULL) return 0;
  pool.ntensors = 1;
  pool.narrays = pool.nrows = pool.nnames = 0;
  pool.work = 0;
  HurrayTensorDesc *tensor = &pool.tensors[0];
  read_tensor(&r, tensor, 0);
  bool read_contents = pool.work <= WORK_LIMIT;

  int structural = validate_both(tensor, list, 0);
  int full = read_contents ? validate_both(tensor, list, HURRAY_VALIDATE_CONTENTS) : structural;
  if (structural != HURRAY_OK && full != structural) abort();
  exercise_parts(tensor);

  HurrayTensorContext *context = NULL;
  int created = hurray_tensor_context_create(tensor, list, 0, NULL, NULL, &context, NULL);
  if (created != structural && created != HURRAY_ENOMEM) abort();
  if (created == HURRAY_OK) {
    uint32_t flags = read_contents ? HURRAY_VALIDATE_CONTENTS : 0;
    if (hurray_tensor_context_check(context, flags, NULL) != full) abort();
    hurray_tensor_context_release(context);
  }
  return 0;
}
