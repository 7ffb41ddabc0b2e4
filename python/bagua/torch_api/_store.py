"""The store ``torch.distributed`` is initialised with when bagua-launch started the job.

torch's ``env://`` set-up makes rank 0 start a ``TCPStore`` that listens on every interface
without authentication for the whole job (torch 1.13 cannot bind it to one address). Under
bagua-launch libbagua's bootstrap does not need that store: it is authenticated with the job's
secret. So when every rank of the job runs on this host, the ranks first build libbagua's
communicator, rank 0 creates a private directory (mode 0700) and broadcasts its path over
that communicator, and every rank opens a ``FileStore`` in it; Gloo is pinned to the loopback
interface. The job then opens no listener outside loopback for ``torch.distributed``, and
nobody else can read or write its store.

A bagua-launch job that spans hosts has no directory every rank can see, but it has its etcd:
``EtcdStore`` keeps torch's store in the job's etcd (libbagua's ``bagua_store_*``, keys under
the round's own prefix), so no rank opens a store listener at all. Under torchrun (``env://``)
the store is torchrun's own.
"""

import atexit
import datetime
import os
import shutil
import subprocess
import sys
import tempfile
import warnings

import torch.distributed as dist

from bagua import _C


#: The interface Gloo is pinned to on a one-host job.
LOOPBACK = "lo"


def private_file_store(comm, world):
    """Returns a ``torch.distributed.FileStore`` for ``world`` ranks in a directory rank 0 of
    ``comm`` creates (0700) and that is removed when its process ends (normally or by a
    signal; not when a child forked from it exits). Collective over ``comm``."""
    import torch.distributed as dist

    from bagua.torch_api._primitives import broadcast_object
    where = None
    if comm.rank == 0:
        where = private_directory()
    where = broadcast_object(where, 0, comm=comm)
    return dist.FileStore(os.path.join(where, "store"), world)


def private_directory():
    """Creates a directory (0700, ``bagua-store-*`` in the temporary directory) that is
    removed when this process ends: at a normal exit, and by a watcher process when it is
    ended by a signal (SIGTERM, SIGKILL). A child forked from it never removes it (see
    ``remove_at_exit``)."""
    where = tempfile.mkdtemp(prefix="bagua-store-")
    remove_at_exit(where)
    return where


# Directories to remove at exit, each with the pid of the process that created it: a child
# forked by that process inherits this list and its atexit handlers, and must not remove the
# job's store under the parent (the parent's next FileStore wait would never end).
_owned = []
_atexit_installed = False
# The write ends of the watchers' pipes: held open for the life of the process.
_watcher_pipes = []

# The watcher reads its stdin, a pipe whose write end only its owner (and children forked
# from it) holds, until end of file: the owner has ended, however. Then it removes the
# directory. It runs in its own session, so the signal that ends the owner's process group
# (bagua-agent stops a worker's group) does not end it before it has cleaned up.
_WATCHER = ("import os, shutil, sys\n"
            "while os.read(0, 4096):\n"
            "    pass\n"
            "shutil.rmtree(sys.argv[1], ignore_errors=True)\n")


def remove_at_exit(path):
    """Removes ``path`` when this process (the one calling this, not a child forked from it)
    ends: at once at a normal exit (atexit), and through a watcher process when it is ended by
    a signal, so that SIGTERM keeps its default, immediate action (a Python handler would
    wait for a blocking libbagua call to return first) and SIGKILL leaves nothing behind."""
    global _atexit_installed
    _owned.append((os.getpid(), path))
    if not _atexit_installed:
        atexit.register(_remove_owned)
        _atexit_installed = True
    _watch(path)


def _watch(path):
    read_end, write_end = os.pipe()
    try:
        subprocess.Popen([sys.executable, "-c", _WATCHER, path], stdin=read_end,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    except OSError as e:
        os.close(write_end)
        warnings.warn(f"cannot start the process that removes {path} should this process be "
                      f"killed ({e}); it is still removed at a normal exit")
        return
    finally:
        os.close(read_end)
    _watcher_pipes.append(write_end)


def _remove_owned():
    """Removes the directories this very process registered; a forked child removes none."""
    me = os.getpid()
    for pid, path in list(_owned):
        if pid == me:
            shutil.rmtree(path, ignore_errors=True)
            _owned.remove((pid, path))


def pin_gloo_to_loopback():
    """Makes Gloo listen on the loopback interface unless the user chose one
    (GLOO_SOCKET_IFNAME, which torch reads when it creates the Gloo group)."""
    if "GLOO_SOCKET_IFNAME" not in os.environ and os.path.isdir(f"/sys/class/net/{LOOPBACK}"):
        os.environ["GLOO_SOCKET_IFNAME"] = LOOPBACK


class EtcdStore(dist.Store):
    """A ``torch.distributed.Store`` in the job's etcd (``bagua._C.Store``): what
    ``torch.distributed``'s set-up and Gloo's rendezvous need, with no listener of its own.
    Each call is one or a few etcd requests; ``get`` and ``wait`` wait up to the store's
    timeout (``set_timeout``, default 300 s) for another rank's key, then raise."""

    def __init__(self, endpoints, job_id, round_, timeout=datetime.timedelta(seconds=300),
                 request_timeout_ms=10000):
        super().__init__()
        self._s = _C.Store(endpoints, job_id, int(round_), int(request_timeout_ms))
        self._wait_ms = int(timeout.total_seconds() * 1000)

    @staticmethod
    def _bytes(value):
        return value.encode() if isinstance(value, str) else bytes(value)

    def set_timeout(self, timeout):
        self._wait_ms = int(timeout.total_seconds() * 1000)

    def set(self, key, value):
        self._s.set(key, self._bytes(value))

    def get(self, key):
        return self._s.get(key, self._wait_ms)

    def add(self, key, value):
        return self._s.add(key, int(value))

    def compare_set(self, key, expected_value, desired_value):
        return self._s.compare_set(key, self._bytes(expected_value), self._bytes(desired_value))

    def wait(self, keys, timeout=None):
        wait_ms = self._wait_ms if timeout is None else int(timeout.total_seconds() * 1000)
        for key in keys:
            self._s.get(key, wait_ms)

    def check(self, keys):
        return all(self._s.check(key) for key in keys)

    def delete_key(self, key):
        return self._s.delete(key)

    def num_keys(self):
        return self._s.count()


def job_etcd_store():
    """The job's ``EtcdStore`` when this worker was started by bagua-agent (the etcd endpoints,
    job id and round are in its environment), else None."""
    endpoints = _C.param_get("BAGUA_RDZV_ENDPOINT")
    job = _C.param_get("BAGUA_JOB_ID")
    round_ = int(_C.param_get("BAGUA_ROUND") or -1)
    if not endpoints or not job or round_ < 0:
        return None
    return EtcdStore(endpoints, job, round_)
