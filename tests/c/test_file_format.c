/* test_file_format.c -- the file format's bytes: the exact bytes of a tiny file (header, data
 * and index, checksums included), and every class of bad file with the status and message a
 * reader must give: corrupt, truncated at every length, wrong version, oversized, misaligned,
 * overlapping, duplicate names, malformed records and metadata, bad checksums. Broken files
 * are made by patching a valid image and, where a check after the checksums is the target,
 * resealing the index's chunk checksums and the header checksum, exactly as a hostile writer
 * would. A reader validates lazily (spec §9): a broken index is refused by open or at the first
 * use of what is broken, and a broken record that is never used does not matter. */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "file.h" /* hurray__xxh3 and the hasher, against xxHash's own */
#include "test_file_helpers.h"
#include "test_tmpdir.h"

/* ---- the ABI of the file container's structs and constants ------------------------------- */

#define PIN_SIZE(type, size) _Static_assert(sizeof(type) == (size), "sizeof " #type)
#define PIN_OFFSET(type, field, offset) \
  _Static_assert(offsetof(type, field) == (offset), "offsetof " #type "." #field)

PIN_SIZE(HurrayFileWriterOptions, 32);
PIN_OFFSET(HurrayFileWriterOptions, alignment, 0);
PIN_OFFSET(HurrayFileWriterOptions, flags, 4); /* was reserved0, which had to be zero: 0 is durable */
PIN_OFFSET(HurrayFileWriterOptions, reserved, 8);
PIN_SIZE(HurrayFileInfo, 80);
PIN_OFFSET(HurrayFileInfo, version_major, 0);
PIN_OFFSET(HurrayFileInfo, version_minor, 2);
PIN_OFFSET(HurrayFileInfo, alignment, 4);
PIN_OFFSET(HurrayFileInfo, tensor_count, 8);
PIN_OFFSET(HurrayFileInfo, buffer_count, 12);
PIN_OFFSET(HurrayFileInfo, file_size, 16);
PIN_OFFSET(HurrayFileInfo, data_bytes, 24);
PIN_OFFSET(HurrayFileInfo, index_offset, 32);
PIN_OFFSET(HurrayFileInfo, index_length, 40);
PIN_OFFSET(HurrayFileInfo, format, 48);
PIN_OFFSET(HurrayFileInfo, reserved0, 49);
PIN_OFFSET(HurrayFileInfo, shard_count, 52);
PIN_OFFSET(HurrayFileInfo, reserved, 56);
PIN_SIZE(HurrayFileBufferInfo, 48);
PIN_OFFSET(HurrayFileBufferInfo, desc, 0);
PIN_OFFSET(HurrayFileBufferInfo, offset, 24);
PIN_OFFSET(HurrayFileBufferInfo, checksum, 32);
PIN_OFFSET(HurrayFileBufferInfo, role, 40);
PIN_OFFSET(HurrayFileBufferInfo, reserved, 41);
#if UINTPTR_MAX == UINT64_MAX
PIN_SIZE(HurrayMetaValue, 24);
PIN_OFFSET(HurrayMetaValue, type, 0);
PIN_OFFSET(HurrayMetaValue, reserved, 1);
PIN_OFFSET(HurrayMetaValue, count, 4);
PIN_OFFSET(HurrayMetaValue, as, 8);
PIN_OFFSET(HurrayMetaValue, keys, 16);
PIN_SIZE(HurrayFileTensorInfo, 40);
PIN_OFFSET(HurrayFileTensorInfo, name, 0);
PIN_OFFSET(HurrayFileTensorInfo, buffer_count, 8);
PIN_OFFSET(HurrayFileTensorInfo, layout, 12);
PIN_OFFSET(HurrayFileTensorInfo, dtype, 13);
PIN_OFFSET(HurrayFileTensorInfo, reserved, 14);
PIN_OFFSET(HurrayFileTensorInfo, data_bytes, 16);
PIN_OFFSET(HurrayFileTensorInfo, reserved2, 24);
#endif
_Static_assert(HURRAY_META_BOOL == 1 && HURRAY_META_INT64 == 2 && HURRAY_META_FLOAT64 == 3 &&
                   HURRAY_META_STRING == 4 && HURRAY_META_LIST == 5 && HURRAY_META_MAP == 6 &&
                   HURRAY_META_NULL == 7 && HURRAY_META_INTEGER == 8,
               "metadata type codes are stored in files");
_Static_assert(HURRAY_FILE_HEADER_SIZE == 64 && HURRAY_FILE_VERSION_MAJOR == 2,
               "the header and the format version");

/* ---- file images -------------------------------------------------------------------------- */

typedef struct Image {
  uint8_t *bytes; /* aligned for hurray_file_reader_open_memory */
  size_t size;
} Image;

static Image image_alloc(size_t size) {
  Image im = {aligned_alloc(4096, (size + 4096) / 4096 * 4096), size};
  assert_non_null(im.bytes);
  return im;
}

static Image image_copy(Image im) {
  Image copy = image_alloc(im.size);
  memcpy(copy.bytes, im.bytes, im.size);
  return copy;
}

static Image image_read(const char *path) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  Image im = image_alloc((size_t)ftell(f));
  fseek(f, 0, SEEK_SET);
  assert_int_equal(fread(im.bytes, 1, im.size, f), im.size);
  fclose(f);
  return im;
}

static void image_write(Image im, const char *path) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(im.bytes, 1, im.size, f), im.size);
  fclose(f);
}

/* The tiny file of the spec's example: "x", dense float32 [2] = {1, 2}, alignment 64, its part
 * described with `strides` (NULL: row-major contiguous) from `byte_offset`. */
static Image tiny_image_strided(const int64_t *strides, uint64_t byte_offset) {
  const char *path = path_of("tiny.hurray");
  HurrayFileWriter *w = NULL;
  OK(hurray_file_writer_create(path, NULL, &w, E));
  static const int64_t shape[] = {2};
  const float values[] = {1.0f, 2.0f};
  HurrayBufferList *list = sample_list();
  sample_append(list, values, sizeof values, HURRAY_ROLE_VALUES);
  const HurrayArray part = SAMPLE_ARRAY(HURRAY_DTYPE_FLOAT32, 1, shape, strides, byte_offset, 0);
  const HurrayTensorDesc desc = {.layout = HURRAY_LAYOUT_DENSE,
                                 .ndim = 1,
                                 .shape = shape,
                                 .parts = &part,
                                 .nparts = 1,
                                 .dtype = HURRAY_DTYPE_FLOAT32};
  OK(hurray_file_writer_add(w, "x", &desc, list, NULL, E));
  hurray_buffer_list_destroy(list);
  OK(hurray_file_writer_finish(w, E));
  hurray_file_writer_destroy(w);
  return image_read(path);
}

static Image tiny_image(void) {
  return tiny_image_strided(NULL, 0);
}

/* Samples `first..first+count-1` with optional file metadata. */
static Image samples_image(size_t first, size_t count, const HurrayMetaValue *file_meta,
                           const HurrayMetaValue *tensor_meta) {
  const char *path = path_of("samples.hurray");
  HurrayFileWriter *w = NULL;
  OK(hurray_file_writer_create(path, NULL, &w, E));
  OK(hurray_file_writer_set_metadata(w, file_meta, E));
  for (size_t i = first; i < first + count; i++) {
    Sample s = kSamples[i]();
    OK(hurray_file_writer_add(w, s.name, &s.desc, s.list, tensor_meta, E));
    sample_free(&s);
  }
  OK(hurray_file_writer_finish(w, E));
  hurray_file_writer_destroy(w);
  return image_read(path);
}

static uint64_t load64(const uint8_t *p) {
  return image_load64(p);
}

static void store64(uint8_t *p, uint64_t v) {
  image_store64(p, v);
}

