"""The generic fused optimizer (upstream Bagua's ``contrib/fuse/optimizer.py``): any
``torch.optim`` optimizer steps once over contiguous runs of parameters instead of once per
tensor.

``fuse_optimizer(optimizer)`` lays every parameter group's parameters (and their gradients)
out in one contiguous buffer per dtype and adds ``optimizer.fuse_step()``. ``fuse_step`` finds
the runs of parameters whose weights, gradients and every state tensor are contiguous, steps
a shadow copy of the optimizer once over one fused parameter per run, and exposes the fused
state to the original parameters as views, so ``optimizer.state`` stays meaningful (and a
plain ``optimizer.step()`` keeps working on the same state). Parameters that are not
contiguous (laid out elsewhere later, or with a gradient of their own) are stepped as they
are, in the same call. On a ``with_bagua`` module, in either order of the two calls,
``fuse_step()`` includes the data-parallel layer's end of step as ``step()`` does; with
``do_flatten=True`` there the parameters already lie in libbagua's flat storage and stay.
"""

import copy
import types
from collections import defaultdict

import torch

from bagua.torch_api import _step


def _flatten_group(params, state):
    """Re-points `params` (one dtype) into one new contiguous buffer, gradients too, and every
    per-element state tensor the optimizer already has for all of them (Adagrad's sums)."""
    params = [p for p in params if p.requires_grad]
    if not params:
        return
    total = sum(p.numel() for p in params)
    flat = torch.empty(total, dtype=params[0].dtype, device=params[0].device)
    flat_grad = torch.zeros(total, dtype=params[0].dtype, device=params[0].device)
    off = 0
    for p in params:
        n = p.numel()
        flat[off:off + n].copy_(p.data.view(-1))
        if p.grad is not None:
            flat_grad[off:off + n].copy_(p.grad.view(-1))
        p.data = flat[off:off + n].view_as(p)
        p.grad = flat_grad[off:off + n].view_as(p)
        off += n
    keys = set.intersection(*(set(state.get(p, {})) for p in params))
    for k in keys:
        vals = [state[p][k] for p in params]
        if all(isinstance(v, torch.Tensor) and v.numel() == p.numel() and p.numel() > 1
               for v, p in zip(vals, params)):
            buf, off = torch.cat([v.reshape(-1) for v in vals]), 0
            for p in params:
                state[p][k] = buf[off:off + p.numel()].view_as(p)
                off += p.numel()


def _contiguous(tensors):
    """True when the tensors lie back to back in one storage, in this order."""
    if any(t is None or not t.is_contiguous() for t in tensors):
        return False
    base = tensors[0].storage().data_ptr()
    pos = tensors[0].data_ptr()
    for t in tensors:
        if t.storage().data_ptr() != base or t.data_ptr() != pos:
            return False
        pos += t.numel() * t.element_size()
    return True


class _Run:
    """A fused parameter over a run of original parameters."""

    def __init__(self, members):
        self.members = members
        first, n = members[0], sum(p.numel() for p in members)
        self.param = torch.nn.Parameter(
            torch.as_strided(first.data, (n,), (1,)), requires_grad=True)
        self.param.grad = torch.as_strided(first.grad, (n,), (1,))
        self.key = (first.data_ptr(), first.grad.data_ptr(), n, first.dtype)


def _next_to(a, b):
    """True when tensor `b` starts where tensor `a` ends, in the same storage."""
    return (a is not None and b is not None and a.is_contiguous() and b.is_contiguous()
            and a.storage().data_ptr() == b.storage().data_ptr()
            and a.data_ptr() + a.numel() * a.element_size() == b.data_ptr())


def _runs(group_params, state):
    """Splits a group's parameters into fusable runs (weights, gradients and every per-element
    state tensor back to back; scalar state equal) and leftovers. Linear in the parameters:
    each one is compared with the end of the current run only."""
    ps = [p for p in group_params if p.grad is not None]
    ps.sort(key=lambda p: p.data_ptr())
    runs, cur = [], []

    def extends(run, p):
        last, first = run[-1], run[0]
        if p.dtype != last.dtype or not _next_to(last.data, p.data):
            return False
        if not _next_to(last.grad, p.grad):
            return False
        s_last, s_p, s_first = state.get(last, {}), state.get(p, {}), state.get(first, {})
        if set(s_last) != set(s_p):
            return False
        for k, v in s_p.items():
            if isinstance(v, torch.Tensor) and v.numel() == p.numel() and p.numel() > 1:
                if not _next_to(s_last[k], v):
                    return False
            elif not _same(v, s_first.get(k)):
                return False  # scalar state must agree, as upstream requires
        return True

    for p in ps:
        if cur and extends(cur, p):
            cur.append(p)
        else:
            if cur:
                runs.append(cur)
            cur = [p]
    if cur:
        runs.append(cur)
    return [r for r in runs if len(r) > 1], [r[0] for r in runs if len(r) == 1]


