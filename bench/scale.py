#!/usr/bin/python3
"""The control plane at size: N bagua-agents on this host against one etcd.

Every agent is an emulated node (its own --node-id and loopback address 127.1.x.y) running
one trivial worker, a shell that leaves a marker file naming its round and then blocks. One
run of a size goes through four phases:

  form    all N agents are started; the time from the last start until every one of them
          runs a worker in one common round
  steady  nothing changes for --steady-s seconds: etcd's requests, bytes and CPU, and the
          agents' CPU, per second
  kill    5 % of the nodes (agent and worker) are SIGKILLed: the time until every survivor
          runs a worker in a round without them
  join    as many new agents start: the time until every member runs in a round with them
  kill_leader  the leader alone is SIGKILLed: the time until every other node runs a worker
          in the round the next leader forms

The requests come from etcd's own /metrics (grpc_server_started_total by method: a watch
or keep-alive stream counts once, as its HTTP request does), bytes from its gRPC byte
counters, CPU from /proc. Sockets and descriptors are counted per agent in the steady
phase. The same phases run for torchrun's c10d agent as the peer (--peers torchrun), where
the sizes fit in memory.

Usage: bench/scale.sh [--build DIR] [--repeat K] [--steady-s S] [--peers torchrun]
                      [--record-dir DIR] N [N ...]
"""

import argparse
import base64
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import record  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.sysconf("SC_PAGE_SIZE")

COLUMNS = [
    "nodes", "phase", "seconds:s", "rounds", "requests", "requests_per_node",
    "range", "txn", "put", "watch", "lease_grant", "lease_keepalive", "lease_revoke",
    "lease_ttl", "other", "sent_bytes:B", "recv_bytes:B", "etcd_cpu:%",
    "agents_cpu:%", "agent_rss:kB", "agent_fds", "agent_sockets", "agent_live_sockets",
    "dropped", "published:s",
    "workers_first:s", "workers_median:s",
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node_addr(i):
    """127.1.x.y for node i, distinct for 64,000 nodes."""
    return f"127.1.{i // 250}.{i % 250 + 1}"


class Etcd:
    """A private etcd on free loopback ports, removed on stop."""

    def __init__(self, tmp):
        self.dir = tempfile.mkdtemp(prefix="etcd-", dir=tmp)
        self.port, peer = free_port(), free_port()
        url, purl = f"http://127.0.0.1:{self.port}", f"http://127.0.0.1:{peer}"
        self.log = open(os.path.join(self.dir, "etcd.log"), "w")
        self.proc = subprocess.Popen(
            ["etcd", "--name", "scale", "--data-dir", os.path.join(self.dir, "data"),
             "--listen-client-urls", url, "--advertise-client-urls", url,
             "--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
             "--initial-cluster", f"scale={purl}", "--heartbeat-interval", "20",
             "--election-timeout", "200", "--logger", "zap", "--log-outputs", "stderr"],
            stdout=self.log, stderr=self.log)
        self.endpoint = f"127.0.0.1:{self.port}"
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                urllib.request.urlopen(f"{url}/health", timeout=1).read()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("etcd did not start; see " + self.log.name)

    def metrics(self):
        """{method: started}, sent bytes, received bytes."""
        text = urllib.request.urlopen(f"http://{self.endpoint}/metrics", timeout=30).read().decode()
        started, sent, recv = {}, 0, 0
        for line in text.splitlines():
            if line.startswith("grpc_server_started_total{"):
                m = re.search(r'grpc_method="(\w+)"', line)
                started[m.group(1)] = started.get(m.group(1), 0) + float(line.split()[-1])
            elif line.startswith("etcd_network_client_grpc_sent_bytes_total"):
                sent += float(line.split()[-1])
            elif line.startswith("etcd_network_client_grpc_received_bytes_total"):
                recv += float(line.split()[-1])
        return started, sent, recv

    def cpu_s(self):
        return cpu_seconds(self.proc.pid)

    def get(self, key):
        """The value of KEY (str), or None."""
        body = json.dumps({"key": base64.b64encode(key.encode()).decode()}).encode()
        req = urllib.request.Request(f"http://{self.endpoint}/v3/kv/range", data=body,
                                     headers={"Content-Type": "application/json"})
        kvs = json.loads(urllib.request.urlopen(req, timeout=30).read()).get("kvs", [])
        return base64.b64decode(kvs[0]["value"]).decode() if kvs else None

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def mem_available_kb():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1])
    return 0


