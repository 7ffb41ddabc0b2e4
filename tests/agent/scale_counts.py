#!/usr/bin/python3
"""The control plane's costs as counts that do not depend on the machine: 64 real agents
against a real etcd (bench/scale.py's harness), etcd's own request counters by method, and
the sockets each agent holds.

  form    no request per peer (LeaseTimeToLive: 0) and O(1) requests per node
  steady  nothing but lease keep-alives, at most one per node per TTL/3
  kill    4 nodes SIGKILLed: one lease revocation per dead node, O(N) requests in all
  join    4 nodes join: O(N) requests in all
  leader  the leader SIGKILLed: a few campaigns (transactions), not one per survivor
and at most 8 liveness sockets per agent. The bounds are a few times the counts measured
(docs/scale.md) and far below the N(N-1) of a design that asks about every peer: at 64
nodes that is 4,032 requests to form, where these bounds allow 14 per node.

Usage: scale_counts.py --build BUILD_DIR   (exit 77: etcd is not installed)
"""

import argparse
import math
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
import scale  # noqa: E402

N = 64
TTL_S = 10
# Transactions after the leader's death: the round and the assignments (about 6), and the
# campaigns of the round's first members (3) or of one more tier; one per survivor was 69.
TXN_LEADER_KILL = 24


def fail(msg):
    print(f"FAIL scale_counts: {msg}")
    sys.exit(1)


def requests(a, b, skip=("LeaseKeepAlive",)):
    """{method: count} between two readings, and their total without SKIP."""
    per, _, _ = scale.delta(a.metrics, b.metrics)
    per = {k: int(v) for k, v in per.items() if v}
    return per, sum(v for k, v in per.items() if k not in skip)


def at_most(what, got, bound):
    print(f"  {what}: {got} (bound {bound})")
    if got > bound:
        fail(f"{what}: {got}, more than {bound}")


class Args:
    """What scale.BaguaJob reads of the bench's arguments."""

    def __init__(self, build):
        self.build = build
        self.agent_arg = ["--lease-ttl", str(TTL_S)]
        self.timeout = 120


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    args = ap.parse_args()
    if not shutil.which("etcd"):
        print("SKIP scale_counts: etcd is not installed (Debian: etcd-server)")
        return 77
    tmp = tempfile.mkdtemp(prefix="scale-counts-")
    etcd = scale.Etcd(tmp)
    k = 4
    job = scale.BaguaJob(Args(args.build), etcd, tmp, N - k, N + k)
    try:
        nodes = [f"n{i:05d}" for i in range(N)]
        a = scale.Reading(etcd, [])
        for i in range(N):
            job.start(i)
        seen = job.marks.wait_all(set(nodes), 0, 120)
        if not seen:
            fail(f"{N} agents did not form a round within 120 s")
        b = scale.Reading(etcd, [])
        per, total = requests(a, b)
        print(f"form: round {seen[1]} with all {N} nodes; requests {per}")
        at_most("LeaseTimeToLive to form (none: no request per peer)",
                per.get("LeaseTimeToLive", 0), 0)
        at_most("requests to form, keep-alives aside", total, 14 * N)
        at_most("Range requests to form", per.get("Range", 0), 2 * N)
        # At rest: nothing but renewals, one per node per TTL/3 (and one more in flight).
        time.sleep(3)
        pids = job.pids()
        a = scale.Reading(etcd, pids)
        time.sleep(10)
        b = scale.Reading(etcd, pids)
        per, total = requests(a, b)
        span = b.t - a.t
        print(f"steady {span:.1f} s: requests {per}")
        at_most("requests at rest other than keep-alives", total, 0)
        at_most("keep-alives at rest", per.get("LeaseKeepAlive", 0),
                N * (math.ceil(span / (TTL_S / 3)) + 1))
        tcp = scale.tcp_table()
        live = max(scale.proc_counts(p, etcd.port, tcp)[3] for p in pids)
        at_most("liveness sockets of one agent", live, 8)
        # Kill k nodes that are not the leader: one revocation each, O(N) in all.
        leader = etcd.get(f"/bagua/{job.job}/leader")
        # Spread over the registrations, with spares: the leader may be one of the first
        # picks, and k victims must still die (else k revocations cannot be asked for).
        victims = [x for x in nodes[3::N // k] + nodes[4::N // k] if x != leader][:k]
        if len(victims) != k:
            fail(f"could not pick {k} victims other than the leader {leader}")
        survivors = [x for x in nodes if x not in victims]
        a = scale.Reading(etcd, [])
        for v in victims:
            job.kill(v)
        seen2 = job.marks.wait_all(set(survivors), seen[1], 120)
        if not seen2:
            fail(f"the survivors of {k} SIGKILLed nodes did not run a new round within 120 s")
        time.sleep(1)  # a late revocation would come within the settle window and a margin
        b = scale.Reading(etcd, [])
        per, total = requests(a, b)
        print(f"kill {k}: round {seen2[1]}; requests {per}")
        at_most(f"lease revocations for {k} dead nodes", per.get("LeaseRevoke", 0), k)
        if per.get("LeaseRevoke", 0) < k:
            fail(f"{per.get('LeaseRevoke', 0)} revocations for {k} dead nodes: some were left to "
                 "their leases")
        at_most("requests for the change, keep-alives aside", total, 3 * N)
        # Join k: O(N) in all (each member acknowledges, the leader assigns).
        joiners = [f"n{N + i:05d}" for i in range(k)]
        a = scale.Reading(etcd, [])
        for i in range(k):
            job.start(N + i)
        seen3 = job.marks.wait_all(set(survivors + joiners), seen2[1], 120)
        if not seen3:
            fail(f"{k} joiners were not running within 120 s")
        b = scale.Reading(etcd, [])
        per, total = requests(a, b)
        print(f"join {k}: round {seen3[1]}; requests {per}")
        at_most("requests for the change, keep-alives aside", total, 3 * N)
        at_most("re-registrations and dropped members", job.dropped(), 0)
        # Kill the leader: the round's first members campaign, the others only a tier later
        # if no leader came (agent/ring.h), so a few transactions, not one per survivor; the
        # survivors' checks of the new leader's record spread over the tiers.
        leader = etcd.get(f"/bagua/{job.job}/leader")
        rest = [x for x in survivors + joiners if x != leader]
        a = scale.Reading(etcd, [])
        job.kill(leader)
        seen4 = job.marks.wait_all(set(rest), seen3[1], 120)
        if not seen4:
            fail(f"the survivors of the leader {leader} did not run a new round within 120 s")
        time.sleep(2)  # the last tier's checks come within a second
        b = scale.Reading(etcd, [])
        per, total = requests(a, b)
        new_leader = etcd.get(f"/bagua/{job.job}/leader")
        print(f"kill the leader {leader}: round {seen4[1]}, new leader {new_leader}; "
              f"requests {per}")
        at_most("transactions after the leader's death", per.get("Txn", 0), TXN_LEADER_KILL)
        at_most("requests for the change, keep-alives aside", total, 3 * N)
        # Every record of this job is sound: no agent (a joiner's first probe included)
        # rejects one.
        rejected = 0
        for name in os.listdir(job.logdir):
            with open(os.path.join(job.logdir, name), errors="replace") as f:
                rejected += f.read().count("rejecting")
        at_most("records rejected by the agents", rejected, 0)
    finally:
        job.stop()
        etcd.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print("PASS scale_counts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
