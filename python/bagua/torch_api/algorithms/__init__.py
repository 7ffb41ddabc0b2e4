"""Bagua's six algorithms for ``model.with_bagua()``, with upstream's class names."""

from bagua.torch_api.algorithms import (
    async_model_average, base, bytegrad, decentralized, gradient_allreduce, q_adam)
from bagua.torch_api.algorithms.async_model_average import AsyncModelAverageAlgorithm
from bagua.torch_api.algorithms.base import Algorithm
from bagua.torch_api.algorithms.bytegrad import ByteGradAlgorithm
from bagua.torch_api.algorithms.decentralized import (
    DecentralizedAlgorithm, LowPrecisionDecentralizedAlgorithm)
from bagua.torch_api.algorithms.gradient_allreduce import GradientAllReduceAlgorithm
from bagua.torch_api.algorithms.q_adam import QAdamAlgorithm, QAdamOptimizer

__all__ = [
    "async_model_average", "base", "bytegrad", "decentralized", "gradient_allreduce", "q_adam",
    "Algorithm", "AsyncModelAverageAlgorithm", "ByteGradAlgorithm", "DecentralizedAlgorithm",
    "LowPrecisionDecentralizedAlgorithm", "GradientAllReduceAlgorithm", "QAdamAlgorithm",
    "QAdamOptimizer", "from_name",
]

_BY_NAME = {
    "gradient_allreduce": GradientAllReduceAlgorithm, "bytegrad": ByteGradAlgorithm,
    "decentralized": DecentralizedAlgorithm,
    "low_precision_decentralized": LowPrecisionDecentralizedAlgorithm,
    "async": AsyncModelAverageAlgorithm,
}


def from_name(name, **kwargs):
    """An algorithm by libbagua's name (qadam needs its optimizer: build it directly)."""
    try:
        return _BY_NAME[name](**kwargs)
    except KeyError:
        raise ValueError(f"algorithm {name!r} is unknown; accepted: "
                         f"{', '.join(sorted(_BY_NAME))}, qadam") from None
