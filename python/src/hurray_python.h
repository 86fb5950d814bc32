/* hurray_python.h -- private header of the hurray._hurray extension (hurray-python).
 *
 * The extension is one module, hurray._hurray, written over hurray-ffi (include/hurray/hurray.h)
 * and, of the static core's internals, only its array geometry (src/core/geometry.h) and its
 * DLPack exchange (src/core/dlpack.h), which C callers reach through the public
 * hurray_tensor_to_dlpack / hurray_tensor_from_dlpack. Its sources are split by concern:
 *
 *   module.c   module definition (PEP 489 multi-phase init), module state, argument parsing
 *   errors.c   the exception hierarchy and the one Hurray status -> exception mapping
 *   modes.c    compliance modes (ADR-022): strict / relaxed, hurray.mode, array API admission
 *   dtype.c    hurray.dtype: one immutable singleton per entry of the C dtype table
 *   device.c   hurray.Device and the parsing of device / memory class / sync mode arguments
 *   tensor.c   hurray.Tensor's core: owner references, construction primitives, lifetime,
 *              properties, __array_namespace__, repr and the type
 *   tensor_new.c  the constructors over described memory: Tensor(), from_address, from_parts
 *   tensor_host.c host reads: tobytes(), tolist() and C-order copies
 *   array_object.c  the array API array object's slots, merged into the Tensor type, which
 *              forward to hurray.array_api._operators and _indexing
 *   array_dispatch.c  the per-call dispatch of the array object's binary operators in C
 *   numpy.c    __array__ and hurray.from_numpy
 *   stream.c   the stream rules of DLPack, shared by __dlpack__ and __hurray__
 *   dlpack.c   __dlpack__, __dlpack_device__ and hurray.from_dlpack, over hurray-core's DLPack
 *              exchange (src/core/dlpack.h: the mapping, refusals and checks, ADR-083), and
 *              __jax_array__ over them (hurray._jax, ADR-087)
 *   native.c   the native interchange protocol (Layer 8c): __hurray__ and hurray.from_hurray
 *   file.c     the file container (Layer 8b): hurray.save, load, open, File and convert
 *   device_memory.c  Tensor.to_device: host <-> device copies through the device runtimes
 *   quant.c    hurray.dequantize and hurray.quantize over the core's kernels (ADR-085)
 *
 * There are no static PyObject globals: every Python object the extension keeps lives in the
 * module state (HurrayState), reached from a type with PyType_GetModuleState. Cross-file
 * symbols are named hurray__py_* and have hidden visibility (the static core's hurray__*
 * internals and the public hurray_* ABI are not exported from the module either: see
 * python/CMakeLists.txt).
 */
#ifndef HURRAY_PYTHON_H
#define HURRAY_PYTHON_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "geometry.h"
#include "hurray/hurray.h"

#if PY_VERSION_HEX < 0x030B0000
#error "hurray-python needs CPython 3.11 or newer"
#endif

/* Py_IsFinalizing became public API in 3.13; 3.11 and 3.12 spell it _Py_IsFinalizing. */
#if PY_VERSION_HEX >= 0x030D0000
#define HURRAY_PY_FINALIZING() Py_IsFinalizing()
#else
#define HURRAY_PY_FINALIZING() _Py_IsFinalizing()
#endif

/* A METH_FASTCALL / METH_FASTCALL | METH_KEYWORDS function as the PyCFunction a PyMethodDef
 * holds, without -Wcast-function-type noise. */
#define HURRAY_PY_CFUNC(f) ((PyCFunction)(void (*)(void))(f))

/* Keeps the exception in flight (if any) across code that may run Python and clear it:
 * owner releases and DLPack deleters run from destructors. */
typedef struct HurrayPySavedError {
#if PY_VERSION_HEX >= 0x030C0000
  PyObject *exc;
#else
  PyObject *type, *value, *traceback;
#endif
} HurrayPySavedError;

/* Usually there is none: 3.11 then fetches and restores nothing (a PyErr_Fetch and a
 * PyErr_Restore of nothing cost some 50 instructions, on every DLPack release). */
static inline void hurray__py_error_save(HurrayPySavedError *saved) {
#if PY_VERSION_HEX >= 0x030C0000
  saved->exc = PyErr_GetRaisedException();
#else
  saved->type = saved->value = saved->traceback = NULL;
  if (PyErr_Occurred()) PyErr_Fetch(&saved->type, &saved->value, &saved->traceback);
#endif
}

static inline void hurray__py_error_restore(HurrayPySavedError *saved) {
  if (PyErr_Occurred()) PyErr_WriteUnraisable(NULL); /* the release itself failed */
#if PY_VERSION_HEX >= 0x030C0000
  PyErr_SetRaisedException(saved->exc);
#else
  if (saved->type != NULL) PyErr_Restore(saved->type, saved->value, saved->traceback);
#endif
}

/* progress= (progress.c): `fn` NULL when there is none to call. A call reports
 * `before` + done of `total` (or of the callee's total when `total` is 0), so a function that
 * makes several core calls reports one run from 0 to its total. */
typedef struct HurrayPyProgress {
  PyObject *fn; /* strong */
  int failed;
  HurrayPySavedError error;
  uint64_t before, total;
} HurrayPyProgress;

/* progress= as given: None/False none, True a bar on a terminal's stderr, else a callable.
 * -1 with TypeError. */
int hurray__py_progress_arg(PyObject *obj, HurrayPyProgress *p);
/* A HurrayFileProgressFn (and the client's): takes the GIL, calls fn(before + done, total). */
void hurray__py_progress_call(void *context, uint64_t done, uint64_t total);
/* Drops fn; -1 with the callable's exception restored if it raised, else 0. */
int hurray__py_progress_end(HurrayPyProgress *p);

/* Whether the calling thread holds the GIL, from its thread state alone: cheap, unlike
 * PyGILState_Ensure/Release, and unlike PyGILState_Check never "yes" for a thread that does not
 * hold it (on 3.11 it answers 1 to everyone once a subinterpreter exists). On 3.11 the thread
 * state asked for is the GIL holder's, whichever thread that is, hence the thread id. */
