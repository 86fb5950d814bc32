/* array_object.c -- hurray.Tensor as the array API standard's array object: its protocol slots.
 *
 * The operators and conversions of the standard's array object are implemented in
 * hurray.array_api._operators, its indexing, len(), iteration and mT/T in
 * hurray.array_api._indexing, beside the namespace whose promotion rules and engine they share
 * (ADR-052, ADR-067). This file is only the C side of that: each slot of the Tensor type
 * (number protocol, mapping protocol, rich comparison, iteration) and each extra method or
 * property forwards to the Python function of the same name with one vectorcall. The functions
 * are looked up once, on first use, and kept in the module state. A binary operator goes
 * through the dispatch in C (array_dispatch.c) first, which answers it without Python where
 * that is exactly what the Python operator would do.
 *
 * Binary number slots are called with the Tensor on either side: a Tensor on the left calls
 * __op__(left, right), one on the right only calls __rop__(right, left), as Python's own
 * operator dispatch would for a class defining both. to_device is the Tensor's own
 * (device_memory.c).
 */
#include "hurray_python.h"

#include <string.h>

enum { MODULE_OPERATORS, MODULE_INDEXING, MODULE_COUNT };
static const char *const kModules[MODULE_COUNT] = {"hurray.array_api._operators",
                                                   "hurray.array_api._indexing"};
#define AS_OP(name, module, str) {MODULE_##module, str},
static const struct {
  int module;
  const char *name;
} kOps[HURRAY_PY_OP_COUNT] = {HURRAY_PY_ARRAY_OPS(AS_OP)};
#undef AS_OP

/* The Python implementation of op (borrowed), importing its modules on first use, with the
 * ufuncs the dispatch in C calls itself (array_dispatch.c). */
static PyObject *array_op(HurrayState *st, int op) {
  if (st->array_ops == NULL) {
    PyObject *modules[MODULE_COUNT] = {NULL};
    int imported = 1;
    for (int m = 0; imported && m < MODULE_COUNT; m++) {
      imported = (modules[m] = PyImport_ImportModule(kModules[m])) != NULL;
    }
    PyObject *ops = imported ? PyTuple_New(HURRAY_PY_OP_COUNT) : NULL;
    for (int i = 0; ops != NULL && i < HURRAY_PY_OP_COUNT; i++) {
      PyObject *func = PyObject_GetAttrString(modules[kOps[i].module], kOps[i].name);
      if (func == NULL) Py_CLEAR(ops);
      else PyTuple_SET_ITEM(ops, i, func);
    }
    if (ops != NULL && hurray__py_array_dispatch_load(st, modules[MODULE_OPERATORS]) < 0) {
      Py_CLEAR(ops);
    }
    for (int m = 0; m < MODULE_COUNT; m++) Py_XDECREF(modules[m]);
    if (ops == NULL) return NULL;
    st->array_ops = ops;
  }
  return PyTuple_GET_ITEM(st->array_ops, op);
}

static PyObject *call(PyObject *self, int op, PyObject *const *args, size_t nargs) {
  PyObject *func = array_op(hurray__py_state_of(self), op);
  return func == NULL ? NULL : PyObject_Vectorcall(func, args, nargs, NULL);
}

static PyObject *call1(PyObject *self, int op) {
  return call(self, op, &self, 1);
}

/* An operation on two operands: through the dispatch in C where it applies, else the Python
 * function. */
static PyObject *call2(PyObject *self, int op, PyObject *other) {
  int done = 0;
  PyObject *result = hurray__py_array_dispatch(hurray__py_state_of(self), op, self, other, &done);
  if (done) return result;
  PyObject *args[2] = {self, other};
  return call(self, op, args, 2);
}

/* a <op> b with the Tensor on the left (op), else on the right (rop, reflected): `a` is a
 * Tensor exactly when its type's slot is this very function. */
