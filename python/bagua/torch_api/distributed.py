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
- The user's ``optimizer.step()`` (or ``fuse_step()``, or a learning-rate scheduler's wrapper
  of it) runs as usual, with libbagua's end of step after it (bagua/torch_api/_step.py):
  low-precision decentralized's exchange, the step count. QAdam is the exception: its update
  is libbagua's fused one.

On a CUDA model (every parameter on the current CUDA device) libbagua's context runs in its
``cuda`` mode: the flat storage is device memory, the buckets go through NCCL on libbagua's
own stream, which waits for events recorded on torch's current stream when each gradient is
marked ready, and libbagua's end of step is enqueued on torch's current stream. Nothing in
the step synchronizes the device; the host waits only for libbagua's communication stream
where the optimizer needs the reduced gradients (bounded by BAGUA_COMM_TIMEOUT_MS). Training
must stay on the stream that was current at ``with_bagua``.

A second ``with_bagua`` on the same module switches it to the new algorithm (and optimizers):
the first context is finished and dropped, and the parameters are registered afresh.
"""

import itertools
import operator

import torch

from bagua import _C
from bagua._C import BaguaError
from bagua.torch_api import _cuda, _fork, _step, communication
from bagua.torch_api.algorithms.base import Algorithm

_module_ids = itertools.count()


def _tensor(buf, device):
    """A float32 tensor over a ``bagua._C.Buffer`` without copying: host memory through the
    buffer protocol, device memory through ``__cuda_array_interface__``."""
    if device.type == "cuda":
        return torch.as_tensor(buf, device=device)
    return torch.frombuffer(buf, dtype=torch.float32)


def _views(ddp, buffer, params, device):
    """Tensors over libbagua's flat storage (weights or gradients), one per parameter.

    They are slices of one tensor over the whole storage, so parameters laid out back to back
    share a storage as well as memory: the fused optimizer (and any code that checks
    contiguity through ``Tensor.storage()``) then sees them as one run. Where the storage
    does not cover every tensor as expected, each gets a tensor of its own (correct, only
    not fusable)."""
    own = [_tensor(buffer(i, p.numel()), device) for i, (_, p) in enumerate(params)]
    base = min(t.data_ptr() for t in own)
    first = min(range(len(own)), key=lambda i: own[i].data_ptr())
    total = int(ddp.stats()["flat_elems"])
    offsets = [(t.data_ptr() - base) // 4 for t in own]
    if all((t.data_ptr() - base) % 4 == 0 and off + t.numel() <= total
           for t, off in zip(own, offsets)):
        whole = _tensor(buffer(first, total), device)
        return [whole[off:off + p.numel()].view_as(p)
                for off, (_, p) in zip(offsets, params)]
    return [t.view_as(p) for t, (_, p) in zip(own, params)]


def _step_check():
    """BAGUA_STEP_CHECK, checked by libbagua's registry (0 or 1; unset: 0)."""
    value = _C.param_get("BAGUA_STEP_CHECK")
    if value in (None, ""):
        return False
    problem = _C.param_check("BAGUA_STEP_CHECK", value)
    if problem:
        raise ValueError(problem)
    return int(value) == 1


def _ignored_names(module):
    """Parameter names excluded from communication, as upstream and torch DDP let a user say
    (``_bagua_params_and_buffers_to_ignore``, ``_ddp_params_and_buffers_to_ignore``). Upstream
    writes a top-level parameter as ``".name"``; both spellings are accepted."""
    names = set()
    for attr in ("_bagua_params_and_buffers_to_ignore", "_ddp_params_and_buffers_to_ignore"):
        for n in getattr(module, attr, None) or ():
            names.add(n[1:] if n.startswith(".") else n)
    return names


