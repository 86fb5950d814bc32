/* dlpack_abi.h -- the DLPack C ABI as hurray-python speaks it. Private to the extension.
 *
 * Written from the DLPack specification (dlpack.h, versions 1.0 to 1.3, and the array API
 * standard's DLPack section) rather than copied from it, so the extension depends on no
 * header outside this repository. Only what hurray-python reads or writes is declared.
 * The integers are DLPack's and never change; the layouts are pinned by the _Static_asserts
 * at the end (x86-64 / AArch64 LP64 and every other ABI with 8-byte pointers).
 */
#ifndef HURRAY_PYTHON_DLPACK_ABI_H
#define HURRAY_PYTHON_DLPACK_ABI_H

#include <stddef.h>
#include <stdint.h>

/* The version of the versioned struct this extension produces. A consumer that sees another
 * major version must not read past `version` (it may still call `deleter`); minor versions
 * only add enum values, never move a field. */
#define HURRAY_DL_MAJOR_VERSION 1u
#define HURRAY_DL_MINOR_VERSION 1u

/* DLDeviceType: only the integers matter here; the Hurray <-> DLPack device mapping lives in
 * hurray-core (hurray_device_to_dlpack / hurray_device_from_dlpack), and the stream rules
 * follow the Hurray device tag (stream.c). */
#define HURRAY_DL_CPU 1

/* DLDataTypeCode values the extension itself needs to name. */
#define HURRAY_DL_CODE_BOOL 6

/* DLManagedTensorVersioned.flags */
#define HURRAY_DL_FLAG_READ_ONLY (UINT64_C(1) << 0)
#define HURRAY_DL_FLAG_IS_COPIED (UINT64_C(1) << 1)
#define HURRAY_DL_FLAG_IS_SUBBYTE_TYPE_PADDED (UINT64_C(1) << 2)

/* PyCapsule names: a consumer renames the capsule to the "used_" name before it takes
 * ownership, so the producer's capsule destructor leaves a consumed tensor alone. */
#define HURRAY_DL_CAPSULE_LEGACY "dltensor"
#define HURRAY_DL_CAPSULE_LEGACY_USED "used_dltensor"
#define HURRAY_DL_CAPSULE_VERSIONED "dltensor_versioned"
#define HURRAY_DL_CAPSULE_VERSIONED_USED "used_dltensor_versioned"

typedef struct HurrayDLDevice {
  int32_t device_type; /* DLDeviceType */
  int32_t device_id;
} HurrayDLDevice;

typedef struct HurrayDLDataType {
  uint8_t code;   /* DLDataTypeCode */
  uint8_t bits;   /* bits per lane */
  uint16_t lanes; /* 1 for scalars */
} HurrayDLDataType;

typedef struct HurrayDLTensor {
  void *data; /* with byte_offset: the address of element (0, ..., 0); opaque on some devices */
  HurrayDLDevice device;
  int32_t ndim;
  HurrayDLDataType dtype;
  int64_t *shape;
  int64_t *strides; /* in elements; NULL from old producers means row-major compact */
  uint64_t byte_offset;
} HurrayDLTensor;

/* The legacy struct, capsule "dltensor". It cannot say "read-only" or "copied". */
typedef struct HurrayDLManagedTensor {
  HurrayDLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct HurrayDLManagedTensor *self);
} HurrayDLManagedTensor;

typedef struct HurrayDLPackVersion {
  uint32_t major;
  uint32_t minor;
} HurrayDLPackVersion;

/* The versioned struct, capsule "dltensor_versioned" (DLPack >= 1.0). Everything up to and
 * including `flags` keeps its place in every future version. */
typedef struct HurrayDLManagedTensorVersioned {
  HurrayDLPackVersion version;
  void *manager_ctx;
  void (*deleter)(struct HurrayDLManagedTensorVersioned *self);
  uint64_t flags;
  HurrayDLTensor dl_tensor;
} HurrayDLManagedTensorVersioned;

#if UINTPTR_MAX == UINT64_MAX
_Static_assert(sizeof(HurrayDLDevice) == 8, "DLDevice is 8 bytes");
_Static_assert(sizeof(HurrayDLDataType) == 4, "DLDataType is 4 bytes");
_Static_assert(offsetof(HurrayDLTensor, device) == 8, "DLTensor.device");
_Static_assert(offsetof(HurrayDLTensor, ndim) == 16, "DLTensor.ndim");
_Static_assert(offsetof(HurrayDLTensor, dtype) == 20, "DLTensor.dtype");
_Static_assert(offsetof(HurrayDLTensor, shape) == 24, "DLTensor.shape");
_Static_assert(offsetof(HurrayDLTensor, strides) == 32, "DLTensor.strides");
_Static_assert(offsetof(HurrayDLTensor, byte_offset) == 40, "DLTensor.byte_offset");
_Static_assert(sizeof(HurrayDLTensor) == 48, "DLTensor is 48 bytes");
_Static_assert(offsetof(HurrayDLManagedTensor, manager_ctx) == 48, "DLManagedTensor.ctx");
_Static_assert(offsetof(HurrayDLManagedTensor, deleter) == 56, "DLManagedTensor.deleter");
_Static_assert(offsetof(HurrayDLManagedTensorVersioned, manager_ctx) == 8, "versioned ctx");
_Static_assert(offsetof(HurrayDLManagedTensorVersioned, deleter) == 16, "versioned deleter");
_Static_assert(offsetof(HurrayDLManagedTensorVersioned, flags) == 24, "versioned flags");
_Static_assert(offsetof(HurrayDLManagedTensorVersioned, dl_tensor) == 32, "versioned tensor");
#endif

#endif /* HURRAY_PYTHON_DLPACK_ABI_H */
