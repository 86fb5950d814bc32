/* convert.h -- private interface of the converters between Hurray files, safetensors, .npy and
 * .npz (docs/impl/conversion.md). Not installed, not API. The sources of src/convert/:
 *
 *   json.c         a bounded, strict JSON cursor (exactly what a safetensors header needs)
 *   safetensors.c  the safetensors header: parse and validate; write
 *   gguf.c         the GGUF header (v2, v3): parse and validate (ADR-094)
 *   npy.c          the .npy header (a Python dict literal): parse; write
 *   zip.c          the zip directory of .npz files (ZIP64 included): read, inflate, write
 *   array.c        streaming an array's bytes: chunks of a mapping, byte swaps, inflate,
 *                  gathering a strided array into C order; checksums on the way
 *   convert.c      hurray_convert: sources (what each input holds) and sinks (each output)
 *   view.c         a source presented as a HurrayFileReader (HURRAY_FILE_OPEN_FOREIGN)
 *   shards.c       sharded checkpoints: the index (parse, write) and its shards as one reader
 *
 * Every parser takes untrusted bytes: each length and count is checked against the bytes
 * that hold it before use, arithmetic is overflow-checked, and each error names the byte
 * offset (in the input file) where the problem was found and what was expected there.
 */
#ifndef HURRAY_CONVERT_CONVERT_H
#define HURRAY_CONVERT_CONVERT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../file/file.h"

/* ---- limits ------------------------------------------------------------------------------- */

#define CONV_SAFETENSORS_MAX_HEADER 100000000u /* bytes, as the safetensors package */
#define CONV_NPY_MAX_HEADER 10000u             /* bytes of the dict literal, as numpy.load */
#define CONV_JSON_MAX_DEPTH 64u        /* levels of a value hurray__json_skip skips */
#define CONV_SHARD_INDEX_MAX 100000000u /* bytes of a checkpoint index, as a safetensors header */
#define CONV_MAX_SHARDS 65536u          /* shards of one checkpoint */
#define CONV_MAX_SHARD_NAME 255u        /* bytes of a shard's file name (NAME_MAX) */
#define CONV_ZIP_MAX_RATIO 1032u /* deflate cannot expand one byte into more than this */

/* ---- an array to convert ------------------------------------------------------------------ */

/* One dense array as an input holds it: its bytes are a region of `region_size` bytes and
 * element (0, ..., 0) lies at `byte_offset` in it. Shape and strides live in the source's
 * arena. The region is a view of the mapped input (`bytes`), except for deflated .npz
 * members, which can only be streamed. */
typedef struct ConvArray {
  const char *name; /* NUL-terminated, a valid Hurray name once the source is open */
  size_t name_len;
  uint8_t dtype; /* HurrayDTypeCode; INVALID when `refusal` is set */
  uint8_t swap;  /* big-endian .npy: bytes per byte-swapped unit (0: none) */
  int32_t ndim;
  const int64_t *shape;
  const int64_t *strides; /* in elements; NULL means C order */
  uint64_t region_offset; /* file offset of the region's first byte (mapped inputs); for
                             .npz, its offset in the uncompressed member */
  uint64_t byte_offset;
  uint64_t region_size;
  uint64_t numel;
  uint64_t data_bytes; /* numel * bits / 8, rounded up: the bytes of the elements */
  const char *refusal; /* Hurray input: why this tensor is no dense array (layout), or NULL */
  uint32_t index;      /* the source's own number for it: tensor, zip member */
  uint32_t buffer;     /* Hurray input: the buffer its values are in */
  bool has_metadata;   /* Hurray input: the tensor has metadata of its own */
} ConvArray;

/* Where the bytes of an array go, chunk by chunk. */
typedef int (*ConvChunkFn)(void *context, const uint8_t *bytes, size_t len, HurrayError *error);

/* ---- cursor.c ----------------------------------------------------------------------------- */

/* A cursor over the untrusted text of a header: `len` bytes at `text`, `base` the file offset
 * of text[0] (so errors name offsets in the file), `name` the text in messages ("the header").
 * Whitespace is space, tab, newline and carriage return. */
typedef struct TextCursor {
  const uint8_t *text;
  size_t len;
  size_t at;
  uint64_t base;
  const char *name;
} TextCursor;

