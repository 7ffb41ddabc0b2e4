"""A key-value store on Redis servers: existing ones, or one started on each node of the job.

Servers this module starts (:func:`start_redis_server_cli`, and :class:`RedisStore` with
``hosts=None``) are child processes of the Python process that started them, never daemons:
they are stopped when it exits (an ``atexit`` handler), and the kernel stops them if it
dies without running its handlers (they get SIGTERM when their parent dies).
"""

import atexit
import ctypes
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from typing import Dict, List, Optional, Union

import torch

try:
    import redis
except ImportError as _err:
    raise ImportError(
        "bagua.torch_api.contrib.utils.redis_store needs the Redis Python client: install "
        "it (Debian: apt-get install python3-redis; pip: pip install redis)") from _err

from bagua.torch_api import communication
from bagua.torch_api.contrib.utils.store import ClusterStore, Store
from bagua.torch_api.env import (find_free_network_port, get_local_rank, get_local_size,
                                 get_master_addr, get_node_rank, get_world_size)

__all__ = ["RedisStore", "start_redis_server_cli"]

LOGGER = logging.getLogger(__name__)

#: Seconds a new redis-server may take to accept connections before starting fails.
START_TIMEOUT_S = 30.0
#: Seconds a client keeps retrying to reach a server before giving up.
CONNECT_TIMEOUT_S = 30.0
#: Seconds one Redis command may take (a bound on every wait on a server).
COMMAND_TIMEOUT_S = 120.0

_host_ip = None
# The servers RedisStore(hosts=None) bootstrapped for this process, one per node, in node
# order: [{"host": ..., "port": ...}, ...].
_global_redis_servers: List[Dict[str, Union[str, int]]] = []
# redis-server processes started by this process: port -> (pid of the starter, Popen).
_children: Dict[int, tuple] = {}
_children_lock = threading.Lock()
_atexit_registered = False


def get_host_ip() -> str:
    """The address other nodes reach this host at: the local address of the route to
    MASTER_ADDR when there is one, else the address the host name resolves to."""
    global _host_ip
    if _host_ip is None:
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                # Connecting a UDP socket sends nothing; it only selects the route.
                s.connect((get_master_addr(), 9))
                _host_ip = s.getsockname()[0]
        except OSError:
            _host_ip = socket.gethostbyname(socket.gethostname())
    return _host_ip


def _is_loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


def _die_with_parent():
    # Runs in the child between fork and exec: ask the kernel for SIGTERM when the parent
    # dies, so that even a SIGKILLed worker leaves no server behind. (The kernel ties this to
    # the thread that started the server: start servers from a thread that lives as long
    # as the process, normally the main thread.)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _stop_children():
    """Stops every redis-server this process started (the atexit handler)."""
    with _children_lock:
        mine = [(port, proc) for port, (pid, proc) in _children.items() if pid == os.getpid()]
        _children.clear()
    for port, proc in mine:
        _stop_process(proc, port)


def _stop_process(proc, port):
    if proc.poll() is not None:
        return
    LOGGER.debug("stopping local redis-server on port %s (pid %d)", port, proc.pid)
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


def _find_redis_server() -> str:
    path = shutil.which("redis-server")
    if path is None:
        raise FileNotFoundError(
            "redis-server was not found on PATH: install it (Debian: apt-get install "
            "redis-server) to let Bagua start a local Redis, or pass hosts=[{'host': ..., "
            "'port': ...}] naming running Redis servers")
    return path


