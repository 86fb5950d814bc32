/* tensor_host.c -- host reads of a CPU tensor's elements: Tensor.tobytes(), Tensor.tolist() and
 * hurray__py_tensor_copy (a C-order copy in fresh memory, behind copy=True exchanges).
 *
 * Whole-byte dtypes are read with any strides, negative ones included (contiguous runs with
 * memcpy); packed sub-byte dtypes only contiguous. Large copies run without the GIL.
 */
#include "hurray_python.h"

#include <math.h>
#include <string.h>

#define SELF ((HurrayTensorObject *)op)

/* Byte strides of a whole-byte host array; extent-1 dimensions get 0, so an arbitrary stride
 * there (legal, and common from DLPack producers) never overflows. */
static int host_byte_strides(HurrayState *st, const HurrayArray *array, uint64_t itemsize,
                             int64_t *out) {
  hurray__array_strides(array, out);
  for (int32_t i = 0; i < array->ndim; i++) {
    if (array->shape[i] <= 1) {
      out[i] = 0;
    } else if (__builtin_mul_overflow(out[i], (int64_t)itemsize, &out[i])) {
      hurray__py_raise_statusf(st, HURRAY_EOVERFLOW, "a byte stride overflows 64 bits");
      return -1;
    }
  }
  return 0;
}

