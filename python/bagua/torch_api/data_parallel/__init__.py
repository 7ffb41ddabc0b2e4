"""A ``torch.nn.parallel.DistributedDataParallel``-shaped wrapper over ``with_bagua``."""

from bagua.torch_api.data_parallel.distributed import (
    DistributedDataParallel, to_bagua_process_group)

__all__ = ["DistributedDataParallel", "to_bagua_process_group"]
