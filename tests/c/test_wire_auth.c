/* test_wire_auth.c -- the in-tree HMAC-SHA-256 of src/wire/auth.c (ADR-073): the SHA-256
 * vectors of FIPS 180-2, every test case
 * of RFC 4231, and agreement with OpenSSL's libcrypto (linked into this test only) for every
 * key and message length from 0 to 200 bytes, which crosses the 55/56/64-byte padding edges of
 * SHA-256 and HMAC's hashing of keys longer than a block. The golden AUTH frame of spec §9.3
 * is in test_wire_codec.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "wire.h"

static size_t unhex(const char *text, uint8_t *out, size_t cap) {
  size_t n = 0;
  for (; text[0] != '\0'; text += 2) {
    unsigned v = 0;
    assert_int_equal(sscanf(text, "%2x", &v), 1);
    assert_true(n < cap);
    out[n++] = (uint8_t)v;
  }
  return n;
}

static void assert_mac(const uint8_t *key, size_t key_len, const uint8_t *msg, size_t msg_len,
                       const char *hex, size_t compare) {
  uint8_t want[32], got[WIRE_MAC_SIZE];
  assert_int_equal(unhex(hex, want, sizeof want), compare);
  hurray__hmac_sha256(key, key_len, msg, msg_len, got);
  assert_memory_equal(got, want, compare);
}

/* RFC 4231 §4.2-4.8: HMAC-SHA-256 of the seven test cases (case 5 truncated to 128 bits). */
static void rfc4231(void **state) {
  (void)state;
  uint8_t key[131], data[256];
  memset(key, 0x0b, 20);
  assert_mac(key, 20, (const uint8_t *)"Hi There", 8,
             "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7", 32);
  assert_mac((const uint8_t *)"Jefe", 4, (const uint8_t *)"what do ya want for nothing?", 28,
             "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843", 32);
  memset(key, 0xaa, 20);
  memset(data, 0xdd, 50);
  assert_mac(key, 20, data, 50,
             "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe", 32);
  for (int i = 0; i < 25; i++) key[i] = (uint8_t)(i + 1);
  memset(data, 0xcd, 50);
  assert_mac(key, 25, data, 50,
             "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b", 32);
  memset(key, 0x0c, 20);
  assert_mac(key, 20, (const uint8_t *)"Test With Truncation", 20,
             "a3b6167473100ee06e0c796c2955552b", 16);
  memset(key, 0xaa, 131);
  const char *big_key = "Test Using Larger Than Block-Size Key - Hash Key First";
  assert_mac(key, 131, (const uint8_t *)big_key, strlen(big_key),
             "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54", 32);
  const char *big_data = "This is a test using a larger than block-size key and a larger than "
                         "block-size data. The key needs to be hashed before being used by the "
                         "HMAC algorithm.";
  assert_mac(key, 131, (const uint8_t *)big_data, strlen(big_data),
             "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2", 32);
}

/* FIPS 180-2 appendix B (one block, two blocks, a million bytes), and the empty message. */
static void fips180(void **state) {
  (void)state;
  static const struct {
    const char *message;
    size_t repeat;
    const char *sha256;
  } kVectors[] = {
      {"", 1, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
      {"abc", 1, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
      {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 1,
       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
      {"a", 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
  };
  for (size_t v = 0; v < sizeof kVectors / sizeof *kVectors; v++) {
    size_t n = strlen(kVectors[v].message), total = n * kVectors[v].repeat;
    uint8_t *message = malloc(total + 1);
    assert_non_null(message);
    for (size_t i = 0; i < kVectors[v].repeat; i++) memcpy(message + i * n, kVectors[v].message, n);
    uint8_t want[32], got[32];
    assert_int_equal(unhex(kVectors[v].sha256, want, sizeof want), 32);
    hurray__sha256(message, total, got);
    assert_memory_equal(got, want, 32);
    free(message);
  }
}

/* Every key and message length 0..200 against libcrypto's HMAC. */
static void agrees_with_libcrypto(void **state) {
  (void)state;
  uint8_t key[201], msg[201];
  for (size_t i = 0; i < sizeof key; i++) {
    key[i] = (uint8_t)(i * 7 + 3);
    msg[i] = (uint8_t)(i * 13 + 1);
  }
  for (size_t k = 0; k <= 200; k++) {
    for (size_t m = 0; m <= 200; m += k % 2 == 0 ? 1 : 7) {
      uint8_t ours[WIRE_MAC_SIZE], theirs[EVP_MAX_MD_SIZE];
      unsigned int len = 0;
      hurray__hmac_sha256(key, k, msg, m, ours);
      assert_non_null(HMAC(EVP_sha256(), key, (int)k, msg, m, theirs, &len));
      assert_int_equal(len, WIRE_MAC_SIZE);
      if (memcmp(ours, theirs, WIRE_MAC_SIZE) != 0) fail_msg("key %zu, message %zu bytes", k, m);
    }
  }
}

static void mac_equal_is_exact(void **state) {
  (void)state;
  uint8_t a[WIRE_MAC_SIZE], b[WIRE_MAC_SIZE];
  memset(a, 0x5a, sizeof a);
  memcpy(b, a, sizeof b);
  assert_true(hurray__wire_mac_equal(a, b));
  for (size_t i = 0; i < WIRE_MAC_SIZE; i++) {
    b[i] ^= 0x01;
    assert_false(hurray__wire_mac_equal(a, b));
    b[i] ^= 0x81;
    assert_false(hurray__wire_mac_equal(a, b));
    b[i] ^= 0x80;
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(rfc4231),
      cmocka_unit_test(fips180),
      cmocka_unit_test(agrees_with_libcrypto),
      cmocka_unit_test(mac_equal_is_exact),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
