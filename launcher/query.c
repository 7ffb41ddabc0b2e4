/*
 * bagua-launch status / list (query.h): one range read of the job's keys (or of every job's),
 * validated by common/rdzv like everything else read from etcd, printed as a table or JSON.
 */
#include "query.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "common/etcd/etcd.h"
#include "common/output.h"
#include "common/params.h"
#include "common/time.h"
#include "common/validate.h"
#include "launch.h"
#include "status.h"

#define QUERY_EXIT_NOT_FOUND 2

int bagua__launch_is_query(int argc, char **argv) {
  return argc > 1 && (strcmp(argv[1], "status") == 0 || strcmp(argv[1], "list") == 0);
}

typedef struct {
  const char *cmd;
  const char *endpoint;
  const char *job;
  int json;
} query_args_t;

static void usage(FILE *f) {
  fprintf(f,
          "usage: bagua-launch status --rdzv-endpoint HOST:PORT --job-id ID [--json]\n"
          "       bagua-launch list   --rdzv-endpoint HOST:PORT [--json]\n"
          "\n"
          "status: the job's state, round, members with their ranks, restarts, and each\n"
          "worker's last reported step and step rate. list: every job in that etcd.\n"
          "--rdzv-endpoint defaults to BAGUA_RDZV_ENDPOINT, --job-id to BAGUA_JOB_ID.\n"
          "Exit status: 0 printed; 2 usage error or no such job; 3 etcd unreachable\n"
          "(each request is bounded by BAGUA_ETCD_TIMEOUT_MS).\n"
          "A subcommand is recognised only as the first argument: `bagua-launch -- status`\n"
          "runs a program named status.\n");
}

/* Returns -1 to go on, else an exit status. */
static int parse(int argc, char **argv, query_args_t *q) {
  char tool[64], err[512];
  snprintf(tool, sizeof(tool), "%s %s", LAUNCH_TOOL, argv[1]);
  memset(q, 0, sizeof(*q));
  q->cmd = argv[1];
  q->endpoint = bagua__param_str(BAGUA_P_RDZV_ENDPOINT);
  q->job = bagua__param_is_set(BAGUA_P_JOB_ID) ? bagua__param_str(BAGUA_P_JOB_ID) : NULL;
  int is_status = strcmp(q->cmd, "status") == 0;
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    const char **dst = NULL;
    size_t n = 0;
    if (strcmp(a, "--json") == 0) {
      q->json = 1;
      continue;
    }
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 0;
    }
    if (strncmp(a, "--rdzv-endpoint", n = 15) == 0)
      dst = &q->endpoint;
    else if (is_status && strncmp(a, "--job-id", n = 8) == 0)
      dst = &q->job;
    if (!dst || (a[n] != '\0' && a[n] != '=')) {
      bagua__say(tool, "unknown argument \"%s\"; accepted: --rdzv-endpoint E%s --json (see --help)",
                 a, is_status ? " --job-id J" : "");
      return LAUNCH_EXIT_USAGE;
    }
    if (a[n] == '=') {
      *dst = a + n + 1;
    } else if (i + 1 < argc) {
      *dst = argv[++i];
    } else {
      bagua__say(tool, "%.*s needs a value", (int)n, a);
      return LAUNCH_EXIT_USAGE;
    }
  }
  if (!q->endpoint || !q->endpoint[0]) {
    bagua__say(tool,
               "--rdzv-endpoint is required (or BAGUA_RDZV_ENDPOINT); accepted: "
               "HOST:PORT[,HOST:PORT] of the job's etcd");
    return LAUNCH_EXIT_USAGE;
  }
  if (bagua__check_endpoints(q->endpoint, err, sizeof(err)) != BAGUA_OK) {
    bagua__say(tool, "--rdzv-endpoint \"%s\" is malformed: %s", q->endpoint, err);
    return LAUNCH_EXIT_USAGE;
  }
  if (is_status && (!q->job || !q->job[0])) {
    bagua__say(tool,
               "--job-id is required (or BAGUA_JOB_ID); `bagua-launch list` names the "
               "jobs");
    return LAUNCH_EXIT_USAGE;
  }
  if (is_status && bagua__check_id(q->job, err, sizeof(err)) != BAGUA_OK) {
    bagua__say(tool, "--job-id \"%s\" is invalid: %s", q->job, err);
    return LAUNCH_EXIT_USAGE;
  }
  return -1;
}

/* ---------------------------------------------------------------------------------------- */
/* Output                                                                                    */
/* ---------------------------------------------------------------------------------------- */

