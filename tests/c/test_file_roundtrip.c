/* test_file_roundtrip.c -- every layout through a file and back, by every way of reading it
 * (mapped, pread, from memory, mapped writable): descriptors, elements, roles, metadata, O(1)
 * lookup, row slices, the writer's compaction, alignment, tensors outliving their reader, and
 * writes through writable views staying private, and a save that verifies though another thread
 * changes its memory meanwhile. */
#define _GNU_SOURCE /* sched_yield */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_file_helpers.h"
#include "test_tmpdir.h"

/* {"layout": <name>, "index": i}: each tensor's own metadata. */
static void write_samples(const char *path, uint32_t alignment) {
  HurrayFileWriterOptions options = {.alignment = alignment};
  HurrayFileWriter *w = NULL;
  OK(hurray_file_writer_create(path, &options, &w, E));
  for (size_t i = 0; i < SAMPLE_COUNT; i++) {
    Sample s = kSamples[i]();
    static const char *const keys[] = {"layout", "index"};
    HurrayMetaValue items[2] = {{.type = HURRAY_META_STRING, .count = (uint32_t)strlen(s.name)},
                                {.type = HURRAY_META_INT64}};
    items[0].as.string = s.name;
    items[1].as.int64 = (int64_t)i;
    HurrayMetaValue meta = {.type = HURRAY_META_MAP, .count = 2, .keys = keys};
    meta.as.items = items;
    OK(hurray_file_writer_add(w, s.name, &s.desc, s.list, &meta, E));
    sample_free(&s);
  }
  OK(hurray_file_writer_finish(w, E));
  hurray_file_writer_destroy(w);
}

static uint8_t *slurp(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  *size = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *bytes = aligned_alloc(HURRAY_FILE_MAX_ALIGNMENT,
                                 (*size + HURRAY_FILE_MAX_ALIGNMENT - 1) /
                                     HURRAY_FILE_MAX_ALIGNMENT * HURRAY_FILE_MAX_ALIGNMENT);
  assert_non_null(bytes);
  assert_int_equal(fread(bytes, 1, *size, f), *size);
  fclose(f);
  return bytes;
}

static int g_memory_released;
static void release_memory(void *owner) {
  free(owner);
  g_memory_released++;
}

typedef enum Mode { MAPPED, PREAD, MEMORY, WRITABLE } Mode;

static HurrayFileReader *open_as(const char *path, Mode mode) {
  HurrayFileReader *r = NULL;
  if (mode == MEMORY) {
    size_t size = 0;
    uint8_t *bytes = slurp(path, &size);
    OK(hurray_file_reader_open_memory(bytes, size, release_memory, bytes, &r, E));
  } else {
    uint32_t flags = mode == PREAD      ? HURRAY_FILE_OPEN_PREAD
                     : mode == WRITABLE ? HURRAY_FILE_OPEN_WRITABLE
                                        : 0;
    OK(hurray_file_reader_open(path, flags, &r, E));
  }
  return r;
}

/* The lowest byte any array of `t` (children included) addresses in buffer `buffer`, or
 * UINT64_MAX when none addresses it. */
static uint64_t first_addressed(const HurrayTensorDesc *t, uint32_t buffer) {
  uint64_t first = UINT64_MAX;
  for (uint32_t i = 0; i < t->nparts; i++) {
    uint64_t numel = 0, begin = 0, end = 0;
    OK(hurray_array_numel(&t->parts[i], &numel, E));
    if (t->parts[i].buffer != buffer || numel == 0) continue;
    OK(hurray_array_span(&t->parts[i], &begin, &end, E));
    if (begin < first) first = begin;
  }
  for (uint32_t i = 0; i < t->nchildren; i++) {
    uint64_t child = first_addressed(&t->children[i], buffer);
    if (child < first) first = child;
  }
  return first;
}

