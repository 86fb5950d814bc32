/* dlpack_check.h -- what a DLPack consumer checks before it takes anything from a capsule, in
 * plain C (no Python.h): hurray.from_dlpack (dlpack.c) runs it on every capsule it receives,
 * and the libFuzzer target fuzz/fuzz_dlpack.c drives it with hostile tensors. */
#ifndef HURRAY_PYTHON_DLPACK_CHECK_H
#define HURRAY_PYTHON_DLPACK_CHECK_H

#include <stdint.h>

#include "dlpack_abi.h"
#include "geometry.h"
#include "hurray/hurray.h"

/* The status of a tensor no producer may make (a NULL shape, NULL data): the consumer raises
 * hurray.BufferError for it. Every other failure is a Hurray status. */
#define HURRAY_DL_EBROKEN (-1)

/* A DLPack tensor, checked and translated. `array` points into this very struct (shape,
 * strides): use it in place. */
typedef struct HurrayDLImport {
  HurrayArray array; /* byte_offset relative to `start` */
  int64_t shape[HURRAY_MAX_NDIM];
  int64_t strides[HURRAY_MAX_NDIM];
  void *start;   /* address form: the lowest byte any element touches; else the handle */
  uint64_t size; /* bytes from `start` that the elements reach; start + size never wraps */
  uint8_t tag;
  uint8_t memory_class;
  uint16_t device_id;
  int readonly; /* DLPack's READ_ONLY flag */
  int copied;   /* DLPack's IS_COPIED flag */
} HurrayDLImport;

/* Checks everything `dl` (with the versioned struct's `flags`, 0 for a legacy capsule) says,
 * reading nothing but its fields and its shape and strides arrays: dimensions, dtype, device,
 * extents and strides with overflow-checked arithmetic, and where the elements lie (never
 * wrapping the address space; on handle-form devices never before the handle). What it
 * accepts, hurray_array_span accepts with every byte in [start, start + size): the consumer
 * does not check it again. HURRAY_OK and `out` filled, or a status (HURRAY_DL_EBROKEN
 * included) with `error` naming what was wrong. */
int hurray__py_dl_check(const HurrayDLTensor *dl, uint64_t flags, HurrayDLImport *out,
                        HurrayError *error);

#endif /* HURRAY_PYTHON_DLPACK_CHECK_H */
