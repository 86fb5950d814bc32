/* file.h -- private interface of the file container (docs/spec/file-format.md). Not installed,
 * not API. The sources of src/file/ are layered, each using only those above it here:
 *
 *   codec.c     bounded cursor over untrusted bytes, growable byte sink, arena, name rules
 *   checksum.c  XXH3-64, one-shot and streaming
 *   meta.c      typed metadata: encode, validate, decode
 *   record.c    tensor records (name + descriptor tree + metadata): encode, decode; and the
 *               validation of a descriptor against buffer sizes alone
 *   runs.c      the addressed bytes of a tensor's buffers, merged and laid out compactly
 *   source.c    where the bytes live (mapping, caller memory, pread file): buffers, hashing
 *   output.c    a file that appears at its path only when complete (temporary, fsync, rename)
 *   writer.c    HurrayFileWriter
 *   reader.c    HurrayFileReader
 */
#ifndef HURRAY_FILE_FILE_H
#define HURRAY_FILE_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "internal.h"

/* ---- the byte layout (spec §3, §5, §6) ---------------------------------------------------- */

#define FILE_MAGIC "\x89HRY\r\n\x1a\n"
enum {
  FILE_MAGIC_SIZE = 8,
  /* header field offsets */
  HDR_VERSION_MAJOR = 8,
  HDR_VERSION_MINOR = 10,
  HDR_ALIGNMENT_LOG2 = 12,
  HDR_CHUNK_LOG2 = 13,
  HDR_FILE_SIZE = 16,
  HDR_INDEX_OFFSET = 24,
  HDR_INDEX_LENGTH = 32,
  HDR_CHUNK_TABLE_CHECKSUM = 40,
  HDR_RESERVED = 48,
  HDR_CHECKSUM = 56,
  /* index header */
  IDX_HEADER_SIZE = 64,
  IDX_TENSOR_COUNT = 0,
  IDX_BUFFER_COUNT = 4,
  IDX_BUCKET_BITS = 8,
  IDX_METADATA_OFFSET = 16,
  IDX_METADATA_LENGTH = 24,
  IDX_DATA_BYTES = 32,
  IDX_RESERVED = 40,
  /* table entries: u32 each (a record offset, a tensor number, a name-table position) */
  TABLE_ENTRY_SIZE = 4,
  CHUNK_ENTRY_SIZE = 8,
  /* compact records: node header fields present beyond layout, dtype, ndim, nparts */
  NODE_HAS_FLAGS = 1,
  NODE_HAS_AXIS = 2,
  NODE_HAS_BLOCK_SIZE = 4,
  NODE_HAS_CHILDREN = 8,
  /* part flags */
  PART_HAS_STRIDES = 1,
  PART_OWN_DTYPE = 2,
  PART_OWN_SHAPE = 4,
  PART_HAS_BUFFER = 8,
  PART_HAS_OFFSET = 16,
  /* the fixed-width records of the wire (interchange.md Appendix A) */
  RECORD_HEADER_SIZE = 8, /* name_length[2] reserved[2] metadata_length[4] */
  NODE_HEADER_SIZE = 24,
  PART_HEADER_SIZE = 16,
  CHILD_HEADER_SIZE = 8,
};

#define FILE_MIN_ALIGNMENT_LOG2 6
#define FILE_MAX_ALIGNMENT_LOG2 21
#define FILE_MIN_CHUNK_LOG2 12
#define FILE_MAX_CHUNK_LOG2 28
#define FILE_MAX_CHUNKS 1024u /* a writer's choice: the smallest chunk that keeps to this */
#define FILE_MAX_BUCKET_BITS 20
_Static_assert((1u << FILE_MIN_ALIGNMENT_LOG2) == HURRAY_MIN_ALIGNMENT, "minimum alignment");
_Static_assert((1u << FILE_MAX_ALIGNMENT_LOG2) == HURRAY_FILE_MAX_ALIGNMENT, "maximum alignment");
_Static_assert(((uint64_t)1 << FILE_MAX_CHUNK_LOG2) == HURRAY_FILE_MAX_INDEX, "largest chunk");
_Static_assert((1u << FILE_MAX_BUCKET_BITS) == HURRAY_FILE_MAX_TENSORS, "bucket bits");

static inline uint64_t hurray__pad8(uint64_t n) {
  return (n + 7) & ~(uint64_t)7;
}

