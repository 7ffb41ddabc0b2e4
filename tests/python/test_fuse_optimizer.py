"""bagua.contrib.fuse_optimizer: the same parameters fused and unfused, every optimizer."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import bagua.torch_api as bagua

OPTIMIZERS = {
    "sgd": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-4),
    "adam": lambda p: torch.optim.Adam(p, lr=1e-3),
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=0.01),
    "rmsprop": lambda p: torch.optim.RMSprop(p, lr=1e-3, momentum=0.5),
    "adagrad": lambda p: torch.optim.Adagrad(p, lr=0.01),
}


def model(width=16, depth=6):
    torch.manual_seed(3)
    layers = [nn.Linear(8, width)]
    for _ in range(depth):
        layers += [nn.ReLU(), nn.Linear(width, width)]
    layers += [nn.ReLU(), nn.Linear(width, 3)]
    return nn.Sequential(*layers)


def train(net, opt, fused, steps=20):
    g = torch.Generator().manual_seed(5)
    for _ in range(steps):
        x, y = torch.randn(16, 8, generator=g), torch.randint(0, 3, (16,), generator=g)
        opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        opt.fuse_step() if fused else opt.step()
    return [p.detach().clone() for p in net.parameters()]


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_fused_equals_unfused(name):
    a, b = model(), model()
    ref = train(a, OPTIMIZERS[name](a.parameters()), fused=False)
    opt = bagua.contrib.fuse_optimizer(OPTIMIZERS[name](b.parameters()))
    got = train(b, opt, fused=True)
    for r, g in zip(ref, got):
        assert torch.allclose(r, g, rtol=1e-5, atol=1e-6), (r - g).abs().max()
    # The parameters really were fused: one run for the one group, and for each per-element
    # state key (momentum_buffer, exp_avg, ...) the originals' tensors are views of one
    # fused tensor, i.e. they all share a single storage.
    assert len(opt._bagua_run_cache) == 1
    storages = {}
    for st in opt.state.values():
        for k, t in st.items():
            if isinstance(t, torch.Tensor) and t.numel() > 1:
                storages.setdefault(k, set()).add(t.storage().data_ptr())
    assert storages and all(len(v) == 1 for v in storages.values()), storages


def test_unflattened_parameters_still_step():
    a, b = model(), model()
    ref = train(a, torch.optim.SGD(a.parameters(), lr=0.1, momentum=0.9), fused=False)
    opt = bagua.contrib.fuse_optimizer(torch.optim.SGD(b.parameters(), lr=0.1, momentum=0.9),
                                       do_flatten=False)
    got = train(b, opt, fused=True)
    for r, g in zip(ref, got):
        assert torch.allclose(r, g, rtol=1e-5, atol=1e-6)


def test_bad_input():
    with pytest.raises(TypeError, match="torch.optim.Optimizer"):
        bagua.contrib.fuse_optimizer(object())
    opt = bagua.contrib.fuse_optimizer(torch.optim.SGD(model().parameters(), lr=0.1))
    with pytest.raises(RuntimeError, match="already"):
        bagua.contrib.fuse_optimizer(opt)


MIXED = {
    "adam": lambda p: torch.optim.Adam(p, lr=1e-3),
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=0.01),
    "adamax": lambda p: torch.optim.Adamax(p, lr=2e-3),
    "asgd": lambda p: torch.optim.ASGD(p, lr=0.01, t0=10),
    "sgd": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
    "rmsprop": lambda p: torch.optim.RMSprop(p, lr=1e-3, momentum=0.5),
}


def _scalars(opt, net):
    """Each parameter's scalar state (step counts, ASGD's eta and mu) as plain numbers."""
    return [{k: float(v) for k, v in opt.state[p].items()
             if not isinstance(v, torch.Tensor) or v.numel() == 1} for p in net.parameters()]


@pytest.mark.parametrize("name", sorted(MIXED))
def test_step_and_fuse_step_mixed(name):
    """step() and fuse_step() on one optimizer, alternating: 101 steps advance every scalar
    state (Adam's step count, used for bias correction) by 101, as the plain optimizer does,
    and the weights match it. (Shared by the fused run's members, a count advanced once per
    member in each plain step: 151 after 101 steps.)"""
    a, b = model(), model()
    ref_opt = MIXED[name](a.parameters())
    ref = train(a, ref_opt, fused=False, steps=101)
    opt = bagua.contrib.fuse_optimizer(MIXED[name](b.parameters()))
    g = torch.Generator().manual_seed(5)
    for i in range(101):
        x, y = torch.randn(16, 8, generator=g), torch.randint(0, 3, (16,), generator=g)
        opt.zero_grad()
        F.cross_entropy(b(x), y).backward()
        # fuse_step first, so the state is created fused (a plain step() first would create
        # it per parameter, and nothing would be fused).
        opt.step() if i % 3 == 2 else opt.fuse_step()
    got = [p.detach().clone() for p in b.parameters()]
    assert opt._bagua_run_cache, "nothing was fused"
    assert _scalars(opt, b) == _scalars(ref_opt, a)
    if "step" in opt.state[next(b.parameters())]:
        assert float(opt.state[next(b.parameters())]["step"]) == 101
    for r, gt in zip(ref, got):
        assert torch.allclose(r, gt, rtol=1e-4, atol=1e-6), (r - gt).abs().max()


def test_module_path_and_predicate():
    """Upstream's module path and is_fused_optimizer."""
    from bagua.torch_api.contrib.fuse.optimizer import fuse_optimizer, is_fused_optimizer
    opt = torch.optim.SGD(model().parameters(), lr=0.1)
    assert not is_fused_optimizer(opt)
    assert is_fused_optimizer(fuse_optimizer(opt))