static inline int hurray__py_gil_held(void) {
#if PY_VERSION_HEX >= 0x030D0000
  PyThreadState *tstate = PyThreadState_GetUnchecked();
#else
  PyThreadState *tstate = _PyThreadState_UncheckedGet();
#endif
  return tstate != NULL && tstate->thread_id == PyThread_get_thread_ident();
}

/* The GIL for code that may run on any thread, with or without it (owner releases, DLPack
 * deleters): taken with PyGILState_Ensure only where this thread does not hold it already.
 * Give the result to hurray__py_gil_release. */
typedef struct HurrayPyGil {
  int taken;
  PyGILState_STATE state;
} HurrayPyGil;

static inline HurrayPyGil hurray__py_gil_ensure(void) {
  HurrayPyGil gil = {0, PyGILState_LOCKED};
  if (!hurray__py_gil_held()) {
    gil.taken = 1;
    gil.state = PyGILState_Ensure();
  }
  return gil;
}

static inline void hurray__py_gil_release(HurrayPyGil gil) {
  if (gil.taken) PyGILState_Release(gil.state);
}

/* Drops a reference while an error is set, and returns NULL: what a consumer does with a
 * capsule it rejects. The capsule's destructor (which releases a capsule still under its
 * original name) may run Python, so it runs with the error put aside, and the error raised
 * stays the one in flight. */
static inline PyObject *hurray__py_drop_and_fail(PyObject *object) {
  HurrayPySavedError saved;
  hurray__py_error_save(&saved);
  Py_DECREF(object);
  hurray__py_error_restore(&saved);
  return NULL;
}

/* Copies at least this large are made with the GIL released. */
#define HURRAY_PY_NOGIL_COPY_BYTES ((uint64_t)1 << 16)

/* ============================================================================================
 * Exceptions (errors.c)
 * ============================================================================================ */

typedef enum HurrayPyExc {
  HURRAY_PY_EXC_ERROR = 0,        /* HurrayError(Exception): the base */
  HURRAY_PY_EXC_BUFFER,           /* BufferError(HurrayError, builtins.BufferError) */
  HURRAY_PY_EXC_UNSUPPORTED,      /* UnsupportedError(HurrayError, builtins.BufferError) */
  HURRAY_PY_EXC_ABI,              /* ABIError(UnsupportedError) */
  HURRAY_PY_EXC_INVALID_ARGUMENT, /* InvalidArgumentError(HurrayError, ValueError) */
  HURRAY_PY_EXC_OUT_OF_MEMORY,    /* OutOfMemoryError(HurrayError, MemoryError) */
  HURRAY_PY_EXC_LIMIT,            /* LimitError(HurrayError, ValueError) */
  HURRAY_PY_EXC_DTYPE,            /* DTypeError(HurrayError, TypeError) */
  HURRAY_PY_EXC_DESCRIPTOR,       /* DescriptorError(HurrayError, ValueError) */
  HURRAY_PY_EXC_LAYOUT,           /* LayoutError(HurrayError, ValueError) */
  HURRAY_PY_EXC_FORMAT,           /* FormatError(HurrayError, ValueError) */
  HURRAY_PY_EXC_CHECKSUM,         /* ChecksumError(FormatError) */
  HURRAY_PY_EXC_IO,               /* InputOutputError(HurrayError, OSError) */
  HURRAY_PY_EXC_STATE,            /* StateError(HurrayError, RuntimeError) */
  HURRAY_PY_EXC_WIRE,         /* WireError(HurrayError, ConnectionError) */
  HURRAY_PY_EXC_AUTH,             /* AuthenticationError(HurrayError, PermissionError) */
  HURRAY_PY_EXC_DENIED,           /* RequestDeniedError(HurrayError, PermissionError) */
  HURRAY_PY_EXC_TIMEOUT,          /* TimedOutError(HurrayError, builtins.TimeoutError) */
  HURRAY_PY_EXC_CONNECTION,       /* ConnectionLostError(HurrayError, ConnectionError) */
  /* HURRAY_EIO of a failed system call, by errno (ADR-038): also the builtin OSError subclass */
  HURRAY_PY_EXC_FILE_NOT_FOUND,   /* FileNotFoundError(InputOutputError, builtins.~) */
  HURRAY_PY_EXC_PERMISSION,       /* PermissionError(InputOutputError, builtins.~) */
  HURRAY_PY_EXC_IS_A_DIRECTORY,   /* IsADirectoryError(InputOutputError, builtins.~) */
  HURRAY_PY_EXC_NOT_A_DIRECTORY,  /* NotADirectoryError(InputOutputError, builtins.~) */
  /* HURRAY_EINVAL "no tensor named ..." from a server (ADR-069): also a builtins.KeyError */
  HURRAY_PY_EXC_KEY,              /* KeyError(InvalidArgumentError, builtins.KeyError) */
  /* HURRAY_ECONNECTION of a connect the peer's host refused (ECONNREFUSED) */
  HURRAY_PY_EXC_CONNECTION_REFUSED, /* ConnectionRefusedError(ConnectionLostError, builtins.~) */
  HURRAY_PY_EXC_COUNT
} HurrayPyExc;

/* ============================================================================================
 * Module state (module.c)
 * ============================================================================================ */

typedef enum HurrayPyMode { HURRAY_PY_MODE_STRICT = 0, HURRAY_PY_MODE_RELAXED = 1 } HurrayPyMode;

#define HURRAY_PY_NO_DTYPE 0xFF

/* The keywords of __dlpack__, in its order (dlpack.c), as HurrayState.dlpack_keywords.names
 * indexes them. */
enum {
  HURRAY_PY_DL_STREAM,
  HURRAY_PY_DL_MAX_VERSION,
  HURRAY_PY_DL_DL_DEVICE,
  HURRAY_PY_DL_COPY,
  HURRAY_PY_DL_NAMES
};

/* The most parameters a parser given HurrayPyKeywords may have. */
#define HURRAY_PY_MAX_KEYWORDS 8

/* Keyword matching for a hot entry point, kept in the module state: the parser's names as
 * interned strings, which keywords passed as those very objects (Python code's, NumPy's and
 * PyTorch's DLPack calls) match by identity; and the keyword tuple parsed last, with where its
 * names went -- a C caller passes the same tuple object on every call, which is then not
 * matched again (hurray__py_parse_keywords). */
