/* dtype.c -- the dtype table: every element type Hurray knows, with its tier, kind, storage
 * bits and DLPack form (docs/spec/dtypes.md). The table is the single source of truth; every
 * function below only reads it. */
#include <inttypes.h>
#include <string.h>

#include "internal.h"

/* DLPack's DLDataTypeCode values (dlpack.h). */
enum {
  DL_INT = 0,
  DL_UINT = 1,
  DL_FLOAT = 2,
  DL_BFLOAT = 4,
  DL_COMPLEX = 5,
  DL_BOOL = 6,
  DL_FLOAT8_E3M4 = 7,
  DL_FLOAT8_E4M3 = 8,
  DL_FLOAT8_E4M3B11FNUZ = 9,
  DL_FLOAT8_E4M3FN = 10,
  DL_FLOAT8_E4M3FNUZ = 11,
  DL_FLOAT8_E5M2 = 12,
  DL_FLOAT8_E5M2FNUZ = 13,
  DL_FLOAT8_E8M0FNU = 14,
  DL_FLOAT6_E2M3FN = 15,
  DL_FLOAT6_E3M2FN = 16,
  DL_FLOAT4_E2M1FN = 17,
  DL_NONE = HURRAY_DLPACK_NONE
};

/* The table, in code order as hurray_dtype_at promises: (name, code, tier, kind, bits, DLPack
 * code). One list, from which both the table and its index by code are generated. */
/* clang-format off */
#define DTYPE_TABLE(X)                                                              \
  X("bool", BOOL, 1, BOOL, 8, DL_BOOL)                                                     \
  X("int8", INT8, 1, SIGNED, 8, DL_INT)                                                    \
  X("int16", INT16, 1, SIGNED, 16, DL_INT)                                                 \
  X("int32", INT32, 1, SIGNED, 32, DL_INT)                                                 \
  X("int64", INT64, 1, SIGNED, 64, DL_INT)                                                 \
  X("uint8", UINT8, 1, UNSIGNED, 8, DL_UINT)                                               \
  X("uint16", UINT16, 1, UNSIGNED, 16, DL_UINT)                                            \
  X("uint32", UINT32, 1, UNSIGNED, 32, DL_UINT)                                            \
  X("uint64", UINT64, 1, UNSIGNED, 64, DL_UINT)                                            \
  X("float32", FLOAT32, 1, FLOAT, 32, DL_FLOAT)                                            \
  X("float64", FLOAT64, 1, FLOAT, 64, DL_FLOAT)                                            \
  X("complex64", COMPLEX64, 1, COMPLEX, 64, DL_COMPLEX)                                    \
  X("complex128", COMPLEX128, 1, COMPLEX, 128, DL_COMPLEX)                                 \
  X("float16", FLOAT16, 2, FLOAT, 16, DL_FLOAT)                                            \
  X("bfloat16", BFLOAT16, 2, FLOAT, 16, DL_BFLOAT)                                         \
  X("float8_e4m3fn", FLOAT8_E4M3FN, 2, FLOAT, 8, DL_FLOAT8_E4M3FN)                         \
  X("float8_e5m2", FLOAT8_E5M2, 2, FLOAT, 8, DL_FLOAT8_E5M2)                               \
  X("float8_e4m3fnuz", FLOAT8_E4M3FNUZ, 2, FLOAT, 8, DL_FLOAT8_E4M3FNUZ)                   \
  X("float8_e5m2fnuz", FLOAT8_E5M2FNUZ, 2, FLOAT, 8, DL_FLOAT8_E5M2FNUZ)                   \
  X("float8_e8m0fnu", FLOAT8_E8M0FNU, 2, FLOAT, 8, DL_FLOAT8_E8M0FNU)                      \
  X("float8_e3m4", FLOAT8_E3M4, 2, FLOAT, 8, DL_FLOAT8_E3M4)                               \
  X("float8_e4m3", FLOAT8_E4M3, 2, FLOAT, 8, DL_FLOAT8_E4M3)                               \
  X("float8_e4m3b11fnuz", FLOAT8_E4M3B11FNUZ, 2, FLOAT, 8, DL_FLOAT8_E4M3B11FNUZ)          \
  X("float6_e2m3fn", FLOAT6_E2M3FN, 2, FLOAT, 6, DL_FLOAT6_E2M3FN)                         \
  X("float6_e3m2fn", FLOAT6_E3M2FN, 2, FLOAT, 6, DL_FLOAT6_E3M2FN)                         \
  X("float4_e2m1fn", FLOAT4_E2M1FN, 2, FLOAT, 4, DL_FLOAT4_E2M1FN)                         \
  X("complex32", COMPLEX32, 2, COMPLEX, 32, DL_COMPLEX)                                    \
  X("int4", INT4, 3, SIGNED, 4, DL_NONE)                                                   \
  X("uint4", UINT4, 3, UNSIGNED, 4, DL_NONE)                                               \
  X("int2", INT2, 3, SIGNED, 2, DL_NONE)                                                   \
  X("uint2", UINT2, 3, UNSIGNED, 2, DL_NONE)                                               \
  X("uint1", UINT1, 3, UNSIGNED, 1, DL_NONE)                                               \
  X("q4_0", Q4_0, 3, BLOCK, 8, DL_NONE)                                                    \
  X("q4_1", Q4_1, 3, BLOCK, 8, DL_NONE)                                                    \
  X("q5_0", Q5_0, 3, BLOCK, 8, DL_NONE)                                                    \
  X("q5_1", Q5_1, 3, BLOCK, 8, DL_NONE)                                                    \
  X("q8_0", Q8_0, 3, BLOCK, 8, DL_NONE)                                                    \
  X("q2_k", Q2_K, 3, BLOCK, 8, DL_NONE)                                                    \
  X("q3_k", Q3_K, 3, BLOCK, 8, DL_NONE)                                                    \
  X("q4_k", Q4_K, 3, BLOCK, 8, DL_NONE)                                                    \
  X("q5_k", Q5_K, 3, BLOCK, 8, DL_NONE)                                                    \
  X("q6_k", Q6_K, 3, BLOCK, 8, DL_NONE)                                                    \
  X("q8_k", Q8_K, 3, BLOCK, 8, DL_NONE)

