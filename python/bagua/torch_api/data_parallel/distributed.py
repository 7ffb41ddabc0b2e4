"""DistributedDataParallel: upstream Bagua's DDP-compatible wrapper."""

import torch

from bagua.torch_api.algorithms.gradient_allreduce import GradientAllReduceAlgorithm


class DistributedDataParallel(torch.nn.Module):
    """Wraps ``module`` for data-parallel training with a Bagua algorithm.

    ``DistributedDataParallel(module, optimizers, algorithm)`` is ``module.with_bagua(
    optimizers, algorithm)`` behind torch DDP's shape: ``forward`` calls the module and
    ``.module`` is the wrapped module. The default algorithm is gradient allreduce.
    """

    def __init__(self, module, optimizers, algorithm=None, process_group=None,
                 do_flatten=True):
        super().__init__()
        self.module = module.with_bagua(optimizers, algorithm or GradientAllReduceAlgorithm(),
                                        process_group, do_flatten)

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)
