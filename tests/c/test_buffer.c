/* test_buffer.c -- HurrayBuffer and HurrayBufferList ownership. Every release callback counts
 * its calls, and every test checks the count on its success and failure paths: exactly once
 * after destroy, never when wrap fails, once when a SINK append fails. */
#define _DEFAULT_SOURCE /* mincore */
#include <errno.h>
#include <setjmp.h>
#include <stdalign.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "hurray/hurray.h"

/* Under AddressSanitizer an impossible allocation must fail with NULL, as it does in
 * production, rather than abort the test. Exported: the build hides symbols by default, and
 * the sanitizer runtime looks this hook up dynamically. */
__attribute__((visibility("default"))) const char *__asan_default_options(void);
const char *__asan_default_options(void) {
  return "allocator_may_return_null=1";
}

typedef struct ReleaseCounter {
  int calls;
  HurrayBuffer *last;
} ReleaseCounter;

static void count_release(HurrayBuffer *self) {
  ReleaseCounter *counter = self->release_ctx;
  counter->calls++;
  counter->last = self;
}

static alignas(4096) uint8_t g_memory[8192];

static HurrayBufferDesc cpu_desc(uint64_t byte_size, uint32_t alignment) {
  return (HurrayBufferDesc){.byte_size = byte_size,
                            .alignment = alignment,
                            .device_tag = HURRAY_DEVICE_CPU,
                            .memory_class = HURRAY_MEM_DEVICE,
                            .sync_mode = HURRAY_SYNC_READY};
}

/* A sentinel that a failed constructor must leave in *out. */
#define UNTOUCHED ((HurrayBuffer *)(uintptr_t)0xDEADBEEF)

/* ---- wrap ---------------------------------------------------------------------------------- */

static void wrap_owns_the_memory_until_destroy(void **state) {
  (void)state;
  ReleaseCounter counter = {0};
  const HurrayBufferDesc desc = cpu_desc(sizeof g_memory, 4096);
  HurrayBuffer *buffer = NULL;
  assert_int_equal(hurray_buffer_wrap(g_memory, &desc, HURRAY_BUFFER_READ_ONLY, NULL, 0,
                                      count_release, &counter, &buffer, NULL),
                   HURRAY_OK);
  assert_ptr_equal(buffer->data, g_memory);
  assert_memory_equal(&buffer->desc, &desc, sizeof desc);
  assert_int_equal(buffer->flags, HURRAY_BUFFER_READ_ONLY);
  assert_null(buffer->sync_handle);
  assert_int_equal(buffer->sync_value, 0);
  assert_ptr_equal(buffer->release, count_release);
  assert_ptr_equal(buffer->release_ctx, &counter);
  assert_int_equal(counter.calls, 0);
  hurray_buffer_destroy(buffer);
  assert_int_equal(counter.calls, 1);
  assert_ptr_equal(counter.last, buffer); /* release gets the handle itself */
}

static void wrap_device_memory_with_sync_state(void **state) {
  (void)state;
  /* a CUDA address Hurray never dereferences, ready once a timeline reaches 42 */
  void *device_address = (void *)(uintptr_t)0x7F0000100000u;
  void *semaphore = &g_memory[1];
  const HurrayBufferDesc desc = {.byte_size = UINT64_C(1) << 40,
                                 .alignment = 1u << 20,
                                 .device_id = 2,
                                 .device_tag = HURRAY_DEVICE_CUDA,
                                 .memory_class = HURRAY_MEM_DEVICE,
                                 .sync_mode = HURRAY_SYNC_TIMELINE};
  ReleaseCounter counter = {0};
  HurrayBuffer *buffer = NULL;
  assert_int_equal(hurray_buffer_wrap(device_address, &desc, 0, semaphore, 42, count_release,
                                      &counter, &buffer, NULL),
                   HURRAY_OK);
  assert_ptr_equal(buffer->sync_handle, semaphore);
  assert_int_equal(buffer->sync_value, 42);
  hurray_buffer_destroy(buffer);
  assert_int_equal(counter.calls, 1);
}

