/* quant.c -- hurray.dequantize and hurray.quantize: the core's quantisation kernels (ADR-085,
 * buffer-protocol.md §8.9), run with the GIL released. */
#include "hurray_python.h"

/* A live hurray.Tensor from `obj`: the tensor itself (a new reference), or a tensor over
 * numpy.asarray(obj) for anything NumPy takes (a list, an ndarray). */
static HurrayTensorObject *tensor_of(HurrayState *st, PyObject *obj) {
  if (Py_IS_TYPE(obj, st->tensor_type)) {
    HurrayTensorObject *t = (HurrayTensorObject *)obj;
    if (hurray__py_tensor_live(st, t) < 0) return NULL;
    return (HurrayTensorObject *)Py_NewRef(obj);
  }
  if (hurray__py_numpy(st) == NULL) return NULL;
  PyObject *arr = PyObject_CallOneArg(st->numpy_asarray, obj);
  if (arr == NULL) return NULL;
  return (HurrayTensorObject *)hurray__py_wrap_result(st, arr);
}

/* `dtype` given (None: `fallback`) as a table entry. */
static const HurrayDTypeInfo *dtype_or(HurrayState *st, PyObject *obj, int fallback) {
  if (obj == NULL || obj == Py_None) return hurray_dtype_info(fallback);
  return hurray__py_dtype_arg(st, obj);
}

/* The shape of what dequantising `t` gives into `shape`: t's own, but for a block dtype, whose
 * last extent (bytes of whole blocks) becomes the weights they hold (ADR-094). */
static void result_shape(const HurrayTensorDesc *t, int64_t *shape) {
  memcpy(shape, t->shape, (size_t)t->ndim * sizeof *shape);
  uint32_t elements = 0, bytes = 0;
  if (t->ndim > 0 && hurray_dtype_block(t->dtype, &elements, &bytes, NULL) == HURRAY_OK) {
    shape[t->ndim - 1] = shape[t->ndim - 1] / bytes * elements;
  }
}

/* dequantize(t, out=...): the kernel into `out`, a writable, row-major dense CPU tensor of
 * t's shape and `dtype`. Returns a new reference to `out`. */
static PyObject *dequantize_into(HurrayState *st, HurrayTensorObject *t,
                                 const HurrayDTypeInfo *dtype, PyObject *out_obj) {
  if (!Py_IS_TYPE(out_obj, st->tensor_type)) {
    return PyErr_Format(PyExc_TypeError, "dequantize(out=) takes a hurray.Tensor, not %.200s",
                        Py_TYPE(out_obj)->tp_name);
  }
  HurrayTensorObject *out = (HurrayTensorObject *)out_obj;
  HurrayHostView view;
  if (hurray__py_tensor_host_view(st, out, "dequantize(out=)", &view) < 0) return NULL;
  const HurrayArray *a = view.array;
  int64_t shape[HURRAY_MAX_NDIM];
  result_shape(t->desc, shape);
  int same_shape = a->ndim == t->desc->ndim &&
                   memcmp(a->shape, shape, (size_t)a->ndim * sizeof *a->shape) == 0;
  if (view.readonly || a->dtype != dtype->code || !same_shape ||
      !hurray__array_is_c_contiguous(a)) {
    return hurray__py_raise(st, HURRAY_PY_EXC_INVALID_ARGUMENT,
                            "dequantize(out=) needs a writable, row-major %s tensor of the "
                            "input's shape; this one is %s%s, %s%s",
                            dtype->name, view.readonly ? "read-only, " : "", view.dtype->name,
                            same_shape ? "of that shape" : "of another shape",
                            hurray__array_is_c_contiguous(a) ? "" : ", strided");
  }
  void *data = hurray__py_buffer_at(view.buffer, view.begin);
  uint64_t size = view.end - view.begin;
  HurrayError error = {0};
  int status;
  Py_BEGIN_ALLOW_THREADS
  status = hurray_dequantize(t->desc, t->context->buffers, dtype->code, data, size, &error);
  Py_END_ALLOW_THREADS
  if (status != HURRAY_OK) return hurray__py_raise_status(st, status, &error);
  return Py_NewRef(out_obj);
}

