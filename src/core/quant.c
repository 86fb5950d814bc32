/* quant.c -- the quantisation kernels (ADR-085, buffer-protocol.md §8.9): dequantisation of
 * DENSE, PER_CHANNEL and BLOCK tensors to float32, float16 or bfloat16, unpacking of packed
 * integers to int8/uint8, and symmetric round-to-nearest quantisation to int4/int8.
 *
 * Every kernel walks its tensor row by row along the last logical dimension: a row of values is
 * decoded to float32 (fast paths for contiguous and byte-strided elements, a generic reader for
 * any other stride), its scales, zero points or mins are applied -- one per row, one per block
 * of the row, or one per element --, and the row is stored in the output dtype. Arithmetic is
 * float32, each operation rounded to nearest even (no fused multiply-add: the library is built
 * as ISO C11, which leaves contraction off). */
#include <stdlib.h>
#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>
#endif
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "internal.h"

#define ROW_CHUNK 512 /* elements decoded at once */

/* Kept out of its caller: inlined, a specialised row loop costs the walker's general loops
 * registers (measured: int4 per channel 13 % slower). */
#if defined(__GNUC__)
#define NOINLINE __attribute__((noinline))
#else
#define NOINLINE
#endif

/* ---- scalar conversions -------------------------------------------------------------------- */

static inline float f32_of_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline uint32_t bits_of_f32(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static inline float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t em = h & 0x7FFFu;
  if (em >= 0x7C00u) return f32_of_bits(sign | 0x7F800000u | ((em & 0x3FFu) << 13));
  if (em >= 0x0400u) return f32_of_bits(sign | ((em << 13) + 0x38000000u));
  return f32_of_bits(sign | bits_of_f32((float)em * 0x1p-24f)); /* subnormal: exact */
}

