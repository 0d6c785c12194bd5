"""``mass=M``: M y' = f(t, y) under ``rodas4`` (and ``rodas4p``, ``rodas4p2``; M may be singular: DAEs of index 1)
and ``rosenbrock23`` (M nonsingular). References: closed forms (a linear DAE whose algebraic component is sin t, a decay with a learnable
mass, a constant-coefficient system through the matrix exponential), Robertson's kinetics as a DAE against scipy's
Radau on the ODE form, the empirical order at fixed steps, and gradcheck."""
import math

import numpy as np
import pytest
import torch
from scipy.integrate import solve_ivp
from scipy.linalg import expm

import odelab

F64 = torch.float64
METHODS = ["rosenbrock23", "rodas4"]


def sine_dae(t, y):
    """y1' = −y1 + y2, 0 = y2 − sin t: y2 = sin t, y1 = (sin t − cos t + e^(−t)) / 2 from y = (0, 0)."""
    return torch.cat([-y[:, :1] + y[:, 1:], y[:, 1:] - torch.sin(t)], 1)


def sine_dae_exact(t: np.ndarray) -> np.ndarray:
    return np.stack([(np.sin(t) - np.cos(t) + np.exp(-t)) / 2, np.sin(t)], -1)


def test_linear_dae_against_its_closed_form():
    """Both components at every output time within 1e-8 at rtol 1e-10, given the diagonal (1, 0)."""
    t = torch.linspace(0.0, 5.0, 11, dtype=F64)
    sol = odelab.solve(sine_dae, torch.zeros(1, 2, dtype=F64), t, method="rodas4", mass=[1.0, 0.0], rtol=1e-10,
                       atol=1e-12)
    assert sol.success.all()
    np.testing.assert_allclose(sol.y[0].numpy(), sine_dae_exact(t.numpy()), atol=1e-8, rtol=0)


@pytest.mark.parametrize("method", ["rodas4", "rodas4p", "rodas4p2"])
def test_order_four_on_the_dae_at_fixed_steps(method):
    """Steps held at h: y1's error at t = 2 falls as h⁴ (the RODAS methods keep order 4 on index-1 DAEs), and the
    algebraic y2 sits on its constraint at every step's end (stiffly accurate: the last stage solves
    0 = y2 − sin t)."""
    steps, errors = [0.2, 0.1, 0.05, 0.025], []
    exact = sine_dae_exact(np.array([2.0]))[0]
    for h in steps:
        sol = odelab.solve(sine_dae, torch.zeros(1, 2, dtype=F64), [0.0, 2.0], method=method, mass=[1.0, 0.0],
                           first_step=h, dt_max=h, rtol=1e3, atol=1e3)
        assert int(sol.stats["rejected"]) == 0
        errors.append(abs(float(sol.y[0, -1, 0]) - exact[0]))
        assert abs(float(sol.y[0, -1, 1]) - exact[1]) < 1e-13
    assert abs(np.polyfit(np.log(steps), np.log(errors), 1)[0] - 4) < 0.15


@pytest.mark.parametrize("method,order,tolerance", [("rosenbrock23", 2, 1e-5), ("rodas4", 4, 1e-8)])
def test_nonsingular_mass_matches_the_matrix_exponential_with_the_method_order(method, order, tolerance):
    """M y' = A y, y(t) = exp(M⁻¹A t) y0 (scipy's expm): the order at fixed steps, and at rtol 1e-8 within 1e-5
    (rosenbrock23, order 2: ~900 steps) or 1e-8 (rodas4)."""
    mass, a = np.array([[2.0, 0.5], [0.3, 1.0]]), np.array([[-1.0, 2.0], [-3.0, -0.5]])
    field = lambda t, y: y @ torch.tensor(a.T)
    y0 = np.array([[1.0, 0.5]])
    exact = expm(np.linalg.solve(mass, a) * 2.0) @ y0[0]
    steps, errors = [0.2, 0.1, 0.05, 0.025], []
    for h in steps:
        sol = odelab.solve(field, torch.tensor(y0), [0.0, 2.0], method=method, mass=torch.tensor(mass),
                           first_step=h, dt_max=h, rtol=1e3, atol=1e3)
        errors.append(np.abs(sol.y[0, -1].numpy() - exact).max())
    assert abs(np.polyfit(np.log(steps), np.log(errors), 1)[0] - order) < 0.15
    sol = odelab.solve(field, torch.tensor(y0), [0.0, 2.0], method=method, mass=torch.tensor(mass), rtol=1e-8,
                       atol=1e-10)
    np.testing.assert_allclose(sol.y[0, -1].numpy(), exact, atol=tolerance, rtol=0)


