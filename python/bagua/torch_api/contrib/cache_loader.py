"""A cache of expensive values, kept in a distributed key-value store (Redis)."""

import logging
import pickle
from typing import Any, Callable

__all__ = ["CacheLoader"]

LOGGER = logging.getLogger(__name__)

#: Default bound, in bytes, on the values a cache loader holds for writing (its write-back
#: buffer, failed writes waiting for another try included).
DEFAULT_WRITER_BUFFER_BYTES = 256 * 1024 * 1024
#: Flushes a value may fail before it is dropped (a value the store refuses, such as one
#: larger than a server's memory limit, is not kept for ever).
MAX_WRITE_ATTEMPTS = 2


def serialize(input):
    """The bytes a value is cached as (pickle)."""
    return pickle.dumps(input)


def deserialize(input):
    """The value cached as ``input``. Only for bytes this job wrote: the store checks every
    value's HMAC before it returns it (an unpickled value can run code)."""
    return pickle.loads(input)


class CacheLoader:
    """Caches the values of an expensive function by key: :meth:`get` returns the cached
    value of a key, computing and storing it on the first request.

    Values are stored under ``"{dataset_name}_{key}"`` in a distributed key-value store.
    The ``"redis"`` backend, the only one, is a
    :class:`~bagua.torch_api.contrib.utils.redis_store.RedisStore`: it uses existing Redis
    servers or starts one per node; its arguments (``hosts``, ``cluster_mode``,
    ``capacity_per_node``, ``password``, ``timeout``) are passed in ``**kwargs``.

    The cache is an optimisation and never the source of truth: a value the store cannot
    vouch for (its HMAC, made with the job's key, does not match: someone else wrote it) is a
    miss and is never unpickled; a server that does not answer within its timeout is a miss
    (and is skipped for a while rather than waited for again); a value that cannot be
    written is dropped once it failed ``MAX_WRITE_ATTEMPTS`` times or the write-back buffer
    is full, with a warning that counts the values dropped.

    Args:
        backend (str): the key-value store: ``"redis"``.
        dataset_name (str): prefix of the keys. Default: ``""``.
        writer_buffer_size (int): number of new values collected before they are written to
            the store in one batch (fewer round trips). Default: 1.
        writer_buffer_bytes (int): most bytes (pickled) the write-back buffer holds; a batch
            is written early when it would hold more, a value larger than this is written
            on its own at once, and failed writes beyond it are dropped. Default: 256 MiB.

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
                 writer_buffer_size: int = 1,
                 writer_buffer_bytes: int = DEFAULT_WRITER_BUFFER_BYTES, **kwargs):
        self.backend = backend
        self.dataset_name = dataset_name
        if backend == "redis":
            from bagua.torch_api.contrib.utils.redis_store import RedisStore
            self.store = RedisStore(**kwargs)
        else:
            raise ValueError(f"invalid backend {backend!r}: only 'redis' is supported")
        self.fetcher = BatchFetcher(self.store, 1, writer_buffer_size, writer_buffer_bytes)

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

    The cache is an optimisation: a store that fails a read reads as a miss. A failed batch
    write stays buffered for another try, each value for at most ``MAX_WRITE_ATTEMPTS``
    flushes, and the buffer never holds more than ``writer_buffer_bytes`` bytes: values
    beyond that are dropped (counted in :attr:`dropped`, with a warning).
    """

    def __init__(self, store, read_buffer_size, writer_buffer_size,
                 writer_buffer_bytes=DEFAULT_WRITER_BUFFER_BYTES):
        if int(writer_buffer_bytes) < 0:
            raise ValueError("writer_buffer_bytes must be a non-negative number of bytes, "
                             f"not {writer_buffer_bytes}")
        self.store = store
        self.read_buffer_size = max(1, read_buffer_size)
        self.writer_buffer_size = max(1, writer_buffer_size)
        self.writer_buffer_bytes = int(writer_buffer_bytes)
        #: Pickled values waiting to be written, by key (oldest first).
        self.write_map = {}
        #: Bytes in :attr:`write_map` (never above ``writer_buffer_bytes`` between calls).
        self.write_bytes = 0
        #: Values dropped without being written.
        self.dropped = 0
        self._attempts = {}
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
        if ret is None:
            return None
        try:
            return deserialize(ret)
        except Exception as err:
            # Written by this job (its HMAC matched), yet unreadable now (e.g. a class that
            # is gone): recomputed like a miss.
            LOGGER.warning("cache: could not unpickle the value of key %r (%s): reading it "
                           "as a miss", key, err)
            return None

    def write(self, key, value):
        self.write_cnt += 1
        blob = serialize(value)
        self._forget(key)
        if len(blob) > self.writer_buffer_bytes:
            # Too large to hold: one try on its own, never kept for another.
            try:
                self.store.set(key, blob)
            except Exception as err:
                self._drop(1, err)
        else:
            if self.write_bytes + len(blob) > self.writer_buffer_bytes:
                self.flush_write_map()
                self._trim(self.writer_buffer_bytes - len(blob))
            self.write_map[key] = blob
            self.write_bytes += len(blob)
        if self.write_cnt % self.writer_buffer_size == 0:
            self.flush_write_map()

    def write_post_read(self):
        # Values written too rarely to fill the buffer still reach the store, every 1000
        # reads.
        if self.read_cnt % 1000 == 0 and len(self.write_map) > 0:
            self.flush_write_map()

    def flush_write_map(self):
        if not self.write_map:
            return
        try:
            self.store.mset(self.write_map)
        except Exception as err:
            error = err
        else:
            self.write_map.clear()
            self._attempts.clear()
            self.write_bytes = 0
            return
        if len(self.write_map) > 1 and not isinstance(error, ConnectionError):
            # The store answered but refused the batch (e.g. a value above a server's memory
            # limit): each value on its own, so that one cannot hold back the others.
            for key, blob in list(self.write_map.items()):
                try:
                    self.store.set(key, blob)
                except Exception as err:
                    error = err
                else:
                    self._forget(key)
        failed = 0
        for key in list(self.write_map):
            self._attempts[key] = self._attempts.get(key, 0) + 1
            if self._attempts[key] >= MAX_WRITE_ATTEMPTS:
                self._forget(key)
                failed += 1
        if failed:
            self._drop(failed, error)

    def _forget(self, key):
        blob = self.write_map.pop(key, None)
        if blob is not None:
            self.write_bytes -= len(blob)
        self._attempts.pop(key, None)

    def _trim(self, limit):
        """Drops the oldest values waiting until the buffer holds at most ``limit`` bytes."""
        dropped = 0
        while self.write_map and self.write_bytes > limit:
            self._forget(next(iter(self.write_map)))
            dropped += 1
        if dropped:
            self._drop(dropped, "the write-back buffer is full (writer_buffer_bytes="
                       f"{self.writer_buffer_bytes}) and the store did not take its values")

    def _drop(self, count, why):
        before = self.dropped
        self.dropped += count
        # Counted, and reported at 1, 10, 100, ... values: never a warning per sample.
        if len(str(self.dropped)) > len(str(before)) or before == 0:
            LOGGER.warning("cache: dropped %d value(s) that could not be written (%d so far): "
                           "%s", count, self.dropped, why)
