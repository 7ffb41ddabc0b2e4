/*
 * The live progress line bagua-launch shows on a terminal while a job runs
 * (docs/observability.md): round, nodes, world size, the slowest worker's step (of the
 * program's stated total), the mean step rate and an ETA, rewritten in place about once a
 * second from the agents' progress/<node> records.
 *
 * Threading: the supervisor's thread only (the state is static). Each poll costs at most one
 * range read of the job's keys, bounded by the etcd client's timeout; a failed read leaves the
 * line as it was.
 */
#ifndef BAGUA_LAUNCHER_LAUNCH_PROGRESS_H
#define BAGUA_LAUNCHER_LAUNCH_PROGRESS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/etcd/etcd.h"

/* How often the line is refreshed (a poll sooner than this returns at once). */
#define LAUNCH_PROGRESS_MS 1000

/* Call on every supervisor poll; `now_ms` is bagua__now_ms(). Writes to `tty` (a terminal;
 * NULL: nothing) "\r", the line, and an erase to the end of the line, without a newline. */
void bagua__launch_progress_poll(bagua__etcd_t *c, const char *job, int64_t now_ms, FILE *tty);

/* While agents start (fanout.h): "starting agents: S/N started, R/N registered" on `tty` (NULL:
 * nothing), in place of the job's line; drawn again only when it changes or was erased. */
void bagua__launch_progress_starting(FILE *tty, int started, int registered, int total);

/* Erases the line (when one is shown) so that other output starts at column 0; the next poll
 * draws it again. */
void bagua__launch_progress_clear(FILE *tty);

/* The line for the job read from etcd, without control characters (also for tests).
 * Returns 0, or -1 when etcd could not be read. */
int bagua__launch_progress_line(bagua__etcd_t *c, const char *job, char *out, size_t len);

#endif
