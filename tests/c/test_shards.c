/* test_shards.c -- sharded checkpoints (file-format.md §12): the index written exactly (golden
 * bytes), every layout read back through one reader over three shards, queries routed to the
 * right shard, verification over all of them with one progress count, and the refusals of the
 * index writer and of broken checkpoints. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>
#include "test_file_helpers.h"
#include "test_tmpdir.h"

enum { SHARDS = 3 };

static const char *const kShardNames[SHARDS] = {
    "model-00001-of-00003.hurray", "model-00002-of-00003.hurray", "model-00003-of-00003.hurray"};

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

/* Every sample layout, sample i in shard i % SHARDS, in directory `dir`, with its index. */
static void write_checkpoint(const char *dir) {
  mkdir(dir, 0777);
  const char *names[SAMPLE_COUNT];
  uint32_t shard_of[SAMPLE_COUNT];
  char path[512];
  for (uint32_t k = 0; k < SHARDS; k++) {
    HurrayFileWriter *w = NULL;
    snprintf(path, sizeof path, "%s/%s", dir, kShardNames[k]);
    OK(hurray_file_writer_create(path, NULL, &w, E));
    for (uint32_t i = k; i < SAMPLE_COUNT; i += SHARDS) {
      Sample s = kSamples[i]();
      names[i] = s.name;
      shard_of[i] = k;
      OK(hurray_file_writer_add(w, s.name, &s.desc, s.list, NULL, E));
      sample_free(&s);
    }
    OK(hurray_file_writer_finish(w, E));
    hurray_file_writer_destroy(w);
  }
  snprintf(path, sizeof path, "%s/model.hurray.index.json", dir);
  OK(hurray_shard_index_write(path, names, shard_of, SAMPLE_COUNT, kShardNames, SHARDS, 1234,
                              HURRAY_FILE_WRITE_NOT_DURABLE, E));
}

static void the_index_is_hugging_faces_shape_byte_for_byte(void **state) {
  (void)state;
  const char *names[] = {"b", "a\"q", "c"};
  const uint32_t shard_of[] = {1, 0, 1};
  const char *shards[] = {"m-1.hurray", "m-2.hurray"};
  OK(hurray_shard_index_write(path_of("golden.index.json"), names, shard_of, 3, shards, 2, 42, 0,
                              E));
  size_t len = 0;
  char *text = (char *)file_contents(path_of("golden.index.json"), &len);
  assert_string_equal(text,
                      "{\n"
                      "  \"metadata\": {\n"
                      "    \"total_size\": 42\n"
                      "  },\n"
                      "  \"weight_map\": {\n"
                      "    \"a\\\"q\": \"m-1.hurray\",\n"
                      "    \"b\": \"m-2.hurray\",\n"
                      "    \"c\": \"m-2.hurray\"\n"
                      "  }\n"
                      "}\n");
  free(text);
  OK(hurray_shard_index_write(path_of("empty.index.json"), NULL, NULL, 0, NULL, 0, 0, 0, E));
  text = (char *)file_contents(path_of("empty.index.json"), &len);
  assert_string_equal(text, "{\n  \"metadata\": {\n    \"total_size\": 0\n  },\n  \"weight_map\": {}\n}\n");
  free(text);
}

static void the_index_writer_refuses_what_no_reader_would_take(void **state) {
  (void)state;
  HurrayError error = {0};
  const char *names[] = {"a", "a"};
  const uint32_t shard_of[] = {0, 0}, out_of_range[] = {0, 2};
  const char *shards[] = {"s.hurray", "t.hurray"}, *outside[] = {"../s.hurray"};
  const char *path = path_of("refused.index.json");
  assert_int_equal(hurray_shard_index_write(path, names, shard_of, 2, shards, 1, 0, 0, &error),
                   HURRAY_EINVAL);
  assert_non_null(strstr(error.message, "tensor 'a' is named twice"));
  assert_int_equal(hurray_shard_index_write(path, names, out_of_range, 2, shards, 2, 0, 0, &error),
                   HURRAY_EINVAL);
  assert_non_null(strstr(error.message, "is in shard 2 of 2"));
  assert_int_equal(hurray_shard_index_write(path, names, shard_of, 1, outside, 1, 0, 0, &error),
                   HURRAY_EINVAL);
  assert_non_null(strstr(error.message, "'../s.hurray' is not a plain file name"));
  assert_int_equal(hurray_shard_index_write(path, names, shard_of, 1, shards, 1, 0, 8, &error),
                   HURRAY_EINVAL);
  assert_int_equal(hurray_shard_index_write(NULL, names, shard_of, 1, shards, 1, 0, 0, &error),
                   HURRAY_EINVAL);
  assert_int_equal(access(path, F_OK), -1); /* nothing written */
}