static void wrap_borrowed_memory_without_release(void **state) {
  (void)state;
  const HurrayBufferDesc desc = cpu_desc(64, 64);
  HurrayBuffer *buffer = NULL;
  assert_int_equal(hurray_buffer_wrap(g_memory, &desc, 0, NULL, 0, NULL, NULL, &buffer, NULL),
                   HURRAY_OK);
  hurray_buffer_destroy(buffer);
  hurray_buffer_destroy(NULL);
}

static void wrap_empty_buffers(void **state) {
  (void)state;
  ReleaseCounter counter = {0};
  const HurrayBufferDesc empty = cpu_desc(0, 64);
  HurrayBuffer *buffer = NULL;
  assert_int_equal(
      hurray_buffer_wrap(NULL, &empty, 0, NULL, 0, count_release, &counter, &buffer, NULL),
      HURRAY_OK);
  assert_null(buffer->data);
  hurray_buffer_destroy(buffer);
  assert_int_equal(counter.calls, 1);
}

/* Wrap must fail with `code` and `message`, leave *out alone, and never call release. */
static void assert_wrap_fails(void *data, const HurrayBufferDesc *desc, uint32_t flags,
                              void *sync_handle, uint64_t sync_value, int code,
                              const char *message) {
  ReleaseCounter counter = {0};
  HurrayBuffer *buffer = UNTOUCHED;
  HurrayError error = {0};
  assert_int_equal(hurray_buffer_wrap(data, desc, flags, sync_handle, sync_value, count_release,
                                      &counter, &buffer, &error),
                   code);
  assert_int_equal(error.code, code);
  assert_string_equal(error.message, message);
  assert_ptr_equal(buffer, UNTOUCHED);
  assert_int_equal(counter.calls, 0);
}

static void wrap_rejects_misaligned_data(void **state) {
  (void)state;
  static const struct {
    size_t offset;
    uint32_t alignment;
  } cases[] = {{1, 64}, {8, 64}, {32, 64}, {63, 64}, {64, 128}, {2048, 4096}, {4095, 4096}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    void *data = g_memory + cases[i].offset;
    const HurrayBufferDesc desc = cpu_desc(64, cases[i].alignment);
    char message[256];
    snprintf(message, sizeof message,
             "data %p lies %zu bytes past a %u-byte boundary; wrap the address rounded down and "
             "address the data with a byte offset",
             data, cases[i].offset, (unsigned)cases[i].alignment);
    assert_wrap_fails(data, &desc, 0, NULL, 0, HURRAY_EALIGN, message);
  }
  /* the same addresses pass where the alignment they have is all that is asked */
  const HurrayBufferDesc desc = cpu_desc(64, 64);
  HurrayBuffer *buffer = NULL;
  assert_int_equal(hurray_buffer_wrap(g_memory + 64, &desc, 0, NULL, 0, NULL, NULL, &buffer, NULL),
                   HURRAY_OK);
  hurray_buffer_destroy(buffer);
}

/* Metal, WebGPU and OpenCL buffers are objects, not addresses (spec 2.5): no alignment test. */
static void wrap_takes_object_handles_without_alignment_test(void **state) {
  (void)state;
  static const int handle_tags[] = {HURRAY_DEVICE_METAL, HURRAY_DEVICE_WEBGPU,
                                    HURRAY_DEVICE_OPENCL};
  for (size_t i = 0; i < sizeof handle_tags / sizeof handle_tags[0]; i++) {
    HurrayBufferDesc desc = cpu_desc(64, 256);
    desc.device_tag = (uint8_t)handle_tags[i];
    HurrayBuffer *buffer = NULL;
    assert_int_equal(hurray_buffer_wrap((void *)(uintptr_t)0x1008, &desc, 0, NULL, 0, NULL, NULL,
                                        &buffer, NULL),
                     HURRAY_OK);
    hurray_buffer_destroy(buffer);
  }
  HurrayBufferDesc desc = cpu_desc(64, 256); /* an address-form device is still checked */
  desc.device_tag = HURRAY_DEVICE_CUDA;
  assert_wrap_fails((void *)(uintptr_t)0x1008, &desc, 0, NULL, 0, HURRAY_EALIGN,
                    "data 0x1008 lies 8 bytes past a 256-byte boundary; wrap the address rounded "
                    "down and address the data with a byte offset");
}

