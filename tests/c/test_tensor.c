/* test_tensor.c -- tensor descriptors: a valid case of every layout over real buffers, the
 * bounds rule (off by one byte, negative strides, byte offsets, sub-byte spans, overflow), the
 * accepted oddities (non-contiguous, zero-size, size-1 dimensions with odd strides, 0-d), the
 * content checks that run only with HURRAY_VALIDATE_CONTENTS, composite names and nesting, and
 * the one-block deep copy. Every validation is repeated on a clone, which must agree. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hurray/hurray.h"

#define DIMS(...) ((const int64_t[]){__VA_ARGS__})
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* ---- helpers ------------------------------------------------------------------------------- */

/* A list of zeroed CPU buffers of the given sizes, each with role MIXED. */
static HurrayBufferList *make_list(const uint64_t *sizes, uint32_t count) {
  HurrayBufferList *list = NULL;
  assert_int_equal(hurray_buffer_list_create(count, &list, NULL), HURRAY_OK);
  for (uint32_t i = 0; i < count; i++) {
    HurrayBuffer *buffer = NULL;
    assert_int_equal(hurray_buffer_alloc(sizes[i], 0, HURRAY_ALLOC_ZERO, &buffer, NULL), HURRAY_OK);
    assert_int_equal(hurray_buffer_list_append(list, buffer, HURRAY_ROLE_MIXED, NULL, NULL),
                     HURRAY_OK);
  }
  return list;
}
#define LIST(...) \
  make_list((const uint64_t[]){__VA_ARGS__}, COUNT(((const uint64_t[]){__VA_ARGS__})))

static void release_free(HurrayBuffer *self) {
  free(self->data);
}

/* Appends a buffer that claims to be CUDA memory (host bytes the library must not read). */
static void append_device_buffer(HurrayBufferList *list, uint64_t size) {
  const HurrayBufferDesc desc = {.byte_size = size,
                                 .alignment = 64,
                                 .device_tag = HURRAY_DEVICE_CUDA,
                                 .memory_class = HURRAY_MEM_DEVICE,
                                 .sync_mode = HURRAY_SYNC_READY};
  void *data = aligned_alloc(64, (size + 63) / 64 * 64);
  assert_non_null(data);
  memset(data, 0x7F, size); /* every index an int32 reader would see is out of range */
  HurrayBuffer *buffer = NULL;
  assert_int_equal(hurray_buffer_wrap(data, &desc, 0, NULL, 0, release_free, NULL, &buffer, NULL),
                   HURRAY_OK);
  assert_int_equal(hurray_buffer_list_append(list, buffer, HURRAY_ROLE_INDICES, NULL, NULL),
                   HURRAY_OK);
}

static void *data_of(const HurrayBufferList *list, uint32_t index) {
  return list->buffers[index]->data;
}

static void put_i32(const HurrayBufferList *list, uint32_t index, const int32_t *values,
                    size_t count) {
  memcpy(data_of(list, index), values, count * sizeof *values);
}

static void put_i64(const HurrayBufferList *list, uint32_t index, const int64_t *values,
                    size_t count) {
  memcpy(data_of(list, index), values, count * sizeof *values);
}

/* Validates `tensor`, expects `want`, and, when `fragment` is given, a message containing it.
 * A clone of the tensor must validate to the same status and message. */
static void expect_message(const HurrayTensorDesc *tensor, const HurrayBufferList *list,
                           uint32_t flags, int want, const char *fragment) {
  HurrayError error = {0};
  int got = hurray_tensor_validate(tensor, list, flags, &error);
  if (got != want || (fragment != NULL && strstr(error.message, fragment) == NULL)) {
    print_error("expected %s (\"%s\"), got %s: %s\n", hurray_status_name(want),
                fragment ? fragment : "", hurray_status_name(got), error.message);
  }
  assert_int_equal(got, want);
  if (want != HURRAY_OK) {
    assert_int_equal(error.code, want);
    assert_true(error.message[0] != '\0');
  }
  if (fragment != NULL) assert_non_null(strstr(error.message, fragment));

  HurrayTensorDesc *copy = NULL;
  if (hurray_tensor_desc_clone(tensor, &copy, NULL) == HURRAY_OK) {
    HurrayError copy_error = {0};
    assert_int_equal(hurray_tensor_validate(copy, list, flags, &copy_error), got);
    assert_string_equal(copy_error.message, error.message);
    hurray_tensor_desc_destroy(copy);
  }
}

static void expect_status(const HurrayTensorDesc *tensor, const HurrayBufferList *list,
                          uint32_t flags, int want) {
  expect_message(tensor, list, flags, want, NULL);
}

/* Valid without HURRAY_VALIDATE_CONTENTS, `want` with it. */
static void expect_contents(const HurrayTensorDesc *tensor, const HurrayBufferList *list, int want,
                            const char *fragment) {
  expect_status(tensor, list, 0, HURRAY_OK);
  expect_message(tensor, list, HURRAY_VALIDATE_CONTENTS, want, fragment);
}

static HurrayArray array(uint8_t dtype, int32_t ndim, const int64_t *shape, const int64_t *strides,
                         uint64_t byte_offset, uint32_t buffer) {
  return (HurrayArray){.byte_offset = byte_offset,
                       .shape = shape,
                       .strides = strides,
                       .ndim = ndim,
                       .buffer = buffer,
                       .dtype = dtype};
}

static HurrayTensorDesc dense(const HurrayArray *values) {
  return (HurrayTensorDesc){.layout = HURRAY_LAYOUT_DENSE,
                            .ndim = values->ndim,
                            .shape = values->shape,
                            .parts = values,
                            .nparts = 1,
                            .dtype = values->dtype};
}

/* A dense tensor of one array over one zeroed buffer of `buffer_size` bytes. */
static void expect_dense(HurrayArray values, uint64_t buffer_size, int want, const char *fragment) {
  HurrayBufferList *list = LIST(buffer_size);
  HurrayTensorDesc tensor = dense(&values);
  expect_message(&tensor, list, HURRAY_VALIDATE_CONTENTS, want, fragment);
  hurray_buffer_list_destroy(list);
}

/* ---- names, numel, span -------------------------------------------------------------------- */

static void layout_names(void **state) {
  (void)state;
  static const char *const kNames[] = {"dense",      "per_channel", "block",    "sparse_coo",
                                       "sparse_csr", "paged",       "composite"};
  for (int i = 0; i < (int)COUNT(kNames); i++) {
    assert_string_equal(hurray_layout_name(i), kNames[i]);
  }
  assert_null(hurray_layout_name(-1));
  assert_null(hurray_layout_name(7));
}

/* The layout table bindings build tensors from: each layout's parts, their roles, the values
 * part and the parameters, as hurray.h's "Tensor descriptors" lists them. */
static void layout_info_describes_each_layout(void **state) {
  (void)state;
  static const struct {
    uint8_t min_parts, max_parts, values_part;
    const char *roles[HURRAY_MAX_PARTS];
    uint8_t flags;
    int32_t min_ndim, max_ndim;
  } kExpected[] = {
      {1, 1, 0, {"values"}, HURRAY_LAYOUT_VALUES_SHAPE, 0, HURRAY_MAX_NDIM},
      {2, 3, 0, {"values", "scales", "zero_points"},
       HURRAY_LAYOUT_HAS_AXIS | HURRAY_LAYOUT_VALUES_SHAPE, 1, HURRAY_MAX_NDIM},
      {2, 3, 0, {"values", "scales", "mins"},
       HURRAY_LAYOUT_HAS_AXIS | HURRAY_LAYOUT_HAS_BLOCK_SIZE | HURRAY_LAYOUT_VALUES_SHAPE, 1,
       HURRAY_MAX_NDIM},
      {2, 2, 1, {"indices", "values"}, 0, 1, HURRAY_MAX_NDIM},
      {3, 3, 2, {"indptr", "indices", "values"}, 0, 2, 2},
      {2, 2, 0, {"pages", "page_table"}, HURRAY_LAYOUT_HAS_AXIS | HURRAY_LAYOUT_HAS_BLOCK_SIZE, 1,
       HURRAY_MAX_NDIM},
      {0, 0, HURRAY_LAYOUT_NO_PART, {NULL}, 0, 0, 0},
  };
  for (int i = 0; i < (int)COUNT(kExpected); i++) {
    const HurrayLayoutInfo *info = hurray_layout_info(i);
    assert_non_null(info);
    assert_int_equal(info->code, i);
    assert_ptr_equal(info->name, hurray_layout_name(i));
    assert_int_equal(info->min_parts, kExpected[i].min_parts);
    assert_int_equal(info->max_parts, kExpected[i].max_parts);
    assert_int_equal(info->values_part, kExpected[i].values_part);
    for (uint8_t k = 0; k < info->max_parts; k++) {
      assert_string_equal(hurray_buffer_role_name(info->roles[k]), kExpected[i].roles[k]);
    }
    assert_int_equal(info->flags, kExpected[i].flags);
    assert_int_equal(info->min_ndim, kExpected[i].min_ndim);
    assert_int_equal(info->max_ndim, kExpected[i].max_ndim);
  }
  assert_null(hurray_layout_info(-1));
  assert_null(hurray_layout_info(7));
}

