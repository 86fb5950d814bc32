/* cli.h -- what the `hurray` command's subcommands share. The command uses only the public
 * header, hurray/hurray.h: it is the library's first user, not part of it. */
#ifndef HURRAY_CLI_CLI_H
#define HURRAY_CLI_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "hurray/hurray.h"

/* Exit statuses, documented in `hurray --help`. */
enum {
  EXIT_OK = 0,
  EXIT_VERIFY_FAILED = 1, /* a checksum did not match */
  EXIT_USAGE = 2,         /* bad command line */
  EXIT_BAD_FILE = 3,      /* the file could not be opened, read or validated */
};

typedef struct Command {
  const char *name;
  const char *summary;               /* one line for `hurray --help` */
  const char *usage;                 /* the full text of `hurray NAME --help` */
  int (*run)(int argc, char **argv); /* argv[0] is the command's name */
} Command;

extern const Command kInfoCommand;
extern const Command kVerifyCommand;
extern const Command kConvertCommand;

/* Parsing of a subcommand's arguments: options (each a short and a long spelling; a valued
 * one as `--name VALUE` or `--name=VALUE`) before or after the operands, "--" ending options,
 * and --help. */
typedef struct CliOption {
  char short_name; /* 0 for none */
  const char *long_name;
  bool *set;          /* flags: set to true when given */
  const char **value; /* valued options: their value (the last one given); NULL for flags */
} CliOption;

/* Sets the options given and the `count` operands, named `names` in messages ("FILE",
 * "IN and OUT"). Returns -1 when the command should go on; otherwise the exit status: EXIT_OK
 * after printing the usage for --help, EXIT_USAGE after an error. */
int cli_parse_operands(const Command *command, int argc, char **argv, const CliOption *options,
                       int option_count, const char **operands, int count, const char *names);
/* The one-FILE form. */
int cli_parse(const Command *command, int argc, char **argv, const CliOption *options,
              int option_count, const char **file);

/* "\rverb: 42% (1.0 GiB of 2.4 GiB)" on stderr, when the percentage changed since `*shown`
 * (-1 before the first). */
void cli_progress(const char *verb, uint64_t done, uint64_t total, int *shown);
/* Erases the progress line. */
void cli_progress_clear(void);

/* "hurray NAME: message" on stderr. */
void cli_error(const Command *command, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Opens FILE, reporting failure; returns NULL after printing the error. */
HurrayFileReader *cli_open(const Command *command, const char *path, bool use_pread);

/* "1.5 KiB", "3 B": sizes for people. */
const char *cli_size(uint64_t bytes, char out[32]);

#endif /* HURRAY_CLI_CLI_H */
