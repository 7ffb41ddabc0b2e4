/*
 * Worker output: a thread reads the workers' stdout and stderr pipes and writes each line to
 * the agent's stdout or stderr with a "[node/rank] " prefix, and (optionally) unprefixed to
 * the worker's log file. It runs apart from the agent's control loop so that a slow etcd call
 * never stalls workers that print a lot.
 */
#ifndef BAGUA_AGENT_OUTPUT_H
#define BAGUA_AGENT_OUTPUT_H

#include <stdint.h>

#include "bagua/error.h"

typedef struct bagua__outpump bagua__outpump_t;

bagua_status_t bagua__outpump_start(bagua__outpump_t **out);

/*
 * Adds a stream. Takes ownership of `fd` (the read end of a pipe) and `log_fd` (-1 for none);
 * both are closed when the stream reaches end-of-file. `dest` is STDOUT_FILENO or
 * STDERR_FILENO, or -1 for a stream whose lines go to `log_fd` only (torchrun's --redirects). `tag`
 * names the worker the stream belongs to (its pid) for bagua__outpump_retag. On failure both
 * descriptors are closed.
 */
bagua_status_t bagua__outpump_add(bagua__outpump_t *p, int fd, int dest, const char *prefix,
                                  int log_fd, int64_t tag);

/*
 * A worker kept through a round change (in-process elasticity) has a new rank: its streams
 * (those added with `tag`) get `prefix` from now on, and `log_line` (a complete line ending in
 * '\n', or NULL) is appended once to the worker's log file. The output thread applies both
 * before it reads more of those streams, so the line heads the output that follows it.
 * Called by the agent's thread; never blocks beyond the pump's mutex.
 */
void bagua__outpump_retag(bagua__outpump_t *p, int64_t tag, const char *prefix,
                          const char *log_line);

/* Waits until every stream has reached end-of-file, at most `timeout_ms`. */
void bagua__outpump_drain(bagua__outpump_t *p, int timeout_ms);

/* Stops the thread, flushes partial lines, closes all streams and frees. NULL is accepted. */
void bagua__outpump_stop(bagua__outpump_t *p);

#endif
