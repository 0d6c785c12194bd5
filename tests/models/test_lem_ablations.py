"""LEM's ablations and layouts (Rusch et al. 2022, App. B; lem.md §1.5, §4.2–4.3): the single-scale cell (Table 9),
gates clipped from below (Fig. 6), chrono initialisation (Table 10), the two-scale ODE (eq. 1) and the official
code's two bias vectors. References are eq. 3 written out here."""
import math

import pytest
import torch

import odelab
from odelab.kernels import find
from odelab.models.cells import PRESETS
from odelab.systems import LEM, SingleScaleLEM, DelayGRU, TauGRU
from odelab.training import build_regressor
from odelab.data.tasks import TASKS


def _lem_loop(S, x, dt, gate_z, gate_y):
    """Eq. 3 with the multiscale steps given by gate_z(y, u), gate_y(y, u) (before Δt)."""
    batch, d = x.shape[0], S["Wy"].shape[0]
    z = y = torch.zeros(batch, d, dtype=x.dtype)
    ys = []
    for u in x.unbind(1):
        a, b = dt * gate_z(y, u), dt * gate_y(y, u)
        z = (1 - a) * z + a * torch.tanh(y @ S["Wz"].T + u @ S["Vz"].T + S["bz"])
        y = (1 - b) * y + b * torch.tanh(z @ S["Wy"].T + u @ S["Vy"].T + S["by"])
        ys.append(y)
    return torch.stack(ys, 1), z, y


def test_single_scale_lem_is_eq3_with_unit_gates():
    """Table 9's "LEM w/o multi-scale": Δt_n = Δt̄_n = Δt 1; 2d² + 2dm + 2d parameters, none of the gates'."""
    torch.manual_seed(0)
    cell = PRESETS["lem-single"](3, 7, dt=0.3).double()
    assert isinstance(cell.system, SingleScaleLEM) and cell.scheme.name == "imex"
    assert sum(p.numel() for p in cell.parameters()) == 2 * 49 + 2 * 7 * 3 + 2 * 7
    S = {k: v.detach() for k, v in cell.system.symbols().items()}
    x = torch.randn(4, 11, 3, dtype=torch.float64)
    out, (z, y) = cell(x)
    one = lambda y, u: torch.ones_like(y)
    ref, z_ref, y_ref = _lem_loop(S, x, 0.3, one, one)
    assert (out - ref).abs().max() < 1e-13 and (z - z_ref).abs().max() < 1e-13
    assert find(cell.system, "imex", x) is None  # no kernel: the generic loop


def test_min_gate_clips_both_steps_and_keeps_the_generic_loop():
    """Fig. 6: the steps Δt σ̂(·) clipped from below (min_gate = 2^-i at Δt = 1); the fused kernels compute the
    unclipped cell, so "auto" steps the generic loop and "fused" says why it cannot."""
    torch.manual_seed(1)
    cell = odelab.cells.LEM(2, 5, dt=1.0, min_gate=0.5).double()
    S = {k: v.detach() for k, v in cell.system.symbols().items()}
    x = 3 * torch.randn(3, 20, 2, dtype=torch.float64)
    sig = lambda W, V, b: (lambda y, u: torch.sigmoid(y @ W.T + u @ V.T + b).clamp(min=0.5))
    ref, _, _ = _lem_loop(S, x, 1.0, sig(S["W1"], S["V1"], S["b1"]), sig(S["W2"], S["V2"], S["b2"]))
    out, _ = cell(x)
    assert (out - ref).abs().max() < 1e-13
    unclipped, _, _ = _lem_loop(S, x, 1.0, lambda y, u: torch.sigmoid(y @ S["W1"].T + u @ S["V1"].T + S["b1"]),
                                lambda y, u: torch.sigmoid(y @ S["W2"].T + u @ S["V2"].T + S["b2"]))
    assert (out - unclipped).abs().max() > 1e-3  # the clip changed the trajectory
    assert cell.kernel(x) is None
    cell.engine = "fused"
    with pytest.raises(ValueError, match="min_gate clips the gates"):
        cell(x)
    with pytest.raises(ValueError, match="min_gate"):
        LEM(2, 5, min_gate=1.5)


def test_chrono_initialisation():
    """Table 10 / App. B.3: every bias 0 except b1 = −log U, U ~ U[1, T_max Δt − 1]; σ̂(b1) = 1/(1 + U)."""
    torch.manual_seed(2)
    T, dt = 1000, 0.5
    cell = odelab.cells.LEM(3, 4000, dt=dt, chrono=T)
    S = cell.system.symbols()
    for name in ("bz", "b2", "by"):
        assert torch.count_nonzero(S[name]) == 0
    U = torch.exp(-S["b1"].detach().double())
    assert U.min() >= 1 - 1e-9 and U.max() <= T * dt - 1 + 1e-6
    assert abs(U.mean().item() - T * dt / 2) < 0.05 * T * dt  # mean of U[1, 499]: 250
    assert abs(float((U < 250).double().mean()) - 249 / 498) < 0.03
    gate = torch.sigmoid(S["b1"].detach())
    assert torch.allclose(gate, 1 / (1 + U.float()), atol=1e-6)
    w = S["Wz"].detach()
    assert 0 < w.abs().max() <= 1 / math.sqrt(4000)  # the weights keep U(−1/√d, 1/√d)
    with pytest.raises(ValueError, match="chrono_horizon"):
        odelab.cells.LEM(3, 4, dt=0.001, chrono=1000)  # T_max Δt = 1: U[1, 0] is empty
    with pytest.raises(ValueError, match="not both"):
        odelab.cells.LEM(3, 4, chrono=10, chrono_horizon=10.0)
    direct = odelab.cells.LEM(3, 4, dt=0.5, chrono_horizon=500.0).system.symbols()["b1"]
    assert torch.exp(-direct).max() <= 499 + 1e-4 and torch.count_nonzero(direct) == 4


