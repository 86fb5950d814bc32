/* test_desc.c -- the 16-byte buffer descriptor: golden bytes in both directions, every class of
 * rejected descriptor (with its status and message, and nothing written), and encodings that
 * do not depend on the host's byte order. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "hurray/hurray.h"

#define PRIVATE_TAG 0xF3

static int register_private_tag(void **state) {
  (void)state;
  return hurray_device_register_private(PRIVATE_TAG, "acme_npu", NULL);
}

static int unregister_private_tag(void **state) {
  (void)state;
  return hurray_device_unregister_private(PRIVATE_TAG, NULL);
}

static void assert_desc_equal(const HurrayBufferDesc *got, const HurrayBufferDesc *want) {
  assert_int_equal(got->byte_size, want->byte_size);
  assert_int_equal(got->alignment, want->alignment);
  assert_int_equal(got->device_id, want->device_id);
  assert_int_equal(got->peer_device_id, want->peer_device_id);
  assert_int_equal(got->device_tag, want->device_tag);
  assert_int_equal(got->memory_class, want->memory_class);
  assert_int_equal(got->sync_mode, want->sync_mode);
  assert_memory_equal(got->reserved, want->reserved, sizeof got->reserved);
}

/* ---- golden descriptors -------------------------------------------------------------------- */

static const struct {
  HurrayBufferDesc desc;
  uint8_t bytes[HURRAY_DESC_SIZE];
} kGolden[] = {
    /* 4 KiB of ordinary CPU memory, minimum alignment */
    {{.byte_size = 4096,
      .alignment = 64,
      .device_tag = HURRAY_DEVICE_CPU,
      .memory_class = HURRAY_MEM_DEVICE,
      .sync_mode = HURRAY_SYNC_READY},
     {0x00, 0x00, 0x00, 0x06, 0x00, 0x00, 0x00, 0x00,  //
      0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}},
    /* pinned host memory of CUDA device 3, ordered on a stream; every byte of byte_size differs */
    {{.byte_size = UINT64_C(0x0102030405060708),
      .alignment = 256,
      .device_id = 3,
      .device_tag = HURRAY_DEVICE_CUDA,
      .memory_class = HURRAY_MEM_HOST,
      .sync_mode = HURRAY_SYNC_STREAM},
     {0x01, 0x01, 0x01, 0x08, 0x03, 0x00, 0x00, 0x00,  //
      0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01}},
    /* 1 TiB of ROCm device 0x0304 mapped into device 0x0102, behind an event */
    {{.byte_size = UINT64_C(1) << 40,
      .alignment = 4096,
      .device_id = 0x0102,
      .peer_device_id = 0x0304,
      .device_tag = HURRAY_DEVICE_ROCM,
      .memory_class = HURRAY_MEM_PEER,
      .sync_mode = HURRAY_SYNC_EVENT},
     {0x02, 0x03, 0x02, 0x0C, 0x02, 0x01, 0x04, 0x03,  //
      0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00}},
    /* every field at its maximum: Level Zero managed memory behind a timeline, 1 GiB aligned */
    {{.byte_size = UINT64_MAX,
      .alignment = UINT32_C(1) << 30,
      .device_id = 0xFFFF,
      .device_tag = HURRAY_DEVICE_LEVEL_ZERO,
      .memory_class = HURRAY_MEM_UNIFIED,
      .sync_mode = HURRAY_SYNC_TIMELINE},
     {0x07, 0x02, 0x03, 0x1E, 0xFF, 0xFF, 0x00, 0x00,  //
      0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}},
    /* an empty OpenCL buffer aligned to 2 MiB pages */
    {{.byte_size = 0,
      .alignment = UINT32_C(1) << 21,
      .device_id = 1,
      .device_tag = HURRAY_DEVICE_OPENCL,
      .memory_class = HURRAY_MEM_DEVICE,
      .sync_mode = HURRAY_SYNC_READY},
     {0x08, 0x00, 0x00, 0x15, 0x01, 0x00, 0x00, 0x00,  //
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}},
    /* a registered private tag */
    {{.byte_size = 0x80,
      .alignment = 128,
      .device_tag = PRIVATE_TAG,
      .memory_class = HURRAY_MEM_DEVICE,
      .sync_mode = HURRAY_SYNC_EVENT},
     {0xF3, 0x00, 0x02, 0x07, 0x00, 0x00, 0x00, 0x00,  //
      0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}},
};

