/* view.c -- a safetensors, .npy, .npz or GGUF file presented as a HurrayFileReader
 * (HURRAY_FILE_OPEN_FOREIGN, ADR-046). The converters' parsers open and validate it (a
 * ConvSource, as hurray_convert opens its input); each array becomes a DENSE tensor with one
 * VALUES buffer whose record is encoded by the writer's encoder, and the index is built by
 * the writer's hurray__index_build, so the reader validates and serves it exactly as a
 * file's. Buffers are zero-copy views of the mapping where an array's bytes lie in the
 * file as they are at a multiple of 64, and so are a GGUF file's wherever its alignment puts
 * them (32 by default): such a buffer starts at the multiple of 64 below the values, which lie
 * `slack` bytes in (buffer-protocol.md §6.2, ADR-008). Otherwise (misaligned, big-endian,
 * deflated, or a PREAD reader) each get copies them through the source's streaming into
 * 64-aligned memory. */
#include <stdlib.h>
#include <string.h>

#include "convert.h"

typedef struct View {
  ConvSource source;
  FileArena names; /* a .npy array's name */
  bool copy;       /* PREAD: every buffer is a fresh copy */
} View;

/* Whether array `a`'s bytes lie in the file as they are (stored, not byte-swapped); `*at` is
 * where they (or a deflated member's compressed data) start. */
static bool stored_as_is(const View *v, const ConvArray *a, uint64_t *at) {
  if (v->source.format != HURRAY_FORMAT_NPZ) {
    *at = a->region_offset;
    return a->swap == 0;
  }
  const ZipMember *m = &v->source.zip.members[a->index];
  *at = m->method == 0 ? m->data_offset + a->region_offset : m->data_offset;
  return m->method == 0 && a->swap == 0;
}

/* The alignment an element (or a block's widest field: Q8_K's float32 scale) of `dtype` wants
 * in memory for a view to hand it out where it lies. */
static uint64_t element_alignment(int dtype) {
  uint32_t elements = 0, block = 0;
  if (hurray_dtype_block(dtype, &elements, &block, NULL) == HURRAY_OK) return 4;
  const uint64_t bytes = hurray_dtype_info(dtype)->bits / 8;
  return bytes == 0 ? 1 : bytes > 16 ? 16 : bytes;
}

/* The bytes by which array `a`'s buffer starts before its values: for a GGUF array mapped as
 * it lies at a multiple of its element's alignment but not of 64, the distance down to the
 * multiple of 64 below it (never read or written: §6.3); else 0. The other formats keep their
 * buffers starting at the values (test_file_foreign), copied when misaligned. */
static uint64_t slack_of(const View *v, const ConvArray *a) {
  uint64_t at = 0;
  if (v->source.format != HURRAY_FORMAT_GGUF || v->copy || !stored_as_is(v, a, &at) ||
      a->region_size == 0 || at % element_alignment(a->dtype) != 0) {
    return 0;
  }
  return at % HURRAY_MIN_ALIGNMENT;
}

typedef struct Fill {
  uint8_t *at;
} Fill;

static int fill_chunk(void *context, const uint8_t *bytes, size_t len, HurrayError *error) {
  (void)error;
  Fill *fill = context;
  memcpy(fill->at, bytes, len);
  fill->at += len;
  return HURRAY_OK;
}

static int view_buffer(void *context, uint32_t buffer, uint64_t offset, uint64_t len,
                       HurrayBuffer **out, HurrayError *error) {
  View *v = context;
  const ConvArray *a = &v->source.arrays[buffer];
  const uint64_t slack = slack_of(v, a); /* `offset` counts from the buffer's start */
  uint64_t at = 0;
  if (stored_as_is(v, a, &at) && !v->copy && len > 0 &&
      (at - slack + offset) % HURRAY_MIN_ALIGNMENT == 0) {
    return hurray__source_buffer(v->source.file, at - slack + offset, len, HURRAY_MIN_ALIGNMENT,
                                 out, error);
  }
  HurrayBuffer *copy = NULL;
  int status = hurray_buffer_alloc(len, HURRAY_MIN_ALIGNMENT, 0, &copy, error);
  const uint64_t lead = offset < slack ? (slack - offset < len ? slack - offset : len) : 0;
  if (status == HURRAY_OK && lead > 0) memset(copy->data, 0, (size_t)lead); /* unaddressed */
  if (status == HURRAY_OK && len > lead) {
    Fill fill = {.at = (uint8_t *)copy->data + lead};
    status = hurray__source_stream(&v->source, a, offset + lead - slack, len - lead, fill_chunk,
                                   &fill, error);
  }
  if (status != HURRAY_OK) {
    hurray_buffer_destroy(copy);
    return status;
  }
  *out = copy;
  return HURRAY_OK;
}

