/* device_memory.c -- Tensor.to_device: copies between host and device memory through the
 * device runtimes of hurray-core (ADR-047), as ADR-048 decides.
 *
 * A copy keeps the tensor's layout, parts, children, shapes and strides, and gives it new
 * buffers on the target device, each cut to the bytes its arrays span (ADR-066): it starts at
 * the first of them, rounded down only as far as keeps every array's alignment up to 64 bytes,
 * and the byte offsets are re-based to it; everything READY. The device side runs through one
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
#define MALLOC_MAPS_BYTES ((uint64_t)32 << 20) /* glibc's largest mmap threshold (64-bit) */
#define KEPT_ALIGNMENT ((uint64_t)HURRAY_MIN_ALIGNMENT) /* the array alignment a copy keeps */

static const uint8_t kZeros[HURRAY_MIN_ALIGNMENT]; /* a leading gap's bytes, fewer than these */

/* The alignment (a power of two, up to KEPT_ALIGNMENT) of a byte offset in a buffer. */
static uint64_t offset_alignment(uint64_t offset) {
  uint64_t low = offset & (~offset + 1);
  return offset == 0 || low > KEPT_ALIGNMENT ? KEPT_ALIGNMENT : low;
}

/* Per buffer, over the whole descriptor tree: the hull [lo, hi) of the bytes its arrays span,
 * and in `align` the largest alignment (up to KEPT_ALIGNMENT) of their byte offsets. */
static int collect_spans(const HurrayTensorDesc *desc, uint64_t *lo, uint64_t *hi,
                         uint64_t *align, HurrayError *error) {
  for (uint32_t i = 0; i < desc->nparts; i++) {
    uint64_t begin = 0, end = 0;
    int status = hurray_array_span(&desc->parts[i], &begin, &end, error);
    if (status != HURRAY_OK) return status;
    uint32_t b = desc->parts[i].buffer;
    if (begin == end) continue;
    if (begin < lo[b]) lo[b] = begin;
    if (end > hi[b]) hi[b] = end;
    uint64_t a = offset_alignment(desc->parts[i].byte_offset);
    if (a > align[b]) align[b] = a;
  }
  for (uint32_t i = 0; i < desc->nchildren; i++) {
    int status = collect_spans(&desc->children[i], lo, hi, align, error);
    if (status != HURRAY_OK) return status;
  }
  return HURRAY_OK;
}

/* Re-bases every array of a descriptor made by hurray_tensor_desc_clone (one heap block we own,
 * its arrays writable) onto the copied buffers, which start at byte `first[b]` of the old ones;
 * an empty array goes to byte offset 0, as files place it. */
static int rebase_offsets(HurrayTensorDesc *desc, const uint64_t *first, HurrayError *error) {
  HurrayArray *parts = (HurrayArray *)(uintptr_t)desc->parts;
  for (uint32_t i = 0; i < desc->nparts; i++) {
    uint64_t begin = 0, end = 0;
    int status = hurray_array_span(&parts[i], &begin, &end, error);
    if (status != HURRAY_OK) return status;
    parts[i].byte_offset = begin == end ? 0 : parts[i].byte_offset - first[parts[i].buffer];
  }
  HurrayTensorDesc *children = (HurrayTensorDesc *)(uintptr_t)desc->children;
  for (uint32_t i = 0; i < desc->nchildren; i++) {
    int status = rebase_offsets(&children[i], first, error);
    if (status != HURRAY_OK) return status;
  }
  return HURRAY_OK;
}

static void release_host(HurrayBuffer *self) {
  free(self->data);
}

/* The host side of a copy, `size` bytes at `alignment`. Below MALLOC_MAPS_BYTES it is
 * aligned_alloc memory, which the allocator recycles as it does np.empty's (glibc raises its
 * mmap threshold to the size of a block freed, up to 32 MiB, so a copy repeated at one size
 * meets pages already faulted in), with a large block's pages advised huge, as NumPy advises its
 * arrays of 4 MiB and more; hurray_buffer_alloc mapped fresh huge pages from 2 MiB on (ADR-058),
 * whose faults such a repeated copy paid every time (1.4x-1.7x pyopencl's time at 4 and 16 MiB,
 * measured before it kept released mappings: ADR-101, ADR-108). From MALLOC_MAPS_BYTES on
 * malloc maps fresh pages too, and hurray_buffer_alloc's, 2 MiB-aligned and kept, are faster. */
