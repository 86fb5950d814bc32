/*
 * hurray.h -- hurray-ffi, the stable C ABI of Hurray.
 *
 * Hurray is a device-aware tensor interchange format. This header is the whole public API of
 * the C library: whatever is not declared here is not API. The normative byte layouts live in
 * docs/spec/; the ownership rules are collected in docs/impl/c-ffi.md.
 *
 * Conventions used throughout:
 *  - Every function that can fail returns an int status: HURRAY_OK (0) or one of HurrayStatus.
 *    Details go into an optional caller-owned HurrayError (NULL is allowed everywhere).
 *  - Ownership is named by the verb: `create`/`destroy` for heap objects (destroy(NULL) is a
 *    no-op), `release` for exchange structs, `wrap` borrows nothing and takes ownership only on
 *    success, and a function documented as a SINK takes ownership of its argument whether it
 *    succeeds or not (on failure it destroys the argument itself).
 *  - Integers in encoded byte layouts are little-endian; structs in this header are host-order
 *    in-memory objects and are never written to a file or a socket as they are.
 *  - Thread safety: functions are safe to call concurrently on distinct objects. The private
 *    device-tag registry is internally synchronised.
 */
#ifndef HURRAY_HURRAY_H
#define HURRAY_HURRAY_H

/* The simple API: read one tensor of a file. This is examples/simple.c, which the tests build
 * and run (and keep equal to this copy and to the one in docs/impl/c-ffi.md). */
#if 0 /* examples/simple.c */
/* simple.c -- the simple API: open a file, get a tensor by name, reach its shape and data,
 * release. Run: simple FILE NAME */
#include <inttypes.h>
#include <stdio.h>

#include "hurray/hurray.h"

int main(int argc, char **argv) {
  if (argc != 3) return 2;
  HurrayError error = {0};
  HurrayFileReader *file = NULL;
  HurrayTensorContext *tensor = NULL;
  uint32_t index = 0;
  if (hurray_file_reader_open(argv[1], 0, &file, &error) != HURRAY_OK ||  /* maps, validates */
      hurray_file_reader_find(file, argv[2], &index, &error) != HURRAY_OK ||
      hurray_file_reader_get(file, index, 0, &tensor, &error) != HURRAY_OK) { /* zero-copy */
    fprintf(stderr, "%s: %s\n", hurray_status_name(error.code), error.message);
    hurray_file_reader_destroy(file);
    return 1;
  }
  const HurrayTensorDesc *t = tensor->tensor; /* layout, dtype, shape, parts */
  printf("%s tensor of shape [", hurray_layout_name((int)t->layout));
  for (int32_t k = 0; k < t->ndim; k++) printf("%s%" PRId64, k ? ", " : "", t->shape[k]);
  printf("]");
  if (t->layout == HURRAY_LAYOUT_DENSE && t->dtype == HURRAY_DTYPE_FLOAT32 &&
      t->parts[0].strides == NULL) { /* row-major float32: a plain C array */
    const float *x = hurray_tensor_context_data(tensor, 0);
    uint64_t n = 0;
    hurray_array_numel(&t->parts[0], &n, NULL);
    for (uint64_t i = 0; i < n; i++) printf("%s%g", i ? " " : ": ", (double)x[i]);
  }
  printf("\n");
  hurray_tensor_context_release(tensor); /* the data is valid until here */
  hurray_file_reader_destroy(file);      /* may come first: a tensor keeps the mapping */
  return 0;
}
#endif /* examples/simple.c */

#include <stddef.h>
#include <stdint.h>

#include "hurray/version.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#if defined(HURRAY_BUILDING_SHARED)
#define HURRAY_API __declspec(dllexport)
#elif defined(HURRAY_USING_SHARED)
#define HURRAY_API __declspec(dllimport)
#else
#define HURRAY_API
#endif
#elif defined(__GNUC__)
#define HURRAY_API __attribute__((visibility("default")))
#else
#define HURRAY_API
#endif

/* ============================================================================================
 * Versions
 * ============================================================================================ */

/* The C ABI version of this header. Every struct below is laid out for this version. */
#define HURRAY_C_ABI_VERSION 4

/* Runtime counterparts of the macros, so a caller can check that the header it was compiled
 * against and the library it runs with agree. */
HURRAY_API uint32_t hurray_c_abi_version(void);
/* (major << 16) | (minor << 8) | patch, the same number as HURRAY_VERSION. */
HURRAY_API uint32_t hurray_version(void);
/* "MAJOR.MINOR.PATCH", static storage. */
HURRAY_API const char *hurray_version_string(void);

/* ============================================================================================
 * Status codes and errors
 * ============================================================================================ */

/* X-macro: (NAME, value, message). Values are stable forever; new codes are appended. */
#define HURRAY_STATUS_LIST(X)                                                                  \
  X(OK, 0, "success")                                                                          \
  X(EINVAL, 1, "invalid argument")                                                             \
  X(ENOMEM, 2, "out of memory")                                                                \
  X(EOVERFLOW, 3, "size arithmetic overflows")                                                 \
  X(ELIMIT, 4, "a limit is exceeded")                                                          \
  X(EDTYPE, 5, "unknown or invalid dtype")                                                     \
  X(EDEVICE, 6, "unknown, reserved or invalid device tag")                                     \
  X(EMEMCLASS, 7, "unknown or invalid memory class")                                           \
  X(ESYNC, 8, "unknown or invalid sync mode")                                                  \
  X(EALIGN, 9, "invalid alignment or misaligned address")                                      \
  X(ELAYOUT, 10, "invalid tensor layout")                                                      \
  X(EBOUNDS, 11, "an element lies outside its buffer")                                         \
  X(EABI, 12, "C ABI version mismatch")                                                        \
  X(EUNSUPPORTED, 13, "valid but not supported")                                               \
  X(EFORMAT, 14, "malformed encoded bytes")                                                    \
  X(EIO, 15, "input/output error")                                                             \
  X(ESTATE, 16, "object in the wrong state")                                                   \
  X(ECHECKSUM, 17, "checksum mismatch")                                                        \
  X(EPROTOCOL, 18, "wire protocol violation")                                                  \
  X(EAUTH, 19, "authentication failed")                                                        \
  X(EDENIED, 20, "not permitted")                                                              \
  X(ETIMEOUT, 21, "timed out")                                                                 \
  X(ECONNECTION, 22, "connection closed or refused")

typedef enum HurrayStatus {
#define HURRAY_X_ENUM(name, value, message) HURRAY_##name = value,
  HURRAY_STATUS_LIST(HURRAY_X_ENUM)
#undef HURRAY_X_ENUM
} HurrayStatus;

#define HURRAY_ERROR_MESSAGE_SIZE 256

/* Caller-owned error details. Functions that fail write `code` and a NUL-terminated,
 * human-readable `message` naming what was wrong; on success they leave it untouched.
 * `system_errno` is the errno of the failed system call behind the error (a file that does not
 * exist: ENOENT), 0 when there is none (ADR-038). */
typedef struct HurrayError {
  int32_t code;
  int32_t system_errno;
  char message[HURRAY_ERROR_MESSAGE_SIZE];
} HurrayError;

/* "HURRAY_EINVAL" etc.; "HURRAY_UNKNOWN_STATUS" for a value not in the list. Static storage. */
HURRAY_API const char *hurray_status_name(int status);
/* The generic message of a status ("invalid argument"); static storage. */
HURRAY_API const char *hurray_status_message(int status);

/* ============================================================================================
 * Dtypes
 *
 * One table of every element type Hurray knows. Codes are forever (docs/spec/dtypes.md).
 * Tier 1: the array API dtypes. Tier 2: further floating types. Tier 3: quantised integers.
 * Sub-byte dtypes are packed: element i of a contiguous run occupies bits [i*bits, (i+1)*bits)
 * of the little-endian bit stream, so int4 puts its first element in the low nibble.
 * ============================================================================================ */

typedef enum HurrayDTypeCode {
  HURRAY_DTYPE_INVALID = 0,
  /* Tier 1 */
  HURRAY_DTYPE_BOOL = 1,
  HURRAY_DTYPE_INT8 = 2,
  HURRAY_DTYPE_INT16 = 3,
  HURRAY_DTYPE_INT32 = 4,
  HURRAY_DTYPE_INT64 = 5,
  HURRAY_DTYPE_UINT8 = 6,
  HURRAY_DTYPE_UINT16 = 7,
  HURRAY_DTYPE_UINT32 = 8,
  HURRAY_DTYPE_UINT64 = 9,
  HURRAY_DTYPE_FLOAT32 = 10,
  HURRAY_DTYPE_FLOAT64 = 11,
  HURRAY_DTYPE_COMPLEX64 = 12,
  HURRAY_DTYPE_COMPLEX128 = 13,
  /* Tier 2 */
  HURRAY_DTYPE_FLOAT16 = 32,
  HURRAY_DTYPE_BFLOAT16 = 33,
  HURRAY_DTYPE_FLOAT8_E4M3FN = 34,
  HURRAY_DTYPE_FLOAT8_E5M2 = 35,
  HURRAY_DTYPE_FLOAT8_E4M3FNUZ = 36,
  HURRAY_DTYPE_FLOAT8_E5M2FNUZ = 37,
  HURRAY_DTYPE_FLOAT8_E8M0FNU = 38,
  HURRAY_DTYPE_FLOAT8_E3M4 = 39,
  HURRAY_DTYPE_FLOAT8_E4M3 = 40,
  HURRAY_DTYPE_FLOAT8_E4M3B11FNUZ = 41,
  HURRAY_DTYPE_FLOAT6_E2M3FN = 42,
  HURRAY_DTYPE_FLOAT6_E3M2FN = 43,
  HURRAY_DTYPE_FLOAT4_E2M1FN = 44,
  HURRAY_DTYPE_COMPLEX32 = 45,
  /* Tier 3: quantised integers */
  HURRAY_DTYPE_INT4 = 64,
  HURRAY_DTYPE_UINT4 = 65,
  HURRAY_DTYPE_INT2 = 66,
  HURRAY_DTYPE_UINT2 = 67,
  HURRAY_DTYPE_UINT1 = 68,
  /* Tier 3: GGML quantisation blocks (ADR-094, dtypes.md §6). An element is one byte of a
   * row of whole blocks; a row of n bytes holds n / bytes * elements weights
   * (hurray_dtype_block). */
  HURRAY_DTYPE_Q4_0 = 69,
  HURRAY_DTYPE_Q4_1 = 70,
  HURRAY_DTYPE_Q5_0 = 71,
  HURRAY_DTYPE_Q5_1 = 72,
  HURRAY_DTYPE_Q8_0 = 73,
  HURRAY_DTYPE_Q2_K = 74,
  HURRAY_DTYPE_Q3_K = 75,
  HURRAY_DTYPE_Q4_K = 76,
  HURRAY_DTYPE_Q5_K = 77,
  HURRAY_DTYPE_Q6_K = 78,
  HURRAY_DTYPE_Q8_K = 79
} HurrayDTypeCode;

typedef enum HurrayDTypeKind {
  HURRAY_KIND_BOOL = 0,
  HURRAY_KIND_SIGNED = 1,
  HURRAY_KIND_UNSIGNED = 2,
  HURRAY_KIND_FLOAT = 3,
  HURRAY_KIND_COMPLEX = 4,
  HURRAY_KIND_BLOCK = 5 /* bytes of quantisation blocks: HURRAY_DTYPE_Q4_0 .. Q8_K */
} HurrayDTypeKind;

/* DLPack's DLDataTypeCode values, for HurrayDTypeInfo.dlpack_code (DLPack's integers). */
#define HURRAY_DLPACK_NONE 0xFF /* no DLPack form: dlpack_lanes is 0 as well */

typedef struct HurrayDTypeInfo {
  const char *name;    /* "float32", "int4", ...: the dtype's one spelling */
  uint8_t code;        /* HurrayDTypeCode */
  uint8_t tier;        /* 1, 2 or 3 */
  uint8_t kind;        /* HurrayDTypeKind */
  uint8_t bits;        /* storage bits per element: 1, 2, 4, 6, 8, 16, 32, 64 or 128 */
  uint8_t dlpack_code; /* DLPack DLDataTypeCode, or HURRAY_DLPACK_NONE */
  uint8_t dlpack_bits; /* DLPack bits (0 when none) */
  uint16_t dlpack_lanes; /* 1, or 0 when DLPack cannot carry the dtype */
} HurrayDTypeInfo;

/* The table entry of `code`, or NULL for a code Hurray does not know. Static storage. */
HURRAY_API const HurrayDTypeInfo *hurray_dtype_info(int code);
/* Looks a dtype up by its name; HURRAY_EDTYPE if there is none. */
HURRAY_API int hurray_dtype_from_name(const char *name, uint8_t *code, HurrayError *error);
/* The Hurray dtype of a DLPack (code, bits, lanes); HURRAY_EUNSUPPORTED if Hurray has none. */
HURRAY_API int hurray_dtype_from_dlpack(uint8_t dl_code, uint8_t dl_bits, uint16_t dl_lanes,
                                        uint8_t *code, HurrayError *error);
/* Bytes needed to store `count` packed elements: ceil(count * bits / 8), overflow-checked. */
HURRAY_API int hurray_dtype_storage_bytes(int code, uint64_t count, uint64_t *bytes,
                                          HurrayError *error);
/* A block dtype's block: `*elements` weights in `*bytes` bytes (Q4_0: 32 in 18). HURRAY_EDTYPE
 * for a dtype of another kind. A tensor of a block dtype is DENSE, row-major, of rank >= 1,
 * and its last extent (bytes of a row) a multiple of `*bytes` (ADR-094). */
HURRAY_API int hurray_dtype_block(int code, uint32_t *elements, uint32_t *bytes,
                                  HurrayError *error);
