/* open.c -- hurray_file_reader_open: the one loader's format dispatch (ADR-094, tested by the
 * ctest c.layers).
 *
 * This layer sits above src/file/ (the Hurray container's reader, which knows only its own
 * format) and src/convert/ (the readers of the other formats, each in its own file): a path is
 * a sharded checkpoint (a directory or an index), a Hurray file, or, where the caller allows
 * foreign formats, whatever hurray__view_open recognises by its first bytes (safetensors,
 * .npy, .npz, GGUF). Neither layer below calls up into this one or into the other's dispatch.
 */
#include <inttypes.h>
#include <string.h>

#include "../convert/convert.h"

/* Whether the file starts as a Hurray file does (as far as it goes), or cannot be read: then
 * opening it as one reports the problem. */
static bool starts_as_hurray(const FileSource *source) {
  uint8_t magic[FILE_MAGIC_SIZE];
  uint64_t size = hurray__source_size(source);
  size_t have = size < sizeof magic ? (size_t)size : sizeof magic;
  return hurray__source_read(source, 0, magic, have, NULL) != HURRAY_OK ||
         memcmp(magic, FILE_MAGIC, have) == 0;
}

int hurray_file_reader_open(const char *path, uint32_t flags, HurrayFileReader **out,
                            HurrayError *error) {
  if (path == NULL || out == NULL) {
    return hurray__fail(error, HURRAY_EINVAL, "hurray_file_reader_open: %s is NULL",
                        path == NULL ? "path" : "out");
  }
  if (flags & ~(HURRAY_FILE_OPEN_PREAD | HURRAY_FILE_OPEN_FOREIGN | HURRAY_FILE_OPEN_WRITABLE)) {
    return hurray__fail(error, HURRAY_EINVAL, "open flags 0x%" PRIX32 " include unknown bits",
                        flags);
  }
  if (hurray__shards_path(path)) return hurray__shards_open(path, flags, out, error);
  FileSource *source = NULL;
  int status = hurray__source_open(path, flags, &source, error);
  if (status != HURRAY_OK) return status;
  if ((flags & HURRAY_FILE_OPEN_FOREIGN) && !starts_as_hurray(source)) {
    hurray__source_release(source);
    return hurray__view_open(path, flags, out, error);
  }
  return hurray__reader_open_source(source, out, error); /* SINK for the source */
}
