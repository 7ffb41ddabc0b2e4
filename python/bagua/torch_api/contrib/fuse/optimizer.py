"""``from bagua.torch_api.contrib.fuse.optimizer import fuse_optimizer`` as upstream Bagua
spells it; see :mod:`bagua.torch_api.contrib.fuse_optimizer`."""

from bagua.torch_api.contrib.fuse_optimizer import (
    calculate_mutual_groups, fuse_optimizer, fuse_step, is_fused_optimizer)

__all__ = ["calculate_mutual_groups", "fuse_optimizer", "fuse_step", "is_fused_optimizer"]
