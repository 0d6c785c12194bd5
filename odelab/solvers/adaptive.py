"""Adaptive explicit Runge--Kutta with one step size per sample: ``dopri5`` (the default of ``solve``),
``tsit5`` and ``bosh3``; delay systems are solved by the method of steps on a dense history.

Every sample b of the batch has its own time t_b, step h_b and accept/reject decision. The batch advances
together -- one loop iteration is one attempted step of every active sample -- and masks keep finished,
failed or rejected samples in place, so a stiff sample does not slow the others down. The loop synchronises
with the host once per ``chunk`` attempts (the termination test; default 1 on the CPU, 8 on CUDA, 1 for delay
systems, whose history window is sized on the host); everything else is masked tensor arithmetic, so attempts
after a sample finished inside a chunk leave it in place (and a solve with jumps of f re-evaluates the first
stage batch-wide instead of asking the host which samples sit on one). With ``compile=True``, an explicit
``chunk`` > 1 on the CPU and gradients off, the chunk's attempts run inside one compiled call (a scan that
inductor lowers to a loop in generated C++): no Python or dynamo guard between attempts (Van der Pol sweep,
256 samples: 0.20 -> 0.10 s a solve at chunk 16), at the price of a longer first compilation.

On the CPU, a solve that records no gradient (see :func:`.fused_step.usable`) runs the fused loop of
:mod:`.fused_step`: the same loop with the arithmetic around the field in C++ (stage sums, error norm,
controller, accept/reject, continuous-extension coefficients), the state updated in place, and the outputs
interpolated as the step containing them is accepted instead of from step records, and a delay system's dense
history read from per-sample rings of accepted steps that the kernels fill. The same steps (float64) and values to
round-off, no compilation per configuration (the kernels are built once per machine, ~1-2 s): FitzHugh–Nagumo,
1280 samples, 0.82 -> 0.30 s a solve; ENSO (256 samples, dopri5 on [0, 400]) 4.1 -> 1.2 s. On CUDA the same
loop runs with Triton kernels (:mod:`.triton_step`), its condition read once per chunk.

One step of a tableau (c, a, b, b_err = b − b̂) with stage increments hk_i = h f(t + c_i h, Y_i):

    Y_i    = y + Σ_j a_ij hk_j                                   (stages; FSAL: hk_1 = h f(t, y) from the last step)
    y_new  = y + Σ_i b_i hk_i                                    (the propagated, higher-order solution)
    err    = Σ_i b_err_i hk_i                                    (embedded local error estimate)
    ratio  = sqrt(mean_d (err_d / (atol + rtol max(|y_d|, |y_new,d|)))²)    per sample (HNW I §II.4)
    accept ⇔ ratio ≤ 1
    h_next = h clamp(safety ratio^(−α) ratio_prev^β, factor_min, factor_max)   (PI control, HNW II §IV.2 and
             dopri5.f: α = 1/(q+1) − 0.75 β, β = 0.2/(q+1), q = embedded order; ≤ 1 after a rejection)

The first step follows Hairer's starting-step algorithm (HNW I §II.4). HNW = Hairer, Nørsett & Wanner,
Solving Ordinary Differential Equations I (1993) and II (1996). Outputs are dense: at a requested
time t + θh inside an accepted step, y = y + Σ_i b_i(θ) hk_i with the method's continuous extension
(Dormand--Prince's 4th-order one, Tsitouras', the cubic Hermite for Bogacki--Shampine), so the solver never
shortens a step to hit an output time. It does land on every breakpoint (:mod:`.breakpoints`: hold-input
sample times, linear-input knots, the user's ``tstops`` and ``jump_times``, for delay systems all of them
and t0 propagated through the delays up to the method's order) and on the final time. After landing
where f jumps (a hold sample time, a ``jump_times`` entry, t0 + τ_i) the first stage is re-evaluated
(no first-same-as-last reuse of the left limit), with the stage time one ulp after the jump, and the
stages that end a step on a jump see the time one ulp before it.

Delay systems: y(t − τ) at every stage is the history function for t − τ ≤ t0 and otherwise the continuous
extension of the sample's accepted step containing t − τ, read from the loop's step records. Steps are capped at the smallest delay (every stage's delayed time
lies in the past), so no fixed-point iteration is needed. At t0 the history and y0 may differ: a stage that
ends a step reads φ(t0) there (the left limit), the re-evaluated first stage after t0 + τ reads y0. A delay
given as a scalar tensor that requires grad is learnable: the delayed time t − τ carries its gradient into
a callable history and, past t0, into the dense history as d/dτ y(t − τ) = −y'(t − τ) with y'(s) = f(s, y(s),
…) evaluated at s (one more evaluation of f per stage, not counted in ``nfe``; the continuous extension's own
slope is one order less accurate); the landing points are those of its current value, propagated one level
deeper (∂y/∂τ loses one more derivative than y at each s + kτ). The error norm controls y only, and the
discrete ∂y/∂τ of the 3rd-order pair then drifts to 10–30 tol (5th-order pairs: ≤ 0.01 tol); with
``control_delay_sensitivity`` (default for bosh3, when grad mode is on) the sensitivity ∂y/∂τ rides along
as a forward-mode tangent of every stage, and a step is accepted only when both y's and the tangent's
embedded error estimates meet the tolerance (CVODES's error control of forward sensitivities). About 1.5×
the steps and, in eager forward mode, 7–10× the time per step (measured on a scalar delay problem); the
gradient itself is still reverse mode. Inside the caller's own forward-mode level (``torch.autograd.forward_ad``,
``torch.func``) the tangent is not added (levels do not nest): the steps are then controlled on y alone.
A :class:`~odelab.systems.StateDelay` τ(t, y) is evaluated at each stage's time and state, clamped to its bounds,
and read at t − τ per sample (its gradient through the history's slope); the steps are capped at its lower bound,
the history reaches to its upper one, and t0 propagates through the constant lags ahead of the solve and through
the state-dependent ones as it goes: :mod:`.tracking` locates where t − τ(t, y(t)) crosses a kink and steps onto it
(``track_discontinuities``, default True). The torch loop: the fused C++ and Triton loops read constant lags.

Time-dependent systems, delay histories and callable inputs receive ``t`` as a ``(batch, 1)`` tensor of the
state's dtype (one time per sample) instead of a float.
"""
from __future__ import annotations

import contextlib
import math
import types
from typing import Callable, Sequence

import torch
import torch.autograd.forward_ad as fwAD
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from ..systems.base import FunctionSystem, StateDelay, System
from . import fused_step
from .breakpoints import collect
from .cache import inductor_options, keep_compiled_code
from .compiled import BatchDynamic, own_code, tracing_options
from .dense import DenseOutput
from .derivatives import forward_mode_or_transform
from .field import check_derivative
from .history import delay_values, mark_clamped, warn_clamped
from .inputs import FunctionInput, Hold, InputPath, Linear
from .solution import Solution, Status
from .step_history import StepHistory, flat_history
from .tableau import ADAPTIVE_TABLEAUX, ButcherTableau, horner
from .tracking import Tracker

_SUCCESS, _MAX_STEPS, _UNDERFLOW, _NONFINITE = (int(s) for s in Status)