static void wrap_rejects_null_data_with_bytes(void **state) {
  (void)state;
  const HurrayBufferDesc desc = cpu_desc(1, 64);
  assert_wrap_fails(NULL, &desc, 0, NULL, 0, HURRAY_EINVAL, "data is NULL but byte_size is 1");
}

static void wrap_rejects_invalid_descriptors(void **state) {
  (void)state;
  HurrayBufferDesc desc = cpu_desc(64, 32);
  assert_wrap_fails(g_memory, &desc, 0, NULL, 0, HURRAY_EALIGN,
                    "alignment 32 is not a power of two in [64, 2^30]");
  desc = cpu_desc(64, 64);
  desc.device_tag = 0x10;
  assert_wrap_fails(g_memory, &desc, 0, NULL, 0, HURRAY_EDEVICE,
                    "device tag 0x10 is reserved for a future version of the specification");
  assert_wrap_fails(g_memory, NULL, 0, NULL, 0, HURRAY_EINVAL, "buffer descriptor is NULL");
}

static void wrap_rejects_unknown_flags(void **state) {
  (void)state;
  const HurrayBufferDesc desc = cpu_desc(64, 64);
  assert_wrap_fails(g_memory, &desc, 0x3, NULL, 0, HURRAY_EINVAL,
                    "buffer flags 0x3 include unknown bits 0x2");
  assert_wrap_fails(g_memory, &desc, 0x80000000u, NULL, 0, HURRAY_EINVAL,
                    "buffer flags 0x80000000 include unknown bits 0x80000000");
}

static void wrap_checks_sync_state_against_the_mode(void **state) {
  (void)state;
  void *handle = &g_memory[0];
  HurrayBufferDesc desc = cpu_desc(64, 64);
  assert_wrap_fails(g_memory, &desc, 0, handle, 0, HURRAY_ESYNC,
                    "sync mode ready takes no sync_handle");
  assert_wrap_fails(g_memory, &desc, 0, NULL, 1, HURRAY_ESYNC,
                    "sync mode ready waits for no value, but sync_value is 1");
  desc.device_tag = HURRAY_DEVICE_VULKAN;
  desc.sync_mode = HURRAY_SYNC_STREAM;
  assert_wrap_fails(g_memory, &desc, 0, NULL, 0, HURRAY_ESYNC,
                    "sync mode stream needs a sync_handle");
  desc.sync_mode = HURRAY_SYNC_EVENT;
  assert_wrap_fails(g_memory, &desc, 0, NULL, 0, HURRAY_ESYNC,
                    "sync mode event needs a sync_handle");
  assert_wrap_fails(g_memory, &desc, 0, handle, 7, HURRAY_ESYNC,
                    "sync mode event waits for no value, but sync_value is 7");
  desc.sync_mode = HURRAY_SYNC_TIMELINE;
  assert_wrap_fails(g_memory, &desc, 0, NULL, 7, HURRAY_ESYNC,
                    "sync mode timeline needs a sync_handle");
}

static void wrap_needs_somewhere_to_put_the_handle(void **state) {
  (void)state;
  ReleaseCounter counter = {0};
  const HurrayBufferDesc desc = cpu_desc(64, 64);
  HurrayError error = {0};
  assert_int_equal(
      hurray_buffer_wrap(g_memory, &desc, 0, NULL, 0, count_release, &counter, NULL, &error),
      HURRAY_EINVAL);
  assert_string_equal(error.message, "hurray_buffer_wrap: out is NULL");
  assert_int_equal(counter.calls, 0);
}

