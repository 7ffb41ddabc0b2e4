/*
 * The one rendezvous schema (docs/agent.md, "etcd schema"): the keys of a job under
 * /bagua/<job>/, the JSON codec of every record stored there, and the rank rule. bagua-agent,
 * bagua-launch, libbagua's elastic context and its etcd bootstrap all go through this module;
 * no other file builds a key or parses a record.
 *
 * Trust: anyone who can write to etcd chooses these bytes. Every decoder validates strictly
 * (JSON types, integral numbers within documented ranges, strings that fit their buffers,
 * world sizes summed in 64 bits) and refuses the whole record when one field is wrong; it
 * never truncates, guesses or trusts a part. A refused record is reported with
 * bagua__rdzv_reject(), which names the key and the field, and the caller acts as if the key
 * held nothing it could use (the agent's leader then repairs the keys it owns).
 *
 * Ownership: encoders return a malloc'ed NUL-terminated JSON string (NULL when out of memory)
 * that the caller frees; a decoded round owns its member array (bagua__rdzv_round_clear).
 * Threading: every function is reentrant; bagua__rdzv_reject() serialises its own state.
 * Failure: decoders return 0, or -1 with the reason ("field \"nproc\": 2147483647 is not in
 * 1..4096") in `why` when `why` is not NULL.
 */
#ifndef BAGUA_COMMON_RDZV_RDZV_H
#define BAGUA_COMMON_RDZV_RDZV_H

#include <stddef.h>
#include <stdint.h>

#include "bagua/error.h"

/* Room for a node or job id and its NUL; ids themselves are 1..BAGUA_ID_MAX_LEN characters
 * (common/validate.h), and the schema refuses longer ones. */
#define BAGUA_RDZV_ID_MAX 128
/* Workers one node may run, members of one round, workers of one round. The world bound is
 * the registry's bound on RANK and WORLD_SIZE, so every world the leader forms can be started. */
#define BAGUA_RDZV_NPROC_MAX 4096
#define BAGUA_RDZV_MEMBERS_MAX 65536
#define BAGUA_RDZV_WORLD_MAX 1048576
/* Room for the error-file message of a failure (bagua__rdzv_failure_t.error) and its NUL. */
#define BAGUA_RDZV_ERROR_MAX 512
/* The largest worker error file that is read at all: torch's record holds the whole Python
 * traceback, which a deep recursion makes long, but never megabytes. */
#define BAGUA_RDZV_ERROR_FILE_MAX (1 << 20)
/* The per-job secret: 32 random bytes, hex-encoded. */
#define BAGUA_RDZV_SECRET_BYTES 32
#define BAGUA_RDZV_SECRET_HEX (2 * BAGUA_RDZV_SECRET_BYTES)
/* Room for any key this module builds for a valid job id. */
#define BAGUA_RDZV_KEY_MAX 512

/* ---------------------------------------------------------------------------------------- */
/* Keys                                                                                      */
/* ---------------------------------------------------------------------------------------- */

typedef enum {
  BAGUA__RDZV_KEY_PREFIX = 0,    /* /bagua/<job>/ */
  BAGUA__RDZV_KEY_NODE,          /* nodes/<name> */
  BAGUA__RDZV_KEY_LEADER,        /* leader */
  BAGUA__RDZV_KEY_ROUND,         /* round */
  BAGUA__RDZV_KEY_STATUS,        /* status */
  BAGUA__RDZV_KEY_CONFIG,        /* config */
  BAGUA__RDZV_KEY_SECRET,        /* secret */
  BAGUA__RDZV_KEY_ROUND_DIR,     /* rounds/<round>/ */
  BAGUA__RDZV_KEY_DONE,          /* rounds/<round>/done/<name> */
  BAGUA__RDZV_KEY_BOOTSTRAP_DIR, /* rounds/<round>/bootstrap/ */
  BAGUA__RDZV_KEY_BOOTSTRAP,     /* rounds/<round>/bootstrap/<rank> (rank in `index`) */
  BAGUA__RDZV_KEY_REBUILD,       /* rounds/<round>/rebuild/<rank> (rank in `index`) */
  BAGUA__RDZV_KEY_PROGRESS,      /* progress/<name>: a node's workers' progress */
  BAGUA__RDZV_KEY_FAILURE,       /* failure: the latest worker failure a member reported */
  BAGUA__RDZV_KEY_ASSIGN,        /* assign/<name>: the node's place in the current round */
  BAGUA__RDZV_KEY_NODES_DIR,     /* nodes/ (a prefix, and a range bound) */
  BAGUA__RDZV_KEY_ROUNDS_DIR,    /* rounds/ */
  /* clash/<name>: an agent refused node id <name> because a live agent holds it; the record
   * (on the refused agent's lease) tells the holder. The name sorts before "config", outside
   * every range a follower watches but its own (agent/agent.c). */
  BAGUA__RDZV_KEY_CLASH,
  BAGUA__RDZV_KEY_OTHER /* under the prefix, but none of the above */
} bagua__rdzv_key_kind_t;

