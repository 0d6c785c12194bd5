"""The dense past of an adaptive delay solve: y(s) for s ≤ t read from the loop's own step records (the explicit
pairs' torch loop and the Rosenbrock loop), and the initial function φ(s) for s ≤ t0, per sample."""
from __future__ import annotations

from typing import Callable

import torch
import torch.autograd.forward_ad as fwAD
from torch import Tensor

from ..systems.base import System
from .history import as_history_state, history_function
from .tableau import horner


def flat_history(system: System, sizes: list[int], history, y0: Tensor, t0: float) -> Callable[[Tensor], Tensor]:
    """φ(s) as a flat (batch, dim) tensor for per-sample times s (batch,); a callable history gets s as a
    (batch, 1) tensor of y0's dtype (semantics of ``history`` as in :func:`odelab.solvers.history.history_function`,
    which validates it)."""
    split = lambda y: (y,) if len(sizes) == 1 else tuple(y.split(sizes, -1))
    flat = lambda state: state[0] if len(state) == 1 else torch.cat(state, -1)
    blocks = split(y0)
    phi = history_function(system, blocks, history, t0)
    if history is None or not callable(history) or isinstance(history, Tensor):
        value = flat(phi(t0))
        return lambda s: value
    coerce = lambda value: flat(as_history_state(system, blocks, value, "the callable's value"))
    return lambda s: coerce(history(s.to(y0.dtype).unsqueeze(1)))


class StepHistory:
    """Dense history of a delay solve, read from the loop's step records (start, length, state, interpolant
    coefficients (batch, dim m), end) of the last ``window`` iterations; ``before`` gives the state for t ≤ t0.
    The window doubles whenever it no longer reaches back a full τ_max for some active sample, so lookups stay
    O(window) per step (the records themselves are never copied into a growing buffer)."""

    def __init__(self, before: Callable[[Tensor], Tensor], t0: float, tau_max: float, eps: float):
        self.before, self.t0, self.tau_max, self.eps = before, t0, tau_max, eps
        self.tangents = False  # the records carry forward-mode tangents (a learnable delay's sensitivity)
        self.window, self.stacked, self.source, self.loaded = 16, 0, None, 0

    def load(self, records: list, t: Tensor, active: Tensor) -> Tensor:
        """Bring the stacked window up to date with ``records`` (appending the new ones: one copy of the
        window per step, no per-record stacking) and return a flag: some active sample is not covered."""
        fresh = records is not self.source or self.loaded > len(records) or self.stacked != self.window
        first = max(0, len(records) - self.window) if fresh else self.loaded
        start, length, y, coef, end = (torch.stack(x) for x in zip(*records[first:]))
        coef = coef.view(*y.shape, -1)  # (new, B, dim, m)
        if fresh:
            self.start, self.length, self.y, self.coef, self.end = start, length, y, coef, end
        else:
            keep = lambda old, new: torch.cat([old, new])[-self.window:]
            self.start, self.length, self.end = keep(self.start, start), keep(self.length, length), keep(self.end, end)
            self.y, self.coef = keep(self.y, y), keep(self.coef, coef)
        self.source, self.loaded, self.stacked = records, len(records), self.window
        self.end_rows = self.end.T.contiguous()
        # covered when the window's first record ends before the earliest delayed time that is past t0
        earliest = (t - self.tau_max).clamp_min(self.t0)
        short = active & (self.end[0] >= earliest) & (self.end[0] > self.t0)
        return (short & (self.end.shape[0] < len(records))).any()

    def at(self, s: Tensor, right: bool = False) -> Tensor:
        """y(s) per sample (s: (batch,) float64, at most the sample's current time; it may carry the gradient
        of a learnable delay, or the tangent of the stage time). Within ``eps`` (round-off of t − τ) of t0 the
        history φ(t0) is read, the left limit, unless ``right`` (the first stage of a step starting at t0 + τ),
        which reads y0."""
        rows = torch.arange(s.shape[0], device=s.device).unsqueeze(1)
        where = s.detach()
        # the step containing s: the first record ending at or after s, or for a right limit the first one
        # ending after it (at t0 that skips the initial record, which carries no derivative); ``eps`` absorbs the
        # round-off of t − τ at a step boundary s + τ
        key = where.clamp_min(self.t0) + self.eps if right else where - self.eps
        step = torch.searchsorted(self.end_rows, key.unsqueeze(1), right=right).clamp_max_(self.end.shape[0] - 1)
        length = self.length[step, rows]
        if self.tangents:  # θ = (s − start) / length with the tangent of s, in fast all-dual arithmetic
            s_dot = fwAD.unpack_dual(s).tangent
            theta = fwAD.make_dual(((where.unsqueeze(1) - self.start[step, rows]) / length).to(self.y.dtype),
                                   torch.zeros_like(length) if s_dot is None else s_dot.unsqueeze(1) / length)
        else:
            theta = ((s.unsqueeze(1) - self.start[step, rows]) / length).to(self.y.dtype)
        inside = horner(self.y[step, rows].squeeze(1), self.coef[step, rows].squeeze(1).unbind(-1), theta,
                         fused=not self.tangents)
        before = where < self.t0 - self.eps if right else where <= self.t0 + self.eps
        return torch.where(before.unsqueeze(1), self.before(s), inside)
