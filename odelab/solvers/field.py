"""The vector field as a scheme sees it over one step: a system with its input (and delays) bound."""
from __future__ import annotations

from typing import Callable

from torch import Tensor

from ..systems.base import State, System


class Field:
    """``system`` with ``inp`` (a callable of t giving the encoded input, or None) and, for delay systems,
    ``delayed`` (a callable of t giving one state tuple per delay) bound, so schemes call f(t, y) only.
    Drivers mutate ``inp``/``delayed`` between steps instead of building a new object."""

    __slots__ = ("system", "inp", "delayed", "evaluations")

    def __init__(self, system: System, inp: Callable[[float], Tensor] | None = None,
                 delayed: Callable[[float], tuple[State, ...]] | None = None):
        self.system, self.inp, self.delayed = system, inp, delayed
        self.evaluations = 0

    def _args(self, t: float) -> tuple:
        u = None if self.inp is None else self.inp(t)
        return (u,) if self.delayed is None else (u, *self.delayed(t))

    def __call__(self, t: float, state: State) -> State:
        self.evaluations += 1
        return self.system.derivative(t, state, *self._args(t))

    def block(self, i: int, t: float, state: State) -> Tensor:
        return self.system.block_derivative(i, t, state, *self._args(t))

    def split(self, i: int, t: float, state: State) -> tuple[Tensor, Tensor]:
        return self.system.split(i, t, state, *self._args(t))
