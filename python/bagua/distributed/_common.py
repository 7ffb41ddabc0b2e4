"""What the front doors share: finding bagua-launch, spelling options both ways, the Bagua
options that upstream's launch and run both take, the worker program, and handing over to
bagua-launch.

Nothing here reads the environment: libbagua's parameter registry is the one place that does,
and bagua-launch reads its own variables (BAGUA_NPROC_PER_NODE, BAGUA_PYTHON, ...) itself. The
environment is handed on to bagua-launch as it is, plus what an option sets for the agents
(run's --role: BAGUA_ROLE).
"""

import argparse
import math
import os
import shutil
import sys

LAUNCHER = "bagua-launch"

# The module that adds --local_rank=N to a worker's command line (--set_additional_flag).
LOCAL_RANK_MODULE = "bagua.distributed._local_rank_arg"


class OptionError(Exception):
    """An upstream option this front door cannot honour; the message names it and says why."""

    def __init__(self, option, why):
        super().__init__(f"{option}: {why}")
        self.option = option


def find_launcher():
    """The path of bagua-launch: the one the build put next to this package, else PATH's.

    The build assembles the package in BUILD/python/bagua and the launcher in
    BUILD/launcher/bagua-launch, so a package imported from a build tree uses that tree's
    launcher rather than an older installed one. Raises FileNotFoundError naming both places.
    """
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    built = os.path.normpath(os.path.join(package, "..", "..", "launcher", LAUNCHER))
    if os.path.isfile(built) and os.access(built, os.X_OK):
        return built
    found = shutil.which(LAUNCHER)
    if found:
        return found
    raise FileNotFoundError(
        f"{LAUNCHER} not found: neither {built} (next to the bagua package of a build tree) "
        f"nor {LAUNCHER} in PATH; build it (cmake --build) or install it")


def add_option(parser, *names, **kwargs):
    """Adds an option under its upstream spelling (--nproc_per_node) and torch's dashed one
    (--nproc-per-node); the attribute is named after the first long spelling."""
    spellings = []
    for name in names:
        spellings.append(name)
        if name.startswith("--") and "_" in name:
            spellings.append(name.replace("_", "-"))
    parser.add_argument(*spellings, **kwargs)


def add_program(parser):
    """The training script (or module, or program) and its own arguments."""
    parser.add_argument("training_script", help="the training script (or module with -m, or "
                        "program with --no_python) that every worker runs")
    parser.add_argument("training_script_args", nargs=argparse.REMAINDER,
                        help="the script's own arguments")


def add_bagua_options(parser):
    """The options upstream's launch and run both add for Bagua itself."""
    add_option(parser, "--bagua_service_port", type=int, default=None,
               help="upstream's autotuning service port (29501); accepted, no effect: "
                    "Bagua-C tunes inside the job, without a service")
    add_option(parser, "--default_bucket_size", type=int, default=None,
               help="bucket size in bytes: BAGUA_BUCKET_SIZE for every worker")
    add_option(parser, "--autotune_level", type=int, default=0,
               help="0: off (default); 1: bagua-launch --autotune")
    add_option(parser, "--autotune_max_samples", type=int, default=None,
               help="BAGUA_AUTOTUNE_MAX_SAMPLES for every worker (trials of the autotuner)")
    add_option(parser, "--autotune_sampling_confidence_time", type=float, default=None,
               help="refused: the autotuner counts steps (BAGUA_AUTOTUNE_SAMPLE_STEPS)")
    add_option(parser, "--autotune_warmup_time", type=float, default=None,
               help="refused: the autotuner counts steps (BAGUA_AUTOTUNE_WARMUP_STEPS)")
    add_option(parser, "--is_output_autotune_log", action="store_true",
               help="accepted, no effect: rank 0 always prints the autotuner's trials")
    add_option(parser, "--enable_bagua_net", action="store_true",
               help="Bagua-Net for NCCL: bagua-launch --net-plugin bagua")
    add_option(parser, "--use_env", action="store_true",
               help="accepted, no effect: workers always get LOCAL_RANK and the others in "
                    "their environment")


def check_port(option, port):
    """Refuses a port number outside 1-65535."""
    if port is not None and not 1 <= port <= 65535:
        raise OptionError(option, f"{port} is not a TCP port; accepted: 1 to 65535")


def check_range(option, value, low, high, unit="", variable=None):
    """Refuses a number (int or float) that is not finite or not within [low, high]; the
    message names the option, the value and the range (and the variable that holds the same
    setting, whose bounds in common/params.def these are). None passes (the option was not
    given)."""
    if value is None:
        return value
    if not (math.isfinite(value) and low <= value <= high):
        where = f" (as {variable})" if variable else ""
        raise OptionError(option, f"{value!r} is out of range; accepted: {low:g} to "
                          f"{high:g}{unit}{where}")
    return value


