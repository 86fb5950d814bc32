/* buffer.c -- the Python buffer protocol of hurray.Tensor and its explicit byte view (ADR-042).
 *
 * The buffer protocol is typed (ADR-072). A consumer that asks for the format (PyBUF_FORMAT) --
 * memoryview(t), NumPy (np.asarray, np.array: a memoryview first), bytes(t), bytearray(t) --
 * gets the tensor's own dtype, shape and byte strides (any sign), for the dtypes PEP 3118 can
 * spell: Tier 1 and float16. The others -- bfloat16, the float8/6/4 types, complex32, the
 * packed sub-byte integers -- have no format, and are refused with hurray.BufferError naming
 * the routes that keep the dtype, never read as uint8. NumPy takes such a refusal as "no
 * buffer" and goes on to __array__, which gives bfloat16 and the float8 types through ml_dtypes.
 *
 * A consumer that asks for no format reads plain bytes (PEP 3118). hashlib and file.write
 * treat them as bytes, but torch.asarray groups them by its default dtype (float32): a
 * tensor's numbers silently became others. Such requests are refused with hurray.BufferError
 * naming the routes: t.bytes_view() for the bytes, torch.as_tensor or torch.from_dlpack,
 * np.asarray.
 *
 * Tensor.bytes_view() is the explicit byte view: a memoryview of format "B" over the bytes
 * tobytes() returns, for every dtype, C-contiguous tensors only.
 *
 * A packed sub-byte tensor with an odd element count shares its last byte with bits that
 * belong to no element. The byte view must show them zero (tobytes() zeroes them); memory that
 * holds other bits there is viewed through a read-only zero-padded copy, never written.
 */
#include "hurray_python.h"

#include <string.h>

char hurray__py_no_bytes[1];

/* The PEP 3118 (struct module) format of a dtype, in native byte order, or NULL. */
static const char *pep3118_format(int code) {
  switch (code) {
    case HURRAY_DTYPE_BOOL:
      return "?";
    case HURRAY_DTYPE_INT8:
      return "b";
    case HURRAY_DTYPE_INT16:
      return "h";
    case HURRAY_DTYPE_INT32:
      return "i";
    case HURRAY_DTYPE_INT64:
      return "q";
    case HURRAY_DTYPE_UINT8:
      return "B";
    case HURRAY_DTYPE_UINT16:
      return "H";
    case HURRAY_DTYPE_UINT32:
      return "I";
    case HURRAY_DTYPE_UINT64:
      return "Q";
    case HURRAY_DTYPE_FLOAT16:
      return "e";
    case HURRAY_DTYPE_FLOAT32:
      return "f";
    case HURRAY_DTYPE_FLOAT64:
      return "d";
    case HURRAY_DTYPE_COMPLEX64:
      return "Zf";
    case HURRAY_DTYPE_COMPLEX128:
      return "Zd";
    default:
      return NULL;
  }
}

static int refuse_read_only(HurrayState *st, int readonly, int flags) {
  if ((flags & PyBUF_WRITABLE) == PyBUF_WRITABLE && readonly) {
    hurray__py_raise(st, HURRAY_PY_EXC_BUFFER, "the tensor is read-only");
    return -1;
  }
  return 0;
}

/* The bytes a byte consumer sees, in host->begin .. host->end of a C-contiguous CPU tensor.
 * *copy is NULL, or a zero-padded bytes copy of a packed tensor whose last byte holds non-zero
 * bits past its last element. */
static int byte_span(HurrayState *st, HurrayTensorObject *self, const char *operation,
                     HurrayHostView *host, PyObject **copy) {
  *copy = NULL;
  if (hurray__py_tensor_host_view(st, self, operation, host) < 0) return -1;
  if (!hurray__array_is_c_contiguous(host->array)) {
    hurray__py_raise(st, HURRAY_PY_EXC_BUFFER,
                     "%s gives the bytes of C-contiguous tensors only; tobytes() copies this one "
                     "in C order, memoryview(t) and np.asarray(t) read it typed",
                     operation);
    return -1;
  }
  if (host->end - host->begin > PY_SSIZE_T_MAX) {
    hurray__py_raise_statusf(st, HURRAY_ELIMIT, "%llu bytes do not fit a Py_ssize_t",
                             (unsigned long long)(host->end - host->begin));
    return -1;
  }
  if (host->dtype->bits % 8 == 0 || host->end == host->begin) return 0;
  uint64_t numel = 0;
  HurrayError error = {0};
  int status = hurray_array_numel(host->array, &numel, &error);
  if (status != HURRAY_OK) {
    hurray__py_raise_status(st, status, &error);
    return -1;
  }
  unsigned tail_bits = (unsigned)((numel % 8) * host->dtype->bits % 8);
  const unsigned char *last =
      (const unsigned char *)hurray__py_buffer_at(host->buffer, host->end - 1);
  if (tail_bits != 0 && (*last >> tail_bits) != 0) {
    *copy = PyObject_CallMethod((PyObject *)self, "tobytes", NULL);
    if (*copy == NULL) return -1;
  }
  return 0;
}

