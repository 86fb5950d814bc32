/* peer.c -- a second Hurray-aware CPython extension, for the tests of the native interchange
 * protocol (tests/python/test_native_peer.py; ADR-023, ADR-030, ADR-033, ADR-034).
 *
 * It is built apart from hurray-python, by a pytest fixture (tests/python/conftest.py), against
 * nothing but the public header include/hurray/hurray.h, with a static copy of hurray-core of
 * its own (every source of src/core linked in, every symbol but PyInit_* kept local). Two
 * copies of the library in one process, each releasing what it made with its own code, is
 * exactly what the capsule's HurrayTensorContext is designed for.
 *
 * PEER_ABI_VERSION (default HURRAY_C_ABI_VERSION) is the C ABI version the peer stamps into the
 * contexts it produces and the one it accepts in the contexts it consumes: built with
 * -DPEER_ABI_VERSION=5 it stands for a build of a future hurray-ffi. PEER_MODULE names the
 * module (peer, peer_v5), so both builds can be loaded together.
 *
 *   make(kind="dense", *, device_tag=0, memory_class=0, sync_mode=0, sync_handle=0,
 *        sync_value=0, device_id=0, peer_device_id=0, readonly=False, context_flags=None,
 *        protect=False, device_memory=False) -> Producer
 *       Producer.__hurray__(stream=None) returns a fresh "hurray_tensor" capsule per call: new
 *       memory for every buffer (filled with known bytes, whatever the device tag says: no
 *       device is touched), each with a release callback that frees it and counts, and the
 *       Producer itself as the context's owner, with a counting owner release. `readonly`
 *       marks every buffer HURRAY_BUFFER_READ_ONLY; `context_flags`, when given, is written
 *       over the context's flags after it is built (what a careless producer sends);
 *       `protect` maps each buffer's memory PROT_READ, so that a write to it faults;
 *       `device_memory` makes each buffer real memory of the device, allocated and filled
 *       through this copy's device backend (ADR-047), READY.
 *   consume(obj) -> Received
 *       the whole consumer protocol, in C: obj.__hurray__(), the name, the pointer, the ABI
 *       version (through hurray_tensor_context_abi_version, first), the check, the rename.
 *       Received.summary describes what arrived (descriptor, buffers, the bytes of CPU
 *       buffers); the context is released when the Received is, or by Received.release().
 *   released() -> dict
 *       how often each release of this copy ran, over the life of the process.
 *   run_on_thread(function, argument)
 *       calls the C function `void function(void *argument)` (both addresses) on a new native
 *       thread -- one Python never saw: no thread state, no GIL -- and waits for it with the
 *       GIL released, as a C consumer that releases what it holds on a thread of its own.
 *       A context's release and a DLPack deleter both take one pointer and return nothing.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "hurray/hurray.h"

#ifndef PEER_ABI_VERSION
#define PEER_ABI_VERSION HURRAY_C_ABI_VERSION
#endif
#ifndef PEER_MODULE
#define PEER_MODULE peer
#endif

#define PEER_STR_(x) #x
#define PEER_STR(x) PEER_STR_(x)
#define PEER_CAT_(a, b) a##b
#define PEER_CAT(a, b) PEER_CAT_(a, b)

#if PY_VERSION_HEX >= 0x030D0000
#define PEER_FINALIZING() Py_IsFinalizing()
#else
#define PEER_FINALIZING() _Py_IsFinalizing()
#endif

#define CAPSULE_NAME "hurray_tensor"
#define CAPSULE_USED_NAME "used_hurray_tensor"

/* ============================================================================================
 * Release counters: process-wide, as the C callbacks that bump them are
 * ============================================================================================ */

static atomic_ullong g_contexts_made, g_buffers_made, g_buffers_released, g_owners_released,
    g_capsules_released;

/* Frees the memory of one buffer this peer made: runs once per handle, on any thread. */
static void buffer_release(HurrayBuffer *buffer) {
  free(buffer->release_ctx);
  atomic_fetch_add(&g_buffers_released, 1);
}

/* Drops the Producer a context keeps alive: takes the GIL itself, touches no Python once the
 * interpreter is finalising, and keeps any exception in flight. */
static void owner_release(void *owner) {
  atomic_fetch_add(&g_owners_released, 1);
  if (owner == NULL || PEER_FINALIZING()) return;
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  Py_DECREF((PyObject *)owner);
  PyErr_Restore(type, value, traceback);
  PyGILState_Release(gil);
}

/* ============================================================================================
 * Producer
 * ============================================================================================ */

typedef enum Kind {
  KIND_DENSE,
  KIND_STRIDED,
  KIND_INT4,
  KIND_PER_CHANNEL,
  KIND_BLOCK,
  KIND_SPARSE_COO,
  KIND_SPARSE_CSR,
  KIND_PAGED,
  KIND_COMPOSITE,
  KIND_MIXED,
  KIND_COUNT
} Kind;

static const char *const kKindNames[KIND_COUNT] = {
    "dense",      "strided",    "int4",  "per_channel", "block",
    "sparse_coo", "sparse_csr", "paged", "composite", "mixed",
};