static const char *const kDequantizeNames[] = {"t", "dtype", "out", NULL};

static PyObject *dequantize(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames) {
  static const HurrayPyParser parser = {"dequantize", kDequantizeNames, 1, 2, 1};
  PyObject *a[3];
  if (hurray__py_parse(&parser, args, nargs, kwnames, a) < 0) return NULL;
  HurrayState *st = PyModule_GetState(module);
  if (!Py_IS_TYPE(a[0], st->tensor_type)) {
    return PyErr_Format(PyExc_TypeError, "dequantize() takes a hurray.Tensor, not %.200s",
                        Py_TYPE(a[0])->tp_name);
  }
  HurrayTensorObject *t = (HurrayTensorObject *)a[0];
  if (hurray__py_tensor_live(st, t) < 0) return NULL;
  const HurrayDTypeInfo *dtype = dtype_or(st, a[1], HURRAY_DTYPE_FLOAT32);
  if (dtype == NULL) return NULL;
  if (a[2] != NULL && a[2] != Py_None) return dequantize_into(st, t, dtype, a[2]);
  HurrayBuffer *out = NULL;
  HurrayError error = {0};
  int status;
  Py_BEGIN_ALLOW_THREADS
  status = hurray_dequantize_buffer(t->desc, t->context->buffers, dtype->code, &out, &error);
  Py_END_ALLOW_THREADS
  if (status != HURRAY_OK) return hurray__py_raise_status(st, status, &error);
  int64_t shape[HURRAY_MAX_NDIM];
  result_shape(t->desc, shape);
  HurrayArray array = {.shape = shape, .ndim = t->desc->ndim, .dtype = dtype->code};
  return hurray__py_tensor_wrap(st, out, &array, 0, NULL, NULL);
}

static const char *const kQuantizeNames[] = {"x",          "dtype",       "layout", "axis",
                                             "block_size", "scale_dtype", NULL};
enum { Q_X, Q_DTYPE, Q_LAYOUT, Q_AXIS, Q_BLOCK_SIZE, Q_SCALE_DTYPE, Q_COUNT };

static PyObject *quantize(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames) {
  static const HurrayPyParser parser = {"quantize", kQuantizeNames, 2, 2, 2};
  PyObject *a[Q_COUNT];
  if (hurray__py_parse(&parser, args, nargs, kwnames, a) < 0) return NULL;
  HurrayState *st = PyModule_GetState(module);
  const HurrayDTypeInfo *dtype = hurray__py_dtype_arg(st, a[Q_DTYPE]);
  const HurrayDTypeInfo *scale = dtype == NULL ? NULL
                                               : dtype_or(st, a[Q_SCALE_DTYPE],
                                                          HURRAY_DTYPE_FLOAT32);
  if (scale == NULL) return NULL;
  HurrayQuantizeOptions o = {.layout = HURRAY_LAYOUT_PER_CHANNEL,
                             .dtype = dtype->code,
                             .scale_dtype = scale->code};
  if (a[Q_LAYOUT] != NULL) {
    uint8_t layout = 0;
    if (hurray__py_enum_arg(st, a[Q_LAYOUT], hurray_layout_name, HURRAY_ELAYOUT, "layout",
                            &layout) < 0) {
      return NULL;
    }
    o.layout = layout;
  }
  int block = o.layout == HURRAY_LAYOUT_BLOCK;
  if (block && (a[Q_BLOCK_SIZE] == NULL || a[Q_BLOCK_SIZE] == Py_None)) {
    return PyErr_Format(PyExc_TypeError, "quantize(layout='block') needs block_size=");
  }
  if (a[Q_BLOCK_SIZE] != NULL && a[Q_BLOCK_SIZE] != Py_None &&
      hurray__py_i64(st, a[Q_BLOCK_SIZE], "block_size", &o.block_size) < 0) {
    return NULL;
  }
  HurrayTensorObject *x = tensor_of(st, a[Q_X]);
  if (x == NULL) return NULL;
  /* axis: per_channel's default is 0 (the output channels of a weight), block's the last */
  long long axis = block && x->desc->ndim > 0 ? x->desc->ndim - 1 : 0;
  if (a[Q_AXIS] != NULL && a[Q_AXIS] != Py_None) {
    if (hurray__py_int_in_range(st, a[Q_AXIS], -HURRAY_MAX_NDIM, HURRAY_MAX_NDIM - 1, "axis",
                                &axis) < 0) {
      Py_DECREF(x);
      return NULL;
    }
    if (axis < 0) axis += x->desc->ndim;
  }
  o.axis = (int32_t)axis;
  HurrayTensorContext *context = NULL;
  HurrayError error = {0};
  int status;
  Py_BEGIN_ALLOW_THREADS
  status = hurray_quantize_new(x->desc, x->context->buffers, &o, &context, &error);
  Py_END_ALLOW_THREADS
  Py_DECREF(x);
  if (status != HURRAY_OK) return hurray__py_raise_status(st, status, &error);
  return hurray__py_tensor_adopt(st, context);
}

