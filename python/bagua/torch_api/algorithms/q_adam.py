"""QAdam: Adam whose momentum is averaged through 8-bit compression after a warm-up."""

import torch

from bagua.torch_api.algorithms.base import Algorithm, hier_flag


class QAdamOptimizer(torch.optim.Optimizer):
    """The optimizer of :class:`QAdamAlgorithm` (upstream Bagua's names and defaults).

    For ``warmup_steps`` steps it is Adam over allreduced gradients; afterwards the momentum
    is averaged with MinMaxUInt8 compression and the second moment is frozen. The update runs
    in libbagua as one fused call over the flat storage, so this optimizer steps only inside a
    module prepared with ``with_bagua([opt], QAdamAlgorithm(opt))``.
    """

    def __init__(self, params, lr=1e-3, warmup_steps=100, betas=(0.9, 0.999), eps=1e-8,
                 weight_decay=0.0):
        if not 0.0 <= lr:
            raise ValueError(f"invalid learning rate {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"invalid epsilon {eps}")
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"invalid betas {betas}")
        if int(warmup_steps) < 0:
            raise ValueError(f"invalid warmup_steps {warmup_steps}")
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        super().__init__(params, defaults)
        self.warmup_steps = int(warmup_steps)
        self._bagua_step = None  # set by with_bagua

    def step(self, closure=None):
        """Runs libbagua's fused QAdam update (after ``with_bagua``)."""
        if self._bagua_step is None:
            raise RuntimeError("QAdamOptimizer steps inside a module prepared with "
                               "model.with_bagua([optimizer], QAdamAlgorithm(optimizer))")
        loss = closure() if closure is not None else None
        self._bagua_step()
        return loss


class QAdamAlgorithm(Algorithm):
    """Centralized QAdam (upstream's "QAdam-1bit", which is 8-bit).

    Args:
        q_adam_optimizer: the :class:`QAdamOptimizer` of the model's parameters.
        hierarchical: compress among node leaders only.
    """

    name = "qadam"

    def __init__(self, q_adam_optimizer, hierarchical=True):
        if not isinstance(q_adam_optimizer, QAdamOptimizer):
            raise TypeError("QAdamAlgorithm needs a bagua.torch_api.algorithms.q_adam."
                            f"QAdamOptimizer, not {type(q_adam_optimizer).__name__}")
        self.optimizer = q_adam_optimizer
        self.hierarchical = hierarchical

    def config(self):
        g = self.optimizer.param_groups[0]
        return {"algorithm": self.name, "hierarchical": hier_flag(self.hierarchical),
                "warmup_steps": self.optimizer.warmup_steps, "lr": float(g["lr"]),
                "beta1": float(g["betas"][0]), "beta2": float(g["betas"][1]),
                "eps": float(g["eps"]), "weight_decay": float(g["weight_decay"])}

    def _check_optimizers(self, optimizers):
        if list(optimizers) != [self.optimizer]:
            raise ValueError("QAdamAlgorithm: pass its own QAdamOptimizer, and only it, to "
                             "with_bagua")
