/*
 * bagua-launch internals: the resolved job configuration and the pieces that build it.
 *
 * Configuration comes from four layers with a fixed precedence: command-line flag >
 * environment (BAGUA_* registry parameters) > INI file (--config) > built-in default. Each
 * layer is parsed and validated on its own, so an error names the place the bad value came
 * from (the flag, the variable, or FILE:LINE), and bagua__launch_resolve() then picks, per
 * setting, the value of the highest layer that has one. The result is plain data that
 * bagua__launch_dump() prints as INI-like text; the golden tests compare that text.
 *
 * Ownership: every string in a bagua__launch_config_t is malloc'ed and owned by the
 * configuration; bagua__launch_config_free() releases all of it.
 */
#ifndef BAGUA_LAUNCHER_LAUNCH_H
#define BAGUA_LAUNCHER_LAUNCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/flags.h"
#include "common/validate.h"

/* The tool name that starts bagua-launch's user-facing lines (common/output.h). */
#define LAUNCH_TOOL "bagua-launch"

/* Exit statuses of bagua-launch (besides the job's own root-cause code). */
#define LAUNCH_EXIT_USAGE 2
#define LAUNCH_EXIT_RDZV 3

/* Bounds of the settings that are not registry parameters (common/validate.h has the
 * limits bagua-agent shares: id length, node count). */
#define LAUNCH_MAX_NODES BAGUA_NNODES_MAX
#define LAUNCH_MAX_NPROC 4096
#define LAUNCH_DEFAULT_REMOTE_CMD "ssh -o BatchMode=yes {host}"
/* The remote command inside a Slurm allocation: one job step of one task on the host. */
#define LAUNCH_SLURM_REMOTE_CMD "srun --nodes=1 --ntasks=1 -w {host} {cmd}"
#define LAUNCH_DEFAULT_ETCD_BIN "/usr/bin/etcd"
/* The interpreter a .py program (and -m MODULE) runs under, looked up in PATH by the agent. */
#define LAUNCH_DEFAULT_PYTHON "python3"

/* The scalar settings. Order is the order of the dump. */
typedef enum {
  LS_JOB_ID,
  LS_NNODES,
  LS_NPROC,
  LS_MAX_RESTARTS,
  LS_LOG_DIR,
  LS_NODE_ID,
  LS_NODE_ADDR,
  LS_GRACE_MS,
  LS_ELASTIC_MODE,
  LS_AGENT,
  LS_PYTHON,
  LS_NET_PLUGIN,
  LS_REMOTE_CMD,
  LS_FANOUT,
  LS_DISCOVERY_SCRIPT,
  LS_DISCOVERY_INTERVAL_MS,
  LS_DISCOVERY_TIMEOUT_MS,
  LS_METRICS_PORT,
  LS_METRICS_ADDR,
  LS_ENDPOINT,
  LS_RDZV_HOST,
  LS_LEASE_TTL,
  LS_RDZV_TIMEOUT,
  LS_LAST_CALL_MS,
  LS_SETTLE_MS,
  LS_ETCD_TIMEOUT_MS,
  LS_ETCD_BIN,
  LS__COUNT
} bagua__launch_setting_t;

typedef enum {
  LT_STR,    /* any string */
  LT_ID,     /* job or node id (bagua__check_id), or "" for none */
  LT_INT,    /* integer within bounds */
  LT_NNODES, /* N or MIN:MAX */
  LT_ENDPOINTS,
  LT_TEMPLATE, /* remote command template with {host} */
  LT_HOST,     /* host name or address */
  LT_LISTEN,   /* IPv4 address a listener binds (common/validate.h) */
  LT_CHOICE    /* one of the words of `choices` */
} bagua__launch_type_t;

