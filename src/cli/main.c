/* main.c -- the `hurray` command: a table of subcommands and the helpers they share.
 * A new subcommand (convert, serve, fetch) is one file defining a Command plus one line in
 * kCommands. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const Command *const kCommands[] = {&kInfoCommand, &kVerifyCommand, &kConvertCommand};
enum { COMMAND_COUNT = sizeof kCommands / sizeof kCommands[0] };

static void usage(FILE *out) {
  fprintf(out,
          "usage: hurray [--version] [--help] COMMAND [ARGS]\n"
          "\n"
          "Inspects, checks and converts Hurray tensor files (docs/spec/file-format.md).\n"
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
          "  3  the file could not be opened, read or validated, or could not be converted\n");
}

void cli_error(const Command *command, const char *fmt, ...) {
  fprintf(stderr, "hurray %s: ", command->name);
  va_list args;
  va_start(args, fmt);
  vfprintf(stderr, fmt, args);
  va_end(args);
  fputc('\n', stderr);
}

/* The option `arg` names, or NULL; `*inline_value` points after '=' in "--name=VALUE". */
static const CliOption *find_option(const char *arg, const CliOption *options, int option_count,
                                    const char **inline_value) {
  *inline_value = NULL;
  for (int k = 0; k < option_count; k++) {
    const CliOption *o = &options[k];
    if (arg[1] == '-') {
      size_t n = strlen(o->long_name);
      if (strncmp(arg + 2, o->long_name, n) != 0) continue;
      if (arg[2 + n] == '\0') return o;
      if (arg[2 + n] == '=' && o->value != NULL) {
        *inline_value = arg + 3 + n;
        return o;
      }
    } else if (o->short_name && arg[1] == o->short_name && !arg[2]) {
      return o;
    }
  }
  return NULL;
}

int cli_parse_operands(const Command *command, int argc, char **argv, const CliOption *options,
                       int option_count, const char **operands, int count, const char *names) {
  int given = 0;
  for (int i = 0; i < count; i++) operands[i] = NULL;
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
      const char *value = NULL;
      const CliOption *o = find_option(arg, options, option_count, &value);
      if (o == NULL) {
        cli_error(command, "unknown option '%s' (see hurray %s --help)", arg, command->name);
        return EXIT_USAGE;
      }
      if (o->value == NULL) {
        *o->set = true;
        continue;
      }
      if (value == NULL) {
        if (i + 1 == argc) {
          cli_error(command, "option '%s' needs a value", arg);
          return EXIT_USAGE;
        }
        value = argv[++i];
      }
      *o->value = value;
      if (o->set != NULL) *o->set = true;
      continue;
    }
    if (given == count) {
      if (count == 1) {
        cli_error(command, "one %s expected, got '%s' and '%s'", names, operands[0], arg);
      } else {
        cli_error(command, "%s expected, got also '%s'", names, arg);
      }
      return EXIT_USAGE;
    }
    operands[given++] = arg;
  }
  if (given < count) {
    cli_error(command, "%s %s missing (see hurray %s --help)", names, count == 1 ? "is" : "are",
              command->name);
    return EXIT_USAGE;
  }
  return -1;
}

int cli_parse(const Command *command, int argc, char **argv, const CliOption *options,
              int option_count, const char **file) {
  return cli_parse_operands(command, argc, argv, options, option_count, file, 1, "FILE");
}

void cli_progress(const char *verb, uint64_t done, uint64_t total, int *shown) {
  int percent = total ? (int)(done * 100 / total) : 100;
  if (percent == *shown) return;
  char so_far[32], all[32];
  fprintf(stderr, "\r%s: %3d%% (%s of %s)", verb, percent, cli_size(done, so_far),
          cli_size(total, all));
  *shown = percent;
}

void cli_progress_clear(void) {
  fputs("\r\033[K", stderr);
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
