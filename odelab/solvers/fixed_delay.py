"""Fixed-step stepping of delay differential equations  y'(t) = f(t, y(t), y(t − τ_1), …, y(t − τ_r), u(t)).

:func:`solve_fixed_delay` is ``odelab.solve`` with a fixed-step scheme on a delay system: the method of steps
(Erichson et al. 2025, eqs. 15--16). Every scheme of ``odelab.solvers.schemes`` applies; each stage at time
  t_k + c·h reads the delayed states y(t_k + c·h − τ_i) from the past of the solve:

  - when an earlier step j starts at t_k − τ_i and has the same length (τ_i a multiple of dt on a uniform
    stretch of the grid): stage i reads stage i of step j, kept in a ring buffer of the last τ/dt + 2
    steps. No interpolation: this is the scheme applied to the method-of-steps ODE system (the solution on
    [t − τ, t] carried along), with the scheme's own order and error constant (ENSO, rk4, dt = 0.1:
    5e-5 max error on [0, 400] against 4e-4 with the Hermite reads below);
  - otherwise, between nodes: the cubic Hermite interpolant of the stored states and derivatives of the
    surrounding step, O(dt⁴) accurate, so rk4 keeps order 4; derivatives are the steps' first stages
    (free for explicit RK) and, at hold-input jumps, the left limit f(t_k⁻) (one extra evaluation);
  - before t0: the history φ(t − τ_i); at t0 itself, φ(t0⁻) for the stage that ends a step and y0 for
    the one that starts it.

  With delays that are numbers (not learnable) and an explicit RK scheme, where every stage reads from is
  a function of the grid alone, the reads are resolved before the steps that make them, a chunk of steps
  at a time (which node, which stage, which interval and Hermite weights), and the loop only runs the
  scheme and looks the values up: the same bits, values and gradients, as the reads by time that learnable
  delays and partitioned schemes take.

  The step must not exceed the smallest delay (``dt ≤ min τ``), so every delayed time lies in steps
  already taken: no extrapolation into the current step. The derivative jumps that a history propagates
  (at t0 + Σ n_i τ_i, the discontinuities of the method of steps) are added to the step grid up to depth
  ``scheme.order``, so that the scheme's order survives them. A delay given as a scalar tensor that
  requires grad is learnable: it is always read through the Hermite interpolant, which is differentiable
  in τ (d/dτ y(t − τ) = −y'(t − τ)); the step grid is that of its current value. Where the grid's points
  move with τ, the gradient takes the motion into account: the Hermite data keep left limits at every
  s + τ where y' jumps at s, and at t0 + τ (the history's jump arriving) y gets the zero-valued term
  (f(t⁻) − f(t⁺)) (τ − τ), the jump of ∂y/∂τ there.

  A :class:`~odelab.systems.StateDelay` (explicit RK schemes, dt ≤ its lower bound) is read per sample at
  t − τ(t, y) with τ from the stage's own time and state (clamped to its bounds): φ before t0, else the cubic
  Hermite interpolant of the node interval holding it (:meth:`_Past.read_state`), its gradient through the
  delayed time. The points where t − τ(t, y(t)) reaches a kink depend on the solution and fall between nodes: the
  scheme's order holds where they sit on nodes and drops to 1 where f jumps there (φ(t0) ≠ y0); the adaptive pairs
  step onto them (:mod:`.tracking`).
"""
from __future__ import annotations

import contextlib
import functools
from bisect import bisect_right
from typing import Callable

import torch
from torch import Tensor

from ..systems.base import State, StateDelay, System
from .breakpoints import collect, nodes_near
from .cache import inductor_options, keep_compiled_code
from .compiled import BatchDynamic, own_code, tracing_options
from .dense import DenseOutput
from . import fused_fixed
from .field import Field, check_derivative, tensor_time
from .grid import step_grid
from .history import History, SolutionHistory, as_history_state, delay_values, history_function, warn_clamped
from .inputs import FunctionInput, InputPath
from .schemes import ExplicitRK, PartitionedEuler, Scheme
from .solution import Solution, finish, newly_overflowed


_NODE, _HISTORY, _HERMITE = range(3)  # where a delayed state is read from (see _locate)


def _hermite_weights(theta, h: float) -> tuple:
    """Weights of y0, h f0, y1, h f1 in the cubic Hermite interpolant on a step of length h at θ ∈ [0, 1]:
    (2θ³ − 3θ² + 1, (θ³ − 2θ² + θ) h, 3θ² − 2θ³, (θ³ − θ²) h)."""
    t2, t3 = theta * theta, theta * theta * theta
    return 2 * t3 - 3 * t2 + 1, (t3 - 2 * t2 + theta) * h, 3 * t2 - 2 * t3, (t3 - t2) * h


def _hermite(y0: Tensor, f0: Tensor, y1: Tensor, f1: Tensor, weights: tuple) -> Tensor:
    """The cubic Hermite interpolant y(θ) = w_y0 y0 + w_f0 f0 + w_y1 y1 + w_f1 f1 (:func:`_hermite_weights`)."""
    w_y0, w_f0, w_y1, w_f1 = weights
    if isinstance(w_y0, Tensor):
        return w_y0 * y0 + w_f0 * f0 + w_y1 * y1 + w_f1 * f1
    return torch.add(torch.add(torch.add(y0 * w_y0, f0, alpha=w_f0), y1, alpha=w_y1), f1, alpha=w_f1)