@pytest.mark.parametrize("method", METHODS)
def test_a_mass_matrix_per_sample(method):
    """(batch, d, d): m_b y' = −y, y = e^(−t/m_b), each sample its own m."""
    masses = torch.tensor([0.5, 1.0, 4.0], dtype=F64)
    t = torch.linspace(0.0, 3.0, 7, dtype=F64)
    sol = odelab.solve(lambda t, y: -y, torch.ones(3, 1, dtype=F64), t, method=method, mass=masses.view(3, 1, 1),
                       rtol=1e-9, atol=1e-11)
    torch.testing.assert_close(sol.y[:, :, 0], torch.exp(-t / masses.unsqueeze(1)), atol=1e-6, rtol=0)


def test_robertson_as_a_dae_against_radau_on_the_ode_form():
    """y3 by conservation, 0 = y1 + y2 + y3 − 1 (M = diag(1, 1, 0)), over t ∈ [0, 4e4]: y1, 1e4 y2 and y3 within 2e-5
    relative (+1e-6) of scipy's Radau on the three ODEs at rtol 1e-10."""
    def field(t, y):
        a, b, c = y[:, :1], y[:, 1:2], y[:, 2:]
        return torch.cat([-0.04 * a + 1e4 * b * c, 0.04 * a - 1e4 * b * c - 3e7 * b * b, a + b + c - 1], 1)

    times = np.array([0.0, 0.4, 4.0, 40.0, 400.0, 4000.0, 40000.0])
    sol = odelab.solve(field, torch.tensor([[1.0, 0.0, 0.0]], dtype=F64), torch.tensor(times), method="rodas4",
                       mass=[1.0, 1.0, 0.0], rtol=1e-8, atol=1e-12, tstops=torch.tensor(times))
    ref = solve_ivp(lambda t, y: [-0.04 * y[0] + 1e4 * y[1] * y[2], 0.04 * y[0] - 1e4 * y[1] * y[2] - 3e7 * y[1] ** 2,
                                  3e7 * y[1] ** 2], (0, times[-1]), [1.0, 0.0, 0.0], method="Radau", rtol=1e-10,
                    atol=1e-14, t_eval=times).y.T
    scale = np.array([1.0, 1e4, 1.0])
    assert sol.success.all()
    assert (np.abs(sol.y[0].numpy() - ref) * scale / (np.abs(ref) * scale + 1e-6)).max() < 2e-5
    np.testing.assert_allclose(sol.y[0].numpy().sum(1), 1.0, atol=1e-12)


def test_gradients_through_the_dae_and_the_mass():
    """m y1' = −k y1 + y2, 0 = c − y2 from (y10, c): y1 = c/k + (y10 − c/k) e^(−kt/m); dy1(T)/dk, /dc (through y0 and
    f) and /dm against their closed forms."""
    k, c, m = (torch.tensor(v, dtype=F64, requires_grad=True) for v in (1.5, 0.7, 2.0))
    y10, end = 0.2, 1.3
    y0 = torch.stack([torch.tensor(y10, dtype=F64), c]).unsqueeze(0)
    field = lambda t, y: torch.cat([-k * y[:, :1] + y[:, 1:], c - y[:, 1:]], 1)
    sol = odelab.solve(field, y0, [0.0, end], method="rodas4", mass=torch.stack([m, torch.zeros_like(m)]),
                       rtol=1e-10, atol=1e-12)
    grads = torch.autograd.grad(sol.y[0, -1, 0], (k, c, m))
    kv, cv, mv = 1.5, 0.7, 2.0
    decay = math.exp(-kv * end / mv)
    expected = (-cv / kv**2 + cv / kv**2 * decay - (y10 - cv / kv) * end / mv * decay,
                (1 - decay) / kv,
                (y10 - cv / kv) * decay * kv * end / mv**2)
    for got, want in zip(grads, expected):
        assert abs(float(got) - want) < 1e-7


@pytest.mark.parametrize("method", METHODS)
def test_gradcheck_with_a_mass_at_fixed_steps(method):
    """Fixed steps (the step control takes no part): the discrete solution's gradients in y0, the field's
    parameter and M, by finite differences."""
    mass = torch.tensor([[1.5, 0.2], [0.1, 1.0]], dtype=F64, requires_grad=True)
    p = torch.tensor(0.8, dtype=F64, requires_grad=True)
    y0 = torch.tensor([[1.0, -0.5]], dtype=F64, requires_grad=True)

    def end(y0, p, mass):
        field = lambda t, y: torch.cat([-p * y[:, :1] + y[:, 1:] ** 2, -y[:, 1:] + torch.sin(t) * y[:, :1]], 1)
        return odelab.solve(field, y0, [0.0, 1.0], method=method, mass=mass, first_step=0.25, dt_max=0.25,
                            rtol=1e3, atol=1e3).y[:, -1]

    assert torch.autograd.gradcheck(end, (y0, p, mass))


