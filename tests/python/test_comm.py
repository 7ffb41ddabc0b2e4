"""Communication primitives of bagua.torch_api against a numpy oracle, every dtype and op,
odd sizes, on 1, 2 and 3 ranks (3: an odd world, ranks on separate emulated nodes)."""

import pytest


@pytest.mark.parametrize("nranks,nodes", [(1, 1), (2, 1), (3, 3)])
def test_primitives_match_numpy(workers, nranks, nodes):
    workers("comm_worker.py", nranks, nodes=nodes).check()
