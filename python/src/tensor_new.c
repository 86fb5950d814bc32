/* tensor_new.c -- the constructors of hurray.Tensor over memory described by the caller:
 * Tensor(data, dtype, shape, ...) over a buffer-protocol object, Tensor.from_address over memory
 * on any device, and Tensor.from_parts for multi-buffer layouts over dense tensors.
 *
 * Each parses and checks its arguments, then builds through the Tensor core (tensor.c):
 * hurray__py_tensor_from_memory for one buffer, hurray__py_share_buffer and
 * hurray__py_tensor_adopt for from_parts. The conversions between libraries (from_numpy,
 * from_dlpack, from_hurray) live beside their protocols (numpy.c, dlpack.c, native.c).
 */
#include "hurray_python.h"

#include <string.h>
#if defined(__linux__)
#include <errno.h>
#include <sys/mman.h> /* mincore */
#include <unistd.h>
#endif

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

static const char *const kTensorNames[] = {"data", "dtype", "shape", "strides", "byte_offset",
                                           NULL};

/* Tensor(data, dtype, shape, strides=None, byte_offset=0), its arguments parsed. */
static PyObject *tensor_make(HurrayState *st, PyObject *data, PyObject *dtype_obj,
                             PyObject *shape_obj, PyObject *strides_obj, PyObject *offset_obj) {
  const HurrayDTypeInfo *dtype = hurray__py_dtype_arg(st, dtype_obj);
  if (dtype == NULL) return NULL;
  int64_t shape[HURRAY_MAX_NDIM];
  int64_t strides[HURRAY_MAX_NDIM];
  HurrayArray array = {.dtype = dtype->code};
  if (array_args(st, shape_obj, strides_obj, shape, strides, &array) < 0) return NULL;
  if (offset_obj != NULL && hurray__py_u64(st, offset_obj, "byte_offset", &array.byte_offset) < 0) {
    return NULL;
  }

  /* bytes are immutable: a reference keeps their memory, no buffer export is needed. */
  int is_bytes = PyBytes_CheckExact(data);
  Py_buffer view = {.obj = NULL};
  if (is_bytes) {
    view.buf = PyBytes_AS_STRING(data);
    view.len = PyBytes_GET_SIZE(data);
    view.readonly = 1;
  } else if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) {
    return NULL;
  }
  uint64_t size = (uint64_t)view.len;
  if (array.strides == NULL) {
    /* Contiguous construction: the data must be exactly byte_offset + the packed elements. */
    HurrayError error; /* only its message is read, and only on failure */
    error.message[0] = '\0';
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
      .acyclic = is_bytes || PyByteArray_CheckExact(data),
  };
  void *address = view.buf;
  if (is_bytes) {
    return hurray__py_tensor_from_memory(st, address, size, &memory, &array, Py_NewRef(data),
                                         hurray__py_owner_release_object);
  }
  void *owner = hurray__py_owner_new_view(&view);
  if (owner == NULL) {
    PyBuffer_Release(&view);
    return NULL;
  }
  return hurray__py_tensor_from_memory(st, address, size, &memory, &array, owner,
                                       hurray__py_owner_release_view);
}

/* Tensor(data) alone, as torch.Tensor(data) is called: the data are raw bytes here, so the
 * dtype and shape are needed; an array or a list has its own ways in. */
static PyObject *data_alone(PyObject *data) {
  return PyErr_Format(PyExc_TypeError,
                      "Tensor(data, dtype, shape) wraps raw memory and needs its dtype and shape; "
                      "for a %.200s, hurray.from_numpy(a) and hurray.from_dlpack(x) wrap an array "
                      "without copying, hurray.array_api.asarray(data) copies a list or scalar",
                      Py_TYPE(data)->tp_name);
}

PyObject *hurray__py_tensor_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
  if (PyTuple_GET_SIZE(args) == 1 && (kwargs == NULL || PyDict_GET_SIZE(kwargs) == 0)) {
    return data_alone(PyTuple_GET_ITEM(args, 0));
  }
  PyObject *a[5] = {NULL, NULL, NULL, NULL, NULL};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO|OO:Tensor", (char **)kTensorNames, &a[0],
                                   &a[1], &a[2], &a[3], &a[4])) {
    return NULL;
  }
  return tensor_make(hurray__py_state_of_type(type), a[0], a[1], a[2], a[3], a[4]);
}

