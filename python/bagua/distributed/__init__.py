"""Upstream Bagua's launch commands, as front doors to bagua-launch.

``python -m bagua.distributed.launch`` (shaped like ``torch.distributed.launch``) and
``python -m bagua.distributed.run`` (shaped like torchrun) accept upstream Bagua's command
lines, translate them into one ``bagua-launch`` argument vector and execute bagua-launch in
their place, so that signals and the exit status are bagua-launch's. Each option either maps to
a bagua-launch flag or a worker variable, is accepted as a documented no-op, or is refused with
a message that names it and says why (docs/launcher.md, "Upstream's launch commands").
"""

from bagua.distributed._common import OptionError, find_launcher

__all__ = ["OptionError", "find_launcher"]
