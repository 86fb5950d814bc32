/* test_context.c -- HurrayTensorContext: every buffer's release and the owner's release run
 * exactly once (after success, after check, and on every failure path of create, which is a
 * SINK); the context owns its copy of the descriptor; and a consumer meeting another ABI
 * version reads the version and nothing else -- proven with a context whose bytes after the
 * version lie on an inaccessible page. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__unix__) || defined(__APPLE__)
#include <sys/mman.h>
#include <unistd.h>
#define HAVE_MPROTECT 1
#endif

#include <cmocka.h>

#include "hurray/hurray.h"

/* The frozen head, as every ABI version lays it out. */
_Static_assert(offsetof(HurrayTensorContext, abi_version) == 0, "abi_version at 0");
_Static_assert(offsetof(HurrayTensorContext, flags) == 4, "flags at 4");
_Static_assert(offsetof(HurrayTensorContext, release) == 8, "release at 8");

#define NBUFFERS 2

/* How often each release ran. */
typedef struct Counts {
  int buffers[NBUFFERS];
  int owner;
} Counts;

static void count_buffer(HurrayBuffer *self) {
  (*(int *)self->release_ctx)++;
  free(self->data);
}

static void count_owner(void *owner) {
  ((Counts *)owner)->owner++;
}

/* Two 64-byte CPU buffers whose releases count into `counts`; buffer 1 holds int64 {0, 3}. */
static HurrayBufferList *make_list(Counts *counts) {
  HurrayBufferList *list = NULL;
  assert_int_equal(hurray_buffer_list_create(NBUFFERS, &list, NULL), HURRAY_OK);
  const HurrayBufferDesc desc = {.byte_size = 64,
                                 .alignment = 64,
                                 .device_tag = HURRAY_DEVICE_CPU,
                                 .memory_class = HURRAY_MEM_DEVICE,
                                 .sync_mode = HURRAY_SYNC_READY};
  for (int i = 0; i < NBUFFERS; i++) {
    int64_t *data = aligned_alloc(64, 64);
    assert_non_null(data);
    memset(data, 0, 64);
    data[1] = 3;
    HurrayBuffer *buffer = NULL;
    assert_int_equal(hurray_buffer_wrap(data, &desc, 0, NULL, 0, count_buffer, &counts->buffers[i],
                                        &buffer, NULL),
                     HURRAY_OK);
    assert_int_equal(hurray_buffer_list_append(list, buffer, HURRAY_ROLE_MIXED, NULL, NULL),
                     HURRAY_OK);
  }
  return list;
}

static void expect_released_once(const Counts *counts) {
  for (int i = 0; i < NBUFFERS; i++) assert_int_equal(counts->buffers[i], 1);
  assert_int_equal(counts->owner, 1);
}

static void expect_unreleased(const Counts *counts) {
  for (int i = 0; i < NBUFFERS; i++) assert_int_equal(counts->buffers[i], 0);
  assert_int_equal(counts->owner, 0);
}

/* A float32 [4] COO tensor with 2 entries: indices int64 [1, 2] = {0, 3} in buffer 1, values in
 * buffer 0. Making index 3 out of range needs only a smaller shape. */
typedef struct Sparse {
  int64_t shape[1];
  HurrayArray parts[2];
  HurrayTensorDesc tensor;
} Sparse;

static void make_sparse(Sparse *s, int64_t extent) {
  static const int64_t kIndices[] = {1, 2}, kValues[] = {2};
  s->shape[0] = extent;
  s->parts[0] =
      (HurrayArray){.shape = kIndices, .ndim = 2, .buffer = 1, .dtype = HURRAY_DTYPE_INT64};
  s->parts[1] =
      (HurrayArray){.shape = kValues, .ndim = 1, .buffer = 0, .dtype = HURRAY_DTYPE_FLOAT32};
  s->tensor = (HurrayTensorDesc){.layout = HURRAY_LAYOUT_SPARSE_COO,
                                 .ndim = 1,
                                 .shape = s->shape,
                                 .parts = s->parts,
                                 .nparts = 2,
                                 .dtype = HURRAY_DTYPE_FLOAT32};
}

/* ---- create, check, release ---------------------------------------------------------------- */

/* hurray_tensor_context_data: each part's first element, past its byte offset; NULL where
 * there is no such address. */
