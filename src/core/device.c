/* device.c -- device tags (ADR-016), memory classes and sync modes; the registry of
 * implementation-private tags; the Hurray <-> DLPack device mapping
 * (docs/spec/buffer-protocol.md, docs/impl/python-bindings.md). */
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

static const char *const kDeviceNames[] = {"cpu",    "cuda",    "rocm",       "metal", "vulkan",
                                           "webgpu", "hexagon", "level_zero", "opencl"};
static const char *const kMemoryClassNames[] = {"device", "host", "unified", "peer"};
static const char *const kSyncModeNames[] = {"ready", "stream", "event", "timeline"};

_Static_assert(sizeof kDeviceNames / sizeof kDeviceNames[0] == HURRAY_DEVICE_LAST_NAMED + 1,
               "one name per named device tag");

#define NAME_AT(names, index) name_at(names, sizeof names / sizeof names[0], index)

static const char *name_at(const char *const *names, size_t count, int index) {
  return index >= 0 && (size_t)index < count ? names[index] : NULL;
}

const char *hurray_memory_class_name(int memory_class) {
  return NAME_AT(kMemoryClassNames, memory_class);
}

const char *hurray_sync_mode_name(int sync_mode) {
  return NAME_AT(kSyncModeNames, sync_mode);
}

/* ---- tag ranges ---------------------------------------------------------------------------- */

typedef enum TagRange { TAG_NAMED, TAG_RESERVED, TAG_PRIVATE, TAG_INVALID } TagRange;

static TagRange tag_range(int tag) {
  if (tag >= HURRAY_DEVICE_CPU && tag <= HURRAY_DEVICE_LAST_NAMED) return TAG_NAMED;
  if (tag >= HURRAY_DEVICE_RESERVED_FIRST && tag <= HURRAY_DEVICE_RESERVED_LAST) {
    return TAG_RESERVED;
  }
  if (tag >= HURRAY_DEVICE_PRIVATE_FIRST && tag <= HURRAY_DEVICE_PRIVATE_LAST) return TAG_PRIVATE;
  return TAG_INVALID;
}

/* How messages spell a tag: "0xF3" for a byte, the decimal value for anything else. */
typedef struct TagText {
  char s[16];
} TagText;

static TagText tag_text(int tag) {
  TagText text;
  if (tag >= 0 && tag <= 0xFF) {
    snprintf(text.s, sizeof text.s, "0x%02X", (unsigned)tag);
  } else {
    snprintf(text.s, sizeof text.s, "%d", tag);
  }
  return text;
}

/* ---- the private-tag registry -------------------------------------------------------------- */

#define PRIVATE_COUNT (HURRAY_DEVICE_PRIVATE_LAST - HURRAY_DEVICE_PRIVATE_FIRST + 1)
#define PRIVATE_NAME_MAX 31

/* One fixed slot per private tag, so a name handed out by hurray_device_name stays readable
 * for as long as the tag stays registered. */
typedef struct PrivateSlot {
  bool registered;
  char name[PRIVATE_NAME_MAX + 1];
} PrivateSlot;

static PrivateSlot g_private[PRIVATE_COUNT];
static pthread_mutex_t g_private_lock = PTHREAD_MUTEX_INITIALIZER;

static PrivateSlot *private_slot(int tag) {
  return &g_private[tag - HURRAY_DEVICE_PRIVATE_FIRST];
}

static const char *private_name(int tag) {
  pthread_mutex_lock(&g_private_lock);
  const PrivateSlot *slot = private_slot(tag);
  const char *name = slot->registered ? slot->name : NULL;
  pthread_mutex_unlock(&g_private_lock);
  return name;
}

static int check_private_tag(int tag, HurrayError *error) {
  if (tag_range(tag) == TAG_PRIVATE) return HURRAY_OK;
  return hurray__fail(error, HURRAY_EINVAL,
                      "device tag %s is not implementation-private (0xF0..0xFE)", tag_text(tag).s);
}

static int check_private_name(const char *name, HurrayError *error) {
  if (name == NULL) return hurray__fail(error, HURRAY_EINVAL, "private device name is NULL");
  size_t length = 0;
  for (; name[length] != '\0'; length++) {
    unsigned char c = (unsigned char)name[length];
    if (length == PRIVATE_NAME_MAX) {
      return hurray__fail(error, HURRAY_EINVAL,
                          "private device name \"%.31s...\" is longer than %d bytes", name,
                          PRIVATE_NAME_MAX);
    }
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) {
      return hurray__fail(error, HURRAY_EINVAL,
                          "private device name has byte 0x%02X at offset %zu; only [a-z0-9_] "
                          "are allowed",
                          c, length);
    }
  }
  if (length == 0) return hurray__fail(error, HURRAY_EINVAL, "private device name is empty");
  return HURRAY_OK;
}

