/* output.c -- a file that appears at its path only when it is complete. Bytes go to a temporary
 * file in the destination's directory through a staging buffer; commit fsyncs it, renames it
 * over the destination and fsyncs the directory, so a crash at any moment leaves either the
 * previous file or the new one under the destination name, never a part of one. An output that
 * is not durable skips both fsyncs and keeps the rest: the rename is still atomic, which is all
 * a crash of the process can see; only a crash of the system may then lose the data (ADR-055).
 * The container writer (writer.c) and the converters (src/convert/) write every output through
 * this.
 *
 * The destination is a regular file or nothing; a symlink is followed and its final target
 * replaced in the target's own directory; anything else is refused (ADR-037).
 *
 * The temporary has no name while it is written where the file system has O_TMPFILE (ext4,
 * xfs, btrfs, tmpfs, overlayfs on Linux 6.6+): a writer killed mid-save leaves nothing. Commit
 * links it as `path.tmp-<pid>-<n>` and renames that over the destination at once. Elsewhere the
 * temporary is that named file from the start. Either way the writer holds an flock on it, and
 * every open removes the stale temporaries of the same destination, those whose writer died:
 * its pid is gone from this host and nobody holds the lock (ADR-080). */
#define _GNU_SOURCE /* O_TMPFILE, linkat's AT_SYMLINK_FOLLOW, flock, fallocate, sync_file_range */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "file.h"

#ifndef O_CLOEXEC
#define O_CLOEXEC 0
#endif

enum { STAGE_SIZE = 256u << 10, TEMP_ATTEMPTS = 100, MAX_SYMLINKS = 40 };
/* Large writes from the caller's memory go out in pieces that end at multiples of HASH_CHUNK
 * in the file, each read back and hashed by the read-back thread while the next is written; at
 * most HASH_LAG pieces wait for it. The page cache gives a buffered write folios no larger than
 * the aligned blocks one call covers whole, and only a 2 MiB folio at a 2 MiB offset can be
 * mapped by one page-table entry: pieces that cover whole 2 MiB blocks make the file's mapped
 * loads fault and miss the TLB 512 times less (1 MiB pieces at offset 64 never did). */
enum { HASH_CHUNK = 2u << 20, HASH_LAG = 8 };
/* The read-back thread reads a piece back through a buffer of this size, small enough that the
 * bytes the hash then reads are still in the core's L2 cache. */
enum { READ_BACK_BUFFER = 1u << 20 };
#define WRITEBACK_STEP ((uint64_t)8 << 20)
#define RESERVE_MIN ((uint64_t)1 << 20)
#define RESERVE_MAX ((uint64_t)64 << 20)

FileOutputFault hurray__output_fault;

/* The test hook that forces named temporaries, as on a file system without O_TMPFILE: private,
 * read by the tests of both paths only. */
#define NAMED_TEMPORARY_HOOK "_HURRAY_TEST_NAMED_TEMPORARY"

static atomic_uint g_counter; /* the <n> of path.tmp-<pid>-<n> */

/* Whether the test hook makes `step` fail now (with its errno, once). */
static bool fault(FileOutputStep step) {
  if (hurray__output_fault.step != step) return false;
  errno = hurray__output_fault.errno_value;
  hurray__output_fault = (FileOutputFault){0};
  return true;
}

static int io_failed(FileOutput *o, const char *what, HurrayError *error) {
  int code = errno;
  o->failed = true;
  if (code == EFAULT) { /* the kernel could not read the caller's bytes */
    return hurray__fail_errno(error, HURRAY_EIO, code,
                              "%s %s: the data being written is no longer readable (a mapped "
                              "input file shrank while it was read)",
                              what, o->temp_path ? o->temp_path : o->path);
  }
  return hurray__fail_errno(error, HURRAY_EIO, code, "%s %s: %s", what,
                            o->temp_path ? o->temp_path : o->path, strerror(code));
}

