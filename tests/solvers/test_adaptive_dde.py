"""Adaptive solvers on delay systems: dense history, landing on t0 + kτ, history semantics, per-sample
steps, gradients. References: closed-form solutions and an independent fixed-step method of steps
(RK4 with a cubic Hermite history) written in this file."""
import math

import pytest
import torch
import torch.autograd.forward_ad as fwAD

import odelab
from odelab.solvers import Status
from odelab.systems import System
from odelab.systems import ENSO

from helpers import assert_matches_finite_differences, learnable_delay_system

F64 = torch.float64
METHODS = ["dopri5", "tsit5", "bosh3"]


class NegativeFeedback(System):
    """y'(t) = −a y(t − τ)."""

    blocks = ("y",)
    observable = "y"

    def __init__(self, a=1.0, tau=1.0, size=1):
        super().__init__()
        self.a, self.tau, self.hidden_size = a, tau, size

    @property
    def delays(self):
        return (self.tau,)

    def derivative(self, t, state, inp, *delayed):
        return (-self.a * delayed[0][0],)


def piecewise_exact(t: float) -> float:
    """y' = −y(t − 1), y = 1 on [−1, 0] (method of steps): 1 − t, then + (t−1)²/2, then − (t−2)³/6."""
    y = 1 - t
    if t > 1:
        y += (t - 1) ** 2 / 2
    if t > 2:
        y -= (t - 2) ** 3 / 6
    return y


@pytest.mark.parametrize("method", METHODS)
def test_constant_history_piecewise_polynomial(method):
    t = torch.linspace(0, 3, 31, dtype=F64)
    sol = odelab.solve(NegativeFeedback(), torch.ones(2, 1, dtype=F64), t, method=method, rtol=1e-8, atol=1e-10)
    exact = torch.tensor([piecewise_exact(float(x)) for x in t], dtype=F64)
    # each piece is a polynomial of degree ≤ 3, and the solver steps onto t = 1, 2 (the kinks), so every
    # method (order ≥ 3, dense output exact for cubics) reproduces it to round-off
    assert (sol.y[:, :, 0] - exact).abs().max() < 1e-12
    assert bool(sol.success.all())


@pytest.mark.parametrize("method", METHODS)
def test_explicit_history_values(method):
    """history as a number, a (batch, 1) tensor (one constant per sample) and None (= y0)."""
    t = torch.tensor([0.0, 0.5, 1.5, 2.5], dtype=F64)
    y0 = torch.tensor([[1.0], [2.0]], dtype=F64)
    exact = torch.tensor([piecewise_exact(float(x)) for x in t], dtype=F64)
    as_number = odelab.solve(NegativeFeedback(), torch.ones(2, 1, dtype=F64), t, method=method, history=1.0)
    assert (as_number.y[:, :, 0] - exact).abs().max() < 1e-12
    per_sample = odelab.solve(NegativeFeedback(), y0, t, method=method, history=y0.clone())
    default = odelab.solve(NegativeFeedback(), y0, t, method=method)
    assert (per_sample.y[:, :, 0] - y0 * exact).abs().max() < 1e-12
    assert torch.equal(per_sample.y, default.y)


@pytest.mark.parametrize("method", ["dopri5", "tsit5"])
def test_smooth_callable_history_sine(method):
    """y' = −y(t − π/2) with history c_b sin t has the solution c_b sin t (per-sample amplitudes; the
    callable receives per-sample times as a (batch, 1) tensor)."""
    amplitude = torch.tensor([[1.0], [-0.5], [2.0]], dtype=F64)
    t = torch.linspace(0, 10, 41, dtype=F64)
    sol = odelab.solve(NegativeFeedback(tau=math.pi / 2), amplitude.clone(), t, method=method,
                       history=lambda s: amplitude * torch.sin(torch.as_tensor(s, dtype=F64)), rtol=1e-10, atol=1e-12)
    sol0 = amplitude.new_zeros(3, 1)  # y0 = c sin 0 = 0 is a consistent start as well
    sol_zero = odelab.solve(NegativeFeedback(tau=math.pi / 2), sol0, t, method=method,
                            history=lambda s: amplitude * torch.sin(torch.as_tensor(s, dtype=F64)), rtol=1e-10, atol=1e-12)
    exact = amplitude * torch.sin(t).view(1, -1)
    # margin: measured ≤ 9e-10 (dopri5) and 2.5e-10 (tsit5) for both checks, > 100x below the bound
    assert (sol_zero.y[:, :, 0] - exact).abs().max() < 1e-7
    # starting from y0 = c instead (a jump at t0): on [0, π/2] y' = −c sin(t − π/2) = c cos t, y = c + c sin t
    first = t <= math.pi / 2
    assert (sol.y[:, first, 0] - exact[:, first] - amplitude).abs().max() < 1e-7