static void fmt_eta(const bagua__launch_job_t *j, char *out, size_t len) {
  if (j->total_steps <= 0 || j->rate <= 0 || j->min_step >= j->total_steps) {
    snprintf(out, len, "-");
    return;
  }
  long long s = (long long)((double)(j->total_steps - j->min_step) / j->rate + 0.5);
  if (s >= 3600)
    snprintf(out, len, "%lldh%02lldm", s / 3600, (s / 60) % 60);
  else if (s >= 60)
    snprintf(out, len, "%lldm%02llds", s / 60, s % 60);
  else
    snprintf(out, len, "%llds", s);
}

static void print_status_table(const bagua__launch_job_t *j, FILE *f) {
  const char *state = bagua__launch_job_state(j);
  fprintf(f, "job %s: %s", j->job, state);
  if (j->has_round)
    fprintf(f, ", round %lld (%s), %d node(s), world size %d", (long long)j->round.round,
            bagua__round_reason_word(j->round.reason), j->round.nmembers, j->round.world_size);
  if (j->has_round || j->has_cfg) {
    fprintf(f, ", restarts %d", j->has_round ? j->round.restart_count : 0);
    if (j->has_cfg) fprintf(f, "/%d", j->cfg.max_restarts);
  }
  if (j->leader[0]) fprintf(f, ", leader %s", j->leader);
  fputc('\n', f);
  if (j->has_status && j->status.state != BAGUA__JOB_RUNNING && j->status.message[0])
    fprintf(f, "  %s (exit code %d)\n", j->status.message, j->status.exit_code);
  if (j->nreporting) {
    char eta[32];
    fmt_eta(j, eta, sizeof(eta));
    fprintf(f, "progress: step %lld", (long long)j->min_step);
    if (j->total_steps) fprintf(f, "/%lld", (long long)j->total_steps);
    fprintf(f, ", %.2f steps/s, ETA %s (%d worker(s) reporting)\n", j->rate, eta, j->nreporting);
  }
  fprintf(f, "%-20s %-24s %-8s %-12s %s\n", "NODE", "HOST", "ROLE", "RANKS", "WORKERS");
  for (size_t i = 0; i < j->nnodes; i++) {
    const bagua__launch_node_view_t *v = &j->nodes[i];
    char ranks[48] = "-";
    if (v->member >= 0)
      snprintf(ranks, sizeof(ranks), "%d..%d", v->rank_base, v->rank_base + v->nproc - 1);
    const char *role = v->member < 0 ? "spare" : v->registered ? "member" : "lost";
    fprintf(f, "%-20s %-24s %-8s %-12s %d\n", v->id, v->registered ? v->rec.host : "-", role, ranks,
            v->nproc);
  }
  int header = 0;
  for (size_t i = 0; i < j->nnodes; i++) {
    const bagua__launch_node_view_t *v = &j->nodes[i];
    if (!v->has_progress) continue;
    if (!header) {
      fprintf(f, "%-20s %5s %6s %8s %12s %9s %14s %9s %7s\n", "WORKER", "LOCAL", "RANK", "PID",
              "STEP", "STEPS/S", "BYTES_SENT", "COMM_S", "ROUND");
      header = 1;
    }
    for (int w = 0; w < v->prog.nworkers; w++) {
      const bagua__rdzv_wprogress_t *x = &v->prog.w[w];
      char step[48];
      if (x->total_steps)
        snprintf(step, sizeof(step), "%lld/%lld", (long long)x->step, (long long)x->total_steps);
      else
        snprintf(step, sizeof(step), "%lld", (long long)x->step);
      fprintf(f, "%-20s %5d %6d %8d %12s %9.2f %14lld %9.2f %7lld\n", v->id, x->local_rank, x->rank,
              x->pid, step, (double)x->rate_milli / 1000.0, (long long)x->bytes_sent,
              (double)x->comm_ms / 1000.0, (long long)v->prog.round);
    }
  }
}

