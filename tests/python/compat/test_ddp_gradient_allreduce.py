"""Port of upstream Bagua's ``tests/torch_api/data_parallel/test_gradient_allreduce.py`` to CPU (2
ranks). Mechanical edits: ``tests.internal``/``tests`` imports replaced by the harness's
(``harness``, ``internal_utils``), ``.cuda()``, ``torch.cuda.set_device`` and
``@skip_if_cuda_not_available`` removed, ``torch.cuda.device_count()`` replaced by a fixed rank
count, and the ranks joined with the harness's deadline (``join_processes``) instead of
``p.join(timeout=60)``.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from internal_utils import find_free_port, join_processes
from harness import setup_bagua_env
import unittest
import multiprocessing
from bagua.torch_api.utils import flatten
import bagua.torch_api as bagua
from bagua.torch_api.data_parallel import DistributedDataParallel as DDP


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.fc1 = nn.Linear(2, 10, bias=False)
        self.fc2 = nn.Linear(10, 50, bias=True)
        self.fc3 = nn.Linear(50, 4, bias=False)
        self.relu = nn.ReLU()

    def forward(self, x):
        x = self.relu(self.fc1(x))
        x = self.relu(self.fc2(x))
        x = self.fc3(x)
        return F.softmax(x, dim=1)


def _init_bagua_env(rank, env):
    # set deterministic
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.manual_seed(rank)
    # initialize subprocess env
    setup_bagua_env(rank, env)


def run_model(
    rank,
    nprocs,
    hierarchical,
    results,
    env,
):
    _init_bagua_env(rank, env)

    # construct model and optimizer, etc.
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.MSELoss()

    def run_epochs(num_epochs):
        for epoch in range(num_epochs):
            data = torch.randn(4, 2)
            target = torch.randn(4, 4)

            optimizer.zero_grad()
            output = model(data)
            loss = loss_fn(output, target)

            loss.backward()
            optimizer.step()

    run_epochs(1)

    # wrap model
    model = DDP(
        model,
        optimizers=[optimizer],
        algorithm=bagua.algorithms.gradient_allreduce.GradientAllReduceAlgorithm(
            hierarchical=hierarchical,
        ),
    )

    run_epochs(10)

    ret = results[rank]

    ret._weight.copy_(flatten([param.data for param in model.parameters()]))


class Result(object):
    def __init__(self):
        model = Net()
        self._weight = flatten(
            [torch.zeros_like(param.data) for param in model.parameters()]
        )


class TestGradientAllReduce(unittest.TestCase):
    def run_test_locally(
        self,
        nprocs,
        hierarchical,
    ):
        env = {
            "WORLD_SIZE": str(nprocs),
            "LOCAL_WORLD_SIZE": str(nprocs),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(find_free_port(8000, 8100)),
            "BAGUA_SERVICE_PORT": str(find_free_port(9000, 9100)),
        }

        mp = multiprocessing.get_context("spawn")
        results = [Result() for _ in range(nprocs)]
        processes = []
        for i in range(nprocs):
            p = mp.Process(
                target=run_model,
                args=(
                    i,
                    nprocs,
                    hierarchical,
                    results,
                    env,
                ),
            )
            p.start()
            processes.append(p)

        for code in join_processes(processes):
            self.assertTrue(code == 0)

        for rank in range(nprocs):
            peer_rank = (rank + 1) % nprocs
            # all workers have equal weights
            self.assertTrue(
                torch.equal(
                    results[rank]._weight,
                    results[peer_rank]._weight,
                )
            )

    def test_algorithm(self):
        nprocs = 2
        self.run_test_locally(
            nprocs=nprocs,
            hierarchical=False,
        )


if __name__ == "__main__":
    unittest.main()
