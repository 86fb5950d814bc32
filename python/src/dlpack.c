/* dlpack.c -- DLPack interoperability: Tensor.__dlpack__, Tensor.__dlpack_device__ and
 * hurray.from_dlpack (docs/impl/python-bindings.md, "DLPack Interoperability").
 *
 * What DLPack carries, how a tensor is laid into a DLTensor and what a received DLTensor must
 * satisfy are hurray-core's (src/core/dlpack.h, shared with the C functions hurray_tensor_to_dlpack
 * and hurray_tensor_from_dlpack, ADR-083), so the mapping table, the refusals and the checks have
 * one home. What has no DLPack form -- PEER memory, ROCm UNIFIED, private tags, DLPack devices
 * Hurray does not name, int4 and the other packed integers -- raises hurray.UnsupportedError, a
 * builtins.BufferError as DLPack callers expect.
 *
 * Producer. One heap block per export holds the managed struct (versioned or legacy), its
 * shape and strides, and a strong reference to the exported Tensor. Two holders keep the block:
 * the capsule and the DLPack owner. The owner's release -- the deleter, or the destructor of a
 * capsule nobody consumed -- drops the reference, once: a consumer that calls the deleter after
 * a failed import without renaming the capsule (PyTorch does, for devices it cannot place) does
 * not make the capsule's destructor drop it again. The block (Python's allocator) is freed when
 * both holders are gone. Everything runs with the GIL, taken by the deleter itself
 * (PyGILState_Ensure) where its caller does not hold it; nothing runs once the interpreter is
 * finalising.
 *
 * Consumer. The capsule is checked completely before it is renamed -- the DLPack tensor by the
 * core's hurray__dlpack_check, which the fuzz_dlpack target drives too -- so a rejected capsule is
 * released by its own destructor (the producer's deleter runs once). After the rename the managed
 * tensor is owned by the new Tensor's context, whose owner release calls the deleter exactly once.
 *
 * Streams (stream.c, one judgement shared with the native protocol, ADR-054). A producer
 * validates `stream` by DLPack's rules for the device and exports buffers whose data is READY
 * with any valid stream, or ordered on the consumer's own stream, or with stream=-1 ("the
 * consumer synchronises"); other data is waited for on the host through the device runtime
 * (OpenCL; CUDA with libcuda), and where no runtime can wait it raises hurray.BufferError.
 * As a consumer it passes no stream (DLPack's default:
 * the producer makes the data safe on the legacy default stream of CUDA, the null stream of ROCm)
 * and records the buffer as ordered on that stream (sync mode 'stream', handle 0x1,
 * buffer-protocol.md §2.6.2/§2.6.3); devices without streams give 'ready'.
 */
#include "hurray_python.h"

#include <string.h>

#include "dlpack.h"

/* PyCapsule names: a consumer renames the capsule to the "used_" name before it takes
 * ownership, so the producer's capsule destructor leaves a consumed tensor alone. */
#define HURRAY_DL_CAPSULE_LEGACY "dltensor"
#define HURRAY_DL_CAPSULE_LEGACY_USED "used_dltensor"
#define HURRAY_DL_CAPSULE_VERSIONED "dltensor_versioned"
#define HURRAY_DL_CAPSULE_VERSIONED_USED "used_dltensor_versioned"

/* ============================================================================================
 * Producer
 * ============================================================================================ */

typedef struct DLExport {
  union {
    HurrayDLManagedTensor legacy;
    HurrayDLManagedTensorVersioned versioned;
  } managed;
  PyObject *tensor; /* the exported Tensor (a copy for copy=True), a strong reference; NULL once
                       the owner released it */
  int holders;      /* 2 (the capsule, the DLPack owner), 1, then the block is freed */
  int64_t dims[];   /* ndim extents, then ndim strides */
} DLExport;

/* With the GIL held (the exception in flight is the caller's to keep). */
static void export_drop_holder(DLExport *export) {
  if (--export->holders == 0) PyMem_Free(export);
}

/* The DLPack owner's release, with the GIL held: a second release of the same export (a
 * consumer calling the deleter twice, or the deleter and then the destructor of a capsule it
 * did not rename) does nothing. */
static void export_release_owner(DLExport *export) {
  if (export->tensor == NULL) return;
  Py_CLEAR(export->tensor);
  export_drop_holder(export);
}

/* The deleter: may run on any thread, with or without the GIL. */
static void export_release(DLExport *export) {
  if (export == NULL || HURRAY_PY_FINALIZING()) return;
  HurrayPyGil gil = hurray__py_gil_ensure();
  HurrayPySavedError saved;
  hurray__py_error_save(&saved);
  export_release_owner(export);
  hurray__py_error_restore(&saved);
  hurray__py_gil_release(gil);
}

static void legacy_deleter(HurrayDLManagedTensor *self) {
  export_release(self->manager_ctx);
}

static void versioned_deleter(HurrayDLManagedTensorVersioned *self) {
  export_release(self->manager_ctx);
}