HURRAY_INTERNAL void hurray__cursor_skip_space(TextCursor *c);
/* Skips whitespace; the file offset of the next byte. */
HURRAY_INTERNAL uint64_t hurray__cursor_offset(TextCursor *c);
/* HURRAY_EFORMAT: "byte N: expected `what`, found 'x'" (or a byte's value, or the end). */
HURRAY_INTERNAL int hurray__cursor_unexpected(TextCursor *c, const char *what, HurrayError *error);
/* Skips whitespace, then: whether the next byte is `token` (consumed if so). */
HURRAY_INTERNAL bool hurray__cursor_accept(TextCursor *c, char token);
/* Skips whitespace, then requires `token`, else fails as hurray__cursor_unexpected. */
HURRAY_INTERNAL int hurray__cursor_expect(TextCursor *c, char token, const char *what,
                                          HurrayError *error);
/* Only whitespace may remain; `what` names what was expected instead. */
HURRAY_INTERNAL int hurray__cursor_end(TextCursor *c, const char *what, HurrayError *error);

/* ---- json.c ------------------------------------------------------------------------------- */

/* The JSON tokens of a safetensors header (of at most CONV_SAFETENSORS_MAX_HEADER bytes), read
 * with a TextCursor besides its '{' ':' ',' ... The grammar is RFC 8259's, but each call
 * accepts only the token it is asked for: there is no generic value, so a float, true, false
 * or null where the caller wants something else is an error naming what was expected. */

/* Skips whitespace, then reads a string, unescaping \" \\ \/ \b \f \n \r \t and \uXXXX
 * (surrogate pairs combined) into UTF-8 in `arena`, NUL-terminated; `*len` excludes the NUL.
 * Raw bytes must be well-formed UTF-8 without control characters. */
HURRAY_INTERNAL int hurray__json_string(TextCursor *j, FileArena *arena, const char **out,
                                        size_t *len, const char *what, HurrayError *error);
/* Skips whitespace, then reads a non-negative integer without sign, fraction, exponent or
 * leading zero that fits in uint64. */
HURRAY_INTERNAL int hurray__json_uint(TextCursor *j, uint64_t *out, const char *what,
                                      HurrayError *error);
/* Skips whitespace, then one JSON value of any type (RFC 8259), nested at most
 * CONV_JSON_MAX_DEPTH levels, its strings decoded into `scratch` and dropped. */
HURRAY_INTERNAL int hurray__json_skip(TextCursor *j, FileArena *scratch, HurrayError *error);
/* Skips whitespace, then requires the literal `null`. Whether it is there (consumed if so). */
HURRAY_INTERNAL bool hurray__json_accept_null(TextCursor *j);
/* Appends `len` bytes as the inside of a JSON string, escaped as serde_json escapes: \" \\,
 * \b \f \n \r \t, other control characters as \u00XX; everything else as it is. */
HURRAY_INTERNAL void hurray__json_escape(FileSink *out, const char *s, size_t len);

/* ---- shards.c ----------------------------------------------------------------------------- */

/* A checkpoint index as parsed: its tensors sorted by name, each with the number of its shard
 * (`local` 0), the shards' file names sorted, everything in the caller's arena. */
typedef struct ShardIndex {
  FileShardEntry *entries;
  uint32_t count;
  const char **shards;
  uint32_t shard_count;
} ShardIndex;

/* Parses an index of `len` bytes (file-format.md §12.1): a JSON object whose "weight_map" maps
 * valid tensor names to plain file names, other members (its "metadata") any JSON value. Each
 * tensor once; at most HURRAY_FILE_MAX_TENSORS tensors and CONV_MAX_SHARDS shards. */
HURRAY_INTERNAL int hurray__shard_index_parse(const uint8_t *text, size_t len, FileArena *arena,
                                              ShardIndex *out, HurrayError *error);
/* Whether hurray_file_reader_open takes `path` as a checkpoint: a directory, or a name
 * ending in ".index.json". */
HURRAY_INTERNAL bool hurray__shards_path(const char *path);
/* Opens the checkpoint at `path` (file-format.md §12), each shard with `flags`. */
HURRAY_INTERNAL int hurray__shards_open(const char *path, uint32_t flags, HurrayFileReader **out,
                                        HurrayError *error);