/* A DLPack form is always (dl_code, the dtype's own bits, 1 lane); without one it is
 * (HURRAY_DLPACK_NONE, 0, 0). */
#define DTYPE_ENTRY(name, code, tier, kind, bits, dl_code)               \
  {name, HURRAY_DTYPE_##code, tier, HURRAY_KIND_##kind, bits, dl_code,   \
   (dl_code) == DL_NONE ? 0 : (bits), (dl_code) == DL_NONE ? 0 : 1},
#define DTYPE_POSITION(name, code, tier, kind, bits, dl_code) POSITION_##code,
#define DTYPE_INDEX(name, code, tier, kind, bits, dl_code) \
  [HURRAY_DTYPE_##code] = POSITION_##code + 1,
#define DTYPE_DLPACK_FORM(name, code, tier, kind, bits, dl_code) \
  (dl_code) == DL_NONE ? NO_DLPACK_FORM : (uint32_t)(dl_code) << 8 | (bits),
/* clang-format on */

static const HurrayDTypeInfo kDTypes[] = {DTYPE_TABLE(DTYPE_ENTRY)};

/* Every validation asks for dtypes by code: kIndex[code] is 1 + the entry's position, 0 for a
 * code Hurray does not know. */
enum { DTYPE_TABLE(DTYPE_POSITION) DTYPE_POSITIONS };
static const uint8_t kIndex[256] = {DTYPE_TABLE(DTYPE_INDEX)};

/* Each entry's DLPack form as (dl_code << 8 | bits), one lane, in table order: what
 * hurray_dtype_from_dlpack scans, every capsule a consumer takes. NO_DLPACK_FORM never equals
 * a form, which fits 16 bits. */
#define NO_DLPACK_FORM UINT32_MAX
static const uint32_t kDLPackForms[] = {DTYPE_TABLE(DTYPE_DLPACK_FORM)};

#undef DTYPE_ENTRY
#undef DTYPE_POSITION
#undef DTYPE_INDEX
#undef DTYPE_DLPACK_FORM

#define DTYPE_COUNT (sizeof kDTypes / sizeof kDTypes[0])
_Static_assert(DTYPE_COUNT == DTYPE_POSITIONS, "one index per entry");
_Static_assert(sizeof kDLPackForms / sizeof kDLPackForms[0] == DTYPE_COUNT, "one form per entry");

size_t hurray_dtype_count(void) {
  return DTYPE_COUNT;
}

const HurrayDTypeInfo *hurray_dtype_at(size_t index) {
  return index < DTYPE_COUNT ? &kDTypes[index] : NULL;
}

const HurrayDTypeInfo *hurray_dtype_info(int code) {
  if (code < 0 || code > 0xFF || kIndex[code] == 0) return NULL;
  return &kDTypes[kIndex[code] - 1];
}

int hurray_dtype_from_name(const char *name, uint8_t *code, HurrayError *error) {
  if (name == NULL || code == NULL) {
    return hurray__fail(error, HURRAY_EINVAL, "hurray_dtype_from_name: %s is NULL",
                        name == NULL ? "name" : "code");
  }
  for (size_t i = 0; i < DTYPE_COUNT; i++) {
    if (strcmp(kDTypes[i].name, name) == 0) {
      *code = kDTypes[i].code;
      return HURRAY_OK;
    }
  }
  return hurray__fail(error, HURRAY_EDTYPE, "no dtype is named \"%s\"", name);
}

int hurray_dtype_from_dlpack(uint8_t dl_code, uint8_t dl_bits, uint16_t dl_lanes, uint8_t *code,
                             HurrayError *error) {
  if (code == NULL) {
    return hurray__fail(error, HURRAY_EINVAL, "hurray_dtype_from_dlpack: code is NULL");
  }
  if (dl_lanes != 1) {
    return hurray__fail(error, HURRAY_EUNSUPPORTED,
                        "DLPack dtype (code %u, bits %u, lanes %u) has no Hurray dtype: "
                        "Hurray dtypes have one lane",
                        dl_code, dl_bits, dl_lanes);
  }
  uint32_t form = (uint32_t)dl_code << 8 | dl_bits;
  for (size_t i = 0; i < DTYPE_COUNT; i++) {
    if (kDLPackForms[i] == form) {
      *code = kDTypes[i].code;
      return HURRAY_OK;
    }
  }
  return hurray__fail(error, HURRAY_EUNSUPPORTED,
                      "DLPack dtype (code %u, bits %u, lanes %u) has no Hurray dtype", dl_code,
                      dl_bits, dl_lanes);
}

int hurray_dtype_block(int code, uint32_t *elements, uint32_t *bytes, HurrayError *error) {
  /* (weights, bytes) of each block dtype, Q4_0 (69) .. Q8_K (79), as ggml's block structs */
  static const uint16_t kBlocks[][2] = {{32, 18},   {32, 20},   {32, 22},   {32, 24},
                                        {32, 34},   {256, 84},  {256, 110}, {256, 144},
                                        {256, 176}, {256, 210}, {256, 292}};
  if (elements == NULL || bytes == NULL) {
    return hurray__fail(error, HURRAY_EINVAL, "hurray_dtype_block: %s is NULL",
                        elements == NULL ? "elements" : "bytes");
  }
  if (code < HURRAY_DTYPE_Q4_0 || code > HURRAY_DTYPE_Q8_K) {
    const HurrayDTypeInfo *t = hurray_dtype_info(code);
    if (t == NULL) return hurray__fail(error, HURRAY_EDTYPE, "unknown dtype code %d", code);
    return hurray__fail(error, HURRAY_EDTYPE, "%s is no block dtype (q4_0 .. q8_k)", t->name);
  }
  *elements = kBlocks[code - HURRAY_DTYPE_Q4_0][0];
  *bytes = kBlocks[code - HURRAY_DTYPE_Q4_0][1];
  return HURRAY_OK;
}

int hurray_dtype_storage_bytes(int code, uint64_t count, uint64_t *bytes, HurrayError *error) {
  if (bytes == NULL) {
    return hurray__fail(error, HURRAY_EINVAL, "hurray_dtype_storage_bytes: bytes is NULL");
  }
  const HurrayDTypeInfo *t = hurray_dtype_info(code);
  if (t == NULL) return hurray__fail(error, HURRAY_EDTYPE, "unknown dtype code %d", code);
  /* count = 8q + r, so ceil(count * bits / 8) = q * bits + ceil(r * bits / 8): exact, and it
   * overflows only when the result itself does not fit. */
  uint64_t whole = 0;
  uint64_t total = 0;
  uint64_t rest = ((count % 8) * t->bits + 7) / 8;
  if (hurray__mul_u64(count / 8, t->bits, &whole) || hurray__add_u64(whole, rest, &total)) {
    return hurray__fail(error, HURRAY_EOVERFLOW,
                        "%" PRIu64 " elements of %s take more than 2^64 - 1 bytes", count, t->name);
  }
  *bytes = total;
  return HURRAY_OK;
}
