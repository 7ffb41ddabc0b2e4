/*
 * Bagua-C: the one error enum of the library.
 *
 * Every public function that can fail returns a bagua_status_t. BAGUA_OK is zero, every
 * error is a positive code. bagua_strerror() returns a static string that never needs
 * freeing; bagua_last_error() returns the text of the most recent warning logged by the
 * calling thread (a thread-local buffer owned by the library, valid until the next warning
 * on the same thread).
 */
#ifndef BAGUA_ERROR_H
#define BAGUA_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define BAGUA_EXTERN __attribute__((visibility("default")))
/* Marks an old name kept for one release; the compiler warns and names the replacement. */
#define BAGUA_DEPRECATED(use) __attribute__((deprecated("use " use)))
#else
#define BAGUA_EXTERN
#define BAGUA_DEPRECATED(use)
#endif

/* XX(NAME, value, text). The text says what happened and where to look next. */
#define BAGUA_ERROR_MAP(XX)                                                                \
  XX(OK, 0, "success")                                                                     \
  XX(SYSTEM, 1, "system call failed (run with BAGUA_DEBUG=INFO for details)")              \
  XX(NO_MEMORY, 2, "out of memory")                                                        \
  XX(INVALID_ARG, 3, "invalid argument (the warning log names the argument)")              \
  XX(INVALID_USAGE, 4, "invalid usage of the API (the warning log says which call)")       \
  XX(REMOTE, 5, "a remote peer failed or closed its connection")                           \
  XX(TIMEOUT, 6, "operation timed out (see BAGUA_COMM_TIMEOUT_MS)")                        \
  XX(ABORTED, 7, "operation aborted (communicator aborted by another thread or an error)") \
  XX(PROTOCOL, 8, "protocol error: bad magic, version, job id or header from a peer")      \
  XX(IN_PROGRESS, 9, "operation still in progress")                                        \
  XX(CUDA, 10, "CUDA error (run with BAGUA_DEBUG=INFO for details)")                       \
  XX(NCCL, 11, "NCCL error (run with BAGUA_DEBUG=INFO and NCCL_DEBUG=INFO for details)")   \
  XX(CURL, 12, "HTTP client error talking to etcd")                                        \
  XX(ETCD, 13, "etcd returned an error or unexpected content")                             \
  XX(NOT_SUPPORTED, 14, "operation not supported by this build or transport")              \
  XX(INTERNAL, 15, "internal error (a bug: please report it with BAGUA_DEBUG=TRACE output)")

typedef enum {
#define BAGUA__ERR_ENUM(name, val, text) BAGUA_ERR_##name = val,
  BAGUA_ERROR_MAP(BAGUA__ERR_ENUM)
#undef BAGUA__ERR_ENUM
      BAGUA_ERR__COUNT
} bagua_status_t;

#define BAGUA_OK BAGUA_ERR_OK

/* Static description of a status code; unknown codes give "unknown error". */
BAGUA_EXTERN const char *bagua_strerror(bagua_status_t st);
/* Short symbolic name, e.g. "BAGUA_ERR_TIMEOUT". */
BAGUA_EXTERN const char *bagua_err_name(bagua_status_t st);
/* Text of the last warning logged by this thread, "" if none. Owned by the library. */
BAGUA_EXTERN const char *bagua_last_error(void);

#ifdef __cplusplus
}
#endif
#endif
