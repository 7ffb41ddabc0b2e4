/*
 * The test fixture over the common etcd helper: the tests' defaults (loopback, the Debian
 * binary, exit 77 when it is missing), messages on stderr, and a clean-up at exit for tests
 * that end without stopping their etcd.
 */
#include "etcd_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/time.h"

/* Live fixtures of this process, copied by value so the exit handler never follows a pointer
 * into a stack frame that no longer exists. */
#define MAX_LIVE 8
static struct {
  pid_t owner, pid;
  char dir[sizeof(((bagua__etcd_local_t *)0)->dir)];
} g_live[MAX_LIVE];
static int g_atexit_registered;

long long etcd_fixture_now_ms(void) {
  return (long long)bagua__now_ms();
}

int etcd_fixture_available(void) {
  return bagua__etcd_local_available(ETCD_FIXTURE_BIN);
}

int etcd_fixture_free_port(void) {
  return bagua__etcd_local_free_port("127.0.0.1");
}

static void cleanup_at_exit(void) {
  for (int i = 0; i < MAX_LIVE; i++) {
    if (g_live[i].owner != getpid()) continue;
    bagua__etcd_local_kill(g_live[i].pid, ETCD_FIXTURE_STOP_TIMEOUT_MS);
    bagua__etcd_local_remove_tree(g_live[i].dir);
    g_live[i].owner = 0;
  }
}

/* Records (or updates) the fixture's etcd pid and directory for the exit handler. */
static void track(const etcd_fixture_t *fx) {
  const bagua__etcd_local_t *e = &fx->etcd;
  int free_slot = -1;
  for (int i = 0; i < MAX_LIVE; i++) {
    if (g_live[i].owner == e->owner && strcmp(g_live[i].dir, e->dir) == 0) {
      g_live[i].pid = e->pid;
      return;
    }
    if (g_live[i].owner != getpid() && free_slot < 0) free_slot = i;
  }
  if (free_slot < 0) return;
  g_live[free_slot].owner = e->owner;
  g_live[free_slot].pid = e->pid;
  snprintf(g_live[free_slot].dir, sizeof(g_live[free_slot].dir), "%s", e->dir);
  if (!g_atexit_registered) {
    atexit(cleanup_at_exit);
    g_atexit_registered = 1;
  }
}

static void untrack(const etcd_fixture_t *fx) {
  for (int i = 0; i < MAX_LIVE; i++)
    if (g_live[i].owner == fx->etcd.owner && strcmp(g_live[i].dir, fx->etcd.dir) == 0)
      g_live[i].owner = 0;
}

static int is_owner(const etcd_fixture_t *fx) {
  return fx->etcd.owner == getpid();
}

/* Reports a failed helper call on stderr; returns -1 for the fixture's callers. */
static int failed(const etcd_fixture_t *fx) {
  fprintf(stderr, "etcd fixture: %s\n", fx->etcd.err);
  return -1;
}

int etcd_fixture_try_start(etcd_fixture_t *fx) {
  memset(fx, 0, sizeof(*fx));
  if (!etcd_fixture_available()) {
    printf("SKIP: %s not found; install the Debian package etcd-server\n", ETCD_FIXTURE_BIN);
    return 77;
  }
  bagua__etcd_local_opts_t opts = BAGUA__ETCD_LOCAL_OPTS_INIT;
  opts.bin = ETCD_FIXTURE_BIN;
  opts.name = "fixture";
  opts.dir_prefix = "/tmp/bagua-etcd";
  if (bagua__etcd_local_start(&fx->etcd, &opts) != BAGUA_OK) return failed(fx);
  snprintf(fx->endpoint, sizeof(fx->endpoint), "http://127.0.0.1:%d", fx->etcd.client_port);
  snprintf(fx->host_port, sizeof(fx->host_port), "127.0.0.1:%d", fx->etcd.client_port);
  track(fx);
  return 0;
}

void etcd_fixture_start(etcd_fixture_t *fx) {
  int rc = etcd_fixture_try_start(fx);
  if (rc == 77) exit(77);
  if (rc != 0) {
    fprintf(stderr, "FAIL: could not start etcd for the test\n");
    exit(1);
  }
}

int etcd_fixture_wait_healthy(etcd_fixture_t *fx, int timeout_ms) {
  bagua_status_t st = bagua__etcd_local_wait_healthy(&fx->etcd, timeout_ms);
  if (is_owner(fx)) track(fx); /* etcd may have been found dead and reaped */
  return st == BAGUA_OK ? 0 : failed(fx);
}

void etcd_fixture_dump_log(const etcd_fixture_t *fx, long max_bytes) {
  bagua__etcd_local_dump_log(&fx->etcd, max_bytes);
}

int etcd_fixture_down(etcd_fixture_t *fx) {
  if (!is_owner(fx)) return -1;
  bagua_status_t st = bagua__etcd_local_down(&fx->etcd);
  track(fx);
  return st == BAGUA_OK ? 0 : failed(fx);
}

int etcd_fixture_up(etcd_fixture_t *fx) {
  if (!is_owner(fx)) return -1;
  bagua_status_t st = bagua__etcd_local_up(&fx->etcd);
  track(fx);
  return st == BAGUA_OK ? 0 : failed(fx);
}

int etcd_fixture_restart(etcd_fixture_t *fx) {
  if (etcd_fixture_down(fx) != 0) return -1;
  return etcd_fixture_up(fx);
}

int etcd_fixture_signal(etcd_fixture_t *fx, int sig) {
  if (!is_owner(fx)) return -1;
  return bagua__etcd_local_signal(&fx->etcd, sig) == BAGUA_OK ? 0 : -1;
}

int etcd_fixture_stop(etcd_fixture_t *fx) {
  if (!is_owner(fx)) return -1;
  untrack(fx);
  bagua__etcd_local_stop(&fx->etcd);
  return 0;
}
