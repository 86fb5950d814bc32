/* device.c -- hurray.Device (a device tag and a device index) and the parsing of the device,
 * memory class and sync mode arguments. Tag names come from hurray-core (hurray_device_name),
 * including implementation-private tags registered with hurray.register_device. */
#include "hurray_python.h"

#include <string.h>

PyObject *hurray__py_device_new(HurrayState *st, int tag, int index) {
  HurrayDeviceObject *self = PyObject_New(HurrayDeviceObject, st->device_type);
  if (self == NULL) return NULL;
  self->tag = (uint8_t)tag;
  self->index = (uint16_t)index;
  return (PyObject *)self;
}

/* The tag named `name` (a named tag or a registered private one), or -1 with DescriptorError. */
static int tag_from_name(HurrayState *st, PyObject *name) {
  const char *text = PyUnicode_AsUTF8(name);
  if (text == NULL) return -1;
  for (int tag = 0; tag <= 0xFE; tag++) {
    if (tag == HURRAY_DEVICE_RESERVED_FIRST) tag = HURRAY_DEVICE_PRIVATE_FIRST;
    const char *known = hurray_device_name(tag);
    if (known != NULL && strcmp(known, text) == 0) return tag;
  }
  hurray__py_raise_statusf(st, HURRAY_EDEVICE, "no device is named %R", name);
  return -1;
}

/* A tag from an int or a name, checked by hurray_device_check. */
static int tag_arg(HurrayState *st, PyObject *obj) {
  if (PyUnicode_Check(obj)) return tag_from_name(st, obj);
  long long tag = 0;
  if (hurray__py_int_in_range(st, obj, 0, 0xFF, "device tag", &tag) < 0) return -1;
  HurrayError error = {0};
  int status = hurray_device_check((int)tag, &error);
  if (status != HURRAY_OK) {
    hurray__py_raise_status(st, status, &error);
    return -1;
  }
  return (int)tag;
}

static int index_arg(HurrayState *st, PyObject *obj, uint16_t *index) {
  long long value = 0;
  if (hurray__py_int_in_range(st, obj, 0, UINT16_MAX, "device index", &value) < 0) return -1;
  *index = (uint16_t)value;
  return 0;
}

int hurray__py_device_arg(HurrayState *st, PyObject *obj, uint8_t *tag, uint16_t *index) {
  if (Py_IS_TYPE(obj, st->device_type)) {
    HurrayDeviceObject *device = (HurrayDeviceObject *)obj;
    *tag = device->tag;
    *index = device->index;
    return 0;
  }
  int t = -1;
  *index = 0;
  if (PyTuple_Check(obj)) {
    if (PyTuple_GET_SIZE(obj) != 2) {
      PyErr_Format(PyExc_TypeError, "a device tuple is (tag or name, index), not %R", obj);
      return -1;
    }
    t = tag_arg(st, PyTuple_GET_ITEM(obj, 0));
    if (t < 0 || index_arg(st, PyTuple_GET_ITEM(obj, 1), index) < 0) return -1;
  } else if (PyUnicode_Check(obj)) {
    /* "cuda" or "cuda:1" */
    Py_ssize_t colon = PyUnicode_FindChar(obj, ':', 0, PyUnicode_GET_LENGTH(obj), 1);
    if (colon == -2) return -1;
    if (colon < 0) {
      t = tag_arg(st, obj);
    } else {
      PyObject *name = PyUnicode_Substring(obj, 0, colon);
      PyObject *digits = PyUnicode_Substring(obj, colon + 1, PyUnicode_GET_LENGTH(obj));
      PyObject *number = digits == NULL ? NULL : PyLong_FromUnicodeObject(digits, 10);
      if (name != NULL && number != NULL) t = tag_arg(st, name);
      if (t >= 0 && index_arg(st, number, index) < 0) t = -1;
      Py_XDECREF(name);
      Py_XDECREF(digits);
      Py_XDECREF(number);
    }
  } else if (PyIndex_Check(obj) && !PyBool_Check(obj)) {
    t = tag_arg(st, obj);
  } else {
    PyErr_Format(PyExc_TypeError,
                 "device must be a hurray.Device, a (tag or name, index) tuple, a tag or a "
                 "name, not %.200s",
                 Py_TYPE(obj)->tp_name);
    return -1;
  }
  if (t < 0) return -1;
  *tag = (uint8_t)t;
  return 0;
}

