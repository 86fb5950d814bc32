/* errors.c -- the hurray exception hierarchy and the one mapping from a Hurray C status to a
 * Python exception (docs/impl/python-bindings.md, "Error Handling").
 *
 *   HurrayError(Exception)
 *   ├── BufferError(HurrayError, builtins.BufferError)     consumed capsule, no host access...
 *   ├── UnsupportedError(HurrayError, builtins.BufferError)  HURRAY_EUNSUPPORTED
 *   │   └── ABIError(UnsupportedError)                       HURRAY_EABI
 *   ├── InvalidArgumentError(HurrayError, ValueError)        HURRAY_EINVAL
 *   ├── OutOfMemoryError(HurrayError, MemoryError)           HURRAY_ENOMEM
 *   ├── LimitError(HurrayError, ValueError)                  HURRAY_EOVERFLOW, HURRAY_ELIMIT
 *   ├── DTypeError(HurrayError, TypeError)                   HURRAY_EDTYPE
 *   ├── DescriptorError(HurrayError, ValueError)             HURRAY_EDEVICE, EMEMCLASS, ESYNC,
 *   │                                                        EALIGN
 *   ├── LayoutError(HurrayError, ValueError)                 HURRAY_ELAYOUT, HURRAY_EBOUNDS
 *   ├── FormatError(HurrayError, ValueError)                 HURRAY_EFORMAT
 *   │   └── ChecksumError(FormatError)                       HURRAY_ECHECKSUM
 *   ├── InputOutputError(HurrayError, OSError)               HURRAY_EIO
 *   │   ├── FileNotFoundError(InputOutputError, builtins.FileNotFoundError)    errno ENOENT
 *   │   ├── PermissionError(InputOutputError, builtins.PermissionError)        EACCES, EPERM
 *   │   ├── IsADirectoryError(InputOutputError, builtins.IsADirectoryError)    EISDIR
 *   │   └── NotADirectoryError(InputOutputError, builtins.NotADirectoryError)  ENOTDIR
 *   ├── StateError(HurrayError, RuntimeError)                HURRAY_ESTATE
 *   ├── WireError(HurrayError, ConnectionError)              HURRAY_EPROTOCOL
 *   ├── AuthenticationError(HurrayError, PermissionError)    HURRAY_EAUTH
 *   ├── RequestDeniedError(HurrayError, PermissionError)  HURRAY_EDENIED
 *   ├── TimedOutError(HurrayError, builtins.TimeoutError)    HURRAY_ETIMEOUT
 *   └── ConnectionLostError(HurrayError, ConnectionError)    HURRAY_ECONNECTION
 *
 * and, under InvalidArgumentError, KeyError(InvalidArgumentError, builtins.KeyError): the
 * HURRAY_EINVAL a server answers for a tensor it does not serve (ADR-069); under
 * ConnectionLostError, ConnectionRefusedError(ConnectionLostError, builtins.~): the
 * HURRAY_ECONNECTION of a refused connect, errno ECONNREFUSED.
 *
 * UnsupportedError derives from builtins.BufferError (not from hurray.BufferError) because the
 * DLPack and array API contract is that "this array cannot be exported that way" surfaces as
 * BufferError: a generic DLPack caller that catches BufferError to fall back to another path
 * also catches "DLPack has no form for peer memory" or "int4 has no DLPack dtype". It is not a
 * NotImplementedError: the answer is "not representable", not "not yet written".
 */
#include "hurray_python.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>

typedef struct ExcSpec {
  const char *name;   /* qualified: "hurray.<Name>" */
  int parent;         /* HurrayPyExc of the Hurray parent, or -1 for Exception */
  PyObject **builtin; /* the builtin second base, or NULL */
  const char *doc;
} ExcSpec;

