"""Process groups, communicators and communication primitives on CPU and CUDA tensors, over
libbagua.

The names and arguments follow upstream Bagua's ``bagua.torch_api.communication``. CPU tensors
go through libbagua's communicator; CUDA tensors through its NCCL twin, ordered with torch's
current stream (bagua/torch_api/_cuda.py); one call takes tensors of one device. Every call
checks its arguments (device,
contiguity, dtype, sizes against what will be written, ranks) and raises
``ValueError``/``TypeError`` naming the problem before libbagua is called; failures inside
libbagua raise :class:`BaguaError` subclasses (``BaguaTimeoutError`` for a stalled peer,
``BaguaRemoteError`` for a dead one, ...).

The ``comm`` argument of every primitive accepts what upstream's does: ``None`` (the default
group), a communicator from ``group.get_global_communicator()`` and its intra-/inter-node
siblings, or ``CommMember.NON_COMM_MEMBER`` (then the call does nothing: this rank is not in
the communicator). It also accepts a :class:`BaguaProcessGroup` (its global communicator) and
a raw ``bagua._C.Comm``.
"""

import hashlib
import operator
import socket
import weakref

import torch
import torch.distributed as dist

from bagua import _C
from bagua._C import BaguaError
from bagua.torch_api import _fork, _primitives, _store, env
from bagua.torch_api._checks import ReduceOp, _count_arg  # noqa: F401 (upstream's name)
from bagua.torch_api._primitives import (  # noqa: F401 (this module's names, as upstream's)
    allgather, allgather_inplace, allreduce, allreduce_coalesced_inplace, allreduce_inplace,
    alltoall, alltoall_inplace, alltoall_v, alltoall_v_inplace, barrier, broadcast,
    broadcast_coalesced, broadcast_object, gather, gather_inplace, recv, reduce, reduce_inplace,
    reduce_scatter, reduce_scatter_inplace, scatter, scatter_inplace, send)

__all__ = [
    "ReduceOp", "BaguaProcessGroup", "BaguaSingleCommunicatorPy", "CommMember",
    "init_process_group", "is_initialized", "new_group", "from_torch_group",
    "get_default_group", "get_communicator", "get_backend",
    "send", "recv", "broadcast", "broadcast_object", "broadcast_coalesced",
    "reduce", "reduce_inplace", "allreduce", "allreduce_inplace",
    "allreduce_coalesced_inplace", "allgather", "allgather_inplace", "gather",
    "gather_inplace", "scatter", "scatter_inplace", "reduce_scatter", "reduce_scatter_inplace",
    "alltoall", "alltoall_inplace", "alltoall_v", "alltoall_v_inplace", "barrier",
    "BaguaError",
]


class _Sentinel:
    def __init__(self, name):
        self._name = name

    def __repr__(self):
        return self._name


class CommMember:
    """Upstream's communicator markers: ``WORLD`` (the default group's communicator, as
    ``None``) and ``NON_COMM_MEMBER`` (what a rank outside a group gets instead of a
    communicator; primitives called with it return at once)."""

    WORLD = _Sentinel("CommMember.WORLD")
    NON_COMM_MEMBER = _Sentinel("CommMember.NON_COMM_MEMBER")


# ---------------------------------------------------------------------------------------------
# Communicators and process groups
# ---------------------------------------------------------------------------------------------