typedef struct HurrayPyKeywords {
  PyObject *names[HURRAY_PY_MAX_KEYWORDS]; /* interned: names[i] is the parser's names[i] */
  PyObject *last;         /* the keyword tuple parsed last (a strong reference), or NULL */
  Py_ssize_t last_nargs;  /* with this many positional arguments */
  int8_t last_found[HURRAY_PY_MAX_KEYWORDS]; /* the parameter of each of its names */
} HurrayPyKeywords;

typedef struct HurrayState {
  PyTypeObject *dtype_type;
  PyTypeObject *device_type;
  PyTypeObject *tensor_type;
  PyTypeObject *mode_type;      /* hurray.mode, the context manager */
  PyTypeObject *host_span_type; /* private: the byte exporter behind __array__ */
  PyTypeObject *file_type;      /* hurray.File, made by hurray.open */
  PyTypeObject *client_type;    /* hurray.Client, made by hurray.connect */
  PyTypeObject *server_type;    /* hurray.Server, made by hurray.serve */
  PyObject *exceptions[HURRAY_PY_EXC_COUNT];
  PyObject *dtypes;              /* tuple of the dtype singletons, in C table order */
  uint8_t dtype_index[256];      /* dtype code -> index into `dtypes`, or HURRAY_PY_NO_DTYPE */
  PyObject *mode_var;            /* contextvars.ContextVar set by `with hurray.mode(...)` */
  PyObject *mode_names[2];       /* "strict", "relaxed" (indexed by HurrayPyMode) */
  int default_mode;              /* HurrayPyMode: set_mode() and HURRAY_MODE */
  /* What the buffer handle and descriptor of every Tensor over one CPU buffer start from
   * (tensor.c). Copied from here, at run time: GCC builds a struct of this size from an
   * initializer by zeroing it with `rep stos`, whose start-up cost a Tensor's creation would
   * otherwise pay twice. */
  HurrayBuffer inline_buffer;
  HurrayTensorDesc inline_desc;
  PyObject *array_api;           /* the namespace module, imported on first use */
  PyObject *array_ops;           /* tuple: the array object's Python functions (array_object.c) */
  PyObject *numpy;               /* numpy, imported on first use */
  PyObject *ml_dtypes;           /* ml_dtypes on first use; Py_None when it is not installed */
  PyObject *numpy_dtypes;        /* list: numpy dtype per C table index, or None (lazy) */
  Py_ssize_t numpy_dtype_last;   /* the index numpy.c's lookup found last (tried first) */
  PyObject *numpy_ndarray;       /* numpy.ndarray, with `numpy` */
  int ndarray_layout;            /* 1: ndarray instances have the layout numpy.c reads (probed) */
  PyObject *numpy_asarray;       /* numpy.asarray, with `numpy` */
  PyObject *ufuncs;              /* tuple: the ufuncs of the operators (array_dispatch.c, lazy) */
  PyObject *str_array_namespace; /* interned "__array_namespace__" */
  PyObject *str_dlpack;          /* interned "__dlpack__" */
  PyObject *str_dlpack_device;   /* interned "__dlpack_device__" */
  HurrayPyKeywords dlpack_keywords; /* __dlpack__'s, in HURRAY_PY_DL_* order */
  PyObject *dl_max_version; /* (1, 1): the DLPack version from_dlpack reads */
  PyObject *dl_max_version_seen; /* the max_version tuple __dlpack__ read last, or NULL */
  long long dl_max_major_seen;   /* its major version */
  PyObject *dl_kwnames;     /* ("max_version",): the keywords of from_dlpack's usual call */
  PyObject *str_hurray;     /* interned "__hurray__" */
} HurrayState;

/* The state of the module that defines `type` (one of the extension's own final types). */
static inline HurrayState *hurray__py_state_of_type(PyTypeObject *type) {
  return (HurrayState *)PyType_GetModuleState(type);
}
static inline HurrayState *hurray__py_state_of(PyObject *self) {
  return hurray__py_state_of_type(Py_TYPE(self));
}

/* Fast-call argument parsing shared by the hot entry points. `names` lists every parameter in
 * order (NULL-terminated); the first `posonly` are positional-only, at most `maxpos` may be
 * passed by position (the rest are keyword-only) and the first `required` must be given.
 * `out[i]` receives a borrowed reference, or NULL for a parameter not passed. */
typedef struct HurrayPyParser {
  const char *fname;
  const char *const *names;
  int posonly;
  int maxpos;
  int required;
} HurrayPyParser;

int hurray__py_parse(const HurrayPyParser *parser, PyObject *const *args, Py_ssize_t nargs,
                     PyObject *kwnames, PyObject **out);

/* hurray__py_parse, with `keywords` (at most HURRAY_PY_MAX_KEYWORDS parameters): a keyword
 * tuple parsed before with as many positional arguments takes the places found then; any other
 * is matched by identity with the interned names, then by comparison, and remembered. */
int hurray__py_parse_keywords(const HurrayPyParser *parser, HurrayPyKeywords *keywords,
                              PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                              PyObject **out);

/* Integers from Python objects with __index__: TypeError for anything else, and
 * hurray.InvalidArgumentError (a ValueError) naming `what` for a value out of range. An int in
 * range is read in place; everything else takes hurray__py_int_in_range_full. */
int hurray__py_int_in_range_full(HurrayState *st, PyObject *obj, long long lo, long long hi,
                                 const char *what, long long *out);
static inline int hurray__py_int_in_range(HurrayState *st, PyObject *obj, long long lo,
                                          long long hi, const char *what, long long *out) {
  if (PyLong_CheckExact(obj)) {
    int overflow = 0;
    long long value = PyLong_AsLongLongAndOverflow(obj, &overflow); /* cannot fail */
    if (overflow == 0 && value >= lo && value <= hi) {
      *out = value;
      return 0;
    }
  }
  return hurray__py_int_in_range_full(st, obj, lo, hi, what, out);
}
int hurray__py_i64(HurrayState *st, PyObject *obj, const char *what, int64_t *out);
int hurray__py_u64(HurrayState *st, PyObject *obj, const char *what, uint64_t *out);

