"""Fork after init_process_group: a forked child that exits normally does not hang (in
torch's Gloo group or libbagua's teardown), a child's use of the parent's communicator or
DDP context raises RuntimeError naming the fork instead of mixing its bytes into the parent's
streams, a child may create its own objects, and the parent keeps training, also with a
DataLoader whose workers are forked."""

import os
import sys
import time

import torch
import torch.distributed as dist

import bagua.torch_api as bagua
from bagua.torch_api.algorithms.gradient_allreduce import GradientAllReduceAlgorithm


def in_child(body):
    """Runs body() in a forked child that then leaves through sys.exit (atexit handlers and
    interpreter teardown, which hung before); returns its exit status, or fails on a hang."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            body()
        except BaseException as e:  # noqa: B902 - the child reports everything
            print(f"child failed: {type(e).__name__}: {e}", flush=True)
            code = 3
        sys.exit(code)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    raise AssertionError("a forked child hung at exit")


def expect_fork_error(fn):
    try:
        fn()
    except RuntimeError as e:
        assert "forked" in str(e) and "spawn" in str(e), str(e)
        return
    raise AssertionError(f"{fn} did not raise in a forked child")


def main():
    bagua.init_process_group()
    rank, world = bagua.get_rank(), bagua.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model = model.with_bagua([opt], GradientAllReduceAlgorithm())
    x, y = torch.randn(16, 8), torch.randn(16, 2)

    def train_step():
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()

    train_step()

    assert in_child(lambda: None) == 0
    t, out = torch.ones(4), torch.zeros(4)

    def use_parents_objects():
        expect_fork_error(lambda: bagua.allreduce(t, out))
        expect_fork_error(train_step)

    assert in_child(use_parents_objects) == 0

    def own_objects():
        from bagua import _C
        c = _C.Comm(rank=0, size=1,
                    bootstrap=f"tcp://127.0.0.1:{_C.spare_port('127.0.0.1')}")
        buf = torch.ones(4)
        c.allreduce(buf.data_ptr(), buf.data_ptr(), 4, _C.F32, _C.SUM)
        assert buf.tolist() == [1.0] * 4
        c.close()

    assert in_child(own_objects) == 0

    # The parent's streams are intact: same results on every rank.
    bagua.allreduce(t, out)
    assert out.tolist() == [float(world)] * 4, out
    data = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randn(64, 2))
    loader = torch.utils.data.DataLoader(data, batch_size=16, num_workers=2,
                                         multiprocessing_context="fork")
    for xb, yb in loader:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(xb), yb).backward()
        opt.step()
    weights = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    first = weights.clone()
    bagua.broadcast(first, 0)
    assert torch.equal(first, weights), "ranks diverged after forks"
    dist.barrier()
    print(f"rank {rank} fork ok", flush=True)


main()
