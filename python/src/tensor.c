/* tensor.c -- hurray.Tensor.
 *
 * Every Tensor owns exactly one HurrayTensorContext (hurray_tensor_context_create over a
 * HurrayBufferList) and reads its descriptor through the context (`desc` is a cached pointer
 * to context->tensor). The context's owner reference is what keeps the memory alive: the
 * exporter's Py_buffer for Tensor(data, ...), the `owner` of Tensor.from_address, the ndarray
 * export of from_numpy, the DLPack managed tensor of from_dlpack. Buffers made here carry no
 * release callback of their own: the memory belongs to the owner, released once with the
 * context.
 *
 * A Tensor shares its memory by building another context over it (hurray__py_tensor_share):
 * a distinct HurrayBuffer handle per buffer -- hurray_buffer_wrap of the same data, descriptor
 * and sync state, without a release of its own -- and an owner reference to this Tensor. The
 * native protocol's producer (native.c) hands such a context across in a "hurray_tensor"
 * capsule; the views `parts` and `children` are Tensors adopting one; and from_parts builds a
 * multi-buffer tensor over the buffers of dense ones the same way.
 */
#include "hurray_python.h"

#include <string.h>
#if defined(__linux__)
#include <errno.h>
#include <sys/mman.h> /* mincore */
#include <unistd.h>
#endif

#include "structmember.h" /* PyMemberDef's T_PYSSIZET and READONLY on CPython 3.11 */

/* ============================================================================================
 * Owner references
 * ============================================================================================ */

/* Both releases may run on any thread, with or without the GIL (a C consumer of a context
 * releases it wherever it likes, a DLPack deleter wherever its consumer does). Once the
 * interpreter is finalising they must not touch Python: the reference is leaked (the process
 * is ending). */

void hurray__py_owner_release_object(void *object) {
  if (object == NULL || HURRAY_PY_FINALIZING()) return;
  PyGILState_STATE gil = PyGILState_Ensure();
  HurrayPySavedError saved;
  hurray__py_error_save(&saved);
  Py_DECREF((PyObject *)object);
  hurray__py_error_restore(&saved);
  PyGILState_Release(gil);
}

void *hurray__py_owner_new_view(Py_buffer *view) {
  Py_buffer *owner = PyMem_RawMalloc(sizeof *owner);
  if (owner == NULL) return PyErr_NoMemory();
  *owner = *view;
  memset(view, 0, sizeof *view);
  return owner;
}

void hurray__py_owner_release_view(void *opaque) {
  Py_buffer *view = opaque;
  if (view == NULL) return;
  if (!HURRAY_PY_FINALIZING()) {
    PyGILState_STATE gil = PyGILState_Ensure();
    HurrayPySavedError saved;
    hurray__py_error_save(&saved);
    PyBuffer_Release(view);
    hurray__py_error_restore(&saved);
    PyGILState_Release(gil);
  }
  PyMem_RawFree(view);
}

/* ============================================================================================
 * Construction
 * ============================================================================================ */

PyObject *hurray__py_tensor_adopt(HurrayState *st, HurrayTensorContext *context) {
  HurrayTensorObject *self = PyObject_GC_New(HurrayTensorObject, st->tensor_type);
  if (self == NULL) {
    hurray_tensor_context_release(context);
    return NULL;
  }
  self->context = context;
  self->desc = context->tensor;
  self->exports = 0;
  self->weakreflist = NULL;
  PyObject_GC_Track(self);
  return (PyObject *)self;
}

int hurray__py_share_buffer(HurrayBufferList *list, const HurrayBuffer *buffer, int role,
                            HurrayError *error) {
  HurrayBuffer *handle = NULL;
  int status = hurray_buffer_wrap(buffer->data, &buffer->desc, buffer->flags, buffer->sync_handle,
                                  buffer->sync_value, NULL, NULL, &handle, error);
  if (status != HURRAY_OK) return status;
  return hurray_buffer_list_append(list, handle, role, NULL, error); /* SINK for the handle */
}

HurrayTensorContext *hurray__py_tensor_share(HurrayState *st, HurrayTensorObject *self,
                                             const HurrayTensorDesc *desc, int64_t only) {
  const HurrayBufferList *from = self->context->buffers;
  uint32_t first = only < 0 ? 0 : (uint32_t)only;
  uint32_t end = only < 0 ? from->count : first + 1;
  HurrayError error; /* written only on failure: not cleared on this hot path */
  error.message[0] = '\0';
  HurrayBufferList *list = NULL;
  int status = hurray_buffer_list_create(end - first, &list, &error);
  for (uint32_t i = first; status == HURRAY_OK && i < end; i++) {
    status = hurray__py_share_buffer(list, from->buffers[i], from->roles[i], &error);
  }
  if (status != HURRAY_OK) {
    hurray_buffer_list_destroy(list);
    hurray__py_raise_status(st, status, &error);
    return NULL;
  }
  HurrayTensorContext *context = NULL;
  /* Copies and validates `desc` against the new handles; SINK for the list and the owner. */
  status = hurray_tensor_context_create(desc, list, self->context->flags, Py_NewRef(self),
                                        hurray__py_owner_release_object, &context, &error);
  if (status != HURRAY_OK) hurray__py_raise_status(st, status, &error);
  return context;
}

PyObject *hurray__py_tensor_wrap(HurrayState *st, HurrayBuffer *buffer, const HurrayArray *array,
                                 uint32_t flags, void *owner, HurrayOwnerReleaseFn owner_release) {
  HurrayError error = {0};
  HurrayBufferList *list = NULL;
  int status = hurray_buffer_list_create(1, &list, &error);
  if (status != HURRAY_OK) {
    hurray_buffer_destroy(buffer);
    if (owner_release != NULL) owner_release(owner);
    return hurray__py_raise_status(st, status, &error);
  }
  uint32_t index = 0;
  status = hurray_buffer_list_append(list, buffer, HURRAY_ROLE_VALUES, &index, &error);
  if (status != HURRAY_OK) { /* the list destroyed the buffer */
    hurray_buffer_list_destroy(list);
    if (owner_release != NULL) owner_release(owner);
    return hurray__py_raise_status(st, status, &error);
  }
  HurrayTensorDesc desc = {
      .layout = HURRAY_LAYOUT_DENSE,
      .ndim = array->ndim,
      .shape = array->shape,
      .parts = array,
      .nparts = 1,
      .dtype = array->dtype,
  };
  HurrayTensorContext *context = NULL;
  /* Copies and validates the descriptor against the buffer; SINK for list and owner. */
  status = hurray_tensor_context_create(&desc, list, flags, owner, owner_release, &context, &error);
  if (status != HURRAY_OK) return hurray__py_raise_status(st, status, &error);
  return hurray__py_tensor_adopt(st, context);
}

PyObject *hurray__py_tensor_from_memory(HurrayState *st, void *data, uint64_t size,
                                        const HurrayPyMemory *memory, const HurrayArray *array,
                                        void *owner, HurrayOwnerReleaseFn owner_release) {
  HurrayArray values = *array;
  uintptr_t base = (uintptr_t)data;
  if (hurray__py_address_form(memory->tag)) {
    /* Every byte the array addresses lies in the `size` bytes at `data`: checked before the
     * address is rounded down, since the bytes below `data` are not the caller's to address. */
    uint64_t begin = 0, end = 0;
    HurrayError error;
    error.message[0] = '\0';
    int status = hurray_array_span(array, &begin, &end, &error);
    if (status == HURRAY_OK && end > size) {
      status = HURRAY_EBOUNDS;
      snprintf(error.message, sizeof error.message,
               "addresses bytes [%llu, %llu) of buffer 0, whose byte_size is %llu",
               (unsigned long long)begin, (unsigned long long)end, (unsigned long long)size);
    }
    if (status != HURRAY_OK) {
      if (owner_release != NULL) owner_release(owner);
      return hurray__py_raise_status(st, status, &error);
    }
    uint64_t slack = (uint64_t)(base % HURRAY_MIN_ALIGNMENT);
    base -= (uintptr_t)slack;
    if (__builtin_add_overflow(size, slack, &size) ||
        __builtin_add_overflow(values.byte_offset, slack, &values.byte_offset)) {
      if (owner_release != NULL) owner_release(owner);
      return hurray__py_raise_statusf(st, HURRAY_EOVERFLOW, "buffer size overflows 64 bits");
    }
  }
  uint32_t flags = memory->readonly ? HURRAY_BUFFER_READ_ONLY : 0;
  HurrayBufferDesc desc = {
      .byte_size = size,
      .alignment = HURRAY_MIN_ALIGNMENT,
      .device_id = memory->device_id,
      .peer_device_id = memory->peer_device_id,
      .device_tag = memory->tag,
      .memory_class = memory->memory_class,
      .sync_mode = memory->sync_mode,
  };
  HurrayBuffer *buffer = NULL;
  HurrayError error = {0};
  int status = hurray_buffer_wrap((void *)base, &desc, flags, memory->sync_handle,
                                  memory->sync_value, NULL, NULL, &buffer, &error);
  if (status != HURRAY_OK) {
    if (owner_release != NULL) owner_release(owner);
    return hurray__py_raise_status(st, status, &error);
  }
  return hurray__py_tensor_wrap(st, buffer, &values, flags, owner, owner_release);
}

/* A shape or strides argument: a sequence of integers (or one integer) of at most
 * HURRAY_MAX_NDIM entries. The values are hurray-core's to judge. */
static int dims_arg(HurrayState *st, PyObject *obj, const char *what, int64_t *out, int32_t *ndim) {
  if (PyIndex_Check(obj) && !PyBool_Check(obj)) {
    *ndim = 1;
    return hurray__py_i64(st, obj, what, &out[0]);
  }
  if (PyUnicode_Check(obj) || PyBytes_Check(obj) || !PySequence_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "%s must be a sequence of integers, not %.200s", what,
                 Py_TYPE(obj)->tp_name);
    return -1;
  }
  PyObject *items = hurray__py_sequence_tuple(obj, what);
  if (items == NULL) return -1;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(items);
  int result = 0;
  if (n > HURRAY_MAX_NDIM) {
    hurray__py_raise_statusf(st, HURRAY_ELIMIT, "%s has %zd dimensions; at most %d", what, n,
                             HURRAY_MAX_NDIM);
    result = -1;
  }
  for (Py_ssize_t i = 0; result == 0 && i < n; i++) {
    result = hurray__py_i64(st, PySequence_Fast_GET_ITEM(items, i), what, &out[i]);
  }
  Py_DECREF(items);
  *ndim = (int32_t)n;
  return result;
}

