/*
 * The job's secret (docs/security.md): the first agent of a job writes it, every agent uses
 * the one etcd holds before any worker starts, and agents whose workers hold it keep it the
 * job's against a value written over it.
 */
#include <stdio.h>
#include <string.h>

#include "agent_internal.h"
#include "common/log.h"

/* Whether this agent was given the job's secret (--secret-file, or BAGUA_JOB_SECRET in its
 * environment, as a launcher passes it): then it never takes another one. */
static int secret_given(const bagua__agent_t *a) {
  return a->cfg->secret[0] != '\0';
}

/*
 * The job's secret, before any worker starts: the first agent of the job writes one (the one
 * it was given, cfg->secret; else 32 fresh random bytes) with a
 * put-if-absent transaction; every agent then uses the one etcd holds (an agent that was
 * given one refuses another). The workers get it in their environment only (never on a
 * command line). Returns -1 to go on, or an exit status.
 */
int bagua__agent_setup_secret(bagua__agent_t *a) {
  char mine[BAGUA_RDZV_SECRET_HEX + 1], key[BAGUA_RDZV_KEY_MAX], why[160];
  int from_file = a->cfg->secret_file && a->cfg->secret_file[0];
  int rc = -1;
  /* A given secret was read and checked with the command line (cli.c), before this agent
   * wrote anything to etcd. */
  if (secret_given(a)) {
    memcpy(mine, a->cfg->secret, sizeof(mine));
  } else if (bagua__rdzv_secret_generate(mine) != BAGUA_OK) {
    bagua__agent_say("cannot generate the job secret: %s", bagua_last_error());
    return 1;
  }
  bagua__agent_key(a, key, sizeof(key), BAGUA__RDZV_KEY_SECRET, 0, NULL);
  int created = 0;
  bagua__etcd_kv_t cur;
  memset(&cur, 0, sizeof(cur));
  bagua_status_t st = bagua__etcd_create_if_absent(a->etcd, key, mine, BAGUA_RDZV_SECRET_HEX, 0,
                                                   &created, NULL, &cur);
  if (st != BAGUA_OK) {
    bagua__agent_say("cannot write %s in etcd at %s: %s", key, a->cfg->endpoints,
                     bagua_strerror(st));
    rc = BAGUA_AGENT_EXIT_RDZV;
  } else if (created) {
    memcpy(a->secret, mine, sizeof(mine));
  } else if (bagua__rdzv_secret_decode(cur.value, cur.value_len, a->secret, why, sizeof(why)) !=
             0) {
    /* Ours for now: agents whose workers hold the job's real secret write it back, and this
     * agent adopts it before it starts any worker (check_secret). */
    bagua__rdzv_reject(key, cur.mod_revision, "a job secret", why);
    memcpy(a->secret, mine, sizeof(mine));
  } else if (secret_given(a) && strcmp(a->secret, mine) != 0) {
    bagua__agent_say("the secret in %s%s is not job %s's secret (stored in %s)",
                     from_file ? "--secret-file " : "BAGUA_JOB_SECRET",
                     from_file ? a->cfg->secret_file : "", a->cfg->job_id, key);
    a->secret[0] = '\0';
    rc = BAGUA_AGENT_EXIT_USAGE;
  }
  bagua__etcd_kv_clear(&cur);
  explicit_bzero(mine, sizeof(mine));
  /* The workers get it in their environment from workers.c (build_env), never from ours. */
  return rc;
}

/* Adopts `secret` as the job's: for this agent and for the workers it starts from now on
 * (workers.c puts a->secret in their environment). */
static void adopt_secret(bagua__agent_t *a, const char *secret) {
  snprintf(a->secret, sizeof(a->secret), "%s", secret);
  if (a->live) bagua__liveness_set_secret(a->live, a->secret);
}

/*
 * Keeps this agent's secret the job's. Agents starting together over an earlier run's state
 * race: the one that clears that state may delete the secret another agent already read
 * (docs/agent.md, "State left by an earlier run"); and anyone with write access to etcd may
 * overwrite it. So:
 *  - an agent that has not started workers yet (and was given no secret) adopts the valid
 *    secret etcd holds, so all agents agree before the first round's workers start;
 *  - otherwise (its workers hold its secret, or it was given one) a missing, corrupt or
 *    different value is written back with its own, compare-and-swap on what it read; every
 *    agent of the job holds the same one, so they all write the same value.
 * A failed write is retried on the next pass.
 */
void bagua__agent_check_secret(bagua__agent_t *a, const bagua__agent_snap_t *s) {
  int given = secret_given(a);
  if (s->has_secret && strcmp(s->secret, a->secret) == 0) return;
  if (s->has_secret && !given && !a->secret_used) {
    BAGUA_INFO(BAGUA_SUBSYS_AGENT, "agent: adopting job %s's secret (it was replaced in etcd)",
               a->cfg->job_id);
    adopt_secret(a, s->secret);
    return;
  }
  char key[BAGUA_RDZV_KEY_MAX];
  bagua__agent_key(a, key, sizeof(key), BAGUA__RDZV_KEY_SECRET, 0, NULL);
  int swapped = 0;
  bagua__etcd_kv_t cur;
  memset(&cur, 0, sizeof(cur));
  if (bagua__etcd_cas(a->etcd, key, s->secret_mod_rev, a->secret, strlen(a->secret), 0, &swapped,
                      NULL, &cur) != BAGUA_OK)
    swapped = 0;
  char have[BAGUA_RDZV_SECRET_HEX + 1];
  /* Lost a race to another agent's write: adopt it when we still may (next pass otherwise). */
  if (!swapped && cur.value && !given && !a->secret_used &&
      bagua__rdzv_secret_decode(cur.value, cur.value_len, have, NULL, 0) == 0)
    adopt_secret(a, have);
  bagua__etcd_kv_clear(&cur);
  if (swapped && s->secret_mod_rev)
    bagua__agent_say("%s held another or a corrupt value: wrote this job's secret back", key);
}
