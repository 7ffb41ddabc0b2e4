"""Bagua's contributed components: the generic fused optimizer, the load-balanced
distributed samplers, the Redis-backed dataset cache and synchronized batch normalization
(``contrib.sync_batchnorm.SyncBatchNorm``, imported from its module as upstream)."""

from bagua.torch_api.contrib.cache_loader import CacheLoader
from bagua.torch_api.contrib.cached_dataset import CachedDataset
from bagua.torch_api.contrib.fuse_optimizer import fuse_optimizer
from bagua.torch_api.contrib.load_balancing_data_loader import (
    LoadBalancingDistributedBatchSampler, LoadBalancingDistributedSampler)

__all__ = ["CacheLoader", "CachedDataset", "fuse_optimizer",
           "LoadBalancingDistributedBatchSampler", "LoadBalancingDistributedSampler"]
