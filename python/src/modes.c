/* modes.c -- compliance modes (ADR-022): strict (the default) and relaxed.
 *
 * A mode gates exactly two things, both through hurray__py_array_api_admits:
 *   (a) whether the array API namespace functions admit Tier 2 / Tier 3 dtypes, and
 *   (b) whether __array_namespace__ is visible on Tier 2 / Tier 3 tensors.
 * Nothing else reads the mode: DLPack, __array__, the buffer protocol and the errors do not.
 *
 * The mode in force is the innermost `with hurray.mode(name):` block of the current thread or
 * asyncio task (a contextvars.ContextVar, restored on exit, exception or not), else the
 * interpreter-wide default: set_mode(name), initialised at import from HURRAY_MODE.
 * Precedence: the innermost block, then set_mode, then HURRAY_MODE, then strict.
 */
#include "hurray_python.h"

#include <stdlib.h>
#include <string.h>

static const char *const kModeNames[2] = {"strict", "relaxed"};

/* A mode name -> HurrayPyMode, or -1 with TypeError / InvalidArgumentError. */
static int mode_from_name(HurrayState *st, PyObject *name) {
  if (!PyUnicode_Check(name)) {
    PyErr_Format(PyExc_TypeError, "mode must be a str, not %.200s", Py_TYPE(name)->tp_name);
    return -1;
  }
  for (int i = 0; i < 2; i++) {
    if (PyUnicode_CompareWithASCIIString(name, kModeNames[i]) == 0) return i;
  }
  hurray__py_raise(st, HURRAY_PY_EXC_INVALID_ARGUMENT, "mode must be 'strict' or 'relaxed', not %R",
                   name);
  return -1;
}

int hurray__py_mode(HurrayState *st) {
  PyObject *value = NULL;
  if (PyContextVar_Get(st->mode_var, NULL, &value) < 0) return -1;
  if (value == NULL) return st->default_mode;
  int mode = value == st->mode_names[HURRAY_PY_MODE_RELAXED] ? HURRAY_PY_MODE_RELAXED
                                                             : HURRAY_PY_MODE_STRICT;
  Py_DECREF(value);
  return mode;
}

int hurray__py_array_api_admits(HurrayState *st, const HurrayDTypeInfo *dtype) {
  if (dtype->tier == 1) return 1;
  int mode = hurray__py_mode(st);
  return mode < 0 ? -1 : mode == HURRAY_PY_MODE_RELAXED;
}

int hurray__py_modes_init(PyObject *module, HurrayState *st) {
  (void)module;
  for (int i = 0; i < 2; i++) {
    st->mode_names[i] = PyUnicode_InternFromString(kModeNames[i]);
    if (st->mode_names[i] == NULL) return -1;
  }
  st->mode_var = PyContextVar_New("hurray.mode", NULL);
  if (st->mode_var == NULL) return -1;
  st->default_mode = HURRAY_PY_MODE_STRICT;
  /* HURRAY_MODE, read once at import (ADR-022): unset or empty means strict; a value that is
   * not a mode fails the import with a ValueError, so a typo cannot silently run strict code
   * as relaxed or the other way round. */
  const char *env = getenv("HURRAY_MODE");
  if (env != NULL && env[0] != '\0') {
    if (strcmp(env, "relaxed") == 0) {
      st->default_mode = HURRAY_PY_MODE_RELAXED;
    } else if (strcmp(env, "strict") != 0) {
      hurray__py_raise(st, HURRAY_PY_EXC_INVALID_ARGUMENT,
                       "HURRAY_MODE=%.100s is not a mode: use 'strict' or 'relaxed'", env);
      return -1;
    }
  }
  return 0;
}

/* ---- module functions ---------------------------------------------------------------------- */

static PyObject *set_mode(PyObject *module, PyObject *name) {
  HurrayState *st = PyModule_GetState(module);
  int mode = mode_from_name(st, name);
  if (mode < 0) return NULL;
  st->default_mode = mode;
  Py_RETURN_NONE;
}

static PyObject *get_mode(PyObject *module, PyObject *unused) {
  (void)unused;
  HurrayState *st = PyModule_GetState(module);
  int mode = hurray__py_mode(st);
  return mode < 0 ? NULL : Py_NewRef(st->mode_names[mode]);
}

