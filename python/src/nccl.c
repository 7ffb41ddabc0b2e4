/*
 * bagua._C.NcclComm: libbagua's NCCL communicator (include/bagua/nccl.h) for the
 * communication primitives on CUDA tensors. As with Comm, buffers are passed as addresses
 * (torch's data_ptr(), device pointers here) with element counts and dtype codes; the Python
 * layer (bagua/torch_api/_cuda.py) checks the tensors first and orders the communicator's
 * stream with torch's current stream around each call.
 *
 * Every operation is enqueued on the communicator's own stream and returns once enqueued,
 * not when it has run (a bounded wait: NCCL's non-blocking communicators may answer "in
 * progress" for a while). gather and scatter, which NCCL lacks, are one group of sends and
 * receives, the root's own block included (NCCL matches a rank's send to itself with its
 * receive inside one group).
 *
 * Ownership: a NcclComm owns its bagua_nccl_comm_t and holds a reference to the Comm it was
 * created over, whose communicator it was built on. An elastic job's Comm resolves to a new
 * communicator every round: over() tells the Python layer whether this NcclComm was built on
 * the communicator the Comm resolves to now, so a stale one is replaced, never used.
 * Threading: the GIL is released around creation, synchronize() and destruction (the calls
 * that wait); abort() may be called from any thread.
 */
#include "ext.h"

typedef struct {
  PyObject_HEAD
  bagua_nccl_comm_t *nc;
  PyObject *cpu_obj; /* the Comm it was created over */
  bagua_comm_t *cpu; /* the communicator that Comm resolved to at creation */
  int cpu_rank, cpu_size;
  unsigned generation; /* fork generation it was created in (fork.c) */
} nccl_obj_t;

static PyTypeObject g_nccl_type;

static bagua_nccl_comm_t *get(nccl_obj_t *self) {
  if (bagua_py_check_owner(self->generation, "bagua NCCL communicator") < 0) return NULL;
  if (!self->nc) PyErr_SetString(PyExc_ValueError, "the NCCL communicator is closed");
  return self->nc;
}

#define GET(self)                    \
  bagua_nccl_comm_t *nc = get(self); \
  if (!nc) return NULL

static PyObject *raise_or_none(bagua_status_t st, const char *what) {
  if (st != BAGUA_OK) return bagua_py_raise(st, what);
  Py_RETURN_NONE;
}

static PyObject *nccl_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
  static char *kws[] = {"comm", "device", NULL};
  PyObject *comm_obj;
  int device = -1;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O|i", kws, &comm_obj, &device)) return NULL;
  bagua_comm_t *cpu = bagua_py_comm_get(comm_obj);
  if (!cpu) return NULL;
  if (!bagua_nccl_available()) {
    /* The same cause as bagua_nccl_comm_create's warning, as the exception's own text. */
    PyErr_SetString(PyExc_RuntimeError,
                    "CUDA tensors need a bagua built with CUDA and NCCL; this one was built "
                    "without them (no nvcc or NCCL >= 2.14 found at build time: see docs/gpu.md, "
                    "\"Building\")");
    return NULL;
  }
  bagua_nccl_comm_t *nc = NULL;
  bagua_status_t st;
  bagua_py_begin_blocking(cpu, NULL);
  Py_BEGIN_ALLOW_THREADS
  st = bagua_nccl_comm_create(cpu, device, &nc);
  Py_END_ALLOW_THREADS
  PyObject *r = bagua_py_end_blocking(st, "bagua_nccl_comm_create");
  if (!r) return NULL;
  Py_DECREF(r);
  nccl_obj_t *o = (nccl_obj_t *)type->tp_alloc(type, 0);
  if (!o) {
    bagua_nccl_comm_destroy(nc);
    return NULL;
  }
  o->nc = nc;
  Py_INCREF(comm_obj);
  o->cpu_obj = comm_obj;
  o->cpu = cpu;
  o->cpu_rank = bagua_comm_rank(cpu);
  o->cpu_size = bagua_comm_size(cpu);
  o->generation = bagua_py_generation();
  return (PyObject *)o;
}

