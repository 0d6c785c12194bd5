"""Discontinuities and the user-facing time conventions of ``odelab.solve`` (issue 12): ``jump_times`` and
``tstops``, input knots as step boundaries, delays propagating breakpoints, the history's jump at t0, learnable
delays under every method, ``t`` as a tensor for user callables, the derivative shape check, integration
backwards in time. References: closed forms and the exact piecewise-polynomial method of steps
(tests/helpers.py), central differences of the exact solution for gradients."""
import bisect
import math
from fractions import Fraction

import numpy as np
import pytest
import torch

import odelab
from odelab.solvers.breakpoints import collect, merge, propagate
from odelab.solvers.inputs import Hold, Linear
from odelab.systems import System

from helpers import linear_ode_exact, polynomial_dde_exact

F64 = torch.float64
ADAPTIVE = ["dopri5", "tsit5", "bosh3"]


# -- the breakpoint module -----------------------------------------------------------------------------------

def test_collect_sources_depths_and_merging():
    hold = Hold(torch.zeros(1, 3, 1), [0.0, 0.5, 2.0])
    bp = collect(0.0, 3.0, hold, tstops=[0.25], jump_times=[1.2], taus=[1.0], order=2, tol=1e-9)
    # t0 + τ, t0 + 2τ (lost 0, depth 2); 0.5 + τ (lost 1, depth 1); 1.2 + τ; tstops are never propagated
    assert bp.stops == (0.25, 0.5, 1.0, 1.2, 1.5, 2.0, 2.2)
    assert bp.jumps == {0.5, 1.0, 1.2, 2.0}  # hold samples, jump_times, t0 + τ (f jumps only there)
    linear = collect(0.0, 3.0, Linear(torch.zeros(1, 2, 1), [0.0, 0.7]), taus=[1.0], order=3)
    assert linear.stops == (0.7, 1.0, 1.7, 2.0) and linear.jumps == {1.0}  # knots: lost 2
    assert merge([0.3, 0.3 + 1e-12, 1.0], [0.3 + 1e-12], 0.0, 1.0, 1e-9).stops == (0.3,)
    assert propagate([(0.0, 0)], [0.4, 0.5], 2, 0.0, 10.0) == [(0.4, 1), (0.5, 1), (0.8, 2), (0.9, 2), (1.0, 2)]


# -- jump_times and tstops -----------------------------------------------------------------------------------

@pytest.mark.parametrize("method,kw", [("dopri5", dict(rtol=1e-3, atol=1e-3)), ("tsit5", dict(rtol=1e-3, atol=1e-3)),
                                       ("bosh3", dict(rtol=1e-3, atol=1e-3)), ("rk4", dict(dt=0.3)), ("euler", dict(dt=0.3))])
@pytest.mark.parametrize("convention", ["t > 1", "t >= 1"])
def test_jump_times_give_exact_piecewise_solutions(method, kw, convention):
    """y' = 1 before t = 1 and 3 after (either side of the jump owned by the user's comparison): with
    jump_times=[1] every method lands on 1 and evaluates f from inside each step, so the piecewise-linear
    solution is exact to round-off whatever the tolerance or dt (0.3 does not divide 1)."""
    after = (lambda t: t > 1) if convention == "t > 1" else (lambda t: t >= 1)
    f = lambda t, y: torch.ones_like(y) + 2 * after(t).to(y.dtype)
    t = torch.tensor([0.0, 0.5, 1.0, 1.7, 2.5], dtype=F64)
    sol = odelab.solve(f, torch.zeros(2, 1, dtype=F64), t, method=method, jump_times=[1.0], **kw)
    exact = torch.where(t <= 1, t, 1 + 3 * (t - 1))
    assert (sol.y[:, :, 0] - exact).abs().max() < 1e-12


