/* test_convert.c -- hurray_convert between Hurray files, safetensors, .npy and .npz: golden
 * bytes written by hand for each direction, round trips of every dtype each format has
 * (zero-size, 0-d, strided and Fortran-order tensors included), metadata, what is refused and
 * why, options, progress, and that failed conversions leave nothing behind. The inputs'
 * malformations are in test_convert_inputs.c. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "file.h" /* the output layer's fault-injection hook */
#include "test_convert_helpers.h"

extern uint64_t hurray__zip64_threshold; /* internal: lowered to force ZIP64 records */

/* The ABI of the options struct (as tests/c/test_abi.c pins the others). */
#if UINTPTR_MAX == 0xFFFFFFFFFFFFFFFFu
_Static_assert(sizeof(HurrayConvertOptions) == 72, "sizeof HurrayConvertOptions");
_Static_assert(offsetof(HurrayConvertOptions, flags) == 4, "flags");
_Static_assert(offsetof(HurrayConvertOptions, alignment) == 8, "alignment");
_Static_assert(offsetof(HurrayConvertOptions, name) == 16, "name");
_Static_assert(offsetof(HurrayConvertOptions, progress) == 24, "progress");
_Static_assert(offsetof(HurrayConvertOptions, progress_context) == 32, "progress_context");
_Static_assert(offsetof(HurrayConvertOptions, max_shard_size) == 40, "max_shard_size");
_Static_assert(offsetof(HurrayConvertOptions, reserved) == 48, "reserved");
#endif
_Static_assert(HURRAY_FORMAT_AUTO == 0 && HURRAY_FORMAT_HURRAY == 1 &&
                   HURRAY_FORMAT_SAFETENSORS == 2 && HURRAY_FORMAT_NPY == 3 &&
                   HURRAY_FORMAT_NPZ == 4,
               "format numbers are forever");

static const float kF32[] = {1.0f, 2.0f};
static const int64_t kI64[] = {7};

/* ---- formats ------------------------------------------------------------------------------ */

static void formats_are_named_and_inferred(void **state) {
  (void)state;
  static const struct {
    const char *path;
    int format;
  } kCases[] = {{"a.hurray", HURRAY_FORMAT_HURRAY},
                {"dir.x/b.HRY", HURRAY_FORMAT_HURRAY},
                {"m.safetensors", HURRAY_FORMAT_SAFETENSORS},
                {"x.NPY", HURRAY_FORMAT_NPY},
                {"y.npz", HURRAY_FORMAT_NPZ}};
  for (size_t i = 0; i < sizeof kCases / sizeof kCases[0]; i++) {
    int format = -1;
    OK(hurray_format_from_path(kCases[i].path, &format, E));
    assert_int_equal(format, kCases[i].format);
  }
  HurrayError error = {0};
  int format = 0;
  assert_int_equal(hurray_format_from_path("model.bin", &format, &error), HURRAY_EINVAL);
  assert_non_null(strstr(error.message, "model.bin"));
  assert_int_equal(hurray_format_from_path(".npy", &format, NULL), HURRAY_EINVAL);
  assert_string_equal(hurray_format_name(HURRAY_FORMAT_SAFETENSORS), "safetensors");
  assert_string_equal(hurray_format_name(HURRAY_FORMAT_AUTO), "auto");
  assert_string_equal(hurray_format_name(HURRAY_FORMAT_GGUF), "gguf");
  assert_null(hurray_format_name(6));
}

/* ---- golden bytes ------------------------------------------------------------------------- */

/* The bytes safetensors' own writer produces for {"b": F32 [1, 2], "a": I64 [7]} with
 * metadata {"k": "v"}: metadata first, tensors by dtype rank (I64 before F32), compact JSON,
 * spaces up to a multiple of 8, data packed. */
static void safetensors_golden_output(void **state) {
  (void)state;
  HurrayMetaValue v = string_meta("v");
  static const char *const keys[] = {"k"};
  HurrayMetaValue meta = {.type = HURRAY_META_MAP, .count = 1, .keys = keys};
  meta.as.items = &v;
  Dense t[] = {{.name = "b",
                .dtype = HURRAY_DTYPE_FLOAT32,
                .ndim = 1,
                .shape = {2},
                .bytes = kF32,
                .size = 8},
               {.name = "a",
                .dtype = HURRAY_DTYPE_INT64,
                .ndim = 1,
                .shape = {1},
                .bytes = kI64,
                .size = 8}};
  write_hurray(path_of("golden.hurray"), t, 2, &meta);
  OK(hurray_convert(path_of("golden.hurray"), path_of("golden.safetensors"), NULL, E));
  static const char kHeader[] =
      "{\"__metadata__\":{\"k\":\"v\"},"
      "\"a\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}   ";
  uint8_t expected[8 + 136 + 16] = {0x88, 0, 0, 0, 0, 0, 0, 0};
  assert_int_equal(sizeof kHeader - 1, 136);
  memcpy(expected + 8, kHeader, 136);
  const uint8_t data[16] = {7, 0, 0, 0, 0, 0, 0, 0, 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40};
  memcpy(expected + 144, data, 16);
  size_t size = 0;
  uint8_t *bytes = file_contents(path_of("golden.safetensors"), &size);
  assert_int_equal(size, sizeof expected);
  assert_memory_equal(bytes, expected, sizeof expected);
  free(bytes);
}

/* A safetensors file written by hand: escapes, a surrogate pair, metadata after the tensors,
 * whitespace. */
static void safetensors_golden_input(void **state) {
  (void)state;
  static const char kJson[] =
      " { \"t\\u00e9\" : {\"shape\": [2], \"dtype\": \"F16\", \"data_offsets\": [0, 4]},\n"
      "   \"__metadata__\": {\"emoji\": \"\\ud83d\\ude00\", \"q\": \"a\\\"b\\\\c\\/\\n\"}}";
  size_t n = sizeof kJson - 1;
  uint8_t file[512] = {0};
  for (int i = 0; i < 8; i++) file[i] = (uint8_t)(n >> (8 * i));
  memcpy(file + 8, kJson, n);
  const uint8_t data[4] = {0x00, 0x3c, 0x00, 0x40}; /* float16 1.0, 2.0 */
  memcpy(file + 8 + n, data, 4);
  write_bytes(path_of("hand.safetensors"), file, 8 + n + 4);
  OK(hurray_convert(path_of("hand.safetensors"), path_of("hand.hurray"), NULL, E));
  uint8_t got[8];
  assert_int_equal(c_order_bytes(path_of("hand.hurray"), "t\xc3\xa9", got, sizeof got), 4);
  assert_memory_equal(got, data, 4);
  HurrayFileReader *r = NULL;
  HurrayMetaValue *meta = NULL;
  OK(hurray_file_reader_open(path_of("hand.hurray"), 0, &r, E));
  OK(hurray_file_reader_metadata(r, HURRAY_FILE_WHOLE, &meta, E));
  assert_int_equal(meta->count, 2);
  assert_string_equal(meta->keys[0], "emoji");
  assert_string_equal(meta->as.items[0].as.string, "\xf0\x9f\x98\x80"); /* U+1F600 */
  assert_string_equal(meta->as.items[1].as.string, "a\"b\\c/\n");
  hurray_meta_destroy(meta);
  hurray_file_reader_destroy(r);
}

/* A GGUF v3 file made by hand: key/value general.alignment (u32 32), tensor "q" of ggml type
 * Q8_0 with ne = [32, 2] (two blocks), then the data at the next multiple of 32. Read, written
 * as Hurray and written back as GGUF, it is the same file, byte for byte; its blocks dequantise
 * to d * q. */
