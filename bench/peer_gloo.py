#!/usr/bin/env python3
"""peer_gloo.py - Gloo (torch.distributed, backend 'gloo') reference benchmark.

Used by bench/peers.sh. Times one collective over doubling sizes with the same
methodology as bagua-bench and peer_mpi.c and prints rows in the same format:

    bytes count dtype op time_us algbw_GBps busbw_GBps wrong

Methodology (identical on purpose, so the table compares libraries, not
harnesses): --warmup untimed calls, barrier, --iters timed calls; time_us is
the per-iteration mean on each rank, then the MAX across ranks. busbw uses the
nccl-tests factors. For allgather and alltoall `bytes` is the total array size
(each rank owns bytes/n), as in nccl-tests.

After the timed loop the output is reset to a sentinel, the collective runs
once more and every element is checked; inputs are small integers, so float32
sums are exact. `wrong` is the number of bad elements summed over ranks
(-1 with --no-check).

The parent process only spawns N children (this same file with --worker) and
forwards rank 0's output; it needs no torch itself beyond what the children
import. Needs python3-torch (Debian) for the children.

Usage: peer_gloo.py COLLECTIVE --nranks N [--min-bytes 8] [--max-bytes 256M]
                    [--iters 20] [--warmup 5] [--check|--no-check]
"""

import argparse
import os
import socket
import subprocess
import sys
import time

# What torch 1.13's ProcessGroupGloo implements. reduce_scatter is missing
# there ("ProcessGroupGloo does not support reduce_scatter"); we report that
# as a '#' line instead of timing an emulation, which would not be Gloo's
# number.
SUPPORTED = ("allreduce", "allgather", "alltoall", "broadcast", "reduce",
             "barrier")
KNOWN = SUPPORTED + ("reduce_scatter",)