# The libbagua registry's bounds (common/params.def) of the settings these options set;
# tests/python/test_run_options.py checks them against the registry.
BUCKET_SIZE_RANGE = (4096, 4294967296)
AUTOTUNE_MAX_SAMPLES_RANGE = (1, 1000)


def bagua_flags(args):
    """bagua-launch flags for the options add_bagua_options() declares."""
    out = []
    check_port("--bagua_service_port", args.bagua_service_port)
    if args.autotune_level == 1:
        out.append("--autotune")
    elif args.autotune_level != 0:
        raise OptionError("--autotune_level", f"{args.autotune_level} is not a level; "
                          "accepted: 0 (off) or 1 (tune, bagua-launch --autotune), upstream's "
                          "two levels")
    if args.autotune_max_samples is not None:
        check_range("--autotune_max_samples", args.autotune_max_samples,
                    *AUTOTUNE_MAX_SAMPLES_RANGE, variable="BAGUA_AUTOTUNE_MAX_SAMPLES")
        out += ["-x", f"BAGUA_AUTOTUNE_MAX_SAMPLES={args.autotune_max_samples}"]
    # Upstream's autotuner measured for so many seconds; Bagua-C's counts training steps, and a
    # number of seconds cannot be turned into steps before the job has run any.
    by_steps = (("--autotune_sampling_confidence_time", "BAGUA_AUTOTUNE_SAMPLE_STEPS"),
                ("--autotune_warmup_time", "BAGUA_AUTOTUNE_WARMUP_STEPS"))
    for option, variable in by_steps:
        if getattr(args, option[2:]) is not None:
            raise OptionError(option, "Bagua-C's autotuner counts steps, not seconds; accepted: "
                              f"leave it out, or set {variable} in the environment")
    if args.default_bucket_size is not None:
        check_range("--default_bucket_size", args.default_bucket_size, *BUCKET_SIZE_RANGE,
                    " bytes", "BAGUA_BUCKET_SIZE")
        out += ["-x", f"BAGUA_BUCKET_SIZE={args.default_bucket_size}"]
    if args.enable_bagua_net:
        out += ["--net-plugin", "bagua"]
    return out


def program_argv(script, script_args, module=False, no_python=False, python=None,
                 local_rank_flag=False):
    """bagua-launch's program words (with --python and its companions) for a worker.

    As upstream does, a program runs under `python` (the caller's interpreter by default)
    unless `no_python`, whatever its name; output is unbuffered (upstream ran ``python -u``).
    `local_rank_flag` adds ``--local_rank=N`` to each worker's arguments, through a small
    module that reads LOCAL_RANK and executes the real program.
    """
    python = python or sys.executable
    if module and no_python:
        raise OptionError("--no_python", "it runs the program as it is and --module runs a "
                          "module with python; accepted: one of them")
    if local_rank_flag:
        mode = "module" if module else "exec" if no_python else "script"
        unbuffered = [] if no_python else ["-x", "PYTHONUNBUFFERED=1"]
        return (["--python", python] + unbuffered
                + ["-m", LOCAL_RANK_MODULE, mode, script, *script_args])
    if no_python:
        return ["--no-python", "--", script, *script_args]
    out = ["--python", python, "-x", "PYTHONUNBUFFERED=1"]
    if module:
        return out + ["-m", script, *script_args]
    if script.endswith(".py"):
        return out + ["--", script, *script_args]
    # bagua-launch runs only .py programs under the interpreter; upstream runs any script
    # under python, so the interpreter becomes the program.
    return out + ["--", python, script, *script_args]


def execute(prog, parse, build, argv=None, environ=None):
    """Parses `argv`, builds bagua-launch's arguments and executes bagua-launch in this process
    (its signals and exit status become the command's); exit 2 with the reason when an option
    is refused or bagua-launch cannot be found. `environ`, when given, maps the parsed options
    to variables bagua-launch gets on top of this process's environment (settings the agents
    read from the registry, such as BAGUA_ROLE)."""
    try:
        args = parse(argv)
        words = build(args)
        extra = environ(args) if environ else {}
        launcher = find_launcher()
    except (OptionError, FileNotFoundError) as e:
        print(f"{prog}: {e}", file=sys.stderr)
        sys.exit(2)
    sys.stdout.flush()
    sys.stderr.flush()
    if extra:
        os.execve(launcher, [launcher, *words], {**os.environ, **extra})
    os.execv(launcher, [launcher, *words])
