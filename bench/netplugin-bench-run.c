/*
 * netplugin-bench modes: byte-exact correctness in both directions, throughput, a peer killed
 * mid-transfer, and refused arguments. Every wait is bounded; a stuck request fails the run.
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "netplugin-bench.h"

#define PAD 13                /* receive buffers are larger than the message by this much */
#define PAD_BYTE 0xa5         /* and those bytes must come back untouched */
#define STUCK_S 120.0         /* a size phase that takes longer has hung */
#define KILL_DETECT_LIMIT_S 5 /* the survivor must see the failure within this */
#define MAX_GROUP 8           /* grouped receives used by the check, at most */

/* ---- Data pattern: 64-bit words of splitmix64(seed + index) ---- */

static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static uint64_t seed_of(int rank, int size_idx, int unit, int k) {
  return mix(((uint64_t)rank << 48) ^ ((uint64_t)size_idx << 32) ^ ((uint64_t)unit << 8) ^
             (uint64_t)k);
}

static void fill(char *buf, size_t len, uint64_t seed) {
  size_t words = len / 8;
  for (size_t i = 0; i < words; i++) {
    uint64_t w = mix(seed + i);
    memcpy(buf + 8 * i, &w, 8);
  }
  uint64_t w = mix(seed + words);
  memcpy(buf + 8 * words, &w, len - 8 * words);
}

/* Returns the first differing offset, or -1 when buf holds the pattern. */
static long long verify(const char *buf, size_t len, uint64_t seed) {
  size_t words = len / 8;
  for (size_t i = 0; i < words; i++) {
    uint64_t w = mix(seed + i), got;
    memcpy(&got, buf + 8 * i, 8);
    if (got != w)
      for (size_t b = 0; b < 8; b++)
        if (((const char *)&w)[b] != buf[8 * i + b]) return (long long)(8 * i + b);
  }
  uint64_t w = mix(seed + words);
  for (size_t b = 0; b < len - 8 * words; b++)
    if (((const char *)&w)[b] != buf[8 * words + b]) return (long long)(8 * words + b);
  return -1;
}

/* ---- check: every size, both directions at once, grouped receives, byte for byte ---- */

typedef struct {
  int active, unit, g, posted, ndone;
  void *req[MAX_GROUP];
  int done[MAX_GROUP];
} send_slot_t;

typedef struct {
  int active, unit, g;
  void *req;
} recv_slot_t;

static int tag_of(int unit, int k) {
  return (unit * 8 + k) % 1000000;
}

