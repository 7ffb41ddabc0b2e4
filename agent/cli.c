/*
 * Command line of bagua-agent. Flags override the BAGUA_* environment parameters, which
 * override the registry's defaults (common/params.def). Every rejected value is reported with the
 * flag's name and what is accepted, before anything starts.
 *
 * The flags are one table, like bagua-launch's settings (launcher/settings.c): each entry
 * says what kind of value the flag takes, which registry parameter gives its environment
 * default and bounds, and where the value goes. Ids, endpoint lists and node counts are
 * checked by the validators bagua-launch uses (common/validate.h), so a value the launcher
 * accepts is never refused by the agents it starts.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent.h"
#include "bagua/params.h"
#include "common/file.h"
#include "common/flags.h"
#include "common/output.h"
#include "common/params.h"
#include "common/rdzv/rdzv.h"
#include "common/validate.h"

_Static_assert(BAGUA_AGENT_ID_MAX > BAGUA_ID_MAX_LEN, "an agent id buffer holds any valid id");
_Static_assert(sizeof(((bagua__agent_config_t *)0)->secret) == BAGUA_RDZV_SECRET_HEX + 1,
               "the config holds a job secret and its NUL");

/* ---------------------------------------------------------------------------------------- */
/* The flags                                                                                 */
/* ---------------------------------------------------------------------------------------- */

/* The usage text around the flags, which print_usage() lists from the tables. */
static const char usage_head[] =
    "usage: bagua-agent --rdzv-endpoint HOST:PORT[,HOST:PORT] --job-id ID --nnodes MIN[:MAX]\n"
    "                   --nproc-per-node N [options] -- PROGRAM [ARGS...]\n"
    "\n"
    "One agent runs per node: it registers the node in etcd, joins rendezvous rounds and\n"
    "starts the node's N workers for each round (see docs/agent.md). A flag overrides its\n"
    "environment variable, which overrides the default.\n"
    "\n";
static const char usage_tail[] =
    "\n"
    "Exit status: 0 job succeeded; 1..255 the root-cause worker's exit code (128+signal);\n"
    "2 usage error; 3 rendezvous failed; 130/143/129 interrupted by SIGINT/SIGTERM/SIGHUP.\n";

/* What a flag's value is, which decides how it is checked and stored. */
typedef enum {
  AK_ENDPOINTS, /* etcd endpoint list (const char *) */
  AK_ID,        /* job or node id (char[BAGUA_AGENT_ID_MAX]) */
  AK_NNODES,    /* N or MIN:MAX (nnodes_min, nnodes_max) */
  AK_INT,       /* integer within the registry parameter's bounds (int) */
  AK_CHOICE,    /* one of the registry parameter's words (bagua__elastic_mode_t) */
  AK_BUF,       /* any text, copied (char[256]) */
  AK_STR,       /* any text, kept as is (const char *) */
  AK_SWITCH,    /* a flag without a value, handled before the others (--env-stdin) */
  AK_HELP,
  AK_VERSION
} arg_kind_t;

#define NO_PARAM (-1)
#define CFG(field) offsetof(bagua__agent_config_t, field)

typedef struct {
  int shared;       /* 1 + the row of common/flags.def (flag, param, help come from it), or 0 */
  const char *flag; /* "--name" */
  arg_kind_t kind;
  int param;           /* registry parameter: bounds or accepted words, and the default */
  int env;             /* 1: the parameter's variable, when set, is the value the flag overrides */
  size_t field;        /* where the value goes in bagua__agent_config_t */
  const char *missing; /* "" when the flag may be left out, else the rest of the refusal */
  const char *metavar, *help; /* for this agent's own flags; shared ones take the table's */
} arg_desc_t;

/*
 * Checked in this order. The structured values (endpoints, ids, node counts) are checked
 * only once the flags as a whole parsed and a program was given, as they always were.
 */
/* A flag bagua-launch has too: its spelling, variable and help are common/flags.def's. */
#define SHARED(f) .shared = 1 + BAGUA__FLAG_##f

