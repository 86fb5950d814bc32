/* opencl.c -- the OpenCL backend (ADR-047), over libOpenCL.so.1 (the ICD loader) loaded with
 * dlopen. The few OpenCL types and constants it needs are declared here, as the OpenCL 1.2
 * headers define them, so that building hurray-core needs no OpenCL headers either.
 *
 * Devices are numbered as buffer-protocol.md 2.6.9 says: clGetDeviceIDs(CL_DEVICE_TYPE_ALL)
 * order within clGetPlatformIDs order, counted across platforms; the list is read once, when
 * the library is loaded. The default context of a device (hurray_device_queue_create) is made
 * on first use and kept for the life of the process. A cl_mem holds its context itself
 * (OpenCL releases a context only after its memory objects), so an allocated buffer's release
 * is one clReleaseMemObject. */
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "backend.h"

typedef int32_t cl_int;
typedef uint32_t cl_uint;
typedef uint64_t cl_ulong;
typedef cl_ulong cl_bitfield;
typedef cl_uint cl_bool;
typedef struct cl_platform_id_ *cl_platform_id;
typedef struct cl_device_id_ *cl_device_id;
typedef struct cl_context_ *cl_context;
typedef struct cl_command_queue_ *cl_command_queue;
typedef struct cl_mem_ *cl_mem;
typedef struct cl_event_ *cl_event;
typedef intptr_t cl_context_properties;

#define CL_SUCCESS 0
#define CL_TRUE 1u
#define CL_DEVICE_TYPE_ALL 0xFFFFFFFFu
#define CL_DEVICE_MEM_BASE_ADDR_ALIGN 0x1019u
#define CL_CONTEXT_DEVICES 0x1081u
#define CL_CONTEXT_NUM_DEVICES 0x1083u
#define CL_QUEUE_CONTEXT 0x1090u
#define CL_QUEUE_DEVICE 0x1091u
#define CL_MEM_READ_WRITE 1u
#define CL_MEM_CONTEXT 0x1106u
#define CL_PLATFORM_NOT_FOUND_KHR (-1001)

#define MAX_DEVICES 256

typedef struct OpenCL {
  cl_int (*GetPlatformIDs)(cl_uint, cl_platform_id *, cl_uint *);
  cl_int (*GetDeviceIDs)(cl_platform_id, cl_bitfield, cl_uint, cl_device_id *, cl_uint *);
  cl_int (*GetDeviceInfo)(cl_device_id, cl_uint, size_t, void *, size_t *);
  cl_context (*CreateContext)(const cl_context_properties *, cl_uint, const cl_device_id *,
                              void (*)(const char *, const void *, size_t, void *), void *,
                              cl_int *);
  cl_int (*RetainContext)(cl_context);
  cl_int (*ReleaseContext)(cl_context);
  cl_int (*GetContextInfo)(cl_context, cl_uint, size_t, void *, size_t *);
  cl_command_queue (*CreateCommandQueue)(cl_context, cl_device_id, cl_bitfield, cl_int *);
  cl_int (*RetainCommandQueue)(cl_command_queue);
  cl_int (*ReleaseCommandQueue)(cl_command_queue);
  cl_int (*GetCommandQueueInfo)(cl_command_queue, cl_uint, size_t, void *, size_t *);
  cl_int (*Finish)(cl_command_queue);
  cl_mem (*CreateBuffer)(cl_context, cl_bitfield, size_t, void *, cl_int *);
  cl_int (*ReleaseMemObject)(cl_mem);
  cl_int (*GetMemObjectInfo)(cl_mem, cl_uint, size_t, void *, size_t *);
  cl_int (*EnqueueReadBuffer)(cl_command_queue, cl_mem, cl_bool, size_t, size_t, void *, cl_uint,
                              const cl_event *, cl_event *);
  cl_int (*EnqueueWriteBuffer)(cl_command_queue, cl_mem, cl_bool, size_t, size_t, const void *,
                               cl_uint, const cl_event *, cl_event *);
  cl_int (*EnqueueFillBuffer)(cl_command_queue, cl_mem, const void *, size_t, size_t, size_t,
                              cl_uint, const cl_event *, cl_event *);
  cl_int (*WaitForEvents)(cl_uint, const cl_event *);
  cl_int (*ReleaseEvent)(cl_event);
} OpenCL;

