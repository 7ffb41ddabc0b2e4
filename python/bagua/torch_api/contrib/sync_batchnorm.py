"""Synchronized batch normalization over Bagua's communication primitives.

:class:`SyncBatchNorm` normalizes with the statistics of the whole distributed batch (every
rank's samples together), as ``torch.nn.SyncBatchNorm`` does, so a model trained on ``n``
ranks with ``b`` samples each normalizes like one trained on a single batch of ``n * b``
samples. The ranks may hold batches of different sizes.
"""

import torch
import torch.nn.functional as F
from torch.autograd.function import Function
from torch.nn.modules.batchnorm import _BatchNorm

from bagua.torch_api import communication, env

__all__ = ["SyncBatchNorm"]


class SyncBatchNorm(_BatchNorm):
    r"""Batch normalization of an N-dimensional input whose batch statistics are computed over
    all ranks of the job (see ``torch.nn.BatchNorm2d`` for the maths).

    In training mode (and in evaluation mode with ``track_running_stats=False``) every rank
    must call the layer's forward, and its backward, the same number of times: each call is
    a collective over the default group. In evaluation mode with running statistics the layer
    is a plain batch normalization and communicates nothing.

    Args:
        num_features: number of channels :math:`C` of an input of shape :math:`(N, C, ...)`.
        eps: added to the variance for numerical stability. Default: 1e-5.
        momentum: weight of the new batch in the running mean and variance; ``None`` gives
            the cumulative average of all batches. Default: 0.1.
        affine: whether the layer has learnable ``weight`` and ``bias``. Default: True.
        track_running_stats: whether the layer tracks running statistics (used in
            evaluation mode); when False, batch statistics are used in both modes.
            Default: True.

    Input tensors may be on any device; the statistics travel through Bagua's collectives
    on CPU tensors (a few numbers per channel).

    The gradients of ``weight`` and ``bias`` are this rank's own, as in
    ``torch.nn.SyncBatchNorm``: the data-parallel algorithm (``with_bagua``) averages them
    with the other parameters' gradients.
    """

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input of shape (N, C, ...) (got "
                             f"{input.dim()}D input)")

    def _run_bn(self, input, exponential_average_factor, use_batch_stats):
        return F.batch_norm(input, self.running_mean, self.running_var, self.weight, self.bias,
                            use_batch_stats, exponential_average_factor, self.eps)

    def forward(self, input):
        self._check_input_dim(input)
        if input.size(1) != self.num_features:
            raise ValueError(f"expected input with {self.num_features} channels in dimension "
                             f"1 (got shape {tuple(input.shape)})")
        # The running statistics' update factor, computed as torch's batch norm computes it:
        # ``momentum``, or 1 / batches seen so far for a cumulative average.
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:
                factor = 1.0 / float(self.num_batches_tracked)
        if not self.training and self.track_running_stats:
            return self._run_bn(input, factor, False)
        if env.get_world_size() == 1:
            return self._run_bn(input, factor, True)
        # Running statistics are updated only in training mode (torch's rule).
        update = self.training and self.track_running_stats
        return _SyncBatchNorm.apply(input, self.weight, self.bias,
                                    self.running_mean if update else None,
                                    self.running_var if update else None, self.eps, factor)

    @classmethod
    def convert_sync_batchnorm(cls, module):
        r"""Replaces every ``BatchNorm*D`` layer in ``module`` by a :class:`SyncBatchNorm`
        that shares its parameters and running statistics.

        Args:
            module (nn.Module): a module containing ``BatchNorm*D`` layers.

        Returns:
            ``module`` with its batch normalization layers converted; when ``module`` is
            itself a ``BatchNorm*D`` layer, a new :class:`SyncBatchNorm` layer.

        .. note:: Call it before
            :meth:`~bagua.torch_api.distributed.BaguaModule.with_bagua`, which registers the
            module's parameters.

        Example::

            >>> model = torch.nn.Sequential(torch.nn.Linear(D_in, H), torch.nn.BatchNorm1d(H))
            >>> optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
            >>> model = SyncBatchNorm.convert_sync_batchnorm(model)
            >>> model = model.with_bagua([optimizer], GradientAllReduceAlgorithm())
        """
        module_output = module
        if isinstance(module, _BatchNorm):
            module_output = cls(module.num_features, module.eps, module.momentum, module.affine,
                                module.track_running_stats)
            if module.affine:
                # The very same Parameter objects, so an optimizer built before the
                # conversion keeps updating them.
                with torch.no_grad():
                    module_output.weight = module.weight
                    module_output.bias = module.bias
            module_output.running_mean = module.running_mean
            module_output.running_var = module.running_var
            module_output.num_batches_tracked = module.num_batches_tracked
            module_output.train(module.training)
            if hasattr(module, "qconfig"):
                module_output.qconfig = module.qconfig
        for name, child in module.named_children():
            module_output.add_module(name, cls.convert_sync_batchnorm(child))
        del module
        return module_output


