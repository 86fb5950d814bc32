/* reader.c -- HurrayFileReader: opens a file as untrusted input, validates the header and the
 * whole index in the order of spec §9, and then serves lookups, descriptors, tensors, row
 * slices, checksum verification and metadata. The index is copied into private memory before
 * it is validated, so nothing that changes the file later can change what was checked; after
 * open the reader is immutable and safe to share between threads. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "file.h"

typedef struct ReaderTensor {
  const char *name; /* in the reader's arena */
  uint64_t record_offset;
  uint32_t record_length;
  uint32_t name_length;
  uint32_t first_buffer;
  uint32_t buffer_count;
  uint64_t data_bytes;
  uint8_t layout;
  uint8_t dtype;
} ReaderTensor;

struct HurrayFileReader {
  FileSource *source;
  HurrayFileInfo info;
  uint8_t *index; /* private copy of the index bytes */
  uint32_t bucket_bits;
  uint64_t tensor_table; /* index-relative positions */
  uint64_t name_table;
  uint64_t bucket_table;
  uint64_t heap;
  uint64_t metadata_offset;
  uint32_t metadata_length;
  ReaderTensor *tensors;
  FileBufferEntry *buffers;
  FileArena names;
  bool read_only;           /* tensors are read-only views of the source */
  const FileViewOps *view_ops; /* a file of another format (NULL: a Hurray file) */
  void *view;
};

/* ---- header (spec §3, checks 1-7) --------------------------------------------------------- */