/* Static description of one scalar setting. */
typedef struct {
  const char *name;    /* key in the dump and in the INI section */
  const char *section; /* INI section: "job" or "rendezvous" */
  const char *flag;    /* command-line flag, "--..." */
  const char *env;     /* environment variable, or NULL */
  bagua__launch_type_t type;
  int64_t lo, hi;      /* LT_INT bounds (from the registry when `env` is a registry entry) */
  const char *def;     /* default value as text ("" for none) */
  const char *metavar; /* argument name in --help */
  const char *help;
  const char *choices; /* LT_CHOICE: "a|b|c" (from the registry when `env` is a registry entry) */
  /* 1 + the row of common/flags.def when bagua-agent has the same flag (its spelling,
   * metavariable, help and variable then come from that row), else 0. */
  int shared;
  int env_off; /* a shared setting the launcher does not read from its environment */
} bagua__launch_desc_t;

/* The descriptor of setting `s` (bounds and defaults of registry entries filled in). */
const bagua__launch_desc_t *bagua__launch_desc(bagua__launch_setting_t s);
/* Setting with INI key `key` in `section`, or -1. */
int bagua__launch_find_ini(const char *section, const char *key);
/* Setting whose environment variable is `env`, or -1. */
int bagua__launch_find_env(const char *env);
/* The setting whose flag is row `f` of common/flags.def, or -1 (a flag only the agent has). */
int bagua__launch_find_shared(bagua__flag_t f);

/* Where a value came from. */
typedef enum { LO_DEFAULT = 0, LO_INI, LO_ENV, LO_FLAG } bagua__launch_origin_kind_t;

typedef struct {
  bagua__launch_origin_kind_t kind;
  char text[160]; /* "default", "--nnodes", "environment BAGUA_MAX_RESTARTS", "job.ini:4" */
} bagua__launch_origin_t;

/* A parsed scalar value. */
typedef struct {
  char *s;    /* the text, normalised (e.g. "2:4" for nnodes) */
  int64_t i;  /* LT_INT value; LT_NNODES: MIN */
  int64_t i2; /* LT_NNODES: MAX */
  int set;    /* this layer provides the value */
  bagua__launch_origin_t origin;
} bagua__launch_value_t;

/* One host entry: start one agent on `name` with `nproc` workers (0: nproc_per_node). */
typedef struct {
  char *name;
  int nproc;
  int local; /* filled at resolve time: start it directly instead of through remote_cmd */
  bagua__launch_origin_t origin;
} bagua__launch_host_t;

/* One exported variable ([algorithm], [env] and -x; origin.kind LO_FLAG for -x, which beats
 * the launcher's environment even for registry parameters). */
typedef struct {
  char *name; /* environment variable name */
  char *value;
  char *key; /* INI key it came from */
  bagua__launch_origin_t origin;
} bagua__launch_var_t;

/* A list of strings (program argv). */
typedef struct {
  char **v;
  int n;
} bagua__launch_argv_t;

/* torchrun's options that set no scalar setting of ours (torchrun.c; command-line layer
 * only): kept so that the rules across settings can check them once everything is known. */
typedef struct {
  char backend[16]; /* --rdzv-backend: static, c10d, etcd or etcd-v2; "" when not given */
  int node_rank;    /* --node-rank, when node_rank_set */
  int node_rank_set;
  char master_addr[256]; /* --master-addr; "" when not given */
  int master_port;       /* --master-port; 0 when not given */
  int run_path;          /* --run-path: the program runs under the interpreter */
  int tee;               /* --tee other than 0: per-rank files as well as the console */
  int redirects;         /* --redirects other than 0: some streams to the files only */
  bagua__launch_origin_t backend_origin;
} bagua__launch_torchrun_t;

/* Everything one layer (command line, environment or INI file) provides. */
typedef struct {
  bagua__launch_value_t v[LS__COUNT];
  bagua__launch_host_t *hosts;
  int nhosts;
  int hosts_set;
  bagua__launch_origin_t hosts_origin;
  bagua__launch_var_t *algo;
  int nalgo;
  bagua__launch_var_t *env;
  int nenv;
  bagua__launch_argv_t program;
  bagua__launch_origin_t program_origin;
  char *config_path; /* --config (command-line layer only) */
  /* How the program runs (command-line layer only): -m MODULE (program.v[0] is the module),
   * --no-python (a .py program is executed as it is), --standalone (torchrun's spelling of
   * "a private etcd"). */
  int module, no_python, standalone;
  bagua__launch_torchrun_t torchrun;
  /* Actions requested on the command line. */
  int help, version, print_params, dry_run;
} bagua__launch_layer_t;