/* The items of a sequence argument as a tuple of its own, or NULL with TypeError `message`.
 * What is read from it stays alive and in place while its items are converted, even when that
 * runs Python code (__index__, __bool__, ...) that mutates the caller's list: the items may
 * then be kept as borrowed references. */
PyObject *hurray__py_sequence_tuple(PyObject *obj, const char *message);

/* The items of a mapping argument (PyMapping_Items) as a tuple of (key, value) 2-tuples of its
 * own, or NULL with TypeError naming `fname`. A mapping's items() may be overridden (a dict
 * subclass) to give anything, or a list it keeps and changes later: every pair is checked, and
 * stays alive and in place while Python code runs, before one is read. */
PyObject *hurray__py_mapping_pairs(PyObject *obj, const char *fname);

/* After a failed call of obj.<method>(...) made on a consumer's behalf: an AttributeError from
 * an object that has no such method becomes the TypeError the protocols specify ("`fname`()
 * needs an object with <method>"); any other error is left as it is. Returns NULL. */
PyObject *hurray__py_protocol_missing(PyObject *obj, PyObject *method, const char *fname);

/* ============================================================================================
 * errors.c
 * ============================================================================================ */

int hurray__py_errors_init(PyObject *module, HurrayState *st);
/* The class a Hurray status maps to (exactly one per status). */
HurrayPyExc hurray__py_exc_for_status(int status);
/* Raises the exception of `status` with `error`'s message (the generic message of the status
 * when `error` is NULL or empty); the instance carries `.code`. Returns NULL. */
PyObject *hurray__py_raise_status(HurrayState *st, int status, const HurrayError *error);
/* hurray__py_raise_status for a call on files: an error with a system errno is raised as an
 * OSError carrying it (FileNotFoundError, PermissionError, ... where one fits) and the file
 * names (`filename2` may be NULL, as may both). */
PyObject *hurray__py_raise_path(HurrayState *st, int status, const HurrayError *error,
                                PyObject *filename, PyObject *filename2);
/* hurray__py_raise_status as one of the extension's classes, `kind`, rather than the status'. */
PyObject *hurray__py_raise_status_as(HurrayState *st, HurrayPyExc kind, int status,
                                     const HurrayError *error);
/* The same with a formatted message (PyUnicode_FromFormat syntax). */
PyObject *hurray__py_raise_statusf(HurrayState *st, int status, const char *fmt, ...);
/* Raises one of the extension's classes with a formatted message; `.code` is None. */
PyObject *hurray__py_raise(HurrayState *st, HurrayPyExc kind, const char *fmt, ...);

extern PyMethodDef hurray__py_error_functions[];

/* ============================================================================================
 * modes.c
 * ============================================================================================ */

int hurray__py_modes_init(PyObject *module, HurrayState *st);
/* The mode in force in the current context (HurrayPyMode), or -1 with an exception. */
int hurray__py_mode(HurrayState *st);
/* Whether the array API namespace admits `dtype` in the current mode: Tier 1 always, Tier 2
 * and Tier 3 only in relaxed mode. 1 yes, 0 no, -1 error. The one rule behind both mode gates
 * (namespace functions and __array_namespace__ visibility). */
int hurray__py_array_api_admits(HurrayState *st, const HurrayDTypeInfo *dtype);

extern PyType_Spec hurray__py_mode_spec;
extern PyMethodDef hurray__py_mode_functions[];

/* ============================================================================================
 * dtype.c
 * ============================================================================================ */

typedef struct HurrayDTypeObject {
  PyObject_HEAD const HurrayDTypeInfo *info; /* static storage in hurray-core */
} HurrayDTypeObject;

extern PyType_Spec hurray__py_dtype_spec;
/* Creates the singletons, hurray.dtype.<name> and the module-level Tier 1 names. */
int hurray__py_dtypes_init(PyObject *module, HurrayState *st);
/* (tensor.c) Fills the state's inline_buffer and inline_desc. */
void hurray__py_tensor_templates_init(HurrayState *st);
/* Borrowed singleton of `code`; NULL (no exception set) for a code Hurray does not know. */
PyObject *hurray__py_dtype_object(HurrayState *st, int code);
/* A decoded metadata tree (depth at most HURRAY_META_MAX_DEPTH) as Python objects: dict, list,
 * str, int, float, bool, None. */
PyObject *hurray__py_meta_to_py(const HurrayMetaValue *value);
/* A hurray.dtype or its name -> the table entry; NULL with DTypeError/TypeError. */
const HurrayDTypeInfo *hurray__py_dtype_arg(HurrayState *st, PyObject *obj);

/* ============================================================================================
 * device.c
 * ============================================================================================ */

typedef struct HurrayDeviceObject {
  PyObject_HEAD uint16_t index;
  uint8_t tag;
} HurrayDeviceObject;

extern PyType_Spec hurray__py_device_spec;
extern PyMethodDef hurray__py_device_functions[];
PyObject *hurray__py_device_new(HurrayState *st, int tag, int index);
/* hurray.Device, (tag or name, index), tag int or name str -> (tag, index). -1 on error. */
int hurray__py_device_arg(HurrayState *st, PyObject *obj, uint8_t *tag, uint16_t *index);
/* A small enumeration of hurray-core given by name or number (`names(i)` is NULL for an
 * unknown value): the error is `status`'s, naming `what`. */
int hurray__py_enum_arg(HurrayState *st, PyObject *obj, const char *(*names)(int), int status,
                        const char *what, uint8_t *out);
/* "device" | "host" | "unified" | "peer" or the int -> HurrayMemoryClass. */
int hurray__py_memory_class_arg(HurrayState *st, PyObject *obj, uint8_t *out);
/* "ready" | "stream" | "event" | "timeline" or the int -> HurraySyncMode. */
int hurray__py_sync_mode_arg(HurrayState *st, PyObject *obj, uint8_t *out);

/* ============================================================================================
 * tensor.c
 * ============================================================================================ */

/* Dimensions a Tensor over one CPU buffer keeps inside the object (HurrayPyInline). */
#define HURRAY_PY_INLINE_NDIM 4

