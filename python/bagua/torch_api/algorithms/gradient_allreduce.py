"""Gradient allreduce: every bucket of gradients is averaged over all ranks during backward."""

from bagua.torch_api.algorithms.base import Algorithm, hier_flag


class GradientAllReduceAlgorithm(Algorithm):
    """Centralized synchronous full-precision gradient averaging (what torch DDP does).

    Args:
        hierarchical: reduce within each node first, allreduce among node leaders, then
            broadcast within each node.
        average: average the gradients (True) or sum them (False, not supported by libbagua:
            raises ValueError).
    """

    name = "gradient_allreduce"

    def __init__(self, hierarchical=False, average=True):
        if not average:
            raise ValueError("GradientAllReduceAlgorithm(average=False) is not supported: "
                             "libbagua always averages gradients")
        self.hierarchical = hierarchical
        self.average = average

    def config(self):
        return {"algorithm": self.name, "hierarchical": hier_flag(self.hierarchical)}