static void numel_is_the_overflow_checked_product(void **state) {
  (void)state;
  uint64_t n = 0;
  HurrayArray a = array(HURRAY_DTYPE_FLOAT32, 2, DIMS(2, 3), NULL, 0, 0);
  assert_int_equal(hurray_array_numel(&a, &n, NULL), HURRAY_OK);
  assert_int_equal(n, 6);
  a = array(HURRAY_DTYPE_FLOAT32, 0, NULL, NULL, 0, 0);
  assert_int_equal(hurray_array_numel(&a, &n, NULL), HURRAY_OK);
  assert_int_equal(n, 1);
  a = array(HURRAY_DTYPE_FLOAT32, 3, DIMS(HURRAY_MAX_DIM, 0, HURRAY_MAX_DIM), NULL, 0, 0);
  assert_int_equal(hurray_array_numel(&a, &n, NULL), HURRAY_OK);
  assert_int_equal(n, 0);
  a = array(HURRAY_DTYPE_FLOAT32, 2, DIMS(HURRAY_MAX_DIM, 4), NULL, 0, 0);
  assert_int_equal(hurray_array_numel(&a, &n, NULL), HURRAY_EOVERFLOW);
  a = array(HURRAY_DTYPE_FLOAT32, 1, DIMS(-1), NULL, 0, 0);
  assert_int_equal(hurray_array_numel(&a, &n, NULL), HURRAY_EINVAL);
  assert_int_equal(hurray_array_numel(&a, NULL, NULL), HURRAY_EINVAL);
  assert_int_equal(hurray_array_numel(NULL, &n, NULL), HURRAY_EINVAL);
}

static void expect_span(HurrayArray a, uint64_t begin, uint64_t end) {
  uint64_t b = 1, e = 1;
  HurrayError error = {0};
  assert_int_equal(hurray_array_span(&a, &b, &e, &error), HURRAY_OK);
  assert_int_equal(b, begin);
  assert_int_equal(e, end);
}

static void expect_span_fails(HurrayArray a, int want) {
  uint64_t b = 0, e = 0;
  HurrayError error = {0};
  assert_int_equal(hurray_array_span(&a, &b, &e, &error), want);
  assert_int_equal(error.code, want);
}

static void span_covers_the_addressed_bytes(void **state) {
  (void)state;
  expect_span(array(HURRAY_DTYPE_FLOAT32, 2, DIMS(2, 3), NULL, 0, 0), 0, 24);
  expect_span(array(HURRAY_DTYPE_FLOAT32, 2, DIMS(2, 3), DIMS(1, 2), 4, 0), 4, 28);
  expect_span(array(HURRAY_DTYPE_FLOAT32, 1, DIMS(3), DIMS(-1), 8, 0), 0, 12);
  expect_span(array(HURRAY_DTYPE_FLOAT64, 0, NULL, NULL, 16, 0), 16, 24);
  expect_span(array(HURRAY_DTYPE_FLOAT32, 2, DIMS(0, 7), NULL, 1000, 0), 1000, 1000);
  expect_span(array(HURRAY_DTYPE_FLOAT32, 2, DIMS(1, 2), DIMS(999, 1), 0, 0), 0, 8);
  /* sub-byte: the last element needs one more byte */
  expect_span(array(HURRAY_DTYPE_INT4, 1, DIMS(2), NULL, 0, 0), 0, 1);
  expect_span(array(HURRAY_DTYPE_INT4, 1, DIMS(3), NULL, 0, 0), 0, 2);
  expect_span(array(HURRAY_DTYPE_INT4, 1, DIMS(3), DIMS(-1), 1, 0), 0, 2);
  expect_span(array(HURRAY_DTYPE_UINT1, 1, DIMS(9), NULL, 0, 0), 0, 2);
  expect_span(array(HURRAY_DTYPE_FLOAT6_E2M3FN, 1, DIMS(4), NULL, 0, 0), 0, 3);
  expect_span(array(HURRAY_DTYPE_FLOAT6_E2M3FN, 1, DIMS(5), NULL, 0, 0), 0, 4);
  expect_span(array(HURRAY_DTYPE_UINT2, 1, DIMS(3), DIMS(2), 1, 0), 1, 3);
}

static void span_rejects_what_no_buffer_holds(void **state) {
  (void)state;
  expect_span_fails(array(HURRAY_DTYPE_FLOAT32, 1, DIMS(3), DIMS(-1), 4, 0), HURRAY_EBOUNDS);
  expect_span_fails(array(HURRAY_DTYPE_UINT8, 1, DIMS(2), DIMS(INT64_MAX), 0, 0), HURRAY_EOVERFLOW);
  expect_span_fails(array(HURRAY_DTYPE_UINT8, 1, DIMS(2), DIMS(INT64_MIN), 0, 0), HURRAY_EOVERFLOW);
  expect_span_fails(array(HURRAY_DTYPE_UINT8, 2, DIMS(HURRAY_MAX_DIM, HURRAY_MAX_DIM), NULL, 0, 0),
                    HURRAY_EOVERFLOW);
  expect_span_fails(array(HURRAY_DTYPE_FLOAT64, 1, DIMS(HURRAY_MAX_DIM), NULL, 0, 0),
                    HURRAY_EOVERFLOW);
  expect_span_fails(array(HURRAY_DTYPE_UINT8, 1, DIMS(1), NULL, UINT64_MAX, 0), HURRAY_EOVERFLOW);
  expect_span_fails(array(HURRAY_DTYPE_UINT8, 1, DIMS(1), NULL, INT64_MAX / 8, 0),
                    HURRAY_EOVERFLOW);
  expect_span_fails(array(HURRAY_DTYPE_UINT8, 1, DIMS(INT64_MAX), NULL, 0, 0), HURRAY_ELIMIT);
  expect_span_fails(array(HURRAY_DTYPE_UINT8, 1, DIMS(-2), NULL, 0, 0), HURRAY_EINVAL);
  expect_span_fails(array(HURRAY_DTYPE_UINT8, HURRAY_MAX_NDIM + 1, NULL, NULL, 0, 0),
                    HURRAY_ELIMIT);
  expect_span_fails(array(HURRAY_DTYPE_UINT8, -1, NULL, NULL, 0, 0), HURRAY_EINVAL);
  expect_span_fails(array(HURRAY_DTYPE_UINT8, 2, NULL, NULL, 0, 0), HURRAY_EINVAL);
  expect_span_fails(array(200, 1, DIMS(1), NULL, 0, 0), HURRAY_EDTYPE);
  expect_span_fails(array(HURRAY_DTYPE_INVALID, 1, DIMS(1), NULL, 0, 0), HURRAY_EDTYPE);
  HurrayArray a = array(HURRAY_DTYPE_UINT8, 1, DIMS(1), NULL, 0, 0);
  a.reserved[6] = 1;
  expect_span_fails(a, HURRAY_EINVAL);
  uint64_t b = 0;
  assert_int_equal(hurray_array_span(&a, &b, NULL, NULL), HURRAY_EINVAL);
}

/* ---- dense: the bounds rule ---------------------------------------------------------------- */

static void dense_bounds(void **state) {
  (void)state;
  const int64_t *shape = DIMS(2, 3);
  expect_dense(array(HURRAY_DTYPE_FLOAT32, 2, shape, NULL, 0, 0), 24, HURRAY_OK, NULL);
  expect_dense(array(HURRAY_DTYPE_FLOAT32, 2, shape, NULL, 0, 0), 23, HURRAY_EBOUNDS,
               "part 0 (values): addresses bytes [0, 24) of buffer 0, whose byte_size is 23");
  expect_dense(array(HURRAY_DTYPE_FLOAT32, 2, shape, NULL, 4, 0), 28, HURRAY_OK, NULL);
  expect_dense(array(HURRAY_DTYPE_FLOAT32, 2, shape, NULL, 4, 0), 27, HURRAY_EBOUNDS, NULL);
  expect_dense(array(HURRAY_DTYPE_FLOAT32, 2, shape, NULL, 100, 0), 24, HURRAY_EBOUNDS,
               "[100, 124)");
  /* negative strides: the first element is the last in memory */
  expect_dense(array(HURRAY_DTYPE_FLOAT32, 2, shape, DIMS(-3, -1), 20, 0), 24, HURRAY_OK, NULL);
  expect_dense(array(HURRAY_DTYPE_FLOAT32, 2, shape, DIMS(-3, -1), 16, 0), 24, HURRAY_EBOUNDS,
               "[-4, 20)");
  expect_dense(array(HURRAY_DTYPE_FLOAT32, 2, shape, DIMS(3, -1), 8, 0), 24, HURRAY_OK, NULL);
  expect_dense(array(HURRAY_DTYPE_FLOAT32, 2, shape, DIMS(3, -1), 8, 0), 23, HURRAY_EBOUNDS, NULL);
  /* a byte offset that is not a multiple of the element size is allowed */
  expect_dense(array(HURRAY_DTYPE_FLOAT32, 2, shape, NULL, 1, 0), 25, HURRAY_OK, NULL);
}

