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