static void gguf_round_trip_is_byte_identical(void **state) {
  (void)state;
  uint8_t file[256] = {0};
  size_t n = 0;
#define PUT(bytes, len) (memcpy(file + n, bytes, len), n += (len))
#define PUT_LE(value, width)                                                  \
  do {                                                                          \
    uint64_t v_ = (value);                                                      \
    for (int i_ = 0; i_ < (width); i_++) file[n++] = (uint8_t)(v_ >> (8 * i_)); \
  } while (0)
  PUT("GGUF", 4);
  PUT_LE(3, 4);  /* version */
  PUT_LE(1, 8);  /* tensors */
  PUT_LE(1, 8);  /* key/values */
  PUT_LE(17, 8);
  PUT("general.alignment", 17);
  PUT_LE(4, 4);  /* u32 */
  PUT_LE(32, 4);
  PUT_LE(1, 8);
  PUT("q", 1);
  PUT_LE(2, 4);  /* n_dims */
  PUT_LE(32, 8); /* ne[0] */
  PUT_LE(2, 8);  /* ne[1] */
  PUT_LE(8, 4);  /* Q8_0 */
  PUT_LE(0, 8);  /* offset */
  n = (n + 31) / 32 * 32;
  for (int b = 0; b < 2; b++) {
    PUT_LE(b == 0 ? 0x3C00 : 0xC000, 2); /* d = 1.0, -2.0 */
    for (int i = 0; i < 32; i++) file[n++] = (uint8_t)(i - 16);
  }
  n = (n + 31) / 32 * 32;
#undef PUT
#undef PUT_LE
  write_bytes(path_of("hand.gguf"), file, n);
  OK(hurray_convert(path_of("hand.gguf"), path_of("hand.hurray"), NULL, E));
  OK(hurray_convert(path_of("hand.hurray"), path_of("back.gguf"), NULL, E));
  FILE *f = fopen(path_of("back.gguf"), "rb");
  assert_non_null(f);
  uint8_t back[512];
  size_t got = fread(back, 1, sizeof back, f);
  fclose(f);
  assert_int_equal(got, n);
  assert_memory_equal(back, file, n);

  HurrayTensorContext *t = get_tensor(path_of("hand.hurray"), "q");
  assert_int_equal(t->tensor->dtype, HURRAY_DTYPE_Q8_0);
  assert_int_equal(t->tensor->shape[0], 2);
  assert_int_equal(t->tensor->shape[1], 34); /* bytes of a row: one block */
  float y[64];
  OK(hurray_dequantize(t->tensor, t->buffers, HURRAY_DTYPE_FLOAT32, y, sizeof y, E));
  for (int i = 0; i < 32; i++) {
    assert_true(y[i] == (float)(i - 16));
    assert_true(y[32 + i] == (float)(i - 16) * -2.0f);
  }
  assert_int_equal(hurray_dequantize(t->tensor, t->buffers, HURRAY_DTYPE_FLOAT32, y, 255, NULL),
                   HURRAY_EINVAL); /* 64 floats need 256 bytes */
  hurray_tensor_context_release(t);
}

/* numpy.save's bytes for a float32 [2, 3] array, and for Fortran order. */
static void npy_golden_output(void **state) {
  (void)state;
  const float values[6] = {0, 1, 2, 3, 4, 5};
  Dense t = {.name = "x",
             .dtype = HURRAY_DTYPE_FLOAT32,
             .ndim = 2,
             .shape = {2, 3},
             .bytes = values,
             .size = 24};
  write_hurray(path_of("x.hurray"), &t, 1, NULL);
  OK(hurray_convert(path_of("x.hurray"), path_of("x.npy"), NULL, E));
  static const char kDict[] = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  uint8_t expected[128 + 24];
  memcpy(expected, "\x93NUMPY\x01\x00\x76\x00", 10);
  memset(expected + 10, ' ', 117);
  memcpy(expected + 10, kDict, sizeof kDict - 1);
  expected[127] = '\n';
  memcpy(expected + 128, values, 24);
  size_t size = 0;
  uint8_t *bytes = file_contents(path_of("x.npy"), &size);
  assert_int_equal(size, sizeof expected);
  assert_memory_equal(bytes, expected, sizeof expected);
  free(bytes);

  /* The transpose, a Fortran-contiguous view: written as it is, fortran_order True, the
   * growth padding measured on the last extent (as numpy does). */
  static const int64_t strides[] = {1, 3};
  Dense f = {.name = "f",
             .dtype = HURRAY_DTYPE_FLOAT32,
             .ndim = 2,
             .shape = {3, 2},
             .strides = strides,
             .bytes = values,
             .size = 24};
  write_hurray(path_of("f.hurray"), &f, 1, NULL);
  OK(hurray_convert(path_of("f.hurray"), path_of("f.npy"), NULL, E));
  static const char kFortran[] = "{'descr': '<f4', 'fortran_order': True, 'shape': (3, 2), }";
  memset(expected + 10, ' ', 117);
  memcpy(expected + 10, kFortran, sizeof kFortran - 1);
  bytes = file_contents(path_of("f.npy"), &size);
  assert_int_equal(size, sizeof expected);
  assert_memory_equal(bytes, expected, sizeof expected);
  free(bytes);
  /* and back: strides kept, elements equal */
  OK(hurray_convert(path_of("f.npy"), path_of("f2.hurray"), NULL, E));
  HurrayTensorContext *c = get_tensor(path_of("f2.hurray"), "f");
  assert_non_null(c->tensor->parts[0].strides);
  assert_int_equal(c->tensor->parts[0].strides[1], 3);
  hurray_tensor_context_release(c);
  assert_true(same_dense(path_of("f.hurray"), path_of("f2.hurray"), "f"));
}

/* .npy files written by hand: versions 1.0, 2.0 and 3.0, double quotes, no trailing comma,
 * a big-endian int16 (byte-swapped on the way in), a 0-d array. */
/* The preamble of a .npy file of `version` whose header is `dict` (spaces and newline
 * included): magic, version, the header length in 2 or 4 bytes, the header. */
static size_t npy_preamble(uint8_t *out, int version, const char *dict) {
  size_t n = strlen(dict), at = 8;
  memcpy(out, "\x93NUMPY", 6);
  out[6] = (uint8_t)version;
  out[7] = 0;
  for (size_t i = 0; i < (version == 1 ? 2u : 4u); i++) out[at++] = (uint8_t)(n >> (8 * i));
  memcpy(out + at, dict, n);
  return at + n;
}

/* .npy files written by hand: versions 1.0, 2.0 and 3.0, double quotes, keys in any order,
 * no trailing comma, a big-endian int16 (byte-swapped on the way in), a 0-d array. */
static void npy_golden_input(void **state) {
  (void)state;
  static const struct {
    int version;
    const char *dict;
    uint8_t data[8];
    size_t data_len;
    uint8_t expected[8];
    uint8_t dtype;
    int32_t ndim;
  } kCases[] = {
      {1,
       "{'descr': '>i2', 'fortran_order': False, 'shape': (2,), }    \n",
       {0x01, 0x02, 0xff, 0xfe},
       4,
       {0x02, 0x01, 0xfe, 0xff},
       HURRAY_DTYPE_INT16,
       1},
      {2,
       "{\"descr\":\"|u1\",\"shape\":(),\"fortran_order\":False}\n",
       {0x2a},
       1,
       {0x2a},
       HURRAY_DTYPE_UINT8,
       0},
      {3,
       "{'descr':'<c8','fortran_order':False,'shape':(1,)}  \n",
       {1, 2, 3, 4, 5, 6, 7, 8},
       8,
       {1, 2, 3, 4, 5, 6, 7, 8},
       HURRAY_DTYPE_COMPLEX64,
       1},
      {1,
       "{'descr': '>c8', 'fortran_order': True, 'shape': (1, 1), }\n",
       {1, 2, 3, 4, 5, 6, 7, 8},
       8,
       {4, 3, 2, 1, 8, 7, 6, 5},
       HURRAY_DTYPE_COMPLEX64,
       2},
  };
  for (size_t i = 0; i < sizeof kCases / sizeof kCases[0]; i++) {
    uint8_t file[256];
    size_t n = npy_preamble(file, kCases[i].version, kCases[i].dict);
    memcpy(file + n, kCases[i].data, kCases[i].data_len);
    write_bytes(path_of("hand.npy"), file, n + kCases[i].data_len);
    OK(hurray_convert(path_of("hand.npy"), path_of("hand.hurray"), NULL, E));
    HurrayTensorContext *c = get_tensor(path_of("hand.hurray"), "hand"); /* the stem */
    assert_int_equal(c->tensor->dtype, kCases[i].dtype);
    assert_int_equal(c->tensor->ndim, kCases[i].ndim);
    hurray_tensor_context_release(c);
    uint8_t got[8];
    assert_int_equal(c_order_bytes(path_of("hand.hurray"), "hand", got, sizeof got),
                     kCases[i].data_len);
    assert_memory_equal(got, kCases[i].expected, kCases[i].data_len);
  }
  /* options->name names the array */
  HurrayConvertOptions o = {.name = "renamed"};
  OK(hurray_convert(path_of("hand.npy"), path_of("named.hurray"), &o, E));
  hurray_tensor_context_release(get_tensor(path_of("named.hurray"), "renamed"));
}

