"""``odelab.solve``: the one entry point for integrating a system (or a plain callable) over output times."""
from __future__ import annotations

import math
from typing import Callable, Sequence

import torch
from torch import Tensor

from ..systems.base import System
from .adaptive import ADAPTIVE_METHODS
from .adjoint import ADJOINTS, solve_with_adjoint
from .cuda_graph import replayed
from .derivatives import forward_mode_or_transform
from .device import on_device_of
from .events import check_event, check_points, locate
from .fixed import solve_fixed
from .fixed_delay import solve_fixed_delay
from .fused_step import records_state_gradient
from .grid import as_times
from .history import SolutionHistory, delay_values
from .inputs import InputPath
from .problem import prepare
from .resets import Resets
from .rosenbrock import ROSENBROCK_METHODS
from .schemes import FIXED_SCHEMES, Scheme, resolve_scheme
from .solution import Solution, SolveError, Status


# adaptive methods for stiff ODEs, with their own loop (the explicit pairs' share ADAPTIVE_METHODS' one)
STIFF_METHODS = ROSENBROCK_METHODS


def available_methods() -> list[str]:
    return sorted(FIXED_SCHEMES) + sorted(ADAPTIVE_METHODS) + sorted(STIFF_METHODS)


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
    tstops: Tensor | Sequence[float] | None = None,
    jump_times: Tensor | Sequence[float] | None = None,
    throw: bool = True,
    adjoint: str | None = None,
    dense: bool = False,
    event: Callable | None = None,
    event_direction: int = 0,
    event_points: int = 4,
    reset: Callable | None = None,
    max_events: int = 100,
    **options,
) -> Solution:
    """Integrate ``system`` from ``y0`` at ``t[0]`` and return the states at every time in ``t``.

    ``system`` is an odelab :class:`System` (state = tuple of ``(batch, hidden)`` blocks, or a dict by
    block name) or a plain callable ``f(t, y)`` / ``f(t, y, u)`` with a tensor state ``(batch, d)``.
    ``t``: strictly increasing, or strictly decreasing to integrate backwards in time (ODEs only; the
    problem is solved forward in s = −t, and f, u and the outputs still see t).
    ``u``: input samples ``(batch, len(u_times), features)`` (``u_times`` defaults to ``t``) interpolated by
    ``interpolation`` ("hold": u_n acts on (t_{n−1}, t_n]; "linear"), or a callable u(t).
    Fixed-step methods (``euler``, ``midpoint``, ``heun``, ``rk4``, ``imex``, ``imex-implicit``,
    ``symplectic-euler``) take ``dt``; adaptive ones take ``rtol``, ``atol``, ``max_steps``: the explicit pairs
    ``dopri5``, ``tsit5``, ``bosh3``, and for stiff problems the linearly implicit, L-stable ``rodas4``, ``rodas4p``,
    ``rodas4p2`` (the latter two for stiff components under a time-dependent forcing, a delayed state's included) and
    ``rosenbrock23`` (J by autograd: see :mod:`odelab.solvers.rosenbrock`).
    Delay systems take ``history`` (constant, tensor, callable of t, or the dense solution of an earlier solve
    that this one continues; default: constant y0), under every method; state-dependent delays
    (:class:`~odelab.systems.StateDelay`) under the adaptive methods and the fixed-step explicit Runge–Kutta schemes.

    Time as user code sees it: a plain callable f, a callable input u(t) and a callable history get ``t`` as
    a tensor of y0's dtype and device -- 0-dim under the fixed-step methods (the batch shares the time),
    ``(batch, 1)`` under the adaptive ones (one time per sample; it broadcasts against ``(batch, d)``, so
    torchdiffeq's ``lambda t, y: torch.cos(t) * y`` works under every method). The first derivative f
    returns is checked against y0's shape (ValueError naming the block).

    Breakpoints: every solver steps exactly onto the sample times of a hold input, the knots of a linear
    input, ``tstops`` (times to step onto, like torchdiffeq's ``grid_points`` / diffrax's ``step_ts``) and
    ``jump_times`` (times where f jumps, like torchdiffeq's ``jump_t`` / diffrax's ``jump_ts``): adaptive
    methods clip their steps onto them, fixed-step grids insert them. After a jump the adaptive methods
    re-evaluate the first stage instead of reusing the last one (FSAL), and a stage time that sits on a jump
    reaches f one ulp inside its step (left limit at a step's end, right limit at the next step's start).
    For delay systems every breakpoint (and t0, where the history meets y0) is propagated through the
    delays, s + Σ n_i τ_i, up to the method's order.

    Gradients: by default autograd differentiates through every step (exact discretise-then-optimise, memory
    growing with the steps). ``adjoint="checkpoint"`` gives the same gradients with O(log n) memory
    (recursive checkpointing; fixed-step and adaptive ODEs, fixed-step DDEs); ``adjoint="backsolve"`` is the
    continuous adjoint, O(1) memory, gradients within the tolerance (explicit RK methods, ODEs without inputs).
    See :mod:`odelab.solvers.adjoint`; ``adjoint_params=[...]`` names the tensors a plain callable closes over.
    Under forward-mode AD or a ``torch.func`` transform the adjoint is set aside (the solve runs as without one).

    ``compile=True`` hands the loop's arithmetic to torch.compile (the first call compiles, tens of seconds; later
    calls of any batch size, grid and tolerance reuse it): the adaptive methods' step (ODEs without inputs), and
    blocks of fixed-step explicit RK steps on delay systems with fixed delays; same steps, values to round-off.
    ``cuda_graph=True`` replays CUDA work as graphs: the adaptive loop's chunks of attempts, and whole fixed-step
    solves without an input that record no gradient (captured at a configuration's second call, replayed with the
    new y0 from its third: see :mod:`odelab.solvers.cuda_graph`).

    ``mass=M`` (the Rosenbrock methods) solves M y' = f(t, y) with a constant M ``(d, d)``, ``(batch, d, d)``
    or its diagonal ``(d,)`` over the flat state (the blocks concatenated): a singular M under the RODAS methods
    (``rodas4``, ``rodas4p``, ``rodas4p2``) makes a differential-algebraic system of index 1, the rows of M's left
    null space algebraic equations 0 = f, which y0 must satisfy (``initialize="check"``, a ValueError otherwise) or
    which Newton's method solves for y0's algebraic components, keeping the rest (``initialize="algebraic"``,
    differentiably); M may carry a gradient.

    ``dense=True`` keeps every step's interpolant, so that ``solution.evaluate(t)`` gives the state at any time
    between the first and last output time (see :mod:`odelab.solvers.dense`): the adaptive methods' continuous
    extension, the cubic Hermite interpolant of the fixed-step ones (f evaluated at the steps' ends, about one
    more evaluation a step, counted in ``nfe``). Such a solution is also a ``history`` for a delay solve that
    continues it. Memory grows with the steps (the adaptive methods keep every attempt's last accepted step).

    ``event=g`` stops each sample at the first time the event function ``g(t, y)`` crosses zero (``event_direction``:
    0 either way, 1 rising, −1 falling), like torchdiffeq's ``odeint_event`` and diffrax's ``Event`` but per sample:
    ``g`` gets ``t`` as ``(batch, 1)`` and the state as f does, and returns ``(batch,)`` or ``(batch, k)`` (the first
    of k functions to cross). g is read at ``event_points`` (default 4) equally spaced interior points of every step as
    well as its end, so that g leaving and re-crossing zero inside one step (a graze) is seen; 0 reads the step
    ends only, as scipy and diffrax do. ``solution.event`` holds the times (a gradient through the implicit function
    theorem), the states there, which samples had one and which function crossed; a sample's outputs after its
    event are NaN, and a failure after it (a blow-up the event guards against) is no failure. The solve runs to
    ``t[-1]`` with a dense output and locates the crossings on the steps' interpolants (see
    :mod:`odelab.solvers.events`): every method, ODEs and DDEs, forwards and backwards in time; not with an adjoint.

    ``reset=r`` makes the events non-terminal (a hybrid system): at each crossing the state jumps to ``r(t*, y)``
    (the state as f gets it; r returns one in the same form) and the solve goes on from t*, the gradient passing
    through t* and the jump (see :mod:`odelab.solvers.resets`). ``solution.event`` then holds every event in order,
    with an event axis: ``t`` and ``which`` (batch, n), the states (batch, n, size), ``happened`` (batch, n). A
    sample stops at its ``max_events``-th event (outputs after it NaN). The adaptive methods (the explicit pairs and
    the Rosenbrock ones), ODEs, forwards in time.

    On failure (non-finite state, max steps, step underflow) raises :class:`SolveError` unless
    ``throw=False``, which returns the partial solution with a per-sample ``status``.
    """
    if not isinstance(dense, bool):
        raise TypeError(f"dense: expected True or False, got {type(dense).__name__}")
    for name in ("mass", "initialize"):
        if options.get(name) is not None and not (isinstance(method, str) and method in STIFF_METHODS):
            raise ValueError(f"{name}: M y' = f is solved by the linearly implicit methods only: 'rodas4', 'rodas4p' "
                             f"or 'rodas4p2' (M may be singular: DAEs of index 1) or 'rosenbrock23' (M nonsingular); "
                             f"got method={method!r}")
    if event is not None:
        check_event(event, event_direction)
        check_points(event_points)
        if adjoint is not None and not forward_mode_or_transform():
            raise ValueError(f"event: located on the steps' interpolants, which the adjoint {adjoint!r} does not keep; "
                             f"solve with adjoint=None")
        if options.get("cuda_graph"):
            raise ValueError("event: a captured solve replays its outputs only, not the steps the event is located "
                             "on; solve without cuda_graph")
    if reset is not None:
        if event is None:
            raise ValueError("reset: resets the state at the events of g; give event=g too")
        if not (isinstance(method, str) and (method in ADAPTIVE_METHODS or method in STIFF_METHODS)):
            raise ValueError(f"reset: events with resets are located inside the loop of the adaptive methods "
                             f"{sorted(ADAPTIVE_METHODS) + sorted(STIFF_METHODS)}; got method={method!r}")
    if isinstance(history, Solution):  # a delay solve continuing an earlier one
        reach = max((value for value, _ in delay_values(system, True)), default=0.0) if isinstance(system, System) \
            else 0.0
        history = SolutionHistory(history, as_times(t, allow_decreasing=True)[1][0], reach)
    with on_device_of(y0):  # Triton kernels and CUDA graphs run on the current device
        if adjoint in ADJOINTS and forward_mode_or_transform():
            # the adjoints only reshape the reverse pass; tangents need the steps' own derivatives (backsolve's
            # forward, which keeps no graph, dropped them): the same solve without one
            options.pop("adjoint_params", None)
            adjoint = None
        if adjoint is not None:
            if dense:
                raise ValueError(f"dense: the adjoint {adjoint!r} keeps no steps to interpolate; solve with "
                                 f"adjoint=None for a dense output")
            if isinstance(history, SolutionHistory) and history.dense.requires_grad:
                raise ValueError(f"history: the solution given carries the earlier solve's graph, which the adjoint "
                                 f"{adjoint!r} cannot reach (it differentiates y0, u and the parameters); solve with "
                                 f"adjoint=None, or continue the earlier solve run under torch.no_grad()")
            if isinstance(method, str) and method in STIFF_METHODS:
                raise ValueError(f"adjoint: not implemented for {method!r}; its gradients come from autograd through "
                                 f"the steps (adjoint=None)")
            return solve_with_adjoint(system, y0, t, adjoint=adjoint, method=method, u=u, u_times=u_times,
                                      interpolation=interpolation, dt=dt, history=history, tstops=tstops,
                                      jump_times=jump_times, throw=throw, **options)
        problem = prepare(system, y0, t, u, u_times, interpolation, tstops, jump_times)
        # a plain callable is wrapped anew by every call: a captured solve is keyed by what was given
        if event is None:
            return _solve_problem(system, problem, method, dt, history, throw, options, dense)
        if reset is not None:
            if problem.backwards:
                raise ValueError("reset: events with resets integrate forwards in time; t must increase")
            resets = Resets(event, event_direction, reset, max_events, not isinstance(system, System), event_points)
            solution = _solve_problem(system, problem, method, dt, history, False, {**options, "resets": resets},
                                      dense)
            return _after_resets(solution, resets, throw)
        solution = _solve_problem(system, problem, method, dt, history, False, options, True)
        return _stop_at_event(solution, problem, event, event_direction, event_points, not isinstance(system, System),
                              dense, throw)


