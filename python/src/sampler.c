/*
 * bagua._C.Sampler: libbagua's load-balanced distributed sampler (include/bagua/loader.h) for
 * bagua.torch_api.contrib.LoadBalancingDistributedSampler. The Python layer computes the
 * complexities on rank 0 and broadcasts them; every rank then builds the same layout here.
 *
 * Ownership: a Sampler owns its bagua_sampler_t. Threading: nothing blocks; called with the
 * GIL held (a sampler is used from one thread, as libbagua requires).
 */
#include "ext.h"

typedef struct {
  PyObject_HEAD
  bagua_sampler_t *s;
  int rank; /* the rank this process holds in the sampler's current layout */
} sampler_obj_t;

static PyObject *sampler_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
  static char *kws[] = {"complexities", "num_samples", "seed", "noise_level", "shuffle",
                        "batch_size",   "drop_last",   "rank", "world",       NULL};
  bagua_sampler_config_t cfg = BAGUA_SAMPLER_CONFIG_INIT;
  PyObject *addr;
  long long n, batch = 1;
  unsigned long long seed = 0;
  int shuffle = 1, drop_last = 0, rank = 0, world = 1;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "OL|KdpLpii", kws, &addr, &n, &seed, &cfg.noise_level,
                                   &shuffle, &batch, &drop_last, &rank, &world))
    return NULL;
  void *p;
  if (bagua_py_ptr(addr, &p) < 0) return NULL;
  cfg.num_samples = n;
  cfg.complexities = p;
  cfg.seed = seed;
  cfg.shuffle = shuffle;
  cfg.batch_size = batch;
  cfg.drop_last = drop_last;
  cfg.rank = rank;
  cfg.world = world;
  bagua_sampler_t *s = NULL;
  bagua_status_t st = bagua_sampler_create(&cfg, &s);
  if (st != BAGUA_OK) return bagua_py_raise(st, "bagua_sampler_create");
  sampler_obj_t *o = (sampler_obj_t *)type->tp_alloc(type, 0);
  if (!o) {
    bagua_sampler_destroy(s);
    return NULL;
  }
  o->s = s;
  o->rank = rank;
  return (PyObject *)o;
}

