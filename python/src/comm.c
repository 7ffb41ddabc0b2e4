/*
 * bagua._C.Comm: a libbagua communicator (include/bagua/comm.h). Buffers are passed as
 * addresses (torch's data_ptr()) with element counts and dtype codes; the Python layer
 * (bagua/torch_api/communication.py, _primitives.py) checks tensors (device, contiguous, dtype,
 * sizes) first.
 *
 * Ownership: a Comm owns its bagua_comm_t and destroys it in close() or when collected. A
 * borrowed Comm (Elastic.comm()) owns nothing: it holds its Elastic and resolves the current
 * round's communicator at every call, so one Python object serves every round.
 * Threading: the GIL is released around every call that can block; abort() may be called
 * from any thread (libbagua's abort is thread-safe) and makes blocked calls return.
 */
#include "ext.h"

#include <strings.h>

typedef struct {
  PyObject_HEAD
  bagua_comm_t *comm;
  PyObject *owner; /* borrowed Comm: the object (an Elastic) whose communicator this is */
  bagua_comm_t *(*resolve)(PyObject *owner); /* its current communicator; NULL + exception */
  unsigned generation;                       /* fork generation it was created in (fork.c) */
} comm_obj_t;

static PyTypeObject g_comm_type;

bagua_comm_t *bagua_py_comm_get(PyObject *obj) {
  if (!PyObject_TypeCheck(obj, &g_comm_type)) {
    PyErr_Format(PyExc_TypeError, "expected a bagua._C.Comm, not %s", Py_TYPE(obj)->tp_name);
    return NULL;
  }
  comm_obj_t *c = (comm_obj_t *)obj;
  if (bagua_py_check_owner(c->generation, "bagua communicator") < 0) return NULL;
  if (c->owner) return c->resolve(c->owner);
  if (!c->comm) {
    PyErr_SetString(PyExc_ValueError, "the communicator is closed");
    return NULL;
  }
  return c->comm;
}

static PyObject *wrap(bagua_comm_t *comm) {
  comm_obj_t *o = PyObject_New(comm_obj_t, &g_comm_type);
  if (!o) {
    bagua_comm_destroy(comm);
    return NULL;
  }
  o->comm = comm;
  o->owner = NULL;
  o->resolve = NULL;
  o->generation = bagua_py_generation();
  return (PyObject *)o;
}

PyObject *bagua_py_comm_borrow(PyObject *owner, bagua_comm_t *(*resolve)(PyObject *owner)) {
  comm_obj_t *o = PyObject_New(comm_obj_t, &g_comm_type);
  if (!o) return NULL;
  o->comm = NULL;
  Py_INCREF(owner);
  o->owner = owner;
  o->resolve = resolve;
  o->generation = bagua_py_generation();
  return (PyObject *)o;
}

static PyObject *comm_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
  static char *kws[] = {"rank", "size", "bootstrap", "transport", "timeout_ms", NULL};
  int rank = -1, size = -1, timeout_ms = -1;
  const char *bootstrap = NULL, *transport = NULL;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|iizzi", kws, &rank, &size, &bootstrap, &transport,
                                   &timeout_ms))
    return NULL;
  bagua_comm_config_t cfg = BAGUA_COMM_CONFIG_INIT;
  cfg.rank = rank;
  cfg.size = size;
  cfg.bootstrap = bootstrap;
  cfg.timeout_ms = timeout_ms;
  if (transport) {
    /* The registry's verdict and message for BAGUA_TRANSPORT, and its case rule (any case). */
    char err[256];
    if (bagua_param_validate("BAGUA_TRANSPORT", transport, err, sizeof(err)) != BAGUA_OK) {
      PyErr_Format(PyExc_ValueError, "transport: %s", err);
      return NULL;
    }
    static const char *names[] = {"auto", "tcp", "shm"};
    static const int kinds[] = {BAGUA_TRANSPORT_AUTO, BAGUA_TRANSPORT_TCP, BAGUA_TRANSPORT_SHM};
    for (int i = 0; i < 3; i++)
      if (!strcasecmp(transport, names[i])) cfg.transport = kinds[i];
  }
  bagua_comm_t *comm = NULL;
  bagua_status_t st;
  Py_BEGIN_ALLOW_THREADS
  st = bagua_comm_create(&cfg, &comm);
  Py_END_ALLOW_THREADS
  if (st != BAGUA_OK) return bagua_py_raise(st, "bagua_comm_create");
  (void)type;
  return wrap(comm);
}

