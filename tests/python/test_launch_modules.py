"""Upstream's launch commands (bagua.distributed.launch, bagua.distributed.run and
bagua.script.baguarun) as front doors to bagua-launch: real jobs through each of the first two,
the translation of every upstream option (mapped, no effect, or refused with the option's name),
and the interpreter precedence of bagua-launch (--python > BAGUA_PYTHON > the #! line)."""

import os
import re
import socket
import subprocess
import sys
import textwrap

import pytest

from bagua.distributed import OptionError, find_launcher, launch, run
from bagua.script import baguarun
from conftest import run_module

PY = "/opt/venv/bin/python"

WORKER = textwrap.dedent("""\
    import sys

    import torch

    import bagua.torch_api as bagua

    bagua.init_process_group()
    rank, world = bagua.get_rank(), bagua.get_world_size()
    t = torch.tensor([float(rank + 1)])
    out = torch.zeros(1)
    bagua.allreduce(t, out)
    print(f"RESULT rank={rank} world={world} sum={out.item():g} exe={sys.executable}",
          flush=True)
    """)


def has(out, words):
    """`words` appear in `out` in a row."""
    return any(out[i:i + len(words)] == words for i in range(len(out)))


RESULT = re.compile(r"RESULT rank=(\d+) world=(\d+) sum=(\S+) exe=(\S+)")


def job(tmp_path, module, *argv, timeout=90, env=None):
    """Runs `python -m MODULE ARGV` in tmp_path; returns the completed process."""
    return run_module(tmp_path, module, *argv, timeout=timeout, env=env)


def check_allreduce(proc, world):
    """Each rank printed the full sum, and ran this test's interpreter."""
    assert proc.returncode == 0, proc.stdout
    found = {int(m[0]): m for m in RESULT.findall(proc.stdout)}
    assert sorted(found) == list(range(world)), proc.stdout
    for rank, (_, w, total, exe) in found.items():
        assert int(w) == world and float(total) == world * (world + 1) / 2, proc.stdout
        assert exe == sys.executable, f"rank {rank} ran {exe}, not {sys.executable}"


# ---- real jobs ----

def test_launch_two_workers(tmp_path):
    (tmp_path / "worker.py").write_text(WORKER)
    proc = job(tmp_path, "bagua.distributed.launch", "--nproc_per_node", "2", "worker.py")
    check_allreduce(proc, 2)


def test_run_elastic_two_workers(tmp_path):
    """An elastic job of 1 to 2 nodes that starts with this one (a private etcd; --standalone
    maps to the same)."""
    (tmp_path / "worker.py").write_text(WORKER)
    proc = job(tmp_path, "bagua.distributed.run", "--nnodes=1:2", "--nproc-per-node", "2",
               "--rdzv_id=launch-modules", "--rdzv_conf", "last_call_timeout=0.2", "worker.py")
    check_allreduce(proc, 2)
    assert "launch-modules" in proc.stdout


