"""Bagua's contributed components: the generic fused optimizer and the load-balanced
distributed samplers."""

from bagua.torch_api.contrib.fuse_optimizer import fuse_optimizer  # noqa: F401
from bagua.torch_api.contrib.load_balancing_data_loader import (  # noqa: F401
    LoadBalancingDistributedBatchSampler, LoadBalancingDistributedSampler)
