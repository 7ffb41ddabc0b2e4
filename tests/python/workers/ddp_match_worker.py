"""gradient_allreduce through with_bagua against torch.nn.parallel.DistributedDataParallel
(Gloo) on the same seed, model and batches: after 50 SGD steps the parameters agree within
1e-5 relative. usage: ddp_match_worker.py [--no-flatten]"""

import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import bagua.torch_api as bagua
from bagua.torch_api.algorithms import GradientAllReduceAlgorithm


def make():
    torch.manual_seed(7)
    return nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                         nn.Linear(64, 5))


def main():
    flatten = "--no-flatten" not in sys.argv
    bagua.init_process_group()
    me = bagua.get_rank()
    a, b = make(), make()
    opt_a = torch.optim.SGD(a.parameters(), lr=0.05, momentum=0.9)
    opt_b = torch.optim.SGD(b.parameters(), lr=0.05, momentum=0.9)
    a = a.with_bagua([opt_a], GradientAllReduceAlgorithm(), do_flatten=flatten)
    b = torch.nn.parallel.DistributedDataParallel(b)
    g = torch.Generator().manual_seed(100 + me)  # each rank its own data
    for step in range(50):
        x = torch.randn(32, 20, generator=g)
        y = torch.randint(0, 5, (32,), generator=g)
        for model, opt in ((a, opt_a), (b, opt_b)):
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
    worst = 0.0
    for pa, pb in zip(a.parameters(), b.module.parameters()):
        rel = ((pa - pb).abs() / pb.abs().clamp_min(1e-3)).max().item()
        worst = max(worst, rel)
    print(f"rank {me}: largest relative difference from torch DDP after 50 steps: {worst:.3g}")
    assert worst < 1e-5, worst
    stats = a.bagua_stats()
    assert stats["steps"] == 50 and stats["bytes_total"] > 0, stats
    return 0


if __name__ == "__main__":
    sys.exit(main())
