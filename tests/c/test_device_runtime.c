/* test_device_runtime.c -- the device backends (ADR-047) against the real runtimes: OpenCL
 * through whatever ICD the machine has (PoCL in CI), CUDA where libcuda.so.1 and a GPU exist.
 * A tag whose runtime is absent is checked for the EUNSUPPORTED message naming its library
 * and its memory tests are skipped -- unless HURRAY_REQUIRE_OPENCL=1 (scripts/test.sh), where
 * a missing OpenCL runtime fails.
 *
 * The checks that need OpenCL calls of their own (reference counts, events, user events) load
 * libOpenCL.so.1 with dlopen here too, so the test links no runtime either. */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include <dlfcn.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "hurray/hurray.h"

/* ---- the OpenCL calls of the test itself ---------------------------------------------------- */

typedef struct TestCL {
  void *(*CreateBuffer)(void *, uint64_t, size_t, void *, int32_t *);
  int32_t (*RetainMemObject)(void *);
  int32_t (*ReleaseMemObject)(void *);
  int32_t (*GetMemObjectInfo)(void *, uint32_t, size_t, void *, size_t *);
  int32_t (*EnqueueWriteBuffer)(void *, void *, uint32_t, size_t, size_t, const void *, uint32_t,
                                void *const *, void **);
  int32_t (*RetainEvent)(void *);
  int32_t (*ReleaseEvent)(void *);
  int32_t (*GetEventInfo)(void *, uint32_t, size_t, void *, size_t *);
  void *(*CreateUserEvent)(void *, int32_t *);
  int32_t (*SetUserEventStatus)(void *, int32_t);
  int32_t (*Flush)(void *);
  int32_t (*Finish)(void *);
} TestCL;

#define CL_MEM_READ_WRITE 1u
#define CL_MEM_REFERENCE_COUNT 0x1105u
#define CL_EVENT_REFERENCE_COUNT 0x11D2u
#define CL_COMPLETE 0

static TestCL tcl;

static int test_cl_load(void) {
  static int loaded = -1;
  if (loaded >= 0) return loaded;
  void *lib = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
  static const char *const names[] = {
      "clCreateBuffer",       "clRetainMemObject", "clReleaseMemObject", "clGetMemObjectInfo",
      "clEnqueueWriteBuffer", "clRetainEvent",     "clReleaseEvent",     "clGetEventInfo",
      "clCreateUserEvent",    "clSetUserEventStatus", "clFlush",
      "clFinish"};
  void *symbols[sizeof names / sizeof *names];
  loaded = lib != NULL;
  for (size_t i = 0; loaded && i < sizeof names / sizeof *names; i++) {
    symbols[i] = dlsym(lib, names[i]);
    loaded = symbols[i] != NULL;
  }
  if (loaded) memcpy(&tcl, symbols, sizeof tcl);
  return loaded;
}

static uint32_t mem_refs(void *mem) {
  uint32_t count = 0;
  assert_int_equal(tcl.GetMemObjectInfo(mem, CL_MEM_REFERENCE_COUNT, sizeof count, &count, NULL),
                   0);
  return count;
}

static uint32_t event_refs(void *event) {
  uint32_t count = 0;
  assert_int_equal(tcl.GetEventInfo(event, CL_EVENT_REFERENCE_COUNT, sizeof count, &count, NULL),
                   0);
  return count;
}

/* The reference count once the runtime's own references have gone: a runtime holds some while
 * a command that used the object is in flight, and PoCL drops them on a thread of its own after
 * the command completed. Polls for up to two seconds while the count is above `floor`. */
static uint32_t settled(uint32_t (*refs)(void *), void *object, uint32_t floor) {
  uint32_t count = refs(object);
  for (int i = 0; i < 2000 && count > floor; i++) {
    struct timespec pause = {0, 1000 * 1000};
    nanosleep(&pause, NULL);
    count = refs(object);
  }
  return count;
}

/* ---- helpers ------------------------------------------------------------------------------- */

