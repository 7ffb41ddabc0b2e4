"""The algorithm group of libbagua's parameter registry, read for :func:`from_env`.

The variables are read through the registry (``bagua._C.param_get``), which validates them
once for the C library and this front end alike; a variable it refuses reads as None, and the
environment is consulted only to quote the refused value in the error.
"""

import os

from bagua import _C

ALGORITHMS = ("gradient_allreduce", "bytegrad", "decentralized", "low_precision_decentralized",
              "qadam", "async")

# Constructor argument, variable, the algorithms that have the option, how to read the value.
_OPTIONS = (
    ("hierarchical", "BAGUA_HIERARCHICAL",
     ("gradient_allreduce", "bytegrad", "decentralized", "low_precision_decentralized", "qadam"),
     "hier"),
    ("peer_selection_mode", "BAGUA_PEER_SELECTION_MODE", ("decentralized",), "str"),
    ("communication_interval", "BAGUA_COMMUNICATION_INTERVAL",
     ("decentralized", "low_precision_decentralized"), "int"),
    ("warmup_steps", "BAGUA_WARMUP_STEPS", ("qadam", "async"), "warmup"),
    ("sync_interval_ms", "BAGUA_SYNC_INTERVAL_MS", ("async",), "int"),
    ("error_feedback", "BAGUA_ERROR_FEEDBACK", ("bytegrad",), "bool"),
)

_ACCEPTED = {
    "BAGUA_ALGORITHM": ", ".join(ALGORITHMS),
    "BAGUA_HIERARCHICAL": "-1, 0 or 1",
    "BAGUA_PEER_SELECTION_MODE": "all, shift_one or ring",
    "BAGUA_COMMUNICATION_INTERVAL": "an integer in [1, 1000000]",
    "BAGUA_WARMUP_STEPS": "an integer in [-1, 1000000000]",
    "BAGUA_SYNC_INTERVAL_MS": "an integer in [1, 3600000]",
    "BAGUA_ERROR_FEEDBACK": "0 or 1",
}


def _get(var):
    """The registry's value of `var`, or None when unset; raises when the registry refused it."""
    value = _C.param_get(var)
    if value is not None:
        return value
    raw = os.environ.get(var)
    if raw is None or (raw == "" and var != "BAGUA_ALGORITHM"
                       and var != "BAGUA_PEER_SELECTION_MODE"):
        return None
    raise ValueError(f"{var}={raw!r} is invalid; accepted: {_ACCEPTED[var]}")


def algorithm_name():
    """BAGUA_ALGORITHM in lower case (the registry accepts any case), or None.

    ``auto`` (the advisor's switch at run time, docs/advisor.md) is refused with a ValueError:
    the torch front end builds one algorithm object for the whole run and cannot move to
    another mid-training, and silently running gradient_allreduce instead would hide that the
    request was not met. ``bagua-launch --advise`` still prints the ranking for a C program.
    """
    value = _get("BAGUA_ALGORITHM")
    if value is not None and value.lower() == "auto":
        raise ValueError(
            "BAGUA_ALGORITHM='auto' is supported by libbagua's C data-parallel layer only; "
            "the torch front end needs a named algorithm; accepted here: "
            + _ACCEPTED["BAGUA_ALGORITHM"])
    return value.lower() if value is not None else None


def options(name):
    """Constructor arguments of algorithm `name` from the option variables that apply to it."""
    out = {}
    for arg, var, algos, kind in _OPTIONS:
        if name not in algos:
            continue
        value = _get(var)
        if value is None:
            continue
        if kind == "str":
            out[arg] = value.lower()
        elif kind == "bool":
            out[arg] = int(value) == 1
        elif kind == "hier":
            if int(value) >= 0:  # -1: the algorithm's own default
                out[arg] = int(value) == 1
        elif kind == "warmup":
            if int(value) >= 0:  # -1: the algorithm's own default
                out[arg] = int(value)
        else:
            out[arg] = int(value)
    return out


def applicable(name, values):
    """The entries of `values` (constructor arguments) that algorithm `name` has."""
    return {arg: values[arg] for arg, _, algos, _ in _OPTIONS if arg in values and name in algos}
