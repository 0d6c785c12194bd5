"""``rosenbrock23`` (Shampine & Reichelt's Rosenbrock triple), ``rodas4`` (Hairer & Wanner's RODAS), ``rodas4p`` and
``rodas4p2`` (Steinebach's RODASP and its 2020 improvement) for stiff ODEs. References: closed forms (decay, the
Prothero–Robinson problem, a piecewise-exponential solution under a hold input), scipy's Radau at tight tolerances
(an independent implicit solver), the empirical convergence order at fixed steps, and gradients by hand."""
import math

import numpy as np
import pytest
import torch
from scipy.integrate import solve_ivp

import odelab
from odelab.systems import VanDerPol

F64 = torch.float64
METHODS = ["rosenbrock23", "rodas4", "rodas4p", "rodas4p2"]
_GAMMA23 = 1.0 / (2.0 + math.sqrt(2.0))  # rosenbrock23's d


def forced(t, y):
    """A non-autonomous pair (T = ∂f/∂t enters the method): y1' = −y1 + sin t, y2' = −2 y2 + y1²."""
    return torch.cat([-y[:, :1] + torch.sin(t), -2 * y[:, 1:] + y[:, :1] ** 2], 1)


@pytest.mark.parametrize("method,order,dense_order", [("rosenbrock23", 2, 2), ("rodas4", 4, 3), ("rodas4p", 4, 3),
                                                      ("rodas4p2", 4, 3)])
def test_order_at_fixed_steps_and_for_the_interpolant(method, order, dense_order):
    """Steps held at h (dt_max = first_step = h, tolerances that accept everything): the error at t = 2 falls as
    h^order (slope of log error against log h within 0.15; T enters), the dense output's between the steps at least
    as h^dense_order (RODAS's continuous extension is of order 3)."""
    y0 = torch.tensor([[1.0, 0.5]], dtype=F64)
    queries = torch.linspace(0.03, 1.97, 40, dtype=F64)
    grid = torch.cat([torch.zeros(1, dtype=F64), queries, torch.tensor([2.0], dtype=F64)])
    ref = solve_ivp(lambda t, y: [-y[0] + math.sin(t), -2 * y[1] + y[0] ** 2], (0, 2), [1.0, 0.5], method="DOP853",
                    rtol=1e-13, atol=1e-13, t_eval=grid.numpy()).y.T
    steps = [0.2, 0.1, 0.05, 0.025]
    end, between = [], []
    for h in steps:
        sol = odelab.solve(forced, y0, [0.0, 2.0], method=method, first_step=h, dt_max=h, rtol=1e3, atol=1e3,
                           dense=True)
        assert int(sol.stats["rejected"]) == 0
        end.append(np.abs(sol.y[0, -1].numpy() - ref[-1]).max())
        between.append(np.abs(sol.evaluate(queries)[0][0].numpy() - ref[1:-1]).max())
    assert abs(np.polyfit(np.log(steps), np.log(end), 1)[0] - order) < 0.15
    assert np.polyfit(np.log(steps), np.log(between), 1)[0] > dense_order - 0.15


@pytest.mark.parametrize("method", METHODS)
def test_prothero_robinson_takes_large_steps_where_dopri5_is_held_by_stability(method):
    """y' = λ (y − cos t) − sin t, λ = −10⁶, y = cos t + (y0 − 1) e^(λt): L-stability lets the steps follow cos t
    (a few hundred at rtol 1e-4), while the explicit pair's steps stay below its stability bound ~3.3 / |λ|. The
    steps land on the output times (tstops): rodas4's steps grow to ~5 here, longer than its cubic continuous
    extension can follow cos t between them."""
    lam = -1e6
    f = lambda t, y: lam * (y - torch.cos(t)) - torch.sin(t)
    t = torch.linspace(0.0, 10.0, 41, dtype=F64)
    sol = odelab.solve(f, torch.tensor([[2.0], [1.0]], dtype=F64), t, method=method, rtol=1e-4, atol=1e-7, tstops=t)
    exact = torch.cos(t) + torch.exp(lam * t) * torch.tensor([[1.0], [0.0]], dtype=F64)
    torch.testing.assert_close(sol.y[:, :, 0], exact, atol=2e-4, rtol=0)
    assert int(sol.stats["steps"].max()) < 1000 and sol.success.all()
    explicit = odelab.solve(f, torch.tensor([[2.0]], dtype=F64), [0.0, 0.01], rtol=1e-4, atol=1e-7)
    assert int(explicit.stats["steps"]) > 0.01 * 1e6 / 3.3 * 0.5