/* shape, strides (None or a sequence of ndim entries) -> array fields. */
static int array_args(HurrayState *st, PyObject *shape_obj, PyObject *strides_obj, int64_t *shape,
                      int64_t *strides, HurrayArray *array) {
  int32_t ndim = 0;
  if (dims_arg(st, shape_obj, "shape", shape, &ndim) < 0) return -1;
  array->ndim = ndim;
  array->shape = shape;
  array->strides = NULL;
  if (strides_obj != NULL && strides_obj != Py_None) {
    int32_t nstrides = 0;
    if (dims_arg(st, strides_obj, "strides", strides, &nstrides) < 0) return -1;
    if (nstrides != ndim) {
      hurray__py_raise_statusf(st, HURRAY_ELAYOUT, "strides has %d entries but shape has %d",
                               (int)nstrides, (int)ndim);
      return -1;
    }
    array->strides = strides;
  }
  return 0;
}

static PyObject *tensor_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"data", "dtype", "shape", "strides", "byte_offset", NULL};
  PyObject *data = NULL, *dtype_obj = NULL, *shape_obj = NULL;
  PyObject *strides_obj = NULL, *offset_obj = NULL;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO|OO:Tensor", kwlist, &data, &dtype_obj,
                                   &shape_obj, &strides_obj, &offset_obj)) {
    return NULL;
  }
  HurrayState *st = hurray__py_state_of_type(type);
  const HurrayDTypeInfo *dtype = hurray__py_dtype_arg(st, dtype_obj);
  if (dtype == NULL) return NULL;
  int64_t shape[HURRAY_MAX_NDIM];
  int64_t strides[HURRAY_MAX_NDIM];
  HurrayArray array = {.dtype = dtype->code};
  if (array_args(st, shape_obj, strides_obj, shape, strides, &array) < 0) return NULL;
  if (offset_obj != NULL && hurray__py_u64(st, offset_obj, "byte_offset", &array.byte_offset) < 0) {
    return NULL;
  }

  Py_buffer view;
  if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) return NULL;
  uint64_t size = (uint64_t)view.len;
  if (array.strides == NULL) {
    /* Contiguous construction: the data must be exactly byte_offset + the packed elements. */
    HurrayError error = {0};
    uint64_t numel = 0, nbytes = 0, needed = 0;
    int status = hurray_array_numel(&array, &numel, &error);
    if (status == HURRAY_OK)
      status = hurray_dtype_storage_bytes(dtype->code, numel, &nbytes, &error);
    if (status == HURRAY_OK && __builtin_add_overflow(array.byte_offset, nbytes, &needed)) {
      status = HURRAY_EOVERFLOW;
      snprintf(error.message, sizeof error.message, "byte_offset + nbytes overflows 64 bits");
    }
    if (status != HURRAY_OK) {
      PyBuffer_Release(&view);
      return hurray__py_raise_status(st, status, &error);
    }
    if (needed != size) {
      PyObject *shape_repr = PyTuple_New(array.ndim);
      for (int32_t i = 0; shape_repr != NULL && i < array.ndim; i++) {
        PyObject *extent = PyLong_FromLongLong(shape[i]);
        if (extent == NULL)
          Py_CLEAR(shape_repr);
        else
          PyTuple_SET_ITEM(shape_repr, i, extent);
      }
      if (shape_repr != NULL) {
        hurray__py_raise_statusf(st, HURRAY_EBOUNDS,
                                 "data has %llu bytes but %s of shape %R needs %llu (%llu "
                                 "bytes of elements after byte_offset %llu)",
                                 (unsigned long long)size, dtype->name, shape_repr,
                                 (unsigned long long)needed, (unsigned long long)nbytes,
                                 (unsigned long long)array.byte_offset);
        Py_DECREF(shape_repr);
      }
      PyBuffer_Release(&view);
      return NULL;
    }
  }
  HurrayPyMemory memory = {
      .tag = HURRAY_DEVICE_CPU,
      .memory_class = HURRAY_MEM_DEVICE,
      .sync_mode = HURRAY_SYNC_READY,
      .readonly = view.readonly,
  };
  void *address = view.buf;
  void *owner = hurray__py_owner_new_view(&view);
  if (owner == NULL) {
    PyBuffer_Release(&view);
    return NULL;
  }
  return hurray__py_tensor_from_memory(st, address, size, &memory, &array, owner,
                                       hurray__py_owner_release_view);
}

/* Whether every page of [address, address + size) is mapped in this process -- what can be
 * known of CPU memory without reading it (ADR-035): 1 yes, 0 no, -1 cannot tell (nothing is
 * refused then). Linux's mincore fails with ENOMEM on a gap; it is asked about at most 4096
 * pages a call. Elsewhere: -1. The range does not wrap (checked by the caller). */
static int cpu_range_mapped(uintptr_t address, uint64_t size) {
#if defined(__linux__)
  unsigned char pages[4096];
  long page_size = sysconf(_SC_PAGESIZE);
  if (page_size <= 0) return -1;
  uintptr_t page = (uintptr_t)page_size;
  uintptr_t at = address - address % page;
  uintptr_t end = address + (uintptr_t)(size - 1); /* the last byte */
  while (at <= end) {
    uintptr_t length = end - at + 1;
    if (length > sizeof pages * page) length = sizeof pages * page;
    if (mincore((void *)at, (size_t)length, pages) != 0) return errno == ENOMEM ? 0 : -1;
    if (__builtin_add_overflow(at, length, &at)) break; /* reached the top of the space */
  }
  return 1;
#else
  (void)address;
  (void)size;
  return -1;
#endif
}

static const char *const kFromAddressNames[] = {
    "address",     "dtype",       "shape",      "device",    "memory_class",
    "sync_mode",   "sync_handle", "sync_value", "byte_size", "strides",
    "byte_offset", "peer_index",  "owner",      "readonly",  NULL};
enum {
  FA_ADDRESS,
  FA_DTYPE,
  FA_SHAPE,
  FA_DEVICE,
  FA_MEMORY_CLASS,
  FA_SYNC_MODE,
  FA_SYNC_HANDLE,
  FA_SYNC_VALUE,
  FA_BYTE_SIZE,
  FA_STRIDES,
  FA_BYTE_OFFSET,
  FA_PEER_INDEX,
  FA_OWNER,
  FA_READONLY,
  FA_COUNT
};

static PyObject *tensor_from_address(PyObject *cls, PyObject *const *args, Py_ssize_t nargs,
                                     PyObject *kwnames) {
  static const HurrayPyParser parser = {"from_address", kFromAddressNames, 0, 3, 4};
  PyObject *a[FA_COUNT];
  if (hurray__py_parse(&parser, args, nargs, kwnames, a) < 0) return NULL;
  HurrayState *st = hurray__py_state_of_type((PyTypeObject *)cls);

  uint64_t address = 0, byte_size = 0, handle = 0;
  HurrayPyMemory memory = {.memory_class = HURRAY_MEM_DEVICE, .sync_mode = HURRAY_SYNC_READY};
  if (hurray__py_u64(st, a[FA_ADDRESS], "address", &address) < 0) return NULL;
#if UINTPTR_MAX < UINT64_MAX
  if (address > UINTPTR_MAX) {
    return hurray__py_raise(st, HURRAY_PY_EXC_INVALID_ARGUMENT, "address does not fit a pointer");
  }
#endif
  const HurrayDTypeInfo *dtype = hurray__py_dtype_arg(st, a[FA_DTYPE]);
  if (dtype == NULL) return NULL;
  int64_t shape[HURRAY_MAX_NDIM];
  int64_t strides[HURRAY_MAX_NDIM];
  HurrayArray array = {.dtype = dtype->code};
  if (array_args(st, a[FA_SHAPE], a[FA_STRIDES], shape, strides, &array) < 0) return NULL;
  if (hurray__py_device_arg(st, a[FA_DEVICE], &memory.tag, &memory.device_id) < 0) return NULL;
  if ((a[FA_MEMORY_CLASS] != NULL &&
       hurray__py_memory_class_arg(st, a[FA_MEMORY_CLASS], &memory.memory_class) < 0) ||
      (a[FA_SYNC_MODE] != NULL &&
       hurray__py_sync_mode_arg(st, a[FA_SYNC_MODE], &memory.sync_mode) < 0) ||
      (a[FA_SYNC_HANDLE] != NULL &&
       hurray__py_u64(st, a[FA_SYNC_HANDLE], "sync_handle", &handle) < 0) ||
      (a[FA_SYNC_VALUE] != NULL &&
       hurray__py_u64(st, a[FA_SYNC_VALUE], "sync_value", &memory.sync_value) < 0) ||
      (a[FA_BYTE_OFFSET] != NULL &&
       hurray__py_u64(st, a[FA_BYTE_OFFSET], "byte_offset", &array.byte_offset) < 0)) {
    return NULL;
  }
  memory.sync_handle = (void *)(uintptr_t)handle;
  if (a[FA_PEER_INDEX] != NULL) {
    long long peer = 0;
    if (hurray__py_int_in_range(st, a[FA_PEER_INDEX], 0, UINT16_MAX, "peer_index", &peer) < 0) {
      return NULL;
    }
    memory.peer_device_id = (uint16_t)peer;
  }
  if (a[FA_READONLY] != NULL) {
    memory.readonly = PyObject_IsTrue(a[FA_READONLY]);
    if (memory.readonly < 0) return NULL;
  }
  if (a[FA_BYTE_SIZE] == NULL || a[FA_BYTE_SIZE] == Py_None) {
    /* The memory ends where the last element the array addresses ends. */
    uint64_t begin = 0;
    HurrayError error = {0};
    int status = hurray_array_span(&array, &begin, &byte_size, &error);
    if (status != HURRAY_OK) return hurray__py_raise_status(st, status, &error);
  } else if (hurray__py_u64(st, a[FA_BYTE_SIZE], "byte_size", &byte_size) < 0) {
    return NULL;
  }
  /* Unsafe by design (ADR-035), but memory never wraps past the top of the address space. */
  if (hurray__py_address_form(memory.tag) && byte_size > 0 &&
      byte_size - 1 > UINTPTR_MAX - (uintptr_t)address) {
    return hurray__py_raise(st, HURRAY_PY_EXC_INVALID_ARGUMENT,
                            "%llu bytes at address %p: the range wraps the address space",
                            (unsigned long long)byte_size, (void *)(uintptr_t)address);
  }
  PyObject *owner = a[FA_OWNER] == NULL || a[FA_OWNER] == Py_None ? NULL : Py_NewRef(a[FA_OWNER]);
  PyObject *tensor = hurray__py_tensor_from_memory(
      st, (void *)(uintptr_t)address, byte_size, &memory, &array, owner,
      owner == NULL ? NULL : hurray__py_owner_release_object);
  if (tensor != NULL && memory.tag == HURRAY_DEVICE_CPU && byte_size > 0 &&
      cpu_range_mapped((uintptr_t)address, byte_size) == 0) {
    Py_DECREF(tensor); /* releases the owner */
    return hurray__py_raise(st, HURRAY_PY_EXC_INVALID_ARGUMENT,
                            "%llu bytes at address %p: not all of them are mapped in this "
                            "process",
                            (unsigned long long)byte_size, (void *)(uintptr_t)address);
  }
  return tensor;
}

