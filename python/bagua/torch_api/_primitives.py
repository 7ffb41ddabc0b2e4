"""The communication primitives of ``bagua.torch_api.communication`` (upstream's names and
arguments; that module re-exports them): each checks its arguments with the helpers there,
resolves the communicator (``_resolve``) and moves the data through libbagua's communicator
(CPU tensors) or its NCCL twin (CUDA tensors, ``_data``)."""

import math
import pickle

import torch

from bagua import _C
from bagua._C import BaguaError
from bagua.torch_api import _cuda
from bagua.torch_api._checks import (
    _DTYPE_OF_CODE, _DTYPES, ReduceOp, _check, _count_arg, _data, _fold, _int_list, _overlap,
    _parse_op, _peer_arg, _rank_arg, _same_dtype)


def _resolve(comm):
    """The ``bagua._C.Comm`` that ``comm`` names, or None when this rank is not in it.
    bagua.torch_api.communication, which holds the process groups and imports this module,
    puts its own resolver here when it is imported."""
    raise RuntimeError("bagua.torch_api.communication was not imported")


def allreduce(send_tensor, recv_tensor, op=ReduceOp.SUM, comm=None):
    """Reduces ``send_tensor`` over all ranks into ``recv_tensor`` (same size and dtype) on
    every rank."""
    c = _resolve(comm)
    if c is None:
        return
    code = _check(send_tensor, "send_tensor")
    _check(recv_tensor, "recv_tensor")
    _same_dtype(send_tensor, recv_tensor, "allreduce")
    if send_tensor.numel() != recv_tensor.numel():
        raise ValueError(f"allreduce: send_tensor has {send_tensor.numel()} elements, "
                         f"recv_tensor {recv_tensor.numel()}; they must be equal")
    op, op_code = _parse_op(op, send_tensor.dtype, "allreduce")
    b = _data(c, "allreduce", send_tensor, recv_tensor)
    n = send_tensor.numel()
    if op_code is None:
        rows = torch.empty(c.size * n, dtype=send_tensor.dtype, device=send_tensor.device)
        b.allgather(send_tensor.data_ptr(), rows.data_ptr(), n, code)
        recv_tensor.view(-1).copy_(_fold(rows.view(c.size, n), op))
        return
    b.allreduce(send_tensor.data_ptr(), recv_tensor.data_ptr(), n, code, op_code)


def allreduce_inplace(tensor, op=ReduceOp.SUM, comm=None):
    """The in-place version of :func:`allreduce`."""
    allreduce(tensor, tensor, op, comm)


def _coalesce(tensors, what):
    """The tensors grouped by dtype (in order of first appearance), after checks."""
    tensors = list(tensors)
    groups = {}
    for i, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{what}: tensors[{i}] must be a torch.Tensor, not "
                            f"{type(t).__name__}")
        if t.is_sparse:
            raise ValueError(f"{what}: tensors[{i}] must be dense")
        _cuda.check_device(t.device, f"{what}: tensors[{i}]")
        if t.dtype not in _DTYPES:
            raise TypeError(f"{what}: tensors[{i}] has dtype {t.dtype}; accepted: float32, "
                            "float16, bfloat16, float64, int32, int64, uint8")
        groups.setdefault(t.dtype, []).append(t)
    _cuda.call_device(tensors, what)
    return groups


def _unflatten(flat, tensors):
    offset = 0
    for t in tensors:
        t.copy_(flat[offset:offset + t.numel()].view_as(t))
        offset += t.numel()


def allreduce_coalesced_inplace(tensors, op=ReduceOp.SUM, comm=None):
    """Reduces each tensor of the list ``tensors`` over all ranks in place, with one
    collective per dtype over their concatenation. Every rank passes the same shapes and
    dtypes in the same order."""
    c = _resolve(comm)
    if c is None:
        return
    groups = _coalesce(tensors, "allreduce_coalesced_inplace")
    for dtype, ts in groups.items():
        _parse_op(op, dtype, "allreduce_coalesced_inplace")
    for ts in groups.values():
        flat = torch.cat([t.reshape(-1) for t in ts])
        allreduce(flat, flat, op, comm=c)
        _unflatten(flat, ts)


