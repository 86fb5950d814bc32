/* test_abi.c -- pins the hurray-ffi ABI (version 4): the size and every field offset of each
 * public struct, the frozen head of HurrayTensorContext, and the values that are forever
 * (status codes, enum values). A change that moves any of these fails to compile. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "hurray/hurray.h"

#define PIN_SIZE(type, size) _Static_assert(sizeof(type) == (size), "sizeof " #type)
#define PIN_OFFSET(type, field, offset) \
  _Static_assert(offsetof(type, field) == (offset), "offsetof " #type "." #field)

/* Layout-independent of the pointer size. */
PIN_SIZE(HurrayBufferDesc, 24);
PIN_OFFSET(HurrayBufferDesc, byte_size, 0);
PIN_OFFSET(HurrayBufferDesc, alignment, 8);
PIN_OFFSET(HurrayBufferDesc, device_id, 12);
PIN_OFFSET(HurrayBufferDesc, peer_device_id, 14);
PIN_OFFSET(HurrayBufferDesc, device_tag, 16);
PIN_OFFSET(HurrayBufferDesc, memory_class, 17);
PIN_OFFSET(HurrayBufferDesc, sync_mode, 18);
PIN_OFFSET(HurrayBufferDesc, reserved, 19);

PIN_SIZE(HurrayError, 8 + HURRAY_ERROR_MESSAGE_SIZE);
PIN_OFFSET(HurrayError, code, 0);
PIN_OFFSET(HurrayError, system_errno, 4);
PIN_OFFSET(HurrayError, message, 8);

/* The frozen head of the context: the same offsets for every ABI version, on every platform
 * with pointers of at most 8 bytes (release follows two uint32 fields). */
PIN_OFFSET(HurrayTensorContext, abi_version, 0);
PIN_OFFSET(HurrayTensorContext, flags, 4);
PIN_OFFSET(HurrayTensorContext, release, 8);

/* DLPack's structs (ADR-083): pointer-size independent parts. */
PIN_SIZE(HurrayDLDevice, 8);
PIN_OFFSET(HurrayDLDevice, device_type, 0);
PIN_OFFSET(HurrayDLDevice, device_id, 4);
PIN_SIZE(HurrayDLDataType, 4);
PIN_OFFSET(HurrayDLDataType, code, 0);
PIN_OFFSET(HurrayDLDataType, bits, 1);
PIN_OFFSET(HurrayDLDataType, lanes, 2);
PIN_SIZE(HurrayDLPackVersion, 8);
PIN_OFFSET(HurrayDLPackVersion, major, 0);
PIN_OFFSET(HurrayDLPackVersion, minor, 4);

#if UINTPTR_MAX == UINT64_MAX /* LP64 / LLP64: the platforms Hurray ships for */
/* dlpack.h's layouts, field by field (ADR-083): a dlpack.h consumer casts between them. */
PIN_SIZE(HurrayDLTensor, 48);
PIN_OFFSET(HurrayDLTensor, data, 0);
PIN_OFFSET(HurrayDLTensor, device, 8);
PIN_OFFSET(HurrayDLTensor, ndim, 16);
PIN_OFFSET(HurrayDLTensor, dtype, 20);
PIN_OFFSET(HurrayDLTensor, shape, 24);
PIN_OFFSET(HurrayDLTensor, strides, 32);
PIN_OFFSET(HurrayDLTensor, byte_offset, 40);
PIN_SIZE(HurrayDLManagedTensor, 64);
PIN_OFFSET(HurrayDLManagedTensor, dl_tensor, 0);
PIN_OFFSET(HurrayDLManagedTensor, manager_ctx, 48);
PIN_OFFSET(HurrayDLManagedTensor, deleter, 56);
PIN_SIZE(HurrayDLManagedTensorVersioned, 80);
PIN_OFFSET(HurrayDLManagedTensorVersioned, version, 0);
PIN_OFFSET(HurrayDLManagedTensorVersioned, manager_ctx, 8);
PIN_OFFSET(HurrayDLManagedTensorVersioned, deleter, 16);
PIN_OFFSET(HurrayDLManagedTensorVersioned, flags, 24);
PIN_OFFSET(HurrayDLManagedTensorVersioned, dl_tensor, 32);

