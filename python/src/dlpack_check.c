/* dlpack_check.c -- the checks of a DLPack tensor a consumer receives (dlpack_check.h).
 *
 * A producer is not trusted: every count, extent, stride and offset is checked with
 * overflow-checked arithmetic before any is used, and the range the elements reach must not
 * wrap the address space. Where the memory is an address (buffer-protocol.md §2.5) the tensor
 * is re-based on the lowest byte any element touches, so its byte_offset is never negative;
 * on handle-form devices (Metal, WebGPU, OpenCL) the handle stays where it is and no element
 * may precede it.
 *
 * What it accepts, hurray-core's hurray_array_span accepts too, every byte inside
 * [start, start + size) (extents at most HURRAY_MAX_DIM, at most 2^60 - 1 bytes): the
 * consumer builds the tensor without running that check again, and fuzz_dlpack asserts it. */
#include "dlpack_check.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* The most bytes an accepted tensor may reach from its start, so that hurray-core's bit
 * offsets (hurray_array_span) cannot overflow: what the core accepts, and no more. */
#define MAX_SIZE ((uint64_t)INT64_MAX / 8)

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static int fail(HurrayError *error, int status, const char *fmt, ...) {
  if (error != NULL) {
    error->code = status;
    va_list args;
    va_start(args, fmt);
    vsnprintf(error->message, sizeof error->message, fmt, args);
    va_end(args);
  }
  return status;
}

/* shape and strides into `out`, and the number of elements. */
static int check_extents(const HurrayDLTensor *dl, HurrayDLImport *out, uint64_t *numel,
                         HurrayError *error) {
  int32_t ndim = dl->ndim;
  *numel = 1;
  /* The strides are copied in this loop too: a memcpy of a variable size up to 512 bytes is
   * inlined as `rep movsq`, slow to start for the few bytes of a usual tensor. */
  for (int32_t i = 0; i < ndim; i++) {
    out->shape[i] = dl->shape[i];
    if (dl->strides != NULL) out->strides[i] = dl->strides[i];
    if (dl->shape[i] < 0) {
      return fail(error, HURRAY_ELAYOUT, "DLPack shape[%d] is %lld", (int)i,
                  (long long)dl->shape[i]);
    }
    if (dl->shape[i] > HURRAY_MAX_DIM) {
      return fail(error, HURRAY_ELIMIT, "DLPack shape[%d] is %lld, over HURRAY_MAX_DIM (2^62)",
                  (int)i, (long long)dl->shape[i]);
    }
    if (__builtin_mul_overflow(*numel, (uint64_t)dl->shape[i], numel) || *numel > INT64_MAX) {
      /* int64 also bounds the row-major strides of NULL strides, products of extents */
      return fail(error, HURRAY_EOVERFLOW, "DLPack shape has too many elements");
    }
  }
  if (dl->strides != NULL) out->array.strides = out->strides; /* NULL: row-major compact */
  return HURRAY_OK;
}

/* Where the elements lie, as bytes [*lo, *hi) around element (0, ..., 0); -lo and hi - lo fit
 * int64. */
static int check_span(const HurrayDLImport *out, const HurrayDTypeInfo *dtype, uint64_t numel,
                      int64_t *lo, int64_t *hi, HurrayError *error) {
  *lo = *hi = 0;
  if (numel == 0) return HURRAY_OK;
  if (dtype->bits % 8 == 0) {
    int64_t row_major[HURRAY_MAX_NDIM];
    const int64_t *strides = out->array.strides;
    if (strides == NULL) {
      hurray__py_row_major_strides(out->array.ndim, out->shape, row_major);
      strides = row_major;
    }
    if (hurray__py_relative_span(out->array.ndim, out->shape, strides, dtype->bits / 8, lo, hi) <
        0) {
      return fail(error, HURRAY_EOVERFLOW, "DLPack strides reach 2^63 bytes or more");
    }
    return HURRAY_OK;
  }
  if (!hurray__py_array_is_c_contiguous(&out->array)) {
    return fail(error, HURRAY_EUNSUPPORTED,
                "DLPack tensor of %s is strided; Hurray reads sub-byte elements packed",
                dtype->name);
  }
  uint64_t nbytes = 0;
  HurrayError ignored;
  if (hurray_dtype_storage_bytes(dtype->code, numel, &nbytes, &ignored) != HURRAY_OK ||
      nbytes > INT64_MAX) {
    return fail(error, HURRAY_EOVERFLOW, "DLPack tensor is too large");
  }
  *hi = (int64_t)nbytes;
  return HURRAY_OK;
}

