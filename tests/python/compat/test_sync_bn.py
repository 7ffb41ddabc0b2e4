"""Port of upstream Bagua's ``tests/contrib/test_sync_bn.py`` to CPU (2 ranks), plus our own
cases: 2 and 3 ranks with different batch sizes per rank, compared with one
``torch.nn.BatchNorm`` over the concatenated batch.

Mechanical edits: ``tests.internal`` imports replaced by the harness's, ``.cuda()`` and
``torch.cuda.set_device`` removed, ``torch.cuda.device_count()`` replaced by a fixed rank
count. ``torch.nn.SyncBatchNorm`` (upstream's reference, run over NCCL) needs CUDA, so the
reference ``run_torch_sync_bn`` is a single-process ``torch.nn.BatchNorm2d`` over all ranks'
inputs (regenerated from the ranks' seeds), cut back into per-rank slices; the weight and
bias gradients it gives are the sum of the ranks' own.
"""

import unittest

import torch

import bagua.torch_api as bagua
from bagua.torch_api.contrib.sync_batchnorm import SyncBatchNorm
from harness import MultiProcessTestCase, setup_bagua_env

ATOL = 1e-5
RTOL = 1e-5


class Result_Forward(object):
    def __init__(self):
        bn_layer = SyncBatchNorm(num_features=8)
        self.bn_output = torch.zeros(32, 8, 16, 16).float()
        self.running_mean = torch.empty_like(bn_layer.running_mean)
        self.running_var = torch.empty_like(bn_layer.running_var)


class Result_Backward(object):
    def __init__(self):
        bn_layer = SyncBatchNorm(num_features=8)
        self.weight_grad = torch.empty_like(bn_layer.weight.data)
        self.bias_grad = torch.empty_like(bn_layer.bias.data)
        self.input_grad = torch.zeros(32, 8, 16, 16).float()


def _init_bagua_env(rank, env):
    # set deterministic
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.manual_seed(rank)
    # initialize subprocess env
    setup_bagua_env(rank, env)


def run_torch_sync_bn(nprocs, torch_results_forward, results_backward):
    inputs = []
    for rank in range(nprocs):
        torch.manual_seed(rank)
        inputs.append(torch.randn(32, 8, 16, 16).float())
    input_d = torch.cat(inputs)
    input_d.requires_grad_()
    sync_bn_ddp = torch.nn.BatchNorm2d(num_features=8)

    sync_bn_ddp_out = sync_bn_ddp(input_d)
    sync_bn_ddp_out.sum().backward()

    for rank in range(nprocs):
        rows = slice(32 * rank, 32 * (rank + 1))
        ddp_ret1 = torch_results_forward[rank]
        ddp_ret1.bn_output.copy_(sync_bn_ddp_out[rows])
        ddp_ret1.running_mean.copy_(sync_bn_ddp.running_mean)
        ddp_ret1.running_var.copy_(sync_bn_ddp.running_var)

        ddp_ret2 = results_backward[rank]
        ddp_ret2.weight_grad.copy_(sync_bn_ddp.weight.grad)
        ddp_ret2.bias_grad.copy_(sync_bn_ddp.bias.grad)
        ddp_ret2.input_grad.copy_(input_d.grad[rows])


def run_bagua_sync_bn(rank, nprocs, args, results, envs):
    bagua_results_forward, results_backward = args
    _init_bagua_env(rank, envs)

    input_b = torch.randn(32, 8, 16, 16).float()
    input_b.requires_grad_()
    sync_bn_bagua = SyncBatchNorm(num_features=8)

    sync_bn_bagua_out = sync_bn_bagua(input_b)

    bagua_ret1 = bagua_results_forward[rank]
    bagua_ret1.bn_output.copy_(sync_bn_bagua_out)
    bagua_ret1.running_mean.copy_(sync_bn_bagua.running_mean)
    bagua_ret1.running_var.copy_(sync_bn_bagua.running_var)

    sync_bn_bagua_out.sum().backward()

    # The reference's parameter gradients are the sum over all ranks (one batch).
    bagua.allreduce_inplace(sync_bn_bagua.weight.grad)
    bagua.allreduce_inplace(sync_bn_bagua.bias.grad)
    bagua_ret2 = results_backward[rank]
    bagua_ret2.weight_grad.copy_(sync_bn_bagua.weight.grad)
    bagua_ret2.bias_grad.copy_(sync_bn_bagua.bias.grad)
    bagua_ret2.input_grad.copy_(input_b.grad)


