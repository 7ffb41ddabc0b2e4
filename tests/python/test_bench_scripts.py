"""The benchmark scripts under bench/ must not rot between the runs that use them:

- bench/nccl_net_torch.py, which only measures where a GPU is lent, runs here in its CPU mode
  (Gloo, the same loop and result check); its table, its JSON file and its refusal of bad
  arguments are checked.
- Every benchmark keeps a record of its runs (bench/record.py): the helper's Python side, and
  the torch-based scripts in a quick mode (tiny sizes, 3 repetitions), must leave a record with
  every meta field, one raw.csv row per run, the variants interleaved, and print
  "median [min-max]". tests/bench/check_record.py checks a record; tests/bench/record.sh
  (ctest bench_record) covers the scripts that need no torch."""

import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "bench", "nccl_net_torch.py")
BUILD = os.environ.get("BAGUA_BUILD_DIR", os.path.join(ROOT, "build"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "tests", "bench"))
import check_record  # noqa: E402
import record  # noqa: E402

# Scripts that run as root only (network namespaces) are not run here: tradeoff.sh,
# linkrate.sh, advise.sh, netplugin_netns.sh and netsim/tcp_ceiling.sh.
RANGE = r"[0-9.]+ \[[0-9.]+-[0-9.]+\]"


def run(args, timeout=120):
    return subprocess.run([sys.executable, SCRIPT] + args, capture_output=True, text=True,
                          timeout=timeout)


def assert_record(path, rows, variants, group=None):
    bad = check_record.problems(str(path), rows, variants.split(), 0, group)
    assert not bad, "\n".join(bad)


def test_nccl_net_torch_cpu_mode(tmp_path):
    out = tmp_path / "r.json"
    r = run(["--backend", "gloo", "--device", "cpu", "--min-bytes", "64K", "--max-bytes", "1M",
             "--iters", "3", "--warmup", "1", "--json", str(out),
             "--record-dir", str(tmp_path / "rec")])
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [line.split() for line in r.stdout.splitlines() if line.startswith("nccl-socket")]
    # 64 KiB, 256 KiB, 1 MiB: sizes grow by 4x, every result checked against the closed form.
    assert [int(row[1]) for row in rows] == [65536, 262144, 1048576], r.stdout
    assert all(row[-1] == "ok" and float(row[3]) > 0 for row in rows), r.stdout
    data = json.loads(out.read_text())
    assert data["label"] == "nccl-socket" and len(data["results"]) == 3
    assert all(x["check"] for x in data["results"])
    assert_record(tmp_path / "rec", 3, "nccl-socket")


def test_nccl_net_torch_repeat(tmp_path):
    r = run(["--backend", "gloo", "--device", "cpu", "--min-bytes", "64K", "--max-bytes", "256K",
             "--iters", "2", "--warmup", "1", "--repeat", "3",
             "--record-dir", str(tmp_path / "rec")])
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [line for line in r.stdout.splitlines() if line.startswith("nccl-socket")]
    assert len(rows) == 2 and all(re.search(r"ok  " + RANGE + "$", x) for x in rows), r.stdout
    # 2 sizes x 3 repeats, the sizes interleaved: one "run" of the label per repeat.
    assert_record(tmp_path / "rec", 6, "nccl-socket")
    meta = check_record.read_meta(str(tmp_path / "rec"))
    assert meta["backend"] == "gloo" and meta["torch"].startswith("1."), meta


def test_nccl_net_torch_refuses_bad_arguments(tmp_path):
    r = run(["--backend", "gloo", "--device", "cpu", "--nranks", "1"])
    assert r.returncode == 2 and "--nranks >= 2" in r.stderr, r.stderr
    r = run(["--backend", "gloo", "--device", "cpu", "--plugin", str(tmp_path / "missing.so")])
    assert r.returncode == 2 and "no such file" in r.stderr, r.stderr
    r = run(["--backend", "gloo", "--device", "cpu", "--repeat", "0"])
    assert r.returncode == 2 and "--repeat >= 1" in r.stderr, r.stderr


