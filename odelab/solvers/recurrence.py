"""The sequence loop of a recurrent model: one scheme step (or ``unfolds`` sub-steps of h = dt/L) per input
sample, the hold convention (sample x_n drives the step(s) that end at t_n = n·dt), and for delay systems the
papers' ring buffer (Erichson et al. 2024, eqs. 11, 12, 14): the delayed state is frozen over a step at
h_{n−m}, m = ⌊τ/h⌋, with zero history (h_n = 0 for n < 0) -- unless the sequence continues an earlier one: a delay
system's final state is a :class:`DelayedState`, which carries the last states before it, so that calls chained
through their states read the delayed states one call over the whole sequence would read.
"""
from __future__ import annotations

import math
from collections import deque
from typing import Callable

import torch
import torch.utils._pytree as _pytree
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


class DelayedState(tuple):
    """A delay system's state after a sequence: its blocks (a state tuple like any other) and ``history``, per block
    the M = max m_i states before the last one, oldest first, ``(batch, M, width)`` (h_{N−M} … h_{N−1}; zeros for
    those before the first call's start). Passed back in as the state of the next call, the delayed reads reach
    into it; a plain tuple starts from zero history. ``detach()`` detaches the blocks and the history together
    (truncated backpropagation through time), which ``tuple(s.detach() for s in state)`` would not keep."""

    def __new__(cls, blocks, history):
        self = super().__new__(cls, blocks)
        self.history = tuple(history)
        return self

    def __getnewargs__(self):
        return tuple(self), self.history

    def detach(self) -> "DelayedState":
        return DelayedState(tuple(b.detach() for b in self), tuple(h.detach() for h in self.history))


# a pytree node (blocks, then history), so that torch.func transforms and torch.compile can return one
_pytree.register_pytree_node(
    DelayedState, lambda state: ([*state, *state.history], len(state)),
    lambda leaves, blocks: DelayedState(tuple(leaves[:blocks]), tuple(leaves[blocks:])),
    serialized_type_name="odelab.DelayedState")


def incoming_history(state: State, depth: int) -> tuple[Tensor, ...] | None:
    """The history a state brings for ``depth`` = max m_i delayed states (per block ``(batch, depth, width)``), or
    None for zero history (a plain tuple); a :class:`DelayedState` of another depth is refused (a step h that
    changed since it was made)."""
    history = getattr(state, "history", None)
    if history is None:
        return None
    for block, h in zip(state, history):
        if tuple(h.shape) != (block.shape[0], depth, block.shape[1]):
            expected = (block.shape[0], depth, block.shape[1])
            raise ValueError(f"state.history: expected blocks of shape {expected} (batch, max ⌊τ/h⌋ = {depth} delayed "
                             f"states, width), got {tuple(h.shape)}")
    return history


def carried_history(before: Tensor | None, start: Tensor, states: Tensor, depth: int) -> Tensor:
    """One block's history after a sequence: the last ``depth`` of [before (``(batch, depth, width)`` or None: zeros),
    start (the state it began from), states[:, :-1]] (``states`` = every step's state, ``(batch, steps, width)``)."""
    steps = states.shape[1]
    if steps - 1 >= depth:
        return states[:, steps - 1 - depth:steps - 1]
    before = start.new_zeros(start.shape[0], depth, start.shape[1]) if before is None else before
    return torch.cat((before, start[:, None], states[:, :steps - 1]), dim=1)[:, -depth:] if depth else before


class _Frozen:
    """The delayed states of one recurrent step, constant over the step: scheme[f, h_n, h_{n−m}, Δt]."""

    __slots__ = ("value",)

    def __init__(self):
        self.value: tuple[State, ...] = ()

    def __call__(self, t: float) -> tuple[State, ...]:
        return self.value


def _dropper(drop, system: System, steps: int, lags: tuple[int, ...]):
    """``run_sequence``'s ``drop`` as ``(block, k, which) -> the dropped block`` (which: 0 the start, 1 a delayed
    read) or None: a callable draws afresh, factors multiply by ``factors[:, k, which]``."""
    if drop is None or not isinstance(drop, Tensor):
        return None if drop is None else lambda block, _k, _which: drop(block)
    expected = (drop.shape[0], steps, 2, system.block_sizes()[0])
    if len(system.blocks) != 1 or len(lags) > 1 or tuple(drop.shape) != expected:
        raise ValueError(f"drop: factors (batch, steps, 2, width) = {expected} are for a one-block system with at most "
                         f"one delay; got shape {tuple(drop.shape)} for {len(system.blocks)} block(s), lags {lags}")
    return lambda block, k, which: block * drop[:, k, which]


