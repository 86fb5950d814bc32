/* native.c -- the native interchange protocol: Tensor.__hurray__ and hurray.from_hurray
 * (Layer 8c; ADR-023 as amended by ADR-030, ADR-033 and ADR-034; docs/impl/python-bindings.md,
 * "Native Buffer Interchange Protocol").
 *
 * The capsule's pointer is a HurrayTensorContext: the tensor's descriptor and every one of its
 * buffers as one HurrayBufferList, an owner reference, and the producer's C ABI version in a
 * head that is frozen for every version. Any binding over hurray-ffi -- another Python
 * extension with its own copy of the library, a C or Rust program -- reads it with three
 * functions, so nothing here depends on who is at the other end.
 *
 * Producer. Each call builds a fresh context over the same memory (hurray__py_tensor_share: a
 * distinct handle per buffer, since handles are not refcounted, and a strong reference to the
 * Tensor as the owner, dropped by the context's release with the GIL taken there) and puts it
 * in a capsule named "hurray_tensor". The capsule's destructor releases the context if, and
 * only if, the capsule still has that name: nobody took it.
 *
 * Consumer. Everything is checked while the capsule still has its name, so a capsule that is
 * refused is released by its own producer's destructor: the name, a non-NULL pointer, the
 * producer's ABI version -- read through hurray_tensor_context_abi_version before anything
 * else of the context, and on a mismatch nothing else is read -- then the whole tensor against
 * its buffers (hurray_tensor_context_check). Only then is the capsule renamed
 * "used_hurray_tensor" and the context adopted by a new Tensor, which releases it exactly once
 * when it is finalised. The producer stays alive through the context's owner.
 *
 * Streams follow DLPack (stream.c, ADR-054): every stream, None included, is judged by the
 * very check __dlpack__ makes, for every buffer -- valid for the device, and the bytes safe on
 * it. Data that is not ready is waited for on the host through the device runtime and handed
 * over READY; where no runtime can wait, the call is refused. stream=-1 says the consumer
 * synchronises: then the context carries every buffer's sync state (mode, handle, value) for
 * it to honour -- how an OpenCL event, a Vulkan timeline or a private device's fence crosses
 * unwaited, where DLPack can only hand over data that is ready. from_hurray passes no stream
 * (so gets data that is ready); a capsule of __hurray__(stream=-1) keeps the state.
 */
#include "hurray_python.h"

#include <string.h>

#define CAPSULE_NAME "hurray_tensor"
#define CAPSULE_USED_NAME "used_hurray_tensor"

/* ============================================================================================
 * Producer
 * ============================================================================================ */

/* Releases the context of a capsule nobody consumed, keeping the exception in flight (a
 * capsule often dies while one propagates). */
static void capsule_destructor(PyObject *capsule) {
  if (!PyCapsule_IsValid(capsule, CAPSULE_NAME)) return; /* renamed: the consumer's now */
  HurrayPySavedError saved;
  hurray__py_error_save(&saved);
  hurray_tensor_context_release(PyCapsule_GetPointer(capsule, CAPSULE_NAME));
  hurray__py_error_restore(&saved);
}

/* The producer's one step, shared by __hurray__ and the hand-over in from_hurray (which passes
 * no stream): every buffer must be safe on the stream, exactly as __dlpack__ requires of its
 * one buffer (stream.c); then a fresh context over the memory of the live tensor, owned by
 * whoever receives it, in which a buffer the check waited for is READY. */
static HurrayTensorContext *produce(HurrayState *st, HurrayTensorObject *self, PyObject *stream) {
  if (hurray__py_tensor_live(st, self) < 0) return NULL;
  HurrayTensorContext *context = hurray__py_tensor_share(st, self, self->desc, -1);
  if (context == NULL) return NULL;
  const HurrayBufferList *buffers = context->buffers; /* the same sync states, handles of its own */
  for (uint32_t i = 0; i < buffers->count; i++) {
    HurrayBuffer *buffer = buffers->buffers[i];
    int ready = hurray__py_stream_check(st, stream, buffer);
    if (ready < 0) {
      hurray_tensor_context_release(context);
      return NULL;
    }
    if (ready == 1) { /* waited for: its bytes are ready now */
      buffer->desc.sync_mode = HURRAY_SYNC_READY;
      buffer->sync_handle = NULL;
      buffer->sync_value = 0;
    }
  }
  return context;
}

