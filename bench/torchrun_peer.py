#!/usr/bin/python3
"""torchrun (python3 -m torch.distributed.run) as bench/scale.py's peer, with one fix.

Debian's torch 1.13 on Python 3.11 dies at start: Std.from_str("0") returns None, because
iterating an IntFlag on 3.11 leaves out its zero and composite members (NONE, ALL), so every
run fails in to_map() before rendezvous. This wrapper replaces that one function with one that
converts by value, then runs torchrun's own main() with the same arguments. Nothing else of
torch is changed, and torch itself is not touched on disk.
"""

import re
import sys

from torch.distributed.elastic.multiprocessing import api


def _from_str(cls, vm):
    """Std.from_str, converting each value with Std(int(v)) (what the original meant)."""
    if re.match(api._VALUE_REGEX, vm):
        return cls(int(vm))
    if re.match(api._MAPPING_REGEX, vm):
        return {int(i): cls(int(v)) for i, v in (m.split(":") for m in vm.split(","))}
    raise ValueError(f"{vm} does not match: <{api._VALUE_REGEX}> or <{api._MAPPING_REGEX}>")


api.Std.from_str = classmethod(_from_str)

if __name__ == "__main__":
    from torch.distributed import run

    sys.argv[0] = "torchrun"
    run.main()
