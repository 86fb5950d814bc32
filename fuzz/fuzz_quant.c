/* fuzz_quant.c -- the quantisation kernels (hurray_dequantize, hurray_dequantize_buffer,
 * hurray_quantize_new) on a tensor and buffer list described by the input.
 *
 * Invariants checked (abort on violation): a tensor that does not validate is refused by the
 * kernels with validation's status; the two dequantise entry points agree on status and, when
 * they succeed, on every output byte; the same tensor with a trailing dimension of extent 1
 * (rows of one element: the kernels' other paths) dequantises to the same bytes; a quantised
 * tensor validates and dequantises.
 *
 * Input (a read past the end gives 0, so every prefix is a description):
 *   head    := nbuf:u8 (1 + nbuf % 3) buffer[nbuf] layout:u8 (% 4) dtype:u8 ndim:u8 (% 4)
 *              axis:u8 (% 5) block_size:u8 shape:u8[ndim] (% 9) nparts:u8 (% 4) part[nparts]
 *              out:u8 (index into kOut) qbits:u8 (quantise: bit 0 block, bit 1 int8,
 *              bits 2-3 the scale dtype, bits 4-5 the axis) qblock:u8
 *   buffer  := size:u16le (% 1025) fill:u8 byte[fill] (copied to the start of the buffer)
 *   part    := dtype:u8 buffer:u8 (% nbuf) ndim:u8 (% 4) byte_offset:u8 strided:u8 (bit 0)
 *              shape:u8[ndim] (% 9) (stride:u8 as int8)[ndim], if strided
 * Every extent is below 9, so no tensor has more than 8^3 elements (zero strides included). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hurray/hurray.h"

typedef struct Reader {
  const uint8_t *data;
  size_t size, at;
} Reader;

static uint8_t next(Reader *r) {
  return r->at < r->size ? r->data[r->at++] : 0;
}

static const uint8_t kOut[] = {HURRAY_DTYPE_FLOAT32, HURRAY_DTYPE_FLOAT16, HURRAY_DTYPE_BFLOAT16,
                               HURRAY_DTYPE_INT8,    HURRAY_DTYPE_UINT8,   HURRAY_DTYPE_FLOAT64};
static const uint8_t kScale[] = {HURRAY_DTYPE_FLOAT32, HURRAY_DTYPE_FLOAT16,
                                 HURRAY_DTYPE_BFLOAT16, HURRAY_DTYPE_FLOAT8_E8M0FNU};

static void check_quantize(const HurrayTensorDesc *t, const HurrayBufferList *list, uint8_t bits,
                           uint8_t block) {
  HurrayQuantizeOptions o = {
      .layout = bits & 1 ? HURRAY_LAYOUT_BLOCK : HURRAY_LAYOUT_PER_CHANNEL,
      .axis = (bits >> 4) & 3,
      .block_size = bits & 1 ? block : 0,
      .dtype = bits & 2 ? HURRAY_DTYPE_INT8 : HURRAY_DTYPE_INT4,
      .scale_dtype = kScale[(bits >> 2) & 3]};
  HurrayTensorContext *q = NULL;
  HurrayError error;
  if (hurray_quantize_new(t, list, &o, &q, &error) != HURRAY_OK) return;
  if (hurray_tensor_validate(q->tensor, q->buffers, 0, &error) != HURRAY_OK) abort();
  HurrayBuffer *out = NULL;
  if (hurray_dequantize_buffer(q->tensor, q->buffers, HURRAY_DTYPE_FLOAT32, &out, &error) !=
      HURRAY_OK) {
    abort();
  }
  hurray_buffer_destroy(out);
  hurray_tensor_context_release(q);
}

/* `t` (which dequantised to `want`) with shape [..., 1]: every part of the tensor's rank gains
 * the trailing dimension too (per-channel scales keep theirs). */