def _close(a, b):
    return torch.allclose(a, b, rtol=RTOL, atol=ATOL)


class Test_Sync_Bn(MultiProcessTestCase):
    def test_syncbn(self):
        nprocs = 2
        torch_results_forward = [Result_Forward() for _ in range(nprocs)]
        torch_results_backward = [Result_Backward() for _ in range(nprocs)]
        run_torch_sync_bn(nprocs, torch_results_forward, torch_results_backward)

        bagua_results_forward = [Result_Forward() for _ in range(nprocs)]
        bagua_results_backward = [Result_Backward() for _ in range(nprocs)]
        self.run_test_locally(run_bagua_sync_bn, nprocs,
                              (bagua_results_forward, bagua_results_backward), None)

        for rank in range(nprocs):
            self.assertTrue(torch.all(torch.isclose(
                torch_results_forward[rank].bn_output,
                bagua_results_forward[rank].bn_output)).item())
            self.assertTrue(torch.all(torch.isclose(
                torch_results_forward[rank].running_mean,
                bagua_results_forward[rank].running_mean)).item())
            self.assertTrue(torch.all(torch.isclose(
                torch_results_forward[rank].running_var,
                bagua_results_forward[rank].running_var)).item())
            # With loss = output.sum() the exact weight gradient is 0: both sides hold the
            # float32 rounding noise of a 16384-term sum, hence the absolute tolerance.
            self.assertTrue(torch.all(torch.isclose(
                torch_results_backward[rank].weight_grad,
                bagua_results_backward[rank].weight_grad, atol=1e-3)).item())
            self.assertTrue(torch.all(torch.isclose(
                torch_results_backward[rank].bias_grad,
                bagua_results_backward[rank].bias_grad)).item())
            self.assertTrue(torch.all(torch.isclose(
                torch_results_backward[rank].input_grad,
                bagua_results_backward[rank].input_grad, atol=ATOL)).item())


# ---------------------------------------------------------------------------------------------
# Our cases: uneven batches, 2 and 3 ranks, several layer configurations.
# ---------------------------------------------------------------------------------------------

# (name, batch sizes per rank, per-sample shape, layer keyword arguments, steps)
CASES = {
    2: [
        ("bn2d", [5, 11], (4, 3, 3), {}, 2),
        ("bn1d_momentum_none", [7, 2], (6,), {"momentum": None}, 3),
        ("bn3d_no_affine", [3, 4], (2, 2, 2, 3), {"affine": False}, 2),
        ("no_running_stats", [6, 9], (4, 5), {"track_running_stats": False}, 2),
    ],
    3: [
        ("bn2d", [4, 9, 1], (4, 3, 3), {}, 2),
        ("bn1d_empty_rank", [5, 0, 8], (3,), {"momentum": 0.3}, 2),
        ("bn1d_3d_input", [2, 6, 3], (5, 7), {}, 2),
    ],
}


def _case_data(sizes, shape, step):
    """Every rank's input and output-gradient weights, the same in every process."""
    gen = torch.Generator().manual_seed(1000 + step)
    xs = [torch.randn((n,) + shape, generator=gen) * 2.0 + 0.5 for n in sizes]
    gs = [torch.randn((n,) + shape, generator=gen) for n in sizes]
    return xs, gs


def _make_layer(cls, channels, kwargs):
    if cls is SyncBatchNorm:
        layer = SyncBatchNorm(channels, **kwargs)
    else:
        layer = cls(channels, **kwargs)
    torch.manual_seed(7)
    if layer.affine:
        with torch.no_grad():
            layer.weight.copy_(torch.rand(channels) + 0.5)
            layer.bias.copy_(torch.randn(channels))
    return layer


def _reference_cls(shape):
    return {1: torch.nn.BatchNorm1d, 2: torch.nn.BatchNorm1d, 3: torch.nn.BatchNorm2d,
            4: torch.nn.BatchNorm3d}[len(shape)]


def _reference(sizes, shape, kwargs, steps):
    """Single-process batch norm over the concatenated batch: per-step, per-rank outputs and
    input gradients, the parameter gradients of the last step and the running stats."""
    layer = _make_layer(_reference_cls(shape), shape[0], kwargs)
    outs, in_grads = [], []
    for step in range(steps):
        xs, gs = _case_data(sizes, shape, step)
        x = torch.cat(xs).requires_grad_()
        layer.zero_grad()
        out = layer(x)
        (out * torch.cat(gs)).sum().backward()
        outs.append(out.detach().split(sizes))
        in_grads.append(x.grad.split(sizes))
    grads = (layer.weight.grad, layer.bias.grad) if layer.affine else None
    stats = ((layer.running_mean, layer.running_var, layer.num_batches_tracked)
             if layer.track_running_stats else None)
    layer.eval()
    xs, _ = _case_data(sizes, shape, steps)
    eval_outs = layer(torch.cat(xs)).detach().split(sizes)
    return outs, in_grads, grads, stats, eval_outs


