"""Bagua's six algorithms for ``model.with_bagua()``, with upstream's class names, and
PowerSGD (torch's low-rank gradient compression).

:func:`from_env` builds the algorithm a launcher chose: bagua-launch exports its INI file's
``[algorithm]`` section as ``BAGUA_ALGORITHM`` and the ``BAGUA_*`` option variables
(docs/configuration.md), so a script that calls ``from_env()`` runs what the configuration
says without any code of its own.
"""

import inspect

from bagua import _C

from bagua.torch_api.algorithms import (
    async_model_average, base, bytegrad, decentralized, gradient_allreduce, powersgd, q_adam)
from bagua.torch_api.algorithms.async_model_average import AsyncModelAverageAlgorithm
from bagua.torch_api.algorithms.base import Algorithm
from bagua.torch_api.algorithms.bytegrad import ByteGradAlgorithm
from bagua.torch_api.algorithms.decentralized import (
    DecentralizedAlgorithm, LowPrecisionDecentralizedAlgorithm)
from bagua.torch_api.algorithms.gradient_allreduce import GradientAllReduceAlgorithm
from bagua.torch_api.algorithms.powersgd import PowerSGDAlgorithm
from bagua.torch_api.algorithms.q_adam import QAdamAlgorithm, QAdamOptimizer
from bagua.torch_api.algorithms import _env

__all__ = [
    "async_model_average", "base", "bytegrad", "decentralized", "gradient_allreduce", "powersgd",
    "q_adam", "Algorithm", "AsyncModelAverageAlgorithm", "ByteGradAlgorithm",
    "DecentralizedAlgorithm", "LowPrecisionDecentralizedAlgorithm", "GradientAllReduceAlgorithm",
    "PowerSGDAlgorithm", "QAdamAlgorithm", "QAdamOptimizer", "from_name", "from_env",
    "name_from_env", "env_of",
]

_BY_NAME = {
    "gradient_allreduce": GradientAllReduceAlgorithm, "bytegrad": ByteGradAlgorithm,
    "decentralized": DecentralizedAlgorithm,
    "low_precision_decentralized": LowPrecisionDecentralizedAlgorithm,
    "async": AsyncModelAverageAlgorithm, "powersgd": PowerSGDAlgorithm,
}


def from_name(name, **kwargs):
    """An algorithm by libbagua's name (qadam needs its optimizer: build it directly)."""
    try:
        return _BY_NAME[name](**kwargs)
    except KeyError:
        raise ValueError(f"algorithm {name!r} is unknown; accepted: "
                         f"{', '.join(sorted(_BY_NAME))}, qadam") from None


def name_from_env():
    """The algorithm named by ``BAGUA_ALGORITHM`` (bagua-launch's ``[algorithm] name``), or
    None when it is not set. Raises ValueError when it is set to something else than one of
    libbagua's algorithm names."""
    return _env.algorithm_name()


def _takes(name):
    """The option arguments the front end's algorithm `name` accepts: its constructor's, and
    for qadam its optimizer's ``warmup_steps`` (set on the QAdamOptimizer below)."""
    cls = QAdamAlgorithm if name == "qadam" else _BY_NAME.get(name)
    if cls is None:
        raise ValueError(f"algorithm {name!r} has no class in the torch front end; accepted: "
                         + ", ".join(sorted(set(_BY_NAME) | {"qadam"})))
    takes = set(inspect.signature(cls.__init__).parameters) - {"self"}
    if name == "qadam":
        takes.add("warmup_steps")
    return takes


