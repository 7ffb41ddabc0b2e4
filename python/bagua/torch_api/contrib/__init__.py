"""Bagua's contributed components: the generic fused optimizer (and, in later work, the
load-balanced sampler)."""

from bagua.torch_api.contrib.fuse_optimizer import fuse_optimizer  # noqa: F401
