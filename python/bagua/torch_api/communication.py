"""Process groups and communication primitives on CPU tensors, over libbagua.

The names and arguments follow upstream Bagua's ``bagua.torch_api.communication``; tensors
are CPU tensors here (upstream asserts CUDA ones). Every call checks its tensors (device,
contiguity, dtype, sizes) and raises ``ValueError``/``TypeError`` naming the problem before
libbagua is called; failures inside libbagua raise :class:`BaguaError` subclasses
(``BaguaTimeoutError`` for a stalled peer, ``BaguaRemoteError`` for a dead one, ...).
"""

import enum

import torch
import torch.distributed as dist

from bagua import _C
from bagua._C import BaguaError
from bagua.torch_api import env

__all__ = [
    "ReduceOp", "BaguaProcessGroup", "init_process_group", "is_initialized", "new_group",
    "get_default_group", "allreduce", "allreduce_inplace", "broadcast", "allgather",
    "allgather_inplace", "reduce_scatter", "reduce_scatter_inplace", "alltoall",
    "alltoall_inplace", "reduce", "reduce_inplace", "gather", "scatter", "send", "recv",
    "barrier", "BaguaError",
]


class ReduceOp(enum.IntEnum):
    """Reduction operators, with upstream Bagua's (Aluminum's) numbers."""

    SUM = 0
    PRODUCT = 1
    MIN = 2
    MAX = 3
    BOR = 7
    BAND = 8
    BXOR = 9
    AVG = 10


_OPS = {ReduceOp.SUM: _C.SUM, ReduceOp.AVG: _C.AVG, ReduceOp.MIN: _C.MIN, ReduceOp.MAX: _C.MAX}

_DTYPES = {
    torch.float32: _C.F32, torch.float16: _C.F16, torch.bfloat16: _C.BF16,
    torch.float64: _C.F64, torch.int32: _C.I32, torch.int64: _C.I64, torch.uint8: _C.U8,
}


def _op_code(op):
    try:
        return _OPS[ReduceOp(op)]
    except (ValueError, KeyError):
        raise ValueError(f"reduce op {op!r} is not supported; accepted: ReduceOp.SUM, AVG, MIN, "
                         "MAX") from None


