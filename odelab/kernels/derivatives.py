"""Which derivatives a fused kernel gives: first-order reverse mode (``backward``), nothing else.

A kernel's backward is hand-derived BPTT in C++ or Triton: its results are numbers, not a graph, so a second
derivative through them (``torch.autograd.grad(..., create_graph=True)`` and a backward through that) would see
only the torch operations around the kernel and come out wrong without a word. :func:`kernel_backward` decorates
every kernel Function's backward: it runs without autocast (:mod:`.autocast`), and under ``create_graph=True``
its gradients lead to a node that raises ``SecondDerivativeError`` if a backward reaches it
(``odelab.solvers.derivatives``, which the adjoint solves' backwards use too).

Forward-mode AD (``torch.autograd.forward_ad``) and ``torch.func`` transforms (``vmap``, ``grad``, ``jacrev``,
``jvp``, ...) pass tensors that a kernel cannot read as arrays, or tangents it would drop.
``odelab.solvers.derivatives.forward_mode_or_transform`` says when one of them is in effect; ``Recurrent`` then
runs the generic loop under ``engine="auto"`` (the definition, whose torch operations support all of these) and
refuses ``engine="fused"``.
"""
from __future__ import annotations

from ..solvers.derivatives import first_order
from .autocast import backward_outside_autocast

SECOND_DERIVATIVE = ("a second derivative through an odelab fused kernel, whose backward is first-order only: build "
                     "the model with engine='generic' (the definition, differentiable to any order) to differentiate "
                     "its gradients")


def kernel_backward(device_type: str):
    """Decorates a kernel Function's backward: autocast off for ``device_type`` (:mod:`.autocast`), first order
    only (:func:`first_order`)."""

    def decorate(backward):
        return first_order(SECOND_DERIVATIVE)(backward_outside_autocast(device_type)(backward))

    return decorate