typedef struct Producer {
  PyObject_HEAD Kind kind;
  HurrayBufferDesc desc; /* device, memory class, sync mode of every buffer; size per buffer */
  void *sync_handle;
  uint64_t sync_value;
  uint32_t flags;         /* HURRAY_BUFFER_READ_ONLY */
  long long context_flags; /* written over the context's flags; -1: left as built */
  int protect;             /* buffers in PROT_READ pages */
  int device_memory;       /* real memory of desc's device, through this copy's backend */
} Producer;

/* One buffer's bytes, as `make` fills them. */
typedef struct Bytes {
  const void *data;
  size_t size;
  int role;
} Bytes;

/* Contents, by kind. Little-endian hosts (the tests run on x86-64 and AArch64). */
static const float kDense[6] = {1, 2, 3, 4, 5, 6};
static const float kStrided[8] = {-1, -1, 1, 2, 3, 4, 5, 6}; /* element (0, 0) at byte 8 */
static const int8_t kPerChannelValues[12] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
static const float kPerChannelScales[4] = {0.5f, 1.0f, 1.5f, 2.0f};
static const int8_t kPerChannelZeros[4] = {0, 1, 2, 3};
static const uint8_t kBlockValues[8] = {0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE};
static const float kBlockScales[4] = {0.25f, 0.5f, 0.75f, 1.0f};
static const float kBlockMins[4] = {-1, -2, -3, -4};
static const int64_t kCooIndices[6] = {0, 1, 2, /* rows */ 1, 3, 0 /* columns */};
static const float kCooValues[3] = {7, 8, 9};
static const int32_t kCsrIndptr[4] = {0, 1, 1, 3};
static const int32_t kCsrIndices[3] = {2, 0, 3};
static const uint16_t kPages[32] = {0x3C00, 0x4000, 0x4200, 0x4400}; /* float16 1, 2, 3, 4 */
static const int32_t kPageTable[4] = {0, 1, 2, 3};
static const float kBias[4] = {0.125f, 0.25f, 0.375f, 0.5f};

/* The same for memory in pages of its own (protect=True). */
static size_t page_rounded(size_t size) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  return (size + page - 1) / page * page;
}

static void protected_release(HurrayBuffer *buffer) {
  munmap(buffer->release_ctx, page_rounded((size_t)buffer->desc.byte_size));
  atomic_fetch_add(&g_buffers_released, 1);
}

/* Frees device memory this peer made: destroys the backend's buffer (the runtime's release
 * of the memory, e.g. clReleaseMemObject), once per handle. */
static void device_buffer_release(HurrayBuffer *buffer) {
  hurray_buffer_destroy(buffer->release_ctx);
  atomic_fetch_add(&g_buffers_released, 1);
}

/* A fresh buffer of `bytes` in real memory of the producer's device (hurray_device_alloc and a
 * copy from the host, through this copy's own backend), READY. */
static int device_buffer(const Producer *p, const Bytes *bytes, HurrayBuffer **out,
                         HurrayError *error) {
  HurrayDeviceQueue *queue = NULL;
  HurrayBuffer *memory = NULL;
  int status = hurray_device_queue_create(p->desc.device_tag, p->desc.device_id, &queue, error);
  if (status == HURRAY_OK) status = hurray_device_alloc(queue, bytes->size, 0, &memory, error);
  if (status == HURRAY_OK) {
    status = hurray_device_copy_from_host(queue, memory, 0, bytes->data, bytes->size, error);
  }
  hurray_device_queue_destroy(queue);
  if (status == HURRAY_OK) {
    status = hurray_buffer_wrap(memory->data, &memory->desc, p->flags, NULL, 0,
                                device_buffer_release, memory, out, error);
  }
  if (status != HURRAY_OK) hurray_buffer_destroy(memory);
  return status;
}

/* Builds `count` buffers over fresh copies of `bytes` into `list`, each described as `p`
 * says. */
