/* fuzz_desc.c -- hurray_desc_decode on untrusted bytes. Every 16-byte window of the input is
 * decoded (a shorter input is zero-padded to one window). The oracle aborts unless:
 * a decoded descriptor validates and re-encodes to exactly the bytes it came from; a failure
 * reports its status in the error with a NUL-terminated message and leaves the output alone.
 * One private tag is registered so the registered-private path is reachable too. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hurray/hurray.h"

#define FUZZ_PRIVATE_TAG 0xF7

static void check_window(const uint8_t window[HURRAY_DESC_SIZE]) {
  HurrayBufferDesc desc, untouched;
  memset(&desc, 0xA5, sizeof desc);
  untouched = desc;
  HurrayError error = {0};
  int status = hurray_desc_decode(window, &desc, &error);
  if (status != HURRAY_OK) {
    if (error.code != status || error.message[0] == '\0' ||
        memchr(error.message, '\0', sizeof error.message) == NULL ||
        memcmp(&desc, &untouched, sizeof desc) != 0) {
      abort();
    }
    return;
  }
  uint8_t encoded[HURRAY_DESC_SIZE];
  if (hurray_desc_validate(&desc, NULL) != HURRAY_OK ||
      hurray_desc_encode(&desc, encoded, NULL) != HURRAY_OK ||
      memcmp(encoded, window, HURRAY_DESC_SIZE) != 0) {
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* registering the same name again is a no-op */
  if (hurray_device_register_private(FUZZ_PRIVATE_TAG, "fuzz", NULL) != HURRAY_OK) abort();
  if (size < HURRAY_DESC_SIZE) {
    uint8_t padded[HURRAY_DESC_SIZE] = {0};
    if (size > 0) memcpy(padded, data, size);
    check_window(padded);
    return 0;
  }
  for (size_t offset = 0; offset + HURRAY_DESC_SIZE <= size; offset++) {
    check_window(data + offset);
  }
  return 0;
}