/* ---- other formats opened as readers (HURRAY_FILE_OPEN_FOREIGN) ---------------------------- */

/* Tensor `name` of `r`, got twice: whether both gets share their memory (a view of the
 * mapping) and that each starts at a multiple of 64 and holds `bytes`. */
static bool got_twice_shares(const HurrayFileReader *r, const char *name, const void *bytes,
                             size_t size, uint32_t context_flags) {
  uint32_t index = 0;
  OK(hurray_file_reader_find(r, name, &index, E));
  HurrayTensorContext *a = NULL, *b = NULL;
  OK(hurray_file_reader_get(r, index, HURRAY_VALIDATE_CONTENTS, &a, E));
  OK(hurray_file_reader_get(r, index, 0, &b, E));
  const HurrayBuffer *x = a->buffers->buffers[0], *y = b->buffers->buffers[0];
  assert_int_equal(a->flags, context_flags);
  assert_int_equal(x->desc.byte_size, size);
  assert_int_equal((uintptr_t)x->data % 64, 0);
  assert_int_equal(a->tensor->parts[0].byte_offset, 0);
  assert_memory_equal(x->data, bytes, size);
  bool shared = x->data == y->data;
  hurray_tensor_context_release(a);
  hurray_tensor_context_release(b);
  return shared;
}

static void other_formats_open_as_readers(void **state) {
  (void)state;
  static const float f32[3] = {1.0f, 2.0f, 3.0f};
  static const int8_t i8[5] = {1, -2, 3, -4, 5};
  const Dense tensors[] = {
      {.name = "f", .dtype = HURRAY_DTYPE_FLOAT32, .ndim = 1, .shape = {3}, .bytes = f32,
       .size = sizeof f32},
      {.name = "i", .dtype = HURRAY_DTYPE_INT8, .ndim = 2, .shape = {1, 5}, .bytes = i8,
       .size = sizeof i8},
  };
  write_hurray(path_of("two.hurray"), tensors, 2, NULL);
  HurrayConvertOptions aligned = {.alignment = 64};
  OK(hurray_convert(path_of("two.hurray"), path_of("two.safetensors"), &aligned, E));
  OK(hurray_convert(path_of("two.hurray"), path_of("two.npz"), NULL, E));
  HurrayConvertOptions one = {.name = "i"};
  OK(hurray_convert(path_of("two.hurray"), path_of("one.npy"), &one, E));
  /* Recognised by their bytes, not their names. */
  size_t size = 0;
  uint8_t *st = file_contents(path_of("two.safetensors"), &size);
  write_bytes(path_of("st.bin"), st, size);
  free(st);

  HurrayFileReader *r = NULL;
  HurrayError error = {0};
  assert_int_equal(hurray_file_reader_open(path_of("st.bin"), 0, &r, &error), HURRAY_EFORMAT);
  assert_non_null(strstr(error.message, "bad magic"));
  OK(hurray_file_reader_open(path_of("st.bin"), HURRAY_FILE_OPEN_FOREIGN, &r, E));
  HurrayFileInfo info;
  OK(hurray_file_reader_info(r, &info, E));
  assert_int_equal(info.format, HURRAY_FORMAT_SAFETENSORS);
  assert_int_equal(info.version_major, 0);
  assert_int_equal(info.alignment, 64);
  assert_int_equal(info.tensor_count, 2);
  assert_int_equal(info.data_bytes, sizeof f32 + sizeof i8);
  /* The data starts at a multiple of 64: float32 first (by rank), a view; int8 12 bytes on,
   * a copy. */
  assert_true(got_twice_shares(r, "f", f32, sizeof f32, HURRAY_BUFFER_READ_ONLY));
  assert_false(got_twice_shares(r, "i", i8, sizeof i8, HURRAY_BUFFER_READ_ONLY));
  HurrayTensorContext *rows = NULL;
  OK(hurray_file_reader_get_rows(r, 0, 1, 3, &rows, E));
  assert_int_equal(rows->tensor->shape[0], 2);
  const uint8_t *row_data = (const uint8_t *)rows->buffers->buffers[0]->data;
  assert_memory_equal(row_data + rows->tensor->parts[0].byte_offset, f32 + 1, 8);
  hurray_tensor_context_release(rows);
  assert_int_equal(hurray_file_reader_verify(r, HURRAY_FILE_WHOLE, NULL, NULL, &error),
                   HURRAY_EUNSUPPORTED);
  assert_non_null(strstr(error.message, "keeps no checksums"));
  HurrayMetaValue *meta = NULL;
  OK(hurray_file_reader_metadata(r, HURRAY_FILE_WHOLE, &meta, E));
  assert_int_equal(meta->count, 0);
  hurray_meta_destroy(meta);
  hurray_file_reader_destroy(r);

  /* PREAD: fresh writable copies, each get its own. */
  OK(hurray_file_reader_open(path_of("two.safetensors"),
                             HURRAY_FILE_OPEN_FOREIGN | HURRAY_FILE_OPEN_PREAD, &r, E));
  assert_false(got_twice_shares(r, "f", f32, sizeof f32, 0));
  hurray_file_reader_destroy(r);

  /* WRITABLE: the same view, writable (ADR-058); the copy is writable too. */
  OK(hurray_file_reader_open(path_of("two.safetensors"),
                             HURRAY_FILE_OPEN_FOREIGN | HURRAY_FILE_OPEN_WRITABLE, &r, E));
  assert_true(got_twice_shares(r, "f", f32, sizeof f32, 0));
  assert_false(got_twice_shares(r, "i", i8, sizeof i8, 0));
  hurray_file_reader_destroy(r);

  /* .npy: 64-byte preamble, a view named after the file's stem. */
  OK(hurray_file_reader_open(path_of("one.npy"), HURRAY_FILE_OPEN_FOREIGN, &r, E));
  OK(hurray_file_reader_info(r, &info, E));
  assert_int_equal(info.format, HURRAY_FORMAT_NPY);
  assert_true(got_twice_shares(r, "one", i8, sizeof i8, HURRAY_BUFFER_READ_ONLY));
  assert_int_equal(hurray_file_reader_verify(r, 0, NULL, NULL, NULL), HURRAY_EUNSUPPORTED);
  hurray_file_reader_destroy(r);

  /* .npz: CRC-32s verified; a flipped data byte is found by verify and by a copying get. */
  OK(hurray_file_reader_open(path_of("two.npz"), HURRAY_FILE_OPEN_FOREIGN, &r, E));
  OK(hurray_file_reader_info(r, &info, E));
  assert_int_equal(info.format, HURRAY_FORMAT_NPZ);
  OK(hurray_file_reader_verify(r, HURRAY_FILE_WHOLE, NULL, NULL, E));
  HurrayFileBufferInfo bi;
  OK(hurray_file_reader_buffer_info(r, 1, 0, &bi, E));
  bool view = got_twice_shares(r, "i", i8, sizeof i8, HURRAY_BUFFER_READ_ONLY);
  assert_int_equal(view, bi.offset % 64 == 0);
  hurray_file_reader_destroy(r);
  uint8_t *npz = file_contents(path_of("two.npz"), &size);
  npz[bi.offset + 1] ^= 0x40;
  write_bytes(path_of("bad.npz"), npz, size);
  free(npz);
  OK(hurray_file_reader_open(path_of("bad.npz"), HURRAY_FILE_OPEN_FOREIGN, &r, E));
  assert_int_equal(hurray_file_reader_verify(r, HURRAY_FILE_WHOLE, NULL, NULL, &error),
                   HURRAY_ECHECKSUM);
  assert_non_null(strstr(error.message, "'i'"));
  hurray_file_reader_destroy(r);

  /* Neither format: named as such; unknown flags refused. */
  write_bytes(path_of("junk.bin"), "junk bytes", 10);
  assert_int_equal(
      hurray_file_reader_open(path_of("junk.bin"), HURRAY_FILE_OPEN_FOREIGN, &r, &error),
      HURRAY_EFORMAT);
  assert_non_null(strstr(error.message, "safetensors, .npy, .npz or GGUF"));
  assert_int_equal(hurray_file_reader_open(path_of("two.npz"), 1u << 3, &r, NULL), HURRAY_EINVAL);
}

/* ---- round trips of every dtype ----------------------------------------------------------- */

typedef struct DtypeCase {
  uint8_t dtype;
  const char *name; /* the format's spelling */
} DtypeCase;