def _same(a, b):
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    return a == b


def _signature(params):
    """What the run layout depends on, cheap to compute: where weights and gradients live."""
    return tuple((p.data_ptr(), -1 if p.grad is None else p.grad.data_ptr()) for p in params)


def _group_layout(self, index, group):
    """The shadow group's parameters for `group`: fused runs and leftovers, recomputed only
    when a weight or gradient moved or the optimizer's state was replaced."""
    sig = (_signature(group["params"]), id(self.state))
    cached = self._bagua_layouts.get(index)
    if cached is not None and cached[0] == sig:
        return cached[1], cached[2]
    runs, leftovers = _runs(group["params"], self.state)
    fused = []
    for members in runs:
        run = _Run(members)
        old = self._bagua_run_cache.get(run.key)
        if old is not None and [id(p) for p in old.members] == [id(p) for p in members]:
            run = old
        else:
            # The fused state starts from the members' state (contiguous views, or nothing
            # before the first step).
            st, n = self.state.get(members[0], {}), run.param.numel()
            self._bagua_shadow.state[run.param] = {
                k: (torch.as_strided(v, (n,), (1,)) if isinstance(v, torch.Tensor)
                    and v.numel() == members[0].numel() and members[0].numel() > 1
                    else copy.deepcopy(v))
                for k, v in st.items()}
            run.state_ids = None
            self._bagua_run_cache[run.key] = run
        fused.append(run)
    self._bagua_layouts[index] = (sig, fused, leftovers)
    return fused, leftovers


def _per_element(v, n):
    """True for a state tensor with one value per element of an `n`-element parameter."""
    return isinstance(v, torch.Tensor) and v.numel() == n and n > 1


def _copy_scalar(dst_state, key, value):
    """Gives `dst_state` its own copy of a scalar state value (Adam's step count, ...)."""
    old = dst_state.get(key)
    if isinstance(value, torch.Tensor):
        if isinstance(old, torch.Tensor) and old.shape == value.shape and old is not value:
            old.copy_(value)
        else:
            dst_state[key] = value.clone()
    else:
        dst_state[key] = value


def _fused_update(self):
    """Steps the shadow optimizer once over the fused runs and the leftovers.

    Per-element state is shared: the originals see views of the fused state. Scalar state
    (a step count) is not: each original parameter keeps its own copy, brought up to date
    after every fused step, and the fused run takes its members' value before the step. A
    plain ``step()`` between two ``fuse_step()`` calls then advances each count once, as it
    should, instead of once per member of a shared one."""
    shadow = self._bagua_shadow
    shadow.param_groups = []
    all_runs = []
    for index, group in enumerate(self.param_groups):
        fused, leftovers = _group_layout(self, index, group)
        if fused:
            self._bagua_fused_count += 1  # (upstream's counter: groups stepped fused)
        for p in leftovers:
            shadow.state[p] = self.state[p]
        g = {k: v for k, v in group.items() if k != "params"}
        g["params"] = [r.param for r in fused] + leftovers
        shadow.param_groups.append(g)
        all_runs += fused
    for run in all_runs:
        fs, first = shadow.state[run.param], self.state.get(run.members[0], {})
        n = run.param.numel()
        for k, v in first.items():
            if k in fs and not _per_element(fs[k], n):
                _copy_scalar(fs, k, v)
    with torch.no_grad():
        # The class's own step: the instance's may be a wrapper (with_bagua's, a learning-rate
        # scheduler's) bound to the original optimizer, copied along by copy.copy.
        type(shadow).step(shadow)
    for run in all_runs:
        fs, n = shadow.state[run.param], run.param.numel()
        ids = tuple((k, id(v)) for k, v in fs.items())
        if ids != run.state_ids:
            # The originals see their part of the fused state as views; redone only when
            # the optimizer created or replaced a state tensor (torch updates them in place).
            off = 0
            for p in run.members:
                self.state[p] = {k: v.narrow(0, off, p.numel()).view_as(p)
                                 for k, v in fs.items() if _per_element(v, n)}
                off += p.numel()
            run.state_ids = ids
        for k, v in fs.items():
            if not _per_element(v, n):
                for p in run.members:
                    _copy_scalar(self.state[p], k, v)


