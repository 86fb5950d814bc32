/* reader.c -- HurrayFileReader: opens a file as untrusted input and validates it lazily (spec
 * §9, ADR-057). Open checks the header, the index's chunk table and the index header: O(1) of
 * the tensor count. Every other byte of the index is validated before its first use: each
 * chunk of the index is copied into private memory and checked against its checksum the first
 * time one of its bytes is needed, each tensor's record is decoded and validated the first
 * time the tensor is used, and each bucket of the name table the first time a lookup or one of
 * its tensors needs it. Nothing that changes the file later can change what was checked.
 * verify of the whole file checks everything, eagerly. The lazy state is built under a mutex
 * and published through atomic bitmaps, so a reader is safe to share between threads. */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "file.h"

/* A tensor, once its record is validated. */
typedef struct ReaderTensor {
  const char *name; /* in the reader's arena */
  uint32_t name_length;
  uint32_t record_offset;
  uint32_t record_length;
  uint32_t metadata_length;
  uint32_t buffer_count;
  const FileBufferEntry *buffers; /* in the reader's arena */
  uint64_t data_bytes;
  uint8_t layout;
  uint8_t dtype;
} ReaderTensor;

typedef _Atomic uint64_t Bitmap;

/* Tensors are kept in pages of 2^TENSOR_PAGE_LOG2, each allocated when one of its tensors is
 * first validated, so that open allocates nothing per tensor. */
enum { TENSOR_PAGE_LOG2 = 10, TENSOR_PAGE = 1 << TENSOR_PAGE_LOG2 };

struct HurrayFileReader {
  FileSource *source;
  HurrayFileInfo info;
  uint8_t *index;       /* private copy of the index, filled chunk by chunk */
  uint8_t *chunk_table; /* the chunks' checksums; NULL for a view's index, built in memory */
  unsigned chunk_log2;
  unsigned offset_shift; /* records give buffer offsets in units of 2^offset_shift bytes */
  uint32_t bucket_bits;
  uint64_t name_table; /* index-relative positions; the tensor table is at IDX_HEADER_SIZE */
  uint64_t bucket_table;
  uint64_t heap;
  uint64_t metadata_offset;
  uint32_t metadata_length;
  ReaderTensor **tensor_pages; /* tensor_count / TENSOR_PAGE + 1 of them, NULL until used */
  Bitmap *chunks_loaded;  /* copied and checked */
  Bitmap *records_valid;  /* tensors whose record is validated */
  Bitmap *tensors_ready;  /* ... and found in their validated bucket */
  Bitmap *buckets_ready;  /* buckets whose every entry is validated */
  pthread_mutex_t lock;   /* held while any of the above changes */
  bool lock_made;
  FileArena arena;        /* names and buffer entries */
  bool read_only;         /* tensors are read-only views of the source */
  const FileViewOps *view_ops; /* a file of another format (NULL: a Hurray file) */
  void *view;
  FileShards *shards; /* a sharded checkpoint: every query goes to a shard (NULL: one file) */
};

static bool bit_get(const Bitmap *map, uint64_t i) {
  return (atomic_load_explicit(&map[i / 64], memory_order_acquire) >> (i % 64)) & 1;
}

static void bit_set(Bitmap *map, uint64_t i) {
  atomic_fetch_or_explicit(&map[i / 64], (uint64_t)1 << (i % 64), memory_order_release);
}

static Bitmap *bitmap_new(uint64_t bits) {
  return calloc(bits / 64 + 1, sizeof(Bitmap));
}

/* Tensor `i`, whose page exists (it is being validated, or it is valid). */
static ReaderTensor *tensor_at(const HurrayFileReader *r, uint32_t i) {
  return &r->tensor_pages[i >> TENSOR_PAGE_LOG2][i & (TENSOR_PAGE - 1)];
}

/* The lazy state changes only under the lock; what it publishes is read without it. Queries
 * take a const reader (it is shared between threads) and change only that state. */
static HurrayFileReader *mutable(const HurrayFileReader *reader) {
  return (HurrayFileReader *)reader;
}

/* A value read from the file that a core validator calls an invalid argument is a malformed
 * file: HURRAY_EFORMAT, keeping the message. */
static int from_file(HurrayError *error, int status) {
  if (status != HURRAY_OK && status != HURRAY_EINVAL) return status;
  if (status == HURRAY_OK) return status;
  if (error != NULL) error->code = HURRAY_EFORMAT;
  return HURRAY_EFORMAT;
}

/* ---- header and chunk table (spec §3, §5.6; checks 1-8) ----------------------------------- */

static int read_header(HurrayFileReader *r, uint64_t *chunks_checksum, HurrayError *error) {
  uint64_t size = hurray__source_size(r->source);
  uint8_t h[HURRAY_FILE_HEADER_SIZE];
  size_t have = size < sizeof h ? (size_t)size : sizeof h;
  int status = hurray__source_read(r->source, 0, h, have, error);
  if (status != HURRAY_OK) return status;
  /* The magic first, as far as the file goes, so that any other file is named as such. */
  if (memcmp(h, FILE_MAGIC, have < FILE_MAGIC_SIZE ? have : FILE_MAGIC_SIZE) != 0) {
    return hurray__fail(error, HURRAY_EFORMAT, "not a Hurray file (bad magic)");
  }
  if (size < HURRAY_FILE_HEADER_SIZE) {
    return hurray__fail(error, HURRAY_EFORMAT,
                        "truncated: the file is %" PRIu64 " bytes, shorter than the %d-byte header",
                        size, HURRAY_FILE_HEADER_SIZE);
  }
  uint16_t major = hurray__load_le16(h + HDR_VERSION_MAJOR);
  uint16_t minor = hurray__load_le16(h + HDR_VERSION_MINOR);
  if (major != HURRAY_FILE_VERSION_MAJOR || minor > HURRAY_FILE_VERSION_MINOR) {
    return hurray__fail(error, HURRAY_EUNSUPPORTED,
                        "unsupported file format version %u.%u (this reader reads %d.0 to %d.%d)",
                        major, minor, HURRAY_FILE_VERSION_MAJOR, HURRAY_FILE_VERSION_MAJOR,
                        HURRAY_FILE_VERSION_MINOR);
  }
  if (hurray__xxh3(h, HDR_CHECKSUM) != hurray__load_le64(h + HDR_CHECKSUM)) {
    return hurray__fail(error, HURRAY_ECHECKSUM, "header checksum mismatch: the header is corrupt");
  }
  if (!hurray__all_zero(h + HDR_CHUNK_LOG2 + 1, 2) || !hurray__all_zero(h + HDR_RESERVED, 8)) {
    return hurray__fail(error, HURRAY_EFORMAT, "reserved header bytes are not zero");
  }
  uint8_t log2 = h[HDR_ALIGNMENT_LOG2];
  if (log2 < FILE_MIN_ALIGNMENT_LOG2 || log2 > FILE_MAX_ALIGNMENT_LOG2) {
    return hurray__fail(error, HURRAY_EALIGN, "alignment 2^%u is outside 2^%d .. 2^%d", log2,
                        FILE_MIN_ALIGNMENT_LOG2, FILE_MAX_ALIGNMENT_LOG2);
  }
  uint8_t chunk_log2 = h[HDR_CHUNK_LOG2];
  if (chunk_log2 < FILE_MIN_CHUNK_LOG2 || chunk_log2 > FILE_MAX_CHUNK_LOG2) {
    return hurray__fail(error, HURRAY_EFORMAT, "index chunk size 2^%u is outside 2^%d .. 2^%d",
                        chunk_log2, FILE_MIN_CHUNK_LOG2, FILE_MAX_CHUNK_LOG2);
  }
  uint64_t file_size = hurray__load_le64(h + HDR_FILE_SIZE);
  if (file_size != size) {
    return hurray__fail(error, HURRAY_EFORMAT,
                        "%s: the header records %" PRIu64 " bytes but the file has %" PRIu64,
                        size < file_size ? "truncated" : "trailing bytes", file_size, size);
  }
  uint64_t offset = hurray__load_le64(h + HDR_INDEX_OFFSET);
  uint64_t length = hurray__load_le64(h + HDR_INDEX_LENGTH);
  if (length > HURRAY_FILE_MAX_INDEX) {
    return hurray__fail(error, HURRAY_ELIMIT,
                        "the index is %" PRIu64 " bytes, more than the limit of %" PRIu64, length,
                        HURRAY_FILE_MAX_INDEX);
  }
  /* length <= 2^28 and chunk_log2 >= 12: at most 2^16 chunks. */
  uint64_t table = ((length + ((uint64_t)1 << chunk_log2) - 1) >> chunk_log2) * CHUNK_ENTRY_SIZE;
  uint64_t end = 0;
  if (length < IDX_HEADER_SIZE || offset < HURRAY_FILE_HEADER_SIZE ||
      hurray__add_u64(offset, length, &end) || hurray__add_u64(end, table, &end) || end != size) {
    return hurray__fail(error, HURRAY_EFORMAT,
                        "the index [%" PRIu64 ", +%" PRIu64 ") and its %" PRIu64
                        "-byte chunk table are not a region of at least %d bytes between the "
                        "header and the end of the file (%" PRIu64 " bytes)",
                        offset, length, table, IDX_HEADER_SIZE, size);
  }
  if (offset % 8 != 0) {
    return hurray__fail(error, HURRAY_EALIGN, "the index offset %" PRIu64 " is not a multiple of 8",
                        offset);
  }
  r->info = (HurrayFileInfo){.version_major = major,
                             .version_minor = minor,
                             .alignment = 1u << log2,
                             .file_size = size,
                             .index_offset = offset,
                             .index_length = length};
  r->chunk_log2 = chunk_log2;
  r->offset_shift = log2;
  *chunks_checksum = hurray__load_le64(h + HDR_CHUNK_TABLE_CHECKSUM);
  return HURRAY_OK;
}