class BaguaSingleCommunicatorPy:
    """A communicator of a process group, with upstream's method names (``rank()``,
    ``nranks()``, ``abort()``, and each primitive as a method taking torch tensors with
    upstream's positional order, e.g. ``comm.allreduce_inplace(tensor, ReduceOp.AVG)``).

    ``comm`` is the underlying ``bagua._C.Comm``. The global communicator of an elastic job's
    default group follows the rounds: ``rank()`` and ``nranks()`` are the current round's.
    """

    def __init__(self, comm):
        self.comm = comm
        self._aborted = False

    def rank(self):
        """This process's rank in the communicator."""
        return self.comm.rank

    def nranks(self):
        """The number of ranks of the communicator."""
        return self.comm.size

    def abort(self):
        """Makes current and future calls on this communicator raise ``BaguaAbortedError``
        (callable from any thread)."""
        self._aborted = True
        self.comm.abort()

    def check_abort(self):
        """True once :meth:`abort` was called on this communicator."""
        return self._aborted

    def allreduce(self, send_tensor, recv_tensor, op=ReduceOp.SUM):
        allreduce(send_tensor, recv_tensor, op, comm=self)

    def allreduce_inplace(self, tensor, op=ReduceOp.SUM):
        allreduce_inplace(tensor, op, comm=self)

    def broadcast(self, tensor, root_rank=0):
        broadcast(tensor, root_rank, comm=self)

    def reduce(self, send_tensor, recv_tensor, dst, op=ReduceOp.SUM):
        reduce(send_tensor, recv_tensor, dst, op, comm=self)

    def reduce_inplace(self, tensor, dst, op=ReduceOp.SUM):
        reduce_inplace(tensor, dst, op, comm=self)

    def send(self, tensor, peer_rank):
        send(tensor, peer_rank, comm=self)

    def recv(self, tensor, peer_rank):
        recv(tensor, peer_rank, comm=self)

    def allgather(self, send_tensor, recv_tensor):
        allgather(send_tensor, recv_tensor, comm=self)

    def allgather_inplace(self, tensor):
        allgather_inplace(tensor, comm=self)

    def gather(self, send_tensor, recv_tensor, dst):
        gather(send_tensor, recv_tensor, dst, comm=self)

    def gather_inplace(self, tensor, count, dst):
        gather_inplace(tensor, count, dst, comm=self)

    def scatter(self, send_tensor, recv_tensor, src):
        scatter(send_tensor, recv_tensor, src, comm=self)

    def scatter_inplace(self, tensor, count, src):
        scatter_inplace(tensor, count, src, comm=self)

    def reduce_scatter(self, send_tensor, recv_tensor, op=ReduceOp.SUM):
        reduce_scatter(send_tensor, recv_tensor, op, comm=self)

    def reduce_scatter_inplace(self, tensor, op=ReduceOp.SUM):
        reduce_scatter_inplace(tensor, op, comm=self)

    def alltoall(self, send_tensor, recv_tensor):
        alltoall(send_tensor, recv_tensor, comm=self)

    def alltoall_inplace(self, tensor):
        alltoall_inplace(tensor, comm=self)

    def alltoall_v(self, send_tensor, send_counts, send_displs, recv_tensor, recv_counts,
                   recv_displs):
        alltoall_v(send_tensor, send_counts, send_displs, recv_tensor, recv_counts,
                   recv_displs, comm=self)

    def alltoall_v_inplace(self, tensor, counts, displs):
        alltoall_v_inplace(tensor, counts, displs, comm=self)

    def barrier(self):
        barrier(comm=self)

    def __repr__(self):
        return f"BaguaSingleCommunicatorPy(rank={self.rank()}, nranks={self.nranks()})"


def _node_hash():
    """This rank's node identity, chosen as libbagua chooses it (BAGUA_NODE_ID, else the
    launcher's GROUP_RANK, else the host name), so that intra-node communicators group the
    ranks libbagua itself treats as one node."""
    node_id = _C.param_get("BAGUA_NODE_ID")
    group_rank = _C.param_get("GROUP_RANK")
    if node_id:
        key = f"id:{node_id}"
    elif group_rank not in (None, "") and int(group_rank) >= 0:
        key = f"group:{int(group_rank)}"
    else:
        key = f"host:{socket.gethostname()}"
    return int.from_bytes(hashlib.sha1(key.encode()).digest()[:7], "little")