def broadcast(tensor, src=0, comm=None):
    """Copies rank ``src``'s ``tensor`` into every rank's ``tensor`` (same number of elements
    on all ranks)."""
    c = _resolve(comm)
    if c is None:
        return
    code = _check(tensor, "tensor")
    src = _rank_arg(c, src, "broadcast: src")
    b = _data(c, "broadcast", tensor)
    b.broadcast(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), code, src)


def broadcast_coalesced(tensors, src=0, comm=None):
    """Broadcasts each tensor of the list ``tensors`` from rank ``src``, with one collective
    per dtype over their concatenation."""
    c = _resolve(comm)
    if c is None:
        return
    groups = _coalesce(tensors, "broadcast_coalesced")
    src = _rank_arg(c, src, "broadcast_coalesced: src")
    for ts in groups.values():
        flat = torch.cat([t.reshape(-1) for t in ts])
        broadcast(flat, src, comm=c)
        _unflatten(flat, ts)


def broadcast_object(obj, src=0, comm=None):
    """Returns rank ``src``'s ``obj`` (pickled) on every rank of the communicator, e.g.
    ``state = broadcast_object(optimizer.state_dict(), 0)``. ``src`` is a rank of ``comm``.
    A rank outside ``comm`` gets its own ``obj`` back."""
    c = _resolve(comm)
    if c is None:
        return obj
    src = _rank_arg(c, src, "broadcast_object: src")
    size = torch.zeros(1, dtype=torch.int64)
    if c.rank == src:
        payload = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
        size[0] = payload.numel()
    c.broadcast(size.data_ptr(), size.data_ptr(), 1, _C.I64, src)
    if c.rank != src:
        payload = torch.empty(int(size[0]), dtype=torch.uint8)
    c.broadcast(payload.data_ptr(), payload.data_ptr(), payload.numel(), _C.U8, src)
    if c.rank == src:
        return obj
    return pickle.loads(payload.numpy().tobytes())


def _blocks(c, send_tensor, recv_tensor, what, recv_per_rank):
    """Checks a collective whose one side holds a block per rank; returns the dtype code."""
    code = _check(send_tensor, "send_tensor")
    _check(recv_tensor, "recv_tensor")
    _same_dtype(send_tensor, recv_tensor, what)
    n = c.size
    big, small = (recv_tensor, send_tensor) if recv_per_rank else (send_tensor, recv_tensor)
    if big.numel() != small.numel() * n:
        raise ValueError(f"{what}: {'recv' if recv_per_rank else 'send'}_tensor must hold "
                         f"world size ({n}) x {small.numel()} elements, not {big.numel()}")
    return code


def allgather(send_tensor, recv_tensor, comm=None):
    """Gathers every rank's ``send_tensor`` into ``recv_tensor`` (nranks x its size), block r
    from rank r."""
    c = _resolve(comm)
    if c is None:
        return
    code = _blocks(c, send_tensor, recv_tensor, "allgather", True)
    b = _data(c, "allgather", send_tensor, recv_tensor)
    b.allgather(send_tensor.data_ptr(), recv_tensor.data_ptr(), send_tensor.numel(), code)


def allgather_inplace(tensor, comm=None):
    """The in-place version of :func:`allgather`: this rank's block of ``tensor`` (nranks
    blocks) is block ``rank``."""
    c = _resolve(comm)
    if c is None:
        return
    code = _check(tensor, "tensor")
    if tensor.numel() % c.size:
        raise ValueError(f"allgather_inplace: {tensor.numel()} elements do not split into "
                         f"nranks ({c.size}) blocks")
    n = tensor.numel() // c.size
    b = _data(c, "allgather_inplace", tensor)
    block = tensor.view(-1)[c.rank * n:(c.rank + 1) * n].clone()
    b.allgather(block.data_ptr(), tensor.data_ptr(), n, code)