/* Copies the elements of a whole-byte array in C order: contiguous runs with memcpy. */
static void gather(char *dst, const char *src, int32_t ndim, const int64_t *shape,
                   const int64_t *byte_strides, size_t itemsize) {
  if (ndim == 0) {
    memcpy(dst, src, itemsize);
    return;
  }
  size_t inner = (size_t)shape[ndim - 1];
  int contiguous_rows = inner <= 1 || byte_strides[ndim - 1] == (int64_t)itemsize;
  int64_t index[HURRAY_MAX_NDIM] = {0};
  for (;;) {
    if (contiguous_rows) {
      memcpy(dst, src, inner * itemsize);
      dst += inner * itemsize;
    } else {
      const char *p = src;
      for (size_t i = 0; i < inner; i++, p += byte_strides[ndim - 1], dst += itemsize) {
        memcpy(dst, p, itemsize);
      }
    }
    int32_t d = ndim - 2;
    for (; d >= 0; d--) {
      src += byte_strides[d];
      if (++index[d] < shape[d]) break;
      src -= byte_strides[d] * shape[d];
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

/* A C-order copy of the elements of a host-readable tensor, planned then run. */
typedef struct HostCopy {
  HurrayHostView view;
  uint64_t numel;
  uint64_t nbytes;
  int contiguous;
  int64_t byte_strides[HURRAY_MAX_NDIM];
} HostCopy;

static int host_copy_prepare(HurrayState *st, HurrayTensorObject *self, const char *operation,
                             HostCopy *copy) {
  if (hurray__py_tensor_host_view(st, self, operation, &copy->view) < 0) return -1;
  const HurrayArray *array = copy->view.array;
  const HurrayDTypeInfo *dtype = copy->view.dtype;
  HurrayError error = {0};
  int status = hurray_array_numel(array, &copy->numel, &error);
  if (status == HURRAY_OK) {
    status = hurray_dtype_storage_bytes(array->dtype, copy->numel, &copy->nbytes, &error);
  }
  if (status != HURRAY_OK) {
    hurray__py_raise_status(st, status, &error);
    return -1;
  }
  if (copy->nbytes > PY_SSIZE_T_MAX) {
    hurray__py_raise_statusf(st, HURRAY_ELIMIT, "%s: %llu bytes are too many", operation,
                             (unsigned long long)copy->nbytes);
    return -1;
  }
  copy->contiguous = hurray__array_is_c_contiguous(array);
  if (copy->contiguous) return 0;
  if (dtype->bits % 8 != 0) {
    hurray__py_raise(st, HURRAY_PY_EXC_UNSUPPORTED,
                     "%s of a non-contiguous %s tensor is not supported (sub-byte elements are "
                     "only read packed and contiguous)",
                     operation, dtype->name);
    return -1;
  }
  return host_byte_strides(st, array, dtype->bits / 8, copy->byte_strides);
}

/* Writes copy->nbytes bytes to `dst`, without the GIL for large copies. */
static void host_copy_run(const HostCopy *copy, char *dst) {
  const HurrayArray *array = copy->view.array;
  const char *src = hurray__py_buffer_at(copy->view.buffer, array->byte_offset);
  if (copy->numel == 0) return;
  int nogil = copy->nbytes >= HURRAY_PY_NOGIL_COPY_BYTES;
  PyThreadState *thread = nogil ? PyEval_SaveThread() : NULL;
  if (copy->contiguous) {
    memcpy(dst, src, (size_t)copy->nbytes);
  } else {
    gather(dst, src, array->ndim, array->shape, copy->byte_strides,
           (size_t)(copy->view.dtype->bits / 8));
  }
  if (nogil) PyEval_RestoreThread(thread);
  unsigned tail_bits = (unsigned)((copy->numel * copy->view.dtype->bits) % 8);
  if (tail_bits != 0) {
    /* The bits of the last byte past the last element belong to no element: zero them. */
    unsigned char *last = (unsigned char *)dst + copy->nbytes - 1;
    *last = (unsigned char)(*last & ((1u << tail_bits) - 1u));
  }
}

PyObject *hurray__py_tensor_tobytes(PyObject *op, PyObject *unused) {
  (void)unused;
  HurrayState *st = hurray__py_state_of(op);
  HostCopy copy;
  if (host_copy_prepare(st, SELF, "tobytes()", &copy) < 0) return NULL;
  PyObject *result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)copy.nbytes);
  if (result != NULL) host_copy_run(&copy, PyBytes_AS_STRING(result));
  return result;
}

PyObject *hurray__py_tensor_copy(HurrayState *st, HurrayTensorObject *self, const char *operation) {
  const HurrayArray *values = hurray__py_tensor_values(st, self);
  if (values == NULL) return NULL;
  const HurrayBufferDesc *desc = &hurray__py_tensor_buffer(self, values)->desc;
  if (desc->device_tag != HURRAY_DEVICE_CPU) {
    const char *name = hurray_device_name(desc->device_tag);
    return hurray__py_raise(st, HURRAY_PY_EXC_UNSUPPORTED,
                            "%s: hurray-python has no runtime to copy %s memory", operation,
                            name == NULL ? "private-device" : name);
  }
  HostCopy copy;
  if (host_copy_prepare(st, self, operation, &copy) < 0) return NULL;
  HurrayBuffer *buffer = NULL;
  HurrayError error = {0};
  int status = hurray_buffer_alloc(copy.nbytes, 0, 0, &buffer, &error);
  if (status != HURRAY_OK) return hurray__py_raise_status(st, status, &error);
  host_copy_run(&copy, buffer->data);
  HurrayArray array = {
      .shape = copy.view.array->shape,
      .ndim = copy.view.array->ndim,
      .dtype = copy.view.array->dtype,
  };
  return hurray__py_tensor_wrap(st, buffer, &array, 0, NULL, NULL);
}

/* A whole-byte Tier 2 float format (dtypes.md §3): exponent and mantissa bits, bias, and how
 * it spells NaN and infinity. */
typedef enum SpecialValues {
  IEEE, /* the largest exponent: infinity with a zero mantissa, NaN otherwise */
  FN,   /* no infinities: the largest exponent and mantissa (S.1...1.1...1) are NaN */
  FNUZ, /* no infinities, no negative zero: the pattern of -0 is the one NaN */
  E8M0  /* no sign, no mantissa, no zero: 2^(e - bias); all ones is NaN */
} SpecialValues;

typedef struct SmallFloat {
  int exponent_bits, mantissa_bits, bias;
  SpecialValues special;
} SmallFloat;

static const SmallFloat *small_float(int code) {
  static const SmallFloat kFloat16 = {5, 10, 15, IEEE}, kBFloat16 = {8, 7, 127, IEEE},
                          kE4M3FN = {4, 3, 7, FN}, kE5M2 = {5, 2, 15, IEEE},
                          kE4M3FNUZ = {4, 3, 8, FNUZ}, kE5M2FNUZ = {5, 2, 16, FNUZ},
                          kE8M0FNU = {8, 0, 127, E8M0}, kE3M4 = {3, 4, 3, IEEE},
                          kE4M3 = {4, 3, 7, IEEE}, kE4M3B11FNUZ = {4, 3, 11, FNUZ};
  switch (code) {
    case HURRAY_DTYPE_FLOAT16:
    case HURRAY_DTYPE_COMPLEX32: /* two float16 */
      return &kFloat16;
    case HURRAY_DTYPE_BFLOAT16:
      return &kBFloat16;
    case HURRAY_DTYPE_FLOAT8_E4M3FN:
      return &kE4M3FN;
    case HURRAY_DTYPE_FLOAT8_E5M2:
      return &kE5M2;
    case HURRAY_DTYPE_FLOAT8_E4M3FNUZ:
      return &kE4M3FNUZ;
    case HURRAY_DTYPE_FLOAT8_E5M2FNUZ:
      return &kE5M2FNUZ;
    case HURRAY_DTYPE_FLOAT8_E8M0FNU:
      return &kE8M0FNU;
    case HURRAY_DTYPE_FLOAT8_E3M4:
      return &kE3M4;
    case HURRAY_DTYPE_FLOAT8_E4M3:
      return &kE4M3;
    case HURRAY_DTYPE_FLOAT8_E4M3B11FNUZ:
      return &kE4M3B11FNUZ;
    default:
      return NULL;
  }
}

int hurray__py_dtype_has_scalars(const HurrayDTypeInfo *dtype) {
  return dtype->tier == 1 || small_float(dtype->code) != NULL;
}

/* The value of `bits`, an element of format `f`, as a double: exact, since every format has
 * fewer exponent and mantissa bits than binary64. */
static double small_float_value(const SmallFloat *f, uint32_t bits) {
  uint32_t mantissa = bits & ((1u << f->mantissa_bits) - 1);
  uint32_t exponent = (bits >> f->mantissa_bits) & ((1u << f->exponent_bits) - 1);
  uint32_t top = (1u << f->exponent_bits) - 1;
  if (f->special == E8M0) return exponent == top ? NAN : ldexp(1.0, (int)exponent - f->bias);
  uint32_t sign_bit = 1u << (f->exponent_bits + f->mantissa_bits);
  if ((f->special == IEEE && exponent == top) ||
      (f->special == FN && exponent == top && mantissa == (1u << f->mantissa_bits) - 1) ||
      (f->special == FNUZ && bits == sign_bit)) {
    return f->special == IEEE && mantissa == 0 ? ((bits & sign_bit) ? -INFINITY : INFINITY)
                                               : NAN;
  }
  double value = exponent == 0
                     ? ldexp((double)mantissa, 1 - f->bias - f->mantissa_bits)
                     : ldexp((double)((1u << f->mantissa_bits) | mantissa),
                             (int)exponent - f->bias - f->mantissa_bits);
  return (bits & sign_bit) ? -value : value;
}

/* The element of a whole-byte Tier 2 float format at `p` (one or two bytes, native order). */
static double small_float_at(const SmallFloat *f, const char *p) {
  if (f->exponent_bits + f->mantissa_bits < 8) return small_float_value(f, (uint8_t)*p);
  uint16_t bits;
  memcpy(&bits, p, sizeof bits);
  return small_float_value(f, bits);
}

/* One element as a Python scalar: a Tier 1 dtype, or a Tier 2 float format widened (exactly)
 * to a Python float or complex. */
static PyObject *scalar_at(const HurrayDTypeInfo *dtype, const char *p) {
#define READ(T, make)        \
  {                          \
    T v;                     \
    memcpy(&v, p, sizeof v); \
    return make;             \
  }
  switch (dtype->code) {
    case HURRAY_DTYPE_BOOL:
      return PyBool_FromLong(*p != 0);
    case HURRAY_DTYPE_INT8:
      READ(int8_t, PyLong_FromLong(v))
    case HURRAY_DTYPE_INT16:
      READ(int16_t, PyLong_FromLong(v))
    case HURRAY_DTYPE_INT32:
      READ(int32_t, PyLong_FromLong(v))
    case HURRAY_DTYPE_INT64:
      READ(int64_t, PyLong_FromLongLong(v))
    case HURRAY_DTYPE_UINT8:
      READ(uint8_t, PyLong_FromUnsignedLong(v))
    case HURRAY_DTYPE_UINT16:
      READ(uint16_t, PyLong_FromUnsignedLong(v))
    case HURRAY_DTYPE_UINT32:
      READ(uint32_t, PyLong_FromUnsignedLong(v))
    case HURRAY_DTYPE_UINT64:
      READ(uint64_t, PyLong_FromUnsignedLongLong(v))
    case HURRAY_DTYPE_FLOAT32:
      READ(float, PyFloat_FromDouble((double)v))
    case HURRAY_DTYPE_FLOAT64:
      READ(double, PyFloat_FromDouble(v))
    case HURRAY_DTYPE_COMPLEX64: {
      float v[2];
      memcpy(v, p, sizeof v);
      return PyComplex_FromDoubles((double)v[0], (double)v[1]);
    }
    case HURRAY_DTYPE_COMPLEX128: {
      double v[2];
      memcpy(v, p, sizeof v);
      return PyComplex_FromDoubles(v[0], v[1]);
    }
    case HURRAY_DTYPE_COMPLEX32: {
      const SmallFloat *f = small_float(dtype->code);
      return PyComplex_FromDoubles(small_float_at(f, p), small_float_at(f, p + 2));
    }
    default: {
      const SmallFloat *f = small_float(dtype->code);
      if (f != NULL) return PyFloat_FromDouble(small_float_at(f, p));
      break;
    }
  }
#undef READ
  PyErr_Format(PyExc_SystemError, "scalar_at: dtype %s has no Python scalars", dtype->name);
  return NULL;
}

static PyObject *nested_list(const HurrayDTypeInfo *dtype, const char *p, int32_t dim, int32_t ndim,
                             const int64_t *shape, const int64_t *byte_strides) {
  if (dim == ndim) return scalar_at(dtype, p);
  PyObject *list = PyList_New((Py_ssize_t)shape[dim]);
  if (list == NULL) return NULL;
  for (int64_t i = 0; i < shape[dim]; i++, p += byte_strides[dim]) {
    PyObject *item = nested_list(dtype, p, dim + 1, ndim, shape, byte_strides);
    if (item == NULL) {
      Py_DECREF(list);
      return NULL;
    }
    PyList_SET_ITEM(list, (Py_ssize_t)i, item);
  }
  return list;
}

PyObject *hurray__py_tensor_tolist(PyObject *op, PyObject *unused) {
  (void)unused;
  HurrayState *st = hurray__py_state_of(op);
  HurrayHostView view;
  if (hurray__py_tensor_host_view(st, SELF, "tolist()", &view) < 0) return NULL;
  if (!hurray__py_dtype_has_scalars(view.dtype)) {
    return hurray__py_raise(st, HURRAY_PY_EXC_UNSUPPORTED,
                            "tolist() reads Tier 1 dtypes and whole-byte Tier 2 floats; %s "
                            "packs %d-bit elements (tobytes() and bytes_view() give the packed "
                            "bytes)",
                            view.dtype->name, (int)view.dtype->bits);
  }
  int64_t byte_strides[HURRAY_MAX_NDIM];
  if (host_byte_strides(st, view.array, view.dtype->bits / 8, byte_strides) < 0) return NULL;
  const char *p = hurray__py_buffer_at(view.buffer, view.array->byte_offset);
  return nested_list(view.dtype, p, 0, view.array->ndim, view.array->shape, byte_strides);
}

#undef SELF

/* ---- docstrings ------------------------------------------------------------------------ */

const char hurray__py_tensor_tobytes_doc[] =
"tobytes($self, /)\n"
    "--\n"
    "\n"
    "Return the elements in C order as bytes (a copy).\n"
    "\n"
    "Any strides, negative ones included, for whole-byte dtypes; packed\n"
    "sub-byte dtypes must be contiguous, and the bits past the last element\n"
    "are zero.\n"
    "\n"
    "Returns\n"
    "-------\n"
    "bytes\n"
    "    ``nbytes`` bytes.\n"
    "\n"
    "Raises\n"
    "------\n"
    "hurray.BufferError\n"
    "    The tensor is not in CPU memory, or its data is not ready.\n"
    "hurray.UnsupportedError\n"
    "    A layout other than dense, or a strided packed tensor.\n"
    "\n"
    "See Also\n"
    "--------\n"
    "Tensor.bytes_view : The same bytes without a copy.\n"
    "\n"
    "Examples\n"
    "--------\n"
    ">>> t = hurray.Tensor(bytes(range(6)), hurray.uint8, [2, 3], strides=[1, 2])\n"
    ">>> t.tobytes()\n"
    "b'\\x00\\x02\\x04\\x01\\x03\\x05'\n"
    ">>> hurray.Tensor(bytes([0x21, 0x43]), hurray.dtype.int4, [3]).tobytes()\n"
    "b'!\\x03'\n";

const char hurray__py_tensor_tolist_doc[] =
"tolist($self, /)\n"
    "--\n"
    "\n"
    "Return the elements as nested lists of Python scalars.\n"
    "\n"
    "Returns\n"
    "-------\n"
    "list or scalar\n"
    "    Nested lists of bool, int, float or complex; a scalar for a 0-d\n"
    "    tensor. float16, bfloat16, the float8 formats and complex32 are\n"
    "    widened to float and complex, exactly.\n"
    "\n"
    "Raises\n"
    "------\n"
    "hurray.UnsupportedError\n"
    "    A packed dtype (int4, float4_e2m1fn, ...: use tobytes()), or a\n"
    "    layout other than dense.\n"
    "hurray.BufferError\n"
    "    The tensor is not in CPU memory, or its data is not ready.\n"
    "\n"
    "Examples\n"
    "--------\n"
    ">>> import struct\n"
    ">>> hurray.Tensor(struct.pack(\"4i\", 1, 2, 3, 4), hurray.int32, [2, 2]).tolist()\n"
    "[[1, 2], [3, 4]]\n"
    ">>> hurray.Tensor(struct.pack(\"d\", 2.5), hurray.float64, []).tolist()\n"
    "2.5\n"
    ">>> hurray.Tensor(bytes([0x38, 0xC0]), hurray.dtype.float8_e4m3fn, [2]).tolist()\n"
    "[1.0, -2.0]\n";