typedef struct Seen {
  uint64_t last, total;
  unsigned calls;
  int backwards;
} Seen;

static void count_progress(void *context, uint64_t done, uint64_t total) {
  Seen *seen = context;
  if (done < seen->last || done > total) seen->backwards = 1;
  seen->last = done;
  seen->total = total;
  seen->calls++;
}

static void every_layout_reads_back_through_one_reader(void **state) {
  (void)state;
  const char *dir = path_of("ckpt");
  write_checkpoint(dir);
  const char *paths[] = {dir, path_of("ckpt/model.hurray.index.json")};
  for (size_t p = 0; p < 2; p++) {
    HurrayFileReader *r = NULL;
    OK(hurray_file_reader_open(paths[p], 0, &r, E));
    HurrayFileInfo info;
    OK(hurray_file_reader_info(r, &info, E));
    assert_int_equal(info.tensor_count, SAMPLE_COUNT);
    assert_int_equal(info.shard_count, SHARDS);
    assert_int_equal(info.format, HURRAY_FORMAT_HURRAY);
    uint64_t data_bytes = 0;
    for (uint32_t i = 0; i < SAMPLE_COUNT; i++) { /* numbered shard after shard */
      HurrayFileTensorInfo ti;
      OK(hurray_file_reader_tensor_info(r, i, &ti, E));
      uint32_t shard = i < 4 ? 0 : i < 8 ? 1 : 2, rank = i % 4;
      Sample s = kSamples[shard + SHARDS * rank]();
      assert_string_equal(ti.name, s.name);
      sample_free(&s);
      data_bytes += ti.data_bytes;
    }
    assert_int_equal(info.data_bytes, data_bytes);
    for (size_t i = 0; i < SAMPLE_COUNT; i++) {
      Sample s = kSamples[i]();
      uint32_t index = 0;
      OK(hurray_file_reader_find(r, s.name, &index, E));
      HurrayTensorContext *c = NULL;
      OK(hurray_file_reader_get(r, index, HURRAY_FILE_GET_VERIFY, &c, E));
      if (!same_tensor(&s.desc, s.list, c->tensor, c->buffers)) fail_msg("%s differs", s.name);
      HurrayTensorDesc *d = NULL;
      OK(hurray_file_reader_describe(r, index, &d, E));
      assert_int_equal(d->layout, s.desc.layout);
      HurrayFileBufferInfo bi;
      OK(hurray_file_reader_buffer_info(r, index, 0, &bi, E));
      HurrayMetaValue *meta = NULL;
      OK(hurray_file_reader_metadata(r, index, &meta, E));
      assert_int_equal(meta->count, 0);
      hurray_meta_destroy(meta);
      hurray_tensor_desc_destroy(d);
      hurray_tensor_context_release(c);
      sample_free(&s);
    }
    uint32_t dense = 0;
    OK(hurray_file_reader_find(r, "dense", &dense, E));
    HurrayTensorContext *rows = NULL;
    OK(hurray_file_reader_get_rows(r, dense, 1, 2, &rows, E));
    assert_int_equal(rows->tensor->shape[0], 1);
    hurray_tensor_context_release(rows);
    Seen seen = {0};
    OK(hurray_file_reader_verify(r, HURRAY_FILE_WHOLE, count_progress, &seen, E));
    assert_false(seen.backwards);
    assert_true(seen.calls >= SAMPLE_COUNT);
    assert_int_equal(seen.last, info.data_bytes);
    assert_int_equal(seen.total, info.data_bytes);
    OK(hurray_file_reader_verify(r, HURRAY_FILE_INDEX, NULL, NULL, E));
    HurrayError error = {0};
    uint32_t index = 0;
    assert_int_equal(hurray_file_reader_find(r, "absent", &index, &error), HURRAY_EINVAL);
    assert_non_null(strstr(error.message, "no tensor named 'absent'"));
    assert_int_equal(hurray_file_reader_get(r, SAMPLE_COUNT, 0, &rows, &error), HURRAY_EINVAL);
    hurray_file_reader_destroy(r);
  }
}

