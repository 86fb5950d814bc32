/* file.c -- the file container from Python (Layer 8b): hurray.save, hurray.load, hurray.open
 * and hurray.File (docs/spec/file-format.md; docs/impl/python-bindings.md, "File I/O").
 *
 * Everything here is a thin layer over the C writer and reader of hurray-ffi; no byte of the
 * format is read or written in this file.
 *
 * Writing. hurray.save turns every value into a hurray.Tensor first (zero-copy: from_numpy for
 * NumPy arrays, from_dlpack for any other DLPack producer) and the metadata into
 * HurrayMetaValue trees in an arena, so that nothing can fail for a Python reason once the
 * file is begun. Each tensor is then one hurray_file_writer_add of its context's descriptor
 * and buffer list -- every layout, multi-buffer ones included -- with the GIL released while
 * its bytes are written (the context is immutable and the Tensor is held, so its memory stays
 * put). The C writer makes the file appear atomically: a temporary in the same directory,
 * fsync, rename, fsync of the directory. On any error the writer is destroyed, which removes
 * the temporary: nothing appears at the path and a previous file there is untouched.
 *
 * Reading. A hurray.File owns one HurrayFileReader (which validates each part of the index as
 * it is first used, file-format.md §9). Each tensor it hands out is a Tensor adopting the
 * HurrayTensorContext the reader returns: a view of the mapping holding its own reference on
 * it, read-only unless writable=True (or, in pread mode, fresh writable memory), so tensors
 * outlive the File and the reader. The reader is thread-safe, so the slow calls (pread reads,
 * checksums) run with the GIL released; `busy` counts them, and close() while one is in flight
 * leaves the destroy to the last of them.
 */
#include "hurray_python.h"

#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

/* ============================================================================================
 * Metadata: Python objects <-> HurrayMetaValue trees
 * ============================================================================================ */

/* Every allocation of one conversion, freed together: a tree borrows nothing from Python, so
 * it can be read with the GIL released whatever other threads do to the source objects. */
typedef struct ArenaBlock {
  struct ArenaBlock *next;
  max_align_t data[];
} ArenaBlock;

typedef struct Arena {
  ArenaBlock *head;
} Arena;

static void *arena_alloc(Arena *arena, size_t size) {
  if (size > PY_SSIZE_T_MAX - sizeof(ArenaBlock)) return PyErr_NoMemory();
  ArenaBlock *block = PyMem_RawMalloc(sizeof(ArenaBlock) + (size == 0 ? 1 : size));
  if (block == NULL) return PyErr_NoMemory();
  block->next = arena->head;
  arena->head = block;
  return block->data;
}

static void arena_free(Arena *arena) {
  while (arena->head != NULL) {
    ArenaBlock *next = arena->head->next;
    PyMem_RawFree(arena->head);
    arena->head = next;
  }
}

/* A copy of a str's UTF-8 with a NUL after it; `what` names it in errors. Keys and names may
 * not contain NUL (the C API takes them NUL-terminated); string values may. */
static const char *arena_utf8(HurrayState *st, Arena *arena, PyObject *text, int allow_nul,
                              const char *what, uint32_t *length) {
  Py_ssize_t size = 0;
  const char *utf8 = PyUnicode_AsUTF8AndSize(text, &size);
  if (utf8 == NULL) return NULL;
  if (!allow_nul && strlen(utf8) != (size_t)size) {
    hurray__py_raise(st, HURRAY_PY_EXC_INVALID_ARGUMENT, "%s %R contains a NUL", what, text);
    return NULL;
  }
  if ((uint64_t)size > UINT32_MAX) {
    hurray__py_raise_statusf(st, HURRAY_ELIMIT, "%s of %zd bytes is too long", what, size);
    return NULL;
  }
  char *copy = arena_alloc(arena, (size_t)size + 1);
  if (copy == NULL) return NULL;
  memcpy(copy, utf8, (size_t)size + 1);
  if (length != NULL) *length = (uint32_t)size;
  return copy;
}

/* Where a metadata value stands in the argument, for errors: "metadata config.layers[2]".
 * The root (the argument's name, and for tensor_metadata the tensor's name) and one step a
 * level: a map key or a list index. Levels are bounded by HURRAY_META_MAX_DEPTH. */
typedef struct MetaPath {
  const char *root;
  PyObject *root_key; /* tensor_metadata's tensor name, or NULL */
  int depth;
  struct {
    PyObject *key; /* borrowed; NULL for a list index */
    Py_ssize_t index;
  } steps[HURRAY_META_MAX_DEPTH + 1];
} MetaPath;

/* The path as text, "metadata at config.layers[2]": keys that are identifiers as "key" (".key"
 * after the first step), others as "['key']", indices as "[2]". */
static PyObject *meta_path_text(const MetaPath *path) {
  PyObject *text = path->root_key ? PyUnicode_FromFormat("%s[%R]", path->root, path->root_key)
                                  : PyUnicode_FromString(path->root);
  for (int i = 0; text != NULL && i < path->depth; i++) {
    PyObject *key = path->steps[i].key, *step;
    if (key == NULL) { /* never the first step: the root is a dict */
      step = PyUnicode_FromFormat("[%zd]", path->steps[i].index);
    } else if (PyUnicode_Check(key) && PyUnicode_IsIdentifier(key)) {
      step = PyUnicode_FromFormat(i == 0 ? " at %U" : ".%U", key);
    } else if (i == 0) {
      step = PyUnicode_FromFormat(" at [%R]", key);
    } else {
      step = PyUnicode_FromFormat("[%R]", key);
    }
    if (step == NULL) Py_CLEAR(text);
    else PyUnicode_AppendAndDel(&text, step);
  }
  return text;
}

/* Raises `exception` ("metadata at config.layers[2]: <message>"); returns -1. */
static int meta_refuse(const MetaPath *path, PyObject *exception, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  PyObject *message = PyUnicode_FromFormatV(fmt, args);
  va_end(args);
  PyObject *where = message ? meta_path_text(path) : NULL;
  if (where != NULL) PyErr_Format(exception, "%U: %U", where, message);
  Py_XDECREF(where);
  Py_XDECREF(message);
  return -1;
}

static int meta_from_py(HurrayState *st, Arena *arena, PyObject *obj, MetaPath *path,
                        HurrayMetaValue *out);

/* Converts `value` as the next step of `path`. */
static int meta_step(HurrayState *st, Arena *arena, PyObject *value, PyObject *key,
                     Py_ssize_t index, MetaPath *path, HurrayMetaValue *out) {
  path->steps[path->depth].key = key;
  path->steps[path->depth].index = index;
  path->depth++;
  int result = meta_from_py(st, arena, value, path, out);
  path->depth--;
  return result;
}

/* A dict into a MAP (keys: str). */
static int meta_map_from_py(HurrayState *st, Arena *arena, PyObject *dict, MetaPath *path,
                            HurrayMetaValue *out) {
  /* Iterate a snapshot: converting a value may run Python code (a foreign number's __index__
   * or __float__), and a dict mutated during PyDict_Next is undefined. */
  PyObject *pairs = PyDict_Items(dict);
  if (pairs == NULL) return -1;
  Py_ssize_t n = PyList_GET_SIZE(pairs);
  HurrayMetaValue *items = NULL;
  const char **keys = NULL;
  if ((uint64_t)n > UINT32_MAX) {
    hurray__py_raise_statusf(st, HURRAY_ELIMIT, "a metadata map of %zd items is too large", n);
  } else {
    items = arena_alloc(arena, (size_t)n * sizeof *items);
    keys = items == NULL ? NULL : arena_alloc(arena, (size_t)n * sizeof *keys);
  }
  if (keys == NULL) {
    Py_DECREF(pairs);
    return -1;
  }
  int result = 0;
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *key = PyTuple_GET_ITEM(PyList_GET_ITEM(pairs, i), 0);
    PyObject *value = PyTuple_GET_ITEM(PyList_GET_ITEM(pairs, i), 1);
    /* An int key becomes its decimal string, as json.dumps writes it: a transformers config's
     * id2label is {0: 'LABEL_0', ...} (ADR-090). */
    PyObject *text = PyLong_Check(key) && !PyBool_Check(key) ? PyObject_Str(key)
                                                             : Py_NewRef(key);
    if (text == NULL) {
      result = -1;
      break;
    }
    if (!PyUnicode_Check(text)) {
      result = meta_refuse(path, PyExc_TypeError,
                           "metadata keys must be str or int, not %.200s (%R)",
                           Py_TYPE(key)->tp_name, key);
      Py_DECREF(text);
      break;
    }
    keys[i] = arena_utf8(st, arena, text, 0, "metadata key", NULL);
    int failed = keys[i] == NULL || meta_step(st, arena, value, text, 0, path, &items[i]) < 0;
    Py_DECREF(text);
    if (failed) {
      result = -1;
      break;
    }
  }
  Py_DECREF(pairs);
  if (result < 0) return -1;
  *out = (HurrayMetaValue){.type = HURRAY_META_MAP, .count = (uint32_t)n};
  out->as.items = items;
  out->keys = keys;
  return 0;
}

/* Whether `obj` is an instance of numpy.`name` (1) or not (0), without importing NumPy: if it
 * is not imported, nothing is a NumPy object. -1 with an exception set. */
static int is_numpy(PyObject *obj, const char *name) {
  PyObject *module_name = PyUnicode_FromString("numpy");
  if (module_name == NULL) return -1;
  PyObject *numpy = PyImport_GetModule(module_name); /* NULL, no error, when not imported */
  Py_DECREF(module_name);
  if (numpy == NULL) return PyErr_Occurred() ? -1 : 0;
  PyObject *type = PyObject_GetAttrString(numpy, name);
  Py_DECREF(numpy);
  if (type == NULL) return -1;
  int result = PyType_Check(type) && PyObject_TypeCheck(obj, (PyTypeObject *)type);
  Py_DECREF(type);
  return result;
}

/* An int outside int64 as an INTEGER: its canonical decimal text. */
static int meta_big_integer(HurrayState *st, Arena *arena, PyObject *index,
                            const MetaPath *path, HurrayMetaValue *out) {
  PyObject *limit_error = st->exceptions[HURRAY_PY_EXC_LIMIT];
  PyObject *text = PyObject_Str(index); /* an exact int: Python's canonical decimal digits */
  if (text == NULL) {
    if (!PyErr_ExceptionMatches(PyExc_ValueError)) return -1;
    PyErr_Clear(); /* past sys.get_int_max_str_digits() */
    return meta_refuse(path, limit_error, "metadata integers have at most %d digits",
                       HURRAY_META_MAX_DIGITS);
  }
  Py_ssize_t size = 0;
  const char *digits = PyUnicode_AsUTF8AndSize(text, &size);
  int result = -1;
  if (digits != NULL && size > HURRAY_META_MAX_DIGITS) {
    meta_refuse(path, limit_error, "an integer of %zd digits; metadata integers have at most %d",
                size, HURRAY_META_MAX_DIGITS);
  } else if (digits != NULL) {
    char *copy = arena_alloc(arena, (size_t)size + 1);
    if (copy != NULL) {
      memcpy(copy, digits, (size_t)size + 1);
      *out = (HurrayMetaValue){.type = HURRAY_META_INTEGER, .count = (uint32_t)size};
      out->as.string = copy;
      result = 0;
    }
  }
  Py_DECREF(text);
  return result;
}

