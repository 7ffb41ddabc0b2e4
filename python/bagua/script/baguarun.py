"""``baguarun``: upstream Bagua's multi-host command, run by bagua-launch over ssh.

::

    python -m bagua.script.baguarun --host_list 10.0.0.1,10.0.0.2 --ssh_port 22 \\
        --nproc_per_node 4 --master_port 1234 train.py --lr 0.1

Upstream logged into every host of ``--host_list`` with ssh and ran
``bagua.distributed.launch`` there, in the caller's directory, with node ranks in list order.
Here one ``bagua-launch --hosts`` does it: it starts one bagua-agent per host through ssh (in
the caller's directory, with the caller's PATH), runs a private etcd on this machine for the
rendezvous, and exits with the job's exit status. The table of every option is in
docs/launcher.md ("Upstream's launch commands").
"""

import argparse
import os
import shlex

from bagua.distributed._common import (OptionError, add_option, add_program, check_port,
                                       execute, program_argv)

PROG = "python -m bagua.script.baguarun"


def parser():
    """The argument parser: upstream's options in both spellings."""
    # No abbreviations: argparse would take an option of the script's own (--a, after the
    # script) for an abbreviation of one of these, and fail when it is ambiguous.
    p = argparse.ArgumentParser(
        prog=PROG, allow_abbrev=False,
        description="Starts the workers of every host in --host_list over ssh, "
        "through bagua-launch --hosts, with upstream Bagua's baguarun options.")
    add_option(p, "--host_list", default=None,
               help="HOST,HOST,... or HOST:SSH_PORT,...: one node per host, ranks in this "
                    "order (BAGUA_NODE_DOMAIN_NAMES is not read: pass it here)")
    add_option(p, "--ssh_port", type=int, default=None,
               help="ssh port of every host (BAGUA_SSH_PORT is not read: pass it here); "
                    "default: ssh's")
    add_option(p, "--master_port", type=int, default=None,
               help="accepted, no effect: the rendezvous picks the master port")
    add_option(p, "--nproc_per_node", type=int, required=True, help="workers per host")
    add_option(p, "--no_python", action="store_true",
               help="run the script as it is, not under python")
    add_option(p, "--bagua_service_port", type=int, default=None,
               help="accepted, no effect: Bagua-C tunes inside the job, without a service")
    add_option(p, "--enable_bagua_net", action="store_true",
               help="Bagua-Net for NCCL: bagua-launch --net-plugin bagua")
    p.add_argument("-x", action="append", default=[], metavar="NAME[=VALUE]",
                   help="give every worker NAME (its value here, or VALUE); repeatable")
    add_program(p)
    return p


def parse_args(argv=None):
    """Parses a command line (default: sys.argv[1:]) into a Namespace."""
    return parser().parse_args(argv)


def hosts_and_port(host_list, ssh_port):
    """The host names of --host_list and the one ssh port they share (None: ssh's default).

    bagua-launch starts every host through one remote-command template, so hosts whose inline
    ports differ are refused rather than reached on the wrong port.
    """
    if not host_list:
        raise OptionError("--host_list", "the hosts to run on are needed (this command does "
                          "not read BAGUA_NODE_DOMAIN_NAMES); accepted: --host_list HOST,HOST,...")
    check_port("--ssh_port", ssh_port)
    hosts, ports = [], set()
    for entry in host_list.split(","):
        name, sep, port = entry.partition(":")
        if sep:
            try:
                number = int(port)
            except ValueError:
                raise OptionError("--host_list", f"{entry!r}: the ssh port is not a "
                                  "number; accepted: HOST or HOST:SSH_PORT") from None
            check_port("--host_list", number)
            ports.add(number)
        else:
            ports.add(ssh_port)
        hosts.append(name)
    if len(ports) > 1:
        raise OptionError("--host_list", "the hosts have different ssh ports, and bagua-launch "
                          "reaches every host with one ssh command; accepted: one port for all "
                          "(--ssh_port), or per-host ports in ~/.ssh/config (Host ... Port ...)")
    return hosts, ports.pop()


def remote_cmd(port, cwd):
    """bagua-launch's --remote-cmd template: ssh to the host, cd to `cwd`, run the agent.

    bagua-launch splits the template like a shell, and ssh joins its words into a command
    line for the remote shell, so the directory is quoted twice: once for each.
    """
    ssh = "ssh -o BatchMode=yes" + (f" -p {port}" if port else "")
    return f"{ssh} {{host}} cd {shlex.quote(shlex.quote(cwd))} '&&' exec {{cmdline}}"


def build_argv(args, python=None, cwd=None):
    """bagua-launch's arguments for parsed baguarun options (no program name first).

    Raises OptionError for an option that has no counterpart. `python` is the workers'
    interpreter (default: the caller's, the same path on every host), `cwd` the directory the
    workers start in (default: the caller's, as upstream).
    """
    hosts, port = hosts_and_port(args.host_list, args.ssh_port)
    if args.nproc_per_node < 1:
        raise OptionError("--nproc_per_node", f"{args.nproc_per_node}; accepted: 1 or more")
    check_port("--master_port", args.master_port)
    check_port("--bagua_service_port", args.bagua_service_port)
    out = ["--hosts", ",".join(hosts), "--nproc-per-node", str(args.nproc_per_node),
           # A failed worker ended upstream's job at once: no restarts.
           "--max-restarts", "0",
           "--remote-cmd", remote_cmd(port, cwd or os.getcwd()),
           # Upstream exported the caller's PATH on every host before it started the workers.
           "-x", "PATH"]
    for item in args.x:
        out += ["-x", item]
    if args.enable_bagua_net:
        out += ["--net-plugin", "bagua"]
    out += program_argv(args.training_script, args.training_script_args,
                        no_python=args.no_python, python=python)
    return out


def main(argv=None):
    """Entry point: translate the command line and execute bagua-launch."""
    execute(PROG, parse_args, build_argv, argv)


if __name__ == "__main__":
    main()
