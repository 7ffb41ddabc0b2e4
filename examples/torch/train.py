#!/usr/bin/python3
"""Trains a CNN (or a wide MLP) on Fashion-MNIST with Bagua-C's PyTorch front end.

Run it under bagua-launch or torchrun (or alone, one rank):

    bagua-launch --nproc-per-node 2 examples/torch/train.py --algorithm bytegrad
    bagua-launch --config job.ini examples/torch/train.py    # [algorithm] name = bytegrad
    torchrun --nproc_per_node 2 examples/torch/train.py --ddp        # plain torch DDP (Gloo)
    torchrun --nproc_per_node 2 examples/torch/train.py --ddp --ddp-hook powersgd \
        --powersgd-rank 8                                        # DDP with torch's PowerSGD hook
    bagua-launch --nproc-per-node 2 examples/torch/train.py --algorithm powersgd \
        --powersgd-rank 8                                        # libbagua's PowerSGD

It trains on the GPU of its local rank when torch sees one (``--device cuda``, the default
then: ``torch.cuda.set_device(LOCAL_RANK)``, the model and batches on that device, libbagua's
CUDA mode, and ``--ddp`` over NCCL), else on the CPU.

The data are Debian's dataset-fashion-mnist IDX files (no download), or with ``--synthetic N``
N generated images (what a GPU machine without the dataset uses; ``--model resnet18`` takes
3x32x32 images). The last line of every rank is the same as the C example's:
``final rank=R step=S params_crc=HEX test_acc=A``.
"""

import argparse
import gzip
import os
import sys
import time
import zlib

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

DATA_DIR = "/usr/share/datasets/fashion-mnist"
ALGORITHMS = ["gradient_allreduce", "bytegrad", "decentralized", "low_precision_decentralized",
              "qadam", "async", "powersgd"]
# torch DDP's own communication hooks (torch.distributed.algorithms.ddp_comm_hooks), the
# compression a torch user has without Bagua: --ddp-hook NAME.
DDP_HOOKS = ["fp16", "powersgd"]
# --powersgd-start's default: the first 10 steps allreduce uncompressed (torch's default, 1000,
# is longer than the benchmarks' runs; its documentation suggests about 10% of training).
POWERSGD_START = 10