static void check_samples(const char *path, Mode mode) {
  HurrayFileReader *r = open_as(path, mode);
  HurrayFileInfo info;
  OK(hurray_file_reader_info(r, &info, E));
  assert_int_equal(info.tensor_count, SAMPLE_COUNT);
  assert_int_equal(info.version_major, 2);
  for (size_t i = 0; i < SAMPLE_COUNT; i++) {
    Sample s = kSamples[i]();
    uint32_t index = 0;
    OK(hurray_file_reader_find(r, s.name, &index, E));
    assert_int_equal(index, i); /* enumeration is write order */
    HurrayFileTensorInfo ti;
    OK(hurray_file_reader_tensor_info(r, index, &ti, E));
    assert_string_equal(ti.name, s.name);
    assert_int_equal(ti.layout, s.desc.layout);
    assert_int_equal(ti.dtype, s.desc.dtype);
    assert_int_equal(ti.buffer_count, s.list->count);

    HurrayTensorContext *c = NULL;
    OK(hurray_file_reader_get(r, index, HURRAY_VALIDATE_CONTENTS | HURRAY_FILE_GET_VERIFY, &c, E));
    OK(hurray_tensor_context_check(c, HURRAY_VALIDATE_CONTENTS, E));
    assert_int_equal(c->flags,
                     mode == PREAD || mode == WRITABLE ? 0u : HURRAY_BUFFER_READ_ONLY);
    if (!same_tensor(&s.desc, s.list, c->tensor, c->buffers)) fail_msg("%s differs", s.name);
    for (uint32_t k = 0; k < c->buffers->count; k++) {
      const HurrayBuffer *b = c->buffers->buffers[k];
      assert_int_equal(b->desc.device_tag, HURRAY_DEVICE_CPU);
      assert_int_equal(b->desc.alignment, info.alignment);
      assert_int_equal((uintptr_t)b->data % info.alignment, 0);
      /* The tensor's bytes start at the buffer's start: aligned in the file and in memory,
       * wherever the source's bytes were. */
      uint64_t first = first_addressed(c->tensor, k);
      if (first != UINT64_MAX) assert_int_equal(first, 0);
    }
    hurray_tensor_context_release(c);

    HurrayTensorDesc *d = NULL;
    OK(hurray_file_reader_describe(r, index, &d, E));
    assert_int_equal(d->layout, s.desc.layout);
    assert_int_equal(d->nchildren, s.desc.nchildren);
    hurray_tensor_desc_destroy(d);

    HurrayMetaValue *meta = NULL;
    OK(hurray_file_reader_metadata(r, index, &meta, E));
    assert_int_equal(meta->count, 2);
    assert_string_equal(meta->keys[0], "index"); /* sorted */
    assert_int_equal(meta->as.items[0].as.int64, (int64_t)i);
    assert_string_equal(meta->as.items[1].as.string, s.name);
    hurray_meta_destroy(meta);
    sample_free(&s);
  }
  OK(hurray_file_reader_verify(r, HURRAY_FILE_WHOLE, NULL, NULL, E));
  hurray_file_reader_destroy(r);
}

static void every_layout_round_trips_in_every_mode(void **state) {
  (void)state;
  const char *path = path_of("samples.hurray");
  write_samples(path, 0);
  check_samples(path, MAPPED);
  check_samples(path, PREAD);
  g_memory_released = 0;
  check_samples(path, MEMORY);
  assert_int_equal(g_memory_released, 1);
  check_samples(path, WRITABLE);
}

/* 4 KiB (O_DIRECT) and 2 MiB (beyond the page size: the reader reserves and aligns). */
static void large_alignments_are_honoured(void **state) {
  (void)state;
  static const uint32_t alignments[] = {4096, HURRAY_FILE_MAX_ALIGNMENT};
  for (size_t a = 0; a < 2; a++) {
    const char *path = path_of("aligned.hurray");
    write_samples(path, alignments[a]);
    HurrayFileReader *r = open_as(path, MAPPED);
    HurrayFileInfo info;
    OK(hurray_file_reader_info(r, &info, E));
    assert_int_equal(info.alignment, alignments[a]);
    for (uint32_t t = 0; t < info.tensor_count; t++) {
      HurrayFileTensorInfo ti;
      OK(hurray_file_reader_tensor_info(r, t, &ti, E));
      for (uint32_t k = 0; k < ti.buffer_count; k++) {
        HurrayFileBufferInfo bi;
        OK(hurray_file_reader_buffer_info(r, t, k, &bi, E));
        assert_int_equal(bi.offset % alignments[a], 0);
        assert_int_equal(bi.desc.alignment, alignments[a]);
      }
    }
    hurray_file_reader_destroy(r);
    check_samples(path, MAPPED);
    check_samples(path, PREAD);
  }
}

/* Only addressed bytes are written: the first span at the buffer's start, each later one at
 * the next multiple of 64. */
static void writer_compacts_buffers(void **state) {
  (void)state;
  const char *path = path_of("samples.hurray");
  write_samples(path, 0);
  HurrayFileReader *r = open_as(path, MAPPED);
  static const struct {
    const char *name;
    uint32_t buffer;
    uint64_t size;
  } expected[] = {
      {"strided", 0, 40},   /* bytes [4, 44) of 48, moved to 0 */
      {"negative", 0, 12},  /* bytes [100, 112) of 128, moved to 0 */
      {"composite", 0, 80}, /* [0, 16) then [512, 528) at 64: the 496 bytes between dropped */
      {"empty", 0, 0},
  };
  for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++) {
    uint32_t t = 0;
    HurrayFileBufferInfo bi;
    OK(hurray_file_reader_find(r, expected[i].name, &t, E));
    OK(hurray_file_reader_buffer_info(r, t, expected[i].buffer, &bi, E));
    assert_int_equal(bi.desc.byte_size, expected[i].size);
  }
  hurray_file_reader_destroy(r);
  size_t size = 0;
  uint8_t *bytes = slurp(path, &size);
  for (size_t i = 0; i + 4 <= size; i++) { /* the composite's 0xEE filler never reached disk */
    assert_false(bytes[i] == 0xEE && bytes[i + 1] == 0xEE && bytes[i + 2] == 0xEE &&
                 bytes[i + 3] == 0xEE);
  }
  free(bytes);
}

