/*
 * Whole bagua-launch runs against the fake agent (fake_agent.c): they test the launcher's own
 * work — the private etcd, agent start-up (local and through a remote command), exported
 * variables, signals, supervision, exit codes and clean-up — not the agent's rendezvous.
 *
 *   test_launch_fake MODE LAUNCHER FAKE_AGENT
 *
 * Every process a run starts inherits a unique marker variable; after each run the test
 * polls until none is left and checks that the private etcd's directory is gone.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bagua/error.h"
#include "common/etcd/etcd.h"
#include "etcd_fixture.h"
#include "launch_util.h"
#include "test.h"

static const char *g_launcher, *g_fake;
static char g_dir[128], g_out[256], g_marker[128];
static int g_extra_env_n;
static char *g_extra_env[8];

/* Starts bagua-launch with `args` (NULL-terminated) after --agent FAKE. */
static pid_t start(char *const *args) {
  /* The fake agent unless the test names its own. */
  char *const fake[] = {"--agent", (char *)g_fake, NULL};
  int own = args[0] && strcmp(args[0], "--agent") == 0;
  return lu_start_launcher(g_launcher, own ? NULL : fake, args, "fake", g_marker, sizeof(g_marker),
                           g_extra_env, g_extra_env_n, g_out);
}

static char *output(void) {
  char *t = lu_read(g_out);
  return t ? t : strdup("");
}

static void expect(int cond, const char *what) {
  if (!cond) {
    lu_dump(g_out);
    TEST_FAIL("%s", what);
  }
}

/* Everything the run started is gone: processes (by marker) and the etcd directory. */
static void assert_clean(void) {
  char *out = output(), dir[128];
  if (!lu_wait_no_marked(g_marker, 15000)) {
    lu_dump(g_out);
    TEST_FAIL("processes started by the run are still alive");
  }
  if (lu_find_etcd_dir(out, dir, sizeof(dir)) && !lu_wait_gone(dir, 10000)) {
    lu_dump(g_out);
    TEST_FAIL("the private etcd's directory %s is still there", dir);
  }
  free(out);
}

static void write_file(const char *path, const char *text, int exec) {
  FILE *f = fopen(path, "w");
  if (!f) TEST_FAIL("cannot write %s", path);
  fputs(text, f);
  fclose(f);
  if (exec) chmod(path, 0755);
}

static int count_lines(const char *path, const char *needle) {
  char *t = lu_read(path);
  int n = 0;
  for (char *p = t; p && (p = strstr(p, needle)); p++) n++;
  free(t);
  return n;
}

/* Waits until `n` workers wrote their pid files w<rank>.pid in g_dir. */
static void wait_workers(int n) {
  for (int r = 0; r < n; r++) {
    char path[256];
    snprintf(path, sizeof(path), "%s/w%d.pid", g_dir, r);
    expect(lu_wait_file(path, 20000), "the workers did not start");
  }
}

static char g_sleeper[512];
/* A worker that records its pid and sleeps. */
static char *sleeper(void) {
  snprintf(g_sleeper, sizeof(g_sleeper),
           "echo $$ > %s/w$RANK.pid.tmp && mv %s/w$RANK.pid.tmp "
           "%s/w$RANK.pid && exec sleep 60",
           g_dir, g_dir, g_dir);
  return g_sleeper;
}