static int run_size(np_peer_t *p, int si, size_t s) {
  np_api_t *a = &p->api;
  int nunits = s >= (64u << 20) ? 1 : s >= (4u << 20) ? 4 : 24;
  int w = nunits < 8 ? nunits : 8;
  /* Grouped receives of up to maxRecvs buffers for small messages, fewer as they grow. */
  int gmax = s <= 65536 ? MAX_GROUP : s <= (1u << 20) ? 4 : 1;
  if (gmax > p->max_recvs) gmax = p->max_recvs;
  int status = 1;
  char **sbuf = calloc((size_t)(w * gmax), sizeof(char *));
  char **rbuf = calloc((size_t)(w * gmax), sizeof(char *));
  send_slot_t *ss = calloc((size_t)w, sizeof(*ss));
  recv_slot_t *rs = calloc((size_t)w, sizeof(*rs));
  if (!sbuf || !rbuf || !ss || !rs) goto out;
  for (int i = 0; i < w * gmax; i++) {
    sbuf[i] = malloc(s + 1);
    rbuf[i] = malloc(s + PAD);
    if (!sbuf[i] || !rbuf[i]) {
      fprintf(stderr, "rank %d: out of memory for %zu-byte buffers\n", p->rank, s);
      goto out;
    }
  }
  int next_send = 0, next_recv = 0, sent = 0, recvd = 0, progress_mark = -1;
  double t0 = np_now();
  while (sent < nunits || recvd < nunits) {
    /* Like NCCL's proxy, give the CPU away after a pass that moved nothing: on a small
     * machine a spinning poller starves the plugin's own stream threads. */
    if (sent + recvd + next_send + next_recv == progress_mark) sched_yield();
    progress_mark = sent + recvd + next_send + next_recv;
    if (np_now() - t0 > STUCK_S) {
      fprintf(stderr, "rank %d: size %zu stuck: %d/%d sent, %d/%d received\n", p->rank, s, sent,
              nunits, recvd, nunits);
      goto out;
    }
    /* Post sends: the messages of a group go out in reverse order, so the receiver has to
     * match them by tag rather than by position. */
    for (int i = 0; i < w && next_send < nunits; i++) {
      send_slot_t *x = &ss[i];
      if (x->active && x->posted == x->g) continue;
      if (!x->active) {
        memset(x, 0, sizeof(*x));
        x->active = 1;
        x->unit = next_send;
        x->g = 1 + next_send % gmax;
        for (int k = 0; k < x->g; k++)
          fill(sbuf[i * gmax + k], s, seed_of(p->rank, si, x->unit, k));
      }
      while (x->posted < x->g) {
        int k = x->g - 1 - x->posted;
        ncclResult_t rc = np_isend(a, p->send_comm, sbuf[i * gmax + k], s, tag_of(x->unit, k),
                                   p->send_mh, &x->req[k]);
        if (rc != ncclSuccess) {
          fprintf(stderr, "rank %d: isend(%zu) = %d\n", p->rank, s, rc);
          goto out;
        }
        if (!x->req[k]) break; /* busy: retry on the next pass */
        x->posted++;
      }
      if (x->posted == x->g)
        next_send++;
      else
        break;
    }
    for (int i = 0; i < w && next_recv < nunits; i++) {
      recv_slot_t *x = &rs[i];
      if (x->active) continue;
      int g = 1 + next_recv % gmax;
      void *data[MAX_GROUP], *mh[MAX_GROUP];
      size_t sizes[MAX_GROUP];
      int tags[MAX_GROUP];
      for (int k = 0; k < g; k++) {
        data[k] = rbuf[i * gmax + k];
        memset((char *)data[k] + s, PAD_BYTE, PAD);
        sizes[k] = s + PAD;
        tags[k] = tag_of(next_recv, k);
        mh[k] = p->recv_mh;
      }
      ncclResult_t rc = np_irecv(a, p->recv_comm, g, data, sizes, tags, mh, &x->req);
      if (rc != ncclSuccess) {
        fprintf(stderr, "rank %d: irecv(%d x %zu) = %d\n", p->rank, g, s, rc);
        goto out;
      }
      if (!x->req) break;
      x->active = 1;
      x->unit = next_recv++;
      x->g = g;
    }
    /* Poll, as the proxy does. */
    for (int i = 0; i < w; i++) {
      send_slot_t *x = &ss[i];
      if (!x->active) continue;
      for (int k = 0; k < x->g; k++) {
        if (!x->req[k] || x->done[k]) continue;
        int done = 0, sz = -1;
        ncclResult_t rc = np_test(a, x->req[k], &done, &sz);
        if (rc != ncclSuccess) {
          fprintf(stderr, "rank %d: test(send %zu) = %d\n", p->rank, s, rc);
          goto out;
        }
        if (done) {
          x->done[k] = 1;
          x->ndone++;
        }
      }
      if (x->ndone == x->g) {
        x->active = 0;
        sent++;
      }
    }
    for (int i = 0; i < w; i++) {
      recv_slot_t *x = &rs[i];
      if (!x->active) continue;
      int done = 0, sz[MAX_GROUP];
      ncclResult_t rc = np_test(a, x->req, &done, sz);
      if (rc != ncclSuccess) {
        fprintf(stderr, "rank %d: test(recv %zu) = %d\n", p->rank, s, rc);
        goto out;
      }
      if (!done) continue;
      for (int k = 0; k < x->g; k++) {
        const char *b = rbuf[i * gmax + k];
        if ((size_t)sz[k] != s) {
          fprintf(stderr, "rank %d: size %zu unit %d buffer %d: test reported %d bytes\n", p->rank,
                  s, x->unit, k, sz[k]);
          goto out;
        }
        long long bad = verify(b, s, seed_of(1 - p->rank, si, x->unit, k));
        if (bad >= 0) {
          fprintf(stderr, "rank %d: size %zu unit %d buffer %d: wrong byte at offset %lld\n",
                  p->rank, s, x->unit, k, bad);
          goto out;
        }
        for (int j = 0; j < PAD; j++)
          if ((unsigned char)b[s + j] != PAD_BYTE) {
            fprintf(stderr, "rank %d: size %zu: write past the message end\n", p->rank, s);
            goto out;
          }
      }
      x->active = 0;
      recvd++;
    }
  }
  status = 0;
out:
  for (int i = 0; sbuf && rbuf && i < w * gmax; i++) free(sbuf[i]), free(rbuf[i]);
  free(sbuf), free(rbuf), free(ss), free(rs);
  return status;
}