static void store32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t load32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t index_offset(Image im) {
  return load64(im.bytes + 24);
}

/* Recomputes the index's chunk checksums and the header checksum, as a writer of a hostile
 * file would. */
static void reseal(Image im) {
  image_reseal(im.bytes, im.size);
}

/* The first byte of tensor `i`'s record (spec §5.3). */
static uint8_t *record_of(Image im, uint32_t i) {
  uint64_t index = index_offset(im);
  return im.bytes + index + load32(im.bytes + index + 64 + 4 * (uint64_t)i);
}

static size_t find_bytes(Image im, const void *pattern, size_t len) {
  for (size_t i = 0; i + len <= im.size; i++) {
    if (memcmp(im.bytes + i, pattern, len) == 0) return i;
  }
  fail_msg("pattern not found");
  return 0;
}

/* Every use of a reader in order, until one fails: each tensor (its info, which validates it),
 * the file metadata, then verification of the whole file, which checks everything. */
static int use_all(const HurrayFileReader *r, HurrayError *error) {
  HurrayFileInfo info;
  int status = hurray_file_reader_info(r, &info, error);
  for (uint32_t i = 0; i < info.tensor_count && status == HURRAY_OK; i++) {
    HurrayFileTensorInfo ti;
    status = hurray_file_reader_tensor_info(r, i, &ti, error);
  }
  HurrayMetaValue *m = NULL;
  if (status == HURRAY_OK) status = hurray_file_reader_metadata(r, HURRAY_FILE_WHOLE, &m, error);
  hurray_meta_destroy(m);
  if (status == HURRAY_OK) {
    status = hurray_file_reader_verify(r, HURRAY_FILE_WHOLE, NULL, NULL, error);
  }
  return status;
}

/* Opens a copy of the image from memory and uses all of it; the reader is destroyed again. */
static int open_image(Image im, HurrayError *error) {
  Image copy = image_copy(im);
  HurrayFileReader *r = NULL;
  int status = hurray_file_reader_open_memory(copy.bytes, copy.size, free, copy.bytes, &r, error);
  if (status == HURRAY_OK) status = use_all(r, error);
  hurray_file_reader_destroy(r);
  return status;
}

/* The image must be refused, by open or at first use, with `status` and a message containing
 * `words`, both from memory and from a file opened each way. */
static void expect_refused(Image im, int status, const char *words) {
  const char *path = path_of("bad.hurray");
  image_write(im, path);
  for (int way = 0; way < 3; way++) {
    HurrayError error = {0};
    HurrayFileReader *r = NULL;
    int got = HURRAY_OK;
    if (way == 0) {
      got = open_image(im, &error);
    } else {
      got = hurray_file_reader_open(path, way == 2 ? HURRAY_FILE_OPEN_PREAD : 0, &r, &error);
      if (got == HURRAY_OK) got = use_all(r, &error);
    }
    hurray_file_reader_destroy(r);
    if (got != status || strstr(error.message, words) == NULL) {
      fail_msg("expected %s with \"%s\", got %s: %s", hurray_status_name(status), words,
               hurray_status_name(got), error.message);
    }
    assert_int_equal(error.code, status);
  }
  free(im.bytes);
}

/* ---- shared buffers (spec §4, format 2.2) -------------------------------------------------- */

/* "a" and "b": one float32 [4] tensor added twice from the same memory (a tied weight), or with
 * that memory refilled in between when `refill`. */
static Image tied_image(bool refill) {
  const char *path = path_of("tied.hurray");
  HurrayFileWriter *w = NULL;
  OK(hurray_file_writer_create(path, NULL, &w, E));
  static const int64_t shape[] = {4};
  const float values[] = {1.0f, 2.0f, 3.0f, 4.0f};
  HurrayBufferList *list = sample_list();
  sample_append(list, values, sizeof values, HURRAY_ROLE_VALUES);
  const HurrayArray part = SAMPLE_ARRAY(HURRAY_DTYPE_FLOAT32, 1, shape, NULL, 0, 0);
  const HurrayTensorDesc desc = {.layout = HURRAY_LAYOUT_DENSE, .ndim = 1, .shape = shape,
                                 .parts = &part, .nparts = 1, .dtype = HURRAY_DTYPE_FLOAT32};
  OK(hurray_file_writer_add(w, "a", &desc, list, NULL, E));
  if (refill) ((float *)list->buffers[0]->data)[3] = 5.0f; /* memory reused for other values */
  OK(hurray_file_writer_add(w, "b", &desc, list, NULL, E));
  hurray_buffer_list_destroy(list);
  OK(hurray_file_writer_finish(w, E));
  hurray_file_writer_destroy(w);
  return image_read(path);
}

/* Byte 4 of a record named by one letter without metadata: its first buffer's role byte. */
enum { ROLE_BYTE = 4 };

static void the_same_memory_is_written_once_as_a_shared_buffer(void **state) {
  (void)state;
  Image tied = tied_image(false), refilled = tied_image(true);
  assert_int_equal(tied.bytes[10], 2); /* format 2.2, for the shared buffer */
  assert_int_equal(refilled.bytes[10], 0);
  assert_int_equal(record_of(tied, 0)[ROLE_BYTE], HURRAY_ROLE_VALUES);
  assert_int_equal(record_of(tied, 1)[ROLE_BYTE], 0x80 | HURRAY_ROLE_VALUES);
  assert_int_equal(record_of(refilled, 1)[ROLE_BYTE], HURRAY_ROLE_VALUES);
  assert_true(index_offset(tied) < index_offset(refilled)); /* 16 data bytes, not 2 x 64 */
  for (uint32_t way = 0; way < 2; way++) {
    image_write(tied, path_of("tied.hurray"));
    HurrayFileReader *r = NULL;
    OK(hurray_file_reader_open(path_of("tied.hurray"), way ? HURRAY_FILE_OPEN_PREAD : 0, &r, E));
    OK(hurray_file_reader_verify(r, HURRAY_FILE_WHOLE, NULL, NULL, E));
    HurrayFileInfo info;
    OK(hurray_file_reader_info(r, &info, E));
    assert_int_equal(info.buffer_count, 2);
    assert_int_equal(info.data_bytes, 32); /* each tensor's 16 bytes, as the tensors hold them */
    HurrayTensorContext *a = NULL, *b = NULL;
    OK(hurray_file_reader_get(r, 0, HURRAY_FILE_GET_VERIFY, &a, E));
    OK(hurray_file_reader_get(r, 1, HURRAY_FILE_GET_VERIFY, &b, E));
    assert_memory_equal(a->buffers->buffers[0]->data, b->buffers->buffers[0]->data, 16);
    assert_int_equal(((const float *)b->buffers->buffers[0]->data)[3], 4);
    if (way == 0) /* mapped: one memory under both names */
      assert_ptr_equal(a->buffers->buffers[0]->data, b->buffers->buffers[0]->data);
    hurray_tensor_context_release(a);
    hurray_tensor_context_release(b);
    hurray_file_reader_destroy(r);
  }
  HurrayFileReader *r = NULL; /* refilled: two buffers, each with its own values */
  image_write(refilled, path_of("refilled.hurray"));
  OK(hurray_file_reader_open(path_of("refilled.hurray"), 0, &r, E));
  HurrayTensorContext *b = NULL;
  OK(hurray_file_reader_get(r, 1, HURRAY_FILE_GET_VERIFY, &b, E));
  assert_true(((const float *)b->buffers->buffers[0]->data)[3] == 5.0f);
  hurray_tensor_context_release(b);
  hurray_file_reader_destroy(r);
  free(refilled.bytes);

  Image im = image_copy(tied); /* the repeat not marked shared: two tensors on one region */
  record_of(im, 1)[ROLE_BYTE] = HURRAY_ROLE_VALUES;
  reseal(im);
  expect_refused(im, HURRAY_EFORMAT, "tensor 1 'b', buffer 0: it overlaps the buffer before it");
  im = image_copy(tied); /* the first marked shared: nothing before it to share */
  record_of(im, 0)[ROLE_BYTE] = 0x80 | HURRAY_ROLE_VALUES;
  reseal(im);
  expect_refused(im, HURRAY_EFORMAT,
                 "tensor 0 'a', buffer 0: it is shared, but no buffer before it has its offset, "
                 "size and checksum");
  im = image_copy(tied); /* shared, with another checksum than the bytes it repeats */
  uint8_t *checksum = record_of(im, 1) + ROLE_BYTE + 3;
  checksum[0] ^= 1;
  reseal(im);
  expect_refused(im, HURRAY_EFORMAT, "tensor 1 'b', buffer 0: it is shared, but no buffer");
  free(tied.bytes);
}