class BaguaProcessGroup:
    """A set of ranks with its own libbagua communicator.

    Attributes: ``ranks`` (sorted global ranks; an elastic default group's follow the current
    round), ``stream`` (kept for upstream's signature; unused on CPU), ``group_name`` (the key
    of :func:`get_communicator`) and ``comm`` (the ``bagua._C.Comm`` of the group, None on a
    rank outside it). The global communicator exists from creation; the intra- and
    inter-node ones are created on first request, which is collective over the group's
    members.
    """

    def __init__(self, ranks, stream=None, group_name=None, comm=None, elastic=None):
        self._ranks = list(ranks)
        self.stream = stream
        self.group_name = group_name
        self.comm = comm
        self.elastic = elastic  # the bagua._C.Elastic of an elastic job's default group
        self._communicators = {}
        self._topology = None

    @property
    def ranks(self):
        """The global ranks of the group (an elastic group's follow the current round)."""
        return list(range(self.comm.size)) if self.elastic is not None else list(self._ranks)

    def get_global_communicator(self):
        """The communicator of all the group's ranks (``CommMember.NON_COMM_MEMBER`` on a
        rank outside the group)."""
        return self._communicator("global")

    def get_inter_node_communicator(self):
        """The communicator between nodes: the group's ranks whose node-local rank is that of
        the group's first rank, as upstream (``NON_COMM_MEMBER`` elsewhere). Created on first
        request; collective over the group's members."""
        return self._communicator("inter")

    def get_intra_node_communicator(self):
        """The communicator of the group's ranks on this rank's node. Created on first
        request; collective over the group's members."""
        return self._communicator("intra")

    def _communicator(self, kind):
        if kind not in ("global", "inter", "intra"):
            raise ValueError(f"communicator name {kind!r} is unknown; accepted: 'global', "
                             "'inter', 'intra'")
        if self.comm is None:
            return CommMember.NON_COMM_MEMBER
        if kind not in self._communicators:
            if kind == "global":
                made = self.comm
            else:
                made = self._split_by_node(kind)
            self._communicators[kind] = (BaguaSingleCommunicatorPy(made) if made is not None
                                         else CommMember.NON_COMM_MEMBER)
        return self._communicators[kind]

    def _split_by_node(self, kind):
        if self.elastic is not None:
            raise RuntimeError("intra/inter-node communicators of an elastic group are not "
                               "available: its membership changes with the rounds; use "
                               "get_global_communicator()")
        if self._topology is None:
            # One row per member, in group-rank order: node identity and node-local rank in
            # the whole job (upstream's rank mappings, gathered over the group only, so that
            # ranks outside the group need not take part).
            mine = torch.tensor([_node_hash(), _get_default_group().comm.local_rank],
                                dtype=torch.int64)
            rows = torch.empty(2 * self.comm.size, dtype=torch.int64)
            self.comm.allgather(mine.data_ptr(), rows.data_ptr(), 2, _C.I64)
            self._topology = rows.view(-1, 2).tolist()
        nodes, me = [], self.comm.rank
        for node, _ in self._topology:
            if node not in nodes:
                nodes.append(node)
        if kind == "intra":
            color = nodes.index(self._topology[me][0])
        else:
            color = 0 if self._topology[me][1] == self._topology[0][1] else -1
        return self.comm.split(color, me)

    def __repr__(self):
        transport = self.comm.transport if self.comm is not None else None
        return (f"BaguaProcessGroup(name={self.group_name!r}, ranks={self.ranks}, "
                f"transport={transport!r})")


_default_group = None
_group_count = 0
#: Group name -> BaguaProcessGroup (upstream's ``_pg_map``).
_pg_map = {}
#: BaguaProcessGroup -> {global rank: group rank} (upstream's ``_pg_group_ranks``).
_pg_group_ranks = {}
#: torch ProcessGroup -> BaguaProcessGroup, filled by ``pg.bagua_patch()``.
_torch_to_bagua_pg_map = weakref.WeakKeyDictionary()


def _next_group_name():
    global _group_count
    _group_count += 1
    return str(_group_count)


def _register(group):
    _pg_map[group.group_name] = group
    if group.elastic is None:
        _pg_group_ranks[group] = {g: i for i, g in enumerate(group.ranks)}
    return group


def is_initialized():
    """True once :func:`init_process_group` has run in this process."""
    return _default_group is not None


def _get_default_group():
    """The group of all ranks; raises RuntimeError before :func:`init_process_group`."""
    if _default_group is None:
        raise RuntimeError("bagua is not initialised: call "
                           "bagua.torch_api.init_process_group() first")
    return _default_group


#: The name this front end has used so far for :func:`_get_default_group`.
get_default_group = _get_default_group


def get_backend(model_name=None):
    """The name of the communication backend: libbagua over shm/tcp (upstream returns its
    Rust backend object; there is no such object here)."""
    return "bagua-c"


def _free_port(host=""):
    """A TCP port that binds on ``host`` now, below the kernel's ephemeral range if it can.

    Rank 0 publishes the port before libbagua listens on it. Port 0's pick would be racy:
    outgoing connections get ephemeral ports too and can take it in between.
    """
    return _C.spare_port(host)