/* ---- from_parts: multi-buffer layouts over the memory of dense tensors -------------------- */

static int layout_arg(HurrayState *st, PyObject *obj) {
  uint8_t layout = 0;
  return hurray__py_enum_arg(st, obj, hurray_layout_name, HURRAY_ELAYOUT, "layout", &layout) < 0
             ? -1
             : layout;
}

/* Adds `base` to every buffer index of a descriptor made by hurray_tensor_desc_clone (one heap
 * block we own: its arrays are writable, and a clone is a tree, never a DAG). */
static void rebase_buffers(HurrayTensorDesc *tensor, uint32_t base) {
  HurrayArray *parts = (HurrayArray *)(uintptr_t)tensor->parts;
  for (uint32_t i = 0; i < tensor->nparts; i++) parts[i].buffer += base;
  HurrayTensorDesc *children = (HurrayTensorDesc *)(uintptr_t)tensor->children;
  for (uint32_t i = 0; i < tensor->nchildren; i++) rebase_buffers(&children[i], base);
}

/* A live hurray.Tensor argument, or NULL with TypeError naming `what` and `index`. */
static HurrayTensorObject *tensor_item(HurrayState *st, PyObject *obj, const char *what,
                                       Py_ssize_t index) {
  if (!Py_IS_TYPE(obj, st->tensor_type)) {
    PyErr_Format(PyExc_TypeError, "%s %zd must be a hurray.Tensor, not %.200s", what, index,
                 Py_TYPE(obj)->tp_name);
    return NULL;
  }
  HurrayTensorObject *tensor = (HurrayTensorObject *)obj;
  return hurray__py_tensor_live(st, tensor) < 0 ? NULL : tensor;
}

/* What from_parts collects before building anything. */
typedef struct Parts {
  uint32_t nparts;
  HurrayArray arrays[HURRAY_MAX_PARTS];
  HurrayTensorObject *tensors[HURRAY_MAX_PARTS]; /* borrowed from `items` */
  uint32_t nchildren;
  PyObject *pairs;            /* a tuple of (name, Tensor) pairs, or NULL */
  HurrayTensorDesc **clones;  /* nchildren clones of the children, rebased */
  HurrayTensorDesc *children; /* their roots, by value, as the descriptor wants them */
  const char **names;         /* UTF-8 of the names, owned by the name objects */
  PyObject *owner;            /* a tuple of every source tensor */
} Parts;

static void parts_clear(Parts *p) {
  for (uint32_t i = 0; p->clones != NULL && i < p->nchildren; i++) {
    hurray_tensor_desc_destroy(p->clones[i]);
  }
  PyMem_Free(p->clones);
  PyMem_Free(p->children);
  PyMem_Free((void *)p->names);
  Py_XDECREF(p->pairs);
  Py_XDECREF(p->owner);
}

/* The children argument: a mapping {name: Tensor} or a sequence of (name, Tensor) pairs, in
 * order. Fills p->pairs, p->nchildren and the name and clone arrays. */
static int children_arg(HurrayState *st, PyObject *obj, Parts *p) {
  PyObject *items =
      PyMapping_Check(obj) && !PySequence_Check(obj) ? PyMapping_Items(obj) : Py_NewRef(obj);
  if (items == NULL) return -1;
  p->pairs = hurray__py_sequence_tuple(items, "children must be a mapping or a sequence of (name, tensor)");
  Py_DECREF(items);
  if (p->pairs == NULL) return -1;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(p->pairs);
  if ((uint64_t)n > HURRAY_MAX_CHILDREN) {
    hurray__py_raise_statusf(st, HURRAY_ELIMIT, "%zd children exceed HURRAY_MAX_CHILDREN (%u)", n,
                             HURRAY_MAX_CHILDREN);
    return -1;
  }
  p->nchildren = (uint32_t)n;
  p->clones = PyMem_Calloc((size_t)n + 1, sizeof *p->clones);
  p->children = PyMem_Calloc((size_t)n + 1, sizeof *p->children);
  p->names = PyMem_Calloc((size_t)n + 1, sizeof *p->names);
  if (p->clones == NULL || p->children == NULL || p->names == NULL) {
    PyErr_NoMemory();
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *pair = PySequence_Fast_GET_ITEM(p->pairs, i);
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 ||
        !PyUnicode_Check(PyTuple_GET_ITEM(pair, 0))) {
      PyErr_Format(PyExc_TypeError, "child %zd must be a (str, hurray.Tensor) pair, not %R", i,
                   pair);
      return -1;
    }
    Py_ssize_t size = 0;
    const char *name = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(pair, 0), &size);
    if (name == NULL) return -1;
    if (strlen(name) != (size_t)size) {
      hurray__py_raise(st, HURRAY_PY_EXC_INVALID_ARGUMENT, "child name %R contains a NUL",
                       PyTuple_GET_ITEM(pair, 0));
      return -1;
    }
    p->names[i] = name;
    if (tensor_item(st, PyTuple_GET_ITEM(pair, 1), "child", i) == NULL) return -1;
  }
  return 0;
}

static const char *const kFromPartsNames[] = {
    "layout", "parts", "dtype", "shape", "axis", "block_size", "coalesced", "children", NULL};
enum {
  FP_LAYOUT,
  FP_PARTS,
  FP_DTYPE,
  FP_SHAPE,
  FP_AXIS,
  FP_BLOCK_SIZE,
  FP_COALESCED,
  FP_CHILDREN,
  FP_COUNT
};

static PyObject *tensor_from_parts(PyObject *cls, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames) {
  static const HurrayPyParser parser = {"from_parts", kFromPartsNames, 0, 2, 1};
  PyObject *a[FP_COUNT];
  if (hurray__py_parse(&parser, args, nargs, kwnames, a) < 0) return NULL;
  HurrayState *st = hurray__py_state_of_type((PyTypeObject *)cls);
  int layout = layout_arg(st, a[FP_LAYOUT]);
  if (layout < 0) return NULL;
  const HurrayLayoutInfo *rule = hurray_layout_info(layout);

  Parts p = {0};
  PyObject *items = NULL;
  HurrayBufferList *list = NULL;
  PyObject *result = NULL;
  int64_t shape[HURRAY_MAX_NDIM];
  HurrayTensorDesc desc = {.layout = (uint32_t)layout};

  if (a[FP_PARTS] != NULL) {
    items = hurray__py_sequence_tuple(a[FP_PARTS], "parts must be a sequence of hurray.Tensor");
    if (items == NULL) goto done;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(items);
    if (n > HURRAY_MAX_PARTS) {
      hurray__py_raise_statusf(st, HURRAY_ELIMIT, "%zd parts exceed HURRAY_MAX_PARTS (%d)", n,
                               HURRAY_MAX_PARTS);
      goto done;
    }
    p.nparts = (uint32_t)n;
  }
  for (uint32_t i = 0; i < p.nparts; i++) {
    HurrayTensorObject *part = tensor_item(st, PySequence_Fast_GET_ITEM(items, i), "part", i);
    if (part == NULL) goto done;
    if (part->desc->layout != HURRAY_LAYOUT_DENSE) {
      hurray__py_raise_statusf(st, HURRAY_ELAYOUT, "part %u is a %s tensor; parts are dense", i,
                               hurray_layout_name((int)part->desc->layout));
      goto done;
    }
    p.tensors[i] = part;
    p.arrays[i] = part->desc->parts[0];
  }
  if (a[FP_CHILDREN] != NULL && a[FP_CHILDREN] != Py_None &&
      children_arg(st, a[FP_CHILDREN], &p) < 0) {
    goto done;
  }

  /* dtype and shape: given, or those of the values part where the layout says. */
  const HurrayArray *values_array =
      rule->values_part < p.nparts ? &p.arrays[rule->values_part] : NULL;
  if (a[FP_DTYPE] != NULL && a[FP_DTYPE] != Py_None) {
    const HurrayDTypeInfo *dtype = hurray__py_dtype_arg(st, a[FP_DTYPE]);
    if (dtype == NULL) goto done;
    desc.dtype = dtype->code;
  } else if (values_array != NULL) {
    desc.dtype = values_array->dtype;
  }
  if (a[FP_SHAPE] != NULL && a[FP_SHAPE] != Py_None) {
    if (dims_arg(st, a[FP_SHAPE], "shape", shape, &desc.ndim) < 0) goto done;
    desc.shape = shape;
  } else if (values_array != NULL && (rule->flags & HURRAY_LAYOUT_VALUES_SHAPE)) {
    desc.ndim = values_array->ndim;
    desc.shape = values_array->shape;
  } else if (layout != HURRAY_LAYOUT_COMPOSITE) {
    PyErr_Format(PyExc_TypeError, "from_parts() needs shape= for a %s tensor",
                 hurray_layout_name(layout));
    goto done;
  }
  long long axis = 0;
  if ((a[FP_AXIS] != NULL &&
       hurray__py_int_in_range(st, a[FP_AXIS], 0, HURRAY_MAX_NDIM - 1, "axis", &axis) < 0) ||
      (a[FP_BLOCK_SIZE] != NULL &&
       hurray__py_i64(st, a[FP_BLOCK_SIZE], "block_size", &desc.block_size) < 0)) {
    goto done;
  }
  desc.axis = (int32_t)axis;
  if (a[FP_COALESCED] != NULL) {
    int coalesced = PyObject_IsTrue(a[FP_COALESCED]);
    if (coalesced < 0) goto done;
    if (coalesced) desc.flags |= HURRAY_TENSOR_COALESCED;
  }

  /* The buffer list: a handle of each part's buffer, then each child's whole list. */
  HurrayError error = {0};
  int status = hurray_buffer_list_create(p.nparts, &list, &error);
  uint32_t flags = 0;
  for (uint32_t i = 0; status == HURRAY_OK && i < p.nparts; i++) {
    HurrayTensorObject *part = p.tensors[i];
    flags |= part->context->flags;
    uint32_t index = list->count;
    status = hurray__py_share_buffer(list, hurray__py_tensor_buffer(part, &p.arrays[i]),
                                     rule->roles[i], &error);
    p.arrays[i].buffer = index;
  }
  for (uint32_t i = 0; status == HURRAY_OK && i < p.nchildren; i++) {
    HurrayTensorObject *child =
        (HurrayTensorObject *)PyTuple_GET_ITEM(PySequence_Fast_GET_ITEM(p.pairs, i), 1);
    const HurrayBufferList *from = child->context->buffers;
    flags |= child->context->flags;
    status = hurray_tensor_desc_clone(child->desc, &p.clones[i], &error);
    if (status != HURRAY_OK) break;
    rebase_buffers(p.clones[i], list->count);
    p.children[i] = *p.clones[i];
    for (uint32_t k = 0; status == HURRAY_OK && k < from->count; k++) {
      status = hurray__py_share_buffer(list, from->buffers[k], from->roles[k], &error);
    }
  }
  desc.parts = p.arrays;
  desc.nparts = p.nparts;
  desc.nchildren = p.nchildren;
  desc.children = p.children;
  desc.child_names = p.names;
  /* A constructor of user data also checks what the index parts say (CPU memory). */
  if (status == HURRAY_OK)
    status = hurray_tensor_validate(&desc, list, HURRAY_VALIDATE_CONTENTS, &error);
  if (status != HURRAY_OK) {
    hurray__py_raise_status(st, status, &error);
    goto done;
  }

  /* The owner: every source tensor, whose memory the handles share. */
  p.owner = PyTuple_New((Py_ssize_t)(p.nparts + p.nchildren));
  if (p.owner == NULL) goto done;
  for (uint32_t i = 0; i < p.nparts; i++) {
    PyTuple_SET_ITEM(p.owner, i, Py_NewRef((PyObject *)p.tensors[i]));
  }
  for (uint32_t i = 0; i < p.nchildren; i++) {
    PyObject *child = PyTuple_GET_ITEM(PySequence_Fast_GET_ITEM(p.pairs, i), 1);
    PyTuple_SET_ITEM(p.owner, p.nparts + i, Py_NewRef(child));
  }
  HurrayTensorContext *context = NULL;
  status = hurray_tensor_context_create(&desc, list, flags & HURRAY_BUFFER_READ_ONLY, p.owner,
                                        hurray__py_owner_release_object, &context, &error);
  list = NULL;    /* the create took both, */
  p.owner = NULL; /* whatever happened */
  if (status != HURRAY_OK) {
    hurray__py_raise_status(st, status, &error);
    goto done;
  }
  result = hurray__py_tensor_adopt(st, context);

done:
  hurray_buffer_list_destroy(list);
  parts_clear(&p);
  Py_XDECREF(items);
  return result;
}