static int mode_success(int env_wins) {
  char ini[256], outf[256], script[512];
  snprintf(ini, sizeof(ini), "%s/job.ini", g_dir);
  snprintf(outf, sizeof(outf), "%s/workers.txt", g_dir);
  write_file(ini,
             "[job]\nnproc_per_node = 3\n[algorithm]\nname = bytegrad\n"
             "[env]\nFOO = bar baz\nBAGUA_NET_NSTREAMS = 3\n",
             0);
  snprintf(script, sizeof(script),
           "echo \"W $RANK/$WORLD_SIZE FOO=$FOO ALG=$BAGUA_ALGORITHM NS=$BAGUA_NET_NSTREAMS\" "
           ">> %s",
           outf);
  if (env_wins) g_extra_env[g_extra_env_n++] = "BAGUA_NET_NSTREAMS=5";
  long long t0 = lu_now_ms();
  int rc = lu_wait(start((char *[]){"--config", ini, "--", "sh", "-c", script, NULL}), 30000);
  printf("job took %lld ms\n", lu_now_ms() - t0);
  expect(rc == 0, "exit 0");
  const char *want = env_wins ? "FOO=bar baz ALG=bytegrad NS=5" : "FOO=bar baz ALG=bytegrad NS=3";
  if (count_lines(outf, want) != 3) {
    lu_dump(outf);
    expect(0, "three workers with the [env] and [algorithm] variables");
  }
  char *out = output();
  expect(strstr(out, "--nproc-per-node 3") != NULL, "nproc_per_node from the INI file");
  expect(strstr(out, "private etcd healthy") != NULL, "a private etcd was used");
  free(out);
  assert_clean();
  return 0;
}

static int mode_failure(int by_signal) {
  char script[512];
  snprintf(script, sizeof(script), "if [ $RANK = 1 ]; then %s; fi; exec sleep 60",
           by_signal ? "kill -9 $$" : "exit 7");
  long long t0 = lu_now_ms();
  int rc = lu_wait(start((char *[]){"--nproc-per-node", "3", "--grace-ms", "2000", "--", "sh", "-c",
                                    script, NULL}),
                   30000);
  long long took = lu_now_ms() - t0;
  char *out = output();
  expect(rc == (by_signal ? 137 : 7), by_signal ? "exit 137" : "exit 7");
  expect(strstr(out, "failed; root cause at ") != NULL, "the root cause is reported");
  expect(strstr(out, by_signal ? "rank 1: signal 9 (SIGKILL) (round 1)"
                               : "rank 1: exit code 7 (round 1)") != NULL,
         "the root cause names rank and code");
  expect(took < 15000, "the failure ends the job promptly");
  free(out);
  assert_clean();
  return 0;
}

static int mode_signal(int sig) {
  pid_t pid = start((char *[]){"--nproc-per-node", "2", "--", "sh", "-c", sleeper(), NULL});
  wait_workers(2);
  long long t0 = lu_now_ms();
  kill(pid, sig);
  int rc = lu_wait(pid, 20000);
  printf("stopped in %lld ms\n", lu_now_ms() - t0);
  expect(rc == 128 + sig, "exit 128+signal");
  char *out = output();
  char want[64];
  snprintf(want, sizeof(want), "stopped by SIG%s", sigabbrev_np(sig));
  expect(strstr(out, want) != NULL, "the stop is reported");
  free(out);
  assert_clean();
  return 0;
}

/* bagua-launch killed outright: the keeper removes etcd and its directory, and the agents
 * (parent-death signal) stop their workers. */
static int mode_sigkill(void) {
  pid_t pid = start((char *[]){"--nproc-per-node", "2", "--", "sh", "-c", sleeper(), NULL});
  wait_workers(2);
  char *out = output(), dir[128];
  expect(lu_find_etcd_dir(out, dir, sizeof(dir)), "the etcd directory is logged");
  free(out);
  kill(pid, SIGKILL);
  expect(lu_wait(pid, 10000) == 137, "killed");
  assert_clean();
  expect(access(dir, F_OK) != 0, "the directory is gone");
  return 0;
}

/* An agent that ignores SIGTERM: SIGKILL after the grace period, or at once on a second
 * signal. */