static void dense_accepts_odd_but_valid_arrays(void **state) {
  (void)state;
  /* non-contiguous: column-major, and every other element */
  expect_dense(array(HURRAY_DTYPE_FLOAT32, 2, DIMS(2, 3), DIMS(1, 2), 0, 0), 24, HURRAY_OK, NULL);
  expect_dense(array(HURRAY_DTYPE_INT16, 1, DIMS(4), DIMS(2), 0, 0), 14, HURRAY_OK, NULL);
  expect_dense(array(HURRAY_DTYPE_INT16, 1, DIMS(4), DIMS(2), 0, 0), 13, HURRAY_EBOUNDS, NULL);
  /* broadcast: stride 0 */
  expect_dense(array(HURRAY_DTYPE_FLOAT32, 2, DIMS(HURRAY_MAX_DIM, 2), DIMS(0, 1), 0, 0), 8,
               HURRAY_OK, NULL);
  /* zero-size: nothing is addressed, whatever the offset and strides, even in an empty buffer */
  expect_dense(array(HURRAY_DTYPE_FLOAT32, 2, DIMS(0, 3), NULL, 4096, 0), 16, HURRAY_OK, NULL);
  expect_dense(array(HURRAY_DTYPE_FLOAT32, 2, DIMS(3, 0), DIMS(INT64_MAX, INT64_MIN), 0, 0), 0,
               HURRAY_OK, NULL);
  expect_dense(array(HURRAY_DTYPE_FLOAT32, 3, DIMS(HURRAY_MAX_DIM, 0, HURRAY_MAX_DIM), NULL, 0, 0),
               0, HURRAY_OK, NULL);
  /* size-1 dimensions with odd strides (as some producers write them) */
  expect_dense(array(HURRAY_DTYPE_FLOAT32, 2, DIMS(1, 4), DIMS(12345, 1), 0, 0), 16, HURRAY_OK,
               NULL);
  expect_dense(array(HURRAY_DTYPE_FLOAT32, 2, DIMS(4, 1), DIMS(1, INT64_MIN), 0, 0), 16, HURRAY_OK,
               NULL);
  expect_dense(array(HURRAY_DTYPE_FLOAT32, 1, DIMS(1), DIMS(INT64_MAX), 0, 0), 4, HURRAY_OK, NULL);
  /* 0-d: one element */
  expect_dense(array(HURRAY_DTYPE_FLOAT64, 0, NULL, NULL, 0, 0), 8, HURRAY_OK, NULL);
  expect_dense(array(HURRAY_DTYPE_FLOAT64, 0, NULL, NULL, 8, 0), 16, HURRAY_OK, NULL);
  expect_dense(array(HURRAY_DTYPE_FLOAT64, 0, NULL, NULL, 0, 0), 7, HURRAY_EBOUNDS, NULL);
  expect_dense(array(HURRAY_DTYPE_FLOAT64, 0, NULL, NULL, 0, 0), 0, HURRAY_EBOUNDS, NULL);
}

static void dense_sub_byte_spans(void **state) {
  (void)state;
  expect_dense(array(HURRAY_DTYPE_INT4, 1, DIMS(2), NULL, 0, 0), 1, HURRAY_OK, NULL);
  expect_dense(array(HURRAY_DTYPE_INT4, 1, DIMS(3), NULL, 0, 0), 1, HURRAY_EBOUNDS, "bytes [0, 2)");
  expect_dense(array(HURRAY_DTYPE_INT4, 1, DIMS(3), NULL, 0, 0), 2, HURRAY_OK, NULL);
  expect_dense(array(HURRAY_DTYPE_INT4, 1, DIMS(3), DIMS(2), 0, 0), 2, HURRAY_EBOUNDS, NULL);
  expect_dense(array(HURRAY_DTYPE_INT4, 1, DIMS(3), DIMS(2), 0, 0), 3, HURRAY_OK, NULL);
  expect_dense(array(HURRAY_DTYPE_INT4, 1, DIMS(3), DIMS(-1), 1, 0), 2, HURRAY_OK, NULL);
  expect_dense(array(HURRAY_DTYPE_INT4, 1, DIMS(4), DIMS(-1), 1, 0), 2, HURRAY_EBOUNDS, "[-1, 2)");
  expect_dense(array(HURRAY_DTYPE_UINT1, 1, DIMS(8), NULL, 0, 0), 1, HURRAY_OK, NULL);
  expect_dense(array(HURRAY_DTYPE_UINT1, 1, DIMS(9), NULL, 0, 0), 1, HURRAY_EBOUNDS, NULL);
  expect_dense(array(HURRAY_DTYPE_UINT1, 2, DIMS(3, 3), NULL, 1, 0), 3, HURRAY_OK, NULL);
  expect_dense(array(HURRAY_DTYPE_UINT1, 2, DIMS(3, 3), NULL, 2, 0), 3, HURRAY_EBOUNDS, NULL);
  expect_dense(array(HURRAY_DTYPE_FLOAT6_E3M2FN, 1, DIMS(4), NULL, 0, 0), 3, HURRAY_OK, NULL);
  expect_dense(array(HURRAY_DTYPE_FLOAT6_E3M2FN, 1, DIMS(5), NULL, 0, 0), 3, HURRAY_EBOUNDS, NULL);
  expect_dense(array(HURRAY_DTYPE_FLOAT6_E3M2FN, 1, DIMS(5), NULL, 0, 0), 4, HURRAY_OK, NULL);
  expect_dense(array(HURRAY_DTYPE_FLOAT4_E2M1FN, 2, DIMS(2, 2), DIMS(1, 2), 0, 0), 2, HURRAY_OK,
               NULL);
}

static void dense_overflow_and_limits(void **state) {
  (void)state;
  expect_dense(array(HURRAY_DTYPE_UINT8, 1, DIMS(2), DIMS(INT64_MAX), 0, 0), 16, HURRAY_EOVERFLOW,
               "overflow");
  expect_dense(array(HURRAY_DTYPE_UINT8, 1, DIMS(2), DIMS(INT64_MIN), 0, 0), 16, HURRAY_EOVERFLOW,
               NULL);
  expect_dense(array(HURRAY_DTYPE_UINT8, 2, DIMS(3, 2), DIMS(INT64_MAX / 2, INT64_MAX / 2), 0, 0),
               16, HURRAY_EOVERFLOW, NULL);
  expect_dense(array(HURRAY_DTYPE_INT4, 1, DIMS(HURRAY_MAX_DIM), DIMS(8), 0, 0), 16,
               HURRAY_EOVERFLOW, NULL);
  expect_dense(array(HURRAY_DTYPE_UINT8, 3, DIMS(HURRAY_MAX_DIM, HURRAY_MAX_DIM, 2), NULL, 0, 0),
               16, HURRAY_EOVERFLOW, NULL);
  expect_dense(array(HURRAY_DTYPE_UINT8, 1, DIMS(1), NULL, UINT64_MAX, 0), 16, HURRAY_EOVERFLOW,
               "byte_offset");
  expect_dense(array(HURRAY_DTYPE_UINT8, 1, DIMS(INT64_MAX), NULL, 0, 0), 16, HURRAY_ELIMIT,
               "HURRAY_MAX_DIM");
  expect_dense(array(HURRAY_DTYPE_UINT8, 1, DIMS(HURRAY_MAX_DIM + 1), NULL, 0, 0), 16,
               HURRAY_ELIMIT, NULL);
  expect_dense(array(HURRAY_DTYPE_UINT8, 1, DIMS(HURRAY_MAX_DIM), NULL, 0, 0), 16, HURRAY_EOVERFLOW,
               NULL); /* 2^65 bits */
  expect_dense(array(HURRAY_DTYPE_UINT1, 1, DIMS(HURRAY_MAX_DIM), NULL, 0, 0), 16, HURRAY_EBOUNDS,
               "[0, 576460752303423488)");
  expect_dense(array(HURRAY_DTYPE_UINT8, 1, DIMS(-1), NULL, 0, 0), 16, HURRAY_EINVAL, "negative");
  expect_dense(array(HURRAY_DTYPE_UINT8, HURRAY_MAX_NDIM + 1, NULL, NULL, 0, 0), 16, HURRAY_ELIMIT,
               "HURRAY_MAX_NDIM");
  expect_dense(array(HURRAY_DTYPE_UINT8, 1, NULL, NULL, 0, 0), 16, HURRAY_EINVAL, "NULL");
  expect_dense(array(99, 1, DIMS(1), NULL, 0, 0), 16, HURRAY_EDTYPE, NULL);

  /* HURRAY_MAX_NDIM dimensions of extent 1 are fine */
  int64_t ones[HURRAY_MAX_NDIM];
  for (int k = 0; k < HURRAY_MAX_NDIM; k++) ones[k] = 1;
  expect_dense(array(HURRAY_DTYPE_UINT8, HURRAY_MAX_NDIM, ones, NULL, 0, 0), 1, HURRAY_OK, NULL);
}