static void data_is_each_parts_first_element(void **state) {
  (void)state;
  Counts counts = {0};
  Sparse s;
  make_sparse(&s, 4);
  s.parts[1].byte_offset = 8;
  HurrayTensorContext *context = NULL;
  assert_int_equal(hurray_tensor_context_create(&s.tensor, make_list(&counts), 0, &counts,
                                                count_owner, &context, NULL),
                   HURRAY_OK);
  const HurrayBufferList *list = context->buffers;
  assert_ptr_equal(hurray_tensor_context_data(context, 0), list->buffers[1]->data);
  assert_ptr_equal(hurray_tensor_context_data(context, 1), (char *)list->buffers[0]->data + 8);
  const int64_t *indices = hurray_tensor_context_data(context, 0);
  assert_int_equal(indices[1], 3);
  assert_null(hurray_tensor_context_data(context, 2));
  assert_null(hurray_tensor_context_data(NULL, 0));
  HurrayTensorContext other = *context;
  other.abi_version = HURRAY_C_ABI_VERSION + 1;
  assert_null(hurray_tensor_context_data(&other, 0));
  hurray_tensor_context_release(context);
  expect_released_once(&counts);

  /* an OpenCL buffer's data is the buffer object, not an address */
  HurrayBufferList *list2 = NULL;
  assert_int_equal(hurray_buffer_list_create(1, &list2, NULL), HURRAY_OK);
  const HurrayBufferDesc desc = {.byte_size = 64,
                                 .alignment = 64,
                                 .device_tag = HURRAY_DEVICE_OPENCL,
                                 .memory_class = HURRAY_MEM_DEVICE,
                                 .sync_mode = HURRAY_SYNC_READY};
  HurrayBuffer *object = NULL;
  assert_int_equal(hurray_buffer_wrap((void *)(uintptr_t)0x1008, &desc, 0, NULL, 0, NULL, NULL,
                                      &object, NULL),
                   HURRAY_OK);
  assert_int_equal(hurray_buffer_list_append(list2, object, HURRAY_ROLE_VALUES, NULL, NULL),
                   HURRAY_OK);
  static const int64_t kShape[] = {4};
  const HurrayArray part = {.shape = kShape, .ndim = 1, .dtype = HURRAY_DTYPE_FLOAT32};
  const HurrayTensorDesc dense = {.layout = HURRAY_LAYOUT_DENSE, .ndim = 1, .shape = kShape,
                                  .parts = &part, .nparts = 1, .dtype = HURRAY_DTYPE_FLOAT32};
  assert_int_equal(hurray_tensor_context_create(&dense, list2, 0, NULL, NULL, &context, NULL),
                   HURRAY_OK);
  assert_null(hurray_tensor_context_data(context, 0));
  hurray_tensor_context_release(context);
}

static void create_check_release(void **state) {
  (void)state;
  Counts counts = {0};
  Sparse s;
  make_sparse(&s, 4);
  HurrayTensorContext *context = NULL;
  HurrayError error = {0};
  assert_int_equal(
      hurray_tensor_context_create(&s.tensor, make_list(&counts), HURRAY_BUFFER_READ_ONLY, &counts,
                                   count_owner, &context, &error),
      HURRAY_OK);
  assert_non_null(context);
  assert_int_equal(context->abi_version, HURRAY_C_ABI_VERSION);
  assert_int_equal(hurray_tensor_context_abi_version(context), HURRAY_C_ABI_VERSION);
  assert_int_equal(context->flags, HURRAY_BUFFER_READ_ONLY);
  assert_non_null(context->release);
  assert_ptr_equal(context->owner, &counts);
  assert_ptr_not_equal(context->tensor, &s.tensor); /* a copy ... */
  memset(&s, 0xEE, sizeof s);                       /* ... that outlives the original */

  assert_int_equal(hurray_tensor_context_check(context, 0, &error), HURRAY_OK);
  assert_int_equal(hurray_tensor_context_check(context, HURRAY_VALIDATE_CONTENTS, &error),
                   HURRAY_OK);
  assert_int_equal(hurray_tensor_context_check(context, 1u << 9, &error), HURRAY_EINVAL);
  expect_unreleased(&counts);
  hurray_tensor_context_release(context);
  expect_released_once(&counts);
  hurray_tensor_context_release(NULL);
}

