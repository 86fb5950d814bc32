/* file_source.c -- what hurray.load and hurray.open read: a path, the bytes of a file, or a
 * binary file object (docs/impl/python-bindings.md, "File I/O").
 *
 * A path is opened as it is. The bytes of a Hurray file that start where the file's alignment
 * says they must are read in place (hurray_file_reader_open_memory), zero-copy, as read-only
 * views that keep the buffer exported; any other bytes (another format, a misaligned start,
 * mmap=False or writable=True) are written once into an anonymous memory file (memfd), which
 * the reader then opens like any file, so every format and every option works the same. A file
 * object with a real descriptor, at its start, is opened through that descriptor
 * (/proc/self/fd/N: the reader maps the file itself); any other file object is read() whole
 * and taken as bytes.
 */
#define _GNU_SOURCE /* memfd_create */
#include "hurray_python.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static const uint8_t kMagic[8] = {0x89, 'H', 'R', 'Y', '\r', '\n', 0x1A, '\n'};
enum { ALIGNMENT_LOG2_AT = 12, MIN_ALIGNMENT_LOG2 = 6, MAX_ALIGNMENT_LOG2 = 21 };

/* Opens `path` (a filesystem path in bytes) with `flags`, the GIL released. */
static int open_path(const char *path, uint32_t flags, HurrayFileReader **out, HurrayError *error) {
  int status;
  Py_BEGIN_ALLOW_THREADS;
  status = hurray_file_reader_open(path, flags, out, error);
  Py_END_ALLOW_THREADS;
  return status;
}

/* Opens the open file description `fd` refers to, whatever the reader needs of it (a mapping,
 * pread, the foreign formats' readers), through its /proc/self/fd name. */
static int open_descriptor(int fd, uint32_t flags, HurrayFileReader **out, HurrayError *error) {
  char path[32];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  return open_path(path, flags, out, error);
}

/* Whether `view` is a Hurray file image that the reader can take in place: its magic, and its
 * first byte on the boundary the header's alignment names (checked again by the reader). */
static int readable_in_place(const Py_buffer *view, uint32_t flags) {
  if (flags & (HURRAY_FILE_OPEN_PREAD | HURRAY_FILE_OPEN_WRITABLE)) return 0;
  if (view->len < HURRAY_FILE_HEADER_SIZE) return 0;
  const uint8_t *bytes = view->buf;
  if (memcmp(bytes, kMagic, sizeof kMagic) != 0) return 0;
  unsigned log2 = bytes[ALIGNMENT_LOG2_AT];
  if (log2 < MIN_ALIGNMENT_LOG2 || log2 > MAX_ALIGNMENT_LOG2) return 0;
  return ((uintptr_t)view->buf & (((uintptr_t)1 << log2) - 1)) == 0;
}

/* Copies `len` bytes into a new memory file; its descriptor, or -1 with errno. */
static int memory_file(const void *data, size_t len) {
  int fd = memfd_create("hurray-bytes", MFD_CLOEXEC);
  for (size_t done = 0; fd >= 0 && done < len;) {
    ssize_t n = write(fd, (const char *)data + done, len - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int saved = errno ? errno : EIO;
      close(fd);
      errno = saved;
      return -1;
    }
    done += (size_t)n;
  }
  return fd;
}

/* The bytes of a file in `view` (which this takes: released here, or kept by the reader). */
static int open_bytes(Py_buffer *view, uint32_t flags, HurrayFileReader **out, HurrayError *error) {
  if (readable_in_place(view, flags)) {
    const void *data = view->buf;
    uint64_t size = (uint64_t)view->len;
    void *owner = hurray__py_owner_new_view(view); /* moves the export into the owner */
    if (owner == NULL) return -1;
    return hurray_file_reader_open_memory(data, size, hurray__py_owner_release_view, owner, out,
                                          error);
  }
  int fd;
  Py_BEGIN_ALLOW_THREADS;
  fd = memory_file(view->buf, (size_t)view->len);
  Py_END_ALLOW_THREADS;
  PyBuffer_Release(view);
  if (fd < 0) {
    error->system_errno = errno;
    snprintf(error->message, sizeof error->message,
             "cannot copy the bytes into a memory file: %s", strerror(errno));
    return HURRAY_EIO;
  }
  int status = open_descriptor(fd, flags, out, error);
  close(fd); /* the reader holds the file now */
  return status;
}