/* The table in code order: hurray_dtype_at(i) for i < hurray_dtype_count(), else NULL. */
HURRAY_API size_t hurray_dtype_count(void);
HURRAY_API const HurrayDTypeInfo *hurray_dtype_at(size_t index);

/* ============================================================================================
 * Device tags, memory classes, sync modes (ADR-016, docs/spec/buffer-protocol.md)
 * ============================================================================================ */

typedef enum HurrayDeviceTag {
  HURRAY_DEVICE_CPU = 0x00,
  HURRAY_DEVICE_CUDA = 0x01,
  HURRAY_DEVICE_ROCM = 0x02,
  HURRAY_DEVICE_METAL = 0x03,
  HURRAY_DEVICE_VULKAN = 0x04,
  HURRAY_DEVICE_WEBGPU = 0x05,
  HURRAY_DEVICE_HEXAGON = 0x06,
  HURRAY_DEVICE_LEVEL_ZERO = 0x07,
  HURRAY_DEVICE_OPENCL = 0x08,
  HURRAY_DEVICE_LAST_NAMED = 0x08,
  HURRAY_DEVICE_RESERVED_FIRST = 0x09, /* 0x09..0xEF: reserved for future spec versions */
  HURRAY_DEVICE_RESERVED_LAST = 0xEF,
  HURRAY_DEVICE_PRIVATE_FIRST = 0xF0, /* 0xF0..0xFE: implementation-private */
  HURRAY_DEVICE_PRIVATE_LAST = 0xFE,
  HURRAY_DEVICE_INVALID = 0xFF
} HurrayDeviceTag;

typedef enum HurrayMemoryClass {
  HURRAY_MEM_DEVICE = 0,  /* the device's own memory (ordinary RAM for CPU) */
  HURRAY_MEM_HOST = 1,    /* host memory pinned for, and accessible by, the device */
  HURRAY_MEM_UNIFIED = 2, /* managed memory migrating between host and device */
  HURRAY_MEM_PEER = 3     /* memory of device peer_device_id mapped into device device_id */
} HurrayMemoryClass;

typedef enum HurraySyncMode {
  HURRAY_SYNC_READY = 0,   /* the bytes are ready now */
  HURRAY_SYNC_STREAM = 1,  /* ordered on the producer's stream/queue in sync_handle */
  HURRAY_SYNC_EVENT = 2,   /* ready once the event/fence in sync_handle has signalled */
  HURRAY_SYNC_TIMELINE = 3 /* ready once the timeline semaphore in sync_handle reaches
                              sync_value */
} HurraySyncMode;

/* Name of a named or registered private tag ("cpu", "cuda", ...), else NULL. A private tag's
 * name stays valid until the tag is unregistered. */
HURRAY_API const char *hurray_device_name(int tag);
/* HURRAY_OK for a named tag or a registered private tag; HURRAY_EDEVICE otherwise, with a
 * message that says whether the tag is reserved, private and unregistered, or invalid. */
HURRAY_API int hurray_device_check(int tag, HurrayError *error);
/* Registers a private tag (0xF0..0xFE) under a name (1..31 bytes of [a-z0-9_]), for peers that
 * agreed on its meaning out of band. Registering the same tag with the same name again is a
 * no-op; another name is HURRAY_ESTATE. The registry belongs to this copy of the library. */
HURRAY_API int hurray_device_register_private(int tag, const char *name, HurrayError *error);
/* Forgets a registered private tag; HURRAY_ESTATE if it was not registered. */
HURRAY_API int hurray_device_unregister_private(int tag, HurrayError *error);
/* "device", "host", "unified", "peer"; NULL for an unknown class. */
HURRAY_API const char *hurray_memory_class_name(int memory_class);
/* "ready", "stream", "event", "timeline"; NULL for an unknown mode. */
HURRAY_API const char *hurray_sync_mode_name(int sync_mode);

/* HURRAY_OK where device `tag` has memory class `memory_class` and sync mode `sync_mode`
 * (docs/spec/buffer-protocol.md §2.6: e.g. Vulkan has no UNIFIED memory, WebGPU no EVENT,
 * Hexagon only DEVICE and READY, OpenCL no PEER and no TIMELINE); HURRAY_EUNSUPPORTED naming
 * the section otherwise; HURRAY_EDEVICE, HURRAY_EMEMCLASS or HURRAY_ESYNC for an unknown tag,
 * class or mode. A registered private tag has every combination. Wrapping a buffer and every
 * consumer's check of one (hurray_tensor_context_check) apply this rule. */
HURRAY_API int hurray_device_supports(int tag, int memory_class, int sync_mode,
                                      HurrayError *error);

/* DLPack's DLDeviceType for (tag, memory class), e.g. (CUDA, HOST) -> kDLCUDAHost = 3.
 * HURRAY_EUNSUPPORTED, with the reason, where DLPack has no form (ROCm UNIFIED, any PEER,
 * private tags). */
HURRAY_API int hurray_device_to_dlpack(int tag, int memory_class, int32_t *dl_device_type,
                                       HurrayError *error);
/* The inverse: HURRAY_EUNSUPPORTED for DLPack devices Hurray does not name (kDLVPI, kDLExtDev,
 * kDLMAIA, kDLTrn, ...). */
HURRAY_API int hurray_device_from_dlpack(int32_t dl_device_type, uint8_t *tag,
                                         uint8_t *memory_class, HurrayError *error);

/* ============================================================================================
 * The DLPack ABI (DLPack 1.x, docs/spec/buffer-protocol.md "DLPack mapping", ADR-083)
 *
 * DLPack's structs under Hurray names, written from the DLPack specification (dlpack.h 1.0 to
 * 1.3): each is layout-compatible with its dlpack.h twin (HurrayDLTensor with DLTensor,
 * HurrayDLManagedTensor with DLManagedTensor, HurrayDLManagedTensorVersioned with
 * DLManagedTensorVersioned, ...), so a consumer that includes dlpack.h as well casts a pointer
 * of one to the other; the names never clash. The layouts are pinned by tests/c/test_abi.c.
 * The integers are DLPack's and never change.
 * ============================================================================================ */

/* The version of the versioned struct Hurray produces and reads. A consumer that sees another
 * major version reads nothing past `version` but may still call `deleter`; minor versions only
 * add enum values, never move a field. */
#define HURRAY_DLPACK_MAJOR_VERSION 1u
#define HURRAY_DLPACK_MINOR_VERSION 1u

/* DLDeviceType kDLCPU (the others: hurray_device_to_dlpack). */
#define HURRAY_DLPACK_CPU 1

/* HurrayDLManagedTensorVersioned.flags */
#define HURRAY_DLPACK_FLAG_READ_ONLY (UINT64_C(1) << 0)
#define HURRAY_DLPACK_FLAG_IS_COPIED (UINT64_C(1) << 1)
#define HURRAY_DLPACK_FLAG_IS_SUBBYTE_TYPE_PADDED (UINT64_C(1) << 2)

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

/* The legacy struct (DLPack < 1.0). It cannot say "read-only" or "copied". */
typedef struct HurrayDLManagedTensor {
  HurrayDLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct HurrayDLManagedTensor *self);
} HurrayDLManagedTensor;

typedef struct HurrayDLPackVersion {
  uint32_t major;
  uint32_t minor;
} HurrayDLPackVersion;

/* The versioned struct (DLPack >= 1.0). Everything up to and including `flags` keeps its place
 * in every future version. */
typedef struct HurrayDLManagedTensorVersioned {
  HurrayDLPackVersion version;
  void *manager_ctx;
  void (*deleter)(struct HurrayDLManagedTensorVersioned *self);
  uint64_t flags;
  HurrayDLTensor dl_tensor;
} HurrayDLManagedTensorVersioned;

/* ============================================================================================
 * The buffer descriptor and its fixed 16-byte encoding (docs/spec/buffer-protocol.md)
 *
 *   offset size field
 *   0      1    device_tag
 *   1      1    memory_class
 *   2      1    sync_mode
 *   3      1    alignment exponent: alignment = 1 << e, 6 <= e <= 30
 *   4      2    device_id        (uint16 little-endian)
 *   6      2    peer_device_id   (uint16 little-endian; zero unless memory_class is PEER)
 *   8      8    byte_size        (uint64 little-endian)
 * ============================================================================================ */

#define HURRAY_DESC_SIZE 16
#define HURRAY_MIN_ALIGNMENT 64u
#define HURRAY_MAX_ALIGNMENT (1u << 30)

typedef struct HurrayBufferDesc {
  uint64_t byte_size;
  uint32_t alignment; /* bytes: a power of two in [HURRAY_MIN_ALIGNMENT, HURRAY_MAX_ALIGNMENT] */
  uint16_t device_id;
  uint16_t peer_device_id;
  uint8_t device_tag;
  uint8_t memory_class;
  uint8_t sync_mode;
  uint8_t reserved[5]; /* zero */
} HurrayBufferDesc;

/* Checks every rule of the descriptor: tag (named or registered private), memory class and sync
 * mode known (CPU buffers are DEVICE and READY), alignment, peer_device_id, reserved bytes zero. */
HURRAY_API int hurray_desc_validate(const HurrayBufferDesc *desc, HurrayError *error);
/* Validates, then writes the 16-byte encoding. Nothing is written on failure. */
HURRAY_API int hurray_desc_encode(const HurrayBufferDesc *desc, uint8_t out[HURRAY_DESC_SIZE],
                                  HurrayError *error);
/* Decodes and validates 16 untrusted bytes. `*desc` is written only on success. */
HURRAY_API int hurray_desc_decode(const uint8_t in[HURRAY_DESC_SIZE], HurrayBufferDesc *desc,
                                  HurrayError *error);

/* ============================================================================================
 * HurrayBuffer: one owned region of memory on some device
 *
 * A heap handle made by hurray_buffer_wrap or hurray_buffer_alloc and destroyed, exactly once,
 * by hurray_buffer_destroy, which calls `release` exactly once. Handles are not refcounted:
 * a producer serving several consumers issues a distinct handle to each.
 * `data` is aligned to desc.alignment (or, for Metal, WebGPU and OpenCL, is the buffer object).
 * A producer whose memory starts at an unaligned address p
 * wraps p rounded down and addresses the data with a byte offset (as DLPack's byte_offset);
 * bytes that no array of a tensor addresses are never read or written by Hurray.
 * ============================================================================================ */

#define HURRAY_BUFFER_READ_ONLY (1u << 0)

typedef struct HurrayBuffer HurrayBuffer;
typedef void (*HurrayBufferReleaseFn)(HurrayBuffer *self);

struct HurrayBuffer {
  void *data;              /* device address; NULL only when desc.byte_size is 0 */
  HurrayBufferDesc desc;
  uint32_t flags;          /* HURRAY_BUFFER_READ_ONLY */
  uint32_t reserved0;
  void *sync_handle;       /* stream, event or semaphore per desc.sync_mode; NULL for READY */
  uint64_t sync_value;     /* TIMELINE: the value to wait for; else 0 */
  HurrayBufferReleaseFn release; /* frees the memory; may be NULL for borrowed static memory */
  void *release_ctx;       /* the producer's state for `release` */
  uint64_t reserved1[2];
};

/* Wraps foreign memory of any device. Validates `desc` and that `data` is aligned (Metal, WebGPU
 * and OpenCL pass their buffer object as `data`, which is not an address and is not tested).
 * `sync_handle` is NULL exactly when desc->sync_mode is READY; `sync_value` is 0 unless the mode
 * is TIMELINE; `flags` may hold only HURRAY_BUFFER_READ_ONLY (else HURRAY_ESYNC / HURRAY_EINVAL).
 * On success the handle owns the memory and will call `release(handle)` exactly once; on
 * failure nothing is taken and `release` is not called. */
HURRAY_API int hurray_buffer_wrap(void *data, const HurrayBufferDesc *desc, uint32_t flags,
                                  void *sync_handle, uint64_t sync_value,
                                  HurrayBufferReleaseFn release, void *release_ctx,
                                  HurrayBuffer **out, HurrayError *error);

#define HURRAY_ALLOC_ZERO (1u << 0)

/* Allocates `byte_size` bytes of CPU memory aligned to `alignment` (0 means 64), described as
 * (CPU, DEVICE, READY); byte_size 0 gives data NULL. `flags`: HURRAY_ALLOC_ZERO; without it the
 * bytes are unspecified (as malloc's are: memory this process released may be reused). The
 * handle's release frees the memory; a buffer of 2 MiB or more is kept for the next allocation
 * of its length instead, up to 64 buffers and 1 GiB (or a sixteenth of the machine's memory),
 * in memory the kernel may take back whenever it needs it (ADR-108). */
HURRAY_API int hurray_buffer_alloc(uint64_t byte_size, uint32_t alignment, uint32_t flags,
                                   HurrayBuffer **out, HurrayError *error);
/* Calls buffer->release(buffer) once, then frees the handle. NULL is a no-op. */
HURRAY_API void hurray_buffer_destroy(HurrayBuffer *buffer);
/* Gives back to the system every released buffer that hurray_buffer_alloc keeps for reuse, as
 * malloc_trim does for the heap; returns the bytes given back. Thread-safe; buffers still in use
 * are not touched. */
HURRAY_API uint64_t hurray_buffer_trim(void);

/* ============================================================================================
 * HurrayBufferList (ADR-030): every buffer of one tensor, in order, each with a role
 * ============================================================================================ */

