/* geometry.h -- array geometry of hurray-python, in plain C (no Python.h): shared by the
 * extension's files, the DLPack import check and its fuzz target. */
#ifndef HURRAY_PYTHON_GEOMETRY_H
#define HURRAY_PYTHON_GEOMETRY_H

#include <stdint.h>

#include "hurray/hurray.h"

/* Whether a device's buffer data is an address (buffer-protocol.md §2.5: CPU, CUDA, ROCm,
 * Vulkan, Hexagon, Level Zero and private tags), so that data + k is byte k; Metal, WebGPU and
 * OpenCL hold an object handle there, which only a byte_offset may move. */
static inline int hurray__py_address_form(int tag) {
  return tag != HURRAY_DEVICE_METAL && tag != HURRAY_DEVICE_WEBGPU && tag != HURRAY_DEVICE_OPENCL;
}

/* Row-major contiguity of an array: dimensions of extent 1 may have any stride; an empty
 * array is contiguous. */
int hurray__py_array_is_c_contiguous(const HurrayArray *array);
/* The row-major strides of `shape` (elements). */
void hurray__py_row_major_strides(int32_t ndim, const int64_t *shape, int64_t *strides);
/* Element strides of `array` (its own, or row-major when NULL). */
void hurray__py_array_strides(const HurrayArray *array, int64_t *strides);
/* The byte span [lo, hi) relative to the address of element (0, ..., 0) that the array
 * touches when its element 0 sits at an arbitrary byte; `lo` may be negative (negative
 * strides). Only for whole-byte dtypes. Returns -1 on overflow, and whenever -lo or hi - lo
 * would not fit int64, so callers may compute both. */
int hurray__py_relative_span(int32_t ndim, const int64_t *shape, const int64_t *strides,
                             uint64_t itemsize, int64_t *lo, int64_t *hi);

#endif /* HURRAY_PYTHON_GEOMETRY_H */
