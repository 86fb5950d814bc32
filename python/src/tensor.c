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

#include <math.h>
#include <string.h>

#include "structmember.h" /* PyMemberDef's T_PYSSIZET and READONLY on CPython 3.11 */

/* ============================================================================================
 * Owner references
 * ============================================================================================ */

/* Both releases may run on any thread, with or without the GIL (a C consumer of a context
 * releases it wherever it likes, a DLPack deleter wherever its consumer does). Once the
 * interpreter is finalising they must not touch Python: the reference is leaked (the process
 * is ending). Each has a twin for a caller that holds the GIL (owner_release_held). */

void hurray__py_owner_release_object(void *object) {
  if (object == NULL || HURRAY_PY_FINALIZING()) return;
  HurrayPyGil gil = hurray__py_gil_ensure();
  HurrayPySavedError saved;
  hurray__py_error_save(&saved);
  Py_DECREF((PyObject *)object);
  hurray__py_error_restore(&saved);
  hurray__py_gil_release(gil);
}

void *hurray__py_owner_new_view(Py_buffer *view) {
  Py_buffer *owner = PyMem_RawMalloc(sizeof *owner);
  if (owner == NULL) return PyErr_NoMemory();
  *owner = *view;
  memset(view, 0, sizeof *view);
  return owner;
}

/* With the GIL held: the exporter's release, keeping the exception in flight. */
static void release_view_held(void *opaque) {
  HurrayPySavedError saved;
  hurray__py_error_save(&saved);
  PyBuffer_Release(opaque);
  hurray__py_error_restore(&saved);
  PyMem_RawFree(opaque);
}

void hurray__py_owner_release_view(void *opaque) {
  Py_buffer *view = opaque;
  if (view == NULL) return;
  if (HURRAY_PY_FINALIZING()) {
    PyMem_RawFree(view);
    return;
  }
  HurrayPyGil gil = hurray__py_gil_ensure();
  release_view_held(view);
  hurray__py_gil_release(gil);
}

static void release_object_held(void *object) {
  Py_XDECREF((PyObject *)object);
}

/* The twin of an owner release of this module for a caller that holds the GIL, or NULL for
 * one of another kind (which then takes the GIL itself). */
static HurrayOwnerReleaseFn owner_release_held(HurrayOwnerReleaseFn release) {
  if (release == hurray__py_owner_release_object) return release_object_held;
  if (release == hurray__py_owner_release_view) return release_view_held;
  return hurray__py_dl_import_release_held(release);
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
  self->ndarray = NULL;
  self->view_key = NULL;
  self->export = NULL;
  PyObject_GC_Track(self);
  return (PyObject *)self;
}

/* The release of a context kept in a Tensor's storage: the owner's, and nothing to free. */
static void release_inline(HurrayTensorContext *context) {
  if (context->owner_release != NULL) context->owner_release(context->owner);
  context->release = NULL;
}

void hurray__py_tensor_templates_init(HurrayState *st) {
  st->inline_buffer = (HurrayBuffer){
      .desc = {.alignment = HURRAY_MIN_ALIGNMENT,
               .device_tag = HURRAY_DEVICE_CPU,
               .memory_class = HURRAY_MEM_DEVICE,
               .sync_mode = HURRAY_SYNC_READY},
  };
  st->inline_desc = (HurrayTensorDesc){.layout = HURRAY_LAYOUT_DENSE, .nparts = 1};
}

/* A new Tensor over `size` bytes of CPU memory at `data` (64-byte aligned), addressed by
 * `array` at `byte_offset` instead of its own (array->buffer 0, ndim <= HURRAY_PY_INLINE_NDIM),
 * its context in the object's own storage. `memory` is CPU, DEVICE, READY, with no sync handle
 * or peer. SINK for `owner`.
 *
 * The caller validated the array and its place in the buffer (hurray_array_span: shape, dtype,
 * reserved bytes, offsets without overflow, every byte inside): for a dense descriptor made
 * here of that one array and a buffer whose fields are these constants, that is everything
 * hurray_buffer_wrap and hurray_tensor_context_create would check, so nothing is checked
 * twice. */