typedef enum HurrayBufferRole {
  HURRAY_ROLE_VALUES = 0,
  HURRAY_ROLE_SCALES = 1,
  HURRAY_ROLE_ZERO_POINTS = 2,
  HURRAY_ROLE_MINS = 3,
  HURRAY_ROLE_INDICES = 4,
  HURRAY_ROLE_INDPTR = 5,
  HURRAY_ROLE_PAGES = 6,
  HURRAY_ROLE_PAGE_TABLE = 7,
  HURRAY_ROLE_MIXED = 8 /* one buffer holding several parts (interleaved blocks) */
} HurrayBufferRole;

#define HURRAY_MAX_BUFFERS 65536u

typedef struct HurrayBufferList {
  uint32_t count;
  uint32_t capacity;
  HurrayBuffer **buffers; /* `count` handles, each owned by the list */
  uint8_t *roles;         /* `count` HurrayBufferRole values */
  void *reserved;
} HurrayBufferList;

/* "values", "scales", ...; NULL for an unknown role. */
HURRAY_API const char *hurray_buffer_role_name(int role);
HURRAY_API int hurray_buffer_list_create(uint32_t capacity_hint, HurrayBufferList **out,
                                         HurrayError *error);
/* SINK: appends `buffer`, which the list then owns. On failure the buffer is destroyed. */
HURRAY_API int hurray_buffer_list_append(HurrayBufferList *list, HurrayBuffer *buffer, int role,
                                         uint32_t *index, HurrayError *error);
/* Destroys every buffer exactly once, then the list. NULL is a no-op. */
HURRAY_API void hurray_buffer_list_destroy(HurrayBufferList *list);

/* ============================================================================================
 * Tensor descriptors
 *
 * A tensor is a layout over one or more typed, strided arrays, each a view of one buffer of a
 * HurrayBufferList. Element (i_0..i_{n-1}) of an array lies at bit
 *     8 * byte_offset + (sum_k i_k * strides[k]) * bits
 * of its buffer (strides in elements, negative allowed, NULL meaning row-major contiguous).
 * The parts of each layout, in order (docs/spec/buffer-protocol.md, "Tensor layouts"):
 *   DENSE         [values]
 *   PER_CHANNEL   [values, scales[shape[axis]], (zero_points[shape[axis]])]
 *   BLOCK         [values, scales[shape with shape[axis] -> ceil(shape[axis]/block_size)],
 *                  (mins: same shape as scales)]
 *   SPARSE_COO    [indices int32|int64 [ndim, nnz], values [nnz]]
 *   SPARSE_CSR    [indptr int32|int64 [rows+1], indices (same dtype) [nnz], values [nnz]]
 *   PAGED         [pages [num_pages, block_size, *shape[axis+1:]],
 *                  page_table int32|int64 [*shape[:axis], ceil(shape[axis]/block_size)]]
 *   COMPOSITE     no parts; named children, each a tensor over the same buffer list
 * ============================================================================================ */

#define HURRAY_MAX_NDIM 64
#define HURRAY_MAX_PARTS 3
#define HURRAY_MAX_CHILDREN 65536u
#define HURRAY_MAX_DEPTH 8        /* the tensor given has depth 0; a child, its parent's + 1 */
#define HURRAY_MAX_NODES (1u << 20) /* tensor descriptors in one tree, counted with repeats */
#define HURRAY_MAX_NAME 255
#define HURRAY_MAX_DIM ((int64_t)1 << 62)

typedef enum HurrayLayout {
  HURRAY_LAYOUT_DENSE = 0,
  HURRAY_LAYOUT_PER_CHANNEL = 1,
  HURRAY_LAYOUT_BLOCK = 2,
  HURRAY_LAYOUT_SPARSE_COO = 3,
  HURRAY_LAYOUT_SPARSE_CSR = 4,
  HURRAY_LAYOUT_PAGED = 5,
  HURRAY_LAYOUT_COMPOSITE = 6
} HurrayLayout;

typedef struct HurrayArray {
  uint64_t byte_offset;   /* bytes from the buffer's data to element (0, ..., 0) */
  const int64_t *shape;   /* ndim extents, each in [0, HURRAY_MAX_DIM] */
  const int64_t *strides; /* ndim strides in elements, or NULL for row-major contiguous */
  int32_t ndim;           /* 0..HURRAY_MAX_NDIM */
  uint32_t buffer;        /* index into the tensor's HurrayBufferList */
  uint8_t dtype;          /* HurrayDTypeCode */
  uint8_t reserved[7];
} HurrayArray;

#define HURRAY_TENSOR_COALESCED (1u << 0) /* SPARSE_COO: indices sorted and unique */

typedef struct HurrayTensorDesc {
  uint32_t layout;      /* HurrayLayout */
  uint32_t flags;       /* HURRAY_TENSOR_* */
  int32_t ndim;         /* logical rank; 0 for COMPOSITE */
  int32_t axis;         /* PER_CHANNEL, BLOCK, PAGED: the axis; else 0 */
  int64_t block_size;   /* BLOCK: elements per block; PAGED: rows per page; else 0 */
  const int64_t *shape; /* logical shape, ndim extents */
  const HurrayArray *parts; /* nparts arrays, in the layout's order */
  uint32_t nparts;
  uint8_t dtype;        /* logical element dtype (of the values); INVALID for COMPOSITE */
  uint8_t reserved0[3];
  uint32_t nchildren;   /* COMPOSITE only */
  uint32_t reserved1;
  const struct HurrayTensorDesc *children;
  const char *const *child_names; /* nchildren unique UTF-8 names, 1..HURRAY_MAX_NAME bytes */
  uint64_t reserved2[2];
} HurrayTensorDesc;

/* "dense", "per_channel", ...; NULL for an unknown layout. */
HURRAY_API const char *hurray_layout_name(int layout);

/* What a layout is made of: the one table the validator checks tensors against, for bindings
 * that build tensors (which role each part's buffer has, which part holds the values). */
#define HURRAY_LAYOUT_HAS_AXIS (1u << 0)       /* axis in [0, ndim); else axis is 0 */
#define HURRAY_LAYOUT_HAS_BLOCK_SIZE (1u << 1) /* block_size in [1, HURRAY_MAX_DIM]; else 0 */
#define HURRAY_LAYOUT_VALUES_SHAPE (1u << 2)   /* the values part has the tensor's shape */
#define HURRAY_LAYOUT_NO_PART 0xFF             /* values_part of COMPOSITE */

typedef struct HurrayLayoutInfo {
  const char *name;    /* as hurray_layout_name */
  uint8_t code;        /* HurrayLayout */
  uint8_t min_parts;   /* nparts in [min_parts, max_parts]: the parts past min_parts are */
  uint8_t max_parts;   /* optional (zero points, mins) */
  uint8_t values_part; /* the part holding the values, whose dtype is the tensor's dtype */
  uint8_t roles[HURRAY_MAX_PARTS]; /* the HurrayBufferRole of part i's buffer, i < max_parts */
  uint8_t flags;                   /* HURRAY_LAYOUT_HAS_AXIS, ... */
  int32_t min_ndim;                /* of the tensor's logical shape */
  int32_t max_ndim;
} HurrayLayoutInfo;

/* The table entry of `layout`, or NULL for a layout Hurray does not know. Static storage,
 * valid for the life of the process. */
HURRAY_API const HurrayLayoutInfo *hurray_layout_info(int layout);

#define HURRAY_VALIDATE_CONTENTS (1u << 0) /* also read index data of CPU buffers */

/* Validates `tensor` against `buffers`: layout rules, limits, dtypes, overflow-checked extents,
 * and that every element each array addresses lies inside its buffer. With
 * HURRAY_VALIDATE_CONTENTS, also checks sparse indices and page-table entries held in CPU
 * memory (indices in range, indptr monotone, page numbers < num_pages). */
HURRAY_API int hurray_tensor_validate(const HurrayTensorDesc *tensor,
                                      const HurrayBufferList *buffers, uint32_t flags,
                                      HurrayError *error);
/* The byte range [*begin, *end) of its buffer that `array` addresses (empty arrays give
 * begin == end == byte_offset). Fails on overflow or invalid shape/dtype. */
HURRAY_API int hurray_array_span(const HurrayArray *array, uint64_t *begin, uint64_t *end,
                                 HurrayError *error);
/* Number of elements of an array (product of its shape), overflow-checked. */
HURRAY_API int hurray_array_numel(const HurrayArray *array, uint64_t *numel,
                                  HurrayError *error);
/* Deep copy of a tensor descriptor (shapes, strides, parts, children, names) in one heap
 * block, so the copy outlives the original's storage. Destroy with hurray_tensor_desc_destroy.
 * The copy is checked structurally (limits, depth) but not against buffers. */
HURRAY_API int hurray_tensor_desc_clone(const HurrayTensorDesc *tensor, HurrayTensorDesc **out,
                                        HurrayError *error);
/* Frees a descriptor made by hurray_tensor_desc_clone (or documented as made by it); NULL is a
 * no-op. Never pass it a descriptor the caller assembled itself. */
HURRAY_API void hurray_tensor_desc_destroy(HurrayTensorDesc *tensor);

/* ============================================================================================
 * HurrayTensorContext (ADR-034): what a producer hands a consumer, in one pointer
 *
 * The first three fields are frozen for every ABI version: a consumer reads `abi_version`
 * (through hurray_tensor_context_abi_version) before anything else, and one that finds a
 * version it does not know touches nothing but `release`. Whoever owns the context calls
 * `release` exactly once; it destroys the buffer list (each buffer's release once), the
 * descriptor, and drops the producer's owner reference, using the producer's own code.
 * ============================================================================================ */

typedef struct HurrayTensorContext HurrayTensorContext;
typedef void (*HurrayContextReleaseFn)(HurrayTensorContext *self);
typedef void (*HurrayOwnerReleaseFn)(void *owner);

struct HurrayTensorContext {
  /* frozen head */
  uint32_t abi_version;           /* HURRAY_C_ABI_VERSION of the producer */
  uint32_t flags;                 /* HURRAY_BUFFER_READ_ONLY if the tensor is read-only */
  HurrayContextReleaseFn release; /* NULL once released */
  /* ABI version 4 */
  const HurrayTensorDesc *tensor; /* owned by the context */
  HurrayBufferList *buffers;      /* owned by the context */
  void *owner;                    /* the producer's owner reference (e.g. its source object) */
  HurrayOwnerReleaseFn owner_release; /* drops `owner`; may be NULL */
  uint64_t reserved[4];
};

/* Builds a context with abi_version = HURRAY_C_ABI_VERSION. Copies `tensor`, validates it
 * against `buffers`. A tensor is read-only if its context or any of its buffers says so: the
 * context's `flags` gain HURRAY_BUFFER_READ_ONLY when a buffer of the list is read-only. SINK for `buffers` and `owner`: on failure the list is destroyed and
 * owner_release(owner) is called, so the caller never cleans up after a failed create. */
HURRAY_API int hurray_tensor_context_create(const HurrayTensorDesc *tensor,
                                            HurrayBufferList *buffers, uint32_t flags,
                                            void *owner, HurrayOwnerReleaseFn owner_release,
                                            HurrayTensorContext **out, HurrayError *error);
/* Reads the producer's ABI version and nothing else; 0 for NULL. */
HURRAY_API uint32_t hurray_tensor_context_abi_version(const HurrayTensorContext *context);
/* What a consumer calls before using a context it did not build: HURRAY_EABI naming both
 * versions if abi_version is not HURRAY_C_ABI_VERSION (nothing else is read then), HURRAY_ESTATE
 * if it was released, then every buffer handle by the rules of hurray_buffer_wrap (descriptor --
 * a private tag must be registered with this copy of the library --, flags, alignment, sync
 * state; the message names the buffer), HURRAY_EINVAL if a buffer is read-only while the
 * context's flags lack HURRAY_BUFFER_READ_ONLY (a consumer honours the context's flag), then
 * full validation of the tensor against its buffers. */
HURRAY_API int hurray_tensor_context_check(const HurrayTensorContext *context, uint32_t flags,
                                           HurrayError *error);
/* The address of element (0, ..., 0) of part `part` of the context's tensor: its buffer's
 * data plus the part's byte_offset (a sub-byte element starts at bit 0 of that byte). Read the
 * other elements through the part's shape and strides (NULL strides: row-major). The address
 * is on the buffer's device (CPU memory for tensors from a file) and is borrowed: valid until
 * the context is released, writable only if context->flags lacks HURRAY_BUFFER_READ_ONLY.
 * NULL if the context is NULL, of another ABI version or released, if `part` is not one of
 * the tensor's parts (a composite has none), or if the buffer is empty or its data is no
 * address (Metal, WebGPU and OpenCL buffer objects). Reads the context only: validate a
 * context from another binary with hurray_tensor_context_check first. */
HURRAY_API void *hurray_tensor_context_data(const HurrayTensorContext *context, uint32_t part);

/* Calls context->release(context) if it is set. NULL is a no-op. */
HURRAY_API void hurray_tensor_context_release(HurrayTensorContext *context);

/* ============================================================================================
 * DLPack in C (ADR-083): HurrayTensorContext <-> DLPack managed tensors
 *
 * Zero-copy exchanges with C and C++ runtimes that speak DLPack, with the mapping table
 * (docs/spec/buffer-protocol.md, "DLPack mapping") and the refusals of the Python binding's
 * __dlpack__ and hurray.from_dlpack, which run the same code. The managed structs are the
 * HurrayDL* twins of dlpack.h's above.
 * ============================================================================================ */

