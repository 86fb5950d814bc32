/* fuzz_wire_handshake.c -- a real HurrayServer fed arbitrary bytes as a client. The first byte
 * picks the server: even, one without authentication (so inputs reach requests, uploads and
 * the event loop's every state); odd, one that asks for a shared secret. The rest is sent on a
 * fresh Unix-socket connection, the writing side is shut, and every byte the server answers is
 * read until it closes. Nothing may crash, leak or hang; each answer must be well-formed
 * frames. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "wire.h"

typedef struct Fixture {
  HurrayServer *server;
  char address[108];
  pthread_t thread;
} Fixture;

static Fixture g_servers[2];

static void *run(void *arg) {
  hurray_server_run(arg, NULL);
  return NULL;
}

static void add_tensor(HurrayServer *s) {
  static const int64_t shape[] = {2, 3};
  HurrayArray part = {.shape = shape, .ndim = 2, .dtype = HURRAY_DTYPE_FLOAT32};
  HurrayTensorDesc desc = {.layout = HURRAY_LAYOUT_DENSE, .ndim = 2, .shape = shape,
                           .parts = &part, .nparts = 1, .dtype = HURRAY_DTYPE_FLOAT32};
  HurrayBufferList *list = NULL;
  HurrayBuffer *b = NULL;
  HurrayTensorContext *c = NULL;
  if (hurray_buffer_list_create(1, &list, NULL) != HURRAY_OK ||
      hurray_buffer_alloc(24, 64, HURRAY_ALLOC_ZERO, &b, NULL) != HURRAY_OK ||
      hurray_buffer_list_append(list, b, HURRAY_ROLE_VALUES, NULL, NULL) != HURRAY_OK ||
      hurray_tensor_context_create(&desc, list, 0, NULL, NULL, &c, NULL) != HURRAY_OK ||
      hurray_server_add_tensor(s, "x", c, NULL) != HURRAY_OK) {
    abort();
  }
}

static void setup(void) {
  signal(SIGPIPE, SIG_IGN);
  for (int i = 0; i < 2; i++) {
    Fixture *f = &g_servers[i];
    snprintf(f->address, sizeof f->address, "unix:/tmp/hurray-fuzz-%d-%d.sock", (int)getpid(), i);
    unlink(f->address + 5);
    HurrayServerOptions o = {.address = f->address, .handshake_timeout_ms = 200,
                             .idle_timeout_ms = 200, .max_upload_bytes = 1 << 20};
    if (i == 1) {
      o.secret = (const uint8_t *)"s3cret";
      o.secret_len = 6;
    }
    if (hurray_server_create(&o, &f->server, NULL) != HURRAY_OK) abort();
    add_tensor(f->server);
    pthread_create(&f->thread, NULL, run, f->server);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, setup);
  if (size == 0) return 0;
  const Fixture *f = &g_servers[data[0] & 1];
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un un = {.sun_family = AF_UNIX};
  snprintf(un.sun_path, sizeof un.sun_path, "%s", f->address + 5);
  if (fd < 0 || connect(fd, (struct sockaddr *)&un, sizeof un) != 0) abort();
  struct timeval tv = {2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  (void)send(fd, data + 1, size - 1, MSG_NOSIGNAL);
  shutdown(fd, SHUT_WR);
  /* the answer: well-formed frames until the server closes */
  uint8_t head[WIRE_HEADER_SIZE];
  for (;;) {
    ssize_t n = recv(fd, head, sizeof head, MSG_WAITALL);
    if (n <= 0) break;
    WireHeader h;
    if (n != (ssize_t)sizeof head ||
        hurray__wire_header_decode(head, (uint64_t)1 << 30, &h, NULL) != HURRAY_OK) {
      abort();
    }
    for (uint64_t left = h.length; left > 0;) {
      uint8_t sink[4096];
      ssize_t m = recv(fd, sink, left < sizeof sink ? (size_t)left : sizeof sink, 0);
      if (m <= 0) abort();
      left -= (uint64_t)m;
    }
  }
  close(fd);
  return 0;
}
