/* test_file_helpers.h -- what the file-container tests (tests/c/test_file_*.c), the CLI test
 * file generator and the fuzz seed generator share: one sample tensor of every layout, built in
 * CPU memory from the public API, and a comparison of two tensors by their logical elements
 * (byte offsets may differ: the writer re-bases them). Header-only: static inline functions. */
#ifndef HURRAY_TEST_FILE_HELPERS_H
#define HURRAY_TEST_FILE_HELPERS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hurray/hurray.h"

/* Aborts with the error's message; the helpers are used by tests and generators alike. */
static inline void sample_check(int status, const HurrayError *error, const char *what) {
  if (status != HURRAY_OK) {
    fprintf(stderr, "%s failed: %s: %s\n", what, hurray_status_name(status),
            error != NULL ? error->message : "");
    abort();
  }
}

/* Appends a CPU buffer holding a copy of `size` bytes. */
static inline void sample_append(HurrayBufferList *list, const void *bytes, size_t size, int role) {
  HurrayError error = {0};
  HurrayBuffer *buffer = NULL;
  sample_check(hurray_buffer_alloc(size, 0, HURRAY_ALLOC_ZERO, &buffer, &error), &error,
               "hurray_buffer_alloc");
  if (size > 0) memcpy(buffer->data, bytes, size);
  sample_check(hurray_buffer_list_append(list, buffer, role, NULL, &error), &error,
               "hurray_buffer_list_append");
}

/* The tensor of the wire spec's golden frames (interchange.md §9): float32 [1, 2] in one
 * 64-byte-aligned buffer of 8 bytes. */
static inline HurrayTensorContext *sample_golden_pair(void) {
  static const int64_t shape[] = {2};
  static const float values[] = {1.0f, 2.0f};
  HurrayArray part = {.shape = shape, .ndim = 1, .dtype = HURRAY_DTYPE_FLOAT32};
  HurrayTensorDesc desc = {.layout = HURRAY_LAYOUT_DENSE, .ndim = 1, .shape = shape,
                           .parts = &part, .nparts = 1, .dtype = HURRAY_DTYPE_FLOAT32};
  HurrayError error = {0};
  HurrayBufferList *list = NULL;
  HurrayBuffer *buffer = NULL;
  HurrayTensorContext *context = NULL;
  sample_check(hurray_buffer_list_create(1, &list, &error), &error, "hurray_buffer_list_create");
  sample_check(hurray_buffer_alloc(sizeof values, 64, 0, &buffer, &error), &error,
               "hurray_buffer_alloc");
  memcpy(buffer->data, values, sizeof values);
  sample_check(hurray_buffer_list_append(list, buffer, HURRAY_ROLE_VALUES, NULL, &error), &error,
               "hurray_buffer_list_append");
  sample_check(hurray_tensor_context_create(&desc, list, 0, NULL, NULL, &context, &error), &error,
               "hurray_tensor_context_create");
  return context;
}

static inline HurrayBufferList *sample_list(void) {
  HurrayBufferList *list = NULL;
  HurrayError error = {0};
  sample_check(hurray_buffer_list_create(4, &list, &error), &error, "hurray_buffer_list_create");
  return list;
}

/* A tensor of one layout: the descriptor points into static storage of its builder, so a
 * builder's sample is valid until the builder runs again. */
typedef struct Sample {
  const char *name;
  HurrayTensorDesc desc;
  HurrayBufferList *list; /* owned */
} Sample;

#define SAMPLE_ARRAY(dtype_, ndim_, shape_, strides_, offset_, buffer_)                  \
  (HurrayArray) {                                                                        \
    .byte_offset = (offset_), .shape = (shape_), .strides = (strides_), .ndim = (ndim_), \
    .buffer = (buffer_), .dtype = (dtype_)                                               \
  }

static inline Sample sample_dense(void) {
  static const int64_t shape[] = {2, 3};
  static HurrayArray parts[1];
  const float values[] = {1, 2, 3, 4, 5, 6};
  Sample s = {.name = "dense", .list = sample_list()};
  sample_append(s.list, values, sizeof values, HURRAY_ROLE_VALUES);
  parts[0] = SAMPLE_ARRAY(HURRAY_DTYPE_FLOAT32, 2, shape, NULL, 0, 0);
  s.desc = (HurrayTensorDesc){.layout = HURRAY_LAYOUT_DENSE,
                              .ndim = 2,
                              .shape = shape,
                              .parts = parts,
                              .nparts = 1,
                              .dtype = HURRAY_DTYPE_FLOAT32};
  return s;
}