static int meta_from_py(HurrayState *st, Arena *arena, PyObject *obj, MetaPath *path,
                        HurrayMetaValue *out) {
  memset(out, 0, sizeof *out);
  if (path->depth + 1 > HURRAY_META_MAX_DEPTH) {
    return meta_refuse(path, st->exceptions[HURRAY_PY_EXC_LIMIT],
                       "metadata nests deeper than HURRAY_META_MAX_DEPTH (%d) levels",
                       HURRAY_META_MAX_DEPTH);
  }
  if (obj == Py_None) {
    out->type = HURRAY_META_NULL;
    return 0;
  }
  int builtin = PyBool_Check(obj) || PyLong_Check(obj) || PyFloat_Check(obj) ||
                 PyUnicode_Check(obj) || PyDict_Check(obj) || PyList_Check(obj) ||
                 PyTuple_Check(obj);
  int numpy_bool = builtin ? 0 : is_numpy(obj, "bool_");
  if (numpy_bool < 0) return -1;
  if (PyBool_Check(obj) || numpy_bool) { /* numpy.bool_ stays a bool, not 1.0 */
    int truth = PyObject_IsTrue(obj);
    if (truth < 0) return -1;
    out->type = HURRAY_META_BOOL;
    out->as.boolean = (uint8_t)truth;
    return 0;
  }
  if (PyFloat_Check(obj)) {
    out->type = HURRAY_META_FLOAT64;
    out->as.float64 = PyFloat_AS_DOUBLE(obj);
    return 0;
  }
  /* Arrays and tensors, even 0-d and 1-element ones, answer __index__ or __float__: only
   * Python's and NumPy's scalars are numbers here, so that an array never becomes one number by
   * accident. */
  int array = builtin ? 0 : is_numpy(obj, "ndarray");
  if (array < 0) return -1;
  if (array) {
    return meta_refuse(path, PyExc_TypeError,
                       "a numpy.ndarray is not a metadata value (save it as a tensor, or "
                       "convert it with .tolist(), or .item() for one element)");
  }
  int numpy_integer = builtin ? 0 : is_numpy(obj, "integer");
  if (numpy_integer < 0) return -1;
  if (PyLong_Check(obj) || numpy_integer) {
    PyObject *index = PyNumber_Index(obj);
    if (index == NULL) return -1;
    int overflow = 0;
    long long value = PyLong_AsLongLongAndOverflow(index, &overflow);
    int result = 0;
    if (value == -1 && PyErr_Occurred()) {
      result = -1;
    } else if (overflow != 0) {
      result = meta_big_integer(st, arena, index, path, out);
    } else {
      out->type = HURRAY_META_INT64;
      out->as.int64 = (int64_t)value;
    }
    Py_DECREF(index);
    return result;
  }
  if (PyUnicode_Check(obj)) {
    out->type = HURRAY_META_STRING;
    out->as.string = arena_utf8(st, arena, obj, 1, "metadata string", &out->count);
    return out->as.string == NULL ? -1 : 0;
  }
  if (PyDict_Check(obj)) return meta_map_from_py(st, arena, obj, path, out);
  if (PyList_Check(obj) || PyTuple_Check(obj)) {
    PyObject *seq = PySequence_Tuple(obj); /* a snapshot, as for dicts */
    if (seq == NULL) return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    HurrayMetaValue *items = NULL;
    if ((uint64_t)n > UINT32_MAX) {
      hurray__py_raise_statusf(st, HURRAY_ELIMIT, "a metadata list of %zd items is too long", n);
    } else {
      items = arena_alloc(arena, (size_t)n * sizeof *items);
    }
    int result = items == NULL ? -1 : 0;
    for (Py_ssize_t i = 0; result == 0 && i < n; i++) {
      result = meta_step(st, arena, PyTuple_GET_ITEM(seq, i), NULL, i, path, &items[i]);
    }
    Py_DECREF(seq);
    if (result < 0) return -1;
    out->type = HURRAY_META_LIST;
    out->count = (uint32_t)n;
    out->as.items = items;
    return 0;
  }
  int numpy_float = is_numpy(obj, "floating");
  if (numpy_float < 0) return -1;
  if (numpy_float) { /* NumPy's float16 and float32 scalars (float64 is a float) */
    double value = PyFloat_AsDouble(obj);
    if (value == -1.0 && PyErr_Occurred()) return -1;
    out->type = HURRAY_META_FLOAT64;
    out->as.float64 = value;
    return 0;
  }
  return meta_refuse(path, PyExc_TypeError,
                     "metadata values are None, bool, int, float, str, list, tuple or dict "
                     "(and NumPy's scalars), not %.200s",
                     Py_TYPE(obj)->tp_name);
}

/* The root of a metadata argument: None (no tree: *out NULL) or a dict. `what` names the
 * argument in errors, with `key` (a tensor's name) after it when not NULL. */
static int meta_root(HurrayState *st, Arena *arena, PyObject *obj, const char *what,
                     PyObject *key, const HurrayMetaValue **out) {
  *out = NULL;
  if (obj == NULL || obj == Py_None) return 0;
  MetaPath path = {.root = what, .root_key = key};
  if (!PyDict_Check(obj)) {
    return meta_refuse(&path, PyExc_TypeError, "must be a dict or None, not %.200s",
                       Py_TYPE(obj)->tp_name);
  }
  HurrayMetaValue *root = arena_alloc(arena, sizeof *root);
  if (root == NULL || meta_from_py(st, arena, obj, &path, root) < 0) return -1;
  *out = root;
  return 0;
}

/* A tree the reader decoded (and validated: depth at most HURRAY_META_MAX_DEPTH) as Python
 * objects. */
PyObject *hurray__py_meta_to_py(const HurrayMetaValue *value) {
  switch (value->type) {
    case HURRAY_META_BOOL:
      return PyBool_FromLong(value->as.boolean);
    case HURRAY_META_INT64:
      return PyLong_FromLongLong(value->as.int64);
    case HURRAY_META_FLOAT64:
      return PyFloat_FromDouble(value->as.float64);
    case HURRAY_META_STRING:
      return PyUnicode_DecodeUTF8(value->as.string, (Py_ssize_t)value->count, "strict");
    case HURRAY_META_NULL:
      Py_RETURN_NONE;
    case HURRAY_META_INTEGER: /* canonical decimal text of at most HURRAY_META_MAX_DIGITS */
      return PyLong_FromString(value->as.string, NULL, 10);
    case HURRAY_META_LIST: {
      PyObject *list = PyList_New((Py_ssize_t)value->count);
      for (uint32_t i = 0; list != NULL && i < value->count; i++) {
        PyObject *item = hurray__py_meta_to_py(&value->as.items[i]);
        if (item == NULL) {
          Py_CLEAR(list);
        } else {
          PyList_SET_ITEM(list, i, item);
        }
      }
      return list;
    }
    case HURRAY_META_MAP: {
      PyObject *dict = PyDict_New();
      for (uint32_t i = 0; dict != NULL && i < value->count; i++) {
        PyObject *item = hurray__py_meta_to_py(&value->as.items[i]);
        if (item == NULL || PyDict_SetItemString(dict, value->keys[i], item) < 0) Py_CLEAR(dict);
        Py_XDECREF(item);
      }
      return dict;
    }
    default:
      return PyErr_Format(PyExc_SystemError, "metadata of unknown type %d", (int)value->type);
  }
}

/* ============================================================================================
 * hurray.save
 * ============================================================================================ */

/* Whether `obj` is an instance of `module`.`type_name`; -1 with an exception. */
static int is_instance_of(PyObject *module, const char *type_name, PyObject *obj) {
  PyObject *type = PyObject_GetAttrString(module, type_name);
  if (type == NULL) return -1;
  int is = PyObject_IsInstance(obj, type);
  Py_DECREF(type);
  return is;
}

/* A torch.Tensor that requires grad (a model's parameters) as `*out`, its detach(): the same
 * storage without the autograd graph, which PyTorch's DLPack export refuses to carry. NULL
 * for anything else; -1 with an exception. Never imports torch. */
static int detached_torch_tensor(PyObject *obj, PyObject **out) {
  *out = NULL;
  PyObject *torch_name = PyUnicode_FromString("torch");
  if (torch_name == NULL) return -1;
  PyObject *torch = PyImport_GetModule(torch_name);
  Py_DECREF(torch_name);
  if (torch == NULL) return PyErr_Occurred() ? -1 : 0;
  int is_tensor = is_instance_of(torch, "Tensor", obj);
  Py_DECREF(torch);
  if (is_tensor <= 0) return is_tensor;
  PyObject *requires_grad = PyObject_GetAttrString(obj, "requires_grad");
  int needs = requires_grad == NULL ? -1 : PyObject_IsTrue(requires_grad);
  Py_XDECREF(requires_grad);
  if (needs <= 0) return needs;
  *out = PyObject_CallMethod(obj, "detach", NULL);
  return *out == NULL ? -1 : 0;
}

/* `obj` as a hurray.Tensor (a new reference), without copying: a Tensor as it is, a NumPy
 * array through from_numpy (which keeps read-only arrays and ml_dtypes' types), a NumPy scalar
 * as its 0-d array (a copy of its one value), a torch.Tensor that requires grad through its
 * detach() (the same storage), any other DLPack producer (PyTorch, JAX, ...) through
 * from_dlpack. */
PyObject *hurray__py_as_any_tensor(PyObject *module, HurrayState *st, PyObject *obj,
                                   PyObject *name, const char *operation) {
  if (Py_IS_TYPE(obj, st->tensor_type)) return Py_NewRef(obj);
  PyObject *numpy_name = PyUnicode_FromString("numpy");
  if (numpy_name == NULL) return NULL;
  PyObject *numpy = PyImport_GetModule(numpy_name); /* if already imported: never imports */
  Py_DECREF(numpy_name);
  if (numpy == NULL && PyErr_Occurred()) return NULL;
  if (numpy != NULL) {
    int is_array = is_instance_of(numpy, "ndarray", obj);
    int is_scalar = is_array == 0 ? is_instance_of(numpy, "generic", obj) : 0;
    PyObject *tensor = NULL;
    if (is_array == 1) {
      tensor = PyObject_CallMethod(module, "from_numpy", "O", obj);
    } else if (is_scalar == 1) { /* np.float32(1), a state dict's np.int64 step: its 0-d array */
      PyObject *array = PyObject_CallMethod(numpy, "asarray", "O", obj);
      tensor = array == NULL ? NULL : PyObject_CallMethod(module, "from_numpy", "O", array);
      Py_XDECREF(array);
    }
    Py_DECREF(numpy);
    if (is_array != 0 || is_scalar != 0) return tensor;
  }
  PyObject *detached = NULL;
  if (detached_torch_tensor(obj, &detached) < 0) return NULL;
  if (detached != NULL) {
    PyObject *tensor = PyObject_CallMethod(module, "from_dlpack", "O", detached);
    Py_DECREF(detached);
    return tensor;
  }
  if (PyObject_HasAttr(obj, st->str_dlpack))
    return PyObject_CallMethod(module, "from_dlpack", "O", obj);
  return PyErr_Format(PyExc_TypeError,
                      "%s(): tensor %R is a %.200s; expected a hurray.Tensor, a NumPy array "
                      "or scalar, or a DLPack producer",
                      operation, name, Py_TYPE(obj)->tp_name);
}

/* The same in host memory: a tensor on a device is copied to a host staging tensor through its
 * runtime (Tensor.to_device('cpu'), which waits on its sync state); the file records host
 * bytes, as file-format.md 5.2 says (ADR-048), and an upload sends them. A CPU tensor is
 * itself. (A server serves device memory as it is: hurray__py_as_any_tensor.) */
PyObject *hurray__py_as_tensor(PyObject *module, HurrayState *st, PyObject *obj, PyObject *name,
                               const char *operation) {
  PyObject *tensor = hurray__py_as_any_tensor(module, st, obj, name, operation);
  if (tensor == NULL || !Py_IS_TYPE(tensor, st->tensor_type)) return tensor;
  PyObject *host = PyObject_CallMethod(tensor, "to_device", "s", "cpu");
  Py_DECREF(tensor);
  return host;
}

/* One tensor to write, everything prepared with the GIL held. */
typedef struct SaveItem {
  PyObject *tensor; /* a live hurray.Tensor (strong) */
  const char *name; /* in the arena */
  const HurrayMetaValue *metadata;
  Py_ssize_t storage; /* the earlier item whose memory holds all of this one's, or -1 */
} SaveItem;

/* ---- views of one storage (ADR-093 amended): written once ----------------------------------
 *
 * A PyTorch view (`w[:10]`, a split of a fused weight) reaches save as a tensor whose buffer is
 * its own bytes of the storage. Each tensor with one CPU buffer whose memory lies inside an
 * earlier tensor's buffer memory is handed to the writer as a view of that memory instead (the
 * same bytes, its offset into them added to its arrays'), which the writer then shares with the
 * bytes it wrote for the earlier tensor (file-format.md §4). */

typedef struct Span {
  uintptr_t lo, hi;
  Py_ssize_t item;
} Span;

static int compare_spans(const void *a, const void *b) {
  const Span *x = a, *y = b;
  if (x->lo != y->lo) return x->lo < y->lo ? -1 : 1;
  if (x->hi != y->hi) return x->hi > y->hi ? -1 : 1; /* the widest first */
  return (x->item > y->item) - (x->item < y->item);
}

/* The one CPU buffer of an item's tensor, or NULL. */
static const HurrayBuffer *sole_buffer(const SaveItem *item) {
  const HurrayTensorContext *c = ((HurrayTensorObject *)item->tensor)->context;
  if (c->buffers->count != 1 || c->tensor->nchildren != 0) return NULL;
  const HurrayBuffer *b = c->buffers->buffers[0];
  return b->desc.device_tag == HURRAY_DEVICE_CPU && b->desc.byte_size > 0 && b->data != NULL
             ? b
             : NULL;
}

/* Sets each item's `storage`: among the items whose buffer memory holds all of its own (other
 * than its own span exactly, which the writer shares as it is), the widest, where that one
 * comes earlier. -1 with MemoryError. */