static arg_desc_t k_args[] = {
    {SHARED(RDZV_ENDPOINT), .kind = AK_ENDPOINTS, .env = 1, .field = CFG(endpoints),
     .missing = " (or BAGUA_RDZV_ENDPOINT); accepted: HOST:PORT[,HOST:PORT]"},
    {SHARED(JOB_ID), .kind = AK_ID, .env = 1, .field = CFG(job_id),
     .missing = " (or BAGUA_JOB_ID); every node of a job passes the same id"},
    {SHARED(NODE_ID), .kind = AK_ID, .env = 1, .field = CFG(node_id), .missing = ""},
    {SHARED(NNODES), .kind = AK_NNODES, .missing = "; accepted: N or MIN:MAX"},
    /* The registry bounds the worker count, but an agent never takes it from the
     * environment: a launcher passes it to every agent explicitly. */
    {SHARED(NPROC_PER_NODE), .kind = AK_INT, .field = CFG(nproc), .missing = "; accepted: "},
    {SHARED(NODE_ADDR), .kind = AK_BUF, .env = 1, .field = CFG(node_addr), .missing = ""},
    {SHARED(MAX_RESTARTS), .kind = AK_INT, .env = 1, .field = CFG(max_restarts), .missing = ""},
    {SHARED(LEASE_TTL), .kind = AK_INT, .env = 1, .field = CFG(lease_ttl_s), .missing = ""},
    {SHARED(RDZV_TIMEOUT), .kind = AK_INT, .env = 1, .field = CFG(rdzv_timeout_s), .missing = ""},
    {SHARED(LAST_CALL_MS), .kind = AK_INT, .env = 1, .field = CFG(last_call_ms), .missing = ""},
    {SHARED(SETTLE_MS), .kind = AK_INT, .env = 1, .field = CFG(settle_ms), .missing = ""},
    {SHARED(LOG_DIR), .kind = AK_STR, .env = 1, .field = CFG(log_dir), .missing = ""},
    {SHARED(GRACE_MS), .kind = AK_INT, .env = 1, .field = CFG(grace_ms), .missing = ""},
    {.flag = "--tag",
     .kind = AK_STR,
     .param = NO_PARAM,
     .field = CFG(tag),
     .missing = "",
     .metavar = "NAME",
     .help = "label recorded in this node's etcd record"},
    {.flag = "--secret-file",
     .kind = AK_STR,
     .param = NO_PARAM,
     .field = CFG(secret_file),
     .missing = "",
     .metavar = "PATH",
     .help = "the job secret (64 hex digits) in a file only its owner can read (chmod 600); "
             "default: BAGUA_JOB_SECRET, else the job's in etcd, else a new random one"},
    {SHARED(ELASTIC_MODE), .kind = AK_CHOICE, .env = 1, .field = CFG(elastic_mode), .missing = ""},
    /* torchrun's --node_rank: an order for the nodes of a first round, not a promise of a
     * place (elastic jobs change places as nodes come and go). */
    {.flag = "--node-rank",
     .kind = AK_INT,
     .param = BAGUA_P_NODE_RANK,
     .env = 1,
     .field = CFG(node_rank),
     .missing = "",
     .metavar = "R",
     .help = "this node's place among the nodes that join a round together (torchrun's "
             "--node_rank): they take ranks in node-rank order, others after them; default: "
             "-1, join order"},
    /* torchrun's --role: one role per job here (the workers' ROLE_NAME). An id's alphabet, so
     * that the value printed in messages and passed to workers is one plain word. */
    {.flag = "--role",
     .kind = AK_ID,
     .param = BAGUA_P_ROLE,
     .env = 1,
     .field = CFG(role),
     .missing = "",
     .metavar = "NAME",
     .help = "the workers' role, ROLE_NAME (torchrun's --role), 1-64 of [A-Za-z0-9._-]; "
             "default: default"},
    {SHARED(METRICS_PORT), .kind = AK_INT, .env = 1, .field = CFG(metrics_port), .missing = ""},
    {SHARED(METRICS_ADDR), .kind = AK_STR, .env = 1, .field = CFG(metrics_addr), .missing = ""},
    /* read by read_env_stdin() first */
    {.flag = "--env-stdin",
     .kind = AK_SWITCH,
     .param = NO_PARAM,
     .missing = "",
     .help = "read NAME=VALUE entries, each ended by a NUL byte, from stdin and export them "
             "(bagua-launch passes [env] and -x this way)"},
    {.flag = "--help", .kind = AK_HELP, .param = NO_PARAM, .missing = "", .help = "this text"},
    {.flag = "--version",
     .kind = AK_VERSION,
     .param = NO_PARAM,
     .missing = "",
     .help = "the version"},
};
#define NARGS ((int)(sizeof(k_args) / sizeof(k_args[0])))

