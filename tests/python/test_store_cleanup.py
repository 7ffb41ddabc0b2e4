"""The private store directory of a one-host bagua-launch job (torch_api/_store.py) belongs to
the process that created it: a child that process forks and that exits normally leaves it in
place (the parent's store keeps working, its next new_group() returns); a SIGTERM or SIGKILL
removes it as a normal exit does, and SIGTERM keeps its action (the default, immediate death,
or a user's own handler)."""

import os
import re
import signal
import subprocess
import sys
import textwrap
import time

from conftest import run_module

FORK_WORKER = textwrap.dedent("""\
    import os
    import sys

    import torch
    import torch.distributed as dist

    import bagua.torch_api as bagua

    bagua.init_process_group()
    rank = bagua.get_rank()
    if rank == 0:
        store = dist.distributed_c10d._get_default_store()
        where = os.path.dirname(getattr(store, "underlying_store", store).path)
        pid = os.fork()
        if pid == 0:
            sys.exit(0)          # a normal exit: atexit handlers and interpreter teardown
        os.waitpid(pid, 0)
        print(f"STORE exists={os.path.isdir(where)}", flush=True)
    group = dist.new_group([0, 1])
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t, group=group)
    print(f"RESULT rank={rank} sum={t.item():g}", flush=True)
    dist.barrier()
    """)

# One process that owns a private directory and waits to be ended by SIGTERM.
SIGTERM_WORKER = textwrap.dedent("""\
    import signal
    import sys
    import time

    from bagua.torch_api import _store

    if sys.argv[1] == "user":
        def handler(signum, frame):
            print("USER handler ran", flush=True)
            sys.exit(7)
        signal.signal(signal.SIGTERM, handler)
    where = _store.private_directory()
    print(f"DIR {where}", flush=True)
    time.sleep(60)
    """)


def test_forked_child_leaves_the_store(tmp_path):
    (tmp_path / "worker.py").write_text(FORK_WORKER)
    proc = run_module(tmp_path, "bagua.distributed.launch", "--nproc_per_node", "2", "worker.py",
                      timeout=120)
    assert proc.returncode == 0, proc.stdout
    assert "STORE exists=True" in proc.stdout, proc.stdout
    sums = dict(re.findall(r"RESULT rank=(\d+) sum=(\S+)", proc.stdout))
    assert sums == {"0": "3", "1": "3"}, proc.stdout


def _gone(path, within=30):
    """Whether ``path`` disappears within ``within`` seconds (the watcher removes it once the
    owner has ended; no timing is asserted beyond this generous bound)."""
    deadline = time.monotonic() + within
    while os.path.exists(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _signalled(tmp_path, mode, sig):
    (tmp_path / "owner.py").write_text(SIGTERM_WORKER)
    proc = subprocess.Popen([sys.executable, str(tmp_path / "owner.py"), mode],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("DIR "), line + proc.stdout.read()
        where = line.split(" ", 1)[1].strip()
        assert os.path.isdir(where)
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out, where


def test_sigterm_removes_the_directory(tmp_path):
    code, out, where = _signalled(tmp_path, "default", signal.SIGTERM)
    assert code == -signal.SIGTERM, out       # still ended by the signal, as before
    assert _gone(where), out


def test_sigkill_removes_the_directory(tmp_path):
    code, out, where = _signalled(tmp_path, "default", signal.SIGKILL)
    assert code == -signal.SIGKILL, out
    assert _gone(where), out


def test_sigterm_keeps_a_users_handler(tmp_path):
    code, out, where = _signalled(tmp_path, "user", signal.SIGTERM)
    assert "USER handler ran" in out and code == 7, out
    assert _gone(where), out


def test_forked_child_keeps_a_directory_it_did_not_create(tmp_path):
    """The same in one process, without a job: the child's exit removes nothing."""
    script = textwrap.dedent("""\
        import os
        import sys

        from bagua.torch_api import _store

        where = _store.private_directory()
        pid = os.fork()
        if pid == 0:
            sys.exit(0)
        os.waitpid(pid, 0)
        print(f"AFTER CHILD {os.path.isdir(where)} {where}", flush=True)
        """)
    (tmp_path / "owner.py").write_text(script)
    proc = subprocess.run([sys.executable, str(tmp_path / "owner.py")], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout
    m = re.search(r"AFTER CHILD (\S+) (\S+)", proc.stdout)
    assert m and m[1] == "True", proc.stdout
    assert _gone(m[2]), proc.stdout   # the owner's own exit removed it
