/* test_device.c -- device tags (ADR-016), the private-tag registry (including concurrent use),
 * memory class and sync mode names, and the Hurray <-> DLPack device mapping in full. */
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "hurray/hurray.h"

/* Asserts that `status` is `code` and that `error` carries exactly `message`. */
#define assert_failure(status, error, want_code, want_message) \
  do {                                                         \
    assert_int_equal((status), (want_code));                   \
    assert_int_equal((error).code, (want_code));               \
    assert_string_equal((error).message, (want_message));      \
  } while (0)

/* ---- tags ---------------------------------------------------------------------------------- */

static void named_tags_have_names_and_pass(void **state) {
  (void)state;
  static const char *const names[] = {"cpu",    "cuda",    "rocm",       "metal", "vulkan",
                                      "webgpu", "hexagon", "level_zero", "opencl"};
  static const int tags[] = {HURRAY_DEVICE_CPU,     HURRAY_DEVICE_CUDA,       HURRAY_DEVICE_ROCM,
                             HURRAY_DEVICE_METAL,   HURRAY_DEVICE_VULKAN,     HURRAY_DEVICE_WEBGPU,
                             HURRAY_DEVICE_HEXAGON, HURRAY_DEVICE_LEVEL_ZERO, HURRAY_DEVICE_OPENCL};
  for (int i = 0; i < 9; i++) {
    assert_int_equal(tags[i], i); /* tag values are forever */
    assert_string_equal(hurray_device_name(tags[i]), names[i]);
    assert_int_equal(hurray_device_check(tags[i], NULL), HURRAY_OK);
  }
}