/* Fills the shared flags' spelling, parameter and help from common/flags.def. Idempotent. */
static void fill_shared(void) {
  for (int i = 0; i < NARGS; i++) {
    arg_desc_t *d = &k_args[i];
    if (!d->shared) continue;
    const bagua__flag_desc_t *f = bagua__flag((bagua__flag_t)(d->shared - 1));
    d->flag = f->flag;
    d->param = (int)f->param;
    d->metavar = f->metavar;
    d->help = f->help;
  }
}

int bagua__agent_flag_known(const char *flag) {
  fill_shared();
  for (int i = 0; i < NARGS; i++)
    if (strcmp(k_args[i].flag, flag) == 0) return 1;
  return 0;
}

/* The usage text: every flag with its value, help, variable and accepted range. */
static void print_usage(void) {
  fputs(usage_head, stdout);
  for (int i = 0; i < NARGS; i++) {
    const arg_desc_t *d = &k_args[i];
    char left[64], more[160] = "";
    snprintf(left, sizeof(left), "  %s%s%s", d->flag, d->metavar ? " " : "",
             d->metavar ? d->metavar : "");
    bagua__print_wrapped(stdout, left, 33, 100, d->help ? d->help : "");
    if (d->param == NO_PARAM) continue;
    bagua__param_id_t id = (bagua__param_id_t)d->param;
    size_t n = 0;
    if (bagua__param_is_int(id)) {
      int64_t lo = 0, hi = 0;
      bagua__param_bounds(id, &lo, &hi);
      n = (size_t)snprintf(more, sizeof(more), "%lld..%lld; ", (long long)lo, (long long)hi);
    } else if (bagua__param_choices(id)[0]) {
      n = (size_t)snprintf(more, sizeof(more), "%s; ", bagua__param_choices(id));
    }
    if (n < sizeof(more))
      snprintf(more + n, sizeof(more) - n,
               d->env ? "environment: %s" : "never from the environment (%s is bagua-launch's)",
               bagua__param_env_name(id));
    bagua__print_wrapped(stdout, "", 33, 100, more);
  }
  fputs(usage_tail, stdout);
}

/* Structured and required values are checked once a program was given; the others (the
 * tuning integers, words and texts) right away. */
static int checked_late(const arg_desc_t *d) {
  return d->kind == AK_ENDPOINTS || d->kind == AK_ID || d->kind == AK_NNODES || d->missing[0];
}

static const char *const elastic_mode_names[] = {
    [BAGUA__ELASTIC_AUTO] = "auto",
    [BAGUA__ELASTIC_RESTART] = "restart",
    [BAGUA__ELASTIC_IN_PROCESS] = "in-process",
};

const char *bagua__elastic_mode_name(bagua__elastic_mode_t m) {
  return (unsigned)m < sizeof(elastic_mode_names) / sizeof(elastic_mode_names[0])
             ? elastic_mode_names[m]
             : "auto";
}

static int parse_elastic_mode(const char *s, bagua__elastic_mode_t *out) {
  for (size_t i = 0; i < sizeof(elastic_mode_names) / sizeof(elastic_mode_names[0]); i++) {
    if (strcmp(s, elastic_mode_names[i]) != 0) continue;
    *out = (bagua__elastic_mode_t)i;
    return 0;
  }
  return -1;
}

/* The "accepted: ..." part of a validator's message (the whole message if it has none). */
static const char *accepted_part(const char *msg) {
  const char *acc = strstr(msg, "accepted");
  return acc ? acc : msg;
}