/* What every typed export of a tensor hands out: computed once, at the first (make_export),
 * after the checks that depend on the tensor alone. `dims` holds the shape, then the byte
 * strides. */
typedef struct HurrayPyExport {
  void *buf;
  Py_ssize_t len, itemsize;
  const char *format;
  int ndim;
  bool c_contiguous, f_contiguous;
  Py_ssize_t dims[];
} HurrayPyExport;

void hurray__py_tensor_export_free(HurrayTensorObject *self) {
  PyMem_Free(self->export);
  self->export = NULL;
}

static HurrayPyExport *make_export(HurrayState *st, HurrayTensorObject *self) {
  HurrayHostView host;
  if (hurray__py_tensor_host_view(st, self, "the buffer protocol", &host) < 0) return NULL;
  const char *format = pep3118_format(host.dtype->code);
  if (format == NULL) {
    hurray__py_raise(st, HURRAY_PY_EXC_BUFFER,
                     "%s has no PEP 3118 format, so a typed buffer (memoryview, bytes(), "
                     "NumPy's buffer path) cannot carry it: np.asarray(t) (with ml_dtypes) or "
                     "from_dlpack keep the dtype, t.bytes_view() and tobytes() give the raw "
                     "bytes",
                     host.dtype->name);
    return NULL;
  }
  const HurrayArray *array = host.array;
  uint64_t numel = 0;
  HurrayError error = {0};
  int status = hurray_array_numel(array, &numel, &error);
  Py_ssize_t itemsize = host.dtype->bits / 8;
  if (status != HURRAY_OK) {
    hurray__py_raise_status(st, status, &error);
    return NULL;
  }
  if (numel > (uint64_t)(PY_SSIZE_T_MAX / itemsize)) {
    hurray__py_raise_statusf(st, HURRAY_ELIMIT, "%llu elements do not fit a Py_ssize_t of bytes",
                             (unsigned long long)numel);
    return NULL;
  }
  HurrayPyExport *e = PyMem_Malloc(sizeof *e + 2 * (size_t)array->ndim * sizeof e->dims[0]);
  if (e == NULL) {
    PyErr_NoMemory();
    return NULL;
  }
  int64_t strides[HURRAY_MAX_NDIM];
  int64_t row_major[HURRAY_MAX_NDIM];
  hurray__array_strides(array, strides);
  hurray__row_major_strides(array->ndim, array->shape, row_major);
  for (int32_t i = 0; i < array->ndim; i++) {
    e->dims[i] = (Py_ssize_t)array->shape[i];
    /* Validated: |stride * itemsize| fits for every dimension of extent > 1; the others are
     * never stepped and get their row-major stride. */
    int64_t step = array->shape[i] > 1 ? strides[i] : row_major[i];
    e->dims[array->ndim + i] = (Py_ssize_t)(step * itemsize);
  }
  e->buf = hurray__py_buffer_at(host.buffer, array->byte_offset);
  e->len = (Py_ssize_t)numel * itemsize;
  e->itemsize = itemsize;
  e->format = format;
  e->ndim = array->ndim;
  Py_buffer probe = {.buf = e->buf, .len = e->len, .itemsize = itemsize, .ndim = e->ndim,
                     .shape = e->ndim ? e->dims : NULL,
                     .strides = e->ndim ? e->dims + e->ndim : NULL};
  e->c_contiguous = PyBuffer_IsContiguous(&probe, 'C');
  e->f_contiguous = PyBuffer_IsContiguous(&probe, 'F');
  return e;
}