/* Indexed by HurrayPyExc; parents come before their children. */
static const ExcSpec kExcSpecs[HURRAY_PY_EXC_COUNT] = {
    [HURRAY_PY_EXC_ERROR] = {"hurray.HurrayError", -1, NULL,
                             "Base class of every error raised by hurray.\n"
                             "\n"
                             "Instances raised for a hurray-core status carry it as `code` (an "
                             "int of\n"
                             "HURRAY_STATUS_LIST); `code` is None otherwise."},
    [HURRAY_PY_EXC_BUFFER] = {"hurray.BufferError", HURRAY_PY_EXC_ERROR, &PyExc_BufferError,
                              "The memory cannot be shared or reached as asked.\n"
                              "\n"
                              "A consumed or invalid capsule, host access to device memory, a\n"
                              "non-contiguous buffer export, a copy needed where copy=False."},
    [HURRAY_PY_EXC_UNSUPPORTED] = {"hurray.UnsupportedError", HURRAY_PY_EXC_ERROR,
                                   &PyExc_BufferError,
                                   "Valid, but not representable through the protocol asked for.\n"
                                   "\n"
                                   "For example peer memory or int4 through DLPack: the native "
                                   "protocol\n"
                                   "(hurray.from_hurray) carries them. A builtins.BufferError, as "
                                   "DLPack\n"
                                   "callers expect."},
    [HURRAY_PY_EXC_ABI] = {"hurray.ABIError", HURRAY_PY_EXC_UNSUPPORTED, NULL,
                           "A producer built against another hurray-ffi or DLPack ABI version."},
    [HURRAY_PY_EXC_INVALID_ARGUMENT] = {"hurray.InvalidArgumentError", HURRAY_PY_EXC_ERROR,
                                        &PyExc_ValueError, "An argument has an invalid value."},
    [HURRAY_PY_EXC_OUT_OF_MEMORY] = {"hurray.OutOfMemoryError", HURRAY_PY_EXC_ERROR,
                                     &PyExc_MemoryError, "hurray-core could not allocate."},
    [HURRAY_PY_EXC_LIMIT] = {"hurray.LimitError", HURRAY_PY_EXC_ERROR, &PyExc_ValueError,
                             "A limit is exceeded or a size does not fit in 64 bits."},
    [HURRAY_PY_EXC_DTYPE] = {"hurray.DTypeError", HURRAY_PY_EXC_ERROR, &PyExc_TypeError,
                             "An unknown or invalid dtype."},
    [HURRAY_PY_EXC_DESCRIPTOR] = {"hurray.DescriptorError", HURRAY_PY_EXC_ERROR, &PyExc_ValueError,
                                  "An invalid buffer descriptor field.\n"
                                  "\n"
                                  "Device tag, memory class, sync mode or alignment."},
    [HURRAY_PY_EXC_LAYOUT] = {"hurray.LayoutError", HURRAY_PY_EXC_ERROR, &PyExc_ValueError,
                              "A tensor's layout does not fit its buffers.\n"
                              "\n"
                              "Shape, strides, byte offset or byte count do not describe a valid\n"
                              "tensor over its buffers."},
    [HURRAY_PY_EXC_FORMAT] = {"hurray.FormatError", HURRAY_PY_EXC_ERROR, &PyExc_ValueError,
                              "Malformed encoded bytes."},
    [HURRAY_PY_EXC_CHECKSUM] = {"hurray.ChecksumError", HURRAY_PY_EXC_FORMAT, NULL,
                                "A checksum does not match the bytes it covers."},
    [HURRAY_PY_EXC_IO] = {"hurray.InputOutputError", HURRAY_PY_EXC_ERROR, &PyExc_OSError,
                          "An input/output operation failed."},
    [HURRAY_PY_EXC_STATE] = {"hurray.StateError", HURRAY_PY_EXC_ERROR, &PyExc_RuntimeError,
                             "An object is in the wrong state for the operation."},
    [HURRAY_PY_EXC_WIRE] = {"hurray.WireError", HURRAY_PY_EXC_ERROR, &PyExc_ConnectionError,
                                "The peer broke the wire protocol, or is not a Hurray peer.\n"
                                "\n"
                                "See docs/spec/interchange.md."},
    [HURRAY_PY_EXC_AUTH] = {"hurray.AuthenticationError", HURRAY_PY_EXC_ERROR,
                            &PyExc_PermissionError,
                            "A wrong or missing shared secret.\n"
                            "\n"
                            "Or a server that cannot prove it knows the secret."},
    [HURRAY_PY_EXC_DENIED] = {"hurray.RequestDeniedError", HURRAY_PY_EXC_ERROR,
                              &PyExc_PermissionError,
                              "The server refused: an upload to a read-only server, or its "
                              "connection limit."},
    [HURRAY_PY_EXC_TIMEOUT] = {"hurray.TimedOutError", HURRAY_PY_EXC_ERROR, &PyExc_TimeoutError,
                               "A network operation made no progress within its timeout."},
    [HURRAY_PY_EXC_CONNECTION] = {"hurray.ConnectionLostError", HURRAY_PY_EXC_ERROR,
                                  &PyExc_ConnectionError,
                                  "The connection was refused, reset or closed by the peer.\n"
                                  "\n"
                                  "Nothing partial was delivered."},
    [HURRAY_PY_EXC_FILE_NOT_FOUND] = {"hurray.FileNotFoundError", HURRAY_PY_EXC_IO,
                                      &PyExc_FileNotFoundError,
                                      "The file (or a directory on its path) does not exist."},
    [HURRAY_PY_EXC_PERMISSION] = {"hurray.PermissionError", HURRAY_PY_EXC_IO,
                                  &PyExc_PermissionError,
                                  "The file or its directory may not be read or written."},
    [HURRAY_PY_EXC_IS_A_DIRECTORY] = {"hurray.IsADirectoryError", HURRAY_PY_EXC_IO,
                                      &PyExc_IsADirectoryError,
                                      "A directory is where a file was expected."},
    [HURRAY_PY_EXC_NOT_A_DIRECTORY] = {"hurray.NotADirectoryError", HURRAY_PY_EXC_IO,
                                       &PyExc_NotADirectoryError,
                                       "A component of the path is not a directory."},
    [HURRAY_PY_EXC_KEY] = {"hurray.KeyError", HURRAY_PY_EXC_INVALID_ARGUMENT, &PyExc_KeyError,
                           "The server serves no tensor of that name.\n"
                           "\n"
                           "An InvalidArgumentError (a ValueError), and a KeyError as a missing\n"
                           "key of a hurray.File is."},
    [HURRAY_PY_EXC_CONNECTION_REFUSED] = {"hurray.ConnectionRefusedError",
                                          HURRAY_PY_EXC_CONNECTION,
                                          &PyExc_ConnectionRefusedError,
                                          "Nothing listens at the address (ECONNREFUSED).\n"
                                          "\n"
                                          "A ConnectionLostError, and a ConnectionRefusedError as "
                                          "a socket's is."},
};

