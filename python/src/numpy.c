/* numpy.c -- NumPy interoperability: Tensor.__array__ and hurray.from_numpy.
 *
 * NumPy is an optional run-time dependency, reached through its Python API only: the extension
 * is not compiled against NumPy's C API, so it needs no NumPy at build time, keeps no static
 * C-API table, and works with every NumPy 2.x. Both directions are zero-copy:
 *
 *   __array__   numpy.ndarray(shape, dtype, buffer=<span>, offset, strides) over a private
 *               exporter (HostSpan) of the bytes the tensor addresses; the array's base keeps
 *               the tensor alive; strides (any sign) and read-only are preserved.
 *   from_numpy  a Python buffer export of the array (held until the tensor's memory is
 *               released), its byte strides turned into element strides.
 *
 * The one dtype mapping is hurray__py_numpy_dtype() (also hurray.dtype's __numpy_dtype__): Tier 1
 * and float16 by NumPy's own name, the other whole-byte Tier 2 floats through ml_dtypes when it
 * is installed (bfloat16, float8_*).
 * from_numpy maps back by name and checks that the result maps to the very same NumPy dtype,
 * which rejects byte-swapped, structured and ml_dtypes' unpacked sub-byte types (int4, int2,
 * float4_e2m1fn, ... store one element per byte there; Hurray packs them) without a second
 * table.
 */
#include "hurray_python.h"

#include <string.h>

/* ---- lazily imported modules ---------------------------------------------------------------- */

/* ---- numpy.ndarray's instance layout -------------------------------------------------------
 *
 * The head of every ndarray, as NumPy's own headers define it (PyArrayObject_fields, the same
 * since NumPy 1.7 and in every 2.x): what the hot paths read instead of a buffer export or
 * attribute lookups. The extension is still not compiled against NumPy: the layout is probed
 * once, on the array of a known geometry below, and where it does not match every path takes
 * the buffer protocol as before. */
typedef struct NdArrayHead {
  PyObject_HEAD char *data;
  int nd;
  Py_ssize_t *dimensions;
  Py_ssize_t *strides;
  PyObject *base;
  PyObject *descr;
  int flags;
} NdArrayHead;

#define ND(obj) ((NdArrayHead *)(obj))
#define ND_WRITEABLE 0x0400 /* NPY_ARRAY_WRITEABLE */

/* Whether `a` (a view of a 2x3x4 int16 array, [:, ::-1, 1:3]) reads as NumPy says it is:
 * 1 yes, 0 no, -1 error. */
static int probe_matches(PyObject *a) {
  static const Py_ssize_t shape[3] = {2, 3, 2}, strides[3] = {24, -8, 2};
  PyObject *interface = PyObject_GetAttrString(a, "__array_interface__");
  PyObject *data = interface == NULL ? NULL : PyDict_GetItemString(interface, "data");
  PyObject *dtype = PyObject_GetAttrString(a, "dtype");
  int result = -1;
  if (data != NULL && dtype != NULL && PyTuple_Check(data) && PyTuple_GET_SIZE(data) == 2) {
    void *address = PyLong_AsVoidPtr(PyTuple_GET_ITEM(data, 0));
    result = !PyErr_Occurred() && ND(a)->data == address && ND(a)->nd == 3 &&
             ND(a)->descr == dtype && (ND(a)->flags & ND_WRITEABLE) != 0;
    for (int i = 0; result == 1 && i < 3; i++) {
      result = ND(a)->dimensions[i] == shape[i] && ND(a)->strides[i] == strides[i];
    }
  }
  Py_XDECREF(dtype);
  Py_XDECREF(interface);
  return PyErr_Occurred() ? -1 : result;
}

static int probe_layout(PyObject *numpy) {
  PyObject *zeros = PyObject_CallMethod(numpy, "zeros", "(iii)s", 2, 3, 4, "int16");
  PyObject *all = PySlice_New(NULL, NULL, NULL);
  PyObject *minus = PyLong_FromLong(-1), *one = PyLong_FromLong(1), *three = PyLong_FromLong(3);
  PyObject *back = minus == NULL ? NULL : PySlice_New(NULL, NULL, minus);
  PyObject *mid = one == NULL || three == NULL ? NULL : PySlice_New(one, three, NULL);
  PyObject *key =
      all == NULL || back == NULL || mid == NULL ? NULL : PyTuple_Pack(3, all, back, mid);
  PyObject *a = zeros == NULL || key == NULL ? NULL : PyObject_GetItem(zeros, key);
  int result = a == NULL ? -1 : probe_matches(a);
  if (result == 1) { /* and the flag follows the array made read-only */
    PyObject *flags = PyObject_GetAttrString(a, "flags");
    result = flags == NULL || PyObject_SetAttrString(flags, "writeable", Py_False) < 0
                 ? -1
                 : (ND(a)->flags & ND_WRITEABLE) == 0;
    Py_XDECREF(flags);
  }
  Py_XDECREF(a);
  Py_XDECREF(key);
  Py_XDECREF(mid);
  Py_XDECREF(back);
  Py_XDECREF(three);
  Py_XDECREF(one);
  Py_XDECREF(minus);
  Py_XDECREF(all);
  Py_XDECREF(zeros);
  return result;
}