/* ---- view.c ------------------------------------------------------------------------------- */

/* Opens the file at `path`, whose first bytes are not a Hurray file's, as a view when they
 * show safetensors, .npy, .npz or GGUF (HURRAY_EFORMAT otherwise). `flags` as for
 * hurray_file_reader_open. */
HURRAY_INTERNAL int hurray__view_open(const char *path, uint32_t flags, HurrayFileReader **out,
                                      HurrayError *error);

/* ---- safetensors.c ------------------------------------------------------------------------ */

/* The safetensors dtype name of a Hurray dtype, or NULL where safetensors has none. */
HURRAY_INTERNAL const char *hurray__safetensors_dtype_name(int dtype);
/* Its rank in safetensors' Dtype enum, or -1. */
HURRAY_INTERNAL int hurray__safetensors_rank(int dtype);

typedef struct SafetensorsHeader {
  uint64_t header_len; /* N: the JSON is bytes [8, 8 + N) */
  uint64_t data_start; /* 8 + N */
  uint32_t count;
  ConvArray *arrays;        /* in data order, in the arena */
  HurrayMetaValue metadata; /* __metadata__ as a MAP of strings (count 0 when absent) */
} SafetensorsHeader;

/* Parses and validates the header of a safetensors file of `size` bytes whose first bytes
 * are `bytes` (at least min(size, 8 + N) of them): the length, the JSON, every entry (dtype
 * known, shape, offsets), and that the data offsets tile [0, size - 8 - N) exactly, each
 * tensor's size being numel * dtype size. Names and metadata keys must also be valid Hurray
 * names. Everything is allocated in `arena`. */
HURRAY_INTERNAL int hurray__safetensors_parse(const uint8_t *bytes, uint64_t size, FileArena *arena,
                                              SafetensorsHeader *out, HurrayError *error);

/* Sorts arrays as safetensors' writer does: dtype rank descending, then name (bytes). Each
 * array then starts at a multiple of its element size in the data. */
HURRAY_INTERNAL void hurray__safetensors_sort(const ConvArray **order, uint32_t count);
/* What becomes of a file metadata value that is not a string, which safetensors cannot hold. */
typedef enum SafetensorsNonString {
  NON_STRING_REFUSE, /* HURRAY_EUNSUPPORTED naming the key */
  NON_STRING_JSON,   /* its JSON text, as a string */
  NON_STRING_DROP    /* left out */
} SafetensorsNonString;

/* Appends the 8-byte length and the JSON header for `count` arrays in `order`, with data
 * offsets packed in that order, and the file metadata (a MAP or NULL): string values as they
 * are, others as `non_string` says. The JSON is written as safetensors' writer (serde_json)
 * writes it, then padded with spaces so that the data starts at a multiple of `alignment`
 * (8 or more). */
HURRAY_INTERNAL int hurray__safetensors_header(FileSink *out, const ConvArray *const *order,
                                               uint32_t count, const HurrayMetaValue *metadata,
                                               SafetensorsNonString non_string,
                                               uint32_t alignment, HurrayError *error);

/* ---- gguf.c ------------------------------------------------------------------------------- */

#define CONV_GGUF_MAX_TENSORS HURRAY_FILE_MAX_TENSORS
#define CONV_GGUF_MAX_KVS (1u << 20)
#define CONV_GGUF_MAX_STRING (1u << 24) /* bytes of a string value */
#define CONV_GGUF_MAX_ARRAY (1u << 24)  /* items of an array value */
#define CONV_GGUF_MAX_DEPTH 8u          /* levels of nested arrays */
#define CONV_GGUF_MAX_DIMS 4u           /* as ggml's GGML_MAX_DIMS */
#define CONV_GGUF_MAX_ALIGNMENT (1u << 21)
#define CONV_GGUF_DEFAULT_ALIGNMENT 32u

typedef struct GgufHeader {
  uint32_t version;   /* 2 or 3 */
  uint32_t alignment; /* general.alignment, else 32 */
  uint64_t data_offset;
  uint32_t count;
  ConvArray *arrays;        /* in the arena; region_offset is each tensor's file offset */
  HurrayMetaValue metadata; /* a MAP of every key/value, in the arena */
} GgufHeader;

