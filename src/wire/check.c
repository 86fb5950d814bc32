/* check.c -- a served file's buffers as the server reads them (ADR-084): through the file's
 * descriptor with pread, one check chunk (WIRE_CHECK_CHUNK bytes of the buffer) at a time,
 * never through the file's mapping, so that a file truncated in place is a short read (an
 * ERROR for the request), not SIGBUS. A range is served only from chunks whose hash equals the
 * hash of the same chunk in a read of the whole buffer that matched its stored checksum. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wire.h"

int hurray__wire_file_init(WireFile *f, int fd, uint64_t offset, uint64_t size,
                           uint64_t checksum, uint32_t buffer, HurrayError *error) {
  memset(f, 0, sizeof *f);
  if (offset > UINT64_MAX - size || offset + size > (uint64_t)INT64_MAX) {
    return hurray__fail(error, HURRAY_EOVERFLOW, "buffer %" PRIu32 " lies past any file offset",
                        buffer);
  }
  f->fd = fd;
  f->offset = offset;
  f->size = size;
  f->checksum = checksum;
  f->buffer = buffer;
  f->verdict = WIRE_UNVERIFIED;
  pthread_mutex_init(&f->lock, NULL);
  return HURRAY_OK;
}

void hurray__wire_file_reset(WireFile *f) {
  pthread_mutex_destroy(&f->lock);
  free(f->chunks);
  memset(f, 0, sizeof *f);
}

/* The identity of the file behind `fd` now: device, inode, size, modification time. */
static int file_identity(const WireFile *f, WireFileId *out, HurrayError *error) {
  struct stat st;
  if (fstat(f->fd, &st) != 0) {
    return hurray__fail_errno(error, HURRAY_EIO, errno, "tensor '%s': fstat: %s", f->tensor,
                              strerror(errno));
  }
  *out = (WireFileId){.dev = (uint64_t)st.st_dev,
                      .ino = (uint64_t)st.st_ino,
                      .size = (uint64_t)st.st_size,
                      .mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec};
  return HURRAY_OK;
}

static bool same_identity(const WireFileId *a, const WireFileId *b) {
  return a->dev == b->dev && a->ino == b->ino && a->size == b->size && a->mtime_ns == b->mtime_ns;
}

int hurray__wire_file_holds(const WireFile *f, uint64_t end, HurrayError *error) {
  struct stat st;
  if (fstat(f->fd, &st) != 0) {
    return hurray__fail_errno(error, HURRAY_EIO, errno, "tensor '%s': fstat: %s", f->tensor,
                              strerror(errno));
  }
  if ((uint64_t)st.st_size >= f->offset + end) return HURRAY_OK;
  return hurray__fail(error, HURRAY_EIO,
                      "tensor '%s': its file shrank while served: buffer %" PRIu32
                      " needs bytes up to %" PRIu64 " of it, which now ends at byte %" PRIu64,
                      f->tensor, f->buffer, f->offset + f->size, (uint64_t)st.st_size);
}

int hurray__wire_file_short(const WireFile *f, HurrayError *error) {
  int status = hurray__wire_file_holds(f, f->size, error);
  return status != HURRAY_OK ? status /* it shrank: the usual case */
                             : hurray__fail(error, HURRAY_EIO,
                                            "tensor '%s' buffer %" PRIu32
                                            ": a read of its file came short of its size",
                                            f->tensor, f->buffer);
}