def cpu_seconds(pid):
    """CPU time of a process, all its threads, or 0 when it is gone. The scheduler's own
    runtime (schedstat, in ns) and not utime + stime: those are sampled at the clock tick,
    which charges a process that runs for 100 us a whole 10 ms tick or nothing, and so
    misstates the CPU of a thousand mostly idle agents several times over."""
    total = 0
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                    total += int(f.read().split()[0])
            except (OSError, IndexError, ValueError):
                pass
    except OSError:
        return 0.0
    return total / 1e9


def tcp_table():
    """{socket inode: (local port, remote port, state)} of this host's IPv4 TCP sockets."""
    out = {}
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            col = line.split()
            local, remote, state, inode = col[1], col[2], col[3], int(col[9])
            out[inode] = (int(local.split(":")[1], 16), int(remote.split(":")[1], 16), state)
    return out


def proc_counts(pid, etcd_port, tcp):
    """(rss kB, descriptors, sockets, liveness sockets) of a process. A liveness socket is a
    TCP socket that is not a connection to etcd: the listener and the connections between
    agents (an agent holds no other TCP socket unless its metrics endpoint is on)."""
    rss = fds = socks = live = 0
    try:
        with open(f"/proc/{pid}/statm") as f:
            rss = int(f.read().split()[1]) * PAGE // 1024
        for fd in os.listdir(f"/proc/{pid}/fd"):
            fds += 1
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:"):
                socks += 1
                entry = tcp.get(int(link[8:-1]))
                live += entry is not None and entry[1] != etcd_port
    except OSError:
        pass
    return rss, fds, socks, live


def delta(a, b):
    """Requests by method between two metrics readings."""
    return {k: b[0].get(k, 0) - a[0].get(k, 0) for k in b[0]}, b[1] - a[1], b[2] - a[2]


METHOD_COLUMNS = [("range", "Range"), ("txn", "Txn"), ("put", "Put"), ("watch", "Watch"),
                  ("lease_grant", "LeaseGrant"), ("lease_keepalive", "LeaseKeepAlive"),
                  ("lease_revoke", "LeaseRevoke"), ("lease_ttl", "LeaseTimeToLive")]