#define SYMBOL(name) {"cl" #name, offsetof(OpenCL, name)}
static const HurrayDlSymbol kSymbols[] = {
    SYMBOL(GetPlatformIDs),     SYMBOL(GetDeviceIDs),        SYMBOL(GetDeviceInfo),
    SYMBOL(CreateContext),      SYMBOL(RetainContext),       SYMBOL(ReleaseContext),
    SYMBOL(GetContextInfo),     SYMBOL(CreateCommandQueue),  SYMBOL(RetainCommandQueue),
    SYMBOL(ReleaseCommandQueue), SYMBOL(GetCommandQueueInfo), SYMBOL(Finish),
    SYMBOL(CreateBuffer),       SYMBOL(ReleaseMemObject),    SYMBOL(GetMemObjectInfo),
    SYMBOL(EnqueueReadBuffer),  SYMBOL(EnqueueWriteBuffer),  SYMBOL(EnqueueFillBuffer),
    SYMBOL(WaitForEvents),      SYMBOL(ReleaseEvent),
};
#undef SYMBOL

static OpenCL cl;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static HurrayLoadResult g_load;
static cl_device_id g_devices[MAX_DEVICES];
static cl_uint g_device_count;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static cl_context g_contexts[MAX_DEVICES]; /* default contexts, made on first use (g_lock) */
/* The ICD dispatch table of each platform: the first word of every object of that platform
 * (the ICD loader's convention); g_icd where every platform with devices follows it. */
static uintptr_t g_dispatch[16];
static cl_uint g_ndispatch;
static bool g_icd;

static const char *error_name(cl_int code) {
  switch (code) {
    case -1: return "CL_DEVICE_NOT_FOUND";
    case -2: return "CL_DEVICE_NOT_AVAILABLE";
    case -4: return "CL_MEM_OBJECT_ALLOCATION_FAILURE";
    case -5: return "CL_OUT_OF_RESOURCES";
    case -6: return "CL_OUT_OF_HOST_MEMORY";
    case -14: return "CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST";
    case -30: return "CL_INVALID_VALUE";
    case -33: return "CL_INVALID_DEVICE";
    case -34: return "CL_INVALID_CONTEXT";
    case -36: return "CL_INVALID_COMMAND_QUEUE";
    case -38: return "CL_INVALID_MEM_OBJECT";
    case -57: return "CL_INVALID_EVENT_WAIT_LIST";
    case -58: return "CL_INVALID_EVENT";
    case -61: return "CL_INVALID_BUFFER_SIZE";
    case CL_PLATFORM_NOT_FOUND_KHR: return "CL_PLATFORM_NOT_FOUND_KHR";
    default: return "an OpenCL error";
  }
}

/* HURRAY_OK, or the status `status` naming the call and the runtime's error. */
static int check(cl_int code, const char *call, int status, HurrayError *error) {
  if (code == CL_SUCCESS) return HURRAY_OK;
  return hurray__fail(error, status, "OpenCL %s failed: %s (%" PRId32 ")", call,
                      error_name(code), code);
}

static void load_once(void) {
  HurrayError *error = &g_load.error;
  g_load.status = hurray__dl_load("libOpenCL.so.1", kSymbols, sizeof kSymbols / sizeof *kSymbols,
                                  &cl, error);
  if (g_load.status != HURRAY_OK) return;
  cl_platform_id platforms[16];
  cl_uint nplatforms = 0;
  cl_int code = cl.GetPlatformIDs(16, platforms, &nplatforms);
  if (code != CL_SUCCESS || nplatforms == 0) {
    g_load.status = hurray__fail(error, HURRAY_EUNSUPPORTED,
                                 "the device runtime libOpenCL.so.1 has no OpenCL platform (%s)",
                                 error_name(code != CL_SUCCESS ? code : CL_PLATFORM_NOT_FOUND_KHR));
    return;
  }
  if (nplatforms > 16) nplatforms = 16;
  g_icd = true;
  for (cl_uint p = 0; p < nplatforms && g_device_count < MAX_DEVICES; p++) {
    cl_uint n = 0;
    if (cl.GetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, MAX_DEVICES - g_device_count,
                        g_devices + g_device_count, &n) != CL_SUCCESS) {
      continue; /* a platform without devices */
    }
    uintptr_t platform_word = 0, device_word = 0;
    if (n == 0 || hurray__device_handle_check(platforms[p], "", &platform_word, NULL) != 0 ||
        hurray__device_handle_check(g_devices[g_device_count], "", &device_word, NULL) != 0 ||
        platform_word != device_word) {
      g_icd = false; /* not the ICD convention: handles are checked by the runtime alone */
    }
    g_dispatch[g_ndispatch++] = platform_word;
    g_device_count += n < MAX_DEVICES - g_device_count ? n : MAX_DEVICES - g_device_count;
  }
  if (g_device_count == 0) {
    g_load.status = hurray__fail(error, HURRAY_EUNSUPPORTED,
                                 "the device runtime libOpenCL.so.1 reports no OpenCL device");
  }
}

