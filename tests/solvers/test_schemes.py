"""Fixed-step schemes: empirical convergence order, symplectic energy behaviour, output landing, inputs."""
import math

import numpy as np
import pytest
import scipy.linalg
import torch

import odelab
from odelab.systems import HarmonicOscillator, System

T_END = 1.0
DTS = [0.1, 0.05, 0.025, 0.0125]


class LinearSplit(System):
    """z' = b y − a z,  y' = c z − e y: a two-block linear system with a forcing/decay split (a, e ≥ 0)."""

    blocks = ("z", "y")
    split_blocks = ("z", "y")
    hidden_size = 1
    a, b, c, e = 2.0, 1.0, -1.5, 0.5

    def split(self, i, t, state, inp, *delayed):
        z, y = state
        return (self.b * y, torch.full_like(z, self.a)) if i == 0 else (self.c * z, torch.full_like(y, self.e))

    def derivative(self, t, state, inp, *delayed):
        z, y = state
        return (self.b * y - self.a * z, self.c * z - self.e * y)

    def exact(self, x0, t):
        A = np.array([[-self.a, self.b], [self.c, -self.e]])
        return scipy.linalg.expm(A * t) @ x0


pytestmark = pytest.mark.usefixtures("float64")


def slope(dts, errors):
    return np.polyfit(np.log(dts), np.log(errors), 1)[0]


def explicit_errors(method):
    """y' = y cos t, y(0) = 1  ->  y = exp(sin t)."""
    errs = []
    for dt in DTS:
        sol = odelab.solve(lambda t, y: y * math.cos(t), torch.ones(1, 1), [0.0, T_END], method=method, dt=dt)
        errs.append(abs(sol.y[0, -1, 0].item() - math.exp(math.sin(T_END))))
    return errs


@pytest.mark.parametrize("method,order", [("euler", 1), ("midpoint", 2), ("heun", 2), ("rk4", 4)])
def test_explicit_rk_order(method, order):
    assert abs(slope(DTS, explicit_errors(method)) - order) < 0.2


@pytest.mark.parametrize("method", ["imex", "imex-implicit"])
def test_partitioned_order_on_linear_split_system(method):
    system = LinearSplit()
    x0 = np.array([1.0, -0.5])
    y0 = (torch.tensor([[x0[0]]]), torch.tensor([[x0[1]]]))
    exact = system.exact(x0, T_END)
    errs = []
    for dt in DTS:
        sol = odelab.solve(system, y0, [0.0, T_END], method=method, dt=dt)
        got = np.array([sol["z"][0, -1, 0].item(), sol["y"][0, -1, 0].item()])
        errs.append(np.abs(got - exact).max())
    assert abs(slope(DTS, errs) - 1) < 0.2


def test_symplectic_euler_order_on_harmonic_oscillator():
    omega = 2.0
    system = HarmonicOscillator(omega)
    errs = []
    for dt in DTS:
        sol = odelab.solve(system, (torch.zeros(1, 1), torch.ones(1, 1)), [0.0, T_END], method="symplectic-euler", dt=dt)
        p, q = sol["p"][0, -1, 0].item(), sol["q"][0, -1, 0].item()
        errs.append(max(abs(q - math.cos(omega * T_END)), abs(p + omega * math.sin(omega * T_END))))
    assert abs(slope(DTS, errs) - 1) < 0.2


def test_symplectic_euler_keeps_energy_bounded_where_euler_grows():
    system = HarmonicOscillator(1.0)
    y0 = (torch.zeros(1, 1), torch.ones(1, 1))
    t = torch.linspace(0, 1000.0, 101)  # 10^4 steps of dt = 0.1
    energies = {}
    for method in ("symplectic-euler", "euler"):
        sol = odelab.solve(system, y0, t, method=method, dt=0.1)
        energies[method] = system.energy((sol["p"][0], sol["q"][0]))
    e0 = 0.5
    assert (energies["symplectic-euler"] - e0).abs().max() / e0 < 0.06  # O(dt) oscillation, no drift
    assert energies["euler"][-1] / e0 > 1e3  # (1 + dt^2)^N growth


def test_output_times_not_multiples_of_dt_land_exactly():
    t = torch.tensor([0.0, 0.33, 0.71, 1.0, 1.234])
    sol = odelab.solve(lambda t, y: -y, torch.ones(2, 1), t, method="rk4", dt=0.1)
    assert torch.allclose(sol.ts, t)
    assert (sol.y[:, :, 0] - torch.exp(-t)).abs().max() < 1e-6
    assert int(sol.stats["steps"][0]) == 15  # 12 regular steps + 3 landing points inside the grid