/* Check 8: the chunk table, which guards every chunk of the index. */
static int read_chunk_table(HurrayFileReader *r, uint64_t checksum, HurrayError *error) {
  uint64_t length = r->info.index_length;
  size_t chunks = (size_t)((length + ((uint64_t)1 << r->chunk_log2) - 1) >> r->chunk_log2);
  size_t table = chunks * CHUNK_ENTRY_SIZE;
  r->chunk_table = malloc(table);
  r->index = malloc((size_t)length); /* pages are touched only as chunks are loaded */
  r->chunks_loaded = bitmap_new(chunks);
  if (r->chunk_table == NULL || r->index == NULL || r->chunks_loaded == NULL) {
    return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  }
  int status = hurray__source_read(r->source, r->info.index_offset + length, r->chunk_table, table,
                                   error);
  if (status == HURRAY_OK && hurray__xxh3(r->chunk_table, table) != checksum) {
    status = hurray__fail(error, HURRAY_ECHECKSUM,
                          "index checksum mismatch: the index's chunk table is corrupt");
  }
  return status;
}

/* Makes index bytes [offset, offset + len) (inside the index) usable: each chunk they touch is
 * copied into private memory and checked against its checksum, once. Under the lock. */
static int need(HurrayFileReader *r, uint64_t offset, uint64_t len, HurrayError *error) {
  if (r->chunk_table == NULL || len == 0) return HURRAY_OK;
  uint64_t chunk = (uint64_t)1 << r->chunk_log2;
  for (uint64_t c = offset >> r->chunk_log2; c <= (offset + len - 1) >> r->chunk_log2; c++) {
    if (bit_get(r->chunks_loaded, c)) continue;
    uint64_t start = c * chunk;
    uint64_t left = r->info.index_length - start;
    size_t n = (size_t)(left < chunk ? left : chunk);
    int status = hurray__source_read(r->source, r->info.index_offset + start, r->index + start, n,
                                     error);
    if (status != HURRAY_OK) return status;
    if (hurray__xxh3(r->index + start, n) != hurray__load_le64(r->chunk_table + c * 8)) {
      return hurray__fail(error, HURRAY_ECHECKSUM,
                          "index checksum mismatch: chunk %" PRIu64 " of the index is corrupt", c);
    }
    bit_set(r->chunks_loaded, c);
  }
  return HURRAY_OK;
}

/* ---- index header (check 9) --------------------------------------------------------------- */

static int read_index_header(HurrayFileReader *r, HurrayError *error) {
  int status = need(r, 0, IDX_HEADER_SIZE, error);
  if (status != HURRAY_OK) return status;
  const uint8_t *x = r->index;
  uint32_t tensors = hurray__load_le32(x + IDX_TENSOR_COUNT);
  uint32_t buffers = hurray__load_le32(x + IDX_BUFFER_COUNT);
  uint32_t bits = hurray__load_le32(x + IDX_BUCKET_BITS);
  if (tensors > HURRAY_FILE_MAX_TENSORS || buffers > HURRAY_FILE_MAX_BUFFERS ||
      bits > FILE_MAX_BUCKET_BITS) {
    return hurray__fail(error, HURRAY_ELIMIT,
                        "%" PRIu32 " tensors, %" PRIu32 " buffers or %" PRIu32
                        " bucket bits exceed the limits (%u, %u, %d)",
                        tensors, buffers, bits, HURRAY_FILE_MAX_TENSORS, HURRAY_FILE_MAX_BUFFERS,
                        FILE_MAX_BUCKET_BITS);
  }
  if (hurray__load_le32(x + 12) != 0 || hurray__load_le32(x + IDX_METADATA_LENGTH + 4) != 0 ||
      !hurray__all_zero(x + IDX_RESERVED, IDX_HEADER_SIZE - IDX_RESERVED)) {
    return hurray__fail(error, HURRAY_EFORMAT, "reserved index header bytes are not zero");
  }
  /* The limits above keep these sums far from overflow. */
  r->name_table = IDX_HEADER_SIZE + ((uint64_t)tensors + 1) * TABLE_ENTRY_SIZE;
  r->bucket_table = r->name_table + (uint64_t)tensors * TABLE_ENTRY_SIZE;
  r->heap = r->bucket_table + (((uint64_t)1 << bits) + 1) * TABLE_ENTRY_SIZE;
  if (r->heap > r->info.index_length) {
    return hurray__fail(error, HURRAY_EFORMAT,
                        "the index (%" PRIu64 " bytes) is too short for its tables (%" PRIu64
                        " bytes)",
                        r->info.index_length, r->heap);
  }
  r->metadata_offset = hurray__load_le64(x + IDX_METADATA_OFFSET);
  r->metadata_length = hurray__load_le32(x + IDX_METADATA_LENGTH);
  uint64_t end = 0;
  if (r->metadata_length > HURRAY_FILE_META_MAX_BYTES) {
    return hurray__fail(error, HURRAY_ELIMIT, "file metadata is %" PRIu32 " bytes, more than %u",
                        r->metadata_length, HURRAY_FILE_META_MAX_BYTES);
  }
  if (r->metadata_length == 0 ? r->metadata_offset != 0
                              : (r->metadata_offset < r->heap ||
                                 hurray__add_u64(r->metadata_offset, r->metadata_length, &end) ||
                                 end > r->info.index_length)) {
    return hurray__fail(error, HURRAY_EBOUNDS,
                        "file metadata [%" PRIu64 ", +%" PRIu32 ") is not a region of the heap",
                        r->metadata_offset, r->metadata_length);
  }
  r->info.tensor_count = tensors;
  r->info.buffer_count = buffers;
  r->info.data_bytes = hurray__load_le64(x + IDX_DATA_BYTES);
  r->bucket_bits = bits;
  r->tensor_pages = calloc(tensors / TENSOR_PAGE + 1, sizeof *r->tensor_pages);
  r->records_valid = bitmap_new(tensors);
  r->tensors_ready = bitmap_new(tensors);
  r->buckets_ready = bitmap_new((uint64_t)1 << bits);
  if (r->tensor_pages == NULL || r->records_valid == NULL || r->tensors_ready == NULL ||
      r->buckets_ready == NULL) {
    return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  }
  return HURRAY_OK;
}

