"""Asynchronous model averaging: a background thread averages the weights while ranks train."""

from bagua.torch_api.algorithms.base import Algorithm


class AsyncModelAverageAlgorithm(Algorithm):
    """After ``warmup_steps`` of gradient allreduce, every rank trains on its own and
    libbagua's averaging thread averages all ranks' weights every ``sync_interval_ms``.

    Call :meth:`abort` (all ranks) to stop averaging, leaving every rank the same model, and
    :meth:`resume` to restart it, as upstream's examples do; both are no-ops when averaging
    is already stopped or running.
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
        """Stops background averaging on every rank (collective) and averages once more, so
        every rank holds the same model. A no-op when averaging is stopped already."""
        _context(bagua_module, "abort").async_pause()

    def resume(self, bagua_module):
        """Restarts background averaging (collective); a no-op when it runs already."""
        _context(bagua_module, "resume").async_resume()


def _context(obj, what):
    """The with_bagua context of a module, or of the module inside a DistributedDataParallel
    wrapper."""
    ctx = getattr(obj, "_bagua", None)
    if ctx is None:
        ctx = getattr(getattr(obj, "module", None), "_bagua", None)
    if ctx is None or ctx.algorithm.name != "async":
        raise ValueError(f"AsyncModelAverageAlgorithm.{what}() needs the module prepared with "
                         "with_bagua(..., AsyncModelAverageAlgorithm(...)), or its "
                         "DistributedDataParallel wrapper")
    return ctx
