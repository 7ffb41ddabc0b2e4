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

--repeat R times every size R times, the sizes interleaved (all sizes, then all sizes again),
so that a noisy moment does not fall on one size only; the line of a size then shows the
median time and bus bandwidth and ends with the bus bandwidth as "median [min-max]" (with
fewer than 3 repeats, the runs themselves). Every measurement is kept, with the load average
at its end, in the record that bench/record.py describes (--record-dir DIR, or
BENCH_RECORD_DIR, names its directory).
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import record  # noqa: E402  (bench/record.py, next to this file)


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


def sizes(args):
    """The message sizes: from --min-bytes, times 4, up to --max-bytes."""
    size = args.min_bytes
    while size <= args.max_bytes:
        yield size
        size *= 4


def worker(rank, args, port, queue, record_dir, label):
    """One rank: rendezvous, then time allreduce over every size, --repeat times. Rank 0 adds
    each measurement to the record as it ends."""
    rec = record.attach(record_dir) if rank == 0 else None
    os.environ["NCCL_HOSTID"] = "bagua-bench-host-%d" % rank
    dev = torch.device("cuda", 0) if args.device == "cuda" else torch.device("cpu")
    if args.device == "cuda":
        torch.cuda.set_device(0)
    dist.init_process_group(args.backend, init_method="tcp://127.0.0.1:%d" % port,
                            rank=rank, world_size=args.nranks)
    results = []
    for rep, size in ((r, s) for r in range(args.repeat) for s in sizes(args)):
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
                        "check": ok, "rep": rep})
        if rec:
            rec.row(label, rep, n * 4, "%.2f" % (elapsed * 1e6), "%.4f" % busbw,
                    "ok" if ok else "WRONG")
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
    ap.add_argument("--repeat", type=int, default=1,
                    help="time every size this many times, the sizes interleaved")
    ap.add_argument("--record-dir", default=None,
                    help="the record of this run (default: BENCH_RECORD_DIR, else "
                         "docs/results/raw/<date>-nccl_net_torch-<commit>/)")
    args = ap.parse_args()
    if args.nranks < 2 or args.min_bytes < 4 or args.max_bytes < args.min_bytes:
        ap.error("need --nranks >= 2 and 4 <= --min-bytes <= --max-bytes")
    if args.repeat < 1:
        ap.error("need --repeat >= 1")

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

    extra = {"backend": args.backend, "device": args.device,
             "plugin": os.path.abspath(args.plugin) if args.plugin else "none (NCCL's sockets)"}
    if args.backend == "nccl":
        try:
            extra["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception as e:  # no CUDA build of torch: the run fails below with its reason
            extra["nccl"] = f"unknown ({e})"
    rec = record.open_record("nccl_net_torch", [sys.executable] + sys.argv,
                             ["bytes:B", "time_us:us", "busbw:GB/s", "check"], peers=["torch"],
                             python=sys.executable, path=args.record_dir, extra=extra)
    status = 1
    try:
        status = run(args, label, rec)
    finally:
        rec.close(status)
        print("record: %s" % rec.dir, file=sys.stderr)
    return status


def run(args, label, rec):
    """Starts the ranks, collects rank 0's results and prints them; the exit status."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, args, port, queue, rec.dir, label))
             for r in range(args.nranks)]
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
    # One line per size: with --repeat, the medians over the repeats, and every run checked.
    runs = results
    results = []
    for size in dict.fromkeys(r["bytes"] for r in runs):
        mine = [r for r in runs if r["bytes"] == size]
        results.append({"bytes": size,
                        "time_us": record.median([r["time_us"] for r in mine]),
                        "busbw_GBps": record.median([r["busbw_GBps"] for r in mine]),
                        "check": all(r["check"] for r in mine),
                        "busbw_runs": [r["busbw_GBps"] for r in mine]})
    head = "%-12s %12s %12s %12s %s" % ("transport", "bytes", "time_us", "busbw_GBps", "check")
    if args.repeat > 1:
        note = record.runs_note(args.repeat)
        if note:
            print(note)
        head += "  busbw median [min-max]"
    print(head)
    for r in results:
        line = "%-12s %12d %12.1f %12.3f %s" % (label, r["bytes"], r["time_us"], r["busbw_GBps"],
                                                "ok" if r["check"] else "WRONG")
        if args.repeat > 1:
            line += "  " + record.stat(r["busbw_runs"], ".3f")
        print(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"label": label, "repeat": args.repeat, "results": results}, f, indent=1)
    return 0 if all(r["check"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