/* ---- records (spec §6), validated on first use -------------------------------------------- */

/* Checks the decoded buffer entries of a Hurray file's record (spec §4): in the data region,
 * in order, not overlapping (a shared buffer repeats an earlier one's bytes, and is exempt:
 * check_index matches it with that one); an offset is a multiple of A by construction. */
static int check_buffers(const HurrayFileReader *r, const FileRecord *record, HurrayError *error) {
  uint64_t previous_end = HURRAY_FILE_HEADER_SIZE;
  for (uint32_t k = 0; k < record->buffer_count; k++) {
    const FileBufferEntry *b = &record->buffers[k];
    uint64_t end = 0;
    if (b->offset < HURRAY_FILE_HEADER_SIZE ||
        hurray__add_u64(b->offset, b->desc.byte_size, &end) || end > r->info.index_offset) {
      return hurray__fail(error, HURRAY_EBOUNDS,
                          "buffer %" PRIu32 ": [%" PRIu64 ", +%" PRIu64
                          ") lies outside the data region [%d, %" PRIu64 ")",
                          k, b->offset, b->desc.byte_size, HURRAY_FILE_HEADER_SIZE,
                          r->info.index_offset);
    }
    if (b->shared) continue;
    if (b->offset < previous_end) {
      return hurray__fail(error, HURRAY_EFORMAT,
                          "buffer %" PRIu32
                          " overlaps the buffer before it or is out of file order",
                          k);
    }
    previous_end = end;
  }
  return HURRAY_OK;
}

/* Decodes and validates tensor `i`'s record, once (check 11). Under the lock. */
static int validate_record(HurrayFileReader *r, uint32_t i, HurrayError *error) {
  if (bit_get(r->records_valid, i)) return HURRAY_OK;
  uint64_t entry = IDX_HEADER_SIZE + (uint64_t)i * TABLE_ENTRY_SIZE;
  int status = need(r, entry, 2 * TABLE_ENTRY_SIZE, error);
  if (status != HURRAY_OK) return status;
  uint32_t start = hurray__load_le32(r->index + entry);
  uint32_t end = hurray__load_le32(r->index + entry + TABLE_ENTRY_SIZE);
  if (start < r->heap || end < start || end > r->info.index_length) {
    status = hurray__fail(error, HURRAY_EBOUNDS,
                          "record [%" PRIu32 ", %" PRIu32 ") lies outside the index heap", start,
                          end);
    return hurray__error_prefix(error, status, "tensor %" PRIu32 " ", i);
  }
  status = need(r, start, end - start, error);
  FileArena scratch = {0};
  FileRecord record = {0};
  if (status == HURRAY_OK) {
    status = from_file(error, hurray__file_record_decode(r->index + start, end - start,
                                                         r->offset_shift, &scratch, &record,
                                                         error));
  }
  if (status == HURRAY_OK) {
    for (uint32_t k = 0; k < record.buffer_count; k++) {
      record.buffers[k].desc.alignment = r->info.alignment;
    }
    if (r->view_ops == NULL) status = check_buffers(r, &record, error);
    if (status == HURRAY_OK) {
      status = from_file(error, hurray__validate_against_entries(record.tensor, record.buffers,
                                                                 record.buffer_count, error));
    }
    if (status != HURRAY_OK) hurray__error_prefix(error, status, "'%s': ", record.name);
  }
  ReaderTensor **page = &r->tensor_pages[i >> TENSOR_PAGE_LOG2];
  if (status == HURRAY_OK && *page == NULL &&
      (*page = calloc(TENSOR_PAGE, sizeof **page)) == NULL) {
    status = hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  }
  ReaderTensor *t = status == HURRAY_OK ? tensor_at(r, i) : NULL;
  if (status == HURRAY_OK) {
    FileBufferEntry *buffers =
        hurray__arena_alloc(&r->arena, (record.buffer_count ? record.buffer_count : 1) *
                                           sizeof *buffers);
    const char *name =
        hurray__arena_strndup(&r->arena, (const uint8_t *)record.name, record.name_len);
    if (buffers == NULL || name == NULL) {
      status = hurray__fail(error, HURRAY_ENOMEM, "out of memory");
    } else {
      if (record.buffer_count > 0) {
        memcpy(buffers, record.buffers, record.buffer_count * sizeof *buffers);
      }
      *t = (ReaderTensor){.name = name,
                          .name_length = (uint32_t)record.name_len,
                          .record_offset = start,
                          .record_length = end - start,
                          .metadata_length = record.metadata_len,
                          .buffer_count = record.buffer_count,
                          .buffers = buffers,
                          .layout = (uint8_t)record.tensor->layout,
                          .dtype = record.tensor->dtype};
      for (uint32_t k = 0; k < t->buffer_count; k++) t->data_bytes += buffers[k].desc.byte_size;
    }
  }
  hurray__arena_free(&scratch);
  if (status != HURRAY_OK) return hurray__error_prefix(error, status, "tensor %" PRIu32 " ", i);
  bit_set(r->records_valid, i);
  return HURRAY_OK;
}

/* ---- the name table, one bucket at a time (spec §5.4, check 12) --------------------------- */

static uint32_t table_u32(const HurrayFileReader *r, uint64_t offset) {
  return hurray__load_le32(r->index + offset);
}

/* Validates bucket `b`, once: its range of the name table, every tensor there (record valid,
 * name hashing to this bucket, names strictly increasing by (hash, bytes), hence unique); its
 * tensors are then ready. Under the lock. */
static int validate_bucket(HurrayFileReader *r, uint64_t b, HurrayError *error) {
  if (bit_get(r->buckets_ready, b)) return HURRAY_OK;
  uint64_t entry = r->bucket_table + b * TABLE_ENTRY_SIZE;
  int status = need(r, entry, 2 * TABLE_ENTRY_SIZE, error);
  if (status != HURRAY_OK) return status;
  uint32_t lo = table_u32(r, entry), hi = table_u32(r, entry + TABLE_ENTRY_SIZE);
  if (lo > hi || hi > r->info.tensor_count) {
    return hurray__fail(error, HURRAY_EFORMAT,
                        "the bucket table is inconsistent: bucket %" PRIu64 " is [%" PRIu32
                        ", %" PRIu32 ") of %" PRIu32 " names",
                        b, lo, hi, r->info.tensor_count);
  }
  status = need(r, r->name_table + (uint64_t)lo * TABLE_ENTRY_SIZE,
                (uint64_t)(hi - lo) * TABLE_ENTRY_SIZE, error);
  uint64_t previous_hash = 0;
  const ReaderTensor *previous = NULL;
  for (uint32_t p = lo; p < hi && status == HURRAY_OK; p++) {
    uint32_t i = table_u32(r, r->name_table + (uint64_t)p * TABLE_ENTRY_SIZE);
    if (i >= r->info.tensor_count) {
      return hurray__fail(error, HURRAY_EFORMAT,
                          "name table entry %" PRIu32 " names tensor %" PRIu32 " of %" PRIu32, p,
                          i, r->info.tensor_count);
    }
    status = validate_record(r, i, error);
    if (status != HURRAY_OK) break;
    const ReaderTensor *t = tensor_at(r, i);
    uint64_t hash = hurray__xxh3(t->name, t->name_length);
    if (hurray__bucket_of(hash, r->bucket_bits) != b) {
      return hurray__fail(error, HURRAY_EFORMAT,
                          "name table: tensor '%s' is listed in bucket %" PRIu64 ", not its own",
                          t->name, b);
    }
    int order = previous == NULL ? -1
                : previous_hash != hash
                    ? (previous_hash < hash ? -1 : 1)
                    : hurray__compare_bytes(previous->name, previous->name_length, t->name,
                                            t->name_length);
    if (order == 0) {
      return hurray__fail(error, HURRAY_EFORMAT, "duplicate tensor name '%s'", t->name);
    }
    if (order > 0) {
      return hurray__fail(error, HURRAY_EFORMAT, "name table is not sorted at tensor '%s'",
                          t->name);
    }
    previous = t;
    previous_hash = hash;
  }
  if (status != HURRAY_OK) return status;
  for (uint32_t p = lo; p < hi; p++) {
    bit_set(r->tensors_ready, table_u32(r, r->name_table + (uint64_t)p * TABLE_ENTRY_SIZE));
  }
  bit_set(r->buckets_ready, b);
  return HURRAY_OK;
}

