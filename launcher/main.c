/*
 * bagua-launch: the command a person runs.
 *
 *   bagua-launch [options] PROGRAM [ARGS...]
 *   bagua-launch status|list ...     (query.h: read a job's state from etcd)
 *
 * A subcommand is recognised only as the first argument: `bagua-launch -- status` (or any
 * option before it) runs a program named "status".
 *
 * Order of work, chosen so that a mistake costs nothing: the whole configuration is parsed
 * and validated first (exit 2, nothing started); then the rendezvous is made ready (a private
 * etcd, or a reachability check of --rdzv-endpoint: exit 3, nothing left behind); only then
 * are agents started. From the moment anything is started, every exit path this process
 * controls stops it again, and the paths it does not control (a crash, SIGKILL) are covered by
 * parent-death signals and the private etcd's keeper.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agents.h"
#include "bagua/version.h"
#include "bagua/params.h"
#include "common/etcd/etcd.h"
#include "common/log.h"
#include "common/output.h"
#include "common/sock.h"
#include "common/validate.h"
#include "embedded.h"
#include "etcd_local.h"
#include "launch.h"
#include "query.h"
#include "status.h"
#include "supervise.h"

/*
 * The address the private etcd listens on: --rdzv-host, else loopback when every agent is
 * local, else this machine's address on the route to the first remote host (the address that
 * host's network can reach us on).
 */
static int pick_etcd_addr(const bagua__launch_config_t *cfg, char *out, size_t len, char *err,
                          size_t errlen) {
  uint32_t addr;
  const char *given = cfg->v[LS_RDZV_HOST].s;
  if (given[0]) {
    if (bagua__resolve_ipv4(given, &addr) != BAGUA_OK) {
      snprintf(err, errlen,
               "bagua-launch: --rdzv-host \"%s\" does not resolve to an IPv4 address; accepted: "
               "an address of this machine that the other hosts can reach",
               given);
      return -1;
    }
    bagua__ipv4_str(addr, out, len);
    return 0;
  }
  const char *remote = NULL;
  for (int i = 0; i < cfg->nhosts && !remote; i++)
    if (!cfg->hosts[i].local) remote = cfg->hosts[i].name;
  if (!remote) {
    snprintf(out, len, "127.0.0.1");
    return 0;
  }
  int fd = -1;
  uint32_t local = 0;
  if (bagua__resolve_ipv4(remote, &addr) == BAGUA_OK &&
      (fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) >= 0) {
    /* A UDP connect sends nothing; it only asks the kernel for the route. */
    struct sockaddr_in sa = {
        .sin_family = AF_INET, .sin_port = htons(2379), .sin_addr.s_addr = addr};
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) local = bagua__sock_local_addr(fd);
  }
  if (fd >= 0) close(fd);
  if (!local) {
    snprintf(err, errlen,
             "bagua-launch: cannot tell which address of this machine host \"%s\" can reach for "
             "the private etcd; accepted: --rdzv-host ADDR, or --rdzv-endpoint of a running etcd",
             remote);
    return -1;
  }
  bagua__ipv4_str(local, out, len);
  return 0;
}

/*
 * Checks that etcd answers. Returns 0, or 3 with a message (the etcd client has already
 * logged the transport error as a warning). `stale_rev` gets the mod_revision of a status an
 * earlier run of the same job id left behind (the agents clear it; the supervisor must not
 * take it for this run's end), 0 when there is none.
 */
static int preflight(bagua__etcd_t *c, const bagua__launch_config_t *cfg, const char *endpoint,
                     int64_t *stale_rev, char *err, size_t errlen) {
  bagua__launch_status_t st;
  int64_t t0 = bagua__now_ms();
  bagua_status_t rc = bagua__launch_read_status(c, cfg->v[LS_JOB_ID].s, &st);
  if (rc != BAGUA_OK) {
    snprintf(err, errlen,
             "bagua-launch: cannot reach the rendezvous endpoint %.300s (%s after %lld ms, etcd "
             "timeout %s ms); accepted: HOST:PORT of a running etcd, or no --rdzv-endpoint for "
             "a private one",
             endpoint, bagua_err_name(rc), (long long)(bagua__now_ms() - t0),
             cfg->v[LS_ETCD_TIMEOUT_MS].s);
    return LAUNCH_EXIT_RDZV;
  }
  *stale_rev = st.found ? st.mod_revision : 0;
  if (st.found && strcmp(st.state, "running") != 0)
    BAGUA_INFO(BAGUA_SUBSYS_LAUNCH, "job %s has status %s in etcd from an earlier run",
               cfg->v[LS_JOB_ID].s, st.state);
  return 0;
}

