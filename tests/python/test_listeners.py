"""The listeners a torch script opens under bagua-launch on one host: torch.distributed still
works (Gloo collectives and new groups), and every listening socket of every worker is bound
to loopback, so no unauthenticated store or Gloo port is reachable from another host. On a job
that spans nodes (two agents, each its own node, on a real etcd) torch's store lives in the
job's etcd: no worker listens on MASTER_PORT, and torch.distributed works. The store itself
(bagua._C.Store and the EtcdStore on it) is checked against the same etcd. On env:// with a
job secret (BAGUA_JOB_SECRET) no TCPStore listens on MASTER_PORT and a stranger's store client
is refused, and ranks on several hosts without the job's etcd are refused with the reason."""

import datetime
import os
import re
import subprocess
import sys
import textwrap
import time

import pytest
import torch.distributed as dist

from bagua import _C
from bagua.torch_api import _store
from conftest import AGENT, registered, run_module

WORKER = textwrap.dedent("""\
    import os

    import torch
    import torch.distributed as dist

    import bagua.torch_api as bagua


    def listening():
        # Socket inodes of this process, then the listening rows of /proc/net/tcp{,6}.
        mine = set()
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                mine.add(target[8:-1])
        found = []
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            with open(table) as f:
                for row in list(f)[1:]:
                    cols = row.split()
                    if cols[3] == "0A" and cols[9] in mine:
                        found.append(cols[1])
        return found


    bagua.init_process_group()
    rank = bagua.get_rank()
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    group = dist.new_group([0, 1])
    dist.all_reduce(t, group=group)
    store = dist.distributed_c10d._get_default_store()
    store = type(getattr(store, "underlying_store", store)).__name__
    print(f"RESULT rank={rank} gloo={t.item():g} listening={','.join(listening())} "
          f"master_port={os.environ.get('MASTER_PORT')} store={store}", flush=True)
    dist.barrier()
    """)

RESULT = re.compile(r"RESULT rank=(\d+) gloo=(\S+) listening=(\S*) master_port=(\d+) "
                    r"store=(\S+)")


def is_loopback(hex_addr):
    """Whether a /proc/net/tcp{,6} local address (HEXIP:HEXPORT) is a loopback address."""
    ip = hex_addr.split(":")[0]
    if len(ip) == 8:                       # IPv4, little-endian: 127.x.x.x ends in 7F
        return ip.endswith("7F")
    return ip in ("00000000000000000000000001000000",          # ::1
                  ) or ip.startswith("0000000000000000FFFF0000") and ip.endswith("7F")


def test_one_host_job_listens_on_loopback_only(tmp_path):
    (tmp_path / "worker.py").write_text(WORKER)
    proc = run_module(tmp_path, "bagua.distributed.launch", "--nproc_per_node", "2", "worker.py")
    assert proc.returncode == 0, proc.stdout
    found = {int(m[0]): m for m in RESULT.findall(proc.stdout)}
    assert sorted(found) == [0, 1], proc.stdout
    for rank, (_, gloo, addrs, _, _) in found.items():
        assert float(gloo) == 6, proc.stdout    # (1 + 2), then doubled by the new group
        wide = [a for a in addrs.split(",") if a and not is_loopback(a)]
        assert not wide, f"rank {rank} listens beyond loopback on {wide}:\n{proc.stdout}"


def test_is_loopback():
    assert is_loopback("0100007F:1F90")
    assert not is_loopback("00000000:1F90")
    assert not is_loopback("0A00020F:1F90")
    assert is_loopback("00000000000000000000000001000000:1F90")
    assert not is_loopback("00000000000000000000000000000000:1F90")