def reduce_scatter(send_tensor, recv_tensor, op=ReduceOp.SUM, comm=None):
    """Reduces ``send_tensor`` (nranks x ``recv_tensor``'s size) over all ranks; rank r
    receives the reduction of block r."""
    c = _resolve(comm)
    if c is None:
        return
    code = _blocks(c, send_tensor, recv_tensor, "reduce_scatter", False)
    op, op_code = _parse_op(op, send_tensor.dtype, "reduce_scatter")
    b = _data(c, "reduce_scatter", send_tensor, recv_tensor)
    n = recv_tensor.numel()
    if op_code is None:
        # Block r of every rank lands on rank r, which folds them.
        rows = torch.empty(c.size * n, dtype=send_tensor.dtype, device=send_tensor.device)
        b.alltoall(send_tensor.data_ptr(), rows.data_ptr(), n, code)
        recv_tensor.view(-1).copy_(_fold(rows.view(c.size, n), op))
        return
    b.reduce_scatter(send_tensor.data_ptr(), recv_tensor.data_ptr(), n, code, op_code)


def reduce_scatter_inplace(tensor, op=ReduceOp.SUM, comm=None):
    """The in-place version of :func:`reduce_scatter`: block ``rank`` of ``tensor`` (nranks
    blocks) receives its reduction; the other blocks are left as they were."""
    c = _resolve(comm)
    if c is None:
        return
    _check(tensor, "tensor")
    if tensor.numel() % c.size:
        raise ValueError(f"reduce_scatter_inplace: {tensor.numel()} elements do not split "
                         f"into nranks ({c.size}) blocks")
    n = tensor.numel() // c.size
    out = torch.empty(n, dtype=tensor.dtype, device=tensor.device)
    reduce_scatter(tensor, out, op, comm=c)
    tensor.view(-1)[c.rank * n:(c.rank + 1) * n].copy_(out)


def alltoall(send_tensor, recv_tensor, comm=None):
    """Block j of rank i's ``send_tensor`` lands in block i of rank j's ``recv_tensor``
    (both tensors hold nranks blocks of equal size)."""
    c = _resolve(comm)
    if c is None:
        return
    code = _check(send_tensor, "send_tensor")
    _check(recv_tensor, "recv_tensor")
    _same_dtype(send_tensor, recv_tensor, "alltoall")
    if send_tensor.numel() != recv_tensor.numel() or send_tensor.numel() % c.size:
        raise ValueError(f"alltoall: both tensors must hold the same number of elements, a "
                         f"multiple of nranks ({c.size}); they hold {send_tensor.numel()} and "
                         f"{recv_tensor.numel()}")
    b = _data(c, "alltoall", send_tensor, recv_tensor)
    if b is not c and _overlap(send_tensor, recv_tensor):
        send_tensor = send_tensor.clone()  # NCCL's alltoall cannot run in place
    b.alltoall(send_tensor.data_ptr(), recv_tensor.data_ptr(), send_tensor.numel() // c.size,
               code)


def alltoall_inplace(tensor, comm=None):
    """The in-place version of :func:`alltoall`."""
    alltoall(tensor, tensor, comm)


def _check_layout(tensor, counts, displs, what, tname, cname, dname):
    for j, (n, d) in enumerate(zip(counts, displs)):
        if d + n > tensor.numel():
            raise ValueError(f"{what}: {dname}[{j}]={d} + {cname}[{j}]={n} = {d + n} exceeds "
                             f"{tname}'s {tensor.numel()} elements")


def alltoall_v(send_tensor, send_counts, send_displs, recv_tensor, recv_counts, recv_displs,
               comm=None):
    """All-to-all with a different amount of data per pair of ranks.

    ``send_counts[j]`` elements from offset ``send_displs[j]`` of ``send_tensor`` go to rank
    j, which places them at offset ``recv_displs[i]`` of its ``recv_tensor`` (i: the
    sender). ``recv_counts[i]`` is the most this rank accepts from rank i (elements beyond
    what rank i sends are left as they were). Counts and displacements are in elements, one
    per rank (entries beyond nranks are ignored, as upstream). Every count and displacement
    is checked against the tensors before anything is sent; a sender whose count exceeds
    what its receiver accepts is a ValueError on every rank, raised before any data moves.
    """
    c = _resolve(comm)
    if c is None:
        return
    code = _check(send_tensor, "send_tensor")
    _check(recv_tensor, "recv_tensor")
    _same_dtype(send_tensor, recv_tensor, "alltoall_v")
    n = c.size
    sc = _int_list(send_counts, n, "alltoall_v: send_counts")
    sd = _int_list(send_displs, n, "alltoall_v: send_displs")
    rc = _int_list(recv_counts, n, "alltoall_v: recv_counts")
    rd = _int_list(recv_displs, n, "alltoall_v: recv_displs")
    _check_layout(send_tensor, sc, sd, "alltoall_v", "send_tensor", "send_counts",
                  "send_displs")
    _check_layout(recv_tensor, rc, rd, "alltoall_v", "recv_tensor", "recv_counts",
                  "recv_displs")
    _alltoall_v(c, code, send_tensor, sc, sd, recv_tensor, rc, rd, "alltoall_v")


