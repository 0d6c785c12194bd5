"""Stiff ODEs: linearly implicit Rosenbrock methods with one step size per sample. ``rosenbrock23``, Shampine and
Reichelt's Rosenbrock triple (MATLAB's ``ode23s``, order 2, for crude tolerances); ``rodas4``, Hairer and Wanner's
stiffly accurate RODAS (order 4(3), HNW II §VI.4: the method behind their ``rodas.f``); ``rodas4p`` and
``rodas4p2``, Steinebach's RODASP (1995) and its improvement (2020), of the same form and order, whose coefficients
also meet Prothero and Robinson's conditions: where a stiff component is driven by a time-dependent forcing (a
delayed state is one), RODAS's stages are only first order and its order drops (y' = −10³(y − sin t) + cos t:
slope 1.0 at fixed steps, 1302 steps at rtol 1e-6 over [0, 20]), theirs keep about 3 (62 and 60 steps; scipy's
Radau: 67). All take J = ∂f/∂y and T = ∂f/∂t at the step's start per sample by autograd (exact), factor one matrix a
step (batched LU) and solve it once a stage.

``rosenbrock23`` (Shampine & Reichelt 1997, "The MATLAB ODE suite", SIAM J. Sci. Comput. 18(1), §3.1), with
W = I − h d J:

    F0 = f(t, y)
    k1 = W⁻¹ (F0 + h d T)
    F1 = f(t + h/2, y + h/2 k1)
    k2 = W⁻¹ (F1 − k1) + k1
    y_new = y + h k2                                             (order 2, L-stable)
    F2 = f(t + h, y_new)
    k3 = W⁻¹ (F2 − e32 (k2 − F1) − 2 (k1 − F0) + h d T)
    err = h/6 (k1 − 2 k2 + k3)                                   (the local error estimate, O(h³))

with d = 1/(2 + √2), e32 = 6 + √2; its interpolant y(t + θh) = y + h (θ(1 − θ) k1 + θ(θ − 2d) k2) / (1 − 2d).

``rodas4`` (and ``rodas4p``, ``rodas4p2``) in the form (I/(hγ) − J) K_i = f(t + α_i h, y + Σ_j a_ij K_j)
+ Σ_j (c_ij / h) K_j + γ_i h T, i = 1…6, y_new = y + Σ m_i K_i and err = K_6 (stiffly accurate: the last stages sit
at t + h), solved here as (I − hγ J) K_i = hγ F_i + γ Σ_j c_ij K_j + γ γ_i h² T (no division by a zero step); the
coefficients are the published ones (γ = 1/4: Hairer and Wanner's, Steinebach's), and so is each method's continuous
extension of order 3, a combination of the stages y(t + θh) = (1 − θ) y + θ (y_new + (1 − θ)(D2 + θ D3)) that stays
accurate where a Hermite interpolant's f values would carry an off-manifold error times a stiff Jacobian
(Prothero–Robinson at λ = −10⁶: 0.6 against 1e-4).

All: a step is accepted when the per-sample RMS of err / (atol + rtol max(|y|, |y_new|)) is ≤ 1, and the next one
is h times safety · ratio^(−1/q), q = 3 (rosenbrock23) or 4, clamped to [factor_min, factor_max] (≤ 1 after a
rejection). The first step follows Hairer's starting-step algorithm (HNW I §II.4). The interpolant gives the
outputs (the steps never shorten to hit an output time), ``dense=True`` and events. Steps land on every breakpoint
(hold-input sample times, linear-input knots, ``tstops``, ``jump_times``) and on the final time; at a jump of f
the stages at the step's start see the right limit and those at its end the left one (one ulp inside the step).
The error control holds the steps' ends, not the interpolant between them: on a smooth slow manifold (y tracking
cos t under λ = −10⁶) rodas4's steps grow to ~5, longer than a cubic follows cos t; ``tstops=t`` lands on the outputs.

With a constant mass matrix M (``mass=``), M y' = f(t, y): W = M − hγ J, and M multiplies the stages' coupling,
(M − hγ J) K_i = hγ F_i + γ M Σ_j c_ij K_j + γ γ_i h² T (the form of HNW II §VI.4 and rodas.f); rosenbrock23's
k2 and k3 read F1 − M k1 and F2 − e32 (M k2 − F1) − 2 (M k1 − F0) + h d T (each k has y's units, each F M y''s),
for a nonsingular M, as ``ode23s`` allows. A singular M makes a differential-algebraic system (the rows of M's
left null space are algebraic equations 0 = f): rodas4 solves those of index 1 with order 4 (stiffly accurate:
y_new satisfies them at every step's end), from a y0 that satisfies them (checked, or solved for: ``mass.py``).

An attempt costs 3 (rosenbrock23) or 6 (rodas4) evaluations of f and one Jacobian (``stats["jacobians"]``; one
vmapped backward pass from dim 3 on, dim passes below), so these methods pay where explicit pairs are held to tiny
steps by stability rather than accuracy (``benchmarks/stiff.py``). Under gradients J and T are forward-mode
tangents of f (one vmapped ``torch.func.jvp``), recorded by autograd, so that the backward pass differentiates the
discrete steps exactly (discretise-then-optimise), second derivatives of f included; a backward pass from each
step's F0 would make autograd's engine walk every earlier step's graph (Robertson at rtol 1e-6, 180 steps: 4.1 s
→ 0.5 s a forward pass). The batch advances together (one host read an attempt), finished samples held in place by
masks.

Delay systems: y(t − τ_i) at every stage is φ before t0 and otherwise the continuous extension of the sample's
accepted step containing it (:class:`.step_history.StepHistory`, the step records the loop keeps anyway); the steps
are no longer than the smallest delay (a state-dependent one's lower bound), so no stage reaches past the accepted
steps, and t0 with the other kinks is propagated through the constant lags up to the method's order and landed on.
The stage at a step's start reads the right limit (y0 where t − τ = t0: f jumps at t0 + τ when φ(t0) ≠ y0). J is
∂f/∂y of the current state (through τ(t, y) too, for a :class:`~odelab.systems.StateDelay`: its delayed time moves
with y), the delayed states otherwise a known forcing, whose slope ∂f/∂y(t − τ) y'(t − τ) enters T through the
interpolant (the delayed time carries the stage time's derivative); without it the forcing's time dependence falls
on the error estimate (y' = −10⁴ y + 5000 y(t − 1): 12 798 steps instead of 304). Where t − τ(t, y(t)) crosses a
kink the loop steps onto it as the explicit pairs' does (:mod:`.tracking`, ``track_discontinuities``, default True;
f⁻ there is evaluated afresh, and the delayed time held on the far side of a crossing of t0 for the step after it).
Learnable delays (a tensor τ that requires grad) are not read here.
"""
from __future__ import annotations

