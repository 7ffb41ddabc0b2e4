"""In-process elastic training for torch scripts (Horovod's elastic API, on libbagua's
include/bagua/elastic.h).

Under ``bagua-launch --nnodes MIN:MAX`` the workers of surviving nodes keep running when a
node dies or joins: they roll back to the last commit (after a failure), move to the new
round's communicator, adopt the new rank 0's state and carry on. A script needs three
changes::

    import bagua.torch_api as bagua
    from bagua.torch_api import elastic

    elastic.init_process_group()                      # instead of bagua.init_process_group()
    model = model.with_bagua([optimizer], algorithm)
    state = elastic.TorchState(model, optimizer, sampler=sampler, epoch=0)

    @elastic.run
    def train(state):
        while state.epoch < epochs:
            for indices in iter(lambda: sampler.next_indices(batch_size), []):
                ...forward, backward, optimizer.step()...
                state.commit()                        # every step, or every few steps
            state.epoch += 1
            sampler.set_epoch(state.epoch)

    train(state)

How a world change runs:

- ``state.commit()`` snapshots the state (model and optimizer state dicts, the sampler's
  position, the scalars) in memory, then asks all ranks at once whether any saw a newer
  round (one 8-byte allreduce): if so every rank leaves the round after the same step, so a
  graceful change (a node joining, or leaving on SIGTERM) rolls nothing back.
- A collective that fails (a peer died or stalled: a :class:`BaguaError`) makes ``run`` roll
  the state back to the last commit.
- Then ``run`` drops the round's data-parallel contexts, rebuilds the communicator on the new
  round (libbagua waits for the agents to publish it, up to the rendezvous timeout),
  recreates the contexts on it, broadcasts rank 0's state, repositions the sampler for the
  new world (samples of uncommitted steps go back to the pool: every sample of an epoch is
  still seen exactly once) and calls ``train(state)`` again.
- A worker whose node is not in the new round (its agent is leaving) raises
  :class:`LeftJob`, a ``SystemExit`` with status 0.

Without bagua-agent (no ``etcd://`` bootstrap) ``init_process_group`` falls back to the plain
process group and ``run`` only calls the function: the same script runs standalone.
``torch.distributed`` is not initialised in elastic mode (its Gloo world cannot change size).
"""

import copy
import io
import sys
import time

import torch

from bagua import _C
from bagua._C import BaguaError
from bagua.torch_api import _cuda, communication, env

__all__ = ["init_process_group", "is_elastic", "State", "TorchState", "run", "LeftJob",
           "WorldChanged"]

_ctx = None  # the bagua._C.Elastic of this process, when elastic


class WorldChanged(Exception):
    """Raised by :meth:`State.commit` when a newer round was published; :func:`run` catches
    it and moves every rank to the new round."""


class LeftJob(SystemExit):
    """This worker's node is not a member of the new round: the worker exits (status 0)."""

    def __init__(self, message):
        super().__init__(0)
        self.message = message


def is_elastic():
    """True when this process runs with an elastic context (under bagua-agent)."""
    return _ctx is not None


def init_process_group(transport=None):
    """Joins the job with an elastic default group when started by bagua-agent with an
    ``etcd://`` bootstrap (``bagua-launch --nnodes MIN:MAX`` or any agent-managed job);
    otherwise the same as :func:`bagua.torch_api.init_process_group`.

    Announces the elastic API to the agent (in its default ``auto`` mode it then keeps this
    worker through membership changes instead of restarting it). Collective over the
    starting round, bounded by BAGUA_CONNECT_TIMEOUT_MS.
    """
    global _ctx
    if _ctx is not None or communication.is_initialized():
        raise RuntimeError("init_process_group() was already called in this process")
    if not env.get_bootstrap().startswith("etcd://"):
        communication.init_process_group(transport=transport)
        return
    if transport not in (None, "auto"):
        raise ValueError("elastic.init_process_group: the transport of an elastic job comes "
                         "from BAGUA_TRANSPORT (the communicator is rebuilt every round)")
    ctx = _C.Elastic()
    ctx.sync()  # a worker joining a running job meets the survivors' rebuild here
    _ctx = ctx
    communication._init_elastic_group(ctx)