/* A file object's descriptor when the reader can open the file itself: it has one, and it is
 * at the start of the file (what torch.load and np.load read from). -1 when not, with no
 * exception; -2 with one. */
static int file_object_descriptor(PyObject *file) {
  PyObject *fd_obj = PyObject_CallMethod(file, "fileno", NULL);
  if (fd_obj == NULL) {
    /* io.UnsupportedOperation (an OSError) or AttributeError: no descriptor of its own */
    if (!PyErr_ExceptionMatches(PyExc_OSError) && !PyErr_ExceptionMatches(PyExc_AttributeError))
      return -2;
    PyErr_Clear();
    return -1;
  }
  long fd = PyLong_AsLong(fd_obj);
  Py_DECREF(fd_obj);
  if (fd == -1 && PyErr_Occurred()) return -2;
  PyObject *position = PyObject_CallMethod(file, "tell", NULL);
  if (position == NULL) {
    if (!PyErr_ExceptionMatches(PyExc_OSError)) return -2;
    PyErr_Clear(); /* a pipe: read it */
    return -1;
  }
  long at = PyLong_AsLong(position);
  Py_DECREF(position);
  if (at == -1 && PyErr_Occurred()) return -2;
  return at == 0 && fd >= 0 && fd <= INT32_MAX ? (int)fd : -1;
}

HurrayFileReader *hurray__py_file_open(HurrayState *st, PyObject *source, uint32_t flags,
                                       PyObject **display) {
  HurrayFileReader *reader = NULL;
  HurrayError error = {0};
  int status;
  *display = NULL;
  int is_path = PyUnicode_Check(source) || PyObject_HasAttrString(source, "__fspath__");
  /* bytes is a path to os.open: it stays one unless it holds a NUL, which no path can and the
   * first 16 bytes of every format read here do (version fields, lengths, zip headers) */
  if (PyBytes_Check(source)) {
    is_path = memchr(PyBytes_AS_STRING(source), 0, (size_t)PyBytes_GET_SIZE(source)) == NULL;
  }
  if (is_path) {
    PyObject *path = NULL;
    if (!PyUnicode_FSConverter(source, &path)) return NULL;
    status = open_path(PyBytes_AS_STRING(path), flags, &reader, &error);
    Py_DECREF(path);
    *display = Py_NewRef(source);
  } else if (PyObject_HasAttrString(source, "read") && !PyObject_CheckBuffer(source)) {
    PyObject *name = PyObject_GetAttrString(source, "name");
    if (name == NULL) PyErr_Clear();
    *display = name != NULL && (PyUnicode_Check(name) || PyBytes_Check(name))
                   ? name
                   : PyObject_Repr(source);
    if (*display != name) Py_XDECREF(name);
    if (*display == NULL) return NULL;
    int fd = file_object_descriptor(source);
    if (fd == -2) goto fail;
    if (fd >= 0) {
      status = open_descriptor(fd, flags, &reader, &error);
    } else {
      PyObject *data = PyObject_CallMethod(source, "read", NULL);
      if (data == NULL) goto fail;
      Py_buffer view;
      int got = PyObject_GetBuffer(data, &view, PyBUF_SIMPLE);
      Py_DECREF(data);
      if (got < 0) {
        PyErr_Format(PyExc_TypeError, "%R.read() returned no bytes: a binary file object, "
                     "opened with 'rb', is what load() and open() read", source);
        goto fail;
      }
      status = open_bytes(&view, flags, &reader, &error);
      if (status < 0) goto fail;
    }
  } else if (PyObject_CheckBuffer(source)) {
    Py_buffer view;
    if (PyObject_GetBuffer(source, &view, PyBUF_SIMPLE) < 0) return NULL;
    *display = PyUnicode_FromFormat("<%zd bytes>", view.len);
    if (*display == NULL) {
      PyBuffer_Release(&view);
      return NULL;
    }
    status = open_bytes(&view, flags, &reader, &error);
    if (status < 0) goto fail;
  } else {
    PyErr_Format(PyExc_TypeError,
                 "expected a path (str, bytes or os.PathLike), the bytes of a file (bytes, "
                 "bytearray, memoryview, mmap) or a binary file object, not %.200s",
                 Py_TYPE(source)->tp_name);
    return NULL;
  }
  if (status == HURRAY_OK) return reader;
  hurray__py_raise_path(st, status, &error, *display, NULL);
fail:
  hurray_file_reader_destroy(reader);
  Py_CLEAR(*display);
  return NULL;
}
