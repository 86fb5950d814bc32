/* info.c -- `hurray info FILE`: what a file holds, without reading its data. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char kInfoUsage[] =
    "usage: hurray info [-bjp] FILE\n"
    "\n"
    "Prints the file's format version, alignment and metadata, then each tensor: its layout,\n"
    "dtype, shape and size, the children of composite tensors, and its metadata. Only the\n"
    "index is read; use `hurray verify` to check the data. With --json, all of it (buffers\n"
    "and every array of every descriptor included) as one JSON object (docs/impl/cli.md).\n"
    "\n"
    "options:\n"
    "  -b, --buffers  also list each buffer: role, size, file offset and checksum\n"
    "  -j, --json     print JSON for programs instead of text for people\n"
    "  -p, --pread    read with pread instead of mapping the file\n"
    "  -h, --help     show this help\n";

/* `v` as JSON-like text; a list of more than `items` items (0: no limit) shows its first
 * CLI_META_ITEMS and how many more there are, so that a GGUF tokenizer (128,256 tokens,
 * 280,147 merges) is a line, not 12 MB. */
enum { CLI_META_ITEMS = 8 };

static void print_meta(const HurrayMetaValue *v, uint32_t items) {
  switch (v->type) {
    case HURRAY_META_BOOL:
      fputs(v->as.boolean ? "true" : "false", stdout);
      break;
    case HURRAY_META_INT64:
      printf("%" PRId64, v->as.int64);
      break;
    case HURRAY_META_FLOAT64: {
      char text[HURRAY_FLOAT64_TEXT_SIZE];
      hurray_format_float64(v->as.float64, text);
      fputs(text, stdout);
      break;
    }
    case HURRAY_META_STRING:
      cli_escape(stdout, v->as.string, v->count, true);
      break;
    case HURRAY_META_NULL:
      fputs("null", stdout);
      break;
    case HURRAY_META_INTEGER: /* canonical decimal text, checked by the reader */
      fwrite(v->as.string, 1, v->count, stdout);
      break;
    default: { /* LIST, MAP */
      bool map = v->type == HURRAY_META_MAP;
      putchar(map ? '{' : '[');
      const bool cut = !map && items > 0 && v->count > items;
      for (uint32_t i = 0; i < (cut ? CLI_META_ITEMS : v->count); i++) {
        if (i > 0) fputs(", ", stdout);
        if (map) {
          cli_escape(stdout, v->keys[i], strlen(v->keys[i]), true);
          fputs(": ", stdout);
        }
        print_meta(&v->as.items[i], items);
      }
      if (cut) printf(", ... %" PRIu32 " more", v->count - CLI_META_ITEMS);
      putchar(map ? '}' : ']');
    }
  }
}

void cli_print_meta(const HurrayMetaValue *v) { print_meta(v, 0); }

/* The metadata of the file (HURRAY_FILE_WHOLE) or of a tensor: as text, a line "metadata: {...}"
 * when there is any, lists of more than 16 items cut short; as JSON, `"metadata": {...}` always,
 * all of it. */
static int print_metadata(const HurrayFileReader *r, uint32_t index, const char *indent,
                          bool json) {
  HurrayMetaValue *meta = NULL;
  HurrayError error = {0};
  int status = hurray_file_reader_metadata(r, index, &meta, &error);
  if (status != HURRAY_OK) return cli_fail(&kInfoCommand, "metadata", status, &error);
  if (json || meta->count > 0) {
    printf(json ? "%s\"metadata\": " : "%smetadata: ", indent);
    print_meta(meta, json ? 0 : 2 * CLI_META_ITEMS);
    if (!json) putchar('\n');
  }
  hurray_meta_destroy(meta);
  return EXIT_OK;
}

/* The file's HurrayFormat: a Hurray file keeps an XXH3-64 checksum of every buffer, a .npz a
 * CRC-32 of every member, safetensors and .npy none. */
static int format_of(const HurrayFileReader *r) {
  HurrayFileInfo info;
  hurray_file_reader_info(r, &info, NULL);
  return info.format;
}

/* ---- text, for people ---------------------------------------------------------------------- */

/* "per_channel int4 [4, 8] axis 0", "sparse_coo float32 [4, 5] nnz 3 coalesced", ... */
static void print_node(const HurrayTensorDesc *t) {
  fputs(hurray_layout_name((int)t->layout), stdout);
  if (t->layout == HURRAY_LAYOUT_COMPOSITE) return;
  printf(" %s ", hurray_dtype_info(t->dtype)->name);
  cli_print_dims(t->shape, t->ndim);
  switch (t->layout) {
    case HURRAY_LAYOUT_PER_CHANNEL:
      printf(" axis %" PRId32 "%s", t->axis, t->nparts > 2 ? " with zero points" : "");
      break;
    case HURRAY_LAYOUT_BLOCK:
      printf(" axis %" PRId32 " blocks of %" PRId64 "%s", t->axis, t->block_size,
             t->nparts > 2 ? " with mins" : "");
      break;
    case HURRAY_LAYOUT_PAGED:
      printf(" axis %" PRId32 " pages of %" PRId64 " (%" PRId64 " pages)", t->axis, t->block_size,
             t->parts[0].shape[0]);
      break;
    case HURRAY_LAYOUT_SPARSE_COO:
      printf(" nnz %" PRId64 "%s", t->parts[1].shape[0],
             t->flags & HURRAY_TENSOR_COALESCED ? " coalesced" : "");
      break;
    case HURRAY_LAYOUT_SPARSE_CSR:
      printf(" nnz %" PRId64, t->parts[2].shape[0]);
      break;
    default:
      break;
  }
}

