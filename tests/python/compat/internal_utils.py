"""Our own minimal equivalents of the helpers upstream Bagua's test files import from
``tests.internal`` (``common_utils``, ``compressor``, ``torch.common_distributed``) and from
their sibling ``test_c10d_common``, under the same names, so the ported files change only an
import line. Written for these tests, on CPU; none of upstream's helper code is reused.
"""

import functools
import multiprocessing
import os
import tempfile
import unittest

import torch

from harness import DEADLINE_S
# Re-exported under upstream's names.
from harness import find_free_port, skip_if_cuda_available  # noqa: F401
from harness import skip_if_cuda_not_available  # noqa: F401

#: Upstream's ``TEST_WITH_TSAN``: these tests never run under a thread sanitizer.
TEST_WITH_TSAN = False


def filestore_url():
    """The ``init_method`` URL of a torch FileStore the ranks of one spawned run share (upstream
    uses one fixed file; here it is named after the parent test process)."""
    parent = os.getppid() if multiprocessing.parent_process() else os.getpid()
    name = f".bagua.compat.filestore.{parent}"
    return "file://" + os.path.join(tempfile.gettempdir(), name)


def join_processes(processes, timeout=None):
    """Joins spawned ranks with the harness's deadline; ranks still running after it are
    killed (so no test leaves processes behind). Returns the exit codes, None for a killed
    rank."""
    limit = DEADLINE_S if timeout is None else timeout
    codes = []
    for p in processes:
        p.join(timeout=limit)
        if p.is_alive():
            for q in processes:
                if q.is_alive():
                    q.kill()
            p.join()
            codes.append(None)
        else:
            codes.append(p.exitcode)
    for p in processes:
        p.join()
    return codes


class MinMaxUInt8:
    """Upstream's reference min-max 8-bit compressor: ``compress`` maps a float tensor onto
    256 levels between its minimum and maximum and returns ``(minmax, levels)``;
    ``decompress(minmax, levels)`` maps the levels back."""

    levels = 255.0
    eps = 1e-7

    def _grid(self, lo, hi):
        step = self.levels / (hi - lo + self.eps)
        top = torch.round(hi * step)
        return step, top - self.levels

    def compress(self, tensor):
        lo, hi = tensor.min(), tensor.max()
        step, floor = self._grid(lo, hi)
        level = torch.clamp(torch.round(tensor * step), max=floor + self.levels)
        minmax = torch.stack([lo, hi]).to(tensor.dtype)
        return minmax, (level - floor).to(torch.uint8)

    def decompress(self, minmax, compressed):
        step, floor = self._grid(minmax[0], minmax[1])
        return (compressed.float() + floor) / step


def skip_if_lt_x_gpu(x):
    """torch's decorator, for these CPU ports a no-op (the ranks run on CPU)."""
    return lambda func: func


def run_tests():
    unittest.main()


class MultiProcessTestCase(unittest.TestCase):
    """A minimal torch-style multi-process test case: ``setUp`` calls ``_spawn_processes``,
    which runs the test method on ``world_size`` spawned ranks (each sees ``self.rank`` and
    ``self.file_name``); in the test process the method only joins them and checks that every
    rank exited 0."""

    MAIN_PROCESS_RANK = -1

    @property
    def world_size(self):
        return 2

    def __init__(self, method_name="runTest"):
        super().__init__(method_name)
        self.rank = self.MAIN_PROCESS_RANK
        self.file_name = None
        self.processes = []
        fn = getattr(self, method_name)

        @functools.wraps(fn)
        def wrapper():
            if self.rank == self.MAIN_PROCESS_RANK:
                codes = join_processes(self.processes)
                self.assertTrue(all(c == 0 for c in codes), f"rank exit codes: {codes}")
            else:
                fn()
        setattr(self, method_name, wrapper)

    def setUp(self):
        super().setUp()
        handle, self.file_name = tempfile.mkstemp(prefix=".bagua.compat.")
        os.close(handle)

    def tearDown(self):
        super().tearDown()
        for p in self.processes:
            if p.is_alive():
                p.kill()

    def _spawn_processes(self):
        mp = multiprocessing.get_context("spawn")
        env = {k: os.environ[k] for k in ("MASTER_ADDR", "MASTER_PORT", "BAGUA_SERVICE_PORT")
               if k in os.environ}
        self.processes = [
            mp.Process(target=type(self)._run,
                       args=(rank, self._testMethodName, self.file_name, env))
            for rank in range(self.world_size)]
        for p in self.processes:
            p.start()

    @classmethod
    def _run(cls, rank, test_name, file_name, env):
        os.environ.update(env)
        self = cls(test_name)
        self.rank = rank
        self.file_name = file_name
        getattr(self, test_name)()


class AbstractDistributedDataParallelTest:
    """What upstream's ``test_bagua_ddp`` uses of ``test_c10d_common``'s base class: two ranks,
    and the store file removed afterwards."""

    def tearDown(self):
        super().tearDown()
        try:
            os.remove(self.file_name)
        except (OSError, TypeError):
            pass

    @property
    def world_size(self):
        return 2