#define GOLDEN_COUNT (sizeof kGolden / sizeof kGolden[0])

static void golden_descriptors_encode_to_their_bytes(void **state) {
  (void)state;
  for (size_t i = 0; i < GOLDEN_COUNT; i++) {
    uint8_t bytes[HURRAY_DESC_SIZE];
    assert_int_equal(hurray_desc_validate(&kGolden[i].desc, NULL), HURRAY_OK);
    assert_int_equal(hurray_desc_encode(&kGolden[i].desc, bytes, NULL), HURRAY_OK);
    assert_memory_equal(bytes, kGolden[i].bytes, HURRAY_DESC_SIZE);
  }
}

static void golden_bytes_decode_to_their_descriptors(void **state) {
  (void)state;
  for (size_t i = 0; i < GOLDEN_COUNT; i++) {
    HurrayBufferDesc desc;
    memset(&desc, 0xEE, sizeof desc);
    assert_int_equal(hurray_desc_decode(kGolden[i].bytes, &desc, NULL), HURRAY_OK);
    assert_desc_equal(&desc, &kGolden[i].desc);
  }
}

/* Builds the encoding with shifts alone, so the expected bytes are the same on any host. */
static void encode_by_hand(const HurrayBufferDesc *desc, uint8_t out[HURRAY_DESC_SIZE]) {
  int exponent = 0;
  while ((UINT32_C(1) << exponent) != desc->alignment) exponent++;
  out[0] = desc->device_tag;
  out[1] = desc->memory_class;
  out[2] = desc->sync_mode;
  out[3] = (uint8_t)exponent;
  out[4] = (uint8_t)desc->device_id;
  out[5] = (uint8_t)(desc->device_id >> 8);
  out[6] = (uint8_t)desc->peer_device_id;
  out[7] = (uint8_t)(desc->peer_device_id >> 8);
  for (int i = 0; i < 8; i++) out[8 + i] = (uint8_t)(desc->byte_size >> (8 * i));
}

static uint64_t next_random(uint64_t *seed) {
  *seed = *seed * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
  return (*seed >> 11) ^ (*seed << 7);
}

static void encodings_do_not_depend_on_the_host_byte_order(void **state) {
  (void)state;
  uint64_t seed = 16;
  for (int round = 0; round < 10000; round++) {
    uint64_t r = next_random(&seed);
    uint8_t tag = (uint8_t)(1 + r % HURRAY_DEVICE_LAST_NAMED); /* any named tag but CPU */
    uint8_t memory_class = (uint8_t)(r >> 8 & 3);
    const HurrayBufferDesc desc = {
        .byte_size = next_random(&seed),
        .alignment = UINT32_C(1) << (6 + (r >> 12) % 25),
        .device_id = (uint16_t)(r >> 20),
        .peer_device_id = memory_class == HURRAY_MEM_PEER ? (uint16_t)(r >> 36) : 0,
        .device_tag = tag,
        .memory_class = memory_class,
        .sync_mode = (uint8_t)(r >> 52 & 3),
    };
    uint8_t want[HURRAY_DESC_SIZE], got[HURRAY_DESC_SIZE];
    encode_by_hand(&desc, want);
    assert_int_equal(hurray_desc_encode(&desc, got, NULL), HURRAY_OK);
    assert_memory_equal(got, want, HURRAY_DESC_SIZE);
    HurrayBufferDesc back;
    assert_int_equal(hurray_desc_decode(got, &back, NULL), HURRAY_OK);
    assert_desc_equal(&back, &desc);
  }
}

/* ---- rejections ---------------------------------------------------------------------------- */

