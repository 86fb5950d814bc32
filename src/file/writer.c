/* writer.c -- HurrayFileWriter: streams buffers into a temporary file, keeps only the index
 * entries in memory, and at finish writes the index and its chunk table, then the header, and
 * renames the file into place durably (spec §10) through FileOutput (output.c).
 *
 * Every tensor goes through one path: open it, stream each buffer (checksummed as the bytes
 * pass), then commit it, which encodes its record, decodes that record with the reader's own
 * parser and validates the result against the streamed sizes. A tensor that fails anywhere is
 * discarded: the write position goes back to where it began, so its bytes are overwritten or
 * cut off at finish. hurray_file_writer_add is that path driven from memory. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "file.h"

typedef enum WriterState { IDLE, IN_TENSOR, FINISHED, FAILED } WriterState;

typedef struct WriterTensor {
  char *name;
  size_t name_len;
  uint64_t hash;
  uint8_t *record;
  uint32_t record_len;
  uint32_t first_buffer;
  uint32_t buffer_count;
} WriterTensor;

struct HurrayFileWriter {
  FileOutput out;
  WriterState state;
  uint32_t alignment;
  FileHasher *hasher; /* the open buffer's checksum */
  WriterTensor *tensors;
  uint32_t tensor_count, tensor_capacity;
  FileBufferEntry *buffers;
  uint32_t buffer_count, buffer_capacity;
  /* Where each buffer's bytes came from, for add to write the same memory once (spec §4's
   * shared buffers): the first byte the plan lays out, parallel to buffers; NULL for streamed
   * ones. `sources_by_data` is an open-addressing set of buffer + 1 keyed by (that, size);
   * entries past buffer_count or no longer matching (a discarded tensor's) are skipped. */
  const void **source_data;
  uint32_t *sources_by_data;
  uint32_t source_slots, source_count;
  uint32_t *names; /* open addressing set of committed names: tensor + 1, 0 empty */
  uint32_t name_slots;
  uint64_t records_bytes; /* sum of record_len */
  FileSink metadata;      /* the file's, encoded */
  /* The format minor version that the committed records' and the file's metadata need: a
   * file is written as the lowest version whose features it uses (spec §3). */
  uint16_t records_minor, metadata_minor;
  /* the open tensor */
  char *open_name;
  size_t open_name_len;
  uint64_t open_hash;
  uint64_t open_start;
  uint32_t open_first_buffer;
  bool buffer_open;
};

/* ---- output ------------------------------------------------------------------------------- */

static uint64_t position(const HurrayFileWriter *w) {
  return hurray__output_position(&w->out);
}

/* Output errors leave the writer FAILED. */
static int checked(HurrayFileWriter *w, int status) {
  if (status != HURRAY_OK) w->state = FAILED;
  return status;
}

static int emit(HurrayFileWriter *w, const void *data, size_t len, HurrayError *error) {
  return checked(w, hurray__output_write(&w->out, data, len, error));
}

static int emit_zeros(HurrayFileWriter *w, uint64_t len, HurrayError *error) {
  return checked(w, hurray__output_zeros(&w->out, len, error));
}

/* ---- create and destroy ------------------------------------------------------------------- */

