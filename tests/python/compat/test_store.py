"""Port of upstream Bagua's ``tests/contrib/test_store.py``, plus our own cases: redis-server
missing, bad hosts, the pure-Python XXH64 routing, and servers that never outlive their
process.

Mechanical edits: the ``tests`` import replaced by the harness's. In
``test_redis_cluster_store`` the servers are started by the test process itself instead of
short-lived ``multiprocessing`` children: here a server is a child of the process that starts
it and stops when that process exits (upstream's are daemons that outlive it). The servers
are still shut down through a Redis client at the end, as upstream does.
"""

import logging
import os
import pickle
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest
from unittest import mock

import numpy as np
import redis

from bagua.torch_api.contrib.utils import redis_store
from bagua.torch_api.contrib.utils.redis_store import RedisStore, start_redis_server_cli
from bagua.torch_api.contrib.utils.store import ClusterStore, Store, _xxh64_py
from bagua.torch_api.env import find_free_network_port
from harness import skip_if_cuda_available

logging.basicConfig(level=logging.DEBUG)


def tearDownModule():
    # The server RedisStore(hosts=None) started for this process stops here rather than at
    # interpreter exit.
    redis_store.shutdown_redis_server()


class TestRedisStore(unittest.TestCase):
    def check(self, store):
        store.clear()
        self.assertEqual(store.num_keys(), 0)

        self.generated_data = [np.random.rand(10) for _ in range(5)]
        store.set("1", pickle.dumps(self.generated_data[1]))

        store.mset(
            {
                "2": pickle.dumps(self.generated_data[2]),
                "3": pickle.dumps(self.generated_data[3]),
                "4": pickle.dumps(self.generated_data[4]),
            }
        )
        ret = store.mget(["1", "2", "5"])
        self.assertTrue((pickle.loads(ret[0]) == self.generated_data[1]).all())
        self.assertTrue((pickle.loads(ret[1]) == self.generated_data[2]).all())
        self.assertEqual(ret[2], None)

        r1 = store.get("4")
        r2 = store.get("6")
        self.assertTrue((pickle.loads(r1) == self.generated_data[4]).all())
        self.assertEqual(r2, None)

        cnt = store.num_keys()
        self.assertEqual(cnt, 4)

        self.assertTrue(store.status())

    @skip_if_cuda_available()
    def test_redis_store(self):
        store = RedisStore(hosts=None, cluster_mode=False, capacity_per_node=10000000)
        self.check(store)

    @skip_if_cuda_available()
    def test_redis_cluster_store(self):
        n = 3
        hosts = []
        ports = []
        processes = []
        for i in range(n):
            port = find_free_network_port()
            p = start_redis_server_cli(port, 10000000, f"--cluster-config-file nodes{port}.conf")

            ports.append(port)
            processes.append(p)
            hosts.append({"host": "127.0.0.1", "port": port})

        for p in processes:
            self.assertIsNone(p.poll())

        store = RedisStore(hosts=hosts, cluster_mode=True)
        self.check(store)
        # Ours: the entries really are spread over the three servers.
        self.assertEqual(sum(s.num_keys() for s in store.stores), 4)
        self.assertGreater(sum(1 for s in store.stores if s.num_keys() > 0), 1)
        # Ours: unmanaged servers survive the store's shutdown.
        store.shutdown()
        self.assertTrue(store.status())

        # Shut down servers manually
        for port in ports:
            client = redis.Redis(port=port)
            client.shutdown(nosave=True)
            client.close()
        for p in processes:
            p.wait(timeout=10)


class TestStoreEdges(unittest.TestCase):
    """Our own cases."""

    def test_redis_server_missing(self):
        with tempfile.TemporaryDirectory() as empty, \
                mock.patch.dict(os.environ, {"PATH": empty}), \
                mock.patch.object(redis_store, "_global_redis_servers", []):
            with self.assertRaisesRegex(FileNotFoundError, "redis-server was not found"):
                start_redis_server_cli(find_free_network_port(), 1000000)
            with self.assertRaisesRegex(FileNotFoundError, "apt-get install redis-server"):
                RedisStore(hosts=None)

    def test_bad_hosts(self):
        for hosts in ([], [{"host": "127.0.0.1"}], [{"host": "x", "port": "http"}], "h:1"):
            with self.assertRaises(ValueError):
                RedisStore(hosts=hosts)

    def test_unreachable_host(self):
        port = find_free_network_port()
        with mock.patch.object(redis_store, "CONNECT_TIMEOUT_S", 0.5):
            with self.assertRaisesRegex(ConnectionError, f"127.0.0.1:{port}"):
                RedisStore(hosts=[{"host": "127.0.0.1", "port": port}])

    def test_bad_server_option(self):
        with self.assertRaisesRegex(RuntimeError, "exited"):
            start_redis_server_cli(find_free_network_port(), 1000000, "--no-such-option 1")

    def test_xxh64_routing(self):
        # Reference values of XXH64 with seed 0.
        self.assertEqual(_xxh64_py(b""), 0xEF46DB3751D8E999)
        self.assertEqual(_xxh64_py(b"abc"), 0x44BC2CF5AD770999)
        self.assertEqual(_xxh64_py(b"Nobody inspects the spammish repetition"),
                         0xFBCEA83C8A378BF1)

        class Dict(Store):
            def __init__(self):
                self.d = {}

            def mset(self, m):
                self.d.update(m)

            def mget(self, keys):
                return [self.d.get(k) for k in keys]

        shards = [Dict() for _ in range(3)]
        cluster = ClusterStore(shards)
        cluster.mset({str(i): bytes([i]) for i in range(30)})
        for sid, shard in enumerate(shards):
            for key in shard.d:
                self.assertEqual(_xxh64_py(key.encode()) % 3, sid)
        self.assertEqual(cluster.mget(["3", "x", "29"]), [b"\x03", None, b"\x1d"])


_LIFETIME_SCRIPT = textwrap.dedent("""
    import sys, time
    from bagua.torch_api.contrib.utils.redis_store import start_redis_server_cli
    proc = start_redis_server_cli(int(sys.argv[1]), 1000000)
    print(proc.pid, flush=True)
    if sys.argv[2] == "hang":
        time.sleep(60)
""")


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


class TestServerLifetime(unittest.TestCase):
    """Ours: a server never outlives the process that started it."""

    def run_starter(self, mode):
        port = find_free_network_port()
        starter = subprocess.Popen([sys.executable, "-c", _LIFETIME_SCRIPT, str(port), mode],
                                   stdout=subprocess.PIPE, text=True)
        try:
            pid = int(starter.stdout.readline())
            self.assertTrue(_alive(pid))
            self.assertTrue(redis.Redis(port=port).ping())
            if mode == "hang":
                starter.kill()
            starter.wait(timeout=30)
            deadline = time.monotonic() + 10
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertFalse(_alive(pid), f"redis-server {pid} outlived its starter")
        finally:
            if starter.poll() is None:
                starter.kill()
                starter.wait()
            starter.stdout.close()

    def test_stops_at_exit(self):
        self.run_starter("exit")

    def test_stops_when_starter_is_killed(self):
        self.run_starter("hang")


if __name__ == "__main__":
    unittest.main()
