/* dlpack.h -- the DLPack exchange of hurray-core (dlpack.c), private: what the public
 * hurray_tensor_to_dlpack / hurray_tensor_from_dlpack and the Python binding's __dlpack__ and
 * from_dlpack share, so the mapping, the refusals and the checks have one implementation
 * (ADR-083). The fuzz target fuzz/fuzz_dlpack.c drives the consumer's check. */
#ifndef HURRAY_CORE_DLPACK_H
#define HURRAY_CORE_DLPACK_H

#include <stdint.h>

#include "geometry.h"
#include "internal.h"

/* The status of a tensor no producer may make (a NULL shape, NULL data): the public functions
 * answer HURRAY_EINVAL for it, the Python consumer hurray.BufferError. Every other failure is
 * a Hurray status. */
#define HURRAY_DLPACK_EBROKEN (-1)

/* A DLPack tensor, checked and translated. `array` points into this very struct (shape,
 * strides): use it in place. */
typedef struct HurrayDLImport {
  HurrayArray array; /* byte_offset relative to `start` */
  int64_t shape[HURRAY_MAX_NDIM];
  int64_t strides[HURRAY_MAX_NDIM];
  void *start;       /* address form: the lowest byte any element touches; else the handle */
  uint64_t size;     /* bytes from `start` that the elements reach; start + size never wraps */
  void *sync_handle; /* CUDA, ROCm: 0x1, the legacy default / null stream; else NULL */
  uint8_t sync_mode; /* CUDA, ROCm: HURRAY_SYNC_STREAM; else HURRAY_SYNC_READY */
  uint8_t tag;
  uint8_t memory_class;
  uint16_t device_id;
  int readonly; /* DLPack's READ_ONLY flag */
  int copied;   /* DLPack's IS_COPIED flag */
} HurrayDLImport;

/* Checks everything `dl` (with the versioned struct's `flags`, 0 for a legacy struct) says,
 * reading nothing but its fields and its shape and strides arrays: dimensions, dtype, device,
 * extents and strides with overflow-checked arithmetic, and where the elements lie (never
 * wrapping the address space; on handle-form devices never before the handle). What it
 * accepts, hurray_array_span accepts with every byte in [start, start + size): the consumer
 * does not check it again. A DLPack consumer passes no stream, so data on a device with
 * streams is recorded as ordered on its default stream (buffer-protocol.md §2.6.2, §2.6.3).
 * HURRAY_OK and `out` filled, or a status (HURRAY_DLPACK_EBROKEN included) with `error`
 * naming what was wrong. */
HURRAY_INTERNAL int hurray__dlpack_check(const HurrayDLTensor *dl, uint64_t flags,
                                         HurrayDLImport *out, HurrayError *error);

/* HURRAY_OK for a versioned struct of the major version this library reads; HURRAY_EABI
 * naming both versions otherwise. Reads `version` only. */
HURRAY_INTERNAL int hurray__dlpack_check_version(const HurrayDLPackVersion *version,
                                                 HurrayError *error);

/* Whether DLPack carries the layout and the dtype of `tensor`: HURRAY_OK for a DENSE tensor of
 * a dtype with a DLPack form, else HURRAY_EUNSUPPORTED naming what DLPack lacks. Its device is
 * the other question (hurray_device_to_dlpack). */
HURRAY_INTERNAL int hurray__dlpack_carries(const HurrayTensorDesc *tensor, HurrayError *error);

/* Fills `dl` over `values` in `buffer` on `device` (hurray_device_to_dlpack's): shape
 * and explicit strides into `dims` (2 * ndim entries, which `dl` then points to); on address
 * devices the byte offset folded into `data` (byte_offset 0), on handle devices `data` the
 * handle and byte_offset the offset. */
HURRAY_INTERNAL void hurray__dlpack_fill(const HurrayArray *values, const HurrayBuffer *buffer,
                                         const HurrayDLDevice *device, int64_t *dims,
                                         HurrayDLTensor *dl);

#endif /* HURRAY_CORE_DLPACK_H */