def test_jump_times_restart_the_first_stage():
    """After landing on a jump the adaptive methods re-evaluate f (nfe counts one per restart and sample)."""
    f = lambda t, y: -y + (t > 1).to(y.dtype)
    t = torch.tensor([0.0, 2.0], dtype=F64)
    plain = odelab.solve(f, torch.ones(1, 1, dtype=F64), t, tstops=[1.0], rtol=1e-8, atol=1e-10)
    jump = odelab.solve(f, torch.ones(1, 1, dtype=F64), t, jump_times=[1.0], rtol=1e-8, atol=1e-10)
    assert int(jump.stats["nfe"][0]) == 2 + 6 * int(jump.stats["steps"][0]) + 1
    exact = math.exp(-2.0) + (1 - math.exp(-1.0))
    assert abs(float(jump.y[0, -1, 0]) - exact) < 1e-9
    assert abs(float(plain.y[0, -1, 0]) - exact) > 1e-9  # tstops alone land but keep the stale left limit


@pytest.mark.parametrize("method,kw", [("dopri5", dict(rtol=1e-2, atol=1e-2)), ("rk4", dict(dt=0.3))])
def test_tstops_make_a_kink_a_step_boundary(method, kw):
    """y' = |t − 1|: piecewise linear, integrated exactly by every order ≥ 2 method once 1 is a step boundary."""
    t = torch.tensor([0.0, 2.2], dtype=F64)
    sol = odelab.solve(lambda s, y: (s - 1).abs().expand_as(y), torch.zeros(1, 1, dtype=F64), t, method=method,
                       tstops=torch.tensor([1.0]), **kw)
    assert abs(float(sol.y[0, -1, 0]) - (0.5 + 1.2**2 / 2)) < 1e-12


def test_breakpoint_options_are_validated():
    f, y0, t = (lambda s, y: -y), torch.ones(1, 1), [0.0, 1.0]
    with pytest.raises(ValueError, match="^jump_times"):
        odelab.solve(f, y0, t, jump_times=[math.nan])
    with pytest.raises(TypeError, match="^tstops"):
        odelab.solve(f, y0, t, method="rk4", dt=0.1, tstops=3.0)
    with pytest.raises(ValueError, match="^tstops"):
        odelab.solve(f, y0, t, tstops=torch.ones(2, 2))


# -- inputs: knots are step boundaries ------------------------------------------------------------------------

@pytest.mark.parametrize("method", ["dopri5", "tsit5"])
@pytest.mark.parametrize("tol", [1e-6, 1e-8, 1e-10])
def test_linear_input_error_within_ten_tolerances(method, tol):
    """y' = A y + B u(t), u linear between knots at 0.37, 0.81, …: the issue's goal error/tol ≤ 10 (measured
    ≤ 0.5; before the knots were landing points: up to 938)."""
    A, B = np.array([[-1.0, 2.0], [-2.0, -0.5]]), np.array([[1.0], [0.5]])
    knots = [0.0, 0.37, 0.81, 1.3, 1.77, 2.4, 3.0]
    u = np.array([[0.0], [1.0], [-1.0], [2.0], [0.5], [0.0], [1.0]])
    times = np.linspace(0, 3, 13)
    exact = linear_ode_exact(A, [0.3, -0.2], times, B, knots, u, "linear")
    At, Bt = torch.tensor(A), torch.tensor(B)
    sol = odelab.solve(lambda s, y, v: y @ At.T + v @ Bt.T, torch.tensor([[0.3, -0.2]], dtype=F64), times.tolist(),
                       u=torch.tensor(u).reshape(1, -1, 1), u_times=knots, interpolation="linear", method=method,
                       rtol=tol, atol=tol, max_steps=100_000)
    assert np.abs(sol.y[0].numpy() - exact).max() <= 10 * tol


