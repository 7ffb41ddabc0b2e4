/* The live progress line (progress.h). */
#include "launch_progress.h"

#include <string.h>

#include "status.h"

static struct {
  int64_t last_ms; /* monotonic time of the last refresh */
  int shown;       /* a line is on the terminal */
  char text[128];  /* the starting line shown, "" for none */
} g_prog;

int bagua__launch_progress_line(bagua__etcd_t *c, const char *job, char *out, size_t len) {
  bagua__launch_job_t j;
  if (bagua__launch_read_job(c, job, &j) != BAGUA_OK) return -1;
  size_t o = 0;
#define ADD(...)                                                    \
  do {                                                              \
    int n_ = snprintf(out + o, len > o ? len - o : 0, __VA_ARGS__); \
    if (n_ > 0) o += (size_t)n_;                                    \
  } while (0)
  out[0] = '\0';
  if (!j.has_round) {
    ADD("job %s: %s, %zu node(s) registered", job, bagua__launch_job_state(&j), j.nnodes);
  } else {
    ADD("job %s round %lld: %d node(s), world %d", job, (long long)j.round.round, j.round.nmembers,
        j.round.world_size);
    if (j.round.restart_count) ADD(", %d restart(s)", j.round.restart_count);
    if (j.nreporting) {
      ADD(", step %lld", (long long)j.min_step);
      if (j.total_steps) ADD("/%lld", (long long)j.total_steps);
      ADD(", %.2f steps/s", j.rate);
      if (j.total_steps > j.min_step && j.rate > 0) {
        long long s = (long long)((double)(j.total_steps - j.min_step) / j.rate + 0.5);
        if (s >= 3600)
          ADD(", ETA %lldh%02lldm", s / 3600, (s / 60) % 60);
        else if (s >= 60)
          ADD(", ETA %lldm%02llds", s / 60, s % 60);
        else
          ADD(", ETA %llds", s);
      }
    }
  }
#undef ADD
  bagua__launch_job_clear(&j);
  return 0;
}

void bagua__launch_progress_poll(bagua__etcd_t *c, const char *job, int64_t now_ms, FILE *tty) {
  if (!tty || !c) return;
  if (g_prog.last_ms && now_ms - g_prog.last_ms < LAUNCH_PROGRESS_MS) return;
  g_prog.last_ms = now_ms;
  char line[512];
  if (bagua__launch_progress_line(c, job, line, sizeof(line)) != 0) return;
  /* "\r" back to column 0, the line, then erase what a longer earlier line left. */
  fprintf(tty, "\r%s\033[K", line);
  fflush(tty);
  g_prog.text[0] = '\0';
  g_prog.shown = 1;
}

void bagua__launch_progress_starting(FILE *tty, int started, int registered, int total) {
  if (!tty) return;
  char line[sizeof(g_prog.text)];
  snprintf(line, sizeof(line), "starting agents: %d/%d started, %d/%d registered", started, total,
           registered, total);
  /* The supervisor calls this on every turn of its loop: the terminal gets a write only when
   * the counts changed (or the line was erased). */
  if (g_prog.shown && strcmp(line, g_prog.text) == 0) return;
  fprintf(tty, "\r%s\033[K", line);
  fflush(tty);
  snprintf(g_prog.text, sizeof(g_prog.text), "%s", line);
  g_prog.shown = 1;
}

void bagua__launch_progress_clear(FILE *tty) {
  g_prog.text[0] = '\0';
  if (!tty || !g_prog.shown) return;
  fputs("\r\033[K", tty);
  fflush(tty);
  g_prog.shown = 0;
}