def from_env(optimizer=None, defaults=None, **options):
    """The algorithm the environment configures, built with its options.

    The algorithm is ``BAGUA_ALGORITHM``, else ``gradient_allreduce``. Its constructor gets,
    in this order of precedence: ``options`` (the program's own settings, as a command-line
    flag would give them), then the option variables that apply to it --
    ``BAGUA_HIERARCHICAL``, ``BAGUA_PEER_SELECTION_MODE`` (decentralized),
    ``BAGUA_COMMUNICATION_INTERVAL`` (decentralized, low_precision_decentralized),
    ``BAGUA_WARMUP_STEPS`` (async; for qadam it sets the optimizer's ``warmup_steps``),
    ``BAGUA_SYNC_INTERVAL_MS`` (async), ``BAGUA_ERROR_FEEDBACK`` (bytegrad, powersgd),
    ``BAGUA_WARMUP_STEPS`` and ``BAGUA_POWERSGD_RANK`` (powersgd) -- then
    ``defaults`` (the program's own defaults), then upstream's defaults. Variables and
    ``defaults`` of options the algorithm does not have are ignored, as libbagua does.
    ``BAGUA_BUCKET_SIZE`` and qadam's ``BAGUA_ERROR_FEEDBACK`` are read by libbagua itself.

    Args:
        optimizer: the :class:`QAdamOptimizer` of the model when the environment may choose
            qadam (which brings its own optimizer); ignored by the other algorithms.
        defaults: a dict of constructor arguments that the environment overrides, e.g.
            ``{"sync_interval_ms": 50}``; entries the chosen algorithm does not take are
            ignored.
        **options: constructor arguments that win over the environment.

    Raises:
        ValueError: a variable is set to a value libbagua's registry refuses (the message
            names it, its value and what is accepted), or qadam is chosen without a
            QAdamOptimizer.
    """
    name = _env.algorithm_name() or "gradient_allreduce"
    takes = _takes(name)
    kwargs = _env.applicable(name, defaults or {}, takes)
    kwargs.update(_env.options(name, takes))
    kwargs.update(options)
    if name == "qadam":
        if not isinstance(optimizer, QAdamOptimizer):
            raise ValueError("BAGUA_ALGORITHM=qadam needs the model's QAdamOptimizer: "
                             "from_env(optimizer=QAdamOptimizer(model.parameters()))")
        warmup = kwargs.pop("warmup_steps", None)
        if warmup is not None:
            optimizer.warmup_steps = int(warmup)
        return QAdamAlgorithm(optimizer, **kwargs)
    return _BY_NAME[name](**kwargs)


def env_of(name, **options):
    """The ``BAGUA_*`` variables under which :func:`from_env` builds algorithm `name` with
    `options`: the inverse of :func:`from_env`, for a script that starts jobs (bagua-launch
    forwards these variables to every host).

    Args:
        name: one of libbagua's algorithm names.
        **options: constructor arguments that have a variable (``communication_interval``,
            ``peer_selection_mode``, ``hierarchical``, ``warmup_steps``, ``sync_interval_ms``,
            ``error_feedback``, ``rank``, as the algorithm takes them); values as the variable
            spells them, or a bool for a flag.

    Returns:
        A dict of variable names to strings, ``BAGUA_ALGORITHM`` first.

    Raises:
        ValueError: `name` is unknown, the algorithm has no variable for an option (the
            message lists those it has), or libbagua's registry refuses a value (the message
            names the variable, the value and what is accepted).
    """
    if name not in _env.ALGORITHMS:
        raise ValueError(f"algorithm {name!r} is unknown; accepted: {', '.join(_env.ALGORITHMS)}")
    fields = {arg: var for arg, var, _ in _env.applying(name, _takes(name))}
    env = {"BAGUA_ALGORITHM": name}
    for arg, value in options.items():
        if arg not in fields:
            raise ValueError(f"algorithm {name} has no option {arg!r} set by a variable; "
                             f"accepted: {', '.join(sorted(fields)) or 'none'}")
        raw = ("1" if value else "0") if isinstance(value, bool) else str(value)
        refused = _C.param_check(fields[arg], raw)
        if refused:
            raise ValueError(f"{name} {arg}={raw}: {refused}")
        env[fields[arg]] = raw
    return env
