"""The harness itself: a rank that fails, and one that hangs, fail the test."""

import time

from harness import MultiProcessTestCase, run_ranks, setup_bagua_env


def _fail_on_rank_1(rank, nprocs, args, results, env):
    setup_bagua_env(rank, env, init=False)
    if rank == 1:
        raise SystemExit(3)


def _hang_on_rank_0(rank, nprocs, args, results, env):
    if rank == 0:
        time.sleep(60)


class TestHarness(MultiProcessTestCase):
    def test_exit_codes(self):
        self.assertEqual(run_ranks(_fail_on_rank_1, 2), [0, 3])

    def test_deadline(self):
        codes = run_ranks(_hang_on_rank_0, 2, deadline=2)
        self.assertIsNone(codes[0])
