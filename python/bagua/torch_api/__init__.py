"""The PyTorch front end of Bagua-C, with upstream Bagua's ``bagua.torch_api`` names.

Typical use (CPU tensors)::

    import bagua.torch_api as bagua
    bagua.init_process_group()
    bagua.allreduce_inplace(tensor, op=bagua.ReduceOp.AVG)
"""

from bagua._C import BaguaError
from bagua.torch_api import (
    algorithms, checkpoint, communication, contrib, data_parallel, elastic, utils)
from bagua.torch_api.communication import (
    BaguaProcessGroup, ReduceOp, allgather, allgather_inplace, allreduce, allreduce_inplace,
    alltoall, alltoall_inplace, alltoall_v, alltoall_v_inplace, barrier, broadcast, gather,
    gather_inplace, get_backend, get_default_group, init_process_group, is_initialized,
    new_group, recv, reduce, reduce_inplace, reduce_scatter, reduce_scatter_inplace, scatter,
    scatter_inplace, send)
from bagua.torch_api.distributed import BaguaModule  # importing it adds Module.with_bagua
from bagua.torch_api.env import get_local_rank, get_local_size, get_rank, get_world_size

__all__ = [
    "BaguaError", "algorithms", "checkpoint", "communication", "contrib", "data_parallel",
    "elastic", "utils",
    "BaguaModule",
    "BaguaProcessGroup", "ReduceOp", "allgather", "allgather_inplace", "allreduce",
    "allreduce_inplace", "alltoall", "alltoall_inplace", "alltoall_v", "alltoall_v_inplace",
    "barrier", "broadcast", "gather", "gather_inplace", "scatter_inplace",
    "get_default_group", "init_process_group", "is_initialized", "new_group", "recv", "reduce",
    "reduce_inplace", "reduce_scatter", "reduce_scatter_inplace", "scatter", "send",
    "get_local_rank", "get_local_size", "get_rank", "get_world_size", "get_backend",
]
