"""A cache of expensive values, kept in a distributed key-value store (Redis)."""

import pickle
from typing import Any, Callable

__all__ = ["CacheLoader"]


def serialize(input):
    """The bytes a value is cached as (pickle)."""
    return pickle.dumps(input)


def deserialize(input):
    """The value cached as ``input``."""
    return pickle.loads(input)


class CacheLoader:
    """Caches the values of an expensive function by key: :meth:`get` returns the cached
    value of a key, computing and storing it on the first request.

    Values are stored under ``"{dataset_name}_{key}"`` in a distributed key-value store.
    The ``"redis"`` backend, the only one, is a
    :class:`~bagua.torch_api.contrib.utils.redis_store.RedisStore`: it uses existing Redis
    servers or starts one per node; its arguments (``hosts``, ``cluster_mode``,
    ``capacity_per_node``) are passed in ``**kwargs``.

    Args:
        backend (str): the key-value store: ``"redis"``.
        dataset_name (str): prefix of the keys. Default: ``""``.
        writer_buffer_size (int): number of new values collected before they are written to
            the store in one batch (fewer round trips). Default: 1.

    Example::

        >>> from bagua.torch_api.contrib.cache_loader import CacheLoader
        >>> hosts = [{"host": "192.168.1.0", "port": "7000"},
        ...          {"host": "192.168.1.1", "port": "7000"}]
        >>> loader = CacheLoader(backend="redis", hosts=hosts, cluster_mode=True,
        ...                      dataset_name="test")
        >>> loader.get(index, lambda x: items[x])

        With a new Redis server on each node, holding at most 100 MB each:

        >>> loader = CacheLoader(backend="redis", hosts=None, cluster_mode=True,
        ...                      capacity_per_node=100_000_000)

    .. note::
        Cache loaders with the same :attr:`dataset_name` share (and overwrite) each other's
        entries; give different datasets different names.
    """

    def __init__(self, backend: str = "redis", dataset_name: str = "",
                 writer_buffer_size: int = 1, **kwargs):
        self.backend = backend
        self.dataset_name = dataset_name
        if backend == "redis":
            from bagua.torch_api.contrib.utils.redis_store import RedisStore
            self.store = RedisStore(**kwargs)
        else:
            raise ValueError(f"invalid backend {backend!r}: only 'redis' is supported")
        self.fetcher = BatchFetcher(self.store, 1, writer_buffer_size)

    def get(self, key: Any, load_fn: Callable[[Any], Any]):
        """The cached value of ``key``; on a miss, ``load_fn(key)`` computes it and it is
        cached."""
        cache_key = "{}_{}".format(self.dataset_name, key)
        ret = self.fetcher.read(cache_key)
        if ret is None:
            ret = load_fn(key)
            self.fetcher.write(cache_key, ret)
        return ret

    def num_keys(self) -> int:
        """Number of keys in the store (all datasets sharing it together)."""
        return self.store.num_keys()


class BatchFetcher:
    """Reads from a store, and writes to it in batches of ``writer_buffer_size`` values.

    The cache is an optimisation: a store that fails a read reads as a miss, and a failed
    batch write stays buffered for the next try.
    """

    def __init__(self, store, read_buffer_size, writer_buffer_size):
        self.store = store
        self.read_buffer_size = max(1, read_buffer_size)
        self.writer_buffer_size = max(1, writer_buffer_size)
        self.write_map = {}
        self.write_cnt = 0
        self.read_cnt = 0

    def read(self, key):
        self.read_cnt += 1
        pending = self.write_map.get(key)
        if pending is not None:
            # Written but not flushed yet: no need to compute it again.
            self.write_post_read()
            return deserialize(pending)
        try:
            ret = self.store.get(key)
        except Exception:
            ret = None
        else:
            self.write_post_read()
        return deserialize(ret) if ret is not None else None

    def write(self, key, value):
        self.write_cnt += 1
        self.write_map[key] = serialize(value)
        if self.write_cnt % self.writer_buffer_size == 0:
            self.flush_write_map()

    def write_post_read(self):
        # Values written too rarely to fill the buffer still reach the store, every 1000
        # reads.
        if self.read_cnt % 1000 == 0 and len(self.write_map) > 0:
            self.flush_write_map()

    def flush_write_map(self):
        try:
            self.store.mset(self.write_map)
        except Exception:
            pass
        else:
            self.write_map.clear()
