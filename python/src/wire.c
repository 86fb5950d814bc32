/* wire.c -- the wire protocol in Python (docs/impl/wire.md): hurray.connect returns a
 * hurray.Client over HurrayClient, hurray.serve a hurray.Server running HurrayServer's event
 * loop on a thread of its own. Every network call runs with the GIL released; the server's
 * thread never touches Python (the tensors it serves hold references that are dropped, with
 * the GIL, when the server is stopped). */
#include "hurray_python.h"

#include <limits.h>
#include <stdio.h>
#include <pthread.h>
#include <string.h>

/* ---- arguments ---------------------------------------------------------------------------- */

/* The UTF-8 of str `obj` for the C API, which takes it NUL-terminated: a str holding a NUL
 * would be cut there silently (get("x\0y") fetching "x"), so it is refused, as hurray.save
 * refuses such a name. `what` names it in the error ("get(): name"). */
static const char *text_arg(HurrayState *st, PyObject *obj, const char *what) {
  Py_ssize_t size = 0;
  const char *utf8 = PyUnicode_AsUTF8AndSize(obj, &size);
  if (utf8 != NULL && strlen(utf8) != (size_t)size) {
    hurray__py_raise(st, HURRAY_PY_EXC_INVALID_ARGUMENT, "%s %R contains a NUL", what, obj);
    return NULL;
  }
  return utf8;
}

/* A secret given as bytes-like or str (UTF-8); *out stays NULL for None. */
static int secret_arg(PyObject *obj, Py_buffer *view, int *have) {
  *have = 0;
  if (obj == NULL || obj == Py_None) return 0;
  if (PyUnicode_Check(obj)) {
    Py_ssize_t n = 0;
    const char *s = PyUnicode_AsUTF8AndSize(obj, &n);
    if (s == NULL) return -1;
    if (PyBuffer_FillInfo(view, obj, (void *)s, n, 1, PyBUF_SIMPLE) < 0) return -1;
  } else if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0) {
    return -1;
  }
  *have = 1;
  return 0;
}

/* tls= of connect (keys "cafile", "server_name") or serve (keys "certfile", "keyfile", both
 * required): a dict of paths (str, bytes or os.PathLike) and, for server_name, a str. The
 * encoded values live in `held` until tls_arg_release. */
typedef struct TlsArg {
  HurrayTlsOptions options;
  PyObject *held[2];
  int given;
} TlsArg;

static void tls_arg_release(TlsArg *t) {
  Py_CLEAR(t->held[0]);
  Py_CLEAR(t->held[1]);
}

static int tls_arg(HurrayState *st, PyObject *obj, int server, TlsArg *out) {
  memset(out, 0, sizeof *out);
  if (obj == NULL || obj == Py_None) return 0;
  const char *fname = server ? "serve" : "connect";
  const char *keys[2] = {server ? "certfile" : "cafile", server ? "keyfile" : "server_name"};
  if (!PyDict_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "%s(): tls must be a dict with '%s' and '%s', not %.200s", fname,
                 keys[0], keys[1], Py_TYPE(obj)->tp_name);
    return -1;
  }
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(obj, &pos, &key, &value)) {
    int k = !PyUnicode_Check(key) ? -1
            : PyUnicode_CompareWithASCIIString(key, keys[0]) == 0 ? 0
            : PyUnicode_CompareWithASCIIString(key, keys[1]) == 0 ? 1
                                                               : -1;
    if (k < 0) {
      hurray__py_raise(st, HURRAY_PY_EXC_INVALID_ARGUMENT,
                       "%s(): tls takes '%s' and '%s', not %R", fname, keys[0], keys[1], key);
      tls_arg_release(out);
      return -1;
    }
    if (value == Py_None) continue;
    int ok = !server && k == 1 ? (PyUnicode_Check(value) &&
                                  (out->held[k] = PyUnicode_AsUTF8String(value)) != NULL)
                               : PyUnicode_FSConverter(value, &out->held[k]);
    if (ok && strlen(PyBytes_AS_STRING(out->held[k])) != (size_t)PyBytes_GET_SIZE(out->held[k])) {
      hurray__py_raise(st, HURRAY_PY_EXC_INVALID_ARGUMENT, "%s(): tls['%s'] %R contains a NUL",
                       fname, keys[k], value);
      tls_arg_release(out);
      return -1;
    }
    if (!ok) {
      if (!PyErr_Occurred()) {
        PyErr_Format(PyExc_TypeError, "%s(): tls['%s'] must be str, not %.200s", fname, keys[k],
                     Py_TYPE(value)->tp_name);
      }
      tls_arg_release(out);
      return -1;
    }
  }
  const char *a = out->held[0] ? PyBytes_AS_STRING(out->held[0]) : NULL;
  const char *b = out->held[1] ? PyBytes_AS_STRING(out->held[1]) : NULL;
  if (server && (a == NULL || b == NULL)) {
    hurray__py_raise(st, HURRAY_PY_EXC_INVALID_ARGUMENT,
                     "serve(): tls needs both 'certfile' and 'keyfile'");
    tls_arg_release(out);
    return -1;
  }
  if (server) {
    out->options.certificate_file = a;
    out->options.key_file = b;
  } else {
    out->options.ca_file = a;
    out->options.server_name = b;
  }
  out->given = 1;
  return 0;
}

/* Seconds (a positive real) -> milliseconds in [1, INT_MAX]; `fallback` for None. */
static int timeout_arg(HurrayState *st, PyObject *obj, const char *what, uint32_t fallback,
                       uint32_t *out) {
  *out = fallback;
  if (obj == NULL || obj == Py_None) return 0;
  double seconds = PyFloat_AsDouble(obj);
  if (seconds == -1.0 && PyErr_Occurred()) return -1;
  if (!(seconds > 0) || seconds * 1000.0 > (double)INT_MAX) {
    hurray__py_raise(st, HURRAY_PY_EXC_INVALID_ARGUMENT, "%s must be a positive number of "
                     "seconds below %d, not %R", what, INT_MAX / 1000, obj);
    return -1;
  }
  *out = seconds * 1000.0 < 1.0 ? 1u : (uint32_t)(seconds * 1000.0);
  return 0;
}

/* ============================================================================================
 * hurray.Client
 * ============================================================================================ */

typedef struct ClientObject {
  PyObject_HEAD HurrayClient *client; /* NULL once closed */
  PyObject *address;
  int busy; /* a call is running with the GIL released */
} ClientObject;

#define CLIENT_SELF ((ClientObject *)op)

static HurrayClient *client_enter(HurrayState *st, ClientObject *self) {
  if (self->client == NULL) {
    hurray__py_raise(st, HURRAY_PY_EXC_STATE, "the hurray.Client for %R is closed",
                     self->address);
    return NULL;
  }
  if (self->busy) {
    hurray__py_raise(st, HURRAY_PY_EXC_STATE,
                     "the hurray.Client for %R is in use by another thread: a client makes "
                     "one call at a time (connect once per thread)",
                     self->address);
    return NULL;
  }
  self->busy = 1;
  return self->client;
}

static void client_dealloc(PyObject *op) {
  PyTypeObject *type = Py_TYPE(op);
  if (CLIENT_SELF->client != NULL) {
    HurrayClient *client = CLIENT_SELF->client;
    Py_BEGIN_ALLOW_THREADS;
    hurray_client_destroy(client);
    Py_END_ALLOW_THREADS;
  }
  Py_XDECREF(CLIENT_SELF->address);
  type->tp_free(op);
  Py_DECREF(type);
}

static PyObject *client_repr(PyObject *op) {
  return PyUnicode_FromFormat("<hurray.Client %R%s>", CLIENT_SELF->address,
                              CLIENT_SELF->client ? "" : " (closed)");
}