/* Column 1 of a [4, 3] float32 matrix: stride 3 elements, gaps inside the span. */
static inline Sample sample_strided(void) {
  static const int64_t shape[] = {4};
  static const int64_t strides[] = {3};
  static HurrayArray parts[1];
  float values[12];
  for (int i = 0; i < 12; i++) values[i] = (float)i * 0.5f;
  Sample s = {.name = "strided", .list = sample_list()};
  sample_append(s.list, values, sizeof values, HURRAY_ROLE_VALUES);
  parts[0] = SAMPLE_ARRAY(HURRAY_DTYPE_FLOAT32, 1, shape, strides, 4, 0);
  s.desc = (HurrayTensorDesc){.layout = HURRAY_LAYOUT_DENSE,
                              .ndim = 1,
                              .shape = shape,
                              .parts = parts,
                              .nparts = 1,
                              .dtype = HURRAY_DTYPE_FLOAT32};
  return s;
}

/* A [3, 2] int16 array read backwards along both axes (negative strides), 100 bytes into its
 * buffer, so the writer drops the leading bytes and keeps the address modulo 64. */
static inline Sample sample_negative(void) {
  static const int64_t shape[] = {3, 2};
  static const int64_t strides[] = {-2, -1};
  static HurrayArray parts[1];
  int16_t values[64];
  for (int i = 0; i < 64; i++) values[i] = (int16_t)(i * 7 - 100);
  Sample s = {.name = "negative", .list = sample_list()};
  sample_append(s.list, values, sizeof values, HURRAY_ROLE_VALUES);
  parts[0] = SAMPLE_ARRAY(HURRAY_DTYPE_INT16, 2, shape, strides, 100 + 5 * 2, 0);
  s.desc = (HurrayTensorDesc){.layout = HURRAY_LAYOUT_DENSE,
                              .ndim = 2,
                              .shape = shape,
                              .parts = parts,
                              .nparts = 1,
                              .dtype = HURRAY_DTYPE_INT16};
  return s;
}

static inline Sample sample_scalar(void) {
  static HurrayArray parts[1];
  const double value = 3.25;
  Sample s = {.name = "scalar", .list = sample_list()};
  sample_append(s.list, &value, sizeof value, HURRAY_ROLE_VALUES);
  parts[0] = SAMPLE_ARRAY(HURRAY_DTYPE_FLOAT64, 0, NULL, NULL, 0, 0);
  s.desc = (HurrayTensorDesc){.layout = HURRAY_LAYOUT_DENSE,
                              .ndim = 0,
                              .parts = parts,
                              .nparts = 1,
                              .dtype = HURRAY_DTYPE_FLOAT64};
  return s;
}

static inline Sample sample_empty(void) {
  static const int64_t shape[] = {0, 5};
  static HurrayArray parts[1];
  Sample s = {.name = "empty", .list = sample_list()};
  sample_append(s.list, NULL, 0, HURRAY_ROLE_VALUES);
  parts[0] = SAMPLE_ARRAY(HURRAY_DTYPE_FLOAT32, 2, shape, NULL, 0, 0);
  s.desc = (HurrayTensorDesc){.layout = HURRAY_LAYOUT_DENSE,
                              .ndim = 2,
                              .shape = shape,
                              .parts = parts,
                              .nparts = 1,
                              .dtype = HURRAY_DTYPE_FLOAT32};
  return s;
}

/* [3, 5] int4: 15 packed nibbles, low nibble first; row 1 starts in the middle of a byte. */
static inline Sample sample_int4(void) {
  static const int64_t shape[] = {3, 5};
  static HurrayArray parts[1];
  uint8_t packed[8] = {0};
  for (int i = 0; i < 15; i++) packed[i / 2] |= (uint8_t)(((i - 7) & 0xF) << (4 * (i % 2)));
  Sample s = {.name = "int4", .list = sample_list()};
  sample_append(s.list, packed, sizeof packed, HURRAY_ROLE_VALUES);
  parts[0] = SAMPLE_ARRAY(HURRAY_DTYPE_INT4, 2, shape, NULL, 0, 0);
  s.desc = (HurrayTensorDesc){.layout = HURRAY_LAYOUT_DENSE,
                              .ndim = 2,
                              .shape = shape,
                              .parts = parts,
                              .nparts = 1,
                              .dtype = HURRAY_DTYPE_INT4};
  return s;
}

