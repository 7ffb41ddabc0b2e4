"""BAGUA_AUTOTUNE=1 under the PyTorch front end (docs/autotune.md): with_bagua releases the
parameters and makes them views of libbagua's flat storage, so autotuning must never re-bucket
(the views would point into freed memory). It tunes the TCP streams and the ring segment only,
ends within its budget, and the training still matches torch's DistributedDataParallel."""


def test_autotune_keeps_torch_views_and_matches_ddp(workers):
    env = {"BAGUA_AUTOTUNE": "1", "BAGUA_AUTOTUNE_WARMUP_STEPS": "2",
           "BAGUA_AUTOTUNE_SAMPLE_STEPS": "2", "BAGUA_AUTOTUNE_MAX_SAMPLES": "6"}
    out = workers("ddp_match_worker.py", 2, env=env, nodes=2).check().outputs[0]
    assert "bagua autotune: not tuning bucket size: the parameters were released" in out, out
    assert "bagua autotune: not tuning hierarchical: the parameters were released" in out, out
    assert "bagua autotune: trial 2/6" in out and "bagua autotune: done after" in out, out
    # Only communicator settings changed: every trial line keeps the starting bucket size.
    trials = [line for line in out.splitlines() if "bagua autotune: trial" in line]
    assert len({line.split("bucket ")[1].split(" B")[0] for line in trials}) == 1, out