/*
 * Checks `text` for flag `d` and stores it into cfg. Returns 0, or -1 after printing the
 * refusal. Integers and words are refused as "FLAG "VALUE" is invalid; accepted: ...", as the
 * value itself says what is wrong; structured values also repeat what the validator found.
 */
static int apply(const arg_desc_t *d, const char *text, bagua__agent_config_t *cfg) {
  char err[512] = "";
  char *base = (char *)cfg;
  int64_t lo = 0, hi = 0, v = 0;
  switch (d->kind) {
    case AK_ENDPOINTS:
      if (bagua__check_endpoints(text, err, sizeof(err)) != BAGUA_OK) break;
      *(const char **)(base + d->field) = text;
      return 0;
    case AK_ID:
      if (bagua__check_id(text, err, sizeof(err)) != BAGUA_OK) break;
      snprintf(base + d->field, BAGUA_AGENT_ID_MAX, "%s", text);
      return 0;
    case AK_NNODES:
      if (bagua__check_nnodes(text, &lo, &hi, err, sizeof(err)) != BAGUA_OK) break;
      cfg->nnodes_min = (int)lo;
      cfg->nnodes_max = (int)hi;
      return 0;
    case AK_INT:
      bagua__param_bounds((bagua__param_id_t)d->param, &lo, &hi);
      if (bagua__check_int(text, lo, hi, &v, err, sizeof(err)) != BAGUA_OK) break;
      *(int *)(base + d->field) = (int)v;
      return 0;
    case AK_CHOICE: {
      const char *words = bagua__param_choices((bagua__param_id_t)d->param);
      char word[32]; /* the canonical spelling: "In-Process" is "in-process" */
      if (bagua__choice_parse(text, words, word, sizeof(word), err, sizeof(err)) != BAGUA_OK ||
          parse_elastic_mode(word, (bagua__elastic_mode_t *)(base + d->field)) != 0) {
        if (!strstr(err, "accepted")) bagua__list_choices(words, err, sizeof(err));
        break;
      }
      return 0;
    }
    case AK_BUF:
      /* The address other nodes reach this node's workers at: a malformed one would only
       * show as unreachable workers after the rendezvous, so it is refused here (the launcher
       * checks its --node-addr the same way); empty still means "choose one". */
      if (text[0] && bagua__check_host(text, err, sizeof(err)) != BAGUA_OK) break;
      if (strlen(text) >= sizeof(cfg->node_addr)) {
        snprintf(err, sizeof(err), "the value has %zu characters; accepted: at most %zu",
                 strlen(text), sizeof(cfg->node_addr) - 1);
        break;
      }
      snprintf(base + d->field, sizeof(cfg->node_addr), "%s", text);
      return 0;
    case AK_STR:
      /* An empty directory would put log files in the working directory's root ("/<node>"). */
      if (d->field == CFG(log_dir) && !text[0]) {
        bagua__agent_say(
            "%s \"\" is empty; accepted: a directory (leave the flag out for "
            "console output only)",
            d->flag);
        return -1;
      }
      *(const char **)(base + d->field) = text;
      return 0;
    case AK_SWITCH:
    case AK_HELP:
    case AK_VERSION:
      return 0;
  }
  if (d->kind == AK_INT || d->kind == AK_CHOICE)
    bagua__agent_say("%s \"%s\" is invalid; %s", d->flag, text, accepted_part(err));
  else
    bagua__agent_say("%s \"%s\" is %s: %s", d->flag, text,
                     d->kind == AK_ID ? "invalid" : "malformed", err);
  return -1;
}

/* The text a flag that was not given takes: its variable's, or NULL (see `missing`). Integer
 * variables are read as integers by set_defaults(). */
static const char *env_value(const arg_desc_t *d) {
  if (!d->env || d->param == NO_PARAM || d->kind == AK_INT) return NULL;
  bagua__param_id_t id = (bagua__param_id_t)d->param;
  if (!bagua__param_is_set(id)) return NULL;
  const char *s = bagua__param_str(id);
  /* An empty variable is no value: the registry's default (or the refusal) applies. */
  return s && s[0] ? s : NULL;
}

