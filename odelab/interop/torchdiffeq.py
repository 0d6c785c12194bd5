"""Adapters from odelab systems to other ODE libraries.

:func:`torchdiffeq_func` turns a (non-delay) system into the ``func(t, y)`` that ``torchdiffeq.odeint`` and
``torchdiffeq.odeint_adjoint`` integrate: y is the tuple of state blocks (torchdiffeq supports tuple states)
and the input u(t) is bound and encoded inside.
:func:`odelab.interop.torchdde_system` (torchdde.py) turns a delay system into the vector field of
``torchdde.integrate``.
"""
from __future__ import annotations

from typing import Callable

from torch import Tensor, nn

from ..systems.base import State, System


class TorchdiffeqFunc(nn.Module):
    """``func(t, y) -> dy/dt`` for torchdiffeq, y a tuple of ``(batch, size)`` blocks in ``system.blocks`` order.
    An nn.Module holding the system, so ``odeint_adjoint`` finds its parameters."""

    def __init__(self, system: System, u: Tensor | Callable[[Tensor], Tensor] | None = None):
        super().__init__()
        if not isinstance(system, System):
            raise TypeError(f"system: expected an odelab System, got {type(system).__name__}")
        if system.is_delay:
            raise ValueError(f"system: {type(system).__name__} is a delay system; torchdiffeq solves ODEs only")
        if system.input_size and u is None:
            raise ValueError(f"u: {type(system).__name__} takes an input of size {system.input_size}; none was given")
        if u is not None and not (isinstance(u, Tensor) or callable(u)):
            raise TypeError(f"u: expected a constant tensor (batch, features) or a callable u(t), got {type(u).__name__}")
        if isinstance(u, Tensor) and (u.dim() != 2 or (system.input_size and u.shape[-1] != system.input_size)):
            raise ValueError(f"u: expected a constant input of shape (batch, {system.input_size}), got {tuple(u.shape)}")
        self.system, self.u = system, u

    def forward(self, t: Tensor, y: State) -> State:
        if self.u is None:
            inp = None
        else:
            inp = self.system.encode(self.u if isinstance(self.u, Tensor) else self.u(t))
        return tuple(self.system.derivative(t, tuple(y), inp))


def torchdiffeq_func(system: System, u: Tensor | Callable[[Tensor], Tensor] | None = None) -> TorchdiffeqFunc:
    """The torchdiffeq vector field of ``system`` driven by ``u``: None (autonomous), a constant tensor
    ``(batch, features)``, or a callable ``u(t) -> (batch, features)`` (raw, un-encoded input)."""
    return TorchdiffeqFunc(system, u)