def _group_of(process_group):
    """The BaguaProcessGroup to train on; a rank outside it cannot train with it."""
    group = process_group or communication.get_default_group()
    if not isinstance(group, communication.BaguaProcessGroup):
        raise TypeError("process_group must be a bagua BaguaProcessGroup (new_group(), "
                        f"from_torch_group()), not {type(group).__name__}")
    if group.comm is None:
        raise ValueError(f"with_bagua: this rank is not a member of the process group {group}; "
                         "only its members can train with it")
    return group


class _BaguaDDP:
    """The per-module state behind ``with_bagua`` (``module._bagua``)."""

    def __init__(self, module, optimizers, algorithm, process_group, do_flatten,
                 bucket_bytes=None):
        self.algorithm = algorithm
        self.bucket_bytes = bucket_bytes
        self.do_flatten = do_flatten
        self.optimizers = optimizers
        self.group = _group_of(process_group)
        self.comm = self.group.comm
        self.require_backward_grad_sync = True
        self.train_steps = 0
        ignored = _ignored_names(module)
        named, seen = [], set()
        for name, p in module.named_parameters():
            if p.requires_grad and id(p) not in seen and name not in ignored:
                seen.add(id(p))
                named.append((name, p))
        if not named:
            raise ValueError("with_bagua: the module has no trainable parameters")
        self.device = _cuda.model_device(named)
        for name, p in named:
            if p.dtype != torch.float32:
                raise TypeError(f"with_bagua: parameter {name} is {p.dtype}; libbagua trains "
                                "float32 parameters (keep the master weights in float32, as "
                                "torch.autocast does)")
            if not p.is_contiguous():
                p.data = p.data.contiguous()
        owned = {id(p) for o in optimizers for g in o.param_groups for p in g["params"]}
        missing = [name for name, p in named if id(p) not in owned]
        if missing and optimizers:
            raise ValueError("with_bagua: the optimizers do not own these parameters of the "
                             f"model: {', '.join(missing[:5])}"
                             f"{' ...' if len(missing) > 5 else ''}")
        if algorithm.name == "async" and not do_flatten:
            raise ValueError("AsyncModelAverageAlgorithm needs do_flatten=True (as upstream): "
                             "the averaging thread updates the flat weights in place")
        self.qadam = algorithm.name == "qadam"  # QAdamAlgorithm checked its optimizer
        self.params = list(reversed(named))
        self._check_optimizer_state()
        self.ddp = None
        self._attach()
        if self.group.elastic is None:
            # An elastic job syncs the optimizer state in its State.sync() instead: a worker
            # joining a running job has none yet, so per-tensor broadcasts would not match.
            self._broadcast_optimizer_state()
        self.stepped = set()
        self._hooks = []
        self._born = _fork.generation
        self._forward_guard = module.register_forward_pre_hook(self._before_forward)
        for i, (_, p) in enumerate(self.params):
            acc = p.expand_as(p).grad_fn.next_functions[0][0]
            handle = acc.register_hook(self._make_hook(i, p))
            self._hooks.append((acc, handle))  # the hook lives as long as its node
        for opt in optimizers:
            _step.attach(opt, self)
            if self.qadam:
                opt._bagua_qadam = self

    def _attach(self):
        """Creates libbagua's context on the group's (current) communicator; collective. Every
        rank ends with rank 0's weights; with do_flatten the parameters and gradients become
        views into the context's flat storage."""
        cfg = self.algorithm.config()
        if not self.qadam:
            cfg["optimizer"] = "none"  # the user's torch optimizer updates the weights
        if self.bucket_bytes is not None:
            cfg["bucket_bytes"] = int(self.bucket_bytes)
        if self.device.type == "cuda":
            cfg["device"] = "cuda"
            cfg["cuda_device"] = self.device.index
            cfg["cuda_stream"] = torch.cuda.current_stream(self.device).cuda_stream
        self.flat_p, self.flat_g = [], []
        self.ddp = _C.DDP(self.comm, **cfg)
        self.numbered = _step_check()
        if self.numbered:
            # Every rank numbers its steps from the same counter (ready() then gives every rank
            # rank 0's), so a rank one iteration off is caught at its next step.
            self.ddp.set_step(self.train_steps)
        for i, (name, p) in enumerate(self.params):
            self.ddp.register(name, p.data_ptr(), None, p.numel())
            if p.dim() >= 2:
                # The matrix view torch's PowerSGD hook takes (shape[0] rows); algorithms that
                # compress no matrices ignore it.
                self.ddp.register_shape(i, p.shape[0])
        self.ddp.ready()  # every rank now holds rank 0's weights in its parameters
        self.ddp.release_params()
        self.flat_p = _views(self.ddp, self.ddp.param_buffer, self.params, self.device)
        self.flat_g = _views(self.ddp, self.ddp.grad_buffer, self.params, self.device)
        for i, (_, p) in enumerate(self.params):
            self.flat_g[i].zero_()
            if self.do_flatten:
                p.data = self.flat_p[i]
                p.grad = self.flat_g[i]
        self.marked = [False] * len(self.params)
        self.deferred = None  # a hook's BaguaError, raised at the end of backward
        self.callback_queued = False
        self.waited = False
        self.synced = False  # a backward of this step communicated (not under no_sync())
        # A new context averages in the background once past its warm-up (an elastic
        # rebuild restarts a paused averaging too).
        self.async_running = self.algorithm.name == "async"
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
                grad = p.grad
                p.data = self.flat_p[i].clone()
                p.grad = None if grad is None else grad.clone()
        self.ddp.abort()
        if self.group.elastic is not None:
            self.group.elastic.unfollow(self.ddp)
        self.flat_p, self.flat_g, self.ddp = [], [], None
        self.stepped.clear()

    def close(self):
        """Ends this context for good (a second ``with_bagua`` replaces it): stops async
        averaging on every rank (collective, as the switch is), removes the hooks, gives the
        parameters their own storage and the optimizers their plain step back."""
        if self.ddp is not None and self.algorithm.name == "async" and self.async_running:
            self.async_pause()
        for _, handle in self._hooks:
            handle.remove()
        self._hooks = []
        self._forward_guard.remove()
        for opt in self.optimizers:
            _step.detach(opt, self)
            if getattr(opt, "_bagua_qadam", None) is self:
                opt._bagua_qadam = None
        self._detach()

    def _before_forward(self, module, inputs):
        """Forward pre-hook: a forked child gets the fork's RuntimeError before autograd
        runs (see _fork). With numbered steps, a training forward under ``no_sync()`` counts
        as an iteration in the step number, so that a rank which runs one locally while the
        others communicate is caught at its next communicating step (instead of averaging
        its gradients with the others' previous iteration); ranks that accumulate alike stay
        alike."""
        _fork.check(self._born, "model's Bagua context")
        if (self.numbered and self.ddp is not None and not self.require_backward_grad_sync
                and module.training and torch.is_grad_enabled()):
            self.ddp.local_step()

    def _check_optimizer_state(self):
        """Optimizer state lives on the model's device (or the CPU, as torch keeps step
        counts): anything else would be refused half-way through the state's broadcast."""
        for opt in self.optimizers:
            for state in opt.state.values():
                for key, value in state.items():
                    if isinstance(value, torch.Tensor) and value.device not in (
                            torch.device("cpu"), self.device):
                        raise ValueError(
                            f"with_bagua: an optimizer holds state ({key!r}) on {value.device} "
                            f"for a model on {self.device}; create the optimizer after moving "
                            "the model (model.cuda() first), or move its state")

    def _broadcast_optimizer_state(self):
        """Rank 0's optimizer state (momentum buffers, step counts) on every rank."""
        for opt in self.optimizers:
            for group in opt.param_groups:
                for p in group["params"]:
                    for value in opt.state.get(p, {}).values():
                        if isinstance(value, torch.Tensor) and value.is_contiguous() \
                                and value.numel():
                            communication.broadcast(value, 0, comm=self.group)

    def _make_hook(self, i, p):
        def hook(*unused):
            if not self.require_backward_grad_sync or self.ddp is None:
                return  # no_sync(): the gradient accumulates locally
            if not self.callback_queued:
                torch.autograd.Variable._execution_engine.queue_callback(self._post_backward)
                self.callback_queued = True
                self.waited = False
                self.synced = True
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
            try:
                self.ddp.grad_ready(i)
            except BaguaError as e:
                # Raised from inside an autograd node's hook, an exception abandons the graph
                # task half-way, which was seen to leave the process unable to exit (a tensor's
                # destructor waiting for the GIL). The end-of-backward callback, queued above,
                # raises it instead, on the same backward() call.
                if self.deferred is None:
                    self.deferred = e
        return hook

    def _post_backward(self):
        self.callback_queued = False
        if self.ddp is None:
            return
        if self.deferred is not None:
            error, self.deferred = self.deferred, None
            self.marked = [False] * len(self.params)
            raise error
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
        if not self.optimizers:
            # Nobody will announce the update (the caller steps a weight update of its own,
            # or none): the step ends with its communication.
            self._end_step()

    # The step protocol of bagua/torch_api/_step.py.

    def before_step(self, opt):
        if self.ddp is not None and self.synced and not self.waited:
            self._post_backward()

    def lock(self):
        if self.ddp is not None and self.algorithm.name == "async":
            self.ddp.lock_weights()

    def unlock(self):
        if self.ddp is not None and self.algorithm.name == "async":
            self.ddp.unlock_weights()

    def set_lr(self, lr):
        """QAdam: the learning rate of libbagua's fused update (a scheduler may change it)."""
        if self.ddp is not None:
            self.ddp.set_lr(float(lr))

    def after_step(self, opt):
        """Runs libbagua's end of step once every optimizer has stepped. A step whose backward
        passes all ran under ``no_sync()`` (or that had none) was local: libbagua has no part
        in it."""
        if self.ddp is None or not self.synced:
            return
        self.stepped.add(id(opt))
        if len(self.stepped) < len(self.optimizers):
            return
        self._end_step()

    def _end_step(self):
        self.stepped.clear()
        if not self.do_flatten:
            for i, (_, p) in enumerate(self.params):
                self.flat_p[i].copy_(p.data)
        self.ddp.step()
        self.waited = False
        self.synced = False
        self.train_steps += 1
        if not self.do_flatten:
            for i, (_, p) in enumerate(self.params):
                p.data.copy_(self.flat_p[i])

    def stats(self):
        return self.ddp.stats()

    def async_pause(self):
        """Stops async averaging; a no-op when it is stopped already (as upstream)."""
        if self.async_running:
            self.ddp.async_pause()
            self.async_running = False

    def async_resume(self):
        """Restarts async averaging; a no-op when it runs already (as upstream)."""
        if not self.async_running:
            self.ddp.async_resume()
            self.async_running = True


