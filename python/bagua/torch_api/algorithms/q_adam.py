"""QAdam: Adam whose momentum is averaged through 8-bit compression after a warm-up."""

import math

import torch

from bagua.torch_api.algorithms.base import Algorithm, hier_flag


class QAdamOptimizer(torch.optim.Optimizer):
    """The optimizer of :class:`QAdamAlgorithm` (upstream Bagua's names and defaults).

    For ``warmup_steps`` steps it is Adam; afterwards the second moment is frozen. Inside a
    module prepared with ``with_bagua([opt], QAdamAlgorithm(opt))`` the gradients are
    allreduced during the warm-up, the momentum is then averaged with MinMaxUInt8 compression,
    and the update runs in libbagua as one fused call over the flat storage. On its own (no
    ``with_bagua``) it steps each parameter here, with the same arithmetic as upstream's.
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
        self._bagua_qadam = None  # the with_bagua context whose fused update this is

    def step(self, closure=None):
        """One QAdam step: libbagua's fused update after ``with_bagua`` (it runs at the end of
        the step; here only the learning rate, which a scheduler may have changed, is handed
        over), else the update of every parameter with a gradient."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self._bagua_qadam is not None:
            self._bagua_qadam.set_lr(self.param_groups[0]["lr"])
            return loss
        with torch.no_grad():
            for group in self.param_groups:
                self._step_group(group)
        return loss

    def _step_group(self, group):
        lr, weight_decay, eps = group["lr"], group["weight_decay"], group["eps"]
        beta1, beta2 = group["betas"]
        for p in group["params"]:
            if p.grad is None:
                continue
            state = self.state[p]
            if not state:
                state["step"] = 0
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["step"] += 1
            step = state["step"]
            grad = p.grad
            if weight_decay != 0:
                grad = grad.add(p, alpha=weight_decay)
            # The moments follow the gradient during the warm-up only; afterwards they are
            # frozen here (with with_bagua the momentum goes on, averaged across ranks).
            if step < self.warmup_steps:
                state["exp_avg"].mul_(beta1).add_(grad, alpha=1 - beta1)
                state["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            bias_correction1 = 1 - beta1 ** step
            bias_correction2 = 1 - beta2 ** step
            denom = (state["exp_avg_sq"].sqrt() / math.sqrt(bias_correction2)).add_(eps)
            p.addcdiv_(state["exp_avg"], denom, value=-lr / bias_correction1)


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
