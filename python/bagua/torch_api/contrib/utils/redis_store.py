"""A key-value store on Redis servers: existing ones, or one started on each node of the job.

Servers this module starts (:func:`start_redis_server_cli`, and :class:`RedisStore` with
``hosts=None``) are child processes of the Python process that started them, never daemons:
they are stopped when it exits (an ``atexit`` handler), and the kernel stops them if it
dies without running its handlers (they get SIGTERM when their parent dies).

Security. The dataset cache unpickles what it reads, so nothing read from a server is trusted
until it is proved to come from this job:

- Every value this module writes carries an HMAC-SHA256 over its key and payload, with a key
  derived from the job secret (``BAGUA_JOB_SECRET``, which bagua-launch gives its workers),
  else from a random key that rank 0 draws and shares with the job's ranks over Bagua's
  default group (the exchange that also shares the servers' addresses). A value without a
  valid HMAC (written by someone else, or by another job) reads as a miss, with a warning
  naming its key, and is never unpickled.
- The servers started with ``hosts=None`` listen on loopback only, unless the job spans
  hosts and ``cluster_mode`` shares them across hosts; they always require a password
  derived (by HMAC-SHA256 of a fixed label) from the same key, never the key itself, passed
  to redis-server on its standard input rather than its command line, and they keep Redis's
  protected mode on. Sharing servers across hosts needs ``BAGUA_JOB_SECRET``: without it the
  store refuses (``cluster_mode=False`` keeps one loopback-only cache per node instead).
- Every call on a server has a socket timeout; a server that lets one time out is marked
  down, and for ``DOWN_RETRY_S`` seconds calls on it fail at once
  (:class:`~bagua.torch_api.contrib.utils.store.StoreUnavailableError`: a cache miss)
  instead of waiting again.
"""

import atexit
import ctypes
import hashlib
import hmac
import logging
import os
import re
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

from bagua import _C
from bagua.torch_api import communication
from bagua.torch_api.contrib.utils.store import ClusterStore, Store, StoreUnavailableError
from bagua.torch_api.env import (find_free_network_port, get_local_rank, get_master_addr,
                                 get_node_rank, get_world_size)

__all__ = ["RedisStore", "start_redis_server_cli"]

LOGGER = logging.getLogger(__name__)

#: Seconds a new redis-server may take to accept connections before starting fails.
START_TIMEOUT_S = 30.0
#: Seconds a client keeps retrying to reach a server before giving up.
CONNECT_TIMEOUT_S = 30.0
#: Seconds one Redis command may take by default (the socket timeout of every call on a
#: server; ``RedisStore(timeout=...)`` overrides it).
COMMAND_TIMEOUT_S = 30.0
#: Seconds a server that let a call time out is treated as down (calls fail at once).
DOWN_RETRY_S = 300.0
#: Invalid values reported one by one before the rest are logged at debug level only.
MAX_INVALID_WARNINGS = 10

_host_ip = None
# The servers RedisStore(hosts=None) bootstrapped for this process, one per node, in node
# order: [{"host": ..., "port": ...}, ...].
_global_redis_servers: List[Dict[str, Union[str, int]]] = []
# redis-server processes started by this process: port -> (pid of the starter, Popen).
_children: Dict[int, tuple] = {}
_children_lock = threading.Lock()
_atexit_registered = False
# Whether the bootstrapped servers listen beyond loopback (shared across hosts), and whether
# the job spans hosts.
_global_shared = False
_global_spans_hosts = False
# The key the cache's HMACs and passwords derive from: the job secret's 32 bytes, else rank
# 0's random key; drawn or shared once per process.
_job_root: Optional[bytes] = None
_invalid_reported = 0

# Fixed labels of the keys derived from the job's key (HMAC-SHA256(key, label)).
_LABEL_VALUE_KEY = b"bagua-c redis cache: value hmac key v1"
_LABEL_PASSWORD = b"bagua-c redis cache: server password v1"
# A stored value: this prefix, the 32-byte HMAC, then the payload.
_MAGIC = b"BGC1"
_SEAL_BYTES = len(_MAGIC) + hashlib.sha256().digest_size


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


# What a server that is not (yet, or any more) reachable raises.
_UNREACHABLE = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)