static void contexts_outlive_their_reader(void **state) {
  (void)state;
  const char *path = path_of("samples.hurray");
  write_samples(path, 0);
  for (Mode mode = MAPPED; mode <= WRITABLE; mode++) {
    g_memory_released = 0;
    HurrayFileReader *r = open_as(path, mode);
    HurrayTensorContext *c = NULL;
    uint32_t t = 0;
    OK(hurray_file_reader_find(r, "dense", &t, E));
    OK(hurray_file_reader_get(r, t, 0, &c, E));
    hurray_file_reader_destroy(r);
    assert_int_equal(g_memory_released, 0); /* the tensor still holds the image */
    const float *values = c->buffers->buffers[0]->data;
    assert_true(values[5] == 6.0f);
    hurray_tensor_context_release(c);
    if (mode == MEMORY) assert_int_equal(g_memory_released, 1);
  }
}

static HurrayTensorContext *get_named(HurrayFileReader *r, const char *name) {
  uint32_t t = 0;
  OK(hurray_file_reader_find(r, name, &t, E));
  HurrayTensorContext *c = NULL;
  OK(hurray_file_reader_get(r, t, 0, &c, E));
  return c;
}

/* A write through a WRITABLE reader's tensor lands in the process's private copy of the page
 * (ADR-058): the reader's other tensors over those bytes see it, another reader of the file
 * and the file itself do not. */
static void writable_views_write_private_copies(void **state) {
  (void)state;
  const char *path = path_of("samples.hurray");
  write_samples(path, 0);
  size_t size = 0;
  uint8_t *before = slurp(path, &size);
  HurrayFileReader *writable = open_as(path, WRITABLE);
  HurrayFileReader *mapped = open_as(path, MAPPED);
  HurrayTensorContext *c = get_named(writable, "dense");
  float *values = c->buffers->buffers[0]->data;
  assert_true(values[5] == 6.0f);
  values[5] = -1.0f;

  HurrayTensorContext *again = get_named(writable, "dense"); /* the same mapping */
  assert_ptr_equal(again->buffers->buffers[0]->data, values);
  HurrayTensorContext *other = get_named(mapped, "dense"); /* a mapping of its own */
  assert_true(((const float *)other->buffers->buffers[0]->data)[5] == 6.0f);
  uint32_t t = 0;
  OK(hurray_file_reader_find(writable, "dense", &t, E));
  HurrayTensorContext *rows = NULL;
  OK(hurray_file_reader_get_rows(writable, t, 0, 1, &rows, E));
  assert_int_equal(rows->flags, 0);
  hurray_tensor_context_release(rows);
  hurray_tensor_context_release(other);
  hurray_tensor_context_release(again);
  hurray_tensor_context_release(c);
  hurray_file_reader_destroy(mapped);
  hurray_file_reader_destroy(writable);

  size_t size_after = 0;
  uint8_t *after = slurp(path, &size_after);
  assert_int_equal(size_after, size);
  assert_memory_equal(after, before, size);
  free(after);
  free(before);
}

static HurrayTensorContext *rows_of(HurrayFileReader *r, const char *name, int64_t start,
                                    int64_t stop, int expected) {
  uint32_t t = 0;
  OK(hurray_file_reader_find(r, name, &t, E));
  HurrayTensorContext *c = NULL;
  HurrayError error = {0};
  int status = hurray_file_reader_get_rows(r, t, start, stop, &c, &error);
  if (status != expected)
    fail_msg("%s rows [%lld, %lld): %s", name, (long long)start, (long long)stop, error.message);
  return c;
}