/* ---- alloc --------------------------------------------------------------------------------- */

static void alloc_honours_size_and_alignment(void **state) {
  (void)state;
  static const uint64_t sizes[] = {1,         63, 64, 65, 4097, UINT64_C(1) << 20, UINT64_C(2) << 20,
                                   (UINT64_C(5) << 20) + 4097};
  static const uint32_t alignments[] = {0, 64, 128, 4096, 1u << 16, 1u << 21, 1u << 23};
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
    for (size_t a = 0; a < sizeof alignments / sizeof alignments[0]; a++) {
      const uint32_t want_alignment = alignments[a] == 0 ? 64 : alignments[a];
      HurrayBuffer *buffer = NULL;
      assert_int_equal(hurray_buffer_alloc(sizes[s], alignments[a], 0, &buffer, NULL), HURRAY_OK);
      assert_non_null(buffer->data);
      assert_int_equal((uintptr_t)buffer->data % want_alignment, 0);
      assert_int_equal(buffer->desc.byte_size, sizes[s]);
      assert_int_equal(buffer->desc.alignment, want_alignment);
      assert_int_equal(buffer->desc.device_tag, HURRAY_DEVICE_CPU);
      assert_int_equal(buffer->desc.memory_class, HURRAY_MEM_DEVICE);
      assert_int_equal(buffer->desc.sync_mode, HURRAY_SYNC_READY);
      assert_int_equal(buffer->flags, 0);
      assert_null(buffer->sync_handle);
      assert_non_null(buffer->release);
      assert_int_equal(hurray_desc_validate(&buffer->desc, NULL), HURRAY_OK);
      memset(buffer->data, 0xA5, (size_t)sizes[s]); /* every byte is ours (ASan checks) */
      hurray_buffer_destroy(buffer);
    }
  }
}

static void alloc_zero_clears_every_byte(void **state) {
  (void)state;
  static const size_t sizes[] = {100003, (3u << 20) + 5}; /* heap and mapped */
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
    /* dirty a block first, so a zeroed block is not zero by luck of a fresh mapping */
    HurrayBuffer *dirty = NULL;
    assert_int_equal(hurray_buffer_alloc(sizes[s], 0, 0, &dirty, NULL), HURRAY_OK);
    memset(dirty->data, 0xFF, sizes[s]);
    hurray_buffer_destroy(dirty);

    HurrayBuffer *buffer = NULL;
    assert_int_equal(hurray_buffer_alloc(sizes[s], 0, HURRAY_ALLOC_ZERO, &buffer, NULL),
                     HURRAY_OK);
    const uint8_t *bytes = buffer->data;
    for (size_t i = 0; i < sizes[s]; i++) assert_int_equal(bytes[i], 0);
    hurray_buffer_destroy(buffer);
  }
}

/* Whether any page of [data, data + len) is mapped: mincore fails with ENOMEM on a range
 * with an unmapped page, so each page is asked on its own. */
static bool any_page_mapped(const uint8_t *data, size_t len) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  unsigned char resident = 0;
  for (size_t at = 0; at < len; at += page) {
    if (mincore((void *)(uintptr_t)(data + at), 1, &resident) == 0) return true;
    assert_int_equal(errno, ENOMEM);
  }
  return false;
}

/* How many of `buffers` (destroyed, `sizes` bytes each) still have a page mapped. */
static unsigned still_mapped(uint8_t *const *data, const uint64_t *sizes, unsigned n) {
  unsigned mapped = 0;
  for (unsigned i = 0; i < n; i++) mapped += any_page_mapped(data[i], (size_t)sizes[i]);
  return mapped;
}

/* ADR-108's limit on the bytes of released mappings kept: 1 GiB, or a sixteenth of memory. */
static size_t kept_limit(void) {
  uint64_t sixteenth = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE) / 16;
  return (size_t)(sixteenth < (UINT64_C(1) << 30) ? sixteenth : UINT64_C(1) << 30);
}

