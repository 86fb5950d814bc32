/* convert_fuzz.h -- what the converters' fuzz targets share: an input opened from memory as
 * one format, exactly as hurray_convert opens a file, and then used in every way a sink uses
 * it: each array's bytes streamed as they are (checksums included) and gathered into C order.
 * The targets link the static library and reach its private headers. */
#ifndef HURRAY_FUZZ_CONVERT_FUZZ_H
#define HURRAY_FUZZ_CONVERT_FUZZ_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"

static volatile uint8_t g_sink;

static int null_chunk(void *context, const uint8_t *bytes, size_t len, HurrayError *error) {
  (void)error;
  uint64_t *count = context;
  if (len > 0) g_sink ^= bytes[0] ^ bytes[len - 1];
  *count += len;
  return HURRAY_OK;
}

/* Opens `data` as `format`; on success streams everything and returns the source open (the
 * caller closes it), else returns false. */
static bool fuzz_open(int format, const uint8_t *data, size_t size, ConvSource *source) {
  static uint8_t *image;
  static size_t capacity;
  if (image == NULL || size > capacity) { /* a memory source must be 64-byte aligned */
    free(image);
    capacity = (size + 64) & ~(size_t)63;
    image = aligned_alloc(64, capacity);
    if (image == NULL) abort();
  }
  if (size > 0) memcpy(image, data, size);
  FileSource *file = NULL;
  if (hurray__source_memory(image, size, NULL, NULL, &file, NULL) != HURRAY_OK) abort();
  if (hurray__source_open_input(file, format, "x", source, NULL) != HURRAY_OK) return false;
  for (uint32_t i = 0; i < source->count; i++) {
    const ConvArray *a = &source->arrays[i];
    uint64_t streamed = 0, gathered = 0;
    if (hurray__source_stream(source, a, 0, a->region_size, null_chunk, &streamed, NULL) ==
            HURRAY_OK &&
        streamed != a->region_size) {
      abort(); /* every byte promised is delivered */
    }
    if (hurray__source_c_order(source, a, null_chunk, &gathered, NULL) == HURRAY_OK &&
        gathered != a->data_bytes) {
      abort();
    }
  }
  return true;
}

#endif /* HURRAY_FUZZ_CONVERT_FUZZ_H */