def start_redis_server_cli(port, capacity, *args, bind="127.0.0.1", timeout=None,
                           password=None):
    """Starts a redis-server on ``port`` as a child of this process and returns its
    ``subprocess.Popen`` once it accepts connections.

    The server keeps nothing on disk (no snapshots, no append-only file) and evicts random
    keys once it holds ``capacity`` bytes. It stops when this process exits. Before it is
    reported started, the server answering on ``port`` is checked to be this child (its
    ``INFO server`` process id, and the child still alive): a port that another process holds
    is an error, not a server.

    Args:
        port (int): TCP port to listen on.
        capacity (int): memory limit in bytes (redis ``maxmemory``).
        *args (str): further redis-server options, e.g. ``"--maxclients 100"``.
        bind (str): addresses to listen on, separated by spaces. Default: loopback only.
            Redis's protected mode stays on.
        timeout (float): seconds to wait for the server to accept connections. Default:
            ``START_TIMEOUT_S`` (30).
        password (str): the password clients must give (redis ``requirepass``), passed on
            the server's standard input, never its command line. Default: none, which is
            accepted on loopback only.

    Raises:
        FileNotFoundError: redis-server is not installed.
        ValueError: a bad port or capacity, or a non-loopback ``bind`` without a password.
        RuntimeError: the server exited (e.g. the port is in use), another process answers on
            the port, or it did not accept connections within ``timeout``.
    """
    global _atexit_registered
    port = int(port)
    if not 0 < port < 65536:
        raise ValueError(f"port must be between 1 and 65535, not {port}")
    if int(capacity) < 0:
        raise ValueError(f"capacity must be a non-negative number of bytes, not {capacity}")
    if password is not None and not re.fullmatch(r"[0-9A-Za-z_.:+/=-]{16,512}", password):
        raise ValueError("password must be 16 to 512 characters of [0-9A-Za-z_.:+/=-]")
    if password is None and not all(_is_loopback(h) for h in bind.split()):
        raise ValueError(f"bind={bind!r} reaches beyond loopback: a server others can reach "
                         "needs a password (password=...)")
    timeout = START_TIMEOUT_S if timeout is None else float(timeout)
    # "-": the configuration starts with what the server reads on its standard input (the
    # password: a command line is readable by every user of the host).
    cmd = [_find_redis_server(), "-",
           "--port", str(port),
           "--bind", *bind.split(),
           "--protected-mode", "yes",
           "--maxmemory", str(int(capacity)),
           "--maxmemory-policy", "allkeys-random",
           "--appendonly", "no",
           "--save", "",
           "--loglevel", "warning"]
    # Each extra argument may be "--option value" in one string, as upstream Bagua passes
    # them: redis-server itself splits such arguments.
    cmd += [str(a) for a in args]
    # Last, so that no extra argument can turn the server into a daemon we cannot stop.
    cmd += ["--daemonize", "no"]
    log = tempfile.TemporaryFile()
    LOGGER.debug("starting redis-server: %s", cmd)
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                            preexec_fn=_die_with_parent, cwd=tempfile.gettempdir())
    with _children_lock:
        _children[port] = (os.getpid(), proc)
        if not _atexit_registered:
            atexit.register(_stop_children)
            _atexit_registered = True
    client = redis.Redis(host="127.0.0.1", port=port, password=password,
                         socket_connect_timeout=1, socket_timeout=1)
    deadline = time.monotonic() + timeout

    def exited():
        log.seek(0)
        output = log.read().decode(errors="replace").strip()[-2000:]
        hint = (f"; port {port} is already in use by another process"
                if "in use" in output else "")
        return RuntimeError(f"redis-server on port {port} exited with code "
                            f"{proc.returncode} at start{hint}: {output or '(no output)'}")

    try:
        try:
            proc.stdin.write(f"requirepass {password}\n".encode() if password else b"")
            proc.stdin.close()
        except BrokenPipeError:
            pass  # it exited at once: reported below
        while True:
            if proc.poll() is not None:
                raise exited()
            try:
                answering = client.ping() and int(client.info("server")["process_id"])
            except _UNREACHABLE:
                answering = None
            except (redis.exceptions.RedisError, KeyError, TypeError, ValueError) as err:
                # Something answers on the port, but not as our server would.
                answering = f"a server that answered {err!r}"
            if answering == proc.pid and proc.poll() is None:
                return proc
            if answering is not None:
                if proc.poll() is not None:
                    raise exited()
                who = answering if isinstance(answering, str) else f"pid {answering}"
                raise RuntimeError(
                    f"port {port} is already in use by another process: the server "
                    f"answering there ({who}) is not the redis-server started (pid "
                    f"{proc.pid})")
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