static void reserved_tags_are_rejected(void **state) {
  (void)state;
  static const struct {
    int tag;
    const char *message;
  } cases[] = {
      {0x09, "device tag 0x09 is reserved for a future version of the specification"},
      {0x42, "device tag 0x42 is reserved for a future version of the specification"},
      {0xEF, "device tag 0xEF is reserved for a future version of the specification"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    HurrayError error = {0};
    assert_failure(hurray_device_check(cases[i].tag, &error), error, HURRAY_EDEVICE,
                   cases[i].message);
    assert_null(hurray_device_name(cases[i].tag));
  }
}

static void unregistered_private_tags_are_rejected(void **state) {
  (void)state;
  static const struct {
    int tag;
    const char *message;
  } cases[] = {
      {0xF0, "device tag 0xF0 is implementation-private and not registered"},
      {0xF3, "device tag 0xF3 is implementation-private and not registered"},
      {0xFE, "device tag 0xFE is implementation-private and not registered"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    HurrayError error = {0};
    assert_failure(hurray_device_check(cases[i].tag, &error), error, HURRAY_EDEVICE,
                   cases[i].message);
    assert_null(hurray_device_name(cases[i].tag));
  }
}

static void invalid_tags_are_rejected(void **state) {
  (void)state;
  static const struct {
    int tag;
    const char *message;
  } cases[] = {
      {0xFF, "device tag 0xFF is permanently invalid"},
      {0x100, "device tag 256 is permanently invalid"},
      {-1, "device tag -1 is permanently invalid"},
      {INT_MIN, "device tag -2147483648 is permanently invalid"},
      {INT_MAX, "device tag 2147483647 is permanently invalid"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    HurrayError error = {0};
    assert_failure(hurray_device_check(cases[i].tag, &error), error, HURRAY_EDEVICE,
                   cases[i].message);
    assert_null(hurray_device_name(cases[i].tag));
  }
}

/* ---- the private registry ------------------------------------------------------------------ */

static void private_tag_lifecycle(void **state) {
  (void)state;
  HurrayError error = {0};
  assert_int_equal(hurray_device_register_private(0xF3, "acme_npu2", &error), HURRAY_OK);
  assert_int_equal(hurray_device_check(0xF3, &error), HURRAY_OK);
  const char *name = hurray_device_name(0xF3);
  assert_string_equal(name, "acme_npu2");

  /* the same name again is a no-op; another name is refused and changes nothing */
  assert_int_equal(hurray_device_register_private(0xF3, "acme_npu2", &error), HURRAY_OK);
  assert_failure(hurray_device_register_private(0xF3, "other", &error), error, HURRAY_ESTATE,
                 "device tag 0xF3 is already registered as \"acme_npu2\", not \"other\"");
  assert_ptr_equal(hurray_device_name(0xF3), name);
  assert_string_equal(name, "acme_npu2");

  assert_int_equal(hurray_device_unregister_private(0xF3, &error), HURRAY_OK);
  assert_null(hurray_device_name(0xF3));
  assert_failure(hurray_device_check(0xF3, &error), error, HURRAY_EDEVICE,
                 "device tag 0xF3 is implementation-private and not registered");
  assert_failure(hurray_device_unregister_private(0xF3, &error), error, HURRAY_ESTATE,
                 "device tag 0xF3 is not registered");

  /* once forgotten, the tag may take another name */
  assert_int_equal(hurray_device_register_private(0xF3, "other", &error), HURRAY_OK);
  assert_string_equal(hurray_device_name(0xF3), "other");
  assert_int_equal(hurray_device_unregister_private(0xF3, &error), HURRAY_OK);
}

static void every_private_tag_can_be_registered_at_once(void **state) {
  (void)state;
  char names[15][8];
  for (int tag = HURRAY_DEVICE_PRIVATE_FIRST; tag <= HURRAY_DEVICE_PRIVATE_LAST; tag++) {
    char *name = names[tag - HURRAY_DEVICE_PRIVATE_FIRST];
    snprintf(name, sizeof names[0], "dev_%02x", (unsigned)tag);
    assert_int_equal(hurray_device_register_private(tag, name, NULL), HURRAY_OK);
  }
  for (int tag = HURRAY_DEVICE_PRIVATE_FIRST; tag <= HURRAY_DEVICE_PRIVATE_LAST; tag++) {
    assert_string_equal(hurray_device_name(tag), names[tag - HURRAY_DEVICE_PRIVATE_FIRST]);
    assert_int_equal(hurray_device_unregister_private(tag, NULL), HURRAY_OK);
  }
}

static void only_private_tags_can_be_registered(void **state) {
  (void)state;
  static const struct {
    int tag;
    const char *message;
  } cases[] = {
      {0x00, "device tag 0x00 is not implementation-private (0xF0..0xFE)"},
      {0x09, "device tag 0x09 is not implementation-private (0xF0..0xFE)"},
      {0xEF, "device tag 0xEF is not implementation-private (0xF0..0xFE)"},
      {0xFF, "device tag 0xFF is not implementation-private (0xF0..0xFE)"},
      {0x1F0, "device tag 496 is not implementation-private (0xF0..0xFE)"},
      {-16, "device tag -16 is not implementation-private (0xF0..0xFE)"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    HurrayError error = {0};
    assert_failure(hurray_device_register_private(cases[i].tag, "x", &error), error, HURRAY_EINVAL,
                   cases[i].message);
    assert_failure(hurray_device_unregister_private(cases[i].tag, &error), error, HURRAY_EINVAL,
                   cases[i].message);
  }
}

static void private_names_are_checked(void **state) {
  (void)state;
  static const struct {
    const char *name;
    const char *message;
  } cases[] = {
      {NULL, "private device name is NULL"},
      {"", "private device name is empty"},
      {"Acme", "private device name has byte 0x41 at offset 0; only [a-z0-9_] are allowed"},
      {"acme npu", "private device name has byte 0x20 at offset 4; only [a-z0-9_] are allowed"},
      {"acme-npu", "private device name has byte 0x2D at offset 4; only [a-z0-9_] are allowed"},
      {"npu\xc3\xa9", "private device name has byte 0xC3 at offset 3; only [a-z0-9_] are allowed"},
      {"abcdefghijklmnopqrstuvwxyz_01234",
       "private device name \"abcdefghijklmnopqrstuvwxyz_0123...\" is longer than 31 bytes"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    HurrayError error = {0};
    assert_failure(hurray_device_register_private(0xF5, cases[i].name, &error), error,
                   HURRAY_EINVAL, cases[i].message);
    assert_null(hurray_device_name(0xF5));
  }
  /* 31 bytes, every allowed class of byte */
  const char *longest = "abcdefghijklmnopqrstuvwxyz_0129";
  assert_int_equal(strlen(longest), 31);
  assert_int_equal(hurray_device_register_private(0xF5, longest, NULL), HURRAY_OK);
  assert_string_equal(hurray_device_name(0xF5), longest);
  assert_int_equal(hurray_device_unregister_private(0xF5, NULL), HURRAY_OK);
}

enum { THREADS = 8, ROUNDS = 2000 };

/* Each thread cycles its own tag through register/check/name/unregister while all of them
 * re-register one shared tag under the same name; returns the number of surprises. */
static void *registry_worker(void *arg) {
  int tag = HURRAY_DEVICE_PRIVATE_FIRST + (int)(intptr_t)arg;
  char name[16];
  snprintf(name, sizeof name, "w%d", tag);
  intptr_t surprises = 0;
  for (int round = 0; round < ROUNDS; round++) {
    surprises += hurray_device_register_private(tag, name, NULL) != HURRAY_OK;
    surprises += hurray_device_check(tag, NULL) != HURRAY_OK;
    const char *got = hurray_device_name(tag);
    surprises += got == NULL || strcmp(got, name) != 0;
    surprises += hurray_device_unregister_private(tag, NULL) != HURRAY_OK;
    surprises +=
        hurray_device_register_private(HURRAY_DEVICE_PRIVATE_LAST, "shared", NULL) != HURRAY_OK;
  }
  return (void *)surprises;
}

static void registry_is_thread_safe(void **state) {
  (void)state;
  pthread_t threads[THREADS];
  for (intptr_t i = 0; i < THREADS; i++) {
    assert_int_equal(pthread_create(&threads[i], NULL, registry_worker, (void *)i), 0);
  }
  for (int i = 0; i < THREADS; i++) {
    void *surprises = NULL;
    assert_int_equal(pthread_join(threads[i], &surprises), 0);
    assert_int_equal((intptr_t)surprises, 0);
  }
  assert_string_equal(hurray_device_name(HURRAY_DEVICE_PRIVATE_LAST), "shared");
  assert_int_equal(hurray_device_unregister_private(HURRAY_DEVICE_PRIVATE_LAST, NULL), HURRAY_OK);
  for (int tag = HURRAY_DEVICE_PRIVATE_FIRST; tag < HURRAY_DEVICE_PRIVATE_FIRST + THREADS; tag++) {
    assert_null(hurray_device_name(tag));
  }
}

/* ---- memory classes and sync modes --------------------------------------------------------- */

static void memory_class_and_sync_mode_names(void **state) {
  (void)state;
  assert_string_equal(hurray_memory_class_name(HURRAY_MEM_DEVICE), "device");
  assert_string_equal(hurray_memory_class_name(HURRAY_MEM_HOST), "host");
  assert_string_equal(hurray_memory_class_name(HURRAY_MEM_UNIFIED), "unified");
  assert_string_equal(hurray_memory_class_name(HURRAY_MEM_PEER), "peer");
  assert_null(hurray_memory_class_name(4));
  assert_null(hurray_memory_class_name(-1));
  assert_null(hurray_memory_class_name(INT_MAX));
  assert_string_equal(hurray_sync_mode_name(HURRAY_SYNC_READY), "ready");
  assert_string_equal(hurray_sync_mode_name(HURRAY_SYNC_STREAM), "stream");
  assert_string_equal(hurray_sync_mode_name(HURRAY_SYNC_EVENT), "event");
  assert_string_equal(hurray_sync_mode_name(HURRAY_SYNC_TIMELINE), "timeline");
  assert_null(hurray_sync_mode_name(4));
  assert_null(hurray_sync_mode_name(-1));
  assert_null(hurray_sync_mode_name(INT_MIN));
}

/* ---- DLPack -------------------------------------------------------------------------------- */

/* Every (named tag, memory class) pair: its DLDeviceType, or 0 and the reason DLPack has none
 * (docs/impl/python-bindings.md). */
static const struct {
  int tag, memory_class;
  int32_t dl_device_type;
  const char *message;
} kToDLPack[] = {
    {HURRAY_DEVICE_CPU, HURRAY_MEM_DEVICE, 1, NULL},
    {HURRAY_DEVICE_CPU, HURRAY_MEM_HOST, 0,
     "DLPack has no device type for host memory of device cpu"},
    {HURRAY_DEVICE_CPU, HURRAY_MEM_UNIFIED, 0,
     "DLPack has no device type for unified memory of device cpu"},
    {HURRAY_DEVICE_CUDA, HURRAY_MEM_DEVICE, 2, NULL},
    {HURRAY_DEVICE_CUDA, HURRAY_MEM_HOST, 3, NULL},
    {HURRAY_DEVICE_CUDA, HURRAY_MEM_UNIFIED, 13, NULL},
    {HURRAY_DEVICE_ROCM, HURRAY_MEM_DEVICE, 10, NULL},
    {HURRAY_DEVICE_ROCM, HURRAY_MEM_HOST, 11, NULL},
    {HURRAY_DEVICE_ROCM, HURRAY_MEM_UNIFIED, 0,
     "DLPack has no ROCm managed memory (kDLROCMManaged does not exist)"},
    {HURRAY_DEVICE_METAL, HURRAY_MEM_DEVICE, 8, NULL},
    {HURRAY_DEVICE_METAL, HURRAY_MEM_HOST, 8, NULL}, /* one DLPack type per device */
    {HURRAY_DEVICE_METAL, HURRAY_MEM_UNIFIED, 8, NULL}, /* one DLPack type per device */
    {HURRAY_DEVICE_VULKAN, HURRAY_MEM_DEVICE, 7, NULL},
    {HURRAY_DEVICE_VULKAN, HURRAY_MEM_HOST, 7, NULL}, /* one DLPack type per device */
    {HURRAY_DEVICE_VULKAN, HURRAY_MEM_UNIFIED, 7, NULL}, /* one DLPack type per device */
    {HURRAY_DEVICE_WEBGPU, HURRAY_MEM_DEVICE, 15, NULL},
    {HURRAY_DEVICE_WEBGPU, HURRAY_MEM_HOST, 15, NULL}, /* one DLPack type per device */
    {HURRAY_DEVICE_WEBGPU, HURRAY_MEM_UNIFIED, 15, NULL}, /* one DLPack type per device */
    {HURRAY_DEVICE_HEXAGON, HURRAY_MEM_DEVICE, 16, NULL},
    {HURRAY_DEVICE_HEXAGON, HURRAY_MEM_HOST, 16, NULL}, /* one DLPack type per device */
    {HURRAY_DEVICE_HEXAGON, HURRAY_MEM_UNIFIED, 16, NULL}, /* one DLPack type per device */
    {HURRAY_DEVICE_LEVEL_ZERO, HURRAY_MEM_DEVICE, 14, NULL},
    {HURRAY_DEVICE_LEVEL_ZERO, HURRAY_MEM_HOST, 14, NULL}, /* one DLPack type per device */
    {HURRAY_DEVICE_LEVEL_ZERO, HURRAY_MEM_UNIFIED, 14, NULL}, /* one DLPack type per device */
    {HURRAY_DEVICE_OPENCL, HURRAY_MEM_DEVICE, 4, NULL},
    {HURRAY_DEVICE_OPENCL, HURRAY_MEM_HOST, 4, NULL}, /* one DLPack type per device */
    {HURRAY_DEVICE_OPENCL, HURRAY_MEM_UNIFIED, 4, NULL}, /* one DLPack type per device */
};

static void named_devices_map_to_dlpack(void **state) {
  (void)state;
  assert_int_equal(sizeof kToDLPack / sizeof kToDLPack[0], 9 * 3);
  for (size_t i = 0; i < sizeof kToDLPack / sizeof kToDLPack[0]; i++) {
    HurrayError error = {0};
    int32_t dl = -7;
    int status = hurray_device_to_dlpack(kToDLPack[i].tag, kToDLPack[i].memory_class, &dl, &error);
    if (kToDLPack[i].message == NULL) {
      assert_int_equal(status, HURRAY_OK);
      assert_int_equal(dl, kToDLPack[i].dl_device_type);
    } else {
      assert_failure(status, error, HURRAY_EUNSUPPORTED, kToDLPack[i].message);
      assert_int_equal(dl, -7);
    }
  }
}

static void peer_memory_has_no_dlpack_form(void **state) {
  (void)state;
  for (int tag = HURRAY_DEVICE_CPU; tag <= HURRAY_DEVICE_LAST_NAMED; tag++) {
    HurrayError error = {0};
    int32_t dl = -7;
    assert_failure(hurray_device_to_dlpack(tag, HURRAY_MEM_PEER, &dl, &error), error,
                   HURRAY_EUNSUPPORTED, "DLPack has no representation for peer-mapped memory");
    assert_int_equal(dl, -7);
  }
}

static void other_tags_have_no_dlpack_form(void **state) {
  (void)state;
  HurrayError error = {0};
  int32_t dl = -7;
  assert_failure(hurray_device_to_dlpack(0xF3, HURRAY_MEM_DEVICE, &dl, &error), error,
                 HURRAY_EUNSUPPORTED,
                 "device tag 0xF3 is implementation-private; DLPack has no form for it");
  assert_int_equal(hurray_device_register_private(0xF3, "acme", NULL), HURRAY_OK);
  assert_failure(hurray_device_to_dlpack(0xF3, HURRAY_MEM_DEVICE, &dl, &error), error,
                 HURRAY_EUNSUPPORTED,
                 "device tag 0xF3 is implementation-private; DLPack has no form for it");
  assert_int_equal(hurray_device_unregister_private(0xF3, NULL), HURRAY_OK);
  assert_failure(hurray_device_to_dlpack(0x09, HURRAY_MEM_DEVICE, &dl, &error), error,
                 HURRAY_EDEVICE,
                 "device tag 0x09 is reserved for a future version of the specification");
  assert_failure(hurray_device_to_dlpack(0xFF, HURRAY_MEM_DEVICE, &dl, &error), error,
                 HURRAY_EDEVICE, "device tag 0xFF is permanently invalid");
  assert_failure(hurray_device_to_dlpack(HURRAY_DEVICE_CUDA, 4, &dl, &error), error,
                 HURRAY_EMEMCLASS, "memory class 4 is unknown");
  assert_failure(hurray_device_to_dlpack(HURRAY_DEVICE_CUDA, -1, &dl, &error), error,
                 HURRAY_EMEMCLASS, "memory class -1 is unknown");
  assert_int_equal(dl, -7);
  assert_int_equal(hurray_device_to_dlpack(HURRAY_DEVICE_CPU, HURRAY_MEM_DEVICE, NULL, &error),
                   HURRAY_EINVAL);
}

static void dlpack_devices_map_back(void **state) {
  (void)state;
  /* every pair with a DLPack form comes back with its tag; the memory class comes back unless
   * DLPack folded it into the device's one type (tags 0x03..0x08), where it returns as DEVICE */
  size_t mapped = 0, folded = 0;
  for (size_t i = 0; i < sizeof kToDLPack / sizeof kToDLPack[0]; i++) {
    if (kToDLPack[i].message != NULL) continue;
    uint8_t tag = 0xAB, memory_class = 0xAB;
    assert_int_equal(
        hurray_device_from_dlpack(kToDLPack[i].dl_device_type, &tag, &memory_class, NULL),
        HURRAY_OK);
    assert_int_equal(tag, kToDLPack[i].tag);
    if (tag >= HURRAY_DEVICE_METAL && kToDLPack[i].memory_class != HURRAY_MEM_DEVICE) {
      assert_int_equal(memory_class, HURRAY_MEM_DEVICE);
      folded++;
    } else {
      assert_int_equal(memory_class, kToDLPack[i].memory_class);
    }
    mapped++;
  }
  assert_int_equal(mapped, 24); /* DLPack 1..4, 7, 8, 10, 11, 13..16; 3..8 with three classes */
  assert_int_equal(folded, 12);
}

static void dlpack_devices_without_a_tag_are_unsupported(void **state) {
  (void)state;
  static const struct {
    int32_t dl_device_type;
    const char *message;
  } cases[] = {
      {9, "DLPack device type 9 (kDLVPI) has no Hurray device tag"},
      {12, "DLPack device type 12 (kDLExtDev) has no Hurray device tag"},
      {17, "DLPack device type 17 (kDLMAIA) has no Hurray device tag"},
      {18, "DLPack device type 18 (kDLTrn) has no Hurray device tag"},
      {0, "DLPack device type 0 is unknown"},
      {5, "DLPack device type 5 is unknown"},
      {6, "DLPack device type 6 is unknown"},
      {19, "DLPack device type 19 is unknown"},
      {-1, "DLPack device type -1 is unknown"},
      {INT32_MAX, "DLPack device type 2147483647 is unknown"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    HurrayError error = {0};
    uint8_t tag = 0xAB, memory_class = 0xAB;
    assert_failure(hurray_device_from_dlpack(cases[i].dl_device_type, &tag, &memory_class, &error),
                   error, HURRAY_EUNSUPPORTED, cases[i].message);
    assert_int_equal(tag, 0xAB);
    assert_int_equal(memory_class, 0xAB);
  }
  uint8_t tag = 0;
  assert_int_equal(hurray_device_from_dlpack(1, &tag, NULL, NULL), HURRAY_EINVAL);
  assert_int_equal(hurray_device_from_dlpack(1, NULL, &tag, NULL), HURRAY_EINVAL);
}

/* ---- the combinations each named device has (buffer-protocol.md §2.6) ---------------------- */

/* The spec's table, transcribed from §2.6.1..§2.6.9: the classes ("dhup": device, host,
 * unified, peer) and sync modes ("rset": ready, stream, event, timeline) each tag has. */
static const struct {
  int tag;
  const char *classes, *syncs, *section;
} kDeviceTable[] = {
    {HURRAY_DEVICE_CPU, "d", "r", "2.6.1"},          {HURRAY_DEVICE_CUDA, "dhup", "rset", "2.6.2"},
    {HURRAY_DEVICE_ROCM, "dhup", "rse", "2.6.3"},    {HURRAY_DEVICE_METAL, "dhup", "rset", "2.6.4"},
    {HURRAY_DEVICE_VULKAN, "dhp", "rset", "2.6.5"},  {HURRAY_DEVICE_WEBGPU, "d", "rs", "2.6.6"},
    {HURRAY_DEVICE_HEXAGON, "d", "r", "2.6.7"},      {HURRAY_DEVICE_LEVEL_ZERO, "dhup", "rse", "2.6.8"},
    {HURRAY_DEVICE_OPENCL, "dhu", "rse", "2.6.9"},
};

static void every_named_combination_follows_the_spec_table(void **state) {
  (void)state;
  int refused = 0;
  for (size_t i = 0; i < sizeof kDeviceTable / sizeof kDeviceTable[0]; i++) {
    const char *device = hurray_device_name(kDeviceTable[i].tag);
    for (int mc = HURRAY_MEM_DEVICE; mc <= HURRAY_MEM_PEER; mc++) {
      for (int sync = HURRAY_SYNC_READY; sync <= HURRAY_SYNC_TIMELINE; sync++) {
        int has_class = strchr(kDeviceTable[i].classes, "dhup"[mc]) != NULL;
        int has_sync = strchr(kDeviceTable[i].syncs, "rset"[sync]) != NULL;
        HurrayError error = {0};
        int status = hurray_device_supports(kDeviceTable[i].tag, mc, sync, &error);
        if (has_class && has_sync) {
          assert_int_equal(status, HURRAY_OK);
          continue;
        }
        char want[HURRAY_ERROR_MESSAGE_SIZE];
        if (!has_class) {
          snprintf(want, sizeof want, "device %s has no %s memory (docs/spec/buffer-protocol.md §%s)",
                   device, hurray_memory_class_name(mc), kDeviceTable[i].section);
        } else {
          snprintf(want, sizeof want,
                   "device %s has no %s synchronisation (docs/spec/buffer-protocol.md §%s)", device,
                   hurray_sync_mode_name(sync), kDeviceTable[i].section);
        }
        assert_failure(status, error, HURRAY_EUNSUPPORTED, want);
        refused++;
      }
    }
  }
  assert_int_equal(refused, 15 + 4 + 4 + 14 + 15 + 4 + 7); /* 63 of the 144 */
}

static void unknown_tags_classes_and_modes_are_named(void **state) {
  (void)state;
  HurrayError error = {0};
  assert_failure(hurray_device_supports(0x42, 0, 0, &error), error, HURRAY_EDEVICE,
                 "device tag 0x42 is reserved for a future version of the specification");
  assert_failure(hurray_device_supports(HURRAY_DEVICE_CUDA, 4, 0, &error), error, HURRAY_EMEMCLASS,
                 "memory class 4 is unknown");
  assert_failure(hurray_device_supports(HURRAY_DEVICE_CUDA, 0, 9, &error), error, HURRAY_ESYNC,
                 "sync mode 9 is unknown");
  /* A registered private tag's combinations are agreed out of band: all of them pass. */
  assert_int_equal(hurray_device_register_private(0xF5, "npu", NULL), HURRAY_OK);
  for (int mc = HURRAY_MEM_DEVICE; mc <= HURRAY_MEM_PEER; mc++) {
    assert_int_equal(hurray_device_supports(0xF5, mc, HURRAY_SYNC_TIMELINE, NULL), HURRAY_OK);
  }
  assert_int_equal(hurray_device_unregister_private(0xF5, NULL), HURRAY_OK);
  assert_int_equal(hurray_device_supports(0xF5, 0, 0, NULL), HURRAY_EDEVICE);
}

/* A producer cannot make such a buffer, and a consumer refuses one that another producer made
 * (a handle whose descriptor was set after wrapping, as a foreign binary's could be). */
static void producers_and_consumers_refuse_missing_combinations(void **state) {
  (void)state;
  const HurrayBufferDesc unified = {.byte_size = 64,
                                    .alignment = 64,
                                    .device_tag = HURRAY_DEVICE_VULKAN,
                                    .memory_class = HURRAY_MEM_UNIFIED};
  HurrayError error = {0};
  HurrayBuffer *buffer = NULL;
  void *address = (void *)(uintptr_t)0x7f0000000000u; /* never dereferenced */
  assert_int_equal(hurray_desc_validate(&unified, NULL), HURRAY_OK); /* still well-formed */
  assert_failure(hurray_buffer_wrap(address, &unified, 0, NULL, 0, NULL, NULL, &buffer, &error),
                 error, HURRAY_EUNSUPPORTED,
                 "device vulkan has no unified memory (docs/spec/buffer-protocol.md §2.6.5)");
  assert_null(buffer);

  HurrayBufferDesc device = unified;
  device.memory_class = HURRAY_MEM_DEVICE;
  assert_int_equal(hurray_buffer_wrap(address, &device, 0, NULL, 0, NULL, NULL, &buffer, NULL),
                   HURRAY_OK);
  HurrayBufferList *list = NULL;
  assert_int_equal(hurray_buffer_list_create(1, &list, NULL), HURRAY_OK);
  assert_int_equal(hurray_buffer_list_append(list, buffer, HURRAY_ROLE_VALUES, NULL, NULL),
                   HURRAY_OK);
  const int64_t shape[1] = {16};
  const HurrayArray array = {.shape = shape, .ndim = 1, .dtype = HURRAY_DTYPE_FLOAT32};
  const HurrayTensorDesc tensor = {.layout = HURRAY_LAYOUT_DENSE,
                                   .ndim = 1,
                                   .shape = shape,
                                   .parts = &array,
                                   .nparts = 1,
                                   .dtype = HURRAY_DTYPE_FLOAT32};
  HurrayTensorContext *context = NULL;
  assert_int_equal(hurray_tensor_context_create(&tensor, list, 0, NULL, NULL, &context, NULL),
                   HURRAY_OK);
  assert_int_equal(hurray_tensor_context_check(context, 0, NULL), HURRAY_OK);
  buffer->desc.memory_class = HURRAY_MEM_UNIFIED;
  assert_failure(hurray_tensor_context_check(context, 0, &error), error, HURRAY_EUNSUPPORTED,
                 "buffer 0: device vulkan has no unified memory (docs/spec/buffer-protocol.md "
                 "§2.6.5)");
  buffer->desc.memory_class = HURRAY_MEM_DEVICE;
  hurray_tensor_context_release(context);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(named_tags_have_names_and_pass),
      cmocka_unit_test(reserved_tags_are_rejected),
      cmocka_unit_test(unregistered_private_tags_are_rejected),
      cmocka_unit_test(invalid_tags_are_rejected),
      cmocka_unit_test(private_tag_lifecycle),
      cmocka_unit_test(every_private_tag_can_be_registered_at_once),
      cmocka_unit_test(only_private_tags_can_be_registered),
      cmocka_unit_test(private_names_are_checked),
      cmocka_unit_test(registry_is_thread_safe),
      cmocka_unit_test(memory_class_and_sync_mode_names),
      cmocka_unit_test(named_devices_map_to_dlpack),
      cmocka_unit_test(peer_memory_has_no_dlpack_form),
      cmocka_unit_test(other_tags_have_no_dlpack_form),
      cmocka_unit_test(dlpack_devices_map_back),
      cmocka_unit_test(dlpack_devices_without_a_tag_are_unsupported),
      cmocka_unit_test(every_named_combination_follows_the_spec_table),
      cmocka_unit_test(unknown_tags_classes_and_modes_are_named),
      cmocka_unit_test(producers_and_consumers_refuse_missing_combinations),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
