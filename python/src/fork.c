/*
 * Fork guard of bagua._C. A communicator, DDP context or elastic context holds sockets,
 * shared-memory segments and threads. After fork() the child has copies of the sockets and
 * segments but none of the threads, so a call from the child would interleave its bytes with
 * the parent's on the same streams (wrong data for both), and destroying the object would wait
 * for threads that do not exist (a hang at the child's exit). Each object therefore records
 * the fork generation it was created in; a child refuses to use the parent's objects and
 * leaks them instead of destroying them. Objects a child creates itself are its own.
 */
#include <pthread.h>
#include <unistd.h>

#include "ext.h"

/* Incremented in every child right after fork(); only the forking thread exists there. */
static volatile unsigned g_generation;

static void on_fork_child(void) {
  g_generation++;
}

int bagua_py_fork_init(void) {
  if (pthread_atfork(NULL, NULL, on_fork_child) != 0) {
    PyErr_SetString(PyExc_RuntimeError, "bagua._C: pthread_atfork failed");
    return -1;
  }
  return 0;
}

unsigned bagua_py_generation(void) {
  return g_generation;
}

int bagua_py_inherited(unsigned generation) {
  return generation != g_generation;
}

int bagua_py_check_owner(unsigned generation, const char *what) {
  if (!bagua_py_inherited(generation)) return 0;
  PyErr_Format(
      PyExc_RuntimeError,
      "this %s belongs to the process that process %d was forked from: its sockets, shared "
      "memory and threads belong to the parent, so only the parent may use it. Call "
      "bagua from the parent, or start child processes with multiprocessing's "
      "\"spawn\" or \"forkserver\" method; a forked child may create its own",
      what, (int)getpid());
  return -1;
}