class RotationWithDelays(System):
    """Two blocks and two delays:  a' = b(t − 2π),  b' = −b(t − π/2);  history a = sin, b = cos gives
    a = sin t, b = cos t."""

    blocks = ("a", "b")
    observable = "a"
    delays = (2 * math.pi, math.pi / 2)
    hidden_size = 1

    def derivative(self, t, state, inp, *delayed):
        (_, b_long), (_, b_short) = delayed
        return (b_long, -b_short)


def test_two_blocks_two_delays():
    t = torch.linspace(0, 8, 17, dtype=F64)
    history = lambda s: (torch.sin(torch.as_tensor(s, dtype=F64)), torch.cos(torch.as_tensor(s, dtype=F64)))
    y0 = (torch.zeros(2, 1, dtype=F64), torch.ones(2, 1, dtype=F64))
    sol = odelab.solve(RotationWithDelays(), y0, t, history=history, rtol=1e-10, atol=1e-12)
    assert (sol["a"][:, :, 0] - torch.sin(t)).abs().max() < 1e-8  # margin: measured 1.7e-10 and 1.9e-10
    assert (sol["b"][:, :, 0] - torch.cos(t)).abs().max() < 1e-8


def _reference_method_of_steps(system, y0: torch.Tensor, t_end: float, steps_per_delay: int):
    """RK4 with dt = τ / N: delayed states at grid nodes are stored states; at half steps, the cubic
    Hermite interpolant of the stored (y, f) of the surrounding step. Constant history y0."""
    tau = system.delays[0]
    dt = tau / steps_per_delay
    ys, fs = [y0], []

    def delayed(k2: int):  # y at time (k2 / 2) dt − τ, k2 counted in half steps
        j2 = k2 - 2 * steps_per_delay
        if j2 <= 0:
            return y0
        if j2 % 2 == 0:
            return ys[j2 // 2]
        j = j2 // 2
        return 0.5 * (ys[j] + ys[j + 1]) + dt / 8 * (fs[j] - fs[j + 1])

    f = lambda y, d: system.derivative(None, (y,), None, (d,))[0]
    n = round(t_end / dt)
    for k in range(n):
        y = ys[k]
        k1 = f(y, delayed(2 * k))
        fs.append(k1)
        k2 = f(y + dt / 2 * k1, delayed(2 * k + 1))
        k3 = f(y + dt / 2 * k2, delayed(2 * k + 1))
        k4 = f(y + dt * k3, delayed(2 * k + 2))
        ys.append(y + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4))
    return torch.stack(ys, 1), dt


def test_enso_against_method_of_steps_reference():
    system = ENSO()
    y0 = torch.tensor([[0.5], [-0.2], [1.0]], dtype=F64)
    reference, dt = _reference_method_of_steps(system, y0, 48.0, 480)  # dt = 0.01
    t = torch.linspace(0, 48, 9, dtype=F64)
    index = [round(float(x) / dt) for x in t]
    sol = odelab.solve(system, y0, t, rtol=1e-9, atol=1e-11)
    assert (sol.y[:, :, 0] - reference[:, index, 0]).abs().max() < 1e-6


def test_per_sample_steps_in_a_delay_batch():
    """ENSO with per-sample coupling c: each sample's solve is independent of the batch."""
    c = torch.tensor([[0.5], [0.93], [1.5]], dtype=F64)
    y0 = torch.tensor([[0.5], [0.5], [0.5]], dtype=F64)
    t = torch.linspace(0, 30, 7, dtype=F64)
    batch = odelab.solve(ENSO(c=c), y0, t, rtol=1e-7, atol=1e-9)
    assert len(set(batch.stats["steps"].tolist())) > 1
    for i in range(3):
        alone = odelab.solve(ENSO(c=c[i:i + 1]), y0[i:i + 1], t, rtol=1e-7, atol=1e-9)
        assert int(alone.stats["steps"][0]) == int(batch.stats["steps"][i])
        assert torch.allclose(alone.y[0], batch.y[i], rtol=0, atol=1e-12)


