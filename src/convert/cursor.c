/* cursor.c -- the cursor both header parsers read with: the JSON of a safetensors header
 * (json.c, safetensors.c) and the dict literal of a .npy header (npy.c). Each call skips
 * whitespace, then accepts or requires one token; a token that is not there is an error naming
 * its file offset, what was expected, and what was found. */
#include <inttypes.h>

#include "convert.h"

void hurray__cursor_skip_space(TextCursor *c) {
  while (c->at < c->len) {
    uint8_t b = c->text[c->at];
    if (b != ' ' && b != '\t' && b != '\n' && b != '\r') break;
    c->at++;
  }
}

uint64_t hurray__cursor_offset(TextCursor *c) {
  hurray__cursor_skip_space(c);
  return c->base + c->at;
}

int hurray__cursor_unexpected(TextCursor *c, const char *what, HurrayError *error) {
  uint64_t at = c->base + c->at;
  if (c->at >= c->len) {
    return hurray__fail(error, HURRAY_EFORMAT, "byte %" PRIu64 ": expected %s, found the end of %s",
                        at, what, c->name);
  }
  uint8_t b = c->text[c->at];
  if (b >= 0x20 && b < 0x7F) {
    return hurray__fail(error, HURRAY_EFORMAT, "byte %" PRIu64 ": expected %s, found '%c'", at,
                        what, b);
  }
  return hurray__fail(error, HURRAY_EFORMAT, "byte %" PRIu64 ": expected %s, found byte 0x%02X", at,
                      what, b);
}

bool hurray__cursor_accept(TextCursor *c, char token) {
  hurray__cursor_skip_space(c);
  if (c->at < c->len && c->text[c->at] == (uint8_t)token) {
    c->at++;
    return true;
  }
  return false;
}

int hurray__cursor_expect(TextCursor *c, char token, const char *what, HurrayError *error) {
  return hurray__cursor_accept(c, token) ? HURRAY_OK : hurray__cursor_unexpected(c, what, error);
}

int hurray__cursor_end(TextCursor *c, const char *what, HurrayError *error) {
  hurray__cursor_skip_space(c);
  return c->at == c->len ? HURRAY_OK : hurray__cursor_unexpected(c, what, error);
}