def test_multi_node_job_keeps_the_store_in_etcd(tmp_path, etcd):
    if not os.access(AGENT, os.X_OK):
        pytest.skip("bagua-agent not built")
    (tmp_path / "worker.py").write_text(WORKER)
    job = f"store-{os.getpid()}"
    procs = []
    try:
        for node in ("n1", "n2"):
            procs.append(subprocess.Popen(
                [AGENT, "--rdzv-endpoint", etcd, "--job-id", job, "--node-id", node,
                 "--nnodes", "2", "--nproc-per-node", "1", "--max-restarts", "0", "--",
                 sys.executable, str(tmp_path / "worker.py")],
                cwd=tmp_path, env=dict(os.environ, OMP_NUM_THREADS="1"),
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
            deadline = time.monotonic() + 30
            while not registered(etcd, job, node):  # n1 first: it holds rank 0
                assert time.monotonic() < deadline, f"{node} did not register"
                time.sleep(0.05)
        outs = [p.communicate(timeout=120)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    out = "\n".join(outs)
    assert all(p.returncode == 0 for p in procs), out
    found = {int(m[0]): m for m in RESULT.findall(out)}
    assert sorted(found) == [0, 1], out
    for rank, (_, gloo, addrs, master_port, store) in found.items():
        assert float(gloo) == 6, out
        assert store == "EtcdStore", out
        ports = {int(a.split(":")[1], 16) for a in addrs.split(",") if a}
        assert int(master_port) not in ports, f"rank {rank} listens on MASTER_PORT:\n{out}"


def test_etcd_store_operations(etcd):
    a = _store.EtcdStore(etcd, "store-ops", 3)
    b = _C.Store(etcd, "store-ops", 3, 5000)
    a.set("k", b"v1")
    assert b.get("k", 0) == b"v1" and a.get("k") == b"v1"
    assert a.add("n", 2) == 2 and a.add("n", -5) == -3 and b.get("n", 0) == b"-3"
    assert a.compare_set("k", b"v1", b"v2") == b"v2"
    assert a.compare_set("k", b"nope", b"v3") == b"v2"
    assert a.compare_set("new", b"", b"x") == b"x"
    assert a.compare_set("absent", b"e", b"y") == b"e" and not a.check(["absent"])
    assert a.check(["k", "n"]) and not a.check(["k", "missing"])
    assert a.num_keys() == 3
    assert a.delete_key("k") and not a.delete_key("k")
    other_round = _C.Store(etcd, "store-ops", 4, 5000)
    assert other_round.count() == 0  # each round has its own keys
    with pytest.raises(_C.BaguaInvalidArgError):
        a.add("new", 1)  # holds "x"
    t0 = time.monotonic()
    with pytest.raises(_C.BaguaTimeoutError):
        b.get("never", 300)
    assert 0.25 < time.monotonic() - t0 < 5
    a.set_timeout(datetime.timedelta(milliseconds=200))
    with pytest.raises(_C.BaguaTimeoutError):
        a.wait(["never"])
    for bad in (lambda: _C.Store(etcd, "a/b", 0, 1000), lambda: _C.Store(etcd, "j", -1, 1000),
                lambda: _C.Store(etcd, "j", 0, 0), lambda: b.set("", b"x"),
                lambda: b.set("k" * 513, b"x")):
        with pytest.raises(_C.BaguaInvalidArgError):
            bad()


def test_etcd_store_carries_a_gloo_group(etcd):
    """torch.distributed's own set-up on the store, one process (world 1) for speed; the
    two-node job above covers two ranks."""
    store = _store.EtcdStore(etcd, "store-gloo", 0)
    assert not dist.is_initialized()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        dist.barrier()
        assert store.num_keys() >= 1
    finally:
        dist.destroy_process_group()


SECRET = "0123456789abcdef" * 4

# WORKER, then a stranger (rank 1 here, holding no secret of its own) tries torch's TCPStore
# client on MASTER_PORT, where torch's env:// store would listen.
assert WORKER.endswith("dist.barrier()\n")
STRANGER = WORKER[:-len("dist.barrier()\n")] + textwrap.dedent("""\
    if rank == 1:
        import datetime
        try:
            peer = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), 2,
                                 False, timeout=datetime.timedelta(seconds=3))
            peer.set("stranger", "x")
            print("STRANGER wrote a key", flush=True)
        except Exception as e:
            print(f"STRANGER refused: {type(e).__name__}", flush=True)
    dist.barrier()
    """)


def test_env_bootstrap_with_a_job_secret_opens_no_tcp_store(workers, tmp_path):
    """BAGUA_BOOTSTRAP=env:// (the default) with a job secret, as bagua-launch's workers have
    it: torch's store is not an unauthenticated TCPStore on MASTER_PORT, and the job works."""
    script = tmp_path / "stranger.py"
    script.write_text(STRANGER)
    result = workers(str(script), 2, env={"BAGUA_JOB_SECRET": SECRET,
                                          "BAGUA_BOOTSTRAP": "env://"}).check()
    out = "\n".join(result.outputs)
    found = {int(m[0]): m for m in RESULT.findall(out)}
    assert sorted(found) == [0, 1], out
    for rank, (_, gloo, addrs, master_port, store) in found.items():
        assert float(gloo) == 6, out
        assert store != "TCPStore", out
        ports = {int(a.split(":")[1], 16) for a in addrs.split(",") if a}
        assert int(master_port) not in ports, f"rank {rank} listens on MASTER_PORT:\n{out}"
    assert "STRANGER refused" in out, out


def test_env_bootstrap_with_a_job_secret_across_hosts_is_refused(workers, tmp_path):
    """Across (emulated) hosts without the job's etcd there is no store that needs no open
    listener: every rank refuses, naming the reason, instead of opening a TCPStore."""
    script = tmp_path / "stranger.py"
    script.write_text(STRANGER)
    env = {"BAGUA_JOB_SECRET": SECRET, "BAGUA_BOOTSTRAP": "env://", "BAGUA_RDZV_ENDPOINT": "",
           "BAGUA_JOB_ID": ""}
    result = workers(str(script), 2, env=env, nodes=2, timeout=120)
    for code, out in zip(result.codes, result.outputs):
        assert code != 0, out
        assert "BAGUA_JOB_SECRET" in out and "TCPStore" in out, out
        assert "RESULT" not in out, out