/* Parses and validates a GGUF header (versions 2 and 3) over the `size` bytes at `bytes`:
 * counts, strings and arrays within limits and the bytes left, keys and tensor names valid
 * Hurray names and unique, types known, offsets aligned and inside the file. */
HURRAY_INTERNAL int hurray__gguf_parse(const uint8_t *bytes, uint64_t size, FileArena *arena,
                                       GgufHeader *out, HurrayError *error);
#define CONV_GGUF_MAX_NAME 63u /* bytes of a tensor name ggml takes (GGML_MAX_NAME - 1) */

/* Whether GGUF can hold `a` (dense, a dtype with a ggml type, rank 1..4, a name ggml takes):
 * HURRAY_EUNSUPPORTED naming the tensor and why not. */
HURRAY_INTERNAL int hurray__gguf_check(const ConvArray *a, HurrayError *error);
/* Appends a GGUF v3 header for `count` arrays (each checked by hurray__gguf_check), the data of
 * each at the next multiple of `*alignment` after the previous one, and the file metadata as
 * key/values (integers as u32 where they fit, else i32, else i64; floats as f32 where exact;
 * lists as arrays of one type); `*alignment` is its general.alignment, else 32. The header is
 * padded to the alignment: the first array's bytes follow it. */
HURRAY_INTERNAL int hurray__gguf_header(FileSink *out, const ConvArray *arrays, uint32_t count,
                                        const HurrayMetaValue *metadata, uint32_t *alignment,
                                        HurrayError *error);
/* The Hurray dtype of a ggml type (INVALID if Hurray reads none), and back (-1 if none). */
HURRAY_INTERNAL int hurray__gguf_dtype(uint32_t ggml);
HURRAY_INTERNAL int hurray__gguf_type(int dtype);

/* ---- npy.c -------------------------------------------------------------------------------- */

typedef struct NpyHeader {
  uint8_t version_major;
  uint8_t dtype; /* HurrayDTypeCode */
  uint8_t swap;  /* bytes per byte-swapped unit for big-endian data, else 0 */
  bool fortran_order;
  int32_t ndim;
  int64_t shape[HURRAY_MAX_NDIM];
  uint64_t numel;
  uint64_t data_offset; /* the preamble's length: the data starts here */
  uint64_t data_bytes;  /* numel * itemsize */
} NpyHeader;

/* Parses the preamble of a .npy image: magic, version 1.0, 2.0 or 3.0, header length (at most
 * CONV_NPY_MAX_HEADER), and the dict literal {'descr': ..., 'fortran_order': ..., 'shape':
 * (...)} with exactly those keys. `len` bytes are available (a prefix of the image is
 * enough); `base` is the file offset of bytes[0], for messages. Does not look at the data. */
HURRAY_INTERNAL int hurray__npy_parse(const uint8_t *bytes, size_t len, uint64_t base,
                                      NpyHeader *out, HurrayError *error);
/* The descr ('<f4') of a Hurray dtype, or NULL where .npy has none. */
HURRAY_INTERNAL const char *hurray__npy_descr(int dtype);
/* Appends the preamble numpy.save writes for (descr, fortran_order, shape): version 1.0, the
 * dict with its growth padding, spaces and a newline up to a multiple of 64 bytes. */
HURRAY_INTERNAL int hurray__npy_write_header(FileSink *out, int dtype, bool fortran_order,
                                             int32_t ndim, const int64_t *shape,
                                             HurrayError *error);

/* ---- zip.c -------------------------------------------------------------------------------- */

typedef struct ZipMember {
  const char *name; /* NUL-terminated copy, in the arena */
  size_t name_len;
  uint16_t method; /* 0 stored, 8 deflate */
  uint32_t crc32;
  uint64_t compressed_size;
  uint64_t size;          /* uncompressed */
  uint64_t header_offset; /* of the local header */
  uint64_t data_offset;   /* of the first byte of (compressed) data */
} ZipMember;

typedef struct ZipDirectory {
  uint32_t count;
  ZipMember *members; /* in central directory order, in the arena */
} ZipDirectory;