/* hurray_tensor_to_dlpack exports the dense tensor of `context` without copying: on success
 * the managed tensor (*out) owns the context, and its deleter releases it (each buffer's
 * release and the producer's owner, once) and frees the managed tensor, once, on whatever
 * thread calls it; on failure *out is NULL and the caller keeps the context. The context is
 * checked first (hurray_tensor_context_check). dl_tensor.data is the address of element
 * (0, ..., 0) with byte_offset 0 on address devices; on Metal, WebGPU and OpenCL it is the
 * buffer object and byte_offset the offset. Strides are always given (in elements). The
 * managed tensor's flags carry HURRAY_DLPACK_FLAG_READ_ONLY when the context is read-only; the
 * `flags` argument is reserved and must be 0. HURRAY_EUNSUPPORTED where DLPack cannot carry
 * the tensor: a layout other than DENSE, a dtype without a DLPack form (int4, uint4, int2,
 * uint2, uint1), a device without a DLPack device type (peer memory, ROCm unified memory,
 * private tags), or data that is not ready (only READY buffers, and CUDA or ROCm buffers
 * ordered on the default stream 0x1, are exported: a managed tensor says nothing of streams).
 * HURRAY_EINVAL for a NULL context or out. Thread-safe on distinct contexts. */
HURRAY_API int hurray_tensor_to_dlpack(HurrayTensorContext *context, uint32_t flags,
                                       HurrayDLManagedTensorVersioned **out, HurrayError *error);
/* The same as a legacy HurrayDLManagedTensor (DLPack < 1.0), for consumers that read only
 * that. It has no flags, so a read-only context is refused (HURRAY_EUNSUPPORTED). */
HURRAY_API int hurray_tensor_to_dlpack_legacy(HurrayTensorContext *context, uint32_t flags,
                                              HurrayDLManagedTensor **out, HurrayError *error);

/* hurray_tensor_from_dlpack takes a managed tensor from any DLPack producer and gives a
 * context over the same memory, without copying: one DENSE tensor, one buffer (role VALUES)
 * on the DLPack device's (tag, memory class), read-only when the managed tensor says
 * HURRAY_DLPACK_FLAG_READ_ONLY or `flags` holds HURRAY_BUFFER_READ_ONLY (the only flag
 * allowed). Data on CUDA and ROCm is recorded as ordered on the default stream (sync mode
 * STREAM, handle 0x1), as DLPack promises a consumer that passes no stream; elsewhere READY.
 * Everything the managed tensor says is checked before anything is taken, exactly as
 * hurray.from_dlpack checks it: the major version (another one: HURRAY_EABI, nothing past
 * `version` is read), dimensions (at most HURRAY_MAX_NDIM), the dtype and the device (a DLPack
 * type Hurray does not name: HURRAY_EUNSUPPORTED), extents and strides with overflow-checked
 * arithmetic (HURRAY_ELAYOUT, HURRAY_ELIMIT, HURRAY_EOVERFLOW), memory that wraps the address
 * space, a NULL shape or NULL data with elements (HURRAY_EINVAL). Ownership moves on success
 * only: the context then owns the managed tensor and its release calls the producer's deleter
 * exactly once (on the thread that releases it). On failure *out is NULL and the deleter was
 * not called: the caller still owns the managed tensor and calls its deleter, as DLPack asks
 * of a consumer that refuses a tensor (one of another major version included). NULL `managed`
 * or `out`: HURRAY_EINVAL. Thread-safe on distinct managed tensors. */
HURRAY_API int hurray_tensor_from_dlpack(HurrayDLManagedTensorVersioned *managed, uint32_t flags,
                                         HurrayTensorContext **out, HurrayError *error);
/* The same for a legacy HurrayDLManagedTensor, which has no version and no flags (writable
 * unless `flags` holds HURRAY_BUFFER_READ_ONLY); NULL strides mean row-major. */
HURRAY_API int hurray_tensor_from_dlpack_legacy(HurrayDLManagedTensor *managed, uint32_t flags,
                                                HurrayTensorContext **out, HurrayError *error);

/* ============================================================================================
 * Quantisation kernels (ADR-085, docs/spec/buffer-protocol.md section 8.9)
 *
 * Plain C over CPU buffers (any other device: HURRAY_EUNSUPPORTED), any strides. Every tensor is
 * validated against its buffers first (hurray_tensor_validate). Results are row-major and
 * contiguous in the tensor's logical shape. Arithmetic is float32, each step rounded to nearest
 * even: PER_CHANNEL x = (v - z) * s, BLOCK x = v * s + m, DENSE x = v.
 * ============================================================================================ */

/* Dequantises a DENSE, PER_CHANNEL or BLOCK tensor -- values of any integer or real float dtype,
 * scales of any float dtype, zero points or mins of any float or integer dtype -- into `out`,
 * `dtype` FLOAT32, FLOAT16 or BFLOAT16 (rounded to nearest even once, from float32). INT8 or
 * UINT8 unpack a DENSE tensor of integers that fit: int4, int2, int8 to INT8; uint4, uint2,
 * uint1 to either; uint8 to UINT8. `out_size` must hold numel * itemsize bytes and `out` be
 * aligned to the itemsize (HURRAY_EINVAL, HURRAY_EALIGN). Safe to call without any lock. */
HURRAY_API int hurray_dequantize(const HurrayTensorDesc *tensor, const HurrayBufferList *buffers,
                                 int dtype, void *out, uint64_t out_size, HurrayError *error);
/* The same into a new 64-byte aligned CPU buffer of exactly numel * itemsize bytes. */
HURRAY_API int hurray_dequantize_buffer(const HurrayTensorDesc *tensor,
                                        const HurrayBufferList *buffers, int dtype,
                                        HurrayBuffer **out, HurrayError *error);

typedef struct HurrayQuantizeOptions {
  uint32_t layout;     /* HURRAY_LAYOUT_PER_CHANNEL or HURRAY_LAYOUT_BLOCK */
  int32_t axis;        /* 0 <= axis < ndim */
  int64_t block_size;  /* BLOCK: elements per block, 1 .. 2^62; PER_CHANNEL: 0 */
  uint8_t dtype;       /* the values: HURRAY_DTYPE_INT4 or HURRAY_DTYPE_INT8 */
  uint8_t scale_dtype; /* HURRAY_DTYPE_FLOAT32, FLOAT16 or BFLOAT16 */
  uint8_t reserved[6];
  uint64_t reserved1;
} HurrayQuantizeOptions;

/* Bytes of the packed values and of the scales hurray_quantize writes for a tensor of `shape`. */
HURRAY_API int hurray_quantize_sizes(int32_t ndim, const int64_t *shape,
                                     const HurrayQuantizeOptions *options, uint64_t *values_bytes,
                                     uint64_t *scales_bytes, HurrayError *error);
/* Symmetric round-to-nearest quantisation of a DENSE tensor of floats (rank >= 1): per group
 * (a channel of `axis`, or a block of `block_size` along it) s = amax / qmax (qmax 7 for int4,
 * 127 for int8) rounded to scale_dtype, and q = clamp(round_half_even(x / s), -qmax, qmax); a
 * group of zeros has s = 0 and q = 0; NaN or infinity is refused (HURRAY_EINVAL naming the
 * element). Writes the values packed, row-major in the tensor's shape, and the scales row-major:
 * [shape[axis]] for PER_CHANNEL, shape with shape[axis] -> ceil(shape[axis] / block_size) for
 * BLOCK. */
HURRAY_API int hurray_quantize(const HurrayTensorDesc *tensor, const HurrayBufferList *buffers,
                               const HurrayQuantizeOptions *options, void *values,
                               uint64_t values_size, void *scales, uint64_t scales_size,
                               HurrayError *error);
/* hurray_quantize into two new CPU buffers (roles VALUES and SCALES), handed over as the
 * context of the PER_CHANNEL or BLOCK tensor they make (no owner; release it once). */
HURRAY_API int hurray_quantize_new(const HurrayTensorDesc *tensor, const HurrayBufferList *buffers,
                                   const HurrayQuantizeOptions *options,
                                   HurrayTensorContext **out, HurrayError *error);

/* ============================================================================================
 * Device runtimes (ADR-047)
 *
 * Moving bytes between the host and a device's memory needs the device's runtime. hurray-core
 * links none: it loads the runtime's shared library with dlopen the first time a function
 * below needs it -- libOpenCL.so.1 (the OpenCL ICD loader) for OPENCL, libcuda.so.1 (the CUDA
 * driver API) for CUDA -- and keeps it loaded for the life of the process. Where the library
 * or a device is missing, the function fails with HURRAY_EUNSUPPORTED and a message naming
 * the library it looked for. Other tags have no backend: HURRAY_EUNSUPPORTED.
 *
 * A HurrayDeviceQueue is the one object the backend works through: a runtime context and an
 * in-order queue on one device of it (OpenCL: a cl_context and a cl_command_queue; CUDA: a
 * CUcontext and a CUstream). It holds its own reference on both (clRetain*; the CUDA primary
 * context is retained, a wrapped CUcontext is borrowed), so the application may drop its own.
 * Copies are blocking: when a copy returns, its bytes have arrived. Before touching a buffer a
 * copy waits as a consumer must (buffer-protocol.md section 4) on the buffer's sync state:
 * READY nothing; EVENT the event (OpenCL: in the event wait list; CUDA: cuStreamWaitEvent);
 * STREAM the producer's queue (nothing when it is this queue; else OpenCL clFinish of it, CUDA
 * an event recorded on it and waited for); TIMELINE HURRAY_EUNSUPPORTED.
 *
 * Thread safety: every function may be called from any thread; one queue may be used by
 * several threads at once (the runtimes' queues are thread-safe; the CUDA context is made
 * current around each call and restored after), but the order of copies issued concurrently
 * on one queue is unspecified.
 * ============================================================================================ */

typedef struct HurrayDeviceQueue HurrayDeviceQueue;

/* The shared library the backend of `tag` loads ("libOpenCL.so.1", "libcuda.so.1"), or NULL
 * for a tag without a backend. Static storage. */
HURRAY_API const char *hurray_device_runtime_library(int tag);

/* Loads the runtime of `tag` if it is not loaded yet: HURRAY_OK if it is present,
 * HURRAY_EUNSUPPORTED naming the library (and the loader's reason) or the tag otherwise.
 * Thread-safe; the result of the first attempt is kept. */
HURRAY_API int hurray_device_runtime_load(int tag, HurrayError *error);

/* A new queue on device `device_id` of `tag` (OpenCL: the index of buffer-protocol.md 2.6.9,
 * counted across platforms; CUDA: the device ordinal), in the backend's default context of
 * that device -- one per device and process, made on first use and kept until exit (CUDA: the
 * device's primary context) -- with a new in-order queue (stream) of its own.
 * HURRAY_EUNSUPPORTED without the runtime, HURRAY_EDEVICE for a device_id with no device. */
HURRAY_API int hurray_device_queue_create(int tag, uint16_t device_id, HurrayDeviceQueue **out,
                                          HurrayError *error);

/* A new queue over the application's own queue, which the queue retains (OpenCL: a
 * cl_command_queue; its context and device are read from it, and `native_context` must be
 * NULL or that context. CUDA: a CUstream -- CU_STREAM_LEGACY (0x1), CU_STREAM_PER_THREAD (0x2)
 * or a created stream -- and `native_context` the CUcontext it belongs to, borrowed, or NULL for
 * the stream's own context (cuStreamGetCtx), or the current one for the two constants). The
 * application's queue must outlive the HurrayDeviceQueue for CUDA (streams have no reference
 * count). */
HURRAY_API int hurray_device_queue_wrap(int tag, void *native_context, void *native_queue,
                                        HurrayDeviceQueue **out, HurrayError *error);

/* A new queue that can reach the memory of `buffer`: its STREAM sync handle if it has one,
 * else a new queue in the context the memory belongs to (OpenCL: CL_MEM_CONTEXT, on the device
 * of that context numbered desc.device_id, else its first; CUDA: the context of the pointer).
 * This is how a consumer that received device memory copies it without knowing its context. */
HURRAY_API int hurray_device_queue_for_buffer(const HurrayBuffer *buffer,
                                              HurrayDeviceQueue **out, HurrayError *error);

/* Drops the queue's references (and a queue/stream it created). NULL is a no-op. Buffers
 * allocated through the queue stay valid: they hold references of their own. */
HURRAY_API void hurray_device_queue_destroy(HurrayDeviceQueue *queue);

/* The device tag, the device_id and the runtime's handles of a queue (cl_command_queue and
 * cl_context, or CUstream and CUcontext), borrowed for the queue's lifetime. */
HURRAY_API int hurray_device_queue_tag(const HurrayDeviceQueue *queue);
HURRAY_API uint16_t hurray_device_queue_device_id(const HurrayDeviceQueue *queue);
HURRAY_API void *hurray_device_queue_native(const HurrayDeviceQueue *queue);
HURRAY_API void *hurray_device_queue_native_context(const HurrayDeviceQueue *queue);

/* Allocates `byte_size` bytes of DEVICE memory in the queue's context (OpenCL: clCreateBuffer,
 * `data` the cl_mem; CUDA: cuMemAlloc, `data` the device pointer), zeroed with HURRAY_ALLOC_ZERO,
 * as a READY buffer handle whose release frees it (and holds a reference on the context until
 * then). Its alignment is the device's (OpenCL CL_DEVICE_MEM_BASE_ADDR_ALIGN / 8, CUDA 256),
 * at least 64. byte_size 0 gives a handle with NULL data. */
HURRAY_API int hurray_device_alloc(HurrayDeviceQueue *queue, uint64_t byte_size, uint32_t flags,
                                   HurrayBuffer **out, HurrayError *error);

/* Copies `size` bytes from byte `offset` of the device buffer `src` to host memory `dst`, after
 * waiting on src's sync state (above); blocking. `src` must be memory of the queue's device
 * tag, in the queue's context. HURRAY_EBOUNDS if offset + size exceeds its byte_size. */
HURRAY_API int hurray_device_copy_to_host(HurrayDeviceQueue *queue, const HurrayBuffer *src,
                                          uint64_t offset, void *dst, uint64_t size,
                                          HurrayError *error);

