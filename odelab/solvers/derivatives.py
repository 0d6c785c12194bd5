"""Derivatives that a compiled path does not give.

Autograd Functions whose backward gives numbers, not a graph: first order only, and saying so.

Such a backward (a fused kernel's hand-derived BPTT, an adjoint solve's reverse pass) cannot be differentiated
again; under ``torch.autograd.grad(..., create_graph=True)`` the torch operations around it would still record,
and a second derivative would come out wrong without a word. :func:`first_order` makes its results lead to a
node that raises :class:`SecondDerivativeError` when a backward reaches it. ``torch.autograd.function.
once_differentiable`` means to do the same, but its node hangs off fresh leaves, so ``torch.autograd.grad(...,
inputs)`` never visits it (autograd runs only nodes on a path to the inputs asked for) and returns wrong or no
second derivatives; here the Function's saved tensors tie the node to the graph.

Forward-mode AD and ``torch.func`` transforms: :func:`forward_mode_or_transform` tells the fused kernels and the
solvers' compiled loops to leave the work to torch operations, which support them.
"""
from __future__ import annotations

import functools

import torch
import torch.autograd.forward_ad as forward_ad


class SecondDerivativeError(RuntimeError):
    """A backward reached gradients that a first-order-only backward computed under ``create_graph=True``."""


class _FirstOrderOnly(torch.autograd.Function):
    """``apply(message, n, *grads, *anchors)``: the n gradients, unchanged; a backward through them raises
    :class:`SecondDerivativeError` with ``message``. The anchors (the Function's saved tensors and incoming gradients
    that require grad) tie this node to the graph of the parameters and inputs: autograd only runs nodes on a path
    to what it differentiates for."""

    @staticmethod
    def forward(ctx, message, n, *tensors):
        ctx.message = message
        return tuple(g.view_as(g) for g in tensors[:n])

    @staticmethod
    def backward(ctx, *_):
        raise SecondDerivativeError(ctx.message)


def first_order(message: str):
    """Decorates an autograd Function's ``backward(ctx, *grads)`` whose results are numbers, not a graph: under
    ``create_graph=True`` (grad mode on in a backward) it runs without recording and its tensor results come back
    through :class:`_FirstOrderOnly`, so that differentiating them raises ``message`` instead of giving a wrong
    derivative; otherwise it runs as it is."""

    def decorate(backward):
        @functools.wraps(backward)
        def run(ctx, *grads):
            if not torch.is_grad_enabled():  # the usual first-order backward: nothing to add
                return backward(ctx, *grads)
            anchors = [t for t in (*ctx.saved_tensors, *grads) if isinstance(t, torch.Tensor) and t.requires_grad]
            grads = tuple(g.detach() if isinstance(g, torch.Tensor) else g for g in grads)  # numbers, as usual
            with torch.no_grad():
                results = backward(ctx, *grads)
            if not anchors:  # nothing to tie a guard to: refuse now rather than return a wrong graph
                raise SecondDerivativeError(message)
            single = not isinstance(results, tuple)
            results = list((results,) if single else results)
            where = [i for i, r in enumerate(results) if isinstance(r, torch.Tensor)]
            guarded = _FirstOrderOnly.apply(message, len(where), *(results[i].detach() for i in where), *anchors)
            for i, g in zip(where, guarded):
                results[i] = g
            return results[0] if single else tuple(results)

        return run

    return decorate


def forward_mode_or_transform() -> bool:
    """Whether a forward-mode AD level is open or a ``torch.func`` transform (``vmap``, ``grad``, ``jvp``, ...) is
    running: the compiled paths (C++, Triton) read tensors as raw arrays and would drop tangents or fail, so the
    torch operations run instead."""
    return torch._C._are_functorch_transforms_active() or getattr(forward_ad, "_current_level", -1) >= 0
