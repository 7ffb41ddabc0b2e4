"""DistributedDataParallel: upstream Bagua's torch-DDP-compatible wrapper over ``with_bagua``."""

import contextlib

import torch

from bagua.torch_api import _checks, _cuda, communication
from bagua.torch_api import distributed as _bagua_distributed
from bagua.torch_api.algorithms.gradient_allreduce import GradientAllReduceAlgorithm

#: torch DDP's default bucket size; left at it, libbagua's own (BAGUA_BUCKET_SIZE) applies.
_TORCH_BUCKET_CAP_MB = 25


def to_bagua_process_group(process_group=None):
    """The Bagua group for ``process_group``: None (the default group), a Bagua group, or a
    ``torch.distributed`` process group (converted with ``from_torch_group``)."""
    if process_group is None:
        return communication.get_default_group()
    if isinstance(process_group, communication.BaguaProcessGroup):
        return process_group
    if isinstance(process_group, torch.distributed.ProcessGroup):
        return communication.from_torch_group(process_group)
    raise TypeError("process_group must be None, a bagua BaguaProcessGroup or a "
                    f"torch.distributed ProcessGroup, not {type(process_group).__name__}")


def _check_devices(module, device_ids, output_device, dim):
    """As torch DDP: a CPU module takes no device_ids or output_device; a module on one CUDA
    device takes None or that one device in each (torch's single-device form)."""
    named = [(n, p) for n, p in module.named_parameters()]
    device = _cuda.model_device(named) if named else torch.device("cpu")
    if device.type == "cpu":
        accepted, allowed = "None (as torch DDP for CPU modules)", ([], ["cpu"])
    else:
        accepted = f"None or [{device.index}] (the module's device, {device})"
        allowed = ([], [device.index], [str(device)])
    ids = None if device_ids is None else [
        d.index if isinstance(d, torch.device) and d.type == "cuda" else
        (str(d) if isinstance(d, torch.device) else d) for d in device_ids]
    if ids is not None and ids not in allowed:
        raise ValueError(f"DistributedDataParallel: device_ids={device_ids!r} on a module on "
                         f"{device}; accepted: {accepted}")
    if output_device is not None:
        out = torch.device(output_device if not isinstance(output_device, int)
                           else f"cuda:{output_device}")
        if out.type != device.type or out.index not in (None, device.index):
            raise ValueError(f"DistributedDataParallel: output_device={output_device!r} on a "
                             f"module on {device}; accepted: None or {device}")
    if dim != 0:
        raise ValueError(f"DistributedDataParallel: dim={dim} is not supported; accepted: 0 "
                         "(inputs are not scattered: each process feeds its own module)")


