/* auth.c -- the shared-secret challenge-response of the hello (docs/spec/interchange.md §4.3):
 * HMAC-SHA-256 from OpenSSL's libcrypto over both peers' nonces, so the secret never crosses
 * the wire and a recorded exchange cannot be replayed. */
#include <errno.h>
#include <string.h>
#include <sys/random.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "wire.h"

static const char kClientLabel[] = "hurray-wire-1 client";
static const char kServerLabel[] = "hurray-wire-1 server";

int hurray__wire_mac(const uint8_t *secret, size_t secret_len, bool server,
                     const uint8_t client_nonce[WIRE_NONCE_SIZE],
                     const uint8_t server_nonce[WIRE_NONCE_SIZE], uint8_t out[WIRE_MAC_SIZE],
                     HurrayError *error) {
  uint8_t message[sizeof kClientLabel - 1 + 2 * WIRE_NONCE_SIZE];
  const char *label = server ? kServerLabel : kClientLabel;
  size_t n = strlen(label);
  memcpy(message, label, n);
  memcpy(message + n, client_nonce, WIRE_NONCE_SIZE);
  memcpy(message + n + WIRE_NONCE_SIZE, server_nonce, WIRE_NONCE_SIZE);
  unsigned int len = 0;
  if (secret_len > INT32_MAX ||
      HMAC(EVP_sha256(), secret, (int)secret_len, message, sizeof message, out, &len) == NULL ||
      len != WIRE_MAC_SIZE) {
    return hurray__fail(error, HURRAY_EAUTH, "HMAC-SHA-256 failed");
  }
  return HURRAY_OK;
}

bool hurray__wire_mac_equal(const uint8_t a[WIRE_MAC_SIZE], const uint8_t b[WIRE_MAC_SIZE]) {
  return CRYPTO_memcmp(a, b, WIRE_MAC_SIZE) == 0;
}

int hurray__wire_nonce(uint8_t out[WIRE_NONCE_SIZE], HurrayError *error) {
  size_t got = 0;
  while (got < WIRE_NONCE_SIZE) {
    ssize_t n = getrandom(out + got, WIRE_NONCE_SIZE - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return hurray__fail(error, HURRAY_EIO, "getrandom: %s", strerror(errno));
    got += (size_t)n;
  }
  return HURRAY_OK;
}
