/* wire.c -- `hurray serve FILE...`, `hurray ls URL` and `hurray fetch URL NAME`: the wire
 * protocol (docs/spec/interchange.md) from the command line. A secret is never taken from the
 * command line (other users see it there): --secret-file, or the HURRAY_SECRET variable. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

/* ---- shared ------------------------------------------------------------------------------- */

typedef struct Secret {
  uint8_t bytes[1024];
  size_t len; /* 0: none */
} Secret;

/* The secret from `path` (one trailing newline dropped) or HURRAY_SECRET. */
static int read_secret(const Command *command, const char *path, Secret *out) {
  out->len = 0;
  if (path == NULL) {
    const char *env = getenv("HURRAY_SECRET");
    if (env == NULL || *env == '\0') return -1;
    out->len = strlen(env);
    if (out->len > sizeof out->bytes) {
      cli_error(command, "HURRAY_SECRET is longer than 1024 bytes");
      return EXIT_USAGE;
    }
    memcpy(out->bytes, env, out->len);
    return -1;
  }
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    cli_error(command, "%s: %s", path, strerror(errno));
    return EXIT_SYSTEM;
  }
  out->len = fread(out->bytes, 1, sizeof out->bytes, f);
  int more = fgetc(f);
  fclose(f);
  if (out->len > 0 && out->bytes[out->len - 1] == '\n') out->len--;
  if (more != EOF || out->len == 0) {
    cli_error(command, "%s: a secret is 1 to 1024 bytes", path);
    return EXIT_USAGE;
  }
  return -1;
}

/* A positive count or number of seconds from text. */
static int parse_number(const Command *command, const char *option, const char *text,
                        double max, double *out) {
  char *end = NULL;
  errno = 0;
  double v = text ? strtod(text, &end) : 0;
  if (text == NULL || end == text || *end != '\0' || errno != 0 || !(v > 0) || v > max) {
    cli_error(command, "--%s must be a positive number up to %.0f, not '%s'", option, max,
              text ? text : "");
    return EXIT_USAGE;
  }
  *out = v;
  return -1;
}

/* --secret-file, --timeout and the TLS options of ls and fetch. */
typedef struct ConnectArgs {
  const char *secret_file, *timeout, *tls_ca, *tls_server_name;
} ConnectArgs;

static int connect_to(const Command *command, const char *url, const ConnectArgs *args,
                      HurrayClient **out) {
  const char *secret_file = args->secret_file, *timeout = args->timeout;
  Secret secret;
  int rc = read_secret(command, secret_file, &secret);
  double seconds = 30;
  if (rc < 0 && timeout != NULL) rc = parse_number(command, "timeout", timeout, 86400, &seconds);
  if (rc >= 0) return rc;
  HurrayClientOptions options = {.idle_timeout_ms = (uint32_t)(seconds * 1000)};
  if (secret.len > 0) {
    options.secret = secret.bytes;
    options.secret_len = secret.len;
  }
  HurrayTlsOptions tls = {.ca_file = args->tls_ca, .server_name = args->tls_server_name};
  if (tls.ca_file != NULL || tls.server_name != NULL) options.tls = &tls;
  HurrayError error = {0};
  int status = hurray_client_connect(url, &options, out, &error);
  memset(&secret, 0, sizeof secret);
  return status == HURRAY_OK ? -1 : cli_fail(command, url, status, &error);
}

/* ---- serve -------------------------------------------------------------------------------- */