class _Options:
    """Validated step-control options (errors name the option)."""

    def __init__(self, tableau: ButcherTableau, *, rtol: float = 1e-6, atol: float = 1e-8,
                 max_steps: int = 10_000, first_step: float | None = None, dt_min: float = 0.0,
                 dt_max: float = math.inf, safety: float = 0.9, factor_min: float = 0.2,
                 factor_max: float = 10.0, pi_beta: float | None = None, checkpoint_segments: int | None = None,
                 compile: bool = False, control_delay_sensitivity: bool | None = None, chunk: int | None = None,
                 cuda_graph: bool = False, track_discontinuities: bool = True):
        def number(name, value, low, strict=True, allow_inf=False):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"{name}: expected a number, got {type(value).__name__}")
            bad = value <= low if strict else value < low
            if bad or math.isnan(value) or (math.isinf(value) and not allow_inf):
                raise ValueError(f"{name}: expected a finite number {'>' if strict else '≥'} {low}, got {value!r}")
            return float(value)

        self.rtol = number("rtol", rtol, 0.0, strict=False)
        self.atol = number("atol", atol, 0.0, strict=False)
        if self.rtol == 0.0 and self.atol == 0.0:
            raise ValueError("rtol, atol: at least one tolerance must be positive")
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
            raise ValueError(f"max_steps: expected a positive integer, got {max_steps!r}")
        self.max_steps = max_steps
        self.first_step = None if first_step is None else number("first_step", first_step, 0.0)
        self.dt_min = number("dt_min", dt_min, 0.0, strict=False)
        self.dt_max = number("dt_max", dt_max, 0.0, allow_inf=True)
        if self.dt_min >= self.dt_max:
            raise ValueError(f"dt_min: must be below dt_max ({self.dt_max}), got {self.dt_min}")
        self.safety = number("safety", safety, 0.0)
        self.factor_min = number("factor_min", factor_min, 0.0)
        self.factor_max = number("factor_max", factor_max, 1.0)
        if self.factor_min >= 1.0:
            raise ValueError(f"factor_min: expected a number in (0, 1), got {factor_min!r}")
        q1 = tableau.embedded_order + 1
        beta = 0.2 / q1 if pi_beta is None else number("pi_beta", pi_beta, 0.0, strict=False)
        self.alpha, self.beta = 1.0 / q1 - 0.75 * beta, beta
        if checkpoint_segments is not None and (isinstance(checkpoint_segments, bool)
                                                or not isinstance(checkpoint_segments, int) or checkpoint_segments < 1):
            raise ValueError(f"checkpoint_segments: expected a positive integer, got {checkpoint_segments!r}")
        self.segments = checkpoint_segments
        if not isinstance(compile, bool):
            raise TypeError(f"compile: expected True or False, got {type(compile).__name__}")
        self.compile = compile
        if control_delay_sensitivity is None:  # the 5th-order pairs' dL/dτ is within 0.01 tol without it
            control_delay_sensitivity = tableau.order < 5
        if not isinstance(control_delay_sensitivity, bool):
            raise TypeError(f"control_delay_sensitivity: expected True, False or None, got "
                            f"{type(control_delay_sensitivity).__name__}")
        self.control_delay_sensitivity = control_delay_sensitivity
        if chunk is not None and (isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1):
            raise ValueError(f"chunk: expected a positive integer, got {chunk!r}")
        self.chunk = chunk
        if not isinstance(cuda_graph, bool):
            raise TypeError(f"cuda_graph: expected True or False, got {type(cuda_graph).__name__}")
        self.cuda_graph = cuda_graph
        if not isinstance(track_discontinuities, bool):
            raise TypeError(f"track_discontinuities: expected True or False, "
                            f"got {type(track_discontinuities).__name__}")
        self.track = track_discontinuities


_OPTION_NAMES = ("rtol", "atol", "max_steps", "first_step", "dt_min", "dt_max", "safety", "factor_min",
                 "factor_max", "pi_beta", "checkpoint_segments", "compile", "control_delay_sensitivity", "chunk",
                 "cuda_graph", "track_discontinuities")


class _Carry:
    """What one segment of the loop hands to the next: the controller state per sample and the last
    accepted step (for outputs that fall inside it). Packed as a tuple of tensors for checkpointing."""

    fields = ("y", "k1", "t", "h", "prev", "landing", "steps", "accepted", "code", "restarts",
              "last_t", "last_h", "last_y", "last_coef")

    def __init__(self, *tensors: Tensor):
        for name, value in zip(self.fields, tensors):
            setattr(self, name, value)

    def pack(self) -> tuple[Tensor, ...]:
        return tuple(getattr(self, name) for name in self.fields)


def _primal(x: Tensor) -> Tensor:
    return fwAD.unpack_dual(x).primal


def _dual(x: Tensor) -> Tensor:
    """``x`` with an explicit (zero) tangent if it has none: eager forward mode is fast only when both operands
    of an elementwise op carry tangents (an undefined one becomes a ZeroTensor, ~0.5 ms per op)."""
    return x if fwAD.unpack_dual(x).tangent is not None else fwAD.make_dual(x, torch.zeros_like(x))


def _tangent(x: Tensor) -> Tensor:
    """The forward-mode tangent of ``x`` (zeros where nothing depends on the delay yet), a fresh tensor."""
    tangent = fwAD.unpack_dual(x).tangent
    return torch.zeros_like(_primal(x)) if tangent is None else tangent.clone()


# devices whose solves that record no gradient take the Triton loop (:mod:`.triton_step`); the tests add "cpu" to
# run its kernels under Triton's interpreter
TRITON_DEVICES = ("cuda",)


def _triton_step():
    """:mod:`.triton_step`, imported on first use (it imports Triton); None where Triton is not installed."""
    try:
        from . import triton_step
    except ImportError:
        return None
    return triton_step