def fuse_step(self, closure=None):
    """One optimizer step over fused runs of contiguous parameters (see the module doc).

    On an optimizer of a ``with_bagua`` module the step includes the data-parallel layer's
    work exactly as ``step()`` does. QAdam's update under ``with_bagua`` is already one fused
    call in libbagua, so there ``fuse_step()`` is ``step()``."""
    if getattr(self, "_bagua_qadam", None) is not None:
        self._bagua_fused_count += len(self.param_groups)  # every group is in the one call
        return self.step(closure)
    loss = None
    if closure is not None:
        with torch.enable_grad():
            loss = closure()
    _step.run_step(self, _fused_update, self)
    # A learning-rate scheduler counts steps in _step_count (its own wrapper of step() does,
    # which fuse_step bypasses); without this it warns that it stepped before the optimizer.
    if hasattr(self, "_step_count"):
        self._step_count += 1
    return loss


def fuse_optimizer(optimizer, do_flatten=True, check_flatten=True):
    """Makes ``optimizer`` fusable: returns it with a ``fuse_step()`` method.

    Args:
        optimizer: any ``torch.optim.Optimizer``.
        do_flatten: lay each group's parameters and gradients out contiguously (per dtype)
            now; without it only parameters that already are contiguous get fused.
        check_flatten: kept for upstream compatibility; contiguity is always checked at
            every ``fuse_step``, which falls back to per-tensor steps where it fails.
    """
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"fuse_optimizer needs a torch.optim.Optimizer, not "
                        f"{type(optimizer).__name__}")
    if getattr(optimizer, "_bagua_fused", False):
        raise RuntimeError("fuse_optimizer() was already called on this optimizer")
    if any(getattr(ctx, "do_flatten", False) for ctx in _step.owners(optimizer)):
        # with_bagua(do_flatten=True) already laid the parameters and gradients out in
        # libbagua's flat storage, which they must not leave.
        do_flatten = False
    if do_flatten:
        for group in optimizer.param_groups:
            by_dtype = defaultdict(list)
            for p in group["params"]:
                by_dtype[p.dtype].append(p)
            for params in by_dtype.values():
                _flatten_group(params, optimizer.state)
    shadow = copy.copy(optimizer)
    for attr in [a for a in vars(shadow) if a == "step" or a.startswith("_bagua")]:
        delattr(shadow, attr)
    shadow.state = defaultdict(dict)
    shadow.param_groups = []
    optimizer._bagua_shadow = shadow
    optimizer._bagua_run_cache = {}
    optimizer._bagua_layouts = {}
    optimizer._bagua_fused = True
    optimizer._bagua_fused_count = 0
    optimizer.fuse_step = types.MethodType(fuse_step, optimizer)
    return optimizer


def is_fused_optimizer(optimizer):
    """True when :func:`fuse_optimizer` was called on ``optimizer``."""
    return bool(getattr(optimizer, "_bagua_fused", False))


def _adjacent(a, b):
    """True when tensor `b` starts where tensor `a` ends (in memory, whatever the storage)."""
    return a.data_ptr() + a.numel() * a.element_size() == b.data_ptr()


def calculate_mutual_groups(tensors_list):
    """The groups of indices whose tensors lie back to back in memory in every list of
    ``tensors_list`` (weights, gradients, each state tensor of the same parameters): each
    group lists indices in memory order and has at least two; a group counts only where
    every list has exactly that group (as upstream Bagua's helper of the same name)."""
    tensors_list = [list(t) for t in tensors_list]
    if not tensors_list:
        return []
    size = len(tensors_list[0])
    if any(len(t) != size for t in tensors_list):
        raise ValueError("calculate_mutual_groups: the lists differ in length "
                         f"({[len(t) for t in tensors_list]}); they must describe the same "
                         "parameters")
    per_list = []
    for tensors in tensors_list:
        order = sorted(range(size), key=lambda i: tensors[i].data_ptr())
        groups, cur = [], []
        for i in order:
            if cur and not _adjacent(tensors[cur[-1]], tensors[i]):
                if len(cur) > 1:
                    groups.append(cur)
                cur = []
            cur.append(i)
        if len(cur) > 1:
            groups.append(cur)
        per_list.append(groups)
    return [g for g in per_list[0] if all(g in other for other in per_list[1:])]
