/* fuzz_npz.c -- the zip directory reader (src/convert/zip.c) and the .npy members behind it
 * on arbitrary bytes, as a whole .npz file: end records (ZIP64 included), central directory,
 * local headers, and every member inflated and CRC-checked as it is streamed. */
#include "convert_fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ConvSource source;
  if (fuzz_open(HURRAY_FORMAT_NPZ, data, size, &source)) hurray__source_close(&source);
  /* the directory alone, whatever the members hold */
  if (size > 0) {
    FileArena arena = {0};
    ZipDirectory directory;
    FileSource *file = NULL;
    if (hurray__source_memory(data, size, NULL, NULL, &file, NULL) != HURRAY_OK) abort();
    if (hurray__zip_read(data, size, &arena, &directory, NULL) == HURRAY_OK) {
      for (uint32_t i = 0; i < directory.count; i++) {
        const ZipMember *m = &directory.members[i];
        if (m->data_offset > size || m->compressed_size > size - m->data_offset) abort();
        (void)hurray__zip_stream(file, m, 0, m->size, NULL, NULL, NULL);
      }
    }
    hurray__source_release(file);
    hurray__arena_free(&arena);
  }
  return 0;
}