static int mode_stubborn(int twice) {
  char agent[256], script[512];
  snprintf(agent, sizeof(agent), "%s/stubborn-agent", g_dir);
  snprintf(script, sizeof(script),
           "#!/bin/sh\ntrap '' TERM INT HUP\necho $$ > %s/w0.pid.tmp && mv %s/w0.pid.tmp "
           "%s/w0.pid\nexec sleep 60\n",
           g_dir, g_dir, g_dir);
  write_file(agent, script, 1);
  pid_t pid = start((char *[]){"--agent", agent, "--grace-ms", "300", "--", "true", NULL});
  wait_workers(1);
  long long t0 = lu_now_ms();
  kill(pid, SIGTERM);
  if (twice) {
    char *out = NULL;
    for (long long end = lu_now_ms() + 5000; lu_now_ms() < end; free(out)) {
      out = output();
      if (strstr(out, "SIGTERM received")) break;
    }
    free(out);
    kill(pid, SIGTERM);
  }
  int rc = lu_wait(pid, 20000);
  long long took = lu_now_ms() - t0;
  printf("stopped in %lld ms\n", took);
  expect(rc == 143, "exit 143");
  char *out = output();
  expect(
      strstr(out, twice ? "again: killing the agents" : "after the grace period; killing") != NULL,
      "the kill is reported");
  free(out);
  /* Grace 300 ms + 3000 ms margin; a second signal kills at once. */
  expect(twice ? took < 2000 : (took >= 3000 && took < 8000), "the kill came on time");
  assert_clean();
  return 0;
}

/* Hosts through a remote command template: {host} substitution, per-host slots, env. */
static int mode_remote(int cmdline) {
  char remote[256], script[512], ini[256], outf[256], tmpl[512], prog[512];
  snprintf(remote, sizeof(remote), "%s/fake-remote", g_dir);
  snprintf(outf, sizeof(outf), "%s/workers.txt", g_dir);
  snprintf(script, sizeof(script),
           "#!/bin/sh\nhost=$1; shift\necho \"REMOTE $host\" >> %s/remote.log\nexec \"$@\"\n",
           g_dir);
  write_file(remote, script, 1);
  snprintf(ini, sizeof(ini), "%s/job.ini", g_dir);
  write_file(ini, "[env]\nFOO = it's \"quoted\"\n", 0);
  /* {cmdline}: one shell-quoted word, as ssh would pass it to the remote shell. */
  if (cmdline)
    snprintf(tmpl, sizeof(tmpl), "sh -c {cmdline} {host}");
  else
    snprintf(tmpl, sizeof(tmpl), "%s {host}", remote);
  snprintf(prog, sizeof(prog), "echo \"W node=$BAGUA_NODE_ID rank=$RANK FOO=$FOO arg=$1\" >> %s",
           outf);
  int rc = lu_wait(
      start((char *[]){"--config", ini, "--hosts", "nodeA:1,nodeB:2", "--rdzv-host", "127.0.0.1",
                       "--remote-cmd", tmpl, "--", "sh", "-c", prog, "x", "two  spaces 'q'", NULL}),
      30000);
  expect(rc == 0, "exit 0");
  const char *want[] = {"W node=nodeA rank=0 FOO=it's \"quoted\" arg=two  spaces 'q'",
                        "W node=nodeB rank=0 FOO=it's \"quoted\" arg=two  spaces 'q'",
                        "W node=nodeB rank=1 FOO=it's \"quoted\" arg=two  spaces 'q'"};
  for (int i = 0; i < 3; i++)
    if (count_lines(outf, want[i]) != 1) {
      lu_dump(outf);
      expect(0, want[i]);
    }
  if (!cmdline) {
    char log[256];
    snprintf(log, sizeof(log), "%s/remote.log", g_dir);
    expect(count_lines(log, "REMOTE nodeA") == 1 && count_lines(log, "REMOTE nodeB") == 1,
           "one remote command per host");
  }
  assert_clean();
  return 0;
}

/*
 * A remote command template ("FAKE-SSH {host} {cmdline}") whose script is like ssh, which stays
 * alive with the command line among its arguments, and the remote shell, which runs it as a
 * child: the script does not exec. Like another host, it starts from an empty environment
 * (the marker aside): what the workers get came through ssh, on the command line or stdin.
 */
