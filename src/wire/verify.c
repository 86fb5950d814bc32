/* verify.c -- checking the XXH3-64 of a large received buffer on a second thread (ADR-065).
 * The client makes a buffer's bytes final in order (received from the socket, or a mapped
 * descriptor's pages made present) and publishes how far they are; a helper thread hashes
 * behind that mark. Checking every byte then overlaps the receive instead of following it,
 * and the bytes are hashed while they are still in the cache. For a buffer being received, the
 * helper also faults its pages in a little ahead of the mark (the kernel zeroing new memory is
 * most of what a receive costs), so that the receiving thread mostly copies. Small buffers, a
 * machine with one CPU, or a thread that cannot be made: the publishing thread hashes, as
 * before, and the receive faults the pages in. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include "wire.h"

/* Buffers smaller than this are hashed on the receiving thread: a thread costs more. */
#define VERIFY_THREAD_MIN ((uint64_t)8 << 20)
/* How far past the published mark the helper faults a received buffer's pages in. */
#define VERIFY_AHEAD ((uint64_t)4 * WIRE_VERIFY_STEP)

static uintptr_t page_mask(void) {
  long page = sysconf(_SC_PAGESIZE);
  return page > 0 ? (uintptr_t)page - 1 : 4095u;
}

/* Makes the pages of bytes [from, from + len) of `base` present (MADV_POPULATE_READ or _WRITE);
 * false where the kernel cannot (older than 5.14), and then the bytes' first touch does it. */
static bool populate(const uint8_t *base, uint64_t from, uint64_t len, int advice) {
  uintptr_t start = (uintptr_t)(base + from) & ~page_mask(), end = (uintptr_t)(base + from + len);
  return madvise((void *)start, end - start, advice) == 0;
}

static void *hash_behind(void *arg) {
  WireVerifier *v = arg;
  uint64_t faulted = v->hashed; /* pages made present up to here (the helper's own) */
  bool ahead = v->prefault;
  pthread_mutex_lock(&v->lock);
  for (;;) {
    uint64_t from = v->hashed, upto = v->published;
    if (ahead && !v->closing && faulted < v->size && faulted < upto + VERIFY_AHEAD) {
      uint64_t step = v->size - faulted < WIRE_VERIFY_STEP ? v->size - faulted : WIRE_VERIFY_STEP;
      pthread_mutex_unlock(&v->lock);
#ifdef MADV_POPULATE_WRITE
      ahead = populate(v->base, faulted, step, MADV_POPULATE_WRITE);
#else
      ahead = false;
#endif
      faulted += step;
      pthread_mutex_lock(&v->lock);
    } else if (from < upto) {
      pthread_mutex_unlock(&v->lock);
      hurray__hasher_update(v->hasher, v->base + from, (size_t)(upto - from));
      pthread_mutex_lock(&v->lock);
      v->hashed = upto;
    } else if (v->closing) {
      break; /* and all of it hashed */
    } else {
      pthread_cond_wait(&v->more, &v->lock);
    }
  }
  pthread_mutex_unlock(&v->lock);
  return NULL;
}

static bool start_thread(WireVerifier *v) {
  if (pthread_mutex_init(&v->lock, NULL) != 0) return false;
  if (pthread_cond_init(&v->more, NULL) != 0) {
    pthread_mutex_destroy(&v->lock);
    return false;
  }
  sigset_t all, old; /* the helper takes no signals: they stay with the caller's threads */
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  bool made = pthread_create(&v->thread, NULL, hash_behind, v) == 0;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (!made) {
    pthread_cond_destroy(&v->more);
    pthread_mutex_destroy(&v->lock);
  }
  return made;
}

void hurray__wire_verifier_start(WireVerifier *v, FileHasher *hasher, const uint8_t *base,
                                 uint64_t from, uint64_t size, bool prefault) {
  v->hasher = hasher;
  v->base = base;
  v->size = size;
  v->prefault = prefault;
  v->published = v->hashed = from;
  v->closing = false;
  v->running = true;
  v->threaded = size - from >= VERIFY_THREAD_MIN && sysconf(_SC_NPROCESSORS_ONLN) > 1 &&
                start_thread(v);
}

void hurray__wire_verifier_publish(WireVerifier *v, uint64_t upto) {
  if (!v->threaded) {
    hurray__hasher_update(v->hasher, v->base + v->published, (size_t)(upto - v->published));
    v->published = v->hashed = upto;
    return;
  }
  pthread_mutex_lock(&v->lock);
  v->published = upto;
  pthread_cond_signal(&v->more);
  pthread_mutex_unlock(&v->lock);
}

void hurray__wire_verifier_finish(WireVerifier *v) {
  if (!v->running) return;
  v->running = false;
  if (!v->threaded) return;
  pthread_mutex_lock(&v->lock);
  v->closing = true;
  pthread_cond_signal(&v->more);
  pthread_mutex_unlock(&v->lock);
  pthread_join(v->thread, NULL);
  pthread_cond_destroy(&v->more);
  pthread_mutex_destroy(&v->lock);
  v->threaded = false;
}

void hurray__wire_verify_mapped(FileHasher *hasher, const uint8_t *data, uint64_t len) {
  WireVerifier v;
  hurray__wire_verifier_start(&v, hasher, data, 0, len, false);
  bool present = true;
  for (uint64_t done = 0; done < len;) {
    uint64_t step = len - done < WIRE_VERIFY_STEP ? len - done : WIRE_VERIFY_STEP;
#ifdef MADV_POPULATE_READ
    /* page tables for the step at once, not a fault per 16 pages */
    if (present) present = populate(data, done, step, MADV_POPULATE_READ);
#endif
    done += step;
    hurray__wire_verifier_publish(&v, done);
  }
  hurray__wire_verifier_finish(&v);
}