/*
 * Writes the key of `kind` for job `job` into buf. `round` is used by the rounds/ kinds,
 * `name` by NODE and DONE, `index` by BOOTSTRAP. Returns 0, or -1 when it does not fit.
 */
int bagua__rdzv_key(char *buf, size_t len, const char *job, bagua__rdzv_key_kind_t kind,
                    int64_t round, const char *name, int64_t index);

/* The first key after every key that starts with `dir` (a key this module built): `dir` with
 * its last byte incremented, e.g. "/bagua/j/rounds/" -> "/bagua/j/rounds0", the end of a
 * range that holds none of them. Returns 0, or -1 when it does not fit. */
int bagua__rdzv_key_end(char *buf, size_t len, const char *dir);

/* A key read back from etcd, classified. `name` points into the key (not copied). */
typedef struct {
  bagua__rdzv_key_kind_t kind;
  int64_t round; /* rounds/ kinds, else -1 */
  int64_t index; /* BOOTSTRAP, else -1 */
  const char *name;
} bagua__rdzv_key_info_t;

/* Classifies `key` read under `prefix` ("/bagua/<job>/"). Returns 0, or -1 when the key is
 * not under the prefix. A malformed name (empty, a '/', a round that is not a number) is
 * KIND_OTHER. */
int bagua__rdzv_key_parse(const char *prefix, const char *key, bagua__rdzv_key_info_t *out);

/* 1 when `id` is a valid job or node id (1..BAGUA_ID_MAX_LEN of [A-Za-z0-9._-], not "."/".."). */
int bagua__rdzv_id_valid(const char *id);

/* ---------------------------------------------------------------------------------------- */
/* Records                                                                                   */
/* ---------------------------------------------------------------------------------------- */

/* nodes/<node_id>: one per live agent, on the agent's lease. */
typedef struct {
  char id[BAGUA_RDZV_ID_MAX]; /* from the key, not the value */
  char host[256];
  char addr[256];
  char tag[128];
  char version[32];
  int nproc; /* 1..BAGUA_RDZV_NPROC_MAX */
  int pid;
  int master_port;
  /* The agent's liveness port; 0 when the record has none (nobody watches the node but its
   * lease then). */
  int live_port;
  int64_t join_ms;
  /* torchrun's --node_rank, when the agent was given one (has_node_rank): the leader orders
   * nodes that join a round together by it (agent/leader.c). */
  int has_node_rank, node_rank;
  /* From etcd, not the JSON: registration order and the owning lease. */
  int64_t create_rev;
  int64_t lease;
} bagua__rdzv_node_t;

/* One member of a round. */
typedef struct {
  char id[BAGUA_RDZV_ID_MAX];
  int nproc;
  int64_t rev; /* create_revision of the member's node key when the round was formed */
} bagua__rdzv_member_t;

/* Why the leader published a round (the round record's "reason" word, common/rdzv/reason.c).
 * NONE is a round without the field. */
typedef enum {
  BAGUA__ROUND_REASON_NONE = 0,
  BAGUA__ROUND_INITIAL,    /* the job's first round */
  BAGUA__ROUND_INVALID,    /* replaces a round inconsistent with the registered nodes */
  BAGUA__ROUND_FAILURE,    /* a worker failed: every worker restarts */
  BAGUA__ROUND_STALL,      /* an elastic worker's communication stalled: the same world again */
  BAGUA__ROUND_MEMBERSHIP, /* nodes joined or left */
  BAGUA__ROUND_REASON_COUNT
} bagua__round_reason_t;