static void fake_ssh(char *tmpl, size_t len) {
  char remote[256];
  snprintf(remote, sizeof(remote), "%s/fake-ssh", g_dir);
  write_file(remote,
             "#!/bin/sh\nenv -i PATH=\"$PATH\" BAGUA_TEST_MARKER=\"$BAGUA_TEST_MARKER\" "
             "/bin/sh -c \"$2\"; exit $?\n",
             1);
  snprintf(tmpl, len, "%s {host} {cmdline}", remote);
}

/*
 * [env] values are secrets as far as the launcher knows: a remote agent gets them on its stdin
 * (--env-stdin), so no command line on either side shows them, neither the remote command's
 * nor the shell's that runs it ("sh -c {cmdline}" as sshd would), while the workers see them.
 */
static int mode_secret_env(void) {
  char ini[256], outf[256], prog[1024], started[256], stop[256], secret[64], entry[96];
  snprintf(outf, sizeof(outf), "%s/workers.txt", g_dir);
  snprintf(started, sizeof(started), "%s/started", g_dir);
  snprintf(stop, sizeof(stop), "%s/stop", g_dir);
  lu_unique("s3cr3t", secret, sizeof(secret));
  snprintf(entry, sizeof(entry), "SECRET=%s", secret);
  snprintf(ini, sizeof(ini), "%s/job.ini", g_dir);
  char text[256];
  snprintf(text, sizeof(text), "[env]\nSECRET = %s\n", secret);
  write_file(ini, text, 0);
  /* -x NAME travels the same way (NAME=VALUE would show VALUE on bagua-launch's own command
   * line, which is why a secret is exported and named). */
  char xsecret[64], xarg[96];
  lu_unique("xs3cr3t", xsecret, sizeof(xsecret));
  snprintf(xarg, sizeof(xarg), "XTOKEN=%s", xsecret);
  g_extra_env[g_extra_env_n++] = xarg;
  snprintf(prog, sizeof(prog),
           "touch %s; while [ ! -e %s ]; do sleep 0.05; done; echo \"W SECRET=$SECRET "
           "XTOKEN=$XTOKEN\" >> %s",
           started, stop, outf);
  char tmpl[320];
  fake_ssh(tmpl, sizeof(tmpl));
  pid_t pid = start((char *[]){"--config", ini, "--hosts", "nodeA:1", "--rdzv-host", "127.0.0.1",
                               "--remote-cmd", tmpl, "-x", "XTOKEN", "--", "sh", "-c", prog, NULL});
  expect(lu_wait_file(started, 20000), "the remote worker started");
  expect(lu_count_marked(entry) >= 1, "the worker's environment has the [env] variable");
  /* The launcher has it too (the test exported it there); the worker's line is below. */
  expect(lu_count_marked(xarg) >= 2, "the worker's environment has the -x variable");
  expect(lu_count_procs(secret) == 0, "no command line shows the [env] value");
  expect(lu_count_procs(xsecret) == 0, "no command line shows the -x value");
  write_file(stop, "", 0);
  expect(lu_wait(pid, 20000) == 0, "exit 0");
  char want[192];
  snprintf(want, sizeof(want), "W SECRET=%s XTOKEN=%s", secret, xsecret);
  expect(count_lines(outf, want) == 1, "the worker printed the value");
  assert_clean();
  return 0;
}

/* 2 * `n` random hex digits into `out` (2 * n + 1 bytes). */
static void random_hex(char *out, size_t n) {
  unsigned char b[64];
  FILE *f = fopen("/dev/urandom", "rb");
  if (!f || n > sizeof(b) || fread(b, 1, n, f) != n) TEST_FAIL("cannot read /dev/urandom");
  fclose(f);
  for (size_t i = 0; i < n; i++) snprintf(out + 2 * i, 3, "%02x", b[i]);
}

/*
 * The job secret, a registry secret (BAGUA_PARAM_SECRET in common/params.def), in bagua-launch's
 * environment, as a user exports it, and with `via_x` named by -x too (the documented advice):
 * a remote agent gets it on its stdin, never as a word of a command line (not even among the
 * settings' "env NAME=VALUE" words), and the remote worker has it. The fake ssh starts from an
 * empty environment, so the worker's value came through the remote command.
 */
