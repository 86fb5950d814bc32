/* convert.c -- hurray_convert: opens the input as a source (what it holds: dense arrays, or
 * for Hurray files any tensors, and metadata), checks that the output format can hold all of
 * it, then streams every array into the output through one of four sinks. The Hurray sink
 * writes through HurrayFileWriter; the others through FileOutput, so every output appears at
 * its path only when complete. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "convert.h"

/* ---- formats ------------------------------------------------------------------------------ */

const char *hurray_format_name(int format) {
  switch (format) {
    case HURRAY_FORMAT_AUTO:
      return "auto";
    case HURRAY_FORMAT_HURRAY:
      return "hurray";
    case HURRAY_FORMAT_SAFETENSORS:
      return "safetensors";
    case HURRAY_FORMAT_NPY:
      return "npy";
    case HURRAY_FORMAT_NPZ:
      return "npz";
    case HURRAY_FORMAT_GGUF:
      return "gguf";
    default:
      return NULL;
  }
}

int hurray_format_from_path(const char *path, int *format, HurrayError *error) {
  if (path == NULL || format == NULL) {
    return hurray__fail(error, HURRAY_EINVAL, "hurray_format_from_path: %s is NULL",
                        path == NULL ? "path" : "format");
  }
  static const struct {
    const char *extension;
    int format;
  } kExtensions[] = {{".hurray", HURRAY_FORMAT_HURRAY},
                     {".hry", HURRAY_FORMAT_HURRAY},
                     {".safetensors", HURRAY_FORMAT_SAFETENSORS},
                     {".npy", HURRAY_FORMAT_NPY},
                     {".npz", HURRAY_FORMAT_NPZ},
                     {".gguf", HURRAY_FORMAT_GGUF}};
  size_t len = strlen(path);
  for (size_t i = 0; i < sizeof kExtensions / sizeof kExtensions[0]; i++) {
    size_t n = strlen(kExtensions[i].extension);
    if (len > n && strcasecmp(path + len - n, kExtensions[i].extension) == 0) {
      *format = kExtensions[i].format;
      return HURRAY_OK;
    }
  }
  return hurray__fail(error, HURRAY_EINVAL,
                      "cannot tell the format of '%.128s' from its extension (.hurray, .hry, "
                      ".safetensors, .npy, .npz, .gguf): name it in the options",
                      path);
}

int hurray__sniff(const FileSource *file, int *format, HurrayError *error) {
  const uint8_t *b = hurray__source_bytes(file);
  uint64_t size = hurray__source_size(file);
  if (size >= 8 && memcmp(b, "\x89HRY\r\n\x1a\n", 8) == 0) {
    *format = HURRAY_FORMAT_HURRAY;
  } else if (size >= 6 && memcmp(b, "\x93NUMPY", 6) == 0) {
    *format = HURRAY_FORMAT_NPY;
  } else if (size >= 4 && (memcmp(b, "PK\x03\x04", 4) == 0 || memcmp(b, "PK\x05\x06", 4) == 0)) {
    *format = HURRAY_FORMAT_NPZ;
  } else if (size >= 4 && memcmp(b, "GGUF", 4) == 0) {
    *format = HURRAY_FORMAT_GGUF;
  } else if (size >= 9 && hurray__load_le64(b) <= size - 8 && b[8] == '{') {
    *format = HURRAY_FORMAT_SAFETENSORS;
  } else {
    return hurray__fail(error, HURRAY_EFORMAT,
                        "neither its extension nor its first bytes tell the input's format");
  }
  return HURRAY_OK;
}

/* ---- sources ------------------------------------------------------------------------------ */

static int arena_fail(HurrayError *error) {
  return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
}

static int64_t *arena_copy(FileArena *arena, const int64_t *values, int32_t n) {
  int64_t *copy = hurray__arena_alloc(arena, (size_t)n * sizeof *copy);
  if (copy != NULL && n > 0) memcpy(copy, values, (size_t)n * sizeof *copy);
  return copy;
}

/* numel and data_bytes of an array, overflow-checked. */
static int measure(ConvArray *a, HurrayError *error) {
  uint64_t numel = 1, bits = 0;
  for (int32_t k = 0; k < a->ndim; k++) {
    if (hurray__mul_u64(numel, (uint64_t)a->shape[k], &numel)) {
      return hurray__fail(error, HURRAY_EOVERFLOW, "tensor '%.64s': the element count overflows",
                          a->name);
    }
  }
  if (hurray__mul_u64(numel, hurray_dtype_info(a->dtype)->bits, &bits)) {
    return hurray__fail(error, HURRAY_EOVERFLOW, "tensor '%.64s': the size overflows", a->name);
  }
  a->numel = numel;
  a->data_bytes = bits / 8 + (bits % 8 != 0);
  return HURRAY_OK;
}

