/* test_float_text.c -- hurray_format_float64: the shortest text that reads back as the same
 * double, and the same text under a decimal-comma locale, where printf's %g writes "0,5": in
 * the function and in the JSON that hurray_convert writes (safetensors metadata). The locale
 * is de_DE.UTF-8, which scripts/setup.sh generates; its absence fails the test rather than
 * letting it pass without having checked anything. */
#define _POSIX_C_SOURCE 200809L
#include <locale.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "test_convert_helpers.h"

static void check(double value, const char *expected) {
  char text[HURRAY_FLOAT64_TEXT_SIZE];
  size_t n = hurray_format_float64(value, text);
  assert_string_equal(text, expected);
  assert_int_equal(n, strlen(expected));
}

static const struct {
  double value;
  const char *text;
} kCases[] = {
    {0.5, "0.5"},       {0.1, "0.1"},           {0.0003, "0.0003"},
    {1.0, "1"},         {-2.5, "-2.5"},         {0.0, "0"},
    {-0.0, "-0"},       {1e100, "1e+100"},      {1.5e-7, "1.5e-07"},
    {123456.0, "123456"}, {1.0 / 3.0, "0.3333333333333333"},
    {-1.7976931348623157e308, "-1.7976931348623157e+308"},
    {5e-324, "5e-324"}, {0.1 + 0.2, "0.30000000000000004"}, /* 17 digits */
};

static void shortest_text_reads_back(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof kCases / sizeof kCases[0]; i++) {
    check(kCases[i].value, kCases[i].text);
  }
  check(NAN, "NaN");
  check(INFINITY, "Infinity");
  check(-INFINITY, "-Infinity");
  /* every text reads back exactly, and no shorter %g spelling would */
  uint64_t bits = 0x9E3779B97F4A7C15u;
  for (int i = 0; i < 20000; i++) {
    bits ^= bits << 13, bits ^= bits >> 7, bits ^= bits << 17;
    double value;
    memcpy(&value, &bits, sizeof value);
    if (!isfinite(value)) continue;
    char text[HURRAY_FLOAT64_TEXT_SIZE], shorter[320];
    hurray_format_float64(value, text);
    assert_true(strtod(text, NULL) == value);
    int digits = 0; /* significant: from the first digit that is not 0 */
    for (const char *p = text; *p != '\0' && *p != 'e'; p++) {
      digits += (*p >= '1' && *p <= '9') || (*p == '0' && digits > 0);
    }
    snprintf(shorter, sizeof shorter, "%.*g", digits > 1 ? digits - 1 : 1, value);
    if (digits > 1) assert_true(strtod(shorter, NULL) != value);
  }
}

/* Switches LC_NUMERIC to a decimal-comma locale; the test fails if there is none. */
static void use_decimal_comma(void) {
  static const char *const kLocales[] = {"de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8", "fr_FR.utf8"};
  for (size_t i = 0; i < sizeof kLocales / sizeof kLocales[0]; i++) {
    if (setlocale(LC_NUMERIC, kLocales[i]) != NULL) {
      char probe[8];
      snprintf(probe, sizeof probe, "%.1f", 0.5);
      assert_string_equal(probe, "0,5"); /* the trap this test is about is armed */
      return;
    }
  }
  fail_msg("no decimal-comma locale (de_DE.UTF-8): run scripts/setup.sh");
}

static void decimal_comma_locale_changes_nothing(void **state) {
  (void)state;
  use_decimal_comma();
  for (size_t i = 0; i < sizeof kCases / sizeof kCases[0]; i++) {
    check(kCases[i].value, kCases[i].text);
  }
  setlocale(LC_NUMERIC, "C");
}

/* The JSON hurray_convert writes stays JSON under a decimal-comma locale. */
static void convert_writes_json_numbers_under_decimal_comma(void **state) {
  (void)state;
  HurrayMetaValue items[2] = {{.type = HURRAY_META_FLOAT64},
                              {.type = HURRAY_META_LIST, .count = 2}};
  HurrayMetaValue list[2] = {{.type = HURRAY_META_FLOAT64}, {.type = HURRAY_META_FLOAT64}};
  items[0].as.float64 = 0.5;
  list[0].as.float64 = 1.25;
  list[1].as.float64 = -3e-5;
  items[1].as.items = list;
  static const char *const keys[] = {"scale", "steps"};
  HurrayMetaValue meta = {.type = HURRAY_META_MAP, .count = 2, .keys = keys};
  meta.as.items = items;
  Dense t = {.name = "t", .dtype = HURRAY_DTYPE_UINT8, .ndim = 1, .shape = {2}, .bytes = "ab",
             .size = 2};
  write_hurray(path_of("comma.hurray"), &t, 1, &meta);
  use_decimal_comma();
  HurrayConvertOptions json = {.flags = HURRAY_CONVERT_METADATA_JSON};
  OK(hurray_convert(path_of("comma.hurray"), path_of("comma.safetensors"), &json, E));
  setlocale(LC_NUMERIC, "C");
  size_t size = 0;
  char *bytes = (char *)file_contents(path_of("comma.safetensors"), &size);
  assert_non_null(
      strstr(bytes + 8, "{\"__metadata__\":{\"scale\":\"0.5\",\"steps\":\"[1.25,-3e-05]\"},"));
  free(bytes);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(shortest_text_reads_back),
      cmocka_unit_test(decimal_comma_locale_changes_nothing),
      cmocka_unit_test(convert_writes_json_numbers_under_decimal_comma),
  };
  return cmocka_run_group_tests(tests, make_dir, remove_dir);
}