static const char kServeUsage[] =
    "usage: hurray serve [-u] [-a ADDRESS] [-s SECRET_FILE] [-c N] [-q] [--json] [--insecure]\n"
    "                    [--max-connections-per-address N] [--max-upload-total BYTES]\n"
    "                    [--tls-cert FILE --tls-key FILE] FILE...\n"
    "\n"
    "Serves every tensor of the FILEs over the wire protocol until interrupted (SIGINT or\n"
    "SIGTERM). A FILE is any file the loader reads: a Hurray file (its tensors read through\n"
    "its descriptor, every range checked against its stored checksums), a safetensors,\n"
    ".npy or .npz file, or a sharded checkpoint (its directory or its .index.json). When\n"
    "the server is ready, the first line on stdout is its address alone (also with -q), or\n"
    "with --json one JSON object: address, devices, read_only, authenticated, tls,\n"
    "insecure, files. What it served is printed when it stops.\n"
    "\n"
    "options:\n"
    "  -a, --address ADDRESS     where to listen (default 127.0.0.1:7700): HOST:PORT with a\n"
    "                            numeric address or a host name, [IPV6]:PORT, or\n"
    "                            unix:PATH; port 0 picks a free one. An address beyond\n"
    "                            this host (0.0.0.0:PORT) needs a secret or --insecure\n"
    "  -u, --uploads             accept uploads (by default the server is read-only)\n"
    "  -s, --secret-file FILE    require clients to prove they know the secret in FILE\n"
    "                            (default: the HURRAY_SECRET variable, if set)\n"
    "      --insecure            listen beyond this host without a secret: anyone who\n"
    "                            reaches the address may fetch (and with -u upload)\n"
    "  -c, --max-connections N   clients served at once (default 1024)\n"
    "      --max-connections-per-address N  clients served at once from one IP address\n"
    "                            (default 64 beyond this host, loopback clients bounded\n"
    "                            by -c alone); a value given bounds loopback clients too\n"
    "      --max-upload-total BYTES  what clients' uploads may hold together (default\n"
    "                            4 GiB); an upload over it is refused\n"
    "      --tls-cert FILE       serve over TLS (clients connect to hurrays://HOST:PORT)\n"
    "                            with this certificate chain (PEM, the leaf first)\n"
    "      --tls-key FILE        and this private key (PEM) of its leaf\n"
    "      --json                the first line as JSON\n"
    "  -q, --quiet               print nothing but the address and errors\n"
    "  -h, --help                show this help\n";

static HurrayServer *g_server; /* for the signal handler */

static void on_signal(int signo) {
  (void)signo;
  hurray_server_stop(g_server); /* async-signal-safe: one write to an eventfd */
}

/* The first line: the address alone, or --json's object. */
static void print_served(const char *bound, bool json, const HurrayServerOptions *so,
                         char **files, int count) {
  if (!json) {
    printf("%s\n", bound);
    return;
  }
  printf("{\"address\": ");
  cli_escape(stdout, bound, strlen(bound), true);
  printf(", \"devices\": [\"cpu\"], \"read_only\": %s, \"authenticated\": %s, \"tls\": %s, "
         "\"insecure\": %s, \"files\": [",
         so->flags & HURRAY_SERVER_UPLOADS ? "false" : "true", so->secret ? "true" : "false",
         so->tls ? "true" : "false", so->flags & HURRAY_SERVER_INSECURE ? "true" : "false");
  for (int i = 0; i < count; i++) {
    if (i > 0) printf(", ");
    cli_escape(stdout, files[i], strlen(files[i]), true);
  }
  printf("]}\n");
}