PyObject *hurray__py_numpy(HurrayState *st) {
  if (st->numpy == NULL) {
    PyObject *numpy = PyImport_ImportModule("numpy");
    if (numpy == NULL) return NULL;
    st->numpy_ndarray = PyObject_GetAttrString(numpy, "ndarray");
    st->numpy_asarray = PyObject_GetAttrString(numpy, "asarray");
    int layout = st->numpy_ndarray == NULL || st->numpy_asarray == NULL ? -1 : probe_layout(numpy);
    if (layout < 0) {
      Py_CLEAR(st->numpy_ndarray);
      Py_CLEAR(st->numpy_asarray);
      Py_DECREF(numpy);
      return NULL;
    }
    st->ndarray_layout = layout;
    st->numpy = numpy;
  }
  return st->numpy;
}

/* ml_dtypes, or Py_None when it cannot be imported (borrowed; NULL on another error). */
static PyObject *ml_dtypes_module(HurrayState *st) {
  if (st->ml_dtypes == NULL) {
    st->ml_dtypes = PyImport_ImportModule("ml_dtypes");
    if (st->ml_dtypes == NULL) {
      if (!PyErr_ExceptionMatches(PyExc_ImportError)) return NULL;
      PyErr_Clear();
      st->ml_dtypes = Py_NewRef(Py_None);
    }
  }
  return st->ml_dtypes;
}

PyObject *hurray__py_numpy_dtype(HurrayState *st, const HurrayDTypeInfo *info) {
  PyObject *cached = PyList_GET_ITEM(st->numpy_dtypes, st->dtype_index[info->code]);
  if (cached != Py_None) return Py_NewRef(cached);
  if (info->bits % 8 != 0) {
    bool integer = info->kind == HURRAY_KIND_SIGNED || info->kind == HURRAY_KIND_UNSIGNED;
    return hurray__py_raise(st, HURRAY_PY_EXC_UNSUPPORTED,
                            "%s has no NumPy form: Hurray packs its %d-bit elements, NumPy "
                            "(and ml_dtypes) store one element per byte; %s, and bytes_view() "
                            "and tobytes() give the packed bytes",
                            info->name, (int)info->bits,
                            integer ? "hurray.dequantize(t, dtype=hurray.int8) (or uint8) unpacks "
                                      "them one to a byte"
                                    : "hurray.dequantize(t) widens them to float32");
  }
  PyObject *numpy = hurray__py_numpy(st);
  if (numpy == NULL) return NULL;
  PyObject *spec = NULL;
  if (info->tier == 1 || info->code == HURRAY_DTYPE_FLOAT16) {
    spec = PyUnicode_FromString(info->name);
  } else {
    PyObject *ml_dtypes = ml_dtypes_module(st);
    if (ml_dtypes == NULL) return NULL;
    if (ml_dtypes == Py_None) {
      return hurray__py_raise(st, HURRAY_PY_EXC_UNSUPPORTED,
                              "%s has no NumPy dtype without ml_dtypes (pip install ml_dtypes)",
                              info->name);
    }
    spec = PyObject_GetAttrString(ml_dtypes, info->name);
    if (spec == NULL) {
      if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return NULL;
      PyErr_Clear();
      return hurray__py_raise(st, HURRAY_PY_EXC_UNSUPPORTED,
                              info->kind == HURRAY_KIND_BLOCK
                                  ? "NumPy has no dtype for %s, a GGML quantisation block: "
                                    "hurray.dequantize(t) gives its float32 values, "
                                    "bytes_view() its bytes"
                                  : "NumPy has no dtype for %s",
                              info->name);
    }
  }
  if (spec == NULL) return NULL;
  PyObject *dtype = PyObject_CallMethod(numpy, "dtype", "O", spec);
  Py_DECREF(spec);
  if (dtype == NULL) return NULL;
  PyObject *itemsize = PyObject_GetAttrString(dtype, "itemsize");
  long bytes = itemsize == NULL ? -1 : PyLong_AsLong(itemsize);
  Py_XDECREF(itemsize);
  if (bytes != info->bits / 8) {
    Py_DECREF(dtype);
    if (PyErr_Occurred()) return NULL;
    return hurray__py_raise(st, HURRAY_PY_EXC_UNSUPPORTED,
                            "the NumPy dtype named %s does not store %d bits per element",
                            info->name, (int)info->bits);
  }
  PyList_SET_ITEM(st->numpy_dtypes, st->dtype_index[info->code], Py_NewRef(dtype));
  Py_DECREF(cached);
  return dtype;
}

/* ---- HostSpan: the bytes of a CPU tensor, as the buffer behind an ndarray ----------------- */

typedef struct HostSpan {
  PyObject_HEAD PyObject *tensor; /* keeps the memory alive; counted in tensor->exports */
  char *data;
  Py_ssize_t length;
  int readonly;
} HostSpan;

