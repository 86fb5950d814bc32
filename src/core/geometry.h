/* geometry.h -- array geometry shared by hurray-core's DLPack exchange (dlpack.c), the Python
 * binding (which links the static core) and the DLPack fuzz target: strides, contiguity and
 * the byte span of an array. Private: not installed, not API. */
#ifndef HURRAY_CORE_GEOMETRY_H
#define HURRAY_CORE_GEOMETRY_H

#include <stdint.h>

#include "internal.h"

/* Whether a device's buffer data is an address (buffer-protocol.md §2.5: CPU, CUDA, ROCm,
 * Vulkan, Hexagon, Level Zero and private tags), so that data + k is byte k; Metal, WebGPU and
 * OpenCL hold an object handle there, which only a byte_offset may move. */
static inline int hurray__address_form(int tag) {
  return tag != HURRAY_DEVICE_METAL && tag != HURRAY_DEVICE_WEBGPU && tag != HURRAY_DEVICE_OPENCL;
}

/* Foreign memory at an arbitrary address, described for hurray_buffer_wrap (ADR-008): on an
 * address device `*base` is rounded down to HURRAY_MIN_ALIGNMENT and `*size` and
 * `*byte_offset` grow by the bytes it moved; handle devices are left alone. -1 when a sum
 * overflows 64 bits. */
static inline int hurray__align_foreign(int tag, uintptr_t *base, uint64_t *size,
                                        uint64_t *byte_offset) {
  if (!hurray__address_form(tag)) return 0;
  uint64_t slack = (uint64_t)(*base % HURRAY_MIN_ALIGNMENT);
  *base -= (uintptr_t)slack;
  return __builtin_add_overflow(*size, slack, size) ||
                 __builtin_add_overflow(*byte_offset, slack, byte_offset)
             ? -1
             : 0;
}

/* Row-major contiguity of an array: dimensions of extent 1 may have any stride; an empty
 * array is contiguous. */
HURRAY_INTERNAL int hurray__array_is_c_contiguous(const HurrayArray *array);
/* The row-major strides of `shape` (elements). */
HURRAY_INTERNAL void hurray__row_major_strides(int32_t ndim, const int64_t *shape,
                                               int64_t *strides);
/* Element strides of `array` (its own, or row-major when NULL). */
HURRAY_INTERNAL void hurray__array_strides(const HurrayArray *array, int64_t *strides);
/* The byte span [lo, hi) relative to the address of element (0, ..., 0) that the array
 * touches when its element 0 sits at an arbitrary byte; `lo` may be negative (negative
 * strides). Only for whole-byte dtypes. Returns -1 on overflow, and whenever -lo or hi - lo
 * would not fit int64, so callers may compute both. */
HURRAY_INTERNAL int hurray__relative_span(int32_t ndim, const int64_t *shape,
                                          const int64_t *strides, uint64_t itemsize, int64_t *lo,
                                          int64_t *hi);

#endif /* HURRAY_CORE_GEOMETRY_H */