static void print_children(const HurrayTensorDesc *t, int depth) {
  for (uint32_t i = 0; i < t->nchildren; i++) {
    printf("%*s", 2 * depth + 2, "");
    cli_escape(stdout, t->child_names[i], strlen(t->child_names[i]), false);
    fputs(": ", stdout);
    print_node(&t->children[i]);
    putchar('\n');
    print_children(&t->children[i], depth + 1);
  }
}

static int print_tensor(const HurrayFileReader *r, uint32_t index, const HurrayFileTensorInfo *ti,
                        const HurrayTensorDesc *d, bool buffers) {
  char size[32];
  cli_escape(stdout, ti->name, strlen(ti->name), false);
  fputs(": ", stdout);
  print_node(d);
  printf(", %s in %" PRIu32 " buffer%s\n", cli_size(ti->data_bytes, size), ti->buffer_count,
         ti->buffer_count == 1 ? "" : "s");
  print_children(d, 0);
  for (uint32_t k = 0; buffers && k < ti->buffer_count; k++) {
    HurrayFileBufferInfo bi;
    HurrayError error = {0};
    int status = hurray_file_reader_buffer_info(r, index, k, &bi, &error);
    if (status != HURRAY_OK) return cli_fail(&kInfoCommand, ti->name, status, &error);
    printf("  buffer %" PRIu32 ": %s, %s at offset %" PRIu64, k, hurray_buffer_role_name(bi.role),
           cli_size(bi.desc.byte_size, size), bi.offset);
    switch (format_of(r)) {
      case HURRAY_FORMAT_HURRAY:
        printf(", xxh3 %016" PRIx64 "\n", bi.checksum);
        break;
      case HURRAY_FORMAT_NPZ:
        puts(", checked by its member's CRC-32");
        break;
      default:
        puts(", no checksum in this format");
    }
  }
  return print_metadata(r, index, "  ", false);
}

static void print_file(const char *path, const HurrayFileInfo *info) {
  char data[32], index[32];
  cli_escape(stdout, path, strlen(path), false);
  if (info->shard_count > 0) { /* a checkpoint: its first shard's format */
    printf(": sharded checkpoint, %" PRIu32 " %s shard%s, ", info->shard_count,
           info->format == HURRAY_FORMAT_HURRAY ? "Hurray" : hurray_format_name(info->format),
           info->shard_count == 1 ? "" : "s");
  } else if (info->format == HURRAY_FORMAT_HURRAY) {
    printf(": Hurray file %u.%u, ", info->version_major, info->version_minor);
  } else { /* what the one loader reads of it: no version, alignment or index of its own */
    printf(": %s file, ", hurray_format_name(info->format));
  }
  printf("%" PRIu32 " tensor%s, %s of data in %" PRIu32 " buffer%s", info->tensor_count,
         info->tensor_count == 1 ? "" : "s", cli_size(info->data_bytes, data), info->buffer_count,
         info->buffer_count == 1 ? "" : "s");
  if (info->format == HURRAY_FORMAT_HURRAY && info->shard_count == 0) {
    printf(", alignment %" PRIu32 ", index %s", info->alignment,
           cli_size(info->index_length, index));
  }
  putchar('\n');
}

/* ---- JSON, for programs (docs/impl/cli.md) -------------------------------------------------- */

/* A descriptor as it is: every field, every array, the children in order. */
static void json_node(const HurrayTensorDesc *t) {
  printf("\"layout\": \"%s\", \"dtype\": ", hurray_layout_name((int)t->layout));
  const HurrayDTypeInfo *dtype = hurray_dtype_info(t->dtype);
  if (dtype != NULL) {
    printf("\"%s\"", dtype->name);
  } else {
    fputs("null", stdout);
  }
  fputs(", \"shape\": ", stdout);
  cli_print_dims(t->shape, t->ndim);
  printf(", \"axis\": %" PRId32 ", \"block_size\": %" PRId64 ", \"coalesced\": %s, \"parts\": [",
         t->axis, t->block_size, t->flags & HURRAY_TENSOR_COALESCED ? "true" : "false");
  for (uint32_t i = 0; i < t->nparts; i++) {
    const HurrayArray *a = &t->parts[i];
    printf("%s{\"buffer\": %" PRIu32 ", \"dtype\": \"%s\", \"byte_offset\": %" PRIu64
           ", \"shape\": ",
           i > 0 ? ", " : "", a->buffer, hurray_dtype_info(a->dtype)->name, a->byte_offset);
    cli_print_dims(a->shape, a->ndim);
    fputs(", \"strides\": ", stdout);
    if (a->strides != NULL) {
      cli_print_dims(a->strides, a->ndim);
    } else {
      fputs("null", stdout);
    }
    putchar('}');
  }
  fputs("], \"children\": [", stdout);
  for (uint32_t i = 0; i < t->nchildren; i++) {
    fputs(i > 0 ? ", {\"name\": " : "{\"name\": ", stdout);
    cli_escape(stdout, t->child_names[i], strlen(t->child_names[i]), true);
    fputs(", ", stdout);
    json_node(&t->children[i]);
    putchar('}');
  }
  putchar(']');
}