static PyObject *binary(PyObject *a, PyObject *b, int slot, void *func, int op, int rop) {
  if (PyType_GetSlot(Py_TYPE(a), slot) == func) return call2(a, op, b);
  return call2(b, rop, a);
}

#define BINARY(lower, NAME)                                                                      \
  static PyObject *nb_##lower(PyObject *a, PyObject *b) {                                        \
    return binary(a, b, Py_nb_##lower, (void *)nb_##lower, HURRAY_PY_OP_##NAME,                  \
                  HURRAY_PY_OP_R##NAME);                                                         \
  }                                                                                              \
  static PyObject *nb_inplace_##lower(PyObject *a, PyObject *b) {                                \
    return call2(a, HURRAY_PY_OP_I##NAME, b);                                                    \
  }
BINARY(add, ADD)
BINARY(subtract, SUB)
BINARY(multiply, MUL)
BINARY(true_divide, TRUEDIV)
BINARY(floor_divide, FLOORDIV)
BINARY(remainder, MOD)
BINARY(matrix_multiply, MATMUL)
BINARY(and, AND)
BINARY(or, OR)
BINARY(xor, XOR)
BINARY(lshift, LSHIFT)
BINARY(rshift, RSHIFT)
#undef BINARY

/* pow(a, b, modulo): the standard has no modulo; Python passes None for a ** b. */
static PyObject *nb_power(PyObject *a, PyObject *b, PyObject *modulo) {
  if (modulo != Py_None) Py_RETURN_NOTIMPLEMENTED;
  return binary(a, b, Py_nb_power, (void *)nb_power, HURRAY_PY_OP_POW, HURRAY_PY_OP_RPOW);
}

static PyObject *nb_inplace_power(PyObject *a, PyObject *b, PyObject *modulo) {
  if (modulo != Py_None) Py_RETURN_NOTIMPLEMENTED;
  return call2(a, HURRAY_PY_OP_IPOW, b);
}

static PyObject *nb_negative(PyObject *a) { return call1(a, HURRAY_PY_OP_NEG); }
static PyObject *nb_positive(PyObject *a) { return call1(a, HURRAY_PY_OP_POS); }
static PyObject *nb_absolute(PyObject *a) { return call1(a, HURRAY_PY_OP_ABS); }
static PyObject *nb_invert(PyObject *a) { return call1(a, HURRAY_PY_OP_INVERT); }
static PyObject *nb_int(PyObject *a) { return call1(a, HURRAY_PY_OP_INT); }
static PyObject *nb_float(PyObject *a) { return call1(a, HURRAY_PY_OP_FLOAT); }
static PyObject *nb_index(PyObject *a) { return call1(a, HURRAY_PY_OP_INDEX); }

static int nb_bool(PyObject *a) {
  PyObject *result = call1(a, HURRAY_PY_OP_BOOL);
  if (result == NULL) return -1;
  int truth = PyObject_IsTrue(result);
  Py_DECREF(result);
  return truth;
}

static PyObject *richcompare(PyObject *a, PyObject *b, int op) {
  static const int ops[] = {[Py_LT] = HURRAY_PY_OP_LT, [Py_LE] = HURRAY_PY_OP_LE,
                            [Py_EQ] = HURRAY_PY_OP_EQ, [Py_NE] = HURRAY_PY_OP_NE,
                            [Py_GT] = HURRAY_PY_OP_GT, [Py_GE] = HURRAY_PY_OP_GE};
  return call2(a, ops[op], b);
}

static PyObject *mp_subscript(PyObject *a, PyObject *key) {
  int done;
  PyObject *result = hurray__py_array_getitem(hurray__py_state_of(a), a, key, &done);
  return done ? result : call2(a, HURRAY_PY_OP_GETITEM, key);
}

static PyObject *tp_iter(PyObject *a) { return call1(a, HURRAY_PY_OP_ITER); }

static Py_ssize_t mp_length(PyObject *a) {
  PyObject *result = call1(a, HURRAY_PY_OP_LEN);
  if (result == NULL) return -1;
  Py_ssize_t n = PyLong_AsSsize_t(result);
  Py_DECREF(result);
  return n;
}