PyMethodDef hurray__py_quant_functions[] = {
    {"dequantize", HURRAY_PY_CFUNC(dequantize), METH_FASTCALL | METH_KEYWORDS,
     PyDoc_STR(
         "dequantize($module, t, /, dtype=None, *, out=None)\n"
         "--\n"
         "\n"
         "The numbers a quantised tensor stands for, in a new dense tensor.\n"
         "\n"
         "Per-channel tensors give ``(values - zero_points) * scales``, block tensors\n"
         "``values * scales + mins``, dense ones their values; computed in float32,\n"
         "each step rounded to nearest even, then rounded once to `dtype`\n"
         "(buffer-protocol.md section 8.9). Values, scales, zero points and mins may\n"
         "be of any integer or real float dtype and have any strides, so block\n"
         "tensors interleaved in one buffer (GGUF's) are read in place. The kernel\n"
         "runs in hurray-core with the GIL released.\n"
         "\n"
         "Parameters\n"
         "----------\n"
         "t : hurray.Tensor\n"
         "    A dense, per_channel or block tensor in CPU memory.\n"
         "dtype : hurray.dtype or str, optional\n"
         "    float32 (the default), float16 or bfloat16. int8 or uint8 unpack a\n"
         "    dense tensor of packed integers instead: int4 and int2 to int8, uint4,\n"
         "    uint2 and uint1 to either.\n"
         "out : hurray.Tensor, optional\n"
         "    A writable, row-major dense CPU tensor of `t`'s shape and `dtype` to\n"
         "    write the result into (say, ``hurray.from_numpy(np.empty(...))``).\n"
         "\n"
         "Returns\n"
         "-------\n"
         "hurray.Tensor\n"
         "    A dense, row-major tensor of `t`'s shape and `dtype`, in new memory;\n"
         "    `out` itself when given.\n"
         "\n"
         "Raises\n"
         "------\n"
         "hurray.DTypeError\n"
         "    `dtype` is none of those, or does not hold the values (int4 to uint8).\n"
         "hurray.UnsupportedError\n"
         "    `t` is sparse, paged or composite, or not in CPU memory.\n"
         "hurray.InvalidArgumentError\n"
         "    `out` is read-only, strided, or of another dtype or shape.\n"
         "\n"
         "Examples\n"
         "--------\n"
         ">>> import numpy as np\n"
         ">>> q = hurray.quantize(np.array([[7.0, -3.5], [1.75, 0.5]], np.float32),\n"
         "...                     hurray.dtype.int4)\n"
         ">>> hurray.dequantize(q).tolist()  # -3.5 / 1.0 rounds half to even: -4\n"
         "[[7.0, -4.0], [1.75, 0.5]]\n"
         ">>> hurray.dequantize(q, hurray.dtype.bfloat16).dtype.name\n"
         "'bfloat16'\n"
         ">>> out = np.empty((2, 2), np.float32)\n"
         ">>> _ = hurray.dequantize(q, out=hurray.from_numpy(out))\n"
         ">>> out.tolist()\n"
         "[[7.0, -4.0], [1.75, 0.5]]\n"
         ">>> packed = hurray.Tensor(bytes([0x21, 0xF8]), hurray.dtype.int4, [4])\n"
         ">>> hurray.dequantize(packed, hurray.int8).tolist()\n"
         "[1, 2, -8, -1]\n")},
    {"quantize", HURRAY_PY_CFUNC(quantize), METH_FASTCALL | METH_KEYWORDS,
     PyDoc_STR(
         "quantize($module, x, dtype, /, *, layout='per_channel', axis=None,\n"
         "         block_size=None, scale_dtype=None)\n"
         "--\n"
         "\n"
         "Quantise a float tensor to int4 or int8: symmetric, round to nearest.\n"
         "\n"
         "Each group -- a channel along `axis`, or a block of `block_size` elements\n"
         "along it -- gets the scale ``s = amax / qmax`` (qmax 7 for int4, 127 for\n"
         "int8) in float32, rounded to `scale_dtype`; each element becomes\n"
         "``clip(round_half_even(x / s), -qmax, qmax)``. A group of zeros has scale 0.\n"
         "The kernel runs in hurray-core with the GIL released\n"
         "(buffer-protocol.md section 8.9).\n"
         "\n"
         "Parameters\n"
         "----------\n"
         "x : hurray.Tensor or array_like\n"
         "    A dense tensor of floats (float16, bfloat16, float32, float64, ...) in\n"
         "    CPU memory, of rank 1 or more; anything else NumPy's asarray takes.\n"
         "dtype : hurray.dtype or str\n"
         "    int4 or int8.\n"
         "layout : {'per_channel', 'block'}, optional\n"
         "    One scale per index of `axis`, or one per block along it.\n"
         "axis : int, optional\n"
         "    The axis of the channels or blocks (negative counts from the end):\n"
         "    0 for per_channel, the last for block by default.\n"
         "block_size : int\n"
         "    Elements per block; needed for (and only for) ``layout='block'``.\n"
         "scale_dtype : hurray.dtype or str, optional\n"
         "    float32 (the default), float16 or bfloat16.\n"
         "\n"
         "Returns\n"
         "-------\n"
         "hurray.Tensor\n"
         "    A per_channel or block tensor of `x`'s shape: packed values (row-major)\n"
         "    and scales, each in a buffer of its own.\n"
         "\n"
         "Raises\n"
         "------\n"
         "hurray.DTypeError\n"
         "    `x` is not of floats, or `dtype` or `scale_dtype` is none of those.\n"
         "hurray.LayoutError\n"
         "    `axis`, `block_size` or `layout` does not fit.\n"
         "hurray.InvalidArgumentError\n"
         "    `x` holds NaN or infinity, or a scale overflows `scale_dtype`.\n"
         "\n"
         "Examples\n"
         "--------\n"
         ">>> import numpy as np\n"
         ">>> w = np.array([[0.7, -1.4, 0.0, 0.35]], np.float32)\n"
         ">>> q = hurray.quantize(w, hurray.dtype.int4)\n"
         ">>> q.layout, q.dtype.name\n"
         "('per_channel', 'int4')\n"
         ">>> hurray.dequantize(q.parts[0], hurray.int8).tolist()\n"
         "[[4, -7, 0, 2]]\n"
         ">>> b = hurray.quantize(np.arange(64, dtype=np.float32).reshape(2, 32),\n"
         "...                     'int8', layout='block', block_size=16)\n"
         ">>> b.parts[1].shape\n"
         "(2, 2)\n")},
    {NULL, NULL, 0, NULL},
};