/* Reads the zip directory of the `size` bytes at `bytes`: the end of central directory record
 * (and the ZIP64 locator and record where present), every central directory entry (ZIP64
 * extra fields included) and every local header; checks that each member lies inside the
 * file before the central directory, that no two overlap, that names are unique and that
 * local and central headers agree. Encrypted members, multi-disk archives and methods other
 * than stored and deflate are HURRAY_EUNSUPPORTED. Data is not read. */
HURRAY_INTERNAL int hurray__zip_read(const uint8_t *bytes, uint64_t size, FileArena *arena,
                                     ZipDirectory *out, HurrayError *error);

/* Streams member bytes [skip, skip + len) of its uncompressed data to `fn`, having read (with
 * pread, HURRAY_EIO when the file shrank) and inflated all of it in bounded memory, and checks
 * its CRC-32 and sizes at the end (HURRAY_ECHECKSUM, HURRAY_EFORMAT). `fn` may be NULL to only
 * check. */
HURRAY_INTERNAL int hurray__zip_stream(const FileSource *file, const ZipMember *member,
                                       uint64_t skip, uint64_t len, ConvChunkFn fn, void *context,
                                       HurrayError *error);
/* Inflates up to `cap` bytes of the start of a member into `out` (no CRC check). */
HURRAY_INTERNAL int hurray__zip_peek(const uint8_t *bytes, const ZipMember *member, uint8_t *out,
                                     size_t cap, size_t *got, HurrayError *error);

/* Sizes at or above this use ZIP64 fields when writing: 0xFFFFFFFF, lowered only by tests. */
HURRAY_INTERNAL extern uint64_t hurray__zip64_threshold;

/* The CRC-32 of zip (and zlib's crc32) of `n` bytes at `p`, continuing from `crc` (0 to
 * begin). */
HURRAY_INTERNAL uint32_t hurray__crc32(uint32_t crc, const uint8_t *p, uint64_t n);

typedef struct ZipWriter ZipWriter;
/* A zip writer over an output, members ZIP_STORED. */
HURRAY_INTERNAL int hurray__zip_writer_create(FileOutput *out, ZipWriter **writer,
                                              HurrayError *error);
/* Starts a member of `size` bytes, known in advance; its bytes follow through
 * hurray__zip_writer_write, exactly `size` of them. */
HURRAY_INTERNAL int hurray__zip_writer_begin(ZipWriter *w, const char *name, size_t name_len,
                                             uint64_t size, HurrayError *error);
HURRAY_INTERNAL int hurray__zip_writer_write(void *writer, const uint8_t *bytes, size_t len,
                                             HurrayError *error);
/* Ends the member: patches its CRC-32 into the local header. */
HURRAY_INTERNAL int hurray__zip_writer_end(ZipWriter *w, HurrayError *error);
/* Writes the central directory and the end records. */
HURRAY_INTERNAL int hurray__zip_writer_finish(ZipWriter *w, HurrayError *error);
HURRAY_INTERNAL void hurray__zip_writer_destroy(ZipWriter *w);

/* ---- array.c ------------------------------------------------------------------------------ */

/* Whether the array's strides are C order (NULL, or equal to row-major ones where extents
 * exceed 1), or Fortran order. Empty arrays are both. */
HURRAY_INTERNAL bool hurray__array_is_c_order(const ConvArray *a);
HURRAY_INTERNAL bool hurray__array_is_f_order(const ConvArray *a);
/* The one-part dense descriptor of `a` (its values at `byte_offset` of buffer 0) into the
 * caller's `part` and `desc`, which borrow `a`'s shape and strides. */
HURRAY_INTERNAL void hurray__array_dense_desc(const ConvArray *a, uint64_t byte_offset,
                                              HurrayArray *part, HurrayTensorDesc *desc);
/* Column-major strides for `shape` into `strides`. */
HURRAY_INTERNAL void hurray__fortran_strides(int32_t ndim, const int64_t *shape, int64_t *strides);

/* Reads `len` bytes at `offset` of `file` with pread in 4 MiB chunks (HURRAY_EIO when the file
 * shrank), adds each to `hasher` (unless NULL) and hands it to `fn` (unless NULL),
 * byte-swapping units of `swap` bytes when `swap` > 1 (offset and len then multiples of it). */