import math
import types
from dataclasses import dataclass

import torch
from torch import Tensor

from ..systems.base import StateDelay, System
from .adaptive import _Options
from .breakpoints import collect
from .dense import DenseOutput
from .field import check_derivative
from .history import delay_values, mark_clamped, warn_clamped
from .inputs import FunctionInput, Hold, InputPath, Linear
from .mass import check_consistent, consistent_start, mass_matrix
from .solution import Solution, Status
from .step_history import StepHistory, flat_history
from .tracking import Tracker

_D = 1.0 / (2.0 + math.sqrt(2.0))
_E32 = 6.0 + math.sqrt(2.0)
_OPTION_NAMES = ("rtol", "atol", "max_steps", "first_step", "dt_min", "dt_max", "safety", "factor_min", "factor_max",
                 "track_discontinuities")
_SUCCESS, _MAX_STEPS, _UNDERFLOW, _NONFINITE = (int(s) for s in Status)


@dataclass(frozen=True)
class RosenbrockTableau:
    """A Rosenbrock method in the form of the module docstring: γ, per stage α_i and γ_i, strictly lower-triangular
    a and c (row i holds j < i), the solution weights m and the error weights e; ``dense``: the stage weights of
    D2 and D3 in the continuous extension y(t + θh) = (1 − θ) y + θ (y_new + (1 − θ)(D2 + θ D3)); ``order``: the
    error estimate's local order (the controller's exponent is 1/order)."""

    name: str
    order: int
    gamma: float
    alpha: tuple[float, ...]
    gammas: tuple[float, ...]
    a: tuple[tuple[float, ...], ...]
    c: tuple[tuple[float, ...], ...]
    m: tuple[float, ...]
    e: tuple[float, ...]
    dense: tuple[tuple[float, ...], tuple[float, ...]]


def _rodas(name: str, alpha, gammas, a, c, dense) -> RosenbrockTableau:
    """A stiffly accurate six-stage method of RODAS's form (γ = 1/4): ``a`` the rows of stages 2–5, stage 6 at stage
    5's point plus K5, y_new = stage 6's point plus K6, err = K6; ``dense`` the weights of stages 1–5 in D2, D3."""
    last = a[-1] + (1.0,)
    return RosenbrockTableau(name=name, order=4, gamma=0.25, alpha=alpha, gammas=gammas, a=((),) + a + (last,),
                             c=((),) + c, m=last + (1.0,), e=(0.0,) * 5 + (1.0,), dense=dense)


RODAS4 = _rodas(  # Hairer & Wanner, HNW II §VI.4, Table 4.2 ("RODAS"), as in their rodas.f
    "rodas4", alpha=(0.0, 0.386, 0.21, 0.63, 1.0, 1.0), gammas=(0.25, -0.1043, 0.1035, -0.03620000000000023, 0.0, 0.0),
    a=((1.544,), (0.9466785280815826, 0.2557011698983284), (3.314825187068521, 2.896124015972201, 0.9986419139977817),
       (1.221224509226641, 6.019134481288629, 12.53708332932087, -0.687886036105895)),
    c=((-5.6688,), (-2.430093356833875, -0.2063599157091915),
       (-0.1073529058151375, -9.594562251023355, -20.47028614809616),
       (7.496443313967647, -10.24680431464352, -33.99990352819905, 11.70890893206160),
       (8.083246795921522, -7.981132988064893, -31.52159432874371, 16.31930543123136, -6.058818238834054)),
    dense=((10.12623508344586, -7.487995877610167, -34.80091861555747, -7.992771707568823, 1.025137723295662),
           (-0.6762803392801253, 6.087714651680015, 16.43084320892478, 24.76722511418386, -6.594389125716872)))

