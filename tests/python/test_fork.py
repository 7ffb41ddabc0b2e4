"""Fork after init_process_group is guarded: see workers/fork_worker.py."""

import pytest


@pytest.mark.parametrize("nranks,nodes", [(2, 1), (2, 2)])
def test_fork_after_init(workers, nranks, nodes):
    result = workers("fork_worker.py", nranks, nodes=nodes, timeout=180).check()
    assert all("fork ok" in out for out in result.outputs), result.outputs
