/* dtype.c -- hurray.dtype: one immutable singleton per entry of hurray-core's dtype table.
 *
 * The C table (hurray_dtype_at / hurray_dtype_count) is the only list of dtypes: every dtype is
 * reachable as hurray.dtype.<name>, the Tier 1 ones also as hurray.<name>. Singletons make
 * == among Hurray dtypes identity-based and exact; a dtype also equals what hurray.dtype()
 * turns into it (names, NumPy and PyTorch dtypes: ADR-089), and is NumPy's dtype where NumPy
 * asks (__numpy_dtype__). Pickling reduces to hurray.dtype(<name>), which hands back the
 * singleton.
 */
#include "hurray_python.h"

#include <string.h>

static const char kKindChars[] = {
    [HURRAY_KIND_BOOL] = 'b',  [HURRAY_KIND_SIGNED] = 'i',  [HURRAY_KIND_UNSIGNED] = 'u',
    [HURRAY_KIND_FLOAT] = 'f', [HURRAY_KIND_COMPLEX] = 'c', [HURRAY_KIND_BLOCK] = 'q',
};

PyObject *hurray__py_dtype_object(HurrayState *st, int code) {
  if (code < 0 || code > 0xFF || st->dtype_index[code] == HURRAY_PY_NO_DTYPE) return NULL;
  return PyTuple_GET_ITEM(st->dtypes, st->dtype_index[code]);
}

static const HurrayDTypeInfo *dtype_named(HurrayState *st, const char *name) {
  uint8_t code = 0;
  HurrayError error = {0};
  int status = hurray_dtype_from_name(name, &code, &error);
  if (status != HURRAY_OK) {
    hurray__py_raise_status(st, status, &error);
    return NULL;
  }
  return hurray_dtype_info(code);
}

static PyObject *not_a_dtype(PyObject *obj) {
  return PyErr_Format(PyExc_TypeError,
                      "dtype must be a hurray.dtype, a dtype name, a NumPy dtype or scalar type "
                      "(ml_dtypes' included) or a PyTorch dtype, not %.200s",
                      Py_TYPE(obj)->tp_name);
}

/* The name of a NumPy dtype, or of the NumPy dtype of a type (np.float32, ml_dtypes.bfloat16,
 * float), as a new str; NULL with an exception for anything else or a byte-swapped dtype. */
static PyObject *numpy_dtype_name(HurrayState *st, PyObject *obj) {
  PyObject *numpy = PyImport_ImportModule("numpy");
  if (numpy == NULL) {
    if (!PyErr_ExceptionMatches(PyExc_ImportError)) return NULL;
    PyErr_Clear();
    return not_a_dtype(obj);
  }
  PyObject *dtype_type = PyObject_GetAttrString(numpy, "dtype");
  Py_DECREF(numpy);
  if (dtype_type == NULL) return NULL;
  int is_dtype = PyObject_IsInstance(obj, dtype_type);
  PyObject *dtype = NULL;
  if (is_dtype == 1) {
    dtype = Py_NewRef(obj);
  } else if (is_dtype == 0 && PyType_Check(obj)) {
    dtype = PyObject_CallOneArg(dtype_type, obj);
  } else if (is_dtype == 0) {
    not_a_dtype(obj);
  }
  Py_DECREF(dtype_type);
  if (dtype == NULL) return NULL;
  PyObject *order = PyObject_GetAttrString(dtype, "byteorder");
  PyObject *name = NULL;
  if (order != NULL && PyUnicode_Check(order) &&
      (PyUnicode_CompareWithASCIIString(order, "=") == 0 ||
       PyUnicode_CompareWithASCIIString(order, "|") == 0)) {
    name = PyObject_GetAttrString(dtype, "name");
  } else if (order != NULL) {
    hurray__py_raise(st, HURRAY_PY_EXC_UNSUPPORTED,
                     "NumPy dtype %R is byte-swapped; Hurray dtypes are little-endian", dtype);
  }
  Py_XDECREF(order);
  Py_DECREF(dtype);
  return name;
}

/* Another library's dtype as the Hurray dtype of the same name: a NumPy dtype or scalar type
 * (ml_dtypes' types are NumPy's), or a PyTorch dtype (whose str is 'torch.<name>'). */