class _ExplicitWorld:
    """What ``env.get_rank()`` and its siblings answer after init_process_group was given
    explicit values (libbagua's parameter registry reads the environment once, so changing
    os.environ afterwards would not reach it)."""

    def __init__(self, rank, size, local_rank, local_size):
        self.rank, self.size = rank, size
        self.local_rank, self.local_size = local_rank, local_size


def _torch_backend():
    """``torch.distributed``'s backend for the script's own calls: Gloo, and with a GPU also
    NCCL for CUDA tensors (as upstream, whose scripts call e.g.
    ``torch.distributed.barrier(device_ids=[...])``), where torch can combine the two (2.0
    and later). Bagua's own traffic never goes through it; torch creates NCCL communicators
    only when the script uses them."""
    if torch.cuda.is_available() and int(torch.__version__.split(".")[0]) >= 2:
        return "cpu:gloo,cuda:nccl"
    return "gloo"


def init_process_group(store=None, rank=-1, world_size=-1, local_world_size=-1,
                       transport=None):
    """Joins this worker to the job: initialises ``torch.distributed`` (Gloo, plus NCCL for
    CUDA tensors where a GPU is visible) if needed and
    creates the default Bagua group over libbagua.

    Args:
        store: a ``torch.distributed.Store`` shared by the workers (default: torch's
            ``env://`` rendezvous on MASTER_ADDR/MASTER_PORT).
        rank, world_size, local_world_size: explicit values that override RANK, WORLD_SIZE
            and LOCAL_WORLD_SIZE (LOCAL_RANK becomes ``rank % local_world_size``), as
            upstream; -1 reads the environment.
        transport: ours: libbagua's transport, "auto", "tcp" or "shm" (default:
            BAGUA_TRANSPORT).

    Reads the worker variables that bagua-launch and torchrun set (RANK, WORLD_SIZE,
    LOCAL_RANK, MASTER_ADDR, MASTER_PORT, and BAGUA_BOOTSTRAP under bagua-launch). Under
    torchrun-style ``env://`` both torch and libbagua would want MASTER_PORT, so rank 0 picks a
    free port for libbagua and publishes it through torch's store. Under bagua-launch on one
    host, ``torch.distributed`` starts on a private ``FileStore`` and Gloo on loopback, so the
    job opens no listener beyond loopback; across hosts, on a store in the job's etcd, so it
    opens no store listener (see ``_store``). The same holds on ``env://`` when the job has a
    secret (BAGUA_JOB_SECRET): libbagua's authenticated bootstrap on MASTER_PORT runs first,
    and torch gets the etcd or private store instead of an open TCPStore (RuntimeError when
    it can have neither). Raises RuntimeError when called twice.
    """
    global _default_group
    if _default_group is not None:
        raise RuntimeError("init_process_group() was already called in this process")
    _fork.install()
    explicit = (rank, world_size, local_world_size) != (-1, -1, -1)
    world = env.get_world_size() if world_size == -1 else _count_arg(world_size, "world_size")
    if world < 1:
        raise ValueError(f"world_size={world} must be at least 1")
    me = env.get_rank() if rank == -1 else _count_arg(rank, "rank")
    if me >= world:
        raise ValueError(f"rank={me} is out of range: accepted 0 to {world - 1} (world size "
                         f"{world})")
    if local_world_size == -1:
        local_size, local_rank = env.get_local_size(), env.get_local_rank()
    else:
        local_size = _count_arg(local_world_size, "local_world_size")
        if local_size < 1:
            raise ValueError(f"local_world_size={local_size} must be at least 1")
        local_rank = me % local_size
    bootstrap = env.get_bootstrap()
    comm = None
    if not dist.is_initialized():
        if store is None and world == 1 and not _C.param_get("MASTER_ADDR"):
            # A script run alone, outside any launcher: a one-rank job needs no rendezvous.
            store = dist.HashStore()
        if store is None and world > 1 and local_size == world and \
                not bootstrap.startswith("env://"):
            # bagua-launch on one host: no unauthenticated TCPStore (see _store.py).
            comm = _C.Comm(rank=me, size=world, bootstrap=bootstrap, transport=transport)
            store = _store.private_file_store(comm, world)
            _store.pin_gloo_to_loopback()
        if store is None and world > 1 and bootstrap.startswith("etcd://"):
            # bagua-launch across hosts: torch's store in the job's etcd, no TCPStore.
            store = _store.job_etcd_store()
        if store is None and world > 1 and bootstrap.startswith("env://") and \
                _C.param_get("BAGUA_JOB_SECRET"):
            # A job with a secret (bagua-launch's) on env://: torch's env:// store would be a
            # TCPStore on MASTER_PORT without it. libbagua's env:// bootstrap proves the
            # secret, so it comes first, and torch gets a store that needs no listener.
            comm = _C.Comm(rank=me, size=world, bootstrap=bootstrap, transport=transport)
            if local_size == world:
                store = _store.private_file_store(comm, world)
                _store.pin_gloo_to_loopback()
            else:
                store = _store.job_etcd_store()
            if store is None:
                raise RuntimeError(
                    "BAGUA_BOOTSTRAP=env:// with BAGUA_JOB_SECRET set, on ranks that span "
                    "hosts: torch.distributed's env:// store would be a TCPStore on "
                    "MASTER_PORT that anyone can read and write, and this job has no etcd "
                    "(BAGUA_RDZV_ENDPOINT, BAGUA_JOB_ID, BAGUA_ROUND) for it; accepted: "
                    "etcd:// (bagua-launch's default), all ranks on one host, or a store "
                    "passed to init_process_group(store=...)")
        backend = _torch_backend()
        if store is None:
            dist.init_process_group(backend=backend, init_method="env://", rank=me,
                                    world_size=world)
        else:
            dist.init_process_group(backend=backend, store=store, rank=me, world_size=world)
    if comm is None and bootstrap.startswith("env://") and world > 1:
        kv = store if store is not None else dist.distributed_c10d._get_default_store()
        if me == 0:
            kv.set("bagua/bootstrap", f"tcp://{env.get_master_addr()}:{_free_port()}")
        bootstrap = kv.get("bagua/bootstrap").decode()
    if comm is None:
        comm = _C.Comm(rank=me, size=world, bootstrap=bootstrap, transport=transport)
    if explicit:
        env._live_comm = _ExplicitWorld(me, world, local_rank, local_size)
    _default_group = _register(BaguaProcessGroup(range(world), None, _next_group_name(),
                                                 comm=comm))


