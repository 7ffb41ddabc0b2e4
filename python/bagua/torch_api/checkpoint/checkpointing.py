"""Checkpoints in upstream Bagua's layout, so that checkpoints written by either load in both.

Layout under ``checkpoints_path``::

    latest_checkpointed_iteration.txt       the tracker: the last iteration saved, or "release"
    iter_0000100/mp_rank_00_model_states.pt  {"iteration", "model", "optimizer", "lr_scheduler"}
    release/mp_rank_00_model_states.pt       (when the tracker reads "release")

Rank 0 writes (the model is data parallel: every rank holds the same state); every rank
reads. The checkpoint directory must therefore be shared by the nodes of a multi-node job.

Both calls are collective: every rank takes part in the same agreements on every path, so a
rank that cannot see the files raises together with the others instead of returning early
and pairing its next collective with another rank's agreement. Files are opened only when
they are regular files (a FIFO would block the open), and checkpoints are unpickled with
``torch.load(..., weights_only=True)`` where torch offers it (where it cannot read state dicts,
as in torch 1.13, with the same allowlist of globals), so a checkpoint cannot run code.
"""

import functools
import inspect
import io
import logging
import os
import pickle
import stat
import tempfile
import types
from typing import Optional, Tuple

import torch
import torch.distributed as dist

from bagua.torch_api import communication, env

__all__ = ["save_checkpoint", "load_checkpoint"]

LOGGER = logging.getLogger(__name__)

_TRACKER_NAME = "latest_checkpointed_iteration.txt"


def _get_model_ckpt_name(checkpoints_path: str, iteration: int, mp_rank: int = 0,
                         release: bool = False) -> str:
    directory = "release" if release else "iter_{:07d}".format(iteration)
    return os.path.join(checkpoints_path, directory, f"mp_rank_{mp_rank:02d}_model_states.pt")


def _get_checkpoint_tracker_filename(checkpoints_path: str) -> str:
    return os.path.join(checkpoints_path, _TRACKER_NAME)


def _read_metadata(tracker_filename: str) -> Tuple[int, bool]:
    """``(iteration, release)`` from a tracker file; ``release`` tracker -> ``(0, True)``."""
    with _open_regular(tracker_filename, "checkpoint tracker file") as f:
        text = f.read(4096).decode("utf-8", "replace").strip()
    if text == "release":
        return 0, True
    try:
        iteration = int(text)
    except ValueError:
        iteration = -1
    if iteration < 0:
        raise ValueError(f"invalid checkpoint tracker file {tracker_filename}: it holds "
                         f"{text[:80]!r}; accepted: a non-negative iteration number or "
                         "'release'")
    return iteration, False


def _rank_and_world():
    """This rank and the number of ranks: Bagua's default group once bagua is initialised,
    else torch.distributed's world, else a single process."""
    if communication.is_initialized():
        return env.get_rank(), env.get_world_size()
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _open_regular(name: str, what: str):
    """``name`` opened for reading in binary mode when it is a regular file, else
    ValueError naming it. Checked before the open (a FIFO's open would block until a writer
    comes) and again on the open descriptor, which was opened without blocking, in case the
    name was replaced in between."""
    mode = os.stat(name).st_mode
    if not stat.S_ISREG(mode):
        raise ValueError(f"{what} {name} is not a regular file ({_kind(mode)}); accepted: a "
                         "regular file")
    fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise ValueError(f"{what} {name} is not a regular file ({_kind(mode)}); accepted: "
                             "a regular file")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _kind(mode: int) -> str:
    for test, word in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return word
    return "not a regular file"


class _StateUnpickler(pickle.Unpickler):
    """An unpickler that builds tensors, containers and plain values only: every global a
    pickle names must be one of torch's weights-only globals (tensor and storage classes,
    dtypes, torch's rebuild functions, OrderedDict), so a pickle that names anything else,
    e.g. a function that would run code, is refused before it is called."""

    def find_class(self, module, name):
        allowed = _allowed_globals()
        key = f"{module}.{name}"
        if key not in allowed:
            raise pickle.UnpicklingError(f"global {key} is not allowed")
        return allowed[key]


@functools.lru_cache(maxsize=1)
def _allowed_globals():
    from torch import _weights_only_unpickler
    return dict(_weights_only_unpickler._get_allowed_globals())


#: A ``pickle_module`` for torch's loader made of _StateUnpickler.
_STATE_PICKLE = types.SimpleNamespace(
    __name__=__name__ + "._STATE_PICKLE", Unpickler=_StateUnpickler,
    load=lambda f, **kw: _StateUnpickler(f, **kw).load())


@functools.lru_cache(maxsize=1)
def _weights_only_reads_state_dicts():
    """Whether this torch's ``torch.load`` has ``weights_only`` and it reads what state dicts
    hold: its first version (torch 1.13) refuses floats, which every optimizer state holds."""
    if "weights_only" not in inspect.signature(torch.load).parameters:
        return False
    probe = io.BytesIO()
    torch.save({"lr": 0.5, "t": torch.zeros(1)}, probe)
    probe.seek(0)
    try:
        torch.load(probe, weights_only=True)
        return True
    except pickle.UnpicklingError:
        return False


