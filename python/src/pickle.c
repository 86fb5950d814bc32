/* pickle.c -- pickle, copy.copy and copy.deepcopy of CPU tensors (ADR-043).
 *
 * Tensor.__reduce_ex__(protocol) reduces a tensor to hurray._pickle._rebuild(state), which
 * builds it again through the public constructors (Tensor and Tensor.from_parts), so an
 * unpickled tensor is validated like any other. The state is
 *
 *   ("dense", dtype name, shape, strides, byte_offset, data, readonly)
 *   (layout name, {dtype, shape, axis, block_size, coalesced}, part states, ((name, state), ...))
 *
 * the second for every other layout: its parts (dense, in the layout's order) and its
 * children (composite) recursively, so a per-channel int4 tensor keeps its values, scales and
 * zero points as three buffers. `data` holds exactly the bytes the array addresses, lowest
 * first; byte_offset is element 0's place among them. With protocol 5 it is a
 * pickle.PickleBuffer over the tensor's own memory (kept alive by it): a pickler with a
 * buffer_callback sends it out of band without a copy, the others write it in band. Older
 * protocols get bytes (a read-only tensor) or a bytearray (a writable one).
 */
#include "hurray_python.h"

#include <limits.h>

/* The state of a dense tensor: read-only as the tensor is, or for a part (`part`) as its
 * buffer is -- a part's view is read-only when any buffer of its tensor is, and from_parts
 * makes the rebuilt tensor so again. */
static PyObject *dense_state(HurrayState *st, HurrayTensorObject *self, int part, int protocol) {
  HurrayHostView host;
  if (hurray__py_tensor_host_view(st, self, "pickle", &host) < 0) return NULL;
  if (part) host.readonly = (host.buffer->flags & HURRAY_BUFFER_READ_ONLY) != 0;
  uint64_t length = host.end - host.begin;
  if (length > PY_SSIZE_T_MAX) {
    return hurray__py_raise_statusf(st, HURRAY_ELIMIT, "pickle: %llu bytes are too many",
                                    (unsigned long long)length);
  }
  char *bytes = hurray__py_buffer_at(host.buffer, host.begin);
  PyObject *data = NULL;
  if (protocol >= 5) {
    PyObject *span =
        hurray__py_host_span_new(st, (PyObject *)self, bytes, (Py_ssize_t)length, host.readonly);
    if (span == NULL) return NULL;
    data = PyPickleBuffer_FromObject(span);
    Py_DECREF(span);
  } else if (host.readonly) {
    data = PyBytes_FromStringAndSize(bytes, (Py_ssize_t)length);
  } else {
    data = PyByteArray_FromStringAndSize(bytes, (Py_ssize_t)length);
  }
  if (data == NULL) return NULL;
  PyObject *shape = PyObject_GetAttrString((PyObject *)self, "shape");
  PyObject *strides = shape == NULL ? NULL : PyObject_GetAttrString((PyObject *)self, "strides");
  if (strides == NULL) {
    Py_XDECREF(shape);
    Py_DECREF(data);
    return NULL;
  }
  return Py_BuildValue("(ssNNKNO)", "dense", host.dtype->name, shape, strides,
                       (unsigned long long)(host.array->byte_offset - host.begin), data,
                       host.readonly ? Py_True : Py_False);
}

static PyObject *tensor_state(HurrayState *st, HurrayTensorObject *self, int protocol);

