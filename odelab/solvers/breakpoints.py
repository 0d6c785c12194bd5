"""Breakpoints of a solve: the times a solver must step onto, and those where the vector field jumps.

A one-step method of order p assumes a solution that is p + 1 times differentiable inside every step; a
step straddling a point where y, or one of its first p derivatives, jumps loses accuracy (order 1 at a jump
of f). So every such point is a **stop** -- adaptive solvers clip their steps onto it, fixed-step grids insert
it -- and the points where f itself jumps are also **jumps**: after landing there, an adaptive solver
re-evaluates its first stage (no first-same-as-last reuse of the left limit), and stage times that sit on
the jump are moved one ulp to its side of the step (a user f(t, y) that branches on t then sees the
left limit at a step's end and the right limit at the next step's start, as torchdiffeq's ``jump_t`` does).

Sources, with the order of the derivative of y that jumps there (``lost``):

* a hold input's sample times (u jumps, so y' jumps: lost 1) -- stops and jumps;
* a linear input's knots (u' jumps, so y'' jumps: lost 2) -- stops;
* the user's ``jump_times`` (f jumps: lost 1) -- stops and jumps;
* the user's ``tstops`` -- stops only, never propagated;
* for delay systems, t0 itself (the history φ(t0⁻) may differ from y0: lost 0);
* for a delay solve whose history is an earlier solve's dense solution, that solve's kinks (its t0, sources and
  their propagations, each with the derivative that jumps there): the history is smooth only between them.

Delays propagate them (the method of steps): a jump of y^(m) at s makes y^(m+1) jump at s + τ_i, so the
stops include s + Σ n_i τ_i for 1 ≤ Σ n_i ≤ p − lost. f jumps at s + τ_i only where y itself jumps at s,
i.e. at t0 + τ_i, which are jumps as well.
"""
from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass
from typing import Iterable, Sequence

from .inputs import Hold, InputPath, Linear


@dataclass(frozen=True)
class Breakpoints:
    """``stops``: sorted times strictly inside (t0, t1) to step onto; ``jumps``: those of them where f jumps;
    ``kinks``: (time, m) where the solution's m-th derivative may jump (t0 with m = 0, the sources and what the
    delays propagate), which a delay solve continuing this one propagates in turn."""

    stops: tuple[float, ...] = ()
    jumps: frozenset[float] = frozenset()
    kinks: tuple[tuple[float, int], ...] = ()

    def is_jump(self, s: float) -> bool:
        return s in self.jumps


def user_times(value, name: str) -> list[float]:
    """Validate a user option ``tstops`` / ``jump_times``: a 1-D sequence (or tensor) of finite times."""
    if value is None:
        return []
    try:
        import torch

        if isinstance(value, torch.Tensor):
            if value.dim() > 1:
                raise ValueError(f"{name}: expected a 1-D sequence of times, got shape {tuple(value.shape)}")
            value = value.detach().double().cpu().reshape(-1).tolist()  # one host read, at setup
        values = [float(v) for v in value]
    except TypeError as err:
        raise TypeError(f"{name}: expected a 1-D sequence of times, got {type(value).__name__}") from err
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"{name}: contains NaN or Inf")
    return values


def propagate(sources: Iterable[tuple[float, int]], taus: Sequence[float], order: int, t0: float,
              t1: float) -> list[tuple[float, int]]:
    """s + Σ n_i τ_i for each source (s, lost), 1 ≤ Σ n_i ≤ order − lost, inside (t0, t1); each with the
    order of the derivative that jumps there (lost + Σ n_i)."""
    out: dict[float, int] = {}
    for s, lost in sources:
        frontier = {s}
        for level in range(lost + 1, order + 1):
            frontier = {p + tau for p in frontier for tau in taus if p + tau < t1}
            for p in frontier:
                out[p] = min(out.get(p, level), level)
            if not frontier:
                break
    return sorted(out.items())


def collect(t0: float, t1: float, path: InputPath | None = None, tstops: Sequence[float] = (),
            jump_times: Sequence[float] = (), taus: Sequence[float] = (), order: int = 1,
            tol: float = 0.0, history_kinks: Sequence[tuple[float, int]] = ()) -> Breakpoints:
    """The breakpoints of a solve on [t0, t1] (see the module docstring). Points within ``tol`` of t0, t1 or
    of each other are merged (a merged point is a jump when any of its members is). ``history_kinks``: those of
    a history that is an earlier solution (delay systems)."""
    sources: list[tuple[float, int]] = []  # (time, lost)
    jumps: list[float] = [s for s in jump_times]
    if isinstance(path, Hold):
        sources += [(s, 1) for s in path.times]
        jumps += path.times
    elif isinstance(path, Linear):
        sources += [(s, 2) for s in path.times]
    sources += [(s, 1) for s in jump_times]
    points = [s for s, _ in sources] + list(tstops)
    kinks = [(t0, 0)] + sources
    if taus:
        delayed = propagate([(t0, 0)] + sources + list(history_kinks), taus, order, t0, t1)
        points += [s for s, _ in delayed]
        kinks += delayed
        jumps += [t0 + tau for tau in taus]
    found = merge(points, jumps, t0, t1, tol)
    return Breakpoints(found.stops, found.jumps, tuple((s, m) for s, m in kinks if t0 - tol <= s <= t1 + tol))


def merge(points: Iterable[float], jumps: Iterable[float], t0: float, t1: float, tol: float) -> Breakpoints:
    """Sorted points strictly inside (t0 + tol, t1 − tol), those within ``tol`` of each other merged into the
    first; ``jumps`` mapped onto the kept point within ``tol`` of them."""
    kept: list[float] = []
    for p in sorted(set(points) | set(jumps)):
        if p <= t0 + tol or p >= t1 - tol:
            continue
        if kept and p - kept[-1] <= tol:
            continue
        kept.append(p)
    return Breakpoints(tuple(kept), frozenset(_nearest(kept, s, tol) for s in jumps) - {None})


def _nearest(sorted_points: Sequence[float], s: float, tol: float) -> float | None:
    """The point of ``sorted_points`` within ``tol`` of s (the closest), or None."""
    i = bisect_left(sorted_points, s)
    best = None
    for j in (i - 1, i):
        if 0 <= j < len(sorted_points) and abs(sorted_points[j] - s) <= tol:
            if best is None or abs(sorted_points[j] - s) < abs(best - s):
                best = sorted_points[j]
    return best


def nodes_near(grid: Sequence[float], points: Iterable[float], tol: float) -> set[int]:
    """Indices of the grid nodes within ``tol`` of some point (the grid is sorted)."""
    out = set()
    for s in points:
        i = bisect_left(grid, s)
        for j in (i - 1, i):
            if 0 <= j < len(grid) and abs(grid[j] - s) <= tol:
                out.add(j)
    return out
