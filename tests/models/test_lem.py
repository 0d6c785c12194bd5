"""LEM: the generic (LEM field, imex, dt) cell equals the paper's discrete cell (000 eq. 3)."""
import pytest
import torch

import odelab
from odelab.systems import LEM
from helpers import lem_eq3


def lem_reference(x, P, dt):
    """Eq. 3 with the final state, from the shared reference."""
    zs, ys = lem_eq3(x, P, dt)
    return ys, (zs[:, -1], ys[:, -1])


@pytest.mark.parametrize("dt", [1.0, 0.37])
def test_lem_cell_matches_paper_eq3_outputs_and_gradients(dt):
    torch.manual_seed(0)
    cell = odelab.cells.LEM(3, 8, dt=dt)
    x = torch.randn(5, 40, 3)
    weights = torch.randn(5, 40, 8)
    out, (z, y) = cell(x)
    ref, (z_ref, y_ref) = lem_reference(x, cell.system.symbols(), dt)
    assert out.shape == (5, 40, 8)
    assert (out - ref).abs().max() < 1e-6
    assert (z - z_ref).abs().max() < 1e-6 and (y - y_ref).abs().max() < 1e-6
    params = list(cell.parameters())
    g = torch.autograd.grad((out * weights).mean(), params)  # a mean loss, as in training: O(1) gradients
    g_ref = torch.autograd.grad((ref * weights).mean(), params)
    for p, a, b in zip(params, g, g_ref):
        assert (a - b).abs().max() < 1e-6, p.shape
        assert a.abs().max() > 0  # every parameter receives a gradient


def test_lem_symbols_are_views_and_init_bound():
    lem = LEM(2, 16)
    S = lem.symbols()
    assert set(S) == {"W1", "W2", "Wz", "Wy", "V1", "V2", "Vz", "Vy", "b1", "b2", "bz", "by"}
    assert S["W1"].shape == (16, 16) and S["V1"].shape == (16, 2) and S["b1"].shape == (16,)
    assert all(s.abs().max() <= 0.25 for s in S.values())  # U(-1/sqrt(16), 1/sqrt(16))
    with torch.no_grad():
        S["Wy"].fill_(0.5)
    assert torch.all(lem.symbols()["Wy"] == 0.5)
    n_params = sum(p.numel() for p in lem.parameters())
    assert n_params == 4 * 16 * 16 + 4 * 16 * 2 + 4 * 16  # eq. 3: 4d^2 + 4dm + 4d


def test_two_scale_ode_is_the_special_case_w1_w2_v1_v2_zero():
    """Eq. 1 (two-scale ODE) = eq. 2 with W1 = W2 = V1 = V2 = 0 and constant biases sigmoid(b1)=tau_z, sigmoid(b2)=tau_y."""
    torch.manual_seed(1)
    lem = LEM(2, 6).double()
    tau_y, tau_z = 0.3, 0.8
    S = lem.symbols()
    with torch.no_grad():
        for name in ("W1", "W2", "V1", "V2"):
            S[name].zero_()
        S["b1"].fill_(torch.logit(torch.tensor(tau_z)).item())
        S["b2"].fill_(torch.logit(torch.tensor(tau_y)).item())
    z, y = torch.randn(4, 6, dtype=torch.float64), torch.randn(4, 6, dtype=torch.float64)
    u = torch.randn(4, 2, dtype=torch.float64)
    dz, dy = lem.derivative(0.0, (z, y), lem.encode(u))
    dy_eq1 = tau_y * (torch.tanh(z @ S["Wy"].T + u @ S["Vy"].T + S["by"]) - y)
    dz_eq1 = tau_z * (torch.tanh(y @ S["Wz"].T + u @ S["Vz"].T + S["bz"]) - z)
    assert torch.allclose(dy, dy_eq1, atol=1e-12) and torch.allclose(dz, dz_eq1, atol=1e-12)
    # and the time-scale separation holds along a solve: with no input, y relaxes slower than z
    sol = odelab.solve(lem, (z, y), torch.linspace(0, 1, 3, dtype=torch.float64), u=torch.zeros(4, 3, 2, dtype=torch.float64),
                       method="rk4", dt=0.01)
    assert sol["z"].shape == (4, 3, 6)


def test_lem_cell_equals_solve_with_hold_input():
    """Recurrent over samples x_1..x_N == solve on t_n = n dt with the hold input (u_n acts on (t_{n-1}, t_n])."""
    torch.manual_seed(2)
    cell = odelab.cells.LEM(2, 4, dt=0.5)
    x = torch.randn(3, 12, 2)
    out, _ = cell(x)
    t = torch.arange(13) * 0.5
    u = torch.cat([x[:, :1], x], dim=1)  # sample at t_0 is never used by the hold convention
    sol = odelab.solve(cell.system, cell.system.initial_state(3), t, u=u, method="imex", dt=0.5)
    assert (sol["y"][:, 1:] - out).abs().max() < 1e-6


def test_lem_runs_under_every_scheme():
    cell_system = LEM(2, 4)
    x = torch.randn(3, 10, 2)
    for scheme in ("euler", "midpoint", "heun", "rk4", "imex", "imex-implicit"):
        out, _ = odelab.Recurrent(cell_system, scheme, 0.5)(x)
        assert out.shape == (3, 10, 4) and torch.isfinite(out).all()
    with pytest.raises(ValueError, match="velocity"):
        odelab.Recurrent(cell_system, "symplectic-euler", 0.5)


def test_recurrent_accepts_a_plain_callable_module():
    """A user vector field f(t, y, u) as an nn.Module: Recurrent with euler = y_n = y + dt f(y, u_n)."""

    class Field(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(2 + 3, 3)

        def forward(self, t, y, u):
            return torch.tanh(self.lin(torch.cat([u, y], -1))) - y

    f = Field()
    model = odelab.Recurrent(f, "euler", 0.5, hidden_size=3)
    assert sum(p.numel() for p in model.parameters()) == 5 * 3 + 3
    x = torch.randn(4, 6, 2)
    out, _ = model(x)
    y, ref = torch.zeros(4, 3), []
    for n in range(6):
        y = y + 0.5 * (torch.tanh(x[:, n] @ f.lin.weight[:, :2].T + y @ f.lin.weight[:, 2:].T + f.lin.bias) - y)
        ref.append(y)
    assert (out - torch.stack(ref, 1)).abs().max() < 1e-6