int np_run_check(np_peer_t *p, const np_opts_t *o) {
  static const size_t sizes[] = {0,
                                 1,
                                 2,
                                 3,
                                 7,
                                 8,
                                 100,
                                 1023,
                                 4095,
                                 4096,
                                 4097,
                                 65535,
                                 65536,
                                 65537,
                                 262143,
                                 1u << 20,
                                 (1u << 20) + 1,
                                 (3u << 20) + 5,
                                 16u << 20,
                                 (64u << 20) + 3,
                                 256u << 20};
  for (int si = 0; si < (int)(sizeof(sizes) / sizeof(sizes[0])); si++) {
    size_t s = sizes[si];
    if (s > o->max_bytes || s > p->max_p2p) continue;
    double t0 = np_now();
    if (run_size(p, si, s) != 0) return 1;
    if (p->rank == 0 && !o->quiet)
      printf("size %10zu ok in both directions (%.3f s)\n", s, np_now() - t0);
    if (np_barrier(p) != 0) {
      fprintf(stderr, "rank %d: peer gone after size %zu\n", p->rank, s);
      return 1;
    }
  }
  return 0;
}

/* ---- throughput: rank 0 sends, rank 1 receives, `window` requests in flight ---- */

int np_run_throughput(np_peer_t *p, const np_opts_t *o) {
  static const size_t sizes[] = {64u << 10, 256u << 10, 512u << 10, 1u << 20,
                                 4u << 20,  16u << 20,  64u << 20};
  np_api_t *a = &p->api;
  size_t maxs = 0;
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
    if (sizes[i] <= o->max_bytes && sizes[i] > maxs) maxs = sizes[i];
  /* One buffer serves every request: the content is not looked at here. */
  char *buf = malloc(maxs ? maxs : 1);
  if (!buf) return 1;
  memset(buf, 1, maxs);
  if (p->rank == 0) printf("%12s %8s %10s %10s\n", "bytes", "iters", "time_ms", "GB/s");
  int status = 1;
  for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
    size_t s = sizes[si];
    if (s > o->max_bytes) continue;
    long iters = (long)(o->total_bytes / s);
    if (iters < 2L * o->window) iters = 2L * o->window;
    void *req[64] = {0};
    long posted = 0, done_n = 0;
    if (np_barrier(p) != 0) goto out;
    double t0 = np_now();
    long mark = -1;
    while (done_n < iters) {
      if (posted + done_n == mark) sched_yield();
      mark = posted + done_n;
      if (np_now() - t0 > STUCK_S) {
        fprintf(stderr, "rank %d: throughput at %zu stuck\n", p->rank, s);
        goto out;
      }
      for (int i = 0; i < o->window; i++) {
        if (!req[i] && posted < iters) {
          ncclResult_t rc;
          if (p->rank == 0) {
            rc = np_isend(a, p->send_comm, buf, s, 0, p->send_mh, &req[i]);
          } else {
            void *d = buf, *mh = p->recv_mh;
            size_t sz = s;
            int tag = 0;
            rc = np_irecv(a, p->recv_comm, 1, &d, &sz, &tag, &mh, &req[i]);
          }
          if (rc != ncclSuccess) goto out;
          if (req[i]) posted++;
        }
        if (req[i]) {
          int done = 0, sz = 0;
          if (np_test(a, req[i], &done, &sz) != ncclSuccess) goto out;
          if (done) req[i] = NULL, done_n++;
        }
      }
    }
    double dt = np_now() - t0;
    /* The receiver's clock decides: its last byte arrived when its last request completed. */
    if (p->rank == 1) {
      if (np_chan_write(p->chan, &dt, sizeof(dt)) != 0) goto out;
    } else {
      if (np_chan_read(p->chan, &dt, sizeof(dt), 60000) != 0) goto out;
      printf("%12zu %8ld %10.2f %10.3f\n", s, iters, dt * 1e3, (double)s * iters / dt / 1e9);
    }
  }
  status = 0;
