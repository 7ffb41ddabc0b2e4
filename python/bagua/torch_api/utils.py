"""Small tensor and statistics helpers with upstream Bagua's ``bagua.torch_api.utils`` names.

User scripts and test files written for upstream Bagua import these: ``flatten`` and
``unflatten`` (torch's dense flattening), ``apply_flattened_call``, ``check_contiguous``,
``get_flattened_tensor``, ``to_bagua_datatype``, ``average_by_removing_extreme_values`` and
``StatisticalAverage``.
"""

import logging
import math
import time
from collections import OrderedDict
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.distributed as dist

__all__ = [
    "flatten", "unflatten", "apply_flattened_call", "apply_flattened_call_all",
    "check_contiguous", "get_flattened_tensor", "to_bagua_datatype",
    "average_by_removing_extreme_values", "StatisticalAverage",
]

LOGGER = logging.getLogger(__name__)

#: ``flatten(tensors)``: one new 1-D tensor holding the tensors' elements one after another.
flatten = torch._utils._flatten_dense_tensors

#: ``unflatten(flat, tensors)``: views of ``flat`` shaped like each of ``tensors``.
unflatten = torch._utils._unflatten_dense_tensors


def apply_flattened_call(bucket: Sequence[torch.Tensor], call: Callable, extra_args=None):
    """Runs ``call(flat, *extra_args)`` on the concatenation of the tensors of ``bucket`` and
    copies the result back into each tensor.

    When ``call`` is ``torch.distributed.all_reduce`` the sum is divided by the world size,
    so the tensors end up averaged over the ranks (as upstream Bagua does). All tensors of
    ``bucket`` must share a dtype and device.
    """
    coalesced = flatten(bucket)
    if extra_args is not None:
        call(coalesced, *extra_args)
    else:
        call(coalesced)
    if call is dist.all_reduce:
        coalesced /= dist.get_world_size()
    for buf, synced in zip(bucket, unflatten(coalesced, bucket)):
        buf.copy_(synced)


def _group_by_tensor_type(tensors):
    # Tensors of different types (dtype and device, as ``Tensor.type()`` names them) cannot
    # share one flat buffer, so each type gets its own bucket, in order of first appearance.
    buckets = OrderedDict()
    for tensor in tensors:
        buckets.setdefault(tensor.type(), []).append(tensor)
    return buckets


def apply_flattened_call_all(tensors: Sequence[torch.Tensor], call: Callable):
    """:func:`apply_flattened_call` on each group of same-type tensors of ``tensors``."""
    for group in _group_by_tensor_type(tensors).values():
        apply_flattened_call(group, call)


def check_contiguous(tensors: Sequence[torch.Tensor]) -> bool:
    """True when each tensor starts in memory exactly where the previous one ends, i.e. the
    tensors are consecutive pieces of one flat storage."""
    data_ptr = None
    for t in tensors:
        if data_ptr is not None and t.data_ptr() != data_ptr:
            return False
        data_ptr = t.data_ptr() + t.numel() * t.element_size()
    return True


def get_flattened_tensor(tensors: List[torch.Tensor]) -> Optional[torch.Tensor]:
    """A new 1-D tensor holding the elements of ``tensors`` one after another (dtype and
    device of the first tensor); None for an empty list."""
    if len(tensors) == 0:
        return None
    total = sum(t.numel() for t in tensors)
    flat = torch.zeros(total, dtype=tensors[0].dtype, device=tensors[0].device)
    offset = 0
    for t in tensors:
        flat[offset:offset + t.numel()] = t.reshape(-1)
        offset += t.numel()
    return flat


# Upstream's short dtype names, plus the other dtypes libbagua's collectives carry.
_BAGUA_DATATYPES = OrderedDict([
    (torch.float32, "f32"),
    (torch.float16, "f16"),
    (torch.uint8, "u8"),
    (torch.int64, "i64"),
    (torch.float64, "f64"),
    (torch.int32, "i32"),
    (torch.bfloat16, "bf16"),
])


def to_bagua_datatype(datatype: torch.dtype) -> str:
    """Bagua's short name of a torch dtype: ``torch.float32`` -> ``"f32"``, ``float16`` ->
    ``"f16"``, ``uint8`` -> ``"u8"``, ``int64`` -> ``"i64"`` (upstream's four), and also
    ``float64`` -> ``"f64"``, ``int32`` -> ``"i32"``, ``bfloat16`` -> ``"bf16"``.

    Raises:
        ValueError: for any other dtype.
    """
    name = _BAGUA_DATATYPES.get(datatype)
    if name is None:
        accepted = ", ".join(str(d).replace("torch.", "") for d in _BAGUA_DATATYPES)
        raise ValueError(f"unsupported data type {datatype}; accepted: {accepted}")
    return name


