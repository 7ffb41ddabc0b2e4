"""CUDA tensors through bagua.torch_api, on ranks that share the machine's GPUs (rank r uses
device r modulo the devices; ranks on one device get distinct NCCL_HOSTID values, so NCCL
treats them as two hosts instead of refusing a duplicate GPU).

Runs the cases named on the command line (all when none) and prints "case NAME ok" for each
one that passed, or "case NAME FAILED: ..." with the traceback; exits 1 if any failed.
"""

import os
import sys
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F

# Every process its own host id (an inherited value would make NCCL see a duplicate GPU), and
# NCCL's sockets on loopback, as the C GPU tests do.
os.environ["NCCL_HOSTID"] = f"bagua-test-{os.getpid()}"
os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
os.environ.setdefault("NCCL_IB_DISABLE", "1")

import bagua.torch_api as bagua  # noqa: E402
from bagua.torch_api import algorithms  # noqa: E402
from bagua.torch_api.algorithms import q_adam  # noqa: E402
from bagua.torch_api.communication import ReduceOp  # noqa: E402
from bagua.torch_api.contrib import fuse_optimizer  # noqa: E402

ALGOS = ["gradient_allreduce", "bytegrad", "decentralized", "low_precision_decentralized",
         "qadam", "async"]
SYNCED = ["gradient_allreduce", "bytegrad", "qadam"]  # identical weights on every rank
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32,
          torch.int64, torch.uint8]


def dev():
    return torch.device("cuda", torch.cuda.current_device())


def data(rank, n, dtype, salt=0):
    """Small integers (exact in every dtype, sums included) that differ per rank."""
    g = torch.Generator().manual_seed(100 * rank + salt)
    return torch.randint(0, 5, (n,), generator=g).to(dtype)


def case_primitives():
    world, me = bagua.get_world_size(), bagua.get_rank()
    for dt in DTYPES:
        n = 6 * world
        mine = data(me, n, dt).to(dev())
        rows = [data(r, n, dt) for r in range(world)]
        total = sum(r.double() for r in rows)
        out = torch.empty_like(mine)
        bagua.allreduce(mine, out, op=ReduceOp.SUM)
        assert torch.equal(out.cpu().double(), total), (dt, "allreduce")
        t = mine.clone()
        bagua.allreduce_inplace(t, op=ReduceOp.MAX)
        assert torch.equal(t.cpu(), torch.stack(rows).max(0).values), (dt, "max")
        if dt != torch.uint8:
            t = mine.clone()
            bagua.allreduce_inplace(t, op=ReduceOp.PRODUCT)  # the gather-and-fold path
            want = rows[0].clone()
            for r in rows[1:]:
                want = want * r
            assert torch.equal(t.cpu(), want), (dt, "product")
        t = mine.clone()
        bagua.broadcast(t, src=world - 1)
        assert torch.equal(t.cpu(), rows[world - 1]), (dt, "broadcast")
        g = torch.empty(world * n, dtype=dt, device=dev())
        bagua.allgather(mine, g)
        assert torch.equal(g.cpu(), torch.cat(rows)), (dt, "allgather")
        rs = torch.empty(n // world, dtype=dt, device=dev())
        bagua.reduce_scatter(mine, rs, op=ReduceOp.SUM)
        k = n // world
        assert torch.equal(rs.cpu().double(), total[me * k:(me + 1) * k]), (dt, "reduce_scatter")
        a2a = torch.empty_like(mine)
        bagua.alltoall(mine, a2a)
        want = torch.cat([rows[r][me * k:(me + 1) * k] for r in range(world)])
        assert torch.equal(a2a.cpu(), want), (dt, "alltoall")
        t = mine.clone()
        bagua.alltoall_inplace(t)
        assert torch.equal(t.cpu(), want), (dt, "alltoall_inplace")
        red = torch.zeros_like(mine)
        bagua.reduce(mine, red, dst=0, op=ReduceOp.SUM)
        if me == 0:
            assert torch.equal(red.cpu().double(), total), (dt, "reduce")
        gat = torch.zeros(world * n, dtype=dt, device=dev())
        bagua.gather(mine, gat, dst=world - 1)
        if me == world - 1:
            assert torch.equal(gat.cpu(), torch.cat(rows)), (dt, "gather")
        src = torch.cat(rows).to(dev()) if me == 0 else torch.empty(0, dtype=dt, device=dev())
        sc = torch.empty(n, dtype=dt, device=dev())
        bagua.scatter(src, sc, src=0)
        assert torch.equal(sc.cpu(), rows[me]), (dt, "scatter")
        if world > 1:
            peer = (me + 1) % world
            if me % 2 == 0:
                bagua.send(mine, peer)
                got = torch.empty_like(mine)
                bagua.recv(got, (me - 1) % world)
            else:
                got = torch.empty_like(mine)
                bagua.recv(got, (me - 1) % world)
                bagua.send(mine, peer)
            assert torch.equal(got.cpu(), rows[(me - 1) % world]), (dt, "send/recv")
    counts = [r + 1 for r in range(world)]
    send = torch.arange(sum(counts), dtype=torch.float32, device=dev()) + 100 * me
    displs = [sum(counts[:j]) for j in range(world)]
    recv = torch.zeros(world * world, dtype=torch.float32, device=dev())
    rc = [me + 1] * world
    rd = [j * world for j in range(world)]
    bagua.alltoall_v(send, counts, displs, recv, rc, rd)
    for i in range(world):
        got = recv[i * world:i * world + me + 1].cpu()
        want = torch.arange(displs[me], displs[me] + me + 1, dtype=torch.float32) + 100 * i
        assert torch.equal(got, want), ("alltoall_v", i)
    bagua.barrier()


def case_refusals():
    cpu = torch.zeros(4)
    gpu = torch.zeros(4, device=dev())
    for call in (lambda: bagua.allreduce(cpu, gpu), lambda: bagua.allgather(
            gpu, torch.zeros(4 * bagua.get_world_size()))):
        try:
            call()
        except ValueError as e:
            assert "one call takes CPU tensors only" in str(e), e
        else:
            raise AssertionError("CPU and CUDA tensors in one call were accepted")
    try:
        bagua.allreduce_inplace(torch.zeros(4, 2, device=dev()).t())
    except ValueError as e:
        assert "contiguous" in str(e), e
    else:
        raise AssertionError("a non-contiguous CUDA tensor was accepted")
    try:
        bagua.allreduce_inplace(torch.zeros(4, dtype=torch.bool, device=dev()))
    except TypeError as e:
        assert "dtype" in str(e), e
    else:
        raise AssertionError("a bool CUDA tensor was accepted")
    model = nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(2, 4)).sum().backward()
    opt.step()  # momentum buffers on the CPU, next to a CPU model
    for s in opt.state.values():  # ... moved by hand to the GPU
        s["momentum_buffer"] = s["momentum_buffer"].to(dev())
    try:
        model.with_bagua([opt], algorithms.gradient_allreduce.GradientAllReduceAlgorithm())
    except ValueError as e:
        assert "optimizer holds state" in str(e), e
    else:
        raise AssertionError("CUDA optimizer state for a CPU model was accepted")
    half = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4).cuda())
    try:
        half.with_bagua([torch.optim.SGD(half.parameters(), lr=0.1)],
                        algorithms.gradient_allreduce.GradientAllReduceAlgorithm())
    except ValueError as e:
        assert "2 devices" in str(e), e
    else:
        raise AssertionError("a model on two devices was accepted")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(32, 64)
        self.fc2 = nn.Linear(64, 64)
        self.fc3 = nn.Linear(64, 4)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def batch(rank, step, n=32):
    g = torch.Generator().manual_seed(1000 * rank + step)
    x = torch.randn(n, 32, generator=g)
    return x.to(dev()), (x[:, :4].argmax(1)).to(dev())


