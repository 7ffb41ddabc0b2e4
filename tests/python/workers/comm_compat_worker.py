"""Upstream's communication API under every group shape, against torch/numpy oracles; run on
4 ranks as 2 emulated nodes of 2 (rank r on node r // 2, local rank r % 2).

Group shapes: the default group (comm=None, the group itself, its raw bagua._C.Comm), the
even ranks (new_group), a single-rank group, ranks 1..3 from a torch.distributed group
(from_torch_group, an odd size), and the intra-/inter-node communicators. A rank outside a
group holds CommMember.NON_COMM_MEMBER and every primitive must leave its tensors alone.
Each rank's input is a deterministic function of (global rank, size, salt), so every rank
computes the expected result of the whole collective by itself. Then every bad argument
must raise before anything is communicated: the ranks stay in step, which a final
allreduce proves."""

import sys

import numpy as np
import torch
import torch.distributed as dist

import bagua.torch_api as bagua
from bagua.torch_api import communication as C
from bagua.torch_api.communication import CommMember, ReduceOp

DTYPES = [torch.float64, torch.int64, torch.float16]


def data(rank, n, dtype, salt=0):
    """Small integers, so sums and products are exact in every dtype used."""
    g = torch.Generator().manual_seed(1000 * rank + 17 * n + salt)
    return torch.randint(1, 4, (n,), generator=g).to(dtype)


def oracle(inputs, op, dtype):
    a = np.stack([t.to(torch.float64).numpy() for t in inputs])
    if op in (ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR):
        ints = np.stack([t.numpy() for t in inputs])
        fn = {ReduceOp.BAND: np.bitwise_and, ReduceOp.BOR: np.bitwise_or,
              ReduceOp.BXOR: np.bitwise_xor}[op]
        return torch.from_numpy(fn.reduce(ints, axis=0).astype(np.float64))
    r = {ReduceOp.SUM: a.sum(0), ReduceOp.MIN: a.min(0), ReduceOp.MAX: a.max(0),
         ReduceOp.PRODUCT: a.prod(0), ReduceOp.AVG: a.sum(0) / len(inputs)}[op]
    if op == ReduceOp.AVG and not dtype.is_floating_point:
        r = np.trunc(r)
    return torch.from_numpy(r)


def close(got, want, what):
    got = got.to(torch.float64).reshape(-1)
    want = want.to(torch.float64).reshape(-1)
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} vs {tuple(want.shape)}"
    if got.numel() and not torch.allclose(got, want, rtol=1e-2, atol=1e-2):
        i = int((got - want).abs().argmax())
        raise AssertionError(f"{what}: element {i} is {got[i].item()}, expected "
                             f"{want[i].item()}")


def ops_for(dtype):
    ops = [ReduceOp.SUM, ReduceOp.AVG, ReduceOp.MIN, ReduceOp.MAX, ReduceOp.PRODUCT]
    if not dtype.is_floating_point:
        ops += [ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR]
    return ops


def v_layout(members, kind):
    """alltoall_v counts (uneven, with zeros) and displacements (with gaps) of every group
    rank: counts[i][j] is what group rank i sends to j; gaps of one element between blocks."""
    n = len(members)
    if kind == "inplace":
        counts = [[(i + j) % 3 for j in range(n)] for i in range(n)]  # symmetric
    else:
        counts = [[(i + 2 * j + 1) % 3 for j in range(n)] for i in range(n)]
    displs = []
    for i in range(n):
        d, row = 1, []
        for j in range(n):
            row.append(d)
            d += max(counts[i][j], counts[j][i]) + 1
        displs.append(row)
    return counts, displs


