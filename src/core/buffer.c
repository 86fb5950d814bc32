/* buffer.c -- HurrayBuffer, one owned region of memory on some device, and HurrayBufferList,
 * every buffer of one tensor in order, each with a role (ADR-030). A buffer's `release` runs
 * exactly once: when its handle is destroyed, or never if the handle was never made. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, MADV_HUGEPAGE, MADV_FREE */
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "geometry.h"
#include "internal.h"

/* ---- HurrayBuffer -------------------------------------------------------------------------- */

static int check_flags(const char *what, uint32_t flags, uint32_t known, HurrayError *error) {
  if ((flags & ~known) == 0) return HURRAY_OK;
  return hurray__fail(error, HURRAY_EINVAL,
                      "%s flags 0x%" PRIX32 " include unknown bits 0x%" PRIX32, what, flags,
                      flags & ~known);
}

bool hurray__buffer_has_address(const HurrayBufferDesc *desc) {
  return hurray__address_form(desc->device_tag);
}

static int check_data(void *data, const HurrayBufferDesc *desc, HurrayError *error) {
  if (data == NULL) {
    if (desc->byte_size == 0) return HURRAY_OK;
    return hurray__fail(error, HURRAY_EINVAL, "data is NULL but byte_size is %" PRIu64,
                        desc->byte_size);
  }
  /* A buffer object's offset 0 is aligned by the device API. */
  if (!hurray__buffer_has_address(desc)) return HURRAY_OK;
  uintptr_t offset = (uintptr_t)data & (desc->alignment - 1);
  if (offset == 0) return HURRAY_OK;
  return hurray__fail(error, HURRAY_EALIGN,
                      "data %p lies %" PRIuPTR " bytes past a %" PRIu32
                      "-byte boundary; wrap the address rounded down and address the data "
                      "with a byte offset",
                      data, offset, desc->alignment);
}

static int check_sync(const HurrayBufferDesc *desc, const void *sync_handle, uint64_t sync_value,
                      HurrayError *error) {
  const char *mode = hurray_sync_mode_name(desc->sync_mode);
  if (desc->sync_mode == HURRAY_SYNC_READY && sync_handle != NULL) {
    return hurray__fail(error, HURRAY_ESYNC, "sync mode ready takes no sync_handle");
  }
  if (desc->sync_mode != HURRAY_SYNC_READY && sync_handle == NULL) {
    return hurray__fail(error, HURRAY_ESYNC, "sync mode %s needs a sync_handle", mode);
  }
  if (desc->sync_mode != HURRAY_SYNC_TIMELINE && sync_value != 0) {
    return hurray__fail(error, HURRAY_ESYNC,
                        "sync mode %s waits for no value, but sync_value is %" PRIu64, mode,
                        sync_value);
  }
  return HURRAY_OK;
}

/* Every rule of a handle's fields: what wrap checks before it makes one, and what a consumer
 * checks on a handle made by someone else (hurray__buffer_check). */
static int check_fields(void *data, const HurrayBufferDesc *desc, uint32_t flags,
                        const void *sync_handle, uint64_t sync_value, HurrayError *error) {
  int status = hurray_desc_validate(desc, error);
  if (status == HURRAY_OK) {
    status = hurray_device_supports(desc->device_tag, desc->memory_class, desc->sync_mode, error);
  }
  if (status == HURRAY_OK) status = check_flags("buffer", flags, HURRAY_BUFFER_READ_ONLY, error);
  if (status == HURRAY_OK) status = check_data(data, desc, error);
  if (status == HURRAY_OK) status = check_sync(desc, sync_handle, sync_value, error);
  return status;
}

int hurray__buffer_check(const HurrayBuffer *buffer, HurrayError *error) {
  return check_fields(buffer->data, &buffer->desc, buffer->flags, buffer->sync_handle,
                      buffer->sync_value, error);
}