static int view_verify(void *context, uint32_t buffer, HurrayError *error) {
  View *v = context;
  const ConvArray *a = &v->source.arrays[buffer];
  if (v->source.format != HURRAY_FORMAT_NPZ) {
    return hurray__fail(error, HURRAY_EUNSUPPORTED,
                        "tensor '%.64s': a %s file keeps no checksums to verify", a->name,
                        hurray_format_name(v->source.format));
  }
  int status = hurray__zip_stream(v->source.file, &v->source.zip.members[a->index], 0, 0, NULL,
                                  NULL, error); /* the member's CRC-32 */
  if (status != HURRAY_OK) hurray__error_prefix(error, status, "tensor '%.64s': ", a->name);
  return status;
}

static void view_destroy(void *context) {
  View *v = context;
  hurray__source_close(&v->source);
  hurray__arena_free(&v->names);
  free(v);
}

static const FileViewOps kViewOps = {view_buffer, view_verify, view_destroy};

/* Each array's record into `records` and its index entry. */
static int describe_arrays(View *v, FileSink *records, FileIndexTensor *tensors,
                           uint64_t *data_bytes, HurrayError *error) {
  FileSink record = {0};
  int status = HURRAY_OK;
  for (uint32_t i = 0; i < v->source.count && status == HURRAY_OK; i++) {
    const ConvArray *a = &v->source.arrays[i];
    HurrayArray part;
    HurrayTensorDesc desc;
    const uint64_t slack = slack_of(v, a);
    hurray__array_dense_desc(a, a->byte_offset + slack, &part, &desc);
    uint64_t at = 0;
    stored_as_is(v, a, &at);
    const FileBufferEntry buffer = {.desc = {.byte_size = slack + a->region_size},
                                    .offset = at - slack,
                                    .role = HURRAY_ROLE_VALUES};
    *data_bytes += slack + a->region_size;
    status = hurray__file_record_encode((const uint8_t *)a->name, a->name_len, &desc, NULL, NULL,
                                        &buffer, 1, 0, NULL, 0, &record, error);
    if (status != HURRAY_OK) break;
    hurray__sink_bytes(records, record.data, record.len);
    tensors[i] = (FileIndexTensor){.name = a->name,
                                   .name_len = a->name_len,
                                   .hash = hurray__xxh3(a->name, a->name_len),
                                   .record_len = (uint32_t)record.len};
  }
  hurray__sink_reset(&record);
  if (status == HURRAY_OK && records->failed) {
    status = hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  }
  uint64_t at = 0; /* the records are in place: point at them */
  for (uint32_t i = 0; i < v->source.count && status == HURRAY_OK; i++) {
    tensors[i].record = records->data + at;
    at += tensors[i].record_len;
  }
  return status;
}

/* The index of the view's arrays, with the file metadata, in `index`. */
static int build_index(View *v, FileSink *index, HurrayError *error) {
  uint32_t count = v->source.count;
  if (count > HURRAY_FILE_MAX_TENSORS) {
    return hurray__fail(error, HURRAY_ELIMIT, "%u tensors exceed the limit of %u", count,
                        HURRAY_FILE_MAX_TENSORS);
  }
  FileSink records = {0}, metadata = {0};
  uint64_t data_bytes = 0;
  FileIndexTensor *tensors = calloc(count ? count : 1, sizeof *tensors);
  int status = tensors != NULL ? describe_arrays(v, &records, tensors, &data_bytes, error)
                               : hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  if (status == HURRAY_OK) {
    uint16_t minor = 0; /* a source's metadata is strings: version 2.0's */
    status = hurray__meta_encode_max(v->source.metadata, HURRAY_FILE_META_MAX_BYTES, &metadata,
                                     &minor, error);
    if (status != HURRAY_OK) hurray__error_prefix(error, status, "file metadata: ");
  }
  if (status == HURRAY_OK) {
    status = hurray__index_build(index, tensors, count, count, data_bytes, metadata.data,
                                 (uint32_t)metadata.len, error);
  }
  free(tensors);
  hurray__sink_reset(&records);
  hurray__sink_reset(&metadata);
  return status;
}