static PyObject *client_list(PyObject *op, PyObject *unused) {
  (void)unused;
  HurrayState *st = hurray__py_state_of(op);
  HurrayClient *client = client_enter(st, CLIENT_SELF);
  if (client == NULL) return NULL;
  HurrayRemoteTensor *items = NULL;
  uint32_t count = 0;
  HurrayError error = {0};
  int status;
  Py_BEGIN_ALLOW_THREADS;
  status = hurray_client_list(client, &items, &count, &error);
  Py_END_ALLOW_THREADS;
  CLIENT_SELF->busy = 0;
  if (status != HURRAY_OK) return hurray__py_raise_status(st, status, &error);
  PyObject *result = PyList_New(count);
  for (uint32_t i = 0; result != NULL && i < count; i++) {
    const HurrayRemoteTensor *t = &items[i];
    const char *layout = hurray_layout_name(t->layout);
    /* hurray__py_dtype_object lends its singleton: "N" below takes a reference of its own */
    PyObject *dtype = t->dtype == HURRAY_DTYPE_INVALID
                          ? Py_NewRef(Py_None)
                          : Py_XNewRef(hurray__py_dtype_object(st, t->dtype));
    if (dtype == NULL) { /* the client refuses unknown codes; never NULL without an error */
      hurray__py_raise(st, HURRAY_PY_EXC_WIRE, "listed tensor '%s': unknown dtype code %u",
                       t->name, (unsigned)t->dtype);
    }
    PyObject *shape = dtype == NULL ? NULL : PyTuple_New(t->ndim);
    for (int32_t k = 0; shape != NULL && k < t->ndim; k++) {
      PyObject *extent = PyLong_FromLongLong(t->shape[k]);
      if (extent == NULL) Py_CLEAR(shape);
      else PyTuple_SET_ITEM(shape, k, extent);
    }
    if (shape == NULL) Py_XDECREF(dtype);
    PyObject *entry = shape == NULL ? NULL
                                    : Py_BuildValue("{s:s,s:s,s:N,s:N,s:I,s:K}", "name", t->name,
                                                    "layout", layout ? layout : "unknown",
                                                    "dtype", dtype, "shape", shape, "buffers",
                                                    t->buffer_count, "nbytes",
                                                    (unsigned long long)t->data_bytes);
    if (entry == NULL) {
      Py_CLEAR(result);
      break;
    }
    PyList_SET_ITEM(result, i, entry);
  }
  free(items);
  return result;
}

static PyObject *raise_request_error(HurrayState *st, int status, const HurrayError *error);

/* The metadata of tensor `name` (NULL: the server's) as a dict. */
static PyObject *client_metadata_of(PyObject *op, const char *name) {
  HurrayState *st = hurray__py_state_of(op);
  HurrayClient *client = client_enter(st, CLIENT_SELF);
  if (client == NULL) return NULL;
  HurrayMetaValue *tree = NULL;
  HurrayError error = {0};
  int status;
  Py_BEGIN_ALLOW_THREADS;
  status = hurray_client_metadata(client, name, &tree, &error);
  Py_END_ALLOW_THREADS;
  CLIENT_SELF->busy = 0;
  if (status != HURRAY_OK) return raise_request_error(st, status, &error);
  PyObject *result = hurray__py_meta_to_py(tree);
  hurray_meta_destroy(tree);
  return result;
}

static PyObject *client_tensor_metadata(PyObject *op, PyObject *name_obj) {
  if (!PyUnicode_Check(name_obj)) {
    return PyErr_Format(PyExc_TypeError, "tensor_metadata() takes a str name, not %.100s",
                        Py_TYPE(name_obj)->tp_name);
  }
  Py_ssize_t len = 0;
  const char *name = PyUnicode_AsUTF8AndSize(name_obj, &len);
  if (name == NULL) return NULL;
  if (len == 0 || (size_t)len != strlen(name)) {
    return hurray__py_raise(hurray__py_state_of(op), HURRAY_PY_EXC_INVALID_ARGUMENT,
                            "a tensor name is 1 to 255 bytes of UTF-8 without U+0000");
  }
  return client_metadata_of(op, name);
}

static PyObject *client_get_metadata(PyObject *op, void *closure) {
  (void)closure;
  return client_metadata_of(op, NULL);
}

/* retries= and progress= of get and read, into `options` (progress through `progress`). */
static int transfer_args(HurrayState *st, PyObject *retries_obj, PyObject *progress_obj,
                         HurrayGetOptions *options, HurrayPyProgress *progress) {
  long long retries = 0;
  if (retries_obj != NULL &&
      hurray__py_int_in_range(st, retries_obj, 0, 1000, "retries", &retries) < 0) {
    return -1;
  }
  options->retries = (uint32_t)retries;
  if (hurray__py_progress_arg(progress_obj, progress) < 0) return -1;
  if (progress->fn != NULL) {
    options->progress = hurray__py_progress_call;
    options->progress_context = progress;
  }
  return 0;
}

/* A failed get or read: the server's answer for a name it does not serve (spec §6.2, "no tensor
 * named 'NAME'", prefixed "peer: " by the client) is a hurray.KeyError, which is also the
 * InvalidArgumentError of its status (ADR-069); anything else the class of its status. */
static PyObject *raise_request_error(HurrayState *st, int status, const HurrayError *error) {
  static const char kMissing[] = "peer: no tensor named '";
  if (status == HURRAY_EINVAL && strncmp(error->message, kMissing, sizeof kMissing - 1) == 0) {
    return hurray__py_raise_status_as(st, HURRAY_PY_EXC_KEY, status, error);
  }
  return hurray__py_raise_status(st, status, error);
}

static const char *const kGetNames[] = {"name",    "device",   "stream", "slice", "fallback",
                                        "retries", "progress", NULL};
enum { G_NAME, G_DEVICE, G_STREAM, G_SLICE, G_FALLBACK, G_RETRIES, G_PROGRESS, G_COUNT };

/* slice(start, stop) or (start, stop) of non-negative row numbers -> *start, *stop. */
static int rows_arg(HurrayState *st, PyObject *obj, int64_t *start, int64_t *stop) {
  PyObject *a = NULL, *b = NULL;
  if (PySlice_Check(obj)) {
    PySliceObject *s = (PySliceObject *)obj;
    if (s->step != Py_None) {
      PyObject *one = PyLong_FromLong(1);
      int equal = one ? PyObject_RichCompareBool(s->step, one, Py_EQ) : -1;
      Py_XDECREF(one);
      if (equal < 0) return -1;
      if (!equal) {
        hurray__py_raise(st, HURRAY_PY_EXC_INVALID_ARGUMENT,
                         "slice=%R: rows are sent contiguously, the step must be 1", obj);
        return -1;
      }
    }
    a = s->start;
    b = s->stop;
  } else if (PyTuple_Check(obj) && PyTuple_GET_SIZE(obj) == 2) {
    a = PyTuple_GET_ITEM(obj, 0);
    b = PyTuple_GET_ITEM(obj, 1);
  } else {
    PyErr_Format(PyExc_TypeError, "slice must be a slice or a (start, stop) tuple, not %.200s",
                 Py_TYPE(obj)->tp_name);
    return -1;
  }
  if (b == Py_None) {
    hurray__py_raise(st, HURRAY_PY_EXC_INVALID_ARGUMENT,
                     "slice=%R: give the stop row (rows are counted from 0, never from the end)",
                     obj);
    return -1;
  }
  *start = 0;
  if (a != Py_None && hurray__py_i64(st, a, "slice start", start) < 0) return -1;
  if (hurray__py_i64(st, b, "slice stop", stop) < 0) return -1;
  if (*start < 0 || *stop <= *start) {
    hurray__py_raise(st, HURRAY_PY_EXC_INVALID_ARGUMENT,
                     "slice=%R: rows [start, stop) with 0 <= start < stop", obj);
    return -1;
  }
  return 0;
}

static PyObject *client_get(PyObject *op, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames) {
  static const HurrayPyParser parser = {"get", kGetNames, 1, 1, 1};
  PyObject *a[G_COUNT];
  if (hurray__py_parse(&parser, args, nargs, kwnames, a) < 0) return NULL;
  HurrayState *st = hurray__py_state_of(op);
  if (!PyUnicode_Check(a[G_NAME])) {
    return PyErr_Format(PyExc_TypeError, "get(): name must be str, not %.200s",
                        Py_TYPE(a[G_NAME])->tp_name);
  }
  const char *name = text_arg(st, a[G_NAME], "get(): name");
  if (name == NULL) return NULL;
  HurrayGetOptions options = {0};
  if (a[G_DEVICE] != NULL && a[G_DEVICE] != Py_None &&
      hurray__py_device_arg(st, a[G_DEVICE], &options.preferred_device, &options.device_id) < 0) {
    return NULL;
  }
  long long stream = 0;
  if (a[G_STREAM] != NULL && a[G_STREAM] != Py_None &&
      hurray__py_int_in_range(st, a[G_STREAM], 1, (long long)INTPTR_MAX, "stream", &stream) < 0) {
    return NULL;
  }
  if (a[G_SLICE] != NULL && a[G_SLICE] != Py_None &&
      rows_arg(st, a[G_SLICE], &options.row_start, &options.row_stop) < 0) {
    return NULL;
  }
  int fallback = a[G_FALLBACK] == NULL ? 0 : PyObject_IsTrue(a[G_FALLBACK]);
  if (fallback < 0) return NULL;
  if (fallback) options.flags |= HURRAY_GET_FALLBACK;
  HurrayPyProgress progress = {0};
  if (transfer_args(st, a[G_RETRIES], a[G_PROGRESS], &options, &progress) < 0) return NULL;
  HurrayClient *client = client_enter(st, CLIENT_SELF);
  if (client == NULL) return hurray__py_progress_end(&progress), NULL;
  HurrayTensorContext *context = NULL;
  HurrayError error = {0};
  int status = HURRAY_OK;
  Py_BEGIN_ALLOW_THREADS;
  if (stream != 0) { /* the caller's queue, on the preferred device */
    status = hurray_device_queue_wrap(options.preferred_device, NULL, (void *)(uintptr_t)stream,
                                      &options.queue, &error);
    if (status == HURRAY_OK && hurray_device_queue_device_id(options.queue) != options.device_id) {
      status = HURRAY_EDEVICE;
      error.code = status;
      snprintf(error.message, sizeof error.message, "get(): the stream is on %s device %u, not %u",
               hurray_device_name(options.preferred_device),
               (unsigned)hurray_device_queue_device_id(options.queue), (unsigned)options.device_id);
    }
  }
  if (status == HURRAY_OK) status = hurray_client_get(client, name, &options, &context, &error);
  hurray_device_queue_destroy(options.queue);
  Py_END_ALLOW_THREADS;
  CLIENT_SELF->busy = 0;
  if (hurray__py_progress_end(&progress) < 0) {
    hurray_tensor_context_release(context);
    return NULL;
  }
  if (status != HURRAY_OK) return raise_request_error(st, status, &error);
  return hurray__py_tensor_adopt(st, context);
}

