/*
 * Ctrl-C during a blocking libbagua call. With the GIL released, Python's own SIGINT handler
 * only sets a flag that nobody reads until the call returns, which could be
 * BAGUA_COMM_TIMEOUT_MS later. So the module chains a handler in front of Python's: it writes
 * a byte to a pipe (async-signal-safe) and calls Python's handler. A watcher thread reads the
 * pipe and aborts the communicator or context that is in a blocking call at that moment
 * (bagua_comm_abort and bagua_ddp_abort are thread-safe, but not async-signal-safe, hence the
 * thread). The call returns BAGUA_ERR_ABORTED, and bagua_py_end_blocking() turns that into the
 * KeyboardInterrupt Python's handler recorded. The aborted object is poisoned: after Ctrl-C the
 * job is expected to stop.
 *
 * A program that installs its own SIGINT handler later (signal.signal) replaces this one:
 * Ctrl-C then waits for the call to return, as before.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <unistd.h>

#include "ext.h"

static int g_pipe[2] = {-1, -1};
static struct sigaction g_prev;
static _Atomic(bagua_comm_t *) g_comm;
static _Atomic(bagua_ddp_t *) g_ddp;

static void on_sigint(int sig, siginfo_t *info, void *ctx) {
  int saved = errno;
  char b = 1;
  if (write(g_pipe[1], &b, 1) < 0) {
    /* A full pipe already holds a wake-up: nothing is lost. */
  }
  errno = saved;
  if (g_prev.sa_flags & SA_SIGINFO) {
    if (g_prev.sa_sigaction) g_prev.sa_sigaction(sig, info, ctx);
  } else if (g_prev.sa_handler != SIG_IGN && g_prev.sa_handler != SIG_DFL) {
    g_prev.sa_handler(sig);
  } else if (g_prev.sa_handler == SIG_DFL) {
    signal(sig, SIG_DFL);
    raise(sig);
  }
}

static void *watcher(void *arg) {
  (void)arg;
  for (;;) {
    char b;
    ssize_t n = read(g_pipe[0], &b, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return NULL;
    bagua_comm_t *c = atomic_load(&g_comm);
    bagua_ddp_t *d = atomic_load(&g_ddp);
    if (c) bagua_comm_abort(c);
    if (d) bagua_ddp_abort(d);
  }
}

int bagua_py_interrupt_init(void) {
  if (g_pipe[0] >= 0) return 0;
  if (pipe(g_pipe) != 0) return 0; /* without it Ctrl-C only waits longer: not fatal */
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  /* The watcher blocks every signal, so SIGINT is never delivered to it: its read() is never
   * interrupted and Python's handler runs on a thread that can take the GIL. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  int rc = pthread_create(&t, &attr, watcher, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pthread_attr_destroy(&attr);
  if (rc != 0) return 0;
  struct sigaction sa = {0};
  sa.sa_sigaction = on_sigint;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &g_prev);
  return 0;
}

void bagua_py_begin_blocking(bagua_comm_t *comm, bagua_ddp_t *ddp) {
  atomic_store(&g_comm, comm);
  atomic_store(&g_ddp, ddp);
}

PyObject *bagua_py_end_blocking(bagua_status_t st, const char *what) {
  atomic_store(&g_comm, NULL);
  atomic_store(&g_ddp, NULL);
  if (st == BAGUA_OK) Py_RETURN_NONE;
  if (PyErr_CheckSignals() < 0) return NULL; /* KeyboardInterrupt (or the handler's error) */
  return bagua_py_raise(st, what);
}