/* `name` resolved against the directory of the symlink `link`. */
static char *link_target(const char *link, const char *name) {
  const char *slash = name[0] == '/' ? NULL : strrchr(link, '/');
  size_t dir = slash == NULL ? 0 : (size_t)(slash - link) + 1, len = strlen(name);
  char *out = malloc(dir + len + 1);
  if (out == NULL) return NULL;
  memcpy(out, link, dir);
  memcpy(out + dir, name, len + 1);
  return out;
}

static const char *kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

/* The file a save to `path` replaces (ADR-037): `path` when it is a regular file or nothing;
 * through symlinks, their final target (which may not exist yet); anything else is refused,
 * so that a save never renames a file over a device, a FIFO or a directory. */
static int resolve_destination(const char *path, char **out, HurrayError *error) {
  size_t len = strlen(path);
  char *current = malloc(len + 1);
  if (current == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  memcpy(current, path, len + 1);
  for (int hops = 0;; hops++) {
    struct stat st;
    if (lstat(current, &st) != 0) {
      int code = errno;
      if (code == ENOENT) break; /* a new file: its directory's absence shows when creating it */
      free(current);
      return hurray__fail_errno(error, HURRAY_EIO, code, "%s: %s", path, strerror(code));
    }
    if (S_ISREG(st.st_mode)) break;
    if (!S_ISLNK(st.st_mode)) {
      bool linked = strcmp(current, path) != 0;
      int status = hurray__fail_errno(
          error, HURRAY_EIO, S_ISDIR(st.st_mode) ? EISDIR : 0,
          "%s%s%s is %s: only a regular file is replaced by a save", path, linked ? " -> " : "",
          linked ? current : "", kind_of(st.st_mode));
      free(current);
      return status;
    }
    if (hops == MAX_SYMLINKS) {
      free(current);
      return hurray__fail_errno(error, HURRAY_EIO, ELOOP, "%s: %s", path, strerror(ELOOP));
    }
    size_t size = st.st_size > 0 ? (size_t)st.st_size + 1 : 4096;
    char *name = malloc(size);
    ssize_t n = name == NULL ? -1 : readlink(current, name, size);
    if (n < 0 || (size_t)n >= size) {
      int code = name == NULL ? ENOMEM : n < 0 ? errno : ENAMETOOLONG;
      free(name);
      free(current);
      return code == ENOMEM ? hurray__fail(error, HURRAY_ENOMEM, "out of memory")
                            : hurray__fail_errno(error, HURRAY_EIO, code, "%s: %s", path,
                                                 strerror(code));
    }
    name[n] = '\0';
    char *next = link_target(current, name);
    free(name);
    free(current);
    if (next == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
    current = next;
  }
  *out = current;
  return HURRAY_OK;
}

/* The directory of `path` ("." for a bare name), malloc'd; NULL when out of memory. */
static char *directory_of(const char *path) {
  const char *slash = strrchr(path, '/');
  size_t len = slash == NULL ? 1 : slash == path ? 1 : (size_t)(slash - path); /* "/x": root */
  char *dir = malloc(len + 1);
  if (dir == NULL) return NULL;
  memcpy(dir, slash == NULL ? "." : path, len);
  dir[len] = '\0';
  return dir;
}

/* Whether `name` is `base` + ".tmp-<pid>-<n>` (decimal, as this writer names its temporaries);
 * the pid in *pid. */
static bool temporary_of(const char *name, const char *base, size_t base_len, long *pid) {
  if (strncmp(name, base, base_len) != 0 || strncmp(name + base_len, ".tmp-", 5) != 0) {
    return false;
  }
  const char *p = name + base_len + 5;
  long value = 0;
  size_t digits = 0;
  for (; *p >= '0' && *p <= '9'; p++, digits++) {
    if (value > (LONG_MAX - 9) / 10) return false;
    value = value * 10 + (*p - '0');
  }
  if (digits == 0 || *p++ != '-' || *p == '\0') return false;
  for (; *p != '\0'; p++) {
    if (*p < '0' || *p > '9') return false;
  }
  *pid = value;
  return value > 0;
}

/* Best effort, never failing the save: removes the temporaries of saves to `path` whose writer
 * died (killed mid-save, or in the moment between linking and renaming): the pid in the name is
 * not a live process of this host, the file is a regular file of ours, and no process holds
 * the lock every writer keeps on its temporary (on a shared file system the lock is what tells
 * a writer on another host, whose pid means nothing here, from a dead one). */
static void remove_stale_temporaries(const char *path) {
  char *dir_path = directory_of(path);
  const char *slash = strrchr(path, '/');
  const char *base = slash == NULL ? path : slash + 1;
  size_t base_len = strlen(base);
  DIR *dir = dir_path == NULL ? NULL : opendir(dir_path);
  free(dir_path);
  if (dir == NULL) return;
  int dfd = dirfd(dir);
  for (struct dirent *entry; (entry = readdir(dir)) != NULL;) {
    long pid = 0;
    if (!temporary_of(entry->d_name, base, base_len, &pid) || pid > INT_MAX ||
        pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH) {
      continue; /* not one, or its writer may live: EPERM is another user's live process */
    }
    int fd = openat(dfd, entry->d_name, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat held, named;
    if (fstat(fd, &held) == 0 && S_ISREG(held.st_mode) && held.st_uid == geteuid() &&
        flock(fd, LOCK_EX | LOCK_NB) == 0 &&
        fstatat(dfd, entry->d_name, &named, AT_SYMLINK_NOFOLLOW) == 0 &&
        named.st_dev == held.st_dev && named.st_ino == held.st_ino) {
      unlinkat(dfd, entry->d_name, 0);
    }
    close(fd);
  }
  closedir(dir);
}

static void temporary_name(const FileOutput *o, char *name, size_t size) {
  snprintf(name, size, "%s.tmp-%ld-%u", o->path, (long)getpid(),
           atomic_fetch_add(&g_counter, 1u));
}

/* An unnamed temporary in the destination's directory (O_TMPFILE), which commit can link: only
 * where /proc/self/fd names it (linkat through it needs no privilege). false: use a named one. */
static bool open_unnamed(FileOutput *o) {
  if (getenv(NAMED_TEMPORARY_HOOK) != NULL) return false;
  char *dir = directory_of(o->path);
  if (dir == NULL) return false;
  int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0666); /* umask applies, as to a named one */
  free(dir);
  if (fd < 0) return false; /* EOPNOTSUPP, EISDIR (no O_TMPFILE in the kernel), ... */
  char proc[64];
  struct stat st;
  snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
  if (stat(proc, &st) != 0) {
    close(fd);
    return false;
  }
  o->fd = fd;
  o->unnamed = true;
  return true;
}

static int open_temporary(FileOutput *o, HurrayError *error) {
  remove_stale_temporaries(o->path);
  size_t size = strlen(o->path) + 64;
  o->temp_path = malloc(size);
  if (o->temp_path == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  if (open_unnamed(o)) {
    free(o->temp_path);
    o->temp_path = NULL; /* until commit links it */
    flock(o->fd, LOCK_EX | LOCK_NB); /* held on the inode, through the name commit gives it */
    return HURRAY_OK;
  }
  for (int attempt = 0; attempt < TEMP_ATTEMPTS; attempt++) {
    temporary_name(o, o->temp_path, size);
    o->fd = open(o->temp_path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666); /* read back */
    if (o->fd >= 0) {
      flock(o->fd, LOCK_EX | LOCK_NB); /* tells the next save that this writer lives */
      return HURRAY_OK;
    }
    if (errno != EEXIST && errno != EINTR) break;
  }
  int code = errno;
  free(o->temp_path);
  o->temp_path = NULL;
  return hurray__fail_errno(error, HURRAY_EIO, code, "cannot create a temporary file for %s: %s",
                            o->path, strerror(code));
}

/* Gives the unnamed temporary its name, path.tmp-<pid>-<n>, just before the rename. */
static int link_temporary(FileOutput *o, HurrayError *error) {
  size_t size = strlen(o->path) + 64;
  char *name = malloc(size);
  if (name == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  char proc[64];
  snprintf(proc, sizeof proc, "/proc/self/fd/%d", o->fd);
  for (int attempt = 0; attempt < TEMP_ATTEMPTS; attempt++) {
    temporary_name(o, name, size);
    if (linkat(AT_FDCWD, proc, AT_FDCWD, name, AT_SYMLINK_FOLLOW) == 0) {
      o->temp_path = name; /* from now on a failure unlinks it */
      return HURRAY_OK;
    }
    if (errno != EEXIST && errno != EINTR) break;
  }
  free(name);
  return io_failed(o, "cannot link the temporary file of", error);
}

int hurray__output_open(FileOutput *o, const char *path, bool durable, HurrayError *error) {
  *o = (FileOutput){.fd = -1, .durable = durable};
  int status = resolve_destination(path, &o->path, error);
  o->stage = status == HURRAY_OK ? malloc(STAGE_SIZE) : NULL;
  if (status == HURRAY_OK && o->stage == NULL) {
    status = hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  }
  if (status == HURRAY_OK) status = open_temporary(o, error);
  if (status != HURRAY_OK) hurray__output_close(o);
  return status;
}

static void read_back_stop(FileOutput *o);

void hurray__output_close(FileOutput *o) {
  read_back_stop(o);
  if (o->fd >= 0) close(o->fd);
  if (o->temp_path != NULL) unlink(o->temp_path); /* not committed: nothing appears */
  free(o->temp_path);
  free(o->path);
  free(o->stage);
  *o = (FileOutput){.fd = -1};
}

/* Allocates the file's blocks ahead of the writes that reach `end` (ext4's delayed allocation
 * otherwise costs each write a third of its time): in steps that double with the file, from
 * RESERVE_MIN up to RESERVE_MAX past `end`, commit cutting off what was not written. A file
 * system without fallocate is written as before; ENOSPC for the step ahead asks for exactly
 * `end` (so a file that fits is never refused for the reserve) and for that is the write's
 * failure. */
static int reserve(FileOutput *o, uint64_t end, HurrayError *error) {
#ifdef __linux__
  if (end <= o->reserved || o->reserve_unsupported) return HURRAY_OK;
  uint64_t ahead = end < RESERVE_MIN ? RESERVE_MIN : end > RESERVE_MAX ? RESERVE_MAX : end;
  uint64_t want = end + ahead;
  int rc = fallocate(o->fd, 0, (off_t)o->reserved, (off_t)(want - o->reserved));
  if (rc != 0 && errno == ENOSPC) {
    want = end;
    rc = fallocate(o->fd, 0, (off_t)o->reserved, (off_t)(want - o->reserved));
    if (rc != 0 && errno == ENOSPC) return io_failed(o, "cannot write", error);
  }
  if (rc != 0) {
    o->reserve_unsupported = true; /* EOPNOTSUPP and the like: the writes will say what fails */
    return HURRAY_OK;
  }
  o->reserved = want;
#else
  (void)o, (void)end, (void)error;
#endif
  return HURRAY_OK;
}

/* A durable output starts the writeback of what it wrote every WRITEBACK_STEP bytes, so that the
 * disk writes while the next bytes are produced and commit's fsync waits for the last step
 * only, not for the whole file (sync_file_range's SYNC_FILE_RANGE_WRITE: asynchronous, no
 * promise; the fsync is still what makes the file durable, and what reports a failure). */
static void start_writeback(FileOutput *o, uint64_t end) {
#ifdef __linux__
  if (!o->durable || end < o->written_back + WRITEBACK_STEP) return;
  (void)sync_file_range(o->fd, (off_t)o->written_back, (off_t)(end - o->written_back),
                        SYNC_FILE_RANGE_WRITE);
  o->written_back = end;
#else
  (void)o, (void)end;
#endif
}

/* Writes the `count` pieces of `iov` (consumed as they go) at `offset`, as one call where the
 * kernel takes it all. */
static int pwritev_all(FileOutput *o, struct iovec *iov, int count, uint64_t offset,
                       HurrayError *error) {
  uint64_t len = 0;
  for (int i = 0; i < count; i++) len += iov[i].iov_len;
  int status = reserve(o, offset + len, error);
  if (status != HURRAY_OK) return status;
  while (count > 0) {
    if (iov->iov_len == 0) {
      iov++, count--;
      continue;
    }
    ssize_t n = pwritev(o->fd, iov, count, (off_t)offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return io_failed(o, "cannot write", error);
    offset += (uint64_t)n;
    for (size_t left = (size_t)n; left > 0;) {
      size_t step = left < iov->iov_len ? left : iov->iov_len;
      iov->iov_base = (uint8_t *)iov->iov_base + step;
      iov->iov_len -= step;
      left -= step;
      if (iov->iov_len == 0) iov++, count--;
    }
  }
  start_writeback(o, offset);
  return HURRAY_OK;
}

static int pwrite_all(FileOutput *o, const uint8_t *data, size_t len, uint64_t offset,
                      HurrayError *error) {
  struct iovec iov = {(void *)data, len};
  return pwritev_all(o, &iov, 1, offset, error);
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

/* Reads `len` bytes of the file back from `at` through `buffer` (`size` bytes) into `hasher`:
 * 0, or the errno that stopped it (EIO for a file that shrank under us). */
static int hash_back(int fd, uint8_t *buffer, size_t size, uint64_t at, uint64_t len,
                     FileHasher *hasher) {
  for (uint64_t done = 0; done < len;) {
    ssize_t n = pread(fd, buffer, len - done < size ? (size_t)(len - done) : size,
                      (off_t)(at + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n == 0 ? EIO : errno;
    hurray__hasher_update(hasher, buffer, (size_t)n);
    done += (uint64_t)n;
  }
  return 0;
}

/* ---- the read-back thread: what was written is hashed while the next piece is written ----- */

typedef struct ReadBackJob {
  FileHasher *hasher;
  const uint8_t *memory; /* NULL: hash bytes [at, at + len) of the file; else these bytes */
  uint64_t at, len;
} ReadBackJob;

struct FileReadBack {
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t changed; /* a job was queued or finished, or stop was asked */
  ReadBackJob jobs[HASH_LAG];
  unsigned head, queued; /* jobs[head] runs next; `queued` wait */
  bool running;          /* the thread has taken a job and not finished it */
  bool stop;
  int err; /* the first errno a read back stopped with */
  int fd;
  uint8_t buffer[READ_BACK_BUFFER];
};

static void *read_back_main(void *arg) {
  FileReadBack *rb = arg;
  pthread_mutex_lock(&rb->lock);
  for (;;) {
    while (rb->queued == 0 && !rb->stop) pthread_cond_wait(&rb->changed, &rb->lock);
    if (rb->queued == 0) break;
    ReadBackJob job = rb->jobs[rb->head];
    rb->head = (rb->head + 1) % HASH_LAG;
    rb->queued--;
    rb->running = true;
    bool skip = rb->err != 0; /* after a failure the hashes no longer matter */
    pthread_mutex_unlock(&rb->lock);
    int err = 0;
    if (!skip && job.memory != NULL) {
      hurray__hasher_update(job.hasher, job.memory, (size_t)job.len);
    } else if (!skip) {
      err = hash_back(rb->fd, rb->buffer, sizeof rb->buffer, job.at, job.len, job.hasher);
    }
    pthread_mutex_lock(&rb->lock);
    if (rb->err == 0) rb->err = err;
    rb->running = false;
    pthread_cond_broadcast(&rb->changed);
  }
  pthread_mutex_unlock(&rb->lock);
  return NULL;
}

/* The output's read-back thread, started at its first large write; NULL where none can be
 * started (the writer then reads back itself). */
static FileReadBack *read_back(FileOutput *o) {
  if (o->read_back != NULL || o->read_back_unavailable) return o->read_back;
  FileReadBack *rb = malloc(sizeof *rb);
  if (rb != NULL) {
    memset(rb, 0, offsetof(FileReadBack, buffer));
    rb->fd = o->fd;
    pthread_mutex_init(&rb->lock, NULL);
    pthread_cond_init(&rb->changed, NULL);
    if (pthread_create(&rb->thread, NULL, read_back_main, rb) != 0) {
      pthread_cond_destroy(&rb->changed);
      pthread_mutex_destroy(&rb->lock);
      free(rb);
      rb = NULL;
    }
  }
  o->read_back = rb;
  o->read_back_unavailable = rb == NULL;
  return rb;
}

/* Queues [at, at + len) of the file for `hasher`, waiting while HASH_LAG pieces wait. */
static void read_back_queue(FileReadBack *rb, FileHasher *hasher, const uint8_t *memory,
                            uint64_t at, uint64_t len) {
  pthread_mutex_lock(&rb->lock);
  while (rb->queued == HASH_LAG) pthread_cond_wait(&rb->changed, &rb->lock);
  rb->jobs[(rb->head + rb->queued) % HASH_LAG] = (ReadBackJob){hasher, memory, at, len};
  rb->queued++;
  pthread_cond_broadcast(&rb->changed);
  pthread_mutex_unlock(&rb->lock);
}

int hurray__output_settle(FileOutput *o, HurrayError *error) {
  FileReadBack *rb = o->read_back;
  if (rb == NULL) return HURRAY_OK;
  pthread_mutex_lock(&rb->lock);
  while (rb->queued > 0 || rb->running) pthread_cond_wait(&rb->changed, &rb->lock);
  int err = rb->err;
  rb->err = 0;
  pthread_mutex_unlock(&rb->lock);
  if (err == 0) return HURRAY_OK;
  errno = err;
  return io_failed(o, "cannot read back", error);
}

static void read_back_stop(FileOutput *o) {
  FileReadBack *rb = o->read_back;
  if (rb == NULL) return;
  pthread_mutex_lock(&rb->lock);
  rb->stop = true;
  pthread_cond_broadcast(&rb->changed);
  pthread_mutex_unlock(&rb->lock);
  pthread_join(rb->thread, NULL);
  pthread_cond_destroy(&rb->changed);
  pthread_mutex_destroy(&rb->lock);
  free(rb);
  o->read_back = NULL;
}

/* Writes `len` bytes straight from the caller's memory (the kernel's copy fails cleanly where
 * the memory went away) in pieces that end at multiples of HASH_CHUNK in the file, each hashed
 * as read back from the file: by the read-back thread while the next piece is written, or here
 * where there is none. */
static int write_read_back(FileOutput *o, const uint8_t *data, uint64_t len, FileHasher *hasher,
                           HurrayError *error) {
  FileReadBack *rb = read_back(o);
  int status = HURRAY_OK;
  for (uint64_t done = 0; done < len && status == HURRAY_OK;) {
    size_t to_boundary = HASH_CHUNK - (size_t)(o->flushed % HASH_CHUNK);
    size_t n = len - done < to_boundary ? (size_t)(len - done) : to_boundary;
    status = pwrite_all(o, data + done, n, o->flushed, error);
    if (status == HURRAY_OK && rb != NULL) {
      read_back_queue(rb, hasher, NULL, o->flushed, n);
    } else if (status == HURRAY_OK) {
      int err = hash_back(o->fd, o->stage, STAGE_SIZE, o->flushed, n, hasher);
      if (err != 0) {
        errno = err;
        status = io_failed(o, "cannot read back", error);
      }
    }
    if (status == HURRAY_OK) o->flushed += n;
    done += n;
  }
  if (status != HURRAY_OK) hurray__output_settle(o, NULL); /* the write's error is the one */
  return status;
}

/* Owned bytes (nobody changes them meanwhile) are hashed as they are by the output's thread
 * while they are written (here, where it has none). What is staged and `data` go out as one
 * call up to the last multiple of HASH_CHUNK in the file they reach, and a tail past it of
 * less than STAGE_SIZE bytes stays staged: a stream of chunks at any offset (convert's) then
 * covers every 2 MiB block it crosses in one call (see HASH_CHUNK). */
static int write_owned(FileOutput *o, const uint8_t *data, size_t len, FileHasher *hasher,
                       HurrayError *error) {
  int status = hurray__output_settle(o, error); /* `hasher` takes its bytes in file order */
  if (status != HURRAY_OK) return status;
  FileReadBack *rb = read_back(o);
  if (rb != NULL) {
    read_back_queue(rb, hasher, data, 0, len);
  } else {
    hurray__hasher_update(hasher, data, len);
  }
  size_t tail = (size_t)((o->flushed + o->staged + len) % HASH_CHUNK);
  if (tail >= STAGE_SIZE || tail >= len) tail = 0;
  struct iovec iov[2] = {{o->stage, o->staged}, {(void *)data, len - tail}};
  status = pwritev_all(o, iov, 2, o->flushed, error);
  if (status == HURRAY_OK) {
    o->flushed += o->staged + len - tail;
    memcpy(o->stage, data + len - tail, tail);
    o->staged = tail;
  }
  int settled = hurray__output_settle(o, status == HURRAY_OK ? error : NULL);
  return status == HURRAY_OK ? settled : status;
}

int hurray__output_write_hashed(FileOutput *o, const void *data, size_t len, FileHasher *hasher,
                                bool owned, HurrayError *error) {
  if (o->failed) return hurray__fail(error, HURRAY_EIO, "%s: an earlier write failed", o->path);
  if (len >= STAGE_SIZE && owned) return write_owned(o, data, len, hasher, error);
  int status = len > STAGE_SIZE - o->staged ? flush(o, error) : HURRAY_OK;
  if (status != HURRAY_OK) return status;
  if (len >= STAGE_SIZE) return write_read_back(o, data, len, hasher, error);
  status = hurray__output_settle(o, error); /* `hasher` takes its bytes in file order */
  if (status != HURRAY_OK) return status;
  /* hashed as copied: later changes to `data` do not reach the file */
  if (len > 0) memcpy(o->stage + o->staged, data, len);
  hurray__hasher_update(hasher, o->stage + o->staged, len);
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
  hurray__output_settle(o, NULL); /* what is read back now belongs to the bytes rewound */
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
  char *dir = directory_of(path);
  if (dir == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  int fd = open(dir, O_RDONLY | O_CLOEXEC);
  int status = HURRAY_OK;
  if (fd < 0 || fault(OUTPUT_STEP_SYNC_DIRECTORY) || fsync(fd) != 0) {
    int code = errno;
    status = hurray__fail_errno(error, HURRAY_EIO, code, "cannot sync the directory of %s: %s",
                                path, strerror(code));
  }
  if (fd >= 0) close(fd);
  free(dir);
  return status;
}

int hurray__output_commit(FileOutput *o, HurrayError *error) {
  if (o->failed) return hurray__fail(error, HURRAY_EIO, "%s: an earlier write failed", o->path);
  uint64_t size = hurray__output_position(o);
  int status = hurray__output_settle(o, error);
  if (status == HURRAY_OK) status = flush(o, error);
  if (status == HURRAY_OK && (fault(OUTPUT_STEP_TRUNCATE) || ftruncate(o->fd, (off_t)size) != 0)) {
    status = io_failed(o, "cannot truncate", error); /* drops rewound bytes */
  }
  if (status == HURRAY_OK && o->durable && (fault(OUTPUT_STEP_SYNC) || fsync(o->fd) != 0)) {
    status = io_failed(o, "cannot sync", error);
  }
  if (status == HURRAY_OK && o->unnamed) status = link_temporary(o, error);
  if (status == HURRAY_OK) {
    int rc = close(o->fd);
    o->fd = -1;
    if (rc != 0) status = io_failed(o, "cannot close", error);
  }
  if (status == HURRAY_OK && (fault(OUTPUT_STEP_RENAME) || rename(o->temp_path, o->path) != 0)) {
    status = io_failed(o, "cannot rename into place", error);
  }
  if (status != HURRAY_OK) return status;
  free(o->temp_path);
  o->temp_path = NULL; /* renamed: close must not unlink it */
  o->renamed = true;
  return o->durable ? sync_directory(o->path, error) : HURRAY_OK;
}