static PyObject *array_api_admits(PyObject *module, PyObject *arg) {
  HurrayState *st = PyModule_GetState(module);
  const HurrayDTypeInfo *dtype = hurray__py_dtype_arg(st, arg);
  if (dtype == NULL) return NULL;
  int admits = hurray__py_array_api_admits(st, dtype);
  return admits < 0 ? NULL : PyBool_FromLong(admits);
}

PyMethodDef hurray__py_mode_functions[] = {
    {"set_mode", set_mode, METH_O,
     PyDoc_STR("set_mode($module, name, /)\n"
               "--\n"
               "\n"
               "Set the interpreter-wide compliance mode.\n"
               "\n"
               "Parameters\n"
               "----------\n"
               "name : {'strict', 'relaxed'}\n"
               "    The mode. In strict mode, the default, only tensors of Tier 1\n"
               "    dtypes offer the array API namespace; relaxed mode admits every\n"
               "    dtype. Nothing else depends on the mode.\n"
               "\n"
               "Raises\n"
               "------\n"
               "hurray.InvalidArgumentError\n"
               "    `name` is not a mode (a ValueError).\n"
               "TypeError\n"
               "    `name` is not a str.\n"
               "\n"
               "See Also\n"
               "--------\n"
               "mode : A mode for one ``with`` block.\n"
               "get_mode : The mode in force.\n"
               "\n"
               "Notes\n"
               "-----\n"
               "A ``with hurray.mode(...)`` block in force in the calling context keeps\n"
               "its own mode until it exits. The environment variable HURRAY_MODE sets\n"
               "the mode at import.\n"
               "\n"
               "Examples\n"
               "--------\n"
               ">>> hurray.set_mode(\"relaxed\")\n"
               ">>> hurray.get_mode()\n"
               "'relaxed'\n"
               ">>> hurray.set_mode(\"strict\")\n")},
    {"get_mode", get_mode, METH_NOARGS,
     PyDoc_STR("get_mode($module, /)\n"
               "--\n"
               "\n"
               "Return the compliance mode in force in this context.\n"
               "\n"
               "Returns\n"
               "-------\n"
               "str\n"
               "    'strict' or 'relaxed': the innermost ``with hurray.mode(...)``\n"
               "    block's mode, else the one set by `set_mode`, else HURRAY_MODE's,\n"
               "    else 'strict'.\n"
               "\n"
               "See Also\n"
               "--------\n"
               "set_mode, mode\n"
               "\n"
               "Examples\n"
               "--------\n"
               ">>> hurray.get_mode()\n"
               "'strict'\n"
               ">>> with hurray.mode(\"relaxed\"):\n"
               "...     hurray.get_mode()\n"
               "'relaxed'\n")},
    {"_array_api_admits", array_api_admits, METH_O,
     PyDoc_STR("_array_api_admits($module, dtype, /)\n--\n\n"
               "Whether the array API namespace admits `dtype` in the mode in force: Tier 1 "
               "always, Tier 2 and 3 only in relaxed mode. The namespace functions call it.")},
    {NULL, NULL, 0, NULL},
};

/* ---- hurray.mode: the context manager ------------------------------------------------------ */

typedef struct ModeObject {
  PyObject_HEAD PyObject *name; /* st->mode_names[mode] */
  PyObject *token;              /* the ContextVar token while entered, else NULL */
} ModeObject;

static PyObject *mode_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
  HurrayState *st = hurray__py_state_of_type(type);
  PyObject *name = NULL;
  if (!PyArg_ParseTuple(args, "O:mode", &name)) return NULL;
  if (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0) {
    return PyErr_Format(PyExc_TypeError, "mode() takes no keyword arguments");
  }
  int mode = mode_from_name(st, name);
  if (mode < 0) return NULL;
  ModeObject *self = PyObject_GC_New(ModeObject, type);
  if (self == NULL) return NULL;
  self->name = Py_NewRef(st->mode_names[mode]);
  self->token = NULL;
  PyObject_GC_Track(self);
  return (PyObject *)self;
}

static int mode_traverse(PyObject *op, visitproc visit, void *arg) {
  ModeObject *self = (ModeObject *)op;
  Py_VISIT(Py_TYPE(op));
  Py_VISIT(self->name);
  Py_VISIT(self->token);
  return 0;
}

static int mode_clear(PyObject *op) {
  ModeObject *self = (ModeObject *)op;
  Py_CLEAR(self->name);
  Py_CLEAR(self->token);
  return 0;
}