/* The bucket of a name hash: its top `bits` bits (spec §5.4). */
static inline uint64_t hurray__bucket_of(uint64_t hash, uint32_t bits) {
  return bits == 0 ? 0 : hash >> (64 - bits);
}

/* Prepends a formatted context ("tensor 'x': ") to the message already in `error`, keeping its
 * code; returns the code. */
HURRAY_INTERNAL int hurray__error_prefix(HurrayError *error, int code, const char *fmt, ...)
    HURRAY_PRINTF(3, 4);

/* ---- codec.c ------------------------------------------------------------------------------ */

/* A bounded cursor over untrusted bytes: every read checks what is left first. */
typedef struct FileCursor {
  const uint8_t *p;
  size_t left;
} FileCursor;

/* HURRAY_EFORMAT ("truncated") unless `n` bytes are left; then *out points at them. */
HURRAY_INTERNAL int hurray__take(FileCursor *c, size_t n, const uint8_t **out, HurrayError *error);
/* An unsigned LEB128 value (spec §1): 7 bits a byte, low first, at most 10 bytes
 * (HURRAY_EFORMAT for more, or for a value past 64 bits). */
HURRAY_INTERNAL int hurray__take_varint(FileCursor *c, uint64_t *out, HurrayError *error);
/* Takes `n` bytes that must all be zero (HURRAY_EFORMAT naming `what` otherwise). */
HURRAY_INTERNAL int hurray__take_zeros(FileCursor *c, size_t n, const char *what,
                                       HurrayError *error);

/* A growable byte sink for encoders. An allocation failure is remembered, so encoders append
 * without checking and look at `failed` once at the end. */
typedef struct FileSink {
  uint8_t *data;
  size_t len;
  size_t cap;
  bool failed;
} FileSink;

HURRAY_INTERNAL void hurray__sink_bytes(FileSink *s, const void *bytes, size_t n);
HURRAY_INTERNAL void hurray__sink_zeros(FileSink *s, size_t n);
HURRAY_INTERNAL void hurray__sink_u8(FileSink *s, uint8_t v);
HURRAY_INTERNAL void hurray__sink_u16(FileSink *s, uint16_t v);
HURRAY_INTERNAL void hurray__sink_u32(FileSink *s, uint32_t v);
HURRAY_INTERNAL void hurray__sink_u64(FileSink *s, uint64_t v);
HURRAY_INTERNAL void hurray__sink_varint(FileSink *s, uint64_t v); /* unsigned LEB128 */
HURRAY_INTERNAL void hurray__sink_pad8(FileSink *s);
HURRAY_INTERNAL void hurray__sink_reset(FileSink *s);

/* A chunked bump allocator: pointers stay valid until the arena is freed; 8-byte aligned. */
typedef struct FileArenaChunk FileArenaChunk;
typedef struct FileArena {
  FileArenaChunk *head;
} FileArena;

HURRAY_INTERNAL void *hurray__arena_alloc(FileArena *arena, size_t size);
/* Copies `n` bytes and appends a NUL. */
HURRAY_INTERNAL char *hurray__arena_strndup(FileArena *arena, const uint8_t *bytes, size_t n);
HURRAY_INTERNAL void hurray__arena_free(FileArena *arena);

/* Checks a name (spec §1): 1..HURRAY_MAX_NAME bytes of UTF-8 without NUL. `bad` is the status
 * for malformed names (HURRAY_EINVAL from callers, HURRAY_EFORMAT from files); too long is
 * HURRAY_ELIMIT. `what` names it in the message. */
HURRAY_INTERNAL int hurray__check_name(const uint8_t *name, size_t len, int bad, const char *what,
                                       HurrayError *error);
/* Measures a caller's NUL-terminated name and checks it (HURRAY_EINVAL / HURRAY_ELIMIT). */
HURRAY_INTERNAL int hurray__check_cname(const char *name, const char *what, size_t *len,
                                        HurrayError *error);
/* Byte-string order: memcmp on the common prefix, then the shorter first. */
HURRAY_INTERNAL int hurray__compare_bytes(const void *a, size_t alen, const void *b, size_t blen);

/* ---- checksum.c --------------------------------------------------------------------------- */

HURRAY_INTERNAL uint64_t hurray__xxh3(const void *data, size_t len);

