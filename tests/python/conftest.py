"""Shared fixtures of the Python front end's tests: a runner that starts N worker processes
the way torchrun does (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) and collects
their exit codes and output, with a deadline so no test can hang."""

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    """A loopback port below the ephemeral range (see the front end's _free_port)."""
    from bagua.torch_api.communication import _free_port
    return _free_port("127.0.0.1")


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


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "gpu: needs a CUDA GPU and a bagua built with CUDA (skipped elsewhere; "
        "scripts/gpu-check.sh runs them with -m gpu)")
