/*
 * How the agent words a worker failure. The records themselves, their keys and their JSON
 * are common/rdzv's (the one schema every component shares).
 */
#include "schema.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

_Static_assert(BAGUA_AGENT_ID_MAX == BAGUA_RDZV_ID_MAX, "agent ids are the schema's ids");

void bagua__agent_failure_describe(const bagua__rdzv_failure_t *f, char *out, size_t len) {
  char tail[300];
  if (f->reason[0]) {
    snprintf(tail, sizeof(tail), "never started: %s", f->reason);
  } else if (f->signal) {
    const char *name = sigabbrev_np(f->signal);
    snprintf(tail, sizeof(tail), "was killed by signal %d (SIG%s)", f->signal, name ? name : "?");
  } else {
    snprintf(tail, sizeof(tail), "exited with code %d", f->exit_code);
  }
  /* The worker's own account (its error file) last: it is the longest part, and the one a
   * cut-short line can best lose. */
  snprintf(out, len, "rank %d (node %s, host %s, local rank %d, pid %d, round %lld) %s%s%s",
           f->rank, f->node, f->host[0] ? f->host : "?", f->local_rank, f->pid, (long long)f->round,
           tail, f->error[0] ? ": " : "", f->error);
}

int bagua__agent_failure_exit_code(const bagua__rdzv_failure_t *f) {
  if (f->signal) return 128 + (f->signal & 127);
  return f->exit_code ? (f->exit_code & 255) : 1;
}
