/*
 * env:// bootstrap: a TCP rendezvous at MASTER_ADDR:MASTER_PORT, as torch and NCCL do.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap.h"
#include "common/check.h"
#include "common/log.h"
#include "common/sock.h"

uint64_t bagua__hash64(const void *data, size_t len, uint64_t seed) {
  /* FNV-1a: enough to tell jobs and nodes apart; not a security boundary. */
  const unsigned char *p = data;
  uint64_t h = 1469598103934665603ULL ^ seed;
  for (size_t i = 0; i < len; i++) {
    h ^= p[i];
    h *= 1099511628211ULL;
  }
  return h;
}

uint64_t bagua__world_comm_id(uint64_t job_hash, int64_t round) {
  return bagua__hash64(&round, sizeof(round), bagua__hash64("world", 5, job_hash));
}

int bagua__wire_check(const bagua__wire_hdr_t *h, uint32_t type, uint64_t job_hash,
                      uint64_t comm_id, int size, uint32_t *reason, char *why, size_t whylen) {
  *reason = 0;
  if (h->magic != BAGUA_WIRE_MAGIC) {
    snprintf(why, whylen, "bad magic 0x%08x (not a Bagua peer)", h->magic);
    return -1; /* no reply: the other end does not speak our protocol */
  }
  if (h->version != BAGUA_WIRE_VERSION) {
    snprintf(why, whylen, "protocol version %u, expected %u", h->version, BAGUA_WIRE_VERSION);
    *reason = BAGUA_REFUSE_VERSION;
  } else if (h->type != type) {
    snprintf(why, whylen, "message type %u, expected %u", h->type, type);
    *reason = BAGUA_REFUSE_VERSION;
  } else if (h->job_hash != job_hash) {
    snprintf(why, whylen, "peer belongs to another job (BAGUA_JOB_ID differs)");
    *reason = BAGUA_REFUSE_JOB;
  } else if (h->comm_id != comm_id) {
    snprintf(why, whylen, "peer is building another communicator");
    *reason = BAGUA_REFUSE_COMM;
  } else if (h->size != size) {
    snprintf(why, whylen, "peer has world size %d, expected %d", h->size, size);
    *reason = BAGUA_REFUSE_SIZE;
  } else if (h->rank < 0 || h->rank >= size) {
    snprintf(why, whylen, "peer rank %d out of range [0, %d)", h->rank, size);
    *reason = BAGUA_REFUSE_RANK;
  } else {
    return 0;
  }
  return -1;
}

static const char *refuse_text(uint32_t r) {
  switch (r) {
    case BAGUA_REFUSE_JOB:
      return "job id differs from the other ranks' (BAGUA_JOB_ID)";
    case BAGUA_REFUSE_VERSION:
      return "protocol version differs (mixed Bagua-C builds)";
    case BAGUA_REFUSE_SIZE:
      return "world size differs from the other ranks' (WORLD_SIZE)";
    case BAGUA_REFUSE_RANK:
      return "rank out of range or already taken by another process";
    case BAGUA_REFUSE_COMM:
      return "connection meant for another communicator";
    default:
      return "unknown reason";
  }
}

static bagua__wire_hdr_t make_hdr(const bagua__boot_ctx_t *ctx, uint32_t type, uint32_t arg) {
  bagua__wire_hdr_t h = {BAGUA_WIRE_MAGIC, BAGUA_WIRE_VERSION, type,      arg,
                         ctx->job_hash,    ctx->comm_id,       ctx->rank, ctx->size};
  return h;
}

/* Root side: accept until every other rank has registered, refusing bad connections. */
static bagua_status_t root_gather(int lfd, const bagua__boot_ctx_t *ctx, bagua__endpoint_t *all,
                                  int *fds) {
  int have = 1;
  while (have < ctx->size) {
    int fd = -1;
    bagua_status_t st = bagua__accept(lfd, ctx->deadline_ms, ctx->abort_flag, &fd);
    if (st != BAGUA_OK) {
      if (st == BAGUA_ERR_TIMEOUT)
        BAGUA_WARN("bootstrap: only %d of %d ranks registered before the connect timeout", have,
                   ctx->size);
      return st;
    }
    bagua__wire_hdr_t h;
    bagua__endpoint_t ep;
    /* A short per-connection deadline keeps one silent client from stalling the others. */
    int64_t dl = bagua__now_ms() + 2000;
    if (dl > ctx->deadline_ms) dl = ctx->deadline_ms;
    if (bagua__recv_all(fd, &h, sizeof(h), dl, ctx->abort_flag) != BAGUA_OK) {
      BAGUA_WARN("bootstrap: refused a connection that sent no complete handshake");
      close(fd);
      continue;
    }
    uint32_t reason;
    char why[160];
    int bad = bagua__wire_check(&h, BAGUA_MSG_BOOT_HELLO, ctx->job_hash, ctx->comm_id, ctx->size,
                                &reason, why, sizeof(why));
    if (!bad && (h.rank == 0 || fds[h.rank] >= 0)) {
      bad = 1;
      reason = BAGUA_REFUSE_RANK;
      snprintf(why, sizeof(why), "rank %d registered twice", h.rank);
    }
    if (!bad) {
      if (bagua__recv_all(fd, &ep, sizeof(ep), dl, ctx->abort_flag) != BAGUA_OK) {
        BAGUA_WARN("bootstrap: rank %d closed its connection during the handshake", h.rank);
        close(fd);
        continue;
      }
      all[h.rank] = ep;
      fds[h.rank] = fd;
      have++;
      BAGUA_INFO(BAGUA_SUBSYS_INIT, "bootstrap: rank %d registered (%d/%d)", h.rank, have,
                 ctx->size);
      continue;
    }
    BAGUA_WARN("bootstrap: refused a connection: %s", why);
    if (reason) {
      bagua__wire_hdr_t nack = make_hdr(ctx, BAGUA_MSG_BOOT_NACK, reason);
      bagua__send_all(fd, &nack, sizeof(nack), bagua__now_ms() + 500, ctx->abort_flag);
    }
    close(fd);
  }
  return BAGUA_OK;
}

