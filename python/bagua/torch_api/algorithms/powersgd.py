"""PowerSGD: each gradient matrix averaged as a rank-r approximation (Vogels et al. 2019)."""

from bagua.torch_api.algorithms.base import Algorithm, hier_flag


class PowerSGDAlgorithm(Algorithm):
    """Gradient averaging through low-rank compression, as torch's ``powerSGD_hook``: each
    parameter of two or more dimensions, viewed as ``shape[0]`` rows, is replaced by the
    rank-``rank`` approximation ``P Q^T`` of the ranks' mean, with ``Q`` kept from the last step
    and the compression error added to the next step's gradient. One-dimensional parameters and
    matrices too small to gain (``2 (rows + cols) rank >= rows cols``) are averaged at full
    precision. Not in upstream Bagua; libbagua implements it (docs/algorithms.md).

    Args:
        rank: the approximation rank (torch's ``matrix_approximation_rank``), 1 .. 1024.
        warmup_steps: steps of plain gradient allreduce before compression starts (torch's
            ``start_powerSGD_iter``).
        error_feedback: carry each matrix's compression error into the next step (torch's
            ``use_error_feedback``).
        hierarchical: reduce within each node at full precision and compress among the node
            leaders only.
    """

    name = "powersgd"

    def __init__(self, rank=4, warmup_steps=10, error_feedback=True, hierarchical=False):
        if isinstance(rank, bool) or int(rank) != rank or not 1 <= int(rank) <= 1024:
            raise ValueError(f"PowerSGDAlgorithm(rank={rank!r}): accepted: an integer 1 .. 1024")
        if isinstance(warmup_steps, bool) or int(warmup_steps) != warmup_steps \
                or int(warmup_steps) < 0:
            raise ValueError(f"PowerSGDAlgorithm(warmup_steps={warmup_steps!r}): accepted: an "
                             "integer >= 0")
        self.rank = int(rank)
        self.warmup_steps = int(warmup_steps)
        self.error_feedback = error_feedback
        self.hierarchical = hierarchical

    def config(self):
        return {"algorithm": self.name, "rank": self.rank, "warmup_steps": self.warmup_steps,
                "error_feedback": int(bool(self.error_feedback)),
                "hierarchical": hier_flag(self.hierarchical)}