class DistributedDataParallel(torch.nn.Module):
    """Wraps ``module`` for data-parallel training with a Bagua algorithm, with torch DDP's
    arguments and upstream Bagua's.

    ``DistributedDataParallel(module, optimizers=[opt], algorithm=algo)`` is
    ``module.with_bagua([opt], algo)`` behind torch DDP's shape: ``forward`` calls the module,
    ``.module`` is the wrapped module, :meth:`no_sync` skips gradient communication.

    Args:
        module: the module (CPU parameters).
        device_ids, output_device: None, as torch DDP requires for CPU modules.
        dim: 0 (each process feeds its own module; nothing is scattered).
        broadcast_buffers: give every rank rank 0's buffers (BatchNorm's running statistics)
            at the start of each forward, as torch DDP does.
        process_group: None (all ranks), a Bagua group, or a ``torch.distributed`` group.
        bucket_cap_mb: libbagua's bucket size in MiB; at torch's default (25) libbagua's own
            (BAGUA_BUCKET_SIZE) applies.
        find_unused_parameters: accepted; parameters that get no gradient in a backward pass
            always contribute zeros here, so no search is needed.
        check_reduction: deprecated in torch DDP; ignored.
        gradient_as_bucket_view: gradients (and weights) are views into libbagua's flat
            storage (``with_bagua``'s ``do_flatten``).
        optimizers: the optimizers that update the module (default: none; libbagua's end of
            step then follows each backward pass).
        algorithm: a Bagua algorithm (default: gradient allreduce).
    """

    def __init__(self, module, device_ids=None, output_device=None, dim=0,
                 broadcast_buffers=True, process_group=None, bucket_cap_mb=_TORCH_BUCKET_CAP_MB,
                 find_unused_parameters=False, check_reduction=False,
                 gradient_as_bucket_view=True, optimizers=None, algorithm=None):
        super().__init__()
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"module must be a torch.nn.Module, not {type(module).__name__}")
        if not any(p.requires_grad for p in module.parameters()):
            raise ValueError("DistributedDataParallel: the module has no parameter that "
                             "requires a gradient")
        _check_devices(module, device_ids, output_device, dim)
        if not bucket_cap_mb or bucket_cap_mb <= 0:
            raise ValueError(f"bucket_cap_mb={bucket_cap_mb!r} must be > 0")
        bucket_bytes = None
        if bucket_cap_mb != _TORCH_BUCKET_CAP_MB:
            bucket_bytes = int(bucket_cap_mb * 1024 * 1024)
        self.broadcast_buffers = bool(broadcast_buffers)
        self.find_unused_parameters = bool(find_unused_parameters)
        self.gradient_as_bucket_view = bool(gradient_as_bucket_view)
        self.dim = dim
        self.device_ids = None
        self.output_device = None
        self.process_group = to_bagua_process_group(process_group)
        self.module = _bagua_distributed._prepare(
            module, optimizers or [], algorithm or GradientAllReduceAlgorithm(),
            self.process_group, self.gradient_as_bucket_view, bucket_bytes)

    def forward(self, *inputs, **kwargs):
        if self.broadcast_buffers:
            self._sync_buffers()
        return self.module(*inputs, **kwargs)

    def _sync_buffers(self):
        """Rank 0's buffers on every rank: one broadcast per dtype over a packed copy."""
        by_dtype = {}
        for b in self.module.buffers():
            by_dtype.setdefault(b.dtype, []).append(b)
        for dtype, bufs in by_dtype.items():
            if dtype not in _checks._DTYPES:
                continue  # (bool buffers, say: nothing libbagua can carry; torch DDP's Gloo
                # would, but no torch module keeps such state)
            flat = torch.cat([b.detach().reshape(-1) for b in bufs])
            communication.broadcast(flat, 0, comm=self.process_group)
            off = 0
            with torch.no_grad():
                for b in bufs:
                    b.copy_(flat[off:off + b.numel()].view_as(b))
                    off += b.numel()

    @contextlib.contextmanager
    def no_sync(self):
        """Within this context backward passes accumulate gradients locally, without
        communication; the first backward after it communicates the accumulated sum."""
        ctx = self.module._bagua
        old = ctx.require_backward_grad_sync
        ctx.require_backward_grad_sync = False
        try:
            yield
        finally:
            ctx.require_backward_grad_sync = old

    @property
    def require_backward_grad_sync(self):
        """False inside :meth:`no_sync`."""
        return self.module._bagua.require_backward_grad_sync

    @property
    def parameters_to_ignore(self):
        """The parameter names excluded from communication (the module's
        ``_bagua_params_and_buffers_to_ignore`` and ``_ddp_params_and_buffers_to_ignore``)."""
        return sorted(_bagua_distributed._ignored_names(self.module))

    @property
    def bagua_algorithm(self):
        """The algorithm the module trains with."""
        return self.module.bagua_algorithm

    @property
    def bagua_optimizers(self):
        """The optimizers given to the wrapper."""
        return self.module.bagua_optimizers

    @property
    def bagua_buckets(self):
        """The parameter names in libbagua's order (see ``Module.bagua_buckets``)."""
        return self.module.bagua_buckets

    def will_sync_module_buffers(self):
        """True when forward broadcasts rank 0's buffers (as torch DDP)."""
        return self.broadcast_buffers and any(True for _ in self.module.buffers())

    def bagua_stats(self):
        """libbagua's counters of the module's data-parallel context."""
        return self.module.bagua_stats()
