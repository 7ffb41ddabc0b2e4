"""Communication primitives of bagua.torch_api against a numpy oracle, every dtype and op,
odd sizes, on 1, 2 and 3 ranks (3: an odd world, ranks on separate emulated nodes)."""

import pytest


@pytest.mark.parametrize("nranks,nodes", [(1, 1), (2, 1), (3, 3)])
def test_primitives_match_numpy(workers, nranks, nodes):
    workers("comm_worker.py", nranks, nodes=nodes).check()


def test_spare_port_binds_below_the_ephemeral_range():
    """The rank-0 bootstrap port (communication._free_port, via libbagua's spare_port): a
    port that binds now, below ip_local_port_range where there is room; a host that does not
    resolve is a ValueError naming it."""
    import socket

    from bagua import _C

    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low = int(f.read().split()[0])
    for host in ("", "127.0.0.1"):
        port = _C.spare_port(host)
        with socket.socket() as s:
            s.bind((host, port))
        if low - max(1024, low - 12000) >= 256:
            assert max(1024, low - 12000) <= port < low, (host, port, low)
    with pytest.raises(ValueError, match="no.such.host.invalid"):
        _C.spare_port("no.such.host.invalid")