/* The table: every status of HURRAY_STATUS_LIST maps to exactly one class. A switch over the
 * enum without a default, so -Wswitch (in -Wall) flags a status added to the list but not
 * here. */
HurrayPyExc hurray__py_exc_for_status(int status) {
  switch ((HurrayStatus)status) {
    case HURRAY_OK: /* not an error; callers never raise it */
      return HURRAY_PY_EXC_ERROR;
    case HURRAY_EINVAL:
      return HURRAY_PY_EXC_INVALID_ARGUMENT;
    case HURRAY_ENOMEM:
      return HURRAY_PY_EXC_OUT_OF_MEMORY;
    case HURRAY_EOVERFLOW:
    case HURRAY_ELIMIT:
      return HURRAY_PY_EXC_LIMIT;
    case HURRAY_EDTYPE:
      return HURRAY_PY_EXC_DTYPE;
    case HURRAY_EDEVICE:
    case HURRAY_EMEMCLASS:
    case HURRAY_ESYNC:
    case HURRAY_EALIGN:
      return HURRAY_PY_EXC_DESCRIPTOR;
    case HURRAY_ELAYOUT:
    case HURRAY_EBOUNDS:
      return HURRAY_PY_EXC_LAYOUT;
    case HURRAY_EABI:
      return HURRAY_PY_EXC_ABI;
    case HURRAY_EUNSUPPORTED:
      return HURRAY_PY_EXC_UNSUPPORTED;
    case HURRAY_EFORMAT:
      return HURRAY_PY_EXC_FORMAT;
    case HURRAY_EIO:
      return HURRAY_PY_EXC_IO;
    case HURRAY_ESTATE:
      return HURRAY_PY_EXC_STATE;
    case HURRAY_ECHECKSUM:
      return HURRAY_PY_EXC_CHECKSUM;
    case HURRAY_EPROTOCOL:
      return HURRAY_PY_EXC_WIRE;
    case HURRAY_EAUTH:
      return HURRAY_PY_EXC_AUTH;
    case HURRAY_EDENIED:
      return HURRAY_PY_EXC_DENIED;
    case HURRAY_ETIMEOUT:
      return HURRAY_PY_EXC_TIMEOUT;
    case HURRAY_ECONNECTION:
      return HURRAY_PY_EXC_CONNECTION;
  }
  return HURRAY_PY_EXC_ERROR; /* a status newer than this extension */
}