/*
 * A one-node job that names an endpoint and no backend (rdzv_fallback_private): when no etcd
 * answers there, it needs none, and runs on a private etcd instead of failing. That is what
 * torchrun's default static backend does with such a command (pytorch/examples' scripts give
 * one node an endpoint), and a one-node job loses nothing by it; the line says how to insist
 * on the etcd. Returns 0 (the endpoint cleared when falling back), -1 when out of memory.
 */
static int fallback_private(bagua__launch_config_t *cfg) {
  bagua__launch_value_t *ep = &cfg->v[LS_ENDPOINT];
  bagua__etcd_t *probe = NULL;
  bagua__launch_status_t st;
  bagua_status_t rc = BAGUA_ERR_CURL;
  /* A refused connection needs no etcd request (nor the client's warning). */
  int listens = bagua__launch_endpoint_listens(ep->s);
  if (listens) {
    rc = bagua__etcd_create(ep->s, (int)cfg->v[LS_ETCD_TIMEOUT_MS].i, &probe);
    if (rc == BAGUA_OK) rc = bagua__launch_read_status(probe, cfg->v[LS_JOB_ID].s, &st);
    bagua__etcd_destroy(probe);
  }
  if (rc == BAGUA_OK) return 0;
  bagua__say(LAUNCH_TOOL,
             "no etcd answers at %s (%s): a one-node job needs none, so it runs on a private "
             "etcd, as torchrun's default static rendezvous would; to require that etcd: "
             "--rdzv-backend etcd",
             ep->s, listens ? bagua_err_name(rc) : "nothing listens there");
  char *empty = strdup("");
  if (!empty) return -1;
  free(ep->s);
  ep->s = empty;
  bagua__launch_origin_set(&ep->origin, LO_DEFAULT,
                           "a private etcd: no etcd answered at the one-node job's endpoint");
  return 0;
}

/* The node id of a torchrun-style launch without one: this host's name (cut to what fits and
 * to the id alphabet) and bagua-launch's pid. */
static int anonymous_node_id(bagua__launch_config_t *cfg) {
  char host[256] = "node", id[BAGUA_ID_MAX_LEN + 1];
  if (gethostname(host, sizeof(host)) != 0) snprintf(host, sizeof(host), "node");
  host[sizeof(host) - 1] = '\0';
  for (char *p = host; *p; p++)
    if (!isalnum((unsigned char)*p) && *p != '.' && *p != '_' && *p != '-') *p = '-';
  char pid[24];
  int np = snprintf(pid, sizeof(pid), "-%d", (int)getpid());
  snprintf(id, sizeof(id), "%.*s%s", BAGUA_ID_MAX_LEN - np, host, pid);
  char *copy = strdup(id);
  if (!copy) return -1;
  free(cfg->v[LS_NODE_ID].s);
  cfg->v[LS_NODE_ID].s = copy;
  return 0;
}

static void dry_run(const bagua__launch_config_t *cfg, const char *agent_path) {
  bagua__launch_dump(cfg, stdout);
  bagua__launch_agent_t *agents = NULL;
  char err[LAUNCH_ERR_LEN];
  const char *ep = cfg->v[LS_ENDPOINT].s[0] ? cfg->v[LS_ENDPOINT].s : "PRIVATE_ETCD";
  int n = bagua__launch_build_agents(cfg, agent_path, ep, &agents, err, sizeof(err));
  if (n < 0) {
    bagua__say(NULL, "%s", err);
    return;
  }
  printf("; agent commands (%s)\n", cfg->v[LS_ENDPOINT].s[0]
                                        ? "rendezvous through the given endpoint"
                                        : "PRIVATE_ETCD: the private etcd's HOST:PORT");
  for (int i = 0; i < n; i++) bagua__launch_print_command(&agents[i], stdout);
  bagua__launch_free_agents(agents, n);
}