/* The word of a reason ("" for NONE and out-of-range values). */
const char *bagua__round_reason_word(bagua__round_reason_t r);
/* The reason of a word, or -1 when it names none ("" is NONE). */
int bagua__round_reason_parse(const char *word, bagua__round_reason_t *out);
/* Whether in-process elastic workers move to such a round without a restart. */
int bagua__round_reason_keeps_workers(bagua__round_reason_t r);
/* Whether such a round spends one of the job's restarts. */
int bagua__round_reason_counts_restart(bagua__round_reason_t r);

/* round: the current rendezvous round, written only by the leader. */
typedef struct {
  int64_t round; /* 1, 2, ...; 0 means none */
  bagua__rdzv_member_t *members;
  int nmembers;
  int world_size; /* the sum of the members' nproc, checked */
  char master_addr[256];
  int master_port;
  int restart_count;
  bagua__round_reason_t reason;
  char leader[BAGUA_RDZV_ID_MAX];
  int64_t time_ms;
  /* How many members of the round before are not members of this one (0 for the first round,
   * and in a record without the field): in-process elastic workers abort the round they run
   * when it is more than 0, since a peer they wait for is gone. */
  int departed;
} bagua__rdzv_round_t;

/* The most members one node watches on the liveness ring (an assignment's watch list). */
#define BAGUA_RDZV_WATCH_MAX 8

/* One registration of a node: its id and the create revision of its node key. */
typedef struct {
  char id[BAGUA_RDZV_ID_MAX];
  int64_t rev;
} bagua__rdzv_ref_t;

/*
 * assign/<node>: what one node needs of the current round, written by the leader on that node's
 * lease for every registered node after each round. The round record lists every member, so
 * each node that read it would read O(N) bytes per round, O(N^2) in all; an assignment holds the
 * node's own place, and every node but the leader follows only its own.
 */
typedef struct {
  char node[BAGUA_RDZV_ID_MAX]; /* from the key, not the value */
  int64_t round;                /* the round's number, restart count, reason, leader, time */
  int restart_count;
  bagua__round_reason_t reason;
  char leader[BAGUA_RDZV_ID_MAX];
  int64_t time_ms;
  int world_size; /* the round's world and membership */
  int nmembers;
  int departed; /* the round's (bagua__rdzv_round_t) */
  char master_addr[256];
  int master_port;
  int index;     /* the node's place among the members (its GROUP_RANK); -1: not a member */
  int rank_base; /* members only: its first rank (the rank rule), workers and registration */
  int nproc;
  int64_t rev;
  /* Members only: the members it watches on the liveness ring (the next ones after it), nearest
   * first. */
  int nwatch;
  bagua__rdzv_ref_t watch[BAGUA_RDZV_WATCH_MAX];
} bagua__rdzv_assign_t;

/*
 * The assignment of member `idx` of round r (-1: of a node that is not a member), watching the
 * next `k` members (at most BAGUA_RDZV_WATCH_MAX). bagua__rdzv_assign_all fills one per member
 * in O(nmembers), summing the ranks once. Neither fills `node` for a non-member.
 */
void bagua__rdzv_assign_of(const bagua__rdzv_round_t *r, int idx, int k, bagua__rdzv_assign_t *a);
void bagua__rdzv_assign_all(const bagua__rdzv_round_t *r, int k, bagua__rdzv_assign_t *out);
char *bagua__rdzv_assign_encode(const bagua__rdzv_assign_t *a);
/* Keeps a->node (it comes from the key). */
int bagua__rdzv_assign_decode(const char *json, bagua__rdzv_assign_t *a, char *why, size_t len);

/* The state one member reports for its workers in rounds/<N>/done/<node>. */
typedef enum {
  BAGUA__DONE_SUCCEEDED = 0, /* every local worker exited 0 */
  BAGUA__DONE_FAILED = 1,    /* a local worker failed: the failure describes the first */
  BAGUA__DONE_STOPPED = 2    /* stopped because another node's worker failed */
} bagua__done_state_t;

