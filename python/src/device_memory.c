/* device_memory.c -- Tensor.to_device: copies between host and device memory through the
 * device runtimes of hurray-core (ADR-047), as ADR-048 decides.
 *
 * A copy keeps the tensor's descriptor -- layout, parts, children, byte offsets -- and gives it
 * new buffers on the target device: each buffer of the same size, the byte range its arrays
 * span copied (the rest zero), everything READY. The device side runs through one
 * HurrayDeviceQueue per copy: the caller's own queue when `stream` names one (a cl_command_queue
 * or a CUstream, as an integer), else, reading device memory, a queue in the context that memory
 * belongs to, and, writing it, a queue in the backend's default context of the target device.
 * The copies block (they wait on each source buffer's sync state first) and run with the GIL
 * released.
 */
#include "hurray_python.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define HOST_MAX_ALIGNMENT ((uint32_t)256)
#define HUGE_COPY_BYTES ((uint64_t)4 << 20)
#define ZERO_GAP_BYTES ((uint64_t)1 << 20)

/* The hull [lo, hi) of the bytes each buffer's arrays span, over the whole descriptor tree. */
static int collect_spans(const HurrayTensorDesc *desc, uint64_t *lo, uint64_t *hi,
                         HurrayError *error) {
  for (uint32_t i = 0; i < desc->nparts; i++) {
    uint64_t begin = 0, end = 0;
    int status = hurray_array_span(&desc->parts[i], &begin, &end, error);
    if (status != HURRAY_OK) return status;
    uint32_t b = desc->parts[i].buffer;
    if (begin == end) continue;
    if (begin < lo[b]) lo[b] = begin;
    if (end > hi[b]) hi[b] = end;
  }
  for (uint32_t i = 0; i < desc->nchildren; i++) {
    int status = collect_spans(&desc->children[i], lo, hi, error);
    if (status != HURRAY_OK) return status;
  }
  return HURRAY_OK;
}

/* The copy of one tensor, prepared with the GIL held and run without it. */
typedef struct Copy {
  const HurrayBufferList *from;
  uint8_t tag;             /* the target */
  uint16_t index;
  uintptr_t stream;        /* the caller's queue, or 0 */
  uint64_t *lo, *hi;       /* per buffer */
  HurrayBufferList *to;    /* built here */
  HurrayError error;
} Copy;

/* A queue for the device side of one buffer's copy: the caller's, the memory's or the target
 * device's default. */
static int queue_for(const Copy *copy, const HurrayBuffer *device_buffer, int tag,
                     HurrayDeviceQueue **queue, HurrayError *error) {
  if (copy->stream != 0) {
    return hurray_device_queue_wrap(tag, NULL, (void *)copy->stream, queue, error);
  }
  if (device_buffer != NULL) return hurray_device_queue_for_buffer(device_buffer, queue, error);
  return hurray_device_queue_create(tag, copy->index, queue, error);
}