int hurray__py_enum_arg(HurrayState *st, PyObject *obj, const char *(*names)(int), int status,
                        const char *what, uint8_t *out) {
  if (PyUnicode_Check(obj)) {
    for (int i = 0; names(i) != NULL; i++) {
      if (PyUnicode_CompareWithASCIIString(obj, names(i)) == 0) {
        *out = (uint8_t)i;
        return 0;
      }
    }
    hurray__py_raise_statusf(st, status, "%s %R is unknown", what, obj);
    return -1;
  }
  long long value = 0;
  if (hurray__py_int_in_range(st, obj, 0, 0xFF, what, &value) < 0) return -1;
  if (names((int)value) == NULL) {
    hurray__py_raise_statusf(st, status, "%s %lld is unknown", what, value);
    return -1;
  }
  *out = (uint8_t)value;
  return 0;
}

int hurray__py_memory_class_arg(HurrayState *st, PyObject *obj, uint8_t *out) {
  return hurray__py_enum_arg(st, obj, hurray_memory_class_name, HURRAY_EMEMCLASS, "memory class",
                             out);
}

int hurray__py_sync_mode_arg(HurrayState *st, PyObject *obj, uint8_t *out) {
  return hurray__py_enum_arg(st, obj, hurray_sync_mode_name, HURRAY_ESYNC, "sync mode", out);
}

/* ---- the type ------------------------------------------------------------------------------ */

static PyObject *device_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"tag", "index", NULL};
  PyObject *tag_obj = NULL;
  PyObject *index_obj = NULL;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|O:Device", kwlist, &tag_obj, &index_obj)) {
    return NULL;
  }
  HurrayState *st = hurray__py_state_of_type(type);
  int tag = tag_arg(st, tag_obj);
  uint16_t index = 0;
  if (tag < 0 || (index_obj != NULL && index_arg(st, index_obj, &index) < 0)) return NULL;
  return hurray__py_device_new(st, tag, index);
}

static void device_dealloc(PyObject *self) {
  PyTypeObject *type = Py_TYPE(self);
  type->tp_free(self);
  Py_DECREF(type);
}

/* The tag's name, or its hex spelling for a private tag unregistered since. */
static PyObject *device_name(const HurrayDeviceObject *self) {
  const char *name = hurray_device_name(self->tag);
  if (name != NULL) return PyUnicode_FromString(name);
  char hex[8];
  snprintf(hex, sizeof hex, "0x%02X", (unsigned)self->tag);
  return PyUnicode_FromString(hex);
}

static PyObject *device_repr(PyObject *op) {
  HurrayDeviceObject *self = (HurrayDeviceObject *)op;
  const char *name = hurray_device_name(self->tag);
  if (name == NULL) {
    char hex[8];
    snprintf(hex, sizeof hex, "0x%02X", (unsigned)self->tag);
    return PyUnicode_FromFormat("hurray.Device(%s, %u)", hex, (unsigned)self->index);
  }
  return PyUnicode_FromFormat("hurray.Device(\"%s\", %u)", name, (unsigned)self->index);
}

static PyObject *device_str(PyObject *op) {
  HurrayDeviceObject *self = (HurrayDeviceObject *)op;
  PyObject *name = device_name(self);
  if (name == NULL) return NULL;
  PyObject *text = PyUnicode_FromFormat("%U:%u", name, (unsigned)self->index);
  Py_DECREF(name);
  return text;
}

static Py_hash_t device_hash(PyObject *op) {
  HurrayDeviceObject *self = (HurrayDeviceObject *)op;
  return (Py_hash_t)((self->tag << 16) | self->index) + 1;
}