/* Streaming XXH3-64: create, update any number of times, digest (non-destructive). */
typedef struct FileHasher FileHasher;
HURRAY_INTERNAL FileHasher *hurray__hasher_create(void);
HURRAY_INTERNAL void hurray__hasher_reset(FileHasher *h);
HURRAY_INTERNAL void hurray__hasher_update(FileHasher *h, const void *data, size_t len);
HURRAY_INTERNAL uint64_t hurray__hasher_digest(const FileHasher *h);
HURRAY_INTERNAL void hurray__hasher_destroy(FileHasher *h);

/* ---- meta.c ------------------------------------------------------------------------------- */

/* Encodes a caller's metadata MAP (or NULL) into `out`, keys sorted; an empty map encodes as
 * no bytes. `*minor` is the file format minor version the encoded values need (1 where they
 * hold a NULL or INTEGER, else 0). HURRAY_EINVAL for a malformed tree, HURRAY_ELIMIT past the
 * depth limit or `max` bytes: HURRAY_META_MAX_BYTES for a tensor's (and the wire's),
 * HURRAY_FILE_META_MAX_BYTES for the file's own (spec §8). */
HURRAY_INTERNAL int hurray__meta_encode_max(const HurrayMetaValue *root, uint32_t max,
                                            FileSink *out, uint16_t *minor, HurrayError *error);
HURRAY_INTERNAL int hurray__meta_encode(const HurrayMetaValue *root, FileSink *out,
                                        uint16_t *minor, HurrayError *error);
/* Validates an encoded metadata block of at most `max` bytes from a file (spec §7); `len` 0 is
 * the empty map. With `arena`, also decodes it into `*out` (allocated in the arena); without,
 * only validates. hurray__meta_decode: at most HURRAY_META_MAX_BYTES. */
HURRAY_INTERNAL int hurray__meta_decode_max(const uint8_t *bytes, size_t len, uint32_t max,
                                            FileArena *arena, HurrayMetaValue *out,
                                            HurrayError *error);
HURRAY_INTERNAL int hurray__meta_decode(const uint8_t *bytes, size_t len, FileArena *arena,
                                        HurrayMetaValue *out, HurrayError *error);
/* Decodes a validated block into a new tree for hurray_meta_destroy. */
HURRAY_INTERNAL int hurray__meta_decode_tree_max(const uint8_t *bytes, size_t len, uint32_t max,
                                                 HurrayMetaValue **out, HurrayError *error);
HURRAY_INTERNAL int hurray__meta_decode_tree(const uint8_t *bytes, size_t len,
                                             HurrayMetaValue **out, HurrayError *error);

/* ---- record.c ----------------------------------------------------------------------------- */

/* Maps an array of the tensor being written to the byte offset it gets in the file. */
typedef uint64_t (*FileRebaseFn)(void *context, const HurrayArray *array);

/* A stored buffer as a file record describes it. */
typedef struct FileBufferEntry {
  HurrayBufferDesc desc; /* byte_size is the buffer's length */
  uint64_t offset;
  uint64_t checksum;
  uint8_t role;
  bool shared; /* the bytes of an earlier tensor's buffer, written once (spec §4, 2.2) */
} FileBufferEntry;

/* hurray_file_writer_write of bytes the caller owns and leaves unchanged until it returns (a
 * chunk it read a file into): hashed as given rather than read back from the file. */
HURRAY_INTERNAL int hurray__file_writer_write_owned(HurrayFileWriter *writer, const void *data,
                                                    size_t size, HurrayError *error);

/* Bit 7 of a record's role byte: the buffer is shared (spec §6.1). */
#define FILE_BUFFER_SHARED 0x80u

/* Encodes a tensor record in the wire's fixed-width form (interchange.md Appendix A). `rebase` NULL
 * keeps byte offsets. The descriptor is checked only as far as the encoding needs (counts,
 * pointers, values fitting their fields); its meaning is checked by decoding the record and
 * validating the result. */
HURRAY_INTERNAL int hurray__record_encode(const uint8_t *name, size_t name_len,
                                          const HurrayTensorDesc *tensor, FileRebaseFn rebase,
                                          void *rebase_context, const uint8_t *metadata,
                                          uint32_t metadata_len, FileSink *out, HurrayError *error);