static const HurrayDTypeInfo *foreign_dtype(HurrayState *st, PyObject *obj) {
  PyObject *name = NULL;
  if (strcmp(Py_TYPE(obj)->tp_name, "torch.dtype") == 0) {
    PyObject *text = PyObject_Str(obj);
    if (text == NULL) return NULL;
    name = PyUnicode_Substring(text, 6, PY_SSIZE_T_MAX); /* after "torch." */
    Py_DECREF(text);
  } else {
    name = numpy_dtype_name(st, obj);
  }
  if (name == NULL) return NULL;
  const char *text = PyUnicode_AsUTF8(name);
  const HurrayDTypeInfo *info = text == NULL ? NULL : dtype_named(st, text);
  Py_DECREF(name);
  return info;
}

/* The Hurray name NumPy gives the dtype string `obj` ("f4", "<i8", "double"), as a new str;
 * NULL without an exception where NumPy is not imported or does not know it. A byte-swapped
 * one raises, as hurray.dtype(numpy.dtype(">f4")) does. */
static PyObject *numpy_spelling(HurrayState *st, PyObject *obj) {
  PyObject *module_name = PyUnicode_FromString("numpy");
  PyObject *numpy = module_name == NULL ? NULL : PyImport_GetModule(module_name);
  Py_XDECREF(module_name);
  if (numpy == NULL) return NULL;
  PyObject *dtype = PyObject_CallMethod(numpy, "dtype", "O", obj);
  Py_DECREF(numpy);
  if (dtype == NULL) {
    PyErr_Clear(); /* NumPy does not know it either */
    return NULL;
  }
  PyObject *name = numpy_dtype_name(st, dtype);
  Py_DECREF(dtype);
  return name;
}

/* A dtype by name. A name Hurray lacks that NumPy spells a Hurray dtype is refused all the
 * same (NumPy's "float" is not PyTorch's), with the Hurray name it stands for. */
static const HurrayDTypeInfo *dtype_string(HurrayState *st, PyObject *obj) {
  const char *name = PyUnicode_AsUTF8(obj);
  if (name == NULL) return NULL;
  uint8_t code = 0;
  HurrayError error = {0};
  int status = hurray_dtype_from_name(name, &code, &error);
  if (status == HURRAY_OK) return hurray_dtype_info(code);
  PyObject *spelled = numpy_spelling(st, obj);
  const char *hurray_name = spelled == NULL ? NULL : PyUnicode_AsUTF8(spelled);
  if (hurray_name != NULL && hurray_dtype_from_name(hurray_name, &code, NULL) == HURRAY_OK) {
    hurray__py_raise_statusf(st, status, "%s (NumPy's \"%s\" is %s: pass \"%s\")",
                             error.message, name, hurray_name, hurray_name);
  } else if (!PyErr_Occurred()) {
    hurray__py_raise_status(st, status, &error);
  }
  Py_XDECREF(spelled);
  return NULL;
}

const HurrayDTypeInfo *hurray__py_dtype_arg(HurrayState *st, PyObject *obj) {
  if (Py_IS_TYPE(obj, st->dtype_type)) return ((HurrayDTypeObject *)obj)->info;
  return PyUnicode_Check(obj) ? dtype_string(st, obj) : foreign_dtype(st, obj);
}

static const HurrayDTypeInfo *info_of(PyObject *self) {
  return ((HurrayDTypeObject *)self)->info;
}

static PyObject *dtype_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
  PyObject *spec = NULL;
  static char *kwlist[] = {"name", NULL};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O:dtype", kwlist, &spec)) return NULL;
  HurrayState *st = hurray__py_state_of_type(type);
  const HurrayDTypeInfo *info = hurray__py_dtype_arg(st, spec);
  return info == NULL ? NULL : Py_NewRef(hurray__py_dtype_object(st, info->code));
}

static int dtype_traverse(PyObject *self, visitproc visit, void *arg) {
  Py_VISIT(Py_TYPE(self));
  return 0;
}

static void dtype_dealloc(PyObject *self) {
  PyTypeObject *type = Py_TYPE(self);
  PyObject_GC_UnTrack(self);
  type->tp_free(self);
  Py_DECREF(type);
}

