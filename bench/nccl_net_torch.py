#!/usr/bin/env python3
"""Allreduce bus bandwidth of PyTorch's NCCL backend, nccl-tests style, over TCP.

Two processes share one GPU and each gives NCCL its own NCCL_HOSTID, so NCCL sees two hosts
and every byte crosses its network transport over loopback: its own sockets by default, or
Bagua-Net when --plugin names libnccl-net-bagua.so (NCCL_NET=Bagua then makes NCCL fail
instead of falling back to sockets). This is Bagua-Net's measurement on a GPU: an
unmodified torch program, with only the environment changed.

Prints one line per size: "size_bytes time_us busbw_GBps" plus the transport, and with
--json a file the caller can compare. --backend gloo --device cpu runs the same loop without
a GPU, which is how the script itself is checked on machines without one.
"""
import argparse
import json
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def parse_size(text):
    """Return the byte count of '64M', '1K', '4096' (binary multiples)."""
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper()
    if text and text[-1] in mult:
        return int(text[:-1]) * mult[text[-1]]
    return int(text)


def free_port():
    """Return a free TCP port on loopback for the rendezvous store."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, args, port, queue):
    """One rank: rendezvous, then time allreduce over every size."""
    os.environ["NCCL_HOSTID"] = "bagua-bench-host-%d" % rank
    dev = torch.device("cuda", 0) if args.device == "cuda" else torch.device("cpu")
    if args.device == "cuda":
        torch.cuda.set_device(0)
    dist.init_process_group(args.backend, init_method="tcp://127.0.0.1:%d" % port,
                            rank=rank, world_size=args.nranks)
    results = []
    size = args.min_bytes
    while size <= args.max_bytes:
        n = max(1, size // 4)
        x = torch.full((n,), float(rank + 1), dtype=torch.float32, device=dev)
        for _ in range(args.warmup):
            dist.all_reduce(x)
        if args.device == "cuda":
            torch.cuda.synchronize()
        dist.barrier()
        x.fill_(float(rank + 1))
        t0 = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(x)
        if args.device == "cuda":
            torch.cuda.synchronize()
        elapsed = (time.perf_counter() - t0) / args.iters
        # After k sums of 1..nranks every element is S * nranks^(k-1), S = nranks(nranks+1)/2.
        s = args.nranks * (args.nranks + 1) / 2.0
        # Small integers: every element must equal it exactly, wherever NCCL cut the buffer.
        want = s * args.nranks ** (args.iters - 1)
        ok = bool((x == want).all().item())
        busbw = 2.0 * (args.nranks - 1) / args.nranks * n * 4 / elapsed / 1e9
        results.append({"bytes": n * 4, "time_us": elapsed * 1e6, "busbw_GBps": busbw,
                        "check": ok})
        size *= 4
    dist.destroy_process_group()
    if rank == 0:
        queue.put(results)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plugin", help="path of libnccl-net-bagua.so (default: NCCL's sockets)")
    ap.add_argument("--nranks", type=int, default=2)
    ap.add_argument("--min-bytes", type=parse_size, default=parse_size("1M"))
    ap.add_argument("--max-bytes", type=parse_size, default=parse_size("256M"))
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--backend", default="nccl", choices=["nccl", "gloo"])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--label", default=None, help="name of this configuration in the output")
    ap.add_argument("--json", help="write the results to this file")
    args = ap.parse_args()
    if args.nranks < 2 or args.min_bytes < 4 or args.max_bytes < args.min_bytes:
        ap.error("need --nranks >= 2 and 4 <= --min-bytes <= --max-bytes")

    os.environ.setdefault("NCCL_IB_DISABLE", "1")
    os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
    os.environ.setdefault("NCCL_P2P_DISABLE", "1")
    os.environ.setdefault("NCCL_SHM_DISABLE", "1")
    if args.plugin:
        if not os.path.exists(args.plugin):
            ap.error("--plugin %s: no such file" % args.plugin)
        os.environ["NCCL_NET_PLUGIN"] = os.path.abspath(args.plugin)
        os.environ["NCCL_NET"] = "Bagua"
        os.environ.setdefault("BAGUA_NET_IFNAME", "lo")
    label = args.label or ("bagua-net" if args.plugin else "nccl-socket")

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, args, port, queue)) for r in range(args.nranks)]
    for p in procs:
        p.start()
    results = None
    deadline = time.time() + 300
    while results is None and time.time() < deadline:
        try:
            results = queue.get(timeout=1)
        except Exception:  # queue.Empty: check that the ranks are still alive
            if any(p.exitcode not in (None, 0) for p in procs):
                break
    for p in procs:
        p.join(timeout=10)
        if p.is_alive():
            p.kill()
    if results is None:
        print("%s: no result (a rank failed or the 300 s deadline passed)" % label)
        return 1
    print("%-12s %12s %12s %12s %s" % ("transport", "bytes", "time_us", "busbw_GBps", "check"))
    for r in results:
        print("%-12s %12d %12.1f %12.3f %s" % (label, r["bytes"], r["time_us"], r["busbw_GBps"],
                                               "ok" if r["check"] else "WRONG"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"label": label, "results": results}, f, indent=1)
    return 0 if all(r["check"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
