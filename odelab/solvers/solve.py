"""``odelab.solve``: the one entry point for integrating a system (or a plain callable) over output times."""
from __future__ import annotations

import math
from typing import Callable, Sequence

import torch
import torch.utils.checkpoint
from torch import Tensor

from ..systems.base import State, System, as_system, check_state
from .field import Field
from .inputs import Hold, InputPath, make_input
from .schemes import FIXED_SCHEMES, Scheme
from .solution import Solution, SolveError, Status

# Adaptive methods register themselves here: name -> driver(system, y0, times, path, **options) -> Solution.
ADAPTIVE_METHODS: dict[str, Callable[..., Solution]] = {}


def available_methods() -> list[str]:
    return sorted(FIXED_SCHEMES) + sorted(ADAPTIVE_METHODS)


def resolve_scheme(method: str | Scheme) -> Scheme:
    """A fixed-step scheme by name (or the scheme itself); ValueError naming ``method`` otherwise."""
    if isinstance(method, Scheme):
        return method
    if not isinstance(method, str):
        raise TypeError(f"method: expected a name or a Scheme, got {type(method).__name__}")
    if method not in FIXED_SCHEMES:
        kind = " (adaptive: it takes rtol/atol, not a fixed dt)" if method in ADAPTIVE_METHODS else ""
        raise ValueError(f"method: unknown fixed-step scheme {method!r}{kind}; expected one of {sorted(FIXED_SCHEMES)}")
    return FIXED_SCHEMES[method]


def _times(t, name: str = "t") -> tuple[Tensor, list[float]]:
    if not isinstance(t, Tensor):
        try:
            t = torch.as_tensor(t, dtype=torch.float64)
        except (TypeError, ValueError) as err:
            raise TypeError(f"{name}: expected a 1-D sequence of times, got {type(t).__name__}") from err
    if t.dim() != 1 or t.numel() < 1:
        raise ValueError(f"{name}: expected a non-empty 1-D tensor of times, got shape {tuple(t.shape)}")
    values = t.detach().double().cpu().tolist()  # one host copy at the boundary; the loop works on floats
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"{name}: contains NaN or Inf")
    if any(b <= a for a, b in zip(values, values[1:])):
        raise ValueError(f"{name}: times must be strictly increasing")
    return t, values


def step_grid(times: Sequence[float], dt: float, breakpoints: Sequence[float] = ()) -> tuple[list[float], list[int]]:
    """Grid t0 + k dt merged with the output times and input breakpoints, so the solver lands exactly on
    every output time (no drift when outputs are not multiples of dt). Grid points closer than 1e-7 dt to a
    landing time are dropped. Returns the grid and the grid index of each output time."""
    t0, t1 = times[0], times[-1]
    n = int(math.floor((t1 - t0) / dt * (1 + 1e-12)))
    landing = sorted(set(times) | {b for b in breakpoints if t0 < b < t1})
    tol = 1e-7 * dt
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


def solve(
    system: System | Callable,
    y0: Tensor | Sequence[Tensor] | dict,
    t: Tensor | Sequence[float],
    *,
    u: Tensor | Callable | InputPath | None = None,
    u_times: Tensor | Sequence[float] | None = None,
    interpolation: str = "hold",
    method: str | Scheme = "dopri5",
    dt: float | None = None,
    history=None,
    throw: bool = True,
    **options,
) -> Solution:
    """Integrate ``system`` from ``y0`` at ``t[0]`` and return the states at every time in ``t``.

    ``system`` is an odelab :class:`System` (state = tuple of ``(batch, hidden)`` blocks, or a dict by
    block name) or a plain callable ``f(t, y)`` / ``f(t, y, u)`` with a tensor state ``(batch, d)``.
    ``u``: input samples ``(batch, len(u_times), features)`` (``u_times`` defaults to ``t``) interpolated by
    ``interpolation`` ("hold": u_n acts on (t_{n−1}, t_n]; "linear"), or a callable u(t).
    Fixed-step methods (``euler``, ``midpoint``, ``heun``, ``rk4``, ``imex``, ``imex-implicit``,
    ``symplectic-euler``) take ``dt``; adaptive ones take ``rtol``, ``atol``, ``max_steps``.
    Delay systems take ``history`` (constant, tensor or callable of t; default: constant y0).
    On failure (non-finite state, max steps, step underflow) raises :class:`SolveError` unless
    ``throw=False``, which returns the partial solution with a per-sample ``status``.
    """
    is_callable = not isinstance(system, System)
    system, is_function = as_system(system, y0, has_input=u is not None)
    if is_function and isinstance(y0, Tensor) and y0.dim() != 2:
        raise ValueError(f"y0: expected shape (batch, d), got {tuple(y0.shape)}")
    state = check_state(system, y0)
    if not all(bool(torch.isfinite(x).all()) for x in state):
        raise ValueError("y0: contains NaN or Inf")
    t_tensor, times = _times(t)
    if u is not None and u_times is None and isinstance(u, Tensor):
        sample_times = times
    else:
        sample_times = _times(u_times, "u_times")[1] if u_times is not None else times
    path = make_input(u, sample_times, system, state[0].shape[0], interpolation)
    if system.input_size and path is None and not is_callable:
        raise ValueError(f"u: {type(system).__name__} takes an input of size {system.input_size}; none was given")

    if isinstance(method, str) and method in ADAPTIVE_METHODS:
        if dt is not None:
            options.setdefault("first_step", dt)
        solution = ADAPTIVE_METHODS[method](system, state, t_tensor, times, path, history=history, **options)
    else:
        scheme = resolve_scheme(method)
        segments = options.pop("checkpoint_segments", None)
        if options:
            raise TypeError(f"solve: unexpected options {sorted(options)} for fixed-step method {scheme.name!r}")
        if segments is not None and (isinstance(segments, bool) or not isinstance(segments, int) or segments < 1):
            raise ValueError(f"checkpoint_segments: expected a positive integer, got {segments!r}")
        if dt is None:
            raise ValueError(f"dt: the fixed-step method {scheme.name!r} needs a step size dt")
        if not isinstance(dt, (int, float)) or not math.isfinite(dt) or dt <= 0:
            raise ValueError(f"dt: expected a positive finite number, got {dt!r}")
        scheme.check(system)
        if system.is_delay:
            from .delay import solve_fixed_delay

            if segments is not None:
                raise ValueError("checkpoint_segments: not supported for delay systems")
            solution = solve_fixed_delay(system, scheme, state, t_tensor, times, path, float(dt), history)
        else:
            if history is not None:
                raise ValueError(f"history: {type(system).__name__} declares no delays")
            solution = solve_fixed(system, scheme, state, t_tensor, times, path, float(dt), segments)

    if throw and not bool(solution.success.all()):
        raise SolveError("solve failed: " + solution.failure_summary(), solution)
    return solution