def run_all(comm, members, me):
    """Every primitive on `comm` (a group of the global ranks `members`, in group order)."""
    n, i = len(members), members.index(me)
    for dt in DTYPES:
        for size in (0, 5, 33):
            inputs = [data(r, size, dt) for r in members]
            mine = inputs[i]
            for op in ops_for(dt):
                if dt == torch.float16 and op == ReduceOp.PRODUCT and size > 5:
                    continue
                out = torch.full((size,), 7, dtype=dt)
                bagua.allreduce(mine, out, op=op, comm=comm)
                close(out, oracle(inputs, op, dt), f"allreduce {op.name} {dt} n={size}")
                t = mine.clone()
                bagua.allreduce_inplace(t, op=op, comm=comm)
                close(t, oracle(inputs, op, dt), f"allreduce_inplace {op.name} {dt}")
                for dst in {0, n - 1}:
                    out = torch.full((size,), 7, dtype=dt)
                    bagua.reduce(mine, out, dst, op=op, comm=comm)
                    if i == dst:
                        close(out, oracle(inputs, op, dt), f"reduce {op.name} {dt} dst={dst}")
                    t = mine.clone()
                    bagua.reduce_inplace(t, dst, op=op, comm=comm)
                    if i == dst:
                        close(t, oracle(inputs, op, dt), f"reduce_inplace {op.name} {dt}")
                big = [data(r, size * n, dt, salt=1) for r in members]
                out = torch.full((size,), 7, dtype=dt)
                bagua.reduce_scatter(big[i], out, op=op, comm=comm)
                want = oracle(big, op, dt)
                close(out, want[i * size:(i + 1) * size], f"reduce_scatter {op.name} {dt}")
                t = big[i].clone()
                bagua.reduce_scatter_inplace(t, op=op, comm=comm)
                expect = big[i].to(torch.float64).clone()
                expect[i * size:(i + 1) * size] = want[i * size:(i + 1) * size]
                close(t, expect, f"reduce_scatter_inplace {op.name} {dt}")
            src = n - 1
            t = mine.clone()
            bagua.broadcast(t, src, comm=comm)
            close(t, inputs[src], f"broadcast {dt}")
            out = torch.zeros(size * n, dtype=dt)
            bagua.allgather(mine, out, comm=comm)
            close(out, torch.cat(inputs), f"allgather {dt}")
            t = torch.zeros(size * n, dtype=dt)
            t[i * size:(i + 1) * size] = mine
            bagua.allgather_inplace(t, comm=comm)
            close(t, torch.cat(inputs), f"allgather_inplace {dt}")
            for root in {0, n - 1}:
                out = torch.zeros(size * n, dtype=dt)
                bagua.gather(mine, out, root, comm=comm)
                if i == root:
                    close(out, torch.cat(inputs), f"gather {dt} dst={root}")
                t = torch.zeros(size * n, dtype=dt) if i == root else mine.clone()
                if i == root:
                    t[root * size:(root + 1) * size] = mine
                C.gather_inplace(t, size, root, comm=comm)
                close(t, torch.cat(inputs) if i == root else mine, f"gather_inplace {dt}")
                whole = data(members[root], size * n, dt, salt=2)
                out = torch.zeros(size, dtype=dt)
                bagua.scatter(whole if i == root else torch.empty(0, dtype=dt), out, root,
                              comm=comm)
                close(out, whole[i * size:(i + 1) * size], f"scatter {dt} src={root}")
                t = whole.clone() if i == root else torch.zeros(size, dtype=dt)
                C.scatter_inplace(t, size, root, comm=comm)
                close(t, whole if i == root else whole[i * size:(i + 1) * size],
                      f"scatter_inplace {dt}")
            big = [data(r, size * n, dt, salt=3) for r in members]
            out = torch.zeros(size * n, dtype=dt)
            bagua.alltoall(big[i], out, comm=comm)
            want = torch.cat([big[j][i * size:(i + 1) * size] for j in range(n)])
            close(out, want, f"alltoall {dt}")
            t = big[i].clone()
            bagua.alltoall_inplace(t, comm=comm)
            close(t, want, f"alltoall_inplace {dt}")
        # alltoall_v: uneven counts with zeros, gapped displacements, a receiver that
        # accepts one element more than it is sent from rank 0.
        counts, displs = v_layout(members, "v")
        length = [displs[r][-1] + max(counts[r][-1], counts[-1][r]) + 2 for r in range(n)]
        sends = [data(members[r], length[r], dt, salt=4) for r in range(n)]
        recv_counts = [counts[j][i] + (1 if j == 0 else 0) for j in range(n)]
        out = torch.full((length[i],), 9, dtype=dt)
        C.alltoall_v(sends[i], counts[i], displs[i], out, recv_counts, displs[i],
                     comm=comm)
        want = torch.full((length[i],), 9, dtype=dt)
        for j in range(n):
            k = counts[j][i]
            want[displs[i][j]:displs[i][j] + k] = sends[j][displs[j][i]:displs[j][i] + k]
        close(out, want, f"alltoall_v {dt}")
        counts, displs = v_layout(members, "inplace")
        length = [displs[r][-1] + counts[r][-1] + 1 for r in range(n)]
        bufs = [data(members[r], length[r], dt, salt=5) for r in range(n)]
        t = bufs[i].clone()
        C.alltoall_v_inplace(t, counts[i], displs[i], comm=comm)
        want = bufs[i].clone()
        for j in range(n):
            k = counts[j][i]
            want[displs[i][j]:displs[i][j] + k] = bufs[j][displs[j][i]:displs[j][i] + k]
        close(t, want, f"alltoall_v_inplace {dt}")
    # coalesced, mixed dtypes and a non-contiguous tensor
    shapes = [((3, 4), torch.float32), ((5,), torch.int64), ((2, 3), torch.float32)]
    ts = [data(me, int(np.prod(s)), d, salt=6 + k).reshape(s) for k, (s, d) in
          enumerate(shapes)]
    ts[0] = ts[0].t()
    C.allreduce_coalesced_inplace(ts, op=ReduceOp.SUM, comm=comm)
    for k, (s, d) in enumerate(shapes):
        want = oracle([data(r, int(np.prod(s)), d, salt=6 + k) for r in members],
                      ReduceOp.SUM, d).reshape(s)
        close(ts[k], want.t() if k == 0 else want, f"allreduce_coalesced_inplace {k}")
    ts = [data(me, int(np.prod(s)), d, salt=9 + k).reshape(s) for k, (s, d) in
          enumerate(shapes)]
    C.broadcast_coalesced(ts, src=n - 1, comm=comm)
    for k, (s, d) in enumerate(shapes):
        close(ts[k], data(members[-1], int(np.prod(s)), d, salt=9 + k), f"bcast_coalesced {k}")
    obj = {"from": me, "list": [1, 2.5, "x"]} if i == 0 else None
    got = C.broadcast_object(obj, 0, comm=comm)
    assert got == {"from": members[0], "list": [1, 2.5, "x"]}, got
    # send/recv around the group's ring (group ranks), odd sizes
    if n > 1:
        t = data(me, 333, torch.float32)
        got = torch.empty(333)
        right, left = (i + 1) % n, (i - 1) % n
        if i % 2 == 0:
            bagua.send(t, right, comm=comm)
            bagua.recv(got, left, comm=comm)
        else:
            bagua.recv(got, left, comm=comm)
            bagua.send(t, right, comm=comm)
        close(got, data(members[left], 333, torch.float32), "send/recv")
    bagua.barrier(comm=comm)