static int add_buffers(const Producer *p, const Bytes *bytes, size_t count, HurrayBufferList *list,
                       HurrayError *error) {
  for (size_t i = 0; i < count; i++) {
    if (p->device_memory) {
      HurrayBuffer *buffer = NULL;
      int status = device_buffer(p, &bytes[i], &buffer, error);
      if (status != HURRAY_OK) return status;
      atomic_fetch_add(&g_buffers_made, 1);
      status = hurray_buffer_list_append(list, buffer, bytes[i].role, NULL, error);
      if (status != HURRAY_OK) return status;
      continue;
    }
    void *memory = NULL;
    if (p->protect) {
      memory = mmap(NULL, page_rounded(bytes[i].size), PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (memory == MAP_FAILED) memory = NULL;
    } else {
      memory = aligned_alloc(64, (bytes[i].size + 63) & ~(size_t)63);
    }
    if (memory == NULL) {
      snprintf(error->message, sizeof error->message, "peer: out of memory");
      return HURRAY_ENOMEM;
    }
    memcpy(memory, bytes[i].data, bytes[i].size);
    if (p->protect) mprotect(memory, page_rounded(bytes[i].size), PROT_READ);
    HurrayBufferDesc desc = p->desc;
    desc.byte_size = bytes[i].size;
    HurrayBuffer *buffer = NULL;
    int status = hurray_buffer_wrap(memory, &desc, p->flags, p->sync_handle, p->sync_value,
                                    p->protect ? protected_release : buffer_release, memory,
                                    &buffer, error);
    if (status != HURRAY_OK) {
      if (p->protect) {
        munmap(memory, page_rounded(bytes[i].size));
      } else {
        free(memory); /* a failed wrap takes nothing */
      }
      return status;
    }
    atomic_fetch_add(&g_buffers_made, 1);
    status = hurray_buffer_list_append(list, buffer, bytes[i].role, NULL, error);
    if (status != HURRAY_OK) return status; /* the list released the buffer */
  }
  return HURRAY_OK;
}

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* The descriptor and buffers of each kind, then one context. */
static int build_context(Producer *p, HurrayTensorContext **out, HurrayError *error) {
  static const int64_t shape_2x3[2] = {2, 3}, shape_3x2[2] = {3, 2}, strides_3x2[2] = {1, 3};
  static const int64_t shape_128[1] = {128}, shape_4x3[2] = {4, 3}, shape_4[1] = {4};
  static const int64_t shape_2x8[2] = {2, 8}, shape_2x2[2] = {2, 2};
  static const int64_t shape_3x4[2] = {3, 4}, shape_2x3_idx[2] = {2, 3}, shape_3[1] = {3};
  static const int64_t shape_paged[3] = {2, 3, 4}, shape_pages[3] = {4, 2, 4};
  HurrayArray parts[3];
  memset(parts, 0, sizeof parts);
  HurrayTensorDesc t;
  memset(&t, 0, sizeof t);
  Bytes bytes[4];
  size_t nbytes = 0;
  /* composite: "weight" (per_channel over buffers 0-2) and "bias" (dense over buffer 3) */
  HurrayArray weight_parts[3], bias_part;
  HurrayTensorDesc children[2];
  static const char *const names[2] = {"weight", "bias"};

#define ARRAY(i, buffer_, dtype_, shape_, strides_, offset_)               \
  parts[i] = (HurrayArray) {                                               \
    .byte_offset = (offset_), .shape = (shape_), .strides = (strides_),    \
    .ndim = (int32_t)COUNT(shape_), .buffer = (buffer_), .dtype = (dtype_) \
  }
#define BYTES(data_, role_)         \
  bytes[nbytes++] = (Bytes) {       \
    (data_), sizeof(data_), (role_) \
  }

  switch (p->kind) {
    case KIND_DENSE:
      ARRAY(0, 0, HURRAY_DTYPE_FLOAT32, shape_2x3, NULL, 0);
      BYTES(kDense, HURRAY_ROLE_VALUES);
      t = (HurrayTensorDesc){.layout = HURRAY_LAYOUT_DENSE,
                             .ndim = 2,
                             .shape = shape_2x3,
                             .nparts = 1,
                             .dtype = HURRAY_DTYPE_FLOAT32};
      break;
    case KIND_STRIDED: /* the transpose of kDense, from byte 8 */
      ARRAY(0, 0, HURRAY_DTYPE_FLOAT32, shape_3x2, strides_3x2, 8);
      BYTES(kStrided, HURRAY_ROLE_VALUES);
      t = (HurrayTensorDesc){.layout = HURRAY_LAYOUT_DENSE,
                             .ndim = 2,
                             .shape = shape_3x2,
                             .nparts = 1,
                             .dtype = HURRAY_DTYPE_FLOAT32};
      break;
    case KIND_INT4: {
      static uint8_t packed[64];
      for (size_t i = 0; i < sizeof packed; i++) packed[i] = (uint8_t)(i * 7 + 1);
      ARRAY(0, 0, HURRAY_DTYPE_INT4, shape_128, NULL, 0);
      BYTES(packed, HURRAY_ROLE_VALUES);
      t = (HurrayTensorDesc){.layout = HURRAY_LAYOUT_DENSE,
                             .ndim = 1,
                             .shape = shape_128,
                             .nparts = 1,
                             .dtype = HURRAY_DTYPE_INT4};
      break;
    }
    case KIND_PER_CHANNEL:
    case KIND_COMPOSITE:
      ARRAY(0, 0, HURRAY_DTYPE_INT8, shape_4x3, NULL, 0);
      ARRAY(1, 1, HURRAY_DTYPE_FLOAT32, shape_4, NULL, 0);
      ARRAY(2, 2, HURRAY_DTYPE_INT8, shape_4, NULL, 0);
      BYTES(kPerChannelValues, HURRAY_ROLE_VALUES);
      BYTES(kPerChannelScales, HURRAY_ROLE_SCALES);
      BYTES(kPerChannelZeros, HURRAY_ROLE_ZERO_POINTS);
      t = (HurrayTensorDesc){.layout = HURRAY_LAYOUT_PER_CHANNEL,
                             .ndim = 2,
                             .shape = shape_4x3,
                             .axis = 0,
                             .nparts = 3,
                             .dtype = HURRAY_DTYPE_INT8};
      if (p->kind == KIND_PER_CHANNEL) break;
      memcpy(weight_parts, parts, sizeof weight_parts);
      children[0] = t;
      children[0].parts = weight_parts;
      bias_part =
          (HurrayArray){.shape = shape_4, .ndim = 1, .buffer = 3, .dtype = HURRAY_DTYPE_FLOAT32};
      BYTES(kBias, HURRAY_ROLE_VALUES);
      children[1] = (HurrayTensorDesc){.layout = HURRAY_LAYOUT_DENSE,
                                       .ndim = 1,
                                       .shape = shape_4,
                                       .parts = &bias_part,
                                       .nparts = 1,
                                       .dtype = HURRAY_DTYPE_FLOAT32};
      t = (HurrayTensorDesc){.layout = HURRAY_LAYOUT_COMPOSITE,
                             .nchildren = 2,
                             .children = children,
                             .child_names = names};
      break;
    case KIND_BLOCK: /* uint4 [2, 8] in blocks of 4 along axis 1 */
      ARRAY(0, 0, HURRAY_DTYPE_UINT4, shape_2x8, NULL, 0);
      ARRAY(1, 1, HURRAY_DTYPE_FLOAT32, shape_2x2, NULL, 0);
      ARRAY(2, 2, HURRAY_DTYPE_FLOAT32, shape_2x2, NULL, 0);
      BYTES(kBlockValues, HURRAY_ROLE_VALUES);
      BYTES(kBlockScales, HURRAY_ROLE_SCALES);
      BYTES(kBlockMins, HURRAY_ROLE_MINS);
      t = (HurrayTensorDesc){.layout = HURRAY_LAYOUT_BLOCK,
                             .ndim = 2,
                             .shape = shape_2x8,
                             .axis = 1,
                             .block_size = 4,
                             .nparts = 3,
                             .dtype = HURRAY_DTYPE_UINT4};
      break;
    case KIND_SPARSE_COO:
      ARRAY(0, 0, HURRAY_DTYPE_INT64, shape_2x3_idx, NULL, 0);
      ARRAY(1, 1, HURRAY_DTYPE_FLOAT32, shape_3, NULL, 0);
      BYTES(kCooIndices, HURRAY_ROLE_INDICES);
      BYTES(kCooValues, HURRAY_ROLE_VALUES);
      t = (HurrayTensorDesc){.layout = HURRAY_LAYOUT_SPARSE_COO,
                             .flags = HURRAY_TENSOR_COALESCED,
                             .ndim = 2,
                             .shape = shape_3x4,
                             .nparts = 2,
                             .dtype = HURRAY_DTYPE_FLOAT32};
      break;
    case KIND_SPARSE_CSR:
      ARRAY(0, 0, HURRAY_DTYPE_INT32, shape_4, NULL, 0);
      ARRAY(1, 1, HURRAY_DTYPE_INT32, shape_3, NULL, 0);
      ARRAY(2, 2, HURRAY_DTYPE_FLOAT32, shape_3, NULL, 0);
      BYTES(kCsrIndptr, HURRAY_ROLE_INDPTR);
      BYTES(kCsrIndices, HURRAY_ROLE_INDICES);
      BYTES(kCooValues, HURRAY_ROLE_VALUES);
      t = (HurrayTensorDesc){.layout = HURRAY_LAYOUT_SPARSE_CSR,
                             .ndim = 2,
                             .shape = shape_3x4,
                             .nparts = 3,
                             .dtype = HURRAY_DTYPE_FLOAT32};
      break;
    case KIND_PAGED: /* [batch 2, sequence 3, hidden 4] in pages of 2 rows along axis 1 */
      ARRAY(0, 0, HURRAY_DTYPE_FLOAT16, shape_pages, NULL, 0);
      ARRAY(1, 1, HURRAY_DTYPE_INT32, shape_2x2, NULL, 0);
      BYTES(kPages, HURRAY_ROLE_PAGES);
      BYTES(kPageTable, HURRAY_ROLE_PAGE_TABLE);
      t = (HurrayTensorDesc){.layout = HURRAY_LAYOUT_PAGED,
                             .ndim = 3,
                             .shape = shape_paged,
                             .axis = 1,
                             .block_size = 2,
                             .nparts = 2,
                             .dtype = HURRAY_DTYPE_FLOAT16};
      break;
    case KIND_MIXED: { /* per_channel's values (from byte 80) and scales (96) in one buffer */
      static uint8_t mixed[112];
      memset(mixed, 0xEE, sizeof mixed); /* the bytes no array addresses */
      memcpy(mixed + 80, kPerChannelValues, sizeof kPerChannelValues);
      memcpy(mixed + 96, kPerChannelScales, sizeof kPerChannelScales);
      ARRAY(0, 0, HURRAY_DTYPE_INT8, shape_4x3, NULL, 80);
      ARRAY(1, 0, HURRAY_DTYPE_FLOAT32, shape_4, NULL, 96);
      BYTES(mixed, HURRAY_ROLE_MIXED);
      t = (HurrayTensorDesc){.layout = HURRAY_LAYOUT_PER_CHANNEL,
                             .ndim = 2,
                             .shape = shape_4x3,
                             .axis = 0,
                             .nparts = 2,
                             .dtype = HURRAY_DTYPE_INT8};
      break;
    }
    default:
      snprintf(error->message, sizeof error->message, "peer: unknown kind");
      return HURRAY_EINVAL;
  }
#undef ARRAY
#undef BYTES
  if (t.layout != HURRAY_LAYOUT_COMPOSITE) t.parts = parts;

  HurrayBufferList *list = NULL;
  int status = hurray_buffer_list_create((uint32_t)nbytes, &list, error);
  if (status == HURRAY_OK) status = add_buffers(p, bytes, nbytes, list, error);
  if (status != HURRAY_OK) {
    hurray_buffer_list_destroy(list);
    return status;
  }
  /* SINK for the list and the owner reference, whatever happens. */
  status = hurray_tensor_context_create(&t, list, p->flags, Py_NewRef((PyObject *)p), owner_release,
                                        out, error);
  if (status != HURRAY_OK) return status;
  atomic_fetch_add(&g_contexts_made, 1);
  (*out)->abi_version = PEER_ABI_VERSION; /* what this build stands for */
  if (p->context_flags >= 0) (*out)->flags = (uint32_t)p->context_flags;
  return HURRAY_OK;
}

/* The producer's capsule destructor: only a capsule nobody consumed still owns its context. */
static void capsule_destructor(PyObject *capsule) {
  if (!PyCapsule_IsValid(capsule, CAPSULE_NAME)) return;
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  atomic_fetch_add(&g_capsules_released, 1);
  hurray_tensor_context_release(PyCapsule_GetPointer(capsule, CAPSULE_NAME));
  PyErr_Restore(type, value, traceback);
}

static PyObject *producer_hurray(PyObject *op, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"stream", NULL};
  PyObject *stream = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:__hurray__", kwlist, &stream)) return NULL;
  if (stream != Py_None && !PyLong_Check(stream)) {
    return PyErr_Format(PyExc_TypeError, "stream must be None or an int");
  }
  HurrayTensorContext *context = NULL;
  HurrayError error = {0};
  int status = build_context((Producer *)op, &context, &error);
  if (status != HURRAY_OK) {
    return PyErr_Format(PyExc_RuntimeError, "peer: %s (%s)", error.message,
                        hurray_status_name(status));
  }
  PyObject *capsule = PyCapsule_New(context, CAPSULE_NAME, capsule_destructor);
  if (capsule == NULL) hurray_tensor_context_release(context);
  return capsule;
}