/* ============================================================================================
 * Lifetime and garbage collection
 * ============================================================================================ */

/* Releases the context of a tensor being cleared or deallocated (the GIL is held). An owner
 * reference of the object kind -- set by this module, so its meaning is known -- is dropped
 * here rather than by the context's release, which would take the GIL again and guard the
 * exception in flight: the one saving that matters on the exchange path. */
static void release_context(HurrayTensorContext *context) {
  PyObject *owner = NULL;
  if (context->owner_release == hurray__py_owner_release_object) {
    owner = context->owner;
    context->owner_release = NULL;
  }
  hurray_tensor_context_release(context);
  Py_XDECREF(owner);
}

static int tensor_traverse(PyObject *op, visitproc visit, void *arg) {
  HurrayTensorObject *self = (HurrayTensorObject *)op;
  Py_VISIT(Py_TYPE(op));
  HurrayTensorContext *context = self->context;
  if (context == NULL) return 0;
  if (context->owner_release == hurray__py_owner_release_object) {
    Py_VISIT((PyObject *)context->owner);
  } else if (context->owner_release == hurray__py_owner_release_view) {
    Py_VISIT(((Py_buffer *)context->owner)->obj);
  }
  return 0;
}

/* Breaks a reference cycle through the owner (e.g. an owner object that refers back to the
 * tensor). While a buffer export is alive the memory must stay: the cycle is then left to be
 * broken elsewhere (the export holds the tensor, so it is part of the same garbage). */
static int tensor_clear(PyObject *op) {
  HurrayTensorObject *self = (HurrayTensorObject *)op;
  if (self->exports == 0 && self->context != NULL) {
    HurrayTensorContext *context = self->context;
    self->context = NULL;
    self->desc = NULL;
    release_context(context);
  }
  return 0;
}

static void tensor_dealloc(PyObject *op) {
  HurrayTensorObject *self = (HurrayTensorObject *)op;
  PyTypeObject *type = Py_TYPE(op);
  PyObject_GC_UnTrack(op);
  /* A chain of tensors each owning the one it was made from (from_hurray(from_hurray(...)))
   * is freed without recursing once per link. */
  Py_TRASHCAN_BEGIN(op, tensor_dealloc) if (self->weakreflist != NULL) PyObject_ClearWeakRefs(op);
  if (self->context != NULL) {
    HurrayTensorContext *context = self->context;
    self->context = NULL;
    release_context(context);
  }
  type->tp_free(op);
  Py_DECREF(type);
  Py_TRASHCAN_END
}

int hurray__py_tensor_live(HurrayState *st, HurrayTensorObject *self) {
  if (self->context != NULL) return 0;
  hurray__py_raise(st, HURRAY_PY_EXC_STATE,
                   "the tensor was cleared by the garbage collector (reference cycle)");
  return -1;
}

const HurrayArray *hurray__py_tensor_values(HurrayState *st, HurrayTensorObject *self) {
  if (hurray__py_tensor_live(st, self) < 0) return NULL;
  if (self->desc->nparts == 0) {
    hurray__py_raise(st, HURRAY_PY_EXC_UNSUPPORTED,
                     "a %s tensor has no arrays of its own (see its children)",
                     hurray_layout_name((int)self->desc->layout));
    return NULL;
  }
  return &self->desc->parts[0];
}

/* Byte strides of a whole-byte host array; extent-1 dimensions get 0, so an arbitrary stride
 * there (legal, and common from DLPack producers) never overflows. */
static int host_byte_strides(HurrayState *st, const HurrayArray *array, uint64_t itemsize,
                             int64_t *out) {
  hurray__py_array_strides(array, out);
  for (int32_t i = 0; i < array->ndim; i++) {
    if (array->shape[i] <= 1) {
      out[i] = 0;
    } else if (__builtin_mul_overflow(out[i], (int64_t)itemsize, &out[i])) {
      hurray__py_raise_statusf(st, HURRAY_EOVERFLOW, "a byte stride overflows 64 bits");
      return -1;
    }
  }
  return 0;
}

int hurray__py_tensor_host_view(HurrayState *st, HurrayTensorObject *self, const char *operation,
                                HurrayHostView *view) {
  const HurrayArray *array = hurray__py_tensor_values(st, self);
  if (array == NULL) return -1;
  if (self->desc->layout != HURRAY_LAYOUT_DENSE) {
    hurray__py_raise(st, HURRAY_PY_EXC_UNSUPPORTED, "%s needs a dense tensor, not a %s one",
                     operation, hurray_layout_name((int)self->desc->layout));
    return -1;
  }
  HurrayBuffer *buffer = hurray__py_tensor_buffer(self, array);
  if (buffer->desc.device_tag != HURRAY_DEVICE_CPU) {
    const char *name = hurray_device_name(buffer->desc.device_tag);
    if (name != NULL) {
      hurray__py_raise(st, HURRAY_PY_EXC_BUFFER, "%s needs CPU memory; the tensor is on %s:%u",
                       operation, name, (unsigned)buffer->desc.device_id);
    } else {
      char hex[8];
      snprintf(hex, sizeof hex, "0x%02X", (unsigned)buffer->desc.device_tag);
      hurray__py_raise(st, HURRAY_PY_EXC_BUFFER,
                       "%s needs CPU memory; the tensor is on device tag %s", operation, hex);
    }
    return -1;
  }
  /* CPU buffers are always READY (buffer-protocol.md §4 rule 1): nothing to wait for. */
  HurrayError error = {0};
  int status = hurray_array_span(array, &view->begin, &view->end, &error);
  if (status != HURRAY_OK) {
    hurray__py_raise_status(st, status, &error);
    return -1;
  }
  view->array = array;
  view->dtype = hurray_dtype_info(array->dtype);
  view->buffer = buffer;
  view->readonly = hurray__py_tensor_readonly(self);
  return 0;
}

/* ============================================================================================
 * Properties
 * ============================================================================================ */

#define SELF ((HurrayTensorObject *)op)

static PyObject *int64_tuple(int32_t n, const int64_t *values) {
  PyObject *tuple = PyTuple_New(n);
  if (tuple == NULL) return NULL;
  for (int32_t i = 0; i < n; i++) {
    PyObject *item = PyLong_FromLongLong(values[i]);
    if (item == NULL) {
      Py_DECREF(tuple);
      return NULL;
    }
    PyTuple_SET_ITEM(tuple, i, item);
  }
  return tuple;
}

/* The logical numel of the tensor (its shape, whatever the layout). */
static int tensor_numel(HurrayState *st, HurrayTensorObject *self, uint64_t *numel) {
  HurrayArray logical = {
      .shape = self->desc->shape, .ndim = self->desc->ndim, .dtype = self->desc->dtype};
  HurrayError error = {0};
  int status = hurray_array_numel(&logical, numel, &error);
  if (status != HURRAY_OK) {
    hurray__py_raise_status(st, status, &error);
    return -1;
  }
  return 0;
}

/* The first part of the tensor (the values of a DENSE one) or return NULL. */
#define VALUES_OR_NULL(name)                                    \
  HurrayState *st = hurray__py_state_of(op);                    \
  const HurrayArray *name = hurray__py_tensor_values(st, SELF); \
  if (name == NULL) return NULL

/* A live tensor or return NULL. */
#define LIVE_OR_NULL()                       \
  HurrayState *st = hurray__py_state_of(op); \
  if (hurray__py_tensor_live(st, SELF) < 0) return NULL

static PyObject *get_shape(PyObject *op, void *c) {
  (void)c;
  LIVE_OR_NULL();
  return int64_tuple(SELF->desc->ndim, SELF->desc->shape);
}

static PyObject *get_ndim(PyObject *op, void *c) {
  (void)c;
  LIVE_OR_NULL();
  return PyLong_FromLong(SELF->desc->ndim);
}

static PyObject *get_dtype(PyObject *op, void *c) {
  (void)c;
  LIVE_OR_NULL();
  PyObject *dtype = hurray__py_dtype_object(st, SELF->desc->dtype);
  return dtype == NULL ? Py_NewRef(Py_None) : Py_NewRef(dtype); /* COMPOSITE has none */
}

static PyObject *get_size(PyObject *op, void *c) {
  (void)c;
  LIVE_OR_NULL();
  uint64_t numel = 0;
  if (tensor_numel(st, SELF, &numel) < 0) return NULL;
  return PyLong_FromUnsignedLongLong(numel);
}

static PyObject *get_nbytes(PyObject *op, void *c) {
  (void)c;
  LIVE_OR_NULL();
  uint64_t numel = 0, nbytes = 0;
  if (tensor_numel(st, SELF, &numel) < 0) return NULL;
  HurrayError error = {0};
  int status = hurray_dtype_storage_bytes(SELF->desc->dtype, numel, &nbytes, &error);
  if (status != HURRAY_OK) return hurray__py_raise_status(st, status, &error);
  return PyLong_FromUnsignedLongLong(nbytes);
}

static PyObject *get_strides(PyObject *op, void *c) {
  (void)c;
  VALUES_OR_NULL(values);
  if (SELF->desc->layout != HURRAY_LAYOUT_DENSE) Py_RETURN_NONE;
  int64_t strides[HURRAY_MAX_NDIM];
  hurray__py_array_strides(values, strides);
  return int64_tuple(values->ndim, strides);
}

