"""Key-value store interfaces: :class:`Store` and the sharding :class:`ClusterStore`."""

import struct
from typing import Dict, List, Optional, Union

__all__ = ["Store", "ClusterStore", "StoreUnavailableError"]


class StoreUnavailableError(ConnectionError):
    """A store instance did not answer in time and is treated as down for a while: calls
    fail at once with this error instead of waiting for it again. The dataset cache reads
    it as a miss and drops the write."""


class Store:
    """Base class of the key-value stores. Entries are written with :meth:`set` or
    :meth:`mset` and read with :meth:`get` or :meth:`mget`.

    A store may refuse to return a value it cannot vouch for (the Redis store checks an
    HMAC on every value): such a value reads as missing (None). Any method may raise
    :class:`StoreUnavailableError` when an instance is down."""

    def set(self, key: str, value: Union[str, bytes]):
        """Sets ``key`` to ``value``."""
        raise NotImplementedError

    def get(self, key: str) -> Optional[Union[str, bytes]]:
        """The value of ``key``, or None when the store has no such key."""
        raise NotImplementedError

    def num_keys(self) -> int:
        """Number of keys in the store."""
        raise NotImplementedError

    def clear(self):
        """Deletes every key of the store."""
        raise NotImplementedError

    def mset(self, dictionary: Dict[str, Union[str, bytes]]):
        """Sets every key of ``dictionary`` to its value, in one round trip where the store
        allows it."""
        raise NotImplementedError

    def mget(self, keys: List[str]) -> List[Optional[Union[str, bytes]]]:
        """The values of ``keys``, in the same order (None for a missing key)."""
        raise NotImplementedError

    def status(self) -> bool:
        """True when the store answers."""
        raise NotImplementedError

    def shutdown(self):
        """Stops the store instances this store manages; instances it does not manage (given
        by the user) keep running."""
        raise NotImplementedError


# XXH64 (seed 0), the hash that routes keys to shards in upstream Bagua, so that a key lands
# on the same shard in both. The ``xxhash`` module computes it when installed; this
# pure-Python version is the fallback and gives identical results.
_P1 = 0x9E3779B185EBCA87
_P2 = 0xC2B2AE3D27D4EB4F
_P3 = 0x165667B19E3779F9
_P4 = 0x85EBCA77C2B2AE63
_P5 = 0x27D4EB2F165667C5
_M64 = (1 << 64) - 1


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & _M64


def _round(acc, lane):
    acc = (acc + lane * _P2) & _M64
    return (_rotl(acc, 31) * _P1) & _M64


def _merge(acc, v):
    acc ^= _round(0, v)
    return (acc * _P1 + _P4) & _M64


def _xxh64_py(data: bytes, seed: int = 0) -> int:
    n = len(data)
    i = 0
    if n >= 32:
        v = [(seed + _P1 + _P2) & _M64, (seed + _P2) & _M64, seed & _M64,
             (seed - _P1) & _M64]
        while i + 32 <= n:
            lanes = struct.unpack_from("<4Q", data, i)
            v = [_round(a, b) for a, b in zip(v, lanes)]
            i += 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M64
        for lane in v:
            h = _merge(h, lane)
    else:
        h = (seed + _P5) & _M64
    h = (h + n) & _M64
    while i + 8 <= n:
        (lane,) = struct.unpack_from("<Q", data, i)
        h ^= _round(0, lane)
        h = (_rotl(h, 27) * _P1 + _P4) & _M64
        i += 8
    if i + 4 <= n:
        (lane,) = struct.unpack_from("<I", data, i)
        h ^= (lane * _P1) & _M64
        h = (_rotl(h, 23) * _P2 + _P3) & _M64
        i += 4
    while i < n:
        h ^= (data[i] * _P5) & _M64
        h = (_rotl(h, 11) * _P1) & _M64
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _M64
    h ^= h >> 29
    h = (h * _P3) & _M64
    h ^= h >> 32
    return h


try:
    import xxhash as _xxhash

    def xxh64(data: bytes) -> int:
        """XXH64 of ``data`` (seed 0) as an unsigned integer."""
        return _xxhash.xxh64(data).intdigest()
except ImportError:
    def xxh64(data: bytes) -> int:
        """XXH64 of ``data`` (seed 0) as an unsigned integer."""
        return _xxh64_py(data)


class ClusterStore(Store):
    """A store whose entries are sharded over several stores by a hash of their keys (the
    same routing as upstream Bagua: ``xxh64(key) % len(stores)``).

    Args:
        stores (List[Store]): the stores to shard the entries over (at least one).
    """

    def __init__(self, stores: List[Store]):
        if len(stores) == 0:
            raise ValueError("ClusterStore needs at least one store, got an empty list")
        self.stores = stores
        self.num_stores = len(stores)
        self.hash_fn = xxh64

    def _hash_key(self, key: str) -> int:
        return self.hash_fn(key.encode()) % self.num_stores

    def route(self, key: str) -> Store:
        """The store that holds ``key``."""
        return self.stores[self._hash_key(key)] if self.num_stores > 1 else self.stores[0]

    def set(self, key: str, value: Union[str, bytes]):
        self.route(key).set(key, value)

    def get(self, key: str) -> Optional[Union[str, bytes]]:
        return self.route(key).get(key)

    def num_keys(self) -> int:
        return sum(store.num_keys() for store in self.stores)

    def clear(self):
        for store in self.stores:
            store.clear()

    def mset(self, dictionary: Dict[str, Union[str, bytes]]):
        if self.num_stores == 1:
            return self.stores[0].mset(dictionary)
        shards: Dict[int, Dict[str, Union[str, bytes]]] = {}
        for key, value in dictionary.items():
            shards.setdefault(self._hash_key(key), {})[key] = value
        for sid, part in shards.items():
            self.stores[sid].mset(part)

    def mget(self, keys: List[str]) -> List[Optional[Union[str, bytes]]]:
        if self.num_stores == 1:
            return self.stores[0].mget(keys)
        shards: Dict[int, List[str]] = {}
        for key in keys:
            shards.setdefault(self._hash_key(key), []).append(key)
        found = {}
        for sid, part in shards.items():
            found.update(zip(part, self.stores[sid].mget(part)))
        return [found.get(key) for key in keys]

    def status(self) -> bool:
        return all(store.status() for store in self.stores)

    def shutdown(self):
        for store in self.stores:
            store.shutdown()
