"""Decentralized SGD: ranks average weights with peers instead of gradients with everyone."""

from bagua.torch_api.algorithms.base import Algorithm, hier_flag

_PEER_MODES = ("all", "shift_one", "ring")


class DecentralizedAlgorithm(Algorithm):
    """Each rank averages its weights with its peers' every ``communication_interval`` steps.

    Args:
        hierarchical: average within each node, exchange among node leaders.
        peer_selection_mode: "all" (average with everyone), "shift_one" (one peer per step;
            any world size here, upstream needs an even one) or "ring" (both ring neighbours).
        communication_interval: communicate every this many steps.
    """

    name = "decentralized"

    def __init__(self, hierarchical=True, peer_selection_mode="all", communication_interval=1):
        if peer_selection_mode not in _PEER_MODES:
            raise ValueError(f"peer_selection_mode {peer_selection_mode!r} is unknown; accepted: "
                             f"{', '.join(_PEER_MODES)}")
        if int(communication_interval) < 1:
            raise ValueError(f"communication_interval {communication_interval} must be >= 1")
        self.hierarchical = hierarchical
        self.peer_selection_mode = peer_selection_mode
        self.communication_interval = int(communication_interval)

    def config(self):
        return {"algorithm": self.name, "hierarchical": hier_flag(self.hierarchical),
                "peer_mode": self.peer_selection_mode,
                "comm_interval": self.communication_interval}


class LowPrecisionDecentralizedAlgorithm(Algorithm):
    """Ring-decentralized SGD exchanging 8-bit compressed weight differences with both ring
    neighbours after every optimizer step.

    Args:
        hierarchical: average within each node, exchange among node leaders.
        communication_interval: communicate every this many steps.
    """

    name = "low_precision_decentralized"

    def __init__(self, hierarchical=True, communication_interval=1):
        if int(communication_interval) < 1:
            raise ValueError(f"communication_interval {communication_interval} must be >= 1")
        self.hierarchical = hierarchical
        self.communication_interval = int(communication_interval)

    def config(self):
        return {"algorithm": self.name, "hierarchical": hier_flag(self.hierarchical),
                "comm_interval": self.communication_interval}

    def _check_optimizers(self, optimizers):
        if any(getattr(o, "_bagua_fused", False) for o in optimizers):
            raise ValueError("LowPrecisionDecentralizedAlgorithm does not support fused "
                             "optimizers (as upstream)")