def alltoall_v_inplace(tensor, counts, displs, comm=None):
    """The in-place version of :func:`alltoall_v`: ``counts[j]`` elements at ``displs[j]``
    go to rank j and are replaced by the ``counts[j]`` elements rank j sends back (so rank
    i's ``counts[j]`` must equal rank j's ``counts[i]``)."""
    c = _resolve(comm)
    if c is None:
        return
    code = _check(tensor, "tensor")
    n = c.size
    counts = _int_list(counts, n, "alltoall_v_inplace: counts")
    displs = _int_list(displs, n, "alltoall_v_inplace: displs")
    _check_layout(tensor, counts, displs, "alltoall_v_inplace", "tensor", "counts", "displs")
    _alltoall_v(c, code, tensor.clone(), counts, displs, tensor, counts, displs,
                "alltoall_v_inplace")


def _alltoall_v(c, code, send_t, sc, sd, recv_t, rc, rd, what):
    """Runs a checked all-to-all-v over send/recv pairs.

    libbagua has no all-to-all-v. Padding every block to the largest count and using its
    alltoall would be simple but would move nranks x the largest block per rank, however
    uneven the counts; point-to-point messages move exactly the data. First one small
    allgather of every rank's counts lets every rank check every pair (a sender's count
    must not exceed its receiver's) and agree on the error before any data moves; then rank
    r sends to r + k and receives from r - k for k = 1 .. nranks - 1. Sends and receives
    block, so within step k, whose pairs form cycles r -> r + k, ranks at even positions of
    their cycle send first and those at odd positions receive first: every cycle has a
    receiver first at position 1, so no cycle of ranks can all wait in send (with an odd
    cycle the last rank's send to position 0 completes once position 0 has sent).
    The counts go through ``c``; the data through :func:`_data`'s choice.
    """
    b = _data(c, what, send_t, recv_t)
    n, me = c.size, c.rank
    if n > 1:
        mine = torch.tensor(sc + rc, dtype=torch.int64)
        table = torch.empty(n * 2 * n, dtype=torch.int64)
        c.allgather(mine.data_ptr(), table.data_ptr(), 2 * n, _C.I64)
        rows = table.view(n, 2 * n).tolist()
        sent = [row[:n] for row in rows]
        for i in range(n):
            for j in range(n):
                if sent[i][j] > rows[j][n + i]:
                    raise ValueError(f"{what}: rank {i} sends {sent[i][j]} elements to rank "
                                     f"{j}, which accepts at most {rows[j][n + i]} from it "
                                     f"(its recv_counts[{i}])")
    else:
        sent = [sc]
        if sc[0] > rc[0]:
            raise ValueError(f"{what}: this rank sends itself {sc[0]} elements but accepts at "
                             f"most {rc[0]} (recv_counts[0])")
    src_flat, dst_flat = send_t.view(-1), recv_t.view(-1)
    if _overlap(send_t, recv_t):
        src_flat = src_flat.clone()
    k_self = sent[me][me]
    dst_flat[rd[me]:rd[me] + k_self].copy_(src_flat[sd[me]:sd[me] + k_self])
    for k in range(1, n):
        dst, src = (me + k) % n, (me - k) % n
        ns, nr = sent[me][dst], sent[src][me]
        g = math.gcd(n, k)
        pos, x = 0, me % g
        while x != me:
            x, pos = (x + k) % n, pos + 1
        out_part = src_flat[sd[dst]:sd[dst] + ns]
        in_part = dst_flat[rd[src]:rd[src] + nr]
        steps = [("send", ns), ("recv", nr)]
        if pos % 2:
            steps.reverse()
        for kind, count in steps:
            if count == 0:
                continue  # both ends know the count from the table: neither posts a message
            if kind == "send":
                b.send(out_part.data_ptr(), count, code, dst)
            else:
                b.recv(in_part.data_ptr(), count, code, src)