def test_two_scale_constructor_gives_eq1():
    """Eq. 1: dy/dt = τ_y (tanh(Wy z + Vy u + by) − y), dz/dt = τ_z (tanh(Wz y + Vz u + bz) − z)."""
    torch.manual_seed(3)
    lem = LEM.two_scale(2, 6, tau_z=0.8, tau_y=0.05).double()
    S = {k: v.detach() for k, v in lem.symbols().items()}
    z, y, u = torch.randn(4, 6).double(), torch.randn(4, 6).double(), torch.randn(4, 2).double()
    dz, dy = lem.derivative(0.0, (z, y), lem.encode(u))
    assert torch.allclose(dy, 0.05 * (torch.tanh(z @ S["Wy"].T + u @ S["Vy"].T + S["by"]) - y), atol=1e-12)
    assert torch.allclose(dz, 0.8 * (torch.tanh(y @ S["Wz"].T + u @ S["Vz"].T + S["bz"]) - z), atol=1e-12)
    with pytest.raises(ValueError, match="tau_y"):
        LEM.two_scale(2, 6, tau_z=0.5, tau_y=1.0)


def test_official_bias_layout_counts_and_gradients():
    """The official cell's two bias vectors: 4d² + 4dm + 8d (nn.LSTM's count; FHN with readout: 1233), the sum acts
    as eq. 3's b, and both vectors get the same gradient (each moves at the learning rate under Adam)."""
    d, m = 16, 1
    model = build_regressor(TASKS["fhn"], "lem-official", m, d, 1)
    assert sum(p.numel() for p in model.parameters()) == 1233
    assert sum(p.numel() for p in build_regressor(TASKS["fhn"], "lem", m, d, 1).parameters()) == 1169
    assert sum(p.numel() for p in torch.nn.LSTM(m, d).parameters()) == 4 * d * d + 4 * d * m + 8 * d
    torch.manual_seed(4)
    cell = PRESETS["lem-official"](2, 5).double()
    system = cell.system
    S = {k: v.detach() for k, v in system.symbols().items()}
    assert torch.equal(S["b1"], (system.bias + system.bias_state).detach()[:5])
    x = torch.randn(3, 9, 2, dtype=torch.float64)
    sig = lambda W, V, b: (lambda y, u: torch.sigmoid(y @ W.T + u @ V.T + b))
    ref, _, _ = _lem_loop(S, x, 1.0, sig(S["W1"], S["V1"], S["b1"]), sig(S["W2"], S["V2"], S["b2"]))
    out, _ = cell(x)
    assert (out - ref).abs().max() < 1e-13
    out.square().sum().backward()
    assert torch.equal(system.bias.grad, system.bias_state.grad) and system.bias.grad.abs().max() > 0


def test_official_bias_runs_the_cpu_kernel_exactly():
    """The kernels read the encoded input (``encode``), so the official layout keeps them: fused = generic."""
    torch.manual_seed(5)
    cell = PRESETS["lem-official"](3, 6, dt=0.4).double()
    x = torch.randn(2, 13, 3, dtype=torch.float64, requires_grad=True)
    if cell.kernel(x) is None:
        pytest.skip("no CPU kernel on this machine (no compiler)")
    out_fused, _ = cell(x)
    grads_fused = torch.autograd.grad(out_fused.sum(), [x, cell.system.bias, cell.system.bias_state])
    cell.engine = "generic"
    out, _ = cell(x)
    grads = torch.autograd.grad(out.sum(), [x, cell.system.bias, cell.system.bias_state])
    assert (out - out_fused).abs().max() < 1e-12
    assert all((a - b).abs().max() < 1e-10 for a, b in zip(grads, grads_fused))


def test_taugru_official_bias_counts():
    """taugru.md §1.8: two biases per affine map, d² + dp + 2d each."""
    d, p = 16, 1
    assert sum(q.numel() for q in TauGRU(p, d, 20, official_bias=True).parameters()) == 4 * (d * d + d * p + 2 * d)
    assert sum(q.numel() for q in DelayGRU(p, d, 20, official_bias=True).parameters()) == \
        3 * d * d + 2 * d * p + 4 * d
    system = TauGRU(p, d, 20, official_bias=True)
    assert torch.equal(system.symbols()["b3"], (system.bias + system.bias_state)[2 * d:3 * d])