PyObject *hurray__py_tensor_vectorcall(PyObject *type, PyObject *const *args, size_t nargsf,
                                       PyObject *kwnames) {
  static const HurrayPyParser parser = {"Tensor", kTensorNames, 0, 5, 3};
  PyObject *a[5];
  if (PyVectorcall_NARGS(nargsf) == 1 && kwnames == NULL) return data_alone(args[0]);
  if (hurray__py_parse(&parser, args, PyVectorcall_NARGS(nargsf), kwnames, a) < 0) return NULL;
  return tensor_make(hurray__py_state_of_type((PyTypeObject *)type), a[0], a[1], a[2], a[3],
                     a[4]);
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

PyObject *hurray__py_tensor_from_address(PyObject *cls, PyObject *const *args, Py_ssize_t nargs,
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
  if (hurray__address_form(memory.tag) && byte_size > 0 &&
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

PyObject *hurray__py_tensor_from_parts(PyObject *cls, PyObject *const *args, Py_ssize_t nargs,
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
  /* Parts over the same memory (the same bytes, descriptor and flags: views of one buffer,
   * such as the values and scales of interleaved blocks) share one buffer, whose role is
   * MIXED when theirs differ. */
  const HurrayBuffer *sources[HURRAY_MAX_PARTS];
  for (uint32_t i = 0; status == HURRAY_OK && i < p.nparts; i++) {
    HurrayTensorObject *part = p.tensors[i];
    flags |= part->context->flags;
    sources[i] = hurray__py_tensor_buffer(part, &p.arrays[i]);
    uint32_t shared = i;
    for (uint32_t j = 0; j < i && shared == i; j++) {
      if (sources[j]->data == sources[i]->data && sources[j]->flags == sources[i]->flags &&
          memcmp(&sources[j]->desc, &sources[i]->desc, sizeof sources[i]->desc) == 0) {
        shared = j;
      }
    }
    if (shared < i) {
      p.arrays[i].buffer = p.arrays[shared].buffer;
      if (list->roles[p.arrays[i].buffer] != rule->roles[i]) {
        list->roles[p.arrays[i].buffer] = HURRAY_ROLE_MIXED;
      }
      continue;
    }
    uint32_t index = list->count;
    status = hurray__py_share_buffer(list, sources[i], rule->roles[i], &error);
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

/* ---- docstrings ------------------------------------------------------------------------ */

const char hurray__py_tensor_doc[] =
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
    "[[0, 2, 4], [1, 3, 5]]\n";

const char hurray__py_tensor_from_address_doc[] =
"from_address($type, address, dtype, shape, *, device, memory_class='device', "
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
    "hurray.DescriptorError: ...\n";

const char hurray__py_tensor_from_parts_doc[] =
"from_parts($type, layout, parts=(), *, dtype=None, shape=None, axis=0, "
    "block_size=0, coalesced=False, children=None)\n"
    "--\n"
    "\n"
    "Make a tensor of any layout over the memory of dense tensors.\n"
    "\n"
    "Each part brings its array (shape, strides, byte offset, dtype) and its\n"
    "buffer, on whatever device, memory class and sync state it is. Nothing\n"
    "is copied; the parts are kept alive, and the result is read-only if any\n"
    "of them is. ``t.parts`` and ``t.children`` give the pieces back.\n"
    "Parts that are views of the same memory (the same bytes, device and\n"
    "read-only flag -- say, tensors made over one bytes object) share one\n"
    "buffer, of role 'mixed' when their roles differ: a block tensor whose\n"
    "scales are interleaved with its values (GGUF's blocks) is one buffer.\n"
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
    ">>> raw = struct.pack(\"<e16b\", 0.5, *range(16)) * 2  # 2 blocks: scale, 16 int8\n"
    ">>> q = hurray.Tensor(raw, hurray.int8, [2, 16], strides=[18, 1], byte_offset=2)\n"
    ">>> d = hurray.Tensor(raw, hurray.dtype.float16, [2, 1], strides=[9, 1])\n"
    ">>> blocks = hurray.Tensor.from_parts(\"block\", [q, d], axis=1, block_size=16)\n"
    ">>> [b[\"role\"] for b in blocks.buffers]  # one buffer of 36 bytes\n"
    "['mixed']\n"
    ">>> hurray.dequantize(blocks).tolist()[1][:4]\n"
    "[0.0, 0.5, 1.0, 1.5]\n"
    ">>> indices = hurray.Tensor(struct.pack(\"4q\", 0, 1, 2, 0), hurray.int64, [2, "
    "2])\n"
    ">>> nonzero = hurray.Tensor(struct.pack(\"2f\", 1, 2), hurray.float32, [2])\n"
    ">>> hurray.Tensor.from_parts(\"sparse_coo\", [indices, nonzero], shape=[2, 2])\n"
    "Traceback (most recent call last):\n"
    "  ...\n"
    "hurray.LayoutError: part 0 (indices): element [1, 0] is 2, outside [0, 2)\n";
