"""The listeners a torch script opens under bagua-launch on one host: torch.distributed still
works (Gloo collectives and new groups), and every listening socket of every worker is bound
to loopback, so no unauthenticated store or Gloo port is reachable from another host."""

import os
import re
import subprocess
import sys
import textwrap

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
    print(f"RESULT rank={rank} gloo={t.item():g} listening={','.join(listening())}",
          flush=True)
    dist.barrier()
    """)

RESULT = re.compile(r"RESULT rank=(\d+) gloo=(\S+) listening=(\S*)")


def is_loopback(hex_addr):
    """Whether a /proc/net/tcp{,6} local address (HEXIP:HEXPORT) is a loopback address."""
    ip = hex_addr.split(":")[0]
    if len(ip) == 8:                       # IPv4, little-endian: 127.x.x.x ends in 7F
        return ip.endswith("7F")
    return ip in ("00000000000000000000000001000000",          # ::1
                  ) or ip.startswith("0000000000000000FFFF0000") and ip.endswith("7F")


def test_one_host_job_listens_on_loopback_only(tmp_path):
    (tmp_path / "worker.py").write_text(WORKER)
    proc = subprocess.run(
        [sys.executable, "-m", "bagua.distributed.launch", "--nproc_per_node", "2",
         "worker.py"], cwd=tmp_path, env=dict(os.environ, OMP_NUM_THREADS="1"),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=90)
    assert proc.returncode == 0, proc.stdout
    found = {int(m[0]): m for m in RESULT.findall(proc.stdout)}
    assert sorted(found) == [0, 1], proc.stdout
    for rank, (_, gloo, addrs) in found.items():
        assert float(gloo) == 6, proc.stdout    # (1 + 2), then doubled by the new group
        wide = [a for a in addrs.split(",") if a and not is_loopback(a)]
        assert not wide, f"rank {rank} listens beyond loopback on {wide}:\n{proc.stdout}"


def test_is_loopback():
    assert is_loopback("0100007F:1F90")
    assert not is_loopback("00000000:1F90")
    assert not is_loopback("0A00020F:1F90")
    assert is_loopback("00000000000000000000000001000000:1F90")
    assert not is_loopback("00000000000000000000000000000000:1F90")