static void rows_are_read_alone(void **state) {
  (void)state;
  const char *path = path_of("rows.hurray");
  enum { ROWS = 1000, COLS = 100 };
  static float matrix[ROWS][COLS];
  for (int i = 0; i < ROWS; i++) {
    for (int j = 0; j < COLS; j++) matrix[i][j] = (float)(i * COLS + j);
  }
  HurrayFileWriter *w = NULL;
  OK(hurray_file_writer_create(path, NULL, &w, E));
  HurrayBufferList *list = sample_list();
  sample_append(list, matrix, sizeof matrix, HURRAY_ROLE_VALUES);
  const int64_t shape[] = {ROWS, COLS};
  const HurrayArray part = SAMPLE_ARRAY(HURRAY_DTYPE_FLOAT32, 2, shape, NULL, 0, 0);
  const HurrayTensorDesc matrix_desc = {.layout = HURRAY_LAYOUT_DENSE,
                                        .ndim = 2,
                                        .shape = shape,
                                        .parts = &part,
                                        .nparts = 1,
                                        .dtype = HURRAY_DTYPE_FLOAT32};
  OK(hurray_file_writer_add(w, "matrix", &matrix_desc, list, NULL, E));
  hurray_buffer_list_destroy(list);
  for (size_t i = 0; i < SAMPLE_COUNT; i++) {
    Sample s = kSamples[i]();
    OK(hurray_file_writer_add(w, s.name, &s.desc, s.list, NULL, E));
    sample_free(&s);
  }
  OK(hurray_file_writer_finish(w, E));
  hurray_file_writer_destroy(w);

  for (Mode mode = MAPPED; mode <= MEMORY; mode++) {
    HurrayFileReader *r = open_as(path, mode);
    HurrayTensorContext *c = rows_of(r, "matrix", 10, 20, HURRAY_OK);
    assert_int_equal(c->tensor->shape[0], 10);
    assert_int_equal(c->tensor->shape[1], COLS);
    const HurrayBuffer *b = c->buffers->buffers[0];
    assert_true(b->desc.byte_size < 10 * COLS * 4 + 64); /* only those rows */
    const float *first =
        (const float *)((const uint8_t *)b->data + c->tensor->parts[0].byte_offset);
    assert_true(first[0] == 1000.0f && first[10 * COLS - 1] == 1999.0f);
    hurray_tensor_context_release(c);

    c = rows_of(r, "matrix", 1000, 1000, HURRAY_OK); /* no rows */
    assert_int_equal(c->tensor->shape[0], 0);
    hurray_tensor_context_release(c);

    c = rows_of(r, "negative", 1, 3, HURRAY_OK); /* strides kept */
    Sample s = sample_negative();
    HurrayArray expected = s.desc.parts[0];
    const int64_t sub_shape[] = {2, 2};
    expected.shape = sub_shape;
    expected.byte_offset -= 4; /* row 1: one stride of -2 int16 */
    assert_true(same_array_elements(&expected, s.list, &c->tensor->parts[0], c->buffers));
    sample_free(&s);
    hurray_tensor_context_release(c);

    c = rows_of(r, "int4", 0, 2, HURRAY_OK); /* row 2 starts at bit 40: byte 5 */
    hurray_tensor_context_release(c);
    c = rows_of(r, "int4", 2, 3, HURRAY_OK);
    hurray_tensor_context_release(c);
    rows_of(r, "int4", 1, 2, HURRAY_EUNSUPPORTED); /* row 1 starts at bit 20 */
    rows_of(r, "scalar", 0, 0, HURRAY_EINVAL);
    rows_of(r, "matrix", 5, 1001, HURRAY_EINVAL);
    rows_of(r, "matrix", -1, 3, HURRAY_EINVAL);
    rows_of(r, "matrix", 4, 3, HURRAY_EINVAL);
    rows_of(r, "per_channel", 0, 1, HURRAY_EUNSUPPORTED);
    hurray_file_reader_destroy(r);
  }
}

static void metadata_round_trips(void **state) {
  (void)state;
  const char *path = path_of("meta.hurray");
  static const char *const inner_keys[] = {"z", "a"};
  HurrayMetaValue inner_items[2] = {{.type = HURRAY_META_BOOL}, {.type = HURRAY_META_BOOL}};
  inner_items[0].as.boolean = 1;
  HurrayMetaValue list_items[4] = {{.type = HURRAY_META_INT64},
                                   {.type = HURRAY_META_FLOAT64},
                                   {.type = HURRAY_META_STRING, .count = 0},
                                   {.type = HURRAY_META_MAP, .count = 2, .keys = inner_keys}};
  list_items[0].as.int64 = INT64_MIN;
  list_items[1].as.float64 = NAN;
  list_items[2].as.string = "";
  list_items[3].as.items = inner_items;
  static const char *const keys[] = {"version", "name", "\xc3\xa9t\xc3\xa9", "list", "pi"};
  HurrayMetaValue items[5] = {{.type = HURRAY_META_INT64},
                              {.type = HURRAY_META_STRING, .count = 7},
                              {.type = HURRAY_META_STRING, .count = 3},
                              {.type = HURRAY_META_LIST, .count = 4},
                              {.type = HURRAY_META_FLOAT64}};
  items[0].as.int64 = 7;
  items[1].as.string = "llama\0x"; /* 7 bytes, a NUL inside */
  items[2].as.string = "\xe2\x82\xac";
  items[3].as.items = list_items;
  items[4].as.float64 = 3.14159;
  HurrayMetaValue root = {.type = HURRAY_META_MAP, .count = 5, .keys = keys};
  root.as.items = items;

  HurrayFileWriter *w = NULL;
  OK(hurray_file_writer_create(path, NULL, &w, E));
  OK(hurray_file_writer_set_metadata(w, &root, E));
  Sample s = sample_dense();
  OK(hurray_file_writer_add(w, "t", &s.desc, s.list, NULL, E));
  sample_free(&s);
  OK(hurray_file_writer_finish(w, E));
  hurray_file_writer_destroy(w);

  HurrayFileReader *r = open_as(path, PREAD);
  HurrayMetaValue *m = NULL;
  OK(hurray_file_reader_metadata(r, HURRAY_FILE_WHOLE, &m, E));
  assert_int_equal(m->type, HURRAY_META_MAP);
  assert_int_equal(m->count, 5);
  static const char *const sorted[] = {"list", "name", "pi", "version", "\xc3\xa9t\xc3\xa9"};
  for (int i = 0; i < 5; i++) assert_string_equal(m->keys[i], sorted[i]);
  const HurrayMetaValue *list = &m->as.items[0];
  assert_int_equal(list->type, HURRAY_META_LIST);
  assert_int_equal(list->as.items[0].as.int64, INT64_MIN);
  assert_true(isnan(list->as.items[1].as.float64));
  assert_int_equal(list->as.items[2].count, 0);
  assert_string_equal(list->as.items[2].as.string, "");
  const HurrayMetaValue *map = &list->as.items[3];
  assert_string_equal(map->keys[0], "a");
  assert_int_equal(map->as.items[0].as.boolean, 0);
  assert_int_equal(map->as.items[1].as.boolean, 1);
  assert_int_equal(m->as.items[1].count, 7);
  assert_memory_equal(m->as.items[1].as.string, "llama\0x", 8); /* with the reader's NUL */
  assert_true(m->as.items[2].as.float64 == 3.14159);
  assert_int_equal(m->as.items[3].as.int64, 7);
  assert_string_equal(m->as.items[4].as.string, "\xe2\x82\xac");
  hurray_meta_destroy(m);
  OK(hurray_file_reader_metadata(r, 0, &m, E)); /* none written: an empty map */
  assert_int_equal(m->type, HURRAY_META_MAP);
  assert_int_equal(m->count, 0);
  hurray_meta_destroy(m);
  hurray_meta_destroy(NULL);
  hurray_file_reader_destroy(r);
}