def read_idx(path):
    """Reads a (gzipped) IDX file into a numpy array."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 8:
        raise ValueError(f"{path}: not an IDX file of unsigned bytes")
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise ValueError(f"{path}: {data.size} bytes of data, the header says {dims}")
    return data.reshape(dims)


def synthetic(n, split, shape, seed=1):
    """``n`` generated images of ``shape``: a fixed random pattern per class plus noise
    (learnable, so accuracy still means something), the test split from another seed."""
    g = torch.Generator().manual_seed(seed * 2 + (split == "test"))
    patterns = torch.randn(10, *shape, generator=torch.Generator().manual_seed(seed))
    y = torch.randint(0, 10, (n,), generator=g)
    x = 0.1 * patterns[y] + torch.randn(n, *shape, generator=g)
    return torch.utils.data.TensorDataset(x, y)


def load(data_dir, split, limit=None):
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"))
    y = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"))
    if limit:
        x, y = x[:limit], y[:limit]
    x = torch.from_numpy(x.astype(np.float32) / 255.0).sub_(0.2860).div_(0.3530).unsqueeze(1)
    return torch.utils.data.TensorDataset(x, torch.from_numpy(y.astype(np.int64)))


class CNN(nn.Module):
    """A small CNN: two strided convolutions and a linear classifier (about 17 k weights)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 5, stride=2)   # 28 -> 12
        self.conv2 = nn.Conv2d(16, 32, 3, stride=2)  # 12 -> 5
        self.fc = nn.Linear(32 * 5 * 5, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        return self.fc(x.flatten(1))


class WideMLP(nn.Module):
    """A communication-bound model: 784-W-W-10, 11.8 M parameters at the default width of
    3072, 1.86 M at 1024 (``--width``)."""

    def __init__(self, width=3072):
        super().__init__()
        self.fc1 = nn.Linear(784, width)
        self.fc2 = nn.Linear(width, width)
        self.fc3 = nn.Linear(width, 10)

    def forward(self, x):
        x = F.relu(self.fc1(x.flatten(1)))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


def resnet18():
    """torchvision's ResNet-18 (11.2 M parameters) for 10 classes: a model whose gradients
    are large next to its compute at small batches, as the benchmarks on a GPU want."""
    import torchvision
    return torchvision.models.resnet18(num_classes=10)


def make_model(args):
    if args.model == "wide":
        return WideMLP(args.width)
    return {"cnn": CNN, "resnet18": resnet18}[args.model]()


def datasets(args):
    """The train and test sets: Debian's Fashion-MNIST, or --synthetic N generated images."""
    if args.synthetic:
        shape = (3, 32, 32) if args.model == "resnet18" else (1, 28, 28)
        return (synthetic(args.synthetic, "train", shape, args.seed),
                synthetic(max(args.synthetic // 6, 100), "test", shape, args.seed))
    return (load(args.data, "train", args.train_limit),
            load(args.data, "test", args.test_limit))


def params_crc(model):
    crc = 0
    for p in model.parameters():
        crc = zlib.crc32(p.detach().contiguous().cpu().numpy().tobytes(), crc)
    return crc


def evaluate(model, ds):
    model.eval()
    correct = 0
    device = next(model.parameters()).device
    with torch.no_grad():
        for i in range(0, len(ds), 1000):
            x, y = ds.tensors[0][i:i + 1000], ds.tensors[1][i:i + 1000]
            x, y = x.to(device), y.to(device)
            correct += (model(x).argmax(1) == y).sum().item()
    model.train()
    return correct / len(ds)


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--algorithm", default=None, choices=ALGORITHMS,
                    help="default: BAGUA_ALGORITHM (bagua-launch's [algorithm] name, with the "
                         "option variables of that section), else gradient_allreduce")
    ap.add_argument("--ddp", action="store_true",
                    help="plain torch.nn.parallel.DistributedDataParallel instead (Gloo on "
                         "the CPU, NCCL on a GPU)")
    ap.add_argument("--ddp-hook", default=None, choices=DDP_HOOKS,
                    help="with --ddp: register one of torch DDP's communication hooks: fp16 "
                         "(fp16_compress_hook) or powersgd (powerSGD_hook, with error "
                         "feedback and warm start, as torch's defaults)")
    ap.add_argument("--powersgd-rank", type=int, default=None, metavar="R",
                    help="--ddp-hook powersgd: matrix_approximation_rank (default 1, torch's); "
                         "--algorithm powersgd: its rank (default 4, libbagua's)")
    ap.add_argument("--powersgd-start", type=int, default=None, metavar="K",
                    help="--ddp-hook powersgd: start_powerSGD_iter: the first K steps "
                         f"allreduce uncompressed (default {POWERSGD_START}; torch requires 2 "
                         "or more with error feedback or warm start); --algorithm powersgd: "
                         "its warmup_steps (default 10)")
    ap.add_argument("--plain", action="store_true",
                    help="one process, no data parallelism: the plain torch loop (the baseline "
                         "of the front end's own per-step overhead, bench/torch_overhead.sh)")
    ap.add_argument("--model", default="cnn", choices=["cnn", "wide", "resnet18"],
                    help="resnet18 needs torchvision and --synthetic")
    ap.add_argument("--width", type=int, default=3072,
                    help="hidden width of --model wide (3072: 11.8 M parameters; 1024: 1.86 M)")
    ap.add_argument("--device", default=None, choices=["cpu", "cuda"],
                    help="default: cuda when torch sees a GPU, else cpu")
    ap.add_argument("--synthetic", type=int, default=None, metavar="N",
                    help="train on N generated images instead of Fashion-MNIST")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=64, help="per rank")
    ap.add_argument("--lr", type=float, default=None,
                    help="default: 0.05 (SGD momentum 0.9), 4e-3 for qadam")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data", default=DATA_DIR)
    ap.add_argument("--train-limit", type=int, default=None, help="use the first N images")
    ap.add_argument("--max-steps", type=int, default=None, help="stop after N steps")
    ap.add_argument("--timing-warmup", type=int, default=2,
                    help="steps left out of the steady-state step time (first-step set-up)")
    ap.add_argument("--test-limit", type=int, default=None,
                    help="evaluate on the first N test images")
    ap.add_argument("--no-flatten", action="store_true", help="with_bagua(do_flatten=False)")
    ap.add_argument("--fuse", action="store_true",
                    help="bagua.contrib.fuse_optimizer(...) and optimizer.fuse_step()")
    ap.add_argument("--sync-interval-ms", type=int, default=None,
                    help="async algorithm (default 50; without --algorithm, "
                         "BAGUA_SYNC_INTERVAL_MS wins over it)")
    ap.add_argument("--elastic", action="store_true",
                    help="in-process elastic training (bagua.torch_api.elastic) under "
                         "bagua-launch --nnodes MIN:MAX: survives nodes dying and joining")
    args = ap.parse_args()
    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    elif args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch.cuda.is_available() is False here")
    if args.model == "resnet18" and not args.synthetic:
        ap.error("--model resnet18 takes 3x32x32 images: use it with --synthetic N")
    if args.synthetic is not None and args.synthetic < 100:
        ap.error(f"--synthetic {args.synthetic}: accepted 100 or more images")
    if args.width < 1 or args.width > 65536:
        ap.error(f"--width {args.width}: accepted 1 to 65536")
    if args.width != 3072 and args.model != "wide":
        ap.error(f"--width is a setting of --model wide, not of --model {args.model}")
    if args.ddp_hook and not args.ddp:
        ap.error(f"--ddp-hook {args.ddp_hook} is a hook of torch DDP: it needs --ddp (a "
                 "with_bagua run communicates through its --algorithm, not through DDP)")
    if args.algorithm == "powersgd" and not args.ddp:
        # libbagua's PowerSGD (with_bagua): the flags set its rank and warm-up.
        if args.powersgd_rank is not None and not 1 <= args.powersgd_rank <= 1024:
            ap.error(f"--powersgd-rank {args.powersgd_rank}: accepted 1 .. 1024")
        if args.powersgd_start is not None and args.powersgd_start < 0:
            ap.error(f"--powersgd-start {args.powersgd_start}: accepted 0 or more")
    elif args.ddp_hook != "powersgd":
        for flag, value in (("--powersgd-rank", args.powersgd_rank),
                            ("--powersgd-start", args.powersgd_start)):
            if value is not None:
                ap.error(f"{flag} is a setting of --ddp-hook powersgd or --algorithm powersgd, "
                         "not of "
                         f"{'--ddp-hook ' + args.ddp_hook if args.ddp_hook else 'this run'}")
    else:
        if args.powersgd_rank is None:
            args.powersgd_rank = 1
        if args.powersgd_start is None:
            args.powersgd_start = POWERSGD_START
        if args.powersgd_rank < 1:
            ap.error(f"--powersgd-rank {args.powersgd_rank}: accepted 1 or more")
        # torch's PowerSGDState refuses start_powerSGD_iter <= 1 when error feedback or warm
        # start is on (both are, as its defaults): DDP's first iterations build its buckets.
        if args.powersgd_start < 2:
            ap.error(f"--powersgd-start {args.powersgd_start}: accepted 2 or more (torch's "
                     "PowerSGDState refuses start_powerSGD_iter < 2 with error feedback and "
                     "warm start on)")
    if args.timing_warmup < 0:
        ap.error(f"--timing-warmup {args.timing_warmup}: accepted 0 or more steps")
    # Without --algorithm the launcher's choice applies (flag > environment > default); the
    # torch-only modes never load bagua, so they never read it.
    args.algorithm_from_env = args.algorithm is None and not (args.ddp or args.plain)
    if args.algorithm is None:
        args.algorithm = "gradient_allreduce"
        if args.algorithm_from_env:
            from bagua.torch_api import algorithms
            try:
                args.algorithm = algorithms.name_from_env() or args.algorithm
            except ValueError as e:
                ap.error(str(e))
    if args.plain and (args.ddp or args.elastic or args.fuse):
        ap.error("--plain runs without any data parallelism: not with --ddp, --elastic, --fuse")
    if args.elastic and (args.ddp or args.fuse or args.algorithm in ("qadam", "async")):
        ap.error("--elastic trains with gradient_allreduce, bytegrad, decentralized or "
                 "low_precision_decentralized, without --ddp or --fuse")
    return args


def main_elastic(args):
    """The --elastic loop: a load-balanced sampler whose position is part of the elastic
    state, a commit after every step, and exactly-once bookkeeping (every rank's sample
    indices of each step are counted in a per-sample tensor of the state, so a rolled-back
    step uncounts them); rank 0 prints each epoch's coverage."""
    import bagua.torch_api as bagua
    from bagua.torch_api import algorithms, elastic
    from bagua.torch_api.contrib import LoadBalancingDistributedSampler

    elastic.init_process_group()
    device = pick_device(args)
    train, test = datasets(args)
    n = len(train)
    sampler = LoadBalancingDistributedSampler(train, lambda sample: 1.0, shuffle=True,
                                              seed=args.seed, drop_last=True)
    model = make_model(args).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr or 0.05, momentum=0.9)
    algorithm = (algorithms.from_env() if args.algorithm_from_env
                 else algorithms.from_name(args.algorithm, **bagua_options(args)))
    model = model.with_bagua([optimizer], algorithm)
    state = elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, step=0,
                               samples_seen=0, seen=torch.zeros(n, dtype=torch.int16))

    def report_change():
        c = state.last_change
        if bagua.get_rank() == 0:
            print(f"round {c['round']} world {c['world']} recovery_ms "
                  f"{c['recovery_s'] * 1e3:.0f}{' (after a failed step)' if c['failed'] else ''}",
                  flush=True)

    state.register_reset_callbacks([report_change])
    if bagua.get_rank() == 0:
        print(f"train.py: elastic, world {bagua.get_world_size()}, epoch {state.epoch}, "
              f"algorithm {args.algorithm}", flush=True)

    @elastic.run
    def train_loop(state):
        ones = None
        while state.epoch < args.epochs:
            while not (args.max_steps and state.step >= args.max_steps):
                idx = sampler.next_indices(args.batch_size)
                if not idx:
                    break
                x, y = train.tensors[0][idx].to(device), train.tensors[1][idx].to(device)
                optimizer.zero_grad()
                F.cross_entropy(model(x), y).backward()
                optimizer.step()
                mine = torch.tensor(idx, dtype=torch.int64)
                every = torch.empty(len(idx) * bagua.get_world_size(), dtype=torch.int64)
                bagua.allgather(mine, every)
                if ones is None or ones.numel() != every.numel():
                    ones = torch.ones(every.numel(), dtype=torch.int16)
                state.seen.index_add_(0, every, ones)
                state.step += 1
                state.samples_seen += every.numel()
                state.commit()
            if args.max_steps and state.step >= args.max_steps:
                return
            if bagua.get_rank() == 0:
                processed = int((state.seen > 0).sum())
                dup = int((state.seen - 1).clamp(min=0).sum())
                print(f"epoch {state.epoch + 1}/{args.epochs} done: step {state.step} world "
                      f"{bagua.get_world_size()} samples_seen {state.samples_seen} test_acc "
                      f"{evaluate(model, test):.4f} coverage processed {processed} of {n} "
                      f"missed {n - processed} duplicates {dup}", flush=True)
            state.seen.zero_()
            state.epoch += 1
            sampler.set_epoch(state.epoch)
            state.commit()

    t0 = time.monotonic()
    train_loop(state)
    rank = bagua.get_rank()
    print(f"rank {rank}: {state.step} steps in {time.monotonic() - t0:.2f} s, world "
          f"{bagua.get_world_size()}", flush=True)
    print(f"final rank={rank} step={state.step} params_crc={params_crc(model):08x} "
          f"test_acc={evaluate(model, test):.4f} samples_seen={state.samples_seen}", flush=True)
    return 0


