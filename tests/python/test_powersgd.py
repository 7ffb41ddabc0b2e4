"""PowerSGDAlgorithm: its settings reach libbagua, it trains an MLP on 2 ranks close to
gradient allreduce with fewer bytes, and its first compressed step matches torch's
powerSGD_hook from the same initial Q (workers/powersgd_worker.py)."""

import pytest

from bagua.torch_api import algorithms
from bagua.torch_api.algorithms import PowerSGDAlgorithm


def test_config_and_checks():
    a = PowerSGDAlgorithm()
    assert a.config() == {"algorithm": "powersgd", "rank": 4, "warmup_steps": 10,
                          "error_feedback": 1, "hierarchical": 0}
    assert PowerSGDAlgorithm(rank=1, warmup_steps=0, error_feedback=False,
                             hierarchical=True).config()["hierarchical"] == 1
    for bad in (0, -1, 1025, 2.5, True):
        with pytest.raises(ValueError, match="rank"):
            PowerSGDAlgorithm(rank=bad)
    with pytest.raises(ValueError, match="warmup_steps"):
        PowerSGDAlgorithm(warmup_steps=-1)
    assert isinstance(algorithms.from_name("powersgd", rank=2), PowerSGDAlgorithm)


def test_from_env(monkeypatch):
    monkeypatch.setenv("BAGUA_ALGORITHM", "powersgd")
    monkeypatch.setenv("BAGUA_POWERSGD_RANK", "8")
    monkeypatch.setenv("BAGUA_WARMUP_STEPS", "3")
    a = algorithms.from_env()
    assert isinstance(a, PowerSGDAlgorithm) and a.rank == 8 and a.warmup_steps == 3
    assert algorithms.env_of("powersgd", rank=2)["BAGUA_POWERSGD_RANK"] == "2"


def test_trains_close_to_allreduce(workers):
    workers("powersgd_worker.py", 2, args=["train"], timeout=300).check()


def test_matches_torch_powersgd_hook(workers):
    pytest.importorskip("torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook")
    workers("powersgd_worker.py", 2, args=["torch"], timeout=300).check()