/* Whether the runtime of `tag` is here; if not, the error names its library, and the test is
 * skipped (failed for OpenCL under HURRAY_REQUIRE_OPENCL=1). */
static int runtime_or_skip(int tag) {
  HurrayError error = {0};
  int status = hurray_device_runtime_load(tag, &error);
  if (status == HURRAY_OK) return 1;
  assert_int_equal(status, HURRAY_EUNSUPPORTED);
  assert_non_null(strstr(error.message, hurray_device_runtime_library(tag)));
  const char *require = getenv("HURRAY_REQUIRE_OPENCL");
  if (tag == HURRAY_DEVICE_OPENCL && require != NULL && strcmp(require, "1") == 0) {
    fail_msg("OpenCL is required here: %s", error.message);
  }
  return 0;
}

#define REQUIRE_RUNTIME(tag)            \
  do {                                  \
    if (!runtime_or_skip(tag)) skip();  \
  } while (0)

static const int kTags[] = {HURRAY_DEVICE_OPENCL, HURRAY_DEVICE_CUDA};

/* ---- loading and errors -------------------------------------------------------------------- */

static void libraries_are_named(void **state) {
  (void)state;
  assert_string_equal(hurray_device_runtime_library(HURRAY_DEVICE_OPENCL), "libOpenCL.so.1");
  assert_string_equal(hurray_device_runtime_library(HURRAY_DEVICE_CUDA), "libcuda.so.1");
  assert_null(hurray_device_runtime_library(HURRAY_DEVICE_CPU));
  assert_null(hurray_device_runtime_library(HURRAY_DEVICE_ROCM));
}

static void a_missing_runtime_is_unsupported_naming_its_library(void **state) {
  (void)state;
  for (size_t i = 0; i < 2; i++) {
    HurrayError error = {0};
    int status = hurray_device_runtime_load(kTags[i], &error);
    if (status == HURRAY_OK) continue; /* present here: runtime_or_skip covers the other case */
    assert_int_equal(status, HURRAY_EUNSUPPORTED);
    assert_non_null(strstr(error.message, hurray_device_runtime_library(kTags[i])));
    HurrayDeviceQueue *queue = NULL;
    HurrayError again = {0};
    assert_int_equal(hurray_device_queue_create(kTags[i], 0, &queue, &again), HURRAY_EUNSUPPORTED);
    assert_string_equal(again.message, error.message); /* the first attempt's reason, kept */
    assert_null(queue);
  }
}

static void devices_without_a_backend_are_unsupported(void **state) {
  (void)state;
  HurrayError error = {0};
  HurrayDeviceQueue *queue = NULL;
  assert_int_equal(hurray_device_queue_create(HURRAY_DEVICE_ROCM, 0, &queue, &error),
                   HURRAY_EUNSUPPORTED);
  assert_string_equal(error.message,
                      "hurray-core has no runtime backend for rocm memory (only opencl and cuda)");
  assert_int_equal(hurray_device_runtime_load(HURRAY_DEVICE_CPU, &error), HURRAY_EUNSUPPORTED);
  assert_int_equal(hurray_device_runtime_load(0x42, &error), HURRAY_EUNSUPPORTED);
  assert_string_equal(error.message, "hurray-core has no runtime backend for device tag 0x42");
}

static void a_device_that_does_not_exist_is_edevice(void **state) {
  (void)state;
  REQUIRE_RUNTIME(HURRAY_DEVICE_OPENCL);
  HurrayError error = {0};
  HurrayDeviceQueue *queue = NULL;
  assert_int_equal(hurray_device_queue_create(HURRAY_DEVICE_OPENCL, 999, &queue, &error),
                   HURRAY_EDEVICE);
  assert_non_null(strstr(error.message, "there is no OpenCL device 999"));
}

/* ---- round trips through device memory ----------------------------------------------------- */