RODAS4P = _rodas(  # Steinebach 1995 ("RODASP"): the order conditions of Prothero–Robinson's problem as well
    "rodas4p", alpha=(0.0, 0.75, 0.21, 0.63, 1.0, 1.0), gammas=(0.25, -0.5, -0.023504, -0.0362, 0.0, 0.0),
    a=((3.0,), (1.831036793486759, 0.4955183967433795), (2.304376582692669, -0.05249275245743001, -1.176798761832782),
       (-7.170454962423024, -4.741636671481785, -16.31002631330971, -1.062004044111401)),
    c=((-12.0,), (-8.791795173947035, -2.207865586973518), (10.81793056857153, 6.780270611428266, 19.5348594464241),
       (34.19095006749676, 15.49671153725963, 54.7476087596413, 14.16005392148534),
       (34.62605830930532, 15.30084976114473, 56.99955578662667, 18.40807009793095, -5.714285714285717)),
    dense=((25.09876703708589, 11.62013104361867, 28.49148307714626, -5.664021568594133, 0.0),
           (1.638054557396973, -0.7373619806678748, 8.47791821923899, 15.9925314877952, -1.882352941176471)))

RODAS4P2 = _rodas(  # Steinebach 2020, "Improvement of Rosenbrock-Wanner method RODASP"
    "rodas4p2", alpha=(0.0, 0.75, 0.321448134013046, 0.519745732277726, 1.0, 1.0),
    gammas=(0.25, -0.5, -0.189532918363016, 0.085612108792769, 0.0, 0.0),
    a=((3.0,), (0.906377755268814, -0.189707390391685), (3.758617027739064, 1.161741776019525, -0.849258085312803),
       (7.089566927282776, 4.573591406461604, -8.423496976860259, -0.959280113459775)),
    c=((-12.0,), (-6.354581592719008, 0.338972550544623), (-8.575016317114033, -7.606483992117508, 12.22499765012482),
       (-5.888975457523102, -8.157396617841821, 24.805546872612922, 12.790401512796979),
       (-4.408651676063871, -6.692003137674639, 24.625568527593117, 16.627521966636085, -5.714285714285718)),
    dense=((-5.323528268423303, -10.042123754867493, 17.175254928256965, -5.079931171878093, -0.016185991706112),
           (6.984505741529879, 6.914061169603662, -0.849178943070653, 18.104410789349338, -3.516963011559032)))