def run_non_member(comm):
    """Every primitive with NON_COMM_MEMBER: no effect, no communication, no error."""
    t = torch.arange(6.0)
    before = t.clone()
    for fn, args in [
            (bagua.allreduce, (t, t)), (bagua.allreduce_inplace, (t,)),
            (bagua.broadcast, (t, 0)), (bagua.reduce, (t, t, 0)),
            (bagua.reduce_inplace, (t, 0)), (bagua.allgather, (t, t)),
            (bagua.allgather_inplace, (t,)), (bagua.gather, (t, t, 0)),
            (C.gather_inplace, (t, 3, 0)), (bagua.scatter, (t, t, 0)),
            (C.scatter_inplace, (t, 3, 0)), (bagua.reduce_scatter, (t, t)),
            (bagua.reduce_scatter_inplace, (t,)), (bagua.alltoall, (t, t)),
            (bagua.alltoall_inplace, (t,)),
            (C.alltoall_v, (t, [1, 1], [0, 1], t, [1, 1], [0, 1])),
            (C.alltoall_v_inplace, (t, [1, 1], [0, 1])), (bagua.send, (t, 0)),
            (bagua.recv, (t, 0)), (C.broadcast_coalesced, ([t],)),
            (C.allreduce_coalesced_inplace, ([t],))]:
        fn(*args, comm=comm)
        assert torch.equal(t, before), f"{fn.__name__} changed a non-member's tensor"
    bagua.barrier(comm=comm)
    assert C.broadcast_object("mine", 0, comm=comm) == "mine"