/* A Hurray file, or a sharded checkpoint (whose shards may be safetensors files). */
static int open_hurray(ConvSource *s, const char *path, HurrayError *error) {
  uint32_t flags = hurray__shards_path(path) ? HURRAY_FILE_OPEN_FOREIGN : 0;
  int status = hurray_file_reader_open(path, flags, &s->reader, error);
  HurrayFileInfo info;
  if (status == HURRAY_OK) status = hurray_file_reader_info(s->reader, &info, error);
  if (status == HURRAY_OK)
    status = hurray_file_reader_metadata(s->reader, HURRAY_FILE_WHOLE, &s->metadata_tree, error);
  if (status != HURRAY_OK) return status;
  s->metadata = s->metadata_tree;
  s->arrays = hurray__arena_alloc(&s->arena, info.tensor_count * sizeof *s->arrays);
  if (s->arrays == NULL) return arena_fail(error);
  for (uint32_t i = 0; i < info.tensor_count && status == HURRAY_OK; i++) {
    HurrayFileTensorInfo ti;
    HurrayTensorDesc *d = NULL;
    HurrayMetaValue *meta = NULL;
    status = hurray_file_reader_tensor_info(s->reader, i, &ti, error);
    if (status == HURRAY_OK) status = hurray_file_reader_describe(s->reader, i, &d, error);
    if (status == HURRAY_OK) status = hurray_file_reader_metadata(s->reader, i, &meta, error);
    ConvArray *a = &s->arrays[i];
    *a = (ConvArray){.index = i};
    if (status == HURRAY_OK) {
      a->name_len = strlen(ti.name);
      a->name = hurray__arena_strndup(&s->arena, (const uint8_t *)ti.name, a->name_len);
      a->has_metadata = meta->count > 0;
      if (a->name == NULL) status = arena_fail(error);
    }
    if (status == HURRAY_OK && d->layout != HURRAY_LAYOUT_DENSE) {
      a->refusal = hurray_layout_name((int)d->layout);
    } else if (status == HURRAY_OK) {
      const HurrayArray *v = &d->parts[0];
      HurrayFileBufferInfo bi;
      a->dtype = v->dtype;
      a->ndim = v->ndim;
      a->shape = arena_copy(&s->arena, v->shape, v->ndim);
      a->strides = v->strides != NULL ? arena_copy(&s->arena, v->strides, v->ndim) : NULL;
      a->byte_offset = v->byte_offset;
      a->buffer = v->buffer;
      if (a->shape == NULL || (v->strides != NULL && a->strides == NULL))
        status = arena_fail(error);
      if (status == HURRAY_OK)
        status = hurray_file_reader_buffer_info(s->reader, i, v->buffer, &bi, error);
      if (status == HURRAY_OK) {
        a->region_size = bi.desc.byte_size;
        status = measure(a, error);
      }
    }
    hurray_meta_destroy(meta);
    hurray_tensor_desc_destroy(d);
    s->count = i + 1;
  }
  return status;
}

/* A parsed header's arrays and metadata (a MAP in the arena, kept only when not empty) as the
 * source's. */
static int take_header(ConvSource *s, uint32_t count, ConvArray *arrays,
                       const HurrayMetaValue *metadata, HurrayError *error) {
  s->count = count;
  s->arrays = arrays;
  if (metadata->count > 0) {
    s->metadata = hurray__arena_alloc(&s->arena, sizeof *s->metadata);
    if (s->metadata == NULL) return arena_fail(error);
    *s->metadata = *metadata;
  }
  return HURRAY_OK;
}

static int open_safetensors(ConvSource *s, HurrayError *error) {
  SafetensorsHeader h;
  int status = hurray__safetensors_parse(s->bytes, s->size, &s->arena, &h, error);
  return status == HURRAY_OK ? take_header(s, h.count, h.arrays, &h.metadata, error) : status;
}

static int open_gguf(ConvSource *s, HurrayError *error) {
  GgufHeader h;
  int status = hurray__gguf_parse(s->bytes, s->size, &s->arena, &h, error);
  return status == HURRAY_OK ? take_header(s, h.count, h.arrays, &h.metadata, error) : status;
}

/* An array from a parsed .npy header whose data is `available` bytes from data_offset on. */
static int npy_array(ConvSource *s, const NpyHeader *h, uint64_t available, ConvArray *a,
                     HurrayError *error) {
  if (available != h->data_bytes) {
    return hurray__fail(error, HURRAY_EFORMAT,
                        "the .npy header promises %" PRIu64 " bytes of data (%" PRIu64
                        " elements) but %" PRIu64 " follow it: %s",
                        h->data_bytes, h->numel, available,
                        available < h->data_bytes ? "truncated" : "trailing bytes");
  }
  a->dtype = h->dtype;
  a->swap = h->swap;
  a->ndim = h->ndim;
  a->shape = arena_copy(&s->arena, h->shape, h->ndim);
  if (a->shape == NULL) return arena_fail(error);
  if (h->fortran_order && h->ndim > 1) {
    int64_t strides[HURRAY_MAX_NDIM];
    hurray__fortran_strides(h->ndim, h->shape, strides);
    a->strides = arena_copy(&s->arena, strides, h->ndim);
    if (a->strides == NULL) return arena_fail(error);
  }
  a->region_size = h->data_bytes;
  a->numel = h->numel;
  a->data_bytes = h->data_bytes;
  return HURRAY_OK;
}

static int open_npy(ConvSource *s, const char *name, HurrayError *error) {
  NpyHeader h;
  size_t len = s->size < SIZE_MAX ? (size_t)s->size : SIZE_MAX;
  int status = hurray__npy_parse(s->bytes, len, 0, &h, error);
  if (status != HURRAY_OK) return status;
  s->arrays = hurray__arena_alloc(&s->arena, sizeof *s->arrays);
  if (s->arrays == NULL) return arena_fail(error);
  ConvArray *a = &s->arrays[0];
  *a = (ConvArray){.name = name, .name_len = strlen(name), .region_offset = h.data_offset};
  status = npy_array(s, &h, s->size - h.data_offset, a, error);
  if (status == HURRAY_OK) s->count = 1;
  return status;
}