def _start_local_server(capacity, bind, password):
    """Starts this node's server on a free port, trying another port when the one picked is
    taken in between; returns the port."""
    last = None
    for _ in range(3):
        port = find_free_network_port()
        try:
            start_redis_server_cli(port, capacity, bind=bind, password=password)
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


def _gather_bytes(fields: List[bytes], width: int) -> List[List[bytes]]:
    """Every rank's ``fields`` (byte strings of at most ``width`` bytes each), in rank order,
    over Bagua's default group (the exchange that shares the servers' addresses)."""
    row = torch.zeros(len(fields) * (1 + width), dtype=torch.int64)
    for i, field in enumerate(fields):
        at = i * (1 + width)
        row[at] = len(field)
        if field:
            row[at + 1:at + 1 + len(field)] = torch.tensor(list(field), dtype=torch.int64)
    world = get_world_size()
    rows = torch.empty(world * row.numel(), dtype=torch.int64)
    communication.allgather(row, rows)
    result = []
    for r in rows.view(world, -1).tolist():
        result.append([bytes(r[i * (1 + width) + 1:i * (1 + width) + 1 + r[i * (1 + width)]])
                       for i in range(len(fields))])
    return result


def _job_secret() -> Optional[bytes]:
    """The job secret's 32 bytes (BAGUA_JOB_SECRET), or None when the job has none."""
    value = _C.param_get("BAGUA_JOB_SECRET")
    if not value:
        return None
    if not re.fullmatch(r"[0-9a-fA-F]{64}", value):
        # The value itself is never shown.
        raise ValueError(f"BAGUA_JOB_SECRET is not accepted ({len(value)} characters): "
                         "expected exactly 64 hex digits (the job's 32-byte key, which "
                         "bagua-launch sets)")
    return bytes.fromhex(value)


def _require_group(what):
    world = get_world_size()
    if world > 1 and not communication.is_initialized():
        raise RuntimeError(
            f"{what} in a job of {world} ranks without BAGUA_JOB_SECRET shares a random key "
            "(and, with hosts=None, the servers' addresses) over Bagua: call "
            "bagua.torch_api.init_process_group() first, or set BAGUA_JOB_SECRET (64 hex "
            "digits; bagua-launch sets it)")


def _host_identity() -> bytes:
    """16 bytes naming this host's kernel and network namespace: ranks with the same one
    share a loopback interface."""
    parts = []
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            parts.append(f.read().strip())
    except OSError:
        parts.append(socket.gethostname())
    try:
        parts.append(str(os.stat("/proc/self/ns/net").st_ino))
    except OSError:
        parts.append(get_host_ip())
    return hashlib.sha256("|".join(parts).encode()).digest()[:16]


def _shared_root() -> bytes:
    """The job's cache key: the job secret, else a random key, rank 0's in a job of several
    ranks (a collective there, the first time in a process)."""
    global _job_root
    if _job_root is None:
        secret = _job_secret()
        if secret is not None:
            _job_root = secret
        elif get_world_size() == 1:
            _job_root = os.urandom(32)
        else:
            _require_group("RedisStore")
            _job_root = _gather_bytes([os.urandom(32)], 32)[0][0]
    return _job_root


def _derive(root: bytes, label: bytes) -> bytes:
    return hmac.new(root, label, hashlib.sha256).digest()


def _value_key(root: bytes) -> bytes:
    """The key of the values' HMACs."""
    return _derive(root, _LABEL_VALUE_KEY)


def _password(root: bytes) -> str:
    """The password of the servers started with ``hosts=None`` (never the key itself)."""
    return _derive(root, _LABEL_PASSWORD).hex()


def _plan(spans_hosts, cluster_mode, have_secret, host):
    """``(bind, announced address, shared)`` of this node's server: beyond loopback only when
    the job spans hosts and ``cluster_mode`` shares every server with every rank."""
    if not (spans_hosts and cluster_mode):
        return "127.0.0.1", "127.0.0.1", False
    if not have_secret:
        raise RuntimeError(
            "RedisStore(hosts=None, cluster_mode=True) in a job that spans hosts serves the "
            "cache to every host, which needs BAGUA_JOB_SECRET (64 hex digits, the job "
            "secret bagua-launch sets) to derive the servers' password and the values' HMAC "
            "key; accepted: set BAGUA_JOB_SECRET, or pass cluster_mode=False for one cache "
            "per node on a server bound to loopback only")
    return f"127.0.0.1 {host}", host, True