def fitted_order(dts, errors) -> float:
    """The order p of errors ≈ C dt^p (1 + a dt): least squares of log error on (1, log dt, dt). Every landing
    point off the lattice t0 + k dt (an output time, a knot, a propagated breakpoint) cuts a step in two, and
    the parts carry less error than a whole step: e = C dt⁴ (1 − a dt + …) with a ≈ (number of such points) /
    (2 T), which a plain log-log slope over dt ≥ 0.005 reads as order 3.85–3.95 (as does an ODE without
    input whose output times are off the lattice; splitting every segment into equal steps instead is worse,
    3.3–3.9, since then every step of a segment changes with dt). The dt term absorbs it."""
    log_dt, log_e = np.log(dts), np.log(errors)
    design = np.stack([np.ones_like(log_dt), log_dt, np.asarray(dts)], 1)
    return float(np.linalg.lstsq(design, log_e, rcond=None)[0][1])


LINEAR_PROBLEM = dict(A=np.array([[-1.0, 2.0], [-2.0, -0.5]]), B=np.array([[1.0], [0.5]]),
                      knots=[0.0, 0.37, 0.81, 1.3, 1.77, 2.4, 3.0],
                      u=np.array([[0.0], [1.0], [-1.0], [2.0], [0.5], [0.0], [1.0]]))


@pytest.mark.parametrize("kind", ["linear", "hold"])
@pytest.mark.parametrize("base", [0.07, 0.045])
def test_rk4_order_four_on_the_input_problem(kind, base):
    """The problem above under rk4, dt = base/2^k, k = 0..4 (knots and output times off the lattice): fitted
    order (:func:`fitted_order`) within 4 ± 0.1, the issue's goal. Measured 4.015 / 3.991 (linear, base 0.07 /
    0.045) and 4.014 / 3.990 (hold); the plain log-log slope: 3.94 / 3.96 and 3.88 / 3.95. Errors from 3e-6
    down to 6e-12 (the smallest 100× above float64 round-off on ~700 steps)."""
    p = LINEAR_PROBLEM
    times = np.linspace(0, 3, 13)
    exact = linear_ode_exact(p["A"], [0.3, -0.2], times, p["B"], p["knots"], p["u"], kind)
    At, Bt = torch.tensor(p["A"]), torch.tensor(p["B"])
    dts = [base / 2**k for k in range(5)]
    errors = [np.abs(odelab.solve(lambda s, y, v: y @ At.T + v @ Bt.T, torch.tensor([[0.3, -0.2]], dtype=F64),
                                  times.tolist(), u=torch.tensor(p["u"]).reshape(1, -1, 1), u_times=p["knots"],
                                  interpolation=kind, method="rk4", dt=dt).y[0].numpy() - exact).max() for dt in dts]
    assert abs(fitted_order(dts, errors) - 4) <= 0.1, (fitted_order(dts, errors), errors)


# -- delays -------------------------------------------------------------------------------------------------

class Feedback(System):
    """y' = b y(t − τ) + u(t) (u optional), τ a float or a learnable 0-d tensor."""

    blocks, observable, hidden_size = ("y",), "y", 1

    def __init__(self, tau=1.0, gain=-1.0, input_size=1):
        super().__init__()
        self.tau, self.gain, self.input_size = tau, gain, input_size

    @property
    def delays(self):
        return (self.tau,)

    def derivative(self, t, state, inp, *delayed):
        d = self.gain * delayed[0][0]
        return (d if inp is None else d + inp,)


KNOTS = [0.0, 0.3, 0.75, 1.45, 2.2, 3.1, 4.4]
SAMPLES = [0.0, 0.7, -1.2, 0.4, 2.0, -0.5, 1.0]


def _delay_solve(method, y0=1.0, history=0.5, tau=1.0, horizon=6.0, **kw):
    y0 = y0 if isinstance(y0, torch.Tensor) else torch.full((1, 1), y0, dtype=F64)
    return odelab.solve(Feedback(tau), y0, torch.linspace(0, horizon, 13, dtype=F64),
                        u=torch.tensor(SAMPLES, dtype=F64).reshape(1, -1, 1), u_times=KNOTS,
                        history=torch.full((1, 1), history, dtype=F64), method=method, **kw)