/* The context of a dense tensor over one CPU buffer, stored inside the Tensor object: the
 * context, its one-entry buffer list, the buffer handle, the descriptor and its array, and
 * their shape and strides. What hurray_tensor_context_create would allocate in three blocks
 * (handle, list, context with its descriptor copy) costs no allocation here; the context is
 * the same HurrayTensorContext, checked by the same hurray_tensor_context_check, and its
 * release (which releases the owner) frees nothing. */
typedef struct HurrayPyInline {
  HurrayTensorContext context;
  HurrayBufferList list;
  HurrayBuffer *handle; /* list.buffers: &buffer */
  uint8_t role;         /* list.roles: HURRAY_ROLE_VALUES */
  HurrayBuffer buffer;
  HurrayTensorDesc desc;
  HurrayArray array;
  int64_t dims[2 * HURRAY_PY_INLINE_NDIM]; /* shape, then strides */
} HurrayPyInline;

/* A hurray.Tensor is one HurrayTensorContext -- the kind the native capsule protocol hands
 * across -- plus a cached view of its descriptor. The context owns the buffers, a copy of the
 * descriptor and the owner reference that keeps the memory alive; a dense tensor over one CPU
 * buffer of at most HURRAY_PY_INLINE_NDIM dimensions keeps its context in `storage`, any
 * other one on the heap. */
typedef struct HurrayTensorObject {
  PyObject_HEAD HurrayTensorContext *context; /* NULL only after tp_clear broke a reference cycle */
  const HurrayTensorDesc *desc;               /* context->tensor */
  Py_ssize_t exports; /* live Python buffer exports (memoryview, __array__) */
  PyObject *weakreflist;
  /* The NumPy array whose data, shape, strides and dtype are exactly the tensor's, which the
   * array API engine computes on without building a view (hurray__py_tensor_ndarray): the
   * owner itself (borrowed through it) for from_numpy; for a basic subscript answered in C
   * (view_key set) the owner's view that key selects, made at the first need and owned here.
   * NULL otherwise. */
  PyObject *ndarray;
  /* For a tensor made in C by a basic subscript of the NumPy array that is its owner
   * (hurray__py_ndarray_subscript): the key, kept to make `ndarray` when it is first asked
   * for. NULL otherwise. */
  PyObject *view_key;
  /* The typed buffer export (buffer.c), made at the first one and kept: a tensor's
   * descriptor and memory never change, so later exports only check the consumer's flags. */
  struct HurrayPyExport *export;
  HurrayPyInline storage;
} HurrayTensorObject;

/* Frees a tensor's kept export (tensor_dealloc). */
void hurray__py_tensor_export_free(HurrayTensorObject *self);

extern PyType_Spec hurray__py_tensor_spec;

/* The Tensor core's spec plus the array API array object's slots, methods and properties
 * (array_object.c), in storage of its own; NULL with SystemError if they do not fit. */
PyType_Spec *hurray__py_array_object_spec(const PyType_Spec *core);
/* 1 when `name` (a str) is one of the NumPy and PyTorch methods the array object has not,
 * whose property raises AttributeError naming the array API route (array_object.c). */
int hurray__py_tensor_attribute_absent(PyObject *name);

/* The array object's operations: each Python function a slot of the Tensor type forwards to
 * (array_object.c), as X(NAME, MODULE, name): MODULE says which module of hurray.array_api
 * defines it (OPERATORS: _operators.py, INDEXING: _indexing.py), `name` is its name there. */
#define HURRAY_PY_ARRAY_OPS(X)                                                                   \
  X(ADD, OPERATORS, "__add__") X(RADD, OPERATORS, "__radd__")                                   \
  X(IADD, OPERATORS, "__iadd__") X(SUB, OPERATORS, "__sub__")                                   \
  X(RSUB, OPERATORS, "__rsub__") X(ISUB, OPERATORS, "__isub__")                                 \
  X(MUL, OPERATORS, "__mul__") X(RMUL, OPERATORS, "__rmul__")                                   \
  X(IMUL, OPERATORS, "__imul__") X(TRUEDIV, OPERATORS, "__truediv__")                           \
  X(RTRUEDIV, OPERATORS, "__rtruediv__") X(ITRUEDIV, OPERATORS, "__itruediv__")                 \
  X(FLOORDIV, OPERATORS, "__floordiv__") X(RFLOORDIV, OPERATORS, "__rfloordiv__")               \
  X(IFLOORDIV, OPERATORS, "__ifloordiv__") X(MOD, OPERATORS, "__mod__")                         \
  X(RMOD, OPERATORS, "__rmod__") X(IMOD, OPERATORS, "__imod__")                                 \
  X(POW, OPERATORS, "__pow__") X(RPOW, OPERATORS, "__rpow__")                                   \
  X(IPOW, OPERATORS, "__ipow__") X(MATMUL, OPERATORS, "__matmul__")                             \
  X(RMATMUL, OPERATORS, "__rmatmul__") X(IMATMUL, OPERATORS, "__imatmul__")                     \
  X(AND, OPERATORS, "__and__") X(RAND, OPERATORS, "__rand__")                                   \
  X(IAND, OPERATORS, "__iand__") X(OR, OPERATORS, "__or__")                                     \
  X(ROR, OPERATORS, "__ror__") X(IOR, OPERATORS, "__ior__")                                     \
  X(XOR, OPERATORS, "__xor__") X(RXOR, OPERATORS, "__rxor__")                                   \
  X(IXOR, OPERATORS, "__ixor__") X(LSHIFT, OPERATORS, "__lshift__")                             \
  X(RLSHIFT, OPERATORS, "__rlshift__") X(ILSHIFT, OPERATORS, "__ilshift__")                     \
  X(RSHIFT, OPERATORS, "__rshift__") X(RRSHIFT, OPERATORS, "__rrshift__")                       \
  X(IRSHIFT, OPERATORS, "__irshift__") X(NEG, OPERATORS, "__neg__")                             \
  X(POS, OPERATORS, "__pos__") X(ABS, OPERATORS, "__abs__")                                     \
  X(INVERT, OPERATORS, "__invert__") X(BOOL, OPERATORS, "__bool__")                             \
  X(INT, OPERATORS, "__int__") X(FLOAT, OPERATORS, "__float__")                                 \
  X(INDEX, OPERATORS, "__index__") X(COMPLEX, OPERATORS, "__complex__")                         \
  X(CONTAINS, OPERATORS, "__contains__") X(FORMAT, OPERATORS, "__format__")                     \
  X(LT, OPERATORS, "__lt__") X(LE, OPERATORS, "__le__") X(EQ, OPERATORS, "__eq__")              \
  X(NE, OPERATORS, "__ne__") X(GT, OPERATORS, "__gt__") X(GE, OPERATORS, "__ge__")              \
  X(GETITEM, INDEXING, "__getitem__") X(SETITEM, INDEXING, "__setitem__")                       \
  X(ITER, INDEXING, "__iter__") X(LEN, INDEXING, "__len__") X(MT, INDEXING, "mT")               \
  X(T, INDEXING, "T")
