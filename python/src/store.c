/*
 * bagua._C.Store: a job's key-value store in its etcd (include/bagua/store.h), the backend of
 * bagua.torch_api's torch.distributed Store for jobs that span hosts. Keys are str, values
 * bytes-like in and bytes out.
 *
 * Ownership: a Store owns its bagua_store_t and closes it in close() or when collected.
 * Threading: the GIL is released around every etcd request (each bounded by the store's
 * timeout; get's wait by its own argument).
 */
#include "ext.h"

typedef struct {
  PyObject_HEAD
  bagua_store_t *store;
  unsigned generation; /* fork generation it was created in (fork.c) */
} store_obj_t;

static PyTypeObject g_store_type;

static bagua_store_t *get(store_obj_t *self) {
  if (bagua_py_check_owner(self->generation, "bagua store") < 0) return NULL;
  if (!self->store) PyErr_SetString(PyExc_ValueError, "the store is closed");
  return self->store;
}

#define GET(self)                   \
  bagua_store_t *store = get(self); \
  if (!store) return NULL

static PyObject *store_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
  static char *kws[] = {"endpoints", "job_id", "round", "timeout_ms", NULL};
  const char *endpoints, *job;
  long long round;
  int timeout_ms;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "ssLi", kws, &endpoints, &job, &round, &timeout_ms))
    return NULL;
  bagua_store_t *s = NULL;
  bagua_status_t st = bagua_store_open(endpoints, job, (int64_t)round, timeout_ms, &s);
  if (st != BAGUA_OK) return bagua_py_raise(st, "bagua_store_open");
  store_obj_t *o = (store_obj_t *)type->tp_alloc(type, 0);
  if (!o) {
    bagua_store_close(s);
    return NULL;
  }
  o->store = s;
  o->generation = bagua_py_generation();
  return (PyObject *)o;
}

