"""Delays and initial functions of delay systems: reading ``system.delays`` and coercing a ``history``."""
from __future__ import annotations

import math
import os
import sys
import warnings
from typing import Callable

import torch
from torch import Tensor

from ..systems.base import State, StateDelay, System
from . import cuda_graph

History = Callable[[float | Tensor], State]


def delay_values(system: System, state_dependent: bool = False) -> list[tuple[float, Tensor | None]]:
    """``(value, learnable tensor or None)`` per delay of ``system``; one host read per delay, at setup. A
    :class:`StateDelay` gives its upper bound where ``state_dependent`` (the adaptive solvers, the history's reach)
    and a ValueError elsewhere."""
    out = []
    for i, tau in enumerate(system.delays):
        learnable = None
        if isinstance(tau, StateDelay):
            if not state_dependent:
                raise ValueError(f"{type(system).__name__}.delays[{i}]: a state-dependent delay ({tau!r}) is solved by "
                                 f"the adaptive methods (dopri5, tsit5, bosh3 and the Rosenbrock ones) and fixed-step "
                                 f"explicit Runge–Kutta schemes without an adjoint; not by cells or the adjoints")
            out.append((tau.upper, None))
            continue
        if isinstance(tau, Tensor):
            if tau.numel() != 1:
                raise ValueError(f"{type(system).__name__}.delays[{i}]: expected a scalar, got shape {tuple(tau.shape)}")
            learnable = tau.reshape(()) if tau.requires_grad else None
            value = float(tau.detach())
        elif isinstance(tau, (int, float)):
            value = float(tau)
        else:
            raise TypeError(f"{type(system).__name__}.delays[{i}]: expected a number or a scalar tensor, "
                            f"got {type(tau).__name__}")
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"{type(system).__name__}.delays[{i}]: expected a finite delay >= 0, got {value}")
        out.append((value, learnable))
    return out


def mark_clamped(delays: tuple, outside: list[Tensor], t_col: Tensor, blocks: tuple[Tensor, ...], accept: Tensor,
                 batch: int) -> None:
    """Mark in ``outside`` (per delay, (batch,) bool) the ``accept``-ed samples whose state-dependent τ (``delays``:
    a StateDelay or None per delay) lies outside its bounds at (t_col, blocks), where it is clamped: the adaptive
    loops call it at every accepted step's end, and :func:`warn_clamped` tells the user once, after the solve."""
    with torch.no_grad():
        for i, delay in enumerate(delays):
            if delay is not None:
                outside[i] = outside[i] | (accept & delay.outside(delay.evaluate(t_col, blocks, batch)))


def warn_clamped(system: System, outside: list[Tensor | None]) -> None:
    """One RuntimeWarning per state-dependent delay of ``system`` whose τ left its bounds (and was clamped onto
    them) in the samples marked in ``outside`` (per delay: (batch,) bool, or None); one host read per delay."""
    for i, (delay, marked) in enumerate(zip(system.delays, outside)):
        if isinstance(delay, StateDelay) and marked is not None and bool(marked.any()):
            samples = marked.nonzero().flatten().tolist()
            shown = ", ".join(map(str, samples[:8])) + (", …" if len(samples) > 8 else "")
            warnings.warn(f"odelab: {type(system).__name__}.delays[{i}] ({delay!r}) left its bounds and was clamped "
                          f"onto them along {len(samples)} sample(s) ({shown}); widen lower / upper if the delay "
                          f"should reach there", RuntimeWarning, stacklevel=_outside_odelab())