static int host_alloc(uint64_t size, uint32_t alignment, HurrayBuffer **out, HurrayError *error) {
  if (size == 0 || size >= MALLOC_MAPS_BYTES) {
    return hurray_buffer_alloc(size, alignment, 0, out, error);
  }
  void *data = aligned_alloc(alignment, ((size_t)size + alignment - 1) & ~(size_t)(alignment - 1));
  if (data == NULL) {
    error->code = HURRAY_ENOMEM;
    snprintf(error->message, sizeof error->message, "cannot allocate %llu bytes on the host",
             (unsigned long long)size);
    return HURRAY_ENOMEM;
  }
#ifdef MADV_HUGEPAGE
  if (size >= HUGE_COPY_BYTES) { /* a hint, on the whole pages inside: may be refused */
    uintptr_t page = ((uintptr_t)data + 4095) & ~(uintptr_t)4095;
    uintptr_t end = ((uintptr_t)data + (size_t)size) & ~(uintptr_t)4095;
    if (end > page) (void)madvise((void *)page, end - page, MADV_HUGEPAGE);
  }
#endif
  HurrayBufferDesc desc = {.byte_size = size,
                           .alignment = alignment,
                           .device_tag = HURRAY_DEVICE_CPU,
                           .memory_class = HURRAY_MEM_DEVICE,
                           .sync_mode = HURRAY_SYNC_READY};
  int status = hurray_buffer_wrap(data, &desc, 0, NULL, 0, release_host, NULL, out, error);
  if (status != HURRAY_OK) free(data);
  return status;
}

