/* runtime.c -- the public device-runtime API (ADR-047): argument checks done once for every
 * backend, then dispatch on the device tag to opencl.c or cuda.c, and the check of native handles
 * given as numbers. The backends load their runtime with hurray__dl_load (src/core/dl.c):
 * hurray-core links no device runtime. */
#define _GNU_SOURCE /* process_vm_readv */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "backend.h"

/* ---- native handles given as numbers --------------------------------------------------------- */

/* Copies the word at `address` through the kernel: 0 where readable, else -1 (EFAULT). One
 * process_vm_readv of our own pid; where seccomp or an old kernel refuses it, a pipe's write,
 * which fails with EFAULT on memory the process cannot read. */
static int read_word(uintptr_t address, uintptr_t *word) {
  struct iovec local = {word, sizeof *word}, remote = {(void *)address, sizeof *word};
  ssize_t n = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
  if (n == (ssize_t)sizeof *word) return 0;
  if (n < 0 && errno == EFAULT) return -1;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return -1;
  int rc = -1;
  if (write(fds[1], (const void *)address, sizeof *word) == (ssize_t)sizeof *word &&
      read(fds[0], word, sizeof *word) == (ssize_t)sizeof *word) {
    rc = 0;
  }
  close(fds[0]);
  close(fds[1]);
  return rc;
}

int hurray__device_handle_check(const void *handle, const char *what, uintptr_t *first_word,
                                HurrayError *error) {
  uintptr_t address = (uintptr_t)handle;
  if (address % sizeof(void *) != 0 || read_word(address, first_word) != 0) {
    return hurray__fail(error, HURRAY_EINVAL,
                        "%s 0x%" PRIxPTR " is not one: %s", what, address,
                        address % sizeof(void *) != 0 ? "a runtime's objects are aligned to a "
                                                        "pointer"
                                                      : "no memory of this process is there");
  }
  return HURRAY_OK;
}

static const HurrayBackend *backend_of(int tag) {
  switch (tag) {
    case HURRAY_DEVICE_OPENCL:
      return &hurray__backend_opencl;
    case HURRAY_DEVICE_CUDA:
      return &hurray__backend_cuda;
    default:
      return NULL;
  }
}

static int no_backend(int tag, HurrayError *error) {
  const char *name = hurray_device_name(tag);
  if (name != NULL) {
    return hurray__fail(error, HURRAY_EUNSUPPORTED,
                        "hurray-core has no runtime backend for %s memory (only opencl and cuda)",
                        name);
  }
  return hurray__fail(error, HURRAY_EUNSUPPORTED,
                      "hurray-core has no runtime backend for device tag 0x%02X", (unsigned)tag);
}

/* The loaded backend of `tag`, or NULL with `*status` set. */
static const HurrayBackend *loaded(int tag, int *status, HurrayError *error) {
  const HurrayBackend *backend = backend_of(tag);
  if (backend == NULL) {
    *status = no_backend(tag, error);
    return NULL;
  }
  *status = backend->load(error);
  return *status == HURRAY_OK ? backend : NULL;
}

const char *hurray_device_runtime_library(int tag) {
  const HurrayBackend *backend = backend_of(tag);
  return backend != NULL ? backend->library : NULL;
}

int hurray_device_runtime_load(int tag, HurrayError *error) {
  int status;
  loaded(tag, &status, error);
  return status;
}

/* ---- queues -------------------------------------------------------------------------------- */