def _load_state(name: str):
    """The state dict in checkpoint ``name``: a regular file, unpickled without running code
    (``torch.load(..., weights_only=True)``, or where that cannot read state dicts, torch's
    zip-file loader with _StateUnpickler, the same allowlist: torch 1.13's ``torch.load``
    ignores ``pickle_module`` unless ``weights_only``); a refusal names the file."""
    with _open_regular(name, "checkpoint") as f:
        try:
            if _weights_only_reads_state_dicts():
                return torch.load(f, map_location="cpu", weights_only=True)
            serialization = torch.serialization
            if not serialization._is_zipfile(f):
                raise ValueError(f"checkpoint {name} is in torch's legacy (before 1.6) format, "
                                 "which this torch cannot read without allowing code to run; "
                                 "accepted: a checkpoint torch 1.6 or later saved")
            with serialization._open_zipfile_reader(f) as archive:
                return serialization._load(archive, "cpu", _STATE_PICKLE)
        except pickle.UnpicklingError as e:
            raise ValueError(f"checkpoint {name} was refused: it holds objects other than "
                             "tensors, containers and plain values, which unpickling could "
                             "run as code; accepted: a checkpoint of state dicts, as "
                             f"save_checkpoint writes ({e})") from None


# The outcome of a rank's first step of load_checkpoint, agreed on by all ranks.
_OK, _MISSING, _INVALID = 0, 1, 2
_OUTCOMES = ("found", "missing", "invalid")


def _all_max(values):
    """The element-wise maximum of the integer list ``values`` over all ranks (the list
    itself with one rank). Every wait is bounded: libbagua's collectives by
    BAGUA_COMM_TIMEOUT_MS, torch.distributed's by its process group's timeout."""
    _, world = _rank_and_world()
    if world == 1:
        return list(values)
    flag = torch.tensor(values, dtype=torch.int64)
    if communication.is_initialized():
        communication.allreduce_inplace(flag, op=communication.ReduceOp.MAX)
    else:
        # torch.distributed only (bagua not initialised): its own all_reduce, on the device
        # its backend reduces on.
        if dist.get_backend() == dist.Backend.NCCL:
            flag = flag.cuda()
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return [int(v) for v in flag.cpu().tolist()]


def _agree(failed: bool, what: str):
    """Every rank learns whether any rank failed ``what``; doubles as the barrier.

    A plain barrier would leave the other ranks waiting for a rank that failed until the
    communication timeout; exchanging a flag instead lets all of them raise at once.
    """
    if _all_max([1 if failed else 0])[0] and not failed:
        raise RuntimeError(f"{what} failed on another rank (see its error)")


def _atomic_torch_save(obj, filename: str):
    # Writing to a temporary file in the same directory and renaming it means a reader (or
    # a job killed during the write) never sees a half-written checkpoint.
    fd, tmp = tempfile.mkstemp(prefix=".tmp_", dir=os.path.dirname(filename))
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
        os.replace(tmp, filename)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _atomic_write_text(text: str, filename: str):
    fd, tmp = tempfile.mkstemp(prefix=".tmp_", dir=os.path.dirname(filename) or ".")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, filename)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def save_checkpoint(
    iteration: int,
    checkpoints_path: str,
    model: torch.nn.Module,
    optimizer: Optional[torch.optim.Optimizer] = None,
    lr_scheduler: Optional[torch.optim.lr_scheduler._LRScheduler] = None,
):
    """Saves a checkpoint of ``model`` (and of ``optimizer`` and ``lr_scheduler`` when
    given) for ``iteration`` under ``checkpoints_path``, and records ``iteration`` as the
    latest one in the tracker file.

    Every rank calls it; rank 0 writes, and no rank returns before the files are complete.

    Args:
        iteration (int): the training iteration (a non-negative integer); it names the
            checkpoint's directory, ``iter_{iteration:07d}``.
        checkpoints_path (str): directory of the checkpoints (created when missing).
        model (torch.nn.Module): the model to save (a ``with_bagua`` model is the module
            itself; its ``state_dict()`` is saved).
        optimizer (torch.optim.Optimizer, optional): the optimizer to save. Default: None.
        lr_scheduler (torch.optim.lr_scheduler._LRScheduler, optional): the learning rate
            scheduler to save. Default: None.
    """
    if isinstance(iteration, bool) or not isinstance(iteration, int) or iteration < 0:
        raise ValueError(f"iteration must be a non-negative int, not {iteration!r}")
    rank, _ = _rank_and_world()
    LOGGER.info("saving checkpoint at iteration %7d to %s", iteration, checkpoints_path)
    try:
        if rank == 0:
            state_dict = {"iteration": iteration, "model": model.state_dict()}
            if optimizer is not None:
                state_dict["optimizer"] = optimizer.state_dict()
            if lr_scheduler is not None:
                state_dict["lr_scheduler"] = lr_scheduler.state_dict()
            name = _get_model_ckpt_name(checkpoints_path, iteration)
            os.makedirs(os.path.dirname(name), exist_ok=True)
            _atomic_torch_save(state_dict, name)
            # The tracker moves to the new iteration only once its checkpoint is complete.
            _atomic_write_text(str(iteration), _get_checkpoint_tracker_filename(checkpoints_path))
    except Exception:
        _agree(True, "save_checkpoint")
        raise
    _agree(False, "save_checkpoint")
    LOGGER.info("successfully saved checkpoint at iteration %7d to %s", iteration,
                checkpoints_path)