def with_bagua(self, optimizers, algorithm, process_group=None, do_flatten=True):
    """Prepares this module for data-parallel training with a Bagua algorithm; returns it.

    Calling it again on the same module switches to the new algorithm and optimizers
    (collective, as the first call): the old context is finished first.

    Args:
        optimizers: the optimizers that update this module's parameters (a list; may be
            empty when the caller updates the weights itself).
        algorithm: a :class:`bagua.torch_api.algorithms.Algorithm` instance.
        process_group: the group to train on (default: all ranks).
        do_flatten: make parameters and gradients views into libbagua's flat storage (zero
            copy; required by the async algorithm). With False they keep their own storage
            and are copied in and out each step (as upstream's fused-optimizer example uses).
    """
    return _prepare(self, optimizers, algorithm, process_group, do_flatten)


def _prepare(self, optimizers, algorithm, process_group=None, do_flatten=True,
             bucket_bytes=None):
    """with_bagua, with the bucket size of the DistributedDataParallel wrapper."""
    if not isinstance(algorithm, Algorithm):
        raise TypeError(f"algorithm must be a bagua Algorithm instance, not "
                        f"{type(algorithm).__name__}")
    if isinstance(optimizers, torch.optim.Optimizer):
        optimizers = [optimizers]
    optimizers = list(optimizers or [])
    if not all(isinstance(o, torch.optim.Optimizer) for o in optimizers):
        raise TypeError("optimizers must be a list of torch.optim.Optimizer")
    algorithm._check_optimizers(optimizers)
    old = getattr(self, "_bagua", None)
    if old is not None:
        old.close()
        self._bagua = None
    if not hasattr(self, "_bagua_module_name"):
        self._bagua_module_name = f"{type(self).__name__}_{next(_module_ids)}"
    self._bagua = _BaguaDDP(self, optimizers, algorithm, process_group, do_flatten,
                            bucket_bytes)
    return self