class LearnableFeedback(System):
    """y' = −a y(t − 1) + b y, with a, b learnable."""

    blocks = ("y",)
    observable = "y"
    delays = (1.0,)
    hidden_size = 1

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Parameter(torch.tensor(0.8, dtype=F64))
        self.b = torch.nn.Parameter(torch.tensor(-0.2, dtype=F64))

    def derivative(self, t, state, inp, *delayed):
        return (-self.a * delayed[0][0] + self.b * state[0],)


@pytest.mark.parametrize("method,tol", [("dopri5", 1e-9), ("bosh3", 1e-7)])
def test_gradients_against_finite_differences(method, tol):
    system = LearnableFeedback()
    y0 = torch.tensor([[1.0], [0.5]], dtype=F64, requires_grad=True)
    history = torch.tensor([[0.7], [-0.3]], dtype=F64, requires_grad=True)
    t = torch.linspace(0, 3.5, 8, dtype=F64)

    def loss():
        sol = odelab.solve(system, y0, t, method=method, history=history, rtol=tol, atol=tol / 10)
        return (sol.y**2).sum()

    params = [y0, history, system.a, system.b]
    grads = torch.autograd.grad(loss(), params)
    # autograd differentiates the steps taken, not the step-size choice: O(tol) apart from finite differences
    assert_matches_finite_differences(loss, params, grads, eps=1e-6, rtol=max(1e-6, 50 * tol))


def test_delay_boundary_errors():
    with pytest.raises(ValueError, match="checkpoint_segments"):
        odelab.solve(NegativeFeedback(), torch.ones(1, 1), torch.tensor([0.0, 1.0]), checkpoint_segments=2)
    with pytest.raises(ValueError, match="history"):
        odelab.solve(NegativeFeedback(), torch.ones(1, 1), torch.tensor([0.0, 1.0]), history=torch.ones(3, 4))
    with pytest.raises(ValueError, match="delays"):
        odelab.solve(NegativeFeedback(tau=0.0), torch.ones(1, 1), torch.tensor([0.0, 1.0]))


def test_failure_status_in_a_delay_solve():
    """y' = y(t − 1)² y: from y0 = 3 it grows like e^(9t) and then super-exponentially, so with a small
    max_steps that sample fails while the mild one (y0 = 0.1) succeeds; throw=False keeps both."""

    class Growth(NegativeFeedback):
        def derivative(self, t, state, inp, *delayed):
            return (delayed[0][0] ** 2 * state[0],)

    y0 = torch.tensor([[0.1], [3.0]], dtype=F64)
    sol = odelab.solve(Growth(), y0, torch.tensor([0.0, 1.0, 3.0], dtype=F64), max_steps=40, throw=False)
    assert sol.status[0] == Status.SUCCESS
    assert sol.status[1] != Status.SUCCESS
    assert torch.isfinite(sol.y[0]).all()


@pytest.mark.parametrize("method", METHODS)
def test_forward_mode_through_a_learnable_delay(method):
    """The caller's own forward-mode AD (a tangent on y0) through a solve with a learnable delay: bosh3 error-controls
    ∂y/∂τ with a forward-mode level of its own, which cannot nest inside the caller's (before: "Nested forward mode
    AD is not supported"); the tangent of y(T) against central differences of the solve."""
    system = learnable_delay_system()
    y0, direction = torch.tensor([[1.0], [0.5]], dtype=F64), torch.tensor([[1.0], [-2.0]], dtype=F64)
    solve = lambda start: odelab.solve(system, start, [0.0, 2.5], method=method, rtol=1e-10, atol=1e-12).y[:, -1]
    with fwAD.dual_level():
        tangent = fwAD.unpack_dual(solve(fwAD.make_dual(y0, direction))).tangent
    eps = 1e-6
    with torch.no_grad():
        central = (solve(y0 + eps * direction) - solve(y0 - eps * direction)) / (2 * eps)
    assert torch.allclose(tangent, central, rtol=1e-6, atol=1e-8)
