"""Stiff delay equations under the Rosenbrock methods (``rodas4``, ``rosenbrock23``): constant lags and
state-dependent delays read from the solve's own continuous extension, the crossings of t − τ(t, y) with the kinks
tracked. References: the closed form of y' = −λ y + μ y(t − 1) by the method of steps (a stiff λ = 10⁴, a history
that meets y0 and one that jumps there), its derivatives by autograd through that closed form, a scipy Radau method
of steps for a nonlinear problem with two lags and a callable history, and test_tracking's closed form and scipy
DOP853 method of steps for a state-dependent delay (test_tracking runs its gradient test on rodas4 and rosenbrock23
too)."""
import itertools
import math

import numpy as np
import pytest
import torch
from scipy.integrate import solve_ivp

import odelab
from odelab.systems import System
from test_tracking import Feedback, boundaries, closed_form as tracked_closed_form, scipy_reference

F64 = torch.float64


class Linear(System):
    """y' = −λ y + μ y(t − 1)."""

    delays = (1.0,)

    def __init__(self, lam, mu):
        super().__init__()
        self.lam, self.mu = lam, mu

    def derivative(self, t, state, inp, delayed):
        return (-self.lam * state[0] + self.mu * delayed[0],)


def closed_form(t, lam, mu, y0, phi=1.0):
    """y on [0, 2] by the method of steps for a constant history φ: on [0, 1] y' = −λ y + μ φ, so y = a + (y0 − a)
    e^(−λt), a = μφ/λ; on [1, 2] the forcing μ y(t − 1) holds a resonant term, y = p + μ (y0 − a) s e^(−λs) +
    (y(1) − p) e^(−λs), s = t − 1, p = μa/λ. Works on floats and on tensors (for autograd)."""
    exp = torch.exp if isinstance(lam, torch.Tensor) or isinstance(mu, torch.Tensor) else math.exp
    a = mu * phi / lam
    if t <= 1:
        return a + (y0 - a) * exp(-lam * t)
    s, p = t - 1, mu * a / lam
    y1 = a + (y0 - a) * exp(-lam * 1.0)
    return p + mu * (y0 - a) * s * exp(-lam * s) + (y1 - p) * exp(-lam * s)


TIMES = [0.0, 0.3, 1.0, 1.0 + 1e-3, 1.4, 2.0]


@pytest.mark.parametrize("method,tol", [("rodas4", 5e-9), ("rodas4p2", 5e-9), ("rosenbrock23", 2e-7)])
@pytest.mark.parametrize("y0", [1.0, 2.0])
def test_a_stiff_linear_delay_equation_against_its_closed_form(method, tol, y0):
    """λ = 10⁴ (an explicit pair needs h < 3.3e-4 there: dopri5 takes ~7000 steps), μ = 5000; y0 = 1 meets the
    history, y0 = 2 makes f jump at t = 1 (the steps land there and the stage at its start reads y0). rodas4 needs
    few steps only because T = ∂f/∂t carries the delayed state's slope, ∂f/∂y(t − 1) y'(t − 1): without it the
    forcing's time dependence falls on the error estimate (12 798 steps instead of ~300, measured)."""
    lam, mu = 1e4, 5e3
    sol = odelab.solve(Linear(lam, mu), torch.tensor([[y0], [y0]], dtype=F64), TIMES, method=method, rtol=1e-8,
                       atol=1e-10, history=1.0, tstops=TIMES)
    exact = torch.tensor([closed_form(t, lam, mu, y0) for t in TIMES], dtype=F64)
    torch.testing.assert_close(sol.y[0, :, 0], exact, atol=tol, rtol=0)
    assert int(sol.stats["steps"][0]) < (3000 if method == "rosenbrock23" else 1000)


