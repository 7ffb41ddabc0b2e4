"""Upstream Bagua's module path of the generic fused optimizer
(``bagua.torch_api.contrib.fuse.optimizer``); the implementation is
:mod:`bagua.torch_api.contrib.fuse_optimizer`."""
