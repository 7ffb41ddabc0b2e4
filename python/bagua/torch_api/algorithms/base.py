"""The algorithm interface of the PyTorch front end.

An :class:`Algorithm` only describes what libbagua's data-parallel layer should run: its
``config()`` gives the settings of ``bagua_ddp_config_t`` (include/bagua/ddp.h). Every
algorithm is implemented once, in C (ddp/algorithms/), for the C API and this front end
alike; docs/algorithms.md has the maths.
"""


class Algorithm:
    """Base class of the algorithms passed to ``model.with_bagua()``."""

    #: libbagua's name of the algorithm
    name = None

    def config(self):
        """The bagua._C.DDP keyword arguments of this algorithm."""
        return {"algorithm": self.name}

    def reify(self, process_group=None):
        """Upstream's hook to bind an algorithm to a process group; here the algorithm is
        bound when ``with_bagua`` creates the libbagua context, so it returns itself."""
        return self

    def _check_optimizers(self, optimizers):
        """Raises if this algorithm cannot run with these optimizers."""


def hier_flag(value):
    """libbagua's hierarchical setting: 1 or 0 (never its -1 "algorithm default", so the
    upstream defaults written in each class are what runs)."""
    return 1 if value else 0