/* ---- golden bytes ------------------------------------------------------------------------- */

// clang-format off
static const uint8_t kTinyFile[] = {
    /* header */
    0x89, 0x48, 0x52, 0x59, 0x0d, 0x0a, 0x1a, 0x0a, 0x02, 0x00, 0x00, 0x00,
    0x06, 0x0c, 0x00, 0x00, 0xba, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x48, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x6a, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x84, 0x1e, 0xd5, 0xff, 0x04, 0x61, 0xc1, 0x99,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1d, 0xab, 0x2a, 0x9e,
    0x9c, 0xb3, 0xbe, 0x9d,
    /* data: buffer 0 */
    0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40,
    /* index header */
    0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00,
    /* tensor table: record 0 at 84, ending at 106 */
    0x54, 0x00, 0x00, 0x00, 0x6a, 0x00, 0x00, 0x00,
    /* name table */
    0x00, 0x00, 0x00, 0x00,
    /* bucket table */
    0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00,
    /* record: name, metadata length, buffers: role, offset / 64, size, checksum */
    0x01, 0x78, 0x00, 0x01, 0x00, 0x01, 0x08, 0xb7, 0xf4, 0x34, 0x71, 0x8f,
    0xd7, 0xe8, 0x4d,
    /* node: layout, dtype, ndim, nparts, no optional fields, shape */
    0x00, 0x0a, 0x01, 0x01, 0x00, 0x02,
    /* part: the node's dtype and shape, buffer 0, byte offset 0 */
    0x00,
    /* chunk table */
    0x07, 0x5a, 0x20, 0xa9, 0xd9, 0xcc, 0x61, 0xa9,
};
// clang-format on

/* Positions in the tiny file (spec §11). */
enum {
  TINY_DATA = 64,
  TINY_INDEX = 72,
  TINY_TENSOR = TINY_INDEX + 64,
  TINY_NAME = TINY_TENSOR + 8,
  TINY_BUCKETS = TINY_NAME + 4,
  TINY_RECORD = TINY_BUCKETS + 8,
  TINY_BUFFER = TINY_RECORD + 4,
  TINY_NODE = TINY_BUFFER + 11,
  TINY_PART = TINY_NODE + 6,
  TINY_CHUNKS = TINY_PART + 1,
};

static void tiny_file_bytes_are_pinned(void **state) {
  (void)state;
  Image im = tiny_image();
  assert_int_equal(im.size, sizeof kTinyFile);
  assert_int_equal(TINY_CHUNKS + 8, sizeof kTinyFile);
  assert_memory_equal(im.bytes, kTinyFile, sizeof kTinyFile);
  assert_int_equal(XXH3_64bits(kTinyFile + TINY_DATA, 8), load64(kTinyFile + TINY_BUFFER + 3));
  assert_int_equal(XXH3_64bits(kTinyFile + TINY_INDEX, TINY_CHUNKS - TINY_INDEX),
                   load64(kTinyFile + TINY_CHUNKS));
  assert_int_equal(XXH3_64bits(kTinyFile + TINY_CHUNKS, 8), load64(kTinyFile + 40));
  free(im.bytes);
}

/* Spec §6.3: a writer stores strides only when they differ from the row-major default, so a
 * contiguous array spelled with explicit strides (as NumPy and DLPack producers spell it) is
 * written byte for byte as with NULL strides. Strides that differ are stored. */
static void row_major_strides_are_not_stored(void **state) {
  (void)state;
  static const int64_t row_major[] = {1}, reversed[] = {-1};
  Image im = tiny_image_strided(row_major, 0);
  assert_int_equal(im.size, sizeof kTinyFile);
  assert_memory_equal(im.bytes, kTinyFile, sizeof kTinyFile);
  free(im.bytes);
  im = tiny_image_strided(reversed, 4); /* {2, 1} */
  assert_int_equal(im.size, sizeof kTinyFile + 2);
  assert_int_equal(im.bytes[TINY_PART], 0x11); /* strides and a byte offset */
  assert_int_equal(im.bytes[TINY_PART + 1], 4); /* byte_offset 4 */
  assert_int_equal(im.bytes[TINY_PART + 2], 1); /* zigzag(-1) */
  free(im.bytes);
}

/* ---- truncation and corruption ------------------------------------------------------------ */

static void every_prefix_fails_cleanly(void **state) {
  (void)state;
  Image images[] = {tiny_image(), samples_image(0, SAMPLE_COUNT, NULL, NULL)};
  for (size_t i = 0; i < 2; i++) {
    Image im = images[i];
    const char *path = path_of("prefix.hurray");
    for (size_t n = 0; n <= im.size; n++) {
      Image prefix = {im.bytes, n};
      HurrayError error = {0};
      int status = open_image(prefix, &error);
      if (n == im.size) {
        assert_int_equal(status, HURRAY_OK);
        continue;
      }
      assert_int_equal(status, HURRAY_EFORMAT);
      assert_non_null(strstr(error.message, "truncated"));
      if (n % 7 == 0 || n < 80) { /* through the file system too, both ways */
        image_write(prefix, path);
        HurrayFileReader *r = NULL;
        assert_int_equal(hurray_file_reader_open(path, 0, &r, &error), HURRAY_EFORMAT);
        assert_int_equal(hurray_file_reader_open(path, HURRAY_FILE_OPEN_PREAD, &r, &error),
                         HURRAY_EFORMAT);
      }
    }
    free(im.bytes);
  }
}

/* Flipping any byte is caught: on open (the header, the chunk table and the tiny index, one
 * chunk that open reads for the index header), or by verification (data). */
static void every_flipped_byte_is_caught(void **state) {
  (void)state;
  Image im = tiny_image();
  for (size_t at = 0; at < im.size; at++) {
    Image bad = image_copy(im);
    bad.bytes[at] ^= 0x5A;
    HurrayError error = {0};
    HurrayFileReader *r = NULL;
    int status = hurray_file_reader_open_memory(bad.bytes, bad.size, free, bad.bytes, &r, &error);
    if (at >= TINY_DATA && at < TINY_INDEX) {
      assert_int_equal(status, HURRAY_OK);
      assert_int_equal(hurray_file_reader_verify(r, HURRAY_FILE_WHOLE, NULL, NULL, &error),
                       HURRAY_ECHECKSUM);
    } else {
      assert_int_not_equal(status, HURRAY_OK);
    }
    hurray_file_reader_destroy(r);
  }
  free(im.bytes);
}

