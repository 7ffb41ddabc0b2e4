"""Upstream Bagua's process group tests on CPU tensors, on 4 ranks of the compat harness.

Edits from upstream: the imports, ``.cuda()`` dropped, the CUDA skip decorators removed and 4
ranks instead of the GPU count. ``test_bagua_pg`` (``pg.bagua_patch()`` on a torch group)
runs on Gloo here, on 4 ranks as upstream's, but on this harness: upstream runs it on torch's
internal multi-process test case, which needs the ``expecttest`` package (not installed);
its NCCL environment variables have no use on Gloo and are left out. The statements of the
test body are upstream's.
"""
import os
import unittest

import torch
import torch.distributed as c10d

import bagua.torch_api as bagua
from harness import find_free_port
from harness import MultiProcessTestCase, setup_bagua_env


class Result(object):
    def __init__(self):
        self.data = torch.zeros(100)


def run_new_group(rank, nprocs, args, results, env):
    setup_bagua_env(rank, env)

    all_ranks = list(range(nprocs))
    odd_ranks = list(filter(lambda r: r % 2 == 1, all_ranks))
    g = bagua.communication.new_group(ranks=odd_ranks)

    tensor = torch.rand(100)
    tensor *= rank

    bagua.communication.allreduce(tensor, tensor, comm=g.get_global_communicator())
    results[rank].data.copy_(tensor)


def run_from_torch_group(rank, nprocs, args, results, env):
    setup_bagua_env(rank, env)

    all_ranks = list(range(nprocs))
    ranks_1 = list(filter(lambda r: r % 3 == 1, all_ranks))
    ranks_2 = list(filter(lambda r: r % 2 == 0, all_ranks))

    g_1 = torch.distributed.new_group(ranks_1)
    bg_1 = bagua.communication.from_torch_group(g_1)

    g_2 = torch.distributed.new_group(ranks_2)
    bg_2 = bagua.communication.from_torch_group(g_2)

    if rank in ranks_1:
        assert torch.distributed.get_rank(g_1) == bg_1.get_global_communicator().rank()
        assert (
            torch.distributed.get_world_size(g_1)
            == bg_1.get_global_communicator().nranks()  # noqa: W503
        )

    if rank in ranks_2:
        assert torch.distributed.get_rank(g_2) == bg_2.get_global_communicator().rank()
        assert (
            torch.distributed.get_world_size(g_2)
            == bg_2.get_global_communicator().nranks()  # noqa: W503
        )


class TestProcessGroup(MultiProcessTestCase):
    def test_new_group(self):
        nprocs = 4
        results = [Result() for _ in range(nprocs)]
        self.run_test_locally(run_new_group, nprocs, args={}, results=results)

        all_ranks = list(range(nprocs))
        odd_ranks = list(filter(lambda r: r % 2 == 1, all_ranks))

        for rank in odd_ranks:
            peer_rank = (rank + 2) % nprocs

            self.assertTrue(torch.equal(results[rank].data, results[peer_rank].data))

    def test_from_torch_group(self):
        nprocs = 4
        self.run_test_locally(run_from_torch_group, nprocs, args={}, results=None)


def run_bagua_pg(rank, nprocs, args, results, env):
    setup_bagua_env(rank, env, init=False)
    os.environ.update(
        {
            "WORLD_SIZE": str(nprocs),
            "LOCAL_WORLD_SIZE": str(nprocs),
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
        }
    )

    bagua.init_process_group()
    pg = c10d.new_group(ranks=list(range(0, nprocs)))
    pg.bagua_patch()
    assert pg in bagua.communication._torch_to_bagua_pg_map
    del pg
    c10d.destroy_process_group()
    assert len(bagua.communication._torch_to_bagua_pg_map) == 0


class ProcessGroupNCCLTest(MultiProcessTestCase):
    def test_bagua_pg(self):
        env = {
            "WORLD_SIZE": "4",
            "LOCAL_WORLD_SIZE": "4",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(find_free_port(8000, 8100)),
            "BAGUA_SERVICE_PORT": str(find_free_port(9000, 9100)),
        }
        self.run_test_locally(run_bagua_pg, 4, args={}, results=None, env=env)


if __name__ == "__main__":
    unittest.main()
