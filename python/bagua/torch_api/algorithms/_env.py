"""The algorithm group of libbagua's parameter registry, read for :func:`from_env`.

The variables are read through the registry (``bagua._C.param_get``), which validates them
once for the C library and this front end alike; a variable it refuses reads as None, and the
environment is consulted only to quote the refused value in the error.
"""

import os

from bagua import _C

# libbagua's algorithms and which options each has come from its table of algorithms
# (bagua._C.ddp_algorithms, ddp_algorithm_options), never re-encoded here.
ALGORITHMS = tuple(_C.ddp_algorithms().split())

# libbagua's config field -> the constructor argument, its variable, how to read the value.
_FIELDS = {
    "hierarchical": ("hierarchical", "BAGUA_HIERARCHICAL", "hier"),
    "peer_mode": ("peer_selection_mode", "BAGUA_PEER_SELECTION_MODE", "str"),
    "comm_interval": ("communication_interval", "BAGUA_COMMUNICATION_INTERVAL", "int"),
    "warmup_steps": ("warmup_steps", "BAGUA_WARMUP_STEPS", "warmup"),
    "sync_interval_ms": ("sync_interval_ms", "BAGUA_SYNC_INTERVAL_MS", "int"),
    "error_feedback": ("error_feedback", "BAGUA_ERROR_FEEDBACK", "bool"),
    "rank": ("rank", "BAGUA_POWERSGD_RANK", "int"),
}


def applying(name, takes):
    """(argument, variable, kind) of the options libbagua applies to algorithm `name` that the
    front end's constructor takes (`takes`: its argument names)."""
    fields = (_C.ddp_algorithm_options(name) or "").split()
    return [_FIELDS[f] for f in fields if f in _FIELDS and _FIELDS[f][0] in takes]


def _accepted(var, raw):
    """What libbagua's registry accepts for `var`, from its own refusal of `raw` (the torch
    front end takes the named algorithms only, not ``auto``)."""
    if var == "BAGUA_ALGORITHM":
        return ", ".join(ALGORITHMS)
    message = _C.param_check(var, raw) or ""
    return message.split("accepted: ", 1)[-1].split("accepted values: ", 1)[-1]


def _get(var):
    """The registry's value of `var`, or None when unset; raises when the registry refused it."""
    value = _C.param_get(var)
    if value is not None:
        return value
    raw = os.environ.get(var)
    if raw is None or (raw == "" and var != "BAGUA_ALGORITHM"
                       and var != "BAGUA_PEER_SELECTION_MODE"):
        return None
    raise ValueError(f"{var}={raw!r} is invalid; accepted: {_accepted(var, raw)}")


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
            + ", ".join(ALGORITHMS))
    return value.lower() if value is not None else None


def options(name, takes):
    """Constructor arguments of algorithm `name` from the option variables that apply to it
    (`takes`: the argument names its constructor accepts)."""
    out = {}
    for arg, var, kind in applying(name, takes):
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


def applicable(name, values, takes):
    """The entries of `values` (constructor arguments) that algorithm `name` has."""
    return {arg: values[arg] for arg, _, _ in applying(name, takes) if arg in values}