static void producer_dealloc(PyObject *op) {
  PyTypeObject *type = Py_TYPE(op);
  type->tp_free(op);
  Py_DECREF(type);
}

static PyMethodDef producer_methods[] = {
    {"__hurray__", (PyCFunction)(void (*)(void))producer_hurray, METH_VARARGS | METH_KEYWORDS,
     PyDoc_STR("__hurray__($self, /, stream=None)\n--\n\nA fresh 'hurray_tensor' capsule.")},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot producer_slots[] = {
    {Py_tp_dealloc, producer_dealloc},
    {Py_tp_methods, producer_methods},
    {0, NULL},
};

static PyType_Spec producer_spec = {
    .name = PEER_STR(PEER_MODULE) ".Producer",
    .basicsize = sizeof(Producer),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = producer_slots,
};

/* ============================================================================================
 * Consumer
 * ============================================================================================ */

typedef struct PeerState {
  PyTypeObject *producer_type;
  PyTypeObject *received_type;
  PyObject *abi_error; /* <module>.ABIMismatch(BufferError) */
} PeerState;

typedef struct Received {
  PyObject_HEAD HurrayTensorContext *context; /* owned; NULL once released */
  PyObject *summary;
} Received;

static PyObject *int64_tuple(int32_t n, const int64_t *values) {
  PyObject *tuple = PyTuple_New(n);
  for (int32_t i = 0; tuple != NULL && i < n; i++) {
    PyObject *item = PyLong_FromLongLong(values[i]);
    if (item == NULL)
      Py_CLEAR(tuple);
    else
      PyTuple_SET_ITEM(tuple, i, item);
  }
  return tuple;
}

static PyObject *describe_tensor(const HurrayTensorDesc *t) {
  PyObject *parts = PyList_New(0);
  PyObject *children = PyList_New(0);
  for (uint32_t i = 0; parts != NULL && i < t->nparts; i++) {
    const HurrayArray *a = &t->parts[i];
    PyObject *strides = a->strides == NULL ? Py_NewRef(Py_None) : int64_tuple(a->ndim, a->strides);
    PyObject *part =
        Py_BuildValue("{s:I,s:i,s:N,s:N,s:K}", "buffer", (unsigned)a->buffer, "dtype",
                      (int)a->dtype, "shape", int64_tuple(a->ndim, a->shape), "strides", strides,
                      "byte_offset", (unsigned long long)a->byte_offset);
    if (part == NULL || PyList_Append(parts, part) < 0) Py_CLEAR(parts);
    Py_XDECREF(part);
  }
  for (uint32_t i = 0; children != NULL && i < t->nchildren; i++) {
    PyObject *child = Py_BuildValue("(sN)", t->child_names[i], describe_tensor(&t->children[i]));
    if (child == NULL || PyList_Append(children, child) < 0) Py_CLEAR(children);
    Py_XDECREF(child);
  }
  if (parts == NULL || children == NULL) {
    Py_XDECREF(parts);
    Py_XDECREF(children);
    return NULL;
  }
  return Py_BuildValue("{s:I,s:I,s:i,s:i,s:L,s:N,s:i,s:N,s:N}", "layout", (unsigned)t->layout,
                       "flags", (unsigned)t->flags, "ndim", (int)t->ndim, "axis", (int)t->axis,
                       "block_size", (long long)t->block_size, "shape",
                       int64_tuple(t->ndim, t->shape), "dtype", (int)t->dtype, "parts", parts,
                       "children", children);
}

/* The lowest byte of buffer `index` that an array of `t` or of its children addresses;
 * UINT64_MAX where none does. */
static uint64_t first_addressed(const HurrayTensorDesc *t, uint32_t index) {
  uint64_t first = UINT64_MAX;
  for (uint32_t i = 0; i < t->nparts; i++) {
    uint64_t begin = 0, end = 0;
    if (t->parts[i].buffer == index &&
        hurray_array_span(&t->parts[i], &begin, &end, NULL) == HURRAY_OK && end > begin &&
        begin < first) {
      first = begin;
    }
  }
  for (uint32_t i = 0; i < t->nchildren; i++) {
    uint64_t child = first_addressed(&t->children[i], index);
    if (child < first) first = child;
  }
  return first;
}

/* A CPU buffer's bytes read as ADR-008 lets a consumer: those before the first byte an array
 * addresses may be another object's (a producer rounds an unaligned start down), so they are
 * never read and come back as zeros. */
static PyObject *buffer_bytes(const HurrayBuffer *b, uint64_t first) {
  uint64_t size = b->desc.byte_size;
  uint64_t lead = first < size ? first : size;
  PyObject *data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
  if (data == NULL) return NULL;
  memset(PyBytes_AS_STRING(data), 0, (size_t)lead);
  if (size > lead) {
    memcpy(PyBytes_AS_STRING(data) + lead, (const char *)b->data + lead, (size_t)(size - lead));
  }
  return data;
}

static PyObject *describe_buffer(const HurrayBuffer *b, int role, uint64_t first) {
  const HurrayBufferDesc *d = &b->desc;
  PyObject *data =
      d->device_tag == HURRAY_DEVICE_CPU ? buffer_bytes(b, first) : Py_NewRef(Py_None);
  return Py_BuildValue(
      "{s:i,s:i,s:i,s:i,s:i,s:i,s:I,s:K,s:N,s:N,s:K,s:I,s:N}", "role", role, "device_tag",
      (int)d->device_tag, "memory_class", (int)d->memory_class, "sync_mode", (int)d->sync_mode,
      "device_id", (int)d->device_id, "peer_device_id", (int)d->peer_device_id, "alignment",
      (unsigned)d->alignment, "byte_size", (unsigned long long)d->byte_size, "address",
      PyLong_FromVoidPtr(b->data), "sync_handle", PyLong_FromVoidPtr(b->sync_handle), "sync_value",
      (unsigned long long)b->sync_value, "flags", (unsigned)b->flags, "data", data);
}

static PyObject *summarize(const HurrayTensorContext *context) {
  const HurrayBufferList *list = context->buffers;
  PyObject *buffers = PyList_New(0);
  for (uint32_t i = 0; buffers != NULL && i < list->count; i++) {
    PyObject *buffer =
        describe_buffer(list->buffers[i], list->roles[i], first_addressed(context->tensor, i));
    if (buffer == NULL || PyList_Append(buffers, buffer) < 0) Py_CLEAR(buffers);
    Py_XDECREF(buffer);
  }
  if (buffers == NULL) return NULL;
  return Py_BuildValue("{s:I,s:I,s:N,s:N}", "abi_version",
                       (unsigned)hurray_tensor_context_abi_version(context), "flags",
                       (unsigned)context->flags, "tensor", describe_tensor(context->tensor),
                       "buffers", buffers);
}

/* What this build checks once the version is its own: hurray_tensor_context_check, which knows
 * HURRAY_C_ABI_VERSION. A build standing for another version knows that version's layout --
 * the same as 4's here -- and validates it directly. */
static int check_context(const HurrayTensorContext *context, HurrayError *error) {
#if PEER_ABI_VERSION == HURRAY_C_ABI_VERSION
  return hurray_tensor_context_check(context, HURRAY_VALIDATE_CONTENTS, error);
#else
  if (context->release == NULL) {
    snprintf(error->message, sizeof error->message, "the tensor context was released");
    return HURRAY_ESTATE;
  }
  return hurray_tensor_validate(context->tensor, context->buffers, HURRAY_VALIDATE_CONTENTS, error);
#endif
}

/* Drops a capsule that is refused, keeping the error: its producer's destructor releases it. */
static PyObject *refuse(PyObject *capsule) {
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  Py_DECREF(capsule);
  PyErr_Restore(type, value, traceback);
  return NULL;
}

static PyObject *consume(PyObject *module, PyObject *obj) {
  PeerState *st = PyModule_GetState(module);
  PyObject *capsule = PyObject_CallMethod(obj, "__hurray__", NULL);
  if (capsule == NULL) { /* an object without the method is a TypeError */
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    int missing = PyErr_GivenExceptionMatches(type, PyExc_AttributeError) &&
                  !PyObject_HasAttrString(obj, "__hurray__");
    PyErr_Restore(type, value, traceback);
    if (missing) {
      PyErr_Clear();
      PyErr_SetString(PyExc_TypeError, "consume() needs an object with __hurray__");
    }
    return NULL;
  }
  if (!PyCapsule_CheckExact(capsule)) {
    PyErr_Format(PyExc_TypeError, "__hurray__ returned %.200s", Py_TYPE(capsule)->tp_name);
    return refuse(capsule);
  }
  const char *name = PyCapsule_GetName(capsule);
  if (name == NULL && PyErr_Occurred()) {
    PyErr_Clear();
    PyErr_SetString(PyExc_BufferError, "peer: the capsule holds NULL");
    return refuse(capsule);
  }
  if (name == NULL || strcmp(name, CAPSULE_NAME) != 0) {
    PyErr_Format(PyExc_BufferError, "peer: a capsule named %s", name == NULL ? "NULL" : name);
    return refuse(capsule);
  }
  HurrayTensorContext *context = PyCapsule_GetPointer(capsule, CAPSULE_NAME);
  uint32_t version = hurray_tensor_context_abi_version(context); /* and nothing else, yet */
  if (version != PEER_ABI_VERSION) {
    PyErr_Format(st->abi_error, "peer: producer C ABI version %u, consumer C ABI version %d",
                 (unsigned)version, PEER_ABI_VERSION);
    return refuse(capsule);
  }
  HurrayError error = {0};
  int status = check_context(context, &error);
  if (status != HURRAY_OK) {
    PyErr_Format(PyExc_BufferError, "peer: %s (%s)", error.message, hurray_status_name(status));
    return refuse(capsule);
  }
  if (PyCapsule_SetName(capsule, CAPSULE_USED_NAME) < 0) return refuse(capsule);
  Py_DECREF(capsule); /* the context is ours now */
  Received *received = PyObject_New(Received, st->received_type);
  if (received == NULL) {
    hurray_tensor_context_release(context);
    return NULL;
  }
  received->context = context;
  received->summary = summarize(context);
  if (received->summary == NULL) Py_CLEAR(received); /* releases the context */
  return (PyObject *)received;
}

static PyObject *received_release(PyObject *op, PyObject *unused) {
  (void)unused;
  Received *self = (Received *)op;
  HurrayTensorContext *context = self->context;
  self->context = NULL;
  hurray_tensor_context_release(context);
  return PyBool_FromLong(context != NULL);
}

static void received_dealloc(PyObject *op) {
  Received *self = (Received *)op;
  PyTypeObject *type = Py_TYPE(op);
  hurray_tensor_context_release(self->context);
  Py_XDECREF(self->summary);
  type->tp_free(op);
  Py_DECREF(type);
}

static PyObject *received_summary(PyObject *op, void *closure) {
  (void)closure;
  return Py_NewRef(((Received *)op)->summary);
}

static PyMethodDef received_methods[] = {
    {"release", received_release, METH_NOARGS,
     PyDoc_STR("release($self, /)\n--\n\nReleases the context now; True if it was held.")},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef received_getset[] = {
    {"summary", received_summary, NULL, PyDoc_STR("What arrived."), NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot received_slots[] = {
    {Py_tp_dealloc, received_dealloc},
    {Py_tp_methods, received_methods},
    {Py_tp_getset, received_getset},
    {0, NULL},
};

static PyType_Spec received_spec = {
    .name = PEER_STR(PEER_MODULE) ".Received",
    .basicsize = sizeof(Received),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = received_slots,
};

/* ============================================================================================
 * The module
 * ============================================================================================ */

static PyObject *make(PyObject *module, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"kind",       "device_tag", "memory_class",   "sync_mode", "sync_handle",
                           "sync_value", "device_id",  "peer_device_id", "readonly",  "context_flags",
                           "protect",    "device_memory", NULL};
  const char *kind = "dense";
  unsigned char tag = 0, memory_class = 0, sync_mode = 0;
  unsigned long long handle = 0, value = 0;
  unsigned short device_id = 0, peer_device_id = 0;
  int readonly = 0, protect = 0, device_memory = 0;
  PyObject *context_flags = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|s$bbbKKHHpOpp:make", kwlist, &kind, &tag,
                                   &memory_class, &sync_mode, &handle, &value, &device_id,
                                   &peer_device_id, &readonly, &context_flags, &protect,
                                   &device_memory)) {
    return NULL;
  }
  unsigned long context_value = 0;
  if (context_flags != Py_None) {
    context_value = PyLong_AsUnsignedLong(context_flags);
    if (PyErr_Occurred()) return NULL;
    if (context_value > UINT32_MAX) {
      return PyErr_Format(PyExc_OverflowError, "context_flags must fit 32 bits");
    }
  }
  int k = 0;
  while (k < KIND_COUNT && strcmp(kKindNames[k], kind) != 0) k++;
  if (k == KIND_COUNT) return PyErr_Format(PyExc_ValueError, "unknown kind %s", kind);
  PeerState *st = PyModule_GetState(module);
  Producer *p = PyObject_New(Producer, st->producer_type);
  if (p == NULL) return NULL;
  p->kind = (Kind)k;
  memset(&p->desc, 0, sizeof p->desc);
  p->desc.alignment = HURRAY_MIN_ALIGNMENT;
  p->desc.device_tag = tag;
  p->desc.memory_class = memory_class;
  p->desc.sync_mode = sync_mode;
  p->desc.device_id = device_id;
  p->desc.peer_device_id = peer_device_id;
  p->sync_handle = (void *)(uintptr_t)handle;
  p->sync_value = value;
  p->flags = readonly ? HURRAY_BUFFER_READ_ONLY : 0;
  p->context_flags = context_flags == Py_None ? -1 : (long long)context_value;
  p->protect = protect;
  p->device_memory = device_memory;
  return (PyObject *)p;
}

static PyObject *released(PyObject *module, PyObject *unused) {
  (void)module;
  (void)unused;
  return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K}", "contexts_made",
                       (unsigned long long)atomic_load(&g_contexts_made), "buffers_made",
                       (unsigned long long)atomic_load(&g_buffers_made), "buffers_released",
                       (unsigned long long)atomic_load(&g_buffers_released), "owners_released",
                       (unsigned long long)atomic_load(&g_owners_released), "capsules_released",
                       (unsigned long long)atomic_load(&g_capsules_released));
}