static void destroy(nccl_obj_t *self) {
  bagua_nccl_comm_t *nc = self->nc;
  self->nc = NULL;
  if (nc && !bagua_py_inherited(self->generation)) {
    /* Finalizing waits for outstanding work, bounded by BAGUA_COMM_TIMEOUT_MS. */
    Py_BEGIN_ALLOW_THREADS
    bagua_nccl_comm_destroy(nc);
    Py_END_ALLOW_THREADS
  }
}

static void nccl_dealloc(nccl_obj_t *self) {
  destroy(self);
  Py_CLEAR(self->cpu_obj);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *nccl_close(nccl_obj_t *self, PyObject *unused) {
  destroy(self);
  Py_RETURN_NONE;
}

static PyObject *nccl_abort(nccl_obj_t *self, PyObject *unused) {
  if (self->nc && !bagua_py_inherited(self->generation)) bagua_nccl_comm_abort(self->nc);
  Py_RETURN_NONE;
}

/* over(comm): True when this communicator was built on the communicator `comm` resolves to
 * now (an elastic Comm moves to a new one every round). */
static PyObject *nccl_over(nccl_obj_t *self, PyObject *comm_obj) {
  if (comm_obj != self->cpu_obj || !self->nc) Py_RETURN_FALSE;
  bagua_comm_t *cpu = bagua_py_comm_get(comm_obj);
  if (!cpu) {
    PyErr_Clear();
    Py_RETURN_FALSE;
  }
  /* The pointer alone could match a later round's communicator allocated at the same address;
   * the rank and size are compared too, and an elastic rebuild also drops the cache. */
  return PyBool_FromLong(cpu == self->cpu && bagua_comm_rank(cpu) == self->cpu_rank &&
                         bagua_comm_size(cpu) == self->cpu_size);
}

typedef enum {
  N_ALLREDUCE,
  N_REDUCE_SCATTER,
  N_ALLGATHER,
  N_ALLTOALL,
  N_BROADCAST,
  N_REDUCE
} ncoll_t;

/* As Comm's collectives: (send, recv, count, dtype code) and then the op and/or the root. */
static const struct {
  const char *name;
  int has_op, has_root;
} k_ncolls[] = {
    [N_ALLREDUCE] = {"allreduce", 1, 0}, [N_REDUCE_SCATTER] = {"reduce_scatter", 1, 0},
    [N_ALLGATHER] = {"allgather", 0, 0}, [N_ALLTOALL] = {"alltoall", 0, 0},
    [N_BROADCAST] = {"broadcast", 0, 1}, [N_REDUCE] = {"reduce", 1, 1},
};

static PyObject *collective(nccl_obj_t *self, PyObject *args, ncoll_t k) {
  GET(self);
  const char *name = k_ncolls[k].name;
  bagua_py_coll_args_t c;
  if (bagua_py_coll_args(args, name, k_ncolls[k].has_op, k_ncolls[k].has_root, &c) < 0) return NULL;
  bagua_status_t st = BAGUA_OK;
  /* Enqueuing returns within BAGUA_COMM_TIMEOUT_MS; the GIL is released for that wait. */
  Py_BEGIN_ALLOW_THREADS
  switch (k) {
    case N_ALLREDUCE:
      st = bagua_nccl_allreduce(nc, c.send, c.recv, c.count, c.dtype, c.op);
      break;
    case N_REDUCE_SCATTER:
      st = bagua_nccl_reduce_scatter(nc, c.send, c.recv, c.count, c.dtype, c.op);
      break;
    case N_ALLGATHER:
      st = bagua_nccl_allgather(nc, c.send, c.recv, c.count, c.dtype);
      break;
    case N_ALLTOALL:
      st = bagua_nccl_alltoall(nc, c.send, c.recv, c.count, c.dtype);
      break;
    case N_BROADCAST:
      st = bagua_nccl_broadcast(nc, c.send, c.recv, c.count, c.dtype, c.root);
      break;
    case N_REDUCE:
      st = bagua_nccl_reduce(nc, c.send, c.recv, c.count, c.dtype, c.op, c.root);
      break;
  }
  Py_END_ALLOW_THREADS
  return raise_or_none(st, name);
}

#define NCOLL(fn, kind)                                          \
  static PyObject *nccl_##fn(nccl_obj_t *self, PyObject *args) { \
    return collective(self, args, kind);                         \
  }