@pytest.mark.parametrize("method,rtol,tol", [("rodas4", 1e-7, 1e-7), ("rosenbrock23", 1e-6, 2e-4)])
def test_gradients_against_the_closed_form(method, rtol, tol):
    """d y(1.05)/dμ = 0.0213 and d y(1.05)/dy0 = 0.0821 (through the delayed reads of the earlier steps, and the
    jump of f at t = 1), relative to autograd through the closed form."""
    lam = torch.tensor(50.0, dtype=F64)
    mu = torch.tensor(20.0, dtype=F64, requires_grad=True)
    y0 = torch.full((1, 1), 2.0, dtype=F64, requires_grad=True)
    sol = odelab.solve(Linear(lam, mu), y0, [0.0, 1.05], method=method, rtol=rtol, atol=rtol * 1e-2, history=1.0)
    got = torch.autograd.grad(sol.y[0, -1, 0], (mu, y0))
    mu_ref = mu.detach().clone().requires_grad_(True)
    y0_ref = torch.tensor(2.0, dtype=F64, requires_grad=True)
    want = torch.autograd.grad(closed_form(1.05, lam, mu_ref, y0_ref), (mu_ref, y0_ref))
    assert float(want[0]) > 0.02 and float(want[1]) > 0.08
    for g, w in zip(got, want):
        assert abs(float(g.squeeze()) / float(w) - 1) < tol


LAM, BETA = 1e3, 2e3


class TwoLags(System):
    """y' = −λ y + β y(t − 1) / (1 + y(t − 1)¹⁰) + 20 y(t − 0.3) cos t − 10 y³ (a stiff Mackey–Glass-like
    equation with a second, fast lag)."""

    delays = (1.0, 0.3)

    def derivative(self, t, state, inp, slow, fast):
        y, d, e = state[0], slow[0], fast[0]
        return (-LAM * y + BETA * d / (1 + d ** 10) + 20 * e * torch.cos(t) - 10 * y ** 3,)


def radau_method_of_steps(y0: float, end: float):
    """The scipy reference: Radau (rtol 1e-10) on each interval between the points t0 + Σ n_i τ_i, the delayed
    states from the earlier intervals' dense outputs (or φ(s) = 0.5 + 0.3 cos 3s before 0)."""
    taus = (1.0, 0.3)
    points = sorted({sum(c) for n in range(1, 8) for c in itertools.combinations_with_replacement(taus, n)
                     if sum(c) < end - 1e-9} | {end})
    pieces = []

    def at(s):
        if s <= 0:
            return 0.5 + 0.3 * math.cos(3 * s)
        for a, b, piece in pieces:
            if a - 1e-9 <= s <= b + 1e-9:
                return float(piece.sol(min(max(s, a), b))[0])
        raise ValueError(s)

    def field(t, y):
        d, e = at(t - 1.0), at(t - 0.3)
        return [-LAM * y[0] + BETA * d / (1 + d ** 10) + 20 * e * math.cos(t) - 10 * y[0] ** 3]

    t, y = 0.0, [y0]
    for b in points:
        piece = solve_ivp(field, (t, b), y, method="Radau", rtol=1e-10, atol=1e-12, dense_output=True)
        pieces.append((t, b, piece))
        t, y = b, piece.y[:, -1]
    return lambda s: y0 if s == 0 else at(s)


@pytest.mark.parametrize("method,rtol,tol", [("rodas4", 1e-7, 1e-6), ("rodas4p2", 1e-7, 1e-6),
                                            ("rosenbrock23", 1e-5, 3e-5)])
def test_two_lags_and_a_callable_history_against_scipy_radau(method, rtol, tol):
    """Two samples from y0 = 1.2 and 0.8 (the history's φ(0) = 0.8: the second meets it), their own steps; the
    outputs landed on (``tstops``: between step ends the continuous extension is order 3, under the error control
    of the ends only)."""
    times = torch.linspace(0.0, 1.5, 16, dtype=F64)
    sol = odelab.solve(TwoLags(), torch.tensor([[1.2], [0.8]], dtype=F64), times, method=method, rtol=rtol,
                       atol=rtol * 1e-2, history=lambda t: 0.5 + 0.3 * torch.cos(3 * t), tstops=times)
    for b, y0 in enumerate((1.2, 0.8)):
        reference = radau_method_of_steps(y0, 1.5)
        want = np.array([reference(float(t)) for t in times])
        np.testing.assert_allclose(sol.y[b, :, 0].numpy(), want, atol=tol, rtol=0)
    assert int(sol.stats["steps"][0]) != int(sol.stats["steps"][1])


def test_a_batch_is_its_samples_solved_alone():
    lam, mu = 1e4, 5e3
    y0 = torch.tensor([[1.0], [2.0], [-0.5]], dtype=F64)
    batch = odelab.solve(Linear(lam, mu), y0, [0.0, 0.5, 2.0], method="rodas4", rtol=1e-7, atol=1e-9, history=1.0)
    for b in range(3):
        alone = odelab.solve(Linear(lam, mu), y0[b:b + 1], [0.0, 0.5, 2.0], method="rodas4", rtol=1e-7, atol=1e-9,
                             history=1.0)
        torch.testing.assert_close(batch.y[b], alone.y[0], atol=1e-12, rtol=0)
        assert int(batch.stats["steps"][b]) == int(alone.stats["steps"][0])