#define HURRAY_PY_AS_OP(name, module, str) HURRAY_PY_OP_##name,
enum { HURRAY_PY_ARRAY_OPS(HURRAY_PY_AS_OP) HURRAY_PY_OP_COUNT };
#undef HURRAY_PY_AS_OP

/* array_dispatch.c: the per-call dispatch of binary operators in C (ADR-059). */
/* Reads the UFUNCS table of hurray.array_api._operators (the module `operators`) into
 * st->ufuncs; -1 with an exception. */
int hurray__py_array_dispatch_load(HurrayState *st, PyObject *operators);
/* `self` <op> `other` computed in C, with *done set, where that is exactly what the Python
 * operator does; else NULL without an exception and *done 0. Before the table is loaded,
 * nothing applies. */
PyObject *hurray__py_array_dispatch(HurrayState *st, int op, PyObject *self, PyObject *other,
                                    int *done);
/* self[key] computed in C where that is exactly what the Python __getitem__ does (an int,
 * slice or tuple of them on a tensor over its own ndarray), with *done set; else NULL without
 * an exception and *done 0. */
PyObject *hurray__py_array_getitem(HurrayState *st, PyObject *self, PyObject *key, int *done);

/* file_source.c: the reader of what hurray.load and hurray.open read -- a path (str,
 * os.PathLike, or bytes without a NUL), the bytes of a file (any buffer exporter), or a binary
 * file object -- opened with `flags`. `*display` (a new reference) names it in errors and repr:
 * the path, the file object's name, or "<N bytes>". NULL with an exception set. */
HurrayFileReader *hurray__py_file_open(HurrayState *st, PyObject *source, uint32_t flags,
                                       PyObject **display);

/* Owner references: what keeps the memory of a context alive. Two kinds, each with its
 * HurrayOwnerReleaseFn; both releases take the GIL themselves (PyGILState_Ensure), keep any
 * exception in flight, and do nothing once the interpreter is finalising. A Tensor's own
 * context is released with the GIL held, through GIL-held twins (tensor.c).
 *  - an object: the owner is the PyObject * itself, a strong reference the caller made
 *    (Py_NewRef), dropped by hurray__py_owner_release_object;
 *  - a held buffer export: hurray__py_owner_new_view moves a Py_buffer into a small block
 *    (NULL + exception), released by hurray__py_owner_release_view (PyBuffer_Release). */
void hurray__py_owner_release_object(void *object);
void *hurray__py_owner_new_view(Py_buffer *view);
void hurray__py_owner_release_view(void *owner);
/* (dlpack.c) The twin, for a caller that holds the GIL, of the owner release of an imported
 * DLPack managed tensor; NULL when `release` is not one. */
HurrayOwnerReleaseFn hurray__py_dl_import_release_held(HurrayOwnerReleaseFn release);

/* A new Tensor over a one-buffer DENSE tensor: `buffer` holds the bytes, `array` addresses
 * them (array->buffer must be 0). SINK for `buffer` and for `owner` (owner_release(owner) is
 * called on failure). The descriptor is copied and validated by hurray_tensor_context_create. */
PyObject *hurray__py_tensor_wrap(HurrayState *st, HurrayBuffer *buffer, const HurrayArray *array,
                                 uint32_t flags, void *owner, HurrayOwnerReleaseFn owner_release);
/* Where a region of memory lives and how it is synchronised (the fields of its HurrayBuffer). */
typedef struct HurrayPyMemory {
  uint8_t tag;
  uint8_t memory_class;
  uint8_t sync_mode;
  uint16_t device_id;
  uint16_t peer_device_id;
  void *sync_handle;
  uint64_t sync_value;
  int readonly;
  /* The owner can never lead back to the tensor (bytes, a NumPy array of numbers, a DLPack
   * import): the tensor is then not tracked by the garbage collector, as NumPy's arrays are
   * not. 0 (tracked) whenever that is not certain. */
  int acyclic;
} HurrayPyMemory;

/* A new Tensor over `size` bytes at `data`, addressed by `array` (byte_offset relative to
 * `data`). On an address-form device an address that is not 64-byte aligned is wrapped rounded
 * down, the difference added to byte_offset and size (ADR-008): the bytes before `data` are
 * never touched, and every byte the array addresses must lie in [data, data + size) (a
 * hurray.LayoutError naming those bounds otherwise). SINK for `owner`. */
PyObject *hurray__py_tensor_from_memory(HurrayState *st, void *data, uint64_t size,
                                        const HurrayPyMemory *memory, const HurrayArray *array,
                                        void *owner, HurrayOwnerReleaseFn owner_release);

/* hurray__py_tensor_from_memory for an array its caller has already checked as
 * hurray_array_span does (shape, dtype, reserved bytes, offsets without overflow), with every
 * byte it addresses in [data, data + size): from_dlpack, whose import check (the core's dlpack.c)
 * guarantees that, and from_numpy for all but extreme arrays (numpy.c, tensor_over). Nothing is
 * checked twice. */
PyObject *hurray__py_tensor_from_checked(HurrayState *st, void *data, uint64_t size,
                                         const HurrayPyMemory *memory, const HurrayArray *array,
                                         void *owner, HurrayOwnerReleaseFn owner_release);

/* A new Tensor owning `context` (SINK: released on failure). The native capsule protocol's
 * consumer ends here too. */
PyObject *hurray__py_tensor_adopt(HurrayState *st, HurrayTensorContext *context);