static const DtypeCase kSafetensorsDtypes[] = {
    {HURRAY_DTYPE_BOOL, "BOOL"},
    {HURRAY_DTYPE_FLOAT4_E2M1FN, "F4"},
    {HURRAY_DTYPE_FLOAT6_E2M3FN, "F6_E2M3"},
    {HURRAY_DTYPE_FLOAT6_E3M2FN, "F6_E3M2"},
    {HURRAY_DTYPE_UINT8, "U8"},
    {HURRAY_DTYPE_INT8, "I8"},
    {HURRAY_DTYPE_FLOAT8_E5M2, "F8_E5M2"},
    {HURRAY_DTYPE_FLOAT8_E4M3FN, "F8_E4M3"},
    {HURRAY_DTYPE_FLOAT8_E8M0FNU, "F8_E8M0"},
    {HURRAY_DTYPE_FLOAT8_E4M3FNUZ, "F8_E4M3FNUZ"},
    {HURRAY_DTYPE_FLOAT8_E5M2FNUZ, "F8_E5M2FNUZ"},
    {HURRAY_DTYPE_INT16, "I16"},
    {HURRAY_DTYPE_UINT16, "U16"},
    {HURRAY_DTYPE_FLOAT16, "F16"},
    {HURRAY_DTYPE_BFLOAT16, "BF16"},
    {HURRAY_DTYPE_INT32, "I32"},
    {HURRAY_DTYPE_UINT32, "U32"},
    {HURRAY_DTYPE_FLOAT32, "F32"},
    {HURRAY_DTYPE_COMPLEX64, "C64"},
    {HURRAY_DTYPE_FLOAT64, "F64"},
    {HURRAY_DTYPE_INT64, "I64"},
    {HURRAY_DTYPE_UINT64, "U64"},
};
enum { ST_COUNT = sizeof kSafetensorsDtypes / sizeof kSafetensorsDtypes[0] };

static const DtypeCase kNpyDtypes[] = {
    {HURRAY_DTYPE_BOOL, "|b1"},      {HURRAY_DTYPE_INT8, "|i1"},
    {HURRAY_DTYPE_UINT8, "|u1"},     {HURRAY_DTYPE_INT16, "<i2"},
    {HURRAY_DTYPE_INT32, "<i4"},     {HURRAY_DTYPE_INT64, "<i8"},
    {HURRAY_DTYPE_UINT16, "<u2"},    {HURRAY_DTYPE_UINT32, "<u4"},
    {HURRAY_DTYPE_UINT64, "<u8"},    {HURRAY_DTYPE_FLOAT16, "<f2"},
    {HURRAY_DTYPE_FLOAT32, "<f4"},   {HURRAY_DTYPE_FLOAT64, "<f8"},
    {HURRAY_DTYPE_COMPLEX64, "<c8"}, {HURRAY_DTYPE_COMPLEX128, "<c16"},
};
enum { NPY_COUNT = sizeof kNpyDtypes / sizeof kNpyDtypes[0] };

static uint8_t g_pattern[4096];

static const uint8_t *pattern(uint8_t dtype) {
  for (size_t i = 0; i < sizeof g_pattern; i++) {
    g_pattern[i] = dtype == HURRAY_DTYPE_BOOL ? (uint8_t)(i % 3 == 0) : (uint8_t)(i * 37 + dtype);
  }
  return g_pattern;
}

/* One [2, 4] tensor per dtype, named after the dtype, each with its own bytes. */
static void write_dtypes(const char *path, const DtypeCase *cases, size_t count, uint8_t *store) {
  Dense t[32];
  for (size_t i = 0; i < count; i++) {
    const HurrayDTypeInfo *info = hurray_dtype_info(cases[i].dtype);
    uint8_t *bytes = store + i * 128;
    memcpy(bytes, pattern(cases[i].dtype), 128);
    t[i] = (Dense){.name = info->name,
                   .dtype = cases[i].dtype,
                   .ndim = 2,
                   .shape = {2, 4},
                   .bytes = bytes,
                   .size = (8 * info->bits + 7) / 8};
  }
  write_hurray(path, t, count, NULL);
}

