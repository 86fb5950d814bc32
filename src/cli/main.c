/* main.c -- the `hurray` command: a table of subcommands and the helpers they share.
 * A new subcommand (convert, serve, fetch) is one file defining a Command plus one line in
 * kCommands. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const Command *const kCommands[] = {&kInfoCommand, &kVerifyCommand};
enum { COMMAND_COUNT = sizeof kCommands / sizeof kCommands[0] };

static void usage(FILE *out) {
  fprintf(out,
          "usage: hurray [--version] [--help] COMMAND [ARGS]\n"
          "\n"
          "Inspects and checks Hurray tensor files (docs/spec/file-format.md).\n"
          "\n"
          "commands:\n");
  for (int i = 0; i < COMMAND_COUNT; i++) {
    fprintf(out, "  %-8s %s\n", kCommands[i]->name, kCommands[i]->summary);
  }
  fprintf(out,
          "\n"
          "Run `hurray COMMAND --help` for a command's options.\n"
          "\n"
          "exit status:\n"
          "  0  success\n"
          "  1  verification failed: a checksum did not match\n"
          "  2  usage error\n"
          "  3  the file could not be opened, read or validated\n");
}

void cli_error(const Command *command, const char *fmt, ...) {
  fprintf(stderr, "hurray %s: ", command->name);
  va_list args;
  va_start(args, fmt);
  vfprintf(stderr, fmt, args);
  va_end(args);
  fputc('\n', stderr);
}

int cli_parse(const Command *command, int argc, char **argv, const CliOption *options,
              int option_count, const char **file) {
  *file = NULL;
  bool options_ended = false;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (!options_ended && strcmp(arg, "--") == 0) {
      options_ended = true;
      continue;
    }
    if (!options_ended && arg[0] == '-' && arg[1] != '\0') {
      if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
        fputs(command->usage, stdout);
        return EXIT_OK;
      }
      int k = 0;
      for (; k < option_count; k++) {
        bool is_long = arg[1] == '-' && strcmp(arg + 2, options[k].long_name) == 0;
        bool is_short = options[k].short_name && arg[1] == options[k].short_name && !arg[2];
        if (is_long || is_short) break;
      }
      if (k == option_count) {
        cli_error(command, "unknown option '%s' (see hurray %s --help)", arg, command->name);
        return EXIT_USAGE;
      }
      *options[k].set = true;
      continue;
    }
    if (*file != NULL) {
      cli_error(command, "one FILE expected, got '%s' and '%s'", *file, arg);
      return EXIT_USAGE;
    }
    *file = arg;
  }
  if (*file == NULL) {
    cli_error(command, "FILE is missing (see hurray %s --help)", command->name);
    return EXIT_USAGE;
  }
  return -1;
}

HurrayFileReader *cli_open(const Command *command, const char *path, bool use_pread) {
  HurrayFileReader *reader = NULL;
  HurrayError error = {0};
  int status =
      hurray_file_reader_open(path, use_pread ? HURRAY_FILE_OPEN_PREAD : 0, &reader, &error);
  if (status != HURRAY_OK) {
    cli_error(command, "%s: %s (%s)", path, error.message, hurray_status_name(status));
    return NULL;
  }
  return reader;
}

const char *cli_size(uint64_t bytes, char out[32]) {
  static const char *const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) {
    snprintf(out, 32, "%llu B", (unsigned long long)bytes);
    return out;
  }
  double value = (double)bytes;
  int unit = 0;
  while (value >= 1024 && unit < 6) {
    value /= 1024;
    unit++;
  }
  snprintf(out, 32, "%.1f %s", value, kUnits[unit]);
  return out;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return EXIT_USAGE;
  }
  const char *name = argv[1];
  if (strcmp(name, "-h") == 0 || strcmp(name, "--help") == 0 || strcmp(name, "help") == 0) {
    usage(stdout);
    return EXIT_OK;
  }
  if (strcmp(name, "--version") == 0) {
    printf("hurray %s (C ABI %u, file format %d.%d)\n", hurray_version_string(),
           hurray_c_abi_version(), HURRAY_FILE_VERSION_MAJOR, HURRAY_FILE_VERSION_MINOR);
    return EXIT_OK;
  }
  for (int i = 0; i < COMMAND_COUNT; i++) {
    if (strcmp(name, kCommands[i]->name) == 0) return kCommands[i]->run(argc - 1, argv + 1);
  }
  fprintf(stderr, "hurray: unknown command '%s' (see hurray --help)\n", name);
  return EXIT_USAGE;
}