static PyObject *register_device(PyObject *module, PyObject *args) {
  (void)module;
  int tag = 0;
  const char *name = NULL;
  if (!PyArg_ParseTuple(args, "is:register_device", &tag, &name)) return NULL;
  HurrayError error = {0};
  if (hurray_device_register_private(tag, name, &error) != HURRAY_OK) {
    return PyErr_Format(PyExc_ValueError, "peer: %s", error.message);
  }
  Py_RETURN_NONE;
}

typedef struct ThreadCall {
  void (*function)(void *);
  void *argument;
} ThreadCall;

static void *thread_call(void *opaque) {
  ThreadCall *call = opaque;
  call->function(call->argument);
  return NULL;
}

static PyObject *run_on_thread(PyObject *module, PyObject *args) {
  (void)module;
  unsigned long long function = 0, argument = 0;
  if (!PyArg_ParseTuple(args, "KK:run_on_thread", &function, &argument)) return NULL;
  if (function == 0) return PyErr_Format(PyExc_ValueError, "peer: run_on_thread of NULL");
  ThreadCall call = {(void (*)(void *))(uintptr_t)function, (void *)(uintptr_t)argument};
  pthread_t thread;
  int failed = 0;
  Py_BEGIN_ALLOW_THREADS;
  failed = pthread_create(&thread, NULL, thread_call, &call);
  if (failed == 0) failed = pthread_join(thread, NULL);
  Py_END_ALLOW_THREADS;
  if (failed != 0) return PyErr_Format(PyExc_OSError, "peer: pthread: %s", strerror(failed));
  Py_RETURN_NONE;
}