def pick_device(args):
    """The training device: with --device cuda, the GPU of this worker's local rank (as
    upstream's examples: torch.cuda.set_device(local rank) before anything touches CUDA)."""
    if args.device == "cpu":
        return torch.device("cpu")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local % torch.cuda.device_count())
    return torch.device("cuda", torch.cuda.current_device())


def sync(device):
    """Waits for the device's queued work, so that a host clock read times the GPU too."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bagua_options(args):
    """Constructor arguments of --algorithm's class that flags set (--algorithm powersgd's
    --powersgd-rank and --powersgd-start)."""
    if args.algorithm != "powersgd":
        return {}
    options = {"rank": args.powersgd_rank, "warmup_steps": args.powersgd_start}
    return {k: v for k, v in options.items() if v is not None}


def register_ddp_hook(model, args):
    """Registers --ddp-hook's communication hook on the DDP model; returns the hook's state
    (PowerSGD's, whose counters say what it did), or None."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
    if args.ddp_hook == "fp16":
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif args.ddp_hook == "powersgd":
        state = powerSGD_hook.PowerSGDState(process_group=None,
                                            matrix_approximation_rank=args.powersgd_rank,
                                            start_powerSGD_iter=args.powersgd_start)
        model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
        return state
    return None


def ddp_hook_report(model, args, state):
    """What DDP says of its hook: the name it logged (torch's own record of the registered
    hook, "builtin" without one), and for PowerSGD its step count and compression."""
    name = model._get_ddp_logging_data().get("comm_hook") or "builtin allreduce"
    text = f"ddp comm hook {name}"
    if state is not None:
        rate, before, after = state.compression_stats()
        text += (f" (rank {args.powersgd_rank}, start {args.powersgd_start}): {state.iter} "
                 f"steps, {before} elements compressed to {after}, rate {rate:.1f}")
    return text


def main():
    args = parse()
    torch.manual_seed(args.seed)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    if args.elastic:
        return main_elastic(args)
    use_bagua = not (args.ddp or args.plain)
    device = pick_device(args)
    if args.plain:
        rank, world = 0, 1
    elif args.ddp:
        import torch.distributed as dist
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
    else:
        import bagua.torch_api as bagua
        bagua.init_process_group()
        rank, world = bagua.get_rank(), bagua.get_world_size()
    train, test = datasets(args)
    sampler = torch.utils.data.distributed.DistributedSampler(
        train, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    loader = torch.utils.data.DataLoader(train, batch_size=args.batch_size, sampler=sampler)
    model = make_model(args).to(device)
    qadam = args.algorithm == "qadam" and use_bagua
    lr = args.lr if args.lr is not None else (4e-3 if qadam else 0.05)
    if qadam:
        from bagua.torch_api.algorithms import q_adam
        optimizer = q_adam.QAdamOptimizer(model.parameters(), lr=lr,
                                          warmup_steps=max(1, len(loader) // 5))
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    if args.ddp:
        ddp_options = {}
        if args.ddp_hook == "powersgd" and device.type == "cpu":
            # torch's powerSGD_hook issues its P and Q allreduces from future callbacks on
            # Gloo's worker threads and waits inside them: with two buckets or more the ranks
            # issue them in different orders (Gloo aborts on mismatched sizes) or every worker
            # thread waits (a hang). One bucket, the first included, keeps one chain in flight.
            dist._DEFAULT_FIRST_BUCKET_BYTES = 1 << 40
            ddp_options["bucket_cap_mb"] = 1 << 20
            print("ddp: --ddp-hook powersgd on Gloo runs with one bucket (torch's hook "
                  "deadlocks or aborts with more)", flush=True)
        model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None,
            **ddp_options)
        hook_state = register_ddp_hook(model, args)
    elif use_bagua:
        from bagua.torch_api import algorithms
        if args.fuse:
            optimizer = bagua.contrib.fuse_optimizer(optimizer)
        if args.algorithm_from_env:
            # The launcher's algorithm and options; a flag still wins, and the script's own
            # async period (50 ms) gives way to BAGUA_SYNC_INTERVAL_MS.
            flags = {}
            if args.sync_interval_ms is not None and args.algorithm == "async":
                flags["sync_interval_ms"] = args.sync_interval_ms
            algorithm = algorithms.from_env(optimizer, defaults={"sync_interval_ms": 50},
                                            **flags)
        elif qadam:
            algorithm = algorithms.q_adam.QAdamAlgorithm(optimizer)
        elif args.algorithm == "async":
            algorithm = algorithms.AsyncModelAverageAlgorithm(
                sync_interval_ms=args.sync_interval_ms or 50)
        else:
            algorithm = algorithms.from_name(args.algorithm, **bagua_options(args))
        model = model.with_bagua([optimizer], algorithm,
                                 do_flatten=not args.no_flatten)
    step, t0, samples = 0, time.monotonic(), 0
    t_warm = t0  # end of the warm-up steps; the steady-state step time counts from here
    wait_s, sent, t_fb = 0.0, 0, 0.0  # libbagua's wait for communication, bytes, fwd+bwd
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            optimizer.zero_grad()
            t1 = time.monotonic()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            t_fb += time.monotonic() - t1
            if args.fuse:
                optimizer.fuse_step()
            else:
                optimizer.step()
            step += 1
            samples += len(x)
            if step == args.timing_warmup:
                sync(device)
                t_warm = time.monotonic()
            if use_bagua:
                st = model.bagua_stats()
                wait_s += st["wait_s_last_step"]
                sent += st["bytes_last_step"]
            if args.max_steps and step >= args.max_steps:
                break
        if args.max_steps and step >= args.max_steps:
            break
        if rank == 0:
            print(f"epoch {epoch + 1}: loss {loss.item():.4f}, "
                  f"{samples * world / (time.monotonic() - t0):.0f} samples/s", flush=True)
    sync(device)
    t_end = time.monotonic()
    t_loop = t_end - t0  # the training loop alone, before any evaluation
    # Steady state: the loop without its first steps (buckets, communicators and torch's own
    # first-call set-up) and without the evaluation, which the samples/s above include.
    steady = (t_end - t_warm) / max(step - args.timing_warmup, 1) if step > args.timing_warmup \
        else t_loop / max(step, 1)
    if use_bagua and args.algorithm == "async":
        algorithm.abort(model)
    net = model.module if args.ddp else model
    if args.ddp and rank == 0:
        print(ddp_hook_report(model, args, hook_state), flush=True)
    acc = evaluate(net, test)
    secs = time.monotonic() - t0
    print(f"rank {rank}: {step} steps in {secs:.2f} s, {samples * world / secs:.0f} samples/s, "
          f"fwd+bwd {t_fb / max(step, 1) * 1e3:.2f} ms/step (of which waiting for communication "
          f"{wait_s / max(step, 1) * 1e3:.2f} ms), {sent / max(step, 1):.0f} bytes/step, "
          f"loop {t_loop / max(step, 1) * 1e3:.3f} ms/step, "
          f"steady {steady * 1e3:.3f} ms/step"
          + (f", algorithm {algorithm.name}" if use_bagua else "") + f", device {device}",
          flush=True)
    print(f"final rank={rank} step={step} params_crc={params_crc(net):08x} test_acc={acc:.4f}",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