out:
  free(buf);
  return status;
}

/* ---- latency: ping-pong, rank 0 sends and waits for the echo ---- */

static int wait_req(np_peer_t *p, void *req) {
  double t0 = np_now();
  for (long polls = 0;; polls++) {
    int done = 0, sz = 0;
    if (np_test(&p->api, req, &done, &sz) != ncclSuccess) return -1;
    if (done) return 0;
    if (np_now() - t0 > STUCK_S) return -1;
    if (polls % 16 == 15) sched_yield();
  }
}

int np_run_latency(np_peer_t *p, const np_opts_t *o) {
  static const size_t sizes[] = {8, 1024, 8192, 65536, 1u << 20};
  np_api_t *a = &p->api;
  char *buf = calloc(1, 1u << 20);
  if (!buf) return 1;
  int status = 1;
  if (p->rank == 0) printf("%12s %8s %14s\n", "bytes", "iters", "half_rtt_us");
  for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
    size_t s = sizes[si];
    if (s > o->max_bytes) continue;
    int iters = s >= (1u << 20) ? 100 : 1000;
    if (np_barrier(p) != 0) goto out;
    double t0 = np_now();
    for (int i = 0; i < iters; i++) {
      void *req = NULL, *d = buf, *mh = p->recv_mh;
      size_t sz = s;
      int tag = 0;
      for (int turn = 0; turn < 2; turn++) {
        int sending = (turn == 0) == (p->rank == 0);
        ncclResult_t rc;
        do {
          rc = sending ? np_isend(a, p->send_comm, buf, s, 0, p->send_mh, &req)
                       : np_irecv(a, p->recv_comm, 1, &d, &sz, &tag, &mh, &req);
        } while (rc == ncclSuccess && !req);
        if (rc != ncclSuccess || wait_req(p, req) != 0) {
          fprintf(stderr, "rank %d: %s of %zu bytes failed (rc %d) at iteration %d\n", p->rank,
                  sending ? "send" : "receive", s, rc, i);
          goto out;
        }
      }
    }
    double dt = np_now() - t0;
    if (p->rank == 0) printf("%12zu %8d %14.1f\n", s, iters, dt / iters / 2 * 1e6);
  }
  status = 0;
out:
  free(buf);
  return status;
}

/* ---- kill: the peer dies mid-transfer; the survivor's test() must fail within 5 s ---- */

static int wait_done(np_peer_t *p, void *req, double limit_s) {
  double t0 = np_now();
  while (np_now() - t0 < limit_s) {
    int done = 0, sz = 0;
    if (np_test(&p->api, req, &done, &sz) != ncclSuccess) return -1;
    if (done) return 0;
  }
  return -1;
}

/* Polls `req` until test() fails; returns the seconds it took, or -1 if it never did. */
static double wait_failure(np_peer_t *p, void *req, double t0) {
  while (np_now() - t0 < 3 * KILL_DETECT_LIMIT_S) {
    int done = 0, sz = 0;
    ncclResult_t rc = np_test(&p->api, req, &done, &sz);
    if (rc != ncclSuccess) {
      printf("# test() returned %d after %.3f s\n", rc, np_now() - t0);
      return np_now() - t0;
    }
    if (done) {
      fprintf(stderr, "rank 0: the request completed although the peer died\n");
      return -1;
    }
    usleep(100);
  }
  return -1;
}

static int reap(pid_t pid) {
  int wst = 0;
  double t0 = np_now();
  while (np_now() - t0 < 10) {
    pid_t w = waitpid(pid, &wst, WNOHANG);
    if (w == pid) return WIFSIGNALED(wst) && WTERMSIG(wst) == SIGKILL ? 0 : -1;
    usleep(1000);
  }
  return -1;
}