def _locate(grid: list[float], tol: float, step: int, last: int, complete: int, t: float, tau: float,
            learnable: bool) -> tuple[int, int | None]:
    """Where a fixed-step DDE solve reads y(t − τ) during step ``step``, with nodes up to ``last`` stored and
    the Hermite data of the intervals up to ``complete`` (a pure function of the grid: the same for the reads
    by time of :class:`_Past` and those resolved before the loop by :class:`_StaticReads`):

    - ``(_HISTORY, None)``: φ(t − τ), before t0, and at t0 itself for a stage after the step's start (φ(t0⁻));
    - ``(_NODE, j)``: the stored y_j, at a node (never for a learnable τ: its read must move with τ), and y0
      while no interval is complete (the first step with τ = dt);
    - ``(_HERMITE, i)``: the cubic Hermite interpolant on [t_i, t_{i+1}] (a learnable τ at a node: the
      interval that ends there for a stage after the step's start)."""
    s, t0 = t - tau, grid[0]
    at_end = t > grid[step] + tol  # a stage after the step's start: left limits at nodes
    if s < t0 - tol or (at_end and s < t0 + tol):
        return _HISTORY, None
    k = min(bisect_right(grid, s + tol) - 1, last)
    near_node = abs(s - grid[k]) <= tol
    if near_node and not learnable:
        return _NODE, k
    if near_node and at_end:
        k -= 1
    i = min(k, complete)
    return (_NODE, 0) if i < 0 else (_HERMITE, i)


