/*
 * bagua-agent entry point: parse the command line, route the handled signals to a signalfd
 * before any thread exists (so every thread inherits the blocked mask and no signal can kill
 * the agent behind the loop's back), and run.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>

#include "agent.h"

int main(int argc, char **argv) {
  bagua__agent_config_t cfg;
  int rc = bagua__agent_parse_cli(argc, argv, &cfg);
  if (rc == 1) return 0;
  if (rc != 0) return BAGUA_AGENT_EXIT_USAGE;

  sigset_t set;
  sigemptyset(&set);
  const int sigs[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
  for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) sigaddset(&set, sigs[i]);
  if (sigprocmask(SIG_BLOCK, &set, NULL) != 0) {
    bagua__agent_say("sigprocmask failed");
    return 1;
  }
  /* A console that went away must not kill the agent (and with it the job's workers). */
  signal(SIGPIPE, SIG_IGN);
  int sigfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  /* A second signalfd of the signals that end the agent is only polled, never read: the etcd
   * client ends a request as soon as one of them is pending, and the loop reads it from the
   * first descriptor right after. SIGCHLD and the forwarded signals stay out of it, so they
   * never cut a request short. */
  sigset_t ending;
  sigemptyset(&ending);
  const int ends[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
  for (size_t i = 0; i < sizeof(ends) / sizeof(ends[0]); i++) sigaddset(&ending, ends[i]);
  int endfd = signalfd(-1, &ending, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sigfd < 0 || endfd < 0) {
    bagua__agent_say("signalfd failed");
    return 1;
  }
  return bagua__agent_run(&cfg, sigfd, endfd);
}