/* A worker failure, as reported in done records and the job status's root cause. */
typedef struct {
  char node[BAGUA_RDZV_ID_MAX];
  char host[256];
  int64_t time_ms; /* wall clock when the agent reaped it */
  int64_t round;
  int rank, local_rank, pid;
  int exit_code; /* valid when signal == 0 */
  int signal;    /* terminating signal, 0 for a normal exit */
  /* Why the worker failed when the agent knows better than an exit code, e.g. the exec error
   * of a program that never started ("" when none; JSON "reason", omitted when empty). */
  char reason[256];
  /* 1: running the program again cannot help (it cannot be executed), so the leader fails the
   * job instead of spending restarts on it (JSON "permanent": true). */
  int permanent;
  /* The message the worker left in its TORCHELASTIC_ERROR_FILE (torch's @record: the
   * exception's type and text), already cut to fit and made one line of printable text by
   * bagua__rdzv_error_file_decode(); "" when it left none (JSON "error", omitted when empty,
   * so readers that predate it see the record they always did). */
  char error[BAGUA_RDZV_ERROR_MAX];
} bagua__rdzv_failure_t;

typedef struct {
  bagua__done_state_t state;
  bagua__rdzv_failure_t f; /* FAILED only (node is always set) */
  /* The node's workers were started in an earlier round and kept through this one's
   * membership change (in-process elasticity): JSON "kept": true. */
  int kept;
} bagua__rdzv_done_t;

typedef enum {
  BAGUA__JOB_RUNNING = 0,
  BAGUA__JOB_SUCCEEDED,
  BAGUA__JOB_FAILED,
  BAGUA__JOB_CLOSED
} bagua__job_state_t;

/* status: the job's state; terminal states are written once and never changed. */
typedef struct {
  bagua__job_state_t state;
  int64_t time_ms;
  int64_t round;
  int exit_code;     /* what every agent exits with once the state is terminal (0..255) */
  int has_root;      /* FAILED because of a worker: root cause below */
  char message[512]; /* human-readable reason (rendezvous failures, closing) */
  bagua__rdzv_failure_t root;
} bagua__rdzv_status_t;

/*
 * rounds/<N>/rebuild/<rank>: an elastic worker of round N whose communication failed (a peer
 * made no progress for BAGUA_COMM_TIMEOUT_MS, or a connection broke) while no newer round
 * exists asks the agents for one; the leader then publishes round N+1 with the members still
 * registered (reason "stall"), and every worker, the stalled one once it resumes, moves to it.
 */
typedef struct {
  char node[BAGUA_RDZV_ID_MAX];
  int rank;
  int64_t time_ms;
  char why[128];
} bagua__rdzv_rebuild_t;

char *bagua__rdzv_rebuild_encode(const bagua__rdzv_rebuild_t *r);
int bagua__rdzv_rebuild_decode(const char *json, bagua__rdzv_rebuild_t *r, char *why, size_t len);

/* config: the job-wide settings the first agent fixed; later agents must agree. */
typedef struct {
  int nnodes_min, nnodes_max, max_restarts;
  char node[BAGUA_RDZV_ID_MAX]; /* who wrote it */
} bagua__rdzv_jobcfg_t;

char *bagua__rdzv_node_encode(const bagua__rdzv_node_t *n);
/* Keeps n->id (it comes from the key); everything else comes from `json`. */
int bagua__rdzv_node_decode(const char *json, bagua__rdzv_node_t *n, char *why, size_t len);

char *bagua__rdzv_round_encode(const bagua__rdzv_round_t *r);
int bagua__rdzv_round_decode(const char *json, bagua__rdzv_round_t *r, char *why, size_t len);
void bagua__rdzv_round_clear(bagua__rdzv_round_t *r);
/* Deep copy; returns 0 or -1 (out of memory, dst left cleared). */
int bagua__rdzv_round_copy(bagua__rdzv_round_t *dst, const bagua__rdzv_round_t *src);
/* Index of `node` in the round's members, or -1. */
int bagua__rdzv_round_find(const bagua__rdzv_round_t *r, const char *node);

char *bagua__rdzv_done_encode(const bagua__rdzv_done_t *d);
int bagua__rdzv_done_decode(const char *json, bagua__rdzv_done_t *d, char *why, size_t len);

char *bagua__rdzv_status_encode(const bagua__rdzv_status_t *s);
int bagua__rdzv_status_decode(const char *json, bagua__rdzv_status_t *s, char *why, size_t len);
/* "running", "succeeded", "failed", "closed" (or "unknown"). */
const char *bagua__rdzv_job_state_name(bagua__job_state_t st);