/* Allocates `n` buffers of `sizes` bytes, writes one byte to the first page of each (so the
 * page is mapped) and destroys them in order, oldest first; their data pointers go to `data`. */
static void release_touched(const uint64_t *sizes, uint8_t **data, unsigned n) {
  for (unsigned i = 0; i < n; i++) {
    HurrayBuffer *buffer = NULL;
    assert_int_equal(hurray_buffer_alloc(sizes[i], 64, 0, &buffer, NULL), HURRAY_OK);
    data[i] = buffer->data;
    data[i][0] = 1;
    hurray_buffer_destroy(buffer);
  }
}

/* Buffers of 2 MiB or more are mappings that start on a 2 MiB boundary, where transparent huge
 * pages can back them (ADR-058). A released one is kept for the next buffer of its length --
 * at most 64 of them and kept_limit() bytes, the oldest given back first -- and
 * one longer than that limit is given back at once (ADR-101, ADR-108). */
static void alloc_maps_large_buffers_on_huge_page_boundaries(void **state) {
  (void)state;
  static const uint64_t sizes[] = {UINT64_C(2) << 20, (UINT64_C(3) << 20) + 1};
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
    HurrayBuffer *buffer = NULL;
    assert_int_equal(hurray_buffer_alloc(sizes[s], 64, 0, &buffer, NULL), HURRAY_OK);
    uint8_t *data = buffer->data;
    assert_int_equal((uintptr_t)data % (2u << 20), 0);
    memset(data, 0x5A, (size_t)sizes[s]);
    assert_true(any_page_mapped(data, (size_t)sizes[s]));
    hurray_buffer_destroy(buffer);
    assert_true(any_page_mapped(data, (size_t)sizes[s])); /* kept */
    assert_int_equal(hurray_buffer_alloc(sizes[s], 64, 0, &buffer, NULL), HURRAY_OK);
    assert_ptr_equal(buffer->data, data); /* taken again: no fresh pages */
    /* its old bytes, or zeros where the kernel took a page it was free to take (MADV_FREE) */
    uint8_t first = ((uint8_t *)buffer->data)[0];
    assert_true(first == 0x5A || first == 0);
    hurray_buffer_destroy(buffer);
  }

  size_t limit = kept_limit();
  assert_true(limit >= (size_t)256 << 20); /* a machine of 4 GiB or more, as MANY below needs */
  HurrayBuffer *large = NULL;
  assert_int_equal(hurray_buffer_alloc(limit + 1, 64, 0, &large, NULL), HURRAY_OK);
  uint8_t *large_data = large->data;
  large_data[0] = 1;
  hurray_buffer_destroy(large);
  assert_false(any_page_mapped(large_data, 4096)); /* longer than the limit: given back */

  enum { MANY = 65 }; /* one more than are kept */
  uint64_t many_sizes[MANY];
  uint8_t *many_data[MANY];
  for (unsigned i = 0; i < MANY; i++) {
    many_sizes[i] = (UINT64_C(2) << 20) + 4096 * (i + 1); /* lengths nothing kept has yet */
  }
  release_touched(many_sizes, many_data, MANY);
  assert_int_equal(still_mapped(many_data, many_sizes, MANY), MANY - 1);
  assert_false(any_page_mapped(many_data[0], 4096)); /* the oldest given back */

  enum { BIG = 3 }; /* three of more than a third of the limit each */
  uint64_t big_sizes[BIG];
  uint8_t *big_data[BIG];
  for (unsigned i = 0; i < BIG; i++) big_sizes[i] = limit / 3 + 4096 * (i + 1);
  release_touched(big_sizes, big_data, BIG);
  assert_false(any_page_mapped(big_data[0], 4096)); /* the oldest given back to make room */
  assert_true(any_page_mapped(big_data[1], 4096) && any_page_mapped(big_data[2], 4096));
}

