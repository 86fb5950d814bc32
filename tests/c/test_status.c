/* test_status.c -- versions, status names and messages, and the HurrayError contract (code and
 * a NUL-terminated message on failure, untouched on success, NULL allowed), observed through
 * the public functions that fill it. */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "hurray/hurray.h"

static void versions_match_the_macros(void **state) {
  (void)state;
  assert_int_equal(hurray_c_abi_version(), HURRAY_C_ABI_VERSION);
  assert_int_equal(hurray_c_abi_version(), 4);
  assert_int_equal(hurray_version(), HURRAY_VERSION);
  assert_string_equal(hurray_version_string(), HURRAY_VERSION_STRING);
  char expected[32];
  snprintf(expected, sizeof expected, "%u.%u.%u", (hurray_version() >> 16) & 0xFF,
           (hurray_version() >> 8) & 0xFF, hurray_version() & 0xFF);
  assert_string_equal(hurray_version_string(), expected);
}

static void every_status_has_its_name_and_message(void **state) {
  (void)state;
  int count = 0;
#define CHECK_STATUS(name, value, message)                         \
  assert_int_equal(HURRAY_##name, value);                          \
  assert_string_equal(hurray_status_name(value), "HURRAY_" #name); \
  assert_string_equal(hurray_status_message(value), message);      \
  count++;
  HURRAY_STATUS_LIST(CHECK_STATUS)
#undef CHECK_STATUS
  assert_true(count >= 18); /* codes are only ever appended */
}

static void unknown_statuses_have_fixed_names(void **state) {
  (void)state;
  const int unknown[] = {-1, 255, 1000, INT_MIN, INT_MAX};
  for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
    assert_string_equal(hurray_status_name(unknown[i]), "HURRAY_UNKNOWN_STATUS");
    assert_string_equal(hurray_status_message(unknown[i]), "unknown status");
  }
}

static void failure_writes_code_and_terminated_message(void **state) {
  (void)state;
  HurrayError error;
  memset(&error, 0x5A, sizeof error);
  assert_int_equal(hurray_device_check(0x42, &error), HURRAY_EDEVICE);
  assert_int_equal(error.code, HURRAY_EDEVICE);
  assert_non_null(memchr(error.message, '\0', sizeof error.message));
  assert_string_equal(error.message,
                      "device tag 0x42 is reserved for a future version of the specification");
}

static void long_messages_are_truncated_and_terminated(void **state) {
  (void)state;
  char name[4 * HURRAY_ERROR_MESSAGE_SIZE];
  memset(name, 'x', sizeof name - 1);
  name[sizeof name - 1] = '\0';
  HurrayError error;
  memset(&error, 0x5A, sizeof error);
  uint8_t code = 0;
  assert_int_equal(hurray_dtype_from_name(name, &code, &error), HURRAY_EDTYPE);
  assert_int_equal(error.code, HURRAY_EDTYPE);
  assert_int_equal(strlen(error.message), HURRAY_ERROR_MESSAGE_SIZE - 1);
  assert_memory_equal(error.message, "no dtype is named \"xxx", 22);
}

static void success_leaves_the_error_untouched(void **state) {
  (void)state;
  HurrayError error, before;
  memset(&error, 0x5A, sizeof error);
  before = error;
  uint8_t code = 0;
  assert_int_equal(hurray_dtype_from_name("int4", &code, &error), HURRAY_OK);
  assert_int_equal(hurray_device_check(HURRAY_DEVICE_CUDA, &error), HURRAY_OK);
  assert_memory_equal(&error, &before, sizeof error);
}

static void a_null_error_is_allowed(void **state) {
  (void)state;
  uint8_t code = 0;
  assert_int_equal(hurray_dtype_from_name("nope", &code, NULL), HURRAY_EDTYPE);
  assert_int_equal(hurray_device_check(0xFF, NULL), HURRAY_EDEVICE);
  assert_int_equal(hurray_desc_validate(NULL, NULL), HURRAY_EINVAL);
}

static void a_later_error_overwrites_an_earlier_one(void **state) {
  (void)state;
  HurrayError error = {0};
  assert_int_equal(hurray_device_check(0xFF, &error), HURRAY_EDEVICE);
  uint8_t code = 0;
  assert_int_equal(hurray_dtype_from_name("?", &code, &error), HURRAY_EDTYPE);
  assert_int_equal(error.code, HURRAY_EDTYPE);
  assert_string_equal(error.message, "no dtype is named \"?\"");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(versions_match_the_macros),
      cmocka_unit_test(every_status_has_its_name_and_message),
      cmocka_unit_test(unknown_statuses_have_fixed_names),
      cmocka_unit_test(failure_writes_code_and_terminated_message),
      cmocka_unit_test(long_messages_are_truncated_and_terminated),
      cmocka_unit_test(success_leaves_the_error_untouched),
      cmocka_unit_test(a_null_error_is_allowed),
      cmocka_unit_test(a_later_error_overwrites_an_earlier_one),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