static void safetensors_round_trip_every_dtype(void **state) {
  (void)state;
  static uint8_t store[ST_COUNT * 128];
  write_dtypes(path_of("st.hurray"), kSafetensorsDtypes, ST_COUNT, store);
  OK(hurray_convert(path_of("st.hurray"), path_of("st.safetensors"), NULL, E));
  OK(hurray_convert(path_of("st.safetensors"), path_of("st2.hurray"), NULL, E));
  size_t size = 0;
  char *bytes = (char *)file_contents(path_of("st.safetensors"), &size);
  const char *previous = bytes + 8;
  for (size_t i = ST_COUNT; i-- > 0;) { /* in the file by rank, descending */
    char entry[128];
    snprintf(entry, sizeof entry, "\"%s\":{\"dtype\":\"%s\",\"shape\":[2,4]",
             hurray_dtype_info(kSafetensorsDtypes[i].dtype)->name, kSafetensorsDtypes[i].name);
    const char *at = strstr(bytes + 8, entry);
    assert_non_null(at);
    assert_true(at > previous);
    previous = at;
    assert_true(same_dense(path_of("st.hurray"), path_of("st2.hurray"),
                           hurray_dtype_info(kSafetensorsDtypes[i].dtype)->name));
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = n << 8 | (uint8_t)bytes[i];
  assert_int_equal(n % 8, 0);
  free(bytes);
  /* safetensors -> safetensors reproduces the file */
  OK(hurray_convert(path_of("st.safetensors"), path_of("st2.safetensors"), NULL, E));
  size_t size2 = 0;
  uint8_t *a = file_contents(path_of("st.safetensors"), &size),
          *b = file_contents(path_of("st2.safetensors"), &size2);
  assert_int_equal(size, size2);
  assert_memory_equal(a, b, size);
  free(a);
  free(b);
}

static void npy_and_npz_round_trip_every_dtype(void **state) {
  (void)state;
  static uint8_t store[NPY_COUNT * 128];
  write_dtypes(path_of("np.hurray"), kNpyDtypes, NPY_COUNT, store);
  for (size_t i = 0; i < NPY_COUNT; i++) {
    const char *name = hurray_dtype_info(kNpyDtypes[i].dtype)->name;
    HurrayConvertOptions o = {.name = name};
    OK(hurray_convert(path_of("np.hurray"), path_of("one.npy"), &o, E));
    size_t size = 0;
    char *bytes = (char *)file_contents(path_of("one.npy"), &size);
    char descr[32];
    snprintf(descr, sizeof descr, "'descr': '%s'", kNpyDtypes[i].name);
    assert_non_null(strstr(bytes + 10, descr));
    free(bytes);
    OK(hurray_convert(path_of("one.npy"), path_of("one.hurray"), &o, E));
    assert_true(same_dense(path_of("np.hurray"), path_of("one.hurray"), name));
  }
  OK(hurray_convert(path_of("np.hurray"), path_of("all.npz"), NULL, E));
  OK(hurray_convert(path_of("all.npz"), path_of("all.hurray"), NULL, E));
  for (size_t i = 0; i < NPY_COUNT; i++) {
    assert_true(same_dense(path_of("np.hurray"), path_of("all.hurray"),
                           hurray_dtype_info(kNpyDtypes[i].dtype)->name));
  }
  /* The same with ZIP64 records everywhere (as for members past 4 GiB). */
  hurray__zip64_threshold = 0;
  OK(hurray_convert(path_of("np.hurray"), path_of("all64.npz"), NULL, E));
  hurray__zip64_threshold = 0xFFFFFFFFu;
  size_t size = 0;
  uint8_t *bytes = file_contents(path_of("all64.npz"), &size);
  assert_true(size > 98);
  assert_memory_equal(bytes + size - 22 - 20, "PK\x06\x07", 4); /* the ZIP64 locator */
  free(bytes);
  OK(hurray_convert(path_of("all64.npz"), path_of("all64.hurray"), NULL, E));
  for (size_t i = 0; i < NPY_COUNT; i++) {
    assert_true(same_dense(path_of("np.hurray"), path_of("all64.hurray"),
                           hurray_dtype_info(kNpyDtypes[i].dtype)->name));
  }
}

/* Zero-size and 0-d tensors through every format. */
static void empty_and_scalar_tensors(void **state) {
  (void)state;
  const double scalar = 2.5;
  Dense t[] = {
      {.name = "empty",
       .dtype = HURRAY_DTYPE_FLOAT32,
       .ndim = 2,
       .shape = {0, 3},
       .bytes = NULL,
       .size = 0},
      {.name = "scalar", .dtype = HURRAY_DTYPE_FLOAT64, .ndim = 0, .bytes = &scalar, .size = 8}};
  write_hurray(path_of("es.hurray"), t, 2, NULL);
  static const char *const kOut[] = {"es.safetensors", "es.npz"};
  for (size_t i = 0; i < 2; i++) {
    OK(hurray_convert(path_of("es.hurray"), path_of(kOut[i]), NULL, E));
    OK(hurray_convert(path_of(kOut[i]), path_of("es2.hurray"), NULL, E));
    assert_true(same_dense(path_of("es.hurray"), path_of("es2.hurray"), "empty"));
    assert_true(same_dense(path_of("es.hurray"), path_of("es2.hurray"), "scalar"));
  }
  for (size_t i = 0; i < 2; i++) {
    HurrayConvertOptions o = {.name = t[i].name};
    OK(hurray_convert(path_of("es.hurray"), path_of("es.npy"), &o, E));
    OK(hurray_convert(path_of("es.npy"), path_of("es3.hurray"), &o, E));
    assert_true(same_dense(path_of("es.hurray"), path_of("es3.hurray"), t[i].name));
  }
  size_t size = 0;
  char *bytes = (char *)file_contents(path_of("es.npy"), &size);
  assert_non_null(strstr(bytes + 10, "'shape': (), }"));
  free(bytes);
}

/* Strided tensors: kept in Hurray outputs, Fortran order kept in .npy, gathered into C order
 * where the output has no strides (safetensors, and .npy for other strides). */
static void strided_tensors_are_gathered_or_kept(void **state) {
  (void)state;
  Sample strided = sample_strided(), negative = sample_negative();
  HurrayFileWriter *w = NULL;
  OK(hurray_file_writer_create(path_of("s.hurray"), NULL, &w, E));
  OK(hurray_file_writer_add(w, strided.name, &strided.desc, strided.list, NULL, E));
  OK(hurray_file_writer_add(w, negative.name, &negative.desc, negative.list, NULL, E));
  OK(hurray_file_writer_finish(w, E));
  hurray_file_writer_destroy(w);
  sample_free(&strided);
  sample_free(&negative);
  uint8_t expected[64], got[64];
  size_t n_strided = c_order_bytes(path_of("s.hurray"), "strided", expected, sizeof expected);
  OK(hurray_convert(path_of("s.hurray"), path_of("s.safetensors"), NULL, E));
  OK(hurray_convert(path_of("s.safetensors"), path_of("s2.hurray"), NULL, E));
  assert_true(same_dense(path_of("s.hurray"), path_of("s2.hurray"), "strided"));
  assert_true(same_dense(path_of("s.hurray"), path_of("s2.hurray"), "negative"));
  HurrayTensorContext *c = get_tensor(path_of("s2.hurray"), "negative");
  assert_null(c->tensor->parts[0].strides); /* gathered: C order */
  hurray_tensor_context_release(c);
  assert_int_equal(c_order_bytes(path_of("s2.hurray"), "strided", got, sizeof got), n_strided);
  assert_memory_equal(got, expected, n_strided);
  OK(hurray_convert(path_of("s.hurray"), path_of("s.npz"), NULL, E));
  OK(hurray_convert(path_of("s.npz"), path_of("s3.hurray"), NULL, E));
  assert_true(same_dense(path_of("s.hurray"), path_of("s3.hurray"), "negative"));
  /* Hurray -> Hurray keeps strides exactly */
  OK(hurray_convert(path_of("s.hurray"), path_of("s4.hurray"), NULL, E));
  c = get_tensor(path_of("s4.hurray"), "negative");
  assert_int_equal(c->tensor->parts[0].strides[0], -2);
  hurray_tensor_context_release(c);
}

/* A Fortran-order .npz member converted to safetensors is transposed into C order. */
static void fortran_order_to_safetensors(void **state) {
  (void)state;
  const int32_t values[6] = {0, 1, 2, 3, 4, 5};
  static const int64_t strides[] = {1, 2};
  Dense f = {.name = "f",
             .dtype = HURRAY_DTYPE_INT32,
             .ndim = 2,
             .shape = {2, 3},
             .strides = strides,
             .bytes = values,
             .size = 24};
  write_hurray(path_of("fo.hurray"), &f, 1, NULL);
  OK(hurray_convert(path_of("fo.hurray"), path_of("fo.npz"), NULL, E));
  OK(hurray_convert(path_of("fo.npz"), path_of("fo.safetensors"), NULL, E));
  size_t size = 0;
  uint8_t *bytes = file_contents(path_of("fo.safetensors"), &size);
  const int32_t c_order[6] = {0, 2, 4, 1, 3, 5};
  assert_memory_equal(bytes + size - 24, c_order, 24);
  free(bytes);
}

/* ---- metadata ----------------------------------------------------------------------------- */

static void metadata_maps_or_is_refused(void **state) {
  (void)state;
  HurrayMetaValue items[3] = {
      string_meta("text"), {.type = HURRAY_META_INT64}, {.type = HURRAY_META_FLOAT64}};
  items[1].as.int64 = -12;
  items[2].as.float64 = 0.1;
  static const char *const keys[] = {"a", "n", "x"};
  HurrayMetaValue meta = {.type = HURRAY_META_MAP, .count = 3, .keys = keys};
  meta.as.items = items;
  Dense t = {
      .name = "t", .dtype = HURRAY_DTYPE_UINT8, .ndim = 1, .shape = {2}, .bytes = "ab", .size = 2};
  write_hurray(path_of("meta.hurray"), &t, 1, &meta);
  CONVERT_FAILS(path_of("meta.hurray"), path_of("meta.safetensors"), NULL, HURRAY_EUNSUPPORTED,
                "file metadata key 'n' holds a int64");
  HurrayConvertOptions json = {.flags = HURRAY_CONVERT_METADATA_JSON};
  OK(hurray_convert(path_of("meta.hurray"), path_of("meta.safetensors"), &json, E));
  size_t size = 0;
  char *bytes = (char *)file_contents(path_of("meta.safetensors"), &size);
  assert_non_null(
      strstr(bytes + 8, "{\"__metadata__\":{\"a\":\"text\",\"n\":\"-12\",\"x\":\"0.1\"},"));
  free(bytes);
  /* .npy and .npz have no metadata: refused unless dropped */
  CONVERT_FAILS(path_of("meta.hurray"), path_of("meta.npz"), NULL, HURRAY_EUNSUPPORTED,
                "file metadata, which npz cannot hold");
  CONVERT_FAILS(path_of("meta.hurray"), path_of("meta.npy"), NULL, HURRAY_EUNSUPPORTED,
                "file metadata, which npy cannot hold");
  HurrayConvertOptions drop = {.flags = HURRAY_CONVERT_DROP_METADATA};
  OK(hurray_convert(path_of("meta.hurray"), path_of("meta.npz"), &drop, E));
  /* per-tensor metadata has no place in safetensors */
  HurrayMetaValue note = string_meta("n");
  static const char *const note_keys[] = {"note"};
  HurrayMetaValue tensor_meta = {.type = HURRAY_META_MAP, .count = 1, .keys = note_keys};
  tensor_meta.as.items = &note;
  t.metadata = &tensor_meta;
  write_hurray(path_of("tmeta.hurray"), &t, 1, NULL);
  CONVERT_FAILS(path_of("tmeta.hurray"), path_of("tmeta.safetensors"), NULL, HURRAY_EUNSUPPORTED,
                "tensor 't' has metadata of its own");
  OK(hurray_convert(path_of("tmeta.hurray"), path_of("tmeta.safetensors"), &drop, E));
  /* Hurray -> Hurray keeps all of it */
  OK(hurray_convert(path_of("tmeta.hurray"), path_of("tmeta2.hurray"), NULL, E));
  HurrayFileReader *r = NULL;
  HurrayMetaValue *m = NULL;
  OK(hurray_file_reader_open(path_of("tmeta2.hurray"), 0, &r, E));
  OK(hurray_file_reader_metadata(r, 0, &m, E));
  assert_int_equal(m->count, 1);
  hurray_meta_destroy(m);
  hurray_file_reader_destroy(r);
}

/* ---- refusals ----------------------------------------------------------------------------- */

static void what_an_output_cannot_hold_is_refused(void **state) {
  (void)state;
  static const struct {
    size_t sample;
    const char *text;
  } kLayouts[] = {{6, "'per_channel' is a per_channel tensor"},
                  {7, "'block' is a block tensor"},
                  {8, "'sparse_coo' is a sparse_coo tensor"},
                  {9, "'sparse_csr' is a sparse_csr tensor"},
                  {10, "'paged' is a paged tensor"},
                  {11, "'composite' is a composite tensor"},
                  {5, "'int4' is int4, which"}};
  static const char *const kOutputs[] = {"q.safetensors", "q.npy", "q.npz"};
  for (size_t i = 0; i < sizeof kLayouts / sizeof kLayouts[0]; i++) {
    Sample s = kSamples[kLayouts[i].sample]();
    HurrayFileWriter *w = NULL;
    OK(hurray_file_writer_create(path_of("q.hurray"), NULL, &w, E));
    OK(hurray_file_writer_add(w, s.name, &s.desc, s.list, NULL, E));
    OK(hurray_file_writer_finish(w, E));
    hurray_file_writer_destroy(w);
    sample_free(&s);
    for (size_t k = 0; k < 3; k++) {
      CONVERT_FAILS(path_of("q.hurray"), path_of(kOutputs[k]), NULL, HURRAY_EUNSUPPORTED,
                    kLayouts[i].text);
    }
    OK(hurray_convert(path_of("q.hurray"), path_of("q2.hurray"), NULL, E)); /* Hurray holds all */
  }
  /* dtypes a format lacks */
  const uint8_t bytes[8] = {0};
  Dense e3m4 = {.name = "e3m4",
                .dtype = HURRAY_DTYPE_FLOAT8_E3M4,
                .ndim = 1,
                .shape = {2},
                .bytes = bytes,
                .size = 2};
  write_hurray(path_of("d.hurray"), &e3m4, 1, NULL);
  CONVERT_FAILS(path_of("d.hurray"), path_of("d.safetensors"), NULL, HURRAY_EUNSUPPORTED,
                "tensor 'e3m4' is float8_e3m4, which safetensors has no dtype for");
  Dense bf16 = {.name = "bf",
                .dtype = HURRAY_DTYPE_BFLOAT16,
                .ndim = 1,
                .shape = {2},
                .bytes = bytes,
                .size = 4};
  write_hurray(path_of("d.hurray"), &bf16, 1, NULL);
  CONVERT_FAILS(path_of("d.hurray"), path_of("d.npy"), NULL, HURRAY_EUNSUPPORTED,
                "tensor 'bf' is bfloat16, which npy has no dtype for");
  Dense f4 = {.name = "f4",
              .dtype = HURRAY_DTYPE_FLOAT4_E2M1FN,
              .ndim = 1,
              .shape = {3},
              .bytes = bytes,
              .size = 2};
  write_hurray(path_of("d.hurray"), &f4, 1, NULL);
  CONVERT_FAILS(path_of("d.hurray"), path_of("d.safetensors"), NULL, HURRAY_EUNSUPPORTED,
                "not a whole number of bytes");
}

static void npy_output_needs_one_tensor(void **state) {
  (void)state;
  Dense t[] = {{.name = "a",
                .dtype = HURRAY_DTYPE_FLOAT32,
                .ndim = 1,
                .shape = {2},
                .bytes = kF32,
                .size = 8},
               {.name = "b",
                .dtype = HURRAY_DTYPE_INT64,
                .ndim = 1,
                .shape = {1},
                .bytes = kI64,
                .size = 8}};
  write_hurray(path_of("two.hurray"), t, 2, NULL);
  CONVERT_FAILS(path_of("two.hurray"), path_of("two.npy"), NULL, HURRAY_EINVAL,
                "holds 2 tensors: choose one by name");
  HurrayConvertOptions o = {.name = "c"};
  CONVERT_FAILS(path_of("two.hurray"), path_of("two.npy"), &o, HURRAY_EINVAL,
                "no tensor named 'c'");
  o.name = "b";
  OK(hurray_convert(path_of("two.hurray"), path_of("two.npy"), &o, E));
  OK(hurray_convert(path_of("two.npy"), path_of("b.hurray"), NULL, E)); /* named "two" */
  hurray_tensor_context_release(get_tensor(path_of("b.hurray"), "two"));
}

/* ---- options, progress, atomicity --------------------------------------------------------- */

static void options_are_checked(void **state) {
  (void)state;
  Dense t = {.name = "a",
             .dtype = HURRAY_DTYPE_FLOAT32,
             .ndim = 1,
             .shape = {2},
             .bytes = kF32,
             .size = 8};
  write_hurray(path_of("o.hurray"), &t, 1, NULL);
  HurrayConvertOptions o = {.reserved1 = 1};
  CONVERT_FAILS(path_of("o.hurray"), path_of("o.npz"), &o, HURRAY_EINVAL, "reserved");
  o = (HurrayConvertOptions){.flags = 1u << 7};
  CONVERT_FAILS(path_of("o.hurray"), path_of("o.npz"), &o, HURRAY_EINVAL, "unknown bits");
  o = (HurrayConvertOptions){.output_format = 9};
  CONVERT_FAILS(path_of("o.hurray"), path_of("o.npz"), &o, HURRAY_EINVAL, "unknown format 9");
  o = (HurrayConvertOptions){.alignment = 64};
  CONVERT_FAILS(path_of("o.hurray"), path_of("o.npz"), &o, HURRAY_EINVAL, "alignment applies");
  o = (HurrayConvertOptions){.alignment = 100};
  CONVERT_FAILS(path_of("o.hurray"), path_of("o.safetensors"), &o, HURRAY_EALIGN, "power of two");
  CONVERT_FAILS(path_of("o.hurray"), path_of("o.hurray2"), NULL, HURRAY_EINVAL,
                "cannot tell the format");
  CONVERT_FAILS(path_of("missing.npy"), path_of("o.hurray"), NULL, HURRAY_EIO, "No such file");
  assert_int_equal(hurray_convert(NULL, path_of("o.hurray"), NULL, NULL), HURRAY_EINVAL);
  /* alignment of a Hurray output */
  o = (HurrayConvertOptions){.alignment = 4096};
  OK(hurray_convert(path_of("o.hurray"), path_of("o4k.hurray"), &o, E));
  HurrayFileReader *r = NULL;
  HurrayFileInfo info;
  OK(hurray_file_reader_open(path_of("o4k.hurray"), 0, &r, E));
  OK(hurray_file_reader_info(r, &info, E));
  assert_int_equal(info.alignment, 4096);
  hurray_file_reader_destroy(r);
  /* alignment of a safetensors output: the data starts at a multiple of it */
  o = (HurrayConvertOptions){.alignment = 4096};
  OK(hurray_convert(path_of("o.hurray"), path_of("o.safetensors"), &o, E));
  size_t size = 0;
  uint8_t *bytes = file_contents(path_of("o.safetensors"), &size);
  assert_int_equal(size, 4096 + 8);
  assert_int_equal(bytes[0] + 256 * bytes[1] + 8, 4096);
  free(bytes);
  OK(hurray_convert(path_of("o.safetensors"), path_of("o2.hurray"), NULL, E));
  /* explicit formats override extensions; unknown extensions of inputs are sniffed */
  o = (HurrayConvertOptions){.output_format = HURRAY_FORMAT_NPZ};
  OK(hurray_convert(path_of("o.hurray"), path_of("o.zip"), &o, E));
  OK(hurray_convert(path_of("o.zip"), path_of("o3.hurray"), NULL, E));
  OK(hurray_convert(path_of("o.safetensors"), path_of("copy"),
                    &(HurrayConvertOptions){.output_format = HURRAY_FORMAT_NPY}, E));
  OK(hurray_convert(path_of("copy"), path_of("o5.hurray"), &(HurrayConvertOptions){.name = "a"},
                    E));
  assert_true(same_dense(path_of("o.hurray"), path_of("o5.hurray"), "a"));
  /* converting a file onto itself replaces it */
  o = (HurrayConvertOptions){.alignment = 128};
  OK(hurray_convert(path_of("o.hurray"), path_of("o.hurray"), &o, E));
  OK(hurray_file_reader_open(path_of("o.hurray"), 0, &r, E));
  OK(hurray_file_reader_info(r, &info, E));
  assert_int_equal(info.alignment, 128);
  hurray_file_reader_destroy(r);
}

/* HURRAY_CONVERT_NOT_DURABLE, for every output format: no fsync (the hook set on it never
 * fires) and the same atomic replace (a failing rename leaves the previous file and no
 * temporary). */
static void not_durable_outputs_skip_only_the_fsyncs(void **state) {
  (void)state;
  Dense t = {.name = "a",
             .dtype = HURRAY_DTYPE_FLOAT32,
             .ndim = 1,
             .shape = {2},
             .bytes = kF32,
             .size = 8};
  write_hurray(path_of("nd.hurray"), &t, 1, NULL);
  static const char *const kOut[] = {"nd2.hurray", "nd.safetensors", "nd.npy", "nd.npz"};
  const HurrayConvertOptions o = {.flags = HURRAY_CONVERT_NOT_DURABLE};
  for (size_t i = 0; i < sizeof kOut / sizeof kOut[0]; i++) {
    const char *out = path_of(kOut[i]);
    hurray__output_fault = (FileOutputFault){OUTPUT_STEP_SYNC, EIO};
    OK(hurray_convert(path_of("nd.hurray"), out, &o, E));
    assert_int_equal(hurray__output_fault.step, OUTPUT_STEP_SYNC); /* never reached */
    hurray__output_fault = (FileOutputFault){OUTPUT_STEP_SYNC_DIRECTORY, EIO};
    OK(hurray_convert(path_of("nd.hurray"), out, &o, E));
    assert_int_equal(hurray__output_fault.step, OUTPUT_STEP_SYNC_DIRECTORY);
    hurray__output_fault = (FileOutputFault){OUTPUT_STEP_RENAME, ENOSPC};
    /* The same bytes stay at `out`, and no temporary (CONVERT_FAILS checks both). */
    CONVERT_FAILS(path_of("nd.hurray"), out, &o, HURRAY_EIO, "cannot rename into place");
    assert_int_equal(hurray__output_fault.step, OUTPUT_STEP_NONE); /* it fired */
  }
  /* The default is durable: the fsync is reached (and fails here, through the hook). */
  hurray__output_fault = (FileOutputFault){OUTPUT_STEP_SYNC, EIO};
  CONVERT_FAILS(path_of("nd.hurray"), path_of("nd3.hurray"), NULL, HURRAY_EIO, "cannot sync");
  assert_int_equal(hurray__output_fault.step, OUTPUT_STEP_NONE);
}

typedef struct Seen {
  int calls;
  uint64_t done, total;
  bool monotone;
} Seen;

static void record_progress(void *context, uint64_t done, uint64_t total) {
  Seen *s = context;
  s->monotone = s->monotone && done >= s->done && done <= total;
  s->calls++;
  s->done = done;
  s->total = total;
}

static void progress_is_reported(void **state) {
  (void)state;
  static uint8_t big[3 << 20];
  for (size_t i = 0; i < sizeof big; i++) big[i] = (uint8_t)i;
  Dense t[] = {{.name = "big",
                .dtype = HURRAY_DTYPE_UINT8,
                .ndim = 1,
                .shape = {sizeof big},
                .bytes = big,
                .size = sizeof big},
               {.name = "a",
                .dtype = HURRAY_DTYPE_FLOAT32,
                .ndim = 1,
                .shape = {2},
                .bytes = kF32,
                .size = 8}};
  write_hurray(path_of("p.hurray"), t, 2, NULL);
  static const char *const kOut[] = {"p.safetensors", "p.npz", "p2.hurray"};
  for (size_t i = 0; i < 3; i++) {
    Seen seen = {.monotone = true};
    HurrayConvertOptions o = {.progress = record_progress, .progress_context = &seen};
    OK(hurray_convert(path_of(i < 2 ? "p.hurray" : "p.safetensors"), path_of(kOut[i]), &o, E));
    assert_true(seen.calls >= 3); /* the start, and after each tensor */
    assert_true(seen.monotone);
    assert_int_equal(seen.done, seen.total);
    assert_true(seen.total >= sizeof big + 8);
  }
}

/* Truncates the input (the context) to 100 bytes when the conversion begins. */
static void truncate_input(void *context, uint64_t done, uint64_t total) {
  (void)total;
  if (done == 0) assert_int_equal(truncate(context, 100), 0);
}

/* An input that shrinks under the conversion's mapping: a clear error (the kernel's copy of the
 * lost pages fails), not "Bad address" and not SIGBUS; nothing is left behind. */
static void an_input_that_shrinks_is_a_clear_error(void **state) {
  (void)state;
  static uint8_t big[3 << 20];
  for (size_t i = 0; i < sizeof big; i++) big[i] = (uint8_t)(i * 13);
  Dense t = {.name = "big",
             .dtype = HURRAY_DTYPE_UINT8,
             .ndim = 1,
             .shape = {sizeof big},
             .bytes = big,
             .size = sizeof big};
  write_hurray(path_of("shrink.hurray"), &t, 1, NULL);
  static const char *const kOut[] = {"shrunk.hurray", "shrunk.npy", "shrunk.safetensors"};
  for (size_t i = 0; i < 3; i++) {
    OK(hurray_convert(path_of("shrink.hurray"), path_of("shrink.safetensors"), NULL, E));
    HurrayConvertOptions o = {.progress = truncate_input,
                              .progress_context = path_of("shrink.safetensors")};
    HurrayError error = {0};
    assert_int_equal(hurray_convert(path_of("shrink.safetensors"), path_of(kOut[i]), &o, &error),
                     HURRAY_EIO);
    assert_non_null(strstr(error.message, "the file shrank"));
    assert_false(exists(path_of(kOut[i])));
    assert_int_equal(temporaries(), 0);
  }
}

/* Tensors of several 4 MiB read chunks stream through the read-ahead thread (a chunk is read
 * while the one before it is written): every output holds the bytes whole and in order, the
 * Hurray file's checksum (hashed while written, on the output's thread) verifies, and a Hurray
 * input's checksum is checked across its chunks. */
static void tensors_of_many_chunks_convert_whole(void **state) {
  (void)state;
  size_t size = (9u << 20) + 123;
  uint8_t *data = malloc(size), *back = malloc(size);
  assert_non_null(data);
  assert_non_null(back);
  for (size_t i = 0; i < size; i++) data[i] = (uint8_t)(i * 31 + (i >> 20));
  Dense t = {.name = "big", .dtype = HURRAY_DTYPE_UINT8, .ndim = 1, .shape = {(int64_t)size},
             .bytes = data, .size = size};
  write_hurray(path_of("many.hurray"), &t, 1, NULL);
  static const char *const kChain[] = {"many.safetensors", "many2.hurray", "many.npy",
                                       "many3.hurray", "many.npz", "many4.hurray"};
  /* the name each Hurray file gives it: a .npy input's one array is named after the file */
  static const char *const kName[] = {NULL, "big", NULL, "many", NULL, "many"};
  const char *from = path_of("many.hurray");
  char previous[4096];
  for (size_t i = 0; i < sizeof kChain / sizeof *kChain; i++) {
    OK(hurray_convert(from, path_of(kChain[i]), NULL, E));
    snprintf(previous, sizeof previous, "%s", path_of(kChain[i]));
    from = previous;
    if (strstr(kChain[i], ".hurray") != NULL) { /* get_tensor verifies the checksum */
      memset(back, 0, size);
      assert_int_equal(c_order_bytes(previous, kName[i], back, size), size);
      assert_memory_equal(back, data, size);
    }
  }
  free(back);
  free(data);
}

/* The input (context: a ShrinkTo) truncated to `size` bytes when the conversion begins. */
typedef struct ShrinkTo {
  const char *path;
  off_t size;
} ShrinkTo;

static void shrink_input(void *context, uint64_t done, uint64_t total) {
  (void)total;
  const ShrinkTo *to = context;
  if (done == 0) assert_int_equal(truncate(to->path, to->size), 0);
}

/* An input that shrinks past its first chunk: the chunk the read-ahead thread reads is short,
 * and its error is the conversion's, HURRAY_EIO saying the file shrank; nothing is left. */
static void a_shrink_seen_by_the_read_ahead_is_a_clear_error(void **state) {
  (void)state;
  size_t size = 9u << 20;
  uint8_t *data = malloc(size);
  assert_non_null(data);
  for (size_t i = 0; i < size; i++) data[i] = (uint8_t)(i * 7);
  Dense t = {.name = "big", .dtype = HURRAY_DTYPE_UINT8, .ndim = 1, .shape = {(int64_t)size},
             .bytes = data, .size = size};
  static const char *const kInputs[] = {"ahead.hurray", "ahead.safetensors"};
  static const char *const kOut[] = {"ahead-out.hurray", "ahead-out.npy", "ahead-out.safetensors"};
  for (size_t i = 0; i < 2; i++) {
    for (size_t j = 0; j < 3; j++) {
      write_hurray(path_of("ahead.hurray"), &t, 1, NULL);
      OK(hurray_convert(path_of("ahead.hurray"), path_of("ahead.safetensors"), NULL, E));
      ShrinkTo to = {path_of(kInputs[i]), (off_t)(6u << 20)}; /* the first chunk is whole */
      HurrayConvertOptions o = {.progress = shrink_input, .progress_context = &to};
      HurrayError error = {0};
      assert_int_equal(hurray_convert(to.path, path_of(kOut[j]), &o, &error), HURRAY_EIO);
      assert_non_null(strstr(error.message, "the file shrank"));
      assert_false(exists(path_of(kOut[j])));
      assert_int_equal(temporaries(), 0);
    }
  }
  free(data);
}

/* Converts `input` to `output` in a child process, truncating the input as the conversion
 * begins: 0 when the child got HURRAY_EIO saying the file shrank, 1 for any other result, 128
 * plus the signal that killed it. */
static int convert_shrinking(const char *input, const char *output) {
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    signal(SIGBUS, SIG_DFL); /* not the test runner's handlers: the child dies as it would */
    signal(SIGSEGV, SIG_DFL);
    HurrayConvertOptions o = {.progress = truncate_input, .progress_context = (void *)input};
    HurrayError error = {0};
    int status = hurray_convert(input, output, &o, &error);
    _exit(status == HURRAY_EIO && strstr(error.message, "the file shrank") != NULL ? 0 : 1);
  }
  int wstatus = 0;
  assert_int_equal(waitpid(pid, &wstatus, 0), pid);
  return WIFSIGNALED(wstatus) ? 128 + WTERMSIG(wstatus) : WEXITSTATUS(wstatus);
}

