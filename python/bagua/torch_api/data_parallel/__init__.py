"""A ``torch.nn.parallel.DistributedDataParallel``-shaped wrapper over ``with_bagua``."""

from bagua.torch_api.data_parallel.distributed import DistributedDataParallel

__all__ = ["DistributedDataParallel"]