static int run_serve(int argc, char **argv) {
  bool uploads = false, quiet = false, json = false, insecure = false;
  const char *address = "127.0.0.1:7700", *secret_file = NULL, *max_connections = NULL;
  const char *tls_cert = NULL, *tls_key = NULL, *upload_total = NULL, *per_address = NULL;
  const CliOption options[] = {{'a', "address", NULL, &address},
                               {'u', "uploads", &uploads, NULL},
                               {'s', "secret-file", NULL, &secret_file},
                               {'c', "max-connections", NULL, &max_connections},
                               {'q', "quiet", &quiet, NULL},
                               {0, "json", &json, NULL},
                               {0, "insecure", &insecure, NULL},
                               {0, "tls-cert", NULL, &tls_cert},
                               {0, "tls-key", NULL, &tls_key},
                               {0, "max-upload-total", NULL, &upload_total},
                               {0, "max-connections-per-address", NULL, &per_address}};
  char **files = NULL;
  int count = 0;
  int rc = cli_parse_list(&kServeCommand, argc, argv, options, 11, &files, &count, "FILE");
  if (rc >= 0) return rc;
  if ((tls_cert == NULL) != (tls_key == NULL)) {
    cli_error(&kServeCommand, "--tls-cert and --tls-key go together");
    return EXIT_USAGE;
  }
  Secret secret;
  rc = read_secret(&kServeCommand, secret_file, &secret);
  double connections = 0;
  if (rc < 0 && max_connections != NULL) {
    rc = parse_number(&kServeCommand, "max-connections", max_connections, 1 << 20, &connections);
  }
  double from_one = 0; /* 0: the default (ADR-099) */
  if (rc < 0 && per_address != NULL) {
    rc = parse_number(&kServeCommand, "max-connections-per-address", per_address, 1 << 20,
                      &from_one);
  }
  double total = 0;
  if (rc < 0 && upload_total != NULL) {
    rc = parse_number(&kServeCommand, "max-upload-total", upload_total, 0x1p62, &total);
  }
  if (rc >= 0) return rc;
  HurrayServerOptions so = {.address = address,
                            .flags = (uploads ? HURRAY_SERVER_UPLOADS : 0u) |
                                     (insecure ? HURRAY_SERVER_INSECURE : 0u),
                            .max_connections = (uint32_t)connections,
                            .max_connections_per_address = (uint32_t)from_one,
                            .max_upload_total_bytes = (uint64_t)total};
  if (secret.len > 0) {
    so.secret = secret.bytes;
    so.secret_len = secret.len;
  }
  HurrayTlsOptions tls = {.certificate_file = tls_cert, .key_file = tls_key};
  if (tls_cert != NULL) so.tls = &tls;
  HurrayError error = {0};
  HurrayServer *server = NULL;
  int status = hurray_server_create(&so, &server, &error);
  memset(&secret, 0, sizeof secret); /* the server keeps its copy; so.secret says one is set */
  if (status != HURRAY_OK) {
    if (status == HURRAY_EINVAL && strstr(error.message, "HURRAY_SERVER_INSECURE") != NULL) {
      cli_error(&kServeCommand,
                "%s is reachable beyond this host: give -s SECRET_FILE (and --tls-cert), or "
                "--insecure to serve anyone who reaches it",
                address);
      return EXIT_USAGE;
    }
    return cli_fail(&kServeCommand, address, status, &error);
  }
  for (int i = 0; i < count; i++) {
    status = hurray_server_add_file(server, files[i], &error);
    if (status != HURRAY_OK) {
      hurray_server_destroy(server);
      return cli_fail(&kServeCommand, files[i], status, &error);
    }
  }
  char bound[160];
  hurray_server_address(server, bound, sizeof bound, NULL);
  g_server = server;
  struct sigaction sa = {.sa_handler = on_signal};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  print_served(bound, json, &so, files, count);
  fflush(stdout);
  if (!quiet) {
    fprintf(stderr, "hurray serve: serving %d file%s on %s: %s, %s, %s\n", count,
            count == 1 ? "" : "s", bound, uploads ? "uploads accepted" : "read-only",
            so.secret ? "clients need the secret" : "no secret",
            tls_cert ? "TLS" : "plaintext");
  }
  status = hurray_server_run(server, &error);
  HurrayServerStats stats;
  if (!quiet && hurray_server_stats(server, &stats, NULL) == HURRAY_OK) {
    char sent[32], passed[32];
    printf("served %" PRIu64 " tensor%s: %s sent, %s passed as file descriptors\n",
           stats.transfers, stats.transfers == 1 ? "" : "s", cli_size(stats.sent_bytes, sent),
           cli_size(stats.passed_bytes, passed));
  }
  hurray_server_destroy(server);
  return status == HURRAY_OK ? EXIT_OK : cli_fail(&kServeCommand, bound, status, &error);
}

const Command kServeCommand = {"serve", "serve the tensors of files over the network", kServeUsage,
                               run_serve};

/* ---- ls ----------------------------------------------------------------------------------- */

#define TLS_CLIENT_HELP                                                                        \
  "      --tls-ca FILE        for hurrays:// URLs: the CA certificates (PEM) to verify the\n" \
  "                           server against (default: the system's trust store)\n"          \
  "      --tls-server-name NAME  the name the server's certificate must carry (default:\n"   \
  "                           the URL's host)\n"

static const char kLsUsage[] =
    "usage: hurray ls [-s SECRET_FILE] [-t SECONDS] [--tls-ca FILE] [--tls-server-name NAME]\n"
    "                 [--json] URL\n"
    "\n"
    "Lists the tensors a server serves: name, layout, dtype, shape, buffers and size. With\n"
    "--json, one JSON object: the server's metadata and each tensor with its own metadata\n"
    "(null where the server speaks wire protocol 1.2 or older, which carries none).\n"
    "\n"
    "options:\n"
    "  -s, --secret-file FILE   the shared secret (default: the HURRAY_SECRET variable)\n"
    "  -t, --timeout SECONDS    the longest wait for the server (default 30)\n"
    TLS_CLIENT_HELP
    "      --json               print one JSON object\n"
    "  -h, --help               show this help\n";

