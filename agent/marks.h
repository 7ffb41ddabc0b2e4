/*
 * Elastic marks, how auto mode (--elastic-mode auto) tells elastic workers from others.
 *
 * The agent cannot see which API a worker program uses, so the worker says it: each worker gets
 * BAGUA_ELASTIC_MARK=<dir>/elastic.<local rank>.<round it was started in>, and libbagua's
 * bagua_elastic_create() creates that (empty) file once it has succeeded. <dir> is a private
 * directory of the agent (mkdtemp under the registry's TMPDIR, /tmp by default) that the agent
 * removes when it
 * exits. A worker whose file exists runs the elastic API: it follows a new round by itself
 * (bagua_elastic_rebuild) and leaves the job by itself when its node is not in the new round.
 */
#ifndef BAGUA_AGENT_MARKS_H
#define BAGUA_AGENT_MARKS_H

#include <stddef.h>
#include <stdint.h>

#include "workers.h"

/* The directory the private directories are made in: TMPDIR, or /tmp when it is empty. */
const char *bagua__marks_parent(void);

/* Creates the private directory; its path goes to `dir`. Returns 0, or -1 with errno. */
int bagua__marks_create(const char *node_id, char *dir, size_t len);

/* Deletes every file in `dir` (marks of workers that no longer run). "" is accepted. */
void bagua__marks_clear(const char *dir);

/* Deletes the files and the directory. "" is accepted. */
void bagua__marks_remove(const char *dir);

/* The mark path of the worker with `local_rank` started in `round`. Returns 0, or -1 when it
 * does not fit. */
int bagua__marks_path(const char *dir, int local_rank, int64_t round, char *buf, size_t len);

/* The local rank of the first running worker that has not created its mark, or -1 when every
 * running worker has created it (workers that ended are not looked at). `dir` must not be "". */
int bagua__marks_missing(const char *dir, const bagua__workers_t *ws);

#endif