static PyMethodDef peer_functions[] = {
    {"make", (PyCFunction)(void (*)(void))make, METH_VARARGS | METH_KEYWORDS,
     PyDoc_STR("make(kind='dense', *, device_tag=0, memory_class=0, sync_mode=0, "
               "sync_handle=0, sync_value=0, device_id=0, peer_device_id=0, readonly=False, "
               "context_flags=None, protect=False, device_memory=False)\n"
               "--\n\nA producer of capsules of one kind of tensor.")},
    {"consume", consume, METH_O,
     PyDoc_STR("consume(obj, /)\n--\n\nThe consumer protocol in C; returns a Received.")},
    {"released", released, METH_NOARGS,
     PyDoc_STR("released()\n--\n\nHow often each release of this copy ran.")},
    {"register_device", register_device, METH_VARARGS,
     PyDoc_STR("register_device(tag, name, /)\n--\n\n"
               "Registers a private tag with this copy of hurray-core.")},
    {"run_on_thread", run_on_thread, METH_VARARGS,
     PyDoc_STR("run_on_thread(function, argument, /)\n--\n\n"
               "Calls void function(void *argument) on a new native thread, and waits.")},
    {NULL, NULL, 0, NULL},
};

static int peer_exec(PyObject *module) {
  PeerState *st = PyModule_GetState(module);
  st->producer_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &producer_spec, NULL);
  st->received_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &received_spec, NULL);
  if (st->producer_type == NULL || st->received_type == NULL) return -1;
  st->abi_error = PyErr_NewException(PEER_STR(PEER_MODULE) ".ABIMismatch", PyExc_BufferError, NULL);
  if (st->abi_error == NULL || PyModule_AddObjectRef(module, "ABIMismatch", st->abi_error) < 0 ||
      PyModule_AddType(module, st->producer_type) < 0 ||
      PyModule_AddType(module, st->received_type) < 0 ||
      PyModule_AddIntConstant(module, "ABI_VERSION", PEER_ABI_VERSION) < 0) {
    return -1;
  }
  return 0;
}