/* Tensor `i` ready for use: its record valid and the tensor found under its name. Under the
 * lock. */
static int ready_locked(HurrayFileReader *r, uint32_t i, HurrayError *error) {
  if (bit_get(r->tensors_ready, i)) return HURRAY_OK;
  int status = validate_record(r, i, error);
  const ReaderTensor *t = status == HURRAY_OK ? tensor_at(r, i) : NULL;
  if (status == HURRAY_OK) {
    uint64_t hash = hurray__xxh3(t->name, t->name_length);
    status = validate_bucket(r, hurray__bucket_of(hash, r->bucket_bits), error);
  }
  if (status == HURRAY_OK && !bit_get(r->tensors_ready, i)) {
    status = hurray__fail(error, HURRAY_EFORMAT,
                          "tensor %" PRIu32 " '%s' is missing from the name table", i, t->name);
  }
  return status;
}

static int check_tensor(const HurrayFileReader *r, uint32_t index, const char *function,
                        HurrayError *error) {
  if (r == NULL) return hurray__fail(error, HURRAY_EINVAL, "%s: reader is NULL", function);
  if (index < r->info.tensor_count) return HURRAY_OK;
  return hurray__fail(error, HURRAY_EINVAL,
                      "%s: tensor %" PRIu32 " is past the %" PRIu32 " tensors of the file",
                      function, index, r->info.tensor_count);
}

/* Checks the arguments, then makes tensor `index` ready; `*out` is it. */
static int use_tensor(const HurrayFileReader *reader, uint32_t index, const char *function,
                      const ReaderTensor **out, HurrayError *error) {
  int status = check_tensor(reader, index, function, error);
  if (status != HURRAY_OK) return status;
  HurrayFileReader *r = mutable(reader);
  if (!bit_get(r->tensors_ready, index)) {
    pthread_mutex_lock(&r->lock);
    status = ready_locked(r, index, error);
    pthread_mutex_unlock(&r->lock);
  }
  *out = status == HURRAY_OK ? tensor_at(r, index) : NULL;
  return status;
}

/* ---- the whole index, eagerly (verify) ---------------------------------------------------- */

/* A shared buffer (spec §4) has the offset, size and checksum of an unshared buffer before it:
 * found by its offset among `seen`, which are in file order. */
static int find_shared(const FileBufferEntry *const *seen, uint32_t count,
                       const FileBufferEntry *b, uint32_t i, const char *name, uint32_t k,
                       HurrayError *error) {
  uint32_t lo = 0, hi = count;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (seen[mid]->offset < b->offset) lo = mid + 1;
    else hi = mid;
  }
  if (lo < count && seen[lo]->offset == b->offset &&
      seen[lo]->desc.byte_size == b->desc.byte_size && seen[lo]->checksum == b->checksum) {
    return HURRAY_OK;
  }
  return hurray__fail(error, HURRAY_EFORMAT,
                      "tensor %" PRIu32 " '%s', buffer %" PRIu32
                      ": it is shared, but no buffer before it has its offset, size and checksum",
                      i, name, k);
}

/* Everything a lazy reader may defer (spec §9): every chunk, record, bucket and the bucket
 * table's order, the buffers' file order and the index header's totals, the file metadata.
 * Under the lock. */
static int check_index(HurrayFileReader *r, HurrayError *error) {
  int status = need(r, 0, r->info.index_length, error);
  uint32_t count = r->info.tensor_count;
  for (uint32_t i = 0; i < count && status == HURRAY_OK; i++) status = ready_locked(r, i, error);
  /* Buckets share their bounds, so with the first at 0 and the last ending at the count, and
   * each valid, they cover every name-table entry once. */
  uint64_t buckets = (uint64_t)1 << r->bucket_bits;
  uint64_t last = r->bucket_table + buckets * TABLE_ENTRY_SIZE;
  if (status == HURRAY_OK &&
      (table_u32(r, r->bucket_table) != 0 || table_u32(r, last) != count)) {
    status = hurray__fail(error, HURRAY_EFORMAT,
                          "the bucket table is inconsistent: it does not cover the %" PRIu32
                          " names",
                          count);
  }
  for (uint64_t b = 0; b < buckets && status == HURRAY_OK; b++) {
    status = validate_bucket(r, b, error);
  }
  uint64_t buffers = 0, bytes = 0, previous_end = HURRAY_FILE_HEADER_SIZE;
  bool overflow = false;
  for (uint32_t i = 0; i < count && status == HURRAY_OK; i++) {
    buffers += tensor_at(r, i)->buffer_count;
    overflow |= hurray__add_u64(bytes, tensor_at(r, i)->data_bytes, &bytes); /* shared: 2^64 */
  }
  if (status == HURRAY_OK &&
      (overflow || buffers != r->info.buffer_count || bytes != r->info.data_bytes)) {
    status = hurray__fail(error, HURRAY_EFORMAT,
                          "the index header counts %" PRIu32 " buffers of %" PRIu64
                          " bytes but the records hold %" PRIu64 " of %" PRIu64 "%s",
                          r->info.buffer_count, r->info.data_bytes, buffers, bytes,
                          overflow ? " (overflowing)" : "");
  }
  /* The unshared buffers so far, in file order, for each shared one to be found among. */
  const FileBufferEntry **seen = NULL;
  if (status == HURRAY_OK && r->view_ops == NULL && buffers > 0) {
    seen = malloc((size_t)buffers * sizeof *seen);
    if (seen == NULL) status = hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  }
  uint32_t unshared = 0;
  for (uint32_t i = 0; seen != NULL && i < count && status == HURRAY_OK; i++) {
    const ReaderTensor *t = tensor_at(r, i);
    for (uint32_t k = 0; k < t->buffer_count && status == HURRAY_OK; k++) {
      const FileBufferEntry *b = &t->buffers[k];
      if (b->shared) {
        status = find_shared(seen, unshared, b, i, t->name, k, error);
      } else if (b->offset < previous_end) {
        status = hurray__fail(error, HURRAY_EFORMAT,
                              "tensor %" PRIu32 " '%s', buffer %" PRIu32
                              ": it overlaps the buffer before it or is out of file order",
                              i, t->name, k);
      } else {
        seen[unshared++] = b;
        previous_end = b->offset + b->desc.byte_size;
      }
    }
  }
  free(seen);
  if (status == HURRAY_OK) {
    status =
        hurray__meta_decode_max(r->index + r->metadata_offset, r->metadata_length,
                                HURRAY_FILE_META_MAX_BYTES, NULL, NULL, error);
    if (status != HURRAY_OK) hurray__error_prefix(error, status, "file metadata: ");
  }
  return status;
}