int hurray_file_writer_create(const char *path, const HurrayFileWriterOptions *options,
                              HurrayFileWriter **out, HurrayError *error) {
  if (path == NULL || out == NULL) {
    return hurray__fail(error, HURRAY_EINVAL, "hurray_file_writer_create: %s is NULL",
                        path == NULL ? "path" : "out");
  }
  const HurrayFileWriterOptions defaults = {0};
  if (options == NULL) options = &defaults;
  uint32_t alignment = options->alignment ? options->alignment : HURRAY_FILE_DEFAULT_ALIGNMENT;
  if (!hurray__all_zero(options->reserved, sizeof options->reserved)) {
    return hurray__fail(error, HURRAY_EINVAL, "reserved writer options are not zero");
  }
  if (options->flags & ~HURRAY_FILE_WRITE_NOT_DURABLE) {
    return hurray__fail(error, HURRAY_EINVAL, "writer flags 0x%" PRIX32 " include unknown bits",
                        options->flags);
  }
  if (alignment < HURRAY_MIN_ALIGNMENT || alignment > HURRAY_FILE_MAX_ALIGNMENT ||
      (alignment & (alignment - 1)) != 0) {
    return hurray__fail(error, HURRAY_EALIGN,
                        "alignment %" PRIu32 " is not a power of two in [64, %u]", alignment,
                        HURRAY_FILE_MAX_ALIGNMENT);
  }
  HurrayFileWriter *w = calloc(1, sizeof *w);
  if (w == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  w->out.fd = -1;
  w->alignment = alignment;
  w->hasher = hurray__hasher_create();
  bool durable = !(options->flags & HURRAY_FILE_WRITE_NOT_DURABLE);
  int status = w->hasher == NULL ? hurray__fail(error, HURRAY_ENOMEM, "out of memory")
                                 : hurray__output_open(&w->out, path, durable, error);
  /* The header is written last; its place is held by zeros. */
  if (status == HURRAY_OK) status = emit_zeros(w, HURRAY_FILE_HEADER_SIZE, error);
  if (status != HURRAY_OK) {
    hurray_file_writer_destroy(w);
    return status;
  }
  *out = w;
  return HURRAY_OK;
}

void hurray_file_writer_destroy(HurrayFileWriter *writer) {
  if (writer == NULL) return;
  hurray__output_close(&writer->out); /* not finished: nothing appears */
  for (uint32_t i = 0; i < writer->tensor_count; i++) {
    free(writer->tensors[i].name);
    free(writer->tensors[i].record);
  }
  free(writer->tensors);
  free(writer->buffers);
  free(writer->source_data);
  free(writer->sources_by_data);
  free(writer->names);
  free(writer->open_name);
  hurray__sink_reset(&writer->metadata);
  hurray__hasher_destroy(writer->hasher);
  free(writer);
}

/* ---- the set of committed names ----------------------------------------------------------- */

static uint32_t *name_slot(const HurrayFileWriter *w, const char *name, size_t len, uint64_t hash) {
  uint32_t mask = w->name_slots - 1;
  for (uint32_t i = (uint32_t)hash & mask;; i = (i + 1) & mask) {
    uint32_t t = w->names[i];
    if (t == 0) return &w->names[i];
    const WriterTensor *tensor = &w->tensors[t - 1];
    if (tensor->hash == hash && tensor->name_len == len && memcmp(tensor->name, name, len) == 0) {
      return &w->names[i];
    }
  }
}

/* Keeps the set at most half full, so a free slot always ends a probe. */
static int reserve_names(HurrayFileWriter *w, uint32_t count, HurrayError *error) {
  if ((uint64_t)count * 2 <= w->name_slots) return HURRAY_OK;
  uint32_t slots = w->name_slots ? w->name_slots * 2 : 64;
  uint32_t *old = w->names, old_slots = w->name_slots;
  w->names = calloc(slots, sizeof *w->names);
  if (w->names == NULL) {
    w->names = old;
    return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  }
  w->name_slots = slots;
  for (uint32_t i = 0; i < old_slots; i++) {
    if (old[i] == 0) continue;
    const WriterTensor *t = &w->tensors[old[i] - 1];
    *name_slot(w, t->name, t->name_len, t->hash) = old[i];
  }
  free(old);
  return HURRAY_OK;
}

/* ---- the tensor path ---------------------------------------------------------------------- */

enum { IDLE_OK = 1 << IDLE, IN_TENSOR_OK = 1 << IN_TENSOR };

/* HURRAY_ESTATE, changing nothing, unless the writer is in one of the `allowed` states. */
static int check_state(const HurrayFileWriter *w, unsigned allowed, const char *function,
                       HurrayError *error) {
  if (w == NULL) return hurray__fail(error, HURRAY_EINVAL, "%s: writer is NULL", function);
  if (allowed & (1u << w->state)) return HURRAY_OK;
  static const char *const kWhy[] = {
      [IDLE] = "no tensor is open",
      [IN_TENSOR] = "a tensor is open",
      [FINISHED] = "the writer is finished",
      [FAILED] = "the writer failed earlier with an I/O error; destroy it",
  };
  return hurray__fail(error, HURRAY_ESTATE, "%s: %s", function, kWhy[w->state]);
}

static int open_tensor(HurrayFileWriter *w, const char *name, HurrayError *error) {
  size_t len = 0;
  int status = hurray__check_cname(name, "tensor name", &len, error);
  if (status != HURRAY_OK) return status;
  uint64_t hash = hurray__xxh3(name, len);
  if (w->tensor_count == HURRAY_FILE_MAX_TENSORS) {
    return hurray__fail(error, HURRAY_ELIMIT, "a file holds at most %u tensors",
                        HURRAY_FILE_MAX_TENSORS);
  }
  if (w->name_slots > 0 && *name_slot(w, name, len, hash) != 0) {
    return hurray__fail(error, HURRAY_EINVAL, "duplicate tensor name '%s'", name);
  }
  char *copy = malloc(len + 1);
  if (copy == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  memcpy(copy, name, len + 1);
  w->open_name = copy;
  w->open_name_len = len;
  w->open_hash = hash;
  w->open_start = position(w);
  w->open_first_buffer = w->buffer_count;
  w->buffer_open = false;
  w->state = IN_TENSOR;
  return HURRAY_OK;
}

static int close_buffer(HurrayFileWriter *w, HurrayError *error) {
  if (!w->buffer_open) return HURRAY_OK;
  int status = checked(w, hurray__output_settle(&w->out, error)); /* the hasher has every byte */
  w->buffers[w->buffer_count - 1].checksum = hurray__hasher_digest(w->hasher);
  w->buffer_open = false;
  return status;
}

/* Puts the writer back where it was before the open tensor began. */
static void discard_tensor(HurrayFileWriter *w) {
  hurray__output_rewind(&w->out, w->open_start);
  w->buffer_count = w->open_first_buffer;
  w->buffer_open = false;
  free(w->open_name);
  w->open_name = NULL;
  if (w->state == IN_TENSOR) w->state = IDLE;
}

/* Room for one more buffer entry in the open tensor, the buffer before it closed. */
static int reserve_entry(HurrayFileWriter *w, int role, HurrayError *error) {
  if (hurray_buffer_role_name(role) == NULL) {
    return hurray__fail(error, HURRAY_EINVAL, "buffer role %d is unknown", role);
  }
  if (w->buffer_count - w->open_first_buffer == HURRAY_MAX_BUFFERS ||
      w->buffer_count == HURRAY_FILE_MAX_BUFFERS) {
    return hurray__fail(error, HURRAY_ELIMIT, "a tensor holds at most %u buffers, a file %u",
                        HURRAY_MAX_BUFFERS, HURRAY_FILE_MAX_BUFFERS);
  }
  if (w->buffer_count == w->buffer_capacity) {
    uint32_t capacity = w->buffer_capacity ? w->buffer_capacity * 2 : 64;
    FileBufferEntry *grown = realloc(w->buffers, capacity * sizeof *grown);
    if (grown == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
    w->buffers = grown;
    const void **sources = realloc(w->source_data, capacity * sizeof *sources);
    if (sources == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
    w->source_data = sources;
    w->buffer_capacity = capacity;
  }
  int status = close_buffer(w, error);
  w->source_data[w->buffer_count] = NULL; /* streamed, until add says where it came from */
  return status;
}

static int open_buffer(HurrayFileWriter *w, int role, HurrayError *error) {
  int status = reserve_entry(w, role, error);
  if (status != HURRAY_OK) return status;
  uint64_t at = position(w);
  uint64_t aligned = (at + w->alignment - 1) & ~(uint64_t)(w->alignment - 1);
  status = emit_zeros(w, aligned - at, error);
  if (status != HURRAY_OK) return status;
  w->buffers[w->buffer_count++] = (FileBufferEntry){.desc = {.alignment = w->alignment,
                                                             .device_tag = HURRAY_DEVICE_CPU,
                                                             .memory_class = HURRAY_MEM_DEVICE,
                                                             .sync_mode = HURRAY_SYNC_READY},
                                                    .offset = aligned,
                                                    .role = (uint8_t)role};
  hurray__hasher_reset(w->hasher);
  w->buffer_open = true;
  return HURRAY_OK;
}

/* Appends bytes to the open buffer. */
static int stream_bytes(HurrayFileWriter *w, const void *data, size_t len, bool owned,
                        HurrayError *error) {
  FileBufferEntry *b = &w->buffers[w->buffer_count - 1];
  if (len > UINT64_MAX - b->offset - b->desc.byte_size) {
    return hurray__fail(error, HURRAY_EOVERFLOW, "the buffer's size overflows");
  }
  b->desc.byte_size += len;
  return checked(w, hurray__output_write_hashed(&w->out, data, len, w->hasher, owned, error));
}

/* The caller's memory, which may change while it is written. */
static int stream(HurrayFileWriter *w, const void *data, size_t len, HurrayError *error) {
  return stream_bytes(w, data, len, false, error);
}

static int check_index_limit(uint32_t tensors, uint64_t records, uint64_t metadata,
                             HurrayError *error) {
  if (hurray__index_length(tensors, records, metadata) <= HURRAY_FILE_MAX_INDEX) return HURRAY_OK;
  return hurray__fail(error, HURRAY_ELIMIT, "the index would exceed %" PRIu64 " bytes",
                      HURRAY_FILE_MAX_INDEX);
}

/* Encodes the open tensor's record, checks it as a reader will, and commits the tensor. */
static int commit_tensor(HurrayFileWriter *w, const HurrayTensorDesc *tensor, FileRebaseFn rebase,
                         void *rebase_context, const FileSink *metadata, HurrayError *error) {
  int status = close_buffer(w, error);
  uint32_t first = w->open_first_buffer, count = w->buffer_count - first;
  FileSink record = {0};
  FileArena arena = {0};
  FileRecord decoded;
  unsigned shift = (unsigned)__builtin_ctz(w->alignment);
  if (status == HURRAY_OK) {
    status = hurray__file_record_encode((const uint8_t *)w->open_name, w->open_name_len, tensor,
                                        rebase, rebase_context, w->buffers + first, count, shift,
                                        metadata->data, (uint32_t)metadata->len, &record, error);
  }
  if (status == HURRAY_OK) {
    status = hurray__file_record_decode(record.data, record.len, shift, &arena, &decoded, error);
  }
  if (status == HURRAY_OK) {
    status = hurray__validate_against_entries(decoded.tensor, w->buffers + first, count, error);
  }
  hurray__arena_free(&arena);
  uint64_t records = w->records_bytes + record.len;
  if (status == HURRAY_OK) {
    status = check_index_limit(w->tensor_count + 1, records, w->metadata.len, error);
  }
  if (status == HURRAY_OK && w->tensor_count == w->tensor_capacity) {
    uint32_t capacity = w->tensor_capacity ? w->tensor_capacity * 2 : 16;
    WriterTensor *grown = realloc(w->tensors, capacity * sizeof *grown);
    if (grown == NULL) status = hurray__fail(error, HURRAY_ENOMEM, "out of memory");
    if (grown != NULL) {
      w->tensors = grown;
      w->tensor_capacity = capacity;
    }
  }
  if (status == HURRAY_OK) status = reserve_names(w, w->tensor_count + 1, error);
  if (status != HURRAY_OK) {
    hurray__sink_reset(&record);
    return hurray__error_prefix(error, status, "tensor '%s': ", w->open_name);
  }
  w->tensors[w->tensor_count] = (WriterTensor){.name = w->open_name,
                                               .name_len = w->open_name_len,
                                               .hash = w->open_hash,
                                               .record = record.data,
                                               .record_len = (uint32_t)record.len,
                                               .first_buffer = first,
                                               .buffer_count = count};
  w->tensor_count++;
  *name_slot(w, w->open_name, w->open_name_len, w->open_hash) = w->tensor_count;
  w->records_bytes = records;
  w->open_name = NULL;
  w->state = IDLE;
  return HURRAY_OK;
}

/* ---- streaming API ------------------------------------------------------------------------ */

int hurray_file_writer_begin_tensor(HurrayFileWriter *writer, const char *name,
                                    HurrayError *error) {
  int status = check_state(writer, IDLE_OK, "hurray_file_writer_begin_tensor", error);
  return status == HURRAY_OK ? open_tensor(writer, name, error) : status;
}

int hurray_file_writer_begin_buffer(HurrayFileWriter *writer, int role, HurrayError *error) {
  int status = check_state(writer, IN_TENSOR_OK, "hurray_file_writer_begin_buffer", error);
  if (status != HURRAY_OK) return status;
  status = open_buffer(writer, role, error);
  if (status != HURRAY_OK) discard_tensor(writer);
  return status;
}

static int write_bytes(HurrayFileWriter *writer, const void *data, size_t size, bool owned,
                       HurrayError *error) {
  int status = check_state(writer, IN_TENSOR_OK, "hurray_file_writer_write", error);
  if (status == HURRAY_OK && !writer->buffer_open) {
    status = hurray__fail(error, HURRAY_ESTATE, "hurray_file_writer_write: no buffer is open");
  }
  if (status != HURRAY_OK) return status;
  status = data != NULL || size == 0
               ? stream_bytes(writer, data, size, owned, error)
               : hurray__fail(error, HURRAY_EINVAL, "data is NULL but size is %zu", size);
  if (status != HURRAY_OK) discard_tensor(writer);
  return status;
}

int hurray_file_writer_write(HurrayFileWriter *writer, const void *data, size_t size,
                             HurrayError *error) {
  return write_bytes(writer, data, size, false, error);
}

int hurray__file_writer_write_owned(HurrayFileWriter *writer, const void *data, size_t size,
                                    HurrayError *error) {
  return write_bytes(writer, data, size, true, error);
}

int hurray_file_writer_end_tensor(HurrayFileWriter *writer, const HurrayTensorDesc *tensor,
                                  const HurrayMetaValue *metadata, HurrayError *error) {
  int status = check_state(writer, IN_TENSOR_OK, "hurray_file_writer_end_tensor", error);
  if (status != HURRAY_OK) return status;
  FileSink encoded = {0};
  uint16_t minor = 0;
  status = hurray__meta_encode(metadata, &encoded, &minor, error);
  if (status == HURRAY_OK) status = commit_tensor(writer, tensor, NULL, NULL, &encoded, error);
  if (status != HURRAY_OK) discard_tensor(writer);
  if (status == HURRAY_OK && minor > writer->records_minor) writer->records_minor = minor;
  hurray__sink_reset(&encoded);
  return status;
}

/* ---- writing a tensor from memory --------------------------------------------------------- */

/* ---- shared buffers: the same memory written once (spec §4) ------------------------------- */

static uint32_t source_hash(const void *data, uint64_t size) {
  uint64_t key[2] = {(uint64_t)(uintptr_t)data, size};
  return (uint32_t)hurray__xxh3(key, sizeof key);
}

/* The slot for (data, size): the one holding a live buffer with them, else the first empty. */
static uint32_t *source_slot(const HurrayFileWriter *w, const void *data, uint64_t size) {
  uint32_t mask = w->source_slots - 1;
  for (uint32_t i = source_hash(data, size) & mask;; i = (i + 1) & mask) {
    uint32_t b = w->sources_by_data[i];
    if (b == 0 || (b <= w->buffer_count && w->source_data[b - 1] == data &&
                   !w->buffers[b - 1].shared && w->buffers[b - 1].desc.byte_size == size)) {
      return &w->sources_by_data[i];
    }
  }
}

/* Records that buffer `b` holds the bytes of `data` it was streamed from (`size` of them).
 * Failing to (out of memory) only means the memory may be written again later. */
static void remember_source(HurrayFileWriter *w, uint32_t b, const void *data, uint64_t size) {
  if (size == 0) return;
  if (2 * (w->source_count + 1) > w->source_slots) { /* grow and rehash the live ones */
    uint32_t slots = w->source_slots ? w->source_slots * 2 : 256;
    uint32_t *grown = calloc(slots, sizeof *grown);
    if (grown == NULL) return;
    free(w->sources_by_data);
    w->sources_by_data = grown;
    w->source_slots = slots;
    w->source_count = 0;
    for (uint32_t j = 0; j < b; j++) {
      const FileBufferEntry *e = &w->buffers[j];
      if (w->source_data[j] == NULL || e->shared) continue;
      uint32_t *slot = source_slot(w, w->source_data[j], e->desc.byte_size);
      if (*slot == 0) w->source_count++;
      *slot = j + 1;
    }
  }
  w->source_data[b] = data;
  uint32_t *slot = source_slot(w, data, size);
  if (*slot == 0) w->source_count++;
  *slot = b + 1;
}

/* Where buffer `index`'s planned bytes begin in its memory, and how many the plan lays out:
 * the identity of what is written, so views of one storage at other offsets are not shared. */
static uint64_t planned_span(const FileRuns *plan, uint32_t index, uint64_t *start) {
  uint64_t size = 0;
  bool first = true;
  for (size_t i = 0; i < plan->count; i++) { /* runs are sorted by (buffer, begin) */
    const FileRun *run = &plan->runs[i];
    if (run->buffer != index) continue;
    if (first) *start = run->begin;
    first = false;
    size = run->placed + (run->end - run->begin);
  }
  return size;
}

/* Feeds buffer `index` of the list, as the plan lays it out, to `sink` (the output, or a
 * hasher alone). */
typedef int (*BytesFn)(HurrayFileWriter *w, const void *data, size_t len, HurrayError *error);

static int lay_out(HurrayFileWriter *w, const FileRuns *plan, const uint8_t *data, uint32_t index,
                   BytesFn sink, HurrayError *error) {
  static const uint8_t zeros[HURRAY_MIN_ALIGNMENT];
  uint64_t at = 0;
  int status = HURRAY_OK;
  for (size_t i = 0; i < plan->count && status == HURRAY_OK; i++) {
    const FileRun *run = &plan->runs[i];
    if (run->buffer != index) continue;
    status = sink(w, zeros, (size_t)(run->placed - at), error); /* a gap under 64 bytes */
    if (status == HURRAY_OK)
      status = sink(w, data + run->begin, (size_t)(run->end - run->begin), error);
    at = run->placed + (run->end - run->begin);
  }
  return status;
}

static int hash_only(HurrayFileWriter *w, const void *data, size_t len, HurrayError *error) {
  (void)error;
  hurray__hasher_update(w->hasher, data, len);
  return HURRAY_OK;
}

/* Buffer `index` of the list as a shared entry, when the same memory span was written before
 * in this file as the same bytes (their hash equal: memory reused for other contents since is
 * written anew): the span the plan lays out, or else the buffer's whole memory as given, whose
 * arrays then address the earlier bytes as they address the memory (`*verbatim` set: a view of
 * a storage written whole before). 1 if shared, 0 if it must be written, or a failure. */
static int share_if_written(HurrayFileWriter *w, const FileRuns *plan,
                            const HurrayBufferList *list, uint32_t index, const void *span,
                            uint64_t size, bool *verbatim, HurrayError *error) {
  const HurrayBuffer *buffer = list->buffers[index];
  const uint64_t whole = buffer->desc.byte_size;
  *verbatim = false;
  uint32_t original = w->source_slots > 0 && size > 0 ? *source_slot(w, span, size) : 0;
  const bool as_given = original == 0 && w->source_slots > 0 && whole > 0 &&
                        whole <= SIZE_MAX && (span != buffer->data || size != whole);
  if (as_given) original = *source_slot(w, buffer->data, whole);
  if (original == 0) return 0;
  int status = close_buffer(w, error); /* the hasher is the open buffer's until then */
  if (status != HURRAY_OK) return status;
  hurray__hasher_reset(w->hasher);
  if (as_given) {
    hurray__hasher_update(w->hasher, buffer->data, (size_t)whole);
  } else {
    lay_out(w, plan, buffer->data, index, hash_only, error);
  }
  if (hurray__hasher_digest(w->hasher) != w->buffers[original - 1].checksum) return 0;
  *verbatim = as_given;
  status = reserve_entry(w, list->roles[index], error);
  if (status != HURRAY_OK) return status;
  FileBufferEntry shared = w->buffers[original - 1];
  shared.role = (uint8_t)list->roles[index];
  shared.shared = true;
  w->buffers[w->buffer_count++] = shared;
  return 1;
}

/* Streams buffer `index` of the list as the plan lays it out, or shares it (`*verbatim`: as the
 * earlier bytes of its whole memory). */
static int stream_buffer(HurrayFileWriter *w, const FileRuns *plan, const HurrayBufferList *list,
                         uint32_t index, bool *verbatim, HurrayError *error) {
  const uint8_t *data = list->buffers[index]->data;
  uint64_t start = 0;
  uint64_t size = planned_span(plan, index, &start);
  int status = share_if_written(w, plan, list, index, data + start, size, verbatim, error);
  if (status != 0) return status > 0 ? HURRAY_OK : status;
  status = open_buffer(w, list->roles[index], error);
  if (status == HURRAY_OK) status = lay_out(w, plan, data, index, stream, error);
  if (status == HURRAY_OK) remember_source(w, w->buffer_count - 1, data + start, size);
  return status;
}

/* How add laid out a tensor's buffers: by the plan, or verbatim (shared as the bytes of its
 * whole memory, written before), per buffer of the list. */
typedef struct Layout {
  const FileRuns *plan;
  bool *verbatim;
} Layout;

/* A FileRebaseFn over a Layout: an array's byte offset in the buffer as the file holds it. */
static uint64_t layout_rebase(void *context, const HurrayArray *array) {
  const Layout *layout = context;
  if (layout->verbatim[array->buffer]) return array->byte_offset;
  return hurray__runs_rebase((void *)layout->plan, array);
}

int hurray_file_writer_add(HurrayFileWriter *writer, const char *name,
                           const HurrayTensorDesc *tensor, const HurrayBufferList *buffers,
                           const HurrayMetaValue *metadata, HurrayError *error) {
  int status = check_state(writer, IDLE_OK, "hurray_file_writer_add", error);
  if (status == HURRAY_OK) status = hurray_tensor_validate(tensor, buffers, 0, error);
  if (status == HURRAY_OK && buffers->count > 0 && buffers->roles == NULL) {
    status = hurray__fail(error, HURRAY_EINVAL, "the buffer list has no roles");
  }
  for (uint32_t i = 0; status == HURRAY_OK && i < buffers->count; i++) {
    const HurrayBuffer *b = buffers->buffers[i];
    uint8_t tag = b != NULL ? b->desc.device_tag : HURRAY_DEVICE_CPU;
    if (b == NULL || (b->data == NULL && b->desc.byte_size > 0)) {
      status = hurray__fail(error, HURRAY_EINVAL, "buffer %" PRIu32 " %s", i,
                            b == NULL ? "is NULL" : "has no data");
    } else if (tag != HURRAY_DEVICE_CPU) {
      const char *device = hurray_device_name(tag);
      status = hurray__fail(error, HURRAY_EUNSUPPORTED,
                            "buffer %" PRIu32 " is %s memory; copy it to the host first", i,
                            device ? device : "device");
    }
  }
  FileRuns plan = {0};
  FileSink encoded = {0};
  uint16_t minor = 0;
  Layout layout = {.plan = &plan};
  if (status == HURRAY_OK && buffers->count > 0) {
    layout.verbatim = calloc(buffers->count, sizeof *layout.verbatim);
    if (layout.verbatim == NULL) status = hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  }
  if (status == HURRAY_OK) status = hurray__runs_make(&plan, tensor, error);
  if (status == HURRAY_OK) status = hurray__meta_encode(metadata, &encoded, &minor, error);
  if (status == HURRAY_OK) status = open_tensor(writer, name, error);
  bool opened = status == HURRAY_OK;
  for (uint32_t i = 0; opened && i < buffers->count && status == HURRAY_OK; i++) {
    status = stream_buffer(writer, &plan, buffers, i, &layout.verbatim[i], error);
  }
  if (opened && status == HURRAY_OK) {
    status = commit_tensor(writer, tensor, layout_rebase, &layout, &encoded, error);
  }
  if (opened && status != HURRAY_OK) discard_tensor(writer);
  if (status == HURRAY_OK && minor > writer->records_minor) writer->records_minor = minor;
  free(layout.verbatim);
  hurray__runs_free(&plan);
  hurray__sink_reset(&encoded);
  return status;
}

/* ---- metadata and finish ------------------------------------------------------------------ */

int hurray_file_writer_set_metadata(HurrayFileWriter *writer, const HurrayMetaValue *metadata,
                                    HurrayError *error) {
  int status =
      check_state(writer, IDLE_OK | IN_TENSOR_OK, "hurray_file_writer_set_metadata", error);
  FileSink encoded = {0};
  uint16_t minor = 0;
  if (status == HURRAY_OK) {
    status = hurray__meta_encode_max(metadata, HURRAY_FILE_META_MAX_BYTES, &encoded, &minor, error);
  }
  if (status == HURRAY_OK) {
    status = check_index_limit(writer->tensor_count, writer->records_bytes, encoded.len, error);
  }
  if (status != HURRAY_OK) {
    hurray__sink_reset(&encoded);
    return status;
  }
  hurray__sink_reset(&writer->metadata);
  writer->metadata = encoded;
  writer->metadata_minor = minor;
  return HURRAY_OK;
}

/* The index (spec §5) and its chunk table (§5.6); the chunk size and the table's checksum. */
static int write_index(HurrayFileWriter *w, unsigned *chunk_log2, uint64_t *checksum,
                       HurrayError *error) {
  FileIndexTensor *tensors = malloc((w->tensor_count ? w->tensor_count : 1) * sizeof *tensors);
  if (tensors == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  for (uint32_t i = 0; i < w->tensor_count; i++) {
    const WriterTensor *t = &w->tensors[i];
    tensors[i] = (FileIndexTensor){.name = t->name,
                                   .name_len = t->name_len,
                                   .hash = t->hash,
                                   .record = t->record,
                                   .record_len = t->record_len};
  }
  uint64_t data_bytes = 0;
  for (uint32_t i = 0; i < w->buffer_count; i++) data_bytes += w->buffers[i].desc.byte_size;
  FileSink index = {0}, chunks = {0};
  int status = hurray__index_build(&index, tensors, w->tensor_count, w->buffer_count, data_bytes,
                                   w->metadata.data, (uint32_t)w->metadata.len, error);
  free(tensors);
  if (status == HURRAY_OK) {
    *chunk_log2 = hurray__chunk_log2(index.len);
    size_t chunk = (size_t)1 << *chunk_log2;
    for (size_t at = 0; at < index.len; at += chunk) {
      size_t n = index.len - at < chunk ? index.len - at : chunk;
      hurray__sink_u64(&chunks, hurray__xxh3(index.data + at, n));
    }
    status = chunks.failed ? hurray__fail(error, HURRAY_ENOMEM, "out of memory") : HURRAY_OK;
  }
  if (status == HURRAY_OK) {
    *checksum = hurray__xxh3(chunks.data, chunks.len);
    status = emit(w, index.data, index.len, error);
  }
  if (status == HURRAY_OK) status = emit(w, chunks.data, chunks.len, error);
  hurray__sink_reset(&index);
  hurray__sink_reset(&chunks);
  return status;
}

int hurray_file_writer_finish(HurrayFileWriter *writer, HurrayError *error) {
  int status = check_state(writer, IDLE_OK, "hurray_file_writer_finish", error);
  if (status != HURRAY_OK) return status;
  HurrayFileWriter *w = writer;
  uint64_t end = position(w);
  status = emit_zeros(w, hurray__pad8(end) - end, error);
  uint64_t index_offset = position(w), chunks_checksum = 0;
  unsigned chunk_log2 = 0;
  if (status == HURRAY_OK) status = write_index(w, &chunk_log2, &chunks_checksum, error);
  if (status != HURRAY_OK) {
    w->state = FAILED;
    return status;
  }
  uint64_t file_size = position(w);
  uint64_t index_length =
      hurray__index_length(w->tensor_count, w->records_bytes, w->metadata.len);
  uint8_t h[HURRAY_FILE_HEADER_SIZE] = {0};
  memcpy(h, FILE_MAGIC, FILE_MAGIC_SIZE);
  hurray__store_le16(h + HDR_VERSION_MAJOR, HURRAY_FILE_VERSION_MAJOR);
  uint16_t minor = w->records_minor > w->metadata_minor ? w->records_minor : w->metadata_minor;
  for (uint32_t i = 0; i < w->buffer_count && minor < 2; i++) {
    if (w->buffers[i].shared) minor = 2; /* 2.2: shared buffers */
  }
  hurray__store_le16(h + HDR_VERSION_MINOR, minor);
  h[HDR_ALIGNMENT_LOG2] = (uint8_t)__builtin_ctz(w->alignment);
  hurray__store_le64(h + HDR_FILE_SIZE, file_size);
  hurray__store_le64(h + HDR_INDEX_OFFSET, index_offset);
  h[HDR_CHUNK_LOG2] = (uint8_t)chunk_log2;
  hurray__store_le64(h + HDR_INDEX_LENGTH, index_length);
  hurray__store_le64(h + HDR_CHUNK_TABLE_CHECKSUM, chunks_checksum);
  hurray__store_le64(h + HDR_CHECKSUM, hurray__xxh3(h, HDR_CHECKSUM));
  status = hurray__output_patch(&w->out, 0, h, sizeof h, error);
  if (status == HURRAY_OK) status = hurray__output_commit(&w->out, error);
  /* Once renamed the file is there, even if syncing its directory failed. */
  w->state = w->out.renamed ? FINISHED : FAILED;
  return status;
}
