"""CUDA tensors in ``bagua.torch_api``: the checks, and the NCCL twin of each communicator.

A primitive called with CUDA tensors runs on an NCCL communicator built over the group's
libbagua communicator (``bagua._C.NcclComm``, created on the group's first CUDA call, which is
collective like the call itself). Its work is ordered with torch's current stream without
the host waiting: the NCCL stream waits for the current stream before the operation, and the
current stream waits for the NCCL stream after it. So the operation sees every kernel the
caller queued before it, and every kernel, copy or host read the caller queues after it sees
the result, as with a torch kernel. Because later work on the current stream waits for the
operation, the caching allocator (which reuses a block for the stream it was allocated on)
cannot hand a tensor's memory to anyone while NCCL still uses it. What is bounded is the
enqueueing: a host read of a result (``.cpu()``, ``.item()``) waits for the device like any
torch read, and if a peer died mid-operation that read waits until NCCL's own error handling
ends the kernel; ``synchronize()`` of a lane (or any later primitive, which fails once the
communicator is poisoned) is the bounded way to wait.

What is CUDA-only gets its checks here, so that a machine without a GPU tests the messages
(tests/python/test_cuda_api.py): which of "bagua built without CUDA" and "torch has no CUDA"
stops a CUDA call, and a model spread over several devices or on a device other than the
current one.
"""

import torch

from bagua import _C

# Communicators' NCCL twins: id(Comm) -> (Comm, _Lane). The Comm is held so that its id is
# not reused while the entry lives.
_lanes = {}


def unavailable_reason(cuda_built=None, torch_cuda=None):
    """None when CUDA tensors can be communicated, else the one sentence that says why not.

    The arguments default to this process's facts (``bagua._C.cuda_built``,
    ``torch.cuda.is_available()``); tests pass them to check each message."""
    if cuda_built is None:
        cuda_built = bool(_C.cuda_built)
    if torch_cuda is None:
        torch_cuda = torch.cuda.is_available()
    if not cuda_built:
        return ("this bagua was built without CUDA and NCCL (no nvcc, or no NCCL >= 2.14, at "
                "build time; docs/gpu.md, \"Building\"), so it communicates CPU tensors only")
    if not torch_cuda:
        return ("torch.cuda.is_available() is False (a torch without CUDA, or no GPU or driver "
                "visible to this process)")
    return None


def require(what):
    """Raises RuntimeError naming ``what`` when CUDA tensors cannot be communicated here."""
    reason = unavailable_reason()
    if reason is not None:
        raise RuntimeError(f"{what}: CUDA tensors cannot be used: {reason}")


def check_device(device, what):
    """Checks that ``device`` (a torch.device) is one bagua communicates on."""
    if device.type == "cpu":
        return
    if device.type != "cuda":
        raise ValueError(f"{what} is on {device}; accepted: CPU tensors or CUDA tensors")
    require(what)


def call_device(tensors, what):
    """The one device of a call's tensors (``None`` entries are skipped); CPU and CUDA tensors,
    or tensors of two CUDA devices, in one call are a ValueError."""
    devices = []
    for t in tensors:
        if t is not None and t.device not in devices:
            devices.append(t.device)
    if len(devices) > 1:
        raise ValueError(f"{what}: the tensors are on {' and '.join(map(str, devices))}; one call "
                         "takes CPU tensors only, or CUDA tensors of one device only")
    return devices[0] if devices else torch.device("cpu")


def model_device(named, current_device=None):
    """The device of a model's trainable parameters (``named``: (name, parameter) pairs), after
    checking that they are on one device, that it is the CPU or the current CUDA device
    (``torch.cuda.set_device``; ``current_device`` overrides it for tests), and that CUDA
    tensors can be communicated."""
    first = {}
    for name, p in named:
        first.setdefault(p.device, name)
    if len(first) > 1:
        where = ", ".join(f"{name} on {dev}" for dev, name in first.items())
        raise ValueError(f"with_bagua: the model's parameters are on {len(first)} devices "
                         f"({where}); move the whole model to one device first (model.cuda() "
                         "after torch.cuda.set_device(...), or model.cpu())")
    device = next(iter(first))
    if device.type == "cpu":
        return device
    if device.type != "cuda":
        raise ValueError(f"with_bagua: the model's parameters are on {device}; accepted: the "
                         "CPU or a CUDA device")
    if current_device is None:
        require("with_bagua")
        current_device = torch.cuda.current_device()
    if device.index != current_device:
        raise ValueError(f"with_bagua: the model is on {device} but this process's current CUDA "
                         f"device is cuda:{current_device}; call "
                         "torch.cuda.set_device(bagua.get_local_rank()) (modulo "
                         "torch.cuda.device_count() when ranks share GPUs) before model.cuda()")
    return device


class _Lane:
    """A communicator's NCCL twin on one device, with the calls of ``bagua._C.Comm``
    (addresses, counts, dtype codes) ordered with torch's current stream (module docstring).
    ``rank``, ``size`` and ``barrier()`` are the CPU communicator's."""

    def __init__(self, comm, device):
        self.comm = comm
        self.device = device
        self.nc = _C.NcclComm(comm, device.index)
        self.stream = torch.cuda.ExternalStream(self.nc.stream, device=device)

    @property
    def rank(self):
        return self.comm.rank

    @property
    def size(self):
        return self.comm.size

    def barrier(self):
        self.comm.barrier()

    def synchronize(self):
        """Waits, bounded by BAGUA_COMM_TIMEOUT_MS, for the work enqueued so far."""
        self.nc.synchronize()

    def __getattr__(self, name):
        if name == "nc":  # not set yet (or a copy): no recursion through __getattr__
            raise AttributeError(name)
        op = getattr(self.nc, name)
        if name not in ("allreduce", "reduce_scatter", "allgather", "alltoall", "broadcast",
                        "reduce", "gather", "scatter", "send", "recv"):
            return op

        def ordered(*args):
            current = torch.cuda.current_stream(self.device)
            self.stream.wait_stream(current)
            op(*args)
            current.wait_stream(self.stream)
        return ordered


def lane(comm, device, what="a primitive", p2p=False):
    """The NCCL twin of ``comm`` (a ``bagua._C.Comm``) on ``device``; created on first use
    (collective over every rank of ``comm``), and again when an elastic job's communicator has
    moved to a new round. A point-to-point call (``p2p``) involves two ranks only, so on a
    communicator of more than two it cannot be the one that creates the twin."""
    entry = _lanes.get(id(comm))
    if entry is not None:
        held, ln = entry
        if held is comm and ln.nc.over(comm):
            if ln.device != device:
                raise ValueError(f"this communicator runs CUDA tensors on {ln.device}; a call "
                                 f"with tensors on {device} cannot use it (one device per "
                                 "process and group)")
            return ln
        del _lanes[id(comm)]
        ln.nc.abort()  # built on a communicator that is gone: never used again
    if p2p and comm.size > 2:
        raise ValueError(f"{what}: the group's NCCL communicator for CUDA tensors does not exist "
                         "yet, and creating it takes every rank of the group, not the two of a "
                         "send/recv; run a collective on CUDA tensors (e.g. allreduce) on the "
                         "group first")
    ln = _Lane(comm, device)
    _lanes[id(comm)] = (comm, ln)
    return ln


def forget(comm=None):
    """Drops the NCCL twins (of ``comm`` only, when given), e.g. after an elastic rebuild."""
    for key in [k for k, (c, _) in _lanes.items() if comm is None or c is comm]:
        _lanes.pop(key)[1].nc.abort()