@pytest.mark.parametrize("method,order", [("rodas4", 1.0), ("rodas4p", 2.6), ("rodas4p2", 2.8)])
def test_prothero_robinson_at_intermediate_stiffness(method, order):
    """y' = −10³ (y − sin t) + cos t, y = sin t: with h λ between −200 and −25, RODAS's order drops to about 1 (its
    stages are order 1 on this problem), while RODASP and its successor keep about 3 (they satisfy Prothero and
    Robinson's conditions too); adaptively at rtol 1e-6 over [0, 20] RODAS takes over 1000 steps where they take
    under 100 (scipy's Radau: 67)."""
    f = lambda t, y: -1e3 * (y - torch.sin(t)) + torch.cos(t)
    steps = [0.2, 0.1, 0.05, 0.025]
    errors = []
    for h in steps:
        sol = odelab.solve(f, torch.zeros(1, 1, dtype=F64), [0.0, 2.0], method=method, first_step=h, dt_max=h,
                           rtol=1e10, atol=1e10)
        errors.append(abs(float(sol.y[0, -1, 0]) - math.sin(2.0)))
    slope = np.polyfit(np.log(steps), np.log(errors), 1)[0]
    assert abs(slope - order) < 0.35, slope
    adaptive = odelab.solve(f, torch.zeros(1, 1, dtype=F64), torch.linspace(0.0, 20.0, 81, dtype=F64), method=method,
                            rtol=1e-6, atol=1e-9, max_steps=5000)
    count = int(adaptive.stats["steps"][0])
    assert count > 1000 if method == "rodas4" else count < 100
    assert abs(float(adaptive.y[0, -1, 0]) - math.sin(20.0)) < 1e-5  # a step's end
    torch.testing.assert_close(adaptive.y[0, :, 0], torch.sin(torch.linspace(0.0, 20.0, 81, dtype=F64)), atol=5e-4,
                               rtol=0)  # the outputs between steps, from the order-3 continuous extension


@pytest.mark.parametrize("method", METHODS)
def test_stiff_van_der_pol_against_radau(method):
    """μ = 1000 through the first relaxation jump (t ≤ 1000), a batch of two starting points, the odelab System:
    within 2e-3 of scipy's Radau at rtol 1e-10 at every output time (rtol 1e-5 here), in a few thousand steps (the
    explicit pairs need ~10⁶ on this span)."""
    t = np.linspace(0.0, 1000.0, 6)
    y0 = np.array([[2.0, 0.0], [1.0, 0.5]])
    sol = odelab.solve(VanDerPol(mu=1000.0), torch.tensor(y0), torch.tensor(t), method=method, rtol=1e-5,
                       atol=1e-7)
    assert sol.success.all() and int(sol.stats["steps"].max()) < 3000
    for b in range(2):
        ref = solve_ivp(lambda s, y: [y[1], 1000 * (1 - y[0] ** 2) * y[1] - y[0]], (0, 1000), y0[b], method="Radau",
                        rtol=1e-10, atol=1e-10, t_eval=t).y.T
        assert np.abs(sol.y[b].numpy() - ref).max() < 2e-3


@pytest.mark.parametrize("method", METHODS)
def test_hold_input_breakpoints(method):
    """y' = −50 (y − u) with u = 0, 1, −1 held on (0, 0.3], (0.3, 0.7], (0.7, 1]: the exact piecewise exponential;
    the steps land on the sample times (a jump of f there)."""
    u = torch.tensor([[[0.0], [0.0], [1.0], [-1.0]]], dtype=F64)
    knots = [0.0, 0.3, 0.7, 1.0]
    sol = odelab.solve(lambda t, y, v: -50 * (y - v), torch.ones(1, 1, dtype=F64), knots, u=u, u_times=knots,
                       method=method, rtol=1e-6, atol=1e-8)
    y, expected = 1.0, [1.0]
    for (a, b), level in zip(zip(knots, knots[1:]), (0.0, 1.0, -1.0)):
        y = level + (y - level) * math.exp(-50 * (b - a))
        expected.append(y)
    torch.testing.assert_close(sol.y[0, :, 0], torch.tensor(expected, dtype=F64), atol=1e-5, rtol=0)


