"""Bad input and failures in bagua.torch_api: clear exceptions, no crash, no hang."""


def test_bad_inputs_raise(workers):
    workers("errors_worker.py", 1, args=["inputs"]).check()


def test_dead_peer_raises_within_the_timeout(workers):
    r = workers("errors_worker.py", 2, args=["deadpeer"], env={"BAGUA_COMM_TIMEOUT_MS": "3000"},
                nodes=2)
    assert r.codes[1] == -9, f"rank 1 should have killed itself:\n{r.outputs[1]}"
    assert r.codes[0] == 0, r.outputs[0]
    assert "deadpeer: Bagua" in r.outputs[0]


def test_ctrl_c_interrupts_a_blocked_collective(workers):
    r = workers("errors_worker.py", 2, args=["interrupt"], env={"BAGUA_COMM_TIMEOUT_MS": "60000"},
                nodes=2, timeout=60)
    assert r.codes[0] == 0, r.outputs[0]
    assert "interrupt: KeyboardInterrupt after" in r.outputs[0], r.outputs[0]


def test_rank_out_of_phase_raises_on_every_rank(workers):
    r = workers("errors_worker.py", 2, args=["phase"], timeout=180,
                env={"BAGUA_STEP_CHECK": "1", "BAGUA_COMM_TIMEOUT_MS": "30000"})
    r.check()
    for out in r.outputs:
        assert "BaguaProtocolError" in out, out
    # Rank 1 skipped iteration 3: its step numbered 4 met rank 0's step numbered 3.
    assert "phase: iteration 3:" in r.outputs[0] and "phase: iteration 4:" in r.outputs[1], \
        "\n".join(r.outputs)


def test_no_sync_on_one_rank_raises_before_averaging(workers):
    r = workers("errors_worker.py", 2, args=["nosync"], timeout=180,
                env={"BAGUA_STEP_CHECK": "1", "BAGUA_COMM_TIMEOUT_MS": "30000"})
    r.check()
    # Rank 1's iteration 2 ran under no_sync(): its iteration 3 (numbered 3) met rank 0's
    # iteration 2 (numbered 2), before any of its gradients were averaged.
    assert "nosync: iteration 2:" in r.outputs[0] and "nosync: iteration 3:" in r.outputs[1], \
        "\n".join(r.outputs)


def test_accumulation_alike_on_every_rank_keeps_the_steps_in_phase(workers):
    workers("errors_worker.py", 2, args=["accumulate"], timeout=180,
            env={"BAGUA_STEP_CHECK": "1", "BAGUA_COMM_TIMEOUT_MS": "30000"}).check()


def test_step_numbers_need_the_setting(workers):
    workers("errors_worker.py", 1, args=["unnumbered"]).check()