static int open_npz(ConvSource *s, HurrayError *error) {
  int status = hurray__zip_read(s->bytes, s->size, &s->arena, &s->zip, error);
  if (status != HURRAY_OK) return status;
  s->arrays = hurray__arena_alloc(&s->arena, s->zip.count * sizeof *s->arrays);
  uint8_t *peek = malloc(12 + CONV_NPY_MAX_HEADER);
  if (s->arrays == NULL || peek == NULL) {
    free(peek);
    return arena_fail(error);
  }
  for (uint32_t i = 0; i < s->zip.count && status == HURRAY_OK; i++) {
    const ZipMember *m = &s->zip.members[i];
    ConvArray *a = &s->arrays[i];
    *a = (ConvArray){.name = m->name, .name_len = m->name_len - 4, .index = i};
    if (m->name_len >= 8 && strcmp(m->name + m->name_len - 8, "data.pkl") == 0) {
      status = hurray__fail(error, HURRAY_EUNSUPPORTED,
                            "not a .npz but a PyTorch checkpoint (torch.save's zip, member "
                            "'%.64s'): load it with torch.load and save its tensors with "
                            "hurray.save",
                            m->name);
      break;
    }
    if (m->name_len < 5 || strcasecmp(m->name + m->name_len - 4, ".npy") != 0) {
      status = hurray__fail(error, HURRAY_EUNSUPPORTED,
                            "member '%.64s' is not a .npy array (a .npz holds NAME.npy members)",
                            m->name);
      break;
    }
    char *stem = hurray__arena_strndup(&s->arena, (const uint8_t *)m->name, a->name_len);
    if (stem == NULL) {
      status = arena_fail(error);
      break;
    }
    a->name = stem;
    status = hurray__check_name((const uint8_t *)stem, a->name_len, HURRAY_EUNSUPPORTED,
                                "the member's name (a Hurray name, without .npy)", error);
    size_t got = 0;
    NpyHeader h;
    if (status == HURRAY_OK) {
      status = hurray__zip_peek(s->bytes, m, peek, 12 + CONV_NPY_MAX_HEADER, &got, error);
      if (status != HURRAY_OK) break; /* zip errors name the member */
    }
    /* Byte offsets of a stored member are file offsets; of a deflated one, inflated ones. */
    if (status == HURRAY_OK) {
      status = hurray__npy_parse(peek, got, m->method == 0 ? m->data_offset : 0, &h, error);
    }
    if (status == HURRAY_OK) {
      a->region_offset = h.data_offset;
      status = npy_array(s, &h, m->size - h.data_offset, a, error);
    }
    if (status != HURRAY_OK) {
      hurray__error_prefix(error, status, "member '%.64s'%s: ", m->name,
                           m->method == 0 ? "" : " (inflated)");
    }
  }
  free(peek);
  s->count = status == HURRAY_OK ? s->zip.count : 0;
  return status;
}

int hurray__source_open_input(FileSource *file, int format, const char *name, ConvSource *out,
                              HurrayError *error) {
  ConvSource *s = out;
  *s = (ConvSource){.format = format, .file = file};
  int status = HURRAY_OK;
  s->size = hurray__source_size(file);
  if (s->size == 0) status = hurray__fail(error, HURRAY_EFORMAT, "the input is empty");
  if (status == HURRAY_OK) status = hurray__source_map(file, HURRAY_MIN_ALIGNMENT, error);
  if (status == HURRAY_OK) {
    s->bytes = hurray__source_bytes(file);
    switch (format) {
      case HURRAY_FORMAT_SAFETENSORS:
        status = open_safetensors(s, error);
        break;
      case HURRAY_FORMAT_NPY:
        status = open_npy(s, name, error);
        break;
      case HURRAY_FORMAT_NPZ:
        status = open_npz(s, error);
        break;
      case HURRAY_FORMAT_GGUF:
        status = open_gguf(s, error);
        break;
      default:
        status = hurray__fail(error, HURRAY_EINVAL, "format %d is no input format here", format);
    }
  }
  if (status != HURRAY_OK) hurray__source_close(s);
  return status;
}

void hurray__source_close(ConvSource *s) {
  hurray_file_reader_destroy(s->reader);
  hurray_meta_destroy(s->metadata_tree);
  hurray__source_release(s->file);
  hurray__arena_free(&s->arena);
  *s = (ConvSource){0};
}

/* ---- reading arrays ----------------------------------------------------------------------- */

static int checksum_mismatch(const char *name, uint32_t buffer, HurrayError *error) {
  return hurray__fail(error, HURRAY_ECHECKSUM,
                      "tensor '%.64s', buffer %" PRIu32 ": checksum mismatch: the input is corrupt",
                      name, buffer);
}

/* Streams bytes [offset, offset + len) of buffer `buffer` of a Hurray input's tensor `index`,
 * read with pread, while hashing the whole buffer in order (the bytes before, those streamed,
 * those after) and checking it against its checksum. */
static int stream_hurray(ConvSource *s, uint32_t index, const char *name, uint32_t buffer,
                         uint64_t offset, uint64_t len, ConvChunkFn fn, void *context,
                         HurrayError *error) {
  bool checksummed = false;
  const FileSource *file = hurray__reader_source(s->reader, index, &checksummed);
  HurrayFileBufferInfo bi;
  FileHasher *hasher = hurray__hasher_create();
  int status = hasher != NULL
                   ? hurray_file_reader_buffer_info(s->reader, index, buffer, &bi, error)
                   : arena_fail(error);
  if (status == HURRAY_OK)
    status = hurray__stream_file(file, bi.offset, offset, 0, hasher, NULL, NULL, error);
  if (status == HURRAY_OK)
    status = hurray__stream_file(file, bi.offset + offset, len, 0, hasher, fn, context, error);
  if (status == HURRAY_OK) {
    status = hurray__stream_file(file, bi.offset + offset + len,
                                 bi.desc.byte_size - offset - len, 0, hasher, NULL, NULL, error);
  }
  if (status == HURRAY_OK && checksummed && hurray__hasher_digest(hasher) != bi.checksum)
    status = checksum_mismatch(name, buffer, error);
  hurray__hasher_destroy(hasher);
  return status;
}

