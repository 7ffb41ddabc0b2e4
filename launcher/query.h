/*
 * bagua-launch status / list: read a job (or every job) from etcd and print it, as a table
 * for people or as JSON for programs (docs/observability.md).
 *
 *   bagua-launch status --rdzv-endpoint E --job-id J [--json]
 *   bagua-launch list   --rdzv-endpoint E [--json]
 *
 * A subcommand is recognised only as the first argument, so a program named "status" still
 * runs as `bagua-launch -- status` or `bagua-launch [options] status`.
 *
 * Exit status: 0 printed; 2 usage error or (status) no such job in etcd; 3 etcd unreachable
 * (one range request, bounded by BAGUA_ETCD_TIMEOUT_MS). Reads only: nothing in etcd changes.
 */
#ifndef BAGUA_LAUNCHER_QUERY_H
#define BAGUA_LAUNCHER_QUERY_H

#include <stdio.h>

/* 1 when argv[1] names a subcommand ("status" or "list"). */
int bagua__launch_is_query(int argc, char **argv);

/* Runs the subcommand in argv[1]; prints to `out` (the result) and stderr (errors). Returns
 * the exit status. */
int bagua__launch_query_main(int argc, char **argv, FILE *out);

#endif