@pytest.mark.parametrize("method", METHODS)
def test_gradients_through_the_steps(method):
    """y' = −k y: d y(2)/dk = −2 y0 e^(−2k), d y(2)/dy0 = e^(−2k); and a linear input's time derivative enters T:
    y' = u(t) with u linear from 0 to 1 over [0, 1] integrates to t²/2 exactly for a second-order method."""
    k = torch.tensor(0.7, dtype=F64, requires_grad=True)
    y0 = torch.tensor([[1.0], [2.0]], dtype=F64, requires_grad=True)
    sol = odelab.solve(lambda t, y: -k * y, y0, [0.0, 2.0], method=method, rtol=1e-7, atol=1e-9)
    grad_k, grad_y0 = torch.autograd.grad(sol.y[:, -1, 0].sum(), (k, y0))
    assert grad_k.item() == pytest.approx(-2 * 3.0 * math.exp(-1.4), rel=1e-4)
    torch.testing.assert_close(grad_y0[:, 0], torch.full((2,), math.exp(-1.4), dtype=F64), rtol=1e-4, atol=0)
    ramp = torch.tensor([[[0.0], [1.0]]], dtype=F64)
    sol = odelab.solve(lambda t, y, v: v, torch.zeros(1, 1, dtype=F64), [0.0, 1.0], u=ramp, interpolation="linear",
                       method=method)
    assert sol.y[0, -1, 0].item() == pytest.approx(0.5, abs=1e-12)


def test_no_graph_without_gradients_and_float32():
    with torch.no_grad():
        sol = odelab.solve(lambda t, y: -y, torch.ones(2, 1), [0.0, 1.0], method="rosenbrock23")
    assert not sol.y.requires_grad and sol.y.dtype == torch.float32
    assert sol.y[0, -1, 0].item() == pytest.approx(math.exp(-1), abs=1e-4)
    plain = odelab.solve(lambda t, y: -y, torch.ones(2, 1, dtype=F64), [0.0, 1.0], method="rosenbrock23")
    assert not plain.y.requires_grad  # nothing asked for a gradient: no graph was recorded


@pytest.mark.parametrize("method", METHODS)
def test_failures_events_and_backwards(method):
    """y' = y² from 1 blows up at t = 1: that sample fails (its steps shrink until max_steps), the other succeeds;
    an event stops at
    y = 10 (t = 0.9) before the blow-up; y' = y solved backwards from 0 to −1 gives e^(−1)."""
    y0 = torch.tensor([[1.0], [0.2]], dtype=F64)
    sol = odelab.solve(lambda t, y: y * y, y0, [0.0, 2.0], method="rosenbrock23", throw=False, max_steps=1000)
    assert sol.status.tolist() == [int(odelab.Status.MAX_STEPS), int(odelab.Status.SUCCESS)]
    assert 0.999 < sol.stats["t_final"][0].item() < 1.0
    assert sol.y[1, -1, 0].item() == pytest.approx(1 / (1 / 0.2 - 2), rel=1e-4)
    with pytest.raises(odelab.SolveError, match="max steps"):
        odelab.solve(lambda t, y: y * y, y0, [0.0, 2.0], method="rosenbrock23", max_steps=1000)
    stopped = odelab.solve(lambda t, y: y * y, y0, [0.0, 2.0], method="rosenbrock23", event=lambda t, y: y[:, 0] - 10,
                           rtol=1e-7, atol=1e-9, max_steps=1000)
    assert stopped.event.t[0].item() == pytest.approx(0.9, abs=5e-5) and stopped.success.all()
    back = odelab.solve(lambda t, y: y, torch.ones(1, 1, dtype=F64), [0.0, -1.0], method="rosenbrock23", rtol=1e-7,
                        atol=1e-9)
    assert back.y[0, -1, 0].item() == pytest.approx(math.exp(-1), rel=1e-5)


def test_max_steps_and_bad_arguments():
    sol = odelab.solve(lambda t, y: -y, torch.ones(1, 1, dtype=F64), [0.0, 10.0], method="rosenbrock23", max_steps=3,
                       throw=False)
    assert sol.status.tolist() == [int(odelab.Status.MAX_STEPS)] and int(sol.stats["steps"]) == 3
    with pytest.raises(TypeError, match="unexpected options \\['chunk'\\] for method 'rosenbrock23'"):
        odelab.solve(lambda t, y: -y, torch.ones(1, 1), [0.0, 1.0], method="rosenbrock23", chunk=4)
    with pytest.raises(ValueError, match="rtol"):
        odelab.solve(lambda t, y: -y, torch.ones(1, 1), [0.0, 1.0], method="rosenbrock23", rtol=-1.0)
    with pytest.raises(ValueError, match="adjoint: not implemented for 'rosenbrock23'"):
        odelab.solve(lambda t, y: -y, torch.ones(1, 1), [0.0, 1.0], method="rosenbrock23", adjoint="checkpoint")
    assert "rosenbrock23" in odelab.solvers.available_methods()