def make_algorithm(name, opt):
    if name == "qadam":
        return q_adam.QAdamAlgorithm(opt)
    if name == "async":
        return algorithms.AsyncModelAverageAlgorithm(sync_interval_ms=5)
    return algorithms.from_name(name)


def train(name, steps=40, fuse=False, check_sync=False):
    torch.manual_seed(3)
    model = Net().cuda()
    if name == "qadam":
        opt = q_adam.QAdamOptimizer(model.parameters(), lr=0.004, warmup_steps=5)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    if fuse:
        opt = fuse_optimizer(opt)
    model = model.with_bagua([opt], make_algorithm(name, opt))
    assert next(model.parameters()).is_cuda
    first = last = None
    # On the device before the loop: a copy from pageable host memory synchronizes, and the
    # sync-debug check below must see only what the step itself does.
    batches = [batch(bagua.get_rank(), s) for s in range(steps)]
    for s in range(steps):
        x, y = batches[s]
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        if fuse:
            opt.fuse_step()
        else:
            opt.step()
        if check_sync and s == steps - 1:
            torch.cuda.set_sync_debug_mode(0)
        if first is None:
            first = float(loss)
            if check_sync:
                # From the second step on, any torch operation that synchronizes the device with
                # the host raises: the step's Python side must not have one.
                torch.cuda.set_sync_debug_mode("error")
        last = loss
    last = float(last)
    assert last == last and last < first, (name, first, last)
    if name == "async":
        model.bagua_algorithm.abort(model)
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    rows = torch.empty(bagua.get_world_size() * flat.numel(), device=dev())
    bagua.allgather(flat, rows)
    rows = rows.view(bagua.get_world_size(), -1).cpu()
    if name in SYNCED:
        for r in range(1, rows.shape[0]):
            assert torch.equal(rows[0], rows[r]), (name, "weights differ across ranks")
    stats = model.bagua_stats()
    assert stats["steps"] >= 1, stats
    return rows[0]


def case_train():
    for name in ALGOS:
        train(name)
        print(f"  {name} trained", flush=True)


def case_fused():
    for name in ("gradient_allreduce", "bytegrad"):
        a = train(name)
        b = train(name, fuse=True)
        assert torch.allclose(a, b, atol=1e-5), (name, "fused step differs")


def case_no_host_sync():
    train("gradient_allreduce", steps=6, check_sync=True)


def case_matches_cpu():
    """gradient_allreduce on the GPU ends where the same training on the CPU ends."""
    gpu = train("gradient_allreduce", steps=10)
    torch.manual_seed(3)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model = model.with_bagua([opt], algorithms.from_name("gradient_allreduce"))
    for s in range(10):
        x, y = batch(bagua.get_rank(), s)
        opt.zero_grad()
        F.cross_entropy(model(x.cpu()), y.cpu()).backward()
        opt.step()
    cpu = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    assert torch.allclose(gpu, cpu, atol=2e-4), float((gpu - cpu).abs().max())


CASES = {"primitives": case_primitives, "refusals": case_refusals, "train": case_train,
         "fused": case_fused, "no_host_sync": case_no_host_sync,
         "matches_cpu": case_matches_cpu}


def main():
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    bagua.init_process_group()
    failed = 0
    for name in sys.argv[1:] or list(CASES):
        try:
            CASES[name]()
            print(f"case {name} ok", flush=True)
        except Exception:
            failed += 1
            print(f"case {name} FAILED: {traceback.format_exc()}", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
