/* dlpack.c -- DLPack in hurray-core (dlpack.h, ADR-083): the checks of a DLPack tensor a
 * consumer receives, what a producer may export and how, and the public functions over them
 * (hurray_tensor_to_dlpack, hurray_tensor_from_dlpack and their legacy twins). The Python
 * binding's __dlpack__ and from_dlpack call the same internal functions.
 *
 * A producer is not trusted: every count, extent, stride and offset is checked with
 * overflow-checked arithmetic before any is used, and the range the elements reach must not
 * wrap the address space. Where the memory is an address (buffer-protocol.md §2.5) the tensor
 * is re-based on the lowest byte any element touches, so its byte_offset is never negative;
 * on handle-form devices (Metal, WebGPU, OpenCL) the handle stays where it is and no element
 * may precede it.
 *
 * What the check accepts, hurray_array_span accepts too, every byte inside
 * [start, start + size) (extents at most HURRAY_MAX_DIM, at most 2^60 - 1 bytes): a consumer
 * builds the tensor without running that check again, and fuzz_dlpack asserts it. */
#include "dlpack.h"

#include <stdlib.h>
#include <string.h>

/* The most bytes an accepted tensor may reach from its start, so that hurray-core's bit
 * offsets (hurray_array_span) cannot overflow: what the core accepts, and no more. */
#define MAX_SIZE ((uint64_t)INT64_MAX / 8)

/* The stream a DLPack consumer that passes none finds the data on: CUDA's legacy default
 * stream, HIP's null stream, both named 0x1 (buffer-protocol.md §2.6.2, §2.6.3). */
#define DEFAULT_STREAM ((void *)(uintptr_t)1)

static int has_streams(int tag) {
  return tag == HURRAY_DEVICE_CUDA || tag == HURRAY_DEVICE_ROCM;
}

/* ============================================================================================
 * The consumer's check
 * ============================================================================================ */

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
      return hurray__fail(error, HURRAY_ELAYOUT, "DLPack shape[%d] is %lld", (int)i,
                          (long long)dl->shape[i]);
    }
    if (dl->shape[i] > HURRAY_MAX_DIM) {
      return hurray__fail(error, HURRAY_ELIMIT,
                          "DLPack shape[%d] is %lld, over HURRAY_MAX_DIM (2^62)", (int)i,
                          (long long)dl->shape[i]);
    }
    if (__builtin_mul_overflow(*numel, (uint64_t)dl->shape[i], numel) || *numel > INT64_MAX) {
      /* int64 also bounds the row-major strides of NULL strides, products of extents */
      return hurray__fail(error, HURRAY_EOVERFLOW, "DLPack shape has too many elements");
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
      hurray__row_major_strides(out->array.ndim, out->shape, row_major);
      strides = row_major;
    }
    if (hurray__relative_span(out->array.ndim, out->shape, strides, dtype->bits / 8, lo, hi) <
        0) {
      return hurray__fail(error, HURRAY_EOVERFLOW, "DLPack strides reach 2^63 bytes or more");
    }
    return HURRAY_OK;
  }
  if (!hurray__array_is_c_contiguous(&out->array)) {
    return hurray__fail(error, HURRAY_EUNSUPPORTED,
                        "DLPack tensor of %s is strided; Hurray reads sub-byte elements packed",
                        dtype->name);
  }
  uint64_t nbytes = 0;
  HurrayError ignored;
  if (hurray_dtype_storage_bytes(dtype->code, numel, &nbytes, &ignored) != HURRAY_OK ||
      nbytes > INT64_MAX) {
    return hurray__fail(error, HURRAY_EOVERFLOW, "DLPack tensor is too large");
  }
  *hi = (int64_t)nbytes;
  return HURRAY_OK;
}

