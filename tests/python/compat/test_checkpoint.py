"""``bagua.torch_api.checkpoint``: save and load on 2 ranks (a ``with_bagua`` model, its
optimizer and a StepLR scheduler), upstream Bagua's directory layout, and the edge cases (no
tracker file, a ``release`` tracker, an invalid tracker, a rank that fails to save).
"""

import os
import tempfile
import unittest

import torch
import torch.nn as nn

from bagua.torch_api.algorithms import gradient_allreduce
from bagua.torch_api.checkpoint import load_checkpoint, save_checkpoint
from bagua.torch_api.communication import broadcast_object
from harness import MultiProcessTestCase, setup_bagua_env


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.bn = nn.BatchNorm1d(8)
        self.fc2 = nn.Linear(8, 2)

    def forward(self, x):
        return self.fc2(torch.relu(self.bn(self.fc1(x))))


def _make(seed):
    torch.manual_seed(seed)
    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    return model, optimizer, scheduler


def _train(model, optimizer, scheduler, steps, seed):
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        optimizer.zero_grad()
        x = torch.randn(6, 4, generator=gen)
        loss = model(x).pow(2).mean()
        loss.backward()
        optimizer.step()
        scheduler.step()


def assert_same(a, b, where="state"):
    """Recursive equality of state dicts (tensors compared exactly)."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), f"{where}: {set(a)} vs {set(b)}"
        for key in a:
            assert_same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} vs {b!r}"


def run_save_load(rank, nprocs, args, results, env):
    path = args
    setup_bagua_env(rank, env)
    model, optimizer, scheduler = _make(0)
    model = model.with_bagua([optimizer], gradient_allreduce.GradientAllReduceAlgorithm())
    _train(model, optimizer, scheduler, 3, seed=rank)
    save_checkpoint(3, path, model, optimizer, scheduler)

    # Every rank loads rank 0's state: the parameters and the optimizer's state agree on all
    # ranks (averaged gradients), the batch norm's running statistics are rank 0's.
    saved = [broadcast_object(x.state_dict(), 0) for x in (model, optimizer, scheduler)]
    fresh_model, fresh_optimizer, fresh_scheduler = _make(1)
    assert load_checkpoint(path, fresh_model, fresh_optimizer, fresh_scheduler) == 3
    assert_same(saved[0], fresh_model.state_dict(), "model")
    assert_same(saved[1], fresh_optimizer.state_dict(), "optimizer")
    assert_same(saved[2], fresh_scheduler.state_dict(), "lr_scheduler")
    assert_same(optimizer.state_dict(), fresh_optimizer.state_dict(), "optimizer")
    assert_same(dict(model.named_parameters()), dict(fresh_model.named_parameters()))
    assert fresh_optimizer.param_groups[0]["lr"] == optimizer.param_groups[0]["lr"]

    # A later checkpoint becomes the latest; the loaded objects train on identically.
    _train(model, optimizer, scheduler, 2, seed=10 + rank)
    save_checkpoint(5, path, model, optimizer, scheduler)
    saved = broadcast_object(model.state_dict(), 0)
    assert load_checkpoint(path, fresh_model, fresh_optimizer, fresh_scheduler) == 5
    assert_same(saved, fresh_model.state_dict(), "model")
    # Same data on every rank: the averaged gradient equals the local one.
    _train(model, optimizer, scheduler, 1, seed=20)
    _train(fresh_model, fresh_optimizer, fresh_scheduler, 1, seed=20)
    if rank == 0:
        assert_same(model.state_dict(), fresh_model.state_dict(), "model after a step")

    # A rank that cannot write fails, and the other ranks learn it at once.
    blocker = os.path.join(path, "a_file")
    try:
        save_checkpoint(6, os.path.join(blocker, "sub"), model, optimizer)
    except OSError:
        assert rank == 0
    except RuntimeError as err:
        assert rank != 0 and "failed on another rank" in str(err), err
    else:
        raise AssertionError("save_checkpoint into a file's path did not fail")


class TestCheckpoint(MultiProcessTestCase):
    def test_save_load_two_ranks(self):
        with tempfile.TemporaryDirectory() as path:
            open(os.path.join(path, "a_file"), "w").close()
            self.run_test_locally(run_save_load, 2, path, None)
            # Upstream's layout, written once (by rank 0), with no temporary files left.
            self.assertEqual(sorted(os.listdir(path)),
                             ["a_file", "iter_0000003", "iter_0000005",
                              "latest_checkpointed_iteration.txt"])
            for it in ("iter_0000003", "iter_0000005"):
                self.assertEqual(os.listdir(os.path.join(path, it)),
                                 ["mp_rank_00_model_states.pt"])
            with open(os.path.join(path, "latest_checkpointed_iteration.txt")) as f:
                self.assertEqual(f.read(), "5")
            state = torch.load(os.path.join(path, "iter_0000005",
                                            "mp_rank_00_model_states.pt"))
            self.assertEqual(sorted(state), ["iteration", "lr_scheduler", "model",
                                             "optimizer"])
            self.assertEqual(state["iteration"], 5)
            # Loads into plain torch objects in a process without a job.
            model, optimizer, scheduler = _make(2)
            self.assertEqual(load_checkpoint(path, model, optimizer, scheduler), 5)
            assert_same(model.state_dict(), state["model"])


class TestCheckpointEdges(unittest.TestCase):
    def test_no_tracker_returns_zero(self):
        with tempfile.TemporaryDirectory() as path:
            model, optimizer, _ = _make(0)
            before = {k: v.clone() for k, v in model.state_dict().items()}
            self.assertEqual(load_checkpoint(path, model, optimizer), 0)
            self.assertEqual(load_checkpoint(os.path.join(path, "missing"), model), 0)
            assert_same(before, model.state_dict())

    def test_upstream_written_checkpoint_and_release(self):
        with tempfile.TemporaryDirectory() as path:
            source, optimizer, scheduler = _make(3)
            for directory, tracker in (("iter_0000007", "7\n"), ("release", "release")):
                os.makedirs(os.path.join(path, directory), exist_ok=True)
                torch.save({"iteration": 7, "model": source.state_dict(),
                            "optimizer": optimizer.state_dict(),
                            "lr_scheduler": scheduler.state_dict()},
                           os.path.join(path, directory, "mp_rank_00_model_states.pt"))
                with open(os.path.join(path, "latest_checkpointed_iteration.txt"), "w") as f:
                    f.write(tracker)
                model, optimizer2, scheduler2 = _make(4)
                got = load_checkpoint(path, model, optimizer2, scheduler2)
                self.assertEqual(got, 7 if directory != "release" else 0)
                assert_same(source.state_dict(), model.state_dict())

    def test_invalid_tracker(self):
        with tempfile.TemporaryDirectory() as path:
            with open(os.path.join(path, "latest_checkpointed_iteration.txt"), "w") as f:
                f.write("latest")
            with self.assertRaisesRegex(ValueError, "'latest'; accepted: a non-negative "
                                                    "iteration number or 'release'"):
                load_checkpoint(path, Net())

    def test_missing_optimizer_state(self):
        with tempfile.TemporaryDirectory() as path:
            model, optimizer, _ = _make(0)
            save_checkpoint(1, path, model)
            with self.assertRaisesRegex(ValueError, "holds no optimizer state"):
                load_checkpoint(path, model, optimizer)
            self.assertEqual(load_checkpoint(path, model), 1)

    def test_bad_iteration(self):
        with tempfile.TemporaryDirectory() as path:
            for bad in (-1, "3", 2.0):
                with self.assertRaises(ValueError):
                    save_checkpoint(bad, path, Net())


if __name__ == "__main__":
    unittest.main()