static int read_header(HurrayFileReader *r, uint64_t *index_checksum, HurrayError *error) {
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
  if (!hurray__all_zero(h + HDR_ALIGNMENT_LOG2 + 1, 3) || !hurray__all_zero(h + HDR_RESERVED, 8)) {
    return hurray__fail(error, HURRAY_EFORMAT, "reserved header bytes are not zero");
  }
  uint8_t log2 = h[HDR_ALIGNMENT_LOG2];
  if (log2 < FILE_MIN_ALIGNMENT_LOG2 || log2 > FILE_MAX_ALIGNMENT_LOG2) {
    return hurray__fail(error, HURRAY_EALIGN, "alignment 2^%u is outside 2^%d .. 2^%d", log2,
                        FILE_MIN_ALIGNMENT_LOG2, FILE_MAX_ALIGNMENT_LOG2);
  }
  uint64_t file_size = hurray__load_le64(h + HDR_FILE_SIZE);
  if (file_size != size) {
    return hurray__fail(error, HURRAY_EFORMAT,
                        "%s: the header records %" PRIu64 " bytes but the file has %" PRIu64,
                        size < file_size ? "truncated" : "trailing bytes", file_size, size);
  }
  uint64_t offset = hurray__load_le64(h + HDR_INDEX_OFFSET);
  uint64_t length = hurray__load_le64(h + HDR_INDEX_LENGTH);
  uint64_t end = 0;
  if (length > HURRAY_FILE_MAX_INDEX) {
    return hurray__fail(error, HURRAY_ELIMIT,
                        "the index is %" PRIu64 " bytes, more than the limit of %" PRIu64, length,
                        HURRAY_FILE_MAX_INDEX);
  }
  if (length < IDX_HEADER_SIZE || offset < HURRAY_FILE_HEADER_SIZE ||
      hurray__add_u64(offset, length, &end) || end != size) {
    return hurray__fail(error, HURRAY_EFORMAT,
                        "the index [%" PRIu64 ", +%" PRIu64
                        ") is not a region of at least %d "
                        "bytes between the header and the end of the file (%" PRIu64 " bytes)",
                        offset, length, IDX_HEADER_SIZE, size);
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
  *index_checksum = hurray__load_le64(h + HDR_INDEX_CHECKSUM);
  return HURRAY_OK;
}

/* Check 8, over a private copy of the index: what is validated is what is used. */
static int read_index(HurrayFileReader *r, uint64_t checksum, HurrayError *error) {
  size_t length = (size_t)r->info.index_length; /* <= HURRAY_FILE_MAX_INDEX */
  r->index = malloc(length);
  if (r->index == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  int status = hurray__source_read(r->source, r->info.index_offset, r->index, length, error);
  if (status == HURRAY_OK && hurray__xxh3(r->index, length) != checksum) {
    status = hurray__fail(error, HURRAY_ECHECKSUM, "index checksum mismatch: the index is corrupt");
  }
  return status;
}

/* A value read from the file that a core validator calls an invalid argument is a malformed
 * file: HURRAY_EFORMAT, keeping the message. */
static int from_file(HurrayError *error, int status) {
  if (status != HURRAY_EINVAL) return status;
  if (error != NULL) error->code = HURRAY_EFORMAT;
  return HURRAY_EFORMAT;
}

/* ---- index header and buffer table (checks 9, 10) -----------------------------------------------
 */

static int read_index_header(HurrayFileReader *r, HurrayError *error) {
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
  if (hurray__load_le32(x + 12) != 0 ||
      !hurray__all_zero(x + IDX_RESERVED, IDX_HEADER_SIZE - IDX_RESERVED)) {
    return hurray__fail(error, HURRAY_EFORMAT, "reserved index header bytes are not zero");
  }
  /* The limits above keep these sums far from overflow. */
  r->tensor_table = IDX_HEADER_SIZE + (uint64_t)buffers * BUFFER_ENTRY_SIZE;
  r->name_table = r->tensor_table + (uint64_t)tensors * TENSOR_ENTRY_SIZE;
  r->bucket_table = r->name_table + (uint64_t)tensors * NAME_ENTRY_SIZE;
  uint64_t tables_end = r->bucket_table + (((uint64_t)1 << bits) + 1) * BUCKET_ENTRY_SIZE;
  r->heap = hurray__pad8(tables_end);
  if (r->heap > r->info.index_length) {
    return hurray__fail(error, HURRAY_EFORMAT,
                        "the index (%" PRIu64 " bytes) is too short for its tables (%" PRIu64
                        " bytes)",
                        r->info.index_length, r->heap);
  }
  if (!hurray__all_zero(x + tables_end, (size_t)(r->heap - tables_end))) {
    return hurray__fail(error, HURRAY_EFORMAT, "padding after the bucket table is not zero");
  }
  r->metadata_offset = hurray__load_le64(x + IDX_METADATA_OFFSET);
  r->metadata_length = hurray__load_le32(x + IDX_METADATA_LENGTH);
  uint64_t end = 0;
  if (r->metadata_length > HURRAY_META_MAX_BYTES) {
    return hurray__fail(error, HURRAY_ELIMIT, "file metadata is %" PRIu32 " bytes, more than %u",
                        r->metadata_length, HURRAY_META_MAX_BYTES);
  }
  if (r->metadata_length == 0 ? r->metadata_offset != 0
                              : (r->metadata_offset % 8 != 0 || r->metadata_offset < r->heap ||
                                 hurray__add_u64(r->metadata_offset, r->metadata_length, &end) ||
                                 end > r->info.index_length)) {
    return hurray__fail(error, HURRAY_EBOUNDS,
                        "file metadata [%" PRIu64 ", +%" PRIu32
                        ") is not an 8-aligned region "
                        "of the heap",
                        r->metadata_offset, r->metadata_length);
  }
  r->info.tensor_count = tensors;
  r->info.buffer_count = buffers;
  r->bucket_bits = bits;
  return HURRAY_OK;
}

static int read_buffer_table(HurrayFileReader *r, HurrayError *error) {
  uint32_t count = r->info.buffer_count;
  uint32_t alignment = r->info.alignment;
  r->buffers = malloc((count ? count : 1) * sizeof *r->buffers);
  if (r->buffers == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  uint64_t previous_end = HURRAY_FILE_HEADER_SIZE;
  for (uint32_t i = 0; i < count; i++) {
    const uint8_t *e = r->index + IDX_HEADER_SIZE + (uint64_t)i * BUFFER_ENTRY_SIZE;
    FileBufferEntry *b = &r->buffers[i];
    int status = from_file(error, hurray_desc_decode(e, &b->desc, error));
    if (status != HURRAY_OK) return hurray__error_prefix(error, status, "buffer %" PRIu32 ": ", i);
    b->offset = hurray__load_le64(e + 16);
    b->checksum = hurray__load_le64(e + 24);
    b->role = e[32];
    uint64_t size = b->desc.byte_size, end = 0;
    if (b->desc.device_tag != HURRAY_DEVICE_CPU || b->desc.memory_class != HURRAY_MEM_DEVICE ||
        b->desc.sync_mode != HURRAY_SYNC_READY || b->desc.device_id != 0) {
      return hurray__fail(error, HURRAY_EFORMAT,
                          "buffer %" PRIu32 ": its descriptor is not cpu:0/device/ready", i);
    }
    if (b->desc.alignment != alignment) {
      return hurray__fail(error, HURRAY_EALIGN,
                          "buffer %" PRIu32 ": its descriptor's alignment %" PRIu32
                          " is not the file's %" PRIu32,
                          i, b->desc.alignment, alignment);
    }
    if (hurray_buffer_role_name(b->role) == NULL || !hurray__all_zero(e + 33, 7)) {
      return hurray__fail(error, HURRAY_EFORMAT,
                          "buffer %" PRIu32 ": role %u is unknown or reserved bytes are not zero",
                          i, b->role);
    }
    if (b->offset % alignment != 0) {
      return hurray__fail(error, HURRAY_EALIGN,
                          "buffer %" PRIu32 ": offset %" PRIu64
                          " is misaligned (the file's "
                          "alignment is %" PRIu32 ")",
                          i, b->offset, alignment);
    }
    if (b->offset < HURRAY_FILE_HEADER_SIZE || hurray__add_u64(b->offset, size, &end) ||
        end > r->info.index_offset) {
      return hurray__fail(error, HURRAY_EBOUNDS,
                          "buffer %" PRIu32 ": [%" PRIu64 ", +%" PRIu64
                          ") lies outside the data "
                          "region [%d, %" PRIu64 ")",
                          i, b->offset, size, HURRAY_FILE_HEADER_SIZE, r->info.index_offset);
    }
    if (b->offset < previous_end) {
      return hurray__fail(error, HURRAY_EFORMAT,
                          "buffers %" PRIu32 " and %" PRIu32 " overlap or are out of file order",
                          i - 1, i);
    }
    previous_end = end;
    r->info.data_bytes += size; /* disjoint regions of the file: cannot overflow */
  }
  return HURRAY_OK;
}

/* ---- tensors (check 11) ------------------------------------------------------------------- */

static const uint8_t *record_bytes(const HurrayFileReader *r, const ReaderTensor *t) {
  return r->index + t->record_offset;
}

static int read_tensor(HurrayFileReader *r, uint32_t i, uint32_t first, FileArena *scratch,
                       HurrayError *error) {
  const uint8_t *e = r->index + r->tensor_table + (uint64_t)i * TENSOR_ENTRY_SIZE;
  ReaderTensor *t = &r->tensors[i];
  *t = (ReaderTensor){.record_offset = hurray__load_le64(e),
                      .record_length = hurray__load_le32(e + 8),
                      .first_buffer = hurray__load_le32(e + 12),
                      .buffer_count = hurray__load_le32(e + 16)};
  uint64_t end = 0;
  if (hurray__load_le32(e + 20) != 0) {
    return hurray__fail(error, HURRAY_EFORMAT, "reserved bytes are not zero");
  }
  if (t->buffer_count > HURRAY_MAX_BUFFERS) {
    return hurray__fail(error, HURRAY_ELIMIT, "%" PRIu32 " buffers exceed the limit of %u",
                        t->buffer_count, HURRAY_MAX_BUFFERS);
  }
  if (t->first_buffer != first || (uint64_t)first + t->buffer_count > r->info.buffer_count) {
    return hurray__fail(error, HURRAY_EFORMAT,
                        "buffers [%" PRIu32 ", +%" PRIu32
                        ") do not follow the previous tensor's "
                        "(expected first buffer %" PRIu32 " of %" PRIu32 ")",
                        t->first_buffer, t->buffer_count, first, r->info.buffer_count);
  }
  if (t->record_offset % 8 != 0) {
    return hurray__fail(error, HURRAY_EALIGN, "record offset %" PRIu64 " is not a multiple of 8",
                        t->record_offset);
  }
  if (t->record_offset < r->heap || hurray__add_u64(t->record_offset, t->record_length, &end) ||
      end > r->info.index_length) {
    return hurray__fail(error, HURRAY_EBOUNDS,
                        "record [%" PRIu64 ", +%" PRIu32 ") lies outside the index heap",
                        t->record_offset, t->record_length);
  }
  FileRecord record;
  int status = from_file(
      error, hurray__record_decode(record_bytes(r, t), t->record_length, scratch, &record, error));
  if (status != HURRAY_OK) return status;
  status = from_file(error, hurray__validate_against_entries(record.tensor, r->buffers + first,
                                                             t->buffer_count, error));
  if (status != HURRAY_OK) {
    return hurray__error_prefix(error, status, "'%s': ", record.name);
  }
  t->name = hurray__arena_strndup(&r->names, (const uint8_t *)record.name, record.name_len);
  if (t->name == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  t->name_length = (uint32_t)record.name_len;
  t->layout = (uint8_t)record.tensor->layout;
  t->dtype = record.tensor->dtype;
  for (uint32_t k = 0; k < t->buffer_count; k++)
    t->data_bytes += r->buffers[first + k].desc.byte_size;
  return HURRAY_OK;
}

static int read_tensor_table(HurrayFileReader *r, HurrayError *error) {
  uint32_t count = r->info.tensor_count;
  r->tensors = calloc(count ? count : 1, sizeof *r->tensors);
  if (r->tensors == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  uint32_t first = 0;
  for (uint32_t i = 0; i < count; i++) {
    FileArena scratch = {0};
    int status = read_tensor(r, i, first, &scratch, error);
    hurray__arena_free(&scratch);
    if (status != HURRAY_OK) return hurray__error_prefix(error, status, "tensor %" PRIu32 " ", i);
    first += r->tensors[i].buffer_count;
  }
  if (first != r->info.buffer_count) {
    return hurray__fail(error, HURRAY_EFORMAT,
                        "the tensors own %" PRIu32 " buffers but the index lists %" PRIu32, first,
                        r->info.buffer_count);
  }
  return HURRAY_OK;
}

/* ---- name and bucket tables (check 12) ---------------------------------------------------- */

static uint64_t name_hash(const HurrayFileReader *r, uint32_t position) {
  return hurray__load_le64(r->index + r->name_table + (uint64_t)position * NAME_ENTRY_SIZE);
}

static uint32_t name_tensor(const HurrayFileReader *r, uint32_t position) {
  return hurray__load_le32(r->index + r->name_table + (uint64_t)position * NAME_ENTRY_SIZE + 8);
}

static uint32_t bucket_start(const HurrayFileReader *r, uint64_t bucket) {
  return hurray__load_le32(r->index + r->bucket_table + bucket * BUCKET_ENTRY_SIZE);
}

static int read_name_table(HurrayFileReader *r, HurrayError *error) {
  uint32_t count = r->info.tensor_count;
  uint8_t *seen = calloc(count ? count : 1, 1);
  if (seen == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  int status = HURRAY_OK;
  const ReaderTensor *previous = NULL;
  for (uint32_t i = 0; i < count && status == HURRAY_OK; i++) {
    uint64_t hash = name_hash(r, i);
    uint32_t t = name_tensor(r, i);
    const uint8_t *e = r->index + r->name_table + (uint64_t)i * NAME_ENTRY_SIZE;
    if (hurray__load_le32(e + 12) != 0 || t >= count || seen[t]) {
      status = hurray__fail(error, HURRAY_EFORMAT,
                            "name table entry %" PRIu32 " (tensor %" PRIu32
                            ") is not a distinct "
                            "tensor or has reserved bytes set",
                            i, t);
      break;
    }
    seen[t] = 1;
    const ReaderTensor *tensor = &r->tensors[t];
    if (hash != hurray__xxh3(tensor->name, tensor->name_length)) {
      status = hurray__fail(error, HURRAY_EFORMAT, "name table: wrong hash for tensor '%s'",
                            tensor->name);
      break;
    }
    int order = 0;
    if (previous != NULL) {
      uint64_t before = name_hash(r, i - 1);
      order = before != hash ? (before < hash ? -1 : 1)
                             : hurray__compare_bytes(previous->name, previous->name_length,
                                                     tensor->name, tensor->name_length);
    }
    if (order == 0 && previous != NULL) {
      status = hurray__fail(error, HURRAY_EFORMAT, "duplicate tensor name '%s'", tensor->name);
    } else if (order > 0) {
      status = hurray__fail(error, HURRAY_EFORMAT, "name table is not sorted at tensor '%s'",
                            tensor->name);
    }
    previous = tensor;
  }
  free(seen);
  if (status != HURRAY_OK) return status;
  uint64_t buckets = (uint64_t)1 << r->bucket_bits;
  bool valid = bucket_start(r, 0) == 0 && bucket_start(r, buckets) == count;
  for (uint64_t b = 0; b < buckets && valid; b++) {
    valid = bucket_start(r, b) <= bucket_start(r, b + 1);
  }
  for (uint32_t i = 0; i < count && valid; i++) {
    uint64_t b = hurray__bucket_of(name_hash(r, i), r->bucket_bits);
    valid = bucket_start(r, b) <= i && i < bucket_start(r, b + 1);
  }
  if (!valid) return hurray__fail(error, HURRAY_EFORMAT, "the bucket table is inconsistent");
  return HURRAY_OK;
}

/* ---- open --------------------------------------------------------------------------------- */

static int open_source(FileSource *source, HurrayFileReader **out, HurrayError *error) {
  HurrayFileReader *r = calloc(1, sizeof *r);
  if (r == NULL) {
    hurray__source_release(source);
    return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  }
  r->source = source;
  uint64_t index_checksum = 0;
  int status = read_header(r, &index_checksum, error);
  if (status == HURRAY_OK) status = read_index(r, index_checksum, error);
  if (status == HURRAY_OK) status = read_index_header(r, error);
  if (status == HURRAY_OK) status = read_buffer_table(r, error);
  if (status == HURRAY_OK) status = read_tensor_table(r, error);
  if (status == HURRAY_OK) status = read_name_table(r, error);
  if (status == HURRAY_OK) {
    status =
        hurray__meta_decode(r->index + r->metadata_offset, r->metadata_length, NULL, NULL, error);
    if (status != HURRAY_OK) hurray__error_prefix(error, status, "file metadata: ");
  }
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
  HurrayFileReader *r = calloc(1, sizeof *r);
  if (r == NULL) {
    view->ops->destroy(view->view);
    free(view->index);
    free(view->buffers);
    hurray__source_release(view->source);
    return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  }
  *r = (HurrayFileReader){.source = view->source,
                          .info = view->info,
                          .index = view->index,
                          .metadata_offset = view->metadata_offset,
                          .metadata_length = view->metadata_length,
                          .buffers = view->buffers,
                          .read_only = view->read_only,
                          .view_ops = view->ops,
                          .view = view->view};
  uint32_t count = r->info.tensor_count;
  r->info.index_offset = 0;
  r->info.index_length = view->index_length;
  r->bucket_bits = hurray__bucket_bits(count);
  r->name_table = (uint64_t)count * TENSOR_ENTRY_SIZE;
  r->bucket_table = r->name_table + (uint64_t)count * NAME_ENTRY_SIZE;
  r->heap = hurray__pad8(r->bucket_table + (((uint64_t)1 << r->bucket_bits) + 1) * BUCKET_ENTRY_SIZE);
  for (uint32_t i = 0; i < r->info.buffer_count; i++) r->info.data_bytes += r->buffers[i].desc.byte_size;
  int status = read_tensor_table(r, error);
  if (status == HURRAY_OK) status = read_name_table(r, error);
  if (status == HURRAY_OK) {
    status =
        hurray__meta_decode(r->index + r->metadata_offset, r->metadata_length, NULL, NULL, error);
    if (status != HURRAY_OK) hurray__error_prefix(error, status, "file metadata: ");
  }
  if (status != HURRAY_OK) {
    hurray_file_reader_destroy(r);
    return status;
  }
  *out = r;
  return HURRAY_OK;
}

/* Whether the file starts as a Hurray file does (as far as it goes), or cannot be read: then
 * opening it as one reports the problem. */
static bool starts_as_hurray(const FileSource *source) {
  uint8_t magic[FILE_MAGIC_SIZE];
  uint64_t size = hurray__source_size(source);
  size_t have = size < sizeof magic ? (size_t)size : sizeof magic;
  return hurray__source_read(source, 0, magic, have, NULL) != HURRAY_OK ||
         memcmp(magic, FILE_MAGIC, have) == 0;
}

int hurray_file_reader_open(const char *path, uint32_t flags, HurrayFileReader **out,
                            HurrayError *error) {
  if (path == NULL || out == NULL) {
    return hurray__fail(error, HURRAY_EINVAL, "hurray_file_reader_open: %s is NULL",
                        path == NULL ? "path" : "out");
  }
  if (flags & ~(HURRAY_FILE_OPEN_PREAD | HURRAY_FILE_OPEN_FOREIGN | HURRAY_FILE_OPEN_WRITABLE)) {
    return hurray__fail(error, HURRAY_EINVAL, "open flags 0x%" PRIX32 " include unknown bits",
                        flags);
  }
  FileSource *source = NULL;
  int status = hurray__source_open(path, flags, &source, error);
  if (status == HURRAY_OK && (flags & HURRAY_FILE_OPEN_FOREIGN) && !starts_as_hurray(source)) {
    hurray__source_release(source);
    return hurray__view_open(path, flags, out, error);
  }
  return status == HURRAY_OK ? open_source(source, out, error) : status;
}

int hurray_file_reader_open_memory(const void *data, uint64_t size, HurrayOwnerReleaseFn release,
                                   void *owner, HurrayFileReader **out, HurrayError *error) {
  if (out == NULL) {
    if (release != NULL) release(owner);
    return hurray__fail(error, HURRAY_EINVAL, "hurray_file_reader_open_memory: out is NULL");
  }
  FileSource *source = NULL;
  int status = hurray__source_memory(data, size, release, owner, &source, error);
  return status == HURRAY_OK ? open_source(source, out, error) : status;
}

const FileSource *hurray__reader_source(const HurrayFileReader *reader) {
  return reader->source;
}

void hurray_file_reader_destroy(HurrayFileReader *reader) {
  if (reader == NULL) return;
  if (reader->view_ops != NULL) reader->view_ops->destroy(reader->view);
  if (reader->source != NULL) hurray__source_close_file(reader->source); /* verify's */
  hurray__source_release(reader->source);
  hurray__arena_free(&reader->names);
  free(reader->tensors);
  free(reader->buffers);
  free(reader->index);
  free(reader);
}

/* ---- queries ------------------------------------------------------------------------------ */

static int check_tensor(const HurrayFileReader *r, uint32_t index, const char *function,
                        HurrayError *error) {
  if (r == NULL) return hurray__fail(error, HURRAY_EINVAL, "%s: reader is NULL", function);
  if (index < r->info.tensor_count) return HURRAY_OK;
  return hurray__fail(error, HURRAY_EINVAL,
                      "%s: tensor %" PRIu32 " is past the %" PRIu32 " tensors of the file",
                      function, index, r->info.tensor_count);
}

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
  int status = check_tensor(reader, index, "hurray_file_reader_tensor_info", error);
  if (status != HURRAY_OK) return status;
  if (out == NULL) return hurray__fail(error, HURRAY_EINVAL, "out is NULL");
  const ReaderTensor *t = &reader->tensors[index];
  *out = (HurrayFileTensorInfo){.name = t->name,
                                .buffer_count = t->buffer_count,
                                .layout = t->layout,
                                .dtype = t->dtype,
                                .data_bytes = t->data_bytes};
  return HURRAY_OK;
}

int hurray_file_reader_buffer_info(const HurrayFileReader *reader, uint32_t index, uint32_t buffer,
                                   HurrayFileBufferInfo *out, HurrayError *error) {
  int status = check_tensor(reader, index, "hurray_file_reader_buffer_info", error);
  if (status != HURRAY_OK) return status;
  const ReaderTensor *t = &reader->tensors[index];
  if (out == NULL || buffer >= t->buffer_count) {
    return hurray__fail(error, HURRAY_EINVAL, "tensor '%s' has %" PRIu32 " buffers, not %" PRIu32,
                        t->name, t->buffer_count, buffer);
  }
  const FileBufferEntry *b = &reader->buffers[t->first_buffer + buffer];
  *out = (HurrayFileBufferInfo){
      .desc = b->desc, .offset = b->offset, .checksum = b->checksum, .role = b->role};
  return HURRAY_OK;
}

int hurray_file_reader_find(const HurrayFileReader *reader, const char *name, uint32_t *index,
                            HurrayError *error) {
  if (reader == NULL || name == NULL || index == NULL) {
    return hurray__fail(error, HURRAY_EINVAL, "hurray_file_reader_find: an argument is NULL");
  }
  size_t len = strnlen(name, HURRAY_MAX_NAME + 1);
  if (len > 0 && len <= HURRAY_MAX_NAME) {
    uint64_t hash = hurray__xxh3(name, len);
    uint64_t bucket = hurray__bucket_of(hash, reader->bucket_bits);
    for (uint32_t i = bucket_start(reader, bucket); i < bucket_start(reader, bucket + 1); i++) {
      const ReaderTensor *t = &reader->tensors[name_tensor(reader, i)];
      if (name_hash(reader, i) == hash && t->name_length == len &&
          memcmp(t->name, name, len) == 0) {
        *index = name_tensor(reader, i);
        return HURRAY_OK;
      }
    }
  }
  return hurray__fail(error, HURRAY_EINVAL, "no tensor named '%.*s'", (int)len, name);
}

/* Decodes tensor `index`'s record (validated on open) into `arena`. */
static int decode_tensor(const HurrayFileReader *r, uint32_t index, FileArena *arena,
                         FileRecord *record, HurrayError *error) {
  const ReaderTensor *t = &r->tensors[index];
  return hurray__record_decode(record_bytes(r, t), t->record_length, arena, record, error);
}

int hurray_file_reader_describe(const HurrayFileReader *reader, uint32_t index,
                                HurrayTensorDesc **out, HurrayError *error) {
  int status = check_tensor(reader, index, "hurray_file_reader_describe", error);
  if (status != HURRAY_OK) return status;
  FileArena arena = {0};
  FileRecord record;
  status = decode_tensor(reader, index, &arena, &record, error);
  if (status == HURRAY_OK) status = hurray_tensor_desc_clone(record.tensor, out, error);
  hurray__arena_free(&arena);
  return status;
}

static int checksum_mismatch(const HurrayFileReader *r, uint32_t index, uint32_t buffer,
                             uint64_t computed, HurrayError *error) {
  const ReaderTensor *t = &r->tensors[index];
  const FileBufferEntry *b = &r->buffers[t->first_buffer + buffer];
  return hurray__fail(error, HURRAY_ECHECKSUM,
                      "tensor '%s', buffer %" PRIu32
                      " (%s): checksum mismatch (stored "
                      "%016" PRIx64 ", computed %016" PRIx64 ")",
                      t->name, buffer, hurray_buffer_role_name(b->role), b->checksum, computed);
}

/* Bytes [offset, offset + len) of buffer `buffer` (of the file) as a new CPU buffer. */
static int read_buffer(const HurrayFileReader *r, uint32_t buffer, uint64_t offset, uint64_t len,
                       uint32_t alignment, HurrayBuffer **out, HurrayError *error) {
  if (r->view_ops != NULL) return r->view_ops->buffer(r->view, buffer, offset, len, out, error);
  return hurray__source_buffer(r->source, r->buffers[buffer].offset + offset, len, alignment, out,
                               error);
}

/* Checks buffer `k` of tensor `index`, got as `buffer`, against its checksum. */
static int check_buffer(const HurrayFileReader *r, uint32_t index, uint32_t k,
                        const HurrayBuffer *buffer, HurrayError *error) {
  const ReaderTensor *t = &r->tensors[index];
  if (r->view_ops != NULL) return r->view_ops->verify(r->view, t->first_buffer + k, error);
  const FileBufferEntry *b = &r->buffers[t->first_buffer + k];
  uint64_t computed = hurray__xxh3(buffer->data, (size_t)b->desc.byte_size);
  return computed == b->checksum ? HURRAY_OK : checksum_mismatch(r, index, k, computed, error);
}

int hurray_file_reader_get(const HurrayFileReader *reader, uint32_t index, uint32_t flags,
                           HurrayTensorContext **out, HurrayError *error) {
  int status = check_tensor(reader, index, "hurray_file_reader_get", error);
  if (status != HURRAY_OK) return status;
  if (out == NULL || (flags & ~(HURRAY_VALIDATE_CONTENTS | HURRAY_FILE_GET_VERIFY))) {
    return hurray__fail(error, HURRAY_EINVAL,
                        "hurray_file_reader_get: out is NULL or flags "
                        "0x%" PRIX32 " include unknown bits",
                        flags);
  }
  const ReaderTensor *t = &reader->tensors[index];
  HurrayBufferList *list = NULL;
  status = hurray_buffer_list_create(t->buffer_count, &list, error);
  for (uint32_t k = 0; k < t->buffer_count && status == HURRAY_OK; k++) {
    const FileBufferEntry *b = &reader->buffers[t->first_buffer + k];
    HurrayBuffer *buffer = NULL;
    status = read_buffer(reader, t->first_buffer + k, 0, b->desc.byte_size,
                         reader->info.alignment, &buffer, error);
    if (status == HURRAY_OK) status = hurray_buffer_list_append(list, buffer, b->role, NULL, error);
    if (status == HURRAY_OK && (flags & HURRAY_FILE_GET_VERIFY)) {
      status = check_buffer(reader, index, k, buffer, error);
    }
  }
  FileArena arena = {0};
  FileRecord record;
  if (status == HURRAY_OK) status = decode_tensor(reader, index, &arena, &record, error);
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
  int status = check_tensor(reader, index, "hurray_file_reader_get_rows", error);
  if (status != HURRAY_OK) return status;
  if (out == NULL) return hurray__fail(error, HURRAY_EINVAL, "out is NULL");
  const ReaderTensor *t = &reader->tensors[index];
  FileArena arena = {0};
  FileRecord record;
  status = decode_tensor(reader, index, &arena, &record, error);
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
    const FileBufferEntry *b = &reader->buffers[t->first_buffer + values.buffer];
    HurrayBuffer *buffer = NULL;
    status = read_buffer(reader, t->first_buffer + values.buffer, first, end - first,
                         HURRAY_MIN_ALIGNMENT, &buffer, error);
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

/* The zero padding before global buffer `k` (from the end of the one before, or of the
 * header), and after it when it is the file's last (up to the index). */
static int check_padding(const HurrayFileReader *r, uint32_t k, HurrayError *error) {
  uint64_t before = k == 0 ? HURRAY_FILE_HEADER_SIZE
                           : r->buffers[k - 1].offset + r->buffers[k - 1].desc.byte_size;
  const FileBufferEntry *b = &r->buffers[k];
  int status = hurray__source_check_zero(r->source, before, b->offset - before,
                                         "padding in the data region", error);
  if (status == HURRAY_OK && k + 1 == r->info.buffer_count) {
    uint64_t end = b->offset + b->desc.byte_size;
    status = hurray__source_check_zero(r->source, end, r->info.index_offset - end,
                                       "padding in the data region", error);
  }
  return status;
}

int hurray_file_reader_verify(const HurrayFileReader *reader, uint32_t index,
                              HurrayFileProgressFn progress, void *context, HurrayError *error) {
  uint32_t first = index, last = index;
  if (index == HURRAY_FILE_WHOLE && reader != NULL) {
    first = 0;
    last = reader->info.tensor_count; /* exclusive; the loop below runs none for 0 tensors */
  } else {
    int status = check_tensor(reader, index, "hurray_file_reader_verify", error);
    if (status != HURRAY_OK) return status;
    last = index + 1;
  }
  if (index == HURRAY_FILE_WHOLE && reader->view_ops == NULL && reader->info.buffer_count == 0) {
    int status = hurray__source_check_zero(reader->source, HURRAY_FILE_HEADER_SIZE,
                                           reader->info.index_offset - HURRAY_FILE_HEADER_SIZE,
                                           "padding in the data region", error);
    if (status != HURRAY_OK) return status;
  }
  FileProgress p = {.fn = progress, .context = context};
  for (uint32_t i = first; i < last; i++) p.total += reader->tensors[i].data_bytes;
  for (uint32_t i = first; i < last; i++) {
    const ReaderTensor *t = &reader->tensors[i];
    for (uint32_t k = 0; k < t->buffer_count; k++) {
      const FileBufferEntry *b = &reader->buffers[t->first_buffer + k];
      if (reader->view_ops != NULL) {
        int status = reader->view_ops->verify(reader->view, t->first_buffer + k, error);
        if (status != HURRAY_OK) return status;
        p.done += b->desc.byte_size;
        if (progress != NULL) progress(context, p.done, p.total);
        continue;
      }
      uint64_t computed = 0;
      int status = check_padding(reader, t->first_buffer + k, error);
      if (status == HURRAY_OK) {
        status = hurray__source_hash(reader->source, b->offset, b->desc.byte_size, &p, &computed,
                                     error);
      }
      if (status != HURRAY_OK) {
        return hurray__error_prefix(error, status, "tensor '%s', buffer %" PRIu32 ": ", t->name,
                                    k);
      }
      if (computed != b->checksum) return checksum_mismatch(reader, i, k, computed, error);
    }
  }
  return HURRAY_OK;
}

int hurray_file_reader_metadata(const HurrayFileReader *reader, uint32_t index,
                                HurrayMetaValue **out, HurrayError *error) {
  if (index != HURRAY_FILE_WHOLE || reader == NULL) {
    int status = check_tensor(reader, index, "hurray_file_reader_metadata", error);
    if (status != HURRAY_OK) return status;
  }
  if (out == NULL) return hurray__fail(error, HURRAY_EINVAL, "out is NULL");
  if (index == HURRAY_FILE_WHOLE) {
    return hurray__meta_decode_tree(reader->index + reader->metadata_offset,
                                    reader->metadata_length, out, error);
  }
  /* A record ends with its metadata (spec §6). */
  const ReaderTensor *t = &reader->tensors[index];
  const uint8_t *record = record_bytes(reader, t);
  uint32_t length = hurray__load_le32(record + 4);
  return hurray__meta_decode_tree(record + t->record_length - length, length, out, error);
}