static void comm_dealloc(comm_obj_t *self) {
  Py_CLEAR(self->owner);
  bagua_comm_t *c = self->comm;
  self->comm = NULL;
  if (c && !bagua_py_inherited(self->generation)) {
    Py_BEGIN_ALLOW_THREADS
    bagua_comm_destroy(c);
    Py_END_ALLOW_THREADS
  }
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *comm_close(comm_obj_t *self, PyObject *unused) {
  bagua_comm_t *c = self->comm;
  self->comm = NULL;
  if (c && !bagua_py_inherited(self->generation)) {
    Py_BEGIN_ALLOW_THREADS
    bagua_comm_destroy(c);
    Py_END_ALLOW_THREADS
  }
  Py_RETURN_NONE;
}

static PyObject *comm_abort(comm_obj_t *self, PyObject *unused) {
  /* No GIL release needed: abort only sets flags and wakes waiters. */
  if (bagua_py_inherited(self->generation)) Py_RETURN_NONE;
  bagua_comm_t *c = self->owner ? self->resolve(self->owner) : self->comm;
  PyErr_Clear(); /* a borrowed Comm without a communicator has nothing to abort */
  if (c) bagua_comm_abort(c);
  Py_RETURN_NONE;
}

#define GET(self)                                             \
  bagua_comm_t *comm = bagua_py_comm_get((PyObject *)(self)); \
  if (!comm) return NULL

#define RUN(what, call) BAGUA_PY_RUN(comm, NULL, what, call)

typedef enum {
  C_ALLREDUCE,
  C_REDUCE_SCATTER,
  C_ALLGATHER,
  C_ALLTOALL,
  C_BROADCAST,
  C_REDUCE,
  C_GATHER,
  C_SCATTER
} coll_t;

/* Each collective takes (send address, recv address, count, dtype code) and then, in this
 * order, the op code and/or the root it needs. */
static const struct {
  const char *name;
  int has_op, has_root;
} k_colls[] = {
    [C_ALLREDUCE] = {"allreduce", 1, 0}, [C_REDUCE_SCATTER] = {"reduce_scatter", 1, 0},
    [C_ALLGATHER] = {"allgather", 0, 0}, [C_ALLTOALL] = {"alltoall", 0, 0},
    [C_BROADCAST] = {"broadcast", 0, 1}, [C_REDUCE] = {"reduce", 1, 1},
    [C_GATHER] = {"gather", 0, 1},       [C_SCATTER] = {"scatter", 0, 1},
};

static PyObject *collective(comm_obj_t *self, PyObject *args, coll_t k) {
  GET(self);
  const char *name = k_colls[k].name;
  bagua_py_coll_args_t c;
  if (bagua_py_coll_args(args, name, k_colls[k].has_op, k_colls[k].has_root, &c) < 0) return NULL;
  bagua_status_t st = BAGUA_OK;
  bagua_py_begin_blocking(comm, NULL);
  Py_BEGIN_ALLOW_THREADS
  switch (k) {
    case C_ALLREDUCE:
      st = bagua_allreduce(comm, c.send, c.recv, c.count, c.dtype, c.op);
      break;
    case C_REDUCE_SCATTER:
      st = bagua_reduce_scatter(comm, c.send, c.recv, c.count, c.dtype, c.op);
      break;
    case C_ALLGATHER:
      st = bagua_allgather(comm, c.send, c.recv, c.count, c.dtype);
      break;
    case C_ALLTOALL:
      st = bagua_alltoall(comm, c.send, c.recv, c.count, c.dtype);
      break;
    case C_BROADCAST:
      st = bagua_broadcast(comm, c.send, c.recv, c.count, c.dtype, c.root);
      break;
    case C_REDUCE:
      st = bagua_reduce(comm, c.send, c.recv, c.count, c.dtype, c.op, c.root);
      break;
    case C_GATHER:
      st = bagua_gather(comm, c.send, c.recv, c.count, c.dtype, c.root);
      break;
    case C_SCATTER:
      st = bagua_scatter(comm, c.send, c.recv, c.count, c.dtype, c.root);
      break;
  }
  Py_END_ALLOW_THREADS
  return bagua_py_end_blocking(st, name);
}

#define COLL(fn, kind)                                           \
  static PyObject *comm_##fn(comm_obj_t *self, PyObject *args) { \
    return collective(self, args, kind);                         \
  }
COLL(allreduce, C_ALLREDUCE)
COLL(reduce_scatter, C_REDUCE_SCATTER)
COLL(allgather, C_ALLGATHER)
COLL(alltoall, C_ALLTOALL)
COLL(broadcast, C_BROADCAST)
COLL(reduce, C_REDUCE)
COLL(gather, C_GATHER)
COLL(scatter, C_SCATTER)

/* send(addr, count, dtype, peer) and recv(addr, count, dtype, peer). */
static PyObject *p2p(comm_obj_t *self, PyObject *args, int sending) {
  GET(self);
  PyObject *po;
  Py_ssize_t n;
  int dcode, peer;
  void *p;
  bagua_dtype_t dt;
  if (!PyArg_ParseTuple(args, "Onii", &po, &n, &dcode, &peer)) return NULL;
  if (n < 0) return PyErr_Format(PyExc_ValueError, "count %zd is negative", n);
  if (bagua_py_ptr(po, &p) < 0 || bagua_py_dtype(dcode, &dt) < 0) return NULL;
  RUN(sending ? "send" : "recv", sending ? bagua_send(comm, p, (size_t)n, dt, peer)
                                         : bagua_recv(comm, p, (size_t)n, dt, peer));
}

static PyObject *comm_send(comm_obj_t *self, PyObject *args) {
  return p2p(self, args, 1);
}
static PyObject *comm_recv(comm_obj_t *self, PyObject *args) {
  return p2p(self, args, 0);
}