def _bagua_models(obj):
    return [m for m in obj if isinstance(m, torch.nn.Module)
            and getattr(m, "_bagua", None) is not None]


def _to_bytes(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _broadcast_object(obj):
    """Rank 0's ``obj`` on every rank of the default group (pickled by torch.save)."""
    group = communication.get_default_group()
    if group.comm.size == 1:
        return obj
    rank = group.comm.rank
    data = _to_bytes(obj) if rank == 0 else b""
    size = torch.tensor([len(data)], dtype=torch.int64)
    communication.broadcast(size, 0)
    payload = (torch.frombuffer(bytearray(data), dtype=torch.uint8) if rank == 0
               else torch.empty(int(size[0]), dtype=torch.uint8))
    communication.broadcast(payload, 0)
    if rank == 0:
        return obj
    # The bytes come from rank 0 of our own job (weights_only=False: optimizer state dicts
    # hold plain Python values).
    return torch.load(io.BytesIO(payload.numpy().tobytes()), weights_only=False,
                      map_location=_here)


def _here(storage, location):
    """torch.load's placement of rank 0's tensors: CUDA ones on this rank's current device
    (rank 0's device index means another GPU here), the rest where they were."""
    if location.startswith("cuda") and torch.cuda.is_available():
        return storage.cuda(torch.cuda.current_device())
    return storage


class State:
    """The state a world change must carry: user scalars given as keyword arguments (read
    and written as attributes, e.g. ``state.epoch``), plus what subclasses add.

    ``commit()`` snapshots it and checks for a world change, ``restore()`` returns to the
    last snapshot, ``sync()`` adopts rank 0's state on every rank (and is the new snapshot).
    """

    def __init__(self, **kwargs):
        self._scalars = list(kwargs)
        self._callbacks = []
        for k, v in kwargs.items():
            setattr(self, k, v)
        self._saved_scalars = None
        # After a world change: {"round", "world", "failed", "recovery_s"} of the last one.
        self.last_change = None
        self.save()

    def register_reset_callbacks(self, callbacks):
        """Functions called with no argument after every world change (e.g. to scale the
        learning rate by the new world size)."""
        self._callbacks.extend(callbacks)

    def on_reset(self):
        for cb in self._callbacks:
            cb()

    def save(self):
        """Snapshots the state in memory (no communication)."""
        self._saved_scalars = {k: copy.deepcopy(getattr(self, k)) for k in self._scalars}

    def restore(self):
        """Returns to the last snapshot."""
        for k, v in self._saved_scalars.items():
            setattr(self, k, copy.deepcopy(v))

    def _payload(self):
        return {"scalars": {k: getattr(self, k) for k in self._scalars}}

    def _load(self, payload):
        for k, v in payload["scalars"].items():
            setattr(self, k, v)

    def sync(self):
        """Every rank adopts rank 0's state; collective. Also the new snapshot."""
        if _ctx is not None or communication.is_initialized():
            payload = _broadcast_object(self._payload())
            if communication.get_default_group().comm.rank != 0:
                self._load(payload)
        self.save()

    def check_world(self):
        """Raises :class:`WorldChanged` on every rank when any rank saw a newer round
        (collective; one 8-byte allreduce). A no-op outside an elastic job."""
        if _ctx is not None and _ctx.check_all():
            raise WorldChanged()

    def commit(self):
        """``save()`` then ``check_world()``: call it at step boundaries."""
        self.save()
        self.check_world()


class TorchState(State):
    """:class:`State` holding a torch model (plain or prepared by ``with_bagua``), its
    optimizer, optionally a :class:`LoadBalancingDistributedSampler` (its position moves with
    the state, so every sample of an epoch is seen once), and user scalars."""

    def __init__(self, model=None, optimizer=None, sampler=None, **kwargs):
        self.model, self.optimizer, self.sampler = model, optimizer, sampler
        self._saved_model = self._saved_opt = self._saved_sampler = None
        super().__init__(**kwargs)

    def save(self):
        if self.model is not None:
            self._saved_model = {k: v.detach().clone()
                                 for k, v in self.model.state_dict().items()}
        if self.optimizer is not None:
            self._saved_opt = copy.deepcopy(self.optimizer.state_dict())
        if self.sampler is not None:
            self.sampler.commit()
            self._saved_sampler = self.sampler.state_dict()
        super().save()

    def restore(self):
        if self.model is not None:
            # load_state_dict copies into the parameters in place: views into libbagua's
            # flat storage stay views.
            self.model.load_state_dict(self._saved_model)
        if self.optimizer is not None:
            self.optimizer.load_state_dict(copy.deepcopy(self._saved_opt))
        if self.sampler is not None:
            self.sampler.load_state_dict(self._saved_sampler)
        super().restore()

    def _payload(self):
        p = super()._payload()
        if self.model is not None:
            p["model"] = self.model.state_dict()
        if self.optimizer is not None:
            p["optimizer"] = self.optimizer.state_dict()
        if self.sampler is not None:
            p["sampler"] = self._saved_sampler
        return p

    def _load(self, payload):
        if self.model is not None:
            self.model.load_state_dict(payload["model"])
        if self.optimizer is not None:
            self.optimizer.load_state_dict(payload["optimizer"])
        if self.sampler is not None:
            self.sampler.load_state_dict(payload["sampler"])
        super()._load(payload)

    def sync(self):
        if self.sampler is not None:
            # Rank 0's committed position, before the payload is built from it.
            self.sampler.commit()
            self._saved_sampler = self.sampler.state_dict()
        super().sync()
        if self.sampler is not None:
            self.sampler.set_world(env.get_rank(), env.get_world_size())
            self._saved_sampler = self.sampler.state_dict()


def _change_round(state, failed):
    """Moves this worker to the newest round; see the module's documentation."""
    t0 = time.monotonic()
    models = _bagua_models(vars(state).values())
    if failed:
        state.restore()
    for m in models:
        m._bagua._detach()
    _cuda.forget()  # the primitives' NCCL communicators were built on the old round's
    old_round = _ctx.round
    try:
        _ctx.rebuild()
    except _C.BaguaAbortedError:
        message = f"bagua: node not in the new round: left the job after round {old_round}"
        print(message, flush=True)
        raise LeftJob(message) from None
    for m in models:
        m._bagua._attach()
    state.sync()
    state.last_change = {"round": _ctx.round, "world": _ctx.size, "failed": bool(failed),
                         "recovery_s": time.monotonic() - t0}
    state.on_reset()


_MAX_FAILED_CHANGES = 10


def _change_round_retrying(state, failed):
    """A peer can fail during the change itself (while the new round's contexts are built or
    the state is broadcast): then the change starts over from the last commit, on the round
    the agents publish next. Each attempt is bounded by libbagua's timeouts."""
    for attempt in range(_MAX_FAILED_CHANGES):
        try:
            _change_round(state, failed)
            return
        except BaguaError as e:
            if attempt + 1 == _MAX_FAILED_CHANGES:
                raise
            print(f"bagua: rank {env.get_rank()}: the move to a new round failed ({e}); "
                  "retrying from the last commit", file=sys.stderr, flush=True)
            failed = True


def run(func):
    """Decorator: ``run(train)(state, *args)`` calls ``train(state, *args)`` and, in an
    elastic job, carries it through world changes (restore after a failed step, rebuild on
    the new round, sync from rank 0, call again) until it returns. Outside an elastic job it
    syncs the state once and calls the function."""

    def wrapper(state, *args, **kwargs):
        if not isinstance(state, State):
            raise TypeError(f"elastic.run: the first argument must be an elastic State, not "
                            f"{type(state).__name__}")
        state.sync()
        if _ctx is None:
            return func(state, *args, **kwargs)
        while True:
            failed = None
            try:
                return func(state, *args, **kwargs)
            except WorldChanged:
                failed = False
            except BaguaError as e:
                # A dead or stalled peer: the last commit is the truth on every survivor.
                print(f"bagua: rank {env.get_rank()}: step failed in round {_ctx.round} "
                      f"({e}); rolling back to the last commit", file=sys.stderr, flush=True)
                failed = True
            # Outside the except block: the traceback (and the tensors its frames hold) is
            # gone before the old round's contexts are dropped.
            _change_round_retrying(state, failed)

    wrapper.__name__ = getattr(func, "__name__", "run")
    wrapper.__doc__ = getattr(func, "__doc__", None)
    return wrapper