static void create_without_owner_release(void **state) {
  (void)state;
  Counts counts = {0};
  Sparse s;
  make_sparse(&s, 4);
  HurrayTensorContext *context = NULL;
  assert_int_equal(
      hurray_tensor_context_create(&s.tensor, make_list(&counts), 0, NULL, NULL, &context, NULL),
      HURRAY_OK);
  assert_int_equal(context->flags, 0);
  hurray_tensor_context_release(context);
  assert_int_equal(counts.buffers[0], 1);
  assert_int_equal(counts.buffers[1], 1);
  assert_int_equal(counts.owner, 0);
}

/* A tensor is read-only if its context or any of its buffers says so: create sets the flag,
 * check refuses a context that lacks it (a foreign producer's), naming the buffer. */
static void read_only_buffers_make_the_context_read_only(void **state) {
  (void)state;
  Counts counts = {0};
  Sparse s;
  make_sparse(&s, 4);
  HurrayBufferList *list = make_list(&counts);
  list->buffers[1]->flags = HURRAY_BUFFER_READ_ONLY;
  HurrayTensorContext *context = NULL;
  HurrayError error = {0};
  assert_int_equal(hurray_tensor_context_create(&s.tensor, list, 0, &counts, count_owner,
                                                &context, &error),
                   HURRAY_OK);
  assert_int_equal(context->flags, HURRAY_BUFFER_READ_ONLY);
  assert_int_equal(hurray_tensor_context_check(context, 0, &error), HURRAY_OK);
  context->flags = 0; /* what a careless producer sends */
  assert_int_equal(hurray_tensor_context_check(context, 0, &error), HURRAY_EINVAL);
  assert_string_equal(error.message,
                      "buffer 1 is read-only but the tensor context is not (its flags lack "
                      "HURRAY_BUFFER_READ_ONLY)");
  hurray_tensor_context_release(context);
  expect_released_once(&counts);
}

/* Index data is checked by the consumer's check, not by create; the releases still run once. */
static void check_with_contents(void **state) {
  (void)state;
  Counts counts = {0};
  Sparse s;
  make_sparse(&s, 3); /* index 3 is out of range */
  HurrayTensorContext *context = NULL;
  HurrayError error = {0};
  assert_int_equal(hurray_tensor_context_create(&s.tensor, make_list(&counts), 0, &counts,
                                                count_owner, &context, &error),
                   HURRAY_OK);
  assert_int_equal(hurray_tensor_context_check(context, 0, &error), HURRAY_OK);
  assert_int_equal(hurray_tensor_context_check(context, HURRAY_VALIDATE_CONTENTS, &error),
                   HURRAY_ELAYOUT);
  assert_non_null(strstr(error.message, "is 3, outside [0, 3)"));
  expect_unreleased(&counts);
  hurray_tensor_context_release(context);
  expect_released_once(&counts);
}

/* ---- create is a SINK ---------------------------------------------------------------------- */

enum Failure { NULL_TENSOR, NULL_OUT, UNKNOWN_FLAGS, BAD_LAYOUT, OUT_OF_BOUNDS, FAILURE_COUNT };

static void create_failures_release_everything_once(void **state) {
  (void)state;
  static const int kStatus[FAILURE_COUNT] = {HURRAY_EINVAL, HURRAY_EINVAL, HURRAY_EINVAL,
                                             HURRAY_ELAYOUT, HURRAY_EBOUNDS};
  for (int f = 0; f < FAILURE_COUNT; f++) {
    Counts counts = {0};
    Sparse s;
    make_sparse(&s, 4);
    HurrayTensorContext *context = (HurrayTensorContext *)&counts; /* must be reset to NULL */
    uint32_t flags = f == UNKNOWN_FLAGS ? 1u << 3 : 0;
    if (f == BAD_LAYOUT) s.tensor.nparts = 3;
    if (f == OUT_OF_BOUNDS) s.parts[0].byte_offset = 64;
    HurrayError error = {0};
    int status =
        hurray_tensor_context_create(f == NULL_TENSOR ? NULL : &s.tensor, make_list(&counts), flags,
                                     &counts, count_owner, f == NULL_OUT ? NULL : &context, &error);
    assert_int_equal(status, kStatus[f]);
    assert_int_equal(error.code, kStatus[f]);
    if (f != NULL_OUT) assert_null(context);
    expect_released_once(&counts);
  }
}