PIN_SIZE(HurrayDTypeInfo, 16);
PIN_OFFSET(HurrayDTypeInfo, name, 0);
PIN_OFFSET(HurrayDTypeInfo, code, 8);
PIN_OFFSET(HurrayDTypeInfo, tier, 9);
PIN_OFFSET(HurrayDTypeInfo, kind, 10);
PIN_OFFSET(HurrayDTypeInfo, bits, 11);
PIN_OFFSET(HurrayDTypeInfo, dlpack_code, 12);
PIN_OFFSET(HurrayDTypeInfo, dlpack_bits, 13);
PIN_OFFSET(HurrayDTypeInfo, dlpack_lanes, 14);

PIN_SIZE(HurrayLayoutInfo, 24);
PIN_OFFSET(HurrayLayoutInfo, name, 0);
PIN_OFFSET(HurrayLayoutInfo, code, 8);
PIN_OFFSET(HurrayLayoutInfo, min_parts, 9);
PIN_OFFSET(HurrayLayoutInfo, max_parts, 10);
PIN_OFFSET(HurrayLayoutInfo, values_part, 11);
PIN_OFFSET(HurrayLayoutInfo, roles, 12);
PIN_OFFSET(HurrayLayoutInfo, flags, 15);
PIN_OFFSET(HurrayLayoutInfo, min_ndim, 16);
PIN_OFFSET(HurrayLayoutInfo, max_ndim, 20);

PIN_SIZE(HurrayBuffer, 88);
PIN_OFFSET(HurrayBuffer, data, 0);
PIN_OFFSET(HurrayBuffer, desc, 8);
PIN_OFFSET(HurrayBuffer, flags, 32);
PIN_OFFSET(HurrayBuffer, reserved0, 36);
PIN_OFFSET(HurrayBuffer, sync_handle, 40);
PIN_OFFSET(HurrayBuffer, sync_value, 48);
PIN_OFFSET(HurrayBuffer, release, 56);
PIN_OFFSET(HurrayBuffer, release_ctx, 64);
PIN_OFFSET(HurrayBuffer, reserved1, 72);

PIN_SIZE(HurrayBufferList, 32);
PIN_OFFSET(HurrayBufferList, count, 0);
PIN_OFFSET(HurrayBufferList, capacity, 4);
PIN_OFFSET(HurrayBufferList, buffers, 8);
PIN_OFFSET(HurrayBufferList, roles, 16);
PIN_OFFSET(HurrayBufferList, reserved, 24);

PIN_SIZE(HurrayArray, 40);
PIN_OFFSET(HurrayArray, byte_offset, 0);
PIN_OFFSET(HurrayArray, shape, 8);
PIN_OFFSET(HurrayArray, strides, 16);
PIN_OFFSET(HurrayArray, ndim, 24);
PIN_OFFSET(HurrayArray, buffer, 28);
PIN_OFFSET(HurrayArray, dtype, 32);
PIN_OFFSET(HurrayArray, reserved, 33);

PIN_SIZE(HurrayTensorDesc, 88);
PIN_OFFSET(HurrayTensorDesc, layout, 0);
PIN_OFFSET(HurrayTensorDesc, flags, 4);
PIN_OFFSET(HurrayTensorDesc, ndim, 8);
PIN_OFFSET(HurrayTensorDesc, axis, 12);
PIN_OFFSET(HurrayTensorDesc, block_size, 16);
PIN_OFFSET(HurrayTensorDesc, shape, 24);
PIN_OFFSET(HurrayTensorDesc, parts, 32);
PIN_OFFSET(HurrayTensorDesc, nparts, 40);
PIN_OFFSET(HurrayTensorDesc, dtype, 44);
PIN_OFFSET(HurrayTensorDesc, reserved0, 45);
PIN_OFFSET(HurrayTensorDesc, nchildren, 48);
PIN_OFFSET(HurrayTensorDesc, reserved1, 52);
PIN_OFFSET(HurrayTensorDesc, children, 56);
PIN_OFFSET(HurrayTensorDesc, child_names, 64);
PIN_OFFSET(HurrayTensorDesc, reserved2, 72);

PIN_SIZE(HurrayTensorContext, 80);
PIN_OFFSET(HurrayTensorContext, tensor, 16);
PIN_OFFSET(HurrayTensorContext, buffers, 24);
PIN_OFFSET(HurrayTensorContext, owner, 32);
PIN_OFFSET(HurrayTensorContext, owner_release, 40);
PIN_OFFSET(HurrayTensorContext, reserved, 48);

