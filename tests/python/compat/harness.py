"""The multi-process harness of the compatibility tests, with the names upstream Bagua's own
test files use (``MultiProcessTestCase.run_test_locally``, ``setup_bagua_env``,
``find_free_port``), so a test file ported from upstream changes only its imports and its
device.

Each rank is a process of the ``spawn`` context running ``fn(rank, nprocs, args, results,
env)``. Tensors inside ``results`` travel through torch's shared-memory pickling, so what a
rank writes into ``results[rank]`` is visible to the test afterwards. Every rank has a
deadline: a rank still running after it is killed and the test fails, so no test can hang.
"""

import multiprocessing
import os
import unittest

import torch

import bagua.torch_api as bagua

#: Seconds a test's ranks may run before they are killed (the test then fails).
DEADLINE_S = float(os.environ.get("BAGUA_COMPAT_DEADLINE_S", "120"))


def find_free_port(port=None, max_port=None):
    """A loopback TCP port that binds now (the arguments are upstream's range, ignored: the
    port comes from libbagua's picker, which avoids the ephemeral range)."""
    from bagua.torch_api.communication import _free_port
    return _free_port("127.0.0.1")


def skip_if_cuda_available():
    """Upstream's decorator: skips the test where CUDA is available."""
    if torch.cuda.is_available():
        return unittest.skip("skip when cuda is available")
    return lambda func: func


def skip_if_cuda_not_available():
    """Upstream's decorator: skips the test where CUDA is not available."""
    if not torch.cuda.is_available():
        return unittest.skip("skip when cuda is not available")
    return lambda func: func


def base_env(nprocs, local_size=None):
    """The worker variables every rank shares (what a launcher would set)."""
    return {
        "WORLD_SIZE": str(nprocs),
        "LOCAL_WORLD_SIZE": str(local_size or nprocs),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(find_free_port()),
        "BAGUA_SERVICE_PORT": str(find_free_port()),
    }


def setup_bagua_env(rank, env, init=True):
    """Sets this rank's worker variables and joins the job (as upstream's helper does)."""
    for key, value in env.items():
        os.environ[key] = str(value)
    local = int(env.get("LOCAL_WORLD_SIZE", env["WORLD_SIZE"]))
    os.environ["RANK"] = str(rank)
    os.environ["LOCAL_RANK"] = str(rank % local)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    if init:
        bagua.init_process_group()


def run_ranks(fn, nprocs, args=None, results=None, env=None, deadline=None):
    """Runs ``fn(rank, nprocs, args, results, env)`` on ``nprocs`` spawned processes; returns
    their exit codes (a rank killed at the deadline reads as None)."""
    env = dict(env or base_env(nprocs))
    mp = multiprocessing.get_context("spawn")
    procs = [mp.Process(target=fn, args=(rank, nprocs, args, results, env))
             for rank in range(nprocs)]
    for p in procs:
        p.start()
    codes = []
    limit = DEADLINE_S if deadline is None else deadline
    for p in procs:
        p.join(timeout=limit)
        if p.is_alive():
            for q in procs:
                if q.is_alive():
                    q.kill()
            p.join()
            codes.append(None)
        else:
            codes.append(p.exitcode)
    for p in procs:
        p.join()
    return codes


class MultiProcessTestCase(unittest.TestCase):
    """Upstream's base class: ``run_test_locally`` fails the test unless every rank exits 0."""

    def run_test_locally(self, fn, nprocs, args, results, env=None, deadline=None):
        codes = run_ranks(fn, nprocs, args, results, env, deadline)
        self.assertTrue(all(c == 0 for c in codes), f"rank exit codes: {codes}")