/* Round to nearest even; NaN becomes the quiet NaN 0x7E00 of its sign. */
static inline uint16_t f32_to_f16(float f) {
  uint32_t x = bits_of_f32(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7FFFFFFFu;
  uint32_t o;
  if (x >= 0x47800000u) { /* 2^16 and above, inf, NaN */
    o = x > 0x7F800000u ? 0x7E00u : 0x7C00u;
  } else if (x < 0x38800000u) { /* below 2^-14: the addition rounds to the subnormal grid */
    const uint32_t magic = 0x3F000000u; /* 0.5: its ulp is 2^-24 */
    o = bits_of_f32(f32_of_bits(x) + f32_of_bits(magic)) - magic;
  } else {
    uint32_t odd = (x >> 13) & 1u;
    x += 0xC8000FFFu + odd; /* rebias the exponent by -112 and round */
    o = x >> 13;
  }
  return (uint16_t)(o | sign);
}

static inline float bf16_to_f32(uint16_t h) { return f32_of_bits((uint32_t)h << 16); }

static inline uint16_t f32_to_bf16(float f) {
  uint32_t x = bits_of_f32(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((x >> 16) | 0x40u);
  x += 0x7FFFu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

/* roundTiesToEven of |y| < 2^22 (adding 1.5 * 2^23 leaves no fraction bits). */
static inline float round_even(float y) {
  const float magic = 0x1.8p23f;
  return (y + magic) - magic;
}

/* ---- the float value of every code of a dtype of at most 8 bits ---------------------------- */

static float pow2(int e) {
  float p = 1.0f;
  for (; e > 0; e--) p *= 2.0f;
  for (; e < 0; e++) p *= 0.5f;
  return p;
}

enum { MF_IEEE, MF_FN, MF_FNUZ, MF_FINITE, MF_E8M0 };
typedef struct MiniFloat {
  uint8_t code, ebits, mbits, bias, special;
} MiniFloat;
/* dtypes.md §4: sign, exponent and mantissa bits, bias, and where the NaNs and infinities are */
static const MiniFloat kMiniFloats[] = {
    {HURRAY_DTYPE_FLOAT8_E4M3FN, 4, 3, 7, MF_FN},
    {HURRAY_DTYPE_FLOAT8_E5M2, 5, 2, 15, MF_IEEE},
    {HURRAY_DTYPE_FLOAT8_E4M3FNUZ, 4, 3, 8, MF_FNUZ},
    {HURRAY_DTYPE_FLOAT8_E5M2FNUZ, 5, 2, 16, MF_FNUZ},
    {HURRAY_DTYPE_FLOAT8_E8M0FNU, 8, 0, 127, MF_E8M0},
    {HURRAY_DTYPE_FLOAT8_E3M4, 3, 4, 3, MF_IEEE},
    {HURRAY_DTYPE_FLOAT8_E4M3, 4, 3, 7, MF_IEEE},
    {HURRAY_DTYPE_FLOAT8_E4M3B11FNUZ, 4, 3, 11, MF_FNUZ},
    {HURRAY_DTYPE_FLOAT6_E2M3FN, 2, 3, 1, MF_FINITE},
    {HURRAY_DTYPE_FLOAT6_E3M2FN, 3, 2, 3, MF_FINITE},
    {HURRAY_DTYPE_FLOAT4_E2M1FN, 2, 1, 1, MF_FINITE},
};

static float minifloat_value(const MiniFloat *m, uint32_t c) {
  if (m->special == MF_E8M0) return c == 0xFFu ? f32_of_bits(0x7FC00000u) : pow2((int)c - 127);
  uint32_t emask = (1u << m->ebits) - 1, mmask = (1u << m->mbits) - 1;
  uint32_t sign = (c >> (m->ebits + m->mbits)) & 1u;
  uint32_t e = (c >> m->mbits) & emask, man = c & mmask;
  float v;
  if ((m->special == MF_FNUZ && c == 0x80u) ||
      (m->special == MF_FN && e == emask && man == mmask) ||
      (m->special == MF_IEEE && e == emask && man != 0)) {
    return f32_of_bits(sign ? 0xFFC00000u : 0x7FC00000u);
  }
  if (m->special == MF_IEEE && e == emask) {
    v = f32_of_bits(0x7F800000u);
  } else if (e == 0) {
    v = (float)man * pow2(1 - (int)m->bias - (int)m->mbits);
  } else {
    v = (float)(man + (1u << m->mbits)) * pow2((int)e - (int)m->bias - (int)m->mbits);
  }
  return sign ? -v : v;
}

/* lut[c] for every code c of a dtype of at most 8 bits (integers and minifloats). */
static void small_lut(const HurrayDTypeInfo *info, float *lut) {
  uint32_t codes = 1u << info->bits;
  const MiniFloat *mf = NULL;
  for (size_t i = 0; i < sizeof kMiniFloats / sizeof kMiniFloats[0]; i++) {
    if (kMiniFloats[i].code == info->code) mf = &kMiniFloats[i];
  }
  for (uint32_t c = 0; c < codes; c++) {
    if (mf != NULL) {
      lut[c] = minifloat_value(mf, c);
    } else if (info->kind == HURRAY_KIND_SIGNED) {
      uint32_t half = codes >> 1;
      lut[c] = (float)((int32_t)(c ^ half) - (int32_t)half);
    } else {
      lut[c] = (float)c; /* unsigned integers */
    }
  }
}

/* ---- reading one part -------------------------------------------------------------------- */

typedef struct Part {
  const uint8_t *data;
  int64_t bit0;                      /* bit of element (0, ..., 0) */
  int64_t strides[HURRAY_MAX_NDIM];  /* in elements */
  int32_t ndim;
  uint8_t dtype, bits, kind;
  float lut[256];     /* bits <= 8 */
  float pair[256][2]; /* bits == 4: the two elements of each byte, low nibble first */
} Part;

static inline uint64_t load_le(const uint8_t *p, int bytes) {
  switch (bytes) { /* the widths of the dtypes, each one load */
    case 1: return p[0];
    case 2: return hurray__load_le16(p);
    case 4: return hurray__load_le32(p);
    case 8: return hurray__load_le64(p);
    default: break;
  }
  uint64_t v = 0;
  for (int i = 0; i < bytes; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* The raw code of the element at `bit`. Of the sub-byte dtypes only the 6-bit floats cross a
 * byte boundary, and then the next byte is the element's own (inside the validated span). */
static inline uint64_t part_raw(const Part *p, int64_t bit) {
  const uint8_t *b = p->data + (bit >> 3);
  if (p->bits < 8) {
    unsigned shift = (unsigned)(bit & 7), v = b[0];
    if (shift + p->bits > 8) v |= (unsigned)b[1] << 8;
    return (uint64_t)(v >> shift) & ((1u << p->bits) - 1);
  }
  return load_le(b, p->bits / 8);
}

static inline int64_t sign_extend(uint64_t raw, int bits) {
  if (bits == 64) {
    int64_t v;
    memcpy(&v, &raw, sizeof v);
    return v;
  }
  uint64_t half = (uint64_t)1 << (bits - 1);
  return (int64_t)(raw ^ half) - (int64_t)half;
}

static inline float part_float(const Part *p, int64_t bit) {
  uint64_t raw = part_raw(p, bit);
  if (p->bits <= 8) return p->lut[raw];
  switch (p->dtype) {
    case HURRAY_DTYPE_FLOAT16: return f16_to_f32((uint16_t)raw);
    case HURRAY_DTYPE_BFLOAT16: return bf16_to_f32((uint16_t)raw);
    case HURRAY_DTYPE_FLOAT32: return f32_of_bits((uint32_t)raw);
    case HURRAY_DTYPE_FLOAT64: {
      double d;
      memcpy(&d, &raw, sizeof d);
      return (float)d;
    }
    default: break;
  }
  return p->kind == HURRAY_KIND_SIGNED ? (float)sign_extend(raw, p->bits) : (float)raw;
}

/* The integer whose `bits`-bit code is `code`, as float32: `half` is 2^(bits-1) for a signed
 * dtype (two's complement by xor and subtraction, which vectorises), 0 for an unsigned one. */
static inline float int_of_code(unsigned code, int32_t half) {
  return (float)((int32_t)(code ^ (unsigned)half) - half);
}

/* dst[k] = element at bit + k * stride elements, for k < len, as float32. */
static inline void decode_row(const Part *p, int64_t bit, int64_t stride, int64_t len,
                              float *dst) {
  const int bits = p->bits;
  int64_t k = 0;
  if (bits < 8 && stride == 1) {
    for (; k < len && (bit & 7) != 0; k++, bit += bits) dst[k] = p->lut[part_raw(p, bit)];
    const uint8_t *b = p->data + (bit >> 3);
    if (bits == 4 && p->kind != HURRAY_KIND_FLOAT) { /* by arithmetic, which vectorises */
      int64_t pairs = (len - k) / 2;
      if (pairs > ROW_CHUNK / 2) pairs = ROW_CHUNK / 2;
      uint8_t q[ROW_CHUNK];
      for (int64_t i = 0; i < pairs; i++) {
        q[2 * i] = b[i] & 0x0F;
        q[2 * i + 1] = b[i] >> 4;
      }
      const int32_t half = p->kind == HURRAY_KIND_SIGNED ? 8 : 0;
      float *d = dst + k;
      for (int64_t i = 0; i < 2 * pairs; i++) {
        d[i] = int_of_code(q[i], half);
      }
      k += 2 * pairs;
      bit += 8 * pairs;
    } else if (bits == 4) { /* the 4-bit floats, a byte at a time: one 8-byte load and store */
      int64_t pairs = (len - k) / 2;
      float *d = dst + k;
      for (int64_t i = 0; i < pairs; i++) memcpy(d + 2 * i, p->pair[b[i]], sizeof p->pair[0]);
      k += 2 * pairs;
      bit += 8 * pairs;
    }
    for (; k < len; k++, bit += bits) dst[k] = p->lut[part_raw(p, bit)];
    return;
  }
  if (bits < 8 && stride * bits == 8) { /* one element per byte, at the same bit */
    const uint8_t *b = p->data + (bit >> 3);
    unsigned shift = (unsigned)(bit & 7), mask = (1u << bits) - 1;
    if (p->kind == HURRAY_KIND_FLOAT) {
      for (; k < len; k++) dst[k] = p->lut[(b[k] >> shift) & mask];
    } else { /* integers by arithmetic, which vectorises (GGUF's Q4_0 halves) */
      int32_t half = p->kind == HURRAY_KIND_SIGNED ? (int32_t)(mask + 1) / 2 : 0;
      for (; k < len; k++) {
        unsigned code = ((unsigned)b[k] >> shift) & mask;
        dst[k] = int_of_code(code, half);
      }
    }
    return;
  }
  if (stride == 1) {
    const uint8_t *b = p->data + (bit >> 3);
    switch (p->dtype) {
      case HURRAY_DTYPE_INT8:
        for (; k < len; k++) dst[k] = (float)((int32_t)(b[k] ^ 0x80u) - 128);
        return;
      case HURRAY_DTYPE_UINT8:
        for (; k < len; k++) dst[k] = (float)b[k];
        return;
      case HURRAY_DTYPE_FLOAT16:
        for (; k < len; k++) dst[k] = f16_to_f32((uint16_t)load_le(b + 2 * k, 2));
        return;
      case HURRAY_DTYPE_BFLOAT16:
        for (; k < len; k++) dst[k] = bf16_to_f32((uint16_t)load_le(b + 2 * k, 2));
        return;
      case HURRAY_DTYPE_FLOAT32:
        for (; k < len; k++) dst[k] = f32_of_bits((uint32_t)load_le(b + 4 * k, 4));
        return;
      default: break;
    }
  }
  int64_t step = stride * bits;
  for (; k < len; k++, bit += step) dst[k] = part_float(p, bit);
}

static int part_open(const HurrayTensorDesc *tensor, const HurrayBufferList *buffers,
                     uint32_t index, const char *what, Part *p, HurrayError *error) {
  const HurrayArray *a = &tensor->parts[index];
  const HurrayBuffer *buffer = buffers->buffers[a->buffer];
  if (buffer->desc.device_tag != HURRAY_DEVICE_CPU) {
    const char *name = hurray_device_name(buffer->desc.device_tag);
    return hurray__fail(error, HURRAY_EUNSUPPORTED,
                        "the kernels read CPU memory; the %s (buffer %u) are on %s", what,
                        a->buffer, name != NULL ? name : "a private device");
  }
  const HurrayDTypeInfo *info = hurray_dtype_info(a->dtype);
  if (info->kind == HURRAY_KIND_BOOL || info->kind == HURRAY_KIND_COMPLEX) {
    return hurray__fail(error, HURRAY_EDTYPE, "the %s are %s: no number to dequantise", what,
                        info->name);
  }
  p->data = buffer->data;
  p->bit0 = (int64_t)a->byte_offset * 8; /* validated: byte_offset <= (2^63 - 1) / 8 */
  p->ndim = a->ndim;
  p->dtype = info->code;
  p->bits = info->bits;
  p->kind = info->kind;
  if (a->strides != NULL) {
    memcpy(p->strides, a->strides, (size_t)a->ndim * sizeof *p->strides);
  } else {
    int64_t s = 1; /* validated: row-major strides of a non-empty array fit int64 */
    for (int32_t k = a->ndim - 1; k >= 0; k--) {
      p->strides[k] = s;
      s *= a->shape[k] > 0 ? a->shape[k] : 1;
    }
  }
  if (info->bits <= 8) small_lut(info, p->lut);
  for (uint32_t b = 0; info->bits == 4 && b < 256; b++) {
    p->pair[b][0] = p->lut[b & 15];
    p->pair[b][1] = p->lut[b >> 4];
  }
  return HURRAY_OK;
}

/* ---- the walk over rows --------------------------------------------------------------------- */

/* How a part of scales (or zero points, mins) follows the logical index: its element for
 * logical index i is at offset sum_k (i_k / div[k]) * mult[k] (div 0: that dimension does not
 * move it). */
typedef struct Map {
  int64_t div[HURRAY_MAX_NDIM];
  int64_t mult[HURRAY_MAX_NDIM];
} Map;

typedef struct Plan {
  uint32_t layout;
  int32_t ndim; /* at least 1: a rank-0 tensor is walked as shape [1] */
  int64_t shape[HURRAY_MAX_NDIM];
  uint64_t numel;
  uint32_t nparts;
  Part parts[HURRAY_MAX_PARTS];
  Map maps[HURRAY_MAX_PARTS];
  int64_t rep; /* along the last dimension, one scale per `rep` elements (>= row: per row) */
  int64_t steps[HURRAY_MAX_PARTS][HURRAY_MAX_NDIM]; /* bits per index of dimension k */
  uint8_t divides[HURRAY_MAX_NDIM]; /* a part's offset divides dimension k's index */
} Plan;

static void map_values(Plan *plan, uint32_t i) {
  Part *p = &plan->parts[i];
  for (int32_t k = 0; k < plan->ndim; k++) {
    plan->maps[i].div[k] = 1;
    plan->maps[i].mult[k] = p->ndim == 0 ? 0 : p->strides[k];
  }
}

static void map_scales(Plan *plan, uint32_t i, int32_t axis, int64_t block_size) {
  Part *p = &plan->parts[i];
  for (int32_t k = 0; k < plan->ndim; k++) {
    if (plan->layout == HURRAY_LAYOUT_PER_CHANNEL) {
      plan->maps[i].div[k] = k == axis ? 1 : 0;
      plan->maps[i].mult[k] = k == axis ? p->strides[0] : 0;
    } else {
      plan->maps[i].div[k] = k == axis ? block_size : 1;
      plan->maps[i].mult[k] = p->strides[k];
    }
  }
}

static inline int64_t map_offset(const Map *m, const int64_t *idx, int32_t n) {
  int64_t off = 0;
  for (int32_t k = 0; k < n; k++) { /* div is 1 but on the axis: no division per row there */
    if (m->div[k] == 1) off += idx[k] * m->mult[k];
    else if (m->div[k] != 0) off += (idx[k] / m->div[k]) * m->mult[k];
  }
  return off;
}

static const char *const kPartNames[2][3] = {{"values", "scales", "zero points"},
                                             {"values", "scales", "mins"}};

static int plan_open(const HurrayTensorDesc *tensor, const HurrayBufferList *buffers,
                     const char *verb, Plan *plan, HurrayError *error) {
  if (tensor == NULL || buffers == NULL) {
    return hurray__fail(error, HURRAY_EINVAL, "%s: tensor and buffers must not be NULL", verb);
  }
  int status = hurray_tensor_validate(tensor, buffers, 0, error);
  if (status != HURRAY_OK) return status;
  if (tensor->layout != HURRAY_LAYOUT_DENSE && tensor->layout != HURRAY_LAYOUT_PER_CHANNEL &&
      tensor->layout != HURRAY_LAYOUT_BLOCK) {
    return hurray__fail(error, HURRAY_EUNSUPPORTED,
                        "%s takes dense, per_channel and block tensors, not a %s tensor", verb,
                        hurray_layout_name((int)tensor->layout));
  }
  plan->layout = tensor->layout;
  plan->ndim = tensor->ndim > 0 ? tensor->ndim : 1;
  plan->numel = 1;
  int wraps = 0; /* zero strides let a small buffer hold more elements than 2^64 */
  for (int32_t k = 0; k < plan->ndim; k++) {
    plan->shape[k] = tensor->ndim > 0 ? tensor->shape[k] : 1;
    wraps |= __builtin_mul_overflow(plan->numel, (uint64_t)plan->shape[k], &plan->numel);
  }
  if (wraps && plan->numel != 0) {
    return hurray__fail(error, HURRAY_EOVERFLOW, "%s: the tensor's element count overflows",
                        verb);
  }
  plan->nparts = tensor->nparts;
  const char *const *names = kPartNames[tensor->layout == HURRAY_LAYOUT_BLOCK];
  for (uint32_t i = 0; i < tensor->nparts; i++) {
    status = part_open(tensor, buffers, i, names[i], &plan->parts[i], error);
    if (status != HURRAY_OK) return status;
  }
  map_values(plan, 0);
  int64_t row = plan->shape[plan->ndim - 1];
  plan->rep = row > 0 ? row : 1;
  if (tensor->layout != HURRAY_LAYOUT_DENSE) {
    for (uint32_t i = 1; i < tensor->nparts; i++) {
      map_scales(plan, i, tensor->axis, tensor->block_size);
    }
    if (tensor->axis == plan->ndim - 1) {
      plan->rep = tensor->layout == HURRAY_LAYOUT_PER_CHANNEL ? 1 : tensor->block_size;
    } else if (tensor->layout == HURRAY_LAYOUT_BLOCK) {
      plan->rep = 1; /* the scales' last dimension is the row's */
    }
  }
  for (int32_t k = 0; k < plan->ndim; k++) {
    plan->divides[k] = 0;
    for (uint32_t i = 0; i < plan->nparts; i++) {
      int64_t div = plan->maps[i].div[k];
      plan->steps[i][k] = div == 1 ? plan->maps[i].mult[k] * plan->parts[i].bits : 0;
      if (div > 1) plan->divides[k] = 1;
    }
  }
  return HURRAY_OK;
}

static size_t out_itemsize(int dtype) {
  if (dtype == HURRAY_DTYPE_FLOAT32) return 4;
  return dtype == HURRAY_DTYPE_INT8 || dtype == HURRAY_DTYPE_UINT8 ? 1 : 2;
}

/* Checks the output dtype against the plan: float32, float16, bfloat16 for any layout; int8 or
 * uint8 for a dense tensor of integers that fit it (the unpack of int4, uint4, int2, ...). */
static int plan_output(const Plan *plan, int dtype, HurrayError *error) {
  if (dtype == HURRAY_DTYPE_FLOAT32 || dtype == HURRAY_DTYPE_FLOAT16 ||
      dtype == HURRAY_DTYPE_BFLOAT16) {
    return HURRAY_OK;
  }
  const Part *v = &plan->parts[0];
  const HurrayDTypeInfo *info = hurray_dtype_info(dtype);
  if (dtype == HURRAY_DTYPE_INT8 || dtype == HURRAY_DTYPE_UINT8) {
    int integer = plan->layout == HURRAY_LAYOUT_DENSE && v->bits <= 8 &&
                  v->kind != HURRAY_KIND_FLOAT;
    int fits = dtype == HURRAY_DTYPE_UINT8 ? v->kind == HURRAY_KIND_UNSIGNED
                                           : v->kind == HURRAY_KIND_SIGNED || v->bits < 8;
    if (integer && fits) return HURRAY_OK;
    return hurray__fail(error, HURRAY_EDTYPE,
                        "%s unpacks dense integer tensors whose values it holds (int4, int2 to "
                        "int8; uint4, uint2, uint1 to either); not a %s tensor of %s",
                        info->name, hurray_layout_name((int)plan->layout),
                        hurray_dtype_info(v->dtype)->name);
  }
  return hurray__fail(error, HURRAY_EDTYPE,
                      "dequantisation gives float32, float16 or bfloat16 (int8 or uint8 to "
                      "unpack packed integers), not %s",
                      info != NULL ? info->name : "an unknown dtype");
}

/* ---- where results go --------------------------------------------------------------------
 *
 * The kernels compute float32 rows; a Sink takes them to the output. A float32 output whose
 * size fits the cache is written in place. Otherwise rows are staged in the Sink (12 KiB, one
 * per call on the heap; converted there to float16 or bfloat16) and copied out a stage at a
 * time, with non-temporal stores where the output is larger than half the last-level cache
 * and was written before (not a new buffer, see sink_open): the rows are
 * not read back, and ordinary stores would first read every output line into a cache that
 * cannot hold them (ADR-102: that read is a third of a large dequantisation's memory traffic,
 * and glibc's memcpy skips it the same way). */

#define SINK_FLOATS 2048

typedef struct Sink {
  uint8_t *out;  /* the next output byte */
  int dtype;     /* float32, float16 or bfloat16 */
  bool staged;   /* rows go through `stage` */
  bool stream;   /* non-temporal stores */
  int64_t count; /* floats in `stage` */
  float stage[SINK_FLOATS];
  uint16_t half[SINK_FLOATS];
} Sink;

/* The test hook that sets the output size from which stores are non-temporal (bytes, decimal):
 * private, so that the tests run that path on small tensors. */
#define STREAM_HOOK "_HURRAY_TEST_STREAM_BYTES"

static uint64_t stream_threshold(void) {
  const char *hook = getenv(STREAM_HOOK);
  if (hook != NULL) return strtoull(hook, NULL, 10);
  long llc = -1;
#if defined(_SC_LEVEL3_CACHE_SIZE)
  llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (llc <= 0) llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
  return llc > 0 ? (uint64_t)llc / 2 : (uint64_t)16 << 20;
}

/* `fresh`: `out` is memory just allocated, whose pages the kernel zeroes (into the cache) as the
 * first store to each faults it in: there ordinary stores are the cheaper. */
static void sink_open(Sink *s, int dtype, uint8_t *out, uint64_t bytes, bool fresh) {
  s->out = out;
  s->dtype = dtype;
#if defined(__SSE2__)
  s->stream = !fresh && bytes >= stream_threshold();
#else
  (void)bytes;
  (void)fresh;
  s->stream = false;
#endif
  s->staged = s->stream || dtype != HURRAY_DTYPE_FLOAT32;
  s->count = 0;
}

static void copy_out(const Sink *s, const void *src, size_t n) {
#if defined(__SSE2__)
  if (s->stream) {
    const uint8_t *from = src;
    uint8_t *to = s->out;
    size_t head = (size_t)(-(uintptr_t)to & 15);
    if (head > n) head = n;
    memcpy(to, from, head);
    for (size_t i = head; i + 16 <= n; i += 16) {
      _mm_stream_si128((__m128i *)(void *)(to + i), _mm_loadu_si128((const void *)(from + i)));
    }
    size_t tail = head + (n - head) / 16 * 16;
    memcpy(to + tail, from + tail, n - tail);
    return;
  }
#endif
  memcpy(s->out, src, n);
}

static void sink_flush(Sink *s) {
  const int64_t n = s->count;
  if (n == 0) return; /* an empty output may be NULL */
  if (s->dtype == HURRAY_DTYPE_FLOAT32) {
    copy_out(s, s->stage, (size_t)n * 4);
    s->out += (size_t)n * 4;
  } else {
    for (int64_t k = 0; k < n; k++) {
      s->half[k] = s->dtype == HURRAY_DTYPE_FLOAT16 ? f32_to_f16(s->stage[k])
                                                    : f32_to_bf16(s->stage[k]);
    }
    copy_out(s, s->half, (size_t)n * 2);
    s->out += (size_t)n * 2;
  }
  s->count = 0;
}

/* Room for the next `n` (<= SINK_FLOATS) results; sink_done(s, n) once they are written. */
static inline float *sink_row(Sink *s, int64_t n) {
  if (!s->staged) return (float *)(void *)s->out;
  if (s->count + n > SINK_FLOATS) sink_flush(s);
  return s->stage + s->count;
}

static inline void sink_done(Sink *s, int64_t n) {
  if (s->staged) s->count += n;
  else s->out += (size_t)n * 4;
}

static void sink_close(Sink *s) {
  if (s->staged) sink_flush(s);
#if defined(__SSE2__)
  if (s->stream) _mm_sfence(); /* the stores are visible before the call returns */
#endif
}

/* Applies the row's scales (and zero points or mins) to x[0..len), the elements k0.. of the row
 * whose scale parts start at bits sb[1], sb[2]. */
static inline void scale_row(const Plan *plan, const int64_t *sb, int64_t k0, int64_t len,
                             float *x) {
  const Part *s = &plan->parts[1];
  const Part *z = plan->nparts > 2 ? &plan->parts[2] : NULL;
  const int last = plan->ndim - 1;
  const int per_channel = plan->layout == HURRAY_LAYOUT_PER_CHANNEL;
  int64_t rep = plan->rep;
  if (rep >= plan->shape[last]) { /* one scale for the row: short rows (GGUF's blocks) */
    float sv = part_float(s, sb[1]);
    if (z == NULL) {
      for (int64_t i = 0; i < len; i++) x[i] = x[i] * sv;
    } else if (per_channel) {
      float zv = part_float(z, sb[2]);
      for (int64_t i = 0; i < len; i++) x[i] = (x[i] - zv) * sv;
    } else {
      float zv = part_float(z, sb[2]);
      for (int64_t i = 0; i < len; i++) x[i] = x[i] * sv + zv;
    }
    return;
  }
  int64_t k = 0;
  int64_t group = k0 / rep; /* then one group after another */
  for (; k < len; group++) {
    int64_t end = (group + 1) * rep - k0;
    if (end > len) end = len;
    if (rep == 1) {
      float zbuf[ROW_CHUNK], sbuf[ROW_CHUNK];
      decode_row(s, sb[1] + (k0 + k) * plan->maps[1].mult[last] * s->bits,
                 plan->maps[1].mult[last], len - k, sbuf);
      if (z != NULL) {
        decode_row(z, sb[2] + (k0 + k) * plan->maps[2].mult[last] * z->bits,
                   plan->maps[2].mult[last], len - k, zbuf);
      }
      float *xk = x + k;
      int64_t m = len - k;
      if (z == NULL) {
        for (int64_t i = 0; i < m; i++) xk[i] = xk[i] * sbuf[i];
      } else if (per_channel) {
        for (int64_t i = 0; i < m; i++) xk[i] = (xk[i] - zbuf[i]) * sbuf[i];
      } else {
        for (int64_t i = 0; i < m; i++) xk[i] = xk[i] * sbuf[i] + zbuf[i];
      }
      return;
    }
    float sv = part_float(s, sb[1] + group * plan->maps[1].mult[last] * s->bits);
    float *xk = x + k;
    int64_t m = end - k;
    if (z == NULL) {
      for (int64_t i = 0; i < m; i++) xk[i] = xk[i] * sv;
    } else {
      float zv = part_float(z, sb[2] + group * plan->maps[2].mult[last] * z->bits);
      if (per_channel) {
        for (int64_t i = 0; i < m; i++) xk[i] = (xk[i] - zv) * sv;
      } else {
        for (int64_t i = 0; i < m; i++) xk[i] = xk[i] * sv + zv;
      }
    }
    k = end;
  }
}

static void unpack_row(const Part *p, int64_t bit, int64_t stride, int64_t len, uint8_t *dst) {
  int64_t step = stride * p->bits;
  if (p->kind == HURRAY_KIND_SIGNED) {
    for (int64_t k = 0; k < len; k++, bit += step) {
      dst[k] = (uint8_t)(sign_extend(part_raw(p, bit), p->bits) & 0xFF);
    }
  } else {
    for (int64_t k = 0; k < len; k++, bit += step) dst[k] = (uint8_t)part_raw(p, bit);
  }
}

/* Rows of integer codes one per byte (int8/uint8 contiguous, or a sub-byte integer at the same
 * bit of consecutive bytes, as GGUF's blocks described as layouts are) with one scale (and zero
 * point or min) per row: the short rows' loop decodes and scales them in one pass, the same
 * operations as decode_row then scale_row. */
static bool byte_rows(const Plan *plan, int64_t n) {
  const Part *v = &plan->parts[0];
  const int64_t stride = plan->maps[0].mult[plan->ndim - 1];
  return plan->nparts > 1 && plan->rep >= n && v->kind != HURRAY_KIND_FLOAT &&
         ((v->bits == 8 && stride == 1) || (v->bits < 8 && stride * v->bits == 8));
}

NOINLINE static void byte_row(const Plan *plan, const int64_t *at, int64_t n, float *x) {
  const Part *v = &plan->parts[0];
  const uint8_t *b = v->data + (at[0] >> 3);
  const unsigned shift = (unsigned)(at[0] & 7), mask = v->bits == 8 ? 0xFFu : (1u << v->bits) - 1;
  const int32_t half = v->kind == HURRAY_KIND_SIGNED ? (int32_t)(mask + 1) / 2 : 0;
  const float sv = part_float(&plan->parts[1], at[1]);
  if (plan->nparts == 2) {
    for (int64_t k = 0; k < n; k++) {
      x[k] = int_of_code(((unsigned)b[k] >> shift) & mask, half) * sv;
    }
    return;
  }
  const float zv = part_float(&plan->parts[2], at[2]);
  if (plan->layout == HURRAY_LAYOUT_PER_CHANNEL) {
    for (int64_t k = 0; k < n; k++) {
      x[k] = (int_of_code(((unsigned)b[k] >> shift) & mask, half) - zv) * sv;
    }
  } else {
    for (int64_t k = 0; k < n; k++) {
      x[k] = int_of_code(((unsigned)b[k] >> shift) & mask, half) * sv + zv;
    }
  }
}

/* Runs a checked plan into `out` (`bytes`: numel * itemsize, aligned for the dtype), through
 * `sink` (a scratch Sink) unless the output is int8 or uint8. */
static void plan_run(const Plan *plan, int dtype, uint8_t *out, uint64_t bytes, bool fresh,
                     Sink *sink) {
  if (plan->numel == 0) return;
  const int last = plan->ndim - 1;
  const int64_t n = plan->shape[last];
  const size_t item = out_itemsize(dtype);
  const Part *v = &plan->parts[0];
  const int64_t vstride = plan->maps[0].mult[last];
  int64_t idx[HURRAY_MAX_NDIM] = {0};
  sink_open(sink, dtype, out, bytes, fresh);
  /* Each part's first bit in the row, stepped as the index moves: step[i][k] bits per index of
   * dimension k, except where the part's offset divides that index (a block axis before the
   * last), whose moves recompute the offsets from the index. */
  int64_t sb[HURRAY_MAX_PARTS];
  const int64_t (*step)[HURRAY_MAX_NDIM] = plan->steps;
  const int inner = last - 1;
  int recompute = 1;
  for (;;) {
    for (uint32_t i = 0; recompute && i < plan->nparts; i++) {
      sb[i] = plan->parts[i].bit0 + map_offset(&plan->maps[i], idx, last) * plan->parts[i].bits;
    }
    if (item != 1 && n <= ROW_CHUNK && inner >= 0 && !plan->divides[inner]) {
      /* Short float32 rows (GGUF's blocks): every row left along dimension `inner`, and along
       * `inner - 1` too where that one steps as well, without the index; the state is then
       * that of the last row done. */
      const int outer = inner >= 1 && idx[inner] == 0 && !plan->divides[inner - 1];
      const int64_t runs = outer ? plan->shape[inner - 1] - idx[inner - 1] : 1;
      const int64_t rows = plan->shape[inner] - idx[inner];
      int64_t at[HURRAY_MAX_PARTS] = {0};
      const bool bytes_only = byte_rows(plan, n);
      for (int64_t r2 = 0; r2 < runs; r2++) {
        for (uint32_t i = 0; i < plan->nparts; i++) {
          at[i] = sb[i] + (outer ? r2 * step[i][inner - 1] : 0);
        }
        for (int64_t r = 0; r < rows; r++) {
          float *x = sink_row(sink, n);
          if (bytes_only) {
            byte_row(plan, at, n, x);
          } else {
            decode_row(v, at[0], vstride, n, x);
            if (plan->nparts > 1) scale_row(plan, at, 0, n, x);
          }
          sink_done(sink, n);
          for (uint32_t i = 0; i < plan->nparts; i++) at[i] += step[i][inner];
        }
      }
      for (uint32_t i = 0; i < plan->nparts; i++) sb[i] = at[i] - step[i][inner];
      idx[inner] = plan->shape[inner] - 1;
      if (outer) idx[inner - 1] = plan->shape[inner - 1] - 1;
    } else if (item == 1) {
      unpack_row(v, sb[0], vstride, n, out);
      out += n;
    } else {
      for (int64_t k0 = 0; k0 < n; k0 += ROW_CHUNK) {
        int64_t len = n - k0 < ROW_CHUNK ? n - k0 : ROW_CHUNK;
        float *x = sink_row(sink, len);
        decode_row(v, sb[0] + k0 * vstride * v->bits, vstride, len, x);
        if (plan->nparts > 1) scale_row(plan, sb, k0, len, x);
        sink_done(sink, len);
      }
    }
    recompute = 0;
    int k = inner;
    for (; k >= 0; k--) {
      int carry = ++idx[k] == plan->shape[k];
      recompute |= plan->divides[k];
      for (uint32_t i = 0; i < plan->nparts; i++) {
        sb[i] += carry ? -(plan->shape[k] - 1) * step[i][k] : step[i][k];
      }
      if (!carry) break;
      idx[k] = 0;
    }
    if (k < 0) break;
  }
  if (item != 1) sink_close(sink);
}

static int plan_bytes(const Plan *plan, int dtype, uint64_t *bytes, HurrayError *error) {
  if (__builtin_mul_overflow(plan->numel, (uint64_t)out_itemsize(dtype), bytes)) {
    return hurray__fail(error, HURRAY_EOVERFLOW, "the result of %llu elements overflows",
                        (unsigned long long)plan->numel);
  }
  return HURRAY_OK;
}


/* ---- GGML blocks (ADR-094, dtypes.md §6) ------------------------------------------------------
 *
 * A tensor of a block dtype is rows of whole blocks, row-major: its bytes are one run of
 * blocks, and block b's weights are weights [b * elements, (b + 1) * elements) of the result.
 * Each block is decoded as ggml's dequantize_row_* and the gguf package's NumPy reference do,
 * operation for operation in float32: a scale is d * (float)sc, then value = scale * (float)q,
 * less min * (float)m where the type has mins, plus m where the block has an offset. */

static inline float le_f16(const uint8_t *p) {
  return f16_to_f32(hurray__load_le16(p));
}

/* Q4_K and Q5_K's eight 6-bit scales and mins, packed in 12 bytes. */
static void k_scales(const uint8_t *s, uint8_t sc[8], uint8_t mn[8]) {
  for (int j = 0; j < 4; j++) {
    sc[j] = s[j] & 0x3F;
    mn[j] = s[j + 4] & 0x3F;
    sc[j + 4] = (uint8_t)((s[j + 8] & 0x0F) | ((s[j] >> 2) & 0x30));
    mn[j + 4] = (uint8_t)((s[j + 8] >> 4) | ((s[j + 4] >> 2) & 0x30));
  }
}

/* The 32 nibbles of 16 bytes in ggml's order: the low nibbles, then the high ones. */
static inline void nibbles(const uint8_t *restrict b, uint8_t *restrict q) {
  for (int j = 0; j < 16; j++) q[j] = b[j] & 0x0F;
  for (int j = 0; j < 16; j++) q[j + 16] = b[j] >> 4;
}

/* The weights of one block of `dtype` at `b` into y[0 .. elements). */
static void ggml_block(int dtype, const uint8_t *restrict b, float *restrict y) {
  switch (dtype) {
    case HURRAY_DTYPE_Q4_0: { /* nibbles to bytes, then bytes to floats: both vectorise */
      const float d = le_f16(b);
      uint8_t q[32];
      nibbles(b + 2, q);
      for (int j = 0; j < 32; j++) y[j] = d * (float)((int)q[j] - 8);
      return;
    }
    case HURRAY_DTYPE_Q4_1: {
      const float d = le_f16(b), m = le_f16(b + 2);
      uint8_t q[32];
      nibbles(b + 4, q);
      for (int j = 0; j < 32; j++) y[j] = d * (float)q[j] + m;
      return;
    }
    case HURRAY_DTYPE_Q5_0:
    case HURRAY_DTYPE_Q5_1: {
      const int one = dtype == HURRAY_DTYPE_Q5_1;
      const float d = le_f16(b), m = one ? le_f16(b + 2) : 0.0f;
      const uint32_t qh = hurray__load_le32(b + 2 + 2 * one);
      const uint8_t *qs = b + 6 + 2 * one;
      for (int j = 0; j < 16; j++) {
        int lo = (qs[j] & 0x0F) | (int)(((qh >> j) & 1u) << 4);
        int hi = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
        if (one) {
          y[j] = d * (float)lo + m;
          y[j + 16] = d * (float)hi + m;
        } else {
          y[j] = d * (float)(lo - 16);
          y[j + 16] = d * (float)(hi - 16);
        }
      }
      return;
    }
    case HURRAY_DTYPE_Q8_0: {
      const float d = le_f16(b);
      for (int j = 0; j < 32; j++) y[j] = (float)(int8_t)b[2 + j] * d;
      return;
    }
    case HURRAY_DTYPE_Q2_K: { /* scales[16] qs[64] d dmin */
      const uint8_t *sc = b, *qs = b + 16;
      const float d = le_f16(b + 80), dmin = le_f16(b + 82);
      for (int e = 0; e < 256; e++) {
        const int i = e / 16, h = e / 128, s = (e / 32) % 4, l = e % 32;
        const float dl = d * (float)(sc[i] & 0x0F), ml = dmin * (float)(sc[i] >> 4);
        y[e] = dl * (float)((qs[h * 32 + l] >> (2 * s)) & 3) - ml;
      }
      return;
    }
    case HURRAY_DTYPE_Q3_K: { /* hmask[32] qs[64] scales[12] d */
      const uint8_t *hm = b, *qs = b + 32, *s12 = b + 96;
      const float d = le_f16(b + 108);
      float dl[16];
      for (int k = 0; k < 16; k++) {
        int lo = (k < 8 ? s12[k] : s12[k - 8] >> 4) & 0x0F;
        int hi = (s12[8 + k % 4] >> (2 * (k / 4))) & 3;
        dl[k] = d * (float)((int)(int8_t)(uint8_t)(lo | hi << 4) - 32);
      }
      for (int e = 0; e < 256; e++) {
        const int h = e / 128, s = (e / 32) % 4, l = e % 32;
        const int ql = (qs[h * 32 + l] >> (2 * s)) & 3;
        const int qh = ((hm[l] >> (e / 32)) & 1) ^ 1;
        y[e] = dl[e / 16] * (float)(ql - (qh << 2));
      }
      return;
    }
    case HURRAY_DTYPE_Q4_K:
    case HURRAY_DTYPE_Q5_K: { /* d dmin scales[12] (qh[32]) qs[128] */
      const int five = dtype == HURRAY_DTYPE_Q5_K;
      const float d = le_f16(b), dmin = le_f16(b + 2);
      const uint8_t *qh = b + 16, *qs = b + 16 + 32 * five;
      uint8_t sc[8], mn[8];
      k_scales(b + 4, sc, mn);
      for (int i = 0; i < 8; i++) {
        const float dd = d * (float)sc[i], dm = dmin * (float)mn[i];
        const int c = i / 2, shift = 4 * (i % 2);
        for (int l = 0; l < 32; l++) {
          int q = (qs[c * 32 + l] >> shift) & 0x0F;
          if (five) q |= ((qh[l] >> i) & 1) << 4;
          y[i * 32 + l] = dd * (float)q - dm;
        }
      }
      return;
    }
    case HURRAY_DTYPE_Q6_K: { /* ql[128] qh[64] scales[16] (int8) d */
      const uint8_t *ql = b, *qh = b + 128;
      const int8_t *sc = (const int8_t *)(const void *)(b + 192);
      const float d = le_f16(b + 208);
      for (int e = 0; e < 256; e++) {
        const int h = e / 128, r = e % 128;
        const int lo = (ql[h * 64 + r % 64] >> (4 * (r / 64))) & 0x0F;
        const int hi = (qh[h * 32 + r % 32] >> (2 * (r / 32))) & 3;
        const float dd = d * (float)sc[e / 16];
        y[e] = dd * (float)((int)(int8_t)(uint8_t)(lo | hi << 4) - 32);
      }
      return;
    }
    default: { /* Q8_K: d (float32) qs[256] bsums[16] */
      const float d = f32_of_bits(hurray__load_le32(b));
      for (int e = 0; e < 256; e++) y[e] = (float)(int8_t)b[4 + e] * d;
      return;
    }
  }
}

/* A validated tensor of a block dtype: its first byte, its bytes and the weights they hold. */
typedef struct BlockRun {
  int dtype;
  const uint8_t *data;
  uint64_t nblocks;
  uint32_t elements, bytes;
  uint64_t numel; /* weights */
} BlockRun;

static int block_prepare(const HurrayTensorDesc *tensor, const HurrayBufferList *buffers,
                         int dtype, BlockRun *run, uint64_t *out_bytes, HurrayError *error) {
  const HurrayArray *a = &tensor->parts[0];
  const HurrayBuffer *buffer = buffers->buffers[a->buffer];
  const char *name = hurray_dtype_info(tensor->dtype)->name;
  if (buffer->desc.device_tag != HURRAY_DEVICE_CPU) {
    return hurray__fail(error, HURRAY_EUNSUPPORTED,
                        "the kernels read CPU memory; the %s blocks (buffer %u) are on %s", name,
                        a->buffer, "another device");
  }
  if (dtype != HURRAY_DTYPE_FLOAT32 && dtype != HURRAY_DTYPE_FLOAT16 &&
      dtype != HURRAY_DTYPE_BFLOAT16) {
    const HurrayDTypeInfo *info = hurray_dtype_info(dtype);
    return hurray__fail(error, HURRAY_EDTYPE,
                        "a %s tensor dequantises to float32, float16 or bfloat16, not %s", name,
                        info != NULL ? info->name : "an unknown dtype");
  }
  uint64_t bytes = 1;
  for (int32_t k = 0; k < tensor->ndim; k++) bytes *= (uint64_t)tensor->shape[k]; /* validated */
  run->dtype = tensor->dtype;
  hurray_dtype_block(tensor->dtype, &run->elements, &run->bytes, NULL);
  run->data = bytes > 0 ? (const uint8_t *)buffer->data + a->byte_offset : NULL; /* empty: none */
  run->nblocks = bytes / run->bytes;
  if (__builtin_mul_overflow(run->nblocks, (uint64_t)run->elements, &run->numel) ||
      __builtin_mul_overflow(run->numel, (uint64_t)out_itemsize(dtype), out_bytes)) {
    return hurray__fail(error, HURRAY_EOVERFLOW, "the result of %llu %s blocks overflows",
                        (unsigned long long)run->nblocks, name);
  }
  return HURRAY_OK;
}

static int block_open(const HurrayTensorDesc *tensor, const HurrayBufferList *buffers, int dtype,
                      BlockRun *run, uint64_t *out_bytes, HurrayError *error) {
  if (buffers == NULL) {
    return hurray__fail(error, HURRAY_EINVAL, "dequantize: tensor and buffers must not be NULL");
  }
  int status = hurray_tensor_validate(tensor, buffers, 0, error);
  return status == HURRAY_OK ? block_prepare(tensor, buffers, dtype, run, out_bytes, error)
                             : status;
}

static void block_run(const BlockRun *run, int dtype, uint8_t *out, uint64_t bytes, bool fresh,
                      Sink *sink) {
  sink_open(sink, dtype, out, bytes, fresh);
  for (uint64_t i = 0; i < run->nblocks; i++) {
    ggml_block(run->dtype, run->data + i * run->bytes, sink_row(sink, run->elements));
    sink_done(sink, run->elements);
  }
  sink_close(sink);
}

static bool is_block(const HurrayTensorDesc *tensor) {
  uint32_t elements, bytes;
  return tensor != NULL && hurray_dtype_block(tensor->dtype, &elements, &bytes, NULL) == HURRAY_OK;
}

/* A checked plan for dequantising `tensor` to `dtype` (heap: free it) and its output bytes. */
static int plan_prepare(const HurrayTensorDesc *tensor, const HurrayBufferList *buffers,
                        int dtype, Plan **out, uint64_t *bytes, HurrayError *error) {
  *out = malloc(sizeof **out);
  if (*out == NULL) return hurray__fail(error, HURRAY_ENOMEM, "dequantize: no memory");
  int status = plan_open(tensor, buffers, "dequantize", *out, error);
  if (status == HURRAY_OK) status = plan_output(*out, dtype, error);
  if (status == HURRAY_OK) status = plan_bytes(*out, dtype, bytes, error);
  return status;
}

/* Dequantises a checked tensor (`plan` or, for a block dtype, `run`) into `out` (`fresh`: just
 * allocated). */
static int dequantize_run(const Plan *plan, const BlockRun *run, int dtype, uint8_t *out,
                          uint64_t bytes, bool fresh, HurrayError *error) {
  Sink *sink = malloc(sizeof *sink);
  if (sink == NULL) return hurray__fail(error, HURRAY_ENOMEM, "dequantize: no memory");
  if (plan == NULL) block_run(run, dtype, out, bytes, fresh, sink);
  else plan_run(plan, dtype, out, bytes, fresh, sink);
  free(sink);
  return HURRAY_OK;
}

int hurray_dequantize(const HurrayTensorDesc *tensor, const HurrayBufferList *buffers, int dtype,
                      void *out, uint64_t out_size, HurrayError *error) {
  Plan *plan = NULL;
  BlockRun run = {0};
  uint64_t bytes = 0;
  const bool block = is_block(tensor);
  int status = block ? block_open(tensor, buffers, dtype, &run, &bytes, error)
                     : plan_prepare(tensor, buffers, dtype, &plan, &bytes, error);
  if (status == HURRAY_OK && out_size < bytes) {
    status = hurray__fail(error, HURRAY_EINVAL,
                          "out holds %llu bytes; the %llu %s elements need %llu",
                          (unsigned long long)out_size,
                          (unsigned long long)(block ? run.numel : plan->numel),
                          hurray_dtype_info(dtype)->name, (unsigned long long)bytes);
  }
  if (status == HURRAY_OK && bytes > 0 && out == NULL) {
    status = hurray__fail(error, HURRAY_EINVAL, "dequantize: out is NULL");
  }
  if (status == HURRAY_OK && bytes > 0 && (uintptr_t)out % out_itemsize(dtype) != 0) {
    status = hurray__fail(error, HURRAY_EALIGN, "out is not aligned to its %zu-byte elements",
                          out_itemsize(dtype));
  }
  if (status == HURRAY_OK) status = dequantize_run(plan, &run, dtype, out, bytes, false, error);
  free(plan);
  return status;
}

int hurray_dequantize_buffer(const HurrayTensorDesc *tensor, const HurrayBufferList *buffers,
                             int dtype, HurrayBuffer **out, HurrayError *error) {
  if (out == NULL) return hurray__fail(error, HURRAY_EINVAL, "dequantize: out is NULL");
  *out = NULL;
  Plan *plan = NULL;
  BlockRun run = {0};
  uint64_t bytes = 0;
  const bool block = is_block(tensor);
  int status = block ? block_open(tensor, buffers, dtype, &run, &bytes, error)
                     : plan_prepare(tensor, buffers, dtype, &plan, &bytes, error);
  if (status == HURRAY_OK) status = hurray_buffer_alloc(bytes, 0, 0, out, error);
  if (status == HURRAY_OK) {
    status = dequantize_run(plan, &run, dtype, (*out)->data, bytes, true, error);
  }
  if (status != HURRAY_OK && *out != NULL) {
    hurray_buffer_destroy(*out);
    *out = NULL;
  }
  free(plan);
  return status;
}

/* ---- quantisation ------------------------------------------------------------------------ */

typedef struct QuantGeometry {
  int32_t ndim, axis;
  int64_t shape[HURRAY_MAX_NDIM];
  int64_t scale_shape[HURRAY_MAX_NDIM]; /* row-major, ndim dims (per_channel: 1 dim) */
  int32_t scale_ndim;
  uint64_t numel, nscales, values_bytes, scales_bytes;
} QuantGeometry;

static int quant_geometry(int32_t ndim, const int64_t *shape,
                          const HurrayQuantizeOptions *o, QuantGeometry *g, HurrayError *error) {
  if (o == NULL) return hurray__fail(error, HURRAY_EINVAL, "quantize: options is NULL");
  if (!hurray__all_zero(o->reserved, sizeof o->reserved) || o->reserved1 != 0) {
    return hurray__fail(error, HURRAY_EINVAL, "quantize: reserved option fields must be zero");
  }
  if (o->layout != HURRAY_LAYOUT_PER_CHANNEL && o->layout != HURRAY_LAYOUT_BLOCK) {
    const char *name = hurray_layout_name((int)o->layout);
    return hurray__fail(error, HURRAY_ELAYOUT,
                        "quantize makes per_channel or block tensors, not %s",
                        name != NULL ? name : "an unknown layout");
  }
  if (o->dtype != HURRAY_DTYPE_INT4 && o->dtype != HURRAY_DTYPE_INT8) {
    const HurrayDTypeInfo *info = hurray_dtype_info(o->dtype);
    return hurray__fail(error, HURRAY_EDTYPE, "quantize makes int4 or int8 values, not %s",
                        info != NULL ? info->name : "an unknown dtype");
  }
  if (o->scale_dtype != HURRAY_DTYPE_FLOAT32 && o->scale_dtype != HURRAY_DTYPE_FLOAT16 &&
      o->scale_dtype != HURRAY_DTYPE_BFLOAT16) {
    const HurrayDTypeInfo *info = hurray_dtype_info(o->scale_dtype);
    return hurray__fail(error, HURRAY_EDTYPE,
                        "quantize makes float32, float16 or bfloat16 scales, not %s",
                        info != NULL ? info->name : "an unknown dtype");
  }
  if (ndim < 1 || ndim > HURRAY_MAX_NDIM || shape == NULL) {
    return hurray__fail(error, HURRAY_ELAYOUT, "quantize takes a tensor of rank 1 to %d, not %d",
                        HURRAY_MAX_NDIM, (int)ndim);
  }
  if (o->axis < 0 || o->axis >= ndim) {
    return hurray__fail(error, HURRAY_ELAYOUT, "axis %d is not in [0, %d)", (int)o->axis,
                        (int)ndim);
  }
  int block = o->layout == HURRAY_LAYOUT_BLOCK;
  if (block ? o->block_size < 1 || o->block_size > HURRAY_MAX_DIM : o->block_size != 0) {
    return hurray__fail(error, HURRAY_ELAYOUT,
                        block ? "block_size %lld is not in [1, 2^62]"
                              : "block_size is %lld; per_channel takes 0",
                        (long long)o->block_size);
  }
  g->ndim = ndim;
  g->axis = o->axis;
  g->numel = 1;
  g->nscales = 1;
  for (int32_t k = 0; k < ndim; k++) {
    if (shape[k] < 0 || shape[k] > HURRAY_MAX_DIM) {
      return hurray__fail(error, HURRAY_ELIMIT, "extent %lld of dimension %d is not in [0, 2^62]",
                          (long long)shape[k], (int)k);
    }
    g->shape[k] = shape[k];
    g->scale_shape[k] = k != o->axis ? shape[k]
                        : block     ? shape[k] / o->block_size + (shape[k] % o->block_size != 0)
                                    : shape[k];
    if (__builtin_mul_overflow(g->numel, (uint64_t)shape[k], &g->numel)) {
      return hurray__fail(error, HURRAY_EOVERFLOW, "the tensor's element count overflows");
    }
    if (block && __builtin_mul_overflow(g->nscales, (uint64_t)g->scale_shape[k], &g->nscales)) {
      return hurray__fail(error, HURRAY_EOVERFLOW, "the scales' element count overflows");
    }
  }
  if (!block) {
    g->scale_ndim = 1;
    g->scale_shape[0] = shape[o->axis];
    g->nscales = (uint64_t)shape[o->axis];
  } else {
    g->scale_ndim = ndim;
  }
  if (hurray_dtype_storage_bytes(o->dtype, g->numel, &g->values_bytes, error) != HURRAY_OK ||
      hurray_dtype_storage_bytes(o->scale_dtype, g->nscales, &g->scales_bytes, error) !=
          HURRAY_OK) {
    return HURRAY_EOVERFLOW;
  }
  return HURRAY_OK;
}

int hurray_quantize_sizes(int32_t ndim, const int64_t *shape, const HurrayQuantizeOptions *options,
                          uint64_t *values_bytes, uint64_t *scales_bytes, HurrayError *error) {
  QuantGeometry g;
  int status = quant_geometry(ndim, shape, options, &g, error);
  if (status != HURRAY_OK) return status;
  if (values_bytes != NULL) *values_bytes = g.values_bytes;
  if (scales_bytes != NULL) *scales_bytes = g.scales_bytes;
  return HURRAY_OK;
}

/* The flat (row-major) scale index of logical index idx, last-dimension element k. */
static uint64_t scale_index(const QuantGeometry *g, int block, int64_t block_size,
                            const int64_t *idx, int64_t k) {
  if (!block) return (uint64_t)(g->axis == g->ndim - 1 ? k : idx[g->axis]);
  uint64_t flat = 0;
  for (int32_t d = 0; d < g->ndim; d++) {
    int64_t i = d == g->ndim - 1 ? k : idx[d];
    if (d == g->axis) i /= block_size;
    flat = flat * (uint64_t)g->scale_shape[d] + (uint64_t)i;
  }
  return flat;
}

int hurray_quantize(const HurrayTensorDesc *tensor, const HurrayBufferList *buffers,
                    const HurrayQuantizeOptions *options, void *values, uint64_t values_size,
                    void *scales, uint64_t scales_size, HurrayError *error) {
  Plan *plan = malloc(sizeof *plan);
  if (plan == NULL) return hurray__fail(error, HURRAY_ENOMEM, "quantize: no memory");
  float *group = NULL;
  QuantGeometry g;
  int status = plan_open(tensor, buffers, "quantize", plan, error);
  if (status == HURRAY_OK && (tensor->layout != HURRAY_LAYOUT_DENSE ||
                              plan->parts[0].kind != HURRAY_KIND_FLOAT)) {
    status = hurray__fail(error, HURRAY_EDTYPE,
                          "quantize takes a dense tensor of floats, not a %s tensor of %s",
                          hurray_layout_name((int)tensor->layout),
                          hurray_dtype_info(tensor->dtype)->name);
  }
  if (status == HURRAY_OK) status = quant_geometry(tensor->ndim, tensor->shape, options, &g, error);
  if (status == HURRAY_OK && (values_size < g.values_bytes || scales_size < g.scales_bytes)) {
    status = hurray__fail(error, HURRAY_EINVAL,
                          "values hold %llu bytes and scales %llu; the result needs %llu and %llu",
                          (unsigned long long)values_size, (unsigned long long)scales_size,
                          (unsigned long long)g.values_bytes, (unsigned long long)g.scales_bytes);
  }
  if (status == HURRAY_OK && ((g.values_bytes > 0 && values == NULL) ||
                              (g.scales_bytes > 0 && scales == NULL))) {
    status = hurray__fail(error, HURRAY_EINVAL, "quantize: values or scales is NULL");
  }
  if (status == HURRAY_OK && g.scales_bytes > 0 &&
      (uintptr_t)scales % (options->scale_dtype == HURRAY_DTYPE_FLOAT32 ? 4u : 2u) != 0) {
    status = hurray__fail(error, HURRAY_EALIGN, "scales is not aligned to its elements");
  }
  if (status == HURRAY_OK && g.nscales > 0) {
    group = calloc((size_t)g.nscales, sizeof *group);
    if (group == NULL) {
      status = hurray__fail(error, HURRAY_ENOMEM, "quantize: no memory for %llu scales",
                            (unsigned long long)g.nscales);
    }
  }
  if (status != HURRAY_OK || g.numel == 0) {
    free(plan);
    free(group);
    return status;
  }
  const int block = options->layout == HURRAY_LAYOUT_BLOCK;
  const int last = plan->ndim - 1;
  const int64_t n = plan->shape[last];
  const Part *v = &plan->parts[0];
  const int64_t vstride = plan->maps[0].mult[last];
  const float qmax = options->dtype == HURRAY_DTYPE_INT4 ? 7.0f : 127.0f;
  float buf[ROW_CHUNK];
  memset(values, 0, (size_t)g.values_bytes);
  for (int pass = 0; pass < 2 && status == HURRAY_OK; pass++) {
    int64_t idx[HURRAY_MAX_NDIM] = {0};
    uint64_t flat = 0;
    for (;;) {
      int64_t vb = v->bit0 + map_offset(&plan->maps[0], idx, last) * v->bits;
      /* the row's first scale; along the row one per element, per block, or the same */
      const uint64_t s0 = scale_index(&g, block, options->block_size, idx, 0);
      const int along = g.axis == last;
      for (int64_t k0 = 0; k0 < n && status == HURRAY_OK; k0 += ROW_CHUNK) {
        int64_t len = n - k0 < ROW_CHUNK ? n - k0 : ROW_CHUNK;
        decode_row(v, vb + k0 * vstride * v->bits, vstride, len, buf);
        for (int64_t k = 0; k < len; k++) {
          uint64_t e = (uint64_t)(k0 + k);
          uint64_t s = !block ? (along ? e : s0)
                              : s0 + (along ? e / (uint64_t)options->block_size : e);
          float x = buf[k];
          if (pass == 0) {
            float a = x < 0 ? -x : x;
            if (!(a <= 0x1.fffffep127f)) {
              status = hurray__fail(error, HURRAY_EINVAL,
                                    "element %llu is %s: quantize takes finite values",
                                    (unsigned long long)(flat + (uint64_t)k),
                                    x != x ? "NaN" : "infinite");
              break;
            }
            if (a > group[s]) group[s] = a;
            continue;
          }
          float q = group[s] == 0.0f ? 0.0f : round_even(x / group[s]);
          q = q > qmax ? qmax : q < -qmax ? -qmax : q;
          int32_t qi = (int32_t)q;
          uint64_t at = flat + (uint64_t)k;
          if (options->dtype == HURRAY_DTYPE_INT8) {
            ((uint8_t *)values)[at] = (uint8_t)(qi & 0xFF);
          } else {
            ((uint8_t *)values)[at >> 1] |= (uint8_t)((uint32_t)(qi & 15) << (4 * (at & 1)));
          }
        }
        flat += (uint64_t)len;
      }
      if (status != HURRAY_OK) break;
      int k = last - 1;
      for (; k >= 0; k--) {
        if (++idx[k] < plan->shape[k]) break;
        idx[k] = 0;
      }
      if (k < 0) break;
    }
    if (pass == 0 && status == HURRAY_OK) { /* amax -> the scale as stored */
      for (uint64_t s = 0; s < g.nscales; s++) {
        float scale = group[s] / qmax;
        if (options->scale_dtype == HURRAY_DTYPE_FLOAT32) {
          ((float *)scales)[s] = scale;
        } else {
          uint16_t h = options->scale_dtype == HURRAY_DTYPE_FLOAT16 ? f32_to_f16(scale)
                                                                    : f32_to_bf16(scale);
          ((uint16_t *)scales)[s] = h;
          scale = options->scale_dtype == HURRAY_DTYPE_FLOAT16 ? f16_to_f32(h) : bf16_to_f32(h);
          if (!(scale <= 0x1.fffffep127f)) {
            status = hurray__fail(error, HURRAY_EINVAL,
                                  "scale %llu (%g) does not fit %s",
                                  (unsigned long long)s, (double)(group[s] / qmax),
                                  hurray_dtype_info(options->scale_dtype)->name);
            break;
          }
        }
        group[s] = scale;
      }
    }
  }
  free(plan);
  free(group);
  return status;
}

int hurray_quantize_new(const HurrayTensorDesc *tensor, const HurrayBufferList *buffers,
                        const HurrayQuantizeOptions *options, HurrayTensorContext **out,
                        HurrayError *error) {
  if (out == NULL) return hurray__fail(error, HURRAY_EINVAL, "quantize: out is NULL");
  *out = NULL;
  if (tensor == NULL) return hurray__fail(error, HURRAY_EINVAL, "quantize: tensor is NULL");
  QuantGeometry g;
  int status = quant_geometry(tensor->ndim, tensor->shape, options, &g, error);
  if (status != HURRAY_OK) return status;
  HurrayBufferList *list = NULL;
  HurrayBuffer *vb = NULL, *sb = NULL;
  status = hurray_buffer_list_create(2, &list, error);
  if (status == HURRAY_OK) status = hurray_buffer_alloc(g.values_bytes, 0, 0, &vb, error);
  if (status == HURRAY_OK) status = hurray_buffer_alloc(g.scales_bytes, 0, 0, &sb, error);
  if (status == HURRAY_OK) {
    status = hurray_quantize(tensor, buffers, options, vb->data, g.values_bytes, sb->data,
                             g.scales_bytes, error);
  }
  if (status == HURRAY_OK) {
    status = hurray_buffer_list_append(list, vb, HURRAY_ROLE_VALUES, NULL, error);
    vb = NULL; /* the list took it, or destroyed it */
  }
  if (status == HURRAY_OK) {
    status = hurray_buffer_list_append(list, sb, HURRAY_ROLE_SCALES, NULL, error);
    sb = NULL;
  }
  if (status != HURRAY_OK) {
    hurray_buffer_destroy(vb);
    hurray_buffer_destroy(sb);
    hurray_buffer_list_destroy(list);
    return status;
  }
  HurrayArray parts[2] = {
      {.shape = g.shape, .ndim = g.ndim, .buffer = 0, .dtype = options->dtype},
      {.shape = g.scale_shape, .ndim = g.scale_ndim, .buffer = 1, .dtype = options->scale_dtype},
  };
  HurrayTensorDesc desc = {.layout = options->layout,
                           .ndim = g.ndim,
                           .axis = g.axis,
                           .block_size = options->block_size,
                           .shape = g.shape,
                           .parts = parts,
                           .nparts = 2,
                           .dtype = options->dtype};
  /* SINK for the list; the context copies the descriptor. */
  return hurray_tensor_context_create(&desc, list, 0, NULL, NULL, out, error);
}