/* The memory the elements reach: from the lowest byte (address form) or from the handle. */
static int check_place(const HurrayDLTensor *dl, int64_t lo, int64_t hi, HurrayDLImport *out,
                       HurrayError *error) {
  uint64_t before = (uint64_t)-lo; /* bytes the elements reach before element 0 */
  if (hurray__py_address_form(out->tag)) {
    out->array.byte_offset = before;
    out->size = before + (uint64_t)hi;
    if (dl->data == NULL) {
      out->start = NULL; /* no elements (checked by the caller) */
      return HURRAY_OK;
    }
    uintptr_t first = 0, end = 0;
    if (
#if UINTPTR_MAX < UINT64_MAX
        dl->byte_offset > UINTPTR_MAX ||
#endif
        __builtin_add_overflow((uintptr_t)dl->data, (uintptr_t)dl->byte_offset, &first) ||
        before > first || __builtin_add_overflow(first, (uintptr_t)hi, &end)) {
      return fail(error, HURRAY_EOVERFLOW,
                  "the DLPack tensor wraps the address space (data 0x%llx, byte_offset %llu, "
                  "elements from %lld to %lld bytes around it)",
                  (unsigned long long)(uintptr_t)dl->data, (unsigned long long)dl->byte_offset,
                  (long long)lo, (long long)hi);
    }
    out->start = (void *)(first - (uintptr_t)before);
    return HURRAY_OK;
  }
  /* An opaque handle: the offset stays an offset and elements may not precede it. */
  if (before > dl->byte_offset) {
    return fail(error, HURRAY_EUNSUPPORTED,
                "negative strides reach before the start of an opaque DLPack buffer "
                "(%llu bytes before element 0, byte_offset %llu)",
                (unsigned long long)before, (unsigned long long)dl->byte_offset);
  }
  out->start = dl->data;
  out->array.byte_offset = dl->byte_offset;
  if (__builtin_add_overflow(dl->byte_offset, (uint64_t)hi, &out->size)) {
    return fail(error, HURRAY_EOVERFLOW, "DLPack byte_offset %llu overflows with the elements",
                (unsigned long long)dl->byte_offset);
  }
  return HURRAY_OK;
}

int hurray__py_dl_check(const HurrayDLTensor *dl, uint64_t flags, HurrayDLImport *out,
                        HurrayError *error) {
  if (dl->ndim < 0 || dl->ndim > HURRAY_MAX_NDIM) {
    return fail(error, HURRAY_ELIMIT, "DLPack tensor has %d dimensions; at most %d",
                (int)dl->ndim, HURRAY_MAX_NDIM);
  }
  if (dl->ndim > 0 && dl->shape == NULL) {
    return fail(error, HURRAY_DL_EBROKEN, "DLPack tensor has a NULL shape");
  }
  uint8_t code = 0;
  int status =
      hurray_dtype_from_dlpack(dl->dtype.code, dl->dtype.bits, dl->dtype.lanes, &code, error);
  if (status != HURRAY_OK) return status;
  const HurrayDTypeInfo *dtype = hurray_dtype_info(code);
  if ((flags & HURRAY_DL_FLAG_IS_SUBBYTE_TYPE_PADDED) != 0 && dtype->bits < 8) {
    return fail(error, HURRAY_EUNSUPPORTED,
                "DLPack tensor stores %s padded to one element per byte; Hurray packs "
                "sub-byte elements",
                dtype->name);
  }
  status = hurray_device_from_dlpack(dl->device.device_type, &out->tag, &out->memory_class, error);
  if (status != HURRAY_OK) return status;
  if (dl->device.device_id < 0 || dl->device.device_id > UINT16_MAX) {
    return fail(error, HURRAY_EUNSUPPORTED, "DLPack device id %d is out of range",
                (int)dl->device.device_id);
  }
  out->device_id = (uint16_t)dl->device.device_id;
  out->array = (HurrayArray){.ndim = dl->ndim, .shape = out->shape, .dtype = code};
  uint64_t numel = 0;
  status = check_extents(dl, out, &numel, error);
  if (status != HURRAY_OK) return status;
  if (dl->data == NULL && numel != 0) {
    return fail(error, HURRAY_DL_EBROKEN, "DLPack tensor of %llu elements has NULL data",
                (unsigned long long)numel);
  }
  int64_t lo = 0, hi = 0;
  status = check_span(out, dtype, numel, &lo, &hi, error);
  if (status == HURRAY_OK) status = check_place(dl, lo, hi, out, error);
  if (status != HURRAY_OK) return status;
  if (out->size > MAX_SIZE) {
    return fail(error, HURRAY_EOVERFLOW,
                "the DLPack tensor reaches %llu bytes from its start; hurray-core counts bit "
                "offsets in int64, so at most 2^60 - 1",
                (unsigned long long)out->size);
  }
  out->readonly = (flags & HURRAY_DL_FLAG_READ_ONLY) != 0;
  out->copied = (flags & HURRAY_DL_FLAG_IS_COPIED) != 0;
  return HURRAY_OK;
}
