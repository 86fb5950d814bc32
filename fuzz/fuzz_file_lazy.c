/* fuzz_file_lazy.c -- the lazily validated paths of the file reader (file-format.md §9,
 * ADR-057). A valid file of 64 tensors "t0".."t63" (float32 [2] holding {i, i}) is made once;
 * each input picks one tensor (its first byte) and XORs the rest of the input over that
 * tensor's record, then the index's chunk checksums are resealed, as a hostile writer would.
 * Whatever the damage:
 *   - every tensor outside the damaged tensor's bucket (which a lookup reads with it) is found
 *     by name, described and got, with its own values, from memory and from a file both mapped
 *     and read with pread: a bad record that is never touched does not matter;
 *   - the damaged tensor is refused by every call or accepted by every call, and accepted it
 *     is a valid tensor whose every byte can be read: a touched record is validated first;
 *   - verifying the whole file passes only if the damaged tensor is accepted. */
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

enum { TENSORS = 64, BUCKET_BITS = 6 };

static uint8_t *g_image; /* the valid file, aligned for memory readers */
static size_t g_size;
static volatile uint8_t g_sink;

static void check(int status, const HurrayError *error) {
  if (status != HURRAY_OK) {
    fprintf(stderr, "fuzz_file_lazy: %s\n", error->message);
    abort();
  }
}

static void make_image(void) {
  char path[] = "/tmp/hurray-fuzz-lazy-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) abort();
  close(fd);
  HurrayError error = {0};
  HurrayFileWriter *w = NULL;
  check(hurray_file_writer_create(path, NULL, &w, &error), &error);
  static const int64_t shape[] = {2};
  const HurrayArray part = {.dtype = HURRAY_DTYPE_FLOAT32, .ndim = 1, .shape = shape};
  const HurrayTensorDesc desc = {.layout = HURRAY_LAYOUT_DENSE, .ndim = 1, .shape = shape,
                                 .parts = &part, .nparts = 1, .dtype = HURRAY_DTYPE_FLOAT32};
  for (int i = 0; i < TENSORS; i++) {
    char name[8];
    snprintf(name, sizeof name, "t%d", i);
    const float values[] = {(float)i, (float)i};
    HurrayBufferList *list = sample_list();
    sample_append(list, values, sizeof values, HURRAY_ROLE_VALUES);
    check(hurray_file_writer_add(w, name, &desc, list, NULL, &error), &error);
    hurray_buffer_list_destroy(list);
  }
  check(hurray_file_writer_finish(w, &error), &error);
  hurray_file_writer_destroy(w);
  FILE *f = fopen(path, "rb");
  if (f == NULL) abort();
  fseek(f, 0, SEEK_END);
  g_size = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  g_image = aligned_alloc(4096, (g_size + 4095) / 4096 * 4096);
  if (g_image == NULL || fread(g_image, 1, g_size, f) != g_size) abort();
  fclose(f);
  unlink(path);
}

static uint32_t load32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t bucket_of(int i) {
  char name[8];
  int n = snprintf(name, sizeof name, "t%d", i);
  return XXH3_64bits(name, (size_t)n) >> (64 - BUCKET_BITS);
}

static bool tensor_accepted(const HurrayFileReader *r, int i) {
  HurrayFileTensorInfo ti;
  HurrayTensorDesc *d = NULL;
  HurrayTensorContext *c = NULL;
  HurrayFileBufferInfo bi;
  int info = hurray_file_reader_tensor_info(r, (uint32_t)i, &ti, NULL);
  int got = hurray_file_reader_get(r, (uint32_t)i, 0, &c, NULL);
  int described = hurray_file_reader_describe(r, (uint32_t)i, &d, NULL);
  int buffer = hurray_file_reader_buffer_info(r, (uint32_t)i, 0, &bi, NULL);
  bool accepted = info == HURRAY_OK;
  if ((got == HURRAY_OK) != accepted || (described == HURRAY_OK) != accepted ||
      (accepted && ti.buffer_count > 0 && buffer != HURRAY_OK)) {
    abort(); /* refused by every call or accepted by every call */
  }
  if (accepted) {
    if (hurray_tensor_context_check(c, 0, NULL) != HURRAY_OK) abort();
    for (uint32_t k = 0; k < c->buffers->count; k++) {
      const HurrayBuffer *b = c->buffers->buffers[k];
      for (uint64_t j = 0; j < b->desc.byte_size; j++) g_sink ^= ((const uint8_t *)b->data)[j];
    }
    uint32_t found = 0;
    if (hurray_file_reader_find(r, ti.name, &found, NULL) != HURRAY_OK || found != (uint32_t)i) {
      abort(); /* accepted: found under its name */
    }
  }
  hurray_tensor_context_release(c);
  hurray_tensor_desc_destroy(d);
  return accepted;
}

static void exercise(const HurrayFileReader *r, int victim) {
  for (int i = 0; i < TENSORS; i++) {
    if (i == victim || bucket_of(i) == bucket_of(victim)) continue;
    char name[8];
    snprintf(name, sizeof name, "t%d", i);
    HurrayError error = {0};
    uint32_t found = 0;
    HurrayTensorContext *c = NULL;
    check(hurray_file_reader_find(r, name, &found, &error), &error);
    if (found != (uint32_t)i) abort();
    check(hurray_file_reader_get(r, found, HURRAY_FILE_GET_VERIFY, &c, &error), &error);
    if (((const float *)c->buffers->buffers[0]->data)[1] != (float)i) abort();
    hurray_tensor_context_release(c);
  }
  bool accepted = tensor_accepted(r, victim);
  if (!accepted && hurray_file_reader_verify(r, HURRAY_FILE_WHOLE, NULL, NULL, NULL) == HURRAY_OK) {
    abort(); /* verify checks every record */
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static uint8_t *image;
  if (g_image == NULL) {
    make_image();
    image = aligned_alloc(4096, (g_size + 4095) / 4096 * 4096);
    if (image == NULL) abort();
  }
  if (size == 0) return 0;
  int victim = data[0] % TENSORS;
  memcpy(image, g_image, g_size);
  size_t index = (size_t)image_load64(image + 24);
  uint32_t start = load32(image + index + 64 + 4 * (size_t)victim);
  uint32_t end = load32(image + index + 64 + 4 * (size_t)victim + 4);
  for (size_t k = 1; k < size && start + k - 1 < end; k++) image[index + start + k - 1] ^= data[k];
  image_reseal(image, g_size);
  HurrayError error = {0};
  HurrayFileReader *r = NULL;
  check(hurray_file_reader_open_memory(image, g_size, NULL, NULL, &r, &error), &error);
  exercise(r, victim);
  hurray_file_reader_destroy(r);
#if defined(__linux__)
  int fd = memfd_create("hurray-fuzz-lazy", MFD_CLOEXEC);
  if (fd < 0) return 0;
  if (write(fd, image, g_size) == (ssize_t)g_size) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    for (uint32_t flags = 0; flags <= HURRAY_FILE_OPEN_PREAD; flags++) {
      check(hurray_file_reader_open(path, flags, &r, &error), &error);
      exercise(r, victim);
      hurray_file_reader_destroy(r);
    }
  }
  close(fd);
#endif
  return 0;
}
