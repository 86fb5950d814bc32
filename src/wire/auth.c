/* auth.c -- the shared-secret challenge-response of the hello (docs/spec/interchange.md §4.3):
 * HMAC-SHA-256 over both peers' nonces, so the secret never crosses the wire and a recorded
 * exchange cannot be replayed.
 *
 * SHA-256 (FIPS 180-4) and HMAC (RFC 2104) are implemented here, in about a hundred lines, so
 * that authentication needs no libcrypto (ADR-073): tests/c/test_wire_auth.c checks them
 * against the vectors of FIPS 180-2 and RFC 4231 and against libcrypto for every length of key
 * and message around the block size. Only secrets and nonces pass through them (a few hundred
 * bytes per hello): the plain one-block-at-a-time form is all the speed needed. */
#include <errno.h>
#include <string.h>
#include <sys/random.h>

#include "wire.h"

/* ---- SHA-256 ------------------------------------------------------------------------------ */

typedef struct Sha256 {
  uint32_t h[8];
  uint8_t block[64];
  size_t used;    /* bytes in `block` */
  uint64_t total; /* bytes hashed, all told */
} Sha256;

static const uint32_t kRound[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
    0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
    0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
    0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
    0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};

static uint32_t rotr(uint32_t x, unsigned n) {
  return (x >> n) | (x << (32 - n));
}

static uint32_t load_be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void store_be32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}

static void sha256_block(uint32_t h[8], const uint8_t *p) {
  uint32_t w[64];
  for (int i = 0; i < 16; i++) w[i] = load_be32(p + 4 * i);
  for (int i = 16; i < 64; i++) {
    uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
  for (int i = 0; i < 64; i++) {
    uint32_t t1 = k + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) +
                  kRound[i] + w[i];
    uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    k = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
}

static void sha256_init(Sha256 *s) {
  static const uint32_t kInit[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                    0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  memcpy(s->h, kInit, sizeof kInit);
  s->used = 0;
  s->total = 0;
}

static void sha256_update(Sha256 *s, const uint8_t *p, size_t n) {
  s->total += n;
  while (n > 0) {
    size_t take = sizeof s->block - s->used < n ? sizeof s->block - s->used : n;
    memcpy(s->block + s->used, p, take);
    s->used += take;
    p += take;
    n -= take;
    if (s->used == sizeof s->block) {
      sha256_block(s->h, s->block);
      s->used = 0;
    }
  }
}

static void sha256_final(Sha256 *s, uint8_t out[32]) {
  uint64_t bits = s->total * 8;
  uint8_t pad[72] = {0x80}; /* 0x80, zeros up to 56 mod 64, the length in bits big-endian */
  size_t zeros = (s->used < 56 ? 56 : 120) - s->used;
  for (int i = 0; i < 8; i++) pad[zeros + (size_t)i] = (uint8_t)(bits >> (56 - 8 * i));
  sha256_update(s, pad, zeros + 8);
  for (int i = 0; i < 8; i++) store_be32(out + 4 * i, s->h[i]);
}

void hurray__sha256(const uint8_t *message, size_t len, uint8_t out[32]) {
  Sha256 s;
  sha256_init(&s);
  sha256_update(&s, message, len);
  sha256_final(&s, out);
}

/* ---- HMAC (RFC 2104) ---------------------------------------------------------------------- */

void hurray__hmac_sha256(const uint8_t *key, size_t key_len, const uint8_t *message,
                         size_t message_len, uint8_t out[WIRE_MAC_SIZE]) {
  uint8_t block[64] = {0}, pad[64];
  Sha256 s;
  if (key_len > sizeof block) { /* a key longer than a block is hashed first */
    sha256_init(&s);
    sha256_update(&s, key, key_len);
    sha256_final(&s, block);
  } else if (key_len > 0) {
    memcpy(block, key, key_len);
  }
  for (size_t i = 0; i < sizeof pad; i++) pad[i] = block[i] ^ 0x36;
  sha256_init(&s);
  sha256_update(&s, pad, sizeof pad);
  sha256_update(&s, message, message_len);
  uint8_t inner[32];
  sha256_final(&s, inner);
  for (size_t i = 0; i < sizeof pad; i++) pad[i] = block[i] ^ 0x5c;
  sha256_init(&s);
  sha256_update(&s, pad, sizeof pad);
  sha256_update(&s, inner, sizeof inner);
  sha256_final(&s, out);
  /* the key's traces: what a core dump could show of the secret */
  volatile uint8_t *wipe[] = {block, pad, inner, s.block};
  size_t sizes[] = {sizeof block, sizeof pad, sizeof inner, sizeof s.block};
  for (size_t i = 0; i < 4; i++) {
    for (size_t j = 0; j < sizes[i]; j++) wipe[i][j] = 0;
  }
}

/* ---- the hello's MACs --------------------------------------------------------------------- */

static const char kClientLabel[] = "hurray-wire-1 client";
static const char kServerLabel[] = "hurray-wire-1 server";

int hurray__wire_mac(const uint8_t *secret, size_t secret_len, bool server,
                     const uint8_t client_nonce[WIRE_NONCE_SIZE],
                     const uint8_t server_nonce[WIRE_NONCE_SIZE], uint8_t out[WIRE_MAC_SIZE],
                     HurrayError *error) {
  (void)error; /* no failure is left: the MAC needs no library */
  uint8_t message[sizeof kClientLabel - 1 + 2 * WIRE_NONCE_SIZE];
  const char *label = server ? kServerLabel : kClientLabel;
  size_t n = strlen(label);
  memcpy(message, label, n);
  memcpy(message + n, client_nonce, WIRE_NONCE_SIZE);
  memcpy(message + n + WIRE_NONCE_SIZE, server_nonce, WIRE_NONCE_SIZE);
  hurray__hmac_sha256(secret, secret_len, message, sizeof message, out);
  return HURRAY_OK;
}

bool hurray__wire_mac_equal(const uint8_t a[WIRE_MAC_SIZE], const uint8_t b[WIRE_MAC_SIZE]) {
  /* constant time: every byte is compared, whatever the first difference */
  volatile uint8_t diff = 0;
  for (size_t i = 0; i < WIRE_MAC_SIZE; i++) diff = (uint8_t)(diff | (a[i] ^ b[i]));
  return diff == 0;
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