/* Inputs read from user space shrink under the conversion: small tensors (copied, not handed
 * to write()), Hurray buffers and .npz members (hashed or CRC-checked on the way), strided
 * ones (gathered out of order). Each
 * is HURRAY_EIO saying the file shrank, not SIGBUS, and leaves no output. */
static void small_and_hashed_inputs_that_shrink_are_a_clear_error(void **state) {
  (void)state;
  static uint8_t data[64 << 10];
  for (size_t i = 0; i < sizeof data; i++) data[i] = (uint8_t)(i * 29);
  static const int64_t kFortran[] = {1, 256};
  Dense t[] = {{.name = "small",
                .dtype = HURRAY_DTYPE_UINT8,
                .ndim = 1,
                .shape = {sizeof data},
                .bytes = data,
                .size = sizeof data},
               {.name = "strided",
                .dtype = HURRAY_DTYPE_UINT8,
                .ndim = 2,
                .shape = {256, sizeof data / 256},
                .strides = kFortran,
                .bytes = data,
                .size = sizeof data}};
  static const char *const kInputs[] = {"small.hurray", "small.safetensors", "small.npz",
                                        "strided.hurray", "strided.npy", "strided.npz"};
  static const char *const kOut[] = {"out.hurray", "out.npy", "out.safetensors", "out.npz"};
  for (size_t i = 0; i < 6; i++) {
    for (size_t j = 0; j < 4; j++) {
      write_hurray(path_of("small.hurray"), &t[0], 1, NULL);
      write_hurray(path_of("strided.hurray"), &t[1], 1, NULL);
      OK(hurray_convert(path_of("small.hurray"), path_of("small.safetensors"), NULL, E));
      OK(hurray_convert(path_of("small.hurray"), path_of("small.npz"), NULL, E));
      OK(hurray_convert(path_of("strided.hurray"), path_of("strided.npy"), NULL, E));
      OK(hurray_convert(path_of("strided.hurray"), path_of("strided.npz"), NULL, E));
      int seen = convert_shrinking(path_of(kInputs[i]), path_of(kOut[j]));
      if (seen != 0) fail_msg("%s -> %s: %s %d", kInputs[i], kOut[j],
                              seen > 128 ? "killed by signal" : "wrong result", seen & 127);
      assert_false(exists(path_of(kOut[j])));
      assert_int_equal(temporaries(), 0);
    }
  }
}