def start_redis_server_cli(port, capacity, *args, bind="127.0.0.1", timeout=None):
    """Starts a redis-server on ``port`` as a child of this process and returns its
    ``subprocess.Popen`` once it accepts connections.

    The server keeps nothing on disk (no snapshots, no append-only file) and evicts random
    keys once it holds ``capacity`` bytes. It stops when this process exits.

    Args:
        port (int): TCP port to listen on.
        capacity (int): memory limit in bytes (redis ``maxmemory``).
        *args (str): further redis-server options, e.g. ``"--maxclients 100"``.
        bind (str): addresses to listen on, separated by spaces. Default: loopback only.
        timeout (float): seconds to wait for the server to accept connections. Default:
            ``START_TIMEOUT_S`` (30).

    Raises:
        FileNotFoundError: redis-server is not installed.
        RuntimeError: the server exited or did not accept connections within ``timeout``.
    """
    global _atexit_registered
    port = int(port)
    if not 0 < port < 65536:
        raise ValueError(f"port must be between 1 and 65535, not {port}")
    if int(capacity) < 0:
        raise ValueError(f"capacity must be a non-negative number of bytes, not {capacity}")
    timeout = START_TIMEOUT_S if timeout is None else float(timeout)
    cmd = [_find_redis_server(),
           "--port", str(port),
           "--bind", *bind.split(),
           "--maxmemory", str(int(capacity)),
           "--maxmemory-policy", "allkeys-random",
           "--appendonly", "no",
           "--save", "",
           "--loglevel", "warning"]
    if not all(_is_loopback(h) for h in bind.split()):
        # Other nodes must reach the server: Redis refuses them in protected mode.
        cmd += ["--protected-mode", "no"]
    # Each extra argument may be "--option value" in one string, as upstream Bagua passes
    # them: redis-server itself splits such arguments.
    cmd += [str(a) for a in args]
    # Last, so that no extra argument can turn the server into a daemon we cannot stop.
    cmd += ["--daemonize", "no"]
    log = tempfile.TemporaryFile()
    LOGGER.debug("starting redis-server: %s", cmd)
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            preexec_fn=_die_with_parent, cwd=tempfile.gettempdir())
    with _children_lock:
        _children[port] = (os.getpid(), proc)
        if not _atexit_registered:
            atexit.register(_stop_children)
            _atexit_registered = True
    client = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=1,
                         socket_timeout=1)
    deadline = time.monotonic() + timeout
    try:
        while True:
            if proc.poll() is not None:
                log.seek(0)
                output = log.read().decode(errors="replace").strip()[-2000:]
                raise RuntimeError(f"redis-server on port {port} exited with code "
                                   f"{proc.returncode} at start: {output or '(no output)'}")
            try:
                if client.ping():
                    return proc
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis-server on port {port} did not accept connections "
                                   f"within {timeout:g} s")
            time.sleep(0.05)
    except BaseException:
        with _children_lock:
            _children.pop(port, None)
        _stop_process(proc, port)
        raise
    finally:
        client.close()
        log.close()


def _start_local_server(capacity, bind):
    """Starts this node's server on a free port, trying another port when the one picked is
    taken in between; returns the port."""
    last = None
    for _ in range(3):
        port = find_free_network_port()
        try:
            start_redis_server_cli(port, capacity, bind=bind)
            return port
        except RuntimeError as err:
            # Only a lost race for the port is worth another try.
            if "in use" not in str(err):
                raise
            last = err
    raise last


# One row per rank in the address exchange: node rank, local rank, port (-1: the server did
# not start), address length, then the address's bytes.
_ADDR_BYTES = 64


def _exchange(hostinfo):
    """Every rank's ``(node_rank, local_rank, host, port)``, over Bagua's default group."""
    row = torch.zeros(4 + _ADDR_BYTES, dtype=torch.int64)
    host = hostinfo["host"].encode() if hostinfo else b""
    row[0], row[1] = get_node_rank(), get_local_rank()
    row[2] = int(hostinfo["port"]) if hostinfo else -1
    row[3] = len(host)
    row[4:4 + len(host)] = torch.tensor(list(host), dtype=torch.int64)
    rows = torch.empty(get_world_size() * row.numel(), dtype=torch.int64)
    communication.allgather(row, rows)
    result = []
    for r in rows.view(get_world_size(), -1).tolist():
        addr = bytes(r[4:4 + r[3]]).decode()
        result.append((r[0], r[1], addr, r[2]))
    return result