/* Appends to `list` a new handle over `buffer`'s memory: the same data, descriptor, flags and
 * sync state, and no release of its own (the memory stays with whoever owns `buffer`). Handles
 * are not refcounted, so every context that shares memory gets handles of its own. */
int hurray__py_share_buffer(HurrayBufferList *list, const HurrayBuffer *buffer, int role,
                            HurrayError *error);

/* A new context over the memory of the live tensor `self`, described by `desc` -- self's own
 * descriptor (the native protocol's producer) or one of its parts or children (views) -- with
 * an owner reference to `self`. `only` < 0 shares every buffer of self, in order (`desc`
 * indexes self's list); otherwise only buffer `only`, which `desc`'s one array indexes as 0.
 * NULL with an exception on failure. */
HurrayTensorContext *hurray__py_tensor_share(HurrayState *st, HurrayTensorObject *self,
                                             const HurrayTensorDesc *desc, int64_t only);

/* (tensor_host.c) A new tensor holding a C-order, contiguous, writable copy of a CPU tensor's
 * elements in memory from hurray_buffer_alloc (the GIL is released for large copies).
 * `operation` names the caller in errors. */
PyObject *hurray__py_tensor_copy(HurrayState *st, HurrayTensorObject *self, const char *operation);

/* 0 for a live tensor; -1 with StateError for one tp_clear released (a broken cycle). */
int hurray__py_tensor_live(HurrayState *st, HurrayTensorObject *self);
/* The first part of a live tensor (the values of a DENSE one), or NULL with an exception
 * (cleared, or a COMPOSITE tensor, which has no parts of its own). */
const HurrayArray *hurray__py_tensor_values(HurrayState *st, HurrayTensorObject *self);
static inline HurrayBuffer *hurray__py_tensor_buffer(HurrayTensorObject *self,
                                                     const HurrayArray *array) {
  return self->context->buffers->buffers[array->buffer];
}
static inline int hurray__py_tensor_readonly(HurrayTensorObject *self) {
  return (self->context->flags & HURRAY_BUFFER_READ_ONLY) != 0;
}

/* Bytes of a DENSE CPU tensor, as the host may read them. */
typedef struct HurrayHostView {
  const HurrayArray *array;
  const HurrayDTypeInfo *dtype;
  HurrayBuffer *buffer;
  uint64_t begin, end; /* the bytes the array addresses, relative to buffer->data */
  int readonly;
} HurrayHostView;

/* Fills `view` or raises naming `operation`: hurray.BufferError for memory the host may not
 * read (another device), hurray.UnsupportedError for a layout other than DENSE. */
int hurray__py_tensor_host_view(HurrayState *st, HurrayTensorObject *self, const char *operation,
                                HurrayHostView *view);
/* The address of no bytes, never NULL: NumPy answers a buffer at NULL with an allocation of
 * its own (writable, whatever the exporter said), so an empty buffer is exported here. */
extern char hurray__py_no_bytes[1];
/* The address of byte `offset` of a buffer; for an empty buffer whose data is NULL,
 * hurray__py_no_bytes. */
static inline char *hurray__py_buffer_at(const HurrayBuffer *buffer, uint64_t offset) {
  if (buffer->data == NULL) return hurray__py_no_bytes;
  return (char *)((uintptr_t)buffer->data + (uintptr_t)offset);
}
/* ============================================================================================
 * tensor_new.c: constructors over memory the caller describes
 * ============================================================================================ */

extern const char hurray__py_tensor_doc[];
PyObject *hurray__py_tensor_new(PyTypeObject *type, PyObject *args, PyObject *kwargs);
/* The same constructor as the type's vectorcall (set at module creation): no argument tuple
 * or dict is built for Tensor(...). */
PyObject *hurray__py_tensor_vectorcall(PyObject *type, PyObject *const *args, size_t nargsf,
                                       PyObject *kwnames);
extern const char hurray__py_tensor_from_address_doc[];
PyObject *hurray__py_tensor_from_address(PyObject *cls, PyObject *const *args, Py_ssize_t nargs,
                                         PyObject *kwnames);
extern const char hurray__py_tensor_from_parts_doc[];
PyObject *hurray__py_tensor_from_parts(PyObject *cls, PyObject *const *args, Py_ssize_t nargs,
                                       PyObject *kwnames);

/* ============================================================================================
 * tensor_host.c: host reads
 * ============================================================================================ */

extern const char hurray__py_tensor_tobytes_doc[];
PyObject *hurray__py_tensor_tobytes(PyObject *op, PyObject *unused);
extern const char hurray__py_tensor_tolist_doc[];
PyObject *hurray__py_tensor_tolist(PyObject *op, PyObject *unused);
/* Whether tolist() gives `dtype`'s elements as Python scalars: Tier 1, and the whole-byte
 * Tier 2 floats (float16, bfloat16, the float8 formats, complex32), widened exactly. */
int hurray__py_dtype_has_scalars(const HurrayDTypeInfo *dtype);

/* ============================================================================================
 * buffer.c: the Python buffer protocol (typed or bytes, ADR-042) and Tensor.bytes_view()
 * ============================================================================================ */

int hurray__py_tensor_getbuffer(PyObject *op, Py_buffer *view, int flags);
void hurray__py_tensor_releasebuffer(PyObject *op, Py_buffer *view);
extern const char hurray__py_tensor_bytes_view_doc[];
PyObject *hurray__py_tensor_bytes_view(PyObject *op, PyObject *unused);

/* ============================================================================================
 * pickle.c: Tensor.__reduce_ex__ (ADR-043)
 * ============================================================================================ */

extern const char hurray__py_tensor_reduce_ex_doc[];
PyObject *hurray__py_tensor_reduce_ex(PyObject *op, PyObject *protocol);

/* ============================================================================================
 * numpy.c
 * ============================================================================================ */

extern PyType_Spec hurray__py_host_span_spec;
/* A private exporter of `length` bytes at `data` (format "B", one dimension) that keeps the
 * CPU tensor `tensor` alive and counts as one of its exports. */
PyObject *hurray__py_host_span_new(HurrayState *st, PyObject *tensor, char *data,
                                   Py_ssize_t length, int readonly);
