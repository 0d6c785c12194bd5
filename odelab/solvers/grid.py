"""Time grids: validated output times, and fixed-step grids that land exactly on every required time."""
from __future__ import annotations

import math
from bisect import bisect_left
from typing import Sequence

import torch
from torch import Tensor


def as_times(t, name: str = "t", allow_decreasing: bool = False) -> tuple[Tensor, list[float]]:
    """``t`` as a tensor and as a list of floats (one host copy at the boundary; the loops work on floats).
    Strictly increasing, or with ``allow_decreasing`` also strictly decreasing (integration backwards)."""
    if not isinstance(t, Tensor):
        try:
            t = torch.as_tensor(t, dtype=torch.float64)
        except (TypeError, ValueError) as err:
            raise TypeError(f"{name}: expected a 1-D sequence of times, got {type(t).__name__}") from err
    if t.dim() != 1 or t.numel() < 1:
        raise ValueError(f"{name}: expected a non-empty 1-D tensor of times, got shape {tuple(t.shape)}")
    values = t.detach().double().cpu().tolist()
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"{name}: contains NaN or Inf")
    increasing = all(b > a for a, b in zip(values, values[1:]))
    if not increasing and not (allow_decreasing and all(b < a for a, b in zip(values, values[1:]))):
        kind = "strictly increasing, or strictly decreasing to integrate backwards" if allow_decreasing else \
            "strictly increasing"
        raise ValueError(f"{name}: times must be {kind}")
    return t, values


def step_grid(times: Sequence[float], dt: float, breakpoints: Sequence[float] = ()) -> tuple[list[float], list[int]]:
    """Grid t0 + k dt merged with the output times and breakpoints, so the solver lands exactly on every
    output time (no drift when outputs are not multiples of dt) and never steps across a breakpoint.
    Grid points and breakpoints closer than 1e-7 dt to a landing time (an output time first) are dropped.
    Returns the grid and the grid index of each output time."""
    t0, t1 = times[0], times[-1]
    n = int(math.floor((t1 - t0) / dt * (1 + 1e-12)))
    tol = 1e-7 * dt
    outputs = sorted(times)
    landing, kept = list(outputs), []
    for b in sorted(b for b in breakpoints if t0 < b < t1):
        i = bisect_left(outputs, b)
        near_output = any(0 <= j < len(outputs) and abs(outputs[j] - b) <= tol for j in (i - 1, i))
        if not near_output and not (kept and b - kept[-1] <= tol):
            kept.append(b)
    landing = sorted(landing + kept)
    regular = [t0 + k * dt for k in range(1, n + 1)]
    grid, j = [t0], 0
    for r in regular:
        while j < len(landing) and landing[j] <= r + tol:
            if landing[j] > grid[-1]:
                grid.append(landing[j])
            j += 1
        if r > grid[-1] + tol:
            grid.append(r)
    grid.extend(x for x in landing[j:] if x > grid[-1])
    position = {v: i for i, v in enumerate(grid)}
    return grid, [position[v] for v in times]