PyObject *hurray__py_host_span_new(HurrayState *st, PyObject *tensor, char *data, Py_ssize_t length,
                               int readonly) {
  HostSpan *self = PyObject_GC_New(HostSpan, st->host_span_type);
  if (self == NULL) return NULL;
  self->tensor = Py_NewRef(tensor);
  ((HurrayTensorObject *)tensor)->exports++;
  self->data = data;
  self->length = length;
  self->readonly = readonly;
  PyObject_GC_Track(self);
  return (PyObject *)self;
}

static int host_span_traverse(PyObject *op, visitproc visit, void *arg) {
  Py_VISIT(Py_TYPE(op));
  Py_VISIT(((HostSpan *)op)->tensor);
  return 0;
}

static int host_span_clear(PyObject *op) {
  HostSpan *self = (HostSpan *)op;
  if (self->tensor != NULL) {
    ((HurrayTensorObject *)self->tensor)->exports--;
    Py_CLEAR(self->tensor);
  }
  self->data = NULL;
  self->length = 0;
  return 0;
}

static void host_span_dealloc(PyObject *op) {
  PyTypeObject *type = Py_TYPE(op);
  PyObject_GC_UnTrack(op);
  (void)host_span_clear(op);
  type->tp_free(op);
  Py_DECREF(type);
}

static int host_span_getbuffer(PyObject *op, Py_buffer *view, int flags) {
  HostSpan *self = (HostSpan *)op;
  if (self->tensor == NULL) {
    PyErr_SetString(PyExc_BufferError, "the span was cleared");
    return -1;
  }
  return PyBuffer_FillInfo(view, op, self->data, self->length, self->readonly, flags);
}

static PyType_Slot host_span_slots[] = {
    {Py_tp_dealloc, host_span_dealloc},
    {Py_tp_traverse, host_span_traverse},
    {Py_tp_clear, host_span_clear},
    {Py_bf_getbuffer, host_span_getbuffer},
    {Py_tp_doc, (void *)"The bytes of a CPU hurray.Tensor, exported to NumPy (private)."},
    {0, NULL},
};

PyType_Spec hurray__py_host_span_spec = {
    .name = "hurray._hurray._HostSpan",
    .basicsize = sizeof(HostSpan),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = host_span_slots,
};

/* ---- Tensor.__array__ ----------------------------------------------------------------------- */

/* A zero-copy ndarray over a CPU tensor. */
static PyObject *ndarray_view(HurrayState *st, PyObject *self) {
  HurrayHostView host;
  if (hurray__py_tensor_host_view(st, (HurrayTensorObject *)self, "__array__", &host) < 0) {
    return NULL;
  }
  PyObject *dtype = hurray__py_numpy_dtype(st, host.dtype);
  if (dtype == NULL) return NULL;
  const HurrayArray *array = host.array;
  int64_t strides[HURRAY_MAX_NDIM];
  hurray__array_strides(array, strides);
  uint64_t itemsize = host.dtype->bits / 8;
  PyObject *shape = PyTuple_New(array->ndim);
  PyObject *byte_strides = PyTuple_New(array->ndim);
  PyObject *result = NULL;
  for (int32_t i = 0; shape != NULL && byte_strides != NULL && i < array->ndim; i++) {
    /* Validated: |stride * itemsize| fits for every dimension of extent > 1. */
    int64_t step = array->shape[i] > 1 ? strides[i] * (int64_t)itemsize : 0;
    PyObject *extent = PyLong_FromLongLong(array->shape[i]);
    PyObject *stride = PyLong_FromLongLong(step);
    if (extent == NULL || stride == NULL) {
      Py_XDECREF(extent);
      Py_XDECREF(stride);
      Py_CLEAR(shape);
      break;
    }
    PyTuple_SET_ITEM(shape, i, extent);
    PyTuple_SET_ITEM(byte_strides, i, stride);
  }
  if (shape != NULL && byte_strides != NULL && host.end - host.begin > PY_SSIZE_T_MAX) {
    hurray__py_raise_statusf(st, HURRAY_ELIMIT, "the tensor's bytes do not fit a Py_ssize_t");
  } else if (shape != NULL && byte_strides != NULL) {
    PyObject *span = hurray__py_host_span_new(st, self, hurray__py_buffer_at(host.buffer, host.begin),
                                   (Py_ssize_t)(host.end - host.begin), host.readonly);
    if (span != NULL) {
      result = PyObject_CallFunction(st->numpy_ndarray, "OOOKO", shape, dtype, span,
                                     (unsigned long long)(array->byte_offset - host.begin),
                                     byte_strides);
      Py_DECREF(span);
    }
  }
  Py_XDECREF(shape);
  Py_XDECREF(byte_strides);
  Py_DECREF(dtype);
  return result;
}

static const char *const kArrayNames[] = {"dtype", "copy", NULL};

