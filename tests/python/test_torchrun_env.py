"""torchrun's habits through ``python -m bagua.distributed.run``: its defaults (no restarts,
--role), the environment torchrun's elastic agent gives every worker (ROLE_NAME,
TORCHELASTIC_*, OMP_NUM_THREADS=1 with a warning when several workers share a node), and the
error file torch's @record writes, whose message the job's failure summary carries."""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from bagua.distributed import OptionError, run

# Every variable torchrun's LocalElasticAgent sets for a worker (torch/distributed/elastic/
# agent/server/local_elastic_agent.py), and the ones torch's launcher and error handler add.
TORCHRUN_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                 "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE", "MASTER_ADDR",
                 "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
                 "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE",
                 "TORCHELASTIC_ERROR_FILE", "OMP_NUM_THREADS")

# Prints this worker's torchrun variables as one JSON line (no torch import: quick).
ENV_WORKER = textwrap.dedent(f"""\
    import json, os
    names = {TORCHRUN_VARS!r}
    print("ENV " + json.dumps({{n: os.environ.get(n) for n in names}}), flush=True)
    """)

# Raises under torch's @record on rank 1, which writes TORCHELASTIC_ERROR_FILE as torch does.
RECORD_WORKER = textwrap.dedent("""\
    import os
    import time

    from torch.distributed.elastic.multiprocessing.errors import record


    @record
    def main():
        if os.environ["RANK"] == "1":
            raise ValueError("bad learning rate 0.5 for rank " + os.environ["RANK"])
        time.sleep(30)


    main()
    """)


def start(tmp_path, *argv, env=None, timeout=120):
    """Runs ``python -m bagua.distributed.run ARGV`` in tmp_path with this test's environment
    minus OMP_NUM_THREADS (which conftest's runner sets), plus `env`; output merged."""
    e = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "BAGUA_ROLE")}
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "bagua.distributed.run", *map(str, argv)],
                          cwd=tmp_path, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout)


def worker_envs(out):
    """{rank: variables} from the ENV lines of a job's output."""
    envs = {}
    for line in out.splitlines():
        m = re.search(r"ENV (\{.*\})$", line)
        if m:
            v = json.loads(m.group(1))
            envs[int(v["RANK"])] = v
    return envs


def args(*argv):
    return run.parse_args([*argv, "t.py", "--a", "1"])


def has(words, seq):
    return any(words[i:i + len(seq)] == seq for i in range(len(words)))


# ---- the translation ----

def test_max_restarts_defaults_to_torchruns_zero():
    words = run.build_argv(args("--nproc_per_node", "1"), python=sys.executable)
    assert has(words, ["--max-restarts", "0"]), words
    words = run.build_argv(args("--nproc_per_node", "1", "--max_restarts", "4"),
                           python=sys.executable)
    assert has(words, ["--max-restarts", "4"]) and words.count("--max-restarts") == 1, words


def test_role_reaches_the_agents_as_bagua_role():
    assert run.launch_env(args()) == {"BAGUA_ROLE": "default"}
    assert run.launch_env(args("--role", "trainer")) == {"BAGUA_ROLE": "trainer"}
    assert run.launch_env(args("--role=ps.0_a-b")) == {"BAGUA_ROLE": "ps.0_a-b"}


@pytest.mark.parametrize("role", ["", "a b", "x/y", "..", "r" * 65, "rôle"])
def test_role_refused_naming_the_option(role):
    with pytest.raises(OptionError, match=r"^--role: .* accepted: 1 to 64 characters"):
        run.launch_env(args("--role", role))


def test_bad_role_exits_2_before_anything_starts(tmp_path):
    proc = start(tmp_path, "--standalone", "--nproc_per_node", "1", "--role", "a b", "w.py",
                 timeout=30)
    assert proc.returncode == 2, proc.stdout
    assert "--role: 'a b' is not a role name here; accepted:" in proc.stdout
    assert "bagua-agent" not in proc.stdout


# ---- real jobs ----

