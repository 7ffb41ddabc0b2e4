"""A torch.distributed worker for the agent tests: gloo over env:// (MASTER_ADDR/MASTER_PORT,
RANK, WORLD_SIZE from bagua-agent), one allreduce, checked. Usage: gloo_allreduce.py OUTDIR"""
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=30))
    rank, world = dist.get_rank(), dist.get_world_size()
    assert rank == int(os.environ["RANK"]) and world == int(os.environ["WORLD_SIZE"])
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    want = world * (world + 1) / 2
    if t.item() != want:
        print(f"gloo allreduce wrong: rank {rank} got {t.item()} want {want}", flush=True)
        return 1
    print(f"gloo allreduce ok: rank {rank} of {world} sum {t.item()}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