/* Writes one dense tensor with `tensor_meta` and file metadata `file_meta`; returns the
 * file's version_minor, read back. */
static uint16_t minor_written(const char *path, const HurrayMetaValue *file_meta,
                              const HurrayMetaValue *tensor_meta) {
  HurrayFileWriter *w = NULL;
  OK(hurray_file_writer_create(path, NULL, &w, E));
  Sample s = sample_dense();
  OK(hurray_file_writer_add(w, "t", &s.desc, s.list, tensor_meta, E));
  sample_free(&s);
  OK(hurray_file_writer_set_metadata(w, file_meta, E));
  OK(hurray_file_writer_finish(w, E));
  hurray_file_writer_destroy(w);
  HurrayFileReader *r = open_as(path, PREAD);
  HurrayFileInfo info;
  OK(hurray_file_reader_info(r, &info, E));
  hurray_file_reader_destroy(r);
  assert_int_equal(info.version_major, 2);
  return info.version_minor;
}

/* Format 2.1 (spec §3, §7): NULL and INTEGER values round trip, and only a file that holds
 * them is written as 2.1. */
static void null_and_big_integers_make_a_2_1_file(void **state) {
  (void)state;
  const char *path = path_of("meta21.hurray");
  static const char kBig[] = "18446744073709551617", kLow[] = "-9223372036854775809";
  HurrayMetaValue list[3] = {{.type = HURRAY_META_NULL},
                             {.type = HURRAY_META_INTEGER, .count = sizeof kBig - 1},
                             {.type = HURRAY_META_INTEGER, .count = sizeof kLow - 1}};
  list[1].as.string = kBig;
  list[2].as.string = kLow;
  static const char *const keys[] = {"values"};
  HurrayMetaValue root = {.type = HURRAY_META_MAP, .count = 1, .keys = keys};
  HurrayMetaValue holder = {.type = HURRAY_META_LIST, .count = 3};
  holder.as.items = list;
  root.as.items = &holder;
  assert_int_equal(minor_written(path, &root, NULL), 1);
  assert_int_equal(minor_written(path, NULL, &root), 1); /* a tensor's metadata counts too */

  HurrayFileReader *r = open_as(path, PREAD);
  HurrayMetaValue *m = NULL;
  OK(hurray_file_reader_metadata(r, 0, &m, E));
  const HurrayMetaValue *got = m->as.items[0].as.items;
  assert_int_equal(got[0].type, HURRAY_META_NULL);
  assert_int_equal(got[1].type, HURRAY_META_INTEGER);
  assert_int_equal(got[1].count, sizeof kBig - 1);
  assert_string_equal(got[1].as.string, kBig);
  assert_string_equal(got[2].as.string, kLow);
  assert_string_equal(hurray_meta_type_name(HURRAY_META_NULL), "null");
  assert_string_equal(hurray_meta_type_name(HURRAY_META_INTEGER), "integer");
  hurray_meta_destroy(m);
  hurray_file_reader_destroy(r);

  /* Without them, 2.0: int64's extremes stay INT64. */
  HurrayMetaValue extreme = {.type = HURRAY_META_INT64};
  extreme.as.int64 = INT64_MIN;
  root.as.items = &extreme;
  assert_int_equal(minor_written(path, &root, &root), 0);

  /* INTEGER text that is not canonical, or lies inside int64, is refused (and names it). */
  static const char *const bad[] = {"", "-", "-0", "0", "012345678901234567890", "12",
                                    "9223372036854775807", "-9223372036854775808",
                                    "+9223372036854775808", "1e30", "99999999999999999999 "};
  HurrayFileWriter *w = NULL;
  OK(hurray_file_writer_create(path_of("bad-integer.hurray"), NULL, &w, E));
  HurrayMetaValue integer = {.type = HURRAY_META_INTEGER};
  root.as.items = &integer;
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    integer.as.string = bad[i];
    integer.count = (uint32_t)strlen(bad[i]);
    HurrayError error = {0};
    assert_int_equal(hurray_file_writer_set_metadata(w, &root, &error), HURRAY_EINVAL);
    assert_non_null(strstr(error.message, "metadata key 'values': metadata integer"));
  }
  char digits[HURRAY_META_MAX_DIGITS + 2];
  memset(digits, '9', sizeof digits);
  integer.as.string = digits;
  integer.count = HURRAY_META_MAX_DIGITS;
  OK(hurray_file_writer_set_metadata(w, &root, E));
  integer.count = HURRAY_META_MAX_DIGITS + 1;
  assert_int_equal(hurray_file_writer_set_metadata(w, &root, NULL), HURRAY_EINVAL);
  integer.as.string = NULL;
  integer.count = 0;
  assert_int_equal(hurray_file_writer_set_metadata(w, &root, NULL), HURRAY_EINVAL);
  hurray_file_writer_destroy(w);
}

