"""Worker environment, read through libbagua's parameter registry.

bagua-launch and torchrun both set RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
MASTER_ADDR and MASTER_PORT; libbagua's registry (common/params.def) is the one place that
reads and validates them, so the Python layer asks it instead of os.environ.
"""

from bagua import _C

# In an elastic job (bagua.torch_api.elastic) the rank and world size change with the rounds:
# the default group's communicator, which always resolves to the current round's, answers.
_live_comm = None


def _int(name, default):
    value = _C.param_get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not an integer") from None


def get_rank():
    """This worker's global rank (RANK, default 0; the current round's in an elastic job)."""
    if _live_comm is not None:
        return _live_comm.rank
    return max(_int("RANK", 0), 0)


def get_world_size():
    """Number of workers (WORLD_SIZE, default 1; the current round's in an elastic job)."""
    if _live_comm is not None:
        return _live_comm.size
    return max(_int("WORLD_SIZE", 1), 1)


def get_local_rank():
    """Rank of this worker on its node (LOCAL_RANK, default 0)."""
    if _live_comm is not None:
        return _live_comm.local_rank
    return max(_int("LOCAL_RANK", 0), 0)


def get_local_size():
    """Workers on this node (LOCAL_WORLD_SIZE, default 1)."""
    if _live_comm is not None:
        return _live_comm.local_size
    return max(_int("LOCAL_WORLD_SIZE", 1), 1)


def get_master_addr():
    """Address of rank 0 (MASTER_ADDR)."""
    return _C.param_get("MASTER_ADDR") or "127.0.0.1"


def get_bootstrap():
    """How libbagua's ranks find each other (BAGUA_BOOTSTRAP: env://, tcp://, etcd://)."""
    return _C.param_get("BAGUA_BOOTSTRAP") or "env://"


def get_node_rank():
    """Index of this worker's node (GROUP_RANK, which bagua-launch and torchrun set; else
    RANK // LOCAL_WORLD_SIZE, as upstream computes it)."""
    value = _C.param_get("GROUP_RANK")
    if value not in (None, ""):
        return _int("GROUP_RANK", 0)
    return get_rank() // get_local_size()


def get_default_bucket_size():
    """libbagua's bucket size in bytes (BAGUA_BUCKET_SIZE through the registry)."""
    return _int("BAGUA_BUCKET_SIZE", 10 * 1024 * 1024)


def find_free_network_port():
    """A TCP port free on every interface now, below the ephemeral range where possible
    (libbagua's picker: port 0's pick races with outgoing connections)."""
    return _C.spare_port("")