/* the wire protocol */
PIN_SIZE(HurrayServerOptions, 88);
PIN_OFFSET(HurrayServerOptions, address, 0);
PIN_OFFSET(HurrayServerOptions, flags, 8);
PIN_OFFSET(HurrayServerOptions, max_connections, 12);
PIN_OFFSET(HurrayServerOptions, max_frame, 16);
PIN_OFFSET(HurrayServerOptions, max_upload_bytes, 24);
PIN_OFFSET(HurrayServerOptions, handshake_timeout_ms, 32);
PIN_OFFSET(HurrayServerOptions, idle_timeout_ms, 36);
PIN_OFFSET(HurrayServerOptions, secret, 40);
PIN_OFFSET(HurrayServerOptions, secret_len, 48);
PIN_OFFSET(HurrayServerOptions, tls, 56);
PIN_OFFSET(HurrayServerOptions, max_upload_total_bytes, 64);
PIN_OFFSET(HurrayServerOptions, max_connections_per_address, 72);
PIN_OFFSET(HurrayServerOptions, reserved0, 76);
PIN_OFFSET(HurrayServerOptions, reserved1, 80);

PIN_SIZE(HurrayTlsOptions, 64);
PIN_OFFSET(HurrayTlsOptions, certificate_file, 0);
PIN_OFFSET(HurrayTlsOptions, key_file, 8);
PIN_OFFSET(HurrayTlsOptions, ca_file, 16);
PIN_OFFSET(HurrayTlsOptions, server_name, 24);
PIN_OFFSET(HurrayTlsOptions, reserved, 32);

PIN_SIZE(HurrayServerStats, 80);
PIN_OFFSET(HurrayServerStats, connections, 0);
PIN_OFFSET(HurrayServerStats, accepted, 8);
PIN_OFFSET(HurrayServerStats, refused, 16);
PIN_OFFSET(HurrayServerStats, requests, 24);
PIN_OFFSET(HurrayServerStats, buffered_bytes, 32);
PIN_OFFSET(HurrayServerStats, peak_buffered_bytes, 40);
PIN_OFFSET(HurrayServerStats, transfers, 48);
PIN_OFFSET(HurrayServerStats, sent_bytes, 56);
PIN_OFFSET(HurrayServerStats, passed_bytes, 64);
PIN_OFFSET(HurrayServerStats, reserved, 72);

PIN_SIZE(HurrayClientOptions, 80);
PIN_OFFSET(HurrayClientOptions, timeout_ms, 0);
PIN_OFFSET(HurrayClientOptions, ndevices, 4);
PIN_OFFSET(HurrayClientOptions, devices, 8);
PIN_OFFSET(HurrayClientOptions, max_frame, 16);
PIN_OFFSET(HurrayClientOptions, max_tensor_bytes, 24);
PIN_OFFSET(HurrayClientOptions, secret, 32);
PIN_OFFSET(HurrayClientOptions, secret_len, 40);
PIN_OFFSET(HurrayClientOptions, tls, 48);
PIN_OFFSET(HurrayClientOptions, flags, 56);
PIN_OFFSET(HurrayClientOptions, idle_timeout_ms, 60);
PIN_OFFSET(HurrayClientOptions, reserved, 64);

PIN_SIZE(HurrayClientInfo, 280);
PIN_OFFSET(HurrayClientInfo, version_major, 0);
PIN_OFFSET(HurrayClientInfo, version_minor, 2);
PIN_OFFSET(HurrayClientInfo, server_flags, 4);
PIN_OFFSET(HurrayClientInfo, max_frame, 8);
PIN_OFFSET(HurrayClientInfo, ndevices, 16);
PIN_OFFSET(HurrayClientInfo, devices, 20);
PIN_OFFSET(HurrayClientInfo, reserved, 276);

PIN_SIZE(HurrayRemoteTensor, 792);
PIN_OFFSET(HurrayRemoteTensor, name, 0);
PIN_OFFSET(HurrayRemoteTensor, layout, 256);
PIN_OFFSET(HurrayRemoteTensor, dtype, 257);
PIN_OFFSET(HurrayRemoteTensor, reserved, 258);
PIN_OFFSET(HurrayRemoteTensor, buffer_count, 260);
PIN_OFFSET(HurrayRemoteTensor, data_bytes, 264);
PIN_OFFSET(HurrayRemoteTensor, ndim, 272);
PIN_OFFSET(HurrayRemoteTensor, reserved1, 276);
PIN_OFFSET(HurrayRemoteTensor, shape, 280);