static void bad_metadata_is_refused_by_the_writer(void **state) {
  (void)state;
  HurrayFileWriter *w = NULL;
  OK(hurray_file_writer_create(path_of("bad-meta.hurray"), NULL, &w, E));
  static const char *const dup_keys[] = {"a", "a"};
  HurrayMetaValue two[2] = {{.type = HURRAY_META_INT64}, {.type = HURRAY_META_INT64}};
  HurrayMetaValue dup = {.type = HURRAY_META_MAP, .count = 2, .keys = dup_keys};
  dup.as.items = two;
  HurrayError error = {0};
  assert_int_equal(hurray_file_writer_set_metadata(w, &dup, &error), HURRAY_EINVAL);
  assert_non_null(strstr(error.message, "duplicate metadata key 'a'"));

  HurrayMetaValue not_map = {.type = HURRAY_META_INT64};
  assert_int_equal(hurray_file_writer_set_metadata(w, &not_map, &error), HURRAY_EINVAL);

  HurrayMetaValue bad_utf8 = {.type = HURRAY_META_STRING, .count = 1};
  bad_utf8.as.string = "\xff";
  static const char *const k[] = {"k"};
  HurrayMetaValue holder = {.type = HURRAY_META_MAP, .count = 1, .keys = k};
  holder.as.items = &bad_utf8;
  assert_int_equal(hurray_file_writer_set_metadata(w, &holder, &error), HURRAY_EINVAL);

  HurrayMetaValue bad_bool = {.type = HURRAY_META_BOOL};
  bad_bool.as.boolean = 2;
  holder.as.items = &bad_bool;
  assert_int_equal(hurray_file_writer_set_metadata(w, &holder, &error), HURRAY_EINVAL);

  /* 17 nested lists inside the root map: one level too deep. */
  HurrayMetaValue nest[17];
  for (int i = 0; i < 17; i++) {
    nest[i] = (HurrayMetaValue){.type = HURRAY_META_LIST, .count = i < 16 ? 1 : 0};
    nest[i].as.items = i < 16 ? &nest[i + 1] : NULL;
  }
  holder.as.items = &nest[2]; /* root + 15 lists = 16 levels: fine */
  OK(hurray_file_writer_set_metadata(w, &holder, E));
  holder.as.items = &nest[1]; /* 17 */
  assert_int_equal(hurray_file_writer_set_metadata(w, &holder, &error), HURRAY_ELIMIT);
  hurray_file_writer_destroy(w);
}

/* Lookup by name through the on-disk hash index, for many names. */
static void many_tensors_are_found_by_name(void **state) {
  (void)state;
  enum { COUNT = 3000 };
  const char *path = path_of("many.hurray");
  HurrayFileWriter *w = NULL;
  OK(hurray_file_writer_create(path, NULL, &w, E));
  static const int64_t shape[] = {1};
  const HurrayArray part = SAMPLE_ARRAY(HURRAY_DTYPE_INT32, 1, shape, NULL, 0, 0);
  const HurrayTensorDesc desc = {.layout = HURRAY_LAYOUT_DENSE,
                                 .ndim = 1,
                                 .shape = shape,
                                 .parts = &part,
                                 .nparts = 1,
                                 .dtype = HURRAY_DTYPE_INT32};
  for (int32_t i = 0; i < COUNT; i++) {
    char name[32];
    snprintf(name, sizeof name, "layer.%d.weight", i);
    OK(hurray_file_writer_begin_tensor(w, name, E));
    OK(hurray_file_writer_begin_buffer(w, HURRAY_ROLE_VALUES, E));
    OK(hurray_file_writer_write(w, &i, sizeof i, E));
    OK(hurray_file_writer_end_tensor(w, &desc, NULL, E));
  }
  OK(hurray_file_writer_finish(w, E));
  hurray_file_writer_destroy(w);
  HurrayFileReader *r = open_as(path, MAPPED);
  for (int32_t i = 0; i < COUNT; i++) {
    char name[32];
    snprintf(name, sizeof name, "layer.%d.weight", i);
    uint32_t index = 0;
    OK(hurray_file_reader_find(r, name, &index, E));
    assert_int_equal(index, i);
    HurrayTensorContext *c = NULL;
    OK(hurray_file_reader_get(r, index, HURRAY_FILE_GET_VERIFY, &c, E));
    assert_int_equal(*(const int32_t *)c->buffers->buffers[0]->data, i);
    hurray_tensor_context_release(c);
  }
  HurrayError error = {0};
  uint32_t index = 0;
  assert_int_equal(hurray_file_reader_find(r, "layer.3000.weight", &index, &error), HURRAY_EINVAL);
  assert_non_null(strstr(error.message, "no tensor named 'layer.3000.weight'"));
  assert_int_equal(hurray_file_reader_find(r, "", &index, &error), HURRAY_EINVAL);
  hurray_file_reader_destroy(r);
}

