"""bagua.torch_api.algorithms.from_env(): the algorithm bagua-launch's [algorithm] section
configures (BAGUA_ALGORITHM and the option variables), with no code in the script.

libbagua's registry reads the environment once per process, so every case runs in a fresh
interpreter with the variables it needs; the last one trains on two ranks and checks through
libbagua's byte counters that BAGUA_ALGORITHM=bytegrad really compressed the gradients.
"""

import os
import subprocess
import sys
import textwrap

from conftest import free_port

ALGO_VARS = ("BAGUA_ALGORITHM", "BAGUA_HIERARCHICAL", "BAGUA_PEER_SELECTION_MODE",
             "BAGUA_COMMUNICATION_INTERVAL", "BAGUA_WARMUP_STEPS", "BAGUA_SYNC_INTERVAL_MS",
             "BAGUA_ERROR_FEEDBACK", "BAGUA_BUCKET_SIZE")


def _env(extra):
    e = {k: v for k, v in os.environ.items() if k not in ALGO_VARS}
    e.update(extra)
    return e


def run(code, **env):
    """Runs `code` (after importing the algorithms module as A) with exactly the algorithm
    variables `env`; returns its stdout, or fails with its output."""
    src = "import bagua.torch_api.algorithms as A\n" + textwrap.dedent(code)
    p = subprocess.run([sys.executable, "-c", src], env=_env(env), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, f"exit {p.returncode}\n{p.stdout}{p.stderr}"
    return p.stdout


def test_nothing_set_is_gradient_allreduce():
    out = run("""
        a = A.from_env()
        print(type(a).__name__, a.hierarchical, A.name_from_env())
    """)
    assert out.split() == ["GradientAllReduceAlgorithm", "False", "None"]


def test_algorithm_and_its_options_come_from_the_environment():
    out = run("""
        a = A.from_env()
        print(type(a).__name__, a.hierarchical, a.error_feedback, a.config())
    """, BAGUA_ALGORITHM="ByteGrad", BAGUA_HIERARCHICAL="0", BAGUA_ERROR_FEEDBACK="1")
    assert out.startswith("ByteGradAlgorithm False True "), out
    assert "'error_feedback': 1" in out and "'hierarchical': 0" in out, out

    out = run("""
        a = A.from_env()
        b = A.from_env(communication_interval=1, peer_selection_mode="all")
        print(type(a).__name__, a.peer_selection_mode, a.communication_interval,
              b.peer_selection_mode, b.communication_interval)
    """, BAGUA_ALGORITHM="decentralized", BAGUA_PEER_SELECTION_MODE="ring",
              BAGUA_COMMUNICATION_INTERVAL="3")
    # The environment's options, and the program's arguments winning over them.
    assert out.split() == ["DecentralizedAlgorithm", "ring", "3", "all", "1"], out


def test_precedence_options_then_environment_then_defaults():
    code = """
        a = A.from_env(defaults={"sync_interval_ms": 50, "communication_interval": 9})
        b = A.from_env(defaults={"sync_interval_ms": 50}, sync_interval_ms=20)
        print(type(a).__name__, a.sync_interval_ms, a.warmup_steps, b.sync_interval_ms)
    """
    out = run(code, BAGUA_ALGORITHM="async")
    assert out.split() == ["AsyncModelAverageAlgorithm", "50", "0", "20"], out
    out = run(code, BAGUA_ALGORITHM="async", BAGUA_SYNC_INTERVAL_MS="7", BAGUA_WARMUP_STEPS="4")
    assert out.split() == ["AsyncModelAverageAlgorithm", "7", "4", "20"], out


def test_options_of_other_algorithms_are_ignored():
    out = run("""
        a = A.from_env()
        print(type(a).__name__, a.hierarchical)
    """, BAGUA_SYNC_INTERVAL_MS="7", BAGUA_PEER_SELECTION_MODE="ring",
              BAGUA_COMMUNICATION_INTERVAL="3", BAGUA_WARMUP_STEPS="4")
    assert out.split() == ["GradientAllReduceAlgorithm", "False"], out


def test_qadam_needs_its_optimizer_and_takes_the_warmup():
    out = run("""
        import torch
        from bagua.torch_api.algorithms.q_adam import QAdamOptimizer
        try:
            A.from_env()
        except ValueError as e:
            print("refused:", e)
        opt = QAdamOptimizer([torch.nn.Parameter(torch.zeros(3))])
        a = A.from_env(opt)
        print(type(a).__name__, opt.warmup_steps, a.config()["warmup_steps"])
    """, BAGUA_ALGORITHM="qadam", BAGUA_WARMUP_STEPS="4")
    assert "refused: BAGUA_ALGORITHM=qadam needs the model's QAdamOptimizer" in out, out
    assert out.splitlines()[-1].split() == ["QAdamAlgorithm", "4", "4"], out


def test_bad_values_are_refused_by_name():
    code = """
        try:
            A.from_env()
        except ValueError as e:
            print("refused:", e)
    """
    out = run(code, BAGUA_ALGORITHM="sgd")
    assert "refused: BAGUA_ALGORITHM='sgd' is invalid; accepted: gradient_allreduce" in out, out
    out = run(code, BAGUA_ALGORITHM="decentralized", BAGUA_COMMUNICATION_INTERVAL="0")
    assert "refused: BAGUA_COMMUNICATION_INTERVAL='0' is invalid; accepted: an integer" in out, out


def test_env_of_is_the_inverse_of_from_env():
    """env_of() gives the variables under which from_env() builds the same algorithm, and
    refuses what from_env() could not build, naming what is accepted."""
    out = run("""
        env = A.env_of("low_precision_decentralized", communication_interval=3,
                       hierarchical=False)
        print(sorted(env.items()))
    """)
    assert out.strip() == ("[('BAGUA_ALGORITHM', 'low_precision_decentralized'), "
                           "('BAGUA_COMMUNICATION_INTERVAL', '3'), "
                           "('BAGUA_HIERARCHICAL', '0')]"), out
    out = run("""
        a = A.from_env()
        print(type(a).__name__, a.communication_interval, a.hierarchical)
    """, BAGUA_ALGORITHM="low_precision_decentralized", BAGUA_COMMUNICATION_INTERVAL="3",
              BAGUA_HIERARCHICAL="0")
    assert out.split() == ["LowPrecisionDecentralizedAlgorithm", "3", "False"], out

    out = run("""
        for name, opts in [("sgd", {}), ("async", {"communication_interval": 2}),
                           ("decentralized", {"communication_interval": 0}),
                           ("async", {"warmup_steps": "x"})]:
            try:
                A.env_of(name, **opts)
                print("accepted", name, opts)
            except ValueError as e:
                print("refused:", e)
    """)
    lines = out.splitlines()
    assert lines[0].startswith("refused: algorithm 'sgd' is unknown; accepted: "
                               "gradient_allreduce"), out
    assert lines[1] == ("refused: algorithm async has no option 'communication_interval' set "
                        "by a variable; accepted: sync_interval_ms, warmup_steps"), out
    assert lines[2].startswith("refused: decentralized communication_interval=0: "
                               "BAGUA_COMMUNICATION_INTERVAL"), out
    assert "accepted: an integer" in lines[2], out
    assert lines[3].startswith("refused: async warmup_steps=x: BAGUA_WARMUP_STEPS"), out


def test_auto_is_refused_with_a_reason():
    """BAGUA_ALGORITHM=auto (the C layer's advisor switch) is refused here, clearly."""
    out = run("""
        try:
            A.from_env()
        except ValueError as e:
            print("refused:", e)
    """, BAGUA_ALGORITHM="auto")
    assert "refused: BAGUA_ALGORITHM='auto' is supported by libbagua's C data-parallel layer " \
        "only" in out, out
    assert "accepted here: gradient_allreduce" in out, out


WORKER = """
import sys
import torch
import torch.nn as nn
import torch.nn.functional as F
import bagua.torch_api as bagua
from bagua.torch_api import algorithms

bagua.init_process_group()
me = bagua.get_rank()
torch.manual_seed(7)
model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
algo = algorithms.from_env() if sys.argv[1] == "env" else algorithms.from_name(sys.argv[1])
model = model.with_bagua([opt], algo)
g = torch.Generator().manual_seed(100 + me)
for _ in range(3):
    opt.zero_grad()
    F.cross_entropy(model(torch.randn(16, 64, generator=g)),
                    torch.randint(0, 8, (16,), generator=g)).backward()
    opt.step()
print(f"rank {me} ran {algo.name} bytes_last_step {model.bagua_stats()['bytes_last_step']}")
"""


def _train(tmp_path, how, env):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    port = free_port()
    procs = []
    for rank in range(2):
        e = _env(env)
        e.update({"RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
                  "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                  "BAGUA_NODE_ID": f"node{rank}", "OMP_NUM_THREADS": "1"})
        procs.append(subprocess.Popen([sys.executable, str(script), how], env=e,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            out, _ = p.communicate()
        assert p.returncode == 0, out
        outs.append(out)
    line = [ln for ln in outs[0].splitlines() if ln.startswith("rank 0 ran ")][0]
    return line.split()[3], int(line.split()[-1])


def test_bytegrad_from_the_environment_runs_in_libbagua(tmp_path):
    name, env_bytes = _train(tmp_path, "env", {"BAGUA_ALGORITHM": "bytegrad"})
    assert name == "bytegrad"
    _, full_bytes = _train(tmp_path, "gradient_allreduce", {})
    # 8-bit chunks against f32: libbagua really compressed what BAGUA_ALGORITHM chose.
    assert 0 < 2 * env_bytes < full_bytes, (env_bytes, full_bytes)
