"""The store ``torch.distributed`` is initialised with when bagua-launch started the job.

torch's ``env://`` set-up makes rank 0 start a ``TCPStore`` that listens on every interface
without authentication for the whole job (torch 1.13 cannot bind it to one address). Under
bagua-launch libbagua's bootstrap does not need that store: it is authenticated with the job's
secret. So when every rank of the job runs on this host, the ranks first build libbagua's
communicator, rank 0 creates a private directory (mode 0700) and broadcasts its path over
that communicator, and every rank opens a ``FileStore`` in it; Gloo is pinned to the loopback
interface. The job then opens no listener outside loopback for ``torch.distributed``, and
nobody else can read or write its store. A job that spans hosts still uses ``TCPStore``
(docs/security.md says so).
"""

import atexit
import os
import shutil
import tempfile

import torch

from bagua import _C

#: The interface Gloo is pinned to on a one-host job.
LOOPBACK = "lo"


def private_file_store(comm, world):
    """Returns a ``torch.distributed.FileStore`` for ``world`` ranks in a directory rank 0 of
    ``comm`` creates (0700) and removes when its process exits. Collective over ``comm``."""
    size = torch.zeros(1, dtype=torch.int64)
    if comm.rank == 0:
        where = tempfile.mkdtemp(prefix="bagua-store-")
        atexit.register(shutil.rmtree, where, True)
        payload = torch.frombuffer(bytearray(os.fsencode(where)), dtype=torch.uint8)
        size[0] = payload.numel()
    comm.broadcast(size.data_ptr(), size.data_ptr(), 1, _C.I64, 0)
    if comm.rank != 0:
        payload = torch.empty(int(size[0]), dtype=torch.uint8)
    comm.broadcast(payload.data_ptr(), payload.data_ptr(), payload.numel(), _C.U8, 0)
    where = os.fsdecode(payload.numpy().tobytes())
    import torch.distributed as dist
    return dist.FileStore(os.path.join(where, "store"), world)


def pin_gloo_to_loopback():
    """Makes Gloo listen on the loopback interface unless the user chose one
    (GLOO_SOCKET_IFNAME, which torch reads when it creates the Gloo group)."""
    if "GLOO_SOCKET_IFNAME" not in os.environ and os.path.isdir(f"/sys/class/net/{LOOPBACK}"):
        os.environ["GLOO_SOCKET_IFNAME"] = LOOPBACK

