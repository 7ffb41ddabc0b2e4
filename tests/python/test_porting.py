"""What a script ported from upstream Bagua combines (workers/porting_worker.py): every
algorithm under a learning-rate scheduler built after with_bagua; fuse_step on a with_bagua
module in both orders of wrapping, flattened or not, against an unfused twin; async
abort/resume in any order; switching algorithms by a second with_bagua; the
DistributedDataParallel wrapper's no_sync, buffers and defaults; ignored parameters.

One 2-rank job runs every case (a job per case would spend most of its time starting torch);
each case is reported as its own test."""

import os
import re
import sys

import pytest

from conftest import HERE, run_workers

sys.path.insert(0, os.path.join(HERE, "workers"))
CASES = list(__import__("porting_worker").CASES)


@pytest.fixture(scope="module")
def job():
    r = run_workers("porting_worker.py", 2, nodes=2, timeout=600)
    passed = [set(re.findall(r"^case (\S+) ok$", out, re.M)) for out in r.outputs]
    return r, passed


def test_cases_listed():
    assert len(CASES) > 20, CASES


@pytest.mark.parametrize("case", CASES)
def test_case(job, case):
    r, passed = job
    missing = [rank for rank, ok in enumerate(passed) if case not in ok]
    assert not missing, "\n".join(f"--- rank {rank} (exit {r.codes[rank]}):\n{r.outputs[rank]}"
                                  for rank in missing)