def test_worker_environment_is_torchruns(tmp_path):
    (tmp_path / "w.py").write_text(ENV_WORKER)
    # The static backend without an endpoint: a private etcd, and --rdzv_id is the job id
    # (--standalone would ignore it, as upstream does).
    proc = start(tmp_path, "--nproc_per_node", "2", "--role", "trainer", "--rdzv_id", "te-env",
                 "w.py")
    assert proc.returncode == 0, proc.stdout
    envs = worker_envs(proc.stdout)
    assert sorted(envs) == [0, 1], proc.stdout
    for rank, v in envs.items():
        missing = [n for n in TORCHRUN_VARS if v[n] is None]
        assert not missing, f"rank {rank} lacks {missing}: {v}"
        assert v["ROLE_NAME"] == "trainer"
        assert v["ROLE_RANK"] == v["RANK"] == v["LOCAL_RANK"] == str(rank)
        assert v["ROLE_WORLD_SIZE"] == v["WORLD_SIZE"] == v["LOCAL_WORLD_SIZE"] == "2"
        assert v["GROUP_RANK"] == "0" and v["GROUP_WORLD_SIZE"] == "1"
        assert v["TORCHELASTIC_RESTART_COUNT"] == "0"
        assert v["TORCHELASTIC_MAX_RESTARTS"] == "0"  # torchrun's default
        assert v["TORCHELASTIC_RUN_ID"] == "te-env"
        assert v["TORCHELASTIC_USE_AGENT_STORE"] == "False"
        assert v["OMP_NUM_THREADS"] == "1"
        assert v["MASTER_ADDR"] and 0 < int(v["MASTER_PORT"]) < 65536
        assert re.search(rf"/bagua-agent\.[^/]+/error\.{rank}\.json$",
                         v["TORCHELASTIC_ERROR_FILE"]), v["TORCHELASTIC_ERROR_FILE"]
    assert envs[0]["TORCHELASTIC_ERROR_FILE"] != envs[1]["TORCHELASTIC_ERROR_FILE"]
    # torchrun's warning, once for the one agent, naming the variable and how to change it.
    assert proc.stdout.count("setting OMP_NUM_THREADS=1 for each of this node's 2 workers") == 1
    assert "-x OMP_NUM_THREADS=N" in proc.stdout


def test_users_omp_num_threads_and_default_role(tmp_path):
    (tmp_path / "w.py").write_text(ENV_WORKER)
    proc = start(tmp_path, "--standalone", "--nproc_per_node", "2", "w.py",
                 env={"OMP_NUM_THREADS": "3"})
    assert proc.returncode == 0, proc.stdout
    envs = worker_envs(proc.stdout)
    assert sorted(envs) == [0, 1], proc.stdout
    assert all(v["OMP_NUM_THREADS"] == "3" and v["ROLE_NAME"] == "default"
               for v in envs.values()), envs
    assert "setting OMP_NUM_THREADS" not in proc.stdout


def test_record_error_reaches_the_failure_summary(tmp_path):
    """A worker that raises under torch's @record: its exception's text is in the agent's
    failure line and in bagua-launch's root cause, and with torchrun's default of no restarts
    the job ends in its first round with the worker's exit code."""
    pytest.importorskip("torch.distributed.elastic.multiprocessing.errors")
    (tmp_path / "w.py").write_text(RECORD_WORKER)
    proc = start(tmp_path, "--standalone", "--nproc_per_node", "2", "w.py")
    out = proc.stdout
    assert proc.returncode == 1, out
    message = "ValueError: bad learning rate 0.5 for rank 1"
    failed = [line for line in out.splitlines() if "worker failed at" in line]
    assert len(failed) == 1 and failed[0].endswith("exited with code 1: " + message), out
    root = [line for line in out.splitlines() if "bagua-launch" in line and "root cause" in line]
    assert len(root) == 1 and root[0].endswith(message), out
    assert "rank 1" in root[0]
    assert "round 2" not in out, out
