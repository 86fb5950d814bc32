/* test_dtype.c -- the dtype table against an independent golden copy, lookups by code, name and
 * DLPack form, and packed storage sizes at the edges of uint64. */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "hurray/hurray.h"

#define NONE HURRAY_DLPACK_NONE

/* The table as docs/spec/dtypes.md and dlpack.h state it, written out independently of
 * dtype.c: name, code, tier, kind, bits, DLPack (code, bits, lanes). */
static const HurrayDTypeInfo kGolden[] = {
    {"bool", 1, 1, HURRAY_KIND_BOOL, 8, 6, 8, 1},
    {"int8", 2, 1, HURRAY_KIND_SIGNED, 8, 0, 8, 1},
    {"int16", 3, 1, HURRAY_KIND_SIGNED, 16, 0, 16, 1},
    {"int32", 4, 1, HURRAY_KIND_SIGNED, 32, 0, 32, 1},
    {"int64", 5, 1, HURRAY_KIND_SIGNED, 64, 0, 64, 1},
    {"uint8", 6, 1, HURRAY_KIND_UNSIGNED, 8, 1, 8, 1},
    {"uint16", 7, 1, HURRAY_KIND_UNSIGNED, 16, 1, 16, 1},
    {"uint32", 8, 1, HURRAY_KIND_UNSIGNED, 32, 1, 32, 1},
    {"uint64", 9, 1, HURRAY_KIND_UNSIGNED, 64, 1, 64, 1},
    {"float32", 10, 1, HURRAY_KIND_FLOAT, 32, 2, 32, 1},
    {"float64", 11, 1, HURRAY_KIND_FLOAT, 64, 2, 64, 1},
    {"complex64", 12, 1, HURRAY_KIND_COMPLEX, 64, 5, 64, 1},
    {"complex128", 13, 1, HURRAY_KIND_COMPLEX, 128, 5, 128, 1},
    {"float16", 32, 2, HURRAY_KIND_FLOAT, 16, 2, 16, 1},
    {"bfloat16", 33, 2, HURRAY_KIND_FLOAT, 16, 4, 16, 1},
    {"float8_e4m3fn", 34, 2, HURRAY_KIND_FLOAT, 8, 10, 8, 1},
    {"float8_e5m2", 35, 2, HURRAY_KIND_FLOAT, 8, 12, 8, 1},
    {"float8_e4m3fnuz", 36, 2, HURRAY_KIND_FLOAT, 8, 11, 8, 1},
    {"float8_e5m2fnuz", 37, 2, HURRAY_KIND_FLOAT, 8, 13, 8, 1},
    {"float8_e8m0fnu", 38, 2, HURRAY_KIND_FLOAT, 8, 14, 8, 1},
    {"float8_e3m4", 39, 2, HURRAY_KIND_FLOAT, 8, 7, 8, 1},
    {"float8_e4m3", 40, 2, HURRAY_KIND_FLOAT, 8, 8, 8, 1},
    {"float8_e4m3b11fnuz", 41, 2, HURRAY_KIND_FLOAT, 8, 9, 8, 1},
    {"float6_e2m3fn", 42, 2, HURRAY_KIND_FLOAT, 6, 15, 6, 1},
    {"float6_e3m2fn", 43, 2, HURRAY_KIND_FLOAT, 6, 16, 6, 1},
    {"float4_e2m1fn", 44, 2, HURRAY_KIND_FLOAT, 4, 17, 4, 1},
    {"complex32", 45, 2, HURRAY_KIND_COMPLEX, 32, 5, 32, 1},
    {"int4", 64, 3, HURRAY_KIND_SIGNED, 4, NONE, 0, 0},
    {"uint4", 65, 3, HURRAY_KIND_UNSIGNED, 4, NONE, 0, 0},
    {"int2", 66, 3, HURRAY_KIND_SIGNED, 2, NONE, 0, 0},
    {"uint2", 67, 3, HURRAY_KIND_UNSIGNED, 2, NONE, 0, 0},
    {"uint1", 68, 3, HURRAY_KIND_UNSIGNED, 1, NONE, 0, 0},
    {"q4_0", 69, 3, HURRAY_KIND_BLOCK, 8, NONE, 0, 0},
    {"q4_1", 70, 3, HURRAY_KIND_BLOCK, 8, NONE, 0, 0},
    {"q5_0", 71, 3, HURRAY_KIND_BLOCK, 8, NONE, 0, 0},
    {"q5_1", 72, 3, HURRAY_KIND_BLOCK, 8, NONE, 0, 0},
    {"q8_0", 73, 3, HURRAY_KIND_BLOCK, 8, NONE, 0, 0},
    {"q2_k", 74, 3, HURRAY_KIND_BLOCK, 8, NONE, 0, 0},
    {"q3_k", 75, 3, HURRAY_KIND_BLOCK, 8, NONE, 0, 0},
    {"q4_k", 76, 3, HURRAY_KIND_BLOCK, 8, NONE, 0, 0},
    {"q5_k", 77, 3, HURRAY_KIND_BLOCK, 8, NONE, 0, 0},
    {"q6_k", 78, 3, HURRAY_KIND_BLOCK, 8, NONE, 0, 0},
    {"q8_k", 79, 3, HURRAY_KIND_BLOCK, 8, NONE, 0, 0},
};