/* Capsule destructors (the GIL held): a capsule nobody consumed also releases the owner's
 * hold; a renamed one ("used_...") only its own. The block is the capsule's context, which
 * consumers do not touch. The exception in flight, if any, survives (a capsule often dies
 * while one propagates). */
static void capsule_destructor(PyObject *capsule, const char *name) {
  DLExport *export = PyCapsule_GetContext(capsule); /* a capsule's: raises nothing */
  if (!PyCapsule_IsValid(capsule, name)) { /* consumed: the owner's release is the consumer's */
    export_drop_holder(export);
    return;
  }
  HurrayPySavedError saved; /* the release may run Python code (the Tensor's finalisation) */
  hurray__py_error_save(&saved);
  export_release_owner(export);
  export_drop_holder(export);
  hurray__py_error_restore(&saved);
}

static void legacy_capsule_destructor(PyObject *capsule) {
  capsule_destructor(capsule, HURRAY_DL_CAPSULE_LEGACY);
}

static void versioned_capsule_destructor(PyObject *capsule) {
  capsule_destructor(capsule, HURRAY_DL_CAPSULE_VERSIONED);
}

/* max_version: None -> 0 (legacy), else its major version (>= 0). Consumers pass one constant
 * tuple on every call (NumPy's, PyTorch's, from_dlpack's own): a tuple of exact ints, which
 * nothing can change, is remembered with its major version once read (converting its two ints
 * again was a tenth of an export). */
static int max_version_arg(HurrayState *st, PyObject *obj, long long *major) {
  *major = 0;
  if (obj == NULL || obj == Py_None) return 0;
  if (obj == st->dl_max_version_seen) {
    *major = st->dl_max_major_seen;
    return 0;
  }
  if (!PyTuple_Check(obj) || PyTuple_GET_SIZE(obj) != 2) {
    PyErr_Format(PyExc_TypeError, "max_version must be a (major, minor) tuple or None, not %R",
                 obj);
    return -1;
  }
  long long minor = 0;
  if (hurray__py_int_in_range(st, PyTuple_GET_ITEM(obj, 0), 0, UINT32_MAX, "max_version major",
                              major) < 0 ||
      hurray__py_int_in_range(st, PyTuple_GET_ITEM(obj, 1), 0, UINT32_MAX, "max_version minor",
                              &minor) < 0) {
    return -1;
  }
  if (PyTuple_CheckExact(obj) && PyLong_CheckExact(PyTuple_GET_ITEM(obj, 0)) &&
      PyLong_CheckExact(PyTuple_GET_ITEM(obj, 1))) {
    Py_XSETREF(st->dl_max_version_seen, Py_NewRef(obj));
    st->dl_max_major_seen = *major;
  }
  return 0;
}

/* copy: None -> -1, else 0/1. */
static int copy_arg(PyObject *obj, int *copy) {
  *copy = -1;
  if (obj == NULL || obj == Py_None) return 0;
  if (!PyBool_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "copy must be True, False or None, not %R", obj);
    return -1;
  }
  *copy = obj == Py_True;
  return 0;
}

/* A (device_type, device_id) pair. */
static int dl_device_arg(HurrayState *st, PyObject *obj, HurrayDLDevice *device) {
  if (!PyTuple_Check(obj) || PyTuple_GET_SIZE(obj) != 2) {
    PyErr_Format(PyExc_TypeError, "dl_device must be a (device_type, device_id) tuple, not %R",
                 obj);
    return -1;
  }
  long long type = 0, id = 0;
  if (hurray__py_int_in_range(st, PyTuple_GET_ITEM(obj, 0), INT32_MIN, INT32_MAX, "dl_device type",
                              &type) < 0 ||
      hurray__py_int_in_range(st, PyTuple_GET_ITEM(obj, 1), INT32_MIN, INT32_MAX, "dl_device id",
                              &id) < 0) {
    return -1;
  }
  device->device_type = (int32_t)type;
  device->device_id = (int32_t)id;
  return 0;
}

/* (device_type, device_id) as Python ints. */
static PyObject *device_tuple(const HurrayDLDevice *device) {
  PyObject *type = PyLong_FromLong(device->device_type);
  PyObject *id = PyLong_FromLong(device->device_id);
  PyObject *tuple = type == NULL || id == NULL ? NULL : PyTuple_Pack(2, type, id);
  Py_XDECREF(type);
  Py_XDECREF(id);
  return tuple;
}

/* What every "DLPack cannot carry it" error adds: the route that carries it. */
#define NATIVE_ROUTE \
  "; Hurray-aware consumers take it whole through the native protocol, hurray.from_hurray(t) " \
  "(t.__hurray__())"