static int mode_secret_job(int via_x) {
  char outf[256], prog[1024], started[256], stop[256], secret[65], entry[96], tmpl[320];
  snprintf(outf, sizeof(outf), "%s/workers.txt", g_dir);
  snprintf(started, sizeof(started), "%s/started", g_dir);
  snprintf(stop, sizeof(stop), "%s/stop", g_dir);
  random_hex(secret, 32);
  snprintf(entry, sizeof(entry), "BAGUA_JOB_SECRET=%s", secret);
  g_extra_env[g_extra_env_n++] = entry;
  snprintf(prog, sizeof(prog),
           "touch %s; while [ ! -e %s ]; do sleep 0.05; done; echo \"W JS=$BAGUA_JOB_SECRET\" "
           ">> %s",
           started, stop, outf);
  fake_ssh(tmpl, sizeof(tmpl));
  char *args[] = {"--hosts", "nodeA:1",          "--rdzv-host", "127.0.0.1", "--remote-cmd", tmpl,
                  "-x",      "BAGUA_JOB_SECRET", "--",          "sh",        "-c",           prog,
                  NULL};
  if (!via_x) memmove(&args[6], &args[8], 5 * sizeof(char *)); /* drops -x NAME */
  pid_t pid = start(args);
  expect(lu_wait_file(started, 20000), "the remote worker started");
  /* Every process is up: the launcher, the fake ssh and its shell, the agent, the worker. */
  expect(lu_count_procs(secret) == 0, "no command line shows the job secret");
  write_file(stop, "", 0);
  expect(lu_wait(pid, 20000) == 0, "exit 0");
  char want[128];
  snprintf(want, sizeof(want), "W JS=%s\n", secret);
  if (count_lines(outf, want) != 1) {
    lu_dump(outf);
    expect(0, "the remote worker has the job secret");
  }
  char *out = output();
  expect(strstr(out, "--env-stdin") != NULL, "the remote agent read its stdin");
  expect(strstr(out, secret) == NULL, "the launcher's output does not show the job secret");
  free(out);
  assert_clean();
  return 0;
}

/* Counts the entries of `dir` whose name starts with `prefix`. */
static int count_entries(const char *dir, const char *prefix) {
  char cmd[512];
  snprintf(cmd, sizeof(cmd), "ls -a %s | grep -c '^%s' > %s/count.txt", dir, prefix, dir);
  if (system(cmd) < 0) return -1;
  snprintf(cmd, sizeof(cmd), "%s/count.txt", dir);
  char *t = lu_read(cmd);
  int n = t ? atoi(t) : -1;
  free(t);
  return n;
}

/*
 * Fail fast: a host whose remote command exits before its agent registers (ssh:
 * "Could not resolve hostname") fails a job that needs it at once, exit 3, with the host's own
 * words, instead of waiting for the rendezvous timeout; an elastic job that still has MIN
 * nodes goes on without it.
 */