int hurray_device_register_private(int tag, const char *name, HurrayError *error) {
  int status = check_private_tag(tag, error);
  if (status == HURRAY_OK) status = check_private_name(name, error);
  if (status != HURRAY_OK) return status;

  pthread_mutex_lock(&g_private_lock);
  PrivateSlot *slot = private_slot(tag);
  if (!slot->registered) {
    memcpy(slot->name, name, strlen(name) + 1);
    slot->registered = true;
  } else if (strcmp(slot->name, name) != 0) {
    status = hurray__fail(error, HURRAY_ESTATE,
                          "device tag 0x%02X is already registered as \"%s\", not \"%s\"",
                          (unsigned)tag, slot->name, name);
  }
  pthread_mutex_unlock(&g_private_lock);
  return status;
}

int hurray_device_unregister_private(int tag, HurrayError *error) {
  int status = check_private_tag(tag, error);
  if (status != HURRAY_OK) return status;

  pthread_mutex_lock(&g_private_lock);
  PrivateSlot *slot = private_slot(tag);
  if (slot->registered) {
    slot->registered = false;
  } else {
    status =
        hurray__fail(error, HURRAY_ESTATE, "device tag 0x%02X is not registered", (unsigned)tag);
  }
  pthread_mutex_unlock(&g_private_lock);
  return status;
}

/* ---- names and checks ---------------------------------------------------------------------- */

const char *hurray_device_name(int tag) {
  switch (tag_range(tag)) {
    case TAG_NAMED:
      return kDeviceNames[tag];
    case TAG_PRIVATE:
      return private_name(tag);
    default:
      return NULL;
  }
}

int hurray_device_check(int tag, HurrayError *error) {
  switch (tag_range(tag)) {
    case TAG_NAMED:
      return HURRAY_OK;
    case TAG_RESERVED:
      return hurray__fail(error, HURRAY_EDEVICE,
                          "device tag %s is reserved for a future version of the specification",
                          tag_text(tag).s);
    case TAG_PRIVATE:
      if (private_name(tag) != NULL) return HURRAY_OK;
      return hurray__fail(error, HURRAY_EDEVICE,
                          "device tag %s is implementation-private and not registered",
                          tag_text(tag).s);
    case TAG_INVALID:
    default:
      return hurray__fail(error, HURRAY_EDEVICE, "device tag %s is permanently invalid",
                          tag_text(tag).s);
  }
}

/* ---- what each named device has (docs/spec/buffer-protocol.md §2.6) ----------------------- */

#define BIT(n) (1u << (n))
#define ALL_CLASSES (BIT(HURRAY_MEM_DEVICE) | BIT(HURRAY_MEM_HOST) | BIT(HURRAY_MEM_UNIFIED) | \
                     BIT(HURRAY_MEM_PEER))
#define ALL_SYNCS (BIT(HURRAY_SYNC_READY) | BIT(HURRAY_SYNC_STREAM) | BIT(HURRAY_SYNC_EVENT) | \
                   BIT(HURRAY_SYNC_TIMELINE))

/* The memory classes and sync modes §2.6.1..§2.6.9 give each named tag, as bit sets. A
 * combination outside them is a well-formed descriptor that no producer may create and no
 * consumer may use (HURRAY_EUNSUPPORTED). */
typedef struct DeviceCapabilities {
  uint8_t memory_classes;
  uint8_t sync_modes;
  const char *section;
} DeviceCapabilities;