#define GOLDEN_COUNT (sizeof kGolden / sizeof kGolden[0])

static void table_matches_the_golden_copy(void **state) {
  (void)state;
  assert_int_equal(hurray_dtype_count(), GOLDEN_COUNT);
  for (size_t i = 0; i < GOLDEN_COUNT; i++) {
    const HurrayDTypeInfo *want = &kGolden[i];
    const HurrayDTypeInfo *got = hurray_dtype_at(i);
    assert_non_null(got);
    assert_string_equal(got->name, want->name);
    assert_int_equal(got->code, want->code);
    assert_int_equal(got->tier, want->tier);
    assert_int_equal(got->kind, want->kind);
    assert_int_equal(got->bits, want->bits);
    assert_int_equal(got->dlpack_code, want->dlpack_code);
    assert_int_equal(got->dlpack_bits, want->dlpack_bits);
    assert_int_equal(got->dlpack_lanes, want->dlpack_lanes);
  }
  assert_null(hurray_dtype_at(GOLDEN_COUNT));
  assert_null(hurray_dtype_at(SIZE_MAX));
}

static void table_is_in_code_order_and_indexed_by_code(void **state) {
  (void)state;
  int previous = HURRAY_DTYPE_INVALID;
  for (size_t i = 0; i < hurray_dtype_count(); i++) {
    const HurrayDTypeInfo *t = hurray_dtype_at(i);
    assert_true(t->code > previous);
    previous = t->code;
    assert_ptr_equal(hurray_dtype_info(t->code), t);
  }
}

static void tiers_have_their_sizes(void **state) {
  (void)state;
  size_t per_tier[4] = {0};
  for (size_t i = 0; i < hurray_dtype_count(); i++) per_tier[hurray_dtype_at(i)->tier]++;
  assert_int_equal(per_tier[0], 0);
  assert_int_equal(per_tier[1], 13); /* the array API dtypes */
  assert_int_equal(per_tier[2], 14);
  assert_int_equal(per_tier[3], 16); /* packed integers, GGML blocks */
}

static void unknown_codes_have_no_info(void **state) {
  (void)state;
  const int unknown[] = {HURRAY_DTYPE_INVALID, -1, 14, 31, 46, 63, 80, 255, 256, INT_MAX, INT_MIN};
  for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
    assert_null(hurray_dtype_info(unknown[i]));
  }
}

/* hurray_dtype_info finds entries by arithmetic over the table's runs of codes: every int a
 * uint8 code field can hold, and its neighbours, gives what a scan of the table gives. */
static void lookup_agrees_with_a_scan_for_every_code(void **state) {
  (void)state;
  for (int code = -2; code <= 0x101; code++) {
    const HurrayDTypeInfo *scanned = NULL;
    for (size_t i = 0; i < hurray_dtype_count(); i++) {
      if (hurray_dtype_at(i)->code == code) scanned = hurray_dtype_at(i);
    }
    if (hurray_dtype_info(code) != scanned) fail_msg("dtype code %d", code);
  }
}

static void every_name_maps_to_its_code(void **state) {
  (void)state;
  for (size_t i = 0; i < hurray_dtype_count(); i++) {
    const HurrayDTypeInfo *t = hurray_dtype_at(i);
    uint8_t code = 0;
    assert_int_equal(hurray_dtype_from_name(t->name, &code, NULL), HURRAY_OK);
    assert_int_equal(code, t->code);
  }
}

