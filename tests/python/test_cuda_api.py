"""CUDA tensors in bagua.torch_api.

Without a GPU (CI): the checks of the CUDA path and its messages, the one error that says why
CUDA tensors cannot be used here (bagua built without CUDA, or torch without a GPU), and
libbagua's refusal to create NCCL state without a device, on every rank, without a hang.
With a GPU (tests marked ``gpu``, skipped elsewhere; scripts/gpu-check.sh runs them): every
primitive and dtype on CUDA tensors, all six algorithms, the fused optimizer, no host
synchronization in the step, and agreement with the same training on the CPU.
"""

import os
import subprocess
import types

import pytest
import torch

from bagua import _C
from bagua.torch_api import _cuda, communication
from bagua.torch_api.data_parallel import distributed as ddp_wrapper

HAS_GPU = torch.cuda.is_available() and bool(_C.cuda_built)
gpu = pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU and a bagua built with CUDA")


def fake(device):
    """A stand-in parameter on `device`: model_device reads only .device."""
    return types.SimpleNamespace(device=torch.device(device))


def test_reason_names_the_missing_part():
    built = _cuda.unavailable_reason(cuda_built=False, torch_cuda=True)
    assert "built without CUDA and NCCL" in built and "docs/gpu.md" in built
    assert _cuda.unavailable_reason(cuda_built=False, torch_cuda=False) == built
    no_torch = _cuda.unavailable_reason(cuda_built=True, torch_cuda=False)
    assert "torch.cuda.is_available() is False" in no_torch
    assert _cuda.unavailable_reason(cuda_built=True, torch_cuda=True) is None


@pytest.mark.skipif(HAS_GPU, reason="checks the message on a machine without CUDA")
def test_require_raises_the_local_reason():
    with pytest.raises(RuntimeError) as e:
        _cuda.require("allreduce: send_tensor")
    assert str(e.value) == ("allreduce: send_tensor: CUDA tensors cannot be used: "
                            + _cuda.unavailable_reason())


def test_model_device_one_device():
    cpu = [("a", fake("cpu")), ("b", fake("cpu"))]
    assert _cuda.model_device(cpu) == torch.device("cpu")
    assert _cuda.model_device([("w", fake("cuda:1"))], current_device=1) == torch.device(
        "cuda:1")


def test_model_on_two_devices_is_refused():
    with pytest.raises(ValueError) as e:
        _cuda.model_device([("fc1.weight", fake("cpu")), ("fc2.weight", fake("cuda:0"))],
                           current_device=0)
    msg = str(e.value)
    assert "2 devices" in msg and "fc1.weight on cpu" in msg and "fc2.weight on cuda:0" in msg


def test_model_on_another_device_than_the_current_one_is_refused():
    with pytest.raises(ValueError) as e:
        _cuda.model_device([("w", fake("cuda:1"))], current_device=0)
    assert "torch.cuda.set_device(bagua.get_local_rank())" in str(e.value)


def test_model_on_an_unsupported_device_is_refused():
    with pytest.raises(ValueError) as e:
        _cuda.model_device([("w", fake("meta"))])
    assert "accepted: the CPU or a CUDA device" in str(e.value)


@pytest.mark.skipif(HAS_GPU, reason="checks the message on a machine without CUDA")
def test_cuda_model_without_cuda_names_the_reason():
    with pytest.raises(RuntimeError) as e:
        _cuda.model_device([("w", fake("cuda:0"))])
    assert _cuda.unavailable_reason() in str(e.value)


def test_call_device_refuses_mixed_devices():
    assert _cuda.call_device([torch.zeros(1), None], "x") == torch.device("cpu")
    with pytest.raises(ValueError) as e:
        _cuda.call_device([torch.zeros(1), torch.zeros(1, device="meta")], "allreduce")
    assert "cpu and meta" in str(e.value) and "one call takes CPU tensors only" in str(e.value)


@pytest.fixture
def comm1():
    port = communication._free_port("127.0.0.1")
    c = _C.Comm(rank=0, size=1, bootstrap=f"tcp://127.0.0.1:{port}")
    yield c
    c.close()


def test_primitives_refuse_other_devices(comm1):
    meta = torch.zeros(4, device="meta")
    with pytest.raises(ValueError, match="accepted: CPU tensors or CUDA tensors"):
        communication.allreduce_inplace(meta, comm=comm1)
    with pytest.raises(ValueError, match="accepted: CPU tensors or CUDA tensors"):
        communication.allreduce_coalesced_inplace([torch.zeros(2), meta], comm=comm1)


@pytest.mark.skipif(HAS_GPU, reason="a machine with a GPU creates the communicator")
def test_nccl_communicator_without_a_device_fails_cleanly(comm1):
    if _C.cuda_built:
        with pytest.raises(_C.BaguaError, match="CUDA"):
            _C.NcclComm(comm1, 0)
        with pytest.raises(_C.BaguaError, match="CUDA"):
            _C.DDP(comm1, device="cuda")
    else:
        with pytest.raises(RuntimeError, match="built without them"):
            _C.NcclComm(comm1, 0)
        with pytest.raises(_C.BaguaNotSupportedError):
            _C.DDP(comm1, device="cuda")
    comm1.barrier()  # the communicator is still usable


def test_host_buffer_has_no_cuda_interface(comm1):
    ddp = _C.DDP(comm1, algorithm="gradient_allreduce", optimizer="none")
    w = torch.ones(8)
    ddp.register("w", w.data_ptr(), None, 8)
    ddp.ready()
    buf = ddp.param_buffer(0, 8)
    assert not hasattr(buf, "__cuda_array_interface__")
    assert torch.equal(torch.frombuffer(buf, dtype=torch.float32), w)


def test_ddp_wrapper_device_ids():
    cpu_model = torch.nn.Linear(2, 2)
    ddp_wrapper._check_devices(cpu_model, None, None, 0)
    ddp_wrapper._check_devices(cpu_model, ["cpu"], "cpu", 0)
    with pytest.raises(ValueError, match=r"device_ids=\[0\] on a module on cpu"):
        ddp_wrapper._check_devices(cpu_model, [0], None, 0)
    with pytest.raises(ValueError, match="output_device"):
        ddp_wrapper._check_devices(cpu_model, None, 0, 0)


def test_gpu_bench_refuses_a_torch_without_cuda():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    bench = os.path.join(root, "bench", "torch_gpu.sh")
    r = subprocess.run([bench, "--repeat", "x"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and '--repeat "x" is not a positive integer' in r.stderr, r.stderr
    if HAS_GPU:
        return
    r = subprocess.run([bench, "--python", "/usr/bin/python3"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "no torch with a visible CUDA device" in r.stderr, r.stderr


# ---- with a GPU ----------------------------------------------------------------------------

GPU_CASES = ["primitives", "refusals", "train", "fused", "no_host_sync", "matches_cpu"]


@pytest.mark.gpu
@gpu
def test_gpu_cases(workers):
    """All cases in one launch of two ranks: each launch costs two torch start-ups and new
    NCCL communicators, which a lent GPU's minutes cannot spend six times."""
    r = workers("cuda_worker.py", 2, GPU_CASES, timeout=300)
    missing = {case: [out for out in r.outputs if f"case {case} ok" not in out]
               for case in GPU_CASES}
    assert not any(missing.values()) and all(c == 0 for c in r.codes), "\n".join(r.outputs)