int np_run_kill(np_peer_t *p, const np_opts_t *o, int survivor_sends) {
  (void)o;
  np_api_t *a = &p->api;
  size_t small = 8u << 20, big = 64u << 20;
  char *buf = malloc(big);
  if (!buf) return 1;
  memset(buf, 7, big);
  void *req = NULL, *d = buf, *mh = p->recv_mh;
  int tag = 0, status = 1;
  size_t sz = small;
  if (p->rank == 1) {
    if (survivor_sends) {
      /* Take one message, then stop reading so that the next one stalls mid-transfer. */
      if (np_irecv(a, p->recv_comm, 1, &d, &sz, &tag, &mh, &req) != ncclSuccess || !req ||
          wait_done(p, req, 30) != 0)
        goto out;
      char ready = 'R';
      np_chan_write(p->chan, &ready, 1);
      sleep(30); /* rank 0 kills this process */
      goto out;
    }
    /* Send one message, start a second that rank 0 has not asked for yet, and die. */
    if (np_isend(a, p->send_comm, buf, small, 0, p->send_mh, &req) != ncclSuccess || !req ||
        wait_done(p, req, 30) != 0)
      goto out;
    if (np_isend(a, p->send_comm, buf, big, 0, p->send_mh, &req) != ncclSuccess || !req) goto out;
    wait_done(p, req, 0.2);
    raise(SIGKILL);
    goto out;
  }
  if (survivor_sends) {
    if (np_isend(a, p->send_comm, buf, small, 0, p->send_mh, &req) != ncclSuccess || !req ||
        wait_done(p, req, 30) != 0)
      goto out;
    char ready;
    if (np_chan_read(p->chan, &ready, 1, 30000) != 0) goto out;
    if (np_isend(a, p->send_comm, buf, big, 0, p->send_mh, &req) != ncclSuccess || !req) goto out;
    if (wait_done(p, req, 0.3) == 0) {
      fprintf(stderr, "rank 0: the stalled send completed: kernel buffers hold %zu bytes?\n", big);
      goto out;
    }
    kill(p->child, SIGKILL);
    double t0 = np_now();
    if (reap(p->child) != 0) goto out;
    double dt = wait_failure(p, req, t0);
    if (dt < 0 || dt > KILL_DETECT_LIMIT_S) goto out;
  } else {
    if (np_irecv(a, p->recv_comm, 1, &d, &sz, &tag, &mh, &req) != ncclSuccess || !req ||
        wait_done(p, req, 30) != 0)
      goto out;
    if (reap(p->child) != 0) {
      fprintf(stderr, "rank 0: rank 1 did not die by SIGKILL\n");
      goto out;
    }
    double t0 = np_now();
    sz = big;
    req = NULL;
    ncclResult_t rc = np_irecv(a, p->recv_comm, 1, &d, &sz, &tag, &mh, &req);
    if (rc != ncclSuccess) {
      printf("# irecv returned %d after %.3f s\n", rc, np_now() - t0);
    } else {
      double dt = req ? wait_failure(p, req, t0) : -1;
      if (dt < 0 || dt > KILL_DETECT_LIMIT_S) goto out;
    }
  }
  status = 0;
out:
  p->free_after_close = buf;
  return status;
}

/* ---- close-early: the peer closes right after its last send completes ---- */

/* A send completes once its bytes are with the kernel, so the receiver may see the end of the
 * control stream while the last message's chunks are still arriving on the data streams. All
 * messages must still arrive intact; a receive posted after that must fail, not hang. */
