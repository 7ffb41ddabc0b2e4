/*
 * Internal declarations of the CPython extension module bagua._C (python/src/): the error
 * hierarchy and the helpers every type of the module shares.
 *
 * Threading: every function here is called with the GIL held. The wrappers release the GIL
 * around each libbagua call that can block (collectives, creation, steps), so other Python
 * threads run meanwhile; libbagua's thread-local last-error text is read on the same thread
 * right after the call, before the GIL is taken back by anyone else's code on this thread.
 */
#ifndef BAGUA_PY_EXT_H
#define BAGUA_PY_EXT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "bagua/bagua.h"

/* Raises the BaguaError subclass of `st` with "WHAT: BAGUA_ERR_X: last warning" and returns
 * NULL, so callers can `return bagua_py_raise(st, "allreduce");`. */
PyObject *bagua_py_raise(bagua_status_t st, const char *what);

/* Parses a dtype code (a bagua_dtype_t) or op code; sets ValueError and returns -1 if bad. */
int bagua_py_dtype(int code, bagua_dtype_t *out);
int bagua_py_op(int code, bagua_op_t *out);

/* Converts a Python int holding a memory address (torch's data_ptr()) into a pointer; 0 is
 * accepted only when `count` is 0. Sets an exception and returns -1 if bad. */
int bagua_py_ptr(PyObject *obj, void **out);

/* The arguments every collective binding takes (Comm's and NcclComm's): send address, recv
 * address, count, dtype code, then the op code (when `has_op`) and the root (when `has_root`).
 * Fills the outputs (op defaults to SUM, root to 0); sets TypeError/ValueError naming `name`
 * and returns -1 if bad. */
typedef struct {
  void *send, *recv;
  size_t count;
  bagua_dtype_t dtype;
  bagua_op_t op;
  int root;
} bagua_py_coll_args_t;
int bagua_py_coll_args(PyObject *args, const char *name, int has_op, int has_root,
                       bagua_py_coll_args_t *out);

/* Ctrl-C interrupts blocking calls (interrupt.c): bagua_py_interrupt_init() installs the
 * chained SIGINT handler once; a blocking call is bracketed by bagua_py_begin_blocking()
 * (before releasing the GIL) and bagua_py_end_blocking() (after taking it back), which
 * returns None, raises the pending KeyboardInterrupt, or raises the BaguaError of `st`. */
int bagua_py_interrupt_init(void);
void bagua_py_begin_blocking(bagua_comm_t *comm, bagua_ddp_t *ddp);
PyObject *bagua_py_end_blocking(bagua_status_t st, const char *what);

/* Returns, from the calling method, the result of the blocking library call `call` (a
 * bagua_status_t expression) run without the GIL: interruptible by Ctrl-C through `comm` or
 * `ddp` (the other NULL), its status turned into None or an exception naming `what`. */
#define BAGUA_PY_RUN(comm, ddp, what, call)  \
  do {                                       \
    bagua_status_t st_;                      \
    bagua_py_begin_blocking((comm), (ddp));  \
    Py_BEGIN_ALLOW_THREADS                   \
    st_ = (call);                            \
    Py_END_ALLOW_THREADS                     \
    return bagua_py_end_blocking(st_, what); \
  } while (0)

/* Fork guard (fork.c): objects record bagua_py_generation() when created; in a process
 * forked after that, bagua_py_inherited() is true, bagua_py_check_owner() raises RuntimeError
 * naming `what` and returns -1, and deallocation leaks the object instead of destroying it. */
int bagua_py_fork_init(void);
unsigned bagua_py_generation(void);
int bagua_py_inherited(unsigned generation);
int bagua_py_check_owner(unsigned generation, const char *what);
/* Adds the error classes (BaguaError and one subclass per status) to the module. */
int bagua_py_errors_init(PyObject *module);
/* Adds the Comm type; bagua_py_comm_get() unwraps one (borrowed; NULL + TypeError if not). */
int bagua_py_comm_init(PyObject *module);
bagua_comm_t *bagua_py_comm_get(PyObject *obj);
/* Adds the DDP and Buffer types. bagua_py_ddp_get() unwraps a DDP (borrowed; NULL + an
 * exception if not one or closed); bagua_py_ddp_peek() the same without raising. */
int bagua_py_ddp_init(PyObject *module);
bagua_ddp_t *bagua_py_ddp_get(PyObject *obj);
bagua_ddp_t *bagua_py_ddp_peek(PyObject *obj);
/* Adds the Elastic type (elastic.c). bagua_py_elastic_comm() is the current round's
 * communicator of an Elastic (borrowed; NULL + ValueError when it has none). */
int bagua_py_elastic_init(PyObject *module);
int bagua_py_elastic_check(PyObject *obj);
bagua_comm_t *bagua_py_elastic_comm(PyObject *elastic);
/* A Comm that resolves to `owner`'s current communicator through `resolve` at every call and
 * never destroys it (it holds a reference to `owner`, an Elastic: elastic.c passes
 * bagua_py_elastic_comm, so comm.c needs nothing of elastic.c). New reference. */
PyObject *bagua_py_comm_borrow(PyObject *owner, bagua_comm_t *(*resolve)(PyObject *owner));
/* Adds the Sampler type. */
int bagua_py_sampler_init(PyObject *module);
/* Adds the Store type (store.c). */
int bagua_py_store_init(PyObject *module);
/* Adds the NcclComm type and the cuda_built flag (nccl.c). */
int bagua_py_nccl_init(PyObject *module);

#endif