def test_a_continued_solve_reads_the_first_as_its_history():
    """[0, 1.2] densely, then [1.2, 2] with history=that solution (its steps, across the jump of f at t = 1, are
    the delayed states of the second): the closed form."""
    lam, mu = 1e4, 5e3
    system = Linear(lam, mu)
    first = odelab.solve(system, torch.full((1, 1), 2.0, dtype=F64), [0.0, 1.2], method="rodas4", rtol=1e-9,
                         atol=1e-11, history=1.0, dense=True)
    second = odelab.solve(system, first.y[:, -1], [1.2, 1.6, 2.0], method="rodas4", rtol=1e-9, atol=1e-11,
                          history=first)
    exact = torch.tensor([closed_form(t, lam, mu, 2.0) for t in (1.2, 1.6, 2.0)], dtype=F64)
    torch.testing.assert_close(second.y[0, :, 0], exact, atol=1e-8, rtol=0)


def test_a_terminal_event_on_a_stiff_delay_equation():
    """λ = 10⁴, μ = 5000, y0 = 2: on [0, 1] y = 0.5 + 1.5 e^(−λt), which falls through 0.6 at ln 15 / λ."""
    lam, mu = 1e4, 5e3
    sol = odelab.solve(Linear(lam, mu), torch.full((1, 1), 2.0, dtype=F64), [0.0, 2.0], method="rodas4", rtol=1e-10,
                       atol=1e-12, history=1.0, event=lambda t, y: y[0][:, 0] - 0.6)
    assert float(sol.event.t[0]) == pytest.approx(math.log(1.5 / 0.1) / lam, rel=1e-7)


def test_a_mass_matrix_scales_the_derivative():
    """M y' = f with M = 2: the closed form of λ/2, μ/2."""
    lam, mu = 1e4, 5e3
    sol = odelab.solve(Linear(lam, mu), torch.full((1, 1), 2.0, dtype=F64), TIMES, method="rodas4", rtol=1e-9,
                       atol=1e-11, history=1.0, tstops=TIMES, mass=torch.tensor([2.0], dtype=F64))
    exact = torch.tensor([closed_form(t, lam / 2, mu / 2, 2.0) for t in TIMES], dtype=F64)
    torch.testing.assert_close(sol.y[0, :, 0], exact, atol=1e-8, rtol=0)


class DelayDAE(System):
    """y1' = −y1 + y2(t − 1), 0 = y2 − sin t (M = diag(1, 0)): a differential-algebraic system of index 1 whose
    differential component reads the algebraic one's past."""

    delays = (1.0,)

    def derivative(self, t, state, inp, delayed):
        y, past = state[0], delayed[0]
        return (torch.cat([-y[:, :1] + past[:, 1:], y[:, 1:] - torch.sin(t)], 1),)


@pytest.mark.parametrize("method", ["rodas4", "rodas4p2"])
def test_a_delay_differential_algebraic_system(method):
    """With the consistent history (0, sin s): y2 = sin t, and y1' = −y1 + sin(t − 1) from 0, so
    y1 = C e^(−t) + (sin(t − 1) − cos(t − 1)) / 2 with C = (sin 1 + cos 1) / 2: to 1e-9 at rtol 1e-9, y2 on its
    constraint to round-off at every step's end."""
    t = torch.linspace(0.0, 3.0, 13, dtype=F64)
    history = lambda s: torch.cat([torch.zeros_like(s.reshape(-1, 1)), torch.sin(s.reshape(-1, 1))], 1)
    sol = odelab.solve(DelayDAE(), torch.zeros(1, 2, dtype=F64), t, method=method, mass=[1.0, 0.0], rtol=1e-9,
                       atol=1e-11, history=history, tstops=t)
    constant = (math.sin(1.0) + math.cos(1.0)) / 2
    exact = constant * torch.exp(-t) + (torch.sin(t - 1) - torch.cos(t - 1)) / 2
    torch.testing.assert_close(sol.y[0, :, 0], exact, atol=1e-9, rtol=0)
    torch.testing.assert_close(sol.y[0, :, 1], torch.sin(t), atol=1e-14, rtol=0)


