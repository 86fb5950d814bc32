/* output.c -- a file that appears at its path only when it is complete. Bytes go to a temporary
 * file in the destination's directory through a staging buffer; commit fsyncs it, renames it
 * over the destination and fsyncs the directory, so a crash at any moment leaves either the
 * previous file or the new one under the destination name, never a part of one. The container
 * writer (writer.c) and the converters (src/convert/) write every output through this. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "file.h"

#ifndef O_CLOEXEC
#define O_CLOEXEC 0
#endif

enum { STAGE_SIZE = 256u << 10, TEMP_ATTEMPTS = 100 };

static int io_failed(FileOutput *o, const char *what, HurrayError *error) {
  int code = errno;
  o->failed = true;
  return hurray__fail(error, HURRAY_EIO, "%s %s: %s", what, o->temp_path ? o->temp_path : o->path,
                      strerror(code));
}

static int open_temporary(FileOutput *o, HurrayError *error) {
  static atomic_uint counter;
  size_t size = strlen(o->path) + 64;
  o->temp_path = malloc(size);
  if (o->temp_path == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  for (int attempt = 0; attempt < TEMP_ATTEMPTS; attempt++) {
    snprintf(o->temp_path, size, "%s.tmp-%ld-%u", o->path, (long)getpid(),
             atomic_fetch_add(&counter, 1u));
    o->fd = open(o->temp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (o->fd >= 0) return HURRAY_OK;
    if (errno != EEXIST && errno != EINTR) break;
  }
  int code = errno;
  free(o->temp_path);
  o->temp_path = NULL;
  return hurray__fail(error, HURRAY_EIO, "cannot create a temporary file for %s: %s", o->path,
                      strerror(code));
}

int hurray__output_open(FileOutput *o, const char *path, HurrayError *error) {
  *o = (FileOutput){.fd = -1};
  size_t len = strlen(path);
  o->path = malloc(len + 1);
  o->stage = malloc(STAGE_SIZE);
  int status = HURRAY_OK;
  if (o->path == NULL || o->stage == NULL) {
    status = hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  } else {
    memcpy(o->path, path, len + 1);
    status = open_temporary(o, error);
  }
  if (status != HURRAY_OK) hurray__output_close(o);
  return status;
}

void hurray__output_close(FileOutput *o) {
  if (o->fd >= 0) close(o->fd);
  if (o->temp_path != NULL) unlink(o->temp_path); /* not committed: nothing appears */
  free(o->temp_path);
  free(o->path);
  free(o->stage);
  *o = (FileOutput){.fd = -1};
}

static int pwrite_all(FileOutput *o, const uint8_t *data, size_t len, uint64_t offset,
                      HurrayError *error) {
  while (len > 0) {
    ssize_t n = pwrite(o->fd, data, len, (off_t)offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return io_failed(o, "cannot write", error);
    data += n;
    len -= (size_t)n;
    offset += (uint64_t)n;
  }
  return HURRAY_OK;
}

static int flush(FileOutput *o, HurrayError *error) {
  int status = pwrite_all(o, o->stage, o->staged, o->flushed, error);
  if (status == HURRAY_OK) {
    o->flushed += o->staged;
    o->staged = 0;
  }
  return status;
}

int hurray__output_write(FileOutput *o, const void *data, size_t len, HurrayError *error) {
  if (o->failed) return hurray__fail(error, HURRAY_EIO, "%s: an earlier write failed", o->path);
  if (len > STAGE_SIZE - o->staged) {
    int status = flush(o, error);
    if (status != HURRAY_OK) return status;
    if (len >= STAGE_SIZE) { /* large writes go straight from the caller's memory */
      status = pwrite_all(o, data, len, o->flushed, error);
      if (status == HURRAY_OK) o->flushed += len;
      return status;
    }
  }
  if (len > 0) memcpy(o->stage + o->staged, data, len);
  o->staged += len;
  return HURRAY_OK;
}

int hurray__output_zeros(FileOutput *o, uint64_t len, HurrayError *error) {
  static const uint8_t zeros[4096];
  int status = HURRAY_OK;
  while (len > 0 && status == HURRAY_OK) {
    size_t n = len < sizeof zeros ? (size_t)len : sizeof zeros;
    status = hurray__output_write(o, zeros, n, error);
    len -= n;
  }
  return status;
}

void hurray__output_rewind(FileOutput *o, uint64_t position) {
  if (position >= o->flushed) {
    o->staged = (size_t)(position - o->flushed);
  } else { /* already on disk: later bytes overwrite it, commit cuts off the rest */
    o->staged = 0;
    o->flushed = position;
  }
}

int hurray__output_patch(FileOutput *o, uint64_t offset, const void *data, size_t len,
                         HurrayError *error) {
  if (o->failed) return hurray__fail(error, HURRAY_EIO, "%s: an earlier write failed", o->path);
  uint64_t end = 0;
  if (hurray__add_u64(offset, len, &end) || end > hurray__output_position(o)) {
    return hurray__fail(error, HURRAY_EINVAL, "patch past the bytes written to %s", o->path);
  }
  const uint8_t *bytes = data;
  size_t on_disk = 0;
  if (offset < o->flushed) {
    on_disk = o->flushed - offset < len ? (size_t)(o->flushed - offset) : len;
    int status = pwrite_all(o, bytes, on_disk, offset, error);
    if (status != HURRAY_OK) return status;
  }
  if (on_disk < len) {
    memcpy(o->stage + (offset + on_disk - o->flushed), bytes + on_disk, len - on_disk);
  }
  return HURRAY_OK;
}

static int sync_directory(const char *path, HurrayError *error) {
  const char *slash = strrchr(path, '/');
  char *dir = slash == NULL ? NULL : malloc((size_t)(slash - path) + 2);
  if (slash != NULL && dir == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  if (dir != NULL) {
    size_t len = slash == path ? 1 : (size_t)(slash - path); /* "/name": the root */
    memcpy(dir, path, len);
    dir[len] = '\0';
  }
  int fd = open(dir != NULL ? dir : ".", O_RDONLY | O_CLOEXEC);
  int status = HURRAY_OK;
  if (fd < 0 || fsync(fd) != 0) {
    status = hurray__fail(error, HURRAY_EIO, "cannot sync the directory of %s: %s", path,
                          strerror(errno));
  }
  if (fd >= 0) close(fd);
  free(dir);
  return status;
}

int hurray__output_commit(FileOutput *o, HurrayError *error) {
  if (o->failed) return hurray__fail(error, HURRAY_EIO, "%s: an earlier write failed", o->path);
  uint64_t size = hurray__output_position(o);
  int status = flush(o, error);
  if (status == HURRAY_OK && ftruncate(o->fd, (off_t)size) != 0) {
    status = io_failed(o, "cannot truncate", error); /* drops rewound bytes */
  }
  if (status == HURRAY_OK && fsync(o->fd) != 0) status = io_failed(o, "cannot sync", error);
  if (status == HURRAY_OK) {
    int rc = close(o->fd);
    o->fd = -1;
    if (rc != 0) status = io_failed(o, "cannot close", error);
  }
  if (status == HURRAY_OK && rename(o->temp_path, o->path) != 0) {
    status = io_failed(o, "cannot rename into place", error);
  }
  if (status != HURRAY_OK) return status;
  free(o->temp_path);
  o->temp_path = NULL; /* renamed: close must not unlink it */
  return sync_directory(o->path, error);
}