const char hurray__py_tensor_array_doc[] =
    "__array__($self, /, dtype=None, copy=None)\n"
    "--\n"
    "\n"
    "Return the tensor as a NumPy array (NumPy's array protocol).\n"
    "\n"
    "``np.asarray(t)`` and ``np.array(t)`` call it where the buffer protocol\n"
    "does not give NumPy the array (bfloat16, the float8 types, complex32).\n"
    "\n"
    "Parameters\n"
    "----------\n"
    "dtype : numpy.dtype, optional\n"
    "    A dtype to convert to, with a copy.\n"
    "copy : bool or None, optional\n"
    "    NumPy 2's meaning: True always copies; False never copies and\n"
    "    raises ValueError where a copy would be needed; None copies only\n"
    "    for another dtype.\n"
    "\n"
    "Returns\n"
    "-------\n"
    "numpy.ndarray\n"
    "    Without a copy: an array over the tensor's memory with its shape\n"
    "    and strides (negative ones included), read-only when the tensor\n"
    "    is, keeping the tensor alive.\n"
    "\n"
    "Raises\n"
    "------\n"
    "ValueError\n"
    "    copy=False and a copy is needed.\n"
    "hurray.BufferError\n"
    "    The tensor is not in CPU memory, or its data is not ready.\n"
    "hurray.UnsupportedError\n"
    "    A dtype NumPy has no form for: the packed integers and float6 and\n"
    "    float4 types, or bfloat16, float8 and complex32 without ml_dtypes.\n"
    "\n"
    "See Also\n"
    "--------\n"
    "from_numpy : The other direction.\n"
    "\n"
    "Examples\n"
    "--------\n"
    ">>> import numpy as np\n"
    ">>> t = hurray.Tensor(bytes(range(6)), hurray.uint8, [2, 3])\n"
    ">>> a = t.__array__()\n"
    ">>> a\n"
    "array([[0, 1, 2],\n"
    "       [3, 4, 5]], dtype=uint8)\n"
    ">>> a.flags.writeable              # bytes are read-only\n"
    "False\n"
    ">>> t.__array__(dtype=np.float32, copy=False)\n"
    "Traceback (most recent call last):\n"
    "  ...\n"
    "ValueError: __array__(copy=False): converting uint8 to dtype('float32') needs a copy\n";

PyObject *hurray__py_tensor_array(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames) {
  static const HurrayPyParser parser = {"__array__", kArrayNames, 0, 2, 0};
  PyObject *a[2];
  if (hurray__py_parse(&parser, args, nargs, kwnames, a) < 0) return NULL;
  PyObject *want_dtype = a[0] == Py_None ? NULL : a[0];
  int copy = -1; /* None */
  if (a[1] != NULL && a[1] != Py_None) {
    copy = PyObject_IsTrue(a[1]);
    if (copy < 0) return NULL;
  }
  HurrayState *st = hurray__py_state_of(self);
  PyObject *array = ndarray_view(st, self);
  if (array == NULL) return NULL;
  if (want_dtype != NULL) {
    PyObject *target = PyObject_CallMethod(st->numpy, "dtype", "O", want_dtype);
    PyObject *have = target == NULL ? NULL : PyObject_GetAttrString(array, "dtype");
    int same = have == NULL ? -1 : PyObject_RichCompareBool(have, target, Py_EQ);
    Py_XDECREF(have);
    PyObject *converted = NULL;
    if (same == 0 && copy == 0) {
      PyErr_Format(PyExc_ValueError, "__array__(copy=False): converting %s to %R needs a copy",
                   hurray_dtype_info(((HurrayTensorObject *)self)->desc->dtype)->name, target);
    } else if (same == 0) {
      converted = PyObject_CallMethod(array, "astype", "O", target);
      copy = 0; /* astype made the copy */
    }
    Py_XDECREF(target);
    if (same != 1) {
      Py_DECREF(array);
      return converted;
    }
  }
  if (copy == 1) {
    PyObject *copied = PyObject_CallMethod(array, "copy", NULL);
    Py_DECREF(array);
    return copied;
  }
  return array;
}

/* ---- hurray.from_numpy ---------------------------------------------------------------------- */

/* The Hurray dtype of a NumPy dtype already mapped (NumPy's dtypes of native byte order are
 * singletons: found by identity), or NULL without an exception. */
static const HurrayDTypeInfo *cached_dtype(HurrayState *st, PyObject *np_dtype) {
  Py_ssize_t last = st->numpy_dtype_last; /* the one found last time, tried first */
  if (PyList_GET_ITEM(st->numpy_dtypes, last) == np_dtype) {
    return ((HurrayDTypeObject *)PyTuple_GET_ITEM(st->dtypes, last))->info;
  }
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(st->numpy_dtypes); i++) {
    if (PyList_GET_ITEM(st->numpy_dtypes, i) == np_dtype) {
      st->numpy_dtype_last = i;
      return ((HurrayDTypeObject *)PyTuple_GET_ITEM(st->dtypes, i))->info;
    }
  }
  return NULL;
}

/* The Hurray dtype of a NumPy dtype, or NULL with UnsupportedError. One not mapped yet is
 * asked for its name (which NumPy computes in Python, at microseconds a call) and checked to
 * map back to the very same NumPy dtype. */
