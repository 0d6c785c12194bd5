"""Terminal events: each sample's first time where an event function g(t, y) crosses zero, located on the steps'
interpolants of a dense solve, with its gradient through the implicit function theorem.

``g(t, y)`` gets the state as the vector field does (a tensor for a plain callable, the tuple of blocks for a
System) and ``t`` as a ``(batch, 1)`` tensor of the state's dtype, and returns ``(batch,)`` or ``(batch, k)``
(k event functions; the first of them to cross stops the sample).

Detection: g at t0 and, on every step taken, at ``points`` equally spaced interior points of its interpolant
(θ = j / (points + 1)) and at its end (θ = 1); a piece that ends where it starts (a rejected or undone attempt whose
interpolant is the trial's) or where the piece before it ends (a repeat of the last accepted step) keeps the value
before it. The event of sample b lies in its first interval between two such points whose later value has crossed
the earlier one: the sign changed from a nonzero value (``direction`` 0), rose from negative to ≥ 0 (+1) or fell from
positive to ≤ 0 (−1), as the solve proceeds. Starting on g = 0 is no event. The interior points catch g leaving and re-crossing zero inside one step (a graze, which the
step ends alone miss, as scipy's and diffrax's event handling do; ``event_points`` in the spirit of
DifferentialEquations.jl's ``interp_points``): a pair of crossings closer together than the points is still missed.

Location: the Illinois method (Dowell & Jarratt 1971: regula falsi with the retained end's value halved; bisection
where it stalls) on that interval's θ of the step's interpolant P, to a bracket of a few float64 ulps of the time,
the time on the crossed side. Gradient: t* solves g(t*, P(t*)) = 0 for the discretised solution P, so (implicit
function theorem)

    dt*/dp = −(∂g/∂p + ∂g/∂y ∂P/∂p) / (∂g/∂t + ∂g/∂y P'(t*)),

which t* = t̂ − (G − Ĝ) / Ġ carries in autograd (G = g(t̂, P(t̂)) recorded with the graph, Ĝ its value, Ġ its
total time derivative, t̂ the located time); the state at the event is P(t*), read through the interpolant's time.
A tangential touch (Ġ = 0) passes no gradient through the time.

A blow-up after the event (the failure it guards against) leaves the gradient finite: the adaptive methods reject
the overflowing attempts and recompute them without the overflow for the backward pass, and the fixed-step methods,
which cannot reject, retire the sample at its overflowing step (recomputed with its state, and for a delay system
its delayed states, fed to f as zeros, its later values NaN constants: :func:`.fixed._run_dense`,
:func:`.fixed_delay._steps_by_time`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from .blocks import ByBlock
from .dense import DenseOutput
from .tableau import horner

_MAX_ITERATIONS = 200  # a bound: the bracket halves at least every other iteration


@dataclass
class Event(ByBlock):
    """Where each sample's event happened: ``t`` (batch,) the time (NaN where none), ``ys`` one tensor per state
    block (batch, size) (NaN where none), ``happened`` (batch,) bool, ``which`` (batch,) the component of g that
    crossed (−1 where none). Index by block name; ``event.y`` is the state of a one-block system."""

    t: Tensor
    ys: tuple[Tensor, ...]
    happened: Tensor
    which: Tensor
    blocks: tuple[str, ...]


def check_event(event, direction) -> None:
    """TypeError/ValueError naming ``event`` or ``event_direction``."""
    if not callable(event):
        raise TypeError(f"event: expected a callable g(t, y), got {type(event).__name__}")
    if isinstance(direction, bool) or direction not in (-1, 0, 1):
        raise ValueError(f"event_direction: expected -1 (falling), 0 (either way) or 1 (rising), got {direction!r}")


class _Condition:
    """g evaluated on flat states (B, dim) at solver times (B,), checked once, as (B, k)."""

    def __init__(self, event: Callable, sizes: list[int], function: bool, backwards: bool, batch: int):
        self.event, self.sizes, self.function, self.batch = event, sizes, function, batch
        self.sign = -1.0 if backwards else 1.0
        self.checked = False

    def __call__(self, s: Tensor, y: Tensor) -> Tensor:
        state = y if self.function else tuple(y.split(self.sizes, -1))
        value = self.event((self.sign * s).to(y.dtype).unsqueeze(1), state)
        if not self.checked:
            if not isinstance(value, Tensor) or not value.is_floating_point():
                raise TypeError(f"event: g(t, y) must return a real floating tensor, got "
                                f"{value.dtype if isinstance(value, Tensor) else type(value).__name__}")
            if value.dim() not in (1, 2) or value.shape[0] != self.batch:
                raise ValueError(f"event: g(t, y) must return (batch,) or (batch, k) = ({self.batch},) or "
                                 f"({self.batch}, k), got shape {tuple(value.shape)}")
            self.checked = True
        return value if value.dim() == 2 else value.unsqueeze(1)


def _crossed(before: Tensor, after: Tensor, direction: int) -> Tensor:
    if direction > 0:
        return (before < 0) & (after >= 0)
    if direction < 0:
        return (before > 0) & (after <= 0)
    return (before != 0) & ((after == 0) | ((before < 0) & (after > 0)) | ((before > 0) & (after < 0)))


def check_points(points) -> None:
    """ValueError naming ``event_points``."""
    if isinstance(points, bool) or not isinstance(points, int) or points < 0:
        raise ValueError(f"event_points: expected a non-negative integer (interior points of a step at which g is "
                         f"checked), got {points!r}")


def thetas(points: int) -> list[float]:
    """The points of a step at which g is read, θ = j / (points + 1), j = 1 … points + 1 (the end last)."""
    return [j / (points + 1) for j in range(1, points + 2)]


def locate(dense: DenseOutput, y0: Tensor, t0: float, event: Callable, direction: int, function: bool,
           blocks: tuple[str, ...], points: int) -> Event:
    """The first event of every sample on the pieces of ``dense`` (solver times; ``y0``: the flat initial state at
    solver time ``t0``; ``points``: interior points of each piece at which g is read), see the module docstring."""
    count, batch, dim, m = dense.count, dense.batch, dense.dim, dense.m
    g = _Condition(event, dense.sizes, function, dense.backwards, batch)
    rows = torch.arange(batch, device=y0.device)
    grid = thetas(points)
    with torch.no_grad():
        start = torch.full((batch,), t0, dtype=torch.float64, device=y0.device)
        parts = dense.coef.view(count * batch, dim, m).unbind(-1)
        values = []  # (S, B, k) per point of the grid
        for theta in grid:
            at = dense.end if theta == 1.0 else dense.start + theta * dense.length
            states = horner(dense.y, parts, torch.tensor(theta, dtype=dense.y.dtype, device=y0.device))
            values.append(torch.stack([g(at[k], states[k * batch:(k + 1) * batch]) for k in range(count)]))
        values = torch.stack(values, 1).flatten(0, 1)  # (S (points + 1), B, k), piece by piece
        # a piece that ends no later than the one before it keeps the value before it, the last taken piece's end or
        # g(t0): a rejected or undone attempt of the torch loop (it ends where it starts, its interpolant the
        # trial's), or a repeat of the last accepted step (the Rosenbrock and fused loops' record of a rejection);
        # only the steps taken can cross, each once
        values = torch.cat([g(start, y0.detach()).unsqueeze(0), values])
        pieces = torch.arange(count, device=y0.device).unsqueeze(1)
        before = torch.cat([start.unsqueeze(0), dense.end[:-1]])
        last = torch.where((dense.end > dense.start) & (dense.end > before), pieces, -1).cummax(0).values  # (S, B)
        own = 1 + pieces.unsqueeze(1) * (points + 1) + torch.arange(points + 1, device=y0.device).view(1, -1, 1)
        held = torch.where(last >= 0, 1 + last * (points + 1) + points, 0).unsqueeze(1)
        source = torch.where((last == pieces).unsqueeze(1), own, held).flatten(0, 1)  # (S (points + 1), B)
        index = torch.cat([torch.zeros_like(source[:1]), source]).unsqueeze(-1).expand(-1, -1, values.shape[-1])
        values = values.gather(0, index)  # (S (points + 1) + 1, B, k)
        crossed = _crossed(values[:-1], values[1:], direction)  # (S (points + 1), B, k): interval i ends past one
        found = crossed.any(0)  # (B, k)
        interval = crossed.int().argmax(0)  # the first crossed interval (0 where none)
        times = torch.full(found.shape, torch.inf, dtype=torch.float64, device=y0.device)
        for j in range(found.shape[1]):
            if bool(found[:, j].any()):
                first = interval[:, j]
                piece, sub = first // (points + 1), first % (points + 1)
                low = sub.double() / (points + 1)
                high = torch.where(sub == points, 1.0, (sub + 1).double() / (points + 1))
                times[:, j] = _root(dense, g, piece, values[first, rows, j], values[first + 1, rows, j], found[:, j],
                                     j, direction, rows, (low, high))
        times = torch.where(found, times, torch.inf)
        s_star, which = times.min(1)
        happened = found.any(1)
        which = torch.where(happened, which, -1)
        # a sample without an event reads its state at t0 (a time every piece table covers), then NaN
        s_hat = torch.where(happened, s_star, t0)
    ys, t_star = _at_event(dense, g, s_hat, which.clamp_min(0))
    nan = torch.tensor(float("nan"), dtype=torch.float64, device=y0.device)
    t_user = torch.where(happened, t_star, nan)
    ys = tuple(torch.where(happened.unsqueeze(1), y, torch.nan) for y in ys)
    return Event(t_user, ys, happened, which, tuple(blocks))


def _root(dense: DenseOutput, g: _Condition, piece: Tensor, before: Tensor, after: Tensor, found: Tensor, j: int,
          direction: int, rows: Tensor, bracket: tuple[Tensor, Tensor] | None = None) -> Tensor:
    """Solver time (B,) of component j's crossing inside each sample's ``piece``, on its crossed side: the Illinois
    method on θ (regula falsi, halving the retained end's value when one end is kept twice), a bisection wherever
    two iterations did not halve the bracket, until the bracket is a few ulps of the time wide. ``bracket``: the
    (B,) θ interval at whose ends g is ``before`` and ``after`` (default [0, 1]); ``found``: the samples that
    crossed; the others are left at the bracket's high end."""
    batch, dim, m = dense.batch, dense.dim, dense.m
    flat = piece * batch + rows
    base, parts = dense.y[flat], dense.coef[flat].view(batch, dim, m).unbind(-1)
    start, length = dense.start[piece, rows], dense.length[piece, rows]
    low, high = bracket if bracket is not None else (torch.zeros_like(start), torch.ones_like(start))
    low = torch.where(found, low, high)
    g_low, g_high = before.double(), after.double()
    tolerance = 8 * torch.finfo(torch.float64).eps * (start.abs() + length).clamp_min(1.0) / length.clamp_min(1e-300)
    last = torch.zeros_like(piece)  # +1: the last iteration moved the high end, −1: the low end
    widths = (torch.full_like(start, torch.inf),) * 2  # the bracket one and two iterations ago
    for _ in range(_MAX_ITERATIONS):
        width = high - low
        if not bool((width > tolerance).any()):
            break
        # the regula falsi point, kept half a tolerance inside the bracket: an end that already sits on the root
        # then closes the bracket at the next iteration instead of the other end creeping towards it
        guess = torch.minimum(torch.maximum(high - g_high * width / (g_high - g_low), low + 0.5 * tolerance),
                              high - 0.5 * tolerance)
        regula = torch.isfinite(guess) & (width <= 0.5 * widths[1])
        mid = torch.where(regula, guess, 0.5 * (low + high))
        widths = (width, widths[0])
        value = g(start + mid * length, horner(base, parts, mid.to(base.dtype).unsqueeze(1)))[:, j].double()
        past = _crossed(before, value, direction)
        g_low = torch.where(past, torch.where(last == 1, 0.5 * g_low, g_low), value)
        g_high = torch.where(past, value, torch.where(last == -1, 0.5 * g_high, g_high))
        last = torch.where(past, 1, -1)
        low = torch.where(past, torch.where(value == 0, mid, low), mid)
        high = torch.where(past, mid, high)
    return start + high * length


def _at_event(dense: DenseOutput, g: _Condition, s_hat: Tensor, which: Tensor) -> tuple[tuple[Tensor, ...], Tensor]:
    """The state blocks at the located solver times ``s_hat`` and the user's event time, both carrying the implicit
    function theorem's gradient where the solve (or g) records one."""
    t_hat = g.sign * s_hat
    read = lambda t: tuple(y.squeeze(1) for y in dense.read(t.unsqueeze(1), unreached=False))
    pick = lambda value: value.gather(1, which.unsqueeze(1)).squeeze(1)
    if not torch.is_grad_enabled():
        return read(t_hat), t_hat
    value = pick(g(s_hat, torch.cat(read(t_hat), -1)))  # G: the gradient in y0, the parameters and g's own
    if not value.requires_grad:
        return read(t_hat), t_hat
    probe = t_hat.clone().requires_grad_(True)  # Ġ: g's total time derivative along the interpolant
    level = pick(g(g.sign * probe, torch.cat(read(probe), -1)))
    slope = torch.autograd.grad(level.sum(), probe, allow_unused=True)[0]
    if slope is None:
        slope = torch.zeros_like(t_hat)
    usable = (slope != 0) & torch.isfinite(slope)
    value = value.double()
    t_star = t_hat - torch.where(usable, (value - value.detach()) / torch.where(usable, slope, 1.0), 0.0)
    return read(t_star), t_star