int hurray__source_stream(ConvSource *s, const ConvArray *a, uint64_t offset, uint64_t len,
                          ConvChunkFn fn, void *context, HurrayError *error) {
  if (offset > a->region_size || len > a->region_size - offset) {
    return hurray__fail(error, HURRAY_EINVAL, "tensor '%.64s': bytes past its region requested",
                        a->name);
  }
  switch (s->format) {
    case HURRAY_FORMAT_HURRAY:
      return stream_hurray(s, a->index, a->name, a->buffer, offset, len, fn, context, error);
    case HURRAY_FORMAT_NPZ: {
      SwapAdapter adapter;
      if (a->swap > 1) {
        int status = hurray__swap_init(&adapter, a->swap, fn, context, error);
        if (status != HURRAY_OK) return status;
        fn = hurray__swap_chunk;
        context = &adapter;
      }
      int status = hurray__zip_stream(s->file, &s->zip.members[a->index],
                                      a->region_offset + offset, len, fn, context, error);
      if (a->swap > 1) {
        if (status == HURRAY_OK) return hurray__swap_finish(&adapter, error);
        hurray__swap_free(&adapter);
      }
      if (status != HURRAY_OK) hurray__error_prefix(error, status, "tensor '%.64s': ", a->name);
      return status;
    }
    default: /* safetensors, npy */
      return hurray__stream_file(s->file, a->region_offset + offset, len, a->swap, NULL, fn,
                                 context, error);
  }
}

int hurray__source_c_order(ConvSource *s, const ConvArray *a, ConvChunkFn fn, void *context,
                           HurrayError *error) {
  if (hurray__array_is_c_order(a)) {
    return hurray__source_stream(s, a, a->byte_offset, a->data_bytes, fn, context, error);
  }
  /* Gathering reads the region out of order: read it into memory with pread (the region's
   * size in memory, for the time of one tensor), check it, then gather from there. */
  if (s->format == HURRAY_FORMAT_HURRAY) {
    HurrayFileBufferInfo bi;
    uint8_t *data = NULL;
    int status = hurray_file_reader_buffer_info(s->reader, a->index, a->buffer, &bi, error);
    bool checksummed = false;
    if (status == HURRAY_OK) {
      status = hurray__read_region(hurray__reader_source(s->reader, a->index, &checksummed),
                                   bi.offset, a->region_size, &data, error);
    }
    if (status == HURRAY_OK && checksummed &&
        hurray__xxh3(data, (size_t)a->region_size) != bi.checksum) {
      status = checksum_mismatch(a->name, a->buffer, error);
    }
    if (status == HURRAY_OK) status = hurray__stream_gather(a, data, fn, context, error);
    free(data);
    return status;
  }
  if (s->format == HURRAY_FORMAT_NPZ) {
    const ZipMember *m = &s->zip.members[a->index];
    if (m->method != 0) {
      return hurray__fail(error, HURRAY_EUNSUPPORTED,
                          "tensor '%.64s' is a compressed Fortran-order member: reordering it "
                          "into C order needs it uncompressed (convert to Hurray or .npy first)",
                          a->name);
    }
    int status = hurray__zip_stream(s->file, m, 0, 0, NULL, NULL, error); /* CRC-32 */
    uint8_t *data = NULL;
    if (status == HURRAY_OK) {
      status = hurray__read_region(s->file, m->data_offset + a->region_offset, a->region_size,
                                   &data, error);
    }
    if (status == HURRAY_OK) status = hurray__stream_gather(a, data, fn, context, error);
    free(data);
    return status;
  }
  uint8_t *data = NULL;
  int status = hurray__read_region(s->file, a->region_offset, a->region_size, &data, error);
  if (status == HURRAY_OK) status = hurray__stream_gather(a, data, fn, context, error);
  free(data);
  return status;
}

/* ---- progress ----------------------------------------------------------------------------- */

enum { REPORT_STEP = 64u << 20 };

/* Counts the data bytes written on their way to the output. */
typedef struct Pipe {
  ConvChunkFn fn;
  void *context;
  HurrayFileProgressFn progress;
  void *progress_context;
  uint64_t done, total, reported;
} Pipe;

static void report(Pipe *p) {
  if (p->progress != NULL) p->progress(p->progress_context, p->done, p->total);
  p->reported = p->done;
}

static int pipe_chunk(void *context, const uint8_t *bytes, size_t len, HurrayError *error) {
  Pipe *p = context;
  int status = p->fn(p->context, bytes, len, error);
  p->done += len;
  if (p->done - p->reported >= REPORT_STEP) report(p);
  return status;
}

static int output_chunk(void *context, const uint8_t *bytes, size_t len, HurrayError *error) {
  return hurray__output_write(context, bytes, len, error);
}

static int writer_chunk(void *context, const uint8_t *bytes, size_t len, HurrayError *error) {
  return hurray_file_writer_write(context, bytes, len, error);
}

/* For chunks a foreign input's stream read or inflated into memory of its own. */
static int writer_owned_chunk(void *context, const uint8_t *bytes, size_t len,
                              HurrayError *error) {
  return hurray__file_writer_write_owned(context, bytes, len, error);
}

/* ---- what an output can hold -------------------------------------------------------------- */

