"""Shared fixtures of the Python front end's tests: a runner that starts N worker processes
the way torchrun does (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) and collects
their exit codes and output, with a deadline so no test can hang."""

import base64
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("BAGUA_BUILD_DIR", os.path.join(HERE, "..", "..", "build"))
AGENT = os.path.join(BUILD, "agent", "bagua-agent")
ETCD = shutil.which("etcd") or "/usr/bin/etcd"


def free_port():
    """A loopback port below the ephemeral range (see the front end's _free_port)."""
    from bagua.torch_api.communication import _free_port
    return _free_port("127.0.0.1")


def run_module(cwd, module, *argv, timeout=90, env=None):
    """Runs `python -m MODULE ARGV` in `cwd` with one OpenMP thread per process (and `env` on
    top); returns the completed process, its output merged into stdout."""
    e = dict(os.environ, OMP_NUM_THREADS="1")
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", module, *map(str, argv)], cwd=cwd, env=e,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout)


class Result:
    def __init__(self, codes, outputs):
        self.codes = codes
        self.outputs = outputs

    def check(self):
        bad = [r for r, c in enumerate(self.codes) if c != 0]
        assert not bad, "\n".join(
            f"--- rank {r} exited {self.codes[r]}:\n{self.outputs[r]}" for r in bad)
        return self


def run_workers(script, nranks, args=(), env=None, timeout=120, nodes=1):
    """Runs workers/SCRIPT on `nranks` ranks; returns a Result (codes and outputs).

    `nodes` emulates that many nodes (ranks split evenly; BAGUA_NODE_ID tells them apart)."""
    port = free_port()
    procs = []
    per_node = max(1, nranks // nodes)
    for rank in range(nranks):
        e = dict(os.environ)
        e.update({
            "RANK": str(rank), "WORLD_SIZE": str(nranks), "LOCAL_RANK": str(rank % per_node),
            "LOCAL_WORLD_SIZE": str(per_node), "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port), "BAGUA_NODE_ID": f"node{rank // per_node}",
            "OMP_NUM_THREADS": "1",
        })
        e.update(env or {})
        procs.append(subprocess.Popen(
            [sys.executable, os.path.join(HERE, "workers", script), *map(str, args)], env=e,
            cwd=HERE,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    codes, outputs = [], []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            out, _ = p.communicate()
            out += f"\n(killed after {timeout} s)"
        codes.append(p.returncode)
        outputs.append(out)
    return Result(codes, outputs)


@pytest.fixture
def workers():
    return run_workers


@pytest.fixture
def etcd(tmp_path):
    """A private etcd on free loopback ports; yields its host:port."""
    client, peer = free_port(), free_port()
    log = open(tmp_path / "etcd.log", "w")
    proc = subprocess.Popen(
        [ETCD, "--name", "t", "--data-dir", str(tmp_path / "etcd"),
         "--listen-client-urls", f"http://127.0.0.1:{client}",
         "--advertise-client-urls", f"http://127.0.0.1:{client}",
         "--listen-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-cluster", f"t=http://127.0.0.1:{peer}",
         "--heartbeat-interval", "20", "--election-timeout", "200"],
        stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 20
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{client}/health", timeout=1) as r:
                if b"true" in r.read():
                    break
        except OSError:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            pytest.fail(f"etcd did not become healthy: {open(tmp_path / 'etcd.log').read()}")
        time.sleep(0.1)
    yield f"127.0.0.1:{client}"
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


def registered(endpoint, job, node):
    """True once ``node``'s agent has its record in etcd (the v3 JSON API)."""
    key = base64.b64encode(f"/bagua/{job}/nodes/{node}".encode()).decode()
    req = urllib.request.Request(f"http://{endpoint}/v3/kv/range",
                                 data=json.dumps({"key": key}).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=2) as r:
        return bool(json.loads(r.read()).get("kvs"))


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "gpu: needs a CUDA GPU and a bagua built with CUDA (skipped elsewhere; "
        "scripts/gpu-check.sh runs them with -m gpu)")