def _delay_exact(y0=1.0, history=0.5, tau=1.0, horizon=6.0):
    return polynomial_dde_exact([-1.0], [tau], y0, history, np.linspace(0, horizon, 13), KNOTS, SAMPLES, "hold")


@pytest.mark.parametrize("method", ["dopri5", "tsit5"])
@pytest.mark.parametrize("tol", [1e-6, 1e-8, 1e-10])
def test_delay_with_jumping_input_and_history_within_ten_tolerances(method, tol):
    """Input jumps at 0.3, 0.75, … propagate to s + kτ, and the history (0.5) jumps to y0 = 1 at t0: the
    issue's goal error/tol ≤ 10 (measured ≤ 0.6; before: 1e-4 at rtol 1e-6, and ≈ 100 tol from reading φ(t0)
    instead of y0 at t0 + τ)."""
    sol = _delay_solve(method, rtol=tol, atol=tol, max_steps=100_000)
    assert np.abs(sol.y[0, :, 0].numpy() - _delay_exact()).max() <= 10 * tol


@pytest.mark.parametrize("dts", [[0.1 / 2**k for k in range(1, 5)], [0.075 / 2**k for k in range(5)]],
                         ids=["aligned-delay", "hermite-reads"])
def test_rk4_order_four_on_a_delay_with_jumps(dts):
    """dt not aligned to the input's jumps (0.75, 1.45, … and their propagation): fitted order
    (:func:`fitted_order`) within 4 ± 0.1, the issue's goal; τ = 1 a multiple of dt (stage reads from the ring
    buffer) or not (Hermite reads). Measured 3.999 and 4.003 (plain slopes 4.005, 3.957). The reference is
    exact (rational arithmetic): errors from 5e-8 down to 4e-13, above float64 round-off on ≤ 1300 steps.
    dt ≤ τ/13: from dt = 0.1 to 0.05 the error ratio is 2^3.64 (0.06 to 0.03: 2^3.51 with Hermite reads),
    pre-asymptotic; at 0.07–0.09 the contributions of the steps cancel in part (ratios 2^0.2 to 2^4.8), so
    those are not order measurements (this test used dt = 0.07 … 0.00875: slope 3.81)."""
    exact = np.array([1.0] + [float(_rational_delay_solution(Fraction(1), Fraction(1), Fraction(0.5), Fraction(t)))
                              for t in np.linspace(0, 6, 13)[1:]])
    errors = [np.abs(_delay_solve("rk4", dt=dt).y[0, :, 0].numpy() - exact).max() for dt in dts]
    assert abs(fitted_order(dts, errors) - 4) <= 0.1, (fitted_order(dts, errors), errors)


@pytest.mark.parametrize("method,kw,bound_y0,bound_tau", [
    # fixed step: measured dy0 1.2e-7, 1.8e-8, 4.2e-6 and dτ 6.3e-7, 5.2e-7, 5.6e-5 (dτ reads y' from the
    # cubic Hermite interpolant: O(dt³)); bounds about 3× over
    ("rk4", dict(dt=0.1), 4e-7, 2e-6), ("rk4", dict(dt=0.07), 6e-8, 2e-6), ("heun", dict(dt=0.01), 1.5e-5, 2e-4),
])
@pytest.mark.parametrize("history", [1.0, 0.5], ids=["continuous", "jump-at-t0"])
def test_gradients_wrt_y0_and_a_learnable_delay(method, kw, bound_y0, bound_tau, history):
    """dL/dy0 and dL/dτ (L = y(6)) of the fixed-step methods against the exact values
    (:func:`_exact_derivatives`). τ = 1 is a multiple of dt = 0.1 (aligned steps) and not of 0.07. Before:
    with the history's jump at t0 every method missed the jump of ∂y/∂τ at t0 + τ (0.25 off)."""
    grad_y0, grad_tau = _delay_gradients(method, history, **kw)
    exact_y0, exact_tau = _exact_derivatives(history)
    assert abs(grad_y0 - exact_y0) <= bound_y0
    assert abs(grad_tau - exact_tau) <= bound_tau