def _is_bootstrapped():
    return len(_global_redis_servers) > 0


def bootstrap_redis_server(capacity_per_node, cluster_mode=True):
    """Starts a Redis server on each node (by its local rank 0) and returns every node's
    ``{"host", "port"}`` in node order, the same list on every rank.

    The servers listen on loopback only, unless the job spans hosts and ``cluster_mode``
    shares them with every rank; then they also listen on the node's address, which needs
    ``BAGUA_JOB_SECRET`` (RuntimeError without it). They always require the password
    derived from the job's key.

    A collective in a job of several ranks: every rank calls it, after
    :func:`bagua.torch_api.init_process_group`. Later calls in the same process return the
    servers of the first one.
    """
    global _global_redis_servers, _global_shared, _global_spans_hosts, _job_root
    world = get_world_size()
    if _is_bootstrapped():
        if cluster_mode and _global_spans_hosts and not _global_shared:
            raise RuntimeError(
                "RedisStore(hosts=None, cluster_mode=True): this process's servers were "
                "started for cluster_mode=False, bound to loopback, and the job spans hosts, "
                "so other hosts cannot reach them; use cluster_mode=False, or call "
                "redis_store.shutdown_redis_server() on every rank first")
        LOGGER.debug("the local redis server is already running")
        return _global_redis_servers
    if world > 1 and not communication.is_initialized():
        raise RuntimeError(
            f"RedisStore(hosts=None) in a job of {world} ranks starts one Redis server per "
            "node and shares their addresses over Bagua: call "
            "bagua.torch_api.init_process_group() first")
    secret = _job_secret()
    if world == 1:
        spans_hosts = False
        root = _shared_root()
    else:
        # Which ranks share a host, and rank 0's random key when the job has no secret (the
        # secret itself never travels).
        offer = b"" if secret is not None else (_job_root or os.urandom(32))
        rows = _gather_bytes([_host_identity(), offer], 32)
        spans_hosts = len({r[0] for r in rows}) > 1
        root = secret if secret is not None else rows[0][1]
        _job_root = root
    host = get_host_ip() if spans_hosts and cluster_mode else "127.0.0.1"
    # Raised on every rank alike (the job has a secret or not), before any server starts: no
    # rank waits for the others.
    bind, host, shared = _plan(spans_hosts, cluster_mode, secret is not None, host)
    hostinfo, error = None, None
    if get_local_rank() == 0:
        try:
            if shared and _is_loopback(host):
                raise RuntimeError(
                    "RedisStore(hosts=None, cluster_mode=True) in a job that spans hosts: "
                    f"this node's address towards MASTER_ADDR ({get_master_addr()}) is {host}, "
                    "which other hosts cannot reach; set MASTER_ADDR to an address of rank "
                    "0's host")
            port = _start_local_server(capacity_per_node, bind, _password(root))
            hostinfo = {"host": host, "port": port}
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
    _global_shared, _global_spans_hosts = shared, spans_hosts
    return _global_redis_servers


def shutdown_redis_server():
    """Stops this node's bootstrapped Redis server."""
    global _global_redis_servers
    if not _is_bootstrapped():
        return
    info = _global_redis_servers[get_node_rank() % len(_global_redis_servers)]
    _RedisStore(host=info["host"], port=info["port"], managed=True, connect=False,
                password=_password(_shared_root())).shutdown()