def load_checkpoint(
    checkpoints_path: str,
    model: torch.nn.Module,
    optimizer: Optional[torch.optim.Optimizer] = None,
    lr_scheduler: Optional[torch.optim.lr_scheduler._LRScheduler] = None,
    strict: Optional[bool] = True,
) -> int:
    """Loads the latest checkpoint under ``checkpoints_path`` (the one the tracker file
    names) into ``model``, ``optimizer`` and ``lr_scheduler``, and returns its iteration.

    Every rank calls it and reads the files. Without a tracker file (on every rank) nothing
    is loaded and the return value is 0 (a job starting from scratch), as upstream Bagua; a
    ``release`` tracker loads the ``release`` directory and returns 0.

    Args:
        checkpoints_path (str): directory of the checkpoints.
        model (torch.nn.Module): the model to load into.
        optimizer (torch.optim.Optimizer, optional): the optimizer to load into. Default:
            None.
        lr_scheduler (torch.optim.lr_scheduler._LRScheduler, optional): the learning rate
            scheduler to load into. Default: None.
        strict (bool, optional): whether the checkpoint's model keys must match the keys of
            ``model.state_dict()`` exactly. Default: True.

    Raises:
        ValueError: the tracker file holds neither an iteration number nor ``release``, it or
            the checkpoint is not a regular file, the checkpoint holds objects that unpickling
            could run as code, or it lacks the optimizer or scheduler state asked for.
        RuntimeError: on the other ranks when one rank raised, or when the ranks do not see
            the same tracker file; every rank raises at the same call.
    """
    tracker = _get_checkpoint_tracker_filename(checkpoints_path)
    # First agreement: every rank says whether it found the tracker, found none, or found an
    # invalid one, and which iteration; all ranks then go on, return or raise together.
    outcome, iteration, release, error = _OK, 0, False, None
    try:
        iteration, release = _read_metadata(tracker)
    except FileNotFoundError:
        outcome = _MISSING
    except Exception as e:
        outcome, error = _INVALID, e
    # The maximum of each outcome's flag, of the iteration and of its negation (its minimum).
    key = -1 if release else iteration
    seen = _all_max([int(outcome == o) for o in range(len(_OUTCOMES))] + [key, -key])
    found = [word for o, word in enumerate(_OUTCOMES) if seen[o]]
    if error is not None:
        raise error
    if seen[_INVALID]:
        raise RuntimeError("load_checkpoint failed on another rank: its checkpoint tracker "
                           f"file {tracker} is invalid (see its error)")
    if found == ["missing"]:
        LOGGER.warning("could not find checkpoint metadata file %s", tracker)
        return 0
    if seen[_MISSING]:
        raise RuntimeError(f"load_checkpoint: the checkpoint tracker file {tracker} is "
                           f"{'missing' if outcome == _MISSING else 'found'} here but "
                           f"{'found' if outcome == _MISSING else 'missing'} on another rank; "
                           "accepted: a checkpoint directory every rank sees (shared by the "
                           "nodes of a multi-node job)")
    if seen[-2] != -seen[-1]:
        raise RuntimeError(f"load_checkpoint: the ranks read different iterations from "
                           f"{tracker}; accepted: one tracker file every rank sees")
    # Second agreement: every rank loaded the checkpoint.
    try:
        LOGGER.info("loading checkpoint from %s at iteration %d", checkpoints_path, iteration)
        name = _get_model_ckpt_name(checkpoints_path, iteration, release=release)
        state = _load_state(name)
        if not isinstance(state, dict) or "model" not in state:
            raise ValueError(f"checkpoint {name} holds no model state; accepted: a checkpoint "
                             "save_checkpoint wrote")
        for key, wanted in (("optimizer", optimizer), ("lr_scheduler", lr_scheduler)):
            if wanted is not None and key not in state:
                raise ValueError(f"checkpoint {name} holds no {key} state (it holds "
                                 f"{sorted(state)}); pass {key}=None to skip it")
        model.load_state_dict(state["model"], strict=strict)
        if optimizer is not None:
            optimizer.load_state_dict(state["optimizer"])
        if lr_scheduler is not None:
            lr_scheduler.load_state_dict(state["lr_scheduler"])
    except Exception:
        _agree(True, "load_checkpoint")
        raise
    _agree(False, "load_checkpoint")
    LOGGER.info("successfully loaded checkpoint from %s at %d", checkpoints_path, iteration)
    return iteration