int hurray__py_errors_init(PyObject *module, HurrayState *st) {
  for (int i = 0; i < HURRAY_PY_EXC_COUNT; i++) {
    const ExcSpec *spec = &kExcSpecs[i];
    PyObject *parent = spec->parent < 0 ? PyExc_Exception : st->exceptions[spec->parent];
    PyObject *bases =
        spec->builtin == NULL ? PyTuple_Pack(1, parent) : PyTuple_Pack(2, parent, *spec->builtin);
    if (bases == NULL) return -1;
    PyObject *dict = NULL;
    if (i == HURRAY_PY_EXC_ERROR || i == HURRAY_PY_EXC_KEY) {
      /* KeyError's str() is the repr of its argument: a message reads better as it is. */
      PyObject *str = i == HURRAY_PY_EXC_KEY
                          ? PyObject_GetAttrString(PyExc_BaseException, "__str__")
                          : NULL;
      dict = i == HURRAY_PY_EXC_ERROR ? Py_BuildValue("{sO}", "code", Py_None)
             : str == NULL            ? NULL
                                      : Py_BuildValue("{sO}", "__str__", str);
      Py_XDECREF(str);
      if (dict == NULL) {
        Py_DECREF(bases);
        return -1;
      }
    }
    st->exceptions[i] = PyErr_NewExceptionWithDoc(spec->name, spec->doc, bases, dict);
    Py_DECREF(bases);
    Py_XDECREF(dict);
    if (st->exceptions[i] == NULL) return -1;
    if (PyModule_AddObjectRef(module, strchr(spec->name, '.') + 1, st->exceptions[i]) < 0) {
      return -1;
    }
  }
  return 0;
}

/* Raises `exc` (stolen; NULL when making it failed) with `.code` set unless `code` < 0. */
static PyObject *raise_instance(PyObject *exc, int code) {
  if (exc == NULL) return NULL;
  if (code >= 0) {
    PyObject *value = PyLong_FromLong(code);
    int failed = value == NULL || PyObject_SetAttrString(exc, "code", value) < 0;
    Py_XDECREF(value);
    if (failed) {
      Py_DECREF(exc);
      return NULL;
    }
  }
  PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
  Py_DECREF(exc);
  return NULL;
}

/* Raises `kind` with `message` (stolen) and, when `code` is not negative, `.code`. */
static PyObject *raise_message(HurrayState *st, HurrayPyExc kind, int code, PyObject *message) {
  if (message == NULL) return NULL;
  PyObject *exc = PyObject_CallOneArg(st->exceptions[kind], message);
  Py_DECREF(message);
  return raise_instance(exc, code);
}

/* The InputOutputError class for a system errno (ADR-038). */
static HurrayPyExc io_class(int system_errno) {
  switch (system_errno) {
    case ENOENT:
      return HURRAY_PY_EXC_FILE_NOT_FOUND;
    case EACCES:
    case EPERM:
      return HURRAY_PY_EXC_PERMISSION;
    case EISDIR:
      return HURRAY_PY_EXC_IS_A_DIRECTORY;
    case ENOTDIR:
      return HURRAY_PY_EXC_NOT_A_DIRECTORY;
    default:
      return HURRAY_PY_EXC_IO;
  }
}

/* `error`'s message as a str, or the generic message of `status` when it has none. */
static PyObject *status_message(int status, const HurrayError *error) {
  const char *text =
      error != NULL && error->message[0] != '\0' ? error->message : hurray_status_message(status);
  size_t length = strnlen(text, HURRAY_ERROR_MESSAGE_SIZE);
  return PyUnicode_DecodeUTF8(text, (Py_ssize_t)length, "replace");
}

PyObject *hurray__py_raise_path(HurrayState *st, int status, const HurrayError *error,
                                PyObject *filename, PyObject *filename2) {
  PyObject *message = status_message(status, error);
  int system_errno = error != NULL ? error->system_errno : 0;
  HurrayPyExc kind;
  if (status == HURRAY_EIO && system_errno != 0) {
    kind = io_class(system_errno);
  } else if (status == HURRAY_ECONNECTION && system_errno == ECONNREFUSED) {
    kind = HURRAY_PY_EXC_CONNECTION_REFUSED;
  } else {
    return raise_message(st, hurray__py_exc_for_status(status), status, message);
  }
  if (message == NULL) return NULL;
  /* OSError(errno, strerror, filename, winerror, filename2): the attributes Python code reads. */
  PyObject *exc = PyObject_CallFunction(st->exceptions[kind], "iNOOO",
                                        system_errno, message, filename ? filename : Py_None,
                                        Py_None, filename2 ? filename2 : Py_None);
  return raise_instance(exc, status);
}

