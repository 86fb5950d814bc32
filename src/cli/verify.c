/* verify.c -- `hurray verify FILE`: recomputes every buffer's checksum and names each tensor
 * whose data does not match, with progress on stderr when it is a terminal. */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static const char kVerifyUsage[] =
    "usage: hurray verify [-qp] FILE\n"
    "\n"
    "Checks the file's structure, then recomputes the XXH3-64 checksum of every buffer and\n"
    "compares it with the one stored in the index. Every tensor with a mismatch is named on\n"
    "stderr. Progress is shown on stderr when it is a terminal. Of the other formats the\n"
    "loader reads, a .npz is checked against its members' CRC-32; safetensors and .npy keep\n"
    "no checksums, so only their header and where each tensor lies are checked, and the\n"
    "output says so.\n"
    "\n"
    "options:\n"
    "  -q, --quiet  print nothing on success\n"
    "  -p, --pread  read with pread instead of mapping the file\n"
    "  -h, --help   show this help\n";

typedef struct Progress {
  uint64_t before; /* bytes of the tensors verified before this one */
  uint64_t total;  /* of the whole file */
  int shown;       /* last percentage printed, -1 for none */
} Progress;

static void show_progress(void *context, uint64_t done, uint64_t total) {
  (void)total; /* of this tensor; the file's is in the context */
  Progress *p = context;
  cli_progress("verifying", p->before + done, p->total, &p->shown);
}

static int run_verify(int argc, char **argv) {
  bool quiet = false, use_pread = false;
  const CliOption options[] = {{'q', "quiet", &quiet, NULL}, {'p', "pread", &use_pread, NULL}};
  const char *path = NULL;
  int rc = cli_parse(&kVerifyCommand, argc, argv, options, 2, &path);
  if (rc >= 0) return rc;
  HurrayFileReader *r = cli_open(&kVerifyCommand, path, use_pread, &rc);
  if (r == NULL) return rc;
  HurrayFileInfo info;
  hurray_file_reader_info(r, &info, NULL);
  if (info.format == HURRAY_FORMAT_SAFETENSORS || info.format == HURRAY_FORMAT_NPY ||
      info.format == HURRAY_FORMAT_GGUF) {
    /* Opening checked the header and that every tensor lies inside the file: all there is. */
    if (!quiet && info.shard_count > 0) {
      printf("%s: ok, its %" PRIu32 " shards are %s files, which keep no checksums: the index, "
             "their headers and where its %" PRIu32 " tensor%s lie were checked, its data "
             "cannot be\n",
             path, info.shard_count, hurray_format_name(info.format), info.tensor_count,
             info.tensor_count == 1 ? "" : "s");
    } else if (!quiet) {
      printf("%s: ok, a %s file keeps no checksums: its header and where its %" PRIu32
             " tensor%s lie were checked, its data cannot be\n",
             path, hurray_format_name(info.format), info.tensor_count,
             info.tensor_count == 1 ? "" : "s");
    }
    hurray_file_reader_destroy(r);
    return EXIT_OK;
  }
  bool tty = !quiet && isatty(STDERR_FILENO);
  Progress progress = {0, info.data_bytes, -1};
  uint32_t failed = 0;
  rc = EXIT_OK;
  HurrayError index_error = {0}; /* what open may defer (file-format.md §9), before any data */
  int checked = hurray_file_reader_verify(r, HURRAY_FILE_INDEX, NULL, NULL, &index_error);
  if (checked != HURRAY_OK) rc = cli_fail(&kVerifyCommand, path, checked, &index_error);
  for (uint32_t t = 0; t < info.tensor_count && rc == EXIT_OK; t++) {
    HurrayFileTensorInfo ti = {0};
    HurrayError error = {0};
    hurray_file_reader_tensor_info(r, t, &ti, NULL);
    int status = hurray_file_reader_verify(r, t, tty ? show_progress : NULL, &progress, &error);
    if (status != HURRAY_OK && tty) cli_progress_clear();
    if (status == HURRAY_ECHECKSUM) {
      cli_error(&kVerifyCommand, "%s: %s", path, error.message);
      failed++;
    } else if (status != HURRAY_OK) {
      rc = cli_fail(&kVerifyCommand, path, status, &error);
    }
    progress.before += ti.data_bytes;
  }
  if (info.tensor_count == 0) { /* no tensor's check covers the data region's padding */
    HurrayError error = {0};
    int status = hurray_file_reader_verify(r, HURRAY_FILE_WHOLE, NULL, NULL, &error);
    if (status != HURRAY_OK) rc = cli_fail(&kVerifyCommand, path, status, &error);
  }
  if (tty) cli_progress_clear();
  char size[32];
  if (rc == EXIT_OK && failed > 0) {
    cli_error(&kVerifyCommand,
              "%s: FAILED: %" PRIu32 " of %" PRIu32
              " tensors do not match "
              "their checksums",
              path, failed, info.tensor_count);
    rc = EXIT_CHECKSUM;
  } else if (rc == EXIT_OK && !quiet) {
    printf("%s: ok, %" PRIu32 " tensors, %s in %" PRIu32 " buffers verified%s\n", path,
           info.tensor_count, cli_size(info.data_bytes, size), info.buffer_count,
           info.format == HURRAY_FORMAT_NPZ ? " against the members' CRC-32" : "");
  }
  hurray_file_reader_destroy(r);
  return rc;
}

const Command kVerifyCommand = {"verify", "check every buffer's checksum, naming bad tensors",
                                kVerifyUsage, run_verify};