def test_hold_and_linear_inputs_are_integrated_exactly():
    """y' = u(t): hold integrates the samples u_n over (t_{n-1}, t_n]; linear gives the trapezoid rule."""
    samples = torch.tensor([[0.0, 1.0, -2.0, 3.0, 0.5]]).unsqueeze(-1)
    t = torch.tensor([0.0, 0.5, 1.25, 2.0, 3.0])
    f = lambda t, y, u: u
    widths = torch.diff(t)
    hold = odelab.solve(f, torch.zeros(1, 1), t, u=samples, method="euler", dt=0.3)
    expected_hold = torch.cat([torch.zeros(1), torch.cumsum(samples[0, 1:, 0] * widths, 0)])
    assert torch.allclose(hold.y[0, :, 0], expected_hold, atol=1e-12)
    linear = odelab.solve(f, torch.zeros(1, 1), t, u=samples, interpolation="linear", method="heun", dt=0.3)
    trapezoid = 0.5 * (samples[0, 1:, 0] + samples[0, :-1, 0]) * widths
    assert torch.allclose(linear.y[0, :, 0], torch.cat([torch.zeros(1), torch.cumsum(trapezoid, 0)]), atol=1e-12)
    callable_u = odelab.solve(f, torch.zeros(1, 1), t, u=lambda s: torch.full((1, 1), s), method="rk4", dt=0.3)
    assert torch.allclose(callable_u.y[0, :, 0], t**2 / 2, atol=1e-12)


def test_solution_reports_stats_and_nonfinite_status():
    t = torch.linspace(0, 1, 3)
    sol = odelab.solve(lambda t, y: y**2, torch.tensor([[0.1], [50.0]]), t, method="euler", dt=0.05, throw=False)
    assert sol.status.tolist() == [int(odelab.Status.SUCCESS), int(odelab.Status.NONFINITE)]
    assert sol.stats["nfe"].tolist() == [20, 20]
    with pytest.raises(odelab.SolveError, match="1 sample"):
        odelab.solve(lambda t, y: y**2, torch.tensor([[0.1], [50.0]]), t, method="euler", dt=0.05)


@pytest.mark.parametrize("make,method", [
    ("lem", "imex"), ("lem", "imex-implicit"), ("lem", "euler"), ("lem", "rk4"),
    ("cornn", "imex"), ("cornn", "symplectic-euler"),
])
def test_unit_step_skips_the_product_by_dt_without_changing_a_bit(make, method):
    """At Δt = 1 the schemes leave out the product by Δt (x·1 is x bit for bit): outputs and gradients equal those
    of the same loop with Δt a tensor, which is always multiplied, exactly (float32, the cells' dtype). rk4's
    stage sums with a number Δt are fused adds (x + c·y in one op, possibly one rounding): equal to round-off."""
    from odelab.solvers.recurrence import run_sequence
    from odelab.solvers.schemes import resolve_scheme
    from odelab.systems import LEM, CoRNN

    torch.manual_seed(0)
    system = (LEM(2, 5) if make == "lem" else CoRNN(2, 5, 1.0, 3.0)).float()
    x = torch.randn(3, 20, 2, dtype=torch.float32)
    results = []
    for dt in (1.0, torch.tensor(1.0, dtype=torch.float32)):
        system.zero_grad()
        seed = torch.Generator().manual_seed(1)
        state = tuple(torch.randn(3, 5, dtype=torch.float32, generator=seed).requires_grad_() for _ in system.blocks)
        out, final = run_sequence(system, resolve_scheme(method), x, state, dt)
        (out.square().mean() + sum(f.sum() for f in final)).backward()
        results.append([out, *final, *(s.grad for s in state), *(p.grad for p in system.parameters())])
    for fast, general in zip(*results):
        assert fast.dtype == general.dtype == torch.float32
        if method == "rk4":
            assert torch.allclose(fast, general, rtol=1e-6, atol=1e-7)
        else:
            assert torch.equal(fast, general)


def test_imex_reversed_is_lem_with_the_other_update_order():
    """``imex-reversed`` on LEM's field (Rusch et al. 2022, eq. 2) updates y first, from the old z, then z from the new
    y: written here from the equations, gates Δ̄t = Δt σ̂(W2 y_{n−1} + V2 u + b2), y_n = (1 − Δ̄t) y_{n−1} +
    Δ̄t tanh(Wy z_{n−1} + Vy u + by), then Δt_n = Δt σ̂(W1 y_n + V1 u + b1), z_n = (1 − Δt_n) z_{n−1} + Δt_n tanh(Wz y_n +
    Vz u + bz). Through Recurrent (no fused kernel for this pair: the generic loop) and odelab.solve."""
    from odelab import Recurrent, cells

    torch.manual_seed(0)
    dt = 0.7
    system = cells.LEM(3, 4, dt=dt).system.double()
    s = {k: v.detach() for k, v in system.symbols().items()}
    x = torch.randn(2, 9, 3, dtype=torch.float64)
    z = y = torch.zeros(2, 4, dtype=torch.float64)
    ys = []
    for n in range(9):
        u = x[:, n]
        gate_y = dt * torch.sigmoid(y @ s["W2"].T + u @ s["V2"].T + s["b2"])
        y = (1 - gate_y) * y + gate_y * torch.tanh(z @ s["Wy"].T + u @ s["Vy"].T + s["by"])
        gate_z = dt * torch.sigmoid(y @ s["W1"].T + u @ s["V1"].T + s["b1"])
        z = (1 - gate_z) * z + gate_z * torch.tanh(y @ s["Wz"].T + u @ s["Vz"].T + s["bz"])
        ys.append(y)
    out, (z_end, y_end) = Recurrent(system, "imex-reversed", dt=dt)(x)
    assert torch.allclose(out, torch.stack(ys, 1), rtol=0, atol=1e-14)
    assert torch.allclose(z_end, z, rtol=0, atol=1e-14)
    imex, _ = Recurrent(system, "imex", dt=dt)(x)
    assert float((imex - out).detach().abs().max()) > 1e-3