static int find_storages(SaveItem *items, Py_ssize_t n) {
  Span *spans = PyMem_Malloc((size_t)(n > 0 ? n : 1) * sizeof *spans);
  if (spans == NULL) {
    PyErr_NoMemory();
    return -1;
  }
  Py_ssize_t count = 0;
  for (Py_ssize_t i = 0; i < n; i++) {
    items[i].storage = -1;
    const HurrayBuffer *b = sole_buffer(&items[i]);
    if (b == NULL) continue;
    uintptr_t lo = (uintptr_t)b->data;
    spans[count++] = (Span){lo, lo + (uintptr_t)b->desc.byte_size, i};
  }
  qsort(spans, (size_t)count, sizeof *spans, compare_spans);
  const Span *widest = NULL;
  for (Py_ssize_t k = 0; k < count; k++) {
    const Span *e = &spans[k];
    if (widest == NULL || e->hi > widest->hi) {
      widest = e;
    } else if (widest->item < e->item && (e->lo != widest->lo || e->hi != widest->hi)) {
      items[e->item].storage = widest->item;
    }
  }
  PyMem_Free(spans);
  return 0;
}

/* hurray_file_writer_add of item `i`: as it is, or as a view of its storage's memory. */
static int add_item(HurrayFileWriter *writer, const SaveItem *items, Py_ssize_t i,
                    HurrayError *error) {
  const HurrayTensorContext *c = ((HurrayTensorObject *)items[i].tensor)->context;
  if (items[i].storage < 0) {
    return hurray_file_writer_add(writer, items[i].name, c->tensor, c->buffers, items[i].metadata,
                                  error);
  }
  const HurrayBuffer *own = c->buffers->buffers[0];
  const HurrayBuffer *memory = sole_buffer(&items[items[i].storage]);
  const uint64_t shift = (uint64_t)((const uint8_t *)own->data - (const uint8_t *)memory->data);
  HurrayTensorDesc view = *c->tensor;
  HurrayArray parts[HURRAY_MAX_PARTS];
  for (uint32_t k = 0; k < view.nparts; k++) {
    parts[k] = c->tensor->parts[k];
    parts[k].byte_offset += shift;
  }
  view.parts = parts;
  HurrayBufferList *list = NULL;
  HurrayBuffer *borrowed = NULL;
  int status = hurray_buffer_list_create(1, &list, error);
  if (status == HURRAY_OK) {
    status = hurray_buffer_wrap(memory->data, &memory->desc, 0, NULL, 0, NULL, NULL, &borrowed,
                                error);
  }
  if (status == HURRAY_OK) {
    status = hurray_buffer_list_append(list, borrowed, c->buffers->roles[0], NULL, error);
  }
  if (status == HURRAY_OK) {
    status = hurray_file_writer_add(writer, items[i].name, &view, list, items[i].metadata, error);
  }
  hurray_buffer_list_destroy(list);
  return status;
}

static const char *const kSaveNames[] = {"path",    "tensors",        "metadata",
                                         "alignment", "tensor_metadata", "durable",
                                         "max_shard_size", "progress", NULL};
enum {
  SV_PATH,
  SV_TENSORS,
  SV_METADATA,
  SV_ALIGNMENT,
  SV_TENSOR_METADATA,
  SV_DURABLE,
  SV_MAX_SHARD_SIZE,
  SV_PROGRESS,
  SV_COUNT
};

/* The bytes a tensor's arrays address, as the writer writes them (spans summed; the tensor is
 * valid, so every span is). */
static uint64_t addressed_bytes(const HurrayTensorDesc *t) {
  uint64_t bytes = 0;
  for (uint32_t k = 0; k < t->nparts; k++) {
    uint64_t begin = 0, end = 0;
    if (hurray_array_span(&t->parts[k], &begin, &end, NULL) == HURRAY_OK) bytes += end - begin;
  }
  for (uint32_t k = 0; k < t->nchildren; k++) bytes += addressed_bytes(&t->children[k]);
  return bytes;
}

/* After a tensor is written: its bytes reported as done. */
static void progress_tensor(HurrayPyProgress *progress, const HurrayTensorDesc *tensor) {
  if (progress->fn == NULL) return;
  progress->before += addressed_bytes(tensor);
  hurray__py_progress_call(progress, 0, progress->total);
}

/* Writes items [begin, end) to a Hurray file at `cpath`, with the GIL released around every
 * call that touches the disk. -1 with an exception (Ctrl-C included); else the status, the
 * error filled on failure. Nothing appears at `cpath` unless it returns HURRAY_OK. */
static int write_items(const char *cpath, const HurrayFileWriterOptions *options,
                       const SaveItem *items, Py_ssize_t begin, Py_ssize_t end,
                       const HurrayMetaValue *file_metadata, HurrayPyProgress *progress,
                       HurrayError *error) {
  HurrayFileWriter *writer = NULL;
  int status;
  Py_BEGIN_ALLOW_THREADS;
  status = hurray_file_writer_create(cpath, options, &writer, error);
  Py_END_ALLOW_THREADS;
  for (Py_ssize_t i = begin; status == HURRAY_OK && i < end; i++) {
    const HurrayTensorContext *context = ((HurrayTensorObject *)items[i].tensor)->context;
    Py_BEGIN_ALLOW_THREADS;
    status = add_item(writer, items, i, error);
    Py_END_ALLOW_THREADS;
    if (status == HURRAY_OK) progress_tensor(progress, context->tensor);
    if (status == HURRAY_OK && progress->failed) status = -1; /* it raised: abandon the file */
    if (status == HURRAY_OK && PyErr_CheckSignals() < 0) status = -1; /* Ctrl-C: abandon it */
  }
  if (status == HURRAY_OK) status = hurray_file_writer_set_metadata(writer, file_metadata, error);
  if (status == HURRAY_OK) {
    Py_BEGIN_ALLOW_THREADS;
    status = hurray_file_writer_finish(writer, error);
    Py_END_ALLOW_THREADS;
  }
  Py_BEGIN_ALLOW_THREADS; /* frees it; if unfinished, also unlinks the temporary */
  hurray_file_writer_destroy(writer);
  Py_END_ALLOW_THREADS;
  return status;
}

/* max_shard_size as bytes: a positive int, or a str as Hugging Face writes it
 * (hurray_size_parse: "5GB" is 5 * 10**9 bytes, "5GiB" 5 * 2**30). -1 with an exception. */
static int shard_size_arg(HurrayState *st, PyObject *obj, uint64_t *out) {
  if (PyLong_Check(obj) && !PyBool_Check(obj)) {
    long long v = 0;
    if (hurray__py_int_in_range(st, obj, 1, LLONG_MAX, "max_shard_size", &v) < 0) return -1;
    *out = (uint64_t)v;
    return 0;
  }
  if (!PyUnicode_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "max_shard_size must be an int or a str such as '5GB', not %.200s",
                 Py_TYPE(obj)->tp_name);
    return -1;
  }
  const char *text = PyUnicode_AsUTF8(obj);
  HurrayError error = {0};
  if (text == NULL) return -1;
  int status = hurray_size_parse(text, out, &error);
  if (status == HURRAY_OK) return 0;
  hurray__py_raise(st, HURRAY_PY_EXC_INVALID_ARGUMENT, "max_shard_size %s", error.message);
  return -1;
}

/* A sharded save (file-format.md §12, ADR-090) through hurray-core's shard writer: every
 * shard is staged beside the index and moved into place with it only once all are complete,
 * so a failure leaves a previous checkpoint as it was. -1 with an exception. */
static int save_shards(HurrayState *st, PyObject *path_obj, const char *cpath,
                       const HurrayFileWriterOptions *options, const SaveItem *items,
                       Py_ssize_t n, uint64_t max, const HurrayMetaValue *file_metadata,
                       HurrayPyProgress *progress) {
  HurrayShardWriter *shards = NULL;
  HurrayError error = {0};
  int status;
  Py_BEGIN_ALLOW_THREADS;
  status = hurray_shard_writer_create(cpath, max, options, file_metadata, &shards, &error);
  Py_END_ALLOW_THREADS;
  for (Py_ssize_t i = 0; status == HURRAY_OK && i < n; i++) {
    const HurrayTensorContext *context = ((HurrayTensorObject *)items[i].tensor)->context;
    HurrayFileWriter *writer = NULL;
    Py_BEGIN_ALLOW_THREADS;
    status = hurray_shard_writer_next(shards, items[i].name, addressed_bytes(context->tensor),
                                      &writer, &error);
    if (status == HURRAY_OK) status = add_item(writer, items, i, &error);
    Py_END_ALLOW_THREADS;
    if (status == HURRAY_OK) progress_tensor(progress, context->tensor);
    if (status == HURRAY_OK && progress->failed) status = -1; /* it raised: abandon the save */
    if (status == HURRAY_OK && PyErr_CheckSignals() < 0) status = -1; /* Ctrl-C: abandon it */
  }
  if (status == HURRAY_OK) {
    Py_BEGIN_ALLOW_THREADS;
    status = hurray_shard_writer_finish(shards, &error);
    Py_END_ALLOW_THREADS;
  }
  Py_BEGIN_ALLOW_THREADS; /* removes whatever an unfinished save staged */
  hurray_shard_writer_destroy(shards);
  Py_END_ALLOW_THREADS;
  if (status > 0) hurray__py_raise_path(st, status, &error, path_obj, NULL);
  return status == HURRAY_OK ? 0 : -1;
}

