"""PowerSGD through with_bagua on 2 ranks. usage: powersgd_worker.py train|torch

train: an MLP trained with PowerSGDAlgorithm(rank=2) ends with a loss close to
    GradientAllReduceAlgorithm's on the same seed and data, and sends fewer bytes per step.
torch: the first compressed step's gradients equal those of torch's powerSGD_hook on an
    identical model, data and initial Q (injected into the hook's state: libbagua draws its
    initial Q from its own seeded generator, re-implemented below, and torch from torch.randn).
"""

import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import bagua.torch_api as bagua
from bagua.torch_api.algorithms import GradientAllReduceAlgorithm, PowerSGDAlgorithm

MASK = (1 << 64) - 1


def bagua_randn(seed, n):
    """bagua__randn_f32 (kernels/cpu/lowrank.c): splitmix64, each value the sum of 12 uniforms
    minus 6, in double, rounded to f32."""
    s, out = seed, []
    for _ in range(n):
        total = 0.0
        for _ in range(12):
            s = (s + 0x9e3779b97f4a7c15) & MASK
            z = s
            z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & MASK
            z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & MASK
            z ^= z >> 31
            total += (z >> 11) * 2.0 ** -53
        out.append(total - 6.0)
    return torch.tensor(out, dtype=torch.float32)


def mlp():
    torch.manual_seed(3)
    return nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                         nn.Linear(64, 5))


def batches(me, steps):
    g = torch.Generator().manual_seed(200 + me)
    teacher = torch.Generator().manual_seed(1)
    w = torch.randn(20, 5, generator=teacher)
    for _ in range(steps):
        x = torch.randn(64, 20, generator=g)
        yield x, (x @ w).argmax(dim=1)


def train(algorithm, me, steps=150):
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model = model.with_bagua([opt], algorithm)
    losses = []
    for x, y in batches(me, steps):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    stats = model.bagua_stats()
    return sum(losses[-20:]) / 20, losses[0], stats["bytes_last_step"]


def main_train(me):
    full, first, b_full = train(GradientAllReduceAlgorithm(), me)
    low, _, b_low = train(PowerSGDAlgorithm(rank=2, warmup_steps=5), me)
    print(f"rank {me}: loss {first:.4f} -> allreduce {full:.4f}, powersgd {low:.4f}; "
          f"bytes per step {b_full} and {b_low}")
    assert full < 0.5 * first, (first, full)
    assert low < full + 0.1 * (first - full), (full, low)
    assert b_low < b_full / 2, (b_low, b_full)
    return 0


def main_torch(me):
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as ps

    rank, warmup = 2, 2
    torch.manual_seed(5)
    a = nn.Linear(32, 48)
    b = nn.Linear(32, 48)
    b.load_state_dict(a.state_dict())
    opt_a = torch.optim.SGD(a.parameters(), lr=0.01)
    opt_b = torch.optim.SGD(b.parameters(), lr=0.01)
    a = a.with_bagua([opt_a], PowerSGDAlgorithm(rank=rank, warmup_steps=warmup))
    b = torch.nn.parallel.DistributedDataParallel(b)
    state = ps.PowerSGDState(process_group=None, matrix_approximation_rank=rank,
                             start_powerSGD_iter=warmup, min_compression_rate=2,
                             use_error_feedback=True, warm_start=True,
                             orthogonalization_epsilon=1e-8)
    # with_bagua registers the parameters last first: the weight is tensor 1, whose initial Q
    # libbagua stores transposed (rank x cols). torch's hook takes the bucket's Q from its
    # state when there is one, so the same Q is given to it; it orthonormalises Q first, which
    # changes neither the span of P nor the result.
    cols = 32
    qt = bagua_randn(0x9D2C5680 + 1, rank * cols).view(rank, cols)
    state.p_memory_dict[0] = torch.empty(48 * rank)
    state.q_memory_dict[0] = qt.t().contiguous().view(-1)
    b.register_comm_hook(state, ps.powerSGD_hook)
    g = torch.Generator().manual_seed(300 + me)
    for step in range(warmup + 1):
        x = torch.randn(16, 32, generator=g)
        y = torch.randn(16, 48, generator=g)
        grads = []
        for model in (a, b):
            model.zero_grad()
            F.mse_loss(model(x), y).backward()
            grads.append([p.grad.detach().clone() for p in
                          (model.module if model is b else model).parameters()])
        for ga, gb in zip(*grads):
            scale = gb.abs().max().item()
            err = (ga - gb).abs().max().item() / scale
            print(f"rank {me} step {step}: {tuple(ga.shape)} differs by {err:.2e} of its largest")
            assert err < (1e-6 if step < warmup else 1e-4), (step, err)
        opt_a.step()
        opt_b.step()
    # torch's hook leaves its last future to the reducer: a rank that exits while its peer
    # still tears down Gloo aborts that peer ("terminate called"), so both leave together.
    del b
    torch.distributed.barrier()
    return 0


def main():
    bagua.init_process_group()
    me = bagua.get_rank()
    return main_train(me) if sys.argv[1] == "train" else main_torch(me)


if __name__ == "__main__":
    sys.exit(main())