HURRAY_INTERNAL int hurray__stream_file(const FileSource *file, uint64_t offset, uint64_t len,
                                        uint8_t swap, FileHasher *hasher, ConvChunkFn fn,
                                        void *context, HurrayError *error);
/* Bytes [offset, offset + len) of `file` in one new allocation (`*out`, freed by the caller),
 * read with pread: for reading a region out of order. */
HURRAY_INTERNAL int hurray__read_region(const FileSource *file, uint64_t offset, uint64_t len,
                                        uint8_t **out, HurrayError *error);
/* Re-chunks bytes into whole units of `unit` bytes, byte-swaps each, and hands them on: a
 * ConvChunkFn over a SwapAdapter, then hurray__swap_finish once the bytes end. */
typedef struct SwapAdapter {
  uint8_t unit;
  uint8_t *scratch; /* 1 MiB */
  size_t used;
  ConvChunkFn fn;
  void *context;
} SwapAdapter;
HURRAY_INTERNAL int hurray__swap_init(SwapAdapter *s, uint8_t unit, ConvChunkFn fn, void *context,
                                      HurrayError *error);
HURRAY_INTERNAL int hurray__swap_chunk(void *adapter, const uint8_t *bytes, size_t len,
                                       HurrayError *error);
/* Hands on what is left (HURRAY_EFORMAT if a partial unit is) and frees the scratch. */
HURRAY_INTERNAL int hurray__swap_finish(SwapAdapter *s, HurrayError *error);
HURRAY_INTERNAL void hurray__swap_free(SwapAdapter *s);

/* Streams the elements of `a`, whose region is `region`, in C order, packed (sub-byte
 * elements as a little-endian bit stream), byte-swapped per `a->swap`. */
HURRAY_INTERNAL int hurray__stream_gather(const ConvArray *a, const uint8_t *region, ConvChunkFn fn,
                                          void *context, HurrayError *error);

/* ---- convert.c ---------------------------------------------------------------------------- */

/* What an input holds, opened and validated: its arrays in input order and its metadata. */
typedef struct ConvSource {
  int format;       /* HurrayFormat */
  FileSource *file; /* the mapped input (not for Hurray files) */
  const uint8_t *bytes;
  uint64_t size;
  HurrayFileReader *reader; /* Hurray input */
  FileArena arena;
  uint32_t count;
  ConvArray *arrays;
  ZipDirectory zip;
  HurrayMetaValue *metadata;      /* the input's file metadata (a MAP), or NULL */
  HurrayMetaValue *metadata_tree; /* owned tree from a Hurray reader */
} ConvSource;

/* An input's format from the first bytes of `file` (mapped): HURRAY_EFORMAT when they show
 * none. */
HURRAY_INTERNAL int hurray__sniff(const FileSource *file, int *format, HurrayError *error);
/* The stem of a path (its last component without its last extension), in `arena`: the name of
 * a .npy file's array. HURRAY_EINVAL when it is no valid tensor name. */
HURRAY_INTERNAL int hurray__stem_name(const char *path, FileArena *arena, const char **out,
                                      HurrayError *error);
/* Opens an input already held by `file` (SINK: released with the source) as `format`
 * (not AUTO). `name` names the array of a .npy input (required for it). */
HURRAY_INTERNAL int hurray__source_open_input(FileSource *file, int format, const char *name,
                                              ConvSource *out, HurrayError *error);
/* Streams bytes [offset, offset + len) of array `a`'s region to `fn`, checking the input's
 * checksum of them on the way (XXH3-64 of Hurray buffers, CRC-32 of zip members). */
HURRAY_INTERNAL int hurray__source_stream(ConvSource *s, const ConvArray *a, uint64_t offset,
                                          uint64_t len, ConvChunkFn fn, void *context,
                                          HurrayError *error);
/* Streams the elements of `a` in C order (gathering when it is strided). */
HURRAY_INTERNAL int hurray__source_c_order(ConvSource *s, const ConvArray *a, ConvChunkFn fn,
                                           void *context, HurrayError *error);
HURRAY_INTERNAL void hurray__source_close(ConvSource *s);

#endif /* HURRAY_CONVERT_CONVERT_H */
