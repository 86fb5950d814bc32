/* fuzz_safetensors.c -- the safetensors header parser (src/convert/safetensors.c, json.c) on
 * arbitrary bytes, as a whole file. What it accepts must survive being written again: the
 * header the safetensors writer makes of the parsed arrays parses back to the same arrays. */
#include "convert_fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ConvSource source;
  if (!fuzz_open(HURRAY_FORMAT_SAFETENSORS, data, size, &source)) return 0;
  const ConvArray **order = malloc((source.count + 1) * sizeof *order);
  if (order == NULL) abort();
  uint64_t data_bytes = 0;
  for (uint32_t i = 0; i < source.count; i++) {
    order[i] = &source.arrays[i];
    data_bytes += source.arrays[i].data_bytes;
  }
  hurray__safetensors_sort(order, source.count);
  FileSink header = {0};
  if (hurray__safetensors_header(&header, order, source.count, source.metadata, NON_STRING_REFUSE, 8, NULL) ==
      HURRAY_OK) {
    /* the header followed by zeros for the data parses back to the same arrays */
    uint8_t *file = calloc(1, header.len + data_bytes + 1);
    if (file == NULL) abort();
    memcpy(file, header.data, header.len);
    FileArena arena = {0};
    SafetensorsHeader again;
    if (hurray__safetensors_parse(file, header.len + data_bytes, &arena, &again, NULL) !=
            HURRAY_OK ||
        again.count != source.count ||
        again.metadata.count != (source.metadata ? source.metadata->count : 0)) {
      abort();
    }
    for (uint32_t i = 0; i < again.count; i++) {
      const ConvArray *x = order[i], *y = &again.arrays[i];
      if (x->dtype != y->dtype || x->ndim != y->ndim || strcmp(x->name, y->name) != 0 ||
          x->data_bytes != y->data_bytes ||
          (x->ndim > 0 && memcmp(x->shape, y->shape, (size_t)x->ndim * sizeof *x->shape) != 0)) {
        abort();
      }
    }
    hurray__arena_free(&arena);
    free(file);
  }
  hurray__sink_reset(&header);
  free(order);
  hurray__source_close(&source);
  return 0;
}