def _init_elastic_group(ctx):
    """Makes the default group follow the rounds of the elastic context ``ctx`` (used by
    :func:`bagua.torch_api.elastic.init_process_group`)."""
    global _default_group
    if _default_group is not None:
        raise RuntimeError("init_process_group() was already called in this process")
    _default_group = _register(BaguaProcessGroup([], None, _next_group_name(), comm=ctx.comm(),
                                                 elastic=ctx))
    env._live_comm = _default_group.comm


def new_group(ranks=None, stream=None):
    """Creates a process group of the given global ranks (all of them when None).

    As upstream, every rank of the default group must call it, in the same order, members or
    not; each gets a group object. Members get a working communicator from
    ``get_global_communicator()``, the others ``CommMember.NON_COMM_MEMBER`` (and
    ``_rank_not_in_group(group)`` is True there). ``stream`` is accepted for upstream's
    signature and unused on CPU. Raises ValueError for a rank outside the world or a repeated
    one.
    """
    default = _get_default_group()
    world = default.comm.size
    if ranks is None:
        ranks = list(range(world))
    else:
        checked = []
        for r in ranks:
            try:
                r = operator.index(r)
            except TypeError:
                raise TypeError(f"new_group: ranks must be integers, not "
                                f"{type(r).__name__}") from None
            if not 0 <= r < world:
                raise ValueError(f"new_group: invalid rank {r}, should be non-negative and "
                                 f"less than the world size {world}")
            if r in checked:
                raise ValueError(f"new_group: rank {r} is listed twice")
            checked.append(r)
        ranks = sorted(checked)
    me = default.comm.rank
    # The split is collective over the default group: the members take color 0, ordered by
    # global rank; every other rank takes a negative color and gets no communicator.
    member = me in ranks
    comm = default.comm.split(0 if member else -1, ranks.index(me) if member else me)
    return _register(BaguaProcessGroup(ranks, stream, _next_group_name(), comm=comm))