# The goal for the adaptive methods: dL/dy0 and dL/dτ within 10 tol of the exact values at rtol = atol
# = tol. Measured |error| / tol (history 1.0 / 0.5 at t0): dopri5 and tsit5 ≤ 0.01 for dL/dτ and dL/dy0 at
# 1e-6, 1e-8 and 1e-10 (dL/dτ reads y'(t − τ) as f there, see adaptive.py; before, with the dense output's
# slope: dopri5 1.7 / 10 / 24, tsit5 1.3 / 4.9 / 19, bosh3 4.6 / 13 / 54). bosh3 (3rd order) error-controls
# ∂y/∂τ as well (``control_delay_sensitivity``, its default): dτ 0.53 / 0.09 at 1e-6, 0.82 / 0.06 at 1e-8, dy0
# ≤ 0.1 (without the control: dτ 10.3 / 6.1, 21.7 / 9.2, 32.6 / 14.1 at 1e-10; about 1.5× fewer steps).
@pytest.mark.parametrize("method,tol", [(m, tol) for m in ADAPTIVE for tol in (1e-6, 1e-8, 1e-10) if m != "bosh3"]
                         + [("bosh3", 1e-6)]  # tangents in eager forward mode: ~25 ms per step, 180 steps
                         + [pytest.param("bosh3", tol, marks=pytest.mark.slow) for tol in (1e-8, 1e-10)])
@pytest.mark.parametrize("history", [1.0, 0.5], ids=["continuous", "jump-at-t0"])
def test_adaptive_gradients_within_ten_tolerances(method, tol, history):
    grad_y0, grad_tau = _delay_gradients(method, history, rtol=tol, atol=tol, max_steps=100_000)
    exact_y0, exact_tau = _exact_derivatives(history)
    assert abs(grad_y0 - exact_y0) <= 10 * tol, (grad_y0 - exact_y0) / tol
    assert abs(grad_tau - exact_tau) <= 10 * tol, (grad_tau - exact_tau) / tol


def test_delay_sensitivity_control_only_shortens_steps_for_gradients():
    """bosh3 holds ∂y/∂τ to the tolerance only when τ is learnable and grad mode is on: more steps then
    (measured 178 vs 127 at 1e-6), the same solution to the tolerance; under no_grad, or switched off, the
    steps are the same as each other, and bad values of the option are refused by name."""
    tau = torch.tensor(1.0, dtype=F64, requires_grad=True)
    controlled = _delay_solve("bosh3", tau=tau, rtol=1e-6, atol=1e-6)
    off = _delay_solve("bosh3", tau=tau, rtol=1e-6, atol=1e-6, control_delay_sensitivity=False)
    with torch.no_grad():
        inference = _delay_solve("bosh3", tau=tau, rtol=1e-6, atol=1e-6)
    steps = lambda sol: int(sol.stats["steps"][0])
    assert steps(controlled) > 1.2 * steps(off)
    assert steps(off) == steps(inference)
    assert np.abs(controlled.y[0, :, 0].detach().numpy() - _delay_exact()).max() <= 10 * 1e-6
    with pytest.raises(TypeError, match="control_delay_sensitivity"):
        _delay_solve("bosh3", tau=tau, control_delay_sensitivity="yes")


