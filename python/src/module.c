/* module.c -- hurray._hurray: the module definition (PEP 489 multi-phase initialisation), its
 * state, and the argument helpers every other file uses. */
#include "hurray_python.h"

#include <string.h>


/* ---- argument parsing ---------------------------------------------------------------------- */

/* Whether the keyword `key` (a str) is `name`: compact ASCII strings -- every keyword Python
 * code passes -- are compared in place, without CPython's general comparison. */
static int keyword_is(PyObject *key, const char *name) {
  if (PyUnicode_IS_COMPACT_ASCII(key)) {
    const char *text = PyUnicode_DATA(key);
    if (text[0] != name[0]) return 0; /* how most names differ: nothing more to read */
    size_t length = strlen(name);
    return (size_t)PyUnicode_GET_LENGTH(key) == length && memcmp(text, name, length) == 0;
  }
  return PyUnicode_CompareWithASCIIString(key, name) == 0;
}

/* Every required parameter was given: 0, or -1 with TypeError. */
static int check_required(const HurrayPyParser *parser, PyObject *const *out) {
  for (int i = 0; i < parser->required; i++) {
    if (out[i] == NULL) {
      PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s'", parser->fname,
                   parser->names[i]);
      return -1;
    }
  }
  return 0;
}

/* The keywords of a call not parsed before, into `out` (the first nargs filled), checked and,
 * with `keywords`, remembered. Never inlined: its registers and frame would slow down the
 * usual path (no keywords, or a tuple parsed before) by half. */
#if defined(__GNUC__)
__attribute__((noinline))
#endif
static int parse_new_keywords(const HurrayPyParser *parser, HurrayPyKeywords *keywords,
                              int count, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kwnames, PyObject **out) {
  int8_t found_at[HURRAY_PY_MAX_KEYWORDS];
  Py_ssize_t nkw = PyTuple_GET_SIZE(kwnames);
  for (Py_ssize_t k = 0; k < nkw; k++) {
    PyObject *key = PyTuple_GET_ITEM(kwnames, k);
    int found = -1;
    for (int i = parser->posonly; keywords != NULL && i < count; i++) {
      if (key == keywords->names[i]) {
        found = i;
        break;
      }
    }
    for (int i = parser->posonly; found < 0 && i < count; i++) {
      if (keyword_is(key, parser->names[i])) found = i;
    }
    if (found < 0) {
      PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", parser->fname,
                   key);
      return -1;
    }
    if (out[found] != NULL) {
      PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", parser->fname,
                   parser->names[found]);
      return -1;
    }
    out[found] = args[nargs + k];
    /* k < count <= HURRAY_PY_MAX_KEYWORDS: each keyword fills a parameter still empty. */
    if (k < HURRAY_PY_MAX_KEYWORDS) found_at[k] = (int8_t)found;
  }
  if (check_required(parser, out) < 0) return -1;
  if (keywords != NULL) {
    Py_XSETREF(keywords->last, Py_NewRef(kwnames));
    keywords->last_nargs = nargs;
    memcpy(keywords->last_found, found_at, (size_t)nkw);
  }
  return 0;
}

int hurray__py_parse_keywords(const HurrayPyParser *parser, HurrayPyKeywords *keywords,
                              PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                              PyObject **out) {
  int count = 0;
  while (parser->names[count] != NULL) out[count++] = NULL;
  if (nargs > parser->maxpos) {
    PyErr_Format(PyExc_TypeError, "%s() takes at most %d positional argument%s (%zd given)",
                 parser->fname, parser->maxpos, parser->maxpos == 1 ? "" : "s", nargs);
    return -1;
  }
  for (Py_ssize_t i = 0; i < nargs; i++) out[i] = args[i];
  if (kwnames == NULL) return check_required(parser, out);
  if (keywords == NULL || kwnames != keywords->last || nargs != keywords->last_nargs) {
    return parse_new_keywords(parser, keywords, count, args, nargs, kwnames, out);
  }
  /* This very tuple (held, so never another at its address) passed every check before. */
  for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(kwnames); k++) {
    out[keywords->last_found[k]] = args[nargs + k];
  }
  return 0;
}

int hurray__py_parse(const HurrayPyParser *parser, PyObject *const *args, Py_ssize_t nargs,
                     PyObject *kwnames, PyObject **out) {
  return hurray__py_parse_keywords(parser, NULL, args, nargs, kwnames, out);
}

/* obj.__index__() as a Python int (a new reference), or NULL with TypeError naming `what`. */
static PyObject *as_index(PyObject *obj, const char *what) {
  if (PyLong_Check(obj)) return Py_NewRef(obj);
  if (PyBool_Check(obj) || !PyIndex_Check(obj)) {
    return PyErr_Format(PyExc_TypeError, "%s must be an integer, not %.200s", what,
                        Py_TYPE(obj)->tp_name);
  }
  return PyNumber_Index(obj);
}