static int check_holdable(const ConvArray *a, int format, HurrayError *error) {
  const char *what = hurray_format_name(format);
  if (a->refusal != NULL) {
    return hurray__fail(error, HURRAY_EUNSUPPORTED,
                        "tensor '%.64s' is a %s tensor: %s holds dense arrays only", a->name,
                        a->refusal, what);
  }
  const char *dtype = format == HURRAY_FORMAT_SAFETENSORS ? hurray__safetensors_dtype_name(a->dtype)
                                                          : hurray__npy_descr(a->dtype);
  if (dtype == NULL) {
    return hurray__fail(error, HURRAY_EUNSUPPORTED,
                        "tensor '%.64s' is %s, which %s has no dtype for", a->name,
                        hurray_dtype_info(a->dtype)->name, what);
  }
  uint32_t bits = hurray_dtype_info(a->dtype)->bits;
  if (bits % 8 != 0 && (a->numel * bits) % 8 != 0) { /* numel * bits fits: measured */
    return hurray__fail(error, HURRAY_EUNSUPPORTED,
                        "tensor '%.64s': %" PRIu64
                        " %s elements are not a whole number of bytes, "
                        "which safetensors requires",
                        a->name, a->numel, hurray_dtype_info(a->dtype)->name);
  }
  return HURRAY_OK;
}

/* Metadata an output without a place for it would lose. */
static int check_metadata(const ConvSource *s, int format, uint32_t flags, HurrayError *error) {
  if (flags & HURRAY_CONVERT_DROP_METADATA) return HURRAY_OK;
  if (format != HURRAY_FORMAT_SAFETENSORS && format != HURRAY_FORMAT_GGUF && s->metadata != NULL &&
      s->metadata->count > 0) {
    return hurray__fail(error, HURRAY_EUNSUPPORTED,
                        "the input has file metadata, which %s cannot hold (drop it with "
                        "HURRAY_CONVERT_DROP_METADATA, hurray convert --drop-metadata)",
                        hurray_format_name(format));
  }
  for (uint32_t i = 0; i < s->count; i++) {
    if (s->arrays[i].has_metadata) {
      return hurray__fail(error, HURRAY_EUNSUPPORTED,
                          "tensor '%.64s' has metadata of its own, which %s cannot hold (drop it "
                          "with HURRAY_CONVERT_DROP_METADATA, hurray convert --drop-metadata)",
                          s->arrays[i].name, hurray_format_name(format));
    }
  }
  return HURRAY_OK;
}

/* ---- sinks -------------------------------------------------------------------------------- */

static bool durable(const HurrayConvertOptions *o) {
  return !(o->flags & HURRAY_CONVERT_NOT_DURABLE);
}

/* A Hurray output: one file, or (max_shard_size) the shards of a checkpoint, each tensor in the
 * shard the shard writer chooses for it. */
static int to_hurray(ConvSource *s, const char *path, const HurrayConvertOptions *o, Pipe *pipe,
                     HurrayError *error) {
  HurrayFileWriterOptions wo = {.alignment = o->alignment,
                                .flags = durable(o) ? 0 : HURRAY_FILE_WRITE_NOT_DURABLE};
  HurrayFileWriter *w = NULL;
  HurrayShardWriter *shards = NULL;
  int status = o->max_shard_size > 0
                   ? hurray_shard_writer_create(path, o->max_shard_size, &wo, s->metadata,
                                                &shards, error)
                   : hurray_file_writer_create(path, &wo, &w, error);
  if (status == HURRAY_OK && w != NULL && s->metadata != NULL) { /* a Hurray file holds every metadata */
    status = hurray_file_writer_set_metadata(w, s->metadata, error);
  }
  for (uint32_t i = 0; i < s->count; i++)
    pipe->total += s->format == HURRAY_FORMAT_HURRAY ? 0 : s->arrays[i].region_size;
  if (s->format == HURRAY_FORMAT_HURRAY) {
    HurrayFileInfo info;
    hurray_file_reader_info(s->reader, &info, NULL);
    pipe->total = info.data_bytes;
  }
  report(pipe);
  pipe->fn = writer_chunk;
  for (uint32_t i = 0; i < s->count && status == HURRAY_OK; i++) {
    const ConvArray *a = &s->arrays[i];
    HurrayFileTensorInfo ti = {.data_bytes = a->region_size};
    if (s->format == HURRAY_FORMAT_HURRAY)
      status = hurray_file_reader_tensor_info(s->reader, i, &ti, error);
    if (status == HURRAY_OK && shards != NULL)
      status = hurray_shard_writer_next(shards, a->name, ti.data_bytes, &w, error);
    pipe->context = w;
    if (status != HURRAY_OK) break;
    if (s->format == HURRAY_FORMAT_HURRAY) { /* any layout, as it is, buffer by buffer */
      HurrayTensorDesc *d = NULL;
      HurrayMetaValue *meta = NULL;
      status = hurray_file_reader_describe(s->reader, i, &d, error);
      if (status == HURRAY_OK) status = hurray_file_reader_metadata(s->reader, i, &meta, error);
      if (status == HURRAY_OK) status = hurray_file_writer_begin_tensor(w, a->name, error);
      for (uint32_t b = 0; b < ti.buffer_count && status == HURRAY_OK; b++) {
        HurrayFileBufferInfo bi;
        status = hurray_file_reader_buffer_info(s->reader, i, b, &bi, error);
        if (status == HURRAY_OK) status = hurray_file_writer_begin_buffer(w, bi.role, error);
        if (status == HURRAY_OK) {
          status = stream_hurray(s, i, a->name, b, 0, bi.desc.byte_size, pipe_chunk, pipe, error);
        }
      }
      if (status == HURRAY_OK) status = hurray_file_writer_end_tensor(w, d, meta, error);
      hurray_meta_destroy(meta);
      hurray_tensor_desc_destroy(d);
    } else {
      HurrayArray part;
      HurrayTensorDesc desc;
      hurray__array_dense_desc(a, 0, &part, &desc);
      status = hurray_file_writer_begin_tensor(w, a->name, error);
      if (status == HURRAY_OK)
        status = hurray_file_writer_begin_buffer(w, HURRAY_ROLE_VALUES, error);
      pipe->fn = writer_owned_chunk; /* read or inflated into memory of the stream's own */
      if (status == HURRAY_OK)
        status = hurray__source_stream(s, a, 0, a->region_size, pipe_chunk, pipe, error);
      if (status == HURRAY_OK) status = hurray_file_writer_end_tensor(w, &desc, NULL, error);
    }
    if (status == HURRAY_OK) report(pipe);
  }
  if (shards != NULL) {
    if (status == HURRAY_OK) status = hurray_shard_writer_finish(shards, error);
    hurray_shard_writer_destroy(shards); /* also the shard writer's file writers */
    return status;
  }
  if (status == HURRAY_OK) status = hurray_file_writer_finish(w, error);
  hurray_file_writer_destroy(w);
  return status;
}

