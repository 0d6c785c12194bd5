"""Step Jacobians ∂X_n/∂X_{n−1} (``stability.step_jacobians``) against the papers' closed forms: LEM's
I + Δt E + Δt² F (Rusch et al. 2022, App. E.2, eq. 27, E and F written entry by entry below from the paper) and its
∞-norm bound 1 + Γ Δt / 2 (eqs. 30–31); UnICORNN's symplectic step preserves volume (det = 1)."""
import pytest
import torch

import odelab

from odelab import cells
from odelab.analysis import stability
from odelab.solvers import resolve_scheme

F64 = torch.float64


def _lem_e_f(symbols: dict, u: torch.Tensor, z: torch.Tensor, y: torch.Tensor, dt: float):
    """E and F of eq. 27 for one sample, in the paper's interleaved order (row 2i−1: z^i, row 2i: y^i; 0-based here:
    2i and 2i + 1). A = W1 y + V1 u + b1, B = W2 y + V2 u + b2, C = Wz y + Vz u + bz at step ℓ−1, D = Wy z_ℓ + Vy u +
    by with the new z; σ̂ the sigmoid, σ = tanh."""
    s = symbols
    A = s["W1"] @ y + s["V1"] @ u + s["b1"]
    B = s["W2"] @ y + s["V2"] @ u + s["b2"]
    C = s["Wz"] @ y + s["Vz"] @ u + s["bz"]
    sig, dsig = torch.sigmoid, lambda a: torch.sigmoid(a) * (1 - torch.sigmoid(a))
    dtanh = lambda a: 1 - torch.tanh(a) ** 2
    z_new = z + dt * sig(A) * (torch.tanh(C) - z)
    D = s["Wy"] @ z_new + s["Vy"] @ u + s["by"]
    d = z.shape[0]
    E, F = torch.zeros(2 * d, 2 * d, dtype=F64), torch.zeros(2 * d, 2 * d, dtype=F64)
    for i in range(d):
        zi, yi = 2 * i, 2 * i + 1
        E[zi, zi] = -sig(A[i])
        for j in range(d):
            E[zi, 2 * j + 1] = (s["W1"][i, j] * dsig(A[i]) * (torch.tanh(C[i]) - z[i])
                                + s["Wz"][i, j] * sig(A[i]) * dtanh(C[i]))
            E[yi, 2 * j] = s["Wy"][i, j] * sig(B[i]) * dtanh(D[i])
            E[yi, 2 * j + 1] = s["W2"][i, j] * dsig(B[i]) * (torch.tanh(D[i]) - y[i])
            F[yi, 2 * j] = -s["Wy"][i, j] * sig(A[j]) * sig(B[i]) * dtanh(D[i])
            F[yi, 2 * j + 1] = sig(B[i]) * dtanh(D[i]) * sum(
                s["Wy"][i, l] * ((torch.tanh(C[l]) - z[l]) * dsig(A[l]) * s["W1"][l, j]
                                 + sig(A[l]) * dtanh(C[l]) * s["Wz"][l, j]) for l in range(d))
        E[yi, yi] -= sig(B[i])
    return E, F