static void store_dealloc(store_obj_t *self) {
  if (self->store && !bagua_py_inherited(self->generation)) bagua_store_close(self->store);
  self->store = NULL;
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *store_close(store_obj_t *self, PyObject *unused) {
  if (self->store && !bagua_py_inherited(self->generation)) bagua_store_close(self->store);
  self->store = NULL;
  Py_RETURN_NONE;
}

/* A value handed back by the C API, as bytes (freed here). */
static PyObject *take_bytes(void *value, size_t len) {
  PyObject *b = PyBytes_FromStringAndSize(value, (Py_ssize_t)len);
  bagua_store_free(value);
  return b;
}

static PyObject *store_set(store_obj_t *self, PyObject *args) {
  GET(self);
  const char *key;
  Py_buffer v;
  if (!PyArg_ParseTuple(args, "sy*", &key, &v)) return NULL;
  bagua_status_t st;
  Py_BEGIN_ALLOW_THREADS
  st = bagua_store_set(store, key, v.buf, (size_t)v.len);
  Py_END_ALLOW_THREADS
  PyBuffer_Release(&v);
  if (st != BAGUA_OK) return bagua_py_raise(st, "store set");
  Py_RETURN_NONE;
}

static PyObject *store_get(store_obj_t *self, PyObject *args) {
  GET(self);
  const char *key;
  int wait_ms;
  if (!PyArg_ParseTuple(args, "si", &key, &wait_ms)) return NULL;
  void *value = NULL;
  size_t len = 0;
  bagua_status_t st;
  Py_BEGIN_ALLOW_THREADS
  st = bagua_store_get(store, key, wait_ms, &value, &len);
  Py_END_ALLOW_THREADS
  if (st != BAGUA_OK) return bagua_py_raise(st, "store get");
  return take_bytes(value, len);
}

static PyObject *store_add(store_obj_t *self, PyObject *args) {
  GET(self);
  const char *key;
  long long delta;
  if (!PyArg_ParseTuple(args, "sL", &key, &delta)) return NULL;
  int64_t result = 0;
  bagua_status_t st;
  Py_BEGIN_ALLOW_THREADS
  st = bagua_store_add(store, key, (int64_t)delta, &result);
  Py_END_ALLOW_THREADS
  if (st != BAGUA_OK) return bagua_py_raise(st, "store add");
  return PyLong_FromLongLong((long long)result);
}

static PyObject *store_compare_set(store_obj_t *self, PyObject *args) {
  GET(self);
  const char *key;
  Py_buffer e, d;
  if (!PyArg_ParseTuple(args, "sy*y*", &key, &e, &d)) return NULL;
  void *cur = NULL;
  size_t len = 0;
  bagua_status_t st;
  Py_BEGIN_ALLOW_THREADS
  st = bagua_store_compare_set(store, key, e.buf, (size_t)e.len, d.buf, (size_t)d.len, &cur, &len);
  Py_END_ALLOW_THREADS
  PyBuffer_Release(&e);
  PyBuffer_Release(&d);
  if (st != BAGUA_OK) return bagua_py_raise(st, "store compare_set");
  return take_bytes(cur, len);
}

static PyObject *store_check(store_obj_t *self, PyObject *args) {
  GET(self);
  const char *key;
  if (!PyArg_ParseTuple(args, "s", &key)) return NULL;
  int exists = 0;
  bagua_status_t st;
  Py_BEGIN_ALLOW_THREADS
  st = bagua_store_check(store, key, &exists);
  Py_END_ALLOW_THREADS
  if (st != BAGUA_OK) return bagua_py_raise(st, "store check");
  return PyBool_FromLong(exists);
}

static PyObject *store_delete(store_obj_t *self, PyObject *args) {
  GET(self);
  const char *key;
  if (!PyArg_ParseTuple(args, "s", &key)) return NULL;
  int deleted = 0;
  bagua_status_t st;
  Py_BEGIN_ALLOW_THREADS
  st = bagua_store_delete(store, key, &deleted);
  Py_END_ALLOW_THREADS
  if (st != BAGUA_OK) return bagua_py_raise(st, "store delete");
  return PyBool_FromLong(deleted);
}

static PyObject *store_count(store_obj_t *self, PyObject *unused) {
  GET(self);
  int64_t n = 0;
  bagua_status_t st;
  Py_BEGIN_ALLOW_THREADS
  st = bagua_store_count(store, &n);
  Py_END_ALLOW_THREADS
  if (st != BAGUA_OK) return bagua_py_raise(st, "store count");
  return PyLong_FromLongLong((long long)n);
}

#define M(name, flags, doc) \
  { #name, (PyCFunction)store_##name, flags, doc }
static PyMethodDef store_methods[] = {
    M(set, METH_VARARGS, "set(key, value)"),
    M(get, METH_VARARGS, "get(key, wait_ms) -> bytes; waits (bounded) for the key"),
    M(add, METH_VARARGS, "add(key, delta) -> int"),
    M(compare_set, METH_VARARGS, "compare_set(key, expected, desired) -> bytes"),
    M(check, METH_VARARGS, "check(key) -> bool"),
    M(delete, METH_VARARGS, "delete(key) -> bool"),
    M(count, METH_NOARGS, "count() -> int"),
    M(close, METH_NOARGS, "close()"),
    {NULL, NULL, 0, NULL}};

static PyTypeObject g_store_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "bagua._C.Store",
    .tp_basicsize = sizeof(store_obj_t),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Store(endpoints, job_id, round, timeout_ms): a job's key-value store in etcd.",
    .tp_new = store_new,
    .tp_dealloc = (destructor)store_dealloc,
    .tp_methods = store_methods,
};

int bagua_py_store_init(PyObject *module) {
  if (PyType_Ready(&g_store_type) < 0) return -1;
  return PyModule_AddObjectRef(module, "Store", (PyObject *)&g_store_type);
}