static PyObject *get_byte_offset(PyObject *op, void *c) {
  (void)c;
  VALUES_OR_NULL(values);
  return PyLong_FromUnsignedLongLong(values->byte_offset);
}

static PyObject *get_buffer_address(PyObject *op, void *c) {
  (void)c;
  VALUES_OR_NULL(values);
  return PyLong_FromVoidPtr(hurray__py_tensor_buffer(SELF, values)->data);
}

static PyObject *get_device(PyObject *op, void *c) {
  (void)c;
  VALUES_OR_NULL(values);
  const HurrayBufferDesc *desc = &hurray__py_tensor_buffer(SELF, values)->desc;
  return hurray__py_device_new(st, desc->device_tag, desc->device_id);
}

static PyObject *get_memory_class(PyObject *op, void *c) {
  (void)c;
  VALUES_OR_NULL(values);
  int mc = hurray__py_tensor_buffer(SELF, values)->desc.memory_class;
  return PyUnicode_FromString(hurray_memory_class_name(mc));
}

static PyObject *get_sync_mode(PyObject *op, void *c) {
  (void)c;
  VALUES_OR_NULL(values);
  int sync = hurray__py_tensor_buffer(SELF, values)->desc.sync_mode;
  return PyUnicode_FromString(hurray_sync_mode_name(sync));
}

static PyObject *get_layout(PyObject *op, void *c) {
  (void)c;
  LIVE_OR_NULL();
  return PyUnicode_FromString(hurray_layout_name((int)SELF->desc->layout));
}

static PyObject *get_readonly(PyObject *op, void *c) {
  (void)c;
  LIVE_OR_NULL();
  return PyBool_FromLong(hurray__py_tensor_readonly(SELF));
}

static PyObject *get_axis(PyObject *op, void *c) {
  (void)c;
  LIVE_OR_NULL();
  return PyLong_FromLong(SELF->desc->axis);
}

static PyObject *get_block_size(PyObject *op, void *c) {
  (void)c;
  LIVE_OR_NULL();
  return PyLong_FromLongLong(SELF->desc->block_size);
}

static PyObject *get_coalesced(PyObject *op, void *c) {
  (void)c;
  LIVE_OR_NULL();
  return PyBool_FromLong((SELF->desc->flags & HURRAY_TENSOR_COALESCED) != 0);
}

/* Part `index` of a live tensor as a dense Tensor over the same memory (a view: it keeps the
 * tensor alive, and shares only the one buffer the part addresses). */
static PyObject *part_view(HurrayState *st, HurrayTensorObject *self, uint32_t index) {
  HurrayArray array = self->desc->parts[index];
  uint32_t buffer = array.buffer;
  array.buffer = 0;
  const HurrayTensorDesc dense = {
      .layout = HURRAY_LAYOUT_DENSE,
      .ndim = array.ndim,
      .shape = array.shape,
      .parts = &array,
      .nparts = 1,
      .dtype = array.dtype,
  };
  HurrayTensorContext *context = hurray__py_tensor_share(st, self, &dense, buffer);
  return context == NULL ? NULL : hurray__py_tensor_adopt(st, context);
}

static PyObject *get_parts(PyObject *op, void *c) {
  (void)c;
  LIVE_OR_NULL();
  PyObject *parts = PyTuple_New(SELF->desc->nparts);
  for (uint32_t i = 0; parts != NULL && i < SELF->desc->nparts; i++) {
    PyObject *part = part_view(st, SELF, i);
    if (part == NULL) {
      Py_CLEAR(parts);
    } else {
      PyTuple_SET_ITEM(parts, i, part);
    }
  }
  return parts;
}

static PyObject *get_children(PyObject *op, void *c) {
  (void)c;
  LIVE_OR_NULL();
  PyObject *children = PyDict_New();
  for (uint32_t i = 0; children != NULL && i < SELF->desc->nchildren; i++) {
    /* A child indexes the whole buffer list of its parent: the view shares all of it. */
    HurrayTensorContext *context = hurray__py_tensor_share(st, SELF, &SELF->desc->children[i], -1);
    PyObject *child = context == NULL ? NULL : hurray__py_tensor_adopt(st, context);
    if (child == NULL || PyDict_SetItemString(children, SELF->desc->child_names[i], child) < 0) {
      Py_CLEAR(children);
    }
    Py_XDECREF(child);
  }
  return children;
}

static PyObject *buffer_info(HurrayState *st, const HurrayBuffer *buffer, int role) {
  const HurrayBufferDesc *d = &buffer->desc;
  return Py_BuildValue(
      "{s:s,s:N,s:s,s:s,s:N,s:K,s:K,s:I,s:N,s:O,s:H}", "role", hurray_buffer_role_name(role),
      "device", hurray__py_device_new(st, d->device_tag, d->device_id), "memory_class",
      hurray_memory_class_name(d->memory_class), "sync_mode", hurray_sync_mode_name(d->sync_mode),
      "sync_handle", PyLong_FromVoidPtr(buffer->sync_handle), "sync_value",
      (unsigned long long)buffer->sync_value, "byte_size", (unsigned long long)d->byte_size,
      "alignment", (unsigned)d->alignment, "address", PyLong_FromVoidPtr(buffer->data), "readonly",
      (buffer->flags & HURRAY_BUFFER_READ_ONLY) ? Py_True : Py_False, "peer_index",
      (unsigned short)d->peer_device_id);
}

static PyObject *get_buffers(PyObject *op, void *c) {
  (void)c;
  LIVE_OR_NULL();
  const HurrayBufferList *list = SELF->context->buffers;
  PyObject *buffers = PyTuple_New(list->count);
  for (uint32_t i = 0; buffers != NULL && i < list->count; i++) {
    PyObject *info = buffer_info(st, list->buffers[i], list->roles[i]);
    if (info == NULL) {
      Py_CLEAR(buffers);
    } else {
      PyTuple_SET_ITEM(buffers, i, info);
    }
  }
  return buffers;
}

static PyObject *get_array_namespace(PyObject *op, void *closure); /* with the namespace */

