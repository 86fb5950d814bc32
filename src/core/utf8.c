/* utf8.c -- the one UTF-8 well-formedness check, for names in descriptors and in files, and the
 * cuts of text that must stay UTF-8 (error messages, ERROR frames). */
#include "internal.h"

/* Unicode §3.9, table 3-7: the length (1..4) of the well-formed sequence that begins `s`, of
 * which `n` > 0 bytes are there; 0 if none begins there. *cut: the `n` bytes are the start of a
 * well-formed sequence that needs more (a text cut inside a character). */
static size_t sequence(const uint8_t *s, size_t n, bool *cut) {
  *cut = false;
  uint8_t b = s[0];
  if (b < 0x80) return 1;
  size_t extra;
  uint8_t lo = 0x80, hi = 0xBF; /* range of the second byte */
  if (b >= 0xC2 && b <= 0xDF) {
    extra = 1;
  } else if (b >= 0xE0 && b <= 0xEF) {
    extra = 2;
    if (b == 0xE0) lo = 0xA0;
    if (b == 0xED) hi = 0x9F; /* no surrogates */
  } else if (b >= 0xF0 && b <= 0xF4) {
    extra = 3;
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F; /* nothing above U+10FFFF */
  } else {
    return 0;
  }
  for (size_t k = 1; k <= extra; k++) {
    if (k >= n) {
      *cut = true;
      return 0;
    }
    if (k == 1 ? s[1] < lo || s[1] > hi : (s[k] & 0xC0) != 0x80) return 0;
  }
  return extra + 1;
}

bool hurray__utf8_valid(const uint8_t *s, size_t n) {
  bool cut = false;
  for (size_t i = 0; i < n;) {
    size_t k = sequence(s + i, n - i, &cut);
    if (k == 0) return false;
    i += k;
  }
  return true;
}

size_t hurray__utf8_trim(const uint8_t *s, size_t n) {
  for (size_t back = 1; back <= 3 && back <= n; back++) {
    bool cut = false;
    if (sequence(s + n - back, back, &cut) == 0 && cut) return n - back;
  }
  return n;
}

size_t hurray__utf8_sanitize(const uint8_t *s, size_t n, uint8_t *out, size_t cap) {
  size_t used = 0;
  for (size_t i = 0; i < n;) {
    bool cut = false;
    size_t k = sequence(s + i, n - i, &cut);
    size_t take = k == 0 ? 1 : k;
    if (take > cap - used) break; /* a character that does not fit is left out whole */
    if (k == 0) {
      out[used] = '?';
    } else {
      for (size_t j = 0; j < k; j++) out[used + j] = s[i + j];
    }
    used += take;
    i += take;
  }
  return used;
}