class _Past:
    """The past of a fixed-step DDE solve, and the delayed-state reads from it.

    Per grid node t_k: the state y_k, the stage states of the step from t_k (explicit RK), the derivative
    f(t_k⁺) (that step's first stage) and, at nodes where a hold input jumps, f(t_k⁻). Entries older than
    max τ + 2 steps are released (a ring buffer); reads cost no host sync.

    ``plan`` (set per step) holds, per delay, the earlier step j with t_j = t_k − τ and the same length
    (stage i then reads stage i of step j), −1 when every stage reads the history, or None (Hermite reads).
    """

    def __init__(self, grid: list[float], phi: History, delays: list[tuple[float, Tensor | None]],
                 jumps: set[int], tol: float, keep: bool = False, state_delays: tuple = (), per_sample=None):
        self.grid, self.phi, self.delays, self.jumps, self.tol = grid, phi, delays, jumps, tol
        # per delay: its StateDelay (read per sample at t − τ(t, y), :meth:`read_state`) or None; the history at
        # per-sample times (batch,) for those reads
        self.state_delays, self.per_sample = state_delays or (None,) * len(delays), per_sample
        self.window: tuple | None = None  # the stacked Hermite data the state-dependent reads gather from
        self.grid_tensor: Tensor | None = None  # the grid on the state's device, for their interval search
        self.outside: list[Tensor | None] = [None] * len(delays)  # per delay: the samples whose τ was clamped
        self.keep = keep  # the nodes' states and derivatives stay (a dense output); stage states are released
        self.t0 = grid[0]
        self.states: list[State | None] = []
        self.stages: list[list[State] | None] = []
        self.right: list[State | None] = []
        self.left: dict[int, State] = {}
        self.left_states: dict[int, State] = {}  # y(t_k⁻) where a moving jump made y(t_k⁺) differ (in its gradient)
        self.complete = -1  # last interval [i, i+1] whose Hermite data are all stored
        self.released = 0
        self.reach = max(value for value, _ in delays)
        self.cache: dict[tuple[float, int], State] = {}
        self.k, self.plan = 0, ()

    def push(self, state: State) -> None:
        self.states.append(state)
        self.stages.append([])
        self.right.append(None)
        self.cache.clear()
        self._update_complete()

    def set_right(self, k: int, derivative: State) -> None:
        self.right[k] = derivative
        self.cache.clear()
        self._update_complete()

    def set_left(self, k: int, derivative: State) -> None:
        self.left[k] = derivative

    def set_node(self, k: int, state: State) -> None:
        """Replace y_k (the right limit at node k) and keep the old value as the left limit."""
        self.left_states[k] = self.states[k]
        self.states[k] = state
        self.cache.clear()

    def _end_derivative(self, k: int) -> State | None:
        return self.left.get(k) if k in self.jumps else self.right[k]

    def _update_complete(self) -> None:
        i = self.complete + 1
        while i + 1 < len(self.states) and self.right[i] is not None and self._end_derivative(i + 1) is not None:
            self.complete = i
            i += 1

    def release_before(self, t: float) -> None:
        """Drop nodes no read at times ≥ t can reach (they stay alive in the autograd graph if needed)."""
        keep_from = bisect_right(self.grid, t - self.reach - self.tol) - 2
        while self.released < min(keep_from, len(self.states) - 2):
            k = self.released
            self.stages[k] = None
            if not self.keep:
                self.states[k] = self.right[k] = None
                self.left.pop(k, None)
                self.left_states.pop(k, None)
            self.released += 1

    def dense_output(self, sizes: list[int]) -> DenseOutput:
        """The cubic Hermite pieces of every step (a past kept whole): y(t_k⁺) and f(t_k⁺) at each start, the left
        limits y(t_{k+1}⁻) (a learnable delay's moving jump) and f(t_{k+1}⁻) at each end."""
        last = len(self.states) - 1
        flat = (lambda x: x[0]) if len(sizes) == 1 else (lambda x: torch.cat(x, -1))
        return DenseOutput.hermite(self.grid, [flat(self.states[k]) for k in range(last)],
                                   [flat(self.left_states.get(k, self.states[k])) for k in range(1, last + 1)],
                                   [flat(self.right[k]) for k in range(last)],
                                   [flat(self._end_derivative(k)) for k in range(1, last + 1)], sizes)

    def __call__(self, t: float, state: State | None = None) -> tuple[State, ...]:
        """y(t − τ_i) for every delay, by time (the ``delayed`` of a :class:`Field`; ``state``: where a
        state-dependent delay reads from)."""
        return tuple(self.read(t, i) if self.state_delays[i] is None else self.read_state(t, i, state)
                     for i in range(len(self.delays)))

    def stage_delayed(self, index: int, t: float, state: State) -> tuple[State, ...]:
        """The delayed states of stage ``index`` (at time t, the stage state ``state``) of the current step."""
        out = []
        for i, j in enumerate(self.plan):
            if j is not None and j >= 0:
                out.append(self.stages[j][index])
            elif self.state_delays[i] is not None:
                out.append(self.read_state(t, i, state))
            else:
                out.append(self.read(t, i))
        return tuple(out)

    def read_state(self, t: float, i: int, state: State) -> State:
        """y(t − τ(t, y)) per sample for the state-dependent delay i, τ clamped to its bounds: φ before t0 (and at
        t0 for a stage after the step's start, φ(t0⁻)), else the cubic Hermite interpolant of the interval that
        holds the delayed time, gathered per sample from the stored nodes; gradients pass through the delayed
        time into the interpolant (and a callable history)."""
        delay, like = self.state_delays[i], state[0]
        batch = like.shape[0]
        tau = delay.evaluate(t, state, batch)
        with torch.no_grad():
            clamped = delay.outside(tau)
            self.outside[i] = clamped if self.outside[i] is None else self.outside[i] | clamped
        s = t - tau.clamp(delay.lower, delay.upper)
        where = s.detach()
        at_end = t > self.grid[self.k] + self.tol  # a stage after the step's start: φ(t0⁻) at t0
        before = (where < self.t0 + self.tol) if at_end else (where < self.t0 - self.tol)
        grid, first, starts, lengths, data = self._window(like)
        index = (torch.searchsorted(grid, where, right=True) - 1 - first).clamp_(0, starts.shape[0] - 1)
        theta = ((s - starts[index]) / lengths[index]).to(like.dtype).unsqueeze(1)
        h = lengths[index].to(like.dtype).unsqueeze(1)
        weights = _hermite_weights(theta, h)
        rows = torch.arange(batch, device=like.device)
        inside = tuple(_hermite(y0[index, rows], f0[index, rows], y1[index, rows], f1[index, rows], weights)
                       for y0, f0, y1, f1 in data)
        past = self.per_sample(s)  # for every sample (no host read to ask which): a constant history costs nothing
        return tuple(torch.where(before.unsqueeze(1), p, x) for p, x in zip(past, inside))

    def _window(self, like: Tensor) -> tuple:
        """The grid (float64) and, per interval [t_j, t_{j+1}] from the first a delay reaches from this step to the
        last complete one, its start, length and per block its Hermite data (y_j, f(t_j⁺), y(t_{j+1}⁻), f(t_{j+1}⁻))
        stacked (J, batch, n); rebuilt when an interval completes (about once a step)."""
        first = max(self.released, bisect_right(self.grid, self.grid[self.k] - self.reach - self.tol) - 2, 0)
        key = (first, self.complete)
        if self.grid_tensor is None:
            self.grid_tensor = torch.tensor(self.grid, dtype=torch.float64, device=like.device)
        if self.window is None or self.window[0] != key:
            grid = self.grid_tensor
            last = max(self.complete, first)
            nodes = range(first, last + 1)
            stack = lambda values: torch.stack(list(values))
            data = []
            for b in range(len(self.states[-1])):
                if self.complete < first:  # no interval yet: every read is φ's (a placeholder keeps the shapes)
                    data.append((self.states[-1][b].unsqueeze(0),) * 4)
                    continue
                data.append((stack(self.states[j][b] for j in nodes), stack(self.right[j][b] for j in nodes),
                             stack(self.left_states.get(j + 1, self.states[j + 1])[b] for j in nodes),
                             stack(self._end_derivative(j + 1)[b] for j in nodes)))
            starts = grid[first:last + 1]
            self.window = (key, (grid, first, starts, grid[first + 1:last + 2] - starts, data))
        return self.window[1]

    def read(self, t: float, i: int) -> State:
        key = (t, i)
        if key not in self.cache:
            self.cache[key] = self._read(t, *self.delays[i])
        return self.cache[key]

    def _read(self, t: float, tau: float, learnable: Tensor | None) -> State:
        grid = self.grid
        kind, i = _locate(grid, self.tol, self.k, len(self.states) - 1, self.complete, t, tau, learnable is not None)
        if kind == _HISTORY:
            return self.phi(t - tau if learnable is None else t - learnable)
        if kind == _NODE:
            return self.states[i]
        h = grid[i + 1] - grid[i]
        theta = ((t - tau) - grid[i]) / h if learnable is None else ((t - grid[i]) - learnable) / h
        if isinstance(theta, Tensor):
            theta = theta.to(self.states[i][0].dtype)
        weights = _hermite_weights(theta, h)
        return tuple(_hermite(y0, f0, y1, f1, weights) for y0, f0, y1, f1 in
                     zip(self.states[i], self.right[i], self.left_states.get(i + 1, self.states[i + 1]),
                         self._end_derivative(i + 1)))


class _DelayField(Field):
    """The field as the fixed-step DDE driver binds it. Calls of the full derivative are the stages of an
    explicit RK step, in the scheme's fixed order: their states are recorded (stage i of an aligned later
    step reads them) and the first one, f(t_k, y_k), is kept as the node's right derivative at no cost."""

    __slots__ = ("past", "dead")

    def __init__(self, system: System, past: _Past):
        super().__init__(system, delayed=past)
        self.past = past
        self.dead: Tensor | None = None  # (B, 1): retired samples (see _steps_by_time), fed zeros

    def _fed(self, blocks: State) -> State:
        """The blocks with the retired samples' rows zero (no value, no gradient of theirs reaches f)."""
        if self.dead is None:
            return blocks
        return tuple(torch.where(self.dead, torch.zeros_like(b), b) for b in blocks)

    def __call__(self, t, state):
        self.evaluations += 1
        past = self.past
        stages = past.stages[past.k]
        index = len(stages)
        state = self._fed(state)
        stages.append(state)
        u = self.input(t, state[0])
        delayed = tuple(self._fed(d) for d in past.stage_delayed(index, t, state))
        out = self.system.derivative(self.time(t, state[0]), state, u, *delayed)
        if not self.checked:
            check_derivative(self.system, state, out)
            self.checked.add(None)
        if index == 0 and state is past.states[past.k] and t == past.grid[past.k]:
            past.set_right(past.k, out)
        return out

    def evaluate(self, t: float, state: State) -> State:
        """An evaluation that is not a stage (Hermite data the scheme does not compute)."""
        self.evaluations += 1
        state = self._fed(state)
        u = self.input(t, state[0])
        delayed = tuple(self._fed(d) for d in self.past(t, state))
        return self.system.derivative(self.time(t, state[0]), state, u, *delayed)