/* Registry defaults of the flags that may be left out. */
static void set_defaults(bagua__agent_config_t *cfg) {
  char *base = (char *)cfg;
  for (int i = 0; i < NARGS; i++) {
    const arg_desc_t *d = &k_args[i];
    if (d->param == NO_PARAM) continue;
    bagua__param_id_t id = (bagua__param_id_t)d->param;
    /* bagua__param_int() is the variable's value when it is set (bagua__params_check() has
     * bounded it), else the default. */
    if (d->kind == AK_INT)
      *(int *)(base + d->field) =
          (int)(d->env ? bagua__param_int(id) : bagua__param_int_default(id));
    if (d->kind == AK_STR) *(const char **)(base + d->field) = bagua__param_str_default(id);
    if (d->kind == AK_CHOICE)
      (void)parse_elastic_mode(bagua__param_str_default(id),
                               (bagua__elastic_mode_t *)(base + d->field));
  }
  cfg->tag = "";
  cfg->endpoints = "";
  /* Not a flag: the launcher passes it to every agent in the environment. */
  cfg->etcd_timeout_ms = (int)bagua__param_int(BAGUA_P_ETCD_TIMEOUT_MS);
  cfg->progress_interval_ms = (int)bagua__param_int(BAGUA_P_PROGRESS_INTERVAL_MS);
  cfg->ack_timeout_ms = (int)bagua__param_int(BAGUA_P_RDZV_ACK_TIMEOUT_MS);
}

/* Largest environment block --env-stdin accepts (a pipe's largest capacity). */
#define ENV_STDIN_MAX (1 << 20)

/*
 * --env-stdin: the launcher sends a remote agent the [env] and -x variables on stdin, as
 * "NAME=VALUE\0" entries up to end-of-file, so that their values (often secrets) appear on no
 * command line, neither ssh's here nor the remote shell's there. They are set before the
 * registry is read, so the agent and its workers see them as if they had been exported; stdin
 * then becomes /dev/null. Returns 0, or -1 after printing what is wrong.
 */
static int read_env_stdin(void) {
  char *buf = malloc(ENV_STDIN_MAX + 1);
  size_t n = 0;
  int rc = -1;
  if (!buf) {
    bagua__agent_say("--env-stdin: out of memory");
    return -1;
  }
  for (;;) {
    ssize_t r = read(STDIN_FILENO, buf + n, ENV_STDIN_MAX + 1 - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      bagua__agent_say("--env-stdin: cannot read stdin: %s", strerror(errno));
      goto out;
    }
    if (r == 0) break;
    n += (size_t)r;
    if (n > ENV_STDIN_MAX) {
      bagua__agent_say(
          "--env-stdin: more than %d bytes on stdin; accepted: NAME=VALUE entries, "
          "each ended by a NUL byte, up to %d bytes in all",
          ENV_STDIN_MAX, ENV_STDIN_MAX);
      goto out;
    }
  }
  if (n > 0 && buf[n - 1] != '\0') {
    bagua__agent_say(
        "--env-stdin: the last entry is not ended by a NUL byte (cut short?); "
        "accepted: NAME=VALUE entries, each ended by a NUL byte");
    goto out;
  }
  for (size_t o = 0, len; o < n; o += len + 1) {
    len = strlen(buf + o); /* before the '=' below is overwritten */
    char *e = buf + o, *eq = strchr(e, '=');
    size_t nl = eq ? (size_t)(eq - e) : 0;
    int ok =
        nl > 0 && (e[0] == '_' || (e[0] >= 'A' && e[0] <= 'Z') || (e[0] >= 'a' && e[0] <= 'z'));
    for (size_t k = 0; ok && k < nl; k++)
      ok = e[k] == '_' || (e[k] >= 'A' && e[k] <= 'Z') || (e[k] >= 'a' && e[k] <= 'z') ||
           (e[k] >= '0' && e[k] <= '9');
    if (!ok) {
      bagua__agent_say(
          "--env-stdin: entry \"%.*s\" is not NAME=VALUE; accepted: a variable name "
          "(a letter or _, then letters, digits or _), '=' and the value",
          (int)(nl                     ? nl
                : strcspn(e, "=") > 40 ? 40
                                       : strcspn(e, "=")),
          e);
      goto out;
    }
    *eq = '\0';
    if (setenv(e, eq + 1, 1) != 0) {
      bagua__agent_say("--env-stdin: cannot set %s: %s", e, strerror(errno));
      goto out;
    }
  }
  int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null >= 0) {
    dup2(null, STDIN_FILENO);
    if (null != STDIN_FILENO) close(null);
  }
  /* The registry may have been read already (a test calls the parser twice). */
  bagua__params_reload();
  rc = 0;