static PyObject *device_richcompare(PyObject *a, PyObject *b, int op) {
  if (!Py_IS_TYPE(b, Py_TYPE(a)) || (op != Py_EQ && op != Py_NE)) Py_RETURN_NOTIMPLEMENTED;
  HurrayDeviceObject *x = (HurrayDeviceObject *)a;
  HurrayDeviceObject *y = (HurrayDeviceObject *)b;
  int equal = x->tag == y->tag && x->index == y->index;
  return PyBool_FromLong(op == Py_EQ ? equal : !equal);
}

static PyObject *device_reduce(PyObject *op, PyObject *unused) {
  (void)unused;
  HurrayDeviceObject *self = (HurrayDeviceObject *)op;
  return Py_BuildValue("O(ii)", (PyObject *)Py_TYPE(op), self->tag, self->index);
}

static PyObject *get_tag(PyObject *self, void *c) {
  (void)c;
  return PyLong_FromLong(((HurrayDeviceObject *)self)->tag);
}
static PyObject *get_index(PyObject *self, void *c) {
  (void)c;
  return PyLong_FromLong(((HurrayDeviceObject *)self)->index);
}
static PyObject *get_name(PyObject *self, void *c) {
  (void)c;
  return device_name((HurrayDeviceObject *)self);
}