static PyObject *dtype_repr(PyObject *self) {
  const HurrayDTypeInfo *info = info_of(self);
  return PyUnicode_FromFormat(info->tier == 1 ? "hurray.%s" : "hurray.dtype.%s", info->name);
}

static PyObject *dtype_str(PyObject *self) {
  return PyUnicode_FromString(info_of(self)->name);
}

/* Whether `other`, not a Hurray dtype, names `info`: 1 yes, 0 no, 2 not a dtype of any kind
 * (NotImplemented), -1 error. A NumPy dtype or type is compared as NumPy compares np.dtype(d)
 * with it, so that both operand orders agree (ml_dtypes' unpacked int4 is not Hurray's packed
 * one); a name or a PyTorch dtype when hurray.dtype(other) is d. */
static int names_dtype(HurrayState *st, const HurrayDTypeInfo *info, PyObject *other) {
  int is_type = PyType_Check(other);
  if (PyUnicode_Check(other) || strcmp(Py_TYPE(other)->tp_name, "torch.dtype") == 0) {
    const HurrayDTypeInfo *named = hurray__py_dtype_arg(st, other);
    if (named != NULL) return named == info;
    if (!PyErr_ExceptionMatches(PyExc_TypeError) && !PyErr_ExceptionMatches(PyExc_BufferError)) {
      return -1;
    }
    PyErr_Clear(); /* names no Hurray dtype */
    return 0;
  }
  PyObject *module_name = PyUnicode_FromString("numpy");
  PyObject *numpy = module_name == NULL ? NULL : PyImport_GetModule(module_name);
  Py_XDECREF(module_name);
  if (numpy == NULL) return PyErr_Occurred() ? -1 : 2; /* no NumPy loaded: no NumPy dtype */
  PyObject *dtype_type = PyObject_GetAttrString(numpy, "dtype");
  Py_DECREF(numpy);
  int is_dtype = dtype_type == NULL ? -1 : PyObject_IsInstance(other, dtype_type);
  PyObject *theirs = NULL;
  if (is_dtype == 1) {
    theirs = Py_NewRef(other);
  } else if (is_dtype == 0 && is_type) {
    theirs = PyObject_CallOneArg(dtype_type, other);
    if (theirs == NULL && PyErr_ExceptionMatches(PyExc_TypeError)) is_dtype = 2;
  } else if (is_dtype == 0) {
    is_dtype = 2;
  }
  Py_XDECREF(dtype_type);
  if (theirs == NULL) {
    if (is_dtype != 2) return -1;
    PyErr_Clear();
    return is_type ? 0 : 2;
  }
  PyObject *mine = hurray__py_numpy_dtype(st, info);
  int equal = 0;
  if (mine == NULL) {
    PyErr_Clear(); /* NumPy has no dtype of this encoding: none equals it */
  } else {
    equal = PyObject_RichCompareBool(mine, theirs, Py_EQ);
    Py_DECREF(mine);
  }
  Py_DECREF(theirs);
  return equal;
}

/* By code: one singleton per code. Equal foreign objects (NumPy's dtype, a name) hash as they
 * do: mixing them as keys of one dict is not supported, as with NumPy's dtype and its names. */
static Py_hash_t dtype_hash(PyObject *self) {
  return (Py_hash_t)info_of(self)->code + 1;
}

static PyObject *dtype_richcompare(PyObject *self, PyObject *other, int op) {
  if (op != Py_EQ && op != Py_NE) Py_RETURN_NOTIMPLEMENTED;
  HurrayState *st = hurray__py_state_of_type(Py_TYPE(self));
  int equal = Py_IS_TYPE(other, st->dtype_type) ? self == other
                                                 : names_dtype(st, info_of(self), other);
  if (equal < 0) return NULL;
  if (equal == 2) Py_RETURN_NOTIMPLEMENTED;
  return PyBool_FromLong(equal == (op == Py_EQ));
}

static PyObject *dtype_reduce(PyObject *self, PyObject *unused) {
  (void)unused;
  return Py_BuildValue("O(s)", (PyObject *)Py_TYPE(self), info_of(self)->name);
}

