/* source.c -- where a reader's bytes live: a copy-on-write mapping of the file, memory the caller
 * lent, or the file itself read with pread. A source is reference-counted so zero-copy buffers
 * keep a mapping alive after the reader that made them is gone.
 *
 * A mapping is private and writable (MAP_PRIVATE, PROT_READ | PROT_WRITE, as
 * torch.load(mmap=True) maps): a consumer that ignores the read-only flag and writes gets its
 * own copy of the page; nothing reaches the file and nothing faults. A writable source
 * (HURRAY_FILE_OPEN_WRITABLE) hands out the same views without the read-only flag. The descriptor stays open
 * beside the mapping while the reader needs it, so that verification reads with pread and
 * reports a file that shrank instead of dying of SIGBUS. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file.h"

#ifndef O_CLOEXEC
#define O_CLOEXEC 0
#endif

struct FileSource {
  atomic_uint_fast32_t refs;
  int fd;              /* -1 for memory, and once the reader closed a mapped file's */
  const uint8_t *base; /* the bytes, once mapped or lent; NULL for pread */
  uint64_t size;
  void *map_start; /* what munmap takes, when this source mapped the file */
  size_t map_length;
  bool use_pread;
  bool writable; /* views of the mapping are writable */
  HurrayOwnerReleaseFn release; /* memory lent by a caller */
  void *owner;
  uint32_t head_length; /* bytes of `head`: the file's first HEAD_SIZE, or all of a shorter one */
  uint8_t head[];       /* read once at open; the header, the magic a loader sniffs, and all of a
                           small file's metadata are read from here, not with a pread each */
};

enum {
  HASH_STEP = 64u << 20, /* bytes between progress reports */
  READ_CHUNK = 1u << 20, /* pread scratch */
  HEAD_SIZE = 4096,      /* the first bytes of a file read at open */
};

static int system_error(HurrayError *error, const char *what) {
  int code = errno;
  return hurray__fail_errno(error, code == ENOMEM ? HURRAY_ENOMEM : HURRAY_EIO, code, "%s: %s",
                            what, strerror(code));
}

static FileSource *source_new(size_t head) {
  FileSource *source = calloc(1, sizeof *source + head);
  if (source == NULL) return NULL;
  atomic_init(&source->refs, 1);
  source->fd = -1;
  return source;
}

static int pread_all(const FileSource *source, uint64_t offset, uint8_t *out, size_t len,
                     HurrayError *error);