def reduce(send_tensor, recv_tensor, dst, op=ReduceOp.SUM, comm=None):
    """Reduces ``send_tensor`` over all ranks into ``recv_tensor`` on rank ``dst`` (both
    tensors of the same size and dtype on every rank, as upstream)."""
    c = _resolve(comm)
    if c is None:
        return
    code = _check(send_tensor, "send_tensor")
    _check(recv_tensor, "recv_tensor")
    _same_dtype(send_tensor, recv_tensor, "reduce")
    if send_tensor.numel() != recv_tensor.numel():
        raise ValueError(f"reduce: send_tensor has {send_tensor.numel()} elements, "
                         f"recv_tensor {recv_tensor.numel()}; they must be equal")
    dst = _rank_arg(c, dst, "reduce: dst")
    op, op_code = _parse_op(op, send_tensor.dtype, "reduce")
    b = _data(c, "reduce", send_tensor, recv_tensor)
    n = send_tensor.numel()
    if op_code is None:
        rows = torch.empty(c.size * n if c.rank == dst else 0, dtype=send_tensor.dtype,
                           device=send_tensor.device)
        b.gather(send_tensor.data_ptr(), rows.data_ptr() if c.rank == dst else 0, n, code, dst)
        if c.rank == dst:
            recv_tensor.view(-1).copy_(_fold(rows.view(c.size, n), op))
        return
    b.reduce(send_tensor.data_ptr(), recv_tensor.data_ptr(), n, code, op_code, dst)


def reduce_inplace(tensor, dst, op=ReduceOp.SUM, comm=None):
    """The in-place version of :func:`reduce`: ``tensor`` holds the result on ``dst``."""
    reduce(tensor, tensor, dst, op, comm)


def gather(send_tensor, recv_tensor, dst, comm=None):
    """Gathers every rank's ``send_tensor`` into ``recv_tensor`` (nranks x its size) on rank
    ``dst``, block r from rank r; ``recv_tensor`` is not used on other ranks."""
    c = _resolve(comm)
    if c is None:
        return
    code = _check(send_tensor, "send_tensor")
    dst = _rank_arg(c, dst, "gather: dst")
    if c.rank == dst:
        code = _blocks(c, send_tensor, recv_tensor, "gather", True)
    b = _data(c, "gather", send_tensor, recv_tensor if c.rank == dst else None)
    b.gather(send_tensor.data_ptr(), recv_tensor.data_ptr() if c.rank == dst else 0,
             send_tensor.numel(), code, dst)


def gather_inplace(tensor, count, dst, comm=None):
    """The in-place version of :func:`gather`: on ``dst``, ``tensor`` holds nranks x
    ``count`` elements and its own block ``dst`` stays in place; elsewhere ``tensor`` holds
    the ``count`` elements sent."""
    c = _resolve(comm)
    if c is None:
        return
    code = _check(tensor, "tensor")
    count = _count_arg(count, "gather_inplace: count")
    dst = _rank_arg(c, dst, "gather_inplace: dst")
    want = count * c.size if c.rank == dst else count
    if tensor.numel() != want:
        raise ValueError(f"gather_inplace: tensor must hold {want} elements on this rank "
                         f"({'nranks x count' if c.rank == dst else 'count'}), not "
                         f"{tensor.numel()}")
    b = _data(c, "gather_inplace", tensor)
    if c.rank == dst:
        block = tensor.view(-1)[dst * count:(dst + 1) * count].clone()
        b.gather(block.data_ptr(), tensor.data_ptr(), count, code, dst)
    else:
        b.gather(tensor.data_ptr(), 0, count, code, dst)