out:
  free(buf);
  return rc;
}

/* 1 when --env-stdin is among the flags (before the program). */
static int wants_env_stdin(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--") == 0 || argv[i][0] != '-') return 0;
    if (strcmp(argv[i], "--env-stdin") == 0) return 1;
  }
  return 0;
}

/* 0 when `path` is a file this process may execute, else an errno value. */
static int runnable(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) return errno;
  if (S_ISDIR(st.st_mode)) return EISDIR;
  return access(path, X_OK) == 0 ? 0 : errno;
}

/*
 * Looks the worker program up the way execvp() will: a name with a '/' as it is, any other
 * name in PATH. A program that cannot run is a usage error (exit 2) before the node joins:
 * the failure is the same on every restart, so restarting max_restarts times would only
 * delay the same message. (A program that disappears later still fails at exec, and that
 * failure names the error too: workers.c.)
 */
static int check_program(const char *prog) {
  int e = ENOENT;
  const char *path = "";
  if (!prog[0]) {
    e = ENOENT;
  } else if (strchr(prog, '/')) {
    e = runnable(prog);
  } else {
    /* glibc's execvp() searches "/bin:/usr/bin" when PATH is unset. */
    path = getenv("PATH") ? getenv("PATH") : "/bin:/usr/bin";
    for (const char *p = path;;) {
      size_t n = strcspn(p, ":");
      char cand[4096];
      /* An empty entry means the working directory. */
      snprintf(cand, sizeof(cand), "%.*s%s%s", (int)n, n ? p : ".", "/", prog);
      int r = runnable(cand);
      if (r == 0) return 0;
      if (r == EACCES) e = EACCES; /* found, but not executable: say that, not "not found" */
      if (!p[n]) break;
      p += n + 1;
    }
  }
  if (e == 0) return 0;
  bagua__agent_say(
      "cannot run the worker program \"%s\": %s%s%.1000s%s; accepted: an executable "
      "file, or a command found in PATH (a .py script: bagua-launch runs it with "
      "python3)",
      prog, strerror(e), path[0] ? " (searched PATH=" : "", path, path[0] ? ")" : "");
  return -1;
}

/*
 * --secret-file: a regular file that only its owner can read (it is as good as the secret
 * itself), holding the 64 hex digits (a final newline is allowed). It is opened without
 * blocking (common/file.h): a FIFO, a device or a directory is refused, never waited on.
 * Returns 0 with cfg->secret filled, or -1 after printing what is wrong.
 */
static int read_secret_file(bagua__agent_config_t *cfg) {
  const char *path = cfg->secret_file;
  char err[600], buf[BAGUA_RDZV_SECRET_HEX + 3], why[160];
  struct stat st;
  int fd = bagua__open_regular(path, O_RDONLY | O_NOFOLLOW, 0, err, sizeof(err));
  if (fd < 0) {
    bagua__agent_say(
        "--secret-file %s; accepted: a regular file only its owner can read "
        "(chmod 600) holding %d hex digits",
        err, BAGUA_RDZV_SECRET_HEX);
    return -1;
  }
  if (fstat(fd, &st) != 0 || (st.st_mode & 077)) {
    bagua__agent_say(
        "--secret-file %s: refusing it: it is readable or writable by group or others (mode "
        "%04o); the job secret must be a regular file only its owner can read (chmod 600 %s)",
        path, (unsigned)(st.st_mode & 07777), path);
    close(fd);
    return -1;
  }
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n < 0) n = 0;
  buf[n] = '\0';
  if (n > 0 && buf[n - 1] == '\n') buf[--n] = '\0';
  int rc = bagua__rdzv_secret_decode(buf, (size_t)n, cfg->secret, why, sizeof(why));
  explicit_bzero(buf, sizeof(buf));
  if (rc != 0) {
    bagua__agent_say("--secret-file %s: %s; accepted: %d hex digits", path, why,
                     BAGUA_RDZV_SECRET_HEX);
    cfg->secret[0] = '\0';
    return -1;
  }
  return 0;
}

