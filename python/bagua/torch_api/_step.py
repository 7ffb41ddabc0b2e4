"""How an optimizer step meets the data-parallel layer, whichever way the step is taken.

``with_bagua`` must run work of its own around every update of the weights: before it, the
end of the backward pass (waiting for the gradients' communication); around it, the async
algorithm's weight lock; after it, libbagua's end of step. A step can be taken through
``optimizer.step()``, through a learning-rate scheduler's wrapper of it, or through the fused
optimizer's ``fuse_step()``; all of them go through :func:`run_step`, so the protocol is written
once. The modules that prepared an optimizer are listed in ``optimizer._bagua_owners``; each
has ``before_step(opt)``, ``lock()``/``unlock()`` and ``after_step(opt)``.
"""

import types


def owners(opt):
    """The data-parallel contexts whose step includes this optimizer's (may be empty)."""
    return list(getattr(opt, "_bagua_owners", ()))


def run_step(opt, update, *args, **kwargs):
    """Runs ``update(*args, **kwargs)`` (the weights' update) inside the owners' step."""
    ctxs = owners(opt)
    for ctx in ctxs:
        ctx.before_step(opt)
    locked = []
    try:
        for ctx in ctxs:
            ctx.lock()
            locked.append(ctx)
        result = update(*args, **kwargs)
    finally:
        for ctx in reversed(locked):
            ctx.unlock()
    for ctx in ctxs:
        ctx.after_step(opt)
    return result


def _bagua_step(self, *args, **kwargs):
    return run_step(self, self._bagua_original_step, *args, **kwargs)


def attach(opt, ctx):
    """Adds ``ctx`` to the owners of ``opt`` and makes ``opt.step`` run through
    :func:`run_step`.

    ``opt.step`` stays a bound method (``__self__``/``__func__``), because torch's learning-rate
    schedulers wrap it through those attributes; a scheduler built before ``with_bagua`` left
    its own wrapper there, which becomes the original step and keeps counting.
    """
    if not hasattr(opt, "_bagua_original_step"):
        opt._bagua_original_step = opt.step
        opt.step = types.MethodType(_bagua_step, opt)
    opt._bagua_owners = [c for c in owners(opt) if c is not ctx] + [ctx]


def detach(opt, ctx):
    """Removes ``ctx`` from the owners of ``opt`` (its step then runs without it)."""
    opt._bagua_owners = [c for c in owners(opt) if c is not ctx]