static PyObject *tensor_inline(HurrayState *st, void *data, uint64_t size,
                               const HurrayPyMemory *memory, const HurrayArray *array,
                               uint64_t byte_offset, void *owner,
                               HurrayOwnerReleaseFn owner_release) {
  HurrayTensorObject *self = PyObject_GC_New(HurrayTensorObject, st->tensor_type);
  if (self == NULL) {
    if (owner_release != NULL) owner_release(owner);
    return NULL;
  }
  HurrayPyInline *in = &self->storage;
  int32_t ndim = array->ndim;
  int64_t *shape = in->dims;
  int64_t *strides = in->dims + HURRAY_PY_INLINE_NDIM;
  for (int32_t i = 0; i < ndim; i++) { /* at most 4: no memcpy call */
    shape[i] = array->shape[i];
    if (array->strides != NULL) strides[i] = array->strides[i];
  }
  uint32_t flags = memory->readonly ? HURRAY_BUFFER_READ_ONLY : 0;
  in->array = *array;
  in->array.byte_offset = byte_offset;
  in->array.shape = shape;
  in->array.strides = array->strides == NULL ? NULL : strides;
  in->buffer = st->inline_buffer;
  in->buffer.data = data;
  in->buffer.desc.byte_size = size;
  in->buffer.desc.device_id = memory->device_id;
  in->buffer.desc.peer_device_id = memory->peer_device_id;
  in->buffer.flags = flags;
  in->handle = &in->buffer;
  in->role = HURRAY_ROLE_VALUES;
  in->list = (HurrayBufferList){
      .count = 1, .capacity = 1, .buffers = &in->handle, .roles = &in->role};
  in->desc = st->inline_desc;
  in->desc.ndim = ndim;
  in->desc.shape = shape;
  in->desc.parts = &in->array;
  in->desc.dtype = array->dtype;
  in->context = (HurrayTensorContext){
      .abi_version = HURRAY_C_ABI_VERSION,
      .flags = flags,
      .release = release_inline,
      .tensor = &in->desc,
      .buffers = &in->list,
      .owner = owner,
      .owner_release = owner_release,
  };
  self->context = &in->context;
  self->desc = &in->desc;
  self->exports = 0;
  self->weakreflist = NULL;
  self->ndarray = NULL;
  self->view_key = NULL;
  self->export = NULL;
  if (!memory->acyclic) PyObject_GC_Track(self);
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
  if (hurray__address_form(memory->tag)) {
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
  }
  return hurray__py_tensor_from_checked(st, data, size, memory, array, owner, owner_release);
}

PyObject *hurray__py_tensor_from_checked(HurrayState *st, void *data, uint64_t size,
                                         const HurrayPyMemory *memory, const HurrayArray *array,
                                         void *owner, HurrayOwnerReleaseFn owner_release) {
  /* The byte offset apart from the array, whose copy with one field changed would be read
   * whole just after that store (a stall), were it copied here. */
  uint64_t byte_offset = array->byte_offset;
  uintptr_t base = (uintptr_t)data;
  if (hurray__align_foreign(memory->tag, &base, &size, &byte_offset) < 0) {
    if (owner_release != NULL) owner_release(owner);
    return hurray__py_raise_statusf(st, HURRAY_EOVERFLOW, "buffer size overflows 64 bits");
  }
  if (memory->tag == HURRAY_DEVICE_CPU && memory->memory_class == HURRAY_MEM_DEVICE &&
      memory->sync_mode == HURRAY_SYNC_READY && memory->peer_device_id == 0 &&
      memory->sync_handle == NULL && memory->sync_value == 0 && array->ndim >= 0 &&
      array->ndim <= HURRAY_PY_INLINE_NDIM) {
    return tensor_inline(st, (void *)base, size, memory, array, byte_offset, owner,
                         owner_release);
  }
  HurrayArray values = *array;
  values.byte_offset = byte_offset;
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


/* ============================================================================================
 * Lifetime and garbage collection
 * ============================================================================================ */

/* Releases the context of a tensor being cleared or deallocated (the GIL is held). An owner
 * reference of one of this module's kinds -- an object, a buffer export, a DLPack import, so
 * its meaning is known -- is dropped here by its GIL-held twin rather than by the context's
 * release, which would take the GIL state again: a saving on every tensor's end. */
static void release_context(HurrayTensorContext *context) {
  void *owner = context->owner;
  HurrayOwnerReleaseFn held = owner_release_held(context->owner_release);
  if (held != NULL) context->owner_release = NULL;
  hurray_tensor_context_release(context);
  if (held != NULL) held(owner);
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
    hurray__py_tensor_forget_ndarray(self);
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
  hurray__py_tensor_forget_ndarray(self);
  if (self->context != NULL) {
    HurrayTensorContext *context = self->context;
    self->context = NULL;
    release_context(context);
  }
  hurray__py_tensor_export_free(self);
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
      hurray__py_raise(st, HURRAY_PY_EXC_BUFFER,
                       "%s needs CPU memory; the tensor is on %s:%u (to_device('cpu') copies it "
                       "there)",
                       operation, name, (unsigned)buffer->desc.device_id);
    } else {
      char hex[8];
      snprintf(hex, sizeof hex, "0x%02X", (unsigned)buffer->desc.device_tag);
      hurray__py_raise(st, HURRAY_PY_EXC_BUFFER,
                       "%s needs CPU memory; the tensor is on device tag %s (to_device('cpu') "
                       "copies it there)",
                       operation, hex);
    }
    return -1;
  }
  /* CPU buffers are always READY (buffer-protocol.md §4 rule 1): nothing to wait for. */
  HurrayError error; /* only its message is read, and only on failure */
  error.message[0] = '\0';
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