/* Reads check chunk `k` whole into `stage`: *len bytes. A short read means the file shrank. */
static int read_chunk(const WireFile *f, uint64_t k, uint8_t *stage, size_t *len,
                      HurrayError *error) {
  uint64_t begin = k * WIRE_CHECK_CHUNK;
  size_t want = (size_t)(f->size - begin < WIRE_CHECK_CHUNK ? f->size - begin : WIRE_CHECK_CHUNK);
  size_t got = 0;
  while (got < want) {
    ssize_t n = pread(f->fd, stage + got, want - got, (off_t)(f->offset + begin + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return hurray__fail_errno(error, HURRAY_EIO, errno, "tensor '%s' buffer %" PRIu32 ": pread: %s",
                                f->tensor, f->buffer, strerror(errno));
    }
    if (n == 0) return hurray__wire_file_short(f, error);
    got += (size_t)n;
  }
  *len = want;
  return HURRAY_OK;
}

int hurray__wire_file_chunk(WireFile *f, uint64_t at, bool checked, uint8_t *stage,
                            uint64_t *begin, size_t *len, HurrayError *error) {
  uint64_t k = at / WIRE_CHECK_CHUNK;
  *begin = k * WIRE_CHECK_CHUNK;
  int status = read_chunk(f, k, stage, len, error);
  if (status != HURRAY_OK || !checked) return status;
  uint64_t sum = hurray__xxh3(stage, *len);
  pthread_mutex_lock(&f->lock);
  int verdict = f->verdict;
  bool match = verdict == HURRAY_OK && sum == f->chunks[k];
  pthread_mutex_unlock(&f->lock);
  if (match) return HURRAY_OK;
  if (verdict != HURRAY_OK) { /* verified before any checked read (the server's order) */
    return hurray__fail(error, HURRAY_ECHECKSUM, "tensor '%s' buffer %" PRIu32 " is not verified",
                        f->tensor, f->buffer);
  }
  return hurray__fail(error, HURRAY_ECHECKSUM,
                      "tensor '%s' buffer %" PRIu32 ": bytes [%" PRIu64 ", %" PRIu64
                      ") changed in the file since they were verified against its stored checksum",
                      f->tensor, f->buffer, *begin, *begin + *len);
}

/* The verdict for identity `id`, if the one remembered is for it: its status (and message). */
static bool remembered(WireFile *f, const WireFileId *id, int *status, HurrayError *error) {
  pthread_mutex_lock(&f->lock);
  bool known = f->verdict != WIRE_UNVERIFIED && same_identity(&f->id, id);
  int verdict = f->verdict;
  uint64_t actual = f->actual;
  pthread_mutex_unlock(&f->lock);
  if (!known) return false;
  *status = verdict == HURRAY_OK
                ? HURRAY_OK
                : hurray__fail(error, HURRAY_ECHECKSUM,
                               "tensor '%s' buffer %" PRIu32 " does not match its stored "
                               "checksum (0x%016" PRIx64 ", the file holds 0x%016" PRIx64
                               "): ranges of it are not served",
                               f->tensor, f->buffer, f->checksum, actual);
  return true;
}

bool hurray__wire_file_verified(WireFile *f) {
  WireFileId id;
  int status = HURRAY_OK;
  return file_identity(f, &id, NULL) == HURRAY_OK && remembered(f, &id, &status, NULL) &&
         status == HURRAY_OK;
}

int hurray__wire_file_verify(WireFile *f, uint8_t *stage, const atomic_bool *cancel,
                             HurrayError *error) {
  WireFileId id;
  int status = file_identity(f, &id, error);
  if (status != HURRAY_OK || remembered(f, &id, &status, error)) return status;
  uint64_t nchunks = f->size / WIRE_CHECK_CHUNK + (f->size % WIRE_CHECK_CHUNK != 0);
  uint64_t *chunks = malloc((size_t)nchunks * sizeof *chunks + 1);
  FileHasher *h = hurray__hasher_create();
  if (chunks == NULL || h == NULL) status = hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  for (uint64_t k = 0; status == HURRAY_OK && k < nchunks; k++) {
    size_t len = 0;
    if (atomic_load(cancel)) {
      status = hurray__fail(error, HURRAY_ESTATE, "the server is stopping");
      break;
    }
    status = read_chunk(f, k, stage, &len, error);
    if (status == HURRAY_OK) {
      hurray__hasher_update(h, stage, len);
      chunks[k] = hurray__xxh3(stage, len);
    }
  }
  uint64_t actual = hurray__hasher_digest(h);
  hurray__hasher_destroy(h);
  if (status != HURRAY_OK) {
    free(chunks);
    return status;
  }
  pthread_mutex_lock(&f->lock);
  free(f->chunks);
  f->id = id;
  f->actual = actual;
  f->verdict = actual == f->checksum ? HURRAY_OK : HURRAY_ECHECKSUM;
  f->chunks = actual == f->checksum ? chunks : NULL;
  pthread_mutex_unlock(&f->lock);
  if (actual != f->checksum) free(chunks);
  remembered(f, &id, &status, error);
  return status;
}