NCOLL(allreduce, N_ALLREDUCE)
NCOLL(reduce_scatter, N_REDUCE_SCATTER)
NCOLL(allgather, N_ALLGATHER)
NCOLL(alltoall, N_ALLTOALL)
NCOLL(broadcast, N_BROADCAST)
NCOLL(reduce, N_REDUCE)

/*
 * gather(send, recv, count, dtype, root) and scatter(send, recv, count, dtype, root): one
 * group of point-to-point operations. The root posts one operation per rank, its own block as
 * a send to itself matched by a receive; the others post one. `recv` (gather) and `send`
 * (scatter) are read only on the root.
 */
static PyObject *rooted(nccl_obj_t *self, PyObject *args, int gathering) {
  GET(self);
  const char *name = gathering ? "gather" : "scatter";
  bagua_py_coll_args_t c;
  if (bagua_py_coll_args(args, name, 0, 1, &c) < 0) return NULL;
  void *s = c.send, *r = c.recv;
  size_t n = c.count;
  bagua_dtype_t dt = c.dtype;
  int root = c.root;
  int size = bagua_nccl_comm_size(nc), me = bagua_nccl_comm_rank(nc);
  if (root < 0 || root >= size)
    return PyErr_Format(PyExc_ValueError, "%s: root %d is not a rank; accepted: 0 to %d", name,
                        root, size - 1);
  size_t bytes = n * bagua_dtype_size(dt);
  bagua_nccl_p2p_t *ops = PyMem_Calloc((size_t)size + 1, sizeof(*ops));
  if (!ops) return PyErr_NoMemory();
  int k = 0;
  if (me == root) {
    for (int p = 0; p < size; p++) {
      char *block = (char *)(gathering ? r : s) + (size_t)p * bytes;
      ops[k++] = (bagua_nccl_p2p_t){
          .peer = p, .is_recv = gathering, .buf = block, .count = n, .dtype = dt};
    }
    /* The root's own block: a send to itself, matched by this receive (or the reverse). */
    ops[k++] = (bagua_nccl_p2p_t){
        .peer = root, .is_recv = !gathering, .buf = gathering ? s : r, .count = n, .dtype = dt};
  } else {
    ops[k++] = (bagua_nccl_p2p_t){
        .peer = root, .is_recv = !gathering, .buf = gathering ? s : r, .count = n, .dtype = dt};
  }
  bagua_status_t st = BAGUA_OK;
  if (n > 0) {
    Py_BEGIN_ALLOW_THREADS
    st = bagua_nccl_group_p2p(nc, ops, k);
    Py_END_ALLOW_THREADS
  }
  PyMem_Free(ops);
  return raise_or_none(st, name);
}

static PyObject *nccl_gather(nccl_obj_t *self, PyObject *args) {
  return rooted(self, args, 1);
}
static PyObject *nccl_scatter(nccl_obj_t *self, PyObject *args) {
  return rooted(self, args, 0);
}

/* send(addr, count, dtype, peer) and recv(addr, count, dtype, peer). */
static PyObject *p2p(nccl_obj_t *self, PyObject *args, int sending) {
  GET(self);
  PyObject *po;
  Py_ssize_t n;
  int dcode, peer;
  void *p;
  bagua_dtype_t dt;
  if (!PyArg_ParseTuple(args, "Onii", &po, &n, &dcode, &peer)) return NULL;
  if (n < 0) return PyErr_Format(PyExc_ValueError, "count %zd is negative", n);
  if (bagua_py_ptr(po, &p) < 0 || bagua_py_dtype(dcode, &dt) < 0) return NULL;
  bagua_status_t st;
  Py_BEGIN_ALLOW_THREADS
  st = sending ? bagua_nccl_send(nc, p, (size_t)n, dt, peer)
               : bagua_nccl_recv(nc, p, (size_t)n, dt, peer);
  Py_END_ALLOW_THREADS
  return raise_or_none(st, sending ? "send" : "recv");
}