char *bagua__rdzv_jobcfg_encode(const bagua__rdzv_jobcfg_t *c);
int bagua__rdzv_jobcfg_decode(const char *json, bagua__rdzv_jobcfg_t *c, char *why, size_t len);

/* secret: BAGUA_RDZV_SECRET_HEX hex digits, plain text (no JSON), stored in lower case.
 * Checks `value` of `len` bytes (either case, as common/auth.c decodes keys) and copies it in
 * lower case with its NUL into out[BAGUA_RDZV_SECRET_HEX + 1]. */
int bagua__rdzv_secret_decode(const char *value, size_t len, char *out, char *why, size_t whylen);
/* Fills out[BAGUA_RDZV_SECRET_HEX + 1] with a fresh secret from getrandom() (or /dev/urandom).
 * BAGUA_ERR_SYSTEM when the kernel gives no randomness. */
bagua_status_t bagua__rdzv_secret_generate(char *out);

/*
 * clash/<node>: agent B was started with node id <node>, found nodes/<node> held by the live
 * registration of agent A, and was refused. B writes this record on its own lease (which then
 * expires, no keeper renewing it) before it exits, so that A learns of it through the watch it
 * already has: A exits too while the job has not run with it (a clear error on both nodes
 * instead of one that waits for ever), and only warns once it has (docs/agent.md, "A duplicate
 * node id"). `holder_rev` names the registration B found (the create revision of A's node key),
 * so a record about an earlier registration of the id is ignored.
 */
typedef struct {
  char node[BAGUA_RDZV_ID_MAX]; /* from the key, not the value */
  char host[256];               /* B's host, address and pid */
  char addr[256];
  int pid;
  int64_t time_ms;    /* when B was refused (wall clock) */
  int64_t holder_rev; /* the create revision of the nodes/<node> key B found */
} bagua__rdzv_clash_t;

char *bagua__rdzv_clash_encode(const bagua__rdzv_clash_t *c);
/* Keeps c->node (it comes from the key). */
int bagua__rdzv_clash_decode(const char *json, bagua__rdzv_clash_t *c, char *why, size_t len);

/*
 * A worker's TORCHELASTIC_ERROR_FILE, as torch's @record decorator (and torch's error handler)
 * writes it: {"message": {"message": "ValueError: ...", "extraInfo": {"py_callstack": "...",
 * "timestamp": "1700000000"}}}, or the simpler {"message": "text", "timestamp": N}. The worker
 * writes these bytes, so they are untrusted: `len` bytes at `buf` (at most
 * BAGUA_RDZV_ERROR_FILE_MAX, no NUL byte, one JSON object) must hold a "message" that is a
 * non-empty string, or an object whose "message" is one (without one, the last line of
 * "extraInfo"."py_callstack" stands in); anything else is refused with the reason. The message
 * is copied into out[outlen] as one line: control characters become spaces, runs of spaces
 * one, bytes that are not UTF-8 '?', and a message that does not fit is cut at a character
 * boundary and ends in "...". Returns 0, or -1 (out is then "").
 */
int bagua__rdzv_error_file_decode(const char *buf, size_t len, char *out, size_t outlen, char *why,
                                  size_t whylen);

/* leader: the leader's node id as plain text. Checks the id (not whether the node lives). */
int bagua__rdzv_leader_decode(const char *value, char *out, size_t outlen, char *why,
                              size_t whylen);

/* ---------------------------------------------------------------------------------------- */
/* Progress (docs/observability.md)                                                          */
/* ---------------------------------------------------------------------------------------- */

/* One worker's progress as its agent last read it from the worker's progress file. */
typedef struct {
  int local_rank; /* 0..BAGUA_RDZV_NPROC_MAX-1, unique within the record */
  int rank;       /* in the record's round */
  int pid;
  int64_t step;        /* training steps completed (bagua_ddp_step calls) */
  int64_t total_steps; /* the program's stated total (BAGUA_TOTAL_STEPS), 0: unknown */
  int64_t samples;     /* samples the program reported, 0: unknown */
  int64_t bytes_sent;  /* bytes this worker's DDP context sent */
  int64_t comm_ms;     /* time its communication thread worked */
  /* Steps per second times 1000 over the agent's last sampling interval (an integer, so the
   * record holds no floating point); 0 when not known yet or idle. */
  int64_t rate_milli;
  int64_t update_ms; /* wall clock of the worker's last step; 0: none yet */
} bagua__rdzv_wprogress_t;

