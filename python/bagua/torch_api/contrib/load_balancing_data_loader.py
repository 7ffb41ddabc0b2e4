"""Load-balanced distributed sampling (upstream Bagua's ``contrib/load_balancing_data_loader``)
on libbagua's sampler (include/bagua/loader.h, docs/loader.md).

Each epoch the samples are sorted by complexity (plus optional seeded noise), cut into chunks
of ``num_replicas`` consecutive samples whose order is shuffled, and rank r takes element r of
every chunk: step i of every rank holds samples of near-identical complexity, so no rank waits
for a straggler at the gradient allreduce. Unlike upstream, ``complexity_fn`` runs only on
rank 0 and the complexities are broadcast (when a Bagua process group exists).
"""

import torch
from torch.utils.data import Sampler

from bagua import _C
from bagua.torch_api import communication, env


def _complexities(dataset, complexity_fn, num_replicas, rank):
    n = len(dataset)
    if n < 1:
        raise ValueError("LoadBalancingDistributedSampler: the dataset is empty")
    group = communication.get_default_group() if communication.is_initialized() else None
    # An elastic job's worker may create its sampler alone (joining a running job), so there
    # every rank computes the complexities itself.
    shared = (group is not None and group.elastic is None and group.comm.size == num_replicas
              and group.comm.rank == rank)
    values = torch.zeros(n, dtype=torch.float64)
    if not shared or rank == 0:
        values = torch.tensor([float(complexity_fn(dataset[i])) for i in range(n)],
                              dtype=torch.float64)
        if not torch.isfinite(values).all():
            bad = int((~torch.isfinite(values)).nonzero()[0])
            raise ValueError(f"complexity_fn returned {values[bad].item()} for sample {bad}; "
                             "complexities must be finite numbers")
    if shared and num_replicas > 1:
        communication.broadcast(values, 0)
    return values


class LoadBalancingDistributedSampler(Sampler):
    """A distributed sampler whose ranks get samples of near-identical complexity at each step.

    Args follow upstream: ``dataset``, ``complexity_fn(sample) -> number``, ``num_replicas``
    and ``rank`` (default: the Bagua process group's), ``shuffle``, ``seed``, ``drop_last``,
    ``random_level`` (noise added to complexities before sorting, relative to their range).
    Call :meth:`set_epoch` before each epoch, as with torch's DistributedSampler.
    """

    def __init__(self, dataset, complexity_fn, num_replicas=None, rank=None, shuffle=True,
                 seed=0, drop_last=False, random_level=0):
        if num_replicas is None:
            num_replicas = env.get_world_size()
        if rank is None:
            rank = env.get_rank()
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} is not in [0, num_replicas={num_replicas})")
        if random_level < 0:
            raise ValueError(f"random_level {random_level} must be >= 0")
        self.dataset = dataset
        self.num_replicas, self.rank = num_replicas, rank
        self.shuffle, self.seed, self.drop_last = shuffle, seed, drop_last
        self.random_level = random_level
        self.epoch = 0
        self.complexities = _complexities(dataset, complexity_fn, num_replicas, rank)
        self._c = self._make(rank)
        self._c.set_epoch(0)

    def _make(self, rank):
        return _C.Sampler(self.complexities.data_ptr(), self.complexities.numel(),
                          seed=int(self.seed), noise_level=float(self.random_level),
                          shuffle=bool(self.shuffle), batch_size=1,
                          drop_last=bool(self.drop_last), rank=rank, world=self.num_replicas)

    def set_epoch(self, epoch):
        """Starts ``epoch``: new noise and chunk order (every rank must call it)."""
        self.epoch = int(epoch)
        self._c.set_epoch(self.epoch)

    def indices(self, rank=None):
        """This epoch's sample indices of ``rank`` (default: this rank), in order."""
        s = self._c if rank in (None, self.rank) else self._make(rank)
        s.set_epoch(self.epoch)  # from the top of the epoch: each iterator reads all of it
        out, one = [], torch.empty(1, dtype=torch.int64)
        while s.next_batch(one.data_ptr(), 1):
            out.append(int(one[0]))
        s.commit()
        return out

    def __iter__(self):
        return iter(self.indices())

    def __len__(self):
        return int(self._c.num_steps())

    # Streaming use with a position, for elastic training (bagua.torch_api.elastic keeps the
    # position in its TorchState, so every sample of an epoch is seen once across world
    # changes): next_indices() hands out samples, commit() marks them consumed.

    def next_indices(self, n):
        """The next ``n`` sample indices of this rank's epoch (fewer at its end, the same
        number on every rank; ``[]`` when the epoch is exhausted)."""
        out, one = [], torch.empty(1, dtype=torch.int64)
        for _ in range(int(n)):
            if not self._c.next_batch(one.data_ptr(), 1):
                break
            out.append(int(one[0]))
        return out

    def commit(self):
        """Marks every index handed out by :meth:`next_indices` so far as consumed."""
        self._c.commit()

    def state_dict(self):
        """The position (epoch, committed samples, world history): identical on every rank."""
        return {"epoch": self.epoch, "position": self._c.get_state()}

    def load_state_dict(self, state):
        """Returns to a position from :meth:`state_dict` (of any rank); this rank keeps its
        place if it exists in that position's world (call :meth:`set_world` after a world
        change)."""
        self.epoch = int(state["epoch"])
        self._c.set_state(-1, state["position"])

    def set_world(self, rank, num_replicas):
        """Moves this rank to a new world at the committed position: samples handed out but
        not committed go back to the pool, which is re-dealt over ``num_replicas`` ranks.
        Every rank of the new world calls it with the same ``num_replicas``."""
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} is not in [0, num_replicas={num_replicas})")
        self._c.set_world(int(rank), int(num_replicas), self._c.committed_steps())
        self.rank, self.num_replicas = int(rank), int(num_replicas)
        self._cached = None


class LoadBalancingDistributedBatchSampler(Sampler):
    """Groups a :class:`LoadBalancingDistributedSampler`'s indices into batches with
    ``batch_fn(indices) -> list of batches``; every rank yields the same number of batches
    (the largest over ranks, padded by repeating a rank's first batches; the smallest with
    ``drop_last``), as upstream."""

    def __init__(self, sampler, batch_fn, drop_last=False):
        if not isinstance(sampler, LoadBalancingDistributedSampler):
            raise TypeError("LoadBalancingDistributedBatchSampler needs a "
                            "LoadBalancingDistributedSampler")
        self.sampler, self.batch_fn, self.drop_last = sampler, batch_fn, drop_last
        self._cached = None  # (epoch, batches): len() and iter() of one epoch compute once

    def _batches(self):
        if self._cached is not None and self._cached[0] == self.sampler.epoch:
            return self._cached[1]
        self._cached = (self.sampler.epoch, self._compute())
        return self._cached[1]

    def _compute(self):
        """Every rank's batches (each rank computes all layouts: no communication)."""
        per_rank = [list(self.batch_fn(self.sampler.indices(r)))
                    for r in range(self.sampler.num_replicas)]
        counts = [len(b) for b in per_rank]
        total = min(counts) if self.drop_last else max(counts)
        mine = per_rank[self.sampler.rank]
        if not mine:
            return []
        return [mine[i % len(mine)] for i in range(total)]

    def __iter__(self):
        return iter(self._batches())

    def __len__(self):
        return len(self._batches())