static void bad_checksums_are_found_by_verify(void **state) {
  (void)state;
  Image im = samples_image(6, 1, NULL, NULL); /* per_channel: values, scales, zero_points */
  HurrayFileReader *r = NULL;
  OK(hurray_file_reader_open_memory(im.bytes, im.size, NULL, NULL, &r, E));
  HurrayFileBufferInfo scales;
  OK(hurray_file_reader_buffer_info(r, 0, 1, &scales, E));
  hurray_file_reader_destroy(r);
  im.bytes[scales.offset + 3] ^= 1; /* a bit of the scales */
  const char *path = path_of("flipped.hurray");
  image_write(im, path);
  for (uint32_t flags = 0; flags <= HURRAY_FILE_OPEN_PREAD; flags++) {
    OK(hurray_file_reader_open(path, flags, &r, E)); /* data is not read on open */
    HurrayError error = {0};
    assert_int_equal(hurray_file_reader_verify(r, HURRAY_FILE_WHOLE, NULL, NULL, &error),
                     HURRAY_ECHECKSUM);
    assert_non_null(strstr(error.message, "tensor 'per_channel', buffer 1 (scales)"));
    assert_int_equal(hurray_file_reader_verify(r, 0, NULL, NULL, &error), HURRAY_ECHECKSUM);
    HurrayTensorContext *c = NULL;
    assert_int_equal(hurray_file_reader_get(r, 0, HURRAY_FILE_GET_VERIFY, &c, &error),
                     HURRAY_ECHECKSUM);
    assert_null(c);
    assert_non_null(strstr(error.message, "per_channel"));
    OK(hurray_file_reader_get(r, 0, 0, &c, E)); /* unverified reads still work */
    hurray_tensor_context_release(c);
    hurray_file_reader_destroy(r);
  }
  free(im.bytes);
}

/* ---- header ------------------------------------------------------------------------------- */

static void header_violations_are_named(void **state) {
  (void)state;
  Image tiny = tiny_image();
  Image im;

  im = image_copy(tiny);
  im.bytes[1] = 'X';
  expect_refused(im, HURRAY_EFORMAT, "bad magic");

  im = image_copy(tiny);
  im.bytes[4] = '\n'; /* a CR lost in a text-mode transfer */
  expect_refused(im, HURRAY_EFORMAT, "bad magic");

  im = image_copy(tiny);
  im.bytes[8] = 3;
  expect_refused(im, HURRAY_EUNSUPPORTED, "version 3.0");

  im = image_copy(tiny); /* format 1.0 is refused, by name (ADR-056) */
  im.bytes[8] = 1;
  expect_refused(im, HURRAY_EUNSUPPORTED, "unsupported file format version 1.0 (this reader "
                                          "reads 2.0 to 2.2)");

  im = image_copy(tiny);
  im.bytes[10] = HURRAY_FILE_VERSION_MINOR + 1; /* a newer minor than this reader */
  expect_refused(im, HURRAY_EUNSUPPORTED, "version 2.3");

  im = image_copy(tiny);
  im.bytes[50] = 1;
  expect_refused(im, HURRAY_ECHECKSUM, "header checksum");

  im = image_copy(tiny);
  im.bytes[50] = 1;
  reseal(im);
  expect_refused(im, HURRAY_EFORMAT, "reserved header bytes");

  im = image_copy(tiny);
  im.bytes[12] = 5; /* 32-byte alignment */
  reseal(im);
  expect_refused(im, HURRAY_EALIGN, "alignment 2^5");

  im = image_copy(tiny);
  im.bytes[12] = 22;
  reseal(im);
  expect_refused(im, HURRAY_EALIGN, "alignment 2^22");

  im = image_copy(tiny);
  im.bytes[13] = 11; /* 2 KiB chunks */
  reseal(im);
  expect_refused(im, HURRAY_EFORMAT, "index chunk size 2^11");

  im = image_copy(tiny);
  im.bytes[14] = 1;
  reseal(im);
  expect_refused(im, HURRAY_EFORMAT, "reserved header bytes");

  im = image_alloc(tiny.size + 1); /* one byte appended */
  memcpy(im.bytes, tiny.bytes, tiny.size);
  im.bytes[tiny.size] = 0;
  expect_refused(im, HURRAY_EFORMAT, "trailing bytes");

  im = image_copy(tiny);
  store64(im.bytes + 32, ((uint64_t)1 << 28) + 8); /* index_length over the limit */
  reseal(im);
  expect_refused(im, HURRAY_ELIMIT, "more than the limit");

  im = image_copy(tiny);
  store64(im.bytes + 24, TINY_INDEX + 1); /* index at an odd offset, still ending the file */
  store64(im.bytes + 32, TINY_CHUNKS - TINY_INDEX - 1);
  reseal(im);
  expect_refused(im, HURRAY_EALIGN, "index offset 73");

  im = image_copy(tiny);
  store64(im.bytes + 24, 32); /* index overlapping the header */
  store64(im.bytes + 32, TINY_CHUNKS - 32);
  reseal(im);
  expect_refused(im, HURRAY_EFORMAT, "between the header and the end");

  im = image_copy(tiny);
  store64(im.bytes + 24, TINY_INDEX - 8); /* index and chunk table not ending the file */
  reseal(im);
  expect_refused(im, HURRAY_EFORMAT, "between the header and the end");

  im = image_copy(tiny);
  im.bytes[TINY_INDEX + 20] ^= 1;
  expect_refused(im, HURRAY_ECHECKSUM, "chunk 0 of the index is corrupt");

  im = image_copy(tiny);
  im.bytes[TINY_CHUNKS] ^= 1;
  expect_refused(im, HURRAY_ECHECKSUM, "the index's chunk table is corrupt");

  free(tiny.bytes);
}

/* ---- index tables ------------------------------------------------------------------------- */

/* Patches the tiny image, reseals it, and expects the refusal. */
static void expect_patched(size_t at, const void *bytes, size_t len, int status,
                           const char *words) {
  Image im = tiny_image();
  memcpy(im.bytes + at, bytes, len);
  reseal(im);
  expect_refused(im, status, words);
}

static void index_violations_are_named(void **state) {
  (void)state;
  uint8_t v[8];

  store32(v, HURRAY_FILE_MAX_TENSORS + 1);
  expect_patched(TINY_INDEX, v, 4, HURRAY_ELIMIT, "tensors");
  store32(v, 1000);
  expect_patched(TINY_INDEX, v, 4, HURRAY_EFORMAT, "too short for its tables");
  store32(v, 21);
  expect_patched(TINY_INDEX + 8, v, 4, HURRAY_ELIMIT, "bucket bits");
  expect_patched(TINY_INDEX + 40, "\x01", 1, HURRAY_EFORMAT, "reserved index header bytes");
  expect_patched(TINY_INDEX + 12, "\x01", 1, HURRAY_EFORMAT, "reserved index header bytes");
  store32(v, HURRAY_FILE_MAX_BUFFERS + 1);
  expect_patched(TINY_INDEX + 4, v, 4, HURRAY_ELIMIT, "buffers");
  store32(v, HURRAY_FILE_META_MAX_BYTES + 1);
  expect_patched(TINY_INDEX + 24, v, 4, HURRAY_ELIMIT, "file metadata is 67108865 bytes");
  store32(v, 16);
  expect_patched(TINY_INDEX + 24, v, 4, HURRAY_EBOUNDS, "file metadata"); /* length, no offset */
  /* The totals are checked by verify, which adds up every record. */
  expect_patched(TINY_INDEX + 4, "\x02", 1, HURRAY_EFORMAT,
                 "the index header counts 2 buffers of 8 bytes but the records hold 1 of 8");
  expect_patched(TINY_INDEX + 32, "\x09", 1, HURRAY_EFORMAT, "counts 1 buffers of 9 bytes");

  /* tensor table */
  expect_patched(TINY_TENSOR, "\x10", 1, HURRAY_EBOUNDS, "tensor 0 record [16, 106) lies outside");
  expect_patched(TINY_TENSOR + 4, "\x6b", 1, HURRAY_EBOUNDS, "outside the index heap");
  expect_patched(TINY_TENSOR + 4, "\x50", 1, HURRAY_EBOUNDS, "outside the index heap");
  expect_patched(TINY_TENSOR + 4, "\x69", 1, HURRAY_EFORMAT, "truncated");

  /* name and bucket tables */
  expect_patched(TINY_NAME, "\x01", 1, HURRAY_EFORMAT, "name table entry 0 names tensor 1 of 1");
  expect_patched(TINY_BUCKETS + 4, "\x00", 1, HURRAY_EFORMAT,
                 "tensor 0 'x' is missing from the name table");
  expect_patched(TINY_BUCKETS, "\x02", 1, HURRAY_EFORMAT, "the bucket table is inconsistent");
  expect_patched(TINY_BUCKETS + 4, "\x02", 1, HURRAY_EFORMAT, "the bucket table is inconsistent");

  /* the buffer entries of the record */
  expect_patched(TINY_BUFFER, "\x09", 1, HURRAY_EFORMAT, "tensor 0 buffer 0: role 9 is unknown");
  expect_patched(TINY_BUFFER + 1, "\x00", 1, HURRAY_EBOUNDS, "outside the data region");
  expect_patched(TINY_BUFFER + 1, "\x02", 1, HURRAY_EBOUNDS, "outside the data region");
  expect_patched(TINY_BUFFER + 2, "\x09", 1, HURRAY_EBOUNDS, "outside the data region");
  expect_patched(TINY_BUFFER + 2, "\x80", 1, HURRAY_EFORMAT, "truncated"); /* a longer size */
}