static const HurrayDTypeInfo *dtype_from_numpy(HurrayState *st, PyObject *np_dtype) {
  const HurrayDTypeInfo *cached = cached_dtype(st, np_dtype);
  if (cached != NULL) return cached;
  PyObject *name = PyObject_GetAttrString(np_dtype, "name");
  if (name == NULL) return NULL;
  const char *text = PyUnicode_AsUTF8(name);
  uint8_t code = 0;
  const HurrayDTypeInfo *info = NULL;
  if (text != NULL && hurray_dtype_from_name(text, &code, NULL) == HURRAY_OK) {
    info = hurray_dtype_info(code);
  }
  Py_DECREF(name);
  if (text == NULL) return NULL;
  if (info == NULL) {
    hurray__py_raise(st, HURRAY_PY_EXC_UNSUPPORTED, "NumPy dtype %R has no Hurray dtype", np_dtype);
    return NULL;
  }
  PyObject *back = hurray__py_numpy_dtype(st, info);
  if (back == NULL) return NULL;
  int same = PyObject_RichCompareBool(back, np_dtype, Py_EQ);
  Py_DECREF(back);
  if (same < 0) return NULL;
  if (!same) {
    hurray__py_raise(st, HURRAY_PY_EXC_UNSUPPORTED,
                     "NumPy dtype %R is not Hurray's %s (byte order or layout differs)", np_dtype,
                     info->name);
    return NULL;
  }
  return info;
}

/* The object whose buffer export carries the array's memory: the array itself for dtypes the
 * PEP 3118 format can spell, else a same-itemsize unsigned view (ml_dtypes' types cannot be
 * exported as themselves); the view's base keeps the array alive. */
static PyObject *buffer_exporter(PyObject *arr, const HurrayDTypeInfo *info) {
  if (info->tier == 1 || info->code == HURRAY_DTYPE_FLOAT16) return Py_NewRef(arr);
  char spec[8];
  snprintf(spec, sizeof spec, "u%d", info->bits / 8);
  return PyObject_CallMethod(arr, "view", "s", spec);
}

/* A new Tensor over an array's memory: `ndim` extents and byte strides (any sign) of elements
 * of `info` starting at `buf`. SINK for `owner`. */
static PyObject *tensor_over(HurrayState *st, const HurrayDTypeInfo *info, char *buf, int ndim,
                             const Py_ssize_t *dims, const Py_ssize_t *byte_strides,
                             HurrayPyMemory *memory, void *owner,
                             HurrayOwnerReleaseFn owner_release) {
  const char *failure = NULL;
  int64_t shape[HURRAY_MAX_NDIM];
  int64_t strides[HURRAY_MAX_NDIM];
  int64_t itemsize = info->bits / 8;
  HurrayArray array = {.ndim = ndim, .shape = shape, .strides = strides, .dtype = info->code};
  int axis = 0;
  int extreme = 0; /* an extent past HURRAY_MAX_DIM: the core's check words the error */
  if (ndim > HURRAY_MAX_NDIM) failure = "ndim";
  for (; failure == NULL && axis < ndim; axis++) {
    shape[axis] = dims[axis];
    extreme |= dims[axis] > HURRAY_MAX_DIM;
    Py_ssize_t step = byte_strides[axis];
    if (step % itemsize == 0) {
      strides[axis] = step / itemsize;
    } else if (dims[axis] <= 1) {
      strides[axis] = 0; /* never stepped: any stride is as good */
    } else {
      failure = "stride";
    }
  }
  int64_t lo = 0, hi = 0;
  if (failure == NULL &&
      hurray__relative_span(ndim, shape, strides, (uint64_t)itemsize, &lo, &hi) < 0) {
    failure = "span";
  }
  if (failure != NULL) {
    if (owner_release != NULL) owner_release(owner);
    if (failure[0] == 'n') {
      return hurray__py_raise_statusf(st, HURRAY_ELIMIT, "the array has %d dimensions; at most %d",
                                      ndim, HURRAY_MAX_NDIM);
    }
    if (failure[0] == 's' && failure[1] == 't') {
      axis--;
      return hurray__py_raise_statusf(st, HURRAY_ELAYOUT,
                                      "NumPy stride %zd of axis %d is not a multiple of the "
                                      "itemsize %zd; Hurray strides count elements",
                                      byte_strides[axis], axis, (Py_ssize_t)itemsize);
    }
    return hurray__py_raise_statusf(st, HURRAY_EOVERFLOW, "the array's extent overflows");
  }
  array.byte_offset = (uint64_t)-lo;
  memory->tag = HURRAY_DEVICE_CPU;
  memory->memory_class = HURRAY_MEM_DEVICE;
  memory->sync_mode = HURRAY_SYNC_READY;
  char *start = (char *)((uintptr_t)buf - (uintptr_t)-lo);
  if (extreme || hi - lo > INT64_MAX / 8) { /* bit offsets near int64's end: checked in full */
    return hurray__py_tensor_from_memory(st, start, (uint64_t)(hi - lo), memory, &array, owner,
                                         owner_release);
  }
  /* What hurray_array_span checks holds by construction: ndim and extents in range, a mapped
   * dtype, zero reserved bytes, and every element in [start, start + hi - lo), without overflow
   * in bytes (hurray__relative_span) or in bits (the span is under INT64_MAX / 8). Every
   * operation of the array API ends here, so it is not checked twice. */
  return hurray__py_tensor_from_checked(st, start, (uint64_t)(hi - lo), memory, &array, owner,
                                        owner_release);
}