class _StaticReads:
    """The delayed-state reads of a fixed-step explicit RK solve whose delays are fixed numbers, resolved before
    the steps that make them: the grid, the stage times t_k + c_i h and the delays are known, so is where
    every read goes (:func:`_locate`, as the reads by time of :class:`_Past` would find it: nodes up to t_k
    stored, Hermite data complete up to [t_{k−2}, t_{k−1}] for the first stage and up to [t_{k−1}, t_k] once
    it has given f(t_k⁺)).
    A step's row is the list of the aligned steps j when every delay has one (stage i reads stage i of step j,
    :func:`_plan`), else a tuple holding, per delay, its aligned step j or one read per stage:

    - ``(_NODE, j)``: node j;
    - ``(_HISTORY, s, d)``: φ(s);
    - ``(_HERMITE, i, weights, left, d)``: the Hermite interpolant on [t_i, t_{i+1}] with the weights of its θ
      (:func:`_hermite_weights`), ``left`` when its end derivative is the left limit f(t_{i+1}⁻);

    and the reads of the left-limit evaluations f(t_{k+1}⁻) after step k, at the nodes in ``left_at``. Reads
    are built a chunk of steps at a time (memory bounded by the chunk, not by the step count); equal reads of
    one chunk are one object, so that a field can compute one value for them (the two midpoint stages of rk4).
    """

    def __init__(self, grid: list[float], delays: list[float], nodes: list[float], plan: list[tuple[int | None, ...]],
                 left_at: set[int], tol: float):
        self.grid, self.delays, self.nodes, self.plan, self.left_at, self.tol = grid, delays, nodes, plan, left_at, tol

    def _read(self, k: int, complete: int, t: float, d: int) -> tuple:
        tau = self.delays[d]
        kind, i = _locate(self.grid, self.tol, k, k, complete, t, tau, False)
        if kind == _HISTORY:
            return _HISTORY, t - tau, d
        if kind == _NODE:
            return _NODE, i
        h = self.grid[i + 1] - self.grid[i]
        return _HERMITE, i, _hermite_weights(((t - tau) - self.grid[i]) / h, h), i + 1 in self.left_at, d

    def chunk(self, first: int, last: int) -> tuple[list[tuple], dict[int, tuple]]:
        """Steps first..last−1: their rows and the reads of the left-limit evaluations by node."""
        grid, interned = self.grid, {}
        intern = lambda read: interned.setdefault(read, read)
        rows, left = [], {}
        for k in range(first, last):
            plan = self.plan[k]
            if None not in plan and -1 not in plan:  # every delay aligned: a list of the aligned steps
                rows.append(list(plan))
                continue
            ta, h, row = grid[k], grid[k + 1] - grid[k], []
            for d, j in enumerate(plan):
                if j is not None and j >= 0:
                    row.append(j)
                    continue
                row.append(tuple(intern(self._read(k, k - 1 if index > 0 else k - 2,
                                                   ta + c * h, d)) for index, c in enumerate(self.nodes)))
            rows.append(tuple(row))
            if k + 1 in self.left_at:
                left[k + 1] = tuple(intern(self._read(k, k - 1, grid[k + 1], d)) for d in range(len(self.delays)))
        return rows, left


class _StaticField(Field):
    """The field of the fixed-step DDE loop with reads resolved beforehand (:class:`_StaticReads`), and the
    past those reads take their values from: per node j the state y_j, the stage states of the step from t_j
    and f(t_j⁺) (that step's first stage, kept at no cost), and f(t_j⁻) where stored; ``release_before``
    drops what no later read reaches. ``begin(row)`` starts a step: stage i reads, per delay, stage i of the
    aligned step (gathered per stage at once when every delay is aligned) or its own read; a history or
    Hermite read is computed once per step (as the reads by time are: a value shared across steps would
    change the rounding of the gradient sums). ``plain``: the system sees the solver's float time and no
    input (no input path, no jump edges), so the stages skip :meth:`Field.time` and :meth:`Field.input`."""

    __slots__ = ("phi", "states", "stages", "right", "left", "released", "row", "aligned", "memo", "plain")

    def __init__(self, system: System, phi: History, state: State, plain: bool):
        super().__init__(system)
        self.phi, self.states, self.stages, self.right, self.left = phi, [state], [], [], {}
        self.released, self.row, self.aligned, self.memo, self.plain = 0, (), None, {}, plain

    def begin(self, row: tuple) -> None:
        """Start a step reading by ``row`` (:class:`_StaticReads`); its stage states are recorded."""
        self.stages.append([])
        self.row = row
        self.aligned = tuple(zip(*[self.stages[j] for j in row])) if row.__class__ is not tuple else None
        self.memo.clear()

    def __call__(self, t, state):
        self.evaluations += 1
        stages = self.stages[-1]
        index = len(stages)
        stages.append(state)
        if self.aligned is not None:
            delayed = self.aligned[index]
        else:
            delayed = [self.stages[source][index] if source.__class__ is int else self._value(source[index])
                       for source in self.row]
        if self.plain:
            out = self.system.derivative(t, state, None, *delayed)
        else:
            out = self.system.derivative(self.time(t, state[0]), state, self.input(t, state[0]), *delayed)
        if not self.checked:
            check_derivative(self.system, state, out)
            self.checked.add(None)
        if index == 0:  # f(t_k⁺, y_k): explicit RK's first stage
            self.right.append(out)
        return out

    def evaluate(self, t: float, state: State, reads: tuple) -> State:
        """An evaluation that is not a stage (the left limit at a jump node, for the Hermite data)."""
        self.evaluations += 1
        return self.system.derivative(self.time(t, state[0]), state, self.input(t, state[0]),
                                      *[self._value(read) for read in reads])

    def _value(self, read: tuple) -> State:
        kind = read[0]
        if kind == _NODE:
            return self.states[read[1]]
        value = self.memo.get(id(read))
        if value is None:
            if kind == _HISTORY:
                value = self.phi(read[1])
            else:
                _, i, weights, left, _ = read
                end = self.left[i + 1] if left else self.right[i + 1]
                value = tuple(_hermite(y0, f0, y1, f1, weights) for y0, f0, y1, f1 in
                              zip(self.states[i], self.right[i], self.states[i + 1], end))
            self.memo[id(read)] = value
        return value

    def release_before(self, node: int) -> None:
        """Drop the past of nodes before ``node`` (they stay alive in the autograd graph if needed)."""
        start, end = self.released, min(node, len(self.right))
        if end > start:
            self.states[start:end] = self.stages[start:end] = self.right[start:end] = [None] * (end - start)
            for j in [j for j in self.left if j < end]:
                del self.left[j]
            self.released = end


