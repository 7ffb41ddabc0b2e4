/*
 * Worker output: a thread reads the workers' stdout and stderr pipes and writes each line to
 * the agent's stdout or stderr with a "[node/rank] " prefix, and (optionally) unprefixed to
 * the worker's log file. It runs apart from the agent's control loop so that a slow etcd call
 * never stalls workers that print a lot.
 */
#ifndef BAGUA_AGENT_OUTPUT_H
#define BAGUA_AGENT_OUTPUT_H

#include "bagua/error.h"

typedef struct bagua__outpump bagua__outpump_t;

bagua_status_t bagua__outpump_start(bagua__outpump_t **out);

/*
 * Adds a stream. Takes ownership of `fd` (the read end of a pipe) and `log_fd` (-1 for none);
 * both are closed when the stream reaches end-of-file. `dest` is STDOUT_FILENO or
 * STDERR_FILENO. On failure both descriptors are closed.
 */
bagua_status_t bagua__outpump_add(bagua__outpump_t *p, int fd, int dest, const char *prefix,
                                  int log_fd);

/* Waits until every stream has reached end-of-file, at most `timeout_ms`. */
void bagua__outpump_drain(bagua__outpump_t *p, int timeout_ms);

/* Stops the thread, flushes partial lines, closes all streams and frees. NULL is accepted. */
void bagua__outpump_stop(bagua__outpump_t *p);

#endif
