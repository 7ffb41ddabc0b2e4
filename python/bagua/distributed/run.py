"""``python -m bagua.distributed.run``: upstream Bagua's torchrun-shaped (elastic) command, run
by bagua-launch.

One node, or an elastic job on this machine::

    python -m bagua.distributed.run --standalone --nproc_per_node 4 train.py
    python -m bagua.distributed.run --standalone --nnodes 1:2 --nproc_per_node 2 train.py

Several nodes, the same command on each::

    python -m bagua.distributed.run --nnodes 2:4 --nproc_per_node 4 --rdzv_backend etcd \\
        --rdzv_endpoint ETCD_HOST:2379 --rdzv_id job7 train.py

bagua-launch's agents always meet through etcd: the etcd backends map to its
``--rdzv-endpoint``. static and c10d (a TCP store one of torchrun's agents hosts) of one node
get a private etcd; across nodes, the node at the endpoint's address (static: the master's)
hosts the job's etcd there, as bagua-launch's own --rdzv-backend does.
The table of every option is in docs/launcher.md ("Upstream's launch commands").
"""

import argparse
import math
import os
import re

from bagua.distributed._common import (OptionError, add_bagua_options, add_option,
                                       add_program, bagua_flags, check_port, check_range,
                                       execute, program_argv)

PROG = "python -m bagua.distributed.run"

BACKENDS = ("static", "c10d", "etcd", "etcd-v2")

# torch's keep-alive defaults, for a --rdzv_conf that gives only one of the two.
KEEP_ALIVE_INTERVAL_S = 5.0
KEEP_ALIVE_MAX_ATTEMPT = 3


def parser():
    """The argument parser: upstream's options in both spellings."""
    # No abbreviations: argparse would take an option of the script's own (--a, after the
    # script) for an abbreviation of one of these, and fail when it is ambiguous.
    p = argparse.ArgumentParser(
        prog=PROG, allow_abbrev=False,
        description="Starts this node's workers through bagua-launch, with "
        "upstream Bagua's bagua.distributed.run (torchrun) options.")
    add_option(p, "--nnodes", default=None,
               help="N or MIN:MAX nodes (default 1:1); MIN:MAX is elastic")
    add_option(p, "--nproc_per_node", default="auto",
               help="workers per node: a number, cpu, gpu or auto (default: GPUs, else CPUs)")
    add_option(p, "--rdzv_backend", default="static",
               help="etcd or etcd-v2 (with --rdzv_endpoint); static (default) or c10d: the "
                    "node at the endpoint's (static: the master's) address hosts the etcd")
    add_option(p, "--rdzv_endpoint", default="", help="the etcd's HOST:PORT[,...]")
    add_option(p, "--rdzv_id", default="none", help="job id shared by the nodes")
    add_option(p, "--rdzv_conf", default="",
               help="KEY=VALUE,...: join_timeout, timeout, last_call_timeout, read_timeout, "
                    "keep_alive_interval, keep_alive_max_attempt (is_host and rank: no effect)")
    add_option(p, "--standalone", action="store_true",
               help="a private etcd on this machine (--rdzv_backend, --rdzv_endpoint and "
                    "--rdzv_id are ignored, as upstream does)")
    add_option(p, "--max_restarts", type=int, default=0,
               help="worker-failure restarts before the job fails (default 0, as torchrun)")
    add_option(p, "--monitor_interval", type=float, default=5.0,
               help="accepted, no effect: the agent watches its workers continuously")
    add_option(p, "--start_method", default="spawn", choices=["spawn", "fork", "forkserver"],
               help="accepted, no effect: every worker is a fresh process")
    add_option(p, "--role", default="default",
               help="the workers' ROLE_NAME (default: default); one role per job")
    add_option(p, "-m", "--module", action="store_true",
               help="the script is a module, run as python -m")
    add_option(p, "--no_python", action="store_true",
               help="run the script as it is, not under python")
    add_option(p, "--run_path", action="store_true",
               help="run the script under python (beats --no_python, as upstream)")
    add_option(p, "--log_dir", default=None, help="per-rank log files: bagua-launch --log-dir")
    add_option(p, "-r", "--redirects", default="0",
               help="0-3 or LOCAL_RANK:0-3,...: those streams reach only the --log_dir files")
    add_option(p, "-t", "--tee", default="0",
               help="console and files: needs --log_dir (every rank's output goes to both)")
    add_option(p, "--node_rank", type=int, default=0,
               help="checked, no effect: node ranks follow the order in which nodes join")
    add_option(p, "--master_addr", default="127.0.0.1",
               help="accepted, no effect: the rendezvous picks the master")
    add_option(p, "--master_port", type=int, default=29500,
               help="accepted, no effect: the rendezvous picks the master")
    add_bagua_options(p)
    add_program(p)
    return p