def _is_bootstrapped():
    return len(_global_redis_servers) > 0


def bootstrap_redis_server(capacity_per_node):
    """Starts a Redis server on each node (by its local rank 0) and returns every node's
    ``{"host", "port"}`` in node order, the same list on every rank.

    A collective in a job of several ranks: every rank calls it, after
    :func:`bagua.torch_api.init_process_group`. Later calls in the same process return the
    servers of the first one.
    """
    global _global_redis_servers
    if _is_bootstrapped():
        LOGGER.debug("the local redis server is already running")
        return _global_redis_servers
    world = get_world_size()
    if world > 1 and not communication.is_initialized():
        raise RuntimeError(
            f"RedisStore(hosts=None) in a job of {world} ranks starts one Redis server per "
            "node and shares their addresses over Bagua: call "
            "bagua.torch_api.init_process_group() first")
    multi_node = get_local_size() < world
    host = get_host_ip() if multi_node else "127.0.0.1"
    bind = f"127.0.0.1 {host}" if multi_node and not _is_loopback(host) else "127.0.0.1"
    hostinfo, error = None, None
    if get_local_rank() == 0:
        try:
            hostinfo = {"host": host, "port": _start_local_server(capacity_per_node, bind)}
        except Exception as err:  # reported to the other ranks below, then raised
            error = err
    if world == 1:
        if error is not None:
            raise error
        servers = [hostinfo]
    else:
        # Every rank takes part, failed or not, so that no rank waits for a server that will
        # never be announced.
        rows = _exchange(hostinfo)
        if error is not None:
            raise error
        failed = sorted({node for node, local, _, port in rows if local == 0 and port < 0})
        if failed:
            raise RuntimeError(f"the Redis server of node(s) {failed} did not start (see the "
                               "error of their local rank 0)")
        heads = sorted((node, addr, port) for node, local, addr, port in rows if local == 0)
        servers = [{"host": addr, "port": port} for _, addr, port in heads]
    _global_redis_servers = servers
    return _global_redis_servers


def shutdown_redis_server():
    """Stops this node's bootstrapped Redis server."""
    global _global_redis_servers
    if not _is_bootstrapped():
        return
    info = _global_redis_servers[get_node_rank() % len(_global_redis_servers)]
    _RedisStore(host=info["host"], port=info["port"], managed=True, connect=False).shutdown()


class RedisStore(ClusterStore):
    """A distributed key-value store on Redis servers, with the
    :class:`~bagua.torch_api.contrib.utils.store.Store` methods (:meth:`set`, :meth:`get`,
    :meth:`mset`, :meth:`mget`, ...).

    Args:
        hosts (List[Dict[str, str]]): the Redis servers, e.g. ``[{"host": "192.168.1.0",
            "port": "7000"}, {"host": "192.168.1.1", "port": "7000"}]``. With ``None`` a new
            Redis server is started on each node (by its local rank 0; a collective, after
            ``init_process_group`` when the job has several ranks), listening on loopback
            only in a single-node job; it stops when the job ends.
        cluster_mode (bool): if True, entries are sharded over all servers; otherwise the
            workers of node ``n`` use server ``n % len(hosts)`` only. Default: True.
        capacity_per_node (int): memory limit in bytes of the servers started here; old
            entries are evicted (at random) beyond it. Default: 100 GiB.

    .. note::
        The stores of one process built with ``hosts=None`` share the servers started by
        the first one. :attr:`capacity_per_node` applies to new servers only.
    """

    def __init__(
        self,
        hosts: Optional[List[Dict[str, str]]] = None,
        cluster_mode: bool = True,
        capacity_per_node: int = 107_374_182_400,
    ):
        managed = hosts is None
        if managed:
            LOGGER.info("bootstrapping a local redis server")
            hosts = bootstrap_redis_server(capacity_per_node)
        else:
            hosts = _check_hosts(hosts)
            LOGGER.info("connecting to redis servers %s", hosts)
        to_connect = list(hosts) if cluster_mode else [hosts[get_node_rank() % len(hosts)]]
        stores = [_RedisStore(host=h["host"], port=h["port"], managed=managed)
                  for h in to_connect]
        super().__init__(stores)