static const char *const kHurrayNames[] = {"stream", NULL};

const char hurray__py_tensor_hurray_doc[] =
    "__hurray__($self, /, stream=None)\n"
    "--\n"
    "\n"
    "Export the tensor through the native interchange protocol.\n"
    "\n"
    "The capsule carries everything the tensor is: its descriptor and every\n"
    "one of its buffers, whatever the layout, dtype, device, memory class\n"
    "and sync state. Call ``hurray.from_hurray(t)`` rather than this method;\n"
    "it is for the libraries that consume the protocol.\n"
    "\n"
    "Parameters\n"
    "----------\n"
    "stream : int or None, optional\n"
    "    DLPack's stream argument, judged by the very check ``__dlpack__``\n"
    "    makes, None included, for every buffer: valid for the buffer's\n"
    "    device, and the bytes ready on it or ordered on that very stream;\n"
    "    otherwise the producer waits for them through the device runtime\n"
    "    (OpenCL; CUDA with libcuda) and hands them over as 'ready'. With -1\n"
    "    (the consumer synchronises itself) each buffer's sync state travels\n"
    "    in the capsule as it is, for the consumer to honour.\n"
    "\n"
    "Returns\n"
    "-------\n"
    "PyCapsule\n"
    "    A new capsule named 'hurray_tensor' on every call, whose pointer is\n"
    "    a HurrayTensorContext of C ABI version 4 (`hurray.C_ABI_VERSION`)\n"
    "    holding a fresh handle per buffer and keeping this tensor alive\n"
    "    until it is released. A consumer renames it 'used_hurray_tensor'\n"
    "    and then owns the context; a capsule destroyed unconsumed releases\n"
    "    it.\n"
    "\n"
    "Raises\n"
    "------\n"
    "hurray.BufferError\n"
    "    A buffer is not ready on the stream and no device runtime can wait\n"
    "    for it; pass stream=-1 to take it with its sync state.\n"
    "hurray.InvalidArgumentError\n"
    "    The stream is not valid for a buffer's device (a ValueError).\n"
    "\n"
    "See Also\n"
    "--------\n"
    "from_hurray : The consumer.\n"
    "__dlpack__ : The protocol for libraries that do not link Hurray.\n"
    "\n"
    "Examples\n"
    "--------\n"
    ">>> t = hurray.Tensor(bytes(8), hurray.float32, [2])\n"
    ">>> t.__hurray__()\n"
    "<capsule object \"hurray_tensor\" at 0x...>\n";

PyObject *hurray__py_tensor_hurray(PyObject *op, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames) {
  static const HurrayPyParser parser = {"__hurray__", kHurrayNames, 0, 1, 0};
  PyObject *stream = NULL;
  if ((nargs != 0 || kwnames != NULL) &&
      hurray__py_parse(&parser, args, nargs, kwnames, &stream) < 0) {
    return NULL;
  }
  HurrayState *st = hurray__py_state_of(op);
  HurrayTensorContext *context = produce(st, (HurrayTensorObject *)op, stream);
  if (context == NULL) return NULL;
  PyObject *capsule = PyCapsule_New(context, CAPSULE_NAME, capsule_destructor);
  if (capsule == NULL) hurray_tensor_context_release(context);
  return capsule;
}

/* ============================================================================================
 * Consumer
 * ============================================================================================ */

/* from_hurray of a live dense Tensor over one CPU buffer of the minimum alignment: the same
 * exchange as produce() and adopt -- a context of its own over the same memory, owned by a
 * reference to the producer -- built through hurray__py_tensor_from_memory, which keeps it in
 * the new object (ADR-059). NULL without an exception for any other tensor. */