/* Where the resolved hosts came from. */
typedef enum {
  LH_NONE = 0,  /* no hosts: one local agent */
  LH_LIST,      /* --hosts, --hostfile or [hosts] */
  LH_DISCOVERY, /* --host-discovery-script (run at start; again during an elastic job) */
  LH_SLURM      /* SLURM_JOB_NODELIST inside a Slurm allocation */
} bagua__launch_hosts_source_t;

/* The resolved configuration. */
typedef struct {
  bagua__launch_value_t v[LS__COUNT];
  int job_id_generated;
  bagua__launch_host_t *hosts;
  int nhosts;
  bagua__launch_origin_t hosts_origin;
  bagua__launch_hosts_source_t hosts_source;
  /* Discovery: hosts the script reported at start beyond MAX of --nnodes (not started, shown by
   * --dry-run; a later run of the script starts them when places free up). */
  char **hosts_waiting;
  int nhosts_waiting;
  bagua__launch_var_t *algo;
  int nalgo;
  bagua__launch_var_t *env;
  int nenv;
  bagua__launch_argv_t program; /* what the agents run, the interpreter included */
  bagua__launch_origin_t program_origin;
  char *config_path;
  /* The endpoint is the job's etcd that one of its nodes hosts: torchrun's c10d or static
   * backend across nodes (embedded.h). */
  int rdzv_embedded;
  /* A one-node job names an endpoint but no backend (torchrun's default, static, hosts its own
   * store there): when no etcd answers at the endpoint, it runs on a private etcd (main.c). */
  int rdzv_fallback_private;
  /* torchrun's --node_rank for the one local agent (its --node-rank), when node_rank_set. */
  int node_rank_set, node_rank;
  /* torchrun's agents are anonymous: a local agent without a node id gets HOST-PID rather than
   * the host name, so two launches on one machine are two nodes (--rdzv-backend, no hosts). */
  int anonymous_node;
  int help, version, print_params, dry_run;
} bagua__launch_config_t;

/* Error text buffer used across the parser. */
#define LAUNCH_ERR_LEN 1024

/* ---- the settings table (settings.c) and single values (values.c) ---- */

/*
 * Parses and validates `text` for setting `s` into `out` (which takes a copy). On failure
 * writes "<what is wrong>; accepted: <what is>" into err and returns -1.
 */
int bagua__launch_parse_value(bagua__launch_setting_t s, const char *text,
                              bagua__launch_value_t *out, char *err, size_t errlen);