/* A conversion that fails after writing data (a checksum found bad at the end) leaves no
 * output and keeps the previous file. */
static void failures_leave_nothing_behind(void **state) {
  (void)state;
  static uint8_t data[1 << 16];
  for (size_t i = 0; i < sizeof data; i++) data[i] = (uint8_t)(i * 7);
  Dense t = {.name = "t",
             .dtype = HURRAY_DTYPE_UINT8,
             .ndim = 1,
             .shape = {sizeof data},
             .bytes = data,
             .size = sizeof data};
  write_hurray(path_of("good.hurray"), &t, 1, NULL);
  OK(hurray_convert(path_of("good.hurray"), path_of("good.npz"), NULL, E));
  /* flip a data byte of the stored member: its CRC-32 no longer matches */
  size_t size = 0;
  uint8_t *bytes = file_contents(path_of("good.npz"), &size);
  bytes[size / 2] ^= 0x40;
  write_bytes(path_of("bad.npz"), bytes, size);
  free(bytes);
  write_bytes(path_of("previous.hurray"), "previous", 8);
  CONVERT_FAILS(path_of("bad.npz"), path_of("previous.hurray"), NULL, HURRAY_ECHECKSUM,
                "member 't.npy': CRC-32 mismatch");
  CONVERT_FAILS(path_of("bad.npz"), path_of("new.safetensors"), NULL, HURRAY_ECHECKSUM, "CRC-32");
  /* a Hurray input whose data is corrupt: its XXH3-64 is checked on the way */
  HurrayFileReader *r = NULL;
  HurrayFileBufferInfo bi;
  OK(hurray_file_reader_open(path_of("good.hurray"), 0, &r, E));
  OK(hurray_file_reader_buffer_info(r, 0, 0, &bi, E));
  hurray_file_reader_destroy(r);
  bytes = file_contents(path_of("good.hurray"), &size);
  bytes[bi.offset + 100] ^= 1;
  write_bytes(path_of("bad.hurray"), bytes, size);
  free(bytes);
  static const char *const kOut[] = {"new.safetensors", "new.npy", "new.npz", "new.hurray"};
  for (size_t i = 0; i < 4; i++) {
    CONVERT_FAILS(path_of("bad.hurray"), path_of(kOut[i]), NULL, HURRAY_ECHECKSUM,
                  "checksum mismatch");
  }
  assert_false(exists(path_of("new.npz")));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(formats_are_named_and_inferred),
      cmocka_unit_test(safetensors_golden_output),
      cmocka_unit_test(safetensors_golden_input),
      cmocka_unit_test(npy_golden_output),
      cmocka_unit_test(npy_golden_input),
      cmocka_unit_test(safetensors_round_trip_every_dtype),
      cmocka_unit_test(npy_and_npz_round_trip_every_dtype),
      cmocka_unit_test(empty_and_scalar_tensors),
      cmocka_unit_test(strided_tensors_are_gathered_or_kept),
      cmocka_unit_test(fortran_order_to_safetensors),
      cmocka_unit_test(metadata_maps_or_is_refused),
      cmocka_unit_test(what_an_output_cannot_hold_is_refused),
      cmocka_unit_test(npy_output_needs_one_tensor),
      cmocka_unit_test(options_are_checked),
      cmocka_unit_test(not_durable_outputs_skip_only_the_fsyncs),
      cmocka_unit_test(progress_is_reported),
      cmocka_unit_test(an_input_that_shrinks_is_a_clear_error),
      cmocka_unit_test(tensors_of_many_chunks_convert_whole),
      cmocka_unit_test(a_shrink_seen_by_the_read_ahead_is_a_clear_error),
      cmocka_unit_test(small_and_hashed_inputs_that_shrink_are_a_clear_error),
      cmocka_unit_test(failures_leave_nothing_behind),
      cmocka_unit_test(other_formats_open_as_readers),
      cmocka_unit_test(gguf_round_trip_is_byte_identical),
  };
  return cmocka_run_group_tests(tests, make_dir, remove_dir);
}