def _plan(grid: list[float], delays: list[tuple[float, Tensor | None]], scheme: Scheme,
          tol: float) -> list[tuple[int | None, ...]]:
    """Per step and delay: the aligned earlier step j (t_j = t_k − τ, same length; stage i reads its stage i;
    for a partitioned scheme, whose only stage is at t_k, a node j suffices), −1 (all stages read the
    history) or None (Hermite reads by time). Learnable delays and unknown schemes always read by time."""
    if isinstance(scheme, ExplicitRK):
        reach = max(scheme.tableau.c)
    elif isinstance(scheme, PartitionedEuler):
        reach = 0.0
    else:
        return [(None,) * len(delays)] * (len(grid) - 1)
    t0, plan = grid[0], []
    for k in range(len(grid) - 1):
        ta, h = grid[k], grid[k + 1] - grid[k]
        row = []
        for tau, learnable in delays:
            s = ta - tau
            j = bisect_right(grid, s + tol) - 1
            if learnable is not None:
                row.append(None)
            elif ta + reach * h - tau <= t0 + tol:
                row.append(-1)
            elif j >= 0 and abs(grid[j] - s) <= tol and (reach == 0.0 or abs(grid[j + 1] - grid[j] - h) <= tol):
                row.append(j)
            else:
                row.append(None)
        plan.append(tuple(row))
    return plan


