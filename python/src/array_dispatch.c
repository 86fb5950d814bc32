/* array_dispatch.c -- the per-call dispatch of the array object's binary operators in C
 * (ADR-059).
 *
 * `self` <op> `other` for two tensors of one dtype of the standard, both over the NumPy arrays
 * they were made from (every result of the engine is one), is the operator's ufunc on those
 * arrays and the result wrapped: exactly what the Python operator does for them
 * (hurray.array_api._operators) without its conversions and promotion. The ufuncs are that
 * module's table, UFUNCS, which its operators use too; the operators it does not name (floor
 * division's corrected kernel, the in-place, unary and conversion ones) and every other pair of
 * operands go to the Python operator (array_object.c).
 *
 * Indexing a tensor of a dtype of the standard over the array it was made from (ADR-095): an
 * int, a slice of ints and Nones, or a tuple of those gives the view NumPy's basic indexing
 * would, made here without NumPy (hurray__py_ndarray_subscript); a tensor key, and slices of
 * other objects, get the very NumPy subscript hurray.array_api._indexing.__getitem__ makes for
 * them. Every other key, every other tensor and every error go to the Python function, which
 * names what is wrong.
 */
#include "hurray_python.h"

#define AS_NAME(name, module, str) str,
static const char *const kOpNames[HURRAY_PY_OP_COUNT] = {HURRAY_PY_ARRAY_OPS(AS_NAME)};
#undef AS_NAME

int hurray__py_array_dispatch_load(HurrayState *st, PyObject *operators) {
  PyObject *table = PyObject_GetAttrString(operators, "UFUNCS");
  if (table == NULL) return -1;
  /* By operation: the ufunc its name has in `table`, or None. */
  PyObject *ufuncs = PyDict_Check(table) ? PyTuple_New(HURRAY_PY_OP_COUNT) : NULL;
  if (ufuncs == NULL && !PyErr_Occurred()) {
    PyErr_SetString(PyExc_SystemError, "hurray.array_api._operators.UFUNCS is not a dict");
  }
  for (int i = 0; ufuncs != NULL && i < HURRAY_PY_OP_COUNT; i++) {
    PyObject *ufunc = PyDict_GetItemString(table, kOpNames[i]);
    PyTuple_SET_ITEM(ufuncs, i, Py_NewRef(ufunc == NULL ? Py_None : ufunc));
  }
  Py_DECREF(table);
  if (ufuncs == NULL) return -1;
  st->ufuncs = ufuncs;
  return 0;
}

PyObject *hurray__py_array_dispatch(HurrayState *st, int op, PyObject *self, PyObject *other,
                                    int *done) {
  *done = 0;
  if (st->ufuncs == NULL || !Py_IS_TYPE(other, st->tensor_type)) return NULL;
  PyObject *ufunc = PyTuple_GET_ITEM(st->ufuncs, op);
  HurrayTensorObject *a = (HurrayTensorObject *)self, *b = (HurrayTensorObject *)other;
  if (ufunc == Py_None) return NULL;
  PyObject *args[2] = {hurray__py_tensor_source_ndarray(a), hurray__py_tensor_source_ndarray(b)};
  if (args[0] == NULL || args[1] == NULL || a->desc->dtype != b->desc->dtype ||
      hurray_dtype_info(a->desc->dtype)->tier != 1) {
    return NULL;
  }
  *done = 1;
  PyObject *result = PyObject_Vectorcall(ufunc, args, 2, NULL);
  return result == NULL ? NULL : hurray__py_wrap_result(st, result);
}

/* The key NumPy is given for an int, slice, tensor or tuple-of-ints-and-slices key, as
 * _indexing's fast paths give it (hurray__py_view_key; a tensor becomes its ndarray); NULL for
 * any other key (with an exception only where making the key failed). */
static PyObject *basic_key(HurrayState *st, PyObject *key) {
  if (Py_IS_TYPE(key, st->tensor_type)) { /* an integer array or a mask: NumPy's own key */
    return hurray__py_tensor_ndarray(st, (HurrayTensorObject *)key);
  }
  if (PyTuple_CheckExact(key)) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(key); i++) {
      PyObject *k = PyTuple_GET_ITEM(key, i);
      if (!PyLong_CheckExact(k) && !PySlice_Check(k)) return NULL;
    }
  } else if (!PySlice_Check(key) && !PyLong_CheckExact(key)) {
    return NULL;
  }
  return hurray__py_view_key(key);
}

PyObject *hurray__py_array_getitem(HurrayState *st, PyObject *self, PyObject *key, int *done) {
  *done = 0;
  HurrayTensorObject *t = (HurrayTensorObject *)self;
  PyObject *a = hurray__py_tensor_source_ndarray(t);
  if (a == NULL || hurray_dtype_info(t->desc->dtype)->tier != 1) return NULL;
  if (!Py_IS_TYPE(key, st->tensor_type)) { /* ints and plain slices: the view, without NumPy */
    PyObject *view = hurray__py_ndarray_subscript(st, a, key);
    if (view != NULL || PyErr_Occurred()) {
      *done = 1;
      return view;
    }
  }
  PyObject *np_key = basic_key(st, key);
  if (np_key == NULL) {
    PyErr_Clear(); /* the Python function tries again and reports what failed */
    return NULL;
  }
  PyObject *result = PyObject_GetItem(a, np_key);
  Py_DECREF(np_key);
  if (result == NULL) {
    PyErr_Clear(); /* out of range, too many indices, an int too big: the Python function
                      raises the error the standard's words name */
    return NULL;
  }
  *done = 1;
  return hurray__py_wrap_result(st, result);
}
