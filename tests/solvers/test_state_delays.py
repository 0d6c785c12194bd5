"""State-dependent delays (``StateDelay``): y(t − τ(t, y(t))) under the adaptive explicit pairs. References: a
manufactured closed-form solution, a hand-written fine-step RK4 with a piecewise-linear history (numpy), central
finite differences for the gradient, and the error cases."""
import math
import warnings

import numpy as np
import pytest
import torch

import odelab
from odelab.systems import StateDelay, System

F64 = torch.float64


class Manufactured(System):
    """y'(t) = −y(t − τ) + g(t), τ = c + y(t)²/2 ∈ [1, 1.5]: g makes y = ½ cos t the solution for c = 1 (and the
    history ½ cos t), so the delayed read must follow the state."""

    blocks, hidden_size = ("y",), 1

    def __init__(self, c: float | torch.Tensor = 1.0):
        super().__init__()
        self.c = c
        self.delays = (StateDelay(self.tau, 1.0, 1.5),)

    def tau(self, t, state):
        return self.c + state[0][:, 0] ** 2 / 2

    def derivative(self, t, state, inp, delayed):
        lag = 1 + (0.5 * torch.cos(t)) ** 2 / 2
        return (-delayed[0] + (-0.5 * torch.sin(t) + 0.5 * torch.cos(t - lag)),)


class Decay(System):
    """y'(t) = −a y(t − τ), τ = 1 + y(t)² / 4 ∈ [1, 1.25] (|y| ≤ 1 here: a τ < π/2, a decaying oscillation), from
    the constant history 1: y' jumps at t0, and the jump propagates to where t − τ(y(t)) = 0, which the solver does
    not track."""

    blocks, hidden_size = ("y",), 1

    def __init__(self, a: float = 0.8):
        super().__init__()
        self.a = a
        self.delays = (StateDelay(lambda t, state: 1 + state[0][:, 0] ** 2 / 4, 1.0, 1.25),)

    def derivative(self, t, state, inp, delayed):
        return (-self.a * delayed[0],)


def decay_reference(a: float, end: float, h: float = 2e-4,
                    lag=lambda y: 1 + y * y / 4) -> tuple[np.ndarray, np.ndarray]:
    """y' = −a y(t − lag(y)) by RK4 at step h, the delayed value read from the past nodes by linear interpolation
    (1 before t = 0)."""
    n = int(round(end / h))
    times, ys = np.linspace(0.0, end, n + 1), np.empty(n + 1)
    ys[0] = 1.0

    def past(s, k):
        return 1.0 if s <= 0 else np.interp(s, times[:k + 1], ys[:k + 1])

    def f(s, y, k):
        return -a * past(s - lag(y), k)

    for k in range(n):
        t, y = times[k], ys[k]
        k1 = f(t, y, k)
        k2 = f(t + h / 2, y + h / 2 * k1, k)
        k3 = f(t + h / 2, y + h / 2 * k2, k)
        k4 = f(t + h, y + h * k3, k)
        ys[k + 1] = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return times, ys