static int load(HurrayError *error) {
  pthread_once(&g_once, load_once);
  return hurray__load_result(&g_load, error);
}

/* The Hurray device_id of a cl_device_id; HURRAY_EDEVICE for one not in the list. */
static int device_index(cl_device_id device, uint16_t *index, HurrayError *error) {
  for (cl_uint i = 0; i < g_device_count; i++) {
    if (g_devices[i] == device) {
      *index = (uint16_t)i;
      return HURRAY_OK;
    }
  }
  return hurray__fail(error, HURRAY_EDEVICE, "the OpenCL device is not one of the %" PRIu32
                                             " devices of the platforms",
                      (uint32_t)g_device_count);
}

/* A new in-order queue on `device` in `context`, both retained by `queue`. */
static int queue_make(cl_context context, cl_device_id device, HurrayDeviceQueue *queue,
                      HurrayError *error) {
  cl_int code = CL_SUCCESS;
  cl_command_queue native = cl.CreateCommandQueue(context, device, 0, &code);
  int status = check(code, "clCreateCommandQueue", HURRAY_EUNSUPPORTED, error);
  if (status != HURRAY_OK) return status;
  status = device_index(device, &queue->device_id, error);
  if (status != HURRAY_OK) {
    cl.ReleaseCommandQueue(native);
    return status;
  }
  cl.RetainContext(context);
  queue->context = context;
  queue->queue = native;
  return HURRAY_OK;
}

static int queue_default(uint16_t device_id, HurrayDeviceQueue *queue, HurrayError *error) {
  if (device_id >= g_device_count) {
    return hurray__fail(error, HURRAY_EDEVICE,
                        "there is no OpenCL device %u (the platforms have %" PRIu32 ")",
                        (unsigned)device_id, (uint32_t)g_device_count);
  }
  cl_device_id device = g_devices[device_id];
  pthread_mutex_lock(&g_lock);
  cl_int code = CL_SUCCESS;
  if (g_contexts[device_id] == NULL) {
    g_contexts[device_id] = cl.CreateContext(NULL, 1, &device, NULL, NULL, &code);
  }
  cl_context context = g_contexts[device_id];
  pthread_mutex_unlock(&g_lock);
  int status = check(code, "clCreateContext", HURRAY_EUNSUPPORTED, error);
  if (status != HURRAY_OK) return status;
  return queue_make(context, device, queue, error);
}

/* Whether `handle`, given as a number, may be passed to the runtime, which dereferences it
 * unchecked (the ICD loader reads its dispatch table first): readable, aligned memory whose
 * first word is the dispatch table of one of the platforms. A released object, or another
 * kind of object of the same platform, passes this and is left to the runtime's own check
 * (clGetCommandQueueInfo, clGetMemObjectInfo): what no runtime lets a caller validate. */
static int object_check(void *handle, const char *what, HurrayError *error) {
  uintptr_t word = 0;
  int status = hurray__device_handle_check(handle, what, &word, error);
  if (status != HURRAY_OK || !g_icd) return status;
  for (cl_uint p = 0; p < g_ndispatch; p++) {
    if (g_dispatch[p] == word) return HURRAY_OK;
  }
  return hurray__fail(error, HURRAY_EINVAL,
                      "%s 0x%" PRIxPTR " is not one: the memory there is no object of an "
                      "OpenCL platform of this process (its first word is no platform's ICD "
                      "dispatch table)",
                      what, (uintptr_t)handle);
}

