/* test_dlpack_consumer.c -- Hurray meets code written against dlpack.h, not against Hurray
 * (ADR-083). The DLPack declarations below are written from the DLPack specification (dlpack.h
 * 1.1: DLDevice, DLDataType, DLTensor, DLManagedTensor, DLPackVersion,
 * DLManagedTensorVersioned and the flag bits) under dlpack.h's own names, in the same
 * translation unit as hurray.h: the two sets of names do not clash, and each struct has the
 * layout of its HurrayDL* twin, field by field. A consumer that knows only those rules reads
 * Hurray-produced tensors of several dtypes, strides and offsets, versioned and legacy, writes
 * into a writable one and calls the deleter once; a producer that knows only those rules hands
 * Hurray a managed tensor whose deleter Hurray calls once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hurray/hurray.h"

/* ---- dlpack.h, as its specification has it ----------------------------------------------- */

#define DLPACK_MAJOR_VERSION 1
#define DLPACK_MINOR_VERSION 1
#define DLPACK_FLAG_BITMASK_READ_ONLY (1UL << 0UL)
#define DLPACK_FLAG_BITMASK_IS_COPIED (1UL << 1UL)

typedef enum { kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3 } DLDeviceType;

typedef struct {
  DLDeviceType device_type;
  int32_t device_id;
} DLDevice;

typedef enum { kDLInt = 0U, kDLUInt = 1U, kDLFloat = 2U, kDLBool = 6U } DLDataTypeCode;

typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} DLDataType;

typedef struct {
  void *data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape;
  int64_t *strides;
  uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

typedef struct {
  uint32_t major;
  uint32_t minor;
} DLPackVersion;

typedef struct DLManagedTensorVersioned {
  DLPackVersion version;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensorVersioned *self);
  uint64_t flags;
  DLTensor dl_tensor;
} DLManagedTensorVersioned;

/* ---- the twins have one layout ------------------------------------------------------------ */

