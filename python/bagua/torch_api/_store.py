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
import tempfile

import torch.distributed as dist

from bagua import _C


#: The interface Gloo is pinned to on a one-host job.
LOOPBACK = "lo"


def private_file_store(comm, world):
    """Returns a ``torch.distributed.FileStore`` for ``world`` ranks in a directory rank 0 of
    ``comm`` creates (0700) and removes when its process exits. Collective over ``comm``."""
    import torch.distributed as dist

    from bagua.torch_api.communication import broadcast_object
    where = None
    if comm.rank == 0:
        where = tempfile.mkdtemp(prefix="bagua-store-")
        atexit.register(shutil.rmtree, where, True)
    where = broadcast_object(where, 0, comm=comm)
    return dist.FileStore(os.path.join(where, "store"), world)


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
