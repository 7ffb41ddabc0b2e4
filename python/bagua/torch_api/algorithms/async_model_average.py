"""Asynchronous model averaging: a background thread averages the weights while ranks train."""

from bagua.torch_api.algorithms.base import Algorithm


class AsyncModelAverageAlgorithm(Algorithm):
    """After ``warmup_steps`` of gradient allreduce, every rank trains on its own and
    libbagua's averaging thread averages all ranks' weights every ``sync_interval_ms``.

    Call :meth:`abort` (all ranks) to stop averaging, leaving every rank the same model, and
    :meth:`resume` to restart it, as upstream's examples do.
    """

    name = "async"

    def __init__(self, peer_selection_mode="all", sync_interval_ms=500, warmup_steps=0):
        if peer_selection_mode != "all":
            raise ValueError(f"peer_selection_mode {peer_selection_mode!r} is not supported; "
                             "accepted: 'all' (as upstream)")
        if int(sync_interval_ms) < 1:
            raise ValueError(f"sync_interval_ms {sync_interval_ms} must be >= 1")
        if int(warmup_steps) < 0:
            raise ValueError(f"warmup_steps {warmup_steps} must be >= 0")
        self.peer_selection_mode = peer_selection_mode
        self.sync_interval_ms = int(sync_interval_ms)
        self.warmup_steps = int(warmup_steps)

    def config(self):
        return {"algorithm": self.name, "sync_interval_ms": self.sync_interval_ms,
                "warmup_steps": self.warmup_steps}

    def abort(self, bagua_module):
        """Stops background averaging on every rank (collective) and averages once more."""
        bagua_module._bagua.async_pause()

    def resume(self, bagua_module):
        """Restarts background averaging (collective)."""
        bagua_module._bagua.async_resume()
