"""Every communication primitive, dtype and op against a numpy oracle; run on N ranks.

Each rank's input is a deterministic function of (rank, dtype, size), so every rank can
compute the expected result of the whole collective by itself."""

import sys

import numpy as np
import torch

import bagua.torch_api as bagua

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32,
          torch.int64, torch.uint8]
SIZES = [0, 1, 7, 1000, 4097]
OPS = [bagua.ReduceOp.SUM, bagua.ReduceOp.AVG, bagua.ReduceOp.MIN, bagua.ReduceOp.MAX]


def data(rank, n, dtype, salt=0):
    """Small integers so that sums are exact in every dtype (f16/bf16 included)."""
    g = torch.Generator().manual_seed(1000 * rank + 17 * n + salt)
    hi = 4 if dtype == torch.uint8 else 8
    return torch.randint(0, hi, (n,), generator=g).to(dtype)


def oracle(inputs, op, dtype):
    a = np.stack([t.to(torch.float64).numpy() for t in inputs])
    if op == bagua.ReduceOp.SUM:
        r = a.sum(0)
    elif op == bagua.ReduceOp.MIN:
        r = a.min(0)
    elif op == bagua.ReduceOp.MAX:
        r = a.max(0)
    else:
        r = a.sum(0) / len(inputs)
        if not dtype.is_floating_point:
            r = np.trunc(r)
    return torch.from_numpy(r)


def close(got, want, dtype, what):
    got = got.to(torch.float64)
    tol = {torch.float16: 1e-2, torch.bfloat16: 4e-2}.get(dtype, 1e-6)
    if got.numel() and not torch.allclose(got, want, rtol=tol, atol=tol):
        i = int((got - want).abs().argmax())
        raise AssertionError(f"{what} {dtype}: element {i} is {got[i].item()}, expected "
                             f"{want[i].item()}")


def main():
    bagua.init_process_group()
    me, n = bagua.get_rank(), bagua.get_world_size()
    assert torch.distributed.is_initialized(), "init_process_group must set up torch.distributed"
    torch.distributed.barrier()  # scripts that use torch.distributed keep working
    for dt in DTYPES:
        for size in SIZES:
            inputs = [data(r, size, dt) for r in range(n)]
            for op in OPS:
                out = torch.empty(size, dtype=dt)
                bagua.allreduce(inputs[me], out, op=op)
                close(out, oracle(inputs, op, dt), dt, f"allreduce {op.name} n={size}")
                t = inputs[me].clone()
                bagua.allreduce_inplace(t, op=op)
                close(t, oracle(inputs, op, dt), dt, f"allreduce_inplace {op.name} n={size}")
            # broadcast from the last rank
            t = inputs[me].clone()
            bagua.broadcast(t, src=n - 1)
            close(t, inputs[n - 1].to(torch.float64), dt, f"broadcast n={size}")
            # allgather: block r from rank r
            out = torch.empty(size * n, dtype=dt)
            bagua.allgather(inputs[me], out)
            close(out, torch.cat(inputs).to(torch.float64), dt, f"allgather n={size}")
            # reduce_scatter: rank r gets the sum of block r of every rank's big input
            big = [data(r, size * n, dt, salt=1) for r in range(n)]
            out = torch.empty(size, dtype=dt)
            bagua.reduce_scatter(big[me], out, op=bagua.ReduceOp.SUM)
            want = oracle(big, bagua.ReduceOp.SUM, dt)[me * size:(me + 1) * size]
            close(out, want, dt, f"reduce_scatter n={size}")
            # alltoall: block j of rank i lands in block i of rank j
            out = torch.empty(size * n, dtype=dt)
            bagua.alltoall(big[me], out)
            want = torch.cat([big[i][me * size:(me + 1) * size] for i in range(n)])
            close(out, want.to(torch.float64), dt, f"alltoall n={size}")
    # send/recv around a ring, odd size
    if n > 1:
        t = data(me, 333, torch.float32)
        got = torch.empty(333)
        if me % 2 == 0:
            bagua.send(t, (me + 1) % n)
            bagua.recv(got, (me - 1) % n)
        else:
            bagua.recv(got, (me - 1) % n)
            bagua.send(t, (me + 1) % n)
        close(got, data((me - 1) % n, 333, torch.float32).to(torch.float64), torch.float32,
              "send/recv")
    bagua.barrier()
    print(f"rank {me}: all primitives match the oracle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