static PyObject *save(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                      PyObject *kwnames) {
  static const HurrayPyParser parser = {"save", kSaveNames, 0, 3, 2};
  PyObject *a[SV_COUNT];
  if (hurray__py_parse(&parser, args, nargs, kwnames, a) < 0) return NULL;
  HurrayState *st = PyModule_GetState(module);

  PyObject *path = NULL, *pairs = NULL, *result = NULL;
  SaveItem *items = NULL;
  Py_ssize_t n = 0;
  Arena arena = {NULL};
  HurrayError error = {0};
  int status = HURRAY_OK;
  uint64_t max_shard_size = 0;
  HurrayPyProgress progress = {0};

  long long alignment = HURRAY_FILE_DEFAULT_ALIGNMENT;
  if (a[SV_ALIGNMENT] != NULL &&
      hurray__py_int_in_range(st, a[SV_ALIGNMENT], 0, HURRAY_FILE_MAX_ALIGNMENT, "alignment",
                              &alignment) < 0) {
    return NULL;
  }
  int durable = a[SV_DURABLE] == NULL ? 1 : PyObject_IsTrue(a[SV_DURABLE]);
  if (durable < 0) return NULL;
  if (a[SV_MAX_SHARD_SIZE] != NULL && a[SV_MAX_SHARD_SIZE] != Py_None &&
      shard_size_arg(st, a[SV_MAX_SHARD_SIZE], &max_shard_size) < 0) {
    return NULL;
  }
  if (PyMapping_Check(a[SV_PATH]) && !PySequence_Check(a[SV_PATH])) { /* safetensors' order */
    PyErr_Format(PyExc_TypeError,
                 "save(path, tensors) takes the path first, not a %.200s (safetensors' save_file "
                 "takes the tensors first)",
                 Py_TYPE(a[SV_PATH])->tp_name);
    return NULL;
  }
  if (!PyUnicode_FSConverter(a[SV_PATH], &path)) return NULL;
  int format = HURRAY_FORMAT_HURRAY;
  if (hurray_format_from_path(PyBytes_AS_STRING(path), &format, NULL) == HURRAY_OK &&
      format != HURRAY_FORMAT_HURRAY) { /* never Hurray bytes under another format's name */
    hurray__py_raise(st, HURRAY_PY_EXC_INVALID_ARGUMENT,
                     "save() writes Hurray files, but %R names a %s file: save to a .hurray "
                     "path and hurray.convert() it to %R",
                     a[SV_PATH], hurray_format_name(format), a[SV_PATH]);
    goto done;
  }
  if (!PyMapping_Check(a[SV_TENSORS]) || PySequence_Check(a[SV_TENSORS])) {
    PyErr_Format(PyExc_TypeError, "save() takes a mapping of name -> tensor, not %.200s",
                 Py_TYPE(a[SV_TENSORS])->tp_name);
    goto done;
  }
  pairs = hurray__py_mapping_pairs(a[SV_TENSORS], "save");
  if (pairs == NULL) goto done;
  n = PyTuple_GET_SIZE(pairs);
  items = PyMem_Calloc((size_t)n + 1, sizeof *items);
  if (items == NULL) {
    PyErr_NoMemory();
    goto done;
  }

  /* Everything that can fail for a Python reason, before the file is begun. */
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *pair = PyTuple_GET_ITEM(pairs, i);
    PyObject *key = PyTuple_GET_ITEM(pair, 0);
    if (!PyUnicode_Check(key)) {
      PyErr_Format(PyExc_TypeError, "save(): tensor names must be str, not %.200s",
                   Py_TYPE(key)->tp_name);
      goto done;
    }
    items[i].name = arena_utf8(st, &arena, key, 0, "tensor name", NULL);
    if (items[i].name == NULL) goto done;
    items[i].tensor = hurray__py_as_tensor(module, st, PyTuple_GET_ITEM(pair, 1), key, "save");
    if (items[i].tensor == NULL) goto done;
    if (!Py_IS_TYPE(items[i].tensor, st->tensor_type)) {
      PyErr_SetString(PyExc_SystemError, "save(): the conversion did not make a hurray.Tensor");
      goto done;
    }
    if (hurray__py_tensor_live(st, (HurrayTensorObject *)items[i].tensor) < 0) goto done;
  }
  const HurrayMetaValue *file_metadata = NULL;
  if (meta_root(st, &arena, a[SV_METADATA], "metadata", NULL, &file_metadata) < 0) goto done;
  PyObject *per_tensor = a[SV_TENSOR_METADATA];
  if (per_tensor != NULL && per_tensor != Py_None) {
    if (!PyDict_Check(per_tensor)) {
      PyErr_Format(PyExc_TypeError, "tensor_metadata must be a dict or None, not %.200s",
                   Py_TYPE(per_tensor)->tp_name);
      goto done;
    }
    Py_ssize_t matched = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
      PyObject *key = PyTuple_GET_ITEM(PyTuple_GET_ITEM(pairs, i), 0);
      PyObject *value = PyDict_GetItemWithError(per_tensor, key);
      if (value == NULL && PyErr_Occurred()) goto done;
      if (value == NULL) continue;
      matched++;
      if (meta_root(st, &arena, value, "tensor_metadata", key, &items[i].metadata) < 0) {
        goto done;
      }
    }
    if (matched != PyDict_GET_SIZE(per_tensor)) {
      PyObject *key = NULL, *value = NULL;
      Py_ssize_t pos = 0;
      while (PyDict_Next(per_tensor, &pos, &key, &value)) {
        Py_INCREF(key); /* `key in tensors` may run Python code that changes the dict */
        int present = PySequence_Contains(a[SV_TENSORS], key);
        if (present == 0) {
          hurray__py_raise(st, HURRAY_PY_EXC_INVALID_ARGUMENT,
                           "tensor_metadata names %R, which is not one of the tensors", key);
        }
        Py_DECREF(key);
        if (present <= 0) goto done;
      }
    }
  }

  /* The file: created under a temporary name, renamed into place by finish. */
  const HurrayFileWriterOptions options = {
      .alignment = (uint32_t)alignment, .flags = durable ? 0 : HURRAY_FILE_WRITE_NOT_DURABLE};
  const char *cpath = PyBytes_AS_STRING(path);
  if (hurray__py_progress_arg(a[SV_PROGRESS], &progress) < 0) goto done;
  for (Py_ssize_t i = 0; progress.fn != NULL && i < n; i++) {
    progress.total += addressed_bytes(((HurrayTensorObject *)items[i].tensor)->context->tensor);
  }
  hurray__py_progress_call(&progress, 0, progress.total); /* the start: 0 of the total */
  if (progress.failed) goto done;
  if (find_storages(items, n) < 0) goto done;
  if (max_shard_size > 0) {
    if (save_shards(st, a[SV_PATH], cpath, &options, items, n, max_shard_size, file_metadata,
                    &progress) < 0)
      goto done;
  } else {
    status = write_items(cpath, &options, items, 0, n, file_metadata, &progress, &error);
    if (status < 0) goto done;
    if (status != HURRAY_OK) {
      hurray__py_raise_path(st, status, &error, a[SV_PATH], NULL);
      goto done;
    }
  }
  result = Py_NewRef(Py_None);

done:
  if (hurray__py_progress_end(&progress) < 0) Py_CLEAR(result);
  for (Py_ssize_t i = 0; items != NULL && i < n; i++) Py_XDECREF(items[i].tensor);
  PyMem_Free(items);
  arena_free(&arena);
  Py_XDECREF(pairs);
  Py_XDECREF(path);
  return result;
}

/* ============================================================================================
 * hurray.File: one open reader
 * ============================================================================================ */

typedef struct FileObject {
  PyObject_HEAD HurrayFileReader *reader; /* NULL once closed and no call is in flight */
  PyObject *path;                         /* as given, for repr and errors */
  PyObject *names;                        /* tuple of the names in file order, on first use */
  uint32_t count;                         /* tensors */
  uint32_t busy;                          /* calls running with the GIL released */
  int closed;
  int pread; /* opened with mmap=False */
} FileObject;

#define FILE_SELF ((FileObject *)op)

/* The reader of an open File, or NULL with StateError. */
static HurrayFileReader *file_reader(HurrayState *st, FileObject *self) {
  if (self->closed) {
    hurray__py_raise(st, HURRAY_PY_EXC_STATE, "I/O operation on a closed hurray.File (%R)",
                     self->path);
    return NULL;
  }
  return self->reader;
}

/* Brackets a call that runs with the GIL released: the reader stays alive through it even if
 * another thread closes the File meanwhile (the last call out destroys it). */
static void file_enter(FileObject *self) {
  self->busy++;
}

static void file_leave(FileObject *self) {
  if (--self->busy == 0 && self->closed && self->reader != NULL) {
    HurrayFileReader *reader = self->reader;
    self->reader = NULL;
    hurray_file_reader_destroy(reader);
  }
}

/* Looks up `name` (a str): 1 with its number in *index, 0 when no tensor has that name, -1
 * with an exception set: the error of an index that a lookup finds broken (the reader
 * validates the index as it is first used, file-format.md §9). */
static int find_name(HurrayState *st, HurrayFileReader *reader, PyObject *name,
                     uint32_t *index) {
  Py_ssize_t size = 0;
  const char *utf8 = PyUnicode_AsUTF8AndSize(name, &size);
  if (utf8 == NULL) return -1;
  if (strlen(utf8) != (size_t)size) return 0;
  HurrayError error = {0};
  int status = hurray_file_reader_find(reader, utf8, index, &error);
  if (status == HURRAY_OK) return 1;
  if (status == HURRAY_EINVAL) return 0;
  hurray__py_raise_status(st, status, &error);
  return -1;
}

/* The number of tensor `name` (a str), or -1 with KeyError / TypeError / the index's error. */
static int64_t file_find(HurrayState *st, FileObject *self, PyObject *name) {
  HurrayFileReader *reader = file_reader(st, self);
  if (reader == NULL) return -1;
  if (!PyUnicode_Check(name)) {
    PyErr_Format(PyExc_TypeError, "tensor names are str, not %.200s", Py_TYPE(name)->tp_name);
    return -1;
  }
  uint32_t index = 0;
  int found = find_name(st, reader, name, &index);
  if (found == 0) PyErr_SetObject(PyExc_KeyError, name);
  return found == 1 ? (int64_t)index : -1;
}

/* Tensor `index` as a new Tensor adopting the context the reader makes. */
static PyObject *file_get(HurrayState *st, FileObject *self, HurrayFileReader *reader,
                          uint32_t index, uint32_t flags, int pread) {
  HurrayTensorContext *context = NULL;
  HurrayError error = {0};
  int status;
  if (pread || (flags & HURRAY_FILE_GET_VERIFY)) { /* reads or hashes bytes: without the GIL */
    file_enter(self);
    Py_BEGIN_ALLOW_THREADS;
    status = hurray_file_reader_get(reader, index, flags, &context, &error);
    Py_END_ALLOW_THREADS;
    file_leave(self);
  } else { /* a mapping: a few small allocations */
    status = hurray_file_reader_get(reader, index, flags, &context, &error);
  }
  if (status != HURRAY_OK) return hurray__py_raise_path(st, status, &error, self->path, NULL);
  return hurray__py_tensor_adopt(st, context);
}

static PyObject *file_names(HurrayState *st, FileObject *self) {
  if (self->names != NULL) return self->names;
  HurrayFileReader *reader = file_reader(st, self);
  if (reader == NULL) return NULL;
  PyObject *names = PyTuple_New((Py_ssize_t)self->count);
  for (uint32_t i = 0; names != NULL && i < self->count; i++) {
    HurrayFileTensorInfo info;
    HurrayError error = {0};
    int status = hurray_file_reader_tensor_info(reader, i, &info, &error);
    PyObject *name = status == HURRAY_OK ? PyUnicode_FromString(info.name)
                                         : hurray__py_raise_status(st, status, &error);
    if (name == NULL) {
      Py_CLEAR(names);
    } else {
      PyTuple_SET_ITEM(names, i, name);
    }
  }
  self->names = names;
  return names;
}

/* Opens a reader on `path_obj` (str, bytes or os.PathLike) with the GIL released. */
/* The reader of what open() and load() were given (hurray__py_file_open), with the flags they
 * ask for; `*display` names it in errors and repr (a new reference). NULL with an exception. */
static HurrayFileReader *open_reader(HurrayState *st, PyObject *source, int mmap, int writable,
                                     uint32_t *count, PyObject **display) {
  uint32_t flags = HURRAY_FILE_OPEN_FOREIGN | (mmap ? 0 : HURRAY_FILE_OPEN_PREAD) |
                   (writable ? HURRAY_FILE_OPEN_WRITABLE : 0);
  HurrayFileReader *reader = hurray__py_file_open(st, source, flags, display);
  if (reader == NULL) return NULL;
  HurrayFileInfo info;
  HurrayError error = {0};
  int status = hurray_file_reader_info(reader, &info, &error);
  if (status != HURRAY_OK) {
    hurray_file_reader_destroy(reader);
    hurray__py_raise_path(st, status, &error, *display, NULL);
    Py_CLEAR(*display);
    return NULL;
  }
  *count = info.tensor_count;
  return reader;
}

static void file_dealloc(PyObject *op) {
  PyTypeObject *type = Py_TYPE(op);
  hurray_file_reader_destroy(FILE_SELF->reader); /* busy is 0: a call in flight holds self */
  Py_XDECREF(FILE_SELF->path);
  Py_XDECREF(FILE_SELF->names);
  type->tp_free(op);
  Py_DECREF(type);
}

static PyObject *file_repr(PyObject *op) {
  if (FILE_SELF->closed) return PyUnicode_FromFormat("<closed hurray.File %R>", FILE_SELF->path);
  return PyUnicode_FromFormat("<hurray.File %R: %u tensor%s>", FILE_SELF->path,
                              (unsigned)FILE_SELF->count, FILE_SELF->count == 1 ? "" : "s");
}

static Py_ssize_t file_length(PyObject *op) {
  HurrayState *st = hurray__py_state_of(op);
  if (file_reader(st, FILE_SELF) == NULL) return -1;
  return (Py_ssize_t)FILE_SELF->count;
}

static int file_contains(PyObject *op, PyObject *name) {
  HurrayState *st = hurray__py_state_of(op);
  HurrayFileReader *reader = file_reader(st, FILE_SELF);
  if (reader == NULL) return -1;
  if (!PyUnicode_Check(name)) return 0;
  uint32_t index = 0;
  return find_name(st, reader, name, &index);
}

static PyObject *file_subscript(PyObject *op, PyObject *name) {
  HurrayState *st = hurray__py_state_of(op);
  int64_t index = file_find(st, FILE_SELF, name);
  if (index < 0) return NULL;
  return file_get(st, FILE_SELF, FILE_SELF->reader, (uint32_t)index, 0, FILE_SELF->pread);
}

/* f[name] = value and del f[name]: a File is a view of a file on disk, written only whole. */
static int file_ass_subscript(PyObject *op, PyObject *name, PyObject *value) {
  PyErr_Format(PyExc_TypeError,
               "a hurray.File is read-only: to %s %R, write a new file with "
               "hurray.save(path, {...}) from the tensors you keep ({**f} holds them all)",
               value == NULL ? "remove" : "set", name);
  (void)op;
  return -1;
}

/* pickle and copy: what travels is the path, not the open mapping. */
static PyObject *file_reduce(PyObject *op, PyObject *unused) {
  (void)unused;
  PyErr_Format(PyExc_TypeError,
               "cannot pickle a hurray.File: it holds an open file mapping; pass its path (%R) "
               "and call hurray.open(path) on the other side, or pickle its tensors "
               "(f[name], or dict(f))",
               FILE_SELF->path);
  return NULL;
}

static PyObject *file_iter(PyObject *op) {
  PyObject *names = file_names(hurray__py_state_of(op), FILE_SELF);
  return names == NULL ? NULL : PyObject_GetIter(names);
}

/* collections.abc.<view>(self): the Mapping views, over len, iteration and f[name]. The
 * reader is checked first, so a closed File raises here rather than when the view is used. */
