/*
 * Internal logging. Each line reads `host:pid [rank] SUBSYS message`.
 *
 * BAGUA_WARN always prints and also becomes this thread's bagua_last_error(). BAGUA_INFO and
 * BAGUA_TRACE test the level and subsystem mask before evaluating their arguments, so they
 * cost one load and a branch when disabled.
 */
#ifndef BAGUA_COMMON_LOG_H
#define BAGUA_COMMON_LOG_H

typedef enum { BAGUA_LOG_WARN = 0, BAGUA_LOG_INFO = 1, BAGUA_LOG_TRACE = 2 } bagua__log_level_t;

typedef enum {
  BAGUA_SUBSYS_INIT = 1 << 0,
  BAGUA_SUBSYS_COMM = 1 << 1,
  BAGUA_SUBSYS_NET = 1 << 2,
  BAGUA_SUBSYS_KERNEL = 1 << 3,
  BAGUA_SUBSYS_LOADER = 1 << 4,
  BAGUA_SUBSYS_AGENT = 1 << 5,
  BAGUA_SUBSYS_ETCD = 1 << 6,
  BAGUA_SUBSYS_LAUNCH = 1 << 7,
  BAGUA_SUBSYS_ENV = 1 << 8,
  BAGUA_SUBSYS_ALL = 0x1ff
} bagua__subsys_t;

extern int bagua__log_level;     /* -1 until initialised */
extern unsigned bagua__log_mask; /* enabled subsystems for INFO/TRACE */

void bagua__log_init(void);
void bagua__log_reload(void);
/* Rank shown in the line prefix; -1 shows nothing. */
void bagua__log_set_rank(int rank);
void bagua__log(int level, unsigned subsys, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static inline int bagua__log_enabled(int level, unsigned subsys) {
  if (bagua__log_level < 0) bagua__log_init();
  return level <= bagua__log_level && (subsys & bagua__log_mask);
}

#define BAGUA_WARN(...) \
  bagua__log(BAGUA_LOG_WARN, BAGUA_SUBSYS_ALL, __FILE__, __LINE__, __VA_ARGS__)
#define BAGUA_INFO(sub, ...)                                              \
  do {                                                                    \
    if (bagua__log_enabled(BAGUA_LOG_INFO, (sub)))                        \
      bagua__log(BAGUA_LOG_INFO, (sub), __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#ifdef BAGUA_ENABLE_TRACE
#define BAGUA_TRACE(sub, ...)                                              \
  do {                                                                     \
    if (bagua__log_enabled(BAGUA_LOG_TRACE, (sub)))                        \
      bagua__log(BAGUA_LOG_TRACE, (sub), __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#else
#define BAGUA_TRACE(sub, ...) \
  do {                        \
  } while (0)
#endif

#endif