def _stop_at_event(solution: Solution, problem, event, direction: int, points: int, function: bool, dense: bool,
                   throw: bool) -> Solution:
    """``solution`` with its ``event`` located, ended at each sample's event, and the dense output dropped unless
    asked for."""
    state = problem.state
    found = locate(solution.dense_output, state[0] if len(state) == 1 else torch.cat(state, -1), problem.times[0],
                   event, direction, function, solution.blocks, points)
    solution.event = found
    if not dense:
        solution.dense_output = None
    return _ended(solution, found.happened, found.t, -1.0 if problem.backwards else 1.0, throw)


def _after_resets(solution: Solution, resets: Resets, throw: bool) -> Solution:
    """``solution`` with its events, ended at the last event of a sample that halted there (max_events)."""
    solution.event = resets.events(solution.blocks, solution.ys[0].device)
    times = solution.event.t.detach().nan_to_num(nan=-math.inf)
    last = times.amax(1) if times.shape[1] else times.new_full(times.shape[:1], -math.inf)
    return _ended(solution, resets.halted.to(last.device), last, 1.0, throw)


def _ended(solution: Solution, stopped: Tensor, at: Tensor, sign: float, throw: bool) -> Solution:
    """The ``stopped`` samples' outputs after their times ``at`` (the user's) NaN and a failure after them forgiven;
    then the throw check. ``sign``: −1 for a solve backwards in time."""
    times = sign * solution.ts.detach().to(device=at.device, dtype=torch.float64)
    after = stopped.unsqueeze(1) & (times.unsqueeze(0) > (sign * at.detach()).unsqueeze(1))
    solution.ys = tuple(torch.where(after.unsqueeze(-1), torch.nan, y) for y in solution.ys)
    solution.status = torch.where(stopped, int(Status.SUCCESS), solution.status)
    if throw and not bool(solution.success.all()):
        raise SolveError("solve failed: " + solution.failure_summary(), solution)
    return solution


