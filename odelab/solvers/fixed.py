"""Fixed-step driver for ODEs: steps of ``dt`` on a grid that lands on every output and hold-input sample time."""
from __future__ import annotations

import torch
import torch.utils.checkpoint
from torch import Tensor

from ..systems.base import State, System
from . import fused_fixed
from .field import Field
from .breakpoints import collect, nodes_near
from .grid import step_grid
from .inputs import FunctionInput, InputPath
from .schemes import Scheme
from .solution import Solution, finish


def solve_fixed(system: System, scheme: Scheme, state: State, t_tensor: Tensor, times: list[float],
                path: InputPath | None, dt: float, checkpoint_segments: int | None = None,
                tstops: list[float] = (), jump_times: list[float] = ()) -> Solution:
    """Fixed-step driver: steps of ``dt`` landing on every output time and breakpoint (hold-input sample
    times, linear-input knots, ``tstops``, ``jump_times``; see :mod:`.breakpoints`); stage times on a
    ``jump_times`` edge reach the system one ulp inside the step.
    ``checkpoint_segments=K`` runs the steps in K chunks under ``torch.utils.checkpoint`` (same values and
    gradients; the backward recomputes each chunk, so stored activations grow with K, not the step count)."""
    tol = 1e-7 * dt
    breakpoints = collect(times[0], times[-1], path, tstops, jump_times, tol=tol)
    grid, out_index = step_grid(times, dt, breakpoints.stops)
    edges = nodes_near(grid, jump_times, tol)
    field = Field(system)
    field.inp_tensor_time = isinstance(path, FunctionInput)
    record = set(out_index)
    blocks = len(state)

    fused = fused_fixed.stepper(scheme, system, state, reuse_stages=True)
    if fused is not None:  # no gradient to record: the stage sums in C++, the outputs written in place
        return _run_fused(system, fused, field, state, t_tensor, grid, record, path, edges)

    def run(first: int, last: int, *start: Tensor) -> tuple[Tensor, ...]:
        """Steps first..last-1 from ``start``; returns the recorded states (flattened) then the final state."""
        state, recorded = start, []
        for k in range(first, last):
            ta, tb = grid[k], grid[k + 1]
            if path is not None:
                field.inp = path.segment(ta, tb)
            if edges:
                field.edges = (ta, tb, k in edges, k + 1 in edges)
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


def _run_fused(system: System, fused: fused_fixed.FusedExplicitRK, field: Field, state: State, t_tensor: Tensor,
               grid: list[float], record: set[int], path: InputPath | None, edges: set[int]) -> Solution:
    """The steps of :func:`solve_fixed` by :class:`.fused_fixed.FusedExplicitRK`, each recorded state written into
    its output row (stacked as :func:`.solution.finish` would, unless a step fell back to the torch path)."""
    steps = len(grid) - 1
    rows = fused_fixed.Outputs(state, steps, record)
    outputs = [rows.views[0]]
    for k in range(steps):
        ta, tb = grid[k], grid[k + 1]
        if path is not None:
            field.inp = path.segment(ta, tb)
        if edges:
            field.edges = (ta, tb, k in edges, k + 1 in edges)
        recorded = k + 1 in record
        state = fused.step(field, ta, state, tb - ta, rows.take() if recorded else None)
        if recorded:
            outputs.append(state)
    stacked = None if fused.torch_path else rows.stacked()
    return finish(system, t_tensor, outputs, steps=steps, nfe=steps * fused.scheme.stages, stacked=stacked)