@pytest.mark.parametrize("method", ["dopri5", "tsit5"])
@pytest.mark.parametrize("kind,history", [("linear", "constant"), ("hold", "callable")])
def test_learnable_delay_gradient_off_polynomial_problems(method, kind, history):
    """dL/dτ where the solution is not piecewise polynomial (a callable history cos t) or the input is
    piecewise linear, τ = 0.93 (its breakpoints off every knot and off the horizon 4 by ≥ 0.02): against the
    fourth-order central difference (h = 1e-4) of solves at rtol = atol = 1e-13 (truncation ~1e-16,
    round-off ~1e-13 / h = 1e-9). Measured at tol 1e-8: |error| ≤ 0.002 tol (linear input), ≤ 0.13 tol (callable
    history); before dL/dτ used f at t − τ: 0.30–0.40 and 0.24–1.35. Bound 10 tol, the issue's goal."""
    phi = torch.full((1, 1), 0.5, dtype=F64) if history == "constant" else (lambda s: torch.cos(s))

    def solve(tau, tol):
        return odelab.solve(Feedback(tau), torch.ones(1, 1, dtype=F64), torch.tensor([0.0, 4.0], dtype=F64),
                            u=torch.tensor(SAMPLES, dtype=F64).reshape(1, -1, 1), u_times=KNOTS, interpolation=kind,
                            history=phi, method=method, rtol=tol, atol=tol, max_steps=100_000).y[0, -1, 0]

    tau = torch.tensor(0.93, dtype=F64, requires_grad=True)
    (grad,) = torch.autograd.grad(solve(tau, 1e-8), [tau])
    y, h = (lambda x: float(solve(x, 1e-13))), 1e-4
    reference = (8 * (y(0.93 + h) - y(0.93 - h)) - (y(0.93 + 2 * h) - y(0.93 - 2 * h))) / (12 * h)
    assert abs(float(grad) - reference) <= 10 * 1e-8, (float(grad) - reference) / 1e-8


def _delay_gradients(method, history, **kw):
    tau = torch.tensor(1.0, dtype=F64, requires_grad=True)
    y0 = torch.ones(1, 1, dtype=F64, requires_grad=True)
    sol = _delay_solve(method, y0=y0, history=history, tau=tau, **kw)
    return tuple(float(g) for g in torch.autograd.grad(sol.y[0, -1, 0], [y0, tau]))


def _exact_derivatives(history: float) -> tuple[float, float]:
    """d y(6) / d y0 and d y(6) / d τ at τ = 1 of the exact solution, in rational arithmetic (no round-off):
    y is affine in y0 (a difference of two solves is exact); y(6) is smooth in τ near 1 (no breakpoint crosses
    another or 6 within 1e-12), so the central difference at h = 1e-12 is exact to h² |y'''(τ)| ~ 1e-24. (The
    previous reference, a fourth-order stencil of the floating-point polynomials at h = 1e-3, was 5e-10 off:
    half the goal's budget at rtol 1e-10.)"""
    y = lambda y0=1, tau=1: _rational_delay_solution(Fraction(y0), Fraction(tau), Fraction(history))
    h = Fraction(1, 10**12)
    return float((y(y0=2) - y(y0=0)) / 2), float((y(tau=1 + h) - y(tau=1 - h)) / (2 * h))