static void dense_structure(void **state) {
  (void)state;
  HurrayBufferList *list = LIST(24);
  const int64_t *shape = DIMS(2, 3);
  HurrayArray values = array(HURRAY_DTYPE_FLOAT32, 2, shape, NULL, 0, 0);
  HurrayTensorDesc t = dense(&values);
  expect_status(&t, list, 0, HURRAY_OK);
  expect_status(&t, list, HURRAY_VALIDATE_CONTENTS, HURRAY_OK);
  assert_int_equal(hurray_tensor_validate(&t, list, 0, NULL), HURRAY_OK); /* NULL error */

  HurrayTensorDesc bad = t;
  bad.shape = DIMS(3, 2);
  expect_message(&bad, list, 0, HURRAY_ELAYOUT,
                 "part 0 (values): shape is [2, 3], expected [3, 2]");
  bad = t;
  bad.dtype = HURRAY_DTYPE_INT32;
  expect_message(&bad, list, 0, HURRAY_ELAYOUT, "dtype is float32, expected int32");
  bad = t;
  bad.dtype = 250;
  expect_status(&bad, list, 0, HURRAY_EDTYPE);
  bad = t;
  bad.axis = 1;
  expect_status(&bad, list, 0, HURRAY_ELAYOUT);
  bad = t;
  bad.block_size = 4;
  expect_status(&bad, list, 0, HURRAY_ELAYOUT);
  HurrayArray two[2] = {values, values};
  bad = t;
  bad.parts = two;
  bad.nparts = 2;
  expect_message(&bad, list, 0, HURRAY_ELAYOUT, "a dense tensor has 1 parts, not 2");
  bad = t;
  bad.nparts = 0;
  expect_status(&bad, list, 0, HURRAY_ELAYOUT);
  bad = t;
  bad.parts = NULL;
  expect_status(&bad, list, 0, HURRAY_EINVAL);
  bad = t;
  bad.layout = 7;
  expect_message(&bad, list, 0, HURRAY_ELAYOUT, "layout 7 is unknown");
  bad = t;
  bad.flags = 1u << 5;
  expect_status(&bad, list, 0, HURRAY_EINVAL);
  bad = t;
  bad.flags = HURRAY_TENSOR_COALESCED;
  expect_status(&bad, list, 0, HURRAY_ELAYOUT);
  bad = t;
  bad.reserved0[1] = 1;
  expect_status(&bad, list, 0, HURRAY_EINVAL);
  bad = t;
  bad.reserved2[1] = 1;
  expect_status(&bad, list, 0, HURRAY_EINVAL);
  bad = t;
  bad.nchildren = 1;
  expect_status(&bad, list, 0, HURRAY_ELAYOUT);
  bad = t;
  bad.ndim = -1;
  expect_status(&bad, list, 0, HURRAY_EINVAL);
  bad = t;
  bad.ndim = HURRAY_MAX_NDIM + 1;
  expect_status(&bad, list, 0, HURRAY_ELIMIT);

  HurrayArray wrong = values;
  wrong.buffer = 1;
  bad = dense(&wrong);
  expect_message(&bad, list, 0, HURRAY_EINVAL, "buffer index 1");
  wrong = values;
  wrong.reserved[0] = 1;
  bad = dense(&wrong);
  expect_status(&bad, list, 0, HURRAY_EINVAL);

  assert_int_equal(hurray_tensor_validate(NULL, list, 0, NULL), HURRAY_EINVAL);
  assert_int_equal(hurray_tensor_validate(&t, NULL, 0, NULL), HURRAY_EINVAL);
  assert_int_equal(hurray_tensor_validate(&t, list, 1u << 7, NULL), HURRAY_EINVAL);
  hurray_buffer_list_destroy(list);
}

/* ---- quantised layouts --------------------------------------------------------------------- */

/* int8 [4, 3] quantised per column (axis 1), each part in its own buffer. */
static void per_channel(void **state) {
  (void)state;
  HurrayBufferList *list = LIST(12, 12, 6);
  const int64_t *shape = DIMS(4, 3);
  HurrayArray parts[4] = {
      array(HURRAY_DTYPE_INT8, 2, shape, NULL, 0, 0),
      array(HURRAY_DTYPE_FLOAT32, 1, DIMS(3), NULL, 0, 1),
      array(HURRAY_DTYPE_INT8, 1, DIMS(3), NULL, 0, 2),
  };
  HurrayTensorDesc t = {.layout = HURRAY_LAYOUT_PER_CHANNEL,
                        .ndim = 2,
                        .axis = 1,
                        .shape = shape,
                        .parts = parts,
                        .nparts = 3,
                        .dtype = HURRAY_DTYPE_INT8};
  expect_status(&t, list, HURRAY_VALIDATE_CONTENTS, HURRAY_OK);
  t.nparts = 2;
  expect_status(&t, list, 0, HURRAY_OK);
  t.nparts = 4;
  expect_message(&t, list, 0, HURRAY_ELAYOUT, "2 or 3 parts, not 4");
  t.nparts = 1;
  expect_status(&t, list, 0, HURRAY_ELAYOUT);
  t.nparts = 3;

  HurrayTensorDesc bad = t;
  bad.axis = 2;
  expect_message(&bad, list, 0, HURRAY_ELAYOUT, "axis 2 is outside [0, 2)");
  bad.axis = -1;
  expect_status(&bad, list, 0, HURRAY_ELAYOUT);
  bad.axis = 0; /* scales would need 4 entries */
  expect_message(&bad, list, 0, HURRAY_ELAYOUT, "part 1 (scales): shape is [3], expected [4]");
  bad = t;
  bad.ndim = 0;
  expect_status(&bad, list, 0, HURRAY_ELAYOUT);

  parts[1].dtype = HURRAY_DTYPE_FLOAT8_E8M0FNU; /* e8m0 scales, as MX formats use */
  expect_status(&t, list, 0, HURRAY_OK);
  parts[1].dtype = HURRAY_DTYPE_INT8;
  expect_message(&t, list, 0, HURRAY_ELAYOUT,
                 "part 1 (scales): dtype is int8, expected a floating-point dtype");
  parts[1].dtype = HURRAY_DTYPE_FLOAT32;
  parts[1].byte_offset = 1;
  expect_message(&t, list, 0, HURRAY_EBOUNDS, "part 1 (scales): addresses bytes [1, 13)");
  parts[1].byte_offset = 0;

  parts[2].dtype = HURRAY_DTYPE_FLOAT16;
  expect_status(&t, list, 0, HURRAY_OK);
  parts[2].dtype = HURRAY_DTYPE_UINT4;
  expect_status(&t, list, 0, HURRAY_OK);
  parts[2].dtype = HURRAY_DTYPE_BOOL;
  expect_message(&t, list, 0, HURRAY_ELAYOUT,
                 "part 2 (zero_points): dtype is bool, expected a floating-point or integer dtype");
  parts[2].dtype = HURRAY_DTYPE_COMPLEX64;
  expect_status(&t, list, 0, HURRAY_ELAYOUT);
  parts[2].dtype = HURRAY_DTYPE_INT8;
  parts[2].shape = DIMS(4);
  expect_status(&t, list, 0, HURRAY_ELAYOUT);
  hurray_buffer_list_destroy(list);
}