int main(int argc, char **argv) {
  bagua__launch_config_t cfg;
  char err[LAUNCH_ERR_LEN], agent_path[4096], addr[64];
  bagua__launch_etcd_t priv = {.keeper = 0, .ctl_fd = -1, .evt_fd = -1};
  bagua__launch_etcd_t member = {.keeper = 0, .ctl_fd = -1, .evt_fd = -1};
  bagua__launch_grower_t *grower = NULL;
  bagua__launch_member_t *joiner = NULL;
  int have_member = 0;
  bagua__etcd_t *etcd = NULL;
  bagua__launch_agent_t *agents = NULL;
  int nagents = 0, sigfd = -1, have_priv = 0, hosting = 0, host_lock = -1;
  if (bagua__launch_is_query(argc, argv)) return bagua__launch_query_main(argc, argv, stdout);
  int rc = bagua__launch_configure(argc, argv, &cfg, err, sizeof(err));
  if (rc != 0) {
    bagua__say(NULL, "%s", err);
    return rc;
  }
  if (cfg.help || cfg.version || cfg.print_params) {
    if (cfg.help) bagua__launch_usage(stdout);
    if (cfg.version) printf("bagua-launch %s\n", BAGUA_VERSION_STRING);
    if (cfg.print_params) bagua_params_print(stdout);
    bagua__launch_config_free(&cfg);
    return 0;
  }
  int any_local = cfg.nhosts == 0;
  for (int i = 0; i < cfg.nhosts; i++) any_local |= cfg.hosts[i].local;
  if (bagua__launch_find_agent(cfg.v[LS_AGENT].s, any_local && !cfg.dry_run, agent_path,
                               sizeof(agent_path), err, sizeof(err)) != 0) {
    bagua__say(NULL, "%s", err);
    rc = LAUNCH_EXIT_USAGE;
    goto out;
  }
  if (cfg.dry_run) {
    dry_run(&cfg, agent_path);
    goto out;
  }
  if (cfg.anonymous_node && anonymous_node_id(&cfg) != 0) {
    bagua__say(LAUNCH_TOOL, "out of memory");
    rc = 1;
    goto out;
  }
  if (cfg.rdzv_fallback_private && fallback_private(&cfg) != 0) {
    bagua__say(LAUNCH_TOOL, "out of memory");
    rc = 1;
    goto out;
  }
  const int standalone = cfg.v[LS_ENDPOINT].s[0] == '\0';
  if (standalone && pick_etcd_addr(&cfg, addr, sizeof(addr), err, sizeof(err)) != 0) {
    bagua__say(NULL, "%s", err);
    rc = LAUNCH_EXIT_USAGE;
    goto out;
  }

  /* From here on signals are read from a signalfd, so none can interrupt a half-done step. */
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGHUP);
  sigaddset(&mask, SIGCHLD);
  sigprocmask(SIG_BLOCK, &mask, NULL);
  signal(SIGPIPE, SIG_IGN);
  sigfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sigfd < 0) {
    bagua__say(LAUNCH_TOOL, "signalfd: %s", strerror(errno));
    rc = 1;
    goto out;
  }

  char endpoint[1024];
  if (standalone) {
    int64_t t0 = bagua__now_ms();
    int r = bagua__launch_etcd_start(cfg.v[LS_ETCD_BIN].s, addr, 0, sigfd, &priv, err, sizeof(err));
    if (r != 0) {
      if (r > 0) {
        bagua__say(LAUNCH_TOOL, "SIG%s received while starting etcd; nothing was started",
                   sigabbrev_np(r));
        rc = 128 + r;
      } else {
        bagua__say(LAUNCH_TOOL, "%s", err);
        rc = LAUNCH_EXIT_RDZV;
      }
      goto out;
    }
    have_priv = 1;
    snprintf(endpoint, sizeof(endpoint), "%s", priv.endpoint);
    BAGUA_INFO(BAGUA_SUBSYS_LAUNCH, "private etcd at %s ready in %lld ms", endpoint,
               (long long)(bagua__now_ms() - t0));
  } else {
    if (cfg.rdzv_embedded) {
      /* This node hosts the job's etcd, or waits until the node that does answers. */
      int r =
          bagua__launch_embedded_open(&cfg, sigfd, &priv, &hosting, &host_lock, err, sizeof(err));
      if (r > 0) {
        bagua__say(LAUNCH_TOOL, "SIG%s received while opening the rendezvous; nothing was started",
                   sigabbrev_np(r));
        rc = 128 + r;
        goto out;
      }
      if (r < 0) {
        bagua__say(NULL, "%s", err);
        rc = LAUNCH_EXIT_RDZV;
        goto out;
      }
      have_priv = hosting;
    }
    snprintf(endpoint, sizeof(endpoint), "%s", cfg.v[LS_ENDPOINT].s);
    /* The hosted etcd grows to three members on three nodes (embedded_members.c). */
    if (hosting) {
      char own_ep[64];
      snprintf(own_ep, sizeof(own_ep), "127.0.0.1:%d", priv.client_port);
      if (bagua__launch_grower_start(&cfg, own_ep, &grower) != 0)
        bagua__say(LAUNCH_TOOL, "the job's etcd stays on this node alone (no grower thread)");
    } else if (cfg.rdzv_embedded) {
      bagua__launch_member_start(&cfg, cfg.v[LS_NODE_ID].s[0] ? cfg.v[LS_NODE_ID].s : "node",
                                 &member, endpoint, sizeof(endpoint), &joiner);
    }
  }
  /* The launcher's own client goes through loopback to a private etcd. */
  char own[128];
  if (have_priv) snprintf(own, sizeof(own), "127.0.0.1:%d", priv.client_port);
  if (bagua__etcd_create(have_priv ? own : endpoint, (int)cfg.v[LS_ETCD_TIMEOUT_MS].i, &etcd) !=
      BAGUA_OK) {
    bagua__say(LAUNCH_TOOL, "cannot create an etcd client for %s", endpoint);
    rc = LAUNCH_EXIT_RDZV;
    goto out;
  }
  int64_t stale_rev = 0;
  rc = preflight(etcd, &cfg, endpoint, &stale_rev, err, sizeof(err));
  if (rc != 0) {
    bagua__say(NULL, "%s", err);
    goto out;
  }

  nagents = bagua__launch_build_agents(&cfg, agent_path, endpoint, &agents, err, sizeof(err));
  if (nagents < 0 || bagua__launch_export_vars(&cfg) != 0) {
    if (nagents < 0)
      bagua__say(NULL, "%s", err);
    else
      bagua__say(LAUNCH_TOOL, "cannot export [env] variables");
    nagents = 0;
    rc = LAUNCH_EXIT_USAGE;
    goto out;
  }
  int progress = isatty(STDERR_FILENO);
  if (progress)
    bagua__say(LAUNCH_TOOL, "job %s: %d agent(s), nnodes %s, rendezvous at %s%s",
               cfg.v[LS_JOB_ID].s, nagents, cfg.v[LS_NNODES].s, endpoint,
               hosting     ? " (hosted here)"
               : have_priv ? " (private etcd)"
                           : "");
  /* A script written for torchrun (0 restarts) must not run again unannounced. */
  if (cfg.v[LS_MAX_RESTARTS].origin.kind == LO_DEFAULT && cfg.v[LS_MAX_RESTARTS].i > 0)
    bagua__say(LAUNCH_TOOL,
               "a failed worker restarts the job up to %lld times (bagua-launch's default; "
               "torchrun's is 0: --max-restarts 0)",
               (long long)cfg.v[LS_MAX_RESTARTS].i);
  BAGUA_INFO(BAGUA_SUBSYS_LAUNCH, "job %s: starting %d agent(s) against %s, at most %s at once",
             cfg.v[LS_JOB_ID].s, nagents, endpoint, cfg.v[LS_FANOUT].s);
  /* The supervisor starts the agents (--fanout at a time) and watches them. */
  bagua__launch_run_t run = {.cfg = &cfg,
                             .agents = agents,
                             .nagents = nagents,
                             .etcd = etcd,
                             .priv = have_priv ? &priv : NULL,
                             .sigfd = sigfd,
                             .progress = progress,
                             .stale_status_rev = stale_rev};
  rc = bagua__launch_supervise(&run);
  /* Nodes that end a moment later still need the etcd this one hosts; not after a signal. */
  have_member = bagua__launch_member_stop(joiner);
  joiner = NULL;
  if ((hosting || have_member) && rc < 128) bagua__launch_embedded_linger(&cfg, etcd, sigfd);
out:
  bagua__launch_grower_stop(grower);
  if (joiner) have_member = bagua__launch_member_stop(joiner);
  if (have_member) bagua__launch_etcd_stop(&member);
  bagua__etcd_destroy(etcd);
  if (have_priv) bagua__launch_etcd_stop(&priv);
  bagua__launch_embedded_unlock(host_lock);
  bagua__launch_free_agents(agents, nagents);
  if (sigfd >= 0) close(sigfd);
  bagua__launch_config_free(&cfg);
  return rc;
}