static void round_trip(int tag) {
  HurrayError error = {0};
  HurrayDeviceQueue *queue = NULL;
  assert_int_equal(hurray_device_queue_create(tag, 0, &queue, &error), HURRAY_OK);
  assert_int_equal(hurray_device_queue_tag(queue), tag);
  assert_int_equal(hurray_device_queue_device_id(queue), 0);
  assert_non_null(hurray_device_queue_native(queue));
  assert_non_null(hurray_device_queue_native_context(queue));

  enum { N = 1 << 18 }; /* 1 MiB of float32 */
  HurrayBuffer *buffer = NULL;
  assert_int_equal(hurray_device_alloc(queue, N * 4, HURRAY_ALLOC_ZERO, &buffer, &error),
                   HURRAY_OK);
  assert_int_equal(buffer->desc.device_tag, tag);
  assert_int_equal(buffer->desc.sync_mode, HURRAY_SYNC_READY);
  assert_true(buffer->desc.alignment >= HURRAY_MIN_ALIGNMENT);
  float *host = malloc(N * 4);
  assert_non_null(host);
  memset(host, 0xFF, N * 4);
  assert_int_equal(hurray_device_copy_to_host(queue, buffer, 0, host, N * 4, &error), HURRAY_OK);
  for (int i = 0; i < N; i++) assert_true(host[i] == 0.0f); /* HURRAY_ALLOC_ZERO */
  for (int i = 0; i < N; i++) host[i] = (float)i * 0.5f;
  assert_int_equal(hurray_device_copy_from_host(queue, buffer, 0, host, N * 4, &error), HURRAY_OK);
  float back[16];
  assert_int_equal(hurray_device_copy_to_host(queue, buffer, 4 * 1000, back, sizeof back, &error),
                   HURRAY_OK);
  for (int i = 0; i < 16; i++) assert_true(back[i] == (float)(1000 + i) * 0.5f);

  /* bounds, overflow and the read-only flag */
  assert_int_equal(hurray_device_copy_to_host(queue, buffer, N * 4 - 8, back, 16, &error),
                   HURRAY_EBOUNDS);
  assert_int_equal(hurray_device_copy_to_host(queue, buffer, UINT64_MAX, back, 2, &error),
                   HURRAY_EBOUNDS);
  buffer->flags = HURRAY_BUFFER_READ_ONLY;
  assert_int_equal(hurray_device_copy_from_host(queue, buffer, 0, back, 4, &error), HURRAY_EINVAL);
  assert_string_equal(error.message, "the buffer is read-only");
  buffer->flags = 0;

  /* a CPU buffer is not this queue's memory */
  HurrayBuffer *cpu = NULL;
  assert_int_equal(hurray_buffer_alloc(64, 64, 0, &cpu, &error), HURRAY_OK);
  assert_int_equal(hurray_device_copy_to_host(queue, cpu, 0, back, 4, &error), HURRAY_EDEVICE);
  hurray_buffer_destroy(cpu);

  /* an empty allocation has no memory, and copies nothing */
  HurrayBuffer *empty = NULL;
  assert_int_equal(hurray_device_alloc(queue, 0, 0, &empty, &error), HURRAY_OK);
  assert_null(empty->data);
  hurray_buffer_destroy(empty);

  /* a consumer that knows only the buffer reaches it through a queue of the buffer's context */
  HurrayDeviceQueue *theirs = NULL;
  assert_int_equal(hurray_device_queue_for_buffer(buffer, &theirs, &error), HURRAY_OK);
  assert_ptr_equal(hurray_device_queue_native_context(theirs),
                   hurray_device_queue_native_context(queue));
  assert_int_equal(hurray_device_copy_to_host(theirs, buffer, 4 * (N - 16), back, sizeof back,
                                              &error),
                   HURRAY_OK);
  for (int i = 0; i < 16; i++) assert_true(back[i] == (float)(N - 16 + i) * 0.5f);
  assert_int_equal(hurray_device_wait(theirs, buffer, &error), HURRAY_OK);
  hurray_device_queue_destroy(theirs);

  hurray_device_queue_destroy(queue); /* the buffer outlives the queue it was made with */
  assert_int_equal(hurray_device_queue_create(tag, 0, &queue, &error), HURRAY_OK);
  assert_int_equal(hurray_device_copy_to_host(queue, buffer, 0, back, sizeof back, &error),
                   HURRAY_OK);
  assert_true(back[3] == 1.5f);
  hurray_buffer_destroy(buffer);
  hurray_device_queue_destroy(queue);
  hurray_device_queue_destroy(NULL);
  free(host);
}