def from_torch_group(group, stream=None):
    """The Bagua process group of the ranks of a ``torch.distributed`` process group.

    Collective over the default group, like :func:`new_group`: every rank calls it with its
    handle of the torch group (``torch.distributed.GroupMember.NON_GROUP_MEMBER`` on ranks
    outside it, as ``torch.distributed.new_group`` returns there). The members are learnt
    from the members themselves (each announces its global rank at its torch group rank), so
    ranks outside the torch group need not know them.
    """
    default = _get_default_group()
    non_member = dist.GroupMember.NON_GROUP_MEMBER
    if group is not non_member and not isinstance(group, dist.ProcessGroup):
        raise TypeError("from_torch_group: group must be a torch.distributed ProcessGroup or "
                        f"GroupMember.NON_GROUP_MEMBER, not {type(group).__name__}")
    world = default.comm.size
    slots = torch.zeros(world, dtype=torch.int64)
    if group is not non_member:
        slots[default.comm.rank] = group.rank() + 1
    default.comm.allreduce(slots.data_ptr(), slots.data_ptr(), world, _C.I64, _C.SUM)
    members = sorted((int(s), r) for r, s in enumerate(slots.tolist()) if s > 0)
    if [s for s, _ in members] != list(range(1, len(members) + 1)):
        raise RuntimeError("from_torch_group: the torch group's ranks are inconsistent across "
                           f"processes (group rank + 1 by global rank: {slots.tolist()})")
    return new_group([r for _, r in members], stream)


def get_communicator(group_name, comm_name):
    """The communicator ``comm_name`` ("global", "inter" or "intra") of the group named
    ``group_name`` (``group.group_name``)."""
    group = _pg_map.get(str(group_name))
    if group is None:
        raise ValueError(f"get_communicator: no process group is named {group_name!r}; known: "
                         f"{sorted(_pg_map)}")
    return group._communicator(comm_name)


def _rank_not_in_comm(comm=None):
    """True if this rank is not in ``comm`` (``CommMember.NON_COMM_MEMBER``, or a group it
    is not a member of)."""
    if comm is None:
        return False
    if isinstance(comm, BaguaProcessGroup):
        return comm.comm is None
    return comm is CommMember.NON_COMM_MEMBER


def _rank_not_in_group(group=None):
    """True if this rank is not a member of ``group`` (None: the default group)."""
    if group is None:
        return False
    return _rank_not_in_comm(group.get_global_communicator())


def _bagua_backend_comm(comm=None):
    """``comm`` itself, or None when this rank is not in it (upstream's helper)."""
    return None if _rank_not_in_comm(comm) else comm


# torch's ProcessGroup gets upstream's ``bagua_*`` methods, so ``pg.bagua_patch()`` links a
# torch group with its Bagua group.

def _pg_bagua_patch(self, stream=None):
    if self not in _torch_to_bagua_pg_map:
        _torch_to_bagua_pg_map[self] = from_torch_group(self, stream)
    return self


def _pg_bagua_pg(self):
    if self not in _torch_to_bagua_pg_map:
        raise RuntimeError("this torch process group has no Bagua group yet: call "
                           "pg.bagua_patch() first")
    return _torch_to_bagua_pg_map[self]


for _name, _value in (
        ("bagua_patch", _pg_bagua_patch), ("bagua_pg", property(_pg_bagua_pg)),
        ("bagua_get_global_communicator",
         lambda self: get_communicator(self.bagua_pg.group_name, "global")),
        ("bagua_get_inter_node_communicator",
         lambda self: get_communicator(self.bagua_pg.group_name, "inter")),
        ("bagua_get_intra_node_communicator",
         lambda self: get_communicator(self.bagua_pg.group_name, "intra"))):
    try:
        setattr(dist.ProcessGroup, _name, _value)
    except (AttributeError, TypeError):  # a torch build whose ProcessGroup is closed
        break
del _name, _value


def _resolve(comm):
    """The ``bagua._C.Comm`` to run on, or None when this rank is not in ``comm``."""
    if comm is None or comm is CommMember.WORLD:
        return _get_default_group().comm
    if comm is CommMember.NON_COMM_MEMBER:
        return None
    if isinstance(comm, BaguaSingleCommunicatorPy):
        return comm.comm
    if isinstance(comm, BaguaProcessGroup):
        return comm.comm
    if isinstance(comm, _C.Comm):
        return comm
    raise TypeError("comm must be None, a communicator (group.get_global_communicator()), "
                    "CommMember.NON_COMM_MEMBER, a BaguaProcessGroup or a bagua._C.Comm, not "
                    f"{type(comm).__name__}")


# The primitives (_primitives.py, below this module) resolve their ``comm`` argument through the
# process groups defined here.
_primitives._resolve = _resolve