int hurray__py_int_in_range_full(HurrayState *st, PyObject *obj, long long lo, long long hi,
                                 const char *what, long long *out) {
  PyObject *index = as_index(obj, what);
  if (index == NULL) return -1;
  int overflow = 0;
  long long value = PyLong_AsLongLongAndOverflow(index, &overflow);
  Py_DECREF(index);
  if (value == -1 && PyErr_Occurred()) return -1;
  if (overflow != 0 || value < lo || value > hi) {
    hurray__py_raise(st, HURRAY_PY_EXC_INVALID_ARGUMENT, "%s must be in [%lld, %lld], not %R", what,
                     lo, hi, obj);
    return -1;
  }
  *out = value;
  return 0;
}

int hurray__py_i64(HurrayState *st, PyObject *obj, const char *what, int64_t *out) {
  long long value = 0;
  if (hurray__py_int_in_range(st, obj, INT64_MIN, INT64_MAX, what, &value) < 0) return -1;
  *out = (int64_t)value;
  return 0;
}

int hurray__py_u64(HurrayState *st, PyObject *obj, const char *what, uint64_t *out) {
  PyObject *index = as_index(obj, what);
  if (index == NULL) return -1;
  int overflow = 0;
  long long small = PyLong_AsLongLongAndOverflow(index, &overflow);
  unsigned long long value = (unsigned long long)small;
  int out_of_range = overflow < 0 || (overflow == 0 && small < 0);
  if (small == -1 && overflow == 0 && PyErr_Occurred()) {
    Py_DECREF(index);
    return -1;
  }
  if (overflow > 0) {
    value = PyLong_AsUnsignedLongLong(index);
    if (value == (unsigned long long)-1 && PyErr_Occurred()) {
      if (!PyErr_ExceptionMatches(PyExc_OverflowError)) {
        Py_DECREF(index);
        return -1;
      }
      PyErr_Clear();
      out_of_range = 1;
    }
  }
  Py_DECREF(index);
  if (out_of_range) {
    hurray__py_raise(st, HURRAY_PY_EXC_INVALID_ARGUMENT, "%s must be in [0, 2**64 - 1], not %R",
                     what, obj);
    return -1;
  }
  *out = (uint64_t)value;
  return 0;
}

PyObject *hurray__py_sequence_tuple(PyObject *obj, const char *message) {
  PyObject *items = PySequence_Fast(obj, message);
  if (items == NULL || PyTuple_CheckExact(items)) return items;
  PyObject *tuple = PySequence_Tuple(items); /* a list: the caller's own, perhaps */
  Py_DECREF(items);
  return tuple;
}

PyObject *hurray__py_mapping_pairs(PyObject *obj, const char *fname) {
  PyObject *items = PyMapping_Items(obj);
  PyObject *pairs = items == NULL ? NULL : PySequence_Tuple(items); /* items() may keep its list */
  Py_XDECREF(items);
  for (Py_ssize_t i = 0; pairs != NULL && i < PyTuple_GET_SIZE(pairs); i++) {
    PyObject *pair = PyTuple_GET_ITEM(pairs, i);
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
      PyErr_Format(PyExc_TypeError,
                   "%s(): items() of the %.200s gave a %.200s, not a (key, value) pair", fname,
                   Py_TYPE(obj)->tp_name, Py_TYPE(pair)->tp_name);
      Py_CLEAR(pairs);
    }
  }
  return pairs;
}

PyObject *hurray__py_protocol_missing(PyObject *obj, PyObject *method, const char *fname) {
  if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return NULL;
  HurrayPySavedError saved;
  hurray__py_error_save(&saved); /* no API call with an exception set */
  int has = PyObject_HasAttr(obj, method);
  hurray__py_error_restore(&saved);
  if (!has) { /* not raised inside the method: the object has none */
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "%s() needs an object with %U, not %.200s", fname, method,
                 Py_TYPE(obj)->tp_name);
  }
  return NULL;
}

/* ---- the module ---------------------------------------------------------------------------- */

static int add_type(PyObject *module, PyType_Spec *spec, PyTypeObject **slot, int public) {
  *slot = (PyTypeObject *)PyType_FromModuleAndSpec(module, spec, NULL);
  if (*slot == NULL) return -1;
  return public ? PyModule_AddType(module, *slot) : 0;
}

static int intern(PyObject **slot, const char *text) {
  *slot = PyUnicode_InternFromString(text);
  return *slot == NULL ? -1 : 0;
}