/*
 * The job secret this agent was given: --secret-file, else BAGUA_JOB_SECRET (as a launcher
 * passes it). Checked here, with the other settings, so that a malformed one stops the agent
 * before it writes anything to etcd: a refused start must leave no key behind that a
 * corrected retry of the same job would trip over. Returns 0, or -1 after printing.
 */
static int load_secret(bagua__agent_config_t *cfg) {
  char why[160];
  cfg->secret[0] = '\0';
  if (cfg->secret_file && cfg->secret_file[0]) return read_secret_file(cfg);
  const char *env = bagua__param_str(BAGUA_P_JOB_SECRET);
  if (!env || !env[0]) return 0;
  if (bagua__rdzv_secret_decode(env, strlen(env), cfg->secret, why, sizeof(why)) != 0) {
    bagua__agent_say("BAGUA_JOB_SECRET: %s; accepted: %d hex digits", why, BAGUA_RDZV_SECRET_HEX);
    cfg->secret[0] = '\0';
    return -1;
  }
  return 0;
}

/* --log-dir: a directory, or a path where one can be made (the workers' log files are made
 * when they start). An existing FIFO, device or file there is refused now rather than found
 * when the first worker starts. Returns 0, or -1 after printing. */
static int check_log_dir(const char *dir) {
  struct stat st;
  if (!dir || stat(dir, &st) != 0 || S_ISDIR(st.st_mode)) return 0;
  bagua__agent_say(
      "--log-dir %s: it is %s; accepted: a directory, or a path where one can be "
      "made",
      dir, bagua__file_kind(st.st_mode));
  return -1;
}

