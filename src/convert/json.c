/* json.c -- strict, bounded JSON tokens read with a TextCursor (cursor.c): exactly what a
 * safetensors header is made of (objects, arrays, strings, unsigned integers, and `null` where
 * the schema allows it). The
 * schema drives the parse (safetensors.c, shards.c), so nesting is bounded by construction
 * (three levels: the header, an entry, its shape or offsets) and no value of an unexpected
 * type is taken for another: it is an error naming its offset and what was expected. The one
 * generic value, hurray__json_skip, is for members a schema leaves free (a checkpoint index's
 * "metadata"): checked against RFC 8259's grammar, nesting bounded, and discarded. */
#include <inttypes.h>
#include <string.h>

#include "convert.h"

static bool accept_literal(TextCursor *j, const char *word);

bool hurray__json_accept_null(TextCursor *j) {
  hurray__cursor_skip_space(j);
  return accept_literal(j, "null");
}

static bool accept_literal(TextCursor *j, const char *word) {
  size_t n = strlen(word);
  if (j->len - j->at >= n && memcmp(j->text + j->at, word, n) == 0) {
    j->at += n;
    return true;
  }
  return false;
}

static size_t digits(TextCursor *j) {
  size_t first = j->at;
  while (j->at < j->len && j->text[j->at] >= '0' && j->text[j->at] <= '9') j->at++;
  return j->at - first;
}

/* RFC 8259's number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static int skip_number(TextCursor *j, HurrayError *error) {
  uint64_t at = j->base + j->at;
  if (j->at < j->len && j->text[j->at] == '-') j->at++;
  size_t first = j->at, n = digits(j);
  bool ok = n > 0 && !(n > 1 && j->text[first] == '0');
  if (ok && j->at < j->len && j->text[j->at] == '.') {
    j->at++;
    ok = digits(j) > 0;
  }
  if (ok && j->at < j->len && (j->text[j->at] == 'e' || j->text[j->at] == 'E')) {
    j->at++;
    if (j->at < j->len && (j->text[j->at] == '+' || j->text[j->at] == '-')) j->at++;
    ok = digits(j) > 0;
  }
  return ok ? HURRAY_OK
            : hurray__fail(error, HURRAY_EFORMAT, "byte %" PRIu64 ": malformed number", at);
}

static int skip_value(TextCursor *j, FileArena *scratch, unsigned depth, HurrayError *error) {
  hurray__cursor_skip_space(j);
  if (depth > CONV_JSON_MAX_DEPTH) {
    return hurray__fail(error, HURRAY_ELIMIT, "byte %" PRIu64 ": nested deeper than %u levels",
                        hurray__cursor_offset(j), CONV_JSON_MAX_DEPTH);
  }
  if (j->at >= j->len) return hurray__cursor_unexpected(j, "a value", error);
  const char *text = NULL;
  size_t len = 0;
  int status = HURRAY_OK;
  switch (j->text[j->at]) {
    case '"':
      return hurray__json_string(j, scratch, &text, &len, "a string", error);
    case '{':
    case '[': {
      char close = j->text[j->at] == '{' ? '}' : ']';
      bool object = close == '}';
      j->at++;
      if (hurray__cursor_accept(j, close)) return HURRAY_OK;
      do {
        if (object) {
          status = hurray__json_string(j, scratch, &text, &len, "a member name", error);
          if (status == HURRAY_OK) status = hurray__cursor_expect(j, ':', "':'", error);
        }
        if (status == HURRAY_OK) status = skip_value(j, scratch, depth + 1, error);
      } while (status == HURRAY_OK && hurray__cursor_accept(j, ','));
      if (status != HURRAY_OK) return status;
      return hurray__cursor_expect(j, close, object ? "',' or '}'" : "',' or ']'", error);
    }
    default:
      if (accept_literal(j, "true") || accept_literal(j, "false") || accept_literal(j, "null"))
        return HURRAY_OK;
      if (j->text[j->at] == '-' || (j->text[j->at] >= '0' && j->text[j->at] <= '9'))
        return skip_number(j, error);
      return hurray__cursor_unexpected(j, "a value", error);
  }
}

int hurray__json_skip(TextCursor *j, FileArena *scratch, HurrayError *error) {
  return skip_value(j, scratch, 0, error);
}

static int hex_digit(uint8_t c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Reads the 4 hex digits of a \u escape whose backslash is at j->at - 2. */
static int read_hex4(TextCursor *j, uint32_t *out, HurrayError *error) {
  if (j->len - j->at < 4) {
    return hurray__fail(error, HURRAY_EFORMAT, "byte %" PRIu64 ": \\u escape needs 4 hex digits",
                        j->base + j->at - 2);
  }
  uint32_t v = 0;
  for (int k = 0; k < 4; k++) {
    int d = hex_digit(j->text[j->at + (size_t)k]);
    if (d < 0) {
      return hurray__fail(error, HURRAY_EFORMAT, "byte %" PRIu64 ": \\u escape needs 4 hex digits",
                          j->base + j->at - 2);
    }
    v = v << 4 | (uint32_t)d;
  }
  j->at += 4;
  *out = v;
  return HURRAY_OK;
}