int hurray__source_open(const char *path, uint32_t flags, FileSource **out, HurrayError *error) {
  int fd;
  do { /* O_NONBLOCK: opening a FIFO must not wait for a writer before it is refused */
    fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return system_error(error, path);
  struct stat st;
  int status = fstat(fd, &st) != 0 ? system_error(error, path) : HURRAY_OK;
  if (status == HURRAY_OK && !S_ISREG(st.st_mode)) {
    status = hurray__fail_errno(error, HURRAY_EIO, S_ISDIR(st.st_mode) ? EISDIR : 0,
                                "%s: not a regular file", path);
  }
  /* O_NONBLOCK stays: it has no effect on a regular file (open(2)), and clearing it cost two
   * system calls on every open. */
  if (status != HURRAY_OK) {
    close(fd);
    return status;
  }
  FileSource *source = source_new(HEAD_SIZE);
  if (source == NULL) {
    close(fd);
    return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  }
  source->fd = fd;
  source->size = (uint64_t)st.st_size;
  uint32_t head = source->size < HEAD_SIZE ? (uint32_t)source->size : HEAD_SIZE;
  status = pread_all(source, 0, source->head, head, error);
  if (status != HURRAY_OK) {
    hurray__source_release(source);
    return status;
  }
  source->head_length = head;
  source->use_pread = (flags & HURRAY_FILE_OPEN_PREAD) != 0;
  source->writable = (flags & HURRAY_FILE_OPEN_WRITABLE) != 0;
  *out = source;
  return HURRAY_OK;
}

int hurray__source_memory(const void *data, uint64_t size, HurrayOwnerReleaseFn release,
                          void *owner, FileSource **out, HurrayError *error) {
  FileSource *source = data != NULL ? source_new(0) : NULL;
  if (source == NULL) {
    if (release != NULL) release(owner);
    return data == NULL ? hurray__fail(error, HURRAY_EINVAL, "data is NULL")
                        : hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  }
  source->base = data;
  source->size = size;
  source->release = release;
  source->owner = owner;
  *out = source;
  return HURRAY_OK;
}

uint64_t hurray__source_size(const FileSource *source) {
  return source->size;
}

const uint8_t *hurray__source_bytes(const FileSource *source) {
  return source->base;
}

int hurray__source_dup_fd(const FileSource *source, int *fd, HurrayError *error) {
  *fd = source->fd >= 0 ? fcntl(source->fd, F_DUPFD_CLOEXEC, 0) : -1;
  return source->fd >= 0 && *fd < 0 ? system_error(error, "dup") : HURRAY_OK;
}

bool hurray__source_read_only(const FileSource *source) {
  return source->base != NULL && !source->writable;
}

/* Maps the whole file copy-on-write at an address aligned to `alignment`. Beyond the page size,
 * it reserves size + alignment bytes of address space, maps the file over the aligned part of
 * that reservation (MAP_FIXED inside a range this process owns, so nothing else is replaced),
 * and returns the rest. */
static int map_aligned(FileSource *source, uint32_t alignment, HurrayError *error) {
  if (source->size > SIZE_MAX - alignment) {
    return hurray__fail(error, HURRAY_EUNSUPPORTED,
                        "a file of %" PRIu64
                        " bytes cannot be mapped here; open it with "
                        "HURRAY_FILE_OPEN_PREAD",
                        source->size);
  }
  size_t length = (size_t)source->size;
  long page = sysconf(_SC_PAGESIZE);
  if (page > 0 && alignment <= (unsigned long)page) {
    void *p = mmap(NULL, length, PROT_READ | PROT_WRITE, MAP_PRIVATE, source->fd, 0);
    if (p == MAP_FAILED) return system_error(error, "mmap");
    source->map_start = p;
    source->map_length = length;
    source->base = p;
    return HURRAY_OK;
  }
  size_t reserved = length + alignment;
  uint8_t *r = mmap(NULL, reserved, PROT_NONE, MAP_PRIVATE, source->fd, 0);
  if (r == MAP_FAILED) return system_error(error, "mmap");
  uint8_t *aligned = (uint8_t *)(((uintptr_t)r + alignment - 1) & ~(uintptr_t)(alignment - 1));
  void *p = mmap(aligned, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, source->fd, 0);
  if (p == MAP_FAILED) {
    int status = system_error(error, "mmap");
    munmap(r, reserved);
    return status;
  }
  /* Give back the reservation around the mapping (whole pages: `aligned` is page-aligned). */
  size_t head = (size_t)(aligned - r);
  size_t mapped = (length + (size_t)page - 1) & ~((size_t)page - 1);
  if (head > 0) munmap(r, head);
  if (reserved - head > mapped) munmap(aligned + mapped, reserved - head - mapped);
  source->map_start = aligned;
  source->map_length = length;
  source->base = aligned;
  return HURRAY_OK;
}

int hurray__source_map(FileSource *source, uint32_t alignment, HurrayError *error) {
  if (source->base != NULL) { /* lent memory */
    if (((uintptr_t)source->base & (alignment - 1)) == 0) return HURRAY_OK;
    return hurray__fail(error, HURRAY_EALIGN,
                        "the file image at %p is not aligned to the file's %" PRIu32
                        "-byte alignment",
                        (const void *)source->base, alignment);
  }
  if (source->use_pread) return HURRAY_OK;
  return map_aligned(source, alignment, error);
}

void hurray__source_close_file(FileSource *source) {
  if (source->base == NULL || source->fd < 0) return; /* pread needs it; memory has none */
  close(source->fd);
  source->fd = -1;
}

static int pread_all(const FileSource *source, uint64_t offset, uint8_t *out, size_t len,
                     HurrayError *error) {
  while (len > 0) {
    ssize_t n = pread(source->fd, out, len, (off_t)offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return system_error(error, "read");
    if (n == 0) return hurray__fail(error, HURRAY_EIO, "read: the file shrank while open");
    out += n;
    len -= (size_t)n;
    offset += (uint64_t)n;
  }
  return HURRAY_OK;
}

int hurray__source_read(const FileSource *source, uint64_t offset, void *out, size_t len,
                        HurrayError *error) {
  if (source->fd >= 0 && (offset > source->head_length || len > source->head_length - offset)) {
    return pread_all(source, offset, out, len, error);
  }
  if (source->fd >= 0) {
    memcpy(out, source->head + offset, len);
    return HURRAY_OK;
  }
  if (len > 0) memcpy(out, source->base + offset, len);
  return HURRAY_OK;
}

void hurray__source_retain(FileSource *source) {
  atomic_fetch_add_explicit(&source->refs, 1, memory_order_relaxed);
}

static void release_view(HurrayBuffer *self) {
  hurray__source_release(self->release_ctx);
}

int hurray__source_buffer(FileSource *source, uint64_t offset, uint64_t len, uint32_t alignment,
                          HurrayBuffer **out, HurrayError *error) {
  if (len == 0 || source->base == NULL) {
    HurrayBuffer *buffer = NULL;
    int status = hurray_buffer_alloc(len, alignment, 0, &buffer, error);
    if (status == HURRAY_OK && len > 0) {
      status = len <= SIZE_MAX ? pread_all(source, offset, buffer->data, (size_t)len, error)
                               : hurray__fail(error, HURRAY_ENOMEM, "buffer too large");
    }
    if (status != HURRAY_OK) {
      hurray_buffer_destroy(buffer);
      return status;
    }
    *out = buffer;
    return HURRAY_OK;
  }
  const HurrayBufferDesc desc = {.byte_size = len,
                                 .alignment = alignment,
                                 .device_tag = HURRAY_DEVICE_CPU,
                                 .memory_class = HURRAY_MEM_DEVICE,
                                 .sync_mode = HURRAY_SYNC_READY};
  hurray__source_retain(source);
  int status = hurray_buffer_wrap((void *)(uintptr_t)(source->base + offset), &desc,
                                  source->writable ? 0 : HURRAY_BUFFER_READ_ONLY, NULL, 0,
                                  release_view, source, out, error);
  if (status != HURRAY_OK) hurray__source_release(source); /* wrap took nothing */
  return status;
}

static void report(FileProgress *progress, uint64_t bytes) {
  if (progress == NULL) return;
  progress->done += bytes;
  if (progress->fn != NULL) progress->fn(progress->context, progress->done, progress->total);
}

/* Hands bytes [offset, offset + len) to `fn` in order, in bounded memory: a file through
 * pread (mapped or not), memory directly; reports progress every HASH_STEP bytes. */
static int scan(const FileSource *source, uint64_t offset, uint64_t len, FileProgress *progress,
                bool (*fn)(void *context, const uint8_t *bytes, size_t n), void *context,
                HurrayError *error) {
  bool from_memory = source->fd < 0;
  uint8_t *chunk = from_memory ? NULL : malloc(READ_CHUNK);
  if (!from_memory && chunk == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  int status = HURRAY_OK;
  bool more = true;
  uint64_t done = 0;
  do { /* at least once: an empty region reports its progress too */
    size_t step = (size_t)(len - done < HASH_STEP ? len - done : HASH_STEP);
    if (from_memory) {
      more = fn(context, source->base + offset + done, step);
    } else {
      for (size_t at = 0; at < step && status == HURRAY_OK && more; at += READ_CHUNK) {
        size_t n = step - at < READ_CHUNK ? step - at : READ_CHUNK;
        status = pread_all(source, offset + done + at, chunk, n, error);
        if (status == HURRAY_OK) more = fn(context, chunk, n);
      }
    }
    done += step;
    if (status == HURRAY_OK) report(progress, step);
  } while (done < len && status == HURRAY_OK && more);
  free(chunk);
  return status;
}

static bool hash_bytes(void *hasher, const uint8_t *bytes, size_t n) {
  hurray__hasher_update(hasher, bytes, n);
  return true;
}

int hurray__source_hash(const FileSource *source, uint64_t offset, uint64_t len,
                        FileProgress *progress, uint64_t *hash, HurrayError *error) {
  FileHasher *hasher = hurray__hasher_create();
  if (hasher == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  int status = scan(source, offset, len, progress, hash_bytes, hasher, error);
  if (status == HURRAY_OK) *hash = hurray__hasher_digest(hasher);
  hurray__hasher_destroy(hasher);
  return status;
}

typedef struct ZeroScan {
  uint64_t at;      /* the offset of the next byte */
  bool found;       /* a byte that is not zero, at `at` */
} ZeroScan;

static bool find_nonzero(void *context, const uint8_t *bytes, size_t n) {
  ZeroScan *z = context;
  for (size_t i = 0; i < n; i++, z->at++) {
    if (bytes[i] != 0) {
      z->found = true;
      return false;
    }
  }
  return true;
}

int hurray__source_check_zero(const FileSource *source, uint64_t offset, uint64_t len,
                              const char *what, HurrayError *error) {
  ZeroScan z = {.at = offset};
  int status = scan(source, offset, len, NULL, find_nonzero, &z, error);
  if (status == HURRAY_OK && z.found) {
    status = hurray__fail(error, HURRAY_EFORMAT, "%s is not zero: byte %" PRIu64 " of the file",
                          what, z.at);
  }
  return status;
}

void hurray__source_release(FileSource *source) {
  if (source == NULL) return;
  if (atomic_fetch_sub_explicit(&source->refs, 1, memory_order_acq_rel) != 1) return;
  if (source->map_start != NULL) munmap(source->map_start, source->map_length);
  if (source->fd >= 0) close(source->fd);
  if (source->release != NULL) source->release(source->owner);
  free(source);
}