/* hurray_buffer_trim gives back every kept mapping, and says how many bytes that was. */
static void trim_gives_back_every_kept_buffer(void **state) {
  (void)state;
  static const uint64_t sizes[] = {UINT64_C(4) << 20, (UINT64_C(6) << 20) + 1};
  uint8_t *data[2];
  release_touched(sizes, data, 2);
  assert_int_equal(still_mapped(data, sizes, 2), 2);
  assert_true(hurray_buffer_trim() >= (UINT64_C(10) << 20) + 4096);
  assert_int_equal(still_mapped(data, sizes, 2), 0);
  assert_int_equal(hurray_buffer_trim(), 0);
}

static void alloc_of_zero_bytes_has_no_memory(void **state) {
  (void)state;
  HurrayBuffer *buffer = NULL;
  assert_int_equal(hurray_buffer_alloc(0, 256, HURRAY_ALLOC_ZERO, &buffer, NULL), HURRAY_OK);
  assert_null(buffer->data);
  assert_int_equal(buffer->desc.byte_size, 0);
  assert_int_equal(buffer->desc.alignment, 256);
  hurray_buffer_destroy(buffer);
}

static void assert_alloc_fails(uint64_t byte_size, uint32_t alignment, uint32_t flags, int code,
                               const char *message) {
  HurrayBuffer *buffer = UNTOUCHED;
  HurrayError error = {0};
  assert_int_equal(hurray_buffer_alloc(byte_size, alignment, flags, &buffer, &error), code);
  assert_int_equal(error.code, code);
  assert_string_equal(error.message, message);
  assert_ptr_equal(buffer, UNTOUCHED);
}

static void alloc_failures(void **state) {
  (void)state;
  assert_alloc_fails(64, 32, 0, HURRAY_EALIGN, "alignment 32 is not a power of two in [64, 2^30]");
  assert_alloc_fails(64, 96, 0, HURRAY_EALIGN, "alignment 96 is not a power of two in [64, 2^30]");
  assert_alloc_fails(64, 1u << 31, 0, HURRAY_EALIGN,
                     "alignment 2147483648 is not a power of two in [64, 2^30]");
  assert_alloc_fails(64, 0, 0x6, HURRAY_EINVAL, "alloc flags 0x6 include unknown bits 0x6");
  assert_alloc_fails(UINT64_MAX, 0, 0, HURRAY_EOVERFLOW,
                     "18446744073709551615 bytes aligned to 64 do not fit in memory");
  assert_alloc_fails(UINT64_C(1) << 62, 4096, 0, HURRAY_ENOMEM,
                     "cannot allocate 4611686018427387904 bytes aligned to 4096");
  HurrayError error = {0};
  assert_int_equal(hurray_buffer_alloc(64, 0, 0, NULL, &error), HURRAY_EINVAL);
  assert_string_equal(error.message, "hurray_buffer_alloc: out is NULL");
}

/* ---- roles and lists ----------------------------------------------------------------------- */

static void role_names(void **state) {
  (void)state;
  static const char *const names[] = {"values", "scales", "zero_points", "mins", "indices",
                                      "indptr", "pages",  "page_table",  "mixed"};
  for (int role = HURRAY_ROLE_VALUES; role <= HURRAY_ROLE_MIXED; role++) {
    assert_string_equal(hurray_buffer_role_name(role), names[role]);
  }
  assert_null(hurray_buffer_role_name(HURRAY_ROLE_MIXED + 1));
  assert_null(hurray_buffer_role_name(-1));
}

/* A wrapped empty buffer whose release bumps `counter`. */
static HurrayBuffer *counted_buffer(ReleaseCounter *counter) {
  const HurrayBufferDesc desc = cpu_desc(0, 64);
  HurrayBuffer *buffer = NULL;
  assert_int_equal(
      hurray_buffer_wrap(NULL, &desc, 0, NULL, 0, count_release, counter, &buffer, NULL),
      HURRAY_OK);
  return buffer;
}