static const DeviceCapabilities kCapabilities[HURRAY_DEVICE_LAST_NAMED + 1] = {
    [HURRAY_DEVICE_CPU] = {BIT(HURRAY_MEM_DEVICE), BIT(HURRAY_SYNC_READY), "2.6.1"},
    [HURRAY_DEVICE_CUDA] = {ALL_CLASSES, ALL_SYNCS, "2.6.2"},
    [HURRAY_DEVICE_ROCM] = {ALL_CLASSES, ALL_SYNCS & ~BIT(HURRAY_SYNC_TIMELINE), "2.6.3"},
    [HURRAY_DEVICE_METAL] = {ALL_CLASSES, ALL_SYNCS, "2.6.4"},
    [HURRAY_DEVICE_VULKAN] = {ALL_CLASSES & ~BIT(HURRAY_MEM_UNIFIED), ALL_SYNCS, "2.6.5"},
    [HURRAY_DEVICE_WEBGPU] = {BIT(HURRAY_MEM_DEVICE), BIT(HURRAY_SYNC_READY) | BIT(HURRAY_SYNC_STREAM),
                              "2.6.6"},
    [HURRAY_DEVICE_HEXAGON] = {BIT(HURRAY_MEM_DEVICE), BIT(HURRAY_SYNC_READY), "2.6.7"},
    [HURRAY_DEVICE_LEVEL_ZERO] = {ALL_CLASSES, ALL_SYNCS & ~BIT(HURRAY_SYNC_TIMELINE), "2.6.8"},
    [HURRAY_DEVICE_OPENCL] = {ALL_CLASSES & ~BIT(HURRAY_MEM_PEER),
                              ALL_SYNCS & ~BIT(HURRAY_SYNC_TIMELINE), "2.6.9"},
};

int hurray_device_supports(int tag, int memory_class, int sync_mode, HurrayError *error) {
  int status = hurray_device_check(tag, error);
  if (status != HURRAY_OK) return status;
  const char *class_name = hurray_memory_class_name(memory_class);
  if (class_name == NULL) {
    return hurray__fail(error, HURRAY_EMEMCLASS, "memory class %d is unknown", memory_class);
  }
  const char *sync_name = hurray_sync_mode_name(sync_mode);
  if (sync_name == NULL) {
    return hurray__fail(error, HURRAY_ESYNC, "sync mode %d is unknown", sync_mode);
  }
  if (tag > HURRAY_DEVICE_LAST_NAMED) return HURRAY_OK; /* a private tag's meaning is agreed */
  const DeviceCapabilities *device = &kCapabilities[tag];
  if (!(device->memory_classes & BIT(memory_class))) {
    return hurray__fail(error, HURRAY_EUNSUPPORTED,
                        "device %s has no %s memory (docs/spec/buffer-protocol.md §%s)",
                        kDeviceNames[tag], class_name, device->section);
  }
  if (!(device->sync_modes & BIT(sync_mode))) {
    return hurray__fail(error, HURRAY_EUNSUPPORTED,
                        "device %s has no %s synchronisation (docs/spec/buffer-protocol.md §%s)",
                        kDeviceNames[tag], sync_name, device->section);
  }
  return HURRAY_OK;
}

/* ---- DLPack -------------------------------------------------------------------------------- */

/* Every DLPack DLDeviceType this library knows (DLPack's integers), with the Hurray
 * (tag, memory class) it corresponds to; tag HURRAY_DEVICE_INVALID where Hurray names none.
 * Both directions of the mapping read this one table. It implements the mapping table of
 * docs/impl/python-bindings.md ("Devices: Hurray -> DLPack"), the authoritative one (ADR-016). */
typedef struct DLPackDevice {
  int32_t dl_device_type;
  const char *dl_name;
  uint8_t tag;
  uint8_t memory_class;
} DLPackDevice;

static const DLPackDevice kDLPackDevices[] = {
    {1, "kDLCPU", HURRAY_DEVICE_CPU, HURRAY_MEM_DEVICE},
    {2, "kDLCUDA", HURRAY_DEVICE_CUDA, HURRAY_MEM_DEVICE},
    {3, "kDLCUDAHost", HURRAY_DEVICE_CUDA, HURRAY_MEM_HOST},
    {4, "kDLOpenCL", HURRAY_DEVICE_OPENCL, HURRAY_MEM_DEVICE},
    {7, "kDLVulkan", HURRAY_DEVICE_VULKAN, HURRAY_MEM_DEVICE},
    {8, "kDLMetal", HURRAY_DEVICE_METAL, HURRAY_MEM_DEVICE},
    {9, "kDLVPI", HURRAY_DEVICE_INVALID, 0},
    {10, "kDLROCM", HURRAY_DEVICE_ROCM, HURRAY_MEM_DEVICE},
    {11, "kDLROCMHost", HURRAY_DEVICE_ROCM, HURRAY_MEM_HOST},
    {12, "kDLExtDev", HURRAY_DEVICE_INVALID, 0},
    {13, "kDLCUDAManaged", HURRAY_DEVICE_CUDA, HURRAY_MEM_UNIFIED},
    {14, "kDLOneAPI", HURRAY_DEVICE_LEVEL_ZERO, HURRAY_MEM_DEVICE},
    {15, "kDLWebGPU", HURRAY_DEVICE_WEBGPU, HURRAY_MEM_DEVICE},
    {16, "kDLHexagon", HURRAY_DEVICE_HEXAGON, HURRAY_MEM_DEVICE},
    {17, "kDLMAIA", HURRAY_DEVICE_INVALID, 0},
    {18, "kDLTrn", HURRAY_DEVICE_INVALID, 0},
};