int hurray_buffer_wrap(void *data, const HurrayBufferDesc *desc, uint32_t flags, void *sync_handle,
                       uint64_t sync_value, HurrayBufferReleaseFn release, void *release_ctx,
                       HurrayBuffer **out, HurrayError *error) {
  if (out == NULL) return hurray__fail(error, HURRAY_EINVAL, "hurray_buffer_wrap: out is NULL");
  int status = check_fields(data, desc, flags, sync_handle, sync_value, error);
  if (status != HURRAY_OK) return status;

  HurrayBuffer *buffer = calloc(1, sizeof *buffer);
  if (buffer == NULL) {
    return hurray__fail(error, HURRAY_ENOMEM, "cannot allocate a buffer handle (%zu bytes)",
                        sizeof *buffer);
  }
  buffer->data = data;
  buffer->desc = *desc;
  buffer->flags = flags;
  buffer->sync_handle = sync_handle;
  buffer->sync_value = sync_value;
  buffer->release = release;
  buffer->release_ctx = release_ctx;
  *out = buffer;
  return HURRAY_OK;
}

static void release_aligned(HurrayBuffer *self) {
  free(self->data);
}

/* Large buffers are anonymous mappings the kernel is asked to back with transparent huge
 * pages (ADR-058): filling 1 GiB of 4 KiB pages takes 262,144 page faults, of 2 MiB pages 512,
 * which is most of what a copying load costs beyond the copy. The mapping starts at a multiple
 * of HUGE_PAGE (or of the alignment, if larger) and ends at the page after the last byte, so
 * only whole huge pages become huge and no memory is spent past the buffer. Where the kernel
 * has no transparent huge pages, or they are "never", the advice does nothing and the mapping
 * is ordinary pages, as malloc would give; where mmap fails, aligned_alloc is used. */
enum { HUGE_PAGE = 2u << 20 };

static size_t page_size(void) {
  long page = sysconf(_SC_PAGESIZE);
  return page > 0 ? (size_t)page : 4096u;
}

static size_t mapped_length(uint64_t byte_size) {
  size_t page = page_size();
  return ((size_t)byte_size + page - 1) & ~(page - 1);
}

/* Released mappings are kept for the next buffer of the same length, as an allocator keeps
 * freed memory (ADR-101, ADR-108): a copying load or a fetch that runs again, or tensors copied
 * one at a time, then reuse memory already faulted in instead of faulting and zeroing fresh
 * pages each time -- and, on a virtual machine that reports free memory to its host, instead
 * of faulting it back in from the host. At most KEEP_COUNT mappings and kept_limit() bytes
 * are kept; a release that would pass either gives back the oldest first, and a mapping
 * longer than the limit is given back at once. A kept mapping is advised MADV_FREE: the kernel
 * may take its pages whenever it needs memory, without writing them anywhere, so what is kept
 * never causes memory pressure; a buffer that takes it back finds zero pages where it did. */
enum { KEEP_COUNT = 64 };
#define KEEP_MOST ((uint64_t)1 << 30)

static struct {
  pthread_mutex_t lock;
  void *start[KEEP_COUNT]; /* oldest first */
  size_t length[KEEP_COUNT];
  unsigned count;
  size_t bytes;
} g_kept = {.lock = PTHREAD_MUTEX_INITIALIZER};

static size_t g_kept_limit;
static pthread_once_t g_kept_limit_once = PTHREAD_ONCE_INIT;

static void find_kept_limit(void) {
  long pages = sysconf(_SC_PHYS_PAGES);
  uint64_t sixteenth = pages > 0 ? (uint64_t)pages * page_size() / 16 : KEEP_MOST;
  g_kept_limit = (size_t)(sixteenth < KEEP_MOST ? sixteenth : KEEP_MOST);
}

/* The most bytes of released mappings kept: 1 GiB, or a sixteenth of the machine's memory where
 * that is less (ADR-108). */
static size_t kept_limit(void) {
  pthread_once(&g_kept_limit_once, find_kept_limit);
  return g_kept_limit;
}

static void forget_kept(unsigned i) {
  g_kept.bytes -= g_kept.length[i];
  g_kept.count--;
  memmove(&g_kept.start[i], &g_kept.start[i + 1], (g_kept.count - i) * sizeof(void *));
  memmove(&g_kept.length[i], &g_kept.length[i + 1], (g_kept.count - i) * sizeof(size_t));
}