def check_group(group, members, me, what):
    comm = group.get_global_communicator()
    assert C.get_communicator(group.group_name, "global") is comm
    assert group.ranks == members, (what, group.ranks, members)
    if me in members:
        assert not C._rank_not_in_group(group), what
        assert comm.rank() == members.index(me) and comm.nranks() == len(members), what
        run_all(comm, members, me)
    else:
        assert comm is CommMember.NON_COMM_MEMBER, (what, comm)
        assert C._rank_not_in_group(group) and C._rank_not_in_comm(comm), what
        run_non_member(comm)
        run_non_member(group)  # a group passed as comm: the same no-op


def expect_error(exc, fn, *args, match="", **kw):
    try:
        fn(*args, **kw)
    except exc as e:
        assert match in str(e), f"{fn.__name__}: message {str(e)!r} lacks {match!r}"
        return
    raise AssertionError(f"{fn.__name__}{args}: no {exc.__name__}")


def check_bad_arguments(me, n):
    """Every bad argument raises on every rank before anything is sent."""
    x = torch.ones(4)
    expect_error(ValueError, bagua.reduce, x, torch.ones(2), 0, match="recv_tensor 2")
    expect_error(ValueError, bagua.reduce, x, torch.ones(8), 0, match="recv_tensor 8")
    for root in (-1, n):
        expect_error(ValueError, bagua.reduce, x, x.clone(), root, match=f"dst={root}")
        expect_error(ValueError, bagua.reduce_inplace, x, root, match=f"dst={root}")
        expect_error(ValueError, bagua.broadcast, x, root, match=f"src={root}")
        expect_error(ValueError, bagua.gather, x, torch.ones(4 * n), root, match=f"{root}")
        expect_error(ValueError, C.gather_inplace, x, 4, root, match=f"dst={root}")
        expect_error(ValueError, bagua.scatter, torch.ones(4 * n), x, root, match=f"{root}")
        expect_error(ValueError, C.scatter_inplace, x, 4, root, match=f"src={root}")
        expect_error(ValueError, C.broadcast_object, 1, root, match=f"src={root}")
        expect_error(ValueError, C.broadcast_coalesced, [x], root, match=f"src={root}")
        expect_error(ValueError, bagua.send, x, root, match=f"dst={root}")
        expect_error(ValueError, bagua.recv, x, root, match=f"src={root}")
    expect_error(ValueError, bagua.send, x, me, match="this rank")
    expect_error(ValueError, bagua.allreduce, x, torch.ones(3), match="recv_tensor 3")
    expect_error(ValueError, bagua.allgather, x, torch.ones(4 * n - 1), match="elements")
    expect_error(ValueError, C.gather_inplace, torch.ones(3), 4, me, match="16")
    expect_error(ValueError, C.scatter_inplace, torch.ones(5), 4, (me + 1) % n,
                 match="must hold 4")
    expect_error(ValueError, bagua.allreduce_inplace, x, ReduceOp.BXOR, match="integer")
    expect_error(ValueError, bagua.allreduce_inplace, x, 42, match="unknown")
    ones, zeros = [1] * n, list(range(n))
    # alltoall_v: counts overflowing either tensor, short lists, negative entries
    expect_error(ValueError, C.alltoall_v, torch.ones(n), [2] * n, zeros, torch.ones(n),
                 ones, zeros, match="send_counts[")
    expect_error(ValueError, C.alltoall_v, torch.ones(n), ones, zeros, torch.ones(n),
                 ones, [0] * (n - 1) + [n], match=f"recv_displs[{n - 1}]={n}")
    expect_error(ValueError, C.alltoall_v, torch.ones(n), ones[:-1], zeros,
                 torch.ones(n), ones, zeros, match="needs one per rank")
    expect_error(ValueError, C.alltoall_v, torch.ones(n), [-1] + ones[1:], zeros,
                 torch.ones(n), ones, zeros, match="send_counts[0]=-1")
    expect_error(TypeError, C.alltoall_v, torch.ones(n), ones, zeros,
                 torch.ones(n, dtype=torch.int64), ones, zeros, match="dtype")
    expect_error(ValueError, C.alltoall_v_inplace, torch.ones(n), ones, [n] * n,
                 match="exceeds")
    # A sender's count above what its receiver accepts: found in the counts exchange, so
    # every rank raises the same error and no data moves.
    big = [2 if j == (me + 1) % n else 1 for j in range(n)]
    expect_error(ValueError, C.alltoall_v, torch.ones(2 * n), big, [2 * j for j in zeros],
                 torch.ones(2 * n), ones, [2 * j for j in zeros], match="accepts at most 1")
    # new_group validates as upstream
    expect_error(ValueError, bagua.new_group, [0, n], match=f"invalid rank {n}")
    expect_error(ValueError, bagua.new_group, [-1], match="invalid rank -1")
    expect_error(ValueError, bagua.new_group, [1, 1], match="twice")
    expect_error(TypeError, bagua.allreduce_inplace, x, comm="world", match="comm must be")
    # recv into a tensor of another size: reported, and the stream stays in step
    if n > 1 and me < 2:
        if me == 0:
            bagua.send(torch.arange(5.0), 1)
            bagua.send(torch.arange(3.0), 1)
        else:
            expect_error(ValueError, bagua.recv, torch.zeros(3), 0, match="sent 5 elements")
            got = torch.zeros(3)
            bagua.recv(got, 0)
            close(got, torch.arange(3.0), "recv after a mismatch")
    # still in step: nothing was sent by any failed call
    t = torch.tensor([float(me)])
    bagua.allreduce_inplace(t)
    assert t.item() == n * (n - 1) / 2, t