static int copy_buffer(Copy *copy, const HurrayBuffer *src, int role) {
  HurrayError *error = &copy->error;
  uint32_t i = copy->to->count;
  uint64_t size = src->desc.byte_size;
  uint64_t lo = copy->lo[i] < copy->hi[i] ? copy->lo[i] : 0;
  uint64_t n = copy->lo[i] < copy->hi[i] ? copy->hi[i] - lo : 0;
  int src_cpu = src->desc.device_tag == HURRAY_DEVICE_CPU;
  int dst_cpu = copy->tag == HURRAY_DEVICE_CPU;
  HurrayBuffer *host = NULL; /* the bytes on the host: the result itself when the target is CPU */
  int status = HURRAY_OK;
  if (!src_cpu || dst_cpu) { /* else the device is written straight from the source */
    /* The source's alignment up to HOST_MAX_ALIGNMENT, so that the allocator recycles the
     * memory of an earlier copy (glibc maps fresh pages for every large block aligned to 1 KiB
     * or more, and a copy into pages never touched spends most of its time in page faults),
     * as np.empty's does; and a large buffer's pages advised huge, as NumPy advises its large
     * arrays, for the copy that does meet fresh pages. */
    uint32_t alignment = src->desc.alignment < HOST_MAX_ALIGNMENT ? src->desc.alignment
                                                                  : HOST_MAX_ALIGNMENT;
    status = hurray_buffer_alloc(size, alignment, 0, &host, error);
    if (status != HURRAY_OK) return status;
#ifdef MADV_HUGEPAGE
    if (size >= HUGE_COPY_BYTES) { /* a hint, on the whole pages inside: may be refused */
      uintptr_t first = ((uintptr_t)host->data + 4095) & ~(uintptr_t)4095;
      uintptr_t end = ((uintptr_t)host->data + (size_t)size) & ~(uintptr_t)4095;
      if (end > first) (void)madvise((void *)first, end - first, MADV_HUGEPAGE);
    }
#endif
    if (size > 0) { /* zero what is not copied, after the advice (zeroing faults pages in) */
      memset(host->data, 0, (size_t)lo);
      memset(hurray__py_buffer_at(host, lo + n), 0, (size_t)(size - lo - n));
    }
    if (n > 0 && src_cpu) {
      memcpy(hurray__py_buffer_at(host, lo), hurray__py_buffer_at(src, lo), (size_t)n);
    } else if (n > 0) {
      HurrayDeviceQueue *queue = NULL;
      status = queue_for(copy, src, src->desc.device_tag, &queue, error);
      if (status == HURRAY_OK) {
        status = hurray_device_copy_to_host(queue, src, lo, hurray__py_buffer_at(host, lo), n,
                                            error);
      }
      hurray_device_queue_destroy(queue);
    }
  }
  HurrayBuffer *result = host;
  if (status == HURRAY_OK && !dst_cpu) {
    const void *bytes = host != NULL ? (const void *)host->data : src->data;
    HurrayDeviceQueue *queue = NULL;
    status = queue_for(copy, NULL, copy->tag, &queue, error);
    if (status == HURRAY_OK && copy->stream != 0 &&
        hurray_device_queue_device_id(queue) != copy->index) {
      error->code = HURRAY_EDEVICE;
      snprintf(error->message, sizeof error->message,
               "to_device(): the stream is on %s device %u, not %u", hurray_device_name(copy->tag),
               (unsigned)hurray_device_queue_device_id(queue), (unsigned)copy->index);
      status = HURRAY_EDEVICE;
    }
    result = NULL;
    /* What is not copied is zero: a staging buffer is zero there already, so all of it goes;
     * from the source itself, the span goes and small gaps are written from zeros, large ones
     * filled by the allocation. */
    uint64_t first = host != NULL ? 0 : lo, count = host != NULL ? size : n;
    uint64_t gap = lo > size - lo - n ? lo : size - lo - n;
    void *zeros = NULL;
    if (host == NULL && gap > 0 && gap <= ZERO_GAP_BYTES) zeros = calloc(1, (size_t)gap);
    if (status == HURRAY_OK) {
      uint32_t flags = first + count < size && zeros == NULL ? HURRAY_ALLOC_ZERO : 0;
      status = hurray_device_alloc(queue, size, flags, &result, error);
    }
    if (status == HURRAY_OK && zeros != NULL) {
      status = hurray_device_copy_from_host(queue, result, 0, zeros, lo, error);
      if (status == HURRAY_OK) {
        status = hurray_device_copy_from_host(queue, result, lo + n, zeros, size - lo - n, error);
      }
    }
    free(zeros);
    if (status == HURRAY_OK && count > 0) {
      status = hurray_device_copy_from_host(queue, result, first, (const char *)bytes + first,
                                            count, error);
    }
    hurray_device_queue_destroy(queue);
    hurray_buffer_destroy(host);
    if (status != HURRAY_OK) {
      hurray_buffer_destroy(result);
      return status;
    }
  }
  if (status != HURRAY_OK) {
    hurray_buffer_destroy(result);
    return status;
  }
  return hurray_buffer_list_append(copy->to, result, role, NULL, error); /* SINK */
}

static int run_copy(Copy *copy) {
  int status = hurray_buffer_list_create(copy->from->count, &copy->to, &copy->error);
  for (uint32_t i = 0; status == HURRAY_OK && i < copy->from->count; i++) {
    status = copy_buffer(copy, copy->from->buffers[i], copy->from->roles[i]);
  }
  return status;
}

static const char *const kToDeviceNames[] = {"device", "stream", NULL};