static PyObject *get_name(PyObject *self, void *c) {
  (void)c;
  return PyUnicode_FromString(info_of(self)->name);
}
static PyObject *get_bits(PyObject *self, void *c) {
  (void)c;
  return PyLong_FromLong(info_of(self)->bits);
}
static PyObject *get_itemsize(PyObject *self, void *c) {
  (void)c;
  const HurrayDTypeInfo *info = info_of(self);
  if (info->bits % 8 != 0) Py_RETURN_NONE;
  return PyLong_FromLong(info->bits / 8);
}
static PyObject *get_tier(PyObject *self, void *c) {
  (void)c;
  return PyLong_FromLong(info_of(self)->tier);
}
static PyObject *get_kind(PyObject *self, void *c) {
  (void)c;
  const HurrayDTypeInfo *info = info_of(self);
  char kind = info->kind < sizeof kKindChars ? kKindChars[info->kind] : '?';
  return PyUnicode_FromStringAndSize(&kind, 1);
}
static PyObject *get_code(PyObject *self, void *c) {
  (void)c;
  return PyLong_FromLong(info_of(self)->code);
}

static PyObject *get_numpy_dtype(PyObject *self, void *c) {
  (void)c;
  return hurray__py_numpy_dtype(hurray__py_state_of_type(Py_TYPE(self)), info_of(self));
}