bagua_status_t bagua__bootstrap_tcp(void *arg, const bagua__boot_ctx_t *ctx,
                                    bagua__endpoint_t *mine, bagua__endpoint_t *all) {
  const bagua__boot_tcp_t *cfg = arg;
  bagua_status_t st = BAGUA_OK;
  if (ctx->size == 1) {
    all[0] = *mine;
    return BAGUA_OK;
  }
  if (ctx->rank == 0) {
    int lfd = -1, *fds = NULL;
    if (mine->addr == 0) mine->addr = cfg->master_addr;
    BAGUA_CHECK(bagua__listen(cfg->master_addr, cfg->master_port, &lfd, NULL));
    fds = malloc(sizeof(int) * (size_t)ctx->size);
    if (!fds) {
      close(lfd);
      return BAGUA_ERR_NO_MEMORY;
    }
    for (int i = 0; i < ctx->size; i++) fds[i] = -1;
    all[0] = *mine;
    BAGUA_CHECK_GOTO(root_gather(lfd, ctx, all, fds), st, done);
    for (int r = 1; r < ctx->size; r++) {
      bagua__wire_hdr_t h = make_hdr(ctx, BAGUA_MSG_BOOT_TABLE, 0);
      BAGUA_CHECK_GOTO(bagua__send_all(fds[r], &h, sizeof(h), ctx->deadline_ms, ctx->abort_flag),
                       st, done);
      BAGUA_CHECK_GOTO(bagua__send_all(fds[r], all, sizeof(*all) * (size_t)ctx->size,
                                       ctx->deadline_ms, ctx->abort_flag),
                       st, done);
    }
  done:
    for (int i = 0; i < ctx->size; i++)
      if (fds[i] >= 0) close(fds[i]);
    free(fds);
    close(lfd);
    return st;
  }
  int fd = -1;
  char ip[32];
  bagua__ipv4_str(cfg->master_addr, ip, sizeof(ip));
  BAGUA_CHECK(
      bagua__connect(cfg->master_addr, cfg->master_port, ctx->deadline_ms, ctx->abort_flag, &fd));
  if (mine->addr == 0) mine->addr = bagua__sock_local_addr(fd);
  bagua__wire_hdr_t h = make_hdr(ctx, BAGUA_MSG_BOOT_HELLO, 0);
  BAGUA_CHECK_GOTO(bagua__send_all(fd, &h, sizeof(h), ctx->deadline_ms, ctx->abort_flag), st, fail);
  BAGUA_CHECK_GOTO(bagua__send_all(fd, mine, sizeof(*mine), ctx->deadline_ms, ctx->abort_flag), st,
                   fail);
  st = bagua__recv_all(fd, &h, sizeof(h), ctx->deadline_ms, ctx->abort_flag);
  if (st != BAGUA_OK) {
    BAGUA_WARN("bootstrap: no answer from rank 0 at %s:%u (%s)", ip, (unsigned)cfg->master_port,
               bagua_strerror(st));
    goto fail;
  }
  if (h.magic != BAGUA_WIRE_MAGIC || h.type == BAGUA_MSG_BOOT_NACK) {
    BAGUA_WARN("bootstrap: rank 0 at %s:%u refused rank %d: %s", ip, (unsigned)cfg->master_port,
               ctx->rank, h.magic == BAGUA_WIRE_MAGIC ? refuse_text(h.arg) : "bad magic");
    st = BAGUA_ERR_PROTOCOL;
    goto fail;
  }
  if (h.type != BAGUA_MSG_BOOT_TABLE || h.size != ctx->size) {
    BAGUA_WARN("bootstrap: unexpected reply type %u from rank 0", h.type);
    st = BAGUA_ERR_PROTOCOL;
    goto fail;
  }
  BAGUA_CHECK_GOTO(
      bagua__recv_all(fd, all, sizeof(*all) * (size_t)ctx->size, ctx->deadline_ms, ctx->abort_flag),
      st, fail);
fail:
  close(fd);
  return st;
}