typedef struct Progress {
  uint64_t done, total;
  int calls;
} Progress;

static void record_progress(void *context, uint64_t done, uint64_t total) {
  Progress *p = context;
  assert_true(done >= p->done && done <= total);
  *p = (Progress){done, total, p->calls + 1};
}

static void verification_reports_progress(void **state) {
  (void)state;
  const char *path = path_of("samples.hurray");
  write_samples(path, 0);
  for (Mode mode = MAPPED; mode <= PREAD; mode++) {
    HurrayFileReader *r = open_as(path, mode);
    HurrayFileInfo info;
    OK(hurray_file_reader_info(r, &info, E));
    Progress p = {0};
    OK(hurray_file_reader_verify(r, HURRAY_FILE_WHOLE, record_progress, &p, E));
    assert_int_equal(p.total, info.data_bytes);
    assert_int_equal(p.done, info.data_bytes);
    assert_true(p.calls >= (int)info.buffer_count);
    p = (Progress){0};
    OK(hurray_file_reader_verify(r, 0, record_progress, &p, E)); /* one tensor */
    HurrayFileTensorInfo ti;
    OK(hurray_file_reader_tensor_info(r, 0, &ti, E));
    assert_int_equal(p.total, ti.data_bytes);
    hurray_file_reader_destroy(r);
  }
}

/* A dense float32 tensor of `n` elements from element `first` of `storage` (64 floats): a view
 * whose buffer borrows the storage's whole memory, as a C runtime describes views of one
 * allocation. */
static void add_view(HurrayFileWriter *w, const char *name, float *storage, int64_t first,
                     const int64_t *n) {
  HurrayBufferDesc d = {.byte_size = 64 * sizeof(float), .alignment = 64};
  HurrayBuffer *buffer = NULL;
  OK(hurray_buffer_wrap(storage, &d, 0, NULL, 0, NULL, NULL, &buffer, E));
  HurrayBufferList *list = sample_list();
  OK(hurray_buffer_list_append(list, buffer, HURRAY_ROLE_VALUES, NULL, E));
  HurrayArray part = SAMPLE_ARRAY(HURRAY_DTYPE_FLOAT32, 1, n, NULL,
                                  (uint64_t)first * sizeof(float), 0);
  HurrayTensorDesc desc = {.layout = HURRAY_LAYOUT_DENSE, .ndim = 1, .shape = n,
                           .parts = &part, .nparts = 1, .dtype = HURRAY_DTYPE_FLOAT32};
  OK(hurray_file_writer_add(w, name, &desc, list, NULL, E));
  hurray_buffer_list_destroy(list);
}

/* Spec §4: views of a storage written whole before share its bytes (each view's buffer is the
 * storage's memory, its offset into it kept); a view written before the whole has its own, and
 * memory changed since is written anew. */
static void views_of_a_storage_written_whole_share_its_bytes(void **state) {
  (void)state;
  static float storage[64] __attribute__((aligned(64)));
  for (int i = 0; i < 64; i++) storage[i] = (float)i;
  static const int64_t all[] = {64}, ten[] = {10}, tail[] = {24};
  const char *path = path_of("views.hurray");
  HurrayFileWriter *w = NULL;
  OK(hurray_file_writer_create(path, NULL, &w, E));
  add_view(w, "early.head", storage, 0, ten); /* before the whole: its own bytes */
  add_view(w, "w", storage, 0, all);
  add_view(w, "head", storage, 0, ten);
  add_view(w, "tail", storage, 40, tail);
  storage[63] = -1.0f; /* changed since "w" was written: written anew */
  add_view(w, "changed.tail", storage, 40, tail);
  OK(hurray_file_writer_finish(w, E));
  hurray_file_writer_destroy(w);
  HurrayFileReader *r = open_as(path, MAPPED);
  OK(hurray_file_reader_verify(r, HURRAY_FILE_WHOLE, NULL, NULL, E));
  HurrayFileInfo info;
  OK(hurray_file_reader_info(r, &info, E));
  assert_int_equal(info.version_minor, 2);
  HurrayFileBufferInfo b[5];
  for (uint32_t t = 0; t < 5; t++) OK(hurray_file_reader_buffer_info(r, t, 0, &b[t], E));
  assert_int_equal(b[0].desc.byte_size, 40);
  assert_int_equal(b[1].desc.byte_size, 256);
  /* "head" is the span "early.head" was written from: those bytes; "tail" lies in "w"'s */
  assert_true(b[2].offset == b[0].offset && b[2].desc.byte_size == 40);
  assert_true(b[3].offset == b[1].offset && b[3].desc.byte_size == 256);
  assert_true(b[3].checksum == b[1].checksum);
  assert_true(b[4].offset > b[1].offset && b[4].desc.byte_size == 96);
  static const struct {
    uint32_t tensor;
    float first, last;
    int64_t n;
  } want[] = {{0, 0, 9, 10}, {1, 0, 63, 64}, {2, 0, 9, 10}, {3, 40, 63, 24}, {4, 40, -1, 24}};
  for (size_t i = 0; i < 5; i++) {
    HurrayTensorContext *c = NULL;
    OK(hurray_file_reader_get(r, want[i].tensor, HURRAY_FILE_GET_VERIFY, &c, E));
    const HurrayArray *a = &c->tensor->parts[0];
    const float *x = (const float *)((const uint8_t *)c->buffers->buffers[0]->data +
                                     a->byte_offset);
    assert_int_equal(c->tensor->shape[0], want[i].n);
    assert_true(x[0] == want[i].first && x[want[i].n - 1] == want[i].last);
    hurray_tensor_context_release(c);
  }
  hurray_file_reader_destroy(r);
}

