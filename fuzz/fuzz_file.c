/* fuzz_file.c -- the file reader on arbitrary bytes. Each input is opened as it is (which
 * exercises the checksum checks) and again after its header and index checksums are resealed
 * (so mutations reach the parsers behind them), from memory and, on Linux, as a file both
 * mapped and read with pread, each also with HURRAY_FILE_OPEN_FOREIGN (so safetensors, .npy
 * and .npz images open as views). Whatever opens is used in every way: enumerated, looked up by
 * name, described, every tensor got (with content validation and checksums), its bytes read,
 * rows sliced, metadata decoded and walked, and the whole file verified. */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "hurray/hurray.h"
#include "../tests/c/test_file_helpers.h"

static volatile uint8_t g_sink; /* keeps the reads of tensor bytes */

static void walk_metadata(const HurrayMetaValue *v) {
  if (v->type == HURRAY_META_STRING || v->type == HURRAY_META_INTEGER) {
    for (uint32_t i = 0; i <= v->count; i++) g_sink ^= (uint8_t)v->as.string[i]; /* and NUL */
  }
  if (v->type == HURRAY_META_LIST || v->type == HURRAY_META_MAP) {
    for (uint32_t i = 0; i < v->count; i++) {
      if (v->type == HURRAY_META_MAP) g_sink ^= (uint8_t)strlen(v->keys[i]);
      walk_metadata(&v->as.items[i]);
    }
  }
}

static void read_metadata(const HurrayFileReader *r, uint32_t index) {
  HurrayMetaValue *m = NULL;
  if (hurray_file_reader_metadata(r, index, &m, NULL) == HURRAY_OK) walk_metadata(m);
  hurray_meta_destroy(m);
}

static void touch(const HurrayTensorContext *c) {
  if (hurray_tensor_context_check(c, 0, NULL) != HURRAY_OK) abort(); /* the reader's promise */
  for (uint32_t k = 0; k < c->buffers->count; k++) {
    const HurrayBuffer *b = c->buffers->buffers[k];
    for (uint64_t i = 0; i < b->desc.byte_size; i++) g_sink ^= ((const uint8_t *)b->data)[i];
  }
}

/* A Hurray file is validated lazily (file-format.md §9): a tensor is refused or accepted as a
 * whole the first time it is used, and once accepted every use of it works. verify of the
 * whole file checks everything, so it passes only if every tensor is accepted. */
static void exercise(const HurrayFileReader *r) {
  HurrayFileInfo info;
  if (hurray_file_reader_info(r, &info, NULL) != HURRAY_OK) abort();
  bool hurray = info.format == HURRAY_FORMAT_HURRAY, all_accepted = true;
  for (uint32_t t = 0; t < info.tensor_count; t++) {
    HurrayFileTensorInfo ti;
    HurrayTensorDesc *d = NULL;
    HurrayTensorContext *c = NULL;
    if (hurray_file_reader_tensor_info(r, t, &ti, NULL) != HURRAY_OK) {
      all_accepted = false;
      if (hurray_file_reader_describe(r, t, &d, NULL) == HURRAY_OK ||
          hurray_file_reader_get(r, t, 0, &c, NULL) == HURRAY_OK ||
          hurray_file_reader_verify(r, t, NULL, NULL, NULL) == HURRAY_OK) {
        abort(); /* refused once, refused always */
      }
      continue;
    }
    uint32_t found = 0;
    if (hurray_file_reader_find(r, ti.name, &found, NULL) != HURRAY_OK || found != t) {
      abort(); /* every accepted tensor is found under its name */
    }
    for (uint32_t k = 0; k < ti.buffer_count; k++) {
      HurrayFileBufferInfo bi;
      if (hurray_file_reader_buffer_info(r, t, k, &bi, NULL) != HURRAY_OK) abort();
    }
    if (hurray_file_reader_describe(r, t, &d, NULL) != HURRAY_OK) abort();
    int64_t rows = d->layout == HURRAY_LAYOUT_DENSE && d->ndim > 0 ? d->shape[0] : 0;
    hurray_tensor_desc_destroy(d);
    if (hurray_file_reader_get(r, t, 0, &c, NULL) == HURRAY_OK) {
      touch(c);
      hurray_tensor_context_release(c);
    } else if (hurray) {
      abort(); /* accepted; only another format's data is checked as it is read */
    }
    if (hurray_file_reader_get(r, t, HURRAY_VALIDATE_CONTENTS | HURRAY_FILE_GET_VERIFY, &c, NULL) ==
        HURRAY_OK) {
      hurray_tensor_context_release(c);
    }
    const int64_t ranges[][2] = {{0, rows}, {rows / 2, rows}, {1, rows > 1 ? 2 : rows}};
    for (size_t i = 0; i < 3 && rows > 0; i++) {
      if (hurray_file_reader_get_rows(r, t, ranges[i][0], ranges[i][1], &c, NULL) == HURRAY_OK) {
        touch(c);
        hurray_tensor_context_release(c);
      }
    }
    read_metadata(r, t);
    (void)hurray_file_reader_verify(r, t, NULL, NULL, NULL);
  }
  read_metadata(r, HURRAY_FILE_WHOLE);
  if (hurray_file_reader_verify(r, HURRAY_FILE_WHOLE, NULL, NULL, NULL) == HURRAY_OK &&
      !all_accepted) {
    abort(); /* verify checks everything open may defer */
  }
}

#if defined(__linux__)
static void open_as_file(const uint8_t *image, size_t size) {
  int fd = memfd_create("hurray-fuzz", MFD_CLOEXEC);
  if (fd < 0) return;
  size_t written = 0;
  while (written < size) {
    ssize_t n = write(fd, image + written, size - written);
    if (n <= 0) break;
    written += (size_t)n;
  }
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  /* Mapped and pread, each also as a FOREIGN reader (safetensors, .npy, .npz as views). */
  for (uint32_t flags = 0;
       flags <= (HURRAY_FILE_OPEN_PREAD | HURRAY_FILE_OPEN_FOREIGN) && written == size; flags++) {
    HurrayFileReader *r = NULL;
    if (hurray_file_reader_open(path, flags, &r, NULL) == HURRAY_OK) exercise(r);
    hurray_file_reader_destroy(r);
  }
  close(fd);
}
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* An image aligned for any file alignment, reused across inputs. */
  static uint8_t *image;
  static size_t capacity;
  if (image == NULL || size > capacity) {
    free(image);
    capacity = (size + HURRAY_FILE_MAX_ALIGNMENT) & ~(size_t)(HURRAY_FILE_MAX_ALIGNMENT - 1);
    image = aligned_alloc(HURRAY_FILE_MAX_ALIGNMENT, capacity);
    if (image == NULL) abort();
  }
  for (int resealed = 0; resealed <= 1; resealed++) {
    memcpy(image, data, size);
    if (resealed) image_reseal(image, size);
    HurrayFileReader *r = NULL;
    if (hurray_file_reader_open_memory(image, size, NULL, NULL, &r, NULL) == HURRAY_OK) {
      exercise(r);
    }
    hurray_file_reader_destroy(r);
#if defined(__linux__)
    if (resealed) open_as_file(image, size);
#endif
  }
  return 0;
}