/* progress/<node>: written by each agent on its lease (it vanishes with the node) about every
 * BAGUA_PROGRESS_INTERVAL_MS while its workers report. */
typedef struct {
  char node[BAGUA_RDZV_ID_MAX]; /* from the key, not the value */
  int64_t round;                /* the round the workers run in */
  int restart_count;
  int64_t time_ms; /* when the agent wrote it */
  int nworkers;    /* 0..BAGUA_RDZV_NPROC_MAX */
  bagua__rdzv_wprogress_t *w;
} bagua__rdzv_progress_t;

char *bagua__rdzv_progress_encode(const bagua__rdzv_progress_t *p);
/* Keeps p->node; owns p->w afterwards (bagua__rdzv_progress_clear), also after a failure. */
int bagua__rdzv_progress_decode(const char *json, bagua__rdzv_progress_t *p, char *why, size_t len);
void bagua__rdzv_progress_clear(bagua__rdzv_progress_t *p);

/*
 * The progress file a worker's DDP layer keeps up to date (BAGUA_PROGRESS_FILE, a path in its
 * agent's private directory) and its agent reads. A fixed 128-byte record in host byte order
 * (writer and reader run on one host), updated in place through a shared mapping under a
 * sequence count: `seq` is odd while the writer is inside an update, and a reader that copied
 * the record keeps the copy only when `seq` was even and unchanged across two copies.
 */
#define BAGUA_PROGRESS_FILE_MAGIC 0x3147525047474142ULL /* "BAGGPRG1" little-endian */
#define BAGUA_PROGRESS_FILE_VERSION 1
typedef struct bagua__progress_file_s {
  uint64_t magic;   /* BAGUA_PROGRESS_FILE_MAGIC */
  uint32_t version; /* BAGUA_PROGRESS_FILE_VERSION */
  uint32_t size;    /* sizeof(bagua__progress_file_t) */
  uint64_t seq;     /* sequence count (see above) */
  int64_t pid;
  int64_t step;
  int64_t total_steps; /* 0: unknown */
  int64_t samples;     /* 0: unknown */
  int64_t bytes_sent;
  int64_t comm_us;
  int64_t start_ms;  /* wall clock when the DDP context became ready */
  int64_t update_ms; /* wall clock of the last completed step */
  int64_t reserved[5];
} bagua__progress_file_t;
_Static_assert(sizeof(bagua__progress_file_t) == 128, "the progress file is 128 bytes");

/* Checks `len` bytes read from a progress file: size, magic, version, an even sequence count
 * and every counter within 0..2^53. Returns 0 and fills `out`, or -1 with the reason. */
int bagua__progress_file_decode(const void *buf, size_t len, bagua__progress_file_t *out, char *why,
                                size_t whylen);

/* ---------------------------------------------------------------------------------------- */
/* Rank rule                                                                                 */
/* ---------------------------------------------------------------------------------------- */

/*
 * The rank rule: member i's workers hold ranks sum(nproc of members 0..i-1) + local rank,
 * the world is the sum of all nprocs. Sets *rank and *group_rank for (node, local_rank).
 * Returns 0; -1 when the node is not a member; -2 when local_rank is not below its nproc.
 */
int bagua__rdzv_place(const bagua__rdzv_round_t *r, const char *node, int local_rank, int *rank,
                      int *group_rank);
/* The rank of member `idx`'s local rank 0 (the sum of the nprocs before it). */
int bagua__rdzv_rank_base(const bagua__rdzv_round_t *r, int idx);

/* ---------------------------------------------------------------------------------------- */
/* Rejections                                                                                */
/* ---------------------------------------------------------------------------------------- */

/*
 * Reports that the value of `key` (at `mod_rev`) was refused: a warning naming the key, what
 * it should have been (`what`, e.g. "a node record") and why. The same key at the same
 * revision is warned about once per process and then logged at INFO only, so a foreign value
 * that nobody may remove does not flood the log.
 */
void bagua__rdzv_reject(const char *key, int64_t mod_rev, const char *what, const char *why);

#endif