static PyObject *from_cpu_tensor(HurrayState *st, HurrayTensorObject *self, int *done) {
  *done = 0;
  if (self->context == NULL || self->desc->layout != HURRAY_LAYOUT_DENSE ||
      self->desc->nparts != 1 || self->context->buffers->count != 1) {
    return NULL;
  }
  const HurrayArray *values = &self->desc->parts[0];
  const HurrayBuffer *buffer = hurray__py_tensor_buffer(self, values);
  if (buffer->desc.device_tag != HURRAY_DEVICE_CPU ||
      buffer->desc.alignment != HURRAY_MIN_ALIGNMENT) {
    return NULL;
  }
  for (int32_t i = 0; i < values->ndim; i++) { /* an empty array may have any byte_offset */
    if (values->shape[i] == 0) return NULL;
  }
  *done = 1;
  if (hurray__py_stream_check(st, NULL, buffer) < 0) return NULL; /* the producer's one rule */
  HurrayPyMemory memory = {
      .tag = HURRAY_DEVICE_CPU,
      .memory_class = buffer->desc.memory_class,
      .sync_mode = buffer->desc.sync_mode,
      .device_id = buffer->desc.device_id,
      .peer_device_id = buffer->desc.peer_device_id,
      .sync_handle = buffer->sync_handle,
      .sync_value = buffer->sync_value,
      .readonly = hurray__py_tensor_readonly(self),
  };
  return hurray__py_tensor_from_memory(st, buffer->data, buffer->desc.byte_size, &memory, values,
                                       Py_NewRef((PyObject *)self),
                                       hurray__py_owner_release_object);
}