/* The DLPack device of a buffer (a tensor's values); UnsupportedError where DLPack has none. */
static int buffer_dl_device(HurrayState *st, const HurrayBuffer *buffer, HurrayDLDevice *device) {
  const HurrayBufferDesc *desc = &buffer->desc;
  HurrayError error; /* only its message is read, and only on failure */
  error.message[0] = '\0';
  int status =
      hurray_device_to_dlpack(desc->device_tag, desc->memory_class, &device->device_type, &error);
  if (status == HURRAY_EUNSUPPORTED) {
    hurray__py_raise_statusf(st, status, "%s%s", error.message, NATIVE_ROUTE);
    return -1;
  }
  if (status != HURRAY_OK) {
    hurray__py_raise_status(st, status, &error);
    return -1;
  }
  device->device_id = desc->device_id;
  return 0;
}

/* The capsule over `tensor` (the export keeps it alive), laid out by the core
 * (hurray__dlpack_fill). The device comes by address: its fields were stored one by one, and a
 * load of the whole struct (passing it by value) would stall on them. */
static PyObject *make_capsule(HurrayTensorObject *tensor, const HurrayDLDevice *device,
                              int versioned, uint64_t flags) {
  const HurrayArray *values = &tensor->desc->parts[0];
  const HurrayBuffer *buffer = hurray__py_tensor_buffer(tensor, values);
  /* Not zeroed: every field of the managed struct is set here and by hurray__dlpack_fill. */
  DLExport *export =
      PyMem_Malloc(sizeof(DLExport) + 2 * (size_t)values->ndim * sizeof(int64_t));
  if (export == NULL) return PyErr_NoMemory();
  HurrayDLTensor *dl =
      versioned ? &export->managed.versioned.dl_tensor : &export->managed.legacy.dl_tensor;
  hurray__dlpack_fill(values, buffer, device, export->dims, dl);
  export->tensor = Py_NewRef((PyObject *)tensor);
  export->holders = 2;

  PyObject *capsule;
  if (versioned) {
    HurrayDLManagedTensorVersioned *m = &export->managed.versioned;
    m->version.major = HURRAY_DLPACK_MAJOR_VERSION;
    m->version.minor = HURRAY_DLPACK_MINOR_VERSION;
    m->manager_ctx = export;
    m->deleter = versioned_deleter;
    m->flags = flags;
    capsule = PyCapsule_New(m, HURRAY_DL_CAPSULE_VERSIONED, versioned_capsule_destructor);
  } else {
    HurrayDLManagedTensor *m = &export->managed.legacy;
    m->manager_ctx = export;
    m->deleter = legacy_deleter;
    capsule = PyCapsule_New(m, HURRAY_DL_CAPSULE_LEGACY, legacy_capsule_destructor);
  }
  if (capsule == NULL) { /* the capsule's hold never came to be */
    export->holders = 1;
    export_release_owner(export);
  } else {
    (void)PyCapsule_SetContext(capsule, export); /* fails only for what is not a capsule */
  }
  return capsule;
}

/* In the order of HURRAY_PY_DL_*, which index the state's interned twins (dlpack_keywords). */
static const char *const kDLPackNames[] = {"stream", "max_version", "dl_device", "copy", NULL};
_Static_assert(HURRAY_PY_DL_NAMES <= HURRAY_PY_MAX_KEYWORDS, "HurrayPyKeywords holds them");

const char hurray__py_tensor_dlpack_doc[] =
    "__dlpack__($self, /, *, stream=None, max_version=None, dl_device=None, copy=None)\n"
    "--\n"
    "\n"
    "Export the tensor as a DLPack capsule.\n"
    "\n"
    "The DLPack protocol of the array API standard: ``np.from_dlpack(t)``,\n"
    "``torch.from_dlpack(t)`` and ``jax.numpy.from_dlpack(t)`` call it.\n"
    "Dense tensors only; the strides are always given.\n"
    "\n"
    "Parameters\n"
    "----------\n"
    "stream : int or None, optional\n"
    "    The consumer's stream, by DLPack's rules for the device: only None\n"
    "    on the CPU; None or -1 on other devices without DLPack streams\n"
    "    (OpenCL, Vulkan, ...); for CUDA None or 1 (the legacy default\n"
    "    stream), 2 (per-thread default), a cudaStream_t or -1, never 0; for\n"
    "    ROCm None or 0, a hipStream_t or -1. Data that is not ready (sync\n"
    "    mode other than 'ready') is exported as it is on the stream it is\n"
    "    ordered on or with -1 (the consumer synchronises itself); otherwise\n"
    "    the producer first waits for it where the device runtime can\n"
    "    (OpenCL; CUDA with libcuda), exactly as ``__hurray__`` does.\n"
    "max_version : tuple of two ints, optional\n"
    "    The newest DLPack version the consumer takes. (1, x) or newer gives\n"
    "    a 'dltensor_versioned' capsule (DLPack 1.1, with the READ_ONLY and\n"
    "    IS_COPIED flags); None, a legacy 'dltensor' capsule.\n"
    "dl_device : tuple of two ints, optional\n"
    "    ``(device_type, device_id)``; must be the tensor's own device, as\n"
    "    there is no runtime to copy across devices.\n"
    "copy : bool or None, optional\n"
    "    True copies a CPU tensor into fresh aligned memory; False never\n"
    "    copies; None copies only where it must. A legacy capsule cannot\n"
    "    say read-only, so a read-only tensor is exported legacy only as a\n"
    "    copy.\n"
    "\n"
    "Returns\n"
    "-------\n"
    "PyCapsule\n"
    "    'dltensor_versioned' or 'dltensor'.\n"
    "\n"
    "Raises\n"
    "------\n"
    "hurray.UnsupportedError\n"
    "    What DLPack cannot represent: peer memory, ROCm managed memory,\n"
    "    private device tags, packed integer dtypes (int4, uint4, int2,\n"
    "    uint2, uint1), layouts other than dense, and copies that need a\n"
    "    device runtime. It is a BufferError, as DLPack consumers expect.\n"
    "hurray.BufferError\n"
    "    copy=False where a copy is needed, or data not ready on `stream`\n"
    "    that no device runtime can wait for (pass stream=-1).\n"
    "hurray.InvalidArgumentError\n"
    "    A `stream` that is not valid for the device (a ValueError).\n"
    "\n"
    "See Also\n"
    "--------\n"
    "__dlpack_device__, from_dlpack\n"
    "__hurray__ : The native protocol, which has none of these limits.\n"
    "\n"
    "Examples\n"
    "--------\n"
    ">>> import numpy as np\n"
    ">>> t = hurray.Tensor(bytes(range(6)), hurray.uint8, [2, 3])\n"
    ">>> np.from_dlpack(t)\n"
    "array([[0, 1, 2],\n"
    "       [3, 4, 5]], dtype=uint8)\n"
    ">>> t.__dlpack__(max_version=(1, 1))\n"
    "<capsule object \"dltensor_versioned\" at 0x...>\n";

