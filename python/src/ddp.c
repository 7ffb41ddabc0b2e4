/*
 * bagua._C.DDP: a libbagua data-parallel context (include/bagua/ddp.h) for the PyTorch front
 * end, and bagua._C.Buffer, a view of one tensor's slice of the context's flat storage that
 * torch turns into a tensor without copying: host storage through the buffer protocol
 * (torch.frombuffer), CUDA device storage ("cuda" contexts) through __cuda_array_interface__
 * (torch.as_tensor).
 *
 * Ownership: a DDP owns its bagua_ddp_t. Every Buffer holds a reference to its DDP, and every
 * torch tensor made from a Buffer holds the Buffer, so the flat storage outlives every view
 * of it: the context is destroyed only when the DDP and all views are gone.
 * Threading: the GIL is released around every call that can block (create, ready, wait,
 * step, pause/resume); abort() may be called from any thread.
 */
#include <string.h>

#include "ext.h"

typedef struct {
  PyObject_HEAD
  bagua_ddp_t *ddp;
  int locked;          /* this object holds the weight lock (lock_weights) */
  int device;          /* 1: the flat storage is CUDA device memory (config device "cuda") */
  unsigned generation; /* fork generation it was created in (fork.c) */
} ddp_obj_t;

typedef struct {
  PyObject_HEAD
  PyObject *owner; /* the DDP whose storage this views */
  float *ptr;
  Py_ssize_t count;
  int device; /* 1: ptr is device memory: no buffer protocol, __cuda_array_interface__ */
} buf_obj_t;

static PyTypeObject g_ddp_type, g_buf_type;

static bagua_ddp_t *get(ddp_obj_t *self) {
  if (bagua_py_check_owner(self->generation, "bagua DDP context") < 0) return NULL;
  if (!self->ddp) PyErr_SetString(PyExc_ValueError, "the DDP context is closed");
  return self->ddp;
}

bagua_ddp_t *bagua_py_ddp_peek(PyObject *obj) {
  if (!PyObject_TypeCheck(obj, &g_ddp_type)) return NULL;
  return ((ddp_obj_t *)obj)->ddp;
}

bagua_ddp_t *bagua_py_ddp_get(PyObject *obj) {
  if (!PyObject_TypeCheck(obj, &g_ddp_type)) {
    PyErr_Format(PyExc_TypeError, "expected a bagua._C.DDP, not %s", Py_TYPE(obj)->tp_name);
    return NULL;
  }
  return get((ddp_obj_t *)obj);
}

#define GET(self)               \
  bagua_ddp_t *ddp = get(self); \
  if (!ddp) return NULL

#define RUN(what, call) BAGUA_PY_RUN(NULL, ddp, what, call)

static PyObject *ddp_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
  static char *kws[] = {"comm",
                        "algorithm",
                        "hierarchical",
                        "peer_mode",
                        "comm_interval",
                        "error_feedback",
                        "warmup_steps",
                        "sync_interval_ms",
                        "bucket_bytes",
                        "optimizer",
                        "lr",
                        "momentum",
                        "dampening",
                        "nesterov",
                        "weight_decay",
                        "beta1",
                        "beta2",
                        "eps",
                        "device",
                        "cuda_device",
                        "cuda_stream",
                        "rank",
                        NULL};
  bagua_ddp_config_t cfg = BAGUA_DDP_CONFIG_INIT;
  PyObject *comm_obj;
  long long bucket = 0;
  unsigned long long stream = 0;
  if (!PyArg_ParseTupleAndKeywords(
          args, kw, "O|zizii$iiLzdddpddddziKi", kws, &comm_obj, &cfg.algorithm, &cfg.hierarchical,
          &cfg.peer_mode, &cfg.comm_interval, &cfg.error_feedback, &cfg.warmup_steps,
          &cfg.sync_interval_ms, &bucket, &cfg.optimizer, &cfg.lr, &cfg.momentum, &cfg.dampening,
          &cfg.nesterov, &cfg.weight_decay, &cfg.beta1, &cfg.beta2, &cfg.eps, &cfg.device,
          &cfg.cuda_device, &stream, &cfg.rank))
    return NULL;
  cfg.bucket_bytes = bucket;
  /* torch's stream handle (torch.cuda.current_stream().cuda_stream) as an integer. */
  cfg.cuda_stream = (void *)(uintptr_t)stream;
  bagua_comm_t *comm = bagua_py_comm_get(comm_obj);
  if (!comm) return NULL;
  bagua_ddp_t *ddp = NULL;
  bagua_status_t st;
  Py_BEGIN_ALLOW_THREADS
  st = bagua_ddp_create(comm, &cfg, &ddp);
  Py_END_ALLOW_THREADS
  if (st != BAGUA_OK) return bagua_py_raise(st, "bagua_ddp_create");
  ddp_obj_t *o = (ddp_obj_t *)type->tp_alloc(type, 0);
  if (!o) {
    bagua_ddp_destroy(ddp);
    return NULL;
  }
  o->ddp = ddp;
  o->device = cfg.device && !strcmp(cfg.device, "cuda") ? 1 : 0;
  o->generation = bagua_py_generation();
  return (PyObject *)o;
}

