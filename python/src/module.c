/*
 * bagua._C: the CPython extension module that binds libbagua for the Python package `bagua`
 * (python/bagua). It holds no logic of its own: types that own libbagua handles (Comm, DDP,
 * Sampler, Elastic), the error hierarchy, and the constants of include/bagua/types.h, so that
 * no Python file repeats a number or a struct layout of the C library.
 */
#include "ext.h"

static PyObject *py_param_get(PyObject *self, PyObject *args) {
  const char *name;
  if (!PyArg_ParseTuple(args, "s", &name)) return NULL;
  const char *v = bagua_param_get(name);
  if (!v) Py_RETURN_NONE;
  return PyUnicode_FromString(v);
}

/* A port that binds on `host` now ("" for every address), below the kernel's ephemeral range
 * where it can (bagua_spare_port); OSError when nothing binds, ValueError for a host that does
 * not resolve. */
static PyObject *py_spare_port(PyObject *self, PyObject *args) {
  const char *host;
  if (!PyArg_ParseTuple(args, "s", &host)) return NULL;
  int port = 0;
  bagua_status_t st = bagua_spare_port(host, &port);
  if (st == BAGUA_ERR_INVALID_ARG)
    return PyErr_Format(PyExc_ValueError, "spare_port: host \"%s\" does not resolve", host);
  if (st != BAGUA_OK)
    return PyErr_Format(PyExc_OSError, "spare_port: no TCP port binds on \"%s\"", host);
  return PyLong_FromLong(port);
}

static PyObject *py_dtype_size(PyObject *self, PyObject *args) {
  int code;
  bagua_dtype_t dt;
  if (!PyArg_ParseTuple(args, "i", &code) || bagua_py_dtype(code, &dt) < 0) return NULL;
  return PyLong_FromSize_t(bagua_dtype_size(dt));
}

static PyObject *py_param_check(PyObject *self, PyObject *args) {
  const char *name, *value;
  if (!PyArg_ParseTuple(args, "ss", &name, &value)) return NULL;
  char err[512];
  if (bagua_param_validate(name, value, err, sizeof(err)) == BAGUA_OK) Py_RETURN_NONE;
  return PyUnicode_FromString(err);
}

static PyObject *py_ddp_algorithms(PyObject *self, PyObject *args) {
  return PyUnicode_FromString(bagua_ddp_algorithms());
}

static PyObject *py_ddp_algorithm_options(PyObject *self, PyObject *args) {
  const char *name;
  if (!PyArg_ParseTuple(args, "s", &name)) return NULL;
  const char *o = bagua_ddp_algorithm_options(name);
  if (!o) Py_RETURN_NONE;
  return PyUnicode_FromString(o);
}

static PyMethodDef methods[] = {
    {"param_get", py_param_get, METH_VARARGS,
     "param_get(name) -> str or None: a BAGUA_* or worker variable as libbagua's registry reads "
     "it (None for an unknown name)."},
    {"dtype_size", py_dtype_size, METH_VARARGS, "dtype_size(code) -> bytes per element."},
    {"spare_port", py_spare_port, METH_VARARGS,
     "spare_port(host) -> a TCP port that binds on host now (\"\": every address), below the "
     "kernel's ephemeral range where it can, so that no outgoing connection takes it before "
     "its listener binds it."},
    {"param_check", py_param_check, METH_VARARGS,
     "param_check(name, value) -> None when libbagua's registry accepts value for variable "
     "name, else its message saying what is accepted."},
    {"ddp_algorithms", py_ddp_algorithms, METH_NOARGS,
     "ddp_algorithms() -> libbagua's algorithms, space-separated, in BAGUA_ALGORITHM's order."},
    {"ddp_algorithm_options", py_ddp_algorithm_options, METH_VARARGS,
     "ddp_algorithm_options(name) -> the bagua_ddp_config_t fields that apply to algorithm "
     "name, space-separated (None for an unknown name)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "bagua._C",
    .m_doc = "libbagua bindings for the bagua package.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__C(void) {
  PyObject *m = PyModule_Create(&module_def);
  if (!m) return NULL;
  struct {
    const char *name;
    long value;
  } consts[] = {
      {"F32", BAGUA_F32}, {"F16", BAGUA_F16}, {"BF16", BAGUA_BF16}, {"F64", BAGUA_F64},
      {"I32", BAGUA_I32}, {"I64", BAGUA_I64}, {"U8", BAGUA_U8},     {"SUM", BAGUA_SUM},
      {"AVG", BAGUA_AVG}, {"MIN", BAGUA_MIN}, {"MAX", BAGUA_MAX},
  };
  for (size_t i = 0; i < sizeof(consts) / sizeof(consts[0]); i++)
    if (PyModule_AddIntConstant(m, consts[i].name, consts[i].value) < 0) goto fail;
  if (PyModule_AddStringConstant(m, "__version__", BAGUA_VERSION_STRING) < 0) goto fail;
  if (bagua_py_fork_init() < 0 || bagua_py_interrupt_init() < 0 || bagua_py_errors_init(m) < 0 ||
      bagua_py_comm_init(m) < 0 || bagua_py_ddp_init(m) < 0 || bagua_py_sampler_init(m) < 0 ||
      bagua_py_elastic_init(m) < 0 || bagua_py_nccl_init(m) < 0 || bagua_py_store_init(m) < 0)
    goto fail;
  return m;
fail:
  Py_DECREF(m);
  return NULL;
}