/* int4 [4, 65] in blocks of 32 along axis 1: scales and mins [4, 3], all in one buffer. */
static void block(void **state) {
  (void)state;
  HurrayBufferList *list = LIST(130 + 24 + 24);
  const int64_t *shape = DIMS(4, 65), *blocks = DIMS(4, 3);
  HurrayArray parts[3] = {
      array(HURRAY_DTYPE_INT4, 2, shape, NULL, 0, 0),
      array(HURRAY_DTYPE_FLOAT16, 2, blocks, NULL, 130, 0),
      array(HURRAY_DTYPE_FLOAT16, 2, blocks, NULL, 154, 0),
  };
  HurrayTensorDesc t = {.layout = HURRAY_LAYOUT_BLOCK,
                        .ndim = 2,
                        .axis = 1,
                        .block_size = 32,
                        .shape = shape,
                        .parts = parts,
                        .nparts = 3,
                        .dtype = HURRAY_DTYPE_INT4};
  expect_status(&t, list, HURRAY_VALIDATE_CONTENTS, HURRAY_OK);
  t.nparts = 2;
  expect_status(&t, list, 0, HURRAY_OK);
  t.nparts = 3;
  parts[2].dtype = HURRAY_DTYPE_INT8; /* integer mins */
  expect_status(&t, list, 0, HURRAY_OK);
  parts[2].dtype = HURRAY_DTYPE_BOOL;
  expect_message(&t, list, 0, HURRAY_ELAYOUT, "part 2 (mins)");
  parts[2].dtype = HURRAY_DTYPE_FLOAT16;
  parts[2].byte_offset = 155;
  expect_message(&t, list, 0, HURRAY_EBOUNDS, "part 2 (mins): addresses bytes [155, 179)");
  parts[2].byte_offset = 154;

  HurrayTensorDesc bad = t;
  bad.block_size = 0;
  expect_message(&bad, list, 0, HURRAY_ELAYOUT, "block_size 0");
  bad.block_size = -32;
  expect_status(&bad, list, 0, HURRAY_ELAYOUT);
  bad.block_size = INT64_MAX;
  expect_status(&bad, list, 0, HURRAY_ELAYOUT);
  bad.block_size = 64; /* two blocks per row now */
  expect_message(&bad, list, 0, HURRAY_ELAYOUT,
                 "part 1 (scales): shape is [4, 3], expected [4, 2]");
  bad.block_size = 65;
  bad.axis = 0; /* blocks along the rows: [1, 65] */
  expect_message(&bad, list, 0, HURRAY_ELAYOUT, "expected [1, 65]");
  parts[1].dtype = HURRAY_DTYPE_UINT8;
  expect_status(&t, list, 0, HURRAY_ELAYOUT);
  hurray_buffer_list_destroy(list);
}

/* ---- sparse layouts ------------------------------------------------------------------------ */

/* A 4x5 float32 COO tensor with 3 entries: (0,4), (1,0), (3,2). */
static void sparse_coo(void **state) {
  (void)state;
  HurrayBufferList *list = LIST(48, 12);
  put_i64(list, 0, (const int64_t[]){0, 1, 3, 4, 0, 2}, 6);
  const int64_t *shape = DIMS(4, 5);
  HurrayArray parts[2] = {
      array(HURRAY_DTYPE_INT64, 2, DIMS(2, 3), NULL, 0, 0),
      array(HURRAY_DTYPE_FLOAT32, 1, DIMS(3), NULL, 0, 1),
  };
  HurrayTensorDesc t = {.layout = HURRAY_LAYOUT_SPARSE_COO,
                        .ndim = 2,
                        .shape = shape,
                        .parts = parts,
                        .nparts = 2,
                        .dtype = HURRAY_DTYPE_FLOAT32};
  expect_status(&t, list, HURRAY_VALIDATE_CONTENTS, HURRAY_OK);
  t.flags = HURRAY_TENSOR_COALESCED;
  expect_status(&t, list, HURRAY_VALIDATE_CONTENTS, HURRAY_OK);

  /* structure */
  HurrayTensorDesc bad = t;
  bad.ndim = 0;
  expect_status(&bad, list, 0, HURRAY_ELAYOUT);
  bad = t;
  bad.axis = 1;
  expect_status(&bad, list, 0, HURRAY_ELAYOUT);
  parts[0].dtype = HURRAY_DTYPE_FLOAT64;
  expect_message(&t, list, 0, HURRAY_ELAYOUT,
                 "part 0 (indices): dtype is float64, expected int32 or int64");
  parts[0].dtype = HURRAY_DTYPE_INT64;
  parts[1].shape = DIMS(2);
  expect_message(&t, list, 0, HURRAY_ELAYOUT, "part 1 (values): shape is [2], expected [3]");
  parts[1].shape = DIMS(3);
  parts[0].shape = DIMS(3, 3);
  expect_message(&t, list, 0, HURRAY_ELAYOUT, "expected [2, *]");
  parts[0].shape = DIMS(2, 3);

  /* contents: out of range, negative, unsorted and duplicate entries */
  int64_t *indices = data_of(list, 0);
  indices[4] = 5;
  expect_contents(&t, list, HURRAY_ELAYOUT,
                  "part 0 (indices): element [1, 1] is 5, outside [0, 5)");
  indices[4] = 0;
  indices[2] = -1;
  expect_contents(&t, list, HURRAY_ELAYOUT, "is -1");
  indices[2] = 3;
  put_i64(list, 0, (const int64_t[]){1, 0, 3, 0, 4, 2}, 6);
  expect_contents(&t, list, HURRAY_ELAYOUT, "COALESCED");
  put_i64(list, 0, (const int64_t[]){0, 1, 1, 4, 0, 0}, 6);
  expect_contents(&t, list, HURRAY_ELAYOUT, "column 2");
  t.flags = 0; /* duplicates are allowed when the tensor does not claim to be coalesced */
  expect_status(&t, list, HURRAY_VALIDATE_CONTENTS, HURRAY_OK);

  /* empty: nnz 0 */
  parts[0].shape = DIMS(2, 0);
  parts[1].shape = DIMS(0);
  expect_status(&t, list, HURRAY_VALIDATE_CONTENTS, HURRAY_OK);
  hurray_buffer_list_destroy(list);
}

/* Indices read through strides: int32 stored [nnz, ndim] row-major, and a broadcast row. */
static void sparse_coo_strided_indices(void **state) {
  (void)state;
  HurrayBufferList *list = LIST(24, 12);
  put_i32(list, 0, (const int32_t[]){0, 4, 1, 0, 3, 2}, 6); /* (0,4), (1,0), (3,2) */
  const int64_t *shape = DIMS(4, 5);
  HurrayArray parts[2] = {
      array(HURRAY_DTYPE_INT32, 2, DIMS(2, 3), DIMS(1, 2), 0, 0),
      array(HURRAY_DTYPE_FLOAT32, 1, DIMS(3), NULL, 0, 1),
  };
  HurrayTensorDesc t = {.layout = HURRAY_LAYOUT_SPARSE_COO,
                        .flags = HURRAY_TENSOR_COALESCED,
                        .ndim = 2,
                        .shape = shape,
                        .parts = parts,
                        .nparts = 2,
                        .dtype = HURRAY_DTYPE_FLOAT32};
  expect_status(&t, list, HURRAY_VALIDATE_CONTENTS, HURRAY_OK);
  ((int32_t *)data_of(list, 0))[1] = 5; /* column of the first entry */
  expect_contents(&t, list, HURRAY_ELAYOUT, "element [1, 0] is 5");

  /* stride 0 along the rows: both rows read {0, 1, 4}; row 0 allows only [0, 4) */
  t.flags = 0;
  put_i32(list, 0, (const int32_t[]){0, 1, 4}, 3);
  parts[0].strides = DIMS(0, 1);
  t.shape = DIMS(5, 4);
  expect_contents(&t, list, HURRAY_ELAYOUT, "element [1, 2] is 4, outside [0, 4)");
  t.shape = DIMS(5, 5);
  expect_status(&t, list, HURRAY_VALIDATE_CONTENTS, HURRAY_OK);
  hurray_buffer_list_destroy(list);
}

/* Index data in device memory is not read, even with HURRAY_VALIDATE_CONTENTS. */
static void sparse_coo_device_indices_are_not_read(void **state) {
  (void)state;
  HurrayBufferList *list = LIST(12);
  append_device_buffer(list, 24);
  HurrayArray parts[2] = {
      array(HURRAY_DTYPE_INT32, 2, DIMS(2, 3), NULL, 0, 1),
      array(HURRAY_DTYPE_FLOAT32, 1, DIMS(3), NULL, 0, 0),
  };
  HurrayTensorDesc t = {.layout = HURRAY_LAYOUT_SPARSE_COO,
                        .ndim = 2,
                        .shape = DIMS(4, 5),
                        .parts = parts,
                        .nparts = 2,
                        .dtype = HURRAY_DTYPE_FLOAT32};
  expect_status(&t, list, HURRAY_VALIDATE_CONTENTS, HURRAY_OK);
  parts[0].byte_offset = 4; /* but its bounds are checked */
  expect_status(&t, list, 0, HURRAY_EBOUNDS);
  hurray_buffer_list_destroy(list);
}

