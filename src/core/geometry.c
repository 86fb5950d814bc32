/* geometry.c -- array geometry (geometry.h): strides, contiguity and the byte span of an array,
 * for the DLPack exchange (dlpack.c) and the Python binding. */
#include "geometry.h"

#include <string.h>

void hurray__row_major_strides(int32_t ndim, const int64_t *shape, int64_t *strides) {
  int64_t step = 1;
  for (int32_t i = ndim - 1; i >= 0; i--) {
    strides[i] = step;
    /* Extents are validated (<= 2^62, product fits), so this only saturates past a zero. */
    if (shape[i] > 1) step *= shape[i];
  }
}

void hurray__array_strides(const HurrayArray *array, int64_t *strides) {
  if (array->strides != NULL) {
    if (array->ndim > 0) memcpy(strides, array->strides, (size_t)array->ndim * sizeof *strides);
  } else {
    hurray__row_major_strides(array->ndim, array->shape, strides);
  }
}

int hurray__array_is_c_contiguous(const HurrayArray *array) {
  if (array->strides == NULL) return 1;
  int64_t step = 1;
  for (int32_t i = array->ndim - 1; i >= 0; i--) {
    int64_t n = array->shape[i];
    if (n == 0) return 1;
    if (n != 1 && array->strides[i] != step) return 0;
    step *= n;
  }
  return 1;
}

int hurray__relative_span(int32_t ndim, const int64_t *shape, const int64_t *strides,
                          uint64_t itemsize, int64_t *lo, int64_t *hi) {
  int64_t low = 0, high = 0;
  for (int32_t i = 0; i < ndim; i++) {
    if (shape[i] == 0) {
      *lo = *hi = 0;
      return 0;
    }
  }
  for (int32_t i = 0; i < ndim; i++) {
    int64_t reach = 0;
    if (shape[i] <= 1) continue;
    if (__builtin_mul_overflow(shape[i] - 1, strides[i], &reach) ||
        __builtin_mul_overflow(reach, (int64_t)itemsize, &reach)) {
      return -1;
    }
    if (reach < 0 ? __builtin_add_overflow(low, reach, &low)
                  : __builtin_add_overflow(high, reach, &high)) {
      return -1;
    }
  }
  int64_t span = 0;
  if (__builtin_add_overflow(high, (int64_t)itemsize, &high) || low == INT64_MIN ||
      __builtin_sub_overflow(high, low, &span)) {
    return -1; /* so that -lo and hi - lo are int64 values, as callers compute them */
  }
  *lo = low;
  *hi = high;
  return 0;
}