static void sampler_dealloc(sampler_obj_t *self) {
  bagua_sampler_destroy(self->s);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *sampler_set_epoch(sampler_obj_t *self, PyObject *args) {
  unsigned long long epoch;
  if (!PyArg_ParseTuple(args, "K", &epoch)) return NULL;
  bagua_status_t st = bagua_sampler_set_epoch(self->s, epoch);
  if (st != BAGUA_OK) return bagua_py_raise(st, "set_epoch");
  Py_RETURN_NONE;
}

/* next_batch(out_addr, max) -> n: writes this rank's next batch of int64 indices. */
static PyObject *sampler_next_batch(sampler_obj_t *self, PyObject *args) {
  PyObject *addr;
  Py_ssize_t max;
  if (!PyArg_ParseTuple(args, "On", &addr, &max)) return NULL;
  void *p;
  if (bagua_py_ptr(addr, &p) < 0) return NULL;
  if (max < 0) return PyErr_Format(PyExc_ValueError, "max %zd is negative", max);
  size_t n = 0;
  bagua_status_t st = bagua_sampler_next_batch(self->s, p, (size_t)max, &n);
  if (st != BAGUA_OK) return bagua_py_raise(st, "next_batch");
  return PyLong_FromSize_t(n);
}

static PyObject *sampler_commit(sampler_obj_t *self, PyObject *unused) {
  bagua_sampler_commit(self->s);
  Py_RETURN_NONE;
}

static PyObject *sampler_num_steps(sampler_obj_t *self, PyObject *unused) {
  return PyLong_FromUnsignedLongLong(bagua_sampler_num_steps(self->s));
}

static PyObject *sampler_set_world(sampler_obj_t *self, PyObject *args) {
  int rank, world;
  unsigned long long committed;
  if (!PyArg_ParseTuple(args, "iiK", &rank, &world, &committed)) return NULL;
  bagua_status_t st = bagua_sampler_set_world(self->s, rank, world, committed);
  if (st != BAGUA_OK) return bagua_py_raise(st, "set_world");
  self->rank = rank;
  Py_RETURN_NONE;
}

/* The position as bytes (bagua_sampler_state_t is plain data), for commits and broadcasts. */
static PyObject *sampler_get_state(sampler_obj_t *self, PyObject *unused) {
  bagua_sampler_state_t state;
  bagua_sampler_get_state(self->s, &state);
  return PyBytes_FromStringAndSize((const char *)&state, sizeof(state));
}

static PyObject *sampler_set_state(sampler_obj_t *self, PyObject *args) {
  int rank;
  Py_buffer b;
  if (!PyArg_ParseTuple(args, "iy*", &rank, &b)) return NULL;
  if (b.len != (Py_ssize_t)sizeof(bagua_sampler_state_t)) {
    PyErr_Format(PyExc_ValueError, "a sampler state is %zu bytes, not %zd",
                 sizeof(bagua_sampler_state_t), b.len);
    PyBuffer_Release(&b);
    return NULL;
  }
  bagua_sampler_state_t state;
  memcpy(&state, b.buf, sizeof(state));
  PyBuffer_Release(&b);
  /* rank -1: this process's rank if it exists in the state's last world, else 0 (a rank
   * that joins or whose rank vanished takes rank 0's place until set_world() moves it). */
  if (rank < 0) {
    uint32_t last = state.nlayouts >= 1 && state.nlayouts <= BAGUA_SAMPLER_MAX_LAYOUTS
                        ? state.layouts[state.nlayouts - 1].world
                        : 0;
    rank = self->rank >= 0 && (uint32_t)self->rank < last ? self->rank : 0;
  }
  bagua_status_t st = bagua_sampler_set_state(self->s, rank, &state);
  if (st != BAGUA_OK) return bagua_py_raise(st, "set_state");
  self->rank = rank;
  Py_RETURN_NONE;
}

/* committed_steps() -> the steps of this epoch committed so far (the position set_world()
 * takes after a world change). */
static PyObject *sampler_committed_steps(sampler_obj_t *self, PyObject *unused) {
  bagua_sampler_state_t state;
  bagua_sampler_get_state(self->s, &state);
  return PyLong_FromUnsignedLongLong(state.committed_steps);
}

#define M(name, flags, doc) \
  { #name, (PyCFunction)sampler_##name, flags, doc }
static PyMethodDef sampler_methods[] = {
    M(set_epoch, METH_VARARGS, "set_epoch(epoch)"),
    M(next_batch, METH_VARARGS, "next_batch(out_addr, max) -> n (0: epoch exhausted)"),
    M(commit, METH_NOARGS, "commit(): the batches handed out so far are consumed"),
    M(num_steps, METH_NOARGS, "num_steps() -> steps of this epoch"),
    M(set_world, METH_VARARGS, "set_world(rank, world, committed_steps)"),
    M(get_state, METH_NOARGS, "get_state() -> bytes"),
    M(set_state, METH_VARARGS,
      "set_state(rank, state_bytes); rank -1: this rank if in the state's world, else 0"),
    M(committed_steps, METH_NOARGS, "committed_steps() -> steps of this epoch committed"),
    {NULL, NULL, 0, NULL}};

static PyTypeObject g_sampler_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "bagua._C.Sampler",
    .tp_basicsize = sizeof(sampler_obj_t),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc =
        "Sampler(complexities_addr, num_samples, seed=0, noise_level=0.0, shuffle=True, "
        "batch_size=1, drop_last=False, rank=0, world=1)",
    .tp_new = sampler_new,
    .tp_dealloc = (destructor)sampler_dealloc,
    .tp_methods = sampler_methods,
};

int bagua_py_sampler_init(PyObject *module) {
  if (PyType_Ready(&g_sampler_type) < 0) return -1;
  return PyModule_AddObjectRef(module, "Sampler", (PyObject *)&g_sampler_type);
}