static void opencl_round_trip(void **state) {
  (void)state;
  REQUIRE_RUNTIME(HURRAY_DEVICE_OPENCL);
  round_trip(HURRAY_DEVICE_OPENCL);
}

static void cuda_round_trip(void **state) {
  (void)state;
  REQUIRE_RUNTIME(HURRAY_DEVICE_CUDA);
  round_trip(HURRAY_DEVICE_CUDA);
}

/* ---- the application's own queue ----------------------------------------------------------- */

static void an_application_queue_is_wrapped_and_retained(void **state) {
  (void)state;
  REQUIRE_RUNTIME(HURRAY_DEVICE_OPENCL);
  HurrayError error = {0};
  HurrayDeviceQueue *own = NULL, *wrapped = NULL, *other = NULL;
  assert_int_equal(hurray_device_queue_create(HURRAY_DEVICE_OPENCL, 0, &own, &error), HURRAY_OK);
  void *native = hurray_device_queue_native(own);
  void *context = hurray_device_queue_native_context(own);
  assert_int_equal(hurray_device_queue_wrap(HURRAY_DEVICE_OPENCL, NULL, native, &wrapped, &error),
                   HURRAY_OK);
  assert_ptr_equal(hurray_device_queue_native(wrapped), native);
  assert_ptr_equal(hurray_device_queue_native_context(wrapped), context);
  assert_int_equal(hurray_device_queue_device_id(wrapped), 0);
  /* a context the queue does not belong to */
  assert_int_equal(hurray_device_queue_wrap(HURRAY_DEVICE_OPENCL, &error, native, &other, &error),
                   HURRAY_EINVAL);
  assert_string_equal(error.message,
                      "the cl_command_queue belongs to another cl_context than the one given");
  assert_int_equal(hurray_device_queue_wrap(HURRAY_DEVICE_OPENCL, NULL, NULL, &other, &error),
                   HURRAY_EINVAL);
  assert_null(other);
  hurray_device_queue_destroy(own); /* the wrapped queue holds references of its own */
  HurrayBuffer *buffer = NULL;
  assert_int_equal(hurray_device_alloc(wrapped, 64, HURRAY_ALLOC_ZERO, &buffer, &error),
                   HURRAY_OK);
  uint8_t back[64];
  memset(back, 0xFF, sizeof back);
  assert_int_equal(hurray_device_copy_to_host(wrapped, buffer, 0, back, sizeof back, &error),
                   HURRAY_OK);
  for (size_t i = 0; i < sizeof back; i++) assert_int_equal(back[i], 0);
  assert_int_equal(hurray_device_wait(wrapped, buffer, &error), HURRAY_OK); /* READY */
  hurray_buffer_destroy(buffer);
  hurray_device_queue_destroy(wrapped);
}

/* A handle given as a number that is no queue: refused naming it, never a fault of the ICD
 * loader or the runtime, which dereference handles unchecked. Each in a child, so a crash
 * fails the test instead of ending it. */
static void bogus_queue_handles_are_refused_not_dereferenced(void **state) {
  (void)state;
  REQUIRE_RUNTIME(HURRAY_DEVICE_OPENCL);
  static uint64_t host_words[8];
  struct {
    void *handle;
    const char *why;
  } kCases[] = {
      {(void *)(uintptr_t)1, "aligned to a pointer"},
      {(void *)(uintptr_t)4096, "no memory of this process is there"},
      {(char *)host_words + 3, "aligned to a pointer"},
      {host_words, "no platform's ICD dispatch table"},
  };
  for (size_t i = 0; i < sizeof kCases / sizeof *kCases; i++) {
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
      HurrayError error = {0};
      HurrayDeviceQueue *queue = NULL;
      int status = hurray_device_queue_wrap(HURRAY_DEVICE_OPENCL, NULL, kCases[i].handle, &queue,
                                            &error);
      _exit(status == HURRAY_EINVAL && queue == NULL && strstr(error.message, "is not one") &&
                    strstr(error.message, kCases[i].why)
                ? 0
                : 1);
    }
    int wstatus = 0;
    assert_int_equal(waitpid(child, &wstatus, 0), child);
    if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
      fail_msg("case %zu (%s): %s %d", i, kCases[i].why,
               WIFSIGNALED(wstatus) ? "killed by signal" : "exit status",
               WIFSIGNALED(wstatus) ? WTERMSIG(wstatus) : WEXITSTATUS(wstatus));
    }
  }
}