/* Encodes a tensor record in the file's compact form (spec §6), with the tensor's `count`
 * buffer entries, their offsets stored in units of 2^offset_shift bytes (each offset is a
 * multiple of that). */
HURRAY_INTERNAL int hurray__file_record_encode(const uint8_t *name, size_t name_len,
                                               const HurrayTensorDesc *tensor, FileRebaseFn rebase,
                                               void *rebase_context, const FileBufferEntry *buffers,
                                               uint32_t count, unsigned offset_shift,
                                               const uint8_t *metadata, uint32_t metadata_len,
                                               FileSink *out, HurrayError *error);

typedef struct FileRecord {
  const char *name; /* arena copy, NUL-terminated */
  size_t name_len;
  HurrayTensorDesc *tensor; /* in the arena */
  const uint8_t *metadata;  /* inside the record bytes */
  uint32_t metadata_len;
  FileBufferEntry *buffers; /* the file form's, in the arena: CPU, DEVICE, READY, alignment 64 */
  uint32_t buffer_count;
} FileRecord;

/* Parses and checks a fixed-width (wire) record from untrusted bytes, allocating the result
 * in `arena`. */
HURRAY_INTERNAL int hurray__record_decode(const uint8_t *bytes, size_t len, FileArena *arena,
                                          FileRecord *out, HurrayError *error);
/* The same for a compact (file) record, whose buffer offsets are in units of 2^offset_shift. */
HURRAY_INTERNAL int hurray__file_record_decode(const uint8_t *bytes, size_t len,
                                               unsigned offset_shift, FileArena *arena,
                                               FileRecord *out, HurrayError *error);

/* A tensor as the index lists it. */
typedef struct FileIndexTensor {
  const char *name;
  size_t name_len;
  uint64_t hash; /* XXH3-64 of the name */
  const uint8_t *record;
  uint32_t record_len;
} FileIndexTensor;

/* The bucket bits of an index of `tensors` tensors: the least b with 2^b >= tensors. */
HURRAY_INTERNAL uint32_t hurray__bucket_bits(uint32_t tensors);
/* The length of an index of `tensors` tensors with `records` bytes of records and `metadata`
 * bytes of file metadata (spec §5). */
HURRAY_INTERNAL uint64_t hurray__index_length(uint32_t tensors, uint64_t records,
                                              uint64_t metadata);
/* A whole index (spec §5) in `out`: the index header, the tensor, name and bucket tables, the
 * records and the file metadata. */
HURRAY_INTERNAL int hurray__index_build(FileSink *out, const FileIndexTensor *tensors,
                                        uint32_t count, uint32_t buffer_count, uint64_t data_bytes,
                                        const uint8_t *metadata, uint32_t metadata_len,
                                        HurrayError *error);
/* The chunk size (log2) a writer gives an index of `length` bytes (spec §5.6). */
HURRAY_INTERNAL unsigned hurray__chunk_log2(uint64_t length);

/* hurray_tensor_validate of `tensor` against `count` buffers known only by their entries
 * (sizes and roles): contents are not read. */
HURRAY_INTERNAL int hurray__validate_against_entries(const HurrayTensorDesc *tensor,
                                                     const FileBufferEntry *entries, uint32_t count,
                                                     HurrayError *error);

/* ---- runs.c ------------------------------------------------------------------------------- */

/* A merged run of addressed bytes of one source buffer and where it goes in the compact
 * buffer. */
typedef struct FileRun {
  uint32_t buffer;
  uint64_t begin, end; /* in the source buffer */
  uint64_t placed;     /* its first byte's offset in the compact buffer */
} FileRun;

/* Every run of a tensor, sorted by (buffer, begin). */
typedef struct FileRuns {
  FileRun *runs;
  size_t count, capacity;
} FileRuns;

/* Collects the spans (hurray_array_span) of every array of `tensor` (a valid one), merges
 * overlapping and adjacent ones into runs and places each buffer's runs in address order: the
 * first at offset 0, each later one at the first multiple of 64 after the previous. The
 * compact buffer is zeros between runs; a buffer no array addresses is empty. */
HURRAY_INTERNAL int hurray__runs_make(FileRuns *plan, const HurrayTensorDesc *tensor,
                                      HurrayError *error);
