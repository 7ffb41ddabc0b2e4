/*
 * Error-propagation macros in the NCCL style: each failing CHECK logs "-> status" at INFO with
 * file and line, so a failure at INFO level reads as a backtrace, and returns or jumps.
 */
#ifndef BAGUA_COMMON_CHECK_H
#define BAGUA_COMMON_CHECK_H

#include <errno.h>
#include <string.h>

#include "bagua/error.h"
#include "log.h"

#define BAGUA_CHECK(call)                                                                         \
  do {                                                                                            \
    bagua_status_t bagua__st = (call);                                                            \
    if (bagua__st != BAGUA_OK) {                                                                  \
      BAGUA_INFO(BAGUA_SUBSYS_ALL, "%s:%d -> %s", __FILE__, __LINE__, bagua_err_name(bagua__st)); \
      return bagua__st;                                                                           \
    }                                                                                             \
  } while (0)

/* Stores the status in `st` and jumps to `label` on failure. */
#define BAGUA_CHECK_GOTO(call, st, label)                                                  \
  do {                                                                                     \
    (st) = (call);                                                                         \
    if ((st) != BAGUA_OK) {                                                                \
      BAGUA_INFO(BAGUA_SUBSYS_ALL, "%s:%d -> %s", __FILE__, __LINE__, bagua_err_name(st)); \
      goto label;                                                                          \
    }                                                                                      \
  } while (0)

/* Keeps the first error in `st` while cleanup continues. */
#define BAGUA_CHECK_IGNORE(call, st)                                   \
  do {                                                                 \
    bagua_status_t bagua__st2 = (call);                                \
    if (bagua__st2 != BAGUA_OK && (st) == BAGUA_OK) (st) = bagua__st2; \
  } while (0)

/* Retries a system call on EINTR; on failure logs errno and returns BAGUA_ERR_SYSTEM. */
#define BAGUA_SYS_CHECK(call, what)                         \
  do {                                                      \
    int bagua__rc;                                          \
    do {                                                    \
      bagua__rc = (int)(call);                              \
    } while (bagua__rc == -1 && errno == EINTR);            \
    if (bagua__rc == -1) {                                  \
      BAGUA_WARN("%s failed: %s", (what), strerror(errno)); \
      return BAGUA_ERR_SYSTEM;                              \
    }                                                       \
  } while (0)

/* Allocation helper: zeroed, logs and returns BAGUA_ERR_NO_MEMORY on failure. */
#define BAGUA_CALLOC(ptr, n)                                                               \
  do {                                                                                     \
    (ptr) = calloc((n) ? (size_t)(n) : 1, sizeof(*(ptr)));                                 \
    if ((ptr) == NULL) {                                                                   \
      BAGUA_WARN("out of memory allocating %zu x %zu bytes", (size_t)(n), sizeof(*(ptr))); \
      return BAGUA_ERR_NO_MEMORY;                                                          \
    }                                                                                      \
  } while (0)

#endif