def parse_args(argv=None):
    """Parses a command line (default: sys.argv[1:]) into a Namespace."""
    return parser().parse_args(argv)


def parse_nnodes(text):
    """(MIN, MAX) of "N" or "MIN:MAX"; OptionError when malformed."""
    parts = text.split(":")
    try:
        if len(parts) == 1:
            low = high = int(parts[0])
        elif len(parts) == 2:
            low, high = int(parts[0]), int(parts[1])
        else:
            raise ValueError
    except ValueError:
        raise OptionError("--nnodes", f"{text!r}; accepted: N or MIN:MAX") from None
    if not 0 < low <= high:
        raise OptionError("--nnodes", f"{text!r}; accepted: 0 < MIN <= MAX")
    return low, high


def _gpu_count():
    """CUDA devices torch sees (0 when CUDA is not available); torch is imported only here,
    so that a command that names its worker count does not pay for the import."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def local_world_size(value, gpu_count=_gpu_count):
    """Workers per node for --nproc_per_node: a number, cpu (CPUs), gpu (CUDA devices) or auto
    (CUDA devices when there are any, else CPUs), as upstream decides."""
    try:
        n = int(value)
    except ValueError:
        if value == "cpu":
            n = os.cpu_count()
        elif value == "gpu":
            n = gpu_count()
            if n == 0:
                raise OptionError("--nproc_per_node", "gpu: CUDA is not available; accepted: "
                                  "a number, cpu or auto") from None
        elif value == "auto":
            n = gpu_count() or os.cpu_count()
        else:
            raise OptionError("--nproc_per_node", f"{value!r}; accepted: a number, cpu, gpu "
                              "or auto") from None
    check_range("--nproc_per_node", n, *NPROC_PER_NODE_RANGE, variable="BAGUA_NPROC_PER_NODE")
    return n


# --rdzv_conf's numeric keys (seconds, as torch takes them): bagua-launch's flag, its unit
# (1 or 1000 per second) and the accepted range in seconds, which is the libbagua registry's
# range of the flag's setting (common/params.def) expressed in seconds.
RDZV_CONF_SECONDS = {
    "join_timeout": ("--rdzv-timeout", 1, 1, 86400, "BAGUA_RDZV_TIMEOUT_S"),
    "timeout": ("--rdzv-timeout", 1, 1, 86400, "BAGUA_RDZV_TIMEOUT_S"),
    "last_call_timeout": ("--last-call-ms", 1000, 0, 600, "BAGUA_RDZV_LAST_CALL_MS"),
    "read_timeout": ("--etcd-timeout-ms", 1000, 0.1, 600, "BAGUA_ETCD_TIMEOUT_MS"),
}
# keep_alive_interval x keep_alive_max_attempt becomes the agents' etcd lease TTL
# (--lease-ttl, BAGUA_LEASE_TTL_S: 2 to 3600 s); each factor alone is bounded by it too.
LEASE_TTL_RANGE = (2, 3600)
MAX_RESTARTS_RANGE = (0, 1000000)         # BAGUA_MAX_RESTARTS
NPROC_PER_NODE_RANGE = (1, 4096)          # BAGUA_NPROC_PER_NODE
MONITOR_INTERVAL_RANGE = (0.001, 86400)   # seconds; no effect here, but checked as upstream's
RDZV_CONF_KEYS = ("join_timeout, timeout, last_call_timeout, read_timeout, "
                  "keep_alive_interval, keep_alive_max_attempt, is_host, rank")


def _number(key, value, low, high):
    """``value`` of --rdzv_conf's ``key`` as a finite number of seconds in [low, high]."""
    try:
        s = float(value)
    except ValueError:
        raise OptionError("--rdzv_conf", f"{key}={value!r} is not a number of seconds; "
                          f"accepted: {low:g} to {high:g}") from None
    if not (math.isfinite(s) and low <= s <= high):
        raise OptionError("--rdzv_conf", f"{key}={value!r} is out of range; accepted: "
                          f"{low:g} to {high:g} seconds")
    return s