def _stats_dtype(dtype):
    # Half-precision inputs get their statistics in float32, as torch's batch norm does.
    return dtype if dtype in (torch.float32, torch.float64) else torch.float32


def _channel_shape(x):
    """Shape that broadcasts a per-channel vector over ``x`` (N, C, ...)."""
    return (1, -1) + (1,) * (x.dim() - 2)


class _SyncBatchNorm(Function):
    @staticmethod
    def forward(ctx, input, weight, bias, running_mean, running_var, eps, momentum):
        input = input.contiguous()
        channels = input.size(1)
        dims = [0] + list(range(2, input.dim()))
        count = input.numel() // channels if channels else 0
        x = input.to(_stats_dtype(input.dtype))

        # Each rank's count, mean and biased variance per channel, gathered from all ranks
        # and combined in float64 (the parallel variance formula: stable, and exact for
        # ranks holding batches of different sizes, empty ones included).
        local = torch.zeros(1 + 2 * channels, dtype=torch.float64)
        local[0] = count
        if count > 0:
            var, mean = torch.var_mean(x, dim=dims, unbiased=False)
            local[1:1 + channels] = mean.detach().to("cpu", torch.float64)
            local[1 + channels:] = var.detach().to("cpu", torch.float64)
        world = env.get_world_size()
        gathered = torch.empty(world * local.numel(), dtype=torch.float64)
        communication.allgather(local, gathered)
        gathered = gathered.view(world, -1)
        counts = gathered[:, 0]
        total = float(counts.sum())
        if total <= 1:
            raise ValueError(f"expected more than 1 value per channel over all ranks when "
                             f"training (got {int(total)}; this rank's input has shape "
                             f"{tuple(input.shape)})")
        weights = (counts / total).unsqueeze(1)
        means = gathered[:, 1:1 + channels]
        g_mean = (weights * means).sum(0)
        g_var = (weights * (gathered[:, 1 + channels:] + (means - g_mean) ** 2)).sum(0)
        g_invstd = torch.rsqrt(g_var + eps)

        if running_mean is not None:
            with torch.no_grad():
                running_mean.mul_(1.0 - momentum).add_(
                    g_mean.to(running_mean.device, running_mean.dtype), alpha=momentum)
                unbiased = g_var * (total / (total - 1.0))
                running_var.mul_(1.0 - momentum).add_(
                    unbiased.to(running_var.device, running_var.dtype), alpha=momentum)

        mean = g_mean.to(x.device, x.dtype)
        invstd = g_invstd.to(x.device, x.dtype)
        shape = _channel_shape(x)
        scale = invstd if weight is None else invstd * weight.to(x.dtype)
        out = (x - mean.view(shape)) * scale.view(shape)
        if bias is not None:
            out = out + bias.to(x.dtype).view(shape)

        ctx.save_for_backward(input, weight, mean, invstd)
        ctx.total = total
        return out.to(input.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        saved_input, weight, mean, invstd = ctx.saved_tensors
        need_input_grad, need_weight_grad, need_bias_grad = ctx.needs_input_grad[0:3]
        x = saved_input.to(mean.dtype)
        dy = grad_output.contiguous().to(mean.dtype)
        dims = [0] + list(range(2, x.dim()))
        shape = _channel_shape(x)
        xmu = x - mean.view(shape)

        # This rank's per-channel sums; the weight and bias gradients need only these.
        sum_dy = dy.sum(dims)
        sum_dy_xmu = (dy * xmu).sum(dims)
        grad_weight = grad_bias = grad_input = None
        if weight is not None and need_weight_grad:
            grad_weight = (sum_dy_xmu * invstd).to(weight.dtype)
        if weight is not None and need_bias_grad:
            grad_bias = sum_dy.to(weight.dtype)

        if need_input_grad:
            # The input gradient depends on the sums over the whole distributed batch
            # (through the shared mean and variance): reduce them over all ranks.
            channels = sum_dy.numel()
            sums = torch.cat([sum_dy, sum_dy_xmu]).detach().to("cpu", torch.float64)
            communication.allreduce_inplace(sums, op=communication.ReduceOp.SUM)
            sums = (sums / ctx.total).to(x.device, x.dtype)
            mean_dy, mean_dy_xmu = sums[:channels], sums[channels:]
            scale = invstd if weight is None else invstd * weight.to(x.dtype)
            grad_input = (dy - mean_dy.view(shape)
                          - xmu * (invstd * invstd * mean_dy_xmu).view(shape)) * scale.view(shape)
            grad_input = grad_input.to(saved_input.dtype)

        return grad_input, grad_weight, grad_bias, None, None, None, None
