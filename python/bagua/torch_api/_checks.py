"""The argument checks of the communication primitives, and the reduce operators and dtypes
they accept: below both communication.py (process groups) and _primitives.py (the calls), so
that neither imports the other's internals."""

import enum
import operator

import torch

from bagua import _C
from bagua.torch_api import _cuda


class ReduceOp(enum.IntEnum):
    """Reduction operators, with upstream Bagua's (Aluminum's) numbers.

    SUM, AVG, MIN and MAX run inside libbagua. PRODUCT (any dtype) and the bitwise BOR, BAND,
    BXOR (integer dtypes) are computed here: the ranks' inputs are gathered and folded in
    rank order, so every rank gets the same bits.
    """

    SUM = 0
    PRODUCT = 1
    MIN = 2
    MAX = 3
    BOR = 7
    BAND = 8
    BXOR = 9
    AVG = 10


_OPS = {ReduceOp.SUM: _C.SUM, ReduceOp.AVG: _C.AVG, ReduceOp.MIN: _C.MIN, ReduceOp.MAX: _C.MAX}

# The operators libbagua lacks, as element-wise torch functions applied rank by rank.
_FOLDS = {ReduceOp.PRODUCT: torch.mul, ReduceOp.BOR: torch.bitwise_or,
          ReduceOp.BAND: torch.bitwise_and, ReduceOp.BXOR: torch.bitwise_xor}

_DTYPES = {
    torch.float32: _C.F32, torch.float16: _C.F16, torch.bfloat16: _C.BF16,
    torch.float64: _C.F64, torch.int32: _C.I32, torch.int64: _C.I64, torch.uint8: _C.U8,
}
_DTYPE_OF_CODE = {code: dtype for dtype, code in _DTYPES.items()}


# ---------------------------------------------------------------------------------------------
# Argument checks
# ---------------------------------------------------------------------------------------------

def _parse_op(op, dtype, what):
    """Returns (ReduceOp, libbagua op code or None when the op is folded here)."""
    try:
        op = ReduceOp(op)
    except ValueError:
        raise ValueError(f"{what}: reduce op {op!r} is unknown; accepted: ReduceOp.SUM, AVG, "
                         "MIN, MAX, PRODUCT, BOR, BAND, BXOR") from None
    if op in _OPS:
        return op, _OPS[op]
    if op != ReduceOp.PRODUCT and dtype.is_floating_point:
        raise ValueError(f"{what}: ReduceOp.{op.name} needs an integer dtype (int32, int64, "
                         f"uint8), not {dtype}")
    return op, None


def _fold(rows, op):
    """Folds the rows of ``rows`` (one per rank, in rank order) with ``op``."""
    out = rows[0].clone()
    for row in rows[1:]:
        out = _FOLDS[op](out, row)
    return out


def _check(tensor, what):
    """Returns the dtype code of `tensor` after checking it can be handed to libbagua."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{what} must be a torch.Tensor, not {type(tensor).__name__}")
    _cuda.check_device(tensor.device, what)
    if tensor.is_sparse or not tensor.is_contiguous():
        raise ValueError(f"{what} must be dense and contiguous (call .contiguous() first)")
    code = _DTYPES.get(tensor.dtype)
    if code is None:
        raise TypeError(f"{what} has dtype {tensor.dtype}; accepted: float32, float16, "
                        "bfloat16, float64, int32, int64, uint8")
    return code


def _data(c, what, *tensors, p2p=False):
    """What moves the tensors' data: the communicator ``c`` itself for CPU tensors, its NCCL
    twin for CUDA tensors (metadata, such as counts, always goes through ``c``)."""
    device = _cuda.call_device(tensors, what)
    if device.type == "cpu":
        return c
    return _cuda.lane(c, device, what, p2p)


def _same_dtype(a, b, what):
    if a.dtype != b.dtype:
        raise TypeError(f"{what}: send and receive tensors differ in dtype ({a.dtype} vs "
                        f"{b.dtype})")


def _rank_arg(c, value, what):
    """Checks that ``value`` names a rank of the communicator ``c``."""
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an integer rank, not {type(value).__name__}") from None
    if not 0 <= v < c.size:
        raise ValueError(f"{what}={v} is not a rank of the communicator: accepted 0 to "
                         f"{c.size - 1} (it has {c.size} ranks)")
    return v


def _peer_arg(c, value, what):
    v = _rank_arg(c, value, what)
    if v == c.rank:
        raise ValueError(f"{what}={v} is this rank; a peer must be another rank")
    return v


def _count_arg(value, what):
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an integer, not {type(value).__name__}") from None
    if v < 0:
        raise ValueError(f"{what}={v} is negative")
    return v


def _int_list(values, n, what):
    """The first ``n`` entries of an integer sequence (as upstream, which reads one entry per
    rank and ignores any beyond), each checked to be >= 0."""
    if isinstance(values, torch.Tensor):
        values = values.tolist()
    try:
        seq = list(values)
    except TypeError:
        raise TypeError(f"{what} must be a sequence of integers, one per rank, not "
                        f"{type(values).__name__}") from None
    if len(seq) < n:
        raise ValueError(f"{what} has {len(seq)} entries; the communicator has {n} ranks and "
                         "needs one per rank")
    return [_count_arg(v, f"{what}[{j}]") for j, v in enumerate(seq[:n])]


def _overlap(a, b):
    sa, sb = a.data_ptr(), b.data_ptr()
    ea, eb = sa + a.numel() * a.element_size(), sb + b.numel() * b.element_size()
    return a.numel() and b.numel() and sa < eb and sb < ea
