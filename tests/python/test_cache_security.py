"""The Redis-backed dataset cache (contrib.CacheLoader, CachedDataset, RedisStore) against a
hostile or broken server: a value someone else wrote is never unpickled, the servers Bagua
starts need a password, a port another process holds is an error, a stalled server costs one
timeout rather than one per sample, and values that cannot be stored do not pile up.

Every server here is a real redis-server on a free loopback port, started and stopped by PID.
"""

import hashlib
import hmac
import json
import logging
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest

redis = pytest.importorskip("redis")

from bagua.torch_api.contrib import cache_loader  # noqa: E402
from bagua.torch_api.contrib.cache_loader import CacheLoader  # noqa: E402
from bagua.torch_api.contrib.cached_dataset import CachedDataset  # noqa: E402
from bagua.torch_api.contrib.utils import redis_store  # noqa: E402
from bagua.torch_api.contrib.utils.redis_store import (RedisStore,  # noqa: E402
                                                       start_redis_server_cli)
from conftest import free_port  # noqa: E402

REDIS_SERVER = shutil.which("redis-server")
pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not installed")


def _start_redis(port, *extra):
    """A plain redis-server on 127.0.0.1:port (no password), once it answers."""
    proc = subprocess.Popen([REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1",
                             "--save", "", "--appendonly", "no", "--daemonize", "no", *extra],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    client = redis.Redis(port=port, socket_connect_timeout=1, socket_timeout=1)
    deadline = time.monotonic() + 20
    try:
        while True:
            assert proc.poll() is None, f"redis-server on port {port} exited"
            try:
                if client.ping():
                    return proc
            except redis.exceptions.ConnectionError:
                pass
            assert time.monotonic() < deadline, f"redis-server on port {port} did not start"
            time.sleep(0.05)
    except BaseException:
        _stop(proc)
        raise
    finally:
        client.close()


def _stop(proc):
    """Stops a server started here, by its PID (also when it was SIGSTOPed)."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGCONT)
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.fixture
def server():
    """A running redis-server: ``(Popen, port)``."""
    port = free_port()
    proc = _start_redis(port)
    try:
        yield proc, port
    finally:
        _stop(proc)


class _Exploit:
    """A pickle that, when loaded, creates the file ``path`` (as an attacker's would run a
    command)."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_forged_pickle_is_not_unpickled(server, tmp_path, caplog):
    _, port = server
    marker = tmp_path / "pwned"
    loader = CacheLoader(backend="redis", hosts=[{"host": "127.0.0.1", "port": port}],
                         dataset_name="ds")
    outsider = redis.Redis(port=port)
    # What an outsider who reaches the port would plant for a sample the job will read.
    outsider.set("ds_0", pickle.dumps(_Exploit(str(marker))))
    outsider.set("ds_1", b"not a pickle at all")
    loads = []

    def load(key):
        loads.append(key)
        return {"sample": key}

    with caplog.at_level(logging.WARNING, logger=redis_store.__name__):
        assert loader.get(0, load) == {"sample": 0}
        assert loader.get(1, load) == {"sample": 1}
    assert not marker.exists(), "the forged pickle was unpickled (its code ran)"
    # Both read as misses, each with one warning that names its key.
    assert loads == [0, 1]
    for key in ("ds_0", "ds_1"):
        assert sum(key in r.getMessage() for r in caplog.records) == 1, caplog.text

    # The job's own values (written back after the miss) are hits, for another loader too,
    # and the stored bytes are not the bare pickle.
    again = CacheLoader(backend="redis", hosts=[{"host": "127.0.0.1", "port": port}],
                        dataset_name="ds")
    assert again.get(0, load) == {"sample": 0}
    assert loads == [0, 1]
    assert outsider.get("ds_0") != pickle.dumps({"sample": 0})

    # A valid value moved under another key is refused as well: the HMAC covers the key.
    outsider.set("ds_7", outsider.get("ds_0"))
    assert again.store.get("ds_7") is None
    assert not marker.exists()
    outsider.close()


def test_managed_server_requires_a_password():
    redis_store.shutdown_redis_server()
    store = RedisStore(hosts=None, cluster_mode=False, capacity_per_node=10_000_000)
    try:
        port = redis_store._global_redis_servers[0]["port"]
        assert redis_store._global_redis_servers[0]["host"] == "127.0.0.1"
        stranger = redis.Redis(port=port, socket_connect_timeout=2, socket_timeout=2)
        with pytest.raises(redis.exceptions.AuthenticationError):
            stranger.ping()
        with pytest.raises(redis.exceptions.AuthenticationError):
            stranger.set("x", b"1")
        stranger.close()
        # The job's own clients authenticate.
        store.set("k", b"v")
        assert store.get("k") == b"v"
        member = redis.Redis(port=port, password=redis_store._password(
            redis_store._shared_root()))
        assert member.config_get("protected-mode") == {"protected-mode": "yes"}
        assert member.config_get("bind") == {"bind": "127.0.0.1"}
        member.close()
    finally:
        redis_store.shutdown_redis_server()


_SECRET = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

_SECRET_SCRIPT = textwrap.dedent("""
    import json, redis
    from bagua.torch_api.contrib.utils import redis_store
    store = redis_store.RedisStore(hosts=None, capacity_per_node=10_000_000)
    port = redis_store._global_redis_servers[0]["port"]
    pid = redis_store._children[port][1].pid
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        cmdline = f.read().decode(errors="replace")
    password = redis_store._password(redis_store._shared_root())
    def refuses(pw):
        try:
            redis.Redis(port=port, password=pw).ping()
            return False
        except redis.exceptions.RedisError:  # NOAUTH, WRONGPASS
            return True
    store.set("k", b"v")
    print(json.dumps({"password": password, "cmdline": cmdline, "secret_refused":
                      refuses("%s"), "none_refused": refuses(None),
                      "derived_ok": not refuses(password), "value": store.get("k").decode()}))
    redis_store.shutdown_redis_server()
""" % _SECRET)


def test_password_is_derived_from_the_job_secret():
    env = dict(os.environ, BAGUA_JOB_SECRET=_SECRET)
    out = subprocess.run([sys.executable, "-c", _SECRET_SCRIPT], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    label = b"bagua-c redis cache: server password v1"
    expected = hmac.new(bytes.fromhex(_SECRET), label, hashlib.sha256).hexdigest()
    assert got["password"] == expected and got["password"] != _SECRET
    assert got["derived_ok"] and got["secret_refused"] and got["none_refused"], got
    # Never on the server's command line (readable by every user of the host).
    assert got["password"] not in got["cmdline"] and _SECRET not in got["cmdline"]
    assert got["value"] == "v"


def test_shared_cache_across_hosts_needs_the_job_secret():
    with pytest.raises(RuntimeError, match="BAGUA_JOB_SECRET.*cluster_mode=False"):
        redis_store._plan(True, True, False, "10.1.2.3")
    assert redis_store._plan(True, True, True, "10.1.2.3") == ("127.0.0.1 10.1.2.3",
                                                               "10.1.2.3", True)
    # Not shared across hosts: loopback only, secret or not.
    for spans, cluster in ((False, True), (True, False), (False, False)):
        assert redis_store._plan(spans, cluster, False, "10.1.2.3") == ("127.0.0.1",
                                                                        "127.0.0.1", False)
    with pytest.raises(ValueError, match="password"):
        start_redis_server_cli(free_port(), 1_000_000, bind="127.0.0.1 0.0.0.0")


def test_squatter_on_the_port_is_an_error(server):
    squatter, port = server
    with pytest.raises(RuntimeError, match=f"port {port} .*in use|in use.*port {port}"):
        start_redis_server_cli(port, 1_000_000)
    assert squatter.poll() is None
    assert redis.Redis(port=port).ping()


def test_fake_server_on_the_port_is_an_error():
    """A process that answers +PONG to anything, holding the port."""
    port = free_port()
    listener = socket.socket()
    listener.bind(("127.0.0.1", port))
    listener.listen(8)
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve():
        conns = []
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
                conn.settimeout(0.2)
                conns.append(conn)
            except socket.timeout:
                pass
            for conn in list(conns):
                try:
                    if conn.recv(4096):
                        conn.sendall(b"+PONG\r\n")
                    else:
                        conns.remove(conn)
                except socket.timeout:
                    pass
                except OSError:
                    conns.remove(conn)
        for conn in conns:
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        with pytest.raises(RuntimeError, match=f"port {port}"):
            start_redis_server_cli(port, 1_000_000)
    finally:
        stop.set()
        thread.join(timeout=10)
        listener.close()


def test_stalled_server_costs_one_timeout(server, monkeypatch):
    proc, port = server
    # A one-second socket timeout on every call (the default is longer).
    monkeypatch.setattr(redis_store, "COMMAND_TIMEOUT_S", 1.0)
    samples = [f"sample {i}".encode() for i in range(10)]
    dataset = CachedDataset(samples, dataset_name="stall", writer_buffer_size=1,
                            hosts=[{"host": "127.0.0.1", "port": port}])
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        start = time.monotonic()
        for i in range(len(samples)):
            assert dataset[i] == samples[i]
        elapsed = time.monotonic() - start
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    # One timeout (1 s) for the first call; the rest skip the server. Per-sample waits would
    # take at least 10 s.
    assert elapsed < 5.0, f"{len(samples)} samples took {elapsed:.1f} s"


def test_store_timeout_argument(server):
    proc, port = server
    store = RedisStore(hosts=[{"host": "127.0.0.1", "port": port}], timeout=0.5)
    store.set("k", b"v")
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        start = time.monotonic()
        with pytest.raises(ConnectionError, match=f"127.0.0.1:{port}"):
            store.get("k")
        # Marked down: the next calls fail at once, and status() says so.
        with pytest.raises(ConnectionError, match="down"):
            store.mset({"a": b"1"})
        assert store.status() is False
        assert time.monotonic() - start < 5.0
    finally:
        os.kill(proc.pid, signal.SIGCONT)


@pytest.fixture
def tiny_server():
    """A redis-server that holds at most 1 MB: every sample below is larger."""
    port = free_port()
    proc = _start_redis(port, "--maxmemory", "1000000", "--maxmemory-policy", "allkeys-random")
    try:
        yield proc, port
    finally:
        _stop(proc)


def test_unstorable_samples_are_not_retried_forever(tiny_server):
    _, port = tiny_server
    loader = CacheLoader(backend="redis", hosts=[{"host": "127.0.0.1", "port": port}],
                         dataset_name="one", writer_buffer_size=1)
    for i in range(15):
        assert len(loader.get(i, lambda k: os.urandom(2_000_000))) == 2_000_000
        # Each refused value is tried a bounded number of times, then dropped.
        assert len(loader.fetcher.write_map) <= 2, len(loader.fetcher.write_map)
    assert loader.num_keys() == 0


def test_write_buffer_stays_under_its_cap(tiny_server):
    _, port = tiny_server
    cap = 5_000_000
    loader = CacheLoader(backend="redis", hosts=[{"host": "127.0.0.1", "port": port}],
                         dataset_name="big", writer_buffer_size=4, writer_buffer_bytes=cap)
    # Larger than the server's memory limit; the last ones larger than the cap too.
    sizes = [2_000_000] * 12 + [6_000_000] * 3
    for i, size in enumerate(sizes):
        assert len(loader.get(i, lambda k: bytes([k % 256]) * sizes[k])) == size
        assert loader.fetcher.write_bytes <= cap
        assert loader.fetcher.write_bytes == sum(map(len, loader.fetcher.write_map.values()))
    assert loader.fetcher.dropped > 0
    assert len(loader.fetcher.write_map) <= cache_loader.MAX_WRITE_ATTEMPTS
