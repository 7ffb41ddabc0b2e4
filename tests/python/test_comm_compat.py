"""Upstream Bagua's communication API (communicators, process groups, the primitives added
for it) under every group shape on 4 ranks as 2 emulated nodes, against torch/numpy oracles,
and every bad argument raising before any communication (workers/comm_compat_worker.py)."""


def test_every_primitive_under_every_group_shape(workers):
    workers("comm_compat_worker.py", 4, nodes=2).check()