/* int8 [4, 3] with per-row float32 scales and int8 zero points. */
static inline Sample sample_per_channel(void) {
  static const int64_t shape[] = {4, 3};
  static const int64_t channels[] = {4};
  static HurrayArray parts[3];
  int8_t values[12];
  for (int i = 0; i < 12; i++) values[i] = (int8_t)(i * 11 - 60);
  const float scales[] = {0.5f, 0.25f, 2.0f, 1.0f};
  const int8_t zero_points[] = {0, 1, -1, 3};
  Sample s = {.name = "per_channel", .list = sample_list()};
  sample_append(s.list, values, sizeof values, HURRAY_ROLE_VALUES);
  sample_append(s.list, scales, sizeof scales, HURRAY_ROLE_SCALES);
  sample_append(s.list, zero_points, sizeof zero_points, HURRAY_ROLE_ZERO_POINTS);
  parts[0] = SAMPLE_ARRAY(HURRAY_DTYPE_INT8, 2, shape, NULL, 0, 0);
  parts[1] = SAMPLE_ARRAY(HURRAY_DTYPE_FLOAT32, 1, channels, NULL, 0, 1);
  parts[2] = SAMPLE_ARRAY(HURRAY_DTYPE_INT8, 1, channels, NULL, 0, 2);
  s.desc = (HurrayTensorDesc){.layout = HURRAY_LAYOUT_PER_CHANNEL,
                              .ndim = 2,
                              .axis = 0,
                              .shape = shape,
                              .parts = parts,
                              .nparts = 3,
                              .dtype = HURRAY_DTYPE_INT8};
  return s;
}

/* int4 [2, 8], blocks of 4 along axis 1, float16 scales and mins [2, 2]. */
static inline Sample sample_block(void) {
  static const int64_t shape[] = {2, 8};
  static const int64_t blocks[] = {2, 2};
  static HurrayArray parts[3];
  uint8_t packed[8];
  for (int i = 0; i < 8; i++) packed[i] = (uint8_t)(0x10 * (i + 1) + i);
  const uint16_t scales[] = {0x3C00, 0x3800, 0x4000, 0x3400}; /* 1, 0.5, 2, 0.25 */
  const uint16_t mins[] = {0xBC00, 0x0000, 0x3C00, 0xC000};
  Sample s = {.name = "block", .list = sample_list()};
  sample_append(s.list, packed, sizeof packed, HURRAY_ROLE_VALUES);
  sample_append(s.list, scales, sizeof scales, HURRAY_ROLE_SCALES);
  sample_append(s.list, mins, sizeof mins, HURRAY_ROLE_MINS);
  parts[0] = SAMPLE_ARRAY(HURRAY_DTYPE_INT4, 2, shape, NULL, 0, 0);
  parts[1] = SAMPLE_ARRAY(HURRAY_DTYPE_FLOAT16, 2, blocks, NULL, 0, 1);
  parts[2] = SAMPLE_ARRAY(HURRAY_DTYPE_FLOAT16, 2, blocks, NULL, 0, 2);
  s.desc = (HurrayTensorDesc){.layout = HURRAY_LAYOUT_BLOCK,
                              .ndim = 2,
                              .axis = 1,
                              .block_size = 4,
                              .shape = shape,
                              .parts = parts,
                              .nparts = 3,
                              .dtype = HURRAY_DTYPE_INT4};
  return s;
}