static int mp_ass_subscript(PyObject *a, PyObject *key, PyObject *value) {
  if (value == NULL) {
    PyErr_SetString(PyExc_TypeError, "hurray.Tensor does not support item deletion");
    return -1;
  }
  PyObject *args[3] = {a, key, value};
  PyObject *result = call(a, HURRAY_PY_OP_SETITEM, args, 3);
  if (result == NULL) return -1;
  Py_DECREF(result);
  return 0;
}

static int sq_contains(PyObject *a, PyObject *value) {
  PyObject *args[2] = {a, value};
  PyObject *result = call(a, HURRAY_PY_OP_CONTAINS, args, 2);
  if (result == NULL) return -1;
  int found = PyObject_IsTrue(result);
  Py_DECREF(result);
  return found;
}

static PyType_Slot array_slots[] = {
    {Py_nb_add, nb_add},
    {Py_nb_inplace_add, nb_inplace_add},
    {Py_nb_subtract, nb_subtract},
    {Py_nb_inplace_subtract, nb_inplace_subtract},
    {Py_nb_multiply, nb_multiply},
    {Py_nb_inplace_multiply, nb_inplace_multiply},
    {Py_nb_true_divide, nb_true_divide},
    {Py_nb_inplace_true_divide, nb_inplace_true_divide},
    {Py_nb_floor_divide, nb_floor_divide},
    {Py_nb_inplace_floor_divide, nb_inplace_floor_divide},
    {Py_nb_remainder, nb_remainder},
    {Py_nb_inplace_remainder, nb_inplace_remainder},
    {Py_nb_power, nb_power},
    {Py_nb_inplace_power, nb_inplace_power},
    {Py_nb_matrix_multiply, nb_matrix_multiply},
    {Py_nb_inplace_matrix_multiply, nb_inplace_matrix_multiply},
    {Py_nb_and, nb_and},
    {Py_nb_inplace_and, nb_inplace_and},
    {Py_nb_or, nb_or},
    {Py_nb_inplace_or, nb_inplace_or},
    {Py_nb_xor, nb_xor},
    {Py_nb_inplace_xor, nb_inplace_xor},
    {Py_nb_lshift, nb_lshift},
    {Py_nb_inplace_lshift, nb_inplace_lshift},
    {Py_nb_rshift, nb_rshift},
    {Py_nb_inplace_rshift, nb_inplace_rshift},
    {Py_nb_negative, nb_negative},
    {Py_nb_positive, nb_positive},
    {Py_nb_absolute, nb_absolute},
    {Py_nb_invert, nb_invert},
    {Py_nb_bool, nb_bool},
    {Py_nb_int, nb_int},
    {Py_nb_float, nb_float},
    {Py_nb_index, nb_index},
    {Py_tp_richcompare, richcompare},
    {Py_mp_subscript, mp_subscript},
    {Py_mp_length, mp_length},
    {Py_tp_iter, tp_iter},
    {Py_mp_ass_subscript, mp_ass_subscript},
    {Py_sq_contains, sq_contains},
};

/* ---- methods and properties ----------------------------------------------------------------- */

static PyObject *tensor_complex(PyObject *op, PyObject *unused) {
  (void)unused;
  return call1(op, HURRAY_PY_OP_COMPLEX);
}

static PyObject *tensor_format(PyObject *op, PyObject *spec) {
  PyObject *args[2] = {op, spec};
  return call(op, HURRAY_PY_OP_FORMAT, args, 2);
}

/* bytes(t) copies the buffer export, as before the array object: bytes() would otherwise take a
 * 0-d integer tensor's __index__ for a length. */
static PyObject *tensor_bytes(PyObject *op, PyObject *unused) {
  (void)unused;
  return PyBytes_FromObject(op);
}