static void list_create_and_destroy(void **state) {
  (void)state;
  static const uint32_t hints[] = {0, 1, 3, 1000, HURRAY_MAX_BUFFERS};
  for (size_t i = 0; i < sizeof hints / sizeof hints[0]; i++) {
    HurrayBufferList *list = NULL;
    assert_int_equal(hurray_buffer_list_create(hints[i], &list, NULL), HURRAY_OK);
    assert_int_equal(list->count, 0);
    assert_int_equal(list->capacity, hints[i]);
    assert_null(list->reserved);
    hurray_buffer_list_destroy(list);
  }
  hurray_buffer_list_destroy(NULL);

  HurrayError error = {0};
  HurrayBufferList *list = (HurrayBufferList *)(uintptr_t)0xDEADBEEF;
  assert_int_equal(hurray_buffer_list_create(HURRAY_MAX_BUFFERS + 1, &list, &error), HURRAY_ELIMIT);
  assert_string_equal(error.message, "capacity hint 65537 exceeds the limit of 65536 buffers");
  assert_ptr_equal(list, (HurrayBufferList *)(uintptr_t)0xDEADBEEF);
  assert_int_equal(hurray_buffer_list_create(0, NULL, &error), HURRAY_EINVAL);
}

static void list_owns_what_it_appends(void **state) {
  (void)state;
  enum { COUNT = 37 };
  ReleaseCounter counters[COUNT] = {{0}};
  HurrayBuffer *buffers[COUNT];
  HurrayBufferList *list = NULL;
  assert_int_equal(hurray_buffer_list_create(2, &list, NULL), HURRAY_OK);
  for (uint32_t i = 0; i < COUNT; i++) {
    buffers[i] = counted_buffer(&counters[i]);
    uint32_t index = 0xFFFF;
    int role = (int)(i % (HURRAY_ROLE_MIXED + 1));
    assert_int_equal(hurray_buffer_list_append(list, buffers[i], role, &index, NULL), HURRAY_OK);
    assert_int_equal(index, i);
    assert_int_equal(list->count, i + 1);
    assert_true(list->capacity >= list->count);
  }
  for (uint32_t i = 0; i < COUNT; i++) {
    assert_ptr_equal(list->buffers[i], buffers[i]);
    assert_int_equal(list->roles[i], i % (HURRAY_ROLE_MIXED + 1));
    assert_int_equal(counters[i].calls, 0);
  }
  hurray_buffer_list_destroy(list);
  for (uint32_t i = 0; i < COUNT; i++) {
    assert_int_equal(counters[i].calls, 1);
    assert_ptr_equal(counters[i].last, buffers[i]);
  }
}

static void list_append_without_an_index(void **state) {
  (void)state;
  ReleaseCounter counter = {0};
  HurrayBufferList *list = NULL;
  assert_int_equal(hurray_buffer_list_create(0, &list, NULL), HURRAY_OK);
  assert_int_equal(
      hurray_buffer_list_append(list, counted_buffer(&counter), HURRAY_ROLE_VALUES, NULL, NULL),
      HURRAY_OK);
  hurray_buffer_list_destroy(list);
  assert_int_equal(counter.calls, 1);
}

/* A SINK append that fails must destroy the buffer (one release) and leave the list as it
 * was. */
static void assert_append_fails(HurrayBufferList *list, int role, int code, const char *message) {
  ReleaseCounter counter = {0};
  uint32_t count = list != NULL ? list->count : 0;
  uint32_t index = 0xABCD;
  HurrayError error = {0};
  assert_int_equal(hurray_buffer_list_append(list, counted_buffer(&counter), role, &index, &error),
                   code);
  assert_int_equal(error.code, code);
  assert_string_equal(error.message, message);
  assert_int_equal(counter.calls, 1);
  assert_int_equal(index, 0xABCD);
  if (list != NULL) assert_int_equal(list->count, count);
}