/* A valid CUDA descriptor that each case below breaks in one way. */
static HurrayBufferDesc valid_desc(void) {
  return (HurrayBufferDesc){.byte_size = 1024,
                            .alignment = 64,
                            .device_id = 1,
                            .device_tag = HURRAY_DEVICE_CUDA,
                            .memory_class = HURRAY_MEM_DEVICE,
                            .sync_mode = HURRAY_SYNC_STREAM};
}

static void assert_rejected(const HurrayBufferDesc *desc, int code, const char *message) {
  HurrayError error = {0};
  assert_int_equal(hurray_desc_validate(desc, &error), code);
  assert_int_equal(error.code, code);
  assert_string_equal(error.message, message);

  /* encode refuses the same descriptor with the same error, writing nothing */
  uint8_t bytes[HURRAY_DESC_SIZE];
  memset(bytes, 0xEE, sizeof bytes);
  HurrayError encode_error = {0};
  assert_int_equal(hurray_desc_encode(desc, bytes, &encode_error), code);
  assert_string_equal(encode_error.message, message);
  for (size_t i = 0; i < sizeof bytes; i++) assert_int_equal(bytes[i], 0xEE);
}

static void rejected_device_tags(void **state) {
  (void)state;
  HurrayBufferDesc desc = valid_desc();
  desc.device_tag = 0x09;
  assert_rejected(&desc, HURRAY_EDEVICE,
                  "device tag 0x09 is reserved for a future version of the specification");
  desc.device_tag = 0xEF;
  assert_rejected(&desc, HURRAY_EDEVICE,
                  "device tag 0xEF is reserved for a future version of the specification");
  desc.device_tag = 0xF4; /* private, not registered */
  assert_rejected(&desc, HURRAY_EDEVICE,
                  "device tag 0xF4 is implementation-private and not registered");
  desc.device_tag = 0xFF;
  assert_rejected(&desc, HURRAY_EDEVICE, "device tag 0xFF is permanently invalid");
  desc.device_tag = PRIVATE_TAG; /* private and registered */
  assert_int_equal(hurray_desc_validate(&desc, NULL), HURRAY_OK);
}

static void rejected_memory_classes(void **state) {
  (void)state;
  HurrayBufferDesc desc = valid_desc();
  desc.memory_class = 4;
  assert_rejected(&desc, HURRAY_EMEMCLASS, "memory class 4 is unknown");
  desc.memory_class = 0xFF;
  assert_rejected(&desc, HURRAY_EMEMCLASS, "memory class 255 is unknown");
  desc = valid_desc();
  desc.device_tag = HURRAY_DEVICE_CPU;
  desc.sync_mode = HURRAY_SYNC_READY;
  desc.memory_class = HURRAY_MEM_HOST;
  assert_rejected(&desc, HURRAY_EMEMCLASS, "memory class host is meaningless for device cpu");
  desc.memory_class = HURRAY_MEM_UNIFIED;
  assert_rejected(&desc, HURRAY_EMEMCLASS, "memory class unified is meaningless for device cpu");
  desc.memory_class = HURRAY_MEM_PEER;
  assert_rejected(&desc, HURRAY_EMEMCLASS, "memory class peer is meaningless for device cpu");
}

static void rejected_sync_modes(void **state) {
  (void)state;
  HurrayBufferDesc desc = valid_desc();
  desc.sync_mode = 4;
  assert_rejected(&desc, HURRAY_ESYNC, "sync mode 4 is unknown");
  desc = valid_desc();
  desc.device_tag = HURRAY_DEVICE_CPU;
  assert_rejected(&desc, HURRAY_ESYNC,
                  "sync mode stream is meaningless for device cpu (cpu memory is always ready)");
  desc.sync_mode = HURRAY_SYNC_TIMELINE;
  assert_rejected(&desc, HURRAY_ESYNC,
                  "sync mode timeline is meaningless for device cpu (cpu memory is always ready)");
}

