"""The sequence loop of a recurrent model: one scheme step (or ``unfolds`` sub-steps of h = dt/L) per input
sample, the hold convention (sample x_n drives the step(s) that end at t_n = n·dt), and for delay systems the
papers' ring buffer (Erichson et al. 2024, eqs. 11, 12, 14): the delayed state is frozen over a step at
h_{n−m}, m = ⌊τ/h⌋, with zero history (h_n = 0 for n < 0).
"""
from __future__ import annotations

import math
from collections import deque

import torch
from torch import Tensor

from ..systems.base import State, System
from .field import Field
from .history import delay_values
from .schemes import Scheme


def delay_steps(tau: float, h: float) -> int:
    """m = ⌊τ/h⌋, robust to rounding (τ = 0.3, h = 0.1 gives 3)."""
    q = tau / h
    nearest = round(q)
    return int(nearest) if abs(q - nearest) <= 1e-9 * max(1.0, q) else int(math.floor(q))


def delay_lags(system: System, h: float) -> tuple[int, ...]:
    """The ring-buffer offsets m_i = ⌊τ_i/h⌋ of every delay of ``system`` (``()`` without delays)."""
    return tuple(delay_steps(value, h) for value, _ in delay_values(system))


class _Frozen:
    """The delayed states of one recurrent step, constant over the step: scheme[f, h_n, h_{n−m}, Δt]."""

    __slots__ = ("value",)

    def __init__(self):
        self.value: tuple[State, ...] = ()

    def __call__(self, t: float) -> tuple[State, ...]:
        return self.value


def run_sequence(system: System, scheme: Scheme, x: Tensor, state: State, dt: float, unfolds: int = 1,
                 lags: tuple[int, ...] = ()) -> tuple[Tensor, State]:
    """Step ``system`` through the input sequence ``x`` ``(batch, time, input)`` from ``state``.

    Returns the observable block after every sample ``(batch, time, hidden)`` and the final state. The input
    encoding is one matmul for the whole sequence, unbound once. ``lags`` (delay systems): step n reads
    h_{n−m_i} from a ring buffer of the last max m_i + 1 states (m_i = 0 reads the current state).
    """
    field = Field(system)
    if lags:
        zero = tuple(torch.zeros_like(block) for block in state)
        past: deque[State] = deque([state], maxlen=max(lags) + 1)  # past[-1] = h_n, past[-1-m] = h_{n-m}
        frozen = field.delayed = _Frozen()
    step, h, obs = scheme.step, dt / unfolds, system.block_index(system.observable)
    outputs = []
    t = 0.0
    for u_n in system.encode(x).unbind(1):
        field.inp = lambda _t, u_n=u_n: u_n
        for _ in range(unfolds):
            if lags:
                frozen.value = tuple(past[-1 - m] if m < len(past) else zero for m in lags)
            state = step(field, t, state, h)
            if lags:
                past.append(state)
            t += h
        outputs.append(state[obs])
    return torch.stack(outputs, dim=1), state