/* The copy of one tensor, prepared with the GIL held and run without it. */
typedef struct Copy {
  const HurrayBufferList *from;
  uint8_t tag;             /* the target */
  uint16_t index;
  uintptr_t stream;        /* the caller's queue, or 0 */
  uint64_t *lo, *hi;       /* per buffer: the bytes the arrays span */
  uint64_t *first;         /* per buffer: the first byte kept, lo rounded down (ADR-066) */
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

/* A buffer of the copy holds bytes [first, hi) of the source's: `gap` bytes that no array
 * addresses, written as zeros (fewer than KEPT_ALIGNMENT, so that every array keeps its
 * alignment), then the `n` bytes [lo, hi) the arrays span. A buffer no array addresses is
 * empty. */
static int copy_buffer(Copy *copy, const HurrayBuffer *src, int role) {
  HurrayError *error = &copy->error;
  uint32_t i = copy->to->count;
  int spanned = copy->lo[i] < copy->hi[i];
  uint64_t lo = spanned ? copy->lo[i] : 0;
  uint64_t gap = spanned ? lo - copy->first[i] : 0;
  uint64_t n = spanned ? copy->hi[i] - lo : 0;
  uint64_t size = gap + n;
  int src_cpu = src->desc.device_tag == HURRAY_DEVICE_CPU;
  int dst_cpu = copy->tag == HURRAY_DEVICE_CPU;
  HurrayBuffer *host = NULL; /* the bytes on the host: the result itself when the target is CPU */
  int status = HURRAY_OK;
  if (!src_cpu || dst_cpu) { /* else the device is written straight from the source */
    /* The source's alignment up to HOST_MAX_ALIGNMENT, so that the allocator recycles the
     * memory of an earlier copy (glibc maps fresh pages for every large block aligned to 1 KiB
     * or more, and a copy into pages never touched spends most of its time in page faults). */
    uint32_t alignment = src->desc.alignment < HOST_MAX_ALIGNMENT ? src->desc.alignment
                                                                  : HOST_MAX_ALIGNMENT;
    status = host_alloc(size, alignment, &host, error);
    if (status != HURRAY_OK) return status;
    if (gap > 0) memset(host->data, 0, (size_t)gap);
    if (n > 0 && src_cpu) {
      memcpy(hurray__py_buffer_at(host, gap), hurray__py_buffer_at(src, lo), (size_t)n);
    } else if (n > 0) {
      HurrayDeviceQueue *queue = NULL;
      status = queue_for(copy, src, src->desc.device_tag, &queue, error);
      if (status == HURRAY_OK) {
        status = hurray_device_copy_to_host(queue, src, lo, hurray__py_buffer_at(host, gap), n,
                                            error);
      }
      hurray_device_queue_destroy(queue);
    }
  }
  HurrayBuffer *result = host;
  if (status == HURRAY_OK && !dst_cpu) {
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
    if (status == HURRAY_OK) status = hurray_device_alloc(queue, size, 0, &result, error);
    if (status == HURRAY_OK && host != NULL) { /* staged: the zeros and the bytes, at once */
      status = hurray_device_copy_from_host(queue, result, 0, host->data, size, error);
    } else if (status == HURRAY_OK) { /* straight from the source, which may not be read there */
      status = hurray_device_copy_from_host(queue, result, 0, kZeros, gap, error);
      if (status == HURRAY_OK) {
        status = hurray_device_copy_from_host(queue, result, gap, hurray__py_buffer_at(src, lo),
                                              n, error);
      }
    }
    hurray_device_queue_destroy(queue);
    hurray_buffer_destroy(host);
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
  copy.lo = PyMem_Calloc(count ? count : 1, 4 * sizeof(uint64_t));
  if (copy.lo == NULL) return PyErr_NoMemory();
  copy.hi = copy.lo + count;
  copy.first = copy.hi + count;
  uint64_t *align = copy.first + count;
  for (uint32_t i = 0; i < count; i++) copy.lo[i] = UINT64_MAX;
  HurrayTensorDesc *desc = NULL; /* the copy's: its byte offsets re-based */
  int status = collect_spans(self->desc, copy.lo, copy.hi, align, &copy.error);
  for (uint32_t i = 0; status == HURRAY_OK && i < count; i++) {
    if (copy.lo[i] < copy.hi[i]) copy.first[i] = copy.lo[i] & ~(align[i] - 1);
  }
  if (status == HURRAY_OK) status = hurray_tensor_desc_clone(self->desc, &desc, &copy.error);
  if (status == HURRAY_OK) status = rebase_offsets(desc, copy.first, &copy.error);
  if (status == HURRAY_OK) {
    Py_BEGIN_ALLOW_THREADS;
    status = run_copy(&copy);
    Py_END_ALLOW_THREADS;
  }
  PyMem_Free(copy.lo);
  HurrayTensorContext *context = NULL;
  if (status == HURRAY_OK) { /* SINK for copy.to */
    status = hurray_tensor_context_create(desc, copy.to, 0, NULL, NULL, &context, &copy.error);
  } else {
    hurray_buffer_list_destroy(copy.to);
  }
  hurray_tensor_desc_destroy(desc);
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
    "    new tensor of the same values, layout, shapes and strides over new,\n"
    "    writable buffers on `device`, sync mode 'ready'. Each buffer holds just\n"
    "    the bytes the tensor's arrays span, from the first of them (rounded\n"
    "    down as far as keeps each array's alignment up to 64 bytes; those few\n"
    "    bytes zero), so the byte offsets shrink: a tensor from ``from_numpy``\n"
    "    lands at byte offset 0 of its device buffer.\n"
    "\n"
    "Raises\n"
    "------\n"
    "hurray.UnsupportedError\n"
    "    The device has no runtime backend (only OpenCL and CUDA do), or its\n"
    "    runtime library (libOpenCL.so.1, libcuda.so.1) is not installed: the\n"
    "    message names it.\n"
    "hurray.DescriptorError\n"
    "    There is no such device, or `stream` is on another device.\n"
    "hurray.InvalidArgumentError\n"
    "    `stream` is no queue of the runtime: not aligned to a pointer, no\n"
    "    readable memory of the process, or (OpenCL) no object of a platform\n"
    "    or of another kind, as far as the runtime lets it be told. A released\n"
    "    queue cannot be told apart: passing one is undefined behaviour.\n"
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