@pytest.mark.parametrize("method", ["rodas4", "rodas4p2", "rosenbrock23"])
def test_a_tracked_state_dependent_crossing_of_t0(method):
    """y' = −y(t − τ), τ = 1 + y/2 (test_tracking's closed form), y0 ≠ φ(t0) for three of four samples: f jumps at
    ξ1 = (1 + y0/2)/1.5, a different time per sample; the tracked solve lands on every sample's ξ1 (to 1e-9) and
    restarts there, with fewer steps than the untracked one, which straddles it; rodas4 meets the closed form more
    than 10× closer tracked than untracked."""
    y0 = torch.tensor([1.0, 0.8, 0.5, 0.3], dtype=F64)
    t = torch.linspace(0.0, 1.4, 29, dtype=F64)
    exact, xi = tracked_closed_form(t, y0, 1.0)
    options = dict(history=torch.ones(4, 1, dtype=F64), rtol=1e-9, atol=1e-11, method=method, tstops=t)
    tracked = odelab.solve(Feedback(), y0.unsqueeze(1), t, dense=True, **options)
    plain = odelab.solve(Feedback(), y0.unsqueeze(1), t, track_discontinuities=False, **options)
    nearest = (boundaries(tracked) - xi.unsqueeze(1)).abs().nan_to_num(math.inf).min(1).values
    assert float(nearest.max()) < 1e-9, nearest
    assert tracked.stats["discontinuities"].tolist() == [1, 1, 1, 1] and "discontinuities" not in plain.stats
    assert bool((tracked.stats["steps"][1:] < plain.stats["steps"][1:]).all())
    error = float((tracked.y[..., 0] - exact).abs().max())
    assert error < (1e-7 if method == "rosenbrock23" else 1e-10)
    if method == "rodas4":
        assert float((plain.y[..., 0] - exact).abs().max()) > 10 * error
    torch.testing.assert_close(tracked.dense_output.sample_kinks[0][:, 0], xi, atol=1e-9, rtol=0)


def test_a_tracked_kink_and_a_constant_lag_against_scipy():
    """y' = −y(t − τ(y)) − 0.5 y(t − 0.7) under rodas4: every breakpoint scipy's method of steps finds before 2.5
    (t0 + 0.7 known ahead, the tracked crossings, their images through the lag) is a step boundary, and the outputs
    meet the reference to 1e-10."""
    reference, points = scipy_reference(3.0, b=0.5)
    t = torch.linspace(0.0, 3.0, 31, dtype=F64)
    solution = odelab.solve(Feedback(b=0.5), torch.ones(1, 1, dtype=F64), t, method="rodas4", rtol=1e-10,
                            atol=1e-12, dense=True, tstops=t)
    np.testing.assert_allclose(solution.y[0, :, 0].numpy(), reference(t.numpy()), atol=1e-10, rtol=0)
    steps = boundaries(solution)[0]
    for xi in [p for p in points if p < 2.5]:
        assert float((steps - xi).abs().nan_to_num(math.inf).min()) < 1e-9, (xi, points)


def test_a_clamped_state_dependent_delay_warns():
    """τ = 1 + y/2 leaves [0.5, 1.5] for y0 = 1.3: clamped, with one RuntimeWarning naming the sample."""
    with pytest.warns(RuntimeWarning, match=r"Feedback.delays\[0\].*1 sample\(s\) \(1\)"):
        odelab.solve(Feedback(), torch.tensor([[0.5], [1.3]], dtype=F64), [0.0, 1.0], method="rodas4", history=1.0)


class Learnable(Linear):
    def __init__(self):
        super().__init__(1.0, 1.0)
        self.delays = (torch.tensor(1.0, requires_grad=True),)


@pytest.mark.parametrize("system,kwargs,match", [
    (Learnable(), {}, r"delays\[0\]: rodas4 reads constant and state-dependent delays; this one is learnable"),
    (Linear(1.0, 1.0), dict(event=lambda t, y: y[0][:, 0], reset=lambda t, y: y), "reset: events with resets"),
    (Feedback(), dict(track_discontinuities=1), "track_discontinuities: expected True or False"),
])
def test_refused(system, kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        odelab.solve(system, torch.ones(1, 1, dtype=F64), [0.0, 1.0], method="rodas4", **kwargs)