static void create_without_buffers_releases_the_owner(void **state) {
  (void)state;
  Counts counts = {0};
  Sparse s;
  make_sparse(&s, 4);
  HurrayTensorContext *context = NULL;
  assert_int_equal(
      hurray_tensor_context_create(&s.tensor, NULL, 0, &counts, count_owner, &context, NULL),
      HURRAY_EINVAL);
  assert_int_equal(counts.owner, 1);
  assert_null(context);
}

/* ---- contexts from other ABI versions ------------------------------------------------------ */

static int foreign_releases;
static void count_foreign_release(HurrayTensorContext *self) {
  foreign_releases++;
  self->release = NULL;
}

/* A context of another ABI version whose fields past the head are poison: any read of them
 * through a pointer would crash. */
static void other_versions_are_rejected_unread(void **state) {
  (void)state;
  assert_int_equal(hurray_tensor_context_abi_version(NULL), 0);
  assert_int_equal(hurray_tensor_context_check(NULL, 0, NULL), HURRAY_EINVAL);

  static const struct {
    uint32_t version;
    const char *message;
  } kCases[] = {
      {3, "producer C ABI version 3, consumer C ABI version 4"},
      {5, "producer C ABI version 5, consumer C ABI version 4"},
      {0, "producer C ABI version 0, consumer C ABI version 4"},
  };
  for (size_t i = 0; i < sizeof kCases / sizeof kCases[0]; i++) {
    HurrayTensorContext foreign;
    memset(&foreign, 0xA5, sizeof foreign);
    foreign.abi_version = kCases[i].version;
    foreign.release = count_foreign_release;
    foreign.tensor = (const HurrayTensorDesc *)(uintptr_t)1;
    foreign.buffers = (HurrayBufferList *)(uintptr_t)1;
    foreign.owner = (void *)(uintptr_t)1;
    assert_int_equal(hurray_tensor_context_abi_version(&foreign), kCases[i].version);
    HurrayError error = {0};
    assert_int_equal(hurray_tensor_context_check(&foreign, HURRAY_VALIDATE_CONTENTS, &error),
                     HURRAY_EABI);
    assert_int_equal(error.code, HURRAY_EABI);
    assert_string_equal(error.message, kCases[i].message);
    /* the owner of a context it cannot use still releases it, with the producer's code */
    foreign_releases = 0;
    hurray_tensor_context_release(&foreign);
    assert_int_equal(foreign_releases, 1);
    hurray_tensor_context_release(&foreign); /* release is NULL now: a no-op */
    assert_int_equal(foreign_releases, 1);
  }
}

/* The first 8 bytes of the context (abi_version, flags) end a readable page; release and
 * everything after it lie on a page with no access, so reading them faults. */
static void only_the_version_is_read(void **state) {
  (void)state;
#ifndef HAVE_MPROTECT
  skip();
#else
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  uint8_t *pages = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  assert_true(pages != MAP_FAILED);
  assert_int_equal(mprotect(pages + page, page, PROT_NONE), 0);
  HurrayTensorContext *head = (HurrayTensorContext *)(void *)(pages + page - 8);
  for (uint32_t version = 3; version <= 5; version += 2) {
    head->abi_version = version;
    head->flags = 0xFFFFFFFFu;
    assert_int_equal(hurray_tensor_context_abi_version(head), version);
    HurrayError error = {0};
    assert_int_equal(hurray_tensor_context_check(head, 0, &error), HURRAY_EABI);
  }
  assert_int_equal(munmap(pages, 2 * page), 0);
#endif
}