def test_the_three_ways_to_the_jacobian_agree():
    """dim 5 under gradients: J by forward-mode tangents (the default there), by one vmapped backward pass and
    row by row: the same steps and values, and the same gradient through the Jacobians' graphs."""
    from odelab.solvers import rosenbrock
    weight = torch.randn(5, 5, dtype=F64, generator=torch.Generator().manual_seed(0)) / 3
    k = torch.tensor(0.5, dtype=F64, requires_grad=True)
    f = lambda t, y: torch.tanh(y @ weight.T) * torch.cos(t) - 30 * k * y
    y0 = torch.randn(3, 5, dtype=F64, generator=torch.Generator().manual_seed(1))
    results = []
    for forward_mode, batched in ((True, True), (False, True), (False, False)):
        with pytest.MonkeyPatch.context() as patch:
            init = rosenbrock._Rosenbrock.__init__

            def configured(self, *a, **kw):
                init(self, *a, **kw)
                self.forward_mode, self.batched = forward_mode, batched

            patch.setattr(rosenbrock._Rosenbrock, "__init__", configured)
            sol = odelab.solve(f, y0, [0.0, 1.0], method="rodas4", rtol=1e-5, atol=1e-7)
            results.append((sol.y[:, -1], sol.stats["steps"], torch.autograd.grad(sol.y[:, -1].sum(), k)[0]))
    y_a, steps_a, grad_a = results[0]
    for y_b, steps_b, grad_b in results[1:]:
        assert torch.equal(steps_a, steps_b)
        torch.testing.assert_close(y_a, y_b, rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(grad_a, grad_b, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("method", METHODS)
def test_gradcheck_at_fixed_steps(method):
    """At fixed steps the solution is a smooth function of the parameters and y0, and autograd through the steps
    (J with its graph: the second derivatives of f) matches finite differences of the same discrete solve; dim 3
    takes the vmapped Jacobian."""
    weight = torch.randn(3, 3, dtype=F64, generator=torch.Generator().manual_seed(2))

    def end(scale, y0):
        f = lambda t, y: torch.tanh(y @ weight.T) - scale * y * y * y - 20 * y
        return odelab.solve(f, y0, [0.0, 0.5], method=method, first_step=0.1, dt_max=0.1, rtol=1e3, atol=1e3).y[:, -1]

    scale = torch.tensor(0.8, dtype=F64, requires_grad=True)
    y0 = torch.randn(2, 3, dtype=F64, generator=torch.Generator().manual_seed(3), requires_grad=True)
    assert torch.autograd.gradcheck(end, (scale, y0), eps=1e-6, atol=1e-7)


@pytest.mark.parametrize("method,gamma,tolerance", [("rodas4", 0.25, 1e-6), ("rodas4p2", 0.25, 1e-6),
                                                     ("rosenbrock23", _GAMMA23, 1e-4)])
def test_a_rejected_attempt_with_a_singular_matrix_passes_no_nan_into_the_gradient(method, gamma, tolerance):
    """y' = a y with a first step h = 1/(γ a): W = 1 − hγ a = 0, the first attempt's solves are NaN and it is
    rejected; autograd's pass back through it would give NaN unless it is recomputed. d/da Σ y(5) against
    5 Σ y0 e^(5a) (relative)."""
    a = torch.tensor(1.0, dtype=F64, requires_grad=True)
    sol = odelab.solve(lambda t, y: a * y, torch.tensor([[1.0], [2.0]], dtype=F64), [0.0, 5.0], method=method,
                       rtol=1e-8, atol=1e-10, first_step=1.0 / gamma)
    assert int(sol.stats["rejected"][0]) > 0
    grad, = torch.autograd.grad(sol.y[:, -1].sum(), a)
    exact = 5 * 3 * math.exp(5.0)
    assert abs(float(grad) - exact) < tolerance * exact