/* A kept mapping of `length` bytes starting at a multiple of `align`, taken out; or NULL. */
static void *take_kept(size_t length, size_t align) {
  void *found = NULL;
  pthread_mutex_lock(&g_kept.lock);
  for (unsigned i = g_kept.count; i-- > 0;) { /* the latest first: warm */
    if (g_kept.length[i] == length && ((uintptr_t)g_kept.start[i] & (align - 1)) == 0) {
      found = g_kept.start[i];
      forget_kept(i);
      break;
    }
  }
  pthread_mutex_unlock(&g_kept.lock);
  return found;
}

static void release_mapped(HurrayBuffer *self) {
  size_t length = mapped_length(self->desc.byte_size);
  if (length > kept_limit()) {
    munmap(self->data, length);
    return;
  }
#ifdef MADV_FREE
  madvise(self->data, length, MADV_FREE); /* advice: where refused, the pages simply stay */
#endif
  void *evicted[KEEP_COUNT];
  size_t evicted_length[KEEP_COUNT];
  unsigned n_evicted = 0;
  pthread_mutex_lock(&g_kept.lock);
  while (g_kept.count == KEEP_COUNT || g_kept.bytes + length > kept_limit()) {
    evicted[n_evicted] = g_kept.start[0];
    evicted_length[n_evicted++] = g_kept.length[0];
    forget_kept(0);
  }
  g_kept.start[g_kept.count] = self->data;
  g_kept.length[g_kept.count++] = length;
  g_kept.bytes += length;
  pthread_mutex_unlock(&g_kept.lock);
  for (unsigned i = 0; i < n_evicted; i++) munmap(evicted[i], evicted_length[i]);
}

uint64_t hurray_buffer_trim(void) {
  void *start[KEEP_COUNT];
  size_t length[KEEP_COUNT];
  pthread_mutex_lock(&g_kept.lock);
  unsigned count = g_kept.count;
  size_t bytes = g_kept.bytes;
  memcpy(start, g_kept.start, count * sizeof(void *));
  memcpy(length, g_kept.length, count * sizeof(size_t));
  g_kept.count = 0;
  g_kept.bytes = 0;
  pthread_mutex_unlock(&g_kept.lock);
  for (unsigned i = 0; i < count; i++) munmap(start[i], length[i]);
  return bytes;
}

/* `byte_size` bytes at a multiple of `alignment` (a power of two) and of HUGE_PAGE, or NULL;
 * `*reused` says whether they are a kept mapping (its old bytes) rather than fresh zeros. */
