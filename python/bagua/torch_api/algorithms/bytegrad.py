"""ByteGrad: gradients averaged through 8-bit MinMaxUInt8 compression."""

from bagua.torch_api.algorithms.base import Algorithm, hier_flag


class ByteGradAlgorithm(Algorithm):
    """Centralized synchronous gradient averaging with MinMaxUInt8 compression: a quantized
    reduce-scatter followed by a quantized allgather (a quarter of the bytes of allreduce).

    Args:
        hierarchical: compress among node leaders only (full precision within a node).
        average: must be True (libbagua averages).
        error_feedback: an extension of Bagua-C: keep each rank's quantization error and add it
            to the next step's gradient (off by default, as upstream has none).
    """

    name = "bytegrad"

    def __init__(self, hierarchical=True, average=True, error_feedback=False):
        if not average:
            raise ValueError("ByteGradAlgorithm(average=False) is not supported: libbagua "
                             "always averages gradients")
        self.hierarchical = hierarchical
        self.average = average
        self.error_feedback = error_feedback

    def config(self):
        return {"algorithm": self.name, "hierarchical": hier_flag(self.hierarchical),
                "error_feedback": int(bool(self.error_feedback))}
