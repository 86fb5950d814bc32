/* make_files.c -- writes the Hurray files the CLI tests run on, and the seed corpus of the
 * file fuzzer, through the public API (the layouts come from tests/c/test_file_helpers.h).
 *
 *   make_files DIR            good.hurray (every layout, with metadata), bad_checksum.hurray,
 *                             truncated.hurray, empty.hurray, not_hurray.txt, dense.hurray
 *                             (the dense samples only, for `hurray convert`), bad_field.hurray
 *                             (dense.hurray with an unknown role for its first buffer,
 *                             checksums recomputed: a malformed file that checksums cannot
 *                             catch), bad_total.hurray (dense.hurray whose index header
 *                             counts a data byte too many: caught by verify only)
 *   make_files --corpus DIR   a small valid file per layout, files with metadata and large
 *                             alignment, and broken ones (the corpus of fuzz/fuzz_file.c)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "../c/test_file_helpers.h"

static char g_path[1024];

static const char *join(const char *dir, const char *name) {
  snprintf(g_path, sizeof g_path, "%s/%s", dir, name);
  return g_path;
}

static HurrayMetaValue string_value(const char *s) {
  HurrayMetaValue v = {.type = HURRAY_META_STRING, .count = (uint32_t)strlen(s)};
  v.as.string = s;
  return v;
}

/* Writes samples [first, first + count) to `path`. */
static void write_samples(const char *path, size_t first, size_t count, uint32_t alignment,
                          bool with_metadata) {
  HurrayError error = {0};
  HurrayFileWriter *w = NULL;
  HurrayFileWriterOptions options = {.alignment = alignment};
  sample_check(hurray_file_writer_create(path, &options, &w, &error), &error, path);
  static const char *const tag_names[] = {"a", "b"};
  HurrayMetaValue tags[2] = {string_value(tag_names[0]), string_value(tag_names[1])};
  static const char *const keys[] = {"model", "layers", "tags", "scale", "quantised"};
  HurrayMetaValue items[5] = {string_value("test"),
                              {.type = HURRAY_META_INT64},
                              {.type = HURRAY_META_LIST, .count = 2},
                              {.type = HURRAY_META_FLOAT64},
                              {.type = HURRAY_META_BOOL}};
  items[1].as.int64 = 12;
  items[2].as.items = tags;
  items[3].as.float64 = 0.5;
  items[4].as.boolean = 1;
  HurrayMetaValue file_meta = {.type = HURRAY_META_MAP, .count = 5, .keys = keys};
  file_meta.as.items = items;
  static const char *const note_keys[] = {"note"};
  HurrayMetaValue note = string_value("red \x1b[31mtext\x1b[0m");
  HurrayMetaValue tensor_meta = {.type = HURRAY_META_MAP, .count = 1, .keys = note_keys};
  tensor_meta.as.items = &note;
  if (with_metadata) {
    sample_check(hurray_file_writer_set_metadata(w, &file_meta, &error), &error, "metadata");
  }
  for (size_t i = first; i < first + count; i++) {
    Sample s = kSamples[i]();
    sample_check(hurray_file_writer_add(w, s.name, &s.desc, s.list,
                                        with_metadata && i == first ? &tensor_meta : NULL, &error),
                 &error, s.name);
    sample_free(&s);
  }
  sample_check(hurray_file_writer_finish(w, &error), &error, path);
  hurray_file_writer_destroy(w);
}

static unsigned char *read_all(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) abort();
  fseek(f, 0, SEEK_END);
  *size = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *bytes = malloc(*size);
  if (bytes == NULL || fread(bytes, 1, *size, f) != *size) abort();
  fclose(f);
  return bytes;
}

static void write_all(const char *path, const unsigned char *bytes, size_t size) {
  FILE *f = fopen(path, "wb");
  if (f == NULL || fwrite(bytes, 1, size, f) != size || fclose(f) != 0) abort();
}

/* Copies `from` to `to` with byte `at` flipped (or cut to `at` bytes when `cut`). */
static void damage(const char *from, const char *to, size_t at, bool cut) {
  size_t size = 0;
  unsigned char *bytes = read_all(from, &size);
  if (cut) {
    size = at;
  } else {
    bytes[at] ^= 0x01;
  }
  write_all(to, bytes, size);
  free(bytes);
}