extern PyMethodDef hurray__py_numpy_functions[];
/* numpy (borrowed), imported on first use; NULL with ImportError. */
PyObject *hurray__py_numpy(HurrayState *st);
/* The NumPy dtype of a Hurray dtype (a new reference; cached), or NULL with UnsupportedError
 * naming the route where NumPy has none: packed sub-byte dtypes, complex32, Tier 2 floats
 * without ml_dtypes. The one mapping, behind __array__ and dtype.__numpy_dtype__. */
PyObject *hurray__py_numpy_dtype(HurrayState *st, const HurrayDTypeInfo *info);
/* The NumPy array the tensor was made from (from_numpy), or the view its subscript key
 * selects of the array it was subscripted from (made now if not yet), borrowed, when it still
 * is exactly the tensor (data, shape, strides, dtype, writability); else NULL, no exception. */
PyObject *hurray__py_tensor_source_ndarray(HurrayTensorObject *self);
/* Drops the tensor's `ndarray` and `view_key` (tp_clear, tp_dealloc). */
void hurray__py_tensor_forget_ndarray(HurrayTensorObject *self);
/* The view NumPy's basic indexing gives of the ndarray `arr` (exact type, a dtype of the
 * standard) for `key` -- an int, a slice of ints and Nones, or a tuple of those, at most one
 * per axis -- as a new Tensor that owns a reference to `arr` and makes that NumPy view only
 * when asked for it (view_key). NULL without an exception for any other key, or an index NumPy
 * would refuse (the caller's general path raises NumPy's error); NULL with an exception when
 * making the tensor failed. */
PyObject *hurray__py_ndarray_subscript(HurrayState *st, PyObject *arr, PyObject *key);
/* The key NumPy is given for an array API key of ints and slices (a new reference, or NULL with
 * an exception): an int or a tuple gains a trailing Ellipsis, so that a full index gives a
 * 0-d view rather than a scalar; any other key is itself. */
PyObject *hurray__py_view_key(PyObject *key);
/* The array the engine computes on for a CPU tensor (a new reference): that source array, or
 * else a new view of the tensor's memory (__array__). */
PyObject *hurray__py_tensor_ndarray(HurrayState *st, HurrayTensorObject *self);
/* A new Tensor over the NumPy array `arr` (from_numpy): SINK for `arr`, which may also be any
 * result of a NumPy function (a NumPy scalar becomes a 0-d array). */
PyObject *hurray__py_wrap_result(HurrayState *st, PyObject *arr);
extern const char hurray__py_tensor_array_doc[];
PyObject *hurray__py_tensor_array(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames);

/* ============================================================================================
 * stream.c
 * ============================================================================================ */

/* The one rule of the `stream` argument of __dlpack__ and __hurray__ (DLPack's, ADR-023 §6,
 * ADR-054), for one buffer: `stream` (NULL or None when not passed) must be valid for the
 * buffer's device -- CUDA None/1/2/pointer/-1 (never 0), ROCm None/0/pointer/-1 (never 1 or
 * 2), the CPU None only, every other device None or -1 -- else hurray.InvalidArgumentError (a
 * ValueError); and the bytes must be safe on that stream (None: the legacy default stream,
 * 0x1, of CUDA and ROCm): READY, ordered on that very stream, or stream=-1 (0), or made ready
 * by waiting on the host through the device runtime (1: hand the buffer over as READY), else
 * hurray.BufferError (-1). */
int hurray__py_stream_check(HurrayState *st, PyObject *stream, const HurrayBuffer *buffer);

/* ============================================================================================
 * dlpack.c
 * ============================================================================================ */

extern PyMethodDef hurray__py_dlpack_functions[];
extern const char hurray__py_tensor_dlpack_doc[];
extern const char hurray__py_tensor_dlpack_device_doc[];
PyObject *hurray__py_tensor_dlpack(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames);
PyObject *hurray__py_tensor_dlpack_device(PyObject *self, PyObject *unused);
extern const char hurray__py_tensor_jax_array_doc[];
PyObject *hurray__py_tensor_jax_array(PyObject *self, PyObject *unused);

/* ============================================================================================
 * native.c
 * ============================================================================================ */

extern PyMethodDef hurray__py_native_functions[];
extern const char hurray__py_tensor_hurray_doc[];
PyObject *hurray__py_tensor_hurray(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames);

/* ============================================================================================
 * file.c
 * ============================================================================================ */

extern PyType_Spec hurray__py_file_spec;
/* Registers hurray.File as a collections.abc.Mapping (it implements the whole interface). */
int hurray__py_file_register(PyTypeObject *file_type);
extern PyMethodDef hurray__py_file_functions[];
/* `obj` as a hurray.Tensor in host memory (a new reference): a Tensor as it is, a NumPy array
 * through from_numpy (which keeps read-only arrays and ml_dtypes' types), any other DLPack
 * producer (PyTorch, JAX, ...) through from_dlpack, without copying; a tensor on a device is
 * copied to the host (Tensor.to_device('cpu')). `operation` ("save") and `name` (the
 * tensor's) name it in the TypeError for anything else. */
PyObject *hurray__py_as_tensor(PyObject *module, HurrayState *st, PyObject *obj, PyObject *name,
                               const char *operation);
/* The same without the copy to the host: a tensor on a device stays there (hurray.serve). */
PyObject *hurray__py_as_any_tensor(PyObject *module, HurrayState *st, PyObject *obj,
                                   PyObject *name, const char *operation);

/* ============================================================================================
 * wire.c: hurray.connect, hurray.serve, hurray.Client, hurray.Server
 * ============================================================================================ */

extern PyType_Spec hurray__py_client_spec;
extern PyType_Spec hurray__py_server_spec;
extern PyMethodDef hurray__py_wire_functions[];

/* ============================================================================================
 * quant.c: hurray.dequantize, hurray.quantize (ADR-085)
 * ============================================================================================ */

extern PyMethodDef hurray__py_quant_functions[];

/* ============================================================================================
 * device_memory.c
 * ============================================================================================ */

extern const char hurray__py_tensor_to_device_doc[];
PyObject *hurray__py_tensor_to_device(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                      PyObject *kwnames);

#endif /* HURRAY_PYTHON_H */