static int peer_traverse(PyObject *module, visitproc visit, void *arg) {
  PeerState *st = PyModule_GetState(module);
  Py_VISIT(st->producer_type);
  Py_VISIT(st->received_type);
  Py_VISIT(st->abi_error);
  return 0;
}

static int peer_clear(PyObject *module) {
  PeerState *st = PyModule_GetState(module);
  Py_CLEAR(st->producer_type);
  Py_CLEAR(st->received_type);
  Py_CLEAR(st->abi_error);
  return 0;
}

static void peer_free(void *module) {
  (void)peer_clear((PyObject *)module);
}

static PyModuleDef_Slot peer_slots[] = {
    {Py_mod_exec, (void *)peer_exec},
    {0, NULL},
};

static struct PyModuleDef peer_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = PEER_STR(PEER_MODULE),
    .m_doc = "A second Hurray-aware extension with its own copy of hurray-core (tests).",
    .m_size = sizeof(PeerState),
    .m_methods = peer_functions,
    .m_slots = peer_slots,
    .m_traverse = peer_traverse,
    .m_clear = peer_clear,
    .m_free = peer_free,
};

PyMODINIT_FUNC PEER_CAT(PyInit_, PEER_MODULE)(void) {
  return PyModuleDef_Init(&peer_module);
}