def test_record_python_side(tmp_path, monkeypatch):
    monkeypatch.setenv("BAGUA_NET_NSTREAMS", "1")
    monkeypatch.setenv("NCCL_DEBUG", "INFO warn")
    rec = record.open_record("demo", ["bench/demo.py", "--x", "a b"], ["size:B", "ms:ms"],
                             path=str(tmp_path / "rec"), extra={"backend": "none"})
    for rep in range(3):
        for variant in ("a", "b"):
            rec.row(variant, rep, 64, 1.5)
    rec.close(0)
    rec.close(0)  # closing twice writes the end once
    assert_record(tmp_path / "rec", 6, "a b")
    meta = check_record.read_meta(str(tmp_path / "rec"))
    assert meta["command"] == "bench/demo.py --x 'a b'" and meta["backend"] == "none"
    # The settings that change a measurement are kept, whatever else the environment holds.
    assert "BAGUA_NET_NSTREAMS=1" in meta["settings"].split(), meta
    assert "NCCL_DEBUG='INFO warn'" in meta["settings"], meta
    # The checker can fail: the same rows in blocks are rejected.
    bad = check_record.problems(str(tmp_path / "rec"), 6, ["b", "a"])
    assert any("not interleaved" in b for b in bad), bad
    with pytest.raises(FileExistsError):
        record.open_record("demo", ["x"], ["v"], path=str(tmp_path / "rec"))
    with pytest.raises(ValueError):
        rec.row("a", 3, 1)  # one value for two columns
    assert record.stat([3, 1, 2], ".1f") == "2.0 [1.0-3.0]"
    assert record.stat([1, 2], ".1f") == "1.0, 2.0 (2 runs)"
    assert record.stat(["n/a"], ".1f") == "n/a"
    assert record.median([1, 2]) == 1.5 and record.median(["fail"]) is None
    # The shell side prints what the Python side computes.
    sh = subprocess.run(["bash", "-c", f'. "{ROOT}/bench/record.sh"; record_stat .1f 3 1 2'],
                        capture_output=True, text=True)
    assert sh.stdout.strip() == "2.0 [1.0-3.0]", sh.stderr


def test_fuse_optimizer_records(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.path.join(BUILD, "python"))
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "fuse_optimizer.py"),
                        "--layers", "4", "--width", "8", "--steps", "2", "--repeat", "3",
                        "--record-dir", str(tmp_path / "rec")],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"^\| sgd \| " + RANGE + r" \| " + RANGE + r" \| [0-9.]+x \|$", r.stdout,
                     re.M), r.stdout
    # 5 optimizers x 3 repeats x (step, fuse_step), interleaved within each optimizer.
    assert_record(tmp_path / "rec", 30, "step fuse_step", group="optimizer")


def shell_bench(name, args, timeout=300):
    return subprocess.run([os.path.join(ROOT, "bench", name), "--build", BUILD, *args],
                          capture_output=True, text=True, timeout=timeout)


def test_torch_vs_ddp_records(tmp_path):
    r = shell_bench("torch_vs_ddp.sh", [
        "--nranks", "2", "--models", "cnn", "--steps", "3", "--repeat", "3",
        "--algorithms", "gradient_allreduce bytegrad", "--test-limit", "64",
        "--record-dir", str(tmp_path / "rec")])
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"^\| 2 \| cnn \| bytegrad \| " + RANGE + r" \| [0-9.]+ \| " + RANGE,
                     r.stdout, re.M), r.stdout
    assert_record(tmp_path / "rec", 9, "ddp gradient_allreduce bytegrad")
    assert "torch" in check_record.read_meta(str(tmp_path / "rec"))


def test_torch_overhead_records(tmp_path):
    r = shell_bench("torch_overhead.sh", ["--steps", "3", "--repeat", "2",
                                          "--record-dir", str(tmp_path / "rec")])
    assert r.returncode == 0, r.stdout + r.stderr
    # 2 repeats: every cell lists its runs and says so; no median is printed.
    assert "note: 2 runs per cell" in r.stdout, r.stdout
    assert re.search(r"^\| cnn \| [0-9.]+, [0-9.]+ \(2 runs\) \|", r.stdout, re.M), r.stdout
    assert not re.search(RANGE, r.stdout), r.stdout
    assert_record(tmp_path / "rec", 6, "plain bagua ddp")


def test_tradeoff_refuses_bad_arguments_before_anything_starts():
    """tradeoff.sh needs root for its namespaces, but its arguments are checked first."""
    script = os.path.join(ROOT, "bench", "tradeoff.sh")
    for args, message in ((["--lr", "fast"], '--lr "fast" is not a positive number'),
                          (["--batch", "0"], '--batch "0" is not a positive integer'),
                          (["--bogus"], 'unknown argument "--bogus"'),
                          (["--variants", "ddp async:communication_interval=2"],
                           'variant "async:communication_interval=2": algorithm async has no '
                           "option 'communication_interval' set by a variable; accepted: "
                           "sync_interval_ms, warmup_steps"),
                          (["--variants", "decentralized:communication_interval=0"],
                           "BAGUA_COMMUNICATION_INTERVAL"),
                          (["--variants", "decentralized:communication_interval"],
                           "option 'communication_interval' has no =VALUE"),
                          (["--variants", "ddp:lr=1"],
                           'variant "ddp:lr=1": ddp has no option "lr"'),
                          (["--variants", "gradient_allreduce:BAGUA_NET_NSTREAMS=99"],
                           "BAGUA_NET_NSTREAMS=99 is out of range; accepted: an integer in "
                           "[1, 16]"),
                          (["--variants", "async:BAGUA_BOGUS=1"],
                           "unknown parameter BAGUA_BOGUS")):
        r = subprocess.run(["bash", script, "--build", BUILD] + args, capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 2 and message in r.stderr, (args, r.returncode, r.stderr)
