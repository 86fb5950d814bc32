/* main.c -- the `hurray` command: a table of subcommands and the helpers they share.
 * A new subcommand (serve, fetch, ...) is one file defining a Command plus one line in
 * kCommands; its options are a CliOption table that cli_parse_operands hands to getopt_long. */
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const Command *const kCommands[] = {&kInfoCommand,  &kVerifyCommand, &kConvertCommand,
                                           &kServeCommand, &kLsCommand,     &kFetchCommand};
enum { COMMAND_COUNT = sizeof kCommands / sizeof kCommands[0] };

/* The one description of the exit statuses, printed by every --help. */
static const char kExitStatuses[] =
    "exit status (the same in every command):\n"
    "  0  success\n"
    "  1  data does not match its checksum\n"
    "  2  usage error: a bad command line, or an argument that names nothing (a format,\n"
    "     an extension, a tensor)\n"
    "  3  an input is not a valid file of its format (malformed, truncated, over a limit)\n"
    "  4  valid, but not supported: what the output cannot hold, a format version this\n"
    "     does not read\n"
    "  5  the system refused: a file could not be opened, read or written; out of memory\n"
    "  6  the network or the peer refused: no connection, timed out, authentication,\n"
    "     permission, a broken protocol\n";

int cli_exit_status(int status) {
  switch (status) {
    case HURRAY_OK:
      return EXIT_OK;
    case HURRAY_ECHECKSUM:
      return EXIT_CHECKSUM;
    case HURRAY_EINVAL:
      return EXIT_USAGE;
    case HURRAY_EUNSUPPORTED:
      return EXIT_UNSUPPORTED;
    case HURRAY_EIO:
    case HURRAY_ENOMEM:
      return EXIT_SYSTEM;
    case HURRAY_EPROTOCOL:
    case HURRAY_EAUTH:
    case HURRAY_EDENIED:
    case HURRAY_ETIMEOUT:
    case HURRAY_ECONNECTION:
      return EXIT_NETWORK;
    default:
      return EXIT_INVALID;
  }
}

static void usage(FILE *out) {
  fprintf(out,
          "usage: hurray [--version] [--help] COMMAND [ARGS]\n"
          "\n"
          "Inspects, checks and converts Hurray tensor files (docs/spec/file-format.md), and\n"
          "serves and fetches tensors over the wire (docs/spec/interchange.md).\n"
          "\n"
          "commands:\n");
  for (int i = 0; i < COMMAND_COUNT; i++) {
    fprintf(out, "  %-8s %s\n", kCommands[i]->name, kCommands[i]->summary);
  }
  fprintf(out,
          "\n"
          "Run `hurray COMMAND --help` (or `hurray help COMMAND`) for a command's options.\n"
          "\n"
          "%s",
          kExitStatuses);
}

static void command_usage(const Command *command) {
  printf("%s\n%s", command->usage, kExitStatuses);
}

void cli_error(const Command *command, const char *fmt, ...) {
  fprintf(stderr, "hurray %s: ", command->name);
  va_list args;
  va_start(args, fmt);
  vfprintf(stderr, fmt, args);
  va_end(args);
  fputc('\n', stderr);
}

void cli_escape(FILE *out, const char *s, size_t n, bool quoted) {
  if (quoted) fputc('"', out);
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    unsigned char next = i + 1 < n ? (unsigned char)s[i + 1] : 0;
    if (quoted && (c == '"' || c == '\\')) {
      fprintf(out, "\\%c", c);
    } else if (c < 0x20 || c == 0x7F) {
      fprintf(out, "\\u%04x", c);
    } else if (c == 0xC2 && next >= 0x80 && next <= 0x9F) { /* C1 controls: U+0080..U+009F */
      fprintf(out, "\\u%04x", next);
      i++;
    } else {
      fputc(c, out);
    }
  }
  if (quoted) fputc('"', out);
}

int cli_fail(const Command *command, const char *what, int status, const HurrayError *error) {
  fprintf(stderr, "hurray %s: ", command->name); /* both may hold a peer's or a file's text */
  cli_escape(stderr, what, strlen(what), false);
  fputs(": ", stderr);
  cli_escape(stderr, error->message, strlen(error->message), false);
  fprintf(stderr, " (%s)\n", hurray_status_name(status));
  return cli_exit_status(status);
}

enum { LONG_ONLY = 256 }; /* getopt_long's value of option k without a short spelling: 256 + k */

static const CliOption *option_of(int value, const CliOption *options, int option_count) {
  for (int k = 0; k < option_count; k++) {
    if (options[k].short_name ? options[k].short_name == value : LONG_ONLY + k == value) {
      return &options[k];
    }
  }
  return NULL;
}

/* Parses the options; returns -1 when the operands follow at argv[optind], else the exit
 * status. */