static const char *const kReadNames[] = {"name", "start", "stop", "out", "retries", "progress",
                                         NULL};
enum { R_NAME, R_START, R_STOP, R_OUT, R_RETRIES, R_PROGRESS, R_COUNT };

static PyObject *client_read(PyObject *op, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames) {
  static const HurrayPyParser parser = {"read", kReadNames, 3, 3, 3};
  PyObject *a[R_COUNT];
  if (hurray__py_parse(&parser, args, nargs, kwnames, a) < 0) return NULL;
  HurrayState *st = hurray__py_state_of(op);
  if (!PyUnicode_Check(a[R_NAME])) {
    return PyErr_Format(PyExc_TypeError, "read(): name must be str, not %.200s",
                        Py_TYPE(a[R_NAME])->tp_name);
  }
  const char *name = text_arg(st, a[R_NAME], "read(): name");
  uint64_t start = 0, stop = 0;
  if (name == NULL || hurray__py_u64(st, a[R_START], "start", &start) < 0 ||
      hurray__py_u64(st, a[R_STOP], "stop", &stop) < 0) {
    return NULL;
  }
  if (stop < start || stop - start > (uint64_t)PY_SSIZE_T_MAX) {
    return hurray__py_raise(st, HURRAY_PY_EXC_INVALID_ARGUMENT,
                            "read(): bytes [%llu, %llu) need start <= stop and fit in memory",
                            (unsigned long long)start, (unsigned long long)stop);
  }
  HurrayGetOptions options = {0};
  Py_ssize_t n = (Py_ssize_t)(stop - start);
  Py_buffer view = {0};
  PyObject *result = NULL;
  void *dst = NULL;
  if (a[R_OUT] != NULL && a[R_OUT] != Py_None) {
    if (PyObject_GetBuffer(a[R_OUT], &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) return NULL;
    if (view.len != n) {
      PyBuffer_Release(&view);
      return hurray__py_raise(st, HURRAY_PY_EXC_INVALID_ARGUMENT,
                              "read(): out holds %zd bytes, not the %zd of [%llu, %llu)",
                              view.len, n, (unsigned long long)start, (unsigned long long)stop);
    }
    result = Py_NewRef(a[R_OUT]);
    dst = view.buf;
  } else {
    result = PyBytes_FromStringAndSize(NULL, n); /* filled before anyone else sees it */
    if (result == NULL) return NULL;
    dst = PyBytes_AS_STRING(result);
  }
  HurrayPyProgress progress = {0};
  if (transfer_args(st, a[R_RETRIES], a[R_PROGRESS], &options, &progress) < 0) {
    if (view.obj != NULL) PyBuffer_Release(&view);
    Py_DECREF(result);
    return NULL;
  }
  HurrayClient *client = client_enter(st, CLIENT_SELF);
  HurrayError error = {0};
  int status = HURRAY_OK;
  if (client != NULL) {
    Py_BEGIN_ALLOW_THREADS;
    status = hurray_client_read(client, name, start, stop, n ? dst : NULL, &options, &error);
    Py_END_ALLOW_THREADS;
    CLIENT_SELF->busy = 0;
  }
  if (view.obj != NULL) PyBuffer_Release(&view);
  if (hurray__py_progress_end(&progress) < 0 || client == NULL) {
    Py_DECREF(result);
    return NULL;
  }
  if (status != HURRAY_OK) {
    Py_DECREF(result);
    return raise_request_error(st, status, &error);
  }
  return result;
}

static PyObject *client_put(PyObject *op, PyObject *const *args, Py_ssize_t nargs) {
  HurrayState *st = hurray__py_state_of(op);
  if (nargs != 2) {
    return PyErr_Format(PyExc_TypeError, "put() takes 2 positional arguments (%zd given)",
                        nargs);
  }
  if (!PyUnicode_Check(args[0])) {
    return PyErr_Format(PyExc_TypeError, "put(): name must be str, not %.200s",
                        Py_TYPE(args[0])->tp_name);
  }
  const char *name = text_arg(st, args[0], "put(): name");
  if (name == NULL) return NULL;
  PyObject *module = PyType_GetModule(Py_TYPE(op));
  if (module == NULL) return NULL;
  PyObject *tensor = hurray__py_as_tensor(module, st, args[1], args[0], "put");
  if (tensor == NULL) return NULL;
  if (hurray__py_tensor_live(st, (HurrayTensorObject *)tensor) < 0) {
    Py_DECREF(tensor);
    return NULL;
  }
  HurrayClient *client = client_enter(st, CLIENT_SELF);
  if (client == NULL) {
    Py_DECREF(tensor);
    return NULL;
  }
  const HurrayTensorContext *context = ((HurrayTensorObject *)tensor)->context;
  HurrayError error = {0};
  int status;
  Py_BEGIN_ALLOW_THREADS;
  status = hurray_client_put(client, name, context, &error);
  Py_END_ALLOW_THREADS;
  CLIENT_SELF->busy = 0;
  Py_DECREF(tensor);
  if (status != HURRAY_OK) return hurray__py_raise_status(st, status, &error);
  Py_RETURN_NONE;
}

static PyObject *client_close(PyObject *op, PyObject *unused) {
  (void)unused;
  HurrayState *st = hurray__py_state_of(op);
  if (CLIENT_SELF->busy) {
    return hurray__py_raise(st, HURRAY_PY_EXC_STATE,
                            "the hurray.Client is in use by another thread");
  }
  HurrayClient *client = CLIENT_SELF->client;
  CLIENT_SELF->client = NULL;
  if (client != NULL) {
    Py_BEGIN_ALLOW_THREADS;
    hurray_client_destroy(client);
    Py_END_ALLOW_THREADS;
  }
  Py_RETURN_NONE;
}

static PyObject *client_enter_ctx(PyObject *op, PyObject *unused) {
  (void)unused;
  return Py_NewRef(op);
}

static PyObject *client_exit_ctx(PyObject *op, PyObject *const *args, Py_ssize_t nargs) {
  (void)args;
  (void)nargs;
  PyObject *r = client_close(op, NULL);
  if (r == NULL) return NULL;
  Py_DECREF(r);
  Py_RETURN_FALSE;
}

static PyObject *client_get_info(PyObject *op, void *closure) {
  (void)closure;
  HurrayState *st = hurray__py_state_of(op);
  if (CLIENT_SELF->client == NULL) {
    return hurray__py_raise(st, HURRAY_PY_EXC_STATE, "the hurray.Client for %R is closed",
                            CLIENT_SELF->address);
  }
  HurrayClientInfo info;
  HurrayError error = {0};
  int status = hurray_client_info(CLIENT_SELF->client, &info, &error);
  if (status != HURRAY_OK) return hurray__py_raise_status(st, status, &error);
  PyObject *devices = PyTuple_New(info.ndevices);
  for (uint32_t i = 0; devices != NULL && i < info.ndevices; i++) {
    PyObject *d = hurray__py_device_new(st, info.devices[i], 0);
    if (d == NULL) {
      Py_CLEAR(devices);
      break;
    }
    PyTuple_SET_ITEM(devices, i, d);
  }
  if (devices == NULL) return NULL;
  return Py_BuildValue("{s:(HH),s:O,s:O,s:O,s:K,s:N}", "version", info.version_major,
                       info.version_minor, "authenticated",
                       (info.server_flags & 1u) ? Py_True : Py_False, "read_only",
                       (info.server_flags & 2u) ? Py_True : Py_False, "fd_passing",
                       (info.server_flags & 4u) ? Py_True : Py_False, "max_frame",
                       (unsigned long long)info.max_frame, "devices", devices);
}

static PyObject *client_get_address(PyObject *op, void *closure) {
  (void)closure;
  return Py_NewRef(CLIENT_SELF->address);
}

static PyObject *client_get_closed(PyObject *op, void *closure) {
  (void)closure;
  return PyBool_FromLong(CLIENT_SELF->client == NULL);
}

/* A client is no mapping: its get() takes transfer options and raises for a missing name, where
 * Mapping.get returns a default, and each lookup is a round trip. t[name] and `name in client`
 * say which calls to make instead of CPython's "not subscriptable" / "not iterable". */
static PyObject *client_subscript(PyObject *op, PyObject *key) {
  (void)op;
  return PyErr_Format(PyExc_TypeError,
                      "a hurray.Client is not a mapping: fetch a tensor with client.get(%R)", key);
}

static int client_contains(PyObject *op, PyObject *key) {
  (void)op;
  PyErr_Format(PyExc_TypeError,
               "a hurray.Client is not a container: client.list() lists the tensors it serves "
               "(%R in [e['name'] for e in client.list()]), and client.get(%R) raises "
               "hurray.KeyError for a name it does not",
               key, key);
  return -1;
}

/* pickle and copy of a Client or a Server: a connection or a running server does not travel;
 * its address does. */
static PyObject *not_picklable(PyObject *op, PyObject *unused) {
  (void)unused;
  PyObject *address = PyObject_GetAttrString(op, "address");
  if (address == NULL) return NULL;
  PyErr_Format(PyExc_TypeError,
               "cannot pickle a %s: it holds a live connection or server thread; pass its "
               "address (%R) and call hurray.connect(address) on the other side",
               Py_TYPE(op)->tp_name, address);
  Py_DECREF(address);
  return NULL;
}

static PyMethodDef client_methods[] = {
    {"list", client_list, METH_NOARGS,
     PyDoc_STR("list($self, /)\n--\n\n"
               "List the tensors the server serves.\n\n"
               "Returns\n-------\n"
               "list of dict\n"
               "    One dict per tensor, in the server's order: ``name`` (str), ``layout``\n"
               "    (str), ``dtype`` (hurray.dtype, None for a composite tensor), ``shape``\n"
               "    (tuple of int, the logical shape), ``buffers`` (int) and ``nbytes`` (int,\n"
               "    the sum of its buffers' sizes).\n\n"
               "Raises\n------\n"
               "hurray.ConnectionLostError\n"
               "    The server went away.\n"
               "hurray.TimedOutError\n"
               "    The call outlasted the client's timeout, or the server made no progress\n"
               "    within its idle_timeout.\n"
               "hurray.LimitError\n"
               "    More than 262144 tensors, or 64 MiB of answer.\n"
               "hurray.WireError\n"
               "    An entry with a layout or dtype code this hurray does not know.\n\n"
               "Examples\n--------\n"
               ">>> import numpy as np\n"
               ">>> with hurray.serve({'w': np.zeros((2, 3), np.float32)}) as server:\n"
               "...     with hurray.connect(server.address) as client:\n"
               "...         client.list()\n"
               "[{'name': 'w', 'layout': 'dense', 'dtype': hurray.float32, 'shape': (2, 3), "
               "'buffers': 1, 'nbytes': 24}]\n")},
    {"tensor_metadata", client_tensor_metadata, METH_O,
     PyDoc_STR("tensor_metadata($self, name, /)\n--\n\n"
               "The metadata of one tensor on the server, without fetching its data.\n\n"
               "One METADATA request (wire protocol 1.3): the map the tensor's record\n"
               "carries, as ``get(name)`` would deliver it.\n\n"
               "Parameters\n----------\n"
               "name : str\n"
               "    The tensor's name on the server.\n\n"
               "Returns\n-------\n"
               "dict\n"
               "    Its metadata: str keys; values dict, list, str, int, float, bool or\n"
               "    None. Empty when the tensor has none.\n\n"
               "Raises\n------\n"
               "hurray.KeyError\n"
               "    The server serves no tensor of that name (the connection goes on).\n"
               "hurray.UnsupportedError\n"
               "    The server speaks wire protocol 1.2 or older, which has no metadata\n"
               "    requests; nothing was sent.\n"
               "hurray.WireError\n"
               "    The answer was not a valid metadata block (the connection is closed).\n"
               "hurray.ConnectionLostError\n"
               "    The server went away.\n\n"
               "See Also\n--------\n"
               "Client.metadata : the server's own metadata.\n\n"
               "Examples\n--------\n"
               ">>> import os, tempfile\n"
               ">>> import numpy as np\n"
               ">>> path = os.path.join(tempfile.mkdtemp(), 'm.hurray')\n"
               ">>> hurray.save(path, {'w': np.zeros(4, np.float32)},\n"
               "...             metadata={'model': 'tiny'},\n"
               "...             tensor_metadata={'w': {'unit': 'm'}})\n"
               ">>> with hurray.serve(path) as server:\n"
               "...     with hurray.connect(server.address) as client:\n"
               "...         client.tensor_metadata('w')\n"
               "{'unit': 'm'}\n")},
    {"get", HURRAY_PY_CFUNC(client_get), METH_FASTCALL | METH_KEYWORDS,
     PyDoc_STR(
         "get($self, name, /, *, device='cpu', stream=None, slice=None, fallback=False,\n"
         "    retries=0, progress=None)\n--\n\n"
         "Fetch a tensor, checked, with its whole descriptor.\n\n"
         "Parameters\n----------\n"
         "name : str\n"
         "    The tensor's name on the server.\n"
         "device : hurray.Device or str, optional\n"
         "    The preferred device (``preferred_device`` of the request). A server\n"
         "    serves a tensor on the CPU and on the device its memory is in; a tensor\n"
         "    served on `device` arrives in new memory of that device, each chunk\n"
         "    copied there as it arrives and nothing handed out before every checksum\n"
         "    matched. Receiving on a device needs its runtime here (OpenCL, CUDA).\n"
         "stream : int, optional\n"
         "    The queue to receive on, as an integer handle: a cl_command_queue\n"
         "    (pyopencl: ``queue.int_ptr``) or a CUstream of `device`. By default a new\n"
         "    queue in the runtime's default context of `device`, as ``to_device``.\n"
         "slice : slice or tuple of int, optional\n"
         "    Rows ``[start, stop)`` of the first axis of a dense tensor; only their\n"
         "    bytes cross the wire.\n"
         "fallback : bool, optional\n"
         "    Accept the tensor on the CPU when the server cannot serve `device`, or\n"
         "    when its runtime is missing here.\n"
         "retries : int, optional\n"
         "    Reconnections allowed when the connection drops mid-transfer; each\n"
         "    resumes at the first byte not yet received.\n"
         "progress : callable or bool, optional\n"
         "    Called as ``progress(done, total)`` in bytes as the data arrives; True\n"
         "    draws a bar on stderr when it is a terminal. An exception it raises\n"
         "    is raised once the transfer is over.\n\n"
         "Returns\n-------\n"
         "hurray.Tensor\n"
         "    The tensor in new memory of the device the server answered on (``cpu``\n"
         "    unless `device` was served), aligned as the server's descriptor says:\n"
         "    its layout, dtype (Tier 2 and 3 too), shape, strides, axis, block size and\n"
         "    children are the served ones.\n\n"
         "Raises\n------\n"
         "hurray.KeyError\n"
         "    The server serves no tensor of that name (a KeyError, and an\n"
         "    InvalidArgumentError).\n"
         "hurray.InvalidArgumentError\n"
         "    Rows outside the tensor.\n"
         "hurray.UnsupportedError\n"
         "    The server cannot serve `device`, or its runtime is missing here, and\n"
         "    `fallback` is false.\n"
         "hurray.DescriptorError\n"
         "    `stream` is a queue of another device than `device`.\n"
         "hurray.ChecksumError\n"
         "    A byte was corrupted in transit; nothing is returned.\n"
         "hurray.ConnectionLostError\n"
         "    The server went away (after `retries`); nothing partial is returned.\n"
         "hurray.TimedOutError\n"
         "    The call outlasted the client's timeout, or no progress within its\n"
         "    idle_timeout.\n\n"
         "Examples\n--------\n"
         ">>> import numpy as np\n"
         ">>> a = np.arange(12, dtype=np.int16).reshape(4, 3)\n"
         ">>> with hurray.serve({'a': a}) as server, hurray.connect(server.address) as c:\n"
         "...     c.get('a', slice=slice(1, 3)).tolist()\n"
         "[[3, 4, 5], [6, 7, 8]]\n")},
    {"read", HURRAY_PY_CFUNC(client_read), METH_FASTCALL | METH_KEYWORDS,
     PyDoc_STR(
         "read($self, name, start, stop, /, *, out=None, retries=0, progress=None)\n--\n\n"
         "Read bytes ``[start, stop)`` of a tensor's data, checked as they arrive.\n\n"
         "The data is the tensor's buffers as the server sends them (each reduced to the\n"
         "bytes its arrays address, as in a file), concatenated in order; ``list()``\n"
         "gives its length as ``nbytes``. Only the bytes asked for cross the wire, so a\n"
         "part of a huge tensor is read without the rest, and several clients (one per\n"
         "thread: the GIL is released) can each read a part into their slice of one\n"
         "`out`. Each DATA frame of the answer carries a 32-bit XXH3 check of its bytes,\n"
         "compared as it arrives (wire protocol 1.1); the tensor's per-buffer checksums\n"
         "cover whole buffers and are not checked here.\n\n"
         "Parameters\n----------\n"
         "name : str\n"
         "    The tensor's name on the server.\n"
         "start, stop : int\n"
         "    The byte range, ``0 <= start <= stop <= nbytes``.\n"
         "out : writable bytes-like, optional\n"
         "    C-contiguous memory of exactly ``stop - start`` bytes to read into (a\n"
         "    ``bytearray``, a ``memoryview`` slice, a NumPy array); by default a new\n"
         "    ``bytes``. After an error its contents are unspecified.\n"
         "retries : int, optional\n"
         "    Reconnections allowed when the connection drops mid-transfer; each\n"
         "    resumes after the last checked frame.\n"
         "progress : callable or bool, optional\n"
         "    Called as ``progress(done, total)`` in bytes of the range; True\n"
         "    draws a bar on stderr when it is a terminal.\n\n"
         "Returns\n-------\n"
         "bytes or object\n"
         "    The new ``bytes``, or `out` filled.\n\n"
         "Raises\n------\n"
         "hurray.KeyError\n"
         "    The server serves no tensor of that name (a KeyError, and an\n"
         "    InvalidArgumentError).\n"
         "hurray.InvalidArgumentError\n"
         "    A range outside its data, or `out` of another size.\n"
         "hurray.UnsupportedError\n"
         "    The server speaks wire protocol 1.0, whose ranges carry no checks.\n"
         "hurray.ChecksumError\n"
         "    A byte was corrupted in transit.\n"
         "hurray.ConnectionLostError\n"
         "    The server went away (after `retries`).\n"
         "hurray.TimedOutError\n"
         "    The call outlasted the client's timeout, or no progress within its\n"
         "    idle_timeout.\n\n"
         "Examples\n--------\n"
         ">>> import numpy as np\n"
         ">>> a = np.arange(8, dtype=np.uint8)\n"
         ">>> with hurray.serve({'a': a}) as server, hurray.connect(server.address) as c:\n"
         "...     c.read('a', 2, 5)\n"
         "b'\\x02\\x03\\x04'\n")},
    {"put", HURRAY_PY_CFUNC(client_put), METH_FASTCALL,
     PyDoc_STR("put($self, name, tensor, /)\n--\n\n"
               "Upload a tensor to the server, which then serves it under `name`.\n\n"
               "Parameters\n----------\n"
               "name : str\n"
               "    The name to serve it under; the server refuses a name it serves already.\n"
               "tensor : hurray.Tensor, numpy.ndarray or DLPack producer\n"
               "    A tensor in host memory, of any layout and dtype; it is not copied\n"
               "    before it is sent.\n\n"
               "Raises\n------\n"
               "hurray.RequestDeniedError\n"
               "    The server is read-only (it was not started with ``uploads=True``).\n"
               "hurray.InvalidArgumentError\n"
               "    The server already serves a tensor of that name.\n"
               "hurray.LimitError\n"
               "    The tensor is larger than the server accepts.\n\n"
               "Examples\n--------\n"
               ">>> import numpy as np\n"
               ">>> with hurray.serve(uploads=True) as server, \\\n"
               "...         hurray.connect(server.address) as c:\n"
               "...     c.put('v', np.array([1.5, 2.5]))\n"
               "...     c.get('v').tolist()\n"
               "[1.5, 2.5]\n")},
    {"close", client_close, METH_NOARGS,
     PyDoc_STR("close($self, /)\n--\n\n"
               "Say goodbye to the server and close the connection; idempotent.\n\n"
               "Examples\n--------\n"
               ">>> with hurray.serve() as server:\n"
               "...     client = hurray.connect(server.address)\n"
               "...     client.close()\n"
               "...     client.closed\n"
               "True\n")},
    {"__enter__", client_enter_ctx, METH_NOARGS, NULL},
    {"__exit__", HURRAY_PY_CFUNC(client_exit_ctx), METH_FASTCALL, NULL},
    {"__reduce__", not_picklable, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef client_getset[] = {
    {"address", client_get_address, NULL, PyDoc_STR("The address the client connected to."),
     NULL},
    {"closed", client_get_closed, NULL, PyDoc_STR("Whether close() was called."), NULL},
    {"metadata", client_get_metadata, NULL,
     PyDoc_STR("The server's metadata, as a dict (one METADATA request, wire protocol 1.3).\n\n"
               "The metadata of the file the server serves -- of the first file, if it\n"
               "serves several -- or an empty dict when it serves none (only tensors from\n"
               "memory). Each tensor's own is ``tensor_metadata(name)``. Reading it raises\n"
               "hurray.UnsupportedError for a server of protocol 1.2 or older, and the\n"
               "errors of ``tensor_metadata``.\n\n"
               "Examples\n--------\n"
               ">>> import os, tempfile\n"
               ">>> import numpy as np\n"
               ">>> path = os.path.join(tempfile.mkdtemp(), 'm.hurray')\n"
               ">>> hurray.save(path, {'w': np.zeros(4, np.float32)}, metadata={'model': 'tiny'})\n"
               ">>> with hurray.serve(path) as server:\n"
               "...     with hurray.connect(server.address) as client:\n"
               "...         client.metadata\n"
               "{'model': 'tiny'}\n"),
     NULL},
    {"info", client_get_info, NULL,
     PyDoc_STR("What the server's hello said, as a dict.\n\n"
               "``version`` (the negotiated protocol version), ``authenticated``,\n"
               "``read_only``, ``fd_passing`` (tensors come as file descriptors, mapped\n"
               "without a copy), ``max_frame`` and ``devices`` (the devices the server\n"
               "serves from)."),
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot client_slots[] = {
    {Py_tp_dealloc, client_dealloc},
    {Py_tp_repr, client_repr},
    {Py_mp_subscript, client_subscript},
    {Py_sq_contains, client_contains},
    {Py_tp_methods, client_methods},
    {Py_tp_getset, client_getset},
    {Py_tp_doc,
     (void *)PyDoc_STR(
         "A connection to a Hurray server, made by hurray.connect.\n\n"
         "Its calls block, each one as a whole bounded by the timeout given to connect\n"
         "(and each wait by its idle_timeout), and run with the GIL released; a client\n"
         "makes one call at a time. It is a context manager that closes the connection.\n\n"
         "Examples\n--------\n"
         ">>> with hurray.serve() as server, hurray.connect(server.address) as client:\n"
         "...     client.list()\n"
         "[]\n")},
    {0, NULL},
};

PyType_Spec hurray__py_client_spec = {
    .name = "hurray.Client",
    .basicsize = sizeof(ClientObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = client_slots,
};

static const char *const kConnectNames[] = {"url", "secret", "timeout", "devices", "tls",
                                            "fd_passing", "idle_timeout", "max_tensor_bytes",
                                            NULL};
enum { C_URL, C_SECRET, C_TIMEOUT, C_DEVICES, C_TLS, C_FD_PASSING, C_IDLE, C_MAX_TENSOR,
       C_COUNT };

static PyObject *connect(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                         PyObject *kwnames) {
  static const HurrayPyParser parser = {"connect", kConnectNames, 1, 1, 1};
  PyObject *a[C_COUNT];
  if (hurray__py_parse(&parser, args, nargs, kwnames, a) < 0) return NULL;
  HurrayState *st = PyModule_GetState(module);
  if (!PyUnicode_Check(a[C_URL])) {
    return PyErr_Format(PyExc_TypeError, "connect(): url must be str, not %.200s",
                        Py_TYPE(a[C_URL])->tp_name);
  }
  const char *url = text_arg(st, a[C_URL], "connect(): url");
  if (url == NULL) return NULL;
  HurrayClientOptions options = {0};
  if (timeout_arg(st, a[C_TIMEOUT], "timeout", 0, &options.timeout_ms) < 0 ||
      timeout_arg(st, a[C_IDLE], "idle_timeout", 0, &options.idle_timeout_ms) < 0) {
    return NULL;
  }
  if (a[C_MAX_TENSOR] != NULL && a[C_MAX_TENSOR] != Py_None &&
      hurray__py_u64(st, a[C_MAX_TENSOR], "max_tensor_bytes", &options.max_tensor_bytes) < 0) {
    return NULL;
  }
  int fd_passing = a[C_FD_PASSING] == NULL ? 1 : PyObject_IsTrue(a[C_FD_PASSING]);
  if (fd_passing < 0) return NULL;
  if (!fd_passing) options.flags |= HURRAY_CLIENT_NO_FD_PASSING;
  uint8_t devices[256];
  if (a[C_DEVICES] != NULL && a[C_DEVICES] != Py_None) {
    PyObject *seq = hurray__py_sequence_tuple(a[C_DEVICES], "devices must be a sequence of devices");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n < 1 || n > 256) {
      Py_DECREF(seq);
      return hurray__py_raise(st, HURRAY_PY_EXC_INVALID_ARGUMENT,
                              "devices lists 1 to 256 devices, not %zd", n);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
      uint16_t index = 0;
      if (hurray__py_device_arg(st, PySequence_Fast_GET_ITEM(seq, i), &devices[i], &index) < 0) {
        Py_DECREF(seq);
        return NULL;
      }
    }
    Py_DECREF(seq);
    options.devices = devices;
    options.ndevices = (uint32_t)n;
  }
  TlsArg tls;
  if (tls_arg(st, a[C_TLS], 0, &tls) < 0) return NULL;
  if (tls.given) options.tls = &tls.options;
  Py_buffer secret;
  int have_secret = 0;
  if (secret_arg(a[C_SECRET], &secret, &have_secret) < 0) {
    tls_arg_release(&tls);
    return NULL;
  }
  if (have_secret) {
    options.secret = secret.buf;
    options.secret_len = (size_t)secret.len;
  }
  HurrayClient *client = NULL;
  HurrayError error = {0};
  int status;
  Py_BEGIN_ALLOW_THREADS;
  status = hurray_client_connect(url, &options, &client, &error);
  Py_END_ALLOW_THREADS;
  if (have_secret) PyBuffer_Release(&secret);
  tls_arg_release(&tls);
  if (status != HURRAY_OK) return hurray__py_raise_status(st, status, &error);
  ClientObject *self = PyObject_New(ClientObject, st->client_type);
  if (self == NULL) {
    hurray_client_destroy(client);
    return NULL;
  }
  self->client = client;
  self->address = Py_NewRef(a[C_URL]);
  self->busy = 0;
  return (PyObject *)self;
}

/* ============================================================================================
 * hurray.Server
 * ============================================================================================ */

typedef struct ServerObject {
  PyObject_HEAD HurrayServer *server; /* NULL once stopped */
  pthread_t thread;
  int running;
  PyObject *address;
} ServerObject;

#define SERVER_SELF ((ServerObject *)op)

static void *server_thread(void *arg) {
  hurray_server_run(arg, NULL); /* fails only if epoll itself does */
  return NULL;
}

/* Stops the loop, joins its thread (without the GIL) and destroys the server, which drops its
 * tensors' references (with the GIL). */
static void server_shutdown(ServerObject *self) {
  HurrayServer *server = self->server;
  if (server == NULL) return;
  self->server = NULL;
  if (self->running) {
    pthread_t thread = self->thread;
    Py_BEGIN_ALLOW_THREADS;
    hurray_server_stop(server);
    pthread_join(thread, NULL);
    Py_END_ALLOW_THREADS;
    self->running = 0;
  }
  hurray_server_destroy(server);
}

static void server_dealloc(PyObject *op) {
  PyTypeObject *type = Py_TYPE(op);
  server_shutdown(SERVER_SELF);
  Py_XDECREF(SERVER_SELF->address);
  type->tp_free(op);
  Py_DECREF(type);
}

static PyObject *server_repr(PyObject *op) {
  return PyUnicode_FromFormat("<hurray.Server %R%s>", SERVER_SELF->address,
                              SERVER_SELF->server ? "" : " (stopped)");
}

static PyObject *server_stop(PyObject *op, PyObject *unused) {
  (void)unused;
  server_shutdown(SERVER_SELF);
  Py_RETURN_NONE;
}

static PyObject *server_exit_ctx(PyObject *op, PyObject *const *args, Py_ssize_t nargs) {
  (void)args;
  (void)nargs;
  server_shutdown(SERVER_SELF);
  Py_RETURN_FALSE;
}

static PyObject *server_stats(PyObject *op, PyObject *unused) {
  (void)unused;
  HurrayState *st = hurray__py_state_of(op);
  if (SERVER_SELF->server == NULL) {
    return hurray__py_raise(st, HURRAY_PY_EXC_STATE, "the hurray.Server at %R is stopped",
                            SERVER_SELF->address);
  }
  HurrayServerStats s;
  HurrayError error = {0};
  int status = hurray_server_stats(SERVER_SELF->server, &s, &error);
  if (status != HURRAY_OK) return hurray__py_raise_status(st, status, &error);
  return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K}", "connections",
                       (unsigned long long)s.connections, "accepted",
                       (unsigned long long)s.accepted, "refused", (unsigned long long)s.refused,
                       "requests", (unsigned long long)s.requests, "buffered_bytes",
                       (unsigned long long)s.buffered_bytes, "peak_buffered_bytes",
                       (unsigned long long)s.peak_buffered_bytes, "transfers",
                       (unsigned long long)s.transfers, "sent_bytes",
                       (unsigned long long)s.sent_bytes, "passed_bytes",
                       (unsigned long long)s.passed_bytes);
}

static PyObject *server_get_address(PyObject *op, void *closure) {
  (void)closure;
  return Py_NewRef(SERVER_SELF->address);
}

static PyObject *server_get_running(PyObject *op, void *closure) {
  (void)closure;
  return PyBool_FromLong(SERVER_SELF->server != NULL);
}

static PyMethodDef server_methods[] = {
    {"stop", server_stop, METH_NOARGS,
     PyDoc_STR("stop($self, /)\n--\n\n"
               "Stop serving: close every connection and release the tensors; idempotent.\n\n"
               "Examples\n--------\n"
               ">>> server = hurray.serve()\n"
               ">>> server.stop()\n"
               ">>> server.running\n"
               "False\n")},
    {"stats", server_stats, METH_NOARGS,
     PyDoc_STR("stats($self, /)\n--\n\n"
               "Counters of the running server.\n\n"
               "Returns\n-------\n"
               "dict\n"
               "    ``connections`` open now, ``accepted`` and ``refused`` since it started,\n"
               "    ``requests`` answered, ``buffered_bytes`` / ``peak_buffered_bytes``:\n"
               "    the memory its connections hold, now and at most, ``transfers``: tensor\n"
               "    answers sent in full, and their bytes: ``sent_bytes`` in DATA frames,\n"
               "    ``passed_bytes`` handed over as file descriptors on the same host (each\n"
               "    buffer so passed counts its size).\n\n"
               "Examples\n--------\n"
               ">>> with hurray.serve() as server:\n"
               "...     server.stats()['connections']\n"
               "0\n")},
    {"__enter__", client_enter_ctx, METH_NOARGS, NULL},
    {"__exit__", HURRAY_PY_CFUNC(server_exit_ctx), METH_FASTCALL, NULL},
    {"__reduce__", not_picklable, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef server_getset[] = {
    {"address", server_get_address, NULL,
     PyDoc_STR("The address clients connect to, e.g. ``'127.0.0.1:40123'``."), NULL},
    {"running", server_get_running, NULL, PyDoc_STR("Whether the server is serving."), NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot server_slots[] = {
    {Py_tp_dealloc, server_dealloc},
    {Py_tp_repr, server_repr},
    {Py_tp_methods, server_methods},
    {Py_tp_getset, server_getset},
    {Py_tp_doc,
     (void *)PyDoc_STR(
         "A Hurray server running on a thread of its own, made by hurray.serve.\n\n"
         "It serves until stop() (or the end of a with block, or garbage collection).\n\n"
         "Examples\n--------\n"
         ">>> with hurray.serve() as server:\n"
         "...     server.running\n"
         "True\n")},
    {0, NULL},
};

PyType_Spec hurray__py_server_spec = {
    .name = "hurray.Server",
    .basicsize = sizeof(ServerObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = server_slots,
};

/* Adds one entry of serve()'s first argument: a path, or a mapping of name -> tensor. */
static int serve_add(PyObject *module, HurrayState *st, HurrayServer *server, PyObject *item,
                     int depth) {
  HurrayError error = {0};
  int status = HURRAY_OK;
  if (PyUnicode_Check(item) || PyBytes_Check(item) || PyObject_HasAttrString(item, "__fspath__")) {
    PyObject *path = NULL;
    if (!PyUnicode_FSConverter(item, &path)) return -1;
    const char *cpath = PyBytes_AS_STRING(path);
    Py_BEGIN_ALLOW_THREADS;
    status = hurray_server_add_file(server, cpath, &error);
    Py_END_ALLOW_THREADS;
    Py_DECREF(path);
  } else if (PyMapping_Check(item) && !PySequence_Check(item) &&
             PyObject_HasAttrString(item, "items")) { /* not a Tensor, whose t[...] indexes */
    PyObject *pairs = hurray__py_mapping_pairs(item, "serve");
    if (pairs == NULL) return -1;
    for (Py_ssize_t i = 0; status == HURRAY_OK && i < PyTuple_GET_SIZE(pairs); i++) {
      PyObject *key = PyTuple_GET_ITEM(PyTuple_GET_ITEM(pairs, i), 0);
      PyObject *value = PyTuple_GET_ITEM(PyTuple_GET_ITEM(pairs, i), 1);
      const char *name = PyUnicode_Check(key) ? text_arg(st, key, "serve(): tensor name") : NULL;
      if (name == NULL) {
        if (!PyErr_Occurred()) {
          PyErr_Format(PyExc_TypeError, "serve(): tensor names must be str, not %.200s",
                       Py_TYPE(key)->tp_name);
        }
        Py_DECREF(pairs);
        return -1;
      }
      PyObject *tensor = hurray__py_as_any_tensor(module, st, value, key, "serve");
      HurrayTensorContext *context =
          tensor == NULL || hurray__py_tensor_live(st, (HurrayTensorObject *)tensor) < 0
              ? NULL
              : hurray__py_tensor_share(st, (HurrayTensorObject *)tensor,
                                        ((HurrayTensorObject *)tensor)->desc, -1);
      Py_XDECREF(tensor); /* the context holds its own reference */
      if (context == NULL) {
        Py_DECREF(pairs);
        return -1;
      }
      Py_BEGIN_ALLOW_THREADS; /* hashes the bytes */
      status = hurray_server_add_tensor(server, name, context, &error);
      Py_END_ALLOW_THREADS;
    }
    Py_DECREF(pairs);
  } else if (depth == 0 && (PyList_Check(item) || PyTuple_Check(item))) {
    for (Py_ssize_t i = 0; i < PySequence_Size(item); i++) {
      PyObject *entry = PySequence_GetItem(item, i);
      int r = entry == NULL ? -1 : serve_add(module, st, server, entry, 1);
      Py_XDECREF(entry);
      if (r < 0) return -1;
    }
  } else {
    PyErr_Format(PyExc_TypeError,
                 "serve() takes a path, a mapping of name -> tensor, or a list of them, not "
                 "%.200s",
                 Py_TYPE(item)->tp_name);
    return -1;
  }
  if (status != HURRAY_OK) {
    hurray__py_raise_status(st, status, &error);
    return -1;
  }
  return 0;
}

static const char *const kServeNames[] = {"tensors",         "address",           "uploads",
                                          "secret",          "max_connections",   "idle_timeout",
                                          "handshake_timeout", "max_upload_bytes", "tls",
                                          "fd_passing", "max_upload_total_bytes", "insecure",
                                          "max_connections_per_address", NULL};
enum { S_TENSORS, S_ADDRESS, S_UPLOADS, S_SECRET, S_MAXCONN, S_IDLE, S_HANDSHAKE, S_UPLOAD,
       S_TLS, S_FD_PASSING, S_UPLOAD_TOTAL, S_INSECURE, S_PER_ADDRESS, S_COUNT };

static PyObject *serve(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                       PyObject *kwnames) {
  static const HurrayPyParser parser = {"serve", kServeNames, 1, 2, 0};
  PyObject *a[S_COUNT];
  if (hurray__py_parse(&parser, args, nargs, kwnames, a) < 0) return NULL;
  HurrayState *st = PyModule_GetState(module);
  HurrayServerOptions options = {0};
  if (a[S_ADDRESS] != NULL && a[S_ADDRESS] != Py_None) {
    if (!PyUnicode_Check(a[S_ADDRESS])) {
      return PyErr_Format(PyExc_TypeError, "serve(): address must be str, not %.200s",
                          Py_TYPE(a[S_ADDRESS])->tp_name);
    }
    options.address = text_arg(st, a[S_ADDRESS], "serve(): address");
    if (options.address == NULL) return NULL;
  }
  int uploads = a[S_UPLOADS] == NULL ? 0 : PyObject_IsTrue(a[S_UPLOADS]);
  int insecure = a[S_INSECURE] == NULL ? 0 : PyObject_IsTrue(a[S_INSECURE]);
  if (uploads < 0 || insecure < 0) return NULL;
  if (uploads) options.flags |= HURRAY_SERVER_UPLOADS;
  if (insecure) options.flags |= HURRAY_SERVER_INSECURE;
  int fd_passing = a[S_FD_PASSING] == NULL ? 1 : PyObject_IsTrue(a[S_FD_PASSING]);
  if (fd_passing < 0) return NULL;
  if (!fd_passing) options.flags |= HURRAY_SERVER_NO_FD_PASSING;
  long long max_connections = 0;
  if (a[S_MAXCONN] != NULL && a[S_MAXCONN] != Py_None &&
      hurray__py_int_in_range(st, a[S_MAXCONN], 1, 1 << 20, "max_connections",
                              &max_connections) < 0) {
    return NULL;
  }
  options.max_connections = (uint32_t)max_connections;
  long long per_address = 0;
  if (a[S_PER_ADDRESS] != NULL && a[S_PER_ADDRESS] != Py_None &&
      hurray__py_int_in_range(st, a[S_PER_ADDRESS], 1, 1 << 20, "max_connections_per_address",
                              &per_address) < 0) {
    return NULL;
  }
  options.max_connections_per_address = (uint32_t)per_address;
  if (timeout_arg(st, a[S_IDLE], "idle_timeout", 0, &options.idle_timeout_ms) < 0 ||
      timeout_arg(st, a[S_HANDSHAKE], "handshake_timeout", 0, &options.handshake_timeout_ms) < 0) {
    return NULL;
  }
  if (a[S_UPLOAD] != NULL && a[S_UPLOAD] != Py_None &&
      hurray__py_u64(st, a[S_UPLOAD], "max_upload_bytes", &options.max_upload_bytes) < 0) {
    return NULL;
  }
  if (a[S_UPLOAD_TOTAL] != NULL && a[S_UPLOAD_TOTAL] != Py_None &&
      hurray__py_u64(st, a[S_UPLOAD_TOTAL], "max_upload_total_bytes",
                     &options.max_upload_total_bytes) < 0) {
    return NULL;
  }
  TlsArg tls;
  if (tls_arg(st, a[S_TLS], 1, &tls) < 0) return NULL;
  if (tls.given) options.tls = &tls.options;
  Py_buffer secret;
  int have_secret = 0;
  if (secret_arg(a[S_SECRET], &secret, &have_secret) < 0) {
    tls_arg_release(&tls);
    return NULL;
  }
  if (have_secret) {
    options.secret = secret.buf;
    options.secret_len = (size_t)secret.len;
  }
  HurrayServer *server = NULL;
  HurrayError error = {0};
  int status;
  Py_BEGIN_ALLOW_THREADS; /* reads the certificate and key */
  status = hurray_server_create(&options, &server, &error); /* copies the secret */
  Py_END_ALLOW_THREADS;
  if (have_secret) PyBuffer_Release(&secret);
  tls_arg_release(&tls);
  if (status != HURRAY_OK) return hurray__py_raise_status(st, status, &error);
  ServerObject *self = PyObject_New(ServerObject, st->server_type);
  if (self == NULL) {
    hurray_server_destroy(server);
    return NULL;
  }
  self->server = server;
  self->running = 0;
  self->address = NULL;
  char address[160];
  hurray_server_address(server, address, sizeof address, NULL);
  self->address = PyUnicode_FromString(address);
  if (self->address == NULL ||
      (a[S_TENSORS] != NULL && a[S_TENSORS] != Py_None &&
       serve_add(module, st, server, a[S_TENSORS], 0) < 0)) {
    Py_DECREF(self);
    return NULL;
  }
  if (pthread_create(&self->thread, NULL, server_thread, server) != 0) {
    Py_DECREF(self);
    return hurray__py_raise(st, HURRAY_PY_EXC_IO, "cannot start the server's thread");
  }
  self->running = 1;
  return (PyObject *)self;
}

PyMethodDef hurray__py_wire_functions[] = {
    {"connect", HURRAY_PY_CFUNC(connect), METH_FASTCALL | METH_KEYWORDS,
     PyDoc_STR(
         "connect($module, url, /, *, secret=None, timeout=None, devices=None, tls=None,\n"
         "        fd_passing=True, idle_timeout=None, max_tensor_bytes=None)\n--\n\n"
         "Connect to a Hurray server (docs/spec/interchange.md).\n\n"
         "Parameters\n----------\n"
         "url : str\n"
         "    ``'HOST:PORT'`` or ``'hurray://HOST:PORT'`` with a numeric IPv4 or IPv6\n"
         "    (``'[::1]:7700'``) address or a host name (each of its addresses tried\n"
         "    in the resolver's order, all within ``timeout``), ``'hurrays://HOST:PORT'``\n"
         "    for the same over TLS (the certificate checked for that name), or\n"
         "    ``'unix:PATH'``.\n"
         "secret : str or bytes, optional\n"
         "    The shared secret the server asks for, proved by challenge-response: it\n"
         "    never crosses the wire. A server that does not ask for it is refused.\n"
         "timeout : float, optional\n"
         "    The deadline of every call, in seconds: this connect, and each later\n"
         "    ``list``, ``get``, ``read`` and ``put`` as a whole (connecting, sending,\n"
         "    every wait for the server and the reconnections of `retries` included)\n"
         "    raises hurray.TimedOutError once it has passed. By default a call has\n"
         "    no deadline, but a server that stops sending for `idle_timeout` fails it.\n"
         "devices : sequence of hurray.Device or str, optional\n"
         "    The devices offered in the hello, the only ones besides the CPU that\n"
         "    ``get(device=)`` may ask for and the server may answer on (default:\n"
         "    every named device). A private device must be registered here and on\n"
         "    the server under the same name.\n"
         "tls : dict, optional\n"
         "    For a ``hurrays://`` url: ``{'cafile': path}``, the CA certificates (PEM)\n"
         "    the server's certificate must chain to (default: the system's trust\n"
         "    store), and ``'server_name'``, the name it must carry (default: the url's\n"
         "    host). The server's certificate is always verified. Not for other urls.\n"
         "fd_passing : bool, optional\n"
         "    Over a Unix socket (``'unix:PATH'``), ask the server to hand over each\n"
         "    tensor's memory as a file descriptor, which is mapped (copy-on-write)\n"
         "    instead of copied when nobody can shrink it under the mapping (a sealed\n"
         "    memfd, or a file of a server run by this user); other files are read\n"
         "    into new memory. Every checksum is still checked. Ignored over TCP.\n"
         "idle_timeout : float, optional\n"
         "    Seconds any one wait (connecting, each read and write) may take without\n"
         "    progress (default: `timeout`, or 30 without one).\n"
         "max_tensor_bytes : int, optional\n"
         "    The largest tensor ``get`` receives into memory (default: this machine's\n"
         "    physical memory): a larger one is refused with hurray.LimitError before\n"
         "    anything is allocated for it, whatever the server's header claims.\n\n"
         "Returns\n-------\n"
         "hurray.Client\n"
         "    The connection, set up and authenticated.\n\n"
         "Raises\n------\n"
         "hurray.ConnectionLostError\n"
         "    Nothing listens at `url`, or it closed the connection.\n"
         "hurray.DescriptorError\n"
         "    A device tag one side does not know (the message names it).\n"
         "hurray.UnsupportedError\n"
         "    The server speaks another major protocol version.\n"
         "hurray.AuthenticationError\n"
         "    A wrong or missing secret, or (TLS) a server certificate that does not\n"
         "    verify.\n"
         "hurray.WireError\n"
         "    TLS against a plaintext server, or plaintext against a TLS server.\n"
         "hurray.RequestDeniedError\n"
         "    The server is at its connection limit.\n"
         "hurray.TimedOutError\n"
         "    Not set up within `timeout`, or no progress for `idle_timeout`.\n"
         "hurray.InvalidArgumentError\n"
         "    A bad url, or `tls` for a url that is not ``hurrays://``.\n\n"
         "See Also\n--------\n"
         "serve : The server side.\n\n"
         "Examples\n--------\n"
         ">>> import numpy as np\n"
         ">>> server = hurray.serve({'x': np.float32([1, 2])}, secret='s3cret')\n"
         ">>> with hurray.connect(server.address, secret='s3cret') as client:\n"
         "...     client.get('x').tolist()\n"
         "[1.0, 2.0]\n"
         ">>> server.stop()\n")},
    {"serve", HURRAY_PY_CFUNC(serve), METH_FASTCALL | METH_KEYWORDS,
     PyDoc_STR(
         "serve($module, tensors=None, /, address=None, *, uploads=False, secret=None,\n"
         "      max_connections=None, idle_timeout=None, handshake_timeout=None,\n"
         "      max_upload_bytes=None, tls=None, fd_passing=True,\n"
         "      max_upload_total_bytes=None, insecure=False,\n"
         "      max_connections_per_address=None)\n--\n\n"
         "Serve tensors over the wire from a background thread.\n\n"
         "Parameters\n----------\n"
         "tensors : path, mapping or list, optional\n"
         "    The path of a file the loader reads (every tensor in it is served: a\n"
         "    Hurray file's read through its descriptor, a safetensors, .npy or .npz\n"
         "    file's or a sharded checkpoint's, directory or index, from its mapping), a\n"
         "    mapping of name -> tensor (hurray.Tensor, NumPy array or DLPack producer,\n"
         "    served without a copy: do not change it while served), or a list of\n"
         "    those. A tensor in OpenCL or CUDA memory is served on the CPU and on\n"
         "    its device, read through the device's runtime 1 MiB at a time.\n"
         "address : str, optional\n"
         "    Where to listen: ``'127.0.0.1:0'`` (loopback, a free port) by default;\n"
         "    ``'0.0.0.0:PORT'`` listens beyond the host (it needs ``secret`` or\n"
         "    ``insecure=True``), ``'unix:PATH'`` on a Unix socket.\n"
         "uploads : bool, optional\n"
         "    Accept uploads (``Client.put``). By default a server is read-only: an\n"
         "    upload is refused (hurray.RequestDeniedError on the client).\n"
         "secret : str or bytes, optional\n"
         "    A shared secret every client must prove it knows.\n"
         "max_connections : int, optional\n"
         "    Connections served at once (default 1024); more are refused.\n"
         "idle_timeout : float, optional\n"
         "    Seconds a connection may make no progress (default 60).\n"
         "handshake_timeout : float, optional\n"
         "    Seconds a client has to complete the hello (default 5).\n"
         "max_upload_bytes : int, optional\n"
         "    The largest upload accepted (default 1 GiB).\n"
         "tls : dict, optional\n"
         "    ``{'certfile': path, 'keyfile': path}``: serve over TLS only, with this\n"
         "    certificate chain and key (PEM). The server's ``address`` is then\n"
         "    ``'hurrays://HOST:PORT'``.\n"
         "fd_passing : bool, optional\n"
         "    On a Unix socket, hand clients that ask each tensor's memory as a file\n"
         "    descriptor: a file's tensors as the file's, an in-memory tensor as a\n"
         "    sealed memfd holding a copy made at its first such request.\n"
         "max_upload_total_bytes : int, optional\n"
         "    What all uploads together may hold, served or still arriving, each\n"
         "    counted as its bytes, its header and 1 KiB (default 4 GiB); an upload\n"
         "    over it is refused (hurray.LimitError on the client).\n"
         "insecure : bool, optional\n"
         "    Listen on an address beyond loopback without a ``secret``, serving\n"
         "    anyone who reaches it; without it such an address is refused\n"
         "    (hurray.InvalidArgumentError).\n"
         "max_connections_per_address : int, optional\n"
         "    Connections served at once from one client IP address; more are refused\n"
         "    (hurray.RequestDeniedError on the client). Default: 64 from an address\n"
         "    beyond this host, loopback clients bounded by max_connections alone; a\n"
         "    value given bounds every TCP client, loopback included. Unix-socket clients\n"
         "    are not counted.\n\n"
         "Returns\n-------\n"
         "hurray.Server\n"
         "    The running server; a context manager that stops it.\n\n"
         "Raises\n------\n"
         "hurray.InputOutputError\n"
         "    The address cannot be listened on, or a TLS file cannot be read.\n"
         "hurray.InvalidArgumentError\n"
         "    Two tensors of one name, a TLS key that does not match its certificate,\n"
         "    or an address beyond loopback with neither ``secret`` nor ``insecure``.\n\n"
         "See Also\n--------\n"
         "connect : The client side.\n\n"
         "Examples\n--------\n"
         ">>> import numpy as np\n"
         ">>> hurray.save('weights.hurray', {'w': np.ones((2, 2), np.float32)})\n"
         ">>> with hurray.serve('weights.hurray') as server:\n"
         "...     with hurray.connect(server.address) as client:\n"
         "...         client.get('w').tolist()\n"
         "[[1.0, 1.0], [1.0, 1.0]]\n")},
    {NULL, NULL, 0, NULL},
};