static void *map_huge(uint64_t byte_size, uint32_t alignment, bool *reused) {
  size_t align = alignment > HUGE_PAGE ? alignment : HUGE_PAGE;
  size_t length = mapped_length(byte_size);
  if (length < byte_size || length > SIZE_MAX - align) return NULL;
  void *kept = take_kept(length, align);
  *reused = kept != NULL;
  if (kept != NULL) return kept;
  uint8_t *reserved =
      mmap(NULL, length + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (reserved == MAP_FAILED) return NULL;
  uint8_t *start = (uint8_t *)(((uintptr_t)reserved + align - 1) & ~(uintptr_t)(align - 1));
  size_t head = (size_t)(start - reserved); /* whole pages: both ends are page-aligned */
  if (head > 0) munmap(reserved, head);
  if (align - head > 0) munmap(start + length, align - head);
#ifdef MADV_HUGEPAGE
  madvise(start, length, MADV_HUGEPAGE); /* advice: refused where there are none, and harmless */
#endif
  return start;
}

/* A zero-byte buffer gets no memory at all: data is NULL, as the contract allows, so every
 * consumer meets the NULL case in its own tests rather than in the field. At least HUGE_PAGE
 * bytes are mapped (map_huge: fresh ones are zero already); smaller sizes are rounded up to a
 * multiple of the alignment, as aligned_alloc requires. `*release` is how the memory is given
 * back. */
static int allocate_aligned(uint64_t byte_size, uint32_t alignment, bool zero, void **data,
                            HurrayBufferReleaseFn *release, HurrayError *error) {
  *data = NULL;
  *release = release_aligned;
  if (byte_size == 0) return HURRAY_OK;
  uint64_t rounded = 0;
  if (hurray__add_u64(byte_size, alignment - 1, &rounded) || (size_t)rounded != rounded) {
    return hurray__fail(error, HURRAY_EOVERFLOW,
                        "%" PRIu64 " bytes aligned to %" PRIu32 " do not fit in memory", byte_size,
                        alignment);
  }
  bool reused = false;
  if (byte_size >= HUGE_PAGE && (*data = map_huge(byte_size, alignment, &reused)) != NULL) {
    *release = release_mapped;
    if (zero && reused) memset(*data, 0, (size_t)byte_size);
    return HURRAY_OK;
  }
  rounded &= ~(uint64_t)(alignment - 1);
  *data = aligned_alloc(alignment, (size_t)rounded);
  if (*data == NULL) {
    return hurray__fail(error, HURRAY_ENOMEM,
                        "cannot allocate %" PRIu64 " bytes aligned to %" PRIu32, byte_size,
                        alignment);
  }
  if (zero) memset(*data, 0, (size_t)byte_size);
  return HURRAY_OK;
}

int hurray_buffer_alloc(uint64_t byte_size, uint32_t alignment, uint32_t flags, HurrayBuffer **out,
                        HurrayError *error) {
  if (out == NULL) return hurray__fail(error, HURRAY_EINVAL, "hurray_buffer_alloc: out is NULL");
  const HurrayBufferDesc desc = {
      .byte_size = byte_size,
      .alignment = alignment == 0 ? HURRAY_MIN_ALIGNMENT : alignment,
      .device_tag = HURRAY_DEVICE_CPU,
      .memory_class = HURRAY_MEM_DEVICE,
      .sync_mode = HURRAY_SYNC_READY,
  };
  int status = hurray_desc_validate(&desc, error);
  if (status == HURRAY_OK) status = check_flags("alloc", flags, HURRAY_ALLOC_ZERO, error);
  if (status != HURRAY_OK) return status;

  void *data = NULL;
  HurrayBufferReleaseFn release = NULL;
  status = allocate_aligned(desc.byte_size, desc.alignment, flags & HURRAY_ALLOC_ZERO, &data,
                            &release, error);
  if (status == HURRAY_OK) {
    status = hurray_buffer_wrap(data, &desc, 0, NULL, 0, release, NULL, out, error);
    if (status != HURRAY_OK) {
      HurrayBuffer unmade = {.data = data, .desc = desc};
      release(&unmade);
    }
  }
  return status;
}

void hurray_buffer_destroy(HurrayBuffer *buffer) {
  if (buffer == NULL) return;
  if (buffer->release != NULL) buffer->release(buffer);
  free(buffer);
}

/* ---- HurrayBufferList ---------------------------------------------------------------------- */

static const char *const kRoleNames[] = {"values", "scales", "zero_points", "mins", "indices",
                                         "indptr", "pages",  "page_table",  "mixed"};

#define ROLE_COUNT (sizeof kRoleNames / sizeof kRoleNames[0])

const char *hurray_buffer_role_name(int role) {
  return role >= 0 && (size_t)role < ROLE_COUNT ? kRoleNames[role] : NULL;
}

/* A list is made as one block: the struct, then room for the `capacity_hint` handles and roles
 * it was asked for, so a list whose size is known when it is made -- the usual case -- costs
 * one allocation. Growing past that moves both arrays to blocks of their own. */
static HurrayBuffer **inline_buffers(HurrayBufferList *list) {
  return (HurrayBuffer **)(void *)(list + 1);
}

static bool arrays_inline(HurrayBufferList *list) {
  return list->buffers == inline_buffers(list);
}

/* Grows both arrays to hold `capacity` entries. On failure the list is unchanged in content
 * and still consistent (an array may have grown; `capacity` says what both can hold). */
static int reserve(HurrayBufferList *list, uint32_t capacity, HurrayError *error) {
  if (capacity <= list->capacity) return HURRAY_OK;
  if (arrays_inline(list)) {
    HurrayBuffer **buffers = malloc((size_t)capacity * sizeof *buffers);
    uint8_t *roles = buffers != NULL ? malloc(capacity) : NULL;
    if (roles == NULL) {
      free(buffers);
      return hurray__fail(error, HURRAY_ENOMEM, "cannot grow a buffer list to %" PRIu32 " buffers",
                          capacity);
    }
    memcpy(buffers, list->buffers, (size_t)list->count * sizeof *buffers);
    memcpy(roles, list->roles, list->count);
    list->buffers = buffers;
    list->roles = roles;
    list->capacity = capacity;
    return HURRAY_OK;
  }
  HurrayBuffer **buffers = realloc(list->buffers, (size_t)capacity * sizeof *buffers);
  if (buffers != NULL) list->buffers = buffers;
  uint8_t *roles = buffers != NULL ? realloc(list->roles, capacity) : NULL;
  if (roles == NULL) {
    return hurray__fail(error, HURRAY_ENOMEM, "cannot grow a buffer list to %" PRIu32 " buffers",
                        capacity);
  }
  list->roles = roles;
  list->capacity = capacity;
  return HURRAY_OK;
}

int hurray_buffer_list_create(uint32_t capacity_hint, HurrayBufferList **out, HurrayError *error) {
  if (out == NULL) {
    return hurray__fail(error, HURRAY_EINVAL, "hurray_buffer_list_create: out is NULL");
  }
  if (capacity_hint > HURRAY_MAX_BUFFERS) {
    return hurray__fail(error, HURRAY_ELIMIT,
                        "capacity hint %" PRIu32 " exceeds the limit of %u buffers", capacity_hint,
                        HURRAY_MAX_BUFFERS);
  }
  /* At most 65536 entries of 9 bytes after the struct: no overflow. */
  size_t size = sizeof(HurrayBufferList) + (size_t)capacity_hint * (sizeof(HurrayBuffer *) + 1);
  HurrayBufferList *list = calloc(1, size);
  if (list == NULL) {
    return hurray__fail(error, HURRAY_ENOMEM, "cannot allocate a buffer list (%zu bytes)", size);
  }
  if (capacity_hint > 0) {
    list->buffers = inline_buffers(list);
    list->roles = (uint8_t *)(list->buffers + capacity_hint);
    list->capacity = capacity_hint;
  }
  *out = list;
  return HURRAY_OK;
}

/* Everything that can make an append fail, done before the buffer is stored. */
static int prepare_append(HurrayBufferList *list, int role, HurrayError *error) {
  if (list == NULL) return hurray__fail(error, HURRAY_EINVAL, "buffer list is NULL");
  if (hurray_buffer_role_name(role) == NULL) {
    return hurray__fail(error, HURRAY_EINVAL, "buffer role %d is unknown", role);
  }
  if (list->count == HURRAY_MAX_BUFFERS) {
    return hurray__fail(error, HURRAY_ELIMIT, "a buffer list holds at most %u buffers",
                        HURRAY_MAX_BUFFERS);
  }
  if (list->count < list->capacity) return HURRAY_OK;
  uint32_t grown = list->capacity < 4 ? 4 : 2 * list->capacity;
  return reserve(list, grown < HURRAY_MAX_BUFFERS ? grown : HURRAY_MAX_BUFFERS, error);
}

int hurray_buffer_list_append(HurrayBufferList *list, HurrayBuffer *buffer, int role,
                              uint32_t *index, HurrayError *error) {
  if (buffer == NULL) return hurray__fail(error, HURRAY_EINVAL, "buffer is NULL");
  int status = prepare_append(list, role, error);
  if (status != HURRAY_OK) {
    hurray_buffer_destroy(buffer); /* SINK: the buffer is ours even on failure */
    return status;
  }
  list->buffers[list->count] = buffer;
  list->roles[list->count] = (uint8_t)role;
  if (index != NULL) *index = list->count;
  list->count++;
  return HURRAY_OK;
}

void hurray_buffer_list_destroy(HurrayBufferList *list) {
  if (list == NULL) return;
  for (uint32_t i = 0; i < list->count; i++) hurray_buffer_destroy(list->buffers[i]);
  if (!arrays_inline(list)) {
    free(list->buffers);
    free(list->roles);
  }
  free(list);
}