def _require(self, what):
    ctx = getattr(self, "_bagua", None)
    if ctx is None:
        raise AttributeError(f"{what}: call with_bagua() first")
    return ctx


def bagua_stats(self):
    """libbagua's counters of this module's data-parallel context (bytes, overlap, ...)."""
    if getattr(self, "_bagua", None) is None:
        raise RuntimeError("bagua_stats(): call with_bagua() first")
    return self._bagua.stats()


def _bagua_algorithm(self):
    """The algorithm passed to the last ``with_bagua`` (upstream's ``bagua_algorithm``)."""
    return _require(self, "bagua_algorithm").algorithm


def _bagua_optimizers(self):
    """The optimizers passed to the last ``with_bagua``."""
    return _require(self, "bagua_optimizers").optimizers


def _bagua_buckets(self):
    """The parameters in libbagua's bucket order, as lists of parameter names per bucket.

    libbagua lays the buckets out itself (BAGUA_BUCKET_SIZE); upstream's bucket objects and
    their internals have no counterpart here, so this gives one list of all names, in the
    order they are registered (reverse of the module's parameter order)."""
    return [[name for name, _ in _require(self, "bagua_buckets").params]]


def _bagua_module_name(self):
    """The module's name (upstream uses it to tell modules apart)."""
    if not hasattr(self, "_bagua_module_name"):
        self._bagua_module_name = f"{type(self).__name__}_{next(_module_ids)}"
    return self._bagua_module_name


