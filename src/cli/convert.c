/* convert.c -- `hurray convert IN OUT`: hurray_convert with its options spelled for a command
 * line, progress on stderr when it is a terminal. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static const char kConvertUsage[] =
    "usage: hurray convert [options] IN OUT\n"
    "\n"
    "Converts between Hurray files (.hurray, .hry), safetensors (.safetensors), .npy and .npz,\n"
    "in either direction. The formats are told by the extensions (or by --from and --to).\n"
    "Data is streamed: memory use does not grow with the file. OUT appears only when it is\n"
    "complete; a failed conversion leaves no OUT and any previous file there intact.\n"
    "Checksums of the input are verified on the way (Hurray XXH3-64, .npz CRC-32).\n"
    "\n"
    "What OUT cannot hold is refused, naming the tensor: quantised, sparse, paged and\n"
    "composite tensors and dtypes the format lacks (safetensors and .npy hold dense arrays of\n"
    "their own dtypes only), and metadata it has no place for (see the metadata options).\n"
    "\n"

    "options:\n"
    "  -a, --alignment N   Hurray OUT: align every buffer to N bytes (a power of two, 64 to\n"
    "                      2 MiB; 4096 suits O_DIRECT). safetensors OUT: start the data at a\n"
    "                      multiple of N (8 or more; default 8)\n"
    "  -s, --max-shard-size SIZE\n"
    "                      write OUT as a sharded checkpoint of Hurray shards of at most SIZE\n"
    "                      bytes each (500MB, 5GB, 2GiB, ...): OUT is its directory or its\n"
    "                      NAME.hurray.index.json. IN may be a checkpoint too (a directory or\n"
    "                      an index) in any case\n"
    "  -n, --name NAME     .npy IN: the tensor's name (default: the file's stem);\n"
    "                      .npy OUT: the tensor to write, when IN holds several\n"
    "  -f, --from FORMAT   the format of IN: hurray, safetensors, npy or npz\n"
    "  -t, --to FORMAT     the format of OUT\n"
    "      --metadata-json safetensors OUT: write non-string metadata values as JSON text\n"
    "      --drop-metadata drop metadata that OUT has no place for instead of refusing\n"
    "      --no-sync       do not fsync OUT and its directory: OUT still replaces any\n"
    "                      previous file atomically, but is durable only once the system\n"
    "                      writes it back (a power loss before then may lose it)\n"
    "  -q, --quiet         print nothing on success\n"
    "  -h, --help          show this help\n";

static bool parse_format(const char *text, uint8_t *format) {
  for (int f = HURRAY_FORMAT_HURRAY; f <= HURRAY_FORMAT_GGUF; f++) {
    if (strcmp(text, hurray_format_name(f)) == 0) {
      *format = (uint8_t)f;
      return true;
    }
  }
  return false;
}

typedef struct Progress {
  bool tty;
  int shown;
  uint64_t done, total;
} Progress;

static void on_progress(void *context, uint64_t done, uint64_t total) {
  Progress *p = context;
  p->done = done;
  p->total = total;
  if (p->tty) cli_progress("converting", done, total, &p->shown);
}

static int run_convert(int argc, char **argv) {
  bool quiet = false, metadata_json = false, drop_metadata = false, no_sync = false;
  const char *alignment = NULL, *name = NULL, *from = NULL, *to = NULL, *shard_size = NULL;
  const CliOption options[] = {
      {'a', "alignment", NULL, &alignment},
      {'s', "max-shard-size", NULL, &shard_size},
      {'n', "name", NULL, &name},
      {'f', "from", NULL, &from},
      {'t', "to", NULL, &to},
      {0, "metadata-json", &metadata_json, NULL},
      {0, "drop-metadata", &drop_metadata, NULL},
      {0, "no-sync", &no_sync, NULL},
      {'q', "quiet", &quiet, NULL},
  };
  const char *paths[2];
  int rc = cli_parse_operands(&kConvertCommand, argc, argv, options,
                              (int)(sizeof options / sizeof options[0]), paths, 2, "IN and OUT");
  if (rc >= 0) return rc;
  HurrayConvertOptions o = {.name = name};
  if (alignment != NULL) {
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(alignment, &end, 10);
    if (errno != 0 || end == alignment || *end != '\0' || v == 0 || v > HURRAY_FILE_MAX_ALIGNMENT ||
        (v & (v - 1)) != 0) {
      cli_error(&kConvertCommand, "--alignment %s is not a power of two up to %u", alignment,
                HURRAY_FILE_MAX_ALIGNMENT);
      return EXIT_USAGE;
    }
    o.alignment = (uint32_t)v;
  }
  HurrayError error = {0};
  if (shard_size != NULL && hurray_size_parse(shard_size, &o.max_shard_size, &error) != HURRAY_OK) {
    cli_error(&kConvertCommand, "--max-shard-size %s", error.message);
    return EXIT_USAGE;
  }
  if ((from != NULL && !parse_format(from, &o.input_format)) ||
      (to != NULL && !parse_format(to, &o.output_format))) {
    cli_error(&kConvertCommand, "unknown format '%s' (hurray, safetensors, npy or npz)",
              from != NULL && !parse_format(from, &o.input_format) ? from : to);
    return EXIT_USAGE;
  }
  if (metadata_json) o.flags |= HURRAY_CONVERT_METADATA_JSON;
  if (drop_metadata) o.flags |= HURRAY_CONVERT_DROP_METADATA;
  if (no_sync) o.flags |= HURRAY_CONVERT_NOT_DURABLE;
  Progress progress = {.tty = !quiet && isatty(STDERR_FILENO), .shown = -1};
  o.progress = on_progress;
  o.progress_context = &progress;
  int status = hurray_convert(paths[0], paths[1], &o, &error);
  if (progress.tty) cli_progress_clear();
  if (status != HURRAY_OK) {
    char what[2 * 4096 + 8];
    snprintf(what, sizeof what, "%s -> %s", paths[0], paths[1]);
    return cli_fail(&kConvertCommand, what, status, &error);
  }
  if (!quiet) {
    char size[32];
    printf("%s -> %s: %s of tensor data converted\n", paths[0], paths[1],
           cli_size(progress.total, size));
  }
  return EXIT_OK;
}

const Command kConvertCommand = {"convert",
                                 "convert between Hurray, safetensors, .npy and .npz files",
                                 kConvertUsage, run_convert};