/* ---- a C producer and a C consumer: the tensor context across, device memory read back ---- */

static void opencl_tensor_context_crosses(void **state) {
  (void)state;
  REQUIRE_RUNTIME(HURRAY_DEVICE_OPENCL);
  HurrayError error = {0};
  HurrayDeviceQueue *producer = NULL;
  assert_int_equal(hurray_device_queue_create(HURRAY_DEVICE_OPENCL, 0, &producer, &error),
                   HURRAY_OK);
  int32_t values[2][3] = {{1, -2, 3}, {40, 50, -60}};
  HurrayBuffer *buffer = NULL;
  assert_int_equal(hurray_device_alloc(producer, sizeof values, 0, &buffer, &error), HURRAY_OK);
  assert_int_equal(hurray_device_copy_from_host(producer, buffer, 0, values, sizeof values,
                                                &error),
                   HURRAY_OK);
  HurrayBufferList *list = NULL;
  assert_int_equal(hurray_buffer_list_create(1, &list, &error), HURRAY_OK);
  assert_int_equal(hurray_buffer_list_append(list, buffer, HURRAY_ROLE_VALUES, NULL, &error),
                   HURRAY_OK);
  const int64_t shape[2] = {2, 3};
  const HurrayArray array = {.shape = shape, .ndim = 2, .dtype = HURRAY_DTYPE_INT32};
  const HurrayTensorDesc desc = {.layout = HURRAY_LAYOUT_DENSE, .ndim = 2, .shape = shape,
                                 .parts = &array, .nparts = 1, .dtype = HURRAY_DTYPE_INT32};
  HurrayTensorContext *context = NULL;
  assert_int_equal(hurray_tensor_context_create(&desc, list, 0, NULL, NULL, &context, &error),
                   HURRAY_OK);
  hurray_device_queue_destroy(producer); /* the consumer needs nothing of the producer's */

  assert_int_equal(hurray_tensor_context_check(context, 0, &error), HURRAY_OK);
  const HurrayBuffer *received = context->buffers->buffers[0];
  HurrayDeviceQueue *consumer = NULL;
  assert_int_equal(hurray_device_queue_for_buffer(received, &consumer, &error), HURRAY_OK);
  int32_t back[2][3] = {{0}};
  assert_int_equal(hurray_device_copy_to_host(consumer, received, 0, back, sizeof back, &error),
                   HURRAY_OK);
  assert_memory_equal(back, values, sizeof values);
  hurray_device_queue_destroy(consumer);
  hurray_tensor_context_release(context);
}

/* ---- release discipline: 10,000 exchanges, every cl_mem and event released exactly once ---- */

static unsigned g_released;

static void producer_release(HurrayBuffer *self) {
  tcl.ReleaseEvent(self->sync_handle);
  tcl.ReleaseMemObject(self->data);
  g_released++;
}