PyObject *hurray__py_tensor_dlpack(PyObject *op, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames) {
  static const HurrayPyParser parser = {"__dlpack__", kDLPackNames, 0, 0, 0};
  HurrayState *st = hurray__py_state_of(op);
  PyObject *a[HURRAY_PY_DL_NAMES];
  if (hurray__py_parse_keywords(&parser, &st->dlpack_keywords, args, nargs, kwnames, a) < 0) {
    return NULL;
  }
  HurrayTensorObject *self = (HurrayTensorObject *)op;
  long long major = 0;
  int copy = -1;
  if (max_version_arg(st, a[HURRAY_PY_DL_MAX_VERSION], &major) < 0 ||
      copy_arg(a[HURRAY_PY_DL_COPY], &copy) < 0) {
    return NULL;
  }
  int versioned = major >= 1;

  const HurrayArray *values = hurray__py_tensor_values(st, self);
  if (values == NULL) return NULL;
  /* A layout or a dtype DLPack cannot carry, refused by the core as hurray_tensor_to_dlpack
   * refuses it, with the route that carries it. */
  HurrayError error; /* only its message is read, and only on failure */
  error.message[0] = '\0';
  if (hurray__dlpack_carries(self->desc, &error) != HURRAY_OK) {
    return hurray__py_raise(st, HURRAY_PY_EXC_UNSUPPORTED, "%s" NATIVE_ROUTE, error.message);
  }
  const HurrayBuffer *buffer = hurray__py_tensor_buffer(self, values);
  HurrayDLDevice device;
  if (buffer_dl_device(st, buffer, &device) < 0) return NULL;
  PyObject *dl_device = a[HURRAY_PY_DL_DL_DEVICE];
  if (dl_device != NULL && dl_device != Py_None) {
    HurrayDLDevice wanted;
    if (dl_device_arg(st, dl_device, &wanted) < 0) return NULL;
    if (wanted.device_type != device.device_type || wanted.device_id != device.device_id) {
      if (copy == 0) {
        return hurray__py_raise(st, HURRAY_PY_EXC_BUFFER,
                                "dl_device (%d, %d) differs from the tensor's (%d, %d) and "
                                "copy=False",
                                (int)wanted.device_type, (int)wanted.device_id,
                                (int)device.device_type, (int)device.device_id);
      }
      return hurray__py_raise(st, HURRAY_PY_EXC_UNSUPPORTED,
                              "cannot export to dl_device (%d, %d): the tensor is on (%d, %d) "
                              "and hurray-python has no runtime to copy across devices",
                              (int)wanted.device_type, (int)wanted.device_id,
                              (int)device.device_type, (int)device.device_id);
    }
  }
  /* The bytes must be safe on the consumer's stream (None included: DLPack's legacy default
   * stream), waited for on the host where they are not, see stream.c. */
  if (hurray__py_stream_check(st, a[HURRAY_PY_DL_STREAM], buffer) < 0) return NULL;

  int readonly = hurray__py_tensor_readonly(self);
  int make_copy = copy == 1;
  if (readonly && !versioned) {
    if (copy == 0) {
      return hurray__py_raise(st, HURRAY_PY_EXC_BUFFER,
                              "the tensor is read-only and a legacy 'dltensor' capsule cannot "
                              "say so: ask for max_version=(1, 0) or allow a copy");
    }
    make_copy = 1; /* copy=None: the copy is needed to keep the source read-only */
  }
  if (!make_copy) {
    uint64_t flags = readonly ? HURRAY_DLPACK_FLAG_READ_ONLY : 0;
    return make_capsule(self, &device, versioned, flags);
  }
  PyObject *copied = hurray__py_tensor_copy(st, self, "__dlpack__ (copying)");
  if (copied == NULL) return NULL;
  HurrayDLDevice cpu = {HURRAY_DLPACK_CPU, 0};
  PyObject *capsule = make_capsule((HurrayTensorObject *)copied, &cpu, versioned,
                                   HURRAY_DLPACK_FLAG_IS_COPIED);
  Py_DECREF(copied);
  return capsule;
}