static PyGetSetDef dtype_getset[] = {
    {"name", get_name, NULL, PyDoc_STR("The dtype's one name, such as 'float32' or 'int4'."), NULL},
    {"bits", get_bits, NULL, PyDoc_STR("Storage bits per element (1 to 128)."), NULL},
    {"itemsize", get_itemsize, NULL,
     PyDoc_STR("Bytes per element, or None for sub-byte dtypes (packed, see bits)."), NULL},
    {"tier", get_tier, NULL,
     PyDoc_STR("The tier: 1 array API dtypes, 2 other floats, 3 packed integers."), NULL},
    {"kind", get_kind, NULL,
     PyDoc_STR("The kind: 'b' bool, 'i' int, 'u' unsigned, 'f' float, 'c' complex, 'q' block."),
     NULL},
    {"code", get_code, NULL, PyDoc_STR("The dtype's code in the Hurray format, fixed forever."),
     NULL},
    {"__numpy_dtype__", get_numpy_dtype, NULL,
     PyDoc_STR("The NumPy dtype of the same encoding (ml_dtypes' for bfloat16 and the float8\n"
               "formats, complex32), which np.dtype(d) and every NumPy dtype argument use.\n"
               "Raises hurray.UnsupportedError where NumPy has no dtype of that encoding:\n"
               "the packed sub-byte ones, or Tier 2 without ml_dtypes."),
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef dtype_methods[] = {
    {"__reduce__", dtype_reduce, METH_NOARGS,
     PyDoc_STR("__reduce__($self, /)\n--\n\nPickles as hurray.dtype(<name>).")},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(dtype_doc,
             "dtype(name)\n"
             "--\n"
             "\n"
             "The element type of a hurray.Tensor.\n"
             "\n"
             "Every dtype is a singleton: ``hurray.dtype.<name>`` for each of them\n"
             "(hurray.dtype.int4, hurray.dtype.bfloat16, ...), and ``hurray.<name>``\n"
             "too for the Tier 1 ones (hurray.float32). A dtype is equal to itself\n"
             "and to what ``hurray.dtype()`` turns into it: its name, a NumPy dtype\n"
             "or scalar type, a PyTorch dtype (``t.dtype == np.float32``). NumPy\n"
             "takes a dtype wherever it takes its own (``np.dtype(d)``,\n"
             "``np.empty(shape, d)``), except the packed sub-byte ones. Dtypes pickle\n"
             "by name.\n"
             "\n"
             "Parameters\n"
             "----------\n"
             "name : str, hurray.dtype, NumPy dtype or type, or torch.dtype\n"
             "    A dtype's name ('bfloat16'), or another library's dtype of the\n"
             "    same name: a NumPy dtype or scalar type (np.float32,\n"
             "    ml_dtypes.bfloat16, ml_dtypes.int4) or a PyTorch dtype\n"
             "    (torch.bfloat16). Every dtype argument of hurray takes the same\n"
             "    forms.\n"
             "\n"
             "Returns\n"
             "-------\n"
             "hurray.dtype\n"
             "    The singleton.\n"
             "\n"
             "Raises\n"
             "------\n"
             "hurray.DTypeError\n"
             "    No dtype has that name (a TypeError).\n"
             "hurray.UnsupportedError\n"
             "    A byte-swapped NumPy dtype: Hurray's dtypes are little-endian.\n"
             "TypeError\n"
             "    Any other kind of object.\n"
             "\n"
             "Notes\n"
             "-----\n"
             "Tier 1 holds the array API standard's dtypes: bool, the integers,\n"
             "float32, float64, complex64, complex128. Tier 2 the other floating\n"
             "types: float16, bfloat16, the float8, float6 and float4 formats,\n"
             "complex32. Tier 3 the packed integers int4, uint4, int2, uint2 and\n"
             "uint1, stored back to back, low bits first. docs/spec/dtypes.md gives\n"
             "every encoding.\n"
             "\n"
             "Examples\n"
             "--------\n"
             ">>> hurray.dtype(\"bfloat16\") is hurray.dtype.bfloat16\n"
             "True\n"
             ">>> import numpy as np\n"
             ">>> hurray.dtype(np.float32) is hurray.float32\n"
             "True\n"
             ">>> hurray.float32 == np.float32, np.dtype(hurray.float32)\n"
             "(True, dtype('float32'))\n"
             ">>> d = hurray.dtype.int4\n"
             ">>> d, d.bits, d.itemsize, d.tier, d.kind\n"
             "(hurray.dtype.int4, 4, None, 3, 'i')\n");

static PyType_Slot dtype_slots[] = {
    {Py_tp_new, dtype_new},
    {Py_tp_dealloc, dtype_dealloc},
    {Py_tp_traverse, dtype_traverse},
    {Py_tp_repr, dtype_repr},
    {Py_tp_str, dtype_str},
    {Py_tp_richcompare, dtype_richcompare},
    {Py_tp_hash, dtype_hash},
    {Py_tp_getset, dtype_getset},
    {Py_tp_methods, dtype_methods},
    {Py_tp_doc, (void *)dtype_doc},
    {0, NULL},
};

PyType_Spec hurray__py_dtype_spec = {
    .name = "hurray.dtype",
    .basicsize = sizeof(HurrayDTypeObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = dtype_slots,
};

int hurray__py_dtypes_init(PyObject *module, HurrayState *st) {
  size_t count = hurray_dtype_count();
  if (count >= HURRAY_PY_NO_DTYPE) {
    PyErr_Format(PyExc_ImportError, "hurray-core has %zu dtypes; this extension handles %d", count,
                 HURRAY_PY_NO_DTYPE - 1);
    return -1;
  }
  memset(st->dtype_index, HURRAY_PY_NO_DTYPE, sizeof st->dtype_index);
  st->dtypes = PyTuple_New((Py_ssize_t)count);
  st->numpy_dtypes = PyList_New((Py_ssize_t)count);
  if (st->dtypes == NULL || st->numpy_dtypes == NULL) return -1;
  /* The type is immutable to Python code; its namespace is filled here, once. */
  PyObject *namespace = st->dtype_type->tp_dict;
  for (size_t i = 0; i < count; i++) {
    const HurrayDTypeInfo *info = hurray_dtype_at(i);
    HurrayDTypeObject *obj = PyObject_GC_New(HurrayDTypeObject, st->dtype_type);
    if (obj == NULL) return -1;
    obj->info = info;
    PyObject_GC_Track(obj);
    PyTuple_SET_ITEM(st->dtypes, (Py_ssize_t)i, (PyObject *)obj);
    PyList_SET_ITEM(st->numpy_dtypes, (Py_ssize_t)i, Py_NewRef(Py_None));
    st->dtype_index[info->code] = (uint8_t)i;
    if (PyDict_SetItemString(namespace, info->name, (PyObject *)obj) < 0) return -1;
    if (info->tier == 1 && PyModule_AddObjectRef(module, info->name, (PyObject *)obj) < 0) {
      return -1;
    }
  }
  PyType_Modified(st->dtype_type);
  return 0;
}