def _check_hosts(hosts):
    if not isinstance(hosts, (list, tuple)) or len(hosts) == 0:
        raise ValueError("hosts must be None (start local servers) or a non-empty list of "
                         f"{{'host': ..., 'port': ...}} dicts, not {hosts!r}")
    for h in hosts:
        if not isinstance(h, dict) or "host" not in h or "port" not in h:
            raise ValueError(f"each entry of hosts must be a dict with 'host' and 'port', not "
                             f"{h!r}")
        try:
            port = int(h["port"])
        except (TypeError, ValueError):
            port = -1
        if not 0 < port < 65536:
            raise ValueError(f"invalid port in hosts entry {h!r}: accepted 1 to 65535")
    return list(hosts)


class _RedisStore(Store):
    """One Redis server as a :class:`Store`."""

    def __init__(self, host, port, managed=False, connect=True):
        self.host = host
        self.port = int(port)
        self.managed = managed
        self.client = _create_redis_client(host, self.port)
        if connect:
            self._connect_with_retry(CONNECT_TIMEOUT_S)

    # A store travels to spawned data-loader workers without its client (a client holds
    # sockets and locks); the worker opens its own connection.
    def __getstate__(self):
        return {"host": self.host, "port": self.port, "managed": self.managed}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.client = _create_redis_client(self.host, self.port)

    def _connect_with_retry(self, timeout):
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.client.ping():
                    return
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as err:
                if time.monotonic() > deadline:
                    raise ConnectionError(f"could not connect to the Redis server at "
                                          f"{self.host}:{self.port} within {timeout:g} s: "
                                          f"{err}") from None
            time.sleep(0.2)

    def set(self, key: str, value: Union[str, bytes]):
        self.client.set(key, value)

    def get(self, key: str) -> Optional[Union[str, bytes]]:
        return self.client.get(key)

    def num_keys(self) -> int:
        return self.client.dbsize()

    def clear(self):
        self.client.flushdb()

    def mset(self, dictionary: Dict[str, Union[str, bytes]]):
        if dictionary:
            self.client.mset(dictionary)

    def mget(self, keys: List[str]) -> List[Optional[Union[str, bytes]]]:
        if not keys:
            return []
        return self.client.mget(keys)

    def status(self) -> bool:
        return self.client.ping()

    def shutdown(self):
        global _global_redis_servers
        if not self.managed:
            LOGGER.warning("not shutting down the Redis server at %s:%s: it was not started "
                           "by Bagua", self.host, self.port)
            return
        if not (_is_loopback(self.host) or self.host == get_host_ip()):
            LOGGER.error("could not shut down the Redis server at %s:%s: it runs on another "
                         "node", self.host, self.port)
            return
        LOGGER.debug("shutting down the local Redis server on port %s", self.port)
        with _children_lock:
            child = _children.pop(self.port, None)
        if child is not None and child[0] == os.getpid():
            _stop_process(child[1], self.port)
        else:
            try:
                self.client.shutdown(nosave=True)
            except redis.exceptions.ConnectionError:
                pass  # the server closes the connection as it stops, or was already gone
        # A later RedisStore(hosts=None) in this process starts a new server.
        _global_redis_servers = []


def _create_redis_client(host, port):
    # A server on this host is reached over loopback, which it always listens on.
    if _is_loopback(str(host)) or host == get_host_ip():
        host = "127.0.0.1"
    return redis.Redis(host=host, port=int(port), socket_connect_timeout=10,
                       socket_timeout=COMMAND_TIMEOUT_S)
