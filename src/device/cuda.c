/* cuda.c -- the CUDA backend (ADR-047), over the CUDA driver API of libcuda.so.1 loaded with
 * dlopen; the few driver types and constants it needs are declared here as cuda.h defines them
 * (the _v2 entry points are the ones cuda.h maps the plain names to), so building hurray-core
 * needs no CUDA toolkit.
 *
 * Contexts: a default queue (hurray_device_queue_create) lives in the device's primary context
 * -- the one the CUDA runtime, and so PyTorch and CuPy, use -- retained once per queue. Every
 * call pushes the queue's context current and pops it after, so the caller's current context
 * is left as it was. An allocated buffer's release frees the memory with its context (the
 * buffer's release_ctx) pushed; that context must outlive the buffer: a primary context is
 * retained by the buffer, a wrapped one is the application's to keep. */
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>

#include "backend.h"

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;

#define CUDA_SUCCESS 0
#define CU_STREAM_NON_BLOCKING 1u
#define CU_EVENT_DISABLE_TIMING 2u
#define CU_POINTER_ATTRIBUTE_CONTEXT 1
#define CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define CU_STREAM_LEGACY ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)

typedef struct Cuda {
  CUresult (*Init)(unsigned int);
  CUresult (*DeviceGetCount)(int *);
  CUresult (*DeviceGet)(CUdevice *, int);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*DevicePrimaryCtxRelease)(CUdevice);
  CUresult (*CtxPushCurrent)(CUcontext);
  CUresult (*CtxPopCurrent)(CUcontext *);
  CUresult (*CtxGetCurrent)(CUcontext *);
  CUresult (*CtxGetDevice)(CUdevice *);
  CUresult (*StreamCreate)(CUstream *, unsigned int);
  CUresult (*StreamDestroy)(CUstream);
  CUresult (*StreamGetCtx)(CUstream, CUcontext *);
  CUresult (*StreamSynchronize)(CUstream);
  CUresult (*StreamWaitEvent)(CUstream, CUevent, unsigned int);
  CUresult (*EventCreate)(CUevent *, unsigned int);
  CUresult (*EventRecord)(CUevent, CUstream);
  CUresult (*EventSynchronize)(CUevent);
  CUresult (*EventDestroy)(CUevent);
  CUresult (*MemAlloc)(CUdeviceptr *, size_t);
  CUresult (*MemFree)(CUdeviceptr);
  CUresult (*MemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
  CUresult (*MemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
  CUresult (*MemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
  CUresult (*PointerGetAttribute)(void *, int, CUdeviceptr);
  CUresult (*GetErrorName)(CUresult, const char **);
} Cuda;

#define SYMBOL(field, name) {name, offsetof(Cuda, field)}
static const HurrayDlSymbol kSymbols[] = {
    SYMBOL(Init, "cuInit"),
    SYMBOL(DeviceGetCount, "cuDeviceGetCount"),
    SYMBOL(DeviceGet, "cuDeviceGet"),
    SYMBOL(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
    SYMBOL(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"),
    SYMBOL(CtxPushCurrent, "cuCtxPushCurrent_v2"),
    SYMBOL(CtxPopCurrent, "cuCtxPopCurrent_v2"),
    SYMBOL(CtxGetCurrent, "cuCtxGetCurrent"),
    SYMBOL(CtxGetDevice, "cuCtxGetDevice"),
    SYMBOL(StreamCreate, "cuStreamCreate"),
    SYMBOL(StreamDestroy, "cuStreamDestroy_v2"),
    SYMBOL(StreamGetCtx, "cuStreamGetCtx"),
    SYMBOL(StreamSynchronize, "cuStreamSynchronize"),
    SYMBOL(StreamWaitEvent, "cuStreamWaitEvent"),
    SYMBOL(EventCreate, "cuEventCreate"),
    SYMBOL(EventRecord, "cuEventRecord"),
    SYMBOL(EventSynchronize, "cuEventSynchronize"),
    SYMBOL(EventDestroy, "cuEventDestroy_v2"),
    SYMBOL(MemAlloc, "cuMemAlloc_v2"),
    SYMBOL(MemFree, "cuMemFree_v2"),
    SYMBOL(MemsetD8Async, "cuMemsetD8Async"),
    SYMBOL(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"),
    SYMBOL(MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"),
    SYMBOL(PointerGetAttribute, "cuPointerGetAttribute"),
    SYMBOL(GetErrorName, "cuGetErrorName"),
};
#undef SYMBOL

static Cuda cu;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static HurrayLoadResult g_load;
static int g_device_count;

static int check(CUresult code, const char *call, int status, HurrayError *error) {
  if (code == CUDA_SUCCESS) return HURRAY_OK;
  const char *name = NULL;
  if (cu.GetErrorName(code, &name) != CUDA_SUCCESS || name == NULL) name = "a CUDA error";
  return hurray__fail(error, status, "CUDA %s failed: %s (%d)", call, name, code);
}

static void load_once(void) {
  HurrayError *error = &g_load.error;
  g_load.status = hurray__dl_load("libcuda.so.1", kSymbols, sizeof kSymbols / sizeof *kSymbols,
                                  &cu, error);
  if (g_load.status != HURRAY_OK) return;
  g_load.status = check(cu.Init(0), "cuInit", HURRAY_EUNSUPPORTED, error);
  if (g_load.status == HURRAY_OK) {
    g_load.status = check(cu.DeviceGetCount(&g_device_count), "cuDeviceGetCount",
                          HURRAY_EUNSUPPORTED, error);
  }
  if (g_load.status == HURRAY_OK && g_device_count == 0) {
    g_load.status = hurray__fail(error, HURRAY_EUNSUPPORTED,
                                 "the device runtime libcuda.so.1 reports no CUDA device");
  }
}

static int load(HurrayError *error) {
  pthread_once(&g_once, load_once);
  return hurray__load_result(&g_load, error);
}

/* Makes `context` current for one call; pop() restores the caller's. */
static int push(CUcontext context, HurrayError *error) {
  return check(cu.CtxPushCurrent(context), "cuCtxPushCurrent", HURRAY_EIO, error);
}
static void pop(void) {
  CUcontext ignored = NULL;
  cu.CtxPopCurrent(&ignored);
}

/* The queue's device_id from its current context's device. */
static int set_device(HurrayDeviceQueue *queue, HurrayError *error) {
  CUdevice device = 0;
  int status = push(queue->context, error);
  if (status != HURRAY_OK) return status;
  status = check(cu.CtxGetDevice(&device), "cuCtxGetDevice", HURRAY_EIO, error);
  pop();
  if (status == HURRAY_OK && (device < 0 || device > UINT16_MAX)) {
    status = hurray__fail(error, HURRAY_EDEVICE, "CUDA device ordinal %d", device);
  }
  if (status == HURRAY_OK) {
    queue->device = device;
    queue->device_id = (uint16_t)device;
  }
  return status;
}

/* A new stream of the queue's own, in its context. */
static int own_stream(HurrayDeviceQueue *queue, HurrayError *error) {
  int status = push(queue->context, error);
  if (status != HURRAY_OK) return status;
  CUstream stream = NULL;
  status = check(cu.StreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate",
                 HURRAY_EUNSUPPORTED, error);
  pop();
  if (status == HURRAY_OK) {
    queue->queue = stream;
    queue->owns_queue = true;
  }
  return status;
}

static int retain_primary(int ordinal, HurrayDeviceQueue *queue, HurrayError *error) {
  if (ordinal < 0 || ordinal >= g_device_count) {
    return hurray__fail(error, HURRAY_EDEVICE, "there is no CUDA device %d (there are %d)",
                        ordinal, g_device_count);
  }
  CUdevice device = 0;
  CUcontext context = NULL;
  int status = check(cu.DeviceGet(&device, ordinal), "cuDeviceGet", HURRAY_EDEVICE, error);
  if (status == HURRAY_OK) {
    status = check(cu.DevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain",
                   HURRAY_EUNSUPPORTED, error);
  }
  if (status != HURRAY_OK) return status;
  queue->context = context;
  queue->owns_context = true;
  queue->device = device;
  queue->device_id = (uint16_t)ordinal;
  return HURRAY_OK;
}

static void queue_release(HurrayDeviceQueue *queue) {
  if (queue->owns_queue && push(queue->context, NULL) == HURRAY_OK) {
    cu.StreamDestroy(queue->queue);
    pop();
  }
  if (queue->owns_context) cu.DevicePrimaryCtxRelease(queue->device);
}

static int queue_default(uint16_t device_id, HurrayDeviceQueue *queue, HurrayError *error) {
  int status = retain_primary(device_id, queue, error);
  if (status == HURRAY_OK) status = own_stream(queue, error);
  if (status != HURRAY_OK && queue->owns_context) cu.DevicePrimaryCtxRelease(queue->device);
  return status;
}

static int queue_wrap(void *native_context, void *native_queue, HurrayDeviceQueue *queue,
                      HurrayError *error) {
  CUstream stream = native_queue;
  CUcontext context = native_context;
  int status = HURRAY_OK;
  bool named = stream != NULL && stream != CU_STREAM_LEGACY && stream != CU_STREAM_PER_THREAD;
  uintptr_t word = 0;
  if (named) { /* the driver dereferences a CUstream unchecked: readable memory first */
    status = hurray__device_handle_check(stream, "the stream, a CUstream,", &word, error);
    if (status != HURRAY_OK) return status;
  }
  if (context != NULL && named) { /* the context is given: the driver's check of the stream */
    CUcontext owner = NULL;
    status = check(cu.StreamGetCtx(stream, &owner), "cuStreamGetCtx of the stream", HURRAY_EINVAL,
                   error);
  } else if (context == NULL && (stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD)) {
    status = check(cu.CtxGetCurrent(&context), "cuCtxGetCurrent", HURRAY_EIO, error);
    if (status == HURRAY_OK && context == NULL) {
      status = hurray__fail(error, HURRAY_EINVAL,
                            "a default CUDA stream needs its context: none is current");
    }
  } else if (context == NULL) {
    status = check(cu.StreamGetCtx(stream, &context), "cuStreamGetCtx", HURRAY_EINVAL, error);
  }
  if (status != HURRAY_OK) return status;
  queue->context = context; /* borrowed: the stream's owner keeps it */
  queue->queue = stream;
  return set_device(queue, error);
}

static int queue_for_buffer(const HurrayBuffer *buffer, HurrayDeviceQueue *queue,
                            HurrayError *error) {
  CUcontext context = NULL;
  CUdeviceptr pointer = (CUdeviceptr)(uintptr_t)buffer->data;
  CUresult code = cu.PointerGetAttribute(&context, CU_POINTER_ATTRIBUTE_CONTEXT, pointer);
  if (buffer->desc.sync_mode == HURRAY_SYNC_STREAM) {
    return queue_wrap(code == CUDA_SUCCESS ? context : NULL, buffer->sync_handle, queue, error);
  }
  int status;
  if (code == CUDA_SUCCESS && context != NULL) {
    queue->context = context; /* the memory's owner keeps it */
    status = set_device(queue, error);
  } else { /* stream-ordered pools report no context: the device's primary one */
    status = retain_primary(buffer->desc.device_id, queue, error);
  }
  if (status == HURRAY_OK) status = own_stream(queue, error);
  if (status != HURRAY_OK && queue->owns_context) cu.DevicePrimaryCtxRelease(queue->device);
  return status;
}

/* release_ctx of an allocated buffer: the queue's context, and the primary device + 1 when the
 * buffer holds a reference on that primary context (0 otherwise). */
typedef struct Allocation {
  CUcontext context;
  int primary_device; /* device ordinal + 1, or 0 */
} Allocation;

static void release_mem(HurrayBuffer *self) {
  Allocation *allocation = self->release_ctx;
  if (push(allocation->context, NULL) == HURRAY_OK) {
    cu.MemFree((CUdeviceptr)(uintptr_t)self->data);
    pop();
  }
  if (allocation->primary_device > 0) cu.DevicePrimaryCtxRelease(allocation->primary_device - 1);
  free(allocation);
}

static int alloc(HurrayDeviceQueue *queue, uint64_t byte_size, uint32_t flags,
                 HurrayBuffer **out, HurrayError *error) {
  Allocation *allocation = calloc(1, sizeof *allocation);
  if (allocation == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  allocation->context = queue->context;
  int status = push(queue->context, error);
  if (status != HURRAY_OK) {
    free(allocation);
    return status;
  }
  CUdeviceptr pointer = 0;
  status = check(cu.MemAlloc(&pointer, (size_t)byte_size), "cuMemAlloc", HURRAY_ENOMEM, error);
  if (status == HURRAY_OK && (flags & HURRAY_ALLOC_ZERO) != 0) {
    status = check(cu.MemsetD8Async(pointer, 0, (size_t)byte_size, queue->queue),
                   "cuMemsetD8Async", HURRAY_EIO, error);
    if (status == HURRAY_OK) {
      status = check(cu.StreamSynchronize(queue->queue), "cuStreamSynchronize", HURRAY_EIO, error);
    }
  }
  if (status != HURRAY_OK && pointer != 0) cu.MemFree(pointer);
  pop();
  if (status != HURRAY_OK) {
    free(allocation);
    return status;
  }
  if (queue->owns_context) {
    CUcontext again = NULL;
    cu.DevicePrimaryCtxRetain(&again, queue->device); /* the buffer's own reference */
    allocation->primary_device = queue->device + 1;
  }
  HurrayBufferDesc desc = {.byte_size = byte_size,
                           .alignment = 256, /* cuMemAlloc: at least 256 bytes */
                           .device_id = queue->device_id,
                           .device_tag = HURRAY_DEVICE_CUDA};
  HurrayBuffer probe = {.data = (void *)(uintptr_t)pointer, .desc = desc,
                        .release = release_mem, .release_ctx = allocation};
  status = hurray_buffer_wrap(probe.data, &desc, 0, NULL, 0, release_mem, allocation, out, error);
  if (status != HURRAY_OK) release_mem(&probe);
  return status;
}

/* Orders the queue's stream after the buffer's sync state (with its context current). */
static int stream_wait(HurrayDeviceQueue *queue, const HurrayBuffer *buffer, HurrayError *error) {
  switch (buffer->desc.sync_mode) {
    case HURRAY_SYNC_READY:
      return HURRAY_OK;
    case HURRAY_SYNC_EVENT:
      return check(cu.StreamWaitEvent(queue->queue, (CUevent)buffer->sync_handle, 0),
                   "cuStreamWaitEvent", HURRAY_EIO, error);
    case HURRAY_SYNC_STREAM: {
      CUstream producer = (CUstream)buffer->sync_handle;
      if (producer == queue->queue) return HURRAY_OK;
      /* cuEventRecord needs the event and the stream in one context: the event is made with
       * the producer stream's context current (a default stream, 0x1 or 0x2, is the current
       * context's: the queue's); cuStreamWaitEvent takes an event of any context. */
      CUcontext context = queue->context;
      int status = HURRAY_OK;
      if (producer != CU_STREAM_LEGACY && producer != CU_STREAM_PER_THREAD) {
        status = check(cu.StreamGetCtx(producer, &context), "cuStreamGetCtx", HURRAY_EIO, error);
      }
      if (status == HURRAY_OK) status = push(context, error);
      if (status != HURRAY_OK) return status;
      CUevent event = NULL;
      status = check(cu.EventCreate(&event, CU_EVENT_DISABLE_TIMING), "cuEventCreate", HURRAY_EIO,
                     error);
      if (status == HURRAY_OK) {
        status = check(cu.EventRecord(event, producer), "cuEventRecord", HURRAY_EIO, error);
      }
      pop();
      if (status == HURRAY_OK) {
        status = check(cu.StreamWaitEvent(queue->queue, event, 0), "cuStreamWaitEvent",
                       HURRAY_EIO, error);
      }
      if (event != NULL) cu.EventDestroy(event); /* destroyed after its work: allowed */
      return status;
    }
    default:
      return hurray__fail(error, HURRAY_EUNSUPPORTED,
                          "hurray-core does not wait on CUDA external semaphores (sync mode "
                          "timeline)");
  }
}

static int copy(HurrayDeviceQueue *queue, const HurrayBuffer *buffer, uint64_t offset, void *host,
                uint64_t size, bool to_host, HurrayError *error) {
  int status = push(queue->context, error);
  if (status != HURRAY_OK) return status;
  status = stream_wait(queue, buffer, error);
  CUdeviceptr pointer = (CUdeviceptr)(uintptr_t)buffer->data + offset;
  CUstream stream = queue->queue;
  if (status == HURRAY_OK) {
    status = to_host ? check(cu.MemcpyDtoHAsync(host, pointer, (size_t)size, stream),
                             "cuMemcpyDtoHAsync", HURRAY_EIO, error)
                     : check(cu.MemcpyHtoDAsync(pointer, host, (size_t)size, stream),
                             "cuMemcpyHtoDAsync", HURRAY_EIO, error);
  }
  if (status == HURRAY_OK) {
    status = check(cu.StreamSynchronize(stream), "cuStreamSynchronize", HURRAY_EIO, error);
  }
  pop();
  return status;
}

static int wait(HurrayDeviceQueue *queue, const HurrayBuffer *buffer, HurrayError *error) {
  int status = push(queue->context, error);
  if (status != HURRAY_OK) return status;
  if (buffer->desc.sync_mode == HURRAY_SYNC_EVENT) {
    status = check(cu.EventSynchronize((CUevent)buffer->sync_handle), "cuEventSynchronize",
                   HURRAY_EIO, error);
  } else if (buffer->desc.sync_mode == HURRAY_SYNC_STREAM) {
    status = check(cu.StreamSynchronize((CUstream)buffer->sync_handle), "cuStreamSynchronize",
                   HURRAY_EIO, error);
  } else {
    status = stream_wait(queue, buffer, error); /* TIMELINE: unsupported */
  }
  pop();
  return status;
}

const HurrayBackend hurray__backend_cuda = {
    .tag = HURRAY_DEVICE_CUDA,
    .library = "libcuda.so.1",
    .load = load,
    .queue_default = queue_default,
    .queue_wrap = queue_wrap,
    .queue_for_buffer = queue_for_buffer,
    .queue_release = queue_release,
    .alloc = alloc,
    .copy = copy,
    .wait = wait,
};
