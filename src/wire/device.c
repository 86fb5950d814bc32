/* device.c -- the stream bytes of a segment wherever they are (ADR-062): host memory, zeros,
 * device memory read through the device backend (ADR-047) in chunks of at most
 * WIRE_STAGE_SIZE, so that neither a server nor a client ever holds more than one chunk of a
 * device tensor in host memory, or a served file read a check chunk at a time (check.c). */
#include <string.h>

#include "wire.h"

static const uint8_t kZeros[HURRAY_MIN_ALIGNMENT];

int hurray__wire_segment_read(const WireSegment *g, uint64_t from, void *dst, size_t n,
                              HurrayError *error) {
  if (g->device != NULL) {
    return hurray_device_copy_to_host(g->queue, g->device, g->at + from, dst, n, error);
  }
  if (g->data != NULL) {
    memcpy(dst, g->data + from, n);
  } else {
    memset(dst, 0, n); /* a gap */
  }
  return HURRAY_OK;
}

int hurray__wire_hash_buffer(const WireSegment *segments, size_t n, uint32_t buffer,
                             uint8_t *stage, bool checked, uint64_t *out, HurrayError *error) {
  FileHasher *h = hurray__hasher_create();
  if (h == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  int status = HURRAY_OK;
  for (size_t i = 0; status == HURRAY_OK && i < n; i++) {
    const WireSegment *g = &segments[i];
    if (g->buffer != buffer) continue;
    if (g->device == NULL && g->file == NULL) {
      hurray__hasher_update(h, g->data ? g->data : kZeros, (size_t)g->len);
      continue;
    }
    for (uint64_t done = 0; status == HURRAY_OK && done < g->len;) {
      size_t k = (size_t)(g->len - done < WIRE_STAGE_SIZE ? g->len - done : WIRE_STAGE_SIZE);
      const uint8_t *from = stage;
      if (g->file != NULL) { /* the chunk holding the next byte, of which the bytes up to its end */
        uint64_t begin = 0;
        size_t len = 0;
        status = hurray__wire_file_chunk(g->file, g->at + done, checked, stage, &begin, &len,
                                         error);
        from = stage + (g->at + done - begin);
        if (k > begin + len - (g->at + done)) k = (size_t)(begin + len - (g->at + done));
      } else {
        status = hurray__wire_segment_read(g, done, stage, k, error);
      }
      if (status == HURRAY_OK) hurray__hasher_update(h, from, k);
      done += k;
    }
  }
  *out = hurray__hasher_digest(h);
  hurray__hasher_destroy(h);
  return status;
}