static int queue_wrap(void *native_context, void *native_queue, HurrayDeviceQueue *queue,
                      HurrayError *error) {
  cl_command_queue native = native_queue;
  cl_context context = NULL;
  cl_device_id device = NULL;
  int status = object_check(native, "the stream, a cl_command_queue,", error);
  if (status != HURRAY_OK) return status;
  status = check(cl.GetCommandQueueInfo(native, CL_QUEUE_CONTEXT, sizeof context, &context,
                                        NULL),
                 "clGetCommandQueueInfo(CL_QUEUE_CONTEXT) of the stream", HURRAY_EINVAL, error);
  if (status == HURRAY_OK) {
    status = check(cl.GetCommandQueueInfo(native, CL_QUEUE_DEVICE, sizeof device, &device, NULL),
                   "clGetCommandQueueInfo(CL_QUEUE_DEVICE)", HURRAY_EINVAL, error);
  }
  if (status == HURRAY_OK && native_context != NULL && native_context != (void *)context) {
    status = hurray__fail(error, HURRAY_EINVAL,
                          "the cl_command_queue belongs to another cl_context than the one "
                          "given");
  }
  if (status == HURRAY_OK && device_index(device, &queue->device_id, NULL) != HURRAY_OK) {
    /* PoCL answers for any object of its own, reading another kind's fields as a queue's */
    status = hurray__fail(error, HURRAY_EINVAL,
                          "the stream, a cl_command_queue, 0x%" PRIxPTR " is not one: the "
                          "runtime gives it a device that is none of the %" PRIu32 " devices of "
                          "the platforms (another kind of OpenCL object?)",
                          (uintptr_t)native, (uint32_t)g_device_count);
  }
  if (status != HURRAY_OK) return status;
  cl.RetainContext(context);
  cl.RetainCommandQueue(native);
  queue->context = context;
  queue->queue = native;
  return HURRAY_OK;
}

static int queue_for_buffer(const HurrayBuffer *buffer, HurrayDeviceQueue *queue,
                            HurrayError *error) {
  if (buffer->desc.sync_mode == HURRAY_SYNC_STREAM) {
    return queue_wrap(NULL, buffer->sync_handle, queue, error);
  }
  cl_context context = NULL;
  int status = object_check(buffer->data, "the buffer's cl_mem", error);
  if (status != HURRAY_OK) return status;
  status = check(cl.GetMemObjectInfo((cl_mem)buffer->data, CL_MEM_CONTEXT, sizeof context,
                                     &context, NULL),
                 "clGetMemObjectInfo(CL_MEM_CONTEXT)", HURRAY_EINVAL, error);
  cl_uint count = 0;
  if (status == HURRAY_OK) {
    status = check(cl.GetContextInfo(context, CL_CONTEXT_NUM_DEVICES, sizeof count, &count, NULL),
                   "clGetContextInfo(CL_CONTEXT_NUM_DEVICES)", HURRAY_EINVAL, error);
  }
  if (status != HURRAY_OK) return status;
  cl_device_id devices[MAX_DEVICES];
  if (count == 0 || count > MAX_DEVICES) {
    return hurray__fail(error, HURRAY_EUNSUPPORTED, "a cl_context of %" PRIu32 " devices",
                        (uint32_t)count);
  }
  status = check(cl.GetContextInfo(context, CL_CONTEXT_DEVICES, count * sizeof *devices, devices,
                                   NULL),
                 "clGetContextInfo(CL_CONTEXT_DEVICES)", HURRAY_EINVAL, error);
  if (status != HURRAY_OK) return status;
  cl_device_id device = devices[0]; /* the buffer's own device when the context has it */
  uint16_t wanted = buffer->desc.device_id;
  for (cl_uint i = 0; i < count; i++) {
    if (wanted < g_device_count && devices[i] == g_devices[wanted]) device = devices[i];
  }
  return queue_make(context, device, queue, error);
}

static void queue_release(HurrayDeviceQueue *queue) {
  cl.ReleaseCommandQueue(queue->queue);
  cl.ReleaseContext(queue->context);
}

static void release_mem(HurrayBuffer *self) {
  cl.ReleaseMemObject((cl_mem)self->data);
}