def solve_fixed_delay(system: System, scheme: Scheme, state: State, t_tensor: Tensor, times: list[float],
                      path: InputPath | None, dt: float, history, tstops: list[float] = (),
                      jump_times: list[float] = (), compile: bool = False, dense: bool = False) -> Solution:
    """Fixed-step DDE driver (method of steps) for ``odelab.solve``; see the module docstring.

    ``compile``: explicit RK schemes with fixed delays, no input and no jump times run _BLOCK steps per
    torch.compile'd call where every delayed read is an aligned stage of an earlier step (the method of steps'
    steady state, with delays of at least _BLOCK steps);
    values to round-off of the eager loop; elsewhere a ValueError.

    ``dense``: keep every node's state and derivatives for the cubic Hermite dense output (:mod:`.dense`; the
    reads by time then run, every derivative at a node where f jumps and at the last is evaluated as a left limit,
    and no past is released).

    ``history`` as in :func:`history_function`. Raises ValueError naming ``dt`` when dt exceeds the
    smallest delay. Stats: ``nfe`` counts the stage evaluations plus the derivative evaluations the
    Hermite interpolant needs beyond them (partitioned schemes; left limits at hold-input jumps).
    """
    delays = delay_values(system, state_dependent=True)  # a StateDelay: its upper bound (the reach)
    taus = [value for value, _ in delays]
    state_delays = tuple(tau if isinstance(tau, StateDelay) else None for tau in system.delays)
    dependent = any(tau is not None for tau in state_delays)
    shortest = min(value if tau is None else tau.lower for value, tau in zip(taus, state_delays))
    if shortest <= 0:
        raise ValueError(f"{type(system).__name__}.delays: solve needs positive delays, got {taus}")
    if dt > shortest * (1 + 1e-9):
        raise ValueError(f"dt: fixed-step DDE stepping needs dt <= the smallest delay {shortest} (a stage's "
                         f"delayed time would fall inside the step being taken), got {dt}")
    if dependent:
        if not isinstance(scheme, ExplicitRK):
            raise ValueError(f"{type(system).__name__}.delays: a state-dependent delay reads each stage's own state; "
                             f"fixed-step solves take it under explicit Runge–Kutta schemes, not {scheme.name!r}")
        if any(learn is not None for _, learn in delays) or compile:
            raise ValueError(f"{type(system).__name__}.delays: a state-dependent delay is read by time, without "
                             f"learnable delays beside it or compile=True")
    t0, t1 = times[0], times[-1]
    phi = history_function(system, state, history, t0)
    tol = 1e-7 * dt
    # t0 propagates through the constant lags onto the grid; where t − τ(t, y(t)) meets it is not known ahead
    lags = [value for value, tau in zip(taus, state_delays) if tau is None]
    breakpoints = collect(t0, t1, path, tstops, jump_times, lags, max(scheme.order, 1), tol,
                          getattr(history, "kinks", ()))
    grid, out_index = step_grid(times, dt, breakpoints.stops)
    # nodes where f jumps (input jumps, jump_times, t0 + τ_i): the Hermite data take f's left limit there
    jumps = {k for k in nodes_near(grid, breakpoints.jumps, tol) if 0 < k < len(grid) - 1}
    edges = nodes_near(grid, jump_times, tol)
    inside = lambda nodes: {k for k in nodes if 0 < k < len(grid) - 1}
    moving: dict[int, list[Tensor]] = {}  # node t0 + τ_i of a learnable τ_i: the jump there moves with τ_i
    learnable = [(value, learn) for value, learn in delays if learn is not None]
    if learnable:
        # ∂f/∂τ = −∂f/∂y_τ y'(t − τ) jumps at s + τ wherever y' jumps at s: left limits there too
        sources = set(breakpoints.jumps) | {t0}
        jumps |= inside(nodes_near(grid, [q + value for q in sources for value, _ in learnable], tol))
        for value, learn in learnable:
            for k in inside(nodes_near(grid, [t0 + value], tol)):
                moving.setdefault(k, []).append(learn)

    plan = _plan(grid, delays, scheme, tol)
    if dependent:  # read per sample by time
        plan = [tuple(None if tau is not None else j for j, tau in zip(row, state_delays)) for row in plan]
    hermite = any(j is None for row in plan for j in row)
    record = set(out_index)
    static = isinstance(scheme, ExplicitRK) and scheme.tableau.c[0] == 0 and not learnable and not dependent
    by_sample = _per_sample_history(system, state, history, phi) if dependent else None
    if compile and not (static and path is None and not edges and not tensor_time(system) and not dense):
        raise ValueError("compile: fixed-step DDE solves compile explicit RK schemes with fixed (not learnable) "
                         "delays, without an input u, jump_times or a dense output")
    stacked = pieces = None
    if dense:
        jumps.add(len(grid) - 1)  # the last node's derivative: the left limit, inside the last step
        outputs, nfe, past = _steps_by_time(system, scheme, state, grid, path, edges, phi, delays, plan, True, jumps,
                                            moving, tol, record, keep=True, state_delays=state_delays,
                                            per_sample=by_sample)
        pieces = past.dense_output([x.shape[1] for x in state])
        pieces.kinks = breakpoints.kinks
    elif static:
        # left limits f(t_k⁻) are stored at the jump nodes only when some read interpolates (as by time)
        outputs, nfe, stacked = _steps_static(system, scheme, state, grid, path, edges, phi, taus, plan,
                                              jumps if hermite else set(), tol, record, compile)
    else:
        outputs, nfe, past = _steps_by_time(system, scheme, state, grid, path, edges, phi, delays, plan, hermite,
                                            jumps, moving, tol, record, state_delays=state_delays, per_sample=by_sample)
    if dependent:
        warn_clamped(system, past.outside)
    return finish(system, t_tensor, outputs, steps=len(grid) - 1, nfe=nfe, stacked=stacked, dense_output=pieces)


def _per_sample_history(system: System, y0: State, history, phi: History) -> Callable[[Tensor], State]:
    """φ at per-sample times s (batch,) float64, for state-dependent reads: a constant history as it is, a callable
    one (or an earlier solution) given s as a ``(batch, 1)`` tensor of the state's dtype, as the adaptive methods
    pass it."""
    if history is None or isinstance(history, Tensor) or not callable(history):
        return lambda s: phi(0.0)
    if isinstance(history, SolutionHistory):
        return lambda s: history(s.unsqueeze(1))
    return lambda s: as_history_state(system, y0, history(s.to(y0[0].dtype).unsqueeze(1)), "the callable's value")


_CHUNK = 96  # steps whose reads are resolved at a time (and whose past is released together): a multiple of _BLOCK


def _steps_static(system: System, scheme: ExplicitRK, state: State, grid: list[float], path: InputPath | None,
                  edges: set[int], phi: History, taus: list[float], plan: list[tuple[int | None, ...]],
                  left_at: set[int], tol: float, record: set[int],
                  compile: bool = False) -> tuple[list[State], int, tuple[Tensor, ...] | None]:
    """The steps of an explicit RK scheme with fixed delays, every delayed read resolved a chunk of steps ahead
    (:class:`_StaticReads`): the loop runs the scheme and looks values up, no search, no host sync. Returns
    the states at the nodes in ``record`` (after y0), the evaluation count and, when the steps wrote them in place
    (:mod:`.fused_fixed`: a solve that records no gradient on a CPU), those states stacked batch first.
    ``compile``: runs of :data:`_BLOCK` steps whose delays all read stages of steps before the run go through one
    compiled call (:func:`_compiled_block`)."""
    reads, reach = _StaticReads(grid, taus, list(scheme.tableau.c), plan, left_at, tol), max(taus)
    field = _StaticField(system, phi, state, plain=path is None and not edges and not tensor_time(system))
    field.inp_tensor_time = isinstance(path, FunctionInput)
    block = _compiled_block(system, scheme.tableau, state) if compile and field.plain else None
    grid_tensor = torch.tensor(grid, dtype=torch.float64, device=state[0].device) if block is not None else None
    outputs, steps = [state], len(grid) - 1
    fused = None if compile else fused_fixed.stepper(scheme, system, state)
    if fused is not None:
        written = fused_fixed.Outputs(state, steps, record)
        outputs = [written.views[0]]
    with tracing_options() if block is not None else contextlib.nullcontext():
        for first in range(0, steps, _CHUNK):
            rows, left_reads = reads.chunk(first, min(first + _CHUNK, steps))
            # the reads from t_first on reach back to t_first − max τ: the nodes before the interval there go
            field.release_before(bisect_right(grid, grid[first] - reach - tol) - 2)
            skip = 0
            for k, row in enumerate(rows, first):
                if skip:  # taken by the compiled block
                    skip -= 1
                    continue
                if block is not None and field.checked and _runs_alone(rows, k - first, k, left_reads):
                    nodes, stages, rights = block(grid_tensor[k:k + _BLOCK + 1], state,
                                                  [_source_stages(field.stages, j, len(state)) for j in row])
                    nodes = list(zip(*[x.unbind(0) for x in nodes]))
                    field.stages.extend([_BlockStages(stages, q) for q in range(_BLOCK)])
                    field.right.extend(zip(*[x.unbind(0) for x in rights]))
                    field.states.extend(nodes)
                    outputs.extend([node for j, node in enumerate(nodes, k + 1) if j in record])
                    field.evaluations += _BLOCK * len(scheme.tableau.c)
                    state, skip = nodes[-1], _BLOCK - 1
                    continue
                ta, tb = grid[k], grid[k + 1]
                if path is not None:
                    field.inp = path.segment(ta, tb)
                if edges:
                    field.edges = (ta, tb, k in edges, k + 1 in edges)
                field.begin(row)
                if fused is not None:
                    state = fused.step(field, ta, state, tb - ta, written.take() if k + 1 in record else None)
                else:
                    state = scheme.step(field, ta, state, tb - ta)
                if k + 1 in left_reads:  # f(t_{k+1}⁻) for the Hermite data: still this step's input segment
                    field.left[k + 1] = field.evaluate(tb, state, left_reads[k + 1])
                field.states.append(state)
                if k + 1 in record:
                    outputs.append(state)
    stacked = written.stacked() if fused is not None and not fused.torch_path else None
    return outputs, field.evaluations, stacked