/* A FileRebaseFn over a FileRuns: an array's byte offset in the compact buffer. */
HURRAY_INTERNAL uint64_t hurray__runs_rebase(void *context, const HurrayArray *array);
HURRAY_INTERNAL void hurray__runs_free(FileRuns *plan);

/* ---- source.c ----------------------------------------------------------------------------- */

/* Where a reader's bytes live. Reference-counted: the reader holds one reference and each
 * zero-copy buffer one more. */
typedef struct FileSource FileSource;

/* Opens `path`: maps it at an address aligned to `alignment` once the header is known
 * (hurray__source_map), or keeps the descriptor for pread (HURRAY_FILE_OPEN_PREAD in `flags`).
 * With HURRAY_FILE_OPEN_WRITABLE, buffers that view the mapping are writable. */
HURRAY_INTERNAL int hurray__source_open(const char *path, uint32_t flags, FileSource **out,
                                        HurrayError *error);
/* SINK for `owner`. */
HURRAY_INTERNAL int hurray__source_memory(const void *data, uint64_t size,
                                          HurrayOwnerReleaseFn release, void *owner,
                                          FileSource **out, HurrayError *error);
HURRAY_INTERNAL uint64_t hurray__source_size(const FileSource *source);
/* Maps a file source copy-on-write (no-op for pread and memory sources) so that its first byte
 * is aligned to `alignment`; checks a memory source's alignment. The descriptor stays open, for
 * hurray__source_hash, until hurray__source_close_file. */
HURRAY_INTERNAL int hurray__source_map(FileSource *source, uint32_t alignment, HurrayError *error);
/* Closes a mapped file's descriptor (no-op for other sources); after this, hashing reads the
 * mapping. Call it when no thread hashes the source any more. */
HURRAY_INTERNAL void hurray__source_close_file(FileSource *source);
/* Copies bytes [offset, offset + len) into `out` (bounds already checked by the caller). A file
 * is read with pread while its descriptor is open (mapped or not), so a file that shrank is
 * HURRAY_EIO, not SIGBUS. */
HURRAY_INTERNAL int hurray__source_read(const FileSource *source, uint64_t offset, void *out,
                                        size_t len, HurrayError *error);
/* A new CPU buffer holding bytes [offset, offset + len): a view holding a reference on the
 * source (read-only unless the source is writable), or (pread) a copy in memory aligned to
 * `alignment`. */
HURRAY_INTERNAL int hurray__source_buffer(FileSource *source, uint64_t offset, uint64_t len,
                                          uint32_t alignment, HurrayBuffer **out,
                                          HurrayError *error);
/* One more reference on the source, released with hurray__source_release. */
HURRAY_INTERNAL void hurray__source_retain(FileSource *source);
/* Whether buffers made by hurray__source_buffer are read-only views. */
HURRAY_INTERNAL bool hurray__source_read_only(const FileSource *source);

typedef struct FileProgress {
  HurrayFileProgressFn fn;
  void *context;
  uint64_t done;
  uint64_t total;
} FileProgress;

/* XXH3-64 of bytes [offset, offset + len), in bounded memory, reporting progress. A file is
 * read with pread (mapped or not), so a file that shrank is HURRAY_EIO, not SIGBUS. */
HURRAY_INTERNAL int hurray__source_hash(const FileSource *source, uint64_t offset, uint64_t len,
                                        FileProgress *progress, uint64_t *hash, HurrayError *error);
/* HURRAY_EFORMAT naming `what` and the offset of the first byte in [offset, offset + len) that
 * is not zero; read as hurray__source_hash reads. */
HURRAY_INTERNAL int hurray__source_check_zero(const FileSource *source, uint64_t offset,
                                              uint64_t len, const char *what, HurrayError *error);
HURRAY_INTERNAL void hurray__source_release(FileSource *source);

/* The bytes of a mapped or memory source (after hurray__source_map), NULL for a pread one. */
HURRAY_INTERNAL const uint8_t *hurray__source_bytes(const FileSource *source);
/* A new descriptor (close-on-exec) of the file a source reads, which stays open when the source
 * is released: -1 with HURRAY_OK if it has none (memory, or a mapped file's once closed). */
HURRAY_INTERNAL int hurray__source_dup_fd(const FileSource *source, int *fd, HurrayError *error);