static void check_of_this_version(void **state) {
  (void)state;
  HurrayTensorContext context;
  memset(&context, 0, sizeof context);
  context.abi_version = HURRAY_C_ABI_VERSION;
  context.tensor = (const HurrayTensorDesc *)(uintptr_t)1; /* not read once released */
  HurrayError error = {0};
  assert_int_equal(hurray_tensor_context_check(&context, 0, &error), HURRAY_ESTATE);
  hurray_tensor_context_release(&context); /* release is NULL: a no-op */

  context.release = count_foreign_release;
  context.tensor = NULL;
  assert_int_equal(hurray_tensor_context_check(&context, 0, &error), HURRAY_EINVAL);

  Counts counts = {0};
  Sparse s;
  make_sparse(&s, 4);
  context.tensor = &s.tensor;
  context.buffers = make_list(&counts);
  assert_int_equal(hurray_tensor_context_check(&context, HURRAY_VALIDATE_CONTENTS, &error),
                   HURRAY_OK);
  context.flags = 1u << 4;
  assert_int_equal(hurray_tensor_context_check(&context, 0, &error), HURRAY_EINVAL);
  context.flags = 0;
  s.shape[0] = 2;
  assert_int_equal(hurray_tensor_context_check(&context, HURRAY_VALIDATE_CONTENTS, &error),
                   HURRAY_ELAYOUT);
  hurray_buffer_list_destroy(context.buffers);
}

/* The handles of a context someone else built are checked as hurray_buffer_wrap checks the
 * ones it makes, and a refusal names the buffer. */
static void check_refuses_invalid_handles(void **state) {
  (void)state;
  Counts counts = {0};
  Sparse s;
  make_sparse(&s, 4);
  HurrayTensorContext *context = NULL;
  assert_int_equal(hurray_tensor_context_create(&s.tensor, make_list(&counts), 0, &counts,
                                                count_owner, &context, NULL),
                   HURRAY_OK);
  HurrayBufferList *list = context->buffers;
  HurrayBuffer *buffer = list->buffers[1];
  const HurrayBuffer saved = *buffer;
  HurrayError error = {0};

  buffer->desc.device_tag = 0xF9; /* private, and not registered with this library */
  assert_int_equal(hurray_tensor_context_check(context, 0, &error), HURRAY_EDEVICE);
  assert_non_null(strstr(error.message, "buffer 1: "));
  *buffer = saved;
  buffer->sync_handle = &counts; /* a handle the sync mode (ready) has no use for */
  assert_int_equal(hurray_tensor_context_check(context, 0, &error), HURRAY_ESYNC);
  assert_string_equal(error.message, "buffer 1: sync mode ready takes no sync_handle");
  *buffer = saved;
  buffer->flags = 1u << 7;
  assert_int_equal(hurray_tensor_context_check(context, 0, &error), HURRAY_EINVAL);
  *buffer = saved;
  buffer->data = (char *)buffer->data + 8; /* no longer 64-byte aligned */
  assert_int_equal(hurray_tensor_context_check(context, 0, &error), HURRAY_EALIGN);
  *buffer = saved;
  list->roles[0] = 200;
  assert_int_equal(hurray_tensor_context_check(context, 0, &error), HURRAY_EINVAL);
  assert_string_equal(error.message, "buffer 0 has the unknown role 200");
  list->roles[0] = HURRAY_ROLE_MIXED;
  list->buffers[1] = NULL;
  assert_int_equal(hurray_tensor_context_check(context, 0, &error), HURRAY_EINVAL);
  assert_string_equal(error.message, "buffer 1 of the list is NULL");
  list->buffers[1] = buffer;
  assert_int_equal(hurray_tensor_context_check(context, 0, NULL), HURRAY_OK);

  buffer->desc.memory_class = HURRAY_MEM_PEER; /* CPU memory is DEVICE only; no error struct */
  assert_int_equal(hurray_tensor_context_check(context, 0, NULL), HURRAY_EMEMCLASS);
  *buffer = saved;
  expect_unreleased(&counts);
  hurray_tensor_context_release(context);
  expect_released_once(&counts);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(create_check_release),
      cmocka_unit_test(data_is_each_parts_first_element),
      cmocka_unit_test(create_without_owner_release),
      cmocka_unit_test(check_with_contents),
      cmocka_unit_test(read_only_buffers_make_the_context_read_only),
      cmocka_unit_test(create_failures_release_everything_once),
      cmocka_unit_test(create_without_buffers_releases_the_owner),
      cmocka_unit_test(other_versions_are_rejected_unread),
      cmocka_unit_test(only_the_version_is_read),
      cmocka_unit_test(check_of_this_version),
      cmocka_unit_test(check_refuses_invalid_handles),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