static void check_trailing_one(const HurrayTensorDesc *t, const HurrayBufferList *list, int dtype,
                               const uint8_t *want) {
  int64_t shape[4], pshape[3][4], pstrides[3][4];
  HurrayArray parts[3];
  HurrayTensorDesc u = *t;
  memcpy(shape, t->shape, (size_t)t->ndim * sizeof *shape);
  shape[t->ndim] = 1;
  u.ndim = t->ndim + 1;
  u.shape = shape;
  for (uint32_t i = 0; i < t->nparts; i++) {
    parts[i] = t->parts[i];
    const HurrayArray *a = &t->parts[i];
    if (a->ndim != t->ndim || (t->layout == HURRAY_LAYOUT_PER_CHANNEL && i > 0)) continue;
    int64_t s = 1;
    for (int32_t k = a->ndim - 1; k >= 0; k--) { /* row-major strides where absent */
      pstrides[i][k] = a->strides != NULL ? a->strides[k] : s;
      s *= a->shape[k] > 0 ? a->shape[k] : 1;
    }
    memcpy(pshape[i], a->shape, (size_t)a->ndim * sizeof *pshape[i]);
    pshape[i][a->ndim] = 1;
    pstrides[i][a->ndim] = 1;
    parts[i].ndim = a->ndim + 1;
    parts[i].shape = pshape[i];
    parts[i].strides = pstrides[i];
  }
  u.parts = parts;
  HurrayBuffer *got = NULL;
  HurrayError error;
  if (hurray_dequantize_buffer(&u, list, dtype, &got, &error) != HURRAY_OK) abort();
  if (got->desc.byte_size > 0 && memcmp(got->data, want, (size_t)got->desc.byte_size) != 0) {
    abort();
  }
  hurray_buffer_destroy(got);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Reader r = {data, size, 0};
  HurrayBufferList *list = NULL;
  if (hurray_buffer_list_create(3, &list, NULL) != HURRAY_OK) abort();
  uint32_t nbuf = 1u + next(&r) % 3u;
  for (uint32_t i = 0; i < nbuf; i++) {
    uint32_t bytes = (uint32_t)next(&r);
    bytes = (bytes | (uint32_t)next(&r) << 8) % 1025u;
    HurrayBuffer *buffer = NULL;
    if (hurray_buffer_alloc(bytes, 0, HURRAY_ALLOC_ZERO, &buffer, NULL) != HURRAY_OK) abort();
    uint32_t fill = next(&r);
    for (uint32_t k = 0; k < fill; k++) {
      uint8_t b = next(&r);
      if (k < bytes) ((uint8_t *)buffer->data)[k] = b;
    }
    if (hurray_buffer_list_append(list, buffer, HURRAY_ROLE_MIXED, NULL, NULL) != HURRAY_OK) {
      abort();
    }
  }
  int64_t shape[3], pshape[3][3], pstrides[3][3];
  HurrayArray parts[3];
  memset(parts, 0, sizeof parts);
  HurrayTensorDesc t = {.layout = next(&r) % 4u, .dtype = next(&r)};
  t.ndim = next(&r) % 4;
  t.axis = next(&r) % 5;
  t.block_size = next(&r);
  for (int32_t k = 0; k < t.ndim; k++) shape[k] = next(&r) % 9;
  t.shape = shape;
  t.nparts = next(&r) % 4u;
  for (uint32_t i = 0; i < t.nparts; i++) {
    HurrayArray *a = &parts[i];
    a->dtype = next(&r);
    a->buffer = next(&r) % nbuf;
    a->ndim = next(&r) % 4;
    a->byte_offset = next(&r);
    int strided = next(&r) & 1;
    for (int32_t k = 0; k < a->ndim; k++) pshape[i][k] = next(&r) % 9;
    for (int32_t k = 0; strided && k < a->ndim; k++) pstrides[i][k] = (int8_t)next(&r);
    a->shape = pshape[i];
    a->strides = strided ? pstrides[i] : NULL;
  }
  t.parts = parts;
  int out_dtype = kOut[next(&r) % sizeof kOut];
  uint8_t qbits = next(&r), qblock = next(&r);

  HurrayError error;
  int valid = hurray_tensor_validate(&t, list, 0, &error);
  static uint8_t out[8 * 8 * 8 * 4];
  int a = hurray_dequantize(&t, list, out_dtype, out, sizeof out, &error);
  HurrayBuffer *made = NULL;
  int b = hurray_dequantize_buffer(&t, list, out_dtype, &made, &error);
  if (valid != HURRAY_OK && (a != valid || b != valid)) abort();
  if (a != b) abort();
  if (a == HURRAY_OK && made->desc.byte_size > 0 &&
      memcmp(out, made->data, (size_t)made->desc.byte_size) != 0) {
    abort();
  }
  hurray_buffer_destroy(made);
  if (a == HURRAY_OK && t.ndim < 3) check_trailing_one(&t, list, out_dtype, out);
  check_quantize(&t, list, qbits, qblock);
  hurray_buffer_list_destroy(list);
  return 0;
}