def main():
    bagua.init_process_group()
    me, n = bagua.get_rank(), bagua.get_world_size()
    assert n == 4, "this worker expects 4 ranks on 2 nodes"
    default = C._get_default_group()
    assert C.get_default_group() is default and C.is_initialized()
    assert not C._rank_not_in_group(None) and not C._rank_not_in_comm(None)
    world = list(range(n))
    # the default group, as None, as the group, as its communicator and its raw _C.Comm
    run_all(None, world, me)
    for comm in (default, default.get_global_communicator(), default.comm):
        t = torch.tensor([me + 1.0])
        bagua.allreduce_inplace(t, comm=comm)
        assert t.item() == 10.0
    # the even ranks, a single-rank group, and every rank but 0 from a torch group
    check_group(bagua.new_group([2, 0]), [0, 2], me, "even ranks")
    check_group(bagua.new_group([1]), [1], me, "single rank")
    torch_group = dist.new_group([1, 2, 3])
    from_torch = C.from_torch_group(torch_group)
    check_group(from_torch, [1, 2, 3], me, "from_torch_group")
    if me != 0:
        assert dist.get_rank(torch_group) == from_torch.get_global_communicator().rank()
    check_group(bagua.new_group([]), [], me, "empty")
    # intra-node: {0, 1}, {2, 3}; inter-node: local rank 0 of every node, {0, 2}
    intra = default.get_intra_node_communicator()
    inter = default.get_inter_node_communicator()
    assert intra.nranks() == 2 and intra.rank() == me % 2, intra
    run_all(intra, [me - me % 2, me - me % 2 + 1], me)
    if me % 2 == 0:
        assert C.get_communicator(default.group_name, "inter") is inter
        run_all(inter, [0, 2], me)
    else:
        assert inter is CommMember.NON_COMM_MEMBER, inter
        run_non_member(inter)
    # ranks 1..3: intra {1} and {2, 3}; inter: local rank of rank 1 (1): {1, 3}
    if me != 0:
        intra = from_torch.get_intra_node_communicator()
        inter = from_torch.get_inter_node_communicator()
        assert intra.nranks() == (1 if me == 1 else 2), intra
        if me in (1, 3):
            assert inter.nranks() == 2 and inter.rank() == (me - 1) // 2, inter
            run_all(inter, [1, 3], me)
        else:
            assert inter is CommMember.NON_COMM_MEMBER, inter
    else:
        assert from_torch.get_intra_node_communicator() is CommMember.NON_COMM_MEMBER
    check_bad_arguments(me, n)
    print(f"rank {me}: every primitive and group shape matches the oracle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
