/* test_convert_helpers.h -- what the conversion tests (tests/c/test_convert*.c) share: a
 * scratch directory, files of given bytes, Hurray files of dense tensors built through the
 * public API, and the two checks every conversion test makes: the status and message of a
 * failure, and that a failed conversion left nothing behind (no output, no temporary, any
 * previous file intact). Header-only: static functions; include after <cmocka.h>. */
#ifndef HURRAY_TEST_CONVERT_HELPERS_H
#define HURRAY_TEST_CONVERT_HELPERS_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "test_file_helpers.h"
#include "test_tmpdir.h"

static inline void write_bytes(const char *path, const void *bytes, size_t size) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(bytes, 1, size, f), size);
  assert_int_equal(fclose(f), 0);
}

static inline bool exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

/* Entries of the scratch directory whose name contains ".tmp-": temporaries left behind. */
static inline int temporaries(void) {
  DIR *d = opendir(g_dir);
  assert_non_null(d);
  int count = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) count += strstr(e->d_name, ".tmp-") != NULL;
  closedir(d);
  return count;
}

/* A conversion that must fail with `status` and a message containing `text`, leaving no file
 * at `out` (or, when one was there, the same bytes) and no temporary. */
#define CONVERT_FAILS(in, out, options, status, text) \
  convert_fails(in, out, options, status, text, __FILE__, __LINE__)

/* fail_msg with the caller's file and line. */
#define FAIL_AT(file, line, ...) \
  do {                           \
    print_error(__VA_ARGS__);    \
    print_error("\n");           \
    _fail(file, line);           \
  } while (0)

static inline void convert_fails(const char *in, const char *out,
                                 const HurrayConvertOptions *options, int expected,
                                 const char *text, const char *file, int line) {
  size_t before_size = 0;
  uint8_t *before = file_contents(out, &before_size);
  HurrayError error = {0};
  int status = hurray_convert(in, out, options, &error);
  if (status != expected) {
    FAIL_AT(file, line, "convert %s -> %s: expected %s, got %s: %s", in, out,
            hurray_status_name(expected), hurray_status_name(status), error.message);
  }
  if (strstr(error.message, text) == NULL) {
    FAIL_AT(file, line, "convert %s -> %s: message '%s' lacks '%s'", in, out, error.message, text);
  }
  size_t after_size = 0;
  uint8_t *after = file_contents(out, &after_size);
  if ((before == NULL) != (after == NULL) ||
      (before != NULL && (before_size != after_size || memcmp(before, after, before_size) != 0))) {
    FAIL_AT(file, line, "convert %s -> %s failed but changed the output", in, out);
  }
  if (temporaries() != 0) FAIL_AT(file, line, "a temporary file was left behind");
  free(before);
  free(after);
}

/* ---- Hurray files of dense tensors -------------------------------------------------------- */

typedef struct Dense {
  const char *name;
  uint8_t dtype;
  int32_t ndim;
  int64_t shape[8];
  const int64_t *strides; /* NULL: C order */
  uint64_t byte_offset;
  const void *bytes; /* the buffer */
  size_t size;
  const HurrayMetaValue *metadata;
} Dense;

static inline void add_tensor(HurrayFileWriter *w, const Dense *d) {
  HurrayBufferList *list = sample_list();
  sample_append(list, d->bytes, d->size, HURRAY_ROLE_VALUES);
  HurrayArray part = {.byte_offset = d->byte_offset,
                      .shape = d->shape,
                      .strides = d->strides,
                      .ndim = d->ndim,
                      .dtype = d->dtype};
  HurrayTensorDesc desc = {.layout = HURRAY_LAYOUT_DENSE,
                           .ndim = d->ndim,
                           .shape = d->shape,
                           .parts = &part,
                           .nparts = 1,
                           .dtype = d->dtype};
  OK(hurray_file_writer_add(w, d->name, &desc, list, d->metadata, E));
  hurray_buffer_list_destroy(list);
}

static inline void write_hurray(const char *path, const Dense *tensors, size_t count,
                                const HurrayMetaValue *metadata) {
  HurrayFileWriter *w = NULL;
  OK(hurray_file_writer_create(path, NULL, &w, E));
  if (metadata != NULL) OK(hurray_file_writer_set_metadata(w, metadata, E));
  for (size_t i = 0; i < count; i++) add_tensor(w, &tensors[i]);
  OK(hurray_file_writer_finish(w, E));
  hurray_file_writer_destroy(w);
}

/* Tensor `name` of a Hurray file, as a context (released by the caller). */
static inline HurrayTensorContext *get_tensor(const char *path, const char *name) {
  HurrayFileReader *r = NULL;
  uint32_t index = 0;
  HurrayTensorContext *c = NULL;
  OK(hurray_file_reader_open(path, 0, &r, E));
  OK(hurray_file_reader_find(r, name, &index, E));
  OK(hurray_file_reader_get(r, index, HURRAY_FILE_GET_VERIFY, &c, E));
  hurray_file_reader_destroy(r);
  return c;
}

/* Whether tensor `name` of two Hurray files has the same dtype, shape and elements. */
static inline bool same_dense(const char *path_a, const char *path_b, const char *name) {
  HurrayTensorContext *a = get_tensor(path_a, name), *b = get_tensor(path_b, name);
  bool same =
      a->tensor->layout == HURRAY_LAYOUT_DENSE && b->tensor->layout == HURRAY_LAYOUT_DENSE &&
      same_array_elements(&a->tensor->parts[0], a->buffers, &b->tensor->parts[0], b->buffers);
  hurray_tensor_context_release(a);
  hurray_tensor_context_release(b);
  return same;
}

/* The element bytes of dense tensor `name`, in C order (byte-sized dtypes). */
static inline size_t c_order_bytes(const char *path, const char *name, uint8_t *out, size_t cap) {
  HurrayTensorContext *c = get_tensor(path, name);
  const HurrayArray *a = &c->tensor->parts[0];
  size_t bytes = hurray_dtype_info(a->dtype)->bits / 8, n = 0;
  uint64_t numel = 0;
  OK(hurray_array_numel(a, &numel, E));
  int64_t index[HURRAY_MAX_NDIM] = {0};
  for (uint64_t i = 0; i < numel; i++) {
    uint8_t element[16];
    element_bits(a, c->buffers, index, element);
    assert_true(n + bytes <= cap);
    memcpy(out + n, element, bytes);
    n += bytes;
    for (int32_t k = a->ndim - 1; k >= 0 && ++index[k] == a->shape[k]; k--) index[k] = 0;
  }
  hurray_tensor_context_release(c);
  return n;
}

static inline HurrayMetaValue string_meta(const char *s) {
  HurrayMetaValue v = {.type = HURRAY_META_STRING, .count = (uint32_t)strlen(s)};
  v.as.string = s;
  return v;
}

#endif /* HURRAY_TEST_CONVERT_HELPERS_H */
