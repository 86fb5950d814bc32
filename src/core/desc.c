/* desc.c -- the buffer descriptor: its rules and its fixed 16-byte little-endian encoding
 * (docs/spec/buffer-protocol.md; the byte table is in hurray.h). Decoding takes untrusted
 * bytes: every field is checked before the descriptor is handed out. */
#include <inttypes.h>

#include "internal.h"

/* Byte 3 of the encoding holds log2(alignment). */
enum { MIN_ALIGN_EXPONENT = 6, MAX_ALIGN_EXPONENT = 30 };
_Static_assert((1u << MIN_ALIGN_EXPONENT) == HURRAY_MIN_ALIGNMENT, "minimum alignment exponent");
_Static_assert((1u << MAX_ALIGN_EXPONENT) == HURRAY_MAX_ALIGNMENT, "maximum alignment exponent");

/* CPU memory is the host's own and always ready: only (DEVICE, READY) describes it. Every other
 * device may use every memory class and sync mode. */
static int check_memory_class(const HurrayBufferDesc *desc, HurrayError *error) {
  const char *name = hurray_memory_class_name(desc->memory_class);
  if (name == NULL) {
    return hurray__fail(error, HURRAY_EMEMCLASS, "memory class %u is unknown", desc->memory_class);
  }
  if (desc->device_tag == HURRAY_DEVICE_CPU && desc->memory_class != HURRAY_MEM_DEVICE) {
    return hurray__fail(error, HURRAY_EMEMCLASS, "memory class %s is meaningless for device cpu",
                        name);
  }
  return HURRAY_OK;
}

static int check_sync_mode(const HurrayBufferDesc *desc, HurrayError *error) {
  const char *name = hurray_sync_mode_name(desc->sync_mode);
  if (name == NULL) {
    return hurray__fail(error, HURRAY_ESYNC, "sync mode %u is unknown", desc->sync_mode);
  }
  if (desc->device_tag == HURRAY_DEVICE_CPU && desc->sync_mode != HURRAY_SYNC_READY) {
    return hurray__fail(error, HURRAY_ESYNC,
                        "sync mode %s is meaningless for device cpu (cpu memory is always ready)",
                        name);
  }
  return HURRAY_OK;
}

static int check_alignment(uint32_t alignment, HurrayError *error) {
  bool power_of_two = alignment != 0 && (alignment & (alignment - 1)) == 0;
  if (power_of_two && alignment >= HURRAY_MIN_ALIGNMENT && alignment <= HURRAY_MAX_ALIGNMENT) {
    return HURRAY_OK;
  }
  return hurray__fail(error, HURRAY_EALIGN,
                      "alignment %" PRIu32 " is not a power of two in [64, 2^30]", alignment);
}

static int check_peer_device_id(const HurrayBufferDesc *desc, HurrayError *error) {
  if (desc->memory_class == HURRAY_MEM_PEER || desc->peer_device_id == 0) return HURRAY_OK;
  return hurray__fail(error, HURRAY_EINVAL,
                      "peer_device_id %u is set but memory class is %s, not peer",
                      desc->peer_device_id, hurray_memory_class_name(desc->memory_class));
}

static int check_reserved(const HurrayBufferDesc *desc, HurrayError *error) {
  for (size_t i = 0; i < sizeof desc->reserved; i++) {
    if (desc->reserved[i] != 0) {
      return hurray__fail(error, HURRAY_EINVAL, "reserved byte %zu is 0x%02X, not zero", i,
                          desc->reserved[i]);
    }
  }
  return HURRAY_OK;
}

int hurray_desc_validate(const HurrayBufferDesc *desc, HurrayError *error) {
  if (desc == NULL) return hurray__fail(error, HURRAY_EINVAL, "buffer descriptor is NULL");
  int status = hurray_device_check(desc->device_tag, error);
  if (status == HURRAY_OK) status = check_memory_class(desc, error);
  if (status == HURRAY_OK) status = check_sync_mode(desc, error);
  if (status == HURRAY_OK) status = check_alignment(desc->alignment, error);
  if (status == HURRAY_OK) status = check_peer_device_id(desc, error);
  if (status == HURRAY_OK) status = check_reserved(desc, error);
  return status;
}

int hurray_desc_encode(const HurrayBufferDesc *desc, uint8_t out[HURRAY_DESC_SIZE],
                       HurrayError *error) {
  if (out == NULL) return hurray__fail(error, HURRAY_EINVAL, "hurray_desc_encode: out is NULL");
  int status = hurray_desc_validate(desc, error);
  if (status != HURRAY_OK) return status;
  out[0] = desc->device_tag;
  out[1] = desc->memory_class;
  out[2] = desc->sync_mode;
  out[3] = (uint8_t)__builtin_ctz(desc->alignment);
  hurray__store_le16(out + 4, desc->device_id);
  hurray__store_le16(out + 6, desc->peer_device_id);
  hurray__store_le64(out + 8, desc->byte_size);
  return HURRAY_OK;
}

int hurray_desc_decode(const uint8_t in[HURRAY_DESC_SIZE], HurrayBufferDesc *desc,
                       HurrayError *error) {
  if (in == NULL || desc == NULL) {
    return hurray__fail(error, HURRAY_EINVAL, "hurray_desc_decode: %s is NULL",
                        in == NULL ? "in" : "desc");
  }
  uint8_t exponent = in[3];
  if (exponent < MIN_ALIGN_EXPONENT || exponent > MAX_ALIGN_EXPONENT) {
    return hurray__fail(error, HURRAY_EALIGN, "alignment exponent %u is outside %d..%d", exponent,
                        MIN_ALIGN_EXPONENT, MAX_ALIGN_EXPONENT);
  }
  const HurrayBufferDesc decoded = {
      .byte_size = hurray__load_le64(in + 8),
      .alignment = 1u << exponent,
      .device_id = hurray__load_le16(in + 4),
      .peer_device_id = hurray__load_le16(in + 6),
      .device_tag = in[0],
      .memory_class = in[1],
      .sync_mode = in[2],
  };
  int status = hurray_desc_validate(&decoded, error);
  if (status == HURRAY_OK) *desc = decoded;
  return status;
}
