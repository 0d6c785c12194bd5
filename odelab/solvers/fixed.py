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
from .dense import DenseOutput
from .solution import Solution, finish, newly_overflowed


def solve_fixed(system: System, scheme: Scheme, state: State, t_tensor: Tensor, times: list[float],
                path: InputPath | None, dt: float, checkpoint_segments: int | None = None,
                tstops: list[float] = (), jump_times: list[float] = (), dense: bool = False) -> Solution:
    """Fixed-step driver: steps of ``dt`` landing on every output time and breakpoint (hold-input sample
    times, linear-input knots, ``tstops``, ``jump_times``; see :mod:`.breakpoints`); stage times on a
    ``jump_times`` edge reach the system one ulp inside the step.
    ``checkpoint_segments=K`` runs the steps in K chunks under ``torch.utils.checkpoint`` (same values and
    gradients; the backward recomputes each chunk, so stored activations grow with K, not the step count).
    ``dense``: keep the cubic Hermite interpolant of every step (:mod:`.dense`), f evaluated at both ends inside
    the step; at a node where f does not jump the end of one step and the start of the next share one evaluation."""
    tol = 1e-7 * dt
    breakpoints = collect(times[0], times[-1], path, tstops, jump_times, tol=tol)
    grid, out_index = step_grid(times, dt, breakpoints.stops)
    edges = nodes_near(grid, jump_times, tol)
    field = Field(system)
    field.inp_tensor_time = isinstance(path, FunctionInput)
    record = set(out_index)
    blocks = len(state)

    if dense:
        jumps = nodes_near(grid, breakpoints.jumps, tol)
        return _run_dense(system, scheme, field, state, t_tensor, grid, record, path, edges, jumps,
                          breakpoints.kinks)
    fused = fused_fixed.stepper(scheme, system, state, reuse_stages=True)
    if fused is not None:  # no gradient to record: the stage sums in C++, the outputs written in place
        return _run_fused(system, fused, field, state, t_tensor, grid, record, path, edges)

    def run(first: int, last: int, *start: Tensor) -> tuple[Tensor, ...]:
        """Steps first..last-1 from ``start``; returns the recorded states (flattened) then the final state."""
        state, recorded = start, []
        for k in range(first, last):
            ta, tb = _enter_step(field, grid, k, path, edges)
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


def _enter_step(field: Field, grid: list[float], k: int, path: InputPath | None, edges: set[int]) -> tuple[float, float]:
    """Bind step k's input segment and jump edges to ``field``; returns the step's ends (t_k, t_{k+1})."""
    ta, tb = grid[k], grid[k + 1]
    if path is not None:
        field.inp = path.segment(ta, tb)
    if edges:
        field.edges = (ta, tb, k in edges, k + 1 in edges)
    return ta, tb


def _run_fused(system: System, fused: fused_fixed.FusedExplicitRK, field: Field, state: State, t_tensor: Tensor,
               grid: list[float], record: set[int], path: InputPath | None, edges: set[int]) -> Solution:
    """The steps of :func:`solve_fixed` by :class:`.fused_fixed.FusedExplicitRK`, each recorded state written into
    its output row (stacked as :func:`.solution.finish` would, unless a step fell back to the torch path)."""
    steps = len(grid) - 1
    rows = fused_fixed.Outputs(state, steps, record)
    outputs = [rows.views[0]]
    for k in range(steps):
        ta, tb = _enter_step(field, grid, k, path, edges)
        recorded = k + 1 in record
        state = fused.step(field, ta, state, tb - ta, rows.take() if recorded else None)
        if recorded:
            outputs.append(state)
    stacked = None if fused.torch_path else rows.stacked()
    return finish(system, t_tensor, outputs, steps=steps, nfe=steps * fused.scheme.stages, stacked=stacked)


def _run_dense(system: System, scheme: Scheme, field: Field, state: State, t_tensor: Tensor, grid: list[float],
               record: set[int], path: InputPath | None, edges: set[int], jumps: set[int],
               kinks: tuple) -> Solution:
    """The steps of :func:`solve_fixed` keeping, for the dense output, every node's state and f at each step's ends
    (in the step: its input segment, and one ulp inside at a ``jump_times`` edge). f_b of a step is f_a of the next
    unless f jumps at the node (a hold sample time, a jump time).

    Recording a gradient (the path of terminal events, which forgive a blow-up after them), a sample whose step
    overflows is retired: that step is recomputed with the sample's state replaced by zeros, and from then on it is
    fed zeros and its nodes, slopes and outputs are NaN constants, so that no 0 · inf reaches the backward pass (the
    batch's parameter gradients summed NaN before); its status stays NONFINITE. One host read a step."""
    flat = (lambda x: x[0]) if len(state) == 1 else (lambda x: torch.cat(x, -1))
    steps = len(grid) - 1
    nodes, starts, ends, outputs = [flat(state)], [], [], [state]
    f_a, extra = None, 0  # extra: the evaluations of f beyond the scheme's stages
    guard = torch.is_grad_enabled()
    dead = None  # (B, 1): the retired samples
    fed = lambda x: x if dead is None else tuple(torch.where(dead, torch.zeros_like(b), b) for b in x)
    shown = lambda x: x if dead is None else torch.where(dead, torch.nan, x)  # NaN constants, no graph
    for k in range(steps):
        ta, tb = _enter_step(field, grid, k, path, edges)
        if f_a is None:
            f_a, extra = shown(flat(field(ta, fed(state)))), extra + 1
        new = scheme.step(field, ta, fed(state), tb - ta)
        if guard:
            grown = newly_overflowed(new, dead)
            if grown is not None:  # the step again, without the overflow
                dead = grown
                new = scheme.step(field, ta, fed(state), tb - ta)
            new = tuple(shown(b) for b in new)
        state = new
        f_b = shown(flat(field(tb, fed(state))))  # the left limit at t_{k+1}: still this step's input
        extra += 1
        nodes.append(flat(state))
        starts.append(f_a)
        # f continuous at the node (no hold sample time, no jump time there): the next step starts with it
        f_a = None if k + 1 in jumps else f_b
        ends.append(f_b)
        if k + 1 in record:
            outputs.append(state)
    pieces = DenseOutput.hermite(grid, nodes[:-1], nodes[1:], starts, ends, [x.shape[1] for x in state])
    pieces.kinks = kinks
    return finish(system, t_tensor, outputs, steps=steps, nfe=steps * scheme.stages + extra, dense_output=pieces)
