"""python -m bagua.distributed.run and .launch refuse a numeric option that is not finite or
outside its range with exit 2 and "OPTION: why; accepted: ..." (never a traceback), and the
ranges the front doors check are the libbagua registry's."""

import math
import subprocess
import sys

import pytest

from bagua import _C
from bagua.distributed import _common, run

BAD = ("1e306", "nan", "inf", "-1", "abc", "-inf", "1e-300x")


def _refused(argv):
    # "-n1" stands for --nproc_per_node 1 (so that run does not import torch to count GPUs).
    argv = [w for a in argv for w in (["--nproc_per_node", "1"] if a == "-n1" else [a])]
    proc = subprocess.run([sys.executable, *argv, "worker.py"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=60)
    return proc


@pytest.mark.parametrize("key", ["last_call_timeout", "keep_alive_interval", "read_timeout",
                                 "join_timeout", "timeout", "keep_alive_max_attempt"])
@pytest.mark.parametrize("value", BAD)
def test_bad_rdzv_conf_value_exits_2(key, value):
    proc = _refused(["-m", "bagua.distributed.run", "--nproc_per_node", "1", "--rdzv_conf",
                     f"{key}={value}"])
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert key in proc.stderr and "accepted:" in proc.stderr, proc.stderr


@pytest.mark.parametrize("argv, option", [
    (["-m", "bagua.distributed.run", "-n1", "--monitor_interval", "inf"], "--monitor_interval"),
    (["-m", "bagua.distributed.run", "-n1", "--monitor_interval", "nan"], "--monitor_interval"),
    (["-m", "bagua.distributed.run", "-n1", "--monitor_interval", "1e306"], "--monitor_interval"),
    (["-m", "bagua.distributed.run", "-n1", "--max_restarts", "-1"], "--max_restarts"),
    (["-m", "bagua.distributed.run", "-n1", "--max_restarts", "10000000000"], "--max_restarts"),
    (["-m", "bagua.distributed.run", "-n1", "--max_restarts", "abc"], "--max_restarts"),
    (["-m", "bagua.distributed.run", "--nproc_per_node", "100000"], "--nproc_per_node"),
    (["-m", "bagua.distributed.run", "-n1", "--default_bucket_size", "1"],
     "--default_bucket_size"),
    (["-m", "bagua.distributed.run", "-n1", "--autotune_max_samples", "0"],
     "--autotune_max_samples"),
    (["-m", "bagua.distributed.launch", "--nproc_per_node", "100000"], "--nproc_per_node"),
    (["-m", "bagua.distributed.launch", "--default_bucket_size", "-1"],
     "--default_bucket_size"),
])
def test_bad_numeric_option_exits_2(argv, option):
    proc = _refused(argv)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert option in proc.stderr, proc.stderr


def test_keep_alive_product_is_the_lease_ttl():
    with pytest.raises(_common.OptionError, match="keep_alive_interval x"):
        run.rdzv_conf_flags("keep_alive_interval=3000,keep_alive_max_attempt=3")
    assert run.rdzv_conf_flags("keep_alive_interval=1200,keep_alive_max_attempt=3") == [
        "--lease-ttl", "3600"]
    assert run.rdzv_conf_flags("last_call_timeout=600,read_timeout=0.1") == [
        "--last-call-ms", "600000", "--etcd-timeout-ms", "100"]
    assert run.rdzv_conf_flags("last_call_timeout=0") == ["--last-call-ms", "0"]


def _registry_accepts(variable, value):
    return _C.param_check(variable, str(value)) is None


@pytest.mark.parametrize("variable, low, high, per_second", [
    *((v, lo, hi, per) for _, per, lo, hi, v in run.RDZV_CONF_SECONDS.values()),
    ("BAGUA_LEASE_TTL_S", *run.LEASE_TTL_RANGE, 1),
    ("BAGUA_MAX_RESTARTS", *run.MAX_RESTARTS_RANGE, 1),
    ("BAGUA_NPROC_PER_NODE", *run.NPROC_PER_NODE_RANGE, 1),
    ("BAGUA_BUCKET_SIZE", *_common.BUCKET_SIZE_RANGE, 1),
    ("BAGUA_AUTOTUNE_MAX_SAMPLES", *_common.AUTOTUNE_MAX_SAMPLES_RANGE, 1),
])
def test_ranges_are_the_registry_s(variable, low, high, per_second):
    lo, hi = round(low * per_second), round(high * per_second)
    assert _registry_accepts(variable, lo) and _registry_accepts(variable, hi)
    assert not _registry_accepts(variable, lo - 1)
    assert not _registry_accepts(variable, hi + 1)
    assert math.isfinite(low) and math.isfinite(high)