static void a_broken_checkpoint_is_refused_naming_shard_and_tensor(void **state) {
  (void)state;
  const char *dir = path_of("broken");
  write_checkpoint(dir);
  HurrayError error = {0};
  HurrayFileReader *r = NULL;
  char path[512];
  /* a shard whose bytes were damaged: verification names the shard and the tensor */
  snprintf(path, sizeof path, "%s/%s", dir, kShardNames[1]);
  size_t len = 0;
  char *bytes = (char *)file_contents(path, &len);
  bytes[64] ^= 1; /* the first buffer's first byte */
  FILE *f = fopen(path, "wb");
  fwrite(bytes, 1, len, f);
  fclose(f);
  free(bytes);
  OK(hurray_file_reader_open(dir, 0, &r, E));
  assert_int_equal(hurray_file_reader_verify(r, HURRAY_FILE_WHOLE, NULL, NULL, &error),
                   HURRAY_ECHECKSUM);
  assert_non_null(strstr(error.message, "shard 'model-00002-of-00003.hurray': tensor 'strided'"));
  hurray_file_reader_destroy(r);
  /* a shard gone: HURRAY_EIO with its errno, naming it and a tensor it held */
  unlink(path);
  assert_int_equal(hurray_file_reader_open(dir, 0, &r, &error), HURRAY_EIO);
  assert_non_null(strstr(error.message, "shard 'model-00002-of-00003.hurray' (holding '"));
  assert_int_equal(error.system_errno, ENOENT);
  /* an index that is not JSON names the byte */
  snprintf(path, sizeof path, "%s/model.hurray.index.json", dir);
  write_text(path, "{\"weight_map\": {\"a\": \"x.hurray\",}}");
  assert_int_equal(hurray_file_reader_open(dir, 0, &r, &error), HURRAY_EFORMAT);
  assert_non_null(strstr(error.message, "byte 32: expected a tensor name"));
}