/* Opens the output at `path`, writes `header` to it and points `pipe` at it. */
static int begin_output(FileOutput *out, const char *path, const HurrayConvertOptions *o,
                        const FileSink *header, Pipe *pipe, HurrayError *error) {
  int status = hurray__output_open(out, path, durable(o), error);
  if (status == HURRAY_OK) status = hurray__output_write(out, header->data, header->len, error);
  pipe->fn = output_chunk;
  pipe->context = out;
  return status;
}

static int to_safetensors(ConvSource *s, const char *path, const HurrayConvertOptions *o,
                          Pipe *pipe, HurrayError *error) {
  uint32_t alignment = o->alignment ? o->alignment : 8;
  if (alignment < 8 || alignment > HURRAY_FILE_MAX_ALIGNMENT || (alignment & (alignment - 1))) {
    return hurray__fail(error, HURRAY_EALIGN,
                        "alignment %" PRIu32 " is not a power of two in [8, %u]", alignment,
                        HURRAY_FILE_MAX_ALIGNMENT);
  }
  const ConvArray **order = malloc((s->count ? s->count : 1) * sizeof *order);
  if (order == NULL) return arena_fail(error);
  int status = HURRAY_OK;
  for (uint32_t i = 0; i < s->count; i++) {
    order[i] = &s->arrays[i];
    if (status == HURRAY_OK) status = check_holdable(order[i], HURRAY_FORMAT_SAFETENSORS, error);
    pipe->total += order[i]->data_bytes;
  }
  hurray__safetensors_sort(order, s->count);
  FileSink header = {0};
  /* The file metadata has a place in safetensors (per-tensor metadata does not: see
   * check_metadata); a value that is not a string has one only as JSON text. */
  SafetensorsNonString non_string = (o->flags & HURRAY_CONVERT_METADATA_JSON) ? NON_STRING_JSON
                                    : (o->flags & HURRAY_CONVERT_DROP_METADATA) ? NON_STRING_DROP
                                                                                : NON_STRING_REFUSE;
  if (status == HURRAY_OK) {
    status = hurray__safetensors_header(&header, order, s->count, s->metadata, non_string,
                                        alignment, error);
  }
  FileOutput out = {.fd = -1};
  if (status == HURRAY_OK) status = begin_output(&out, path, o, &header, pipe, error);
  hurray__sink_reset(&header);
  if (status == HURRAY_OK) report(pipe);
  for (uint32_t i = 0; i < s->count && status == HURRAY_OK; i++) {
    status = hurray__source_c_order(s, order[i], pipe_chunk, pipe, error);
    if (status == HURRAY_OK) report(pipe);
  }
  if (status == HURRAY_OK) status = hurray__output_commit(&out, error);
  hurray__output_close(&out);
  free(order);
  return status;
}

/* GGUF v3: the header, then each array's bytes in C order, each padded with zeros to the
 * alignment. File metadata becomes key/values; what GGUF has no type for is refused by name. */
static int to_gguf(ConvSource *s, const char *path, const HurrayConvertOptions *o, Pipe *pipe,
                   HurrayError *error) {
  if (o->alignment != 0) {
    return hurray__fail(error, HURRAY_EINVAL,
                        "a GGUF file's alignment is its general.alignment metadata, not an option");
  }
  FileSink header = {0};
  uint32_t alignment = 0;
  const HurrayMetaValue *metadata = (o->flags & HURRAY_CONVERT_DROP_METADATA) ? NULL : s->metadata;
  int status = hurray__gguf_header(&header, s->arrays, s->count, metadata, &alignment, error);
  for (uint32_t i = 0; i < s->count; i++) pipe->total += s->arrays[i].data_bytes;
  FileOutput out = {.fd = -1};
  if (status == HURRAY_OK) status = begin_output(&out, path, o, &header, pipe, error);
  hurray__sink_reset(&header);
  static const uint8_t kZeros[64] = {0};
  if (status == HURRAY_OK) report(pipe);
  for (uint32_t i = 0; i < s->count && status == HURRAY_OK; i++) {
    status = hurray__source_c_order(s, &s->arrays[i], pipe_chunk, pipe, error);
    uint64_t pad = (alignment - s->arrays[i].data_bytes % alignment) % alignment;
    while (status == HURRAY_OK && pad > 0) {
      size_t n = pad < sizeof kZeros ? (size_t)pad : sizeof kZeros;
      status = hurray__output_write(&out, kZeros, n, error);
      pad -= n;
    }
    if (status == HURRAY_OK) report(pipe);
  }
  if (status == HURRAY_OK) status = hurray__output_commit(&out, error);
  hurray__output_close(&out);
  return status;
}