static cJSON *job_json(const bagua__launch_job_t *j, int full) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  cJSON_AddStringToObject(o, "job", j->job);
  cJSON_AddStringToObject(o, "state", bagua__launch_job_state(j));
  cJSON_AddNumberToObject(o, "round", j->has_round ? (double)j->round.round : 0);
  cJSON_AddNumberToObject(o, "nodes", j->has_round ? j->round.nmembers : 0);
  cJSON_AddNumberToObject(o, "world_size", j->has_round ? j->round.world_size : 0);
  cJSON_AddNumberToObject(o, "restart_count", j->has_round ? j->round.restart_count : 0);
  cJSON_AddNumberToObject(o, "registered", (double)j->nnodes);
  cJSON_AddNumberToObject(o, "step", (double)j->min_step);
  cJSON_AddNumberToObject(o, "total_steps", (double)j->total_steps);
  cJSON_AddNumberToObject(o, "steps_per_second", j->rate);
  if (!full) return o;
  cJSON_AddStringToObject(o, "reason",
                          j->has_round ? bagua__round_reason_word(j->round.reason) : "");
  cJSON_AddStringToObject(o, "leader", j->leader);
  if (j->has_cfg) {
    cJSON_AddNumberToObject(o, "max_restarts", j->cfg.max_restarts);
    cJSON_AddNumberToObject(o, "nnodes_min", j->cfg.nnodes_min);
    cJSON_AddNumberToObject(o, "nnodes_max", j->cfg.nnodes_max);
  }
  if (j->has_status) {
    cJSON_AddNumberToObject(o, "exit_code", j->status.exit_code);
    cJSON_AddStringToObject(o, "message", j->status.message);
  }
  cJSON *nodes = cJSON_AddArrayToObject(o, "members");
  for (size_t i = 0; nodes && i < j->nnodes; i++) {
    const bagua__launch_node_view_t *v = &j->nodes[i];
    cJSON *n = cJSON_CreateObject();
    if (!n) break;
    cJSON_AddItemToArray(nodes, n);
    cJSON_AddStringToObject(n, "node", v->id);
    cJSON_AddStringToObject(n, "host", v->registered ? v->rec.host : "");
    cJSON_AddStringToObject(n, "addr", v->registered ? v->rec.addr : "");
    cJSON_AddBoolToObject(n, "registered", v->registered);
    cJSON_AddBoolToObject(n, "member", v->member >= 0);
    cJSON_AddNumberToObject(n, "nproc", v->nproc);
    cJSON *ranks = cJSON_AddArrayToObject(n, "ranks");
    for (int r = 0; ranks && v->member >= 0 && r < v->nproc; r++)
      cJSON_AddItemToArray(ranks, cJSON_CreateNumber(v->rank_base + r));
    cJSON *ws = cJSON_AddArrayToObject(n, "workers");
    for (int w = 0; ws && v->has_progress && w < v->prog.nworkers; w++) {
      const bagua__rdzv_wprogress_t *x = &v->prog.w[w];
      cJSON *e = cJSON_CreateObject();
      if (!e) break;
      cJSON_AddItemToArray(ws, e);
      cJSON_AddNumberToObject(e, "local_rank", x->local_rank);
      cJSON_AddNumberToObject(e, "rank", x->rank);
      cJSON_AddNumberToObject(e, "pid", x->pid);
      cJSON_AddNumberToObject(e, "round", (double)v->prog.round);
      cJSON_AddNumberToObject(e, "step", (double)x->step);
      cJSON_AddNumberToObject(e, "total_steps", (double)x->total_steps);
      cJSON_AddNumberToObject(e, "steps_per_second", (double)x->rate_milli / 1000.0);
      cJSON_AddNumberToObject(e, "samples", (double)x->samples);
      cJSON_AddNumberToObject(e, "bytes_sent", (double)x->bytes_sent);
      cJSON_AddNumberToObject(e, "comm_seconds", (double)x->comm_ms / 1000.0);
      cJSON_AddNumberToObject(e, "update_ms", (double)x->update_ms);
    }
  }
  return o;
}

