/* test_wire_large.c -- a tensor larger than 4 GiB crosses the wire with neither side holding it
 * (issue 11: "streamed without the client or the server holding it whole in memory; checked by
 * checksum"), in seconds and with no disk:
 *
 * - the server, a child process, serves a 4.5 GiB uint8 tensor whose memory is one pattern of
 *   PERIOD bytes (a memfd, pseudo-random bytes) mapped again and again over the tensor's
 *   address range: the data costs PERIOD bytes of memory, and the server sends it from the
 *   mapping as it sends any tensor (its XXH3-64 computed over all 4.5 GiB when added);
 * - the client streams it through hurray__client_stream, 1 MiB at a time, into a sink that
 *   compares every byte with the pattern and keeps nothing; the library checks the buffer's
 *   XXH3-64 at its end;
 * - the client's peak resident memory and the server's anonymous memory stay small.
 *
 * PERIOD is 257 pages: not a divisor of any frame or chunk size, so a frame sent twice, left
 * out or out of place changes the bytes the sink compares.
 *
 * Not built under the sanitizers (tests/c/CMakeLists.txt): their Debug build hashes at a few
 * hundred MB/s, minutes for 4.5 GiB on each side. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_tmpdir.h"
#include "wire.h"

#define TENSOR_BYTES (((uint64_t)4 << 30) + ((uint64_t)512 << 20))
#define PERIOD ((size_t)257 * 4096)

static uint8_t g_pattern[PERIOD];

static void make_pattern(void) {
  uint64_t x = 0x9e3779b97f4a7c15u;
  for (size_t i = 0; i < PERIOD; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    g_pattern[i] = (uint8_t)x;
  }
}

/* TENSOR_BYTES of address space showing the pattern over and over, read-only. */
static uint8_t *patterned_memory(void) {
  int fd = memfd_create("pattern", MFD_CLOEXEC);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, g_pattern, PERIOD), (ssize_t)PERIOD);
  size_t copies = (size_t)((TENSOR_BYTES + PERIOD - 1) / PERIOD);
  uint8_t *base = mmap(NULL, copies * PERIOD, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                       -1, 0);
  assert_true(base != MAP_FAILED);
  for (size_t i = 0; i < copies; i++) {
    void *at = mmap(base + i * PERIOD, PERIOD, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0);
    assert_true(at == base + i * PERIOD);
  }
  close(fd);
  return base;
}

/* The child: serves the patterned tensor until killed, saying on `ready` once it is served. */
static void serve(HurrayServer *server, int ready) {
  static int64_t shape[] = {(int64_t)TENSOR_BYTES};
  HurrayArray part = {.shape = shape, .ndim = 1, .dtype = HURRAY_DTYPE_UINT8};
  HurrayTensorDesc desc = {.layout = HURRAY_LAYOUT_DENSE, .ndim = 1, .shape = shape,
                           .parts = &part, .nparts = 1, .dtype = HURRAY_DTYPE_UINT8};
  HurrayBufferDesc bd = {.byte_size = TENSOR_BYTES, .alignment = 4096,
                         .device_tag = HURRAY_DEVICE_CPU, .memory_class = HURRAY_MEM_DEVICE,
                         .sync_mode = HURRAY_SYNC_READY};
  HurrayBuffer *b = NULL;
  HurrayBufferList *list = NULL;
  HurrayTensorContext *context = NULL;
  OK(hurray_buffer_wrap(patterned_memory(), &bd, HURRAY_BUFFER_READ_ONLY, NULL, 0, NULL, NULL, &b,
                        E));
  OK(hurray_buffer_list_create(1, &list, E));
  OK(hurray_buffer_list_append(list, b, HURRAY_ROLE_VALUES, NULL, E));
  OK(hurray_tensor_context_create(&desc, list, 0, NULL, NULL, &context, E));
  OK(hurray_server_add_tensor(server, "big", context, E)); /* hashes the 4.5 GiB */
  assert_int_equal(write(ready, "!", 1), 1);
  OK(hurray_server_run(server, E));
}

typedef struct Sink {
  uint64_t received;
  uint64_t calls;
} Sink;

static int compare(void *context, uint32_t buffer, uint64_t offset, const uint8_t *data,
                   size_t len, HurrayError *error) {
  Sink *s = context;
  if (buffer != 0 || offset != s->received) {
    return hurray__fail(error, HURRAY_EPROTOCOL, "bytes of buffer %u at %llu, expected %llu",
                        buffer, (unsigned long long)offset, (unsigned long long)s->received);
  }
  for (size_t done = 0; done < len;) {
    size_t at = (size_t)((offset + done) % PERIOD);
    size_t n = len - done < PERIOD - at ? len - done : PERIOD - at;
    if (memcmp(data + done, g_pattern + at, n) != 0) {
      return hurray__fail(error, HURRAY_ECHECKSUM, "wrong bytes near %llu",
                          (unsigned long long)(offset + done));
    }
    done += n;
  }
  s->received += len;
  s->calls++;
  return HURRAY_OK;
}

/* A field of /proc/PID/status in KiB ("VmHWM", "RssAnon"). */
static long status_kib(pid_t pid, const char *field) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  long kib = -1;
  size_t n = strlen(field);
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, field, n) == 0 && line[n] == ':') kib = atol(line + n + 1);
  }
  fclose(f);
  assert_true(kib >= 0);
  return kib;
}

static void beyond_4_gib_held_by_neither_side(void **state) {
  (void)state;
  make_pattern();
  HurrayServerOptions so = {.max_frame = 4 << 20};
  HurrayServer *server = NULL;
  OK(hurray_server_create(&so, &server, E));
  char address[128];
  OK(hurray_server_address(server, address, sizeof address, E));
  int ready[2];
  assert_int_equal(pipe(ready), 0);
  pid_t parent = getpid();
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive a failed test */
    if (getppid() != parent) _exit(1);
    close(ready[0]);
    serve(server, ready[1]);
    _exit(1);
  }
  close(ready[1]);
  hurray_server_destroy(server); /* the child has its own copy */
  struct pollfd p = {ready[0], POLLIN, 0};
  char byte = 0;
  assert_int_equal(poll(&p, 1, 300 * 1000), 1);
  assert_int_equal(read(ready[0], &byte, 1), 1);
  close(ready[0]);
  HurrayClient *c = NULL;
  OK(hurray_client_connect(address, NULL, &c, E));
  HurrayRemoteTensor *items = NULL;
  uint32_t count = 0;
  OK(hurray_client_list(c, &items, &count, E));
  assert_int_equal(count, 1);
  assert_int_equal(items[0].data_bytes, TENSOR_BYTES);
  free(items);
  Sink sink = {0};
  OK(hurray__client_stream(c, "big", NULL, compare, &sink, E));
  assert_int_equal(sink.received, TENSOR_BYTES);
  assert_true(sink.calls >= TENSOR_BYTES / (1 << 20));
  /* neither side held the tensor: the client's peak resident memory and the server's
     anonymous memory (its mapping of the pattern is shared memory, PERIOD bytes) are small */
  long client_peak = status_kib(getpid(), "VmHWM");
  long server_anon = status_kib(child, "RssAnon");
  printf("# 4.5 GiB streamed: client peak RSS %ld KiB, server anonymous RSS %ld KiB\n",
         client_peak, server_anon);
  assert_true(client_peak < 128 * 1024);
  assert_true(server_anon < 128 * 1024);
  hurray_client_destroy(c);
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(beyond_4_gib_held_by_neither_side),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