def run_cases(rank, nprocs, args, results, env):
    setup_bagua_env(rank, env)
    out = {}
    for name, sizes, shape, kwargs, steps in CASES[nprocs]:
        # Built as a torch batch norm and converted, to cover convert_sync_batchnorm too.
        model = torch.nn.Sequential(_make_layer(_reference_cls(shape), shape[0], kwargs))
        model = SyncBatchNorm.convert_sync_batchnorm(model)
        layer = model[0]
        assert isinstance(layer, SyncBatchNorm), type(layer)
        outs, in_grads = [], []
        for step in range(steps):
            xs, gs = _case_data(sizes, shape, step)
            x = xs[rank].clone().requires_grad_()
            model.zero_grad()
            y = model(x)
            (y * gs[rank]).sum().backward()
            outs.append(y.detach().clone())
            in_grads.append(x.grad.clone())
        grads = None
        if layer.affine:
            grads = [layer.weight.grad.clone(), layer.bias.grad.clone()]
            for g in grads:
                bagua.allreduce_inplace(g)
        stats = None
        if layer.track_running_stats:
            stats = (layer.running_mean.clone(), layer.running_var.clone(),
                     layer.num_batches_tracked.clone())
        model.eval()
        xs, _ = _case_data(sizes, shape, steps)
        eval_out = model(xs[rank]).detach().clone()
        out[name] = (outs, in_grads, grads, stats, eval_out)
    torch.save(out, f"{args}/rank{rank}.pt")


class TestSyncBnUneven(MultiProcessTestCase):
    def check(self, nprocs):
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            self.run_test_locally(run_cases, nprocs, tmp, None)
            got = [torch.load(f"{tmp}/rank{r}.pt") for r in range(nprocs)]
        for name, sizes, shape, kwargs, steps in CASES[nprocs]:
            ref_outs, ref_in_grads, ref_grads, ref_stats, ref_eval = _reference(
                sizes, shape, kwargs, steps)
            for rank in range(nprocs):
                outs, in_grads, grads, stats, eval_out = got[rank][name]
                where = f"case {name}, rank {rank}"
                for step in range(steps):
                    self.assertTrue(_close(outs[step], ref_outs[step][rank]), where)
                    self.assertTrue(_close(in_grads[step], ref_in_grads[step][rank]), where)
                self.assertTrue(_close(eval_out, ref_eval[rank]), where)
                if ref_grads is not None:
                    for a, b in zip(grads, ref_grads):
                        self.assertTrue(_close(a, b), f"{where}: {a} vs {b}")
                if ref_stats is not None:
                    for a, b in zip(stats, ref_stats):
                        self.assertTrue(_close(a.double(), b.double()),
                                        f"{where}: {a} vs {b}")

    def test_uneven_batches_2_ranks(self):
        self.check(2)

    def test_uneven_batches_3_ranks(self):
        self.check(3)


class TestSyncBnLocal(unittest.TestCase):
    def test_rejects_1d_input(self):
        with self.assertRaises(ValueError):
            SyncBatchNorm(4)(torch.randn(4))

    def test_single_process_is_batch_norm(self):
        x = torch.randn(6, 3, 4)
        ref = torch.nn.BatchNorm1d(3)
        layer = SyncBatchNorm.convert_sync_batchnorm(torch.nn.BatchNorm1d(3))
        self.assertTrue(torch.allclose(layer(x), ref(x), atol=ATOL))
        self.assertTrue(torch.allclose(layer.running_var, ref.running_var, atol=ATOL))

    def test_convert_keeps_parameters(self):
        bn = torch.nn.BatchNorm2d(5)
        bn.eval()
        model = torch.nn.Sequential(torch.nn.Conv2d(1, 5, 1), bn)
        converted = SyncBatchNorm.convert_sync_batchnorm(model)
        self.assertIsInstance(converted[1], SyncBatchNorm)
        self.assertIs(converted[1].weight, bn.weight)
        self.assertIs(converted[1].running_mean, bn.running_mean)
        self.assertFalse(converted[1].training)


if __name__ == "__main__":
    unittest.main()