/* The tables of a two-tensor file ("dense", "strided": one buffer each, bucket_bits 1),
 * patched. */
static void two_tensor_tables_are_checked(void **state) {
  (void)state;
  Image im = samples_image(0, 2, NULL, NULL);
  uint64_t index = index_offset(im);
  uint64_t names = index + 64 + 3 * 4;
  assert_int_equal(load32(im.bytes + index + 8), 1); /* bucket_bits */
  Image bad = image_copy(im); /* the name entries swapped: out of order, or in the wrong bucket */
  uint8_t entry[4];
  memcpy(entry, bad.bytes + names, 4);
  memcpy(bad.bytes + names, bad.bytes + names + 4, 4);
  memcpy(bad.bytes + names + 4, entry, 4);
  reseal(bad);
  expect_refused(bad, HURRAY_EFORMAT, "name table");

  /* Both buffers at the same offset: each tensor alone is fine, verify finds the overlap. */
  bad = image_copy(im);
  record_of(bad, 1)[1 + 7 + 2 + 1] = record_of(bad, 0)[1 + 5 + 2 + 1];
  reseal(bad);
  HurrayFileReader *r = NULL;
  OK(hurray_file_reader_open_memory(bad.bytes, bad.size, NULL, NULL, &r, E));
  HurrayTensorContext *c = NULL;
  for (uint32_t i = 0; i < 2; i++) {
    OK(hurray_file_reader_get(r, i, 0, &c, E));
    hurray_tensor_context_release(c);
  }
  hurray_file_reader_destroy(r);
  expect_refused(bad, HURRAY_EFORMAT,
                 "tensor 1 'strided', buffer 0: it overlaps the buffer before it");
  free(im.bytes);
}

/* Bytes of the data region outside every buffer are padding: open does not read the data
 * region, verify does. */
static void data_padding_is_checked_by_verify(void **state) {
  (void)state;
  /* Every sample, then three bytes: the writer pads the data region to 8 before the index. */
  const char *samples = path_of("samples.hurray");
  HurrayFileWriter *w = NULL;
  OK(hurray_file_writer_create(samples, NULL, &w, E));
  for (size_t i = 0; i < SAMPLE_COUNT; i++) {
    Sample s = kSamples[i]();
    OK(hurray_file_writer_add(w, s.name, &s.desc, s.list, NULL, E));
    sample_free(&s);
  }
  static const int64_t three[] = {3};
  HurrayArray bytes = SAMPLE_ARRAY(HURRAY_DTYPE_UINT8, 1, three, NULL, 0, 0);
  const HurrayTensorDesc odd = {.layout = HURRAY_LAYOUT_DENSE, .ndim = 1, .shape = three,
                                .parts = &bytes, .nparts = 1, .dtype = HURRAY_DTYPE_UINT8};
  HurrayBufferList *list = sample_list();
  sample_append(list, "abc", 3, HURRAY_ROLE_VALUES);
  OK(hurray_file_writer_add(w, "odd", &odd, list, NULL, E));
  hurray_buffer_list_destroy(list);
  OK(hurray_file_writer_finish(w, E));
  hurray_file_writer_destroy(w);
  Image im = image_read(samples);
  uint64_t index = index_offset(im);
  HurrayFileReader *r = NULL;
  OK(hurray_file_reader_open_memory(im.bytes, im.size, NULL, NULL, &r, E));
  HurrayFileInfo info;
  OK(hurray_file_reader_info(r, &info, E));
  uint32_t tensors = info.tensor_count;
  HurrayFileBufferInfo b0, b1, last;
  OK(hurray_file_reader_buffer_info(r, 0, 0, &b0, E));
  OK(hurray_file_reader_buffer_info(r, 1, 0, &b1, E));
  OK(hurray_file_reader_buffer_info(r, tensors - 1, 0, &last, E));
  hurray_file_reader_destroy(r);
  uint64_t end0 = b0.offset + b0.desc.byte_size, end = last.offset + last.desc.byte_size;
  assert_true(end0 < b1.offset && end < index);
  /* Before buffer 1 (tensor 0 owns buffer 0 only), and after the last buffer. */
  const uint64_t spots[] = {end0, end};
  const uint32_t owner[] = {1, tensors - 1};
  const char *path = path_of("padding.hurray");
  for (int spot = 0; spot < 2; spot++) {
    Image bad = image_copy(im);
    bad.bytes[spots[spot]] = 0x5a;
    image_write(bad, path);
    for (int way = 0; way < 3; way++) {
      r = NULL;
      if (way == 0) {
        OK(hurray_file_reader_open_memory(bad.bytes, bad.size, NULL, NULL, &r, E));
      } else {
        OK(hurray_file_reader_open(path, way == 2 ? HURRAY_FILE_OPEN_PREAD : 0, &r, E));
      }
      HurrayError error = {0};
      assert_int_equal(hurray_file_reader_verify(r, HURRAY_FILE_WHOLE, NULL, NULL, &error),
                       HURRAY_EFORMAT);
      assert_non_null(strstr(error.message, "padding in the data region is not zero"));
      OK(hurray_file_reader_verify(r, 0, NULL, NULL, E)); /* tensor 0's bytes are fine */
      assert_int_equal(hurray_file_reader_verify(r, owner[spot], NULL, NULL, &error),
                       HURRAY_EFORMAT);
      hurray_file_reader_destroy(r);
    }
    free(bad.bytes);
  }
  free(im.bytes);
}

/* A file cut short under an open reader: verify reads with pread and says so, mapped or not. */
static void verify_reports_a_file_that_shrank(void **state) {
  (void)state;
  Image im = samples_image(0, SAMPLE_COUNT, NULL, NULL);
  const char *path = path_of("shrinking.hurray");
  for (int way = 0; way < 2; way++) {
    image_write(im, path);
    HurrayFileReader *r = NULL;
    OK(hurray_file_reader_open(path, way == 1 ? HURRAY_FILE_OPEN_PREAD : 0, &r, E));
    assert_int_equal(truncate(path, 100), 0);
    HurrayError error = {0};
    assert_int_equal(hurray_file_reader_verify(r, HURRAY_FILE_WHOLE, NULL, NULL, &error),
                     HURRAY_EIO);
    assert_non_null(strstr(error.message, "the file shrank"));
    hurray_file_reader_destroy(r);
  }
  free(im.bytes);
}