class _Integrator:
    """The per-sample adaptive loop for one tableau, system, input path and option set."""

    def __init__(self, tableau: ButcherTableau, system: System, y0: Tensor, sizes: list[int], times: list[float],
                 path: InputPath | None, history, opts: _Options, tstops: list[float] = (),
                 jump_times: list[float] = (), sensitive: bool = False, dense: bool = False, resets=None):
        self.tab, self.system, self.opts, self.sizes = tableau, system, opts, sizes
        self.resets = resets  # events that reset the state (.resets.Resets), applied after every attempt
        # the solve's dense output (one segment: dense refuses checkpoint_segments): the torch loop's step records;
        # the fused C++ and Triton loops, which interpolate the outputs as they go, copy each attempt's last step
        self.dense_pieces, self.pieces_kept = dense, None
        self.dtype, self.device = y0.dtype, y0.device
        self.batch, self.dim = y0.shape
        self.t0, self.t_end = times[0], times[-1]
        time = dict(dtype=torch.float64, device=self.device)
        self.rows = [[(j, a) for j, a in enumerate(row) if a != 0.0] for row in tableau.a]
        self.b_err = torch.tensor(tableau.b_err, dtype=self.dtype, device=self.device)
        self.dense = torch.tensor(tableau.dense, dtype=self.dtype, device=self.device)  # (stages, m)
        self.dense_t = self.dense.t().contiguous()  # (m, stages): P^T hk is the fast product (a (B dim, m) one is 3× slower)
        self.mean = torch.full((self.dim,), 1.0 / self.dim, dtype=self.dtype, device=self.device)

        self.path, self.hold_times, self.linear_times = path, None, None
        if isinstance(path, Hold):
            self.hold_times = path.time_tensor()
        elif isinstance(path, Linear):
            self.linear_times = path.time_tensor()
        elif path is not None and not isinstance(path, FunctionInput):
            raise TypeError(f"u: adaptive solvers take hold, linear or callable inputs, got {type(path).__name__}")

        delays = delay_values(system, state_dependent=True)
        self.delays = tuple(value for value, _ in delays)  # a state-dependent delay's upper bound
        # per delay: its StateDelay (τ(t, y) per stage, clamped to its bounds) or None (a constant lag)
        self.state_delays = tuple(tau if isinstance(tau, StateDelay) else None for tau in system.delays)
        self.state_dependent = any(tau is not None for tau in self.state_delays)
        # per state-dependent delay: the samples whose τ left its bounds at an accepted step's end (clamped there)
        self.outside = [torch.zeros(self.batch, dtype=torch.bool, device=self.device) for _ in self.state_delays]
        # None, or the delay's 0-d tensor (grad); under a forward-AD level (see ``integrate``) it carries the
        # tangent 1, so that every stage carries ∂/∂τ and the error norm can control it
        self.sensitive = sensitive and any(tensor is not None for _, tensor in delays)
        self.learnable = tuple(tensor if tensor is None or not self.sensitive
                               else fwAD.make_dual(tensor, torch.ones_like(tensor)) for _, tensor in delays)
        self.history = None
        scale = abs(self.t0) + abs(self.t_end) + max(self.delays, default=0.0)
        if self.delays:
            if min(self.delays) <= 0:
                raise ValueError(f"delays: adaptive solvers need positive delays, {type(system).__name__} has {self.delays}")
            if opts.segments is not None:
                raise ValueError("checkpoint_segments: not supported for delay systems under adaptive methods")
            if self.state_dependent and any(tensor is not None for _, tensor in delays):
                raise ValueError(f"delays: {type(system).__name__} mixes a state-dependent delay with a learnable one; "
                                 f"the learnable delay's derivative is read through constant delays only")
            # a learnable delay's derivative reads f at t − τ, which reads y at t − τ − τ_i: reach twice as far
            reach = max(self.delays) * (2 if any(learn is not None for learn in self.learnable) else 1)
            self.history = StepHistory(flat_history(system, self.sizes, history, y0, self.t0), self.t0, reach,
                                       eps=8 * math.ulp(scale))
            self.history.tangents = self.sensitive
        elif history is not None:
            raise ValueError(f"history: {type(system).__name__} declares no delays")
        # breakpoints closer than this are one (no steps of round-off size)
        # with a learnable delay, ∂y/∂τ (not error-controlled) loses one more derivative at each s + kτ than y
        # (z' = ∂f/∂y_τ (z(t − τ) − y'(t − τ)) + …): one more level of propagated breakpoints
        depth = tableau.order + any(learn is not None for learn in self.learnable)
        # t0's discontinuity propagates through the constant lags only (where t − τ(t, y(t)) = t0 is not known ahead)
        lags = tuple(value for value, tau in zip(self.delays, self.state_delays) if tau is None)
        breakpoints = collect(self.t0, self.t_end, path, tstops, jump_times, lags, depth,
                              tol=64 * math.ulp(scale), history_kinks=getattr(history, "kinks", ()))
        self.kinks = breakpoints.kinks
        # the crossings of the kinks by a state-dependent delay's t − τ(t, y(t)), found as the solve goes
        self.tracker = None
        if self.state_dependent and opts.track:
            reach = self.t0 - max(self.delays)
            earlier = tuple((s, m) for s, m in getattr(history, "kinks", ()) if reach < s < self.t0)
            self.tracker = Tracker(self, breakpoints.kinks + earlier, depth, 64 * math.ulp(scale),
                                   getattr(history, "sample_kinks", None))
        points = list(breakpoints.stops) + [self.t_end]
        self.landing = torch.tensor(points + [math.inf], **time)
        # per landing index k (the next point a sample steps towards): the point before it, and whether f
        # jumps there -- a sample sitting on it re-evaluates its first stage (restart)
        restart_at = set(breakpoints.jumps)
        if any(learn is not None for learn in self.learnable):
            # ∂f/∂τ = −∂f/∂y_τ y'(t − τ) jumps at s + τ wherever y' jumps at s: restart there too, so that the
            # first stage reads y'(s⁺) (the value is continuous, its τ-derivative is not)
            sources = set(breakpoints.jumps) | {self.t0}
            targets = [q + tau for q in sources for tau in self.delays]
            restart_at |= {p for p in points if any(abs(p - q) <= 64 * math.ulp(scale) for q in targets)}
        jump = [False] + [p in restart_at for p in points]
        self.restarts = any(jump)
        self.prev_point = torch.tensor([-math.inf] + points, **time)
        self.prev_jump = torch.tensor(jump, dtype=torch.bool, device=self.device)
        self.end_jump = torch.tensor(jump[1:] + [False], dtype=torch.bool, device=self.device)
        # learnable delays: the landing point t0 + τ_i moves with τ_i, and f jumps there when φ(t0) ≠ y0
        self.moving = None
        if any(learn is not None for learn in self.learnable):
            which = [-1] * (len(points) + 1)
            for i, (tau, learn) in enumerate(zip(self.delays, self.learnable)):
                near = [k for k, p in enumerate(points) if learn is not None and abs(p - (self.t0 + tau)) <= 64 * math.ulp(scale)]
                for k in near:
                    which[k + 1] = i
            self.moving = torch.tensor(which, dtype=torch.int64, device=self.device)
        if self.restarts and opts.compile:
            raise ValueError("compile: the compiled step does not support jump_times")
        if self.hold_times is not None:  # the hold sample driving the steps that end at landing point k
            previous = torch.cat([torch.tensor([self.t0], **time), self.landing[:-1]])
            self.hold_index = torch.searchsorted(self.hold_times, previous, right=True).clamp_max_(len(path.times) - 1)
        # every delayed time in the accepted past: steps no longer than the smallest delay (a lower bound)
        shortest = [value if tau is None else tau.lower for value, tau in zip(self.delays, self.state_delays)]
        self.dt_max = min(opts.dt_max, min(shortest)) if shortest else opts.dt_max
        self.exact_time = self.linear_times is not None or self.history is not None  # float64 stage times needed
        self.checked = False
        # CUDA: a host read of the loop condition stalls the stream, so check it every 8 attempts; the CPU
        # reads it for free, and extra masked attempts after the last sample finishes would only cost
        self.chunk = opts.chunk or (8 if self.device.type == "cuda" else 1)
        if resets is not None:
            if self.history is not None or opts.compile or opts.segments is not None:
                raise ValueError("reset: events with resets are solved for ODEs, without compile or "
                                 "checkpoint_segments")
            self.chunk = 1  # the resets read the host after every attempt
        if opts.cuda_graph and self.device.type not in TRITON_DEVICES:
            raise ValueError(f"cuda_graph: replays the CUDA loop's chunks, but y0 is on {self.device.type}")
        # The step's tensor scalars (t_end, t_stop, the tolerances, the constants below) have 1 element, not 0 dims:
        # dynamo gives a 0-d float64 CPU tensor argument a float symbol for its value, which AOTAutograd's scalar
        # pass cannot place, and restarts the whole analysis without it (compile=True traced the step twice: FHN
        # dopri5, ~2.2 s of a cold first call's 11.2 s in-process CPU). In eager they broadcast as 0-d ones would.
        self.t_end_tensor = torch.tensor([self.t_end], **time)
        # (rtol, atol) as two tensors: arguments of the compiled step, no indexing op per step
        self.tolerance = tuple(torch.tensor([x], dtype=self.dtype, device=self.device) for x in (opts.rtol, opts.atol))
        # constants for torch.where (a Python scalar there allocates a tensor every step)
        constant = lambda value, dtype: torch.tensor([value], dtype=dtype, device=self.device)
        self.factor_bounds = (constant(1.0, self.dtype), constant(opts.factor_max, self.dtype))
        self.failure_codes = tuple(constant(c, torch.int64) for c in (_UNDERFLOW, _NONFINITE, _MAX_STEPS))
        self.fused = None  # the loop with the arithmetic around f in C++ kernels (fused_step), built on first use
        self.triton = None  # its CUDA counterpart with Triton kernels (triton_step)
        self.compiled = self.scanned = None  # the compiled attempt, or the compiled chunk of attempts
        if opts.compile:
            if path is not None or self.history is not None:
                raise ValueError("compile: the compiled step supports systems without inputs or delays")
            self.compiled = _compiled_attempt(self)
            if opts.chunk is not None and opts.chunk > 1 and self.device.type == "cpu":
                self.scanned = _compiled_attempt(self, scanned=True)  # used when gradients are off

    # -- the vector field on the flat state ---------------------------------------------------------
    def _blocks(self, y: Tensor) -> tuple[Tensor, ...]:
        return (y,) if len(self.sizes) == 1 else y.split(self.sizes, -1)

    def _flat(self, state) -> Tensor:
        return state[0] if len(state) == 1 else torch.cat(state, -1)

    def field(self, t: Tensor | None, t_col: Tensor, y: Tensor, inp: Tensor | None, right: bool = False) -> Tensor:
        """f(t, y) per sample; t: (batch,) float64 stage times (needed for linear inputs and delays only),
        t_col: the same as (batch, 1) in the state's dtype; inp: the step's held input or None; ``right``:
        the first stage of a step restarting after a jump (delayed reads at t0 take y0, not φ(t0))."""
        if self.linear_times is not None:
            inp = self.path.at_times(t, self.linear_times)
        elif isinstance(self.path, FunctionInput):
            inp = self.path.at(t_col)
        blocks = self._blocks(y)
        delayed = ()
        if self.history is not None:
            delayed = tuple(self._blocks(self._state_read(t, t_col, blocks, lag, right, i) if lag is not None else
                                         self.history.at(t - tau, right) if learn is None else
                                         self._learnable_read(t, learn, right))
                            for i, (tau, learn, lag) in enumerate(zip(self.delays, self.learnable, self.state_delays)))
        if self.sensitive and inp is not None:
            inp = _dual(inp)
        out = self.system.derivative(t_col, blocks, inp, *delayed)
        if not self.checked:
            check_derivative(self.system, blocks, out)
            self.checked = True
        return self._flat(out)

    def _state_read(self, t: Tensor, t_col: Tensor, blocks: tuple[Tensor, ...], delay: StateDelay,
                    right: bool, index: int) -> Tensor:
        """y(t − τ(t, y)) for a state-dependent delay (the ``index``-th), τ clamped to its bounds, per sample; the
        delayed time carries τ's gradient into the history (through its interpolant's slope, or a callable history).
        Near a tracked crossing of t0 the delayed time is held on one side of it (:mod:`.tracking`)."""
        s = t - delay.evaluate(t_col, blocks, self.batch).clamp(delay.lower, delay.upper)
        return self.history.at(s if self.tracker is None else self.tracker.bound(index, s), right)

    def _learnable_read(self, t: Tensor, learn: Tensor, right: bool) -> Tensor:
        """y(t − τ) for a learnable τ: the dense history's value, with the τ-derivative −y'(t − τ) taken from
        f(s, y(s), …) at s = t − τ rather than from the continuous extension's slope (one order lower, O(h⁴)
        for the 5th-order pairs: dL/dτ then drifted to 20–50 tol at rtol 1e-10). The value is unchanged; the
        term (s − s) f(s) adds the derivative. Before t0 the history's own (callable) derivative is kept."""
        s = (_dual(t) if self.sensitive else t) - learn.double()
        if not s.requires_grad:
            return self.history.at(s, right)
        where = s.detach()
        value = self.history.at(where, right)
        before = where < self.t0 - self.history.eps if right else where <= self.t0 + self.history.eps
        if bool(before.all()):
            return self.history.at(s, right)
        slope = self._slope(where, value, right)
        inside = value + (s - (_dual(where) if self.sensitive else where)).to(self.dtype).unsqueeze(1) * slope
        if bool(before.any()):
            return torch.where(before.unsqueeze(1), self.history.at(s, right), inside)
        return inside

    def _slope(self, s: Tensor, y: Tensor, right: bool) -> Tensor:
        """f(s, y(s), y(s − τ_i), u(s)) at past times s (batch,) inside the solve, from the dense history: the
        left limit at a jump of f, or the right one with ``right``. One more evaluation of f per learnable
        delay and stage (not counted in ``nfe``)."""
        inp, eps = None, self.history.eps
        if self.linear_times is not None:
            inp = self.path.at_times(s, self.linear_times)
        elif self.hold_times is not None:  # u_n on (t_{n−1}, t_n]: left limits at the sample times unless right
            index = torch.searchsorted(self.hold_times, s + eps if right else s - eps, right=right)
            inp = self.path.at_indices(index.clamp_max_(len(self.path.times) - 1))
        elif isinstance(self.path, FunctionInput):
            inp = self.path.at(s.to(self.dtype).unsqueeze(1))
        delayed = tuple(self._blocks(self.history.at(s - tau, right)) for tau in self.delays)
        return self._flat(self.system.derivative(s.to(self.dtype).unsqueeze(1), self._blocks(y), inp, *delayed))

    def held_input(self, landing: Tensor) -> Tensor | None:
        """The hold sample driving a step towards landing point ``landing`` (per sample): u_n on (t_{n−1}, t_n]."""
        if self.hold_times is None:
            return None
        return self.path.at_indices(self.hold_index[landing])

    # -- step-size control --------------------------------------------------------------------------
    def ratio2(self, y: Tensor, y_new: Tensor, err: Tensor, tolerance: tuple[Tensor, Tensor]) -> Tensor:
        """Squared RMS of err / (atol + rtol max(|y|, |y_new|)) per sample; ``tolerance`` = (rtol, atol), 1-element
        tensors (arguments of the compiled step, so that one compilation serves every tolerance)."""
        scale = torch.maximum(y.abs(), y_new.abs()).mul_(tolerance[0]).add_(tolerance[1])
        if torch.compiler.is_compiling():  # a reduction fuses with the step; a matrix product is an extern call
            return err.div(scale).square().mean(1)
        return err.div_(scale).square_() @ self.mean

    def initial_step(self, y0: Tensor, f0: Tensor, inp: Tensor | None) -> Tensor:
        """Hairer's starting step per sample (HNW I, II.4): h0 = 0.01 ‖y0‖/‖f0‖, one probe Euler step,
        h1 = (0.01 / max(‖f0‖, ‖f'‖))^(1/(p+1)), h = min(100 h0, h1); each norm is the per-sample RMS."""
        opts, t = self.opts, torch.full((self.batch,), self.t0, dtype=torch.float64, device=self.device)
        cap = min(self.t_end - self.t0, self.dt_max)
        if opts.first_step is not None:
            return torch.full_like(t, min(opts.first_step, cap))
        with torch.no_grad():
            y0, f0 = _primal(y0), _primal(f0)  # the step size carries no delay tangent
            scale = y0.abs().mul(opts.rtol).add_(opts.atol)
            rms = lambda x: (x / scale).square() @ self.mean
            d0, d1 = rms(y0).double().sqrt(), rms(f0).double().sqrt()
            h0 = torch.where((d0 < 1e-5) | (d1 < 1e-5), torch.full_like(d0, 1e-6), 0.01 * d0 / d1).clamp_max(cap)
            f1 = _primal(self.field(t + h0, (t + h0).to(self.dtype).unsqueeze(1), y0 + h0.to(self.dtype).unsqueeze(1) * f0, inp))
            d2 = rms(f1 - f0).double().sqrt() / h0
            top = torch.maximum(d1, d2)
            h1 = torch.where(top <= 1e-15, (h0 * 1e-3).clamp_min(1e-6), (0.01 / top) ** (1.0 / (self.tab.order + 1)))
            h = torch.minimum(100 * h0, h1).clamp_max(cap)
        return torch.nan_to_num(h, nan=cap)

    # -- the loop -----------------------------------------------------------------------------------
    def start(self, y0: Tensor) -> _Carry:
        t = torch.full((self.batch,), self.t0, dtype=torch.float64, device=self.device)
        last_coef = y0.new_zeros(self.batch * self.dim, self.dense.shape[1])
        if self.sensitive:
            y0, last_coef = _dual(y0), _dual(last_coef)
        if self.history is not None:
            self.history.load([(t, torch.ones_like(t), y0, last_coef, t)], t, torch.zeros_like(t, dtype=torch.bool))
        landing = torch.zeros(self.batch, dtype=torch.int64, device=self.device)  # index of the next landing point
        inp = self.held_input(landing)
        t_col = t.to(self.dtype).unsqueeze(1)
        f0 = self.field(t, t_col, y0, inp)
        if self.tracker is not None:
            self.tracker.begin(t, y0)
        h = self.initial_step(y0, f0, inp)
        finite = torch.isfinite(f0).all(1)
        code = torch.where(finite, _SUCCESS, _NONFINITE)
        zeros = torch.zeros(self.batch, dtype=torch.int64, device=self.device)
        # log(safety ratio_prev^β) with ratio_prev = 1e-4 (dopri5.f)
        prev = torch.full_like(t_col.squeeze(1), math.log(self.opts.safety) + self.opts.beta / 2 * math.log(1e-8))
        return _Carry(y0, f0, t, h, prev, landing, zeros, zeros, code, zeros, t, torch.ones_like(t), y0, last_coef)

    def segment(self, carry: _Carry, t_stop: float, out_times: list[float]) -> tuple[Tensor, _Carry]:
        """Advance every sample to t ≥ t_stop (exactly t_end for the last segment) and return the states at
        ``out_times`` (all in (previous stop, t_stop]) as (batch, len(out_times), dim), plus the new carry."""
        if self.compiled is None and fused_step.usable(self, carry.y, carry.k1):
            if self.fused is None:
                self.fused = fused_step.FusedLoop(self)
            outputs, fields = self.fused.segment(carry, t_stop, out_times)
            return outputs, _Carry(*fields)
        if self.device.type in TRITON_DEVICES and self.compiled is None:
            triton_step = _triton_step()
            if triton_step is not None and triton_step.usable(self, carry.y, carry.k1):
                if self.triton is None:
                    self.triton = triton_step.TritonLoop(self)
                try:
                    outputs, fields = self.triton.segment(carry, t_stop, out_times)
                    return outputs, _Carry(*fields)
                except triton_step.KernelFailure:  # warned; the torch loop takes the segment from the same carry
                    pass
        scanned = self.scanned is not None and not torch.is_grad_enabled()  # scan has no backward here
        with tracing_options(scalar_outputs=scanned) if self.compiled is not None else contextlib.nullcontext():
            return self._segment(carry, t_stop, out_times, scanned)

    def _segment(self, carry: _Carry, t_stop: float, out_times: list[float],
                 scanned: bool) -> tuple[Tensor, _Carry]:
        y, k1, t, h, prev, landing = carry.y, carry.k1, carry.t, carry.h, carry.prev, carry.landing
        steps, code, restarts = carry.steps, carry.code, carry.restarts
        records = [(carry.last_t, carry.last_h, carry.last_y, carry.last_coef, carry.t)]
        accepts = []
        stop = torch.tensor([t_stop], dtype=torch.float64, device=self.device)
        active = (code == _SUCCESS) & (t < stop)
        # iterations before any sample can reach max_steps (one host read per segment)
        budget = self.opts.max_steps - (int(steps.max()) if steps.numel() else 0)
        attempt = self.compiled or self.attempt
        # attempted steps per host synchronisation: a delay system reads its window's coverage on the host first
        chunk = 1 if self.history is not None else self.chunk
        # recording a gradient: a rejected attempt whose stages overflowed would pass 0 · inf = NaN back through f,
        # so a chunk with one is replayed with those samples' steps zero (their outcome kept): one host read a chunk
        guard = not scanned and fused_step.records_gradient(self, y, k1)
        any_restart = False
        attempted = 0
        while True:  # one host synchronisation per ``chunk`` attempts
            flags = [active.any()]
            if self.restarts and chunk == 1:  # samples sitting on a jump of f: their first stage is re-evaluated
                restart = self.on_jump(active, landing, t)
                flags.append(restart.any())
            if self.history is not None:
                flags.append(self.history.load(records, t, active))
            if len(flags) == 1:
                going, any_restart, short = bool(flags[0]), False, False
            else:
                values = torch.stack(flags).tolist()
                going, short = values[0], self.history is not None and values[-1]
                any_restart = self.restarts and values[1]
            if short:
                self.history.window *= 2
                continue
            if not going:
                break
            if scanned:  # the chunk's attempts in one compiled call
                y, k1, t, h, prev, landing, steps, code, active, accepted, block = self.scanned(
                    chunk, y, k1, t, h, prev, landing, steps, code, active, self.landing, stop, self.t_end_tensor,
                    attempted + chunk >= budget, tolerance=self.tolerance)
                records.append(block)
                accepts.append(accepted)
                attempted += chunk
                continue
            if self.tracker is not None:  # chunk 1: steps cut to end on each sample's tracked crossing
                h = self.tracker.clip(t, h)
            before = (y, k1, t, h, prev, landing, steps, code, active, restarts, attempted, len(records))
            outcomes, actives, finite = [], [], []
            for replaying in (False, True) if guard else (False,):
                if replaying:  # some attempt's stages overflowed in the recorded graph: the chunk again
                    if bool((torch.stack(finite) if chunk > 1 else finite[0]).all()):
                        break
                    broken = [self.overflowed(outcome[-1], was) for outcome, was in zip(outcomes, actives)]
                    if not bool(torch.stack(broken).any()):  # only samples that no longer step
                        break
                    y, k1, t, h, prev, landing, steps, code, active, restarts, attempted, kept = before
                    del records[kept:], accepts[kept - 1:]
                for j in range(chunk):  # samples that finish inside a chunk stay in place (masked attempts)
                    if self.restarts and chunk > 1:  # no host read: the mask goes in, f is re-evaluated batch-wide
                        restart = self.on_jump(active, landing, t)
                        any_restart = True
                    if any_restart:
                        restarts = restarts + restart
                    args = (y, k1, t, h, prev, landing, steps, code, active, self.landing, stop, self.t_end_tensor,
                            attempted + 1 >= budget, *((restart if any_restart else False,) if self.restarts else ()))
                    if replaying:
                        outcome = self.replay(attempt, broken[j], outcomes[j], *args, tolerance=self.tolerance)
                    else:
                        outcome = attempt(*args, tolerance=self.tolerance)
                        if guard:  # one reduction an attempt; the per-sample masks only where it fails
                            finite.append(torch.isfinite(outcome[-1][2]).all())
                            outcomes.append(outcome)
                            actives.append(active)
                    y, k1, t_after, h, prev, landing, steps, code, active, accept, record = outcome
                    records.append((t, *record, t_after))
                    accepts.append(accept)
                    attempted += 1
                    t = t_after
            if self.resets is not None:  # chunk 1: the attempt just made, cut at its event and reset
                y, k1, t, landing, end = self.resets.after(self, records[-1], y, k1, accepts[-1], before[5], landing)
                records[-1] = (*records[-1][:4], end)
                active = (code == _SUCCESS) & (t < stop)
            if self.tracker is not None:  # chunk 1: a step across a tracked crossing undone, a landing restarted
                y, k1, t, undone, accepts[-1], restarted = self.tracker.after(records[-1], y, k1, accepts[-1], before)
                records[-1] = (*records[-1][:4], t)
                prev = torch.where(undone, before[4], prev)
                landing = torch.where(undone, before[5], landing)
                restarts = restarts + restarted
                active = (code == _SUCCESS) & (t < stop)
            elif self.state_dependent:  # (the tracker notes them as it reads τ at the step's end)
                mark_clamped(self.state_delays, self.outside, t.to(self.dtype).unsqueeze(1), self._blocks(y.detach()),
                             accepts[-1], self.batch)
        accepted = carry.accepted + (torch.cat([a.view(-1, self.batch) for a in accepts]).sum(0) if accepts else 0)
        outputs, last = self.dense_output(records, out_times, t)
        return outputs, _Carry(y, k1, t, h, prev, landing, steps, accepted, code, restarts, *last)

    def attempt(self, y: Tensor, k1: Tensor, t: Tensor, h: Tensor, prev: Tensor, landing: Tensor, steps: Tensor,
                code: Tensor, active: Tensor, landing_points: Tensor, t_stop: Tensor, t_end: Tensor,
                check_max_steps: bool, restart: Tensor | bool | None = None,
                tolerance: tuple[Tensor, Tensor] | None = None) -> tuple:
        """One attempted step of every sample (the loop body; a pure function of its arguments and the
        integrator's constants, so ``compile=True`` can hand it to torch.compile). Returns the updated
        controller state, the accept mask and the step's record (h, y, continuous-extension coefficients).
        ``restart``: the samples sitting on a jump of f, whose first stage is re-evaluated (False: none;
        None: found here, evaluating f for the whole batch whenever the solve has jumps)."""
        opts, rows, c, stages, dtype = self.opts, self.rows, self.tab.c, self.tab.stages, self.dtype
        tolerance = self.tolerance if tolerance is None else tolerance
        if restart is None and self.restarts:
            restart = self.on_jump(active, landing, t)
        if isinstance(restart, Tensor):
            y, k1 = self.restart(y, k1, t, landing, restart)
        h_step, landed, t_land = self.clipped_step(t, h, landing, landing_points)
        t_col, h_col = t.to(dtype).unsqueeze(1), h_step.to(dtype).unsqueeze(1)
        # the stage increments' factor; with delay tangents an explicit zero tangent (fast all-dual products),
        # while the stage times stay plain
        h_hk = _dual(h_col) if self.sensitive else h_col
        inp = self.held_input(landing)
        end_col = self.end_time(t_col, h_col, landed, landing) if self.restarts else None
        hk = [h_hk * k1]
        for i in range(1, stages):
            y_i = y
            for j, a in rows[i]:
                y_i = torch.add(y_i, hk[j], alpha=a)
            k_i = self.field(torch.add(t, h_step, alpha=c[i]) if self.exact_time else None,
                             end_col if c[i] == 1.0 and end_col is not None else torch.add(t_col, h_col, alpha=c[i]),
                             y_i, inp)
            hk.append(h_hk * k_i)
        y_new, k_new = y_i, k_i  # FSAL: the last stage sits at (t + h, y_new)
        # eager: the stage sums as two matrix products (fewest ops); compiled: as elementwise sums, which
        # inductor fuses with the stages into a few loops (a matrix product would split them)
        fuse = torch.compiler.is_compiling()
        if not fuse:
            hk = torch.stack(hk)
        with torch.no_grad():
            err = (_combine(self.tab.b_err, hk) if fuse else (self.b_err @ hk.view(stages, -1)).view_as(y))
            if self.sensitive:  # the tangents: ∂y/∂τ and its local error, held to the same tolerance
                r2 = self.ratio2(*(_primal(x) for x in (y, y_new, err)), tolerance)
                r2 = torch.maximum(r2, self.ratio2(*(_tangent(x) for x in (y, y_new, err)), tolerance))
            else:
                r2 = self.ratio2(y, y_new, err, tolerance)
            accept = (r2 <= 1.0) & active
            log_r2 = r2.clamp_min(1e-20).log_()
            # factor = safety ratio^(−α) ratio_prev^β, in logs; ≤ 1 after a rejection
            factor = torch.nan_to_num(torch.add(prev, log_r2, alpha=-opts.alpha / 2).exp_(), nan=opts.factor_min)
            factor = torch.minimum(factor.clamp_(opts.factor_min, opts.factor_max),
                                   torch.where(accept, self.factor_bounds[1], self.factor_bounds[0]))
            # a step of length 0 (a sample already on its landing point) keeps its proposal
            h_next = torch.where(h_step > 0, h_step, h) * factor.to(h_step.dtype)
            if self.dt_max < math.inf:
                h_next = h_next.clamp_max(self.dt_max)
            t_after = torch.where(accept, t_land, t)
            landing = landing + (accept & landed)
            stuck = (active ^ accept) & ((t + h_next) - t <= opts.dt_min)  # rejected, and h below dt_min
            steps = steps + active
            underflow, nonfinite, max_steps = self.failure_codes
            code = torch.where(stuck, torch.where(r2 < math.inf, underflow, nonfinite), code)
            if check_max_steps:
                code = torch.where(active & (steps >= opts.max_steps) & (t_after < t_end), max_steps, code)
            prev = torch.where(accept, log_r2.clamp_min(math.log(1e-8)) * (opts.beta / 2) + math.log(opts.safety),
                               prev)
            h = torch.where(active, h_next, h)
        # continuous-extension coefficients C_p = Σ_i P_ip hk_i, one (B dim, m) matrix per step
        if fuse:
            coef = torch.stack([_combine(column, hk).flatten() for column in zip(*self.tab.dense)], 1)
        else:
            coef = torch.mm(self.dense_t, hk.view(stages, -1)).t()  # (B dim, m), a transposed view
        record = (h_step, y, coef)
        mask = accept.unsqueeze(1)
        y = torch.where(mask, y_new, y)
        k1 = torch.where(mask, k_new, k1)
        active = (code == _SUCCESS) & (t_after < t_stop)
        return y, k1, t_after, h, prev, landing, steps, code, active, accept, record

    def overflowed(self, record: tuple, active: Tensor) -> Tensor:
        """The active samples whose attempt (``record``: its h, y and continuous-extension coefficients) had
        non-finite stages."""
        with torch.no_grad():
            return active & ~torch.isfinite(record[2].reshape(self.batch, -1)).all(1)

    def replay(self, attempt: Callable, zeroed: Tensor, outcome: tuple, y: Tensor, k1: Tensor, t: Tensor, h: Tensor,
               *rest, **options) -> tuple:
        """``outcome`` of ``attempt(y, k1, t, h, *rest)`` recomputed with the ``zeroed`` samples' steps zero: their
        stages then sit at (t, y), finite, so that autograd's pass back through f meets no 0 · inf = NaN there,
        while they keep the outcome's result (rejected, the step shrunk) and the others get the same values."""
        again = attempt(y, k1, t, torch.where(zeroed, 0.0, h), *rest, **options)
        keep = zeroed.unsqueeze(1)
        return (torch.where(keep, y, again[0]), torch.where(keep, k1, again[1]), *outcome[2:10], again[10])

    def attempts(self, length: int, y: Tensor, k1: Tensor, t: Tensor, h: Tensor, prev: Tensor, landing: Tensor,
                 steps: Tensor, code: Tensor, active: Tensor, landing_points: Tensor, t_stop: Tensor, t_end: Tensor,
                 check_max_steps: bool, tolerance: tuple[Tensor, Tensor]) -> tuple:
        """``length`` attempts of :meth:`attempt` in a row as one scan (``compile=True`` with ``chunk`` > 1): the
        compiled loop runs them without returning to Python. Returns the controller state after the last, the
        number of accepted steps per sample, and the attempts' records (start, h, y, coefficients, end) with the
        attempts on a leading axis."""
        from torch._higher_order_ops import scan

        def one(carry, _):
            *state, accepted = carry
            t = state[2]
            *after, accept, (h_step, y_before, coef) = self.attempt(
                *state, landing_points, t_stop, t_end, check_max_steps, tolerance=tolerance)
            # few outputs (each costs the loop a copy per attempt), none aliasing the carry
            times = torch.stack([t, h_step, after[2]], 1)
            return (*after, accepted + accept), (times, y_before.clone(), coef)

        accepted = torch.zeros_like(steps)
        carry, (times, ys, coefs) = scan(one, (y, k1, t, h, prev, landing, steps, code, active, accepted),
                                         torch.empty(length, device=y.device))
        return (*carry, (times[..., 0], times[..., 1], ys, coefs, times[..., 2]))

    @staticmethod
    def clipped_step(t: Tensor, h: Tensor, landing: Tensor, landing_points: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The step per sample clipped onto its next landing point (hold sample, discontinuity, t_end): its length,
        whether it lands there (also when t + h rounds onto it: else a 0-length step next) and the time after it."""
        target = landing_points.index_select(0, landing)
        gap = target - t
        landed = (h >= gap) | (t + h >= target)
        h_step = torch.minimum(h, gap)
        return h_step, landed, torch.where(landed, target, t + h_step)

    def end_time(self, t_col: Tensor, h_col: Tensor, landed: Tensor, landing: Tensor) -> Tensor:
        """t + h as (batch, 1) in the state's dtype, one ulp before it where the step lands on a jump of f: the
        stages that end such a step see the left limit."""
        ends_on_jump = (landed & self.end_jump.index_select(0, landing)).unsqueeze(1)
        end_col = torch.add(t_col, h_col)
        return torch.where(ends_on_jump, torch.nextafter(end_col, torch.full_like(end_col, -math.inf)), end_col)

    def on_jump(self, active: Tensor, landing: Tensor, t: Tensor) -> Tensor:
        """The active samples sitting on a jump of f (the landing point before ``landing``): their first stage is
        re-evaluated."""
        return active & self.prev_jump.index_select(0, landing) & (t == self.prev_point.index_select(0, landing))

    def restart(self, y: Tensor, k1: Tensor, t: Tensor, landing: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """k1 = f(t⁺, y) for the samples in ``mask`` (sitting on a jump of f), with the time one ulp after t,
        the input of the step ahead and, at t0 + τ, y0 as the delayed state; the others keep theirs (FSAL).

        At t0 + τ_i for a learnable τ_i the jump itself moves with τ_i: y(t⁺) gets the zero-valued term
        (f(t⁻) − f(t⁺)) (τ_i − τ_i) whose τ-derivative, f(t⁻) − f(t⁺), is the jump of ∂y/∂τ there (the
        variational equation's Dirac term); f(t⁺) is then re-evaluated at the corrected state. Returns (y, k1)."""
        t_col = t.to(self.dtype).unsqueeze(1)
        t_col = torch.where(mask.unsqueeze(1), torch.nextafter(t_col, torch.full_like(t_col, math.inf)), t_col)
        inp = self.held_input(landing)
        fresh = self.field(t, t_col, y, inp, right=True)
        if self.moving is not None:
            which = self.moving.index_select(0, landing)
            for i, learn in enumerate(self.learnable):
                if learn is not None:
                    moved = (mask & (which == i)).unsqueeze(1)
                    shift = (learn - learn.detach()).to(self.dtype)
                    y = torch.where(moved, y + (k1 - fresh) * shift, y)
            fresh = self.field(t, t_col, y, inp, right=True)
        return y, torch.where(mask.unsqueeze(1), fresh, k1)

    def pieces(self, records) -> DenseOutput:
        """The step records (start, length, state, continuous-extension coefficients (B dim, m), end) of a segment's
        attempts as a :class:`.dense.DenseOutput`; a record may be a block of attempts (a scanned chunk) with the
        attempts on a leading axis."""
        if all(record[0].dim() == 1 for record in records):  # one record per attempt
            start, length, y0, coef, end = (torch.stack(parts) for parts in zip(*records))
        else:
            blocks = [record if record[0].dim() == 2 else tuple(x.unsqueeze(0) for x in record) for record in records]
            start, length, y0, coef, end = (torch.cat(parts) for parts in zip(*blocks))
        count = start.shape[0]  # S attempts: start, length, end (S, B)
        return DenseOutput(start, length, end, y0.flatten(0, 1),  # record k of sample b in row k B + b
                           coef.reshape(count * self.batch, self.dim * self.dense.shape[1]), self.sizes)

    def dense_output(self, records, out_times: list[float], t_final: Tensor):
        """Evaluate the continuous extension of the accepted step containing each output time, per sample;
        times a sample never reached (it failed earlier) give NaN. Also returns the last accepted step, and
        keeps the pieces when the solve was asked for its dense output."""
        pieces = self.pieces(records)
        count, start, length = pieces.count, pieces.start, pieces.length
        if self.dense_pieces:
            self.pieces_kept = pieces
        rows = torch.arange(self.batch, device=self.device)
        last = torch.searchsorted(pieces.end_rows, t_final.unsqueeze(1)).squeeze(1).clamp_max_(count - 1)
        flat = last * self.batch + rows
        last_step = (start[last, rows], length[last, rows], pieces.y[flat],
                     pieces.coef[flat].view(self.batch * self.dim, self.dense.shape[1]))
        if not out_times:
            return pieces.y.new_zeros(self.batch, 0, self.dim), last_step
        times = torch.tensor(out_times, dtype=torch.float64, device=self.device)
        return pieces.at(times.expand(self.batch, -1)), last_step


def _combine(weights: Sequence[float], terms: Sequence[Tensor]) -> Tensor:
    """Σ_i w_i x_i over the nonzero weights, as elementwise products (the compiled step's stage sums)."""
    pairs = [(w, x) for w, x in zip(weights, terms) if w != 0.0]
    if not pairs:
        return torch.zeros_like(terms[0])
    total = pairs[0][1] * pairs[0][0]
    for w, x in pairs[1:]:
        total = torch.add(total, x, alpha=w)
    return total


_COMPILED: dict[tuple, Callable] = {}


def _compiled_attempt(solver: _Integrator, scanned: bool = False) -> Callable:
    """torch.compile of ``solver.attempt`` with a symbolic batch size (:class:`.compiled.BatchDynamic`), cached per (tableau, system, dtype, device, block
    sizes, step-control options other than the tolerances) so that solves of any batch size, output grid and
    tolerance reuse the compiled kernels (rtol/atol are a tensor argument); the first call pays the compilation
    (FHN dopri5 step on a 2-core CPU: ~9 s CPU plus ~7.5 s of g++; a later process loads the kept code instead,
    ~5.2 s CPU: ~2.4 s importing torch._dynamo and inductor, ~1.3 s tracing the step again, ~1 s hashing torch's
    sources for the cache key and loading the entry, then the solve itself)."""
    opts, system = solver.opts, solver.system
    # a plain callable gets a fresh FunctionSystem wrapper per solve: key it by the callable itself
    system_key = (system.func, system.takes_input) if isinstance(system, FunctionSystem) else system
    key = (scanned, solver.tab.name, system_key, solver.dtype, str(solver.device), tuple(solver.sizes), opts.safety, opts.factor_min, opts.factor_max, opts.alpha, opts.beta, opts.dt_min,
           solver.dt_max, opts.max_steps)
    if key not in _COMPILED:
        if len(_COMPILED) >= 8:
            _COMPILED.pop(next(iter(_COMPILED)))
        keep_compiled_code()
        method = _Integrator.attempts if scanned else _Integrator.attempt
        name = f"{method.__name__}_{solver.tab.name}_{'_'.join(map(str, solver.sizes))}"
        attempt = types.MethodType(own_code(method, name), solver)
        # the batch-sized arguments: y … landing_points (the last one: the number of landing points)
        first = 1 if scanned else 0  # attempts() takes the chunk length first
        # the scan's loop in C++ (cpp_wrapper): Van der Pol sweep, chunk 16, 0.16 -> 0.10 s a solve
        options = {**inductor_options(), **({"cpp_wrapper": True} if scanned and solver.device.type == "cpu" else {})}
        _COMPILED[key] = BatchDynamic(torch.compile(attempt, dynamic=None, options=options),
                                      lambda args: [(x, 0) for x in args[first:first + 10]])
    return _COMPILED[key]


def integrate(tableau: ButcherTableau, system: System, state: tuple[Tensor, ...], t_tensor: Tensor,
              times: list[float], path: InputPath | None, history=None, tstops: list[float] = (),
              jump_times: list[float] = (), dense: bool = False, resets=None, **options) -> Solution:
    """Solve with an embedded explicit RK pair (see the module docstring); ``resets``: events that reset the state
    (:class:`.resets.Resets`).

    Options: ``rtol`` (1e-6), ``atol`` (1e-8); ``max_steps`` (10 000 attempted steps per sample; the step
    records behind the dense output are kept until the end of a segment, so memory grows with the steps);
    ``first_step`` (default: Hairer's estimate); ``dt_min`` (0: a rejected step smaller than this, or lost in
    the time's round-off, stops the sample with STEP_UNDERFLOW, or NONFINITE when the trial was non-finite);
    ``dt_max``; ``safety`` (0.9), ``factor_min`` (0.2), ``factor_max`` (10), ``pi_beta`` (0.2/(q+1); 0 gives
    the I controller); ``checkpoint_segments`` (K equal time segments, each recomputed in the backward pass;
    same values and gradients); ``compile`` (torch.compile of the step, cached per configuration; systems
    without inputs or delays; same steps and values up to round-off); ``chunk`` (attempted steps per host
    synchronisation, see the module docstring; same steps and values); ``cuda_graph`` (False; CUDA solves that
    record no gradient: each chunk of attempts replayed as one CUDA graph captured once per segment, see
    :class:`.triton_step.ChunkGraph` -- the field's Python code then runs only at the capture);
    ``dense`` (False: keep every step's continuous extension, :mod:`.dense`; not with ``checkpoint_segments`` or
    ``cuda_graph``);
    ``control_delay_sensitivity`` (learnable delays: also hold ∂y/∂τ to the tolerance; default True for bosh3,
    False for the 5th-order pairs); ``track_discontinuities`` (True: step onto the kinks that state-dependent
    delays carry into the solution, :mod:`.tracking`; ``stats["discontinuities"]`` counts them per sample)."""
    unknown = sorted(set(options) - set(_OPTION_NAMES))
    if unknown:
        raise TypeError(f"solve: unexpected options {unknown} for adaptive method {tableau.name!r}; "
                        f"expected some of {list(_OPTION_NAMES)}")
    opts = _Options(tableau, **options)
    if dense and opts.segments is not None:
        raise ValueError("dense: the dense output keeps every step, checkpoint_segments recomputes them; use one")
    if dense and opts.cuda_graph:
        raise ValueError("dense: a replayed chunk overwrites its step copies; solve without cuda_graph")
    dtypes = {x.dtype for x in state}
    if len(dtypes) != 1 or not next(iter(dtypes)).is_floating_point:
        raise TypeError(f"y0: adaptive solvers need floating-point blocks of one dtype, got {sorted(map(str, dtypes))}")
    sizes = [x.shape[1] for x in state]
    y0 = state[0] if len(state) == 1 else torch.cat(state, -1)
    # a delay that requires grad: its sensitivity ∂y/∂τ is carried as a forward-mode tangent and error-controlled
    # (not inside the caller's own forward-mode level: levels do not nest)
    sensitive = (opts.control_delay_sensitivity and torch.is_grad_enabled() and not forward_mode_or_transform()
                 and any(tensor is not None for _, tensor in delay_values(system, True)))
    with fwAD.dual_level() if sensitive else contextlib.nullcontext():
        return _integrate(tableau, system, y0, sizes, t_tensor, times, path, history, tstops, jump_times, opts,
                          sensitive, dense, resets)


def _integrate(tableau, system, y0, sizes, t_tensor, times, path, history, tstops, jump_times, opts, sensitive,
               dense, resets=None):
    solver = _Integrator(tableau, system, y0, sizes, times, path, history, opts, tstops, jump_times, sensitive,
                         dense, resets)
    carry = solver.start(y0)
    if resets is not None:
        resets.begin(carry.t, carry.y, sizes)

    outputs = [y0.unsqueeze(1)]
    segments = opts.segments or 1
    bounds = [times[0] + (times[-1] - times[0]) * k / segments for k in range(1, segments)] + [times[-1]]
    position = 1
    for stop in bounds:
        end = position
        while end < len(times) and times[end] <= stop:
            end += 1
        chunk = times[position:end]
        if opts.segments is None or not torch.is_grad_enabled():
            out, carry = solver.segment(carry, stop, chunk)
        else:
            run = lambda *packed, stop=stop, chunk=chunk: _packed(solver.segment(_Carry(*packed), stop, chunk))
            out, *packed = checkpoint(run, *carry.pack(), use_reentrant=False)
            carry = _Carry(*packed)
        outputs.append(out)
        position = end
    ys = torch.cat(outputs, 1) if len(outputs) > 1 else outputs[0]
    blocks = (ys,) if len(sizes) == 1 else ys.split(sizes, -1)
    # f(t0), the starting-step probe, stages − 1 per step (FSAL) and one per restart after a jump of f
    nfe = 1 + (opts.first_step is None) + carry.steps * (tableau.stages - 1) + carry.restarts
    stats = {"steps": carry.steps, "accepted": carry.accepted, "rejected": carry.steps - carry.accepted,
             "nfe": nfe, "t_final": carry.t}
    if solver.state_dependent:
        warn_clamped(system, solver.outside)
    if solver.tracker is not None:
        stats["discontinuities"] = solver.tracker.count  # crossings of kinks by t − τ(t, y) stepped onto
    pieces = solver.pieces_kept
    if pieces is not None:
        pieces.kinks = solver.kinks
        if solver.tracker is not None:
            pieces.sample_kinks = solver.tracker.found()
    return Solution(ts=t_tensor, ys=tuple(blocks), blocks=system.blocks, stats=stats, status=carry.code,
                    dense_output=pieces)


def _packed(result: tuple[Tensor, _Carry]) -> tuple[Tensor, ...]:
    out, carry = result
    return (out, *carry.pack())


def _driver(name: str) -> Callable[..., Solution]:
    tableau = ADAPTIVE_TABLEAUX[name]

    def driver(system, state, t_tensor, times, path, history=None, tstops=(), jump_times=(), dense=False,
               resets=None, **options):
        return integrate(tableau, system, state, t_tensor, times, path, history, tstops, jump_times, dense,
                         resets=resets, **options)

    driver.__name__ = driver.__qualname__ = name
    driver.__doc__ = f"Adaptive {name} (embedded {tableau.order}({tableau.embedded_order}) pair); see odelab.solvers.adaptive."
    return driver


# name -> driver(system, y0, t_tensor, times, path, history=None, **options) -> Solution
ADAPTIVE_METHODS: dict[str, Callable[..., Solution]] = {name: _driver(name) for name in ADAPTIVE_TABLEAUX}