static int alloc(HurrayDeviceQueue *queue, uint64_t byte_size, uint32_t flags,
                 HurrayBuffer **out, HurrayError *error) {
  cl_uint align_bits = 0;
  cl_device_id device = NULL;
  int status = check(cl.GetCommandQueueInfo(queue->queue, CL_QUEUE_DEVICE, sizeof device,
                                            &device, NULL),
                     "clGetCommandQueueInfo(CL_QUEUE_DEVICE)", HURRAY_EINVAL, error);
  if (status == HURRAY_OK) {
    status = check(cl.GetDeviceInfo(device, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof align_bits,
                                    &align_bits, NULL),
                   "clGetDeviceInfo(CL_DEVICE_MEM_BASE_ADDR_ALIGN)", HURRAY_EUNSUPPORTED, error);
  }
  if (status != HURRAY_OK) return status;
  uint32_t alignment = HURRAY_MIN_ALIGNMENT; /* the largest power of two the device promises */
  while (alignment < HURRAY_MAX_ALIGNMENT && (uint64_t)alignment * 2 * 8 <= align_bits &&
         align_bits % (alignment * 2 * 8) == 0) {
    alignment *= 2;
  }
  cl_int code = CL_SUCCESS;
  cl_mem mem = cl.CreateBuffer(queue->context, CL_MEM_READ_WRITE, (size_t)byte_size, NULL, &code);
  status = check(code, "clCreateBuffer", HURRAY_ENOMEM, error);
  if (status != HURRAY_OK) return status;
  if ((flags & HURRAY_ALLOC_ZERO) != 0) {
    const uint8_t zero = 0;
    cl_event done = NULL;
    status = check(cl.EnqueueFillBuffer(queue->queue, mem, &zero, 1, 0, (size_t)byte_size, 0, NULL,
                                        &done),
                   "clEnqueueFillBuffer", HURRAY_EIO, error);
    if (status == HURRAY_OK) {
      status = check(cl.WaitForEvents(1, &done), "clWaitForEvents", HURRAY_EIO, error);
    }
    if (done != NULL) cl.ReleaseEvent(done);
  }
  HurrayBufferDesc desc = {.byte_size = byte_size,
                           .alignment = alignment,
                           .device_id = queue->device_id,
                           .device_tag = HURRAY_DEVICE_OPENCL};
  if (status == HURRAY_OK) {
    status = hurray_buffer_wrap(mem, &desc, 0, NULL, 0, release_mem, NULL, out, error);
  }
  if (status != HURRAY_OK) cl.ReleaseMemObject(mem);
  return status;
}

/* The wait list of a buffer's sync state for a command on `queue`: the EVENT itself; for a
 * STREAM other than `queue`, that queue finished first. */
static int wait_list(HurrayDeviceQueue *queue, const HurrayBuffer *buffer, cl_event *event,
                     cl_uint *count, HurrayError *error) {
  *count = 0;
  switch (buffer->desc.sync_mode) {
    case HURRAY_SYNC_READY:
      return HURRAY_OK;
    case HURRAY_SYNC_EVENT:
      *event = (cl_event)buffer->sync_handle;
      *count = 1;
      return HURRAY_OK;
    case HURRAY_SYNC_STREAM:
      if (buffer->sync_handle == queue->queue) return HURRAY_OK; /* in order already */
      return check(cl.Finish((cl_command_queue)buffer->sync_handle), "clFinish", HURRAY_EIO,
                   error);
    default:
      return hurray__fail(error, HURRAY_EUNSUPPORTED,
                          "OpenCL has no timeline primitive (sync mode timeline)");
  }
}

static int copy(HurrayDeviceQueue *queue, const HurrayBuffer *buffer, uint64_t offset, void *host,
                uint64_t size, bool to_host, HurrayError *error) {
  cl_event event = NULL;
  cl_uint count = 0;
  int status = wait_list(queue, buffer, &event, &count, error);
  if (status != HURRAY_OK) return status;
  cl_mem mem = (cl_mem)buffer->data;
  if (to_host) {
    return check(cl.EnqueueReadBuffer(queue->queue, mem, CL_TRUE, (size_t)offset, (size_t)size,
                                      host, count, count ? &event : NULL, NULL),
                 "clEnqueueReadBuffer", HURRAY_EIO, error);
  }
  return check(cl.EnqueueWriteBuffer(queue->queue, mem, CL_TRUE, (size_t)offset, (size_t)size,
                                     host, count, count ? &event : NULL, NULL),
               "clEnqueueWriteBuffer", HURRAY_EIO, error);
}

static int wait(HurrayDeviceQueue *queue, const HurrayBuffer *buffer, HurrayError *error) {
  if (buffer->desc.sync_mode == HURRAY_SYNC_STREAM) { /* the host waits for the whole queue */
    return check(cl.Finish((cl_command_queue)buffer->sync_handle), "clFinish", HURRAY_EIO, error);
  }
  cl_event event = NULL;
  cl_uint count = 0;
  int status = wait_list(queue, buffer, &event, &count, error);
  if (status != HURRAY_OK || count == 0) return status;
  return check(cl.WaitForEvents(1, &event), "clWaitForEvents", HURRAY_EIO, error);
}

const HurrayBackend hurray__backend_opencl = {
    .tag = HURRAY_DEVICE_OPENCL,
    .library = "libOpenCL.so.1",
    .load = load,
    .queue_default = queue_default,
    .queue_wrap = queue_wrap,
    .queue_for_buffer = queue_for_buffer,
    .queue_release = queue_release,
    .alloc = alloc,
    .copy = copy,
    .wait = wait,
};
