/* codec.c -- the primitives every encoder and parser of the file container is built from: a
 * bounded cursor over untrusted bytes, a growable byte sink, an arena, and the rules for names
 * (UTF-8, length). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "file.h"

int hurray__error_prefix(HurrayError *error, int code, const char *fmt, ...) {
  if (error == NULL) return code;
  char prefix[HURRAY_ERROR_MESSAGE_SIZE];
  va_list args;
  va_start(args, fmt);
  int n = vsnprintf(prefix, sizeof prefix, fmt, args);
  va_end(args);
  if (n < 0) prefix[0] = '\0';
  char message[HURRAY_ERROR_MESSAGE_SIZE];
  memcpy(message, error->message, sizeof message);
  message[sizeof message - 1] = '\0';
  return hurray__fail_errno(error, code, error->system_errno, "%s%s", prefix, message);
}

/* ---- cursor ------------------------------------------------------------------------------- */

int hurray__take(FileCursor *c, size_t n, const uint8_t **out, HurrayError *error) {
  if (n > c->left) {
    return hurray__fail(error, HURRAY_EFORMAT, "truncated: %zu bytes needed, %zu left", n, c->left);
  }
  *out = c->p;
  c->p += n;
  c->left -= n;
  return HURRAY_OK;
}

int hurray__take_zeros(FileCursor *c, size_t n, const char *what, HurrayError *error) {
  const uint8_t *p = NULL;
  int status = hurray__take(c, n, &p, error);
  if (status == HURRAY_OK && !hurray__all_zero(p, n)) {
    return hurray__fail(error, HURRAY_EFORMAT, "%s is not zero", what);
  }
  return status;
}

int hurray__take_varint(FileCursor *c, uint64_t *out, HurrayError *error) {
  uint64_t value = 0;
  for (unsigned shift = 0; shift < 64; shift += 7) {
    const uint8_t *p = NULL;
    int status = hurray__take(c, 1, &p, error);
    if (status != HURRAY_OK) return status;
    uint64_t bits = *p & 0x7Fu;
    if (shift == 63 && bits > 1) break; /* the tenth byte holds bit 63 alone */
    value |= bits << shift;
    if ((*p & 0x80u) == 0) {
      *out = value;
      return HURRAY_OK;
    }
  }
  return hurray__fail(error, HURRAY_EFORMAT, "a varint does not fit in 64 bits");
}

/* ---- sink --------------------------------------------------------------------------------- */

static uint8_t *sink_grow(FileSink *s, size_t n) {
  if (s->failed) return NULL;
  if (n > s->cap - s->len) {
    size_t cap = s->cap ? s->cap : 256;
    while (cap - s->len < n) {
      if (cap > SIZE_MAX / 2) {
        s->failed = true;
        return NULL;
      }
      cap *= 2;
    }
    uint8_t *grown = realloc(s->data, cap);
    if (grown == NULL) {
      s->failed = true;
      return NULL;
    }
    s->data = grown;
    s->cap = cap;
  }
  uint8_t *p = s->data + s->len;
  s->len += n;
  return p;
}

void hurray__sink_bytes(FileSink *s, const void *bytes, size_t n) {
  uint8_t *p = sink_grow(s, n);
  if (p != NULL && n > 0) memcpy(p, bytes, n);
}

void hurray__sink_zeros(FileSink *s, size_t n) {
  uint8_t *p = sink_grow(s, n);
  if (p != NULL && n > 0) memset(p, 0, n);
}

void hurray__sink_u8(FileSink *s, uint8_t v) {
  hurray__sink_bytes(s, &v, 1);
}

void hurray__sink_u16(FileSink *s, uint16_t v) {
  uint8_t *p = sink_grow(s, 2);
  if (p != NULL) hurray__store_le16(p, v);
}

void hurray__sink_u32(FileSink *s, uint32_t v) {
  uint8_t *p = sink_grow(s, 4);
  if (p != NULL) hurray__store_le32(p, v);
}