static void list_append_failures_destroy_the_buffer(void **state) {
  (void)state;
  ReleaseCounter kept = {0};
  HurrayBufferList *list = NULL;
  assert_int_equal(hurray_buffer_list_create(1, &list, NULL), HURRAY_OK);
  assert_int_equal(
      hurray_buffer_list_append(list, counted_buffer(&kept), HURRAY_ROLE_VALUES, NULL, NULL),
      HURRAY_OK);

  assert_append_fails(NULL, HURRAY_ROLE_VALUES, HURRAY_EINVAL, "buffer list is NULL");
  assert_append_fails(list, -1, HURRAY_EINVAL, "buffer role -1 is unknown");
  assert_append_fails(list, HURRAY_ROLE_MIXED + 1, HURRAY_EINVAL, "buffer role 9 is unknown");

  HurrayError error = {0};
  assert_int_equal(hurray_buffer_list_append(list, NULL, HURRAY_ROLE_VALUES, NULL, &error),
                   HURRAY_EINVAL);
  assert_string_equal(error.message, "buffer is NULL");
  assert_int_equal(list->count, 1);

  hurray_buffer_list_destroy(list);
  assert_int_equal(kept.calls, 1);
}

static void list_holds_at_most_max_buffers(void **state) {
  (void)state;
  ReleaseCounter counter = {0};
  HurrayBufferList *list = NULL;
  assert_int_equal(hurray_buffer_list_create(0, &list, NULL), HURRAY_OK);
  for (uint32_t i = 0; i < HURRAY_MAX_BUFFERS; i++) {
    int status =
        hurray_buffer_list_append(list, counted_buffer(&counter), HURRAY_ROLE_PAGES, NULL, NULL);
    if (status != HURRAY_OK) fail_msg("append %u failed with %d", i, status);
  }
  assert_int_equal(list->count, HURRAY_MAX_BUFFERS);
  assert_int_equal(list->capacity, HURRAY_MAX_BUFFERS);
  assert_append_fails(list, HURRAY_ROLE_PAGES, HURRAY_ELIMIT,
                      "a buffer list holds at most 65536 buffers");
  assert_int_equal(counter.calls, 0);
  hurray_buffer_list_destroy(list);
  assert_int_equal(counter.calls, HURRAY_MAX_BUFFERS);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(wrap_owns_the_memory_until_destroy),
      cmocka_unit_test(wrap_device_memory_with_sync_state),
      cmocka_unit_test(wrap_borrowed_memory_without_release),
      cmocka_unit_test(wrap_empty_buffers),
      cmocka_unit_test(wrap_rejects_misaligned_data),
      cmocka_unit_test(wrap_takes_object_handles_without_alignment_test),
      cmocka_unit_test(wrap_rejects_null_data_with_bytes),
      cmocka_unit_test(wrap_rejects_invalid_descriptors),
      cmocka_unit_test(wrap_rejects_unknown_flags),
      cmocka_unit_test(wrap_checks_sync_state_against_the_mode),
      cmocka_unit_test(wrap_needs_somewhere_to_put_the_handle),
      cmocka_unit_test(alloc_honours_size_and_alignment),
      cmocka_unit_test(alloc_zero_clears_every_byte),
      cmocka_unit_test(alloc_maps_large_buffers_on_huge_page_boundaries),
      cmocka_unit_test(trim_gives_back_every_kept_buffer),
      cmocka_unit_test(alloc_of_zero_bytes_has_no_memory),
      cmocka_unit_test(alloc_failures),
      cmocka_unit_test(role_names),
      cmocka_unit_test(list_create_and_destroy),
      cmocka_unit_test(list_owns_what_it_appends),
      cmocka_unit_test(list_append_without_an_index),
      cmocka_unit_test(list_append_failures_destroy_the_buffer),
      cmocka_unit_test(list_holds_at_most_max_buffers),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
