/* checksum.c -- XXH3-64 (xxHash 0.8, seed 0, default secret), the checksum and name hash of the
 * file container. The only translation unit that includes xxhash.h. */
#include <stdlib.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "file.h"

struct FileHasher {
  XXH3_state_t state;
};

uint64_t hurray__xxh3(const void *data, size_t len) {
  return XXH3_64bits(data, len);
}

FileHasher *hurray__hasher_create(void) {
  /* XXH3_state_t wants 64-byte alignment. */
  FileHasher *h = aligned_alloc(64, (sizeof(FileHasher) + 63) / 64 * 64);
  if (h != NULL) hurray__hasher_reset(h);
  return h;
}

void hurray__hasher_reset(FileHasher *h) {
  (void)XXH3_64bits_reset(&h->state);
}

void hurray__hasher_update(FileHasher *h, const void *data, size_t len) {
  if (len > 0) (void)XXH3_64bits_update(&h->state, data, len);
}

uint64_t hurray__hasher_digest(const FileHasher *h) {
  return XXH3_64bits_digest(&h->state);
}

void hurray__hasher_destroy(FileHasher *h) {
  free(h);
}