static int hurray_exec(PyObject *module) {
  HurrayState *st = PyModule_GetState(module);
  if (hurray_c_abi_version() != HURRAY_C_ABI_VERSION) {
    /* Cannot happen with the static core; kept so a mismatched build fails loudly. */
    PyErr_Format(PyExc_ImportError,
                 "hurray._hurray was compiled for hurray-ffi ABI %d but linked ABI %u",
                 HURRAY_C_ABI_VERSION, (unsigned)hurray_c_abi_version());
    return -1;
  }
  if (hurray__py_errors_init(module, st) < 0) return -1;
  PyType_Spec *tensor_spec = NULL; /* the Tensor core plus the array object (array_object.c) */
  if (add_type(module, &hurray__py_dtype_spec, &st->dtype_type, 1) < 0 ||
      add_type(module, &hurray__py_device_spec, &st->device_type, 1) < 0 ||
      (tensor_spec = hurray__py_array_object_spec(&hurray__py_tensor_spec)) == NULL ||
      add_type(module, tensor_spec, &st->tensor_type, 1) < 0 ||
      add_type(module, &hurray__py_mode_spec, &st->mode_type, 1) < 0 ||
      add_type(module, &hurray__py_host_span_spec, &st->host_span_type, 0) < 0 ||
      add_type(module, &hurray__py_file_spec, &st->file_type, 1) < 0 ||
      hurray__py_file_register(st->file_type) < 0 ||
      add_type(module, &hurray__py_client_spec, &st->client_type, 1) < 0 ||
      add_type(module, &hurray__py_server_spec, &st->server_type, 1) < 0) {
    return -1;
  }
  /* Tensor(...) without an argument tuple: CPython calls a type through its tp_vectorcall
   * when it has one (PyType_Spec has no slot for it before 3.14). */
  st->tensor_type->tp_vectorcall = hurray__py_tensor_vectorcall;
  if (intern(&st->str_array_namespace, "__array_namespace__") < 0 ||
      intern(&st->str_dlpack, "__dlpack__") < 0 ||
      intern(&st->str_dlpack_device, "__dlpack_device__") < 0 ||
      intern(&st->dlpack_keywords.names[HURRAY_PY_DL_STREAM], "stream") < 0 ||
      intern(&st->dlpack_keywords.names[HURRAY_PY_DL_MAX_VERSION], "max_version") < 0 ||
      intern(&st->dlpack_keywords.names[HURRAY_PY_DL_DL_DEVICE], "dl_device") < 0 ||
      intern(&st->dlpack_keywords.names[HURRAY_PY_DL_COPY], "copy") < 0 ||
      intern(&st->str_hurray, "__hurray__") < 0) {
    return -1;
  }
  st->dl_max_version =
      Py_BuildValue("(II)", HURRAY_DLPACK_MAJOR_VERSION, HURRAY_DLPACK_MINOR_VERSION);
  if (st->dl_max_version == NULL) return -1;
  st->dl_kwnames = PyTuple_Pack(1, st->dlpack_keywords.names[HURRAY_PY_DL_MAX_VERSION]);
  if (st->dl_kwnames == NULL) return -1;
  if (hurray__py_dtypes_init(module, st) < 0 || hurray__py_modes_init(module, st) < 0) return -1;
  hurray__py_tensor_templates_init(st);
  if (PyModule_AddFunctions(module, hurray__py_error_functions) < 0 ||
      PyModule_AddFunctions(module, hurray__py_mode_functions) < 0 ||
      PyModule_AddFunctions(module, hurray__py_device_functions) < 0 ||
      PyModule_AddFunctions(module, hurray__py_numpy_functions) < 0 ||
      PyModule_AddFunctions(module, hurray__py_dlpack_functions) < 0 ||
      PyModule_AddFunctions(module, hurray__py_native_functions) < 0 ||
      PyModule_AddFunctions(module, hurray__py_file_functions) < 0 ||
      PyModule_AddFunctions(module, hurray__py_wire_functions) < 0 ||
      PyModule_AddFunctions(module, hurray__py_quant_functions) < 0) {
    return -1;
  }
  if (PyModule_AddStringConstant(module, "__version__", hurray_version_string()) < 0 ||
      PyModule_AddIntConstant(module, "C_ABI_VERSION", HURRAY_C_ABI_VERSION) < 0) {
    return -1;
  }
  return 0;
}

