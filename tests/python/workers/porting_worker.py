"""The combinations a script ported from upstream Bagua runs into, on 2 ranks (each its own
emulated node): learning-rate schedulers after with_bagua, fuse_step on a with_bagua module in
either order of wrapping, async abort/resume in any order, switching algorithms, and the
DistributedDataParallel wrapper (no_sync, buffers, default optimizers).

Runs the cases named on the command line (all when none) and prints "case NAME ok" for each
one that passed, or "case NAME FAILED: ..." with the traceback; exits 1 if any failed.
"""

import sys
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F

import bagua.torch_api as bagua
from bagua.torch_api import algorithms
from bagua.torch_api.algorithms import q_adam
from bagua.torch_api.contrib import fuse_optimizer
from bagua.torch_api.data_parallel import DistributedDataParallel

ALGOS = ["gradient_allreduce", "bytegrad", "decentralized", "low_precision_decentralized",
         "qadam", "async"]
DETERMINISTIC = ["gradient_allreduce", "bytegrad", "decentralized"]


def make(seed=7, bn=False):
    torch.manual_seed(seed)
    layers = [nn.Linear(12, 32), nn.ReLU()]
    if bn:
        layers.append(nn.BatchNorm1d(32))
    layers += [nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4)]
    return nn.Sequential(*layers)


def batch(rank, step, n=16):
    g = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(n, 12, generator=g), torch.randint(0, 4, (n,), generator=g)


def algorithm(name, opt):
    if name == "qadam":
        return q_adam.QAdamAlgorithm(opt)
    if name == "async":
        return algorithms.AsyncModelAverageAlgorithm(sync_interval_ms=5)
    return algorithms.from_name(name)


def optimizer(name, model, lr=0.05):
    if name == "qadam":
        return q_adam.QAdamOptimizer(model.parameters(), lr=0.004, warmup_steps=3)
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)


def train(model, opt, steps, fused=False, sched=None, start=0):
    loss = None
    for s in range(start, start + steps):
        x, y = batch(bagua.get_rank(), s)
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.fuse_step() if fused else opt.step()
        if sched is not None:
            sched.step()
    assert torch.isfinite(loss), loss
    return loss


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def same_on_every_rank(t):
    hi, lo = t.clone(), t.clone()
    bagua.allreduce_inplace(hi, op=bagua.ReduceOp.MAX)
    bagua.allreduce_inplace(lo, op=bagua.ReduceOp.MIN)
    return torch.equal(hi, lo)


def assert_same_on_every_rank(model):
    assert same_on_every_rank(flat(model)), "parameters differ across ranks"


def case_sched(name):
    """A StepLR built after with_bagua (upstream's mnist and elastic examples do this)."""
    model = make()
    opt = optimizer(name, model)
    lr0 = opt.param_groups[0]["lr"]
    model = model.with_bagua([opt], algorithm(name, opt))
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    train(model, opt, 6, sched=sched)
    assert abs(opt.param_groups[0]["lr"] - lr0 * 0.5 ** 3) < 1e-12, opt.param_groups[0]["lr"]
    assert opt._step_count == 6, opt._step_count  # the scheduler counted every step
    if name == "async":
        model.bagua_algorithm.abort(model)
    if name not in ("decentralized", "low_precision_decentralized"):
        assert_same_on_every_rank(model)
    assert model.bagua_train_step_counter == 6


def case_sched_before():
    """A scheduler built before with_bagua keeps counting, and a second one after it too."""
    model = make()
    opt = optimizer("sgd", model)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    model = model.with_bagua([opt], algorithm("gradient_allreduce", opt))
    sched2 = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=1.0)
    train(model, opt, 3, sched=sched)
    sched2.step()
    assert abs(opt.param_groups[0]["lr"] - 0.05 * 0.5 ** 3) < 1e-12
    assert_same_on_every_rank(model)


