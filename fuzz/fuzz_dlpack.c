/* fuzz_dlpack.c -- the checks hurray_tensor_from_dlpack and hurray.from_dlpack run on every DLPack
 * tensor they receive (src/core/dlpack.c), on hostile tensors as a consumer sees them: any ndim,
 * dtype, device, shape, strides, byte_offset and flags, a NULL shape or strides, and data that is
 * NULL, an address, or an arbitrary value up to the top of the address space.
 *
 * Input: ndim byte, flag byte, dtype code, bits, lanes (2), device type (1), device id (4,
 * signed), byte_offset (8), data (8), then ndim shape entries and ndim strides (8 bytes each,
 * little-endian; missing bytes are zero). Flag bits: 0 READ_ONLY, 1 IS_COPIED,
 * 2 IS_SUBBYTE_TYPE_PADDED, 3 NULL shape, 4 NULL strides, 5-6 what data is (0 NULL, 1 a real
 * address, 2 the input's 8 bytes, 3 the top of the address space minus the input's low byte),
 * 7 a managed tensor of major version 2 rather than 1.
 *
 * The oracle aborts unless: a failure has a NUL-terminated message and its status in the
 * error; an accepted tensor's memory [start, start + size) does not wrap, and hurray-core's
 * own check of its array (hurray_array_span) accepts it with every byte it addresses inside
 * that memory -- hurray.from_dlpack builds the tensor without running that check again; and
 * hurray_tensor_from_dlpack, given the same tensor as a managed one, fails exactly when the
 * check (or the version) does, never calls the deleter when it fails, and gives a context
 * whose release calls it exactly once. The sanitizers catch every overflow the arithmetic
 * could make on the way. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dlpack.h"

#define MAX_DIMS 70 /* past HURRAY_MAX_NDIM: the check must refuse before reading them */

typedef struct Reader {
  const uint8_t *data;
  size_t size, at;
} Reader;

static uint64_t take(Reader *r, size_t n) {
  uint64_t value = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t byte = r->at < r->size ? r->data[r->at] : 0;
    value |= byte << (8 * i);
    r->at++;
  }
  return value;
}

static uint8_t g_memory[256];

static void check_error(int status, const HurrayError *error) {
  if (error->code != status || error->message[0] == '\0' ||
      memchr(error->message, '\0', sizeof error->message) == NULL) {
    abort();
  }
}

static int g_deleted;

static void count_deleter(HurrayDLManagedTensorVersioned *self) {
  (void)self;
  g_deleted++;
}

/* The public consumer over the same tensor, managed (major version `major`); `checked` is
 * what hurray__dlpack_check answered. */
static void check_public(const HurrayDLTensor *dl, uint64_t dl_flags, uint32_t major,
                         int checked) {
  HurrayDLManagedTensorVersioned managed = {
      .version = {major, 1}, .deleter = count_deleter, .flags = dl_flags, .dl_tensor = *dl};
  HurrayTensorContext *context = NULL;
  HurrayError error;
  memset(&error, 0, sizeof error);
  g_deleted = 0;
  int status = hurray_tensor_from_dlpack(&managed, 0, &context, &error);
  if (g_deleted != 0) abort(); /* taken on success only; released with the context */
  if (status != HURRAY_OK) {
    check_error(status, &error);
    if (context != NULL) abort();
    if (major == 1 && checked != HURRAY_OK &&
        status != (checked == HURRAY_DLPACK_EBROKEN ? HURRAY_EINVAL : checked)) {
      abort(); /* another verdict than the check's */
    }
    return;
  }
  if (major != 1 || checked != HURRAY_OK || context == NULL) abort();
  if (hurray_tensor_context_check(context, 0, NULL) != HURRAY_OK) abort();
  hurray_tensor_context_release(context);
  if (g_deleted != 1) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Reader r = {data, size, 0};
  int64_t shape[MAX_DIMS], strides[MAX_DIMS];
  HurrayDLTensor dl;
  memset(&dl, 0, sizeof dl);
  dl.ndim = (int32_t)(take(&r, 1) % 72) - 2; /* -2 .. 69 */
  uint8_t flags = (uint8_t)take(&r, 1);
  dl.dtype.code = (uint8_t)take(&r, 1);
  dl.dtype.bits = (uint8_t)take(&r, 1);
  dl.dtype.lanes = (uint16_t)take(&r, 2);
  dl.device.device_type = (int32_t)take(&r, 1);
  dl.device.device_id = (int32_t)(uint32_t)take(&r, 4);
  dl.byte_offset = take(&r, 8);
  uint64_t raw = take(&r, 8);
  int32_t n = dl.ndim < 0 ? 0 : dl.ndim > MAX_DIMS ? MAX_DIMS : dl.ndim;
  for (int32_t i = 0; i < n; i++) shape[i] = (int64_t)take(&r, 8);
  for (int32_t i = 0; i < n; i++) strides[i] = (int64_t)take(&r, 8);
  dl.shape = (flags & 8) ? NULL : shape;
  dl.strides = (flags & 16) ? NULL : strides;
  switch ((flags >> 5) & 3) {
    case 0:
      dl.data = NULL;
      break;
    case 1:
      dl.data = g_memory;
      break;
    case 2:
      dl.data = (void *)(uintptr_t)raw;
      break;
    default:
      dl.data = (void *)(UINTPTR_MAX - (uintptr_t)(raw & 0xFF));
      break;
  }
  uint64_t dl_flags = flags & 7u;

  HurrayDLImport out;
  HurrayError error;
  memset(&error, 0, sizeof error);
  int status = hurray__dlpack_check(&dl, dl_flags, &out, &error);
  check_public(&dl, dl_flags, (flags & 128) ? 2 : 1, status);
  if (status != HURRAY_OK) {
    check_error(status, &error);
    return 0;
  }
  if (out.array.shape != out.shape || out.array.ndim != dl.ndim) abort();
  if (hurray__address_form(out.tag) && out.start != NULL &&
      out.size > UINTPTR_MAX - (uintptr_t)out.start) {
    abort(); /* the memory wraps the address space */
  }
  uint64_t begin = 0, end = 0;
  if (hurray_array_span(&out.array, &begin, &end, NULL) != HURRAY_OK || end > out.size) {
    abort(); /* accepted what hurray-core refuses, or an element outside the memory */
  }
  return 0;
}