int np_run_close_early(np_peer_t *p, const np_opts_t *o) {
  (void)o;
  np_api_t *a = &p->api;
  enum { N = 16 };
  size_t s = 1u << 20;
  char *buf = malloc(s * N);
  void *reqs[N] = {0};
  if (!buf) return 1;
  int status = 1, tag = 0;
  /* Rank 1 posts every send at once and closes as soon as the last one completes; rank 0
   * posts every receive at once a little later, so that its control thread matches all the
   * headers and meets the end of the stream while most chunks are still on their way. */
  if (p->rank == 0) usleep(200000);
  for (int i = 0; i < N; i++) {
    ncclResult_t rc;
    if (p->rank == 1) {
      fill(buf + s * i, s, seed_of(1, 0, i, 0));
      do rc = np_isend(a, p->send_comm, buf + s * i, s, 0, p->send_mh, &reqs[i]);
      while (rc == ncclSuccess && !reqs[i]);
    } else {
      void *d = buf + s * i, *mh = p->recv_mh;
      size_t sz = s;
      do rc = np_irecv(a, p->recv_comm, 1, &d, &sz, &tag, &mh, &reqs[i]);
      while (rc == ncclSuccess && !reqs[i]);
    }
    if (rc != ncclSuccess) goto out;
  }
  for (int i = 0; i < N; i++) {
    if (wait_done(p, reqs[i], 60) != 0) {
      fprintf(stderr, "rank %d: message %d of %d failed\n", p->rank, i, N);
      goto out;
    }
    if (p->rank == 0) {
      long long bad = verify(buf + s * i, s, seed_of(1, 0, i, 0));
      if (bad >= 0) {
        fprintf(stderr, "rank 0: message %d: wrong byte at offset %lld\n", i, bad);
        goto out;
      }
    }
  }
  if (p->rank == 1) {
    status = 0; /* and close at once */
    goto out;
  }
  void *req = NULL, *d = buf, *mh = p->recv_mh;
  size_t sz = s;
  double t0 = np_now();
  ncclResult_t rc = np_irecv(a, p->recv_comm, 1, &d, &sz, &tag, &mh, &req);
  if (rc == ncclSuccess && req) {
    double dt = wait_failure(p, req, t0);
    if (dt < 0 || dt > KILL_DETECT_LIMIT_S) goto out;
  } else if (rc == ncclSuccess) {
    goto out;
  }
  status = 0;
out:
  p->free_after_close = buf;
  return status;
}

/* ---- errors: refused arguments come back as ncclInvalidArgument / ncclInvalidUsage ---- */

#define EXPECT(call, want)                                                               \
  do {                                                                                   \
    ncclResult_t rc_ = (call);                                                           \
    if (rc_ != (want)) {                                                                 \
      fprintf(stderr, "rank 0: %s returned %d, expected %d\n", #call, rc_, (int)(want)); \
      status = 1;                                                                        \
    } else {                                                                             \
      printf("# %s -> %d as expected\n", #call, rc_);                                    \
    }                                                                                    \
  } while (0)

int np_run_errors(np_peer_t *p, const np_opts_t *o) {
  (void)o;
  int status = 0;
  if (p->rank == 0) {
    np_api_t *a = &p->api;
    void *req = NULL, *lc = NULL, *sc = NULL, *rc_comm = NULL;
    char byte = 0, handle[NCCL_NET_HANDLE_MAXSIZE] = {0};
    ncclNetProperties_v11_t props;
    EXPECT(np_properties(a, 99, &props), ncclInvalidArgument);
    EXPECT(np_listen(a, 99, handle, &lc), ncclInvalidArgument);
    /* A handle that no Bagua-Net listener wrote, and one of a future version. */
    EXPECT(np_connect(a, 0, handle, &sc), ncclInvalidArgument);
    uint32_t magic = 0x54454e42u; /* "BNET" */
    uint16_t version = 2, kind = 1;
    memcpy(handle, &magic, 4);
    memcpy(handle + 4, &version, 2);
    memcpy(handle + 6, &kind, 2);
    EXPECT(np_connect(a, 0, handle, &sc), ncclInvalidArgument);
    EXPECT(np_connect(a, 7, handle, &sc), ncclInvalidArgument);
    if (a->version >= 9)
      EXPECT(np_isend(a, p->send_comm, &byte, p->max_p2p + 1, 0, p->send_mh, &req),
             ncclInvalidArgument);
    void *data[17];
    size_t sizes[17];
    int tags[17];
    void *mh[17];
    for (int k = 0; k < 17; k++) data[k] = &byte, sizes[k] = 1, tags[k] = k, mh[k] = NULL;
    EXPECT(np_irecv(a, p->recv_comm, p->max_recvs + 1, data, sizes, tags, mh, &req),
           ncclInvalidArgument);
    tags[1] = tags[0];
    if (p->max_recvs >= 2)
      EXPECT(np_irecv(a, p->recv_comm, 2, data, sizes, tags, mh, &req), ncclInvalidArgument);
    EXPECT(np_isend(a, p->recv_comm, &byte, 1, 0, NULL, &req), ncclInvalidUsage);
    EXPECT(np_accept(a, NULL, &rc_comm), ncclInvalidArgument);
    (void)rc_comm;
  }
  if (np_barrier(p) != 0) status = 1;
  return status;
}
