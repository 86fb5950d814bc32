/* internal.h -- private helpers shared by the hurray-core sources. Not installed, not API.
 * Cross-file symbols are named hurray__* and have hidden visibility. */
#ifndef HURRAY_CORE_INTERNAL_H
#define HURRAY_CORE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "hurray/hurray.h"

#if defined(__GNUC__)
#define HURRAY_INTERNAL __attribute__((visibility("hidden")))
#define HURRAY_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define HURRAY_INTERNAL
#define HURRAY_PRINTF(f, a)
#endif

/* Records `code` and a formatted message in `error` (if not NULL) and returns `code`.
 * The message is truncated to fit, never overflowing. */
HURRAY_INTERNAL int hurray__fail(HurrayError *error, int code, const char *fmt, ...)
    HURRAY_PRINTF(3, 4);
/* hurray__fail that also records the errno of the failed system call behind it (0: none). */
HURRAY_INTERNAL int hurray__fail_errno(HurrayError *error, int code, int system_errno,
                                       const char *fmt, ...) HURRAY_PRINTF(4, 5);

/* Every rule hurray_buffer_wrap checks, applied to a handle someone else made (a consumer's
 * view of a context it did not build): descriptor, flags, data alignment, sync state. */
HURRAY_INTERNAL int hurray__buffer_check(const HurrayBuffer *buffer, HurrayError *error);
/* Whether a buffer's `data` is an address: false for Metal, WebGPU and OpenCL, whose `data` is
 * the buffer object (spec 2.5). */
HURRAY_INTERNAL bool hurray__buffer_has_address(const HurrayBufferDesc *desc);

/* hurray_tensor_desc_clone with `prefix` bytes for the caller in front of the copy, in one heap
 * block: *block is the block (the caller's bytes, released with free), *out the copy in it. */
HURRAY_INTERNAL int hurray__tensor_desc_clone_after(const HurrayTensorDesc *tensor, size_t prefix,
                                                    void **block, HurrayTensorDesc **out,
                                                    HurrayError *error);

/* Whether `n` bytes are well-formed UTF-8 (Unicode 3.9, U+0000 allowed). */
HURRAY_INTERNAL bool hurray__utf8_valid(const uint8_t *s, size_t n);
/* The length of `s` without a final sequence that a cut at `n` left incomplete (the first 1 to 3
 * bytes of a well-formed character): where to end a text cut at a byte count. */
HURRAY_INTERNAL size_t hurray__utf8_trim(const uint8_t *s, size_t n);
/* Copies `s` into `out` (`cap` bytes) as well-formed UTF-8: each byte that begins no
 * well-formed sequence becomes '?', and the copy stops before the first character that does
 * not fit whole. Returns the bytes written. */
HURRAY_INTERNAL size_t hurray__utf8_sanitize(const uint8_t *s, size_t n, uint8_t *out,
                                             size_t cap);

/* Whether `n` bytes are all zero. Word by word and without an early exit, so that the reserved
 * fields every validation checks (a constant `n`) compile to a few loads, not a byte loop. */
static inline bool hurray__all_zero(const void *bytes, size_t n) {
  const uint8_t *p = bytes;
  uint64_t any = 0;
  size_t i = 0;
  for (; n - i >= 8; i += 8) {
    uint64_t word;
    memcpy(&word, p + i, sizeof word);
    any |= word;
  }
  if (n - i >= 4) {
    uint32_t word;
    memcpy(&word, p + i, sizeof word);
    any |= word;
    i += 4;
  }
  if (n - i >= 2) {
    uint16_t word;
    memcpy(&word, p + i, sizeof word);
    any |= word;
    i += 2;
  }
  if (n - i >= 1) any |= p[i];
  return any == 0;
}

/* Overflow-checked arithmetic: return true when the result does not fit. */
static inline bool hurray__add_u64(uint64_t a, uint64_t b, uint64_t *r) {
  return __builtin_add_overflow(a, b, r);
}
static inline bool hurray__mul_u64(uint64_t a, uint64_t b, uint64_t *r) {
  return __builtin_mul_overflow(a, b, r);
}
static inline bool hurray__add_i64(int64_t a, int64_t b, int64_t *r) {
  return __builtin_add_overflow(a, b, r);
}
static inline bool hurray__mul_i64(int64_t a, int64_t b, int64_t *r) {
  return __builtin_mul_overflow(a, b, r);
}

/* Little-endian loads and stores, independent of the host's byte order. */
static inline uint16_t hurray__load_le16(const uint8_t *p) {
  return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t hurray__load_le32(const uint8_t *p) {
  return (uint32_t)hurray__load_le16(p) | ((uint32_t)hurray__load_le16(p + 2) << 16);
}
static inline uint64_t hurray__load_le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}
static inline void hurray__store_le16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}
static inline void hurray__store_le32(uint8_t *p, uint32_t v) {
  hurray__store_le16(p, (uint16_t)v);
  hurray__store_le16(p + 2, (uint16_t)(v >> 16));
}
static inline void hurray__store_le64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

#endif /* HURRAY_CORE_INTERNAL_H */