/* Two buffers of a tensor claiming the same bytes. */
static void overlapping_buffers_are_refused(void **state) {
  (void)state;
  Image im = samples_image(6, 1, NULL, NULL); /* per_channel: 3 buffers at 64, 128, 192 */
  /* The record: name length, "per_channel", metadata length, buffer count, then the entries
   * (role, offset / 64, size, checksum: 11 bytes each). */
  uint8_t *entries = record_of(im, 0) + 1 + 11 + 2;
  assert_int_equal(entries[1], 1);
  entries[11 + 1] = 1; /* buffer 1 at buffer 0's offset */
  reseal(im);
  expect_refused(im, HURRAY_EFORMAT, "buffer 1 overlaps the buffer before it");
}

/* A file of two dense tensors called "aaaa" and "aaab". */
static Image two_names_image(void) {
  const char *path = path_of("names.hurray");
  HurrayFileWriter *w = NULL;
  OK(hurray_file_writer_create(path, NULL, &w, E));
  for (int i = 0; i < 2; i++) {
    Sample s = kSamples[0]();
    OK(hurray_file_writer_add(w, i == 0 ? "aaaa" : "aaab", &s.desc, s.list, NULL, E));
    sample_free(&s);
  }
  OK(hurray_file_writer_finish(w, E));
  hurray_file_writer_destroy(w);
  return image_read(path);
}

static void duplicate_names_are_refused(void **state) {
  (void)state;
  Image im = two_names_image();
  /* Rename "aaab" to "aaaa" in its record, and put both in the bucket of "aaaa" (bucket_bits
   * 1: the top bit of the hash), as a writer listing one name twice would. */
  record_of(im, 1)[4] = 'a';
  uint64_t index = index_offset(im);
  uint8_t *names = im.bytes + index + 64 + 3 * 4, *buckets = names + 2 * 4;
  store32(names, 0);
  store32(names + 4, 1);
  uint32_t bucket = (uint32_t)(XXH3_64bits("aaaa", 4) >> 63);
  store32(buckets, 0);
  store32(buckets + 4, bucket == 0 ? 2 : 0);
  store32(buckets + 8, 2);
  reseal(im);
  expect_refused(im, HURRAY_EFORMAT, "duplicate tensor name 'aaaa'");
}

/* ---- lazy validation ---------------------------------------------------------------------- */

enum { MANY = 3000 };

/* A file of MANY dense tensors "t0".."t2999", float32 [2] holding {i, i}: its index spans
 * several chunks. */
static Image many_image(void) {
  const char *path = path_of("many.hurray");
  HurrayFileWriter *w = NULL;
  OK(hurray_file_writer_create(path, NULL, &w, E));
  static const int64_t shape[] = {2};
  const HurrayArray part = SAMPLE_ARRAY(HURRAY_DTYPE_FLOAT32, 1, shape, NULL, 0, 0);
  const HurrayTensorDesc desc = {.layout = HURRAY_LAYOUT_DENSE, .ndim = 1, .shape = shape,
                                 .parts = &part, .nparts = 1, .dtype = HURRAY_DTYPE_FLOAT32};
  for (int i = 0; i < MANY; i++) {
    char name[16];
    snprintf(name, sizeof name, "t%d", i);
    const float values[] = {(float)i, (float)i};
    HurrayBufferList *list = sample_list();
    sample_append(list, values, sizeof values, HURRAY_ROLE_VALUES);
    OK(hurray_file_writer_add(w, name, &desc, list, NULL, E));
    hurray_buffer_list_destroy(list);
  }
  OK(hurray_file_writer_finish(w, E));
  hurray_file_writer_destroy(w);
  return image_read(path);
}

/* The bucket of tensor "t<i>" in the many-tensor file (bucket_bits 12). */
static uint64_t many_bucket(int i) {
  char name[16];
  int n = snprintf(name, sizeof name, "t%d", i);
  return XXH3_64bits(name, (size_t)n) >> (64 - 12);
}

/* Every tensor but `bad` (and those sharing its bucket, which a lookup reads with it) is got,
 * found and verified from `im`; `bad` is refused with `status` and `words` every way it is
 * used; verifying the index or the whole file refuses it too. */
static void expect_only_refused(Image im, int bad, int status, const char *words) {
  HurrayFileReader *r = NULL;
  OK(hurray_file_reader_open_memory(im.bytes, im.size, NULL, NULL, &r, E));
  for (int i = 0; i < MANY; i += 7) {
    if (many_bucket(i) == many_bucket(bad)) continue;
    char name[16];
    snprintf(name, sizeof name, "t%d", i);
    uint32_t found = 0;
    HurrayTensorContext *c = NULL;
    OK(hurray_file_reader_find(r, name, &found, E));
    assert_int_equal(found, i);
    OK(hurray_file_reader_get(r, found, HURRAY_FILE_GET_VERIFY, &c, E));
    assert_true(((const float *)c->buffers->buffers[0]->data)[1] == (float)i);
    hurray_tensor_context_release(c);
  }
  for (int way = 0; way < 5; way++) {
    HurrayError error = {0};
    HurrayFileTensorInfo ti;
    HurrayTensorContext *c = NULL;
    uint32_t found = 0;
    char name[16];
    snprintf(name, sizeof name, "t%d", bad);
    int got = way == 0   ? hurray_file_reader_tensor_info(r, (uint32_t)bad, &ti, &error)
              : way == 1 ? hurray_file_reader_get(r, (uint32_t)bad, 0, &c, &error)
              : way == 2 ? hurray_file_reader_find(r, name, &found, &error)
              : way == 3 ? hurray_file_reader_verify(r, HURRAY_FILE_INDEX, NULL, NULL, &error)
                         : hurray_file_reader_verify(r, HURRAY_FILE_WHOLE, NULL, NULL, &error);
    if (got != status || strstr(error.message, words) == NULL) {
      fail_msg("way %d: expected %s with \"%s\", got %s: %s", way, hurray_status_name(status),
               words, hurray_status_name(got), error.message);
    }
    assert_null(c);
  }
  hurray_file_reader_destroy(r);
}

/* A record that breaks the format but is never used does not matter; used, it is refused. */
static void a_bad_record_matters_only_when_used(void **state) {
  (void)state;
  Image im = many_image();
  int bad = 2021;
  uint8_t *record = record_of(im, (uint32_t)bad);
  /* name length, "t2021", metadata length, buffer count, one entry (role, offset / 64 = 2022
   * in two bytes, size, checksum), then the node */
  assert_memory_equal(record + 1, "t2021", 5);
  record[1 + 5 + 2 + 12] = 7; /* layout 7 */
  reseal(im);
  expect_only_refused(im, bad, HURRAY_ELAYOUT, "tensor 2021 't2021': layout 7");
  free(im.bytes);
}

/* A chunk of the index whose checksum fails is refused when one of its bytes is first needed,
 * and only then. */
static void a_corrupt_chunk_matters_only_when_used(void **state) {
  (void)state;
  Image im = many_image();
  int bad = 2021;
  uint8_t *record = record_of(im, (uint32_t)bad);
  record[2] ^= 1; /* "t2021" -> "u2021", not resealed */
  uint64_t chunk = (uint64_t)(record - im.bytes - (ptrdiff_t)index_offset(im)) >> im.bytes[13];
  char words[64];
  snprintf(words, sizeof words, "chunk %" PRIu64 " of the index is corrupt", chunk);
  HurrayFileReader *r = NULL;
  OK(hurray_file_reader_open_memory(im.bytes, im.size, NULL, NULL, &r, E));
  HurrayTensorContext *c = NULL;
  OK(hurray_file_reader_get(r, 0, 0, &c, E)); /* its record, table entries: other chunks */
  hurray_tensor_context_release(c);
  HurrayError error = {0};
  assert_int_equal(hurray_file_reader_get(r, (uint32_t)bad, 0, &c, &error), HURRAY_ECHECKSUM);
  assert_non_null(strstr(error.message, words));
  assert_int_equal(hurray_file_reader_verify(r, HURRAY_FILE_WHOLE, NULL, NULL, &error),
                   HURRAY_ECHECKSUM);
  hurray_file_reader_destroy(r);
  free(im.bytes);
}

