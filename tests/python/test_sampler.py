"""LoadBalancingDistributedSampler and its batch sampler on libbagua's sampler."""

import pytest
import torch

from bagua.torch_api.contrib import (LoadBalancingDistributedBatchSampler,
                                     LoadBalancingDistributedSampler)


class Lengths(torch.utils.data.Dataset):
    """Samples whose complexity is their length: 0..99 in a scrambled order."""

    def __init__(self, n=103):
        g = torch.Generator().manual_seed(0)
        self.lengths = torch.randperm(n, generator=g).tolist()

    def __len__(self):
        return len(self.lengths)

    def __getitem__(self, i):
        return self.lengths[i]


def test_ranks_get_balanced_disjoint_samples():
    ds, world = Lengths(), 4
    samplers = [LoadBalancingDistributedSampler(ds, lambda x: x, num_replicas=world, rank=r,
                                                seed=1) for r in range(world)]
    for s in samplers:
        s.set_epoch(3)
    per_rank = [list(s) for s in samplers]
    n = len(per_rank[0])
    assert all(len(p) == n == len(s) for p, s in zip(per_rank, samplers))
    assert n == -(-len(ds) // world)  # ceil(N / W), as upstream
    seen = [i for p in per_rank for i in p]
    assert set(seen) == set(range(len(ds)))  # every sample, padding repeats at most W-1
    assert len(seen) - len(set(seen)) <= world - 1
    # Step i of every rank holds samples of near-identical complexity: the spread within a
    # step is a few units, against about half the range for a random split.
    spread = max(max(ds[p[i]] for p in per_rank) - min(ds[p[i]] for p in per_rank)
                 for i in range(n - 1))
    assert spread <= world, spread
    # Deterministic for (seed, epoch), different for another epoch.
    samplers[0].set_epoch(3)
    assert list(samplers[0]) == per_rank[0]
    samplers[0].set_epoch(4)
    assert list(samplers[0]) != per_rank[0]


def test_batch_sampler_gives_every_rank_the_same_number_of_batches():
    ds, world = Lengths(50), 3

    def batch_fn(indices):  # batches of total length <= 120: ranks may differ in count
        batches, cur, total = [], [], 0
        for i in indices:
            if cur and total + ds[i] > 120:
                batches.append(cur)
                cur, total = [], 0
            cur.append(i)
            total += ds[i]
        return batches + ([cur] if cur else [])

    for drop_last in (False, True):
        counts = []
        for r in range(world):
            s = LoadBalancingDistributedSampler(ds, lambda x: x, num_replicas=world, rank=r)
            b = LoadBalancingDistributedBatchSampler(s, batch_fn, drop_last=drop_last)
            counts.append(len(list(b)))
        assert len(set(counts)) == 1, counts


def test_bad_input():
    with pytest.raises(ValueError, match="rank 5"):
        LoadBalancingDistributedSampler(Lengths(), len, num_replicas=2, rank=5)
    with pytest.raises(ValueError, match="finite"):
        LoadBalancingDistributedSampler(Lengths(), lambda x: float("nan"), num_replicas=1,
                                        rank=0)
    with pytest.raises(TypeError, match="LoadBalancingDistributedSampler"):
        LoadBalancingDistributedBatchSampler(object(), list)


def test_complexities_are_computed_on_rank_0_only(workers):
    workers("sampler_worker.py", 2, nodes=2).check()