static int print_json(cJSON *o, FILE *f) {
  char *s = o ? cJSON_Print(o) : NULL;
  cJSON_Delete(o);
  if (!s) {
    bagua__say(LAUNCH_TOOL, "out of memory");
    return 1;
  }
  fprintf(f, "%s\n", s);
  free(s);
  return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Commands                                                                                  */
/* ---------------------------------------------------------------------------------------- */

static int unreachable(const query_args_t *q, bagua_status_t st, int64_t t0, const char *tool) {
  bagua__say(tool,
             "cannot read from etcd at %s: %s after %lld ms (each request is bounded by "
             "BAGUA_ETCD_TIMEOUT_MS=%lld); accepted: --rdzv-endpoint HOST:PORT of the job's "
             "running etcd",
             q->endpoint, bagua_err_name(st), (long long)(bagua__now_ms() - t0),
             (long long)bagua__param_int(BAGUA_P_ETCD_TIMEOUT_MS));
  return LAUNCH_EXIT_RDZV;
}

static int cmd_status(const query_args_t *q, bagua__etcd_t *c, FILE *out, const char *tool) {
  bagua__launch_job_t j;
  int64_t t0 = bagua__now_ms();
  bagua_status_t st = bagua__launch_read_job(c, q->job, &j);
  if (st != BAGUA_OK) return unreachable(q, st, t0, tool);
  if (j.nkeys == 0) {
    bagua__say(tool,
               "no job \"%s\" in etcd at %s (`bagua-launch list --rdzv-endpoint %s` "
               "names the jobs there)",
               q->job, q->endpoint, q->endpoint);
    bagua__launch_job_clear(&j);
    return QUERY_EXIT_NOT_FOUND;
  }
  int rc = 0;
  if (q->json)
    rc = print_json(job_json(&j, 1), out);
  else
    print_status_table(&j, out);
  bagua__launch_job_clear(&j);
  return rc;
}

static int cmd_list(const query_args_t *q, bagua__etcd_t *c, FILE *out, const char *tool) {
  bagua__etcd_kv_t *kvs = NULL;
  size_t n = 0;
  int64_t t0 = bagua__now_ms();
  bagua_status_t st = bagua__etcd_range_prefix(c, "/bagua/", &kvs, &n, NULL);
  if (st != BAGUA_OK) return unreachable(q, st, t0, tool);
  cJSON *arr = q->json ? cJSON_CreateArray() : NULL;
  if (!q->json)
    fprintf(out, "%-32s %-10s %6s %6s %6s %12s %9s\n", "JOB", "STATE", "ROUND", "NODES", "WORLD",
            "STEP", "STEPS/S");
  int rc = 0;
  /* Keys come sorted, so a job's keys are contiguous. */
  for (size_t i = 0; i < n && rc == 0;) {
    const char *k = kvs[i].key + 7;
    size_t idlen = strcspn(k, "/");
    char job[BAGUA_RDZV_ID_MAX];
    size_t end = i + 1;
    while (end < n && strncmp(kvs[end].key + 7, k, idlen) == 0 && kvs[end].key[7 + idlen] == '/')
      end++;
    if (k[idlen] == '/' && idlen < sizeof(job)) {
      memcpy(job, k, idlen);
      job[idlen] = '\0';
      bagua__launch_job_t j;
      if (bagua__rdzv_id_valid(job) && bagua__launch_job_parse(job, kvs + i, end - i, &j) == 0) {
        if (arr) {
          cJSON_AddItemToArray(arr, job_json(&j, 0));
        } else {
          char step[48] = "-";
          if (j.nreporting && j.total_steps)
            snprintf(step, sizeof(step), "%lld/%lld", (long long)j.min_step,
                     (long long)j.total_steps);
          else if (j.nreporting)
            snprintf(step, sizeof(step), "%lld", (long long)j.min_step);
          fprintf(out, "%-32s %-10s %6lld %6d %6d %12s %9.2f\n", j.job, bagua__launch_job_state(&j),
                  j.has_round ? (long long)j.round.round : 0LL, j.has_round ? j.round.nmembers : 0,
                  j.has_round ? j.round.world_size : 0, step, j.rate);
        }
        bagua__launch_job_clear(&j);
      }
    }
    i = end;
  }
  bagua__etcd_kvs_free(kvs, n);
  if (arr) {
    cJSON *o = cJSON_CreateObject();
    if (o)
      cJSON_AddItemToObject(o, "jobs", arr);
    else
      cJSON_Delete(arr);
    rc = print_json(o, out);
  }
  return rc;
}

int bagua__launch_query_main(int argc, char **argv, FILE *out) {
  query_args_t q;
  char tool[64];
  snprintf(tool, sizeof(tool), "%s %s", LAUNCH_TOOL, argv[1]);
  if (bagua__params_check() != BAGUA_OK) {
    bagua__say(tool, "bad environment parameter: %s", bagua_last_error());
    return LAUNCH_EXIT_USAGE;
  }
  int rc = parse(argc, argv, &q);
  if (rc >= 0) return rc;
  bagua__etcd_t *c = NULL;
  if (bagua__etcd_create(q.endpoint, (int)bagua__param_int(BAGUA_P_ETCD_TIMEOUT_MS), &c) !=
      BAGUA_OK) {
    bagua__say(tool, "cannot create an etcd client for %s: %s", q.endpoint, bagua_last_error());
    return LAUNCH_EXIT_RDZV;
  }
  rc = strcmp(q.cmd, "status") == 0 ? cmd_status(&q, c, out, tool) : cmd_list(&q, c, out, tool);
  bagua__etcd_destroy(c);
  return rc;
}