/* A coalesced [4, 5] float32 COO tensor with 3 non-zeros. */
static inline Sample sample_coo(void) {
  static const int64_t shape[] = {4, 5};
  static const int64_t index_shape[] = {2, 3};
  static const int64_t nnz[] = {3};
  static HurrayArray parts[2];
  const int64_t indices[] = {0, 1, 3, /* rows */ 4, 0, 2 /* columns */};
  const float values[] = {1.5f, -2.0f, 8.0f};
  Sample s = {.name = "sparse_coo", .list = sample_list()};
  sample_append(s.list, indices, sizeof indices, HURRAY_ROLE_INDICES);
  sample_append(s.list, values, sizeof values, HURRAY_ROLE_VALUES);
  parts[0] = SAMPLE_ARRAY(HURRAY_DTYPE_INT64, 2, index_shape, NULL, 0, 0);
  parts[1] = SAMPLE_ARRAY(HURRAY_DTYPE_FLOAT32, 1, nnz, NULL, 0, 1);
  s.desc = (HurrayTensorDesc){.layout = HURRAY_LAYOUT_SPARSE_COO,
                              .flags = HURRAY_TENSOR_COALESCED,
                              .ndim = 2,
                              .shape = shape,
                              .parts = parts,
                              .nparts = 2,
                              .dtype = HURRAY_DTYPE_FLOAT32};
  return s;
}

/* A [3, 4] float64 CSR matrix with 3 non-zeros. */
static inline Sample sample_csr(void) {
  static const int64_t shape[] = {3, 4};
  static const int64_t rows[] = {4};
  static const int64_t nnz[] = {3};
  static HurrayArray parts[3];
  const int32_t indptr[] = {0, 1, 1, 3};
  const int32_t indices[] = {2, 0, 3};
  const double values[] = {1.0, 2.5, -4.0};
  Sample s = {.name = "sparse_csr", .list = sample_list()};
  sample_append(s.list, indptr, sizeof indptr, HURRAY_ROLE_INDPTR);
  sample_append(s.list, indices, sizeof indices, HURRAY_ROLE_INDICES);
  sample_append(s.list, values, sizeof values, HURRAY_ROLE_VALUES);
  parts[0] = SAMPLE_ARRAY(HURRAY_DTYPE_INT32, 1, rows, NULL, 0, 0);
  parts[1] = SAMPLE_ARRAY(HURRAY_DTYPE_INT32, 1, nnz, NULL, 0, 1);
  parts[2] = SAMPLE_ARRAY(HURRAY_DTYPE_FLOAT64, 1, nnz, NULL, 0, 2);
  s.desc = (HurrayTensorDesc){.layout = HURRAY_LAYOUT_SPARSE_CSR,
                              .ndim = 2,
                              .shape = shape,
                              .parts = parts,
                              .nparts = 3,
                              .dtype = HURRAY_DTYPE_FLOAT64};
  return s;
}

/* A paged KV cache: logical [2, 10, 4] bfloat16, paged along axis 1 in pages of 4 rows;
 * 6 pages of [4, 4] and a [2, 3] int32 page table. */
static inline Sample sample_paged(void) {
  static const int64_t shape[] = {2, 10, 4};
  static const int64_t pages_shape[] = {6, 4, 4};
  static const int64_t table_shape[] = {2, 3};
  static HurrayArray parts[2];
  uint16_t pages[6 * 4 * 4];
  for (int i = 0; i < 96; i++) pages[i] = (uint16_t)(0x3F80 + i);
  const int32_t table[] = {5, 0, 2, 1, 4, 3};
  Sample s = {.name = "paged", .list = sample_list()};
  sample_append(s.list, pages, sizeof pages, HURRAY_ROLE_PAGES);
  sample_append(s.list, table, sizeof table, HURRAY_ROLE_PAGE_TABLE);
  parts[0] = SAMPLE_ARRAY(HURRAY_DTYPE_BFLOAT16, 3, pages_shape, NULL, 0, 0);
  parts[1] = SAMPLE_ARRAY(HURRAY_DTYPE_INT32, 2, table_shape, NULL, 0, 1);
  s.desc = (HurrayTensorDesc){.layout = HURRAY_LAYOUT_PAGED,
                              .ndim = 3,
                              .axis = 1,
                              .block_size = 4,
                              .shape = shape,
                              .parts = parts,
                              .nparts = 2,
                              .dtype = HURRAY_DTYPE_BFLOAT16};
  return s;
}

/* A composite: "weight", per-channel int4 whose values and scales share one MIXED buffer with
 * unaddressed bytes between them; "bias", dense float32 in its own buffer; "inner", a
 * composite nested one level deeper whose child "bias_view" reads the same bias buffer. */
