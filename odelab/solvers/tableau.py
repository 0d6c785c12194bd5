"""Butcher tableaux of the explicit Runge--Kutta methods (fixed-step and embedded)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ButcherTableau:
    """``c``, lower-triangular ``a`` (row i holds a_i0..a_i,i-1), weights ``b`` and, for embedded pairs,
    ``b_err`` = b − b̂ (the difference giving the local error estimate). ``fsal``: the last stage is
    f(t + dt, y_new), reusable as the next step's first stage."""

    name: str
    order: int
    c: tuple[float, ...]
    a: tuple[tuple[float, ...], ...]
    b: tuple[float, ...]
    b_err: tuple[float, ...] | None = None
    fsal: bool = False

    @property
    def stages(self) -> int:
        return len(self.b)


EULER = ButcherTableau("euler", 1, (0.0,), ((),), (1.0,))
MIDPOINT = ButcherTableau("midpoint", 2, (0.0, 0.5), ((), (0.5,)), (0.0, 1.0))
HEUN = ButcherTableau("heun", 2, (0.0, 1.0), ((), (1.0,)), (0.5, 0.5))
RK4 = ButcherTableau(
    "rk4", 4, (0.0, 0.5, 0.5, 1.0), ((), (0.5,), (0.0, 0.5), (0.0, 0.0, 1.0)), (1 / 6, 1 / 3, 1 / 3, 1 / 6)
)
