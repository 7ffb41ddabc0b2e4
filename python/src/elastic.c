/*
 * bagua._C.Elastic: libbagua's in-process elastic context (include/bagua/elastic.h) for the
 * PyTorch front end's bagua.torch_api.elastic.
 *
 * The Python layer keeps the training state itself (model and optimizer state dicts, sampler
 * position, user scalars) and only asks this object for what libbagua knows: the round, this
 * worker's rank and the world size in it, whether a newer round was published, and the
 * communicator of the current round, which it reaches through a borrowed Comm
 * (bagua_py_comm_borrow) that always resolves to the current round's communicator.
 *
 * A data-parallel context is not attached as libbagua's participant (its rebuild would lay the
 * flat storage out again under the torch tensors that view it). The Python layer recreates it
 * after every rebuild instead, and follow(ddp) registers only an abort hook, so that a member
 * that left or stalled cuts off the context's communication in flight at once (as the C
 * participant does) instead of after BAGUA_COMM_TIMEOUT_MS.
 *
 * Ownership: an Elastic owns its bagua_elastic_t; borrowed Comms hold a reference to it and
 * followed DDPs are held until unfollow() or close(), so neither outlives the context.
 * Threading: the GIL is released around every call that can block (create, sync, check_all,
 * rebuild). The abort hook runs on libbagua's watch thread and only calls bagua_ddp_abort,
 * which is thread-safe.
 */
#include "ext.h"

#define MAX_FOLLOWED 8

typedef struct {
  PyObject_HEAD
  bagua_elastic_t *e;
  PyObject *followed[MAX_FOLLOWED]; /* DDP objects whose contexts the abort hook ends */
  unsigned generation;              /* fork generation it was created in (fork.c) */
} elastic_obj_t;

static PyTypeObject g_elastic_type;

static bagua_elastic_t *get(elastic_obj_t *self) {
  if (bagua_py_check_owner(self->generation, "bagua elastic context") < 0) return NULL;
  if (!self->e) PyErr_SetString(PyExc_ValueError, "the elastic context is closed");
  return self->e;
}

#define GET(self)                 \
  bagua_elastic_t *e = get(self); \
  if (!e) return NULL

bagua_comm_t *bagua_py_elastic_comm(PyObject *obj) {
  elastic_obj_t *self = (elastic_obj_t *)obj;
  if (bagua_py_check_owner(self->generation, "bagua elastic context") < 0) return NULL;
  if (!self->e) {
    PyErr_SetString(PyExc_ValueError, "the elastic context is closed");
    return NULL;
  }
  bagua_comm_t *c = bagua_elastic_comm(self->e);
  if (!c)
    PyErr_SetString(PyExc_ValueError,
                    "the elastic context has no communicator: its last rebuild failed");
  return c;
}

static PyObject *elastic_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
  static char *kws[] = {"timeout_ms", "connect_timeout_ms", "round_wait_ms", NULL};
  bagua_elastic_config_t cfg = BAGUA_ELASTIC_CONFIG_INIT;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|iii", kws, &cfg.timeout_ms, &cfg.connect_timeout_ms,
                                   &cfg.round_wait_ms))
    return NULL;
  bagua_elastic_t *e = NULL;
  bagua_status_t st;
  Py_BEGIN_ALLOW_THREADS
  st = bagua_elastic_create(&cfg, &e);
  Py_END_ALLOW_THREADS
  if (st != BAGUA_OK) return bagua_py_raise(st, "bagua_elastic_create");
  elastic_obj_t *o = (elastic_obj_t *)type->tp_alloc(type, 0);
  if (!o) {
    bagua_elastic_destroy(e);
    return NULL;
  }
  o->e = e;
  o->generation = bagua_py_generation();
  return (PyObject *)o;
}

static void on_abort(void *arg) {
  bagua_ddp_t *d = arg;
  bagua_ddp_abort(d);
}

static void unfollow_all(elastic_obj_t *self) {
  for (int i = 0; i < MAX_FOLLOWED; i++) {
    PyObject *o = self->followed[i];
    if (!o) continue;
    bagua_ddp_t *d = bagua_py_ddp_peek(o);
    if (d && self->e && !bagua_py_inherited(self->generation)) bagua_elastic_detach(self->e, d);
    self->followed[i] = NULL;
    Py_DECREF(o);
  }
}

static void destroy(elastic_obj_t *self) {
  unfollow_all(self);
  bagua_elastic_t *e = self->e;
  self->e = NULL;
  if (e && !bagua_py_inherited(self->generation)) {
    Py_BEGIN_ALLOW_THREADS
    bagua_elastic_destroy(e);
    Py_END_ALLOW_THREADS
  }
}