/* Threads that use a fresh reader at once all validate its tensors on first use, racing: each
 * finds and gets every tensor of the many-tensor file and sees its values. */
typedef struct Racer {
  const HurrayFileReader *reader;
  int first;
  int failures;
} Racer;

static void *race(void *context) {
  Racer *racer = context;
  for (int k = 0; k < MANY; k++) {
    int i = (racer->first + k) % MANY;
    char name[16];
    snprintf(name, sizeof name, "t%d", i);
    uint32_t found = 0;
    HurrayTensorContext *c = NULL;
    if (hurray_file_reader_find(racer->reader, name, &found, NULL) != HURRAY_OK ||
        found != (uint32_t)i ||
        hurray_file_reader_get(racer->reader, found, 0, &c, NULL) != HURRAY_OK ||
        ((const float *)c->buffers->buffers[0]->data)[0] != (float)i) {
      racer->failures++;
    }
    hurray_tensor_context_release(c);
  }
  return NULL;
}

static void threads_validate_a_reader_at_once(void **state) {
  (void)state;
  Image im = many_image();
  enum { THREADS = 6 };
  for (uint32_t flags = 0; flags <= HURRAY_FILE_OPEN_PREAD; flags++) {
    const char *path = path_of("race.hurray");
    image_write(im, path);
    HurrayFileReader *r = NULL;
    OK(hurray_file_reader_open(path, flags, &r, E));
    pthread_t threads[THREADS];
    Racer racers[THREADS];
    for (int t = 0; t < THREADS; t++) {
      racers[t] = (Racer){.reader = r, .first = t * (MANY / THREADS)};
      assert_int_equal(pthread_create(&threads[t], NULL, race, &racers[t]), 0);
    }
    for (int t = 0; t < THREADS; t++) {
      assert_int_equal(pthread_join(threads[t], NULL), 0);
      assert_int_equal(racers[t].failures, 0);
    }
    OK(hurray_file_reader_verify(r, HURRAY_FILE_WHOLE, NULL, NULL, E));
    hurray_file_reader_destroy(r);
  }
  free(im.bytes);
}

/* ---- records ------------------------------------------------------------------------------ */

static void record_violations_are_named(void **state) {
  (void)state;
  expect_patched(TINY_RECORD, "\x00", 1, HURRAY_EFORMAT, "tensor name is empty");
  expect_patched(TINY_RECORD + 1, "\xff", 1, HURRAY_EFORMAT, "not valid UTF-8");
  expect_patched(TINY_RECORD + 1, "\x00", 1, HURRAY_EFORMAT, "contains NUL");
  expect_patched(TINY_RECORD + 2, "\x01", 1, HURRAY_EFORMAT, "truncated"); /* metadata */
  expect_patched(TINY_RECORD + 3, "\x02", 1, HURRAY_EFORMAT, "2 buffers cannot fit");
  /* a limit of §8 (65537 buffers), checked before the bytes they would need */
  expect_patched(TINY_RECORD + 3, "\x81\x80\x04", 3, HURRAY_ELIMIT, "65537 buffers exceed");
  expect_patched(TINY_NODE + 2, "\x41", 1, HURRAY_ELIMIT, "ndim 65");
  expect_patched(TINY_NODE + 3, "\x04", 1, HURRAY_ELIMIT, "4 parts");
  expect_patched(TINY_NODE + 3, "\x02", 1, HURRAY_EFORMAT, "truncated");
  expect_patched(TINY_NODE + 4, "\x10", 1, HURRAY_EFORMAT, "node fields 0x10 are not allowed");
  expect_patched(TINY_NODE + 0, "\x07", 1, HURRAY_ELAYOUT, "tensor 0 'x': layout 7");
  expect_patched(TINY_NODE + 1, "\x63", 1, HURRAY_EDTYPE, "'x'");
  expect_patched(TINY_PART, "\x20", 1, HURRAY_EFORMAT, "part flags 0x20 are not allowed");
  expect_patched(TINY_PART, "\x08", 1, HURRAY_EFORMAT, "truncated"); /* a buffer index, absent */
  /* 3 float32 in an 8-byte buffer: the part has the node's shape */
  expect_patched(TINY_NODE + 5, "\x03", 1, HURRAY_EBOUNDS, "tensor 0 'x': part 0 (values)");
}

/* ---- metadata ----------------------------------------------------------------------------- */

static void metadata_violations_are_named(void **state) {
  (void)state;
  /* {"aa": 1, "ab": 2}: swapping key bytes breaks the order. */
  static const char *const keys[] = {"aa", "ab"};
  HurrayMetaValue two[2] = {{.type = HURRAY_META_INT64}, {.type = HURRAY_META_INT64}};
  HurrayMetaValue meta = {.type = HURRAY_META_MAP, .count = 2, .keys = keys};
  meta.as.items = two;
  Image im = samples_image(0, 1, &meta, NULL);
  size_t at = find_bytes(im,
                         "\x02\x00"
                         "ab",
                         4);
  im.bytes[at + 3] = 'a';
  reseal(im);
  expect_refused(im, HURRAY_EFORMAT, "file metadata: metadata keys are not strictly increasing");

  /* The root map and 15 lists, the last holding an int64: 16 levels, accepted. Rewriting the
   * int64's 9 bytes as a list of two bools makes 17. */
  HurrayMetaValue nest[16];
  for (int i = 0; i < 15; i++) {
    nest[i] = (HurrayMetaValue){.type = HURRAY_META_LIST, .count = 1};
    nest[i].as.items = &nest[i + 1];
  }
  nest[15] = (HurrayMetaValue){.type = HURRAY_META_INT64};
  nest[15].as.int64 = 0x0123456789ABCDEF;
  static const char *const deep_keys[] = {"deep"};
  HurrayMetaValue deep = {.type = HURRAY_META_MAP, .count = 1, .keys = deep_keys};
  deep.as.items = &nest[0];
  im = samples_image(0, 1, &deep, NULL);
  OK(open_image(im, E));
  const uint8_t leaf[] = {0xEF, 0xCD, 0xAB, 0x89, 0x67, 0x45, 0x23, 0x01};
  at = find_bytes(im, leaf, 8) - 1;
  memcpy(im.bytes + at, "\x05\x02\x00\x00\x00\x01\x00\x01\x00", 9);
  reseal(im);
  expect_refused(im, HURRAY_ELIMIT, "deeper than 16");

  /* Tensor metadata is validated on open too: an unknown type. */
  static const char *const flag_keys[] = {"flag"};
  HurrayMetaValue flag = {.type = HURRAY_META_BOOL};
  flag.as.boolean = 1;
  HurrayMetaValue flags = {.type = HURRAY_META_MAP, .count = 1, .keys = flag_keys};
  flags.as.items = &flag;
  im = samples_image(0, 1, NULL, &flags);
  at = find_bytes(im, "flag", 4) + 4;
  im.bytes[at] = 9;
  reseal(im);
  expect_refused(im, HURRAY_EFORMAT, "metadata type 9 is unknown");

  /* Values: a bool above 1, a string that is not UTF-8. */
  im = samples_image(0, 1, NULL, &flags);
  im.bytes[find_bytes(im, "flag", 4) + 5] = 2;
  reseal(im);
  expect_refused(im, HURRAY_EFORMAT, "metadata bool is 2, not 0 or 1");
  HurrayMetaValue text = {.type = HURRAY_META_STRING, .count = 4};
  text.as.string = "text";
  HurrayMetaValue texts = {.type = HURRAY_META_MAP, .count = 1, .keys = flag_keys};
  texts.as.items = &text;
  im = samples_image(0, 1, &texts, NULL);
  im.bytes[find_bytes(im, "text", 4) + 1] = 0xff;
  reseal(im);
  expect_refused(im, HURRAY_EFORMAT, "metadata string is not valid UTF-8");

  /* The file's block: a root that is not a map, bytes after the map. {"flag": true} is 13
   * bytes (type, count, key length, key, type, value), padded to 16. */
  im = samples_image(0, 1, &flags, NULL);
  at = find_bytes(im, "flag", 4) - 7;
  assert_int_equal(im.bytes[at], HURRAY_META_MAP);
  im.bytes[at] = HURRAY_META_BOOL;
  reseal(im);
  expect_refused(im, HURRAY_EFORMAT, "metadata is not a map");
  im = samples_image(0, 1, &flags, NULL);
  uint64_t index = index_offset(im);
  assert_int_equal(im.bytes[index + 24], 13);
  store64(im.bytes + index + 16, load64(im.bytes + index + 16) - 1); /* a byte before it too */
  im.bytes[index + 24] = 14;
  reseal(im);
  expect_refused(im, HURRAY_EFORMAT, "file metadata: ");

  /* A record must end where its metadata does. */
  im = samples_image(0, 1, NULL, &flags);
  at = find_bytes(im, "dense", 5) + 5; /* the record's metadata_length */
  im.bytes[at] = (uint8_t)(im.bytes[at] - 1);
  reseal(im);
  expect_refused(im, HURRAY_EFORMAT, "1 trailing bytes after the record");

  /* A count larger than the bytes left is refused before anything is allocated. */
  im = samples_image(0, 1, NULL, &flags);
  at = find_bytes(im, "flag", 4) - 6; /* the map's count */
  store32(im.bytes + at, 0x7FFFFFFF);
  reseal(im);
  expect_refused(im, HURRAY_EFORMAT, "claims 2147483647 items");
}