static void rejected_alignments(void **state) {
  (void)state;
  static const struct {
    uint32_t alignment;
    const char *message;
  } cases[] = {
      {0, "alignment 0 is not a power of two in [64, 2^30]"},
      {1, "alignment 1 is not a power of two in [64, 2^30]"},
      {32, "alignment 32 is not a power of two in [64, 2^30]"},
      {63, "alignment 63 is not a power of two in [64, 2^30]"},
      {96, "alignment 96 is not a power of two in [64, 2^30]"},
      {(UINT32_C(1) << 30) + 64, "alignment 1073741888 is not a power of two in [64, 2^30]"},
      {UINT32_C(1) << 31, "alignment 2147483648 is not a power of two in [64, 2^30]"},
      {UINT32_MAX, "alignment 4294967295 is not a power of two in [64, 2^30]"},
  };
  HurrayBufferDesc desc = valid_desc();
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    desc.alignment = cases[i].alignment;
    assert_rejected(&desc, HURRAY_EALIGN, cases[i].message);
  }
  for (uint32_t alignment = 64; alignment != 0 && alignment <= (UINT32_C(1) << 30);
       alignment <<= 1) {
    desc.alignment = alignment;
    assert_int_equal(hurray_desc_validate(&desc, NULL), HURRAY_OK);
  }
}

static void rejected_peer_device_id(void **state) {
  (void)state;
  HurrayBufferDesc desc = valid_desc();
  desc.peer_device_id = 2;
  assert_rejected(&desc, HURRAY_EINVAL,
                  "peer_device_id 2 is set but memory class is device, not peer");
  desc.memory_class = HURRAY_MEM_UNIFIED;
  assert_rejected(&desc, HURRAY_EINVAL,
                  "peer_device_id 2 is set but memory class is unified, not peer");
  desc.memory_class = HURRAY_MEM_PEER;
  assert_int_equal(hurray_desc_validate(&desc, NULL), HURRAY_OK);
}

static void rejected_reserved_bytes(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof valid_desc().reserved; i++) {
    HurrayBufferDesc desc = valid_desc();
    desc.reserved[i] = 0x80;
    char message[64];
    snprintf(message, sizeof message, "reserved byte %zu is 0x80, not zero", i);
    assert_rejected(&desc, HURRAY_EINVAL, message);
  }
}

static void null_arguments(void **state) {
  (void)state;
  HurrayError error = {0};
  const HurrayBufferDesc desc = valid_desc();
  uint8_t bytes[HURRAY_DESC_SIZE] = {0};
  HurrayBufferDesc out;
  assert_int_equal(hurray_desc_validate(NULL, &error), HURRAY_EINVAL);
  assert_string_equal(error.message, "buffer descriptor is NULL");
  assert_int_equal(hurray_desc_encode(NULL, bytes, &error), HURRAY_EINVAL);
  assert_int_equal(hurray_desc_encode(&desc, NULL, &error), HURRAY_EINVAL);
  assert_int_equal(hurray_desc_decode(NULL, &out, &error), HURRAY_EINVAL);
  assert_int_equal(hurray_desc_decode(bytes, NULL, &error), HURRAY_EINVAL);
}

/* ---- rejected bytes ------------------------------------------------------------------------ */

/* The bytes of valid_desc(), which each case below breaks in one place. */
static const uint8_t kValidBytes[HURRAY_DESC_SIZE] = {
    0x01, 0x00, 0x01, 0x06, 0x01, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};

static void valid_bytes_are_valid_desc(void **state) {
  (void)state;
  const HurrayBufferDesc want = valid_desc();
  HurrayBufferDesc got;
  assert_int_equal(hurray_desc_decode(kValidBytes, &got, NULL), HURRAY_OK);
  assert_desc_equal(&got, &want);
}