/* Copies `size` bytes from host memory `src` to byte `offset` of the device buffer `dst`,
 * after waiting on dst's sync state; blocking. HURRAY_EINVAL for a READ_ONLY buffer. */
HURRAY_API int hurray_device_copy_from_host(HurrayDeviceQueue *queue, HurrayBuffer *dst,
                                            uint64_t offset, const void *src, uint64_t size,
                                            HurrayError *error);

/* Blocks the calling thread until `buffer`'s bytes are ready by its sync state (READY returns
 * at once; a STREAM buffer waits for its whole stream). */
HURRAY_API int hurray_device_wait(HurrayDeviceQueue *queue, const HurrayBuffer *buffer,
                                  HurrayError *error);

/* ============================================================================================
 * File container (docs/spec/file-format.md, ADR-010)
 *
 * A Hurray file holds named tensors of every layout, each buffer at an offset aligned to the
 * file's alignment and protected by an XXH3-64 checksum, plus typed metadata for the file and
 * for each tensor. The index sits at the end, so a writer streams data of any size with memory
 * proportional to the tensor count only; the fixed 64-byte header points at the index once it
 * is written. A reader treats the file as untrusted input: it checks the header when it opens a
 * file and each part of the index before its first use (ADR-057), so that opening a file and
 * getting one tensor costs the same for any number of tensors; it finds a tensor by name in
 * O(1) and hands tensors out as HurrayTensorContexts: zero-copy over the mapping by default,
 * or read into aligned memory.
 * ============================================================================================ */

#define HURRAY_FILE_HEADER_SIZE 64
#define HURRAY_FILE_VERSION_MAJOR 2 /* the format version this library writes and reads */
#define HURRAY_FILE_VERSION_MINOR 2 /* the highest minor read; 2.1 adds NULL and INTEGER
                                       metadata, 2.2 shared buffers (one buffer's bytes under
                                       several tensors); a writer writes the lowest minor whose
                                       features the file uses */
#define HURRAY_FILE_DEFAULT_ALIGNMENT 64u
#define HURRAY_FILE_MAX_ALIGNMENT (1u << 21) /* 2 MiB: a huge page */
#define HURRAY_FILE_MAX_TENSORS (1u << 20)
#define HURRAY_FILE_MAX_BUFFERS (1u << 24)        /* in the whole file */
#define HURRAY_FILE_MAX_INDEX ((uint64_t)1 << 28) /* bytes of index, 256 MiB */

/* ---- typed metadata --------------------------------------------------------------------- */

typedef enum HurrayMetaType {
  HURRAY_META_BOOL = 1,
  HURRAY_META_INT64 = 2,
  HURRAY_META_FLOAT64 = 3,
  HURRAY_META_STRING = 4, /* UTF-8 */
  HURRAY_META_LIST = 5,   /* values of any types */
  HURRAY_META_MAP = 6,    /* unique UTF-8 keys of 1..HURRAY_MAX_NAME bytes -> values */
  HURRAY_META_NULL = 7,   /* no value (JSON's null, Python's None); file format 2.1 */
  HURRAY_META_INTEGER = 8 /* an integer outside int64, as decimal text; file format 2.1 */
} HurrayMetaType;

#define HURRAY_META_MAX_DEPTH 16         /* levels of nesting; the root map is level 1 */
#define HURRAY_META_MAX_BYTES (1u << 24) /* encoded bytes of one metadata map, 16 MiB */
#define HURRAY_FILE_META_MAX_BYTES (1u << 26) /* of the file's own map, 64 MiB: a GGUF
                                                 tokenizer's vocabulary and merges */
#define HURRAY_META_MAX_DIGITS 1024      /* bytes of an INTEGER's text, its sign included */

/* One metadata value; a tree of them is metadata. Writers build trees in their own storage
 * (the structs are plain data, like HurrayTensorDesc); readers return trees they allocated.
 * The metadata of a file or a tensor is a MAP. */
typedef struct HurrayMetaValue {
  uint8_t type;        /* HurrayMetaType */
  uint8_t reserved[3]; /* zero */
  uint32_t count;      /* STRING, INTEGER: bytes (excluding any NUL); LIST, MAP: items;
                          else 0 */
  union {
    uint8_t boolean; /* BOOL: 0 or 1 */
    int64_t int64;
    double float64;
    const char *string; /* STRING: `count` bytes; trees from a reader add a NUL after them.
                           INTEGER: `count` bytes of canonical decimal text ("-"? then digits,
                           no leading zero) of a value outside int64, which is written as
                           INT64 (HURRAY_EINVAL otherwise); NULL carries nothing */
    const struct HurrayMetaValue *items; /* LIST, MAP: `count` values */
  } as;
  const char *const *keys; /* MAP: `count` NUL-terminated keys (readers give them sorted by
                              bytes); NULL otherwise */
} HurrayMetaValue;

/* "bool", "int64", "float64", "string", "list", "map", "null", "integer"; NULL for an
 * unknown type. */
HURRAY_API const char *hurray_meta_type_name(int type);

/* Room for any text hurray_format_float64 writes, its NUL included. */
#define HURRAY_FLOAT64_TEXT_SIZE 32

/* Writes `value` to `out` as the shortest decimal text that reads back as the same double
 * ("0.1", "0.0003", "1e+100", "-0"), with '.' as the decimal point whatever the locale
 * (LC_NUMERIC) of the process or thread; NaN and the infinities as JavaScript spells them:
 * "NaN", "Infinity", "-Infinity". This is how the library writes metadata floats into JSON
 * (hurray_convert) and how the hurray command prints them. Returns the length of the text,
 * without its NUL. Thread-safe. */
HURRAY_API size_t hurray_format_float64(double value, char out[HURRAY_FLOAT64_TEXT_SIZE]);
/* Frees a tree returned by hurray_file_reader_metadata (one heap block). NULL is a no-op.
 * Never call it on a tree you built yourself. */
HURRAY_API void hurray_meta_destroy(HurrayMetaValue *tree);

/* ---- writer --------------------------------------------------------------------------- */

typedef struct HurrayFileWriter HurrayFileWriter;

/* Finish does not fsync the file or its directory: the new file replaces the old one
 * atomically all the same, which is all a crash of the process can see, but after a power loss
 * or an operating-system crash the name may hold the previous file, or the new one with data
 * that never reached the disk (docs/spec/file-format.md, "Durability"; ADR-055). */
#define HURRAY_FILE_WRITE_NOT_DURABLE (1u << 0)

typedef struct HurrayFileWriterOptions {
  uint32_t alignment;   /* of every buffer's file offset: a power of two in
                           [64, HURRAY_FILE_MAX_ALIGNMENT]; 0 means
                           HURRAY_FILE_DEFAULT_ALIGNMENT; 4096 suits O_DIRECT and GPU direct
                           storage */
  uint32_t flags;       /* HURRAY_FILE_WRITE_*; 0: durable */
  uint64_t reserved[3]; /* zero */
} HurrayFileWriterOptions;

/* Starts writing a file that will appear at `path` when, and only when, it is finished. The
 * bytes go to a temporary file `path` + ".tmp-<pid>-<n>" in the same directory; finish
 * fsyncs it, renames it over `path` and fsyncs the directory (the fsyncs are skipped with
 * HURRAY_FILE_WRITE_NOT_DURABLE), so a crash at any moment leaves any previous file at `path`
 * intact and never a partial file under that name (only the temporary may stay behind).
 * HURRAY_EIO if the temporary cannot be created; HURRAY_EINVAL for unknown flags. `options`
 * may be NULL for the defaults. Memory use is proportional to the number of tensors and the size
 * of their descriptors and metadata, never to the data (writes are staged in 256 KiB).
 * A writer is used by one thread at a time. */
HURRAY_API int hurray_file_writer_create(const char *path, const HurrayFileWriterOptions *options,
                                         HurrayFileWriter **out, HurrayError *error);

/* Adds a tensor whose buffers are CPU memory, as one call. `tensor` is validated against
 * `buffers` first (nothing is read before that); a buffer on another device is
 * HURRAY_EUNSUPPORTED (copy it to the host first). For each buffer, only the bytes the tensor's
 * arrays address (the spans of hurray_array_span, merged where they overlap) are written, and
 * byte offsets are re-based so they index the compacted buffer: gaps between spans are
 * dropped, each span keeping its address modulo 64 so element alignment survives. Strides,
 * negative ones included, are kept exactly as given: a strided view is written as the span it
 * addresses, gaps inside that span included (materialise it first for a compact copy). An
 * empty array is written with byte_offset 0; a buffer no array addresses is written empty.
 * `name`: 1..HURRAY_MAX_NAME bytes of UTF-8 without NUL, unique in the file. `metadata`: a MAP
 * or NULL. On failure nothing of the tensor remains and the writer can go on, except after an
 * I/O error (HURRAY_EIO), which leaves it failed: every later call but destroy is
 * HURRAY_ESTATE. Borrows everything it is given. */
HURRAY_API int hurray_file_writer_add(HurrayFileWriter *writer, const char *name,
                                      const HurrayTensorDesc *tensor,
                                      const HurrayBufferList *buffers,
                                      const HurrayMetaValue *metadata, HurrayError *error);

/* Streaming, for data larger than memory: begin_tensor, then for each buffer in list order
 * begin_buffer and any number of write calls, then end_tensor with the tensor's descriptor,
 * whose arrays index the buffers in the order they were begun and whose byte offsets are
 * relative to the bytes streamed into each. Checksums are computed as the bytes pass. The
 * descriptor is validated against the streamed sizes at end_tensor; if that or any step
 * fails, the tensor is discarded as if never begun (and the writer stays usable, except after
 * HURRAY_EIO). A call out of order is HURRAY_ESTATE and changes nothing. */
HURRAY_API int hurray_file_writer_begin_tensor(HurrayFileWriter *writer, const char *name,
                                               HurrayError *error);
/* Starts the next buffer of the open tensor with a HurrayBufferRole, ending the previous. */
HURRAY_API int hurray_file_writer_begin_buffer(HurrayFileWriter *writer, int role,
                                               HurrayError *error);
/* Appends `size` bytes to the current buffer. */
HURRAY_API int hurray_file_writer_write(HurrayFileWriter *writer, const void *data, size_t size,
                                        HurrayError *error);
HURRAY_API int hurray_file_writer_end_tensor(HurrayFileWriter *writer,
                                             const HurrayTensorDesc *tensor,
                                             const HurrayMetaValue *metadata, HurrayError *error);

/* Sets the file's metadata (a MAP; NULL clears it), replacing any set before. It is encoded
 * and validated now: the tree may be freed when this returns. */
HURRAY_API int hurray_file_writer_set_metadata(HurrayFileWriter *writer,
                                               const HurrayMetaValue *metadata, HurrayError *error);

/* Writes the index and the header and makes the file appear at its path, durably unless the
 * writer was created with HURRAY_FILE_WRITE_NOT_DURABLE. While a
 * tensor is open it fails with HURRAY_ESTATE and changes nothing; otherwise, after it returns,
 * only destroy may be called. On failure no file appeared at the path, except when syncing the
 * directory after the rename failed (HURRAY_EIO saying so): the file is there, its durability
 * unknown. */
HURRAY_API int hurray_file_writer_finish(HurrayFileWriter *writer, HurrayError *error);

/* Frees the writer. If it was not finished, the temporary file is removed and nothing appears
 * at the path (any previous file there is untouched). NULL is a no-op. */
HURRAY_API void hurray_file_writer_destroy(HurrayFileWriter *writer);

/* ---- reader --------------------------------------------------------------------------- */

typedef struct HurrayFileReader HurrayFileReader;

/* Open flags. The default maps the file: tensors are zero-copy, read-only views of the
 * mapping (the file must not be truncated while mapped, as with any mmap; WRITABLE below). PREAD reads the
 * index into memory and each tensor's buffers into fresh, writable, aligned memory when it is
 * got; it suits network filesystems and files that may change. */
#define HURRAY_FILE_OPEN_PREAD (1u << 0)
/* FOREIGN also opens safetensors, .npy and .npz files, recognised by their first bytes (never
 * by their name), parsed and validated by the converters' parsers (hurray_convert), as a
 * reader of the same interface: each array is a DENSE tensor (strides for Fortran order) with
 * one VALUES buffer, named as hurray_convert names it (a .npy file's array: the file's stem),
 * and safetensors' __metadata__ is the file metadata. A tensor whose bytes lie in the file as
 * they are, at an offset that is a multiple of 64, is a zero-copy read-only view of the
 * mapping; one that does not (misaligned, big-endian, a deflated .npz member), and every
 * tensor of a PREAD reader, is copied into fresh 64-aligned memory each time it is got (and
 * is read-only unless PREAD or WRITABLE, like the views). Such a reader's HurrayFileInfo has
 * the format, version 0.0 and alignment 64; buffer offsets are where the bytes start in the
 * file (a deflated member's compressed data), checksums 0. Verification checks the checksums the
 * format keeps (a .npz member's CRC-32, its whole member); safetensors and .npy keep none:
 * HURRAY_EUNSUPPORTED. The file stays mapped while the reader or a tensor is alive. */
#define HURRAY_FILE_OPEN_FOREIGN (1u << 1)
/* WRITABLE makes a mapped file's tensors writable (ADR-058), as NumPy's mmap_mode='c' and
 * torch.load(mmap=True) do: the mapping is private, so a write changes this process's copy of
 * the page -- never the file, nor the tensors of any other reader. Tensors got from one reader
 * share its one mapping: a write through one is seen by every tensor of that reader over the
 * same bytes. Without it the same views are read-only. It changes nothing for PREAD readers
 * (fresh memory, writable either way) nor for memory readers (read-only: the caller's bytes). */
#define HURRAY_FILE_OPEN_WRITABLE (1u << 2)