/* The memory the elements reach: from the lowest byte (address form) or from the handle. */
static int check_place(const HurrayDLTensor *dl, int64_t lo, int64_t hi, HurrayDLImport *out,
                       HurrayError *error) {
  uint64_t before = (uint64_t)-lo; /* bytes the elements reach before element 0 */
  if (hurray__address_form(out->tag)) {
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
      return hurray__fail(error, HURRAY_EOVERFLOW,
                          "the DLPack tensor wraps the address space (data 0x%llx, "
                          "byte_offset %llu, elements from %lld to %lld bytes around it)",
                          (unsigned long long)(uintptr_t)dl->data,
                          (unsigned long long)dl->byte_offset, (long long)lo, (long long)hi);
    }
    out->start = (void *)(first - (uintptr_t)before);
    return HURRAY_OK;
  }
  /* An opaque handle: the offset stays an offset and elements may not precede it. */
  if (before > dl->byte_offset) {
    return hurray__fail(error, HURRAY_EUNSUPPORTED,
                        "negative strides reach before the start of an opaque DLPack buffer "
                        "(%llu bytes before element 0, byte_offset %llu)",
                        (unsigned long long)before, (unsigned long long)dl->byte_offset);
  }
  out->start = dl->data;
  out->array.byte_offset = dl->byte_offset;
  if (__builtin_add_overflow(dl->byte_offset, (uint64_t)hi, &out->size)) {
    return hurray__fail(error, HURRAY_EOVERFLOW,
                        "DLPack byte_offset %llu overflows with the elements",
                        (unsigned long long)dl->byte_offset);
  }
  return HURRAY_OK;
}

int hurray__dlpack_check(const HurrayDLTensor *dl, uint64_t flags, HurrayDLImport *out,
                         HurrayError *error) {
  if (dl->ndim < 0 || dl->ndim > HURRAY_MAX_NDIM) {
    return hurray__fail(error, HURRAY_ELIMIT, "DLPack tensor has %d dimensions; at most %d",
                        (int)dl->ndim, HURRAY_MAX_NDIM);
  }
  if (dl->ndim > 0 && dl->shape == NULL) {
    return hurray__fail(error, HURRAY_DLPACK_EBROKEN, "DLPack tensor has a NULL shape");
  }
  uint8_t code = 0;
  int status =
      hurray_dtype_from_dlpack(dl->dtype.code, dl->dtype.bits, dl->dtype.lanes, &code, error);
  if (status != HURRAY_OK) return status;
  const HurrayDTypeInfo *dtype = hurray_dtype_info(code);
  if ((flags & HURRAY_DLPACK_FLAG_IS_SUBBYTE_TYPE_PADDED) != 0 && dtype->bits < 8) {
    return hurray__fail(error, HURRAY_EUNSUPPORTED,
                        "DLPack tensor stores %s padded to one element per byte; Hurray packs "
                        "sub-byte elements",
                        dtype->name);
  }
  status = hurray_device_from_dlpack(dl->device.device_type, &out->tag, &out->memory_class, error);
  if (status != HURRAY_OK) return status;
  if (dl->device.device_id < 0 || dl->device.device_id > UINT16_MAX) {
    return hurray__fail(error, HURRAY_EUNSUPPORTED, "DLPack device id %d is out of range",
                        (int)dl->device.device_id);
  }
  out->device_id = (uint16_t)dl->device.device_id;
  out->array = (HurrayArray){.ndim = dl->ndim, .shape = out->shape, .dtype = code};
  uint64_t numel = 0;
  status = check_extents(dl, out, &numel, error);
  if (status != HURRAY_OK) return status;
  if (dl->data == NULL && numel != 0) {
    return hurray__fail(error, HURRAY_DLPACK_EBROKEN,
                        "DLPack tensor of %llu elements has NULL data", (unsigned long long)numel);
  }
  int64_t lo = 0, hi = 0;
  status = check_span(out, dtype, numel, &lo, &hi, error);
  if (status == HURRAY_OK) status = check_place(dl, lo, hi, out, error);
  if (status != HURRAY_OK) return status;
  if (out->size > MAX_SIZE) {
    return hurray__fail(error, HURRAY_EOVERFLOW,
                        "the DLPack tensor reaches %llu bytes from its start; hurray-core "
                        "counts bit offsets in int64, so at most 2^60 - 1",
                        (unsigned long long)out->size);
  }
  int streams = has_streams(out->tag);
  out->sync_mode = streams ? HURRAY_SYNC_STREAM : HURRAY_SYNC_READY;
  out->sync_handle = streams ? DEFAULT_STREAM : NULL;
  out->readonly = (flags & HURRAY_DLPACK_FLAG_READ_ONLY) != 0;
  out->copied = (flags & HURRAY_DLPACK_FLAG_IS_COPIED) != 0;
  return HURRAY_OK;
}

int hurray__dlpack_check_version(const HurrayDLPackVersion *version, HurrayError *error) {
  if (version->major == HURRAY_DLPACK_MAJOR_VERSION) return HURRAY_OK;
  return hurray__fail(error, HURRAY_EABI,
                      "DLPack %u.%u is not supported: this consumer reads major version %u",
                      (unsigned)version->major, (unsigned)version->minor,
                      HURRAY_DLPACK_MAJOR_VERSION);
}

