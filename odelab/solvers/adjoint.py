"""Memory-efficient gradients of a solve: ``adjoint="checkpoint"`` and ``adjoint="backsolve"``.

The default of :func:`odelab.solve` is direct backpropagation through the steps: exact, but autograd keeps
every stage of every step, so memory grows linearly with the number of steps. Two alternatives:

* ``"checkpoint"`` -- exact discretise-then-optimise gradients (the same arithmetic as direct backprop, so
  the gradients agree to round-off) with memory O(F log_F n) in the number of steps n. The forward pass runs
  the steps without a graph and keeps a thinned set of at most 2F + 1 carries, online (the step count of
  an adaptive solve is not known in advance: whenever the set grows past 2F + 1 every other carry is dropped
  and the stride doubles). The backward pass reverses each stretch between kept carries recursively: a
  stretch longer than ``LEAF`` steps is cut into F pieces whose start carries are recomputed without a
  graph, and the pieces are reversed last to first; a stretch of at most ``LEAF`` steps is recomputed with
  a graph and backpropagated. Extra work: about log_F(n / LEAF) forward passes (F = 8: ≈ 3 at 10⁴ steps).
  This is the k-ary form of recursive (treeverse-like) checkpointing (Griewank & Walther, Evaluating
  Derivatives, ch. 12; diffrax's RecursiveCheckpointAdjoint). Supported: fixed-step ODE methods (every
  scheme), the adaptive ones (dopri5, tsit5, bosh3: the carry is the controller state, the outputs the
  driver's dense output) and fixed-step delay systems (method of steps: the carry is the window of the past
  a later step can read, max τ / dt + 2 steps, so memory is O(F log_F n · τ/dt)). Not supported: adaptive
  methods on delay systems and learnable delays (ValueError; use direct backprop).
* ``"backsolve"`` -- the continuous adjoint (Chen et al. 2018; torchdiffeq's ``odeint_adjoint``), memory
  O(1) in the number of steps: the forward pass keeps no graph and no step records, the backward pass
  integrates the augmented system in reversed time s = −t

      dy/ds = −f(t, y),   da/ds = aᵀ ∂f/∂y,   da_θ/ds = aᵀ ∂f/∂θ,

  from y(t_N), a = ∂L/∂y(t_N), a_θ = 0, adding ∂L/∂y(t_i) to a at every output time t_i (the adaptive
  loop lands exactly on them), with the same method and tolerances (or dt). odelab's adaptive methods keep
  one step size per sample, so the quadrature of a_θ is per sample too: a_θ has shape (batch, #θ) and
  aᵀ ∂f/∂θ is a per-sample vector-Jacobian product (torch.func.vmap over torch.func.vjp of a
  functional_call of the system); the parameter gradient is Σ_b a_θ,b(t_0). The gradients are those of the
  exact flow up to the solver's tolerance (they are not the gradients of the discrete forward pass).
  Parameters: those of the system, an nn.Module (for a plain callable: those of the callable when it is an
  nn.Module). ODEs without inputs only; explicit RK fixed-step methods and the adaptive ones.

Both take the options of :func:`odelab.solve`; ``checkpoint`` also takes ``adjoint_params`` (extra tensors
a plain callable f or a callable input u(t) closes over, which then receive gradients).
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import torch
from torch import Tensor

from ..systems.base import FunctionSystem, System
from .adaptive import ADAPTIVE_METHODS, _Integrator, _Options
from .breakpoints import collect, nodes_near
from .field import Field, tensor_time
from .derivatives import first_order
from .grid import step_grid
from .history import delay_values
from .inputs import FunctionInput, Hold, InputPath, Linear
from .problem import prepare
from .schemes import ExplicitRK, Scheme, resolve_scheme
from .solution import Solution, SolveError, Status
from .tableau import ADAPTIVE_TABLEAUX, horner

ADJOINTS = ("backsolve", "checkpoint")
SECOND_DERIVATIVE = ("a second derivative through odelab.solve(..., adjoint={adjoint!r}), whose backward is "
                     "first-order only: solve with adjoint=None (backpropagation through the steps, differentiable to "
                     "any order) to differentiate its gradients")
FANOUT = 8  # pieces per level of the recursive checkpointing
LEAF = 8  # steps reversed with a graph at once


def solve_with_adjoint(system: System | Callable, y0, t, *, adjoint: str, method: str | Scheme = "dopri5",
                       u=None, u_times=None, interpolation: str = "hold", dt: float | None = None, history=None,
                       tstops=None, jump_times=None, throw: bool = True, adjoint_params: Sequence[Tensor] = (),
                       **options) -> Solution:
    """``odelab.solve(system, y0, t, ..., adjoint=...)`` with memory-efficient gradients (module docstring).

    Same arguments, values and :class:`Solution` as :func:`odelab.solve`. ``adjoint``: "checkpoint" (exact
    discrete gradients, O(log n) memory; ODEs, fixed-step and adaptive) or "backsolve" (continuous adjoint,
    O(1) memory; ODEs without inputs, explicit RK or adaptive methods). A delay system's ``history`` (a tensor,
    or a callable whose tensors are in ``adjoint_params``, the tensors a plain callable f, a callable input or a
    callable history closes over) also receives gradients under "checkpoint"; a callable history over tensors it
    does not name there is refused (ValueError: the recomputing backward would give them none)."""
    if adjoint not in ADJOINTS:
        raise ValueError(f"adjoint: expected one of {list(ADJOINTS)}, got {adjoint!r}")
    for name in ("checkpoint_segments", "compile"):
        if options.get(name):
            raise ValueError(f"{name}: not supported with adjoint={adjoint!r} (it manages memory itself)")
        options.pop(name, None)
    extra = tuple(adjoint_params)
    if not all(isinstance(p, Tensor) for p in extra):
        raise TypeError("adjoint_params: expected a sequence of tensors")

    # the boundary checks and the time reversal of odelab.solve
    problem = prepare(system, y0, t, u, u_times, interpolation, tstops, jump_times)
    system, state, t_tensor, times, path = problem.system, problem.state, problem.t_tensor, problem.times, problem.path
    stops, jumps, backwards = problem.stops, problem.jumps, problem.backwards
    if system.is_delay and adjoint == "backsolve":
        raise ValueError(f"adjoint='backsolve': delay systems ({type(system).__name__}) are not supported (the "
                         "continuous adjoint of a DDE is an advanced equation); use adjoint='checkpoint'")
    if history is not None and not system.is_delay:
        raise ValueError(f"history: {type(system).__name__} declares no delays")

    adaptive = isinstance(method, str) and method in ADAPTIVE_METHODS
    if adaptive:
        if dt is not None:
            options.setdefault("first_step", dt)
        tableau = ADAPTIVE_TABLEAUX[method]
        unknown = sorted(set(options) - set(_OPTION_NAMES))
        if unknown:
            raise TypeError(f"solve: unexpected options {unknown} for adaptive method {method!r}")
        dtypes = {x.dtype for x in state}
        if len(dtypes) != 1 or not next(iter(dtypes)).is_floating_point:
            raise TypeError(f"y0: adaptive solvers need floating-point blocks of one dtype, got {sorted(map(str, dtypes))}")
        opts = _Options(tableau, **options)
    else:
        scheme = resolve_scheme(method)
        if options:
            raise TypeError(f"solve: unexpected options {sorted(options)} for fixed-step method {scheme.name!r}")
        if dt is None:
            raise ValueError(f"dt: the fixed-step method {scheme.name!r} needs a step size dt")
        if isinstance(dt, bool) or not isinstance(dt, (int, float)) or not math.isfinite(dt) or dt <= 0:
            raise ValueError(f"dt: expected a positive finite number, got {dt!r}")
        scheme.check(system)

    unseen = _unseen_leaves(system, state, path, times[0], extra, adaptive)
    if unseen:
        shapes = ", ".join(str(tuple(x.shape)) for x in unseen[:4])
        remedy = ("name them in adjoint_params=[...]" if adjoint == "checkpoint" else
                  "make them parameters of the system (an nn.Module)")
        raise ValueError(f"adjoint_params: the vector field (or the callable input) depends on tensors that require "
                         f"grad and that adjoint={adjoint!r} does not see (shapes {shapes}): they would get no "
                         f"gradient; {remedy}, or solve with adjoint=None")
    if adjoint == "backsolve":
        if path is not None:
            raise ValueError("u: adjoint='backsolve' supports systems without inputs; use adjoint='checkpoint' "
                             "(exact gradients, also with respect to the input)")
        if stops or jumps:
            raise ValueError("tstops, jump_times: not supported with adjoint='backsolve'; use adjoint='checkpoint'")
        if extra:
            raise ValueError("adjoint_params: adjoint='backsolve' differentiates the parameters of the system "
                             "(an nn.Module, or a callable nn.Module); wrap closed-over tensors in an nn.Module")
        if not adaptive and not isinstance(scheme, ExplicitRK):
            raise ValueError(f"method: adjoint='backsolve' needs an explicit Runge--Kutta or adaptive method, got "
                             f"{scheme.name!r}; use adjoint='checkpoint'")
        solution = _backsolve(system, state, t_tensor, times, tableau if adaptive else scheme, adaptive,
                              opts if adaptive else float(dt))
    else:
        if system.is_delay:
            if adaptive:
                raise ValueError(f"adjoint='checkpoint': delay systems take fixed-step methods (got {method!r}); "
                                 "use e.g. method='rk4' with dt, or the default direct backprop")
            engine = _DelayEngine(system, scheme, state, times, path, float(dt), history, stops, jumps)
            extra += _history_tensors(system, state, history, times[0], extra)
        elif adaptive:
            engine = _AdaptiveEngine(tableau, system, state, times, path, opts, stops, jumps)
        else:
            engine = _FixedEngine(system, scheme, state, times, path, float(dt), stops, jumps)
        solution = _checkpointed(engine, system, state, t_tensor, path, extra)
    if backwards and "t_final" in solution.stats:
        solution.stats["t_final"] = -solution.stats["t_final"]
    if throw and not bool(solution.success.all()):
        raise SolveError("solve failed: " + solution.failure_summary(), solution)
    return solution


_OPTION_NAMES = ("rtol", "atol", "max_steps", "first_step", "dt_min", "dt_max", "safety", "factor_min",
                 "factor_max", "pi_beta")


def _solution(system: System, t_tensor: Tensor, ys: Tensor, sizes: list[int], stats: dict,
              status: Tensor | None = None) -> Solution:
    """A Solution from the flat outputs (batch, T, Σ sizes); non-finite samples get NONFINITE."""
    blocks = (ys,) if len(sizes) == 1 else tuple(ys.split(sizes, -1))
    batch = ys.shape[0]
    if status is None:  # fixed steps: as solution.finish (the adaptive loop sets its own codes)
        status = torch.full((batch,), int(Status.SUCCESS), dtype=torch.int64, device=ys.device)
        finite = torch.isfinite(ys.detach()).flatten(1).all(1)
        status = torch.where(finite, status, torch.full_like(status, int(Status.NONFINITE)))
    return Solution(ts=t_tensor, ys=blocks, blocks=system.blocks, stats=stats, status=status)


def _per_sample(value, batch: int, device) -> Tensor:
    return value if isinstance(value, Tensor) else torch.full((batch,), int(value), dtype=torch.int64, device=device)


def _rebind(path: InputPath | None, encoded: Tensor | None) -> InputPath | None:
    """The same sampled input path on another tensor of encoded samples (a detached leaf in the backward)."""
    if encoded is None:
        return path
    return type(path)(encoded, path.times)


# ================================================================================================
# checkpoint: exact discrete gradients, recursive checkpointing over the steps
# ================================================================================================
class _Engine:
    """What the recursive checkpointing asks of a step sequence. A carry is what one step maps to the next;
    ``keep`` turns it into a value that later steps do not mutate (identity for the ODE engines, whose
    carries are tuples of tensors), ``resume`` back into a carry; ``diff`` lists the tensors of a kept carry
    that gradients flow through and ``with_diff`` replaces them."""

    def keep(self, carry):
        return carry

    def resume(self, kept):
        return kept

    def rebind_state(self, state) -> None:
        """Called in the backward pass with the leaves standing for y0."""


class _FixedEngine(_Engine):
    """The steps of the fixed-step ODE driver (fixed.solve_fixed), one at a time. Carry = the state tuple."""

    adaptive = False

    def __init__(self, system: System, scheme: Scheme, state, times: list[float], path: InputPath | None, dt: float,
                 tstops=(), jump_times=()):
        self.system, self.scheme, self.path, self.times = system, scheme, path, times
        tol = 1e-7 * dt
        breakpoints = collect(times[0], times[-1], path, tstops, jump_times, tol=tol)
        self.grid, out_index = step_grid(times, dt, breakpoints.stops)
        self.edges = nodes_near(self.grid, jump_times, tol)
        self.output_at = {k: j for j, k in enumerate(out_index) if k > 0}
        self.sizes = [x.shape[1] for x in state]
        self.steps = len(self.grid) - 1
        self.field = Field(system)
        self.field.inp_tensor_time = isinstance(path, FunctionInput)

    def init(self, state) -> tuple:
        return tuple(state)

    def diff(self, carry) -> list[Tensor]:
        return list(carry)

    def with_diff(self, carry, leaves) -> tuple:
        return tuple(leaves)

    def done(self, k: int, carry) -> bool:
        return k >= self.steps

    def step(self, k: int, carry):
        ta, tb = self.grid[k], self.grid[k + 1]
        if self.path is not None:
            self.field.inp = self.path.segment(ta, tb)
        if self.edges:
            self.field.edges = (ta, tb, k in self.edges, k + 1 in self.edges)
        new = self.scheme.step(self.field, ta, carry, tb - ta)
        j = self.output_at.get(k + 1)
        emits = () if j is None else ((None, j, new[0] if len(new) == 1 else torch.cat(new, -1)),)
        return new, emits

    def stats(self, carry, batch, device) -> tuple[dict, Tensor | None]:
        n = self.steps
        return ({"steps": _per_sample(n, batch, device), "accepted": _per_sample(n, batch, device),
                 "rejected": _per_sample(0, batch, device), "nfe": _per_sample(n * self.scheme.stages, batch, device)},
                None)


class _AdaptiveEngine(_Engine):
    """The loop of the adaptive driver (adaptive._Integrator, one segment), one attempted step of every sample
    at a time. Carry = (y, k1, t, h, prev, landing, steps, code, active, accepted); y and k1 carry gradients.
    Outputs are the driver's dense output: the continuous extension of the accepted step containing each
    output time."""

    adaptive = True

    def __init__(self, tableau, system: System, state, times: list[float], path: InputPath | None, opts: _Options,
                 tstops=(), jump_times=()):
        self.tableau, self.system, self.opts, self.times = tableau, system, opts, times
        self.sizes = [x.shape[1] for x in state]
        y0 = state[0] if len(state) == 1 else torch.cat(state, -1)
        self.integrator = _Integrator(tableau, system, y0.detach(), self.sizes, times, path, None, opts, tstops,
                                      jump_times)
        self.stop = torch.tensor(times[-1], dtype=torch.float64, device=y0.device)
        self.out_times = torch.tensor(times[1:], dtype=torch.float64, device=y0.device)
        self.hold = self.integrator.hold_times is not None
        self.m = self.integrator.dense.shape[1]

    @property
    def path(self):
        return self.integrator.path

    @path.setter
    def path(self, value):
        self.integrator.path = value

    def init(self, state) -> tuple:
        y0 = state[0] if len(state) == 1 else torch.cat(state, -1)
        c = self.integrator.start(y0)
        active = (c.code == int(Status.SUCCESS)) & (c.t < self.stop)
        return (c.y, c.k1, c.t, c.h, c.prev, c.landing, c.steps, c.code, active, torch.zeros_like(c.steps),
                c.restarts)

    def diff(self, carry) -> list[Tensor]:
        return [carry[0], carry[1]]

    def with_diff(self, carry, leaves) -> tuple:
        return (leaves[0], leaves[1], *carry[2:])

    def done(self, k: int, carry) -> bool:
        return not bool(carry[8].any())

    def step(self, k: int, carry):
        y, k1, t, h, prev, landing, steps, code, active, accepted, restarts = carry
        integ = self.integrator
        restart = False
        if integ.restarts:  # samples sitting on a jump of f: their first stage is re-evaluated (as segment())
            restart = integ.on_jump(active, landing, t)
            restarts = restarts + restart
            restart = restart if bool(restart.any()) else False
        args = (y, k1, t, h, prev, landing, steps, code, active, integ.landing, self.stop, integ.t_end_tensor,
                k + 1 >= self.opts.max_steps, *((restart,) if integ.restarts else ()))
        outcome = integ.attempt(*args)
        if torch.is_grad_enabled():  # the recomputation under the backward: no 0 · inf from overflowed stages
            broken = integ.overflowed(outcome[-1], active)
            if bool(broken.any()):
                outcome = integ.replay(integ.attempt, broken, outcome, *args)
        y, k1, t_after, h, prev, landing, steps, code, active, accept, record = outcome
        new = (y, k1, t_after, h, prev, landing, steps, code, active, accepted + accept, restarts)
        # outputs in (t, t_after] of the samples that accepted: the driver's "first record with end ≥ τ"
        first = torch.searchsorted(self.out_times, t, right=True)
        count = torch.searchsorted(self.out_times, t_after, right=True) - first
        most = int(count.max()) if count.numel() else 0
        emits = []
        if most:
            h_step, y_start, coef = record
            coef = coef.reshape(y_start.shape[0], y_start.shape[1], self.m)
            for i in range(most):
                rows = torch.nonzero(count > i).squeeze(1)
                cols = first.index_select(0, rows) + i
                tau = self.out_times.index_select(0, cols)
                theta = ((tau - t.index_select(0, rows)) / h_step.index_select(0, rows)).to(y.dtype)
                theta = theta.unsqueeze(1).expand(-1, y.shape[1]).contiguous()
                value = horner(y_start.index_select(0, rows), coef.index_select(0, rows).unbind(-1), theta)
                emits.append((rows, cols + 1, value))
        return new, emits

    def stats(self, carry, batch, device) -> tuple[dict, Tensor]:
        steps, code, accepted, t, restarts = carry[6], carry[7], carry[9], carry[2], carry[10]
        nfe = 1 + (self.opts.first_step is None) + steps * (self.tableau.stages - 1) + restarts
        return ({"steps": steps, "accepted": accepted, "rejected": steps - accepted, "nfe": nfe, "t_final": t}, code)


class _DelayEngine(_Engine):
    """The steps of the fixed-step DDE driver (fixed_delay.solve_fixed_delay), one at a time. The live carry is
    the driver's past (fixed_delay._Past: nodes, stage states and derivatives back to max τ + 2 steps) with its
    field; ``keep`` snapshots the part not yet released (the window a later step can read), ``resume`` rebuilds
    a past from a snapshot, so a kept carry costs O(max τ / dt) tensors. The history φ is rebuilt from the
    leaves of y0 in the backward pass (a constant history reads y0)."""

    adaptive = False

    def __init__(self, system: System, scheme: Scheme, state, times: list[float], path: InputPath | None, dt: float,
                 history, tstops=(), jump_times=()):
        from . import fixed_delay as fd

        self.fd, self.system, self.scheme, self.path, self.times, self.history = fd, system, scheme, path, times, history
        self.sizes = [x.shape[1] for x in state]
        self.delays = fd.delay_values(system)
        taus = [value for value, _ in self.delays]
        if min(taus) <= 0:
            raise ValueError(f"{type(system).__name__}.delays: solve needs positive delays, got {taus}")
        if dt > min(taus) * (1 + 1e-9):
            raise ValueError(f"dt: fixed-step DDE stepping needs dt <= the smallest delay {min(taus)} (a stage's "
                             f"delayed time would fall inside the step being taken), got {dt}")
        if any(learn is not None for _, learn in self.delays):
            raise ValueError("adjoint='checkpoint': learnable delays are not supported yet; use direct backprop")
        t0, t1 = times[0], times[-1]
        self.phi = fd.history_function(system, state, history, t0)
        self.tol = tol = 1e-7 * dt
        breakpoints = collect(t0, t1, path, tstops, jump_times, taus, max(scheme.order, 1), tol,
                              getattr(history, "kinks", ()))
        self.grid, out_index = step_grid(times, dt, breakpoints.stops)
        grid = self.grid
        self.jumps = {k for k in nodes_near(grid, breakpoints.jumps, tol) if 0 < k < len(grid) - 1}
        self.edges = nodes_near(grid, jump_times, tol)
        self.plan = fd._plan(grid, self.delays, scheme, tol)
        self.hermite = any(j is None for row in self.plan for j in row)
        self.output_at = {k: j for j, k in enumerate(out_index) if k > 0}
        self.steps = len(grid) - 1

    def rebind_state(self, state) -> None:
        """φ from the y0 leaves of the backward pass (a constant history is y0 itself)."""
        self.phi = self.fd.history_function(self.system, tuple(state), self.history, self.times[0])

    def _live(self, past):
        field = self.fd._DelayField(self.system, past)
        field.inp_tensor_time = isinstance(self.path, FunctionInput)
        return [past, field]

    def init(self, state) -> list:
        past = self.fd._Past(self.grid, self.phi, self.delays, self.jumps, self.tol)
        past.push(tuple(state))
        return self._live(past)

    def keep(self, carry) -> dict:
        past = carry[0]
        n, first = len(past.states), past.released
        return dict(n=n, released=first, complete=past.complete,
                    states={i: past.states[i] for i in range(first, n) if past.states[i] is not None},
                    stages={i: list(past.stages[i]) for i in range(first, n) if past.stages[i] is not None},
                    right={i: past.right[i] for i in range(first, n) if past.right[i] is not None},
                    left=dict(past.left), left_states=dict(past.left_states))

    def resume(self, snap: dict) -> list:
        past = self.fd._Past(self.grid, self.phi, self.delays, self.jumps, self.tol)
        n = snap["n"]
        past.states, past.stages, past.right = [None] * n, [None] * n, [None] * n
        for i, v in snap["states"].items():
            past.states[i] = v
        for i, v in snap["stages"].items():
            past.stages[i] = list(v)
        for i, v in snap["right"].items():
            past.right[i] = v
        past.left, past.left_states = dict(snap["left"]), dict(snap["left_states"])
        past.complete, past.released = snap["complete"], snap["released"]
        return self._live(past)

    @staticmethod
    def _tuples(snap: dict):
        """Every state tuple of a snapshot, in a deterministic order."""
        for i in sorted(snap["states"]):
            yield snap["states"][i]
        for i in sorted(snap["stages"]):
            yield from snap["stages"][i]
        for key in ("right", "left", "left_states"):
            for i in sorted(snap[key]):
                yield snap[key][i]

    def diff(self, snap: dict) -> list[Tensor]:
        seen, out = set(), []
        for tup in self._tuples(snap):
            for x in tup:
                if id(x) not in seen:
                    seen.add(id(x))
                    out.append(x)
        return out

    def with_diff(self, snap: dict, leaves) -> dict:
        swap = {id(old): new for old, new in zip(self.diff(snap), leaves)}
        tup = lambda v: tuple(swap.get(id(x), x) for x in v)
        return dict(n=snap["n"], released=snap["released"], complete=snap["complete"],
                    states={i: tup(v) for i, v in snap["states"].items()},
                    stages={i: [tup(s) for s in v] for i, v in snap["stages"].items()},
                    right={i: tup(v) for i, v in snap["right"].items()},
                    left={i: tup(v) for i, v in snap["left"].items()},
                    left_states={i: tup(v) for i, v in snap["left_states"].items()})

    def done(self, k: int, carry) -> bool:
        return k >= self.steps

    def step(self, k: int, carry):
        past, field = carry
        grid = self.grid
        state = past.states[k]
        ta, tb = grid[k], grid[k + 1]
        if self.path is not None:
            field.inp = self.path.segment(ta, tb)
        past.k, past.plan = k, self.plan[k]
        if self.edges:
            field.edges = (ta, tb, k in self.edges, k + 1 in self.edges)
        new = self.scheme.step(field, ta, state, tb - ta)
        if self.hermite:  # the Hermite data the scheme did not compute itself
            if past.right[k] is None:
                past.set_right(k, field.evaluate(ta, state))
            if k + 1 in self.jumps:
                past.set_left(k + 1, field.evaluate(tb, new))
        past.push(new)
        past.release_before(tb)
        j = self.output_at.get(k + 1)
        emits = () if j is None else ((None, j, new[0] if len(new) == 1 else torch.cat(new, -1)),)
        return carry, emits

    def stats(self, carry, batch, device) -> tuple[dict, Tensor | None]:
        n, nfe = self.steps, carry[1].evaluations
        return ({"steps": _per_sample(n, batch, device), "accepted": _per_sample(n, batch, device),
                 "rejected": _per_sample(0, batch, device), "nfe": _per_sample(nfe, batch, device)}, None)


class _Checkpointed(torch.autograd.Function):
    """Outputs (batch, T, Σ sizes) of ``engine`` from the leaves (y0 blocks, encoded input or None, params);
    the backward pass is the recursive checkpointing of the module docstring."""

    @staticmethod
    def forward(ctx, engine, n_state: int, has_input: bool, *leaves):
        state = leaves[:n_state]
        carry = engine.init(state)
        y0 = state[0] if n_state == 1 else torch.cat(state, -1)
        out = y0.new_full((y0.shape[0], len(engine.times), y0.shape[1]), math.nan)
        out[:, 0] = y0
        kept, stride, k = [(0, engine.keep(carry))], 1, 0
        while not engine.done(k, carry):
            carry, emits = engine.step(k, carry)
            k += 1
            for rows, cols, value in emits:
                if rows is None:
                    out[:, cols] = value
                else:
                    out[rows, cols] = value
            if k % stride == 0:
                kept.append((k, engine.keep(carry)))
                if len(kept) > 2 * FANOUT + 1:
                    stride *= 2
                    kept = [entry for entry in kept if entry[0] % stride == 0]
        engine.final = carry
        ctx.engine, ctx.kept, ctx.n, ctx.n_state, ctx.has_input = engine, kept, k, n_state, has_input
        ctx.save_for_backward(*leaves)
        return out

    @staticmethod
    @first_order(SECOND_DERIVATIVE.format(adjoint="checkpoint"))
    def backward(ctx, grad_out):
        engine, n_state, has_input = ctx.engine, ctx.n_state, ctx.has_input
        leaves = ctx.saved_tensors
        state, encoded = leaves[:n_state], leaves[n_state] if has_input else None
        params = [p for p in leaves[n_state + has_input:]]
        with torch.enable_grad():
            state_leaves = [x.detach().requires_grad_() for x in state]
            input_leaf = None if encoded is None else encoded.detach().requires_grad_()
            if input_leaf is not None:
                engine.path = _rebind(engine.path, input_leaf)
            engine.rebind_state(state_leaves)
            # y0 is also a target inside the steps: a delay system's history reads it
            targets = ([p for p in params if p.requires_grad] + ([input_leaf] if input_leaf is not None else [])
                       + state_leaves)
            totals = [None] * len(targets)

            def reverse_leaf(a: int, carry, b: int, g_end: list[Tensor | None]) -> list[Tensor | None]:
                """Backpropagate steps a..b−1 with a graph; returns the gradient of the carry's diff part at a."""
                diff = [x.detach().requires_grad_() if x.is_floating_point() else x for x in engine.diff(carry)]
                carry = engine.resume(engine.with_diff(carry, diff))
                terms = []
                for k in range(a, b):
                    carry, emits = engine.step(k, carry)
                    for rows, cols, value in emits:
                        g = grad_out[:, cols] if rows is None else grad_out[rows, cols]
                        terms.append((g * value).sum())
                for g, x in zip(g_end or (), engine.diff(engine.keep(carry))):
                    if g is not None and x.requires_grad:
                        terms.append((g * x).sum())
                inputs = [x for x in diff if x.requires_grad] + targets
                if not terms or not inputs:
                    return [None] * len(diff)
                loss = torch.stack(terms).sum()
                if not loss.requires_grad:
                    return [None] * len(diff)
                grads = torch.autograd.grad(loss, inputs, allow_unused=True)
                head = iter(grads[:len(inputs) - len(targets)])
                for i, g in enumerate(grads[len(inputs) - len(targets):]):
                    if g is not None:
                        totals[i] = g if totals[i] is None else totals[i] + g
                return [next(head) if x.requires_grad else None for x in diff]

            def reverse(a: int, carry, b: int, g_end):
                if b - a <= LEAF:
                    return reverse_leaf(a, carry, b, g_end)
                bounds = [a + (b - a) * i // FANOUT for i in range(FANOUT + 1)]
                starts, c = [carry], engine.resume(carry)
                with torch.no_grad():
                    for i in range(1, FANOUT):
                        for k in range(bounds[i - 1], bounds[i]):
                            c, _ = engine.step(k, c)
                        starts.append(engine.keep(c))
                for i in reversed(range(FANOUT)):
                    g_end = reverse(bounds[i], starts[i], bounds[i + 1], g_end)
                    starts[i] = None
                return g_end

            kept = ctx.kept
            g = None
            ends = [k for k, _ in kept[1:]] + [ctx.n]
            for (a, carry), b in reversed(list(zip(kept, ends))):
                if b > a:
                    g = reverse(a, carry, b, g)
            # through the initial carry (the adaptive start evaluates f(t0, y0)) and the output at t0
            carry0 = engine.keep(engine.init(state_leaves))
            y0 = state_leaves[0] if n_state == 1 else torch.cat(state_leaves, -1)
            terms = [(grad_out[:, 0] * y0).sum()]
            terms += [(gi * x).sum() for gi, x in zip(g or (), engine.diff(carry0)) if gi is not None and x.requires_grad]
            loss = torch.stack(terms).sum()
            grads = torch.autograd.grad(loss, targets, allow_unused=True)
            for i, gi in enumerate(grads):
                if gi is not None:
                    totals[i] = gi if totals[i] is None else totals[i] + gi
            state_grads = totals[len(totals) - n_state:]
            totals = totals[:len(totals) - n_state]
        ctx.engine = ctx.kept = None
        param_grads, it = [], iter(totals)
        for p in params:
            param_grads.append(next(it) if p.requires_grad else None)
        input_grad = next(it) if has_input else None
        return (None, None, None, *state_grads, *([input_grad] if has_input else []), *param_grads)


def _history_tensors(system: System, state, history, t0: float, extra: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    """The tensors a delay system's history brings into the gradient, as extra leaves of the checkpointed solve: a
    tensor history (or a tuple or dict of them) itself, where it requires grad. A callable history's value must
    depend only on tensors the solve sees (the system's parameters and ``adjoint_params``): the backward recomputes
    the steps and differentiates those leaves, so any other tensor would get no gradient, silently. Its value at
    t0 − max τ is probed and its graph's leaves checked (ValueError naming ``history``)."""
    if history is None or isinstance(history, (int, float)):
        return ()
    if isinstance(history, Tensor) or isinstance(history, (tuple, list, dict)):
        values = history.values() if isinstance(history, dict) else history if isinstance(history, (tuple, list)) \
            else (history,)
        return tuple(x for x in values if isinstance(x, Tensor) and x.requires_grad)
    like = state[0]
    reach = max(value for value, _ in delay_values(system))
    value = history(torch.full((), t0 - reach, dtype=like.dtype, device=like.device))
    values = value.values() if isinstance(value, dict) else value if isinstance(value, (tuple, list)) else (value,)
    seen_ids = {id(p) for p in (*system.parameters(), *extra)}
    unseen = [x for x in _graph_leaves([x for x in values if isinstance(x, Tensor)]) if id(x) not in seen_ids]
    if unseen:
        shapes = ", ".join(str(tuple(x.shape)) for x in unseen[:4])
        raise ValueError(f"history: the callable's values depend on tensors that require grad and that "
                         f"adjoint='checkpoint' does not see (shapes {shapes}); name them in adjoint_params=[...] "
                         f"(the backward recomputes the history from them), or solve with adjoint=None")
    return ()


def _unseen_leaves(system: System, state, path: InputPath | None, t0: float, extra: tuple[Tensor, ...],
                   adaptive: bool) -> list[Tensor]:
    """The tensors requiring grad that one evaluation of the field at (t0, y0) -- and of a callable input --
    depends on beyond the system's parameters and ``extra``: the adjoints differentiate only those (and y0 and a
    sampled input), so any other would get no gradient, silently (torchdiffeq's odeint_adjoint refuses the same
    case). The probe's time is as the solve passes it (a (batch, 1) tensor under the adaptive methods, 0-dim under
    the fixed-step ones, a float to a System); a probe that fails leaves the check to the solve itself."""
    blocks = tuple(x.detach() for x in state)
    like = blocks[0]
    t_tensor = torch.full((like.shape[0], 1) if adaptive else (), t0, dtype=like.dtype, device=like.device)
    try:
        with torch.enable_grad():
            inp = None
            if isinstance(path, FunctionInput):
                inp = path.at(t_tensor)
            elif path is not None:
                inp = path.encoded[:, 0].detach()
            delayed = (blocks,) * len(system.delays) if system.is_delay else ()
            out = system.derivative(t_tensor if tensor_time(system) else t0, blocks, inp, *delayed)
    except Exception:
        return []
    values = [x for x in (out if isinstance(out, (tuple, list)) else (out,)) if isinstance(x, Tensor)]
    if isinstance(inp, Tensor):
        values.append(inp)
    seen = {id(p) for p in (*system.parameters(), *extra)}
    return [x for x in _graph_leaves(values) if id(x) not in seen]


def _graph_leaves(tensors: list[Tensor]) -> list[Tensor]:
    """The leaf tensors requiring grad that ``tensors`` were computed from (their autograd graph's
    AccumulateGrad nodes, and those of them that are leaves themselves)."""
    out = [x for x in tensors if x.requires_grad and x.grad_fn is None]
    stack, seen = [x.grad_fn for x in tensors if x.grad_fn is not None], set()
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        variable = getattr(node, "variable", None)
        if variable is not None:
            out.append(variable)
        stack.extend(next_node for next_node, _ in node.next_functions)
    return out


def _checkpointed(engine, system: System, state, t_tensor: Tensor, path: InputPath | None,
                  extra: tuple[Tensor, ...]) -> Solution:
    params = [p for p in system.parameters() if p.requires_grad]
    seen = {id(p) for p in params}
    params += [p for p in extra if id(p) not in seen]
    encoded = path.encoded if isinstance(path, (Hold, Linear)) else None
    has_input = encoded is not None
    leaves = (*state, *([encoded] if has_input else []), *params)
    if torch.is_grad_enabled() and any(x.requires_grad for x in leaves):
        ys = _Checkpointed.apply(engine, len(state), has_input, *leaves)
    else:
        with torch.no_grad():
            ys = _Checkpointed.forward(_NoContext(), engine, len(state), has_input, *leaves)
    batch, device = state[0].shape[0], state[0].device
    stats, status = engine.stats(engine.final, batch, device)
    return _solution(system, t_tensor, ys, engine.sizes, stats, status)


class _NoContext:
    """Stands in for the autograd context when no gradient is needed."""

    def save_for_backward(self, *tensors):
        pass


# ================================================================================================
# backsolve: the continuous adjoint
# ================================================================================================
class _AdjointField:
    """The augmented field in reversed time s = −t on z = (y, a) (batch, 2 dim): dy/ds = −f(t, y),
    da/ds = aᵀ ∂f/∂y (one batched vector-Jacobian product: the rows of f are independent samples). Every call
    records its stage (s, z), so that the parameter adjoint can be integrated afterwards with the step's own
    quadrature (``quadrature``)."""

    def __init__(self, system: System, sizes: list[int], params: list[Tensor]):
        self.system, self.sizes, self.params = system, sizes, params
        self.dim = sum(sizes)
        self.stages: list[tuple] = []
        self.tensor_time = tensor_time(system)

    def time(self, s, like: Tensor):
        """t = −s as the system sees it in the forward solve: (batch, 1) under the adaptive methods, a float
        (a 0-dim tensor for plain callables) under the fixed-step ones."""
        if isinstance(s, Tensor):
            return -s
        return torch.full((), -s, dtype=like.dtype, device=like.device) if self.tensor_time else -s


    def f(self, t, y: Tensor) -> Tensor:
        blocks = (y,) if len(self.sizes) == 1 else y.split(self.sizes, -1)
        out = self.system.derivative(t, blocks, None)
        return out[0] if len(out) == 1 else torch.cat(out, -1)

    def __call__(self, s, z: Tensor) -> Tensor:
        dim = self.dim
        y, a = z[:, :dim], z[:, dim:]
        with torch.enable_grad():
            y = y.detach().requires_grad_()
            f = self.f(self.time(s, z), y)
            if f.requires_grad:
                (gy,) = torch.autograd.grad(f, y, a, retain_graph=bool(self.params), allow_unused=True)
                gy = torch.zeros_like(a) if gy is None else gy
            else:
                gy = torch.zeros_like(a)
        # the stage, with f's graph kept for the parameter quadrature of this step
        self.stages.append((s, z, f if self.params and f.requires_grad else None))
        return torch.cat([-f.detach(), gy], 1)

    def quadrature(self, stages: list[tuple], weights: list[Tensor | float]) -> list[Tensor] | None:
        """Σ_i Σ_b w_ib a_ibᵀ ∂f_b/∂θ (y_ib) over the stages: one step's increment of ∫ aᵀ ∂f/∂θ dt, summed
        over the batch (``weights``: per stage, a float or a (batch,) tensor: b_i h_b, 0 for rejected samples).
        One backward pass through the stages' kept graphs (a stage without one is re-evaluated)."""
        if not self.params:
            return None
        dim, terms = self.dim, []
        with torch.enable_grad():
            for (s, z, f), w in zip(stages, weights):
                if isinstance(w, float) and w == 0.0:
                    continue
                if f is None:
                    f = self.f(self.time(s, z), z[:, :dim])
                a = z[:, dim:] * (w if isinstance(w, float) else w.to(z.dtype).unsqueeze(1))
                terms.append((f * a).sum())
            if not terms:
                return None
            loss = torch.stack(terms).sum()
            if not loss.requires_grad:
                return None
            grads = torch.autograd.grad(loss, self.params, allow_unused=True)
        return [torch.zeros_like(p) if g is None else g for p, g in zip(self.params, grads)]


def _march(integ: _Integrator, z0: Tensor, landing_times: list[float], jump=None, after=None):
    """The adaptive loop landing exactly on every time of ``landing_times`` (increasing, the last one the end),
    keeping no step records. ``jump(z, rows, index)`` updates the state of the samples that just landed on
    landing time ``index``; ``after(t, z, accept, h_step)`` is called after every attempted step with the
    step's start. Returns the states at the landing times (batch, J, dim) and the final carry."""
    device = z0.device
    points = torch.tensor(list(landing_times) + [math.inf], dtype=torch.float64, device=device)
    stop = points[-2]
    c = integ.start(z0)
    y, k1, t, h, prev, landing, steps, code = c.y, c.k1, c.t, c.h, c.prev, c.landing, c.steps, c.code
    out = z0.new_full((z0.shape[0], len(landing_times), z0.shape[1]), math.nan)
    accepted = torch.zeros_like(steps)
    active = (code == int(Status.SUCCESS)) & (t < stop)
    k = 0
    going = bool(active.any())
    while going:
        before, t_before, y_before = landing, t, y
        y, k1, t, h, prev, landing, steps, code, active, accept, record = integ.attempt(
            y, k1, t, h, prev, landing, steps, code, active, points, stop, stop, k + 1 >= integ.opts.max_steps)
        if after is not None:
            after(t_before, y_before, accept, record[0])
        accepted = accepted + accept
        k += 1
        moved = landing > before
        landed, going = torch.stack([moved.any(), active.any()]).tolist()
        if landed:
            rows = torch.nonzero(moved).squeeze(1)
            index = before.index_select(0, rows)
            if jump is not None:
                y = jump(y, rows, index)
                t_col = t.to(y.dtype).unsqueeze(1)
                k1 = torch.where(moved.unsqueeze(1), integ.field(t, t_col, y, None), k1)
            out[rows, index] = y.index_select(0, rows)
    return out, dict(steps=steps, accepted=accepted, code=code, t=t)


class _Backsolve(torch.autograd.Function):
    @staticmethod
    def forward(ctx, run, n_state: int, *leaves):
        ys = run.forward(leaves[:n_state])
        ctx.run = run
        ctx.save_for_backward(ys)
        return ys

    @staticmethod
    @first_order(SECOND_DERIVATIVE.format(adjoint="backsolve"))
    def backward(ctx, grad_ys):
        run, (ys,) = ctx.run, ctx.saved_tensors
        grad_state, grad_params = run.backward(ys, grad_ys)
        ctx.run = None
        return (None, None, *grad_state, *grad_params)


class _BacksolveRun:
    """Forward without a graph; backward by the augmented system (module docstring)."""

    def __init__(self, system: System, state, times: list[float], method, adaptive: bool, control):
        self.system, self.times, self.method, self.adaptive, self.control = system, times, method, adaptive, control
        self.sizes = [x.shape[1] for x in state]
        self.dim = sum(self.sizes)
        self.params = [p for p in system.parameters() if p.requires_grad]

    def forward(self, state):
        y0 = (state[0] if len(state) == 1 else torch.cat(state, -1)).detach()
        batch = y0.shape[0]
        if self.adaptive:
            integ = _Integrator(self.method, self.system, y0, self.sizes, self.times, None, None, self.control)
            out, info = _march(integ, y0, self.times[1:])
            ys = torch.cat([y0.unsqueeze(1), out], 1)
            info["nfe"] = 1 + (self.control.first_step is None) + info["steps"] * (self.method.stages - 1)
        else:  # the grid of fixed.solve_fixed; the backward pass steps it in reverse
            field = Field(self.system)
            states = (y0,) if len(self.sizes) == 1 else tuple(y0.split(self.sizes, -1))
            self.grid, self.out_index = step_grid(self.times, self.control)
            record, ys_list = set(self.out_index[1:]), [y0]
            for k, (ta, tb) in enumerate(zip(self.grid, self.grid[1:])):
                states = self.method.step(field, ta, states, tb - ta)
                if k + 1 in record:
                    ys_list.append(states[0] if len(states) == 1 else torch.cat(states, -1))
            ys = torch.stack(ys_list, 1)
            steps = len(self.grid) - 1
            n = lambda v: torch.full((batch,), int(v), dtype=torch.int64, device=y0.device)
            info = dict(steps=n(steps), accepted=n(steps), code=None, nfe=n(steps * self.method.stages))
        self.info = info
        return ys

    def backward(self, ys: Tensor, grad_ys: Tensor):
        dim, T = self.dim, len(self.times)
        field = _AdjointField(self.system, self.sizes, self.params)
        z = torch.cat([ys[:, -1], grad_ys[:, -1]], 1)
        totals = [torch.zeros_like(p) for p in self.params]

        def add(grads):
            if grads is not None:
                for total, g in zip(totals, grads):
                    total.add_(g)

        with torch.no_grad():
            if self.adaptive:
                b = self.method.b
                aug = FunctionSystem(field, z.shape[1], False)
                integ = _Integrator(self.method, aug, z, [z.shape[1]], [-self.times[-1], -self.times[0]], None,
                                    None, self.control)

                def jump(zz, rows, index):
                    add_a = grad_ys.index_select(0, rows).gather(
                        1, (T - 2 - index).view(-1, 1, 1).expand(-1, 1, dim)).squeeze(1)
                    zz = zz.clone()
                    zz[rows, dim:] += add_a
                    return zz

                def after(s, zz, accept, h_step):
                    stages = [(s.to(zz.dtype).unsqueeze(1), zz, None)] + field.stages[-(len(b) - 1):]
                    field.stages = []
                    weight = torch.where(accept, h_step, torch.zeros_like(h_step))
                    add(field.quadrature(stages, [bi * weight for bi in b]))

                field.stages = []
                landing = [-s for s in reversed(self.times[:-1])]  # −t_{T−2}, …, −t_0
                out, info = _march(integ, z, landing, jump, after)
                if not bool((info["code"] == int(Status.SUCCESS)).all()):
                    raise RuntimeError("adjoint='backsolve': the backward solve of the adjoint system failed "
                                       f"(status per sample {info['code'].tolist()})")
                z = out[:, -1]
            else:
                b = self.method.tableau.b
                aug_field = lambda s, zz: (field(s, zz[0]),)
                output_at = {k: j for j, k in enumerate(self.out_index)}
                grid = self.grid
                for k in range(len(grid) - 1, 0, -1):  # the step grid[k−1] → grid[k], reversed
                    h = grid[k] - grid[k - 1]
                    field.stages = []
                    (z,) = self.method.step(aug_field, -grid[k], (z,), h)
                    add(field.quadrature(field.stages, [bi * h for bi in b]))
                    j = output_at.get(k - 1)
                    if j is not None:
                        z = torch.cat([z[:, :dim], z[:, dim:] + grad_ys[:, j]], 1)
        a = z[:, dim:]
        grad_state = (a,) if len(self.sizes) == 1 else tuple(a.split(self.sizes, -1))
        return grad_state, totals


def _backsolve(system: System, state, t_tensor: Tensor, times: list[float], method, adaptive: bool,
               control) -> Solution:
    run = _BacksolveRun(system, state, times, method, adaptive, control)
    leaves = (*state, *run.params)
    if torch.is_grad_enabled() and any(x.requires_grad for x in leaves):
        ys = _Backsolve.apply(run, len(state), *leaves)
    else:
        with torch.no_grad():
            ys = run.forward(state)
    info = run.info
    stats = {"steps": info["steps"], "accepted": info["accepted"], "rejected": info["steps"] - info["accepted"],
             "nfe": info["nfe"]}
    if "t" in info:
        stats["t_final"] = info["t"]
    return _solution(system, t_tensor, ys, run.sizes, stats, info["code"])