/* ---- open --------------------------------------------------------------------------------- */

/* A reader over `source` (SINK), with its lock. */
static HurrayFileReader *reader_new(FileSource *source) {
  HurrayFileReader *r = calloc(1, sizeof *r);
  if (r == NULL) return NULL;
  r->source = source;
  r->lock_made = pthread_mutex_init(&r->lock, NULL) == 0;
  if (!r->lock_made) {
    free(r);
    return NULL;
  }
  return r;
}

int hurray__reader_open_source(FileSource *source, HurrayFileReader **out, HurrayError *error) {
  HurrayFileReader *r = reader_new(source);
  if (r == NULL) {
    hurray__source_release(source);
    return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  }
  uint64_t chunks_checksum = 0;
  int status = read_header(r, &chunks_checksum, error);
  if (status == HURRAY_OK) status = read_chunk_table(r, chunks_checksum, error);
  if (status == HURRAY_OK) status = read_index_header(r, error);
  if (status == HURRAY_OK) status = hurray__source_map(source, r->info.alignment, error);
  if (status != HURRAY_OK) {
    hurray_file_reader_destroy(r);
    return status;
  }
  r->info.format = HURRAY_FORMAT_HURRAY;
  r->read_only = hurray__source_read_only(source);
  *out = r;
  return HURRAY_OK;
}

int hurray__reader_open_view(FileView *view, HurrayFileReader **out, HurrayError *error) {
  HurrayFileReader *r = reader_new(view->source);
  if (r == NULL) {
    view->ops->destroy(view->view);
    free(view->index);
    hurray__source_release(view->source);
    return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  }
  r->info = view->info;
  r->info.index_offset = 0;
  r->info.index_length = view->index_length;
  r->index = view->index;
  r->read_only = view->read_only;
  r->view_ops = view->ops;
  r->view = view->view;
  int status = read_index_header(r, error);
  if (status != HURRAY_OK) {
    hurray_file_reader_destroy(r);
    return status;
  }
  *out = r;
  return HURRAY_OK;
}

int hurray_file_reader_open_memory(const void *data, uint64_t size, HurrayOwnerReleaseFn release,
                                   void *owner, HurrayFileReader **out, HurrayError *error) {
  if (out == NULL) {
    if (release != NULL) release(owner);
    return hurray__fail(error, HURRAY_EINVAL, "hurray_file_reader_open_memory: out is NULL");
  }
  FileSource *source = NULL;
  int status = hurray__source_memory(data, size, release, owner, &source, error);
  return status == HURRAY_OK ? hurray__reader_open_source(source, out, error) : status;
}

static int shard_locate(const HurrayFileReader *r, uint32_t index, const char *function,
                        uint32_t *shard, uint32_t *local, HurrayError *error);

const FileSource *hurray__reader_source(const HurrayFileReader *reader, uint32_t index,
                                        bool *checksummed) {
  if (reader->shards != NULL) {
    uint32_t shard = 0, local = 0;
    if (shard_locate(reader, index, "", &shard, &local, NULL) != HURRAY_OK) return NULL;
    return hurray__reader_source(reader->shards->readers[shard], local, checksummed);
  }
  *checksummed = reader->view_ops == NULL;
  return reader->source;
}

void hurray_file_reader_destroy(HurrayFileReader *reader) {
  if (reader == NULL) return;
  hurray__reader_shards_free(reader->shards);
  if (reader->view_ops != NULL) reader->view_ops->destroy(reader->view);
  if (reader->source != NULL) hurray__source_close_file(reader->source); /* verify's */
  hurray__source_release(reader->source);
  hurray__arena_free(&reader->arena);
  for (uint32_t p = 0; reader->tensor_pages != NULL && p <= reader->info.tensor_count / TENSOR_PAGE;
       p++) {
    free(reader->tensor_pages[p]);
  }
  free(reader->tensor_pages);
  free(reader->chunks_loaded);
  free(reader->records_valid);
  free(reader->tensors_ready);
  free(reader->buckets_ready);
  free(reader->chunk_table);
  free(reader->index);
  if (reader->lock_made) pthread_mutex_destroy(&reader->lock);
  free(reader);
}

/* ---- sharded checkpoints ------------------------------------------------------------------ */

void hurray__reader_shards_free(FileShards *shards) {
  if (shards == NULL) return;
  for (uint32_t k = 0; shards->readers != NULL && k < shards->count; k++)
    hurray_file_reader_destroy(shards->readers[k]);
  free(shards->readers);
  free(shards->first);
  hurray__arena_free(&shards->arena);
  free(shards);
}

int hurray__reader_open_shards(FileShards *shards, const HurrayFileInfo *info,
                               HurrayFileReader **out, HurrayError *error) {
  HurrayFileReader *r = reader_new(NULL);
  if (r == NULL) {
    hurray__reader_shards_free(shards);
    return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  }
  r->shards = shards;
  r->info = *info;
  *out = r;
  return HURRAY_OK;
}

/* Tensor `index` of sharded reader `r`: its shard and its number there. */
static int shard_locate(const HurrayFileReader *r, uint32_t index, const char *function,
                        uint32_t *shard, uint32_t *local, HurrayError *error) {
  const FileShards *s = r->shards;
  if (index >= s->first[s->count]) {
    return hurray__fail(error, HURRAY_EINVAL, "%s: tensor %" PRIu32 " of %" PRIu32, function,
                        index, s->first[s->count]);
  }
  uint32_t lo = 0, hi = s->count; /* the last shard whose first tensor is <= index */
  while (hi - lo > 1) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (s->first[mid] <= index) lo = mid; else hi = mid;
  }
  *shard = lo;
  *local = index - s->first[lo];
  return HURRAY_OK;
}

/* A shard's failure, naming the shard. */
static int shard_failed(const HurrayFileReader *r, uint32_t shard, int status,
                        HurrayError *error) {
  if (status == HURRAY_OK) return status;
  return hurray__error_prefix(error, status, "shard '%s': ", r->shards->names[shard]);
}

/* `call` on the shard holding tensor `index`, with `sub` its reader and `local` the tensor's
 * number there; a failure names the shard. */
#define ROUTE(reader, index, function, call)                                               \
  do {                                                                                     \
    uint32_t shard_ = 0, local = 0;                                                        \
    int route_status_ = shard_locate((reader), (index), (function), &shard_, &local, error); \
    if (route_status_ != HURRAY_OK) return route_status_;                                  \
    const HurrayFileReader *sub = (reader)->shards->readers[shard_];                       \
    return shard_failed((reader), shard_, (call), error);                                  \
  } while (0)

typedef struct ShardProgress {
  HurrayFileProgressFn fn;
  void *context;
  uint64_t before; /* bytes of the shards verified before this one */
  uint64_t total;
} ShardProgress;

static void shard_progress(void *context, uint64_t done, uint64_t total) {
  (void)total;
  ShardProgress *p = context;
  p->fn(p->context, p->before + done, p->total);
}

/* verify of HURRAY_FILE_WHOLE or HURRAY_FILE_INDEX: each shard's, in shard order, progress
 * counting over all of them. */
static int shards_verify(const HurrayFileReader *r, uint32_t index, HurrayFileProgressFn progress,
                         void *context, HurrayError *error) {
  const FileShards *s = r->shards;
  ShardProgress p = {.fn = progress, .context = context, .total = r->info.data_bytes};
  for (uint32_t k = 0; k < s->count; k++) {
    HurrayFileInfo info;
    int status = hurray_file_reader_info(s->readers[k], &info, error);
    if (status == HURRAY_OK) {
      status = hurray_file_reader_verify(s->readers[k], index, progress ? shard_progress : NULL,
                                         &p, error);
    }
    if (status != HURRAY_OK) return shard_failed(r, k, status, error);
    p.before += info.data_bytes;
  }
  if (progress != NULL && s->count == 0) progress(context, 0, 0);
  return HURRAY_OK;
}