/* The preamble and then the data of one array as .npy, to `fn`. Fortran-contiguous arrays are
 * written as they are with fortran_order True; other strided ones are gathered into C order. */
static int write_npy(ConvSource *s, const ConvArray *a, Pipe *pipe, FileSink *preamble,
                     HurrayError *error) {
  bool fortran = !hurray__array_is_c_order(a) && hurray__array_is_f_order(a);
  preamble->len = 0;
  int status = hurray__npy_write_header(preamble, a->dtype, fortran, a->ndim, a->shape, error);
  if (status == HURRAY_OK) status = pipe->fn(pipe->context, preamble->data, preamble->len, error);
  if (status != HURRAY_OK) return status;
  if (fortran)
    return hurray__source_stream(s, a, a->byte_offset, a->data_bytes, pipe_chunk, pipe, error);
  return hurray__source_c_order(s, a, pipe_chunk, pipe, error);
}

static int choose_array(const ConvSource *s, const char *name, const ConvArray **out,
                        HurrayError *error) {
  if (name == NULL) {
    if (s->count == 1) {
      *out = &s->arrays[0];
      return HURRAY_OK;
    }
    return hurray__fail(error, HURRAY_EINVAL,
                        "a .npy file holds one array but the input holds %" PRIu32
                        " tensors: choose one by name",
                        s->count);
  }
  for (uint32_t i = 0; i < s->count; i++) {
    if (strcmp(s->arrays[i].name, name) == 0) {
      *out = &s->arrays[i];
      return HURRAY_OK;
    }
  }
  return hurray__fail(error, HURRAY_EINVAL, "the input has no tensor named '%.64s'", name);
}

static int to_npy(ConvSource *s, const char *path, const HurrayConvertOptions *o, Pipe *pipe,
                  HurrayError *error) {
  const ConvArray *a = NULL;
  int status = choose_array(s, o->name, &a, error);
  if (status == HURRAY_OK) status = check_holdable(a, HURRAY_FORMAT_NPY, error);
  FileOutput out = {.fd = -1};
  FileSink preamble = {0};
  if (status == HURRAY_OK) status = hurray__output_open(&out, path, durable(o), error);
  pipe->fn = output_chunk;
  pipe->context = &out;
  if (status == HURRAY_OK) {
    pipe->total = a->data_bytes;
    report(pipe);
    status = write_npy(s, a, pipe, &preamble, error);
  }
  if (status == HURRAY_OK) report(pipe);
  if (status == HURRAY_OK) status = hurray__output_commit(&out, error);
  hurray__output_close(&out);
  hurray__sink_reset(&preamble);
  return status;
}

static int to_npz(ConvSource *s, const char *path, const HurrayConvertOptions *o, Pipe *pipe,
                  HurrayError *error) {
  int status = HURRAY_OK;
  for (uint32_t i = 0; i < s->count && status == HURRAY_OK; i++) {
    status = check_holdable(&s->arrays[i], HURRAY_FORMAT_NPZ, error);
    pipe->total += s->arrays[i].data_bytes;
  }
  FileOutput out = {.fd = -1};
  ZipWriter *zip = NULL;
  FileSink preamble = {0};
  char *member = malloc(HURRAY_MAX_NAME + 5);
  if (member == NULL && status == HURRAY_OK) status = arena_fail(error);
  if (status == HURRAY_OK) status = hurray__output_open(&out, path, durable(o), error);
  if (status == HURRAY_OK) status = hurray__zip_writer_create(&out, &zip, error);
  pipe->fn = hurray__zip_writer_write;
  pipe->context = zip;
  if (status == HURRAY_OK) report(pipe);
  for (uint32_t i = 0; i < s->count && status == HURRAY_OK; i++) {
    const ConvArray *a = &s->arrays[i];
    bool fortran = !hurray__array_is_c_order(a) && hurray__array_is_f_order(a);
    preamble.len = 0;
    status = hurray__npy_write_header(&preamble, a->dtype, fortran, a->ndim, a->shape, error);
    memcpy(member, a->name, a->name_len);
    memcpy(member + a->name_len, ".npy", 4);
    if (status == HURRAY_OK) {
      status = hurray__zip_writer_begin(zip, member, a->name_len + 4, preamble.len + a->data_bytes,
                                        error);
    }
    if (status == HURRAY_OK) status = write_npy(s, a, pipe, &preamble, error);
    if (status == HURRAY_OK) status = hurray__zip_writer_end(zip, error);
    if (status == HURRAY_OK) report(pipe);
  }
  if (status == HURRAY_OK) status = hurray__zip_writer_finish(zip, error);
  if (status == HURRAY_OK) status = hurray__output_commit(&out, error);
  hurray__zip_writer_destroy(zip);
  hurray__output_close(&out);
  hurray__sink_reset(&preamble);
  free(member);
  return status;
}

/* ---- hurray_convert ----------------------------------------------------------------------- */

static int check_options(const HurrayConvertOptions *o, HurrayError *error) {
  if (o->reserved0[0] | o->reserved0[1] || o->reserved1 != 0 ||
      !hurray__all_zero(o->reserved, sizeof o->reserved)) {
    return hurray__fail(error, HURRAY_EINVAL, "reserved conversion options are not zero");
  }
  if (hurray_format_name(o->input_format) == NULL || hurray_format_name(o->output_format) == NULL) {
    return hurray__fail(
        error, HURRAY_EINVAL, "unknown format %u",
        hurray_format_name(o->input_format) == NULL ? o->input_format : o->output_format);
  }
  if (o->flags &
      ~(HURRAY_CONVERT_METADATA_JSON | HURRAY_CONVERT_DROP_METADATA | HURRAY_CONVERT_NOT_DURABLE)) {
    return hurray__fail(error, HURRAY_EINVAL, "conversion flags 0x%" PRIX32 " include unknown bits",
                        o->flags);
  }
  return HURRAY_OK;
}