static PyMethodDef array_methods[] = {
    {"__bytes__", tensor_bytes, METH_NOARGS,
     PyDoc_STR("__bytes__($self, /)\n--\n\nThe bytes of the buffer export (memoryview(self)).")},
    {"__format__", tensor_format, METH_O,
     PyDoc_STR("__format__($self, format_spec, /)\n--\n\nformat(t, spec): a 0-d tensor's value "
               "formatted as a Python scalar; '' gives str(t).")},
    {"__complex__", tensor_complex, METH_NOARGS,
     PyDoc_STR("__complex__($self, /)\n--\n\nThe value of a 0-d tensor as a Python complex.")},
    {NULL, NULL, 0, NULL},
};

static PyObject *get_mT(PyObject *op, void *closure) {
  (void)closure;
  return call1(op, HURRAY_PY_OP_MT);
}

static PyObject *get_T(PyObject *op, void *closure) {
  (void)closure;
  return call1(op, HURRAY_PY_OP_T);
}

/* ---- what NumPy and PyTorch users reach for -------------------------------------------------- */

/* Methods ndarray and torch.Tensor have and the array object has not: the standard puts them in
 * the namespace. Each is a property whose getter raises AttributeError naming the route, as
 * __array_namespace__ hides itself (tensor.c): hasattr() is False, dir() leaves them out, and
 * the type keeps CPython's generic attribute lookup. The closure is "name\0route". */
#define HURRAY_PY_ABSENT(X)                                                                     \
  X("sum", "hurray.array_api.sum(t)") X("prod", "hurray.array_api.prod(t)")                      \
  X("mean", "hurray.array_api.mean(t)") X("std", "hurray.array_api.std(t)")                      \
  X("var", "hurray.array_api.var(t)") X("max", "hurray.array_api.max(t)")                        \
  X("min", "hurray.array_api.min(t)") X("all", "hurray.array_api.all(t)")                        \
  X("any", "hurray.array_api.any(t)") X("argmax", "hurray.array_api.argmax(t)")                  \
  X("argmin", "hurray.array_api.argmin(t)") X("cumsum", "hurray.array_api.cumulative_sum(t)")    \
  X("cumprod", "hurray.array_api.cumulative_prod(t)")                                           \
  X("reshape", "hurray.array_api.reshape(t, shape)")                                            \
  X("astype", "hurray.array_api.astype(t, dtype)")                                              \
  X("transpose", "hurray.array_api.permute_dims(t, axes), or t.mT")                             \
  X("flatten", "hurray.array_api.reshape(t, (-1,))")                                            \
  X("ravel", "hurray.array_api.reshape(t, (-1,))")                                              \
  X("squeeze", "hurray.array_api.squeeze(t, axis)")                                             \
  X("copy", "hurray.array_api.asarray(t, copy=True)")                                           \
  X("clip", "hurray.array_api.clip(t, min, max)") X("round", "hurray.array_api.round(t)")       \
  X("sort", "hurray.array_api.sort(t)") X("argsort", "hurray.array_api.argsort(t)")             \
  X("nonzero", "hurray.array_api.nonzero(t)") X("conj", "hurray.array_api.conj(t)")             \
  X("dot", "t @ other, or hurray.array_api.matmul(t, other)")                                   \
  X("item", "float(t), int(t), bool(t) or t.tolist() on a 0-d tensor")                          \
  X("numpy", "numpy.asarray(t)") X("cpu", "t.to_device('cpu')")                                 \
  X("cuda", "t.to_device('cuda')")                                                              \
  X("to", "t.to_device(device), or hurray.array_api.astype(t, dtype)")                          \
  X("itemsize", "t.dtype.itemsize (bytes per element; None for packed dtypes)")                \
  X("element_size", "t.dtype.itemsize (bytes per element; None for packed dtypes)")            \
  X("numel", "t.size") X("dim", "t.ndim") X("clone", "hurray.array_api.asarray(t, copy=True)") \
  X("flip", "hurray.array_api.flip(t)")                                                         \
  X("unsqueeze", "hurray.array_api.expand_dims(t, axis=axis)")