/* The source that holds tensor `index`'s buffers, for reading their bytes with
 * hurray__source_read (a reader opened from a path keeps its descriptor until destroyed): the
 * reader's own, or its shard's. `*checksummed`: whether its buffers' checksums are XXH3-64 of
 * their bytes (a Hurray file's; a view's are 0). NULL for an index past the end. */
HURRAY_INTERNAL const FileSource *hurray__reader_source(const HurrayFileReader *reader,
                                                        uint32_t index, bool *checksummed);

/* ---- reader.c: files of other formats, presented as readers ------------------------------ */

/* What a view does where a Hurray file would be read directly. A view's tensors have one
 * buffer each, which it numbers as the tensor. */
typedef struct FileViewOps {
  /* A new CPU buffer holding bytes [offset, offset + len) of buffer `buffer`: a read-only view
   * of the mapping where they lie in the file as they are, at a multiple of 64; else a copy
   * in fresh 64-aligned memory. */
  int (*buffer)(void *view, uint32_t buffer, uint64_t offset, uint64_t len, HurrayBuffer **out,
                HurrayError *error);
  /* Checks buffer `buffer`'s bytes against the checksum its format keeps (HURRAY_EUNSUPPORTED
   * where the format keeps none). */
  int (*verify)(void *view, uint32_t buffer, HurrayError *error);
  void (*destroy)(void *view);
} FileViewOps;

/* A file of another format as a reader sees it: an index built in memory by
 * hurray__index_build, whose records' buffer offsets (in bytes, offset_shift 0) and checksums
 * only the view interprets. */
typedef struct FileView {
  FileSource *source;  /* a reference, for the reader */
  HurrayFileInfo info; /* format, alignment (64), file_size */
  uint8_t *index;      /* malloc'd */
  uint64_t index_length;
  bool read_only; /* tensors are read-only (mapped) rather than fresh copies */
  const FileViewOps *ops;
  void *view;
} FileView;

/* A reader over `view`, SINK for everything it holds (also on failure). Its index is validated
 * as a file's is, lazily: each record as its tensor is first used. */
HURRAY_INTERNAL int hurray__reader_open_view(FileView *view, HurrayFileReader **out,
                                             HurrayError *error);

/* A reader of the Hurray file open as `source` (SINK, also on failure). */
HURRAY_INTERNAL int hurray__reader_open_source(FileSource *source, HurrayFileReader **out,
                                               HurrayError *error);

/* ---- reader.c: sharded checkpoints, presented as one reader -------------------------------- */

/* A tensor the checkpoint index lists: its name and where it is. */
typedef struct FileShardEntry {
  const char *name; /* NUL-terminated, in the shards' arena */
  uint32_t shard;   /* its shard's number */
  uint32_t local;   /* its number in that shard's reader */
} FileShardEntry;

/* The shards of one checkpoint (src/convert/shards.c opens and checks them). Tensors are
 * numbered shard after shard, each shard's in its own order: shard s holds the tensors
 * [first[s], first[s + 1]). */
typedef struct FileShards {
  FileArena arena;
  uint32_t count;
  const char **names;         /* each shard's file name, in the arena */
  HurrayFileReader **readers; /* each shard's reader */
  uint32_t *first;            /* count + 1 entries */
  FileShardEntry *entries;    /* every tensor, sorted by name (bytes) */
  uint32_t entry_count;       /* = first[count] */
} FileShards;

/* A reader over `shards` (a malloc'd FileShards, SINK also on failure) whose HurrayFileInfo is
 * `info`: every query goes to the shard that holds the tensor. */
HURRAY_INTERNAL int hurray__reader_open_shards(FileShards *shards, const HurrayFileInfo *info,
                                               HurrayFileReader **out, HurrayError *error);
/* Frees `shards` and destroys every shard's reader (NULL: nothing). */
HURRAY_INTERNAL void hurray__reader_shards_free(FileShards *shards);

/* ---- output.c ----------------------------------------------------------------------------- */

typedef struct FileReadBack FileReadBack; /* output.c's */

/* A file written under a temporary name `path` + ".tmp-<pid>-<n>" in the destination's
 * directory (`path` being a symlink's final target, ADR-037), through a 256 KiB staging buffer,
 * and renamed over `path` only by hurray__output_commit: until then nothing appears at `path`
 * and any previous file there is untouched. After an I/O error (HURRAY_EIO) every call fails; only close remains. */
