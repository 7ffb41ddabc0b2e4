#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "bagua/error.h"
#include "common/time.h"
#include "params.h"

int bagua__log_level = -1;
unsigned bagua__log_mask = BAGUA_SUBSYS_ALL;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *g_out;
static char g_host[64];
static int g_time;              /* BAGUA_LOG_TIME: lines start with the UTC time */
static _Atomic int g_rank = -1; /* set by the training thread, read by every logger */
static __thread char t_last_error[512];

static const struct {
  const char *name;
  unsigned bit;
} k_subsys[] = {{"INIT", BAGUA_SUBSYS_INIT},     {"COMM", BAGUA_SUBSYS_COMM},
                {"NET", BAGUA_SUBSYS_NET},       {"KERNEL", BAGUA_SUBSYS_KERNEL},
                {"LOADER", BAGUA_SUBSYS_LOADER}, {"AGENT", BAGUA_SUBSYS_AGENT},
                {"ETCD", BAGUA_SUBSYS_ETCD},     {"LAUNCH", BAGUA_SUBSYS_LAUNCH},
                {"ENV", BAGUA_SUBSYS_ENV},       {"ALL", BAGUA_SUBSYS_ALL}};

static unsigned parse_mask(const char *s) {
  int negate = 0;
  unsigned mask = 0;
  if (*s == '^') {
    negate = 1;
    s++;
  }
  while (*s) {
    size_t len = strcspn(s, ",");
    for (size_t i = 0; i < sizeof(k_subsys) / sizeof(k_subsys[0]); i++)
      if (strlen(k_subsys[i].name) == len && strncasecmp(k_subsys[i].name, s, len) == 0)
        mask |= k_subsys[i].bit;
    s += len;
    if (*s == ',') s++;
  }
  return negate ? (BAGUA_SUBSYS_ALL & ~mask) : mask;
}

/* Expands %h and %p in the BAGUA_DEBUG_FILE pattern. */
static void expand_path(const char *pat, char *out, size_t len) {
  size_t o = 0;
  for (; *pat && o + 1 < len; pat++) {
    if (pat[0] == '%' && (pat[1] == 'h' || pat[1] == 'p')) {
      int n = pat[1] == 'h' ? snprintf(out + o, len - o, "%s", g_host)
                            : snprintf(out + o, len - o, "%d", (int)getpid());
      if (n > 0) o += (size_t)n;
      if (o >= len) o = len - 1;
      pat++;
    } else {
      out[o++] = *pat;
    }
  }
  out[o] = '\0';
}

static void init_locked(void) {
  const char *lvl = bagua__param_str(BAGUA_P_DEBUG);
  int level = BAGUA_LOG_WARN;
  if (strcasecmp(lvl, "INFO") == 0) level = BAGUA_LOG_INFO;
  if (strcasecmp(lvl, "TRACE") == 0) level = BAGUA_LOG_TRACE;
  bagua__log_mask = parse_mask(bagua__param_str(BAGUA_P_DEBUG_SUBSYS));
  g_time = (int)bagua__param_int(BAGUA_P_LOG_TIME);
  if (gethostname(g_host, sizeof(g_host)) != 0) snprintf(g_host, sizeof(g_host), "unknown");
  g_host[sizeof(g_host) - 1] = '\0';
  if (g_out && g_out != stderr) fclose(g_out);
  g_out = stderr;
  const char *file = bagua__param_str(BAGUA_P_DEBUG_FILE);
  if (file[0]) {
    char path[512];
    expand_path(file, path, sizeof(path));
    FILE *f = fopen(path, "a");
    if (f) {
      setvbuf(f, NULL, _IOLBF, 0);
      g_out = f;
    }
  }
  __atomic_store_n(&bagua__log_level, level, __ATOMIC_RELEASE);
}

void bagua__log_init(void) {
  pthread_mutex_lock(&g_lock);
  if (bagua__log_level < 0) init_locked();
  pthread_mutex_unlock(&g_lock);
}

void bagua__log_reload(void) {
  pthread_mutex_lock(&g_lock);
  init_locked();
  pthread_mutex_unlock(&g_lock);
}

void bagua__log_set_rank(int rank) {
  g_rank = rank;
}

static const char *subsys_name(int level, unsigned subsys) {
  /* Lines for every subsystem (the CHECK macros' "-> status" trail) carry their level. */
  if (subsys == BAGUA_SUBSYS_ALL) return level == BAGUA_LOG_TRACE ? "TRACE" : "INFO";
  for (size_t i = 0; i < sizeof(k_subsys) / sizeof(k_subsys[0]); i++)
    if (k_subsys[i].bit == subsys) return k_subsys[i].name;
  return "?";
}

void bagua__log(int level, unsigned subsys, const char *file, int line, const char *fmt, ...) {
  if (bagua__log_level < 0) bagua__log_init();
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (level == BAGUA_LOG_WARN) snprintf(t_last_error, sizeof(t_last_error), "%s", msg);
  char rank[24] = "";
  int r = g_rank;
  if (r >= 0) snprintf(rank, sizeof(rank), " [%d]", r);
  /* The build maps the source root away (-fmacro-prefix-map), so `file` reads
   * comm/elastic/elastic.c; a path that still starts at / came from elsewhere: keep it. */
  const char *base = file;
  char when[40] = "";
  if (g_time) {
    bagua__format_wall_ms(bagua__wall_ms(), when, sizeof(when) - 1);
    strcat(when, " ");
  }
  pthread_mutex_lock(&g_lock);
  if (level == BAGUA_LOG_WARN)
    fprintf(g_out, "%s%s:%d%s WARN %s (%s:%d)\n", when, g_host, (int)getpid(), rank, msg, base,
            line);
  else
    fprintf(g_out, "%s%s:%d%s %s %s\n", when, g_host, (int)getpid(), rank,
            subsys_name(level, subsys), msg);
  pthread_mutex_unlock(&g_lock);
}

const char *bagua_last_error(void) {
  return t_last_error;
}