def _rational_delay_solution(y0: Fraction, tau: Fraction, history: Fraction, horizon: Fraction = Fraction(6)):
    """y(horizon) for y' = −y(t − τ) + u(t), u the hold input (KNOTS, SAMPLES), y = history before 0: the method
    of steps in exact rational arithmetic (polynomial coefficients in t as Fractions), piece by piece between
    the breakpoints (0 and the knots, propagated by τ)."""
    knots = [Fraction(k) for k in KNOTS]
    samples = [Fraction(v) for v in SAMPLES]
    frontier = {Fraction(0), *(k for k in knots if 0 < k < horizon)}
    points = frontier | {horizon}
    while frontier:
        frontier = {p + tau for p in frontier if p + tau < horizon} - points
        points |= frontier
    grid = sorted(points)

    def evaluate(poly, t):
        acc = Fraction(0)
        for c in reversed(poly):
            acc = acc * t + c
        return acc

    def shifted(poly, shift):  # poly(t − shift)
        out = [Fraction(0)] * len(poly)
        for k, c in enumerate(poly):
            for j in range(k + 1):
                out[j] += c * math.comb(k, j) * (-shift) ** (k - j)
        return out

    pieces, starts, start = [], [], y0
    for a, b in zip(grid, grid[1:]):
        mid = (a + b) / 2
        u = samples[min(bisect.bisect_left(knots, mid), len(knots) - 1)]  # u_n on (t_{n−1}, t_n]
        if mid - tau < 0:
            delayed = [history]
        else:
            delayed = shifted(pieces[bisect.bisect_right(starts, mid - tau) - 1], tau)
        integrand = [-c for c in delayed]
        integrand[0] += u
        anti = [Fraction(0)] + [c / (k + 1) for k, c in enumerate(integrand)]
        anti[0] = start - evaluate(anti, a)
        pieces.append(anti)
        starts.append(a)
        start = evaluate(anti, b)
    return start


@pytest.mark.parametrize("method", ADAPTIVE)
def test_adaptive_dde_reads_y0_after_t0_plus_tau(method):
    """y' = −y(t − 1), φ ≡ 1 = y0 (as in the issue): dy(1.5)/dy0 = 1 − 0.5 = 0.5 and dy(1.5)/dφ = −1 − (−0.5) ...
    by the method of steps y = y0 − φ t on [0, 1], y = y0 − φ − y0 (t − 1) + φ (t − 1)²/2 on [1, 2]; both
    exact to round-off at every tolerance (the pieces are polynomials; before: −0.50019 at every tolerance)."""
    y0 = torch.ones(1, 1, dtype=F64, requires_grad=True)
    phi = torch.ones(1, 1, dtype=F64, requires_grad=True)
    for tol in (1e-4, 1e-8):
        sol = odelab.solve(Feedback(input_size=0), y0, torch.tensor([0.0, 1.5], dtype=F64), history=phi,
                           method=method, rtol=tol, atol=tol)
        g_y0, g_phi = torch.autograd.grad(sol.y[0, -1, 0], [y0, phi])
        assert abs(float(g_y0) - 0.5) < 1e-12 and abs(float(g_phi) - (-1 + 0.125)) < 1e-12


def test_decreasing_times_are_refused_for_delay_systems():
    with pytest.raises(ValueError, match="^t: .*delay"):
        odelab.solve(Feedback(input_size=0), torch.ones(1, 1), [1.0, 0.0], method="rk4", dt=0.1)


# -- t as user callables see it; derivative shapes -------------------------------------------------------

def test_user_callables_get_tensor_times():
    """torchdiffeq's idiom torch.cos(t) * y works under every method: fixed-step methods pass a 0-dim tensor,
    adaptive ones a (batch, 1) tensor, both of y's dtype; so do callable inputs and histories."""
    seen = {}

    def f(t, y):
        seen.setdefault("f", set()).add((tuple(t.shape), t.dtype))
        return torch.cos(t) * y

    y0 = torch.tensor([[1.0, 2.0], [-1.0, 0.5]], dtype=F64)
    t = torch.linspace(0, 2, 5, dtype=F64)
    exact = y0.unsqueeze(1) * torch.exp(torch.sin(t)).view(1, -1, 1)
    for method, kw in [("rk4", dict(dt=0.01)), ("dopri5", dict(rtol=1e-10, atol=1e-12))]:
        seen.clear()
        sol = odelab.solve(f, y0, t, method=method, **kw)
        assert (sol.y - exact).abs().max() < 1e-8
        assert seen["f"] == ({((), F64)} if method == "rk4" else {((2, 1), F64)})
    shapes = set()

    def u(s):
        shapes.add(tuple(s.shape))
        return torch.sin(s) * torch.ones(2, 1, dtype=torch.float32)

    odelab.solve(lambda s, y, v: v, torch.zeros(2, 1), [0.0, 1.0], u=u, method="rk4", dt=0.1)
    assert shapes == {()}


