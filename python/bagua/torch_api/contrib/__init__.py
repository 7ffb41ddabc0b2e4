"""Bagua's contributed components: the generic fused optimizer and the load-balanced
distributed samplers."""

from bagua.torch_api.contrib.fuse_optimizer import fuse_optimizer
from bagua.torch_api.contrib.load_balancing_data_loader import (
    LoadBalancingDistributedBatchSampler, LoadBalancingDistributedSampler)

__all__ = ["fuse_optimizer", "LoadBalancingDistributedBatchSampler",
           "LoadBalancingDistributedSampler"]
