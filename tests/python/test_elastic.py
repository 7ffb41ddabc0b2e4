"""Elastic torch training in-process (bagua.torch_api.elastic): real etcd, real bagua-agents
(one per emulated node, told apart by --node-id) running examples/torch/train.py --elastic.
A node is SIGKILLed mid-epoch and a fourth joins mid-epoch: the surviving workers are never
restarted, every worker ends with the same parameters, and every sample of every epoch is
trained on exactly once (drop_last leaves out at most world - 1 per layout).

The same on the GPU (marked ``gpu``; scripts/gpu-check.sh runs it): three ranks share the one
GPU, each worker with its own NCCL_HOSTID, so every round change rebuilds libbagua's NCCL
communicators while the survivors go on; the data are generated (--synthetic), since a GPU
machine has no Debian dataset."""

import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

from conftest import AGENT, ETCD, HERE, registered

from bagua import _C

EXAMPLE = os.path.join(HERE, "..", "..", "examples", "torch", "train.py")
FAST = ["--last-call-ms", "200", "--settle-ms", "300", "--lease-ttl", "2", "--grace-ms", "2000"]
EPOCH = re.compile(r"epoch (\d+)/\d+ done: step \d+ world (\d+) samples_seen (\d+) test_acc "
                   r"[0-9.]+ coverage processed (\d+) of (\d+) missed (\d+) duplicates (\d+)")
FINAL = re.compile(r"final rank=(\d+) step=(\d+) params_crc=([0-9a-f]+) test_acc=([0-9.]+) "
                   r"samples_seen=(\d+)")

HAS_GPU = bool(_C.cuda_built) and torch.cuda.is_available()
DEVICES = ["cpu", pytest.param("cuda", marks=[
    pytest.mark.gpu, pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU")])]
pytestmark = pytest.mark.skipif(not (os.access(AGENT, os.X_OK) and os.access(ETCD, os.X_OK)),
                                reason="bagua-agent (BAGUA_BUILD_DIR) or etcd not found")


def start_in_order(tmp_path, endpoint, job, nodes, args, agents, device="cpu"):
    """Starts agents one after the other, each once the previous registered, so that the
    oldest (n1) holds rank 0 in every round."""
    for node in nodes:
        agents[node] = Agent(tmp_path, endpoint, node, job, args, device)
        deadline = time.monotonic() + 30
        while not registered(endpoint, job, node):
            assert time.monotonic() < deadline, f"{node} did not register:\n{agents[node].text()}"
            time.sleep(0.05)


class Agent:
    def __init__(self, tmp_path, endpoint, node, job, args, device="cpu"):
        self.node = node
        self.path = tmp_path / f"{node}.log"
        self.log = open(self.path, "w")
        env = dict(os.environ, OMP_NUM_THREADS="1", BAGUA_COMM_TIMEOUT_MS="10000",
                   BAGUA_RDZV_TIMEOUT_S="60")
        worker = [sys.executable, EXAMPLE, "--elastic", "--device", device, *args]
        if device == "cuda":
            # Ranks sharing one GPU must look like distinct hosts to NCCL: a NCCL_HOSTID per
            # worker process (a restarted worker gets a new one, as a new host would).
            env.update(NCCL_SOCKET_IFNAME="lo", NCCL_IB_DISABLE="1")
            worker = ["/bin/sh", "-c", 'NCCL_HOSTID="bagua-$$" exec "$0" "$@"', *worker]
        cmd = [AGENT, "--rdzv-endpoint", endpoint, "--job-id", job, "--node-id", node,
               "--nnodes", "2:4", "--nproc-per-node", "1", "--max-restarts", "0", *FAST,
               "--", *worker]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)

    def text(self):
        self.log.flush()
        return self.path.read_text()

    def wait_for(self, pattern, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = re.search(pattern, self.text())
            if m:
                return m
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"{self.node}: no {pattern!r} within {timeout} s:\n{self.text()}")

    def wait_exit(self, timeout):
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"{self.node}: still running after {timeout} s:\n{self.text()}")


@pytest.mark.parametrize("device", DEVICES)
def test_survives_a_killed_node_and_a_joining_node(tmp_path, etcd, device):
    job = f"torch-elastic-{os.getpid()}"
    if device == "cuda":
        args, min_acc = ["--epochs", "5", "--synthetic", "30000"], 0.3
    else:
        args, min_acc = ["--epochs", "5", "--train-limit", "30000", "--test-limit", "500"], 0.7
    agents = {}
    try:
        start_in_order(tmp_path, etcd, job, ["n1", "n2", "n3"], args, agents, device)
        first = agents["n1"]
        first.wait_for(r"train\.py: elastic, world 3", 120)
        first.wait_for(r"epoch 1/5 done", 180)
        agents["n3"].proc.send_signal(signal.SIGKILL)  # its worker dies with it
        agents["n3"].proc.wait(10)
        first.wait_for(r"round \d+ world 2 recovery_ms \d+", 120)
        agents["n4"] = Agent(tmp_path, etcd, "n4", job, args, device)
        first.wait_for(r"round \d+ world 3 recovery_ms \d+", 120)
        for node in ["n1", "n2", "n4"]:
            code = agents[node].wait_exit(300)
            assert code == 0, f"{node} exited {code}:\n{agents[node].text()}"
    finally:
        for a in agents.values():
            if a.proc.poll() is None:
                a.proc.kill()
                a.proc.wait()
    out = {node: agents[node].text() for node in ["n1", "n2", "n4"]}
    for line in out["n1"].splitlines():  # shown with pytest -s: the measured recoveries
        if "recovery_ms" in line or "done:" in line:
            print(line)
    # The survivors' workers were never restarted: rank 0 (n1's worker) started once.
    assert out["n1"].count("train.py: elastic, world") == 1, out["n1"]
    assert "(after a failed step)" in out["n1"], out["n1"]
    finals = {}
    for node, text in out.items():
        m = FINAL.findall(text)
        assert len(m) == 1, f"{node}: {m}\n{text}"
        finals[node] = m[0]
    assert len({f[2] for f in finals.values()}) == 1, f"parameters differ: {finals}"
    assert len({f[4] for f in finals.values()}) == 1, f"samples_seen differs: {finals}"
    assert sorted(int(f[0]) for f in finals.values()) == [0, 1, 2]
    epochs = EPOCH.findall(out["n1"])
    assert [int(e[0]) for e in epochs] == [1, 2, 3, 4, 5], out["n1"]
    for e in epochs:
        processed, total, missed, dup = int(e[3]), int(e[4]), int(e[5]), int(e[6])
        assert dup == 0, f"epoch {e[0]}: {dup} samples trained on twice"
        # Per world layout of an epoch drop_last leaves out at most world - 1 (< 3) samples;
        # an epoch here sees at most 3 layouts.
        assert missed <= 6 and processed + missed == total, e
    assert int(finals["n1"][4]) == sum(int(e[3]) for e in epochs)
    for node, f in finals.items():
        assert float(f[3]) >= min_acc, f"{node}: test accuracy {f[3]}"