const char hurray__py_tensor_dlpack_device_doc[] =
    "__dlpack_device__($self, /)\n"
    "--\n"
    "\n"
    "Return the tensor's device in DLPack's terms.\n"
    "\n"
    "Returns\n"
    "-------\n"
    "tuple of two ints\n"
    "    ``(device_type, device_id)``: (1, 0) for CPU memory, (2, n) for\n"
    "    CUDA device memory, (3, n) for CUDA pinned host memory, ...\n"
    "\n"
    "Raises\n"
    "------\n"
    "hurray.UnsupportedError\n"
    "    Where DLPack has no device type: peer memory, ROCm managed memory,\n"
    "    private device tags.\n"
    "\n"
    "Examples\n"
    "--------\n"
    ">>> hurray.Tensor(bytes(4), hurray.float32, [1]).__dlpack_device__()\n"
    "(1, 0)\n"
    ">>> pinned = hurray.Tensor.from_address(0x7000_0000, hurray.float32, [4],\n"
    "...                                     device=\"cuda:1\", memory_class=\"host\")\n"
    ">>> pinned.__dlpack_device__()\n"
    "(3, 1)\n";

PyObject *hurray__py_tensor_dlpack_device(PyObject *op, PyObject *unused) {
  (void)unused;
  HurrayState *st = hurray__py_state_of(op);
  HurrayTensorObject *self = (HurrayTensorObject *)op;
  const HurrayArray *values = hurray__py_tensor_values(st, self);
  HurrayDLDevice device;
  if (values == NULL || buffer_dl_device(st, hurray__py_tensor_buffer(self, values), &device) < 0) {
    return NULL;
  }
  return device_tuple(&device);
}

const char hurray__py_tensor_jax_array_doc[] =
    "__jax_array__($self, /)\n"
    "--\n\n"
    "The tensor as a JAX array, for the functions of ``jax.numpy`` (ADR-087).\n\n"
    "It is ``jax.numpy.from_dlpack(self)``: the same memory where JAX takes\n"
    "it (a writable tensor in CPU memory starting on a 64-byte boundary), a\n"
    "copy otherwise. ``jax.jit`` and ``jax.device_put`` take tensors through\n"
    "the pytree node Hurray registers with JAX.\n\n"
    "Returns\n"
    "-------\n"
    "jax.Array\n\n"
    "Raises\n"
    "------\n"
    "ImportError\n"
    "    Without JAX.\n"
    "hurray.UnsupportedError, hurray.BufferError\n"
    "    Where ``__dlpack__`` raises them: a layout other than dense,\n"
    "    memory JAX cannot reach.\n\n"
    "Examples\n"
    "--------\n"
    ">>> import jax.numpy as jnp\n"
    ">>> jnp.add(hurray.Tensor(bytes(8), hurray.float32, [2]), 1).tolist()\n"
    "[1.0, 1.0]\n";

PyObject *hurray__py_tensor_jax_array(PyObject *op, PyObject *unused) {
  (void)unused;
  PyObject *module = PyImport_ImportModule("hurray._jax");
  PyObject *to_jax = module == NULL ? NULL : PyObject_GetAttrString(module, "to_jax");
  Py_XDECREF(module);
  if (to_jax == NULL) return NULL;
  PyObject *array = PyObject_CallOneArg(to_jax, op);
  Py_DECREF(to_jax);
  return array;
}

/* ============================================================================================
 * Consumer
 * ============================================================================================ */

/* The owner of an imported tensor is the managed tensor itself, released by the one of these
 * that knows its struct: the producer's deleter, called once. DLPack deleters take the GIL
 * themselves, but some producers' deleters assume it held; holding it is always safe. The
 * *_held twins are for a caller that holds the GIL (the Tensor's end); the others take it,
 * and after finalisation run no Python at all: they leak. */
/* The producer's deleter of a managed tensor of either struct, keeping the exception in
 * flight (with the GIL held). */
static void call_deleter(void *managed, int versioned) {
  HurrayPySavedError saved;
  hurray__py_error_save(&saved);
  if (versioned) {
    HurrayDLManagedTensorVersioned *m = managed;
    if (m->deleter != NULL) m->deleter(m);
  } else {
    HurrayDLManagedTensor *m = managed;
    if (m->deleter != NULL) m->deleter(m);
  }
  hurray__py_error_restore(&saved);
}

