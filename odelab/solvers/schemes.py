"""Fixed-step schemes: one step ``state -> state`` of a :class:`Field` over [t, t + dt].

* :class:`ExplicitRK` -- any explicit Runge--Kutta method from its Butcher tableau (euler, midpoint, heun, rk4).
* :class:`PartitionedEuler` -- blocks updated one after another in the system's order, each seeing the
  blocks already updated (Gauss--Seidel). With ``implicit_decay=False`` it is the papers' "IMEX" step
  (LEM eq. 3, coRNN eq. 2.3 with explicit damping): block += dt (forcing − decay · block). With
  ``implicit_decay=True`` the decay is implicit, block = (block + dt forcing) / (1 + dt decay) -- coRNN's
  implicit-damping option and the LTC fused (semi-implicit) step. With ``symplectic=True`` it is
  symplectic Euler for a (velocity, position) pair (UnICORNN, harmonic oscillators). ``imex-reversed`` updates
  the blocks in the opposite order (LEM: y from the old z, then z from the new y), the ordering the LEM paper's
  discretisation study sets against its own (Rusch et al. 2022, §2.7 checklist).

All schemes are first order except the RK methods of higher order; ``order`` records the classical order.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..systems.base import State, System
from .field import Field
from .tableau import ADAPTIVE_TABLEAUX, EULER, HEUN, MIDPOINT, RK4, ButcherTableau


def scaled(c: float, x):
    """``c * x``, without the product when ``c`` is the number 1 and ``x`` a floating tensor: x·1 is x bit for bit
    (and so is its gradient), so skipping it changes no value and saves an op and its backward node on every
    step of a unit-step cell (LEM, τ-GRU, LRCU, GRU at Δt = 1). A tensor ``c`` is always multiplied (no host
    synchronisation to compare it)."""
    if c.__class__ in (float, int) and c == 1 and isinstance(x, Tensor) and (x.is_floating_point() or x.is_complex()):
        return x
    return c * x


def axpy(x, c, y):
    """x + c·y: one fused op (``torch.add(x, y, alpha=c)``) for a Python number c, else x + scaled(c, y)
    (a tensor c, e.g. a learnable step)."""
    if c.__class__ in (float, int) and isinstance(x, Tensor) and isinstance(y, Tensor):
        return torch.add(x, y, alpha=c)
    return x + scaled(c, y)


class Scheme:
    """A one-step method. ``stages`` = derivative evaluations per step."""

    name: str = ""
    order: int = 1
    stages: int = 1
    adaptive: bool = False

    def check(self, system: System) -> None:
        """Raise ValueError when the scheme does not apply to ``system``."""

    def step(self, field: Field, t: float, state: State, dt: float) -> State:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class ExplicitRK(Scheme):
    """Explicit Runge--Kutta: k_i = f(t + c_i dt, y + dt Σ_j a_ij k_j), y_new = y + dt Σ_i b_i k_i."""

    def __init__(self, tableau: ButcherTableau):
        self.tableau = tableau
        self.name, self.order, self.stages = tableau.name, tableau.order, tableau.stages

    def step(self, field, t, state, dt):
        return self.finish_step(field, t, state, dt, [])

    def finish_step(self, field, t, state, dt, ks: list):
        """The step from its first ``len(ks)`` stages' derivatives ``ks``: the other stages, then the update."""
        tab = self.tableau
        for c, row in zip(tab.c[len(ks):], tab.a[len(ks):]):
            stage = state
            for a, k in zip(row, ks):
                if a != 0.0:
                    stage = tuple(axpy(s, dt * a, kb) for s, kb in zip(stage, k))
            ks.append(field(t + c * dt, stage))
        new = state
        for b, k in zip(tab.b, ks):
            if b != 0.0:
                new = tuple(axpy(s, dt * b, kb) for s, kb in zip(new, k))
        return new


class PartitionedEuler(Scheme):
    """Block-by-block Euler in the system's declared order (see module docstring)."""

    def __init__(self, name: str, implicit_decay: bool = False, symplectic: bool = False, reverse: bool = False):
        self.name, self.implicit_decay, self.symplectic, self.reverse = name, implicit_decay, symplectic, reverse

    def check(self, system):
        if self.reverse and len(system.blocks) < 2:
            raise ValueError(f"method: {self.name!r} reverses the order of two or more state blocks; "
                             f"{type(system).__name__} has one (use 'imex')")
        if self.symplectic and system.velocity_position is None:
            raise ValueError(
                f"method: {self.name!r} needs a (velocity, position) pair; {type(system).__name__} declares none "
                "(set velocity_position on the system)"
            )
        if self.implicit_decay and not system.split_blocks:
            raise ValueError(f"method: {self.name!r} needs a forcing/decay split; {type(system).__name__} has none")

    def step(self, field, t, state, dt):
        state, implicit = list(state), self.implicit_decay
        plan = list(enumerate(field.split_plan(self.symplectic)))  # which blocks split: found once per field
        for i, split in reversed(plan) if self.reverse else plan:
            block = state[i]
            if not split:
                state[i] = block + scaled(dt, field.block(i, t, state))
            elif implicit:
                forcing, decay = field.split(i, t, state)
                state[i] = (block + scaled(dt, forcing)) / (1.0 + scaled(dt, decay))
            else:
                forcing, decay = field.split(i, t, state)
                state[i] = block + scaled(dt, forcing - decay * block)
        field.evaluations += 1
        return tuple(state)


FIXED_SCHEMES: dict[str, Scheme] = {
    "euler": ExplicitRK(EULER),
    "midpoint": ExplicitRK(MIDPOINT),
    "heun": ExplicitRK(HEUN),
    "rk4": ExplicitRK(RK4),
    "imex": PartitionedEuler("imex"),
    "imex-implicit": PartitionedEuler("imex-implicit", implicit_decay=True),
    "imex-reversed": PartitionedEuler("imex-reversed", reverse=True),
    "symplectic-euler": PartitionedEuler("symplectic-euler", symplectic=True),
}


def resolve_scheme(method: "str | Scheme") -> Scheme:
    """A fixed-step scheme by name (or the scheme itself); ValueError naming ``method`` otherwise."""
    if isinstance(method, Scheme):
        return method
    if not isinstance(method, str):
        raise TypeError(f"method: expected a name or a Scheme, got {type(method).__name__}")
    if method not in FIXED_SCHEMES:
        kind = " (adaptive: it takes rtol/atol, not a fixed dt)" if method in ADAPTIVE_TABLEAUX else ""
        raise ValueError(f"method: unknown fixed-step scheme {method!r}{kind}; expected one of {sorted(FIXED_SCHEMES)}")
    return FIXED_SCHEMES[method]
