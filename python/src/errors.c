/*
 * The BaguaError hierarchy of bagua._C: one base class, and one subclass per bagua_status_t,
 * named after the status (BAGUA_ERR_TIMEOUT -> TimeoutError_ is avoided: the classes are
 * BaguaTimeoutError, BaguaRemoteError, ...). Each instance carries `status` (the number) and
 * `status_name` ("BAGUA_ERR_TIMEOUT"), and its message ends with libbagua's last warning, the
 * sentence that names what was wrong.
 *
 * BaguaError derives from RuntimeError so that code catching RuntimeError (as torch code
 * often does) still catches it. Argument errors raise ValueError/TypeError instead, before
 * libbagua is called, as Python convention has it.
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "ext.h"

static PyObject *g_base;
static PyObject *g_by_status[BAGUA_ERR__COUNT];

PyObject *bagua_py_raise(bagua_status_t st, const char *what) {
  PyObject *cls = (st > 0 && st < BAGUA_ERR__COUNT && g_by_status[st]) ? g_by_status[st] : g_base;
  const char *detail = bagua_last_error();
  char msg[1024];
  if (detail && detail[0])
    snprintf(msg, sizeof(msg), "%s: %s: %s", what, bagua_err_name(st), detail);
  else
    snprintf(msg, sizeof(msg), "%s: %s: %s", what, bagua_err_name(st), bagua_strerror(st));
  PyObject *exc = PyObject_CallFunction(cls, "s", msg);
  if (!exc) return NULL;
  PyObject *code = PyLong_FromLong((long)st);
  PyObject *name = PyUnicode_FromString(bagua_err_name(st));
  if (code && name) {
    PyObject_SetAttrString(exc, "status", code);
    PyObject_SetAttrString(exc, "status_name", name);
  }
  Py_XDECREF(code);
  Py_XDECREF(name);
  PyErr_SetObject(cls, exc);
  Py_DECREF(exc);
  return NULL;
}

/* "NO_MEMORY" -> "BaguaNoMemoryError". */
static void class_name(const char *status, char *out, size_t n) {
  size_t k = (size_t)snprintf(out, n, "bagua._C.Bagua");
  int upper = 1;
  for (const char *p = status; *p && k + 6 < n; p++) {
    if (*p == '_') {
      upper = 1;
      continue;
    }
    out[k++] = upper ? *p : (char)tolower((unsigned char)*p);
    upper = 0;
  }
  snprintf(out + k, n - k, "Error");
}

int bagua_py_errors_init(PyObject *module) {
  g_base = PyErr_NewExceptionWithDoc(
      "bagua._C.BaguaError",
      "An error returned by libbagua. `status` is the bagua_status_t number and `status_name` "
      "its name (e.g. 'BAGUA_ERR_TIMEOUT'); the message ends with libbagua's explanation.",
      PyExc_RuntimeError, NULL);
  if (!g_base || PyModule_AddObjectRef(module, "BaguaError", g_base) < 0) return -1;
  static const char *names[] = {
#define BAGUA__PY_NAME(name, val, text) [val] = #name,
      BAGUA_ERROR_MAP(BAGUA__PY_NAME)
#undef BAGUA__PY_NAME
  };
  for (int st = 1; st < BAGUA_ERR__COUNT; st++) {
    char full[96];
    class_name(names[st], full, sizeof(full));
    g_by_status[st] = PyErr_NewException(full, g_base, NULL);
    if (!g_by_status[st]) return -1;
    if (PyModule_AddObjectRef(module, strrchr(full, '.') + 1, g_by_status[st]) < 0) return -1;
  }
  return 0;
}

int bagua_py_dtype(int code, bagua_dtype_t *out) {
  if (code < 0 || code >= BAGUA_DTYPE__COUNT) {
    PyErr_Format(PyExc_ValueError,
                 "dtype code %d is invalid; accepted: 0..%d (f32 f16 bf16 f64 "
                 "i32 i64 u8)",
                 code, BAGUA_DTYPE__COUNT - 1);
    return -1;
  }
  *out = (bagua_dtype_t)code;
  return 0;
}

int bagua_py_op(int code, bagua_op_t *out) {
  if (code < 0 || code >= BAGUA_OP__COUNT) {
    PyErr_Format(PyExc_ValueError, "op code %d is invalid; accepted: 0..%d (sum avg min max)", code,
                 BAGUA_OP__COUNT - 1);
    return -1;
  }
  *out = (bagua_op_t)code;
  return 0;
}

int bagua_py_ptr(PyObject *obj, void **out) {
  if (!PyLong_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "a buffer address must be an int (tensor.data_ptr()), not %s",
                 Py_TYPE(obj)->tp_name);
    return -1;
  }
  void *p = PyLong_AsVoidPtr(obj);
  if (!p && PyErr_Occurred()) return -1;
  *out = p;
  return 0;
}

int bagua_py_coll_args(PyObject *args, const char *name, int has_op, int has_root,
                       bagua_py_coll_args_t *out) {
  Py_ssize_t want = 4 + has_op + has_root;
  if (PyTuple_GET_SIZE(args) != want) {
    PyErr_Format(PyExc_TypeError, "%s takes %zd arguments (send, recv, count, dtype%s%s), not %zd",
                 name, want, has_op ? ", op" : "", has_root ? ", root" : "",
                 PyTuple_GET_SIZE(args));
    return -1;
  }
  PyObject *so, *ro;
  Py_ssize_t n;
  int dcode, x = 0, y = 0;
  if (!PyArg_ParseTuple(args, "OOni|ii", &so, &ro, &n, &dcode, &x, &y)) return -1;
  if (n < 0) {
    PyErr_Format(PyExc_ValueError, "%s: count %zd is negative", name, n);
    return -1;
  }
  out->op = BAGUA_SUM;
  if (bagua_py_ptr(so, &out->send) < 0 || bagua_py_ptr(ro, &out->recv) < 0 ||
      bagua_py_dtype(dcode, &out->dtype) < 0)
    return -1;
  if (has_op && bagua_py_op(x, &out->op) < 0) return -1;
  out->root = has_op ? y : x;
  out->count = (size_t)n;
  return 0;
}