static void unknown_names_are_rejected_by_name(void **state) {
  (void)state;
  const char *unknown[] = {"", "Float32", "float", "int4 ", "float8", "complex", "invalid"};
  for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
    HurrayError error = {0};
    uint8_t code = 0xAB;
    assert_int_equal(hurray_dtype_from_name(unknown[i], &code, &error), HURRAY_EDTYPE);
    assert_int_equal(code, 0xAB);
    assert_int_equal(error.code, HURRAY_EDTYPE);
    assert_non_null(strstr(error.message, unknown[i]));
  }
  HurrayError error = {0};
  uint8_t code = 0;
  assert_int_equal(hurray_dtype_from_name(NULL, &code, &error), HURRAY_EINVAL);
  assert_non_null(strstr(error.message, "name is NULL"));
  assert_int_equal(hurray_dtype_from_name("int8", NULL, &error), HURRAY_EINVAL);
  assert_non_null(strstr(error.message, "code is NULL"));
}

static void dlpack_forms_round_trip(void **state) {
  (void)state;
  size_t with_form = 0;
  for (size_t i = 0; i < hurray_dtype_count(); i++) {
    const HurrayDTypeInfo *t = hurray_dtype_at(i);
    if (t->dlpack_code == HURRAY_DLPACK_NONE) continue;
    uint8_t code = 0;
    assert_int_equal(
        hurray_dtype_from_dlpack(t->dlpack_code, t->dlpack_bits, t->dlpack_lanes, &code, NULL),
        HURRAY_OK);
    assert_int_equal(code, t->code);
    with_form++;
  }
  assert_int_equal(with_form, 27);
}