/* A 3x4 float32 CSR tensor: rows {2}, {}, {0, 3}. */
static void sparse_csr(void **state) {
  (void)state;
  HurrayBufferList *list = LIST(16, 12, 12);
  put_i32(list, 0, (const int32_t[]){0, 1, 1, 3}, 4);
  put_i32(list, 1, (const int32_t[]){2, 0, 3}, 3);
  HurrayArray parts[3] = {
      array(HURRAY_DTYPE_INT32, 1, DIMS(4), NULL, 0, 0),
      array(HURRAY_DTYPE_INT32, 1, DIMS(3), NULL, 0, 1),
      array(HURRAY_DTYPE_FLOAT32, 1, DIMS(3), NULL, 0, 2),
  };
  HurrayTensorDesc t = {.layout = HURRAY_LAYOUT_SPARSE_CSR,
                        .ndim = 2,
                        .shape = DIMS(3, 4),
                        .parts = parts,
                        .nparts = 3,
                        .dtype = HURRAY_DTYPE_FLOAT32};
  expect_status(&t, list, HURRAY_VALIDATE_CONTENTS, HURRAY_OK);

  /* structure */
  HurrayTensorDesc bad = t;
  bad.ndim = 3;
  bad.shape = DIMS(3, 4, 1);
  expect_message(&bad, list, 0, HURRAY_ELAYOUT, "a sparse_csr tensor has ndim 2, not 3");
  bad = t;
  bad.flags = HURRAY_TENSOR_COALESCED;
  expect_status(&bad, list, 0, HURRAY_ELAYOUT);
  bad = t;
  bad.nparts = 2;
  expect_status(&bad, list, 0, HURRAY_ELAYOUT);
  parts[1].dtype = HURRAY_DTYPE_INT64;
  expect_message(&t, list, 0, HURRAY_ELAYOUT, "part 1 (indices): dtype is int64, expected int32");
  parts[1].dtype = HURRAY_DTYPE_INT32;
  parts[0].shape = DIMS(3);
  expect_message(&t, list, 0, HURRAY_ELAYOUT, "part 0 (indptr): shape is [3], expected [4]");
  parts[0].shape = DIMS(4);
  parts[2].shape = DIMS(4);
  expect_status(&t, list, 0, HURRAY_ELAYOUT);
  parts[2].shape = DIMS(3);

  /* contents */
  put_i32(list, 0, (const int32_t[]){0, 2, 1, 3}, 4);
  expect_contents(&t, list, HURRAY_ELAYOUT, "part 0 (indptr): indptr decreases: indptr[2] = 1");
  put_i32(list, 0, (const int32_t[]){1, 1, 1, 3}, 4);
  expect_contents(&t, list, HURRAY_ELAYOUT, "indptr[0] is 1, expected 0");
  put_i32(list, 0, (const int32_t[]){0, 1, 1, 2}, 4);
  expect_contents(&t, list, HURRAY_ELAYOUT, "indptr[3] is 2, expected nnz = 3");
  put_i32(list, 0, (const int32_t[]){0, 1, 1, 3}, 4);
  put_i32(list, 1, (const int32_t[]){2, 0, 4}, 3);
  expect_contents(&t, list, HURRAY_ELAYOUT, "part 1 (indices): element [2] is 4, outside [0, 4)");
  put_i32(list, 1, (const int32_t[]){2, 0, 3}, 3);
  expect_status(&t, list, HURRAY_VALIDATE_CONTENTS, HURRAY_OK);

  /* int64 indptr read backwards through a negative stride: {3, 1, 1, 0} reversed */
  hurray_buffer_list_destroy(list);
  list = LIST(32, 24, 12);
  put_i64(list, 0, (const int64_t[]){3, 1, 1, 0}, 4);
  put_i64(list, 1, (const int64_t[]){2, 0, 3}, 3);
  parts[0] = array(HURRAY_DTYPE_INT64, 1, DIMS(4), DIMS(-1), 24, 0);
  parts[1].dtype = HURRAY_DTYPE_INT64;
  expect_status(&t, list, HURRAY_VALIDATE_CONTENTS, HURRAY_OK);
  /* stride 0: a constant indptr is monotone; it is valid only when every row is empty */
  parts[0].strides = DIMS(0);
  parts[0].byte_offset = 24; /* every indptr entry reads 0 */
  expect_contents(&t, list, HURRAY_ELAYOUT, "expected nnz = 3");
  parts[1].shape = DIMS(0);
  parts[2].shape = DIMS(0);
  expect_status(&t, list, HURRAY_VALIDATE_CONTENTS, HURRAY_OK);
  hurray_buffer_list_destroy(list);
}

/* ---- paged --------------------------------------------------------------------------------- */

/* A float16 KV cache [2 sequences, 10 tokens, 4 features], pages of 4 tokens along axis 1:
 * pages [6, 4, 4], page_table int32 [2, 3]. */
static void paged(void **state) {
  (void)state;
  HurrayBufferList *list = LIST(6 * 4 * 4 * 2, 24);
  put_i32(list, 1, (const int32_t[]){0, 1, 2, 5, 4, 3}, 6);
  HurrayArray parts[2] = {
      array(HURRAY_DTYPE_FLOAT16, 3, DIMS(6, 4, 4), NULL, 0, 0),
      array(HURRAY_DTYPE_INT32, 2, DIMS(2, 3), NULL, 0, 1),
  };
  HurrayTensorDesc t = {.layout = HURRAY_LAYOUT_PAGED,
                        .ndim = 3,
                        .axis = 1,
                        .block_size = 4,
                        .shape = DIMS(2, 10, 4),
                        .parts = parts,
                        .nparts = 2,
                        .dtype = HURRAY_DTYPE_FLOAT16};
  expect_status(&t, list, HURRAY_VALIDATE_CONTENTS, HURRAY_OK);

  /* structure */
  HurrayTensorDesc bad = t;
  bad.block_size = 0;
  expect_status(&bad, list, 0, HURRAY_ELAYOUT);
  bad = t;
  bad.axis = 3;
  expect_status(&bad, list, 0, HURRAY_ELAYOUT);
  bad = t;
  bad.dtype = HURRAY_DTYPE_BFLOAT16;
  expect_message(&bad, list, 0, HURRAY_ELAYOUT,
                 "part 0 (pages): dtype is float16, expected bfloat16");
  bad = t;
  bad.shape = DIMS(2, 13, 4); /* 4 pages per sequence */
  expect_message(&bad, list, 0, HURRAY_ELAYOUT,
                 "part 1 (page_table): shape is [2, 3], expected [2, 4]");
  bad = t;
  bad.block_size = 2;
  expect_message(&bad, list, 0, HURRAY_ELAYOUT,
                 "part 0 (pages): shape is [6, 4, 4], expected [*, 2, 4]");
  parts[1].dtype = HURRAY_DTYPE_UINT32;
  expect_status(&t, list, 0, HURRAY_ELAYOUT);
  parts[1].dtype = HURRAY_DTYPE_INT32;
  parts[0].shape = DIMS(7, 4, 4); /* one page more than the buffer holds */
  expect_message(&t, list, 0, HURRAY_EBOUNDS, "part 0 (pages): addresses bytes [0, 224)");
  parts[0].shape = DIMS(6, 4, 4);

  /* contents: page numbers in [0, num_pages) */
  ((int32_t *)data_of(list, 1))[4] = 6;
  expect_contents(&t, list, HURRAY_ELAYOUT,
                  "part 1 (page_table): element [1, 1] is 6, outside [0, 6)");
  ((int32_t *)data_of(list, 1))[4] = -3;
  expect_contents(&t, list, HURRAY_ELAYOUT, "is -3");
  ((int32_t *)data_of(list, 1))[4] = 4;

  /* axis 0: [10 tokens, 4 features] -> pages [n, 4, 4], page_table [3] */
  t.ndim = 2;
  t.axis = 0;
  t.shape = DIMS(10, 4);
  parts[1].ndim = 1;
  parts[1].shape = DIMS(3);
  expect_status(&t, list, HURRAY_VALIDATE_CONTENTS, HURRAY_OK);
  /* a page table broadcast along a dimension is read once per distinct element */
  parts[1].strides = DIMS(0);
  parts[1].shape = DIMS(3);
  ((int32_t *)data_of(list, 1))[0] = 9;
  expect_contents(&t, list, HURRAY_ELAYOUT, "element [0] is 9");
  hurray_buffer_list_destroy(list);
}