@pytest.mark.parametrize("method", ["dopri5", "tsit5", "bosh3"])
def test_the_manufactured_solution(method):
    """Within 1e-8 of ½ cos t at rtol 1e-9 over [0, 10], with and without gradients (the loops agree: the fused C++
    loop, which reads constant lags, is not used)."""
    t = torch.linspace(0.0, 10.0, 21, dtype=F64)
    y0 = torch.full((2, 1), 0.5, dtype=F64)
    history = lambda s: 0.5 * torch.cos(s)
    sol = odelab.solve(Manufactured(), y0, t, method=method, history=history, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(sol.y[:, :, 0], 0.5 * torch.cos(t).expand(2, -1), atol=1e-8, rtol=0)
    with torch.no_grad():
        again = odelab.solve(Manufactured(), y0, t, method=method, history=history, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(again.y, sol.y, atol=1e-13, rtol=0)


def test_a_constant_history_against_a_fine_step_reference():
    """From the constant history 1, whose kink at t0 propagates untracked: within 5e-7 of the fine-step RK4 over
    [0, 6] at rtol 1e-8, with steps at most the lower bound 1."""
    times, ref = decay_reference(0.8, 6.0)
    t = torch.tensor(times[::2500], dtype=F64)
    sol = odelab.solve(Decay(), torch.ones(1, 1, dtype=F64), t, rtol=1e-8, atol=1e-10, history=1.0)
    assert sol.success.all()
    np.testing.assert_allclose(sol.y[0, :, 0].numpy(), ref[::2500], atol=5e-7, rtol=0)


def test_the_gradient_through_the_delay_against_finite_differences():
    """d/dc of Σ y(t) on the manufactured system, c in τ = c + y²/2 (c near 1, so τ stays in its bounds), through the
    delayed time's interpolant: autograd against central differences at rtol 1e-11, to 1e-5 relative."""
    t = torch.linspace(0.0, 6.0, 13, dtype=F64)
    y0, history = torch.full((1, 1), 0.5, dtype=F64), lambda s: 0.5 * torch.cos(s)
    solve = lambda c: odelab.solve(Manufactured(c), y0, t, history=history, rtol=1e-11, atol=1e-13).y.sum()
    c = torch.tensor(1.1, dtype=F64, requires_grad=True)
    grad, = torch.autograd.grad(solve(c), c)
    eps = 1e-5
    with torch.no_grad():
        central = (solve(torch.tensor(1.1 + eps, dtype=F64)) - solve(torch.tensor(1.1 - eps, dtype=F64))) / (2 * eps)
    assert abs(float(grad) - float(central)) < 1e-5 * abs(float(central)) and abs(float(central)) > 0.1


def test_delays_outside_the_bounds_are_clamped():
    """τ = 5 declared in [1, 2] for the second sample only: the solve reads y(t − 2) there, as the fine-step RK4
    with a lag of 2 does (to 5e-7), and one warning names the sample; a τ inside its bounds gives none."""
    class Clamped(Decay):
        def __init__(self):
            super().__init__()
            self.delays = (StateDelay(lambda t, state: torch.tensor([1.5, 5.0], dtype=F64), 1.0, 2.0),)

    times, ref = decay_reference(0.8, 6.0, lag=lambda y: 2.0)
    t = torch.tensor(times[::2500], dtype=F64)
    with pytest.warns(RuntimeWarning, match=r"delays\[0\] .* clamped onto them along 1 sample\(s\) \(1\)") as caught:
        clamped = odelab.solve(Clamped(), torch.ones(2, 1, dtype=F64), t, rtol=1e-10, atol=1e-12)
    assert len([w for w in caught if "clamped" in str(w.message)]) == 1 and caught[0].filename == __file__
    np.testing.assert_allclose(clamped.y[1, :, 0].numpy(), ref[::2500], atol=5e-7, rtol=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        odelab.solve(Decay(), torch.ones(2, 1, dtype=F64), t, rtol=1e-8, atol=1e-10)


def test_errors():
    with pytest.raises(ValueError, match="StateDelay: lower"):
        StateDelay(lambda t, s: t, 2.0, 1.0)
    with pytest.raises(ValueError, match="positive finite"):
        StateDelay(lambda t, s: t, 0.0, 1.0)
    with pytest.raises(TypeError, match="callable"):
        StateDelay(1.0, 1.0, 2.0)
    y0 = torch.ones(1, 1, dtype=F64)
    with pytest.raises(ValueError, match="state-dependent delay .* not by cells or the adjoints"):
        odelab.solve(Decay(), y0, [0.0, 1.0], method="rk4", dt=0.1, adjoint="checkpoint")

    class Wrong(Decay):
        def __init__(self):
            super().__init__()
            self.delays = (StateDelay(lambda t, state: torch.ones(3), 1.0, 2.0),)

    with pytest.raises(ValueError, match=r"must return \(batch,\) or \(batch, 1\)"):
        odelab.solve(Wrong(), y0, [0.0, 1.0])

    class Mixed(Decay):
        def __init__(self):
            super().__init__()
            self.delays = (self.delays[0], torch.tensor(1.0, dtype=F64, requires_grad=True))

        def derivative(self, t, state, inp, first, second):
            return (-self.a * first[0] - second[0],)

    with pytest.raises(ValueError, match="mixes a state-dependent delay with a learnable one"):
        odelab.solve(Mixed(), y0, [0.0, 1.0])