def test_events_and_backwards_on_the_dae():
    """The algebraic y2 = sin t falls through zero at π (an event on the dense output); integrating back from t = 5
    to 0 from the closed form recovers y(0) = 0."""
    sol = odelab.solve(sine_dae, torch.zeros(1, 2, dtype=F64), [0.0, 5.0], method="rodas4", mass=[1.0, 0.0],
                       rtol=1e-10, atol=1e-12, event=lambda t, y: y[:, 1], event_direction=-1)
    assert bool(sol.event.happened[0]) and abs(float(sol.event.t[0]) - math.pi) < 1e-7
    start = torch.tensor(sine_dae_exact(np.array([5.0])), dtype=F64)
    back = odelab.solve(sine_dae, start, [5.0, 0.0], method="rodas4", mass=[1.0, 0.0], rtol=1e-10, atol=1e-12)
    assert float(back.y[0, -1].abs().max()) < 1e-8


def test_float32_and_a_system_state_of_blocks():
    """A two-block System: M over the concatenated state; float32 at rtol 1e-5."""
    from odelab.systems import VanDerPol
    t = torch.linspace(0.0, 2.0, 5)
    sol = odelab.solve(VanDerPol(mu=1.0), torch.tensor([[2.0, 0.0]]), t, method="rodas4", mass=torch.eye(2) * 2,
                       rtol=1e-5, atol=1e-7)
    ref = solve_ivp(lambda s, y: [y[1] / 2, ((1 - y[0] ** 2) * y[1] - y[0]) / 2], (0, 2), [2.0, 0.0], rtol=1e-10,
                    atol=1e-10, t_eval=t.numpy()).y.T
    assert sol.y.dtype == torch.float32
    np.testing.assert_allclose(sol.y[0].numpy(), ref, atol=1e-4)


def test_bad_mass_arguments():
    y0 = torch.zeros(1, 2, dtype=F64)
    with pytest.raises(ValueError, match="mass: M y' = f is solved by the linearly implicit methods only"):
        odelab.solve(sine_dae, y0, [0.0, 1.0], mass=[1.0, 0.0])
    with pytest.raises(ValueError, match="singular .*method='rodas4'"):
        odelab.solve(sine_dae, y0, [0.0, 1.0], method="rosenbrock23", mass=[1.0, 0.0])
    with pytest.raises(ValueError, match=r"mass: expected \(2, 2\)"):
        odelab.solve(sine_dae, y0, [0.0, 1.0], method="rodas4", mass=torch.eye(3))
    with pytest.raises(ValueError, match="NaN"):
        odelab.solve(sine_dae, y0, [0.0, 1.0], method="rodas4", mass=[1.0, math.nan])
    with pytest.raises(TypeError, match="mass"):
        odelab.solve(sine_dae, y0, [0.0, 1.0], method="rodas4", mass="identity")
    with pytest.raises(ValueError, match="y0: inconsistent with the algebraic equations.*sample 1"):
        odelab.solve(sine_dae, torch.tensor([[0.0, 0.0], [0.0, 0.3]], dtype=F64), [0.0, 1.0], method="rodas4",
                     mass=[1.0, 0.0])
    with pytest.raises(ValueError, match="initialize: expected 'check'"):
        odelab.solve(sine_dae, y0, [0.0, 1.0], method="rodas4", mass=[1.0, 0.0], initialize="newton")
    with pytest.raises(ValueError, match="initialize: 'algebraic' solves .* none was given"):
        odelab.solve(sine_dae, y0, [0.0, 1.0], method="rodas4", initialize="algebraic")
    with pytest.raises(ValueError, match="initialize: M y' = f is solved by the linearly implicit methods only"):
        odelab.solve(sine_dae, y0, [0.0, 1.0], initialize="algebraic")
    with pytest.raises(ValueError, match="null spaces of different sizes"):
        odelab.solve(sine_dae, torch.zeros(2, 2, dtype=F64), [0.0, 1.0], method="rodas4",
                     mass=torch.stack([torch.diag(torch.tensor([1.0, 0.0])), torch.eye(2)]).double())
    with pytest.raises(ValueError, match="y0: inconsistent.*Newton's method from y0 did not reach it"):
        # 0 = y2² + 1 has no real root
        odelab.solve(lambda t, y: torch.cat([-y[:, :1], y[:, 1:] ** 2 + 1], 1), y0, [0.0, 1.0], method="rodas4",
                     mass=[1.0, 0.0], initialize="algebraic")
    with pytest.raises(ValueError, match="adjoint"):
        odelab.solve(sine_dae, y0, [0.0, 1.0], method="rodas4", mass=[1.0, 0.0], adjoint="checkpoint")