def rdzv_conf_flags(text):
    """bagua-launch flags for torchrun's --rdzv_conf KEY=VALUE,... (seconds, like torch).

    Every numeric value must be finite and within the range of the bagua-launch setting it
    becomes (RDZV_CONF_SECONDS, LEASE_TTL_RANGE); anything else is an OptionError."""
    out = []
    keep_alive = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise OptionError("--rdzv_conf", f"{item!r} is not KEY=VALUE; accepted keys: "
                              f"{RDZV_CONF_KEYS}")
        if key in RDZV_CONF_SECONDS:
            flag, per_second, low, high, _ = RDZV_CONF_SECONDS[key]
            s = _number(key, value, low, high)
            count = math.ceil(s) if per_second == 1 else round(s * per_second)
            out += [flag, str(count)]
        elif key == "keep_alive_interval":
            keep_alive[key] = _number(key, value, 0.001, LEASE_TTL_RANGE[1])
        elif key == "keep_alive_max_attempt":
            keep_alive[key] = _number(key, value, 1, LEASE_TTL_RANGE[1])
        elif key in ("is_host", "rank"):
            # Which node hosts torch's store, and the static backend's node rank: the etcd
            # rendezvous has neither.
            continue
        else:
            raise OptionError("--rdzv_conf", f"{key}: no counterpart here; accepted keys: "
                              f"{RDZV_CONF_KEYS}")
    if keep_alive:
        # torch declares a node dead after so many missed heartbeats; an etcd lease of that
        # length does the same for a bagua-agent.
        ttl = math.ceil(keep_alive.get("keep_alive_interval", KEEP_ALIVE_INTERVAL_S)
                        * keep_alive.get("keep_alive_max_attempt", KEEP_ALIVE_MAX_ATTEMPT))
        low, high = LEASE_TTL_RANGE
        if not low <= ttl <= high:
            raise OptionError("--rdzv_conf", f"keep_alive_interval x keep_alive_max_attempt = "
                              f"{ttl} s is out of range (the agents' etcd lease, --lease-ttl); "
                              f"accepted: {low} to {high} seconds")
        out += ["--lease-ttl", str(ttl)]
    return out


def rendezvous_flags(args, min_nodes, max_nodes):
    """bagua-launch's rendezvous flags for --standalone, --rdzv_backend, _endpoint and _id."""
    if args.standalone:
        return ["--standalone"]
    backend = args.rdzv_backend
    if backend in ("etcd", "etcd-v2"):
        if not args.rdzv_endpoint:
            raise OptionError("--rdzv_endpoint", f"the {backend} backend needs the etcd's "
                              "HOST:PORT; accepted: --rdzv_endpoint HOST:PORT, or --standalone")
        # The same id on every node, "none" included, as torch uses it.
        return ["--rdzv-endpoint", args.rdzv_endpoint, "--job-id", args.rdzv_id]
    if backend in ("static", "c10d"):
        if max_nodes > 1 and (args.rdzv_endpoint or min_nodes > 1):
            # Nodes started one by one: bagua-launch's node at the endpoint's address (static:
            # the master's) hosts the job's etcd there, and the others join it.
            where = (["--rdzv-endpoint", args.rdzv_endpoint] if args.rdzv_endpoint else
                     ["--master-addr", args.master_addr, "--master-port", str(args.master_port)])
            # The static backend's ranks: the nodes take their places by --node_rank.
            if backend == "static":
                where += ["--node-rank", str(args.node_rank)]
            return ["--rdzv-backend", backend] + where + ["--job-id", args.rdzv_id]
        # One node: a private etcd here does what the store on this node did.
        return [] if args.rdzv_id == "none" else ["--job-id", args.rdzv_id]
    raise OptionError("--rdzv_backend", f"{backend!r} is not a backend here; accepted: etcd or "
                      "etcd-v2 with --rdzv_endpoint, static or c10d for one node, or "
                      "--standalone")