static int json_tensor(const HurrayFileReader *r, uint32_t index, const HurrayFileTensorInfo *ti,
                       const HurrayTensorDesc *d) {
  fputs("{\"name\": ", stdout);
  cli_escape(stdout, ti->name, strlen(ti->name), true);
  fputs(", ", stdout);
  json_node(d);
  printf(", \"data_bytes\": %" PRIu64 ", \"buffers\": [", ti->data_bytes);
  for (uint32_t k = 0; k < ti->buffer_count; k++) {
    HurrayFileBufferInfo bi;
    HurrayError error = {0};
    int status = hurray_file_reader_buffer_info(r, index, k, &bi, &error);
    if (status != HURRAY_OK) return cli_fail(&kInfoCommand, ti->name, status, &error);
    printf("%s{\"role\": \"%s\", \"byte_size\": %" PRIu64 ", \"offset\": %" PRIu64
           ", \"xxh3\": ",
           k > 0 ? ", " : "", hurray_buffer_role_name(bi.role), bi.desc.byte_size, bi.offset);
    if (format_of(r) == HURRAY_FORMAT_HURRAY) {
      printf("\"%016" PRIx64 "\"}", bi.checksum);
    } else {
      fputs("null}", stdout);
    }
  }
  fputs("], ", stdout);
  int rc = print_metadata(r, index, "", true);
  putchar('}');
  return rc;
}

static void json_file(const char *path, const HurrayFileInfo *info) {
  fputs("{\"path\": ", stdout);
  cli_escape(stdout, path, strlen(path), true);
  printf(", \"format\": \"%s\"", hurray_format_name(info->format));
  printf(", \"format_version\": [%u, %u], \"file_size\": %" PRIu64 ", \"alignment\": %" PRIu32
         ", \"tensor_count\": %" PRIu32 ", \"buffer_count\": %" PRIu32 ", \"data_bytes\": %" PRIu64
         ", \"index_offset\": %" PRIu64 ", \"index_length\": %" PRIu64
         ", \"shard_count\": %" PRIu32 ", ",
         info->version_major, info->version_minor, info->file_size, info->alignment,
         info->tensor_count, info->buffer_count, info->data_bytes, info->index_offset,
         info->index_length, info->shard_count);
}

/* ---- the command --------------------------------------------------------------------------- */

static int run_info(int argc, char **argv) {
  bool buffers = false, json = false, use_pread = false;
  const CliOption options[] = {{'b', "buffers", &buffers, NULL},
                               {'j', "json", &json, NULL},
                               {'p', "pread", &use_pread, NULL}};
  const char *path = NULL;
  int rc = cli_parse(&kInfoCommand, argc, argv, options, 3, &path);
  if (rc >= 0) return rc;
  HurrayFileReader *r = cli_open(&kInfoCommand, path, use_pread, &rc);
  if (r == NULL) return rc;
  HurrayFileInfo info;
  hurray_file_reader_info(r, &info, NULL);
  if (json) {
    json_file(path, &info);
  } else {
    print_file(path, &info);
  }
  rc = print_metadata(r, HURRAY_FILE_WHOLE, "", json);
  if (json) fputs(", \"tensors\": [", stdout);
  for (uint32_t t = 0; t < info.tensor_count && rc == EXIT_OK; t++) {
    HurrayFileTensorInfo ti;
    HurrayTensorDesc *d = NULL;
    HurrayError error = {0};
    int status = hurray_file_reader_tensor_info(r, t, &ti, &error);
    if (status == HURRAY_OK) status = hurray_file_reader_describe(r, t, &d, &error);
    if (status != HURRAY_OK) {
      rc = cli_fail(&kInfoCommand, path, status, &error);
    } else if (json) {
      if (t > 0) fputs(", ", stdout);
      rc = json_tensor(r, t, &ti, d);
    } else {
      rc = print_tensor(r, t, &ti, d, buffers);
    }
    hurray_tensor_desc_destroy(d);
  }
  if (json) fputs("]}\n", stdout);
  hurray_file_reader_destroy(r);
  return rc;
}

const Command kInfoCommand = {"info",
                              "list a file's tensors, layouts, dtypes, shapes, sizes "
                              "and metadata",
                              kInfoUsage, run_info};
