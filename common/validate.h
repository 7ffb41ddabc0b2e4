/*
 * Validators for the values a person gives bagua-launch and bagua-agent: ids (job id, node
 * id), etcd endpoints (HOST:PORT and http:// URLs), node counts (N or MIN:MAX), integers in
 * bounds and words from a list. Both tools call these, so a value one accepts the other
 * accepts too, and both explain a refusal with the same words.
 *
 * Every check returns BAGUA_OK, or BAGUA_ERR_INVALID_ARG with "<what is wrong>; accepted:
 * <what is>" in `err` (never NULL, `errlen` > 0); callers prefix the flag, variable or
 * FILE:LINE the value came from. Nothing here logs, allocates or blocks; all of it is
 * thread-safe.
 */
#ifndef BAGUA_COMMON_VALIDATE_H
#define BAGUA_COMMON_VALIDATE_H

#include <stddef.h>
#include <stdint.h>

#include "bagua/error.h"

/*
 * Longest job or node id. An id becomes an etcd key segment (/bagua/<job>/nodes/<node>),
 * part of file names (<log_dir>/<node>.<local_rank>.log, $TMPDIR/bagua-agent.<node>.<pid>.XXXXXX)
 * and of paths that may have to fit a unix socket address (108 bytes with the directory), so it is
 * kept short. 64 is also HOST_NAME_MAX on Linux: the agent's default node id, the host name, always
 * fits.
 */
#define BAGUA_ID_MAX_LEN 64
#define BAGUA_ID_ACCEPTED "1 to 64 characters from A-Z a-z 0-9 . _ -"
/* Most nodes a job may have (the MAX of --nnodes MIN:MAX). */
#define BAGUA_NNODES_MAX 65536
#define BAGUA_NNODES_ACCEPTED "N or MIN:MAX with 1 <= MIN <= MAX <= 65536"
#define BAGUA_ENDPOINTS_ACCEPTED "HOST:PORT[,HOST:PORT...] (an http:// prefix is optional)"
#define BAGUA_HOST_ACCEPTED "a host name or an IPv4 address"
#define BAGUA_LISTEN_ACCEPTED                                                                   \
  "an IPv4 address of this host such as 127.0.0.1 (0.0.0.0: every interface), not a multicast " \
  "(224.0.0.0/4), broadcast or reserved (240.0.0.0/4) address"
/* The etcd client port an endpoint without a port means (etcd's own default). */
#define BAGUA_ETCD_DEFAULT_PORT 2379

/* Strict decimal integer (optional sign, digits, nothing else) in [lo, hi]. */
bagua_status_t bagua__check_int(const char *text, int64_t lo, int64_t hi, int64_t *out, char *err,
                                size_t errlen);
/* A job or node id: 1..BAGUA_ID_MAX_LEN characters of [A-Za-z0-9._-], neither "." nor "..".
 * The empty id is refused: callers that give "" a meaning (a generated id) test for it first. */
bagua_status_t bagua__check_id(const char *text, char *err, size_t errlen);
/* "N" (MIN = MAX = N) or "MIN:MAX" with 1 <= MIN <= MAX <= BAGUA_NNODES_MAX. */
bagua_status_t bagua__check_nnodes(const char *text, int64_t *min, int64_t *max, char *err,
                                   size_t errlen);
/* A host name or address: letters, digits and . - _ : [ ] (IPv6 brackets). */
bagua_status_t bagua__check_host(const char *text, char *err, size_t errlen);
/* An IPv4 address a TCP listener can bind: dotted decimal, neither multicast nor broadcast nor
 * reserved (the kernel accepts a bind to some of those, and then no client can reach it). The
 * message starts with `what` ("" for none). */
bagua_status_t bagua__check_listen_addr(const char *what, const char *text, char *err,
                                        size_t errlen);
/* A comma-separated list of [http://|https://]HOST:PORT entries, PORT in [1, 65535]. */
bagua_status_t bagua__check_endpoints(const char *text, char *err, size_t errlen);
/*
 * The host and port of the first entry of an endpoint list, for code that must reach it
 * itself (the route lookup). A scheme ("http://", "https://") is skipped, an entry without a
 * port means BAGUA_ETCD_DEFAULT_PORT, a path after HOST:PORT ("http://h:2379/") is ignored,
 * and a port that is not an integer in [1, 65535] is an error.
 */
bagua_status_t bagua__endpoint_first(const char *endpoints, char *host, size_t hostlen,
                                     uint16_t *port, char *err, size_t errlen);
/*
 * Words from a list ("a|b|c"): the one rule for every choice a person gives Bagua-C, on the
 * command line, in an INI file or in a BAGUA_* variable, so that no consumer accepts a value
 * another refuses. A word matches without regard to ASCII case ("Restart" is "restart"), and
 * the consumer sees the list's own spelling, its canonical form. The empty text matches no
 * word.
 *
 * bagua__choice_find() is the match itself: the word of `choices` that the `n` bytes at `text`
 * spell, as a pointer into `choices` (its length is `n`), or NULL.
 */
const char *bagua__choice_find(const char *choices, const char *text, size_t n);
/* One of the words of `choices`; on success `word` (when not NULL) receives its canonical
 * spelling, which fits when `wordlen` exceeds the longest word. */
bagua_status_t bagua__choice_parse(const char *text, const char *choices, char *word,
                                   size_t wordlen, char *err, size_t errlen);
/* bagua__choice_parse() without the canonical spelling. */
bagua_status_t bagua__check_choice(const char *text, const char *choices, char *err, size_t errlen);
/* Writes the words of "a|b|c" as "a, b or c" into out. */
void bagua__list_choices(const char *choices, char *out, size_t len);

/*
 * torchrun's Std value (--redirects, --tee): "0" (none), "1" (stdout), "2" (stderr), "3"
 * (both) for every local rank, or "LOCAL_RANK:0-3,..." per local rank (ranks not listed: 0).
 * *mask (when not NULL) gets local rank `local_rank`'s bits (1 stdout, 2 stderr); *any gets
 * whether some rank has a bit set. The message says what is accepted.
 */
#define BAGUA_STD_ACCEPTED \
  "0 (none), 1 (stdout), 2 (stderr), 3 (both), or LOCAL_RANK:0-3,... per local rank"
bagua_status_t bagua__std_mask(const char *text, int local_rank, int *mask, int *any, char *err,
                               size_t errlen);

#endif