def build_argv(args, python=None, gpu_count=_gpu_count):
    """bagua-launch's arguments for parsed upstream run options (no program name first).

    Raises OptionError for an option that has no counterpart. `python` is the workers'
    interpreter, by default the caller's (sys.executable); `gpu_count` counts CUDA devices
    for --nproc_per_node gpu and auto.
    """
    min_nodes, max_nodes = parse_nnodes(args.nnodes or "1:1")
    out = ["--nproc-per-node", str(local_world_size(args.nproc_per_node, gpu_count))]
    # torchrun's default is 0 (a failed worker ends the job), not bagua-launch's 3: a script
    # written for torchrun must not be run again behind its author's back.
    check_range("--max_restarts", args.max_restarts, *MAX_RESTARTS_RANGE,
                variable="BAGUA_MAX_RESTARTS")
    out += ["--max-restarts", str(args.max_restarts)]
    if args.nnodes is not None:
        out += ["--nnodes", args.nnodes]
    out += rendezvous_flags(args, min_nodes, max_nodes)
    out += rdzv_conf_flags(args.rdzv_conf)
    check_range("--monitor_interval", args.monitor_interval, *MONITOR_INTERVAL_RANGE,
                " seconds (no effect here)")
    if not 0 <= args.node_rank < max_nodes:
        raise OptionError("--node_rank", f"{args.node_rank} is not a node of --nnodes "
                          f"{args.nnodes or '1:1'}; accepted: 0 to {max_nodes - 1}")
    check_port("--master_port", args.master_port)
    if args.redirects != "0":
        # bagua-launch checks the value; the streams it names reach the per-rank files only.
        if not args.log_dir:
            raise OptionError("--redirects", "the redirected streams go to the per-rank files "
                              "of --log_dir; accepted: --log_dir DIR as well")
        out += ["--redirects", args.redirects]
    if args.tee != "0" and not args.log_dir:
        raise OptionError("--tee", "the files go to --log_dir; accepted: --log_dir DIR as well "
                          "(every rank's output then reaches the console and DIR)")
    if args.log_dir:
        out += ["--log-dir", os.path.abspath(args.log_dir)]
    out += bagua_flags(args)
    no_python = args.no_python
    if args.run_path:
        if args.module:
            raise OptionError("--run_path", "it runs a script by its path and --module runs a "
                              "module; accepted: one of them")
        no_python = False
    out += program_argv(args.training_script, args.training_script_args, module=args.module,
                        no_python=no_python, python=python)
    return out


# --role becomes the agents' BAGUA_ROLE (common/params.def), whose values are an id's:
# 1 to 64 of these characters, neither "." nor "..".
ROLE = re.compile(r"[A-Za-z0-9._-]{1,64}")


def launch_env(args):
    """The variables bagua-launch gets in its environment for parsed run options.

    --role reaches every agent as BAGUA_ROLE, a registry parameter that bagua-launch passes on
    (local agents inherit it, remote ones get it with the other BAGUA_* settings) and the agent
    reads as the default of its --role; each worker gets it as ROLE_NAME. OptionError for a role
    the agents would refuse."""
    role = args.role
    if not ROLE.fullmatch(role) or role in (".", ".."):
        raise OptionError("--role", f"{role!r} is not a role name here; accepted: 1 to 64 "
                          "characters from A-Z a-z 0-9 . _ - (not . or ..)")
    return {"BAGUA_ROLE": role}


def main(argv=None):
    """Entry point: translate the command line and execute bagua-launch."""
    execute(PROG, parse_args, build_argv, argv, environ=launch_env)


if __name__ == "__main__":
    main()