static void rejected_bytes(void **state) {
  (void)state;
  static const struct {
    size_t offset;
    uint8_t value;
    int code;
    const char *message;
  } cases[] = {
      {0, 0x09, HURRAY_EDEVICE,
       "device tag 0x09 is reserved for a future version of the specification"},
      {0, 0xF4, HURRAY_EDEVICE, "device tag 0xF4 is implementation-private and not registered"},
      {0, 0xFF, HURRAY_EDEVICE, "device tag 0xFF is permanently invalid"},
      {0, 0x00, HURRAY_ESYNC,
       "sync mode stream is meaningless for device cpu (cpu memory is always ready)"},
      {1, 0x04, HURRAY_EMEMCLASS, "memory class 4 is unknown"},
      {2, 0x04, HURRAY_ESYNC, "sync mode 4 is unknown"},
      {3, 0, HURRAY_EALIGN, "alignment exponent 0 is outside 6..30"},
      {3, 5, HURRAY_EALIGN, "alignment exponent 5 is outside 6..30"},
      {3, 31, HURRAY_EALIGN, "alignment exponent 31 is outside 6..30"},
      {3, 32, HURRAY_EALIGN, "alignment exponent 32 is outside 6..30"},
      {3, 0xFF, HURRAY_EALIGN, "alignment exponent 255 is outside 6..30"},
      {6, 0x01, HURRAY_EINVAL, "peer_device_id 1 is set but memory class is device, not peer"},
      {7, 0x01, HURRAY_EINVAL, "peer_device_id 256 is set but memory class is device, not peer"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint8_t bytes[HURRAY_DESC_SIZE];
    memcpy(bytes, kValidBytes, sizeof bytes);
    bytes[cases[i].offset] = cases[i].value;
    HurrayBufferDesc desc;
    memset(&desc, 0xEE, sizeof desc);
    HurrayError error = {0};
    assert_int_equal(hurray_desc_decode(bytes, &desc, &error), cases[i].code);
    assert_int_equal(error.code, cases[i].code);
    assert_string_equal(error.message, cases[i].message);
    for (size_t k = 0; k < sizeof desc; k++) assert_int_equal(((uint8_t *)&desc)[k], 0xEE);
  }
}

static void the_exponent_is_checked_first(void **state) {
  (void)state;
  const uint8_t bytes[HURRAY_DESC_SIZE] = {0xFF, 0x09, 0x09, 0x1F};
  HurrayError error = {0};
  HurrayBufferDesc desc;
  assert_int_equal(hurray_desc_decode(bytes, &desc, &error), HURRAY_EALIGN);
  assert_string_equal(error.message, "alignment exponent 31 is outside 6..30");
}

static void every_tag_byte_decodes_as_device_check_says(void **state) {
  (void)state;
  for (int tag = 0; tag <= 0xFF; tag++) {
    uint8_t bytes[HURRAY_DESC_SIZE];
    memcpy(bytes, kValidBytes, sizeof bytes);
    bytes[0] = (uint8_t)tag;
    bytes[2] = HURRAY_SYNC_READY;
    HurrayBufferDesc desc;
    int want = hurray_device_check(tag, NULL);
    assert_int_equal(hurray_desc_decode(bytes, &desc, NULL), want);
    if (want == HURRAY_OK) assert_int_equal(desc.device_tag, tag);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(golden_descriptors_encode_to_their_bytes),
      cmocka_unit_test(golden_bytes_decode_to_their_descriptors),
      cmocka_unit_test(encodings_do_not_depend_on_the_host_byte_order),
      cmocka_unit_test(rejected_device_tags),
      cmocka_unit_test(rejected_memory_classes),
      cmocka_unit_test(rejected_sync_modes),
      cmocka_unit_test(rejected_alignments),
      cmocka_unit_test(rejected_peer_device_id),
      cmocka_unit_test(rejected_reserved_bytes),
      cmocka_unit_test(null_arguments),
      cmocka_unit_test(valid_bytes_are_valid_desc),
      cmocka_unit_test(rejected_bytes),
      cmocka_unit_test(the_exponent_is_checked_first),
      cmocka_unit_test(every_tag_byte_decodes_as_device_check_says),
  };
  return cmocka_run_group_tests(tests, register_private_tag, unregister_private_tag);
}