def solve_fixed(system: System, scheme: Scheme, state: State, t_tensor: Tensor, times: list[float],
                path: InputPath | None, dt: float, checkpoint_segments: int | None = None) -> Solution:
    """Fixed-step driver: steps of ``dt`` landing on every output time and hold-input sample time.
    ``checkpoint_segments=K`` runs the steps in K chunks under ``torch.utils.checkpoint`` (same values and
    gradients; the backward recomputes each chunk, so stored activations grow with K, not the step count)."""
    breakpoints = path.breakpoints if isinstance(path, Hold) else ()
    grid, out_index = step_grid(times, dt, breakpoints)
    field = Field(system)
    record = set(out_index)
    blocks = len(state)

    def run(first: int, last: int, *start: Tensor) -> tuple[Tensor, ...]:
        """Steps first..last-1 from ``start``; returns the recorded states (flattened) then the final state."""
        state, recorded = start, []
        for k in range(first, last):
            ta, tb = grid[k], grid[k + 1]
            if path is not None:
                field.inp = path.segment(ta, tb)
            state = scheme.step(field, ta, state, tb - ta)
            if k + 1 in record:
                recorded.extend(state)
        return (*recorded, *state)

    steps = len(grid) - 1
    chunks = checkpoint_segments if checkpoint_segments and torch.is_grad_enabled() else 1
    bounds = [round(steps * i / chunks) for i in range(chunks + 1)]
    outputs = [state]
    for first, last in zip(bounds, bounds[1:]):
        if chunks == 1:
            flat = run(first, last, *state)
        else:
            flat = torch.utils.checkpoint.checkpoint(run, first, last, *state, use_reentrant=False)
        outputs.extend(tuple(flat[i:i + blocks]) for i in range(0, len(flat) - blocks, blocks))
        state = tuple(flat[-blocks:])
    return finish(system, t_tensor, outputs, steps=len(grid) - 1, nfe=(len(grid) - 1) * scheme.stages)


def finish(system: System, t_tensor: Tensor, outputs: list[State], steps, nfe, extra_stats=None, status=None) -> Solution:
    """Stack recorded states batch-first and attach per-sample stats and status (non-finite detection)."""
    ys = tuple(torch.stack(block, dim=1) for block in zip(*outputs))
    batch, device = ys[0].shape[0], ys[0].device
    finite = torch.stack([torch.isfinite(y).flatten(1).all(1) for y in ys]).all(0)
    if status is None:
        status = torch.full((batch,), int(Status.SUCCESS), dtype=torch.int64, device=device)
    status = torch.where(finite, status, torch.full_like(status, int(Status.NONFINITE)))
    as_tensor = lambda v: v if isinstance(v, Tensor) else torch.full((batch,), int(v), dtype=torch.int64, device=device)
    stats = {"steps": as_tensor(steps), "accepted": as_tensor(steps), "rejected": as_tensor(0), "nfe": as_tensor(nfe)}
    stats.update(extra_stats or {})
    return Solution(ts=t_tensor, ys=ys, blocks=system.blocks, stats=stats, status=status)