def _solve_problem(given, problem, method, dt, history, throw, options, dense=False):
    """:func:`solve` after its arguments were checked: the problem integrated by ``method``."""
    system, state, t_tensor, times, path = problem.system, problem.state, problem.t_tensor, problem.times, problem.path
    stops, jumps, backwards = problem.stops, problem.jumps, problem.backwards

    adaptive = {**ADAPTIVE_METHODS, **STIFF_METHODS}
    if isinstance(method, str) and method not in adaptive and method not in FIXED_SCHEMES:
        raise ValueError(f"method: unknown {method!r}; fixed-step (with dt): {sorted(FIXED_SCHEMES)}; adaptive (with "
                         f"rtol/atol): {sorted(ADAPTIVE_METHODS)}; stiff (with rtol/atol): {sorted(STIFF_METHODS)}")
    if isinstance(method, str) and method in adaptive:
        if dt is not None:
            options.setdefault("first_step", dt)
        solution = adaptive[method](system, state, t_tensor, times, path, history=history, tstops=stops,
                                            jump_times=jumps, dense=dense, **options)
    else:
        scheme = resolve_scheme(method)
        segments = options.pop("checkpoint_segments", None)
        compile = options.pop("compile", False)
        cuda_graph = options.pop("cuda_graph", False)
        for name, value in (("compile", compile), ("cuda_graph", cuda_graph)):
            if not isinstance(value, bool):
                raise TypeError(f"{name}: expected True or False, got {type(value).__name__}")
        if compile and not system.is_delay:
            raise ValueError("compile: fixed-step solves compile delay systems (the adaptive methods compile ODEs)")
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
            if segments is not None:
                raise ValueError("checkpoint_segments: not supported for delay systems")
        elif history is not None:
            raise ValueError(f"history: {type(system).__name__} declares no delays")

        if dense and segments is not None:
            raise ValueError("dense: the dense output keeps every step, checkpoint_segments recomputes them; use one")

        def drive(state):
            if system.is_delay:
                return solve_fixed_delay(system, scheme, state, t_tensor, times, path, float(dt), history, stops,
                                         jumps, compile, dense)
            return solve_fixed(system, scheme, state, t_tensor, times, path, float(dt), segments, stops, jumps, dense)

        if cuda_graph:
            if dense:
                raise ValueError("dense: a captured solve replays its outputs only; solve without cuda_graph")
            if path is not None:
                raise ValueError("cuda_graph: fixed-step solves with an input u are not captured (the adaptive "
                                 "methods' chunks are)")
            if forward_mode_or_transform():
                raise ValueError("cuda_graph: a captured solve carries no tangents (forward-mode AD, torch.func "
                                 "transforms); solve without cuda_graph there")
            if records_state_gradient(system, state):
                raise ValueError("cuda_graph: a captured solve records no gradient; run it under torch.no_grad() "
                                 "or with y0 and the system's parameters not requiring grad")
            config = (id(given), method if isinstance(method, str) else id(method), float(dt), tuple(times),
                      tuple(stops), tuple(jumps), id(history), compile)
            with torch.no_grad():
                solution = replayed(drive, state, t_tensor, config, keep=(given, method, history))
        else:
            solution = drive(state)
    if backwards:
        if "t_final" in solution.stats:
            solution.stats["t_final"] = -solution.stats["t_final"]
    if solution.dense_output is not None:  # in the user's times
        sign = -1.0 if backwards else 1.0
        dense = solution.dense_output
        dense.span, dense.backwards = (sign * times[0], sign * times[-1]), backwards
        dense.kinks = tuple((sign * s, m) for s, m in dense.kinks)

    if throw and not bool(solution.success.all()):
        raise SolveError("solve failed: " + solution.failure_summary(), solution)
    return solution