def average_by_removing_extreme_values(raw_score_list):
    """Mean and standard deviation of a series of measurements after dropping its first
    third (warm-up) and then, repeatedly, the values more than one standard deviation from
    the mean.

    Returns:
        ``(mean, std, kept_values)`` with ``kept_values`` a list.
    """
    scores = np.asarray(raw_score_list)
    scores = scores[len(scores) // 3:]

    def without_outliers(values):
        keep = np.abs(values - np.mean(values)) < np.std(values)
        kept = values[keep]
        # A series whose values all lie at one standard deviation or more (two distinct
        # values, for instance) would lose everything: keep it whole instead.
        return kept if len(kept) else values

    scores = without_outliers(scores)
    # The filtering repeats while the spread is still at least as large as the mean, at
    # most ten more times, as upstream Bagua's autotuner does.
    for _ in range(10):
        if np.std(scores) < np.mean(scores):
            break
        scores = without_outliers(scores)
    return np.mean(scores), np.std(scores), scores.tolist()


class StatisticalAverage:
    """A running average of a value over the recent past, kept at power-of-two horizons.

    ``records[i]`` is the average over the ``2 ** i`` seconds before ``last_update_time``;
    ``record_tail`` is ``(tail_seconds, tail_average)``, the average over the recorded
    period beyond the last power of two.

    Args:
        last_update_time (float, optional): time of the last record (``time.time()``
            scale). Default: now.
        records (List[float], optional): averages at the power-of-two horizons. Default:
            none.
        record_tail (Tuple[float, float], optional): ``(tail length in seconds, tail
            average)``. Default: ``(0.0, 0.0)``.
    """

    def __init__(
        self,
        last_update_time: Optional[float] = None,
        records: Optional[List[float]] = None,
        record_tail: Tuple[float, float] = (0.0, 0.0),
    ) -> None:
        # The defaults are taken per instance: a time or a list computed once at import
        # would be shared by every instance built without arguments.
        self.last_update_time: float = (
            time.time() if last_update_time is None else last_update_time)
        self.records: List[float] = [] if records is None else list(records)
        self.record_tail: Tuple[float, float] = tuple(record_tail)

    def record_seconds(self) -> float:
        """Length in seconds of the period the power-of-two records cover."""
        return 2.0 ** (len(self.records) - 1) if self.records else 0.0

    def total_recording_time(self) -> float:
        """Length in seconds of the whole recorded period, tail included."""
        return self.record_seconds() + self.record_tail[0]

    def get_records_mean(self, last_n_seconds: float) -> float:
        """Average over the last ``last_n_seconds`` seconds before the last record,
        interpolated linearly between the two nearest horizons."""
        if last_n_seconds <= 0.0:
            return 0.0
        records_seconds = self.record_seconds()
        tail_seconds, tail_mean = self.record_tail
        if not self.records:
            return tail_mean
        if last_n_seconds < 1.0:
            return self.records[0]
        if last_n_seconds <= records_seconds:
            floor_id = max(0, math.floor(math.log(last_n_seconds, 2.0)))
            floor_time = 2.0 ** floor_id
            if floor_id + 1 < len(self.records):
                a, b = self.records[floor_id], self.records[floor_id + 1]
                return a + (b - a) * (last_n_seconds - floor_time) / floor_time
            return self.records[floor_id]
        if last_n_seconds <= records_seconds + tail_seconds:
            a, b = self.records[-1], tail_mean
            return a + (b - a) * (last_n_seconds - records_seconds) / tail_seconds
        return tail_mean

    def record(self, val: float):
        """Records ``val`` as the value since the last record (until now)."""
        now = time.time()
        elapsed = now - self.last_update_time
        recorded = self.total_recording_time()
        new_records: List[float] = []
        new_tail: Tuple[float, float] = (0.0, 0.0)
        for i in range(64):
            horizon = 2.0 ** i
            if horizon <= elapsed:
                # The whole horizon lies after the previous record: it holds ``val`` only.
                new_records.append(val)
            elif horizon <= elapsed + recorded:
                share = elapsed / horizon
                new_records.append(
                    val * share + self.get_records_mean(horizon - elapsed) * (1.0 - share))
            else:
                total = elapsed + recorded
                # A first record taken at once after construction has no time to weigh.
                share = elapsed / total if total > 0 else 1.0
                tail_len = total - 2.0 ** (len(new_records) - 1)
                tail_val = val * share + self.get_records_mean(recorded) * (1.0 - share)
                new_tail = (tail_len, tail_val)
                break
        self.last_update_time = now
        self.records = new_records
        self.record_tail = new_tail

    def get(self, last_n_seconds: float) -> float:
        """Average over the last ``last_n_seconds`` seconds before now (the time since the
        last record counts as holding the latest value)."""
        elapsed = time.time() - self.last_update_time
        if last_n_seconds <= elapsed:
            if self.records:
                return self.records[0]
            return self.record_tail[1]
        return self.get_records_mean(last_n_seconds - elapsed)

    def __str__(self) -> str:
        return str({
            "last_update_time": self.last_update_time,
            "records": self.records,
            "record_tail": self.record_tail,
        })