def two_nodes(tmp_path, port, extra):
    """Upstream's multi-node command, run once per node on this machine (two nodes told apart
    by BAGUA_NODE_ID); returns the two outputs."""
    (tmp_path / "worker.py").write_text(WORKER)
    procs = []
    for node in range(2):
        e = dict(os.environ, OMP_NUM_THREADS="1", BAGUA_NODE_ID=f"n{node}")
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "bagua.distributed.launch", "--nnodes", "2", "--node_rank",
             str(node), "--master_addr", "127.0.0.1", "--master_port", str(port), *extra,
             "--nproc_per_node", "1", "worker.py"],
            cwd=tmp_path, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = []
    for p in procs:
        try:
            outputs.append(p.communicate(timeout=90)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
    for p, out in zip(procs, outputs):
        assert p.returncode == 0, out
    check_allreduce(subprocess.CompletedProcess([], 0, outputs[0] + outputs[1]), 2)
    return outputs


def test_launch_two_nodes_same_command(tmp_path, etcd):
    """Upstream's multi-node command plus --rdzv_endpoint: the nodes derive one job id from
    --master_addr/--master_port and meet in the etcd."""
    outputs = two_nodes(tmp_path, 29999, ["--rdzv_endpoint", etcd])
    assert "launch-127.0.0.1-29999" in outputs[0] + outputs[1]


def test_launch_two_nodes_host_their_etcd(tmp_path):
    """Upstream's multi-node command as it is, with no etcd running: the node at
    --master_addr hosts the job's etcd on --master_port and the other joins it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    outputs = two_nodes(tmp_path, port, [])
    assert "hosting the job's etcd at 127.0.0.1:%d" % port in outputs[0] + outputs[1]


def test_set_additional_flag_and_no_extension(tmp_path):
    """--set_additional_flag gives each worker --local_rank=N, and a script without .py still
    runs under the caller's interpreter (upstream prepends python whatever the name)."""
    (tmp_path / "echo_args").write_text(
        "import sys\nprint('ARGS', sys.executable, *sys.argv[1:], flush=True)\n")
    proc = job(tmp_path, "bagua.distributed.launch", "--set_additional_flag",
               "--nproc_per_node", "2", "echo_args", "--x", "1")
    assert proc.returncode == 0, proc.stdout
    lines = sorted(re.findall(r"ARGS (\S+) (.*)", proc.stdout))
    assert lines == [(sys.executable, "--local_rank=0 --x 1"),
                     (sys.executable, "--local_rank=1 --x 1")], proc.stdout


def test_refused_option_exits_2_naming_it(tmp_path):
    proc = job(tmp_path, "bagua.distributed.launch", "--autotune_level", "2", "worker.py")
    assert proc.returncode == 2
    assert "--autotune_level: 2 is not a level" in proc.stdout
    proc = job(tmp_path, "bagua.distributed.run", "--redirects", "3", "worker.py")
    assert proc.returncode == 2
    assert "--redirects: the redirected streams go to the per-rank files" in proc.stdout


def test_find_launcher():
    path = find_launcher()
    assert os.path.basename(path) == "bagua-launch" and os.access(path, os.X_OK)


# ---- bagua-launch's interpreter: --python > BAGUA_PYTHON > #! line > python3 ----

def dry_run(tmp_path, *argv, env=None):
    e = dict(os.environ)
    e.pop("BAGUA_PYTHON", None)
    e.update(env or {})
    proc = subprocess.run([find_launcher(), "--dry-run", "--job-id", "j1", *argv], cwd=tmp_path,
                          env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=30)
    assert proc.returncode == 0, proc.stdout
    return re.search(r"^argv\s+= (.*?) ;", proc.stdout, re.M)[1]


def test_bagua_python_precedence(tmp_path):
    (tmp_path / "s.py").write_text("#!/usr/bin/python3.11\n")
    assert dry_run(tmp_path, "s.py") == "/usr/bin/python3.11 s.py"
    assert dry_run(tmp_path, "s.py", env={"BAGUA_PYTHON": PY}) == f"{PY} s.py"
    assert dry_run(tmp_path, "-m", "pkg", env={"BAGUA_PYTHON": PY}) == f"{PY} -m pkg"
    assert dry_run(tmp_path, "--python", "/flag/py", "s.py",
                   env={"BAGUA_PYTHON": PY}) == "/flag/py s.py"
    assert dry_run(tmp_path, "--no-python", "s.py", env={"BAGUA_PYTHON": PY}) == "s.py"


def test_bagua_python_runs_the_worker(tmp_path):
    """A real one-worker job whose interpreter comes from BAGUA_PYTHON alone."""
    fake = tmp_path / "fakepy"
    fake.write_text(f"#!/bin/sh\necho VIA-BAGUA-PYTHON\nexec {sys.executable} \"$@\"\n")
    fake.chmod(0o755)
    (tmp_path / "hello.py").write_text("print('HELLO', flush=True)\n")
    e = dict(os.environ, BAGUA_PYTHON=str(fake))
    proc = subprocess.run([find_launcher(), "hello.py"], cwd=tmp_path, env=e, timeout=60,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.returncode == 0, proc.stdout
    assert "VIA-BAGUA-PYTHON" in proc.stdout and "HELLO" in proc.stdout, proc.stdout


# ---- translation: launch ----

def tl(*argv):
    return launch.build_argv(launch.parse_args([*argv, "t.py", "--a", "1"]), python=PY)


PROGRAM = ["--python", PY, "-x", "PYTHONUNBUFFERED=1", "--", "t.py", "--a", "1"]


def test_launch_defaults():
    assert tl() == ["--max-restarts", "0", *PROGRAM]


@pytest.mark.parametrize("argv, words", [
    (["--nproc_per_node", "4"], ["--nproc-per-node", "4"]),
    (["--nproc-per-node=4"], ["--nproc-per-node", "4"]),
    (["--nnodes", "1"], ["--nnodes", "1"]),
    (["--nnodes", "2", "--node_rank", "1", "--master_addr", "10.0.0.1", "--master_port", "1234",
      "--rdzv_endpoint", "etcd:2379"],
     ["--nnodes", "2", "--rdzv-backend", "etcd", "--rdzv-endpoint", "etcd:2379", "--node-rank",
      "1", "--job-id", "launch-10.0.0.1-1234"]),
    (["--rdzv-endpoint", "etcd:2379"], ["--rdzv-endpoint", "etcd:2379"]),
    (["--logdir", "/tmp/logs"], ["--log-dir", "/tmp/logs"]),
    (["--autotune_level", "1"], ["--autotune"]),
    (["--autotune_max_samples", "20"], ["-x", "BAGUA_AUTOTUNE_MAX_SAMPLES=20"]),
    (["--default_bucket_size", "4096"], ["-x", "BAGUA_BUCKET_SIZE=4096"]),
    (["--enable_bagua_net"], ["--net-plugin", "bagua"]),
    (["--enable-bagua-net"], ["--net-plugin", "bagua"]),
])
def test_launch_mapped(argv, words):
    assert has(tl(*argv), words), tl(*argv)


@pytest.mark.parametrize("argv", [
    ["--master_addr", "10.1.1.1", "--master_port", "1234"],
    ["--node_rank", "0"],
    ["--bagua_service_port", "29999"],
    ["--is_output_autotune_log"],
    ["--report_metrics"],
    ["--use_env"],
    ["--use-env"],
    ["--autotune_level", "0"],
])
def test_launch_no_effect(argv):
    assert tl(*argv) == tl()


def test_launch_programs():
    args = launch.parse_args(["-m", "pkg.train", "--x"])
    assert launch.build_argv(args, python=PY) == [
        "--max-restarts", "0", "--python", PY, "-x", "PYTHONUNBUFFERED=1", "-m", "pkg.train",
        "--x"]
    args = launch.parse_args(["--no_python", "./train.sh", "--x"])
    assert launch.build_argv(args, python=PY) == [
        "--max-restarts", "0", "--no-python", "--", "./train.sh", "--x"]
    args = launch.parse_args(["train", "--x"])
    assert launch.build_argv(args, python=PY)[-4:] == ["--", PY, "train", "--x"]
    args = launch.parse_args(["--set_additional_flag", "t.py", "--x"])
    assert launch.build_argv(args, python=PY)[2:] == [
        "--python", PY, "-x", "PYTHONUNBUFFERED=1", "-m", "bagua.distributed._local_rank_arg",
        "script", "t.py", "--x"]
    args = launch.parse_args(["--set_additional_flag", "--no_python", "./a.sh"])
    assert launch.build_argv(args, python=PY)[2:] == [
        "--python", PY, "-m", "bagua.distributed._local_rank_arg", "exec", "./a.sh"]
    # The caller's interpreter by default.
    assert sys.executable in launch.build_argv(launch.parse_args(["t.py"]))


@pytest.mark.parametrize("argv, option", [
    (["--nnodes", "0"], "--nnodes"),
    (["--node_rank", "1"], "--node_rank"),
    (["--nproc_per_node", "0"], "--nproc_per_node"),
    (["--master_port", "70000"], "--master_port"),
    (["--bagua_service_port", "0"], "--bagua_service_port"),
    (["--autotune_level", "2"], "--autotune_level"),
    (["--autotune_warmup_time", "30"], "--autotune_warmup_time"),
    (["--autotune_sampling_confidence_time", "5"], "--autotune_sampling_confidence_time"),
    (["--host_list", "a,b"], "--host_list"),
    (["--ssh_port", "22"], "--ssh_port"),
    (["-m", "--no_python"], "--no_python"),
])
def test_launch_refused(argv, option):
    with pytest.raises(OptionError) as e:
        tl(*argv)
    assert e.value.option == option and str(e.value).startswith(option + ": ")


def test_launch_multi_node_hosts_the_etcd():
    """Several nodes without --rdzv_endpoint: the master's node hosts the job's etcd."""
    assert has(tl("--nnodes", "2", "--node_rank", "1", "--master_addr", "10.0.0.1",
                  "--master_port", "1234"),
               ["--nnodes", "2", "--rdzv-backend", "static", "--master-addr", "10.0.0.1",
                "--master-port", "1234", "--node-rank", "1", "--job-id", "launch-10.0.0.1-1234"])


# ---- translation: run ----

def tr(*argv, gpus=0):
    return run.build_argv(run.parse_args([*argv, "t.py", "--a", "1"]), python=PY,
                          gpu_count=lambda: gpus)


def test_run_defaults():
    # --nproc_per_node auto: the CPUs without CUDA, the GPUs with it; torchrun's 0 restarts.
    assert tr() == ["--nproc-per-node", str(os.cpu_count()), "--max-restarts", "0", *PROGRAM]
    assert tr(gpus=8)[:2] == ["--nproc-per-node", "8"]


@pytest.mark.parametrize("argv, words", [
    (["--nproc_per_node", "3"], ["--nproc-per-node", "3"]),
    (["--nproc_per_node", "cpu"], ["--nproc-per-node", str(os.cpu_count())]),
    (["--standalone", "--nnodes", "1:4"], ["--nnodes", "1:4", "--standalone"]),
    (["--nnodes", "1:4", "--rdzv_id", "j"], ["--nnodes", "1:4", "--job-id", "j", "--python"]),
    (["--standalone"], ["--standalone"]),
    (["--standalone", "--rdzv_backend", "c10d", "--rdzv_endpoint", "x:1", "--rdzv_id", "j"],
     ["--standalone", "--python"]),
    (["--nnodes", "2:4", "--rdzv_backend", "etcd", "--rdzv_endpoint", "etcd:2379",
      "--rdzv_id", "job7"],
     ["--nnodes", "2:4", "--rdzv-endpoint", "etcd:2379", "--job-id", "job7"]),
    (["--rdzv_backend", "etcd-v2", "--rdzv_endpoint", "etcd:2379"],
     ["--rdzv-endpoint", "etcd:2379", "--job-id", "none"]),
    (["--rdzv_backend", "c10d", "--rdzv_endpoint", "localhost:29400", "--rdzv_id", "j2"],
     ["--job-id", "j2"]),
    (["--nnodes", "1:2", "--rdzv_backend", "c10d", "--rdzv_endpoint", "h:29400"],
     ["--rdzv-backend", "c10d", "--rdzv-endpoint", "h:29400", "--job-id", "none"]),
    (["--nnodes", "2", "--node_rank", "1", "--master_addr", "10.0.0.1", "--master_port", "7"],
     ["--rdzv-backend", "static", "--master-addr", "10.0.0.1", "--master-port", "7",
      "--node-rank", "1"]),
    (["--rdzv_conf", "join_timeout=900,last_call_timeout=1.5"],
     ["--rdzv-timeout", "900", "--last-call-ms", "1500"]),
    (["--rdzv_conf", "timeout=30.5,read_timeout=2"],
     ["--rdzv-timeout", "31", "--etcd-timeout-ms", "2000"]),
    (["--rdzv_conf", "keep_alive_interval=2,keep_alive_max_attempt=4"], ["--lease-ttl", "8"]),
    (["--rdzv_conf", "keep_alive_interval=1"], ["--lease-ttl", "3"]),
    (["--max_restarts", "5"], ["--max-restarts", "5"]),
    (["--log_dir", "/tmp/l", "--tee", "3"], ["--log-dir", "/tmp/l"]),
    (["-t", "0:1", "--log-dir", "/tmp/l"], ["--log-dir", "/tmp/l"]),
    (["-r", "0:1", "--log_dir", "/tmp/l"], ["--redirects", "0:1", "--log-dir", "/tmp/l"]),
    (["--autotune_level", "1"], ["--autotune"]),
    (["--enable_bagua_net"], ["--net-plugin", "bagua"]),
    (["--default_bucket_size", "8192"], ["-x", "BAGUA_BUCKET_SIZE=8192"]),
    (["--autotune_max_samples", "9"], ["-x", "BAGUA_AUTOTUNE_MAX_SAMPLES=9"]),
])
def test_run_mapped(argv, words):
    assert has(tr(*argv), words), tr(*argv)


@pytest.mark.parametrize("argv", [
    ["--monitor_interval", "1"], ["--start_method", "fork"], ["--role", "trainer"],
    ["--node_rank", "0"], ["--master_addr", "10.0.0.1", "--master_port", "1234"],
    ["--redirects", "0"], ["-t", "0"], ["--use_env"], ["--bagua_service_port", "29600"],
    ["--is_output_autotune_log"], ["--rdzv_conf", "is_host=1,rank=0"], ["--rdzv_conf", ""],
    ["--rdzv_backend", "static"], ["--rdzv_backend", "c10d"],
])
def test_run_no_effect(argv):
    assert tr(*argv) == tr()


def test_run_programs():
    assert tr("-m")[-8:] == ["--python", PY, "-x", "PYTHONUNBUFFERED=1", "-m", "t.py", "--a",
                             "1"]
    assert tr("--no_python")[-5:] == ["--no-python", "--", "t.py", "--a", "1"]
    # --run_path beats --no_python, as upstream.
    assert tr("--run_path", "--no_python")[-4:] == ["--", "t.py", "--a", "1"]
    assert "--python" in tr("--run_path", "--no_python")


@pytest.mark.parametrize("argv, option", [
    (["--nnodes", "1:2:3"], "--nnodes"),
    (["--nnodes", "3:2"], "--nnodes"),
    (["--nproc_per_node", "gpu"], "--nproc_per_node"),
    (["--nproc_per_node", "many"], "--nproc_per_node"),
    (["--rdzv_backend", "zookeeper"], "--rdzv_backend"),
    (["--rdzv_backend", "etcd"], "--rdzv_endpoint"),
    (["--rdzv_conf", "close_timeout=5"], "--rdzv_conf"),
    (["--rdzv_conf", "join_timeout=soon"], "--rdzv_conf"),
    (["--rdzv_conf", "join_timeout"], "--rdzv_conf"),
    (["--max_restarts", "-1"], "--max_restarts"),
    (["--monitor_interval", "0"], "--monitor_interval"),
    (["--node_rank", "2", "--nnodes", "1:2", "--standalone"], "--node_rank"),
    (["--master_port", "0"], "--master_port"),
    (["--redirects", "3"], "--redirects"),
    (["-r", "0:1"], "--redirects"),
    (["--tee", "3"], "--tee"),
    (["--run_path", "-m"], "--run_path"),
    (["-m", "--no_python"], "--no_python"),
    (["--autotune_level", "3"], "--autotune_level"),
    (["--autotune_warmup_time", "1"], "--autotune_warmup_time"),
])
def test_run_refused(argv, option):
    with pytest.raises(OptionError) as e:
        tr(*argv)
    assert e.value.option == option and str(e.value).startswith(option + ": ")


# ---- translation: baguarun ----

def tb(*argv):
    return baguarun.build_argv(baguarun.parse_args([*argv, "t.py", "--a", "1"]), python=PY,
                               cwd="/work dir")


def test_baguarun_hosts_and_ssh_port():
    out = tb("--host_list", "n1,n2", "--ssh_port", "2222", "--nproc_per_node", "4",
             "--master_port", "1234", "--bagua_service_port", "29501", "--enable_bagua_net",
             "-x", "NCCL_DEBUG=INFO", "-x", "HOME")
    assert out[:4] == ["--hosts", "n1,n2", "--nproc-per-node", "4"]
    remote = out[out.index("--remote-cmd") + 1]
    assert remote.startswith("ssh -o BatchMode=yes -p 2222 {host} cd ")
    assert remote.endswith(" '&&' exec {cmdline}")
    for words in (["--max-restarts", "0"], ["-x", "PATH"], ["-x", "NCCL_DEBUG=INFO"],
                  ["-x", "HOME"], ["--net-plugin", "bagua"], ["--python", PY]):
        assert has(out, words), out
    assert "--master_port" not in out and "1234" not in out
    assert out[-4:] == ["--", "t.py", "--a", "1"]


def test_baguarun_inline_ports():
    out = tb("--host_list", "n1:22,n2:22", "--nproc_per_node", "1")
    assert out[:2] == ["--hosts", "n1,n2"]
    assert "-p 22 {host}" in out[out.index("--remote-cmd") + 1]
    out = tb("--host_list", "n1,n2", "--nproc_per_node", "1")
    assert "ssh -o BatchMode=yes {host} cd" in out[out.index("--remote-cmd") + 1]


@pytest.mark.parametrize("argv, option", [
    (["--nproc_per_node", "1"], "--host_list"),
    (["--host_list", "n1:22,n2:2022", "--nproc_per_node", "1"], "--host_list"),
    (["--host_list", "n1:x", "--nproc_per_node", "1"], "--host_list"),
    (["--host_list", "n1:22:3", "--nproc_per_node", "1"], "--host_list"),
    (["--host_list", "n1", "--nproc_per_node", "0"], "--nproc_per_node"),
    (["--host_list", "n1", "--ssh_port", "0", "--nproc_per_node", "1"], "--ssh_port"),
])
def test_baguarun_refused(argv, option):
    with pytest.raises(OptionError) as e:
        tb(*argv)
    assert e.value.option == option


def test_baguarun_dry_run(tmp_path):
    """bagua-launch accepts baguarun's translation: two ssh commands that cd to the caller's
    directory and run the agent there."""
    args = baguarun.parse_args(["--host_list", "nodeA,nodeB", "--ssh_port", "2222",
                                "--nproc_per_node", "2", "train.py"])
    words = baguarun.build_argv(args, python=PY, cwd="/data/my run")
    proc = subprocess.run([find_launcher(), "--dry-run", "--rdzv-host", "10.0.0.1", *words],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=30)
    assert proc.returncode == 0, proc.stdout
    ssh = [line for line in proc.stdout.splitlines() if line.startswith("ssh ")]
    assert len(ssh) == 2, proc.stdout
    for line, host in zip(ssh, ("nodeA", "nodeB")):
        assert line.startswith(f"ssh -o BatchMode=yes -p 2222 -- {host} cd "), line
        assert "my run" in line and f"{PY} train.py" in line, line


FAKE_SSH = """#!/bin/sh
# Stands in for ssh: skips its options and the destination and runs the command here, through
# a shell, as sshd would on the host.
while [ $# -gt 0 ]; do
  case "$1" in
    -o|-p) shift 2 ;;
    --) shift 2; break ;;
    *) break ;;
  esac
done
exec sh -c "$*"
"""


def test_baguarun_job_through_ssh(tmp_path):
    """A real two-host job: the hosts are this machine, reached through a stand-in ssh first in
    PATH; the workers start in the caller's directory (a name with a space) and run the
    caller's interpreter."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "ssh").write_text(FAKE_SSH)
    (tmp_path / "bin" / "ssh").chmod(0o755)
    work = tmp_path / "my run"
    work.mkdir()
    (work / "worker.py").write_text(WORKER)
    # Addresses that are not this machine's, so that bagua-launch starts them through ssh and
    # puts the private etcd on this machine's address towards them.
    env = {"PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = job(work, "bagua.script.baguarun", "--host_list", "10.255.255.1,10.255.255.2",
               "--ssh_port", "2222", "--nproc_per_node", "1", "worker.py", env=env)
    if proc.returncode == 2 and "--rdzv-host" in proc.stdout:
        pytest.skip("no route from this machine towards other hosts")
    check_allreduce(proc, 2)


def test_baguarun_script():
    """The build's bin/baguarun runs the module."""
    script = os.path.join(os.environ.get("BAGUA_BUILD_DIR", ""), "python", "bin", "baguarun")
    if not os.access(script, os.X_OK):
        pytest.skip("no BAGUA_BUILD_DIR/python/bin/baguarun")
    proc = subprocess.run([script, "--help"], stdout=subprocess.PIPE, text=True, timeout=30)
    assert proc.returncode == 0 and "--host_list" in proc.stdout