# steps per compiled call of a fixed-delay solve with compile=True (delays of at least as many steps): they share
# the call's overhead (~0.2 ms on a CPU), the compilation time grows with them. ENSO (256 trajectories, 4000 steps,
# delay 48 steps, one thread, loaded CPU; CPU time): 16 steps 0.105 s a solve, first call 25 s cold / 8.5 s warm;
# 24 steps 0.092 s, 35 s / 9 s; 32 steps 0.094 s (its reads straddle two blocks), 67 s / 14 s
_BLOCK = 24


def _runs_alone(rows: list, index: int, k: int, left_reads: dict) -> bool:
    """Whether steps k … k + _BLOCK − 1 (rows[index:]) all read aligned stages of consecutive steps before k,
    and none needs a left-limit evaluation: one compiled block can take them."""
    run = rows[index:index + _BLOCK]
    if len(run) < _BLOCK or any(row.__class__ is not list for row in run) or (
            left_reads and any(k + q in left_reads for q in range(1, _BLOCK + 1))):
        return False
    return all(j0 + _BLOCK <= k and [row[d] for row in run] == list(range(j0, j0 + _BLOCK))
               for d, j0 in enumerate(run[0]))


class _BlockStages:
    """The stage states of step q of a compiled block, as the list of states an eager step records (stage i:
    one view per state block), kept as the block's stacked (K, stages, batch, n) tensors."""

    __slots__ = ("stacked", "q")

    def __init__(self, stacked: list[Tensor], q: int):
        self.stacked, self.q = stacked, q

    def __getitem__(self, i: int) -> State:
        return tuple(x[self.q, i] for x in self.stacked)

    def __len__(self) -> int:
        return self.stacked[0].shape[1]

    def __iter__(self):
        return (self[i] for i in range(len(self)))


def _source_stages(stages: list, first: int, blocks: int) -> list[Tensor]:
    """The stage states of steps first … first + _BLOCK − 1 as one (_BLOCK, stages, batch, n) tensor per state
    block: a view when they are one compiled block's, else gathered."""
    parts, j = [], first
    while j < first + _BLOCK:
        entry = stages[j]
        if entry.__class__ is _BlockStages:
            count = min(entry.stacked[0].shape[0] - entry.q, first + _BLOCK - j)
            parts.append([x[entry.q:entry.q + count] for x in entry.stacked])
            j += count
        else:  # an eager step's list of stage states
            parts.append([torch.stack([stage[b] for stage in entry]).unsqueeze(0) for b in range(blocks)])
            j += 1
    return parts[0] if len(parts) == 1 else [torch.cat([part[b] for part in parts]) for b in range(blocks)]


def _rk_block(system: System, tableau, times: Tensor, state: State, delayed: list[list[Tensor]]) -> tuple:
    """len(times) − 1 explicit RK steps on the grid ``times`` (what ``compile=True`` compiles), as
    :meth:`ExplicitRK.step` with a :class:`_StaticField`: stage i of step q reads, per delay d, the state
    ``delayed[d][b][q, i]`` of each state block b (the aligned step's stage i). Returns, stacked over the steps
    (a compiled call's cost grows with its number of outputs), per state block the nodes (K, batch, n), the
    stage states (K, stages, batch, n) and f(t_q⁺), the first stage (K, batch, n)."""
    nodes, stages, rights = [], [], []
    coefficients = {x for x in (*tableau.c, *(a for row in tableau.a for a in row), *tableau.b) if x != 0.0}
    for q in range(times.shape[0] - 1):
        t, h = times[q], (times[q + 1] - times[q]).to(state[0].dtype)
        scaled = {x: h * x for x in coefficients}  # h·a once per step and coefficient: a smaller graph to compile
        ks, inputs = [], []
        for i, (c, row) in enumerate(zip(tableau.c, tableau.a)):
            stage = state
            for a, k in zip(row, ks):
                if a != 0.0:
                    stage = tuple(s + kb * scaled[a] for s, kb in zip(stage, k))
            inputs.append(stage)
            read = [tuple(x[q, i] for x in source) for source in delayed]
            ks.append(system.derivative(t + scaled[c] if c != 0.0 else t, stage, None, *read))
        for b, k in zip(tableau.b, ks):
            if b != 0.0:
                state = tuple(s + kb * scaled[b] for s, kb in zip(state, k))
        nodes.append(state)
        stages.append(inputs)
        rights.append(ks[0])
    blocks = range(len(state))
    return ([torch.stack([node[b] for node in nodes]) for b in blocks],
            # one stack (nested ones copy the inner results once more)
            [torch.stack([stage[b] for step in stages for stage in step]).unflatten(0, (len(stages), -1))
             for b in blocks],
            [torch.stack([right[b] for right in rights]) for b in blocks])


