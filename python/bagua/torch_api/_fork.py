"""What a process forked from a worker may do with the worker's Bagua and torch objects.

After ``fork()`` a child has copies of its parent's sockets and shared memory but none of its
threads. libbagua's objects refuse to be used from such a child and are never destroyed there
(python/src/fork.c). This module adds the two guards the C extension cannot give:

- a model prepared with ``with_bagua`` raises in its forward pass, before autograd runs,
  because a backward pass that fails in a forked child leaves autograd state behind that
  hangs the child's exit in torch 1.13;
- ``torch.distributed``'s groups are never destroyed in a child, because a Gloo group's
  destructor waits for worker threads the child does not have.
"""

import os

#: Incremented in every child right after fork().
generation = 0


def _after_fork_in_child():
    global generation
    generation += 1
    _leak_torch_groups()


def _leak_torch_groups():
    """Takes one extra reference on every torch process group, so no destructor runs."""
    import ctypes

    import torch.distributed as dist
    if not dist.is_available() or not dist.is_initialized():
        return
    for group in list(getattr(dist.distributed_c10d, "_pg_map", {}).keys()):
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(group))


_installed = False


def install():
    """Arms the guards in this process (idempotent); init_process_group calls it."""
    global _installed
    if not _installed:
        os.register_at_fork(after_in_child=_after_fork_in_child)
        _installed = True


def check(born, what):
    """Raises RuntimeError when this process was forked after ``born`` (a ``generation``)."""
    if born != generation:
        raise RuntimeError(
            f"this {what} belongs to the process that process {os.getpid()} was forked from: "
            "its sockets, shared memory and threads belong to the parent, so only the parent "
            "may use it. Call bagua from the parent, or start child processes with "
            "multiprocessing's \"spawn\" or \"forkserver\" method; a forked child may create "
            "its own")