/* The error for a file none of the readers reads: what its first bytes say it is, where they
 * name a format people save tensors in, with the way from there to a Hurray file. */
static int unknown_format(const FileSource *file, HurrayError *error) {
  static const char kPickle[] =
      "a Python pickle (pickle.dump, or torch.save's legacy format): load it with pickle.load "
      "or torch.load and save its tensors with hurray.save";
  static const struct {
    const char *magic;
    size_t len;
    const char *what;
  } kKnown[] = {
      {"\x89HDF\r\n\x1a\n", 8,
       "an HDF5 file: read it with h5py and save its arrays with hurray.save"},
      {"\x80\x02", 2, kPickle}, {"\x80\x03", 2, kPickle}, {"\x80\x04", 2, kPickle},
      {"\x80\x05", 2, kPickle},
  };
  const uint8_t *b = hurray__source_bytes(file);
  uint64_t size = hurray__source_size(file);
  for (size_t i = 0; i < sizeof kKnown / sizeof *kKnown; i++) {
    if (size >= kKnown[i].len && memcmp(b, kKnown[i].magic, kKnown[i].len) == 0) {
      return hurray__fail(error, HURRAY_EFORMAT,
                          "not a Hurray file: its first bytes are those of %s", kKnown[i].what);
    }
  }
  return hurray__fail(error, HURRAY_EFORMAT,
                      "not a Hurray file (bad magic), nor safetensors, .npy, .npz or GGUF by its "
                      "first bytes");
}

int hurray__view_open(const char *path, uint32_t flags, HurrayFileReader **out,
                      HurrayError *error) {
  View *v = calloc(1, sizeof *v);
  if (v == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  v->copy = (flags & HURRAY_FILE_OPEN_PREAD) != 0;
  FileSource *file = NULL;
  int format = HURRAY_FORMAT_AUTO;
  const char *name = NULL;
  int status = hurray__source_open(path, flags & HURRAY_FILE_OPEN_WRITABLE, &file, error);
  if (status == HURRAY_OK) status = hurray__source_map(file, HURRAY_MIN_ALIGNMENT, error);
  if (status == HURRAY_OK &&
      (hurray__sniff(file, &format, NULL) != HURRAY_OK || format == HURRAY_FORMAT_HURRAY)) {
    status = unknown_format(file, error);
  }
  if (status == HURRAY_OK && format == HURRAY_FORMAT_NPY) {
    status = hurray__stem_name(path, &v->names, &name, error);
  }
  if (status == HURRAY_OK) {
    status = hurray__source_open_input(file, format, name, &v->source, error); /* SINK */
    file = NULL;
  }
  hurray__source_release(file);
  FileSink index = {0};
  FileView view = {
      .ops = &kViewOps, .view = v, .read_only = !v->copy && !(flags & HURRAY_FILE_OPEN_WRITABLE)};
  if (status == HURRAY_OK) status = build_index(v, &index, error);
  if (status != HURRAY_OK) {
    hurray__sink_reset(&index);
    view_destroy(v);
    return status;
  }
  hurray__source_retain(v->source.file);
  view.source = v->source.file;
  view.info = (HurrayFileInfo){.alignment = HURRAY_MIN_ALIGNMENT,
                               .file_size = v->source.size,
                               .format = (uint8_t)format};
  view.index = index.data;
  view.index_length = index.len;
  return hurray__reader_open_view(&view, out, error); /* SINK for the view */
}