#define HURRAY_STATE_OBJECTS(X)                          \
  X(st->dtype_type)                                      \
  X(st->device_type)                                     \
  X(st->tensor_type)                                     \
  X(st->mode_type)                                       \
  X(st->host_span_type)                                  \
  X(st->file_type)                                       \
  X(st->client_type)                                     \
  X(st->server_type)                                     \
  X(st->dtypes)                                          \
  X(st->mode_var)                                        \
  X(st->mode_names[0])                                   \
  X(st->mode_names[1])                                   \
  X(st->array_api)                                       \
  X(st->array_ops)                                       \
  X(st->numpy)                                           \
  X(st->ml_dtypes)                                       \
  X(st->numpy_dtypes)                                    \
  X(st->numpy_ndarray)                                   \
  X(st->numpy_asarray)                                   \
  X(st->ufuncs)                                          \
  X(st->str_array_namespace)                             \
  X(st->str_dlpack)                                      \
  X(st->str_dlpack_device)                               \
  X(st->dlpack_keywords.names[HURRAY_PY_DL_STREAM])      \
  X(st->dlpack_keywords.names[HURRAY_PY_DL_MAX_VERSION]) \
  X(st->dlpack_keywords.names[HURRAY_PY_DL_DL_DEVICE])   \
  X(st->dlpack_keywords.names[HURRAY_PY_DL_COPY])        \
  X(st->dlpack_keywords.last)                            \
  X(st->dl_max_version)                                  \
  X(st->dl_max_version_seen)                             \
  X(st->dl_kwnames)                                      \
  X(st->str_hurray)

static int hurray_traverse(PyObject *module, visitproc visit, void *arg) {
  HurrayState *st = PyModule_GetState(module);
  if (st == NULL) return 0;
#define VISIT(field) Py_VISIT(field);
  HURRAY_STATE_OBJECTS(VISIT)
#undef VISIT
  for (int i = 0; i < HURRAY_PY_EXC_COUNT; i++) Py_VISIT(st->exceptions[i]);
  return 0;
}

static int hurray_clear(PyObject *module) {
  HurrayState *st = PyModule_GetState(module);
  if (st == NULL) return 0;
#define CLEAR(field) Py_CLEAR(field);
  HURRAY_STATE_OBJECTS(CLEAR)
#undef CLEAR
  for (int i = 0; i < HURRAY_PY_EXC_COUNT; i++) Py_CLEAR(st->exceptions[i]);
  return 0;
}

static void hurray_free(void *module) {
  (void)hurray_clear((PyObject *)module);
}

static PyModuleDef_Slot hurray_slots[] = {
    {Py_mod_exec, (void *)hurray_exec},
#if PY_VERSION_HEX >= 0x030C0000
    /* Owner releases and DLPack deleters run on arbitrary threads and take the GIL with
     * PyGILState_Ensure, which only knows the main interpreter. */
    {Py_mod_multiple_interpreters, Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED},
#endif
    {0, NULL},
};

static PyObject *empty_cache(PyObject *module, PyObject *unused) {
  (void)module;
  (void)unused;
  return PyLong_FromUnsignedLongLong(hurray_buffer_trim());
}

static PyMethodDef module_functions[] = {
    {"empty_cache", empty_cache, METH_NOARGS,
     PyDoc_STR("empty_cache($module, /)\n"
               "--\n"
               "\n"
               "Give back the memory of released tensors that hurray keeps for reuse.\n"
               "\n"
               "A tensor of 2 MiB or more that hurray allocated (a copying load, a fetch,\n"
               "a copy) leaves its memory to the next tensor of the same size when it is\n"
               "released, so loading or fetching again does not fault in and zero fresh\n"
               "pages: up to 64 tensors and 1 GiB (or a sixteenth of the machine's memory)\n"
               "are kept, the oldest given back first. The kernel may take that memory\n"
               "whenever it needs it, but until then it counts in the process's resident\n"
               "size; this gives all of it back at once, as ``torch.cuda.empty_cache()``\n"
               "does for PyTorch's cache (C: ``hurray_buffer_trim``).\n"
               "\n"
               "Returns\n"
               "-------\n"
               "int\n"
               "    The bytes given back.\n"
               "\n"
               "Examples\n"
               "--------\n"
               ">>> import numpy as np\n"
               ">>> hurray.save(\"w.hurray\", {\"w\": np.ones(1 << 20, np.float32)})\n"
               ">>> w = hurray.load(\"w.hurray\", mmap=False)[\"w\"]\n"
               ">>> del w  # its 4 MiB are kept for the next tensor of that size\n"
               ">>> hurray.empty_cache() >= 4 << 20\n"
               "True\n"
               ">>> hurray.empty_cache()\n"
               "0\n")},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(hurray_doc,
             "The C extension behind the `hurray` package (hurray-python over hurray-ffi).\n\n"
             "Import `hurray`, not this module: hurray re-exports the public names.");

static struct PyModuleDef hurray_module = {
    PyModuleDef_HEAD_INIT,         .m_name = "hurray._hurray", .m_doc = hurray_doc,
    .m_size = sizeof(HurrayState), .m_methods = module_functions, .m_slots = hurray_slots,
    .m_traverse = hurray_traverse, .m_clear = hurray_clear,    .m_free = hurray_free,
};

PyMODINIT_FUNC PyInit__hurray(void) {
  return PyModuleDef_Init(&hurray_module);
}