static void a_shard_writer_stages_until_finished(void **state) {
  (void)state;
  const char *dir = path_of("written");
  HurrayShardWriter *w = NULL;
  const HurrayFileWriterOptions options = {.flags = HURRAY_FILE_WRITE_NOT_DURABLE};
  const HurrayMetaValue arch = {.type = HURRAY_META_STRING, .count = 4, .as.string = "tiny"};
  const char *key = "arch";
  const HurrayMetaValue meta = {.type = HURRAY_META_MAP, .count = 1, .keys = &key,
                                .as.items = &arch};
  OK(hurray_shard_writer_create(dir, 48, &options, &meta, &w, E));
  for (size_t i = 0; i < SAMPLE_COUNT; i++) {
    Sample s = kSamples[i]();
    HurrayFileWriter *shard = NULL;
    OK(hurray_shard_writer_next(w, s.name, 24, &shard, E)); /* a new shard every second */
    OK(hurray_file_writer_add(shard, s.name, &s.desc, s.list, NULL, E));
    sample_free(&s);
  }
  HurrayFileReader *r = NULL;
  HurrayError error = {0};
  assert_int_not_equal(hurray_file_reader_open(dir, 0, &r, &error), HURRAY_OK); /* not yet */
  OK(hurray_shard_writer_finish(w, E));
  hurray_shard_writer_destroy(w);
  OK(hurray_file_reader_open(dir, 0, &r, E));
  HurrayFileInfo info;
  OK(hurray_file_reader_info(r, &info, E));
  assert_int_equal(info.shard_count, SAMPLE_COUNT / 2);
  assert_int_equal(info.tensor_count, SAMPLE_COUNT);
  HurrayMetaValue *got = NULL;
  OK(hurray_file_reader_metadata(r, HURRAY_FILE_WHOLE, &got, E));
  assert_int_equal(got->count, 1);
  assert_string_equal(got->as.items[0].as.string, "tiny");
  hurray_meta_destroy(got);
  OK(hurray_file_reader_verify(r, HURRAY_FILE_WHOLE, NULL, NULL, E));
  hurray_file_reader_destroy(r);

  /* A smaller checkpoint over it removes the old shards; one abandoned changes nothing. */
  OK(hurray_shard_writer_create(dir, 1u << 30, &options, NULL, &w, E));
  Sample s = sample_dense();
  HurrayFileWriter *shard = NULL;
  OK(hurray_shard_writer_next(w, s.name, 24, &shard, E));
  OK(hurray_file_writer_add(shard, s.name, &s.desc, s.list, NULL, E));
  OK(hurray_shard_writer_finish(w, E));
  hurray_shard_writer_destroy(w);
  OK(hurray_shard_writer_create(dir, 1u << 30, &options, NULL, &w, E));
  OK(hurray_shard_writer_next(w, "other", 24, &shard, E));
  OK(hurray_file_writer_add(shard, "other", &s.desc, s.list, NULL, E));
  hurray_shard_writer_destroy(w); /* not finished */
  sample_free(&s);
  char command[600];
  snprintf(command, sizeof command, "test \"$(ls -A '%s' | tr '\\n' ' ')\" = "
           "'model-00001-of-00001.hurray model.hurray.index.json '", dir);
  assert_int_equal(system(command), 0);
  OK(hurray_file_reader_open(dir, 0, &r, E));
  uint32_t index = 0;
  OK(hurray_file_reader_find(r, "dense", &index, E));
  assert_int_equal(hurray_file_reader_find(r, "other", &index, &error), HURRAY_EINVAL);
  hurray_file_reader_destroy(r);
  assert_int_equal(hurray_shard_writer_create(dir, 0, NULL, NULL, &w, &error), HURRAY_EINVAL);
}

static void sizes_are_spelled_as_hugging_face_spells_them(void **state) {
  (void)state;
  static const struct {
    const char *text;
    uint64_t bytes;
  } kGood[] = {{"1", 1},           {"5GB", 5000000000ull}, {"2GiB", 2ull << 30},
               {"500MB", 500000000}, {"10KiB", 10240},     {"7B", 7},
               {"1TiB", 1ull << 40}, {"3TB", 3000000000000ull}};
  for (size_t i = 0; i < sizeof kGood / sizeof *kGood; i++) {
    uint64_t n = 0;
    OK(hurray_size_parse(kGood[i].text, &n, E));
    assert_int_equal(n, kGood[i].bytes);
  }
  static const char *const kBad[] = {"", "0", "0GB", "5 GB", "5gb", "GB", "-1", "1.5GB",
                                     "18446744073709551616", "20000000TiB"};
  for (size_t i = 0; i < sizeof kBad / sizeof *kBad; i++) {
    uint64_t n = 0;
    HurrayError error = {0};
    assert_int_equal(hurray_size_parse(kBad[i], &n, &error), HURRAY_EINVAL);
    assert_non_null(strstr(error.message, "is not a positive size"));
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(the_index_is_hugging_faces_shape_byte_for_byte),
      cmocka_unit_test(the_index_writer_refuses_what_no_reader_would_take),
      cmocka_unit_test(every_layout_reads_back_through_one_reader),
      cmocka_unit_test(a_broken_checkpoint_is_refused_naming_shard_and_tensor),
      cmocka_unit_test(a_shard_writer_stages_until_finished),
      cmocka_unit_test(sizes_are_spelled_as_hugging_face_spells_them),
  };
  return cmocka_run_group_tests(tests, make_dir, remove_dir);
}
