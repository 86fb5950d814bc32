/* cli.h -- what the `hurray` command's subcommands share. The command uses only the public
 * header, hurray/hurray.h: it is the library's first user, not part of it. */
#ifndef HURRAY_CLI_CLI_H
#define HURRAY_CLI_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "hurray/hurray.h"

/* Exit statuses, the same for the same error in every command: a failed library call exits
 * with cli_exit_status(its status). Documented in `hurray --help` and docs/impl/cli.md. */
enum {
  EXIT_OK = 0,
  EXIT_CHECKSUM = 1,    /* data does not match its checksum (HURRAY_ECHECKSUM) */
  EXIT_USAGE = 2,       /* a bad command line, or an argument the library refused (EINVAL) */
  EXIT_INVALID = 3,     /* an input is not a valid file of its format (every other status) */
  EXIT_UNSUPPORTED = 4, /* valid, but not supported here (HURRAY_EUNSUPPORTED) */
  EXIT_SYSTEM = 5,      /* the system refused: I/O (HURRAY_EIO), memory (HURRAY_ENOMEM) */
  EXIT_NETWORK = 6,     /* the network or the peer refused (EPROTOCOL, EAUTH, EDENIED,
                           ETIMEOUT, ECONNECTION) */
};

/* The exit status of a failed (or successful) library call. */
int cli_exit_status(int status);

typedef struct Command {
  const char *name;
  const char *summary;               /* one line for `hurray --help` */
  const char *usage;                 /* `hurray NAME --help`, before the exit statuses */
  int (*run)(int argc, char **argv); /* argv[0] is the command's name */
} Command;

extern const Command kInfoCommand;
extern const Command kVerifyCommand;
extern const Command kConvertCommand;
extern const Command kServeCommand;
extern const Command kLsCommand;
extern const Command kFetchCommand;

/* One option of a command: a short and/or a long spelling; a flag or one with a value. */
typedef struct CliOption {
  char short_name; /* 0 for none */
  const char *long_name;
  bool *set;          /* set to true when given; may be NULL for valued options */
  const char **value; /* valued options: their value (the last one given); NULL for flags */
} CliOption;

#define CLI_MAX_OPTIONS 16

/* Parses a command's arguments with getopt_long: short flags alone or bundled (-bp), a short
 * option's value attached or next (-a4096, -a 4096), long options as --name VALUE or
 * --name=VALUE (or an unambiguous prefix), options before or after the operands, "--" ending
 * options, and -h/--help. Sets the options given and the `count` operands, named `names` in
 * messages ("FILE", "IN and OUT"). Returns -1 when the command should go on; otherwise the
 * exit status: EXIT_OK after printing the usage for --help, EXIT_USAGE after an error. */
int cli_parse_operands(const Command *command, int argc, char **argv, const CliOption *options,
                       int option_count, const char **operands, int count, const char *names);
/* The form with one or more operands (FILE...): *operands points into argv. */
int cli_parse_list(const Command *command, int argc, char **argv, const CliOption *options,
                   int option_count, char ***operands, int *count, const char *names);
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
/* Text that came from a file or a peer (names, metadata strings, error messages) to `out`,
 * never raw to a terminal: C0 and C1 control characters and DEL as \uXXXX, and with `quoted`
 * in double quotes with '"' and '\\' escaped (a JSON string). */
void cli_escape(FILE *out, const char *s, size_t n, bool quoted);
/* "hurray NAME: WHAT: message (HURRAY_ESTATUS)" on stderr for a failed library call, WHAT and
 * the message escaped (cli_escape); returns cli_exit_status(status). */
int cli_fail(const Command *command, const char *what, int status, const HurrayError *error);

/* Opens FILE; on failure prints the error and sets `*rc` to the exit status. */
HurrayFileReader *cli_open(const Command *command, const char *path, bool use_pread, int *rc);

/* "1.5 KiB", "3 B": sizes for people. */
const char *cli_size(uint64_t bytes, char out[32]);

/* "[4, 8]" on stdout. */
void cli_print_dims(const int64_t *dims, int32_t ndim);
/* Metadata as one line of JSON on stdout (NaN and infinities spelled as in JavaScript; strings
 * and keys escaped by cli_escape). */
void cli_print_meta(const HurrayMetaValue *v);

#endif /* HURRAY_CLI_CLI_H */
