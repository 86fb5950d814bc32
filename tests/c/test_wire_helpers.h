/* test_wire_helpers.h -- what the wire tests that run a server share: a HurrayServer on a
 * thread (start creates it, so its address is known; go runs it; finish stops and destroys it)
 * and a tensor of bytes to serve. Include after <cmocka.h> and test_tmpdir.h. */
#ifndef HURRAY_TEST_WIRE_HELPERS_H
#define HURRAY_TEST_WIRE_HELPERS_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "hurray/hurray.h"

typedef struct Running {
  HurrayServer *server;
  pthread_t thread;
  char address[128];
} Running;

static void *run_server(void *arg) {
  Running *r = arg;
  HurrayError error = {0};
  if (hurray_server_run(r->server, &error) != HURRAY_OK) fprintf(stderr, "%s\n", error.message);
  return NULL;
}

static inline void start(Running *r, const HurrayServerOptions *options) {
  memset(r, 0, sizeof *r);
  OK(hurray_server_create(options, &r->server, E));
  OK(hurray_server_address(r->server, r->address, sizeof r->address, E));
}

static inline void go(Running *r) {
  assert_int_equal(pthread_create(&r->thread, NULL, run_server, r), 0);
}

static inline void finish(Running *r) {
  hurray_server_stop(r->server);
  pthread_join(r->thread, NULL);
  hurray_server_destroy(r->server);
}

/* A DENSE uint8 tensor of `n` bytes, byte i = (i * 7 + seed) mod 251. */
static inline HurrayTensorContext *bytes_tensor(uint64_t n, uint8_t seed) {
  static int64_t shape[1];
  shape[0] = (int64_t)n;
  HurrayArray part = {.shape = shape, .ndim = 1, .dtype = HURRAY_DTYPE_UINT8};
  HurrayTensorDesc desc = {.layout = HURRAY_LAYOUT_DENSE, .ndim = 1, .shape = shape,
                           .parts = &part, .nparts = 1, .dtype = HURRAY_DTYPE_UINT8};
  HurrayBufferList *list = NULL;
  HurrayBuffer *b = NULL;
  OK(hurray_buffer_list_create(1, &list, E));
  OK(hurray_buffer_alloc(n, 64, 0, &b, E));
  for (uint64_t i = 0; i < n; i++) ((uint8_t *)b->data)[i] = (uint8_t)((i * 7 + seed) % 251);
  OK(hurray_buffer_list_append(list, b, HURRAY_ROLE_VALUES, NULL, E));
  HurrayTensorContext *c = NULL;
  OK(hurray_tensor_context_create(&desc, list, 0, NULL, NULL, &c, E));
  return c;
}

#endif /* HURRAY_TEST_WIRE_HELPERS_H */