/* ============================================================================================
 * The producer's side
 * ============================================================================================ */

int hurray__dlpack_carries(const HurrayTensorDesc *tensor, HurrayError *error) {
  if (tensor->layout != HURRAY_LAYOUT_DENSE) {
    return hurray__fail(error, HURRAY_EUNSUPPORTED,
                        "DLPack carries dense tensors only; this one is %s",
                        hurray_layout_name((int)tensor->layout));
  }
  const HurrayArray *values = &tensor->parts[0];
  const HurrayDTypeInfo *dtype = hurray_dtype_info(values->dtype);
  if (dtype->kind == HURRAY_KIND_BLOCK) {
    return hurray__fail(error, HURRAY_EUNSUPPORTED,
                        "%s has no DLPack dtype (DLPack has no code for GGML blocks): "
                        "dequantise it first",
                        dtype->name);
  }
  if (dtype->dlpack_lanes == 0) {
    return hurray__fail(error, HURRAY_EUNSUPPORTED,
                        "%s has no DLPack dtype (DLPack has no code for packed %d-bit integers)",
                        dtype->name, (int)dtype->bits);
  }
  return HURRAY_OK;
}

void hurray__dlpack_fill(const HurrayArray *values, const HurrayBuffer *buffer,
                         const HurrayDLDevice *device, int64_t *dims, HurrayDLTensor *dl) {
  int32_t ndim = values->ndim;
  int64_t *shape = dims;
  int64_t *strides = dims + ndim;
  if (ndim > 0) memcpy(shape, values->shape, (size_t)ndim * sizeof *shape);
  /* Always explicit strides: DLPack >= 1.2 no longer allows NULL, and old consumers accept
   * them. */
  hurray__array_strides(values, strides);
  if (hurray__address_form(buffer->desc.device_tag)) {
    /* Fold the offset into the pointer, as NumPy and PyTorch do: consumers that ignore
     * byte_offset (a known pitfall) still read the right bytes. */
    dl->data = buffer->data == NULL
                   ? NULL
                   : (void *)((uintptr_t)buffer->data + (uintptr_t)values->byte_offset);
    dl->byte_offset = 0;
  } else {
    dl->data = buffer->data; /* an opaque handle: only byte_offset may move */
    dl->byte_offset = values->byte_offset;
  }
  dl->device.device_type = device->device_type;
  dl->device.device_id = device->device_id;
  dl->ndim = ndim;
  const HurrayDTypeInfo *dtype = hurray_dtype_info(values->dtype);
  dl->dtype.code = dtype->dlpack_code;
  dl->dtype.bits = dtype->dlpack_bits;
  dl->dtype.lanes = dtype->dlpack_lanes;
  dl->shape = shape;
  dl->strides = strides;
}

/* ============================================================================================
 * hurray_tensor_to_dlpack: a managed tensor over a context, which its deleter releases
 * ============================================================================================ */

/* One heap block per export: the managed struct, the context it keeps, shape and strides. */
typedef struct Export {
  union {
    HurrayDLManagedTensorVersioned versioned;
    HurrayDLManagedTensor legacy;
  } managed;
  HurrayTensorContext *context;
  int64_t dims[]; /* ndim extents, then ndim strides */
} Export;

static void export_free(Export *export) {
  hurray_tensor_context_release(export->context);
  free(export);
}

static void versioned_deleter(HurrayDLManagedTensorVersioned *self) {
  if (self != NULL) export_free(self->manager_ctx);
}

static void legacy_deleter(HurrayDLManagedTensor *self) {
  if (self != NULL) export_free(self->manager_ctx);
}

/* Whether a DLPack consumer, which passes no stream, may read the buffer now or on its
 * device's default stream: READY, or STREAM on the default stream (0x1) of CUDA and ROCm,
 * what hurray_tensor_from_dlpack records. */
static int check_sync(const HurrayBuffer *buffer, const char *what, HurrayError *error) {
  if (buffer->desc.sync_mode == HURRAY_SYNC_READY) return HURRAY_OK;
  if (buffer->desc.sync_mode == HURRAY_SYNC_STREAM && has_streams(buffer->desc.device_tag) &&
      buffer->sync_handle == DEFAULT_STREAM) {
    return HURRAY_OK;
  }
  return hurray__fail(error, HURRAY_EUNSUPPORTED,
                      "%s: the data is not ready (sync mode '%s') and a DLPack managed tensor "
                      "cannot say what to wait for; wait for it first (a READY buffer, or a "
                      "CUDA or ROCm one ordered on the default stream 0x1)",
                      what, hurray_sync_mode_name(buffer->desc.sync_mode));
}