static void call_deleter_with_gil(void *managed, int versioned) {
  if (HURRAY_PY_FINALIZING()) return;
  HurrayPyGil gil = hurray__py_gil_ensure();
  call_deleter(managed, versioned);
  hurray__py_gil_release(gil);
}

static void import_release_legacy_held(void *managed) {
  call_deleter(managed, 0);
}

static void import_release_versioned_held(void *managed) {
  call_deleter(managed, 1);
}

static void import_release_legacy(void *managed) {
  call_deleter_with_gil(managed, 0);
}

static void import_release_versioned(void *managed) {
  call_deleter_with_gil(managed, 1);
}

HurrayOwnerReleaseFn hurray__py_dl_import_release_held(HurrayOwnerReleaseFn release) {
  if (release == import_release_legacy) return import_release_legacy_held;
  if (release == import_release_versioned) return import_release_versioned_held;
  return NULL;
}

/* Everything a capsule says, checked and translated (the core's hurray__dlpack_check, as
 * hurray_tensor_from_dlpack checks it), before anything is taken from it. */
static int translate(HurrayState *st, const HurrayDLTensor *dl, uint64_t flags,
                     HurrayDLImport *out, HurrayPyMemory *memory) {
  HurrayError error;
  error.message[0] = '\0';
  int status = hurray__dlpack_check(dl, flags, out, &error);
  if (status == HURRAY_DLPACK_EBROKEN) {
    hurray__py_raise(st, HURRAY_PY_EXC_BUFFER, "%s", error.message);
    return -1;
  }
  if (status != HURRAY_OK) {
    hurray__py_raise_status(st, status, &error);
    return -1;
  }
  /* from_dlpack passes no stream, so a producer with streams made the data safe on the
   * (legacy) default stream: the check gives STREAM on cudaStreamLegacy / HIP's null stream,
   * named 0x1. */
  *memory = (HurrayPyMemory){
      .tag = out->tag,
      .memory_class = out->memory_class,
      .sync_mode = out->sync_mode,
      .sync_handle = out->sync_handle,
      .device_id = out->device_id,
      .readonly = out->readonly,
      .acyclic = 1, /* the owner is the managed tensor: nothing the collector could visit */
  };
  return 0;
}

/* x.__dlpack__(max_version=(1, 1)[, copy=...][, dl_device=...]); producers that predate
 * DLPack 1.0 take none of these keywords: on TypeError the method is called again without
 * them (*legacy_call is then set). An object without __dlpack__ is a TypeError. */
static PyObject *call_dlpack(HurrayState *st, PyObject *x, PyObject *dl_device, int copy,
                             int *legacy_call) {
  *legacy_call = 0;
  PyObject *args[4] = {x, st->dl_max_version, NULL, NULL};
  PyObject *names[3] = {st->dlpack_keywords.names[HURRAY_PY_DL_MAX_VERSION], NULL, NULL};
  Py_ssize_t nkw = 1;
  if (copy >= 0) {
    names[nkw] = st->dlpack_keywords.names[HURRAY_PY_DL_COPY];
    args[1 + nkw++] = copy ? Py_True : Py_False;
  }
  if (dl_device != NULL) {
    names[nkw] = st->dlpack_keywords.names[HURRAY_PY_DL_DL_DEVICE];
    args[1 + nkw++] = dl_device;
  }
  PyObject *kwnames = nkw == 1 ? Py_NewRef(st->dl_kwnames) : PyTuple_New(nkw);
  if (kwnames == NULL) return NULL;
  for (Py_ssize_t i = 0; nkw > 1 && i < nkw; i++) PyTuple_SET_ITEM(kwnames, i, Py_NewRef(names[i]));
  PyObject *result = PyObject_VectorcallMethod(st->str_dlpack, args, 1, kwnames);
  Py_DECREF(kwnames);
  if (result == NULL && PyErr_ExceptionMatches(PyExc_TypeError)) {
    PyErr_Clear();
    *legacy_call = 1;
    result = PyObject_CallMethodNoArgs(x, st->str_dlpack);
  }
  return result != NULL ? result : hurray__py_protocol_missing(x, st->str_dlpack, "from_dlpack");
}

/* The capsule x.__dlpack__ returns, asked for `wanted` when that differs from x's own device
 * (wanted->device_type is 0 when no device was asked for). */
static PyObject *export_from(HurrayState *st, PyObject *x, const HurrayDLDevice *wanted, int copy,
                             int *legacy_call) {
  PyObject *dl_device = NULL;
  if (wanted->device_type != 0) {
    PyObject *current = PyObject_CallMethodNoArgs(x, st->str_dlpack_device);
    if (current == NULL) hurray__py_protocol_missing(x, st->str_dlpack_device, "from_dlpack");
    HurrayDLDevice have;
    int status = current == NULL ? -1 : dl_device_arg(st, current, &have);
    Py_XDECREF(current);
    if (status == 0 &&
        (have.device_type != wanted->device_type || have.device_id != wanted->device_id)) {
      dl_device = device_tuple(wanted);
      if (dl_device == NULL) status = -1;
    }
    if (status < 0) return NULL;
  }
  PyObject *capsule = call_dlpack(st, x, dl_device, copy, legacy_call);
  if (capsule != NULL && *legacy_call && dl_device != NULL) {
    hurray__py_raise(st, HURRAY_PY_EXC_BUFFER,
                     "the producer's __dlpack__ takes no dl_device, and its data is not on "
                     "the device asked for");
    capsule = hurray__py_drop_and_fail(capsule); /* its destructor releases it */
  }
  Py_XDECREF(dl_device);
  return capsule;
}