/* The states of every item of `items` (a tuple of parts, or of (name, Tensor) pairs). */
static PyObject *states_of(HurrayState *st, PyObject *items, int named, int protocol) {
  if (items == NULL) return NULL;
  Py_ssize_t n = PySequence_Length(items);
  PyObject *states = n < 0 ? NULL : PyTuple_New(n);
  for (Py_ssize_t i = 0; states != NULL && i < n; i++) {
    PyObject *item = PySequence_GetItem(items, i);
    PyObject *tensor = item == NULL ? NULL : named ? PyTuple_GetItem(item, 1) : item;
    PyObject *state = NULL;
    if (tensor != NULL) {
      state = named ? tensor_state(st, (HurrayTensorObject *)tensor, protocol)
                    : dense_state(st, (HurrayTensorObject *)tensor, 1, protocol);
      if (state != NULL && named) state = Py_BuildValue("(ON)", PyTuple_GET_ITEM(item, 0), state);
    }
    Py_XDECREF(item);
    if (state == NULL) {
      Py_CLEAR(states);
    } else {
      PyTuple_SET_ITEM(states, i, state);
    }
  }
  Py_DECREF(items);
  return states;
}

static PyObject *tensor_state(HurrayState *st, HurrayTensorObject *self, int protocol) {
  if (hurray__py_tensor_live(st, self) < 0) return NULL;
  int layout = (int)self->desc->layout;
  if (layout == HURRAY_LAYOUT_DENSE) return dense_state(st, self, 0, protocol);
  PyObject *op = (PyObject *)self;
  PyObject *kwargs = PyDict_New();
  if (kwargs == NULL) return NULL;
  static const char *const kFields[] = {"dtype", "shape", "axis", "block_size", "coalesced"};
  for (size_t i = 0; layout != HURRAY_LAYOUT_COMPOSITE && i < sizeof kFields / sizeof *kFields;
       i++) {
    PyObject *value = PyObject_GetAttrString(op, kFields[i]);
    if (value == NULL || PyDict_SetItemString(kwargs, kFields[i], value) < 0) {
      Py_XDECREF(value);
      Py_DECREF(kwargs);
      return NULL;
    }
    Py_DECREF(value);
  }
  PyObject *parts = states_of(st, PyObject_GetAttrString(op, "parts"), 0, protocol);
  PyObject *children = NULL;
  if (parts != NULL) {
    PyObject *dict = PyObject_GetAttrString(op, "children");
    children = states_of(st, dict == NULL ? NULL : PyDict_Items(dict), 1, protocol);
    Py_XDECREF(dict);
  }
  if (children == NULL) {
    Py_XDECREF(parts);
    Py_DECREF(kwargs);
    return NULL;
  }
  return Py_BuildValue("(sNNN)", hurray_layout_name(layout), kwargs, parts, children);
}

const char hurray__py_tensor_reduce_ex_doc[] =
    "__reduce_ex__($self, protocol, /)\n--\n\n"
    "Pickling support for tensors in CPU memory, every dtype and layout (ADR-043).\n\n"
    "With protocol 5 the bytes travel as `pickle.PickleBuffer` objects over the tensor's own "
    "memory, out of band where the pickler takes a `buffer_callback` (multiprocessing, "
    "Dask); older protocols copy them into the pickle. `copy.copy` and `copy.deepcopy` make "
    "a tensor over copied bytes. The descriptor comes back whole: dtype, shape, strides, "
    "layout with every part and child, and read-only.\n\n"
    "Raises\n"
    "------\n"
    "hurray.BufferError\n"
    "    For a tensor with a buffer outside CPU memory.\n";

PyObject *hurray__py_tensor_reduce_ex(PyObject *op, PyObject *protocol_obj) {
  HurrayState *st = hurray__py_state_of(op);
  long long protocol = 0;
  if (hurray__py_int_in_range(st, protocol_obj, 0, INT_MAX, "protocol", &protocol) < 0) {
    return NULL;
  }
  PyObject *module = PyImport_ImportModule("hurray._pickle");
  PyObject *rebuild = module == NULL ? NULL : PyObject_GetAttrString(module, "_rebuild");
  Py_XDECREF(module);
  if (rebuild == NULL) return NULL;
  PyObject *state = tensor_state(st, (HurrayTensorObject *)op, (int)protocol);
  if (state == NULL) {
    Py_DECREF(rebuild);
    return NULL;
  }
  return Py_BuildValue("(N(N))", rebuild, state);
}
