/* checksum.c -- XXH3-64 (xxHash 0.8, seed 0, default secret), the checksum and name hash of the
 * file container. The only translation unit that includes xxhash.h.
 *
 * Checksums are on the path of every save, conversion and verification, and the baseline x86-64
 * build compiles XXH3 for SSE2. On x86-64 with GCC or Clang the long-input loops are also
 * compiled for AVX2 (xxHash's own AVX2 kernels, under a target attribute) and chosen at run
 * time when the CPU has it: about twice the speed, and the same hash, as xxHash guarantees for
 * all its vector kernels. */
#include <stdbool.h>
#include <stdlib.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HURRAY_XXH3_AVX2 1
#include <immintrin.h>
#define XXH_DISPATCH_AVX2 1
#define XXH_TARGET_AVX2 __attribute__((__target__("avx2")))
#define XXH_ACC_ALIGN 64 /* what the AVX2 kernels' aligned accumulator loads need */
#endif

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "file.h"

struct FileHasher {
  XXH3_state_t state;
};

#ifdef HURRAY_XXH3_AVX2
static bool has_avx2(void) {
  return __builtin_cpu_supports("avx2"); /* a load of what libgcc found at start-up */
}

XXH_TARGET_AVX2 static uint64_t xxh3_avx2(const void *data, size_t len) {
  return XXH3_hashLong_64b_internal(data, len, XXH3_kSecret, sizeof XXH3_kSecret,
                                    XXH3_accumulate_512_avx2, XXH3_scrambleAcc_avx2);
}

XXH_TARGET_AVX2 static void update_avx2(XXH3_state_t *state, const void *data, size_t len) {
  (void)XXH3_update(state, data, len, XXH3_accumulate_512_avx2, XXH3_scrambleAcc_avx2);
}
#endif

uint64_t hurray__xxh3(const void *data, size_t len) {
#ifdef HURRAY_XXH3_AVX2
  if (len > XXH3_MIDSIZE_MAX && has_avx2()) return xxh3_avx2(data, len);
#endif
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
  if (len == 0) return;
#ifdef HURRAY_XXH3_AVX2
  if (has_avx2()) {
    update_avx2(&h->state, data, len);
    return;
  }
#endif
  (void)XXH3_64bits_update(&h->state, data, len);
}

uint64_t hurray__hasher_digest(const FileHasher *h) {
  return XXH3_64bits_digest(&h->state);
}

void hurray__hasher_destroy(FileHasher *h) {
  free(h);
}