def _check(tensor, what):
    """Returns the dtype code of `tensor` after checking it can be handed to libbagua."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{what} must be a torch.Tensor, not {type(tensor).__name__}")
    if tensor.device.type != "cpu":
        raise ValueError(f"{what} is on {tensor.device}; this build communicates CPU tensors")
    if tensor.is_sparse or not tensor.is_contiguous():
        raise ValueError(f"{what} must be dense and contiguous (call .contiguous() first)")
    code = _DTYPES.get(tensor.dtype)
    if code is None:
        raise TypeError(f"{what} has dtype {tensor.dtype}; accepted: float32, float16, "
                        "bfloat16, float64, int32, int64, uint8")
    return code


def _same_dtype(a, b, what):
    if a.dtype != b.dtype:
        raise TypeError(f"{what}: send and receive tensors differ in dtype ({a.dtype} vs "
                        f"{b.dtype})")


class BaguaProcessGroup:
    """A set of ranks with its own libbagua communicator (``comm``).

    ``ranks`` lists the global ranks of the group; ``intra``/``inter`` communicators for
    hierarchical algorithms are created on demand by the data-parallel layer itself.
    """

    def __init__(self, comm, ranks, elastic=None):
        self.comm = comm
        self._ranks = list(ranks)
        self.elastic = elastic  # the bagua._C.Elastic of an elastic job's default group

    @property
    def ranks(self):
        """The global ranks of the group (an elastic group's follow the current round)."""
        return list(range(self.comm.size)) if self.elastic is not None else self._ranks

    def get_global_communicator(self):
        """The group's libbagua communicator (a :class:`bagua._C.Comm`)."""
        return self.comm

    def __repr__(self):
        return f"BaguaProcessGroup(ranks={self.ranks}, transport={self.comm.transport!r})"


_default_group = None


def is_initialized():
    """True once :func:`init_process_group` has run in this process."""
    return _default_group is not None


def get_default_group():
    """The group of all ranks; raises RuntimeError before :func:`init_process_group`."""
    if _default_group is None:
        raise RuntimeError("bagua is not initialised: call "
                           "bagua.torch_api.init_process_group() first")
    return _default_group


def _free_port(host=""):
    """A TCP port that binds on ``host`` now, below the kernel's ephemeral range if it can.

    Rank 0 publishes the port before libbagua listens on it. Port 0's pick would be racy:
    outgoing connections get ephemeral ports too and can take it in between.
    """
    return _C.spare_port(host)


def init_process_group(store=None, transport=None):
    """Joins this worker to the job: initialises ``torch.distributed`` (Gloo) if needed and
    creates the default Bagua group over libbagua.

    Reads the worker variables that bagua-launch and torchrun set (RANK, WORLD_SIZE,
    LOCAL_RANK, MASTER_ADDR, MASTER_PORT, and BAGUA_BOOTSTRAP under bagua-launch). Under
    torchrun-style ``env://`` both torch and libbagua would want MASTER_PORT, so rank 0 picks a
    free port for libbagua and publishes it through torch's store. Raises RuntimeError when
    called twice.
    """
    global _default_group
    if _default_group is not None:
        raise RuntimeError("init_process_group() was already called in this process")
    rank, world = env.get_rank(), env.get_world_size()
    if not dist.is_initialized():
        if store is None and world == 1 and not _C.param_get("MASTER_ADDR"):
            # A script run alone, outside any launcher: a one-rank job needs no rendezvous.
            store = dist.HashStore()
        if store is None:
            dist.init_process_group(backend="gloo", init_method="env://", rank=rank,
                                    world_size=world)
        else:
            dist.init_process_group(backend="gloo", store=store, rank=rank, world_size=world)
    bootstrap = env.get_bootstrap()
    if bootstrap.startswith("env://") and world > 1:
        kv = store if store is not None else dist.distributed_c10d._get_default_store()
        if rank == 0:
            kv.set("bagua/bootstrap", f"tcp://{env.get_master_addr()}:{_free_port()}")
        bootstrap = kv.get("bagua/bootstrap").decode()
    comm = _C.Comm(rank=rank, size=world, bootstrap=bootstrap, transport=transport)
    _default_group = BaguaProcessGroup(comm, range(world))


def _init_elastic_group(ctx):
    """Makes the default group follow the rounds of the elastic context ``ctx`` (used by
    :func:`bagua.torch_api.elastic.init_process_group`)."""
    global _default_group
    if _default_group is not None:
        raise RuntimeError("init_process_group() was already called in this process")
    _default_group = BaguaProcessGroup(ctx.comm(), [], elastic=ctx)
    env._live_comm = _default_group.comm


def new_group(ranks=None):
    """A group of the given global ranks (all of them when None); collective over the
    default group. Ranks outside ``ranks`` get None."""
    group = get_default_group()
    ranks = sorted(set(range(group.comm.size) if ranks is None else ranks))
    me = group.comm.rank
    comm = group.comm.split(0 if me in ranks else -1, me)
    return None if comm is None else BaguaProcessGroup(comm, ranks)


def _comm(group):
    return (group or get_default_group()).comm


def allreduce(send_tensor, recv_tensor, op=ReduceOp.SUM, comm=None):
    """Reduces ``send_tensor`` over all ranks into ``recv_tensor`` (same size and dtype)."""
    code = _check(send_tensor, "send_tensor")
    _check(recv_tensor, "recv_tensor")
    _same_dtype(send_tensor, recv_tensor, "allreduce")
    if send_tensor.numel() != recv_tensor.numel():
        raise ValueError(f"allreduce: send_tensor has {send_tensor.numel()} elements, "
                         f"recv_tensor {recv_tensor.numel()}")
    _comm(comm).allreduce(send_tensor.data_ptr(), recv_tensor.data_ptr(), send_tensor.numel(),
                          code, _op_code(op))


def allreduce_inplace(tensor, op=ReduceOp.SUM, comm=None):
    """Reduces ``tensor`` over all ranks in place."""
    code = _check(tensor, "tensor")
    _comm(comm).allreduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), code,
                          _op_code(op))


def broadcast(tensor, src=0, comm=None):
    """Copies rank ``src``'s ``tensor`` into every rank's ``tensor``."""
    code = _check(tensor, "tensor")
    _comm(comm).broadcast(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), code, int(src))


def _blocks(c, send_tensor, recv_tensor, what, recv_per_rank):
    """Checks a collective whose one side holds a block per rank; returns the dtype code."""
    code = _check(send_tensor, "send_tensor")
    _check(recv_tensor, "recv_tensor")
    _same_dtype(send_tensor, recv_tensor, what)
    n = c.size
    big, small = (recv_tensor, send_tensor) if recv_per_rank else (send_tensor, recv_tensor)
    if big.numel() != small.numel() * n:
        raise ValueError(f"{what}: {'recv' if recv_per_rank else 'send'}_tensor must hold "
                         f"world size ({n}) x {small.numel()} elements, not {big.numel()}")
    return code


def allgather(send_tensor, recv_tensor, comm=None):
    """Gathers every rank's ``send_tensor`` into ``recv_tensor`` (world size x its size),
    block r from rank r."""
    c = _comm(comm)
    code = _blocks(c, send_tensor, recv_tensor, "allgather", True)
    c.allgather(send_tensor.data_ptr(), recv_tensor.data_ptr(), send_tensor.numel(), code)