def parse_size(s):
    """8, 4K, 16M, 1G: binary multiples, as bagua-bench and peer_mpi use."""
    t = s.strip()
    if t[-1:] in ("B", "b"):
        t = t[:-1]
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(t[-1:].lower())
    if mult:
        t = t[:-1]
    else:
        mult = 1
    try:
        return int(t) * mult
    except ValueError:
        raise argparse.ArgumentTypeError("bad size %r" % s)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("collective", choices=KNOWN)
    p.add_argument("--nranks", type=int, required=True)
    p.add_argument("--min-bytes", type=parse_size, default=8)
    p.add_argument("--max-bytes", type=parse_size, default=256 << 20)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--dtype", default="f32", choices=("f32", "float32"))
    p.add_argument("--op", default="sum", choices=("sum",))
    p.add_argument("--check", dest="check", action="store_true", default=True)
    p.add_argument("--no-check", dest="check", action="store_false")
    p.add_argument("--transport", help="ignored (Gloo here is TCP only)")
    p.add_argument("--timeout", type=float, default=600.0,
                   help="seconds before a stuck run is killed")
    # Internal: set by the parent for each child.
    p.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=None, help=argparse.SUPPRESS)
    # With --worker: rank 0's address, for one rank per host (bench/linkrate.sh
    # starts each worker in its own network namespace).
    p.add_argument("--master-addr", default="127.0.0.1", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.nranks < 1 or a.iters < 1 or a.warmup < 0:
        p.error("--nranks and --iters must be >= 1, --warmup >= 0")
    a.min_bytes = max(a.min_bytes, 4)
    if a.max_bytes < a.min_bytes:
        p.error("--max-bytes is below --min-bytes")
    return a


def free_port():
    # Ask the kernel for a free port. There is a small race until rank 0's
    # store binds it; the parent retries once with a new port if init fails.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------- parent ---

def parent(a, argv):
    if a.collective not in SUPPORTED:
        print("# impl=gloo collective=%s nranks=%d: not supported by "
              "torch.distributed gloo backend; skipped"
              % (a.collective, a.nranks))
        return 0

    env = dict(os.environ)
    # One intra-op thread per process: the comparison is about communication,
    # and N ranks already oversubscribe a small box.
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("MKL_NUM_THREADS", "1")
    # Keep Gloo on loopback, as the other implementations are.
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")

    for attempt in range(2):
        port = free_port()
        procs = []
        for r in range(a.nranks):
            cmd = [sys.executable, os.path.abspath(__file__)] + argv + [
                "--worker", str(r), "--port", str(port)]
            # Only rank 0 prints rows; others keep stderr for diagnostics.
            out = None if r == 0 else subprocess.DEVNULL
            procs.append(subprocess.Popen(cmd, env=env, stdout=out))
        deadline = time.monotonic() + a.timeout
        rcs = [None] * a.nranks
        failed = False
        while None in rcs:
            for i, pr in enumerate(procs):
                if rcs[i] is None:
                    rcs[i] = pr.poll()
                    if rcs[i] not in (None, 0):
                        failed = True
            if failed or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        if not failed and None not in rcs:
            return 0
        # One rank died or we timed out: kill the rest so nothing hangs on
        # a peer that will never come, then report.
        for pr in procs:
            if pr.poll() is None:
                pr.kill()
        for pr in procs:
            pr.wait()
        why = "timed out after %.0fs" % a.timeout if not failed else \
            "a rank exited with %s" % [p.returncode for p in procs]
        # EADDRINUSE from the port race is the one failure worth retrying.
        if attempt == 0 and failed and all(
                p.returncode is not None for p in procs):
            print("peer_gloo: %s; retrying once with a new port" % why,
                  file=sys.stderr)
            continue
        print("peer_gloo: %s" % why, file=sys.stderr)
        return 1
    return 1


# ---------------------------------------------------------------- worker ---

def worker(a):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    rank, n = a.worker, a.nranks
    t_init = time.monotonic()
    dist.init_process_group("gloo", init_method="tcp://%s:%d" % (a.master_addr, a.port),
                            rank=rank, world_size=n)
    # init_process_group's own time (the world's creation), max over ranks.
    init_s = torch.tensor([time.monotonic() - t_init], dtype=torch.float64)
    dist.all_reduce(init_s, op=dist.ReduceOp.MAX)
    if rank == 0:
        print("# created in %.3f s (init_process_group, max over ranks)" % init_s.item())
    coll = a.collective
    f32 = torch.float32

    def ar(*lim):
        # int32 indices halve the temporaries of int64 at 256 MiB sizes.
        return torch.arange(*lim, dtype=torch.int32)

    def val(r, idx):
        # Small integers depending on rank and index: exact float32 sums.
        return (idx % 13 + (r + 1)).to(f32)

    def sumval(idx):
        return (idx % 13 * n + n * (n + 1) // 2).to(f32)

    reduction = coll in ("allreduce", "reduce")
    factor = {"allreduce": 2.0 * (n - 1) / n, "allgather": (n - 1) / n,
              "alltoall": (n - 1) / n}.get(coll, 1.0)

    if rank == 0:
        print("# impl=gloo collective=%s nranks=%d iters=%d warmup=%d check=%d"
              % (coll, n, a.iters, a.warmup, int(a.check)))
        print("# lib=torch %s gloo, GLOO_SOCKET_IFNAME=%s, threads=1"
              % (torch.__version__, os.environ.get("GLOO_SOCKET_IFNAME", "")))
        print("# bytes count dtype op time_us algbw_GBps busbw_GBps wrong")
        sys.stdout.flush()

    bytes_ = a.min_bytes
    while bytes_ <= a.max_bytes:
        count = bytes_ // 4
        per = count // n if coll in ("allgather", "alltoall") else count
        if coll != "barrier" and per == 0:
            if rank == 0:
                print("# skip bytes=%d: fewer than one float per rank" % bytes_)
            bytes_ *= 2
            continue
        total = per * n if coll in ("allgather", "alltoall") else count
        if coll == "barrier":
            total = 0

        # Build inputs and a callable for one collective call. Outputs are
        # preallocated and touched so allocation is not timed.
        if coll == "allreduce":
            # In place is how DDP uses it; restore the input before checking.
            inp = val(rank, ar(count))
            buf = inp.clone()

            def once():
                dist.all_reduce(buf, op=dist.ReduceOp.SUM)

            def reset():
                buf.copy_(inp)

            def bad():
                return int((buf != sumval(ar(count))).sum())
        elif coll == "reduce":
            inp = val(rank, ar(count))
            buf = inp.clone()

            def once():
                dist.reduce(buf, dst=0, op=dist.ReduceOp.SUM)

            def reset():
                buf.copy_(inp)

            def bad():
                if rank != 0:
                    return 0
                return int((buf != sumval(ar(count))).sum())
        elif coll == "broadcast":
            buf = val(0, ar(count)) if rank == 0 else \
                torch.full((count,), -1.0, dtype=f32)

            def once():
                dist.broadcast(buf, src=0)

            def reset():
                if rank != 0:
                    buf.fill_(-1.0)

            def bad():
                return int((buf != val(0, ar(count))).sum())
        elif coll == "allgather":
            inp = val(rank, ar(rank * per, (rank + 1) * per))
            out = torch.full((total,), -1.0, dtype=f32)
            # Views into one flat tensor, so the result is one contiguous
            # array like the other implementations produce.
            outs = list(out.split(per))

            def once():
                dist.all_gather(outs, inp)

            def reset():
                out.fill_(-1.0)

            def bad():
                idx = ar(total)
                return int((out != val(idx // per, idx)).sum())
        elif coll == "alltoall":
            inp = val(rank, ar(total))
            out = torch.full((total,), -1.0, dtype=f32)

            def once():
                dist.all_to_all_single(out, inp)

            def reset():
                out.fill_(-1.0)

            def bad():
                # Block q of my output is block `rank` of rank q's input.
                idx = ar(total)
                q = idx // per
                return int((out != val(q, rank * per + idx % per)).sum())
        else:  # barrier
            def once():
                dist.barrier()

            def reset():
                pass

            def bad():
                return 0

        for _ in range(a.warmup):
            once()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(a.iters):
            once()
        t = (time.perf_counter() - t0) / a.iters

        wrong = 0
        if a.check:
            reset()
            once()
            wrong = bad()
        stats = torch.tensor([t], dtype=torch.float64)
        dist.all_reduce(stats, op=dist.ReduceOp.MAX)
        wr = torch.tensor([wrong], dtype=torch.int64)
        dist.all_reduce(wr, op=dist.ReduceOp.SUM)

        if rank == 0:
            tmax = float(stats[0])
            nbytes = total * 4
            algbw = nbytes / tmax / 1e9 if tmax > 0 else 0.0
            print("%d %d f32 %s %.2f %.4f %.4f %d"
                  % (nbytes, total, "sum" if reduction else "none",
                     tmax * 1e6, algbw, algbw * factor,
                     int(wr[0]) if a.check else -1))
            sys.stdout.flush()
        if coll == "barrier":
            break
        bytes_ *= 2

    dist.destroy_process_group()
    return 0


def main():
    argv = sys.argv[1:]
    a = parse_args(argv)
    if a.worker is not None:
        return worker(a)
    return parent(a, argv)


if __name__ == "__main__":
    sys.exit(main())