static size_t put_utf8(uint8_t *p, uint32_t cp) {
  if (cp < 0x80) {
    p[0] = (uint8_t)cp;
    return 1;
  }
  if (cp < 0x800) {
    p[0] = (uint8_t)(0xC0 | cp >> 6);
    p[1] = (uint8_t)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    p[0] = (uint8_t)(0xE0 | cp >> 12);
    p[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    p[2] = (uint8_t)(0x80 | (cp & 0x3F));
    return 3;
  }
  p[0] = (uint8_t)(0xF0 | cp >> 18);
  p[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
  p[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
  p[3] = (uint8_t)(0x80 | (cp & 0x3F));
  return 4;
}

/* One escape sequence whose backslash was at j->at - 1; appends its UTF-8 to `out`. */
static int read_escape(TextCursor *j, uint8_t *out, size_t *n, HurrayError *error) {
  uint64_t at = j->base + j->at - 1;
  if (j->at >= j->len) {
    return hurray__fail(error, HURRAY_EFORMAT, "byte %" PRIu64 ": unfinished escape sequence", at);
  }
  uint8_t c = j->text[j->at++];
  static const char kFrom[] = "\"\\/bfnrt", kTo[] = "\"\\/\b\f\n\r\t";
  const char *simple = c != 0 ? strchr(kFrom, c) : NULL;
  if (simple != NULL) {
    out[(*n)++] = (uint8_t)kTo[simple - kFrom];
    return HURRAY_OK;
  }
  if (c != 'u') {
    return hurray__fail(error, HURRAY_EFORMAT, "byte %" PRIu64 ": invalid escape sequence", at);
  }
  uint32_t cp = 0;
  int status = read_hex4(j, &cp, error);
  if (status != HURRAY_OK) return status;
  if (cp >= 0xDC00 && cp <= 0xDFFF) {
    return hurray__fail(error, HURRAY_EFORMAT,
                        "byte %" PRIu64 ": \\u%04" PRIX32 " is a low surrogate without a high one",
                        at, cp);
  }
  if (cp >= 0xD800 && cp <= 0xDBFF) {
    uint32_t low = 0;
    if (j->len - j->at < 2 || j->text[j->at] != '\\' || j->text[j->at + 1] != 'u') {
      return hurray__fail(error, HURRAY_EFORMAT,
                          "byte %" PRIu64 ": high surrogate \\u%04" PRIX32
                          " is not followed by a \\u low surrogate",
                          at, cp);
    }
    j->at += 2;
    status = read_hex4(j, &low, error);
    if (status != HURRAY_OK) return status;
    if (low < 0xDC00 || low > 0xDFFF) {
      return hurray__fail(error, HURRAY_EFORMAT,
                          "byte %" PRIu64 ": high surrogate \\u%04" PRIX32
                          " is followed by \\u%04" PRIX32 ", not a low surrogate",
                          at, cp, low);
    }
    cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
  }
  *n += put_utf8(out + *n, cp);
  return HURRAY_OK;
}

int hurray__json_string(TextCursor *j, FileArena *arena, const char **out, size_t *len,
                        const char *what, HurrayError *error) {
  hurray__cursor_skip_space(j);
  if (j->at >= j->len || j->text[j->at] != '"') return hurray__cursor_unexpected(j, what, error);
  uint64_t start = j->base + j->at;
  j->at++;
  /* First pass: find the closing quote; escapes never make the text longer (\uXXXX is 6
   * bytes for at most 3 of UTF-8; a surrogate pair is 12 for 4), so the raw length bounds
   * the decoded one. */
  size_t begin = j->at, end = begin;
  while (end < j->len && j->text[end] != '"') end += j->text[end] == '\\' ? 2 : 1;
  if (end >= j->len) {
    return hurray__fail(error, HURRAY_EFORMAT, "byte %" PRIu64 ": unterminated string", start);
  }
  uint8_t *decoded = hurray__arena_alloc(arena, end - begin + 1);
  if (decoded == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  size_t n = 0;
  while (j->at < end) {
    uint8_t c = j->text[j->at];
    if (c == '\\') {
      j->at++;
      int status = read_escape(j, decoded, &n, error);
      if (status != HURRAY_OK) return status;
      continue;
    }
    if (c < 0x20) {
      return hurray__fail(error, HURRAY_EFORMAT,
                          "byte %" PRIu64 ": control character 0x%02X must be escaped in a string",
                          j->base + j->at, c);
    }
    size_t run = j->at; /* a run of raw bytes, checked as UTF-8 as a whole */
    while (run < end && j->text[run] != '\\' && j->text[run] >= 0x20) run++;
    if (!hurray__utf8_valid(j->text + j->at, run - j->at)) {
      return hurray__fail(error, HURRAY_EFORMAT, "byte %" PRIu64 ": the string is not valid UTF-8",
                          start);
    }
    memcpy(decoded + n, j->text + j->at, run - j->at);
    n += run - j->at;
    j->at = run;
  }
  j->at = end + 1;
  decoded[n] = '\0';
  *out = (const char *)decoded;
  *len = n;
  return HURRAY_OK;
}

int hurray__json_uint(TextCursor *j, uint64_t *out, const char *what, HurrayError *error) {
  hurray__cursor_skip_space(j);
  uint64_t at = j->base + j->at;
  if (j->at >= j->len || j->text[j->at] < '0' || j->text[j->at] > '9') {
    return hurray__cursor_unexpected(j, what, error);
  }
  uint64_t v = 0;
  size_t first = j->at;
  while (j->at < j->len && j->text[j->at] >= '0' && j->text[j->at] <= '9') {
    if (hurray__mul_u64(v, 10, &v) || hurray__add_u64(v, (uint64_t)(j->text[j->at] - '0'), &v)) {
      return hurray__fail(error, HURRAY_EOVERFLOW, "byte %" PRIu64 ": %s does not fit in 64 bits",
                          at, what);
    }
    j->at++;
  }
  if (j->text[first] == '0' && j->at - first > 1) {
    return hurray__fail(error, HURRAY_EFORMAT, "byte %" PRIu64 ": %s has a leading zero", at, what);
  }
  if (j->at < j->len && (j->text[j->at] == '.' || j->text[j->at] == 'e' || j->text[j->at] == 'E')) {
    return hurray__fail(error, HURRAY_EFORMAT, "byte %" PRIu64 ": %s must be an integer", at, what);
  }
  *out = v;
  return HURRAY_OK;
}

void hurray__json_escape(FileSink *out, const char *s, size_t len) {
  static const char kHex[] = "0123456789abcdef";
  size_t run = 0; /* bytes [run, i) still to copy as they are */
  for (size_t i = 0; i < len; i++) {
    uint8_t c = (uint8_t)s[i];
    char simple = c == '"'    ? '"'
                  : c == '\\' ? '\\'
                  : c == '\b' ? 'b'
                  : c == '\f' ? 'f'
                  : c == '\n' ? 'n'
                  : c == '\r' ? 'r'
                  : c == '\t' ? 't'
                              : 0;
    if (simple == 0 && c >= 0x20) continue;
    hurray__sink_bytes(out, s + run, i - run);
    run = i + 1;
    if (simple != 0) {
      char e[2] = {'\\', simple};
      hurray__sink_bytes(out, e, 2);
    } else {
      char e[6] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 15]};
      hurray__sink_bytes(out, e, 6);
    }
  }
  hurray__sink_bytes(out, s + run, len - run);
}
