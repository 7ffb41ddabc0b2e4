"""Bagua's six algorithms for ``model.with_bagua()``, with upstream's class names."""

from bagua.torch_api.algorithms import (  # noqa: F401
    async_model_average, bytegrad, decentralized, gradient_allreduce, q_adam)
from bagua.torch_api.algorithms.async_model_average import AsyncModelAverageAlgorithm  # noqa
from bagua.torch_api.algorithms.base import Algorithm  # noqa: F401
from bagua.torch_api.algorithms.bytegrad import ByteGradAlgorithm  # noqa: F401
from bagua.torch_api.algorithms.decentralized import (  # noqa: F401
    DecentralizedAlgorithm, LowPrecisionDecentralizedAlgorithm)
from bagua.torch_api.algorithms.gradient_allreduce import GradientAllReduceAlgorithm  # noqa
from bagua.torch_api.algorithms.q_adam import QAdamAlgorithm, QAdamOptimizer  # noqa: F401

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