/* Copies `from` to `to` with the role of the first tensor's first buffer set to 9, which no
 * role has, and the checksums recomputed, as a hostile writer would. The record (spec §6) is a
 * name length, the name, a one-byte metadata length and buffer count, then the role. */
static void set_unknown_role(const char *from, const char *to) {
  size_t size = 0;
  unsigned char *bytes = read_all(from, &size);
  uint64_t index = image_load64(bytes + 24);
  const unsigned char *entry = bytes + index + 64;
  unsigned char *record = bytes + index + (entry[0] | entry[1] << 8 | entry[2] << 16);
  record[1 + record[0] + 2] = 9;
  image_reseal(bytes, size);
  write_all(to, bytes, size);
  free(bytes);
}

/* Copies `from` to `to` with one byte too many in the index header's data_bytes and the
 * checksums recomputed: a fault in a total that only a check of the whole index sees. */
static void add_data_byte(const char *from, const char *to) {
  size_t size = 0;
  unsigned char *bytes = read_all(from, &size);
  uint64_t index = image_load64(bytes + 24);
  image_store64(bytes + index + 32, image_load64(bytes + index + 32) + 1);
  image_reseal(bytes, size);
  write_all(to, bytes, size);
  free(bytes);
}

/* The file offset of buffer `buffer` of tensor `name`. */
static size_t buffer_offset(const char *path, const char *name, uint32_t buffer) {
  HurrayError error = {0};
  HurrayFileReader *r = NULL;
  uint32_t index = 0;
  HurrayFileBufferInfo info;
  sample_check(hurray_file_reader_open(path, 0, &r, &error), &error, path);
  sample_check(hurray_file_reader_find(r, name, &index, &error), &error, name);
  sample_check(hurray_file_reader_buffer_info(r, index, buffer, &info, &error), &error, name);
  hurray_file_reader_destroy(r);
  return (size_t)info.offset;
}

static void write_cli_files(const char *dir) {
  char good[1024];
  snprintf(good, sizeof good, "%s", join(dir, "good.hurray"));
  write_samples(good, 0, SAMPLE_COUNT, 0, true);
  damage(good, join(dir, "bad_checksum.hurray"), buffer_offset(good, "per_channel", 1) + 2, false);
  size_t size = 0;
  free(read_all(good, &size));
  damage(good, join(dir, "truncated.hurray"), size / 2, true);
  write_samples(join(dir, "empty.hurray"), 0, 0, 0, false);
  write_all(join(dir, "not_hurray.txt"), (const unsigned char *)"hello\n", 6);
  write_samples(join(dir, "dense.hurray"), 0, 5, 0, false); /* dense, strided, negative, scalar,
                                                               empty */
  char dense[1024];
  snprintf(dense, sizeof dense, "%s", join(dir, "dense.hurray"));
  set_unknown_role(dense, join(dir, "bad_field.hurray"));
  add_data_byte(dense, join(dir, "bad_total.hurray"));
}

static void write_corpus(const char *dir) {
  for (size_t i = 0; i < SAMPLE_COUNT; i++) {
    Sample s = kSamples[i]();
    char name[64];
    snprintf(name, sizeof name, "%s.hurray", s.name);
    sample_free(&s);
    write_samples(join(dir, name), i, 1, 0, false);
  }
  char all[1024];
  snprintf(all, sizeof all, "%s", join(dir, "all.hurray"));
  write_samples(all, 0, SAMPLE_COUNT, 0, true);
  write_samples(join(dir, "aligned_4096.hurray"), 6, 2, 4096, true);
  write_samples(join(dir, "empty.hurray"), 0, 0, 0, true);
  size_t size = 0;
  free(read_all(all, &size));
  damage(all, join(dir, "broken_truncated.hurray"), size - 100, true);
  damage(all, join(dir, "broken_magic.hurray"), 1, false);
  damage(all, join(dir, "broken_version.hurray"), 9, false);
  damage(all, join(dir, "broken_data.hurray"), buffer_offset(all, "paged", 0), false);
}

int main(int argc, char **argv) {
  if (argc == 2) {
    write_cli_files(argv[1]);
  } else if (argc == 3 && strcmp(argv[1], "--corpus") == 0) {
    write_corpus(argv[2]);
  } else {
    fprintf(stderr, "usage: make_files DIR | make_files --corpus DIR\n");
    return 2;
  }
  return 0;
}