PyObject *hurray__py_tensor_to_device(PyObject *op, PyObject *const *args, Py_ssize_t nargs,
                                      PyObject *kwnames) {
  static const HurrayPyParser parser = {"to_device", kToDeviceNames, 1, 1, 1};
  PyObject *a[2];
  if (hurray__py_parse(&parser, args, nargs, kwnames, a) < 0) return NULL;
  HurrayTensorObject *self = (HurrayTensorObject *)op;
  HurrayState *st = hurray__py_state_of(op);
  if (hurray__py_tensor_live(st, self) < 0) return NULL;
  Copy copy = {.from = self->context->buffers};
  if (hurray__py_device_arg(st, a[0], &copy.tag, &copy.index) < 0) return NULL;
  if (a[1] != NULL && a[1] != Py_None) {
    long long value = 0;
    if (hurray__py_int_in_range(st, a[1], 1, (long long)INTPTR_MAX, "stream", &value) < 0) {
      return NULL;
    }
    copy.stream = (uintptr_t)value;
  }
  /* Already there: the tensor itself (a copy would change nothing a reader can see). */
  uint32_t count = copy.from->count, here = 0;
  for (uint32_t i = 0; i < count; i++) {
    const HurrayBufferDesc *d = &copy.from->buffers[i]->desc;
    here += d->device_tag == copy.tag && d->device_id == copy.index;
  }
  if (here == count) return Py_NewRef(op);
  for (uint32_t i = 0; i < count; i++) { /* a device needs the target's runtime or its own */
    const HurrayBufferDesc *d = &copy.from->buffers[i]->desc;
    if (copy.stream != 0 && d->device_tag != HURRAY_DEVICE_CPU && copy.tag != HURRAY_DEVICE_CPU &&
        d->device_tag != copy.tag) {
      return hurray__py_raise(st, HURRAY_PY_EXC_INVALID_ARGUMENT,
                              "to_device(): one stream cannot serve both %s and %s memory; copy "
                              "to 'cpu' first",
                              hurray_device_name(d->device_tag), hurray_device_name(copy.tag));
    }
  }
  copy.lo = PyMem_Calloc(count ? count : 1, 2 * sizeof(uint64_t));
  if (copy.lo == NULL) return PyErr_NoMemory();
  copy.hi = copy.lo + count;
  for (uint32_t i = 0; i < count; i++) copy.lo[i] = UINT64_MAX;
  int status = collect_spans(self->desc, copy.lo, copy.hi, &copy.error);
  if (status == HURRAY_OK) {
    Py_BEGIN_ALLOW_THREADS;
    status = run_copy(&copy);
    Py_END_ALLOW_THREADS;
  }
  PyMem_Free(copy.lo);
  if (status != HURRAY_OK) {
    hurray_buffer_list_destroy(copy.to);
    return hurray__py_raise_status(st, status, &copy.error);
  }
  HurrayTensorContext *context = NULL;
  status = hurray_tensor_context_create(self->desc, copy.to, 0, NULL, NULL, &context, &copy.error);
  if (status != HURRAY_OK) return hurray__py_raise_status(st, status, &copy.error);
  return hurray__py_tensor_adopt(st, context);
}

const char hurray__py_tensor_to_device_doc[] =
    "to_device($self, device, /, *, stream=None)\n"
    "--\n"
    "\n"
    "A copy of the tensor in the memory of `device`, through its runtime.\n"
    "\n"
    "Parameters\n"
    "----------\n"
    "device : hurray.Device, tuple, int or str\n"
    "    Where the copy goes: 'cpu', 'opencl', 'cuda:1', ...\n"
    "stream : int, optional\n"
    "    The device-side queue to copy on, as an integer handle: a\n"
    "    cl_command_queue (pyopencl: ``queue.int_ptr``) or a CUstream. Its\n"
    "    context is the one used. Without it, device memory is read through a\n"
    "    new queue in the context it belongs to, and written into the default\n"
    "    context of the target device.\n"
    "\n"
    "Returns\n"
    "-------\n"
    "Tensor\n"
    "    The tensor itself if every buffer is on `device` already; otherwise a\n"
    "    new tensor with the same descriptor over new, writable buffers of the\n"
    "    same sizes on `device`, holding the bytes the tensor's arrays span (the\n"
    "    rest zero), sync mode 'ready'.\n"
    "\n"
    "Raises\n"
    "------\n"
    "hurray.UnsupportedError\n"
    "    The device has no runtime backend (only OpenCL and CUDA do), or its\n"
    "    runtime library (libOpenCL.so.1, libcuda.so.1) is not installed: the\n"
    "    message names it.\n"
    "hurray.DescriptorError\n"
    "    There is no such device, or `stream` is on another device.\n"
    "\n"
    "Notes\n"
    "-----\n"
    "The copy waits on each source buffer's sync state (its event or stream)\n"
    "before reading, and returns once the bytes have arrived. The GIL is\n"
    "released meanwhile.\n"
    "\n"
    "Examples\n"
    "--------\n"
    ">>> t = hurray.Tensor(bytes(8), hurray.float32, [2])\n"
    ">>> t.to_device('cpu') is t\n"
    "True\n"
    ">>> d = t.to_device('opencl')  # an OpenCL runtime: PoCL runs on a CPU\n"
    ">>> d.device\n"
    "hurray.Device(\"opencl\", 0)\n"
    ">>> d.to_device('cpu').tolist()\n"
    "[0.0, 0.0]";
