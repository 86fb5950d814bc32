/* progress.c -- progress= of the functions that move bytes (save, load, convert, verify,
 * Client.get and read): a callable called as progress(done, total) in bytes, or True for
 * hurray._progress.Bar on stderr when stderr is a terminal. hurray-core reports progress from
 * threads that run without the GIL, so the call takes the GIL; the first exception the callable
 * raises is kept, later calls are skipped, and the function raises it once its work is over. */
#include "hurray_python.h"

int hurray__py_progress_arg(PyObject *obj, HurrayPyProgress *p) {
  *p = (HurrayPyProgress){0};
  if (obj == NULL || obj == Py_None || obj == Py_False) return 0;
  if (obj == Py_True) {
    PyObject *module = PyImport_ImportModule("hurray._progress");
    PyObject *bar = module == NULL ? NULL : PyObject_CallMethod(module, "bar", NULL);
    Py_XDECREF(module);
    if (bar == NULL) return -1;
    if (bar != Py_None) p->fn = bar; /* None: stderr is no terminal */
    else Py_DECREF(bar);
    return 0;
  }
  if (!PyCallable_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "progress must be a callable(done, total), True or None, not %.200s",
                 Py_TYPE(obj)->tp_name);
    return -1;
  }
  p->fn = Py_NewRef(obj);
  return 0;
}

void hurray__py_progress_call(void *context, uint64_t done, uint64_t total) {
  HurrayPyProgress *p = context;
  if (p->fn == NULL || p->failed) return;
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject *r = PyObject_CallFunction(p->fn, "KK", (unsigned long long)(p->before + done),
                                      (unsigned long long)(p->total ? p->total : total));
  if (r == NULL) {
    p->failed = 1;
    hurray__py_error_save(&p->error);
  }
  Py_XDECREF(r);
  PyGILState_Release(gil);
}

int hurray__py_progress_end(HurrayPyProgress *p) {
  Py_CLEAR(p->fn);
  if (!p->failed) return 0;
  p->failed = 0;
  PyErr_Clear(); /* the callable's exception is the one to see */
  hurray__py_error_restore(&p->error);
  return -1;
}
