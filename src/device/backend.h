/* backend.h -- the device backends behind the public HurrayDeviceQueue API (ADR-047). Private
 * to hurray-core: each backend (opencl.c, cuda.c) fills one HurrayBackend; runtime.c checks
 * the arguments of the public functions once and dispatches on the tag. */
#ifndef HURRAY_DEVICE_BACKEND_H
#define HURRAY_DEVICE_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dl.h" /* hurray__dl_load, HurrayLoadResult */
#include "internal.h"

struct HurrayDeviceQueue {
  const struct HurrayBackend *backend;
  void *context;      /* cl_context (retained) / CUcontext (primary: retained; else borrowed) */
  void *queue;        /* cl_command_queue (retained) / CUstream */
  uint16_t device_id; /* the device's Hurray device_id */
  bool owns_queue;    /* CUDA: the stream was created here and is destroyed with the queue */
  bool owns_context;  /* CUDA: a primary context retained here */
  int32_t device;     /* CUDA: the CUdevice of the context */
};

typedef struct HurrayBackend {
  uint8_t tag;
  const char *library;
  /* Loads the library once (thread-safe); the first result is kept. */
  int (*load)(HurrayError *error);
  /* Fill queue->context/queue/device_id (and flags), taking references of their own. */
  int (*queue_default)(uint16_t device_id, HurrayDeviceQueue *queue, HurrayError *error);
  int (*queue_wrap)(void *native_context, void *native_queue, HurrayDeviceQueue *queue,
                    HurrayError *error);
  int (*queue_for_buffer)(const HurrayBuffer *buffer, HurrayDeviceQueue *queue,
                          HurrayError *error);
  void (*queue_release)(HurrayDeviceQueue *queue);
  /* byte_size > 0; *out a READY DEVICE handle that frees the memory in its release. */
  int (*alloc)(HurrayDeviceQueue *queue, uint64_t byte_size, uint32_t flags, HurrayBuffer **out,
               HurrayError *error);
  /* Arguments checked (tag, bounds, size > 0); waits on the buffer's sync state, then copies
   * blocking, device -> host when to_host, else host -> device. */
  int (*copy)(HurrayDeviceQueue *queue, const HurrayBuffer *buffer, uint64_t offset, void *host,
              uint64_t size, bool to_host, HurrayError *error);
  int (*wait)(HurrayDeviceQueue *queue, const HurrayBuffer *buffer, HurrayError *error);
} HurrayBackend;

HURRAY_INTERNAL extern const HurrayBackend hurray__backend_opencl;
HURRAY_INTERNAL extern const HurrayBackend hurray__backend_cuda;

/* Checks a native handle the caller passed as a number (a cl_command_queue, a cl_mem, a
 * CUstream) before a runtime dereferences it, as every runtime does with no check of its own:
 * aligned to a pointer and the word at it readable by this process (asked of the kernel, so a
 * bogus address is an error, never a fault). `*first_word` is that word (for OpenCL, the ICD
 * dispatch table). HURRAY_EINVAL naming `what` and the address otherwise. A handle to memory
 * that is readable but no object of the runtime passes: the backend checks that further. */
HURRAY_INTERNAL int hurray__device_handle_check(const void *handle, const char *what,
                                                uintptr_t *first_word, HurrayError *error);

#endif /* HURRAY_DEVICE_BACKEND_H */