def case_fuse(name, order, flatten):
    """fuse_step on a with_bagua module equals step() on an unfused twin."""
    twin = None
    if name in DETERMINISTIC:
        twin = make()
        opt_t = optimizer(name, twin)
        twin = twin.with_bagua([opt_t], algorithm(name, opt_t), do_flatten=flatten)
        train(twin, opt_t, 5)
    model = make()
    opt = optimizer(name, model)
    if order == "fuse_first":
        opt = fuse_optimizer(opt)
        model = model.with_bagua([opt], algorithm(name, opt), do_flatten=flatten)
    else:
        model = model.with_bagua([opt], algorithm(name, opt), do_flatten=flatten)
        opt = fuse_optimizer(opt)
    train(model, opt, 5, fused=True)
    # The fused runs really were found (the layout is not per-tensor).
    assert name == "qadam" or opt._bagua_run_cache, "no parameter was fused"
    if twin is not None:
        assert torch.allclose(flat(model), flat(twin), rtol=1e-5, atol=1e-6), \
            (flat(model) - flat(twin)).abs().max()
    if name == "async":
        model.bagua_algorithm.abort(model)
    if name != "decentralized":
        assert_same_on_every_rank(model)


def case_fuse_lpdec_refused():
    model = make()
    opt = fuse_optimizer(optimizer("sgd", model))
    try:
        model.with_bagua([opt], algorithms.LowPrecisionDecentralizedAlgorithm())
    except ValueError as e:
        assert "fused" in str(e), e
    else:
        raise AssertionError("low_precision_decentralized accepted a fused optimizer")


def case_async_order():
    """abort/resume are no-ops when averaging already is stopped/running (as upstream)."""
    model = make()
    opt = optimizer("sgd", model)
    algo = algorithms.AsyncModelAverageAlgorithm(sync_interval_ms=5)
    model = model.with_bagua([opt], algo)
    algo.resume(model)  # before any abort
    train(model, opt, 3)
    algo.abort(model)
    algo.abort(model)  # twice
    assert_same_on_every_rank(model)
    algo.resume(model)
    algo.resume(model)  # twice
    train(model, opt, 3, start=3)
    model.bagua_algorithm.abort(model)
    assert_same_on_every_rank(model)


def case_switch():
    """A second with_bagua switches algorithm (upstream's test_model_switch), any to any."""
    model = make()
    opt = optimizer("sgd", model)
    start = 0
    for name in ["gradient_allreduce", "decentralized", "async", "low_precision_decentralized",
                 "bytegrad", "gradient_allreduce"]:
        algo = algorithm(name, opt)
        model = model.with_bagua([opt], algo)
        assert model.bagua_algorithm is algo
        train(model, opt, 3, start=start)
        start += 3
        if name == "async":
            algo.abort(model)
    assert_same_on_every_rank(model)
    qopt = optimizer("qadam", model)
    model = model.with_bagua([qopt], algorithm("qadam", qopt))
    train(model, qopt, 4, start=start)
    assert_same_on_every_rank(model)


def case_qadam_fuse():
    twin = make()
    opt_t = optimizer("qadam", twin)
    twin = twin.with_bagua([opt_t], algorithm("qadam", opt_t))
    train(twin, opt_t, 5)
    model = make()
    opt = optimizer("qadam", model)
    model = model.with_bagua([opt], algorithm("qadam", opt))
    opt = fuse_optimizer(opt)
    train(model, opt, 5, fused=True)
    assert torch.equal(flat(model), flat(twin))


