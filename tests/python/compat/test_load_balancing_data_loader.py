"""Port of upstream Bagua's ``tests/contrib/test_load_balancing_data_loader.py`` (CPU, one
process), plus our own cases on several replicas.

Mechanical edit: the ``tests`` import replaced by the harness's.
"""

import unittest
import torch
from torch.utils.data import TensorDataset, DataLoader
from bagua.torch_api.contrib import (
    LoadBalancingDistributedSampler,
    LoadBalancingDistributedBatchSampler,
)
from harness import skip_if_cuda_available


class TestLoadBalancingDataLoader(unittest.TestCase):
    @skip_if_cuda_available()
    def test_load_balancing_distributed_sampler(self):
        n = 10
        dataset = TensorDataset(torch.randn(n, 2), torch.randperm(n))
        sampler = LoadBalancingDistributedSampler(
            dataset, complexity_fn=lambda x: x[1], num_replicas=1, rank=0, shuffle=False
        )

        dataloader = DataLoader(
            dataset,
            batch_size=1,
            shuffle=sampler is None,
            sampler=sampler,
        )

        for i, data in enumerate(dataloader):
            self.assertTrue(i == data[1].item())

    @skip_if_cuda_available()
    def test_load_balancing_distributed_batch_sampler(self):
        num_replicas = 1
        total_batch = 5

        n = sum([i + 1 for i in range(total_batch)]) * num_replicas
        dataset = TensorDataset(torch.randn(n, 2), torch.randperm(n))

        def batch_fn(indices):
            batch = []
            batch_size = 1
            for i in indices:
                batch.append(i)
                if len(batch) == batch_size:
                    yield batch
                    batch = []
                    batch_size += 1
            if len(batch) > 0:
                yield batch

        sampler = LoadBalancingDistributedSampler(
            dataset,
            complexity_fn=lambda x: x[1],
            num_replicas=num_replicas,
            rank=0,
            shuffle=False,
        )

        batch_sampler = LoadBalancingDistributedBatchSampler(
            sampler,
            batch_fn=lambda x: list(batch_fn(x)),
        )

        dataloader = torch.utils.data.DataLoader(dataset, batch_sampler=batch_sampler)

        cur_idx = 0
        for i, data in enumerate(dataloader):
            batch_size = data[0].shape[0]
            self.assertTrue(batch_size == i + 1)
            self.assertTrue(cur_idx == data[1][0].item())

            cur_idx += batch_size * num_replicas


class TestLoadBalancingDataLoaderReplicas(unittest.TestCase):
    """Our own cases: several replicas, computed without a process group."""

    def test_replicas_partition_the_dataset(self):
        n, replicas = 23, 3
        dataset = TensorDataset(torch.randn(n, 2), torch.randperm(n))
        seen = []
        lengths = set()
        for rank in range(replicas):
            sampler = LoadBalancingDistributedSampler(
                dataset, complexity_fn=lambda x: x[1], num_replicas=replicas, rank=rank,
                shuffle=True, seed=3, drop_last=True)
            sampler.set_epoch(1)
            indices = list(sampler)
            lengths.add(len(indices))
            self.assertEqual(len(indices), len(sampler))
            seen.extend(indices)
        # drop_last: the same number of samples per rank, at most replicas - 1 left out.
        self.assertEqual(lengths, {n // replicas})
        self.assertEqual(len(set(seen)), len(seen))
        self.assertGreaterEqual(len(seen), n - (replicas - 1))

    def test_step_complexities_are_close(self):
        n, replicas = 40, 4
        complexity = torch.randperm(n)
        dataset = TensorDataset(torch.randn(n, 2), complexity)
        per_rank = []
        for rank in range(replicas):
            sampler = LoadBalancingDistributedSampler(
                dataset, complexity_fn=lambda x: x[1], num_replicas=replicas, rank=rank,
                shuffle=True, seed=0)
            per_rank.append([int(complexity[i]) for i in sampler])
        # Step i of every rank comes from one chunk of replicas consecutive complexities.
        for step in zip(*per_rank):
            self.assertLess(max(step) - min(step), replicas)

    def test_bad_rank(self):
        dataset = TensorDataset(torch.randn(4, 2), torch.arange(4))
        with self.assertRaises(ValueError):
            LoadBalancingDistributedSampler(dataset, complexity_fn=lambda x: x[1],
                                            num_replicas=2, rank=2)


if __name__ == "__main__":
    unittest.main()