def allgather_inplace(tensor, comm=None):
    """In-place allgather: this rank's block of ``tensor`` is block ``rank``."""
    c = _comm(comm)
    code = _check(tensor, "tensor")
    if tensor.numel() % c.size:
        raise ValueError(f"allgather_inplace: {tensor.numel()} elements do not split into "
                         f"{c.size} blocks")
    n = tensor.numel() // c.size
    block = tensor.view(-1)[c.rank * n:(c.rank + 1) * n].clone()
    c.allgather(block.data_ptr(), tensor.data_ptr(), n, code)


def reduce_scatter(send_tensor, recv_tensor, op=ReduceOp.SUM, comm=None):
    """Reduces ``send_tensor`` (world size x ``recv_tensor``'s size) over all ranks; rank r
    receives the reduction of block r."""
    c = _comm(comm)
    code = _blocks(c, send_tensor, recv_tensor, "reduce_scatter", False)
    c.reduce_scatter(send_tensor.data_ptr(), recv_tensor.data_ptr(), recv_tensor.numel(), code,
                     _op_code(op))


def reduce_scatter_inplace(tensor, op=ReduceOp.SUM, comm=None):
    """In-place reduce-scatter: block ``rank`` of ``tensor`` receives its reduction."""
    c = _comm(comm)
    code = _check(tensor, "tensor")
    if tensor.numel() % c.size:
        raise ValueError(f"reduce_scatter_inplace: {tensor.numel()} elements do not split into "
                         f"{c.size} blocks")
    n = tensor.numel() // c.size
    out = torch.empty(n, dtype=tensor.dtype)
    c.reduce_scatter(tensor.data_ptr(), out.data_ptr(), n, code, _op_code(op))
    tensor.view(-1)[c.rank * n:(c.rank + 1) * n].copy_(out)


def alltoall(send_tensor, recv_tensor, comm=None):
    """Block j of rank i's ``send_tensor`` lands in block i of rank j's ``recv_tensor``."""
    c = _comm(comm)
    code = _check(send_tensor, "send_tensor")
    _check(recv_tensor, "recv_tensor")
    _same_dtype(send_tensor, recv_tensor, "alltoall")
    if send_tensor.numel() != recv_tensor.numel() or send_tensor.numel() % c.size:
        raise ValueError(f"alltoall: both tensors must hold the same number of elements, a "
                         f"multiple of the world size {c.size} ({send_tensor.numel()} and "
                         f"{recv_tensor.numel()})")
    c.alltoall(send_tensor.data_ptr(), recv_tensor.data_ptr(), send_tensor.numel() // c.size,
               code)


def alltoall_inplace(tensor, comm=None):
    """In-place :func:`alltoall`."""
    alltoall(tensor, tensor, comm)


def reduce(send_tensor, recv_tensor, dst, op=ReduceOp.SUM, comm=None):
    """Reduces ``send_tensor`` over all ranks into ``recv_tensor`` on rank ``dst``."""
    code = _check(send_tensor, "send_tensor")
    _check(recv_tensor, "recv_tensor")
    _same_dtype(send_tensor, recv_tensor, "reduce")
    _comm(comm).reduce(send_tensor.data_ptr(), recv_tensor.data_ptr(), send_tensor.numel(),
                       code, _op_code(op), int(dst))


def reduce_inplace(tensor, dst, op=ReduceOp.SUM, comm=None):
    """In-place :func:`reduce`: ``tensor`` holds the result on ``dst``."""
    reduce(tensor, tensor, dst, op, comm)


def gather(send_tensor, recv_tensor, dst, comm=None):
    """Gathers every rank's ``send_tensor`` into ``recv_tensor`` on rank ``dst``."""
    c = _comm(comm)
    code = _check(send_tensor, "send_tensor")
    if c.rank == int(dst):
        code = _blocks(c, send_tensor, recv_tensor, "gather", True)
    c.gather(send_tensor.data_ptr(), recv_tensor.data_ptr() if c.rank == int(dst) else 0,
             send_tensor.numel(), code, int(dst))


def scatter(send_tensor, recv_tensor, src, comm=None):
    """Block r of ``send_tensor`` on rank ``src`` lands in rank r's ``recv_tensor``."""
    c = _comm(comm)
    code = _check(recv_tensor, "recv_tensor")
    if c.rank == int(src):
        code = _blocks(c, send_tensor, recv_tensor, "scatter", False)
    c.scatter(send_tensor.data_ptr() if c.rank == int(src) else 0, recv_tensor.data_ptr(),
              recv_tensor.numel(), code, int(src))


def send(tensor, dst, comm=None):
    """Sends ``tensor`` to rank ``dst`` (matched in call order with its :func:`recv`)."""
    code = _check(tensor, "tensor")
    _comm(comm).send(tensor.data_ptr(), tensor.numel(), code, int(dst))


def recv(tensor, src, comm=None):
    """Receives into ``tensor`` from rank ``src``."""
    code = _check(tensor, "tensor")
    _comm(comm).recv(tensor.data_ptr(), tensor.numel(), code, int(src))


def barrier(comm=None):
    """Returns once every rank of the group has called it."""
    _comm(comm).barrier()