def case_ddp_no_sync():
    """Two micro-batches, the first under no_sync(): the step uses the average over ranks of
    each rank's summed gradients, computed here by hand for every rank."""
    world, me = bagua.get_world_size(), bagua.get_rank()
    ref = make()
    grads = [torch.zeros_like(p) for p in ref.parameters()]
    for r in range(world):
        for s in range(2):
            ref.zero_grad()
            x, y = batch(r, s)
            F.cross_entropy(ref(x), y).backward()
            for g, p in zip(grads, ref.parameters()):
                g += p.grad / world
    with torch.no_grad():
        for g, p in zip(grads, ref.parameters()):
            p -= 0.1 * g
    model = make()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ddp = DistributedDataParallel(model, optimizers=[opt])
    assert ddp.bagua_optimizers == [opt]
    assert ddp.bagua_algorithm.name == "gradient_allreduce"
    assert ddp.bagua_buckets and sum(len(b) for b in ddp.bagua_buckets) == 6
    opt.zero_grad()
    with ddp.no_sync():
        assert not ddp.require_backward_grad_sync
        x, y = batch(me, 0)
        F.cross_entropy(ddp(x), y).backward()
    x, y = batch(me, 1)
    F.cross_entropy(ddp(x), y).backward()
    opt.step()
    assert torch.allclose(flat(model), flat(ref), rtol=1e-5, atol=1e-6), \
        (flat(model) - flat(ref)).abs().max()


def case_ddp_defaults():
    """optimizers=[] (upstream's default): a plain optimizer next to the wrapper still trains
    identical replicas; rank 0's buffers reach every rank at forward; bad devices refused."""
    model = make(bn=True)
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    train(ddp, opt, 4)
    assert_same_on_every_rank(model)
    bn = model[2]
    assert not same_on_every_rank(bn.running_mean.clone())  # each rank's own batches
    ddp.eval()
    ddp(batch(bagua.get_rank(), 99)[0])  # eval: the forward itself changes no buffer
    assert same_on_every_rank(bn.running_mean.clone())
    assert same_on_every_rank(bn.num_batches_tracked.clone())
    for bad in ({"device_ids": [0]}, {"output_device": 1}, {"dim": 1}):
        try:
            DistributedDataParallel(make(), **bad)
        except ValueError as e:
            assert list(bad)[0] in str(e), e
        else:
            raise AssertionError(f"{bad} accepted on a CPU module")


def case_ignore():
    """A parameter listed in _bagua_params_and_buffers_to_ignore stays local."""
    model = make()
    model._bagua_params_and_buffers_to_ignore = ["4.bias"]
    opt = optimizer("sgd", model)
    model = model.with_bagua([opt], algorithm("gradient_allreduce", opt))
    train(model, opt, 3)
    params = dict(model.named_parameters())
    assert not same_on_every_rank(params["4.bias"].detach().clone())
    for name, p in params.items():
        if name != "4.bias":
            assert same_on_every_rank(p.detach().clone()), name


CASES = {f"sched_{a}": (case_sched, a) for a in ALGOS}
CASES["sched_before"] = (case_sched_before,)
for a in ["gradient_allreduce", "bytegrad", "decentralized", "async"]:
    for order in ["fuse_first", "bagua_first"]:
        for flatten in [True, False]:
            if a == "async" and not flatten:
                continue
            CASES[f"fuse_{a}_{order}_{'flat' if flatten else 'copy'}"] = \
                (case_fuse, a, order, flatten)
CASES["fuse_lpdec_refused"] = (case_fuse_lpdec_refused,)
CASES["qadam_fuse"] = (case_qadam_fuse,)
CASES["async_order"] = (case_async_order,)
CASES["switch"] = (case_switch,)
CASES["ddp_no_sync"] = (case_ddp_no_sync,)
CASES["ddp_defaults"] = (case_ddp_defaults,)
CASES["ignore"] = (case_ignore,)


def main():
    torch.set_num_threads(1)
    bagua.init_process_group()
    names = sys.argv[1:] or list(CASES)
    failed = 0
    for name in names:
        fn, *args = CASES[name]
        try:
            fn(*args)
            print(f"case {name} ok", flush=True)
        except Exception:
            failed += 1
            print(f"case {name} FAILED:\n{traceback.format_exc()}", flush=True)
            # The ranks may now be out of step with each other: stop here rather than run
            # the next case's collectives against a peer that is elsewhere.
            break
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