class _Rosenbrock:
    """The per-sample loop for one system, input path and option set."""

    def __init__(self, system: System, y0: Tensor, sizes: list[int], times: list[float], path: InputPath | None,
                 opts, tstops, jump_times, tableau: RosenbrockTableau | None = None, mass: Tensor | None = None,
                 resets=None, history=None):
        self.system, self.sizes, self.opts, self.path = system, sizes, opts, path
        self.mass = mass  # None: M = I
        self.resets = resets  # events that reset the state (.resets.Resets), after every accepted step
        self.tableau = tableau  # None: rosenbrock23
        self.m = 2 if tableau is None else 3  # the interpolant's degree
        self.order = 2 if tableau is None else tableau.order  # of the solution (rodas4: 4, its estimate's too)
        self.exponent = 1.0 / (self.order + 1 if tableau is None else tableau.order)
        self.name = "rosenbrock23" if tableau is None else tableau.name
        self.batch, self.dim = y0.shape
        self.dtype, self.device = y0.dtype, y0.device
        self.t0, self.t_end = times[0], times[-1]
        time = dict(dtype=torch.float64, device=self.device)
        if path is not None and not isinstance(path, (Hold, Linear, FunctionInput)):
            raise TypeError(f"u: {self.name} takes hold, linear or callable inputs, got {type(path).__name__}")
        # y(t − τ_i) read from the accepted steps (or φ), the steps no longer than the smallest delay: constant lags,
        # and state-dependent ones (τ(t, y) per stage, clamped to its bounds; the history reaches to the upper one)
        delays = delay_values(system, state_dependent=True) if system.is_delay else []
        self.delays = tuple(value for value, _ in delays)
        self.state_delays = tuple(tau if isinstance(tau, StateDelay) else None for tau in system.delays) \
            if system.is_delay else ()
        self.outside = [torch.zeros(self.batch, dtype=torch.bool, device=self.device) for _ in self.state_delays]
        scale = abs(self.t0) + abs(self.t_end) + max(self.delays, default=0.0)
        self.history = None
        if self.delays:
            self.history = StepHistory(flat_history(system, sizes, history, y0, self.t0), self.t0, max(self.delays),
                                       eps=8 * math.ulp(scale))
            time0 = torch.full((self.batch,), self.t0, dtype=torch.float64, device=self.device)
            # the records before the first step: φ's reach only (the loop reloads its own pieces)
            self.history.load([(time0, torch.ones_like(time0), y0, y0.new_zeros(self.batch, self.dim * self.m), time0)],
                              time0, torch.zeros_like(time0, dtype=torch.bool))
        shortest = [value if tau is None else tau.lower for value, tau in zip(self.delays, self.state_delays)]
        self.dt_max = min((opts.dt_max, *shortest))
        lags = tuple(value for value, tau in zip(self.delays, self.state_delays) if tau is None)
        breakpoints = collect(self.t0, self.t_end, path, tstops, jump_times, lags, self.order,
                              tol=64 * math.ulp(scale), history_kinks=getattr(history, "kinks", ()))
        self.kinks = breakpoints.kinks
        # where t − τ(t, y(t)) crosses a kink (t0 first): found after every attempt and stepped onto (.tracking)
        self.tracker = None
        if any(tau is not None for tau in self.state_delays) and opts.track:
            reach = self.t0 - max(self.delays)
            earlier = tuple((p, m) for p, m in getattr(history, "kinks", ()) if reach < p < self.t0)
            self.tracker = Tracker(self, breakpoints.kinks + earlier, self.order, 64 * math.ulp(scale),
                                   getattr(history, "sample_kinks", None), lazy_restart=True)
        points = list(breakpoints.stops) + [self.t_end]
        self.landing = torch.tensor(points + [math.inf], **time)
        jumps = set(breakpoints.jumps)
        self.start_jump = torch.tensor([False] + [p in jumps for p in points], dtype=torch.bool, device=self.device)
        self.end_jump = torch.tensor([p in jumps for p in points] + [False], dtype=torch.bool, device=self.device)
        self.hold_index = None
        if isinstance(path, Hold):  # the sample driving the steps towards landing point k: u_n on (t_{n−1}, t_n]
            previous = torch.cat([torch.tensor([self.t0], **time), self.landing[:-1]])
            index = torch.searchsorted(path.time_tensor(), previous, right=True)
            self.hold_index = index.clamp_max_(len(path.times) - 1)
        self.linear_times = path.time_tensor() if isinstance(path, Linear) else None
        self.eye = torch.eye(self.dim, dtype=self.dtype, device=self.device)
        self.lhs = self.eye if mass is None else mass  # W = M − hγ J
        # y' = M⁺ f for the starting-step heuristic (the algebraic components' f is ~0 at a consistent start)
        self.slope_of = None if mass is None else torch.linalg.pinv(mass.detach())
        self.batched = self.dim > 2  # J by one vmapped backward pass (dim passes below that: as fast)
        self.forward_mode = True  # J by forward-mode tangents where the steps keep their graphs
        self.checked = False

    def _blocks(self, y: Tensor) -> tuple[Tensor, ...]:
        return (y,) if len(self.sizes) == 1 else tuple(y.split(self.sizes, -1))

    def matrix(self, step: Tensor, scaled: Tensor, jac: Tensor) -> Tensor:
        """W = M − hγ J per sample; the identity for a sample held in place (h = 0), where a singular M would make
        its solves NaN, and their gradients with them (0 · NaN, through the masks)."""
        matrix = self.lhs - scaled.unsqueeze(2) * jac
        if self.mass is None:
            return matrix
        return torch.where((step == 0).view(-1, 1, 1), self.eye, matrix)

    def held_input(self, landing: Tensor) -> Tensor | None:
        """The hold sample driving the steps towards landing point ``landing`` (per sample)."""
        return None if self.hold_index is None else self.path.at_indices(self.hold_index[landing])

    def times_mass(self, k: Tensor) -> Tensor:
        """M k per sample (k itself without a mass matrix)."""
        return k if self.mass is None else (self.mass @ k.unsqueeze(-1)).squeeze(-1)

    def field(self, t: Tensor, y: Tensor, held: Tensor | None, t_col: Tensor | None = None,
              right: bool = False) -> Tensor:
        """f(t, y) per sample: t (batch,) float64 stage times; ``held``: the step's hold sample; ``t_col`` the
        (batch, 1) time f sees (default: t in the state's dtype), which carries the gradient that gives T (through
        a linear input and the delayed states too: ∂f/∂y(t − τ) y'(t − τ)); ``right``: delayed reads at t0 take
        y0, the right limit (the stage at a step's start)."""
        moving = t
        if t_col is None:
            t_col = t.to(self.dtype).unsqueeze(1)
        elif self.linear_times is not None or self.history is not None:
            moving = t + (t_col - t_col.detach()).squeeze(1).double()  # t's value, t_col's derivative
        inp = held
        if self.linear_times is not None:
            inp = self.path.at_times(moving, self.linear_times)
        elif isinstance(self.path, FunctionInput):
            inp = self.path.at(t_col)
        blocks = self._blocks(y)
        delayed = tuple(self._blocks(self._delayed(i, moving, t_col, blocks, right)) for i in range(len(self.delays)))
        out = self.system.derivative(t_col, blocks, inp, *delayed)
        if not self.checked:
            check_derivative(self.system, blocks, out)
            self.checked = True
        return out[0] if len(out) == 1 else torch.cat(out, -1)

    def _delayed(self, i: int, t: Tensor, t_col: Tensor, blocks: tuple[Tensor, ...], right: bool) -> Tensor:
        """y(t − τ_i) per sample; a state-dependent τ_i(t, y) clamped to its bounds, its delayed time held on one side
        of a tracked crossing of t0 (:mod:`.tracking`)."""
        delay = self.state_delays[i]
        if delay is None:
            return self.history.at(t - self.delays[i], right)
        s = t - delay.evaluate(t_col, blocks, self.batch).clamp(delay.lower, delay.upper)
        return self.history.at(s if self.tracker is None else self.tracker.bound(i, s), right)

    def slope(self, y: Tensor, t: Tensor, landing: Tensor) -> Tensor:
        """f(t, y) at the samples' times, the delayed times held where the tracker holds them (for :mod:`.tracking`:
        the left limit at a crossing it landed on)."""
        return self.field(t, y, self.held_input(landing))

    def restart(self, y: Tensor, k1: Tensor, t: Tensor, landing: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """f(t⁺, y) for the samples in ``mask`` (the tracker holds their delayed times on the far side of the
        crossing they landed on), k1 for the others; y unchanged (the tracker's interface of the explicit loop)."""
        fresh = self.field(t, y, self.held_input(landing), right=True)
        return y, torch.where(mask.unsqueeze(1), fresh, k1)

    def linearise(self, t: Tensor, y: Tensor, held: Tensor | None, track: bool) -> tuple[Tensor, Tensor, Tensor]:
        """F0 = f(t, y), J = ∂f/∂y (batch, dim, dim) and T = ∂f/∂t (batch, dim), by dim backward passes through F0
        (the samples are independent, so one pass gives row i of every sample's J); ``track``: keep their graphs.
        Under ``track`` they come from forward mode instead (:meth:`_tangents`): a backward pass from F0 would walk
        the graph of every step before (autograd's engine visits all it can reach), quadratic in the steps."""
        if track and self.forward_mode:
            found = self._tangents(t, y, held)
            if found is not None:
                return found
        with torch.enable_grad():
            y_in = y if track and y.requires_grad else y.detach().requires_grad_(True)
            t_col = t.to(self.dtype).unsqueeze(1).clone().requires_grad_(True)
            f0 = self.field(t, y_in, held, t_col, right=True)
            jac, dfdt = self._batched_rows(f0, y_in, t_col, track) if self.batched else (None, None)
            if jac is None:
                rows, slopes = [], []
                for i in range(self.dim):
                    d_y, d_t = torch.autograd.grad(f0[:, i].sum(), (y_in, t_col), retain_graph=True,
                                                   create_graph=track, allow_unused=True)
                    rows.append(torch.zeros_like(y) if d_y is None else d_y)
                    slopes.append(torch.zeros_like(t_col) if d_t is None else d_t)
                jac, dfdt = torch.stack(rows, 1), torch.cat(slopes, 1)
        if not track:
            return f0.detach(), jac.detach(), dfdt.detach()
        return f0, jac, dfdt

    def _tangents(self, t: Tensor, y: Tensor, held: Tensor | None) -> tuple[Tensor, Tensor, Tensor] | None:
        """F0, J (its columns) and T as forward-mode tangents of f along e_1 … e_dim and the time, vmapped: local
        to the step, and recorded by autograd so that the backward pass differentiates them; None (then never
        again) where the field's operations have no forward-mode or vmap rule."""
        t_col = t.to(self.dtype).unsqueeze(1)
        f0 = self.field(t, y, held, t_col, right=True)
        seeds_y = torch.cat([self.eye, torch.zeros_like(self.eye[:1])]).unsqueeze(1).expand(-1, *y.shape)
        seeds_t = torch.cat([torch.zeros(self.dim, 1, 1, dtype=self.dtype, device=self.device),
                             torch.ones(1, 1, 1, dtype=self.dtype, device=self.device)]).expand(-1, *t_col.shape)
        along = lambda dy, dt: torch.func.jvp(lambda yv, tv: self.field(t, yv, held, tv, right=True), (y, t_col),
                                              (dy, dt))[1]
        try:
            columns = torch.func.vmap(along)(seeds_y, seeds_t)  # (dim + 1, batch, dim)
        except (RuntimeError, NotImplementedError):
            self.forward_mode = False
            return None
        return f0, columns[:-1].permute(1, 2, 0), columns[-1]

    def _batched_rows(self, f0: Tensor, y_in: Tensor, t_col: Tensor, track: bool):
        """J and T from one vmapped backward pass (``is_grads_batched``: 1.2–2.3× faster than dim passes from
        dim 8 on), or (None, None) where the field's operations do not batch their backward (then never again)."""
        seeds = self.eye.unsqueeze(1).expand(self.dim, *f0.shape)
        try:
            d_y, d_t = torch.autograd.grad(f0, (y_in, t_col), grad_outputs=seeds, retain_graph=True,
                                           create_graph=track, allow_unused=True, is_grads_batched=True)
        except RuntimeError:
            self.batched = False
            return None, None
        jac = torch.zeros_like(seeds).transpose(0, 1) if d_y is None else d_y.transpose(0, 1)
        dfdt = f0.new_zeros(f0.shape) if d_t is None else d_t.squeeze(-1).T
        return jac, dfdt

    def initial_step(self, y0: Tensor, f0: Tensor, held: Tensor | None) -> Tensor:
        """Hairer's starting step per sample for the method's order p: h0 = 0.01 ‖y0‖/‖f0‖, an Euler probe,
        h1 = (0.01 / max(‖f0‖, ‖f'‖))^(1/(p+1)), h = min(100 h0, h1) (per-sample RMS norms)."""
        opts = self.opts
        cap = min(self.t_end - self.t0, self.dt_max, float(self.landing[0]) - self.t0)
        t = torch.full((self.batch,), self.t0, dtype=torch.float64, device=self.device)
        if opts.first_step is not None:
            return torch.full_like(t, min(opts.first_step, cap))
        with torch.no_grad():
            y0, f0 = y0.detach(), f0.detach()
            slope = (lambda f: f) if self.slope_of is None else (lambda f: (self.slope_of @ f.unsqueeze(-1))[..., 0])
            f0 = slope(f0)
            scale = y0.abs() * opts.rtol + opts.atol
            rms = lambda x: (x / scale).square().mean(1).double().sqrt()
            d0, d1 = rms(y0), rms(f0)
            h0 = torch.where((d0 < 1e-5) | (d1 < 1e-5), torch.full_like(d0, 1e-6), 0.01 * d0 / d1).clamp_max(cap)
            f1 = slope(self.field(t + h0, y0 + h0.to(self.dtype).unsqueeze(1) * f0, held))
            d2 = rms(f1 - f0) / h0
            top = torch.maximum(d1, d2)
            h1 = torch.where(top <= 1e-15, (h0 * 1e-3).clamp_min(1e-6), (0.01 / top) ** (1.0 / (self.order + 1)))
            return torch.nan_to_num(torch.minimum(100 * h0, h1).clamp_max(cap), nan=cap)

    def run(self, y0: Tensor, track: bool, f_start: Tensor) -> tuple[DenseOutput, Tensor, dict]:
        """Advance every sample to t_end (``f_start``: f at t0, for the first step): the pieces (one per attempt),
        the status and the statistics."""
        opts, batch = self.opts, self.batch
        t = torch.full((batch,), self.t0, dtype=torch.float64, device=self.device)
        landing = torch.zeros(batch, dtype=torch.int64, device=self.device)
        zeros = torch.zeros(batch, dtype=torch.int64, device=self.device)
        steps, accepted, code, restarts = zeros, zeros, zeros.clone(), zeros
        held = None if self.hold_index is None else self.path.at_indices(self.hold_index[landing])
        h = self.initial_step(y0, f_start, held)
        if self.tracker is not None:
            self.tracker.begin(t, y0)
        y = y0
        last = (t, torch.ones_like(t), y0, y0.new_zeros(batch, self.dim * self.m))  # a piece ending at t0 (θ = 0: y0)
        pieces = [(*last, t)]
        while True:
            active = (code == _SUCCESS) & (t < self.t_end)
            if self.history is None:
                if not bool(active.any()):
                    break
            else:  # one host read: going on, and whether the history's window reaches back a full delay
                going, short = torch.stack([active.any(), self.history.load(pieces, t, active)]).tolist()
                if short:
                    self.history.window *= 2
                    continue
                if not going:
                    break
            if self.tracker is not None:  # steps cut to end on each sample's tracked crossing
                h = self.tracker.clip(t, h)
            target = self.landing.index_select(0, landing)
            room = target - t
            lands = h >= room * (1 - 1e-12)
            step = torch.where(active, torch.where(lands, room, h), torch.zeros_like(h))
            t_new = torch.where(lands, target, t + step)
            held = None if self.hold_index is None else self.path.at_indices(self.hold_index[landing])
            # one ulp inside the step where f jumps: the right limit at its start, the left limit at its end
            first = torch.where(self.start_jump.index_select(0, landing) & (t == self.landing.index_select(
                0, (landing - 1).clamp_min(0))) & (landing > 0), torch.nextafter(t, t_new), t)
            end = torch.where(lands & self.end_jump.index_select(0, landing), torch.nextafter(t_new, t), t_new)
            attempt = self.attempt if self.tableau is None else self.attempt_tableau
            y_new, err, coef, finite = attempt(t, first, end, step, y, held, track)
            broken = active & ~finite
            if track and bool(broken.any()):
                # a singular W or overflowed stages: autograd's pass back through them would meet 0 · NaN, so the
                # attempt is recomputed with those samples' steps zero (finite); they stay rejected (``finite``)
                y_new, err, coef, _ = attempt(t, first, torch.where(broken, t, end),
                                              torch.where(broken, torch.zeros_like(step), step), y, held, track)
            scale = torch.maximum(y.abs(), y_new.abs()).detach() * opts.rtol + opts.atol
            ratio = (err.detach() / scale).square().mean(1).double().sqrt()
            ratio = torch.where(finite & torch.isfinite(ratio), ratio, torch.inf)
            accept = active & (ratio <= 1.0)
            factor = (opts.safety * ratio.clamp_min(1e-10) ** -self.exponent).clamp(opts.factor_min, opts.factor_max)
            factor = torch.where(accept, factor, factor.clamp_max(1.0))
            h_next = torch.where(active, (step * factor).clamp_max(self.dt_max), h)
            rejected = active & ~accept
            lost = rejected & ((h_next <= opts.dt_min) | (t + h_next == t))
            steps = steps + active
            accepted = accepted + accept
            code = torch.where(lost, torch.where(finite, _UNDERFLOW, _NONFINITE), code)
            keep = accept.unsqueeze(1)
            trial = (t, step, y, coef)  # the attempt's record (the tracker reads a rejected trial's interpolant too)
            previous = last
            last = (torch.where(accept, t, last[0]), torch.where(accept, step, last[1]),
                    torch.where(keep, y, last[2]), torch.where(keep, coef, last[3]))
            y = torch.where(keep, y_new, y)
            t = torch.where(accept, t_new, t)
            before = landing
            landing = landing + (accept & lands)
            h = torch.where(accept & lands, torch.maximum(h_next, h), h_next)
            if self.tracker is not None:  # a step across a tracked crossing undone, a landing restarted there
                y, _, t, undone, _, restarted = self.tracker.after(
                    (*trial, t), y, None, accept, (trial[2], None, trial[0], None, None, before, None, None, active))
                accepted = accepted - undone.long()
                restarts = restarts + restarted
                landing = torch.where(undone, before, landing)
                last = tuple(torch.where(undone.view(-1, *[1] * (a.dim() - 1)), a, b) for a, b in zip(previous, last))
            elif self.state_delays:  # (the tracker notes them as it reads τ at the step's end)
                mark_clamped(self.state_delays, self.outside, t.to(self.dtype).unsqueeze(1), self._blocks(y.detach()),
                             accept, batch)
            if self.resets is not None:  # the accepted steps cut at their events, the state reset there
                y, _, t, landing, _ = self.resets.after(_Field(self), (*last, t), y, y, accept, before, landing)
            pieces.append((*last, t))
            code = torch.where((code == _SUCCESS) & (t < self.t_end) & (steps >= opts.max_steps), _MAX_STEPS, code)
        start, length, base, coef, end = (torch.stack(x) for x in zip(*pieces))
        count = start.shape[0]
        dense = DenseOutput(start, length, end, base.reshape(count * batch, self.dim),
                            coef.reshape(count * batch, self.dim * self.m), self.sizes)
        dense.kinks = self.kinks
        return dense, code, {"steps": steps, "accepted": accepted, "rejected": steps - accepted, "t_final": t,
                             "restarts": restarts}

    def attempt(self, t: Tensor, first: Tensor, end: Tensor, step: Tensor, y: Tensor, held: Tensor | None,
                track: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """One Rosenbrock step of every sample (see the module docstring): y_new, err, the interpolant's
        coefficients (C1, C2) as (batch, dim 2), and whether the linear solves were finite."""
        f0, jac, dfdt = self.linearise(first, y, held, track)
        h = step.to(self.dtype).unsqueeze(1)
        hd = h * _D
        lu, pivots, info = torch.linalg.lu_factor_ex(self.matrix(step, hd, jac))
        solve = lambda rhs: torch.linalg.lu_solve(lu, pivots, rhs.unsqueeze(-1)).squeeze(-1)
        k1 = solve(f0 + hd * dfdt)
        f1 = self.field(t + 0.5 * step, y + 0.5 * h * k1, held)
        m1 = self.times_mass(k1)
        k2 = solve(f1 - m1) + k1
        y_new = y + h * k2
        f2 = self.field(end, y_new, held)
        k3 = solve(f2 - _E32 * (self.times_mass(k2) - f1) - 2.0 * (m1 - f0) + hd * dfdt)
        err = h / 6.0 * (k1 - 2.0 * k2 + k3)
        c1, c2 = h * (k1 - 2 * _D * k2) / (1 - 2 * _D), h * (k2 - k1) / (1 - 2 * _D)
        coef = torch.stack([c1, c2], -1).reshape(y.shape[0], -1)
        finite = (info == 0) & torch.isfinite(y_new).all(1) & torch.isfinite(err).all(1)
        return y_new, err, coef, finite

    def attempt_tableau(self, t: Tensor, first: Tensor, end: Tensor, step: Tensor, y: Tensor, held: Tensor | None,
                        track: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """One step of the tableau's method (see the module docstring): y_new, err, its continuous extension's
        coefficients (C1, C2, C3) as (batch, dim 3), and whether the linear solves were finite."""
        tab = self.tableau
        f0, jac, dfdt = self.linearise(first, y, held, track)
        h = step.to(self.dtype).unsqueeze(1)
        hg = h * tab.gamma
        lu, pivots, info = torch.linalg.lu_factor_ex(self.matrix(step, hg, jac))
        solve = lambda rhs: torch.linalg.lu_solve(lu, pivots, rhs.unsqueeze(-1)).squeeze(-1)
        slope = h * h * dfdt
        stages = []
        for i, (alpha, gamma_i) in enumerate(zip(tab.alpha, tab.gammas)):
            if i == 0:
                value = f0
            else:
                when = end if alpha == 1.0 else t + alpha * step
                value = self.field(when, y + sum(a * k for a, k in zip(tab.a[i], stages)), held)
            coupled = sum((c * k for c, k in zip(tab.c[i], stages)), torch.zeros_like(y))
            rhs = hg * value + tab.gamma * self.times_mass(coupled)
            if gamma_i:
                rhs = rhs + (tab.gamma * gamma_i) * slope
            stages.append(solve(rhs))
        y_new = y + sum(m * k for m, k in zip(tab.m, stages) if m)
        err = sum(e * k for e, k in zip(tab.e, stages) if e)
        d2, d3 = (sum(w * k for w, k in zip(weights, stages)) for weights in tab.dense)
        coef = torch.stack([y_new - y + d2, d3 - d2, -d3], -1)  # the continuous extension in powers of θ
        finite = (info == 0) & torch.isfinite(y_new).all(1) & torch.isfinite(err).all(1)
        return y_new, err, coef.reshape(y.shape[0], -1), finite


def integrate_rosenbrock(system: System, state: tuple[Tensor, ...], t_tensor: Tensor, times: list[float],
                         path: InputPath | None, history=None, tstops=(), jump_times=(), dense: bool = False,
                         tableau: RosenbrockTableau | None = None, mass=None, initialize: str = "check",
                         resets=None, **options) -> Solution:
    """Solve a stiff ODE with ``rosenbrock23`` (``tableau`` None) or a Rosenbrock tableau (see the module
    docstring), or M y' = f(t, y) with a constant ``mass`` matrix M (see :mod:`odelab.solvers.mass`), from a y0
    that satisfies its algebraic equations (``initialize="check"``) or whose algebraic unknowns are solved for
    (``"algebraic"``). Options: ``rtol`` (1e-6), ``atol`` (1e-8), ``max_steps`` (10 000 attempts per sample),
    ``first_step``, ``dt_min``, ``dt_max``, ``safety`` (0.9), ``factor_min`` (0.2), ``factor_max`` (5)."""
    name = "rosenbrock23" if tableau is None else tableau.name
    if initialize not in ("check", "algebraic"):
        raise ValueError(f"initialize: expected 'check' (y0 must satisfy the algebraic equations) or 'algebraic' "
                         f"(solve for its algebraic components), got {initialize!r}")
    if initialize == "algebraic" and mass is None:
        raise ValueError("initialize: 'algebraic' solves the algebraic equations of a singular mass matrix; none "
                         "was given (mass=)")
    unknown = sorted(set(options) - set(_OPTION_NAMES))
    if unknown:
        raise TypeError(f"solve: unexpected options {unknown} for method {name!r}; expected some of "
                        f"{list(_OPTION_NAMES)}")
    if system.is_delay:
        for i, tau in enumerate(system.delays):
            if isinstance(tau, Tensor) and tau.requires_grad:
                raise ValueError(f"{type(system).__name__}.delays[{i}]: {name} reads constant and state-dependent "
                                 f"delays; this one is learnable (requires grad): solve it with dopri5, tsit5 or bosh3")
        if resets is not None:
            raise ValueError("reset: events with resets are solved for ODEs")
    elif history is not None:
        raise ValueError(f"history: {type(system).__name__} declares no delays")
    options.setdefault("factor_max", 5.0)
    order = 2 if tableau is None else tableau.order
    opts = _Options(types.SimpleNamespace(order=order, embedded_order=order), **options)
    dtypes = {x.dtype for x in state}
    if len(dtypes) != 1 or not next(iter(dtypes)).is_floating_point:
        raise TypeError(f"y0: {name} needs floating-point blocks of one dtype, got {sorted(map(str, dtypes))}")
    sizes = [x.shape[1] for x in state]
    y0 = state[0] if len(state) == 1 else torch.cat(state, -1)
    if mass is not None:
        mass = mass_matrix(mass, y0, singular=tableau is not None, name=name)
    solver = _Rosenbrock(system, y0, sizes, times, path, opts, tstops, jump_times, tableau, mass, resets, history)
    # f at t0 from y0's value alone: a gradient there comes from parameters (of the system, of a plain callable's
    # closure, of the input), and then the steps keep their graphs
    t0 = torch.full((y0.shape[0],), times[0], dtype=torch.float64, device=y0.device)
    held = None if solver.hold_index is None else solver.path.at_indices(solver.hold_index[:1].expand(y0.shape[0]))
    if mass is not None and initialize == "algebraic":
        y0 = consistent_start(mass, y0, lambda y: solver.field(t0, y, held),
                              lambda y: solver.linearise(t0, y, held, False)[:2])
    f_start = solver.field(t0, y0.detach(), held)
    if mass is not None:
        check_consistent(mass, f_start.detach(), "start on the constraint manifold, or solve with "
                         "initialize='algebraic'" if initialize == "check" else "Newton's method from y0 did not "
                         "reach it (no root nearby, or U_nᵀ J V_n singular: a DAE of index above 1?)")
    track = torch.is_grad_enabled() and (y0.requires_grad or f_start.requires_grad)
    if resets is not None:
        resets.begin(t0, y0, sizes)
    pieces, code, stats = solver.run(y0, track, f_start)
    outputs = [y0.unsqueeze(1)]
    if len(times) > 1:
        later = torch.tensor(times[1:], dtype=torch.float64, device=y0.device).expand(y0.shape[0], -1)
        outputs.append(pieces.at(later, unreached=not bool((code == _SUCCESS).all())))
    ys = torch.cat(outputs, 1)
    per_attempt = 3 if tableau is None else len(tableau.alpha)  # one evaluation a stage
    # f(t0), the probe, and those of the tracked crossings (f on either side of one where f jumps)
    stats["nfe"] = 1 + (solver.opts.first_step is None) + per_attempt * stats["steps"] + stats.pop("restarts")
    stats["jacobians"] = stats["steps"]
    if solver.state_delays:
        warn_clamped(system, solver.outside)
    if solver.tracker is not None:
        stats["discontinuities"] = solver.tracker.count  # crossings of kinks by t − τ(t, y) stepped onto
        pieces.sample_kinks = solver.tracker.found()
    return Solution(ts=t_tensor, ys=tuple(ys.split(sizes, -1)) if len(sizes) > 1 else (ys,), blocks=system.blocks,
                    stats=stats, status=code, dense_output=pieces if dense else None)


class _Field:
    """The Rosenbrock loop as :class:`.resets.Resets` calls an integrator: f(t, t_col, y, inp) and the held input."""

    def __init__(self, solver: _Rosenbrock):
        self.solver = solver

    def field(self, t: Tensor, t_col: Tensor, y: Tensor, inp: Tensor | None) -> Tensor:
        return self.solver.field(t, y, inp, t_col)

    def held_input(self, landing: Tensor) -> Tensor | None:
        return self.solver.held_input(landing)


def _driver(tableau: RosenbrockTableau | None):
    def driver(system, state, t_tensor, times, path, history=None, tstops=(), jump_times=(), dense=False, **options):
        return integrate_rosenbrock(system, state, t_tensor, times, path, history, tstops, jump_times, dense,
                                    tableau, **options)
    return driver


# name -> driver(system, y0, t_tensor, times, path, history=None, **options) -> Solution
ROSENBROCK_METHODS = {"rosenbrock23": _driver(None), "rodas4": _driver(RODAS4), "rodas4p": _driver(RODAS4P),
                      "rodas4p2": _driver(RODAS4P2)}