_COMPILED_BLOCKS: dict[tuple, Callable] = {}


def _compiled_block(system: System, tableau, state: State) -> Callable:
    """torch.compile of :func:`_rk_block` for _BLOCK steps, cached per (system, tableau, device type, state
    sizes); the batch size symbolic (:class:`.compiled.BatchDynamic`) and the times an argument, so one
    compilation serves every batch size and grid (called inside ``compiled.tracing_options``: the tableau's
    and the system's floats are constants). On a CPU, inductor's C++ wrapper (the call's own bookkeeping in
    C++, not Python: ENSO's 24-step call 0.34 → 0.2 ms) and no vectorized loop tails (half the C++ to compile,
    the same speed)."""
    device, sizes = state[0].device, tuple(x.shape[-1] for x in state)
    key = (system, tableau.name, device.type, sizes)
    if key not in _COMPILED_BLOCKS:
        if len(_COMPILED_BLOCKS) >= 8:
            _COMPILED_BLOCKS.pop(next(iter(_COMPILED_BLOCKS)))
        keep_compiled_code()
        options = inductor_options() | ({"cpp_wrapper": True, "cpp.enable_loop_tail_vec": False}
                                        if device.type == "cpu" else {})
        block = own_code(_rk_block, f"rk_block_{tableau.name}_{'_'.join(map(str, sizes))}")
        # the batch-sized arguments: the state blocks (batch, n) and the delayed stages (K, stages, batch, n)
        _COMPILED_BLOCKS[key] = BatchDynamic(
            torch.compile(functools.partial(block, system, tableau), dynamic=None, options=options),
            lambda args: [(x, 0) for x in args[1]] + [(x, 2) for source in args[2] for x in source])
    return _COMPILED_BLOCKS[key]


def _steps_by_time(system: System, scheme: Scheme, state: State, grid: list[float], path: InputPath | None,
                   edges: set[int], phi: History, delays: list[tuple[float, Tensor | None]],
                   plan: list[tuple[int | None, ...]], hermite: bool, jumps: set[int], moving: dict[int, list[Tensor]],
                   tol: float, record: set[int], keep: bool = False, state_delays: tuple = (),
                   per_sample=None) -> tuple[list[State], int, "_Past"]:
    """The steps with every delayed read found by time as the stages ask (:class:`_Past`): learnable delays,
    state-dependent ones (``state_delays``, read per sample, φ at per-sample times from ``per_sample``),
    partitioned schemes, dense outputs (``keep``: no node released). Returns the states at the nodes in
    ``record`` (after y0), the evaluation count and the past.

    A dense solve that records a gradient (the path of terminal events, which forgive a blow-up after them) retires
    a sample whose step overflows, as :func:`.fixed._run_dense` does: the step is recomputed with the sample's state
    and delayed states fed to f as zeros, from then on too, and its nodes are NaN constants (its status NONFINITE),
    so that no 0 · inf reaches the backward pass. One host read a step."""
    past = _Past(grid, phi, delays, jumps, tol, keep, state_delays, per_sample)
    field = _DelayField(system, past)
    field.inp_tensor_time = isinstance(path, FunctionInput)
    guard = keep and torch.is_grad_enabled()
    past.push(state)
    outputs = [state]
    for k in range(len(grid) - 1):
        ta, tb = grid[k], grid[k + 1]
        if path is not None:
            field.inp = path.segment(ta, tb)
        past.k, past.plan = k, plan[k]
        if edges:
            field.edges = (ta, tb, k in edges, k + 1 in edges)
        new = scheme.step(field, ta, state, tb - ta)
        if guard:
            grown = newly_overflowed(new, field.dead)
            if grown is not None:  # the step again, without the overflow
                field.dead = grown
                past.stages[k], past.right[k] = [], None
                past.cache.clear()
                new = scheme.step(field, ta, state, tb - ta)
            if field.dead is not None:
                new = tuple(torch.where(field.dead, torch.nan, b) for b in new)
        if hermite:  # the Hermite data the scheme did not compute itself
            if past.right[k] is None:
                past.set_right(k, field.evaluate(ta, state))
            if k + 1 in jumps:  # f(t_{k+1}⁻): still this step's input segment
                past.set_left(k + 1, field.evaluate(tb, new))
        state = new
        past.push(state)
        if k + 1 in moving:
            # y(t⁺) = y(t⁻) + (f(t⁻) − f(t⁺)) (τ − τ): zero, but its τ-derivative is the jump of ∂y/∂τ where the
            # history's jump at t0 arrives (the variational equation's Dirac term)
            past.k = k + 1
            right = field.evaluate(tb, state)  # a read at the node's start: y0 at t0, not φ(t0⁻)
            shift = sum(learn - learn.detach() for learn in moving[k + 1])
            state = tuple(y + (left - r) * shift.to(y.dtype) for y, left, r in zip(state, past.left[k + 1], right))
            past.set_node(k + 1, state)
        past.release_before(tb)
        if k + 1 in record:
            outputs.append(state)
    return outputs, field.evaluations, past