/* Opens a file: checks the header, the index's chunk table and the index header, in time
 * independent of the tensor count. Every other part of the index is checked before its first
 * use (file-format.md §9): a tensor's record (offsets inside the data region and in order,
 * hurray_tensor_validate against its buffers' sizes, metadata) and its name-table bucket
 * (names valid and unique) the first time the tensor is asked about or looked up, each index
 * chunk against its checksum the first time one of its bytes is needed. So any query on a
 * tensor may fail with the statuses below, naming the tensor; a tensor refused once is refused
 * by every call. hurray_file_reader_verify of HURRAY_FILE_WHOLE checks everything. Data is not
 * read: checksums are checked by hurray_file_reader_verify or HURRAY_FILE_GET_VERIFY. Failure
 * statuses, each with a message naming the problem: HURRAY_EFORMAT (not a Hurray file,
 * truncated, trailing bytes, malformed or overlapping entries, duplicate names),
 * HURRAY_EUNSUPPORTED (a format version this reader does not read), HURRAY_ECHECKSUM (header
 * or index checksum), HURRAY_ELIMIT (a size over a limit), HURRAY_EALIGN (a misaligned
 * index), HURRAY_EBOUNDS (an offset outside the file), HURRAY_EIO (the system refused), and
 * the statuses of the descriptor and tensor validators. A reader may be used from any number
 * of threads at once: what it validates lazily is built under a lock. */
/* A `path` that is a directory or ends in ".index.json" opens a sharded checkpoint
 * (file-format.md §12): the index (a directory's one `*.index.json`; a directory without one
 * that holds exactly one .hurray or .safetensors file opens that file) and every shard it
 * names, each opened with `flags` (FOREIGN for safetensors shards). The reader is one reader of
 * all their tensors, numbered shard after shard (shards in file-name order), each query going
 * to the tensor's shard; the file metadata is the first shard's; HurrayFileInfo sums the
 * shards' counts and sizes (shard_count set, index_length the index's size). Refused, naming
 * the index, the shard and a tensor: a shard that is missing or unreadable (its status, with
 * errno), a weight_map entry its shard does not hold, a shard tensor the weight_map does not
 * list or places elsewhere, a tensor listed twice, a shard name that is not a plain file name,
 * an index over 100 MB, nested deeper than 64, or not JSON. */
HURRAY_API int hurray_file_reader_open(const char *path, uint32_t flags, HurrayFileReader **out,
                                       HurrayError *error);

/* Opens a file image already in memory, exactly as hurray_file_reader_open validates a file.
 * `data` must be aligned to the file's alignment (else HURRAY_EALIGN) and stay valid and
 * unchanged until release(owner) is called, which happens once the reader and every tensor
 * got from it are gone. SINK for `owner`: on failure release(owner) is called before this
 * returns. `release` may be NULL. Tensors are read-only views of `data`. */
HURRAY_API int hurray_file_reader_open_memory(const void *data, uint64_t size,
                                              HurrayOwnerReleaseFn release, void *owner,
                                              HurrayFileReader **out, HurrayError *error);

/* Closes the reader. Tensors got from it stay valid: each holds a reference on the mapping
 * (or the memory) until its context is released. NULL is a no-op. */
HURRAY_API void hurray_file_reader_destroy(HurrayFileReader *reader);

typedef struct HurrayFileInfo {
  uint16_t version_major;
  uint16_t version_minor;
  uint32_t alignment; /* of every buffer's file offset */
  uint32_t tensor_count;
  uint32_t buffer_count;
  uint64_t file_size;
  uint64_t data_bytes; /* sum of every buffer's byte size */
  uint64_t index_offset; /* a FOREIGN reader's: 0 */
  uint64_t index_length; /* a FOREIGN reader's: of the index it built in memory */
  uint8_t format;        /* HurrayFormat: HURRAY, or SAFETENSORS, NPY or NPZ (FOREIGN); a
                            checkpoint's: its first shard's */
  uint8_t reserved0[3];
  uint32_t shard_count; /* a sharded checkpoint's shards; 0 for one file */
  uint64_t reserved[3];
} HurrayFileInfo;

typedef struct HurrayFileTensorInfo {
  const char *name; /* NUL-terminated, owned by the reader */
  uint32_t buffer_count;
  uint8_t layout; /* HurrayLayout */
  uint8_t dtype;  /* HurrayDTypeCode (INVALID for COMPOSITE) */
  uint8_t reserved[2];
  uint64_t data_bytes; /* sum of its buffers' byte sizes */
  uint64_t reserved2[2];
} HurrayFileTensorInfo;

typedef struct HurrayFileBufferInfo {
  HurrayBufferDesc desc; /* as stored: CPU, DEVICE, READY, the file's alignment, byte_size */
  uint64_t offset;       /* of its first byte in the file */
  uint64_t checksum;     /* XXH3-64 of its bytes, as stored */
  uint8_t role;          /* HurrayBufferRole */
  uint8_t reserved[7];
} HurrayFileBufferInfo;

/* Whole-file facts. Tensors are numbered 0..tensor_count-1 in the order they were written:
 * enumerate them with hurray_file_reader_tensor_info. */
HURRAY_API int hurray_file_reader_info(const HurrayFileReader *reader, HurrayFileInfo *out,
                                       HurrayError *error);
/* The tensor numbered `index` (HURRAY_EINVAL past the end). */
HURRAY_API int hurray_file_reader_tensor_info(const HurrayFileReader *reader, uint32_t index,
                                              HurrayFileTensorInfo *out, HurrayError *error);
/* Buffer `buffer` (0..buffer_count-1, in list order) of tensor `index`. */
HURRAY_API int hurray_file_reader_buffer_info(const HurrayFileReader *reader, uint32_t index,
                                              uint32_t buffer, HurrayFileBufferInfo *out,
                                              HurrayError *error);
/* The number of the tensor called `name`, in O(1) through the index's hash table, without
 * reading data. HURRAY_EINVAL naming the tensor if there is none; the index's status when the
 * part of it that the lookup reads is broken. */
HURRAY_API int hurray_file_reader_find(const HurrayFileReader *reader, const char *name,
                                       uint32_t *index, HurrayError *error);
/* A copy of tensor `index`'s descriptor, its arrays indexing the tensor's own buffers; no
 * data is read. Destroy it with hurray_tensor_desc_destroy. */
HURRAY_API int hurray_file_reader_describe(const HurrayFileReader *reader, uint32_t index,
                                           HurrayTensorDesc **out, HurrayError *error);

/* Get flags (besides HURRAY_VALIDATE_CONTENTS, which also checks sparse indices and page
 * tables). HURRAY_FILE_GET_VERIFY checks the tensor's checksums first. */
#define HURRAY_FILE_GET_VERIFY (1u << 16)

/* Tensor `index` as a new HurrayTensorContext, released by the caller. Mapped and memory
 * readers return views (read-only, unless opened WRITABLE) whose buffers each hold a reference
 * on the mapping, so the context outlives the reader; PREAD readers read every buffer into
 * memory aligned to the file's alignment. */
HURRAY_API int hurray_file_reader_get(const HurrayFileReader *reader, uint32_t index,
                                      uint32_t flags, HurrayTensorContext **out,
                                      HurrayError *error);
/* Rows [start, stop) along the first axis of DENSE tensor `index`, as a tensor of shape
 * [stop - start, *shape[1:]] with one buffer: only the bytes those rows address (from a
 * 64-byte boundary, as the buffer's data must be aligned) are mapped or read. Strides,
 * negative ones included, are kept. No checksum is checked (a checksum covers a whole
 * buffer). HURRAY_EUNSUPPORTED for other layouts and for
 * sub-byte rows that do not start on a byte; HURRAY_EINVAL for a 0-d tensor or rows outside
 * [0, shape[0]]. */
HURRAY_API int hurray_file_reader_get_rows(const HurrayFileReader *reader, uint32_t index,
                                           int64_t start, int64_t stop, HurrayTensorContext **out,
                                           HurrayError *error);

/* Called as checksum verification proceeds: `done` of `total` bytes hashed so far. */
typedef void (*HurrayFileProgressFn)(void *context, uint64_t done, uint64_t total);

/* A tensor number meaning "the whole file" for verify and metadata. */
#define HURRAY_FILE_WHOLE UINT32_MAX
/* A tensor number meaning "the index alone" for verify: everything about the index that open
 * may leave unchecked (file-format.md §9), reading no data. */
#define HURRAY_FILE_INDEX (UINT32_MAX - 1)

/* Recomputes the XXH3-64 checksum of every buffer of tensor `index` (or, for
 * HURRAY_FILE_WHOLE, of every tensor in file order) and compares it with the index. For
 * HURRAY_FILE_WHOLE it first checks all of the index that open may leave unchecked, which
 * HURRAY_FILE_INDEX checks alone.
 * HURRAY_ECHECKSUM naming the tensor and the buffer at the first mismatch. `progress` may be
 * NULL; it is called with 0 done at the start, then at least once per buffer and every
 * 64 MiB, in order, ending at the total. Memory use is bounded
 * (PREAD readers hash through a 1 MiB buffer). */
HURRAY_API int hurray_file_reader_verify(const HurrayFileReader *reader, uint32_t index,
                                         HurrayFileProgressFn progress, void *context,
                                         HurrayError *error);

/* The metadata of the file (index HURRAY_FILE_WHOLE) or of tensor `index`, decoded into
 * a new tree: a MAP, empty when none was written, its keys sorted by bytes. Destroy it with
 * hurray_meta_destroy. */
HURRAY_API int hurray_file_reader_metadata(const HurrayFileReader *reader, uint32_t index,
                                           HurrayMetaValue **out, HurrayError *error);


/* Writes the index of a sharded checkpoint at `path` (file-format.md §12.1, Hugging Face's
 * shape): {"metadata": {"total_size": total_size}, "weight_map": {name: shard, ...}} with the
 * names sorted, tensor `i` named `names[i]` in shard `shards[shard_of[i]]` (plain file names
 * beside the index). Written as files are (a temporary renamed into place, fsynced unless
 * `flags` has HURRAY_FILE_WRITE_NOT_DURABLE). HURRAY_EINVAL for an invalid or repeated name,
 * a shard that is not a plain file name, an out-of-range shard number. */
HURRAY_API int hurray_shard_index_write(const char *path, const char *const *names,
                                        const uint32_t *shard_of, uint32_t count,
                                        const char *const *shards, uint32_t shard_count,
                                        uint64_t total_size, uint32_t flags, HurrayError *error);

/* A sharded checkpoint being written (file-format.md §12.3): tensors go, in order, into shards
 * of at most `max_shard_size` data bytes, and the checkpoint appears only when finished. */
typedef struct HurrayShardWriter HurrayShardWriter;

/* Starts a checkpoint at `path`: a directory (made if missing; shards
 * model-00001-of-0000N.hurray beside model.hurray.index.json) or an index's path
 * NAME.hurray.index.json (shards NAME-00001-of-0000N.hurray; its directory made if missing). `options` as for
 * hurray_file_writer_create (NULL: the defaults), applied to every shard and to the index.
 * `metadata` (a MAP, or NULL), copied now, is every shard's file metadata. Shards are written
 * into a staging directory `.hurray-save-XXXXXX` beside the index: nothing in the directory
 * changes until finish. HURRAY_EINVAL for max_shard_size 0; HURRAY_EIO (with errno) if the
 * directory cannot be made or written. A writer is used by one thread at a time. */
HURRAY_API int hurray_shard_writer_create(const char *path, uint64_t max_shard_size,
                                          const HurrayFileWriterOptions *options,
                                          const HurrayMetaValue *metadata,
                                          HurrayShardWriter **out, HurrayError *error);

/* The file writer for the next tensor, called `name`, of `bytes` data bytes (the bytes its
 * arrays address): the current shard's, or a new shard's where adding the tensor would pass
 * max_shard_size (a larger tensor is alone in its shard). Add exactly that tensor to it, under
 * that name (hurray_file_writer_add, or begin_tensor ... end_tensor), before calling again;
 * never finish or destroy it. After any failure only destroy remains (HURRAY_ESTATE). */
HURRAY_API int hurray_shard_writer_next(HurrayShardWriter *writer, const char *name,
                                        uint64_t bytes, HurrayFileWriter **out,
                                        HurrayError *error);

/* Finishes the last shard, renames every shard into place under its final name, writes the
 * index (hurray_shard_index_write, durable unless the options say not) and then removes the
 * files of the directory named as shards of the same prefix that this checkpoint does not
 * name (an earlier, larger save's). A failure before the renames leaves the directory as it
 * was. */
HURRAY_API int hurray_shard_writer_finish(HurrayShardWriter *writer, HurrayError *error);

/* Frees the writer; if it was not finished, removes what it staged. NULL is a no-op. */
HURRAY_API void hurray_shard_writer_destroy(HurrayShardWriter *writer);

/* A size as Hugging Face's max_shard_size spells it: decimal digits, then nothing or B (bytes),
 * KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024): "5GB" is
 * 5,000,000,000. HURRAY_EINVAL (naming the text) for anything else, 0 or more than 2^64 - 1. */
HURRAY_API int hurray_size_parse(const char *text, uint64_t *out, HurrayError *error);