class RedisStore(ClusterStore):
    """A distributed key-value store on Redis servers, with the
    :class:`~bagua.torch_api.contrib.utils.store.Store` methods (:meth:`set`, :meth:`get`,
    :meth:`mset`, :meth:`mget`, ...).

    Every value is stored with an HMAC over its key and payload (the key derived from
    ``BAGUA_JOB_SECRET``, else a random key of the job); :meth:`get` and :meth:`mget` return
    None, with a warning naming the key, for a value whose HMAC does not match (one this job
    did not write). Values written by other jobs, or by other programs, are misses.

    Args:
        hosts (List[Dict[str, str]]): the Redis servers, e.g. ``[{"host": "192.168.1.0",
            "port": "7000"}, {"host": "192.168.1.1", "port": "7000"}]``. With ``None`` a new
            Redis server is started on each node (by its local rank 0; a collective, after
            ``init_process_group`` when the job has several ranks). It listens on loopback
            only, unless the job spans hosts and ``cluster_mode`` is True: then it also
            listens on the node's address, which needs ``BAGUA_JOB_SECRET``. It requires a
            password derived from the job's key, and stops when the job ends.
        cluster_mode (bool): if True, entries are sharded over all servers; otherwise the
            workers of node ``n`` use server ``n % len(hosts)`` only (with ``hosts=None``:
            their node's own, on loopback). Default: True.
        capacity_per_node (int): memory limit in bytes of the servers started here; old
            entries are evicted (at random) beyond it. Default: 100 GiB.
        password (str): the password of the servers given in ``hosts``. Default: none.
        timeout (float): seconds one call on a server may take (its socket timeout). A
            server that lets a call time out is treated as down for ``DOWN_RETRY_S``
            seconds: calls on it raise
            :class:`~bagua.torch_api.contrib.utils.store.StoreUnavailableError` at once.
            Default: ``COMMAND_TIMEOUT_S`` (30).

    In a job of several ranks without ``BAGUA_JOB_SECRET``, the first store of a process is
    a collective (rank 0's random key is shared over Bagua): every rank builds it, after
    ``init_process_group``.

    .. note::
        The stores of one process built with ``hosts=None`` share the servers started by
        the first one. :attr:`capacity_per_node` applies to new servers only.
    """

    def __init__(
        self,
        hosts: Optional[List[Dict[str, str]]] = None,
        cluster_mode: bool = True,
        capacity_per_node: int = 107_374_182_400,
        password: Optional[str] = None,
        timeout: Optional[float] = None,
    ):
        timeout = COMMAND_TIMEOUT_S if timeout is None else float(timeout)
        if not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, not {timeout}")
        managed = hosts is None
        if managed:
            if password is not None:
                raise ValueError("password applies to the servers given in hosts; the servers "
                                 "started with hosts=None get one derived from the job's key")
            LOGGER.info("bootstrapping a local redis server")
            hosts = bootstrap_redis_server(capacity_per_node, cluster_mode)
            root = _shared_root()
            password = _password(root)
        else:
            hosts = _check_hosts(hosts)
            LOGGER.info("connecting to redis servers %s", hosts)
            root = _shared_root()
        to_connect = list(hosts) if cluster_mode else [hosts[get_node_rank() % len(hosts)]]
        stores = [_RedisStore(host=h["host"], port=h["port"], managed=managed,
                              password=password, value_key=_value_key(root), timeout=timeout)
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


def _as_bytes(data) -> bytes:
    if isinstance(data, bytes):
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    # As the Redis client stores them: text in UTF-8, numbers as their decimal text.
    return str(data).encode()


def _mac(value_key: bytes, key: bytes, payload) -> bytes:
    mac = hmac.new(value_key, len(key).to_bytes(8, "big"), hashlib.sha256)
    mac.update(key)
    mac.update(payload)
    return mac.digest()


def _seal(value_key: bytes, key, payload) -> bytes:
    """``payload`` as stored under ``key``: a prefix, the HMAC-SHA256 of the key and the
    payload, then the payload."""
    payload = _as_bytes(payload)
    return _MAGIC + _mac(value_key, _as_bytes(key), payload) + payload


def _unseal(value_key: bytes, key, stored) -> Optional[bytes]:
    """The payload of a value :func:`_seal` made for ``key``, or None when ``stored`` is not
    one (no prefix, or an HMAC that does not match)."""
    if not isinstance(stored, (bytes, bytearray)) or len(stored) < _SEAL_BYTES or \
            not stored.startswith(_MAGIC):
        return None
    view = memoryview(stored)
    tag = view[len(_MAGIC):_SEAL_BYTES]
    if not hmac.compare_digest(tag, _mac(value_key, _as_bytes(key), view[_SEAL_BYTES:])):
        return None
    return bytes(view[_SEAL_BYTES:])


class _RedisStore(Store):
    """One Redis server as a :class:`Store`; values sealed with ``value_key``."""

    def __init__(self, host, port, managed=False, connect=True, password=None,
                 value_key=b"", timeout=None):
        self.host = host
        self.port = int(port)
        self.managed = managed
        self.password = password
        self.value_key = value_key
        self.timeout = COMMAND_TIMEOUT_S if timeout is None else float(timeout)
        self._down_until = 0.0
        self.client = _create_redis_client(host, self.port, password, self.timeout)
        if connect:
            self._connect_with_retry(CONNECT_TIMEOUT_S)

    # A store travels to spawned data-loader workers without its client (a client holds
    # sockets and locks); the worker opens its own connection.
    def __getstate__(self):
        return {"host": self.host, "port": self.port, "managed": self.managed,
                "password": self.password, "value_key": self.value_key,
                "timeout": self.timeout}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._down_until = 0.0
        self.client = _create_redis_client(self.host, self.port, self.password, self.timeout)

    def _where(self):
        return f"{self.host}:{self.port}"

    def _connect_with_retry(self, timeout):
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.client.ping():
                    return
            except (redis.exceptions.AuthenticationError, redis.exceptions.ResponseError) \
                    as err:
                # Answered, but refused us: waiting longer will not help.
                hint = ("its password derives from the job's key: do all ranks have the same "
                        "BAGUA_JOB_SECRET?" if self.managed else
                        "a server that needs a password: RedisStore(hosts=..., password=...)")
                raise ConnectionError(f"the Redis server at {self._where()} refused the "
                                      f"connection: {err} ({hint})") from None
            except _UNREACHABLE as err:
                if time.monotonic() > deadline:
                    raise ConnectionError(f"could not connect to the Redis server at "
                                          f"{self._where()} within {timeout:g} s: "
                                          f"{err}") from None
            time.sleep(0.2)

    def _call(self, fn, *args):
        """``fn(*args)`` on the server, failing at once while it is marked down; a timeout
        marks it down."""
        if time.monotonic() < self._down_until:
            raise StoreUnavailableError(f"the Redis server at {self._where()} is treated as "
                                        "down (it let a call time out)")
        try:
            return fn(*args)
        except redis.exceptions.TimeoutError as err:
            self._down_until = time.monotonic() + DOWN_RETRY_S
            LOGGER.warning("the Redis server at %s did not answer within %g s (%s): treating "
                           "it as down for %g s; the cache misses on it meanwhile",
                           self._where(), self.timeout, err, DOWN_RETRY_S)
            raise StoreUnavailableError(f"the Redis server at {self._where()} did not answer "
                                        f"within {self.timeout:g} s") from err

    def _open(self, key, stored):
        global _invalid_reported
        if stored is None:
            return None
        payload = _unseal(self.value_key, key, stored)
        if payload is None:
            _invalid_reported += 1
            if _invalid_reported <= MAX_INVALID_WARNINGS:
                LOGGER.warning(
                    "ignoring the value of key %r on the Redis server at %s: it does not "
                    "carry this job's HMAC (not written by this job); reading it as a miss%s",
                    key, self._where(),
                    "" if _invalid_reported < MAX_INVALID_WARNINGS else
                    " (further ones are logged at debug level)")
            else:
                LOGGER.debug("ignoring the value of key %r on the Redis server at %s: no "
                             "valid HMAC", key, self._where())
        return payload

    def set(self, key: str, value: Union[str, bytes]):
        self._call(self.client.set, key, _seal(self.value_key, key, value))

    def get(self, key: str) -> Optional[Union[str, bytes]]:
        return self._open(key, self._call(self.client.get, key))

    def num_keys(self) -> int:
        return self._call(self.client.dbsize)

    def clear(self):
        self._call(self.client.flushdb)

    def mset(self, dictionary: Dict[str, Union[str, bytes]]):
        if dictionary:
            self._call(self.client.mset, {k: _seal(self.value_key, k, v)
                                          for k, v in dictionary.items()})

    def mget(self, keys: List[str]) -> List[Optional[Union[str, bytes]]]:
        if not keys:
            return []
        return [self._open(k, v) for k, v in zip(keys, self._call(self.client.mget, keys))]

    def status(self) -> bool:
        try:
            return self._call(self.client.ping)
        except StoreUnavailableError:
            return False

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
            except _UNREACHABLE:
                pass  # the server closes the connection as it stops, or was already gone
        # A later RedisStore(hosts=None) in this process starts a new server.
        _global_redis_servers = []


def _create_redis_client(host, port, password=None, timeout=None):
    # A server on this host is reached over loopback, which it always listens on.
    if _is_loopback(str(host)) or host == get_host_ip():
        host = "127.0.0.1"
    timeout = COMMAND_TIMEOUT_S if timeout is None else float(timeout)
    return redis.Redis(host=host, port=int(port), password=password,
                       socket_connect_timeout=min(timeout, 10.0), socket_timeout=timeout)
