"""``model.with_bagua(optimizers, algorithm)``: data-parallel training of any torch module on
libbagua's data-parallel layer (include/bagua/ddp.h).

How a step runs:

- ``with_bagua`` registers the trainable parameters with libbagua in reverse order (an
  approximation of backward order, as upstream), syncs rank 0's weights and optimizer state,
  and with ``do_flatten=True`` makes every parameter and gradient a view into libbagua's flat
  bucket storage (zero copy).
- A hook on each parameter's AccumulateGrad node marks its gradient ready during backward;
  a bucket whose tensors are all ready is communicated on libbagua's thread while backward
  goes on. One callback queued at the end of backward waits for all buckets.
- The user's ``optimizer.step()`` runs as usual (torch's own optimizer), wrapped so that
  libbagua's post-update work (low-precision decentralized's exchange, the step count) runs
  after it. QAdam is the exception: its update is libbagua's fused one.
"""

import torch

from bagua import _C
from bagua.torch_api import communication
from bagua.torch_api.algorithms.base import Algorithm
from bagua.torch_api.algorithms.q_adam import QAdamOptimizer


def _view(buf, like):
    return torch.frombuffer(buf, dtype=torch.float32).view_as(like)


class _BaguaDDP:
    """The per-module state behind ``with_bagua`` (``module._bagua``)."""

    def __init__(self, module, optimizers, algorithm, process_group, do_flatten):
        self.algorithm = algorithm
        self.do_flatten = do_flatten
        self.optimizers = optimizers
        self.group = process_group or communication.get_default_group()
        self.comm = self.group.comm
        named, seen = [], set()
        for name, p in module.named_parameters():
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                named.append((name, p))
        if not named:
            raise ValueError("with_bagua: the module has no trainable parameters")
        for name, p in named:
            if p.dtype != torch.float32 or p.device.type != "cpu":
                raise TypeError(f"with_bagua: parameter {name} is {p.dtype} on {p.device}; this "
                                "build trains float32 parameters on the CPU")
            if not p.is_contiguous():
                p.data = p.data.contiguous()
        owned = {id(p) for o in optimizers for g in o.param_groups for p in g["params"]}
        missing = [name for name, p in named if id(p) not in owned]
        if missing:
            raise ValueError("with_bagua: the optimizers do not own these parameters of the "
                             f"model: {', '.join(missing[:5])}"
                             f"{' ...' if len(missing) > 5 else ''}")
        if algorithm.name == "async" and not do_flatten:
            raise ValueError("AsyncModelAverageAlgorithm needs do_flatten=True (as upstream): "
                             "the averaging thread updates the flat weights in place")
        self.qadam = algorithm.name == "qadam"  # QAdamAlgorithm checked its optimizer
        self.params = list(reversed(named))
        self.ddp = None
        self._attach()
        if self.group.elastic is None:
            # An elastic job syncs the optimizer state in its State.sync() instead: a worker
            # joining a running job has none yet, so per-tensor broadcasts would not match.
            self._broadcast_optimizer_state()
        self.stepped = set()
        self._grad_accs = []
        for i, (_, p) in enumerate(self.params):
            acc = p.expand_as(p).grad_fn.next_functions[0][0]
            acc.register_hook(self._make_hook(i, p))
            self._grad_accs.append(acc)  # the hook lives as long as its node
        for opt in optimizers:
            self._wrap_step(opt)

    def _attach(self):
        """Creates libbagua's context on the group's (current) communicator; collective. Every
        rank ends with rank 0's weights; with do_flatten the parameters and gradients become
        views into the context's flat storage."""
        cfg = self.algorithm.config()
        if not self.qadam:
            cfg["optimizer"] = "none"  # the user's torch optimizer updates the weights
        self.flat_p, self.flat_g = [], []
        self.ddp = _C.DDP(self.comm, **cfg)
        for name, p in self.params:
            self.ddp.register(name, p.data_ptr(), None, p.numel())
        self.ddp.ready()  # every rank now holds rank 0's weights in its parameters
        self.ddp.release_params()
        self.flat_p = [_view(self.ddp.param_buffer(i, p.numel()), p)
                       for i, (_, p) in enumerate(self.params)]
        self.flat_g = [_view(self.ddp.grad_buffer(i, p.numel()), p)
                       for i, (_, p) in enumerate(self.params)]
        for i, (_, p) in enumerate(self.params):
            self.flat_g[i].zero_()
            if self.do_flatten:
                p.data = self.flat_p[i]
                p.grad = self.flat_g[i]
        self.marked = [False] * len(self.params)
        self.callback_queued = False
        self.waited = False
        if self.group.elastic is not None:
            self.group.elastic.follow(self.ddp)

    def _detach(self):
        """Gives the parameters their own storage back and drops libbagua's context (an
        elastic job's world change: the next round gets a new context from :meth:`_attach`).
        Local: the context's communication is aborted, not finished."""
        if self.ddp is None:
            return
        if self.do_flatten and self.flat_p:  # (empty when _attach failed half-way)
            for i, (_, p) in enumerate(self.params):
                p.data = self.flat_p[i].clone()
                p.grad = None
        self.ddp.abort()
        if self.group.elastic is not None:
            self.group.elastic.unfollow(self.ddp)
        self.flat_p, self.flat_g, self.ddp = [], [], None
        self.stepped.clear()

    def _broadcast_optimizer_state(self):
        """Rank 0's optimizer state (momentum buffers, step counts) on every rank."""
        for opt in self.optimizers:
            for group in opt.param_groups:
                for p in group["params"]:
                    for value in opt.state.get(p, {}).values():
                        if isinstance(value, torch.Tensor) and value.device.type == "cpu":
                            if value.is_contiguous() and value.numel():
                                communication.broadcast(value, 0, comm=self.group)

    def _make_hook(self, i, p):
        def hook(*unused):
            if not self.callback_queued:
                torch.autograd.Variable._execution_engine.queue_callback(self._post_backward)
                self.callback_queued = True
                self.waited = False
            if self.do_flatten:
                g = p.grad
                if g is None or g.data_ptr() != self.flat_g[i].data_ptr():
                    # The user replaced or dropped the gradient (zero_grad(set_to_none=True)):
                    # bring it back into the flat storage.
                    self.flat_g[i].copy_(g if g is not None else torch.zeros_like(p))
                    p.grad = self.flat_g[i]
            else:
                self.flat_g[i].copy_(p.grad)
            self.marked[i] = True
            self.ddp.grad_ready(i)
        return hook

    def _post_backward(self):
        self.callback_queued = False
        for i, done in enumerate(self.marked):
            if not done:
                self.flat_g[i].zero_()  # unused in this forward: contributes zero
        self.ddp.wait()
        self.marked = [False] * len(self.params)
        self.waited = True
        if not self.do_flatten:
            for i, (_, p) in enumerate(self.params):
                if p.grad is None:
                    p.grad = self.flat_g[i].clone()
                else:
                    p.grad.copy_(self.flat_g[i])
                p.data.copy_(self.flat_p[i])  # decentralized: the averaged weights

    def _wrap_step(self, opt):
        original = opt.step
        if isinstance(opt, QAdamOptimizer):
            opt._bagua_step = lambda: self._after_update(opt, qadam=True)
            return

        def step(*args, **kwargs):
            if not self.waited:
                self._post_backward()
            if self.algorithm.name == "async":
                self.ddp.lock_weights()
                try:
                    result = original(*args, **kwargs)
                finally:
                    self.ddp.unlock_weights()
            else:
                result = original(*args, **kwargs)
            self._after_update(opt)
            return result

        opt.step = step

    def _after_update(self, opt, qadam=False):
        """Runs libbagua's end of step once every optimizer has stepped."""
        if qadam:
            if not self.waited:
                self._post_backward()
            self.ddp.set_lr(float(opt.param_groups[0]["lr"]))
        self.stepped.add(id(opt))
        if len(self.stepped) < len(self.optimizers):
            return
        self.stepped.clear()
        if not self.do_flatten:
            for i, (_, p) in enumerate(self.params):
                self.flat_p[i].copy_(p.data)
        self.ddp.step()
        self.waited = False
        if not self.do_flatten:
            for i, (_, p) in enumerate(self.params):
                p.data.copy_(self.flat_p[i])

    def stats(self):
        return self.ddp.stats()

    def async_pause(self):
        self.ddp.async_pause()

    def async_resume(self):
        self.ddp.async_resume()