static void every_cl_mem_and_event_is_released_once(void **state) {
  (void)state;
  REQUIRE_RUNTIME(HURRAY_DEVICE_OPENCL);
  assert_true(test_cl_load());
  HurrayError error = {0};
  HurrayDeviceQueue *producer = NULL, *consumer = NULL;
  assert_int_equal(hurray_device_queue_create(HURRAY_DEVICE_OPENCL, 0, &producer, &error),
                   HURRAY_OK);
  assert_int_equal(hurray_device_queue_create(HURRAY_DEVICE_OPENCL, 0, &consumer, &error),
                   HURRAY_OK);
  const int64_t shape[1] = {4};
  const HurrayArray array = {.shape = shape, .ndim = 1, .dtype = HURRAY_DTYPE_UINT32};
  const HurrayTensorDesc desc = {.layout = HURRAY_LAYOUT_DENSE, .ndim = 1, .shape = shape,
                                 .parts = &array, .nparts = 1, .dtype = HURRAY_DTYPE_UINT32};
  g_released = 0;
  enum { EXCHANGES = 10000 };
  for (uint32_t i = 0; i < EXCHANGES; i++) {
    /* The producer: a cl_mem written on its own queue, the write's event as the sync handle. */
    int32_t code = 0;
    void *mem = tcl.CreateBuffer(hurray_device_queue_native_context(producer), CL_MEM_READ_WRITE,
                                 16, NULL, &code);
    assert_int_equal(code, 0);
    const uint32_t values[4] = {i, i + 1, i + 2, ~i};
    void *event = NULL;
    assert_int_equal(tcl.EnqueueWriteBuffer(hurray_device_queue_native(producer), mem, 0, 0, 16,
                                            values, 0, NULL, &event),
                     0);
    tcl.RetainMemObject(mem); /* the test's own references, to count the others */
    tcl.RetainEvent(event);
    const HurrayBufferDesc bdesc = {.byte_size = 16, .alignment = 64,
                                    .device_tag = HURRAY_DEVICE_OPENCL,
                                    .sync_mode = HURRAY_SYNC_EVENT};
    HurrayBuffer *buffer = NULL;
    assert_int_equal(hurray_buffer_wrap(mem, &bdesc, 0, event, 0, producer_release, NULL,
                                        &buffer, &error),
                     HURRAY_OK);
    HurrayBufferList *list = NULL;
    assert_int_equal(hurray_buffer_list_create(1, &list, &error), HURRAY_OK);
    assert_int_equal(hurray_buffer_list_append(list, buffer, HURRAY_ROLE_VALUES, NULL, &error),
                     HURRAY_OK);
    HurrayTensorContext *context = NULL;
    assert_int_equal(hurray_tensor_context_create(&desc, list, 0, NULL, NULL, &context, &error),
                     HURRAY_OK);
    /* The consumer: waits on the event through its own queue, reads the values. */
    uint32_t back[4] = {0};
    assert_int_equal(hurray_device_copy_to_host(consumer, context->buffers->buffers[0], 0, back,
                                                16, &error),
                     HURRAY_OK);
    assert_memory_equal(back, values, 16);
    hurray_tensor_context_release(context);
    assert_int_equal(g_released, i + 1);
    assert_int_equal(tcl.Finish(hurray_device_queue_native(producer)), 0);
    assert_int_equal(tcl.Finish(hurray_device_queue_native(consumer)), 0);
    assert_int_equal(settled(event_refs, event, 1), 1); /* the test's: the producer's went once */
    tcl.ReleaseEvent(event); /* an event holds its command's memory objects until it goes */
    assert_int_equal(settled(mem_refs, mem, 1), 1);
    tcl.ReleaseMemObject(mem);
  }
  assert_int_equal(g_released, EXCHANGES);
  hurray_device_queue_destroy(producer);
  hurray_device_queue_destroy(consumer);
}

/* ---- the consumer waits on the producer's event -------------------------------------------- */

typedef struct Reader {
  HurrayDeviceQueue *queue;
  const HurrayBuffer *buffer;
  uint32_t values[64];
  int status;
} Reader;

static void *read_buffer(void *opaque) {
  Reader *reader = opaque;
  reader->status = hurray_device_copy_to_host(reader->queue, reader->buffer, 0, reader->values,
                                              sizeof reader->values, NULL);
  return NULL;
}

/* The producer's write waits on a user event that the test completes only after the consumer
 * has started reading, from another thread. A consumer that did not wait on the write's event
 * (EVENT) or the producer's queue (STREAM) would read the old bytes (its read has nothing to
 * wait for); one that waits reads the new. */