/* The --json object: {"metadata": ..., "tensors": [{"name", "layout", "dtype", "shape",
 * "buffers", "data_bytes", "metadata"}, ...]}, the server's metadata and each tensor's asked
 * first, so that it is printed whole or, on a failure, not at all. A metadata of null: the
 * server speaks a protocol without metadata requests (1.2 or older). */
static int ls_json(HurrayClient *client, const HurrayRemoteTensor *items, uint32_t count,
                   HurrayError *error) {
  HurrayMetaValue **meta = calloc((size_t)count + 1, sizeof *meta);
  int status = HURRAY_OK;
  if (meta == NULL) {
    snprintf(error->message, sizeof error->message, "out of memory");
    status = error->code = HURRAY_ENOMEM;
  }
  for (uint32_t i = 0; i <= count && status == HURRAY_OK; i++) {
    status = hurray_client_metadata(client, i ? items[i - 1].name : NULL, &meta[i], error);
    if (status == HURRAY_EUNSUPPORTED) { /* all of them, then: nothing was sent */
      status = HURRAY_OK;
      break;
    }
  }
  if (status == HURRAY_OK) {
    fputs("{\"metadata\": ", stdout);
    for (uint32_t i = 0; i <= count; i++) {
      if (i > 0) {
        const HurrayRemoteTensor *t = &items[i - 1];
        const HurrayDTypeInfo *dtype = hurray_dtype_info(t->dtype);
        fputs(i > 1 ? ", {\"name\": " : ", \"tensors\": [{\"name\": ", stdout);
        cli_escape(stdout, t->name, strlen(t->name), true);
        printf(", \"layout\": \"%s\", \"dtype\": ", hurray_layout_name(t->layout));
        if (t->layout == HURRAY_LAYOUT_COMPOSITE || dtype == NULL) fputs("null", stdout);
        else printf("\"%s\"", dtype->name);
        fputs(", \"shape\": [", stdout);
        for (int32_t d = 0; d < t->ndim; d++) printf("%s%" PRId64, d ? ", " : "", t->shape[d]);
        printf("], \"buffers\": %" PRIu32 ", \"data_bytes\": %" PRIu64 ", \"metadata\": ",
               t->buffer_count, t->data_bytes);
      }
      if (meta[i]) cli_print_meta(meta[i]);
      else fputs("null", stdout);
      if (i > 0) putchar('}');
    }
    fputs(count ? "]}\n" : ", \"tensors\": []}\n", stdout);
  }
  for (uint32_t i = 0; meta && i <= count; i++) hurray_meta_destroy(meta[i]);
  free(meta);
  return status;
}

static int run_ls(int argc, char **argv) {
  const char *url = NULL;
  ConnectArgs args = {0};
  bool json = false;
  const CliOption options[] = {{'s', "secret-file", NULL, &args.secret_file},
                               {'t', "timeout", NULL, &args.timeout},
                               {0, "tls-ca", NULL, &args.tls_ca},
                               {0, "tls-server-name", NULL, &args.tls_server_name},
                               {0, "json", &json, NULL}};
  int rc = cli_parse_operands(&kLsCommand, argc, argv, options, 5, &url, 1, "URL");
  if (rc >= 0) return rc;
  HurrayClient *client = NULL;
  rc = connect_to(&kLsCommand, url, &args, &client);
  if (rc >= 0) return rc;
  HurrayRemoteTensor *items = NULL;
  uint32_t count = 0;
  HurrayError error = {0};
  int status = hurray_client_list(client, &items, &count, &error);
  if (status == HURRAY_OK && json) status = ls_json(client, items, count, &error);
  hurray_client_destroy(client);
  if (status != HURRAY_OK) {
    free(items);
    return cli_fail(&kLsCommand, url, status, &error);
  }
  for (uint32_t i = 0; i < count && !json; i++) {
    const HurrayDTypeInfo *dtype = hurray_dtype_info(items[i].dtype);
    const char *layout = hurray_layout_name(items[i].layout);
    char size[32];
    cli_escape(stdout, items[i].name, strlen(items[i].name), false); /* the server's text */
    printf("  %s", layout ? layout : "?");
    if (items[i].layout != HURRAY_LAYOUT_COMPOSITE) {
      printf(" %s ", dtype ? dtype->name : "?");
      cli_print_dims(items[i].shape, items[i].ndim);
    }
    printf("  %" PRIu32 " buffer%s  %s\n", items[i].buffer_count,
           items[i].buffer_count == 1 ? "" : "s", cli_size(items[i].data_bytes, size));
  }
  free(items);
  return EXIT_OK;
}