static PyObject *comm_barrier(comm_obj_t *self, PyObject *unused) {
  GET(self);
  RUN("barrier", bagua_barrier(comm));
}

static PyObject *comm_split(comm_obj_t *self, PyObject *args) {
  GET(self);
  int color, key = 0;
  if (!PyArg_ParseTuple(args, "i|i", &color, &key)) return NULL;
  bagua_comm_t *out = NULL;
  bagua_status_t st;
  Py_BEGIN_ALLOW_THREADS
  st = bagua_comm_split(comm, color, key, &out);
  Py_END_ALLOW_THREADS
  if (st != BAGUA_OK) return bagua_py_raise(st, "split");
  if (!out) Py_RETURN_NONE;
  return wrap(out);
}

#define INT_GETTER(name, expr)                                   \
  static PyObject *get_##name(comm_obj_t *self, void *closure) { \
    GET(self);                                                   \
    return PyLong_FromLongLong((long long)(expr));               \
  }
INT_GETTER(rank, bagua_comm_rank(comm))
INT_GETTER(size, bagua_comm_size(comm))
INT_GETTER(local_rank, bagua_comm_local_rank(comm))
INT_GETTER(local_size, bagua_comm_local_size(comm))
INT_GETTER(node_count, bagua_comm_node_count(comm))
INT_GETTER(bytes_sent, bagua_comm_bytes_sent(comm))

static PyObject *get_transport(comm_obj_t *self, void *closure) {
  GET(self);
  return PyUnicode_FromString(bagua_comm_transport_name(comm));
}

static PyObject *get_closed(comm_obj_t *self, void *closure) {
  return PyBool_FromLong(self->owner == NULL && self->comm == NULL);
}

static PyObject *get_borrowed(comm_obj_t *self, void *closure) {
  return PyBool_FromLong(self->owner != NULL);
}

static PyGetSetDef comm_getset[] = {
    {"rank", (getter)get_rank, NULL, "This process's rank.", NULL},
    {"size", (getter)get_size, NULL, "Number of ranks.", NULL},
    {"local_rank", (getter)get_local_rank, NULL, "Rank among the ranks of this node.", NULL},
    {"local_size", (getter)get_local_size, NULL, "Ranks on this node.", NULL},
    {"node_count", (getter)get_node_count, NULL, "Number of nodes.", NULL},
    {"bytes_sent", (getter)get_bytes_sent, NULL, "Bytes sent to peers since creation.", NULL},
    {"transport", (getter)get_transport, NULL, "\"tcp\", \"shm\" or \"hier(shm+tcp)\".", NULL},
    {"closed", (getter)get_closed, NULL, "True after close().", NULL},
    {"borrowed", (getter)get_borrowed, NULL,
     "True for an Elastic's Comm: the current round's communicator, never closed by it.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

#define M(name, flags, doc) \
  { #name, (PyCFunction)comm_##name, flags, doc }
static PyMethodDef comm_methods[] = {
    M(allreduce, METH_VARARGS, "allreduce(send, recv, count, dtype, op)"),
    M(reduce_scatter, METH_VARARGS, "reduce_scatter(send, recv, recvcount, dtype, op)"),
    M(allgather, METH_VARARGS, "allgather(send, recv, sendcount, dtype)"),
    M(alltoall, METH_VARARGS, "alltoall(send, recv, count, dtype)"),
    M(broadcast, METH_VARARGS, "broadcast(send, recv, count, dtype, root)"),
    M(reduce, METH_VARARGS, "reduce(send, recv, count, dtype, op, root)"),
    M(gather, METH_VARARGS, "gather(send, recv, sendcount, dtype, root)"),
    M(scatter, METH_VARARGS, "scatter(send, recv, recvcount, dtype, root)"),
    M(send, METH_VARARGS, "send(buf, count, dtype, peer)"),
    M(recv, METH_VARARGS, "recv(buf, count, dtype, peer)"),
    M(barrier, METH_NOARGS, "barrier()"),
    M(split, METH_VARARGS, "split(color, key=0) -> Comm or None"),
    M(abort, METH_NOARGS,
      "abort(): makes current and future calls raise BaguaAbortedError "
      "(any thread)"),
    M(close, METH_NOARGS, "close(): destroys the communicator"),
    {NULL, NULL, 0, NULL}};

static PyTypeObject g_comm_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "bagua._C.Comm",
    .tp_basicsize = sizeof(comm_obj_t),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc =
        "Comm(rank=-1, size=-1, bootstrap=None, transport=None, timeout_ms=-1): a libbagua "
        "communicator; -1/None take RANK, WORLD_SIZE, BAGUA_* from the environment.",
    .tp_new = comm_new,
    .tp_dealloc = (destructor)comm_dealloc,
    .tp_methods = comm_methods,
    .tp_getset = comm_getset,
};

int bagua_py_comm_init(PyObject *module) {
  if (PyType_Ready(&g_comm_type) < 0) return -1;
  return PyModule_AddObjectRef(module, "Comm", (PyObject *)&g_comm_type);
}