static PyObject *file_view(PyObject *op, const char *view) {
  if (file_reader(hurray__py_state_of(op), FILE_SELF) == NULL) return NULL;
  PyObject *abc = PyImport_ImportModule("collections.abc");
  if (abc == NULL) return NULL;
  PyObject *result = PyObject_CallMethod(abc, view, "O", op);
  Py_DECREF(abc);
  return result;
}

static PyObject *file_keys(PyObject *op, PyObject *unused) {
  (void)unused;
  return file_view(op, "KeysView");
}

static PyObject *file_items(PyObject *op, PyObject *unused) {
  (void)unused;
  return file_view(op, "ItemsView");
}

static PyObject *file_values(PyObject *op, PyObject *unused) {
  (void)unused;
  return file_view(op, "ValuesView");
}

static const char *const kGetNames[] = {"name", "default", NULL};

/* Mapping.get: f[name], or `default` where that raises KeyError. */
static PyObject *file_get_or(PyObject *op, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames) {
  static const HurrayPyParser parser = {"get", kGetNames, 2, 2, 1};
  PyObject *a[2];
  if (hurray__py_parse(&parser, args, nargs, kwnames, a) < 0) return NULL;
  PyObject *tensor = file_subscript(op, a[0]);
  if (tensor != NULL || !PyErr_ExceptionMatches(PyExc_KeyError)) return tensor;
  PyErr_Clear();
  return Py_NewRef(a[1] != NULL ? a[1] : Py_None);
}

/* Mapping.__eq__: equal to any Mapping with the same items (tensors compare as objects). */
static PyObject *file_richcompare(PyObject *op, PyObject *other, int compare) {
  if (compare != Py_EQ && compare != Py_NE) Py_RETURN_NOTIMPLEMENTED;
  PyObject *abc = PyImport_ImportModule("collections.abc");
  PyObject *mapping = abc == NULL ? NULL : PyObject_GetAttrString(abc, "Mapping");
  Py_XDECREF(abc);
  int is_mapping = mapping == NULL ? -1 : PyObject_IsInstance(other, mapping);
  Py_XDECREF(mapping);
  if (is_mapping <= 0) {
    if (is_mapping < 0) return NULL;
    Py_RETURN_NOTIMPLEMENTED;
  }
  if (op == other) return PyBool_FromLong(compare == Py_EQ);
  PyObject *mine = PyDict_New(), *theirs = PyDict_New();
  PyObject *result = NULL;
  if (mine != NULL && theirs != NULL && PyDict_Merge(mine, op, 1) == 0 &&
      PyDict_Merge(theirs, other, 1) == 0) {
    result = PyObject_RichCompare(mine, theirs, compare);
  }
  Py_XDECREF(mine);
  Py_XDECREF(theirs);
  return result;
}

/* Metadata of tensor `index` or of the whole file (HURRAY_FILE_WHOLE) as a dict. */
static PyObject *file_metadata_of(HurrayState *st, HurrayFileReader *reader, uint32_t index) {
  HurrayMetaValue *tree = NULL;
  HurrayError error = {0};
  int status = hurray_file_reader_metadata(reader, index, &tree, &error);
  if (status != HURRAY_OK) return hurray__py_raise_status(st, status, &error);
  PyObject *result = hurray__py_meta_to_py(tree);
  hurray_meta_destroy(tree);
  return result;
}

static PyObject *file_get_metadata(PyObject *op, void *closure) {
  (void)closure;
  HurrayState *st = hurray__py_state_of(op);
  HurrayFileReader *reader = file_reader(st, FILE_SELF);
  return reader == NULL ? NULL : file_metadata_of(st, reader, HURRAY_FILE_WHOLE);
}

static PyObject *file_tensor_metadata(PyObject *op, PyObject *name) {
  HurrayState *st = hurray__py_state_of(op);
  int64_t index = file_find(st, FILE_SELF, name);
  return index < 0 ? NULL : file_metadata_of(st, FILE_SELF->reader, (uint32_t)index);
}

static PyObject *file_get_info(PyObject *op, void *closure) {
  (void)closure;
  HurrayState *st = hurray__py_state_of(op);
  HurrayFileReader *reader = file_reader(st, FILE_SELF);
  if (reader == NULL) return NULL;
  HurrayFileInfo info;
  HurrayError error = {0};
  int status = hurray_file_reader_info(reader, &info, &error);
  if (status != HURRAY_OK) return hurray__py_raise_status(st, status, &error);
  return Py_BuildValue("{s:s,s:(HH),s:I,s:I,s:I,s:K,s:K}", "format",
                       hurray_format_name(info.format), "version", info.version_major,
                       info.version_minor, "alignment", info.alignment, "tensors",
                       info.tensor_count, "buffers", info.buffer_count, "file_size",
                       (unsigned long long)info.file_size, "data_bytes",
                       (unsigned long long)info.data_bytes);
}

static const char *const kVerifyNames[] = {"name", "progress", NULL};

static PyObject *file_verify(PyObject *op, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames) {
  static const HurrayPyParser parser = {"verify", kVerifyNames, 0, 1, 0};
  PyObject *a[2];
  if (hurray__py_parse(&parser, args, nargs, kwnames, a) < 0) return NULL;
  PyObject *name = a[0];
  HurrayState *st = hurray__py_state_of(op);
  HurrayFileReader *reader = file_reader(st, FILE_SELF);
  if (reader == NULL) return NULL;
  uint32_t index = HURRAY_FILE_WHOLE;
  if (name != NULL && name != Py_None) {
    int64_t found = file_find(st, FILE_SELF, name);
    if (found < 0) return NULL;
    index = (uint32_t)found;
  }
  HurrayPyProgress progress = {0};
  if (hurray__py_progress_arg(a[1], &progress) < 0) return NULL;
  HurrayError error = {0};
  int status;
  file_enter(FILE_SELF);
  Py_BEGIN_ALLOW_THREADS;
  status = hurray_file_reader_verify(reader, index, progress.fn ? hurray__py_progress_call : NULL,
                                     &progress, &error);
  Py_END_ALLOW_THREADS;
  file_leave(FILE_SELF);
  if (status != HURRAY_OK) hurray__py_raise_path(st, status, &error, FILE_SELF->path, NULL);
  if (hurray__py_progress_end(&progress) < 0 || status != HURRAY_OK) return NULL;
  Py_RETURN_NONE;
}

static const char *const kSliceNames[] = {"name", "start", "stop", NULL};

static PyObject *file_slice(PyObject *op, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames) {
  static const HurrayPyParser parser = {"slice", kSliceNames, 0, 3, 3};
  PyObject *a[3];
  if (hurray__py_parse(&parser, args, nargs, kwnames, a) < 0) return NULL;
  HurrayState *st = hurray__py_state_of(op);
  int64_t index = file_find(st, FILE_SELF, a[0]);
  int64_t start = 0, stop = 0;
  if (index < 0 || hurray__py_i64(st, a[1], "start", &start) < 0 ||
      hurray__py_i64(st, a[2], "stop", &stop) < 0) {
    return NULL;
  }
  HurrayTensorContext *context = NULL;
  HurrayError error = {0};
  int status;
  HurrayFileReader *reader = FILE_SELF->reader;
  file_enter(FILE_SELF);
  Py_BEGIN_ALLOW_THREADS;
  status = hurray_file_reader_get_rows(reader, (uint32_t)index, start, stop, &context, &error);
  Py_END_ALLOW_THREADS;
  file_leave(FILE_SELF);
  if (status != HURRAY_OK) return hurray__py_raise_path(st, status, &error, FILE_SELF->path, NULL);
  return hurray__py_tensor_adopt(st, context);
}

static const char *const kDaskNames[] = {"name", "chunks", NULL};

/* File.dask: hurray._dask.from_file(self, name[, chunks]) (ADR-088). */
static PyObject *file_dask(PyObject *op, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames) {
  static const HurrayPyParser parser = {"dask", kDaskNames, 0, 2, 1};
  PyObject *a[2];
  if (hurray__py_parse(&parser, args, nargs, kwnames, a) < 0 ||
      file_reader(hurray__py_state_of(op), FILE_SELF) == NULL) {
    return NULL;
  }
  PyObject *module = PyImport_ImportModule("hurray._dask");
  if (module == NULL) return NULL;
  PyObject *array = a[1] == NULL ? PyObject_CallMethod(module, "from_file", "OO", op, a[0])
                                 : PyObject_CallMethod(module, "from_file", "OOO", op, a[0], a[1]);
  Py_DECREF(module);
  return array;
}

static PyObject *file_close(PyObject *op, PyObject *unused) {
  (void)unused;
  FileObject *self = FILE_SELF;
  if (!self->closed) {
    self->closed = 1;
    if (self->busy == 0 && self->reader != NULL) {
      HurrayFileReader *reader = self->reader;
      self->reader = NULL;
      hurray_file_reader_destroy(reader); /* tensors got from it keep the mapping */
    }
  }
  Py_RETURN_NONE;
}

static PyObject *file_enter_ctx(PyObject *op, PyObject *unused) {
  (void)unused;
  if (file_reader(hurray__py_state_of(op), FILE_SELF) == NULL) return NULL;
  return Py_NewRef(op);
}

static PyObject *file_exit_ctx(PyObject *op, PyObject *const *args, Py_ssize_t nargs) {
  (void)args;
  (void)nargs;
  PyObject *done = file_close(op, NULL);
  Py_XDECREF(done);
  if (done == NULL) return NULL;
  Py_RETURN_FALSE;
}

static PyObject *file_get_closed(PyObject *op, void *closure) {
  (void)closure;
  return PyBool_FromLong(FILE_SELF->closed);
}

static PyObject *file_get_path(PyObject *op, void *closure) {
  (void)closure;
  return Py_NewRef(FILE_SELF->path);
}