static PyGetSetDef tensor_getset[] = {
    {"shape", get_shape, NULL, PyDoc_STR("The logical shape, a tuple of ints."), NULL},
    {"ndim", get_ndim, NULL, PyDoc_STR("The number of dimensions."), NULL},
    {"dtype", get_dtype, NULL, PyDoc_STR("The element dtype (a hurray.dtype)."), NULL},
    {"size", get_size, NULL, PyDoc_STR("The number of elements."), NULL},
    {"nbytes", get_nbytes, NULL,
     PyDoc_STR("Bytes of `size` packed elements: ceil(size * dtype.bits / 8)."), NULL},
    {"strides", get_strides, NULL,
     PyDoc_STR("Strides in elements, or None for layouts other than dense.\n"
               "\n"
               "Row-major ones for a contiguous tensor.\n"),
     NULL},
    {"byte_offset", get_byte_offset, NULL,
     PyDoc_STR("Bytes from the buffer's data to element (0, ..., 0) of the values."), NULL},
    {"buffer_address", get_buffer_address, NULL,
     PyDoc_STR("The address of the values buffer's data, an int.\n"
               "\n"
               "64-byte aligned on address-form devices, where element (0, ..., 0) is\n"
               "at buffer_address + byte_offset.\n"),
     NULL},
    {"device", get_device, NULL, PyDoc_STR("Where the values live, a hurray.Device."), NULL},
    {"memory_class", get_memory_class, NULL,
     PyDoc_STR("The kind of memory: 'device', 'host' (pinned), 'unified' or 'peer'.\n"), NULL},
    {"sync_mode", get_sync_mode, NULL,
     PyDoc_STR("When the data may be read: 'ready', 'stream', 'event' or 'timeline'.\n"), NULL},
    {"layout", get_layout, NULL,
     PyDoc_STR("How the values are stored.\n"
               "\n"
               "'dense', 'per_channel', 'block', 'sparse_coo', 'sparse_csr', 'paged' or\n"
               "'composite'."),
     NULL},
    {"readonly", get_readonly, NULL, PyDoc_STR("Whether the memory may not be written."), NULL},
    {"axis", get_axis, NULL,
     PyDoc_STR("The quantised or paged axis of a per_channel, block or paged tensor; else 0."),
     NULL},
    {"block_size", get_block_size, NULL,
     PyDoc_STR("Elements per block (block) or rows per page (paged); else 0."), NULL},
    {"coalesced", get_coalesced, NULL,
     PyDoc_STR("Whether a sparse_coo tensor's indices are sorted and unique."), NULL},
    {"parts", get_parts, NULL,
     PyDoc_STR("The tensor's arrays, in its layout's order, as dense tensors.\n"
               "\n"
               "Each is a view over the same memory that keeps this tensor alive:\n"
               "(values,) for dense, (values, scales[, zero_points]) for per_channel,\n"
               "... and () for composite.\n"),
     NULL},
    {"children", get_children, NULL,
     PyDoc_STR("The children of a composite tensor, {name: hurray.Tensor}, in order.\n"
               "\n"
               "Views over the same memory; {} for other layouts.\n"),
     NULL},
    {"buffers", get_buffers, NULL,
     PyDoc_STR("Every buffer of the tensor, in order, as a tuple of dicts.\n"
               "\n"
               "Each dict has role, device, memory_class, sync_mode, sync_handle,\n"
               "sync_value, byte_size, alignment, address, readonly and peer_index.\n"),
     NULL},
    {"__array_namespace__", get_array_namespace, NULL,
     PyDoc_STR("The array API namespace method, where the mode offers it.\n"
               "\n"
               "On Tier 1 tensors always, on Tier 2 and Tier 3 tensors in relaxed mode\n"
               "only (ADR-022); AttributeError elsewhere.\n"),
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* ============================================================================================
 * Host reads: tobytes() and tolist()
 * ============================================================================================ */

/* Copies the elements of a whole-byte array in C order: contiguous runs with memcpy. */
static void gather(char *dst, const char *src, int32_t ndim, const int64_t *shape,
                   const int64_t *byte_strides, size_t itemsize) {
  if (ndim == 0) {
    memcpy(dst, src, itemsize);
    return;
  }
  size_t inner = (size_t)shape[ndim - 1];
  int contiguous_rows = inner <= 1 || byte_strides[ndim - 1] == (int64_t)itemsize;
  int64_t index[HURRAY_MAX_NDIM] = {0};
  for (;;) {
    if (contiguous_rows) {
      memcpy(dst, src, inner * itemsize);
      dst += inner * itemsize;
    } else {
      const char *p = src;
      for (size_t i = 0; i < inner; i++, p += byte_strides[ndim - 1], dst += itemsize) {
        memcpy(dst, p, itemsize);
      }
    }
    int32_t d = ndim - 2;
    for (; d >= 0; d--) {
      src += byte_strides[d];
      if (++index[d] < shape[d]) break;
      src -= byte_strides[d] * shape[d];
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

/* A C-order copy of the elements of a host-readable tensor, planned then run. */
typedef struct HostCopy {
  HurrayHostView view;
  uint64_t numel;
  uint64_t nbytes;
  int contiguous;
  int64_t byte_strides[HURRAY_MAX_NDIM];
} HostCopy;

static int host_copy_prepare(HurrayState *st, HurrayTensorObject *self, const char *operation,
                             HostCopy *copy) {
  if (hurray__py_tensor_host_view(st, self, operation, &copy->view) < 0) return -1;
  const HurrayArray *array = copy->view.array;
  const HurrayDTypeInfo *dtype = copy->view.dtype;
  HurrayError error = {0};
  int status = hurray_array_numel(array, &copy->numel, &error);
  if (status == HURRAY_OK) {
    status = hurray_dtype_storage_bytes(array->dtype, copy->numel, &copy->nbytes, &error);
  }
  if (status != HURRAY_OK) {
    hurray__py_raise_status(st, status, &error);
    return -1;
  }
  if (copy->nbytes > PY_SSIZE_T_MAX) {
    hurray__py_raise_statusf(st, HURRAY_ELIMIT, "%s: %llu bytes are too many", operation,
                             (unsigned long long)copy->nbytes);
    return -1;
  }
  copy->contiguous = hurray__py_array_is_c_contiguous(array);
  if (copy->contiguous) return 0;
  if (dtype->bits % 8 != 0) {
    hurray__py_raise(st, HURRAY_PY_EXC_UNSUPPORTED,
                     "%s of a non-contiguous %s tensor is not supported (sub-byte elements are "
                     "only read packed and contiguous)",
                     operation, dtype->name);
    return -1;
  }
  return host_byte_strides(st, array, dtype->bits / 8, copy->byte_strides);
}

/* Writes copy->nbytes bytes to `dst`, without the GIL for large copies. */
static void host_copy_run(const HostCopy *copy, char *dst) {
  const HurrayArray *array = copy->view.array;
  const char *src = hurray__py_buffer_at(copy->view.buffer, array->byte_offset);
  if (copy->numel == 0) return;
  int nogil = copy->nbytes >= HURRAY_PY_NOGIL_COPY_BYTES;
  PyThreadState *thread = nogil ? PyEval_SaveThread() : NULL;
  if (copy->contiguous) {
    memcpy(dst, src, (size_t)copy->nbytes);
  } else {
    gather(dst, src, array->ndim, array->shape, copy->byte_strides,
           (size_t)(copy->view.dtype->bits / 8));
  }
  if (nogil) PyEval_RestoreThread(thread);
  unsigned tail_bits = (unsigned)((copy->numel * copy->view.dtype->bits) % 8);
  if (tail_bits != 0) {
    /* The bits of the last byte past the last element belong to no element: zero them. */
    unsigned char *last = (unsigned char *)dst + copy->nbytes - 1;
    *last = (unsigned char)(*last & ((1u << tail_bits) - 1u));
  }
}

static PyObject *tensor_tobytes(PyObject *op, PyObject *unused) {
  (void)unused;
  HurrayState *st = hurray__py_state_of(op);
  HostCopy copy;
  if (host_copy_prepare(st, SELF, "tobytes()", &copy) < 0) return NULL;
  PyObject *result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)copy.nbytes);
  if (result != NULL) host_copy_run(&copy, PyBytes_AS_STRING(result));
  return result;
}

PyObject *hurray__py_tensor_copy(HurrayState *st, HurrayTensorObject *self, const char *operation) {
  const HurrayArray *values = hurray__py_tensor_values(st, self);
  if (values == NULL) return NULL;
  const HurrayBufferDesc *desc = &hurray__py_tensor_buffer(self, values)->desc;
  if (desc->device_tag != HURRAY_DEVICE_CPU) {
    const char *name = hurray_device_name(desc->device_tag);
    return hurray__py_raise(st, HURRAY_PY_EXC_UNSUPPORTED,
                            "%s: hurray-python has no runtime to copy %s memory", operation,
                            name == NULL ? "private-device" : name);
  }
  HostCopy copy;
  if (host_copy_prepare(st, self, operation, &copy) < 0) return NULL;
  HurrayBuffer *buffer = NULL;
  HurrayError error = {0};
  int status = hurray_buffer_alloc(copy.nbytes, 0, 0, &buffer, &error);
  if (status != HURRAY_OK) return hurray__py_raise_status(st, status, &error);
  host_copy_run(&copy, buffer->data);
  HurrayArray array = {
      .shape = copy.view.array->shape,
      .ndim = copy.view.array->ndim,
      .dtype = copy.view.array->dtype,
  };
  return hurray__py_tensor_wrap(st, buffer, &array, 0, NULL, NULL);
}

/* One element of a Tier 1 dtype as a Python scalar. */
static PyObject *scalar_at(const HurrayDTypeInfo *dtype, const char *p) {
#define READ(T, make)        \
  {                          \
    T v;                     \
    memcpy(&v, p, sizeof v); \
    return make;             \
  }
  switch (dtype->code) {
    case HURRAY_DTYPE_BOOL:
      return PyBool_FromLong(*p != 0);
    case HURRAY_DTYPE_INT8:
      READ(int8_t, PyLong_FromLong(v))
    case HURRAY_DTYPE_INT16:
      READ(int16_t, PyLong_FromLong(v))
    case HURRAY_DTYPE_INT32:
      READ(int32_t, PyLong_FromLong(v))
    case HURRAY_DTYPE_INT64:
      READ(int64_t, PyLong_FromLongLong(v))
    case HURRAY_DTYPE_UINT8:
      READ(uint8_t, PyLong_FromUnsignedLong(v))
    case HURRAY_DTYPE_UINT16:
      READ(uint16_t, PyLong_FromUnsignedLong(v))
    case HURRAY_DTYPE_UINT32:
      READ(uint32_t, PyLong_FromUnsignedLong(v))
    case HURRAY_DTYPE_UINT64:
      READ(uint64_t, PyLong_FromUnsignedLongLong(v))
    case HURRAY_DTYPE_FLOAT32:
      READ(float, PyFloat_FromDouble((double)v))
    case HURRAY_DTYPE_FLOAT64:
      READ(double, PyFloat_FromDouble(v))
    case HURRAY_DTYPE_COMPLEX64: {
      float v[2];
      memcpy(v, p, sizeof v);
      return PyComplex_FromDoubles((double)v[0], (double)v[1]);
    }
    case HURRAY_DTYPE_COMPLEX128: {
      double v[2];
      memcpy(v, p, sizeof v);
      return PyComplex_FromDoubles(v[0], v[1]);
    }
    default:
      break;
  }
#undef READ
  PyErr_Format(PyExc_SystemError, "scalar_at: dtype %s is not Tier 1", dtype->name);
  return NULL;
}

static PyObject *nested_list(const HurrayDTypeInfo *dtype, const char *p, int32_t dim, int32_t ndim,
                             const int64_t *shape, const int64_t *byte_strides) {
  if (dim == ndim) return scalar_at(dtype, p);
  PyObject *list = PyList_New((Py_ssize_t)shape[dim]);
  if (list == NULL) return NULL;
  for (int64_t i = 0; i < shape[dim]; i++, p += byte_strides[dim]) {
    PyObject *item = nested_list(dtype, p, dim + 1, ndim, shape, byte_strides);
    if (item == NULL) {
      Py_DECREF(list);
      return NULL;
    }
    PyList_SET_ITEM(list, (Py_ssize_t)i, item);
  }
  return list;
}

static PyObject *tensor_tolist(PyObject *op, PyObject *unused) {
  (void)unused;
  HurrayState *st = hurray__py_state_of(op);
  HurrayHostView view;
  if (hurray__py_tensor_host_view(st, SELF, "tolist()", &view) < 0) return NULL;
  if (view.dtype->tier != 1) {
    return hurray__py_raise(st, HURRAY_PY_EXC_UNSUPPORTED,
                            "tolist() reads Tier 1 dtypes only; %s is Tier %d (use tobytes(), "
                            "or NumPy with ml_dtypes)",
                            view.dtype->name, (int)view.dtype->tier);
  }
  int64_t byte_strides[HURRAY_MAX_NDIM];
  if (host_byte_strides(st, view.array, view.dtype->bits / 8, byte_strides) < 0) return NULL;
  const char *p = hurray__py_buffer_at(view.buffer, view.array->byte_offset);
  return nested_list(view.dtype, p, 0, view.array->ndim, view.array->shape, byte_strides);
}

/* ============================================================================================
 * __array_namespace__ and its mode-dependent visibility (ADR-022)
 * ============================================================================================ */

/* 1 when __array_namespace__ is visible on this tensor, 0 when not, -1 on error. */
static int namespace_visible(HurrayState *st, HurrayTensorObject *self) {
  if (hurray__py_tensor_live(st, self) < 0) return -1;
  const HurrayDTypeInfo *dtype = hurray_dtype_info(self->desc->dtype);
  return dtype == NULL ? 0 : hurray__py_array_api_admits(st, dtype);
}

static PyObject *hidden_namespace(HurrayTensorObject *self) {
  const HurrayDTypeInfo *dtype = hurray_dtype_info(self->desc->dtype);
  PyErr_Format(PyExc_AttributeError,
               "'hurray.Tensor' object has no attribute '__array_namespace__' (%s is a Tier %d "
               "dtype: the array API namespace admits it in relaxed mode only)",
               dtype == NULL ? "composite" : dtype->name, dtype == NULL ? 0 : (int)dtype->tier);
  return NULL;
}

static PyObject *tensor_dir(PyObject *op, PyObject *unused) {
  (void)unused;
  HurrayState *st = hurray__py_state_of(op);
  PyObject *names = PyObject_CallMethod((PyObject *)&PyBaseObject_Type, "__dir__", "O", op);
  if (names == NULL) return NULL;
  int visible = namespace_visible(st, SELF);
  if (visible == 0) {
    Py_ssize_t i = PySequence_Index(names, st->str_array_namespace);
    if (i < 0 || PySequence_DelItem(names, i) < 0) Py_CLEAR(names);
  }
  if (visible < 0) Py_CLEAR(names);
  return names;
}

static const char *const kNamespaceNames[] = {"api_version", NULL};

static PyObject *tensor_array_namespace(PyObject *op, PyObject *const *args, Py_ssize_t nargs,
                                        PyObject *kwnames) {
  static const HurrayPyParser parser = {"__array_namespace__", kNamespaceNames, 0, 0, 0};
  PyObject *api_version = NULL;
  if (hurray__py_parse(&parser, args, nargs, kwnames, &api_version) < 0) return NULL;
  HurrayState *st = hurray__py_state_of(op);
  int visible = namespace_visible(st, SELF);
  if (visible < 0) return NULL;
  if (!visible) return hidden_namespace(SELF);
  if (api_version != NULL && api_version != Py_None) {
    if (!PyUnicode_Check(api_version)) {
      return PyErr_Format(PyExc_TypeError, "api_version must be a str or None, not %.200s",
                          Py_TYPE(api_version)->tp_name);
    }
    static const char *const versions[] = {"2025.12", "2024.12", "2023.12", "2022.12",
                                           "2021.12"};
    size_t i = 0;
    while (i < 5 && PyUnicode_CompareWithASCIIString(api_version, versions[i]) != 0) i++;
    if (i == 5) {
      return hurray__py_raise(st, HURRAY_PY_EXC_INVALID_ARGUMENT,
                              "api_version %R is not supported; hurray implements '2025.12' "
                              "(and accepts '2024.12', '2023.12', '2022.12', '2021.12')",
                              api_version);
    }
  }
  if (st->array_api == NULL) {
    st->array_api = PyImport_ImportModule("hurray.array_api");
    if (st->array_api == NULL) return NULL;
  }
  if (api_version != NULL && api_version != Py_None &&
      PyUnicode_CompareWithASCIIString(api_version, "2025.12") != 0) {
    /* An earlier version's namespace differs in a few results (array_api/__init__.py). */
    return PyObject_CallMethod(st->array_api, "_namespace", "O", api_version);
  }
  return Py_NewRef(st->array_api);
}

/* __array_namespace__ is an attribute whose getter hands out the bound method only where it
 * is visible, and raises AttributeError elsewhere: hasattr() tells the truth, and the type
 * keeps CPython's generic attribute lookup (and its method-call fast path). */
static PyMethodDef namespace_method = {
    "__array_namespace__", HURRAY_PY_CFUNC(tensor_array_namespace), METH_FASTCALL | METH_KEYWORDS,
    PyDoc_STR("__array_namespace__($self, /, *, api_version=None)\n--\n\n"
              "The array API namespace, hurray.array_api. Visible on Tier 1 tensors always "
              "and on Tier 2 / Tier 3 tensors in relaxed mode only (ADR-022). api_version is "
              "None, '2025.12' or an earlier version: '2024.12', '2023.12', '2022.12' "
              "or '2021.12'.")};

static PyObject *get_array_namespace(PyObject *op, void *closure) {
  (void)closure;
  HurrayState *st = hurray__py_state_of(op);
  int visible = namespace_visible(st, (HurrayTensorObject *)op);
  if (visible < 0) return NULL;
  if (!visible) return hidden_namespace((HurrayTensorObject *)op);
  return PyCFunction_New(&namespace_method, op);
}

/* ============================================================================================
 * repr
 * ============================================================================================ */

/* The repr is not a constructor call, and does not pretend to be one: <hurray.Tensor ...>,
 * with the values (as tolist() gives them) of a small Tier 1 tensor in CPU memory, as NumPy
 * and PyTorch show theirs, and the fields that differ from the defaults. */
#define REPR_MAX_VALUES 64

static PyObject *tensor_repr(PyObject *op) {
  HurrayState *st = hurray__py_state_of(op);
  if (SELF->context == NULL) return PyUnicode_FromString("<hurray.Tensor (cleared)>");
  if (SELF->desc->nparts == 0) {
    return PyUnicode_FromFormat("<hurray.Tensor layout=%s children=%u>",
                                hurray_layout_name((int)SELF->desc->layout),
                                (unsigned)SELF->desc->nchildren);
  }
  const HurrayArray *values = &SELF->desc->parts[0];
  const HurrayBufferDesc *bd = &hurray__py_tensor_buffer(SELF, values)->desc;
  const HurrayDTypeInfo *dtype = hurray_dtype_info(SELF->desc->dtype);
  PyObject *shape = int64_tuple(SELF->desc->ndim, SELF->desc->shape);
  PyObject *device = hurray__py_device_new(st, bd->device_tag, bd->device_id);
  PyObject *text = NULL;
  if (shape != NULL && device != NULL) {
    text = PyUnicode_FromFormat("<hurray.Tensor shape=%R dtype=%s device=%S", shape,
                                dtype == NULL ? "?" : dtype->name, device);
  }
  Py_XDECREF(shape);
  Py_XDECREF(device);
  if (text == NULL) return NULL;
  /* Then only what differs from the defaults. */
  char extra[160] = "";
  size_t used = 0;
  if (SELF->desc->layout != HURRAY_LAYOUT_DENSE) {
    used += (size_t)snprintf(extra + used, sizeof extra - used, " layout=%s",
                             hurray_layout_name((int)SELF->desc->layout));
  }
  if (bd->memory_class != HURRAY_MEM_DEVICE) {
    used += (size_t)snprintf(extra + used, sizeof extra - used, " memory_class=%s",
                             hurray_memory_class_name(bd->memory_class));
  }
  if (bd->sync_mode != HURRAY_SYNC_READY) {
    used += (size_t)snprintf(extra + used, sizeof extra - used, " sync_mode=%s",
                             hurray_sync_mode_name(bd->sync_mode));
  }
  if (hurray__py_tensor_readonly(SELF)) snprintf(extra + used, sizeof extra - used, " readonly");
  uint64_t numel = 0;
  PyObject *list = NULL;
  if (SELF->desc->layout == HURRAY_LAYOUT_DENSE && bd->device_tag == HURRAY_DEVICE_CPU &&
      dtype != NULL && dtype->tier == 1 && tensor_numel(st, SELF, &numel) == 0 &&
      numel <= REPR_MAX_VALUES) {
    list = tensor_tolist(op, NULL);
  }
  PyObject *full = NULL;
  if (PyErr_Occurred()) {
    Py_XDECREF(list);
  } else if (list != NULL) {
    full = PyUnicode_FromFormat("%U%s values=%R>", text, extra, list);
    Py_DECREF(list);
  } else {
    full = PyUnicode_FromFormat("%U%s>", text, extra);
  }
  Py_DECREF(text);
  return full;
}

#undef SELF

/* ============================================================================================
 * The type
 * ============================================================================================ */

static PyMethodDef tensor_methods[] = {
    {"from_address", HURRAY_PY_CFUNC(tensor_from_address),
     METH_FASTCALL | METH_KEYWORDS | METH_CLASS,
     PyDoc_STR("from_address($type, address, dtype, shape, *, device, memory_class='device', "
               "sync_mode='ready', sync_handle=0, sync_value=0, byte_size=None, strides=None, "
               "byte_offset=0, peer_index=0, owner=None, readonly=False)\n"
               "--\n"
               "\n"
               "Make a tensor over memory given by its address, on any device.\n"
               "\n"
               "For bindings that hold device memory (a CUDA allocation, a Vulkan\n"
               "buffer) and hand it on with its full description. The memory is never\n"
               "touched: nothing is validated that needs reading it.\n"
               "\n"
               "Parameters\n"
               "----------\n"
               "address : int\n"
               "    The memory's address, or on handle-form devices (metal, webgpu,\n"
               "    opencl) the buffer object's handle, kept as given. On other devices\n"
               "    an address that is not 64-byte aligned is wrapped rounded down,\n"
               "    the difference added to `byte_offset`.\n"
               "dtype : hurray.dtype or str\n"
               "    The element type.\n"
               "shape : int or sequence of ints\n"
               "    The shape.\n"
               "device : hurray.Device, str, int or tuple\n"
               "    A hurray.Device, a name ('cuda', 'cuda:1'), a tag, or a\n"
               "    ``(tag or name, index)`` tuple.\n"
               "memory_class : {'device', 'host', 'unified', 'peer'}, optional\n"
               "    Device memory, pinned host memory, managed memory, or memory\n"
               "    mapped from a peer device. CPU memory is 'device' only.\n"
               "sync_mode : {'ready', 'stream', 'event', 'timeline'}, optional\n"
               "    When the data may be read: now, or after the stream, event or\n"
               "    timeline semaphore `sync_handle` reaches `sync_value`.\n"
               "sync_handle : int, optional\n"
               "    The stream, event or semaphore; required unless 'ready'.\n"
               "sync_value : int, optional\n"
               "    The timeline value to wait for.\n"
               "byte_size : int, optional\n"
               "    The size of the memory at `address`; by default up to the last\n"
               "    byte the array addresses.\n"
               "strides : sequence of ints, optional\n"
               "    In elements; row-major contiguous by default.\n"
               "byte_offset : int, optional\n"
               "    Bytes from `address` to element (0, ..., 0).\n"
               "peer_index : int, optional\n"
               "    For 'peer' memory, the index of the device that owns it.\n"
               "owner : object, optional\n"
               "    Kept alive until the memory is released.\n"
               "readonly : bool, optional\n"
               "    Whether the memory may not be written.\n"
               "\n"
               "Returns\n"
               "-------\n"
               "hurray.Tensor\n"
               "    A dense tensor.\n"
               "\n"
               "Raises\n"
               "------\n"
               "hurray.DescriptorError\n"
               "    A combination the format forbids (for example CPU memory that is\n"
               "    not 'device' or not 'ready', or a sync mode without a handle).\n"
               "hurray.LayoutError\n"
               "    The array does not fit in `byte_size`.\n"
               "hurray.InvalidArgumentError\n"
               "    The range wraps the address space, or (CPU, Linux) is not mapped.\n"
               "\n"
               "Warnings\n"
               "--------\n"
               "Unsafe, like ctypes' from_address and string_at: the address is\n"
               "trusted. Calling this with a CPU device is the explicit opt-in to host\n"
               "reads of that memory: whatever later reads the tensor's bytes\n"
               "(tobytes, tolist, memoryview, NumPy, hurray.save, any DLPack or native\n"
               "consumer) reads `address`, and a wrong address or byte_size can crash\n"
               "the process. Nothing reads it before that. On Linux a CPU range that\n"
               "is not mapped at all is refused; mapped memory without read access,\n"
               "or memory unmapped later, is not detected.\n"
               "\n"
               "Examples\n"
               "--------\n"
               ">>> t = hurray.Tensor.from_address(0x7F00_0000, hurray.dtype.bfloat16, [2, 8],\n"
               "...                                device=\"cuda:1\", memory_class=\"unified\")\n"
               ">>> t.device, t.memory_class, t.nbytes\n"
               "(hurray.Device(\"cuda\", 1), 'unified', 32)\n"
               ">>> hurray.Tensor.from_address(0x7F00_0000, hurray.float32, [4], device=\"cpu\",\n"
               "...                            memory_class=\"host\")\n"
               "Traceback (most recent call last):\n"
               "  ...\n"
               "hurray.DescriptorError: ...\n")},
    {"from_parts", HURRAY_PY_CFUNC(tensor_from_parts), METH_FASTCALL | METH_KEYWORDS | METH_CLASS,
     PyDoc_STR("from_parts($type, layout, parts=(), *, dtype=None, shape=None, axis=0, "
               "block_size=0, coalesced=False, children=None)\n"
               "--\n"
               "\n"
               "Make a tensor of any layout over the memory of dense tensors.\n"
               "\n"
               "Each part brings its array (shape, strides, byte offset, dtype) and its\n"
               "buffer, on whatever device, memory class and sync state it is. Nothing\n"
               "is copied; the parts are kept alive, and the result is read-only if any\n"
               "of them is. ``t.parts`` and ``t.children`` give the pieces back.\n"
               "\n"
               "Parameters\n"
               "----------\n"
               "layout : str\n"
               "    'dense', 'per_channel', 'block', 'sparse_coo', 'sparse_csr',\n"
               "    'paged' or 'composite'.\n"
               "parts : sequence of hurray.Tensor, optional\n"
               "    Dense tensors in the layout's order: dense (values); per_channel\n"
               "    (values, scales[, zero_points]) and block (values, scales[, mins])\n"
               "    along `axis`; sparse_coo (indices, values); sparse_csr (indptr,\n"
               "    indices, values); paged (pages, page_table). None for composite.\n"
               "dtype : hurray.dtype or str, optional\n"
               "    The logical dtype; by default the values' dtype.\n"
               "shape : int or sequence of ints, optional\n"
               "    The logical shape; by default the values' shape. Required for\n"
               "    sparse and paged tensors.\n"
               "axis : int, optional\n"
               "    The quantised axis (per_channel, block) or the paged axis.\n"
               "block_size : int, optional\n"
               "    Elements per block (block) or rows per page (paged).\n"
               "coalesced : bool, optional\n"
               "    Whether a sparse_coo tensor's indices are sorted and unique.\n"
               "children : mapping or sequence of (str, hurray.Tensor), optional\n"
               "    A composite tensor's named children, of any layout.\n"
               "\n"
               "Returns\n"
               "-------\n"
               "hurray.Tensor\n"
               "    The tensor, validated by hurray-core, index parts in CPU memory\n"
               "    (sparse indices, page tables) included.\n"
               "\n"
               "Raises\n"
               "------\n"
               "hurray.LayoutError\n"
               "    The parts do not make a valid tensor of that layout.\n"
               "\n"
               "Examples\n"
               "--------\n"
               ">>> import struct\n"
               ">>> values = hurray.Tensor(bytes(range(12)), hurray.int8, [4, 3])\n"
               ">>> scales = hurray.Tensor(struct.pack(\"4f\", 0.5, 1, 1.5, 2), hurray.float32, "
               "[4])\n"
               ">>> w = hurray.Tensor.from_parts(\"per_channel\", [values, scales], axis=0)\n"
               ">>> w.layout, w.dtype, w.shape\n"
               "('per_channel', hurray.int8, (4, 3))\n"
               ">>> [b[\"role\"] for b in w.buffers]\n"
               "['values', 'scales']\n"
               ">>> indices = hurray.Tensor(struct.pack(\"4q\", 0, 1, 2, 0), hurray.int64, [2, "
               "2])\n"
               ">>> nonzero = hurray.Tensor(struct.pack(\"2f\", 1, 2), hurray.float32, [2])\n"
               ">>> hurray.Tensor.from_parts(\"sparse_coo\", [indices, nonzero], shape=[2, 2])\n"
               "Traceback (most recent call last):\n"
               "  ...\n"
               "hurray.LayoutError: part 0 (indices): element [1, 0] is 2, outside [0, 2)\n")},
    {"__hurray__", HURRAY_PY_CFUNC(hurray__py_tensor_hurray), METH_FASTCALL | METH_KEYWORDS,
     hurray__py_tensor_hurray_doc},
    {"to_device", HURRAY_PY_CFUNC(hurray__py_tensor_to_device), METH_FASTCALL | METH_KEYWORDS,
     hurray__py_tensor_to_device_doc},
    {"tobytes", tensor_tobytes, METH_NOARGS,
     PyDoc_STR("tobytes($self, /)\n"
               "--\n"
               "\n"
               "Return the elements in C order as bytes (a copy).\n"
               "\n"
               "Any strides, negative ones included, for whole-byte dtypes; packed\n"
               "sub-byte dtypes must be contiguous, and the bits past the last element\n"
               "are zero.\n"
               "\n"
               "Returns\n"
               "-------\n"
               "bytes\n"
               "    ``nbytes`` bytes.\n"
               "\n"
               "Raises\n"
               "------\n"
               "hurray.BufferError\n"
               "    The tensor is not in CPU memory, or its data is not ready.\n"
               "hurray.UnsupportedError\n"
               "    A layout other than dense, or a strided packed tensor.\n"
               "\n"
               "See Also\n"
               "--------\n"
               "Tensor.bytes_view : The same bytes without a copy.\n"
               "\n"
               "Examples\n"
               "--------\n"
               ">>> t = hurray.Tensor(bytes(range(6)), hurray.uint8, [2, 3], strides=[1, 2])\n"
               ">>> t.tobytes()\n"
               "b'\\x00\\x02\\x04\\x01\\x03\\x05'\n"
               ">>> hurray.Tensor(bytes([0x21, 0x43]), hurray.dtype.int4, [3]).tobytes()\n"
               "b'!\\x03'\n")},
    {"bytes_view", hurray__py_tensor_bytes_view, METH_NOARGS, hurray__py_tensor_bytes_view_doc},
    {"__reduce_ex__", hurray__py_tensor_reduce_ex, METH_O, hurray__py_tensor_reduce_ex_doc},
    {"tolist", tensor_tolist, METH_NOARGS,
     PyDoc_STR("tolist($self, /)\n"
               "--\n"
               "\n"
               "Return the elements as nested lists of Python scalars.\n"
               "\n"
               "Returns\n"
               "-------\n"
               "list or scalar\n"
               "    Nested lists of bool, int, float or complex; a scalar for a 0-d\n"
               "    tensor.\n"
               "\n"
               "Raises\n"
               "------\n"
               "hurray.UnsupportedError\n"
               "    A dtype outside Tier 1 (use NumPy with ml_dtypes, or tobytes()),\n"
               "    or a layout other than dense.\n"
               "hurray.BufferError\n"
               "    The tensor is not in CPU memory, or its data is not ready.\n"
               "\n"
               "Examples\n"
               "--------\n"
               ">>> import struct\n"
               ">>> hurray.Tensor(struct.pack(\"4i\", 1, 2, 3, 4), hurray.int32, [2, 2]).tolist()\n"
               "[[1, 2], [3, 4]]\n"
               ">>> hurray.Tensor(struct.pack(\"d\", 2.5), hurray.float64, []).tolist()\n"
               "2.5\n")},
    {"__dir__", tensor_dir, METH_NOARGS,
     PyDoc_STR("__dir__($self, /)\n--\n\nThe attributes visible in the mode in force.")},
    {"__array__", HURRAY_PY_CFUNC(hurray__py_tensor_array), METH_FASTCALL | METH_KEYWORDS,
     hurray__py_tensor_array_doc},
    {"__dlpack__", HURRAY_PY_CFUNC(hurray__py_tensor_dlpack), METH_FASTCALL | METH_KEYWORDS,
     hurray__py_tensor_dlpack_doc},
    {"__dlpack_device__", hurray__py_tensor_dlpack_device, METH_NOARGS,
     hurray__py_tensor_dlpack_device_doc},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef tensor_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(HurrayTensorObject, weakreflist), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

PyDoc_STRVAR(tensor_doc,
             "Tensor(data, dtype, shape, strides=None, byte_offset=0)\n"
             "--\n"
             "\n"
             "A tensor over the memory of any buffer-protocol object, without copying.\n"
             "\n"
             "A hurray.Tensor is a complete description of an array: dtype of any\n"
             "tier, shape, strides, the device and memory class it lives in, its sync\n"
             "state and its layout (dense, quantised, sparse, paged or composite).\n"
             "This constructor wraps host memory; `from_address` wraps memory on any\n"
             "device, `from_parts` builds multi-buffer layouts, and `from_numpy`,\n"
             "`from_dlpack`, `from_hurray` and `load` make tensors from elsewhere.\n"
             "\n"
             "Parameters\n"
             "----------\n"
             "data : buffer-protocol object\n"
             "    bytes, bytearray, memoryview, array.array, mmap.mmap, a NumPy\n"
             "    array, ... Its buffer is held, which keeps it alive (and a\n"
             "    resizable one locked) while the memory is in use.\n"
             "dtype : hurray.dtype or str\n"
             "    The element type, or its name ('float32').\n"
             "shape : int or sequence of ints\n"
             "    The shape.\n"
             "strides : sequence of ints, optional\n"
             "    One per dimension, counted in elements, negative allowed. By\n"
             "    default, row-major contiguous.\n"
             "byte_offset : int, optional\n"
             "    Bytes from the start of `data` to element (0, ..., 0).\n"
             "\n"
             "Raises\n"
             "------\n"
             "hurray.LayoutError\n"
             "    Without strides, `data` does not hold exactly byte_offset + nbytes\n"
             "    bytes; with strides, an element lies outside `data`.\n"
             "hurray.DTypeError\n"
             "    No dtype has that name.\n"
             "\n"
             "See Also\n"
             "--------\n"
             "from_numpy, from_dlpack, from_hurray, Tensor.from_address,\n"
             "Tensor.from_parts\n"
             "\n"
             "Notes\n"
             "-----\n"
             "The tensor is read-only exactly when the buffer is (bytes is,\n"
             "bytearray is not). Memory that does not start on a 64-byte boundary is\n"
             "wrapped from the address rounded down, the difference added to\n"
             "`byte_offset`; the bytes before the data are never read or written.\n"
             "\n"
             "Examples\n"
             "--------\n"
             ">>> import struct\n"
             ">>> t = hurray.Tensor(struct.pack(\"6f\", 1, 2, 3, 4, 5, 6), hurray.float32, [2, "
             "3])\n"
             ">>> t.shape, t.dtype, t.strides, t.readonly\n"
             "((2, 3), hurray.float32, (3, 1), True)\n"
             ">>> t.tolist()\n"
             "[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]\n"
             ">>> columns = hurray.Tensor(bytearray(range(6)), \"uint8\", [2, 3], strides=[1, 2])\n"
             ">>> columns.tolist()\n"
             "[[0, 2, 4], [1, 3, 5]]\n");

static PyType_Slot tensor_slots[] = {
    {Py_tp_new, tensor_new},
    {Py_tp_dealloc, tensor_dealloc},
    {Py_tp_traverse, tensor_traverse},
    {Py_tp_clear, tensor_clear},
    {Py_tp_repr, tensor_repr},
    {Py_tp_methods, tensor_methods},
    {Py_tp_getset, tensor_getset},
    {Py_tp_members, tensor_members},
    {Py_tp_doc, (void *)tensor_doc},
    {Py_bf_getbuffer, hurray__py_tensor_getbuffer},
    {Py_bf_releasebuffer, hurray__py_tensor_releasebuffer},
    {0, NULL},
};

PyType_Spec hurray__py_tensor_spec = {
    .name = "hurray.Tensor",
    .basicsize = sizeof(HurrayTensorObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = tensor_slots,
};