const Command kLsCommand = {"ls", "list the tensors a server serves", kLsUsage, run_ls};

/* ---- fetch -------------------------------------------------------------------------------- */

static const char kFetchUsage[] =
    "usage: hurray fetch [-q] [-o OUT] [--rows START:STOP | --bytes START:STOP] [-r N]\n"
    "                    [--no-sync] [--drop-metadata] [-s SECRET_FILE] [-t SECONDS]\n"
    "                    [--tls-ca FILE] [--tls-server-name NAME] URL NAME\n"
    "\n"
    "Fetches tensor NAME from a server into a new Hurray file, streaming (memory use does\n"
    "not grow with the tensor), with its metadata. Every buffer's checksum is checked as\n"
    "it arrives; the file appears only when the whole tensor did. An OUT named\n"
    ".safetensors, .npy or .npz is written in that format (converted from a Hurray file\n"
    "fetched beside it, then removed; what the format cannot hold is refused). Progress is\n"
    "shown on stderr when it is a terminal and the transfer takes more than a moment.\n"
    "\n"
    "options:\n"
    "  -o, --output OUT         the file to write (default NAME.hurray, or NAME.bin with\n"
    "                           --bytes)\n"
    "      --rows START:STOP    only rows [START, STOP) of a dense tensor\n"
    "      --bytes START:STOP   only bytes [START, STOP) of the tensor's data (its buffers\n"
    "                           as served, concatenated; `hurray ls` shows their size),\n"
    "                           written raw to OUT; each frame of them is checked as it\n"
    "                           arrives (the buffers' checksums need whole buffers)\n"
    "      --drop-metadata      for a .safetensors, .npy or .npz OUT: drop the metadata the\n"
    "                           format cannot hold instead of refusing (as convert's)\n"
    "      --no-sync            do not fsync OUT and its directory: OUT still replaces any\n"
    "                           previous file only once complete, but a system crash may\n"
    "                           lose it\n"
    "  -r, --retries N          reconnect and resume up to N times if the connection drops\n"
    "  -s, --secret-file FILE   the shared secret (default: the HURRAY_SECRET variable)\n"
    "  -t, --timeout SECONDS    the longest wait for the server (default 30)\n"
    TLS_CLIENT_HELP
    "  -q, --quiet              print nothing on success\n"
    "  -h, --help               show this help\n";

typedef struct FetchProgress {
  struct timespec start;
  int shown; /* last percentage printed, -1 for none */
} FetchProgress;

/* START:STOP with 0 <= START < STOP, for --rows and --bytes. */
static int parse_span(const char *option, const char *text, int64_t *start, int64_t *stop) {
  char *colon = NULL, *end = NULL;
  errno = 0;
  long long a = strtoll(text, &colon, 10);
  long long b = colon && *colon == ':' ? strtoll(colon + 1, &end, 10) : -1;
  if (colon == text || *colon != ':' || end == colon + 1 || *end != '\0' || errno != 0 || a < 0 ||
      b <= a) {
    cli_error(&kFetchCommand, "--%s must be START:STOP with 0 <= START < STOP, not '%s'", option,
              text);
    return EXIT_USAGE;
  }
  *start = a;
  *stop = b;
  return -1;
}

/* Shows progress once the transfer has taken half a second. */
static void fetch_progress(void *context, uint64_t done, uint64_t total) {
  FetchProgress *p = context;
  if (p->shown < 0) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double elapsed = (double)(now.tv_sec - p->start.tv_sec) +
                     (double)(now.tv_nsec - p->start.tv_nsec) / 1e9;
    if (elapsed < 0.5) return;
  }
  cli_progress("fetching", done, total, &p->shown);
}