static int mode_start_failure(int elastic) {
  char failssh[256], script[256], tmpl[300], tmpenv[192];
  /* The local agent is stopped as soon as the other host fails, often before it could remove
   * its private directory. Leaving it (and failing the other host only after half a second,
   * when the local agent has made it) makes the launcher's sweep and its log line part of
   * every run, which must still end with the verdict. The elastic job gets no such wait: it
   * would succeed before the other host failed. */
  snprintf(tmpenv, sizeof(tmpenv), "TMPDIR=%s", g_dir);
  g_extra_env[g_extra_env_n++] = tmpenv;
  g_extra_env[g_extra_env_n++] = "BAGUA_FAKE_LEAVE_DIR=1";
  snprintf(failssh, sizeof(failssh), "%s/fail-ssh", g_dir);
  snprintf(script, sizeof(script),
           "#!/bin/sh\nsleep %s\necho \"ssh: Could not resolve hostname $1: Name or service "
           "not known\" >&2\nexit 255\n",
           elastic ? "0" : "0.5");
  write_file(failssh, script, 1);
  snprintf(tmpl, sizeof(tmpl), "%s {host}", failssh);
  long long t0 = lu_now_ms();
  int rc = lu_wait(
      start((char *[]){"--hosts", "nohost:1,localhost:1", "--rdzv-host", "127.0.0.1", "--nnodes",
                       elastic ? "1:2" : "2", "--rdzv-timeout", "600", "--grace-ms", "500",
                       "--remote-cmd", tmpl, "--", "sh", "-c", elastic ? "true" : sleeper(), NULL}),
      30000);
  long long took = lu_now_ms() - t0;
  char *out = output();
  if (elastic) {
    expect(rc == 0, "the elastic job went on and succeeded");
    expect(strstr(out,
                  "the agent for host nohost could not be started (exit code 255: ssh: Could "
                  "not resolve hostname nohost: Name or service not known); the elastic "
                  "job goes on without it") != NULL,
           "the failure is reported with ssh's words");
  } else {
    expect(rc == 3, "exit 3");
    expect(took < 15000, "at once, not after the rendezvous timeout");
    char *last = lu_last_line(out);
    expect(strstr(last,
                  "failed: the agent for host nohost could not be started (exit code 255: "
                  "ssh: Could not resolve hostname nohost: Name or service not known)") != NULL,
           "the last line names the host and ssh's error");
    free(last);
  }
  expect(count_entries(g_dir, "bagua-agent\\.") == 0, "the local agent's directory was removed");
  free(out);
  assert_clean();
  return 0;
}

/*
 * An agent that could not remove its private directory ($TMPDIR/bagua-agent.<node>.
 * <pid>.XXXXXX: killed with SIGKILL) has it removed by the launcher once it was reaped, and
 * only its own: a live pid's directory, or one of a pid the launcher never started, stays.
 */
static int mode_agent_tmpdir(void) {
  char tmpenv[192], live[256], other[256];
  /* (The elastic job must not finish first: it has no half-second wait.) */
  snprintf(tmpenv, sizeof(tmpenv), "TMPDIR=%s", g_dir);
  g_extra_env[g_extra_env_n++] = tmpenv;
  g_extra_env[g_extra_env_n++] = "BAGUA_FAKE_LEAVE_DIR=1";
  snprintf(live, sizeof(live), "%s/bagua-agent.localhost-0.%d.abcdef", g_dir, (int)getpid());
  snprintf(other, sizeof(other), "%s/bagua-agent.localhost-0.%d.abcdef", g_dir, 999999999);
  expect(mkdir(live, 0700) == 0 && mkdir(other, 0700) == 0, "decoy directories");
  int rc =
      lu_wait(start((char *[]){"--hosts", "localhost:1,localhost:1", "--", "true", NULL}), 30000);
  expect(rc == 0, "exit 0");
  expect(count_entries(g_dir, "bagua-agent\\.") == 2, "the agents' directories were removed");
  struct stat st;
  expect(stat(live, &st) == 0 && stat(other, &st) == 0, "the other directories were kept");
  rmdir(live);
  rmdir(other);
  assert_clean();
  return 0;
}

/* Two agents on this machine (a host listed twice): distinct node ids. */
static int mode_local_multi(void) {
  char outf[256], prog[512];
  snprintf(outf, sizeof(outf), "%s/workers.txt", g_dir);
  snprintf(prog, sizeof(prog), "echo \"W $BAGUA_NODE_ID $RANK\" >> %s", outf);
  int rc = lu_wait(
      start((char *[]){"--hosts", "localhost:1,localhost:2", "--", "sh", "-c", prog, NULL}), 30000);
  expect(rc == 0, "exit 0");
  expect(count_lines(outf, "W localhost-0 0") == 1 && count_lines(outf, "W localhost-1 0") == 1 &&
             count_lines(outf, "W localhost-1 1") == 1,
         "workers of both agents ran");
  assert_clean();
  return 0;
}

