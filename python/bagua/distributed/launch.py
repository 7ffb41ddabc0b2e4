"""``python -m bagua.distributed.launch``: upstream Bagua's torch.distributed.launch-shaped
command, run by bagua-launch.

One node::

    python -m bagua.distributed.launch --nproc_per_node 4 train.py --lr 0.1

Several nodes, the same command on each (an etcd every node reaches; see below)::

    python -m bagua.distributed.launch --nnodes 2 --node_rank R --master_addr A \\
        --master_port P --rdzv_endpoint ETCD_HOST:2379 --nproc_per_node 4 train.py

Upstream's nodes met at rank 0's ``--master_addr:--master_port``. bagua-launch's agents meet
through an etcd instead, so a job of several nodes needs ``--rdzv_endpoint`` (an addition to
upstream's options); the job's identity there comes from ``--master_addr`` and
``--master_port``, which every node already gives alike. Without it such a job is refused.
The table of every option is in docs/launcher.md ("Upstream's launch commands").
"""

import argparse
import os
import re

from bagua.distributed._common import (OptionError, add_bagua_options, add_option,
                                       add_program, bagua_flags, check_port, check_range,
                                       execute, program_argv)

PROG = "python -m bagua.distributed.launch"


def parser():
    """The argument parser: upstream's options, both spellings, and --rdzv_endpoint."""
    # No abbreviations: argparse would take an option of the script's own (--a, after the
    # script) for an abbreviation of one of these, and fail when it is ambiguous.
    p = argparse.ArgumentParser(
        prog=PROG, allow_abbrev=False,
        description="Starts this node's workers through bagua-launch, with "
        "upstream Bagua's bagua.distributed.launch options.")
    add_option(p, "--nnodes", type=int, default=None,
               help="nodes in the job (default 1); more than 1 needs --rdzv_endpoint")
    add_option(p, "--node_rank", type=int, default=0,
               help="this node's index (default 0); checked, but node ranks follow the order "
                    "in which nodes join")
    add_option(p, "--nproc_per_node", type=int, default=None, help="workers on this node "
               "(default 1)")
    add_option(p, "--master_addr", default="127.0.0.1",
               help="with several nodes, names the job; the rendezvous picks the master")
    add_option(p, "--master_port", type=int, default=29500,
               help="with several nodes, names the job; the rendezvous picks the master")
    add_option(p, "--rdzv_endpoint", default=None,
               help="(Bagua-C) etcd HOST:PORT[,...] the nodes meet through; default: a private "
                    "etcd for a job of one node")
    add_option(p, "--set_additional_flag", action="store_true",
               help="pass --local_rank=N to each worker")
    add_option(p, "-m", "--module", action="store_true",
               help="the script is a module, run as python -m")
    add_option(p, "--no_python", action="store_true",
               help="run the script as it is, not under python")
    add_option(p, "--logdir", default=None, help="per-rank log files: bagua-launch --log-dir")
    add_option(p, "--report_metrics", action="store_true",
               help="accepted, no effect (upstream reads it nowhere); see bagua-launch "
                    "--metrics-port")
    add_option(p, "--host_list", default=None,
               help="refused: this command starts one node; see bagua.script.baguarun")
    add_option(p, "--ssh_port", type=int, default=None,
               help="refused: this command starts one node; see bagua.script.baguarun")
    add_bagua_options(p)
    add_program(p)
    return p


def parse_args(argv=None):
    """Parses a command line (default: sys.argv[1:]) into a Namespace."""
    return parser().parse_args(argv)


def job_id(master_addr, master_port):
    """The job id all nodes of a multi-node job derive alike from --master_addr and
    --master_port (what identified the job upstream), within bagua-launch's id alphabet."""
    addr = re.sub(r"[^A-Za-z0-9._-]", "-", master_addr)[:40]
    return f"launch-{addr}-{master_port}"


def build_argv(args, python=None):
    """bagua-launch's arguments for parsed upstream launch options (no program name first).

    Raises OptionError for an option that has no counterpart. `python` is the workers'
    interpreter, by default the caller's (sys.executable).
    """
    nnodes = 1 if args.nnodes is None else args.nnodes
    if nnodes < 1:
        raise OptionError("--nnodes", f"{nnodes} nodes; accepted: 1 or more")
    if not 0 <= args.node_rank < nnodes:
        raise OptionError("--node_rank", f"{args.node_rank} is not a node of --nnodes {nnodes}; "
                          f"accepted: 0 to {nnodes - 1}")
    check_port("--master_port", args.master_port)
    if args.host_list is not None or args.ssh_port is not None:
        raise OptionError("--host_list" if args.host_list is not None else "--ssh_port",
                          "this command starts the workers of one node (upstream ignored "
                          "it); accepted: leave it out, or start every host from one machine "
                          "with python -m bagua.script.baguarun --host_list ...")
    # A failed worker ended upstream's launch at once: no restarts.
    out = ["--max-restarts", "0"]
    if nnodes > 1:
        # Without an etcd of the user's, the node at --master_addr hosts the job's etcd on
        # --master_port (bagua-launch's static backend) and the others join it there.
        # An endpoint given here is an etcd of the user's (named so: with --node-rank and no
        # backend, bagua-launch would take it for the static backend's store address).
        where = (["--rdzv-backend", "etcd", "--rdzv-endpoint", args.rdzv_endpoint]
                 if args.rdzv_endpoint else
                 ["--rdzv-backend", "static", "--master-addr", args.master_addr,
                  "--master-port", str(args.master_port)])
        # Upstream's ranks: node_rank * nproc_per_node + local rank, so the nodes take their
        # places by --node_rank.
        out += ["--nnodes", str(nnodes)] + where + ["--node-rank", str(args.node_rank)]
        out += ["--job-id", job_id(args.master_addr, args.master_port)]
    else:
        if args.nnodes is not None:
            out += ["--nnodes", "1"]
        if args.rdzv_endpoint:
            out += ["--rdzv-endpoint", args.rdzv_endpoint]
    if args.nproc_per_node is not None:
        check_range("--nproc_per_node", args.nproc_per_node, 1, 4096,
                    variable="BAGUA_NPROC_PER_NODE")
        out += ["--nproc-per-node", str(args.nproc_per_node)]
    if args.logdir:
        # Upstream created the directory relative to its working directory; the agents may
        # run elsewhere, so they get the absolute path.
        out += ["--log-dir", os.path.abspath(args.logdir)]
    out += bagua_flags(args)
    out += program_argv(args.training_script, args.training_script_args, module=args.module,
                        no_python=args.no_python, python=python,
                        local_rank_flag=args.set_additional_flag)
    return out


def main(argv=None):
    """Entry point: translate the command line and execute bagua-launch."""
    execute(PROG, parse_args, build_argv, argv)


if __name__ == "__main__":
    main()
