"""Port of upstream Bagua's ``tests/contrib/test_cached_dataset.py``, plus our own cases: the
cache loader on its own, a DataLoader with worker processes, a 2-rank job sharing the
per-node Redis server that ``RedisStore(hosts=None)`` starts, and two emulated nodes (one rank
each) sharding over their two servers.

Mechanical edits: the ``tests`` import replaced by the harness's; the module's Redis server
is shut down at the end of the module. Our cases check that a server is gone by connecting to
its port, not by a PING: the servers Bagua starts require the job's password.
"""

import logging
import socket
import time
import unittest

import numpy as np
import torch
from torch.utils.data.dataset import Dataset

import bagua.torch_api as bagua
from bagua.torch_api.contrib.cache_loader import CacheLoader
from bagua.torch_api.contrib.cached_dataset import CachedDataset
from bagua.torch_api.contrib.utils import redis_store
from bagua.torch_api.contrib.utils.redis_store import RedisStore
from harness import MultiProcessTestCase, base_env, setup_bagua_env, skip_if_cuda_available

logging.basicConfig(level=logging.DEBUG)


def tearDownModule():
    redis_store.shutdown_redis_server()


def assert_server_gone(test, port):
    """The server on ``port`` stops: connections to it are refused. (A connection, not a
    PING: the servers need the job's password, so a PING fails on a live server too.)"""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        except ConnectionRefusedError:
            return
        time.sleep(0.1)
    test.fail(f"the Redis server on port {port} outlived the job")


class MyDataset(Dataset):
    def __init__(self, size):
        self.size = size
        self.dataset = [(np.random.rand(5, 2), np.random.rand(1)) for _ in range(size)]

    def __getitem__(self, item):
        return self.dataset[item]

    def __len__(self):
        return self.size


class TestCacheDataset(unittest.TestCase):
    def check_dataset(self, dataset, cache_dataset):
        for _ in range(10):
            for _, _ in enumerate(cache_dataset):
                pass

        for i in range(len(dataset)):
            self.assertTrue((dataset[i][0] == cache_dataset[i][0]).all())
            self.assertTrue((dataset[i][1] == cache_dataset[i][1]).all())

    @skip_if_cuda_available()
    def test_redis(self):
        dataset1 = MyDataset(102)
        dataset2 = MyDataset(102)
        cache_dataset1 = CachedDataset(
            dataset1,
            backend="redis",
            dataset_name="d1",
        )
        cache_dataset2 = CachedDataset(
            dataset2,
            backend="redis",
            dataset_name="d2",
        )

        cache_dataset1.cache_loader.store.clear()

        self.check_dataset(dataset1, cache_dataset1)
        self.assertEqual(cache_dataset1.cache_loader.num_keys(), len(dataset1))

        self.check_dataset(dataset2, cache_dataset2)
        self.assertEqual(
            cache_dataset2.cache_loader.num_keys(), len(dataset1) + len(dataset2)
        )


class CountingDataset(Dataset):
    """A dataset that counts the samples it produces."""

    def __init__(self, size):
        self.size = size
        self.loads = 0

    def __getitem__(self, item):
        if item >= self.size:
            raise IndexError(item)
        self.loads += 1
        return torch.full((3,), float(item))

    def __len__(self):
        return self.size


class TestCacheLoaderEdges(unittest.TestCase):
    """Our own cases."""

    def test_loads_once(self):
        loader = CacheLoader(backend="redis", dataset_name="once", writer_buffer_size=4)
        loader.store.clear()
        calls = []

        def load(key):
            calls.append(key)
            return {"key": key}

        for _ in range(3):
            for key in range(10):
                self.assertEqual(loader.get(key, load), {"key": key})
        # Values still in the write buffer are served from it, not computed again.
        self.assertEqual(calls, list(range(10)))
        self.assertEqual(loader.num_keys(), 8)

    def test_invalid_backend(self):
        with self.assertRaisesRegex(ValueError, "only 'redis'"):
            CacheLoader(backend="memcached")

    def test_data_loader_workers(self):
        dataset = CachedDataset(CountingDataset(16), dataset_name="workers",
                                writer_buffer_size=1)
        dataset.cache_loader.store.clear()
        for _ in range(2):
            loader = torch.utils.data.DataLoader(dataset, batch_size=4, num_workers=2)
            batches = torch.cat([b[:, 0] for b in loader])
            self.assertEqual(sorted(batches.tolist()), [float(i) for i in range(16)])
        self.assertEqual(dataset.cache_loader.num_keys(), 16)


def run_shared_cache(rank, nprocs, args, results, env):
    setup_bagua_env(rank, env)
    dataset = CountingDataset(20)
    cached = CachedDataset(dataset, dataset_name="shared", writer_buffer_size=1)
    if rank == 0:
        cached.cache_loader.store.clear()
        for i in range(len(cached)):
            cached[i]
    bagua.barrier()
    if rank != 0:
        for i in range(len(cached)):
            assert torch.equal(cached[i], torch.full((3,), float(i)))
        # Every sample came from rank 0's entries on the node's one server.
        assert dataset.loads == 0, dataset.loads
    servers = redis_store._global_redis_servers
    assert len(servers) == 1 and servers[0]["host"] == "127.0.0.1", servers
    results[rank] = servers[0]["port"]
    bagua.barrier()


class TestSharedCache(MultiProcessTestCase):
    """Ours: ranks of one node share one server, started by local rank 0 and gone when the
    job ends."""

    def test_two_ranks_share_one_server(self):
        import multiprocessing

        manager = multiprocessing.get_context("spawn").Manager()
        try:
            results = manager.dict()
            self.run_test_locally(run_shared_cache, 2, None, results)
            ports = set(results.values())
        finally:
            manager.shutdown()
        self.assertEqual(len(ports), 1)
        assert_server_gone(self, ports.pop())


def run_two_nodes(rank, nprocs, args, results, env):
    setup_bagua_env(rank, env)
    store = RedisStore(hosts=None, cluster_mode=True, capacity_per_node=10_000_000)
    servers = redis_store._global_redis_servers
    # One server per (emulated) node, listed in node order on every rank.
    assert len(servers) == 2 and len(store.stores) == 2, servers
    if rank == 0:
        store.clear()
        store.mset({f"k{i}": str(i).encode() for i in range(40)})
    bagua.barrier()
    assert store.mget([f"k{i}" for i in range(40)]) == [str(i).encode() for i in range(40)]
    # Both shards hold entries.
    assert all(s.num_keys() > 0 for s in store.stores)
    results[rank] = [s["port"] for s in servers]
    bagua.barrier()


class TestTwoNodes(MultiProcessTestCase):
    """Ours: two emulated nodes (one rank each) start a server each and shard over both."""

    def test_one_server_per_node(self):
        import multiprocessing

        manager = multiprocessing.get_context("spawn").Manager()
        try:
            results = manager.dict()
            self.run_test_locally(run_two_nodes, 2, None, results,
                                  env=base_env(2, local_size=1))
            ports = dict(results)
        finally:
            manager.shutdown()
        self.assertEqual(ports[0], ports[1])
        self.assertEqual(len(set(ports[0])), 2)
        for port in ports[0]:
            assert_server_gone(self, port)


if __name__ == "__main__":
    unittest.main()