static int shards_find(const HurrayFileReader *r, const char *name, uint32_t *index,
                       HurrayError *error) {
  const FileShards *s = r->shards;
  uint32_t lo = 0, hi = s->entry_count;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    int order = strcmp(s->entries[mid].name, name);
    if (order == 0) {
      *index = s->first[s->entries[mid].shard] + s->entries[mid].local;
      return HURRAY_OK;
    }
    if (order < 0) lo = mid + 1; else hi = mid;
  }
  return hurray__fail(error, HURRAY_EINVAL, "no tensor named '%.*s'",
                      (int)strnlen(name, HURRAY_MAX_NAME + 1), name);
}

/* ---- queries ------------------------------------------------------------------------------ */

int hurray_file_reader_info(const HurrayFileReader *reader, HurrayFileInfo *out,
                            HurrayError *error) {
  if (reader == NULL || out == NULL) {
    return hurray__fail(error, HURRAY_EINVAL, "hurray_file_reader_info: %s is NULL",
                        reader == NULL ? "reader" : "out");
  }
  *out = reader->info;
  return HURRAY_OK;
}

int hurray_file_reader_tensor_info(const HurrayFileReader *reader, uint32_t index,
                                   HurrayFileTensorInfo *out, HurrayError *error) {
  if (reader != NULL && reader->shards != NULL) ROUTE(reader, index, "hurray_file_reader_tensor_info", hurray_file_reader_tensor_info(sub, local, out, error));
  const ReaderTensor *t = NULL;
  int status = use_tensor(reader, index, "hurray_file_reader_tensor_info", &t, error);
  if (status != HURRAY_OK) return status;
  if (out == NULL) return hurray__fail(error, HURRAY_EINVAL, "out is NULL");
  *out = (HurrayFileTensorInfo){.name = t->name,
                                .buffer_count = t->buffer_count,
                                .layout = t->layout,
                                .dtype = t->dtype,
                                .data_bytes = t->data_bytes};
  return HURRAY_OK;
}

int hurray_file_reader_buffer_info(const HurrayFileReader *reader, uint32_t index, uint32_t buffer,
                                   HurrayFileBufferInfo *out, HurrayError *error) {
  if (reader != NULL && reader->shards != NULL) ROUTE(reader, index, "hurray_file_reader_buffer_info", hurray_file_reader_buffer_info(sub, local, buffer, out, error));
  const ReaderTensor *t = NULL;
  int status = use_tensor(reader, index, "hurray_file_reader_buffer_info", &t, error);
  if (status != HURRAY_OK) return status;
  if (out == NULL || buffer >= t->buffer_count) {
    return hurray__fail(error, HURRAY_EINVAL, "tensor '%s' has %" PRIu32 " buffers, not %" PRIu32,
                        t->name, t->buffer_count, buffer);
  }
  const FileBufferEntry *b = &t->buffers[buffer];
  *out = (HurrayFileBufferInfo){
      .desc = b->desc, .offset = b->offset, .checksum = b->checksum, .role = b->role};
  return HURRAY_OK;
}

int hurray_file_reader_find(const HurrayFileReader *reader, const char *name, uint32_t *index,
                            HurrayError *error) {
  if (reader == NULL || name == NULL || index == NULL) {
    return hurray__fail(error, HURRAY_EINVAL, "hurray_file_reader_find: an argument is NULL");
  }
  if (reader->shards != NULL) return shards_find(reader, name, index, error);
  HurrayFileReader *r = mutable(reader);
  size_t len = strnlen(name, HURRAY_MAX_NAME + 1);
  if (len > 0 && len <= HURRAY_MAX_NAME) {
    uint64_t b = hurray__bucket_of(hurray__xxh3(name, len), r->bucket_bits);
    if (!bit_get(r->buckets_ready, b)) {
      pthread_mutex_lock(&r->lock);
      int status = validate_bucket(r, b, error);
      pthread_mutex_unlock(&r->lock);
      if (status != HURRAY_OK) return status;
    }
    uint64_t entry = r->bucket_table + b * TABLE_ENTRY_SIZE;
    for (uint32_t p = table_u32(r, entry); p < table_u32(r, entry + TABLE_ENTRY_SIZE); p++) {
      uint32_t i = table_u32(r, r->name_table + (uint64_t)p * TABLE_ENTRY_SIZE);
      const ReaderTensor *t = tensor_at(r, i);
      if (t->name_length == len && memcmp(t->name, name, len) == 0) {
        *index = i;
        return HURRAY_OK;
      }
    }
  }
  return hurray__fail(error, HURRAY_EINVAL, "no tensor named '%.*s'", (int)len, name);
}

/* Decodes ready tensor `t`'s record into `arena`. */
static int decode_tensor(const HurrayFileReader *r, const ReaderTensor *t, FileArena *arena,
                         FileRecord *record, HurrayError *error) {
  return hurray__file_record_decode(r->index + t->record_offset, t->record_length,
                                    r->offset_shift, arena, record, error);
}

int hurray_file_reader_describe(const HurrayFileReader *reader, uint32_t index,
                                HurrayTensorDesc **out, HurrayError *error) {
  if (reader != NULL && reader->shards != NULL) ROUTE(reader, index, "hurray_file_reader_describe", hurray_file_reader_describe(sub, local, out, error));
  const ReaderTensor *t = NULL;
  int status = use_tensor(reader, index, "hurray_file_reader_describe", &t, error);
  if (status != HURRAY_OK) return status;
  FileArena arena = {0};
  FileRecord record;
  status = decode_tensor(reader, t, &arena, &record, error);
  if (status == HURRAY_OK) status = hurray_tensor_desc_clone(record.tensor, out, error);
  hurray__arena_free(&arena);
  return status;
}

static int checksum_mismatch(const ReaderTensor *t, uint32_t buffer, uint64_t computed,
                             HurrayError *error) {
  const FileBufferEntry *b = &t->buffers[buffer];
  return hurray__fail(error, HURRAY_ECHECKSUM,
                      "tensor '%s', buffer %" PRIu32
                      " (%s): checksum mismatch (stored "
                      "%016" PRIx64 ", computed %016" PRIx64 ")",
                      t->name, buffer, hurray_buffer_role_name(b->role), b->checksum, computed);
}

/* Bytes [offset, offset + len) of buffer `k` of tensor `index` as a new CPU buffer. A view's
 * tensors have one buffer each, which the view numbers as the tensor. */
static int read_buffer(const HurrayFileReader *r, uint32_t index, uint32_t k, uint64_t offset,
                       uint64_t len, uint32_t alignment, HurrayBuffer **out, HurrayError *error) {
  if (r->view_ops != NULL) return r->view_ops->buffer(r->view, index, offset, len, out, error);
  return hurray__source_buffer(r->source, tensor_at(r, index)->buffers[k].offset + offset, len,
                               alignment, out, error);
}

/* Checks buffer `k` of tensor `index`, got as `buffer`, against its checksum. */
static int check_buffer(const HurrayFileReader *r, uint32_t index, uint32_t k,
                        const HurrayBuffer *buffer, HurrayError *error) {
  const ReaderTensor *t = tensor_at(r, index);
  if (r->view_ops != NULL) return r->view_ops->verify(r->view, index, error);
  uint64_t computed = hurray__xxh3(buffer->data, (size_t)t->buffers[k].desc.byte_size);
  return computed == t->buffers[k].checksum ? HURRAY_OK
                                            : checksum_mismatch(t, k, computed, error);
}