/* The export of `context` (versioned or legacy), owning the context on success only. */
static int export_context(HurrayTensorContext *context, uint32_t flags, int versioned,
                          const char *what, Export **out, HurrayError *error) {
  if (context == NULL) return hurray__fail(error, HURRAY_EINVAL, "%s: context is NULL", what);
  if (flags != 0) {
    return hurray__fail(error, HURRAY_EINVAL, "%s: flags must be 0, not 0x%x", what,
                        (unsigned)flags);
  }
  int status = hurray_tensor_context_check(context, 0, error);
  if (status != HURRAY_OK) return status;
  status = hurray__dlpack_carries(context->tensor, error);
  if (status != HURRAY_OK) return status;
  const HurrayArray *values = &context->tensor->parts[0];
  const HurrayBuffer *buffer = context->buffers->buffers[values->buffer];
  HurrayDLDevice device = {.device_id = buffer->desc.device_id};
  status = hurray_device_to_dlpack(buffer->desc.device_tag, buffer->desc.memory_class,
                                   &device.device_type, error);
  if (status != HURRAY_OK) return status;
  status = check_sync(buffer, what, error);
  if (status != HURRAY_OK) return status;
  if (!versioned && (context->flags & HURRAY_BUFFER_READ_ONLY) != 0) {
    return hurray__fail(error, HURRAY_EUNSUPPORTED,
                        "%s: the tensor is read-only and a legacy DLManagedTensor cannot say "
                        "so; hurray_tensor_to_dlpack (DLPack 1.x) carries the flag",
                        what);
  }
  Export *export = malloc(sizeof(Export) + 2 * (size_t)values->ndim * sizeof(int64_t));
  if (export == NULL) return hurray__fail(error, HURRAY_ENOMEM, "%s: out of memory", what);
  HurrayDLTensor *dl =
      versioned ? &export->managed.versioned.dl_tensor : &export->managed.legacy.dl_tensor;
  hurray__dlpack_fill(values, buffer, &device, export->dims, dl);
  export->context = context;
  *out = export;
  return HURRAY_OK;
}

int hurray_tensor_to_dlpack(HurrayTensorContext *context, uint32_t flags,
                            HurrayDLManagedTensorVersioned **out, HurrayError *error) {
  static const char what[] = "hurray_tensor_to_dlpack";
  if (out == NULL) return hurray__fail(error, HURRAY_EINVAL, "%s: out is NULL", what);
  *out = NULL;
  Export *export = NULL;
  int status = export_context(context, flags, 1, what, &export, error);
  if (status != HURRAY_OK) return status;
  HurrayDLManagedTensorVersioned *m = &export->managed.versioned;
  m->version.major = HURRAY_DLPACK_MAJOR_VERSION;
  m->version.minor = HURRAY_DLPACK_MINOR_VERSION;
  m->manager_ctx = export;
  m->deleter = versioned_deleter;
  m->flags = (context->flags & HURRAY_BUFFER_READ_ONLY) != 0 ? HURRAY_DLPACK_FLAG_READ_ONLY : 0;
  *out = m;
  return HURRAY_OK;
}

int hurray_tensor_to_dlpack_legacy(HurrayTensorContext *context, uint32_t flags,
                                   HurrayDLManagedTensor **out, HurrayError *error) {
  static const char what[] = "hurray_tensor_to_dlpack_legacy";
  if (out == NULL) return hurray__fail(error, HURRAY_EINVAL, "%s: out is NULL", what);
  *out = NULL;
  Export *export = NULL;
  int status = export_context(context, flags, 0, what, &export, error);
  if (status != HURRAY_OK) return status;
  HurrayDLManagedTensor *m = &export->managed.legacy;
  m->manager_ctx = export;
  m->deleter = legacy_deleter;
  *out = m;
  return HURRAY_OK;
}

/* ============================================================================================
 * hurray_tensor_from_dlpack: a context over a managed tensor, whose deleter it calls once
 * ============================================================================================ */

static void release_versioned(void *owner) {
  HurrayDLManagedTensorVersioned *m = owner;
  if (m->deleter != NULL) m->deleter(m);
}

static void release_legacy(void *owner) {
  HurrayDLManagedTensor *m = owner;
  if (m->deleter != NULL) m->deleter(m);
}