static PyGetSetDef device_getset[] = {
    {"tag", get_tag, NULL,
     PyDoc_STR("The device tag, an int: 0x00 cpu to 0x08 opencl, 0xF0-0xFE private.\n"),
     NULL},
    {"index", get_index, NULL,
     PyDoc_STR("The device index (the descriptor's device_id), 0 to 65535.\n"), NULL},
    {"name", get_name, NULL,
     PyDoc_STR("The tag's name: 'cpu', 'cuda', ... or a registered private name.\n"
               "\n"
               "A private tag no longer registered prints as its hex number ('0xF3').\n"),
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef device_methods[] = {
    {"__reduce__", device_reduce, METH_NOARGS,
     PyDoc_STR("__reduce__($self, /)\n--\n\nPickles as hurray.Device(tag, index).")},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(device_doc,
             "Device(tag, index=0)\n"
             "--\n"
             "\n"
             "A device: a Hurray device tag and an index.\n"
             "\n"
             "Devices compare and hash by tag and index, print as ``cuda:1`` and\n"
             "pickle as themselves.\n"
             "\n"
             "Parameters\n"
             "----------\n"
             "tag : int or str\n"
             "    The device tag (ADR-016), or its name: 'cpu', 'cuda', 'rocm',\n"
             "    'metal', 'vulkan', 'webgpu', 'hexagon', 'level_zero', 'opencl', or\n"
             "    a name registered with `register_device`.\n"
             "index : int, optional\n"
             "    Which device of that kind, 0 to 65535.\n"
             "\n"
             "Raises\n"
             "------\n"
             "hurray.DescriptorError\n"
             "    No device has that name, or the tag is reserved or invalid.\n"
             "hurray.InvalidArgumentError\n"
             "    The index is out of range.\n"
             "\n"
             "See Also\n"
             "--------\n"
             "register_device : Name an implementation-private tag.\n"
             "\n"
             "Examples\n"
             "--------\n"
             ">>> d = hurray.Device(\"cuda\", 1)\n"
             ">>> d\n"
             "hurray.Device(\"cuda\", 1)\n"
             ">>> str(d), d.name, d.tag, d.index\n"
             "('cuda:1', 'cuda', 1, 1)\n"
             ">>> hurray.Device(\"cpu\") == hurray.Device(0, 0)\n"
             "True\n");

static PyType_Slot device_slots[] = {
    {Py_tp_new, device_new},         {Py_tp_dealloc, device_dealloc},
    {Py_tp_repr, device_repr},       {Py_tp_str, device_str},
    {Py_tp_hash, device_hash},       {Py_tp_richcompare, device_richcompare},
    {Py_tp_getset, device_getset},   {Py_tp_methods, device_methods},
    {Py_tp_doc, (void *)device_doc}, {0, NULL},
};

PyType_Spec hurray__py_device_spec = {
    .name = "hurray.Device",
    .basicsize = sizeof(HurrayDeviceObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = device_slots,
};

/* ---- private device tags ------------------------------------------------------------------- */

static PyObject *register_device(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
  HurrayState *st = PyModule_GetState(module);
  if (nargs != 2) {
    return PyErr_Format(PyExc_TypeError, "register_device() takes 2 arguments (%zd given)", nargs);
  }
  long long tag = 0;
  if (hurray__py_int_in_range(st, args[0], 0, 0xFF, "device tag", &tag) < 0) return NULL;
  if (!PyUnicode_Check(args[1])) {
    return PyErr_Format(PyExc_TypeError, "device name must be a str, not %.200s",
                        Py_TYPE(args[1])->tp_name);
  }
  const char *name = PyUnicode_AsUTF8(args[1]);
  if (name == NULL) return NULL;
  HurrayError error = {0};
  int status = hurray_device_register_private((int)tag, name, &error);
  if (status != HURRAY_OK) return hurray__py_raise_status(st, status, &error);
  return hurray__py_device_new(st, (int)tag, 0);
}

static PyObject *unregister_device(PyObject *module, PyObject *arg) {
  HurrayState *st = PyModule_GetState(module);
  long long tag = 0;
  if (hurray__py_int_in_range(st, arg, 0, 0xFF, "device tag", &tag) < 0) return NULL;
  HurrayError error = {0};
  int status = hurray_device_unregister_private((int)tag, &error);
  if (status != HURRAY_OK) return hurray__py_raise_status(st, status, &error);
  Py_RETURN_NONE;
}

PyMethodDef hurray__py_device_functions[] = {
    {"register_device", HURRAY_PY_CFUNC(register_device), METH_FASTCALL,
     PyDoc_STR("register_device($module, tag, name, /)\n"
               "--\n"
               "\n"
               "Register an implementation-private device tag under a name.\n"
               "\n"
               "Tags 0xF0 to 0xFE are for devices the format does not name. Peers that\n"
               "exchange tensors of such a device agree on the tag's meaning out of\n"
               "band and register it, each in its own process, with the same name.\n"
               "\n"
               "Parameters\n"
               "----------\n"
               "tag : int\n"
               "    The tag, 0xF0 to 0xFE.\n"
               "name : str\n"
               "    Its name: 1 to 31 characters of [a-z0-9_].\n"
               "\n"
               "Returns\n"
               "-------\n"
               "hurray.Device\n"
               "    ``hurray.Device(tag, 0)``.\n"
               "\n"
               "Raises\n"
               "------\n"
               "hurray.InvalidArgumentError\n"
               "    The tag is not private, or the name is not valid.\n"
               "hurray.StateError\n"
               "    The tag is registered under another name. Registering the same\n"
               "    pair again does nothing.\n"
               "\n"
               "See Also\n"
               "--------\n"
               "unregister_device\n"
               "\n"
               "Examples\n"
               "--------\n"
               ">>> npu = hurray.register_device(0xF3, \"npu\")\n"
               ">>> npu, hurray.Device(\"npu\", 2).tag == 0xF3\n"
               "(hurray.Device(\"npu\", 0), True)\n"
               ">>> hurray.unregister_device(0xF3)\n")},
    {"unregister_device", unregister_device, METH_O,
     PyDoc_STR("unregister_device($module, tag, /)\n"
               "--\n"
               "\n"
               "Forget a registered private device tag.\n"
               "\n"
               "Parameters\n"
               "----------\n"
               "tag : int\n"
               "    A tag registered with `register_device`.\n"
               "\n"
               "Raises\n"
               "------\n"
               "hurray.StateError\n"
               "    The tag is not registered.\n"
               "\n"
               "Examples\n"
               "--------\n"
               ">>> _ = hurray.register_device(0xF4, \"dsp\")\n"
               ">>> hurray.unregister_device(0xF4)\n"
               ">>> hurray.Device(\"dsp\")\n"
               "Traceback (most recent call last):\n"
               "  ...\n"
               "hurray.DescriptorError: no device is named 'dsp'\n")},
    {NULL, NULL, 0, NULL},
};
