"""Port of upstream Bagua's ``tests/torch_api/test_bagua_module.py`` to CPU (2 ranks). Mechanical
edits: ``tests.internal``/``tests`` imports replaced by the harness's (``harness``,
``internal_utils``), ``.cuda()``, ``torch.cuda.set_device`` and ``@skip_if_cuda_not_available``
removed, ``torch.cuda.device_count()`` replaced by a fixed rank count, and the ranks joined
with the harness's deadline (``join_processes``) instead of ``p.join(timeout=60)``. The unused
``import bagua.torch_api as bagua`` removed (pyflakes).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from internal_utils import find_free_port, join_processes
from harness import setup_bagua_env
import unittest
import multiprocessing


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


def train(model, optimizer, loss_fn, is_async):
    if is_async:
        model.bagua_algorithm.resume(model)

    for _ in range(1000):
        data = torch.randn(4, 2)
        target = torch.randn(4, 4)

        optimizer.zero_grad()
        output = model(data)
        loss = loss_fn(output, target)

        loss.backward()
        optimizer.step()

    if is_async:
        model.bagua_algorithm.abort(model)


def bagua_init(model, optimizer, algorithm, process_group=None):
    # wrap model
    if algorithm == "gradient_allreduce":
        from bagua.torch_api.algorithms import gradient_allreduce

        bagua_algorithm = gradient_allreduce.GradientAllReduceAlgorithm()
    elif algorithm == "bytegrad":
        from bagua.torch_api.algorithms import bytegrad

        bagua_algorithm = bytegrad.ByteGradAlgorithm(hierarchical=False)
    elif algorithm == "decentralized":
        from bagua.torch_api.algorithms import decentralized

        bagua_algorithm = decentralized.DecentralizedAlgorithm(hierarchical=False)
    elif algorithm == "async":
        from bagua.torch_api.algorithms import async_model_average

        bagua_algorithm = async_model_average.AsyncModelAverageAlgorithm(
            sync_interval_ms=20,
        )
    elif algorithm == "low_prec_decentralized":
        from bagua.torch_api.algorithms import decentralized

        bagua_algorithm = decentralized.LowPrecisionDecentralizedAlgorithm(
            hierarchical=False
        )
    elif algorithm == "qadam":
        from bagua.torch_api.algorithms.q_adam import QAdamAlgorithm, QAdamOptimizer

        optimizer = QAdamOptimizer(model.parameters(), warmup_steps=10)
        bagua_algorithm = QAdamAlgorithm(optimizer, hierarchical=False)
    else:
        raise ValueError("unsupported algorithm")

    model = model.with_bagua([optimizer], bagua_algorithm, process_group=process_group)

    return model, optimizer


def run_model_wrapper(rank, nranks, env, algorithm):
    # initialize subprocess env
    setup_bagua_env(rank, env)

    # construct model and optimizer, etc.
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.MSELoss()

    model, optimizer = bagua_init(
        model, optimizer, algorithm
    )

    train(model, optimizer, loss_fn, is_async=(algorithm == "async"))


def run_model_switch_wrapper(rank, nranks, env, algorithms):
    # initialize subprocess env
    setup_bagua_env(rank, env)

    # construct model and optimizer, etc.
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.MSELoss()

    for i in range(len(algorithms)):
        model, optimizer = bagua_init(model, optimizer, algorithms[i])
        train(model, optimizer, loss_fn, is_async=(algorithms[i] == "async"))


class TestBaguaModule(unittest.TestCase):
    def run_algorithm(self, nprocs, nranks, fn, algorithm):
        env = {
            "WORLD_SIZE": str(nprocs),
            "LOCAL_WORLD_SIZE": str(nprocs),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(find_free_port(8000, 8100)),
            "BAGUA_SERVICE_PORT": str(find_free_port(9000, 9100)),
        }

        mp = multiprocessing.get_context("spawn")
        processes = []
        for i in range(nprocs):
            p = mp.Process(target=fn, args=(i, nranks, env, algorithm))
            p.start()
            processes.append(p)

        for code in join_processes(processes):
            self.assertEqual(code, 0)

    def test_gradient_allreduce(self):
        nprocs = 2
        self.run_algorithm(
            nprocs, nprocs - 1, run_model_wrapper, algorithm="gradient_allreduce"
        )

    def test_decentralized(self):
        nprocs = 2
        self.run_algorithm(
            nprocs, nprocs - 1, run_model_wrapper, algorithm="decentralized"
        )

    def test_low_prec_decentralized(self):
        nprocs = 2
        self.run_algorithm(
            nprocs, nprocs - 1, run_model_wrapper, algorithm="low_prec_decentralized"
        )

    def test_async(self):
        nprocs = 2
        self.run_algorithm(nprocs, nprocs - 1, run_model_wrapper, algorithm="async")

    def test_bytegrad(self):
        nprocs = 2
        self.run_algorithm(nprocs, nprocs - 1, run_model_wrapper, algorithm="bytegrad")

    def test_qadam(self):
        nprocs = 2
        self.run_algorithm(nprocs, nprocs - 1, run_model_wrapper, algorithm="qadam")

    def test_model_switch(self):
        nprocs = 2
        algorithms = [
            "bytegrad",
            "decentralized",
            "gradient_allreduce",
            "qadam",
            "async",
            "low_prec_decentralized",
        ]
        self.run_algorithm(nprocs, nprocs - 1, run_model_switch_wrapper, algorithms)


if __name__ == "__main__":
    unittest.main()