static int queue_new(int tag, HurrayDeviceQueue **out, HurrayDeviceQueue **queue,
                     const HurrayBackend **backend, HurrayError *error) {
  if (out == NULL) return hurray__fail(error, HURRAY_EINVAL, "out is NULL");
  int status;
  *backend = loaded(tag, &status, error);
  if (*backend == NULL) return status;
  *queue = calloc(1, sizeof **queue);
  if (*queue == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory for a queue");
  (*queue)->backend = *backend;
  return HURRAY_OK;
}

static int queue_done(int status, HurrayDeviceQueue *queue, HurrayDeviceQueue **out) {
  if (status != HURRAY_OK) {
    free(queue);
    return status;
  }
  *out = queue;
  return HURRAY_OK;
}

int hurray_device_queue_create(int tag, uint16_t device_id, HurrayDeviceQueue **out,
                               HurrayError *error) {
  HurrayDeviceQueue *queue = NULL;
  const HurrayBackend *backend = NULL;
  int status = queue_new(tag, out, &queue, &backend, error);
  if (status != HURRAY_OK) return status;
  return queue_done(backend->queue_default(device_id, queue, error), queue, out);
}

int hurray_device_queue_wrap(int tag, void *native_context, void *native_queue,
                             HurrayDeviceQueue **out, HurrayError *error) {
  if (native_queue == NULL) {
    return hurray__fail(error, HURRAY_EINVAL, "hurray_device_queue_wrap: the queue is NULL");
  }
  HurrayDeviceQueue *queue = NULL;
  const HurrayBackend *backend = NULL;
  int status = queue_new(tag, out, &queue, &backend, error);
  if (status != HURRAY_OK) return status;
  return queue_done(backend->queue_wrap(native_context, native_queue, queue, error), queue, out);
}

int hurray_device_queue_for_buffer(const HurrayBuffer *buffer, HurrayDeviceQueue **out,
                                   HurrayError *error) {
  if (buffer == NULL) return hurray__fail(error, HURRAY_EINVAL, "buffer is NULL");
  int status = hurray__buffer_check(buffer, error);
  if (status != HURRAY_OK) return status;
  if (buffer->data == NULL) {
    return hurray__fail(error, HURRAY_EINVAL, "an empty buffer has no memory to reach");
  }
  HurrayDeviceQueue *queue = NULL;
  const HurrayBackend *backend = NULL;
  status = queue_new(buffer->desc.device_tag, out, &queue, &backend, error);
  if (status != HURRAY_OK) return status;
  return queue_done(backend->queue_for_buffer(buffer, queue, error), queue, out);
}

void hurray_device_queue_destroy(HurrayDeviceQueue *queue) {
  if (queue == NULL) return;
  queue->backend->queue_release(queue);
  free(queue);
}

int hurray_device_queue_tag(const HurrayDeviceQueue *queue) {
  return queue != NULL ? queue->backend->tag : HURRAY_DEVICE_INVALID;
}
uint16_t hurray_device_queue_device_id(const HurrayDeviceQueue *queue) {
  return queue != NULL ? queue->device_id : 0;
}
void *hurray_device_queue_native(const HurrayDeviceQueue *queue) {
  return queue != NULL ? queue->queue : NULL;
}
void *hurray_device_queue_native_context(const HurrayDeviceQueue *queue) {
  return queue != NULL ? queue->context : NULL;
}

/* ---- memory -------------------------------------------------------------------------------- */

int hurray_device_alloc(HurrayDeviceQueue *queue, uint64_t byte_size, uint32_t flags,
                        HurrayBuffer **out, HurrayError *error) {
  if (queue == NULL || out == NULL) {
    return hurray__fail(error, HURRAY_EINVAL, "hurray_device_alloc: queue or out is NULL");
  }
  if ((flags & ~HURRAY_ALLOC_ZERO) != 0) {
    return hurray__fail(error, HURRAY_EINVAL, "allocation flags 0x%" PRIX32 " are unknown",
                        flags & ~HURRAY_ALLOC_ZERO);
  }
  if (byte_size > SIZE_MAX) {
    return hurray__fail(error, HURRAY_EOVERFLOW, "%" PRIu64 " bytes do not fit in size_t",
                        byte_size);
  }
  if (byte_size == 0) {
    HurrayBufferDesc desc = {.alignment = HURRAY_MIN_ALIGNMENT,
                             .device_id = queue->device_id,
                             .device_tag = queue->backend->tag};
    return hurray_buffer_wrap(NULL, &desc, 0, NULL, 0, NULL, NULL, out, error);
  }
  return queue->backend->alloc(queue, byte_size, flags, out, error);
}

/* Everything a copy checks before the backend runs: the queue's device, the bounds. */
static int copy_check(const HurrayDeviceQueue *queue, const HurrayBuffer *buffer,
                      uint64_t offset, const void *host, uint64_t size, HurrayError *error) {
  if (queue == NULL || buffer == NULL || (host == NULL && size > 0)) {
    return hurray__fail(error, HURRAY_EINVAL, "a device copy got a NULL queue, buffer or host "
                                              "pointer");
  }
  int status = hurray__buffer_check(buffer, error);
  if (status != HURRAY_OK) return status;
  if (buffer->desc.device_tag != queue->backend->tag) {
    return hurray__fail(error, HURRAY_EDEVICE,
                        "a %s queue cannot reach memory of device tag 0x%02X",
                        hurray_device_name(queue->backend->tag),
                        (unsigned)buffer->desc.device_tag);
  }
  uint64_t end;
  if (hurray__add_u64(offset, size, &end) || end > buffer->desc.byte_size) {
    return hurray__fail(error, HURRAY_EBOUNDS,
                        "bytes [%" PRIu64 ", %" PRIu64 " + %" PRIu64
                        ") lie outside a buffer of %" PRIu64 " bytes",
                        offset, offset, size, buffer->desc.byte_size);
  }
  if (size > SIZE_MAX) {
    return hurray__fail(error, HURRAY_EOVERFLOW, "%" PRIu64 " bytes do not fit in size_t", size);
  }
  return HURRAY_OK;
}

int hurray_device_copy_to_host(HurrayDeviceQueue *queue, const HurrayBuffer *src, uint64_t offset,
                               void *dst, uint64_t size, HurrayError *error) {
  int status = copy_check(queue, src, offset, dst, size, error);
  if (status != HURRAY_OK || size == 0) return status;
  return queue->backend->copy(queue, src, offset, dst, size, true, error);
}

int hurray_device_copy_from_host(HurrayDeviceQueue *queue, HurrayBuffer *dst, uint64_t offset,
                                 const void *src, uint64_t size, HurrayError *error) {
  int status = copy_check(queue, dst, offset, src, size, error);
  if (status != HURRAY_OK) return status;
  if ((dst->flags & HURRAY_BUFFER_READ_ONLY) != 0) {
    return hurray__fail(error, HURRAY_EINVAL, "the buffer is read-only");
  }
  if (size == 0) return HURRAY_OK;
  return queue->backend->copy(queue, dst, offset, (void *)(uintptr_t)src, size, false, error);
}

int hurray_device_wait(HurrayDeviceQueue *queue, const HurrayBuffer *buffer, HurrayError *error) {
  int status = copy_check(queue, buffer, 0, NULL, 0, error);
  if (status != HURRAY_OK) return status;
  if (buffer->desc.sync_mode == HURRAY_SYNC_READY) return HURRAY_OK;
  return queue->backend->wait(queue, buffer, error);
}