/* A typed export: the tensor's format, shape and byte strides, from its kept export. */
static int typed_export(HurrayState *st, HurrayTensorObject *self, Py_buffer *view, int flags) {
  if (hurray__py_tensor_live(st, self) < 0) return -1;
  if (self->export == NULL && (self->export = make_export(st, self)) == NULL) return -1;
  const HurrayPyExport *e = self->export;
  int readonly = hurray__py_tensor_readonly(self);
  if (refuse_read_only(st, readonly, flags) < 0) return -1;
  if ((flags & PyBUF_STRIDES) != PyBUF_STRIDES && !e->c_contiguous) {
    hurray__py_raise(st, HURRAY_PY_EXC_BUFFER,
                     "the tensor is not C-contiguous and the consumer takes no strides; "
                     "tobytes() copies it in C order");
    return -1;
  }
  char order = (flags & PyBUF_ANY_CONTIGUOUS) == PyBUF_ANY_CONTIGUOUS ? 'A'
               : (flags & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS ? 'F'
               : (flags & PyBUF_C_CONTIGUOUS) == PyBUF_C_CONTIGUOUS ? 'C'
                                                                    : 0;
  bool fits = order == 0 || (order == 'C' && e->c_contiguous) ||
              (order == 'F' && e->f_contiguous) ||
              (order == 'A' && (e->c_contiguous || e->f_contiguous));
  if (!fits) {
    hurray__py_raise(st, HURRAY_PY_EXC_BUFFER,
                     "the consumer asks for %s-contiguous memory and the tensor is not; "
                     "tobytes() copies it in C order",
                     order == 'A' ? "C- or Fortran" : order == 'F' ? "Fortran" : "C");
    return -1;
  }
  view->buf = e->buf;
  view->len = e->len;
  view->itemsize = e->itemsize;
  view->readonly = readonly;
  view->format = (char *)e->format;
  view->ndim = e->ndim;
  view->shape = e->ndim > 0 ? (Py_ssize_t *)e->dims : NULL;
  view->strides = e->ndim > 0 ? (Py_ssize_t *)e->dims + e->ndim : NULL;
  view->suboffsets = NULL;
  view->internal = NULL;
  if ((flags & PyBUF_ND) != PyBUF_ND) { /* one dimension of bytes' worth of items, C order */
    view->ndim = 1;
    view->shape = NULL;
  }
  if ((flags & PyBUF_STRIDES) != PyBUF_STRIDES) view->strides = NULL;
  view->obj = Py_NewRef((PyObject *)self);
  self->exports++;
  return 0;
}

int hurray__py_tensor_getbuffer(PyObject *op, Py_buffer *view, int flags) {
  HurrayState *st = hurray__py_state_of(op);
  HurrayTensorObject *self = (HurrayTensorObject *)op;
  view->obj = NULL;
  if ((flags & PyBUF_FORMAT) != PyBUF_FORMAT) {
    hurray__py_raise(st, HURRAY_PY_EXC_BUFFER,
                     "a hurray.Tensor's buffer is typed, and this consumer asked for plain "
                     "bytes, which torch.asarray would read as numbers of its default dtype: "
                     "pass t.bytes_view() for the bytes (hashlib, file.write, socket.send, "
                     "readinto); torch.as_tensor(t) or torch.from_dlpack(t), and "
                     "np.asarray(t), keep the dtype");
    return -1;
  }
  return typed_export(st, self, view, flags);
}

void hurray__py_tensor_releasebuffer(PyObject *op, Py_buffer *view) {
  (void)view; /* its shape and strides are the tensor's kept export */
  ((HurrayTensorObject *)op)->exports--;
}

const char hurray__py_tensor_bytes_view_doc[] =
    "bytes_view($self, /)\n"
    "--\n"
    "\n"
    "Return a zero-copy memoryview of the tensor's bytes: format 'B', 1-D.\n"
    "\n"
    "The byte view, for every dtype (bfloat16, float8, packed int4 ...\n"
    "included): the same bytes as `tobytes()`, for `hashlib`, `file.write`,\n"
    "`socket.send` and `readinto`. The tensor itself exports its elements\n"
    "typed only (`memoryview(t)`, `np.asarray(t)`): a consumer asking it for\n"
    "plain bytes is refused, since `torch.asarray` would read them as numbers\n"
    "of its default dtype.\n"
    "\n"
    "Returns\n"
    "-------\n"
    "memoryview\n"
    "    Writable exactly when the tensor is. It keeps the tensor alive.\n"
    "\n"
    "Raises\n"
    "------\n"
    "hurray.BufferError\n"
    "    For a tensor that is not C-contiguous (`tobytes()` copies it in C\n"
    "    order) or not in CPU memory.\n"
    "hurray.UnsupportedError\n"
    "    For a layout other than dense.\n"
    "\n"
    "Notes\n"
    "-----\n"
    "A packed sub-byte tensor with an odd element count reads its pad bits\n"
    "as zero: where the memory holds other bits there, the view is a\n"
    "read-only zero-padded copy.\n"
    "\n"
    "Examples\n"
    "--------\n"
    ">>> t = hurray.Tensor(bytes([0x21, 0xF3]), hurray.dtype.int4, [3])\n"
    ">>> bytes(t.bytes_view())\n"
    "b'!\\x03'\n";

PyObject *hurray__py_tensor_bytes_view(PyObject *op, PyObject *unused) {
  (void)unused;
  HurrayState *st = hurray__py_state_of(op);
  HurrayHostView host;
  PyObject *exporter = NULL;
  if (byte_span(st, (HurrayTensorObject *)op, "bytes_view()", &host, &exporter) < 0) return NULL;
  if (exporter == NULL) {
    exporter = hurray__py_host_span_new(st, op, hurray__py_buffer_at(host.buffer, host.begin),
                                        (Py_ssize_t)(host.end - host.begin), host.readonly);
    if (exporter == NULL) return NULL;
  }
  PyObject *view = PyMemoryView_FromObject(exporter);
  Py_DECREF(exporter);
  return view;
}