static PyObject *from_hurray(PyObject *module, PyObject *obj) {
  HurrayState *st = PyModule_GetState(module);
  if (Py_IS_TYPE(obj, st->tensor_type)) {
    int done = 0;
    PyObject *tensor = from_cpu_tensor(st, (HurrayTensorObject *)obj, &done);
    if (done) return tensor;
    /* A Tensor of this module: its type is final and immutable, so obj.__hurray__() is
     * Tensor.__hurray__ itself, and the capsule it would return would be made and consumed
     * inside this call, by this very library. Its checks hold by construction (this ABI
     * version; validated by hurray_tensor_context_create a moment ago; nobody else saw it),
     * so the context goes from the producer to the consumer directly. */
    HurrayTensorContext *context = produce(st, (HurrayTensorObject *)obj, NULL);
    return context == NULL ? NULL : hurray__py_tensor_adopt(st, context);
  }
  PyObject *argv[2] = {NULL, obj}; /* argv[0]: scratch for PY_VECTORCALL_ARGUMENTS_OFFSET */
  PyObject *capsule =
      PyObject_VectorcallMethod(st->str_hurray, argv + 1, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
  if (capsule == NULL) return hurray__py_protocol_missing(obj, st->str_hurray, "from_hurray");
  if (!PyCapsule_CheckExact(capsule)) {
    PyErr_Format(PyExc_TypeError, "__hurray__ returned %.200s, not a PyCapsule",
                 Py_TYPE(capsule)->tp_name);
    return hurray__py_drop_and_fail(capsule);
  }
  /* Until the rename below the capsule keeps its name: whatever is refused is released by
   * the producer's destructor when the capsule is dropped. */
  const char *name = PyCapsule_GetName(capsule); /* fails only for a NULL pointer */
  if (name == NULL && PyErr_Occurred()) {
    PyErr_Clear();
    hurray__py_raise(st, HURRAY_PY_EXC_BUFFER, "the hurray_tensor capsule holds a NULL pointer");
    return hurray__py_drop_and_fail(capsule);
  }
  if (name == NULL || strcmp(name, CAPSULE_NAME) != 0) {
    if (name != NULL && strcmp(name, CAPSULE_USED_NAME) == 0) {
      hurray__py_raise(st, HURRAY_PY_EXC_BUFFER,
                       "the hurray_tensor capsule was already consumed (it is named "
                       "'used_hurray_tensor')");
    } else {
      hurray__py_raise(st, HURRAY_PY_EXC_BUFFER,
                       "__hurray__ returned a capsule named %s%s%s, not 'hurray_tensor'",
                       name == NULL ? "" : "'", name == NULL ? "NULL" : name,
                       name == NULL ? "" : "'");
    }
    return hurray__py_drop_and_fail(capsule);
  }
  HurrayTensorContext *context = PyCapsule_GetPointer(capsule, CAPSULE_NAME);
  /* The frozen head's version first, and nothing else of a context of another version. */
  uint32_t version = hurray_tensor_context_abi_version(context);
  if (version != HURRAY_C_ABI_VERSION) {
    hurray__py_raise_statusf(st, HURRAY_EABI,
                             "producer C ABI version %u, consumer C ABI version %d: the "
                             "capsule's tensor context is left to its producer",
                             (unsigned)version, HURRAY_C_ABI_VERSION);
    return hurray__py_drop_and_fail(capsule);
  }
  HurrayError error; /* written only on failure: not cleared on this hot path */
  error.message[0] = '\0';
  int status = hurray_tensor_context_check(context, 0, &error);
  if (status != HURRAY_OK) {
    hurray__py_raise_status(st, status, &error);
    return hurray__py_drop_and_fail(capsule);
  }
  if (PyCapsule_SetName(capsule, CAPSULE_USED_NAME) < 0) return hurray__py_drop_and_fail(capsule);
  Py_DECREF(capsule); /* renamed: its destructor leaves the context to us */
  return hurray__py_tensor_adopt(st, context);
}

PyMethodDef hurray__py_native_functions[] = {
    {"from_hurray", from_hurray, METH_O,
     PyDoc_STR("from_hurray($module, obj, /)\n"
               "--\n"
               "\n"
               "Take a tensor from any object of the native interchange protocol.\n"
               "\n"
               "A hurray.Tensor over the same memory, without copying: every buffer,\n"
               "the descriptor and each buffer's device and memory class come across\n"
               "as they are, and the producer is kept alive. Unlike DLPack, this\n"
               "carries every dtype (int4 included) in both modes, every layout,\n"
               "ROCm managed and peer memory and private devices.\n"
               "\n"
               "``obj.__hurray__()`` is called with no stream, as ``__dlpack__``'s\n"
               "None: data that is not ready is waited for by the producer through\n"
               "the device runtime (OpenCL; CUDA with libcuda) and arrives 'ready'.\n"
               "To take unready data with its sync state and synchronise yourself,\n"
               "pass an object whose ``__hurray__`` asks for ``stream=-1``.\n"
               "\n"
               "Parameters\n"
               "----------\n"
               "obj : object\n"
               "    Any object whose ``__hurray__()`` returns a 'hurray_tensor'\n"
               "    capsule: a hurray.Tensor, or a tensor of another extension built\n"
               "    on hurray-ffi.\n"
               "\n"
               "Returns\n"
               "-------\n"
               "hurray.Tensor\n"
               "    The tensor, which releases the producer's context exactly once\n"
               "    when it is freed.\n"
               "\n"
               "Raises\n"
               "------\n"
               "TypeError\n"
               "    `obj` has no ``__hurray__``, or it returned no capsule.\n"
               "hurray.BufferError\n"
               "    The capsule was already consumed, has another name or holds NULL;\n"
               "    or data is not ready and no device runtime can wait for it.\n"
               "hurray.ABIError\n"
               "    The producer was built for another hurray-ffi C ABI version (an\n"
               "    UnsupportedError). Both versions are named, and the capsule is\n"
               "    left to its producer.\n"
               "hurray.DescriptorError, hurray.LayoutError\n"
               "    The producer's buffers or tensor break hurray-core's rules, for\n"
               "    instance a private device tag this process has not registered.\n"
               "\n"
               "See Also\n"
               "--------\n"
               "Tensor.__hurray__ : The producer.\n"
               "from_dlpack : For producers that speak DLPack only.\n"
               "\n"
               "Examples\n"
               "--------\n"
               ">>> q = hurray.Tensor(bytes(64), hurray.dtype.int4, [128])\n"
               ">>> r = hurray.from_hurray(q)\n"
               ">>> r.dtype, r.shape, r.buffer_address == q.buffer_address\n"
               "(hurray.dtype.int4, (128,), True)\n"
               ">>> hurray.from_hurray(42)\n"
               "Traceback (most recent call last):\n"
               "  ...\n"
               "TypeError: from_hurray() needs an object with __hurray__, not int\n")},
    {NULL, NULL, 0, NULL},
};