/* The private etcd dies under a running job: the launcher stops the agents and fails. */
static int mode_etcd_dies(void) {
  pid_t pid = start(
      (char *[]){"--nproc-per-node", "2", "--grace-ms", "500", "--", "sh", "-c", sleeper(), NULL});
  wait_workers(2);
  char *out = output(), dir[128], needle[160];
  expect(lu_find_etcd_dir(out, dir, sizeof(dir)), "the etcd directory is logged");
  free(out);
  snprintf(needle, sizeof(needle), "--data-dir %s/data", dir);
  expect(lu_count_procs(needle) == 1, "etcd is running");
  /* Kill etcd (found by its data directory). */
  pid_t etcd = lu_find_proc(needle);
  expect(etcd > 0 && kill(etcd, SIGKILL) == 0, "etcd killed");
  int rc = lu_wait(pid, 20000);
  expect(rc != 0 && rc != -1, "the job fails");
  out = output();
  expect(strstr(out, "the private etcd exited; stopping the agents") != NULL, "reported");
  free(out);
  assert_clean();
  return 0;
}

/* An agent that reports a usage error makes the launcher stop the others at once. */
static int mode_usage_agent(void) {
  char agent[256], script[512];
  snprintf(agent, sizeof(agent), "%s/usage-agent", g_dir);
  snprintf(script, sizeof(script),
           "#!/bin/sh\ncase \"$*\" in *\"--node-id localhost-0 \"*) echo 'agent: bad flag' >&2; "
           "exit 2;; esac\nexec sleep 60\n");
  write_file(agent, script, 1);
  long long t0 = lu_now_ms();
  int rc = lu_wait(
      start((char *[]){"--agent", agent, "--hosts", "localhost,localhost", "--", "true", NULL}),
      20000);
  long long took = lu_now_ms() - t0;
  expect(rc == 2, "exit 2");
  char *out = output();
  expect(strstr(out, "stopping the other agents after a usage error") != NULL, "reported");
  free(out);
  expect(took < 5000, "promptly");
  assert_clean();
  return 0;
}

/* --rdzv-endpoint of a running etcd: no private etcd, status read from there. */
static int mode_external(void) {
  etcd_fixture_t fx;
  etcd_fixture_start(&fx);
  char job[64];
  lu_unique("ext", job, sizeof(job));
  int rc = lu_wait(
      start((char *[]){"--rdzv-endpoint", fx.host_port, "--job-id", job, "--", "true", NULL}),
      30000);
  expect(rc == 0, "exit 0");
  char *out = output();
  expect(strstr(out, "/tmp/bagua-launch-") == NULL, "no private etcd");
  free(out);
  bagua__etcd_t *c;
  ASSERT_OK(bagua__etcd_create(fx.host_port, 5000, &c));
  char key[128];
  snprintf(key, sizeof(key), "/bagua/%s/status", job);
  bagua__etcd_kv_t kv;
  int found = 0;
  ASSERT_OK(bagua__etcd_get(c, key, &kv, &found, NULL));
  ASSERT_EQ(found, 1);
  expect(strstr(kv.value, "succeeded") != NULL, "the fake agent's status is in the given etcd");
  bagua__etcd_kv_clear(&kv);
  bagua__etcd_destroy(c);
  assert_clean();
  etcd_fixture_stop(&fx);
  return 0;
}

/* etcd that never becomes healthy: a signal during start-up leaves nothing behind. */
static int mode_startup_signal(void) {
  char fake_etcd[256], script[256];
  snprintf(fake_etcd, sizeof(fake_etcd), "%s/fake-etcd", g_dir);
  snprintf(script, sizeof(script), "#!/bin/sh\necho started > %s/w0.pid\nexec sleep 60\n", g_dir);
  write_file(fake_etcd, script, 1);
  pid_t pid = start((char *[]){"--etcd-bin", fake_etcd, "--", "true", NULL});
  wait_workers(1);
  kill(pid, SIGINT);
  int rc = lu_wait(pid, 20000);
  expect(rc == 130, "exit 130");
  char *out = output();
  expect(strstr(out, "received while starting etcd; nothing was started") != NULL, "reported");
  free(out);
  assert_clean();
  return 0;
}