static const char *const kFromDLPackNames[] = {"x", "device", "copy", NULL};

static PyObject *from_dlpack(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames) {
  static const HurrayPyParser parser = {"from_dlpack", kFromDLPackNames, 1, 1, 1};
  PyObject *a[3];
  if (hurray__py_parse(&parser, args, nargs, kwnames, a) < 0) return NULL;
  HurrayState *st = PyModule_GetState(module);
  PyObject *x = a[0];
  int copy = -1;
  if (copy_arg(a[2], &copy) < 0) return NULL;
  HurrayDLDevice wanted = {0, 0}; /* device_type 0 is no DLPack device: none asked for */
  if (a[1] != NULL && a[1] != Py_None) {
    /* Only forms that cannot be misread (ADR-036): DLPack code passes (device_type, id)
     * tuples, which Hurray's (tag, index) would read as another device. */
    if (!PyObject_TypeCheck(a[1], st->device_type) && !PyUnicode_Check(a[1])) {
      PyErr_Format(PyExc_TypeError,
                   "from_dlpack() device must be a hurray.Device or its string form, not %R: "
                   "numbers are ambiguous between DLPack's device types and Hurray's device "
                   "tags (for DLPack's (1, 0), pass hurray.Device('cpu') or 'cpu'; for "
                   "(2, 1), hurray.Device('cuda', 1) or 'cuda:1')",
                   a[1]);
      return NULL;
    }
    uint8_t tag = 0;
    uint16_t index = 0;
    HurrayError error = {0};
    if (hurray__py_device_arg(st, a[1], &tag, &index) < 0) return NULL;
    int status = hurray_device_to_dlpack(tag, HURRAY_MEM_DEVICE, &wanted.device_type, &error);
    if (status != HURRAY_OK) return hurray__py_raise_status(st, status, &error);
    wanted.device_id = index;
  }
  int legacy_call = 0;
  PyObject *capsule = export_from(st, x, &wanted, copy, &legacy_call);
  if (capsule == NULL) return NULL;
  if (!PyCapsule_CheckExact(capsule)) {
    PyErr_Format(PyExc_TypeError, "__dlpack__ returned %.200s, not a PyCapsule",
                 Py_TYPE(capsule)->tp_name);
    return hurray__py_drop_and_fail(capsule);
  }
  const char *name = PyCapsule_GetName(capsule);
  int versioned;
  if (name != NULL && strcmp(name, HURRAY_DL_CAPSULE_VERSIONED) == 0) {
    versioned = 1;
  } else if (name != NULL && strcmp(name, HURRAY_DL_CAPSULE_LEGACY) == 0) {
    versioned = 0;
  } else {
    int used = name != NULL && (strcmp(name, HURRAY_DL_CAPSULE_VERSIONED_USED) == 0 ||
                                strcmp(name, HURRAY_DL_CAPSULE_LEGACY_USED) == 0);
    PyErr_Clear();
    hurray__py_raise(
        st, HURRAY_PY_EXC_BUFFER,
        used ? "the DLPack capsule was already consumed" : "not a DLPack capsule (name %s)",
        name == NULL ? "NULL" : name);
    return hurray__py_drop_and_fail(capsule);
  }
  void *managed = PyCapsule_GetPointer(capsule, name);
  if (managed == NULL) {
    PyErr_Clear();
    hurray__py_raise(st, HURRAY_PY_EXC_BUFFER, "the DLPack capsule holds NULL");
    return hurray__py_drop_and_fail(capsule);
  }
  const char *used_name =
      versioned ? HURRAY_DL_CAPSULE_VERSIONED_USED : HURRAY_DL_CAPSULE_LEGACY_USED;
  const HurrayDLTensor *dl;
  uint64_t flags = 0;
  if (versioned) {
    HurrayDLManagedTensorVersioned *m = managed;
    HurrayError error;
    if (hurray__dlpack_check_version(&m->version, &error) != HURRAY_OK) {
      /* Only `version` and `deleter` may be read: take it, release it, reject it. */
      if (PyCapsule_SetName(capsule, used_name) == 0 && m->deleter != NULL) m->deleter(m);
      if (!PyErr_Occurred()) hurray__py_raise(st, HURRAY_PY_EXC_ABI, "%s", error.message);
      return hurray__py_drop_and_fail(capsule);
    }
    dl = &m->dl_tensor;
    flags = m->flags;
  } else {
    dl = &((HurrayDLManagedTensor *)managed)->dl_tensor;
  }

  /* Until the rename below the capsule keeps its name: on any failure its destructor runs
   * the producer's deleter when the capsule is dropped. */
  HurrayDLImport imported;
  HurrayPyMemory memory;
  if (translate(st, dl, flags, &imported, &memory) < 0) return hurray__py_drop_and_fail(capsule);
  if (wanted.device_type != 0 && (dl->device.device_type != wanted.device_type ||
                                  dl->device.device_id != wanted.device_id)) {
    hurray__py_raise(st, HURRAY_PY_EXC_BUFFER,
                     "the producer exported device (%d, %d), not the (%d, %d) asked for",
                     (int)dl->device.device_type, (int)dl->device.device_id,
                     (int)wanted.device_type, (int)wanted.device_id);
    return hurray__py_drop_and_fail(capsule);
  }

  if (PyCapsule_SetName(capsule, used_name) < 0) return hurray__py_drop_and_fail(capsule);
  Py_DECREF(capsule); /* renamed: its destructor leaves the managed tensor to us */
  /* translate() checked everything hurray_array_span would (the core's dlpack.h). */
  PyObject *tensor = hurray__py_tensor_from_checked(
      st, imported.start, imported.size, &memory, &imported.array, managed,
      versioned ? import_release_versioned : import_release_legacy);
  /* A producer that accepted copy=True made the copy (a versioned capsule also says so). */
  int producer_copied = !legacy_call && (!versioned || imported.copied);
  if (tensor == NULL || copy != 1 || producer_copied) return tensor;
  PyObject *copied =
      hurray__py_tensor_copy(st, (HurrayTensorObject *)tensor, "from_dlpack(copy=True)");
  Py_DECREF(tensor); /* releases the producer's memory */
  return copied;
}