#define DLPACK_DEVICE_COUNT (sizeof kDLPackDevices / sizeof kDLPackDevices[0])

static int no_dlpack_form(int tag, int memory_class, HurrayError *error) {
  if (memory_class == HURRAY_MEM_PEER) {
    return hurray__fail(error, HURRAY_EUNSUPPORTED,
                        "DLPack has no representation for peer-mapped memory");
  }
  if (tag == HURRAY_DEVICE_ROCM && memory_class == HURRAY_MEM_UNIFIED) {
    return hurray__fail(error, HURRAY_EUNSUPPORTED,
                        "DLPack has no ROCm managed memory (kDLROCMManaged does not exist)");
  }
  return hurray__fail(error, HURRAY_EUNSUPPORTED,
                      "DLPack has no device type for %s memory of device %s",
                      kMemoryClassNames[memory_class], kDeviceNames[tag]);
}

int hurray_device_to_dlpack(int tag, int memory_class, int32_t *dl_device_type,
                            HurrayError *error) {
  if (dl_device_type == NULL) {
    return hurray__fail(error, HURRAY_EINVAL, "hurray_device_to_dlpack: dl_device_type is NULL");
  }
  if (tag == HURRAY_DEVICE_CPU && memory_class == HURRAY_MEM_DEVICE) {
    *dl_device_type = kDLPackDevices[0].dl_device_type; /* the common case, kDLCPU, at once */
    return HURRAY_OK;
  }
  if (tag_range(tag) == TAG_PRIVATE) {
    return hurray__fail(error, HURRAY_EUNSUPPORTED,
                        "device tag %s is implementation-private; DLPack has no form for it",
                        tag_text(tag).s);
  }
  int status = hurray_device_check(tag, error);
  if (status != HURRAY_OK) return status;
  if (hurray_memory_class_name(memory_class) == NULL) {
    return hurray__fail(error, HURRAY_EMEMCLASS, "memory class %d is unknown", memory_class);
  }
  /* Only CUDA and ROCm have a DLPack device type per memory class. For the tags 0x03..0x08
   * DLPack's one device type covers every kind of memory of the device except peer mappings. */
  int lookup_class = memory_class;
  if (tag >= HURRAY_DEVICE_METAL && tag <= HURRAY_DEVICE_LAST_NAMED &&
      memory_class != HURRAY_MEM_PEER) {
    lookup_class = HURRAY_MEM_DEVICE;
  }
  for (size_t i = 0; i < DLPACK_DEVICE_COUNT; i++) {
    const DLPackDevice *d = &kDLPackDevices[i];
    if (d->tag == tag && d->memory_class == lookup_class) {
      *dl_device_type = d->dl_device_type;
      return HURRAY_OK;
    }
  }
  return no_dlpack_form(tag, memory_class, error);
}

int hurray_device_from_dlpack(int32_t dl_device_type, uint8_t *tag, uint8_t *memory_class,
                              HurrayError *error) {
  if (tag == NULL || memory_class == NULL) {
    return hurray__fail(error, HURRAY_EINVAL, "hurray_device_from_dlpack: %s is NULL",
                        tag == NULL ? "tag" : "memory_class");
  }
  for (size_t i = 0; i < DLPACK_DEVICE_COUNT; i++) {
    const DLPackDevice *d = &kDLPackDevices[i];
    if (d->dl_device_type != dl_device_type) continue;
    if (d->tag == HURRAY_DEVICE_INVALID) {
      return hurray__fail(error, HURRAY_EUNSUPPORTED,
                          "DLPack device type %" PRId32 " (%s) has no Hurray device tag",
                          dl_device_type, d->dl_name);
    }
    *tag = d->tag;
    *memory_class = d->memory_class;
    return HURRAY_OK;
  }
  return hurray__fail(error, HURRAY_EUNSUPPORTED, "DLPack device type %" PRId32 " is unknown",
                      dl_device_type);
}