/* Frees the strings of a layer or a configuration and zeroes it. */
void bagua__launch_layer_free(bagua__launch_layer_t *l);
void bagua__launch_config_free(bagua__launch_config_t *c);
void bagua__launch_origin_set(bagua__launch_origin_t *o, bagua__launch_origin_kind_t kind,
                              const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Validates an environment variable name for [env] / [algorithm]. */
int bagua__launch_check_var(const char *name, const char *value, char *err, size_t errlen);

/* ---- argument lists and shell words (shell.c) ---- */

/* Appends a copy of `s` to `a`; returns -1 on out of memory. */
int bagua__launch_argv_push(bagua__launch_argv_t *a, const char *s);
void bagua__launch_argv_free(bagua__launch_argv_t *a);
/*
 * Splits `text` into words the way a POSIX shell would without expansions: blanks separate
 * words, single quotes are literal, double quotes honour \" \\ \$ \`, a backslash outside
 * quotes escapes the next character. Returns -1 with a message on unbalanced quotes.
 */
int bagua__launch_split_words(const char *text, bagua__launch_argv_t *out, char *err,
                              size_t errlen);
/*
 * The one quoting rule for values (docs/launcher.md, "Quoting"): a value wholly enclosed in one
 * pair of matching quotes, "..." or '...', is that one word unquoted by the rules of
 * bagua__launch_split_words ("\"a b\"" is a b, "''" is empty); any other value is literal,
 * quotes inside it included (say "hi" stays say "hi"). A shell has already removed the
 * quotes of a flag, so this matters for INI values. *out is malloc'ed; -1 on out of memory.
 */
int bagua__launch_unquote(const char *value, char **out);
/* Appends `word` to `buf` quoted for a POSIX shell (unquoted when it is safe). */
int bagua__launch_shell_quote(const char *word, char **buf, size_t *len, size_t *cap);

/* ---- hosts (hosts.c) ---- */

/* Parses "h1:2,h2,h3:4" into the layer's host list. */
int bagua__launch_parse_hosts(const char *text, bagua__launch_layer_t *l, char *err, size_t errlen);
/* Parses a hostfile ("host[:N]" or "host slots=N" lines, # comments). */
int bagua__launch_read_hostfile(const char *path, bagua__launch_layer_t *l, char *err,
                                size_t errlen);
/* Adds one host ("name", nproc text or NULL) to the layer; validates both. */
int bagua__launch_add_host(bagua__launch_layer_t *l, const char *name, const char *nproc,
                           const bagua__launch_origin_t *origin, char *err, size_t errlen);
/* Checks a host name (letters, digits, '.', '-', '_', no leading '-') and a slot count
 * ([1, 4096]); -1 with what is wrong in err. */
int bagua__launch_check_host_name(const char *name, char *err, size_t errlen);
int bagua__launch_check_slots(const char *text, int *out, char *err, size_t errlen);
/* 1 when `name` designates this machine (localhost, 127.x, ::1, this host's name). */
int bagua__launch_host_is_local(const char *name);

/* ---- layers (cli.c, env.c, config_ini.c) ---- */

/* Parses argv into the command-line layer. Returns 0, or 2 with a usage message in err. */
int bagua__launch_parse_cli(int argc, char **argv, bagua__launch_layer_t *l, char *err,
                            size_t errlen);
/* -x NAME or -x NAME=VALUE: one more variable for every worker (values.c); 0 or 2 with a
 * message. */
int bagua__launch_add_export(bagua__launch_layer_t *l, const char *spec, char *err, size_t errlen);
/* Reads the BAGUA_* registry parameters into the environment layer. */
int bagua__launch_read_env(bagua__launch_layer_t *l, char *err, size_t errlen);
/* Loads an INI file. Returns 0, or 2 with "FILE:LINE: ..." in err. */
int bagua__launch_read_ini(const char *path, bagua__launch_layer_t *l, char *err, size_t errlen);
/* Same, from memory; `name` is used in messages. */
int bagua__launch_read_ini_text(const char *name, const char *text, size_t len,
                                bagua__launch_layer_t *l, char *err, size_t errlen);

/* ---- resolution and dump (config.c) ---- */

/*
 * Builds the whole configuration from argv and the environment: parses the command line,
 * reads the --config file, the environment, merges them and checks cross-setting rules.
 * Returns 0, or 2 with a message (without the "bagua-launch: " prefix) in err.
 */
int bagua__launch_configure(int argc, char **argv, bagua__launch_config_t *cfg, char *err,
                            size_t errlen);
/* Merges layers (flag > env > INI > default) into cfg. Returns 0 or 2 with a message. */
int bagua__launch_resolve(const bagua__launch_layer_t *cli, const bagua__launch_layer_t *env,
                          const bagua__launch_layer_t *ini, bagua__launch_config_t *cfg, char *err,
                          size_t errlen);
/* Prints the resolved configuration as INI-like text with each value's origin. */
void bagua__launch_dump(const bagua__launch_config_t *cfg, FILE *out);
/* Usage text for --help. */
void bagua__launch_usage(FILE *out);

#endif