/* ============================================================================================
 * Conversion (docs/impl/conversion.md)
 *
 * hurray_convert copies the tensors of one file into a new file of another format: a Hurray
 * container, safetensors, .npy or .npz, in either direction (and between any two of them).
 * It streams: inputs are mapped and their bytes copied to the output chunk by chunk, so
 * converting a file of any size needs memory for its headers only, never for its data. Every
 * input is untrusted: each parser has explicit limits and overflow-checked arithmetic, and
 * each error names the byte offset (or the tensor, or the zip member) and what was wrong.
 * The output appears at its path only when it is complete, as with hurray_file_writer_*: it
 * is written under a temporary name in the same directory, fsynced, renamed into place and
 * the directory fsynced, so a failed conversion leaves no output and any previous file at
 * the path intact.
 *
 * Nothing is lost silently. What the output cannot hold is refused with HURRAY_EUNSUPPORTED
 * naming the tensor and the reason: layouts other than DENSE (quantised, sparse, paged,
 * composite) and dtypes the output format lacks (int4, float8_e3m4, ... in safetensors;
 * everything beyond bool, integers, float16/32/64 and complex64/128 in .npy), and metadata
 * the output has no place for (see the flags). Strided dense tensors are kept as they are in
 * a Hurray output, written in Fortran order to .npy/.npz when they are Fortran-contiguous,
 * and gathered into C order otherwise. Checksums are verified on the way: XXH3-64 of Hurray
 * buffers, CRC-32 of .npz members; a mismatch fails the conversion (HURRAY_ECHECKSUM).
 * ============================================================================================ */

typedef enum HurrayFormat {
  HURRAY_FORMAT_AUTO = 0,        /* from the file name's extension (inputs: else their bytes) */
  HURRAY_FORMAT_HURRAY = 1,      /* .hurray, .hry */
  HURRAY_FORMAT_SAFETENSORS = 2, /* .safetensors */
  HURRAY_FORMAT_NPY = 3,         /* .npy: one array */
  HURRAY_FORMAT_NPZ = 4,         /* .npz: a zip of .npy members */
  HURRAY_FORMAT_GGUF = 5         /* .gguf (llama.cpp), versions 2 and 3: an input (ADR-094) */
} HurrayFormat;

/* Metadata a safetensors output cannot hold as it is: non-string values of the file's
 * metadata are written as their JSON text (12 -> "12", [1, 2] -> "[1,2]") instead of being
 * refused. */
#define HURRAY_CONVERT_METADATA_JSON (1u << 0)
/* Drop the metadata the output has no place for (all metadata for .npy and .npz; per-tensor
 * metadata, and file metadata values that are not strings unless METADATA_JSON is given, for
 * safetensors) instead of refusing to convert. A Hurray output holds all metadata: nothing is
 * dropped there. */
#define HURRAY_CONVERT_DROP_METADATA (1u << 1)
/* The output is not fsynced, as HURRAY_FILE_WRITE_NOT_DURABLE: it still replaces any previous
 * file atomically, but is durable only once the system writes it back. */
#define HURRAY_CONVERT_NOT_DURABLE (1u << 2)

typedef struct HurrayConvertOptions {
  uint8_t input_format;  /* HurrayFormat; AUTO infers it */
  uint8_t output_format; /* HurrayFormat; AUTO infers it from the output's extension */
  uint8_t reserved0[2];  /* zero */
  uint32_t flags;        /* HURRAY_CONVERT_* */
  uint32_t alignment;    /* Hurray output: every buffer's file offset, as
                            HurrayFileWriterOptions.alignment (0: 64). safetensors output: the
                            data region's offset, the header padded with spaces up to it (0: 8,
                            as safetensors; else a power of two in [8, 2 MiB]); each tensor then
                            starts at a multiple of its element size. Others: 0 */
  uint32_t reserved1;    /* zero */
  const char *name;      /* .npy input: the tensor's name (NULL: the file's stem). .npy
                            output: the tensor to write (NULL: the input must hold one) */
  HurrayFileProgressFn progress; /* NULL, or called with the data bytes written so far and in
                                    all: at the start, at least every 64 MiB and after each
                                    tensor */
  void *progress_context;
  uint64_t max_shard_size; /* 0: one output file. Else the output is a sharded checkpoint of
                              Hurray shards of at most this many data bytes, written by a
                              HurrayShardWriter at `output` (a directory or
                              NAME.hurray.index.json; output_format AUTO or HURRAY) */
  uint64_t reserved[3]; /* zero */
} HurrayConvertOptions;

/* "auto", "hurray", "safetensors", "npy", "npz"; NULL for an unknown format. */
HURRAY_API const char *hurray_format_name(int format);
/* The format a path's extension names (case-insensitive): .hurray and .hry, .safetensors,
 * .npy, .npz. HURRAY_EINVAL naming the path for any other. */
HURRAY_API int hurray_format_from_path(const char *path, int *format, HurrayError *error);

/* Converts `input` into a new file at `output` (which may be `input` itself: the result
 * replaces it atomically). `options` may be NULL for the defaults. Tensors keep their names
 * and order (a .npy input's array is named by options->name or the file's stem; .npz members
 * are `<name>.npy`); a safetensors output orders them as safetensors' own writer does. File
 * metadata maps to safetensors' __metadata__ strings and back. A .npy output needs an input
 * of one tensor or options->name. Statuses: those of the parsers for a malformed input
 * (HURRAY_EFORMAT, HURRAY_ELIMIT, HURRAY_EOVERFLOW, HURRAY_EBOUNDS, HURRAY_EDTYPE,
 * HURRAY_ECHECKSUM, HURRAY_EUNSUPPORTED for versions and features not read), HURRAY_EINVAL
 * for bad options or an unknown extension, HURRAY_EUNSUPPORTED for what the output cannot
 * hold, HURRAY_EIO when the system refuses. Thread-safe for distinct outputs. */
HURRAY_API int hurray_convert(const char *input, const char *output,
                              const HurrayConvertOptions *options, HurrayError *error);

/* ============================================================================================
 * Wire protocol (docs/spec/interchange.md, ADR-049, ADR-050)
 *
 * A server serves named tensors -- from Hurray files (sent from the mapping, never copied in
 * user space) and from tensors registered in memory -- to clients that fetch them whole, by
 * rows, by byte range or from a resume offset, and, unless it is read-only, accepts uploads. Every tensor
 * crosses the wire with its whole descriptor (the file format's tensor record) and an XXH3-64
 * checksum per buffer, which the receiver checks before it hands anything out; from protocol
 * 1.2 on the header holding the descriptor carries an XXH3-64 of its own (ADR-079). The hellos
 * negotiate the protocol version, the frame size and the device tags both peers know: a tag
 * one peer does not know fails the session at setup, never in the middle of a stream. An
 * optional shared secret is proved by HMAC-SHA-256 challenge-response; it never crosses the
 * wire. Addresses: "HOST:PORT" / "hurray://HOST:PORT" with a numeric IPv4 or IPv6 ("[::1]:7")
 * address or "localhost", "hurrays://HOST:PORT" for the same over TLS, or "unix:PATH". Nothing
 * resolves names.
 * ============================================================================================ */

#define HURRAY_WIRE_VERSION_MAJOR 1
#define HURRAY_WIRE_VERSION_MINOR 2

/* TLS (OpenSSL, TLS 1.3; ADR-061): the frames travel unchanged inside a TLS session. A server
 * given certificate_file and key_file accepts only TLS clients (a plaintext client is answered
 * with an ERROR frame saying so, HURRAY_EPROTOCOL); a client uses TLS exactly when its address
 * is "hurrays://HOST:PORT", and always verifies the server's certificate chain and name. The
 * paths are read by create / connect and not kept. Fields a side does not use must be NULL.
 * OpenSSL 3 is not linked: the first TLS use of a process loads libcrypto.so.3 and libssl.so.3
 * (ADR-073); where they cannot be loaded, create / connect fail with HURRAY_EUNSUPPORTED naming
 * the library and the loader's reason. */
typedef struct HurrayTlsOptions {
  const char *certificate_file; /* server: its certificate chain (PEM), the leaf first */
  const char *key_file;         /* server: the leaf's private key (PEM, not encrypted) */
  const char *ca_file;          /* client: the CA certificates (PEM) the server's chain must end
                                   in; NULL: the system's default trust store */
  const char *server_name;      /* client: the DNS name the server's certificate must carry
                                   (also sent as SNI); NULL: the address's host -- "localhost"
                                   as a DNS name, a numeric address as an IP address */
  uint64_t reserved[4];         /* zero */
} HurrayTlsOptions;

/* ---- server ------------------------------------------------------------------------------ */

typedef struct HurrayServer HurrayServer;

/* refuse uploads (HURRAY_EDENIED): what a server does unless HURRAY_SERVER_UPLOADS is given
   (ADR-092); accepted so that callers saying so keep working; with UPLOADS, HURRAY_EINVAL */
#define HURRAY_SERVER_READ_ONLY (1u << 0)
/* never hand a client a tensor's memory as a file descriptor (spec §6.6); without this flag a
   server on a Unix-domain socket does so for every client that asks in its hello */
#define HURRAY_SERVER_NO_FD_PASSING (1u << 1)
/* accept uploads (hurray_client_put), each bounded by max_upload_bytes and all together by
   max_upload_total_bytes; without this flag a server is read-only (ADR-092) */
#define HURRAY_SERVER_UPLOADS (1u << 2)
/* listen on an address beyond loopback (0.0.0.0, a LAN address, a name that resolves to one)
   without a secret, serving anyone who reaches it; without this flag hurray_server_create
   refuses such an address with HURRAY_EINVAL unless `secret` is given (ADR-092). Unix-domain
   sockets and 127.0.0.0/8, ::1 need neither */
#define HURRAY_SERVER_INSECURE (1u << 3)

typedef struct HurrayServerOptions {
  const char *address;           /* NULL: "127.0.0.1:0", loopback on a free port; give
                                    "0.0.0.0:PORT" or "[::]:PORT" to listen beyond the host */
  uint32_t flags;                /* HURRAY_SERVER_* */
  uint32_t max_connections;      /* 0: 1024; more are answered HURRAY_EDENIED and closed */
  uint64_t max_frame;            /* DATA payload offered in the hello; 0: 4 MiB; the
                                    session uses the smaller of both peers' values */
  uint64_t max_upload_bytes;     /* one uploaded tensor's bytes; 0: 1 GiB */
  uint32_t handshake_timeout_ms; /* hello (and auth) must complete within it; 0: 5000 */
  uint32_t idle_timeout_ms;      /* no progress in either direction, or one frame taking
                                    longer than this, closes the connection; 0: 60000 */
  const uint8_t *secret;         /* NULL: no authentication; else 1..1024 bytes every client
                                    must prove it knows (copied by create) */
  size_t secret_len;
  const HurrayTlsOptions *tls;   /* NULL: plaintext; else certificate_file and key_file, and
                                    the server speaks only TLS (the address may then be given
                                    as "hurrays://HOST:PORT") */
  uint64_t max_upload_total_bytes; /* what all uploads together may hold, served or still
                                    arriving (their bytes, PUT headers and 1 KiB each); one
                                    more is refused HURRAY_ELIMIT; 0: 4 GiB (ABI 4: this
                                    was reserved[0], which old callers leave 0) */
  uint32_t max_connections_per_address; /* connections open at once from one client IP
                                    address (an IPv4-mapped IPv6 address counts as its IPv4
                                    one); more are answered HURRAY_EDENIED and closed. 0: 64
                                    for clients beyond this host, loopback clients bounded only
                                    by max_connections; any other value bounds every TCP
                                    client, loopback included. Unix-socket clients are not
                                    counted (was reserved, which old callers leave 0) */
  uint32_t reserved0;            /* zero */
  uint64_t reserved1;            /* zero */
} HurrayServerOptions;

/* Creates a server and binds its listening socket (so hurray_server_address knows the port);
 * it serves nothing until hurray_server_run. `options` may be NULL for the defaults. Statuses:
 * HURRAY_EINVAL (bad options or address), HURRAY_EIO (the system refused to bind, or a TLS
 * certificate or key that cannot be read or do not match, named), HURRAY_EUNSUPPORTED (TLS
 * options where OpenSSL 3 cannot be loaded, named). */
HURRAY_API int hurray_server_create(const HurrayServerOptions *options, HurrayServer **out,
                                    HurrayError *error);
/* The bound address, as clients connect to it ("127.0.0.1:40123", "[::1]:7", "unix:/p", or
 * "hurrays://127.0.0.1:40123" for a TLS server). */
HURRAY_API int hurray_server_address(const HurrayServer *server, char *out, size_t size,
                                     HurrayError *error);
/* Serves every tensor of the Hurray file at `path` under its name, from a validated mapping.
 * Thread-safe, also while running. HURRAY_EINVAL if a name is already served (nothing of the
 * file is added then); the reader's statuses for a bad file. */
HURRAY_API int hurray_server_add_file(HurrayServer *server, const char *path, HurrayError *error);
/* Serves a tensor held in CPU memory under `name`. SINK for `tensor`: the server releases it
 * when destroyed, or now on failure. Only the bytes its arrays address are ever read.
 * HURRAY_EUNSUPPORTED for buffers not on the CPU, HURRAY_EINVAL if the name is taken. The
 * bytes must not change while served (their checksums are computed here). Thread-safe, also
 * while running. */
HURRAY_API int hurray_server_add_tensor(HurrayServer *server, const char *name,
                                        HurrayTensorContext *tensor, HurrayError *error);
/* Runs the event loop on the calling thread until hurray_server_stop; then every connection
 * is closed. Uploaded tensors are served like added ones. */
HURRAY_API int hurray_server_run(HurrayServer *server, HurrayError *error);
/* Makes hurray_server_run return soon. Safe from any thread and from a signal handler. */
HURRAY_API void hurray_server_stop(HurrayServer *server);

typedef struct HurrayServerStats {
  uint64_t connections;         /* open now */
  uint64_t accepted;            /* since create */
  uint64_t refused;             /* over max_connections */
  uint64_t requests;            /* requests answered (data, list, upload, error) */
  uint64_t buffered_bytes;      /* memory the connections hold now (frames, queues) */
  uint64_t peak_buffered_bytes; /* its maximum since create */
  uint64_t transfers;           /* tensor responses sent in full (every frame written) */
  uint64_t sent_bytes;          /* tensor bytes sent in DATA frames */
  uint64_t passed_bytes;        /* tensor bytes handed over as file descriptors (same-host
                                   path, spec §6.6): a DATA_FD frame counts its buffer's size */
  uint64_t reserved[1];
} HurrayServerStats;

