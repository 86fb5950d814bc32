/* fuzz_npy.c -- the .npy preamble parser (src/convert/npy.c) on arbitrary bytes, as a whole
 * file. What it accepts must survive being written again: the preamble numpy.save would
 * write for the parsed array parses back to the same dtype, order and shape. */
#include "convert_fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ConvSource source;
  if (!fuzz_open(HURRAY_FORMAT_NPY, data, size, &source)) return 0;
  const ConvArray *a = &source.arrays[0];
  bool fortran = a->strides != NULL;
  FileSink preamble = {0};
  NpyHeader again;
  if (hurray__npy_write_header(&preamble, a->dtype, fortran, a->ndim, a->shape, NULL) !=
          HURRAY_OK ||
      preamble.len % 64 != 0 ||
      hurray__npy_parse(preamble.data, preamble.len, 0, &again, NULL) != HURRAY_OK ||
      again.dtype != a->dtype || again.fortran_order != fortran || again.ndim != a->ndim ||
      again.data_offset != preamble.len ||
      (a->ndim > 0 && memcmp(again.shape, a->shape, (size_t)a->ndim * sizeof *a->shape) != 0)) {
    abort();
  }
  hurray__sink_reset(&preamble);
  hurray__source_close(&source);
  return 0;
}