void hurray__sink_u64(FileSink *s, uint64_t v) {
  uint8_t *p = sink_grow(s, 8);
  if (p != NULL) hurray__store_le64(p, v);
}

void hurray__sink_varint(FileSink *s, uint64_t v) {
  uint8_t bytes[10];
  size_t n = 0;
  do {
    bytes[n] = (uint8_t)(v & 0x7Fu);
    v >>= 7;
    if (v != 0) bytes[n] |= 0x80u;
    n++;
  } while (v != 0);
  hurray__sink_bytes(s, bytes, n);
}

void hurray__sink_pad8(FileSink *s) {
  hurray__sink_zeros(s, (size_t)(hurray__pad8(s->len) - s->len));
}

void hurray__sink_reset(FileSink *s) {
  free(s->data);
  *s = (FileSink){0};
}

/* ---- arena -------------------------------------------------------------------------------- */

struct FileArenaChunk {
  FileArenaChunk *next;
  size_t used;
  size_t size;
  _Alignas(8) uint8_t data[];
};

enum { ARENA_CHUNK = 16384 };

void *hurray__arena_alloc(FileArena *arena, size_t size) {
  size = (size_t)hurray__pad8(size);
  if (size < sizeof(uint64_t)) size = sizeof(uint64_t); /* distinct, non-NULL for size 0 */
  FileArenaChunk *chunk = arena->head;
  if (chunk == NULL || chunk->size - chunk->used < size) {
    size_t capacity = size > ARENA_CHUNK ? size : ARENA_CHUNK;
    if (capacity > SIZE_MAX - sizeof *chunk) return NULL;
    chunk = malloc(sizeof *chunk + capacity);
    if (chunk == NULL) return NULL;
    chunk->next = arena->head;
    chunk->used = 0;
    chunk->size = capacity;
    arena->head = chunk;
  }
  void *p = chunk->data + chunk->used;
  chunk->used += size;
  return p;
}

char *hurray__arena_strndup(FileArena *arena, const uint8_t *bytes, size_t n) {
  if (n == SIZE_MAX) return NULL;
  char *s = hurray__arena_alloc(arena, n + 1);
  if (s == NULL) return NULL;
  if (n > 0) memcpy(s, bytes, n);
  s[n] = '\0';
  return s;
}

void hurray__arena_free(FileArena *arena) {
  for (FileArenaChunk *chunk = arena->head; chunk != NULL;) {
    FileArenaChunk *next = chunk->next;
    free(chunk);
    chunk = next;
  }
  arena->head = NULL;
}

/* ---- names -------------------------------------------------------------------------------- */

int hurray__check_name(const uint8_t *name, size_t len, int bad, const char *what,
                       HurrayError *error) {
  if (len == 0) return hurray__fail(error, bad, "%s is empty", what);
  if (len > HURRAY_MAX_NAME) {
    return hurray__fail(error, HURRAY_ELIMIT, "%s is longer than %d bytes", what, HURRAY_MAX_NAME);
  }
  if (memchr(name, 0, len) != NULL) return hurray__fail(error, bad, "%s contains NUL", what);
  if (!hurray__utf8_valid(name, len)) {
    return hurray__fail(error, bad, "%s is not valid UTF-8", what);
  }
  return HURRAY_OK;
}

int hurray__check_cname(const char *name, const char *what, size_t *len, HurrayError *error) {
  if (name == NULL) return hurray__fail(error, HURRAY_EINVAL, "%s is NULL", what);
  size_t n = strnlen(name, HURRAY_MAX_NAME + 1);
  int status = hurray__check_name((const uint8_t *)name, n, HURRAY_EINVAL, what, error);
  if (status == HURRAY_OK) *len = n;
  return status;
}

int hurray__compare_bytes(const void *a, size_t alen, const void *b, size_t blen) {
  size_t common = alen < blen ? alen : blen;
  int c = common > 0 ? memcmp(a, b, common) : 0;
  if (c != 0) return c;
  return alen < blen ? -1 : alen > blen;
}