int hurray__stem_name(const char *path, FileArena *arena, const char **out, HurrayError *error) {
  const char *base = strrchr(path, '/');
  base = base != NULL ? base + 1 : path;
  const char *dot = strrchr(base, '.');
  size_t len = dot != NULL && dot != base ? (size_t)(dot - base) : strlen(base);
  if (len == 0 || len > HURRAY_MAX_NAME ||
      hurray__check_name((const uint8_t *)base, len, HURRAY_EINVAL, "", NULL) != HURRAY_OK) {
    return hurray__fail(error, HURRAY_EINVAL,
                        "the stem of '%.128s' is no tensor name: give the .npy array a name", path);
  }
  *out = hurray__arena_strndup(arena, (const uint8_t *)base, len);
  return *out != NULL ? HURRAY_OK : arena_fail(error);
}

int hurray_convert(const char *input, const char *output, const HurrayConvertOptions *options,
                   HurrayError *error) {
  if (input == NULL || output == NULL) {
    return hurray__fail(error, HURRAY_EINVAL, "hurray_convert: %s is NULL",
                        input == NULL ? "input" : "output");
  }
  const HurrayConvertOptions defaults = {0};
  const HurrayConvertOptions *o = options != NULL ? options : &defaults;
  int status = check_options(o, error);
  int in = o->input_format, out = o->output_format;
  if (status == HURRAY_OK && o->max_shard_size > 0) { /* a checkpoint of Hurray shards */
    int named = HURRAY_FORMAT_AUTO; /* never Hurray shards under another format's name */
    if (out == HURRAY_FORMAT_AUTO && hurray_format_from_path(output, &named, NULL) == HURRAY_OK)
      out = named;
    if (out != HURRAY_FORMAT_AUTO && out != HURRAY_FORMAT_HURRAY) {
      status = hurray__fail(error, HURRAY_EINVAL, "max_shard_size writes Hurray shards, not %s",
                            hurray_format_name(out));
    }
    out = HURRAY_FORMAT_HURRAY;
  }
  if (status == HURRAY_OK && out == HURRAY_FORMAT_AUTO) {
    status = hurray_format_from_path(output, &out, error);
  }
  if (status == HURRAY_OK && o->alignment != 0 && out != HURRAY_FORMAT_HURRAY &&
      out != HURRAY_FORMAT_SAFETENSORS && out != HURRAY_FORMAT_GGUF) {
    status = hurray__fail(error, HURRAY_EINVAL,
                          "alignment applies to Hurray and safetensors outputs, not %s",
                          hurray_format_name(out));
  }
  if (status == HURRAY_OK && in == HURRAY_FORMAT_AUTO && hurray__shards_path(input)) {
    in = HURRAY_FORMAT_HURRAY; /* a sharded checkpoint, read as one Hurray input */
  } else if (status == HURRAY_OK && in == HURRAY_FORMAT_AUTO &&
             hurray_format_from_path(input, &in, NULL) != HURRAY_OK) {
    in = HURRAY_FORMAT_AUTO; /* sniffed below, once mapped */
  }
  if (status != HURRAY_OK) return status;

  ConvSource source = {0};
  FileArena names = {0};
  if (in == HURRAY_FORMAT_HURRAY) {
    source.format = in;
    status = open_hurray(&source, input, error);
    if (status != HURRAY_OK) hurray__source_close(&source);
  } else {
    FileSource *file = NULL;
    const char *name = o->name;
    status = hurray__source_open(input, 0, &file, error);
    if (status == HURRAY_OK && in == HURRAY_FORMAT_AUTO) {
      uint64_t size = hurray__source_size(file);
      status = size == 0 ? hurray__fail(error, HURRAY_EFORMAT, "the input is empty")
                         : hurray__source_map(file, HURRAY_MIN_ALIGNMENT, error);
      if (status == HURRAY_OK) status = hurray__sniff(file, &in, error);
      if (status == HURRAY_OK && in == HURRAY_FORMAT_HURRAY) {
        hurray__source_release(file);
        file = NULL;
        source.format = in;
        status = open_hurray(&source, input, error);
        if (status != HURRAY_OK) hurray__source_close(&source);
      }
    }
    if (status == HURRAY_OK && in == HURRAY_FORMAT_NPY && name == NULL) {
      status = hurray__stem_name(input, &names, &name, error);
    }
    if (status == HURRAY_OK && in != HURRAY_FORMAT_HURRAY) {
      status = hurray__source_open_input(file, in, name, &source, error); /* SINK for file */
      file = NULL;
    }
    hurray__source_release(file);
  }
  Pipe pipe = {.progress = o->progress, .progress_context = o->progress_context};
  if (status == HURRAY_OK && out != HURRAY_FORMAT_HURRAY)
    status = check_metadata(&source, out, o->flags, error);
  if (status == HURRAY_OK) {
    switch (out) {
      case HURRAY_FORMAT_HURRAY:
        status = to_hurray(&source, output, o, &pipe, error);
        break;
      case HURRAY_FORMAT_SAFETENSORS:
        status = to_safetensors(&source, output, o, &pipe, error);
        break;
      case HURRAY_FORMAT_NPY:
        status = to_npy(&source, output, o, &pipe, error);
        break;
      case HURRAY_FORMAT_GGUF:
        status = to_gguf(&source, output, o, &pipe, error);
        break;
      default:
        status = to_npz(&source, output, o, &pipe, error);
    }
  }
  hurray__source_close(&source);
  hurray__arena_free(&names);
  return status;
}