/* A snapshot of the counters; thread-safe. Bytes are counted once a frame has been written to
 * the socket, so sent_bytes + passed_bytes are the stream bytes of the responses so far
 * (uploads are not counted). */
HURRAY_API int hurray_server_stats(const HurrayServer *server, HurrayServerStats *out,
                                   HurrayError *error);
/* Closes the socket and frees everything, releasing the tensors served. Must not be called
 * while hurray_server_run runs. NULL is a no-op. */
HURRAY_API void hurray_server_destroy(HurrayServer *server);

/* ---- client ------------------------------------------------------------------------------ */

typedef struct HurrayClient HurrayClient;

/* Over a Unix-domain socket a client asks, in its hello, to receive tensors as file descriptors
 * it maps instead of bytes it copies (spec §6.6): this flag does not ask. */
#define HURRAY_CLIENT_NO_FD_PASSING (1u << 0)

typedef struct HurrayClientOptions {
  uint32_t timeout_ms;       /* the deadline of each whole call: connect, list, get, fetch,
                                read, read_file and put each return HURRAY_ETIMEOUT once it
                                has passed since the call began (connecting, sending, every
                                wait for the server and the reconnections of `retries`
                                included); 0: none (ADR-078) */
  uint32_t ndevices;         /* entries of `devices` */
  const uint8_t *devices;    /* the device tags offered in the hello, which bind the server:
                                it answers on the CPU (always, listed or not) and on these
                                only, and a get on another is HURRAY_EINVAL here; NULL: every
                                named device (0x00..0x08; spec §4.1) */
  uint64_t max_frame;        /* DATA payload offered; 0: 4 MiB */
  uint64_t max_tensor_bytes; /* refuse (HURRAY_ELIMIT) a tensor larger than this before
                                allocating (get); 0: this machine's physical memory
                                (sysconf), the most a header may make the client reserve */
  const uint8_t *secret;     /* NULL: no authentication (a server that asks for a secret then
                                refuses the session); else the shared secret (borrowed during
                                connect). A client with a secret also refuses a server that
                                does not prove it knows it */
  size_t secret_len;
  const HurrayTlsOptions *tls; /* for a "hurrays://" address: its trust (ca_file, server_name);
                                  NULL: the system's trust store and the address's host. Must
                                  be NULL for any other address */
  uint32_t flags;            /* HURRAY_CLIENT_* */
  uint32_t idle_timeout_ms;  /* the longest wait without progress (connect, each read and
                                write), HURRAY_ETIMEOUT past it; 0: timeout_ms if given, else
                                30000. With neither given a call has no deadline, but a server
                                that stops sending for 30 s fails it */
  uint64_t reserved[2];      /* zero */
} HurrayClientOptions;

/* Connects, exchanges hellos and authenticates. Statuses: HURRAY_EINVAL (address, options),
 * HURRAY_ECONNECTION (refused or closed), HURRAY_ETIMEOUT, HURRAY_EUNSUPPORTED (protocol
 * version; for hurrays://, OpenSSL 3 that cannot be loaded), HURRAY_EDEVICE (a device tag one side does not know, named), HURRAY_EAUTH
 * (wrong or missing secret; over TLS also a server certificate that is not trusted or not
 * for the name), HURRAY_EDENIED (connection limit), HURRAY_EPROTOCOL (also a TLS handshake
 * that failed, naming OpenSSL's reason, and TLS against a plaintext server or back), HURRAY_EIO
 * (a TLS file that cannot be read). */
HURRAY_API int hurray_client_connect(const char *address, const HurrayClientOptions *options,
                                     HurrayClient **out, HurrayError *error);

/* What the server said in its hello. */
typedef struct HurrayClientInfo {
  uint16_t version_major; /* negotiated */
  uint16_t version_minor;
  uint32_t server_flags;  /* bit 0: authenticated, bit 1: read-only, bit 2: tensors come as
                             file descriptors (spec §4.1) */
  uint64_t max_frame;     /* negotiated */
  uint32_t ndevices;      /* the server's device tags */
  uint8_t devices[256];
  uint8_t reserved[4];
} HurrayClientInfo;

HURRAY_API int hurray_client_info(const HurrayClient *client, HurrayClientInfo *out,
                                  HurrayError *error);

typedef struct HurrayRemoteTensor {
  char name[HURRAY_MAX_NAME + 1]; /* NUL-terminated */
  uint8_t layout;                 /* HurrayLayout */
  uint8_t dtype;                  /* HurrayDTypeCode */
  uint8_t reserved[2];
  uint32_t buffer_count;
  uint64_t data_bytes;
  int32_t ndim;                   /* the tensor's logical shape: shape[0..ndim) */
  uint32_t reserved1;
  int64_t shape[HURRAY_MAX_NDIM];
} HurrayRemoteTensor;

/* The server's tensors, in the order it lists them: a new array of *count entries, freed with
 * free(). HURRAY_ELIMIT for a list of more than 2^18 entries or 64 MiB of LIST_RESULT payload,
 * HURRAY_EPROTOCOL for an entry whose layout or dtype code this library does not know (both
 * close the connection; ADR-078). */
HURRAY_API int hurray_client_list(HurrayClient *client, HurrayRemoteTensor **out,
                                  uint32_t *count, HurrayError *error);

/* The metadata of tensor `name` on the server (the map its record carries), or with `name`
 * NULL or "" the server's own (the metadata of the first file it serves; an empty map when it
 * serves none), as a new tree for hurray_meta_destroy: wire protocol 1.3 (ADR-098), one
 * METADATA request, nothing of the tensor's data read. HURRAY_EINVAL "peer: no tensor named
 * ..." for a name the server does not serve (the connection goes on); HURRAY_EUNSUPPORTED for a
 * server that speaks 1.2 or older (nothing is sent); HURRAY_EPROTOCOL for an answer that is not
 * a metadata block of at most HURRAY_META_MAX_BYTES (the connection closes). */
HURRAY_API int hurray_client_metadata(HurrayClient *client, const char *name,
                                      HurrayMetaValue **out, HurrayError *error);

#define HURRAY_GET_FALLBACK (1u << 0) /* serve from the CPU if the preferred device cannot be */
/* hurray_client_fetch and _read_file: do not fsync the file and its directory, as
   HURRAY_FILE_WRITE_NOT_DURABLE (ADR-055); it still appears only whole */
#define HURRAY_GET_NOT_DURABLE (1u << 1)

typedef struct HurrayGetOptions {
  uint8_t preferred_device; /* HurrayDeviceTag; CPU by default (zeroed options) */
  uint8_t reserved0;
  uint16_t device_id;       /* of preferred_device, for a queue made here when `queue` is NULL */
  uint32_t flags;           /* HURRAY_GET_* */
  int64_t row_start;        /* with row_stop > row_start: rows [start, stop) of the first axis
                               of a DENSE tensor, as hurray_file_reader_get_rows; both 0: all */
  int64_t row_stop;
  uint32_t retries;         /* reconnections allowed when the connection drops mid-transfer:
                               each resumes at the first byte not yet received */
  uint32_t reserved1;
  HurrayFileProgressFn progress; /* NULL, or called with bytes received so far and in all */
  void *progress_context;
  HurrayDeviceQueue *queue; /* borrowed: where a tensor served on preferred_device is received
                               (NULL: a queue in the default context of device_id, made and
                               dropped by the call); its tag must be preferred_device */
  uint64_t reserved[3];
} HurrayGetOptions;

/* Fetches tensor `name` into new CPU memory aligned as the server's descriptor says, and
 * returns it as a context whose descriptor equals the served one but for byte offsets: each
 * buffer holds only the bytes the tensor's arrays address, laid out as in a file (spec §6.3),
 * so a tensor read from a file arrives byte-identical. Each buffer's XXH3-64 is
 * checked as it completes: a mismatch is HURRAY_ECHECKSUM naming the buffer, the connection
 * is closed and nothing is returned. With a server of protocol 1.2 the header describing the
 * tensor is checked too (HURRAY_ECHECKSUM "TENSOR_HEADER header checksum mismatch", the
 * connection closed), and with any server a header that does not answer the request (another
 * tensor, another number of rows) is HURRAY_EPROTOCOL.
 * Devices (ADR-062): a preferred_device other than CPU needs that device's runtime here: the
 * call receives through `options->queue`, or through a queue it makes on device_id (failing
 * with that status, HURRAY_EUNSUPPORTED naming the runtime library, before anything is sent --
 * or, with HURRAY_GET_FALLBACK, asking for the CPU instead). A server serves a tensor on the
 * CPU and on the device its memory is in; asked for another device it answers
 * HURRAY_EUNSUPPORTED unless HURRAY_GET_FALLBACK is set (the tensor then comes on the CPU).
 * A tensor served on the device arrives in new device memory allocated through the queue
 * (hurray_device_alloc), READY: each chunk of at most 1 MiB is hashed on the host and copied
 * to the device as it arrives, and after a failure the device memory is freed, never returned.
 * Other statuses: HURRAY_EINVAL (no such tensor, bad rows, a queue of another tag),
 * HURRAY_ELIMIT, HURRAY_ECONNECTION (the server went away: never a truncated tensor),
 * HURRAY_ETIMEOUT, and the device runtime's (HURRAY_EIO, HURRAY_ENOMEM: the connection is closed).
 * `options` may be NULL. After a connection error every call but destroy fails. */
HURRAY_API int hurray_client_get(HurrayClient *client, const char *name,
                                 const HurrayGetOptions *options, HurrayTensorContext **out,
                                 HurrayError *error);
/* Fetches tensor `name` into a new Hurray file at `path` (the tensor and its metadata, under
 * its name), streaming: each DATA frame goes to the file as it arrives, so memory use is
 * bounded by the frame size whatever the tensor's size, and max_tensor_bytes does not apply.
 * The file appears at `path` only when every byte has arrived and every checksum matched, as
 * with hurray_file_writer_* (a failure leaves any previous file there intact). A file holds
 * host bytes: preferred_device must be CPU (HURRAY_EINVAL). The file and its directory are
 * fsynced before the rename unless options->flags has HURRAY_GET_NOT_DURABLE (ADR-055).
 * Statuses: those of hurray_client_get, and the writer's (HURRAY_EIO). */
HURRAY_API int hurray_client_fetch(HurrayClient *client, const char *name,
                                   const HurrayGetOptions *options, const char *path,
                                   HurrayError *error);
/* Reads bytes [start, stop) of tensor `name`'s stream -- its buffers as the server sends them
 * (compact, spec §6.3), concatenated in order; hurray_client_list's data_bytes is its length --
 * into `dst`, caller memory of stop - start bytes (NULL when they are equal), in host memory.
 * Only those bytes cross the wire (a BYTES request, spec §6.2), so a part of a huge tensor is
 * read without the rest, and several clients on several connections can each read a part of
 * one tensor into their slice of one destination. Verification: the server sends the range
 * in DATA frames that each carry a 32-bit XXH3 check of their bytes (protocol 1.1, ADR-064),
 * and each frame is checked as it arrives; a mismatch is HURRAY_ECHECKSUM naming the byte
 * range, with the connection closed. The checks prove the bytes arrived as the server read
 * them; the tensor's per-buffer checksums, which cover whole buffers, are not checked (a
 * caller that reads every byte of a buffer may hash it against them itself). On a failure
 * `dst` holds unspecified bytes and must not be used. With options->retries a dropped
 * connection is resumed after the last checked frame; the tensor must then be the same one
 * (HURRAY_ESTATE otherwise). options (may be NULL): preferred_device CPU and no rows
 * (HURRAY_EINVAL otherwise); retries and progress (counting the range's bytes) apply. Statuses: HURRAY_EINVAL (bad
 * range or options, no such tensor, a range past the stream's end), HURRAY_EUNSUPPORTED (a
 * server speaking protocol 1.0, whose ranges carry no checks: nothing is sent), and those of
 * hurray_client_get. */
HURRAY_API int hurray_client_read(HurrayClient *client, const char *name, uint64_t start,
                                  uint64_t stop, void *dst, const HurrayGetOptions *options,
                                  HurrayError *error);
/* The same into a new file at `path` holding exactly those bytes, streaming (memory use is
 * bounded by the frame size): the file appears only when every frame has arrived and matched
 * its check, fsynced with its directory unless options->flags has HURRAY_GET_NOT_DURABLE
 * (ADR-055); a failure leaves any previous file there intact. Statuses: those of
 * hurray_client_read, and the writer's (HURRAY_EIO). */
HURRAY_API int hurray_client_read_file(HurrayClient *client, const char *name, uint64_t start,
                                       uint64_t stop, const char *path,
                                       const HurrayGetOptions *options, HurrayError *error);
/* Uploads a tensor held in CPU memory under `name` (borrowed). Statuses: HURRAY_EDENIED
 * (read-only server), HURRAY_EINVAL (name taken), HURRAY_ELIMIT (too large for the server),
 * HURRAY_EUNSUPPORTED (buffers not on the CPU), and the connection errors. */
HURRAY_API int hurray_client_put(HurrayClient *client, const char *name,
                                 const HurrayTensorContext *tensor, HurrayError *error);
/* Says GOODBYE (if the connection is up), closes it and frees the client. NULL is a no-op. */
HURRAY_API void hurray_client_destroy(HurrayClient *client);

#ifdef __cplusplus
}
#endif

#endif /* HURRAY_HURRAY_H */