static int parse_options(const Command *command, int argc, char **argv, const CliOption *options,
                         int option_count) {
  struct option longs[CLI_MAX_OPTIONS + 2];
  char shorts[2 + 2 * CLI_MAX_OPTIONS + 2] = ":h"; /* ':': report a missing value as ':' */
  size_t n = 2;
  if (option_count > CLI_MAX_OPTIONS) abort(); /* a programming error: raise the limit */
  for (int k = 0; k < option_count; k++) {
    const CliOption *o = &options[k];
    longs[k] = (struct option){o->long_name, o->value != NULL ? required_argument : no_argument,
                               NULL, o->short_name ? o->short_name : LONG_ONLY + k};
    if (o->short_name) {
      shorts[n++] = o->short_name;
      if (o->value != NULL) shorts[n++] = ':';
    }
  }
  shorts[n] = '\0';
  longs[option_count] = (struct option){"help", no_argument, NULL, 'h'};
  longs[option_count + 1] = (struct option){NULL, 0, NULL, 0};

  opterr = 0; /* the messages below name the command */
  optind = 0; /* a full reset of getopt's state: main() parsed its own options before */
  int c;
  while ((c = getopt_long(argc, argv, shorts, longs, NULL)) != -1) {
    const CliOption *o = option_of(c == ':' || c == '?' ? optopt : c, options, option_count);
    if (c == 'h') {
      command_usage(command);
      return EXIT_OK;
    }
    if (c == ':') {
      cli_error(command, "option '--%s' needs a value", o->long_name);
      return EXIT_USAGE;
    }
    if (c == '?') {
      /* optopt: an unknown short option, or a known option given a value it does not take;
       * 0 for an unknown (or ambiguous) long option, which is the argument getopt passed. */
      if (o != NULL) {
        cli_error(command, "option '--%s' takes no value", o->long_name);
      } else if (optopt != 0) {
        cli_error(command, "unknown option '-%c' (see hurray %s --help)", optopt, command->name);
      } else {
        cli_error(command, "unknown option '%s' (see hurray %s --help)", argv[optind - 1],
                  command->name);
      }
      return EXIT_USAGE;
    }
    if (o->value != NULL) *o->value = optarg;
    if (o->set != NULL) *o->set = true;
  }
  return -1;
}

int cli_parse_operands(const Command *command, int argc, char **argv, const CliOption *options,
                       int option_count, const char **operands, int count, const char *names) {
  int rc = parse_options(command, argc, argv, options, option_count);
  if (rc >= 0) return rc;
  int given = argc - optind;
  if (given > count) {
    if (count == 1) {
      cli_error(command, "one %s expected, got '%s' and '%s'", names, argv[optind],
                argv[optind + 1]);
    } else {
      cli_error(command, "%s expected, got also '%s'", names, argv[optind + count]);
    }
    return EXIT_USAGE;
  }
  if (given < count) {
    cli_error(command, "%s %s missing (see hurray %s --help)", names, count == 1 ? "is" : "are",
              command->name);
    return EXIT_USAGE;
  }
  for (int i = 0; i < count; i++) operands[i] = argv[optind + i];
  return -1;
}

int cli_parse_list(const Command *command, int argc, char **argv, const CliOption *options,
                   int option_count, char ***operands, int *count, const char *names) {
  int rc = parse_options(command, argc, argv, options, option_count);
  if (rc >= 0) return rc;
  if (optind == argc) {
    cli_error(command, "%s missing (see hurray %s --help)", names, command->name);
    return EXIT_USAGE;
  }
  *operands = argv + optind;
  *count = argc - optind;
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

HurrayFileReader *cli_open(const Command *command, const char *path, bool use_pread, int *rc) {
  HurrayFileReader *reader = NULL;
  HurrayError error = {0};
  uint32_t flags = use_pread ? HURRAY_FILE_OPEN_PREAD : 0;
  int status = hurray_file_reader_open(path, flags, &reader, &error);
  if (status == HURRAY_EFORMAT) { /* not a Hurray file: one of the formats the loader reads? */
    HurrayError foreign = {0};
    status = hurray_file_reader_open(path, flags | HURRAY_FILE_OPEN_FOREIGN, &reader, &foreign);
    /* Neither: the foreign reader's error says what the file is, if it can tell. */
    if (status != HURRAY_OK) error = foreign;
  }
  if (status != HURRAY_OK) {
    *rc = cli_fail(command, path, status, &error);
    return NULL;
  }
  return reader;
}

void cli_print_dims(const int64_t *dims, int32_t ndim) {
  putchar('[');
  for (int32_t k = 0; k < ndim; k++) printf("%s%" PRId64, k > 0 ? ", " : "", dims[k]);
  putchar(']');
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

static const Command *find_command(const char *name) {
  for (int i = 0; i < COMMAND_COUNT; i++) {
    if (strcmp(name, kCommands[i]->name) == 0) return kCommands[i];
  }
  fprintf(stderr, "hurray: unknown command '%s' (see hurray --help)\n", name);
  return NULL;
}

int main(int argc, char **argv) {
  static const struct option kOptions[] = {
      {"help", no_argument, NULL, 'h'}, {"version", no_argument, NULL, 'V'}, {NULL, 0, NULL, 0}};
  opterr = 0;
  int c;
  /* '+': stop at the command's name; what follows is the command's. */
  while ((c = getopt_long(argc, argv, "+hV", kOptions, NULL)) != -1) {
    if (c == 'h') {
      usage(stdout);
      return EXIT_OK;
    }
    if (c == 'V') {
      printf("hurray %s (C ABI %u, file format %d.%d)\n", hurray_version_string(),
             hurray_c_abi_version(), HURRAY_FILE_VERSION_MAJOR, HURRAY_FILE_VERSION_MINOR);
      return EXIT_OK;
    }
    if (optopt != 0) {
      fprintf(stderr, "hurray: unknown option '-%c' (see hurray --help)\n", optopt);
    } else {
      fprintf(stderr, "hurray: unknown option '%s' (see hurray --help)\n", argv[optind - 1]);
    }
    return EXIT_USAGE;
  }
  if (optind == argc) {
    usage(stderr);
    return EXIT_USAGE;
  }
  const char *name = argv[optind];
  if (strcmp(name, "help") == 0) { /* hurray help [COMMAND] */
    if (optind + 1 == argc) {
      usage(stdout);
      return EXIT_OK;
    }
    const Command *command = find_command(argv[optind + 1]);
    if (command == NULL) return EXIT_USAGE;
    command_usage(command);
    return EXIT_OK;
  }
  const Command *command = find_command(name);
  return command != NULL ? command->run(argc - optind, argv + optind) : EXIT_USAGE;
}