static PyMethodDef file_methods[] = {
    {"keys", file_keys, METH_NOARGS,
     PyDoc_STR("keys($self, /)\n"
               "--\n"
               "\n"
               "Return a view of the tensor names, in the order they were written.\n"
               "\n"
               "Returns\n"
               "-------\n"
               "collections.abc.KeysView\n"
               "    The names; reading no data.\n"
               "\n"
               "Raises\n"
               "------\n"
               "hurray.StateError\n"
               "    The file is closed.\n"
               "\n"
               "Examples\n"
               "--------\n"
               ">>> hurray.save('m.hurray', {'b': hurray.Tensor(b'b', hurray.uint8, [1]),\n"
               "...                          'a': hurray.Tensor(b'a', hurray.uint8, [1])})\n"
               ">>> with hurray.open('m.hurray') as f:\n"
               "...     list(f.keys()), 'a' in f.keys()\n"
               "(['b', 'a'], True)\n")},
    {"items", file_items, METH_NOARGS,
     PyDoc_STR("items($self, /)\n"
               "--\n"
               "\n"
               "Return a view of (name, tensor) pairs, in the order they were written.\n"
               "\n"
               "Each tensor is got (mapped, or read in pread mode) as the view reaches\n"
               "it, as ``f[name]`` gets it.\n"
               "\n"
               "Returns\n"
               "-------\n"
               "collections.abc.ItemsView\n"
               "    The pairs.\n"
               "\n"
               "Raises\n"
               "------\n"
               "hurray.StateError\n"
               "    The file is closed.\n"
               "\n"
               "Examples\n"
               "--------\n"
               ">>> hurray.save('m.hurray', {'a': hurray.Tensor(b'ab', hurray.uint8, [2])})\n"
               ">>> with hurray.open('m.hurray') as f:\n"
               "...     [(name, t.tolist()) for name, t in f.items()]\n"
               "[('a', [97, 98])]\n")},
    {"values", file_values, METH_NOARGS,
     PyDoc_STR("values($self, /)\n"
               "--\n"
               "\n"
               "Return a view of the tensors, in the order they were written.\n"
               "\n"
               "Each tensor is got (mapped, or read in pread mode) as the view reaches\n"
               "it, as ``f[name]`` gets it.\n"
               "\n"
               "Returns\n"
               "-------\n"
               "collections.abc.ValuesView\n"
               "    The tensors.\n"
               "\n"
               "Raises\n"
               "------\n"
               "hurray.StateError\n"
               "    The file is closed.\n"
               "\n"
               "Examples\n"
               "--------\n"
               ">>> hurray.save('m.hurray', {'a': hurray.Tensor(b'ab', hurray.uint8, [2])})\n"
               ">>> with hurray.open('m.hurray') as f:\n"
               "...     [t.shape for t in f.values()]\n"
               "[(2,)]\n")},
    {"get", HURRAY_PY_CFUNC(file_get_or), METH_FASTCALL | METH_KEYWORDS,
     PyDoc_STR("get($self, name, default=None, /)\n"
               "--\n"
               "\n"
               "Return tensor `name`, or `default` when the file has none of that name.\n"
               "\n"
               "Parameters\n"
               "----------\n"
               "name : str\n"
               "    The tensor's name.\n"
               "default : object, optional\n"
               "    What to return when ``f[name]`` raises KeyError.\n"
               "\n"
               "Returns\n"
               "-------\n"
               "hurray.Tensor or object\n"
               "    ``f[name]``, or `default`.\n"
               "\n"
               "Raises\n"
               "------\n"
               "hurray.StateError\n"
               "    The file is closed.\n"
               "\n"
               "Examples\n"
               "--------\n"
               ">>> hurray.save('m.hurray', {'a': hurray.Tensor(b'ab', hurray.uint8, [2])})\n"
               ">>> with hurray.open('m.hurray') as f:\n"
               "...     f.get('a').tolist(), f.get('b'), f.get('b', 0)\n"
               "([97, 98], None, 0)\n")},
    {"tensor_metadata", file_tensor_metadata, METH_O,
     PyDoc_STR("tensor_metadata($self, name, /)\n"
               "--\n"
               "\n"
               "Return one tensor's metadata.\n"
               "\n"
               "Parameters\n"
               "----------\n"
               "name : str\n"
               "    The tensor.\n"
               "\n"
               "Returns\n"
               "-------\n"
               "dict\n"
               "    Its metadata, decoded afresh; empty when none was written.\n"
               "\n"
               "Raises\n"
               "------\n"
               "KeyError\n"
               "    The file has no tensor called `name`.\n"
               "\n"
               "Examples\n"
               "--------\n"
               ">>> import numpy as np\n"
               ">>> hurray.save(\"model.hurray\", {\"w\": np.zeros(2)},\n"
               "...             tensor_metadata={\"w\": {\"scale\": 0.5}})\n"
               ">>> with hurray.open(\"model.hurray\") as f:\n"
               "...     f.tensor_metadata(\"w\")\n"
               "{'scale': 0.5}\n")},
    {"verify", HURRAY_PY_CFUNC(file_verify), METH_FASTCALL | METH_KEYWORDS,
     PyDoc_STR("verify($self, /, name=None, *, progress=None)\n"
               "--\n"
               "\n"
               "Check the checksums of one tensor's buffers, or of every tensor's.\n"
               "\n"
               "Reads the data and recomputes each buffer's XXH3-64 checksum, with the\n"
               "GIL released, comparing it with the one stored in the index (for a .npz\n"
               "file: each member's CRC-32).\n"
               "\n"
               "Parameters\n"
               "----------\n"
               "name : str, optional\n"
               "    The tensor; by default every tensor, in file order.\n"
               "progress : callable or bool, optional\n"
               "    Called as ``progress(done, total)`` in bytes checked, from 0 to\n"
               "    the total; True draws a bar on stderr when it is a terminal. What\n"
               "    it raises is raised once the check is over.\n"
               "\n"
               "Raises\n"
               "------\n"
               "hurray.ChecksumError\n"
               "    At the first mismatch, naming the tensor and the buffer.\n"
               "hurray.UnsupportedError\n"
               "    A safetensors or .npy file, which keeps no checksums.\n"
               "KeyError\n"
               "    The file has no tensor called `name`.\n"
               "\n"
               "Examples\n"
               "--------\n"
               ">>> import numpy as np\n"
               ">>> hurray.save(\"model.hurray\", {\"w\": np.arange(8.0)})\n"
               ">>> raw = bytearray(open(\"model.hurray\", \"rb\").read())\n"
               ">>> raw[raw.find(np.arange(8.0).tobytes())] ^= 1\n"
               ">>> _ = open(\"damaged.hurray\", \"wb\").write(raw)\n"
               ">>> with hurray.open(\"damaged.hurray\") as f:\n"
               "...     f.verify(\"w\")\n"
               "Traceback (most recent call last):\n"
               "  ...\n"
               "hurray.ChecksumError: tensor 'w', buffer 0 (values): checksum mismatch ...\n")},
    {"slice", HURRAY_PY_CFUNC(file_slice), METH_FASTCALL | METH_KEYWORDS,
     PyDoc_STR("slice($self, /, name, start, stop)\n"
               "--\n"
               "\n"
               "Get rows [start, stop) of a dense tensor along its first axis.\n"
               "\n"
               "Zero-copy: only the bytes of those rows are mapped (or read, in pread\n"
               "mode). Strides are kept; no checksum is checked.\n"
               "\n"
               "Parameters\n"
               "----------\n"
               "name : str\n"
               "    The tensor.\n"
               "start, stop : int\n"
               "    The rows, 0 <= start <= stop <= shape[0].\n"
               "\n"
               "Returns\n"
               "-------\n"
               "hurray.Tensor\n"
               "    The rows, with the tensor's other dimensions.\n"
               "\n"
               "Raises\n"
               "------\n"
               "KeyError\n"
               "    The file has no tensor called `name`.\n"
               "hurray.UnsupportedError\n"
               "    A layout other than dense.\n"
               "hurray.InvalidArgumentError\n"
               "    A 0-d tensor, or rows outside [0, shape[0]].\n"
               "\n"
               "Examples\n"
               "--------\n"
               ">>> import numpy as np\n"
               ">>> hurray.save(\"model.hurray\", {\"w\": np.arange(12.0).reshape(4, 3)})\n"
               ">>> with hurray.open(\"model.hurray\") as f:\n"
               "...     f.slice(\"w\", 1, 3).tolist()\n"
               "[[3.0, 4.0, 5.0], [6.0, 7.0, 8.0]]\n")},
    {"dask", HURRAY_PY_CFUNC(file_dask), METH_FASTCALL | METH_KEYWORDS,
     PyDoc_STR("dask($self, /, name, chunks='auto')\n"
               "--\n"
               "\n"
               "A Dask array over a dense tensor, its rows read as chunks ask (ADR-088).\n"
               "\n"
               "Each chunk maps the rows it spans through `slice` of the file opened\n"
               "for it alone, and the mapping goes with the chunk, so a computation over\n"
               "a file larger than memory holds only the chunks in flight (one mapping\n"
               "for all would keep every page touched resident). The array pickles to\n"
               "the file's absolute path and the name: Dask workers open the file\n"
               "themselves.\n"
               "\n"
               "Parameters\n"
               "----------\n"
               "name : str\n"
               "    The tensor.\n"
               "chunks : int, tuple or str, optional\n"
               "    As ``dask.array.from_array`` takes them.\n"
               "\n"
               "Returns\n"
               "-------\n"
               "dask.array.Array\n"
               "    Its chunks are read-only NumPy arrays over the file's pages.\n"
               "\n"
               "Raises\n"
               "------\n"
               "KeyError\n"
               "    The file has no tensor called `name`.\n"
               "hurray.UnsupportedError\n"
               "    A layout other than dense, a 0-d tensor, or a dtype NumPy has\n"
               "    no form for.\n"
               "\n"
               "Examples\n"
               "--------\n"
               ">>> import numpy as np\n"
               ">>> hurray.save(\"model.hurray\", {\"w\": np.arange(12.0).reshape(4, 3)})\n"
               ">>> with hurray.open(\"model.hurray\") as f:\n"
               "...     f.dask(\"w\", chunks=(2, 3)).sum().compute()\n"
               "np.float64(66.0)\n")},
    {"close", file_close, METH_NOARGS,
     PyDoc_STR("close($self, /)\n"
               "--\n"
               "\n"
               "Close the file.\n"
               "\n"
               "Closing twice does nothing. Tensors got from the file stay valid: each\n"
               "holds its own reference on the mapping. Any other use of the File\n"
               "afterwards raises hurray.StateError.\n"
               "\n"
               "Examples\n"
               "--------\n"
               ">>> import numpy as np\n"
               ">>> hurray.save(\"model.hurray\", {\"w\": np.ones(2)})\n"
               ">>> f = hurray.open(\"model.hurray\")\n"
               ">>> w = f[\"w\"]\n"
               ">>> f.close()\n"
               ">>> f.closed, w.tolist()\n"
               "(True, [1.0, 1.0])\n")},
    {"__enter__", file_enter_ctx, METH_NOARGS, NULL},
    {"__reduce__", file_reduce, METH_NOARGS, NULL},
    {"__exit__", HURRAY_PY_CFUNC(file_exit_ctx), METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef file_getset[] = {
    {"metadata", file_get_metadata, NULL,
     PyDoc_STR("The file's metadata, a dict (empty when none was written).\n\n"
               "Values are bool, int, float, str, list and dict, decoded afresh on\n"
               "each access."),
     NULL},
    {"info", file_get_info, NULL,
     PyDoc_STR("Whole-file facts, a dict.\n\n"
               "Keys: format, version, alignment, tensors, buffers, file_size,\n"
               "data_bytes."),
     NULL},
    {"closed", file_get_closed, NULL, PyDoc_STR("Whether close() was called."), NULL},
    {"path", file_get_path, NULL, PyDoc_STR("The path the file was opened with."), NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot file_slots[] = {
    {Py_tp_dealloc, file_dealloc},
    {Py_tp_repr, file_repr},
    {Py_tp_iter, file_iter},
    {Py_tp_richcompare, file_richcompare},
    {Py_mp_length, file_length},
    {Py_mp_subscript, file_subscript},
    {Py_mp_ass_subscript, file_ass_subscript},
    {Py_sq_contains, file_contains},
    {Py_tp_methods, file_methods},
    {Py_tp_getset, file_getset},
    {Py_tp_doc,
     (void *)PyDoc_STR("An open Hurray file: a read-only mapping of tensor names to tensors.\n"
                       "\n"
                       "Made by `hurray.open`; a collections.abc.Mapping. ``f[name]`` finds a\n"
                       "tensor in constant time and maps it without reading its data;\n"
                       "``len(f)``, ``name in f``, iteration, `keys`, `items`, `values` and\n"
                       "`get` follow the file's order. A File is a context manager that closes\n"
                       "it; tensors got from it stay valid after close().\n"
                       "\n"
                       "See Also\n"
                       "--------\n"
                       "open, load\n"
                       "\n"
                       "Examples\n"
                       "--------\n"
                       ">>> import numpy as np\n"
                       ">>> hurray.save(\"model.hurray\", {\"w\": np.arange(3.0)}, {\"arch\": "
                       "\"tiny\"})\n"
                       ">>> with hurray.open(\"model.hurray\") as f:\n"
                       "...     len(f), \"w\" in f, f.metadata, f[\"w\"].tolist()\n"
                       "(1, True, {'arch': 'tiny'}, [0.0, 1.0, 2.0])\n"
                       ">>> f[\"w\"]\n"
                       "Traceback (most recent call last):\n"
                       "  ...\n"
                       "hurray.StateError: I/O operation on a closed hurray.File "
                       "('model.hurray')\n")},
    {0, NULL},
};

PyType_Spec hurray__py_file_spec = {
    .name = "hurray.File",
    .basicsize = sizeof(FileObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = file_slots,
};

int hurray__py_file_register(PyTypeObject *file_type) {
  PyObject *abc = PyImport_ImportModule("collections.abc");
  PyObject *mapping = abc == NULL ? NULL : PyObject_GetAttrString(abc, "Mapping");
  PyObject *done = mapping == NULL ? NULL : PyObject_CallMethod(mapping, "register", "O", file_type);
  Py_XDECREF(abc);
  Py_XDECREF(mapping);
  Py_XDECREF(done);
  return done == NULL ? -1 : 0;
}

/* ============================================================================================
 * hurray.open, hurray.load
 * ============================================================================================ */

static const char *const kOpenNames[] = {"path", "mmap", "writable", NULL};

/* open(path, framework="pt") and load(path, device="cuda"), as safetensors and torch.load take
 * them: the tensors are in CPU memory, for whichever library takes them. -1 with TypeError. */
static int refuse_placement(const char *fname, PyObject *kwnames) {
  static const char *const kNames[] = {"device", "map_location", "framework"};
  for (Py_ssize_t i = 0; kwnames != NULL && i < PyTuple_GET_SIZE(kwnames); i++) {
    for (size_t k = 0; k < sizeof kNames / sizeof *kNames; k++) {
      if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, i), kNames[k]) == 0) {
        PyErr_Format(PyExc_TypeError,
                     "%s() takes no %s: its tensors are in CPU memory, for every library "
                     "(numpy.asarray(t), torch.from_dlpack(t)); t.to_device(device) copies one "
                     "to a device",
                     fname, kNames[k]);
        return -1;
      }
    }
  }
  return 0;
}

static PyObject *open_file(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames) {
  static const HurrayPyParser parser = {"open", kOpenNames, 0, 1, 1};
  PyObject *a[3];
  if (refuse_placement("open", kwnames) < 0) return NULL;
  if (hurray__py_parse(&parser, args, nargs, kwnames, a) < 0) return NULL;
  HurrayState *st = PyModule_GetState(module);
  int mmap = a[1] == NULL ? 1 : PyObject_IsTrue(a[1]);
  int writable = a[2] == NULL ? 0 : PyObject_IsTrue(a[2]);
  if (mmap < 0 || writable < 0) return NULL;
  uint32_t count = 0;
  PyObject *display = NULL;
  HurrayFileReader *reader = open_reader(st, a[0], mmap, writable, &count, &display);
  if (reader == NULL) return NULL;
  FileObject *self = PyObject_New(FileObject, st->file_type);
  if (self == NULL) {
    hurray_file_reader_destroy(reader);
    Py_DECREF(display);
    return NULL;
  }
  self->reader = reader;
  self->path = display;
  self->names = NULL;
  self->count = count;
  self->busy = 0;
  self->closed = 0;
  self->pread = !mmap;
  return (PyObject *)self;
}

static const char *const kLoadNames[] = {"path", "mmap", "verify", "writable", "progress", NULL};

static PyObject *load(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                      PyObject *kwnames) {
  static const HurrayPyParser parser = {"load", kLoadNames, 0, 1, 1};
  PyObject *a[5];
  if (refuse_placement("load", kwnames) < 0) return NULL;
  if (hurray__py_parse(&parser, args, nargs, kwnames, a) < 0) return NULL;
  HurrayState *st = PyModule_GetState(module);
  int mmap = a[1] == NULL ? 1 : PyObject_IsTrue(a[1]);
  int verify = a[2] == NULL ? 0 : PyObject_IsTrue(a[2]);
  int writable = a[3] == NULL ? 0 : PyObject_IsTrue(a[3]);
  if (mmap < 0 || verify < 0 || writable < 0) return NULL;
  uint32_t count = 0;
  PyObject *display = NULL;
  HurrayPyProgress progress = {0};
  if (hurray__py_progress_arg(a[4], &progress) < 0) return NULL;
  HurrayFileReader *reader = open_reader(st, a[0], mmap, writable, &count, &display);
  if (reader == NULL) return hurray__py_progress_end(&progress), NULL;
  HurrayError error = {0};
  HurrayFileInfo file_info;
  int status = hurray_file_reader_info(reader, &file_info, &error);
  /* Each pass over the data counts: verifying reads it all, and so does copying it in;
   * a mapped load reads nothing, and reports its data done at the end. */
  uint64_t passes = (uint64_t)verify + (uint64_t)!mmap;
  progress.total = file_info.data_bytes * (passes ? passes : 1);
  hurray__py_progress_call(&progress, 0, progress.total);
  if (status == HURRAY_OK && verify && !progress.failed) {
    Py_BEGIN_ALLOW_THREADS;
    status = hurray_file_reader_verify(reader, HURRAY_FILE_WHOLE,
                                       progress.fn ? hurray__py_progress_call : NULL, &progress,
                                       &error);
    Py_END_ALLOW_THREADS;
    progress.before = file_info.data_bytes;
  }
  PyObject *result =
      status == HURRAY_OK ? PyDict_New() : hurray__py_raise_path(st, status, &error, display, NULL);
  for (uint32_t i = 0; result != NULL && !progress.failed && i < count; i++) {
    HurrayFileTensorInfo info;
    HurrayTensorContext *context = NULL;
    status = hurray_file_reader_tensor_info(reader, i, &info, &error);
    if (status == HURRAY_OK) {
      if (mmap) {
        status = hurray_file_reader_get(reader, i, 0, &context, &error);
      } else {
        Py_BEGIN_ALLOW_THREADS;
        status = hurray_file_reader_get(reader, i, 0, &context, &error);
        Py_END_ALLOW_THREADS;
      }
    }
    PyObject *tensor = status == HURRAY_OK
                           ? hurray__py_tensor_adopt(st, context)
                           : hurray__py_raise_path(st, status, &error, display, NULL);
    if (tensor == NULL || PyDict_SetItemString(result, info.name, tensor) < 0) Py_CLEAR(result);
    Py_XDECREF(tensor);
    if (result != NULL && !mmap && progress.fn != NULL) {
      progress.before += info.data_bytes;
      hurray__py_progress_call(&progress, 0, progress.total);
    }
  }
  if (result != NULL && mmap && !verify && progress.fn != NULL) {
    progress.before = progress.total;
    hurray__py_progress_call(&progress, 0, progress.total);
  }
  hurray_file_reader_destroy(reader); /* the tensors keep the mapping */
  Py_DECREF(display);
  if (hurray__py_progress_end(&progress) < 0) Py_CLEAR(result);
  return result;
}

/* ============================================================================================
 * hurray.convert
 * ============================================================================================ */

static const char *const kConvertNames[] = {"input",         "output",  "alignment",
                                            "name",          "metadata_as_json",
                                            "drop_metadata", "durable", "max_shard_size",
                                            "progress",      NULL};
enum {
  CV_INPUT,
  CV_OUTPUT,
  CV_ALIGNMENT,
  CV_NAME,
  CV_JSON,
  CV_DROP,
  CV_DURABLE,
  CV_MAX_SHARD_SIZE,
  CV_PROGRESS,
  CV_COUNT
};

static PyObject *convert(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                         PyObject *kwnames) {
  static const HurrayPyParser parser = {"convert", kConvertNames, 0, 2, 2};
  PyObject *a[CV_COUNT];
  if (hurray__py_parse(&parser, args, nargs, kwnames, a) < 0) return NULL;
  HurrayState *st = PyModule_GetState(module);
  HurrayConvertOptions options = {0};
  long long alignment = 0;
  if (a[CV_ALIGNMENT] != NULL && a[CV_ALIGNMENT] != Py_None &&
      hurray__py_int_in_range(st, a[CV_ALIGNMENT], 1, HURRAY_FILE_MAX_ALIGNMENT, "alignment",
                              &alignment) < 0) {
    return NULL;
  }
  options.alignment = (uint32_t)alignment;
  if (a[CV_MAX_SHARD_SIZE] != NULL && a[CV_MAX_SHARD_SIZE] != Py_None &&
      shard_size_arg(st, a[CV_MAX_SHARD_SIZE], &options.max_shard_size) < 0) {
    return NULL;
  }
  int json = a[CV_JSON] == NULL ? 0 : PyObject_IsTrue(a[CV_JSON]);
  int drop = a[CV_DROP] == NULL ? 0 : PyObject_IsTrue(a[CV_DROP]);
  int durable = a[CV_DURABLE] == NULL ? 1 : PyObject_IsTrue(a[CV_DURABLE]);
  if (json < 0 || drop < 0 || durable < 0) return NULL;
  if (json) options.flags |= HURRAY_CONVERT_METADATA_JSON;
  if (drop) options.flags |= HURRAY_CONVERT_DROP_METADATA;
  if (!durable) options.flags |= HURRAY_CONVERT_NOT_DURABLE;

  PyObject *input = NULL, *output = NULL, *result = NULL;
  Arena arena = {NULL};
  HurrayPyProgress progress = {0};
  if (hurray__py_progress_arg(a[CV_PROGRESS], &progress) < 0) return NULL;
  if (progress.fn != NULL) {
    options.progress = hurray__py_progress_call;
    options.progress_context = &progress;
  }
  if (a[CV_NAME] != NULL && a[CV_NAME] != Py_None) {
    if (!PyUnicode_Check(a[CV_NAME])) {
      return PyErr_Format(PyExc_TypeError, "name must be a str or None, not %.200s",
                          Py_TYPE(a[CV_NAME])->tp_name);
    }
    options.name = arena_utf8(st, &arena, a[CV_NAME], 0, "name", NULL);
    if (options.name == NULL) goto done;
  }
  if (!PyUnicode_FSConverter(a[CV_INPUT], &input) ||
      !PyUnicode_FSConverter(a[CV_OUTPUT], &output)) {
    goto done;
  }
  HurrayError error = {0};
  int status;
  const char *in = PyBytes_AS_STRING(input), *out = PyBytes_AS_STRING(output);
  Py_BEGIN_ALLOW_THREADS;
  status = hurray_convert(in, out, &options, &error);
  Py_END_ALLOW_THREADS;
  result = status == HURRAY_OK ? Py_NewRef(Py_None) : hurray__py_raise_path(st, status, &error, a[CV_INPUT],
                                                                       a[CV_OUTPUT]);

done:
  if (hurray__py_progress_end(&progress) < 0) Py_CLEAR(result);
  Py_XDECREF(input);
  Py_XDECREF(output);
  arena_free(&arena);
  return result;
}

PyMethodDef hurray__py_file_functions[] = {
    {"save", HURRAY_PY_CFUNC(save), METH_FASTCALL | METH_KEYWORDS,
     PyDoc_STR(
         "save($module, /, path, tensors, metadata=None, *, alignment=64, tensor_metadata=None, "
         "durable=True, max_shard_size=None, progress=None)\n"
         "--\n"
         "\n"
         "Write tensors to a Hurray file, atomically.\n"
         "\n"
         "Nothing is copied in Python: the writer reads each tensor's memory\n"
         "directly, with the GIL released. Each tensor is written as the bytes\n"
         "its arrays address, strides kept.\n"
         "\n"
         "Parameters\n"
         "----------\n"
         "path : str, bytes or os.PathLike\n"
         "    Where to write. A path whose extension names another format\n"
         "    (.safetensors, .npy, .npz) is refused: save to a .hurray path and\n"
         "    `convert` it.\n"
         "tensors : mapping of str to tensor\n"
         "    Written in the mapping's order. A value may be a hurray.Tensor of\n"
         "    any layout (per-channel, block, sparse, paged, composite included),\n"
         "    a NumPy array, or any DLPack producer (a CPU torch.Tensor, a JAX\n"
         "    array). Only CPU memory can be saved.\n"
         "metadata : dict, optional\n"
         "    The file's metadata: str keys to None, bool, int (exact, up to 1024\n"
         "    digits), float, str, list, tuple or dict, and NumPy's scalars,\n"
         "    nested up to 16 levels: every JSON value. Anything else raises\n"
         "    TypeError naming where it stands (\"metadata at config.layers[2]\").\n"
         "alignment : int, optional\n"
         "    Where every buffer starts in the file, and so in memory once\n"
         "    mapped: a power of two from 64 to 2 MiB (4096 suits O_DIRECT).\n"
         "tensor_metadata : dict, optional\n"
         "    Tensor name to a metadata dict of the same kind.\n"
         "durable : bool, optional\n"
         "    True (the default): the file and its directory are fsynced before\n"
         "    save returns, so the new file survives a power loss. False skips\n"
         "    both fsyncs: the file still replaces `path` atomically, but a power\n"
         "    loss or a crash of the system before the kernel writes it back may\n"
         "    leave the previous file or one whose data never reached the disk.\n"
         "max_shard_size : int or str, optional\n"
         "    Write a sharded checkpoint, as ``save_pretrained(max_shard_size=...)``\n"
         "    does: `path` is its directory (made if missing; or the index's path,\n"
         "    ``NAME.hurray.index.json``), each shard\n"
         "    ``model-00001-of-0000N.hurray`` at most this many bytes (a larger\n"
         "    tensor alone in its shard; '5GB' is 5 * 10**9 bytes, '2GiB'\n"
         "    2 * 2**30), beside ``model.hurray.index.json`` in Hugging Face's\n"
         "    shape (``metadata``, ``weight_map``). Every shard carries\n"
         "    `metadata`. The shards are written aside and moved into place with\n"
         "    the index only once all are complete, so a failed save leaves a\n"
         "    previous checkpoint as it was. `load` and `open` read the directory.\n"
         "progress : callable or bool, optional\n"
         "    Called as ``progress(done, total)`` in data bytes written: with 0\n"
         "    at the start, then after each tensor, ending at the total. True\n"
         "    draws a bar on stderr when it is a terminal. An exception it raises\n"
         "    abandons the save (nothing appears at `path`) and is raised.\n"
         "\n"
         "Raises\n"
         "------\n"
         "TypeError\n"
         "    A value that is not a tensor, or metadata of another type.\n"
         "hurray.UnsupportedError\n"
         "    A tensor outside CPU memory.\n"
         "hurray.InvalidArgumentError\n"
         "    A bad alignment, a path naming another format, a tensor_metadata\n"
         "    name not among `tensors`, or an int beyond int64.\n"
         "hurray.LimitError\n"
         "    Metadata nested deeper than 16 levels.\n"
         "OSError\n"
         "    The file could not be written: hurray.PermissionError and the like,\n"
         "    carrying errno and the file name, or hurray.InputOutputError (a\n"
         "    directory, FIFO or device at `path`).\n"
         "\n"
         "See Also\n"
         "--------\n"
         "load, open, convert\n"
         "\n"
         "Notes\n"
         "-----\n"
         "The file is written under a temporary name in the same directory\n"
         "(`path` + '.tmp-<pid>-<n>'), flushed to disk (unless durable=False)\n"
         "and renamed over `path`.\n"
         "On any error nothing appears at `path` and a previous file there is\n"
         "left untouched; a process killed mid-save leaves its temporary behind,\n"
         "never a partial `path`. Only a regular file is replaced: a symlink's\n"
         "final target is replaced in its own directory, and the link stays.\n"
         "\n"
         "Examples\n"
         "--------\n"
         ">>> import numpy as np\n"
         ">>> hurray.save(\"model.hurray\", {\"w\": np.eye(2, dtype=np.float32)},\n"
         "...             {\"arch\": \"tiny\"}, tensor_metadata={\"w\": {\"trained\": True}})\n"
         ">>> with hurray.open(\"model.hurray\") as f:\n"
         "...     f.metadata, f.tensor_metadata(\"w\"), f[\"w\"].tolist()\n"
         "({'arch': 'tiny'}, {'trained': True}, [[1.0, 0.0], [0.0, 1.0]])\n"
         "\n"
         "A sharded checkpoint, loaded from its directory:\n"
         "\n"
         ">>> import os\n"
         ">>> layers = {f\"layer{i}\": np.zeros(256, np.float32) for i in range(4)}\n"
         ">>> hurray.save(\"checkpoint\", layers, max_shard_size=\"2KiB\")\n"
         ">>> sorted(os.listdir(\"checkpoint\"))[:2]\n"
         "['model-00001-of-00002.hurray', 'model-00002-of-00002.hurray']\n"
         ">>> list(hurray.load(\"checkpoint\"))\n"
         "['layer0', 'layer1', 'layer2', 'layer3']\n")},
    {"load", HURRAY_PY_CFUNC(load), METH_FASTCALL | METH_KEYWORDS,
     PyDoc_STR("load($module, /, path, *, mmap=True, verify=False, writable=False, "
               "progress=None)\n"
               "--\n"
               "\n"
               "Load every tensor of a file.\n"
               "\n"
               "The file is fully validated first: header, index, every descriptor,\n"
               "offset and name. The file may be Hurray, safetensors, .npy or .npz,\n"
               "told apart by its bytes, not its name; the tensors of the other\n"
               "formats are dense, a .npy file's named after the file's stem, and each\n"
               "is a view of the mapping where its bytes lie at a multiple of 64 in the\n"
               "file, else a copy in 64-aligned memory (big-endian, deflated or\n"
               "misaligned data).\n"
               "\n"
               "Parameters\n"
               "----------\n"
               "path : str, os.PathLike, bytes-like or binary file object\n"
               "    The file: a path (bytes without a NUL are a path, as for os.open);\n"
               "    the bytes of a file (bytes, bytearray, memoryview, mmap: a Hurray\n"
               "    image on its alignment is read in place, anything else copied once);\n"
               "    or a file object opened 'rb' (through its descriptor when it has one\n"
               "    and stands at its start, else read() whole).\n"
               "mmap : bool, optional\n"
               "    True: zero-copy, read-only views of one copy-on-write mapping of\n"
               "    the file, which they keep alive (a consumer that writes anyway\n"
               "    changes a private copy, never the file). False, for files others\n"
               "    may change: each tensor read into fresh, writable, aligned memory\n"
               "    (huge pages for large tensors where the system has them).\n"
               "verify : bool, optional\n"
               "    Check every checksum before returning anything: a Hurray file's\n"
               "    buffers (read with pread, padding included), or an .npz file's\n"
               "    CRC-32s. safetensors and .npy files keep none.\n"
               "writable : bool, optional\n"
               "    With mmap=True, the views are writable, as with NumPy's\n"
               "    ``mmap_mode='c'`` and ``torch.load(mmap=True)``: a write changes\n"
               "    this process's private copy of the page, never the file. Every\n"
               "    consumer then takes the tensors without a copy, JAX's\n"
               "    ``jax.dlpack.from_dlpack`` included (it asks for a legacy DLPack\n"
               "    capsule, which cannot say read-only, so a read-only tensor is\n"
               "    exported to it as a copy). Tensors read with mmap=False are\n"
               "    writable either way.\n"
               "progress : callable or bool, optional\n"
               "    Called as ``progress(done, total)`` in bytes, from 0 to the total,\n"
               "    which counts the data once for each pass over it: verifying and\n"
               "    reading with mmap=False are a pass each; a mapped load reads\n"
               "    nothing and reports its data done at the end. True draws a bar on\n"
               "    stderr when it is a terminal. What it raises is raised.\n"
               "\n"
               "Returns\n"
               "-------\n"
               "dict of str to hurray.Tensor\n"
               "    In file order.\n"
               "\n"
               "Raises\n"
               "------\n"
               "hurray.FormatError\n"
               "    A malformed file (a ValueError).\n"
               "hurray.ChecksumError\n"
               "    With verify=True, a buffer whose checksum does not match; it names\n"
               "    the tensor and the buffer.\n"
               "hurray.UnsupportedError\n"
               "    A newer format version, or verify=True on a file without\n"
               "    checksums.\n"
               "hurray.LimitError\n"
               "    A file past a limit.\n"
               "OSError\n"
               "    The file cannot be opened or read: hurray.FileNotFoundError,\n"
               "    hurray.PermissionError and the like, carrying errno and the file\n"
               "    name.\n"
               "\n"
               "Warnings\n"
               "--------\n"
               "A file truncated while mapped tensors live makes touching them die of\n"
               "SIGBUS, as with any mmap: use mmap=False for files others may change.\n"
               "\n"
               "See Also\n"
               "--------\n"
               "open : Lazily, one tensor at a time.\n"
               "save\n"
               "\n"
               "Examples\n"
               "--------\n"
               ">>> import numpy as np\n"
               ">>> hurray.save(\"model.hurray\", {\"w\": np.arange(4, dtype=np.int32)})\n"
               ">>> tensors = hurray.load(\"model.hurray\")\n"
               ">>> tensors[\"w\"].tolist(), tensors[\"w\"].readonly\n"
               "([0, 1, 2, 3], True)\n"
               ">>> hurray.load(\"model.hurray\", mmap=False)[\"w\"].readonly\n"
               "False\n"
               ">>> hurray.load(\"model.hurray\", writable=True)[\"w\"].readonly\n"
               "False\n")},
    {"open", HURRAY_PY_CFUNC(open_file), METH_FASTCALL | METH_KEYWORDS,
     PyDoc_STR("open($module, /, path, *, mmap=True, writable=False)\n"
               "--\n"
               "\n"
               "Open a file lazily, as a hurray.File.\n"
               "\n"
               "Validates the file and reads its index, but no data: ``f[name]`` then\n"
               "maps (or reads) one tensor. The file may be\n"
               "Hurray, safetensors, .npy or .npz, told apart by its bytes, not its\n"
               "name.\n"
               "\n"
               "Parameters\n"
               "----------\n"
               "path : str, os.PathLike, bytes-like or binary file object\n"
               "    The file: a path (bytes without a NUL are a path, as for os.open);\n"
               "    the bytes of a file (bytes, bytearray, memoryview, mmap: a Hurray\n"
               "    image on its alignment is read in place, anything else copied once);\n"
               "    or a file object opened 'rb' (through its descriptor when it has one\n"
               "    and stands at its start, else read() whole).\n"
               "mmap : bool, optional\n"
               "    True: tensors are read-only views of a copy-on-write mapping.\n"
               "    False: each tensor is read into fresh, writable memory when it\n"
               "    is got.\n"
               "writable : bool, optional\n"
               "    With mmap=True, the views are writable: a write changes this\n"
               "    process's private copy of the page, never the file. Every\n"
               "    tensor of the File views the same mapping, so a write through\n"
               "    one is seen by every tensor got from it over those bytes (as\n"
               "    views of one ``np.memmap(mode='c')`` share their writes).\n"
               "\n"
               "Returns\n"
               "-------\n"
               "hurray.File\n"
               "    A read-only mapping of names to tensors, and a context manager.\n"
               "\n"
               "Raises\n"
               "------\n"
               "hurray.FormatError, hurray.ChecksumError, hurray.LimitError\n"
               "    A malformed or damaged index.\n"
               "OSError\n"
               "    The file cannot be opened (hurray.InputOutputError; a missing\n"
               "    file is also a FileNotFoundError, an unreadable one a\n"
               "    PermissionError, with errno and filename).\n"
               "\n"
               "See Also\n"
               "--------\n"
               "load : Every tensor at once.\n"
               "File\n"
               "\n"
               "Examples\n"
               "--------\n"
               ">>> import numpy as np\n"
               ">>> hurray.save(\"model.hurray\", {\"a\": np.zeros(3), \"b\": np.ones(2)})\n"
               ">>> with hurray.open(\"model.hurray\") as f:\n"
               "...     list(f), f[\"b\"].tolist()\n"
               "(['a', 'b'], [1.0, 1.0])\n")},
    {"convert", HURRAY_PY_CFUNC(convert), METH_FASTCALL | METH_KEYWORDS,
     PyDoc_STR("convert($module, /, input, output, *, alignment=None, name=None, "
               "metadata_as_json=False, drop_metadata=False, durable=True, "
               "max_shard_size=None, progress=None)\n"
               "--\n"
               "\n"
               "Convert a tensor file between Hurray, safetensors, .npy, .npz and GGUF.\n"
               "\n"
               "The formats are told by the extensions (.hurray or .hry,\n"
               ".safetensors, .npy, .npz, .gguf; an input's by its bytes when its\n"
               "extension says nothing). The data streams with the GIL released:\n"
               "memory holds\n"
               "the headers only. Checksums of the input are verified on the way.\n"
               "\n"
               "Parameters\n"
               "----------\n"
               "input : str, bytes or os.PathLike\n"
               "    The file to convert, or a sharded checkpoint (its directory or\n"
               "    its ``*.index.json``), read as one input.\n"
               "output : str, bytes or os.PathLike\n"
               "    The file to write; it appears atomically, as with `save`, and may\n"
               "    be `input` itself.\n"
               "alignment : int, optional\n"
               "    Hurray output: where every buffer starts (a power of two, 64 to\n"
               "    2 MiB). safetensors output: where the data region starts (8 or\n"
               "    more; default 8).\n"
               "name : str, optional\n"
               "    A .npy input's tensor name (default: the file's stem), or the one\n"
               "    tensor a .npy output takes.\n"
               "metadata_as_json : bool, optional\n"
               "    Write non-string file metadata into safetensors' string-only\n"
               "    metadata as JSON text.\n"
               "drop_metadata : bool, optional\n"
               "    Drop metadata the output has no place for instead of refusing.\n"
               "durable : bool, optional\n"
               "    As for `save`: False skips the fsyncs of the output and its\n"
               "    directory; it still replaces `output` atomically.\n"
               "max_shard_size : int or str, optional\n"
               "    Write `output` as a sharded checkpoint of Hurray shards, as\n"
               "    ``save(max_shard_size=...)`` does: `output` is its directory or\n"
               "    ``NAME.hurray.index.json``.\n"
               "progress : callable or bool, optional\n"
               "    Called as ``progress(done, total)`` in data bytes written, from 0,\n"
               "    at least every 64 MiB and after each tensor, to the total. True\n"
               "    draws a bar on stderr when it is a terminal. What it raises is\n"
               "    raised once the conversion is over (the output is complete).\n"
               "\n"
               "Raises\n"
               "------\n"
               "hurray.UnsupportedError\n"
               "    What the output cannot hold -- a layout other than dense, a dtype\n"
               "    the format lacks, metadata without a place -- naming the tensor.\n"
               "    Nothing is dropped silently.\n"
               "hurray.ChecksumError\n"
               "    A damaged input.\n"
               "hurray.FormatError\n"
               "    A malformed input.\n"
               "hurray.InvalidArgumentError\n"
               "    An extension that names no format, or `name` naming no tensor.\n"
               "\n"
               "See Also\n"
               "--------\n"
               "save, load\n"
               "\n"
               "Examples\n"
               "--------\n"
               ">>> import numpy as np\n"
               ">>> np.save(\"act.npy\", np.arange(6, dtype=np.int16).reshape(2, 3))\n"
               ">>> hurray.convert(\"act.npy\", \"act.hurray\", name=\"layer3\")\n"
               ">>> hurray.load(\"act.hurray\")[\"layer3\"].tolist()\n"
               "[[0, 1, 2], [3, 4, 5]]\n"
               ">>> q = hurray.Tensor(bytes(8), hurray.dtype.int4, [16])\n"
               ">>> hurray.save(\"q.hurray\", {\"q\": q})\n"
               ">>> hurray.convert(\"q.hurray\", \"q.safetensors\")\n"
               "Traceback (most recent call last):\n"
               "  ...\n"
               "hurray.UnsupportedError: tensor 'q' is int4, which safetensors has no dtype "
               "for\n")},
    {NULL, NULL, 0, NULL},
};