/* ---- composite ----------------------------------------------------------------------------- */

typedef struct Model {
  HurrayArray weight, scales[2];
  HurrayTensorDesc children[2];
  const char *names[2];
  HurrayTensorDesc root;
} Model;

/* {"weight": dense float32 [2, 3] in buffer 0, "scale": per-channel int8 [4, 3] over
 * buffers 1 and 0}, all over one list. */
static void make_model(Model *m) {
  static const int64_t kWeight[] = {2, 3}, kScale[] = {4, 3}, kChannels[] = {3};
  m->weight = array(HURRAY_DTYPE_FLOAT32, 2, kWeight, NULL, 0, 0);
  m->scales[0] = array(HURRAY_DTYPE_INT8, 2, kScale, NULL, 0, 1);
  m->scales[1] = array(HURRAY_DTYPE_FLOAT32, 1, kChannels, NULL, 24, 0);
  m->children[0] = dense(&m->weight);
  m->children[1] = (HurrayTensorDesc){.layout = HURRAY_LAYOUT_PER_CHANNEL,
                                      .ndim = 2,
                                      .axis = 1,
                                      .shape = kScale,
                                      .parts = m->scales,
                                      .nparts = 2,
                                      .dtype = HURRAY_DTYPE_INT8};
  m->names[0] = "weight";
  m->names[1] = "scale";
  m->root = (HurrayTensorDesc){.layout = HURRAY_LAYOUT_COMPOSITE,
                               .nchildren = 2,
                               .children = m->children,
                               .child_names = m->names};
}

static void composite(void **state) {
  (void)state;
  HurrayBufferList *list = LIST(36, 12);
  Model m;
  make_model(&m);
  expect_status(&m.root, list, HURRAY_VALIDATE_CONTENTS, HURRAY_OK);

  m.scales[1].byte_offset = 28;
  expect_message(&m.root, list, 0, HURRAY_EBOUNDS,
                 "part 1 (scales): addresses bytes [28, 40) of buffer 0, whose byte_size is 36 "
                 "(in child \"scale\")");
  m.scales[1].byte_offset = 24;

  HurrayTensorDesc bad = m.root;
  bad.nchildren = 0;
  expect_status(&bad, list, 0, HURRAY_ELAYOUT);
  bad = m.root;
  bad.dtype = HURRAY_DTYPE_FLOAT32;
  expect_status(&bad, list, 0, HURRAY_ELAYOUT);
  bad = m.root;
  bad.ndim = 1;
  bad.shape = DIMS(2);
  expect_status(&bad, list, 0, HURRAY_ELAYOUT);
  bad = m.root;
  bad.nparts = 1;
  bad.parts = &m.weight;
  expect_status(&bad, list, 0, HURRAY_ELAYOUT);
  bad = m.root;
  bad.children = NULL;
  expect_status(&bad, list, 0, HURRAY_EINVAL);
  bad = m.root;
  bad.child_names = NULL;
  expect_status(&bad, list, 0, HURRAY_EINVAL);
  bad = m.root;
  bad.nchildren = HURRAY_MAX_CHILDREN + 1;
  expect_status(&bad, list, 0, HURRAY_ELIMIT);
  hurray_buffer_list_destroy(list);
}

static void composite_names(void **state) {
  (void)state;
  HurrayBufferList *list = LIST(36, 12);
  Model m;
  make_model(&m);
  static const struct {
    const char *name;
    int status;
  } kCases[] = {
      {"weight", HURRAY_ELAYOUT}, /* a duplicate */
      {"", HURRAY_ELAYOUT},
      {NULL, HURRAY_EINVAL},
      {"\xC0\x80", HURRAY_ELAYOUT},         /* overlong NUL */
      {"\xE0\x80\xAF", HURRAY_ELAYOUT},     /* overlong '/' */
      {"\xED\xA0\x80", HURRAY_ELAYOUT},     /* a surrogate */
      {"\xF4\x90\x80\x80", HURRAY_ELAYOUT}, /* above U+10FFFF */
      {"ab\xE2\x82", HURRAY_ELAYOUT},       /* truncated */
      {"\x80x", HURRAY_ELAYOUT},            /* a lone continuation byte */
      {"\xFF", HURRAY_ELAYOUT},
      {"Gr\xC3\xB6\xC3\x9F"
       "e",
       HURRAY_OK},                     /* "Größe" */
      {"\xE2\x82\xAC", HURRAY_OK},     /* U+20AC */
      {"\xF0\x9F\x98\x80", HURRAY_OK}, /* U+1F600 */
      {"\xF4\x8F\xBF\xBF", HURRAY_OK}, /* U+10FFFF */
      {"layers.0/attn", HURRAY_OK},
  };
  for (size_t i = 0; i < COUNT(kCases); i++) {
    m.names[1] = kCases[i].name;
    expect_status(&m.root, list, 0, kCases[i].status);
  }
  m.names[1] = "weight";
  expect_message(&m.root, list, 0, HURRAY_ELAYOUT, "child name \"weight\" is not unique");

  char name[HURRAY_MAX_NAME + 2];
  memset(name, 'n', sizeof name - 1);
  name[HURRAY_MAX_NAME] = '\0';
  m.names[1] = name;
  expect_status(&m.root, list, 0, HURRAY_OK);
  name[HURRAY_MAX_NAME] = 'n';
  name[HURRAY_MAX_NAME + 1] = '\0';
  expect_message(&m.root, list, 0, HURRAY_ELIMIT, "HURRAY_MAX_NAME");
  hurray_buffer_list_destroy(list);
}

/* A chain of composites, each the only child of the one before, ending in a dense leaf at
 * `depth`. */
static void expect_chain(const HurrayBufferList *list, int depth, int want) {
  static const char *const kName[] = {"x"};
  HurrayArray leaf_values = array(HURRAY_DTYPE_UINT8, 0, NULL, NULL, 0, 0);
  HurrayTensorDesc chain[HURRAY_MAX_DEPTH + 2];
  assert_true(depth < (int)COUNT(chain));
  for (int d = 0; d < depth; d++) {
    chain[d] = (HurrayTensorDesc){.layout = HURRAY_LAYOUT_COMPOSITE,
                                  .nchildren = 1,
                                  .children = &chain[d + 1],
                                  .child_names = kName};
  }
  chain[depth] = dense(&leaf_values);
  expect_status(&chain[0], list, 0, want);
  HurrayTensorDesc *copy = NULL;
  assert_int_equal(hurray_tensor_desc_clone(&chain[0], &copy, NULL), want);
  hurray_tensor_desc_destroy(copy);
}

static void composite_depth(void **state) {
  (void)state;
  HurrayBufferList *list = LIST(1);
  expect_chain(list, 0, HURRAY_OK);
  expect_chain(list, 1, HURRAY_OK);
  expect_chain(list, HURRAY_MAX_DEPTH, HURRAY_OK);
  expect_chain(list, HURRAY_MAX_DEPTH + 1, HURRAY_ELIMIT);

  /* the message of a failure deep inside names the path to it, innermost first */
  HurrayArray values = array(HURRAY_DTYPE_UINT8, 1, DIMS(2), NULL, 0, 0);
  HurrayTensorDesc leaf = dense(&values);
  const char *inner_name[] = {"inner"}, *outer_name[] = {"outer"};
  HurrayTensorDesc inner = {.layout = HURRAY_LAYOUT_COMPOSITE,
                            .nchildren = 1,
                            .children = &leaf,
                            .child_names = inner_name};
  HurrayTensorDesc outer = {.layout = HURRAY_LAYOUT_COMPOSITE,
                            .nchildren = 1,
                            .children = &inner,
                            .child_names = outer_name};
  expect_message(&outer, list, 0, HURRAY_EBOUNDS, "(in child \"inner\" of \"outer\")");
  hurray_buffer_list_destroy(list);
}

/* Children arrays shared between parents make a DAG whose tree expands as fan-out^depth; the
 * node limit bounds that work for validate and clone alike. */