/* from_numpy of an ndarray of the probed layout whose dtype is mapped already, reading its
 * head: the tensor's owner is the array itself (a reference; an ndarray's memory stays while
 * it lives), and the tensor remembers it as the array it is (HurrayTensorObject.ndarray). */
static PyObject *from_ndarray_head(HurrayState *st, PyObject *arr, const HurrayDTypeInfo *info) {
  HurrayPyMemory memory = {
      .readonly = (ND(arr)->flags & ND_WRITEABLE) == 0,
      .acyclic = 1, /* an array of numbers holds no reference that could lead back */
  };
  PyObject *tensor = tensor_over(st, info, ND(arr)->data, ND(arr)->nd, ND(arr)->dimensions,
                                 ND(arr)->strides, &memory, Py_NewRef(arr),
                                 hurray__py_owner_release_object);
  if (tensor != NULL) ((HurrayTensorObject *)tensor)->ndarray = arr;
  return tensor;
}

/* from_numpy through a buffer export of the array (held until the tensor's memory goes). */
static PyObject *from_ndarray_export(HurrayState *st, PyObject *arr) {
  PyObject *np_dtype = PyObject_GetAttrString(arr, "dtype");
  if (np_dtype == NULL) return NULL;
  const HurrayDTypeInfo *info = dtype_from_numpy(st, np_dtype);
  Py_DECREF(np_dtype);
  if (info == NULL) return NULL;
  PyObject *exporter = buffer_exporter(arr, info);
  if (exporter == NULL) return NULL;
  Py_buffer view;
  int status = PyObject_GetBuffer(exporter, &view, PyBUF_RECORDS_RO);
  Py_DECREF(exporter);
  if (status < 0) return NULL;
  HurrayPyMemory memory = {.readonly = view.readonly};
  char *buf = view.buf;
  int ndim = view.ndim;
  Py_ssize_t *dims = view.shape, *strides = view.strides;
  void *owner = hurray__py_owner_new_view(&view); /* the shape and strides stay with it */
  if (owner == NULL) {
    PyBuffer_Release(&view);
    return NULL;
  }
  return tensor_over(st, info, buf, ndim, dims, strides, &memory, owner,
                     hurray__py_owner_release_view);
}

/* A new Tensor over an ndarray of any type (SINK for nothing). */
static PyObject *from_ndarray(HurrayState *st, PyObject *arr) {
  if (st->ndarray_layout && Py_IS_TYPE(arr, (PyTypeObject *)st->numpy_ndarray)) {
    /* The head can be read where the dtype is the very object of the mapping (mapped now if
     * it was not yet). */
    const HurrayDTypeInfo *info = cached_dtype(st, ND(arr)->descr);
    if (info == NULL && dtype_from_numpy(st, ND(arr)->descr) == NULL) return NULL;
    if (info == NULL) info = cached_dtype(st, ND(arr)->descr);
    if (info != NULL) return from_ndarray_head(st, arr, info);
  }
  return from_ndarray_export(st, arr);
}

static PyObject *from_numpy(PyObject *module, PyObject *arr) {
  HurrayState *st = PyModule_GetState(module);
  if (hurray__py_numpy(st) == NULL) return NULL;
  if (Py_IS_TYPE(arr, (PyTypeObject *)st->numpy_ndarray)) return from_ndarray(st, arr);
  int is_array = PyObject_IsInstance(arr, st->numpy_ndarray);
  if (is_array <= 0) {
    if (is_array == 0) {
      PyErr_Format(PyExc_TypeError,
                   "from_numpy() takes a numpy.ndarray, not %.200s (hurray.from_dlpack takes "
                   "any DLPack producer)",
                   Py_TYPE(arr)->tp_name);
    }
    return NULL;
  }
  return from_ndarray(st, arr);
}

/* ---- Basic subscripts in C (ADR-095) ---------------------------------------------------- */

/* A slice whose start, stop and step are ints or None: unpacking it runs no Python code. */
static int plain_slice(PyObject *key) {
  if (!PySlice_Check(key)) return 0;
  PySliceObject *slice = (PySliceObject *)key;
  PyObject *parts[3] = {slice->start, slice->stop, slice->step};
  for (int i = 0; i < 3; i++) {
    if (parts[i] != Py_None && !PyLong_CheckExact(parts[i])) return 0;
  }
  return 1;
}

