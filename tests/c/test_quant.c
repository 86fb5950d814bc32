/* test_quant.c -- the quantisation kernels against a scalar reference written from the spec
 * (buffer-protocol.md §8.1 and §8.9): every element located by its bit formula, every dtype
 * decoded from its definition in dtypes.md, float16/bfloat16 rounding found by a search for the
 * nearest code. Random tensors of every layout, dtype and output dtype, strided and reversed;
 * the worked examples of §8.7 and §8.8; unpacking; quantisation and its round trip; refusals. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hurray/hurray.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* ---- reference conversions ---------------------------------------------------------------- */

static float ref_pow2(int e) {
  float p = 1.0f;
  for (; e > 0; e--) p *= 2.0f;
  for (; e < 0; e++) p *= 0.5f;
  return p;
}

static float nan_of(int negative) {
  uint32_t u = negative ? 0xFFC00000u : 0x7FC00000u;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* A float of `e` exponent bits (bias), `m` mantissa bits, from its sign/exponent/mantissa
 * fields, the IEEE way (no special values; callers handle those). */
static float ref_fields(uint32_t sign, uint32_t exp, uint32_t man, int m, int bias) {
  float v = exp == 0 ? (float)man * ref_pow2(1 - bias - m)
                     : (1.0f + (float)man * ref_pow2(-m)) * ref_pow2((int)exp - bias);
  return sign ? -v : v;
}

static float ref_half(uint32_t h) {
  uint32_t e = (h >> 10) & 31u, man = h & 1023u;
  if (e == 31) return man ? nan_of(0) : (h & 0x8000u ? -1.0f : 1.0f) / 0.0f;
  return ref_fields(h >> 15, e, man, 10, 15);
}

static float ref_bf16(uint32_t h) {
  uint32_t u = h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* The code of `limit` codes (0 .. limit-1, increasing values) nearest |x|, ties to the even
 * code; limit itself (infinity) beyond the last code by half a step or more. */
static uint32_t ref_encode(float (*decode)(uint32_t), uint32_t limit, float x) {
  uint32_t sign = x < 0 || (x == 0 && 1.0f / x < 0) ? 1u : 0u;
  float a = sign ? -x : x;
  uint32_t lo = 0, hi = limit - 1;
  while (lo < hi) { /* the last code whose value is <= a */
    uint32_t mid = (lo + hi + 1) / 2;
    if (decode(mid) <= a) lo = mid; else hi = mid - 1;
  }
  uint32_t code = lo;
  double below = (double)decode(lo);
  double above = lo + 1 < limit ? (double)decode(lo + 1)
                                : below + (below - (double)decode(lo - 1)); /* the inf step */
  double da = (double)a - below, db = above - (double)a;
  if (db < da || (db == da && (lo & 1u))) code = lo + 1;
  return code | (sign << 15);
}

/* ---- reference element reads -------------------------------------------------------------- */

static uint64_t ref_raw(const uint8_t *buf, int64_t bit, int bits) {
  uint64_t v = 0;
  for (int b = 0; b < bits; b++) {
    int64_t at = bit + b;
    v |= (uint64_t)((buf[at / 8] >> (at % 8)) & 1) << b;
  }
  return v;
}

static float ref_value(int dtype, uint64_t raw) {
  const HurrayDTypeInfo *info = hurray_dtype_info(dtype);
  int bits = info->bits;
  switch (dtype) {
    case HURRAY_DTYPE_FLOAT16: return ref_half((uint32_t)raw);
    case HURRAY_DTYPE_BFLOAT16: return ref_bf16((uint32_t)raw);
    case HURRAY_DTYPE_FLOAT32: {
      uint32_t u = (uint32_t)raw;
      float f;
      memcpy(&f, &u, 4);
      return f;
    }
    case HURRAY_DTYPE_FLOAT64: {
      double d;
      memcpy(&d, &raw, 8);
      return (float)d;
    }
    case HURRAY_DTYPE_FLOAT8_E4M3FN: /* S.1111.111 NaN */
      if ((raw & 0x7F) == 0x7F) return nan_of((int)(raw >> 7));
      return ref_fields((uint32_t)raw >> 7, ((uint32_t)raw >> 3) & 15, (uint32_t)raw & 7, 3, 7);
    case HURRAY_DTYPE_FLOAT8_E5M2:
      if (((raw >> 2) & 31) == 31) {
        return (raw & 3) ? nan_of((int)(raw >> 7)) : (raw >> 7 ? -1.0f : 1.0f) / 0.0f;
      }
      return ref_fields((uint32_t)raw >> 7, ((uint32_t)raw >> 2) & 31, (uint32_t)raw & 3, 2, 15);
    case HURRAY_DTYPE_FLOAT8_E8M0FNU:
      return raw == 0xFF ? nan_of(0) : ref_pow2((int)raw - 127);
    case HURRAY_DTYPE_FLOAT6_E2M3FN:
      return ref_fields((uint32_t)raw >> 5, ((uint32_t)raw >> 3) & 3, (uint32_t)raw & 7, 3, 1);
    case HURRAY_DTYPE_FLOAT4_E2M1FN:
      return ref_fields((uint32_t)raw >> 3, ((uint32_t)raw >> 1) & 3, (uint32_t)raw & 1, 1, 1);
    default: break;
  }
  if (info->kind == HURRAY_KIND_SIGNED && bits < 64 && (raw >> (bits - 1)) & 1) {
    return (float)((int64_t)raw - (int64_t)((uint64_t)1 << bits));
  }
  return (float)raw;
}

static int same_float(float a, float b) {
  if (a != a) return b != b;
  return memcmp(&a, &b, sizeof a) == 0;
}

/* ---- test tensors ------------------------------------------------------------------------- */

typedef struct Arr {
  int dtype;
  int ndim;
  int64_t shape[4];
  int64_t strides[4];
  uint64_t byte_offset;
  uint32_t buffer;
} Arr;

static uint64_t rng_state = 0x9E3779B97F4A7C15u;
static uint64_t rng(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

/* The element of `a` at logical index idx in `buf`, by the spec's formula. */
static float ref_at(const uint8_t *buf, const Arr *a, const int64_t *idx) {
  int bits = hurray_dtype_info(a->dtype)->bits;
  int64_t e = 0;
  for (int k = 0; k < a->ndim; k++) e += idx[k] * a->strides[k];
  return ref_value(a->dtype, ref_raw(buf, (int64_t)a->byte_offset * 8 + e * bits, bits));
}

/* Strides for `a` in its own buffer: row-major, or reversed along dimension `flip` (the
 * element (0..) then sits at the far end: byte_offset moves there), padded by `pad` elements
 * per row. Returns the bytes the buffer needs. */
static uint64_t lay_out(Arr *a, int flip, int64_t pad) {
  int bits = hurray_dtype_info(a->dtype)->bits;
  int64_t s = 1;
  for (int k = a->ndim - 1; k >= 0; k--) {
    a->strides[k] = s;
    s *= a->shape[k] + (k == a->ndim - 1 ? pad : 0);
  }
  int64_t elems = s, start = 0;
  if (flip >= 0 && flip < a->ndim) {
    start = (a->shape[flip] - 1) * a->strides[flip];
    a->strides[flip] = -a->strides[flip];
  }
  /* byte_offset must be a whole byte: pad the start up to one */
  int64_t per_byte = bits == 6 ? 4 : bits < 8 ? 8 / bits : 1; /* elements in whole bytes */
  start = (start + per_byte - 1) / per_byte * per_byte;
  a->byte_offset = (uint64_t)(start * bits / 8);
  return (uint64_t)((elems + start + per_byte) * bits / 8 + 8);
}

typedef struct Case {
  int layout, axis;
  int64_t block_size;
  int ndim;
  int64_t shape[4];
  int vdtype, sdtype, zdtype; /* zdtype 0: no third part */
} Case;

static void run_case(const Case *c, int flip, int64_t pad, int out_dtype) {
  Arr arrs[3] = {{0}};
  int nparts = c->layout == HURRAY_LAYOUT_DENSE ? 1 : c->zdtype ? 3 : 2;
  arrs[0].dtype = c->vdtype;
  arrs[0].ndim = c->ndim;
  memcpy(arrs[0].shape, c->shape, sizeof c->shape);
  for (int i = 1; i < nparts; i++) {
    Arr *s = &arrs[i];
    s->dtype = i == 1 ? c->sdtype : c->zdtype;
    if (c->layout == HURRAY_LAYOUT_PER_CHANNEL) {
      s->ndim = 1;
      s->shape[0] = c->shape[c->axis];
    } else {
      s->ndim = c->ndim;
      for (int k = 0; k < c->ndim; k++) {
        s->shape[k] = k == c->axis ? (c->shape[k] + c->block_size - 1) / c->block_size
                                   : c->shape[k];
      }
    }
  }
  HurrayBufferList *list = NULL;
  assert_int_equal(hurray_buffer_list_create(3, &list, NULL), HURRAY_OK);
  HurrayArray parts[3];
  for (int i = 0; i < nparts; i++) {
    uint64_t size = lay_out(&arrs[i], i == 0 ? flip : -1, i == 0 ? pad : 0);
    HurrayBuffer *b = NULL;
    assert_int_equal(hurray_buffer_alloc(size, 0, 0, &b, NULL), HURRAY_OK);
    uint8_t *bytes = b->data;
    for (uint64_t k = 0; k < size; k++) bytes[k] = (uint8_t)rng();
    if (i > 0 && hurray_dtype_info(arrs[i].dtype)->kind == HURRAY_KIND_FLOAT &&
        arrs[i].dtype != HURRAY_DTYPE_FLOAT8_E8M0FNU) {
      /* moderate scales: a random exponent would make the outputs mostly inf and 0 */
      for (uint64_t k = 0; k < size; k++) {
        if (arrs[i].dtype == HURRAY_DTYPE_FLOAT32 && k % 4 == 3) bytes[k] = (uint8_t)(0x3C + rng() % 4);
        if ((arrs[i].dtype == HURRAY_DTYPE_FLOAT16 || arrs[i].dtype == HURRAY_DTYPE_BFLOAT16) && k % 2 == 1) {
          bytes[k] = (uint8_t)((arrs[i].dtype == HURRAY_DTYPE_FLOAT16 ? 0x30 : 0x3C) + rng() % 8);
        }
      }
    }
    arrs[i].buffer = (uint32_t)i;
    assert_int_equal(hurray_buffer_list_append(list, b, HURRAY_ROLE_MIXED, NULL, NULL), HURRAY_OK);
    parts[i] = (HurrayArray){.byte_offset = arrs[i].byte_offset, .shape = arrs[i].shape,
                             .strides = arrs[i].strides, .ndim = arrs[i].ndim,
                             .buffer = (uint32_t)i, .dtype = (uint8_t)arrs[i].dtype};
  }
  HurrayTensorDesc t = {.layout = (uint32_t)c->layout, .ndim = c->ndim,
                        .axis = c->layout == HURRAY_LAYOUT_DENSE ? 0 : c->axis,
                        .block_size = c->layout == HURRAY_LAYOUT_BLOCK ? c->block_size : 0,
                        .shape = c->shape, .parts = parts, .nparts = (uint32_t)nparts,
                        .dtype = (uint8_t)c->vdtype};
  HurrayError error = {0};
  assert_int_equal(hurray_tensor_validate(&t, list, 0, &error), HURRAY_OK);
  HurrayBuffer *out = NULL;
  int status = hurray_dequantize_buffer(&t, list, out_dtype, &out, &error);
  if (status != HURRAY_OK) fail_msg("%s", error.message);
  /* into caller memory one element past a 16-byte boundary: the same bytes */
  const size_t bytes = (size_t)out->desc.byte_size;
  const size_t item = out_dtype == HURRAY_DTYPE_FLOAT32 ? 4 : 2;
  uint8_t *memory = aligned_alloc(16, (bytes + item + 15) / 16 * 16);
  assert_non_null(memory);
  assert_int_equal(hurray_dequantize(&t, list, out_dtype, memory + item, bytes, &error), HURRAY_OK);
  assert_memory_equal(memory + item, out->data, bytes);
  free(memory);

  int64_t numel = 1;
  for (int k = 0; k < c->ndim; k++) numel *= c->shape[k];
  int64_t idx[4] = {0};
  for (int64_t flat = 0; flat < numel; flat++) {
    int64_t r = flat;
    for (int k = c->ndim - 1; k >= 0; k--) {
      idx[k] = r % c->shape[k];
      r /= c->shape[k];
    }
    float x = ref_at(list->buffers[0]->data, &arrs[0], idx);
    if (nparts > 1) {
      int64_t sidx[4];
      if (c->layout == HURRAY_LAYOUT_PER_CHANNEL) {
        sidx[0] = idx[c->axis];
      } else {
        for (int k = 0; k < c->ndim; k++) sidx[k] = k == c->axis ? idx[k] / c->block_size : idx[k];
      }
      float s = ref_at(list->buffers[1]->data, &arrs[1], sidx);
      float z = nparts > 2 ? ref_at(list->buffers[2]->data, &arrs[2], sidx) : 0.0f;
      if (c->layout == HURRAY_LAYOUT_PER_CHANNEL) {
        x = nparts > 2 ? (x - z) * s : x * s;
      } else {
        x = nparts > 2 ? x * s + z : x * s;
      }
    }
    float got;
    if (out_dtype == HURRAY_DTYPE_FLOAT32) {
      memcpy(&got, (uint8_t *)out->data + 4 * flat, 4);
    } else {
      uint16_t h;
      memcpy(&h, (uint8_t *)out->data + 2 * flat, 2);
      if (x != x) {
        got = out_dtype == HURRAY_DTYPE_FLOAT16 ? ref_half(h) : ref_bf16(h);
      } else {
        uint32_t want = out_dtype == HURRAY_DTYPE_FLOAT16 ? ref_encode(ref_half, 0x7C00, x)
                                                          : ref_encode(ref_bf16, 0x7F80, x);
        if (h != want) {
          fail_msg("layout %d v %d s %d out %d element %lld: %g -> 0x%04x, want 0x%04x",
                   c->layout, c->vdtype, c->sdtype, out_dtype, (long long)flat, (double)x, h,
                   want);
        }
        continue;
      }
    }
    if (!same_float(got, x)) {
      fail_msg("layout %d v %d s %d z %d axis %d flip %d element %lld: %.9g, want %.9g",
               c->layout, c->vdtype, c->sdtype, c->zdtype, c->axis, flip, (long long)flat,
               (double)got, (double)x);
    }
  }
  hurray_buffer_destroy(out);
  hurray_buffer_list_destroy(list);
}

/* Appends a new CPU buffer of `size` bytes holding a copy of `data` (`bytes` of it). */
static void append_copy(HurrayBufferList *list, const void *data, size_t bytes, uint64_t size,
                        int role) {
  HurrayBuffer *b = NULL;
  assert_int_equal(hurray_buffer_alloc(size, 0, 0, &b, NULL), HURRAY_OK);
  if (bytes > 0) memcpy(b->data, data, bytes);
  assert_int_equal(hurray_buffer_list_append(list, b, role, NULL, NULL), HURRAY_OK);
}

/* ---- tests -------------------------------------------------------------------------------- */

static void dequantize_matches_reference(void **state) {
  (void)state;
  static const int values[] = {HURRAY_DTYPE_INT4, HURRAY_DTYPE_UINT4, HURRAY_DTYPE_INT2,
                               HURRAY_DTYPE_UINT2, HURRAY_DTYPE_UINT1, HURRAY_DTYPE_INT8,
                               HURRAY_DTYPE_UINT8, HURRAY_DTYPE_INT16, HURRAY_DTYPE_INT32,
                               HURRAY_DTYPE_UINT64, HURRAY_DTYPE_FLOAT16, HURRAY_DTYPE_BFLOAT16,
                               HURRAY_DTYPE_FLOAT32, HURRAY_DTYPE_FLOAT8_E4M3FN,
                               HURRAY_DTYPE_FLOAT8_E5M2, HURRAY_DTYPE_FLOAT4_E2M1FN,
                               HURRAY_DTYPE_FLOAT6_E2M3FN};
  static const int scales[] = {HURRAY_DTYPE_FLOAT32, HURRAY_DTYPE_FLOAT16, HURRAY_DTYPE_BFLOAT16,
                               HURRAY_DTYPE_FLOAT8_E8M0FNU};
  static const int zeros[] = {0, HURRAY_DTYPE_FLOAT32, HURRAY_DTYPE_INT8, HURRAY_DTYPE_UINT4};
  static const int outs[] = {HURRAY_DTYPE_FLOAT32, HURRAY_DTYPE_FLOAT16, HURRAY_DTYPE_BFLOAT16};
  int cases = 0;
  for (size_t v = 0; v < COUNT(values); v++) {
    for (int layout = 0; layout <= HURRAY_LAYOUT_BLOCK; layout++) {
      for (int axis = 0; axis < 3; axis++) {
        Case c = {.layout = layout, .axis = axis, .block_size = axis == 2 ? 32 : 3, .ndim = 3,
                  .shape = {3, 5, 70}, .vdtype = values[v],
                  .sdtype = scales[(v + (size_t)axis) % COUNT(scales)],
                  .zdtype = zeros[(v + (size_t)layout + (size_t)axis) % COUNT(zeros)]};
        int flip = (int)((v + (size_t)axis) % 4) - 1; /* -1: none */
        int64_t pad = (int64_t)(v % 3);
        run_case(&c, flip, pad, outs[(v + (size_t)layout) % COUNT(outs)]);
        cases++;
        if (layout == HURRAY_LAYOUT_DENSE) break;
      }
    }
  }
  /* rank 1, a row shorter than a chunk and one longer, block_size 1, a single block */
  Case one = {.layout = HURRAY_LAYOUT_BLOCK, .axis = 0, .block_size = 1, .ndim = 1,
              .shape = {1030}, .vdtype = HURRAY_DTYPE_INT4, .sdtype = HURRAY_DTYPE_FLOAT16,
              .zdtype = HURRAY_DTYPE_FLOAT16};
  run_case(&one, -1, 0, HURRAY_DTYPE_FLOAT32);
  one.block_size = 5000;
  run_case(&one, 0, 0, HURRAY_DTYPE_BFLOAT16);
  Case pc = {.layout = HURRAY_LAYOUT_PER_CHANNEL, .axis = 1, .ndim = 2, .shape = {2, 1500},
             .vdtype = HURRAY_DTYPE_INT8, .sdtype = HURRAY_DTYPE_FLOAT32};
  run_case(&pc, 1, 1, HURRAY_DTYPE_FLOAT16);
  /* short rows of byte codes with one scale and min each: the one-pass loop (byte_rows) */
  Case rows = {.layout = HURRAY_LAYOUT_BLOCK, .axis = 2, .block_size = 40, .ndim = 3,
               .shape = {4, 3, 40}, .vdtype = HURRAY_DTYPE_INT8, .sdtype = HURRAY_DTYPE_FLOAT16,
               .zdtype = HURRAY_DTYPE_FLOAT32};
  run_case(&rows, -1, 0, HURRAY_DTYPE_FLOAT32);
  rows.vdtype = HURRAY_DTYPE_UINT8;
  run_case(&rows, -1, 0, HURRAY_DTYPE_BFLOAT16);
  assert_true(cases > 50);
}

/* The same cases with every output written by non-temporal stores, as outputs larger than the
 * cache are (the private test hook lowers the size from which they are used to none). */
static void dequantize_streamed_matches_reference(void **state) {
  assert_int_equal(setenv("_HURRAY_TEST_STREAM_BYTES", "0", 1), 0);
  dequantize_matches_reference(state);
  assert_int_equal(unsetenv("_HURRAY_TEST_STREAM_BYTES"), 0);
}

/* §8.7: the per-channel int4 example. */
static void worked_example_per_channel(void **state) {
  (void)state;
  uint8_t values[64] = {0x21, 0x43, 0xEF, 0xCD, 0x87, 0x50};
  float scales[16] = {0.5f, 0.25f, 2.0f};
  HurrayBufferList *list = NULL;
  assert_int_equal(hurray_buffer_list_create(2, &list, NULL), HURRAY_OK);
  append_copy(list, values, sizeof values, 64, HURRAY_ROLE_VALUES);
  append_copy(list, scales, sizeof scales, 64, HURRAY_ROLE_SCALES);
  const int64_t shape[2] = {3, 4}, sshape[1] = {3};
  HurrayArray parts[2] = {{.shape = shape, .ndim = 2, .buffer = 0, .dtype = HURRAY_DTYPE_INT4},
                          {.shape = sshape, .ndim = 1, .buffer = 1, .dtype = HURRAY_DTYPE_FLOAT32}};
  HurrayTensorDesc t = {.layout = HURRAY_LAYOUT_PER_CHANNEL, .ndim = 2, .shape = shape,
                        .parts = parts, .nparts = 2, .dtype = HURRAY_DTYPE_INT4};
  float out[12];
  HurrayError error = {0};
  assert_int_equal(hurray_dequantize(&t, list, HURRAY_DTYPE_FLOAT32, out, sizeof out, &error),
                   HURRAY_OK);
  const float want[12] = {0.5f, 1.0f, 1.5f, 2.0f, -0.25f, -0.5f, -0.75f, -1.0f,
                          14.0f, -16.0f, 0.0f, 10.0f};
  for (int i = 0; i < 12; i++) assert_true(out[i] == want[i]);
  /* the values alone, unpacked */
  HurrayTensorDesc dense = {.layout = HURRAY_LAYOUT_DENSE, .ndim = 2, .shape = shape,
                            .parts = parts, .nparts = 1, .dtype = HURRAY_DTYPE_INT4};
  int8_t q[12];
  assert_int_equal(hurray_dequantize(&dense, list, HURRAY_DTYPE_INT8, q, sizeof q, &error),
                   HURRAY_OK);
  const int8_t wq[12] = {1, 2, 3, 4, -1, -2, -3, -4, 7, -8, 0, 5};
  assert_memory_equal(q, wq, sizeof q);
  /* int4 does not fit uint8 */
  assert_int_equal(hurray_dequantize(&dense, list, HURRAY_DTYPE_UINT8, q, sizeof q, &error),
                   HURRAY_EDTYPE);
  assert_non_null(strstr(error.message, "int4"));
  /* too small an output, a misaligned one */
  assert_int_equal(hurray_dequantize(&t, list, HURRAY_DTYPE_FLOAT32, out, sizeof out - 1, &error),
                   HURRAY_EINVAL);
  assert_non_null(strstr(error.message, "need 48"));
  assert_int_equal(hurray_dequantize(&t, list, HURRAY_DTYPE_FLOAT16, (uint8_t *)out + 1, 40,
                                     &error),
                   HURRAY_EALIGN);
  assert_int_equal(hurray_dequantize(&t, list, HURRAY_DTYPE_FLOAT64, out, sizeof out, &error),
                   HURRAY_EDTYPE);
  assert_non_null(strstr(error.message, "float64"));
  hurray_buffer_list_destroy(list);
}

/* §8.8: interleaved blocks in one MIXED buffer. */
static void worked_example_interleaved(void **state) {
  (void)state;
  static const uint8_t bytes[72] = {
      0x00, 0x3C, 0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE, 0x10, 0x32, 0x54, 0x76, 0x98,
      0xBA, 0xDC, 0xFE, 0x00, 0x38, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11,
      0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x00, 0x40, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
      0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0xB0, 0x87, 0x87, 0x87, 0x87,
      0x87, 0x87, 0x87, 0x87, 0x87, 0x87, 0x87, 0x87, 0x87, 0x87, 0x87, 0x87};
  HurrayBufferList *list = NULL;
  assert_int_equal(hurray_buffer_list_create(1, &list, NULL), HURRAY_OK);
  append_copy(list, bytes, sizeof bytes, 72, HURRAY_ROLE_MIXED);
  const int64_t shape[3] = {2, 2, 32}, vs[3] = {72, 36, 1};
  const int64_t sshape[3] = {2, 2, 1}, ss[3] = {18, 9, 1};
  HurrayArray parts[2] = {
      {.byte_offset = 2, .shape = shape, .strides = vs, .ndim = 3, .dtype = HURRAY_DTYPE_INT4},
      {.shape = sshape, .strides = ss, .ndim = 3, .dtype = HURRAY_DTYPE_FLOAT16}};
  HurrayTensorDesc t = {.layout = HURRAY_LAYOUT_BLOCK, .ndim = 3, .axis = 2, .block_size = 32,
                        .shape = shape, .parts = parts, .nparts = 2, .dtype = HURRAY_DTYPE_INT4};
  float out[128];
  HurrayError error = {0};
  assert_int_equal(hurray_dequantize(&t, list, HURRAY_DTYPE_FLOAT32, out, sizeof out, &error),
                   HURRAY_OK);
  assert_true(out[(1 * 2 + 1) * 32 + 1] == 1.0f);
  assert_true(out[9] == -7.0f);
  assert_true(out[(1 * 2 + 0) * 32 + 3] == -2.0f);
  assert_true(out[32 + 5] == 0.5f);
  /* the same bytes as one float16 output */
  uint16_t half[128];
  assert_int_equal(hurray_dequantize(&t, list, HURRAY_DTYPE_FLOAT16, half, sizeof half, &error),
                   HURRAY_OK);
  assert_int_equal(half[9], 0xC700); /* -7.0 */
  hurray_buffer_list_destroy(list);
}

/* A dense float32 tensor over `data` (row-major or with the given strides). */
static HurrayBufferList *float_list(const float *data, size_t count) {
  HurrayBufferList *list = NULL;
  assert_int_equal(hurray_buffer_list_create(1, &list, NULL), HURRAY_OK);
  append_copy(list, data, count * 4, count * 4, HURRAY_ROLE_VALUES);
  return list;
}

/* Dense float32 to float16 and bfloat16: ties, one below and above them, subnormals, the
 * overflow boundary and the special values, each against the nearest-code search. */
static void float_outputs_round_to_nearest_even(void **state) {
  (void)state;
  enum { N = 4096 };
  static float x[N];
  static const uint32_t low16[] = {0x1000, 0x0FFF, 0x1001, 0x0000, 0x3000, 0x8000, 0x7FFF, 0x8001};
  for (int i = 0; i < N; i++) {
    /* exponents around float16's range (2^-26 .. 2^17) and bfloat16's ties */
    uint32_t e = 101u + (uint32_t)(rng() % 44);
    uint32_t low = low16[i % COUNT(low16)];
    /* float16 drops 13 mantissa bits (a tie is 0x1000), bfloat16 16 (0x8000): the bits above
     * the pattern are random, so both parities of the kept bit occur */
    uint32_t above = (uint32_t)rng() & (low < 0x2000 ? 0x7FE000u : 0x7F0000u);
    uint32_t u = ((uint32_t)(rng() & 1) << 31) | (e << 23) | above | low;
    memcpy(&x[i], &u, 4);
  }
  const float edges[] = {65504.0f, 65519.99f, 65520.0f, -65520.0f, 0x1p-24f, 0x1p-25f,
                         0x1.8p-25f, 0x1p-26f, 0x1.ffcp-15f, 0.0f, -0.0f, 1.0f / 0.0f,
                         -1.0f / 0.0f, 3.3895314e38f, 0x1.fffffep127f};
  memcpy(x, edges, sizeof edges);
  HurrayBufferList *list = float_list(x, N);
  const int64_t shape[1] = {N};
  HurrayArray part = {.shape = shape, .ndim = 1, .dtype = HURRAY_DTYPE_FLOAT32};
  HurrayTensorDesc t = {.layout = HURRAY_LAYOUT_DENSE, .ndim = 1, .shape = shape, .parts = &part,
                        .nparts = 1, .dtype = HURRAY_DTYPE_FLOAT32};
  static uint16_t out[N];
  HurrayError error = {0};
  for (int f = 0; f < 2; f++) {
    int dtype = f == 0 ? HURRAY_DTYPE_FLOAT16 : HURRAY_DTYPE_BFLOAT16;
    assert_int_equal(hurray_dequantize(&t, list, dtype, out, sizeof out, &error), HURRAY_OK);
    for (int i = 0; i < N; i++) {
      uint32_t want = f == 0 ? ref_encode(ref_half, 0x7C00, x[i]) : ref_encode(ref_bf16, 0x7F80, x[i]);
      if (out[i] != want) fail_msg("%s of %a: 0x%04x, want 0x%04x", f ? "bfloat16" : "float16",
                                   (double)x[i], out[i], want);
    }
  }
  /* NaN stays NaN */
  float *data = list->buffers[0]->data;
  data[0] = 0.0f / 0.0f;
  assert_int_equal(hurray_dequantize(&t, list, HURRAY_DTYPE_FLOAT16, out, sizeof out, &error), HURRAY_OK);
  assert_true((out[0] & 0x7C00) == 0x7C00 && (out[0] & 0x3FF) != 0);
  assert_int_equal(hurray_dequantize(&t, list, HURRAY_DTYPE_BFLOAT16, out, sizeof out, &error), HURRAY_OK);
  assert_true((out[0] & 0x7F80) == 0x7F80 && (out[0] & 0x7F) != 0);
  hurray_buffer_list_destroy(list);
}

static float ref_round_even(float y) {
  int64_t i = (int64_t)y;
  float frac = y - (float)i;
  if (frac > 0.5f || (frac == 0.5f && (i & 1))) i++;
  if (frac < -0.5f || (frac == -0.5f && (i & 1))) i--;
  return (float)i;
}

static void quantize_one(int layout, int axis, int64_t block_size, int dtype, int sdtype,
                         int transposed) {
  enum { R = 6, C = 70 };
  float x[R * C];
  for (int i = 0; i < R * C; i++) x[i] = (float)((int64_t)(rng() % 20001) - 10000) / 997.0f;
  for (int i = 0; i < C; i++) x[2 * C + i] = 0.0f; /* a row of zeros */
  x[5] = 0.5f * 3.0f; /* ties come from exact values below */
  HurrayBufferList *list = float_list(x, R * C);
  /* logical shape [R, C], or its transpose [C, R] over the same memory */
  const int64_t shape[2] = {R, C}, tshape[2] = {C, R}, tstrides[2] = {1, C};
  HurrayArray part = {.shape = transposed ? tshape : shape, .strides = transposed ? tstrides : NULL,
                      .ndim = 2, .dtype = HURRAY_DTYPE_FLOAT32};
  HurrayTensorDesc t = {.layout = HURRAY_LAYOUT_DENSE, .ndim = 2, .shape = part.shape,
                        .parts = &part, .nparts = 1, .dtype = HURRAY_DTYPE_FLOAT32};
  HurrayQuantizeOptions o = {.layout = (uint32_t)layout, .axis = axis,
                             .block_size = block_size, .dtype = (uint8_t)dtype,
                             .scale_dtype = (uint8_t)sdtype};
  HurrayError error = {0};
  HurrayTensorContext *ctx = NULL;
  if (hurray_quantize_new(&t, list, &o, &ctx, &error) != HURRAY_OK) fail_msg("%s", error.message);
  const HurrayTensorDesc *q = ctx->tensor;
  const HurrayBufferList *qb = ctx->buffers;
  const float qmax = dtype == HURRAY_DTYPE_INT4 ? 7.0f : 127.0f;
  int64_t rows = part.shape[0], cols = part.shape[1];
  int64_t groups_shape[2] = {rows, cols};
  int64_t bs = layout == HURRAY_LAYOUT_BLOCK ? block_size : 1;
  groups_shape[axis] = layout == HURRAY_LAYOUT_BLOCK ? (part.shape[axis] + bs - 1) / bs
                                                     : part.shape[axis];
  float out[R * C];
  assert_int_equal(hurray_dequantize(q, qb, HURRAY_DTYPE_FLOAT32, out, sizeof out, &error),
                   HURRAY_OK);
  for (int64_t i = 0; i < rows; i++) {
    for (int64_t j = 0; j < cols; j++) {
      int64_t g[2] = {i, j};
      float xv = transposed ? x[j * C + i] : x[i * C + j];
      /* the group's amax, by brute force */
      float amax = 0.0f;
      for (int64_t a = 0; a < rows; a++) {
        for (int64_t b = 0; b < cols; b++) {
          int64_t h[2] = {a, b};
          int same = layout == HURRAY_LAYOUT_PER_CHANNEL ? h[axis] == g[axis]
                     : h[axis] / bs == g[axis] / bs && h[1 - axis] == g[1 - axis];
          float v = transposed ? x[b * C + a] : x[a * C + b];
          if (same && (v < 0 ? -v : v) > amax) amax = v < 0 ? -v : v;
        }
      }
      float s = amax / qmax;
      uint64_t sidx = layout == HURRAY_LAYOUT_PER_CHANNEL
                          ? (uint64_t)g[axis]
                          : (uint64_t)((axis == 0 ? i / bs : i) * groups_shape[1] +
                                       (axis == 1 ? j / bs : j));
      const uint8_t *sp = qb->buffers[1]->data;
      if (sdtype == HURRAY_DTYPE_FLOAT32) {
        float got;
        memcpy(&got, sp + 4 * sidx, 4);
        assert_true(same_float(got, s));
      } else {
        uint16_t h;
        memcpy(&h, sp + 2 * sidx, 2);
        uint32_t want = sdtype == HURRAY_DTYPE_FLOAT16 ? ref_encode(ref_half, 0x7C00, s)
                                                       : ref_encode(ref_bf16, 0x7F80, s);
        assert_int_equal(h, want);
        s = sdtype == HURRAY_DTYPE_FLOAT16 ? ref_half(h) : ref_bf16(h);
      }
      float qv = s == 0.0f ? 0.0f : ref_round_even(xv / s);
      if (qv > qmax) qv = qmax;
      if (qv < -qmax) qv = -qmax;
      uint64_t flat = (uint64_t)(i * cols + j);
      const uint8_t *vp = qb->buffers[0]->data;
      float stored = dtype == HURRAY_DTYPE_INT8
                         ? ref_value(HURRAY_DTYPE_INT8, vp[flat])
                         : ref_value(HURRAY_DTYPE_INT4, (vp[flat / 2] >> (4 * (flat % 2))) & 15);
      if (stored != qv) {
        fail_msg("layout %d axis %d element (%lld, %lld): %g / %g stored %g, want %g", layout,
                 axis, (long long)i, (long long)j, (double)xv, (double)s, (double)stored,
                 (double)qv);
      }
      assert_true(same_float(out[flat], qv * s));
      float err = out[flat] - xv;
      assert_true((err < 0 ? -err : err) <= s * 0.5f * 1.01f + 1e-6f);
    }
  }
  hurray_tensor_context_release(ctx);
  hurray_buffer_list_destroy(list);
}

static void quantize_matches_reference(void **state) {
  (void)state;
  static const int sdtypes[] = {HURRAY_DTYPE_FLOAT32, HURRAY_DTYPE_FLOAT16, HURRAY_DTYPE_BFLOAT16};
  for (int tr = 0; tr < 2; tr++) {
    for (int axis = 0; axis < 2; axis++) {
      for (size_t s = 0; s < COUNT(sdtypes); s++) {
        quantize_one(HURRAY_LAYOUT_PER_CHANNEL, axis, 0, HURRAY_DTYPE_INT4, sdtypes[s], tr);
        quantize_one(HURRAY_LAYOUT_PER_CHANNEL, axis, 0, HURRAY_DTYPE_INT8, sdtypes[s], tr);
        quantize_one(HURRAY_LAYOUT_BLOCK, axis, 32, HURRAY_DTYPE_INT4, sdtypes[s], tr);
        quantize_one(HURRAY_LAYOUT_BLOCK, axis, 4, HURRAY_DTYPE_INT8, sdtypes[s], tr);
      }
    }
  }
}

static void quantize_refuses(void **state) {
  (void)state;
  float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  HurrayBufferList *list = float_list(x, 8);
  const int64_t shape[2] = {2, 4};
  HurrayArray part = {.shape = shape, .ndim = 2, .dtype = HURRAY_DTYPE_FLOAT32};
  HurrayTensorDesc t = {.layout = HURRAY_LAYOUT_DENSE, .ndim = 2, .shape = shape, .parts = &part,
                        .nparts = 1, .dtype = HURRAY_DTYPE_FLOAT32};
  HurrayQuantizeOptions o = {.layout = HURRAY_LAYOUT_PER_CHANNEL, .dtype = HURRAY_DTYPE_INT4,
                             .scale_dtype = HURRAY_DTYPE_FLOAT32};
  HurrayError error = {0};
  uint64_t vb = 0, sb = 0;
  assert_int_equal(hurray_quantize_sizes(2, shape, &o, &vb, &sb, &error), HURRAY_OK);
  assert_int_equal(vb, 4);
  assert_int_equal(sb, 8);
  uint8_t values[8];
  float scales[2];
  assert_int_equal(hurray_quantize(&t, list, &o, values, 3, scales, 8, &error), HURRAY_EINVAL);
  o.dtype = HURRAY_DTYPE_UINT4;
  assert_int_equal(hurray_quantize(&t, list, &o, values, 4, scales, 8, &error), HURRAY_EDTYPE);
  assert_non_null(strstr(error.message, "uint4"));
  o.dtype = HURRAY_DTYPE_INT8;
  o.axis = 2;
  assert_int_equal(hurray_quantize(&t, list, &o, values, 8, scales, 8, &error), HURRAY_ELAYOUT);
  o.axis = 0;
  o.block_size = 2;
  assert_int_equal(hurray_quantize(&t, list, &o, values, 8, scales, 8, &error), HURRAY_ELAYOUT);
  o.block_size = 0;
  o.reserved[0] = 1;
  assert_int_equal(hurray_quantize(&t, list, &o, values, 8, scales, 8, &error), HURRAY_EINVAL);
  o.reserved[0] = 0;
  o.layout = HURRAY_LAYOUT_SPARSE_COO;
  assert_int_equal(hurray_quantize(&t, list, &o, values, 8, scales, 8, &error), HURRAY_ELAYOUT);
  o.layout = HURRAY_LAYOUT_PER_CHANNEL;
  float *data = list->buffers[0]->data;
  data[6] = 0.0f / 0.0f;
  assert_int_equal(hurray_quantize(&t, list, &o, values, 8, scales, 8, &error), HURRAY_EINVAL);
  assert_non_null(strstr(error.message, "element 6 is NaN"));
  data[6] = 1e30f;
  o.scale_dtype = HURRAY_DTYPE_FLOAT16;
  assert_int_equal(hurray_quantize(&t, list, &o, values, 8, scales, 8, &error), HURRAY_EINVAL);
  assert_non_null(strstr(error.message, "float16"));
  /* an integer tensor is not quantised */
  part.dtype = t.dtype = HURRAY_DTYPE_INT32;
  assert_int_equal(hurray_quantize(&t, list, &o, values, 8, scales, 8, &error), HURRAY_EDTYPE);
  hurray_buffer_list_destroy(list);
}

static void kernels_refuse(void **state) {
  (void)state;
  HurrayBufferList *list = NULL;
  assert_int_equal(hurray_buffer_list_create(1, &list, NULL), HURRAY_OK);
  HurrayBufferDesc desc = {.device_tag = HURRAY_DEVICE_CUDA, .memory_class = HURRAY_MEM_DEVICE,
                           .sync_mode = HURRAY_SYNC_READY, .alignment = 64, .byte_size = 64};
  HurrayBuffer *b = NULL;
  assert_int_equal(hurray_buffer_wrap((void *)(uintptr_t)0x10000, &desc, 0, NULL, 0, NULL, NULL,
                                      &b, NULL),
                   HURRAY_OK);
  assert_int_equal(hurray_buffer_list_append(list, b, HURRAY_ROLE_VALUES, NULL, NULL), HURRAY_OK);
  const int64_t shape[1] = {16};
  HurrayArray part = {.shape = shape, .ndim = 1, .dtype = HURRAY_DTYPE_INT4};
  HurrayTensorDesc t = {.layout = HURRAY_LAYOUT_DENSE, .ndim = 1, .shape = shape, .parts = &part,
                        .nparts = 1, .dtype = HURRAY_DTYPE_INT4};
  HurrayError error = {0};
  float out[16];
  assert_int_equal(hurray_dequantize(&t, list, HURRAY_DTYPE_FLOAT32, out, sizeof out, &error),
                   HURRAY_EUNSUPPORTED);
  assert_non_null(strstr(error.message, "cuda"));
  assert_int_equal(hurray_dequantize(NULL, list, HURRAY_DTYPE_FLOAT32, out, sizeof out, &error),
                   HURRAY_EINVAL);
  HurrayBuffer *made = NULL;
  assert_int_equal(hurray_dequantize_buffer(&t, list, HURRAY_DTYPE_FLOAT32, &made, &error),
                   HURRAY_EUNSUPPORTED);
  assert_null(made);
  hurray_buffer_list_destroy(list);
  /* bool values have no number; an empty tensor needs no output */
  float f[4] = {0};
  list = float_list(f, 4);
  part.dtype = t.dtype = HURRAY_DTYPE_BOOL;
  assert_int_equal(hurray_dequantize(&t, list, HURRAY_DTYPE_FLOAT32, out, sizeof out, &error),
                   HURRAY_EDTYPE);
  part.dtype = t.dtype = HURRAY_DTYPE_FLOAT32;
  const int64_t empty[1] = {0};
  part.shape = t.shape = empty;
  assert_int_equal(hurray_dequantize(&t, list, HURRAY_DTYPE_FLOAT32, NULL, 0, &error), HURRAY_OK);
  assert_int_equal(hurray_dequantize_buffer(&t, list, HURRAY_DTYPE_BFLOAT16, &made, &error),
                   HURRAY_OK);
  assert_int_equal(made->desc.byte_size, 0);
  hurray_buffer_destroy(made);
  hurray_buffer_list_destroy(list);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(dequantize_matches_reference),
      cmocka_unit_test(dequantize_streamed_matches_reference),
      cmocka_unit_test(worked_example_per_channel),
      cmocka_unit_test(worked_example_interleaved),
      cmocka_unit_test(float_outputs_round_to_nearest_even),
      cmocka_unit_test(quantize_matches_reference),
      cmocka_unit_test(quantize_refuses),
      cmocka_unit_test(kernels_refuse),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