int bagua__agent_parse_cli(int argc, char **argv, bagua__agent_config_t *cfg) {
  struct option long_opts[NARGS + 1];
  const char *given[NARGS];
  char host[256] = "localhost";
  fill_shared();
  memset(cfg, 0, sizeof(*cfg));
  memset(given, 0, sizeof(given));
  if (gethostname(host, sizeof(host) - 1) != 0) snprintf(host, sizeof(host), "localhost");
  host[sizeof(host) - 1] = '\0';
  bagua__agent_set_name(host);

  if (wants_env_stdin(argc, argv) && read_env_stdin() != 0) return 2;
  if (bagua__params_check() != BAGUA_OK) {
    bagua__agent_say("bad environment parameter: %s", bagua_last_error());
    return 2;
  }
  set_defaults(cfg);
  /* The environment's values, which the flags then override. bagua__params_check() above
   * has checked those the registry bounds; the structured ones are checked below, once the
   * flags are known, under the name of the flag that would override them. */
  for (int i = 0; i < NARGS; i++) {
    given[i] = env_value(&k_args[i]);
    if (given[i] && !checked_late(&k_args[i]) && apply(&k_args[i], given[i], cfg) != 0) return 2;
  }

  for (int i = 0; i < NARGS; i++) {
    long_opts[i].name = k_args[i].flag + 2;
    long_opts[i].has_arg =
        k_args[i].kind == AK_HELP || k_args[i].kind == AK_VERSION || k_args[i].kind == AK_SWITCH
            ? no_argument
            : required_argument;
    long_opts[i].flag = NULL;
    long_opts[i].val = 256 + i;
  }
  memset(&long_opts[NARGS], 0, sizeof(long_opts[NARGS]));

  opterr = 0; /* our own messages name the flag and what is accepted */
  optind = 1;
  int c, rc = 0;
  while ((c = getopt_long(argc, argv, "+:h", long_opts, NULL)) != -1) {
    if (c >= 256 && c < 256 + NARGS) {
      const arg_desc_t *d = &k_args[c - 256];
      if (d->kind == AK_HELP) c = 'h';
      if (d->kind == AK_VERSION) {
        printf("bagua-agent %s\n", BAGUA_VERSION_STRING);
        return 1;
      }
      if (c != 'h') {
        given[c - 256] = optarg;
        /* The others are refused at once (every bad one is reported). */
        if (!checked_late(d)) rc |= apply(d, optarg, cfg) != 0;
        continue;
      }
    }
    switch (c) {
      case 'h':
        print_usage();
        return 1;
      case ':':
        bagua__agent_say("flag %s needs a value; run bagua-agent --help for the flags",
                         argv[optind - 1]);
        return 2;
      default: {
        char shortopt[3] = {'-', (char)optopt, '\0'};
        bagua__agent_say("unknown flag \"%s\"; run bagua-agent --help for the flags",
                         optopt ? shortopt : argv[optind - 1]);
        return 2;
      }
    }
  }
  if (rc) return 2;

  /* The program follows "--" (getopt consumes it) or starts at the first non-flag word. */
  if (optind >= argc) {
    bagua__agent_say("missing the worker program; accepted: ... -- PROGRAM [ARGS...]");
    return 2;
  }
  cfg->argv = argv + optind;
  cfg->argc = argc - optind;

  for (int i = 0; i < NARGS; i++) {
    const arg_desc_t *d = &k_args[i];
    if (!checked_late(d)) continue;
    /* An empty flag value is refused by the validator ("the value is empty; accepted: ..."):
     * an empty job id would merge unrelated jobs. An empty variable is no value (env_value). */
    const char *text = given[i];
    /* The node id defaults to the host name, which must pass as an id too. */
    if (!text && d->field == CFG(node_id)) text = host;
    if (!text && d->field == CFG(role)) text = bagua__param_str_default(BAGUA_P_ROLE);
    if (!text && d->missing[0]) {
      if (d->kind == AK_INT) {
        int64_t lo = 0, hi = 0;
        bagua__param_bounds((bagua__param_id_t)d->param, &lo, &hi);
        bagua__agent_say("%s is required%san integer in [%lld, %lld]", d->flag, d->missing,
                         (long long)lo, (long long)hi);
      } else {
        bagua__agent_say("%s is required%s", d->flag, d->missing);
      }
      return 2;
    }
    if (text && apply(d, text, cfg) != 0) return 2;
    if (d->field == CFG(node_id) && d->kind == AK_ID) bagua__agent_set_name(cfg->node_id);
  }
  if (cfg->log_dir && !cfg->log_dir[0]) cfg->log_dir = NULL;
  if (cfg->node_rank >= cfg->nnodes_max) {
    bagua__agent_say(
        "--node-rank %d is not a node of a job of at most %d nodes; accepted: -1 "
        "(join order) or 0 to %d",
        cfg->node_rank, cfg->nnodes_max, cfg->nnodes_max - 1);
    return 2;
  }
  /* torchrun's rule: several workers of one node each running as many OpenMP threads as the
   * node has cores would overload it, so unless the user chose a value (any value, even an
   * empty one: torchrun tests for presence too) each worker gets one thread. agent.c warns. */
  cfg->omp_default = cfg->nproc > 1 && !bagua__param_is_set(BAGUA_P_OMP_NUM_THREADS);
  if (check_program(cfg->argv[0]) != 0) return 2;
  if (check_log_dir(cfg->log_dir) != 0 || load_secret(cfg) != 0) return 2;
  const char *redirects = bagua__param_str(BAGUA_P_REDIRECTS);
  char rerr[256];
  if (redirects && redirects[0] &&
      bagua__std_mask(redirects, 0, NULL, NULL, rerr, sizeof(rerr)) != BAGUA_OK) {
    bagua__agent_say("BAGUA_REDIRECTS=%s", rerr);
    return 2;
  }
  return 0;
}
