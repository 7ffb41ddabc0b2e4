"""load_checkpoint is collective on every path and reads only what it should: when one rank
cannot see the tracker file every rank raises at the same call and the next collective still
pairs correctly; a FIFO in place of a file is refused at once; a checkpoint whose pickle would
run code is refused, naming the file, and the code does not run; a checkpoint save_checkpoint
wrote still loads (weights_only accepts state dicts)."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from bagua.torch_api.checkpoint import load_checkpoint, save_checkpoint
from bagua.torch_api.checkpoint import checkpointing

WORKER = textwrap.dedent("""\
    import os
    import sys

    import torch

    import bagua.torch_api as bagua
    from bagua.torch_api.checkpoint import load_checkpoint

    bagua.init_process_group()
    rank = bagua.get_rank()
    model = torch.nn.Linear(2, 1)
    path = os.path.join(sys.argv[1], f"rank{rank}")
    os.makedirs(os.path.join(path, "iter_0000005"), exist_ok=True)
    if rank == 0:       # only rank 0 sees a checkpoint
        torch.save({"iteration": 5, "model": model.state_dict()},
                   os.path.join(path, "iter_0000005", "mp_rank_00_model_states.pt"))
        with open(os.path.join(path, "latest_checkpointed_iteration.txt"), "w") as f:
            f.write("5")
    try:
        got = load_checkpoint(path, model)
        print(f"LOAD rank={rank} returned {got}", flush=True)
    except RuntimeError as e:
        print(f"LOAD rank={rank} raised {e}", flush=True)
    # The next collective pairs with the other rank's next collective, not with a leftover
    # agreement of load_checkpoint.
    t = torch.tensor([float(10 * (rank + 1))])
    bagua.allreduce_inplace(t)
    print(f"AFTER rank={rank} sum={t.item():g}", flush=True)
    """)


def test_rank_without_tracker_raises_with_the_others(workers, tmp_path):
    script = tmp_path / "ckpt_worker.py"
    script.write_text(WORKER)
    result = workers(str(script), 2, args=[tmp_path], timeout=120).check()
    for rank, out in enumerate(result.outputs):
        assert f"LOAD rank={rank} raised" in out, out
        assert "another rank" in out, out
        assert f"AFTER rank={rank} sum=30" in out, out


def _layout(root, iteration=1):
    d = root / f"iter_{iteration:07d}"
    d.mkdir(parents=True, exist_ok=True)
    (root / "latest_checkpointed_iteration.txt").write_text(str(iteration))
    return d / "mp_rank_00_model_states.pt"


LOAD_FIFO = textwrap.dedent("""\
    import sys

    import torch

    from bagua.torch_api.checkpoint import load_checkpoint

    try:
        load_checkpoint(sys.argv[1], torch.nn.Linear(2, 1))
    except ValueError as e:
        print(f"REFUSED {e}", flush=True)
    """)


@pytest.mark.parametrize("which", ["checkpoint", "tracker"])
def test_fifo_is_refused_without_blocking(tmp_path, which):
    name = _layout(tmp_path / "ckpt")
    if which == "tracker":
        name = tmp_path / "ckpt" / "latest_checkpointed_iteration.txt"
        name.unlink()
    os.mkfifo(name)
    (tmp_path / "load.py").write_text(LOAD_FIFO)
    # Opening a FIFO for reading blocks until a writer comes: the timeout catches a hang.
    proc = subprocess.run([sys.executable, str(tmp_path / "load.py"), str(tmp_path / "ckpt")],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout
    assert "REFUSED" in proc.stdout and str(name) in proc.stdout, proc.stdout
    assert "FIFO" in proc.stdout, proc.stdout


class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_pickle_that_runs_code_is_refused(tmp_path):
    marker = tmp_path / "marker"
    name = _layout(tmp_path / "ckpt")
    torch.save({"iteration": 1, "model": {"weight": _Evil(str(marker))}}, name)
    assert not marker.exists()
    with pytest.raises(ValueError) as info:
        load_checkpoint(str(tmp_path / "ckpt"), torch.nn.Linear(2, 1))
    assert str(name) in str(info.value)
    assert not marker.exists(), "unpickling the checkpoint ran code"


def test_weights_only_where_torch_offers_it():
    import inspect
    if "weights_only" not in inspect.signature(torch.load).parameters:
        assert not checkpointing._weights_only_reads_state_dicts()


def test_saved_checkpoint_round_trips(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, 2)
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    sched.step()
    save_checkpoint(7, str(tmp_path), model, opt, sched)
    other = torch.nn.Linear(3, 2)
    opt2 = torch.optim.SGD(other.parameters(), lr=0.5, momentum=0.9)
    sched2 = torch.optim.lr_scheduler.StepLR(opt2, 2)
    assert load_checkpoint(str(tmp_path), other, opt2, sched2) == 7
    assert torch.equal(other.weight, model.weight)
    assert opt2.state_dict()["param_groups"][0]["lr"] == opt.state_dict()["param_groups"][0]["lr"]
    assert sched2.state_dict()["last_epoch"] == 1


def test_missing_tracker_everywhere_returns_zero(tmp_path):
    assert load_checkpoint(str(tmp_path), torch.nn.Linear(2, 1)) == 0