/* The context over `dl` (with the versioned struct's `dl_flags`); `managed` and `release`
 * become the context's owner on success only. */
static int import_tensor(const HurrayDLTensor *dl, uint64_t dl_flags, uint32_t flags,
                         void *managed, HurrayOwnerReleaseFn release, const char *what,
                         HurrayTensorContext **out, HurrayError *error) {
  if ((flags & ~HURRAY_BUFFER_READ_ONLY) != 0) {
    return hurray__fail(error, HURRAY_EINVAL,
                        "%s: flags may hold only HURRAY_BUFFER_READ_ONLY, not 0x%x", what,
                        (unsigned)flags);
  }
  HurrayDLImport imported;
  int status = hurray__dlpack_check(dl, dl_flags, &imported, error);
  if (status == HURRAY_DLPACK_EBROKEN) {
    status = HURRAY_EINVAL;
    if (error != NULL) error->code = status;
  }
  if (status != HURRAY_OK) return status;
  uint32_t buffer_flags =
      imported.readonly || (flags & HURRAY_BUFFER_READ_ONLY) != 0 ? HURRAY_BUFFER_READ_ONLY : 0;
  uintptr_t base = (uintptr_t)imported.start;
  uint64_t size = imported.size;
  if (hurray__align_foreign(imported.tag, &base, &size, &imported.array.byte_offset) < 0) {
    return hurray__fail(error, HURRAY_EOVERFLOW, "%s: buffer size overflows 64 bits", what);
  }
  HurrayBufferDesc desc = {
      .byte_size = size,
      .alignment = HURRAY_MIN_ALIGNMENT,
      .device_id = imported.device_id,
      .device_tag = imported.tag,
      .memory_class = imported.memory_class,
      .sync_mode = imported.sync_mode,
  };
  HurrayBuffer *buffer = NULL;
  status = hurray_buffer_wrap((void *)base, &desc, buffer_flags, imported.sync_handle, 0, NULL,
                              NULL, &buffer, error);
  if (status != HURRAY_OK) return status;
  HurrayBufferList *list = NULL;
  status = hurray_buffer_list_create(1, &list, error);
  if (status != HURRAY_OK) {
    hurray_buffer_destroy(buffer);
    return status;
  }
  status = hurray_buffer_list_append(list, buffer, HURRAY_ROLE_VALUES, NULL, error);
  if (status != HURRAY_OK) {
    hurray_buffer_list_destroy(list); /* the buffer went with the failed append */
    return status;
  }
  HurrayTensorDesc tensor = {
      .layout = HURRAY_LAYOUT_DENSE,
      .ndim = imported.array.ndim,
      .shape = imported.shape,
      .parts = &imported.array,
      .nparts = 1,
      .dtype = imported.array.dtype,
  };
  /* No owner yet: a failed create must not call the producer's deleter, which stays the
   * caller's until this function succeeds. */
  HurrayTensorContext *context = NULL;
  status = hurray_tensor_context_create(&tensor, list, buffer_flags, NULL, NULL, &context, error);
  if (status != HURRAY_OK) return status;
  context->owner = managed;
  context->owner_release = release;
  *out = context;
  return HURRAY_OK;
}

int hurray_tensor_from_dlpack(HurrayDLManagedTensorVersioned *managed, uint32_t flags,
                              HurrayTensorContext **out, HurrayError *error) {
  static const char what[] = "hurray_tensor_from_dlpack";
  if (out == NULL) return hurray__fail(error, HURRAY_EINVAL, "%s: out is NULL", what);
  *out = NULL;
  if (managed == NULL) return hurray__fail(error, HURRAY_EINVAL, "%s: managed is NULL", what);
  int status = hurray__dlpack_check_version(&managed->version, error);
  if (status != HURRAY_OK) return status;
  return import_tensor(&managed->dl_tensor, managed->flags, flags, managed, release_versioned,
                       what, out, error);
}

int hurray_tensor_from_dlpack_legacy(HurrayDLManagedTensor *managed, uint32_t flags,
                                     HurrayTensorContext **out, HurrayError *error) {
  static const char what[] = "hurray_tensor_from_dlpack_legacy";
  if (out == NULL) return hurray__fail(error, HURRAY_EINVAL, "%s: out is NULL", what);
  *out = NULL;
  if (managed == NULL) return hurray__fail(error, HURRAY_EINVAL, "%s: managed is NULL", what);
  return import_tensor(&managed->dl_tensor, 0, flags, managed, release_legacy, what, out, error);
}