int hurray_file_reader_get(const HurrayFileReader *reader, uint32_t index, uint32_t flags,
                           HurrayTensorContext **out, HurrayError *error) {
  if (reader != NULL && reader->shards != NULL) ROUTE(reader, index, "hurray_file_reader_get", hurray_file_reader_get(sub, local, flags, out, error));
  const ReaderTensor *t = NULL;
  int status = use_tensor(reader, index, "hurray_file_reader_get", &t, error);
  if (status != HURRAY_OK) return status;
  if (out == NULL || (flags & ~(HURRAY_VALIDATE_CONTENTS | HURRAY_FILE_GET_VERIFY))) {
    return hurray__fail(error, HURRAY_EINVAL,
                        "hurray_file_reader_get: out is NULL or flags "
                        "0x%" PRIX32 " include unknown bits",
                        flags);
  }
  HurrayBufferList *list = NULL;
  status = hurray_buffer_list_create(t->buffer_count, &list, error);
  for (uint32_t k = 0; k < t->buffer_count && status == HURRAY_OK; k++) {
    const FileBufferEntry *b = &t->buffers[k];
    HurrayBuffer *buffer = NULL;
    status = read_buffer(reader, index, k, 0, b->desc.byte_size, reader->info.alignment, &buffer,
                         error);
    if (status == HURRAY_OK) status = hurray_buffer_list_append(list, buffer, b->role, NULL, error);
    if (status == HURRAY_OK && (flags & HURRAY_FILE_GET_VERIFY)) {
      status = check_buffer(reader, index, k, buffer, error);
    }
  }
  FileArena arena = {0};
  FileRecord record;
  if (status == HURRAY_OK) status = decode_tensor(reader, t, &arena, &record, error);
  if (status == HURRAY_OK && (flags & HURRAY_VALIDATE_CONTENTS)) {
    status = hurray_tensor_validate(record.tensor, list, HURRAY_VALIDATE_CONTENTS, error);
    if (status != HURRAY_OK) hurray__error_prefix(error, status, "tensor '%s': ", t->name);
  }
  if (status == HURRAY_OK) {
    uint32_t context_flags = reader->read_only ? HURRAY_BUFFER_READ_ONLY : 0;
    status = hurray_tensor_context_create(record.tensor, list, context_flags, NULL, NULL, out,
                                          error); /* SINK for the list */
  } else {
    hurray_buffer_list_destroy(list);
  }
  hurray__arena_free(&arena);
  return status;
}

/* The first-axis stride of a dense array, in elements. */
static int64_t row_stride(const HurrayArray *a) {
  if (a->strides != NULL) return a->strides[0];
  int64_t stride = 1;
  for (int32_t k = 1; k < a->ndim; k++) stride *= a->shape[k]; /* validated: no overflow */
  return stride;
}

/* Rows [start, stop) of a validated dense tensor as `rows`, over the bytes [*first, *end) of
 * its buffer that they address, *first rounded down to 64 bytes; byte offsets are made
 * relative to *first. */
static int slice_rows(const ReaderTensor *t, HurrayTensorDesc *rows, HurrayArray *values,
                      int64_t shape[HURRAY_MAX_NDIM], int64_t start, int64_t stop, uint64_t *first,
                      uint64_t *end, HurrayError *error) {
  memcpy(shape, rows->shape, (size_t)rows->ndim * sizeof *shape);
  shape[0] = stop - start;
  *values = rows->parts[0];
  rows->shape = values->shape = shape; /* a dense tensor's values have its shape */
  rows->parts = values;
  uint64_t begin = 0, numel = 0;
  int status = hurray_array_numel(values, &numel, error);
  if (status != HURRAY_OK || numel == 0) { /* no elements: an empty buffer */
    values->byte_offset = *first = *end = 0;
    return status;
  }
  const HurrayDTypeInfo *dtype = hurray_dtype_info(values->dtype);
  int64_t skip = start * row_stride(values) * dtype->bits; /* row `start` exists: it fits */
  if (skip % 8 != 0) {
    return hurray__fail(error, HURRAY_EUNSUPPORTED,
                        "row %" PRId64 " of %s tensor '%s' does not start on a byte", start,
                        dtype->name, t->name);
  }
  values->byte_offset = (uint64_t)((int64_t)values->byte_offset + skip / 8);
  status = hurray_array_span(values, &begin, end, error);
  *first = begin & ~(uint64_t)(HURRAY_MIN_ALIGNMENT - 1);
  values->byte_offset -= *first;
  return status;
}

int hurray_file_reader_get_rows(const HurrayFileReader *reader, uint32_t index, int64_t start,
                                int64_t stop, HurrayTensorContext **out, HurrayError *error) {
  if (reader != NULL && reader->shards != NULL) ROUTE(reader, index, "hurray_file_reader_get_rows", hurray_file_reader_get_rows(sub, local, start, stop, out, error));
  const ReaderTensor *t = NULL;
  int status = use_tensor(reader, index, "hurray_file_reader_get_rows", &t, error);
  if (status != HURRAY_OK) return status;
  if (out == NULL) return hurray__fail(error, HURRAY_EINVAL, "out is NULL");
  FileArena arena = {0};
  FileRecord record;
  status = decode_tensor(reader, t, &arena, &record, error);
  HurrayTensorDesc rows = status == HURRAY_OK ? *record.tensor : (HurrayTensorDesc){0};
  if (status == HURRAY_OK && rows.layout != HURRAY_LAYOUT_DENSE) {
    status = hurray__fail(error, HURRAY_EUNSUPPORTED,
                          "tensor '%s' is %s: rows can be read from dense tensors only", t->name,
                          hurray_layout_name((int)rows.layout));
  } else if (status == HURRAY_OK &&
             (rows.ndim == 0 || start < 0 || start > stop || stop > rows.shape[0])) {
    status =
        hurray__fail(error, HURRAY_EINVAL,
                     "rows [%" PRId64 ", %" PRId64
                     ") are not a range of the %s of tensor "
                     "'%s'",
                     start, stop, rows.ndim == 0 ? "no rows (it is 0-d)" : "first axis", t->name);
  }
  HurrayArray values;
  int64_t shape[HURRAY_MAX_NDIM];
  uint64_t first = 0, end = 0;
  if (status == HURRAY_OK) {
    status = slice_rows(t, &rows, &values, shape, start, stop, &first, &end, error);
  }
  HurrayBufferList *list = NULL;
  if (status == HURRAY_OK) status = hurray_buffer_list_create(1, &list, error);
  if (status == HURRAY_OK) {
    const FileBufferEntry *b = &t->buffers[values.buffer];
    HurrayBuffer *buffer = NULL;
    status = read_buffer(reader, index, values.buffer, first, end - first, HURRAY_MIN_ALIGNMENT,
                         &buffer, error);
    if (status == HURRAY_OK) status = hurray_buffer_list_append(list, buffer, b->role, NULL, error);
  }
  if (status == HURRAY_OK) {
    values.buffer = 0;
    uint32_t context_flags = reader->read_only ? HURRAY_BUFFER_READ_ONLY : 0;
    status = hurray_tensor_context_create(&rows, list, context_flags, NULL, NULL, out,
                                          error); /* SINK for the list */
  } else {
    hurray_buffer_list_destroy(list);
  }
  hurray__arena_free(&arena);
  return status;
}

/* The last unshared buffer of tensor `t` before buffer `k` (k = buffer_count: of all), or NULL. */
static const FileBufferEntry *last_unshared(const ReaderTensor *t, uint32_t k) {
  while (k-- > 0) {
    if (!t->buffers[k].shared) return &t->buffers[k];
  }
  return NULL;
}