PyObject *hurray__py_ndarray_subscript(HurrayState *st, PyObject *arr, PyObject *key) {
  PyObject *const *items = &key;
  Py_ssize_t count = 1;
  if (PyTuple_CheckExact(key)) {
    items = &PyTuple_GET_ITEM(key, 0);
    count = PyTuple_GET_SIZE(key);
  }
  const HurrayDTypeInfo *info = cached_dtype(st, ND(arr)->descr);
  int nd = ND(arr)->nd;
  if (info == NULL || count > nd) return NULL;
  char *data = ND(arr)->data;
  /* `arr` is exactly a tensor (hurray__py_tensor_source_ndarray): nd <= HURRAY_MAX_NDIM */
  Py_ssize_t dims[HURRAY_MAX_NDIM], strides[HURRAY_MAX_NDIM];
  int ndim = 0;
  /* NumPy's get_view_from_index, for these keys */
  for (int axis = 0; axis < nd; axis++) {
    Py_ssize_t extent = ND(arr)->dimensions[axis], stride = ND(arr)->strides[axis];
    PyObject *k = axis < count ? items[axis] : NULL;
    if (k != NULL && PyLong_CheckExact(k)) {
      Py_ssize_t i = PyLong_AsSsize_t(k);
      if (i == -1 && PyErr_Occurred()) {
        PyErr_Clear(); /* too big for an index: NumPy's IndexError, from the general path */
        return NULL;
      }
      if (i < 0) i += extent;
      if (i < 0 || i >= extent) return NULL;
      data += i * stride;
      continue;
    }
    if (k != NULL) {
      Py_ssize_t start, stop, step;
      if (!plain_slice(k)) return NULL;
      if (PySlice_Unpack(k, &start, &stop, &step) < 0) {
        PyErr_Clear(); /* a zero step: NumPy's ValueError, from the general path */
        return NULL;
      }
      Py_ssize_t length = PySlice_AdjustIndices(extent, &start, &stop, step);
      if (length <= 0) { /* as NumPy makes an empty slice */
        length = 0;
        step = 1;
        start = 0;
      }
      data += start * stride;
      extent = length;
      if (length > 1) stride *= step; /* within the array's span: |step| < extent */
    }
    dims[ndim] = extent;
    strides[ndim] = stride;
    ndim++;
  }
  HurrayPyMemory memory = {
      .readonly = (ND(arr)->flags & ND_WRITEABLE) == 0,
      .acyclic = 1, /* as from_ndarray_head: the owner is an array of numbers */
  };
  PyObject *tensor = tensor_over(st, info, data, ndim, dims, strides, &memory, Py_NewRef(arr),
                                 hurray__py_owner_release_object);
  if (tensor != NULL) ((HurrayTensorObject *)tensor)->view_key = Py_NewRef(key);
  return tensor;
}

PyObject *hurray__py_view_key(PyObject *key) {
  if (PyLong_CheckExact(key)) return PyTuple_Pack(2, key, Py_Ellipsis);
  if (!PyTuple_CheckExact(key)) return Py_NewRef(key);
  Py_ssize_t n = PyTuple_GET_SIZE(key);
  PyObject *full = PyTuple_New(n + 1);
  if (full == NULL) return NULL;
  for (Py_ssize_t i = 0; i < n; i++) PyTuple_SET_ITEM(full, i, Py_NewRef(PyTuple_GET_ITEM(key, i)));
  PyTuple_SET_ITEM(full, n, Py_NewRef(Py_Ellipsis));
  return full;
}

/* The NumPy view a tensor made by hurray__py_ndarray_subscript stands for: its owner indexed
 * with its key as hurray__py_view_key gives it. NULL, no exception, if NumPy does not give an
 * array of the owner's type. */
static PyObject *subscript_view(HurrayTensorObject *self) {
  PyObject *np_key = hurray__py_view_key(self->view_key);
  PyObject *owner = self->context->owner;
  PyObject *view = np_key == NULL ? NULL : PyObject_GetItem(owner, np_key);
  Py_XDECREF(np_key);
  if (view == NULL) PyErr_Clear();
  if (view != NULL && !Py_IS_TYPE(view, Py_TYPE(owner))) Py_CLEAR(view);
  return view;
}

void hurray__py_tensor_forget_ndarray(HurrayTensorObject *self) {
  if (self->view_key != NULL) { /* the view is this tensor's own; else the owner holds it */
    Py_CLEAR(self->ndarray);
    Py_CLEAR(self->view_key);
  }
  self->ndarray = NULL;
}

PyObject *hurray__py_wrap_result(HurrayState *st, PyObject *arr) {
  if (!Py_IS_TYPE(arr, (PyTypeObject *)st->numpy_ndarray)) { /* a NumPy scalar, say */
    PyObject *array = PyObject_CallOneArg(st->numpy_asarray, arr);
    Py_DECREF(arr);
    if (array == NULL) return NULL;
    arr = array;
  }
  PyObject *tensor = from_ndarray(st, arr);
  Py_DECREF(arr);
  return tensor;
}

