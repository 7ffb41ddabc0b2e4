"""The benchmark scripts that only run where a GPU is lent must not rot in between: run
bench/nccl_net_torch.py in its CPU mode (Gloo, the same loop and result check) and check its
table, its JSON file and its refusal of bad arguments."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "bench", "nccl_net_torch.py")


def run(args, timeout=120):
    return subprocess.run([sys.executable, SCRIPT] + args, capture_output=True, text=True,
                          timeout=timeout)


def test_nccl_net_torch_cpu_mode(tmp_path):
    out = tmp_path / "r.json"
    r = run(["--backend", "gloo", "--device", "cpu", "--min-bytes", "64K", "--max-bytes", "1M",
             "--iters", "3", "--warmup", "1", "--json", str(out)])
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [line.split() for line in r.stdout.splitlines() if line.startswith("nccl-socket")]
    # 64 KiB, 256 KiB, 1 MiB: sizes grow by 4x, every result checked against the closed form.
    assert [int(row[1]) for row in rows] == [65536, 262144, 1048576], r.stdout
    assert all(row[-1] == "ok" and float(row[3]) > 0 for row in rows), r.stdout
    data = json.loads(out.read_text())
    assert data["label"] == "nccl-socket" and len(data["results"]) == 3
    assert all(x["check"] for x in data["results"])


def test_nccl_net_torch_refuses_bad_arguments(tmp_path):
    r = run(["--backend", "gloo", "--device", "cpu", "--nranks", "1"])
    assert r.returncode == 2 and "--nranks >= 2" in r.stderr, r.stderr
    r = run(["--backend", "gloo", "--device", "cpu", "--plugin", str(tmp_path / "missing.so")])
    assert r.returncode == 2 and "no such file" in r.stderr, r.stderr