static PyObject *absent(PyObject *op, void *closure) {
  (void)op;
  const char *name = closure;
  PyErr_Format(PyExc_AttributeError,
               "'hurray.Tensor' object has no attribute '%s': the array API spells it %s", name,
               name + strlen(name) + 1);
  return NULL;
}

#define AS_GETSET(name, route)                                                                   \
  {name, absent, NULL,                                                                           \
   PyDoc_STR("A NumPy or PyTorch method the array object has not.\n\nUse " route "."),            \
   (void *)(name "\0" route)},
static PyGetSetDef array_getset[] = {
    {"mT", get_mT, NULL,
     PyDoc_STR("The transpose of the last two axes (array API), a view."), NULL},
    {"T", get_T, NULL, PyDoc_STR("The transpose of a 0-d, 1-d or 2-d tensor (array API), a view."),
     NULL},
    HURRAY_PY_ABSENT(AS_GETSET){NULL, NULL, NULL, NULL, NULL},
};
#undef AS_GETSET

int hurray__py_tensor_attribute_absent(PyObject *name) {
  for (const PyGetSetDef *g = array_getset; g->name != NULL; g++) {
    if (g->get == absent && PyUnicode_CompareWithASCIIString(name, g->name) == 0) return 1;
  }
  return 0;
}

/* ---- the Tensor type's spec with the array object added -------------------------------------- */

enum { MAX_SLOTS = 96, MAX_METHODS = 64, MAX_GETSET = 128 };
static PyType_Slot merged_slots[MAX_SLOTS];
static PyMethodDef merged_methods[MAX_METHODS];
static PyGetSetDef merged_getset[MAX_GETSET];
static PyType_Spec merged_spec;

/* Appends the NULL-terminated `more` to the NULL-terminated `base` in `out` (capacity `cap`
 * entries, terminator included); -1 when they do not fit. */
#define MERGE(type, field, out, cap, base, more)                                                 \
  do {                                                                                           \
    size_t n_ = 0;                                                                               \
    for (const type *p_ = (base); p_->field != NULL; p_++) {                                      \
      if (n_ + 1 >= (cap)) goto too_many;                                                        \
      (out)[n_++] = *p_;                                                                         \
    }                                                                                            \
    for (const type *p_ = (more); p_->field != NULL; p_++) {                                      \
      if (n_ + 1 >= (cap)) goto too_many;                                                        \
      (out)[n_++] = *p_;                                                                         \
    }                                                                                            \
    memset(&(out)[n_], 0, sizeof *(out));                                                        \
  } while (0)

PyType_Spec *hurray__py_array_object_spec(const PyType_Spec *core) {
  size_t n = 0;
  for (const PyType_Slot *slot = core->slots; slot->slot != 0; slot++) {
    if (n + 1 >= MAX_SLOTS) goto too_many;
    merged_slots[n] = *slot;
    if (slot->slot == Py_tp_methods) {
      MERGE(PyMethodDef, ml_name, merged_methods, MAX_METHODS, (const PyMethodDef *)slot->pfunc,
            array_methods);
      merged_slots[n].pfunc = merged_methods;
    } else if (slot->slot == Py_tp_getset) {
      MERGE(PyGetSetDef, name, merged_getset, MAX_GETSET, (const PyGetSetDef *)slot->pfunc,
            array_getset);
      merged_slots[n].pfunc = merged_getset;
    }
    n++;
  }
  for (size_t i = 0; i < sizeof array_slots / sizeof *array_slots; i++) {
    if (n + 1 >= MAX_SLOTS) goto too_many;
    merged_slots[n++] = array_slots[i];
  }
  merged_slots[n] = (PyType_Slot){0, NULL};
  merged_spec = *core;
  merged_spec.slots = merged_slots;
  return &merged_spec;
too_many:
  PyErr_SetString(PyExc_SystemError, "hurray.Tensor: too many slots, methods or properties");
  return NULL;
}