def _outside_odelab() -> int:
    """The stack level of the first caller outside the odelab package, for ``warnings.warn`` from its caller."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package + os.sep):
        frame, level = frame.f_back, level + 1
    return level


def as_history_state(system: System, y0: State, value, what: str) -> State:
    """Coerce one history value to a state tuple shaped like ``y0`` (broadcasting; errors name ``history``)."""
    if isinstance(value, dict):
        missing = [b for b in system.blocks if b not in value]
        if missing:
            raise ValueError(f"history: {what} misses blocks {missing}; expected {list(system.blocks)}")
        value = tuple(value[b] for b in system.blocks)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return tuple(torch.full_like(y, float(value)) for y in y0)
    if isinstance(value, Tensor):
        value = (value,) * len(y0)
    if not isinstance(value, (tuple, list)):
        raise TypeError(f"history: {what} must be a number, a tensor, a tuple of tensors or a dict by block, "
                        f"got {type(value).__name__}")
    if len(value) != len(y0):
        raise ValueError(f"history: {what} has {len(value)} blocks, expected {len(y0)} {list(system.blocks)}")
    out = []
    for block, x, y in zip(system.blocks, value, y0):
        if not isinstance(x, Tensor):
            raise TypeError(f"history: {what}[{block!r}] must be a tensor, got {type(x).__name__}")
        try:
            out.append(torch.broadcast_to(x.to(dtype=y.dtype, device=y.device), y.shape))
        except RuntimeError:
            raise ValueError(f"history: {what}[{block!r}] of shape {tuple(x.shape)} does not broadcast to the "
                             f"state's {tuple(y.shape)}") from None
    return tuple(out)


class SolutionHistory:
    """An earlier solve's dense solution as the history φ(t) of a delay solve from ``t0`` that continues it: φ(t) =
    ``solution.evaluate(t)``, t a 0-dim tensor (fixed-step solves) or ``(batch, 1)`` (adaptive ones, one time per
    sample). Its batch must be the new solve's, its span must hold t0 and reach back to t0 − max τ (errors name
    ``history``). ``kinks``: where its derivatives may jump, breakpoints of the new solve once the delays carry
    them past t0. Gradients flow into the earlier solve's parameters and initial state."""

    WHOSE = "the span of the solution given as history (the delays read back to t0 − max τ)"

    def __init__(self, solution, t0: float, reach: float):
        self.dense = solution.dense_output
        if self.dense is None:
            raise ValueError("history: the solution given keeps its output times only; solve it with dense=True to "
                             "continue it")
        self.dense.check_span(torch.tensor([t0, t0 - reach], dtype=torch.float64), "history", self.WHOSE)
        self.low, self.high = sorted(self.dense.span)
        self.kinks, self.sample_kinks = self.dense.kinks, self.dense.sample_kinks
        # NaN past a failed sample's last step: looked for only when some sample failed (a host read per read)
        self.failed = solution.status is not None and not bool((solution.status == 0).all())

    def __call__(self, t: Tensor) -> State:
        """φ(t) with no host read: the span was checked for t0 − max τ … t0 when the solve began; an adaptive solve
        also reads φ batch-wide past t0 and keeps it only where t − τ ≤ t0, so times are clamped into the span."""
        dense = self.dense
        if t.dim() == 2 and t.shape[0] != dense.batch:
            raise ValueError(f"history: the solution given has a batch of {dense.batch}, the solve {t.shape[0]}")
        blocks = dense.read(t.to(device=dense.y.device, dtype=torch.float64).clamp(self.low, self.high), self.failed)
        return tuple(x.squeeze(1) for x in blocks) if t.dim() == 2 else blocks


def history_function(system: System, y0: State, history, t0: float) -> History:
    """The initial function φ(t), t < t0, of a delay solve, as a callable of a float (or a 0-d tensor, for a
    learnable delay) returning a state tuple.

    ``history``: ``None`` → φ ≡ y0 (a constant history); a number → every block filled with it; a tensor
    → broadcast to every block (``(batch, 1)`` gives one constant per sample); a tuple/list of tensors or
    a dict by block name → one per block; a callable φ(t) returning any of these (a tensor for one-block
    systems). The callable receives t as a 0-dim tensor of the state's dtype (the batch shares the time in a
    fixed-step solve; the adaptive methods pass a ``(batch, 1)`` tensor) and is checked once at t0 − max τ.
    Errors name ``history``.
    """
    if history is None:
        return lambda t: y0
    if callable(history) and not isinstance(history, Tensor):
        like = y0[0]

        def phi(t: float | Tensor) -> State:
            if isinstance(t, Tensor):
                t = t.to(dtype=like.dtype, device=like.device).reshape(())
            else:
                t = torch.full((), t, dtype=like.dtype, device=like.device)
            return as_history_state(system, y0, history(t), "the callable's value")

        first = phi(t0 - max((value for value, _ in delay_values(system, True)), default=0.0))
        if not cuda_graph.capturing() and not all(bool(torch.isfinite(x).all()) for x in first):
            raise ValueError("history: φ(t0 − max τ) contains NaN or Inf")
        return phi
    constant = as_history_state(system, y0, history, "a constant history")
    if not cuda_graph.capturing() and not all(bool(torch.isfinite(x).all()) for x in constant):
        raise ValueError("history: contains NaN or Inf")
    return lambda t: constant
