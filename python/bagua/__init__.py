"""Bagua-C for Python.

The PyTorch front end lives in :mod:`bagua.torch_api` (``import bagua.torch_api as bagua``),
with the public names of upstream Bagua's ``bagua.torch_api``. Everything runs on libbagua
through the C extension :mod:`bagua._C`; this package adds only thin Python glue.
"""

from bagua._C import __version__

__all__ = ["__version__"]