/* Whether the array the tensor was made from still is exactly the tensor. Its head can change
 * under it (ndarray.resize(refcheck=False), flags.writeable), so this is asked at every use. */
static int ndarray_is_tensor(HurrayTensorObject *self, PyObject *a) {
  const HurrayArray *values = &self->desc->parts[0];
  const HurrayBuffer *buffer = hurray__py_tensor_buffer(self, values);
  if (ND(a)->data != hurray__py_buffer_at(buffer, values->byte_offset) ||
      ND(a)->nd != values->ndim ||
      ((ND(a)->flags & ND_WRITEABLE) == 0) != hurray__py_tensor_readonly(self)) {
    return 0;
  }
  /* from_numpy gives such a tensor explicit strides, from the array's own */
  int64_t itemsize = hurray_dtype_info(values->dtype)->bits / 8;
  for (int i = 0; i < values->ndim; i++) {
    if (ND(a)->dimensions[i] != values->shape[i] ||
        (values->shape[i] > 1 && ND(a)->strides[i] != values->strides[i] * itemsize)) {
      return 0;
    }
  }
  return 1;
}

PyObject *hurray__py_tensor_source_ndarray(HurrayTensorObject *self) {
  if (self->context == NULL) return NULL;
  if (self->ndarray == NULL && self->view_key != NULL) self->ndarray = subscript_view(self);
  PyObject *a = self->ndarray;
  return a != NULL && ndarray_is_tensor(self, a) ? a : NULL;
}

PyObject *hurray__py_tensor_ndarray(HurrayState *st, HurrayTensorObject *self) {
  PyObject *a = hurray__py_tensor_source_ndarray(self);
  return a != NULL ? Py_NewRef(a) : ndarray_view(st, (PyObject *)self);
}

static PyObject *engine_ndarray(PyObject *module, PyObject *tensor) {
  HurrayState *st = PyModule_GetState(module);
  if (!Py_IS_TYPE(tensor, st->tensor_type)) {
    return PyErr_Format(PyExc_TypeError, "_ndarray() takes a hurray.Tensor, not %.200s",
                        Py_TYPE(tensor)->tp_name);
  }
  return hurray__py_tensor_ndarray(st, (HurrayTensorObject *)tensor);
}

PyMethodDef hurray__py_numpy_functions[] = {
    {"_ndarray", engine_ndarray, METH_O,
     PyDoc_STR("_ndarray($module, tensor, /)\n"
               "--\n"
               "\n"
               "The NumPy array hurray.array_api computes on for a CPU tensor (private).\n"
               "\n"
               "Parameters\n"
               "----------\n"
               "tensor : hurray.Tensor\n"
               "    A dense tensor in CPU memory.\n"
               "\n"
               "Returns\n"
               "-------\n"
               "numpy.ndarray\n"
               "    The array the tensor was made from (``from_numpy``) while it still\n"
               "    is exactly the tensor, else a new view, ``tensor.__array__()``.\n"
               "\n"
               "Raises\n"
               "------\n"
               "TypeError\n"
               "    `tensor` is not a hurray.Tensor.\n"
               "hurray.BufferError\n"
               "    The tensor is not in CPU memory.\n")},
    {"from_numpy", from_numpy, METH_O,
     PyDoc_STR("from_numpy($module, arr, /)\n"
               "--\n"
               "\n"
               "Wrap a NumPy array in a hurray.Tensor, without copying.\n"
               "\n"
               "Parameters\n"
               "----------\n"
               "arr : numpy.ndarray\n"
               "    An array of a Tier 1 dtype or float16, or of bfloat16, a float8\n"
               "    type or complex32 from ml_dtypes, in native byte order.\n"
               "\n"
               "Returns\n"
               "-------\n"
               "hurray.Tensor\n"
               "    A dense tensor over the array's memory, with its shape and its\n"
               "    strides counted in elements, read-only when the array is. The array\n"
               "    is kept alive (its buffer is held).\n"
               "\n"
               "Raises\n"
               "------\n"
               "TypeError\n"
               "    `arr` is not an ndarray (`from_dlpack` takes other producers).\n"
               "hurray.UnsupportedError\n"
               "    A dtype Hurray does not name as it is: byte-swapped, structured,\n"
               "    datetime, object, string.\n"
               "hurray.LayoutError\n"
               "    A byte stride that is not a multiple of the itemsize.\n"
               "\n"
               "See Also\n"
               "--------\n"
               "from_dlpack : Any DLPack producer, NumPy included.\n"
               "Tensor.__array__ : The other direction.\n"
               "\n"
               "Examples\n"
               "--------\n"
               ">>> import numpy as np\n"
               ">>> a = np.arange(6, dtype=np.int16).reshape(2, 3)\n"
               ">>> t = hurray.from_numpy(a[:, ::2])\n"
               ">>> t.dtype, t.shape, t.strides\n"
               "(hurray.int16, (2, 2), (3, 2))\n"
               ">>> t.tolist()\n"
               "[[0, 2], [3, 5]]\n")},
    {NULL, NULL, 0, NULL},
};
