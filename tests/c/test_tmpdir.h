/* test_tmpdir.h -- what the cmocka tests that write files share: a temporary directory for the
 * test program (make_dir / remove_dir as the group's setup and teardown), paths in it, and
 * OK(call), which fails the test with the call and hurray-core's message unless the call
 * returns HURRAY_OK (E is the HurrayError the call may write). Include after <cmocka.h>. */
#ifndef HURRAY_TEST_TMPDIR_H
#define HURRAY_TEST_TMPDIR_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "hurray/hurray.h"

#define OK(call)                                                             \
  do {                                                                       \
    HurrayError ok_error = {0};                                              \
    int ok_status = (call);                                                  \
    if (ok_status != HURRAY_OK) fail_msg("%s: %s", #call, ok_error.message); \
  } while (0)
#define E (&ok_error)

static char g_dir[256];

static inline int make_dir(void **state) {
  (void)state;
  const char *tmp = getenv("TMPDIR");
  snprintf(g_dir, sizeof g_dir, "%s/hurray-test-XXXXXX", tmp ? tmp : "/tmp");
  return mkdtemp(g_dir) == NULL;
}

static inline int remove_dir(void **state) {
  (void)state;
  char command[300];
  snprintf(command, sizeof command, "rm -rf '%s'", g_dir);
  return system(command);
}

/* `name` in the directory; the result stays valid for the next seven calls. */
static inline char *path_of(const char *name) {
  static char paths[8][512];
  static int next;
  char *path = paths[next++ % 8];
  snprintf(path, sizeof paths[0], "%s/%s", g_dir, name);
  return path;
}

/* The bytes of file `path` in new memory (free it), NUL-terminated so text compares as a
 * string; `*size` excludes the NUL. NULL if the file cannot be opened. */
static inline uint8_t *file_contents(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) return NULL;
  fseek(f, 0, SEEK_END);
  *size = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *bytes = malloc(*size + 1);
  assert_non_null(bytes);
  assert_int_equal(fread(bytes, 1, *size, f), *size);
  bytes[*size] = 0;
  fclose(f);
  return bytes;
}

#endif /* HURRAY_TEST_TMPDIR_H */
