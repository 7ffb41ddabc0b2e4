/*
 * Slurm allocations: inside one (SLURM_JOB_ID and SLURM_JOB_NODELIST set) bagua-launch takes
 * its hosts from SLURM_JOB_NODELIST and each host's workers from SLURM_NTASKS_PER_NODE or
 * SLURM_TASKS_PER_NODE, and starts the agents as job steps (LAUNCH_SLURM_REMOTE_CMD, srun).
 *
 * The two parsers are pure functions, unit-tested on good and malformed text.
 */
#ifndef BAGUA_LAUNCHER_SLURM_H
#define BAGUA_LAUNCHER_SLURM_H

#include <stddef.h>

#include "launch.h"

#define BAGUA_SLURM_HOSTLIST_ACCEPTED                                                     \
  "Slurm's host-list syntax: comma-separated names, each with optional [ranges] such as " \
  "node[01-04,07] (zero padding kept) or rack[1-2]-n[1-3]"
#define BAGUA_SLURM_TASKS_ACCEPTED \
  "comma-separated counts, each N or N(xREPEAT), one count per node, N in [1, 4096]"

/*
 * Expands a Slurm host list ("node[01-04,07],gpu-[1-3]x,login1") into names, in order:
 * node01 node02 node03 node04 node07 gpu-1x gpu-2x gpu-3x login1. Several bracket groups in
 * one name expand as a product, the last varying fastest. Returns 0, or -1 with what is wrong
 * (unbalanced brackets, an empty entry or range, a bound that is no number, LO > HI, a bad host
 * name, more than LAUNCH_MAX_NODES hosts) and what is accepted in err. Free with
 * bagua__slurm_names_free.
 */
int bagua__slurm_expand_hostlist(const char *text, char ***names, int *n, char *err, size_t errlen);
void bagua__slurm_names_free(char **names, int n);

/*
 * Parses SLURM_TASKS_PER_NODE ("2(x3),1": 2, 2, 2, 1) for `nnodes` nodes into slots[nnodes]
 * (malloc'ed). A single count without repeats ("4", as in SLURM_NTASKS_PER_NODE) applies to
 * every node. Returns 0 or -1 with a message.
 */
int bagua__slurm_parse_tasks(const char *text, int nnodes, int **slots, char *err, size_t errlen);

/*
 * Inside an allocation (SLURM_JOB_ID and SLURM_JOB_NODELIST set and not empty), adds the
 * allocation's hosts to the environment layer `l` (origin "SLURM_JOB_NODELIST"). Returns 0
 * (also outside an allocation), or 2 with a message naming the variable.
 */
int bagua__slurm_read_env(bagua__launch_layer_t *l, char *err, size_t errlen);

#endif
