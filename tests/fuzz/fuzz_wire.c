/*
 * The handshake check of the bootstrap and the TCP transport (comm/bootstrap_tcp.c,
 * bagua__wire_check): whatever 40 bytes a peer sends, the header is either accepted with a
 * rank in range, or refused with a reason and a sentence.
 *
 * Input: the header as it arrives on the socket, then the receiver's expectations
 * (job hash, communicator id, world size). Short inputs are zero-padded. When the handshake
 * grows (authentication), extend `expect_t` and the call below; the corpus stays valid
 * because missing bytes read as zero.
 */
#include "comm/bootstrap.h"
#include "fuzz.h"

typedef struct {
  uint64_t job_hash, comm_id;
  int32_t size;
  uint32_t type;
} expect_t;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  fuzz_quiet_log();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  unsigned char buf[sizeof(bagua__wire_hdr_t) + sizeof(expect_t)] = {0};
  memcpy(buf, data, size < sizeof(buf) ? size : sizeof(buf));
  bagua__wire_hdr_t h;
  expect_t e;
  memcpy(&h, buf, sizeof(h));
  memcpy(&e, buf + sizeof(h), sizeof(e));
  /* A receiver knows its own world size: at least 1. */
  if (e.size < 1) e.size = 1;
  uint32_t reason = 12345;
  char why[160];
  why[0] = '\0';
  int bad = bagua__wire_check(&h, e.type, e.job_hash, e.comm_id, e.size, &reason, why, sizeof(why));
  if (!bad) {
    FUZZ_ASSERT(reason == 0);
    FUZZ_ASSERT(h.magic == BAGUA_WIRE_MAGIC && h.version == BAGUA_WIRE_VERSION);
    FUZZ_ASSERT(h.type == e.type && h.job_hash == e.job_hash && h.comm_id == e.comm_id);
    FUZZ_ASSERT(h.size == e.size && h.rank >= 0 && h.rank < e.size);
  } else {
    FUZZ_ASSERT(bad == -1 && why[0] != '\0' && strlen(why) < sizeof(why));
    /* Bad magic: not our protocol, so no reply (reason 0); otherwise a known reason. */
    if (h.magic != BAGUA_WIRE_MAGIC)
      FUZZ_ASSERT(reason == 0);
    else
      FUZZ_ASSERT(reason >= BAGUA_REFUSE_JOB && reason <= BAGUA_REFUSE_COMM);
  }
  return 0;
}