PyMethodDef hurray__py_dlpack_functions[] = {
    {"from_dlpack", HURRAY_PY_CFUNC(from_dlpack), METH_FASTCALL | METH_KEYWORDS,
     PyDoc_STR("from_dlpack($module, x, /, *, device=None, copy=None)\n"
               "--\n"
               "\n"
               "Take a tensor from any DLPack producer.\n"
               "\n"
               "A hurray.Tensor over the memory of a NumPy array, a PyTorch tensor, a\n"
               "JAX array or any object with ``__dlpack__``, without copying unless\n"
               "asked to. Read-only is kept where the producer says so (versioned\n"
               "capsules).\n"
               "\n"
               "Parameters\n"
               "----------\n"
               "x : object\n"
               "    The producer. It is asked for a DLPack 1.x capsule and, if it\n"
               "    predates DLPack 1.0, asked again without the new keywords.\n"
               "device : hurray.Device or str, optional\n"
               "    The device wanted ('cuda:1', ...), passed on as ``dl_device`` when\n"
               "    it differs from the producer's. A tuple or an int raises TypeError:\n"
               "    it would mean one device to DLPack and another to Hurray.\n"
               "copy : bool or None, optional\n"
               "    Passed on to the producer: True asks for a copy, False forbids one.\n"
               "\n"
               "Returns\n"
               "-------\n"
               "hurray.Tensor\n"
               "    A dense tensor that keeps the producer's memory alive.\n"
               "\n"
               "Raises\n"
               "------\n"
               "TypeError\n"
               "    `x` has no ``__dlpack__``, or `device` is a tuple or an int.\n"
               "hurray.BufferError\n"
               "    The capsule was already consumed, or it holds a NULL shape, or\n"
               "    NULL data with elements.\n"
               "hurray.ABIError\n"
               "    A DLPack major version this release does not know (its deleter is\n"
               "    still called).\n"
               "hurray.UnsupportedError\n"
               "    A DLPack device or dtype that Hurray does not name, strided\n"
               "    sub-byte data, or negative strides before an opaque handle.\n"
               "hurray.LimitError\n"
               "    Element counts, strides or offsets whose arithmetic overflows,\n"
               "    or elements that would wrap the address space.\n"
               "\n"
               "See Also\n"
               "--------\n"
               "from_numpy : NumPy arrays, with NumPy's dtypes checked exactly.\n"
               "from_hurray : The native protocol, for producers that link Hurray.\n"
               "\n"
               "Examples\n"
               "--------\n"
               ">>> import numpy as np\n"
               ">>> a = np.arange(3.0)\n"
               ">>> t = hurray.from_dlpack(a)\n"
               ">>> t.dtype, t.tolist()\n"
               "(hurray.float64, [0.0, 1.0, 2.0])\n"
               ">>> a[0] = 9.0\n"
               ">>> t.tolist()\n"
               "[9.0, 1.0, 2.0]\n"
               ">>> c = hurray.from_dlpack(a, copy=True)\n"
               ">>> a[1] = 7.0\n"
               ">>> t.tolist(), c.tolist()\n"
               "([9.0, 7.0, 2.0], [9.0, 1.0, 2.0])\n")},
    {NULL, NULL, 0, NULL},
};