@pytest.mark.parametrize("method,kw", [("rk4", dict(dt=0.1)), ("dopri5", {}), ("euler", dict(dt=0.1))])
def test_wrong_derivative_shape_raises_naming_the_block(method, kw):
    """The issue's example: f returns (4, 1) for a (4, 2) state; broadcasting used to hide it."""
    with pytest.raises(ValueError, match="block 'y'.*\\(4, 1\\).*\\(4, 2\\)"):
        odelab.solve(lambda t, y: y[:, :1], torch.ones(4, 2), [0.0, 1.0], method=method, **kw)


def test_wrong_block_count_of_a_system_raises():
    class TwoBlocks(System):
        blocks, observable, hidden_size = ("a", "b"), "a", 1

        def derivative(self, t, state, inp, *delayed):
            return (state[0],)

    with pytest.raises(ValueError, match="TwoBlocks.derivative"):
        odelab.solve(TwoBlocks(), (torch.ones(1, 1), torch.ones(1, 1)), [0.0, 1.0], method="rk4", dt=0.1)


# -- backwards in time -----------------------------------------------------------------------------------

@pytest.mark.parametrize("method,kw,bound", [("rk4", dict(dt=0.01), 1e-8), ("dopri5", dict(rtol=1e-10, atol=1e-10), 1e-8),
                                             ("imex", dict(dt=1e-3), 1e-2)])
@pytest.mark.parametrize("kind", ["hold", "linear"])
def test_backwards_with_an_input(method, kw, bound, kind):
    """y' = −y + u(t) from t = 2 down to 0 with a hold or linear input: the same flow run backwards
    (closed form by expm knot to knot). Bounds: rk4 at dt = 0.01 measured 1.2e-9, dopri5 at 1e-10 ≤ 1e-9;
    the first-order partitioned step at dt = 1e-3 ≤ 2e-3."""

    class Decay(System):
        blocks, observable, split_blocks, hidden_size, input_size = ("y",), "y", ("y",), 1, 1

        def split(self, i, t, state, inp, *delayed):
            return inp, torch.ones_like(state[0])

        def derivative(self, t, state, inp, *delayed):
            return (inp - state[0],)

    knots = [0.0, 0.6, 1.3, 2.0]
    u = np.array([[0.5], [1.0], [-1.0], [2.0]])
    times = np.linspace(2.0, 0.0, 5)
    exact = linear_ode_exact([[-1.0]], [0.7], times, [[1.0]], knots, u, kind)
    sol = odelab.solve(Decay(), torch.full((1, 1), 0.7, dtype=F64), times.tolist(), u=torch.tensor(u).reshape(1, -1, 1),
                       u_times=knots, interpolation=kind, method=method, **kw)
    assert torch.equal(sol.ts, torch.tensor(times))
    assert np.abs(sol.y[0, :, 0].numpy() - exact[:, 0]).max() < bound


def test_backwards_then_forwards_returns_to_the_start_and_t_is_the_users():
    seen = []

    def f(t, y):
        seen.append(float(t.min()))
        return torch.stack([y[:, 1], -torch.sin(y[:, 0]) + 0.1 * torch.cos(t[:, 0])], 1)

    y0 = torch.tensor([[0.4, 0.0]], dtype=F64)
    back = odelab.solve(f, y0, [3.0, 1.0], rtol=1e-11, atol=1e-12)
    assert min(seen) >= 1.0 - 1e-9 and max(seen) <= 3.0  # f sees t in [1, 3], not −t
    forth = odelab.solve(f, back.y[:, -1], [1.0, 3.0], rtol=1e-11, atol=1e-12)
    assert (forth.y[:, -1] - y0).abs().max() < 1e-8
    assert float(back.stats["t_final"][0]) == 1.0
