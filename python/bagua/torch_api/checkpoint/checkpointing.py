"""Checkpoints in upstream Bagua's layout, so that checkpoints written by either load in both.

Layout under ``checkpoints_path``::

    latest_checkpointed_iteration.txt       the tracker: the last iteration saved, or "release"
    iter_0000100/mp_rank_00_model_states.pt  {"iteration", "model", "optimizer", "lr_scheduler"}
    release/mp_rank_00_model_states.pt       (when the tracker reads "release")

Rank 0 writes (the model is data parallel: every rank holds the same state); every rank
reads. The checkpoint directory must therefore be shared by the nodes of a multi-node job.
"""

import logging
import os
import tempfile
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
    with open(tracker_filename, "r") as f:
        text = f.read().strip()
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


def _agree(failed: bool, what: str):
    """Every rank learns whether any rank failed ``what``; doubles as the barrier.

    A plain barrier would leave the other ranks waiting for a rank that failed until the
    communication timeout; exchanging a flag instead lets all of them raise at once.
    """
    _, world = _rank_and_world()
    if world == 1:
        return
    if communication.is_initialized():
        flag = torch.tensor([1 if failed else 0], dtype=torch.int64)
        communication.allreduce_inplace(flag, op=communication.ReduceOp.MAX)
        any_failed = bool(flag.item())
    else:
        # torch.distributed only (bagua not initialised): a barrier, as upstream Bagua.
        dist.barrier()
        any_failed = False
    if any_failed and not failed:
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

    Every rank calls it and reads the files. Without a tracker file nothing is loaded and
    the return value is 0 (a job starting from scratch), as upstream Bagua; a ``release``
    tracker loads the ``release`` directory and returns 0.

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
        ValueError: the tracker file holds neither an iteration number nor ``release``, or
            the checkpoint lacks the optimizer or scheduler state asked for.
    """
    tracker = _get_checkpoint_tracker_filename(checkpoints_path)
    if not os.path.isfile(tracker):
        LOGGER.warning("could not find checkpoint metadata file %s", tracker)
        return 0
    try:
        iteration, release = _read_metadata(tracker)
        LOGGER.info("loading checkpoint from %s at iteration %d", checkpoints_path, iteration)
        name = _get_model_ckpt_name(checkpoints_path, iteration, release=release)
        state = torch.load(name, map_location="cpu")
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