static inline Sample sample_composite(void) {
  static const int64_t weight_shape[] = {4, 8};
  static const int64_t channels[] = {4};
  static HurrayArray weight_parts[2], bias_parts[1], view_parts[1];
  static HurrayTensorDesc inner_children[1], children[3];
  static const char *const inner_names[] = {"bias_view"};
  static const char *const names[] = {"weight", "bias", "inner"};
  uint8_t mixed[1024] = {0};
  for (int i = 0; i < 16; i++) mixed[i] = (uint8_t)(i * 37 + 1);
  const float scales[] = {0.1f, 0.2f, 0.3f, 0.4f};
  memcpy(mixed + 512, scales, sizeof scales);
  memset(mixed + 16, 0xEE, 496); /* not addressed: never written */
  const float bias[] = {-1, 0, 1, 2};
  Sample s = {.name = "composite", .list = sample_list()};
  sample_append(s.list, mixed, sizeof mixed, HURRAY_ROLE_MIXED);
  sample_append(s.list, bias, sizeof bias, HURRAY_ROLE_VALUES);
  weight_parts[0] = SAMPLE_ARRAY(HURRAY_DTYPE_INT4, 2, weight_shape, NULL, 0, 0);
  weight_parts[1] = SAMPLE_ARRAY(HURRAY_DTYPE_FLOAT32, 1, channels, NULL, 512, 0);
  bias_parts[0] = SAMPLE_ARRAY(HURRAY_DTYPE_FLOAT32, 1, channels, NULL, 0, 1);
  view_parts[0] = SAMPLE_ARRAY(HURRAY_DTYPE_FLOAT32, 1, channels, NULL, 0, 1);
  inner_children[0] = (HurrayTensorDesc){.layout = HURRAY_LAYOUT_DENSE,
                                         .ndim = 1,
                                         .shape = channels,
                                         .parts = view_parts,
                                         .nparts = 1,
                                         .dtype = HURRAY_DTYPE_FLOAT32};
  children[0] = (HurrayTensorDesc){.layout = HURRAY_LAYOUT_PER_CHANNEL,
                                   .ndim = 2,
                                   .axis = 0,
                                   .shape = weight_shape,
                                   .parts = weight_parts,
                                   .nparts = 2,
                                   .dtype = HURRAY_DTYPE_INT4};
  children[1] = (HurrayTensorDesc){.layout = HURRAY_LAYOUT_DENSE,
                                   .ndim = 1,
                                   .shape = channels,
                                   .parts = bias_parts,
                                   .nparts = 1,
                                   .dtype = HURRAY_DTYPE_FLOAT32};
  children[2] = (HurrayTensorDesc){.layout = HURRAY_LAYOUT_COMPOSITE,
                                   .nchildren = 1,
                                   .children = inner_children,
                                   .child_names = inner_names};
  s.desc = (HurrayTensorDesc){.layout = HURRAY_LAYOUT_COMPOSITE,
                              .nchildren = 3,
                              .children = children,
                              .child_names = names};
  return s;
}

typedef Sample (*SampleFn)(void);

/* Every layout, with the dense edge cases. */
static const SampleFn kSamples[] = {
    sample_dense, sample_strided, sample_negative,    sample_scalar,
    sample_empty, sample_int4,    sample_per_channel, sample_block,
    sample_coo,   sample_csr,     sample_paged,       sample_composite,
};
#define SAMPLE_COUNT (sizeof kSamples / sizeof kSamples[0])

static inline void sample_free(Sample *s) {
  hurray_buffer_list_destroy(s->list);
  s->list = NULL;
}

/* ---- comparing tensors by their elements -------------------------------------------------- */

/* Element `i` of an array, as its `bits` bits in the low bits of out[0..15]. */
static inline void element_bits(const HurrayArray *a, const HurrayBufferList *list,
                                const int64_t *index, uint8_t out[16]) {
  unsigned bits = hurray_dtype_info(a->dtype)->bits;
  int64_t linear = 0, step = 1;
  for (int32_t k = a->ndim - 1; k >= 0; k--) {
    linear += index[k] * (a->strides ? a->strides[k] : step);
    step *= a->shape[k];
  }
  const uint8_t *data = list->buffers[a->buffer]->data;
  int64_t bit = (int64_t)a->byte_offset * 8 + linear * (int64_t)bits;
  memset(out, 0, 16);
  if (bits % 8 == 0) {
    memcpy(out, data + bit / 8, bits / 8);
  } else {
    out[0] = (uint8_t)((data[bit / 8] >> (bit % 8)) & ((1u << bits) - 1));
  }
}