/* ---- opening ------------------------------------------------------------------------------ */

static int g_released;
static void count_release(void *owner) {
  (void)owner;
  g_released++;
}

static void open_errors_are_clear(void **state) {
  (void)state;
  HurrayError error = {0};
  HurrayFileReader *r = NULL;
  assert_int_equal(hurray_file_reader_open(path_of("missing.hurray"), 0, &r, &error), HURRAY_EIO);
  assert_non_null(strstr(error.message, "No such file"));
  /* A directory is a sharded checkpoint; this one has no index (and no single file). */
  assert_int_equal(hurray_file_reader_open(g_dir, 0, &r, &error), HURRAY_EIO);
  assert_non_null(strstr(error.message, "holds no checkpoint index"));
  assert_int_equal(hurray_file_reader_open(g_dir, 8, &r, &error), HURRAY_EINVAL);

  /* The memory image must be aligned to the file's alignment; release runs on failure. */
  Image im = tiny_image();
  Image shifted = image_alloc(im.size + 64);
  memcpy(shifted.bytes + 32, im.bytes, im.size);
  g_released = 0;
  assert_int_equal(
      hurray_file_reader_open_memory(shifted.bytes + 32, im.size, count_release, NULL, &r, &error),
      HURRAY_EALIGN);
  assert_int_equal(g_released, 1);
  assert_int_equal(hurray_file_reader_open_memory(NULL, 0, count_release, NULL, &r, &error),
                   HURRAY_EINVAL);
  assert_int_equal(g_released, 2);
  free(shifted.bytes);

  /* Queries check their arguments. */
  OK(hurray_file_reader_open_memory(im.bytes, im.size, NULL, NULL, &r, E));
  HurrayFileTensorInfo ti;
  HurrayFileBufferInfo bi;
  HurrayTensorContext *c = NULL;
  assert_int_equal(hurray_file_reader_tensor_info(r, 1, &ti, &error), HURRAY_EINVAL);
  assert_int_equal(hurray_file_reader_buffer_info(r, 0, 1, &bi, &error), HURRAY_EINVAL);
  assert_int_equal(hurray_file_reader_get(r, 0, 0x4, &c, &error), HURRAY_EINVAL);
  assert_int_equal(hurray_file_reader_verify(r, 1, NULL, NULL, &error), HURRAY_EINVAL);
  assert_int_equal(hurray_file_reader_verify(NULL, HURRAY_FILE_WHOLE, NULL, NULL, &error),
                   HURRAY_EINVAL);
  HurrayMetaValue *m = NULL;
  assert_int_equal(hurray_file_reader_metadata(r, 7, &m, &error), HURRAY_EINVAL);
  hurray_file_reader_destroy(r);
  hurray_file_reader_destroy(NULL);
  free(im.bytes);
}

/* The checksum (AVX2 where the CPU has it, SSE2 otherwise) is xxHash's XXH3-64 for every
 * length, one-shot and streamed in pieces of any size. */
static void checksums_are_xxh3_whatever_the_cpu(void **state) {
  (void)state;
  size_t size = (3u << 20) + 77;
  uint8_t *bytes = malloc(size);
  assert_non_null(bytes);
  for (size_t i = 0; i < size; i++) bytes[i] = (uint8_t)((i * 2654435761u) >> 13);
  static const size_t kLengths[] = {0, 1, 16, 128, 240, 241, 1024, 1025, 65536 + 3, (3u << 20) + 77};
  FileHasher *h = hurray__hasher_create();
  assert_non_null(h);
  for (size_t k = 0; k < sizeof kLengths / sizeof kLengths[0]; k++) {
    size_t len = kLengths[k];
    uint64_t want = XXH3_64bits(bytes, len);
    assert_int_equal(hurray__xxh3(bytes, len), want);
    static const size_t kPieces[] = {1, 63, 4096, 1u << 20};
    for (size_t p = 0; p < sizeof kPieces / sizeof kPieces[0]; p++) {
      hurray__hasher_reset(h);
      for (size_t at = 0; at < len; at += kPieces[p]) {
        hurray__hasher_update(h, bytes + at, len - at < kPieces[p] ? len - at : kPieces[p]);
      }
      assert_int_equal(hurray__hasher_digest(h), want);
    }
  }
  hurray__hasher_destroy(h);
  free(bytes);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(tiny_file_bytes_are_pinned),
      cmocka_unit_test(row_major_strides_are_not_stored),
      cmocka_unit_test(checksums_are_xxh3_whatever_the_cpu),
      cmocka_unit_test(every_prefix_fails_cleanly),
      cmocka_unit_test(every_flipped_byte_is_caught),
      cmocka_unit_test(bad_checksums_are_found_by_verify),
      cmocka_unit_test(header_violations_are_named),
      cmocka_unit_test(index_violations_are_named),
      cmocka_unit_test(two_tensor_tables_are_checked),
      cmocka_unit_test(data_padding_is_checked_by_verify),
      cmocka_unit_test(verify_reports_a_file_that_shrank),
      cmocka_unit_test(the_same_memory_is_written_once_as_a_shared_buffer),
      cmocka_unit_test(overlapping_buffers_are_refused),
      cmocka_unit_test(duplicate_names_are_refused),
      cmocka_unit_test(a_bad_record_matters_only_when_used),
      cmocka_unit_test(a_corrupt_chunk_matters_only_when_used),
      cmocka_unit_test(threads_validate_a_reader_at_once),
      cmocka_unit_test(record_violations_are_named),
      cmocka_unit_test(metadata_violations_are_named),
      cmocka_unit_test(open_errors_are_clear),
  };
  return cmocka_run_group_tests(tests, make_dir, remove_dir);
}