/* Keeps changing the bytes of a buffer that is being saved, until told to stop. */
typedef struct Scribbler {
  volatile uint8_t *bytes;
  size_t size;
  atomic_bool stop;
  atomic_ulong writes;
} Scribbler;

static void *scribble(void *arg) {
  Scribbler *s = arg;
  uint64_t x = 0x9E3779B97F4A7C15u;
  while (!atomic_load(&s->stop)) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift: anywhere in the buffer */
    s->bytes[x % s->size] += 1;
    atomic_fetch_add(&s->writes, 1);
  }
  return NULL;
}

/* Spec §10: the checksum covers exactly the bytes that reach the file, so the save verifies
 * whatever another thread does to the memory while it is written (large buffers are hashed
 * as read back from the file). */
static void a_save_verifies_though_its_memory_changes_meanwhile(void **state) {
  (void)state;
  enum { SIZE = 24u << 20 };
  static const int64_t shape[] = {SIZE};
  HurrayArray part = SAMPLE_ARRAY(HURRAY_DTYPE_UINT8, 1, shape, NULL, 0, 0);
  HurrayTensorDesc desc = {.layout = HURRAY_LAYOUT_DENSE, .ndim = 1, .shape = shape,
                           .parts = &part, .nparts = 1, .dtype = HURRAY_DTYPE_UINT8};
  HurrayBufferList *list = sample_list();
  HurrayBuffer *buffer = NULL;
  OK(hurray_buffer_alloc(SIZE, 0, HURRAY_ALLOC_ZERO, &buffer, E));
  OK(hurray_buffer_list_append(list, buffer, HURRAY_ROLE_VALUES, NULL, E));
  Scribbler scribbler = {.bytes = buffer->data, .size = SIZE};
  pthread_t thread;
  assert_int_equal(pthread_create(&thread, NULL, scribble, &scribbler), 0);
  while (atomic_load(&scribbler.writes) == 0) sched_yield();
  const char *path = path_of("scribbled.hurray");
  for (int round = 0; round < 3; round++) {
    HurrayFileWriter *w = NULL;
    OK(hurray_file_writer_create(path, NULL, &w, E));
    OK(hurray_file_writer_add(w, "moving", &desc, list, NULL, E));
    OK(hurray_file_writer_add(w, "moving.again", &desc, list, NULL, E)); /* shared or not */
    OK(hurray_file_writer_finish(w, E));
    hurray_file_writer_destroy(w);
    HurrayFileReader *r = NULL;
    OK(hurray_file_reader_open(path, 0, &r, E));
    OK(hurray_file_reader_verify(r, HURRAY_FILE_WHOLE, NULL, NULL, E));
    hurray_file_reader_destroy(r);
  }
  atomic_store(&scribbler.stop, true);
  pthread_join(thread, NULL);
  assert_true(atomic_load(&scribbler.writes) > 1000); /* the memory did change meanwhile */
  hurray_buffer_list_destroy(list);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_layout_round_trips_in_every_mode),
      cmocka_unit_test(large_alignments_are_honoured),
      cmocka_unit_test(writer_compacts_buffers),
      cmocka_unit_test(contexts_outlive_their_reader),
      cmocka_unit_test(writable_views_write_private_copies),
      cmocka_unit_test(rows_are_read_alone),
      cmocka_unit_test(metadata_round_trips),
      cmocka_unit_test(null_and_big_integers_make_a_2_1_file),
      cmocka_unit_test(bad_metadata_is_refused_by_the_writer),
      cmocka_unit_test(many_tensors_are_found_by_name),
      cmocka_unit_test(verification_reports_progress),
      cmocka_unit_test(a_save_verifies_though_its_memory_changes_meanwhile),
      cmocka_unit_test(views_of_a_storage_written_whole_share_its_bytes),
  };
  return cmocka_run_group_tests(tests, make_dir, remove_dir);
}