static void a_consumer_waits_on_the_event(void **state) {
  (void)state;
  REQUIRE_RUNTIME(HURRAY_DEVICE_OPENCL);
  assert_true(test_cl_load());
  HurrayError error = {0};
  HurrayDeviceQueue *producer = NULL, *consumer = NULL;
  assert_int_equal(hurray_device_queue_create(HURRAY_DEVICE_OPENCL, 0, &producer, &error),
                   HURRAY_OK);
  assert_int_equal(hurray_device_queue_create(HURRAY_DEVICE_OPENCL, 0, &consumer, &error),
                   HURRAY_OK);
  for (uint32_t round = 0; round < 20; round++) {
    HurrayBuffer *buffer = NULL;
    assert_int_equal(hurray_device_alloc(producer, 256, HURRAY_ALLOC_ZERO, &buffer, &error),
                     HURRAY_OK); /* old bytes: zeros */
    int32_t code = 0;
    void *gate = tcl.CreateUserEvent(hurray_device_queue_native_context(producer), &code);
    assert_int_equal(code, 0);
    uint32_t fresh[64];
    for (int i = 0; i < 64; i++) fresh[i] = round * 1000 + (uint32_t)i + 1;
    void *written = NULL;
    assert_int_equal(tcl.EnqueueWriteBuffer(hurray_device_queue_native(producer), buffer->data, 0,
                                            0, sizeof fresh, fresh, 1, &gate, &written),
                     0);
    assert_int_equal(tcl.Flush(hurray_device_queue_native(producer)), 0);
    /* even rounds hand over the write's event, odd ones the producer's queue (STREAM) */
    const int stream = round % 2 == 1;
    const HurrayBufferDesc bdesc = {.byte_size = 256, .alignment = 64,
                                    .device_tag = HURRAY_DEVICE_OPENCL,
                                    .sync_mode = stream ? HURRAY_SYNC_STREAM : HURRAY_SYNC_EVENT};
    HurrayBuffer *handed = NULL; /* the producer's view with its sync handle; `buffer` owns the
                                    cl_mem */
    assert_int_equal(hurray_buffer_wrap(buffer->data, &bdesc, 0,
                                        stream ? hurray_device_queue_native(producer) : written, 0,
                                        NULL, NULL, &handed, &error),
                     HURRAY_OK);
    Reader reader = {.queue = consumer, .buffer = handed, .status = -1};
    pthread_t thread;
    assert_int_equal(pthread_create(&thread, NULL, read_buffer, &reader), 0);
    struct timespec pause = {0, 20 * 1000 * 1000};
    nanosleep(&pause, NULL); /* let the reader reach its copy first */
    assert_int_equal(tcl.SetUserEventStatus(gate, CL_COMPLETE), 0);
    assert_int_equal(pthread_join(thread, NULL), 0);
    assert_int_equal(reader.status, HURRAY_OK);
    assert_memory_equal(reader.values, fresh, sizeof fresh);
    assert_int_equal(hurray_device_wait(consumer, handed, &error), HURRAY_OK); /* done: returns */
    hurray_buffer_destroy(handed);
    tcl.ReleaseEvent(written);
    tcl.ReleaseEvent(gate);
    hurray_buffer_destroy(buffer);
  }
  hurray_device_queue_destroy(producer);
  hurray_device_queue_destroy(consumer);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(libraries_are_named),
      cmocka_unit_test(a_missing_runtime_is_unsupported_naming_its_library),
      cmocka_unit_test(devices_without_a_backend_are_unsupported),
      cmocka_unit_test(a_device_that_does_not_exist_is_edevice),
      cmocka_unit_test(opencl_round_trip),
      cmocka_unit_test(cuda_round_trip),
      cmocka_unit_test(an_application_queue_is_wrapped_and_retained),
      cmocka_unit_test(bogus_queue_handles_are_refused_not_dereferenced),
      cmocka_unit_test(opencl_tensor_context_crosses),
      cmocka_unit_test(every_cl_mem_and_event_is_released_once),
      cmocka_unit_test(a_consumer_waits_on_the_event),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