static inline bool same_array_elements(const HurrayArray *a, const HurrayBufferList *la,
                                       const HurrayArray *b, const HurrayBufferList *lb) {
  if (a->dtype != b->dtype || a->ndim != b->ndim) return false;
  for (int32_t k = 0; k < a->ndim; k++) {
    if (a->shape[k] != b->shape[k]) return false;
    if (a->shape[k] == 0) return true;
  }
  int64_t index[HURRAY_MAX_NDIM] = {0};
  for (;;) {
    uint8_t x[16], y[16];
    element_bits(a, la, index, x);
    element_bits(b, lb, index, y);
    if (memcmp(x, y, sizeof x) != 0) return false;
    int32_t k = a->ndim - 1;
    while (k >= 0 && ++index[k] == a->shape[k]) index[k--] = 0;
    if (k < 0) return true;
  }
}

/* Same descriptor (byte offsets aside) and same elements; strides must be equally present. */
static inline bool same_tensor(const HurrayTensorDesc *a, const HurrayBufferList *la,
                               const HurrayTensorDesc *b, const HurrayBufferList *lb) {
  if (a->layout != b->layout || a->flags != b->flags || a->ndim != b->ndim || a->axis != b->axis ||
      a->block_size != b->block_size || a->dtype != b->dtype || a->nparts != b->nparts ||
      a->nchildren != b->nchildren) {
    return false;
  }
  for (int32_t k = 0; k < a->ndim; k++) {
    if (a->shape[k] != b->shape[k]) return false;
  }
  for (uint32_t i = 0; i < a->nparts; i++) {
    const HurrayArray *x = &a->parts[i], *y = &b->parts[i];
    if (x->buffer != y->buffer || (x->strides == NULL) != (y->strides == NULL)) return false;
    if (x->strides && memcmp(x->strides, y->strides, (size_t)x->ndim * sizeof(int64_t)) != 0) {
      return false;
    }
    if (la->roles[x->buffer] != lb->roles[y->buffer]) return false;
    if (!same_array_elements(x, la, y, lb)) return false;
  }
  for (uint32_t i = 0; i < a->nchildren; i++) {
    if (strcmp(a->child_names[i], b->child_names[i]) != 0 ||
        !same_tensor(&a->children[i], la, &b->children[i], lb)) {
      return false;
    }
  }
  return true;
}

/* ---- file images: resealing, as a writer of a hostile file would ----------------------- */

#ifdef XXHASH_H_5627135585666179
static inline uint64_t image_load64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

static inline void image_store64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Recomputes the checksum of every index chunk, of the chunk table and of the header
 * (file-format.md §3, §5.6) of a file image, so that a change reaches the checks behind them.
 * Where the header does not locate an index and its chunk table inside the image, only the
 * header checksum is recomputed. Needs <xxhash.h> included first. */
static inline void image_reseal(uint8_t *bytes, size_t size) {
  if (size < 64) return;
  uint64_t offset = image_load64(bytes + 24), length = image_load64(bytes + 32);
  unsigned log2 = bytes[13];
  if (log2 >= 12 && log2 <= 28 && offset <= size && length <= size - offset) {
    uint64_t chunk = (uint64_t)1 << log2, chunks = (length + chunk - 1) >> log2;
    uint64_t table = offset + length;
    if (chunks <= (size - table) / 8) {
      for (uint64_t c = 0; c < chunks; c++) {
        uint64_t n = length - c * chunk < chunk ? length - c * chunk : chunk;
        image_store64(bytes + table + 8 * c, XXH3_64bits(bytes + offset + c * chunk, (size_t)n));
      }
      image_store64(bytes + 40, XXH3_64bits(bytes + table, (size_t)(chunks * 8)));
    }
  }
  image_store64(bytes + 56, XXH3_64bits(bytes, 56));
}
#endif

#endif /* HURRAY_TEST_FILE_HELPERS_H */