PyObject *hurray__py_raise_status(HurrayState *st, int status, const HurrayError *error) {
  return hurray__py_raise_path(st, status, error, NULL, NULL);
}

PyObject *hurray__py_raise_status_as(HurrayState *st, HurrayPyExc kind, int status,
                                     const HurrayError *error) {
  return raise_message(st, kind, status, status_message(status, error));
}

PyObject *hurray__py_raise_statusf(HurrayState *st, int status, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  PyObject *message = PyUnicode_FromFormatV(fmt, args);
  va_end(args);
  return raise_message(st, hurray__py_exc_for_status(status), status, message);
}

PyObject *hurray__py_raise(HurrayState *st, HurrayPyExc kind, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  PyObject *message = PyUnicode_FromFormatV(fmt, args);
  va_end(args);
  return raise_message(st, kind, -1, message);
}

/* ---- private helpers for the tests: the status table as Python sees it ------------------- */

static int status_arg(PyObject *arg, int *status) {
  int overflow = 0;
  long value = PyLong_AsLongAndOverflow(arg, &overflow);
  if (value == -1 && PyErr_Occurred()) return -1;
  if (overflow != 0 || value <= HURRAY_OK || value > INT32_MAX ||
      strcmp(hurray_status_name((int)value), "HURRAY_UNKNOWN_STATUS") == 0) {
    PyErr_Format(PyExc_ValueError, "%R is not an error status of HURRAY_STATUS_LIST", arg);
    return -1;
  }
  *status = (int)value;
  return 0;
}

static PyObject *exception_for_status(PyObject *module, PyObject *arg) {
  int status = 0;
  if (status_arg(arg, &status) < 0) return NULL;
  HurrayState *st = PyModule_GetState(module);
  return Py_NewRef(st->exceptions[hurray__py_exc_for_status(status)]);
}

static PyObject *raise_status(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 2) {
    return PyErr_Format(PyExc_TypeError, "_raise_status() takes 2 arguments (%zd given)", nargs);
  }
  int status = 0;
  if (status_arg(args[0], &status) < 0) return NULL;
  if (!PyUnicode_Check(args[1])) {
    return PyErr_Format(PyExc_TypeError, "message must be str, not %.200s",
                        Py_TYPE(args[1])->tp_name);
  }
  const char *text = PyUnicode_AsUTF8(args[1]);
  if (text == NULL) return NULL;
  HurrayError error = {.code = status};
  strncpy(error.message, text, sizeof error.message - 1);
  return hurray__py_raise_status(PyModule_GetState(module), status, &error);
}

static PyObject *status_names(PyObject *module, PyObject *unused) {
  (void)module;
  (void)unused;
  PyObject *names = PyDict_New();
  if (names == NULL) return NULL;
#define HURRAY_X_NAME(name, value, message)                                            \
  {                                                                                    \
    PyObject *key = PyLong_FromLong(value);                                            \
    int failed = key == NULL || PyDict_SetItemString(names, "HURRAY_" #name, key) < 0; \
    Py_XDECREF(key);                                                                   \
    if (failed) {                                                                      \
      Py_DECREF(names);                                                                \
      return NULL;                                                                     \
    }                                                                                  \
  }
  HURRAY_STATUS_LIST(HURRAY_X_NAME)
#undef HURRAY_X_NAME
  return names;
}

PyMethodDef hurray__py_error_functions[] = {
    {"_exception_for_status", exception_for_status, METH_O,
     PyDoc_STR("_exception_for_status($module, status, /)\n--\n\n"
               "The exception class a hurray-core status maps to (private, for tests).")},
    {"_raise_status", HURRAY_PY_CFUNC(raise_status), METH_FASTCALL,
     PyDoc_STR("_raise_status($module, status, message, /)\n--\n\n"
               "Raises the exception of a status as a failing C call would (private).")},
    {"_status_codes", status_names, METH_NOARGS,
     PyDoc_STR("_status_codes($module, /)\n--\n\n"
               "{name: code} of the HURRAY_STATUS_LIST this extension was compiled with.")},
    {NULL, NULL, 0, NULL},
};