/* np.dtype(t), np.result_type(t) and every library that asks NumPy for an array's dtype (JAX,
 * Dask) read this before `.dtype`, which NumPy takes only when it is a numpy.dtype. */
static PyObject *get_numpy_dtype(PyObject *op, void *c) {
  (void)c;
  LIVE_OR_NULL();
  const HurrayDTypeInfo *info = hurray_dtype_info(SELF->desc->dtype);
  if (info == NULL) {
    PyErr_SetString(PyExc_TypeError, "a composite tensor has no single dtype for NumPy");
    return NULL;
  }
  return hurray__py_numpy_dtype(st, info);
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
  hurray__array_strides(values, strides);
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

/* t.shape = ... and t.dtype = ..., which NumPy takes as a reshape and a reinterpretation of the
 * bytes in place: a tensor's description does not change, and the error names the view that
 * has the new one. The closure is "name\0route". */
static int set_fixed(PyObject *op, PyObject *value, void *closure) {
  (void)op;
  (void)value;
  const char *name = closure;
  PyErr_Format(PyExc_AttributeError, "a hurray.Tensor's %s is fixed: %s", name,
               name + strlen(name) + 1);
  return -1;
}

static PyGetSetDef tensor_getset[] = {
    {"shape", get_shape, set_fixed, PyDoc_STR("The logical shape, a tuple of ints."),
     (void *)"shape\0hurray.array_api.reshape(t, shape) gives a tensor of another shape"},
    {"ndim", get_ndim, NULL, PyDoc_STR("The number of dimensions."), NULL},
    {"dtype", get_dtype, set_fixed, PyDoc_STR("The element dtype (a hurray.dtype)."),
     (void *)"dtype\0hurray.array_api.astype(t, dtype) converts the values; "
             "hurray.Tensor(t.bytes_view(), dtype, shape) reads the same bytes as another dtype"},
    {"__numpy_dtype__", get_numpy_dtype, NULL,
     PyDoc_STR("The NumPy dtype of the elements: t.dtype.__numpy_dtype__ (np.dtype(t))."), NULL},
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
  if (visible < 0) {
    Py_DECREF(names);
    return NULL;
  }
  /* Only what hasattr() finds: without the methods the array object has not (array_object.c)
   * and, where hidden, __array_namespace__. */
  PyObject *shown = PyList_New(0);
  Py_ssize_t n = shown == NULL ? 0 : PyList_Size(names);
  for (Py_ssize_t i = 0; shown != NULL && i < n; i++) {
    PyObject *name = PyList_GET_ITEM(names, i);
    int hidden = hurray__py_tensor_attribute_absent(name) ||
                 (!visible && PyUnicode_Compare(name, st->str_array_namespace) == 0);
    if (!hidden && PyList_Append(shown, name) < 0) Py_CLEAR(shown);
  }
  Py_DECREF(names);
  return shown;
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
 * with the values (as tolist() gives them, float32 ones in their fewest digits) of a small
 * tensor in CPU memory, as NumPy and PyTorch show theirs, and the fields that differ from the
 * defaults. A tensor without elements shows values=[] in O(ndim), whatever its shape. */
#define REPR_MAX_VALUES 64

/* The double with the fewest significant digits that is the same float32 as `v` (0.1 for the
 * float32 nearest 0.1, whose exact value tolist() gives), so that its repr shows the float32
 * as NumPy does, in *out; -1 with an exception. Not finite: `v` itself. */
static int shortest_float32(double v, double *out) {
  *out = v;
  if (!isfinite(v)) return 0;
  for (int digits = 1; digits <= 9; digits++) { /* 9 digits tell every float32 apart */
    char *text = PyOS_double_to_string(v, 'g', digits, 0, NULL);
    if (text == NULL) return -1;
    double shorter = PyOS_string_to_double(text, NULL, NULL);
    PyMem_Free(text);
    if (shorter == -1.0 && PyErr_Occurred()) return -1;
    if ((float)shorter == (float)v) {
      *out = shorter;
      return 0;
    }
  }
  return 0;
}

/* The values of tolist() of a float32 or complex64 tensor, each shortened (in place where a
 * list); a new reference, NULL with an exception. */
static PyObject *shortest_values(PyObject *values) {
  if (PyList_Check(values)) {
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(values); i++) {
      PyObject *item = shortest_values(PyList_GET_ITEM(values, i));
      if (item == NULL) return NULL;
      PyList_SetItem(values, i, item); /* steals item, drops the old one */
    }
    return Py_NewRef(values);
  }
  double real = 0, imag = 0;
  if (PyComplex_Check(values)) {
    if (shortest_float32(PyComplex_RealAsDouble(values), &real) < 0 ||
        shortest_float32(PyComplex_ImagAsDouble(values), &imag) < 0) {
      return NULL;
    }
    return PyComplex_FromDoubles(real, imag);
  }
  if (shortest_float32(PyFloat_AS_DOUBLE(values), &real) < 0) return NULL;
  return PyFloat_FromDouble(real);
}

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
      dtype != NULL && hurray__py_dtype_has_scalars(dtype) &&
      tensor_numel(st, SELF, &numel) == 0 && numel <= REPR_MAX_VALUES) {
    /* No values: "[]" whatever the shape, as NumPy shows array([], shape=(3, 0)); tolist()
     * would build one empty list per row, 2**26 of them for shape (2**26, 0). */
    list = numel == 0 ? PyList_New(0) : hurray__py_tensor_tolist(op, NULL);
    if (list != NULL && (dtype->code == HURRAY_DTYPE_FLOAT32 ||
                         dtype->code == HURRAY_DTYPE_COMPLEX64)) {
      PyObject *shorter = shortest_values(list);
      Py_DECREF(list);
      list = shorter;
    }
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
    {"from_address", HURRAY_PY_CFUNC(hurray__py_tensor_from_address),
     METH_FASTCALL | METH_KEYWORDS | METH_CLASS, hurray__py_tensor_from_address_doc},
    {"from_parts", HURRAY_PY_CFUNC(hurray__py_tensor_from_parts),
     METH_FASTCALL | METH_KEYWORDS | METH_CLASS, hurray__py_tensor_from_parts_doc},
    {"__hurray__", HURRAY_PY_CFUNC(hurray__py_tensor_hurray), METH_FASTCALL | METH_KEYWORDS,
     hurray__py_tensor_hurray_doc},
    {"to_device", HURRAY_PY_CFUNC(hurray__py_tensor_to_device), METH_FASTCALL | METH_KEYWORDS,
     hurray__py_tensor_to_device_doc},
    {"tobytes", hurray__py_tensor_tobytes, METH_NOARGS, hurray__py_tensor_tobytes_doc},
    {"bytes_view", hurray__py_tensor_bytes_view, METH_NOARGS, hurray__py_tensor_bytes_view_doc},
    {"__reduce_ex__", hurray__py_tensor_reduce_ex, METH_O, hurray__py_tensor_reduce_ex_doc},
    {"tolist", hurray__py_tensor_tolist, METH_NOARGS, hurray__py_tensor_tolist_doc},
    {"__dir__", tensor_dir, METH_NOARGS,
     PyDoc_STR("__dir__($self, /)\n--\n\nThe attributes visible in the mode in force.")},
    {"__array__", HURRAY_PY_CFUNC(hurray__py_tensor_array), METH_FASTCALL | METH_KEYWORDS,
     hurray__py_tensor_array_doc},
    {"__dlpack__", HURRAY_PY_CFUNC(hurray__py_tensor_dlpack), METH_FASTCALL | METH_KEYWORDS,
     hurray__py_tensor_dlpack_doc},
    {"__dlpack_device__", hurray__py_tensor_dlpack_device, METH_NOARGS,
     hurray__py_tensor_dlpack_device_doc},
    {"__jax_array__", hurray__py_tensor_jax_array, METH_NOARGS, hurray__py_tensor_jax_array_doc},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef tensor_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(HurrayTensorObject, weakreflist), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot tensor_slots[] = {
    {Py_tp_new, hurray__py_tensor_new},
    {Py_tp_dealloc, tensor_dealloc},
    {Py_tp_traverse, tensor_traverse},
    {Py_tp_clear, tensor_clear},
    {Py_tp_repr, tensor_repr},
    {Py_tp_methods, tensor_methods},
    {Py_tp_getset, tensor_getset},
    {Py_tp_members, tensor_members},
    {Py_tp_doc, (void *)hurray__py_tensor_doc},
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