static void mode_dealloc(PyObject *op) {
  PyTypeObject *type = Py_TYPE(op);
  PyObject_GC_UnTrack(op);
  (void)mode_clear(op);
  type->tp_free(op);
  Py_DECREF(type);
}

static PyObject *mode_enter(PyObject *op, PyObject *unused) {
  (void)unused;
  ModeObject *self = (ModeObject *)op;
  HurrayState *st = hurray__py_state_of(op);
  if (self->token != NULL) {
    return hurray__py_raise(st, HURRAY_PY_EXC_STATE, "%R is already entered", op);
  }
  self->token = PyContextVar_Set(st->mode_var, self->name);
  return self->token == NULL ? NULL : Py_NewRef(op);
}

static PyObject *mode_exit(PyObject *op, PyObject *args) {
  (void)args;
  ModeObject *self = (ModeObject *)op;
  HurrayState *st = hurray__py_state_of(op);
  if (self->token == NULL) {
    return hurray__py_raise(st, HURRAY_PY_EXC_STATE, "%R was not entered", op);
  }
  int status = PyContextVar_Reset(st->mode_var, self->token);
  Py_CLEAR(self->token);
  if (status < 0) return NULL;
  Py_RETURN_FALSE; /* never swallows the exception that ends the block */
}

static PyObject *mode_repr(PyObject *op) {
  return PyUnicode_FromFormat("hurray.mode(%R)", ((ModeObject *)op)->name);
}

static PyObject *mode_get_name(PyObject *op, void *closure) {
  (void)closure;
  return Py_NewRef(((ModeObject *)op)->name);
}

static PyMethodDef mode_methods[] = {
    {"__enter__", mode_enter, METH_NOARGS,
     PyDoc_STR("__enter__($self, /)\n"
               "--\n"
               "\n"
               "Put the mode in force in this context.\n")},
    {"__exit__", mode_exit, METH_VARARGS,
     PyDoc_STR("__exit__($self, exc_type, exc_value, traceback, /)\n"
               "--\n"
               "\n"
               "Restore the mode that was in force before __enter__.\n")},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef mode_getset[] = {
    {"name", mode_get_name, NULL,
     PyDoc_STR("The mode this block puts in force: 'strict' or 'relaxed'.\n"), NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyDoc_STRVAR(mode_doc,
             "mode(name, /)\n"
             "--\n"
             "\n"
             "A compliance mode for one ``with`` block.\n"
             "\n"
             "``with hurray.mode('relaxed'):`` puts the mode in force for the block,\n"
             "in the current thread or asyncio task only, and restores the previous\n"
             "one on exit, also when the block raises.\n"
             "\n"
             "Parameters\n"
             "----------\n"
             "name : {'strict', 'relaxed'}\n"
             "    The mode.\n"
             "\n"
             "Raises\n"
             "------\n"
             "hurray.InvalidArgumentError\n"
             "    `name` is not a mode (a ValueError).\n"
             "TypeError\n"
             "    `name` is not a str.\n"
             "hurray.StateError\n"
             "    On entering a mode object that is already entered.\n"
             "\n"
             "See Also\n"
             "--------\n"
             "set_mode : Set the interpreter-wide mode.\n"
             "get_mode : The mode in force.\n"
             "\n"
             "Examples\n"
             "--------\n"
             ">>> q = hurray.Tensor(bytes(64), hurray.dtype.int4, [128])\n"
             ">>> hasattr(q, \"__array_namespace__\")\n"
             "False\n"
             ">>> with hurray.mode(\"relaxed\"):\n"
             "...     hasattr(q, \"__array_namespace__\")\n"
             "True\n"
             ">>> hurray.get_mode()\n"
             "'strict'\n");

static PyType_Slot mode_slots[] = {
    {Py_tp_new, mode_new},       {Py_tp_dealloc, mode_dealloc}, {Py_tp_traverse, mode_traverse},
    {Py_tp_clear, mode_clear},   {Py_tp_repr, mode_repr},       {Py_tp_methods, mode_methods},
    {Py_tp_getset, mode_getset}, {Py_tp_doc, (void *)mode_doc}, {0, NULL},
};

PyType_Spec hurray__py_mode_spec = {
    .name = "hurray.mode",
    .basicsize = sizeof(ModeObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = mode_slots,
};