/* An etcd binary that exits at once: three attempts, exit 3, nothing left. */
static int mode_etcd_fails(void) {
  int rc = lu_wait(start((char *[]){"--etcd-bin", "/bin/false", "--", "true", NULL}), 60000);
  expect(rc == 3, "exit 3");
  char *out = output();
  expect(strstr(out, "the private etcd exited during start-up three times") != NULL, "reported");
  expect(strstr(out, "FAKE-AGENT") == NULL, "no agent started");
  free(out);
  assert_clean();
  return 0;
}

int main(int argc, char **argv) {
  /* Run inside a Slurm allocation (a CI runner may be), the launcher would start agents
   * through srun: these tests start them locally. */
  unsetenv("SLURM_JOB_ID");
  unsetenv("SLURM_JOB_NODELIST");
  if (argc < 4) TEST_FAIL("usage: %s MODE LAUNCHER FAKE_AGENT", argv[0]);
  const char *mode = argv[1];
  g_launcher = argv[2];
  g_fake = argv[3];
  int needs_etcd = strcmp(mode, "etcd_fails") != 0 && strcmp(mode, "startup_signal") != 0;
  if (needs_etcd && !etcd_fixture_available())
    TEST_SKIP("%s not found; install the Debian package etcd-server", ETCD_FIXTURE_BIN);
  lu_mkdtemp(g_dir, sizeof(g_dir));
  snprintf(g_out, sizeof(g_out), "%s/launch.out", g_dir);
  int rc;
  if (strcmp(mode, "success") == 0)
    rc = mode_success(0);
  else if (strcmp(mode, "env_wins") == 0)
    rc = mode_success(1);
  else if (strcmp(mode, "failure") == 0)
    rc = mode_failure(0);
  else if (strcmp(mode, "worker_signal") == 0)
    rc = mode_failure(1);
  else if (strcmp(mode, "sigterm") == 0)
    rc = mode_signal(SIGTERM);
  else if (strcmp(mode, "sigint") == 0)
    rc = mode_signal(SIGINT);
  else if (strcmp(mode, "sighup") == 0)
    rc = mode_signal(SIGHUP);
  else if (strcmp(mode, "sigkill") == 0)
    rc = mode_sigkill();
  else if (strcmp(mode, "stubborn") == 0)
    rc = mode_stubborn(0);
  else if (strcmp(mode, "stubborn_twice") == 0)
    rc = mode_stubborn(1);
  else if (strcmp(mode, "remote") == 0)
    rc = mode_remote(0);
  else if (strcmp(mode, "remote_cmdline") == 0)
    rc = mode_remote(1);
  else if (strcmp(mode, "start_failure") == 0)
    rc = mode_start_failure(0);
  else if (strcmp(mode, "start_failure_elastic") == 0)
    rc = mode_start_failure(1);
  else if (strcmp(mode, "agent_tmpdir") == 0)
    rc = mode_agent_tmpdir();
  else if (strcmp(mode, "secret_env") == 0)
    rc = mode_secret_env();
  else if (strcmp(mode, "secret_job_env") == 0)
    rc = mode_secret_job(0);
  else if (strcmp(mode, "secret_job_x") == 0)
    rc = mode_secret_job(1);
  else if (strcmp(mode, "local_multi") == 0)
    rc = mode_local_multi();
  else if (strcmp(mode, "etcd_dies") == 0)
    rc = mode_etcd_dies();
  else if (strcmp(mode, "usage_agent") == 0)
    rc = mode_usage_agent();
  else if (strcmp(mode, "external") == 0)
    rc = mode_external();
  else if (strcmp(mode, "startup_signal") == 0)
    rc = mode_startup_signal();
  else if (strcmp(mode, "etcd_fails") == 0)
    rc = mode_etcd_fails();
  else
    TEST_FAIL("unknown mode %s", mode);
  lu_rmtree(g_dir);
  return rc;
}
