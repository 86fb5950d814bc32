/* simple.c -- the simple API: open a file, get a tensor by name, reach its shape and data,
 * release. Run: simple FILE NAME */
#include <inttypes.h>
#include <stdio.h>

#include "hurray/hurray.h"

int main(int argc, char **argv) {
  if (argc != 3) return 2;
  HurrayError error = {0};
  HurrayFileReader *file = NULL;
  HurrayTensorContext *tensor = NULL;
  uint32_t index = 0;
  if (hurray_file_reader_open(argv[1], 0, &file, &error) != HURRAY_OK ||  /* maps, validates */
      hurray_file_reader_find(file, argv[2], &index, &error) != HURRAY_OK ||
      hurray_file_reader_get(file, index, 0, &tensor, &error) != HURRAY_OK) { /* zero-copy */
    fprintf(stderr, "%s: %s\n", hurray_status_name(error.code), error.message);
    hurray_file_reader_destroy(file);
    return 1;
  }
  const HurrayTensorDesc *t = tensor->tensor; /* layout, dtype, shape, parts */
  printf("%s tensor of shape [", hurray_layout_name((int)t->layout));
  for (int32_t k = 0; k < t->ndim; k++) printf("%s%" PRId64, k ? ", " : "", t->shape[k]);
  printf("]");
  if (t->layout == HURRAY_LAYOUT_DENSE && t->dtype == HURRAY_DTYPE_FLOAT32 &&
      t->parts[0].strides == NULL) { /* row-major float32: a plain C array */
    const float *x = hurray_tensor_context_data(tensor, 0);
    uint64_t n = 0;
    hurray_array_numel(&t->parts[0], &n, NULL);
    for (uint64_t i = 0; i < n; i++) printf("%s%g", i ? " " : ": ", (double)x[i]);
  }
  printf("\n");
  hurray_tensor_context_release(tensor); /* the data is valid until here */
  hurray_file_reader_destroy(file);      /* may come first: a tensor keeps the mapping */
  return 0;
}