/* Where the padding before unshared buffer `k` of tensor `index` begins (the end of the
 * unshared buffer before it in the file, or of the header), and whether it is the file's last
 * unshared buffer. Tensors around it are made ready as far as it takes to find buffers.
 * Shared buffers own no bytes of the file (spec §4). Under the lock. */
static int buffer_neighbours(HurrayFileReader *r, uint32_t index, uint32_t k, uint64_t *before,
                             bool *last, HurrayError *error) {
  const ReaderTensor *t = tensor_at(r, index);
  int status = HURRAY_OK;
  *before = HURRAY_FILE_HEADER_SIZE;
  const FileBufferEntry *previous = last_unshared(t, k);
  for (uint32_t j = index; previous == NULL && j-- > 0 && status == HURRAY_OK;) {
    status = ready_locked(r, j, error);
    const ReaderTensor *p = tensor_at(r, j);
    if (status == HURRAY_OK) previous = last_unshared(p, p->buffer_count);
  }
  if (previous != NULL) *before = previous->offset + previous->desc.byte_size;
  *last = last_unshared(t, t->buffer_count) == &t->buffers[k];
  for (uint32_t j = index + 1; *last && j < r->info.tensor_count && status == HURRAY_OK; j++) {
    status = ready_locked(r, j, error);
    const ReaderTensor *n = tensor_at(r, j);
    if (status == HURRAY_OK && last_unshared(n, n->buffer_count) != NULL) *last = false;
  }
  if (status == HURRAY_OK && t->buffers[k].offset < *before) {
    status = hurray__fail(error, HURRAY_EFORMAT,
                          "buffer %" PRIu32
                          " overlaps the buffer before it or is out of file order",
                          k);
  }
  return status;
}

/* The zero padding before buffer `k` of tensor `index` (from the end of the one before, or of
 * the header), and after it when it is the file's last (up to the index). */
static int check_padding(const HurrayFileReader *reader, uint32_t index, uint32_t k,
                         HurrayError *error) {
  HurrayFileReader *r = mutable(reader);
  uint64_t before = 0;
  bool last = false;
  if (tensor_at(r, index)->buffers[k].shared) return HURRAY_OK; /* its bytes' owner checks it */
  pthread_mutex_lock(&r->lock);
  int status = buffer_neighbours(r, index, k, &before, &last, error);
  pthread_mutex_unlock(&r->lock);
  const FileBufferEntry *b = &tensor_at(r, index)->buffers[k];
  if (status == HURRAY_OK) {
    status = hurray__source_check_zero(r->source, before, b->offset - before,
                                       "padding in the data region", error);
  }
  if (status == HURRAY_OK && last) {
    uint64_t end = b->offset + b->desc.byte_size;
    status = hurray__source_check_zero(r->source, end, r->info.index_offset - end,
                                       "padding in the data region", error);
  }
  return status;
}

int hurray_file_reader_verify(const HurrayFileReader *reader, uint32_t index,
                              HurrayFileProgressFn progress, void *context, HurrayError *error) {
  if (reader != NULL && reader->shards != NULL) {
    if (index == HURRAY_FILE_WHOLE || index == HURRAY_FILE_INDEX)
      return shards_verify(reader, index, progress, context, error);
    ROUTE(reader, index, "hurray_file_reader_verify",
          hurray_file_reader_verify(sub, local, progress, context, error));
  }
  uint32_t first = index, last = index;
  int status = HURRAY_OK;
  if (index == HURRAY_FILE_INDEX && reader != NULL) {
    HurrayFileReader *r = mutable(reader);
    pthread_mutex_lock(&r->lock);
    status = check_index(r, error);
    pthread_mutex_unlock(&r->lock);
    return status;
  }
  if (index == HURRAY_FILE_WHOLE && reader != NULL) {
    first = 0;
    last = reader->info.tensor_count; /* exclusive; the loop below runs none for 0 tensors */
    HurrayFileReader *r = mutable(reader);
    pthread_mutex_lock(&r->lock);
    status = check_index(r, error);
    pthread_mutex_unlock(&r->lock);
  } else {
    const ReaderTensor *t = NULL;
    status = use_tensor(reader, index, "hurray_file_reader_verify", &t, error);
    last = index + 1;
  }
  if (status != HURRAY_OK) return status;
  if (index == HURRAY_FILE_WHOLE && reader->view_ops == NULL && reader->info.buffer_count == 0) {
    status = hurray__source_check_zero(reader->source, HURRAY_FILE_HEADER_SIZE,
                                       reader->info.index_offset - HURRAY_FILE_HEADER_SIZE,
                                       "padding in the data region", error);
    if (status != HURRAY_OK) return status;
  }
  FileProgress p = {.fn = progress, .context = context};
  for (uint32_t i = first; i < last; i++) p.total += tensor_at(reader, i)->data_bytes;
  if (progress != NULL) progress(context, 0, p.total); /* the start */
  for (uint32_t i = first; i < last; i++) {
    const ReaderTensor *t = tensor_at(reader, i);
    for (uint32_t k = 0; k < t->buffer_count; k++) {
      const FileBufferEntry *b = &t->buffers[k];
      if (reader->view_ops != NULL) {
        status = reader->view_ops->verify(reader->view, i, error);
        if (status != HURRAY_OK) return status;
        p.done += b->desc.byte_size;
        if (progress != NULL) progress(context, p.done, p.total);
        continue;
      }
      uint64_t computed = 0;
      status = check_padding(reader, i, k, error);
      if (status == HURRAY_OK) {
        status = hurray__source_hash(reader->source, b->offset, b->desc.byte_size, &p, &computed,
                                     error);
      }
      if (status != HURRAY_OK) {
        return hurray__error_prefix(error, status, "tensor '%s', buffer %" PRIu32 ": ", t->name,
                                    k);
      }
      if (computed != b->checksum) return checksum_mismatch(t, k, computed, error);
    }
  }
  return HURRAY_OK;
}

int hurray_file_reader_metadata(const HurrayFileReader *reader, uint32_t index,
                                HurrayMetaValue **out, HurrayError *error) {
  if (reader != NULL && reader->shards != NULL) { /* the file metadata: the first shard's */
    if (index == HURRAY_FILE_WHOLE && out != NULL && reader->shards->count == 0)
      return hurray__meta_decode_tree(NULL, 0, out, error);
    if (index == HURRAY_FILE_WHOLE && out != NULL) {
      return shard_failed(reader, 0,
                          hurray_file_reader_metadata(reader->shards->readers[0], index, out,
                                                      error),
                          error);
    }
    ROUTE(reader, index, "hurray_file_reader_metadata",
          hurray_file_reader_metadata(sub, local, out, error));
  }
  const ReaderTensor *t = NULL;
  int status = HURRAY_OK;
  if (index != HURRAY_FILE_WHOLE || reader == NULL) {
    status = use_tensor(reader, index, "hurray_file_reader_metadata", &t, error);
    if (status != HURRAY_OK) return status;
  }
  if (out == NULL) return hurray__fail(error, HURRAY_EINVAL, "out is NULL");
  if (index == HURRAY_FILE_WHOLE) {
    HurrayFileReader *r = mutable(reader);
    pthread_mutex_lock(&r->lock);
    status = need(r, r->metadata_offset, r->metadata_length, error);
    pthread_mutex_unlock(&r->lock);
    if (status != HURRAY_OK) return status;
    status = hurray__meta_decode_tree_max(reader->index + reader->metadata_offset,
                                          reader->metadata_length, HURRAY_FILE_META_MAX_BYTES,
                                          out, error);
    if (status != HURRAY_OK) hurray__error_prefix(error, status, "file metadata: ");
    return status;
  }
  /* A record ends with its metadata (spec §6). */
  const uint8_t *record = reader->index + t->record_offset;
  return hurray__meta_decode_tree(record + t->record_length - t->metadata_length,
                                  t->metadata_length, out, error);
}