def with_bagua(self, optimizers, algorithm, process_group=None, do_flatten=True):
    """Prepares this module for data-parallel training with a Bagua algorithm; returns it.

    Args:
        optimizers: the optimizers that update this module's parameters (a list).
        algorithm: a :class:`bagua.torch_api.algorithms.Algorithm` instance.
        process_group: the group to train on (default: all ranks).
        do_flatten: make parameters and gradients views into libbagua's flat storage (zero
            copy; required by the async algorithm). With False they keep their own storage
            and are copied in and out each step (as upstream's fused-optimizer example uses).
    """
    if getattr(self, "_bagua", None) is not None:
        raise RuntimeError("with_bagua() was already called on this module")
    if not isinstance(algorithm, Algorithm):
        raise TypeError(f"algorithm must be a bagua Algorithm instance, not "
                        f"{type(algorithm).__name__}")
    if isinstance(optimizers, torch.optim.Optimizer):
        optimizers = [optimizers]
    optimizers = list(optimizers)
    if not optimizers or not all(isinstance(o, torch.optim.Optimizer) for o in optimizers):
        raise TypeError("optimizers must be a list of torch.optim.Optimizer")
    algorithm._check_optimizers(optimizers)
    self._bagua = _BaguaDDP(self, optimizers, algorithm, process_group, do_flatten)
    self.bagua_algorithm = algorithm
    return self


def bagua_stats(self):
    """libbagua's counters of this module's data-parallel context (bytes, overlap, ...)."""
    if getattr(self, "_bagua", None) is None:
        raise RuntimeError("bagua_stats(): call with_bagua() first")
    return self._bagua.stats()


torch.nn.Module.with_bagua = with_bagua
torch.nn.Module.bagua_stats = bagua_stats
BaguaModule = torch.nn.Module