typedef struct FileOutput {
  int fd;
  bool failed;
  bool durable;     /* commit fsyncs the file and its directory */
  char *path;
  bool unnamed;     /* the temporary is an O_TMPFILE, linked at commit */
  bool renamed;     /* commit renamed it into place */
  char *temp_path;  /* NULL before open, while unnamed and once renamed into place */
  uint64_t flushed; /* bytes [0, flushed) were handed to the kernel */
  uint64_t reserved; /* bytes [0, reserved) have blocks allocated (fallocate) */
  uint64_t written_back; /* durable: writeback of bytes [0, written_back) was started */
  bool reserve_unsupported;
  size_t staged;    /* then `staged` bytes wait in `stage` */
  uint8_t *stage;
  FileReadBack *read_back;     /* hashes large writes as read back; NULL before the first */
  bool read_back_unavailable;  /* no thread could be started: large writes read back inline */
} FileOutput;

/* Creates the temporary (HURRAY_EIO if it cannot be). `durable`: commit fsyncs (ADR-055). On
 * failure `*o` needs no close. */
HURRAY_INTERNAL int hurray__output_open(FileOutput *o, const char *path, bool durable,
                                        HurrayError *error);
/* Appends bytes (zeros). */
HURRAY_INTERNAL int hurray__output_write(FileOutput *o, const void *data, size_t len,
                                         HurrayError *error);
/* Appends bytes and adds to `hasher` exactly the bytes that reach the file, even while another
 * thread changes `data`: small writes are hashed in the stage they are copied to, large ones as
 * read back from the file, by a thread of the output's own while the next piece is written, so
 * `hasher` may not have seen them all when this returns: hurray__output_settle before using it
 * otherwise. `owned`: the caller's private bytes, which nothing changes until this returns (a
 * chunk it read into), hashed as they are (by the output's thread while they are written; done
 * when this returns) and written once. */
HURRAY_INTERNAL int hurray__output_write_hashed(FileOutput *o, const void *data, size_t len,
                                                FileHasher *hasher, bool owned,
                                                HurrayError *error);
/* Waits until every hasher given to hurray__output_write_hashed has seen its bytes;
 * HURRAY_EIO if reading some back failed (the output is failed then). */
HURRAY_INTERNAL int hurray__output_settle(FileOutput *o, HurrayError *error);
HURRAY_INTERNAL int hurray__output_zeros(FileOutput *o, uint64_t len, HurrayError *error);
/* The length written so far: where the next byte goes. */
static inline uint64_t hurray__output_position(const FileOutput *o) {
  return o->flushed + o->staged;
}
/* Moves the end back to `position` (<= the current one): later bytes overwrite what followed,
 * and commit cuts off whatever was on disk beyond the end. */
HURRAY_INTERNAL void hurray__output_rewind(FileOutput *o, uint64_t position);
/* Overwrites bytes [offset, offset + len) already written (a header written last, a checksum
 * known only after the data). */
HURRAY_INTERNAL int hurray__output_patch(FileOutput *o, uint64_t offset, const void *data,
                                         size_t len, HurrayError *error);
/* Flushes, truncates to the current position, fsyncs, closes, renames into place and fsyncs
 * the directory (no fsync unless the output is durable). On failure nothing appeared at the path, except when syncing the directory
 * failed (HURRAY_EIO saying so; `renamed` is true then): the file is there, its durability
 * unknown. */
HURRAY_INTERNAL int hurray__output_commit(FileOutput *o, HurrayError *error);
/* Closes and, unless committed, removes the temporary; frees. Safe on a closed output. */
HURRAY_INTERNAL void hurray__output_close(FileOutput *o);

/* A test hook, never set by the library: the next commit step named here fails as if its
 * system call had failed with `errno_value`, then the hook clears itself. */
typedef enum FileOutputStep {
  OUTPUT_STEP_NONE,
  OUTPUT_STEP_TRUNCATE,
  OUTPUT_STEP_SYNC,
  OUTPUT_STEP_RENAME,
  OUTPUT_STEP_SYNC_DIRECTORY,
} FileOutputStep;
typedef struct FileOutputFault {
  FileOutputStep step;
  int errno_value;
} FileOutputFault;
HURRAY_INTERNAL extern FileOutputFault hurray__output_fault;

#endif /* HURRAY_FILE_FILE_H */
