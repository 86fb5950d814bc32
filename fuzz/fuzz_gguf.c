/* fuzz_gguf.c -- the GGUF header parser (src/convert/gguf.c) on arbitrary bytes, as a whole
 * file. What it accepts is used as the loader uses it: every tensor's bytes streamed, the
 * key/values encoded as file metadata, and each tensor of a block dtype dequantised by the
 * kernels (src/core/quant.c) straight from the file's bytes. */
#include "convert_fuzz.h"

static void dequantize(const ConvSource *source, const ConvArray *a) {
  uint32_t elements = 0, bytes = 0;
  if (hurray_dtype_block(a->dtype, &elements, &bytes, NULL) != HURRAY_OK ||
      a->region_size > (1u << 20)) {
    return;
  }
  HurrayBufferList *list = NULL;
  HurrayBuffer *buffer = NULL;
  if (hurray_buffer_list_create(1, &list, NULL) != HURRAY_OK ||
      hurray_buffer_alloc(a->region_size, 0, 0, &buffer, NULL) != HURRAY_OK) {
    abort();
  }
  if (a->region_size > 0) memcpy(buffer->data, source->bytes + a->region_offset, a->region_size);
  if (hurray_buffer_list_append(list, buffer, HURRAY_ROLE_VALUES, NULL, NULL) != HURRAY_OK) {
    abort();
  }
  const HurrayArray part = {.shape = a->shape, .ndim = a->ndim, .dtype = a->dtype};
  const HurrayTensorDesc desc = {.layout = HURRAY_LAYOUT_DENSE, .ndim = a->ndim,
                                 .shape = a->shape, .parts = &part, .nparts = 1,
                                 .dtype = a->dtype};
  HurrayBuffer *out = NULL;
  if (hurray_dequantize_buffer(&desc, list, HURRAY_DTYPE_FLOAT16, &out, NULL) != HURRAY_OK ||
      out->desc.byte_size != a->region_size / bytes * elements * 2) {
    abort(); /* a tensor the parser accepts is one the kernels take */
  }
  hurray_buffer_destroy(out);
  hurray_buffer_list_destroy(list);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ConvSource source;
  if (!fuzz_open(HURRAY_FORMAT_GGUF, data, size, &source)) return 0;
  FileSink metadata = {0};
  uint16_t minor = 0;
  (void)hurray__meta_encode(source.metadata, &metadata, &minor, NULL); /* may be refused */
  hurray__sink_reset(&metadata);
  for (uint32_t i = 0; i < source.count; i++) dequantize(&source, &source.arrays[i]);
  hurray__source_close(&source);
  return 0;
}
