"""Bad input raises the documented exception naming the problem; a dead peer raises a
BaguaError within the communicator's timeout. usage: errors_worker.py inputs|deadpeer"""

import os
import signal
import sys
import time

import torch

import bagua.torch_api as bagua
from bagua import _C


def expect(exc, fn, *words):
    try:
        fn()
    except exc as e:
        for w in words:
            assert w in str(e), f"{exc.__name__} message {str(e)!r} does not name {w!r}"
        return e
    raise AssertionError(f"{fn} did not raise {exc.__name__}")


def inputs():
    bagua.init_process_group()
    expect(RuntimeError, bagua.init_process_group, "already")
    t = torch.zeros(8)
    expect(TypeError, lambda: bagua.allreduce_inplace([1, 2]), "torch.Tensor")
    expect(TypeError, lambda: bagua.allreduce_inplace(torch.zeros(4, dtype=torch.complex64)),
           "complex64", "accepted")
    expect(ValueError, lambda: bagua.allreduce_inplace(torch.zeros(4, 4).t()), "contiguous")
    expect(ValueError, lambda: bagua.allreduce(t, torch.zeros(7)), "8", "7")
    expect(TypeError, lambda: bagua.allreduce(t, torch.zeros(8, dtype=torch.float64)), "dtype")
    expect(ValueError, lambda: bagua.allreduce_inplace(t, op=bagua.ReduceOp.BXOR), "BXOR",
           "integer")
    expect(ValueError, lambda: bagua.allgather(t, torch.zeros(3)), "world size")
    # libbagua's own checks come back as BaguaError subclasses with the status name.
    expect(ValueError, lambda: bagua.broadcast(t, src=5), "src=5")
    e = expect(_C.BaguaInvalidArgError,
               lambda: bagua.get_default_group().comm.broadcast(t.data_ptr(), t.data_ptr(),
                                                                t.numel(), _C.F32, 5), "root")
    assert e.status_name == "BAGUA_ERR_INVALID_ARG" and isinstance(e, bagua.BaguaError)
    assert isinstance(e, RuntimeError)
    print("inputs: every bad input raised the documented exception")


def deadpeer():
    bagua.init_process_group()
    t = torch.ones(1000)
    bagua.allreduce_inplace(t)
    if bagua.get_rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    t0 = time.monotonic()
    e = expect(bagua.BaguaError, lambda: [bagua.allreduce_inplace(t) for _ in range(1000)])
    took = time.monotonic() - t0
    limit = int(_C.param_get("BAGUA_COMM_TIMEOUT_MS")) / 1000 + 1
    assert took < limit, f"the survivor raised after {took:.2f} s, more than {limit} s"
    print(f"deadpeer: {type(e).__name__} after {took:.2f} s: {e}")


def interrupt():
    """Ctrl-C while rank 0 is blocked in a collective rank 1 never joins: KeyboardInterrupt at
    once, not after BAGUA_COMM_TIMEOUT_MS (60 s here)."""
    import threading
    bagua.init_process_group()
    if bagua.get_rank() == 1:
        time.sleep(6)
        return
    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
    t0 = time.monotonic()
    try:
        bagua.allreduce_inplace(torch.ones(10))
    except KeyboardInterrupt:
        took = time.monotonic() - t0
        assert took < 3.0, f"KeyboardInterrupt after {took:.2f} s"
        print(f"interrupt: KeyboardInterrupt after {took:.2f} s")
        return
    raise AssertionError("the blocked allreduce returned without an interrupt")


def phase():
    """BAGUA_STEP_CHECK=1: steps numbered alike train; rank 1 skipping an iteration makes
    that step raise BaguaProtocolError on both ranks, naming both numbers."""
    bagua.init_process_group()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model = model.with_bagua([opt], bagua.algorithms.gradient_allreduce
                             .GradientAllReduceAlgorithm())
    rank = bagua.get_rank()
    for it in range(6):
        if it == 3 and rank == 1:
            continue  # the bug the check exists for: this rank skips an iteration
        model.bagua_set_step(it)
        opt.zero_grad()
        try:
            model(torch.randn(4, 8)).sum().backward()
            opt.step()
        except _C.BaguaProtocolError as e:
            print(f"phase: iteration {it}: {type(e).__name__}: {e}", flush=True)
            return
    print("phase: no error", flush=True)
    sys.exit(1)


def _ddp_model():
    """A 2-rank DistributedDataParallel model with its optimizer, alike on every rank."""
    from bagua.torch_api.data_parallel import DistributedDataParallel
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return DistributedDataParallel(model, optimizers=[opt]), opt


def nosync():
    """BAGUA_STEP_CHECK=1 without bagua_set_step: rank 1 runs iteration 2 under no_sync()
    (a local step) while rank 0 communicates; rank 1's next step must not average with rank
    0's iteration 2: both raise BaguaProtocolError there (rank 0 at 2, rank 1 at 3)."""
    bagua.init_process_group()
    model, opt = _ddp_model()
    rank = bagua.get_rank()
    for it in range(6):
        opt.zero_grad()
        try:
            if it == 2 and rank == 1:
                with model.no_sync():
                    model(torch.randn(4, 8)).sum().backward()
            else:
                model(torch.randn(4, 8)).sum().backward()
            opt.step()
        except _C.BaguaProtocolError as e:
            print(f"nosync: iteration {it}: {type(e).__name__}: {e}", flush=True)
            return
    print("nosync: no error", flush=True)
    sys.exit(1)


def accumulate():
    """BAGUA_STEP_CHECK=1 with gradient accumulation alike on every rank (two backward passes
    under no_sync(), then one that communicates): no error, and the weights stay equal."""
    bagua.init_process_group()
    model, opt = _ddp_model()
    torch.manual_seed(1 + bagua.get_rank())  # different data on each rank
    for it in range(4):
        opt.zero_grad()
        with model.no_sync():
            for _ in range(2):
                model(torch.randn(4, 8)).sum().backward()
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    lo, hi = flat.clone(), flat.clone()
    bagua.allreduce(lo, lo, op=bagua.ReduceOp.MIN)
    bagua.allreduce(hi, hi, op=bagua.ReduceOp.MAX)
    assert torch.equal(lo, hi), "the ranks' weights differ after accumulation"
    print("accumulate: ok", flush=True)


def unnumbered():
    """Without BAGUA_STEP_CHECK, bagua_set_step says how to turn numbering on."""
    bagua.init_process_group()
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model = model.with_bagua([opt], bagua.algorithms.gradient_allreduce
                             .GradientAllReduceAlgorithm())
    expect(RuntimeError, lambda: model.bagua_set_step(0), "BAGUA_STEP_CHECK=1")


if __name__ == "__main__":
    {"inputs": inputs, "deadpeer": deadpeer, "interrupt": interrupt, "phase": phase,
     "unnumbered": unnumbered, "nosync": nosync, "accumulate": accumulate}[sys.argv[1]]()