static void elastic_dealloc(elastic_obj_t *self) {
  destroy(self);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *elastic_close(elastic_obj_t *self, PyObject *unused) {
  destroy(self);
  Py_RETURN_NONE;
}

static PyObject *elastic_sync(elastic_obj_t *self, PyObject *unused) {
  GET(self);
  bagua_status_t st;
  bagua_py_begin_blocking(bagua_elastic_comm(e), NULL);
  Py_BEGIN_ALLOW_THREADS
  st = bagua_elastic_sync(e);
  Py_END_ALLOW_THREADS
  return bagua_py_end_blocking(st, "sync");
}

static PyObject *elastic_check(elastic_obj_t *self, PyObject *unused) {
  GET(self);
  return PyBool_FromLong(bagua_elastic_check(e));
}

static PyObject *elastic_check_all(elastic_obj_t *self, PyObject *unused) {
  GET(self);
  int changed = 0;
  bagua_status_t st;
  bagua_py_begin_blocking(bagua_elastic_comm(e), NULL);
  Py_BEGIN_ALLOW_THREADS
  st = bagua_elastic_check_all(e, &changed);
  Py_END_ALLOW_THREADS
  PyObject *r = bagua_py_end_blocking(st, "check_all");
  if (!r) return NULL;
  Py_DECREF(r);
  return PyBool_FromLong(changed);
}

static PyObject *elastic_rebuild(elastic_obj_t *self, PyObject *unused) {
  GET(self);
  /* The followed contexts belong to the round being left: the Python layer recreates them. */
  unfollow_all(self);
  bagua_status_t st;
  bagua_py_begin_blocking(NULL, NULL);
  Py_BEGIN_ALLOW_THREADS
  st = bagua_elastic_rebuild(e);
  Py_END_ALLOW_THREADS
  return bagua_py_end_blocking(st, "rebuild");
}

/* follow(ddp): a departure from the round aborts this data-parallel context's communication. */
static PyObject *elastic_follow(elastic_obj_t *self, PyObject *args) {
  GET(self);
  PyObject *o;
  if (!PyArg_ParseTuple(args, "O", &o)) return NULL;
  bagua_ddp_t *d = bagua_py_ddp_get(o);
  if (!d) return NULL;
  int slot = -1;
  for (int i = 0; i < MAX_FOLLOWED; i++) {
    if (self->followed[i] == o) Py_RETURN_NONE;
    if (!self->followed[i] && slot < 0) slot = i;
  }
  if (slot < 0)
    return PyErr_Format(PyExc_ValueError, "follow: at most %d contexts are followed at once",
                        MAX_FOLLOWED);
  bagua_elastic_participant_t p = {sizeof(p), NULL, NULL, on_abort, NULL};
  bagua_status_t st = bagua_elastic_attach(e, &p, d);
  if (st != BAGUA_OK) return bagua_py_raise(st, "follow");
  Py_INCREF(o);
  self->followed[slot] = o;
  Py_RETURN_NONE;
}

static PyObject *elastic_unfollow(elastic_obj_t *self, PyObject *args) {
  GET(self);
  PyObject *o;
  if (!PyArg_ParseTuple(args, "O", &o)) return NULL;
  for (int i = 0; i < MAX_FOLLOWED; i++) {
    if (self->followed[i] != o) continue;
    bagua_ddp_t *d = bagua_py_ddp_peek(o);
    if (d) bagua_elastic_detach(e, d);
    self->followed[i] = NULL;
    Py_DECREF(o);
  }
  Py_RETURN_NONE;
}

static PyObject *elastic_comm(elastic_obj_t *self, PyObject *unused) {
  GET(self);
  (void)e;
  return bagua_py_comm_borrow((PyObject *)self, bagua_py_elastic_comm);
}

#define INT_GETTER(name, expr)                                      \
  static PyObject *get_##name(elastic_obj_t *self, void *closure) { \
    GET(self);                                                      \
    return PyLong_FromLongLong((long long)(expr));                  \
  }
INT_GETTER(round, bagua_elastic_round(e))
INT_GETTER(rank, bagua_elastic_rank(e))
INT_GETTER(size, bagua_elastic_size(e))

static PyObject *get_closed(elastic_obj_t *self, void *closure) {
  return PyBool_FromLong(self->e == NULL);
}

static PyGetSetDef elastic_getset[] = {
    {"round", (getter)get_round, NULL, "The current rendezvous round.", NULL},
    {"rank", (getter)get_rank, NULL, "This worker's rank in the current round.", NULL},
    {"size", (getter)get_size, NULL, "Number of workers in the current round.", NULL},
    {"closed", (getter)get_closed, NULL, "True after close().", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

#define M(name, flags, doc) \
  { #name, (PyCFunction)elastic_##name, flags, doc }
static PyMethodDef elastic_methods[] = {
    M(sync, METH_NOARGS, "sync(): adopts rank 0's built-in counters (collective)"),
    M(check, METH_NOARGS, "check() -> bool: a newer round was published (local, cheap)"),
    M(check_all, METH_NOARGS,
      "check_all() -> bool: any rank saw a newer round (collective: all ranks leave together)"),
    M(rebuild, METH_NOARGS,
      "rebuild(): moves to the newest round (BaguaAbortedError: not a member of it)"),
    M(follow, METH_VARARGS, "follow(ddp): a departure aborts that DDP's communication"),
    M(unfollow, METH_VARARGS, "unfollow(ddp)"),
    M(comm, METH_NOARGS, "comm() -> Comm that always resolves to the current round's"),
    M(close, METH_NOARGS, "close(): stops watching and destroys the context"),
    {NULL, NULL, 0, NULL}};

static PyTypeObject g_elastic_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "bagua._C.Elastic",
    .tp_basicsize = sizeof(elastic_obj_t),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc =
        "Elastic(timeout_ms=-1, connect_timeout_ms=-1, round_wait_ms=-1): libbagua's "
        "in-process elastic context under bagua-agent (-1 takes BAGUA_* from the "
        "environment).",
    .tp_new = elastic_new,
    .tp_dealloc = (destructor)elastic_dealloc,
    .tp_methods = elastic_methods,
    .tp_getset = elastic_getset,
};

int bagua_py_elastic_check(PyObject *obj) {
  return PyObject_TypeCheck(obj, &g_elastic_type);
}

int bagua_py_elastic_init(PyObject *module) {
  if (PyType_Ready(&g_elastic_type) < 0) return -1;
  return PyModule_AddObjectRef(module, "Elastic", (PyObject *)&g_elastic_type);
}
