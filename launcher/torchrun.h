/*
 * torchrun's command line on bagua-launch: the options of torch 1.13 to 2.x that have no
 * bagua-launch spelling of their own (docs/launcher.md, "Coming from torchrun"). Each one is
 *  - read as settings of ours (--rdzv-conf's timeouts and keep-alive, --role as BAGUA_ROLE);
 *  - checked and kept for the rules across settings, which need the whole configuration
 *    (--rdzv-backend against the endpoint and --nnodes, --node-rank against --nnodes,
 *    --master-addr/--master-port as the static backend's endpoint, --tee against --log-dir,
 *    --run-path against -m);
 *  - checked as a documented no-op (--monitor-interval, --start-method);
 *  - or refused, with what to use instead, where it cannot mean anything here.
 * --redirects becomes BAGUA_REDIRECTS for the agents (the streams it names reach the per-rank
 * log files only), --role BAGUA_ROLE.
 * torchrun's other spellings of our own flags (--rdzv-id, --local-addr) are aliases in cli.c's
 * table of foreign spellings; --nproc-per-node's words (cpu, gpu, auto) are resolved here.
 */
#ifndef BAGUA_LAUNCHER_TORCHRUN_H
#define BAGUA_LAUNCHER_TORCHRUN_H

#include <stddef.h>

#include "launch.h"

/* Option `flag` (normalised: "--rdzv-backend", or a short "-r") is torchrun's: its index, and
 * whether it takes a value in *takes_value; -1 when it is not one. */
int bagua__launch_torchrun_find(const char *flag, int *takes_value);
/* The flag of option `i` (for unique-prefix matching); NULL past the last. */
const char *bagua__launch_torchrun_flag(int i);
/*
 * Applies option `i` with `value` (NULL for a switch) to the command-line layer; `spelled` is
 * the flag as the user typed it, for messages. Returns 0, or LAUNCH_EXIT_USAGE with the whole
 * message ("bagua-launch: ...; accepted: ...") in err.
 */
int bagua__launch_torchrun_apply(int i, const char *spelled, const char *value,
                                 bagua__launch_layer_t *l, char *err, size_t errlen);
/*
 * --nproc-per-node's words as torchrun resolves them, on the machine bagua-launch runs on:
 * cpu (online CPUs), gpu (the NVIDIA GPUs of /proc/driver/nvidia/gpus, limited by
 * CUDA_VISIBLE_DEVICES), auto (gpu when there is one, else cpu). Returns 1 when `text` is none
 * of the words (a number, checked as the setting is), 0 with the count's decimal text in out,
 * or -1 with what is wrong in err ("gpu" without a GPU).
 */
int bagua__launch_nproc_word(const char *text, char *out, size_t outlen, char *err, size_t errlen);
/*
 * The rules across settings for torchrun's options, once `cfg` is resolved from the layers
 * (`cli` is the command-line layer): the backend against the endpoint and --nnodes,
 * --node-rank against --nnodes, --tee against --log-dir, --run-path against -m. May replace
 * the endpoint (a single-node static or c10d job gets a private etcd). Returns 0, or
 * LAUNCH_EXIT_USAGE with the message in err.
 */
int bagua__launch_torchrun_resolve(const bagua__launch_layer_t *cli, bagua__launch_config_t *cfg,
                                   char *err, size_t errlen);

#endif