static PyObject *nccl_send(nccl_obj_t *self, PyObject *args) {
  return p2p(self, args, 1);
}
static PyObject *nccl_recv(nccl_obj_t *self, PyObject *args) {
  return p2p(self, args, 0);
}

static PyObject *nccl_synchronize(nccl_obj_t *self, PyObject *unused) {
  GET(self);
  bagua_status_t st;
  Py_BEGIN_ALLOW_THREADS
  st = bagua_nccl_comm_synchronize(nc);
  Py_END_ALLOW_THREADS
  return raise_or_none(st, "synchronize");
}

#define INT_GETTER(name, expr)                                   \
  static PyObject *get_##name(nccl_obj_t *self, void *closure) { \
    GET(self);                                                   \
    return PyLong_FromLongLong((long long)(expr));               \
  }
INT_GETTER(rank, bagua_nccl_comm_rank(nc))
INT_GETTER(size, bagua_nccl_comm_size(nc))
INT_GETTER(device, bagua_nccl_comm_device(nc))
INT_GETTER(stream, (uintptr_t)bagua_nccl_comm_stream(nc))
INT_GETTER(bytes_sent, bagua_nccl_comm_bytes_sent(nc))

static PyGetSetDef nccl_getset[] = {
    {"rank", (getter)get_rank, NULL, "This process's rank.", NULL},
    {"size", (getter)get_size, NULL, "Number of ranks.", NULL},
    {"device", (getter)get_device, NULL, "The CUDA device it runs on.", NULL},
    {"stream", (getter)get_stream, NULL, "Its CUDA stream (a cudaStream_t, as an int).", NULL},
    {"bytes_sent", (getter)get_bytes_sent, NULL, "Bytes handed to NCCL to send.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

#define M(name, flags, doc) \
  { #name, (PyCFunction)nccl_##name, flags, doc }
static PyMethodDef nccl_methods[] = {
    M(allreduce, METH_VARARGS, "allreduce(send, recv, count, dtype, op)"),
    M(reduce_scatter, METH_VARARGS, "reduce_scatter(send, recv, recvcount, dtype, op)"),
    M(allgather, METH_VARARGS, "allgather(send, recv, sendcount, dtype)"),
    M(alltoall, METH_VARARGS, "alltoall(send, recv, count, dtype); not in place"),
    M(broadcast, METH_VARARGS, "broadcast(send, recv, count, dtype, root)"),
    M(reduce, METH_VARARGS, "reduce(send, recv, count, dtype, op, root)"),
    M(gather, METH_VARARGS, "gather(send, recv, sendcount, dtype, root)"),
    M(scatter, METH_VARARGS, "scatter(send, recv, recvcount, dtype, root)"),
    M(send, METH_VARARGS, "send(buf, count, dtype, peer)"),
    M(recv, METH_VARARGS, "recv(buf, count, dtype, peer)"),
    M(synchronize, METH_NOARGS, "synchronize(): waits (bounded) for the work enqueued so far"),
    M(over, METH_O, "over(comm) -> True if built on the communicator comm resolves to now"),
    M(abort, METH_NOARGS, "abort(): makes current and later calls fail (any thread)"),
    M(close, METH_NOARGS, "close(): finalizes (bounded) and frees the communicator"),
    {NULL, NULL, 0, NULL}};

static PyTypeObject g_nccl_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "bagua._C.NcclComm",
    .tp_basicsize = sizeof(nccl_obj_t),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "NcclComm(comm, device=-1): an NCCL communicator over a Comm's ranks (collective).",
    .tp_new = nccl_new,
    .tp_dealloc = (destructor)nccl_dealloc,
    .tp_methods = nccl_methods,
    .tp_getset = nccl_getset,
};

int bagua_py_nccl_init(PyObject *module) {
  if (PyType_Ready(&g_nccl_type) < 0) return -1;
  if (PyModule_AddIntConstant(module, "cuda_built", bagua_nccl_available()) < 0) return -1;
  return PyModule_AddObjectRef(module, "NcclComm", (PyObject *)&g_nccl_type);
}