static void ddp_dealloc(ddp_obj_t *self) {
  bagua_ddp_t *d = self->ddp;
  self->ddp = NULL;
  if (d && !bagua_py_inherited(self->generation)) {
    if (self->locked) bagua_ddp_unlock_weights(d);
    Py_BEGIN_ALLOW_THREADS
    bagua_ddp_destroy(d);
    Py_END_ALLOW_THREADS
  }
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *ddp_register(ddp_obj_t *self, PyObject *args) {
  GET(self);
  const char *name;
  PyObject *po, *go;
  Py_ssize_t count;
  if (!PyArg_ParseTuple(args, "zOOn", &name, &po, &go, &count)) return NULL;
  void *p, *g = NULL;
  if (bagua_py_ptr(po, &p) < 0) return NULL;
  if (go != Py_None && bagua_py_ptr(go, &g) < 0) return NULL;
  if (count <= 0) {
    PyErr_Format(PyExc_ValueError, "register: tensor \"%s\" has %zd elements; accepted: >= 1",
                 name ? name : "?", count);
    return NULL;
  }
  bagua_status_t st = bagua_ddp_register(ddp, name, p, g, (size_t)count);
  if (st != BAGUA_OK) return bagua_py_raise(st, "register");
  Py_RETURN_NONE;
}

static PyObject *ddp_register_shape(ddp_obj_t *self, PyObject *args) {
  GET(self);
  int i;
  Py_ssize_t rows;
  if (!PyArg_ParseTuple(args, "in", &i, &rows)) return NULL;
  if (rows <= 0) {
    PyErr_Format(PyExc_ValueError, "register_shape: rows = %zd; accepted: >= 1", rows);
    return NULL;
  }
  bagua_status_t st = bagua_ddp_register_shape(ddp, i, (size_t)rows);
  if (st != BAGUA_OK) return bagua_py_raise(st, "register_shape");
  Py_RETURN_NONE;
}

static PyObject *ddp_ready(ddp_obj_t *self, PyObject *unused) {
  GET(self);
  RUN("ready", bagua_ddp_ready(ddp));
}

static PyObject *ddp_release_params(ddp_obj_t *self, PyObject *unused) {
  GET(self);
  RUN("release_params", bagua_ddp_release_params(ddp));
}

static PyObject *ddp_grad_ready(ddp_obj_t *self, PyObject *args) {
  GET(self);
  int i;
  if (!PyArg_ParseTuple(args, "i", &i)) return NULL;
  /* Never blocks on communication: no GIL release, which would cost more than the call. */
  bagua_status_t st = bagua_ddp_grad_ready(ddp, i);
  if (st != BAGUA_OK) return bagua_py_raise(st, "grad_ready");
  Py_RETURN_NONE;
}

static PyObject *ddp_wait(ddp_obj_t *self, PyObject *unused) {
  GET(self);
  RUN("wait", bagua_ddp_wait(ddp));
}

static PyObject *ddp_step(ddp_obj_t *self, PyObject *unused) {
  GET(self);
  RUN("step", bagua_ddp_step(ddp));
}

static PyObject *ddp_set_lr(ddp_obj_t *self, PyObject *args) {
  GET(self);
  double lr;
  if (!PyArg_ParseTuple(args, "d", &lr)) return NULL;
  bagua_status_t st = bagua_ddp_set_lr(ddp, lr);
  if (st != BAGUA_OK) return bagua_py_raise(st, "set_lr");
  Py_RETURN_NONE;
}

static PyObject *ddp_set_step(ddp_obj_t *self, PyObject *args) {
  GET(self);
  long long step;
  if (!PyArg_ParseTuple(args, "L", &step)) return NULL;
  bagua_status_t st = bagua_ddp_set_step(ddp, (int64_t)step);
  if (st != BAGUA_OK) return bagua_py_raise(st, "set_step");
  Py_RETURN_NONE;
}

static PyObject *ddp_local_step(ddp_obj_t *self, PyObject *unused) {
  GET(self);
  RUN("local_step", bagua_ddp_local_step(ddp));
}

static PyObject *ddp_async_pause(ddp_obj_t *self, PyObject *unused) {
  GET(self);
  RUN("async_pause", bagua_ddp_async_pause(ddp));
}

static PyObject *ddp_async_resume(ddp_obj_t *self, PyObject *unused) {
  GET(self);
  RUN("async_resume", bagua_ddp_async_resume(ddp));
}

static PyObject *ddp_abort(ddp_obj_t *self, PyObject *unused) {
  if (self->ddp && !bagua_py_inherited(self->generation)) bagua_ddp_abort(self->ddp);
  Py_RETURN_NONE;
}

static PyObject *ddp_lock_weights(ddp_obj_t *self, PyObject *unused) {
  GET(self);
  if (self->locked) Py_RETURN_NONE;
  /* The averaging thread holds the lock only for a copy or an axpy: a short wait. */
  Py_BEGIN_ALLOW_THREADS
  bagua_ddp_lock_weights(ddp);
  Py_END_ALLOW_THREADS
  self->locked = 1;
  Py_RETURN_NONE;
}

static PyObject *ddp_unlock_weights(ddp_obj_t *self, PyObject *unused) {
  GET(self);
  if (self->locked) bagua_ddp_unlock_weights(ddp);
  self->locked = 0;
  Py_RETURN_NONE;
}

static PyObject *make_buffer(ddp_obj_t *self, float *ptr, Py_ssize_t count) {
  buf_obj_t *b = PyObject_New(buf_obj_t, &g_buf_type);
  if (!b) return NULL;
  Py_INCREF(self);
  b->owner = (PyObject *)self;
  b->ptr = ptr;
  b->count = count;
  b->device = self->device;
  return (PyObject *)b;
}

/* param_buffer(i, count) / grad_buffer(i, count): the flat storage of tensor i. */
static PyObject *view(ddp_obj_t *self, PyObject *args, int grad) {
  GET(self);
  int i;
  Py_ssize_t count;
  if (!PyArg_ParseTuple(args, "in", &i, &count)) return NULL;
  float *p = grad ? bagua_ddp_grad(ddp, i) : bagua_ddp_param(ddp, i);
  if (!p) {
    PyErr_Format(PyExc_IndexError, "tensor %d has no flat storage (bad index, or before ready)", i);
    return NULL;
  }
  return make_buffer(self, p, count);
}

static PyObject *ddp_param_buffer(ddp_obj_t *self, PyObject *args) {
  return view(self, args, 0);
}
static PyObject *ddp_grad_buffer(ddp_obj_t *self, PyObject *args) {
  return view(self, args, 1);
}

static PyObject *ddp_stats(ddp_obj_t *self, PyObject *unused) {
  GET(self);
  bagua_ddp_stats_t s = {.struct_size = sizeof(s)};
  bagua_status_t st = bagua_ddp_stats(ddp, &s);
  if (st != BAGUA_OK) return bagua_py_raise(st, "stats");
  return Py_BuildValue("{s:L,s:i,s:i,s:n,s:K,s:K,s:d,s:d,s:d,s:d,s:d,s:K}", "steps",
                       (long long)s.steps, "num_tensors", s.num_tensors, "num_buckets",
                       s.num_buckets, "flat_elems", (Py_ssize_t)s.flat_elems, "bytes_last_step",
                       (unsigned long long)s.bytes_last_step, "bytes_total",
                       (unsigned long long)s.bytes_total, "comm_s_last_step", s.comm_s_last_step,
                       "comm_s_total", s.comm_s_total, "overlap_last_step", s.overlap_last_step,
                       "overlap_total", s.overlap_total, "wait_s_last_step", s.wait_s_last_step,
                       "async_rounds", (unsigned long long)s.async_rounds);
}

#define M(name, flags, doc) \
  { #name, (PyCFunction)ddp_##name, flags, doc }
static PyMethodDef ddp_methods[] = {
    M(register, METH_VARARGS, "register(name, param_addr, grad_addr_or_None, count)"),
    M(register_shape, METH_VARARGS, "register_shape(index, rows): the tensor's matrix rows"),
    M(ready, METH_NOARGS, "ready(): lays out buckets, syncs rank 0's weights (collective)"),
    M(release_params, METH_NOARGS,
      "release_params(): the weights live only in the flat storage from now on"),
    M(grad_ready, METH_VARARGS, "grad_ready(i): tensor i's gradient of this step is complete"),
    M(wait, METH_NOARGS, "wait(): waits for the step's communication (post-backward)"),
    M(step, METH_NOARGS, "step(): ends the step (after the optimizer update)"),
    M(set_lr, METH_VARARGS, "set_lr(lr): learning rate of libbagua's own optimizer"),
    M(set_step, METH_VARARGS,
      "set_step(n): numbers the current step (first call before ready(), on every rank)"),
    M(local_step, METH_NOARGS,
      "local_step(): counts an iteration run without communicating (no_sync) in the step number"),
    M(async_pause, METH_NOARGS, "async_pause(): stops background averaging (collective)"),
    M(async_resume, METH_NOARGS, "async_resume(): restarts background averaging (collective)"),
    M(abort, METH_NOARGS, "abort(): makes blocked and later calls fail (any thread)"),
    M(lock_weights, METH_NOARGS, "lock_weights(): excludes the async averaging thread"),
    M(unlock_weights, METH_NOARGS, "unlock_weights()"),
    M(param_buffer, METH_VARARGS, "param_buffer(i, count) -> Buffer over tensor i's weights"),
    M(grad_buffer, METH_VARARGS, "grad_buffer(i, count) -> Buffer over tensor i's gradient"),
    M(stats, METH_NOARGS, "stats() -> dict of libbagua's counters"),
    {NULL, NULL, 0, NULL}};

static PyTypeObject g_ddp_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "bagua._C.DDP",
    .tp_basicsize = sizeof(ddp_obj_t),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "DDP(comm, algorithm=None, ...): a libbagua data-parallel context.",
    .tp_new = ddp_new,
    .tp_dealloc = (destructor)ddp_dealloc,
    .tp_methods = ddp_methods,
};

static int buf_getbuffer(buf_obj_t *self, Py_buffer *view, int flags) {
  if (self->device) {
    /* Host code must never dereference a device pointer. */
    PyErr_SetString(PyExc_BufferError,
                    "this Buffer is CUDA device memory; use torch.as_tensor(buf, device=...), "
                    "which reads __cuda_array_interface__");
    return -1;
  }
  return PyBuffer_FillInfo(view, (PyObject *)self, self->ptr,
                           self->count * (Py_ssize_t)sizeof(float), 0, flags);
}

static void buf_dealloc(buf_obj_t *self) {
  Py_XDECREF(self->owner);
  PyObject_Free(self);
}

/*
 * The CUDA array interface (version 2) of a device Buffer: torch.as_tensor() makes a tensor
 * over the memory without copying and keeps the Buffer alive as long as the tensor. No
 * "stream" entry: the storage is only ever touched on the context's compute stream, which is
 * torch's current stream, so the consumer must not synchronize anything. A host Buffer has no
 * such attribute (AttributeError), so consumers fall back to the buffer protocol.
 */
static PyObject *buf_cuda_array_interface(buf_obj_t *self, void *closure) {
  if (!self->device) {
    PyErr_SetString(PyExc_AttributeError, "a host Buffer has no __cuda_array_interface__");
    return NULL;
  }
  return Py_BuildValue("{s:(n),s:s,s:(KO),s:i,s:O}", "shape", self->count, "typestr", "<f4", "data",
                       (unsigned long long)(uintptr_t)self->ptr, Py_False, "version", 2, "strides",
                       Py_None);
}

static PyGetSetDef buf_getset[] = {{"__cuda_array_interface__", (getter)buf_cuda_array_interface,
                                    NULL, "The CUDA array interface of a device Buffer.", NULL},
                                   {NULL, NULL, NULL, NULL, NULL}};

static PyBufferProcs buf_procs = {.bf_getbuffer = (getbufferproc)buf_getbuffer};

static PyTypeObject g_buf_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "bagua._C.Buffer",
    .tp_basicsize = sizeof(buf_obj_t),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A writable view of float32 elements of a DDP's flat storage (host or device).",
    .tp_dealloc = (destructor)buf_dealloc,
    .tp_as_buffer = &buf_procs,
    .tp_getset = buf_getset,
};

int bagua_py_ddp_init(PyObject *module) {
  if (PyType_Ready(&g_ddp_type) < 0 || PyType_Ready(&g_buf_type) < 0) return -1;
  if (PyModule_AddObjectRef(module, "DDP", (PyObject *)&g_ddp_type) < 0) return -1;
  return PyModule_AddObjectRef(module, "Buffer", (PyObject *)&g_buf_type);
}