static void composite_shared_children_are_bounded(void **state) {
  (void)state;
  enum { FANOUT = 16, LEVELS = 6 };
  static const char *const kNames[FANOUT] = {"a", "b", "c", "d", "e", "f", "g", "h",
                                             "i", "j", "k", "l", "m", "n", "o", "p"};
  HurrayBufferList *list = LIST(1);
  HurrayArray values = array(HURRAY_DTYPE_UINT8, 0, NULL, NULL, 0, 0);
  HurrayTensorDesc level[LEVELS][FANOUT];
  for (int l = 0; l < LEVELS; l++) {
    for (int i = 0; i < FANOUT; i++) {
      level[l][i] = l == LEVELS - 1 ? dense(&values)
                                    : (HurrayTensorDesc){.layout = HURRAY_LAYOUT_COMPOSITE,
                                                         .nchildren = FANOUT,
                                                         .children = level[l + 1],
                                                         .child_names = kNames};
    }
  }
  /* 1 + 16 + 256 + 4096 + 65536 nodes: within the limit */
  expect_status(&level[LEVELS - 5][0], list, 0, HURRAY_OK);
  /* 1 + 16 + ... + 16^5 = 1118481 nodes: over it */
  expect_message(&level[0][0], list, 0, HURRAY_ELIMIT, "HURRAY_MAX_NODES");
  HurrayTensorDesc *copy = NULL;
  assert_int_equal(hurray_tensor_desc_clone(&level[0][0], &copy, NULL), HURRAY_ELIMIT);
  assert_null(copy);
  hurray_buffer_list_destroy(list);
}

/* HURRAY_MAX_CHILDREN children: unique names are found fast, and so is one duplicate. */
static void composite_many_children(void **state) {
  (void)state;
  enum { N = HURRAY_MAX_CHILDREN };
  HurrayBufferList *list = LIST(1);
  HurrayArray values = array(HURRAY_DTYPE_UINT8, 0, NULL, NULL, 0, 0);
  HurrayTensorDesc *children = malloc(N * sizeof *children);
  const char **names = malloc(N * sizeof *names);
  char *text = malloc(N * 8);
  assert_non_null(children);
  assert_non_null(names);
  assert_non_null(text);
  for (uint32_t i = 0; i < N; i++) {
    children[i] = dense(&values);
    snprintf(text + 8 * i, 8, "c%05u", (unsigned)((i * 40503u) % N)); /* a permutation */
    names[i] = text + 8 * i;
  }
  HurrayTensorDesc root = {.layout = HURRAY_LAYOUT_COMPOSITE,
                           .nchildren = N,
                           .children = children,
                           .child_names = names};
  expect_status(&root, list, 0, HURRAY_OK);
  names[N - 1] = names[12345];
  expect_message(&root, list, 0, HURRAY_ELAYOUT, "is not unique");
  free(text);
  free(names);
  free(children);
  hurray_buffer_list_destroy(list);
}

/* ---- clone --------------------------------------------------------------------------------- */

/* The model of make_model, with every array on the heap. */
typedef struct HeapModel {
  Model m;
  int64_t *dims;
  char *names;
} HeapModel;

static void clone_is_deep_and_self_contained(void **state) {
  (void)state;
  HurrayBufferList *list = LIST(36, 12);
  HeapModel *h = calloc(1, sizeof *h);
  assert_non_null(h);
  make_model(&h->m);
  h->dims = malloc(5 * sizeof *h->dims);
  h->names = malloc(16);
  assert_non_null(h->dims);
  assert_non_null(h->names);
  memcpy(h->dims, (const int64_t[]){2, 3, 4, 3, 3}, 5 * sizeof *h->dims);
  memcpy(h->names, "weight\0scale", 13);
  h->m.weight.shape = h->dims;
  h->m.children[0].shape = h->dims;
  h->m.scales[0].shape = h->dims + 2;
  h->m.scales[0].strides = (const int64_t[]){3, 1};
  h->m.children[1].shape = h->dims + 2;
  h->m.scales[1].shape = h->dims + 4;
  h->m.names[0] = h->names;
  h->m.names[1] = h->names + 7;

  HurrayTensorDesc *copy = NULL;
  HurrayError error = {0};
  assert_int_equal(hurray_tensor_desc_clone(&h->m.root, &copy, &error), HURRAY_OK);
  /* the original's storage goes away */
  memset(h->dims, 0xAB, 5 * sizeof *h->dims);
  memset(h->names, 0xCD, 16);
  memset(&h->m, 0xEF, sizeof h->m);
  free(h->dims);
  free(h->names);
  free(h);

  assert_int_equal(hurray_tensor_validate(copy, list, HURRAY_VALIDATE_CONTENTS, &error), HURRAY_OK);
  assert_int_equal(copy->layout, HURRAY_LAYOUT_COMPOSITE);
  assert_int_equal(copy->nchildren, 2);
  assert_string_equal(copy->child_names[0], "weight");
  assert_string_equal(copy->child_names[1], "scale");
  const HurrayTensorDesc *scale = &copy->children[1];
  assert_int_equal(scale->shape[0], 4);
  assert_int_equal(scale->parts[0].strides[0], 3);
  assert_int_equal(scale->parts[0].strides[1], 1);
  assert_null(scale->parts[1].strides);
  assert_int_equal(scale->parts[1].byte_offset, 24);
  assert_null(copy->parts);
  assert_null(copy->shape);
  assert_null(copy->children[0].children);
  hurray_tensor_desc_destroy(copy);
  hurray_tensor_desc_destroy(NULL);
  hurray_buffer_list_destroy(list);
}

static void clone_checks_structure(void **state) {
  (void)state;
  HurrayArray values = array(HURRAY_DTYPE_FLOAT32, 1, DIMS(2), NULL, 0, 0);
  HurrayTensorDesc t = dense(&values);
  HurrayTensorDesc *copy = (HurrayTensorDesc *)&t;
  assert_int_equal(hurray_tensor_desc_clone(NULL, &copy, NULL), HURRAY_EINVAL);
  assert_int_equal(hurray_tensor_desc_clone(&t, NULL, NULL), HURRAY_EINVAL);

  HurrayTensorDesc bad = t;
  bad.ndim = -1;
  assert_int_equal(hurray_tensor_desc_clone(&bad, &copy, NULL), HURRAY_EINVAL);
  assert_null(copy);
  bad = t;
  bad.nparts = HURRAY_MAX_PARTS + 1;
  assert_int_equal(hurray_tensor_desc_clone(&bad, &copy, NULL), HURRAY_ELIMIT);
  bad = t;
  bad.parts = NULL;
  assert_int_equal(hurray_tensor_desc_clone(&bad, &copy, NULL), HURRAY_EINVAL);
  HurrayArray wide = values;
  wide.ndim = HURRAY_MAX_NDIM + 1;
  bad = dense(&wide);
  bad.ndim = 1;
  HurrayError error = {0};
  assert_int_equal(hurray_tensor_desc_clone(&bad, &copy, &error), HURRAY_ELIMIT);
  assert_non_null(strstr(error.message, "part 0 (values)"));
  const char *names[] = {NULL};
  bad = (HurrayTensorDesc){
      .layout = HURRAY_LAYOUT_COMPOSITE, .nchildren = 1, .children = &t, .child_names = names};
  assert_int_equal(hurray_tensor_desc_clone(&bad, &copy, NULL), HURRAY_EINVAL);

  /* what is structurally sound is copied as it is, even if it would not validate */
  bad = t;
  bad.layout = 42;
  bad.reserved1 = 7;
  assert_int_equal(hurray_tensor_desc_clone(&bad, &copy, NULL), HURRAY_OK);
  assert_int_equal(copy->layout, 42);
  assert_int_equal(copy->reserved1, 7);
  hurray_tensor_desc_destroy(copy);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(layout_names),
      cmocka_unit_test(layout_info_describes_each_layout),
      cmocka_unit_test(numel_is_the_overflow_checked_product),
      cmocka_unit_test(span_covers_the_addressed_bytes),
      cmocka_unit_test(span_rejects_what_no_buffer_holds),
      cmocka_unit_test(dense_bounds),
      cmocka_unit_test(dense_accepts_odd_but_valid_arrays),
      cmocka_unit_test(dense_sub_byte_spans),
      cmocka_unit_test(dense_overflow_and_limits),
      cmocka_unit_test(dense_structure),
      cmocka_unit_test(per_channel),
      cmocka_unit_test(block),
      cmocka_unit_test(sparse_coo),
      cmocka_unit_test(sparse_coo_strided_indices),
      cmocka_unit_test(sparse_coo_device_indices_are_not_read),
      cmocka_unit_test(sparse_csr),
      cmocka_unit_test(paged),
      cmocka_unit_test(composite),
      cmocka_unit_test(composite_names),
      cmocka_unit_test(composite_depth),
      cmocka_unit_test(composite_shared_children_are_bounded),
      cmocka_unit_test(composite_many_children),
      cmocka_unit_test(clone_is_deep_and_self_contained),
      cmocka_unit_test(clone_checks_structure),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