#define SAME_FIELD(a, b, field)                                                              \
  _Static_assert(offsetof(a, field) == offsetof(b, field), #a "." #field " is " #b "." #field); \
  _Static_assert(sizeof(((a *)0)->field) == sizeof(((b *)0)->field), #field " has one size")
#define SAME_SIZE(a, b) _Static_assert(sizeof(a) == sizeof(b), #a " and " #b " have one size")

SAME_SIZE(DLDevice, HurrayDLDevice);
SAME_FIELD(DLDevice, HurrayDLDevice, device_type);
SAME_FIELD(DLDevice, HurrayDLDevice, device_id);
SAME_SIZE(DLDataType, HurrayDLDataType);
SAME_FIELD(DLDataType, HurrayDLDataType, code);
SAME_FIELD(DLDataType, HurrayDLDataType, bits);
SAME_FIELD(DLDataType, HurrayDLDataType, lanes);
SAME_SIZE(DLTensor, HurrayDLTensor);
SAME_FIELD(DLTensor, HurrayDLTensor, data);
SAME_FIELD(DLTensor, HurrayDLTensor, device);
SAME_FIELD(DLTensor, HurrayDLTensor, ndim);
SAME_FIELD(DLTensor, HurrayDLTensor, dtype);
SAME_FIELD(DLTensor, HurrayDLTensor, shape);
SAME_FIELD(DLTensor, HurrayDLTensor, strides);
SAME_FIELD(DLTensor, HurrayDLTensor, byte_offset);
SAME_SIZE(DLManagedTensor, HurrayDLManagedTensor);
SAME_FIELD(DLManagedTensor, HurrayDLManagedTensor, dl_tensor);
SAME_FIELD(DLManagedTensor, HurrayDLManagedTensor, manager_ctx);
SAME_FIELD(DLManagedTensor, HurrayDLManagedTensor, deleter);
SAME_SIZE(DLPackVersion, HurrayDLPackVersion);
SAME_FIELD(DLPackVersion, HurrayDLPackVersion, major);
SAME_FIELD(DLPackVersion, HurrayDLPackVersion, minor);
SAME_SIZE(DLManagedTensorVersioned, HurrayDLManagedTensorVersioned);
SAME_FIELD(DLManagedTensorVersioned, HurrayDLManagedTensorVersioned, version);
SAME_FIELD(DLManagedTensorVersioned, HurrayDLManagedTensorVersioned, manager_ctx);
SAME_FIELD(DLManagedTensorVersioned, HurrayDLManagedTensorVersioned, deleter);
SAME_FIELD(DLManagedTensorVersioned, HurrayDLManagedTensorVersioned, flags);
SAME_FIELD(DLManagedTensorVersioned, HurrayDLManagedTensorVersioned, dl_tensor);
_Static_assert(DLPACK_MAJOR_VERSION == HURRAY_DLPACK_MAJOR_VERSION, "one major version");
_Static_assert(DLPACK_FLAG_BITMASK_READ_ONLY == HURRAY_DLPACK_FLAG_READ_ONLY, "READ_ONLY");
_Static_assert(DLPACK_FLAG_BITMASK_IS_COPIED == HURRAY_DLPACK_FLAG_IS_COPIED, "IS_COPIED");
_Static_assert(kDLCPU == HURRAY_DLPACK_CPU, "kDLCPU");

/* ---- a consumer that knows DLPack only ----------------------------------------------------- */

/* The address of element `index` by dlpack.h's rules: data + byte_offset, plus the strides (in
 * elements; NULL: compact row-major) times the element size. */
static const uint8_t *dl_element(const DLTensor *t, const int64_t *index) {
  int64_t offset = 0, step = 1;
  for (int32_t k = t->ndim - 1; k >= 0; k--) {
    int64_t stride = t->strides != NULL ? t->strides[k] : step;
    offset += index[k] * stride;
    step *= t->shape[k];
  }
  return (const uint8_t *)t->data + t->byte_offset + offset * (t->dtype.bits * t->dtype.lanes / 8);
}

/* Element `index` as a double, for the integer, float and bool codes of this test. */
static double dl_read(const DLTensor *t, const int64_t *index) {
  assert_int_equal(t->device.device_type, kDLCPU);
  assert_int_equal(t->dtype.lanes, 1);
  const uint8_t *p = dl_element(t, index);
  switch (t->dtype.code * 1000 + t->dtype.bits) {
    case kDLInt * 1000 + 8: return *(const int8_t *)p;
    case kDLInt * 1000 + 16: return *(const int16_t *)p;
    case kDLInt * 1000 + 64: return (double)*(const int64_t *)p;
    case kDLUInt * 1000 + 32: return *(const uint32_t *)p;
    case kDLFloat * 1000 + 32: return *(const float *)p;
    case kDLFloat * 1000 + 64: return *(const double *)p;
    case kDLBool * 1000 + 8: return *(const uint8_t *)p;
    default: fail_msg("dtype (%d, %d) not read here", t->dtype.code, t->dtype.bits);
  }
  return 0;
}

/* ---- Hurray as the producer ----------------------------------------------------------------- */

static int g_released; /* the Hurray buffer's release */

static void count_release(HurrayBuffer *self) {
  (void)self;
  g_released++;
}

/* A Hurray context over `data` (64 bytes aligned, 512 bytes): an array of `dtype` with the
 * given view. */
static HurrayTensorContext *hurray_tensor(void *data, uint8_t dtype, int32_t ndim,
                                          const int64_t *shape, const int64_t *strides,
                                          uint64_t byte_offset, uint32_t flags) {
  const HurrayBufferDesc desc = {.byte_size = 512, .alignment = 64};
  HurrayBuffer *buffer = NULL;
  assert_int_equal(hurray_buffer_wrap(data, &desc, flags, NULL, 0, count_release, NULL, &buffer,
                                      NULL),
                   HURRAY_OK);
  HurrayBufferList *list = NULL;
  assert_int_equal(hurray_buffer_list_create(1, &list, NULL), HURRAY_OK);
  assert_int_equal(hurray_buffer_list_append(list, buffer, HURRAY_ROLE_VALUES, NULL, NULL),
                   HURRAY_OK);
  const HurrayArray array = {
      .byte_offset = byte_offset, .shape = shape, .strides = strides, .ndim = ndim, .dtype = dtype};
  const HurrayTensorDesc tensor = {.layout = HURRAY_LAYOUT_DENSE,
                                   .ndim = ndim,
                                   .shape = shape,
                                   .parts = &array,
                                   .nparts = 1,
                                   .dtype = dtype};
  HurrayTensorContext *context = NULL;
  HurrayError error = {0};
  if (hurray_tensor_context_create(&tensor, list, flags, NULL, NULL, &context, &error) !=
      HURRAY_OK) {
    fail_msg("%s", error.message);
  }
  return context;
}

/* Element i of the 512-byte block, by the block's own type: what the consumer must read. */
static double block_value(const void *block, uint8_t dtype, int64_t i) {
  switch (dtype) {
    case HURRAY_DTYPE_INT8: return ((const int8_t *)block)[i];
    case HURRAY_DTYPE_INT16: return ((const int16_t *)block)[i];
    case HURRAY_DTYPE_INT64: return (double)((const int64_t *)block)[i];
    case HURRAY_DTYPE_UINT32: return ((const uint32_t *)block)[i];
    case HURRAY_DTYPE_FLOAT32: return ((const float *)block)[i];
    case HURRAY_DTYPE_FLOAT64: return ((const double *)block)[i];
    default: return ((const uint8_t *)block)[i] != 0;
  }
}

static void fill_block(void *block, uint8_t dtype) {
  int64_t n = 512 / (hurray_dtype_info(dtype)->bits / 8);
  for (int64_t i = 0; i < n; i++) {
    switch (dtype) {
      case HURRAY_DTYPE_INT8: ((int8_t *)block)[i] = (int8_t)(i % 100 - 50); break;
      case HURRAY_DTYPE_INT16: ((int16_t *)block)[i] = (int16_t)(i * 37 - 1000); break;
      case HURRAY_DTYPE_INT64: ((int64_t *)block)[i] = i * i - 7; break;
      case HURRAY_DTYPE_UINT32: ((uint32_t *)block)[i] = (uint32_t)(i * 1001); break;
      case HURRAY_DTYPE_FLOAT32: ((float *)block)[i] = (float)i * 0.5f; break;
      case HURRAY_DTYPE_FLOAT64: ((double *)block)[i] = (double)i / 3.0; break;
      default: ((uint8_t *)block)[i] = (uint8_t)(i % 3 == 0); break;
    }
  }
}

/* Every dtype of the consumer, through three views of a block: row-major, a transposed view
 * at an offset, and rows reversed (a negative stride). Each value the consumer reads is the
 * block's element the view names. */
static void consumer_reads_hurray_tensors(void **state) {
  (void)state;
  static const uint8_t dtypes[] = {HURRAY_DTYPE_INT8,   HURRAY_DTYPE_INT16,   HURRAY_DTYPE_INT64,
                                   HURRAY_DTYPE_UINT32, HURRAY_DTYPE_FLOAT32, HURRAY_DTYPE_FLOAT64,
                                   HURRAY_DTYPE_BOOL};
  static const struct {
    int64_t shape[2], strides[2];
    int64_t first; /* the block element of (0, 0) */
  } views[] = {{{3, 4}, {4, 1}, 0}, {{4, 3}, {1, 4}, 2}, {{3, 4}, {-4, 1}, 8}};
  void *block = aligned_alloc(64, 512);
  assert_non_null(block);
  for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
    fill_block(block, dtypes[d]);
    uint64_t itemsize = hurray_dtype_info(dtypes[d])->bits / 8;
    for (size_t v = 0; v < sizeof views / sizeof views[0]; v++) {
      for (int legacy = 0; legacy < 2; legacy++) {
        g_released = 0;
        HurrayTensorContext *context =
            hurray_tensor(block, dtypes[d], 2, views[v].shape, views[v].strides,
                          (uint64_t)views[v].first * itemsize, 0);
        HurrayError error = {0};
        const DLTensor *t;
        DLManagedTensorVersioned *versioned = NULL;
        DLManagedTensor *old = NULL;
        if (legacy) {
          HurrayDLManagedTensor *m = NULL;
          assert_int_equal(hurray_tensor_to_dlpack_legacy(context, 0, &m, &error), HURRAY_OK);
          old = (DLManagedTensor *)m;
          t = &old->dl_tensor;
        } else {
          HurrayDLManagedTensorVersioned *m = NULL;
          assert_int_equal(hurray_tensor_to_dlpack(context, 0, &m, &error), HURRAY_OK);
          versioned = (DLManagedTensorVersioned *)m;
          assert_int_equal(versioned->version.major, DLPACK_MAJOR_VERSION);
          assert_true((versioned->flags & DLPACK_FLAG_BITMASK_READ_ONLY) == 0);
          t = &versioned->dl_tensor;
        }
        for (int64_t i = 0; i < t->shape[0]; i++) {
          for (int64_t j = 0; j < t->shape[1]; j++) {
            int64_t index[2] = {i, j};
            int64_t at = views[v].first + i * views[v].strides[0] + j * views[v].strides[1];
            double want = block_value(block, dtypes[d], at);
            if (dl_read(t, index) != want) {
              fail_msg("%s view %zu (%lld, %lld): %g, not %g", hurray_dtype_info(dtypes[d])->name,
                       v, (long long)i, (long long)j, dl_read(t, index), want);
            }
          }
        }
        assert_int_equal(g_released, 0);
        if (legacy) {
          old->deleter(old);
        } else {
          versioned->deleter(versioned);
        }
        assert_int_equal(g_released, 1);
      }
    }
  }
  free(block);
}

/* A writable export is the producer's memory: the consumer's write lands there. A read-only
 * one says so in the flags. */
static void consumer_writes_where_allowed(void **state) {
  (void)state;
  float *block = aligned_alloc(64, 512);
  assert_non_null(block);
  memset(block, 0, 512);
  int64_t shape[1] = {4};
  for (int readonly = 0; readonly < 2; readonly++) {
    g_released = 0;
    HurrayTensorContext *context =
        hurray_tensor(block, HURRAY_DTYPE_FLOAT32, 1, shape, NULL, 16,
                      readonly ? HURRAY_BUFFER_READ_ONLY : 0);
    HurrayDLManagedTensorVersioned *m = NULL;
    assert_int_equal(hurray_tensor_to_dlpack(context, 0, &m, NULL), HURRAY_OK);
    DLManagedTensorVersioned *t = (DLManagedTensorVersioned *)m;
    if (readonly) {
      assert_true((t->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0);
    } else {
      assert_true((t->flags & DLPACK_FLAG_BITMASK_READ_ONLY) == 0);
      ((float *)((uint8_t *)t->dl_tensor.data + t->dl_tensor.byte_offset))[2] = 42.0f;
      assert_true(block[4 + 2] == 42.0f);
    }
    t->deleter(t);
    assert_int_equal(g_released, 1);
  }
  free(block);
}

/* ---- a producer that knows DLPack only ------------------------------------------------------ */

typedef struct Producer {
  int64_t shape[2];
  int64_t strides[2];
  double values[6];
  int *deleted;
} Producer;

static void producer_deleter(DLManagedTensorVersioned *self) {
  Producer *ctx = self->manager_ctx;
  (*ctx->deleted)++;
  free(ctx);
  free(self);
}

static void legacy_producer_deleter(DLManagedTensor *self) {
  Producer *ctx = self->manager_ctx;
  (*ctx->deleted)++;
  free(ctx);
  free(self);
}

static Producer *new_producer(int *deleted) {
  Producer *ctx = malloc(sizeof *ctx);
  assert_non_null(ctx);
  *ctx = (Producer){.shape = {2, 3}, .strides = {1, 2}, .deleted = deleted}; /* column-major */
  for (int i = 0; i < 6; i++) ctx->values[i] = i + 0.25;
  return ctx;
}

/* Hurray takes the managed tensor (read-only, column-major), reads the producer's memory in
 * place and calls the producer's deleter once, when the context is released. */
static void hurray_takes_a_dlpack_tensor(void **state) {
  (void)state;
  int deleted = 0;
  Producer *ctx = new_producer(&deleted);
  DLManagedTensorVersioned *m = malloc(sizeof *m);
  assert_non_null(m);
  *m = (DLManagedTensorVersioned){
      .version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION},
      .manager_ctx = ctx,
      .deleter = producer_deleter,
      .flags = DLPACK_FLAG_BITMASK_READ_ONLY,
      .dl_tensor = {.data = ctx->values,
                    .device = {kDLCPU, 0},
                    .ndim = 2,
                    .dtype = {kDLFloat, 64, 1},
                    .shape = ctx->shape,
                    .strides = ctx->strides}};
  HurrayTensorContext *context = NULL;
  HurrayError error = {0};
  if (hurray_tensor_from_dlpack((HurrayDLManagedTensorVersioned *)m, 0, &context, &error) !=
      HURRAY_OK) {
    fail_msg("%s", error.message);
  }
  assert_int_equal(context->tensor->dtype, HURRAY_DTYPE_FLOAT64);
  assert_true((context->flags & HURRAY_BUFFER_READ_ONLY) != 0);
  const double *first = hurray_tensor_context_data(context, 0);
  assert_ptr_equal(first, ctx->values);
  const HurrayArray *part = &context->tensor->parts[0];
  for (int64_t i = 0; i < 2; i++) {
    for (int64_t j = 0; j < 3; j++) {
      assert_true(first[i * part->strides[0] + j * part->strides[1]] == (double)(i + 2 * j) + 0.25);
    }
  }
  assert_int_equal(deleted, 0);
  hurray_tensor_context_release(context);
  assert_int_equal(deleted, 1);

  /* The legacy struct, the same way. */
  deleted = 0;
  ctx = new_producer(&deleted);
  DLManagedTensor *old = malloc(sizeof *old);
  assert_non_null(old);
  *old = (DLManagedTensor){.dl_tensor = {.data = ctx->values,
                                         .device = {kDLCPU, 0},
                                         .ndim = 2,
                                         .dtype = {kDLFloat, 64, 1},
                                         .shape = ctx->shape,
                                         .strides = NULL}, /* row-major, as old producers say */
                           .manager_ctx = ctx,
                           .deleter = legacy_producer_deleter};
  assert_int_equal(
      hurray_tensor_from_dlpack_legacy((HurrayDLManagedTensor *)old, 0, &context, &error),
      HURRAY_OK);
  assert_true((context->flags & HURRAY_BUFFER_READ_ONLY) == 0);
  assert_true(((const double *)hurray_tensor_context_data(context, 0))[4] == 4.25);
  hurray_tensor_context_release(context);
  assert_int_equal(deleted, 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(consumer_reads_hurray_tensors),
      cmocka_unit_test(consumer_writes_where_allowed),
      cmocka_unit_test(hurray_takes_a_dlpack_tensor),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
