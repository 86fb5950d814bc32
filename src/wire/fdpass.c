/* fdpass.c -- the same-host fast path (docs/spec/interchange.md §6.6, ADR-060): on a Unix-domain
 * socket a server hands a client the memory of a tensor itself, as a file descriptor, and the
 * client maps it instead of receiving its bytes. A file's tensors go as the file's descriptor;
 * an in-memory tensor goes as a memfd the server fills once and seals, so that neither it nor
 * anyone else can change or shrink the bytes under a client's mapping. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wire.h"

#define FD_REQUIRED_SEALS (F_SEAL_WRITE | F_SEAL_SHRINK)
#define FD_MAPPED_SEALS (FD_REQUIRED_SEALS | F_SEAL_GROW) /* a received shmem descriptor */

static uint64_t page_size(void) {
  long page = sysconf(_SC_PAGESIZE);
  return page > 0 ? (uint64_t)page : 4096u;
}

int hurray__wire_memfd(WireServed *s, HurrayError *error) {
  uint64_t page = page_size(), size = 0;
  uint64_t *offsets = calloc(s->nbuffers + 1u, sizeof *offsets);
  if (offsets == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  for (uint32_t i = 0; i < s->nbuffers; i++) { /* validated sizes: no overflow below 2^63 */
    offsets[i] = size;
    size += (s->buffers[i].desc.byte_size + page - 1) / page * page;
  }
  char name[HURRAY_MAX_NAME + 16];
  snprintf(name, sizeof name, "hurray:%s", s->name);
  int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  int status = fd >= 0 && ftruncate(fd, (off_t)size) == 0
                   ? HURRAY_OK
                   : hurray__fail(error, HURRAY_EIO, "memfd for '%s': %s", s->name,
                                  strerror(errno));
  for (size_t k = 0; status == HURRAY_OK && k < s->nsegments; k++) {
    const WireSegment *g = &s->segments[k];
    uint64_t done = 0;
    while (status == HURRAY_OK && g->data != NULL && done < g->len) { /* gaps stay zero */
      ssize_t n = pwrite(fd, g->data + done, (size_t)(g->len - done),
                         (off_t)(offsets[g->buffer] + g->offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        status = hurray__fail(error, HURRAY_EIO, "memfd for '%s': %s", s->name,
                              n < 0 ? strerror(errno) : "short write");
      }
      done += n > 0 ? (uint64_t)n : 0;
    }
  }
  if (status == HURRAY_OK &&
      fcntl(fd, F_ADD_SEALS, FD_REQUIRED_SEALS | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    status = hurray__fail(error, HURRAY_EIO, "sealing the memfd for '%s': %s", s->name,
                          strerror(errno));
  }
  if (status != HURRAY_OK) {
    if (fd >= 0) close(fd);
    free(offsets);
    return status;
  }
  s->fd = fd;
  s->fd_owned = true;
  s->fd_kind = WIRE_FD_MEMFD;
  free(s->fd_offsets);
  s->fd_offsets = offsets;
  return HURRAY_OK;
}

/* The mapping starts at the page below the buffer's first byte. */
static void unmap(HurrayBuffer *b) {
  uint64_t page = page_size();
  uintptr_t data = (uintptr_t)b->data, start = data & ~(uintptr_t)(page - 1);
  munmap((void *)start, (size_t)(data - start + b->desc.byte_size));
}

/* What the descriptor is, whatever the frame calls it: F_GET_SEALS answers for shmem (a memfd,
 * a tmpfs or hugetlbfs file) and fails with EINVAL for anything else (a file of a disk file
 * system). Sealed: F_SEAL_WRITE, F_SEAL_SHRINK and F_SEAL_GROW, so that nobody can change the
 * bytes or the size under a mapping. Sealable: shmem that still takes seals (F_SEAL_SEAL not
 * set): a memfd made to be sealed and left unsealed, which no honest server sends. */
typedef enum FdNature { FD_DISK, FD_SEALED, FD_SEALABLE, FD_SHMEM_UNSEALED } FdNature;

static FdNature fd_nature(int fd) {
  int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0) return FD_DISK;
  if ((seals & FD_MAPPED_SEALS) == FD_MAPPED_SEALS) return FD_SEALED;
  return (seals & F_SEAL_SEAL) ? FD_SHMEM_UNSEALED : FD_SEALABLE;
}

/* Copies bytes [file_offset, file_offset + length) of `fd` into new memory: a file that
 * shrinks meanwhile gives a short read, never SIGBUS, and nothing done to it later reaches the
 * copy. */
static int copy_fd(int fd, const WireFdRef *ref, const HurrayBufferDesc *desc, HurrayBuffer **out,
                   HurrayError *error) {
  HurrayBuffer *b = NULL;
  int status = hurray_buffer_alloc(ref->length, desc->alignment, 0, &b, error);
  for (uint64_t done = 0; status == HURRAY_OK && done < ref->length;) {
    uint64_t want = ref->length - done;
    size_t k = want < ((uint64_t)1 << 30) ? (size_t)want : (size_t)1 << 30;
    ssize_t n = pread(fd, (uint8_t *)b->data + done, k, (off_t)(ref->file_offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      status = hurray__fail(error, HURRAY_EIO, "buffer %" PRIu32 ": reading the file sent: %s",
                            ref->buffer, strerror(errno));
    } else if (n == 0) {
      status = hurray__fail(error, HURRAY_EPROTOCOL,
                            "buffer %" PRIu32 ": the file sent ended at byte %" PRIu64
                            " of the %" PRIu64 " it was to hold (it shrank)",
                            ref->buffer, ref->file_offset + done, ref->length);
    }
    done += n > 0 ? (uint64_t)n : 0;
  }
  if (status != HURRAY_OK) {
    hurray_buffer_destroy(b);
    return status;
  }
  *out = b;
  return HURRAY_OK;
}

int hurray__wire_map(int fd, const WireFdRef *ref, const HurrayBufferDesc *desc,
                     bool map_disk_files, HurrayBuffer **out, HurrayError *error) {
  *out = NULL;
  uint64_t page = page_size();
  struct stat st;
  if (fstat(fd, &st) != 0) {
    return hurray__fail(error, HURRAY_EPROTOCOL, "buffer %" PRIu32 ": fstat of its descriptor: %s",
                        ref->buffer, strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) {
    return hurray__fail(error, HURRAY_EPROTOCOL,
                        "buffer %" PRIu32 ": the descriptor sent is not a regular file",
                        ref->buffer);
  }
  if ((uint64_t)st.st_size < ref->file_offset + ref->length) { /* decode: no overflow */
    return hurray__fail(error, HURRAY_EPROTOCOL,
                        "buffer %" PRIu32 ": bytes [%" PRIu64 ", %" PRIu64
                        ") are past the end of the %" PRIu64 "-byte file sent",
                        ref->buffer, ref->file_offset, ref->file_offset + ref->length,
                        (uint64_t)st.st_size);
  }
  FdNature nature = fd_nature(fd);
  if (nature == FD_SEALABLE || (ref->kind == WIRE_FD_MEMFD && nature != FD_SEALED)) {
    return hurray__fail(error, HURRAY_EPROTOCOL,
                        "buffer %" PRIu32 ": the %s sent is not sealed against writing, "
                        "shrinking and growing",
                        ref->buffer,
                        ref->kind == WIRE_FD_MEMFD ? "memfd" : "'file' (a memfd that takes seals)");
  }
  if (desc->alignment > page || ref->file_offset % desc->alignment != 0) {
    return hurray__fail(error, HURRAY_EPROTOCOL,
                        "buffer %" PRIu32 ": offset %" PRIu64 " in the file sent does not give "
                        "its %" PRIu32 "-byte alignment",
                        ref->buffer, ref->file_offset, desc->alignment);
  }
  /* Mapped only where nobody can shrink the bytes (sealed), or where whoever could is a peer
     that could kill this process anyway; every other file is copied (ADR-078). */
  if (nature == FD_SHMEM_UNSEALED || (nature == FD_DISK && !map_disk_files)) {
    return copy_fd(fd, ref, desc, out, error);
  }
  uint64_t start = ref->file_offset / page * page, delta = ref->file_offset - start;
  if (ref->length > SIZE_MAX - delta) {
    return hurray__fail(error, HURRAY_ELIMIT, "buffer %" PRIu32 " of %" PRIu64
                        " bytes cannot be mapped here", ref->buffer, ref->length);
  }
  size_t length = (size_t)(delta + ref->length);
  /* Private and writable, as a file reader maps (source.c): a consumer that writes gets its
     own copy of the page, and nothing reaches the sender's memory. */
  uint8_t *base = mmap(NULL, length, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, (off_t)start);
  if (base == MAP_FAILED) {
    return hurray__fail(error, errno == ENOMEM ? HURRAY_ENOMEM : HURRAY_EIO,
                        "buffer %" PRIu32 ": mmap of the descriptor sent: %s", ref->buffer,
                        strerror(errno));
  }
  int status = hurray_buffer_wrap(base + delta, desc, 0, NULL, 0, unmap, NULL, out, error);
  if (status != HURRAY_OK) munmap(base, length);
  return status;
}