def _set_bagua_module_name(self, name):
    self._bagua_module_name = str(name)


def bagua_set_step(self, step):
    """Ours: numbers this module's current data-parallel step ``step`` (the training loop's
    iteration, the same on every rank), under ``BAGUA_STEP_CHECK=1``. A rank whose number
    differs from the others' at a step makes that step raise ``BaguaProtocolError`` on every
    rank before any of its data is averaged. Call it before the step's backward pass."""
    ctx = _require(self, "bagua_set_step")
    if not ctx.numbered:
        raise RuntimeError("bagua_set_step: steps are numbered only with BAGUA_STEP_CHECK=1 in "
                           "the environment before with_bagua()")
    ctx.ddp.set_step(operator.index(step))


def _bagua_train_step_counter(self):
    """Steps this module has trained through with_bagua (libbagua's end of step)."""
    return _require(self, "bagua_train_step_counter").train_steps


torch.nn.Module.with_bagua = with_bagua
torch.nn.Module.bagua_stats = bagua_stats
torch.nn.Module.bagua_set_step = bagua_set_step
torch.nn.Module.bagua_algorithm = property(_bagua_algorithm)
torch.nn.Module.bagua_optimizers = property(_bagua_optimizers)
torch.nn.Module.bagua_buckets = property(_bagua_buckets)
torch.nn.Module.bagua_module_name = property(_bagua_module_name, _set_bagua_module_name)
torch.nn.Module.bagua_train_step_counter = property(_bagua_train_step_counter)
BaguaModule = torch.nn.Module