PIN_SIZE(HurrayGetOptions, 80);
PIN_OFFSET(HurrayGetOptions, preferred_device, 0);
PIN_OFFSET(HurrayGetOptions, reserved0, 1);
PIN_OFFSET(HurrayGetOptions, device_id, 2);
PIN_OFFSET(HurrayGetOptions, flags, 4);
PIN_OFFSET(HurrayGetOptions, row_start, 8);
PIN_OFFSET(HurrayGetOptions, row_stop, 16);
PIN_OFFSET(HurrayGetOptions, retries, 24);
PIN_OFFSET(HurrayGetOptions, reserved1, 28);
PIN_OFFSET(HurrayGetOptions, progress, 32);
PIN_OFFSET(HurrayGetOptions, progress_context, 40);
PIN_OFFSET(HurrayGetOptions, queue, 48);
PIN_OFFSET(HurrayGetOptions, reserved, 56);

PIN_SIZE(HurrayQuantizeOptions, 32);
PIN_OFFSET(HurrayQuantizeOptions, layout, 0);
PIN_OFFSET(HurrayQuantizeOptions, axis, 4);
PIN_OFFSET(HurrayQuantizeOptions, block_size, 8);
PIN_OFFSET(HurrayQuantizeOptions, dtype, 16);
PIN_OFFSET(HurrayQuantizeOptions, scale_dtype, 17);
PIN_OFFSET(HurrayQuantizeOptions, reserved, 18);
PIN_OFFSET(HurrayQuantizeOptions, reserved1, 24);
#endif

/* Signatures of the functions added since the ABI version was last raised: a changed one fails
 * to compile (signatures never change; a new behaviour is a new function). */
