"""Under a Bagua process group the complexities are computed on rank 0 only and broadcast;
both ranks still get the same layout (disjoint samples)."""

import sys

import torch

import bagua.torch_api as bagua
from bagua.torch_api.contrib import LoadBalancingDistributedSampler


def main():
    bagua.init_process_group()
    me = bagua.get_rank()
    calls = []
    data = list(range(40))

    def complexity(x):
        calls.append(x)
        return (x * 7) % 13

    s = LoadBalancingDistributedSampler(data, complexity)
    assert (len(calls) == 40) if me == 0 else not calls, (me, len(calls))
    s.set_epoch(1)
    mine = torch.tensor(list(s), dtype=torch.int64)
    every = torch.empty(2 * len(mine), dtype=torch.int64)
    bagua.allgather(mine, every)
    assert sorted(every.tolist()) == data, every.tolist()
    print(f"rank {me}: {len(calls)} complexity calls, {len(mine)} samples")
    return 0


if __name__ == "__main__":
    sys.exit(main())