def test_initialize_algebraic_solves_for_the_algebraic_components():
    """From y0 = (0, 0.7), off the constraint y2 = sin t, Newton's method moves y2 to 0 and keeps y1: the closed
    form again; a nonlinear constraint 0 = y2³ + y2 − y1 reaches its real root to 1e-12 (y1 kept)."""
    t = torch.linspace(0.0, 5.0, 11, dtype=F64)
    sol = odelab.solve(sine_dae, torch.tensor([[0.0, 0.7]], dtype=F64), t, method="rodas4", mass=[1.0, 0.0],
                       initialize="algebraic", rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(sol.y[0].numpy(), sine_dae_exact(t.numpy()), atol=1e-8, rtol=0)
    cubic = lambda t, y: torch.cat([-y[:, :1], y[:, 1:] ** 3 + y[:, 1:] - y[:, :1]], 1)
    y0 = torch.tensor([[2.0, -3.0], [10.0, 5.0]], dtype=F64)
    sol = odelab.solve(cubic, y0, [0.0, 1.0], method="rodas4", mass=[1.0, 0.0], initialize="algebraic")
    start = sol.y[:, 0].numpy()
    np.testing.assert_allclose(start[:, 0], [2.0, 10.0], rtol=0, atol=0)
    np.testing.assert_allclose(start[:, 1] ** 3 + start[:, 1] - start[:, 0], 0.0, atol=1e-12)
    assert abs(start[0, 1] - 1.0) < 1e-12 and abs(start[1, 1] - 2.0) < 1e-12  # 1 + 1 = 2, 8 + 2 = 10


def test_a_general_singular_mass_matrix():
    """M = [[1, 1], [1, 1]] (rank 1): s = y1 + y2 obeys s' = −s and the left null vector (1, −1) gives 0 = y1 − 2 y2.
    From (1, 0) the start moves along the right null vector (1, −1) to (2/3, 1/3), keeping s = 1: y = (2/3, 1/3)
    e^(−t); "check" refuses (1, 0)."""
    def field(t, y):
        first = -(y[:, :1] + y[:, 1:])
        return torch.cat([first, first + y[:, :1] - 2 * y[:, 1:]], 1)

    mass = torch.ones(2, 2, dtype=F64)
    t = torch.linspace(0.0, 3.0, 7, dtype=F64)
    sol = odelab.solve(field, torch.tensor([[1.0, 0.0]], dtype=F64), t, method="rodas4", mass=mass,
                       initialize="algebraic", rtol=1e-10, atol=1e-12)
    exact = torch.exp(-t).unsqueeze(1) * torch.tensor([2 / 3, 1 / 3], dtype=F64)
    torch.testing.assert_close(sol.y[0], exact, atol=1e-8, rtol=0)
    with pytest.raises(ValueError, match="y0: inconsistent"):
        odelab.solve(field, torch.tensor([[1.0, 0.0]], dtype=F64), t, method="rodas4", mass=mass)


def test_the_initialisation_passes_the_implicit_function_theorem_gradient():
    """y1' = −y2, 0 = y2 − c y1 from (y10, anything): y2(0) = c y10, y2 = c y10 e^(−ct). d y2(T)/dc =
    y10 e^(−cT)(1 − cT), d/dy10 = c e^(−cT), and the given y2(0) passes no gradient."""
    c = torch.tensor(0.6, dtype=F64, requires_grad=True)
    y0 = torch.tensor([[1.5, -4.0]], dtype=F64, requires_grad=True)
    field = lambda t, y: torch.cat([-y[:, 1:], y[:, 1:] - c * y[:, :1]], 1)
    end = 2.0
    sol = odelab.solve(field, y0, [0.0, end], method="rodas4", mass=[1.0, 0.0], initialize="algebraic",
                       rtol=1e-11, atol=1e-13)
    d_c, d_y0 = torch.autograd.grad(sol.y[0, -1, 1], (c, y0))
    decay = math.exp(-0.6 * end)
    assert abs(float(d_c) - 1.5 * decay * (1 - 0.6 * end)) < 1e-7
    assert abs(float(d_y0[0, 0]) - 0.6 * decay) < 1e-7 and float(d_y0[0, 1]) == 0.0