#define PIN_SIGNATURE(function, type) \
  _Static_assert(_Generic(&function, type: 1, default: 0), "signature of " #function)
PIN_SIGNATURE(hurray_format_float64, size_t (*)(double, char *));
PIN_SIGNATURE(hurray_layout_info, const HurrayLayoutInfo *(*)(int));
PIN_SIGNATURE(hurray_tensor_context_data, void *(*)(const HurrayTensorContext *, uint32_t));
_Static_assert(HURRAY_FLOAT64_TEXT_SIZE == 32, "float64 text size");

/* Values that are forever. */
_Static_assert(HURRAY_C_ABI_VERSION == 4, "C ABI version");
_Static_assert(HURRAY_WIRE_VERSION_MAJOR == 1 && HURRAY_WIRE_VERSION_MINOR == 2,
               "wire protocol version (docs/spec/interchange.md)");
_Static_assert(HURRAY_DESC_SIZE == 16, "descriptor size");
_Static_assert(HURRAY_MIN_ALIGNMENT == 64, "minimum alignment");
_Static_assert(HURRAY_DEVICE_CPU == 0x00 && HURRAY_DEVICE_CUDA == 0x01 &&
                   HURRAY_DEVICE_ROCM == 0x02 && HURRAY_DEVICE_METAL == 0x03 &&
                   HURRAY_DEVICE_VULKAN == 0x04 && HURRAY_DEVICE_WEBGPU == 0x05 &&
                   HURRAY_DEVICE_HEXAGON == 0x06 && HURRAY_DEVICE_LEVEL_ZERO == 0x07 &&
                   HURRAY_DEVICE_OPENCL == 0x08,
               "named device tags (ADR-016)");
_Static_assert(HURRAY_DEVICE_RESERVED_FIRST == 0x09 && HURRAY_DEVICE_RESERVED_LAST == 0xEF &&
                   HURRAY_DEVICE_PRIVATE_FIRST == 0xF0 && HURRAY_DEVICE_PRIVATE_LAST == 0xFE &&
                   HURRAY_DEVICE_INVALID == 0xFF,
               "device tag ranges (ADR-016)");
_Static_assert(HURRAY_MEM_DEVICE == 0 && HURRAY_MEM_HOST == 1 && HURRAY_MEM_UNIFIED == 2 &&
                   HURRAY_MEM_PEER == 3,
               "memory classes");
_Static_assert(HURRAY_SYNC_READY == 0 && HURRAY_SYNC_STREAM == 1 && HURRAY_SYNC_EVENT == 2 &&
                   HURRAY_SYNC_TIMELINE == 3,
               "sync modes");
_Static_assert(HURRAY_LAYOUT_DENSE == 0 && HURRAY_LAYOUT_PER_CHANNEL == 1 &&
                   HURRAY_LAYOUT_BLOCK == 2 && HURRAY_LAYOUT_SPARSE_COO == 3 &&
                   HURRAY_LAYOUT_SPARSE_CSR == 4 && HURRAY_LAYOUT_PAGED == 5 &&
                   HURRAY_LAYOUT_COMPOSITE == 6,
               "layouts");
_Static_assert(HURRAY_LAYOUT_HAS_AXIS == 1 && HURRAY_LAYOUT_HAS_BLOCK_SIZE == 2 &&
                   HURRAY_LAYOUT_VALUES_SHAPE == 4 && HURRAY_LAYOUT_NO_PART == 0xFF,
               "layout info flags");

/* The device-runtime functions (ADR-047): HurrayDeviceQueue is opaque, so its ABI is these
 * signatures. */
PIN_SIGNATURE(hurray_device_runtime_library, const char *(*)(int));
PIN_SIGNATURE(hurray_device_runtime_load, int (*)(int, HurrayError *));
PIN_SIGNATURE(hurray_device_queue_create,
              int (*)(int, uint16_t, HurrayDeviceQueue **, HurrayError *));
PIN_SIGNATURE(hurray_device_queue_wrap,
              int (*)(int, void *, void *, HurrayDeviceQueue **, HurrayError *));
PIN_SIGNATURE(hurray_device_queue_for_buffer,
              int (*)(const HurrayBuffer *, HurrayDeviceQueue **, HurrayError *));
PIN_SIGNATURE(hurray_device_queue_destroy, void (*)(HurrayDeviceQueue *));
PIN_SIGNATURE(hurray_device_queue_tag, int (*)(const HurrayDeviceQueue *));
PIN_SIGNATURE(hurray_device_queue_device_id, uint16_t (*)(const HurrayDeviceQueue *));
PIN_SIGNATURE(hurray_device_queue_native, void *(*)(const HurrayDeviceQueue *));
PIN_SIGNATURE(hurray_device_queue_native_context, void *(*)(const HurrayDeviceQueue *));
PIN_SIGNATURE(hurray_device_alloc,
              int (*)(HurrayDeviceQueue *, uint64_t, uint32_t, HurrayBuffer **, HurrayError *));
PIN_SIGNATURE(hurray_device_copy_to_host, int (*)(HurrayDeviceQueue *, const HurrayBuffer *,
                                                  uint64_t, void *, uint64_t, HurrayError *));
PIN_SIGNATURE(hurray_device_copy_from_host, int (*)(HurrayDeviceQueue *, HurrayBuffer *, uint64_t,
                                                    const void *, uint64_t, HurrayError *));
PIN_SIGNATURE(hurray_device_wait,
              int (*)(HurrayDeviceQueue *, const HurrayBuffer *, HurrayError *));
_Static_assert(HURRAY_ALLOC_ZERO == 1, "allocation flags");

static void runtime_versions_match_the_header(void **state) {
  (void)state;
  assert_int_equal(hurray_c_abi_version(), HURRAY_C_ABI_VERSION);
  assert_int_equal(hurray_version(), HURRAY_VERSION);
  assert_string_equal(hurray_version_string(), HURRAY_VERSION_STRING);
}

static void status_values_are_forever(void **state) {
  (void)state;
  static const struct {
    int value;
    const char *name;
  } pinned[] = {
      {0, "HURRAY_OK"},        {1, "HURRAY_EINVAL"},        {2, "HURRAY_ENOMEM"},
      {3, "HURRAY_EOVERFLOW"}, {4, "HURRAY_ELIMIT"},        {5, "HURRAY_EDTYPE"},
      {6, "HURRAY_EDEVICE"},   {7, "HURRAY_EMEMCLASS"},     {8, "HURRAY_ESYNC"},
      {9, "HURRAY_EALIGN"},    {10, "HURRAY_ELAYOUT"},      {11, "HURRAY_EBOUNDS"},
      {12, "HURRAY_EABI"},     {13, "HURRAY_EUNSUPPORTED"}, {14, "HURRAY_EFORMAT"},
      {15, "HURRAY_EIO"},      {16, "HURRAY_ESTATE"},       {17, "HURRAY_ECHECKSUM"},
      {18, "HURRAY_EPROTOCOL"}, {19, "HURRAY_EAUTH"},       {20, "HURRAY_EDENIED"},
      {21, "HURRAY_ETIMEOUT"}, {22, "HURRAY_ECONNECTION"},
  };
  for (size_t i = 0; i < sizeof pinned / sizeof pinned[0]; i++) {
    assert_string_equal(hurray_status_name(pinned[i].value), pinned[i].name);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(runtime_versions_match_the_header),
      cmocka_unit_test(status_values_are_forever),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