@pytest.mark.parametrize("dt", [0.1, 0.7])
def test_lem_step_jacobian_is_the_papers_identity(dt):
    """Every step of a random sequence: the autograd Jacobian equals I + Δt E + Δt² F to round-off (1e-12)."""
    torch.manual_seed(0)
    model = cells.LEM(3, 4, dt=dt).double()
    layer = stability.single_layer(model)
    x = torch.randn(2, 6, 3, dtype=F64)
    jacobians = stability.step_jacobians(layer, x)  # (batch, T, 8, 8), blocks (z, y)
    _, states = stability.trajectory(layer, x)
    symbols = {k: v.detach() for k, v in layer.system.symbols().items()}
    d = 4
    order = [i // 2 + (d if i % 2 else 0) for i in range(2 * d)]  # interleaved row k -> odelab's (z, y) index
    for b in range(2):
        for n in range(6):
            z, y = (torch.zeros(d, dtype=F64), torch.zeros(d, dtype=F64)) if n == 0 else \
                (states[n - 1][0][b].detach(), states[n - 1][1][b].detach())
            E, F = _lem_e_f(symbols, x[b, n], z, y, dt)
            paper = torch.eye(2 * d, dtype=F64) + dt * E + dt * dt * F
            ours = jacobians[b, n][order][:, order]
            assert torch.allclose(ours, paper, rtol=0, atol=1e-12), (b, n)


@pytest.mark.parametrize("dt", [0.1, 0.5, 1.0])
def test_lem_step_norm_bound(dt):
    """‖∂X_ℓ/∂X_{ℓ−1}‖_∞ ≤ 1 + Γ Δt / 2, Γ = 2 (1 + η)(1 + 3η), η the largest ∞-norm of W1, W2, Wz, Wy (eqs. 30–31;
    Δt ≤ 1 and a zero start keep the states in [−1, 1]), over 40 steps of a large random input."""
    torch.manual_seed(1)
    model = cells.LEM(2, 5, dt=dt).double()
    layer = stability.single_layer(model)
    x = 3 * torch.randn(2, 40, 2, dtype=F64)
    jacobians = stability.step_jacobians(layer, x)
    s = layer.system.symbols()
    eta = max(float(s[k].detach().abs().sum(1).max()) for k in ("W1", "W2", "Wz", "Wy"))
    gamma = 2 * (1 + eta) * (1 + 3 * eta)
    norms = jacobians.abs().sum(-1).amax(-1)  # (batch, T)
    assert float(norms.max()) <= 1 + gamma * dt / 2


def test_unicornn_symplectic_step_preserves_volume():
    """Symplectic Euler on the Hamiltonian UnICORNN field: det ∂X_n/∂X_{n−1} = 1 for every step (the explicit Euler
    step of the same field does not)."""
    torch.manual_seed(2)
    model = cells.UnICORNN(2, 5, dt=0.8, alpha=0.6).double()
    layer = stability.single_layer(model)
    x = torch.randn(2, 8, 2, dtype=F64)
    det = torch.linalg.det(stability.step_jacobians(layer, x))
    assert torch.allclose(det, torch.ones_like(det), rtol=0, atol=1e-12)
    layer.scheme = resolve_scheme("euler")
    det = torch.linalg.det(stability.step_jacobians(layer, x))
    assert float((det - 1).abs().max()) > 1e-3


def test_delay_cells_are_refused():
    layer = stability.single_layer(cells.TauGRU(2, 3, tau=2.0))
    with pytest.raises(ValueError, match="layer: .* delay system"):
        stability.step_jacobians(layer, torch.randn(1, 4, 2))


def test_lem_gradient_vs_length_against_eq3_and_prop_4_2():
    """Rusch et al. 2022, Prop. 4.2 / Remark E.1 with Δt = N^−s: the study's max_θ |∂E_N/∂θ| equals the gradient of
    eq. 3 written out here (one seed, s = 1/2), the bound (1 + Ŷ) t_N + (1 + Ŷ) Γ t_N² holds, and with s = 1
    (t_N = 1) the gradient stays bounded as N grows (it converges to the ODE's sensitivity)."""
    from odelab.analysis.stability import lem_gradient_vs_length

    result = lem_gradient_vs_length(lengths=(40,), exponents=(0.5,), hidden_size=6, batch=3, seeds=(0,))
    row = result["rows"][0]
    torch.manual_seed(0)
    S = {k: v.detach().double().clone().requires_grad_() for k, v in odelab.systems.LEM(1, 6).symbols().items()}
    x = torch.randn(3, 40, 1, dtype=torch.float64)
    target = 2 * torch.rand(6, dtype=torch.float64) - 1
    dt = 40 ** -0.5
    z = y = torch.zeros(3, 6, dtype=torch.float64)
    for u in x.unbind(1):
        a = dt * torch.sigmoid(y @ S["W1"].T + u @ S["V1"].T + S["b1"])
        b = dt * torch.sigmoid(y @ S["W2"].T + u @ S["V2"].T + S["b2"])
        z = (1 - a) * z + a * torch.tanh(y @ S["Wz"].T + u @ S["Vz"].T + S["bz"])
        y = (1 - b) * y + b * torch.tanh(z @ S["Wy"].T + u @ S["Vy"].T + S["by"])
    loss = 0.5 * ((y - target) ** 2).sum(-1).mean()
    grads = torch.autograd.grad(loss, list(S.values()))
    assert row["max_abs_gradient"] == pytest.approx(max(float(g.abs().max()) for g in grads), rel=1e-9)
    eta = max(float(S[n].detach().abs().sum(1).max()) for n in ("W1", "W2", "Wz", "Wy"))
    y_hat, t_n = float(target.abs().max()), 40 * dt
    bound = (1 + y_hat) * t_n + (1 + y_hat) * 2 * (1 + eta) * (1 + 3 * eta) * t_n ** 2
    assert row["bound"] == pytest.approx(bound, rel=1e-12) and row["max_abs_gradient"] <= bound

    result = lem_gradient_vs_length(lengths=(100, 200, 400, 800), exponents=(1.0, 0.5), hidden_size=8, batch=4,
                                    seeds=(0, 1))
    assert all(r["bound_holds"] for r in result["rows"])
    assert abs(result["slopes"]["1"]["slope"]) < 0.25  # bounded: the bound's rate 2(1 − s) = 0
    assert result["slopes"]["0.5"]["slope"] <= result["slopes"]["0.5"]["bound_rate"]  # no faster than N