class Markers:
    """The marker files the workers leave: <node>.<round>."""

    def __init__(self, path):
        self.path = path

    def rounds_of(self):
        """{round: set of nodes that ran a worker in it}."""
        out = {}
        for name in os.listdir(self.path):
            node, _, rnd = name.rpartition(".")
            if rnd.isdigit():
                out.setdefault(int(rnd), set()).add(node)
        return out

    def spread(self, rnd, wall_start):
        """(first, median, last) second after WALL_START at which a worker of round RND ran."""
        ts = sorted(os.stat(os.path.join(self.path, n)).st_mtime - wall_start
                    for n in os.listdir(self.path) if n.endswith(f".{rnd}"))
        return (ts[0], ts[len(ts) // 2], ts[-1]) if ts else (None, None, None)

    def wait_all(self, nodes, after_round, timeout):
        """Waits until one round newer than AFTER_ROUND has a worker on every node of NODES
        (a set). Returns (monotonic time it was seen, the round, rounds seen since), or None."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            rounds = self.rounds_of()
            for rnd in sorted(rounds):
                if rnd > after_round and nodes <= rounds[rnd]:
                    newer = len([r for r in rounds if r > after_round])
                    return time.monotonic(), rnd, newer
            time.sleep(0.02)
        return None


# The trivial worker: one shell that leaves its marker and then blocks opening a FIFO nobody
# writes, until the agent stops it (a "sleep" would cost every worker a second exec).
WORKER = 'echo > "$SCALE_MARKS/$BAGUA_NODE_ID.$BAGUA_ROUND"; read x < "$SCALE_MARKS/.block"'


class BaguaJob:
    """N bagua-agents of one job."""

    def __init__(self, args, etcd, tmp, nmin, nmax):
        self.args, self.etcd, self.tmp = args, etcd, tmp
        self.agent = os.path.join(args.build, "agent", "bagua-agent")
        self.marks = Markers(tempfile.mkdtemp(prefix="marks-", dir=tmp))
        os.mkfifo(os.path.join(self.marks.path, ".block"))
        self.logdir = tempfile.mkdtemp(prefix="logs-", dir=tmp)
        self.nmin, self.nmax = nmin, nmax
        self.procs = {}  # node -> Popen
        self.job = f"scale{nmax}"

    def start(self, i):
        node = f"n{i:05d}"
        env = dict(os.environ, SCALE_MARKS=self.marks.path)
        log = open(os.path.join(self.logdir, node + ".log"), "w")
        self.procs[node] = subprocess.Popen(
            [self.agent, "--rdzv-endpoint", self.etcd.endpoint, "--job-id", self.job,
             "--node-id", node, "--node-addr", node_addr(i), "--nnodes",
             f"{self.nmin}:{self.nmax}", "--nproc-per-node", "1", "--grace-ms", "1000",
             *self.args.agent_arg, "--", "/bin/sh", "-c", WORKER],
            stdout=log, stderr=log, env=env, start_new_session=True)
        log.close()
        return node

    def kill(self, node):
        """SIGKILL of the node: the agent (its worker dies with it: parent-death signal)."""
        p = self.procs.pop(node)
        p.kill()
        p.wait()

    def pids(self):
        return [p.pid for p in self.procs.values()]

    def stop(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        for p in self.procs.values():
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def published_after(self, wall_start):
        """Seconds from WALL_START (time.time()) to the current round's publication."""
        value = self.etcd.get(f"/bagua/{self.job}/round")
        return json.loads(value)["time_ms"] / 1000.0 - wall_start if value else None

    def dropped(self):
        """How many agents registered again or dropped a member (their logs say so)."""
        n = 0
        for name in os.listdir(self.logdir):
            with open(os.path.join(self.logdir, name), errors="replace") as f:
                text = f.read()
            n += text.count("registering again") + text.count("dropped node")
        return n


def agents_cpu(pids):
    return sum(cpu_seconds(p) for p in pids)


def put_row(rec, variant, rep, **vals):
    """One raw.csv row from column=value pairs (columns not given are empty)."""
    names = [c.split(":")[0] for c in COLUMNS]
    unknown = set(vals) - set(names)
    if unknown:
        raise ValueError(f"scale: no column {sorted(unknown)}")
    rec.row(variant, rep, *[vals.get(n) for n in names])


class Reading:
    """What etcd's counters and the CPU clocks say at one moment."""

    def __init__(self, etcd, pids):
        self.metrics = etcd.metrics()
        self.etcd_cpu = etcd.cpu_s()
        self.agents_cpu = agents_cpu(pids)
        self.t = time.monotonic()


def phase_row(rec, variant, rep, n, phase, secs, rounds, a, b, counts, dropped, published=None,
              spread=None):
    """One raw.csv row for a phase between readings A and B (CPU of the agents that lived
    through it, as a share of one core over the phase)."""
    per_method, sent, recv = delta(a.metrics, b.metrics)
    total = sum(per_method.values())
    known = sum(per_method.get(m, 0) for _, m in METHOD_COLUMNS)
    vals = [per_method.get(m, 0) for _, m in METHOD_COLUMNS]
    rss, fds, socks, live = counts if counts else (None, None, None, None)
    span = b.t - a.t
    pct = lambda x: round(100.0 * x / span, 2) if span > 0 else None
    r3 = lambda x: None if x is None else round(x, 3)
    first, median = (spread[0], spread[1]) if spread else (None, None)
    rec.row(variant, rep, n, phase, r3(secs), rounds, int(total), round(total / n, 2),
            *[int(v) for v in vals], int(total - known), int(sent), int(recv),
            pct(b.etcd_cpu - a.etcd_cpu), pct(b.agents_cpu - a.agents_cpu), rss, fds, socks, live,
            dropped, r3(published), r3(first), r3(median))
    return total


def run_bagua(args, rec, n, rep, tmp):
    """One run of the four phases at size n. Returns {phase: seconds}."""
    k = max(1, math.ceil(0.05 * n))
    etcd = Etcd(tmp)
    job = BaguaJob(args, etcd, tmp, n - k, n + k)
    out = {}
    state = {"round": 0}

    def change(phase, act, expect):
        """Runs ACT (which starts or kills nodes), then waits until every node of EXPECT runs
        a worker in one newer round; records the phase. Returns whether it got there."""
        a = Reading(etcd, [p for nd, p in zip(job.procs, job.pids()) if nd in expect])
        act()
        t0, w0 = time.monotonic(), time.time()
        seen = job.marks.wait_all(set(expect), state["round"], args.timeout)
        b = Reading(etcd, [p for nd, p in zip(job.procs, job.pids()) if nd in expect])
        secs = seen[0] - t0 if seen else None
        out[phase] = secs
        pub = job.published_after(w0) if seen else None
        spread = job.marks.spread(seen[1], w0) if seen else None
        phase_row(rec, "bagua", rep, n, phase, secs, seen[2] if seen else None, a, b, None,
                  job.dropped(), pub, spread)
        if not seen:
            print(f"  {phase}: NOT done in {args.timeout:.0f} s", flush=True)
            return False
        state["round"] = seen[1]
        print(f"  {phase}: round {seen[1]} running in {secs:.2f} s (published +{pub:.2f} s, "
              f"workers ran +{spread[0]:.2f}/+{spread[1]:.2f}/+{spread[2]:.2f} s, {seen[2]} "
              f"round(s); etcd {100 * (b.etcd_cpu - a.etcd_cpu) / (b.t - a.t):.0f} %, agents "
              f"{100 * (b.agents_cpu - a.agents_cpu) / (b.t - a.t):.0f} % of a core)", flush=True)
        return True

    try:
        nodes = [f"n{i:05d}" for i in range(n)]
        print(f"  n={n} rep={rep}", flush=True)
        if not change("form", lambda: [job.start(i) for i in range(n)], nodes):
            return out
        # steady: nothing changes
        time.sleep(2)
        pids = job.pids()
        a = Reading(etcd, pids)
        time.sleep(args.steady_s)
        b = Reading(etcd, pids)
        tcp = tcp_table()
        counts = [proc_counts(p, etcd.port, tcp) for p in pids]
        med = lambda xs: sorted(xs)[len(xs) // 2]
        agg = (med([c[0] for c in counts]), max(c[1] for c in counts), max(c[2] for c in counts),
               max(c[3] for c in counts))
        total = phase_row(rec, "bagua", rep, n, "steady", b.t - a.t, 0, a, b, agg, job.dropped())
        span = b.t - a.t
        print(f"  steady {span:.0f} s: {total / span:.1f} etcd req/s, etcd "
              f"{100 * (b.etcd_cpu - a.etcd_cpu) / span:.1f} % CPU, agents "
              f"{100 * (b.agents_cpu - a.agents_cpu) / span:.2f} % CPU, per agent max {agg[1]} "
              f"fds, {agg[2]} sockets ({agg[3]} liveness), median RSS {agg[0]} kB", flush=True)
        victims = nodes[1::max(1, n // k)][:k]
        survivors = [x for x in nodes if x not in victims]
        if not change("kill", lambda: [job.kill(v) for v in victims], survivors):
            return out
        joiners = [f"n{n + i:05d}" for i in range(k)]
        if not change("join", lambda: [job.start(n + i) for i in range(k)],
                      survivors + joiners):
            return out
        # The leader alone: an election, then the new leader's first round.
        leader = etcd.get(f"/bagua/{job.job}/leader")
        rest = [x for x in survivors + joiners if x != leader]
        if leader in job.procs:
            change("kill_leader", lambda: job.kill(leader), rest)
    finally:
        job.stop()
        etcd.stop()
    return out


# torchrun's trivial worker: the same, named by the world it was started in (torchrun gives
# workers no round number; its world changes with every membership change it handles).
TORCH_WORKER = ('echo > "$SCALE_MARKS/$SCALE_NODE.$WORLD_SIZE"; '
                'read x < "$SCALE_MARKS/.block"')


class TorchrunJob:
    """N torchrun agents (c10d rendezvous, the first one hosts the store) of one job: the
    peer. torchrun runs through bench/torchrun_peer.py, which mends the one function that
    keeps Debian's torchrun from starting on Python 3.11."""

    def __init__(self, args, tmp, nmin, nmax):
        self.args, self.nmin, self.nmax = args, nmin, nmax
        self.marks = Markers(tempfile.mkdtemp(prefix="tmarks-", dir=tmp))
        os.mkfifo(os.path.join(self.marks.path, ".block"))
        self.logdir = tempfile.mkdtemp(prefix="tlogs-", dir=tmp)
        self.port = free_port()
        self.procs = {}

    def start(self, i):
        node = f"n{i:05d}"
        env = dict(os.environ, SCALE_MARKS=self.marks.path, SCALE_NODE=node)
        log = open(os.path.join(self.logdir, node + ".log"), "w")
        self.procs[node] = subprocess.Popen(
            ["/usr/bin/python3", os.path.join(ROOT, "bench", "torchrun_peer.py"),
             "--nnodes", f"{self.nmin}:{self.nmax}", "--nproc_per_node", "1",
             "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{self.port}",
             "--rdzv_id", "scale", "--rdzv_conf", "last_call_timeout=1", "--max_restarts", "100",
             "--no_python", "/bin/sh", "-c", TORCH_WORKER],
            stdout=log, stderr=log, env=env, start_new_session=True)
        log.close()
        return node

    def kill(self, node):
        """SIGKILL of the node: the agent and its workers (torchrun sets no parent-death signal:
        the whole session goes)."""
        p = self.procs.pop(node)
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        p.wait()

    def pids(self):
        return [p.pid for p in self.procs.values()]

    def stop(self):
        for p in self.procs.values():
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
        for p in self.procs.values():
            p.wait()


def run_torchrun(args, rec, n, rep, tmp):
    """The same phases for torchrun at size n: form, steady, join 5 %, then kill 5 % (which
    torchrun notices only once a worker fails, and these never do: the phase says how long it
    waited). Returns {phase: seconds}."""
    k = max(1, math.ceil(0.05 * n))
    job = TorchrunJob(args, tmp, n, n + k)
    out = {}

    class NoEtcd:
        """Readings without etcd: only the CPU clocks."""
        def metrics(self):
            return {}, 0, 0

        def cpu_s(self):
            return 0.0

    quiet = NoEtcd()

    def wait(phase, act, expect, after, timeout):
        a = Reading(quiet, [p for nd, p in zip(job.procs, job.pids()) if nd in expect])
        act()
        t0 = time.monotonic()
        seen = job.marks.wait_all(set(expect), after, timeout)
        b = Reading(quiet, [p for nd, p in zip(job.procs, job.pids()) if nd in expect])
        secs = seen[0] - t0 if seen else None
        out[phase] = secs
        put_row(rec, "torchrun", rep, nodes=n, phase=phase,
                seconds=None if secs is None else round(secs, 3),
                rounds=seen[2] if seen else None,
                agents_cpu=round(100.0 * (b.agents_cpu - a.agents_cpu) / (b.t - a.t), 2))
        print(f"  torchrun {phase}: " + (f"world {seen[1]} running in {secs:.2f} s" if seen else
                                         f"no new world within {timeout:.0f} s"), flush=True)
        return seen

    try:
        nodes = [f"n{i:05d}" for i in range(n)]
        print(f"  torchrun n={n} rep={rep}", flush=True)
        seen = wait("form", lambda: [job.start(i) for i in range(n)], nodes, 0, args.timeout)
        if not seen:
            return out
        time.sleep(2)
        pids = job.pids()
        a = Reading(quiet, pids)
        time.sleep(args.steady_s)
        b = Reading(quiet, pids)
        tcp = tcp_table()
        counts = [proc_counts(p, 0, tcp) for p in pids]
        med = lambda xs: sorted(xs)[len(xs) // 2]
        agg = (med([c[0] for c in counts]), max(c[1] for c in counts), max(c[2] for c in counts),
               max(c[3] for c in counts))
        span = b.t - a.t
        put_row(rec, "torchrun", rep, nodes=n, phase="steady", seconds=round(span, 3), rounds=0,
                agents_cpu=round(100.0 * (b.agents_cpu - a.agents_cpu) / span, 2),
                agent_rss=agg[0], agent_fds=agg[1], agent_sockets=agg[2],
                agent_live_sockets=agg[3])
        print(f"  torchrun steady {span:.0f} s: agents "
              f"{100 * (b.agents_cpu - a.agents_cpu) / span:.2f} % CPU, per agent max "
              f"{agg[1]} fds, {agg[2]} sockets, median RSS {agg[0]} kB",
              flush=True)
        joiners = [f"n{n + i:05d}" for i in range(k)]
        seen = wait("join", lambda: [job.start(n + i) for i in range(k)], nodes + joiners,
                    seen[1], args.timeout)
        if not seen:
            return out
        victims = nodes[1::max(1, n // k)][:k]
        survivors = [x for x in nodes + joiners if x not in victims]
        wait("kill", lambda: [job.kill(v) for v in victims], survivors, seen[1],
             min(args.timeout, 30.0))
    finally:
        job.stop()
    return out


def main(argv):
    ap = argparse.ArgumentParser(prog="bench/scale.sh", description=__doc__.split("\n\n")[0])
    ap.add_argument("sizes", nargs="+", type=int, help="node counts to run")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--steady-s", type=float, default=60.0)
    ap.add_argument("--timeout", type=float, default=300.0,
                    help="give up on a phase after this many seconds")
    ap.add_argument("--agent-arg", action="append", default=[],
                    help="one more bagua-agent argument (repeatable)")
    ap.add_argument("--record-dir")
    ap.add_argument("--keep", metavar="DIR",
                    help="keep the agents' logs and the workers' marker files under DIR "
                         "(default: a temporary directory, removed at the end)")
    ap.add_argument("--peers", default="", help="torchrun: run the same phases for torchrun's "
                    "c10d agent too, at the sizes that fit in memory")
    args = ap.parse_args(argv[1:])
    if args.peers not in ("", "torchrun"):
        ap.error(f"--peers {args.peers!r}: accepted: torchrun")
    for n in args.sizes:
        if n < 2 or n > 60000:
            ap.error(f"size {n}: sizes are 2..60000 nodes")
    if args.repeat < 1:
        ap.error("--repeat: 1 or more")
    agent = os.path.join(args.build, "agent", "bagua-agent")
    if not os.access(agent, os.X_OK):
        ap.error(f"--build {args.build}: no bagua-agent there (build first)")
    if not shutil.which("etcd"):
        ap.error("etcd is not installed (Debian: etcd-server)")
    peers = ("torch",) if args.peers else ()
    rec = record.open_record("scale", argv, COLUMNS, path=args.record_dir, peers=peers,
                             extra={"sizes": " ".join(map(str, args.sizes))})
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="bagua-scale-", dir=args.keep)
    status = 1
    results = {}
    try:
        for rep in range(args.repeat):
            for n in args.sizes:
                results.setdefault(("bagua", n), []).append(run_bagua(args, rec, n, rep, tmp))
                # torchrun agents import torch (about 230 MB each): only where they fit.
                if args.peers and n * 300 * 1024 < mem_available_kb():
                    results.setdefault(("torchrun", n), []).append(
                        run_torchrun(args, rec, n, rep, tmp))
                elif args.peers:
                    print(f"  torchrun n={n}: skipped, {n} agents do not fit in memory")
        status = 0
    finally:
        rec.close(status)
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nrecord: {rec.dir}")
    print(f"{'variant':>9} {'nodes':>6} {'form (s)':>22} {'kill 5% (s)':>22} {'join 5% (s)':>22} "
          f"{'kill leader (s)':>22}")
    for (variant, n), runs in results.items():
        cells = [record.stat([r.get(p) if r.get(p) is not None else "fail" for r in runs])
                 for p in ("form", "kill", "join", "kill_leader")]
        print(f"{variant:>9} {n:>6} {cells[0]:>22} {cells[1]:>22} {cells[2]:>22} "
              f"{cells[3]:>22}")
    print(json.dumps({"record": rec.dir}))
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