def run_sequence(system: System, scheme: Scheme, x: Tensor, state: State, dt: float | Tensor, unfolds: int = 1,
                 lags: tuple[int, ...] = (), active: Tensor | None = None,
                 drop: Callable[[Tensor], Tensor] | Tensor | None = None) -> tuple[Tensor, State]:
    """Step ``system`` through the input sequence ``x`` ``(batch, time, input)`` from ``state``.

    Returns the observable block after every sample ``(batch, time, hidden)`` and the final state. The input
    encoding is one matmul for the whole sequence, unbound once. ``lags`` (delay systems): step n reads
    h_{n−m_i} from a ring buffer of the last max m_i + 1 states (m_i = 0 reads the current state), which starts
    from ``state.history`` (a :class:`DelayedState`) or zeros; the final state is a :class:`DelayedState`.
    ``dt`` a number or a 0-dim tensor (one step for every sample), or a ``(batch, time)`` tensor: sample n of each
    sequence lasts its own dt[:, n] (irregular sampling; no delays), its time a ``(batch, 1)`` tensor. ``active`` ``(batch, time)`` bool: a sample past its sequence's end
    leaves the state as it is and outputs zeros. ``drop`` (state dropout): applied to every block of the state a
    (sub-)step starts from and of each delayed state it reads, afresh each time; the states kept (outputs, history,
    the final state) are the steps' own. For a one-block system with at most one delay, ``drop`` may instead be the
    factors themselves, ``(batch, time · unfolds, 2, width)``: sub-step k starts from ``drop[:, k, 0]`` ⊙ h_k and
    reads ``drop[:, k, 1]`` ⊙ h_{k−m} (the layout the kernels take: ``kernels.registry.register``).
    """
    field = Field(system)
    drop = _dropper(drop, system, x.shape[1] * unfolds, lags)
    if lags:
        depth = max(lags)
        before = incoming_history(state, depth)
        if before is None:
            zero = tuple(torch.zeros_like(block) for block in state)
            earlier = [zero] * depth
        else:
            earlier = list(zip(*(h.unbind(1) for h in before))) if depth else []
        state = tuple(state)
        past: deque[State] = deque([*earlier, state], maxlen=depth + 1)  # past[-1] = h_n, past[-1-m] = h_{n-m}
        frozen = field.delayed = _Frozen()
    step, obs = scheme.step, system.block_index(system.observable)
    gaps = (dt / unfolds).unsqueeze(-1).unbind(1) if isinstance(dt, Tensor) and dt.dim() == 2 else None
    keep = active.unsqueeze(-1).unbind(1) if active is not None else None
    h = None if gaps is not None else dt / unfolds
    outputs = []
    t = 0.0
    for n, u_n in enumerate(system.encode(x).unbind(1)):
        field.inp = lambda _t, u_n=u_n: u_n
        if gaps is not None:
            h = gaps[n]
        before = state
        for q in range(unfolds):
            k = n * unfolds + q
            if lags:
                frozen.value = tuple(past[-1 - m] for m in lags)
                if drop is not None:
                    frozen.value = tuple(tuple(drop(b, k, 1) for b in read) for read in frozen.value)
            state = step(field, t, state if drop is None else tuple(drop(b, k, 0) for b in state), h)
            if lags:
                past.append(state)
            t = t + h
        if keep is not None:
            state = tuple(torch.where(keep[n], new, old) for new, old in zip(state, before))
            outputs.append(torch.where(keep[n], state[obs], 0.0))
        else:
            outputs.append(state[obs])
    if lags:  # the depth states before the last, oldest first
        kept = list(past)[:-1]
        state = DelayedState(state, (torch.stack([p[i] for p in kept], dim=1) if kept else
                                     block.new_zeros(block.shape[0], 0, block.shape[1])
                                     for i, block in enumerate(state)))
    return torch.stack(outputs, dim=1), state