def scatter(send_tensor, recv_tensor, src, comm=None):
    """Block r of ``send_tensor`` (nranks x ``recv_tensor``'s size) on rank ``src`` lands in
    rank r's ``recv_tensor``; ``send_tensor`` is not used on other ranks."""
    c = _resolve(comm)
    if c is None:
        return
    code = _check(recv_tensor, "recv_tensor")
    src = _rank_arg(c, src, "scatter: src")
    if c.rank == src:
        code = _blocks(c, send_tensor, recv_tensor, "scatter", False)
    b = _data(c, "scatter", send_tensor if c.rank == src else None, recv_tensor)
    b.scatter(send_tensor.data_ptr() if c.rank == src else 0, recv_tensor.data_ptr(),
              recv_tensor.numel(), code, src)


def scatter_inplace(tensor, count, src, comm=None):
    """The in-place version of :func:`scatter`: on ``src``, ``tensor`` holds nranks x
    ``count`` elements (its own block stays in place); elsewhere ``tensor`` receives its
    ``count`` elements."""
    c = _resolve(comm)
    if c is None:
        return
    code = _check(tensor, "tensor")
    count = _count_arg(count, "scatter_inplace: count")
    src = _rank_arg(c, src, "scatter_inplace: src")
    want = count * c.size if c.rank == src else count
    if tensor.numel() != want:
        raise ValueError(f"scatter_inplace: tensor must hold {want} elements on this rank "
                         f"({'nranks x count' if c.rank == src else 'count'}), not "
                         f"{tensor.numel()}")
    b = _data(c, "scatter_inplace", tensor)
    if c.rank == src:
        scratch = torch.empty(count, dtype=tensor.dtype, device=tensor.device)
        b.scatter(tensor.data_ptr(), scratch.data_ptr(), count, code, src)
    else:
        b.scatter(0, tensor.data_ptr(), count, code, src)


# send/recv put a two-element header (element count, dtype code) before the data, so that a
# receiving tensor of another size or dtype is reported by recv instead of being overrun or
# misread: the byte stream between two ranks carries no sizes of its own. The header always
# goes through the CPU communicator (bounded waits, readable on the host at once); the data
# of CUDA tensors through the NCCL twin, matched in the same call order.

def send(tensor, dst, comm=None):
    """Sends ``tensor`` to rank ``dst`` (matched in call order with its :func:`recv`)."""
    c = _resolve(comm)
    if c is None:
        return
    code = _check(tensor, "tensor")
    dst = _peer_arg(c, dst, "send: dst")
    b = _data(c, "send", tensor, p2p=True)
    header = torch.tensor([tensor.numel(), code], dtype=torch.int64)
    c.send(header.data_ptr(), 2, _C.I64, dst)
    b.send(tensor.data_ptr(), tensor.numel(), code, dst)


def recv(tensor, src, comm=None):
    """Receives into ``tensor`` from rank ``src``; a message of another size or dtype than
    ``tensor`` is a ValueError (the message is consumed, so later ones stay in step)."""
    c = _resolve(comm)
    if c is None:
        return
    code = _check(tensor, "tensor")
    src = _peer_arg(c, src, "recv: src")
    b = _data(c, "recv", tensor, p2p=True)
    header = torch.empty(2, dtype=torch.int64)
    c.recv(header.data_ptr(), 2, _C.I64, src)
    count, sent_code = header.tolist()
    if count == tensor.numel() and sent_code == code:
        b.recv(tensor.data_ptr(), count, code, src)
        return
    sent_dtype = _DTYPE_OF_CODE.get(sent_code)
    if sent_dtype is None or count < 0:
        raise BaguaError(f"recv: the message header from rank {src} is corrupt ({count}, "
                         f"{sent_code}); was it sent by bagua.torch_api.send?")
    drain = torch.empty(count, dtype=sent_dtype, device=tensor.device)  # freed on return
    b.recv(drain.data_ptr(), count, sent_code, src)
    raise ValueError(f"recv: rank {src} sent {count} elements of {sent_dtype}; tensor holds "
                     f"{tensor.numel()} of {tensor.dtype}")


def barrier(comm=None):
    """Returns once every rank of the communicator has called it."""
    c = _resolve(comm)
    if c is None:
        return
    c.barrier()