static int run_fetch(int argc, char **argv) {
  bool quiet = false, no_sync = false, drop_metadata = false;
  const char *output = NULL, *rows = NULL, *bytes = NULL, *retries = NULL;
  ConnectArgs args = {0};
  const CliOption options[] = {{'o', "output", NULL, &output},
                               {0, "rows", NULL, &rows},
                               {0, "bytes", NULL, &bytes},
                               {0, "no-sync", &no_sync, NULL},
                               {'r', "retries", NULL, &retries},
                               {'s', "secret-file", NULL, &args.secret_file},
                               {'t', "timeout", NULL, &args.timeout},
                               {'q', "quiet", &quiet, NULL},
                               {0, "tls-ca", NULL, &args.tls_ca},
                               {0, "tls-server-name", NULL, &args.tls_server_name},
                               {0, "drop-metadata", &drop_metadata, NULL}};
  const char *operands[2];
  int rc = cli_parse_operands(&kFetchCommand, argc, argv, options, 11, operands, 2,
                              "URL and NAME");
  if (rc >= 0) return rc;
  const char *url = operands[0], *name = operands[1];
  HurrayGetOptions get = {.flags = no_sync ? HURRAY_GET_NOT_DURABLE : 0u};
  int64_t byte_start = 0, byte_stop = 0;
  if (rows != NULL && bytes != NULL) {
    cli_error(&kFetchCommand, "--rows and --bytes exclude each other");
    return EXIT_USAGE;
  }
  if (rows != NULL) rc = parse_span("rows", rows, &get.row_start, &get.row_stop);
  if (bytes != NULL) rc = parse_span("bytes", bytes, &byte_start, &byte_stop);
  if (rc >= 0) return rc;
  if (retries != NULL) {
    double n = 0;
    rc = parse_number(&kFetchCommand, "retries", retries, 1000, &n);
    if (rc >= 0) return rc;
    get.retries = (uint32_t)n;
  }
  char default_output[HURRAY_MAX_NAME + 16];
  if (output == NULL) {
    if (strchr(name, '/') != NULL) {
      cli_error(&kFetchCommand, "'%s' is not a file name: give -o OUT", name);
      return EXIT_USAGE;
    }
    snprintf(default_output, sizeof default_output, "%s.%s", name, bytes ? "bin" : "hurray");
    output = default_output;
  }
  HurrayClient *client = NULL;
  rc = connect_to(&kFetchCommand, url, &args, &client);
  if (rc >= 0) return rc;
  FetchProgress progress = {.shown = -1};
  clock_gettime(CLOCK_MONOTONIC, &progress.start);
  bool tty = !quiet && isatty(STDERR_FILENO);
  if (tty) {
    get.progress = fetch_progress;
    get.progress_context = &progress;
  }
  HurrayError error = {0};
  /* OUT named .safetensors, .npy or .npz: the tensor is fetched (every checksum checked) into
     a Hurray file beside it, which hurray_convert then writes OUT from (ADR-092) */
  int format = HURRAY_FORMAT_HURRAY;
  if (!bytes && hurray_format_from_path(output, &format, NULL) != HURRAY_OK) {
    format = HURRAY_FORMAT_HURRAY;
  }
  char staged[4096];
  const char *into = output;
  if (format != HURRAY_FORMAT_HURRAY) {
    if (snprintf(staged, sizeof staged, "%s.fetch-%ld.hurray", output, (long)getpid()) >=
        (int)sizeof staged) {
      hurray_client_destroy(client);
      cli_error(&kFetchCommand, "'%s' is too long a path", output);
      return EXIT_USAGE;
    }
    into = staged;
    get.flags |= HURRAY_GET_NOT_DURABLE; /* the converted file is the one synced */
  }
  int status = bytes ? hurray_client_read_file(client, name, (uint64_t)byte_start,
                                                (uint64_t)byte_stop, output, &get, &error)
                      : hurray_client_fetch(client, name, &get, into, &error);
  hurray_client_destroy(client);
  if (tty && progress.shown >= 0) cli_progress_clear();
  if (status == HURRAY_OK && into != output) {
    HurrayConvertOptions co = {.flags = (no_sync ? HURRAY_CONVERT_NOT_DURABLE : 0u) |
                                        (drop_metadata ? HURRAY_CONVERT_DROP_METADATA : 0u)};
    status = hurray_convert(into, output, &co, &error);
    unlink(into);
    if (status != HURRAY_OK) return cli_fail(&kFetchCommand, output, status, &error);
  }
  if (status != HURRAY_OK) return cli_fail(&kFetchCommand, name, status, &error);
  if (!quiet && bytes) {
    printf("fetched bytes [%" PRId64 ", %" PRId64 ") of %s into %s\n", byte_start, byte_stop, name,
           output);
  } else if (!quiet) {
    printf("fetched %s into %s\n", name, output);
  }
  return EXIT_OK;
}

const Command kFetchCommand = {"fetch", "fetch a tensor from a server into a file", kFetchUsage,
                               run_fetch};