static void dlpack_forms_without_a_dtype_are_unsupported(void **state) {
  (void)state;
  static const struct {
    uint8_t code, bits;
    uint16_t lanes;
    const char *message;
  } cases[] = {
      {0, 4, 1, "DLPack dtype (code 0, bits 4, lanes 1) has no Hurray dtype"}, /* no int4 */
      {1, 1, 1, "DLPack dtype (code 1, bits 1, lanes 1) has no Hurray dtype"},
      {6, 1, 1, "DLPack dtype (code 6, bits 1, lanes 1) has no Hurray dtype"},   /* bool is 8 */
      {3, 64, 1, "DLPack dtype (code 3, bits 64, lanes 1) has no Hurray dtype"}, /* opaque */
      {2, 8, 1, "DLPack dtype (code 2, bits 8, lanes 1) has no Hurray dtype"},
      {4, 32, 1, "DLPack dtype (code 4, bits 32, lanes 1) has no Hurray dtype"},
      {18, 8, 1, "DLPack dtype (code 18, bits 8, lanes 1) has no Hurray dtype"},
      /* the no-form sentinel of the table is not itself a DLPack form */
      {NONE, 0, 1, "DLPack dtype (code 255, bits 0, lanes 1) has no Hurray dtype"},
      {NONE, 0, 0,
       "DLPack dtype (code 255, bits 0, lanes 0) has no Hurray dtype: Hurray "
       "dtypes have one lane"},
      {2, 32, 4,
       "DLPack dtype (code 2, bits 32, lanes 4) has no Hurray dtype: Hurray "
       "dtypes have one lane"},
      {2, 32, 0,
       "DLPack dtype (code 2, bits 32, lanes 0) has no Hurray dtype: Hurray "
       "dtypes have one lane"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    HurrayError error = {0};
    uint8_t code = 0xAB;
    assert_int_equal(
        hurray_dtype_from_dlpack(cases[i].code, cases[i].bits, cases[i].lanes, &code, &error),
        HURRAY_EUNSUPPORTED);
    assert_int_equal(code, 0xAB);
    assert_string_equal(error.message, cases[i].message);
  }
  assert_int_equal(hurray_dtype_from_dlpack(2, 32, 1, NULL, NULL), HURRAY_EINVAL);
}

static void storage_bytes_round_up_packed_bits(void **state) {
  (void)state;
  static const struct {
    int code;
    uint64_t count, bytes;
  } cases[] = {
      {HURRAY_DTYPE_FLOAT32, 0, 0},
      {HURRAY_DTYPE_FLOAT32, 3, 12},
      {HURRAY_DTYPE_BOOL, 5, 5},
      {HURRAY_DTYPE_COMPLEX128, 2, 32},
      {HURRAY_DTYPE_INT4, 1, 1},
      {HURRAY_DTYPE_INT4, 2, 1},
      {HURRAY_DTYPE_UINT4, 3, 2},
      {HURRAY_DTYPE_FLOAT4_E2M1FN, 7, 4},
      {HURRAY_DTYPE_FLOAT6_E2M3FN, 1, 1},
      {HURRAY_DTYPE_FLOAT6_E3M2FN, 3, 3},
      {HURRAY_DTYPE_FLOAT6_E3M2FN, 4, 3},
      {HURRAY_DTYPE_FLOAT6_E3M2FN, 7, 6},
      {HURRAY_DTYPE_INT2, 5, 2},
      {HURRAY_DTYPE_UINT1, 0, 0},
      {HURRAY_DTYPE_UINT1, 1, 1},
      {HURRAY_DTYPE_UINT1, 8, 1},
      {HURRAY_DTYPE_UINT1, 9, 2},
      /* near 2^64: exact, with no false overflow from count * bits */
      {HURRAY_DTYPE_UINT8, UINT64_MAX, UINT64_MAX},
      {HURRAY_DTYPE_UINT1, UINT64_MAX, UINT64_C(2305843009213693952)},
      {HURRAY_DTYPE_UINT2, UINT64_MAX, UINT64_C(4611686018427387904)},
      {HURRAY_DTYPE_INT4, UINT64_MAX, UINT64_C(9223372036854775808)},
      {HURRAY_DTYPE_FLOAT6_E2M3FN, UINT64_MAX, UINT64_C(13835058055282163712)},
      {HURRAY_DTYPE_UINT16, UINT64_C(9223372036854775807), UINT64_MAX - 1},
      {HURRAY_DTYPE_COMPLEX128, UINT64_C(144115188075855871), UINT64_C(2305843009213693936)},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint64_t bytes = 0;
    assert_int_equal(hurray_dtype_storage_bytes(cases[i].code, cases[i].count, &bytes, NULL),
                     HURRAY_OK);
    assert_int_equal(bytes, cases[i].bytes);
  }
}

static void storage_bytes_overflow_is_reported(void **state) {
  (void)state;
  static const struct {
    int code;
    uint64_t count;
  } cases[] = {
      {HURRAY_DTYPE_UINT16, UINT64_C(9223372036854775808)},
      {HURRAY_DTYPE_FLOAT32, UINT64_MAX},
      {HURRAY_DTYPE_COMPLEX128, UINT64_C(1) << 60},
      {HURRAY_DTYPE_COMPLEX32, UINT64_C(1) << 62},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    HurrayError error = {0};
    uint64_t bytes = 7;
    assert_int_equal(hurray_dtype_storage_bytes(cases[i].code, cases[i].count, &bytes, &error),
                     HURRAY_EOVERFLOW);
    assert_int_equal(bytes, 7);
    assert_non_null(strstr(error.message, hurray_dtype_info(cases[i].code)->name));
  }
  HurrayError error = {0};
  assert_int_equal(hurray_dtype_storage_bytes(HURRAY_DTYPE_UINT16, UINT64_C(1) << 63, NULL, &error),
                   HURRAY_EINVAL);
}

static void storage_bytes_of_an_unknown_dtype(void **state) {
  (void)state;
  HurrayError error = {0};
  uint64_t bytes = 7;
  assert_int_equal(hurray_dtype_storage_bytes(99, 1, &bytes, &error), HURRAY_EDTYPE);
  assert_string_equal(error.message, "unknown dtype code 99");
  assert_int_equal(hurray_dtype_storage_bytes(HURRAY_DTYPE_INVALID, 1, &bytes, &error),
                   HURRAY_EDTYPE);
  assert_string_equal(error.message, "unknown dtype code 0");
  assert_int_equal(bytes, 7);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(table_matches_the_golden_copy),
      cmocka_unit_test(table_is_in_code_order_and_indexed_by_code),
      cmocka_unit_test(tiers_have_their_sizes),
      cmocka_unit_test(unknown_codes_have_no_info),
      cmocka_unit_test(lookup_agrees_with_a_scan_for_every_code),
      cmocka_unit_test(every_name_maps_to_its_code),
      cmocka_unit_test(unknown_names_are_rejected_by_name),
      cmocka_unit_test(dlpack_forms_round_trip),
      cmocka_unit_test(dlpack_forms_without_a_dtype_are_unsupported),
      cmocka_unit_test(storage_bytes_round_up_packed_bits),
      cmocka_unit_test(storage_bytes_overflow_is_reported),
      cmocka_unit_test(storage_bytes_of_an_unknown_dtype),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
