"""Runs a worker's program with ``--local_rank=N`` added to its arguments.

Upstream's ``bagua.distributed.launch --set_additional_flag`` passed each worker its local
rank as an argument. bagua-launch gives every worker the same command line and the rank in
LOCAL_RANK, so the front door runs this module first::

    python -m bagua.distributed._local_rank_arg MODE PROGRAM [ARGS...]

MODE is ``script`` (``python -u PROGRAM --local_rank=N ARGS``), ``module`` (``python -u -m
PROGRAM ...``) or ``exec`` (``PROGRAM --local_rank=N ARGS``, no interpreter). The program
replaces this process, so the agent supervises it under the same pid.
"""

import os
import sys

from bagua import _C

MODES = ("script", "module", "exec")


def command(mode, program, args, local_rank):
    """The argument vector the worker executes."""
    flag = f"--local_rank={local_rank}"
    if mode == "exec":
        return [program, flag, *args]
    python = [sys.executable, "-u"] + (["-m"] if mode == "module" else [])
    return python + [program, flag, *args]


def main(argv=None):
    """Entry point: execute the program with its --local_rank argument; exit 2 on misuse,
    127 when the program cannot be executed."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2 or argv[0] not in MODES:
        print(f"usage: python -m {__spec__.name if __spec__ else __name__} "
              "script|module|exec PROGRAM [ARGS...]", file=sys.stderr)
        sys.exit(2)
    # Read through libbagua's registry, which validates it, like every worker variable.
    local_rank = _C.param_get("LOCAL_RANK")
    if local_rank in (None, ""):
        print("--set_additional_flag: LOCAL_RANK is not set; this module runs under "
              "bagua-launch", file=sys.stderr)
        sys.exit(2)
    words = command(argv[0], argv[1], argv[2:], local_rank)
    try:
        if argv[0] == "exec":
            os.execvp(words[0], words)
        os.execv(words[0], words)
    except OSError as e:
        print(f"--set_additional_flag: cannot run {words[0]}: {e}", file=sys.stderr)
        sys.exit(127)


if __name__ == "__main__":
    main()
