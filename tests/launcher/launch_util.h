/*
 * Helpers for the launcher's process-level tests: run bagua-launch with its output in a file,
 * wait with deadlines, and look for anything a run left behind (processes, directories).
 * Every wait polls a condition against a deadline; none is a fixed sleep.
 */
#ifndef BAGUA_TESTS_LAUNCH_UTIL_H
#define BAGUA_TESTS_LAUNCH_UTIL_H

#include <stddef.h>
#include <sys/types.h>

/* Monotonic milliseconds. */
long long lu_now_ms(void);

/*
 * Starts `argv` with stdout and stderr appended to `out_path` and stdin from /dev/null.
 * `env` is a NULL-terminated list of "NAME=VALUE" to set (or "NAME=" with an empty value;
 * "-NAME" unsets NAME) in the child only. Returns the pid.
 */
pid_t lu_spawn(char *const argv[], char *const env[], const char *out_path);

/* Waits up to `timeout_ms` for `pid`. Returns its exit status (128+N for signal N), or -1
 * after killing it with SIGKILL when it did not exit in time. */
int lu_wait(pid_t pid, int timeout_ms);

/* Runs to completion (lu_spawn + lu_wait). */
int lu_run(char *const argv[], char *const env[], const char *out_path, int timeout_ms);

/* The file's content (NUL-terminated, malloc'ed), or NULL. */
char *lu_read(const char *path);

/* The last non-empty line of `text` (malloc'ed). */
char *lu_last_line(const char *text);

/* Number of processes (not zombies) whose command line contains `needle`, this one excluded. */
int lu_count_procs(const char *needle);

/* Number of processes (not zombies) whose environment contains the string `entry`
 * ("NAME=VALUE"): tests mark everything a run starts with a unique variable. */
int lu_count_marked(const char *entry);

/* Polls until lu_count_marked(entry) is 0; returns 1 when it became 0 within the time. */
int lu_wait_no_marked(const char *entry, int timeout_ms);

/* The pid of a process whose command line contains `needle` (the first found), or -1. */
pid_t lu_find_proc(const char *needle);

/* Polls until lu_count_procs(needle) is 0; returns 1 when it became 0 within the time. */
int lu_wait_no_procs(const char *needle, int timeout_ms);

/* Polls until `path` exists; returns 1 when it did within the time. */
int lu_wait_file(const char *path, int timeout_ms);

/* Polls until `path` no longer exists; returns 1 when it was gone within the time. */
int lu_wait_gone(const char *path, int timeout_ms);

/* Copies the private etcd's directory that bagua-launch reported at INFO level in `text`
 * ("... (dir /tmp/bagua-launch-XXXXXX)") into out; returns 1 when found. */
int lu_find_etcd_dir(const char *text, char *out, size_t len);

/* A unique string for job ids and file names of one test run. */
void lu_unique(const char *prefix, char *out, size_t len);

/*
 * Starts bagua-launch (`launcher`) with `prefix` (NULL-terminated, may be NULL) and then `args`
 * as its arguments, output appended to `out_path`, in the environment every launcher test
 * uses: a fresh BAGUA_TEST_MARKER=<tag-unique> (written to `marker`, which must outlive the
 * child's start, so tests can find the job's processes), launcher debug logging, and no
 * inherited BAGUA_RDZV_ENDPOINT or BAGUA_JOB_ID; `extra_env` (n_extra entries, lu_spawn's
 * form) follows. Returns the pid.
 */
pid_t lu_start_launcher(const char *launcher, char *const *prefix, char *const *args,
                        const char *tag, char *marker, size_t marker_len, char *const *extra_env,
                        int n_extra, const char *out_path);

/* Creates a fresh temporary directory (removed by lu_rmtree). */
void lu_mkdtemp(char *out, size_t len);
void lu_rmtree(const char *dir);

/* Prints the file to stderr (failure diagnostics). */
void lu_dump(const char *path);

#endif
